// Every job shape across separate network hosts (tests/testing/network_hosts.h):
// one tessera-run per host, in its own network and PID namespace, meeting at
// host 0's address as a user's job on several machines would. Results are
// checked against the same training in one process, not just exit codes.
//
// Worker programs are this binary (--tessera_worker=<scenario>) or the
// examples; each test runs as root (CI does) and skips elsewhere.
#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/mse_loss.h>
#include <ATen/ops/randn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/gloo/gloo_process_group.h"
#include "common/status.h"
#include "ddp/distributed_data_parallel.h"
#include "dist_autograd/dist_autograd.h"
#include "dist_optim/distributed_optimizer.h"
#include "pipeline/pipeline_driver.h"
#include "pipeline/stage.h"
#include "rpc/init.h"
#include "rpc/runtime.h"
#include "rpc/shared_tensors.h"
#include "rref/remote.h"
#include "tests/dist_autograd/dist_autograd_world.h"
#include "tests/multihost/job.h"
#include "tests/pipeline/test_stages.h"
#include "tests/testing/launcher_process.h"
#include "tests/testing/multiprocess.h"
#include "tests/testing/network_hosts.h"
#include "tests/testing/test_certificates.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

using dist_autograd::ContextGuard;
using rref::RRef;

// A failed check in a worker: printed (the test shows it) and the worker
// exits non-zero.
#define WORKER_CHECK(condition, what)                         \
  if (!(condition)) {                                         \
    std::printf("CHECK FAILED: %s (%s)\n", what, #condition); \
    std::fflush(stdout);                                      \
    return 1;                                                 \
  }

bool AllClose(const at::Tensor& a, const at::Tensor& b) { return at::allclose(a, b, 1e-5, 1e-6); }

// The job's driver (rank 1, on a host that is neither the store's nor the
// parameters'): plain calls, an RRef forked to a third host, parameter-server
// training with distributed autograd and the DistributedOptimizer, and a
// pipeline with a stage on each other host — each against the same
// computation here.
int DriveRpcJob(rpc::Runtime& rt, rref::RRefContext& rrefs, dist_autograd::DistAutograd& autograd) {
  WORKER_CHECK(rt.RpcSync<int64_t>("worker0", "echo", int64_t{41}) == 41, "echo from host 0");
  WORKER_CHECK(rt.RpcSync<int64_t>("worker2", "echo", int64_t{42}) == 42, "echo from host 2");
  {
    // See Note [Tensors in shared memory]: to another host, its bytes travel.
    const at::Tensor shared = rpc::ToSharedMemory(ParamFor(3).detach());
    const at::Tensor back = rt.RpcSync<at::Tensor>("worker0", "echo", shared);
    WORKER_CHECK(!rpc::IsInSharedMemory(back) && back.equal(shared),
                 "a tensor in shared memory sent to another host and back");
  }
  {
    // Created here (host 1), owned by worker0 (host 0), used by worker2 (host 2).
    const at::Tensor local = ParamFor(3).detach();
    at::Tensor flat = local.to(at::kDouble).flatten();
    std::vector<double> values(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
    RRef<at::Tensor> w =
        rref::Remote<at::Tensor>(rrefs, "worker0", "new_param", values, local.sizes().vec());
    const at::Tensor sum = rt.RpcSync<at::Tensor>("worker2", "fetch_sum", w);
    WORKER_CHECK(AllClose(sum, local.sum()), "an RRef forked to a third host");
  }
  std::printf("driver: calls and RRef forks across hosts ok\n");

  // Parameter server: both parameters on the server (host 0), this trainer
  // on host 1.
  at::Tensor w1_local = ParamFor(1), w2_local = ParamFor(2);
  torch::optim::SGD local_optimizer({w1_local, w2_local},
                                    torch::optim::SGDOptions(0.1).momentum(0.9));
  auto remote_param = [&](const std::string& owner, const at::Tensor& value) {
    at::Tensor flat = value.detach().to(at::kDouble).flatten();
    std::vector<double> values(flat.data_ptr<double>(), flat.data_ptr<double>() + flat.numel());
    return rref::Remote<at::Tensor>(rrefs, owner, "new_param", values, value.sizes().vec());
  };
  {
    RRef<at::Tensor> w1 = remote_param("worker0", w1_local), w2 = remote_param("worker0", w2_local);
    dist_optim::SgdOptions sgd;
    sgd.lr = 0.1;
    sgd.momentum = 0.9;
    auto optimizer = dist_optim::DistributedOptimizer::Create(rrefs, {w1, w2}, sgd);
    for (int step = 0; step < 3; ++step) {
      at::manual_seed(100 + step);
      const at::Tensor x = at::randn({5, 4}), target = at::randn({5, 4});
      local_optimizer.zero_grad();
      torch::autograd::backward({(Stage(Stage(x, w1_local), w2_local) - target).pow(2).mean()});
      local_optimizer.step();
      ContextGuard context(autograd);
      at::Tensor h = rt.RpcSync<at::Tensor>("worker0", "apply_stage", x, w1);
      at::Tensor y = rt.RpcSync<at::Tensor>("worker0", "apply_stage", h, w2);
      autograd.Backward(context.id(), {(y - target).pow(2).mean()});
      optimizer.Step(context.id());
    }
    WORKER_CHECK(AllClose(w1.to_here(), w1_local), "first parameter after training");
    WORKER_CHECK(AllClose(w2.to_here(), w2_local), "second parameter after training");
  }
  std::printf("driver: parameter-server training across hosts matches one process\n");

  // Pipeline: stage 1 on host 0, stage 2 on host 2, micro-batches from here.
  {
    auto front =
        rref::RemoteObject<pipeline::Stage>(rrefs, "worker0", std::string("front"), int64_t{1});
    auto back =
        rref::RemoteObject<pipeline::Stage>(rrefs, "worker2", std::string("back"), int64_t{2});
    pipeline::PipelineDriver driver(rrefs, {front, back},
                                    pipeline::PipelineOptions{/*micro_batches=*/4});
    dist_optim::SgdOptions sgd;
    sgd.lr = 0.1;
    auto optimizer = dist_optim::DistributedOptimizer::Create(rrefs, driver.ParameterRRefs(), sgd);
    auto factories = TestStageFactories();
    pipeline::StageModel local_front = factories["front"](1), local_back = factories["back"](2);
    std::vector<at::Tensor> local_params = local_front.parameters;
    local_params.insert(local_params.end(), local_back.parameters.begin(),
                        local_back.parameters.end());
    torch::optim::SGD local_sgd(local_params, torch::optim::SGDOptions(0.1));
    for (int step = 0; step < 2; ++step) {
      at::manual_seed(50 + step);
      const at::Tensor x = at::randn({10, 6}), y = at::randn({10, 3});
      local_sgd.zero_grad();
      at::Tensor local_loss = at::mse_loss(local_back.forward(local_front.forward(x)), y);
      torch::autograd::backward({local_loss});
      local_sgd.step();
      ContextGuard context(autograd);
      at::Tensor loss = at::mse_loss(driver.Forward(x), y);
      WORKER_CHECK(AllClose(loss, local_loss), "pipeline loss");
      autograd.Backward(context.id(), {loss});
      optimizer.Step(context.id());
    }
    auto values = front.RpcSync<std::vector<at::Tensor>>("parameter_values");
    auto back_values = back.RpcSync<std::vector<at::Tensor>>("parameter_values");
    values.insert(values.end(), back_values.begin(), back_values.end());
    WORKER_CHECK(values.size() == local_params.size(), "pipeline parameter count");
    for (size_t i = 0; i < values.size(); ++i) {
      WORKER_CHECK(AllClose(values[i], local_params[i]), "pipeline parameters after training");
    }
  }
  std::printf("driver: pipeline across hosts matches one process\n");

  // Nothing left behind: every RRef released, every autograd context too.
  for (const char* owner : {"worker0", "worker2"}) {
    WORKER_CHECK(rt.RpcSync<bool>(owner, "await_no_rrefs", int64_t{30000}), "RRefs released");
    WORKER_CHECK(rt.RpcSync<bool>(owner, "await_contexts", int64_t{0}, int64_t{30000}),
                 "autograd contexts released");
  }
  WORKER_CHECK(autograd.WaitForContexts(0, absl::Seconds(30)), "driver's contexts released");
  std::printf("driver: nothing leaked\n");
  return 0;
}

// Three workers (worker0..2), one per host; rank 1 drives, the others serve.
TESSERA_WORKER_SCENARIO(multihost_rpc_job) {
  auto rrefs = rref::RRefContext::Create(MakeDistAutogradClasses());
  auto autograd = dist_autograd::DistAutograd::Create();
  rpc::Registry registry = MakeDistAutogradRegistry(autograd);
  registry.Register("fetch_sum", [](RRef<at::Tensor> w) { return w.to_here().sum(); });
  std::weak_ptr<rref::RRefContext> weak = rrefs;
  registry.Register("await_no_rrefs", [weak](int64_t timeout_ms) {
    auto context = weak.lock();
    return context != nullptr && context->WaitForOwnedValues(0, absl::Milliseconds(timeout_ms));
  });
  // RpcOptions::FromEnv as a user's program: under tessera-run the launcher
  // hosts the store, started directly (Kubernetes, srun) rank 0 does.
  auto options = rpc::RpcOptions::TryFromEnv();
  if (!options.ok()) {
    std::printf("bad environment: %s\n", options.status().ToString().c_str());
    return 2;
  }
  options->shutdown_timeout = absl::Seconds(120);
  // Rank 1 fails once, before meeting anyone, when FAILED_ONCE_MARKER names
  // a file that does not exist yet (the restart test).
  if (const char* marker = std::getenv("FAILED_ONCE_MARKER");
      marker != nullptr && options->rank == 1 && access(marker, F_OK) != 0) {
    close(open(marker, O_CREAT | O_WRONLY, 0600));
    std::printf("failing once on purpose\n");
    return 5;
  }
  auto runtime = rpc::TryInit(*options, std::move(registry), {rrefs, autograd});
  if (!runtime.ok()) {
    std::printf("cannot start: %s\n", runtime.status().ToString().c_str());
    return 2;
  }
  int code = 0;
  if ((*runtime)->self().rank == 1) {
    try {
      code = DriveRpcJob(**runtime, *rrefs, *autograd);
    } catch (const std::exception& e) {
      std::printf("driver failed: %s\n", e.what());
      code = 3;
    }
  }
  std::fflush(stdout);
  const absl::Status shutdown = (*runtime)->TryShutdown();
  if (!shutdown.ok()) std::printf("shutdown: %s\n", shutdown.ToString().c_str());
  return code != 0 ? code : shutdown.ok() ? 0 : 4;
}

// A small model of the DDP tutorial's shape, the same on every rank.
torch::nn::Sequential DdpModel() {
  torch::manual_seed(7);
  return torch::nn::Sequential(torch::nn::Linear(6, 8), torch::nn::ReLU(), torch::nn::Linear(8, 3));
}

// Rank r's batch at `step`, known to every rank (for the reference).
std::pair<at::Tensor, at::Tensor> DdpBatch(int rank, int step) {
  at::manual_seed(1000 * step + rank);
  return {at::randn({4, 6}), at::randn({4, 3})};
}

// Every rank trains its replica under DDP on its own batches, and a local
// model on every rank's batches at once; after the steps they must agree.
TESSERA_WORKER_SCENARIO(multihost_ddp) {
  auto env = collectives::CreateGlooProcessGroupFromEnv();
  collectives::ProcessGroup& group = *env.group;
  auto replica = DdpModel();
  auto reference = DdpModel();
  auto ddp = ddp::DistributedDataParallel::Create(replica.ptr(), &group);
  torch::optim::SGD optimizer(replica->parameters(), torch::optim::SGDOptions(0.05));
  torch::optim::SGD reference_optimizer(reference->parameters(), torch::optim::SGDOptions(0.05));
  for (int step = 0; step < 5; ++step) {
    auto [x, y] = DdpBatch(group.rank(), step);
    optimizer.zero_grad();
    torch::autograd::backward({at::mse_loss(replica->forward(x), y)});
    optimizer.step();
    std::vector<at::Tensor> xs, ys;
    for (int r = 0; r < group.size(); ++r) {
      auto [rx, ry] = DdpBatch(r, step);
      xs.push_back(rx);
      ys.push_back(ry);
    }
    reference_optimizer.zero_grad();
    torch::autograd::backward({at::mse_loss(reference->forward(at::cat(xs)), at::cat(ys))});
    reference_optimizer.step();
  }
  const auto got = replica->parameters(), want = reference->parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    WORKER_CHECK(at::allclose(got[i], want[i], 1e-5, 1e-6), "DDP parameters vs one process");
  }
  std::printf("ddp rank %d of %d matches one process\n", group.rank(), group.size());
  return 0;
}

// The checks of DriveRpcJob passed, every launcher exited 0, and every peer
// of every worker was reached over TCP, not a same-host transport.
void ExpectRpcJobPassed(Job& job, int hosts) {
  EXPECT_EQ(job.Finish(), std::vector<int>(hosts, 0)) << job.output();
  const std::string& driver = job.on(1).output();
  for (const char* line :
       {"driver: calls and RRef forks across hosts ok",
        "driver: parameter-server training across hosts matches one process",
        "driver: pipeline across hosts matches one process", "driver: nothing leaked"}) {
    EXPECT_TRUE(absl::StrContains(driver, line)) << line << "\n" << job.output();
  }
  EXPECT_FALSE(absl::StrContains(job.output(), "channel (same host)")) << job.output();
}

class MultiHostRpcTest : public ::testing::TestWithParam<std::string> {};

// Three hosts, one worker each, over the backend named by the parameter.
TEST_P(MultiHostRpcTest, EveryRpcJobShapeRunsAcrossThreeHosts) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  Env env;
  std::string master;
  if (GetParam() == "tensorpipe") {
    env = {{"TESSERA_RPC_BACKEND", "tensorpipe"}};
  } else if (GetParam() == "tensorpipe_ipv6") {
    env = {{"TESSERA_RPC_BACKEND", "tensorpipe"}};
    master = hosts.address6(0);
  } else if (GetParam() == "tensorpipe_by_host_name") {
    env = {{"TESSERA_RPC_BACKEND", "tensorpipe"}};
    master = hosts.name(0);
  } else if (GetParam() == "grpc_ipv6") {
    env = {{"TESSERA_RPC_BACKEND", "grpc"}};
    master = hosts.address6(0);
  } else {
    ASSERT_EQ(GetParam(), "grpc_mutual_tls");
    // One certificate for every host's address, signed by the job's CA.
    const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/tls");
    ASSERT_TRUE(MakeTestCertificates(dir, {"IP:" + hosts.address(0), "IP:" + hosts.address(1),
                                           "IP:" + hosts.address(2)})
                    .ok());
    env = MutualTlsEnv(dir);
    env.push_back({"TESSERA_RPC_BACKEND", "grpc"});
  }
  auto job =
      Job::Launched(hosts, 1, {SelfPath(), "--tessera_worker=multihost_rpc_job"}, env, master);
  ExpectRpcJobPassed(*job, 3);
  if (absl::StartsWith(GetParam(), "tensorpipe")) {
    // The driver logged the transport it chose for each peer.
    EXPECT_TRUE(absl::StrContains(
        job->on(1).output(),
        absl::StrCat(
            "connecting to 'worker0' (rank 0) at tcp://",
            GetParam() == "tensorpipe_ipv6" ? "[" + hosts.address6(0) + "]" : hosts.address(0),
            ":")))
        << job->output();
    EXPECT_TRUE(
        absl::StrContains(job->on(1).output(), "tcp transport, basic channel (another host)"))
        << job->output();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, MultiHostRpcTest,
                         ::testing::Values("tensorpipe", "tensorpipe_ipv6",
                                           "tensorpipe_by_host_name", "grpc_ipv6",
                                           "grpc_mutual_tls"));

// 2 hosts x 2 ranks of DDP over Gloo train exactly like one process on all
// four ranks' batches, over IPv4 and over IPv6.
class MultiHostDdpTest : public ::testing::TestWithParam<bool> {};

TEST_P(MultiHostDdpTest, DdpOverGlooAcrossTwoHostsMatchesOneProcess) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 2);
  const bool ipv6 = GetParam();
  auto job = Job::Launched(hosts, 2, {SelfPath(), "--tessera_worker=multihost_ddp"}, {},
                           ipv6 ? hosts.address6(0) : hosts.address(0));
  EXPECT_EQ(job->Finish(), std::vector<int>(2, 0)) << job->output();
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_TRUE(absl::StrContains(job->output(),
                                  absl::StrCat("ddp rank ", rank, " of 4 matches one process")))
        << job->output();
  }
  // Each host's ranks listened on that host's address.
  EXPECT_TRUE(absl::StrContains(
      job->on(1).output(),
      absl::StrCat("Gloo rank 2 of 4 at ", ipv6 ? hosts.address6(1) : hosts.address(1), " (eth0")))
      << job->output();
}

