// Executor: something that runs closures, later, on some thread.
#pragma once

#include <functional>

namespace tessera {

class Executor {
 public:
  virtual ~Executor() = default;
  // Schedules `task` to run once. Never runs it inline.
  virtual void Post(std::function<void()> task) = 0;
};

}  // namespace tessera
