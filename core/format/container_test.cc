#include "core/format/container.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/os/env.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace rbln {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::rbln::testing::HashFile;
using ::rbln::testing::ReadFileOrDie;
using ::rbln::testing::TempDir;
using ::rbln::testing::WriteFileOrDie;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr uint64_t kProgramLength = 5000;
constexpr uint64_t kWeightsLength = 9000;
// The program is padded to the next 4 KiB page, where the weights start.
constexpr uint64_t kWeightsOffset = 8192;

// Deterministic pseudo-random bytes (splitmix64), different per segment, so a
// byte copied to the wrong place or from the wrong segment shows.
char SegmentByte(absl::string_view segment_name, uint64_t index) {
  uint64_t x = XXH64(segment_name.data(), segment_name.size(), 0) +
               (index + 1) * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return static_cast<char>(x ^ (x >> 31));
}

std::string SegmentBytes(absl::string_view segment_name, uint64_t length) {
  std::string bytes(length, '\0');
  for (uint64_t i = 0; i < length; ++i) bytes[i] = SegmentByte(segment_name, i);
  return bytes;
}

void FillSegment(const v1::PayloadSegment& segment, uint64_t offset,
                 absl::Span<char> out) {
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = SegmentByte(segment.name(), offset + i);
  }
}

void AddPlacements(int num_nodes, int chiplets, uint64_t bytes,
                   google::protobuf::RepeatedPtrField<v1::Placement>* out) {
  for (int node = 0; node < num_nodes; ++node) {
    for (int chiplet = 0; chiplet < chiplets; ++chiplet) {
      v1::Placement* placement = out->Add();
      placement->set_node(node);
      placement->set_chiplet(chiplet);
      placement->set_bytes(bytes);
    }
  }
}

// A decoder graph on 2 nodes of 4 chiplets: weights and a workspace, two
// resizable full-attention layers (K and V) and one fixed sliding-window
// layer, and a program and weights payload of a few KiB.
v1::ContainerHeader SampleHeader() {
  v1::ContainerHeader header;
  header.set_compiled_model_name("prefill");
  header.set_npu("RBLN-CR03");
  header.set_num_nodes(2);
  header.set_chiplets_per_node(4);
  v1::Allocation* weights = header.add_allocations();
  weights->set_key("weights");
  AddPlacements(2, 4, uint64_t{3} << 30, weights->mutable_placements());
  v1::Allocation* workspace = header.add_allocations();
  workspace->set_key("workspace");
  AddPlacements(2, 4, uint64_t{64} << 20, workspace->mutable_placements());
  for (int layer = 0; layer < 3; ++layer) {
    for (const char* kind : {"key", "value"}) {
      v1::KvTensor* tensor = header.add_kv_tensors();
      tensor->set_name(absl::StrCat(kind, "_cache_", layer));
      tensor->set_layer_index(layer);
      tensor->set_resizable(layer != 2);
      AddPlacements(2, 4, (layer != 2 ? 16 : 8) * (uint64_t{1} << 20),
                    tensor->mutable_placements());
    }
  }
  v1::PayloadSegment* program = header.add_segments();
  program->set_name("program");
  program->set_length(kProgramLength);
  v1::PayloadSegment* payload_weights = header.add_segments();
  payload_weights->set_name("weights");
  payload_weights->set_length(kWeightsLength);
  header.mutable_kv_resize()->set_compiled_num_blocks(16);
  return header;
}

absl::Status WriteContainerFile(const std::string& path,
                                const v1::ContainerHeader& header,
                                const PayloadFiller& fill = FillSegment) {
  absl::StatusOr<std::unique_ptr<WritableFile>> out =
      Env::Default()->NewWritableFile(path);
  if (!out.ok()) return out.status();
  absl::Status status = WriteNewContainer(**out, header, fill);
  if (!status.ok()) return status;
  return (*out)->Close();
}

std::unique_ptr<RandomAccessFile> OpenOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      Env::Default()->NewRandomAccessFile(path);
  EXPECT_TRUE(file.ok()) << file.status();
  return file.ok() ? std::move(*file) : nullptr;
}

