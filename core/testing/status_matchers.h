// gMock matchers of absl::Status and absl::StatusOr, for the tests.
#ifndef RBLN_CORE_TESTING_STATUS_MATCHERS_H_
#define RBLN_CORE_TESTING_STATUS_MATCHERS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"

namespace rbln::testing {

inline const absl::Status& StatusOf(const absl::Status& status) {
  return status;
}
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

// Matches an absl::Status or absl::StatusOr whose code is `code` and whose
// message contains `substr`.
MATCHER_P2(StatusIs, code, substr,
           absl::StrCat("has code ", absl::StatusCodeToString(code),
                        " and a message containing \"", substr, "\"")) {
  const absl::Status& status = StatusOf(arg);
  *result_listener << "status is " << status;
  return status.code() == code && absl::StrContains(status.message(), substr);
}

}  // namespace rbln::testing

#endif  // RBLN_CORE_TESTING_STATUS_MATCHERS_H_
