#!/usr/bin/env bash
# Sizes a maintainer can read (issue 36): no library file over 500 lines and
# no function over 80. Fails, naming each, on one that grows past them.
#   scripts/check_sizes.sh [FILE ...]     (default: every library .cc and .h)
#   scripts/check_sizes.sh --self-test    a long function it must refuse
# A function is found as a definition at namespace or class level (indented
# at most two spaces) whose signature ends in "{"; it runs to the matching
# brace, lambdas and all. Tests, benchmarks and examples are not checked.
set -uo pipefail
cd "$(dirname "$0")/.."
max_file_lines=500
max_function_lines=80
if [[ ${1:-} == --self-test ]]; then
  scratch=$(mktemp --suffix=.cc)
  trap 'rm -f "$scratch"' EXIT
  {
    echo 'int Long(int x,'
    echo '         int y) {'
    for i in $(seq 1 $max_function_lines); do echo "  x += y * $i;"; done
    echo '  return x;'
    echo '}'
  } >"$scratch"
  if "$0" "$scratch" >/dev/null; then
    echo "sizes self-test: FAILED: a function of $((max_function_lines + 3)) lines passed"
    exit 1
  fi
  echo "sizes self-test: a function over $max_function_lines lines is refused"
  exit 0
fi
if [[ $# -gt 0 ]]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.cc' '*.h' | grep -vE '^(tests|bench|examples|third_party)/')
fi
python3 - "$max_file_lines" "$max_function_lines" "${files[@]}" <<'PY'
import re, sys
max_file, max_function = int(sys.argv[1]), int(sys.argv[2])
not_a_function = re.compile(
    r'^\s*(namespace|class|struct|enum|union|extern|#|//|return|if|for|while|switch|case|do|else|\}|:|,)')
problems = []
for path in sys.argv[3:]:
    lines = open(path, errors='replace').read().split('\n')
    if len(lines) - 1 > max_file:
        problems.append(f'{path}: {len(lines) - 1} lines (at most {max_file})')
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
if problems:
    print('sizes: split these (one concept per file, functions in named steps):')
    print('\n'.join(problems))
    sys.exit(1)
print(f'sizes: no library file over {max_file} lines, no function over {max_function}')
PY
