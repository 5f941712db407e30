// Who is calling, and may they write (docs/security.md, "Callers and
// roles"). A caller is named by the first of these that applies:
//
//   cn:NAME      the Common Name of a client certificate that gRPC's TLS
//                verified against --tls-client-ca;
//   token:NAME   a bearer token ("authorization: Bearer TOKEN") whose SHA-256
//                is listed under NAME in the --tokens file;
//   user:NAME    a peer on a Unix socket this daemon accepted itself
//   (uid:N)      (UnixPeerTable), by SO_PEERCRED; uid:N when the uid has no
//                name. Its groups (SO_PEERGROUPS) match group:NAME entries.
//
// Operators (--operators, plus uid 0 and the daemon's own uid on a Unix
// socket unless --no-default-operators) may write; every other caller only
// reads. A TCP caller with neither a certificate nor a token is anonymous (a
// reader) unless --tokens is given, which makes a token required.
//
// Thread-safe: Identify and CheckMayWrite run concurrently in handlers;
// ReloadTokens may run at the same time (SIGHUP).
#ifndef RBLN_SERVER_AUTH_H_
#define RBLN_SERVER_AUTH_H_

#include <sys/types.h>

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/server_context.h"

namespace rbln {

// The credentials of a Unix-socket peer at connect time.
struct UnixPeer {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups, when the kernel says

  friend bool operator==(const UnixPeer& a, const UnixPeer& b) {
    return a.uid == b.uid && a.gid == b.gid && a.groups == b.groups;
  }
  template <typename H>
  friend H AbslHashValue(H h, const UnixPeer& peer) {
    return H::combine(std::move(h), peer.uid, peer.gid, peer.groups);
  }
};

// An authenticated caller, as the request log and error messages name it.
struct Caller {
  std::string identity;  // "cn:fleet-job", "token:ci", "user:alice", ...
  bool is_operator = false;
  // Set for a Unix-socket peer: a reader there may read only what its own
  // uid and groups could (PeerMayRead).
  std::shared_ptr<const UnixPeer> unix_peer;
  // Not on the daemon's Unix socket (over TCP, say): on another host, so an
  // absolute path names nothing it shares with the daemon. Remote unless
  // shown to be local (a peer on the daemon's Unix socket, whose
  // credentials UnixPeerTable holds), so that any other caller fails closed.
  bool remote = true;

  absl::string_view role() const { return is_operator ? "operator" : "reader"; }
};

// Whether `peer` could list and read a directory owned by `uid`:`gid` with
// permission bits `mode`: the owner's bits when it owns it, else the group's
// when it is in the group, else the others'; uid 0 always may. The daemon
// reads as root, so it reads for a reader only what the reader could read.
bool PeerMayRead(const UnixPeer& peer, uid_t uid, gid_t gid, uint32_t mode);

// The same for any of the permission bits `wanted` (kMayRead, kMaySearch,
// or both): a directory on the way to an artifact needs only search.
inline constexpr uint32_t kMayRead = 04;
inline constexpr uint32_t kMaySearch = 01;
bool PeerMay(const UnixPeer& peer, uint32_t wanted, uid_t uid, gid_t gid,
             uint32_t mode);

// Reads SO_PEERCRED (and SO_PEERGROUPS) of a connected Unix socket.
absl::StatusOr<UnixPeer> ReadUnixPeer(int fd);

// Connections accepted on the daemon's Unix sockets, by descriptor. gRPC
// names a connection handed to it by grpc::AddInsecureChannelFromFd
// "fd:N" (ServerContext::peer()), so a handler finds its caller's
// credentials here.
//
// A descriptor number names one connection for as long as a call on it
// runs: gRPC's transport closes it only once the connection's last call is
// done. The number can then be reused, and the listener adds every
// connection it accepts before gRPC sees it, replacing what an earlier
// connection on that number left; so a reused number inherits nothing, and
// a lookup needs no system call. (A number reused by a descriptor that is
// no connection of ours is never named by a call.)
class UnixPeerTable {
 public:
  void Add(int fd, UnixPeer peer);
  // The peer of the connection on `fd`, or null when none was added.
  std::shared_ptr<const UnixPeer> Find(int fd) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, std::shared_ptr<const UnixPeer>> entries_
      ABSL_GUARDED_BY(mu_);
};

// The --tokens file: lines of "NAME SHA256-HEX", '#' comments, blank lines.
// It holds hashes only, so it is no secret. Lookup hashes the presented
// token and compares it with every entry in constant time.
class TokenTable {
 public:
  using Digest = std::array<unsigned char, 32>;

