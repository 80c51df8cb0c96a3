// Schedules as data (see Note [Schedules as data], pipeline/schedule_plan.h):
// every provided schedule is a plan the checker accepts, at p = 2 and 4
// workers, 1 and 2 chunks a worker, 4, 8 and 16 micro-batches; its bubble
// under equal costs is the one its header states; and the checker refuses
// plans that deadlock, use activations before their F or after their W,
// or leave work out, naming the action.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "pipeline/plan_simulator.h"
#include "pipeline/schedules.h"

namespace tessera::pipeline {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

struct Shape {
  std::string schedule;
  int workers, chunks, micro_batches;
};

void PrintTo(const Shape& s, std::ostream* out) {
  *out << s.schedule << " p=" << s.workers << " v=" << s.chunks << " m=" << s.micro_batches;
}

std::string Name(const ::testing::TestParamInfo<Shape>& info) {
  std::string name = info.param.schedule;
  name.erase(std::remove(name.begin(), name.end(), '-'), name.end());
  return name + "_p" + std::to_string(info.param.workers) + "_v" +
         std::to_string(info.param.chunks) + "_m" + std::to_string(info.param.micro_batches);
}

std::vector<Shape> Shapes() {
  std::vector<Shape> shapes;
  for (int p : {2, 4}) {
    for (int m : {4, 8, 16}) {
      for (const char* schedule : {"gpipe", "1f1b", "zb-h1"}) shapes.push_back({schedule, p, 1, m});
      shapes.push_back({"interleaved", p, 1, m});
      shapes.push_back({"interleaved", p, 2, m});
      shapes.push_back({"zbv", p, 2, m});
    }
  }
  return shapes;
}

// Each schedule's bubble under equal costs, as pipeline/schedules.h states it.
double TheoryBubble(const Shape& s) {
  const double p = s.workers, m = s.micro_batches, v = s.chunks;
  if (s.schedule == "interleaved") return (p - 1) / (v * m + p - 1);
  if (s.schedule == "zb-h1") return (p - 1) / (3 * m + p - 1);
  if (s.schedule == "zbv") return (p - 1) / (6 * m + p - 1);
  return (p - 1) / (m + p - 1);  // GPipe, 1F1B
}

int MostHeld(const Shape& s) {
  if (s.schedule == "gpipe") return s.micro_batches;
  if (s.schedule == "interleaved" && s.chunks > 1) {  // Megatron's warm-up, and one more
    return std::min(s.chunks * s.micro_batches,
                    2 * (s.workers - 1) + (s.chunks - 1) * s.workers + 1);
  }
  if (s.schedule == "zbv") return 2 * s.workers;
  return s.workers;  // 1F1B, ZB-H1
}

class ProvidedSchedule : public ::testing::TestWithParam<Shape> {};

TEST_P(ProvidedSchedule, RunsWithTheBubbleAndMemoryItsHeaderStates) {
  const Shape& s = GetParam();
  auto plan = MakePlan(s.schedule, s.workers, s.chunks, s.micro_batches);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->workers(), s.workers);
  ASSERT_EQ(plan->stages(), s.workers * s.chunks);
  // A chunk of 1/v of a stage costs 1/v.
  const double unit = 1.0 / s.chunks;
  auto run = SimulatePlan(*plan, {unit, unit, unit, 0});
  ASSERT_TRUE(run.ok()) << run.status() << "\n" << plan->Print();
  double bubble = 0;
  for (int w = 0; w < s.workers; ++w) {
    bubble = std::max(bubble, run->idle_fraction(w));
    EXPECT_LE(run->peak_activations[w], MostHeld(s)) << "worker " << w << "\n" << plan->Print();
  }
  EXPECT_NEAR(bubble, TheoryBubble(s), 1e-9) << plan->Print();
}

