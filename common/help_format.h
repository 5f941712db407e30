// The --help of the three programs (rbln-artifact, rbln-artifactd,
// rbln-artifact-synth) in 80 columns: the description wrapped, option names
// in the first kHelpNameWidth columns and their descriptions wrapped in the
// rest, options under their group's title, each shown with its value name
// only: no CLI11 type, check or default (a default is said in words in the
// description). A footer is printed as written; its author keeps it in 80
// columns.
//
// Thread-safe: pure functions, and a HelpFormatter holds no state of its own
// once made.
#ifndef RBLN_COMMON_HELP_FORMAT_H_
#define RBLN_COMMON_HELP_FORMAT_H_

#include <cstddef>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/string_view.h"

namespace rbln {

inline constexpr size_t kHelpWidth = 80;
inline constexpr size_t kHelpNameWidth = 30;

// `text` with spaces turned into newlines where a line would pass `width`;
// its own newlines are kept, and a word longer than `width` gets a line of
// its own.
std::string WrapText(absl::string_view text, size_t width);

// The help as described above. An option's name and its description are at
// least two spaces apart (help2man reads one space as part of the name), or
// the description starts on the next line. Value names: an option's
// option_text() when set, else its type_name(); a program names every value
// (DIR, SECONDS, N), since CLI11's own names (TEXT, INT:INT in [1 - 64]) are
// not for readers.
class HelpFormatter : public CLI::Formatter {
 public:
  HelpFormatter();

  std::string make_description(const CLI::App* app) const override;
  std::string make_usage(const CLI::App* app, std::string name) const override;
  std::string make_group(std::string group, bool is_positional,
                         std::vector<const CLI::Option*> opts) const override;
  std::string make_option(const CLI::Option* opt,
                          bool is_positional) const override;
  std::string make_option_opts(const CLI::Option* opt) const override;
  std::string make_option_desc(const CLI::Option* opt) const override;
};

}  // namespace rbln

#endif  // RBLN_COMMON_HELP_FORMAT_H_
