// DistributedDataParallel::Join (see Note [Joining with uneven inputs]): two
// ranks with different numbers of batches. Rank 0 is this process, rank 1 a
// child; each checks its own replica.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "ddp/distributed_data_parallel.h"
#include "tests/ddp/two_ranks.h"

namespace tessera::testing {
namespace {

constexpr double kTinyBuckets = 0.0002;  // ~200 bytes: several buckets

// The ToyModel of PyTorch's DDP tutorial, with a buffer that counts steps.
struct ToyImpl : torch::nn::Module {
  explicit ToyImpl(int64_t seed) {
    torch::manual_seed(seed);
    first = register_module("first", torch::nn::Linear(10, 10));
    second = register_module("second", torch::nn::Linear(10, 5));
    steps = register_buffer("steps", torch::zeros({1}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return second->forward(torch::relu(first->forward(x)));
  }
  torch::nn::Linear first{nullptr};
  torch::nn::Linear second{nullptr};
  torch::Tensor steps;
};

// Rows of the data that `rank` trains on in micro-batch `micro` (of 2) of
// `step`: disjoint everywhere.
torch::Tensor Rows(int step, int rank, int micro) {
  const int64_t first = ((step * 2 + rank) * 2 + micro) * 2;
  return torch::arange(first, first + 2, torch::kLong);
}

absl::Status AllClose(torch::nn::Module& a, torch::nn::Module& b, const std::string& what) {
  auto pa = a.parameters();
  auto pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    if (!torch::allclose(pa[i], pb[i], 1e-5, 1e-6)) {
      return absl::InternalError(absl::StrCat(what, ": parameter ", i, " differs by ",
                                              (pa[i] - pb[i]).abs().max().item<float>()));
    }
  }
  return absl::OkStatus();
}

// Rank `r` trains `steps[r]` steps — each a micro-batch under NoSync, then
// a synchronised one — and joins. Every rank must end with the parameters
// of one process that, at each step, averages the losses of the ranks
// still training over the world size (or over those ranks).
absl::Status TrainUneven(collectives::ProcessGroup& group, std::vector<int> steps,
                         ddp::JoinOptions join_options) {
  const int r = group.rank();
  const std::string what =
      absl::StrCat("steps {", absl::StrJoin(steps, ", "),
                   "}, divide_by_initial_world_size=", join_options.divide_by_initial_world_size);
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({64, 10});
  const torch::Tensor y = torch::randn({64, 5});
  auto replica = std::make_shared<ToyImpl>(/*seed=*/r);  // ranks start apart
  auto reference = std::make_shared<ToyImpl>(/*seed=*/0);
  ddp::DdpOptions options;
  options.bucket_cap_mb = kTinyBuckets;
  auto ddp = ddp::DistributedDataParallel::Create(replica, &group, options);
  torch::optim::SGD opt(replica->parameters(), 0.1);
  torch::optim::SGD ref_opt(reference->parameters(), 0.1);
  {
    auto join = ddp->Join(join_options);
    for (int step = 0; step < steps[r]; ++step) {
      opt.zero_grad();
      {
        auto no_sync = ddp->NoSync();
        torch::mse_loss(replica->forward(x.index_select(0, Rows(step, r, 0))),
                        y.index_select(0, Rows(step, r, 0)))
            .backward();
      }
      torch::mse_loss(replica->forward(x.index_select(0, Rows(step, r, 1))),
                      y.index_select(0, Rows(step, r, 1)))
          .backward();
      opt.step();
    }
    TESSERA_RETURN_IF_ERROR(join.TryFinish());
  }
  for (int step = 0; step < std::max(steps[0], steps[1]); ++step) {
    std::vector<int> training;
    for (int rank = 0; rank < 2; ++rank) {
      if (step < steps[rank]) training.push_back(rank);
    }
    ref_opt.zero_grad();
    torch::Tensor loss = torch::zeros({});
    for (int rank : training) {
      for (int micro = 0; micro < 2; ++micro) {
        loss =
            loss + torch::mse_loss(reference->forward(x.index_select(0, Rows(step, rank, micro))),
                                   y.index_select(0, Rows(step, rank, micro)));
      }
    }
    const double divisor = join_options.divide_by_initial_world_size ? 2.0 : training.size();
    (loss / divisor).backward();
    ref_opt.step();
  }
  return AllClose(*replica, *reference, what);
}

absl::Status RunUneven(collectives::ProcessGroup& group) {
  // {0, 3}: rank 0 never trains, so it also takes part in rank 1's bucket
  // rebuild (see Note [Bucket rebuild]); {4, 2}: the last to train is rank 0.
  for (const std::vector<int>& steps :
       std::vector<std::vector<int>>{{3, 5}, {0, 3}, {4, 2}, {2, 2}}) {
    for (bool divide_by_initial : {true, false}) {
      ddp::JoinOptions join_options;
      join_options.divide_by_initial_world_size = divide_by_initial;
      auto status = TrainUneven(group, steps, join_options);
      if (!status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

// Inside a Join, buffers come from the highest rank still training (rank 0
// has joined with stale ones), and every rank leaves with the last one's
// parameters and buffers.
absl::Status RunBuffers(collectives::ProcessGroup& group) {
  const int r = group.rank();
  const std::vector<int> steps = {2, 4};
  auto replica = std::make_shared<ToyImpl>(/*seed=*/r);
  auto ddp = ddp::DistributedDataParallel::Create(replica, &group, {});
  torch::optim::SGD opt(replica->parameters(), 0.1);
  {
    auto join = ddp->Join();
    for (int step = 0; step < steps[r]; ++step) {
      replica->steps.fill_(100 * r + step);
      TESSERA_RETURN_IF_ERROR(StatusOf([&] { ddp->SyncBuffers(); }));
      if (replica->steps.item<float>() != 100 + step) {
        return absl::InternalError(
            absl::StrCat("step ", step, ": buffer ", replica->steps.item<float>(),
                         " after SyncBuffers, expected rank 1's ", 100 + step));
      }
      opt.zero_grad();
      replica->forward(torch::ones({2, 10}) * (r + 1)).sum().backward();
      opt.step();
    }
    TESSERA_RETURN_IF_ERROR(join.TryFinish());
  }
  if (replica->steps.item<float>() != 103) {
    return absl::InternalError(
        absl::StrCat("final buffer ", replica->steps.item<float>(), ", expected rank 1's 103"));
  }
  // The same parameters everywhere: allgather them and compare.
  std::vector<torch::Tensor> flat;
  for (const auto& p : replica->parameters()) flat.push_back(p.detach().reshape({-1}));
  const torch::Tensor mine = torch::cat(flat);
  torch::Tensor all = torch::empty({2 * mine.numel()});
  TESSERA_RETURN_IF_ERROR(group.Allgather(mine, all).Wait(absl::Seconds(60)).status());
  if (!torch::equal(all.narrow(0, 0, mine.numel()), all.narrow(0, mine.numel(), mine.numel()))) {
    return absl::InternalError("ranks left the Join with different parameters");
  }
  return absl::OkStatus();
}

// throw_on_early_termination: rank 0 trains one step, rank 1 three. Rank
// 1's second backward fails naming rank 0, rank 0's Finish fails too, and
// neither leaves a collective behind: the group still works.
absl::Status RunThrowOnEarlyTermination(collectives::ProcessGroup& group) {
  const int r = group.rank();
  auto replica = std::make_shared<ToyImpl>(/*seed=*/r);
  auto ddp = ddp::DistributedDataParallel::Create(replica, &group, {});
  ddp::JoinOptions join_options;
  join_options.throw_on_early_termination = true;
  std::string failure;
  absl::Status finished;
  {
    auto join = ddp->Join(join_options);
    try {
      for (int step = 0; step < (r == 0 ? 1 : 3); ++step) {
        replica->forward(torch::ones({2, 10})).sum().backward();
      }
    } catch (const std::exception& e) {
      failure = e.what();
    }
    finished = join.TryFinish();
  }
  const std::string expected = r == 0 ? "rank(s) 0 ran out of inputs while rank(s) 1 still had some"
                                      : "rank(s) 0 ran out of inputs; stopping every rank";
  if (r == 1 && failure.find(expected) == std::string::npos) {
    return absl::InternalError(absl::StrCat("backward failed with '", failure, "'"));
  }
  if (finished.code() != absl::StatusCode::kFailedPrecondition ||
      finished.message().find(expected) == std::string::npos) {
    return absl::InternalError(absl::StrCat("Finish() returned ", finished.ToString()));
  }
  return GroupStillInStep(group, "the Join");
}

using DdpJoinTest = TwoRankGlooTest;

TESSERA_TWO_RANK_TEST(DdpJoinTest, UnevenInputsTrainLikeOneProcess, RunUneven)
TESSERA_TWO_RANK_TEST(DdpJoinTest, BuffersComeFromTheLastRankTraining, RunBuffers)
TESSERA_TWO_RANK_TEST(DdpJoinTest, ThrowOnEarlyTerminationStopsEveryRank,
                      RunThrowOnEarlyTermination)

}  // namespace
}  // namespace tessera::testing
