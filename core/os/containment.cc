#include "core/os/containment.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "core/os/env.h"
#include "core/os/subprocess.h"

namespace rbln {
namespace {

// How often the end of a group is looked for.
constexpr absl::Duration kPollInterval = absl::Milliseconds(10);

struct OwnChildren {
  absl::Mutex mu;
  std::set<pid_t> pids ABSL_GUARDED_BY(mu);
};
OwnChildren& Own() {
  static OwnChildren* own = new OwnChildren;  // never destroyed
  return *own;
}

bool IsOwnChild(pid_t pid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(Own().mu) {
  return Own().pids.count(pid) > 0;
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The directory of this process's cgroup in the cgroup2 hierarchy; empty
// when there is none (no cgroup2 mounted, or not in it).
std::string OwnCgroupDir() {
  std::string mount;
  for (absl::string_view line :
       absl::StrSplit(ReadSmallFile("/proc/self/mountinfo"), '\n')) {
    const size_t dash = line.find(" - cgroup2 ");
    if (dash == absl::string_view::npos) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ');
    if (fields.size() > 4) mount = std::string(fields[4]);
    break;
  }
  if (mount.empty()) return "";
  for (absl::string_view line :
       absl::StrSplit(ReadSmallFile("/proc/self/cgroup"), '\n')) {
    if (absl::ConsumePrefix(&line, "0::")) {
      return line == "/" ? mount : absl::StrCat(mount, line);
    }
  }
  return "";
}

// The exit code of a child that ran `test` and _exited with errno (0: ok).
int RunInChild(unsigned long flags, int (*test)(const std::string&),
               const std::string& arg) {
  const pid_t child = RawFork(flags);
  if (child < 0) return errno;
  if (child == 0) _exit(test(arg));
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : EIO;
}

int JoinCgroup(const std::string& procs) {
  const int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0 || write(fd, "0", 1) != 1) return errno;
  return 0;
}

int Nothing(const std::string&) { return 0; }

absl::Status TryPidNamespace() {
  const int err = RunInChild(CLONE_NEWPID, &Nothing, "");
  if (err == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("a PID namespace cannot be made here (clone(CLONE_NEWPID): ",
                   strerror(err), "): it needs CAP_SYS_ADMIN"));
}

// The directory for workers' cgroups, once a child has joined one there.
absl::StatusOr<std::string> TryCgroup() {
  const std::string parent = OwnCgroupDir();
  if (parent.empty()) {
    return absl::FailedPreconditionError(
        "no cgroup2 hierarchy is mounted, or this process is not in it");
  }
  const std::string probe =
      absl::StrCat(parent, "/rbln-codec-probe-", getpid());
  if (mkdir(probe.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot make a cgroup in ", parent, " (", strerror(errno),
                     "): delegate it to the daemon (systemd's Delegate=yes)"));
  }
  struct stat st;
  const bool kill_file = stat((probe + "/cgroup.kill").c_str(), &st) == 0;
  const int err =
      kill_file ? RunInChild(0, &JoinCgroup, probe + "/cgroup.procs") : 0;
  rmdir(probe.c_str());
  if (!kill_file) {
    return absl::FailedPreconditionError(
        "the kernel has no cgroup.kill (Linux 5.14 or later)");
  }
  if (err != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("a process cannot be moved into a cgroup under ", parent,
                     " (", strerror(err), ")"));
  }
  return parent;
}

absl::Status BecomeSubreaper() {
  if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("prctl(PR_SET_CHILD_SUBREAPER): ", strerror(errno)));
  }
  return absl::OkStatus();
}

// The parent pid and real uid of process `pid`; false when it is gone.
bool ParentAndUid(pid_t pid, pid_t* ppid, uid_t* uid) {
  const std::string status =
      ReadSmallFile(absl::StrCat("/proc/", pid, "/status"));
  bool have_ppid = false, have_uid = false;
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (words.size() < 2) continue;
    if (words[0] == "PPid:") have_ppid = absl::SimpleAtoi(words[1], ppid);
    if (words[0] == "Uid:") have_uid = absl::SimpleAtoi(words[1], uid);
  }
  return have_ppid && have_uid;
}

