#include "tests/testing/rpc_world.h"

#include <cstdio>

#include "rpc/init.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {

int ServeUntilShutdown(const char* scenario,
                       absl::StatusOr<std::unique_ptr<rpc::Runtime>> runtime) {
  if (!runtime.ok()) {
    std::fprintf(stderr, "%s: init failed: %s\n", scenario, runtime.status().ToString().c_str());
    return 1;
  }
  auto status = (*runtime)->TryShutdown();
  if (!status.ok()) {
    std::fprintf(stderr, "%s: shutdown: %s\n", scenario, status.ToString().c_str());
    return 3;
  }
  return 0;
}

TESSERA_WORKER_SCENARIO(serve) {
  return ServeUntilShutdown("serve", rpc::TryInit(TestWorkerOptions(), MakeTestRegistry()));
}

void RpcWorld::StartWorld(int world_size,
                          const std::map<std::string, std::string>& child_env,
                          absl::Duration shutdown_timeout) {
  auto store = store::StoreServer::Start("127.0.0.1", 0, TestJobSecret());
  ASSERT_TRUE(store.ok()) << store.status();
  store_ = *std::move(store);
  for (int rank = 1; rank < world_size; ++rank) {
    auto env = WorkerEnv(rank, world_size, store_->port());
    for (const auto& [key, value] : child_env) env[key] = value;  // overrides
    children_.push_back(std::make_unique<WorkerProcess>(ChildScenario(), env));
  }
  rpc::RpcOptions options = InProcessOptions("worker0", 0, world_size, store_->port());
  options.shutdown_timeout = shutdown_timeout;
  Configure(options);
  auto runtime = rpc::TryInit(options, MakeRegistry(), MakeExtensions());
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  runtime_ = *std::move(runtime);
}

rpc::Registry RpcWorld::MakeRegistry() { return MakeTestRegistry(); }

void RpcWorld::TearDown() {
  if (runtime_ != nullptr) {
    auto status = runtime_->TryShutdown();
    if (expect_clean_exit_) {
      EXPECT_TRUE(status.ok()) << status;
    }
  }
  if (expect_clean_exit_) {
    for (size_t i = 0; i < children_.size(); ++i) {
      EXPECT_EQ(children_[i]->Wait(absl::Seconds(60)), 0) << "rank " << i + 1;
    }
  }
  runtime_.reset();
  children_.clear();
  if (store_ != nullptr) store_->Shutdown();
}

}  // namespace tessera::testing