absl::StatusOr<Container> ReadContainerFile(const std::string& path) {
  std::unique_ptr<RandomAccessFile> file = OpenOrDie(path);
  if (file == nullptr) return absl::InternalError("cannot open " + path);
  return ReadContainer(*file);
}

absl::Status VerifyContainerFile(const std::string& path) {
  std::unique_ptr<RandomAccessFile> file = OpenOrDie(path);
  if (file == nullptr) return absl::InternalError("cannot open " + path);
  absl::StatusOr<Container> container = ReadContainer(*file);
  if (!container.ok()) return container.status();
  return VerifyPayload(*file, *container).status();
}

absl::Status RewriteWithHeader(const std::string& src_path,
                               const v1::ContainerHeader& new_header,
                               const std::string& dst_path) {
  std::unique_ptr<RandomAccessFile> src = OpenOrDie(src_path);
  if (src == nullptr) return absl::InternalError("cannot open " + src_path);
  absl::StatusOr<Container> container = ReadContainer(*src);
  if (!container.ok()) return container.status();
  absl::StatusOr<std::unique_ptr<WritableFile>> out =
      Env::Default()->NewWritableFile(dst_path);
  if (!out.ok()) return out.status();
  absl::Status status =
      WriteContainerWithHeader(*src, *container, new_header, **out);
  if (!status.ok()) return status;
  return (*out)->Close();
}

std::string PayloadBytes(const std::string& file_bytes,
                         const Preamble& preamble) {
  return file_bytes.substr(preamble.payload_offset, preamble.payload_length);
}

// Every refusal must be specific: the right class, the file's path first,
// and words that tell this failure from the others.
void ExpectRefusal(const absl::Status& status, absl::StatusCode code,
                   const std::string& path, absl::string_view words) {
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_THAT(std::string(status.message()), StartsWith(path + ": "));
  EXPECT_THAT(std::string(status.message()), HasSubstr(std::string(words)));
}

class ContainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    good_path_ = dir_.Join("prefill.rbln");
    ASSERT_TRUE(WriteContainerFile(good_path_, SampleHeader()).ok());
    good_bytes_ = ReadFileOrDie(good_path_);
    absl::StatusOr<Container> container = ReadContainerFile(good_path_);
    ASSERT_TRUE(container.ok()) << container.status();
    good_ = *container;
  }

  // A copy of the good file changed by `mutate`, at a fresh path.
  std::string Corrupt(absl::string_view name,
                      const std::function<void(std::string&)>& mutate) {
    std::string bytes = good_bytes_;
    mutate(bytes);
    std::string path = dir_.Join(name);
    WriteFileOrDie(path, bytes);
    return path;
  }

  // The good file with its preamble re-encoded (valid checksum) after
  // `mutate`: corruption the preamble checksum cannot catch.
  std::string WithPreamble(absl::string_view name,
                           const std::function<void(Preamble&)>& mutate) {
    Preamble preamble = good_.preamble;
    mutate(preamble);
    return Corrupt(name, [&](std::string& bytes) {
      bytes.replace(0, kPreambleSize, EncodePreamble(preamble));
    });
  }

  // The good file with `header_bytes` in its header region and a preamble
  // that vouches for them, as a buggy or older writer would produce.
  std::string WithHeaderBytes(absl::string_view name,
                              const std::string& header_bytes) {
    Preamble preamble = good_.preamble;
    EXPECT_LE(header_bytes.size(), preamble.header_capacity);
    preamble.header_length = header_bytes.size();
    preamble.header_xxh64 = XXH64(header_bytes.data(), header_bytes.size(), 0);
    return Corrupt(name, [&](std::string& bytes) {
      bytes.replace(preamble.header_offset, header_bytes.size(), header_bytes);
      bytes.replace(0, kPreambleSize, EncodePreamble(preamble));
    });
  }

  TempDir dir_;
  std::string good_path_;
  std::string good_bytes_;
  Container good_;
};

