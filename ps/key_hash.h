// The hashes a parameter-server table uses: a key's shard, a row's initial
// values from its key alone (ps/row_store.h), and a replica's digest.
#pragma once

#include <cstdint>
#include <cstring>

namespace tessera::ps {

// splitmix64's finaliser: keys that differ in one bit land far apart, so a
// table's sequential ids spread evenly over the shards.
inline uint64_t MixKey(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// A uniform double in [0, 1) from (seed, key, column): a row's initial
// values depend on nothing else, whichever server makes it.
inline double UnitFromKey(uint64_t seed, uint64_t key, uint64_t column) {
  const uint64_t bits = MixKey(MixKey(seed ^ MixKey(key)) + column);
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}

// `hash` extended by `bytes` bytes at `data`: for digests of replicas, not
// for security.
inline uint64_t HashBytes(uint64_t hash, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  for (; bytes >= 8; bytes -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    hash = MixKey(hash ^ word);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p, bytes);
  return MixKey(hash ^ tail ^ (static_cast<uint64_t>(bytes) << 56));
}

}  // namespace tessera::ps
