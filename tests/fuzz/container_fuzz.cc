// Fuzz target: ReadContainer and VerifyPayload (core/format/container.h) on an
// arbitrary file, held in memory.
//
// Each input is read twice: as it is, and with its two checksums repaired
// (header_xxh64 over the header region the preamble names, then
// preamble_xxh64), so that mutations reach the header parser and the
// region and placement checks instead of stopping at a checksum mismatch.
//
// Beyond what the sanitizers catch, it checks that a container ReadContainer
// accepts keeps the layout its header comment promises: the header region
// after the preamble and before the payload, the payload and every segment
// inside the file, every placement inside the header's nodes and chiplets.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/format/container.h"
#include "core/os/env.h"
#include "tests/fuzz/fuzz_check.h"

namespace rbln {
namespace {

// Preamble fields the checksum repair needs (docs/rbln-container.md, §3).
constexpr size_t kHeaderOffsetAt = 16;
constexpr size_t kHeaderLengthAt = 24;
constexpr size_t kHeaderXxh64At = 56;
constexpr size_t kPreambleXxh64At = 120;

// A read-only file over bytes the caller keeps alive. There is no descriptor:
// only kernel-side copies need one, and nothing here copies.
class InMemoryFile : public RandomAccessFile {
 public:
  explicit InMemoryFile(absl::string_view bytes) : bytes_(bytes) {}

  absl::StatusOr<size_t> ReadAt(uint64_t offset,
                                absl::Span<char> buf) const override {
    if (offset >= bytes_.size()) return 0;
    const absl::string_view got = bytes_.substr(offset, buf.size());
    std::memcpy(buf.data(), got.data(), got.size());
    return got.size();
  }
  absl::StatusOr<uint64_t> Size() const override { return bytes_.size(); }
  const std::string& path() const override { return path_; }
  int native_handle() const override { return -1; }

 private:
  absl::string_view bytes_;
  std::string path_ = "/fuzz/prefill.rbln";
};

// Little-endian, as the preamble stores its fields.
uint64_t Load64(const std::string& bytes, size_t at) {
  uint64_t value = 0;
  for (size_t i = 0; i < 8; ++i) {
    value |= uint64_t{static_cast<uint8_t>(bytes[at + i])} << (8 * i);
  }
  return value;
}

void Store64(std::string* bytes, size_t at, uint64_t value) {
  for (size_t i = 0; i < 8; ++i) {
    (*bytes)[at + i] = static_cast<char>(value >> (8 * i));
  }
}

// `bytes` with header_xxh64 (when the header it names lies inside the input)
// and preamble_xxh64 recomputed; unchanged when shorter than a preamble.
std::string WithValidChecksums(absl::string_view bytes) {
  std::string fixed(bytes);
  if (fixed.size() < kPreambleSize) return fixed;
  const uint64_t offset = Load64(fixed, kHeaderOffsetAt);
  const uint64_t length = Load64(fixed, kHeaderLengthAt);
  if (offset <= fixed.size() && length <= fixed.size() - offset) {
    Store64(&fixed, kHeaderXxh64At,
            XXH64(fixed.data() + offset, static_cast<size_t>(length), 0));
  }
  Store64(&fixed, kPreambleXxh64At, XXH64(fixed.data(), kPreambleXxh64At, 0));
  return fixed;
}

void CheckLayout(const Container& c, uint64_t file_size) {
  const Preamble& p = c.preamble;
  RBLN_FUZZ_CHECK(c.file_size == file_size, c.file_size, " != ", file_size);
  RBLN_FUZZ_CHECK(p.header_offset >= kPreambleSize &&
                      p.header_length <= p.header_capacity &&
                      p.header_offset + p.header_capacity <= p.payload_offset,
                  "header [", p.header_offset, ", +", p.header_length, " of ",
                  p.header_capacity, "), payload at ", p.payload_offset);
  RBLN_FUZZ_CHECK(p.payload_offset % kPayloadAlignment == 0 &&
                      p.payload_offset + p.payload_length <= file_size,
                  "payload [", p.payload_offset, ", +", p.payload_length,
                  ") in a file of ", file_size);
  for (const v1::PayloadSegment& s : c.header.segments()) {
    RBLN_FUZZ_CHECK(s.offset() <= p.payload_length &&
                        s.length() <= p.payload_length - s.offset(),
                    "segment [", s.offset(), ", +", s.length(), ") in ",
                    p.payload_length);
  }
  const auto inside = [&c](const v1::Placement& placement) {
    return placement.node() < c.header.num_nodes() &&
           placement.chiplet() < c.header.chiplets_per_node();
  };
  for (const v1::Allocation& allocation : c.header.allocations()) {
    for (const v1::Placement& placement : allocation.placements()) {
      RBLN_FUZZ_CHECK(inside(placement), "allocation ", allocation.key());
    }
  }
  for (const v1::KvTensor& tensor : c.header.kv_tensors()) {
    for (const v1::Placement& placement : tensor.placements()) {
      RBLN_FUZZ_CHECK(inside(placement), "KV tensor ", tensor.name());
    }
  }
}

void FuzzContainer(absl::string_view bytes) {
  const InMemoryFile file(bytes);
  absl::StatusOr<Container> container = ReadContainer(file);
  if (!container.ok()) return;
  CheckLayout(*container, bytes.size());
  // Its outcome depends on the segment checksums, which are not repaired;
  // what matters is that streaming any accepted layout is safe.
  VerifyPayload(file, *container).IgnoreError();
}

}  // namespace
}  // namespace rbln

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  rbln::FuzzContainer(bytes);
  const std::string repaired = rbln::WithValidChecksums(bytes);
  if (repaired != bytes) rbln::FuzzContainer(repaired);
  return 0;
}
