#include "core/store.h"

#include <string>

#include "core/env.h"
#include "core/testing/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/synth.h"

namespace rbln {
namespace {

using ::testing::HasSubstr;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SynthSpec spec;
    spec.decoder_batch_sizes = {1, 2};
    ASSERT_TRUE(WriteSyntheticArtifact(env_, spec, tmp_.Join("a")).ok());
    absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
        ArtifactStore::Open(env_, tmp_.path());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }

  Env* env_ = Env::Default();
  testing::TempDir tmp_;
  std::unique_ptr<ArtifactStore> store_;
};

TEST_F(StoreTest, SetInPlaceCommitsAndLeavesNoStaging) {
  const auto before = testing::HashTree(tmp_.Join("a"));
  absl::StatusOr<WriteResult> r =
      store_->Write({.name = "a", .target = uint64_t{10}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->written);
  EXPECT_EQ(r->previous_num_blocks, 16u);
  EXPECT_EQ(r->new_num_blocks, 10u);
  absl::StatusOr<Artifact> a = store_->Read("a", {.verify_payload = true});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->current_num_blocks(), 10u);
  const auto after = testing::HashTree(tmp_.Join("a"));
  EXPECT_EQ(after.at("tokenizer.json"), before.at("tokenizer.json"));
  EXPECT_NE(after.at("rbln_config.json"), before.at("rbln_config.json"));
  absl::StatusOr<std::vector<DirEntry>> entries = env_->ListDir(tmp_.path());
  ASSERT_TRUE(entries.ok());
  for (const DirEntry& e : *entries) {
    EXPECT_FALSE(StagedArtifactName(e.name).has_value()) << e.name;
  }
}

TEST_F(StoreTest, OutputDirectoryLeavesTheSourceByteIdentical) {
  const auto before = testing::HashTree(tmp_.Join("a"));
  absl::StatusOr<WriteResult> r =
      store_->Write({.name = "a",
                     .budget = MemoryBudget::Fraction(1, 2),
                     .output_name = "b"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(testing::HashTree(tmp_.Join("a")), before);
  absl::StatusOr<Artifact> b = store_->Read("b", {.verify_payload = true});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->current_num_blocks(), r->new_num_blocks);

  r = store_->Write({.name = "a", .target = uint64_t{9}, .output_name = "b"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  r = store_->Write({.name = "a",
                     .target = uint64_t{9},
                     .output_name = "b",
                     .replace = true});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(store_->Read("b")->current_num_blocks(), 9u);
}

TEST_F(StoreTest, RecoveryRemovesOnlyStagingDebris) {
  store_.reset();
  const std::string debris = tmp_.Join(StagingNameFor("a"));
  ASSERT_TRUE(env_->CreateDir(debris).ok());
  ASSERT_TRUE(env_->CreateDir(tmp_.Join(".a.staging-notdebris")).ok());
  absl::StatusOr<std::unique_ptr<ArtifactStore>> store =
      ArtifactStore::Open(env_, tmp_.path());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->recovered().size(), 1u);
  EXPECT_FALSE(env_->Stat(debris).ok());
  EXPECT_TRUE(env_->Stat(tmp_.Join(".a.staging-notdebris")).ok());
}

TEST_F(StoreTest, SecondOpenFailsFastNamingThePid) {
  absl::StatusOr<std::unique_ptr<ArtifactStore>> second =
      ArtifactStore::Open(env_, tmp_.path());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("pid ", getpid())));
}

}  // namespace
}  // namespace rbln