INSTANTIATE_TEST_SUITE_P(Families, MultiHostDdpTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "ipv6" : "ipv4"; });

// Kubernetes' PyTorchJob operator sets MASTER_ADDR (the master pod's name),
// MASTER_PORT, WORLD_SIZE and RANK in each pod and starts the program
// itself: no launcher. Rank 0 hosts the store; RPC and DDP jobs run as is.
TEST(MultiHostTest, AKubernetesStyleEnvironmentNeedsNoLauncher) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  auto pod_env = [&](int world_size) {
    return [&, world_size](int host, const std::string& port) {
      return Env{{"MASTER_ADDR", hosts.name(0)},
                 {"MASTER_PORT", port},
                 {"WORLD_SIZE", std::to_string(world_size)},
                 {"RANK", std::to_string(host)}};
    };
  };
  auto rpc_job = Job::Direct(hosts, {SelfPath(), "--tessera_worker=multihost_rpc_job"}, pod_env(3));
  ExpectRpcJobPassed(*rpc_job, 3);
  auto ddp_job = Job::Direct(hosts, {SelfPath(), "--tessera_worker=multihost_ddp"}, pod_env(3));
  EXPECT_EQ(ddp_job->Finish(), std::vector<int>(3, 0)) << ddp_job->output();
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(absl::StrContains(ddp_job->output(),
                                  absl::StrCat("ddp rank ", rank, " of 3 matches one process")))
        << ddp_job->output();
  }
}

