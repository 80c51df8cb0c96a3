// Timeouts come from one place (README, "Timeouts"): with the job's default
// set short (TESSERA_TIMEOUT_S), every kind of blocking call is cut off by
// it — an RPC, an RRef method call, to_here(), a distributed backward, a
// pipeline batch, a collective — while a call that sets its own deadline
// keeps it. The peer here stalls (until the test ends) in each of them.
#include <ATen/TensorOperators.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/status.h"
#include "ddp/gloo/gloo_process_group.h"
#include "pipeline/pipeline_driver.h"
#include "pipeline/stage.h"
#include "store/store_server.h"
#include "tessera/worker.h"
#include "tests/testing/multiprocess.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

constexpr char kShortDefault[] = "0.5";  // seconds, for every layer

class Staller {
 public:
  explicit Staller(const absl::Notification* release) : release_(release) {}
  bool Stall() {
    release_->WaitForNotificationWithTimeout(absl::Seconds(20));
    return true;
  }

 private:
  const absl::Notification* release_;
};

class TimeoutsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("TESSERA_TIMEOUT_S", kShortDefault, 1);
    store_ = ValueOrThrow(store::StoreServer::Start("127.0.0.1", 0, TestJobSecret()));
    std::thread second([this] { workers_[1] = Start(1); });
    workers_[0] = Start(0);
    second.join();
  }

  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    std::thread second([this] { workers_[1]->rpc().TryShutdown().IgnoreError(); });
    workers_[0]->rpc().TryShutdown().IgnoreError();
    second.join();
    workers_[0].reset();
    workers_[1].reset();
    store_->Shutdown();
    unsetenv("TESSERA_TIMEOUT_S");
  }

  std::unique_ptr<Worker> Start(int rank) {
    // The options' default_call_timeout is the environment's default.
    WorkerOptions options =
        InProcessOptions("worker" + std::to_string(rank), rank, 2, store_->port());
    EXPECT_EQ(options.default_call_timeout, absl::Milliseconds(500));
    auto worker = Worker::Start(options);
    worker->Register("stall", [this] {
      release_.WaitForNotificationWithTimeout(absl::Seconds(20));
      return true;
    });
    worker->Register("stall_tensor", [this] {
      release_.WaitForNotificationWithTimeout(absl::Seconds(20));
      return at::ones({2});
    });
    // Answers after 1 s: past the default, within a call's own 20 s.
    worker->Register("answer_in_a_second", [this] {
      release_.WaitForNotificationWithTimeout(absl::Seconds(1));
      return true;
    });
    // A product whose backward stalls: a distributed backward through it waits.
    weights_[rank] = at::ones({2}).requires_grad_();
    worker->Register("scale", [this, rank](at::Tensor x) {
      at::Tensor y = x * weights_[rank];
      y.register_hook([this](const at::Tensor& grad) {
        release_.WaitForNotificationWithTimeout(absl::Seconds(20));
        return grad;
      });
      return y;
    });
    worker->RegisterClass<Staller>("Staller")
        .Factory<>([this] { return std::make_shared<Staller>(&release_); })
        .Method("stall", &Staller::Stall);
    pipeline::RegisterStage(worker->rrefs().classes(),
                            {{"stalling", [this](int64_t) {
                                pipeline::StageModel model;
                                model.forward = [this](const at::Tensor& x) {
                                  release_.WaitForNotificationWithTimeout(absl::Seconds(20));
                                  return x;
                                };
                                return model;
                              }}});
    return worker;
  }

  Worker& caller() { return *workers_[0]; }

  absl::Notification release_;
  std::unique_ptr<store::StoreServer> store_;
  std::unique_ptr<Worker> workers_[2];
  at::Tensor weights_[2];
};

// Cut off by the call's own deadline — not by the test's generous wait on
// its future (which would say "timed out waiting for a future"): the short
// default reached that layer.
void ExpectCutOff(const absl::Status& status, const char* what) {
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << what << ": " << status;
  EXPECT_EQ(status.message().find("timed out waiting for a future"), std::string::npos)
      << what << ": " << status;
}

TEST_F(TimeoutsTest, TheDefaultCutsOffEveryKindOfBlockingCall) {
  ExpectCutOff(StatusOf([&] { caller().RpcSync<bool>("worker1", "stall"); }), "RpcSync");
  ExpectCutOff(caller().RpcAsync<bool>("worker1", "stall").Wait(absl::Seconds(30)).status(),
               "RpcAsync");

  auto staller = caller().RemoteObject<Staller>("worker1");
  ExpectCutOff(StatusOf([&] { staller.RpcSync<bool>("stall"); }), "RRef method call");

  auto value = caller().Remote<at::Tensor>("worker1", "stall_tensor");
  ExpectCutOff(StatusOf([&] { value.to_here(); }), "to_here");

  {
    dist_autograd::ContextGuard context(caller().autograd());
    at::Tensor y = caller().RpcSync<at::Tensor>("worker1", "scale", at::ones({2}));
    ExpectCutOff(StatusOf([&] { caller().autograd().Backward(context.id(), {y.sum()}); }),
                 "distributed backward");
  }

  auto stage =
      caller().RemoteObject<pipeline::Stage>("worker1", std::string("stalling"), int64_t{0});
  pipeline::PipelineDriver driver(caller().rrefs(), {stage});
  ExpectCutOff(StatusOf([&] { driver.Forward(at::ones({2, 2})); }), "pipeline forward");

  // A collective rank 1 never joins: rank 0's allreduce fails at the default.
  std::unique_ptr<ddp::ProcessGroup> groups[2];
  std::thread joiner(
      [&] { groups[1] = ddp::CreateGlooProcessGroup(&workers_[1]->rpc().store(), 1, 2); });
  groups[0] = ddp::CreateGlooProcessGroup(&caller().rpc().store(), 0, 2);
  joiner.join();
  at::Tensor ones = at::ones({4});
  ExpectCutOff(groups[0]->Allreduce(ones).Wait(absl::Seconds(30)).status(), "allreduce");
}

TEST_F(TimeoutsTest, ACallsOwnDeadlineOverridesTheDefault) {
  // 1 s is past the 0.5 s default: without its own deadline the call fails...
  ExpectCutOff(StatusOf([&] { caller().RpcSync<bool>("worker1", "answer_in_a_second"); }),
               "default");
  // ...and with one it is answered.
  EXPECT_TRUE(
      caller().RpcSync<bool>(rpc::CallOptions{absl::Seconds(20)}, "worker1", "answer_in_a_second"));
  auto staller = caller().RemoteObject<Staller>("worker1");
  auto answer = staller.RpcAsync<bool>(rpc::CallOptions{absl::Seconds(20)}, "stall");
  EXPECT_FALSE(answer.Wait(absl::Seconds(1)).ok());  // still waiting past the default
  release_.Notify();
  EXPECT_TRUE(answer.Get(absl::Seconds(20)));
}

}  // namespace
}  // namespace tessera::testing
