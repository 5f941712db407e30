// Early-return helpers for absl::Status and absl::StatusOr.
#ifndef RBLN_CORE_STATUS_MACROS_H_
#define RBLN_CORE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define RBLN_STATUS_CONCAT_INNER_(a, b) a##b
#define RBLN_STATUS_CONCAT_(a, b) RBLN_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function
// when it is not OK.
#define RBLN_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::absl::Status rbln_status_ = (expr);        \
    if (!rbln_status_.ok()) return rbln_status_; \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); returns its status when it is not
// OK, else moves its value into `lhs` (which may be a declaration).
#define RBLN_ASSIGN_OR_RETURN(lhs, rexpr)                                    \
  RBLN_ASSIGN_OR_RETURN_IMPL_(RBLN_STATUS_CONCAT_(rbln_statusor_, __LINE__), \
                              lhs, rexpr)

#define RBLN_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr)  \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // RBLN_CORE_STATUS_MACROS_H_
