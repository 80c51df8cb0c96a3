#include "ps/replica_check.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "ps/ps_messages.h"
#include "ps/shard_map.h"
#include "rpc/internal_service.h"

namespace tessera::ps {

namespace {

struct Answer {
  std::string replica;
  std::vector<int64_t> digest;  // DigestRequest's answer
};

std::string Describe(const Answer& answer) {
  const std::vector<int64_t>& d = answer.digest;
  return absl::StrCat("'", answer.replica, "': ", d[0], " changes, digest ", d[1], ", ", d[2],
                      " rows");
}

}  // namespace

absl::Status CompareReplicas(rpc::Runtime& runtime, const std::string& job,
                             const std::vector<std::string>& tables, absl::Duration timeout) {
  TESSERA_ASSIGN_OR_RETURN(auto map, CurrentShardMap(runtime.store(), job));
  const absl::Time deadline = absl::Now() + timeout;
  // Every question at once, then the answers in order.
  std::vector<std::vector<std::pair<std::string, Future<c10::IValue>>>> asked;
  for (const std::string& table : tables) {
    for (int64_t shard = 0; shard < map.shards(); ++shard) {
      auto& replicas = asked.emplace_back();
      for (const std::string& replica : map.replicas[shard]) {
        replicas.emplace_back(replica,
                              runtime.CallAsync(replica, services::kDigest,
                                                rpc::EncodeMessage(DigestRequest{table, shard}),
                                                rpc::CallOptions(timeout)));
      }
    }
  }
  size_t next = 0;
  for (const std::string& table : tables) {
    for (int64_t shard = 0; shard < map.shards(); ++shard) {
      std::vector<Answer> answers;
      for (auto& [replica, future] : asked[next++]) {
        auto value =
            future.Wait(std::max(deadline - absl::Now(), absl::ZeroDuration()) + absl::Seconds(5));
        if (!value.ok()) {
          return absl::Status(value.status().code(),
                              absl::StrCat("comparing the replicas of table '", table, "' shard ",
                                           shard, ": '", replica, "': ", value.status().message()));
        }
        answers.push_back({replica, value->toIntVector()});
      }
      for (const Answer& answer : answers) {
        if (answer.digest == answers[0].digest) continue;
        std::vector<std::string> each;
        for (const Answer& a : answers) each.push_back(Describe(a));
        return absl::DataLossError(absl::StrCat("the replicas of table '", table, "' shard ", shard,
                                                " differ (shard map epoch ", map.epoch,
                                                "): ", absl::StrJoin(each, "; ")));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::ps
