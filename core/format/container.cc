#include "core/format/container.h"

#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/core_metrics.h"
#include "core/format/rbln_config.h"
#include "core/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace rbln {
namespace {

// Preamble field offsets (docs/rbln-container.md, "Preamble").
constexpr size_t kMagicOffset = 0;
constexpr size_t kMajorVersionOffset = 8;
constexpr size_t kMinorVersionOffset = 10;
constexpr size_t kFlagsOffset = 12;
constexpr size_t kHeaderOffsetOffset = 16;
constexpr size_t kHeaderLengthOffset = 24;
constexpr size_t kHeaderCapacityOffset = 32;
constexpr size_t kPayloadOffsetOffset = 40;
constexpr size_t kPayloadLengthOffset = 48;
constexpr size_t kHeaderXxh64Offset = 56;
constexpr size_t kPreambleXxh64Offset = 120;

constexpr size_t kMagicSize = sizeof(kContainerMagic);

// Bounds every buffer this file allocates for payload bytes, so memory stays
// flat whatever the size of the payload.
constexpr size_t kChunkSize = size_t{1} << 20;

// A header this large is not metadata any compiler would write; refusing it
// keeps a corrupt or hostile length field from making us allocate gigabytes.
constexpr uint64_t kMaxHeaderLength = uint64_t{64} << 20;

absl::string_view MagicBytes() {
  return absl::string_view(kContainerMagic, kMagicSize);
}

// Explicit byte order, so the format does not depend on the host's.
template <typename T>
void PutLittleEndian(char* dst, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    dst[i] = static_cast<char>(static_cast<uint8_t>(value >> (8 * i)));
  }
}

template <typename T>
T GetLittleEndian(const char* src) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    value |=
        static_cast<T>(static_cast<T>(static_cast<uint8_t>(src[i])) << (8 * i));
  }
  return value;
}

uint64_t Xxh64(absl::string_view bytes) {
  return XXH64(bytes.data(), bytes.size(), 0);
}

struct Xxh64StateDeleter {
  void operator()(XXH64_state_t* state) const { XXH64_freeState(state); }
};

// Produces (reads or generates) the chunk of `segment` that starts at
// `offset_in_segment` into `chunk`.
using ChunkVisitor = std::function<absl::Status(
    const v1::PayloadSegment& segment, uint64_t offset_in_segment,
    absl::Span<char> chunk)>;

// The XXH64 of every segment, computed over chunks that `visit` produces in
// one reused buffer of at most kChunkSize bytes, so memory stays flat
// whatever the payload's size. Segments are visited in order, chunks in
// order within a segment.
absl::StatusOr<std::vector<uint64_t>> HashSegmentsInChunks(
    const std::string& path,
    const google::protobuf::RepeatedPtrField<v1::PayloadSegment>& segments,
    const ChunkVisitor& visit) {
  uint64_t largest = 0;
  for (const v1::PayloadSegment& segment : segments) {
    largest = std::max(largest, segment.length());
  }
  std::string buffer(
      static_cast<size_t>(std::min<uint64_t>(largest, kChunkSize)), '\0');
  std::unique_ptr<XXH64_state_t, Xxh64StateDeleter> state(XXH64_createState());
  if (state == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": cannot allocate an XXH64 state"));
  }
  std::vector<uint64_t> digests;
  digests.reserve(segments.size());
  for (const v1::PayloadSegment& segment : segments) {
    XXH64_reset(state.get(), 0);
    for (uint64_t done = 0; done < segment.length();) {
      absl::Span<char> chunk(buffer.data(),
                             static_cast<size_t>(std::min<uint64_t>(
                                 segment.length() - done, buffer.size())));
      RBLN_RETURN_IF_ERROR(visit(segment, done, chunk));
      XXH64_update(state.get(), chunk.data(), chunk.size());
      done += chunk.size();
    }
    digests.push_back(XXH64_digest(state.get()));
  }
  return digests;
}

uint64_t RoundUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