// srun with one task per process and no launcher: ranks, world size and the
// master come from Slurm's variables (the first host of the node list).
TEST(MultiHostTest, SrunTasksFindTheirRanksAndMasterInSlurmsVariables) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 2);
  auto job = Job::Direct(hosts, {SelfPath(), "--tessera_worker=multihost_ddp"},
                         [](int host, const std::string& port) {
                           return Env{{"SLURM_JOB_ID", "4242"},
                                      {"SLURM_PROCID", std::to_string(host)},
                                      {"SLURM_NTASKS", "2"},
                                      {"SLURM_LOCALID", "0"},
                                      {"SLURM_JOB_NODELIST", "host[0-1]"},
                                      {"MASTER_PORT", port}};
                         });
  EXPECT_EQ(job->Finish(), std::vector<int>(2, 0)) << job->output();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(absl::StrContains(job->output(),
                                  absl::StrCat("ddp rank ", rank, " of 2 matches one process")))
        << job->output();
  }
}

// One tessera-run per node inside a Slurm allocation (`srun --ntasks-per-node
// 1 tessera-run --nproc_per_node 1 --master_port P ...`): node count, node
// rank and master come from Slurm.
TEST(MultiHostTest, TesseraRunTakesItsNodesFromSlurm) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  auto job = Job::Direct(hosts,
                         {"launcher/tessera-run", "--nproc_per_node", "1", "--master_port",
                          "{port}", SelfPath(), "--tessera_worker=multihost_rpc_job"},
                         [](int host, const std::string&) {
                           return Env{{"SLURM_JOB_ID", "4243"},
                                      {"SLURM_NNODES", "3"},
                                      {"SLURM_NODEID", std::to_string(host)},
                                      {"SLURM_JOB_NODELIST", "host[0-2]"}};
                         });
  ExpectRpcJobPassed(*job, 3);
  EXPECT_TRUE(absl::StrContains(job->on(2).output(), "the route to MASTER_ADDR host0 (10.88.0.1)"))
      << job->output();
}

