// Tensors in shared memory (see Note [Tensors in shared memory], rpc/
// shared_tensors.h): the segment and the descriptor inbox in one process,
// then between real worker processes — a handle travels to a worker on the
// host and both see one memory; the sender may drop its tensor at once;
// forced onto TCP, or to a peer without an inbox, the bytes travel; nothing
// stays mapped once every tensor is gone.
#include "rpc/shared_tensors.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/ones.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/mutex.h"
#include "common/status.h"
#include "rpc/init.h"
#include "rpc/tensorpipe/fd_inbox.h"
#include "tests/testing/rpc_world.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

using rpc::FdInbox;
using rpc::SharedSegment;

// Descriptors `pid` holds on Tessera's segments (the memfd's name shows in
// /proc/PID/fd), plus its mappings of them.
int SegmentsHeldBy(pid_t pid) {
  int held = 0;
  const std::string fds = absl::StrCat("/proc/", pid, "/fd");
  if (DIR* dir = opendir(fds.c_str())) {
    while (dirent* entry = readdir(dir)) {
      char link[256] = {};
      const std::string path = fds + "/" + entry->d_name;
      if (readlink(path.c_str(), link, sizeof(link) - 1) > 0 &&
          std::strstr(link, "memfd:tessera-") != nullptr) {
        ++held;
      }
    }
    closedir(dir);
  }
  std::ifstream maps(absl::StrCat("/proc/", pid, "/maps"));
  for (std::string line; std::getline(maps, line);) {
    if (line.find("memfd:tessera-") != std::string::npos) ++held;
  }
  return held;
}

int OpenDescriptors() {
  int count = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (readdir(dir) != nullptr) ++count;
    closedir(dir);
  }
  return count;
}

// Sends one datagram to the inbox named `name`, with `fds` attached.
void SendRaw(const std::string& name, const std::string& payload, const std::vector<int>& fds) {
  const int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  iovec iov{const_cast<char*>(payload.data()), payload.size()};
  std::vector<char> control(CMSG_SPACE(sizeof(int) * std::max<size_t>(fds.size(), 1)), 0);
  msghdr message{};
  message.msg_name = &address;
  message.msg_namelen = offsetof(sockaddr_un, sun_path) + 1 + name.size();
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  if (!fds.empty()) {
    message.msg_control = control.data();
    message.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  }
  ASSERT_GE(sendmsg(fd, &message, 0), 0) << strerror(errno);
  close(fd);
}

std::string Ticket(uint64_t ticket) { return std::string(reinterpret_cast<char*>(&ticket), 8); }

TEST(SharedSegmentTest, ATensorInSharedMemoryIsOrdinaryToUse) {
  at::Tensor tensor = rpc::EmptyInSharedMemory({3, 4}, at::kFloat);
  EXPECT_TRUE(rpc::IsInSharedMemory(tensor));
  tensor.copy_(at::arange(12, at::kFloat).reshape({3, 4}));
  EXPECT_EQ(tensor.sum().item<float>(), 66.0f);
  // A view shares the segment; a copy does not.
  EXPECT_TRUE(rpc::IsInSharedMemory(tensor[1]));
  EXPECT_EQ(rpc::SharedViewOf(tensor[1])->offset, 4 * sizeof(float));
  EXPECT_FALSE(rpc::IsInSharedMemory(tensor.clone()));
  at::Tensor moved = rpc::ToSharedMemory(at::ones({5}));
  EXPECT_TRUE(rpc::IsInSharedMemory(moved));
  EXPECT_EQ(moved.sum().item<float>(), 5.0f);
  EXPECT_EQ(rpc::ToSharedMemory(moved).data_ptr(), moved.data_ptr());
  // The user API throws StatusError, as every public call does.
  const absl::Status negative = StatusOf([] { rpc::EmptyInSharedMemory({-1}, at::kFloat); });
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument) << negative;
}