std::string HexBytes(absl::string_view bytes) {
  return absl::StrJoin(bytes, " ", [](std::string* out, char c) {
    absl::StrAppendFormat(out, "%02x", static_cast<uint8_t>(c));
  });
}

std::string HexU64(uint64_t value) { return absl::StrFormat("%016x", value); }

// A transfer in text mode rewrites CR LF, LF or ^Z, and a 7-bit channel clears
// the high bit of the first byte; either way the name in bytes 1..3 survives.
// Telling the operator which of the two happened saves a hunt for corruption
// that is really a misconfigured copy.
absl::Status BadMagicError(const std::string& path, absl::string_view got) {
  const bool name_intact = got.size() >= 4 && got.substr(1, 3) == "RBL";
  const bool first_byte_plausible =
      !got.empty() && (static_cast<uint8_t>(got[0]) == 0x89 ||
                       static_cast<uint8_t>(got[0]) == 0x09);
  if (name_intact && first_byte_plausible) {
    return absl::DataLossError(absl::StrCat(
        path,
        ": bad magic: the file was transferred in text mode or through a "
        "7-bit channel (found ",
        HexBytes(got), ", expected ", HexBytes(MagicBytes()),
        "); copy it again in binary mode"));
  }
  return absl::DataLossError(
      absl::StrCat(path, ": bad magic: not an .rbln container (found ",
                   HexBytes(got), ", expected ", HexBytes(MagicBytes()), ")"));
}

Preamble DecodePreambleFields(const char* raw) {
  Preamble p;
  p.major_version = GetLittleEndian<uint16_t>(raw + kMajorVersionOffset);
  p.minor_version = GetLittleEndian<uint16_t>(raw + kMinorVersionOffset);
  p.flags = GetLittleEndian<uint32_t>(raw + kFlagsOffset);
  p.header_offset = GetLittleEndian<uint64_t>(raw + kHeaderOffsetOffset);
  p.header_length = GetLittleEndian<uint64_t>(raw + kHeaderLengthOffset);
  p.header_capacity = GetLittleEndian<uint64_t>(raw + kHeaderCapacityOffset);
  p.payload_offset = GetLittleEndian<uint64_t>(raw + kPayloadOffsetOffset);
  p.payload_length = GetLittleEndian<uint64_t>(raw + kPayloadLengthOffset);
  p.header_xxh64 = GetLittleEndian<uint64_t>(raw + kHeaderXxh64Offset);
  return p;
}

// The region checks that need no file size. A writer that obeys the layout
// rule never trips them, so each failure is corruption.
absl::Status CheckPreambleBounds(const std::string& path, const Preamble& p) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  if (p.header_offset < kPreambleSize) {
    return absl::DataLossError(absl::StrCat(path, ": header offset ",
                                            p.header_offset, " overlaps the ",
                                            kPreambleSize, "-byte preamble"));
  }
  if (p.header_capacity > kMax - p.header_offset) {
    return absl::DataLossError(absl::StrCat(
        path, ": header region (offset ", p.header_offset, ", capacity ",
        p.header_capacity, ") overflows a 64-bit file offset"));
  }
  if (p.header_offset + p.header_capacity > p.payload_offset) {
    return absl::DataLossError(
        absl::StrCat(path, ": header region [", p.header_offset, ", ",
                     p.header_offset + p.header_capacity,
                     ") overlaps the payload at offset ", p.payload_offset));
  }
  if (p.payload_offset % kPayloadAlignment != 0) {
    return absl::DataLossError(
        absl::StrCat(path, ": payload offset ", p.payload_offset,
                     " is not a multiple of ", kPayloadAlignment));
  }
  if (p.payload_length > kMax - p.payload_offset) {
    return absl::DataLossError(
        absl::StrCat(path, ": payload (offset ", p.payload_offset, ", length ",
                     p.payload_length, ") overflows a 64-bit file offset"));
  }
  return absl::OkStatus();
}

