// The built-in codec: this project's `.rbln` container
// (core/format/container.h, docs/rbln-container.md) behind the codec boundary
// (core/format/codec.h). Inspect reads the preamble and header only; rescale
// writes the new header and copies the payload inside the kernel.
//
// Thread-safe: stateless.
#ifndef RBLN_CORE_FORMAT_BUILTIN_CODEC_H_
#define RBLN_CORE_FORMAT_BUILTIN_CODEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/format/codec.h"
#include "core/format/container.h"

namespace rbln {

// How many leading bytes LooksLikeBuiltinContainer needs.
inline constexpr size_t kCodecSniffBytes = 8;

// Whether a file starting with `first_bytes` is meant to be this project's
// container: the magic, or the magic as a text-mode transfer damages it
// (bytes 1..3 "RBL"), so that a damaged container is reported as one rather
// than handed to an external codec.
bool LooksLikeBuiltinContainer(absl::string_view first_bytes);

// The memory facts a container header states (payload_bytes 0), and those of
// a container read from a file.
ContainerFacts FactsOfHeader(const v1::ContainerHeader& header);
ContainerFacts FactsOfContainer(const Container& container);

// The header with each tensor named in `factors` scaled from current to
// target blocks (bytes * target / current, exactly). DATA_LOSS when a size
// does not divide by its current count (`path` names the file);
// INVALID_ARGUMENT when a result overflows 64 bits or a factor names a
// tensor the header lacks.
absl::StatusOr<v1::ContainerHeader> RescaleHeader(
    const v1::ContainerHeader& header, const RescaleFactors& factors,
    absl::string_view path);

class BuiltinCodec : public ContainerCodec {
 public:
  std::string name() const override { return "built-in"; }
  absl::StatusOr<ContainerFacts> Inspect(Env* env,
                                         const std::string& path) override;
  absl::Status Rescale(const RescaleRequest& request) override;
};

// The process's one built-in codec.
BuiltinCodec* BuiltinContainerCodec();

}  // namespace rbln

#endif  // RBLN_CORE_FORMAT_BUILTIN_CODEC_H_
