#!/usr/bin/env bash
# Fails when clang-format would change a C++ or CUDA file of the rooms
# (.hpp, .cpp, .cu, .cuh under core/ schema/ devices/ ops/ actors/ apps/
# perf/ tests/; the build trees and their generated files are not there, and
# the repository vendors no third-party code), naming each such file. The
# style is the root's .clang-format; the formatter is Debian's clang-format
# package (scripts/setup.sh installs it), since another version formats
# differently. Args: the repository, the clang-format binary (default
# clang-format).
set -euo pipefail
src=$1
clang_format=${2:-clang-format}
if ! command -v "$clang_format" >/dev/null; then
  echo "FAIL: $clang_format not found: scripts/setup.sh installs Debian's clang-format" >&2
  exit 1
fi
cd "$src"
"$clang_format" --version
# One clang-format over every file (xargs splits the list only past the
# command line's limit): a few seconds for the whole tree, and its report is
# not interleaved as parallel processes' would be.
status=0
report=$(find core schema devices ops actors apps perf tests -type d -name 'build*' -prune -o -type f \
           \( -name '*.hpp' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) -print0 |
         sort -z | xargs -0 "$clang_format" --dry-run --Werror 2>&1 >/dev/null) ||
  status=$?
if [ "$status" -eq 0 ]; then
  echo "every file is as clang-format writes it"
  exit 0
fi
# clang-format reports each difference as "file:line:col: error: code should
# be clang-formatted"; anything else is printed as it came.
files=$(grep -oE '^[^:]+:[0-9]+:[0-9]+: error: code should be clang-formatted' <<<"$report" |
        cut -d: -f1 | sort -u || true)
if [ -z "$files" ]; then
  echo "$report" >&2
  echo "FAIL: $clang_format failed (status $status)" >&2
  exit 1
fi
echo "$files"
echo "FAIL: $(wc -l <<<"$files") files differ from clang-format's output" \
     "(clang-format -i <file> rewrites one)" >&2
exit 1
