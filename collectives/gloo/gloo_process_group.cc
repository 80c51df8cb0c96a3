#include "collectives/gloo/gloo_process_group.h"

#include <ATen/ops/div.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "collectives/gloo/gloo_store.h"
#include "collectives/gloo/reduced_float_math.h"
#include "collectives/gloo/ring_reduce_scatter.h"
#include "collectives/shm/shm_group_setup.h"
#include "common/broken_pipe.h"
#include "common/logging.h"
#include "common/serial_queue.h"
#include "common/status.h"
#include "common/thread_pool.h"
#include "common/timeouts.h"

namespace tessera::collectives {
namespace {

// Gloo's reduction for op on elements of T.
template <typename T>
GlooReduceFn ReduceFunction(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:  // summed, then divided
      // fp16 and bfloat16 sums: vectorised, several times faster than
      // Gloo's and c10's element-wise ones (collectives/gloo/reduced_float_math.h).
      if constexpr (std::is_same_v<T, gloo::float16>) return &SumHalf;
      if constexpr (std::is_same_v<T, at::BFloat16>) return &SumBFloat16;
      return static_cast<GlooReduceFn>(&gloo::sum<T>);
    case ReduceOp::kProduct:
      return static_cast<GlooReduceFn>(&gloo::product<T>);
    case ReduceOp::kMin:
      return static_cast<GlooReduceFn>(&gloo::min<T>);
    case ReduceOp::kMax:
      return static_cast<GlooReduceFn>(&gloo::max<T>);
  }
  return nullptr;
}

// Turns a sum into an average in place. fp16 through DivideHalf: ATen's
// Half division is element by element (collectives/gloo/reduced_float_math.h).
void DivideInPlace(const at::Tensor& tensor, int ranks) {
  if (tensor.scalar_type() == at::kHalf) {
    DivideHalf(tensor.data_ptr(), tensor.numel(), static_cast<float>(ranks));
  } else {
    tensor.div_(ranks);
  }
}

class GlooProcessGroup final : public ProcessGroup {
 public:
  GlooProcessGroup(std::shared_ptr<gloo::rendezvous::Context> context, const GlooOptions& options)
      : ProcessGroup("Gloo"),
        context_(std::move(context)),
        timeout_(std::chrono::milliseconds(absl::ToInt64Milliseconds(options.timeout))),
        bcube_min_bytes_(options.bcube_min_bytes),
        bcube_max_bytes_(options.bcube_max_bytes),
        max_segment_bytes_(options.ring_max_segment_bytes),
        queue_("gloo") {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }

 protected:
  Work DoAllreduce(at::Tensor tensor, ReduceOp op) override {
    return Run("allreduce", [this, tensor, op](uint32_t tag) -> absl::Status {
      gloo::AllreduceOptions options(context_);
      options.setTag(tag);
      options.setTimeout(timeout_);
      options.setMaxSegmentSize(max_segment_bytes_);
      const bool bcube = tensor.nbytes() >= bcube_min_bytes_ && tensor.nbytes() <= bcube_max_bytes_;
      options.setAlgorithm(bcube ? gloo::AllreduceOptions::Algorithm::BCUBE
                                 : gloo::AllreduceOptions::Algorithm::RING);
      absl::Status typed = Typed(tensor, [&](auto* data) {
        using T = std::remove_pointer_t<decltype(data)>;
        options.setOutput(data, tensor.numel());
        options.setReduceFunction(ReduceFunction<T>(op));
      });
      if (!typed.ok()) return typed;
      gloo::allreduce(options);
      if (op == ReduceOp::kAverage) DivideInPlace(tensor, context_->size);
      return absl::OkStatus();
    });
  }

  Work DoBroadcast(at::Tensor tensor, int root) override {
    return Run("broadcast", [this, tensor, root](uint32_t tag) -> absl::Status {
      gloo::BroadcastOptions options(context_);
      options.setTag(tag);
      options.setTimeout(timeout_);
      options.setRoot(root);
      absl::Status typed = Typed(tensor, [&](auto* data) {
        if (rank() == root) options.setInput(data, tensor.numel());
        options.setOutput(data, tensor.numel());
      });
      if (!typed.ok()) return typed;
      gloo::broadcast(options);
      return absl::OkStatus();
    });
  }

