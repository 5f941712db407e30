#include "common/flag_errors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/text.h"

namespace rbln {
namespace {

constexpr char kRunWithHelp[] = "Run with --help for more information.\n";

// "--model-id=x" -> "model-id"; "-v" -> "v".
absl::string_view BareName(absl::string_view arg) {
  arg = arg.substr(0, arg.find('='));
  while (absl::ConsumePrefix(&arg, "-")) {
  }
  return arg;
}

// A flag-like argument, not a negative number ("-1", "-.5").
bool LooksLikeFlag(absl::string_view arg) {
  return arg.size() > 1 && arg[0] == '-' &&
         !absl::ascii_isdigit(static_cast<unsigned char>(arg[1])) &&
         arg[1] != '.';
}

bool NamesOption(const CLI::Option& opt, absl::string_view arg) {
  if (absl::StartsWith(arg, "--")) {
    const absl::string_view name = BareName(arg);
    for (const std::string& l : opt.get_lnames()) {
      if (l == name) return true;
    }
    return false;
  }
  if (arg.size() == 2 && arg[0] == '-') {
    for (const std::string& s : opt.get_snames()) {
      if (s == arg.substr(1)) return true;
    }
  }
  return false;
}

// The option that CLI11 names `name` in a message ("--store", or the name of
// a config entry, "store").
const CLI::Option* FindOption(const CLI::App& app, absl::string_view name) {
  const std::string arg = absl::StartsWith(name, "-")
                              ? std::string(name)
                              : absl::StrCat("--", name);
  for (const CLI::Option* opt : app.get_options()) {
    if (NamesOption(*opt, arg)) return opt;
  }
  return nullptr;
}

// The first option that takes one value (or none) and is named more than once
// in `args`, with its count.
std::pair<const CLI::Option*, int> RepeatedOption(
    const CLI::App& app, const std::vector<std::string>& args) {
  std::map<const CLI::Option*, int> seen;
  for (const std::string& arg : args) {
    if (arg == "--") break;
    if (!LooksLikeFlag(arg)) continue;
    const CLI::Option* opt = FindOption(app, arg);
    if (opt == nullptr || opt->get_expected_max() > 1) continue;
    if (++seen[opt] == 2) {
      int total = 0;
      for (const std::string& a : args) total += NamesOption(*opt, a) ? 1 : 0;
      return {opt, total};
    }
  }
  return {nullptr, 0};
}

// "--set-kvcache-num-blocks --model-id a": an option that takes a value,
// followed by a known flag. CLI11 takes the flag as the value, and what
// follows is left over; the value forgotten is the mistake to report.
std::string ValueTakenByAFlag(const CLI::App& app,
                              const std::vector<std::string>& args) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--") break;
    if (!LooksLikeFlag(args[i]) || args[i].find('=') != std::string::npos) {
      continue;
    }
    const CLI::Option* opt = FindOption(app, args[i]);
    // A switch (a flag without a value) has no type name.
    if (opt == nullptr || opt->get_type_name().empty()) continue;
    if (LooksLikeFlag(args[i + 1]) && FindOption(app, args[i + 1]) != nullptr) {
      return absl::StrCat(opt->get_name(), " needs a value (",
                          opt->get_type_name(), "), got the flag ",
                          args[i + 1]);
    }
  }
  return "";
}

std::string Times(int count) {
  return count == 2 ? "twice" : absl::StrCat(count, " times");
}

// `items` in the order they appear in `args` (CLI11 may report them in
// another).
std::vector<std::string> InGivenOrder(std::vector<std::string> items,
                                      const std::vector<std::string>& args) {
  std::vector<std::string> ordered;
  for (const std::string& arg : args) {
    auto it = std::find(items.begin(), items.end(), arg);
    if (it == items.end()) continue;
    ordered.push_back(arg);
    items.erase(it);
  }
  ordered.insert(ordered.end(), items.begin(), items.end());
  return ordered;
}

std::string Quote(absl::string_view text) {
  return absl::StrCat("'", Echo(text), "'");
}

