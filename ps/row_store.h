// RowStore: the rows of one shard of a table, and their optimizer's state.
//
// A dense shard holds its range of keys from the start; a sparse shard makes
// a row the first time a key is pushed (a pull of a key never pushed reads
// its initial value and makes nothing). A row starts from its key alone
// (Initializer, ps/table_options.h), so it is the same whichever server
// makes it. Rows live in one [capacity, dim] float tensor, addressed by slot;
// a sparse shard doubles the tensor when it fills.
//
// Thread-safety: none; its shard serialises every call.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "ps/key_slots.h"
#include "ps/row_optimizer.h"
#include "ps/shard_snapshot.h"
#include "ps/table_options.h"

namespace tessera::ps {

class RowStore {
 public:
  RowStore(TableOptions table, int64_t shard, int64_t shards);

  // The slots of `keys` (int64, 1-D), making the rows of new sparse keys.
  // InvalidArgument for a key another shard holds.
  absl::StatusOr<at::Tensor> Slots(const at::Tensor& keys);
  // The same check, making nothing: every key is this shard's, and `keys`
  // is a 1-D int64 tensor (InvalidArgument naming the first that is not).
  absl::Status Check(const at::Tensor& keys) const;
  // The rows of `keys` (checked: Check), [n, dim]: a sparse key never
  // pushed reads as its initial value, and is not made.
  at::Tensor Read(const at::Tensor& keys) const;
  // The optimizer's step on the rows at `slots` (distinct) for `grads`.
  void Apply(const at::Tensor& slots, const at::Tensor& grads);
  // Rows held (made, for a sparse shard).
  int64_t size() const { return size_; }
  // Every row held, by key order (dense) or slot order (sparse): for tests
  // and checkpoints.
  at::Tensor Values() const;
  // A hash of the rows held, their order and their optimizer state.
  uint64_t Digest() const;
  // A copy of the rows held now, their keys and their optimizer state, in
  // `snapshot` (ps/shard_snapshot.h), taken while changes go on: Begin
  // makes room and notes the rows; Continue copies up to `rows` more (the
  // caller releases its lock in between, so pushes are not held up for a
  // whole large shard), true once every row is copied; a row changed
  // meanwhile is copied first, as it was (copy-on-write, in Apply). One
  // snapshot at a time; `snapshot` must live until Continue says done.
  void BeginSnapshot(ShardSnapshot* snapshot);
  bool ContinueSnapshot(int64_t rows);
  // Holds `snapshot`'s rows, in its order, as rows first_row.. of the
  // snapshot they are part of (ShardSnapshot::Rows): on a new replica, the
  // parts in order. InvalidArgument when they are not this shard's (a key
  // another shard holds, or twice, a shape or type wrong, a part out of
  // order): the store may then hold part of them, and its replica is dropped.
  absl::Status Restore(const ShardSnapshot& snapshot, int64_t first_row);

 private:
  // Whether `key` belongs to this shard.
  bool Holds(int64_t key) const;
  // Writes the initial row of `key` to `row`.
  void Initialise(int64_t key, float* row) const;
  void Reserve(int64_t capacity);
  // Copies rows first..first+n-1, and a sparse shard their keys, into the
  // snapshot being taken.
  void CopyRows(int64_t first, int64_t n);

  const TableOptions table_;
  const int64_t shard_, shards_;
  int64_t first_key_ = 0;  // dense: the first key of this shard's range
  int64_t size_ = 0;
  at::Tensor values_;  // [capacity, dim]
  RowOptimizer optimizer_;
  KeySlots slot_of_;  // sparse: key -> slot
  std::vector<int64_t> key_of_;  // sparse: slot -> key
  // The snapshot being taken (BeginSnapshot), of the first copy_rows_
  // rows: those below copy_next_ are copied, and those marked in copied_.
  ShardSnapshot* copying_ = nullptr;
  int64_t copy_rows_ = 0, copy_next_ = 0;
  std::vector<bool> copied_;
};

}  // namespace tessera::ps
