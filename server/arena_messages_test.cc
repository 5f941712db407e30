#include "server/arena_messages.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "rbln/artifact/v1/artifact_service.pb.h"

namespace rbln {
namespace {

namespace v1 = ::rbln::artifact::v1;

using DescribeMessages = ArenaMessageAllocator<v1::DescribeArtifactRequest,
                                               v1::DescribeArtifactResponse>;
using Holder = grpc::MessageHolder<v1::DescribeArtifactRequest,
                                   v1::DescribeArtifactResponse>;

TEST(ArenaMessageAllocatorTest, MessagesLiveOnTheHoldersArena) {
  DescribeMessages allocator;
  Holder* holder = allocator.AllocateMessages();
  ASSERT_NE(holder->request(), nullptr);
  ASSERT_NE(holder->response(), nullptr);
  EXPECT_NE(holder->request()->GetArena(), nullptr);
  EXPECT_EQ(holder->request()->GetArena(), holder->response()->GetArena());
  holder->Release();
}

TEST(ArenaMessageAllocatorTest, AReusedHolderHasFreshMessages) {
  DescribeMessages allocator;
  Holder* first = allocator.AllocateMessages();
  first->request()->set_artifact("llama");
  first->response()->set_cls_name("RBLNLlamaForCausalLM");
  first->response()->add_graphs()->set_file_name("prefill.rbln");
  first->Release();
  EXPECT_EQ(allocator.kept(), 1u);

  Holder* second = allocator.AllocateMessages();
  EXPECT_EQ(second, first);  // kept and reused
  EXPECT_EQ(allocator.kept(), 0u);
  EXPECT_EQ(second->request()->artifact(), "");
  EXPECT_EQ(second->response()->cls_name(), "");
  EXPECT_EQ(second->response()->graphs_size(), 0);
  second->Release();
}

TEST(ArenaMessageAllocatorTest, AReplyLargerThanTheFirstBlockSpills) {
  DescribeMessages allocator;
  for (int round = 0; round < 3; ++round) {
    Holder* holder = allocator.AllocateMessages();
    const std::string big(4 * DescribeMessages::kFirstBlockBytes, 'x');
    for (int i = 0; i < 100; ++i) {
      v1::GraphInfo* graph = holder->response()->add_graphs();
      graph->set_file_name(big);
      graph->set_payload_bytes(i);
    }
    ASSERT_EQ(holder->response()->graphs_size(), 100);
    EXPECT_EQ(holder->response()->graphs(99).file_name(), big);
    EXPECT_EQ(holder->response()->graphs(99).payload_bytes(), 99u);
    holder->Release();
  }
  EXPECT_EQ(allocator.kept(), 1u);
}

TEST(ArenaMessageAllocatorTest, KeepsAtMostItsBound) {
  DescribeMessages allocator;
  std::vector<Holder*> holders;
  for (size_t i = 0; i < DescribeMessages::kMaxKept + 5; ++i) {
    holders.push_back(allocator.AllocateMessages());
  }
  for (Holder* holder : holders) holder->Release();
  EXPECT_EQ(allocator.kept(), DescribeMessages::kMaxKept);
}

}  // namespace
}  // namespace rbln
