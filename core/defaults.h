// Defaults shared by the daemon and its client, so that both find each other
// with no flags.
//
//   socket: $RBLN_ARTIFACTD_SOCKET, else /run/rbln-artifactd.sock for root,
//           else $XDG_RUNTIME_DIR/rbln-artifactd.sock, else
//           /tmp/rbln-artifactd-<uid>.sock
//   store:  $RBLN_ARTIFACTD_STORE, else /var/lib/rbln-artifactd for root,
//           else ~/.local/share/rbln-artifactd
#ifndef RBLN_CORE_DEFAULTS_H_
#define RBLN_CORE_DEFAULTS_H_

#include <string>

namespace rbln {

// The default listen/connect address, "unix:<path>".
std::string DefaultServerAddress();
// The default store directory.
std::string DefaultStoreDir();

}  // namespace rbln

#endif  // RBLN_CORE_DEFAULTS_H_
