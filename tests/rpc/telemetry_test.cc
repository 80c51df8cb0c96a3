// Metrics and traces of real calls (see Note [Metrics], see Note [Tracing], see Note
// [Call telemetry]): a worker calls itself over the real transport, so each
// call is counted and traced on both sides. Metrics and the trace file are
// the process's, so each test starts from metrics::Reset() / trace::Stop().
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/metrics.h"
#include "common/status.h"
#include "common/trace.h"
#include "rpc/init.h"
#include "store/store_server.h"
#include "tests/testing/multiprocess.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

constexpr int kCalls = 10;

class TelemetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    metrics::Reset();
    trace::Stop();
    unsetenv("TESSERA_METRICS");
    unsetenv("TESSERA_TRACE");
    store_ = ValueOrThrow(store::StoreServer::Start("127.0.0.1", 0, TestJobSecret()));
  }
  void TearDown() override {
    metrics::Reset();
    trace::Stop();
  }

  // A worker that makes kCalls echo calls and one failing call to itself.
  void RunCalls(rpc::RpcOptions options) {
    auto runtime = rpc::TryInit(std::move(options), MakeTestRegistry());
    ASSERT_TRUE(runtime.ok()) << runtime.status();
    for (int i = 0; i < kCalls; ++i) {
      EXPECT_TRUE(
          (*runtime)->RpcSync<at::Tensor>("solo", "echo", at::ones({256})).equal(at::ones({256})));
    }
    auto failed =
        (*runtime)->RpcAsync<int64_t>("solo", "fail", std::string("no")).Wait(absl::Seconds(30));
    EXPECT_FALSE(failed.ok());
    during_ = metrics::Snapshot();
    EXPECT_TRUE((*runtime)->TryShutdown().ok());
  }

  rpc::RpcOptions Options() { return InProcessOptions("solo", 0, 1, store_->port()); }

  std::unique_ptr<store::StoreServer> store_;
  metrics::MetricsSnapshot during_;
};

TEST_F(TelemetryTest, MetricsCountEveryCallOnBothSides) {
  rpc::RpcOptions options = Options();
  options.metrics = true;
  RunCalls(std::move(options));
  const metrics::MetricsSnapshot& m = during_;
  ASSERT_TRUE(m.enabled);
  ASSERT_EQ(m.calls_out.count("echo"), 1u);
  const metrics::CallStats& out = m.calls_out.at("echo");
  EXPECT_EQ(out.calls, uint64_t{kCalls});
  EXPECT_EQ(out.errors, 0u);
  EXPECT_GE(out.bytes, uint64_t{kCalls} * 256 * sizeof(float));  // the tensors, at least
  EXPECT_EQ(out.latency.count, uint64_t{kCalls});
  EXPECT_GT(out.latency.p50, absl::ZeroDuration());
  EXPECT_LE(out.latency.p50, out.latency.p99);
  EXPECT_LE(out.latency.p99, out.latency.max);
  EXPECT_LE(out.latency.max, out.latency.total);
  ASSERT_EQ(m.calls_in.count("echo"), 1u);
  EXPECT_EQ(m.calls_in.at("echo").calls, uint64_t{kCalls});
  EXPECT_EQ(m.calls_out.at("fail").errors, 1u);
  EXPECT_EQ(m.calls_in.at("fail").errors, 1u);
  uint64_t errors = 0;
  for (const auto& [code, count] : m.errors_by_code) errors += count;
  EXPECT_EQ(errors, 2u);             // the failed call, counted out and in
  EXPECT_GE(m.open_connections, 1);  // to itself, while running
  const std::string line = m.Summary("solo");
  EXPECT_NE(line.find("calls out " + std::to_string(kCalls + 1)), std::string::npos) << line;
}

TEST_F(TelemetryTest, MetricsAreOffByDefault) {
  RunCalls(Options());
  EXPECT_FALSE(during_.enabled);
  EXPECT_TRUE(during_.calls_out.empty());
  EXPECT_TRUE(during_.calls_in.empty());
  EXPECT_FALSE(trace::Enabled());
}

TEST_F(TelemetryTest, TraceFileIsWholeAndSpansOnOneRowNeverOverlap) {
  const std::string dir = ::testing::TempDir() + "/telemetry_trace";
  rpc::RpcOptions options = Options();
  options.trace_dir = dir;
  RunCalls(std::move(options));
  ASSERT_EQ(trace::FilePath(), dir + "/solo.json");
  // Two spans at once take two rows; one after the other share the first.
  {
    trace::Span first = trace::Span::Begin(trace::Track::kCheckpoint, "test", "first");
    trace::Span second = trace::Span::Begin(trace::Track::kCheckpoint, "test", "second");
  }
  trace::Span third = trace::Span::Begin(trace::Track::kCheckpoint, "test", "third");
  third.Arg("quote", "a \"quoted\"\nline");
  third.End();
  trace::Stop();
  std::ifstream file(dir + "/solo.json");
  std::stringstream text;
  text << file.rdbuf();
  const std::string json = text.str();
  ASSERT_EQ(json.rfind("{\"traceEvents\":[\n", 0), 0u);
  ASSERT_GE(json.size(), 4u);
  EXPECT_EQ(json.substr(json.size() - 4), "\n]}\n");  // closed after the last event
  auto tid_of = [&](const std::string& name) {
    const size_t at = json.find("\"name\":\"" + name + "\"");
    EXPECT_NE(at, std::string::npos) << name;
    const size_t line = json.rfind('\n', at);
    const size_t tid = json.find("\"tid\":", line);
    return std::stoi(json.substr(tid + 6));
  };
  EXPECT_NE(tid_of("first"), tid_of("second"));
  EXPECT_EQ(tid_of("first"), tid_of("third"));
  EXPECT_NE(json.find("\"quote\":\"a \\\"quoted\\\"\\nline\""), std::string::npos);
  // Each echo: a caller span with a flow out, a callee span with the flow in.
  size_t flows_out = 0, flows_in = 0;
  for (size_t at = 0; (at = json.find("\"ph\":\"s\"", at)) != std::string::npos; ++at) ++flows_out;
  for (size_t at = 0; (at = json.find("\"ph\":\"f\"", at)) != std::string::npos; ++at) ++flows_in;
  EXPECT_GE(flows_out, size_t{kCalls + 1});
  EXPECT_EQ(flows_out, flows_in);
}

}  // namespace
}  // namespace tessera::testing
