#include "rpc/tensorpipe/frame_io.h"

#include "rpc/tensorpipe/guarded_tcp/frame_error.h"

#include <tensorpipe/tensorpipe.h>

namespace tessera::rpc {

absl::Status StatusFromPipeError(const tensorpipe::Error& error, const std::string& context) {
  if (error.isOfType<guarded_tcp::GateRefused>()) {
    return absl::UnauthenticatedError(context + error.what());
  }
  return absl::UnavailableError(context + error.what());
}

namespace tp = tensorpipe;

void WriteMessage(const std::shared_ptr<tp::Pipe>& pipe,
                  std::shared_ptr<Message> message,
                  std::function<void(const tp::Error&)> done) {
  tp::Message out;
  out.metadata = message->envelope.SerializeAsString();
  out.tensors.reserve(message->tensors.size());
  for (const at::Tensor& tensor : message->tensors) {
    tp::Message::Tensor t;
    t.buffer = tp::CpuBuffer{const_cast<void*>(tensor.data_ptr())};
    t.length = tensor.nbytes();
    out.tensors.push_back(std::move(t));
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
    if (!descriptor.payloads.empty()) {
      done(absl::InvalidArgumentError("frame carries unexpected payloads"));
      return;
    }
    auto envelope = ParseEnvelope(descriptor.metadata, limits);
    if (!envelope.ok()) {
      done(envelope.status());
      return;
    }
    std::vector<size_t> lengths;
    lengths.reserve(descriptor.tensors.size());
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
      tp::Allocation::Tensor t;
      t.buffer = tp::CpuBuffer{tensor.data_ptr()};
      allocation.tensors.push_back(std::move(t));
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
