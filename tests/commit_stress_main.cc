// commit-stress: commits Sets on one artifact in a loop until killed, for the
// crash tests (tests/commit_kill_test.cc), which SIGKILL it at random
// instants and then check what recovery leaves.
//
//   commit-stress --store DIR --artifact NAME --targets 9,12,16
//   commit-stress --store DIR --artifact NAME --targets 9,12 --output NAME
//
// Opens the store (which runs recovery), then resizes the artifact in place
// to each target in turn (starting at a random one), round and round; with
// --output, writes each target into the output directory instead, replacing
// the previous one. Prints one line on stdout once the store is open (the
// kill test waits for it) and nothing per commit. Exits 1, the error on
// stderr, when opening the store or a commit fails (CLI11's usage codes on
// bad flags); otherwise never exits on its own. It dies with its parent
// (PR_SET_PDEATHSIG), so a crashed test leaves no writer behind.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/os/env.h"
#include "core/store/store.h"

namespace {

absl::Status CommitForever(const std::string& store_dir,
                           const std::string& artifact,
                           const std::vector<uint64_t>& targets,
                           const std::string& output) {
  absl::StatusOr<std::unique_ptr<rbln::ArtifactStore>> store =
      rbln::ArtifactStore::Open(store_dir);
  if (!store.ok()) return store.status();
  printf("commit-stress: pid %d committing %s to %s%s\n", getpid(),
         artifact.c_str(), absl::StrJoin(targets, ",").c_str(),
         output.empty() ? " in place" : (" into " + output).c_str());
  fflush(stdout);
  // A random first target, so that a test that kills us after one commit
  // still sees every target over its rounds.
  const size_t first = std::random_device{}() % targets.size();
  for (uint64_t commits = 0;; ++commits) {
    const uint64_t target = targets[(first + commits) % targets.size()];
    absl::StatusOr<rbln::WriteResult> result =
        (*store)->Write({.name = artifact,
                         .target = target,
                         .output_name = output,
                         .replace = !output.empty()});
    if (!result.ok()) {
      return absl::Status(
          result.status().code(),
          absl::StrCat("commit ", commits, " (target ", target,
                       ") failed: ", result.status().message()));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Commits KV-cache resizes of one artifact in a loop until killed (a "
      "crash-test load generator)."};
  std::string store_dir;
  std::string artifact;
  std::vector<uint64_t> targets;
  std::string output;
  app.add_option("--store", store_dir, "Artifact store root")->required();
  app.add_option("--artifact", artifact, "Artifact name inside the store")
      ->required();
  app.add_option("--targets", targets, "Block counts to cycle through")
      ->required()
      ->delimiter(',');
  app.add_option("--output", output,
                 "Write into this output directory (replacing it) instead of "
                 "resizing in place");
  CLI11_PARSE(app, argc, argv);

  // Never outlive the test that started us (and a parent that died before
  // the prctl took effect).
  const pid_t parent = getppid();
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) return 1;

  const absl::Status status =
      CommitForever(store_dir, artifact, targets, output);
  fprintf(stderr, "commit-stress: %s\n", status.ToString().c_str());
  return 1;
}
