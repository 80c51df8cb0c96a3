#include "collectives/nccl/nccl_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "collectives/nccl/nccl_status.h"
#include "collectives/process_group.h"
#include "common/host_address.h"
#include "common/logging.h"
#include "common/status.h"

namespace tessera::collectives::nccl {
namespace {

// How long teardown waits for NCCL to flush a healthy communicator before
// aborting it instead (destructors take no deadline).
constexpr absl::Duration kFinalizeTimeout = absl::Seconds(10);

// Calls `poll` until it returns true or an error, or the deadline passes
// (then DeadlineExceeded). Spins briefly — a small collective finishes in
// microseconds — then backs off to sleeps of at most 200 µs.
template <typename Poll>
absl::Status PollUntil(absl::Time deadline, Poll poll) {
  absl::Duration pause = absl::Microseconds(1);
  for (int spins = 0;; ++spins) {
    TESSERA_ASSIGN_OR_RETURN(auto done, poll());
    if (done) return absl::OkStatus();
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("deadline passed");
    if (spins < 200) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(pause);
      pause = std::min(pause * 2, absl::Microseconds(200));
    }
  }
}

// NCCL picks its own bootstrap and socket interface (the first non-loopback
// one) unless NCCL_SOCKET_IFNAME names one; a multi-homed host may then
// advertise an address the other hosts cannot reach. So, unless the user set
// it, NCCL gets the interface the address rule picks (see Note [Choosing the host address])
// for every other layer. NCCL reads it once per process, at its first use.
void SteerNcclInterface(const store::StoreClient& store) {
  static std::once_flag once;
  std::call_once(once, [&store] {
    if (std::getenv("NCCL_SOCKET_IFNAME") != nullptr) return;
    auto host = ChooseHostAddress(store.host(), AddressOptions::FromEnv());
    if (!host.ok() || host->interface.empty()) return;  // NCCL's own choice then
    TESSERA_LOG(INFO) << "NCCL_SOCKET_IFNAME=" << host->interface << " for " << host->Describe();
    setenv("NCCL_SOCKET_IFNAME", ("=" + host->interface).c_str(), 0);
  });
}

absl::StatusOr<ncclUniqueId> ExchangeUniqueId(store::StoreClient& store, const std::string& key,
                                              int rank, absl::Time deadline) {
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
      return NcclStatus(r, "making the NCCL unique id");
    }
    // Hex: the store's values are protobuf strings.
    TESSERA_RETURN_IF_ERROR(store.Set(
        key, absl::BytesToHexString(absl::string_view(id.internal, sizeof(id.internal)))));
    return id;
  }
  auto hex = store.Get(key, std::max(deadline - absl::Now(), absl::ZeroDuration()));
  if (!hex.ok()) {
    return Annotate(hex.status(),
                    absl::StrCat("rank ", rank, " waiting for NCCL's unique id under '", key,
                                 "' from rank 0 of the communicator"));
  }
  const std::string bytes = absl::HexStringToBytes(*hex);
  if (bytes.size() != sizeof(id.internal)) {
    return absl::InternalError(absl::StrCat("malformed NCCL unique id under '", key, "'"));
  }
  std::copy(bytes.begin(), bytes.end(), id.internal);
  return id;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    store::StoreClient& store, const std::string& key, int rank, int size, int device,
    absl::Time deadline) {
  SteerNcclInterface(store);
  TESSERA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device),
                               absl::StrCat("selecting CUDA device ", device));
  TESSERA_ASSIGN_OR_RETURN(auto id, ExchangeUniqueId(store, key, rank, deadline));

  std::unique_ptr<NcclCommunicator> comm(new NcclCommunicator(rank, size, device));
  TESSERA_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&comm->stream_, cudaStreamNonBlocking),
                               "creating the NCCL stream");
  TESSERA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&comm->done_, cudaEventDisableTiming),
                               "creating a CUDA event");
  comm->scratch_ = std::make_unique<DeviceBuffer>(comm->stream_);

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t started = ncclCommInitRankConfig(&comm->comm_, size, id, rank, &config);
  if (started != ncclSuccess && started != ncclInProgress) {
    return comm->Break(NcclStatus(started, "creating the NCCL communicator", comm->comm_));
  }
  absl::Status joined =
      comm->AwaitNccl(absl::StrCat("rank ", rank, " joining the NCCL communicator '", key, "' of ",
                                   size, " ranks (a rank is missing or dead)"),
                      deadline);
  if (!joined.ok()) return joined;
  return comm;
}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  if (comm_ != nullptr) {
    bool finalized = false;
    if (broken_.ok()) {
      const ncclResult_t r = ncclCommFinalize(comm_);
      finalized =
          (r == ncclSuccess || r == ncclInProgress) &&
          AwaitNccl("finalizing the NCCL communicator", absl::Now() + kFinalizeTimeout).ok();
    }
    if (finalized) {
      ncclCommDestroy(comm_);
    } else if (comm_ != nullptr) {  // AwaitNccl's failure may have aborted it already
      ncclCommAbort(comm_);
    }
  }
  scratch_.reset();  // freed in stream order, before the stream goes
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status NcclCommunicator::Usable() const {
  if (broken_.ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the NCCL communicator was aborted after an earlier failure: ", broken_.message()));
}

absl::Status NcclCommunicator::Activate() {
  TESSERA_RETURN_IF_ERROR(Usable());
  TESSERA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_),
                               absl::StrCat("selecting CUDA device ", device_));
  return absl::OkStatus();
}

