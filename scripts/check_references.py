#!/usr/bin/env python3
"""References in comments and docs resolve (docs/guide/layout.md).

Notes: a design note is defined once, by a comment that starts with it, and
referred to with "see" before it:

  // Note [Bounded queues]: what the note says ...       the definition
  ... (see Note [Bounded queues], rpc/queue_limits.h)    a reference

Fails when a Note is defined twice, a reference names a Note defined
nowhere or a file it is not in ("see Note [X], file" or "in file": where
X is defined), or a Note is written neither way (which no reader can tell
from a definition). Docs (*.md) only refer. A name broken over two lines
counts.

Paths: every path from the repository's root named in a comment or a doc
(rpc/runtime.h, docs/guide/, bench/ps_failover.sh) exists in the tree. A
name without a directory (quorum.h) is not checked; nor is a path with no
extension in an existing directory (a target's binary, a store key), nor a
generated protobuf header whose .proto exists. docs/benchmarks-history.md,
a record of past runs, may name files since gone.

  scripts/check_references.py [--self-test]
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

NOTE = re.compile(r"Note \[([^\]]+)\]")
NOTE_DEFINITION = re.compile(r"\s*(//|#)\s*$")  # what comes before a definition
NOTE_REFERENCE = re.compile(r"\bsee\s+$", re.IGNORECASE)
NOTE_BROKEN = re.compile(r"Note( \[[^\]]*)?$")
NOTE_CONTINUED = re.compile(r"\s*(?://|#)?\s*([^\]]*\])")
# The file a reference names as the Note's: "see Note [X], a/b.h", "in b.h".
NOTE_FILE = re.compile(r"\)?(?:,| in| \()\s*`?([\w./-]+\.(?:h|cc|py|sh|proto|bazel|md))\b")
COMMENT = re.compile(r"(^|\s)(//|#)(?!include)")
COMMENT_START = re.compile(r"^\s*(//|#)?\s*")
GENERATED = re.compile(r"\.(grpc\.)?pb\.(h|cc)$")
HISTORY = "docs/benchmarks-history.md"
SKIPPED = (".png", ".abi", ".bin", ".gz")
THIS = "scripts/check_references.py"  # its examples are neither notes nor paths


def tracked_files(root):
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True,
                         capture_output=True, text=True).stdout
    return [f for f in out.split("\0") if f]


def read_lines(root, path):
    if path.endswith(SKIPPED) or path == THIS:
        return []
    try:
        with open(os.path.join(root, path), encoding="utf-8") as f:
            return f.read().split("\n")
    except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
        return []


def check_notes(root, files):
    """Returns (Notes defined, references, errors)."""
    definitions = collections.defaultdict(list)
    references, errors = [], []
    for path in files:
        lines, doc = read_lines(root, path), path.endswith(".md")
        for number, line in enumerate(lines, 1):
            if number < len(lines):  # a name or its file may go on on the next line
                rest = NOTE_CONTINUED.match(lines[number])
                if NOTE_BROKEN.search(line) and rest:
                    line = f"{line} {rest.group(1)}"
                else:
                    line = f"{line} {COMMENT_START.sub('', lines[number], count=1)}"
            for match in NOTE.finditer(line):
                place, name, before = f"{path}:{number}", match.group(1), line[:match.start()]
                if match.start() > len(lines[number - 1]):
                    continue  # the next line's own
                # "see" may end the line before: "(see" / "Note [X])".
                follows_see = (number > 1 and COMMENT_START.sub("", before) == ""
                               and NOTE_REFERENCE.search(lines[number - 2] + " "))
                if NOTE_REFERENCE.search(before) or follows_see:
                    named = NOTE_FILE.match(line, match.end())
                    references.append((place, name, named.group(1) if named else None))
                elif not doc and NOTE_DEFINITION.fullmatch(before):
                    definitions[name].append(place)
                else:
                    errors.append(f"{place}: refer to a Note as 'see Note [{name}]' "
                                  "(a comment that starts with it defines it)")
    for name, places in sorted(definitions.items()):
        if len(places) > 1:
            errors.append(f"Note [{name}] is defined {len(places)} times: {', '.join(places)} "
                          "(keep one; the others say 'See Note [...]')")
    for place, name, named in references:
        if name not in definitions:
            errors.append(f"{place}: Note [{name}] is defined nowhere")
            continue
        defined_in = definitions[name][0].rsplit(":", 1)[0]
        if named and defined_in != named and not defined_in.endswith("/" + named):
            errors.append(f"{place}: Note [{name}] is in {defined_in}, not {named}")
    return len(definitions), len(references), errors


def check_paths(root, files):
    """Returns (paths checked, errors)."""
    tracked = set(files)
    folders = {os.path.dirname(f) for f in tracked}
    folders |= {"/".join(f.split("/")[:i]) for f in folders for i in range(1, f.count("/") + 1)}
    tops = sorted({f.split("/")[0] for f in tracked if "/" in f})
    path = re.compile(r"(?<![\w./@:-])((?:%s)/[\w./+-]*[\w+])" % "|".join(map(re.escape, tops)))

    def exists(p):
        if p in tracked or p.rstrip("/") in folders:
            return True
        if "." not in os.path.basename(p) and os.path.dirname(p) in folders:
            return True
        return GENERATED.search(p) is not None and GENERATED.sub(".proto", p) in tracked

    checked, errors = 0, []
    for name in files:
        if name == HISTORY:
            continue
        doc = name.endswith(".md")
        for number, line in enumerate(read_lines(root, name), 1):
            if not doc:
                comment = COMMENT.search(line)
                if not comment:
                    continue
                line = line[comment.end():]
            for match in path.finditer(line):
                checked += 1
                if not exists(match.group(1).rstrip(".")):
                    errors.append(f"{name}:{number}: {match.group(1)} does not exist")
    return checked, errors


def self_test():
    with tempfile.TemporaryDirectory() as root:
        sample = {
            "a/a.h": "// Note [Kept]: defined here.\n// Note [Twice]: once.\n"
                     "// a/a.h and a/gone.h\n",
            "a/b.cc": "// Note [Twice]: again.\nint x;  // see Note [Missing]\n"
                      "// see Note [Kept], a/a.h; see Note [Kept] (b.cc)\n"
                      "// as Note [Kept] says, or as Note\n// [Kept] says, or see Note\n"
                      "// [Kept], or see Note [No\n// such], or see\n// Note [Kept].\n",
        }
        os.makedirs(os.path.join(root, "a"))
        for name, text in sample.items():
            with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                f.write(text)
        _, _, errors = check_notes(root, list(sample))
        _, path_errors = check_paths(root, list(sample))
        errors += path_errors
        wanted = ["defined 2 times", "Note [Missing] is defined nowhere", "a/b.cc:4: refer",
                  "a/b.cc:4: refer", "Note [No such] is defined nowhere",
                  "a/b.cc:3: Note [Kept] is in a/a.h, not b.cc",
                  "a/a.h:3: a/gone.h does not exist"]
        missed = [w for w in wanted if not any(w in e for e in errors)]
        if missed or len(errors) != len(wanted):
            print("references self-test: FAILED: expected", wanted, "got", errors)
            return 1
    print("references self-test: a Note defined twice, one defined nowhere or not in the file "
          "named, a bare reference and a path that does not exist are refused")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    files = tracked_files(root)
    notes, referred, errors = check_notes(root, files)
    paths, path_errors = check_paths(root, files)
    errors += path_errors
    if errors:
        print("references: each Note is defined once (a comment starting with it) and referred "
              "to as 'see Note [X]'; each path named in a comment or doc exists:")
        print("\n".join(errors))
        return 1
    print(f"references: {notes} Notes, each defined once, {referred} references to them; "
          f"{paths} paths named in comments and docs, each there")
    return 0


if __name__ == "__main__":
    sys.exit(main())
