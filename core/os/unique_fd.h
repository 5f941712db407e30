// UniqueFd: a file descriptor closed when it goes out of scope.
//
// Not thread-safe: one owner at a time, like the descriptor itself.
#ifndef RBLN_CORE_OS_UNIQUE_FD_H_
#define RBLN_CORE_OS_UNIQUE_FD_H_

#include <unistd.h>

#include <utility>

namespace rbln {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      Close();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Close(); }

  int get() const { return fd_; }
  // Gives the descriptor up without closing it.
  int Release() { return std::exchange(fd_, -1); }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace rbln

#endif  // RBLN_CORE_OS_UNIQUE_FD_H_
