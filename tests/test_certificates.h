// Test certificates for TLS between the real daemon and client
// (tests/auth_test.cc, and TCP writes in other end-to-end tests, which need
// an operator's certificate; tests/daemon_testing.h has their flags) and for
// server/tls_files_test.cc. Header-only: that test links none of the test
// libraries of tests/.
#ifndef RBLN_TESTS_TEST_CERTIFICATES_H_
#define RBLN_TESTS_TEST_CERTIFICATES_H_

// For server/tls_files_test.cc, which had it through this header and is
// outside tests/ (the include belongs there).
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/testing/test_util.h"
#include "gtest/gtest.h"

namespace rbln::e2e {

// Runs a shell command; fails the test unless it exits 0.
inline void RunOrFail(const std::string& command) {
  std::string output;
  ASSERT_EQ(rbln::testing::RunCommand(command, &output), 0) << command << "\n"
                                                            << output;
}

// Certificates made by the openssl command, in a directory of their own
// removed with the object: a CA ("ca"); the daemon's ("server", SAN
// 127.0.0.1 and localhost); clients "operator" (CN operator) and "reader"
// (CN reader) of that CA; and "stranger" (CN operator) of another CA
// ("foreign-ca"). P-256 keys: quick to make.
class Certificates {
 public:
  Certificates() {
    const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1";
    for (const char* ca : {"ca", "foreign-ca"}) {
      RunOrFail(absl::StrCat("cd ", QuotedDir(), " && openssl req -x509 ", ec,
                             " -nodes -days 2 -subj /CN=", ca, " -keyout ", ca,
                             ".key -out ", ca, ".pem 2>&1"));
    }
    ::rbln::testing::WriteFileOrDie(
        dir_.Join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "extendedKeyUsage=serverAuth\n");
    ::rbln::testing::WriteFileOrDie(dir_.Join("client.ext"),
                                    "extendedKeyUsage=clientAuth\n");
    Issue("server", "ca", "localhost", "server.ext");
    Issue("operator", "ca", "operator", "client.ext");
    Issue("reader", "ca", "reader", "client.ext");
    Issue("stranger", "foreign-ca", "operator", "client.ext");
    // The server's certificate after a rotation to another CA.
    Issue("rotated", "foreign-ca", "localhost", "server.ext");
  }

  std::string Pem(absl::string_view name) const {
    return dir_.Join(absl::StrCat(name, ".pem"));
  }
  std::string Key(absl::string_view name) const {
    return dir_.Join(absl::StrCat(name, ".key"));
  }

 private:
  void Issue(const std::string& name, const std::string& ca,
             const std::string& cn, const std::string& ext) {
    RunOrFail(absl::StrCat(
        "cd ", QuotedDir(),
        " && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
        "-nodes -subj /CN=",
        cn, " -keyout ", name, ".key -out ", name,
        ".csr 2>&1 && openssl x509 -req -days 2 -in ", name, ".csr -CA ", ca,
        ".pem -CAkey ", ca, ".key -CAcreateserial -extfile ", ext, " -out ",
        name, ".pem 2>&1"));
  }

  // The directory as one word of a shell command.
  std::string QuotedDir() const {
    return absl::StrCat("'", absl::StrReplaceAll(dir_.path(), {{"'", "'\\''"}}),
                        "'");
  }

  ::rbln::testing::TempDir dir_;
};

}  // namespace rbln::e2e

#endif  // RBLN_TESTS_TEST_CERTIFICATES_H_
