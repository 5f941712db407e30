// The `.rbln` container of this project (byte-level
// specification in docs/rbln-container.md):
//
//   [0, 128)                      preamble, fixed, little-endian
//   [header_offset, +length)      ContainerHeader (proto/rbln/artifact/v1)
//   [.., payload_offset)          reserved slack (zeros), so that a resized
//                                 header fits without moving the payload
//   [payload_offset, +length)     payload: opaque program and weights
//
// Reading a container reads and verifies the preamble and header only; the
// payload is never read into memory except by VerifyPayload, which streams it
// in bounded chunks. Writing a resized container copies the payload inside the
// kernel (reflink or copy_file_range).
//
// Thread-safe: functions only; each call uses the file objects it is given.
#ifndef RBLN_CORE_FORMAT_CONTAINER_H_
#define RBLN_CORE_FORMAT_CONTAINER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/os/env.h"
#include "rbln/artifact/v1/container.pb.h"

namespace rbln {

// The generated header messages (proto/rbln/artifact/v1/container.proto).
namespace v1 = ::rbln::artifact::v1;

inline constexpr char kContainerExtension[] = ".rbln";
// PNG-style: a high-bit byte, a name, CR LF, ^Z, LF, so that text-mode
// transfers and 7-bit channels visibly break it.
inline constexpr char kContainerMagic[8] = {'\x89', 'R',  'B',    'L',
                                            '\r',   '\n', '\x1a', '\n'};
inline constexpr uint16_t kContainerMajorVersion = 1;
inline constexpr uint16_t kContainerMinorVersion = 0;
inline constexpr uint64_t kPreambleSize = 128;
inline constexpr uint64_t kPayloadAlignment = 4096;

struct Preamble {
  uint16_t major_version = kContainerMajorVersion;
  uint16_t minor_version = kContainerMinorVersion;
  uint32_t flags = 0;
  uint64_t header_offset = kPreambleSize;
  uint64_t header_length = 0;
  uint64_t header_capacity = 0;
  uint64_t payload_offset = 0;
  uint64_t payload_length = 0;
  uint64_t header_xxh64 = 0;
};

// The kPreambleSize bytes of `preamble`, its own checksum included.
std::string EncodePreamble(const Preamble& preamble);

// The header-level view of one container file.
struct Container {
  Preamble preamble;
  v1::ContainerHeader header;
  uint64_t file_size = 0;
};

// Reads and verifies the preamble and header of `file`; never reads the
// payload. Every error names file.path() and what was wrong:
//  * bad magic, preamble or header checksum mismatch, truncated
//    preamble/header/payload, regions that overlap, overflow 64 bits or are
//    misaligned, a header length beyond the file, its reserved region or
//    64 MiB, unparsable header, placements or segments out of range:
//    DATA_LOSS;
//  * an unknown major version or flag, or a header without kv_resize
//    metadata: FAILED_PRECONDITION "unsupported artifact format ...".
absl::StatusOr<Container> ReadContainer(const RandomAccessFile& file);

// What a payload check read and found matching: segments and their bytes.
struct VerifiedPayload {
  uint64_t segments = 0;
  uint64_t bytes = 0;

  VerifiedPayload& operator+=(const VerifiedPayload& other) {
    segments += other.segments;
    bytes += other.bytes;
    return *this;
  }
};

// Streams the payload in bounded chunks and checks every segment's XXH64;
// returns how many segments and bytes were checked (all of them). A mismatch
// is DATA_LOSS naming the segment.
absl::StatusOr<VerifiedPayload> VerifyPayload(const RandomAccessFile& file,
                                              const Container& container);

// Where the header region ends and the payload starts for a header of
// `header_length` bytes: the capacity leaves slack for growth (at least
// double the header and one more 4 KiB page) and payload_offset is aligned
// to kPayloadAlignment.
struct ContainerLayout {
  uint64_t header_capacity = 0;
  uint64_t payload_offset = 0;
};
ContainerLayout LayoutForHeader(uint64_t header_length);

// Produces the bytes of payload segment `segment` starting at
// `offset_in_segment` into `out` (a chunk of bounded size).
using PayloadFiller =
    std::function<void(const v1::PayloadSegment& segment,
                       uint64_t offset_in_segment, absl::Span<char> out)>;

// Writes a complete new container into `out` (an empty file). `header`'s
// segments give names and lengths; this function assigns their offsets
// (each 4096-aligned within the payload) and XXH64 checksums, streaming the
// bytes from `fill` in bounded chunks. Does not sync or close `out`.
absl::Status WriteNewContainer(WritableFile& out, v1::ContainerHeader header,
                               const PayloadFiller& fill);

// Writes into `out` (an empty file) a container with `src`'s payload and
// `new_header` (whose segments must equal the source's). The payload stays
// at the same offset when the new header fits the source's reserved region,
// else the region grows (LayoutForHeader). The payload is copied inside the
// kernel, in chunks of kCopyChunkBytes, calling `on_copied` (when set) with
// the bytes of each chunk done; a status other than OK from it stops the
// copy and is returned (cancellation). Does not sync or close `out`.
inline constexpr uint64_t kCopyChunkBytes = uint64_t{256} << 20;
absl::Status WriteContainerWithHeader(
    const RandomAccessFile& src, const Container& src_container,
    const v1::ContainerHeader& new_header, WritableFile& out,
    const std::function<absl::Status(uint64_t bytes)>& on_copied = nullptr);

}  // namespace rbln

#endif  // RBLN_CORE_FORMAT_CONTAINER_H_
