// Defaults shared by the daemon and its client, so that both find each other
// with no flags.
//
//   daemon: $RBLN_ARTIFACTD_SOCKET, else $RUNTIME_DIRECTORY/rbln-artifactd.sock
//           (systemd's RuntimeDirectory=, deploy/rbln-artifactd.service),
//           else kSystemSocket for root, else the per-user socket:
//           $XDG_RUNTIME_DIR/rbln-artifactd.sock, else
//           /tmp/rbln-artifactd-<uid>.sock
//   client: $RBLN_ARTIFACTD_ADDRESS (any form of common/server_address.h),
//           else $RBLN_ARTIFACTD_SOCKET (its older alias), else kSystemSocket
//           when it exists (whoever runs the client), else the daemon's
//           default without $RUNTIME_DIRECTORY (kSystemSocket for root, the
//           per-user socket for others)
//   store:  $RBLN_ARTIFACTD_STORE, else /var/lib/rbln-artifactd for root,
//           else ~/.local/share/rbln-artifactd
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

// The daemon's default --listen address, "unix:<path>".
std::string DefaultServerAddress();
// The client's default --server address: $RBLN_ARTIFACTD_ADDRESS as given
// (the client checks it), else as the table above says. `system_socket` is
// kSystemSocket except in tests.
std::string DefaultClientAddress(
    const std::string& system_socket = kSystemSocket);
// The default store directory.
std::string DefaultStoreDir();

}  // namespace rbln

#endif  // RBLN_COMMON_DEFAULTS_H_
