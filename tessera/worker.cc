#include "tessera/worker.h"

#include "common/status.h"
#include "dist_optim/local_optimizer.h"
#include "rpc/init.h"

namespace tessera {

WorkerOptions WorkerOptions::FromEnv(const std::string& name) {
  WorkerOptions options(rpc::RpcOptions::FromEnv());
  if (!name.empty()) options.name = name;
  return options;
}

std::unique_ptr<Worker> Worker::Start(WorkerOptions options) {
  std::unique_ptr<Worker> worker(new Worker());
  rref::ClassRegistry classes;
  dist_optim::RegisterLocalOptimizer(classes);
  worker->rrefs_ = rref::RRefContext::Create(std::move(classes));
  worker->autograd_ = dist_autograd::DistAutograd::Create();
  worker->runtime_ =
      rpc::Init(std::move(options), rpc::Registry(), {worker->rrefs_, worker->autograd_});
  return worker;
}

Worker::~Worker() = default;

void Worker::Shutdown() { runtime_->Shutdown(); }

void Worker::Leave(const std::string& reason) { runtime_->Leave(reason); }

}  // namespace tessera
