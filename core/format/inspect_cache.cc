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
  auto it = index_.find(Key{id.device, id.inode});
  if (it == index_.end() || it->second->second.codec != codec ||
      !(it->second->second.id == id)) {
    ++misses_;
    return nullptr;
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  ++hits_;
  return it->second->second.facts;
}

void InspectCache::Insert(const std::string& codec, const FileIdentity& id,
                          std::shared_ptr<const ContainerFacts> facts) {
  const uint64_t bytes = FactsBytes(*facts);
  absl::MutexLock lock(&mu_);
  const Key key{id.device, id.inode};
  if (auto it = index_.find(key); it != index_.end()) EraseLocked(it->second);
  if (bytes > max_bytes_) return;
  lru_.emplace_front(key, Entry{codec, id, std::move(facts), bytes});
  index_[key] = lru_.begin();
  bytes_ += bytes;
  while (bytes_ > max_bytes_ && !lru_.empty())
    EraseLocked(std::prev(lru_.end()));
}

void InspectCache::Erase(const FileIdentity& id) {
  absl::MutexLock lock(&mu_);
  if (auto it = index_.find(Key{id.device, id.inode}); it != index_.end()) {
    EraseLocked(it->second);
  }
}

void InspectCache::EraseLocked(Lru::iterator it) {
  bytes_ -= it->second.bytes;
  index_.erase(it->first);
  lru_.erase(it);
}

size_t InspectCache::size() const {
  absl::MutexLock lock(&mu_);
  return lru_.size();
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