TEST_F(ContainerTest, RoundTripKeepsHeaderAndPayload) {
  v1::ContainerHeader expected = SampleHeader();
  expected.mutable_segments(0)->set_offset(0);
  expected.mutable_segments(0)->set_xxh64(
      XXH64(SegmentBytes("program", kProgramLength).data(), kProgramLength, 0));
  expected.mutable_segments(1)->set_offset(kWeightsOffset);
  expected.mutable_segments(1)->set_xxh64(
      XXH64(SegmentBytes("weights", kWeightsLength).data(), kWeightsLength, 0));
  std::string diff;
  MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differencer.Compare(expected, good_.header)) << diff;

  const std::string header_bytes = expected.SerializeAsString();
  const Preamble& p = good_.preamble;
  EXPECT_EQ(p.major_version, 1);
  EXPECT_EQ(p.minor_version, 0);
  EXPECT_EQ(p.flags, 0u);
  EXPECT_EQ(p.header_offset, kPreambleSize);
  EXPECT_EQ(p.header_length, header_bytes.size());
  EXPECT_EQ(p.header_xxh64, XXH64(header_bytes.data(), header_bytes.size(), 0));
  EXPECT_GE(p.header_capacity, 2 * p.header_length + kPayloadAlignment);
  EXPECT_EQ(p.payload_offset, p.header_offset + p.header_capacity);
  EXPECT_EQ(p.payload_offset % kPayloadAlignment, 0u);
  EXPECT_EQ(p.payload_length, kWeightsOffset + kWeightsLength);
  EXPECT_EQ(good_.file_size, p.payload_offset + p.payload_length);
  EXPECT_EQ(good_.file_size, good_bytes_.size());

  // The bytes on disk, checked without the library's decoder.
  EXPECT_EQ(good_bytes_.substr(0, 8), std::string(kContainerMagic, 8));
  EXPECT_EQ(good_bytes_.substr(0, kPreambleSize), EncodePreamble(p));
  EXPECT_EQ(good_bytes_.substr(p.header_offset, p.header_length), header_bytes);
  EXPECT_EQ(
      good_bytes_.substr(p.header_offset + p.header_length,
                         p.payload_offset - p.header_length - p.header_offset),
      std::string(p.payload_offset - p.header_offset - p.header_length, '\0'));
  EXPECT_EQ(good_bytes_.substr(p.payload_offset, kProgramLength),
            SegmentBytes("program", kProgramLength));
  EXPECT_EQ(good_bytes_.substr(p.payload_offset + kProgramLength,
                               kWeightsOffset - kProgramLength),
            std::string(kWeightsOffset - kProgramLength, '\0'));
  EXPECT_EQ(good_bytes_.substr(p.payload_offset + kWeightsOffset),
            SegmentBytes("weights", kWeightsLength));

  EXPECT_TRUE(VerifyContainerFile(good_path_).ok());
}

std::string FromHex(absl::string_view hex) {
  std::string bytes;
  int high = -1;
  for (char c : hex) {
    if (c == ' ' || c == '\n') continue;
    const int nibble = c <= '9' ? c - '0' : c - 'a' + 10;
    if (high < 0) {
      high = nibble;
    } else {
      bytes.push_back(static_cast<char>(high << 4 | nibble));
      high = -1;
    }
  }
  return bytes;
}

