#!/bin/sh
# Checks every .gz file under a directory (default /usr/share/doc) with `gzip -t`, one lane per
# package directory: files of one package are checked one at a time, packages side by side.
#
#   examples/gzip-check.sh [DIR] [LANES OPTIONS...]
#   examples/gzip-check.sh /usr/share/doc -j 8 --report gzip-report.jsonl
#
# Job lines are KEY<TAB>COMMAND, with the package directory as the key and the file path
# quoted for the shell. `LANES` names the binary (default: lanes on PATH).
set -eu
dir=${1:-/usr/share/doc}
[ $# -gt 0 ] && shift
find "$dir" -type f -name '*.gz' | sort | while IFS= read -r file; do
  rest=${file#"$dir"/}
  key=${rest%%/*}
  quoted=$(printf '%s' "$file" | sed "s/'/'\\\\''/g")
  printf '%s\tgzip -t '\''%s'\''\n' "$key" "$quoted"
done | "${LANES:-lanes}" "$@"
