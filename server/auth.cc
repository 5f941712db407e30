#include "server/auth.h"

#include <grp.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/text.h"
#include "grpc/grpc_security_constants.h"

namespace rbln {
namespace {

constexpr char kAnonymous[] = "anonymous";
constexpr char kFdPeerPrefix[] = "fd:";
// A tokens file names people and jobs, not a database: a bound keeps a
// mistaken path (a log, a disk image) from being read whole.
constexpr size_t kMaxTokensFileBytes = 1 << 20;
// A peer in more groups than this is looked at in its first ones only
// (Linux's NGROUPS_MAX is 65536; real users are in a few dozen).
constexpr int kMaxPeerGroups = 1024;

std::string UserName(uid_t uid) {
  passwd entry;
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) != 0 ||
      found == nullptr) {
    return "";
  }
  return entry.pw_name;
}

std::string GroupName(gid_t gid) {
  group entry;
  group* found = nullptr;
  std::vector<char> buffer(65536);
  if (getgrgid_r(gid, &entry, buffer.data(), buffer.size(), &found) != 0 ||
      found == nullptr) {
    return "";
  }
  return entry.gr_name;
}

// The groups the group database lists for `user`, with `gid` (getgrouplist:
// /etc/group, or whatever NSS is configured to read).
std::vector<gid_t> ListedGroups(const std::string& user, gid_t gid) {
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    int count = static_cast<int>(groups.size());
    if (getgrouplist(user.c_str(), gid, groups.data(), &count) >= 0) {
      groups.resize(count);
      return groups;
    }
    // -1: too small; count is now the number needed.
    groups.resize(std::max<size_t>(count, groups.size() * 2));
  }
  return {gid};
}

absl::Status Unauthenticated(absl::string_view message) {
  return absl::UnauthenticatedError(message);
}

}  // namespace

TokenTable::Digest Sha256(absl::string_view data) {
  TokenTable::Digest digest{};
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), digest.data(), &length, EVP_sha256(),
             nullptr);
  return digest;
}

absl::StatusOr<UnixPeer> ReadUnixPeer(int fd) {
  ucred cred{};
  socklen_t length = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) {
    return absl::InternalError(
        absl::StrCat("SO_PEERCRED: ", std::strerror(errno)));
  }
  UnixPeer peer{.uid = cred.uid, .gid = cred.gid, .groups = {}};
  // The peer process's own supplementary groups (Linux 4.13+), not the
  // user database's: a process that dropped a group does not keep it here.
  std::vector<gid_t> groups(kMaxPeerGroups);
  length = groups.size() * sizeof(gid_t);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &length) == 0) {
    groups.resize(length / sizeof(gid_t));
    peer.groups = std::move(groups);
  }
  return peer;
}

void UnixPeerTable::Add(int fd, UnixPeer peer) {
  auto shared = std::make_shared<const UnixPeer>(std::move(peer));
  absl::MutexLock lock(&mu_);
  entries_[fd] = std::move(shared);
}

std::shared_ptr<const UnixPeer> UnixPeerTable::Find(int fd) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(fd);
  return it == entries_.end() ? nullptr : it->second;
}

absl::StatusOr<TokenTable> TokenTable::Parse(absl::string_view text) {
  TokenTable table;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || absl::StartsWith(line, "#")) continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", line_number, ": ", why,
          "; expected NAME SHA256-HEX (printf %s TOKEN | sha256sum)"));
    };
    if (fields.size() != 2) return bad("not two fields");
    const std::string hex = absl::AsciiStrToLower(fields[1]);
    if (hex.size() != 64 ||
        hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return bad("the hash is not 64 hex digits");
    }
    const std::string bytes = absl::HexStringToBytes(hex);
    Digest digest{};
    std::memcpy(digest.data(), bytes.data(), digest.size());
    table.entries_.emplace_back(std::string(fields[0]), digest);
  }
  return table;
}

absl::StatusOr<TokenTable> TokenTable::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  std::string text(kMaxTokensFileBytes + 1, '\0');
  in.read(text.data(), text.size());
  text.resize(in.gcount());
  if (text.size() > kMaxTokensFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is larger than 1 MiB; is it a tokens file?"));
  }
  absl::StatusOr<TokenTable> table = Parse(text);
  if (!table.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", table.status().message()));
  }
  return table;
}

