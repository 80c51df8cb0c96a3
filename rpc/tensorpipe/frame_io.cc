#include "rpc/tensorpipe/frame_io.h"

#include <tensorpipe/tensorpipe.h>

#include <algorithm>
#include <string>

#include "common/status.h"
#include "rpc/shared_tensors.h"
#include "rpc/tensorpipe/guarded_tcp/frame_error.h"

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

size_t TotalBytes(const std::vector<at::Tensor>& tensors) {
  size_t bytes = 0;
  for (const at::Tensor& tensor : tensors) bytes += tensor.nbytes();
  return bytes;
}

// See Note [Tensors in shared memory]: posts the segments of `message`'s tensors
// in shared memory (up to a post's worth) to the peer's inbox and names them
// in `marked`, a copy of the envelope; the other tensors go to `travelling`.
// False, with nothing marked, if the post failed: then every tensor's bytes
// travel, as to any peer.
bool PostSharedTensors(const Message& message, const SharedMemoryRoute& route,
                       proto::Envelope* marked, std::vector<at::Tensor>* travelling) {
  *marked = message.envelope;
  std::vector<uint64_t> tickets;
  std::vector<int> fds;
  for (size_t i = 0; i < message.tensors.size(); ++i) {
    const at::Tensor& tensor = message.tensors[i];
    std::optional<SharedView> view;
    if (tickets.size() < FdInbox::kMaxFdsPerPost) view = SharedViewOf(tensor);
    if (!view.has_value()) {
      travelling->push_back(tensor);
      continue;
    }
    tickets.push_back(route.inbox->NewTicket());
    fds.push_back(view->segment->fd());
    proto::SharedMemoryRef* ref = marked->mutable_tensors(static_cast<int>(i))->mutable_shared();
    ref->set_ticket(tickets.back());
    ref->set_segment(view->segment->id().data(), view->segment->id().size());
    ref->set_segment_bytes(view->segment->size());
    ref->set_offset(view->offset);
  }
  return route.inbox->Post(route.peer_inbox, tickets, fds).ok();
}

}  // namespace

uint64_t BytesInSharedMemory(const Message& message) {
  uint64_t bytes = 0;
  for (const at::Tensor& tensor : message.tensors) {
    if (IsInSharedMemory(tensor)) bytes += tensor.nbytes();
  }
  return bytes;
}