// Arguments the parser did not take: unknown flags (with the flag meant) and
// stray words. The value right after an unknown flag is not mentioned: it
// belongs to the flag.
std::string DescribeExtras(const CLI::App& app,
                           const std::vector<std::string>& extras) {
  std::vector<std::string> problems;
  std::vector<std::string> strays;
  bool after_unknown_flag = false;
  for (const std::string& extra : extras) {
    if (LooksLikeFlag(extra)) {
      std::string problem = absl::StrCat("unknown flag ", Echo(extra));
      const std::string meant = SuggestFlag(app, extra);
      if (!meant.empty())
        absl::StrAppend(&problem, " (did you mean ", meant, "?)");
      problems.push_back(std::move(problem));
      after_unknown_flag = extra.find('=') == std::string::npos;
      continue;
    }
    if (!after_unknown_flag) strays.push_back(Quote(extra));
    after_unknown_flag = false;
  }
  if (!strays.empty()) {
    problems.push_back(absl::StrCat(
        "unexpected argument", strays.size() > 1 ? "s " : " ",
        absl::StrJoin(strays, " "), " (every value follows its flag)"));
  }
  return absl::StrJoin(problems, "; ");
}

// The value CLI11 reads as the config file's name, or "".
std::string ConfigFile(const CLI::App& app) {
  const CLI::Option* config = app.get_config_ptr();
  if (config == nullptr || config->count() == 0 || config->results().empty()) {
    return "";
  }
  return config->results().back();
}

// "line N: " of the first line of `file` that sets `key` (or, for a
// section "[name]", the line that opens it), or "".
std::string ConfigLine(absl::string_view file, absl::string_view key) {
  std::ifstream in{std::string(file)};
  std::string line;
  const absl::string_view leaf = key.substr(key.rfind('.') + 1);
  for (int number = 1; std::getline(in, line); ++number) {
    absl::string_view text = absl::StripAsciiWhitespace(line);
    const absl::string_view name =
        absl::StripAsciiWhitespace(text.substr(0, text.find('=')));
    if (name == key || name == leaf || text == key) {
      return absl::StrCat("line ", number, ": ");
    }
  }
  return "";
}

// What is wrong with an entry CLI11 could not place ("lisen", "daemon.++"
// for a section, "store: x" for a line without '=').
std::string UnknownConfigEntry(const CLI::App& app, absl::string_view item,
                               std::string* line_key) {
  *line_key = std::string(item);
  absl::string_view section = item;
  if (absl::ConsumeSuffix(&section, ".++") ||
      absl::ConsumeSuffix(&section, ".--")) {
    *line_key = absl::StrCat("[", section, "]");
    return absl::StrCat("unknown section [", Echo(section),
                        "]: entries go at the top, without a section");
  }
  if (item.empty()) return "an entry without a name";
  if (item.find_first_of(" :\t\"") != absl::string_view::npos) {
    return absl::StrCat("cannot read ", Quote(item),
                        ": write one name = value per line");
  }
  std::string problem = absl::StrCat("unknown entry ", Quote(item));
  const std::string meant = SuggestFlag(app, item);
  if (!meant.empty()) {
    absl::StrAppend(&problem, " (did you mean ", meant.substr(2), "?)");
  }
  return problem;
}

// What a value of `opt` must look like, from its type.
std::string ValueKind(const CLI::Option* opt) {
  std::string type = opt == nullptr ? "" : opt->get_type_name();
  // A checked option's type carries its check: "FLOAT:FLOAT in [0.01 - 30]".
  type = type.substr(0, type.find_first_of(": "));
  if (type == "UINT") return "a whole number";
  if (type == "INT") return "an integer";
  if (type == "FLOAT") return "a number";
  if (!type.empty() && type != "TEXT") return type;
  return "a value";
}

// The option name a CLI11 message starts with ("--store: ...").
absl::string_view LeadingName(absl::string_view what) {
  const size_t colon = what.find(':');
  return colon == absl::string_view::npos ? "" : what.substr(0, colon);
}

bool Is(int code, CLI::ExitCodes expected) {
  return code == static_cast<int>(expected);
}