absl::Status NcclCommunicator::Run(
    const std::string& what, const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& calls,
    absl::Time deadline) {
  TESSERA_RETURN_IF_ERROR(Usable());  // the operation activated the device already
  const ncclResult_t enqueued = calls(comm_, stream_);
  if (enqueued == ncclInvalidArgument || enqueued == ncclInvalidUsage) {
    // Refused before anything was enqueued: the communicator is intact.
    return NcclStatus(enqueued, what, comm_);
  }
  if (enqueued != ncclSuccess && enqueued != ncclInProgress) {
    return Break(NcclStatus(enqueued, what, comm_));
  }
  TESSERA_RETURN_IF_ERROR(AwaitNccl(what, deadline));
  return Synchronize(what, deadline);
}

absl::Status NcclCommunicator::AwaitNccl(const std::string& what, absl::Time deadline) {
  const absl::Time start = absl::Now();
  absl::Status status = PollUntil(deadline, [&]() -> absl::StatusOr<bool> {
    TESSERA_ASSIGN_OR_RETURN(auto busy, NcclBusy(what));
    return !busy;
  });
  if (absl::IsDeadlineExceeded(status)) {
    status = absl::DeadlineExceededError(
        absl::StrCat(what, ": not done after ", absl::FormatDuration(absl::Now() - start)));
  }
  return status.ok() ? status : Break(std::move(status));
}

absl::StatusOr<bool> NcclCommunicator::NcclBusy(const std::string& what) {
  ncclResult_t state = ncclSuccess;
  if (ncclResult_t r = ncclCommGetAsyncError(comm_, &state); r != ncclSuccess) {
    return NcclStatus(r, what, comm_);
  }
  if (state == ncclInProgress) return true;
  if (state != ncclSuccess) return NcclStatus(state, what, comm_);
  return false;
}

absl::Status NcclCommunicator::Synchronize(const std::string& what, absl::Time deadline) {
  TESSERA_CUDA_RETURN_IF_ERROR(cudaEventRecord(done_, stream_), what);
  const absl::Time start = absl::Now();
  absl::Status status = PollUntil(deadline, [&]() -> absl::StatusOr<bool> {
    const cudaError_t query = cudaEventQuery(done_);
    if (query == cudaSuccess) return true;
    if (query != cudaErrorNotReady) return CudaStatus(query, what);
    // A peer that died or failed shows up here rather than as a CUDA error.
    TESSERA_RETURN_IF_ERROR(NcclBusy(what).status());
    return false;
  });
  if (absl::IsDeadlineExceeded(status)) {
    status = absl::DeadlineExceededError(absl::StrCat(what, " did not complete within ",
                                                      absl::FormatDuration(absl::Now() - start),
                                                      " (", kCollectiveTimeoutCauses, ")"));
  }
  return status.ok() ? status : Break(std::move(status));
}

absl::Status NcclCommunicator::Break(absl::Status why) {
  if (broken_.ok()) broken_ = why;
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  return why;
}

}  // namespace tessera::collectives::nccl
