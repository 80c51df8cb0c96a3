#include "rpc/grpc/async_bidi.h"

namespace tessera::rpc {

AsyncClientBidi::AsyncClientBidi()
    : open_tag_(this, &AsyncClientBidi::Opened),
      read_tag_(this, &AsyncClientBidi::ReadDone),
      write_tag_(this, &AsyncClientBidi::WriteDone),
      finish_tag_(this, &AsyncClientBidi::Finished) {}

void AsyncClientBidi::StartCall(grpc::GenericStub* stub, const std::string& method,
                                grpc::CompletionQueue* queue, grpc::ByteBuffer* first_read) {
  first_read_ = first_read;
  {
    MutexLock lock(&mu_);
    call_ = stub->PrepareCall(&context_, method, queue);
    if (call_ != nullptr) {
      ++in_flight_;
      call_->StartCall(&open_tag_);
      return;
    }
    finishing_ = finished_ = true;  // no operation can start
  }
  OnDone(grpc::Status(grpc::StatusCode::INTERNAL, "gRPC could not prepare the call"));
}

void AsyncClientBidi::Opened(bool ok) {
  if (ok) {
    StartRead(first_read_);
    OnOpened();
  } else {
    StopReading();  // fetches the reason (e.g. UNAVAILABLE)
  }
  Release();
}

// Operations start under mu_: gRPC never completes one inline, and the lock
// orders them against StopReading's finishing_.
void AsyncClientBidi::StartRead(grpc::ByteBuffer* buffer) {
  MutexLock lock(&mu_);
  ++in_flight_;
  call_->Read(buffer, &read_tag_);
}

void AsyncClientBidi::StartWrite(const grpc::ByteBuffer* buffer) {
  {
    MutexLock lock(&mu_);
    if (!finishing_) {
      ++in_flight_;
      call_->Write(*buffer, &write_tag_);
      return;
    }
  }
  OnWriteDone(false);
}

void AsyncClientBidi::StopReading() {
  MutexLock lock(&mu_);
  if (finishing_) return;
  finishing_ = true;
  ++in_flight_;
  call_->Finish(&status_, &finish_tag_);
}

void AsyncClientBidi::ReadDone(bool ok) {
  OnReadDone(ok);
  Release();
}

void AsyncClientBidi::WriteDone(bool ok) {
  OnWriteDone(ok);
  Release();
}

void AsyncClientBidi::Finished(bool) {
  {
    MutexLock lock(&mu_);
    finished_ = true;
  }
  Release();
}

void AsyncClientBidi::Release() {
  bool done = false;
  {
    MutexLock lock(&mu_);
    done = --in_flight_ == 0 && finished_;
  }
  if (done) OnDone(status_);
}

AsyncServerBidi::AsyncServerBidi()
    : stream_(&context_),
      arrive_tag_(this, &AsyncServerBidi::Arrived),
      read_tag_(this, &AsyncServerBidi::ReadDone),
      write_tag_(this, &AsyncServerBidi::WriteDone),
      finish_tag_(this, &AsyncServerBidi::Finished),
      end_tag_(this, &AsyncServerBidi::Ended) {}

void AsyncServerBidi::Accept(grpc::AsyncGenericService* service,
                             grpc::ServerCompletionQueue* queue) {
  // Delivered once the call ends, cancelled or not — but only for a call
  // that arrived (gRPC drops it for a request the server's shutdown fails).
  context_.AsyncNotifyWhenDone(&end_tag_);
  service->RequestCall(&context_, &stream_, queue, queue, &arrive_tag_);
}

void AsyncServerBidi::Arrived(bool ok) {
  if (ok) {
    MutexLock lock(&mu_);
    ++in_flight_;  // the end tag
  }
  OnArrived(ok);
}

void AsyncServerBidi::StartRead(grpc::ByteBuffer* buffer) {
  MutexLock lock(&mu_);
  ++in_flight_;
  stream_.Read(buffer, &read_tag_);
}

void AsyncServerBidi::StartWrite(const grpc::ByteBuffer* buffer) {
  {
    MutexLock lock(&mu_);
    if (!finishing_) {
      ++in_flight_;
      stream_.Write(*buffer, &write_tag_);
      return;
    }
  }
  OnWriteDone(false);
}

void AsyncServerBidi::Finish(const grpc::Status& status) {
  MutexLock lock(&mu_);
  if (finishing_) return;
  finishing_ = true;
  ++in_flight_;
  stream_.Finish(status, &finish_tag_);
}

void AsyncServerBidi::ReadDone(bool ok) {
  OnReadDone(ok);
  Release();
}

void AsyncServerBidi::WriteDone(bool ok) {
  OnWriteDone(ok);
  Release();
}

void AsyncServerBidi::Finished(bool) {
  {
    MutexLock lock(&mu_);
    finished_ = true;
  }
  Release();
}

void AsyncServerBidi::Ended(bool) {
  if (context_.IsCancelled()) OnCancel();
  Release();
}

void AsyncServerBidi::Release() {
  bool done = false;
  {
    MutexLock lock(&mu_);
    done = --in_flight_ == 0 && finished_;
  }
  if (done) OnDone();
}

}  // namespace tessera::rpc