// A failure on one host restarts the workers of every host (--max_restarts),
// and the second attempt completes across hosts.
TEST(MultiHostTest, AFailureOnOneHostRestartsEveryHost) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  const std::string marker = absl::StrCat(std::getenv("TEST_TMPDIR"), "/rank1_failed_once");
  unlink(marker.c_str());
  auto job = Job::Launched(hosts, 1, {SelfPath(), "--tessera_worker=multihost_rpc_job"},
                           {{"FAILED_ONCE_MARKER", marker}}, "", {"--max_restarts", "1"});
  ExpectRpcJobPassed(*job, 3);
  for (int host = 0; host < 3; ++host) {
    EXPECT_TRUE(absl::StrContains(job->on(host).output(), "restarting the group (1/1)"))
        << job->output();
  }
  EXPECT_EQ(job->on(1).Count("failing once on purpose"), 1) << job->output();
}

// A worker that listens on every interface (TESSERA_ADDRESS=0.0.0.0) and
// advertises its host name, as one behind NAT advertises what others dial.
TEST(MultiHostTest, AWorkerMayAdvertiseAnotherAddressThanItListensOn) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  auto job = Job::Launched(hosts, 1, {SelfPath(), "--tessera_worker=multihost_rpc_job"}, {}, "", {},
                           [&](int host) {
                             return host != 1 ? Env{}
                                              : Env{{"TESSERA_ADDRESS", "0.0.0.0"},
                                                    {"TESSERA_ADVERTISE_ADDRESS", hosts.name(1)}};
                           });
  ExpectRpcJobPassed(*job, 3);
  EXPECT_TRUE(absl::StrContains(job->on(1).output(),
                                absl::StrCat("advertised as tcp://", hosts.address(1), ":")))
      << job->output();
}

