// Reinforcement learning over RPC (PyTorch's RPC tutorial, part 1): one
// agent and several observers. Each observer runs its own CartPole
// (cart_pole.h, in C++: no simulator) and asks the agent for every action
// over RPC; the agent, which holds the policy, collects the rewards and
// improves the policy with REINFORCE after each round of episodes.
//
//   bazel-bin/launcher/tessera-run --standalone --nproc_per_node 3
//       bazel-bin/examples/reinforcement_learning/reinforcement_learning
// (one command line; rank 0 is the agent, ranks 1.. the observers).
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "examples/common/worker_example.h"
#include "examples/reinforcement_learning/agent.h"
#include "examples/reinforcement_learning/cart_pole.h"

ABSL_FLAG(int64_t, rounds, 150, "rounds of episodes (one episode per observer each)");
ABSL_FLAG(int64_t, max_steps, 200, "longest episode");
ABSL_FLAG(uint64_t, seed, 1, "seed of the policy, its sampling and the environments");
ABSL_FLAG(double, lr, 1e-2, "the agent's Adam learning rate");
ABSL_FLAG(int64_t, log_every, 10, "rounds between progress lines");

namespace tessera::examples {
namespace {

double Mean(const std::vector<double>& values, size_t from, size_t to) {
  return std::accumulate(values.begin() + from, values.begin() + to, 0.0) / (to - from);
}

int RunAgent(Worker& worker) {
  Agent agent(absl::GetFlag(FLAGS_seed), absl::GetFlag(FLAGS_lr), /*gamma=*/0.99);
  worker.Register("select_action", [&agent](rpc::CallContext& ctx, at::Tensor state) {
    return agent.SelectAction(ctx.caller_rank, state);
  });
  std::vector<std::string> observers;
  for (const auto& info : worker.workers()) {
    if (info.rank != worker.rank()) observers.push_back(info.name);
  }
  const int64_t rounds = absl::GetFlag(FLAGS_rounds);
  const auto start = std::chrono::steady_clock::now();
  std::vector<double> lengths;
  double running = 10;
  for (int64_t round = 0; round < rounds; ++round) {
    std::vector<Future<int64_t>> episodes;
    for (const auto& observer : observers) {
      episodes.push_back(worker.RpcAsync<int64_t>(observer, "run_episode", round));
    }
    for (auto& episode : episodes) episode.Get(absl::Seconds(120));
    lengths.push_back(agent.FinishRound());
    running = 0.05 * lengths.back() + 0.95 * running;
    if ((round + 1) % absl::GetFlag(FLAGS_log_every) == 0) {
      std::printf("[agent] round %lld: mean episode length %.1f, running %.1f\n",
                  static_cast<long long>(round + 1), lengths.back(), running);
    }
  }
  const size_t window = std::min<size_t>(10, lengths.size());
  std::printf(
      "[agent] %zu observers, %lld rounds in %.1f s: mean episode length %.1f in the "
      "first %zu rounds, %.1f in the last %zu\n",
      observers.size(), static_cast<long long>(rounds),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
      Mean(lengths, 0, window), window, Mean(lengths, lengths.size() - window, lengths.size()),
      window);
  worker.Shutdown();
  return 0;
}

int RunObserver(Worker& worker) {
  CartPole env(absl::GetFlag(FLAGS_seed) * 1000 + worker.rank(),
               static_cast<int>(absl::GetFlag(FLAGS_max_steps)));
  Mutex mu;  // one episode at a time
  worker.Register("run_episode", [&](rpc::CallContext& ctx, int64_t /*round*/) {
    MutexLock lock(&mu);
    auto state = env.Reset();
    while (true) {
      const auto action =
          ctx.runtime->RpcSync<int64_t>(ctx.caller_name, "select_action",
                                        at::tensor(std::vector<float>(state.begin(), state.end())));
      if (env.Step(static_cast<int>(action))) break;
      state = env.state();
    }
    return static_cast<int64_t>(env.steps());
  });
  worker.Shutdown();  // once the agent is done
  return 0;
}

}  // namespace
}  // namespace tessera::examples

int main(int argc, char** argv) {
  using tessera::examples::RunAgent;
  using tessera::examples::RunObserver;
  return tessera::examples::RunWorkerExample(
      argc, argv,
      {"Reinforcement learning over RPC: an agent holds the policy, observers run CartPole "
       "and ask it for actions; run it with tessera-run --nproc_per_node N (N >= 2).",
       2, 1 << 20, "needs an agent and observers: --nproc_per_node >= 2",
       [](int rank) { return rank == 0 ? std::string("agent") : absl::StrCat("observer", rank); },
       [](tessera::Worker& worker) {
         return worker.rank() == 0 ? RunAgent(worker) : RunObserver(worker);
       }});
}
