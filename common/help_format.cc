#include "common/help_format.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace rbln {

std::string WrapText(absl::string_view text, size_t width) {
  std::string wrapped;
  bool first_line = true;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!first_line) wrapped += "\n";
    first_line = false;
    size_t column = 0;
    for (absl::string_view word :
         absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      if (column > 0 && column + 1 + word.size() > width) {
        wrapped += "\n";
        column = 0;
      } else if (column > 0) {
        wrapped += " ";
        ++column;
      }
      absl::StrAppend(&wrapped, word);
      column += word.size();
    }
  }
  return wrapped;
}

HelpFormatter::HelpFormatter() { column_width(kHelpNameWidth); }

// A blank line after the description and after the usage line.
std::string HelpFormatter::make_description(const CLI::App* app) const {
  const std::string& description = app->get_description();
  if (description.empty()) return "";
  return WrapText(description, kHelpWidth) + "\n\n";
}

std::string HelpFormatter::make_usage(const CLI::App* app,
                                      std::string name) const {
  return CLI::Formatter::make_usage(app, std::move(name)) + "\n";
}

// Groups are one blank line apart (CLI::Formatter::make_groups adds it), with
// no blank line between a title and its options.
std::string HelpFormatter::make_group(
    std::string group, bool is_positional,
    std::vector<const CLI::Option*> opts) const {
  std::string text = group + ":\n";
  for (const CLI::Option* opt : opts) text += make_option(opt, is_positional);
  return text;
}

std::string HelpFormatter::make_option(const CLI::Option* opt,
                                       bool is_positional) const {
  std::string text =
      "  " + make_option_name(opt, is_positional) + make_option_opts(opt);
  const std::string description = make_option_desc(opt);
  if (description.empty()) return text + "\n";
  const std::string indent(kHelpNameWidth, ' ');
  if (text.size() + 2 > kHelpNameWidth) {
    text += "\n" + indent;
  } else {
    text.append(kHelpNameWidth - text.size(), ' ');
  }
  absl::StrAppend(
      &text, absl::StrReplaceAll(description, {{"\n", "\n" + indent}}), "\n");
  return text;
}

// The value name alone: exclusions, needs and defaults are said in the
// group titles and descriptions instead of CLI11's annotations.
std::string HelpFormatter::make_option_opts(const CLI::Option* opt) const {
  if (!opt->get_option_text().empty()) return " " + opt->get_option_text();
  if (opt->get_type_size() == 0) return "";
  return " " + opt->get_type_name();
}

std::string HelpFormatter::make_option_desc(const CLI::Option* opt) const {
  return WrapText(opt->get_description(), kHelpWidth - kHelpNameWidth);
}

}  // namespace rbln
