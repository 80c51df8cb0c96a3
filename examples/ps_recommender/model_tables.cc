#include "examples/ps_recommender/model_tables.h"

#include <map>
#include <utility>

#include "common/status.h"
#include "ps/row_store.h"

namespace tessera::examples {
namespace {

class Remote : public ModelTables {
 public:
  explicit Remote(std::unique_ptr<ps::PsClient> client) : client_(std::move(client)) {}
  Future<at::Tensor> Pull(const std::string& table, const at::Tensor& keys) override {
    return client_->Pull(table, keys);
  }
  Future<std::monostate> Push(const std::string& table, const at::Tensor& keys,
                              const at::Tensor& grads) override {
    return client_->Push(table, keys, grads);
  }
  Future<std::monostate> Clock() override { return client_->Clock(); }

 private:
  std::unique_ptr<ps::PsClient> client_;
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
  Future<at::Tensor> Pull(const std::string& table, const at::Tensor& keys) override {
    ps::RowStore& store = stores_.at(table);
    return Future<at::Tensor>::Ready(store.Read(ValueOrThrow(store.Slots(keys))));
  }
  Future<std::monostate> Push(const std::string& table, const at::Tensor& keys,
                              const at::Tensor& grads) override {
    ps::RowStore& store = stores_.at(table);
    store.Apply(ValueOrThrow(store.Slots(keys)), grads);
    return Future<std::monostate>::Ready(std::monostate{});
  }
  Future<std::monostate> Clock() override {
    return Future<std::monostate>::Ready(std::monostate{});
  }

 private:
  std::map<std::string, ps::RowStore> stores_;
};

}  // namespace

std::unique_ptr<ModelTables> RemoteTables(std::unique_ptr<ps::PsClient> client) {
  return std::make_unique<Remote>(std::move(client));
}

std::unique_ptr<ModelTables> LocalTables(const std::vector<ps::TableOptions>& tables) {
  return std::make_unique<Local>(tables);
}

}  // namespace tessera::examples
