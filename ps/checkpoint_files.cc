#include "ps/checkpoint_files.h"

#include <ATen/ops/eq.h>
#include <ATen/ops/nonzero.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "common/status.h"
#include "ps/shard_map.h"

namespace tessera::ps {

namespace {

namespace fs = std::filesystem;

std::string ClockDir(const std::string& dir, int64_t clock) {
  return absl::StrCat(dir, "/clock-", clock);
}

std::string FileName(const std::string& table, int64_t shard, int64_t shards) {
  return absl::StrCat(table, ".", shard, "-of-", shards);
}

// The layout field of a file: what it is of, checked on reading.
enum Layout : int64_t { kClock, kShard, kShards, kDim, kKind, kFields };

// One old shard's file, read and checked: its rows, their keys, their state.
absl::StatusOr<ShardSnapshot> ReadFile(const std::string& dir, const TableOptions& table,
                                       int64_t clock, int64_t shard, int64_t shards) {
  const std::string where = ClockDir(dir, clock);
  const std::string name = FileName(table.name, shard, shards);
  const std::string path = absl::StrCat(where, "/", name, ".ckpt");
  std::optional<checkpoint::Checkpoint> file;
  try {
    file = checkpoint::LoadCheckpoint(where, name);
  } catch (const StatusError& e) {
    return absl::DataLossError(absl::StrCat("parameter-server checkpoint: ", e.status().message()));
  }
  auto lost = [&path](const std::string& why) {
    return absl::DataLossError(absl::StrCat("parameter-server checkpoint ", path, ": ", why));
  };
  if (!file.has_value()) return lost("missing");
  auto& tensors = file->tensors;
  auto layout = tensors.find("layout");
  if (layout == tensors.end() || layout->second.scalar_type() != at::kLong ||
      layout->second.numel() != kFields) {
    return lost("no layout");
  }
  const at::Tensor l = layout->second.contiguous();
  const int64_t* f = l.data_ptr<int64_t>();
  if (f[kClock] != clock || f[kShard] != shard || f[kShards] != shards || f[kDim] != table.dim ||
      f[kKind] != static_cast<int64_t>(table.kind)) {
    return lost(absl::StrCat("not shard ", shard, " of ", shards, " of table '", table.name, "' (",
                             table.dim, " wide) at clock ", clock));
  }
  ShardSnapshot rows;
  rows.keys = tensors["keys"];
  rows.values = tensors["values"];
  for (size_t k = 0; tensors.count(absl::StrCat("optimizer.", k)) > 0; ++k) {
    rows.optimizer.push_back(tensors[absl::StrCat("optimizer.", k)]);
  }
  const int64_t n = rows.values.defined() && rows.values.dim() == 2 ? rows.values.size(0) : -1;
  const bool dense = table.kind == TableKind::kDense;
  if (n < 0 || rows.values.scalar_type() != at::kFloat ||
      (dense ? n != DenseRange(table.rows, shards, shard).second -
                        DenseRange(table.rows, shards, shard).first
             : !rows.keys.defined() || rows.keys.scalar_type() != at::kLong ||
                   rows.keys.numel() != n)) {
    return lost("its rows do not fit its layout");
  }
  for (const at::Tensor& state : rows.optimizer) {
    if (!state.defined() || state.dim() < 1 || state.size(0) != n) {
      return lost("its optimizer state does not fit its rows");
    }
  }
  return rows;
}

// Rows `index` (int64) of `rows`.
ShardSnapshot Select(const ShardSnapshot& rows, const at::Tensor& index) {
  ShardSnapshot part;
  part.keys = rows.keys.index_select(0, index);
  part.values = rows.values.index_select(0, index);
  for (const at::Tensor& state : rows.optimizer)
    part.optimizer.push_back(state.index_select(0, index));
  return part;
}

std::string ProgressDir(const std::string& dir) { return dir + "/progress"; }

}  // namespace

absl::Status WriteShardCheckpoint(const std::string& dir, const TableOptions& table, int64_t shard,
                                  int64_t shards, int64_t clock, const ShardSnapshot& rows) {
  checkpoint::Checkpoint file;
  file.tensors["layout"] =
      at::tensor({clock, shard, shards, table.dim, static_cast<int64_t>(table.kind)}, at::kLong);
  file.tensors["keys"] = rows.keys;
  file.tensors["values"] = rows.values;
  for (size_t k = 0; k < rows.optimizer.size(); ++k) {
    file.tensors[absl::StrCat("optimizer.", k)] = rows.optimizer[k];
  }
  std::error_code made;
  fs::create_directories(ClockDir(dir, clock), made);  // SaveCheckpoint makes only the last
  if (made) {
    return absl::InternalError(absl::StrCat("parameter-server checkpoint: mkdir -p ",
                                            ClockDir(dir, clock), ": ", made.message()));
  }
  try {
    checkpoint::SaveCheckpoint(ClockDir(dir, clock), FileName(table.name, shard, shards), file);
  } catch (const StatusError& e) {
    return e.status();
  }
  return absl::OkStatus();
}

std::optional<CheckpointLayout> LatestCheckpoint(const std::string& dir,
                                                 const std::vector<TableOptions>& tables) {
  std::error_code error;
  if (dir.empty() || !fs::is_directory(dir, error)) return std::nullopt;
  // Each clock's files: table -> layout -> shards present.
  std::map<int64_t, std::map<std::string, std::map<int64_t, std::set<int64_t>>>> found;
  static const std::regex kFile(R"((.+)\.(\d+)-of-(\d+)\.ckpt)");
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    int64_t clock = 0;
    if (name.rfind("clock-", 0) != 0 || !absl::SimpleAtoi(name.substr(6), &clock)) continue;
    for (const auto& file : fs::directory_iterator(entry.path(), error)) {
      std::smatch m;
      const std::string f = file.path().filename().string();
      int64_t shard = 0, shards = 0;
      if (!std::regex_match(f, m, kFile) || !absl::SimpleAtoi(m[2].str(), &shard) ||
          !absl::SimpleAtoi(m[3].str(), &shards)) {
        continue;
      }
      found[clock][m[1].str()][shards].insert(shard);
    }
  }
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    CheckpointLayout layout{it->first, {}};
    for (const TableOptions& table : tables) {
      auto files = it->second.find(table.name);
      if (files == it->second.end()) break;
      for (const auto& [shards, present] : files->second) {
        if (static_cast<int64_t>(present.size()) == shards) layout.shards[table.name] = shards;
      }
      if (layout.shards.count(table.name) == 0) break;
    }
    if (layout.shards.size() == tables.size()) return layout;
  }
  return std::nullopt;
}