// The children of this process: /proc/self/task/*/children, which stays
// readable where other users' /proc entries are hidden (systemd's
// ProtectProc=invisible); else every /proc entry whose parent is this one.
std::vector<pid_t> Children() {
  std::vector<pid_t> found;
  bool listed = false;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream in(task.path() / "children");
    if (!in) continue;
    listed = true;
    pid_t pid = 0;
    while (in >> pid) found.push_back(pid);
  }
  if (listed) return found;
  const pid_t self = getpid();
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    pid_t pid = 0, ppid = 0;
    uid_t owner = 0;
    if (absl::SimpleAtoi(entry.path().filename().string(), &pid) &&
        ParentAndUid(pid, &ppid, &owner) && ppid == self) {
      found.push_back(pid);
    }
  }
  return found;
}

// Children of this process that it did not start itself, but for those
// known to be of another uid than `uid` (which are only reaped when they
// have exited, so that no zombie piles up).
std::vector<pid_t> Orphans(uid_t uid) ABSL_EXCLUSIVE_LOCKS_REQUIRED(Own().mu) {
  std::vector<pid_t> found;
  for (pid_t pid : Children()) {
    pid_t ppid = 0;
    uid_t owner = 0;
    if (IsOwnChild(pid)) continue;
    if (ParentAndUid(pid, &ppid, &owner) && owner != uid) {
      waitpid(pid, nullptr, WNOHANG);
      continue;
    }
    found.push_back(pid);
  }
  return found;
}

}  // namespace

pid_t RawFork(unsigned long flags) {
  return static_cast<pid_t>(
      syscall(SYS_clone, flags | SIGCHLD, nullptr, nullptr, nullptr, 0));
}

absl::StatusOr<ContainmentMode> ParseContainmentMode(absl::string_view name) {
  for (ContainmentMode mode :
       {ContainmentMode::kAuto, ContainmentMode::kPidNamespace,
        ContainmentMode::kCgroup, ContainmentMode::kSubreaper}) {
    if (name == ContainmentModeName(mode)) return mode;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", name,
                   "' is not a containment mode: give auto, pidns, cgroup or "
                   "subreaper"));
}

absl::string_view ContainmentModeName(ContainmentMode mode) {
  switch (mode) {
    case ContainmentMode::kAuto:
      return "auto";
    case ContainmentMode::kPidNamespace:
      return "pidns";
    case ContainmentMode::kCgroup:
      return "cgroup";
    case ContainmentMode::kSubreaper:
      return "subreaper";
  }
  return "?";
}

absl::StatusOr<Containment> PrepareContainment(ContainmentMode asked) {
  const bool any = asked == ContainmentMode::kAuto;
  if (any || asked == ContainmentMode::kPidNamespace) {
    absl::Status pidns = TryPidNamespace();
    if (pidns.ok()) return Containment{.mode = ContainmentMode::kPidNamespace};
    if (!any) return pidns;
  }
  if (any || asked == ContainmentMode::kCgroup) {
    absl::StatusOr<std::string> parent = TryCgroup();
    if (parent.ok()) {
      return Containment{.mode = ContainmentMode::kCgroup,
                         .cgroup_parent = *std::move(parent)};
    }
    if (!any) return parent.status();
  }
  if (absl::Status subreaper = BecomeSubreaper(); !subreaper.ok()) {
    return subreaper;
  }
  return Containment{.mode = ContainmentMode::kSubreaper};
}

pid_t StartOwnChild(const std::function<pid_t()>& start) {
  OwnChildren& own = Own();
  absl::MutexLock lock(&own.mu);
  const pid_t pid = start();
  if (pid > 0) own.pids.insert(pid);
  return pid;
}

void ForgetOwnChild(pid_t pid) {
  OwnChildren& own = Own();
  absl::MutexLock lock(&own.mu);
  own.pids.erase(pid);
}