void WriteMessage(const std::shared_ptr<tp::Pipe>& pipe, std::shared_ptr<Message> message,
                  std::function<void(const tp::Error&)> done, const SharedMemoryRoute& route) {
  // What travels: by default the whole message; with tensors posted as
  // handles, the marked envelope and the other tensors.
  const proto::Envelope* envelope = &message->envelope;
  const std::vector<at::Tensor>* tensors = &message->tensors;
  proto::Envelope marked;
  std::vector<at::Tensor> travelling;
  if (route.inbox != nullptr && PostSharedTensors(*message, route, &marked, &travelling)) {
    envelope = &marked;
    tensors = &travelling;
  }
  tp::Message out;
  const size_t tensor_bytes = TotalBytes(*tensors);
  // Handles and envelope bytes never mix (the receiver refuses that).
  if (tensor_bytes <= kEnvelopeTensorBytes && envelope == &message->envelope) {
    out.metadata = SerializeEnvelopeWithTensors(*envelope, *tensors);
  } else if (tensor_bytes <= kInlineTensorBytes) {
    out.metadata = envelope->SerializeAsString();
    out.payloads.reserve(tensors->size());
    for (const at::Tensor& tensor : *tensors) {
      tp::Message::Payload p;
      p.data = const_cast<void*>(tensor.data_ptr());
      p.length = tensor.nbytes();
      out.payloads.push_back(std::move(p));
    }
  } else {
    out.metadata = envelope->SerializeAsString();
    out.tensors.reserve(tensors->size());
    for (const at::Tensor& tensor : *tensors) {
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

// The body of the tensors whose bytes follow the descriptor, described by
// `metas` (the envelope itself, or its tensors that are not handles).
absl::StatusOr<FrameBody> PrepareTravellingBody(const tp::Descriptor& descriptor,
                                                proto::Envelope* envelope,
                                                const proto::Envelope& metas,
                                                const CodecLimits& limits, BufferPool* buffers) {
  // See Note [Small tensors ride with the descriptor]: payloads or tensors,
  // never both; payloads only as small as a sender would inline.
  const bool inline_tensors = !descriptor.payloads.empty();
  if (inline_tensors && !descriptor.tensors.empty()) {
    return absl::InvalidArgumentError("frame carries both payloads and tensors");
  }
  FrameBody body;
  if (envelope->has_tensor_bytes()) {
    // See Note [Small tensors ride in the envelope]: then nothing follows.
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
  auto tensors = AllocateTensors(metas, lengths, limits, buffers);
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

// See Note [Tensors in shared memory]: the tensors `envelope` names by handle,
// taken from `inbox` and viewed in their segments, merged in order with the
// `travelling` ones.
absl::StatusOr<std::vector<at::Tensor>> MergeSharedTensors(const proto::Envelope& envelope,
                                                           FdInbox* inbox,
                                                           const CodecLimits& limits,
                                                           std::vector<at::Tensor> travelling) {
  std::vector<at::Tensor> tensors;
  tensors.reserve(envelope.tensors_size());
  size_t next_travelling = 0;
  for (int i = 0; i < envelope.tensors_size(); ++i) {
    const proto::TensorMeta& meta = envelope.tensors(i);
    if (!meta.has_shared()) {
      tensors.push_back(std::move(travelling[next_travelling++]));
      continue;
    }
    const proto::SharedMemoryRef& ref = meta.shared();
    TESSERA_RETURN_IF_ERROR(TensorBytes(meta, i, limits).status());
    SharedSegment::Id id;
    if (ref.segment().size() != id.size()) {
      return absl::InvalidArgumentError("tensor " + std::to_string(i) +
                                        ": a shared-memory segment id of " +
                                        std::to_string(ref.segment().size()) + " bytes");
    }
    std::copy(ref.segment().begin(), ref.segment().end(), id.begin());
    auto fd = inbox->Take(ref.ticket());
    if (!fd.ok())
      return absl::InvalidArgumentError("tensor " + std::to_string(i) + ": " +
                                        std::string(fd.status().message()));
    TESSERA_ASSIGN_OR_RETURN(auto segment, SharedSegment::Adopt(*fd, id, ref.segment_bytes()));
    std::vector<int64_t> sizes(meta.sizes().begin(), meta.sizes().end());
    auto tensor = TensorInSegment(std::move(segment), ref.offset(), sizes,
                                  static_cast<c10::ScalarType>(meta.dtype()));
    if (!tensor.ok()) return tensor.status();
    tensors.push_back(*std::move(tensor));
  }
  return tensors;
}

absl::StatusOr<FrameBody> PrepareBody(const tp::Descriptor& descriptor, proto::Envelope* envelope,
                                      const CodecLimits& limits, BufferPool* buffers,
                                      FdInbox* inbox) {
  size_t handles = 0;
  for (const proto::TensorMeta& meta : envelope->tensors()) handles += meta.has_shared() ? 1 : 0;
  if (handles == 0) return PrepareTravellingBody(descriptor, envelope, *envelope, limits, buffers);
  if (inbox == nullptr) {
    return absl::InvalidArgumentError(
        "frame names tensors in shared memory, which this worker takes only from workers on its "
        "host over the Unix-socket transport");
  }
  if (handles > FdInbox::kMaxFdsPerPost || envelope->has_tensor_bytes()) {
    return absl::InvalidArgumentError(
        "frame names " + std::to_string(handles) + " tensors in shared memory" +
        (envelope->has_tensor_bytes() ? " and carries tensor bytes in its envelope"
                                      : "; at most " + std::to_string(FdInbox::kMaxFdsPerPost)));
  }
  proto::Envelope metas;
  for (const proto::TensorMeta& meta : envelope->tensors()) {
    if (!meta.has_shared()) *metas.add_tensors() = meta;
  }
  TESSERA_ASSIGN_OR_RETURN(auto body,
                           PrepareTravellingBody(descriptor, envelope, metas, limits, buffers));
  auto tensors = MergeSharedTensors(*envelope, inbox, limits, std::move(body.tensors));
  if (!tensors.ok()) return tensors.status();
  body.tensors = *std::move(tensors);
  return body;
}

}  // namespace

void ReadFrame(std::shared_ptr<tp::Pipe> pipe, const CodecLimits& limits, BufferPool* buffers,
               FdInbox* inbox, std::function<void(absl::StatusOr<Message>)> done) {
  pipe->readDescriptor([pipe, limits, buffers, inbox, done = std::move(done)](
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
    auto body = PrepareBody(descriptor, &*envelope, limits, buffers, inbox);
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