TEST(SharedSegmentTest, AdoptTakesOnlyASealedSegmentOfTheNamedIdAndSize) {
  auto segment = SharedSegment::Create(4096);
  ASSERT_TRUE(segment.ok());
  // The real one, received again in this process: the mapping already here.
  auto again = SharedSegment::Adopt(dup((*segment)->fd()), (*segment)->id(), 4096);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->data(), (*segment)->data());

  SharedSegment::Id other = (*segment)->id();
  other[0] ^= 1;
  EXPECT_FALSE(SharedSegment::Adopt(dup((*segment)->fd()), other, 4096).ok());
  EXPECT_FALSE(SharedSegment::Adopt(dup((*segment)->fd()), (*segment)->id(), 8192).ok());
  EXPECT_FALSE(SharedSegment::Adopt(open("/dev/null", O_RDWR), (*segment)->id(), 4096).ok());
  // Named right but not sealed: it could shrink under the mapping.
  const std::string name = "tessera-" + std::string(32, '0');  // the id of all zero bytes, in hex
  const int unsealed = memfd_create(name.c_str(), MFD_CLOEXEC);
  ASSERT_EQ(ftruncate(unsealed, 4096), 0);
  const auto refused = SharedSegment::Adopt(unsealed, SharedSegment::Id{}, 4096);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("sealed"), std::string::npos) << refused.status();

  EXPECT_FALSE(rpc::TensorInSegment(*segment, 4096 - 4, {2}, at::kFloat).ok());  // past the end
  EXPECT_FALSE(rpc::TensorInSegment(*segment, 2, {1}, at::kFloat).ok());         // misaligned
  EXPECT_FALSE(rpc::TensorInSegment(*segment, 0, {int64_t{1} << 62, 8}, at::kFloat).ok());
  EXPECT_FALSE(rpc::TensorInSegment(*segment, 0, {-1}, at::kFloat).ok());
  EXPECT_TRUE(rpc::TensorInSegment(*segment, 4096 - 8, {2}, at::kFloat).ok());
}

TEST(FdInboxTest, APostedDescriptorIsTakenOnceByItsTicket) {
  auto inbox = FdInbox::Open();
  ASSERT_TRUE(inbox.ok()) << inbox.status();
  auto sender = FdInbox::Open();
  ASSERT_TRUE(sender.ok());
  auto segment = SharedSegment::Create(64);
  ASSERT_TRUE(segment.ok());
  const uint64_t ticket = (*sender)->NewTicket();
  ASSERT_TRUE((*sender)->Post((*inbox)->name(), {ticket}, {(*segment)->fd()}).ok());
  auto fd = (*inbox)->Take(ticket);
  ASSERT_TRUE(fd.ok()) << fd.status();
  auto adopted = SharedSegment::Adopt(*fd, (*segment)->id(), 64);
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  EXPECT_EQ((*inbox)->Take(ticket).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*sender)->Post("tessera-fdbox-nobody", {1}, {(*segment)->fd()}).code(),
            absl::StatusCode::kUnavailable);
}

TEST(FdInboxTest, MalformedPostsAreDroppedAndTheirDescriptorsClosed) {
  auto inbox = FdInbox::Open();
  ASSERT_TRUE(inbox.ok());
  const int before = OpenDescriptors();
  const int a = open("/dev/null", O_RDONLY);
  const int b = open("/dev/null", O_RDONLY);
  SendRaw((*inbox)->name(), "seven b", {a});              // not a whole ticket
  SendRaw((*inbox)->name(), Ticket(1) + Ticket(2), {a});  // two tickets, one descriptor
  SendRaw((*inbox)->name(), "", {a, b});                  // descriptors, no tickets
  SendRaw((*inbox)->name(), Ticket(3), {});               // a ticket, no descriptor
  SendRaw((*inbox)->name(), std::string(9000, 'x'), {});  // larger than any post
  close(a);
  close(b);
  for (uint64_t ticket : {1, 2, 3}) EXPECT_FALSE((*inbox)->Take(ticket).ok());
  EXPECT_EQ((*inbox)->unclaimed(), 0u);
  EXPECT_EQ(OpenDescriptors(), before) << "a dropped post's descriptors stayed open";
  // A duplicate ticket keeps its first descriptor and closes the second.
  const int c = open("/dev/null", O_RDONLY);
  SendRaw((*inbox)->name(), Ticket(7), {c});
  SendRaw((*inbox)->name(), Ticket(7), {c});
  close(c);
  auto taken = (*inbox)->Take(7);
  ASSERT_TRUE(taken.ok());
  close(*taken);
  EXPECT_EQ(OpenDescriptors(), before);
}

