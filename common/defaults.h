// Defaults the daemon and its client share, so that both find each other
// with no flags: the daemon's socket, the client's address, the store. Each
// reads the environment when called (README.md documents the same order).
//
// Thread-safe as getenv is: while no thread changes the environment.
#ifndef RBLN_COMMON_DEFAULTS_H_
#define RBLN_COMMON_DEFAULTS_H_

#include <string>

namespace rbln {

// The environment variables read here.
inline constexpr char kAddressEnv[] = "RBLN_ARTIFACTD_ADDRESS";
inline constexpr char kSocketEnv[] = "RBLN_ARTIFACTD_SOCKET";
inline constexpr char kStoreEnv[] = "RBLN_ARTIFACTD_STORE";

// The system daemon's socket: the unit's RuntimeDirectory=rbln-artifactd.
inline constexpr char kSystemSocket[] =
    "/run/rbln-artifactd/rbln-artifactd.sock";

// The daemon's default --listen address, "unix:<path>": $RBLN_ARTIFACTD_SOCKET,
// else $RUNTIME_DIRECTORY/rbln-artifactd.sock (systemd's RuntimeDirectory=,
// deploy/rbln-artifactd.service), else kSystemSocket for root, else the
// per-user socket: $XDG_RUNTIME_DIR/rbln-artifactd.sock, else
// /tmp/rbln-artifactd-<uid>.sock.
std::string DefaultServerAddress();
// The client's default --server address: $RBLN_ARTIFACTD_ADDRESS as given
// (any form of common/server_address.h; the client checks it), else
// $RBLN_ARTIFACTD_SOCKET (its older alias), else `system_socket` unless
// nothing is there (whoever runs the client; one it may not even stat
// counts), else the daemon's default without $RUNTIME_DIRECTORY.
// `system_socket` is kSystemSocket except in tests.
std::string DefaultClientAddress(
    const std::string& system_socket = kSystemSocket);
// The default store directory: $RBLN_ARTIFACTD_STORE, else
// /var/lib/rbln-artifactd for root, else ~/.local/share/rbln-artifactd, else
// (no $HOME) /tmp/rbln-artifactd-store-<uid>.
std::string DefaultStoreDir();

}  // namespace rbln

#endif  // RBLN_COMMON_DEFAULTS_H_
