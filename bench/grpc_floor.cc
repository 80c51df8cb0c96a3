// The floor under the gRPC agent's benchmark: a bare gRPC C++ echo written
// the way an ordinary gRPC user writes one — the generated synchronous stub
// and service of proto/worker_service.proto, one bidirectional stream, each
// payload in a Frame's tensor_data — between two processes on loopback, with
// the message size limits lifted as the agent lifts them. No Tessera code.
//
// Prints one JSON object with the same workloads as rpc_bench:
//   floor_rtt_p50_us / floor_rtt_p99_us  round trip of a 4-byte payload
//   floor_calls_per_s                    echoes with 64 in flight
//   floor_gbps_1mb / floor_gbps_64mb     echo bandwidth: 2 x size / round trip
#include <grpcpp/grpcpp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/usage.h"
#include "proto/worker_service.grpc.pb.h"

namespace {

using tessera::proto::Frame;
using Clock = std::chrono::steady_clock;
using Stream = grpc::ClientReaderWriter<Frame, Frame>;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

class EchoService final : public tessera::proto::Worker::Service {
  grpc::Status Exchange(grpc::ServerContext*,
                        grpc::ServerReaderWriter<Frame, Frame>* stream) override {
    Frame frame;
    while (stream->Read(&frame)) {
      if (!stream->Write(frame)) break;
    }
    return grpc::Status::OK;
  }
};

// Serves echoes until `quit_fd` reaches end of file; reports the port on
// `port_fd` first.
[[noreturn]] void ServeChild(int port_fd, int quit_fd) {
  EchoService service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(INT_MAX);
  builder.SetMaxSendMessageSize(INT_MAX);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || write(port_fd, &port, sizeof(port)) != sizeof(port)) _exit(1);
  char c;
  if (read(quit_fd, &c, 1) < 0) {}  // the parent closes its end when finished
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  _exit(0);
}

Frame Payload(size_t bytes) {
  Frame frame;
  frame.add_tensor_data(std::string(bytes, '\1'));
  return frame;
}

bool Echo(Stream& stream, const Frame& request, Frame* reply) {
  return stream.Write(request) && stream.Read(reply);
}

double Bandwidth(Stream& stream, size_t bytes, int iterations) {
  const Frame request = Payload(bytes);
  Frame reply;
  Echo(stream, request, &reply);
  auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) Echo(stream, request, &reply);
  return 2.0 * bytes * iterations / Seconds(Clock::now() - start) / 1e9;
}

// `calls` echoes with at most `window` in flight: this thread writes, a
// second one reads.
double CallsPerSecond(Stream& stream, int calls, int window) {
  const Frame request = Payload(sizeof(float));
  std::mutex mu;
  std::condition_variable room;
  int in_flight = 0;
  auto start = Clock::now();
  std::thread reader([&] {
    Frame reply;
    for (int i = 0; i < calls && stream.Read(&reply); ++i) {
      std::lock_guard<std::mutex> lock(mu);
      --in_flight;
      room.notify_one();
    }
  });
  for (int i = 0; i < calls; ++i) {
    {
      std::unique_lock<std::mutex> lock(mu);
      room.wait(lock, [&] { return in_flight < window; });
      ++in_flight;
    }
    if (!stream.Write(request)) break;
  }
  reader.join();
  return calls / Seconds(Clock::now() - start);
}

}  // namespace

constexpr char kUsage[] =
    "usage: grpc_floor\n"
    "A bare gRPC echo between two processes: the floor under the gRPC agent; prints JSON.\n";

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  int port_pipe[2], quit_pipe[2];
  if (pipe(port_pipe) != 0 || pipe(quit_pipe) != 0) return 1;
  // Fork before either side touches gRPC: its threads do not survive fork.
  const pid_t child = fork();
  if (child == 0) {
    close(port_pipe[0]);
    close(quit_pipe[1]);
    ServeChild(port_pipe[1], quit_pipe[0]);
  }
  close(port_pipe[1]);
  close(quit_pipe[0]);
  int port = 0;
  if (read(port_pipe[0], &port, sizeof(port)) != sizeof(port) || port == 0) return 1;

  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(INT_MAX);
  args.SetMaxSendMessageSize(INT_MAX);
  auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                           grpc::InsecureChannelCredentials(), args);
  auto stub = tessera::proto::Worker::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
  std::unique_ptr<Stream> stream = stub->Exchange(&context);

  const Frame small = Payload(sizeof(float));
  Frame reply;
  std::vector<double> rtts;
  for (int i = 0; i < 5500; ++i) {
    auto start = Clock::now();
    if (!Echo(*stream, small, &reply)) return 1;
    if (i >= 500) rtts.push_back(Seconds(Clock::now() - start) * 1e6);
  }
  std::sort(rtts.begin(), rtts.end());
  const double calls_per_s = CallsPerSecond(*stream, 20000, 64);
  const double gbps_1mb = Bandwidth(*stream, 1 << 20, 500);
  const double gbps_64mb = Bandwidth(*stream, 64 << 20, 20);
  std::printf("{\"floor_rtt_p50_us\": %.1f, \"floor_rtt_p99_us\": %.1f, "
              "\"floor_calls_per_s\": %.0f, \"floor_gbps_1mb\": %.2f, "
              "\"floor_gbps_64mb\": %.2f}\n",
              rtts[rtts.size() / 2], rtts[rtts.size() * 99 / 100], calls_per_s, gbps_1mb,
              gbps_64mb);

  stream->WritesDone();
  const grpc::Status finished = stream->Finish();
  close(quit_pipe[1]);
  int status = 0;
  waitpid(child, &status, 0);
  return finished.ok() ? 0 : 1;
}
