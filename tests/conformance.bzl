"""One test source, run against every RPC backend.

rpc_conformance_test(name = "x_test", ...) compiles the sources once (a
test-only library) and links two tests: `x_test` over TensorPipe and
`x_test_grpc` over gRPC. The backend reaches every worker process through
TESSERA_RPC_BACKEND (children inherit it), so the test code is the same.
"""

BACKENDS = {
    "": "tensorpipe",
    "_grpc": "grpc",
}

def rpc_conformance_test(name, srcs, deps, size = "large", data = [], tags = [], flaky = False):
    native.cc_library(
        name = name + "_lib",
        testonly = True,
        srcs = srcs,
        deps = deps,
        alwayslink = True,
    )
    for suffix, backend in BACKENDS.items():
        native.cc_test(
            name = name + suffix,
            size = size,
            data = data,
            tags = tags,
            flaky = flaky,
            env = {"TESSERA_RPC_BACKEND": backend},
            deps = [":" + name + "_lib"],
        )
