// Property checks for the libFuzzer targets in tests/fuzz/.
//
// RBLN_FUZZ_CHECK(condition, detail) aborts when `condition` is false, after
// printing the condition, where it is and `detail` (anything absl::StrCat
// takes; evaluated only on failure). libFuzzer reports the abort as a crash
// and saves the input, so a broken property is a finding like a memory error.
// Unlike assert(), it is never compiled out.
#ifndef RBLN_TESTS_FUZZ_FUZZ_CHECK_H_
#define RBLN_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace rbln::fuzz {

[[noreturn]] inline void PropertyFailed(const char* condition, const char* file,
                                        int line, const std::string& detail) {
  std::fprintf(stderr, "%s:%d: property violated: %s\n  %s\n", file, line,
               condition, detail.c_str());
  std::abort();
}

}  // namespace rbln::fuzz

#define RBLN_FUZZ_CHECK(condition, ...)                            \
  do {                                                             \
    if (!(condition)) {                                            \
      ::rbln::fuzz::PropertyFailed(#condition, __FILE__, __LINE__, \
                                   ::absl::StrCat(__VA_ARGS__));   \
    }                                                              \
  } while (false)

#endif  // RBLN_TESTS_FUZZ_FUZZ_CHECK_H_
