#include "core/error_facts.h"

#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace rbln {
namespace {

// The payload is text, one "key=value" line per fact, the artifact's name
// C-escaped: the daemon writes it and reads it back in the same process,
// so a simple format that no two versions ever exchange is enough.
constexpr absl::string_view kReasonKey = "reason";
constexpr absl::string_view kArtifactKey = "artifact";
constexpr absl::string_view kCurrentKey = "current_num_blocks";
constexpr absl::string_view kMinKey = "num_min_blocks";
constexpr absl::string_view kFullKey = "num_full_blocks";
constexpr absl::string_view kMaxFittingKey = "max_fitting_num_blocks";
constexpr absl::string_view kWrittenKey = "written";
constexpr absl::string_view kNodeKey = "node";
constexpr absl::string_view kChipletKey = "chiplet";
constexpr absl::string_view kBytesShortKey = "bytes_short";

constexpr std::pair<ErrorReason, absl::string_view> kReasonNames[] = {
    {ErrorReason::kBelowMinBlocks, "BELOW_MIN_BLOCKS"},
    {ErrorReason::kTooManyBlocks, "TOO_MANY_BLOCKS"},
    {ErrorReason::kBudgetBelowMin, "BUDGET_BELOW_MIN"},
    {ErrorReason::kCasMismatch, "CAS_MISMATCH"},
    {ErrorReason::kOutputExists, "OUTPUT_EXISTS"},
    {ErrorReason::kOutsideStore, "OUTSIDE_STORE"},
    {ErrorReason::kReadOnlyRoot, "READ_ONLY_ROOT"},
    {ErrorReason::kArtifactNotFound, "ARTIFACT_NOT_FOUND"},
    {ErrorReason::kNotAnOperator, "NOT_AN_OPERATOR"},
    {ErrorReason::kNotReadableByCaller, "NOT_READABLE_BY_CALLER"},
    {ErrorReason::kExceedsDevice, "EXCEEDS_DEVICE"},
    {ErrorReason::kGroupDoesNotFit, "GROUP_DOES_NOT_FIT"},
    {ErrorReason::kGroupPartial, "GROUP_PARTIAL"},
};

std::optional<ErrorReason> ParseReason(absl::string_view name) {
  for (const auto& [reason, reason_name] : kReasonNames) {
    if (reason_name == name) return reason;
  }
  return std::nullopt;
}

std::string Encode(const ErrorFacts& facts) {
  std::string out =
      absl::StrCat(kReasonKey, "=", ErrorReasonName(facts.reason), "\n",
                   kArtifactKey, "=", absl::CEscape(facts.artifact), "\n");
  const std::pair<absl::string_view, const std::optional<uint64_t>*> counts[] =
      {{kCurrentKey, &facts.current_num_blocks},
       {kMinKey, &facts.num_min_blocks},
       {kFullKey, &facts.num_full_blocks},
       {kMaxFittingKey, &facts.max_fitting_num_blocks},
       {kNodeKey, &facts.node},
       {kChipletKey, &facts.chiplet},
       {kBytesShortKey, &facts.bytes_short}};
  for (const auto& [key, value] : counts) {
    if (value->has_value()) absl::StrAppend(&out, key, "=", **value, "\n");
  }
  for (const std::string& written : facts.written_artifacts) {
    absl::StrAppend(&out, kWrittenKey, "=", absl::CEscape(written), "\n");
  }
  return out;
}

std::optional<ErrorFacts> Decode(absl::string_view text) {
  ErrorFacts facts;
  bool has_reason = false;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits('=', 1));
    const auto& [key, value] = kv;
    uint64_t number = 0;
    if (key == kReasonKey) {
      std::optional<ErrorReason> reason = ParseReason(value);
      if (!reason.has_value()) return std::nullopt;
      facts.reason = *reason;
      has_reason = true;
    } else if (key == kArtifactKey) {
      if (!absl::CUnescape(value, &facts.artifact)) return std::nullopt;
    } else if (key == kWrittenKey) {
      std::string written;
      if (!absl::CUnescape(value, &written)) return std::nullopt;
      facts.written_artifacts.push_back(std::move(written));
    } else if (!absl::SimpleAtoi(value, &number)) {
      return std::nullopt;
    } else if (key == kCurrentKey) {
      facts.current_num_blocks = number;
    } else if (key == kMinKey) {
      facts.num_min_blocks = number;
    } else if (key == kFullKey) {
      facts.num_full_blocks = number;
    } else if (key == kMaxFittingKey) {
      facts.max_fitting_num_blocks = number;
    } else if (key == kNodeKey) {
      facts.node = number;
    } else if (key == kChipletKey) {
      facts.chiplet = number;
    } else if (key == kBytesShortKey) {
      facts.bytes_short = number;
    } else {
      return std::nullopt;
    }
  }
  if (!has_reason) return std::nullopt;
  return facts;
}

}  // namespace

absl::string_view ErrorReasonName(ErrorReason reason) {
  for (const auto& [value, name] : kReasonNames) {
    if (value == reason) return name;
  }
  return "REASON_UNSPECIFIED";
}

bool ErrorFacts::operator==(const ErrorFacts& other) const {
  return reason == other.reason && artifact == other.artifact &&
         current_num_blocks == other.current_num_blocks &&
         num_min_blocks == other.num_min_blocks &&
         num_full_blocks == other.num_full_blocks &&
         max_fitting_num_blocks == other.max_fitting_num_blocks &&
         written_artifacts == other.written_artifacts && node == other.node &&
         chiplet == other.chiplet && bytes_short == other.bytes_short;
}

absl::Status WithErrorFacts(absl::Status status, const ErrorFacts& facts) {
  if (status.ok()) return status;
  status.SetPayload(kErrorFactsTypeUrl, absl::Cord(Encode(facts)));
  return status;
}

std::optional<ErrorFacts> GetErrorFacts(const absl::Status& status) {
  const auto payload = status.GetPayload(kErrorFactsTypeUrl);
  if (!payload.has_value()) return std::nullopt;
  return Decode(std::string(*payload));
}

absl::Status NameArtifactInFacts(absl::Status status,
                                 absl::string_view artifact) {
  std::optional<ErrorFacts> facts = GetErrorFacts(status);
  if (!facts.has_value() || !facts->artifact.empty()) return status;
  facts->artifact = std::string(artifact);
  return WithErrorFacts(std::move(status), *facts);
}

}  // namespace rbln