std::optional<std::string> TokenTable::Find(absl::string_view token) const {
  const Digest digest = Sha256(token);
  // Every entry is compared, in constant time each, so the time taken does
  // not say how much of a hash matched.
  std::optional<std::string> found;
  for (const auto& [name, hash] : entries_) {
    if (CRYPTO_memcmp(hash.data(), digest.data(), digest.size()) == 0 &&
        !found.has_value()) {
      found = name;
    }
  }
  return found;
}

absl::StatusOr<std::vector<std::string>> ParseOperators(
    const std::vector<std::string>& values) {
  std::vector<std::string> operators;
  for (const std::string& value : values) {
    for (absl::string_view item :
         absl::StrSplit(value, ',', absl::SkipWhitespace())) {
      item = absl::StripAsciiWhitespace(item);
      absl::string_view rest = item;
      uint32_t uid = 0;
      const bool ok = (absl::ConsumePrefix(&rest, "cn:") ||
                       absl::ConsumePrefix(&rest, "token:") ||
                       absl::ConsumePrefix(&rest, "user:") ||
                       absl::ConsumePrefix(&rest, "group:"))
                          ? !rest.empty()
                          : absl::ConsumePrefix(&rest, "uid:") &&
                                absl::SimpleAtoi(rest, &uid);
      if (!ok) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", Echo(item),
            "' is not an identity; use cn:NAME, token:NAME, uid:N, user:NAME "
            "or group:NAME, comma-separated"));
      }
      operators.emplace_back(item);
    }
  }
  return operators;
}

Authenticator::Authenticator(AuthOptions options)
    : options_(std::move(options)),
      operators_(options_.operators.begin(), options_.operators.end()) {}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(
    AuthOptions options) {
  std::unique_ptr<Authenticator> auth(new Authenticator(std::move(options)));
  if (!auth->options_.tokens_file.empty()) {
    absl::StatusOr<TokenTable> tokens =
        TokenTable::Load(auth->options_.tokens_file);
    if (!tokens.ok()) return tokens.status();
    absl::MutexLock lock(&auth->mu_);
    auth->tokens_ = *std::move(tokens);
  }
  return auth;
}

absl::Status Authenticator::ReloadTokens() {
  if (options_.tokens_file.empty()) return absl::OkStatus();
  absl::StatusOr<TokenTable> tokens = TokenTable::Load(options_.tokens_file);
  if (!tokens.ok()) return tokens.status();
  absl::MutexLock lock(&mu_);
  tokens_ = *std::move(tokens);
  return absl::OkStatus();
}

bool PeerMay(const UnixPeer& peer, uint32_t wanted, uid_t uid, gid_t gid,
             uint32_t mode) {
  if (peer.uid == 0) return true;
  uint32_t bits = mode & 07;  // others
  if (peer.uid == uid) {
    bits = (mode >> 6) & 07;
  } else if (peer.gid == gid ||
             std::find(peer.groups.begin(), peer.groups.end(), gid) !=
                 peer.groups.end()) {
    bits = (mode >> 3) & 07;
  }
  return (bits & wanted) == wanted;
}

bool PeerMayRead(const UnixPeer& peer, uid_t uid, gid_t gid, uint32_t mode) {
  return PeerMay(peer, kMayRead | kMaySearch, uid, gid, mode);
}

Caller Authenticator::UnixCaller(std::shared_ptr<const UnixPeer> peer) const {
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    auto it = unix_callers_.find(*peer);
    if (it != unix_callers_.end() &&
        now - it->second.looked_up < kUnixCallerTtl) {
      return it->second.caller;  // its unix_peer equals `peer`
    }
  }
  Caller caller = LookUpUnixCaller(std::move(peer));
  absl::MutexLock lock(&mu_);
  if (unix_callers_.size() >= kMaxCachedUnixCallers) unix_callers_.clear();
  unix_callers_[*caller.unix_peer] = {caller, now};
  return caller;
}

