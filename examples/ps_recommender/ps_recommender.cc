// A recommender in DLRM's shape on sharded parameter servers (ps/): sparse
// embedding tables, one per categorical field, and the MLPs' weights live on
// the servers; trainers compute. Ranks 0..S-1 are the servers ps0.., the
// others trainers. A trainer step: pull the rows its batch touches (each id
// once) and the MLPs' weights, forward and backward here, push the
// gradients (the servers apply row-wise Adagrad), end its clock — each of
// the three one message per server, for all the tables.
//
// The click data (click_data.h) come from a hidden model, so the best AUC is
// known: every trainer prints the trained model's test AUC beside it.
// --consistency chooses the tables' (see Note [Parameter-server consistency],
// ps/shard.h). --servers 0 trains the same model in this one process, with
// the same row optimizers and no servers: the baseline of the distributed
// job's samples/s.
//
//   tessera-run --standalone --nproc_per_node 4 ps_recommender --servers 2 --consistency bounded
//   ps_recommender --servers 0
// A server added to the running job, say on a machine in a lost one's place:
//   tessera-run --join --master_addr H --master_port P ps_recommender --servers 2 --join_as_server
// `ps_recommender --help` lists the flags.
#include <ATen/Parallel.h>
#include <ATen/ops/_unique2.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/binary_cross_entropy_with_logits.h>
#include <ATen/ops/sigmoid.h>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "examples/common/training.h"
#include "examples/ps_recommender/click_data.h"
#include "examples/ps_recommender/dlrm.h"
#include "examples/ps_recommender/model_tables.h"
#include "examples/ps_recommender/push_audit.h"
#include "ps/dense_parameters.h"
#include "ps/ps_client.h"
#include "ps/ps_server.h"
#include "ps/replica_check.h"
#include "ps/shard_map.h"
#include "tessera/worker.h"

ABSL_FLAG(int, servers, 2,
          "how many of the ranks are parameter servers (the first ones); 0: train in this one "
          "process, with no servers");
ABSL_FLAG(std::string, consistency, "bounded",
          "the tables' consistency: sync (every trainer's step averaged and applied once), "
          "bounded (a pull waits for trainers more than --staleness clocks behind), async");
ABSL_FLAG(int64_t, staleness, 2, "τ of --consistency bounded");
ABSL_FLAG(int64_t, samples, 400000, "training samples (all trainers together)");
ABSL_FLAG(int64_t, test_samples, 50000, "test samples");
// The data's defaults are ClickDataOptions', the model's DlrmShape's.
ABSL_FLAG(int64_t, fields, tessera::examples::ClickDataOptions{}.fields,
          "categorical fields, an embedding table each");
ABSL_FLAG(int64_t, vocabulary, tessera::examples::ClickDataOptions{}.vocabulary, "ids per field");
ABSL_FLAG(double, zipf, tessera::examples::ClickDataOptions{}.zipf, "the ids' Zipf exponent");
ABSL_FLAG(int64_t, dim, tessera::examples::DlrmShape{}.dim, "an embedding's width");
ABSL_FLAG(int, threads, 1, "compute threads of each process");
ABSL_FLAG(int, backups, tessera::ps::PsOptions{}.backups,
          "backups of every shard, on other servers (0: no replication)");
ABSL_FLAG(
    int, slow_trainer, -1,
    "a trainer (0-based) that runs --slowdown times slower, as on a slower machine; -1: none");
ABSL_FLAG(double, slowdown, 2, "how much slower --slow_trainer computes");
ABSL_FLAG(double, stall_probability, 0,
          "every trainer stalls at a step with this probability, as a shared machine does now and "
          "then, for --stall_length times its compute");
ABSL_FLAG(double, stall_length, 10, "how long a stall lasts, in multiples of the step's compute");
ABSL_FLAG(double, target_loss, 0,
          "print when a trainer's smoothed training loss first falls below this; 0: never");
ABSL_FLAG(bool, audit, false,
          "count every push in a table of its own; after training, print what each trainer "
          "pushed, what the servers counted, and whether every shard's replicas agree (for tests "
          "and small jobs: trainer 0 pulls the whole counting table, fields x vocabulary rows)");
