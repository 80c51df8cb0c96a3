// ThreadSanitizer suppressions, compiled into every test binary (TSan calls
// this hook at start-up; other builds ignore it).
//
// Debian's gRPC (and the Abseil inside it) is not built with TSan, so the
// synchronization with which it hands messages between its own threads is
// invisible: every request or response it carries looks like a race. Only
// whole uninstrumented modules are listed, never Tessera code.
extern "C" const char* __tsan_default_suppressions() {
  return "race:libgrpc.so\n"
         "race:libgrpc++.so\n"
         "race:libgpr.so\n"
         "called_from_lib:libgrpc.so\n"
         "called_from_lib:libgrpc++.so\n"
         "called_from_lib:libgpr.so\n";
}
