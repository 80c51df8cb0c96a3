#include "collectives/gloo/gloo_store.h"

#include <gloo/common/error.h>

namespace tessera::collectives {
namespace {
[[noreturn]] void Throw(const absl::Status& status) {
  throw gloo::IoException(__FILE__ ":" + std::to_string(__LINE__) + ": " + status.ToString());
}
}  // namespace

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  auto status = store_->Set(prefix_ + "/" + key, std::string(data.begin(), data.end()));
  if (!status.ok()) Throw(status);
}

std::vector<char> GlooStore::get(const std::string& key) {
  auto value = store_->Get(prefix_ + "/" + key, timeout_);
  if (!value.ok()) Throw(value.status());
  return std::vector<char>(value->begin(), value->end());
}

void GlooStore::wait(const std::vector<std::string>& keys) {
  std::vector<std::string> prefixed;
  for (const auto& key : keys) prefixed.push_back(prefix_ + "/" + key);
  auto status = store_->Wait(prefixed, timeout_);
  if (!status.ok()) Throw(status);
}

void GlooStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) {
  // Gloo passes its context's timeout, which while a group connects is a
  // fifth of the budget (see ConnectFlat, gloo_process_group.cc): a peer
  // may publish its address as late as the whole budget allows.
  wait(keys);
}

}  // namespace tessera::collectives
