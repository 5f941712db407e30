#include "core/format/inspect_cache.h"

#include <utility>

namespace rbln {
namespace {

// An estimate of the memory one entry's facts hold.
uint64_t FactsBytes(const ContainerFacts& facts) {
  uint64_t bytes = sizeof(ContainerFacts) + facts.compiled_model_name.size() +
                   facts.npu.size();
  for (const AllocationFacts& a : facts.other) {
    bytes += sizeof(a) + a.key.size() + a.bytes.size() * sizeof(uint64_t);
  }
  for (const KvTensorFacts& t : facts.kv_tensors) {
    bytes += sizeof(t) + t.name.size() + t.bytes.size() * sizeof(uint64_t);
  }
  return bytes;
}

}  // namespace

std::shared_ptr<const ContainerFacts> InspectCache::Find(
    const std::string& codec, const FileIdentity& id) {
  absl::MutexLock lock(&mu_);
  const Key key{id.device, id.inode};
  const Entry* entry = entries_.Find(key);
  if (entry == nullptr || entry->codec != codec || !(entry->id == id)) {
    ++misses_;
    return nullptr;
  }
  entries_.Touch(key);
  ++hits_;
  return entry->facts;
}

void InspectCache::Insert(const std::string& codec, const FileIdentity& id,
                          std::shared_ptr<const ContainerFacts> facts,
                          absl::Time inspect_start) {
  constexpr int64_t kSecond = 1'000'000'000;
  const bool whole_seconds =
      id.mtime_ns % kSecond == 0 && id.ctime_ns % kSecond == 0;
  if (racy_window_ > absl::ZeroDuration() &&
      id.ChangedSince(inspect_start - (whole_seconds ? kWholeSecondsRacyWindow
                                                     : racy_window_))) {
    return;
  }
  const uint64_t bytes = FactsBytes(*facts);
  absl::MutexLock lock(&mu_);
  entries_.Insert(Key{id.device, id.inode}, Entry{codec, id, std::move(facts)},
                  bytes);
}

void InspectCache::Erase(const FileIdentity& id) {
  absl::MutexLock lock(&mu_);
  entries_.Erase(Key{id.device, id.inode});
}

void InspectCache::Clear() {
  absl::MutexLock lock(&mu_);
  entries_.Clear();
}

size_t InspectCache::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

uint64_t InspectCache::hits() const {
  absl::MutexLock lock(&mu_);
  return hits_;
}

uint64_t InspectCache::misses() const {
  absl::MutexLock lock(&mu_);
  return misses_;
}

}  // namespace rbln
