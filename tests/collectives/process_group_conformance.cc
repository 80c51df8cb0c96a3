#include "tests/collectives/process_group_conformance.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace tessera::testing {
namespace {

using collectives::ReduceOp;

absl::Status Check(bool ok, const std::string& what) {
  return ok ? absl::OkStatus() : absl::InternalError("wrong result: " + what);
}

// A ring of point-to-point messages: each rank sends to the next.
absl::Status SendRecvRing(collectives::ProcessGroup& pg) {
  const int r = pg.rank();
  const int n = pg.size();
  at::Tensor out = at::full({5}, 10.0f * r);
  at::Tensor in = at::zeros({5});
  auto sent = pg.Send(out, (r + 1) % n, 7);
  auto received = pg.Recv(in, (r + n - 1) % n, 7);
  // Every rank sends before it receives: this completes only if a backend
  // does not queue a receive behind its own send (see each backend's note).
  TESSERA_RETURN_IF_ERROR(Done(sent));
  TESSERA_RETURN_IF_ERROR(Done(received));
  return Check(at::equal(in, at::full({5}, 10.0f * ((r + n - 1) % n))), "send/recv ring");
}

// Values that differ by rank and element, deterministic, without a
// generator's state.
at::Tensor RankIntegers(int rank, int64_t numel) {
  return (at::arange(numel, at::kLong) * (7919 * rank + 104729)).remainder(2000003) - 1000001;
}
at::Tensor RankFloats(int rank, int64_t numel, at::ScalarType dtype) {
  return (at::sin(at::arange(numel, at::kFloat) * (0.37f * (rank + 1))) * 1000.0f).to(dtype);
}

// Two numbers that change if any bit of `tensor` does.
at::Tensor BitDigest(const at::Tensor& tensor) {
  const at::Tensor bits =
      (tensor.element_size() == 2 ? tensor.view(at::kShort) : tensor.view(at::kInt)).to(at::kLong);
  const at::Tensor weights = at::arange(bits.numel(), at::kLong).remainder(1009) + 1;
  return at::stack({bits.sum(), (bits * weights).sum()});
}

// Integer sums of varied values are exact, and every rank holds the same
// bits of a floating sum or average (allgathered digests compared), at a
// size under and over every backend's segment and algorithm switch.
absl::Status ExactAndIdenticalEverywhere(collectives::ProcessGroup& pg) {
  const int r = pg.rank();
  const int n = pg.size();
  for (int64_t numel : {int64_t{3001}, (int64_t{1} << 21) + 7}) {
    at::Tensor ints = RankIntegers(r, numel);
    at::Tensor expected = at::zeros({numel}, at::kLong);
    for (int k = 0; k < n; ++k) expected += RankIntegers(k, numel);
    TESSERA_RETURN_IF_ERROR(Done(pg.Allreduce(ints)));
    TESSERA_RETURN_IF_ERROR(
        Check(at::equal(ints, expected), absl::StrCat("exact int64 sum of ", numel)));
    for (auto [dtype, op] : {std::pair{at::kFloat, ReduceOp::kSum},
                             std::pair{at::kBFloat16, ReduceOp::kAverage}}) {
      at::Tensor values = RankFloats(r, numel, dtype);
      TESSERA_RETURN_IF_ERROR(Done(pg.Allreduce(values, op)));
      at::Tensor digest = BitDigest(values);
      at::Tensor digests = at::zeros({2 * n}, at::kLong);
      TESSERA_RETURN_IF_ERROR(Done(pg.Allgather(digest, digests)));
      TESSERA_RETURN_IF_ERROR(Check(at::equal(digests.view({n, 2}), digest.expand({n, 2})),
                                    absl::StrCat("the same bits on every rank: ",
                                                 c10::toString(dtype), " of ", numel)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Done(collectives::Work work) {
  auto result = work.Wait(absl::Seconds(120));
  return result.ok() ? absl::OkStatus() : result.status();
}

// Every op, several dtypes, sizes from 4 bytes to 64 MB.
absl::Status RunConformance(collectives::ProcessGroup& pg) {
  const int r = pg.rank();
  const int n = pg.size();
  for (int64_t numel : {int64_t{1}, int64_t{1000}, int64_t{1} << 20, int64_t{16} << 20}) {
    at::Tensor t = at::full({numel}, r + 1.0f);
    TESSERA_RETURN_IF_ERROR(Done(pg.Allreduce(t, ReduceOp::kSum)));
    TESSERA_RETURN_IF_ERROR(Check(at::equal(t, at::full({numel}, n * (n + 1) / 2.0f)),
                                  absl::StrCat("sum of ", numel, " floats")));
  }
  at::Tensor avg = at::full({7}, static_cast<double>(r), at::kDouble);
  TESSERA_RETURN_IF_ERROR(Done(pg.Allreduce(avg, ReduceOp::kAverage)));
  TESSERA_RETURN_IF_ERROR(
      Check(at::allclose(avg, at::full({7}, (n - 1) / 2.0, at::kDouble)), "average"));
  at::Tensor mn = at::arange(5, at::kLong) + r;
  TESSERA_RETURN_IF_ERROR(Done(pg.Allreduce(mn, ReduceOp::kMin)));
  TESSERA_RETURN_IF_ERROR(Check(at::equal(mn, at::arange(5, at::kLong)), "min int64"));
  at::Tensor mx = at::full({3}, r, at::kInt);
  TESSERA_RETURN_IF_ERROR(Done(pg.Allreduce(mx, ReduceOp::kMax)));
  TESSERA_RETURN_IF_ERROR(Check(at::equal(mx, at::full({3}, n - 1, at::kInt)), "max int32"));
  at::Tensor prod = at::full({4}, r + 2.0f);
  TESSERA_RETURN_IF_ERROR(Done(pg.Allreduce(prod, ReduceOp::kProduct)));
  float expected = 1;
  for (int i = 0; i < n; ++i) expected *= i + 2;
  TESSERA_RETURN_IF_ERROR(Check(at::equal(prod, at::full({4}, expected)), "product"));
  at::Tensor half = at::full({8}, 1.0, at::kHalf);
  TESSERA_RETURN_IF_ERROR(Done(pg.Allreduce(half, ReduceOp::kSum)));
  TESSERA_RETURN_IF_ERROR(Check(at::equal(half, at::full({8}, n, at::kHalf)), "half sum"));
  // Varied values, a length that is no multiple of 8 and spans ring segments;
  // every sum exact in fp16 (multiples of 1/4 below 256).
  for (int64_t numel : {int64_t{1003}, (int64_t{1} << 20) + 5}) {
    const at::Tensor values = (at::arange(numel, at::kFloat).remainder(64) * 0.25f);
    at::Tensor halves = (values * (r + 1)).to(at::kHalf);
    TESSERA_RETURN_IF_ERROR(Done(pg.Allreduce(halves, ReduceOp::kAverage)));
    TESSERA_RETURN_IF_ERROR(
        Check(at::equal(halves, (values * ((n + 1) / 2.0f)).to(at::kHalf)),
              absl::StrCat("half average of ", numel)));
  }
  at::Tensor bf16 = at::full({8}, 1.5, at::kBFloat16) * (r + 1);
  TESSERA_RETURN_IF_ERROR(Done(pg.Allreduce(bf16, ReduceOp::kMax)));
  TESSERA_RETURN_IF_ERROR(
      Check(at::equal(bf16, at::full({8}, 1.5 * n, at::kBFloat16)), "bfloat16 max"));
  TESSERA_RETURN_IF_ERROR(Done(pg.Allreduce(bf16, ReduceOp::kAverage)));
  TESSERA_RETURN_IF_ERROR(
      Check(at::equal(bf16, at::full({8}, 1.5 * n, at::kBFloat16)), "bfloat16 average"));

  const int root = n - 1;
  at::Tensor b = r == root ? at::arange(10, at::kFloat) : at::zeros({10});
  TESSERA_RETURN_IF_ERROR(Done(pg.Broadcast(b, root)));
  TESSERA_RETURN_IF_ERROR(Check(at::equal(b, at::arange(10, at::kFloat)), "broadcast"));
  TESSERA_RETURN_IF_ERROR(Done(pg.Barrier()));

  at::Tensor mine = at::full({3}, static_cast<int64_t>(r), at::kLong);
  at::Tensor all = at::zeros({3 * n}, at::kLong);
  TESSERA_RETURN_IF_ERROR(Done(pg.Allgather(mine, all)));
  TESSERA_RETURN_IF_ERROR(
      Check(at::equal(all, at::arange(n, at::kLong).repeat_interleave(3)), "allgather"));

  // Reduce-scatter: a small and a 4 MB-per-rank chunk; the input is kept.
  for (int64_t per_rank : {int64_t{4}, int64_t{1} << 20}) {
    at::Tensor input = at::arange(per_rank * n, at::kFloat) * (r + 1);
    at::Tensor kept = input.clone();
    at::Tensor chunk = at::zeros({per_rank});
    TESSERA_RETURN_IF_ERROR(Done(pg.ReduceScatter(input, chunk)));
    at::Tensor base = at::arange(per_rank * r, per_rank * (r + 1), at::kFloat);
    TESSERA_RETURN_IF_ERROR(Check(at::allclose(chunk, base * (n * (n + 1) / 2.0f)),
                                  absl::StrCat("reduce_scatter of ", per_rank, " per rank")));
    TESSERA_RETURN_IF_ERROR(Check(at::equal(input, kept), "reduce_scatter keeps its input"));
  }
  at::Tensor doubles = at::full({3 * n}, static_cast<double>(r), at::kDouble);
  at::Tensor mean = at::zeros({3}, at::kDouble);
  TESSERA_RETURN_IF_ERROR(Done(pg.ReduceScatter(doubles, mean, ReduceOp::kAverage)));
  TESSERA_RETURN_IF_ERROR(Check(at::allclose(mean, at::full({3}, (n - 1) / 2.0, at::kDouble)),
                                "reduce_scatter average"));

  if (n > 1) TESSERA_RETURN_IF_ERROR(SendRecvRing(pg));
  TESSERA_RETURN_IF_ERROR(ExactAndIdenticalEverywhere(pg));

  // Bad input is an error here, not a hang for the others: checked before
  // anything is sent, so no rank issues it.
  auto bad = pg.Allreduce(at::arange(6, at::kFloat).reshape({2, 3}).t()).Wait(absl::Seconds(5));
  return Check(bad.status().code() == absl::StatusCode::kInvalidArgument,
               "non-contiguous tensor rejected");
}

int RunChildRank(absl::StatusOr<collectives::EnvProcessGroup> env,
                 const std::function<absl::Status(collectives::ProcessGroup&)>& body) {
  if (!env.ok()) {
    std::fprintf(stderr, "process group: %s\n", env.status().ToString().c_str());
    return 1;
  }
  absl::Status status = body(*env->group);
  if (!status.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", env->group->rank(), status.ToString().c_str());
  }
  return status.ok() ? 0 : 1;
}

ProcessGroupWorld::ProcessGroupWorld()
    : server_(*store::StoreServer::Start("127.0.0.1", 0, TestJobSecret())),
      store_(std::make_unique<store::StoreClient>("127.0.0.1", server_->port(),
                                                  absl::Seconds(60), TestJobSecret())) {}

void ProcessGroupWorld::StartChildren(int world_size, const std::string& scenario,
                                      const std::map<std::string, std::string>& extra_env) {
  for (int rank = 1; rank < world_size; ++rank) {
    auto env = WorkerEnv(rank, world_size, server_->port());
    env.insert(extra_env.begin(), extra_env.end());
    children_.push_back(std::make_unique<WorkerProcess>(scenario, env));
  }
}

}  // namespace tessera::testing
