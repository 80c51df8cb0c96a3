// RpcWorld: a test fixture with a store hosted by the test, the test process
// as rank 0 ("worker0") and ranks 1.. as real child processes ("workerN")
// that serve MakeTestRegistry() until everyone shuts down.
#pragma once

#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "rpc/runtime.h"
#include "store/store_server.h"
#include "tests/testing/multiprocess.h"

namespace tessera::testing {

// A child worker's life: `runtime` (just initialised) serves until every
// worker shuts down. Exit code: 0, 1 if init failed, 3 if shutdown failed.
int ServeUntilShutdown(const char* scenario,
                       absl::StatusOr<std::unique_ptr<rpc::Runtime>> runtime);

class RpcWorld : public ::testing::Test {
 protected:
  // Starts the store, `world_size - 1` serving children and rank 0 here.
  void StartWorld(int world_size,
                  const std::map<std::string, std::string>& child_env = {},
                  absl::Duration shutdown_timeout = absl::Seconds(60));
  // The scenario children run, and what rank 0 runs with (overridable).
  virtual std::string ChildScenario() const { return "serve"; }
  virtual rpc::Registry MakeRegistry();
  virtual std::vector<std::shared_ptr<rpc::RuntimeExtension>> MakeExtensions() { return {}; }
  // Rank 0's options, before it starts (the children's come from WorkerEnv).
  virtual void Configure(rpc::RpcOptions& options) {}
  // Graceful shutdown of rank 0; children must then exit with 0.
  void TearDown() override;

  // Rank 0's runtime. StartWorld's failed assertion ends only StartWorld,
  // so a test that goes on ends here, failing with that reason above,
  // rather than dereferencing null (a SEGV under the sanitizers, stop 69).
  rpc::Runtime& rt() {
    if (runtime_ == nullptr) throw std::logic_error("rank 0's runtime did not start");
    return *runtime_;
  }
  // Sends zeros({2}) through worker1 -> worker2 -> worker0 with "nested"
  // (each hop adds 1) and returns the result's sum: 6 when every hop
  // worked, so every pair of a 3-worker world talks both ways.
  float ThreeHopNestedSum() {
    return rt()
        .RpcSync<at::Tensor>("worker1", "nested", std::vector<std::string>{"worker2", "worker0"},
                             at::zeros({2}))
        .sum()
        .item<float>();
  }
  int store_port() const { return store_->port(); }

  std::unique_ptr<store::StoreServer> store_;
  std::vector<std::unique_ptr<WorkerProcess>> children_;  // children_[i] is rank i+1
  std::unique_ptr<rpc::Runtime> runtime_;
  // Set by tests that expect some child to exit non-zero.
  bool expect_clean_exit_ = true;
};

}  // namespace tessera::testing