  Work DoAllgather(at::Tensor input, at::Tensor output) override {
    return Run("allgather", [this, input, output](uint32_t tag) -> absl::Status {
      gloo::AllgatherOptions options(context_);
      options.setTag(tag);
      options.setTimeout(timeout_);
      absl::Status typed = Typed(input, [&](auto* data) {
        using T = std::remove_pointer_t<decltype(data)>;
        options.setInput(data, input.numel());
        options.setOutput(static_cast<T*>(output.data_ptr()), output.numel());
      });
      if (!typed.ok()) return typed;
      gloo::allgather(options);
      return absl::OkStatus();
    });
  }

  // A ring over the pairs (ring_reduce_scatter.h) on a working copy of
  // `input`, which is left as it was.
  Work DoReduceScatter(at::Tensor input, at::Tensor output, ReduceOp op) override {
    return Run("reduce_scatter", [this, input, output, op](uint32_t tag) -> absl::Status {
      at::Tensor working = input.clone();
      GlooReduceFn reduce = nullptr;
      TESSERA_RETURN_IF_ERROR(Typed(working, [&](auto* data) {
        using T = std::remove_pointer_t<decltype(data)>;
        reduce = ReduceFunction<T>(op);
      }));
      const int64_t chunk = output.numel();
      RingReduceScatter(*context_, working.data_ptr(), chunk, working.element_size(), reduce, tag,
                        timeout_);
      output.view({-1}).copy_(working.view({-1}).narrow(0, chunk * rank(), chunk));
      if (op == ReduceOp::kAverage) DivideInPlace(output, size());
      return absl::OkStatus();
    });
  }

  Work DoSend(at::Tensor tensor, int dst, uint64_t tag) override {
    return PointToPoint("send", tensor, dst, tag, /*sending=*/true);
  }
  Work DoRecv(at::Tensor tensor, int src, uint64_t tag) override {
    return PointToPoint("recv", tensor, src, tag, /*sending=*/false);
  }

  Work DoBarrier() override {
    return Run("barrier", [this](uint32_t tag) -> absl::Status {
      gloo::BarrierOptions options(context_);
      options.setTag(tag);
      options.setTimeout(timeout_);
      gloo::barrier(options);
      return absl::OkStatus();
    });
  }

