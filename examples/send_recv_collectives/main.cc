// Broadcast and ring all-reduce built from Send/Recv (collectives.h),
// checked against the process group's own Broadcast and Allreduce, and
// timed next to them — the steps from point-to-point messages to DDP's
// all-reduce.
//
//   bazel-bin/launcher/tessera-run --nproc_per_node 4 --standalone
//       bazel-bin/examples/send_recv_collectives/send_recv_collectives
// (one command line.)
#include <ATen/ops/allclose.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/randn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "collectives/gloo/gloo_process_group.h"
#include "common/status.h"
#include "examples/common/example_main.h"
#include "examples/send_recv_collectives/collectives.h"

namespace tessera::examples {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);

// Median milliseconds of `repeats` runs of `fn`, every rank in step.
double MedianMs(collectives::ProcessGroup& group, int repeats, const std::function<void()>& fn) {
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    ThrowIfError(group.Barrier().Wait(kTimeout).status());
    const auto start = std::chrono::steady_clock::now();
    fn();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int Run() {
  auto env = collectives::CreateGlooProcessGroupFromEnv();
  collectives::ProcessGroup& group = *env.group;
  const int rank = group.rank();
  bool all_match = true;
  if (rank == 0) {
    std::printf("%d ranks; times are medians of 5 (ms)\n%-10s %-22s %10s %10s %s\n", group.size(),
                "floats", "collective", "send/recv", "built-in", "matches");
  }
  for (int64_t numel : {1024L, 262144L, 4194304L}) {
    at::manual_seed(rank + 1);
    const at::Tensor mine = at::randn({numel});
    // Broadcast from the last rank.
    const int root = group.size() - 1;
    at::Tensor ours = mine.clone(), theirs = mine.clone();
    ThrowIfError(TreeBroadcast(group, ours, root, kTimeout));
    ThrowIfError(group.Broadcast(theirs, root).Wait(kTimeout).status());
    const bool broadcast_ok = at::equal(ours, theirs);
    const double tree_ms = MedianMs(group, 5, [&] {
      at::Tensor t = mine.clone();
      ThrowIfError(TreeBroadcast(group, t, root, kTimeout));
    });
    const double gloo_broadcast_ms = MedianMs(group, 5, [&] {
      at::Tensor t = mine.clone();
      ThrowIfError(group.Broadcast(t, root).Wait(kTimeout).status());
    });
    // All-reduce (sum).
    ours = mine.clone();
    theirs = mine.clone();
    ThrowIfError(RingAllreduce(group, ours, kTimeout));
    ThrowIfError(group.Allreduce(theirs, collectives::ReduceOp::kSum).Wait(kTimeout).status());
    const bool allreduce_ok = at::allclose(ours, theirs, 1e-5, 1e-5);
    const double ring_ms = MedianMs(group, 5, [&] {
      at::Tensor t = mine.clone();
      ThrowIfError(RingAllreduce(group, t, kTimeout));
    });
    const double gloo_allreduce_ms = MedianMs(group, 5, [&] {
      at::Tensor t = mine.clone();
      ThrowIfError(group.Allreduce(t, collectives::ReduceOp::kSum).Wait(kTimeout).status());
    });
    all_match = all_match && broadcast_ok && allreduce_ok;
    if (rank == 0) {
      std::printf("%-10lld %-22s %10.3f %10.3f %s\n", static_cast<long long>(numel),
                  "broadcast (tree)", tree_ms, gloo_broadcast_ms, broadcast_ok ? "yes" : "NO");
      std::printf("%-10lld %-22s %10.3f %10.3f %s\n", static_cast<long long>(numel),
                  "all-reduce (ring)", ring_ms, gloo_allreduce_ms, allreduce_ok ? "yes" : "NO");
    }
  }
  // Every rank checked its own result; the verdict is the worst of them.
  at::Tensor verdict = at::full({1}, all_match ? 1.0f : 0.0f);
  ThrowIfError(group.Allreduce(verdict, collectives::ReduceOp::kMin).Wait(kTimeout).status());
  if (rank == 0) {
    std::printf("every rank's results match the built-in collectives: %s\n",
                verdict.item<float>() == 1.0f ? "yes" : "NO");
  }
  return verdict.item<float>() == 1.0f ? 0 : 1;
}

}  // namespace
}  // namespace tessera::examples

int main(int argc, char** argv) {
  return tessera::examples::ExampleMain(
      argc, argv,
      "Broadcast and ring all-reduce from Send/Recv, checked against the built-in "
      "collectives; run it with tessera-run --nproc_per_node N.",
      [](const std::string&) { return tessera::examples::Run(); });
}
