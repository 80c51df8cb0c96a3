// Tessera's rendezvous store as a gloo::rendezvous::Store. Gloo expects
// blocking calls that throw on failure; every call is bounded by `timeout`.
#pragma once

#include <gloo/rendezvous/store.h>

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "store/store_client.h"

namespace tessera::collectives {

class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(store::StoreClient* store, std::string prefix, absl::Duration timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  store::StoreClient* const store_;
  const std::string prefix_;
  const absl::Duration timeout_;
};

}  // namespace tessera::collectives
