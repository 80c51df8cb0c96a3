#include "tests/testing/fake_network.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace tessera::testing {

// An RpcAgent that sends through a FakeNetwork.
class FakeAgent final : public rpc::RpcAgent {
 public:
  FakeAgent(std::shared_ptr<FakeNetwork> network, rpc::WorkerInfo self,
            rpc::RequestHandler handler)
      : network_(std::move(network)), self_(std::move(self)), handler_(std::move(handler)) {
    network_->Register(self_.rank, this);
  }
  ~FakeAgent() override { Close(absl::CancelledError("fake agent destroyed")); }

  const rpc::WorkerInfo& self() const override { return self_; }
  void SetWorkers(std::vector<rpc::WorkerInfo>) override {}
  void SetPeerFailureHandler(std::function<void(int)>) override {}

  Future<rpc::Message> Send(int to_rank, rpc::Message request, absl::Time) override {
    Promise<rpc::Message> promise;
    uint64_t id = 0;
    {
      MutexLock lock(&mu_);
      if (closed_) {
        promise.Set(absl::FailedPreconditionError("fake agent closed"));
        return promise.GetFuture();
      }
      id = next_id_++;
      pending_[id] = promise;
    }
    counters_.requests_sent++;
    request.envelope.set_request_id(id);
    request.envelope.set_origin_rank(self_.rank);
    FakeNetwork::Envelope envelope{self_.rank, to_rank, false, request.envelope.target(), id};
    network_->Enqueue(envelope, std::move(request));
    return promise.GetFuture();
  }

  rpc::AgentCounters counters() const override {
    rpc::AgentCounters c;
    c.requests_sent = counters_.requests_sent;
    c.responses_received = counters_.responses_received;
    c.requests_received = counters_.requests_received;
    c.responses_sent = counters_.responses_sent;
    return c;
  }

  void Close(const absl::Status& reason) override {
    std::map<uint64_t, Promise<rpc::Message>> pending;
    {
      MutexLock lock(&mu_);
      if (closed_) return;
      closed_ = true;
      pending.swap(pending_);
    }
    network_->Unregister(self_.rank);
    for (auto& [id, promise] : pending) {
      counters_.responses_received++;
      promise.Set(reason);
    }
  }

  // Called by the network on delivery.
  void HandleRequest(int from, uint64_t id, rpc::Message request) {
    counters_.requests_received++;
    const int to = from;
    handler_(from, std::move(request))
        .OnReady([this, to, id](const absl::StatusOr<rpc::Message>& result) {
          rpc::Message response;
          if (result.ok()) {
            response = *result;
          } else {
            response.envelope.mutable_status()->set_code(static_cast<int>(result.status().code()));
            response.envelope.mutable_status()->set_message(std::string(result.status().message()));
            response.envelope.mutable_status()->set_origin_worker(self_.name);
          }
          response.envelope.set_kind(proto::RESPONSE);
          counters_.responses_sent++;
          network_->Enqueue(FakeNetwork::Envelope{self_.rank, to, true, "", id},
                            std::move(response));
        });
  }
  void HandleResponse(uint64_t id, rpc::Message response) {
    Promise<rpc::Message> promise;
    {
      MutexLock lock(&mu_);
      auto it = pending_.find(id);
      if (it == pending_.end()) return;
      promise = it->second;
      pending_.erase(it);
    }
    counters_.responses_received++;
    promise.Set(std::move(response));
  }

 private:
  struct AtomicCounters {
    std::atomic<uint64_t> requests_sent{0}, responses_received{0}, requests_received{0},
        responses_sent{0};
  };
  const std::shared_ptr<FakeNetwork> network_;
  rpc::WorkerInfo self_;
  const rpc::RequestHandler handler_;
  Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Promise<rpc::Message>> pending_ ABSL_GUARDED_BY(mu_);
  AtomicCounters counters_;
};

std::shared_ptr<FakeNetwork> FakeNetwork::Create() {
  return std::shared_ptr<FakeNetwork>(new FakeNetwork());
}

FakeNetwork::~FakeNetwork() { SetAutoDeliver(false); }

rpc::AgentFactory FakeNetwork::Factory() {
  std::weak_ptr<FakeNetwork> weak = shared_from_this();
  return [weak](rpc::AgentSetup setup) -> absl::StatusOr<std::unique_ptr<rpc::RpcAgent>> {
    auto network = weak.lock();
    if (network == nullptr) return absl::FailedPreconditionError("fake network is gone");
    rpc::WorkerInfo self = setup.self;
    self.address = absl::StrCat("fake://", self.rank);
    return std::unique_ptr<rpc::RpcAgent>(
        new FakeAgent(std::move(network), std::move(self), std::move(setup.handler)));
  };
}

void FakeNetwork::Register(int rank, FakeAgent* agent) {
  MutexLock lock(&mu_);
  agents_[rank] = agent;
}

void FakeNetwork::Unregister(int rank) {
  MutexLock lock(&mu_);
  agents_.erase(rank);
}

void FakeNetwork::Enqueue(Envelope envelope, rpc::Message message) {
  MutexLock lock(&mu_);
  queue_.emplace_back(std::move(envelope), std::move(message));
  changed_.SignalAll();
}

std::vector<FakeNetwork::Envelope> FakeNetwork::Pending() const {
  MutexLock lock(&mu_);
  std::vector<Envelope> pending;
  for (const auto& [envelope, message] : queue_) pending.push_back(envelope);
  return pending;
}

void FakeNetwork::Deliver(const Envelope& envelope, rpc::Message message) {
  FakeAgent* agent = nullptr;
  {
    MutexLock lock(&mu_);
    auto it = agents_.find(envelope.to);
    if (it != agents_.end()) agent = it->second;
  }
  if (agent == nullptr) return;  // the receiver is gone: the message is lost
  if (envelope.is_response) {
    agent->HandleResponse(envelope.id, std::move(message));
  } else {
    agent->HandleRequest(envelope.from, envelope.id, std::move(message));
  }
}

bool FakeNetwork::DeliverFirst(const std::function<bool(const Envelope&)>& match) {
  std::pair<Envelope, rpc::Message> next;
  {
    MutexLock lock(&mu_);
    auto it = queue_.begin();
    while (it != queue_.end() && !match(it->first)) ++it;
    if (it == queue_.end()) return false;
    next = std::move(*it);
    queue_.erase(it);
  }
  Deliver(next.first, std::move(next.second));
  return true;
}

void FakeNetwork::DeliverAll() {
  while (DeliverFirst([](const Envelope&) { return true; })) {
  }
}

bool FakeNetwork::RunUntil(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    DeliverAll();
    if (done()) return true;
    if (absl::Now() >= deadline) return false;
    MutexLock lock(&mu_);
    changed_.WaitUntil(&mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !queue_.empty(); },
                       std::min(deadline, absl::Now() + absl::Milliseconds(1)));
  }
}

void FakeNetwork::SetAutoDeliver(bool on) {
  {
    MutexLock lock(&mu_);
    if (auto_ == on) return;
    auto_ = on;
    stopping_ = !on;
    changed_.SignalAll();
  }
  if (on) {
    auto_thread_ = std::thread([this] { AutoLoop(); });
  } else if (auto_thread_.joinable()) {
    auto_thread_.join();
  }
}

void FakeNetwork::AutoLoop() {
  while (true) {
    {
      MutexLock lock(&mu_);
      changed_.Wait(&mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stopping_ || !queue_.empty();
      });
      if (stopping_) return;
    }
    DeliverAll();
  }
}

}  // namespace tessera::testing
