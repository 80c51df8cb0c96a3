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
  // One operation fewer in flight; runs OnDone after the last one.
  void Release();

  grpc::ClientContext context_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  grpc::ByteBuffer* first_read_ = nullptr;
  grpc::Status status_;
  MemberTag<AsyncClientBidi> open_tag_, read_tag_, write_tag_, finish_tag_;

  Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
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
  void Release();

  grpc::GenericServerContext context_;
  grpc::GenericServerAsyncReaderWriter stream_;
  MemberTag<AsyncServerBidi> arrive_tag_, read_tag_, write_tag_, finish_tag_, end_tag_;

  Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace tessera::rpc
