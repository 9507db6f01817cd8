#!/usr/bin/env bash
# How soon a stop signal acts during a burst of thousands of starts: lanes runs N × `sleep 30`
# at -j N from a file, SIGINT is sent once 300 jobs have started (from the events file), and
# the report says how many jobs started after the signal and how late the last one did.
#
#   bash bench/burst-stop.sh                 # 3,000 jobs, 3 rounds
#   BENCH_BURST_JOBS=2000 BENCH_REPS=5 LANES_BIN=path bash bench/burst-stop.sh
#
# Runs each round in a PID namespace (unshare, as root) so that nothing outlives it. Needs
# python3 and cargo (or LANES_BIN).
set -euo pipefail
source "$(dirname "$0")/burst-setup.sh" burst
cat > "$WORK/round.sh" <<'ROUND'
cd "$1"
# lanes and its jobs below this shell's priority (nice 10): the signal is sent as soon as 300
# jobs have started, not once the shell gets a CPU among hundreds of starting jobs.
nice -n 10 "$2" -j "$3" ${BENCH_BURST_ARGS:-} --grace 1 --events events.jsonl --report report.jsonl jobs.tsv \
  >/dev/null 2>&1 &
lanes=$!
while kill -0 "$lanes" 2>/dev/null; do
  started=$(grep -c '"type":"started"' events.jsonl 2>/dev/null) || true
  [ "${started:-0}" -ge 300 ] && break
  sleep 0.01
done
kill -INT "$lanes"
# Taken after the signal was sent: the shell may wait a while for a CPU among the jobs.
date +%s%3N > signalled
wait "$lanes" || true
ROUND
printf '%-6s %10s %22s %24s\n' round started "started after SIGINT" "last start after (ms)"
for round in $(seq 1 "$REPS"); do
  rm -f "$WORK/events.jsonl" "$WORK/report.jsonl"
  unshare --pid --fork --mount-proc --kill-child bash "$WORK/round.sh" "$WORK" "$LANES_BIN" "$JOBS"
  python3 - "$WORK" "$round" <<'PY'
import datetime, json, sys
work, round_ = sys.argv[1], sys.argv[2]
signalled = int(open(f"{work}/signalled").read())
def ms(text):
    return int(datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
starts = [ms(r["started_at"]) for r in map(json.loads, open(f"{work}/report.jsonl"))
          if r["type"] == "job" and r["started_at"]]
after = [s - signalled for s in starts if s > signalled]
print(f"{round_:<6} {len(starts):>10} {len(after):>22} {max(after, default=0):>24}")
PY
done
