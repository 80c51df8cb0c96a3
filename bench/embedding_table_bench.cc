// A step's embedding work, the two ways Tessera offers, in the same run:
// the hybrid example's RRef EmbeddingTable (examples/hybrid_ddp_rpc: the
// table on its owner, a lookup by RPC in a distributed autograd context,
// backward to the owner, a DistributedOptimizer's Adam step) against a
// sparse parameter-server table (ps/: Pull the rows, Push their gradients,
// lazy Adam on the server). Both: 12,544 rows x 64 floats (the hybrid
// example's table), one owner or server, batches of distinct ids; the
// lookup is of one id per sample ([N, 1] words), so both move the same rows.
// Prints rows per second for lookups alone and for lookup + update:
//   rref 1024 rows: lookup 812345 rows/s, lookup+update 12345 rows/s
//   ps   1024 rows: lookup ...
//   tessera-run --standalone --nproc_per_node 2 embedding_table_bench [--seconds S]
#include <ATen/ops/ones.h>
#include <ATen/ops/randperm.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/call_rate.h"
#include "bench/usage.h"
#include "dist_optim/distributed_optimizer.h"
#include "examples/hybrid_ddp_rpc/hybrid_model.h"
#include "ps/ps_client.h"
#include "ps/ps_server.h"
#include "tessera/worker.h"

namespace {

using tessera::examples::EmbeddingTable;
constexpr int64_t kRows = tessera::examples::kVocabulary;
constexpr int64_t kDim = tessera::examples::kEmbeddingDim;
const absl::Duration kTimeout = absl::Seconds(60);

using tessera::bench::CallRate;

void Print(const char* how, int64_t batch, double lookups, double steps) {
  std::printf("%-4s %lld rows: lookup %.0f rows/s, lookup+update %.0f rows/s\n", how,
              static_cast<long long>(batch), lookups * batch, steps * batch);
  std::fflush(stdout);
}

void Measure(tessera::Worker& worker, const tessera::ps::PsOptions& ps_options, double seconds) {
  namespace rref = tessera::rref;
  auto table = worker.RpcSync<rref::RRef<EmbeddingTable>>("owner", "table");
  auto params = table.RpcSync<std::vector<rref::RRef<at::Tensor>>>("parameter_rrefs");
  tessera::dist_optim::AdamOptions adam;
  auto optimizer = tessera::dist_optim::DistributedOptimizer::Create(worker.rrefs(), params, adam);
  auto client = tessera::ValueOrThrow(tessera::ps::PsClient::Connect(worker.rpc(), ps_options));
  for (const int64_t batch : {16, 256, 1024, 4096}) {
    std::vector<at::Tensor> ids;
    for (int i = 0; i < 3; ++i) ids.push_back(at::randperm(kRows, at::kLong).narrow(0, 0, batch));
    auto lookup = [&](int64_t i) {
      return table.RpcSync<at::Tensor>("lookup", ids[i % 3].unsqueeze(1));
    };
    const double rref_lookups = CallRate(seconds, lookup);
    const double rref_steps = CallRate(seconds, [&](int64_t i) {
      tessera::dist_autograd::ContextGuard context(worker.autograd());
      worker.autograd().Backward(context.id(), {lookup(i).sum()});
      optimizer.Step(context.id());
    });
    Print("rref", batch, rref_lookups, rref_steps);
    const at::Tensor grads = at::ones({batch, kDim});
    const double ps_lookups = CallRate(
        seconds, [&](int64_t i) { (void)client->Pull("table", ids[i % 3]).Get(kTimeout); });
    const double ps_steps = CallRate(seconds, [&](int64_t i) {
      (void)client->Pull("table", ids[i % 3]).Get(kTimeout);
      (void)client->Push("table", ids[i % 3], grads).Get(kTimeout);
    });
    Print("ps", batch, ps_lookups, ps_steps);
  }
}

}  // namespace

constexpr char kUsage[] =
    "usage: tessera-run --standalone --nproc_per_node 2 embedding_table_bench [--seconds S]\n"
    "Rows per second of the hybrid example's RRef EmbeddingTable against a sparse\n"
    "parameter-server table: lookups alone, and lookups with their update.\n";

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  double seconds = 1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
  }
  tessera::WorkerOptions options = tessera::WorkerOptions::FromEnv();
  options.name = options.rank == 0 ? "owner" : "bench";
  auto worker = tessera::Worker::Start(options);
  tessera::examples::RegisterHybridClasses(worker->rrefs().classes());
  tessera::ps::PsOptions ps_options;
  ps_options.job = "embedding_bench";
  ps_options.servers = {"owner"};
  tessera::ps::TableOptions rows = tessera::ps::TableOptions::Sparse("table", kDim);
  rows.optimizer = tessera::ps::OptimizerOptions::Adam(1e-3);
  ps_options.tables = {rows};
  if (options.rank == 0) {
    auto table = worker->RemoteObject<EmbeddingTable>("owner", kRows, kDim, int64_t{0});
    worker->Register("table", [table] { return table; });
    auto shards = tessera::ValueOrThrow(tessera::ps::PsServer::Start(worker->rpc(), ps_options));
    worker->Shutdown();
    return 0;
  }
  Measure(*worker, ps_options, seconds);
  worker->Shutdown();
  return 0;
}