// The first way `header` breaks the format's invariants, or "" when it keeps
// them all. kv_resize is checked by the callers: its absence means an older
// compiler, not corruption.
std::string HeaderDefect(const v1::ContainerHeader& header,
                         uint64_t payload_length) {
  if (header.num_nodes() < 1) return "header has num_nodes 0";
  if (header.chiplets_per_node() < 1) return "header has chiplets_per_node 0";
  if (header.num_nodes() > kMaxNumDevices) {
    return absl::StrCat("header has ", header.num_nodes(),
                        " nodes, more than the ", kMaxNumDevices, " allowed");
  }
  if (header.chiplets_per_node() > kMaxChipletsPerNode) {
    return absl::StrCat("header has ", header.chiplets_per_node(),
                        " chiplets per node, more than the ",
                        kMaxChipletsPerNode, " allowed");
  }
  auto placement_defect = [&](absl::string_view kind, absl::string_view name,
                              const v1::Placement& placement) -> std::string {
    if (placement.node() >= header.num_nodes() ||
        placement.chiplet() >= header.chiplets_per_node()) {
      return absl::StrCat(kind, " '", name, "' has a placement on node ",
                          placement.node(), " chiplet ", placement.chiplet(),
                          ", outside the ", header.num_nodes(), " node(s) x ",
                          header.chiplets_per_node(), " chiplet(s) of the ",
                          "header");
    }
    return "";
  };
  for (const v1::Allocation& allocation : header.allocations()) {
    for (const v1::Placement& placement : allocation.placements()) {
      std::string defect =
          placement_defect("allocation", allocation.key(), placement);
      if (!defect.empty()) return defect;
    }
  }
  for (const v1::KvTensor& tensor : header.kv_tensors()) {
    for (const v1::Placement& placement : tensor.placements()) {
      std::string defect =
          placement_defect("KV tensor", tensor.name(), placement);
      if (!defect.empty()) return defect;
    }
  }
  for (const v1::PayloadSegment& segment : header.segments()) {
    if (segment.offset() > payload_length ||
        segment.length() > payload_length - segment.offset()) {
      return absl::StrCat("payload segment '", segment.name(), "' [",
                          segment.offset(), ", +", segment.length(),
                          ") lies outside the payload of ", payload_length,
                          " bytes");
    }
  }
  return "";
}

absl::StatusOr<std::string> SerializeHeader(const std::string& path,
                                            const v1::ContainerHeader& header) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    // Equal headers give equal bytes, so equal artifacts hash equal.
    coded.SetSerializationDeterministic(true);
    if (!header.SerializeToCodedStream(&coded)) {
      return absl::InternalError(
          absl::StrCat(path, ": cannot serialize the container header"));
    }
  }
  if (bytes.size() > kMaxHeaderLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": container header would be ", bytes.size(),
        " bytes, more than the ", kMaxHeaderLength, " bytes readers accept"));
  }
  return bytes;
}

// A writer refuses what a reader would refuse, so it never produces a file
// that cannot be opened again.
absl::Status CheckHeaderForWrite(const std::string& path,
                                 const v1::ContainerHeader& header,
                                 uint64_t payload_length) {
  if (!header.has_kv_resize()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": cannot write a container header without kv_resize metadata"));
  }
  std::string defect = HeaderDefect(header, payload_length);
  if (!defect.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot write container header: ", defect));
  }
  return absl::OkStatus();
}

// Holes in the header slack read as zeros, but a file must still reach the
// end of its payload (or payload_offset when the payload is empty) so that a
// reader does not take it for a truncated one.
absl::Status ExtendTo(WritableFile& out, uint64_t written_end,
                      uint64_t file_end) {
  if (written_end >= file_end) return absl::OkStatus();
  return out.WriteAt(file_end - 1, absl::string_view("\0", 1));
}

// Writes header bytes and then the preamble: the magic lands last, so a
// write interrupted before it leaves a file every reader refuses outright.
absl::Status WriteFront(WritableFile& out, Preamble preamble,
                        absl::string_view header_bytes) {
  preamble.header_length = header_bytes.size();
  preamble.header_xxh64 = Xxh64(header_bytes);
  RBLN_RETURN_IF_ERROR(out.WriteAt(preamble.header_offset, header_bytes));
  return out.WriteAt(0, EncodePreamble(preamble));
}

}  // namespace