absl::StatusOr<std::unique_ptr<ContainedGroup>> ContainedGroup::Make(
    const Containment& containment) {
  std::unique_ptr<ContainedGroup> group(new ContainedGroup(containment));
  if (containment.mode != ContainmentMode::kCgroup) return group;
  static std::atomic<uint64_t> next{0};
  group->cgroup_ = absl::StrCat(containment.cgroup_parent, "/rbln-codec-",
                                getpid(), "-", next.fetch_add(1));
  if (mkdir(group->cgroup_.c_str(), 0755) != 0) {
    const int err = errno;
    group->cgroup_.clear();
    return ErrnoToStatus("make the cgroup for", "the codec", err);
  }
  group->procs_ = UniqueFd(
      open((group->cgroup_ + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
  if (group->procs_.get() < 0) {
    return ErrnoToStatus("open", group->cgroup_ + "/cgroup.procs", errno);
  }
  return group;
}

ContainedGroup::~ContainedGroup() {
  if (!cgroup_.empty()) rmdir(cgroup_.c_str());
}

absl::Status ContainedGroup::EndAll(std::optional<pid_t> leader, uid_t uid,
                                    absl::Duration grace,
                                    std::optional<int>* leader_status) {
  const absl::Time deadline = absl::Now() + grace;
  if (!cgroup_.empty()) {
    std::ofstream(cgroup_ + "/cgroup.kill") << "1";
  }
  // The init of a PID namespace is reaped only once the kernel has ended
  // the rest of it.
  bool reaped = true;
  if (leader.has_value()) {
    kill(-*leader, SIGKILL);
    kill(*leader, SIGKILL);
    std::optional<int> status = WaitForExit(
        *leader, std::max(absl::ZeroDuration(), deadline - absl::Now()));
    // Stuck in the kernel: reaped in the background, and still ours.
    if (!status.has_value()) status = KillAndReap(*leader);
    reaped = status.has_value();
    if (leader_status != nullptr) *leader_status = status;
    // One stuck in the kernel is still ours, reaped in the background.
    if (reaped) ForgetOwnChild(*leader);
  }
  switch (containment_.mode) {
    case ContainmentMode::kCgroup:
      return EndCgroup(deadline);
    case ContainmentMode::kSubreaper:
      return DrainOrphans(uid, deadline);
    default:
      if (reaped) return absl::OkStatus();
      return absl::FailedPreconditionError(
          absl::StrCat("process ", *leader,
                       " of the codec (the init of its PID namespace) did not "
                       "end"));
  }
}

absl::Status ContainedGroup::EndCgroup(absl::Time deadline) {
  const std::string events = cgroup_ + "/cgroup.events";
  while (true) {
    if (ReadSmallFile(events).find("populated 0") != std::string::npos) {
      return absl::OkStatus();
    }
    if (absl::Now() >= deadline) break;
    absl::SleepFor(kPollInterval);
  }
  std::vector<std::string> pids = absl::StrSplit(
      ReadSmallFile(cgroup_ + "/cgroup.procs"), '\n', absl::SkipEmpty());
  return absl::FailedPreconditionError(
      absl::StrCat("process(es) ", absl::StrJoin(pids, ", "), " of the codec ",
                   "(cgroup ", cgroup_, ") did not end"));
}

absl::Status ContainedGroup::DrainOrphans(uid_t uid, absl::Time deadline) {
  while (true) {
    std::vector<pid_t> orphans;
    {
      // Listed, killed and reaped under the lock that StartOwnChild holds:
      // a child just started is never taken for an orphan, and a pid is
      // never killed after another drain reaped it.
      absl::MutexLock lock(&Own().mu);
      orphans = Orphans(uid);
      for (pid_t orphan : orphans) {
        kill(orphan, SIGKILL);
        waitpid(orphan, nullptr, WNOHANG);
      }
    }
    if (orphans.empty()) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::FailedPreconditionError(
          absl::StrCat("process(es) ", absl::StrJoin(orphans, ", "),
                       " the codec left behind did not end"));
    }
    absl::SleepFor(kPollInterval);
  }
}

}  // namespace rbln
