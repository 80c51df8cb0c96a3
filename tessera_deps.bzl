"""tessera_dependencies(): the repositories a workspace that depends on Tessera
needs, offline (Debian's packages; nothing is downloaded). scripts/install.sh
installs this file in PREFIX/share/tessera/bazel, the repository of the
installed library, with the third_party/ folders it reads. In the user's
WORKSPACE, after Tessera itself:

    local_repository(name = "tessera", path = "PREFIX/share/tessera/bazel")
    load("@tessera//:tessera_deps.bzl", "tessera_dependencies")
    tessera_dependencies()

The repository must be named "tessera". Flags for the user's .bazelrc: see
docs/guide/own-project.md (examples/out_of_tree/.bazelrc).
"""

def _tessera_third_party_impl(ctx):
    # This file's own repository (@tessera), wherever the user checked it out.
    root = ctx.path(Label("//:WORKSPACE")).dirname
    source = root.get_child("third_party").get_child(ctx.attr.directory)
    for child in source.readdir():
        ctx.symlink(child, child.basename)

# A repository whose files are one of Tessera's third_party/ folders.
_tessera_third_party = repository_rule(
    implementation = _tessera_third_party_impl,
    attrs = {"directory": attr.string(mandatory = True)},
    local = True,
)

def tessera_dependencies():
    """Declares rules_cc, rules_java and remote_coverage_tools as Tessera's
    own WORKSPACE does (Bazel 4.2's @bazel_tools would otherwise try to
    download them)."""
    existing = native.existing_rules()
    if "rules_java" not in existing:
        native.local_repository(name = "rules_java", path = "/usr/share/bazel/rules/java")
    if "rules_cc" not in existing:
        _tessera_third_party(name = "rules_cc", directory = "rules_cc")
    if "remote_coverage_tools" not in existing:
        _tessera_third_party(name = "remote_coverage_tools", directory = "remote_coverage_tools")
