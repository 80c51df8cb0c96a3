"""whole_shared_library: one shared library holding every object of its
dependencies' libraries, transitively, for programs built outside this tree.

A cc_binary with linkshared = True links its dependencies' archives the usual
way: an object is pulled in only when something already linked refers to
it, so a library of nothing but dependencies comes out empty. This rule
links each of them whole (--whole-archive), keeps the system libraries they
name (-ltorch, -lgrpc++ ...) as the shared library's own dependencies, and
sets the soname.
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

def _whole_shared_library_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    features = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    libraries = []
    flags = []
    for dep in ctx.attr.deps:
        for linker_input in dep[CcInfo].linking_context.linker_inputs.to_list():
            flags.extend(linker_input.user_link_flags)
            for library in linker_input.libraries:
                if library.pic_static_library == None and library.static_library == None:
                    continue
                libraries.append(cc_common.create_library_to_link(
                    actions = ctx.actions,
                    feature_configuration = features,
                    cc_toolchain = cc_toolchain,
                    static_library = library.static_library,
                    pic_static_library = library.pic_static_library,
                    alwayslink = True,
                ))

    # Each system library once, in the order first named.
    seen = {}
    link_flags = []
    for flag in flags:
        if flag not in seen:
            seen[flag] = True
            link_flags.append(flag)
    linker_input = cc_common.create_linker_input(
        owner = ctx.label,
        libraries = depset(libraries),
        user_link_flags = depset(link_flags),
    )
    linked = cc_common.link(
        actions = ctx.actions,
        name = ctx.label.name,
        feature_configuration = features,
        cc_toolchain = cc_toolchain,
        linking_contexts = [cc_common.create_linking_context(
            linker_inputs = depset([linker_input]),
        )],
        user_link_flags = ["-Wl,-soname," + ctx.attr.soname, "-Wl,--no-undefined"],
        output_type = "dynamic_library",
    )
    library = linked.library_to_link.resolved_symlink_dynamic_library or \
              linked.library_to_link.dynamic_library
    return [DefaultInfo(files = depset([library]))]

whole_shared_library = rule(
    implementation = _whole_shared_library_impl,
    attrs = {
        "deps": attr.label_list(providers = [CcInfo]),
        "soname": attr.string(mandatory = True),
        "_cc_toolchain": attr.label(default = Label("@bazel_tools//tools/cpp:current_cc_toolchain")),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
)
