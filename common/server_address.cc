#include "common/server_address.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/text.h"

namespace rbln {
namespace {

bool AllDigits(absl::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c));
  });
}

absl::Status Malformed(absl::string_view text, absl::string_view hint) {
  return absl::InvalidArgumentError(absl::StrCat(
      "expected unix:PATH, HOST:PORT or an absolute path (a Unix socket), "
      "got '",
      Echo(text), "' (", hint, ")"));
}

// The longest path a Unix socket address holds (sun_path, less its NUL).
constexpr size_t kMaxUnixPathBytes = 107;

absl::StatusOr<ServerAddress> UnixAddress(absl::string_view text,
                                          ServerAddress::Kind kind,
                                          absl::string_view path) {
  if (path.size() > kMaxUnixPathBytes) {
    return Malformed(text,
                     absl::StrCat("a Unix socket's path may have at most ",
                                  kMaxUnixPathBytes, " bytes, this one has ",
                                  path.size(), "; choose a shorter one"));
  }
  ServerAddress address;
  address.kind = kind;
  address.path = std::string(path);
  return address;
}

}  // namespace

absl::StatusOr<ServerAddress> ParseServerAddress(absl::string_view text) {
  ServerAddress address;
  absl::string_view rest = text;
  if (absl::StartsWith(text, "unix-abstract:")) {
    // No file, so no mode or group: anyone on the host could connect.
    return Malformed(text,
                     "an abstract Unix socket has no permissions to guard "
                     "it; give unix:PATH");
  }
  if (absl::ConsumePrefix(&rest, "unix:")) {
    address.kind = ServerAddress::Kind::kUnix;
    if (rest.empty()) {
      return Malformed(text,
                       "a Unix socket needs a path, e.g. "
                       "unix:/run/rbln-artifactd/rbln-artifactd.sock");
    }
    return UnixAddress(text, address.kind, rest);
  }
  if (text.empty()) return Malformed(text, "it is empty");
  if (AllDigits(text)) {
    return Malformed(text, absl::StrCat("did you mean 0.0.0.0:", text,
                                        " or localhost:", text, "?"));
  }
  if (absl::StartsWith(text, "/")) {
    return UnixAddress(text, ServerAddress::Kind::kUnix, text);
  }
  // A URL or a gRPC target scheme: the address is what follows it.
  for (absl::string_view scheme :
       {"http://", "https://", "grpc://", "tcp://", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(text, scheme)) {
      return Malformed(text, absl::StrCat("no scheme: give HOST:PORT without '",
                                          scheme, "'"));
    }
  }
  if (text == "unix") {
    return Malformed(
        text, "did you mean unix:/run/rbln-artifactd/rbln-artifactd.sock?");
  }
  if (absl::StartsWith(text, ".") || absl::EndsWith(text, ".sock")) {
    return Malformed(text,
                     absl::StrCat("a Unix socket's path is absolute; did you "
                                  "mean unix:",
                                  text, "?"));
  }
  const size_t colon = text.rfind(':');
  if (colon == absl::string_view::npos) {
    return Malformed(
        text, absl::StrCat("a host needs a port, e.g. ", text, ":50051"));
  }
  absl::string_view host = text.substr(0, colon);
  const absl::string_view port = text.substr(colon + 1);
  if (absl::ConsumePrefix(&host, "[")) {
    if (!absl::ConsumeSuffix(&host, "]") || host.empty()) {
      return Malformed(text, "an IPv6 host goes in brackets, e.g. [::1]:50051");
    }
  } else if (host.find(':') != absl::string_view::npos) {
    return Malformed(text, "an IPv6 host goes in brackets, e.g. [::1]:50051");
  }
  if (host.empty()) {
    return AllDigits(port)
               ? Malformed(text, absl::StrCat("no host; did you mean 0.0.0.0",
                                              text, " or localhost", text, "?"))
               : Malformed(text, "no host, and the port is not a number");
  }
  uint32_t number = 0;
  if (!AllDigits(port) || !absl::SimpleAtoi(port, &number) || number == 0 ||
      number > 65535) {
    return Malformed(text, "the port is a number from 1 to 65535");
  }
  address.kind = ServerAddress::Kind::kTcp;
  address.host = std::string(host);
  address.port = static_cast<uint16_t>(number);
  return address;
}

std::string GrpcTarget(const ServerAddress& address) {
  switch (address.kind) {
    case ServerAddress::Kind::kUnix:
      return absl::StrCat("unix:", address.path);
    case ServerAddress::Kind::kTcp:
      break;
  }
  return address.host.find(':') != std::string::npos
             ? absl::StrCat("[", address.host, "]:", address.port)
             : absl::StrCat(address.host, ":", address.port);
}

}  // namespace rbln