// A --config file that cannot be read or holds an entry CLI11 cannot place
// (`code`: the error's exit code, `what`: its message), or nullopt for an
// error of another kind.
std::optional<FlagError> DescribeConfigFileError(const CLI::App& app, int code,
                                                 const std::string& what,
                                                 const std::string& config) {
  if (Is(code, CLI::ExitCodes::FileError)) {
    return FlagError{true, absl::StrCat("cannot read --config ",
                                        config.empty() ? what : config,
                                        ": no such file, or not readable")};
  }
  if (!Is(code, CLI::ExitCodes::ConfigError)) return std::nullopt;
  absl::string_view item = what;
  if (absl::ConsumePrefix(&item, "INI was not able to parse ")) {
    std::string line_key;
    const std::string problem = UnknownConfigEntry(app, item, &line_key);
    return FlagError{true, FormatConfigError(config, line_key, problem)};
  }
  const absl::string_view name = LeadingName(what);
  return FlagError{
      true, FormatConfigError(config, name,
                              absl::StrCat(name, " cannot be set in a file"))};
}

// CLI::Range's "--x: Value V not in range A to B" (A and B printed as
// "0.010000") in our words, or "" when `what` is not that.
std::string DescribeOutOfRange(const CLI::App& app, absl::string_view what,
                               absl::string_view name) {
  absl::string_view rest = what;
  absl::ConsumePrefix(&rest, name);
  absl::ConsumePrefix(&rest, ": Value ");
  const size_t range = rest.find(" not in range ");
  const absl::string_view value = rest.substr(0, range);
  std::vector<std::string> bounds = absl::StrSplit(
      rest.substr(range + std::strlen(" not in range ")), " to ");
  for (std::string& bound : bounds) {
    double number = 0;
    if (absl::SimpleAtod(bound, &number)) bound = absl::StrCat(number);
  }
  if (bounds.size() != 2) return "";
  return absl::StrCat(name, " needs ", ValueKind(FindOption(app, name)),
                      " from ", bounds[0], " to ", bounds[1], ", got ",
                      Quote(value));
}

// CLI11's message `what` for an error of exit code `code` in our words
// (itself when there are none); `name` starts as the option the message
// starts with and ends as the one it is about.
std::string Reword(const CLI::App& app, int code, const std::string& what,
                   absl::string_view* name) {
  std::string message = what;
  if (Is(code, CLI::ExitCodes::ConversionError)) {
    absl::string_view rest = what;
    if (absl::ConsumePrefix(&rest, "Could not convert: ")) {
      const size_t equals = rest.find(" = ");
      *name = rest.substr(0, equals);
      const absl::string_view value =
          equals == absl::string_view::npos ? "" : rest.substr(equals + 3);
      message =
          absl::StrCat(*name, " needs ", ValueKind(FindOption(app, *name)),
                       ", got ", Quote(value));
    }
  } else if (Is(code, CLI::ExitCodes::ArgumentMismatch)) {
    const CLI::Option* opt = FindOption(app, *name);
    if (opt != nullptr) {
      message =
          absl::StrCat(*name, " needs a value (",
                       opt->get_type_name().empty() ? std::string("VALUE")
                                                    : opt->get_type_name(),
                       ")");
    }
  } else if (Is(code, CLI::ExitCodes::ValidationError) &&
             absl::StrContains(what, " not in range ")) {
    const std::string reworded = DescribeOutOfRange(app, what, *name);
    if (!reworded.empty()) message = reworded;
  } else if (Is(code, CLI::ExitCodes::ExcludesError)) {
    const size_t excludes = what.find(" excludes ");
    if (excludes != std::string::npos) {
      message = absl::StrCat(what.substr(0, excludes), " does not go with ",
                             what.substr(excludes + 10), "; give only one");
    }
  } else if (Is(code, CLI::ExitCodes::RequiredError)) {
    const size_t is_required = what.find(" is required");
    if (is_required != std::string::npos) {
      const CLI::Option* opt = FindOption(app, what.substr(0, is_required));
      if (opt != nullptr && !opt->get_type_name().empty()) {
        message = absl::StrCat(opt->get_name(), " ", opt->get_type_name(),
                               " is required");
      }
    }
  }
  return message;
}

}  // namespace

