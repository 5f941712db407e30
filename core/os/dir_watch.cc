#include "core/os/dir_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/os/local_fs.h"
#include "core/os/unique_fd.h"

namespace rbln {
namespace {

// Whatever can change how a path through the directory resolves, or the
// directory's own status: its entries, its attributes, its times (a
// utimensat of the modification time alone queues IN_MODIFY, which also
// comes with every write to a file in it), its own move or removal. Not
// reads or opens (IN_ACCESS, IN_OPEN: our own reads would count).
constexpr uint32_t kWatchMask = IN_ATTRIB | IN_CREATE | IN_DELETE |
                                IN_DELETE_SELF | IN_MODIFY | IN_MOVE_SELF |
                                IN_MOVED_FROM | IN_MOVED_TO | IN_ONLYDIR;

}  // namespace

DirWatch::Watches::~Watches() { owner_->Release(refs_); }

DirWatch* DirWatch::Get() {
  static DirWatch* const watch = []() -> DirWatch* {
    UniqueFd inotify(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    UniqueFd mounts(open("/proc/thread-self/mountinfo", O_RDONLY | O_CLOEXEC));
    if (inotify.get() < 0 || mounts.get() < 0) return nullptr;
    return new DirWatch(inotify.Release(), mounts.Release());
  }();
  return watch;
}

DirWatch::DirWatch(int inotify_fd, int mountinfo_fd)
    : inotify_fd_(inotify_fd), mountinfo_fd_(mountinfo_fd) {}

uint64_t DirWatch::Generation() {
  // The thread's own: a poll consumes the mount table's mark for the
  // descriptor polled, which another thread's poll must not take away from
  // it. Of the thread's namespace (thread-self), and opened on its first
  // call: a mount before then marks nothing on it, so that call asks
  // mountinfo_fd_ (below).
  thread_local UniqueFd mounts;
  bool fresh = false;
  if (mounts.get() < 0) {
    mounts =
        UniqueFd(open("/proc/thread-self/mountinfo", O_RDONLY | O_CLOEXEC));
    if (mounts.get() < 0) return 0;
    fresh = true;
  }
  struct pollfd fds[2] = {{inotify_fd_, POLLIN, 0}, {mounts.get(), POLLPRI, 0}};
  const int ready = poll(fds, 2, 0);
  if (ready < 0 || (fds[1].revents & POLLNVAL) != 0) {
    // Trust nothing; a first call not made counts as first again.
    if (fresh) mounts.Close();
    return 0;
  }
  if (ready == 0 && !fresh) {
    // Odd: another thread has read events it has not counted yet.
    const uint64_t generation = generation_.load();
    if (generation % 2 == 0) return generation;
  }
  absl::MutexLock lock(&mu_);
  bool mounted = false;
  if (fresh || (fds[1].revents & (POLLPRI | POLLERR)) != 0) {
    // mountinfo_fd_ is polled only here, under mu_, by the call that then
    // moves the generation: a mark on it means a mount since it was last
    // polled, and without one every mount this thread may have seen (or,
    // on a first call, missed) was counted by the call that polled it last.
    // So one mount moves the generation once, not once per thread.
    struct pollfd since = {mountinfo_fd_, POLLPRI, 0};
    mounted = poll(&since, 1, 0) != 0;
  }
  Drain(mounted);
  return generation_.load();
}

void DirWatch::Drain(bool mounts) {
  const uint64_t before = generation_.load();
  generation_.store(before + 1);
  bool changed = mounts;
  alignas(struct inotify_event) char buf[4096];
  // Bounded, so that a process queueing events without end does not keep
  // the lock: what is left is read by the next call, and counts as a
  // change now (a held directory's event may be among it, behind events of
  // watches let go).
  bool emptied = false;
  for (int reads = 0; reads < 16;) {
    const ssize_t n = read(inotify_fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      emptied = true;
      break;
    }
    if (n <= 0) {
      changed = true;  // events may be lost: trust nothing seen before
      break;
    }
    ++reads;
    for (ssize_t at = 0; at < n;) {
      const auto* event =
          reinterpret_cast<const struct inotify_event*>(buf + at);
      at += sizeof(struct inotify_event) + event->len;
      if (event->mask & IN_Q_OVERFLOW) {
        changed = true;
        continue;
      }
      // An event of a watch let go already concerns nobody.
      auto it = watches_.find(event->wd);
      if (it == watches_.end()) continue;
      changed = true;
      // The kernel dropped the watch (its directory was removed, or its
      // file system unmounted): its number may be given to another.
      if (event->mask & IN_IGNORED) watches_.erase(it);
    }
  }
  if (!emptied) changed = true;
  generation_.store(changed ? before + 2 : before);
}

std::unique_ptr<DirWatch::Watches> DirWatch::WatchPath(int root_fd,
                                                       absl::string_view rel) {
  std::unique_ptr<Watches> watches(new Watches(this));
  if (!Add(root_fd, &watches->refs_)) return nullptr;
  UniqueFd dir;
  for (absl::string_view part : absl::StrSplit(rel, '/', absl::SkipEmpty())) {
    if (part == "." || part == "..") return nullptr;
    UniqueFd next(openat(dir.get() >= 0 ? dir.get() : root_fd,
                         std::string(part).c_str(),
                         O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (next.get() < 0) return nullptr;
    dir = std::move(next);
    if (!Add(dir.get(), &watches->refs_)) return nullptr;
  }
  return watches;
}

bool DirWatch::Add(int fd, std::vector<std::pair<int, uint64_t>>* refs) {
  struct statfs fs;
  if (fstatfs(fd, &fs) != 0 || !IsLocalFileSystem(fs)) return false;
  const std::string path = absl::StrCat("/proc/self/fd/", fd);
  // Under the lock, so that no Release removes the watch between the
  // kernel's answer and the count.
  absl::MutexLock lock(&mu_);
  const int wd = inotify_add_watch(inotify_fd_, path.c_str(), kWatchMask);
  if (wd < 0) return false;
  Watch& watch = watches_[wd];
  if (watch.holders == 0) watch.id = ++next_id_;
  ++watch.holders;
  refs->emplace_back(wd, watch.id);
  return true;
}

void DirWatch::Release(const std::vector<std::pair<int, uint64_t>>& refs) {
  absl::MutexLock lock(&mu_);
  for (const auto& [wd, id] : refs) {
    auto it = watches_.find(wd);
    // Gone already (IN_IGNORED), or the number now names another watch.
    if (it == watches_.end() || it->second.id != id) continue;
    if (--it->second.holders > 0) continue;
    watches_.erase(it);
    // Its IN_IGNORED, queued now, finds no watch and moves nothing.
    inotify_rm_watch(inotify_fd_, wd);
  }
}

size_t DirWatch::watched() const {
  absl::MutexLock lock(&mu_);
  return watches_.size();
}

}  // namespace rbln
