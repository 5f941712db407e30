// Memory (docs/commit-protocol.md, "Memory"): a resize never holds a payload in
// memory. With 1 GiB of payload, an in-place Set and an output-directory Set
// together must raise the process's peak resident set (VmHWM) by less than 32
// MiB.
//
// The peak is reset before measuring by writing "5" to /proc/self/clear_refs
// (Linux 4.0+); where that does not work the Sets run in a forked child,
// whose peak starts at its size at fork. The payload must really be copied
// for the number to mean anything: the test prints the file system type of
// the temporary directory (a reflink-capable one would share extents
// instead) and checks that the output's containers occupy real blocks.
//
// Under AddressSanitizer the measurement stays honest: resetting the peak
// works there too, so ASan's shadow memory is in the baseline, not in the
// increase. (Its quarantine keeps freed blocks resident, so code that
// allocated a fresh buffer per chunk would fail only there.)
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/os/env.h"
#include "core/store/store.h"
#include "core/testing/test_util.h"
#include "gtest/gtest.h"
#include "tests/artifact_check.h"
#include "tools/synth.h"

#if defined(__SANITIZE_ADDRESS__)
#define RBLN_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RBLN_UNDER_ASAN 1
#endif
#endif

namespace rbln {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kPayloadBytes = uint64_t{1} << 30;
constexpr uint64_t kMaxIncrease = 32 * kMiB;

// A field of /proc/self/status in bytes ("VmHWM:  1234 kB"), or 0 after
// failing the test.
uint64_t ProcStatusBytes(absl::string_view field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, field) || !absl::ConsumePrefix(&rest, ":"))
      continue;
    rest = absl::StripAsciiWhitespace(rest);
    uint64_t kib = 0;
    if (absl::ConsumeSuffix(&rest, " kB") && absl::SimpleAtoi(rest, &kib)) {
      return kib * 1024;
    }
  }
  ADD_FAILURE() << "no " << field << " in /proc/self/status";
  return 0;
}

// Resets VmHWM to the current VmRSS. Returns whether that demonstrably
// worked: a freed 64 MiB allocation no longer counts in the peak.
bool ResetPeakRss() {
  {
    std::vector<char> touched(64 * kMiB, 1);  // raises the peak, then freed
    if (touched[touched.size() / 2] != 1) return false;
  }
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.close();
  if (!clear) return false;
  return ProcStatusBytes("VmHWM") < ProcStatusBytes("VmRSS") + 16 * kMiB;
}

struct PeakRss {
  uint64_t before = 0;
  uint64_t after = 0;
  bool in_child = false;
};

// Runs `work` (returning "" or an error) and measures the peak RSS around
// it, in this process when the peak can be reset, else in a forked child.
PeakRss MeasurePeakRss(const std::function<std::string()>& work) {
  PeakRss peak;
  if (ResetPeakRss()) {
    peak.before = ProcStatusBytes("VmHWM");
    const std::string error = work();
    peak.after = ProcStatusBytes("VmHWM");
    EXPECT_EQ(error, "");
    return peak;
  }
  peak.in_child = true;
  int fds[2];
  if (pipe(fds) != 0) {
    ADD_FAILURE() << "pipe: " << strerror(errno);
    return peak;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const uint64_t before = ProcStatusBytes("VmHWM");
    const std::string error = work();
    const std::string report =
        absl::StrCat(before, " ", ProcStatusBytes("VmHWM"), " ", error);
    const bool written = write(fds[1], report.data(), report.size()) ==
                         static_cast<ssize_t>(report.size());
    _exit(written ? 0 : 1);
  }
  close(fds[1]);
  std::string report;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) report.append(buf, n);
  close(fds[0]);
  int wait_status = 0;
  EXPECT_EQ(waitpid(pid, &wait_status, 0), pid);
  EXPECT_TRUE(WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0)
      << "measuring child failed, wait status " << wait_status;
  std::vector<std::string> parts =
      absl::StrSplit(report, absl::MaxSplits(' ', 2));
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &peak.before) ||
      !absl::SimpleAtoi(parts[1], &peak.after)) {
    ADD_FAILURE() << "bad report from the measuring child: '" << report << "'";
    return peak;
  }
  EXPECT_EQ(parts[2], "");
  return peak;
}

