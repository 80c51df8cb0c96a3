// SerialQueue: runs tasks one at a time, in the order posted, on its own
// thread -- or on a thread that waits for one of them.
//
// A collective posted to a backend is usually waited for at once. Handing
// it to the queue's thread and its completion back costs two thread
// wake-ups: about 40 of the ~120 µs of a 4-byte Gloo allreduce between two
// processes on loopback (docs/benchmarks-history.md). RunInline lets the waiting
// thread run the tasks up to its own when nothing is running, so the order
// is kept and the queue's thread runs only what nobody is waiting for yet
// (DDP's buckets, overlapped with backward). And an idle queue thread
// yields for a moment before it sleeps, so that the next task of a
// back-to-back sequence does not pay for waking it (serial_queue.cc).
//
// Thread-safety: all methods may be called from any thread. The destructor
// runs what is queued, then joins; it must not be called from a task.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/time/time.h"

namespace tessera {

class SerialQueue {
 public:
  explicit SerialQueue(std::string name);
  ~SerialQueue();

  SerialQueue(const SerialQueue&) = delete;
  SerialQueue& operator=(const SerialQueue&) = delete;

  // Queues `task`; returns its ticket (increasing from 1).
  uint64_t Post(std::function<void()> task);

  // Runs, on the calling thread, every queued task up to and including
  // `ticket`'s, as long as no task is running elsewhere. Returns whether
  // `ticket`'s task has been taken (here or elsewhere); if not, it is
  // running or will run on another thread.
  bool RunInline(uint64_t ticket);

  // A wait hook (Promise::SetWaitHook) running RunInline(ticket), but
  // starting each task only while the waiter's deadline is at least
  // `longest_task` (a bound on any one task) away, so a waiter is never kept
  // past its deadline (one polling with a short deadline just waits). It
  // does nothing once the queue is gone.
  std::function<void(absl::Time)> InlineHook(uint64_t ticket, absl::Duration longest_task) const;

 private:
  struct Core;
  // RunInline, starting no task after `latest_start`.
  static bool RunInline(Core& core, uint64_t ticket, absl::Time latest_start);
  static void Loop(Core& core);

  const std::shared_ptr<Core> core_;
  std::thread thread_;
};

}  // namespace tessera
