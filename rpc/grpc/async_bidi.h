// AsyncClientBidi / AsyncServerBidi: one bidirectional gRPC stream driven
// by a CompletionLoop, with the shape of gRPC's callback reactors (start a
// read, start a write, react in OnReadDone / OnWriteDone, OnDone last).
//
// Rules, as for reactors: at most one read and one write in flight; the
// reactions of one stream may run concurrently on different loop threads;
// OnDone runs once, after every started operation has completed, and
// nothing of the stream is touched by gRPC after it. Unlike reactors, a
// write started after the stream began finishing is not sent: OnWriteDone
// (false) reports it at once.
#pragma once

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>

#include <memory>
#include <string>

#include "common/mutex.h"
#include "rpc/grpc/completion_loop.h"

namespace tessera::rpc {

// The bookkeeping both stream kinds share: which operations are in flight,
// and whether the final one (Finish) has started and completed. Operations
// start under its lock (gRPC never completes one inline), which orders them
// against the final one: nothing starts after it.
class StreamOperations {
 public:
  // Starts an operation with `start` unless the final one has started
  // (and `refuse_after_final`); true if it started.
  template <typename StartFn>
  bool Start(StartFn start, bool refuse_after_final = true) {
    MutexLock lock(&mu_);
    if (final_started_ && refuse_after_final) return false;
    ++in_flight_;
    start();
    return true;
  }
  // Starts the final operation, once; false if it had started already.
  template <typename StartFn>
  bool StartFinal(StartFn start) {
    MutexLock lock(&mu_);
    if (final_started_) return false;
    final_started_ = true;
    ++in_flight_;
    start();
    return true;
  }
  // An operation completed (`final`: the final one); true when the stream
  // is over: the final one completed and nothing is in flight.
  bool Completed(bool final = false) {
    MutexLock lock(&mu_);
    if (final) final_done_ = true;
    return --in_flight_ == 0 && final_done_;
  }

 private:
  Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool final_started_ ABSL_GUARDED_BY(mu_) = false;
  bool final_done_ ABSL_GUARDED_BY(mu_) = false;
};

class AsyncClientBidi {
 public:
  virtual ~AsyncClientBidi() = default;

 protected:
  AsyncClientBidi();

  // Opens the call; once open, starts reading into `first_read` and runs
  // OnOpened(). If it cannot open, OnDone follows with gRPC's status (at
  // once, from this call, if gRPC cannot even prepare it).
  void StartCall(grpc::GenericStub* stub, const std::string& method, grpc::CompletionQueue* queue,
                 grpc::ByteBuffer* first_read);
  void StartRead(grpc::ByteBuffer* buffer);
  void StartWrite(const grpc::ByteBuffer* buffer);
  // Call when no more reads will be started (a read failed, or the stream
  // is being abandoned): the call's status is fetched and OnDone follows.
  void StopReading();
  grpc::ClientContext& context() { return context_; }

  virtual void OnOpened() = 0;
  virtual void OnReadDone(bool ok) = 0;
  virtual void OnWriteDone(bool ok) = 0;
  virtual void OnDone(const grpc::Status& status) = 0;

 private:
  void Opened(bool ok);
  void ReadDone(bool ok);
  void WriteDone(bool ok);
  void Finished(bool ok);

  grpc::ClientContext context_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  grpc::ByteBuffer* first_read_ = nullptr;
  grpc::Status status_;
  MemberTag<AsyncClientBidi> open_tag_, read_tag_, write_tag_, finish_tag_;
  StreamOperations operations_;
};

class AsyncServerBidi {
 public:
  virtual ~AsyncServerBidi() = default;

 protected:
  AsyncServerBidi();

  // Waits for the next call to `service`; OnArrived(ok) follows (ok false:
  // the server is shutting down and this stream will see nothing else).
  void Accept(grpc::AsyncGenericService* service, grpc::ServerCompletionQueue* queue);
  void StartRead(grpc::ByteBuffer* buffer);
  void StartWrite(const grpc::ByteBuffer* buffer);
  // Sends the final status; call once, with no write in flight.
  void Finish(const grpc::Status& status);
  const grpc::GenericServerContext& context() const { return context_; }

  virtual void OnArrived(bool ok) = 0;
  virtual void OnReadDone(bool ok) = 0;
  virtual void OnWriteDone(bool ok) = 0;
  // The client cancelled or the connection broke; Finish is still due.
  virtual void OnCancel() = 0;
  virtual void OnDone() = 0;

 private:
  void Arrived(bool ok);
  void ReadDone(bool ok);
  void WriteDone(bool ok);
  void Finished(bool ok);
  void Ended(bool ok);

  grpc::GenericServerContext context_;
  grpc::GenericServerAsyncReaderWriter stream_;
  MemberTag<AsyncServerBidi> arrive_tag_, read_tag_, write_tag_, finish_tag_, end_tag_;
  StreamOperations operations_;
};

}  // namespace tessera::rpc
