#include "ps/ps_client_core.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <map>
#include <type_traits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status.h"
#include "ps/distinct_keys.h"
#include "ps/ps_messages.h"
#include "rpc/internal_service.h"
#include "rpc/value_traits.h"

namespace tessera::ps {

namespace {

// Waits for `future` (a call bounded by its own deadline) within `timeout`.
template <typename T>
absl::StatusOr<T> Await(const Future<T>& future, absl::Duration timeout) {
  return future.Wait(timeout + absl::Seconds(5));
}

// The table(s) a message is about, for its errors.
std::string TablesOf(const std::string& table) { return absl::StrCat("table '", table, "'"); }
std::string TablesOf(const std::vector<std::string>& tables) {
  if (tables.size() == 1) return TablesOf(tables[0]);
  return absl::StrCat("tables '", absl::StrJoin(tables, "', '"), "'");
}
// Whether a message is about one table (`table`) or several (`tables`).
template <typename M, typename = void>
struct AboutOneTable : std::false_type {};
template <typename M>
struct AboutOneTable<M, std::void_t<decltype(std::declval<M>().table)>> : std::true_type {};
template <typename M>
std::string TablesOf(const M& message) {
  if constexpr (AboutOneTable<M>::value) {
    return TablesOf(message.table);
  } else {
    return TablesOf(message.tables);
  }
}

}  // namespace

PsClientCore::PsClientCore(rpc::Runtime& runtime, const PsOptions& options, rpc::CallOptions call,
                           ShardMap map)
    : runtime_(runtime),
      call_(call),
      shards_(map.shards()),
      router_(ShardRouter::Make(runtime, options.job, std::move(map), options.failure_timeout / 20,
                                /*wait_for_lost=*/!options.checkpoint_dir.empty())) {
  MutexLock lock(&mu_);
  for (const TableOptions& table : options.tables) {
    Table& t = tables_[table.name];
    t.options = table;
    t.sequences.assign(shards_, 0);
  }
}

absl::StatusOr<std::shared_ptr<PsClientCore>> PsClientCore::Connect(rpc::Runtime& runtime,
                                                                    PsOptions options,
                                                                    rpc::CallOptions call) {
  TESSERA_ASSIGN_OR_RETURN(
      auto map, ReadShardMap(runtime.store(), options.job, options.tables, options.start_timeout));
  std::shared_ptr<PsClientCore> client(new PsClientCore(runtime, options, call, std::move(map)));
  if (auto ok = client->Hello(); !ok.ok()) return ok;
  return client;
}

template <typename R, typename M>
Future<R> PsClientCore::Send(int64_t shard, const M& message) const {
  const absl::Time deadline = absl::Now() + runtime_.EffectiveTimeout(call_);
  Future<c10::IValue> raw = router_->Call(
      shard, M::kService,
      [message](int64_t epoch) {
        M stamped = message;
        stamped.epoch = epoch;
        return rpc::EncodeMessage(std::move(stamped));
      },
      deadline);
  return raw.Then([tables = TablesOf(message),
                   shard](const absl::StatusOr<c10::IValue>& value) -> absl::StatusOr<R> {
    if (!value.ok()) {
      return absl::Status(value.status().code(),
                          absl::StrCat(tables, " ", value.status().message()));
    }
    if constexpr (std::is_same_v<R, std::monostate>) {
      return std::monostate{};
    } else {
      std::optional<R> typed = rpc::ValueTraits<R>::FromIValue(*value);
      if (!typed.has_value()) {
        return absl::InternalError(absl::StrCat(tables, " shard ", shard, ": answered ",
                                                M::kService, " with ", value->tagKind()));
      }
      return *std::move(typed);
    }
  });
}

absl::Status PsClientCore::Hello() {
  const absl::Duration timeout = runtime_.EffectiveTimeout(call_);
  MutexLock lock(&mu_);
  for (auto& [name, table] : tables_) {
    std::vector<int64_t> starts;
    for (int64_t s = 0; s < shards_; ++s) {
      TESSERA_ASSIGN_OR_RETURN(auto start,
                               Await(Send<int64_t>(s, HelloRequest{name, 0, s}), timeout));
      starts.push_back(start);
    }
    // Where the furthest shard started this trainer: the others follow.
    table.clock = *std::max_element(starts.begin(), starts.end());
    for (int64_t s = 0; s < shards_; ++s) {
      if (starts[s] == table.clock) continue;
      auto moved =
          Await(Send<std::monostate>(s, ClockRequest{{name}, 0, s, {table.clock}}), timeout);
      if (!moved.ok()) return moved.status();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<PsClientCore::Table*> PsClientCore::Find(const std::string& table) {
  auto it = tables_.find(table);
  if (it == tables_.end()) {
    return absl::NotFoundError(absl::StrCat("no parameter-server table '", table, "'"));
  }
  return &it->second;
}

absl::StatusOr<PsClientCore::Split> PsClientCore::SplitKeys(const Table& table,
                                                            const at::Tensor& keys) const {
  if (!keys.defined() || keys.scalar_type() != at::kLong || keys.dim() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "keys of table '", table.options.name, "' must be a 1-D int64 tensor, got ",
        keys.defined() ? absl::StrCat(keys.toString(), " of ", keys.dim(), " dimensions")
                       : "none"));
  }
  Split split;
  Distinct distinct = DistinctKeys(keys);
  split.unique = distinct.keys;
  split.inverse = distinct.inverse;
  TESSERA_ASSIGN_OR_RETURN(auto shard_of, ShardsOfKeys(table.options, shards_, split.unique));
  for (int64_t s = 0; s < shards_; ++s) {
    at::Tensor positions = shard_of.eq(s).nonzero().squeeze(1);
    if (positions.numel() == 0) continue;
    split.shards.push_back(s);
    split.positions.push_back(positions);
    // A shard that holds every key takes them as they are.
    split.keys.push_back(positions.numel() == split.unique.numel()
                             ? split.unique
                             : split.unique.index_select(0, positions));
  }
  return split;
}

Future<at::Tensor> PsClientCore::Pull(const std::string& table, const at::Tensor& keys) {
  return Pull(std::vector<TableKeys>{{table, keys, {}}})
      .Then([](const absl::StatusOr<std::vector<at::Tensor>>& rows) -> absl::StatusOr<at::Tensor> {
        if (!rows.ok()) return rows.status();
        return (*rows)[0];
      });
}

Future<std::monostate> PsClientCore::Push(const std::string& table, const at::Tensor& keys,
                                          const at::Tensor& grads) {
  return Push(std::vector<TableKeys>{{table, keys, grads}});
}

absl::StatusOr<at::Tensor> PsClientCore::Assemble(const std::string& table, const Split& split,
                                                  std::vector<at::Tensor> answers, int64_t dim) {
  for (size_t i = 0; i < answers.size(); ++i) {
    const at::Tensor& part = answers[i];
    if (!part.defined() || part.dim() != 2 || part.size(0) != split.keys[i].numel() ||
        part.size(1) != dim) {
      return absl::InternalError(
          absl::StrCat("table '", table, "' shard ", split.shards[i], " answered rows of shape ",
                       part.defined() ? c10::str(part.sizes()) : std::string("none")));
    }
  }
  // One shard held every key: its rows are in the distinct keys' order.
  at::Tensor rows;
  if (answers.size() == 1) {
    rows = answers[0];
  } else {
    rows = at::empty({split.unique.numel(), dim}, at::TensorOptions().dtype(at::kFloat));
    for (size_t i = 0; i < answers.size(); ++i) rows.index_copy_(0, split.positions[i], answers[i]);
  }
  // Every key distinct: the distinct keys are the keys asked, in order.
  return split.unique.numel() == split.inverse.numel() ? rows : rows.index_select(0, split.inverse);
}

namespace {

// Where each part of a message of several tables came from: the call's
// part, and the piece of that part's split.
struct Piece {
  size_t part = 0, piece = 0;
};

// The message to `shard` of a call of several tables, made on first use
// (its epoch is the router's, when it is sent).
template <typename M>
M& MessageFor(std::map<int64_t, M>& messages, int64_t shard) {
  M& m = messages[shard];
  m.shard = shard;
  return m;
}

}  // namespace

Future<std::vector<at::Tensor>> PsClientCore::Pull(const std::vector<TableKeys>& parts) {
  using Rows = std::vector<at::Tensor>;
  struct Plan {
    std::string table;
    Split split;
    int64_t dim = 0;
  };
  std::vector<Plan> plans;
  std::map<int64_t, PullRequest> messages;
  std::map<int64_t, std::vector<Piece>> pieces;  // by shard, in its message's order
  {
    MutexLock lock(&mu_);
    for (size_t p = 0; p < parts.size(); ++p) {
      auto t = Find(parts[p].table);
      if (!t.ok()) return Future<Rows>::Ready(t.status());
      auto split = SplitKeys(**t, parts[p].keys);
      if (!split.ok()) return Future<Rows>::Ready(split.status());
      for (size_t i = 0; i < split->shards.size(); ++i) {
        const int64_t s = split->shards[i];
        PullRequest& m = MessageFor(messages, s);
        m.tables.push_back(parts[p].table);
        m.clocks.push_back((*t)->clock);
        m.keys.push_back(split->keys[i]);
        pieces[s].push_back({p, i});
      }
      plans.push_back({parts[p].table, *std::move(split), (*t)->options.dim});
    }
  }
  std::vector<int64_t> shards;
  std::vector<Future<Rows>> answers;
  for (const auto& [shard, message] : messages) {
    shards.push_back(shard);
    answers.push_back(Send<Rows>(shard, message));
  }
  return WhenAllOk(answers).Then([answers, shards, plans = std::move(plans),
                                  pieces = std::move(pieces)](
                                     const absl::StatusOr<bool>& all) -> absl::StatusOr<Rows> {
    if (!all.ok()) return all.status();
    std::vector<Rows> by_part(plans.size());
    for (size_t p = 0; p < plans.size(); ++p) by_part[p].resize(plans[p].split.shards.size());
    for (size_t k = 0; k < answers.size(); ++k) {
      Rows answer = *answers[k].Wait(absl::ZeroDuration());
      const std::vector<Piece>& asked = pieces.at(shards[k]);
      if (answer.size() != asked.size()) {
        return absl::InternalError(absl::StrCat("parameter-server shard ", shards[k], " answered ",
                                                answer.size(), " tables of ", asked.size()));
      }
      for (size_t j = 0; j < asked.size(); ++j) {
        by_part[asked[j].part][asked[j].piece] = std::move(answer[j]);
      }
    }
    Rows rows;
    for (size_t p = 0; p < plans.size(); ++p) {
      auto assembled =
          Assemble(plans[p].table, plans[p].split, std::move(by_part[p]), plans[p].dim);
      if (!assembled.ok()) return assembled.status();
      rows.push_back(*std::move(assembled));
    }
    return rows;
  });
}

Future<std::monostate> PsClientCore::Push(const std::vector<TableKeys>& parts) {
  std::map<int64_t, PushRequest> messages;
  {
    MutexLock lock(&mu_);
    // Every part is checked before any sequence is taken.
    std::vector<std::pair<Table*, Split>> plans;
    for (const TableKeys& part : parts) {
      auto t = Find(part.table);
      if (!t.ok()) return Future<std::monostate>::Ready(t.status());
      auto split = SplitKeys(**t, part.keys);
      if (!split.ok()) return Future<std::monostate>::Ready(split.status());
      const int64_t dim = (*t)->options.dim, n = part.keys.numel();
      if (!part.grads.defined() || part.grads.scalar_type() != at::kFloat ||
          part.grads.dim() != 2 || part.grads.size(0) != n || part.grads.size(1) != dim) {
        return Future<std::monostate>::Ready(absl::InvalidArgumentError(
            absl::StrCat("a push to table '", part.table, "' of ", n,
                         " keys needs float gradients of shape [", n, ", ", dim, "]")));
      }
      plans.emplace_back(*t, *std::move(split));
    }
    for (size_t p = 0; p < parts.size(); ++p) {
      auto& [table, split] = plans[p];
      // A repeated key's gradients, summed: one row per distinct key.
      at::Tensor summed = parts[p].grads;
      if (split.unique.numel() != parts[p].keys.numel()) {
        summed = at::zeros({split.unique.numel(), table->options.dim}, summed.options());
        summed.index_add_(0, split.inverse, parts[p].grads);
      }
      for (size_t i = 0; i < split.shards.size(); ++i) {
        const int64_t s = split.shards[i];
        PushRequest& m = MessageFor(messages, s);
        m.tables.push_back(parts[p].table);
        m.sequences.push_back(table->sequences[s]++);
        m.clocks.push_back(table->clock);
        m.keys.push_back(split.keys[i]);
        m.grads.push_back(split.shards.size() == 1 ? summed
                                                   : summed.index_select(0, split.positions[i]));
      }
    }
  }
  std::vector<Future<std::monostate>> sent;
  for (const auto& [shard, message] : messages)
    sent.push_back(Send<std::monostate>(shard, message));
  Future<std::monostate> pushed =
      WhenAllOk(sent).Then([](const absl::StatusOr<bool>& all) -> absl::StatusOr<std::monostate> {
        if (!all.ok()) return all.status();
        return std::monostate{};
      });
  MutexLock lock(&mu_);
  pushes_in_flight_.push_back(pushed);
  return pushed;
}

Future<at::Tensor> PsClientCore::PushPull(const std::string& table, const at::Tensor& keys,
                                          const at::Tensor& grads) {
  return Push(table, keys, grads)
      .Then([self = shared_from_this(), table, keys](const absl::StatusOr<std::monostate>& pushed) {
        if (!pushed.ok()) return Future<at::Tensor>::Ready(pushed.status());
        return self->Pull(table, keys);
      });
}

Future<std::monostate> PsClientCore::Clock() {
  std::vector<std::pair<int64_t, ClockRequest>> messages;
  std::vector<Future<std::monostate>> pushes;
  {
    MutexLock lock(&mu_);
    ClockRequest every{{}, 0, 0, {}};
    for (auto& [name, table] : tables_) {
      ++table.clock;
      // An asynchronous table's pulls wait for no clock, but its
      // checkpoints' cuts do (see Note [Sharded checkpoints]).
      every.tables.push_back(name);
      every.clocks.push_back(table.clock);
    }
    // One message per shard, for every table.
    for (int64_t s = 0; !every.tables.empty() && s < shards_; ++s) {
      every.shard = s;
      messages.emplace_back(s, every);
    }
    pushes.swap(pushes_in_flight_);
  }
  // The clock ends after this step's pushes were taken: a shard must not
  // apply a synchronous clock without a push still on its way.
  return WhenAllOk(pushes).Then(
      [self = shared_from_this(), messages](const absl::StatusOr<bool>& pushed) {
        if (!pushed.ok()) return Future<std::monostate>::Ready(pushed.status());
        std::vector<Future<std::monostate>> parts;
        for (const auto& [shard, message] : messages) {
          parts.push_back(self->Send<std::monostate>(shard, message));
        }
        return WhenAllOk(parts).Then(
            [](const absl::StatusOr<bool>& all) -> absl::StatusOr<std::monostate> {
              if (!all.ok()) return all.status();
              return std::monostate{};
            });
      });
}

Future<int64_t> PsClientCore::Checkpoint(absl::Duration within) {
  const absl::Time deadline = absl::Now() + within;
  std::vector<std::string> tables;
  int64_t clock = 0;
  {
    MutexLock lock(&mu_);
    // After this trainer's current clock: it may have pushed in it.
    for (const auto& [name, table] : tables_) {
      tables.push_back(name);
      clock = std::max(clock, table.clock + 1);
    }
  }
  return AgreeOnCut(tables, clock, 0)
      .Then([self = shared_from_this(), tables, deadline](const absl::StatusOr<int64_t>& cut) {
        if (!cut.ok()) return Future<int64_t>::Ready(cut.status());
        return self->AwaitSaved(tables, *cut, deadline)
            .Then([self, deadline](const absl::StatusOr<int64_t>& saved) {
              // A shard lost the agreed cut with every replica (Shard::
              // Saved): the checkpoint is asked anew, at the clocks the
              // trainers are at now.
              if (saved.status().code() == absl::StatusCode::kFailedPrecondition &&
                  absl::Now() < deadline) {
                TESSERA_LOG(WARNING)
                    << "parameter-server checkpoint asked again: " << saved.status().message();
                return self->Checkpoint(deadline - absl::Now());
              }
              return Future<int64_t>::Ready(saved);
            });
      });
}

Future<int64_t> PsClientCore::AgreeOnCut(std::vector<std::string> tables, int64_t clock,
                                         int round) const {
  // Each round moves the cut past pushes of trainers running ahead; they
  // cannot outrun it for long.
  constexpr int kRounds = 8;
  std::vector<Future<std::vector<int64_t>>> parts;
  for (int64_t s = 0; s < shards_; ++s) {
    parts.push_back(Send<std::vector<int64_t>>(s, CutRequest{tables, 0, s, clock}));
  }
  return WhenAllOk(parts).Then([self = shared_from_this(), parts, tables, clock,
                                round](const absl::StatusOr<bool>& all) -> Future<int64_t> {
    if (!all.ok()) return Future<int64_t>::Ready(all.status());
    int64_t latest = clock;
    for (const auto& part : parts) {
      const absl::StatusOr<std::vector<int64_t>> agreed = part.Wait(absl::ZeroDuration());
      for (int64_t at : *agreed) latest = std::max(latest, at);
    }
    if (latest == clock) return Future<int64_t>::Ready(clock);
    if (round + 1 == kRounds) {
      return Future<int64_t>::Ready(absl::AbortedError(absl::StrCat(
          "parameter-server checkpoint: the shards did not agree on a clock to cut at in ", kRounds,
          " rounds (the last asked ", clock, ", a shard answered ", latest, ")")));
    }
    // A margin growing each round: trainers that outran the cut while
    // the round travelled (a loaded machine) cannot outrun it again.
    return self->AgreeOnCut(tables, latest + round, round + 1);
  });
}

Future<int64_t> PsClientCore::AwaitSaved(std::vector<std::string> tables, int64_t clock,
                                         absl::Time deadline) const {
  std::vector<Future<std::monostate>> parts;
  for (int64_t s = 0; s < shards_; ++s) {
    parts.push_back(Send<std::monostate>(s, SavedRequest{tables, 0, s, clock}));
  }
  return WhenAllOk(parts).Then([self = shared_from_this(), tables, clock,
                                deadline](const absl::StatusOr<bool>& all) -> Future<int64_t> {
    if (all.ok()) return Future<int64_t>::Ready(clock);
    // A cut waits for the slowest trainer: time, not failure, until the deadline.
    if (all.status().code() == absl::StatusCode::kDeadlineExceeded && absl::Now() < deadline) {
      return self->AwaitSaved(tables, clock, deadline);
    }
    return Future<int64_t>::Ready(
        absl::Status(all.status().code(), absl::StrCat("parameter-server checkpoint at clock ",
                                                       clock, ": ", all.status().message())));
  });
}

int64_t PsClientCore::clock(const std::string& table) const {
  MutexLock lock(&mu_);
  auto it = tables_.find(table);
  return it == tables_.end() ? -1 : it->second.clock;
}

Future<std::vector<std::vector<int64_t>>> PsClientCore::Stats(const std::string& table) {
  std::vector<Future<std::vector<int64_t>>> parts;
  for (int64_t s = 0; s < shards_; ++s) {
    parts.push_back(Send<std::vector<int64_t>>(s, StatsRequest{table, 0, s}));
  }
  return WhenAllOk(parts).Then([parts](const absl::StatusOr<bool>& all)
                                   -> absl::StatusOr<std::vector<std::vector<int64_t>>> {
    if (!all.ok()) return all.status();
    std::vector<std::vector<int64_t>> stats;
    for (const auto& part : parts) stats.push_back(*part.Wait(absl::ZeroDuration()));
    return stats;
  });
}

}  // namespace tessera::ps
