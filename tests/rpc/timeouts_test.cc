// Timeouts come from one place (README, "Timeouts"): with the job's default
// set short (TESSERA_TIMEOUT_S), every kind of blocking call is cut off by
// it — an RPC, an RRef method call, to_here(), a distributed backward, a
// pipeline batch, a collective — while a call that sets its own deadline
// keeps it — given in each shape the API takes (see Note [One timeout
// convention], rpc/call_options.h). The peer here stalls (until the test
// ends) in each of them, or answers after a second.
#include <ATen/TensorOperators.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <thread>

#include "absl/synchronization/notification.h"
#include "collectives/gloo/gloo_process_group.h"
#include "common/status.h"
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
  bool AnswerInASecond() {
    release_->WaitForNotificationWithTimeout(absl::Seconds(1));
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
    // Answer after 1 s: past the default, within a call's own 20 s.
    worker->Register("answer_in_a_second", [this] {
      release_.WaitForNotificationWithTimeout(absl::Seconds(1));
      return true;
    });
    worker->Register("tensor_in_a_second", [this] {
      release_.WaitForNotificationWithTimeout(absl::Seconds(1));
      return at::ones({2});
    });
    // A product whose backward stalls: a distributed backward through it waits.
    weights_[rank] = at::ones({2}).requires_grad_();
    auto scale_with_backward_of = [this, rank](absl::Duration backward_wait) {
      return [this, rank, backward_wait](at::Tensor x) {
        at::Tensor y = x * weights_[rank];
        y.register_hook([this, backward_wait](const at::Tensor& grad) {
          release_.WaitForNotificationWithTimeout(backward_wait);
          return grad;
        });
        return y;
      };
    };
    worker->Register("scale", scale_with_backward_of(absl::Seconds(20)));
    worker->Register("scale_backward_in_a_second", scale_with_backward_of(absl::Seconds(1)));
    worker->RegisterClass<Staller>("Staller")
        .Factory<>([this] { return std::make_shared<Staller>(&release_); })
        .Method("stall", &Staller::Stall)
        .Method("answer_in_a_second", &Staller::AnswerInASecond);
    auto stage_answering_after = [this](absl::Duration wait) {
      return [this, wait](int64_t) {
        pipeline::StageModel model;
        model.forward = [this, wait](const at::Tensor& x) {
          release_.WaitForNotificationWithTimeout(wait);
          return x;
        };
        return model;
      };
    };
    pipeline::RegisterStage(worker->rrefs().classes(),
                            {{"stalling", stage_answering_after(absl::Seconds(20))},
                             {"in_a_second", stage_answering_after(absl::Seconds(1))}});
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
  std::unique_ptr<collectives::ProcessGroup> groups[2];
  std::thread joiner(
      [&] { groups[1] = collectives::CreateGlooProcessGroup(&workers_[1]->rpc().store(), 1, 2); });
  groups[0] = collectives::CreateGlooProcessGroup(&caller().rpc().store(), 0, 2);
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

// Each answer comes after 1 s, past the 0.5 s default: the call's own 20 s,
// given as an absl::Duration wherever the API takes a deadline, is kept.
TEST_F(TimeoutsTest, EveryShapeOfDeadlineTakesADuration) {
  const absl::Duration own = absl::Seconds(20);
  EXPECT_TRUE(caller().RpcSync<bool>(own, "worker1", "answer_in_a_second"));
  EXPECT_TRUE(caller().RpcAsync<bool>(own, "worker1", "answer_in_a_second").Get(absl::Seconds(30)));
  auto staller = caller().RemoteObject<Staller>("worker1");
  EXPECT_TRUE(staller.RpcSync<bool>(own, "answer_in_a_second"));
  EXPECT_TRUE(caller()
                  .Remote<at::Tensor>("worker1", "tensor_in_a_second")
                  .to_here(own)
                  .equal(at::ones({2})));
  {
    dist_autograd::ContextGuard context(caller().autograd());
    at::Tensor y =
        caller().RpcSync<at::Tensor>("worker1", "scale_backward_in_a_second", at::ones({2}));
    EXPECT_TRUE(caller().autograd().TryBackward(context.id(), {y.sum()}, false, own).ok());
  }
  // An options field: zero is the default (cut off), a value is kept.
  auto stage =
      caller().RemoteObject<pipeline::Stage>("worker1", std::string("in_a_second"), int64_t{0});
  pipeline::PipelineDriver with_default(caller().rrefs(), {stage});
  ExpectCutOff(StatusOf([&] { with_default.Forward(at::ones({2, 2})); }), "pipeline default");
  pipeline::PipelineOptions options;
  options.timeout = own;
  pipeline::PipelineDriver with_own(caller().rrefs(), {stage}, options);
  EXPECT_TRUE(with_own.Forward(at::ones({2, 2})).equal(at::ones({2, 2})));
}

}  // namespace
}  // namespace tessera::testing