 private:
  // Calls fn(T* data) for the tensor's element type.
  template <typename Fn>
  static absl::Status Typed(const at::Tensor& tensor, Fn fn) {
    switch (tensor.scalar_type()) {
      case c10::ScalarType::Float:
        fn(tensor.data_ptr<float>());
        break;
      case c10::ScalarType::Double:
        fn(tensor.data_ptr<double>());
        break;
      case c10::ScalarType::Int:
        fn(tensor.data_ptr<int32_t>());
        break;
      case c10::ScalarType::Long:
        fn(tensor.data_ptr<int64_t>());
        break;
      case c10::ScalarType::Char:
        fn(tensor.data_ptr<int8_t>());
        break;
      case c10::ScalarType::Byte:
        fn(tensor.data_ptr<uint8_t>());
        break;
      case c10::ScalarType::Half:
        fn(reinterpret_cast<gloo::float16*>(tensor.data_ptr<at::Half>()));
        break;
      // Sums round to bfloat16 at each step, as PyTorch's Gloo does.
      case c10::ScalarType::BFloat16:
        fn(tensor.data_ptr<at::BFloat16>());
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "the Gloo backend does not reduce ", c10::toString(tensor.scalar_type()), " tensors"));
    }
    return absl::OkStatus();
  }

  // Point to point is posted at once (Gloo's send/recv do not block), not
  // queued behind collectives: a send completes only when its peer receives,
  // so queueing both sides' sends first would deadlock a ring. The wait for
  // completion runs on its own pool.
  Work PointToPoint(const char* what, at::Tensor tensor, int peer, uint64_t tag, bool sending) {
    std::shared_ptr<gloo::transport::UnboundBuffer> buffer;
    try {
      buffer = context_->createUnboundBuffer(tensor.data_ptr(), tensor.nbytes());
      if (sending) {
        buffer->send(peer, tag);
      } else {
        buffer->recv(peer, tag);
      }
    } catch (const std::exception& e) {
      return Work::Ready(absl::UnavailableError(absl::StrCat(what, " failed: ", e.what())));
    }
    Promise<std::monostate> done;
    const auto timeout = timeout_;
    p2p_waiters_.Post([done, what, buffer, tensor, peer, sending, timeout]() {
      int from = -1;
      try {
        const bool ok =
            sending ? buffer->waitSend(&from, timeout) : buffer->waitRecv(&from, timeout);
        CompleteWork(done, ok ? absl::OkStatus()
                              : absl::DeadlineExceededError(absl::StrCat(
                                    what, " with rank ", peer, " did not complete in time")));
      } catch (const std::exception& e) {
        done.Set(absl::DeadlineExceededError(
            absl::StrCat(what, " with rank ", peer, " failed: ", e.what())));
      }
    });
    return done.GetFuture();
  }

  // Runs collectives one at a time, in issue order, each with its own tag:
  // on the queue's thread, or on the thread that waits for it first. The tag
  // is taken when the collective starts, so tags follow the order in which
  // collectives run on every rank even if threads race to issue them.
  Work Run(const char* what, std::function<absl::Status(uint32_t)> op) {
    Promise<std::monostate> done;
    const int64_t timeout_ms = timeout_.count();
    const uint64_t ticket =
        queue_.Post([this, done, what, op = std::move(op), timeout_ms]() mutable {
          absl::Status status;
          const absl::Time start = absl::Now();
          try {
            status = op(next_tag_++);
          } catch (const gloo::IoException& e) {
            const int64_t took_ms = absl::ToInt64Milliseconds(absl::Now() - start);
            // Well before the timeout, Gloo's I/O error is a connection that
            // broke (a peer exited or was killed), not a wait that ran out.
            status =
                took_ms < timeout_ms / 2
                    ? absl::UnavailableError(absl::StrCat(
                          what, " failed after ", took_ms,
                          " ms: a peer's connection broke (it exited or was killed?): ", e.what()))
                    : absl::DeadlineExceededError(
                          absl::StrCat(what, " did not complete within ", timeout_ms, " ms (",
                                       kCollectiveTimeoutCauses, "): ", e.what()));
          } catch (const std::exception& e) {
            status = absl::InternalError(absl::StrCat(what, " failed: ", e.what()));
          }
          // The op's tensors are released before the caller learns it is
          // done, so the caller's release is the last (TSan cannot see the
          // ordering of a tensor freed inside uninstrumented LibTorch).
          op = nullptr;
          CompleteWork(done, status);
        });
    done.SetWaitHook(queue_.InlineHook(ticket, absl::Milliseconds(timeout_ms)));
    return done.GetFuture();
  }

  const std::shared_ptr<gloo::rendezvous::Context> context_;
  const std::chrono::milliseconds timeout_;
  const size_t bcube_min_bytes_;
  const size_t bcube_max_bytes_;
  const size_t max_segment_bytes_;
  // Touched only by queued collectives, which run one at a time (the
  // queue's lock orders them even when they run on different threads).
  uint32_t next_tag_ = 0;
  // Last members: joined first, while the context lives.
  ThreadPool p2p_waiters_{4, "gloo-p2p"};
  SerialQueue queue_;
};

// How many times its context's timeout Gloo waits for a pair's first
// connection.
constexpr int kGlooConnectWaitFactor = 5;

