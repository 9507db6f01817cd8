# Sourced by burst-stop.sh and start-rate.sh: the set-up of a burst of N × `sleep 30` jobs.
# Sets JOBS (BENCH_BURST_JOBS, 3,000), REPS (BENCH_REPS, 3), WORK (a scratch directory named
# after $1, removed on exit, holding jobs.tsv) and LANES_BIN (built when not given), as an
# absolute path: each round runs in its own directory, where a relative one would name nothing.
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
JOBS=${BENCH_BURST_JOBS:-3000}
REPS=${BENCH_REPS:-3}
WORK=$(mktemp -d "/tmp/lanes-bench-$1.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
if [ -z "${LANES_BIN:-}" ]; then
  (cd "$ROOT" && cargo build --release --quiet)
  LANES_BIN=$ROOT/target/release/lanes
fi
LANES_BIN=$(realpath "$LANES_BIN")
for i in $(seq 1 "$JOBS"); do printf 'k%d\tsleep 30\n' "$i"; done > "$WORK/jobs.tsv"