// The worked example of docs/rbln-container.md (section 11), byte for byte:
// if this test changes, the page must change with it.
TEST(DocumentedExampleTest, WriterProducesTheDocumentedBytes) {
  v1::ContainerHeader header;
  header.set_compiled_model_name("prefill");
  header.set_npu("RBLN-CA12");
  header.set_num_nodes(1);
  header.set_chiplets_per_node(1);
  v1::Allocation* weights = header.add_allocations();
  weights->set_key("weights");
  weights->add_placements()->set_bytes(4096);
  v1::KvTensor* tensor = header.add_kv_tensors();
  tensor->set_name("key_cache_0");
  tensor->set_resizable(true);
  tensor->add_placements()->set_bytes(16384);
  header.add_segments()->set_name("program");
  header.mutable_segments(0)->set_length(16);
  header.mutable_kv_resize()->set_compiled_num_blocks(8);
  const absl::string_view payload = "example payload\n";

  TempDir dir;
  const std::string path = dir.Join("prefill.rbln");
  ASSERT_TRUE(WriteContainerFile(path, header,
                                 [&](const v1::PayloadSegment&, uint64_t offset,
                                     absl::Span<char> out) {
                                   payload.copy(out.data(), out.size(), offset);
                                 })
                  .ok());

  const std::string preamble = FromHex(R"(
      89 52 42 4c 0d 0a 1a 0a  01 00 00 00 00 00 00 00
      80 00 00 00 00 00 00 00  5b 00 00 00 00 00 00 00
      80 1f 00 00 00 00 00 00  00 20 00 00 00 00 00 00
      10 00 00 00 00 00 00 00  09 02 86 34 1b af 86 77
      00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00
      00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00
      00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00
      00 00 00 00 00 00 00 00  d9 18 7a 76 15 39 44 73)");
  const std::string header_bytes = FromHex(R"(
      0a 07 70 72 65 66 69 6c 6c
      12 09 52 42 4c 4e 2d 43 41 31 32
      18 01
      20 01
      2a 0e
         0a 07 77 65 69 67 68 74 73
         12 03 18 80 20
      32 15
         0a 0b 6b 65 79 5f 63 61 63 68 65 5f 30
         18 01
         22 04 18 80 80 01
      3a 16
         0a 07 70 72 6f 67 72 61 6d
         18 10
         20 a6 d4 c8 e5 db da e6 92 a7 01
      42 02 08 08)");
  ASSERT_EQ(preamble.size(), kPreambleSize);
  ASSERT_EQ(header_bytes.size(), 91u);
  const std::string expected = absl::StrCat(
      preamble, header_bytes,
      std::string(8192 - kPreambleSize - header_bytes.size(), '\0'), payload);
  EXPECT_EQ(ReadFileOrDie(path), expected);
  EXPECT_EQ(XXH64(payload.data(), payload.size(), 0), 0xa7259ad5bcb22a26u);
  EXPECT_EQ(XXH64("", 0, 0), 0xef46db3751d8e999u);
}

TEST(LayoutForHeaderTest, LeavesRoomToDoubleAndAlignsThePayload) {
  for (uint64_t length : {0ull, 1ull, 1000ull, 1984ull, 1985ull, 100000ull}) {
    ContainerLayout layout = LayoutForHeader(length);
    EXPECT_EQ(layout.payload_offset % kPayloadAlignment, 0u) << length;
    EXPECT_EQ(layout.payload_offset, kPreambleSize + layout.header_capacity);
    EXPECT_GE(layout.header_capacity, 2 * length + kPayloadAlignment);
    EXPECT_LT(layout.header_capacity, 2 * length + 2 * kPayloadAlignment);
  }
  EXPECT_EQ(LayoutForHeader(0).payload_offset, 8192u);
  EXPECT_EQ(LayoutForHeader(1984).payload_offset, 8192u);
  EXPECT_EQ(LayoutForHeader(1985).payload_offset, 12288u);
}

TEST_F(ContainerTest, SameHeaderWritesIdenticalFiles) {
  const std::string again = dir_.Join("again.rbln");
  ASSERT_TRUE(WriteContainerFile(again, SampleHeader()).ok());
  EXPECT_EQ(HashFile(again), HashFile(good_path_));
}

TEST_F(ContainerTest, SmallHeaderChangeKeepsPayloadInPlace) {
  // What a resize from 16 to 32 blocks does to the header.
  v1::ContainerHeader resized = good_.header;
  for (v1::KvTensor& tensor : *resized.mutable_kv_tensors()) {
    if (!tensor.resizable()) continue;
    for (v1::Placement& placement : *tensor.mutable_placements()) {
      placement.set_bytes(placement.bytes() * 2);
    }
  }
  const std::string out = dir_.Join("resized.rbln");
  ASSERT_TRUE(RewriteWithHeader(good_path_, resized, out).ok());

  absl::StatusOr<Container> got = ReadContainerFile(out);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(MessageDifferencer::Equals(got->header, resized));
  EXPECT_EQ(got->preamble.payload_offset, good_.preamble.payload_offset);
  EXPECT_EQ(got->preamble.header_capacity, good_.preamble.header_capacity);
  EXPECT_EQ(got->preamble.payload_length, good_.preamble.payload_length);
  EXPECT_NE(got->preamble.header_xxh64, good_.preamble.header_xxh64);
  for (int i = 0; i < good_.header.segments_size(); ++i) {
    EXPECT_EQ(got->header.segments(i).xxh64(),
              good_.header.segments(i).xxh64());
  }
  EXPECT_EQ(PayloadBytes(ReadFileOrDie(out), got->preamble),
            PayloadBytes(good_bytes_, good_.preamble));
  EXPECT_TRUE(VerifyContainerFile(out).ok());
}

