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
  call_ = stub->PrepareCall(&context_, method, queue);
  if (call_ == nullptr) {
    // Nothing may start on it: a final step that is over at once.
    operations_.StartFinal([] {});
    if (operations_.Completed(/*final=*/true)) {
      OnDone(grpc::Status(grpc::StatusCode::INTERNAL, "gRPC could not prepare the call"));
    }
    return;
  }
  operations_.Start([this] { call_->StartCall(Handed(&open_tag_)); });
}

void AsyncClientBidi::Opened(bool ok) {
  if (ok) {
    StartRead(first_read_);
    OnOpened();
  } else {
    StopReading();  // fetches the reason (e.g. UNAVAILABLE)
  }
  if (operations_.Completed()) OnDone(status_);
}

void AsyncClientBidi::StartRead(grpc::ByteBuffer* buffer) {
  operations_.Start([&] { call_->Read(buffer, Handed(&read_tag_)); });
}

void AsyncClientBidi::StartWrite(const grpc::ByteBuffer* buffer) {
  const bool started = operations_.Start([&] { call_->Write(*buffer, Handed(&write_tag_)); });
  if (!started) OnWriteDone(false);
}

void AsyncClientBidi::StopReading() {
  operations_.StartFinal([this] { call_->Finish(&status_, Handed(&finish_tag_)); });
}

void AsyncClientBidi::ReadDone(bool ok) {
  OnReadDone(ok);
  if (operations_.Completed()) OnDone(status_);
}

void AsyncClientBidi::WriteDone(bool ok) {
  OnWriteDone(ok);
  if (operations_.Completed()) OnDone(status_);
}

void AsyncClientBidi::Finished(bool) {
  if (operations_.Completed(/*final=*/true)) OnDone(status_);
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
  context_.AsyncNotifyWhenDone(Handed(&end_tag_));
  service->RequestCall(&context_, &stream_, queue, queue, Handed(&arrive_tag_));
}

void AsyncServerBidi::Arrived(bool ok) {
  if (ok) operations_.Start([] {});  // the end tag, now due
  OnArrived(ok);
}

void AsyncServerBidi::StartRead(grpc::ByteBuffer* buffer) {
  // A read may still be started after Finish: it fails, which is all the
  // reader needs to know.
  operations_.Start([&] { stream_.Read(buffer, Handed(&read_tag_)); },
                    /*refuse_after_final=*/false);
}

void AsyncServerBidi::StartWrite(const grpc::ByteBuffer* buffer) {
  const bool started = operations_.Start([&] { stream_.Write(*buffer, Handed(&write_tag_)); });
  if (!started) OnWriteDone(false);
}

void AsyncServerBidi::Finish(const grpc::Status& status) {
  operations_.StartFinal([&] { stream_.Finish(status, Handed(&finish_tag_)); });
}

void AsyncServerBidi::ReadDone(bool ok) {
  OnReadDone(ok);
  if (operations_.Completed()) OnDone();
}

void AsyncServerBidi::WriteDone(bool ok) {
  OnWriteDone(ok);
  if (operations_.Completed()) OnDone();
}

void AsyncServerBidi::Finished(bool) {
  if (operations_.Completed(/*final=*/true)) OnDone();
}

void AsyncServerBidi::Ended(bool) {
  if (context_.IsCancelled()) OnCancel();
  if (operations_.Completed()) OnDone();
}

}  // namespace tessera::rpc
