// Note [Traced collectives]: while tracing or counting metrics (common/
// trace.h, common/metrics.h), every collective of a group made by
// CreateGlooProcessGroup, CreateNcclProcessGroup or their FromEnv forms is
// a span on the "collectives" row, from the call to its completion (named
// by the operation, with its bytes and peer rank for point to point), and
// its time counts in the metrics by operation. Off, groups are not wrapped
// and nothing is added.
#pragma once

#include <memory>

#include "ddp/process_group.h"

namespace tessera::ddp {

// `inner`, wrapped when tracing or metrics are on; itself otherwise.
std::unique_ptr<ProcessGroup> WithTracing(std::unique_ptr<ProcessGroup> inner);

}  // namespace tessera::ddp
