#!/usr/bin/env python3
"""The Note rule (docs/guide/layout.md, "Notes"): a design note is defined
once and referred to by name.

  // See Note [Bounded queues]: what the note says ...     a definition: a comment
                                                      that starts with it
  ... (see Note [Bounded queues], rpc/queue_limits.h)  a reference

Fails, naming each place, when a Note is defined twice, a reference names a
Note defined nowhere, or a Note is written neither way (a reference without
"see", which no reader can tell from a definition). Docs (*.md) only refer.
  scripts/check_notes.py [--self-test]
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

NOTE = re.compile(r"Note \[([^\]]+)\]")
# A comment that begins with the Note: a definition.
DEFINITION = re.compile(r"\s*(//|#)\s*$")
REFERENCE = re.compile(r"\bsee\s+$", re.IGNORECASE)
BROKEN = re.compile(r"Note( \[[^\]]*)?$")
CONTINUED = re.compile(r"\s*(?://|#)?\s*([^\]]*\])")
SKIPPED = (".png", ".abi", ".bin", ".gz", ".ipynb")


def tracked_files(root):
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True,
                         capture_output=True, text=True).stdout
    # Not this script: its examples are not notes.
    return [f for f in out.split("\0")
            if f and not f.endswith(SKIPPED) and f != "scripts/check_notes.py"]


def scan(root, files):
    """Returns ({name: [definition places]}, [(place, name)] references, [errors])."""
    definitions = collections.defaultdict(list)
    references, errors = [], []
    for path in files:
        try:
            with open(os.path.join(root, path), encoding="utf-8") as f:
                lines = f.read().split("\n")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        doc = path.endswith(".md")
        for number, line in enumerate(lines, 1):
            # A Note broken over two lines: the rest of it from the next.
            if BROKEN.search(line) and number < len(lines):
                rest = CONTINUED.match(lines[number])
                if rest:
                    line = f"{line} {rest.group(1)}"
            for match in NOTE.finditer(line):
                place, name, before = f"{path}:{number}", match.group(1), line[:match.start()]
                if REFERENCE.search(before):
                    references.append((place, name))
                elif not doc and DEFINITION.fullmatch(before):
                    definitions[name].append(place)
                else:
                    errors.append(f"{place}: refer to a Note as 'see Note [{name}]' "
                                  "(a comment that starts with it defines it)")
    return definitions, references, errors


def check(root, files):
    definitions, references, errors = scan(root, files)
    for name, places in sorted(definitions.items()):
        if len(places) > 1:
            errors.append(f"see Note [{name}] is defined {len(places)} times: {', '.join(places)} "
                          "(keep one; the others say 'See Note [...]')")
    for place, name in references:
        if name not in definitions:
            errors.append(f"{place}: see Note [{name}] is defined nowhere")
    return len(definitions), len(references), errors


def self_test():
    with tempfile.TemporaryDirectory() as root:
        sample = {
            "a.h": "// See Note [Kept]: defined here.\n// See Note [Twice]: once.\n",
            "b.cc": "// See Note [Twice]: again.\nint x;  // see Note [Missing]\n"
                    "// as see Note [Kept] says, or as Note\n// [Kept] says, or see Note\n// [Kept], or see Note [No\n"
                    "// such].\n",
        }
        for path, text in sample.items():
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)
        _, _, errors = check(root, list(sample))
        wanted = ["defined 2 times", "see Note [Missing] is defined nowhere", "b.cc:3: refer",
                  "b.cc:3: refer", "see Note [No such] is defined nowhere"]
        missed = [w for w in wanted if not any(w in e for e in errors)]
        if missed or len(errors) != len(wanted):
            print("notes self-test: FAILED: expected errors", wanted, "got", errors)
            return 1
    print("notes self-test: a Note defined twice, one defined nowhere and a bare "
          "reference are refused")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    defined, referred, errors = check(root, tracked_files(root))
    if errors:
        print("notes: each Note is defined once (a comment starting 'see Note [X]') and referred "
              "to as 'see Note [X]':")
        print("\n".join(errors))
        return 1
    print(f"notes: {defined} Notes, each defined once; {referred} references, each to one of them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
