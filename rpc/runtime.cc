#include "rpc/runtime.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/host_address.h"
#include "common/logging.h"
#include "common/status.h"
#include "rpc/codec.h"
#include "rpc/rendezvous.h"
#include "store/elastic_keys.h"
#include "store/elastic_role.h"
#include "store/store_url.h"

namespace tessera::rpc {
namespace {

// Turns a response envelope into the call's result or remote error.
absl::StatusOr<c10::IValue> ResultFromResponse(const Message& response, Peer peer) {
  const proto::Status& status = response.envelope.status();
  if (status.code() != 0) {
    return absl::Status(
        static_cast<absl::StatusCode>(status.code()),
        absl::StrCat("on worker '", status.origin_worker(), "': ", status.message()));
  }
  return DecodeValue(response.envelope.result(), response.tensors, {}, peer);
}

// Holds an observer's serve scope entered on this thread (if any).
class ScopeEntry {
 public:
  explicit ScopeEntry(ServeScope* scope) : scope_(scope) {
    if (scope_ != nullptr) scope_->Enter();
  }
  ~ScopeEntry() {
    if (scope_ != nullptr) scope_->Exit();
  }
  ScopeEntry(const ScopeEntry&) = delete;
  ScopeEntry& operator=(const ScopeEntry&) = delete;

