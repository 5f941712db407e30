// ArenaMessageAllocator: a gRPC message allocator
// (grpcpp/support/message_allocator.h) for the daemon's callback methods. A
// call's request and reply live on one protobuf Arena whose first block is
// part of a holder that is kept for the next call, so that the reply's
// messages, strings and repeated fields cost no malloc and no free of their
// own: one DescribeArtifact reply is some twenty of them (docs/
// performance.md, row 5).
//
// Holders are reused, at most kMaxKept of them at once (calls beyond that
// get a holder that is freed when they end); a reply larger than a holder's
// first block spills into blocks the arena allocates and frees as usual.
// Thread-safe.
#ifndef RBLN_SERVER_ARENA_MESSAGES_H_
#define RBLN_SERVER_ARENA_MESSAGES_H_

#include <google/protobuf/arena.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/message_allocator.h"

namespace rbln {

template <typename Request, typename Response>
class ArenaMessageAllocator final
    : public grpc::MessageAllocator<Request, Response> {
 public:
  // More than a DescribeArtifact exchange takes (about 2 KiB on the arena).
  static constexpr size_t kFirstBlockBytes = 4096;
  // Holders kept for reuse: more than the calls one daemon runs at once on
  // its gRPC threads; 256 KiB at most.
  static constexpr size_t kMaxKept = 64;

  ArenaMessageAllocator() = default;
  ArenaMessageAllocator(const ArenaMessageAllocator&) = delete;
  ArenaMessageAllocator& operator=(const ArenaMessageAllocator&) = delete;

  grpc::MessageHolder<Request, Response>* AllocateMessages() override {
    std::unique_ptr<Holder> holder;
    {
      absl::MutexLock lock(&mu_);
      if (!kept_.empty()) {
        holder = std::move(kept_.back());
        kept_.pop_back();
      }
    }
    if (holder == nullptr) holder = std::make_unique<Holder>(this);
    holder->CreateMessages();
    return holder.release();
  }

  size_t kept() const {
    absl::MutexLock lock(&mu_);
    return kept_.size();
  }

 private:
  class Holder final : public grpc::MessageHolder<Request, Response> {
   public:
    explicit Holder(ArenaMessageAllocator* owner)
        : owner_(owner), arena_(FirstBlock(first_block_)) {}

    void CreateMessages() {
      this->set_request(
          google::protobuf::Arena::CreateMessage<Request>(&arena_));
      this->set_response(
          google::protobuf::Arena::CreateMessage<Response>(&arena_));
    }

    // gRPC is done with both messages: they go with the arena's contents.
    void Release() override {
      arena_.Reset();
      owner_->Keep(std::unique_ptr<Holder>(this));
    }

   private:
    static google::protobuf::ArenaOptions FirstBlock(char* block) {
      google::protobuf::ArenaOptions options;
      options.initial_block = block;
      options.initial_block_size = kFirstBlockBytes;
      return options;
    }

    ArenaMessageAllocator* const owner_;
    // Before arena_, which uses it until it is destroyed.
    alignas(std::max_align_t) char first_block_[kFirstBlockBytes];
    google::protobuf::Arena arena_;
  };

  void Keep(std::unique_ptr<Holder> holder) {
    absl::MutexLock lock(&mu_);
    if (kept_.size() < kMaxKept) kept_.push_back(std::move(holder));
  }

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Holder>> kept_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rbln

#endif  // RBLN_SERVER_ARENA_MESSAGES_H_
