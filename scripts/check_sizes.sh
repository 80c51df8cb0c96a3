#!/usr/bin/env bash
# Sizes and homes a maintainer can read (issues 36 and 54): no function over
# 80 lines, and a class's methods in one file — its own — so a class is not
# spread over several files to keep each short. Fails, naming each, on a
# function that grows past the limit or a class defined across files.
#   scripts/check_sizes.sh [FILE ...]     (default: every library .cc and .h)
#   scripts/check_sizes.sh --self-test    a long function and a class split
#                                         over two files it must refuse
# A function is found as a definition at namespace or class level (indented
# at most two spaces) whose signature ends in "{"; it runs to the matching
# brace, lambdas and all. A method is a definition at namespace level named
# Class::name( (or Outer::Inner::name( , whose class is Outer::Inner). Tests,
# benchmarks and examples are not checked.
set -uo pipefail
cd "$(dirname "$0")/.."
max_function_lines=80
# Classes still defined across files, each to be made of classes of their own
# (issue 54 item 3). The check fails when one of them has come to live in a
# single file, so that the list only shrinks.
not_yet_split=(Runtime RRefContext Shard PsServer::State)
if [[ ${1:-} == --self-test ]]; then
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  {
    echo 'int Long(int x,'
    echo '         int y) {'
    for i in $(seq 1 $max_function_lines); do echo "  x += y * $i;"; done
    echo '  return x;'
    echo '}'
  } >"$scratch/long.cc"
  if "$0" "$scratch/long.cc" >/dev/null; then
    echo "sizes self-test: FAILED: a function of $((max_function_lines + 3)) lines passed"
    exit 1
  fi
  echo 'void Spread::Start() {}' >"$scratch/spread.cc"
  echo 'absl::Status Spread::Stop(int how) { return {}; }' >"$scratch/spread_stop.cc"
  if "$0" "$scratch/spread.cc" "$scratch/spread_stop.cc" >/dev/null; then
    echo "sizes self-test: FAILED: a class defined in two files passed"
    exit 1
  fi
  echo "sizes self-test: a function over $max_function_lines lines and a class defined in" \
    "two files are refused"
  exit 0
fi
whole_tree=0
if [[ $# -gt 0 ]]; then
  files=("$@")
else
  whole_tree=1
  mapfile -t files < <(git ls-files '*.cc' '*.h' | grep -vE '^(tests|bench|examples|third_party)/')
fi
python3 - "$max_function_lines" "${not_yet_split[*]}" "$whole_tree" "${files[@]}" <<'PY'
import collections, re, sys
max_function = int(sys.argv[1])
not_yet_split = set(sys.argv[2].split())
whole_tree = sys.argv[3] == '1'
paths = sys.argv[4:]
not_a_function = re.compile(
    r'^\s*(namespace|class|struct|enum|union|extern|#|//|return|if|for|while|switch|case|do|else|\}|:|,)')
# `Type Class::name(` or `Class<T>::~Class(` at the start of a line.
method = re.compile(r'^\S[^=;(]*?\b((?:[A-Z]\w*(?:<[^>]*>)?::)+)(~?\w+)\s*\(', re.M)
problems = []
homes = collections.defaultdict(set)
for path in paths:
    text = open(path, errors='replace').read()
    if path.endswith('.cc'):
        for match in method.finditer(text):
            homes[re.sub(r'<[^>]*>', '', match.group(1))[:-2]].add(path)
    lines = text.split('\n')
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r'^ {0,2}\S', line) and '(' in line and not not_a_function.match(line):
            end = i
            while end < len(lines) and end < i + 8 and not lines[end].rstrip().endswith(('{', ';', '}')):
                end += 1
            signature = ' '.join(l.strip() for l in lines[i:end + 1])
            if end < len(lines) and lines[end].rstrip().endswith('{') and \
                    '=' not in signature.split('(')[0]:
                depth, close = 0, end
                while close < len(lines):
                    depth += lines[close].count('{') - lines[close].count('}')
                    if depth <= 0:
                        break
                    close += 1
                length = close - i + 1
                if length > max_function:
                    problems.append(f'{path}:{i + 1}: {length} lines (at most {max_function}): '
                                    f'{signature[:80]}')
                i = close + 1
                continue
        i += 1
for name, where in sorted(homes.items()):
    if len(where) > 1 and name not in not_yet_split:
        problems.append(f'class {name}: methods in {len(where)} files ({", ".join(sorted(where))});'
                        f' one file each, or its parts classes of their own')
for name in sorted(not_yet_split):
    if whole_tree and len(homes.get(name, ())) == 1:
        problems.append(f'class {name} now lives in one file: take it off not_yet_split '
                        f'in scripts/check_sizes.sh')
if problems:
    print('sizes: split these (functions in named steps, a class in its own file):')
    print('\n'.join(problems))
    sys.exit(1)
print(f'sizes: no function over {max_function} lines, every class in one file '
      f'(not yet: {", ".join(sorted(not_yet_split))})')
PY
