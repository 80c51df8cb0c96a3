#include "examples/ps_recommender/model_tables.h"

#include <map>
#include <utility>

#include "common/status.h"
#include "ps/row_store.h"

namespace tessera::examples {
namespace {

class Remote : public ModelTables {
 public:
  Remote(std::unique_ptr<ps::PsClient> client, std::string clocked)
      : client_(std::move(client)), clocked_(std::move(clocked)) {}
  Future<std::vector<at::Tensor>> Pull(const std::vector<ps::TableKeys>& parts) override {
    return client_->Pull(parts);
  }
  Future<std::monostate> Push(const std::vector<ps::TableKeys>& parts) override {
    return client_->Push(parts);
  }
  Future<std::monostate> Clock() override { return client_->Clock(); }
  Future<int64_t> Checkpoint() override { return client_->Checkpoint(); }
  int64_t StartClock() const override { return client_->clock(clocked_); }

 private:
  std::unique_ptr<ps::PsClient> client_;
  const std::string clocked_;
};

// One shard of each table, here: a pull reads its rows, a push applies the
// table's optimizer at once.
class Local : public ModelTables {
 public:
  explicit Local(const std::vector<ps::TableOptions>& tables) {
    for (const ps::TableOptions& table : tables) {
      stores_.emplace(table.name, ps::RowStore(table, /*shard=*/0, /*shards=*/1));
    }
  }
  Future<std::vector<at::Tensor>> Pull(const std::vector<ps::TableKeys>& parts) override {
    std::vector<at::Tensor> rows;
    for (const ps::TableKeys& part : parts) {
      ps::RowStore& store = stores_.at(part.table);
      ThrowIfError(store.Check(part.keys));
      rows.push_back(store.Read(part.keys));
    }
    return Future<std::vector<at::Tensor>>::Ready(std::move(rows));
  }
  Future<std::monostate> Push(const std::vector<ps::TableKeys>& parts) override {
    for (const ps::TableKeys& part : parts) {
      ps::RowStore& store = stores_.at(part.table);
      store.Apply(ValueOrThrow(store.Slots(part.keys)), part.grads);
    }
    return Future<std::monostate>::Ready(std::monostate{});
  }
  Future<std::monostate> Clock() override {
    return Future<std::monostate>::Ready(std::monostate{});
  }
  Future<int64_t> Checkpoint() override {
    return Future<int64_t>::Ready(
        absl::FailedPreconditionError("checkpoints are the parameter servers': --servers 0 has none"));
  }
  int64_t StartClock() const override { return 0; }

 private:
  std::map<std::string, ps::RowStore> stores_;
};

}  // namespace

std::unique_ptr<ModelTables> RemoteTables(std::unique_ptr<ps::PsClient> client,
                                          std::string clocked) {
  return std::make_unique<Remote>(std::move(client), std::move(clocked));
}

std::unique_ptr<ModelTables> LocalTables(const std::vector<ps::TableOptions>& tables) {
  return std::make_unique<Local>(tables);
}

}  // namespace tessera::examples
