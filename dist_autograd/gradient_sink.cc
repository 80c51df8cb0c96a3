#include "dist_autograd/gradient_sink.h"

namespace tessera::dist_autograd {
namespace {
thread_local GradientSink* current_sink = nullptr;
}  // namespace

GradientSink* GradientSink::Current() { return current_sink; }

GradientSinkScope::GradientSinkScope(GradientSink* sink) : previous_(current_sink) {
  current_sink = sink;
}

GradientSinkScope::~GradientSinkScope() { current_sink = previous_; }

}  // namespace tessera::dist_autograd
