// The facts behind an error, for programs: why a request was refused
// (a reason name a client can switch on) and the numbers that matter (the
// current, minimum, full and largest fitting block counts). They ride on an
// absl::Status as a payload, so that core/ states them where it refuses,
// without gRPC; the server turns them into the rbln.artifact.v1.ErrorDetail of
// the status's details (artifact_service.proto), and the English message stays
// for people.
//
// Thread-safe: pure functions.
#ifndef RBLN_CORE_ERROR_FACTS_H_
#define RBLN_CORE_ERROR_FACTS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rbln {

// Each value's name (ErrorReasonName) is that of
// rbln.artifact.v1.ErrorDetail.Reason, where they are documented.
enum class ErrorReason {
  kBelowMinBlocks,       // INVALID_ARGUMENT
  kTooManyBlocks,        // INVALID_ARGUMENT: above the hard limit
  kBudgetBelowMin,       // FAILED_PRECONDITION
  kCasMismatch,          // ABORTED
  kOutputExists,         // ALREADY_EXISTS
  kOutsideStore,         // PERMISSION_DENIED
  kReadOnlyRoot,         // PERMISSION_DENIED
  kArtifactNotFound,     // NOT_FOUND
  kNotAnOperator,        // PERMISSION_DENIED: a reader's write
  kNotReadableByCaller,  // PERMISSION_DENIED: the caller could not read it
  kExceedsDevice,        // FAILED_PRECONDITION: the count does not fit
  kGroupDoesNotFit,      // FAILED_PRECONDITION: a group's minimums
  kGroupPartial,         // ABORTED: a group written in part
};

// "BELOW_MIN_BLOCKS", "CAS_MISMATCH", ...
absl::string_view ErrorReasonName(ErrorReason reason);

struct ErrorFacts {
  ErrorReason reason = ErrorReason::kArtifactNotFound;
  // The artifact (or output directory) refused: its store-relative name,
  // or the name as requested when it does not resolve; "" when unknown.
  std::string artifact;
  std::optional<uint64_t> current_num_blocks;
  std::optional<uint64_t> num_min_blocks;
  std::optional<uint64_t> num_full_blocks;
  std::optional<uint64_t> max_fitting_num_blocks;
  // kGroupPartial: the members written.
  std::vector<std::string> written_artifacts;
  // kGroupDoesNotFit: the first bucket over, and by how much.
  std::optional<uint64_t> node;
  std::optional<uint64_t> chiplet;
  std::optional<uint64_t> bytes_short;

  bool operator==(const ErrorFacts& other) const;
};

// The payload's type URL (absl::Status::SetPayload).
inline constexpr absl::string_view kErrorFactsTypeUrl =
    "type.rbln-artifactd/rbln.core.ErrorFacts";

// `status` (not OK) with `facts` attached; an OK status is returned as is.
absl::Status WithErrorFacts(absl::Status status, const ErrorFacts& facts);

// The facts attached to `status`, if any (and well-formed).
std::optional<ErrorFacts> GetErrorFacts(const absl::Status& status);

// `status` with `artifact` filled in as the facts' artifact when it carries
// facts that name none (they were stated where the name was not known).
absl::Status NameArtifactInFacts(absl::Status status,
                                 absl::string_view artifact);

}  // namespace rbln

#endif  // RBLN_CORE_ERROR_FACTS_H_
