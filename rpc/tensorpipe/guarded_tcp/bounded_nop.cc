#include "rpc/tensorpipe/guarded_tcp/bounded_nop.h"

#include <nop/base/encoding_byte.h>

namespace tessera::rpc::guarded_tcp {
namespace {

using nop::EncodingByte;

// A bounds-checked cursor over the frame.
class Walker {
 public:
  Walker(const uint8_t* data, size_t length) : data_(data), length_(length) {}
  size_t position() const { return position_; }

  // One value and everything inside it.
  bool Value(int depth) {
    if (depth > kMaxNopDepth) return false;
    uint8_t prefix = 0;
    if (!Byte(&prefix)) return false;
    if (prefix <= 0x7f || prefix >= 0xc0) return true;  // positive and negative fixints
    switch (static_cast<EncodingByte>(prefix)) {
      case EncodingByte::U8:
      case EncodingByte::I8:
        return Skip(1);
      case EncodingByte::U16:
      case EncodingByte::I16:
        return Skip(2);
      case EncodingByte::U32:
      case EncodingByte::I32:
      case EncodingByte::F32:
        return Skip(4);
      case EncodingByte::U64:
      case EncodingByte::I64:
      case EncodingByte::F64:
        return Skip(8);
      case EncodingByte::Nil:
        return true;
      case EncodingByte::Binary:
      case EncodingByte::String: {
        uint64_t size = 0;
        return Size(&size) && Skip(size);
      }
      case EncodingByte::Structure:
      case EncodingByte::Array:
        return Elements(depth, /*per_element=*/1);
      case EncodingByte::Map:
        return Elements(depth, /*per_element=*/2);
      case EncodingByte::Variant:
        return Value(depth + 1) && Value(depth + 1);  // the index, then the value
      default:
        return false;  // reserved, or an encoding TensorPipe does not send
    }
  }

 private:
  bool Byte(uint8_t* byte) {
    if (position_ >= length_) return false;
    *byte = data_[position_++];
    return true;
  }
  bool Skip(uint64_t bytes) {
    if (bytes > length_ - position_) return false;
    position_ += bytes;
    return true;
  }
  // A count or a length: an unsigned integer encoding.
  bool Size(uint64_t* size) {
    uint8_t prefix = 0;
    if (!Byte(&prefix)) return false;
    if (prefix <= 0x7f) {
      *size = prefix;
      return true;
    }
    int bytes = 0;
    switch (static_cast<EncodingByte>(prefix)) {
      case EncodingByte::U8: bytes = 1; break;
      case EncodingByte::U16: bytes = 2; break;
      case EncodingByte::U32: bytes = 4; break;
      case EncodingByte::U64: bytes = 8; break;
      default: return false;
    }
    if (static_cast<size_t>(bytes) > length_ - position_) return false;
    *size = 0;
    for (int i = 0; i < bytes; ++i) *size |= uint64_t{data_[position_ + i]} << (8 * i);
    position_ += bytes;
    return true;
  }
  // `count` elements of `per_element` values each; every value takes at
  // least a byte, so a count beyond the bytes left fails at once.
  bool Elements(int depth, int per_element) {
    uint64_t count = 0;
    if (!Size(&count) || count > (length_ - position_) / per_element) return false;
    for (uint64_t i = 0; i < count * per_element; ++i) {
      if (!Value(depth + 1)) return false;
    }
    return true;
  }

  const uint8_t* const data_;
  const size_t length_;
  size_t position_ = 0;
};

}  // namespace

bool NopValueFits(const uint8_t* data, size_t length, size_t* consumed) {
  Walker walker(data, length);
  if (!walker.Value(0)) return false;
  *consumed = walker.position();
  return true;
}

nop::Status<void> ReadNopBounded(tensorpipe::AbstractNopHolder& object, const void* data,
                                 size_t length) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  size_t consumed = 0;
  if (!NopValueFits(bytes, length, &consumed)) return nop::ErrorStatus::ReadLimitReached;
  tensorpipe::NopReader reader(bytes, consumed);
  return object.read(reader);
}

}  // namespace tessera::rpc::guarded_tcp
