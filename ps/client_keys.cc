// PsClient's keys (ps/ps_client.h): a call's keys made distinct and split by
// shard, and the shards' rows put back in the order asked.
#include <ATen/ops/empty.h>
#include <c10/util/StringUtil.h>

#include "absl/strings/str_cat.h"
#include "ps/distinct_keys.h"
#include "ps/ps_client.h"
#include "ps/shard_map.h"

namespace tessera::ps {

absl::StatusOr<PsClient::Split> PsClient::SplitKeys(const Table& table,
                                                    const at::Tensor& keys) const {
  if (!keys.defined() || keys.scalar_type() != at::kLong || keys.dim() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "keys of table '", table.options.name, "' must be a 1-D int64 tensor, got ",
        keys.defined() ? absl::StrCat(keys.toString(), " of ", keys.dim(), " dimensions")
                       : "none"));
  }
  Split split;
  Distinct distinct = DistinctKeys(keys);
  split.unique = distinct.keys;
  split.inverse = distinct.inverse;
  auto shard_of = ShardsOfKeys(table.options, shards_, split.unique);
  if (!shard_of.ok()) return shard_of.status();
  for (int64_t s = 0; s < shards_; ++s) {
    at::Tensor positions = shard_of->eq(s).nonzero().squeeze(1);
    if (positions.numel() == 0) continue;
    split.shards.push_back(s);
    split.positions.push_back(positions);
    // A shard that holds every key takes them as they are.
    split.keys.push_back(positions.numel() == split.unique.numel()
                             ? split.unique
                             : split.unique.index_select(0, positions));
  }
  return split;
}

absl::StatusOr<at::Tensor> PsClient::Assemble(const std::string& table, const Split& split,
                                              std::vector<at::Tensor> answers, int64_t dim) {
  for (size_t i = 0; i < answers.size(); ++i) {
    const at::Tensor& part = answers[i];
    if (!part.defined() || part.dim() != 2 || part.size(0) != split.keys[i].numel() ||
        part.size(1) != dim) {
      return absl::InternalError(
          absl::StrCat("table '", table, "' shard ", split.shards[i], " answered rows of shape ",
                       part.defined() ? c10::str(part.sizes()) : std::string("none")));
    }
  }
  // One shard held every key: its rows are in the distinct keys' order.
  at::Tensor rows;
  if (answers.size() == 1) {
    rows = answers[0];
  } else {
    rows = at::empty({split.unique.numel(), dim}, at::TensorOptions().dtype(at::kFloat));
    for (size_t i = 0; i < answers.size(); ++i) rows.index_copy_(0, split.positions[i], answers[i]);
  }
  // Every key distinct: the distinct keys are the keys asked, in order.
  return split.unique.numel() == split.inverse.numel() ? rows : rows.index_select(0, split.inverse);
}

}  // namespace tessera::ps
