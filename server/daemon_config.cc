#include "server/daemon_config.h"

#include "absl/strings/str_cat.h"
#include "common/flag_errors.h"

namespace rbln {

int FlagSources::BadValueCode(absl::string_view flag) const {
  return GivenOnCommandLine(args, flag) || config_file.empty() ? kExitUsage
                                                               : kExitConfig;
}

DaemonError FlagSources::BadValue(absl::string_view flag,
                                  absl::string_view message) const {
  if (BadValueCode(flag) == kExitUsage) {
    return {kExitUsage, absl::StrCat(flag, ": ", message)};
  }
  const absl::string_view key = flag.substr(2);
  return {kExitConfig, FormatConfigError(config_file, key,
                                         absl::StrCat(key, ": ", message))};
}

}  // namespace rbln
