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

bool TravelsInline(const Message& message) {
  size_t bytes = 0;
  for (const at::Tensor& tensor : message.tensors) bytes += tensor.nbytes();
  return bytes <= kInlineTensorBytes;
}

}  // namespace

void WriteMessage(const std::shared_ptr<tp::Pipe>& pipe,
                  std::shared_ptr<Message> message,
                  std::function<void(const tp::Error&)> done) {
  tp::Message out;
  out.metadata = message->envelope.SerializeAsString();
  if (TravelsInline(*message)) {
    out.payloads.reserve(message->tensors.size());
    for (const at::Tensor& tensor : message->tensors) {
      tp::Message::Payload p;
      p.data = const_cast<void*>(tensor.data_ptr());
      p.length = tensor.nbytes();
      out.payloads.push_back(std::move(p));
    }
  } else {
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

void ReadFrame(std::shared_ptr<tp::Pipe> pipe, const CodecLimits& limits, BufferPool* buffers,
               std::function<void(absl::StatusOr<Message>)> done) {
  pipe->readDescriptor([pipe, limits, buffers, done = std::move(done)](
                           const tp::Error& error, tp::Descriptor descriptor) {
    if (error) {
      done(StatusFromPipeError(error, ""));
      return;
    }
    // Note [Small tensors ride with the descriptor]: payloads or tensors,
    // never both; payloads only as small as a sender would inline.
    const bool inline_tensors = !descriptor.payloads.empty();
    if (inline_tensors && !descriptor.tensors.empty()) {
      done(absl::InvalidArgumentError("frame carries both payloads and tensors"));
      return;
    }
    auto envelope = ParseEnvelope(descriptor.metadata, limits);
    if (!envelope.ok()) {
      done(envelope.status());
      return;
    }
    std::vector<size_t> lengths;
    if (inline_tensors) {
      size_t bytes = 0;
      for (const auto& payload : descriptor.payloads) {
        bytes += std::min(payload.length, kInlineTensorBytes + 1);
        lengths.push_back(payload.length);
      }
      if (bytes > kInlineTensorBytes) {
        done(absl::InvalidArgumentError(
            "frame carries more than " + std::to_string(kInlineTensorBytes) +
            " bytes of payloads (larger tensors travel as tensors)"));
        return;
      }
    }
    for (const auto& tensor : descriptor.tensors) {
      if (tensor.sourceDevice.type != tp::kCpuDeviceType) {
        done(absl::InvalidArgumentError("frame carries a non-CPU tensor"));
        return;
      }
      lengths.push_back(tensor.length);
    }
    auto tensors = AllocateTensors(*envelope, lengths, limits, buffers);
    if (!tensors.ok()) {
      done(tensors.status());
      return;
    }
    auto message = std::make_shared<Message>();
    message->envelope = *std::move(envelope);
    message->tensors = *std::move(tensors);
    tp::Allocation allocation;
    for (const at::Tensor& tensor : message->tensors) {
      if (inline_tensors) {
        tp::Allocation::Payload p;
        p.data = tensor.data_ptr();
        allocation.payloads.push_back(std::move(p));
      } else {
        tp::Allocation::Tensor t;
        t.buffer = tp::CpuBuffer{tensor.data_ptr()};
        allocation.tensors.push_back(std::move(t));
      }
    }
    pipe->read(std::move(allocation),
               [message, done](const tp::Error& error) {
                 if (error) {
                   done(StatusFromPipeError(error, ""));
                 } else {
                   done(std::move(*message));
                 }
               });
  });
}

}  // namespace tessera::rpc
