#include "core/os/read_lease.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/core_metrics.h"
#include "core/os/local_fs.h"
#include "core/os/unique_fd.h"

namespace rbln {

struct ReadLease::State {
  std::atomic<bool> broken{false};
  // The leased file's descriptor, or -1 once dropped, and what it looked
  // like when leased. Guarded by LeaseThread::mu_ (a member cannot name it).
  int fd = -1;
  struct stat leased = {};
};

namespace {

std::atomic<int> leases_held{0};

// How long the kernel lets a lease holder take before it breaks the lease
// itself (/proc/sys/fs/lease-break-time, 45 s by default).
absl::Duration LeaseBreakTime() {
  std::ifstream file("/proc/sys/fs/lease-break-time");
  int64_t seconds = 0;
  if (!(file >> seconds) || seconds < 0) return absl::ZeroDuration();
  return absl::Seconds(seconds);
}

sigset_t LeaseSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, ReadLeaseSignal());
  // Sent instead when the real-time signal queue is full.
  sigaddset(&set, SIGIO);
  return set;
}

// Run by a thread that has the lease signals unblocked should one reach it
// (a kill from outside): the default action would end the process.
void IgnoreStrayLeaseSignal(int, siginfo_t*, void*) {}

// Installs IgnoreStrayLeaseSignal where the signal has its default action;
// false when another handler has the lease signal (leases stay off).
bool CatchStraySignals() {
  for (int signal : {ReadLeaseSignal(), SIGIO}) {
    struct sigaction old;
    if (sigaction(signal, nullptr, &old) != 0) return false;
    const bool ours = (old.sa_flags & SA_SIGINFO) != 0 &&
                      old.sa_sigaction == IgnoreStrayLeaseSignal;
    if (ours) continue;
    if ((old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler == SIG_DFL) {
      struct sigaction catcher = {};
      catcher.sa_sigaction = IgnoreStrayLeaseSignal;
      catcher.sa_flags = SA_SIGINFO | SA_RESTART;
      sigemptyset(&catcher.sa_mask);
      if (sigaction(signal, &catcher, nullptr) != 0) return false;
    } else if (signal != SIGIO) {
      return false;
    }
  }
  return true;
}

// The thread that lets leases go: it receives the break signals (the
// kernel names the descriptor), and checks every kRemovedFileCheckPeriod
// that leased files still have a name and are unchanged. It takes no lock
// but mu_, which no thread holds while it opens or closes a file, so a
// writer waiting on a lease never waits on anything else.
//
// The kernel breaks a lease itself once its holder has taken
// lease-break-time without letting it go (this process stopped, say), and
// lets the writer through: a lease counts as intact only until half that
// time after the thread last found no signal waiting (valid_until_ns_), so
// that after such a stop nothing is trusted until the thread has caught up.
// Started on the first Take and never stopped.
class LeaseThread {
 public:
  // Null when the lease signal is another handler's.
  static LeaseThread* Get() {
    static LeaseThread* const thread =
        CatchStraySignals() ? new LeaseThread() : nullptr;
    return thread;
  }

  pid_t tid() const { return tid_; }

  // Whether leases can be trusted now (see the class comment).
  bool Current() const {
    return absl::GetCurrentTimeNanos() <
           valid_until_ns_.load(std::memory_order_acquire);
  }

  void Register(ReadLease::State* state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    by_fd_[state->fd] = state;
  }

  // Marks the lease broken and uncounts it before letting it go (whoever
  // the kernel lets open the file next finds it so), then releases it.
  // Returns the descriptor for the caller to close once mu_ is let go:
  // closing a removed file frees its blocks, which takes long for a large
  // one. -1 when dropped already.
  int DropLocked(ReadLease::State* state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int fd = state->fd;
    if (fd < 0) return -1;
    state->broken.store(true);
    by_fd_.erase(fd);
    state->fd = -1;
    leases_held.fetch_sub(1);
    AddReadLeases(-1);
    fcntl(fd, F_SETLEASE, F_UNLCK);
    return fd;
  }

  absl::Mutex mu_;

 private:
  LeaseThread() {
    UpdateTimes();
    valid_until_ns_.store(absl::GetCurrentTimeNanos() +
                          absl::ToInt64Nanoseconds(trusted_for_));
    absl::Notification started;
    std::thread([this, &started] {
      const sigset_t signals = LeaseSignals();
      pthread_sigmask(SIG_BLOCK, &signals, nullptr);
      tid_ = static_cast<pid_t>(syscall(SYS_gettid));
      started.Notify();
      Run(signals);
    }).detach();
    started.WaitForNotification();
  }

  // From lease-break-time: how long after the last look a lease is trusted,
  // and how often to look when nothing happens. Below 4 s, never.
  void UpdateTimes() {
    const absl::Duration break_time = LeaseBreakTime();
    trusted_for_ =
        break_time < absl::Seconds(4) ? absl::ZeroDuration() : break_time / 2;
    period_ = std::min(kRemovedFileCheckPeriod,
                       std::max(break_time / 4, absl::Seconds(1)));
  }

  [[noreturn]] void Run(const sigset_t& signals) {
    absl::Time next_check = absl::Now() + period_;
    bool drain = false;  // look again at once: more may be waiting
    for (;;) {
      const int64_t before = absl::GetCurrentTimeNanos();
      const struct timespec wait =
          absl::ToTimespec(drain ? absl::ZeroDuration() : period_);
      siginfo_t info;
      const int signal = sigtimedwait(&signals, &info, &wait);
      if (signal < 0 && errno == EAGAIN) {
        // Every signal sent before `before` has been handled.
        valid_until_ns_.store(before + absl::ToInt64Nanoseconds(trusted_for_),
                              std::memory_order_release);
      }
      drain = signal > 0;
      std::vector<int> to_close;
      {
        absl::MutexLock lock(&mu_);
        if (signal == ReadLeaseSignal() && info.si_code == POLL_MSG) {
          auto it = by_fd_.find(info.si_fd);
          // Gone: dropped already (and its number maybe reused, which at
          // worst drops a lease that was not broken).
          if (it != by_fd_.end()) {
            CountReadLeaseBreak(ReadLeaseBreak::kWriter);
            to_close.push_back(DropLocked(it->second));
          }
        } else if (signal == SIGIO) {
          // The queue overflowed: which files were opened is lost.
          DropIfLocked(ReadLeaseBreak::kOverflow, &to_close,
                       [](const ReadLease::State&) { return true; });
        }
        if (absl::Now() >= next_check) {
          DropIfLocked(ReadLeaseBreak::kRemoved, &to_close,
                       [](const ReadLease::State& state) {
                         struct stat st;
                         return fstat(state.fd, &st) != 0 || st.st_nlink == 0;
                       });
          // What breaks no lease: a truncate by a read-only open with
          // O_TRUNC, and changes of mode, owner or times alone.
          DropIfLocked(ReadLeaseBreak::kChanged, &to_close,
                       [](const ReadLease::State& state) {
                         struct stat st;
                         return fstat(state.fd, &st) != 0 ||
                                !SameFileVersion(st, state.leased);
                       });
          UpdateTimes();
          next_check = absl::Now() + period_;
        }
      }
      for (int fd : to_close) close(fd);
    }
  }

  template <typename Predicate>
  void DropIfLocked(ReadLeaseBreak why, std::vector<int>* to_close,
                    Predicate drop) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<ReadLease::State*> matched;
    for (const auto& [fd, state] : by_fd_) {
      if (drop(*state)) matched.push_back(state);
    }
    for (ReadLease::State* state : matched) {
      CountReadLeaseBreak(why);
      to_close->push_back(DropLocked(state));
    }
  }

  pid_t tid_ = 0;
  // Written by the lease thread only (and before it starts).
  absl::Duration trusted_for_;
  absl::Duration period_;
  std::atomic<int64_t> valid_until_ns_{0};
  absl::flat_hash_map<int, ReadLease::State*> by_fd_ ABSL_GUARDED_BY(mu_);
};

