// Checks shared by the commit tests that run real processes on real file
// systems (commit_kill_test, commit_disk_test, commit_memory_test): whether a
// directory holds a complete artifact that is a resize of a known original,
// and whether staging debris is left anywhere.
//
// The checks do not trust the code under test for the payload: they hash the
// payload byte range of every container themselves (streamed, bounded
// memory) and compare it with the original's.
#ifndef RBLN_TESTS_ARTIFACT_CHECK_H_
#define RBLN_TESTS_ARTIFACT_CHECK_H_

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "absl/types/span.h"
#include "core/format/artifact.h"
#include "core/format/builtin_codec.h"
#include "core/format/rbln_config.h"
#include "core/os/env.h"
#include "core/resize/rescale.h"
#include "core/store/staging_name.h"
#include "core/store/store.h"
#include "core/testing/test_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace rbln::testing {

// What a resize must preserve of an artifact, taken before any resize.
struct ArtifactBaseline {
  uint64_t num_blocks = 0;
  // By container file name.
  std::map<std::string, v1::ContainerHeader> headers;
  std::map<std::string, uint64_t> payload_hashes;
  // HashTree of the directory without rbln_config.json and the containers.
  std::map<std::string, uint64_t> companions;
};

// XXH64 of [payload_offset, +payload_length) of a container file, read in
// 1 MiB chunks. Fails the test (and returns 0) on a read error.
inline uint64_t HashPayload(const std::string& path, const Container& c) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      Env::Default()->NewRandomAccessFile(path);
  if (!file.ok()) {
    ADD_FAILURE() << file.status();
    return 0;
  }
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  std::vector<char> buf(size_t{1} << 20);
  for (uint64_t done = 0; done < c.preamble.payload_length;) {
    const size_t want = static_cast<size_t>(
        std::min<uint64_t>(buf.size(), c.preamble.payload_length - done));
    absl::StatusOr<size_t> got = (*file)->ReadAt(
        c.preamble.payload_offset + done, absl::MakeSpan(buf.data(), want));
    if (!got.ok() || *got != want) {
      ADD_FAILURE() << path << ": short payload read at " << done << ": "
                    << (got.ok() ? absl::OkStatus() : got.status());
      break;
    }
    XXH64_update(state, buf.data(), want);
    done += want;
  }
  const uint64_t hash = XXH64_digest(state);
  XXH64_freeState(state);
  return hash;
}

inline std::map<std::string, uint64_t> CompanionHashes(
    const Artifact& artifact) {
  std::map<std::string, uint64_t> hashes = HashTree(artifact.dir());
  hashes.erase(kRblnConfigFileName);
  for (const ContainerFile& c : artifact.containers()) {
    hashes.erase(c.file_name);
  }
  return hashes;
}

inline ArtifactBaseline TakeBaseline(const std::string& dir) {
  ArtifactBaseline base;
  absl::StatusOr<Artifact> artifact =
      Artifact::Open(Env::Default(), dir, {.verify_payload = true});
  if (!artifact.ok()) {
    ADD_FAILURE() << artifact.status();
    return base;
  }
  base.num_blocks = artifact->current_num_blocks();
  for (const ContainerFile& c : artifact->containers()) {
    const Container container = rbln::testing::ContainerOf(c);
    base.headers[c.file_name] = container.header;
    base.payload_hashes[c.file_name] =
        HashPayload(JoinPath(dir, c.file_name), container);
  }
  base.companions = CompanionHashes(*artifact);
  return base;
}

// Checks that `dir` holds a complete artifact that is `base` resized: it
// opens with every payload checksum verified, each container header is
// exactly the original rescaled to the artifact's block count (so config and
// headers agree), every payload's bytes are the original's, and the
// companion files are byte-identical. Returns the block count, or 0 when the
// directory is not an artifact at all.
inline uint64_t CheckResizedArtifact(const std::string& dir,
                                     const ArtifactBaseline& base) {
  absl::StatusOr<Artifact> artifact =
      Artifact::Open(Env::Default(), dir, {.verify_payload = true});
  if (!artifact.ok()) {
    ADD_FAILURE() << "not a valid artifact: " << artifact.status();
    return 0;
  }
  const uint64_t count = artifact->current_num_blocks();
  EXPECT_EQ(artifact->containers().size(), base.headers.size()) << dir;
  for (const ContainerFile& c : artifact->containers()) {
    auto it = base.headers.find(c.file_name);
    if (it == base.headers.end()) {
      ADD_FAILURE() << dir << ": unexpected container " << c.file_name;
      continue;
    }
    RescaleFactors factors;
    for (const v1::KvTensor& t : it->second.kv_tensors()) {
      if (t.resizable()) factors[t.name()] = {count, base.num_blocks};
    }
    absl::StatusOr<v1::ContainerHeader> expected =
        RescaleHeader(it->second, factors, c.file_name);
    const Container container = rbln::testing::ContainerOf(c);
    if (!expected.ok()) {
      ADD_FAILURE() << expected.status();
    } else {
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
          container.header, *expected))
          << dir << "/" << c.file_name << " does not declare " << count
          << " blocks";
    }
    EXPECT_EQ(HashPayload(JoinPath(dir, c.file_name), container),
              base.payload_hashes.at(c.file_name))
        << dir << "/" << c.file_name << ": payload bytes changed";
  }
  EXPECT_EQ(CompanionHashes(*artifact), base.companions) << dir;
  return count;
}

// Every entry below `root` (hidden ones and the state directory included)
// whose name is a staging or a retired name (core/store/staging_name.h):
// what commits leave beside an artifact.
// A tree may go while it is walked (the daemon removes old versions in the
// background, --old-version-grace-seconds): the walk then starts over.
inline std::vector<std::string> FindStagingDebris(const std::string& root) {
  constexpr int kMaxWalks = 100;
  for (int walk = 1;; ++walk) {
    std::vector<std::string> debris;
    std::error_code error;
    std::filesystem::recursive_directory_iterator it(root, error), end;
    for (; !error && it != end; it.increment(error)) {
      const std::string name = it->path().filename().string();
      if (StagedArtifactName(name).has_value() ||
          RetiredArtifactName(name).has_value()) {
        debris.push_back(it->path().string());
      }
    }
    if (!error) return debris;
    if (walk == kMaxWalks) {
      throw std::filesystem::filesystem_error("walking the store", root, error);
    }
  }
}

}  // namespace rbln::testing

#endif  // RBLN_TESTS_ARTIFACT_CHECK_H_
