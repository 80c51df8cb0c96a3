"""A libFuzzer target and the test that runs it for a bounded number of inputs.

The fuzzer links clang's libFuzzer runtime (Debian's libclang-rt-14-dev) into
a gcc build. libFuzzer 14 refuses gcc's trace-pc edges, so its feedback is
gcc's trace-cmp hooks with -use_value_profile=1 (comparison operands as
features) rather than full edge coverage: `instrumented` names the sources
under test, compiled into the fuzzer with those hooks (their libraries'
copies are then not linked in). A clang build with -fsanitize=fuzzer would
be stronger; see docs/security.md.
"""

def tessera_fuzz_test(name, srcs, instrumented, deps, seeds = None, runs = 100000):
    """Makes `<name>` (the fuzzer) and `<name>_test`.

    Args:
      name: the fuzzer binary's name.
      srcs: the target's sources (LLVMFuzzerTestOneInput).
      instrumented: the sources under test, compiled with trace-cmp here.
      deps: libraries.
      seeds: the write_seeds target name whose corpus seeds the run, or a
        directory of checked-in seeds (a label list), or None.
      runs: inputs per test run (tests/fuzz/run_fuzzer.sh).
    """
    native.cc_binary(
        name = name,
        testonly = True,
        srcs = srcs + instrumented + ["fuzz_support.cc", "fuzz_support.h"],
        copts = ["-fsanitize-coverage=trace-cmp"],
        linkopts = [
            "-Wl,--whole-archive",
            "/usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a",
            "-Wl,--no-whole-archive",
        ],
        deps = deps,
    )
    args = ["$(location :%s)" % name, str(runs)]
    data = [":" + name]
    if type(seeds) == "string":
        args += ["$(location :write_seeds)", seeds]
        data.append(":write_seeds")
    elif seeds:
        args += ["tests/fuzz/corpus"]
        data += seeds
    native.sh_test(
        name = name + "_test",
        size = "medium",
        srcs = ["run_fuzzer.sh"],
        args = args,
        data = data,
    )
