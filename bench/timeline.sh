#!/usr/bin/env bash
# `lanes timeline` on a report of a million jobs: wall time and peak RSS of each format, for
# two shapes of run: 1,000 keys (the HTML drawn aggregated: 40 key rows, the others, -j slot
# rows) and 1,000,000 distinct keys (the worst case for the per-key figures). Targets: at most
# 10 s and 200 MiB for the HTML page, which stays under 10 MB.
#
#   bash bench/timeline.sh                    # 1,000,000 jobs
#   BENCH_TIMELINE_JOBS=100000 bash bench/timeline.sh
#
# Needs python3, a C compiler and cargo (or LANES_BIN=path). The reports are written to a
# temporary directory (about 900 MB each at full scale) and removed at the end.
set -euo pipefail
BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
JOBS=${BENCH_TIMELINE_JOBS:-1000000}
WORK=$(mktemp -d /tmp/lanes-bench-timeline.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
if [ -z "${LANES_BIN:-}" ]; then
  (cd "$ROOT" && cargo build --release --quiet)
  LANES_BIN=$ROOT/target/release/lanes
fi
export BENCH_RUSAGE=$WORK/rusage
cc -O2 -o "$BENCH_RUSAGE" "$BENCH_DIR/rusage.c"

printf '%-28s %-6s %8s %10s %10s\n' "report" "format" "wall s" "peak MiB" "out MB"
for keys in 1000 "$JOBS"; do
  report=$WORK/report-$keys.jsonl
  python3 "$BENCH_DIR/timeline-report.py" "$JOBS" "$keys" 16 > "$report"
  for format in html json md; do
    out=$WORK/timeline.$format
    line=$(python3 "$BENCH_DIR/measure.py" -- "$LANES_BIN" timeline "$report" -o "$out")
    wall=$(cut -f1 <<< "$line")
    rss=$(cut -f4 <<< "$line")
    code=$(cut -f5 <<< "$line")
    if [ "$code" != 0 ]; then
      echo "lanes timeline failed ($code) on $report -o $out" >&2
      exit 1
    fi
    size=$(stat -c %s "$out")
    printf '%-28s %-6s %8.2f %10.1f %10.1f\n' "$JOBS jobs, $keys keys" "$format" "$wall" \
      "$(awk "BEGIN { print $rss / 1024 }")" "$(awk "BEGIN { print $size / 1000000 }")"
    rm -f "$out"
  done
  rm -f "$report"
done
