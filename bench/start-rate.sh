#!/usr/bin/env bash
# How fast lanes starts a burst of thousands of jobs when the cap lets them all run: N ×
# `sleep 30` at -j N from a file; once every job has started (the events file says so), SIGINT
# stops them, and the report gives the time from the run's start to the last job's start.
#
#   bash bench/start-rate.sh                 # 3,000 jobs, 3 rounds
#   BENCH_BURST_JOBS=2000 BENCH_REPS=5 BENCH_BURST_ARGS='--containment process-group' \
#     LANES_BIN=path bash bench/start-rate.sh
#
# Runs each round in a PID namespace (unshare, as root) so that nothing outlives it. Needs
# python3 and cargo (or LANES_BIN).
set -euo pipefail
source "$(dirname "$0")/burst-setup.sh" rate
cat > "$WORK/round.sh" <<'ROUND'
cd "$1"
# lanes and its jobs below this shell's priority (nice 10), as in burst-stop.sh.
nice -n 10 "$2" -j "$3" ${BENCH_BURST_ARGS:-} --grace 1 --events events.jsonl --report report.jsonl jobs.tsv \
  >/dev/null 2>&1 &
lanes=$!
while kill -0 "$lanes" 2>/dev/null; do
  started=$(grep -c '"type":"started"' events.jsonl 2>/dev/null) || true
  [ "${started:-0}" -ge "$3" ] && break
  sleep 0.05
done
kill -INT "$lanes"
wait "$lanes" || true
ROUND
printf '%-6s %10s %24s %14s\n' round started "last start after (ms)" "starts per s"
for round in $(seq 1 "$REPS"); do
  rm -f "$WORK/events.jsonl" "$WORK/report.jsonl"
  unshare --pid --fork --mount-proc --kill-child bash "$WORK/round.sh" "$WORK" "$LANES_BIN" "$JOBS"
  python3 - "$WORK" "$round" <<'PY'
import datetime, json, sys
work, round_ = sys.argv[1], sys.argv[2]
def ms(text):
    return int(datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
records = [json.loads(line) for line in open(f"{work}/report.jsonl")]
origin = ms(records[0]["started_at"])
starts = [ms(r["started_at"]) for r in records if r["type"] == "job" and r["started_at"]]
last = max(starts) - origin
print(f"{round_:<6} {len(starts):>10} {last:>24} {len(starts) / max(last, 1) * 1000:>14.0f}")
PY
done