TEST_P(ProvidedSchedule, StaysRunnableWhateverTheCosts) {
  const Shape& s = GetParam();
  auto plan = MakePlan(s.schedule, s.workers, s.chunks, s.micro_batches);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (ActionCosts costs : {ActionCosts{1, 2, 0.5, 0.3}, ActionCosts{3, 1, 1, 2}}) {
    auto run = SimulatePlan(*plan, costs);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_GT(run->makespan, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, ProvidedSchedule, ::testing::ValuesIn(Shapes()), Name);

TEST(ScheduleOrder, OneFOneBAndZeroBubbleH1AsTheirPapersDrawThem) {
  auto one_f_one_b = OneFOneBPlan(2, 4);
  ASSERT_TRUE(one_f_one_b.ok());
  EXPECT_THAT(one_f_one_b->Print(),
              AllOf(HasSubstr("worker 0: F0@0 send act 0 0->1 F1@0 send act 1 0->1 "
                              "recv grad 0 1->0 BW0@0 F2@0"),
                    HasSubstr("worker 1: recv act 0 0->1 F0@1 BW0@1 send grad 0 1->0 "
                              "recv act 1 0->1 F1@1 BW1@1")));
  // ZB-H1 at p = 4: worker 0 holds 4 micro-batches, then runs F, B, W in
  // turn; the last worker puts its first W off until F4 cannot start.
  auto h1 = ZeroBubbleH1Plan(4, 8);
  ASSERT_TRUE(h1.ok());
  EXPECT_THAT(h1->Print(),
              AllOf(HasSubstr("recv grad 0 1->0 B0@0 W0@0 F4@0 send act 4 0->1 recv grad 1 1->0 "
                              "B1@0 W1@0 F5@0"),
                    HasSubstr("F3@3 B3@3 send grad 3 3->2 W0@3 recv act 4 2->3 F4@3")));
}

TEST(ScheduleOrder, ZeroBubbleVKeepsTheTurnOnTheFirstWorker) {
  auto zbv = ZeroBubbleVPlan(2, 4);
  ASSERT_TRUE(zbv.ok());
  EXPECT_EQ(zbv->worker_of_stage, (std::vector<int>{0, 1, 1, 0}));
  // Stage 3's output turns into its backward on worker 0, with no transfer.
  EXPECT_THAT(zbv->Print(), HasSubstr("recv act 0 2->3 F0@3 B0@3 send grad 0 3->2"));
}

TEST(Schedules, ShapesTheyCannotRunAreRefused) {
  EXPECT_THAT(std::string(Interleaved1F1BPlan(4, 2, 6).status().message()),
              HasSubstr("micro-batches in groups of the 4 workers"));
  EXPECT_THAT(std::string(MakePlan("1f1b", 2, 2, 4).status().message()),
              HasSubstr("one chunk a worker, not 2"));
  EXPECT_THAT(std::string(MakePlan("pipedream", 2, 1, 4).status().message()),
              HasSubstr("no schedule 'pipedream'"));
  EXPECT_FALSE(GPipePlan(0, 4).ok());
}

// --- the checker refuses broken plans, naming the action ---

SchedulePlan OneFOneB(int workers, int micro_batches) {
  auto plan = OneFOneBPlan(workers, micro_batches);
  EXPECT_TRUE(plan.ok());
  return *plan;
}

size_t IndexOf(const std::vector<Action>& actions, const Action& a) {
  return std::find(actions.begin(), actions.end(), a) - actions.begin();
}

std::string CheckError(const SchedulePlan& plan) {
  absl::Status status = CheckPlan(plan);
  EXPECT_FALSE(status.ok()) << plan.Print();
  return std::string(status.message());
}

TEST(CheckPlan, RefusesAReceiveMovedAheadOfTheSendItWaitsFor) {
  // Worker 0 waits for micro-batch 0's gradient before sending micro-batch
  // 1's activation, which worker 1 (GPipe: every forward first) needs
  // before it makes that gradient.
  auto gpipe = GPipePlan(2, 2);
  ASSERT_TRUE(gpipe.ok());
  SchedulePlan plan = *gpipe;
  std::vector<Action>& w0 = plan.actions[0];
  const Action recv{ActionKind::kReceive, 0, 0, 1};
  w0.erase(w0.begin() + IndexOf(w0, recv));
  w0.insert(w0.begin() + IndexOf(w0, Forward(0, 1)), recv);
  EXPECT_THAT(CheckError(plan),
              AllOf(HasSubstr("deadlocks"),
                    HasSubstr("worker 0 at its action 2 (recv grad 0 1->0) "
                              "waits for worker 1"),
                    HasSubstr("worker 1 at its action 2 (recv act 1 0->1) waits for worker 0")));
}

TEST(CheckPlan, RefusesAWeightGradientBeforeItsInputGradient) {
  auto plan = ZeroBubbleH1Plan(2, 4);
  ASSERT_TRUE(plan.ok());
  std::vector<Action>& w1 = plan->actions[1];
  std::iter_swap(w1.begin() + IndexOf(w1, InputBackward(1, 2)),
                 w1.begin() + IndexOf(w1, WeightBackward(1, 2)));
  EXPECT_THAT(CheckError(*plan),
              AllOf(HasSubstr("worker 1's action"), HasSubstr("(W2@1) comes before B2@1")));
}

TEST(CheckPlan, RefusesUsingActivationsAfterTheirWeightGradientFreedThem) {
  auto plan = ZeroBubbleH1Plan(2, 4);
  ASSERT_TRUE(plan.ok());
  std::vector<Action>& w0 = plan->actions[0];
  w0.insert(w0.begin() + IndexOf(w0, WeightBackward(0, 1)) + 1, WeightBackward(0, 1));
  EXPECT_THAT(CheckError(*plan), HasSubstr("(W1@0) runs a second time, on activations freed"));
  SchedulePlan fused = OneFOneB(2, 4);
  fused.actions[1].push_back(FullBackward(1, 3));
  EXPECT_THAT(CheckError(fused), HasSubstr("(BW3@1) runs a second time, on activations freed"));
}

TEST(CheckPlan, RefusesABackwardBeforeItsForward) {
  SchedulePlan plan = OneFOneB(2, 4);
  std::vector<Action>& w1 = plan.actions[1];
  w1.insert(w1.begin(), FullBackward(1, 3));
  EXPECT_THAT(CheckError(plan), HasSubstr("worker 1's action 0 (BW3@1) uses activations before "
                                          "F3@1 made them"));
}

TEST(CheckPlan, RefusesAForwardWhoseInputIsNeverReceived) {
  SchedulePlan plan = OneFOneB(2, 4);
  std::vector<Action>& w1 = plan.actions[1];
  w1.erase(w1.begin() + IndexOf(w1, {ActionKind::kReceive, 1, 2, 0}));
  EXPECT_THAT(CheckError(plan), HasSubstr("(F2@1) needs the activation of stage 0, and no receive "
                                          "of it comes before it"));
}

TEST(CheckPlan, RefusesAReceiveNoWorkerSendsAndATransferWithinAWorker) {
  SchedulePlan plan = OneFOneB(2, 4);
  std::vector<Action>& w0 = plan.actions[0];
  w0.erase(w0.begin() + IndexOf(w0, {ActionKind::kSend, 0, 3, 1}));
  EXPECT_THAT(CheckError(plan), HasSubstr("(recv act 3 0->1) waits for a send no worker makes"));
  // ZBV at p = 2 holds stages 1 and 2 on worker 1.
  auto zbv = ZeroBubbleVPlan(2, 4);
  ASSERT_TRUE(zbv.ok());
  zbv->actions[1].push_back({ActionKind::kSend, 1, 0, 2});
  EXPECT_THAT(CheckError(*zbv), HasSubstr("(send act 0 1->2) names stage 2, on its own worker"));
}

TEST(CheckPlan, RefusesASendOfWhatIsNotMadeYet) {
  SchedulePlan plan = OneFOneB(2, 4);
  std::vector<Action>& w0 = plan.actions[0];
  const Action send{ActionKind::kSend, 0, 1, 1};
  w0.erase(w0.begin() + IndexOf(w0, send));
  w0.insert(w0.begin(), send);
  EXPECT_THAT(CheckError(plan), HasSubstr("worker 0's action 0 (send act 1 0->1) sends before "
                                          "F1@0 made it"));
}

TEST(CheckPlan, RefusesWorkLeftOutAndWorkOnTheWrongWorker) {
  SchedulePlan missing = OneFOneB(2, 4);
  missing.actions[0].pop_back();  // the last backward, BW3@0
  EXPECT_THAT(CheckError(missing),
              HasSubstr("B3@0 (or BW3@0) is never run (worker 0's list lacks it)"));
  SchedulePlan misplaced = OneFOneB(2, 4);
  misplaced.actions[1].insert(misplaced.actions[1].begin(), Forward(0, 0));
  EXPECT_THAT(CheckError(misplaced), HasSubstr("worker 1's action 0 (F0@0) is on a worker that "
                                               "does not hold stage 0 (worker 0 does)"));
}

TEST(CheckPlan, AcceptsAPlanWrittenByHand) {
  // Two stages on one worker: nothing crosses workers, nothing is sent.
  SchedulePlan plan{"by hand",
                    2,
                    {0, 0},
                    {{Forward(0, 0), Forward(1, 0), InputBackward(1, 0), Forward(0, 1),
                      InputBackward(0, 0), Forward(1, 1), FullBackward(1, 1), WeightBackward(1, 0),
                      FullBackward(0, 1), WeightBackward(0, 0)}}};
  auto run = SimulatePlan(plan);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->makespan, 12);
  EXPECT_EQ(run->idle_fraction(0), 0);
  EXPECT_EQ(run->peak_activations[0], 4);
}

}  // namespace
}  // namespace tessera::pipeline
