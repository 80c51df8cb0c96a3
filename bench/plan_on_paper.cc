// The idle share a pipeline plan promises on paper for given action costs:
// SimulatePlan (pipeline/plan_simulator.h) of MakePlan's plan, with the mean
// F, B and W that a traced run measured (tessera-trace bubble), so that
// bench/pipeline_schedules.sh can set the run's bubble beside what the
// plan allows at those costs, not only at equal ones. With --trace=FILE it
// also writes the plan as run on paper in the trace format (common/trace.h),
// costs taken as milliseconds, for tessera-trace timeline to draw beside a
// real run.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench/usage.h"
#include "pipeline/action.h"
#include "pipeline/plan_simulator.h"
#include "pipeline/schedules.h"

namespace {

constexpr char kUsage[] =
    "usage: plan_on_paper SCHEDULE WORKERS CHUNKS MICRO_BATCHES F B W [TRANSFER] [--trace=FILE]\n"
    "  the mean idle share of the workers, and each worker's, when every F, B\n"
    "  and W takes the time given (any unit; a schedule without a split\n"
    "  backward runs B + W as one BW); --trace=FILE writes the run on paper\n"
    "  as a trace (the costs read as milliseconds)\n";

using tessera::pipeline::ActionCosts;
using tessera::pipeline::ActionKind;

double CostOf(ActionKind kind, const ActionCosts& costs) {
  switch (kind) {
    case ActionKind::kForward:
      return costs.forward;
    case ActionKind::kInputBackward:
      return costs.input_backward;
    case ActionKind::kWeightBackward:
      return costs.weight_backward;
    case ActionKind::kFullBackward:
      return costs.input_backward + costs.weight_backward;
    default:
      return 0;
  }
}

// One span per computing action, as PlanWorker's (pipeline/plan_worker.cc).
bool WriteTrace(const std::string& path, const tessera::pipeline::SchedulePlan& plan,
                const tessera::pipeline::PlanRun& run, const ActionCosts& costs) {
  std::ofstream out(path);
  out << "{\"traceEvents\": [\n";
  const char* separator = "";
  for (int w = 0; w < plan.workers(); ++w) {
    out << separator << "{\"ph\": \"M\", \"pid\": " << w + 1
        << ", \"name\": \"process_name\", \"args\": {\"name\": \"worker " << w << "\"}}";
    separator = ",\n";
    for (size_t i = 0; i < plan.actions[w].size(); ++i) {
      const auto& action = plan.actions[w][i];
      if (!action.is_compute()) continue;
      out << separator << "{\"ph\": \"X\", \"pid\": " << w + 1
          << ", \"tid\": 1, \"cat\": \"pipeline\", \"name\": \""
          << tessera::pipeline::ToString(action) << "\", \"ts\": " << run.start[w][i] * 1000
          << ", \"dur\": " << CostOf(action.kind, costs) * 1000 << ", \"args\": {\"context\": 1}}";
    }
  }
  out << "\n]}\n";
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  std::string trace;
  if (argc > 1 && std::strncmp(argv[argc - 1], "--trace=", 8) == 0) {
    trace = argv[--argc] + 8;
  }
  if (argc != 8 && argc != 9) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  auto plan = tessera::pipeline::MakePlan(argv[1], std::atoi(argv[2]), std::atoi(argv[3]),
                                          std::atoi(argv[4]));
  if (!plan.ok()) {
    std::fprintf(stderr, "plan_on_paper: %s\n", std::string(plan.status().message()).c_str());
    return 1;
  }
  tessera::pipeline::ActionCosts costs;
  costs.forward = std::atof(argv[5]);
  costs.input_backward = std::atof(argv[6]);
  costs.weight_backward = std::atof(argv[7]);
  costs.transfer = argc == 9 ? std::atof(argv[8]) : 0;
  auto run = tessera::pipeline::SimulatePlan(*plan, costs);
  if (!run.ok()) {
    std::fprintf(stderr, "plan_on_paper: %s\n", std::string(run.status().message()).c_str());
    return 1;
  }
  double mean = 0;
  for (int w = 0; w < plan->workers(); ++w) mean += run->idle_fraction(w) / plan->workers();
  std::printf("idle %.3f", mean);
  for (int w = 0; w < plan->workers(); ++w) std::printf(" %.3f", run->idle_fraction(w));
  std::printf("\n");
  if (!trace.empty() && !WriteTrace(trace, *plan, *run, costs)) {
    std::fprintf(stderr, "plan_on_paper: cannot write %s\n", trace.c_str());
    return 1;
  }
  return 0;
}