// Only this user's processes may post: the kernel's SCM_CREDENTIALS say
// who sent a datagram, whatever it claims.
TEST(FdInboxTest, AnotherUsersPostIsDropped) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to send as another user";
  auto inbox = FdInbox::Open();
  ASSERT_TRUE(inbox.ok());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int fd = open("/dev/null", O_RDONLY);
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    SendRaw((*inbox)->name(), Ticket(9), {fd});
    _exit(::testing::Test::HasFailure() ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ((*inbox)->Take(9).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*inbox)->unclaimed(), 0u);
}

rpc::Registry SharedTensorRegistry() {
  rpc::Registry registry = MakeTestRegistry();
  registry.Register("is_shared", [](at::Tensor t) { return rpc::IsInSharedMemory(t); });
  registry.Register("fill", [](at::Tensor t, double value) {
    t.fill_(value);
    return true;
  });
  registry.Register("sum", [](at::Tensor t) { return t.sum().item<double>(); });
  // The sum of a tensor that came as a handle; -1 if its bytes travelled.
  registry.Register("shared_sum", [](at::Tensor t) {
    return rpc::IsInSharedMemory(t) ? t.sum().item<double>() : -1.0;
  });
  // A tensor the callee makes in shared memory and drops once answered.
  registry.Register("shared_arange",
                    [](int64_t n) { return rpc::ToSharedMemory(at::arange(n, at::kFloat)); });
  registry.Register("segments_held", [] { return int64_t{SegmentsHeldBy(getpid())}; });
  // Sends `target` a tensor in shared memory of `elements` ones; its
  // shared_sum (-1 when the bytes travelled).
  registry.Register(
      "send_shared_to", [](rpc::CallContext& ctx, std::string target, int64_t elements) {
        return ctx.runtime->RpcSync<double>(
            target, "shared_sum", rpc::EmptyInSharedMemory({elements}, at::kFloat).fill_(1));
      });
  // Holds a tensor for the rest of the process's life.
  registry.Register("keep", [](at::Tensor t) {
    static auto* kept = new std::vector<at::Tensor>;
    static Mutex mu;
    MutexLock lock(&mu);
    kept->push_back(t);
    return true;
  });
  return registry;
}

TESSERA_WORKER_SCENARIO(serve_shared_tensors) {
  return ServeUntilShutdown("serve_shared_tensors",
                            rpc::TryInit(TestWorkerOptions(), SharedTensorRegistry()));
}

class SharedTensorsTest : public RpcWorld {
 protected:
  std::string ChildScenario() const override { return "serve_shared_tensors"; }
  rpc::Registry MakeRegistry() override { return SharedTensorRegistry(); }
  void Configure(rpc::RpcOptions& options) override {
    if (rank0_over_tcp_) options.tensorpipe.same_host = rpc::SameHostTransport::kTcp;
    if (unsent_bytes_bound_ > 0) options.queues.max_unsent_bytes_per_peer = unsent_bytes_bound_;
  }
  bool rank0_over_tcp_ = false;
  uint64_t unsent_bytes_bound_ = 0;

  at::Tensor SharedOnes(int64_t n) { return rpc::EmptyInSharedMemory({n}, at::kFloat).fill_(1.0f); }
  // Makes `calls` calls of `function` at once, call i with its own tensor of
  // `elements` floats in shared memory, all i, dropped as soon as the call is
  // made; expects each answer to be the sum, i x elements.
  void ExpectSumsOfDroppedTensors(const std::string& function, int calls, int64_t elements) {
    std::vector<Future<double>> sums;
    for (int i = 0; i < calls; ++i) {
      sums.push_back(rt().RpcAsync<double>("worker1", function, SharedOnes(elements).mul_(i)));
    }
    for (int i = 0; i < calls; ++i) {
      auto sum = sums[i].Wait(absl::Seconds(60));
      ASSERT_TRUE(sum.ok()) << sum.status();
      EXPECT_EQ(*sum, static_cast<double>(elements) * i) << function << ", call " << i;
    }
  }
  // Polls (with a deadline) until no process of the job holds a segment:
  // the last holders drop theirs after their answers are written.
  void ExpectNothingHeldSoon() {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    int child = -1, self = -1;
    while (absl::Now() < deadline) {
      child = static_cast<int>(rt().RpcSync<int64_t>("worker1", "segments_held"));
      self = SegmentsHeldBy(getpid());
      if (child == 0 && self == 0) return;
      absl::SleepFor(absl::Milliseconds(20));
    }
    ADD_FAILURE() << "segments still held: worker1 " << child << ", worker0 " << self;
  }
};

