// ReplayWindow: accepts each sequence number of one sender at most once,
// with bounded memory, though numbers may arrive somewhat out of order
// (concurrent calls). The sliding window of IPsec's anti-replay check (RFC
// 4303 §3.4.3): the highest number seen, and which of the kSize numbers
// below it were seen; anything older than the window is refused.
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>

namespace tessera::store {

class ReplayWindow {
 public:
  static constexpr size_t kSize = 1024;  // more calls than any client has in flight

  // True the first time `number` (from 1) arrives within the window.
  bool Accept(uint64_t number) {
    if (number > highest_) {
      const uint64_t shift = number - highest_;
      if (shift >= kSize) {
        seen_.reset();
      } else {
        seen_ <<= shift;
      }
      seen_.set(0);
      highest_ = number;
      return true;
    }
    const uint64_t age = highest_ - number;
    if (number == 0 || age >= kSize || seen_.test(age)) return false;
    seen_.set(age);
    return true;
  }

 private:
  uint64_t highest_ = 0;
  std::bitset<kSize> seen_;  // bit i: highest_ - i was seen
};

}  // namespace tessera::store