ABSL_FLAG(bool, join_as_server, false,
          "this worker enters a running job (tessera-run --join) as a parameter server added to "
          "it, say in a lost machine's place (ps::PsServer::Join): it copies every shard short of "
          "a backup while training goes on, and takes over a shard whose primary dies");

namespace tessera::examples {
namespace {

constexpr absl::Duration kTimeout = absl::Minutes(5);
// The parameter-server job's name (ps::PsOptions::job).
constexpr char kJob[] = "dlrm";
// A table every trainer pulls once after training: synchronous, so the pull
// waits until every trainer has ended its last step (a barrier), and every
// trainer then evaluates the same final model.
constexpr char kBarrierTable[] = "trained";

ps::Consistency ConsistencyFromFlags() {
  const std::string mode = absl::GetFlag(FLAGS_consistency);
  if (mode == "sync") return ps::Consistency::Synchronous();
  if (mode == "async") return ps::Consistency::Asynchronous();
  Require(mode == "bounded", "--consistency must be sync, bounded or async");
  Require(absl::GetFlag(FLAGS_staleness) >= 0, "--staleness must be >= 0");
  return ps::Consistency::Bounded(absl::GetFlag(FLAGS_staleness));
}

std::string FieldTable(int64_t field) { return absl::StrCat("field", field); }

// The model's tables: an embedding table per field (rows made on first
// touch, small uniform values), the MLPs' weights as dense tables; all
// stepped by row-wise Adagrad.
std::vector<ps::TableOptions> DlrmTables(const DlrmShape& shape, double lr,
                                         ps::Consistency consistency) {
  std::vector<ps::TableOptions> tables;
  for (int64_t f = 0; f < shape.fields; ++f) {
    ps::TableOptions table = ps::TableOptions::Sparse(FieldTable(f), shape.dim);
    table.init = ps::Initializer::Uniform(-0.05, 0.05, /*seed=*/100 + f);
    tables.push_back(table);
  }
  uint64_t seed = 1;
  for (const DenseParameter& p : DlrmDenseParameters(shape)) {
    tables.push_back(ps::DenseTableFor(p.name, p.shape, p.fan_in_shape, seed++));
  }
  for (ps::TableOptions& table : tables) {
    table.optimizer = ps::OptimizerOptions::Adagrad(lr);
    table.consistency = consistency;
  }
  ps::TableOptions barrier = ps::TableOptions::Dense(kBarrierTable, 1, 1);
  barrier.consistency = ps::Consistency::Synchronous();
  tables.push_back(barrier);
  return tables;
}

// A trainer: its share of the data, the model's parameters as pulled, and
// where its time went.
class Trainer {
 public:
  Trainer(const DlrmShape& shape, std::vector<ps::TableOptions> tables,
          std::unique_ptr<ModelTables> model, std::optional<PushAudit> audit)
      : shape_(shape), model_(std::move(model)), audit_(std::move(audit)) {
    for (const DenseParameter& p : DlrmDenseParameters(shape)) {
      params_.push_back(at::zeros(p.shape, at::kFloat).requires_grad_());
    }
    for (ps::TableOptions& table : tables) {
      if (table.kind == ps::TableKind::kDense && table.name != kBarrierTable) {
        dense_tables_.push_back(table);
      }
    }
  }