// Readies `fd` for a lease: on a local file system (see the header), with a
// break signalled to `thread` (set before the lease, so that one that comes
// at once goes to the lease thread too).
bool ReadyForLease(int fd, const LeaseThread& thread) {
  struct statfs fs;
  struct f_owner_ex owner = {F_OWNER_TID, thread.tid()};
  return fstatfs(fd, &fs) == 0 && IsLocalFileSystem(fs) &&
         fcntl(fd, F_SETSIG, ReadLeaseSignal()) == 0 &&
         fcntl(fd, F_SETOWN_EX, &owner) == 0;
}

}  // namespace

int ReadLeaseSignal() { return SIGRTMIN + 4; }

void BlockReadLeaseSignals() {
  const sigset_t signals = LeaseSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

int ReadLeasesHeld() { return leases_held.load(); }

std::unique_ptr<ReadLease> ReadLease::Take(int dir_fd, const std::string& name,
                                           uint64_t device, uint64_t inode,
                                           struct stat* now, bool* written) {
  if (written != nullptr) *written = false;
  LeaseThread* thread = LeaseThread::Get();
  if (thread == nullptr || !thread->Current()) return nullptr;
  if (leases_held.fetch_add(1) >= kMaxReadLeases) {
    leases_held.fetch_sub(1);
    return nullptr;
  }
  // Counted from here; DropLocked uncounts a registered lease.
  AddReadLeases(1);
  auto uncount = [] {
    leases_held.fetch_sub(1);
    AddReadLeases(-1);
  };
  // Non-blocking: a FIFO put in its place opens at once, and another
  // holder's write lease is not waited for.
  UniqueFd fd(
      openat(dir_fd, name.c_str(),
             O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC));
  struct stat st;
  // EWOULDBLOCK: another process holds a write lease on it.
  if (fd.get() < 0 && errno == EWOULDBLOCK && written != nullptr) {
    *written = true;
  }
  if (fd.get() < 0 || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_dev != device || st.st_ino != inode ||
      !ReadyForLease(fd.get(), *thread)) {
    uncount();
    return nullptr;
  }
  auto state = std::make_unique<State>();
  int to_close = -1;
  {
    absl::MutexLock lock(&thread->mu_);
    if (fcntl(fd.get(), F_SETLEASE, F_RDLCK) != 0) {
      // EAGAIN: open for writing somewhere; EACCES: neither the owner nor
      // CAP_LEASE.
      if (errno == EAGAIN && written != nullptr) *written = true;
      uncount();
      return nullptr;
    }
    state->fd = fd.Release();
    thread->Register(state.get());
    // A lease broken already (before the lease thread could see it) shows
    // here.
    if (fcntl(state->fd, F_GETLEASE) != F_RDLCK ||
        fstat(state->fd, &state->leased) != 0) {
      to_close = thread->DropLocked(state.get());
    }
  }
  if (to_close >= 0) {
    close(to_close);
    return nullptr;
  }
  *now = state->leased;
  return std::unique_ptr<ReadLease>(new ReadLease(std::move(state)));
}

bool ReadLease::WrittenElsewhere(int fd) {
  LeaseThread* thread = LeaseThread::Get();
  if (thread == nullptr) return false;
  // A break while it is held is signalled to the lease thread, which finds
  // no lease of this descriptor and lets it be.
  if (!ReadyForLease(fd, *thread)) return false;
  if (fcntl(fd, F_SETLEASE, F_RDLCK) != 0) return errno == EAGAIN;
  fcntl(fd, F_SETLEASE, F_UNLCK);
  return false;
}

ReadLease::ReadLease(std::unique_ptr<State> state) : state_(std::move(state)) {}

ReadLease::~ReadLease() {
  LeaseThread* thread = LeaseThread::Get();
  int fd;
  {
    absl::MutexLock lock(&thread->mu_);
    // Not a break: the holder lets it go (-1 when dropped already).
    fd = thread->DropLocked(state_.get());
  }
  if (fd >= 0) close(fd);
}

bool ReadLease::broken() const {
  return state_->broken.load(std::memory_order_acquire);
}

bool ReadLease::intact() const {
  return !state_->broken.load(std::memory_order_acquire) &&
         LeaseThread::Get()->Current();
}

}  // namespace rbln
