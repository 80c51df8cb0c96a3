// RRef benchmark: two processes on loopback. Prints one JSON object:
//   remote_method_p50_us / _p99_us  RemoteObject<Counter>() then one method call
//   remote_to_here_p50_us           Remote<int>("echo") then to_here()
//   rrefs_per_s                     10,000 remote() calls, each dropped at once,
//                                   until the owner has freed all of them
// Run through bench/compare_rref.sh to compare with PyTorch in the same run.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

#include "bench/two_processes.h"
#include "bench/usage.h"
#include "bench/worker_options.h"
#include "rpc/init.h"
#include "rref/remote.h"

namespace {

using Clock = std::chrono::steady_clock;
using tessera::rref::RRefContext;

class Counter {
 public:
  explicit Counter(int64_t start) : value_(start) {}
  int64_t Add(int64_t delta) {
    std::lock_guard<std::mutex> lock(mu_);
    return value_ += delta;
  }

 private:
  std::mutex mu_;
  int64_t value_;
};

std::shared_ptr<RRefContext> MakeContext() {
  tessera::rref::ClassRegistry classes;
  classes.Class<Counter>("Counter").Constructor<int64_t>().Method("add", &Counter::Add);
  return RRefContext::Create(std::move(classes));
}

std::unique_ptr<tessera::rpc::Runtime> Start(int rank, int port,
                                             const std::shared_ptr<RRefContext>& context) {
  tessera::rpc::Registry registry;
  (void)registry.Register("echo", [](int64_t v) { return v; });
  std::weak_ptr<RRefContext> weak = context;
  (void)registry.Register("await_owned", [weak](int64_t n) {
    auto c = weak.lock();
    return c && c->WaitForOwnedValues(static_cast<size_t>(n), absl::Seconds(60));
  });
  auto runtime = tessera::rpc::TryInit(tessera::bench::WorkerOptions(rank, 2, port),
                                       std::move(registry), {context});
  if (!runtime.ok()) {
    std::fprintf(stderr, "init: %s\n", runtime.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(runtime);
}

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

int RankMain(int rank, int port, const std::vector<std::string>&) {
  auto context = MakeContext();
  auto runtime = Start(rank, port, context);
  if (rank == 1) return runtime->TryShutdown().ok() ? 0 : 1;

  auto remote_method = [&] {
    auto counter = tessera::rref::RemoteObject<Counter>(*context, "worker1", int64_t{0});
    return counter.RpcSync<int64_t>("add", int64_t{1});
  };
  auto remote_fetch = [&](int64_t i) {
    return tessera::rref::Remote<int64_t>(*context, "worker1", "echo", i).to_here();
  };
  for (int i = 0; i < 300; ++i) remote_method(), remote_fetch(i);

  std::vector<double> method_us, fetch_us;
  for (int i = 0; i < 3000; ++i) {
    auto start = Clock::now();
    remote_method();
    method_us.push_back(Micros(Clock::now() - start));
    start = Clock::now();
    remote_fetch(i);
    fetch_us.push_back(Micros(Clock::now() - start));
  }
  std::sort(method_us.begin(), method_us.end());
  std::sort(fetch_us.begin(), fetch_us.end());

  constexpr int kRRefs = 10000;
  auto start = Clock::now();
  for (int64_t i = 0; i < kRRefs; ++i) {
    (void)tessera::rref::Remote<int64_t>(*context, "worker1", "echo", i);
  }
  (void)runtime->RpcSync<bool>("worker1", "await_owned", int64_t{0});
  const double rate = kRRefs / std::chrono::duration<double>(Clock::now() - start).count();

  std::printf("{\"remote_method_p50_us\": %.1f, \"remote_method_p99_us\": %.1f, "
              "\"remote_to_here_p50_us\": %.1f, \"rrefs_per_s\": %.0f}\n",
              method_us[method_us.size() / 2], method_us[method_us.size() * 99 / 100],
              fetch_us[fetch_us.size() / 2], rate);
  return runtime->TryShutdown().ok() ? 0 : 1;
}

}  // namespace

constexpr char kUsage[] =
    "usage: rref_bench\n"
    "RRef costs between two processes on loopback: remote methods, to_here, remote() churn;\n"
    "prints JSON. bench/compare_rref.sh runs it beside PyTorch.\n";

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  return tessera::bench::RunTwoProcesses(argc, argv, RankMain);
}