size_t EditDistance(absl::string_view a, absl::string_view b) {
  // d[i][j]: the distance between a[0, i) and b[0, j).
  std::vector<std::vector<size_t>> d(a.size() + 1,
                                     std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] =
          std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::string SuggestFlag(const CLI::App& app, absl::string_view given) {
  const std::string name = absl::AsciiStrToLower(BareName(given));
  if (name.empty()) return "";
  std::string best;
  size_t best_distance = 0;
  std::vector<std::string> extending;  // flags that `name` is a prefix of
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& l : opt->get_lnames()) {
      const size_t distance = EditDistance(name, l);
      if (distance <= 2 && distance * 3 <= l.size() &&
          (best.empty() || distance < best_distance)) {
        best = l;
        best_distance = distance;
      }
      if (name.size() >= 3 && absl::StartsWith(l, name)) {
        extending.push_back(l);
      }
    }
  }
  if (!best.empty()) return absl::StrCat("--", best);
  if (extending.size() == 1) return absl::StrCat("--", extending[0]);
  return "";
}

bool GivenOnCommandLine(const std::vector<std::string>& args,
                        absl::string_view flag) {
  for (const std::string& arg : args) {
    if (arg == "--") return false;
    if (arg == flag || (absl::StartsWith(arg, flag) &&
                        arg.size() > flag.size() && arg[flag.size()] == '=')) {
      return true;
    }
  }
  return false;
}

FlagError DescribeParseError(const CLI::App& app, const CLI::ParseError& error,
                             const std::vector<std::string>& args) {
  const std::string what = error.what();
  const std::string config = ConfigFile(app);
  const int code = error.get_exit_code();
  std::optional<FlagError> in_file =
      DescribeConfigFileError(app, code, what, config);
  if (in_file.has_value()) return *std::move(in_file);

  const std::string forgotten = ValueTakenByAFlag(app, args);
  if (!forgotten.empty()) return FlagError{false, forgotten};
  // A typo usually causes what else went wrong ("--outt x" also leaves --out
  // missing): unknown arguments are reported first.
  const std::vector<std::string> extras = InGivenOrder(app.remaining(), args);
  if (!extras.empty()) return FlagError{false, DescribeExtras(app, extras)};

  const auto [repeated, count] = RepeatedOption(app, args);
  if (repeated != nullptr && (Is(code, CLI::ExitCodes::ArgumentMismatch) ||
                              Is(code, CLI::ExitCodes::ConversionError))) {
    return FlagError{false, absl::StrCat(repeated->get_name(), " given ",
                                         Times(count), "; give it once")};
  }
  absl::string_view name = LeadingName(what);
  const std::string message = Reword(app, code, what, &name);
  if (!config.empty() && absl::StartsWith(name, "--") &&
      !GivenOnCommandLine(args, name)) {
    return FlagError{true, FormatConfigError(config, BareName(name), message)};
  }
  return FlagError{false, message};
}

std::string FormatConfigError(absl::string_view file, absl::string_view key,
                              absl::string_view problem) {
  return absl::StrCat("cannot read --config ", file, ": ",
                      ConfigLine(file, key), problem);
}

std::string FormatFlagError(absl::string_view program,
                            absl::string_view message) {
  return absl::StrCat(program, ": ", message, "\n", kRunWithHelp);
}

std::optional<int> ParseFlags(CLI::App& app,
                              const std::vector<std::string>& args,
                              absl::string_view program, FlagExitCodes codes,
                              std::ostream& out, std::ostream& err) {
  // CLI11 takes its arguments last first.
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    // --help is an "error" with exit code 0.
    if (e.get_exit_code() == 0) return app.exit(e, out, err);
    const FlagError error = DescribeParseError(app, e, args);
    err << FormatFlagError(program, error.message);
    return error.from_config ? codes.config : codes.usage;
  }
  return std::nullopt;
}

}  // namespace rbln
