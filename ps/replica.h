// Replica: this server's copy of one shard — every table's part of it, the
// numbering of their changes — and what it knows of its role in the shard
// map (see Note [Parameter-server replication], ps/ps_server.h). Plain state:
// its server (PsServer::State, ps/server_state.h) guards it and acts on it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/future.h"
#include "ps/op_log.h"
#include "ps/ps_messages.h"
#include "ps/shard.h"
#include "ps/shard_map.h"

namespace tessera::ps {

// kJoining: becoming a backup (JoinRequest, ps/ps_messages.h): it follows
// the primary's changes but the shard map does not name it yet.
enum class ReplicaRole { kPrimary, kBackup, kJoining, kNone };

struct Replica {
  using LeaseWaits = std::vector<Promise<std::monostate>>;

  int64_t index = 0;  // the shard
  std::shared_ptr<OpLog> log = std::make_shared<OpLog>();
  std::map<std::string, std::shared_ptr<Shard>> tables;

  ReplicaRole role = ReplicaRole::kNone;
  int64_t since = 0;                 // the epoch the shard's replicas were set at
  std::string primary;               // the shard's primary in the map
  std::vector<std::string> backups;  // the shard's backups in the map

  // As primary: the send time of the last message each backup answered;
  // the pulls waiting for a lease; until when a trainer was last served
  // (heartbeats run while it is busy: an idle job must go quiet, for its
  // graceful shutdown to agree that nothing is in flight).
  std::map<std::string, absl::Time> answered;
  std::set<std::string> beating;  // backups with a heartbeat in flight
  // Servers joining as backups: sent every change, waited for by none.
  std::set<std::string> joining;
  // As primary, for each backup and joiner: whether a message of changes
  // to it is in flight, the changes made since, sent together once it
  // answers, and the latest change sent (see Note [Replication batches],
  // ps/server_replication.cc).
  struct Outbox {
    bool in_flight = false;
    ReplicateRequest waiting;
    int64_t sent_through = 0;
  };
  std::map<std::string, Outbox> outboxes;
  int64_t messages_sent = 0;  // of changes, to any backup or joiner; not those sent again
  LeaseWaits lease_waits;
  absl::Time busy_until = absl::InfinitePast();
  bool told_idle = true;
  // The last change made before this replica became primary (0: primary
  // from the start): its backups must have made the same.
  int64_t base = 0;
  // As backup: when the primary was last heard; whether it said it went
  // idle (its silence then means nothing); the epoch whose primary was
  // found to have made the same changes as this replica.
  absl::Time heard = absl::InfinitePast();
  bool primary_idle = true;
  int64_t verified_since = 0;
  // As a joiner: the tables installed so far (InstallRequest).
  std::set<std::string> installed;

  // Until when the primary may answer pulls: every backup answered a
  // message sent within `lease` before it. Unbounded without backups.
  absl::Time LeaseEnd(absl::Duration lease) const {
    absl::Time end = absl::InfiniteFuture();
    for (const std::string& backup : backups) {
      auto it = answered.find(backup);
      end = std::min(end, it == answered.end() ? absl::InfinitePast() : it->second + lease);
    }
    return end;
  }
};

// Completes the pulls waiting for a lease: OK, or `status`.
inline void ReleaseLeaseWaits(Replica::LeaseWaits& waits, const absl::Status& status) {
  for (auto& wait : waits) {
    if (status.ok()) {
      wait.Set(std::monostate{});
    } else {
      wait.Set(status);
    }
  }
}

// `server`'s role in shard `shard` of `map`.
inline ReplicaRole RoleIn(const ShardMap& map, int64_t shard, const std::string& server) {
  if (map.primary(shard) == server) return ReplicaRole::kPrimary;
  return map.HoldsReplica(shard, server) ? ReplicaRole::kBackup : ReplicaRole::kNone;
}

}  // namespace tessera::ps