TEST_F(ContainerTest, HeaderOutgrowingItsRegionMovesThePayload) {
  v1::ContainerHeader bigger = good_.header;
  for (int i = 0; i < 3000; ++i) {
    v1::KvTensor* tensor = bigger.add_kv_tensors();
    tensor->set_name(absl::StrCat(std::string(120, 'k'), "_", i));
    tensor->set_layer_index(100 + i);
    AddPlacements(2, 4, 4096, tensor->mutable_placements());
  }
  const uint64_t bigger_length = bigger.ByteSizeLong();
  ASSERT_GT(bigger_length, good_.preamble.header_capacity);
  const std::string out = dir_.Join("bigger.rbln");
  ASSERT_TRUE(RewriteWithHeader(good_path_, bigger, out).ok());

  absl::StatusOr<Container> got = ReadContainerFile(out);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(MessageDifferencer::Equals(got->header, bigger));
  EXPECT_EQ(got->preamble.header_offset, kPreambleSize);
  EXPECT_EQ(got->preamble.payload_offset,
            LayoutForHeader(bigger_length).payload_offset);
  EXPECT_GT(got->preamble.payload_offset, good_.preamble.payload_offset);
  EXPECT_EQ(got->preamble.payload_offset % kPayloadAlignment, 0u);
  EXPECT_EQ(PayloadBytes(ReadFileOrDie(out), got->preamble),
            PayloadBytes(good_bytes_, good_.preamble));
  EXPECT_TRUE(VerifyContainerFile(out).ok());
}

TEST_F(ContainerTest, HeaderRewriteRefusesChangedSegments) {
  v1::ContainerHeader changed = good_.header;
  changed.mutable_segments(1)->set_length(kWeightsLength - 1);
  const std::string out = dir_.Join("changed.rbln");
  absl::Status status = RewriteWithHeader(good_path_, changed, out);
  ExpectRefusal(status, absl::StatusCode::kInvalidArgument, out,
                "payload segments differ");
}

TEST_F(ContainerTest, HeaderRewriteRefusesPlacementOutOfRange) {
  v1::ContainerHeader broken = good_.header;
  broken.mutable_kv_tensors(0)->mutable_placements(0)->set_chiplet(4);
  const std::string out = dir_.Join("broken.rbln");
  ExpectRefusal(RewriteWithHeader(good_path_, broken, out),
                absl::StatusCode::kInvalidArgument, out, "chiplet 4, outside");
}

TEST_F(ContainerTest, WriterRefusesHeaderWithoutResizeMetadata) {
  v1::ContainerHeader header = SampleHeader();
  header.clear_kv_resize();
  const std::string path = dir_.Join("old.rbln");
  ExpectRefusal(WriteContainerFile(path, header),
                absl::StatusCode::kInvalidArgument, path, "kv_resize");
}

TEST_F(ContainerTest, LargeSegmentIsStreamedInBoundedChunks) {
  v1::ContainerHeader header = SampleHeader();
  const uint64_t length = (uint64_t{5} << 20) / 2 + 123;
  header.mutable_segments(1)->set_length(length);
  size_t largest_chunk = 0;
  uint64_t next_offset = 0;
  PayloadFiller fill = [&](const v1::PayloadSegment& segment, uint64_t offset,
                           absl::Span<char> out) {
    largest_chunk = std::max(largest_chunk, out.size());
    if (segment.name() == "weights") {
      EXPECT_EQ(offset, next_offset);
      next_offset = offset + out.size();
    }
    FillSegment(segment, offset, out);
  };
  const std::string path = dir_.Join("large.rbln");
  ASSERT_TRUE(WriteContainerFile(path, header, fill).ok());
  EXPECT_LE(largest_chunk, size_t{1} << 20);
  EXPECT_EQ(next_offset, length);

  absl::StatusOr<Container> got = ReadContainerFile(path);
  ASSERT_TRUE(got.ok()) << got.status();
  const std::string weights = SegmentBytes("weights", length);
  EXPECT_EQ(got->header.segments(1).xxh64(),
            XXH64(weights.data(), weights.size(), 0));
  EXPECT_TRUE(VerifyContainerFile(path).ok());
}