// The examples, as a user runs them across hosts: the parameter server
// (server on host 0, a trainer on each other host) and the hybrid DDP + RPC
// job (the table on host 0, trainers on hosts 1 and 2). Both must learn.
double AccuracyIn(const std::string& output) {
  const auto at = output.find("test accuracy ");
  return at == std::string::npos ? -1 : std::atof(output.c_str() + at + 14);
}

// The same 500 steps as the parameter-server cases of
// multihost_cluster_faults_test, undisturbed: the accuracy those reach
// after a lost machine or a healed cut is compared with this one's
// (bench/recovery.sh --across_hosts; docs/benchmarks-history.md).
TEST(MultiHostTest, TheParameterServerExampleTrainsAcrossThreeHosts) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  auto job = Job::Launched(hosts, 1,
                           {"examples/parameter_server/parameter_server", "--epochs", "1",
                            "--max_steps", "500", "--log_every", "20", "--test_images", "2000"});
  EXPECT_EQ(job->Finish(absl::Seconds(400)), std::vector<int>(3, 0)) << job->output();
  const double accuracy = AccuracyIn(job->on(0).output());
  EXPECT_GT(accuracy, 70.0) << job->output();
  std::printf("parameter server undisturbed: test accuracy %.2f%% after 500 steps\n", accuracy);
}

