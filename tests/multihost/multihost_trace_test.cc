// Traces of a job across separate network hosts (see Note [Tracing], see Note
// [Trace clock alignment]): the RPC demo with one worker per host under
// tessera-run --trace, all writing to one directory (the hosts share this
// machine's file system, as a shared volume would). Each host's monotonic
// clock, which traces read, is a day apart from the next one's (its own
// time namespace, tests/testing/network_hosts.h). Every worker's file holds
// its clock offset and error bound, and the offsets measured tell those
// days apart; every call between hosts is a flow from the caller's file to
// the callee's, and on the aligned clocks the callee's span starts after
// the caller's, within the two bounds.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>

#include "tests/multihost/job.h"
#include "tests/testing/network_hosts.h"

namespace tessera::testing {
namespace {

constexpr char kRpcDemo[] = "examples/rpc_demo/rpc_demo";
constexpr int kHosts = 3;

struct WorkerTrace {
  int pid = -1;
  double offset_us = 0;
  double error_bound_us = -1;
  std::map<std::string, double> flows_out;  // flow id -> timestamp (µs)
  std::map<std::string, double> flows_in;
};

// Reads one worker's file line by line: each event is one whole line.
WorkerTrace Read(const std::string& path) {
  WorkerTrace trace;
  std::ifstream file(path);
  const std::regex process("\"pid\":(\\d+),\"name\":\"process_name\"");
  const std::regex clock(
      "\"tessera_clock\",\"args\":\\{\"offset_us\":([-0-9.]+),"
      "\"error_bound_us\":([0-9.]+)");
  const std::regex flow("\"ph\":\"([sf])\".*\"ts\":([0-9.]+),.*\"id\":\"(0x[0-9a-f]+)\"");
  std::string line;
  std::smatch match;
  while (std::getline(file, line)) {
    if (std::regex_search(line, match, process)) trace.pid = std::stoi(match[1]);
    if (std::regex_search(line, match, clock)) {
      trace.offset_us = std::stod(match[1]);
      trace.error_bound_us = std::stod(match[2]);
    }
    if (std::regex_search(line, match, flow)) {
      (match[1] == "s" ? trace.flows_out : trace.flows_in)[match[3]] = std::stod(match[2]);
    }
  }
  return trace;
}

TEST(MultiHostTraceTest, FlowsLinkCallsBetweenHostsOnAlignedClocks) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, kHosts);
  const std::string dir = ::testing::TempDir() + "/multihost_trace";
  std::filesystem::remove_all(dir);
  auto job = Job::Launched(hosts, 1, {kRpcDemo}, {}, "", {"--trace", dir});
  for (int code : job->Finish(absl::Seconds(240))) ASSERT_EQ(code, 0) << job->output();

  std::map<std::string, WorkerTrace> traces;
  for (int rank = 0; rank < kHosts; ++rank) {
    const std::string name = "worker" + std::to_string(rank);
    traces[name] = Read(dir + "/" + name + ".json");
    EXPECT_EQ(traces[name].pid, rank) << name;
    EXPECT_GE(traces[name].error_bound_us, 0) << name << " has no tessera_clock event";
  }
  // Rank r runs on host r: its offset to rank 0's clock makes up for the
  // hosts' monotonic clocks being days apart (and nothing else: the wall
  // clock that rank 0's trace clock reads is one on all hosts), to within
  // the two error bounds and a millisecond of wall-clock slew between the
  // readings.
  for (int rank = 1; rank < kHosts; ++rank) {
    const WorkerTrace& worker = traces["worker" + std::to_string(rank)];
    const WorkerTrace& first = traces["worker0"];
    const double apart_us = absl::ToDoubleMicroseconds(NetworkHosts::MonotonicOffset(rank) -
                                                       NetworkHosts::MonotonicOffset(0));
    EXPECT_NEAR(first.offset_us - worker.offset_us, apart_us,
                worker.error_bound_us + first.error_bound_us + 1000)
        << "worker" << rank << "'s clock offset does not make up for its host's clock";
  }
  int linked = 0;
  for (const auto& [caller, from] : traces) {
    for (const auto& [callee, to] : traces) {
      if (caller == callee) continue;
      for (const auto& [id, sent] : from.flows_out) {
        auto received = to.flows_in.find(id);
        if (received == to.flows_in.end()) continue;
        ++linked;
        // Timestamps of about 1.8e15 µs: a double holds a quarter µs.
        const double slack = from.error_bound_us + to.error_bound_us + 0.5;
        EXPECT_GE(received->second, sent - slack)
            << "call " << id << " from " << caller << " reached " << callee
            << " before it was sent, on the aligned clocks";
      }
    }
  }
  // The demo's 2,000 calls to the other two hosts, and their nested calls.
  EXPECT_GT(linked, 2000) << job->output();
}

}  // namespace
}  // namespace tessera::testing