TEST_F(ContainerTest, ZeroLengthPayload) {
  v1::ContainerHeader header = SampleHeader();
  header.clear_segments();
  const std::string path = dir_.Join("empty_payload.rbln");
  ASSERT_TRUE(WriteContainerFile(path, header).ok());
  absl::StatusOr<Container> got = ReadContainerFile(path);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->preamble.payload_length, 0u);
  EXPECT_EQ(got->preamble.payload_offset % kPayloadAlignment, 0u);
  EXPECT_EQ(got->file_size, got->preamble.payload_offset);
  EXPECT_TRUE(VerifyContainerFile(path).ok());

  // Moving an empty payload must still leave a file that reaches its end.
  v1::ContainerHeader bigger = got->header;
  bigger.set_compiled_model_name(std::string(20000, 'n'));
  const std::string moved = dir_.Join("empty_payload_moved.rbln");
  ASSERT_TRUE(RewriteWithHeader(path, bigger, moved).ok());
  absl::StatusOr<Container> moved_got = ReadContainerFile(moved);
  ASSERT_TRUE(moved_got.ok()) << moved_got.status();
  EXPECT_GT(moved_got->preamble.payload_offset, got->preamble.payload_offset);
  EXPECT_EQ(moved_got->file_size, moved_got->preamble.payload_offset);
}

TEST_F(ContainerTest, EmptyLastSegmentStillReachesPayloadEnd) {
  v1::ContainerHeader header = SampleHeader();
  header.mutable_segments(1)->set_length(0);
  const std::string path = dir_.Join("empty_segment.rbln");
  ASSERT_TRUE(WriteContainerFile(path, header).ok());
  absl::StatusOr<Container> got = ReadContainerFile(path);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->header.segments(1).offset(), kWeightsOffset);
  EXPECT_EQ(got->preamble.payload_length, kWeightsOffset);
  EXPECT_EQ(got->file_size,
            got->preamble.payload_offset + got->preamble.payload_length);
  EXPECT_TRUE(VerifyContainerFile(path).ok());
}

TEST_F(ContainerTest, RefusesEmptyFile) {
  const std::string path = dir_.Join("empty.rbln");
  WriteFileOrDie(path, "");
  ExpectRefusal(ReadContainerFile(path).status(), absl::StatusCode::kDataLoss,
                path, "truncated preamble: the file is empty");
}

TEST_F(ContainerTest, RefusesBadMagic) {
  const std::string path = dir_.Join("text.rbln");
  WriteFileOrDie(path, std::string(300, 'x'));
  ExpectRefusal(ReadContainerFile(path).status(), absl::StatusCode::kDataLoss,
                path, "not an .rbln container");
}

TEST_F(ContainerTest, RefusesMagicMangledByTextModeTransfer) {
  const std::string crlf = Corrupt("crlf.rbln", [](std::string& bytes) {
    bytes.erase(4, 1);  // "\r\n" -> "\n"
  });
  ExpectRefusal(ReadContainerFile(crlf).status(), absl::StatusCode::kDataLoss,
                crlf, "transferred in text mode");
  const std::string seven_bit = Corrupt("7bit.rbln", [](std::string& bytes) {
    bytes[0] = static_cast<char>(bytes[0] & 0x7f);
  });
  ExpectRefusal(ReadContainerFile(seven_bit).status(),
                absl::StatusCode::kDataLoss, seven_bit,
                "transferred in text mode");
}

TEST_F(ContainerTest, RefusesTruncatedPreamble) {
  const std::string path = Corrupt("short.rbln", [](std::string& bytes) {
    bytes.resize(kPreambleSize - 1);
  });
  ExpectRefusal(ReadContainerFile(path).status(), absl::StatusCode::kDataLoss,
                path, "truncated preamble: the file is 127 bytes");
}

