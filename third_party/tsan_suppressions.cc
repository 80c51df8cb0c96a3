// ThreadSanitizer suppressions, linked into every Tessera binary through
// //common (TSan calls this hook at start-up; other builds ignore it), so
// tools like tessera-run and the examples carry them too.
//
// Debian's gRPC, Abseil, TensorPipe, Gloo, OpenSSL and oneDNN are not built with TSan, so the
// atomics and locks with which they hand data between their own threads are
// invisible: what they carry looks like a race. Only whole uninstrumented
// modules are listed, never Tessera code (which synchronizes with
// std::mutex, common/mutex.h, so that TSan sees it).
extern "C" const char* __tsan_default_suppressions() {
  return "race:libgrpc.so\n"
         "race:libgrpc++.so\n"
         "race:libgpr.so\n"
         "race:libupb.so\n"  // gRPC's message library (a status's details copied there)
         "called_from_lib:libgrpc.so\n"
         "called_from_lib:libgrpc++.so\n"
         "called_from_lib:libgpr.so\n"
         "called_from_lib:libupb.so\n"
         "race:libabsl_\n"  // every Abseil module (patterns match substrings)
         // gRPC's header templates, compiled into the test binaries
         "race:grpc::internal::\n"
         "race:libtensorpipe.so\n"
         "race:libgloo.so\n"
         // oneDNN (LibTorch's CPU convolutions) publishes its lazily made
         // locks to other threads through its own atomics
         "race:libdnnl.so\n"
         // OpenSSL, under gRPC's TLS (run on our completion-queue thread)
         "race:libssl.so\n"
         "race:libcrypto.so\n"
         "called_from_lib:libssl.so\n"
         "called_from_lib:libcrypto.so\n"
         "called_from_lib:libabsl_synchronization.so\n"
         // absl::Status shares its heap representation by reference count,
         // decremented in uninstrumented libabsl_status.so; blind to it, TSan
         // reports the last holder's free as racing with the other holders'
         // earlier use (a Ref, inlined into our code). The free is a tail
         // call from libabsl_status.so, so its stack holds no frame of that
         // library, only the inline Unref that TSan's unstripped line tables
         // name (.bazelrc, --config=tsan). ASan runs the same suites (scripts/sanitizers.sh) and
         // would report a real use after such a free.
         "race:absl::*Status::Unref\n"
         // LibTorch: the same blindness for autograd's graph. A Node is held
         // by std::shared_ptr from our code (a dist_autograd context's send
         // functions) and from LibTorch's own (a tensor's grad_fn); when the
         // last release is LibTorch's, its decrement is invisible and the
         // free of the control block is reported against our earlier,
         // instrumented decrement (dist_autograd_test, an RRef's value freed
         // after its context was released).
         "race:libtorch_cpu.so\n"
         "called_from_lib:libtensorpipe.so\n";
}