  // One step on a batch: returns its loss.
  // `slowdown`: this step's compute is made that many times as long.
  double Step(const at::Tensor& ids, const at::Tensor& dense, const at::Tensor& clicks,
              double slowdown) {
    const auto pull_start = std::chrono::steady_clock::now();
    std::vector<at::Tensor> unique, inverse, rows;
    Pull(ids, unique, inverse, rows);
    waited_ += SecondsSince(pull_start);
    const auto compute_start = std::chrono::steady_clock::now();
    std::vector<at::Tensor> embeddings;
    for (size_t f = 0; f < rows.size(); ++f) {
      rows[f].requires_grad_();
      embeddings.push_back(rows[f].index_select(0, inverse[f]));
    }
    const at::Tensor loss = at::binary_cross_entropy_with_logits(
        DlrmForward(shape_, params_, dense, embeddings), clicks);
    std::vector<at::Tensor> inputs = rows;
    inputs.insert(inputs.end(), params_.begin(), params_.end());
    const std::vector<at::Tensor> grads = torch::autograd::grad({loss}, inputs);
    if (slowdown > 1) {
      std::this_thread::sleep_for((slowdown - 1) *
                                  (std::chrono::steady_clock::now() - compute_start));
    }
    std::vector<ps::TableKeys> pushes;
    for (size_t f = 0; f < rows.size(); ++f) {
      pushes.push_back({FieldTable(static_cast<int64_t>(f)), unique[f], grads[f]});
    }
    if (audit_) pushes.push_back(audit_->Count(unique));
    for (size_t i = 0; i < dense_tables_.size(); ++i) {
      const ps::TableOptions& t = dense_tables_[i];
      pushes.push_back({t.name, DenseKeys(t), ps::ToRows(grads[rows.size() + i], t)});
    }
    model_->Push(pushes).Get(kTimeout);
    model_->Clock().Get(kTimeout);
    return loss.item<double>();
  }

  // Asks for a checkpoint of every table, waiting for none: says so when
  // an earlier one was written (or failed), as later ones are asked. One
  // still being written is not asked again over (nor dropped unreported).
  void Checkpoint(const std::string& who) {
    ReportCheckpoint(who, absl::ZeroDuration());
    if (!checkpoint_.has_value()) checkpoint_ = model_->Checkpoint();
  }
  // Says whether the last checkpoint asked was written, waiting up to `wait`.
  void ReportCheckpoint(const std::string& who, absl::Duration wait) {
    if (!checkpoint_.has_value() || (wait == absl::ZeroDuration() && !checkpoint_->IsReady())) {
      return;
    }
    auto clock = checkpoint_->Wait(wait);
    checkpoint_.reset();
    if (clock.ok()) {
      std::printf("[%s] checkpoint at clock %lld written\n", who.c_str(),
                  static_cast<long long>(*clock));
    } else {
      std::printf("[%s] checkpoint failed: %s\n", who.c_str(), clock.status().ToString().c_str());
    }
  }
  int64_t StartClock() const { return model_->StartClock(); }

  // Waits until every trainer has ended its last step (kBarrierTable).
  void WaitForTheOthers() { model_->Pull({{kBarrierTable, DenseKeys(1), {}}}).Get(kTimeout); }

  // --audit, once every trainer ended its last step: what this trainer
  // pushed; with `counted`, what the servers hold too.
  void PrintAudit(const std::string& who, bool counted) {
    if (!audit_) return;
    audit_->PrintPushed(who);
    if (counted) audit_->PrintCounted(who, *model_);
  }

  // Click probabilities for `ids`, `dense` under the servers' current model.
  at::Tensor Predict(const at::Tensor& ids, const at::Tensor& dense) {
    std::vector<at::Tensor> unique, inverse, rows;
    Pull(ids, unique, inverse, rows);
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> embeddings;
    for (size_t f = 0; f < rows.size(); ++f)
      embeddings.push_back(rows[f].index_select(0, inverse[f]));
    return at::sigmoid(DlrmForward(shape_, params_, dense, embeddings));
  }

  // Seconds spent pulling: waiting for the servers' answers (and for
  // other trainers, as the consistency requires).
  double waited() const { return waited_; }
  // The embedding ids pulled for, all fields together: as the batches had
  // them, and distinct per pull (the rows that travel).
  int64_t ids() const { return ids_; }
  int64_t distinct() const { return distinct_; }

 private:
  static at::Tensor DenseKeys(int64_t rows) { return at::arange(rows, at::kLong); }
  static at::Tensor DenseKeys(const ps::TableOptions& t) { return DenseKeys(t.rows); }