TEST_F(ContainerTest, RefusesPreambleChecksumMismatch) {
  // A reserved byte: only the checksum can notice it changed.
  const std::string path =
      Corrupt("preamble.rbln", [](std::string& bytes) { bytes[80] ^= 0x01; });
  ExpectRefusal(ReadContainerFile(path).status(), absl::StatusCode::kDataLoss,
                path, "preamble checksum mismatch");
}

TEST_F(ContainerTest, RefusesUnknownMajorVersion) {
  const std::string path = WithPreamble(
      "v2.rbln", [](Preamble& preamble) { preamble.major_version = 2; });
  absl::Status status = ReadContainerFile(path).status();
  ExpectRefusal(status, absl::StatusCode::kFailedPrecondition, path,
                "unsupported artifact format: container version 2.0, this "
                "build reads 1.x; recompile the artifact");
}

TEST_F(ContainerTest, AcceptsNewerMinorVersion) {
  const std::string path = WithPreamble(
      "v1_7.rbln", [](Preamble& preamble) { preamble.minor_version = 7; });
  absl::StatusOr<Container> got = ReadContainerFile(path);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->preamble.minor_version, 7);
}

TEST_F(ContainerTest, RefusesUnknownFlags) {
  const std::string path = WithPreamble(
      "flags.rbln", [](Preamble& preamble) { preamble.flags = 0x4; });
  ExpectRefusal(ReadContainerFile(path).status(),
                absl::StatusCode::kFailedPrecondition, path,
                "container flags 0x00000004 not known");
}

TEST_F(ContainerTest, RefusesHeaderLengthBeyondFile) {
  const std::string path = WithPreamble("huge_header.rbln", [](Preamble& p) {
    p.header_length = uint64_t{1} << 40;
  });
  ExpectRefusal(ReadContainerFile(path).status(), absl::StatusCode::kDataLoss,
                path, "header length 1099511627776 beyond the end of the file");
}

TEST_F(ContainerTest, RefusesHeaderLengthBeyondItsRegion) {
  const std::string path = WithPreamble("long_header.rbln", [](Preamble& p) {
    p.header_length = p.header_capacity + 1;
  });
  ExpectRefusal(ReadContainerFile(path).status(), absl::StatusCode::kDataLoss,
                path, "beyond its reserved region");
}

TEST_F(ContainerTest, RefusesMisalignedPayload) {
  const std::string path = WithPreamble(
      "misaligned.rbln", [](Preamble& p) { p.payload_offset += 512; });
  ExpectRefusal(ReadContainerFile(path).status(), absl::StatusCode::kDataLoss,
                path, "is not a multiple of 4096");
}

TEST_F(ContainerTest, RefusesHeaderRegionOverlappingPayload) {
  const std::string path =
      WithPreamble("overlap.rbln", [](Preamble& p) { p.header_capacity += 1; });
  ExpectRefusal(ReadContainerFile(path).status(), absl::StatusCode::kDataLoss,
                path, "overlaps the payload");
}

TEST_F(ContainerTest, RefusesPayloadLengthThatOverflows) {
  const std::string path = WithPreamble("overflow.rbln", [](Preamble& p) {
    p.payload_length = std::numeric_limits<uint64_t>::max() - 100;
  });
  ExpectRefusal(ReadContainerFile(path).status(), absl::StatusCode::kDataLoss,
                path, "overflows a 64-bit file offset");
}

TEST_F(ContainerTest, RefusesTruncatedHeader) {
  const uint64_t cut =
      good_.preamble.header_offset + good_.preamble.header_length / 2;
  const std::string path = Corrupt(
      "cut_header.rbln", [&](std::string& bytes) { bytes.resize(cut); });
  ExpectRefusal(ReadContainerFile(path).status(), absl::StatusCode::kDataLoss,
                path, absl::StrCat("truncated header: the file is ", cut));
}

TEST_F(ContainerTest, RefusesTruncatedPayload) {
  const std::string path = Corrupt("cut_payload.rbln", [](std::string& bytes) {
    bytes.resize(bytes.size() - 100);
  });
  ExpectRefusal(ReadContainerFile(path).status(), absl::StatusCode::kDataLoss,
                path, "truncated payload");
}

