#ifndef RBLN_SERVER_TLS_FILES_H_
#define RBLN_SERVER_TLS_FILES_H_

// The daemon's TLS files, and their rotation without a restart.
//
// gRPC's FileWatcherCertificateProvider reads its files again on a timer and
// cannot be told to read them now. So the daemon checks the operator's files
// itself (at start, on SIGHUP and every --tls-reload-seconds), and only a
// complete, consistent set (the key matches the certificate, every block
// parses) is copied into a private directory that the watcher follows. The
// copy is switched in one rename of a symbolic link, so that the watcher
// never reads a new key beside an old certificate, and a bad set never
// reaches gRPC: the old one keeps serving and the caller logs why.
//
// Not thread-safe: one thread (the daemon's signal thread) installs.

#include <ctime>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace grpc::experimental {
class CertificateProviderInterface;
}  // namespace grpc::experimental

namespace rbln {

// What --tls-cert, --tls-key and --tls-client-ca name.
struct TlsFilePaths {
  std::string cert;
  std::string key;
  std::string client_ca;  // empty: no client certificates
};

// The contents of a checked set.
struct TlsMaterial {
  std::string cert_chain;
  std::string key;
  std::string client_ca;

  bool operator==(const TlsMaterial& other) const {
    return cert_chain == other.cert_chain && key == other.key &&
           client_ca == other.client_ca;
  }
};

// Reads and checks the files: each exists and is at most 1 MiB, the
// certificate file holds at least one certificate, the key is a private key
// that belongs to the first certificate, and the client CA file (when named)
// holds at least one certificate. Errors name the flag and the file.
absl::StatusOr<TlsMaterial> LoadTlsMaterial(const TlsFilePaths& paths);

class TlsFileMirror {
 public:
  // Prepares `dir` (created with mode 0700, emptied of earlier copies) and
  // installs `first` there.
  static absl::StatusOr<std::unique_ptr<TlsFileMirror>> Create(
      const std::string& dir, const TlsMaterial& first);

  // gRPC's file watcher on the copies, reading them every second (cheap:
  // they are local and small), with the client CA when there is one.
  std::shared_ptr<grpc::experimental::CertificateProviderInterface>
  NewProvider() const;

  // Reads and checks `paths` again; when they differ from what is
  // installed, switches the copies to them. Returns whether anything
  // changed; on an error nothing changed.
  absl::StatusOr<bool> Reload(const TlsFilePaths& paths);

 private:
  TlsFileMirror(std::string dir, TlsMaterial installed, bool client_ca)
      : dir_(std::move(dir)),
        installed_(std::move(installed)),
        client_ca_(client_ca) {}

  absl::Status Install(const TlsMaterial& material);

  const std::string dir_;
  TlsMaterial installed_;
  const bool client_ca_;
  int generation_ = 0;
  time_t last_mtime_ = 0;
};

}  // namespace rbln

#endif  // RBLN_SERVER_TLS_FILES_H_