std::string EncodePreamble(const Preamble& preamble) {
  std::string raw(kPreambleSize, '\0');
  char* p = raw.data();
  std::memcpy(p + kMagicOffset, kContainerMagic, kMagicSize);
  PutLittleEndian(p + kMajorVersionOffset, preamble.major_version);
  PutLittleEndian(p + kMinorVersionOffset, preamble.minor_version);
  PutLittleEndian(p + kFlagsOffset, preamble.flags);
  PutLittleEndian(p + kHeaderOffsetOffset, preamble.header_offset);
  PutLittleEndian(p + kHeaderLengthOffset, preamble.header_length);
  PutLittleEndian(p + kHeaderCapacityOffset, preamble.header_capacity);
  PutLittleEndian(p + kPayloadOffsetOffset, preamble.payload_offset);
  PutLittleEndian(p + kPayloadLengthOffset, preamble.payload_length);
  PutLittleEndian(p + kHeaderXxh64Offset, preamble.header_xxh64);
  PutLittleEndian(p + kPreambleXxh64Offset,
                  Xxh64(absl::string_view(raw.data(), kPreambleXxh64Offset)));
  return raw;
}

namespace {

// The preamble: its magic, length and checksum, a version and flags this
// build reads, and regions that fit in 64-bit offsets.
absl::StatusOr<Preamble> ReadPreamble(const RandomAccessFile& file) {
  const std::string& path = file.path();
  std::array<char, kPreambleSize> raw{};
  RBLN_ASSIGN_OR_RETURN(size_t got, file.ReadAt(0, absl::MakeSpan(raw)));
  if (got == 0) {
    return absl::DataLossError(absl::StrCat(
        path,
        ": truncated preamble: the file is empty, a container starts "
        "with a ",
        kPreambleSize, "-byte preamble"));
  }
  // The magic is judged on whatever bytes there are, so that a short file
  // that is not a container at all is not reported as a truncated one.
  absl::string_view magic(raw.data(), std::min(got, kMagicSize));
  if (magic != MagicBytes().substr(0, magic.size())) {
    return BadMagicError(path, magic);
  }
  if (got < kPreambleSize) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated preamble: the file is ", got,
        " bytes, a container starts with a ", kPreambleSize, "-byte preamble"));
  }
  const uint64_t stored_preamble_xxh64 =
      GetLittleEndian<uint64_t>(raw.data() + kPreambleXxh64Offset);
  const uint64_t actual_preamble_xxh64 =
      Xxh64(absl::string_view(raw.data(), kPreambleXxh64Offset));
  if (stored_preamble_xxh64 != actual_preamble_xxh64) {
    return absl::DataLossError(
        absl::StrCat(path, ": preamble checksum mismatch (stored ",
                     HexU64(stored_preamble_xxh64), ", computed ",
                     HexU64(actual_preamble_xxh64), ")"));
  }

  const Preamble p = DecodePreambleFields(raw.data());
  if (p.major_version != kContainerMajorVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": unsupported artifact format: container version ",
        p.major_version, ".", p.minor_version, ", this build reads ",
        kContainerMajorVersion, ".x; recompile the artifact",
        p.major_version > kContainerMajorVersion
            ? " with a compiler that writes it, or upgrade rbln-artifactd"
            : ""));
  }
  if (p.flags != 0) {
    // A writer sets a flag only when readers that do not know it must not
    // use the file, so an unknown bit is a format this build cannot read.
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": unsupported artifact format: container flags ",
        absl::StrFormat("0x%08x", p.flags), " not known to this build (",
        kContainerMajorVersion, ".", kContainerMinorVersion,
        "); recompile the artifact or upgrade rbln-artifactd"));
  }
  RBLN_RETURN_IF_ERROR(CheckPreambleBounds(path, p));
  return p;
}

