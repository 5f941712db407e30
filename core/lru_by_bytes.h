// LruByBytes: a map that keeps its most recently used values within a bound
// on their estimated memory. The artifact cache (core/format/artifact_cache.h)
// and the inspect cache (core/format/inspect_cache.h) hold their entries in
// one, each under its own lock.
//
// Each value comes with its size in bytes, as the caller estimates it. An
// Insert past the bound drops least recently used values until the total is
// within it again; a value larger than the bound alone is not kept. Find
// leaves the order alone (a caller may still decide the value is stale);
// Touch marks a value as just used, and Use does both. Find, Touch, Use and
// Erase take any type the map looks up by (a string_view for a std::string
// key).
//
// Not thread-safe.
#ifndef RBLN_CORE_LRU_BY_BYTES_H_
#define RBLN_CORE_LRU_BY_BYTES_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <list>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace rbln {

// Hash and Eq as absl::flat_hash_map takes them (transparent ones let Find,
// Touch and Use look up by another type than Key).
template <typename Key, typename Value,
          typename Hash = typename absl::flat_hash_map<Key, int>::hasher,
          typename Eq = typename absl::flat_hash_map<Key, int>::key_equal>
class LruByBytes {
 public:
  explicit LruByBytes(uint64_t max_bytes) : max_bytes_(max_bytes) {}
  // The index points into the list: a copy would point into this one.
  LruByBytes(const LruByBytes&) = delete;
  LruByBytes& operator=(const LruByBytes&) = delete;

  // The value held for `key`, or null; valid until the next Insert or Erase.
  template <typename K = Key>
  Value* Find(const K& key) {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &it->second->value;
  }

  // Marks the value held for `key`, if any, as the most recently used.
  template <typename K = Key>
  void Touch(const K& key) {
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
    }
  }

  // Find and Touch in one lookup.
  template <typename K = Key>
  Value* Use(const K& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);
    return &it->second->value;
  }

  // Holds `value` for `key` in place of what was held, as the most recently
  // used, then drops the least recently used until within the bound. What
  // is dropped is moved to *dropped when given (so that the caller can
  // destroy it after letting a lock go).
  void Insert(Key key, Value value, uint64_t bytes,
              std::vector<Value>* dropped = nullptr) {
    Erase(key, dropped);
    if (bytes > max_bytes_) return;
    lru_.push_front(Node{key, std::move(value), bytes});
    index_.emplace(std::move(key), lru_.begin());
    bytes_ += bytes;
    while (bytes_ > max_bytes_) EraseNode(std::prev(lru_.end()), dropped);
  }

  // Drops what is held for `key` (into *dropped when given); false when
  // nothing was.
  template <typename K = Key>
  bool Erase(const K& key, std::vector<Value>* dropped = nullptr) {
    auto it = index_.find(key);
    if (it == index_.end()) return false;
    EraseNode(it->second, dropped);
    return true;
  }

  // Drops everything (into *dropped when given).
  void Clear(std::vector<Value>* dropped = nullptr) {
    while (!lru_.empty()) EraseNode(lru_.begin(), dropped);
  }

  size_t size() const { return lru_.size(); }
  uint64_t bytes() const { return bytes_; }

 private:
  struct Node {
    Key key;
    Value value;
    uint64_t bytes;
  };
  using List = std::list<Node>;  // most recently used first

  void EraseNode(typename List::iterator node, std::vector<Value>* dropped) {
    if (dropped != nullptr) dropped->push_back(std::move(node->value));
    bytes_ -= node->bytes;
    index_.erase(node->key);
    lru_.erase(node);
  }

  const uint64_t max_bytes_;
  List lru_;
  absl::flat_hash_map<Key, typename List::iterator, Hash, Eq> index_;
  uint64_t bytes_ = 0;
};

}  // namespace rbln

#endif  // RBLN_CORE_LRU_BY_BYTES_H_
