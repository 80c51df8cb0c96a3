// Batched serving over RPC (PyTorch's asynchronous-execution tutorial): one
// server, N clients each keeping many single-row inference calls in flight.
// The server's "infer" handler returns a future from a Batcher
// (batcher.h): calls from all clients are gathered into one batch, the
// model runs once, every caller gets its own row. "infer_unbatched" runs
// the model per call, for comparison. Each client checks every answer
// against the same model run locally.
//
//   bazel-bin/launcher/tessera-run --standalone --nproc_per_node 5
//       bazel-bin/examples/batched_serving/batched_serving
// (one command line; ranks 1..4 are clients).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/mkldnn_linear.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/stack.h>
#include <c10/core/GradMode.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "examples/batched_serving/batcher.h"
#include "examples/common/worker_example.h"

ABSL_FLAG(int64_t, requests, 1000, "inference calls each client makes per phase");
ABSL_FLAG(int64_t, in_flight, 64, "calls each client keeps in flight");
ABSL_FLAG(int64_t, max_batch, 128, "most requests the server runs as one batch");
ABSL_FLAG(int64_t, max_delay_us, 2000, "longest a request waits for its batch to fill");
ABSL_FLAG(int64_t, hidden, 1024, "width of the served MLP's hidden layers");
ABSL_FLAG(int64_t, layers, 3, "layers of the served MLP");
ABSL_FLAG(int32_t, batch_threads, 1, "threads running batches (the unbatched calls use the pool)");

namespace tessera::examples {
namespace {

constexpr int64_t kInput = 256, kOutput = 16;

// An MLP with fixed weights (seed 0): the server serves it, every client
// recomputes it to check answers. --layers linear layers, ReLU between, on
// oneDNN's kernels (LibTorch's own matmul here is the reference BLAS, as
// fast per row one at a time as batched: nothing for batching to win).
class Mlp {
 public:
  Mlp() {
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(0);
    const int64_t hidden = absl::GetFlag(FLAGS_hidden), layers = absl::GetFlag(FLAGS_layers);
    for (int64_t layer = 0; layer < layers; ++layer) {
      const int64_t in = layer == 0 ? kInput : hidden;
      const int64_t out = layer + 1 == layers ? kOutput : hidden;
      weights_.push_back(
          (at::randn({out, in}, generator) / std::sqrt(static_cast<double>(in))).to_mkldnn());
      biases_.push_back(at::randn({out}, generator) * 0.1);
    }
  }
  at::Tensor operator()(const at::Tensor& batch) const {
    c10::NoGradGuard no_grad;
    at::Tensor h = batch.contiguous().to_mkldnn();
    for (size_t i = 0; i < weights_.size(); ++i) {
      h = at::mkldnn_linear(h, weights_[i], biases_[i]);
      if (i + 1 < weights_.size()) h = at::relu(h);
    }
    return h.to_dense();
  }

 private:
  std::vector<at::Tensor> weights_, biases_;
};

const char* const kPhases[] = {"unbatched", "batched"};

// The server's bookkeeping: a barrier before each phase, and the clients'
// reports after it.
struct Phases {
  Mutex mu;
  int clients = 0;
  std::map<int64_t, std::vector<Promise<bool>>> arrived ABSL_GUARDED_BY(mu);
  struct Report {
    int64_t requests = 0, wrong = 0;
    double first_start = 1e300, last_end = 0;
  };
  std::map<int64_t, Report> reports ABSL_GUARDED_BY(mu);

