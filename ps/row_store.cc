#include "ps/row_store.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <c10/util/StringUtil.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "ps/key_hash.h"
#include "ps/shard_map.h"

namespace tessera::ps {

RowStore::RowStore(TableOptions table, int64_t shard, int64_t shards)
    : table_(std::move(table)),
      shard_(shard),
      shards_(shards),
      optimizer_(table_.optimizer, table_.dim) {
  if (table_.kind == TableKind::kDense) {
    auto [first, end] = DenseRange(table_.rows, shards_, shard_);
    first_key_ = first;
    Reserve(end - first);
    for (int64_t key = first; key < end; ++key) {
      Initialise(key, values_.data_ptr<float>() + (key - first) * table_.dim);
    }
    size_ = end - first;
  } else {
    Reserve(1024);
  }
}

void RowStore::Reserve(int64_t capacity) {
  if (values_.defined() && values_.size(0) >= capacity) return;
  at::Tensor grown = at::empty({capacity, table_.dim}, at::TensorOptions().dtype(at::kFloat));
  if (values_.defined()) grown.narrow(0, 0, values_.size(0)).copy_(values_);
  values_ = grown;
  optimizer_.Reserve(capacity);
}

void RowStore::Initialise(int64_t key, float* row) const {
  const Initializer& init = table_.init;
  for (int64_t j = 0; j < table_.dim; ++j) {
    const uint64_t k = static_cast<uint64_t>(key), c = static_cast<uint64_t>(j);
    switch (init.kind) {
      case Initializer::Kind::kZeros:
        row[j] = 0;
        break;
      case Initializer::Kind::kUniform:
        row[j] = static_cast<float>(init.a + (init.b - init.a) * UnitFromKey(init.seed, k, c));
        break;
      case Initializer::Kind::kNormal: {
        // Box-Muller over two of the key's uniforms.
        const double u1 = 1.0 - UnitFromKey(init.seed, k, 2 * c);
        const double u2 = UnitFromKey(init.seed, k, 2 * c + 1);
        row[j] = static_cast<float>(init.a + init.b * std::sqrt(-2 * std::log(u1)) *
                                                 std::cos(2 * M_PI * u2));
        break;
      }
    }
  }
}

bool RowStore::Holds(int64_t key) const {
  if (table_.kind == TableKind::kDense) return key >= first_key_ && key < first_key_ + size_;
  return MixKey(static_cast<uint64_t>(key)) % static_cast<uint64_t>(shards_) ==
         static_cast<uint64_t>(shard_);
}

absl::Status RowStore::Check(const at::Tensor& keys) const {
  if (!keys.defined() || keys.scalar_type() != at::kLong || keys.dim() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "keys of table '", table_.name, "' must be a 1-D int64 tensor, got ",
        keys.defined() ? absl::StrCat(keys.toString(), " of ", keys.dim(), " dimensions")
                       : "none"));
  }
  at::Tensor contiguous = keys.contiguous();
  const int64_t* key = contiguous.data_ptr<int64_t>();
  for (int64_t i = 0; i < contiguous.numel(); ++i) {
    if (!Holds(key[i])) {
      return absl::InvalidArgumentError(absl::StrCat("key ", key[i], " of table '", table_.name,
                                                     "' is not on shard ", shard_, " of ",
                                                     shards_));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<at::Tensor> RowStore::Slots(const at::Tensor& keys) {
  if (auto ok = Check(keys); !ok.ok()) return ok;
  at::Tensor contiguous = keys.contiguous();
  at::Tensor slots = at::empty({contiguous.numel()}, contiguous.options());
  const int64_t* key = contiguous.data_ptr<int64_t>();
  int64_t* slot = slots.data_ptr<int64_t>();
  for (int64_t i = 0; i < contiguous.numel(); ++i) {
    if (table_.kind == TableKind::kDense) {
      slot[i] = key[i] - first_key_;
      continue;
    }
    auto [found, made] = slot_of_.FindOrAdd(key[i], size_);
    if (made) {
      key_of_.push_back(key[i]);
      if (size_ == values_.size(0)) Reserve(2 * size_);
      Initialise(key[i], values_.data_ptr<float>() + size_ * table_.dim);
      ++size_;
    }
    slot[i] = found;
  }
  return slots;
}

at::Tensor RowStore::Read(const at::Tensor& keys) const {
  at::Tensor contiguous = keys.contiguous();
  const int64_t n = contiguous.numel(), dim = table_.dim;
  if (table_.kind == TableKind::kDense) {
    return values_.index_select(0, contiguous - first_key_);
  }
  at::Tensor rows = at::empty({n, dim}, values_.options());
  const int64_t* key = contiguous.data_ptr<int64_t>();
  const float* values = values_.data_ptr<float>();
  float* out = rows.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = slot_of_.Find(key[i]);
    if (slot < 0) {
      Initialise(key[i], out + i * dim);
    } else {
      std::memcpy(out + i * dim, values + slot * dim, dim * sizeof(float));
    }
  }
  return rows;
}

void RowStore::Apply(const at::Tensor& slots, const at::Tensor& grads) {
  if (copying_ != nullptr) {
    // Copy-on-write: a row the snapshot has not copied yet goes first.
    const at::Tensor contiguous = slots.contiguous();
    const int64_t* slot = contiguous.data_ptr<int64_t>();
    for (int64_t i = 0; i < contiguous.numel(); ++i) {
      const int64_t s = slot[i];
      if (s >= copy_next_ && s < copy_rows_ && !copied_[s]) {
        CopyRows(s, 1);
        copied_[s] = true;
      }
    }
  }
  optimizer_.Apply(values_, slots, grads);
}

at::Tensor RowStore::Values() const { return values_.narrow(0, 0, size_).clone(); }

uint64_t RowStore::Digest() const {
  uint64_t hash = HashBytes(static_cast<uint64_t>(size_), values_.data_ptr<float>(),
                            size_ * table_.dim * sizeof(float));
  return optimizer_.Digest(hash, size_);
}

void RowStore::BeginSnapshot(ShardSnapshot* snapshot) {
  copying_ = snapshot;
  copy_rows_ = size_;
  copy_next_ = 0;
  copied_.assign(size_, false);
  snapshot->values = at::empty({size_, table_.dim}, values_.options());
  snapshot->optimizer = optimizer_.EmptyState(size_);
  // A sparse shard's keys are copied with their rows, in parts (a slot's key
  // never changes): copied all here, under the caller's lock, they would
  // hold pushes up while 8 bytes a row are copied — 32 MB for a 1 GiB
  // shard of 64-float rows.
  snapshot->keys = at::empty({table_.kind == TableKind::kDense ? 0 : size_}, at::kLong);
}

bool RowStore::ContinueSnapshot(int64_t rows) {
  const int64_t end = std::min(copy_rows_, copy_next_ + rows);
  // Runs of rows not copied yet (a row changed meanwhile was, as it was).
  for (int64_t first = copy_next_; first < end;) {
    if (copied_[first]) {
      ++first;
      continue;
    }
    int64_t last = first;
    while (last < end && !copied_[last]) ++last;
    CopyRows(first, last - first);
    first = last;
  }
  copy_next_ = end;
  if (copy_next_ < copy_rows_) return false;
  copying_ = nullptr;
  copied_.clear();
  return true;
}

void RowStore::CopyRows(int64_t first, int64_t n) {
  copying_->values.narrow(0, first, n).copy_(values_.narrow(0, first, n));
  optimizer_.CopyState(first, n, copying_->optimizer);
  if (table_.kind != TableKind::kDense) {
    std::memcpy(copying_->keys.data_ptr<int64_t>() + first, key_of_.data() + first,
                n * sizeof(int64_t));
  }
}

absl::Status RowStore::Restore(const ShardSnapshot& snapshot, int64_t first_row) {
  const at::Tensor& values = snapshot.values;
  const bool dense = table_.kind == TableKind::kDense;
  const int64_t rows = values.defined() && values.dim() == 2 ? values.size(0) : -1;
  const std::string what = absl::StrCat("a snapshot of table '", table_.name, "' shard ", shard_);
  if (rows < 0 || values.scalar_type() != at::kFloat || values.size(1) != table_.dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " with rows ",
        values.defined()
            ? absl::StrCat(c10::str(values.sizes()), " of ", c10::toString(values.scalar_type()))
            : "undefined",
        ": expected [n, ", table_.dim, "] floats"));
  }
  if (first_row < 0 || first_row > size_ || (dense && rows > size_ - first_row) ||
      (!dense && first_row != size_)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": rows ", first_row, "..",
                                                   first_row + rows - 1, " after ", size_,
                                                   dense ? " of a dense range" : " rows held"));
  }
  if (!dense) {
    if (auto ok = Check(snapshot.keys); !ok.ok()) return ok;
    if (snapshot.keys.numel() != rows) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " with ", snapshot.keys.numel(), " keys for ", rows, " rows"));
    }
    const at::Tensor keys = snapshot.keys.contiguous();
    const int64_t* key = keys.data_ptr<int64_t>();
    for (int64_t i = 0; i < rows; ++i) {
      if (!slot_of_.FindOrAdd(key[i], first_row + i).second) {
        return absl::InvalidArgumentError(absl::StrCat(what, " holds key ", key[i], " twice"));
      }
      key_of_.push_back(key[i]);
    }
    Reserve(std::max(first_row + rows, values_.size(0)));
    size_ = first_row + rows;
  }
  if (auto ok = optimizer_.Restore(snapshot.optimizer, first_row, rows); !ok.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", ok.message()));
  }
  values_.narrow(0, first_row, rows).copy_(values);
  return absl::OkStatus();
}

}  // namespace tessera::ps