TEST(MultiHostTest, TheHybridExampleTrainsAcrossThreeHosts) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 3);
  auto job = Job::Launched(hosts, 1, {"examples/hybrid_ddp_rpc/hybrid_ddp_rpc", "--epochs", "1"});
  EXPECT_EQ(job->Finish(absl::Seconds(400)), std::vector<int>(3, 0)) << job->output();
  EXPECT_GT(AccuracyIn(job->on(1).output()), 60.0) << job->output();
}

// Host 1 forces loopback while the master is host 0: its worker fails at
// start naming the address, the interface and the setting (that message
// comes from the start-up check, not from a rendezvous timing out).
TEST(MultiHostTest, AdvertisingLoopbackToOtherHostsFailsAtOnceNamingTheSetting) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 2);
  auto job = Job::Launched(hosts, 1, {SelfPath(), "--tessera_worker=multihost_rpc_job"},
                           {{"TESSERA_SOCKET_IFNAME", "lo"}}, "", {"--rdzv_timeout", "20"});
  const std::vector<int> codes = job->Finish(absl::Seconds(120));
  EXPECT_NE(codes[0], 0) << job->output();
  EXPECT_NE(codes[1], 0) << job->output();
  EXPECT_TRUE(absl::StrContains(job->on(1).output(),
                                "would advertise the loopback address 127.0.0.1 (lo, "
                                "TESSERA_SOCKET_IFNAME)"))
      << job->output();
  EXPECT_TRUE(absl::StrContains(
      job->on(1).output(), absl::StrCat("but MASTER_ADDR ", hosts.address(0), " is another host")))
      << job->output();
  std::printf("what the user saw:\n%s", job->output().c_str());
}