// The header and the payload the preamble places lie within the file of
// `file_size` bytes, and the header within its bounds.
absl::Status CheckRegionsInFile(const std::string& path, const Preamble& p,
                                uint64_t file_size) {
  const uint64_t room_for_header =
      file_size > p.header_offset ? file_size - p.header_offset : 0;
  if (p.header_length > room_for_header) {
    // A length within its reservation means the file was cut short; one past
    // both the reservation and the file means the length itself is wrong.
    if (p.header_length > p.header_capacity) {
      return absl::DataLossError(absl::StrCat(
          path, ": header length ", p.header_length,
          " beyond the end of the file (", file_size,
          " bytes) and its reserved region of ", p.header_capacity, " bytes"));
    }
    return absl::DataLossError(absl::StrCat(
        path, ": truncated header: the file is ", file_size,
        " bytes, the header ends at ", p.header_offset + p.header_length));
  }
  if (p.header_length > p.header_capacity) {
    return absl::DataLossError(absl::StrCat(
        path, ": header length ", p.header_length,
        " beyond its reserved region of ", p.header_capacity, " bytes"));
  }
  if (p.header_length > kMaxHeaderLength) {
    return absl::DataLossError(
        absl::StrCat(path, ": header length ", p.header_length,
                     " beyond the limit of ", kMaxHeaderLength, " bytes"));
  }
  const uint64_t payload_end = p.payload_offset + p.payload_length;
  if (file_size < payload_end) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated payload: the file is ", file_size,
                     " bytes, the payload ends at ", payload_end));
  }
  return absl::OkStatus();
}

// The header the preamble places: its checksum, its parse, and the format's
// invariants.
absl::StatusOr<v1::ContainerHeader> ReadHeader(const RandomAccessFile& file,
                                               const Preamble& p) {
  const std::string& path = file.path();
  std::string header_bytes(static_cast<size_t>(p.header_length), '\0');
  RBLN_ASSIGN_OR_RETURN(
      size_t header_got,
      file.ReadAt(p.header_offset, absl::MakeSpan(header_bytes)));
  if (header_got != header_bytes.size()) {
    // The size check above passed, so the file shrank while we read it.
    return absl::DataLossError(absl::StrCat(
        path, ": truncated header: read ", header_got, " of ",
        header_bytes.size(), " bytes at offset ", p.header_offset));
  }
  const uint64_t actual_header_xxh64 = Xxh64(header_bytes);
  if (actual_header_xxh64 != p.header_xxh64) {
    return absl::DataLossError(absl::StrCat(
        path, ": header checksum mismatch (stored ", HexU64(p.header_xxh64),
        ", computed ", HexU64(actual_header_xxh64), ")"));
  }
  v1::ContainerHeader header;
  if (!header.ParseFromString(header_bytes)) {
    return absl::DataLossError(absl::StrCat(
        path, ": header does not parse as rbln.artifact.v1.ContainerHeader"));
  }
  // Checked before the other invariants: a header from an older compiler may
  // not keep them either, and "recompile" is the advice that helps.
  if (!header.has_kv_resize()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path,
        ": unsupported artifact format: the header has no KV-cache resize "
        "metadata (compiled by an older compiler); recompile the artifact"));
  }
  std::string defect = HeaderDefect(header, p.payload_length);
  if (!defect.empty()) {
    return absl::DataLossError(absl::StrCat(path, ": ", defect));
  }
  return header;
}

absl::StatusOr<Container> DecodeContainer(const RandomAccessFile& file) {
  Container container;
  RBLN_ASSIGN_OR_RETURN(container.file_size, file.Size());
  RBLN_ASSIGN_OR_RETURN(container.preamble, ReadPreamble(file));
  RBLN_RETURN_IF_ERROR(
      CheckRegionsInFile(file.path(), container.preamble, container.file_size));
  RBLN_ASSIGN_OR_RETURN(container.header, ReadHeader(file, container.preamble));
  return container;
}

}  // namespace