absl::StatusOr<std::unique_ptr<ProcessGroup>> ConnectFlat(store::StoreClient* store, int rank,
                                                          int size, const GlooOptions& options) {
  if (size <= 0 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("invalid rank ", rank, " of ", size));
  }
  auto host = ChooseHostAddress(
      store->host(),
      AddressOptions::Merge(options.address, AddressOptions::FromEnv("GLOO_SOCKET_IFNAME")));
  if (!host.ok()) {
    return Annotate(host.status(), absl::StrCat("Gloo process group of rank ", rank, " of ", size));
  }
  TESSERA_LOG(INFO) << "Gloo rank " << rank << " of " << size << " at " << host->Describe();
  // Gloo's pairs write with writev, without MSG_NOSIGNAL: a dead peer must
  // fail the collective, not kill this rank (see Note [SIGPIPE]).
  IgnoreBrokenPipeSignals();
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = IsWildcardAddress(host->bind) ? host->advertise : host->bind;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    // Gloo waits five times its context's timeout for a pair's first
    // connection (tcp/pair.h, Pair::waitUntil): a fifth of connect_timeout
    // keeps a peer that cannot be reached (a cut path) to connect_timeout,
    // not five times it. The store's waits keep the whole of it (GlooStore).
    // (At least 1 ms: Gloo reads 0 as no timeout at all.)
    context->setTimeout(std::chrono::milliseconds(std::max<int64_t>(
        1, absl::ToInt64Milliseconds(options.connect_timeout / kGlooConnectWaitFactor))));
    GlooStore gloo_store(store, options.store_prefix, options.connect_timeout);
    context->connectFullMesh(gloo_store, device);
    // Ops pass their own timeout; this is the default for any that does not.
    context->setTimeout(std::chrono::milliseconds(absl::ToInt64Milliseconds(options.timeout)));
    return std::unique_ptr<ProcessGroup>(new GlooProcessGroup(std::move(context), options));
  } catch (const std::exception& e) {
    return absl::DeadlineExceededError(absl::StrCat(
        "Gloo process group of rank ", rank, " of ", size, " could not connect within ",
        absl::ToInt64Milliseconds(options.connect_timeout),
        " ms (GlooOptions::connect_timeout), each rank dialling the address the other "
        "published in the store at ",
        store->target(), ": ", e.what()));
  }
}

// The flat group, with shared-memory collectives where ranks share a host
// (collectives/shm/shm_group_setup.h); the hosts' leaders meet over Gloo.
absl::StatusOr<std::unique_ptr<ProcessGroup>> Connect(store::StoreClient* store, int rank, int size,
                                                      GlooOptions options) {
  options = WithDefaultTimeout(std::move(options));
  TESSERA_ASSIGN_OR_RETURN(auto flat, ConnectFlat(store, rank, size, options));
  auto connect_leaders =
      [&](int leader, int leaders,
          const std::string& prefix) -> absl::StatusOr<std::unique_ptr<ProcessGroup>> {
    GlooOptions among_leaders = options;
    among_leaders.store_prefix = prefix;
    return ConnectFlat(store, leader, leaders, among_leaders);
  };
  auto group = WithSharedMemory(std::move(flat), store, options.store_prefix, options.shm,
                                options.timeout, options.connect_timeout, connect_leaders);
  if (!group.ok()) {
    return Annotate(group.status(),
                    absl::StrCat("Gloo process group of rank ", rank, " of ", size));
  }
  return group;
}

}  // namespace

std::unique_ptr<ProcessGroup> CreateGlooProcessGroup(store::StoreClient* store, int rank, int size,
                                                     const GlooOptions& options) {
  return WithTracing(ValueOrThrow(Connect(store, rank, size, options)));
}

EnvProcessGroup CreateGlooProcessGroupFromEnv(const GlooOptions& options) {
  return ValueOrThrow(CreateProcessGroupFromEnv(
      [&](store::StoreClient* store, const store::RendezvousEnv& env) {
        return Connect(store, env.rank, env.world_size, options);
      },
      OrDefault(options.timeout, DefaultTimeout())));
}

}  // namespace tessera::collectives
