// Who may connect to rbln-artifactd's Unix sockets: their mode
// (--socket-mode, octal) and group (--socket-group, a name or a number), so
// that a serving process that is not root, in that group, can connect.
//
// Thread-safe: ResolveGroup uses the reentrant getgrnam_r.
#ifndef RBLN_SERVER_SOCKET_ACCESS_H_
#define RBLN_SERVER_SOCKET_ACCESS_H_

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rbln {

// Parses an octal mode of permission bits only, at most 0777 ("0660",
// "660"). INVALID_ARGUMENT otherwise, for the caller to prefix with its flag.
absl::StatusOr<mode_t> ParseSocketMode(absl::string_view text);

// The group named `text` (a name, else a decimal number that need not be
// in the group database). NOT_FOUND "unknown group 'x'" when there is no
// such name.
absl::StatusOr<gid_t> ResolveGroup(absl::string_view text);

}  // namespace rbln

#endif  // RBLN_SERVER_SOCKET_ACCESS_H_
