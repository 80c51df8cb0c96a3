// KeySlots: int64 keys to the dense slots 0, 1, 2, ... they were given, in
// one open-addressing table (linear probing over a power of two, kept at
// most half full). A shard's map from sparse keys to its rows' slots, and a
// call's map from keys to their first place when they are made distinct.
//
// It replaces a std::unordered_map (a node per key, reached through its
// bucket): a shard's slot lookups, RowStore::Slots, were 7.5 % of a
// ps_bench profile with it.
//
// Thread-safety: none.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ps/key_hash.h"

namespace tessera::ps {

class KeySlots {
 public:
  // Room for `keys` keys before the table grows.
  explicit KeySlots(int64_t keys = 0) { Rehash(CapacityFor(keys)); }

  // The slot of `key`, and false; or, for a key not seen yet, `next` — its
  // slot from now on — and true.
  std::pair<int64_t, bool> FindOrAdd(int64_t key, int64_t next) {
    if (2 * static_cast<size_t>(size_ + 1) > entries_.size()) Rehash(2 * entries_.size());
    Entry& entry = Probe(key);
    if (entry.slot >= 0) return {entry.slot, false};
    entry = {key, next};
    ++size_;
    return {next, true};
  }
  // The slot of `key`, or -1.
  int64_t Find(int64_t key) const { return entries_[IndexOf(key)].slot; }
  int64_t size() const { return size_; }

 private:
  struct Entry {
    int64_t key = 0;
    int64_t slot = -1;  // -1: empty
  };

  static size_t CapacityFor(int64_t keys) {
    size_t capacity = 16;
    while (capacity < 2 * static_cast<size_t>(keys)) capacity *= 2;
    return capacity;
  }
  // The entry of `key`, or the empty one where it would go. The hash's high
  // bits pick the start: a shard's keys share MixKey's low bits modulo the
  // shard count (ps/shard_map.h).
  size_t IndexOf(int64_t key) const {
    const size_t mask = entries_.size() - 1;
    size_t at = static_cast<size_t>(MixKey(static_cast<uint64_t>(key)) >> shift_) & mask;
    while (entries_[at].slot >= 0 && entries_[at].key != key) at = (at + 1) & mask;
    return at;
  }
  Entry& Probe(int64_t key) { return entries_[IndexOf(key)]; }
  void Rehash(size_t capacity) {
    std::vector<Entry> old = std::move(entries_);
    entries_.assign(capacity, Entry{});
    shift_ = 64;
    for (size_t c = capacity; c > 1; c /= 2) --shift_;
    for (const Entry& entry : old) {
      if (entry.slot >= 0) Probe(entry.key) = entry;
    }
  }

  std::vector<Entry> entries_;
  int shift_ = 64;  // 64 - log2(capacity)
  int64_t size_ = 0;
};

}  // namespace tessera::ps