TEST_F(SharedTensorsTest, APeerOnTheHostGetsTheSameMemory) {
  StartWorld(2);
  at::Tensor t = SharedOnes(1 << 20);
  EXPECT_TRUE(rt().RpcSync<bool>("worker1", "is_shared", t));
  EXPECT_EQ(rt().RpcSync<double>("worker1", "sum", t), double{1 << 20});
  // The callee's write is the caller's.
  ASSERT_TRUE(rt().RpcSync<bool>("worker1", "fill", t, 7.0));
  EXPECT_EQ(t.sum().item<double>(), 7.0 * (1 << 20));
  // An echo comes back as the caller's own memory: no byte copied.
  at::Tensor back = rt().RpcSync<at::Tensor>("worker1", "echo", t);
  EXPECT_EQ(back.data_ptr(), t.data_ptr());
  // A view travels as its part of the segment.
  at::Tensor tail = t.narrow(0, 1000, 24);
  tail.fill_(2.0f);
  EXPECT_EQ(rt().RpcSync<double>("worker1", "sum", tail), 48.0);
  // Mixed with ordinary tensors, in order.
  at::Tensor sum = rt().RpcSync<at::Tensor>("worker1", "add", SharedOnes(8), at::ones({8}));
  EXPECT_EQ(sum.sum().item<float>(), 16.0f);
  // A segment the callee made: it dropped its tensor once it answered.
  at::Tensor made = rt().RpcSync<at::Tensor>("worker1", "shared_arange", int64_t{1000});
  EXPECT_TRUE(rpc::IsInSharedMemory(made));
  EXPECT_EQ(made.sum().item<double>(), 999.0 * 1000 / 2);
  t = at::Tensor();
  back = at::Tensor();
  tail = at::Tensor();
  made = at::Tensor();
  ExpectNothingHeldSoon();
}

TEST_F(SharedTensorsTest, TheSenderMayDropItsTensorAtOnce) {
  StartWorld(2);
  // Eight: fewer posts than an inbox's queue holds (net.unix.max_dgram_qlen,
  // 10), so every one goes as a handle however late the callee drains it;
  // shared_sum answers -1 for bytes that travelled.
  ExpectSumsOfDroppedTensors("shared_sum", 8, 4096);
  ExpectNothingHeldSoon();
}

// A burst larger than the inbox's queue: each post waits for room (see Note
// [Descriptor inbox]), or after 100 ms its bytes travel; either way every
// answer is right. (How many went as handles depends on scheduling: on two
// idle cores, all 40.)
TEST_F(SharedTensorsTest, ABurstPastTheInboxsQueueGetsEveryAnswerRight) {
  StartWorld(2);
  ExpectSumsOfDroppedTensors("sum", 40, 4096);
  ExpectNothingHeldSoon();
}

TEST_F(SharedTensorsTest, ForcedOntoTcpTheBytesTravel) {
  rank0_over_tcp_ = true;
  StartWorld(2, {{"TESSERA_TENSORPIPE_SAME_HOST", "tcp"}});
  at::Tensor t = SharedOnes(1 << 16);
  EXPECT_FALSE(rt().RpcSync<bool>("worker1", "is_shared", t));
  ASSERT_TRUE(rt().RpcSync<bool>("worker1", "fill", t, 3.0));
  EXPECT_EQ(t.sum().item<double>(), double{1 << 16}) << "a copy's write reached the original";
  at::Tensor back = rt().RpcSync<at::Tensor>("worker1", "echo", t);
  EXPECT_NE(back.data_ptr(), t.data_ptr());
  EXPECT_TRUE(back.equal(t));
}