std::string FileSystemType(const std::string& path, uint64_t* available) {
  struct statfs st;
  if (statfs(path.c_str(), &st) != 0) {
    ADD_FAILURE() << "statfs " << path << ": " << strerror(errno);
    return "unknown";
  }
  *available = static_cast<uint64_t>(st.f_bavail) * st.f_bsize;
  switch (static_cast<uint64_t>(st.f_type)) {
    case 0xEF53:
      return "ext2/3/4 (no reflink: payloads are copied)";
    case 0x01021994:
      return "tmpfs (no reflink: payloads are copied, in RAM)";
    case 0x58465342:
      return "xfs (reflink possible: payloads may be shared, not copied)";
    case 0x9123683E:
      return "btrfs (reflink: payloads are shared, not copied)";
    case 0x794C7630:
      return "overlayfs";
    default:
      return absl::StrCat("type 0x", absl::Hex(st.f_type));
  }
}

// Bytes of disk the container files of `dir` occupy (st_blocks).
uint64_t AllocatedContainerBytes(const Artifact& artifact) {
  uint64_t total = 0;
  for (const ContainerFile& c : artifact.containers()) {
    struct stat st;
    const std::string path = JoinPath(artifact.dir(), c.file_name);
    if (stat(path.c_str(), &st) != 0) {
      ADD_FAILURE() << "stat " << path << ": " << strerror(errno);
      continue;
    }
    total += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return total;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

TEST(CommitMemoryTest, ResizingAGibibytePayloadKeepsPeakRssFlat) {
#ifdef RBLN_UNDER_ASAN
  printf(
      "AddressSanitizer build: the baseline includes its shadow memory; a "
      "payload held in memory would still show (plus 1/8 for its shadow)\n");
#endif
  Env* env = Env::Default();
  testing::TempDir tmp;
  uint64_t available = 0;
  const std::string fs_type = FileSystemType(tmp.path(), &available);
  printf("%s is on %s, %llu MiB available\n", tmp.path().c_str(),
         fs_type.c_str(), static_cast<unsigned long long>(available / kMiB));
  if (available < 4 * kPayloadBytes) {
    GTEST_SKIP() << "needs 4 GiB free in " << tmp.path();
  }

  auto start = std::chrono::steady_clock::now();
  SynthSpec spec;
  spec.decoder_batch_sizes = {1, 2};
  spec.payload_bytes = kPayloadBytes;
  ASSERT_TRUE(WriteSyntheticArtifact(env, spec, tmp.Join("big")).ok());
  printf("synthesized 1 GiB of payload in %.1f s\n", SecondsSince(start));
  absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
      ArtifactStore::Open(tmp.path());
  ASSERT_TRUE(store.ok()) << store.status();

  start = std::chrono::steady_clock::now();
  const PeakRss peak = MeasurePeakRss([&]() -> std::string {
    for (const WriteRequest& request :
         {WriteRequest{.name = "big", .target = uint64_t{9}},
          WriteRequest{
              .name = "big", .target = uint64_t{12}, .output_name = "out"}}) {
      absl::StatusOr<WriteResult> r = (*store)->Write(request);
      if (!r.ok()) return r.status().ToString();
      if (!r->written) return "nothing was written";
    }
    return "";
  });
  const double seconds = SecondsSince(start);
  const int64_t increase =
      static_cast<int64_t>(peak.after) - static_cast<int64_t>(peak.before);
  printf(
      "VmHWM before %.1f MiB, after %.1f MiB, increase %.1f MiB (%s), for an "
      "in-place and an output-directory Set of 1 GiB payload in %.1f s\n",
      peak.before / double{kMiB}, peak.after / double{kMiB},
      increase / double{kMiB},
      peak.in_child ? "measured in a forked child: clear_refs did not reset "
                      "the peak"
                    : "peak reset through /proc/self/clear_refs",
      seconds);
  EXPECT_GT(peak.before, 0u);
  EXPECT_LT(increase, static_cast<int64_t>(kMaxIncrease));

  // The Sets did their work, and the output's payload occupies real blocks.
  for (const auto& [name, count] : {std::pair{"big", 9}, {"out", 12}}) {
    absl::StatusOr<Artifact> a = (*store)->Read(name);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->current_num_blocks(), static_cast<uint64_t>(count)) << name;
    EXPECT_GE(AllocatedContainerBytes(*a), kPayloadBytes) << name;
  }
  absl::StatusOr<Artifact> out =
      (*store)->Read("out", {.verify_payload = true});
  EXPECT_TRUE(out.ok()) << out.status();
}

}  // namespace
}  // namespace rbln
