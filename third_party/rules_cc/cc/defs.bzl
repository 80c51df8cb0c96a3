"""Re-exports Bazel's native C++ rules.

Debian's bazel-rules-cc is too new for Bazel 4.2.3, and the build is offline,
so this shim stands in for @rules_cc.
"""

cc_binary = native.cc_binary
cc_import = native.cc_import
cc_library = native.cc_library
cc_proto_library = native.cc_proto_library
cc_test = native.cc_test
cc_toolchain = native.cc_toolchain
cc_toolchain_suite = native.cc_toolchain_suite
