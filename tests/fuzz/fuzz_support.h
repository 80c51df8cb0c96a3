// What every Tessera libFuzzer target shares (fuzz_support.cc adds the
// hooks gcc's instrumentation needs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessera::fuzz {

// Splits fuzz input into pieces: each piece is a 2-byte little-endian
// length then that many bytes (clipped to what is left).
class Pieces {
 public:
  Pieces(const uint8_t* data, size_t size)
      : rest_(reinterpret_cast<const char*>(data), size) {}
  std::string_view Next() {
    if (rest_.size() < 2) {
      std::string_view last = rest_;
      rest_ = {};
      return last;
    }
    const size_t length = static_cast<uint8_t>(rest_[0]) | (static_cast<uint8_t>(rest_[1]) << 8);
    rest_.remove_prefix(2);
    std::string_view piece = rest_.substr(0, length);
    rest_.remove_prefix(piece.size());
    return piece;
  }
  std::string_view Rest() const { return rest_; }
  bool empty() const { return rest_.empty(); }

 private:
  std::string_view rest_;
};

}  // namespace tessera::fuzz
