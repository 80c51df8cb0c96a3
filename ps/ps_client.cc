#include "ps/ps_client.h"

#include "common/status.h"
#include "ps/ps_client_core.h"

namespace tessera::ps {

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Connect(rpc::Runtime& runtime,
                                                            PsOptions options,
                                                            rpc::CallOptions call) {
  TESSERA_ASSIGN_OR_RETURN(auto core, PsClientCore::Connect(runtime, std::move(options), call));
  return std::unique_ptr<PsClient>(new PsClient(std::move(core)));
}

Future<at::Tensor> PsClient::Pull(const std::string& table, const at::Tensor& keys) {
  return core_->Pull(table, keys);
}

Future<std::monostate> PsClient::Push(const std::string& table, const at::Tensor& keys,
                                      const at::Tensor& grads) {
  return core_->Push(table, keys, grads);
}

Future<std::vector<at::Tensor>> PsClient::Pull(const std::vector<TableKeys>& parts) {
  return core_->Pull(parts);
}

Future<std::monostate> PsClient::Push(const std::vector<TableKeys>& parts) {
  return core_->Push(parts);
}

Future<at::Tensor> PsClient::PushPull(const std::string& table, const at::Tensor& keys,
                                      const at::Tensor& grads) {
  return core_->PushPull(table, keys, grads);
}

Future<std::monostate> PsClient::Clock() { return core_->Clock(); }

Future<int64_t> PsClient::Checkpoint(absl::Duration within) { return core_->Checkpoint(within); }

int64_t PsClient::clock(const std::string& table) const { return core_->clock(table); }

ShardMap PsClient::shard_map() const { return core_->shard_map(); }

Future<std::vector<std::vector<int64_t>>> PsClient::Stats(const std::string& table) {
  return core_->Stats(table);
}

}  // namespace tessera::ps
