#include "store/slurm_env.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tessera::store {

absl::StatusOr<std::string> FirstHostOfNodeList(const std::string& list) {
  std::string host;
  for (size_t i = 0; i < list.size(); ++i) {
    const char c = list[i];
    if (c == ',') break;  // the end of the first host (commas in brackets are skipped below)
    if (c != '[') {
      host += c;
      continue;
    }
    const size_t close = list.find(']', i);
    if (close == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("unclosed '[' in Slurm node list '", list, "'"));
    }
    // The first number of the first range: "01-04,07" -> "01".
    const std::string ranges = list.substr(i + 1, close - i - 1);
    const std::string first = ranges.substr(0, ranges.find_first_of(",-"));
    if (first.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("empty range in Slurm node list '", list, "'"));
    }
    host += first;
    i = close;
  }
  if (host.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("empty Slurm node list '", list, "'"));
  }
  return host;
}

absl::StatusOr<std::optional<std::string>> SlurmMasterHost() {
  for (const char* name : {"SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
    if (const char* list = std::getenv(name); list != nullptr && *list != '\0') {
      auto host = FirstHostOfNodeList(list);
      if (!host.ok()) return absl::InvalidArgumentError(absl::StrCat(name, ": ", host.status().message()));
      return std::optional<std::string>(*host);
    }
  }
  return std::optional<std::string>();
}

std::optional<int> SlurmInt(const char* name) {
  const char* value = std::getenv(name);
  int parsed = 0;
  if (value == nullptr || !absl::SimpleAtoi(value, &parsed)) return std::nullopt;
  return parsed;
}

}  // namespace tessera::store