  // INVALID_ARGUMENT naming the line for a malformed file; the read error
  // otherwise.
  static absl::StatusOr<TokenTable> Load(const std::string& path);
  static absl::StatusOr<TokenTable> Parse(absl::string_view text);

  // The NAME whose hash is SHA-256(token), or nullopt.
  std::optional<std::string> Find(absl::string_view token) const;
  size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<std::string, Digest>> entries_;
};

// SHA-256 of `data` (OpenSSL).
TokenTable::Digest Sha256(absl::string_view data);

struct AuthOptions {
  // --operators, each checked by ParseOperators.
  std::vector<std::string> operators;
  // Unix peers with uid 0 or the daemon's own uid are operators.
  bool default_operators = true;
  uid_t daemon_uid = 0;
  // --tokens FILE, or "" for none (then tokens are refused).
  std::string tokens_file;
  // --tls-client-ca given: a verified certificate's CN names the caller.
  bool client_certificates = false;
};

// Splits and checks --operators values ("cn:a,uid:0" may also come as
// several values): each must be cn:NAME, token:NAME, uid:N, user:NAME or
// group:NAME. INVALID_ARGUMENT names a bad one.
absl::StatusOr<std::vector<std::string>> ParseOperators(
    const std::vector<std::string>& values);

class Authenticator {
 public:
  // Loads the tokens file when one is named.
  static absl::StatusOr<std::unique_ptr<Authenticator>> Create(
      AuthOptions options);

  // Names the caller of `context`, or UNAUTHENTICATED saying what is
  // missing or wrong.
  absl::StatusOr<Caller> Identify(const grpc::ServerContextBase& context) const;

  // Reads the tokens file again; on failure the old table stays.
  absl::Status ReloadTokens();

  UnixPeerTable* unix_peers() { return &unix_peers_; }

 private:
  explicit Authenticator(AuthOptions options);
  // The caller a Unix peer is: its user and groups looked up in the user
  // and group databases, at most once per kUnixCallerTtl for the same
  // credentials (a lookup reads /etc/passwd and /etc/group; a change there
  // takes effect within the TTL).
  Caller UnixCaller(std::shared_ptr<const UnixPeer> peer) const;
  Caller LookUpUnixCaller(std::shared_ptr<const UnixPeer> peer) const;
  static constexpr absl::Duration kUnixCallerTtl = absl::Seconds(5);
  // Past this many credentials the cache starts again.
  static constexpr size_t kMaxCachedUnixCallers = 4096;
  struct CachedCaller {
    Caller caller;
    absl::Time looked_up;
  };

  const AuthOptions options_;
  const absl::flat_hash_set<std::string> operators_;
  UnixPeerTable unix_peers_;
  mutable absl::Mutex mu_;
  std::optional<TokenTable> tokens_ ABSL_GUARDED_BY(mu_);
  mutable absl::flat_hash_map<UnixPeer, CachedCaller> unix_callers_
      ABSL_GUARDED_BY(mu_);
};

// OK for an operator; PERMISSION_DENIED naming the caller and
// --operators otherwise.
absl::Status CheckMayWrite(const Caller& caller);

}  // namespace rbln

#endif  // RBLN_SERVER_AUTH_H_
