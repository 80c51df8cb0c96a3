// The floor under the RPC benchmark: a bare TensorPipe ping-pong of one
// 4-byte tensor between two processes (shm transport + cma channel when
// viable, as the agent uses), with all work done in TensorPipe callbacks —
// no Tessera code, no thread hand-offs. Prints p50/p99 round trip in µs,
// and the echo bandwidth of 64 MiB (2 x size / round trip) with buffers
// allocated once and reused (no page faults: the channel's own speed).
#include <tensorpipe/tensorpipe.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "bench/usage.h"

namespace tp = tensorpipe;
using Clock = std::chrono::steady_clock;

std::shared_ptr<tp::Context> MakeContext(bool shm) {
  auto context = std::make_shared<tp::Context>();
  context->registerTransport(0, "uv", tp::transport::uv::create());
  if (shm) context->registerTransport(10, "shm", tp::transport::shm::create());
  context->registerChannel(0, "basic", tp::channel::basic::create());
  context->registerChannel(10, "cma", tp::channel::cma::create());
  return context;
}

constexpr size_t kBig = 64 << 20;

// Echoes every message back, forever (until the peer closes).
void Serve(std::shared_ptr<tp::Pipe> pipe, char* buffer) {
  pipe->readDescriptor([pipe, buffer](const tp::Error& e, tp::Descriptor d) {
    if (e) return;
    const size_t length = d.tensors[0].length;
    tp::Allocation a;
    a.tensors.resize(1);
    a.tensors[0].buffer = tp::CpuBuffer{buffer};
    pipe->read(std::move(a), [pipe, buffer, length](const tp::Error& e) {
      if (e) return;
      tp::Message m;
      m.tensors.resize(1);
      m.tensors[0].buffer = tp::CpuBuffer{buffer};
      m.tensors[0].length = length;
      pipe->write(std::move(m), [](const tp::Error&) {});
      Serve(pipe, buffer);
    });
  });
}

constexpr char kUsage[] =
    "usage: tensorpipe_floor [--no-shm]\n"
    "A bare TensorPipe ping-pong done in its callbacks: the floor under rpc_bench; prints JSON.\n";

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  const bool shm = !(argc > 1 && std::strcmp(argv[1], "--no-shm") == 0);
  int fds[2], quit[2];  // child -> parent: URL; parent -> child: EOF to stop
  if (pipe(fds) != 0 || pipe(quit) != 0) return 1;
  pid_t child = fork();
  if (child == 0) {
    auto context = MakeContext(shm);
    auto listener = context->listen({"uv://127.0.0.1:0", shm ? "shm://" : "uv://127.0.0.1:0"});
    std::string url = listener->url("uv");
    if (write(fds[1], url.data(), url.size()) < 0) _exit(1);
    close(fds[1]);
    close(quit[1]);
    static std::vector<char> buffer(kBig, 1);
    listener->accept([&](const tp::Error& e, std::shared_ptr<tp::Pipe> pipe) {
      if (!e) Serve(pipe, buffer.data());
    });
    char c;
    if (read(quit[0], &c, 1) < 0) {}  // parent closes its end when finished
    context->close();
    context->join();
    _exit(0);
  }
  close(fds[1]);
  close(quit[0]);
  char url[256] = {0};
  if (read(fds[0], url, sizeof(url) - 1) <= 0) return 1;
  auto context = MakeContext(shm);
  auto pipe = context->connect(url);
  std::vector<char> big(kBig, 1);
  auto echo = [&](size_t length) {
    std::promise<void> done;
    tp::Message m;
    m.tensors.resize(1);
    m.tensors[0].buffer = tp::CpuBuffer{big.data()};
    m.tensors[0].length = length;
    pipe->write(std::move(m), [](const tp::Error&) {});
    pipe->readDescriptor([&](const tp::Error& e, tp::Descriptor) {
      tp::Allocation a;
      a.tensors.resize(1);
      a.tensors[0].buffer = tp::CpuBuffer{big.data()};
      pipe->read(std::move(a), [&](const tp::Error&) { done.set_value(); });
    });
    done.get_future().wait();
  };
  std::vector<double> rtts;
  for (int i = 0; i < 5500; ++i) {
    auto start = Clock::now();
    echo(sizeof(float));
    if (i >= 500) {
      rtts.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
  }
  echo(kBig);
  auto start = Clock::now();
  for (int i = 0; i < 20; ++i) echo(kBig);
  const double gbps = 2.0 * kBig * 20 /
                      std::chrono::duration<double>(Clock::now() - start).count() / 1e9;
  std::sort(rtts.begin(), rtts.end());
  std::printf("{\"floor_rtt_p50_us\": %.1f, \"floor_rtt_p99_us\": %.1f, "
              "\"floor_gbps_64mb\": %.2f}\n",
              rtts[rtts.size() / 2], rtts[rtts.size() * 99 / 100], gbps);
  pipe->close();
  context->close();
  context->join();
  close(quit[1]);
  int status;
  waitpid(child, &status, 0);
  return 0;
}
