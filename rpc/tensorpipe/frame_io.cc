#include "rpc/tensorpipe/frame_io.h"

#include "rpc/tensorpipe/guarded_tcp/frame_error.h"

#include <tensorpipe/tensorpipe.h>

#include <algorithm>
#include <string>

namespace tessera::rpc {

absl::Status StatusFromPipeError(const tensorpipe::Error& error, const std::string& context) {
  if (error.isOfType<guarded_tcp::GateRefused>()) {
    return absl::UnauthenticatedError(context + error.what());
  }
  return absl::UnavailableError(context + error.what());
}

namespace tp = tensorpipe;

namespace {

// Note [Small tensors ride with the descriptor]: TensorPipe moves a tensor
// through a channel — its own connection (basic), or a descriptor, a copy on
// the channel's thread and a completion message (cma). Each costs the
// receiver a wake-up, which on a busy or virtualised host is most of a small
// call's latency. A message whose tensors are small in all travels as
// payloads instead: on the pipe's own connection, right behind the
// descriptor, read in the same wake-up. Either every tensor of a message is
// a payload or none is, so the order needs no bookkeeping.
constexpr size_t kInlineTensorBytes = 64 << 10;

// Note [Small tensors ride in the envelope]: a payload is still a frame of
// its own — a second send for the caller, two more receives for the callee
// (length, then bytes) — and for a call's usual few bytes of tensors those
// system calls cost more than copying the bytes. Up to this many bytes, the
// tensors travel inside the envelope (Envelope.tensor_bytes), so a message
// is one frame: one sendmsg, and one length and one body to receive. The
// bytes are copied about four times on the way (envelope, TensorPipe's
// descriptor, its parse, the tensor): under 2 µs at 4 KiB, less than the
// system calls saved; larger tensors go as payloads, without copies.
constexpr size_t kEnvelopeTensorBytes = 4 << 10;

size_t TensorBytes(const Message& message) {
  size_t bytes = 0;
  for (const at::Tensor& tensor : message.tensors) bytes += tensor.nbytes();
  return bytes;
}

}  // namespace

void WriteMessage(const std::shared_ptr<tp::Pipe>& pipe,
                  std::shared_ptr<Message> message,
                  std::function<void(const tp::Error&)> done) {
  tp::Message out;
  const size_t tensor_bytes = TensorBytes(*message);
  if (tensor_bytes <= kEnvelopeTensorBytes) {
    out.metadata = SerializeEnvelopeWithTensors(message->envelope, message->tensors);
  } else if (tensor_bytes <= kInlineTensorBytes) {
    out.metadata = message->envelope.SerializeAsString();
    out.payloads.reserve(message->tensors.size());
    for (const at::Tensor& tensor : message->tensors) {
      tp::Message::Payload p;
      p.data = const_cast<void*>(tensor.data_ptr());
      p.length = tensor.nbytes();
      out.payloads.push_back(std::move(p));
    }
  } else {
    out.metadata = message->envelope.SerializeAsString();
    out.tensors.reserve(message->tensors.size());
    for (const at::Tensor& tensor : message->tensors) {
      tp::Message::Tensor t;
      t.buffer = tp::CpuBuffer{const_cast<void*>(tensor.data_ptr())};
      t.length = tensor.nbytes();
      out.tensors.push_back(std::move(t));
    }
  }
  pipe->write(std::move(out), [message = std::move(message),
                               done = std::move(done)](const tp::Error& error) {
    done(error);
  });
}

namespace {

// A frame's tensors, allocated, and where TensorPipe is to put the bytes
// that follow its descriptor.
struct FrameBody {
  std::vector<at::Tensor> tensors;
  tp::Allocation allocation;
};

absl::StatusOr<FrameBody> PrepareBody(const tp::Descriptor& descriptor,
                                      proto::Envelope* envelope, const CodecLimits& limits,
                                      BufferPool* buffers) {
  // Note [Small tensors ride with the descriptor]: payloads or tensors,
  // never both; payloads only as small as a sender would inline.
  const bool inline_tensors = !descriptor.payloads.empty();
  if (inline_tensors && !descriptor.tensors.empty()) {
    return absl::InvalidArgumentError("frame carries both payloads and tensors");
  }
  FrameBody body;
  if (envelope->has_tensor_bytes()) {
    // Note [Small tensors ride in the envelope]: then nothing follows.
    if (envelope->tensor_bytes().size() > kEnvelopeTensorBytes) {
      return absl::InvalidArgumentError(
          "envelope carries " + std::to_string(envelope->tensor_bytes().size()) +
          " bytes of tensors; at most " + std::to_string(kEnvelopeTensorBytes) + " travel in it");
    }
    if (inline_tensors || !descriptor.tensors.empty()) {
      return absl::InvalidArgumentError("frame carries tensors both in its envelope and after it");
    }
    auto tensors = TakeTensorsFromEnvelope(envelope, limits);
    if (!tensors.ok()) return tensors.status();
    body.tensors = *std::move(tensors);
    return body;
  }
  std::vector<size_t> lengths;
  if (inline_tensors) {
    size_t bytes = 0;
    for (const auto& payload : descriptor.payloads) {
      bytes += std::min(payload.length, kInlineTensorBytes + 1);
      lengths.push_back(payload.length);
    }
    if (bytes > kInlineTensorBytes) {
      return absl::InvalidArgumentError(
          "frame carries more than " + std::to_string(kInlineTensorBytes) +
          " bytes of payloads (larger tensors travel as tensors)");
    }
  }
  for (const auto& tensor : descriptor.tensors) {
    if (tensor.sourceDevice.type != tp::kCpuDeviceType) {
      return absl::InvalidArgumentError("frame carries a non-CPU tensor");
    }
    lengths.push_back(tensor.length);
  }
  auto tensors = AllocateTensors(*envelope, lengths, limits, buffers);
  if (!tensors.ok()) return tensors.status();
  body.tensors = *std::move(tensors);
  for (const at::Tensor& tensor : body.tensors) {
    if (inline_tensors) {
      tp::Allocation::Payload p;
      p.data = tensor.data_ptr();
      body.allocation.payloads.push_back(std::move(p));
    } else {
      tp::Allocation::Tensor t;
      t.buffer = tp::CpuBuffer{tensor.data_ptr()};
      body.allocation.tensors.push_back(std::move(t));
    }
  }
  return body;
}

}  // namespace

void ReadFrame(std::shared_ptr<tp::Pipe> pipe, const CodecLimits& limits, BufferPool* buffers,
               std::function<void(absl::StatusOr<Message>)> done) {
  pipe->readDescriptor([pipe, limits, buffers, done = std::move(done)](
                           const tp::Error& error, tp::Descriptor descriptor) {
    if (error) {
      done(StatusFromPipeError(error, ""));
      return;
    }
    auto envelope = ParseEnvelope(descriptor.metadata, limits);
    if (!envelope.ok()) {
      done(envelope.status());
      return;
    }
    auto body = PrepareBody(descriptor, &*envelope, limits, buffers);
    if (!body.ok()) {
      done(body.status());
      return;
    }
    auto message = std::make_shared<Message>();
    message->envelope = *std::move(envelope);
    message->tensors = std::move(body->tensors);
    pipe->read(std::move(body->allocation), [message, done](const tp::Error& error) {
      if (error) {
        done(StatusFromPipeError(error, ""));
      } else {
        done(std::move(*message));
      }
    });
  });
}

}  // namespace tessera::rpc
