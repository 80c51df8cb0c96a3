// gcc's trace-cmp (tests/fuzz/fuzz.bzl) also instruments floating-point
// compares, which clang's libFuzzer runtime does not hook; they carry no
// useful signal here.
extern "C" void __sanitizer_cov_trace_cmpf(float, float) {}
extern "C" void __sanitizer_cov_trace_cmpd(double, double) {}