  Future<bool> Arrive(int64_t phase) {
    MutexLock lock(&mu);
    auto& waiting = arrived[phase];
    waiting.emplace_back();
    Future<bool> mine = waiting.back().GetFuture();
    if (static_cast<int>(waiting.size()) == clients) {
      for (auto& promise : waiting) promise.Set(true);
    }
    return mine;
  }
  void Record(int64_t phase, int64_t requests, int64_t wrong, double start, double end) {
    MutexLock lock(&mu);
    Report& report = reports[phase];
    report.requests += requests;
    report.wrong += wrong;
    report.first_start = std::min(report.first_start, start);
    report.last_end = std::max(report.last_end, end);
  }
};

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int RunServer(Worker& worker) {
  Mlp model;
  Batcher batcher(
      [&model](const at::Tensor& batch) { return model(batch); }, absl::GetFlag(FLAGS_max_batch),
      absl::Microseconds(absl::GetFlag(FLAGS_max_delay_us)), absl::GetFlag(FLAGS_batch_threads));
  Phases phases;
  phases.clients = worker.world_size() - 1;
  worker.Register("infer", [&batcher](rpc::CallContext& ctx, at::Tensor row) {
    return batcher.Submit(std::move(row), ctx.caller_rank);
  });
  worker.Register("infer_unbatched",
                  [&model](at::Tensor row) { return model(row.unsqueeze(0))[0]; });
  worker.Register("arrive", [&phases](int64_t phase) { return phases.Arrive(phase); });
  worker.Register("report", [&phases](int64_t phase, int64_t requests, int64_t wrong, double start,
                                      double end) {
    phases.Record(phase, requests, wrong, start, end);
    return true;
  });
  std::printf(
      "[server] serving an MLP of %lld layers (%lld -> %lld ... -> %lld) to %d clients "
      "(batches of up to %lld, waiting at most %lld us)\n",
      static_cast<long long>(absl::GetFlag(FLAGS_layers)), static_cast<long long>(kInput),
      static_cast<long long>(absl::GetFlag(FLAGS_hidden)), static_cast<long long>(kOutput),
      phases.clients, static_cast<long long>(absl::GetFlag(FLAGS_max_batch)),
      static_cast<long long>(absl::GetFlag(FLAGS_max_delay_us)));
  worker.Shutdown();  // once every client is done
  MutexLock lock(&phases.mu);
  int64_t wrong = 0;
  std::vector<double> throughput;
  for (int64_t phase = 0; phase < 2; ++phase) {
    const Phases::Report& report = phases.reports[phase];
    throughput.push_back(report.requests / (report.last_end - report.first_start));
    wrong += report.wrong;
    std::printf("[server] %s: %lld calls in %.2f s, %.0f calls/s\n", kPhases[phase],
                static_cast<long long>(report.requests), report.last_end - report.first_start,
                throughput.back());
  }
  const BatcherStats stats = batcher.stats();
  std::printf(
      "[server] batched: %lld batches, %.1f calls a batch on average (largest %lld), "
      "%lld batches mixed callers; %.2fx the unbatched throughput\n",
      static_cast<long long>(stats.batches),
      static_cast<double>(stats.requests) / std::max<int64_t>(1, stats.batches),
      static_cast<long long>(stats.largest_batch), static_cast<long long>(stats.mixed_batches),
      throughput[1] / throughput[0]);
  std::printf("[server] wrong answers: %lld\n", static_cast<long long>(wrong));
  return wrong == 0 ? 0 : 1;
}

int RunClient(Worker& worker) {
  const Mlp model;
  const int64_t requests = absl::GetFlag(FLAGS_requests);
  const int64_t in_flight = absl::GetFlag(FLAGS_in_flight);
  for (int64_t phase = 0; phase < 2; ++phase) {
    worker.RpcSync<bool>("server", "arrive", phase);
    at::Generator generator =
        at::make_generator<at::CPUGeneratorImpl>(1000 * worker.rank() + phase);
    std::vector<at::Tensor> rows, answers;
    std::deque<Future<at::Tensor>> pending;
    auto settle_oldest = [&] {
      answers.push_back(pending.front().Get(absl::Seconds(60)));
      pending.pop_front();
    };
    const double start = NowSeconds();
    for (int64_t i = 0; i < requests; ++i) {
      rows.push_back(at::randn({kInput}, generator));
      pending.push_back(worker.RpcAsync<at::Tensor>(
          "server", phase == 0 ? "infer_unbatched" : "infer", rows.back()));
      if (static_cast<int64_t>(pending.size()) >= in_flight) settle_oldest();
    }
    while (!pending.empty()) settle_oldest();
    const double end = NowSeconds();
    // Checked after the clock stops: each answer against this row's own
    // result (a mixed-up row, or another caller's, would differ).
    const at::Tensor want = model(at::stack(rows));
    int64_t wrong = 0;
    for (int64_t i = 0; i < requests; ++i) {
      if (!at::allclose(answers[i], want[i], 1e-4, 1e-5)) ++wrong;
    }
    worker.RpcSync<bool>("server", "report", phase, requests, wrong, start, end);
    std::printf("[%s] %s: %lld calls, %lld wrong answers, %.0f calls/s\n", worker.name().c_str(),
                kPhases[phase], static_cast<long long>(requests), static_cast<long long>(wrong),
                requests / (end - start));
  }
  return 0;
}

}  // namespace
}  // namespace tessera::examples

int main(int argc, char** argv) {
  using tessera::examples::RunClient;
  using tessera::examples::RunServer;
  return tessera::examples::RunWorkerExample(
      argc, argv,
      {"Batched serving over RPC: a server batches single-row inference calls from many "
       "clients; run it with tessera-run --nproc_per_node N (N >= 2).",
       2, 1 << 20, "needs a server and clients: --nproc_per_node >= 2",
       [](int rank) { return rank == 0 ? std::string("server") : absl::StrCat("client", rank); },
       [](tessera::Worker& worker) {
         return worker.rank() == 0 ? RunServer(worker) : RunClient(worker);
       }});
}
