#include "rpc/grpc/completion_loop.h"

#include <pthread.h>

namespace tessera::rpc {

CompletionLoop::CompletionLoop(std::unique_ptr<grpc::ServerCompletionQueue> queue, int threads)
    : queue_(std::move(queue)) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Poll(); });
}

void CompletionLoop::Poll() {
  pthread_setname_np(pthread_self(), "tessera-grpc");  // for top -H and perf
  void* tag = nullptr;
  bool ok = false;
  while (queue_->Next(&tag, &ok)) {
#if defined(__SANITIZE_THREAD__)
    __tsan_acquire(tag);  // see Handed()
#endif
    static_cast<CompletionTag*>(tag)->Complete(ok);
  }
}

void CompletionLoop::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  queue_->Shutdown();
  for (std::thread& thread : threads_) thread.join();
}

}  // namespace tessera::rpc
