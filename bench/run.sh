#!/usr/bin/env bash
# The lanes benchmark suite: lanes against the spawn floor (bench/spawn-floor.c) and its peers
# (xargs -P, GNU parallel, sem, flock, rust-parallel), every workload's commands alternated
# round by round. Prints a table on stdout; raw figures go to bench/results/. See bench/README.md.
#
# Environment:
#   BENCH_QUICK=1      smaller scale: (a) 1,000 jobs, (d)/(e) 100,000 vs 10,000 lines, 3 rounds
#   BENCH_REPS=N       rounds per workload (default 5, quick 3)
#   BENCH_ONLY=a,b,…   run only these workloads: a b c d e f g t (t: timeouts); a partial run
#                      does not replace bench/results/latest.md
#   BENCH_DE_REPS=N    rounds of the (d)/(e) runs (default 1)
#   BENCH_DE_LINES=N   lines for the large (d)/(e) runs (default 1,000,000, quick 100,000); the
#                      small runs use N/10
#   BENCH_SEM_JOBS=N   jobs of the sem --id comparison (default 200; sem is slow)
#   BENCH_NICE=N       run every measured command at this nice value (e.g. -10, as root) so
#                      that other work on the machine disturbs the figures less
#   BENCH_INSTALL=1    also `cargo install rust-parallel` when it is missing
#   BENCH_NO_APT=1     never apt-get install (GNU parallel, hyperfine)
#   LANES_BIN=PATH     benchmark this binary instead of building the work tree's release build
#   BENCH_LANES_DESC   how to describe LANES_BIN in the table (e.g. the commit it was built from)
set -euo pipefail

BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
RESULTS=$BENCH_DIR/results
QUICK=${BENCH_QUICK:-0}
if [ "$QUICK" = 1 ]; then
  REPS=${BENCH_REPS:-3}
  A_N=1000
  DE_BIG=${BENCH_DE_LINES:-100000}
else
  REPS=${BENCH_REPS:-5}
  A_N=5000
  DE_BIG=${BENCH_DE_LINES:-1000000}
fi
DE_SMALL=$((DE_BIG / 10))
ONLY=${BENCH_ONLY:-a,b,c,d,e,f,g,t}
DE_REPS=${BENCH_DE_REPS:-1}
# Slow peers run fewer rounds: GNU parallel in (a) (~5 ms of CPU per job), and sem in (f)
# (~0.2 s per job, so its comparison also runs only SEM_N jobs).
SLOW_REPS=$(( REPS < 2 ? REPS : 2 ))
SEM_N=${BENCH_SEM_JOBS:-200}

log() { printf '%s\n' "$*" >&2; }
wants() { [[ ",$ONLY," == *",$1,"* ]]; }

WORK=$(mktemp -d /tmp/lanes-bench.XXXXXX)
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT

# ---------------------------------------------------------------------------------------------
# Tools
as_root() { [ "$(id -u)" = 0 ]; }
apt_install() {
  if [ "${BENCH_NO_APT:-0}" = 1 ] || ! as_root || ! command -v apt-get > /dev/null; then
    log "($* missing; not installing)"
    return 0
  fi
  if [ -z "${APT_UPDATED:-}" ]; then
    apt-get update -qq > /dev/null 2>&1 || true
    APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" > /dev/null 2>&1 \
    || log "(apt-get install $* failed)"
}
command -v parallel > /dev/null || apt_install parallel
command -v hyperfine > /dev/null || apt_install hyperfine
command -v python3 > /dev/null || { log "bench: python3 is needed"; exit 2; }
if ! command -v rust-parallel > /dev/null && [ "${BENCH_INSTALL:-0}" = 1 ]; then
  log "installing rust-parallel (cargo install)"
  cargo install --quiet rust-parallel >&2 || log "(cargo install rust-parallel failed)"
  export PATH="$HOME/.cargo/bin:$PATH"
fi
HAVE_PARALLEL=0; command -v parallel > /dev/null && HAVE_PARALLEL=1
HAVE_RP=0; command -v rust-parallel > /dev/null && HAVE_RP=1
HAVE_FLOCK=0; command -v flock > /dev/null && HAVE_FLOCK=1
HAVE_HYPERFINE=0; command -v hyperfine > /dev/null && HAVE_HYPERFINE=1

if [ -n "${LANES_BIN:-}" ]; then
  LANES=$LANES_BIN
else
  log "building lanes (cargo build --release)"
  (cd "$ROOT" && cargo build --release --quiet)
  LANES=${CARGO_TARGET_DIR:-$ROOT/target}/release/lanes