absl::StatusOr<Container> ReadContainer(const RandomAccessFile& file) {
  absl::StatusOr<Container> container = DecodeContainer(file);
  CountContainerCall(ContainerOperation::kDecode, container.status());
  return container;
}

absl::StatusOr<VerifiedPayload> VerifyPayload(const RandomAccessFile& file,
                                              const Container& container) {
  const std::string& path = file.path();
  const uint64_t payload_offset = container.preamble.payload_offset;
  const auto& segments = container.header.segments();
  RBLN_ASSIGN_OR_RETURN(
      std::vector<uint64_t> digests,
      HashSegmentsInChunks(
          path, segments,
          [&](const v1::PayloadSegment& segment, uint64_t offset,
              absl::Span<char> chunk) -> absl::Status {
            const uint64_t at = payload_offset + segment.offset() + offset;
            RBLN_ASSIGN_OR_RETURN(size_t got, file.ReadAt(at, chunk));
            if (got != chunk.size()) {
              return absl::DataLossError(absl::StrCat(
                  path, ": truncated payload: segment '", segment.name(),
                  "' ends at offset ",
                  payload_offset + segment.offset() + segment.length(),
                  ", the file ends at ", at + got));
            }
            return absl::OkStatus();
          }));
  for (int i = 0; i < segments.size(); ++i) {
    if (digests[i] != segments[i].xxh64()) {
      return absl::DataLossError(absl::StrCat(
          path, ": payload segment '", segments[i].name(),
          "' checksum mismatch (stored ", HexU64(segments[i].xxh64()),
          ", computed ", HexU64(digests[i]), ")"));
    }
  }
  VerifiedPayload verified;
  verified.segments = static_cast<uint64_t>(segments.size());
  for (const v1::PayloadSegment& segment : segments) {
    verified.bytes += segment.length();
  }
  return verified;
}

ContainerLayout LayoutForHeader(uint64_t header_length) {
  ContainerLayout layout;
  layout.payload_offset = RoundUp(
      kPreambleSize + 2 * header_length + kPayloadAlignment, kPayloadAlignment);
  layout.header_capacity = layout.payload_offset - kPreambleSize;
  return layout;
}

namespace {

absl::Status EncodeNewContainer(WritableFile& out, v1::ContainerHeader header,
                                const PayloadFiller& fill) {
  const std::string& path = out.path();
  uint64_t payload_length = 0;
  for (v1::PayloadSegment& segment : *header.mutable_segments()) {
    // Page-aligned segments can be mapped or cloned one by one.
    segment.set_offset(RoundUp(payload_length, kPayloadAlignment));
    payload_length = segment.offset() + segment.length();
    // All-ones is the longest varint, so the final header, whatever its
    // checksums, is no longer than this one and fits the layout chosen now.
    segment.set_xxh64(std::numeric_limits<uint64_t>::max());
  }
  RBLN_RETURN_IF_ERROR(CheckHeaderForWrite(path, header, payload_length));
  RBLN_ASSIGN_OR_RETURN(std::string longest_header,
                        SerializeHeader(path, header));
  const ContainerLayout layout = LayoutForHeader(longest_header.size());

  uint64_t written_end = 0;
  RBLN_ASSIGN_OR_RETURN(
      std::vector<uint64_t> digests,
      HashSegmentsInChunks(
          path, header.segments(),
          [&](const v1::PayloadSegment& segment, uint64_t offset,
              absl::Span<char> chunk) -> absl::Status {
            fill(segment, offset, chunk);
            const uint64_t at =
                layout.payload_offset + segment.offset() + offset;
            written_end = at + chunk.size();
            return out.WriteAt(at,
                               absl::string_view(chunk.data(), chunk.size()));
          }));
  for (int i = 0; i < header.segments_size(); ++i) {
    header.mutable_segments(i)->set_xxh64(digests[i]);
  }

  RBLN_ASSIGN_OR_RETURN(std::string header_bytes,
                        SerializeHeader(path, header));
  if (header_bytes.size() > layout.header_capacity) {
    return absl::InternalError(
        absl::StrCat(path, ": container header grew to ", header_bytes.size(),
                     " bytes after checksumming, past its reserved ",
                     layout.header_capacity));
  }
  RBLN_RETURN_IF_ERROR(
      ExtendTo(out, written_end, layout.payload_offset + payload_length));
  Preamble preamble;
  preamble.header_offset = kPreambleSize;
  preamble.header_capacity = layout.header_capacity;
  preamble.payload_offset = layout.payload_offset;
  preamble.payload_length = payload_length;
  return WriteFront(out, preamble, header_bytes);
}

}  // namespace