 private:
  ServeScope* scope_;
};

}  // namespace

Runtime::Runtime(RpcOptions options, Registry registry,
                 std::vector<std::shared_ptr<RuntimeExtension>> extensions)
    : options_(std::move(options)),
      registry_(std::move(registry)),
      extensions_(std::move(extensions)) {}

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(
    RpcOptions options, Registry registry,
    std::vector<std::shared_ptr<RuntimeExtension>> extensions) {
  if (options.world_size <= 0 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid rank ", options.rank, " for world size ", options.world_size));
  }
  if (options.name.empty()) return absl::InvalidArgumentError("worker name is empty");
  if (!options.agent_factory) {
    return absl::InvalidArgumentError(
        "RpcOptions::agent_factory is unset: start workers with rpc::Init (rpc/init.h), which "
        "picks the backend");
  }
  std::unique_ptr<Runtime> runtime(
      new Runtime(std::move(options), std::move(registry), std::move(extensions)));
  TESSERA_RETURN_IF_ERROR(runtime->StartTelemetry());
  runtime->ServeLivenessProbes();
  runtime->ServeMembership();
  for (const auto& extension : runtime->extensions_) {
    extension->Attach(runtime.get(), &runtime->internal_);
    if (ValueHooks* hooks = extension->value_hooks()) {
      if (runtime->hooks_ != nullptr) {
        return absl::InvalidArgumentError("two runtime extensions provide value hooks");
      }
      runtime->hooks_ = hooks;
    }
    if (CallObserver* observer = extension->call_observer()) {
      if (runtime->observer_ != nullptr) {
        return absl::InvalidArgumentError("two runtime extensions observe calls");
      }
      runtime->observer_ = observer;
    }
  }
  auto status = runtime->Start();
  const absl::StatusOr<bool> started =
      status.ok() ? absl::StatusOr<bool>(true) : Annotate(status, "worker failed to start");
  runtime->members_known_.Set(started);  // set already unless the start failed before it
  runtime->ready_.Set(started);
  if (!status.ok()) {
    runtime->TryShutdown(/*graceful=*/false).IgnoreError();
    return status;
  }
  runtime->AlignTraceClock();
  return runtime;
}

absl::Status Runtime::Start() {
  auto host = ChooseHostAddress(options_.master_addr, options_.address);
  if (!host.ok()) return Annotate(host.status(), options_.name + " cannot choose its address");
  TESSERA_RETURN_IF_ERROR(ConnectStore());
  timer_ = std::make_unique<DeadlineTimer>();
  pool_ = std::make_unique<ThreadPool>(options_.num_worker_threads, options_.name,
                                       options_.max_worker_threads, options_.worker_thread_spin);
  live_pool_.store(pool_.get(), std::memory_order_release);
  if (options_.job_secret.empty()) {
    TESSERA_LOG(WARNING) << options_.name
                         << ": no job secret (TESSERA_JOB_SECRET): anyone who can reach this "
                            "worker's port can call its registered functions";
  }
  TESSERA_RETURN_IF_ERROR(StartAgent(*host));
  TESSERA_RETURN_IF_ERROR(MeetWorkers());
  TESSERA_LOG(INFO)
      << options_.name << ": "
      << (options_.join == JoinMode::kStart ? "joined a world of " : "entered a running job of ")
      << membership_.size() << " at " << host->Describe()
      << (self_.incarnation > 0 ? absl::StrCat(" (incarnation ", self_.incarnation, ")") : "");
  return absl::OkStatus();
}

absl::Status Runtime::ConnectStore() {
  const bool host_store = options_.store_url.empty() &&
                          (options_.store_role == StoreRole::kHost ||
                           (options_.store_role == StoreRole::kAuto && options_.rank == 0));
  int port = options_.master_port;
  if (host_store) {
    auto server =
        store::StoreServer::StartForMaster(options_.master_addr, port, options_.job_secret);
    if (!server.ok()) return server.status();
    store_server_ = *std::move(server);
    port = store_server_->port();
  }
  auto store = store::ConnectStore(
      options_.store_url.empty() ? JoinHostPort(options_.master_addr, port) : options_.store_url,
      options_.rendezvous_timeout, options_.job_secret);
  if (!store.ok()) return Annotate(store.status(), options_.name + " cannot reach its store");
  store_client_ = *std::move(store);
  return absl::OkStatus();
}

absl::Status Runtime::StartAgent(const HostAddress& host) {
  int incarnation = 0;
  if (options_.join == JoinMode::kRejoin) {
    // Before the agent: its handshakes say it (see Note [Fencing stale incarnations]).
    auto taken =
        store_client_->Add(store::elastic::IncarnationKey(options_.store_prefix, options_.rank), 1);
    if (!taken.ok()) return taken.status();
    incarnation = static_cast<int>(*taken);
  }
  AgentSetup setup;
  setup.self.name = options_.name;
  setup.self.rank = options_.rank;
  setup.self.incarnation = incarnation;
  setup.host = host;
  setup.options = &options_;
  setup.handler = [this](int from, Message request) {
    return HandleRequest(from, std::move(request));
  };
  setup.executor = pool();
  setup.timer = timer_.get();
  TESSERA_ASSIGN_OR_RETURN(auto agent, options_.agent_factory(std::move(setup)));
  agent_ = std::move(agent);
  agent_->SetPeerFailureHandler([this](int rank) { OnPeerFailure(rank); });
  self_ = agent_->self();
  self_.role = options_.role;
  return absl::OkStatus();
}

absl::Status Runtime::MeetWorkers() {
  const std::string& prefix = options_.store_prefix;
  namespace elastic = store::elastic;
  TESSERA_RETURN_IF_ERROR(
      elastic::DeclareRole(*store_client_, prefix, options_.rank, options_.role));
  auto workers = options_.join == JoinMode::kStart
                     ? Rendezvous(*store_client_, prefix, self_, options_.world_size,
                                  options_.rendezvous_timeout)
                     : RejoinRendezvous(*store_client_, prefix, self_, options_.rendezvous_timeout);
  if (!workers.ok()) return workers.status();
  if (options_.join == JoinMode::kStart && options_.rank == 0) {
    TESSERA_RETURN_IF_ERROR(
        store_client_->Set(elastic::WorldSizeKey(prefix), std::to_string(options_.world_size)));
  }
  agent_->SetWorkers(*workers);
  membership_.Reset(*std::move(workers));
  members_known_.Set(true);
  if (options_.join != JoinMode::kStart) AnnounceJoin();
  return absl::OkStatus();
}

Runtime::~Runtime() {
  TryShutdown(/*graceful=*/false).IgnoreError();
  // The threads that may post to the pool go first (the transport's, then
  // the timer's), and only then the pool they post to.
  agent_.reset();
  timer_.reset();
  pool_.reset();
}

std::optional<WorkerInfo> Runtime::FindWorker(const std::string& name) const {
  return membership_.Find(name);
}

std::optional<WorkerInfo> Runtime::FindWorker(int rank) const { return membership_.Find(rank); }

absl::Status Runtime::NoWorkerNamed(const std::string& name) {
  return absl::NotFoundError("no worker named '" + name + "'");
}

WorkerInfo Runtime::GetWorkerInfo(const std::string& name) const {
  std::optional<WorkerInfo> worker = FindWorker(name);
  if (!worker.has_value()) throw StatusError(NoWorkerNamed(name));
  return *worker;
}

WorkerInfo Runtime::GetWorkerInfo(int rank) const {
  std::optional<WorkerInfo> worker = FindWorker(rank);
  if (!worker.has_value()) {
    throw StatusError(absl::NotFoundError(absl::StrCat("no worker with rank ", rank)));
  }
  return *worker;
}

Future<c10::IValue> Runtime::CallAsync(const std::string& to, const std::string& function,
                                       std::vector<c10::IValue> args, const CallOptions& options) {
  const std::optional<int> rank = membership_.RankOf(to);
  if (!rank.has_value()) return Future<c10::IValue>::Ready(NoWorkerNamed(to));
  return CallAsync(*rank, function, std::move(args), options);
}

Future<c10::IValue> Runtime::CallAsync(int to_rank, const std::string& function,
                                       std::vector<c10::IValue> args, const CallOptions& options) {
  return Call(to_rank, function, std::move(args), options, pool());
}

Future<c10::IValue> Runtime::CallInternal(int to_rank, const std::string& service,
                                          std::vector<c10::IValue> args,
                                          const CallOptions& options) {
  return Call(to_rank, service, std::move(args), options, pool(), proto::INTERNAL_CALL);
}

Future<c10::IValue> Runtime::Call(int to_rank, const std::string& function,
                                  std::vector<c10::IValue> args, const CallOptions& options,
                                  Executor* executor, proto::MessageKind kind,
                                  bool carries_user_values) const {
  Message request;
  request.carries_user_values = carries_user_values;
  request.envelope.set_kind(kind);
  request.envelope.set_target(function);
  const Peer peer{hooks_, to_rank};
  for (const auto& arg : args) {
    auto status = EncodeValue(arg, request.envelope.add_args(), &request, options_.limits, peer);
    if (!status.ok()) {
      return Future<c10::IValue>::Ready(
          Annotate(status, "cannot send arguments of '" + function + "'"));
    }
  }
  if (observer_ != nullptr) {
    auto status = observer_->OnSendRequest(to_rank, &request);
    if (!status.ok()) {
      return Future<c10::IValue>::Ready(Annotate(status, "cannot send '" + function + "'"));
    }
  }
  CallObserver* observer = observer_;
  std::shared_ptr<OutgoingCall> telemetry =
      CallTelemetryEnabled() ? RecordOutgoing(to_rank, &request) : nullptr;
  return agent_->Send(to_rank, std::move(request), absl::Now() + EffectiveTimeout(options))
      .Then(
          [peer, observer, telemetry](
              const absl::StatusOr<Message>& response) -> absl::StatusOr<c10::IValue> {
            if (telemetry != nullptr) telemetry->Finish(response);
            if (!response.ok()) return response.status();
            if (observer != nullptr && response->envelope.status().code() == 0) {
              TESSERA_RETURN_IF_ERROR(observer->OnReceiveResponse(peer.rank, *response));
            }
            return ResultFromResponse(*response, peer);
          },
          executor);
}

Future<Message> Runtime::HandleRequest(int from_rank, Message request) {
  Future<bool> ready = ready_.GetFuture();
  if (ready.IsReady()) return DispatchRecorded(from_rank, request);
  if (request.envelope.kind() == proto::INTERNAL_CALL &&
      request.envelope.target() == services::kJoin) {
    ready = members_known_.GetFuture();  // see Note [Simultaneous rejoins]
  }
  // See Note [Deferred calls]: on the pool once started, not in Create().
  return ready.Then([this, from_rank, request = std::move(request)](
                        const absl::StatusOr<bool>& started) mutable -> Future<Message> {
    if (!started.ok()) return Future<Message>::Ready(started.status());
    return DispatchOnPool([this, from_rank, request = std::move(request)] {
      return DispatchRecorded(from_rank, request);
    });
  });
}

Future<Message> Runtime::DispatchOnPool(std::function<Future<Message>()> dispatch) {
  ThreadPool* live = pool();
  if (live == nullptr) {
    return Future<Message>::Ready(absl::FailedPreconditionError("worker '" + options_.name +
                                                                "' shut down before the call ran"));
  }
  return RunOn<Message>(*live, std::move(dispatch));
}

Future<Message> Runtime::DispatchRecorded(int from_rank, const Message& request) {
  // After the start: the caller's name is known (the wait shows as queued).
  std::shared_ptr<IncomingCall> telemetry =
      CallTelemetryEnabled() ? RecordIncoming(from_rank, request) : nullptr;
  Future<Message> response = Dispatch(from_rank, request, /*waited_for_registration=*/false);
  if (telemetry != nullptr) {
    response.OnReady([telemetry](const absl::StatusOr<Message>& done) { telemetry->Finish(done); });
  }
  return response;
}

Future<Message> Runtime::AwaitRegistration(int from_rank, const Message& request) {
  const std::string target = request.envelope.target();
  absl::Time until = absl::Now() + options_.registration_wait;
  if (request.envelope.timeout_us() > 0) {
    until = std::min(until, absl::Now() + absl::Microseconds(request.envelope.timeout_us()));
  }
  return registry_.WhenRegistered(target, until, *timer_)
      .Then(
          [this, from_rank, request, target](const absl::StatusOr<bool>& found) -> Future<Message> {
            if (found.ok() && *found) {
              // See Note [Deferred calls]: on the pool, not in Register().
              return DispatchOnPool([this, from_rank, request] {
                return Dispatch(from_rank, request, /*waited_for_registration=*/true);
              });
            }
            std::vector<std::string> names = registry_.Names();
            return Future<Message>::Ready(absl::NotFoundError(absl::StrCat(
                "no function named '", target, "' is registered on worker '", options_.name,
                "' (waited up to ", absl::FormatDuration(options_.registration_wait),
                " for it; registered: ", names.empty() ? "none" : absl::StrJoin(names, ", "),
                ")")));
          },
          pool());
}

Future<Message> Runtime::Dispatch(int from_rank, const Message& request,
                                  bool waited_for_registration) {
  const proto::Envelope& envelope = request.envelope;
  CallContext context;
  context.runtime = this;
  context.caller_rank = from_rank;
  membership_.NameAndRole(from_rank, &context.caller_name, &context.caller_role);
  const bool internal = envelope.kind() == proto::INTERNAL_CALL;
  const RegisteredFunction* function = (internal ? internal_ : registry_).Find(envelope.target());
  if (function == nullptr && !internal && !waited_for_registration) {
    return AwaitRegistration(from_rank, request);
  }
  if (function != nullptr) {
    // Authorization comes before any argument is decoded.
    auto allowed = function->allowed.Check("'" + envelope.target() + "'", context.caller_name,
                                           context.caller_role);
    if (!allowed.ok()) return Future<Message>::Ready(allowed);
  }
  if (envelope.timeout_us() > 0) {
    context.deadline = absl::Now() + absl::Microseconds(envelope.timeout_us());
  }
  std::shared_ptr<ServeScope> scope;
  if (observer_ != nullptr) {
    auto observed = observer_->OnReceiveRequest(from_rank, request);
    if (!observed.ok()) return Future<Message>::Ready(observed.status());
    scope = *std::move(observed);
  }
  std::vector<c10::IValue> args;
  args.reserve(envelope.args_size());
  const Peer peer{hooks_, from_rank};
  for (const auto& arg : envelope.args()) {
    auto value = DecodeValue(arg, request.tensors, options_.limits, peer);
    if (!value.ok()) {
      return Future<Message>::Ready(
          Annotate(value.status(), "bad arguments for '" + envelope.target() + "'"));
    }
    args.push_back(*std::move(value));
  }
  const auto limits = options_.limits;
  const std::string target = envelope.target();
  Future<c10::IValue> result = [&] {
    ScopeEntry entry(scope.get());
    return Registry::Invoke(function, target, context, std::move(args));
  }();
  return result.Then([limits, target, peer,
                      scope](const absl::StatusOr<c10::IValue>& result) -> absl::StatusOr<Message> {
    if (!result.ok()) return result.status();
    Message response;
    auto status = EncodeValue(*result, response.envelope.mutable_result(), &response, limits, peer);
    if (status.ok() && scope != nullptr) status = scope->OnSendResponse(peer.rank, &response);
    if (!status.ok()) {
      return Annotate(status, "cannot send the result of '" + target + "'");
    }
    return response;
  });
}

}  // namespace tessera::rpc
