#include "core/dir_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/local_fs.h"
#include "core/unique_fd.h"

namespace rbln {
namespace {

// Whatever can change how a path through the directory resolves, or the
// directory's own status: its entries, its attributes, its own move or
// removal. Not reads, opens or writes of the files in it (our own reads
// would then count as changes).
constexpr uint32_t kWatchMask = IN_ATTRIB | IN_CREATE | IN_DELETE |
                                IN_DELETE_SELF | IN_MOVE_SELF | IN_MOVED_FROM |
                                IN_MOVED_TO | IN_ONLYDIR;

std::atomic<bool> watch_enabled{true};

}  // namespace

DirWatch::Watches::~Watches() { owner_->Release(refs_); }

DirWatch* DirWatch::Get() {
  static DirWatch* const watch = []() -> DirWatch* {
    UniqueFd inotify(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
    UniqueFd mounts(open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC));
    if (inotify.get() < 0 || mounts.get() < 0) return nullptr;
    auto* made = new DirWatch(inotify.Release(), mounts.Release());
    std::thread([made] { made->WaitForMounts(); }).detach();
    return made;
  }();
  return watch_enabled.load(std::memory_order_relaxed) ? watch : nullptr;
}

void DirWatch::SetEnabled(bool enabled) {
  watch_enabled.store(enabled, std::memory_order_relaxed);
}

DirWatch::DirWatch(int inotify_fd, int mountinfo_fd)
    : inotify_fd_(inotify_fd), mountinfo_fd_(mountinfo_fd) {}

uint64_t DirWatch::Generation() {
  int queued = 0;
  if (ioctl(inotify_fd_, FIONREAD, &queued) == 0 && queued == 0) {
    // Odd: another thread has read events it has not counted yet.
    const uint64_t generation = generation_.load();
    if (generation % 2 == 0) return generation;
  }
  absl::MutexLock lock(&mu_);
  Drain();
  return generation_.load();
}

void DirWatch::Drain() {
  const uint64_t before = generation_.load();
  generation_.store(before + 1);
  bool changed = false;
  alignas(struct inotify_event) char buf[4096];
  for (;;) {
    const ssize_t n = read(inotify_fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
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
  generation_.store(changed ? before + 2 : before);
}

void DirWatch::WaitForMounts() {
  struct pollfd mounts = {mountinfo_fd_, POLLPRI, 0};
  for (;;) {
    mounts.revents = 0;
    if (poll(&mounts, 1, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (mounts.revents & (POLLPRI | POLLERR)) {
      absl::MutexLock lock(&mu_);
      generation_.store(generation_.load() + 2);
    }
  }
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
