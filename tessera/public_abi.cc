// Note [The public ABI]: what scripts/check_abi.sh compares, release to
// release. libtessera.so exports every function of the tree and the
// installed headers show every class's members, so its full symbol table
// changes with any refactoring and says nothing about what users rely on.
// The ABI that binds a soname is instead the one this file names: the
// layout of each public type (the parameter of a Layout function, so its
// complete definition, members, bases and everything they reach, is in
// this file's debug information, compiled with -g) and the signature of
// each public entry point (in the symbol name of a Signature function).
// libtessera.so.N.abi in tessera/abi/ records them for soname N; abidiff
// refuses any change to them unless N is raised in the same commit.
//
// Whatever users reach belongs here: a public type or entry point added to
// the API is added to this file in the same commit. Until the public API is
// narrowed to handles over implementation objects (issue 54), the layouts
// reached include implementation classes (Worker holds rpc::Runtime, whose
// members its inline methods read), so changing their members changes the
// ABI too — as it does for a program built against the installed headers.
#include "checkpoint/checkpoint.h"
#include "collectives/gloo/gloo_process_group.h"
#include "collectives/process_group.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/distributed_sampler.h"
#include "ddp/fault_tolerant/fault_tolerant_ddp.h"
#include "ddp/join.h"
#include "ddp/powersgd_hook.h"
#include "ddp/sync_batch_norm.h"
#include "ddp/zero_redundancy_optimizer.h"
#include "dist_optim/distributed_optimizer.h"
#include "dist_optim/optimizer_options.h"
#include "pipeline/pipeline_driver.h"
#include "ps/ps_client.h"
#include "ps/ps_options.h"
#include "ps/table_options.h"
#include "rpc/call_options.h"
#include "rpc/rpc_options.h"
#include "tessera/worker.h"

namespace tessera::abi {

// One function a type, so that abidiff names the type whose layout changed.
void Layout(const Worker*) {}
void Layout(const WorkerOptions*) {}
void Layout(const rpc::RpcOptions*) {}
void Layout(const rpc::CallOptions*) {}
void Layout(const ps::PsClient*) {}
void Layout(const ps::PsOptions*) {}
void Layout(const ps::TableOptions*) {}
void Layout(const ddp::DistributedDataParallel*) {}
void Layout(const ddp::DdpOptions*) {}
void Layout(const collectives::ProcessGroup*) {}
void Layout(const collectives::GlooOptions*) {}
void Layout(const dist_optim::DistributedOptimizer*) {}
void Layout(const dist_optim::SgdOptions*) {}
void Layout(const dist_optim::AdamOptions*) {}
void Layout(const dist_optim::AdamWOptions*) {}
void Layout(const dist_optim::AdagradOptions*) {}
void Layout(const dist_optim::RmsPropOptions*) {}
void Layout(const ddp::ZeroRedundancyOptimizer*) {}
void Layout(const ddp::ZeroOptions*) {}
void Layout(const ddp::DistributedSampler*) {}
void Layout(const ddp::DistributedSamplerOptions*) {}
void Layout(const ddp::FaultTolerantDdp*) {}
void Layout(const ddp::FaultTolerantOptions*) {}
void Layout(const ddp::FaultTolerantStep*) {}
void Layout(const ddp::SyncBatchNormOptions*) {}
void Layout(const ddp::PowerSgdOptions*) {}
void Layout(const ddp::JoinOptions*) {}
void Layout(const pipeline::PipelineDriver*) {}
void Layout(const pipeline::PipelineOptions*) {}
void Layout(const checkpoint::Checkpoint*) {}
void Layout(const checkpoint::TrainingPosition*) {}

// The entry points, by signature: each one's pointer, its type with it, is
// a template argument of Signature, so the signature is in the function's
// symbol name. libabigail describes no pointer to a member, so a pointer
// variable would not show a member function's signature; a changed
// signature here is a removed symbol and an added one, which abidiff
// reports as an incompatible change.
template <typename T, T>
struct Entry {};
#define TESSERA_ABI_ENTRY(...) \
  void Signature(Entry<decltype(&__VA_ARGS__), &__VA_ARGS__>*) {}

TESSERA_ABI_ENTRY(Worker::Start)
TESSERA_ABI_ENTRY(Worker::Shutdown)
TESSERA_ABI_ENTRY(Worker::Leave)
TESSERA_ABI_ENTRY(WorkerOptions::FromEnv)
TESSERA_ABI_ENTRY(ps::PsClient::Connect)
TESSERA_ABI_ENTRY(ps::PsClient::Clock)
TESSERA_ABI_ENTRY(ps::PsClient::Checkpoint)
TESSERA_ABI_ENTRY(ps::PsClient::PushPull)
TESSERA_ABI_ENTRY(ps::PsClient::clock)
TESSERA_ABI_ENTRY(ps::PsClient::shard_map)
TESSERA_ABI_ENTRY(ps::PsClient::Stats)
#undef TESSERA_ABI_ENTRY

}  // namespace tessera::abi