TEST_F(ContainerTest, RefusesHeaderChecksumMismatch) {
  const uint64_t at = good_.preamble.header_offset + 10;
  const std::string path =
      Corrupt("header.rbln", [&](std::string& bytes) { bytes[at] ^= 0x20; });
  ExpectRefusal(ReadContainerFile(path).status(), absl::StatusCode::kDataLoss,
                path, "header checksum mismatch");
}

TEST_F(ContainerTest, RefusesUnparsableHeader) {
  // Field 1 declared 100 bytes long with 3 bytes left.
  const std::string path =
      WithHeaderBytes("garbage.rbln", std::string("\x0a\x64xyz", 5));
  ExpectRefusal(ReadContainerFile(path).status(), absl::StatusCode::kDataLoss,
                path, "does not parse");
}

TEST_F(ContainerTest, RefusesHeaderWithoutResizeMetadata) {
  v1::ContainerHeader old = good_.header;
  old.clear_kv_resize();
  const std::string path =
      WithHeaderBytes("old_compiler.rbln", old.SerializeAsString());
  absl::Status status = ReadContainerFile(path).status();
  ExpectRefusal(status, absl::StatusCode::kFailedPrecondition, path,
                "unsupported artifact format");
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("no KV-cache resize metadata"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("recompile"));
}

TEST_F(ContainerTest, RefusesPlacementOnMissingNode) {
  v1::ContainerHeader broken = good_.header;
  broken.mutable_allocations(1)->mutable_placements(3)->set_node(2);
  const std::string path =
      WithHeaderBytes("node.rbln", broken.SerializeAsString());
  ExpectRefusal(ReadContainerFile(path).status(), absl::StatusCode::kDataLoss,
                path,
                "allocation 'workspace' has a placement on node 2 chiplet 3, "
                "outside the 2 node(s) x 4 chiplet(s)");
}

TEST_F(ContainerTest, RefusesZeroNodes) {
  v1::ContainerHeader broken = good_.header;
  broken.set_num_nodes(0);
  const std::string path =
      WithHeaderBytes("zero_nodes.rbln", broken.SerializeAsString());
  ExpectRefusal(ReadContainerFile(path).status(), absl::StatusCode::kDataLoss,
                path, "num_nodes 0");
}

TEST_F(ContainerTest, RefusesSegmentOutsidePayload) {
  v1::ContainerHeader broken = good_.header;
  broken.mutable_segments(1)->set_length(kWeightsLength + 1);
  const std::string path =
      WithHeaderBytes("segment.rbln", broken.SerializeAsString());
  ExpectRefusal(ReadContainerFile(path).status(), absl::StatusCode::kDataLoss,
                path, "payload segment 'weights'");
}

TEST_F(ContainerTest, VerifyPayloadCountsTheSegmentsAndBytesItChecked) {
  std::unique_ptr<RandomAccessFile> file = OpenOrDie(good_path_);
  ASSERT_NE(file, nullptr);
  absl::StatusOr<Container> container = ReadContainer(*file);
  ASSERT_TRUE(container.ok()) << container.status();
  absl::StatusOr<VerifiedPayload> verified = VerifyPayload(*file, *container);
  ASSERT_TRUE(verified.ok()) << verified.status();
  // The segments' own bytes, not the alignment padding between them.
  EXPECT_EQ(verified->segments, 2u);
  EXPECT_EQ(verified->bytes, kProgramLength + kWeightsLength);
}

TEST_F(ContainerTest, PayloadCorruptionIsFoundOnlyByVerifyPayload) {
  const uint64_t at = good_.preamble.payload_offset + kWeightsOffset + 17;
  const std::string path =
      Corrupt("payload.rbln", [&](std::string& bytes) { bytes[at] ^= 0x01; });
  std::unique_ptr<RandomAccessFile> file = OpenOrDie(path);
  ASSERT_NE(file, nullptr);
  absl::StatusOr<Container> container = ReadContainer(*file);
  ASSERT_TRUE(container.ok()) << container.status();
  ExpectRefusal(VerifyPayload(*file, *container).status(),
                absl::StatusCode::kDataLoss, path,
                "payload segment 'weights' checksum mismatch");
}

}  // namespace
}  // namespace rbln