  // Pulls, in one call, the rows of each field's distinct ids (`rows`[f],
  // rows[f][inverse[f]] being the batch's embeddings) and the MLPs' weights.
  void Pull(const at::Tensor& ids, std::vector<at::Tensor>& unique,
            std::vector<at::Tensor>& inverse, std::vector<at::Tensor>& rows) {
    std::vector<ps::TableKeys> pulls;
    for (int64_t f = 0; f < shape_.fields; ++f) {
      auto [u, inv, counts] =
          at::_unique2(ids.select(1, f), /*sorted=*/false, /*return_inverse=*/true);
      ids_ += inv.numel();
      distinct_ += u.numel();
      unique.push_back(u);
      inverse.push_back(inv);
      pulls.push_back({FieldTable(f), u, {}});
    }
    for (const ps::TableOptions& t : dense_tables_) pulls.push_back({t.name, DenseKeys(t), {}});
    std::vector<at::Tensor> pulled = model_->Pull(pulls).Get(kTimeout);
    rows.assign(pulled.begin(), pulled.begin() + shape_.fields);
    for (size_t i = 0; i < params_.size(); ++i) {
      ps::CopyFromRows(pulled[static_cast<size_t>(shape_.fields) + i], params_[i]);
    }
  }

  const DlrmShape shape_;
  std::unique_ptr<ModelTables> model_;
  std::optional<PushAudit> audit_;
  std::vector<ps::TableOptions> dense_tables_;
  std::vector<at::Tensor> params_;
  std::optional<Future<int64_t>> checkpoint_;  // asked, not yet reported
  double waited_ = 0;
  int64_t ids_ = 0, distinct_ = 0;
};

// Trains trainer `index` of `trainers` on its share of the data; evaluates.
void Train(const TrainingFlags& flags, const std::string& who, int index, int trainers,
           const DlrmShape& shape, std::vector<ps::TableOptions> tables,
           std::unique_ptr<ModelTables> model) {
  ClickDataOptions data_options;
  data_options.samples = absl::GetFlag(FLAGS_samples);
  data_options.fields = shape.fields;
  data_options.vocabulary = absl::GetFlag(FLAGS_vocabulary);
  data_options.zipf = absl::GetFlag(FLAGS_zipf);
  data_options.dense = shape.dense;
  const ClickData train = GenerateClicks(data_options);
  data_options.samples = absl::GetFlag(FLAGS_test_samples);
  data_options.seed += 1000;
  const ClickData test = GenerateClicks(data_options);
  // This trainer's share: every trainers-th sample. Every trainer takes as
  // many steps, so that the synchronous and bounded clocks end together.
  const int64_t per_epoch =
      data_options.samples > 0 ? train.clicks.size(0) / (trainers * flags.batch) : 0;
  const int64_t steps = flags.max_steps > 0 ? std::min(flags.max_steps, per_epoch) : per_epoch;
  Require(steps > 0, "--samples must give every trainer at least one batch");
  Require(absl::GetFlag(FLAGS_stall_probability) >= 0 &&
              absl::GetFlag(FLAGS_stall_probability) <= 1 &&
              absl::GetFlag(FLAGS_stall_length) >= 0 && absl::GetFlag(FLAGS_slowdown) >= 1,
          "--stall_probability must be in [0, 1], --stall_length >= 0 and --slowdown >= 1");
  const at::Tensor ids = train.ids.slice(0, index, train.ids.size(0), trainers);
  const at::Tensor dense = train.dense.slice(0, index, train.dense.size(0), trainers);
  const at::Tensor clicks = train.clicks.slice(0, index, train.clicks.size(0), trainers);
  const double slowdown =
      absl::GetFlag(FLAGS_slow_trainer) == index ? absl::GetFlag(FLAGS_slowdown) : 1.0;
  std::mt19937 stall_random(static_cast<unsigned>(index + 1));
  std::bernoulli_distribution stalls(absl::GetFlag(FLAGS_stall_probability));
  const double stall_length = absl::GetFlag(FLAGS_stall_length);
  const double target = absl::GetFlag(FLAGS_target_loss);

  Trainer trainer(shape, std::move(tables), std::move(model),
                  absl::GetFlag(FLAGS_audit) ? std::optional<PushAudit>(std::in_place, shape.fields,
                                                                        data_options.vocabulary)
                                             : std::nullopt);
  // A job started anew from a checkpoint at clock c: steps 1..c are done
  // (a clock is a step, counted over the epochs).
  const int64_t done = trainer.StartClock();
  if (done > 0) {
    std::printf("[%s] resumes after step %lld (the checkpoint's clock)\n", who.c_str(),
                static_cast<long long>(done));
  }
  // With --checkpoint_dir, the servers' (ps::PsOptions::checkpoint_dir).
  const int64_t checkpoint_every =
      index == 0 && !flags.checkpoint_dir.empty() ? flags.checkpoint_every : 0;
  const auto start = std::chrono::steady_clock::now();
  double smoothed = -1;
  bool reached = false;
  for (int epoch = 1; epoch <= flags.epochs; ++epoch) {
    for (int64_t step = 1; step <= steps; ++step) {
      const int64_t clock = (epoch - 1) * steps + step;
      if (clock <= done) continue;
      if (checkpoint_every > 0 && (clock - 1) % checkpoint_every == 0 && clock > 1) {
        trainer.Checkpoint(who);  // at this clock: once every trainer ended the one before
      }
      const int64_t first = (step - 1) * flags.batch;
      const double loss =
          trainer.Step(ids.narrow(0, first, flags.batch), dense.narrow(0, first, flags.batch),
                       clicks.narrow(0, first, flags.batch),
                       slowdown * (stalls(stall_random) ? 1 + stall_length : 1));
      smoothed = smoothed < 0 ? loss : 0.98 * smoothed + 0.02 * loss;
      if (target > 0 && !reached && smoothed < target) {
        reached = true;
        std::printf("[%s] smoothed loss below %.4f at epoch %d step %lld, %.2f s\n", who.c_str(),
                    target, epoch, static_cast<long long>(step), SecondsSince(start));
      }
      if (step % flags.log_every == 0 || step == steps) {
        std::printf("[%s] epoch %d step %lld/%lld: loss %.4f\n", who.c_str(), epoch,
                    static_cast<long long>(step), static_cast<long long>(steps), smoothed);
      }
    }
  }
  trainer.ReportCheckpoint(who, kTimeout);
  const double seconds = SecondsSince(start);
  const int64_t trained = (flags.epochs * steps - done) * flags.batch;
  std::printf("[%s] trained %lld samples in %.2f s: %.0f samples/s, %.1f%% of it pulling\n",
              who.c_str(), static_cast<long long>(trained), seconds, trained / seconds,
              100 * trainer.waited() / seconds);
  const double pulls = static_cast<double>(flags.epochs * steps - done);
  std::printf("[%s] embedding ids a step: %.1f, distinct %.1f (the rows pulled and pushed)\n",
              who.c_str(), trainer.ids() / pulls, trainer.distinct() / pulls);
  trainer.WaitForTheOthers();
  trainer.PrintAudit(who, /*counted=*/index == 0);
  const at::Tensor predicted = trainer.Predict(test.ids, test.dense);
  const double logloss =
      at::binary_cross_entropy(predicted.clamp(1e-7, 1 - 1e-7), test.clicks).item<double>();
  std::printf("[%s] test AUC %.4f (ground truth %.4f), log loss %.4f (ground truth %.4f)\n",
              who.c_str(), Auc(predicted, test.clicks), Auc(test.truth, test.clicks), logloss,
              at::binary_cross_entropy(test.truth, test.clicks).item<double>());
}

// --audit, by the first trainer once training ended: whether every replica
// of every shard holds the same (ps::CompareReplicas).
void PrintReplicasAgree(Worker& worker, const std::vector<ps::TableOptions>& tables) {
  std::vector<std::string> names;
  for (const ps::TableOptions& table : tables) names.push_back(table.name);
  const absl::Status agree = ps::CompareReplicas(worker.rpc(), kJob, names, kTimeout);
  if (agree.ok()) {
    std::string where;  // which servers hold each shard now
    if (auto map = ps::CurrentShardMap(worker.rpc().store(), kJob); map.ok()) {
      for (int64_t s = 0; s < map->shards(); ++s) {
        absl::StrAppend(&where, s == 0 ? " (" : "; ", "shard ", s, " on ",
                        absl::StrJoin(map->replicas[s], ", "), s + 1 == map->shards() ? ")" : "");
      }
    }
    std::printf("[%s] audit: every replica of every shard of the %zu tables agrees%s\n",
                worker.name().c_str(), names.size(), where.c_str());
  } else {
    std::printf("[%s] audit: %s\n", worker.name().c_str(), agree.ToString().c_str());
  }
}

int Run(const TrainingFlags& flags) {
  at::set_num_threads(absl::GetFlag(FLAGS_threads));
  DlrmShape shape;
  shape.fields = absl::GetFlag(FLAGS_fields);
  shape.dense = ClickDataOptions{}.dense;
  shape.dim = absl::GetFlag(FLAGS_dim);
  Require(shape.fields >= 1 && shape.dim >= 1 && absl::GetFlag(FLAGS_vocabulary) >= 1,
          "--fields, --dim and --vocabulary must be >= 1");
  std::vector<ps::TableOptions> tables = DlrmTables(shape, flags.lr, ConsistencyFromFlags());
  if (absl::GetFlag(FLAGS_audit)) tables.push_back(PushAudit::Table());
  const int servers = absl::GetFlag(FLAGS_servers);
  Require(flags.checkpoint_dir.empty() || servers > 0,
          "--checkpoint_dir is the parameter servers' (--servers > 0)");
  if (servers == 0) {
    Train(flags, "one process", 0, 1, shape, tables, LocalTables(tables));
    return 0;
  }
  WorkerOptions options = WorkerOptions::FromEnv();
  Require(servers >= 1 && servers < options.world_size,
          "--servers must leave at least one trainer (0 <= servers < world size)");
  const bool added = absl::GetFlag(FLAGS_join_as_server);
  const bool server = added || options.rank < servers;
  const int trainers = options.world_size - servers;
  options.name =
      server ? absl::StrCat("ps", options.rank) : absl::StrCat("trainer", options.rank - servers);
  // tessera-run --elastic_roles server lets the job run on without a server
  // that failed: its shards' backups take over.
  if (server) options.role = "server";
  auto worker = Worker::Start(options);
  ps::PsOptions ps_options;
  ps_options.job = kJob;
  for (int s = 0; s < servers; ++s) ps_options.servers.push_back(absl::StrCat("ps", s));
  ps_options.tables = tables;
  ps_options.backups = absl::GetFlag(FLAGS_backups);
  ps_options.checkpoint_dir = flags.checkpoint_dir;
  if (added) {
    auto shards = ValueOrThrow(ps::PsServer::Join(worker->rpc(), ps_options));
    std::printf("[%s] added to the job's parameter servers\n", worker->name().c_str());
    worker->Shutdown();
    return 0;
  }
  if (server) {
    auto shards = ValueOrThrow(ps::PsServer::Start(worker->rpc(), ps_options));
    std::printf("[%s] serving its shard of %zu tables to %d trainers\n", worker->name().c_str(),
                tables.size(), trainers);
    worker->Shutdown();
    return 0;
  }
  auto client = ValueOrThrow(ps::PsClient::Connect(worker->rpc(), ps_options));
  Train(flags, worker->name(), options.rank - servers, trainers, shape, tables,
        RemoteTables(std::move(client), kBarrierTable));
  if (absl::GetFlag(FLAGS_audit) && options.rank == servers) PrintReplicasAgree(*worker, tables);
  worker->Shutdown();
  return 0;
}

}  // namespace
}  // namespace tessera::examples

int main(int argc, char** argv) {
  tessera::examples::SetDefaultLearningRate(0.05);
  // One pass: the rare ids' rows overfit on a second.
  tessera::examples::SetDefaultEpochsAndBatch(1, 256);
  return tessera::examples::RunExample(
      argc, argv,
      "A recommender in DLRM's shape on sharded parameter servers: the first --servers ranks hold "
      "the embedding tables and the MLPs' weights, the others train.\n  tessera-run --standalone "
      "--nproc_per_node 4 ps_recommender --servers 2 --consistency bounded\n  ps_recommender "
      "--servers 0   (one process, no servers)",
      tessera::examples::Run);
}
