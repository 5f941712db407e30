#include "server/tls_files.h"

#include <fcntl.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace rbln {
namespace {

// Certificate chains and keys are a few KiB; a bigger file is a mistake
// (a wrong path), and must not be read whole into memory.
constexpr std::uintmax_t kMaxTlsFileBytes = 1 << 20;

// The watcher's period on the private copies: they change only when this
// class switches them, so reading often costs little and makes a rotation
// visible within a second.
constexpr int kWatchSeconds = 1;

constexpr char kCurrent[] = "current";
constexpr char kCertName[] = "cert.pem";
constexpr char kKeyName[] = "key.pem";
constexpr char kClientCaName[] = "client-ca.pem";

std::string OpenSslError() {
  const unsigned long code = ERR_get_error();  // NOLINT(runtime/int)
  ERR_clear_error();
  if (code == 0) return "no PEM block of the expected kind";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& flag,
                                          const std::string& path) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", flag, " ", path, ": ", ec.message()));
  }
  if (size > kMaxTlsFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " ", path, " is ", size, " bytes; a PEM file is at most ",
        kMaxTlsFileBytes, " (is it the right file?)"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", flag, " ", path, ": ", strerror(errno)));
  }
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct KeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// The first certificate of `pem`, checking that every block parses.
absl::StatusOr<X509Ptr> FirstCertificate(const std::string& flag,
                                         const std::string& path,
                                         const std::string& pem) {
  BioPtr bio = MemoryBio(pem);
  X509Ptr first;
  int count = 0;
  while (true) {
    X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (cert == nullptr) break;
    if (first == nullptr) first = std::move(cert);
    ++count;
  }
  // The loop ends at the end of the text (PEM_R_NO_START_LINE) or at a
  // block that does not parse: only the first is fine.
  const unsigned long last = ERR_peek_last_error();  // NOLINT(runtime/int)
  const bool at_end = ERR_GET_LIB(last) == ERR_LIB_PEM &&
                      ERR_GET_REASON(last) == PEM_R_NO_START_LINE;
  if (count == 0 || (last != 0 && !at_end)) {
    const std::string why = at_end ? "" : absl::StrCat(": ", OpenSslError());
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path,
                     count == 0 ? " holds no PEM certificate"
                                : " holds a certificate that does not parse",
                     why));
  }
  ERR_clear_error();
  return first;
}

}  // namespace

absl::StatusOr<TlsMaterial> LoadTlsMaterial(const TlsFilePaths& paths) {
  TlsMaterial material;
  absl::StatusOr<std::string> cert = ReadSmallFile("--tls-cert", paths.cert);
  if (!cert.ok()) return cert.status();
  material.cert_chain = *std::move(cert);
  absl::StatusOr<X509Ptr> leaf =
      FirstCertificate("--tls-cert", paths.cert, material.cert_chain);
  if (!leaf.ok()) return leaf.status();

  absl::StatusOr<std::string> key = ReadSmallFile("--tls-key", paths.key);
  if (!key.ok()) return key.status();
  material.key = *std::move(key);
  BioPtr key_bio = MemoryBio(material.key);
  std::unique_ptr<EVP_PKEY, KeyFree> private_key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (private_key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key ", paths.key,
                     " holds no private key that parses: ", OpenSslError()));
  }
  if (X509_check_private_key(leaf->get(), private_key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-key ", paths.key, " does not belong to the certificate in ",
        "--tls-cert ", paths.cert,
        " (rotate both files together, then send SIGHUP)"));
  }

  if (!paths.client_ca.empty()) {
    absl::StatusOr<std::string> ca =
        ReadSmallFile("--tls-client-ca", paths.client_ca);
    if (!ca.ok()) return ca.status();
    material.client_ca = *std::move(ca);
    absl::StatusOr<X509Ptr> first = FirstCertificate(
        "--tls-client-ca", paths.client_ca, material.client_ca);
    if (!first.ok()) return first.status();
  }
  return material;
}