fi
[ -x "$LANES" ] || { log "bench: no lanes binary at $LANES"; exit 2; }
FLOOR=$WORK/spawn-floor
cc -O2 -pthread -o "$FLOOR" "$BENCH_DIR/spawn-floor.c"
export BENCH_RUSAGE=$WORK/rusage
cc -O2 -o "$BENCH_RUSAGE" "$BENCH_DIR/rusage.c"

export PARALLEL_SHELL=/bin/sh        # GNU parallel: run jobs with sh -c, like the others
export PARALLEL_HOME=$WORK/parallel  # sem's semaphores and parallel's state stay in $WORK
mkdir -p "$PARALLEL_HOME" && touch "$PARALLEL_HOME/will-cite"
LOCKS=$WORK/locks && mkdir -p "$LOCKS"
export LOCKS

# ---------------------------------------------------------------------------------------------
# Inputs
IN=$WORK/in && mkdir -p "$IN"
lines() { # N KEY-EXPR COMMAND > file: "KEY<TAB>COMMAND" lines; KEY-EXPR is awk over i (0-based)
  awk -v n="$1" -v cmd="$3" "BEGIN { for (i = 0; i < n; i++) printf \"%s\\t%s\\n\", $2, cmd }"
}
cmds() { awk -v n="$1" -v cmd="$2" 'BEGIN { for (i = 0; i < n; i++) print cmd }'; }
LINE99=$(printf '%099d' 0 | tr 0 x) # 99 bytes + newline: 100-byte lines
OUT_1MB="yes $LINE99 | head -n 10000"
OUT_50MB="yes $LINE99 | head -n 500000"

lines "$A_N" '"k" i' true > "$IN/a.lanes";      cmds "$A_N" true > "$IN/a.cmds"
lines 200 '"k" i' 'sleep 0.05' > "$IN/b.lanes";  cmds 200 'sleep 0.05' > "$IN/b.cmds"
lines 100 '"k" i' "$OUT_1MB" > "$IN/c1.lanes";   cmds 100 "$OUT_1MB" > "$IN/c1.cmds"
lines 8 '"k" i' "$OUT_50MB" > "$IN/c50.lanes";   cmds 8 "$OUT_50MB" > "$IN/c50.cmds"
lines 2000 '"k" (i % 50)' true > "$IN/f.keys50"
lines 2000 '"k" i' true > "$IN/f.unique"
awk 'BEGIN { for (i = 0; i < 2000; i++) printf "k%d true\n", i % 50 }' > "$IN/f.pairs"
lines "$SEM_N" '"k" (i % 50)' true > "$IN/fsem.keys50"
awk -v n="$SEM_N" 'BEGIN { for (i = 0; i < n; i++) printf "k%d true\n", i % 50 }' > "$IN/fsem.pairs"
awk 'BEGIN { for (k = 0; k < 5; k++) for (i = 0; i < 40; i++) printf "k%d\tsleep 0.05\n", k }' \
  > "$IN/f.sleep.lanes"
awk 'BEGIN { for (k = 0; k < 5; k++) for (i = 0; i < 40; i++) printf "k%d \"sleep 0.05\"\n", k }' \
  > "$IN/f.sleep.pairs"
lines 20 '"t" i' 'sleep 5' > "$IN/t.lanes";      cmds 20 'sleep 5' > "$IN/t.cmds"

# ---------------------------------------------------------------------------------------------
# Measuring: each contender is a shell function that runs one measured command through
# measure.py and prints its line. A workload's contenders run round by round, the starting
# contender rotating every round, so that drift (other builds on the machine) hits all alike.
RUN_ID=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$RESULTS"
RAW=$RESULTS/run-$RUN_ID.tsv
printf 'workload\ttool\tjobs\tround\twall_s\tuser_s\tsys_s\tmaxrss_kib\texit\tproducer_end_s\tfirst_out_s\tself_user_s\tself_sys_s\tleft\n' > "$RAW"
NICE=()
[ -z "${BENCH_NICE:-}" ] || NICE=(nice -n "$BENCH_NICE")
M() { "${NICE[@]}" python3 "$BENCH_DIR/measure.py" "$@" 2>> "$WORK/stderr.log"; }
SEQ_ARGS=(-d '\n' -n 1) # xargs: one whole line per `sh -c`

