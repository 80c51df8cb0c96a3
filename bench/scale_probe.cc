// One worker of the scale benchmark (bench/scale.sh) and the scale test
// (tests/rpc/scale_test.cc), run by tessera-run as N workers:
//   start       Worker::Start: listening, meeting every worker through the
//               store (rendezvous);
//   all_to_all  after a store barrier, every worker calls every other once,
//               all calls at once (asynchronous), and checks each answer;
//   rref        worker r makes an RRef owned by r+1 and hands it to r+2,
//               which fetches its value (a fork to a third worker);
//   shutdown    the graceful shutdown, which waits for every worker.
// Prints "scale rank R of N: start S ms, all_to_all A ms, rref F ms,
// shutdown D ms" and exits 0, or prints what failed (naming the peer) and
// exits 1. Every wait has a deadline (--timeout_s, default 120 s).
#include <ATen/ops/full.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/status.h"
#include "tessera/worker.h"

ABSL_FLAG(int64_t, timeout_s, 120, "deadline of every wait, in seconds");

namespace {

using Clock = std::chrono::steady_clock;

double MillisSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::string NameOf(const tessera::Worker& worker, int rank) {
  return worker.workers()[rank].name;
}

// Every worker calls every other once, all at once; each answer must name
// the callee's rank. Returns an error naming the first peer that failed.
absl::Status AllToAll(tessera::Worker& worker, absl::Duration timeout) {
  const int world = worker.world_size();
  std::vector<std::pair<int, tessera::Future<tessera::rpc::ResultOf<int64_t>>>> calls;
  for (int peer = 0; peer < world; ++peer) {
    if (peer == worker.rank()) continue;
    calls.emplace_back(peer, worker.RpcAsync<int64_t>(tessera::rpc::CallOptions{timeout},
                                                      NameOf(worker, peer), "scale.rank_of",
                                                      int64_t{worker.rank()}));
  }
  for (auto& [peer, call] : calls) {
    TESSERA_ASSIGN_OR_RETURN(auto answer, call.Wait(timeout + absl::Seconds(5)));
    if (answer != peer * 100000 + worker.rank()) {
      return absl::InternalError(absl::StrCat(NameOf(worker, peer), " answered ", answer));
    }
  }
  return absl::OkStatus();
}

// This worker's RRef, owned by the next worker, handed to the one after.
absl::Status RRefRound(tessera::Worker& worker, absl::Duration timeout) {
  const int world = worker.world_size();
  if (world < 3) return absl::OkStatus();
  const int owner = (worker.rank() + 1) % world;
  const int user = (worker.rank() + 2) % world;
  auto ref = worker.Remote<at::Tensor>(NameOf(worker, owner), "scale.filled",
                                       static_cast<double>(worker.rank()));
  auto sum = worker.RpcAsync<double>(tessera::rpc::CallOptions{timeout}, NameOf(worker, user),
                                     "scale.fetch_sum", ref)
                 .Wait(timeout + absl::Seconds(5));
  if (!sum.ok()) return sum.status();
  if (*sum != 16.0 * worker.rank()) {
    return absl::InternalError(absl::StrCat("the RRef's value fetched by ", NameOf(worker, user),
                                            " sums to ", *sum));
  }
  return absl::OkStatus();
}

// A store barrier: every worker's key, waited for on the store's side.
absl::Status Barrier(tessera::Worker& worker, const std::string& name, absl::Duration timeout) {
  auto& store = worker.rpc().store();
  const std::string prefix = "bench/scale/" + name + "/";
  if (auto set = store.Set(prefix + std::to_string(worker.rank()), "1"); !set.ok()) return set;
  std::vector<std::string> keys;
  for (int rank = 0; rank < worker.world_size(); ++rank) {
    keys.push_back(prefix + std::to_string(rank));
  }
  return store.Wait(keys, timeout);
}

int Run(absl::Duration timeout) {
  auto started = Clock::now();
  auto worker = tessera::Worker::Start(tessera::WorkerOptions::FromEnv());
  const double start_ms = MillisSince(started);
  const int rank = worker->rank();
  worker->Register("scale.rank_of", [rank](int64_t caller) { return rank * 100000 + caller; });
  worker->Register("scale.filled", [](double value) { return at::full({16}, value); });
  worker->Register("scale.fetch_sum", [timeout](tessera::rref::RRef<at::Tensor> ref) {
    return ref.to_here(timeout).sum().item<double>();
  });
  auto fail = [&](const std::string& what, const absl::Status& status) {
    std::printf("scale rank %d: %s failed: %s\n", rank, what.c_str(), status.ToString().c_str());
    std::fflush(stdout);
    return 1;
  };
  if (auto ready = Barrier(*worker, "ready", timeout); !ready.ok()) return fail("barrier", ready);
  started = Clock::now();
  if (auto done = AllToAll(*worker, timeout); !done.ok()) return fail("all-to-all", done);
  const double all_to_all_ms = MillisSince(started);
  started = Clock::now();
  if (auto done = RRefRound(*worker, timeout); !done.ok()) return fail("RRef round", done);
  const double rref_ms = MillisSince(started);
  started = Clock::now();
  worker->Shutdown();
  const double shutdown_ms = MillisSince(started);
  std::printf("scale rank %d of %d: start %.0f ms, all_to_all %.0f ms, rref %.0f ms, "
              "shutdown %.0f ms\n",
              rank, worker->world_size(), start_ms, all_to_all_ms, rref_ms, shutdown_ms);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::ParseFlags(argc, argv,
                      "One worker of the scale benchmark: run N of them with tessera-run "
                      "--standalone --nproc_per_node N (bench/scale.sh).");
  try {
    return Run(absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
  } catch (const std::exception& e) {
    std::printf("scale_probe: %s\n", e.what());
    return 1;
  }
}