absl::Status WriteNewContainer(WritableFile& out, v1::ContainerHeader header,
                               const PayloadFiller& fill) {
  absl::Status written = EncodeNewContainer(out, std::move(header), fill);
  CountContainerCall(ContainerOperation::kEncode, written);
  return written;
}

namespace {

absl::Status EncodeWithHeader(
    const RandomAccessFile& src, const Container& src_container,
    const v1::ContainerHeader& new_header, WritableFile& out,
    const std::function<absl::Status(uint64_t bytes)>& on_copied) {
  const std::string& path = out.path();
  const Preamble& src_preamble = src_container.preamble;
  const auto& old_segments = src_container.header.segments();
  const auto& new_segments = new_header.segments();
  // The payload is copied, not rewritten, so the new header must describe
  // exactly the bytes that are copied.
  bool same_segments = old_segments.size() == new_segments.size();
  for (int i = 0; same_segments && i < old_segments.size(); ++i) {
    const v1::PayloadSegment& a = old_segments[i];
    const v1::PayloadSegment& b = new_segments[i];
    same_segments = a.name() == b.name() && a.offset() == b.offset() &&
                    a.length() == b.length() && a.xxh64() == b.xxh64();
  }
  if (!same_segments) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the new header's payload segments differ from those of ",
        src.path(), "; a header rewrite keeps the payload as it is"));
  }
  RBLN_RETURN_IF_ERROR(
      CheckHeaderForWrite(path, new_header, src_preamble.payload_length));
  RBLN_ASSIGN_OR_RETURN(std::string header_bytes,
                        SerializeHeader(path, new_header));

  Preamble preamble;
  preamble.payload_length = src_preamble.payload_length;
  if (header_bytes.size() <= src_preamble.header_capacity) {
    preamble.header_offset = src_preamble.header_offset;
    preamble.header_capacity = src_preamble.header_capacity;
    preamble.payload_offset = src_preamble.payload_offset;
  } else {
    const ContainerLayout layout = LayoutForHeader(header_bytes.size());
    preamble.header_offset = kPreambleSize;
    preamble.header_capacity = layout.header_capacity;
    preamble.payload_offset = layout.payload_offset;
  }
  // Chunks keep progress visible on multi-GiB payloads; they stay 4 KiB
  // aligned so reflinks still apply.
  for (uint64_t done = 0; done < src_preamble.payload_length;) {
    const uint64_t n =
        std::min(kCopyChunkBytes, src_preamble.payload_length - done);
    RBLN_RETURN_IF_ERROR(out.CopyRangeFrom(src,
                                           src_preamble.payload_offset + done,
                                           n, preamble.payload_offset + done));
    done += n;
    if (on_copied) RBLN_RETURN_IF_ERROR(on_copied(n));
  }
  const uint64_t payload_end =
      preamble.payload_offset + preamble.payload_length;
  RBLN_RETURN_IF_ERROR(ExtendTo(
      out, preamble.payload_length > 0 ? payload_end : 0, payload_end));
  return WriteFront(out, preamble, header_bytes);
}

}  // namespace

absl::Status WriteContainerWithHeader(
    const RandomAccessFile& src, const Container& src_container,
    const v1::ContainerHeader& new_header, WritableFile& out,
    const std::function<absl::Status(uint64_t bytes)>& on_copied) {
  absl::Status written =
      EncodeWithHeader(src, src_container, new_header, out, on_copied);
  CountContainerCall(ContainerOperation::kEncode, written);
  return written;
}

}  // namespace rbln
