// FakeNetwork: in-process RpcAgents whose messages wait in one queue until
// the test delivers them — so a test can replay a race in an exact order
// (Ray's reference-counter tests do the same with a fake transport).
//
// Manual mode (default): nothing moves until Deliver*() is called, on the
// test's thread; handlers run there too. Auto mode: a background thread
// delivers everything in arrival order (used to shut down gracefully).
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "rpc/rpc_agent.h"
#include "rpc/rpc_options.h"

namespace tessera::testing {

class FakeAgent;

class FakeNetwork : public std::enable_shared_from_this<FakeNetwork> {
 public:
  struct Envelope {
    int from = -1;
    int to = -1;
    bool is_response = false;
    std::string target;  // the function or service of a request
    uint64_t id = 0;
  };

  static std::shared_ptr<FakeNetwork> Create();
  ~FakeNetwork();

  // An agent factory for RpcOptions::agent_factory.
  rpc::AgentFactory Factory();

  // Messages waiting, oldest first.
  std::vector<Envelope> Pending() const;
  // Delivers the oldest message matching `match`; false if none does.
  bool DeliverFirst(const std::function<bool(const Envelope&)>& match);
  // Delivers until nothing is pending (including what deliveries send).
  void DeliverAll();
  // Delivers everything, repeatedly, until `done()` holds or `timeout`
  // passes; returns done(). Work that runtimes finish on their pools (and
  // the messages it sends) is waited for, checked again at every new
  // message and at least every millisecond.
  bool RunUntil(const std::function<bool()>& done, absl::Duration timeout);
  // Delivers everything from now on, in the background.
  void SetAutoDeliver(bool on);

  // Called by agents.
  void Enqueue(Envelope envelope, rpc::Message message);
  void Register(int rank, FakeAgent* agent);
  void Unregister(int rank);

 private:
  FakeNetwork() = default;
  void Deliver(const Envelope& envelope, rpc::Message message);
  void AutoLoop();

  mutable Mutex mu_;
  CondVar changed_;
  std::deque<std::pair<Envelope, rpc::Message>> queue_ ABSL_GUARDED_BY(mu_);
  std::map<int, FakeAgent*> agents_ ABSL_GUARDED_BY(mu_);
  bool auto_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread auto_thread_;
};

}  // namespace tessera::testing