absl::StatusOr<int64_t> RestoreShardCheckpoint(const std::string& dir,
                                               const CheckpointLayout& layout, Shard& shard,
                                               int64_t index, int64_t shards, int64_t clock) {
  const TableOptions& table = shard.table();
  auto old = layout.shards.find(table.name);
  if (old == layout.shards.end()) {
    return absl::DataLossError(absl::StrCat("parameter-server checkpoint at clock ", layout.clock,
                                            " under ", dir, ": no table '", table.name, "'"));
  }
  const bool dense = table.kind == TableKind::kDense;
  const auto [first, end] = dense ? DenseRange(table.rows, shards, index) : std::pair{0L, 0L};
  int64_t restored = 0;
  for (int64_t s = 0; s < old->second; ++s) {
    int64_t old_first = 0;
    if (dense) {
      const auto [a, b] = DenseRange(table.rows, old->second, s);
      if (b <= first || a >= end) continue;  // no key of this shard's range
      old_first = a;
    }
    TESSERA_ASSIGN_OR_RETURN(auto rows, ReadFile(dir, table, layout.clock, s, old->second));
    ShardSnapshot part;
    int64_t first_row = restored;
    if (dense) {
      const int64_t from = std::max(first, old_first);
      const int64_t to = std::min(end, old_first + rows.rows());
      part = rows.Rows(from - old_first, to - from);
      first_row = from - first;
    } else {
      TESSERA_ASSIGN_OR_RETURN(auto owners, ShardsOfKeys(table, shards, rows.keys));
      part = Select(rows, at::nonzero(at::eq(owners, index)).view({-1}));
    }
    if (auto ok = shard.Restore(part, first_row, /*last=*/false, /*cut=*/0); !ok.ok()) return ok;
    restored += part.rows();
  }
  shard.ResumeAt(std::max(clock, layout.clock));
  return restored;
}

absl::Status RecordProgress(const std::string& dir, int64_t shard, int64_t shards, int64_t clock) {
  const std::string where = ProgressDir(dir);
  const std::string path = absl::StrCat(where, "/shard-", shard, "-of-", shards);
  std::error_code error;
  fs::create_directories(where, error);
  const std::string aside = path + ".tmp";
  {
    std::ofstream out(aside, std::ios::trunc);
    out << clock << "\n";
    if (!out.flush()) error = std::make_error_code(std::errc::io_error);
  }
  if (!error) fs::rename(aside, path, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("parameter-server progress record ", path, ": ", error.message()));
  }
  return absl::OkStatus();
}

Rollback RollbackSince(const std::string& dir, int64_t checkpoint_clock) {
  Rollback rollback;
  rollback.checkpoint_clock = checkpoint_clock;
  // Each layout's records (shards -> shard -> clock), and its newest write.
  std::map<int64_t, std::map<int64_t, int64_t>> records;
  std::map<int64_t, fs::file_time_type> newest;
  static const std::regex kRecord(R"(shard-(\d+)-of-(\d+))");
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(ProgressDir(dir), error)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    int64_t shard = 0, shards = 0, clock = 0;
    std::ifstream in(entry.path());
    if (!std::regex_match(name, m, kRecord) || !absl::SimpleAtoi(m[1].str(), &shard) ||
        !absl::SimpleAtoi(m[2].str(), &shards) || !(in >> clock)) {
      continue;  // a record being written aside, or not one
    }
    records[shards][shard] = clock;
    const fs::file_time_type written = fs::last_write_time(entry.path(), error);
    if (!error && (newest.count(shards) == 0 || written > newest[shards])) newest[shards] = written;
  }
  for (const auto& [shards, written] : newest) {
    if (rollback.shards == 0 || written > newest[rollback.shards]) rollback.shards = shards;
  }
  if (rollback.shards > 0) rollback.reached = records[rollback.shards];
  return rollback;
}

int64_t Rollback::Clocks() const {
  int64_t most = 0;
  for (const auto& [shard, clock] : reached) most = std::max(most, clock - checkpoint_clock);
  return most;
}

std::string Rollback::ToString() const {
  if (reached.empty()) {
    return "how far it rolled back is not known: no shard's progress was recorded";
  }
  std::string said;
  for (const auto& [shard, clock] : reached) {
    absl::StrAppend(&said, said.empty() ? "" : ", ", "shard ", shard, " of ", shards,
                    said.empty() ? " reached clock " : " clock ", clock);
  }
  return absl::StrCat(said, ": rolled back up to ", Clocks(), " clocks");
}

}  // namespace tessera::ps
