#include "core/read_lease.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/core_metrics.h"
#include "core/unique_fd.h"

namespace rbln {

struct ReadLease::State {
  std::atomic<bool> broken{false};
  // The leased file's descriptor, or -1 once dropped. Guarded by
  // LeaseThread::mu_ (a member cannot name it).
  int fd = -1;
};

namespace {

std::atomic<bool> leases_enabled{true};
std::atomic<int> leases_held{0};

// File systems whose leases this kernel breaks for every writer: local
// ones. A network file system's other clients would not break them.
bool LeasesHoldOn(const struct statfs& fs) {
  switch (static_cast<unsigned long>(fs.f_type)) {
    case EXT4_SUPER_MAGIC:  // ext2 and ext3 too
    case XFS_SUPER_MAGIC:
    case BTRFS_SUPER_MAGIC:
    case TMPFS_MAGIC:
      return true;
    default:
      return false;
  }
}

sigset_t LeaseSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, ReadLeaseSignal());
  // Sent instead when the real-time signal queue is full.
  sigaddset(&set, SIGIO);
  return set;
}

// Run by a thread that has the lease signals unblocked when one arrives
// before the lease's owner is this process's lease thread (Take checks the
// lease again after): the default action would end the process.
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
// that leased files still have a name. It takes no lock but mu_, which no
// thread holds while it opens a file, so a writer waiting on a lease never
// waits on it for long. Started on the first Take and never stopped.
class LeaseThread {
 public:
  // Null when the lease signal is another handler's.
  static LeaseThread* Get() {
    static LeaseThread* const thread =
        CatchStraySignals() ? new LeaseThread() : nullptr;
    return thread;
  }

  pid_t tid() const { return tid_; }

  void Register(ReadLease::State* state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    by_fd_[state->fd] = state;
  }

  // Marks the lease broken (before letting it go: whoever the kernel lets
  // open the file next finds it broken), releases it, closes the file.
  void DropLocked(ReadLease::State* state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (state->fd < 0) return;
    state->broken.store(true);
    fcntl(state->fd, F_SETLEASE, F_UNLCK);
    close(state->fd);
    by_fd_.erase(state->fd);
    state->fd = -1;
    leases_held.fetch_sub(1);
    AddReadLeases(-1);
  }

  absl::Mutex mu_;

 private:
  LeaseThread() {
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

  [[noreturn]] void Run(const sigset_t& signals) {
    const struct timespec period = absl::ToTimespec(kRemovedFileCheckPeriod);
    absl::Time next_check = absl::Now() + kRemovedFileCheckPeriod;
    for (;;) {
      siginfo_t info;
      const int signal = sigtimedwait(&signals, &info, &period);
      absl::MutexLock lock(&mu_);
      if (signal == ReadLeaseSignal()) {
        auto it = by_fd_.find(info.si_fd);
        // Gone: dropped already (and its number maybe reused, which at
        // worst drops a lease that was not broken).
        if (it != by_fd_.end()) {
          DropLocked(it->second);
          CountReadLeaseBreak(ReadLeaseBreak::kWriter);
        }
      } else if (signal == SIGIO) {
        // The queue overflowed: which files were opened is lost.
        DropAllLocked(ReadLeaseBreak::kOverflow);
      }
      if (absl::Now() >= next_check) {
        DropRemovedLocked();
        next_check = absl::Now() + kRemovedFileCheckPeriod;
      }
    }
  }

  void DropAllLocked(ReadLeaseBreak why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<ReadLease::State*> all;
    for (const auto& [fd, state] : by_fd_) all.push_back(state);
    for (ReadLease::State* state : all) {
      DropLocked(state);
      CountReadLeaseBreak(why);
    }
  }

  // Leased files whose last name is gone: holding them would keep their
  // blocks allocated after an operator removed them.
  void DropRemovedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<ReadLease::State*> removed;
    for (const auto& [fd, state] : by_fd_) {
      struct stat st;
      if (fstat(fd, &st) != 0 || st.st_nlink == 0) removed.push_back(state);
    }
    for (ReadLease::State* state : removed) {
      DropLocked(state);
      CountReadLeaseBreak(ReadLeaseBreak::kRemoved);
    }
  }

  pid_t tid_ = 0;
  absl::flat_hash_map<int, ReadLease::State*> by_fd_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

int ReadLeaseSignal() { return SIGRTMIN + 4; }

void SetReadLeasesEnabled(bool enabled) { leases_enabled.store(enabled); }

void BlockReadLeaseSignals() {
  const sigset_t signals = LeaseSignals();
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

int ReadLeasesHeld() { return leases_held.load(); }

std::unique_ptr<ReadLease> ReadLease::Take(int dir_fd, const std::string& name,
                                           uint64_t device, uint64_t inode,
                                           struct stat* now) {
  if (!leases_enabled.load(std::memory_order_relaxed)) return nullptr;
  LeaseThread* thread = LeaseThread::Get();
  if (thread == nullptr) return nullptr;
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
  struct statfs fs;
  if (fd.get() < 0 || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_dev != device || st.st_ino != inode ||
      fstatfs(fd.get(), &fs) != 0 || !LeasesHoldOn(fs)) {
    uncount();
    return nullptr;
  }
  auto state = std::make_unique<State>();
  absl::MutexLock lock(&thread->mu_);
  if (fcntl(fd.get(), F_SETLEASE, F_RDLCK) != 0) {
    // EAGAIN: open for writing somewhere; EACCES: neither the owner nor
    // CAP_LEASE.
    uncount();
    return nullptr;
  }
  state->fd = fd.Release();
  thread->Register(state.get());
  // Setting a lease makes the process its signals' owner; they go to the
  // lease thread from here. One broken before is seen by F_GETLEASE.
  struct f_owner_ex owner = {F_OWNER_TID, thread->tid()};
  if (fcntl(state->fd, F_SETSIG, ReadLeaseSignal()) != 0 ||
      fcntl(state->fd, F_SETOWN_EX, &owner) != 0 ||
      fcntl(state->fd, F_GETLEASE) != F_RDLCK || fstat(state->fd, now) != 0) {
    thread->DropLocked(state.get());
    return nullptr;
  }
  return std::unique_ptr<ReadLease>(new ReadLease(std::move(state)));
}

ReadLease::ReadLease(std::unique_ptr<State> state) : state_(std::move(state)) {}

ReadLease::~ReadLease() {
  LeaseThread* thread = LeaseThread::Get();
  absl::MutexLock lock(&thread->mu_);
  // Not a break: the holder lets it go (a no-op when already dropped).
  thread->DropLocked(state_.get());
}

bool ReadLease::intact() const {
  return !state_->broken.load(std::memory_order_acquire);
}

}  // namespace rbln
