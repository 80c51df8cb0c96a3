#include "rpc/grpc/frame_codec.h"

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tessera::rpc {
namespace {

// Field keys of proto::Frame: (field number << 3) | wire type 2 (length-delimited).
constexpr uint8_t kEnvelopeKey = (1 << 3) | 2;
constexpr uint8_t kTensorDataKey = (2 << 3) | 2;

void AppendVarint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

std::string FieldHeader(uint8_t key, uint64_t length) {
  std::string header(1, static_cast<char>(key));
  AppendVarint(&header, length);
  return header;
}

void ReleaseTensor(void* tensor) { delete static_cast<at::Tensor*>(tensor); }

// Reads a byte sequence spread over gRPC slices.
class SliceReader {
 public:
  struct Position {
    size_t slice = 0;
    size_t offset = 0;
  };

  explicit SliceReader(const std::vector<grpc::Slice>& slices) : slices_(slices) {}

  bool AtEnd() {
    SkipEmpty();
    return pos_.slice >= slices_.size();
  }
  size_t remaining() const { return remaining_total_; }
  Position position() const { return pos_; }
  void set_remaining(size_t total) { remaining_total_ = total; }

  absl::StatusOr<uint64_t> ReadVarint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      SkipEmpty();
      if (pos_.slice >= slices_.size()) return absl::InvalidArgumentError("frame truncated in a varint");
      const uint8_t byte = slices_[pos_.slice].begin()[pos_.offset++];
      --remaining_total_;
      value |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) return value;
    }
    return absl::InvalidArgumentError("frame has an over-long varint");
  }

  // Copies `length` bytes from `from` to `out` (without moving this reader).
  void CopyAt(Position from, size_t length, void* out) const {
    auto* dst = static_cast<uint8_t*>(out);
    while (length > 0) {
      const grpc::Slice& slice = slices_[from.slice];
      const size_t n = std::min(length, slice.size() - from.offset);
      std::memcpy(dst, slice.begin() + from.offset, n);
      dst += n;
      length -= n;
      ++from.slice;
      from.offset = 0;
    }
  }

  // Skips `length` bytes (checked against what is left).
  absl::Status Skip(size_t length) {
    if (length > remaining_total_) return absl::InvalidArgumentError("frame truncated in a field");
    remaining_total_ -= length;
    while (length > 0) {
      SkipEmpty();
      const size_t n = std::min(length, slices_[pos_.slice].size() - pos_.offset);
      pos_.offset += n;
      length -= n;
    }
    return absl::OkStatus();
  }

 private:
  void SkipEmpty() {
    while (pos_.slice < slices_.size() && pos_.offset >= slices_[pos_.slice].size()) {
      ++pos_.slice;
      pos_.offset = 0;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  Position pos_;
  size_t remaining_total_ = 0;
};

}  // namespace

absl::StatusOr<grpc::ByteBuffer> EncodeFrame(const Message& message, size_t max_bytes) {
  std::string head = FieldHeader(kEnvelopeKey, message.envelope.ByteSizeLong());
  message.envelope.AppendToString(&head);
  size_t total = head.size();
  std::vector<grpc::Slice> slices;
  slices.reserve(1 + 2 * message.tensors.size());
  slices.emplace_back(std::move(head));
  for (const at::Tensor& tensor : message.tensors) {
    std::string header = FieldHeader(kTensorDataKey, tensor.nbytes());
    total += header.size() + tensor.nbytes();
    slices.emplace_back(std::move(header));
    if (tensor.nbytes() == 0) continue;
    // The slice owns a reference to the tensor: no copy of its bytes.
    slices.emplace_back(const_cast<void*>(tensor.data_ptr()), tensor.nbytes(), &ReleaseTensor,
                        new at::Tensor(tensor));
  }
  if (total > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "message of ", total, " bytes exceeds the gRPC agent's limit of ", max_bytes,
        " bytes (GrpcOptions::max_message_bytes)"));
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

grpc::ByteBuffer EncodeEnvelopeFrame(proto::Envelope envelope) {
  Message message;
  message.envelope = std::move(envelope);
  return *EncodeFrame(message, std::numeric_limits<size_t>::max());
}

absl::StatusOr<Message> DecodeFrame(const grpc::ByteBuffer& frame, const CodecLimits& limits,
                                    BufferPool* buffers) {
  std::vector<grpc::Slice> slices;
  if (!frame.Dump(&slices).ok()) return absl::InvalidArgumentError("unreadable frame");
  SliceReader reader(slices);
  reader.set_remaining(frame.Length());
  std::string envelope_bytes;
  bool have_envelope = false;
  std::vector<SliceReader::Position> tensor_positions;
  std::vector<size_t> tensor_lengths;
  while (!reader.AtEnd()) {
    TESSERA_ASSIGN_OR_RETURN(auto key, reader.ReadVarint());
    TESSERA_ASSIGN_OR_RETURN(auto length, reader.ReadVarint());
    if (length > reader.remaining()) {
      return absl::InvalidArgumentError(absl::StrCat("frame field announces ", length,
                                                     " bytes but ", reader.remaining(), " remain"));
    }
    if (key == kEnvelopeKey) {
      if (have_envelope) return absl::InvalidArgumentError("frame has two envelopes");
      if (length > limits.max_envelope_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "envelope of ", length, " bytes exceeds the limit of ", limits.max_envelope_bytes));
      }
      envelope_bytes.resize(length);
      reader.CopyAt(reader.position(), length, envelope_bytes.data());
      have_envelope = true;
    } else if (key == kTensorDataKey) {
      if (tensor_lengths.size() >= limits.max_tensors) {
        return absl::InvalidArgumentError("frame carries too many tensors");
      }
      tensor_positions.push_back(reader.position());
      tensor_lengths.push_back(length);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("frame has an unknown field (key ", key, ")"));
    }
    auto skipped = reader.Skip(length);
    if (!skipped.ok()) return skipped;
  }
  if (!have_envelope) return absl::InvalidArgumentError("frame has no envelope");
  auto envelope = ParseEnvelope(envelope_bytes, limits);
  if (!envelope.ok()) return envelope.status();
  if (envelope->has_tensor_bytes()) {
    // TensorPipe's frames carry small tensors there (rpc/tensorpipe/
    // frame_io.cc); on this backend every tensor is a frame field.
    return absl::InvalidArgumentError(
        "envelope carries tensor bytes; this backend sends tensors as frame fields");
  }
  auto tensors = AllocateTensors(*envelope, tensor_lengths, limits, buffers);
  if (!tensors.ok()) return tensors.status();
  Message message;
  message.envelope = *std::move(envelope);
  message.tensors = *std::move(tensors);
  for (size_t i = 0; i < message.tensors.size(); ++i) {
    reader.CopyAt(tensor_positions[i], tensor_lengths[i], message.tensors[i].data_ptr());
  }
  return message;
}

}  // namespace tessera::rpc
