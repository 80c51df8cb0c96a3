#!/usr/bin/env python3
"""Packs programs built here (Debian 12) with the shared libraries they need
into one tar.xz, for a GPU machine that has CUDA's driver and NCCL but not
Debian's packages (the `device` machines: another distribution, no network).

    scripts/gpu/bundle.py OUT.tar.xz PROGRAM...

The archive holds bin/PROGRAM... and lib/*.so*. Left out: the C and C++
runtimes (the GPU machine's are newer, and newer ones run older programs),
the CUDA driver, and NCCL (the machine brings its own libnccl.so.2; the
API is stable within major version 2).

Debian's LibTorch links OpenCV, FFmpeg and OpenCL (for Caffe2's image and
video operators) and is linked with BIND_NOW, so every symbol it imports
must resolve when it loads. Carrying those libraries and theirs would be
~500 MB; instead each is replaced by a stub of the same soname defining
just the symbols the carried libraries import from it, with their symbol
versions. A stub function traps if called: nothing Tessera runs calls them.
"""
import os
import re
import subprocess
import sys
import tempfile

# The runtime the GPU machine provides.
SYSTEM = re.compile(r"^(libc|libm|libpthread|libdl|librt|libutil|ld-linux-x86-64|libstdc\+\+|"
                    r"libgcc_s|libcuda|libnccl)\.so")
# Replaced by stubs (with everything only they need).
STUBBED = re.compile(r"^(libopencv_\w+|libavcodec|libavformat|libavutil|libswscale|libswresample|"
                     r"libOpenCL)\.so")


def run(*args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def resolved_paths(programs):
    """soname -> path, over the whole closure, as this machine's loader finds them."""
    paths = {}
    for program in programs:
        for line in run("ldd", program).splitlines():
            m = re.match(r"\s*(\S+) => (/\S+)", line)
            if m:
                paths[m.group(1)] = m.group(2)
    return paths


def needed(path):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run("readelf", "-d", path))


def closure(programs, paths):
    carried, stubbed, todo = set(), set(), list(programs)
    seen = set()
    while todo:
        path = todo.pop()
        for name in needed(path):
            if name in seen or SYSTEM.match(name):
                continue
            seen.add(name)
            if STUBBED.match(name):
                stubbed.add(name)
            elif name in paths:
                carried.add(name)
                todo.append(paths[name])
            else:
                sys.exit(f"bundle: {name} (needed by {path}) is not found by ldd")
    return carried, stubbed


def dynamic_symbols(path):
    """(name, version or None, defined, type, size) for each dynamic symbol."""
    symbols = []
    for line in run("objdump", "-T", path).splitlines():
        m = re.match(r"^[0-9a-f]+ (.{7}) (\S+)\s+([0-9a-f]+)\s+(?:\((\S+)\)|(\S+))?\s*(\S+)$", line)
        if not m:
            continue
        flags, section, size, hidden_version, version, name = m.groups()
        version = hidden_version or version
        if version in ("Base",):
            version = None
        kind = "object" if "O" in flags else "function"
        symbols.append((name, version, section != "*UND*", kind, int(size, 16)))
    return symbols


def make_stub(soname, original, imports, out_dir, work):
    defined = {name: (version, kind, size)
               for name, version, is_defined, kind, size in dynamic_symbols(original) if is_defined}
    wanted = sorted(name for name in imports if name in defined)
    source, versions = [], {}
    for i, name in enumerate(wanted):
        version, kind, size = defined[name]
        if kind == "object":
            source.append(f'char stub_object_{i}[{max(size, 1)}] __asm__("{name}") = {{0}};')
        else:
            source.append(f'void stub_function_{i}(void) __asm__("{name}");\n'
                          f'void stub_function_{i}(void) {{ __builtin_trap(); }}')
        if version:
            versions.setdefault(version, []).append(name)
    c_file = os.path.join(work, soname + ".c")
    with open(c_file, "w") as f:
        f.write("\n".join(source) + "\n")
    args = ["gcc", "-shared", "-fPIC", "-o", os.path.join(out_dir, soname), c_file,
            f"-Wl,-soname,{soname}"]
    if versions:
        script = os.path.join(work, soname + ".map")
        with open(script, "w") as f:
            for version, names in versions.items():
                f.write(f"{version} {{ global: " + " ".join(f'"{n}";' for n in names) + " };\n")
        args.append(f"-Wl,--version-script={script}")
    run(*args)
    return len(wanted)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, programs = os.path.abspath(sys.argv[1]), [os.path.realpath(p) for p in sys.argv[2:]]
    paths = resolved_paths(programs)
    carried, stubbed = closure(programs, paths)
    with tempfile.TemporaryDirectory() as work:
        root = os.path.join(work, "bundle")
        os.makedirs(os.path.join(root, "lib"))
        os.makedirs(os.path.join(root, "bin"))
        for program in sys.argv[2:]:
            run("cp", "-L", program, os.path.join(root, "bin"))
        for name in carried:
            run("cp", "-L", paths[name], os.path.join(root, "lib", name))
        imports = set()
        for path in programs + [paths[n] for n in carried]:
            imports.update(name for name, _, is_defined, _, _ in dynamic_symbols(path)
                           if not is_defined)
        for name in sorted(stubbed):
            count = make_stub(name, paths[name], imports, os.path.join(root, "lib"), work)
            print(f"stub {name}: {count} symbols", file=sys.stderr)
        run("tar", "-C", root, "-cf", out + ".tar", "bin", "lib")
        run("xz", "-T2", "-6", "-f", out + ".tar")
        os.replace(out + ".tar.xz", out)
    print(f"{out}: {os.path.getsize(out) >> 20} MiB, {len(carried)} libraries carried, "
          f"{len(stubbed)} stubbed", file=sys.stderr)


if __name__ == "__main__":
    main()