// Host 0 (the master's own host) forces loopback: nothing can tell at its
// start, but at rendezvous every worker sees the mixed table and fails at
// once, naming the worker on loopback and those on other hosts.
TEST(MultiHostTest, AMixOfLoopbackAndOtherHostsFailsAtRendezvous) {
  TESSERA_NETWORK_HOSTS_OR_SKIP(hosts, 2);
  auto job = Job::Launched(hosts, 1, {SelfPath(), "--tessera_worker=multihost_rpc_job"}, {}, "",
                           {"--rdzv_timeout", "20"}, [](int host) {
                             return host == 0 ? Env{{"TP_SOCKET_IFNAME", "lo"}} : Env{};
                           });
  const std::vector<int> codes = job->Finish(absl::Seconds(120));
  EXPECT_NE(codes[0], 0) << job->output();
  EXPECT_NE(codes[1], 0) << job->output();
  for (int host = 0; host < 2; ++host) {
    EXPECT_TRUE(absl::StrContains(job->on(host).output(),
                                  absl::StrCat("worker(s) 'worker0' (rank 0) at tcp://127.0.0.1:")))
        << job->output();
    EXPECT_TRUE(
        absl::StrContains(job->on(host).output(), absl::StrCat("cannot dial: on their hosts, set "
                                                               "TESSERA_SOCKET_IFNAME")))
        << job->output();
  }
}

}  // namespace
}  // namespace tessera::testing
