// The statistic the benchmarks report: the median of a run's samples
// (the upper one of the middle two for an even count).
#pragma once

#include <algorithm>
#include <vector>

namespace tessera::bench {

inline double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace tessera::bench