// A peer whose own transport is TCP on this host publishes no inbox; a
// worker with one still sends it the bytes.
TEST_F(SharedTensorsTest, APeerWithoutAnInboxGetsTheBytes) {
  StartWorld(2, {{"TESSERA_TENSORPIPE_SAME_HOST", "tcp"}});
  const std::string locality = rt().GetWorkerInfo("worker1").locality;
  EXPECT_EQ(locality.find("fdbox="), std::string::npos) << locality;
  at::Tensor t = SharedOnes(1 << 16);
  EXPECT_FALSE(rt().RpcSync<bool>("worker1", "is_shared", t));
  EXPECT_EQ(rt().RpcSync<double>("worker1", "sum", t), double{1 << 16});
  at::Tensor made = rt().RpcSync<at::Tensor>("worker1", "shared_arange", int64_t{10});
  EXPECT_FALSE(rpc::IsInSharedMemory(made));
  EXPECT_EQ(made.sum().item<float>(), 45.0f);
}

// Many senders, one inbox: 15 workers post to worker0 at once, past its
// queue (net.unix.max_dgram_qlen, 10 by default). Every answer is right.
// A post finds room at once in an inbox's queue however late its thread
// drains it, so at least a queue's worth of the posts go as handles
// whatever the scheduling: the bound asserted. Past that, a post waits up
// to 100 ms for room (see Note [Descriptor inbox]); on a loaded machine it may
// wait that out and send the bytes instead, so the rest is reported.
TEST_F(SharedTensorsTest, ManySendersShareOneInbox) {
  constexpr int kWorld = 16;
  int queue = 10;
  std::ifstream("/proc/sys/net/unix/max_dgram_qlen") >> queue;
  StartWorld(kWorld);
  std::vector<Future<double>> sums;
  for (int rank = 1; rank < kWorld; ++rank) {
    sums.push_back(rt().RpcAsync<double>(absl::StrCat("worker", rank), "send_shared_to",
                                         std::string("worker0"), int64_t{1 << 16}));
  }
  int as_handles = 0;
  for (auto& sum : sums) {
    auto value = sum.Wait(absl::Seconds(60));
    ASSERT_TRUE(value.ok()) << value.status();
    if (*value != -1) {
      ++as_handles;
      EXPECT_EQ(*value, double{1 << 16});
    }
  }
  std::printf("%d of %d went as handles (inbox queue %d)\n", as_handles, kWorld - 1, queue);
  EXPECT_GE(as_handles, std::min(queue, kWorld - 1));
}

// See Note [Bounded queues]: a tensor that goes as a handle is not bytes
// waiting to be sent. Calls made before the connection's handshake wait
// for it, counted against the bound: 8 x 4 MiB in shared memory fit a
// bound of 1 MiB.
TEST_F(SharedTensorsTest, HandlesDoNotCountAsUnsentBytes) {
  unsent_bytes_bound_ = 1 << 20;
  StartWorld(2);
  ExpectSumsOfDroppedTensors("shared_sum", 8, 1 << 20);
}

// A segment is the kernel's to free: killing a process that made one, or
// that holds one, takes nothing from the survivors.
TEST_F(SharedTensorsTest, TheMemoryOutlivesAKilledHolder) {
  expect_clean_exit_ = false;
  StartWorld(2, {{"TESSERA_TEST_SHUTDOWN_TIMEOUT_S", "30"}}, absl::Seconds(30));
  at::Tensor made = rt().RpcSync<at::Tensor>("worker1", "shared_arange", int64_t{1000});
  at::Tensor mine = SharedOnes(1 << 20);
  ASSERT_TRUE(rt().RpcSync<bool>("worker1", "keep", mine));
  ASSERT_TRUE(rpc::IsInSharedMemory(made));
  children_[0]->Kill();
  EXPECT_EQ(children_[0]->Wait(absl::Seconds(30)), 128 + SIGKILL);
  EXPECT_EQ(made.sum().item<double>(), 999.0 * 1000 / 2);
  mine.fill_(2.0f);
  EXPECT_EQ(mine.sum().item<double>(), 2.0 * (1 << 20));
  made = at::Tensor();
  mine = at::Tensor();
  EXPECT_EQ(SegmentsHeldBy(getpid()), 0);
  EXPECT_FALSE(rt().TryShutdown().ok());  // it names the dead worker
}

}  // namespace
}  // namespace tessera::testing
