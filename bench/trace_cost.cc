// What a span costs the thread that records it (see Note [Tracing]): a span of
// an RPC call's shape (a name, an argument, a flow) begun and ended in a
// loop, with tracing off and on (the writer thread writing to a file in a
// temporary directory). Prints JSON: ns per span.
//   bazel-bin/bench/trace_cost [SPANS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/usage.h"
#include "common/trace.h"

namespace {

constexpr char kUsage[] =
    "usage: trace_cost [SPANS]\n"
    "Nanoseconds per span (begin, argument, flow, end) with tracing off and on.\n";

double NanosPerSpan(int spans) {
  using tessera::trace::Span;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < spans; ++i) {
    Span span = Span::Begin(tessera::trace::Track::kCallsOut, "rpc", "checked_sqrt");
    span.Arg("to", "worker1");
    span.FlowOut(tessera::trace::NewFlowId());
  }
  const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
  return took.count() / spans;
}

}  // namespace

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  const int spans = argc > 1 ? std::atoi(argv[1]) : 200000;
  const double off = NanosPerSpan(spans);
  char dir[] = "/tmp/trace_cost.XXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  if (!tessera::trace::Start(dir, "bench", 0).ok()) return 1;
  const double on = NanosPerSpan(spans);
  tessera::trace::Stop();
  std::remove((std::string(dir) + "/bench.json").c_str());
  std::remove(dir);
  std::printf("{\"spans\": %d, \"off_ns_per_span\": %.1f, \"on_ns_per_span\": %.1f}\n", spans, off,
              on);
  return 0;
}