Caller Authenticator::LookUpUnixCaller(
    std::shared_ptr<const UnixPeer> shared) const {
  const UnixPeer& peer = *shared;
  const std::string user = UserName(peer.uid);
  Caller caller;
  caller.identity = user.empty() ? absl::StrCat("uid:", peer.uid)
                                 : absl::StrCat("user:", user);
  caller.unix_peer = std::move(shared);
  caller.remote = false;
  if (options_.default_operators &&
      (peer.uid == 0 || peer.uid == options_.daemon_uid)) {
    caller.is_operator = true;
    return caller;
  }
  if (operators_.contains(absl::StrCat("uid:", peer.uid)) ||
      (!user.empty() && operators_.contains(absl::StrCat("user:", user)))) {
    caller.is_operator = true;
    return caller;
  }
  // group:NAME: the peer's own groups, and those the group database lists
  // for its user (a process may have dropped some; the role follows the
  // account, as --operators names it).
  std::vector<gid_t> gids = peer.groups;
  gids.push_back(peer.gid);
  if (!user.empty()) {
    const std::vector<gid_t> listed = ListedGroups(user, peer.gid);
    gids.insert(gids.end(), listed.begin(), listed.end());
  }
  for (gid_t gid : gids) {
    const std::string name = GroupName(gid);
    if (!name.empty() && operators_.contains(absl::StrCat("group:", name))) {
      caller.is_operator = true;
      break;
    }
  }
  return caller;
}

absl::StatusOr<Caller> Authenticator::Identify(
    const grpc::ServerContextBase& context) const {
  Caller caller;
  const std::string peer = context.peer();
  // 1. A certificate gRPC's TLS verified against --tls-client-ca.
  std::shared_ptr<const grpc::AuthContext> auth =
      options_.client_certificates ? context.auth_context() : nullptr;
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    std::vector<grpc::string_ref> cn =
        auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
    if (!cn.empty() && cn.front().size() > 0) {
      caller.identity = absl::StrCat(
          "cn:", absl::string_view(cn.front().data(), cn.front().size()));
      caller.is_operator = operators_.contains(caller.identity);
      return caller;
    }
  }
  // A peer on a Unix socket the daemon accepted itself (named "fd:N").
  std::shared_ptr<const UnixPeer> unix_peer;
  absl::string_view fd_text = peer;
  int fd = -1;
  if (absl::ConsumePrefix(&fd_text, kFdPeerPrefix) &&
      absl::SimpleAtoi(fd_text, &fd)) {
    unix_peer = unix_peers_.Find(fd);
    if (unix_peer == nullptr) {
      return Unauthenticated(
          "the credentials of this connection are not known; reconnect");
    }
  }
  // 2. A bearer token. On the Unix socket the peer stays known, so that a
  // token never lets a reader read what its uid could not.
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    absl::string_view value(it->second.data(), it->second.size());
    // The scheme is case-insensitive (RFC 6750, RFC 9110).
    constexpr absl::string_view kScheme = "Bearer ";
    const bool bearer = absl::StartsWithIgnoreCase(value, kScheme);
    if (bearer) value.remove_prefix(kScheme.size());
    if (!bearer || value.empty()) {
      return Unauthenticated(
          "the authorization metadata is not 'Bearer TOKEN'");
    }
    absl::MutexLock lock(&mu_);
    if (!tokens_.has_value()) {
      return Unauthenticated(
          "this daemon takes no bearer tokens (it runs without --tokens); "
          "call without one");
    }
    std::optional<std::string> name = tokens_->Find(value);
    if (!name.has_value()) {
      return Unauthenticated(
          "the bearer token is not one of rbln-artifactd --tokens; check "
          "rbln-artifact --token-file");
    }
    caller.identity = absl::StrCat("token:", *name);
    caller.is_operator = operators_.contains(caller.identity);
    caller.remote = unix_peer == nullptr;
    caller.unix_peer = std::move(unix_peer);
    return caller;
  }
  // 3. The Unix peer.
  if (unix_peer != nullptr) return UnixCaller(std::move(unix_peer));
  // 4. TCP without either.
  bool tokens_required = false;
  {
    absl::MutexLock lock(&mu_);
    tokens_required = tokens_.has_value();
  }
  if (tokens_required) {
    return Unauthenticated(
        "a bearer token is required: give rbln-artifact --token-file FILE "
        "(the daemon checks it against --tokens)");
  }
  caller.identity = kAnonymous;
  return caller;
}

absl::Status CheckMayWrite(const Caller& caller) {
  if (caller.is_operator) return absl::OkStatus();
  if (caller.identity == kAnonymous) {
    return absl::PermissionDeniedError(
        "an anonymous caller (no client certificate, no token) may only "
        "read; an operator may write: run rbln-artifactd with "
        "--tls-client-ca or --tokens and add the caller to --operators");
  }
  return absl::PermissionDeniedError(absl::StrCat(
      caller.identity,
      " may only read; an operator may write: add it to rbln-artifactd "
      "--operators"));
}

}  // namespace rbln
