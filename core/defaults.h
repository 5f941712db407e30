// Defaults shared by the daemon and its client, so that both find each other
// with no flags.
//
//   socket: $RBLN_ARTIFACTD_SOCKET, else /run/rbln-artifactd.sock for root,
//           else $XDG_RUNTIME_DIR/rbln-artifactd.sock, else
//           /tmp/rbln-artifactd-<uid>.sock
//   client: $RBLN_ARTIFACTD_ADDRESS (any form of core/server_address.h),
//           else the socket above ($RBLN_ARTIFACTD_SOCKET is its older alias)
//   store:  $RBLN_ARTIFACTD_STORE, else /var/lib/rbln-artifactd for root,
//           else ~/.local/share/rbln-artifactd
#ifndef RBLN_CORE_DEFAULTS_H_
#define RBLN_CORE_DEFAULTS_H_

#include <string>

namespace rbln {

// The environment variables read here.
inline constexpr char kAddressEnv[] = "RBLN_ARTIFACTD_ADDRESS";
inline constexpr char kSocketEnv[] = "RBLN_ARTIFACTD_SOCKET";
inline constexpr char kStoreEnv[] = "RBLN_ARTIFACTD_STORE";

// The daemon's default --listen address, "unix:<path>".
std::string DefaultServerAddress();
// The client's default --server address: $RBLN_ARTIFACTD_ADDRESS as given
// (the client checks it), else DefaultServerAddress().
std::string DefaultClientAddress();
// The default store directory.
std::string DefaultStoreDir();

}  // namespace rbln

#endif  // RBLN_CORE_DEFAULTS_H_