declare -a C_NAMES=() C_FUNCS=() C_REPS=()
contender() { C_NAMES+=("$1"); C_FUNCS+=("$2"); C_REPS+=("${3:-$REPS}"); }
run_workload() { # NAME JOBS [ROUNDS]
  local name=$1 jobs=$2 rounds=${3:-$REPS} n=${#C_NAMES[@]} r i k out left
  log "== $name: ${C_NAMES[*]} ($rounds rounds)"
  for ((r = 0; r < rounds; r++)); do
    for ((i = 0; i < n; i++)); do
      k=$(( (i + r) % n ))
      [ "$r" -lt "${C_REPS[k]}" ] || continue
      LEFT=0
      out=$(${C_FUNCS[k]}) || out=$(printf -- '-1\t-1\t-1\t-1\t-1\t-1\t-1')
      left=$LEFT
      if [ -n "${LEFT_CHECK:-}" ]; then left=$($LEFT_CHECK); fi
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "${C_NAMES[k]}" "$jobs" "$((r + 1))" "$out" "$left" >> "$RAW"
      log "   round $((r + 1)) ${C_NAMES[k]}: $(cut -f1,4,5 <<< "$out" | tr '\t' ' ')"
    done
  done
  C_NAMES=() C_FUNCS=() C_REPS=()
  LEFT_CHECK=
}


# The contenders. Globals: J (jobs in flight), TOKEN (marks the timeout workload's processes).
# The floor spawns from several threads (posix_spawn holds its calling thread until the
# child has exec'd, so only threads overlap spawns); floor-1thread is the one-thread loop,
# floor-capture the several threads reading each child's stdout through a pipe.
a_floor() { M -- "$FLOOR" threads "$A_N" "$J" true; }
a_floor1() { M -- "$FLOOR" run "$A_N" "$J" true; }
a_floorcap() { M -- "$FLOOR" threads-capture "$A_N" "$J" true; }
a_lanes() { M --stdin "$IN/a.lanes" -- "$LANES" -j "$J"; }
a_xargs() { M --stdin "$IN/a.cmds" -- xargs "${SEQ_ARGS[@]}" -P "$J" sh -c; }
a_parallel() { M --stdin "$IN/a.cmds" -- parallel --will-cite -j "$J"; }
a_rp() { M --stdin "$IN/a.cmds" -- rust-parallel -j "$J" -s --shell-path sh; }

b_floor() { M -- "$FLOOR" threads 200 50 'sleep 0.05'; }
b_lanes() { M --stdin "$IN/b.lanes" -- "$LANES" -j 50; }
b_xargs() { M --stdin "$IN/b.cmds" -- xargs "${SEQ_ARGS[@]}" -P 50 sh -c; }
b_parallel() { M --stdin "$IN/b.cmds" -- parallel --will-cite -j 50; }
b_rp() { M --stdin "$IN/b.cmds" -- rust-parallel -j 50 -s --shell-path sh; }

# C: c1 (100 × 1 MB) or c50 (8 × 50 MB); CN, CCMD: its job count and command.
c_floor() { M -- "$FLOOR" capture "$CN" 4 "$CCMD"; }
c_lanes() { M --stdin "$IN/$C.lanes" -- "$LANES" -j 4; }
c_xargs() { M --stdin "$IN/$C.cmds" -- xargs "${SEQ_ARGS[@]}" -P 4 sh -c; }
c_parallel() { M --stdin "$IN/$C.cmds" -- parallel --will-cite -j 4; }
c_rp() { M --stdin "$IN/$C.cmds" -- rust-parallel -j 4 -s --shell-path sh; }

# D: lines; DKEYS: awk key expression over i. Input comes from a pipe.
de_lanes() {
  M --pipe-from "awk 'BEGIN { for (i = 0; i < $D; i++) printf \"%s\\ttrue\\n\", $DKEYS }'" \
    -- "$LANES" -j 8
}
# Jobs start while input is still being read: the first line, then 1 s later 1,000 more.
d_stream() {
  M --first-out --pipe-from "printf 'k0\\techo started\\n'; sleep 1; awk 'BEGIN { for (i = 1; i <= 1000; i++) printf \"k%d\\ttrue\\n\", i }'" \
    -- "$LANES" -j 8
}

f_floor() { M -- "$FLOOR" threads 2000 8 true; }
f_lanes50() { M --stdin "$IN/f.keys50" -- "$LANES" -j 8; }
f_lanes_unique() { M --stdin "$IN/f.unique" -- "$LANES" -j 8; }
f_flock() { M --stdin "$IN/f.pairs" -- xargs -P 8 -L1 sh -c 'flock "$LOCKS/$1" sh -c "$2"' _; }
fsem_lanes() { M --stdin "$IN/fsem.keys50" -- "$LANES" -j 8; }
fsem_sem() { M --stdin "$IN/fsem.pairs" -- xargs -P 8 -L1 sh -c 'sem --will-cite --id "lanes-bench-$1" --fg "$2"' _; }
fs_lanes() { M --stdin "$IN/f.sleep.lanes" -- "$LANES" -j 8; }
fs_flock() { M --stdin "$IN/f.sleep.pairs" -- xargs -P 8 -L1 sh -c 'flock "$LOCKS/$1" sh -c "$2"' _; }

g_idle_lanes() { M --pipe-from 'sleep 1' -- "$LANES"; }
g_idle_xargs() { M --pipe-from 'sleep 1' -- xargs -r; }

t_lanes() { M --stdin "$IN/t.lanes" -- env "LANES_BENCH_TOKEN=$TOKEN" "$LANES" -j 20 --timeout 0.3; }
t_xargs() {
  M --stdin "$IN/t.cmds" -- env "LANES_BENCH_TOKEN=$TOKEN" xargs "${SEQ_ARGS[@]}" -P 20 timeout 0.3 sh -c
}
t_rp() {
  M --stdin "$IN/t.cmds" -- env "LANES_BENCH_TOKEN=$TOKEN" rust-parallel -j 20 -t 0.3 -s --shell-path sh
}
# Processes of the timeout workload still alive right after the runner exited; killed then.
t_left() {
  local pids
  pids=$(grep -lzx "LANES_BENCH_TOKEN=$TOKEN" /proc/[0-9]*/environ 2> /dev/null \
    | cut -d/ -f3 || true)
  for pid in $pids; do kill -KILL "$pid" 2> /dev/null || true; done
  wc -w <<< "$pids" | tr -d ' '
}

# ---------------------------------------------------------------------------------------------
# The workloads
if wants a; then
  for J in 2 8; do
    contender floor a_floor
    contender floor-1thread a_floor1
    contender floor-capture a_floorcap
    contender lanes a_lanes
    contender xargs a_xargs
    [ $HAVE_PARALLEL = 0 ] || contender parallel a_parallel "$SLOW_REPS" # ~5 ms CPU per job
    [ $HAVE_RP = 0 ] || contender rust-parallel a_rp
    run_workload "a-j$J" "$A_N"
  done
fi

if wants b; then
  contender floor b_floor
  contender lanes b_lanes
  contender xargs b_xargs
  [ $HAVE_PARALLEL = 0 ] || contender parallel b_parallel
  [ $HAVE_RP = 0 ] || contender rust-parallel b_rp
  run_workload b 200
fi

if wants c; then
  for C in c1 c50; do
    if [ $C = c1 ]; then CN=100 CCMD=$OUT_1MB; else CN=8 CCMD=$OUT_50MB; fi
    contender capture-floor c_floor
    contender lanes c_lanes
    contender xargs c_xargs
    [ $HAVE_PARALLEL = 0 ] || contender parallel c_parallel
    [ $HAVE_RP = 0 ] || contender rust-parallel c_rp
    if [ $C = c1 ]; then run_workload c-100x1MB 100; else run_workload c-8x50MB 8; fi
  done
fi

if wants f; then
  contender floor f_floor
  contender lanes-50keys f_lanes50
  contender lanes-unique f_lanes_unique
  [ $HAVE_FLOCK = 0 ] || contender xargs-flock f_flock
  run_workload f-50keys 2000
  if [ $HAVE_PARALLEL = 1 ]; then # sem starts Perl twice per job: fewer jobs, fewer rounds
    contender lanes-50keys fsem_lanes
    contender xargs-sem fsem_sem
    run_workload f-sem-50keys "$SEM_N" "$SLOW_REPS"
  fi
  contender lanes fs_lanes
  [ $HAVE_FLOCK = 0 ] || contender xargs-flock fs_flock
  run_workload f-sleep-5keys 200
fi

if wants g; then
  log "== g-start: lanes --version, lanes and xargs -r on empty input ($REPS rounds)"
  for ((r = 1; r <= REPS; r++)); do
    if [ $HAVE_HYPERFINE = 1 ]; then
      "${NICE[@]}" hyperfine -N --runs 100 --warmup 10 --style none --export-json "$WORK/g.json" \
        "$LANES --version" "$LANES" "xargs -r" > /dev/null 2>> "$WORK/stderr.log"
      python3 - "$WORK/g.json" "$r" >> "$RAW" <<'PY'
import json, sys
names = ["lanes --version", "lanes (empty input)", "xargs -r (empty input)"]
for name, res in zip(names, json.load(open(sys.argv[1]))["results"]):
    print(f"g-start\t{name}\t0\t{sys.argv[2]}\t{res['median']:.6f}\t{res['user']:.6f}\t"
          f"{res['system']:.6f}\t-1\t0\t-1\t-1\t-1\t-1\t0")
PY
    else # no hyperfine: 100 runs in a loop, the mean per run
      for c in "$LANES --version" "$LANES" "xargs -r"; do
        out=$(M -- sh -c "i=0; while [ \$i -lt 100 ]; do $c < /dev/null > /dev/null; i=\$((i+1)); done")
        name=$c; [ "$c" = "$LANES --version" ] && name="lanes --version"
        [ "$c" = "$LANES" ] && name="lanes (empty input)"; [ "$c" = "xargs -r" ] && name="xargs -r (empty input)"
        awk -F'\t' -v n="$name" -v r="$r" '{ printf "g-start\t%s\t0\t%s\t%.6f\t%.6f\t%.6f\t-1\t%s\t-1\t-1\t-1\t-1\t0\n", n, r, $1/100, $2/100, $3/100, $5 }' \
          <<< "$out" >> "$RAW"
      done
    fi
  done
  contender lanes g_idle_lanes
  contender xargs g_idle_xargs
  run_workload g-idle 0
fi

if wants t; then
  TOKEN=$RUN_ID-$$
  LEFT_CHECK=t_left
  contender lanes t_lanes
  contender xargs-timeout t_xargs
  [ $HAVE_RP = 0 ] || contender rust-parallel t_rp
  run_workload timeout 20
fi

# (d) and (e) last: they take longest, and only peak RSS is compared.
if wants d; then
  DKEYS='"k" (i % 100)'
  for D in "$DE_SMALL" "$DE_BIG"; do
    contender lanes de_lanes
    run_workload "d-$D" "$D" "$DE_REPS"
  done
  contender lanes d_stream
  run_workload d-stream 1001
fi

if wants e; then
  DKEYS='"k" i'
  for D in "$DE_SMALL" "$DE_BIG"; do
    contender lanes de_lanes
    run_workload "e-$D" "$D" "$DE_REPS"
  done
fi

# ---------------------------------------------------------------------------------------------
# The machine, the table
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), Linux $(uname -r)"
  echo "nice: ${BENCH_NICE:-0} (measured commands)"
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  if [ -n "${LANES_BIN:-}" ]; then
    echo "lanes: $("$LANES" --version), ${BENCH_LANES_DESC:-$LANES}"
  else
    echo "lanes: $("$LANES" --version), work tree at commit $(cd "$ROOT" && git rev-parse --short HEAD)$(cd "$ROOT" && git diff --quiet HEAD -- src Cargo.toml || echo ' with uncommitted changes')"
  fi
  rounds() { [ "$1" = 1 ] && echo "1 round" || echo "$1 rounds"; }
  echo "scale: $([ "$QUICK" = 1 ] && echo 'BENCH_QUICK=1' || echo full): $(rounds "$REPS")$(wants a && echo "; (a) $A_N jobs, GNU parallel $(rounds "$SLOW_REPS")")$(wants f && echo "; the $SEM_N-job sem comparison $(rounds "$SLOW_REPS")")$( { wants d || wants e; } && echo "; (d)/(e) $DE_SMALL and $DE_BIG lines, $(rounds "$DE_REPS")")"
  [ "$ONLY" = a,b,c,d,e,f,g,t ] || echo "workloads: $ONLY only (a partial run)"
  echo "peers: xargs $(xargs --version | head -1 | awk '{print $NF}')$([ $HAVE_PARALLEL = 1 ] && echo ", GNU parallel $(parallel --version | head -1 | awk '{print $NF}')")$([ $HAVE_RP = 1 ] && echo ", $(rust-parallel --version)")$([ $HAVE_FLOCK = 1 ] && echo ", flock $(flock --version | awk '{print $NF}')")"
} > "$WORK/machine.txt"
FULL=0; [ "$ONLY" = a,b,c,d,e,f,g,t ] && FULL=1
python3 "$BENCH_DIR/summarize.py" "$RAW" "$WORK/machine.txt" "$RESULTS/run-$RUN_ID.json" \
  > "$RESULTS/run-$RUN_ID.md"
cat "$RESULTS/run-$RUN_ID.md"
if [ $FULL = 1 ]; then
  cp "$RESULTS/run-$RUN_ID.md" "$RESULTS/latest.md"
  log "table written to bench/results/latest.md; raw figures: bench/results/run-$RUN_ID.{tsv,json}"
else
  log "partial run (BENCH_ONLY=$ONLY): bench/results/latest.md left as it was"
fi
