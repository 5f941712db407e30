// The addresses rbln-artifactd listens on (--listen) and rbln-artifact
// connects to (--server, $RBLN_ARTIFACTD_ADDRESS), README.md: "unix:PATH",
// "HOST:PORT", or a bare absolute path (a Unix socket). They are
// checked here, before gRPC sees them, so that a mistake ("50051") gets a
// message saying what is accepted and what was likely meant, instead of a
// gRPC log line.
//
// Thread-safe: pure functions.
#ifndef RBLN_COMMON_SERVER_ADDRESS_H_
#define RBLN_COMMON_SERVER_ADDRESS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rbln {

struct ServerAddress {
  enum class Kind {
    kUnix,  // unix:PATH, or /PATH
    kTcp,   // HOST:PORT, [IPv6]:PORT
  };
  Kind kind = Kind::kUnix;
  std::string path;   // kUnix
  std::string host;   // kTcp, without the brackets of an IPv6 address
  uint16_t port = 0;  // kTcp, 1..65535
};

// Parses `text`. INVALID_ARGUMENT reads "expected unix:PATH, HOST:PORT or an
// absolute path (a Unix socket), got '50051' (did you mean 0.0.0.0:50051 or
// localhost:50051?)", for the caller to prefix with its flag.
absl::StatusOr<ServerAddress> ParseServerAddress(absl::string_view text);

// `address` as gRPC takes it: "unix:PATH" (also for a bare path),
// "HOST:PORT" or "[IPv6]:PORT".
std::string GrpcTarget(const ServerAddress& address);

}  // namespace rbln

#endif  // RBLN_COMMON_SERVER_ADDRESS_H_