absl::StatusOr<std::unique_ptr<TlsFileMirror>> TlsFileMirror::Create(
    const std::string& dir, const TlsMaterial& first) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", dir, ": ", strerror(errno)));
  }
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      st.st_uid != geteuid()) {
    return absl::PermissionDeniedError(
        absl::StrCat(dir,
                     " must be a directory of the daemon's own user (it holds "
                     "copies of the TLS key); remove it and start again"));
  }
  if (chmod(dir.c_str(), 0700) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot chmod 0700 ", dir, ": ", strerror(errno)));
  }
  // Copies left by an earlier run (one that was killed) go first.
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::filesystem::remove_all(entry.path(), ec);
  }
  std::unique_ptr<TlsFileMirror> mirror(
      new TlsFileMirror(dir, first, !first.client_ca.empty()));
  RBLN_RETURN_IF_ERROR(mirror->Install(first));
  return mirror;
}

std::shared_ptr<grpc::experimental::CertificateProviderInterface>
TlsFileMirror::NewProvider() const {
  const std::string current = absl::StrCat(dir_, "/", kCurrent, "/");
  return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      current + kKeyName, current + kCertName,
      client_ca_ ? current + kClientCaName : std::string(), kWatchSeconds);
}

absl::StatusOr<bool> TlsFileMirror::Reload(const TlsFilePaths& paths) {
  RBLN_ASSIGN_OR_RETURN(TlsMaterial material, LoadTlsMaterial(paths));
  if (material.client_ca.empty() != !client_ca_) {
    return absl::InvalidArgumentError(
        "--tls-client-ca cannot be added or dropped by a reload; restart the "
        "daemon for that");
  }
  if (material == installed_) return false;
  RBLN_RETURN_IF_ERROR(Install(material));
  installed_ = std::move(material);
  return true;
}

namespace {

// Writes `text` to a new file `path` (mode 0600) whose modification time is
// `mtime`.
absl::Status WritePrivateFile(const std::string& path, const std::string& text,
                              const timespec& mtime) {
  const int fd = open(
      path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create ", path, ": ", strerror(errno)));
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = errno;
      close(fd);
      return absl::InternalError(
          absl::StrCat("cannot write ", path, ": ", strerror(saved)));
    }
    done += static_cast<size_t>(n);
  }
  const timespec times[2] = {mtime, mtime};
  const bool timed = futimens(fd, times) == 0;
  const int saved = errno;
  close(fd);
  if (!timed) {
    return absl::InternalError(
        absl::StrCat("cannot set the time of ", path, ": ", strerror(saved)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TlsFileMirror::Install(const TlsMaterial& material) {
  const std::string name = absl::StrCat("gen-", ++generation_);
  const std::string sub = absl::StrCat(dir_, "/", name);
  if (mkdir(sub.c_str(), 0700) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot create ", sub, ": ", strerror(errno)));
  }
  // gRPC's watcher re-reads when a file's modification time (in whole
  // seconds) changed between its looks; each generation is one second
  // newer than the last, so that even two reloads within a second are seen.
  const time_t now = time(nullptr);
  last_mtime_ = now > last_mtime_ ? now : last_mtime_ + 1;
  const timespec mtime = {.tv_sec = last_mtime_, .tv_nsec = 0};
  RBLN_RETURN_IF_ERROR(WritePrivateFile(absl::StrCat(sub, "/", kCertName),
                                        material.cert_chain, mtime));
  RBLN_RETURN_IF_ERROR(
      WritePrivateFile(absl::StrCat(sub, "/", kKeyName), material.key, mtime));
  if (client_ca_) {
    RBLN_RETURN_IF_ERROR(WritePrivateFile(absl::StrCat(sub, "/", kClientCaName),
                                          material.client_ca, mtime));
  }
  // One rename switches all three files at once.
  const std::string link = absl::StrCat(dir_, "/", kCurrent, ".new");
  unlink(link.c_str());
  if (symlink(name.c_str(), link.c_str()) != 0 ||
      rename(link.c_str(), absl::StrCat(dir_, "/", kCurrent).c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot switch ", dir_, "/",
                                            kCurrent, ": ", strerror(errno)));
  }
  // The generation before this one may still be mid-read by the watcher;
  // the one before that is not.
  std::error_code ec;
  std::filesystem::remove_all(absl::StrCat(dir_, "/gen-", generation_ - 2), ec);
  return absl::OkStatus();
}

}  // namespace rbln
