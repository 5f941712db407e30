// RunningList: what is running now (the daemon's requests, for the log of a
// forced exit), each item joined to the list by a Node it owns for as long
// as it runs. Joining and leaving take the list's lock and neither allocate
// nor hash: a busy daemon does both on every call.
//
// Thread-safe. A Node must not outlive its list, and ForEach's visitor must
// not make a Node join or leave (it runs under the list's lock).
#ifndef RBLN_SERVER_RUNNING_LIST_H_
#define RBLN_SERVER_RUNNING_LIST_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace rbln {

template <typename T>
class RunningList {
 public:
  // `item` is on `list` from construction until destruction.
  class Node {
   public:
    Node(RunningList* list, const T* item) : list_(list), item_(item) {
      list_->Join(this);
    }
    ~Node() { list_->Leave(this); }
    Node(const Node&) = delete;
    Node& operator=(const Node&) = delete;

   private:
    friend class RunningList;
    RunningList* const list_;
    const T* const item_;
    // Neighbours, under list_->mu_.
    Node* prev_ = nullptr;
    Node* next_ = nullptr;
  };

  RunningList() = default;
  RunningList(const RunningList&) = delete;
  RunningList& operator=(const RunningList&) = delete;

  // Calls `visit(const T&)` with every item on the list, the newest first.
  template <typename Visit>
  void ForEach(Visit visit) const {
    absl::MutexLock lock(&mu_);
    for (const Node* node = head_; node != nullptr; node = node->next_) {
      visit(*node->item_);
    }
  }

 private:
  void Join(Node* node) {
    absl::MutexLock lock(&mu_);
    node->next_ = head_;
    if (head_ != nullptr) head_->prev_ = node;
    head_ = node;
  }

  void Leave(Node* node) {
    absl::MutexLock lock(&mu_);
    if (node->prev_ != nullptr) {
      node->prev_->next_ = node->next_;
    } else {
      head_ = node->next_;
    }
    if (node->next_ != nullptr) node->next_->prev_ = node->prev_;
  }

  mutable absl::Mutex mu_;
  Node* head_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace rbln

#endif  // RBLN_SERVER_RUNNING_LIST_H_
