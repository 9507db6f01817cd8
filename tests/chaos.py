#!/usr/bin/env python3
"""Chaos test driver for `lanes`.

    python3 tests/chaos.py [--iterations N] [--seed S] [--first I] [--keep] [--verbose]
                           [--bound SECONDS] [--lock-dir] PATH/TO/lanes

With --lock-dir, each iteration instead starts several lanes sharing one lock directory over
the same keys, sends SIGKILL or SIGINT to one of them, and checks that per key no two jobs
overlapped (orphans of a killed lanes included), the shared cap held, and that afterwards no
key is held and a later run over every key does not block.

Runs `lanes` many times, one run at a time, each with a random mix of hostile jobs (processes
that outlive their shell, daemons that leave the session, jobs that ignore SIGTERM, write
megabytes, close stdout, read stdin, kill themselves...), random flags, random SIGINT /
SIGTERM / SIGHUP / SIGQUIT to lanes' pid or its process group, job control (lanes stopped by
SIGTSTP or SIGSTOP, or one job's shell by SIGSTOP, each continued by SIGCONT a moment later)
and sometimes a file-size limit (`ulimit -f`) on lanes and its jobs. After each run it checks the contract
(README "The report", "Ctrl-C and other signals", "Exit status"; SPEC §2, §4, §5.2, §6):

 1. lanes exits within --bound seconds and is not killed by a signal;
 2. the report parses: `run` first, `summary` last, valid JSON, one `job` record per job (seq
    1..N, no duplicates; a prefix 1..K only when a stop signal or --fail-fast on stdin ended
    the reading of the input);
 3. the summary's counts match the records and its exit_code is lanes' real exit status;
 4. the exit status follows §6: 128+N for the first stop signal delivered while lanes was
    still running its jobs, else 1 if anything failed / was rejected / interrupted (other than
    superseded), else 0;
 5. outcome / reason / fields are consistent, and each job's outcome is the one its behaviour
    must produce unless a timeout, the shutdown, --fail-fast or --coalesce explains otherwise;
 6. no process of any job (found by pid files and by a per-run environment tag in
    /proc/PID/environ) is alive after lanes exited -- escaped `setsid` daemons included;
 7. no child of lanes stays a zombie for long while lanes runs;
 8. per key no two jobs overlap in time; no two overlapping jobs share a slot; at most -j run
    at once; output written by a job before it was killed is in lanes' output; in the
    `prefixed` mode every stdout line carries a key prefix.

On a failure it prints the seed, iteration, command line, jobs and problems, keeps the
iteration's scratch directory, and goes on; it exits 1 when any iteration failed. The last
line is `chaos: N passed, M failed`. `--seed S --first I --iterations 1` replays iteration I
of seed S (the choices; timing still varies).
"""

import argparse
import hashlib
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone

SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP,
           "SIGQUIT": signal.SIGQUIT}
STOP_STATUSES = tuple(128 + int(s) for s in SIGNALS.values())
KEY_POOL = ["a", "b", "db", "web", "k 1", "x/..", "ключ", "α-β", "svc.api", "-dash"]

# Every job starts with this. First it looks for a live leftover ("bg" pids: processes that
# stay in their job's process group) of an earlier job of its key, listed in PREV by the
# driver: none may be alive when the next job of the key starts (SPEC §2). Then its output
# marker (checked in lanes' output), then its pid: the marker comes first, so a job whose pid
# was recorded had its marker written already.
PREFIX = (
    'for s in $PREV; do for b in $(sed -n -e "s/^bg //p" -e "s/^d //p" "$CHAOS_DIR/pids.$s" 2>/dev/null); do '
    'st=$(cut -d" " -f3 /proc/$b/stat 2>/dev/null); if [ -n "$st" ] && [ "$st" != Z ] && grep -qaF "$CHAOS_DIR" /proc/$b/environ; then '
    'echo "$s $b $st" >> "$CHAOS_DIR/overlap.$LANES_SEQ"; fi; done; done; '
    'ulimit -c 0; export P="$CHAOS_DIR/pids.$LANES_SEQ"; '
    'echo "chaos-out-$LANES_SEQ-$LANES_ATTEMPT"; echo "sh $LANES_ATTEMPT $$" >> "$P"; '
)

SUCCEEDED = ("succeeded", None)


class Job:
    """One generated job: its behaviour and what it must do when nothing disturbs it."""

    def __init__(self, seq, key, kind, body, natural=SUCCEEDED, run_min=0.0, run_max=0.05,
                 leak=None, leak_phase=0.0, sweep=0.0, term_ignored=False, int_ignored=False,
                 exit_code=None, signal_name=None):
        self.seq = seq
        self.key = key
        self.kind = kind
        self.body = body
        self.natural = natural          # (outcome, reason) when undisturbed
        self.run_min = run_min          # the shell itself runs at least this long
        self.run_max = run_max          # ... and at most this long, plus leak_phase
        self.leak = leak                # expected `leaked` when undisturbed (None: either)
        self.leak_phase = leak_phase    # time after the shell's exit (leak window, grace)
        self.sweep = sweep              # end-of-run escapee sweep it causes
        self.term_ignored = term_ignored
        self.int_ignored = int_ignored
        self.exit_code = exit_code
        self.signal_name = signal_name
        self.prev = []                  # earlier seqs of the same key

    @property
    def command(self):
        return f'PREV="{" ".join(map(str, self.prev))}"; ' + PREFIX + self.body


def make_job(rng, seq, key, cfg, allowed):
    """Draws one behaviour from the catalogue (restricted to `allowed`)."""
    t = cfg["timeout"]
    g = cfg["grace_eff"]
    w = cfg["leak_eff"]
    # A "long" job: past the timeout when there is one, else a short sleep.
    long_s = 5.0 if t is not None else round(rng.uniform(0.2, 0.8), 2)
    kind = rng.choices(list(allowed), weights=[allowed[k] for k in allowed])[0]
    if kind == "ok":
        return Job(seq, key, kind, "echo hello from $LANES_KEY; exit 0", leak=False)
    if kind == "fail":
        n = rng.choice([1, 2, 3, 42, 100, 125])
        return Job(seq, key, kind, f"echo failing >&2; exit {n}", ("failed", "exit_status"),
                   leak=False, exit_code=n)
    if kind == "segv":
        return Job(seq, key, kind, "kill -SEGV $$; exit 99", ("failed", "killed"), leak=False,
                   signal_name="SIGSEGV")
    if kind == "killself":
        return Job(seq, key, kind, "echo bye >&2; kill -KILL $$; exit 98", ("failed", "killed"),
                   leak=False, signal_name="SIGKILL")
    if kind == "sleep_past":
        return Job(seq, key, kind, f"sleep {long_s}", run_min=long_s, run_max=long_s + 0.1,
                   leak=False)
    if kind == "ignore_term":
        return Job(seq, key, kind, f"trap '' TERM; sleep {long_s}", run_min=long_s,
                   run_max=long_s + 0.1, leak=False, term_ignored=True)
    if kind == "slow_term":
        return Job(seq, key, kind,
                   f"trap 'echo term-trapped >&2; sleep 0.3; exit 7' TERM; sleep {long_s}",
                   run_min=long_s, run_max=long_s + 0.1, leak=False)
    if kind == "trap_int":
        s = round(rng.uniform(0.05, 0.5), 2)
        return Job(seq, key, kind, f"trap 'echo got-int >&2; exit 5' INT; sleep {s}; echo done",
                   run_min=s, run_max=s + 0.1, leak=False)
    if kind == "trap_int_ignore":
        s = round(rng.uniform(0.05, 0.5), 2)
        return Job(seq, key, kind, f"trap '' INT; sleep {s}", run_min=s, run_max=s + 0.1,
                   leak=False, int_ignored=True)
    if kind == "bg_hold":
        return Job(seq, key, kind, 'sleep 5 & echo "bg $!" >> "$P"; echo forked', leak=True,
                   leak_phase=w)
    if kind == "bg_nohold":
        return Job(seq, key, kind, 'sleep 5 </dev/null >/dev/null 2>&1 & echo "bg $!" >> "$P"',
                   leak=True, leak_phase=w)
    if kind == "bg_stubborn":
        return Job(seq, key, kind,
                   "(trap '' TERM; exec sleep 5) </dev/null >/dev/null 2>&1 & "
                   'echo "bg $!" >> "$P"', leak=True, leak_phase=w + g)
    # A daemon belongs to its job (its cgroup, or its traced lineage): the job holds its lane
    # through the leak window, and the grace period when the daemon ignores SIGTERM.
    if kind == "daemon_hold":
        return Job(seq, key, kind, "setsid sh -c 'echo \"d $$\" >> \"$P\"; exec sleep 5' &",
                   leak_phase=w)
    if kind == "daemon_nohold":
        return Job(seq, key, kind,
                   "setsid sh -c 'echo \"d $$\" >> \"$P\"; exec sleep 5' "
                   "</dev/null >/dev/null 2>&1 &", leak_phase=w)
    if kind == "daemon_stubborn":
        return Job(seq, key, kind,
                   "setsid sh -c 'trap \"\" TERM; echo \"d $$\" >> \"$P\"; exec sleep 5' "
                   "</dev/null >/dev/null 2>&1 &", leak_phase=w + g, sweep=g)
    if kind == "daemon_nested":
        # A TERM-ignoring daemon whose own child escapes once more (a second setsid).
        inner = r'setsid sh -c "echo d \$\$ >> \$P; exec sleep 5" </dev/null >/dev/null 2>&1 &'
        return Job(seq, key, kind,
                   "setsid sh -c 'trap \"\" TERM; " + inner +
                   " echo \"d $$\" >> \"$P\"; exec sleep 5' </dev/null >/dev/null 2>&1 &",
                   leak_phase=w + g, sweep=2 * g)
    if kind == "double_fork":
        return Job(seq, key, kind, '( ( sleep 5 & echo "bg $!" >> "$P" ) & )', leak=True,
                   leak_phase=w)
    if kind == "double_fork_nohold":
        return Job(seq, key, kind,
                   '( ( sleep 5 </dev/null >/dev/null 2>&1 & echo "bg $!" >> "$P" ) & )',
                   leak=True, leak_phase=w)
    if kind == "double_fork_setsid":
        return Job(seq, key, kind,
                   "( setsid sh -c 'echo \"d $$\" >> \"$P\"; exec sleep 5' & )",
                   leak_phase=w)
    # Processes that leave the job's process group without a new session: they still belong
    # to the job (its cgroup, or its traced lineage), so the key's next job waits for them.
    if kind == "timeout_escape":
        return Job(seq, key, kind,
                   "timeout 5 sh -c 'echo \"bg $$\" >> \"$P\"; exec sleep 5' "
                   "</dev/null >/dev/null 2>&1 &", leak=True, leak_phase=w)
    if kind == "setpgid_escape":
        return Job(seq, key, kind,
                   "python3 -c 'import os,time; os.setpgid(0,0); "
                   "open(os.environ[\"P\"],\"a\").write(\"bg %d\\n\" % os.getpid()); "
                   "time.sleep(5)' </dev/null >/dev/null 2>&1 &",
                   # Until python3 has started and left the group, it is the job: its start
                   # alone can take a few hundred ms on a loaded machine.
                   run_max=0.5, leak=True, leak_phase=w)
    if kind == "set_m_escape":
        return Job(seq, key, kind,
                   "set -m; sleep 5 </dev/null >/dev/null 2>&1 & echo \"bg $!\" >> \"$P\"",
                   leak=True, leak_phase=w)
    if kind == "close_stdout":
        c = round(rng.uniform(0.2, 0.6), 2)
        which = rng.choice([">&-", ">&- 2>&-"])
        return Job(seq, key, kind, f"exec {which}; sleep {c}", run_min=c, run_max=c + 0.1,
                   leak=False)
    if kind == "bigout":
        n = rng.randint(1, 4) * 1_000_000
        body = rng.choice([
            f"head -c {n} /dev/zero | tr '\\0' x",
            f"seq 1 {n // 7}",
            f"yes chaos-chaos | head -c {n} >&2",
            f"head -c {n} /dev/urandom",
        ])
        return Job(seq, key, kind, body, run_max=0.5, leak=False)
    if kind == "nonewline":
        return Job(seq, key, kind, rng.choice(["printf 'no newline at all'",
                                               "printf 'a\\nb\\nlast'; printf 'e' >&2"]),
                   leak=False)
    if kind == "badutf8":
        return Job(seq, key, kind,
                   "printf '\\377\\376 bad \\300\\200 bytes\\n'; printf 'err \\355\\240\\200' >&2",
                   leak=False)
    if kind == "stdin":
        return Job(seq, key, kind, rng.choice(["cat; echo eof-ok", 'read x; echo "read=$?"']),
                   leak=False)
    if kind == "slow_output":
        return Job(seq, key, kind, 'for i in 1 2 3 4 5; do echo "line $i"; sleep 0.05; done',
                   run_min=0.25, run_max=0.4, leak=False)
    raise AssertionError(kind)


CATALOGUE = {
    "ok": 10, "fail": 5, "segv": 2, "killself": 2, "sleep_past": 4, "ignore_term": 3,
    "slow_term": 2, "trap_int": 2, "trap_int_ignore": 2, "bg_hold": 3, "bg_nohold": 2,
    "bg_stubborn": 1, "daemon_hold": 2, "daemon_nohold": 2, "daemon_stubborn": 1,
    "daemon_nested": 1, "double_fork": 2, "double_fork_nohold": 2, "double_fork_setsid": 2,
    "timeout_escape": 2, "setpgid_escape": 1, "set_m_escape": 2, "close_stdout": 2,
    "bigout": 2, "nonewline": 2, "badutf8": 2, "stdin": 3, "slow_output": 2,
}
# Costly when the grace is lanes' default 5 s: only drawn with an explicit --grace.
NEEDS_SHORT_GRACE = {"ignore_term", "trap_int_ignore", "bg_stubborn", "daemon_stubborn",
                     "daemon_nested"}
LIGHT = {"ok": 10, "fail": 3, "nonewline": 1, "badutf8": 1, "stdin": 1}


def job_cost(job, cfg):
    """A pessimistic estimate of how long the job holds its lane when undisturbed."""
    t, g = cfg["timeout"], cfg["grace_eff"]
    run = job.run_max
    if t is not None and run > t:
        if job.term_ignored:
            run = t + g
        elif job.kind == "slow_term":
            run = t + min(g, 0.3)
        else:
            run = t
    return run + job.leak_phase + 0.05


def estimate(jobs, cfg):
    lanes = {}
    total = 0.0
    for job in jobs:
        c = job_cost(job, cfg)
        lanes[job.key] = lanes.get(job.key, 0.0) + c
        total += c
    sweep = max([j.sweep for j in jobs] + [0.0])
    return max(max(lanes.values()), total / cfg["j"]) + sweep + 0.2


def plan_iteration(rng, scratch):
    """Draws every choice of one iteration: flags, jobs, input and signals."""
    cfg = {}
    cfg["j"] = rng.randint(1, 8)
    cfg["timeout"] = round(rng.uniform(0.3, 1.5), 2) if rng.random() < 0.4 else None
    cfg["grace"] = round(rng.uniform(0.2, 1.0), 2) if rng.random() < 0.8 else None
    cfg["grace_eff"] = cfg["grace"] if cfg["grace"] is not None else 5.0
    cfg["leak"] = rng.randint(50, 300) if rng.random() < 0.6 else None
    cfg["leak_eff"] = (cfg["leak"] if cfg["leak"] is not None else 200) / 1000.0
    cfg["output"] = rng.choice(["grouped", "raw", "none", "prefixed"]) \
        if rng.random() < 0.6 else None
    cfg["retries"] = rng.random() < 0.2
    r = rng.random()
    cfg["coalesce"] = r < 0.12
    cfg["cancel"] = 0.12 <= r < 0.22
    cfg["fail_fast"] = rng.random() < 0.15
    cfg["json"] = rng.random() < 0.15
    cfg["events"] = rng.random() < 0.3
    cfg["stdin"] = rng.random() < 0.5
    cfg["stream"] = cfg["stdin"] and rng.random() < 0.3
    cfg["stream_gap"] = round(rng.uniform(0.0, 0.06), 3)
    cfg["process_group"] = rng.random() < 0.7    # else start_new_session
    # lanes' stdout a pipe whose reader goes away after a few bytes (`lanes ... | head`).
    cfg["stdout_closed"] = (not cfg["json"]) and rng.random() < 0.1
    cfg["stdout_keep"] = rng.choice([0, 10, 1000, 100_000])
    # Signals.
    cfg["signals"] = []
    if rng.random() < 0.6:
        first = rng.choice(["SIGINT"] * 5 + ["SIGTERM"] * 3 + ["SIGHUP"] * 2 + ["SIGQUIT"])
        d1 = round(rng.uniform(0.0, 1.5), 3)
        target = rng.choice(["pid", "group"])
        cfg["signals"].append((d1, first, target))
        if rng.random() < 0.4:
            second = rng.choice(["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", first, first])
            d2 = d1 + round(rng.uniform(0.0, 0.5), 3)
            cfg["signals"].append((d2, second, rng.choice(["pid", "group"])))
    # Job control: lanes stopped by Ctrl-Z (SIGTSTP: it stops its jobs with it, and the time
    # stopped counts toward no timeout), lanes stopped by SIGSTOP (it cannot know: its jobs run
    # on), or one job's shell stopped by SIGSTOP; each continued by SIGCONT after a while.
    cfg["pauses"] = []
    if rng.random() < 0.25:
        kind = rng.choice(["tstp", "tstp", "stop", "jobstop"])
        cfg["pauses"].append((round(rng.uniform(0.05, 1.2), 3), kind,
                              round(rng.uniform(0.05, 0.8), 3), rng.choice(["pid", "group"])))
    # A file-size limit (`ulimit -f`) on lanes and its jobs: lanes' own writes past it (report,
    # job output to its stdout file, stderr) fail with EFBIG, which lanes must survive.
    cfg["fsize"] = rng.choice([2048, 16384, 200_000]) if rng.random() < 0.08 else None

    allowed = dict(CATALOGUE)
    if cfg["grace"] is None:
        for k in NEEDS_SHORT_GRACE:
            allowed.pop(k)
    nkeys = rng.randint(1, 6)
    keys = rng.sample(KEY_POOL, nkeys)
    njobs = rng.randint(2, 25)
    jobs = []
    for seq in range(1, njobs + 1):
        jobs.append(make_job(rng, seq, rng.choice(keys), cfg, allowed))
    # Keep the iteration short: swap the most costly jobs for light ones until it fits.
    while estimate(jobs, cfg) > 3.5:
        worst = max(jobs, key=lambda j: job_cost(j, cfg))
        jobs[worst.seq - 1] = make_job(rng, worst.seq, worst.key, cfg, LIGHT)

    # The input text: job lines, sometimes comments, blank lines and an invalid line.
    lines = []
    line_no = 0
    seq_lines = {}
    invalid = []
    seen = {}
    seq = 0
    for job in jobs:
        if rng.random() < 0.08:
            lines.append(rng.choice(["# a comment", ""]))
            line_no += 1
        if rng.random() < 0.03:
            lines.append("this line has no tab")
            line_no += 1
            seq += 1
            invalid.append(seq)
        seq += 1
        line_no += 1
        job.seq = seq
        job.prev = list(seen.get(job.key, []))
        seen.setdefault(job.key, []).append(seq)
        seq_lines[seq] = line_no
        lines.append(f"{job.key}\t{job.command}")
    cfg["invalid"] = invalid
    cfg["nseq"] = seq
    text = "".join(line + ("\r\n" if rng.random() < 0.05 else "\n") for line in lines)
    if rng.random() < 0.1:
        text = text.rstrip("\n").rstrip("\r")  # a last line without newline is still a job

    args = ["-j", str(cfg["j"])]
    if cfg["timeout"] is not None:
        args += ["--timeout", str(cfg["timeout"])]
    if cfg["grace"] is not None:
        args += ["--grace", str(cfg["grace"])]
    if cfg["leak"] is not None:
        args += ["--leak-window", f"{cfg['leak']}ms"]
    if cfg["output"] is not None:
        args += ["--output", cfg["output"]]
    if cfg["retries"]:
        args += ["--retries", "1"]
    if cfg["coalesce"]:
        args += ["--coalesce", "latest"]
    if cfg["cancel"]:
        args += ["--cancel-in-progress"]
    if cfg["fail_fast"]:
        args += ["--fail-fast"]
    if cfg["json"]:
        args += ["--json"]
    else:
        args += ["--report", os.path.join(scratch, "report.jsonl")]
    if cfg["events"]:
        args += ["--events", os.path.join(scratch, "events.jsonl")]
    if not cfg["stdin"]:
        args += [os.path.join(scratch, "jobs.tsv")]
    return cfg, jobs, text, args


# ----------------------------------------------------------------------------------------
# /proc helpers


def proc_state(pid):
    """The state letter of pid, or None when it does not exist."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError:
        return None
    try:
        return data[data.rindex(b")") + 2:data.rindex(b")") + 3].decode()
    except ValueError:
        return None


def proc_has_tag(pid, tag):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return tag in f.read()
    except OSError:
        return False


def proc_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def tagged_processes(tag):
    """Live (non-zombie) processes whose environment holds tag."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == os.getpid():
            continue
        if proc_has_tag(pid, tag):
            st = proc_state(pid)
            if st is not None and st != "Z":
                found.append(pid)
    return found


def children_of(pid):
    kids = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                kids.extend(int(x) for x in f.read().split())
        except OSError:
            pass
    return kids


def parse_time(text):
    if text is None:
        return None
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=timezone.utc).timestamp()


# ----------------------------------------------------------------------------------------
# One iteration


class Run:
    def __init__(self, binary, scratch, cfg, jobs, text, args, bound):
        self.binary = binary
        self.scratch = scratch
        self.cfg = cfg
        self.jobs = jobs
        self.text = text
        self.args = args
        self.bound = bound
        self.problems = []
        self.notes = []
        self.sent = []            # (time, signal name, target) actually sent
        self.paused = []          # (kind, start, end, seq or None) of each pause carried out
        self.exit_status = None
        self.t_start = None
        self.t_end = None
        self.tag = ("CHAOS_DIR=" + scratch).encode()

    def fail(self, msg):
        self.problems.append(msg)

    def execute(self):
        cfg = self.cfg
        with open(os.path.join(self.scratch, "jobs.tsv"), "w") as f:
            f.write(self.text)
        env = dict(os.environ)
        env["CHAOS_DIR"] = self.scratch
        for k in ("NO_COLOR", "CI"):
            env.pop(k, None)
        out = open(os.path.join(self.scratch, "stdout"), "wb")
        if cfg["stdout_closed"]:
            out.close()
            out = subprocess.PIPE
        err = open(os.path.join(self.scratch, "stderr"), "wb")
        kwargs = {}
        if cfg["fsize"] is not None:
            limit = cfg["fsize"]
            kwargs["preexec_fn"] = lambda: resource.setrlimit(resource.RLIMIT_FSIZE,
                                                              (limit, limit))
        if cfg["process_group"]:
            kwargs["process_group"] = 0
        else:
            kwargs["start_new_session"] = True
        self.t_start = time.time()
        proc = subprocess.Popen([self.binary] + self.args, cwd=self.scratch, env=env,
                                stdin=subprocess.PIPE if cfg["stdin"] else subprocess.DEVNULL,
                                stdout=out, stderr=err, **kwargs)
        if out is not subprocess.PIPE:
            out.close()
        err.close()
        reader = None
        if cfg["stdout_closed"]:
            reader = threading.Thread(target=self.head, args=(proc.stdout,), daemon=True)
            reader.start()
        writer = None
        if cfg["stdin"]:
            writer = threading.Thread(target=self.feed, args=(proc.stdin,), daemon=True)
            writer.start()
        pending = list(cfg["signals"])
        pauses = list(cfg["pauses"])
        current = None            # the pause under way: (kind, start, end due, target, pid)
        zombies = {}              # pid -> first seen as a zombie child of lanes
        killed_by_bound = False
        bound = self.bound + sum(d for _, _, d, _ in cfg["pauses"])
        while True:
            now = time.time()
            if proc.poll() is not None:
                break
            if current is None and pauses and now - self.t_start >= pauses[0][0]:
                _, kind, d, target = pauses.pop(0)
                current = self.pause(proc, kind, d, target)
            elif current is not None and now >= current[2]:
                self.resume(proc, current)
                current = None
                zombies.clear()
            if pending and now - self.t_start >= pending[0][0]:
                _, name, target = pending.pop(0)
                # lanes has not been reaped (poll() said so), so its pid cannot be reused.
                ts = time.time()
                try:
                    if target == "group":
                        os.killpg(proc.pid, SIGNALS[name])
                    else:
                        os.kill(proc.pid, SIGNALS[name])
                    self.sent.append((ts, name, target))
                except ProcessLookupError:
                    pass
            if now - self.t_start > bound:
                self.fail(f"lanes still running after {bound}s: killed")
                killed_by_bound = True
                proc.kill()
                proc.wait()
                break
            if current is not None and current[0] != "jobstop":
                time.sleep(0.01)  # lanes is stopped: it reaps nothing meanwhile
                continue
            # Check 7: no zombie child of lanes lingers while lanes runs.
            seen = set()
            for kid in children_of(proc.pid):
                if proc_state(kid) == "Z":
                    seen.add(kid)
                    first = zombies.setdefault(kid, now)
                    if now - first > 2.0:
                        self.fail(f"zombie child {kid} of lanes unreaped for >2s")
                        zombies[kid] = float("inf")
            for kid in list(zombies):
                if kid not in seen:
                    del zombies[kid]
            time.sleep(0.01)
        if current is not None:
            self.resume(proc, current)
        self.t_end = time.time()
        self.exit_status = proc.returncode
        if writer is not None:
            writer.join(timeout=5)
        return killed_by_bound

    def pause(self, proc, kind, d, target):
        """Starts a pause: SIGTSTP or SIGSTOP to lanes, or SIGSTOP to a running job's shell."""
        now = time.time()
        pid = None
        if kind == "jobstop":
            running = [(seq, sh) for seq in range(1, self.cfg["nseq"] + 1)
                       for sh in self.shells(seq)
                       if proc_state(sh) not in (None, "Z") and proc_has_tag(sh, self.tag)]
            if not running:
                return None
            seq, pid = running[len(running) // 2]
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                return None
            return (kind, now, now + d, target, pid, seq)
        sig = signal.SIGTSTP if kind == "tstp" else signal.SIGSTOP
        try:
            if target == "group" and kind == "tstp":
                os.killpg(proc.pid, sig)
            else:
                os.kill(proc.pid, sig)
        except ProcessLookupError:
            return None
        return (kind, now, now + d, target, proc.pid, None)

    def resume(self, proc, current):
        """Ends a pause with SIGCONT (to lanes as it was stopped, or to the job's shell)."""
        if current is None:
            return
        kind, start, _, target, pid, seq = current
        try:
            if kind == "jobstop":
                if proc_state(pid) not in (None, "Z") and proc_has_tag(pid, self.tag):
                    os.kill(pid, signal.SIGCONT)
            elif proc.poll() is None:
                if target == "group" and kind == "tstp":
                    os.killpg(proc.pid, signal.SIGCONT)
                else:
                    os.kill(proc.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        self.paused.append((kind, start, time.time(), seq))

    def lanes_stopped_at(self, ts):
        """When lanes could first act on something sent at `ts`: the end of a pause of lanes
        that covers `ts`, else `ts`."""
        for kind, start, end, _ in self.paused:
            if kind != "jobstop" and start <= ts <= end:
                return end
        return ts

    def pause_excuses_timeout(self, r):
        """Whether a pause may have made the job time out: lanes stopped by SIGSTOP while the
        job ran (its clock ran on, the job's exit unseen), or the job's own shell stopped."""
        if not r["started"] or r["started_at"] is None or r["ended_at"] is None:
            return False
        s, e = parse_time(r["started_at"]), parse_time(r["ended_at"])
        for kind, start, end, seq in self.paused:
            if kind == "stop" and start <= e and s <= end:
                return True
            if kind == "jobstop" and seq == r["seq"]:
                return True
        return False

    def paused_during(self, r):
        """Seconds of pauses (of any kind) that overlap the job's run."""
        if r["started_at"] is None or r["ended_at"] is None:
            return 0.0
        s, e = parse_time(r["started_at"]), parse_time(r["ended_at"])
        return sum(max(0.0, min(e, end) - max(s, start)) for _, start, end, _ in self.paused)

    def head(self, pipe):
        """Reads a few bytes of lanes' stdout, then closes the pipe, as `| head -c N` does."""
        try:
            got = 0
            while got < self.cfg["stdout_keep"]:
                chunk = pipe.read1(65536)
                if not chunk:
                    break
                got += len(chunk)
        except (OSError, ValueError):
            pass
        finally:
            pipe.close()

    def feed(self, pipe):
        try:
            if self.cfg["stream"]:
                for line in self.text.splitlines(keepends=True):
                    pipe.write(line.encode())
                    pipe.flush()
                    time.sleep(self.cfg["stream_gap"])
            else:
                pipe.write(self.text.encode())
            pipe.close()
        except (BrokenPipeError, OSError, ValueError):
            pass

    # ------------------------------------------------------------------------------------
    def check(self, killed_by_bound):
        cfg = self.cfg
        status = self.exit_status
        if status == -signal.SIGINT and self.report_has_run():
            # After a run that SIGINT stopped, lanes ends itself by SIGINT once every job is
            # stopped and recorded (a shell sees 130). With its run record written, its
            # handlers stood: no SIGINT of ours killed it (its summary may be missing under
            # the file-size limit).
            self.exit_status = status = 128 + signal.SIGINT
        if not killed_by_bound and status is not None and status < 0:
            signame = signal.Signals(-status).name
            # Killed by our own signal before lanes installed its handlers (no run record
            # yet): a terminal would do the same; nothing ran.
            if self.sent and self.sent[0][1] == signame and not self.report_has_run():
                self.notes.append(f"killed by {signame} before it started")
                self.check_survivors()
                return
            self.fail(f"lanes was killed by {signame}")
        self.check_survivors()
        if killed_by_bound:
            return
        before = len(self.problems)
        records = self.check_report()
        if cfg["fsize"] is not None and len(self.problems) > before:
            # Past the file-size limit lanes cannot write its report to its end: it must say
            # so and exit non-zero (README "Exit status": 1, or a stop signal's status).
            self.notes.append("report incomplete under the file-size limit: "
                              + "; ".join(self.problems[before:]))
            del self.problems[before:]
            if status == 0:
                self.fail("the report is incomplete, yet lanes exited 0")
            try:
                err_size = os.path.getsize(os.path.join(self.scratch, "stderr"))
                with open(os.path.join(self.scratch, "stderr"), "rb") as f:
                    err = f.read()
            except OSError:
                err_size, err = 0, b""
            if b"lanes:" not in err and err_size + 256 < cfg["fsize"]:
                self.fail("the report is incomplete, and lanes said nothing on stderr")
            return
        if records is None:
            return
        run, jobs, summary = records
        self.check_exit(run, jobs, summary)
        self.check_records(jobs, summary)
        self.check_timing(jobs)
        self.check_output(jobs)
        if cfg["events"]:
            self.check_events(jobs)
        self.check_overlap_files()

    def check_overlap_files(self):
        """What the jobs found at their start: a live leftover of an earlier job of their key."""
        for job in self.jobs:
            try:
                with open(os.path.join(self.scratch, f"overlap.{job.seq}")) as f:
                    lines = f.read().split("\n")
            except OSError:
                continue
            for line in filter(None, lines):
                s, pid, st = line.split()
                self.fail(f"seq {job.seq} [{job.key}] started while pid {pid} (state {st}), "
                          f"left in the process group of seq {s} of the same key, was alive")

    def report_has_run(self):
        path = os.path.join(self.scratch, "stdout" if self.cfg["json"] else "report.jsonl")
        try:
            with open(path, "rb") as f:
                return b'"type":"run"' in f.read(4096)
        except OSError:
            return False

    def check_survivors(self):
        """Check 6: nothing of any job alive after lanes exited."""
        pids = {}
        for job in self.jobs:
            path = os.path.join(self.scratch, f"pids.{job.seq}")
            try:
                with open(path) as f:
                    for line in f:
                        parts = line.split()
                        if parts:
                            pids[int(parts[-1])] = (job.seq, job.kind, parts[0])
            except OSError:
                pass
        deadline = time.time() + 1.0
        while True:
            alive = set(tagged_processes(self.tag))
            for pid in pids:
                st = proc_state(pid)
                if st is not None and st != "Z" and proc_has_tag(pid, self.tag):
                    alive.add(pid)
            if not alive or time.time() > deadline:
                break
            time.sleep(0.05)
        for pid in sorted(alive):
            seq, kind, role = pids.get(pid, (None, "?", "?"))
            self.fail(f"process {pid} ({proc_cmdline(pid)}; job seq {seq} {kind}, {role}) "
                      f"alive after lanes exited")
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def check_report(self):
        path = os.path.join(self.scratch, "stdout" if self.cfg["json"] else "report.jsonl")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            self.fail(f"no report: {e}")
            return None
        if not data.endswith(b"\n"):
            self.fail("report does not end with a newline")
        objs = []
        for i, line in enumerate(data.split(b"\n")[:-1] if data.endswith(b"\n")
                                 else data.split(b"\n"), 1):
            try:
                objs.append(json.loads(line))
            except ValueError:
                self.fail(f"report line {i} is not JSON: {line[:200]!r}")
                return None
        if not objs or objs[0].get("type") != "run":
            self.fail("first report line is not a run record")
            return None
        if objs[-1].get("type") != "summary":
            self.fail("last report line is not a summary record")
            return None
        run, summary = objs[0], objs[-1]
        jobs = {}
        for o in objs[1:-1]:
            if o.get("type") != "job":
                self.fail(f"unexpected record in the middle: {o}")
                continue
            if o["seq"] in jobs:
                self.fail(f"duplicate record for seq {o['seq']}")
            jobs[o["seq"]] = o
        if run.get("max_concurrent") != self.cfg["j"]:
            self.fail(f"run.max_concurrent {run.get('max_concurrent')} != -j {self.cfg['j']}")
        return run, jobs, summary

    def stop_counted(self, summary):
        return summary.get("exit_code") in STOP_STATUSES

    def check_exit(self, run, jobs, summary):
        cfg = self.cfg
        status = self.exit_status
        if summary.get("exit_code") != status:
            self.fail(f"summary exit_code {summary.get('exit_code')} != exit status {status}")
        # Expected without a signal.
        bad = any(r["outcome"] in ("failed", "rejected") or
                  (r["outcome"] == "interrupted" and r["reason"] != "superseded")
                  for r in jobs.values())
        unsignalled = 1 if bad else 0
        ends = [parse_time(r["ended_at"]) for r in jobs.values() if r.get("ended_at")]
        last_end = max(ends) if ends else parse_time(run["started_at"])
        summary_time = parse_time(run["started_at"]) + summary.get("duration_ms", 0) / 1000.0
        if cfg["fsize"] is not None and status == 1 and summary.get("exit_code") == 1:
            # An output past the file-size limit (job output to lanes' stdout) makes it 1.
            self.notes.append("exit 1 under the file-size limit")
            return
        if self.sent:
            ts1, name1, _ = self.sent[0]
            ts1 = self.lanes_stopped_at(ts1)
            want = 128 + int(SIGNALS[name1])
            if status == want:
                pass
            elif status in STOP_STATUSES and len(self.sent) > 1 \
                    and status == 128 + int(SIGNALS[self.sent[1][1]]) \
                    and self.sent[1][0] - ts1 < 0.005:
                # Both pending at once: the kernel delivers them by number, not send order.
                self.notes.append(f"exit {status}: two signals sent "
                                  f"{(self.sent[1][0] - ts1) * 1000:.1f}ms apart")
            elif status in STOP_STATUSES:
                self.fail(f"exit {status}, but the first signal was {name1} (want {want})")
            elif ts1 < last_end - 0.005:
                self.fail(f"{name1} sent {last_end - ts1:.3f}s before the last job ended, "
                          f"yet exit {status} (want {want})")
            else:
                if status != unsignalled:
                    self.fail(f"exit {status}, want {unsignalled} (signal {name1} came after "
                              f"the last job ended)")
                if ts1 < summary_time - 0.1:
                    self.notes.append(
                        f"SWEEP-SIGNAL: {name1} sent {ts1 - last_end:.3f}s after the last "
                        f"job ended and {summary_time - ts1:.3f}s before the summary: ignored")
        else:
            if status != unsignalled:
                self.fail(f"exit {status}, want {unsignalled}")

    def shells(self, seq):
        """Pids of the job's shells that got as far as writing their pid."""
        try:
            with open(os.path.join(self.scratch, f"pids.{seq}")) as f:
                return [int(ln.split()[2]) for ln in f if ln.startswith("sh ")]
        except (OSError, ValueError, IndexError):
            return []

    def disturbed(self, r, stops):
        """Whether something but the job itself may have ended it: a stop signal or
        --fail-fast before it ended, --cancel-in-progress, or its timeout."""
        cfg = self.cfg
        end = parse_time(r["ended_at"])
        if any(end >= s - 0.05 for s in stops):
            return True
        if cfg["cancel"]:
            return True
        if self.pause_excuses_timeout(r):
            return True
        if cfg["timeout"] is not None and r["duration_ms"] is not None \
                and r["duration_ms"] >= (cfg["timeout"] - 0.05) * 1000:
            return True
        return False

    def check_records(self, jobs, summary):
        cfg = self.cfg
        n = cfg["nseq"]
        seqs = sorted(jobs)
        counted = self.stop_counted(summary)
        k = len(seqs)
        if seqs != list(range(1, k + 1)):
            missing = sorted(set(range(1, (max(seqs) if seqs else 0) + 1)) - set(seqs))
            self.fail(f"records are not seq 1..{k}: missing {missing[:20]}, "
                      f"extra {[s for s in seqs if s > n]}")
        failed_any = any(r["outcome"] == "failed" for r in jobs.values())
        prefix_ok = counted or (cfg["fail_fast"] and cfg["stdin"] and failed_any)
        if k != n and not (prefix_ok and k < n):
            self.fail(f"{k} job records for {n} input jobs")
        # Summary counts.
        for field, outcome in (("succeeded", "succeeded"), ("failed", "failed"),
                               ("interrupted", "interrupted"), ("rejected", "rejected")):
            c = sum(1 for r in jobs.values() if r["outcome"] == outcome)
            if summary.get(field) != c:
                self.fail(f"summary.{field} {summary.get(field)} != {c} records")
        if summary.get("jobs") != len(jobs):
            self.fail(f"summary.jobs {summary.get('jobs')} != {len(jobs)} records")
        if summary.get("skipped") != 0:
            self.fail(f"summary.skipped {summary.get('skipped')} without --resume")
        by_seq = {j.seq: j for j in self.jobs}
        keys_last = {}
        for j in self.jobs:
            keys_last[j.key] = max(keys_last.get(j.key, 0), j.seq)
        t = cfg["timeout"]
        stops = []
        if counted and self.sent:
            stops.append(self.lanes_stopped_at(self.sent[0][0]))
        if cfg["fail_fast"]:
            stops += [parse_time(r["ended_at"]) for r in jobs.values() if r["outcome"] == "failed"]
        for seq, r in sorted(jobs.items()):
            where = f"seq {seq}"
            o, reason = r["outcome"], r["reason"]
            allowed = {
                "succeeded": {None}, "failed": {"exit_status", "killed", "spawn_error"},
                "interrupted": {"timeout", "shutdown", "fail_fast", "superseded"},
                "rejected": {"invalid_input", "queue_full"},
            }
            if o not in allowed or reason not in allowed[o]:
                self.fail(f"{where}: outcome {o} with reason {reason}")
                continue
            if o == "succeeded" and r["exit_code"] != 0:
                self.fail(f"{where}: succeeded with exit_code {r['exit_code']}")
            if reason == "exit_status" and (not isinstance(r["exit_code"], int)
                                            or r["exit_code"] == 0 or r["signal"] is not None):
                self.fail(f"{where}: exit_status with exit_code {r['exit_code']} "
                          f"signal {r['signal']}")
            if reason == "killed" and r["signal"] is None:
                self.fail(f"{where}: killed without a signal")
            if reason == "timeout" and not r["started"]:
                self.fail(f"{where}: timed out without starting")
            if reason == "superseded" and r["started"] and not cfg["cancel"]:
                self.fail(f"{where}: started, superseded without --cancel-in-progress")
            # The shells that wrote their pid ran: the record must say the job started.
            ran = self.shells(seq)
            if ran and not r["started"]:
                self.fail(f"{where}: {len(ran)} shell(s) of it ran (pids {ran}), "
                          f"but the record says started=false, attempts={r['attempts']}")
            if len(ran) > r["attempts"]:
                self.fail(f"{where}: {len(ran)} shells ran, attempts={r['attempts']}")
            if len(r["tries"]) != r["attempts"]:
                self.fail(f"{where}: {len(r['tries'])} tries for attempts={r['attempts']}")
            if not r["started"]:
                if r["started_at"] is not None or r["duration_ms"] is not None \
                        or r["attempts"] != 0 or r["slot"] is not None:
                    self.fail(f"{where}: not started but started_at/duration/attempts/slot set")
                if o in ("succeeded", "failed"):
                    self.fail(f"{where}: {o} without starting")
            else:
                if r["started_at"] is None or r["slot"] is None \
                        or not 1 <= r["slot"] <= cfg["j"]:
                    self.fail(f"{where}: started with started_at {r['started_at']} "
                              f"slot {r['slot']}")
                if r["attempts"] < 1 or r["attempts"] > (2 if cfg["retries"] else 1):
                    self.fail(f"{where}: attempts {r['attempts']}")
            if seq in cfg["invalid"]:
                if (o, reason) != ("rejected", "invalid_input") or r["key"] is not None:
                    self.fail(f"{where}: invalid line recorded {o}/{reason} key {r['key']}")
                continue
            job = by_seq.get(seq)
            if job is None:
                self.fail(f"{where}: no such job")
                continue
            if r["key"] != job.key or r["command"] != job.command:
                self.fail(f"{where}: key/command differ from the input")
            if reason == "shutdown" and not counted:
                self.fail(f"{where}: shutdown without a counted stop signal")
            if reason == "fail_fast" and not (cfg["fail_fast"] and failed_any):
                self.fail(f"{where}: fail_fast without --fail-fast and a failure")
            if reason == "superseded":
                if not (cfg["coalesce"] or cfg["cancel"]):
                    self.fail(f"{where}: superseded without --coalesce/--cancel-in-progress")
                sb = r["superseded_by"]
                if not isinstance(sb, int) or sb <= seq or sb not in by_seq \
                        or by_seq[sb].key != job.key:
                    self.fail(f"{where}: superseded_by {sb} is not a newer job of its key")
                if r["started"] and not cfg["cancel"]:
                    self.fail(f"{where}: a started job superseded without --cancel-in-progress")
            elif r["superseded_by"] is not None:
                self.fail(f"{where}: superseded_by set on a {o}/{reason} record")
            if reason == "superseded" and seq == keys_last[job.key]:
                self.fail(f"{where}: the newest job of its key was superseded")
            if reason == "timeout" and t is None:
                self.fail(f"{where}: timeout without --timeout")
            if reason in ("shutdown", "fail_fast", "superseded"):
                continue
            # Undisturbed by anything but perhaps the timeout.
            if reason == "timeout":
                if not self.pause_excuses_timeout(r) \
                        and job.run_max + job.leak_phase + 0.5 < t and r["duration_ms"] is not None \
                        and r["duration_ms"] < (t + 0.3) * 1000:
                    self.fail(f"{where}: {job.kind} (runs <= {job.run_max}s) timed out "
                              f"at --timeout {t}")
                limit = t + cfg["grace_eff"] + cfg["leak_eff"] + 1.0 + self.paused_during(r)
                if r["duration_ms"] is not None and r["duration_ms"] > limit * 1000:
                    self.fail(f"{where}: timed out after {r['duration_ms']}ms "
                              f"(timeout {t} + grace {cfg['grace_eff']})")
                continue
            if t is not None and job.run_min >= t + 0.25:
                self.fail(f"{where}: {job.kind} runs {job.run_min}s, past --timeout {t}, "
                          f"but ended {o}/{reason}")
                continue
            if (o, reason) != job.natural:
                self.fail(f"{where}: {job.kind} ended {o}/{reason} "
                          f"(exit {r['exit_code']}, signal {r['signal']}), "
                          f"want {job.natural[0]}/{job.natural[1]}")
                continue
            if job.exit_code is not None and r["exit_code"] != job.exit_code:
                self.fail(f"{where}: exit_code {r['exit_code']}, want {job.exit_code}")
            if job.signal_name is not None and r["signal"] != job.signal_name:
                self.fail(f"{where}: signal {r['signal']}, want {job.signal_name}")
            if o == "failed" and cfg["retries"] and r["attempts"] != 2 \
                    and not self.disturbed(r, stops):
                self.fail(f"{where}: failed with --retries 1 after {r['attempts']} attempts")
            if o == "succeeded" and r["attempts"] != 1:
                self.fail(f"{where}: succeeded after {r['attempts']} attempts")
            if job.leak is False and r["leaked"]:
                self.fail(f"{where}: {job.kind} leaked=true, though nothing of it can leak")
            if job.leak is True and not r["leaked"]:
                # Its leftover outlived the shell past the leak window (the shell itself
                # takes a few ms): leaked, whatever stopped the job afterwards.
                long_lived = r["duration_ms"] is not None and \
                    r["duration_ms"] > (cfg["leak_eff"] + 0.3) * 1000
                if long_lived or not self.disturbed(r, stops):
                    self.fail(f"{where}: {job.kind} leaked=false after {r['duration_ms']}ms "
                              f"(leak window {cfg['leak_eff']}s)")

    def check_timing(self, jobs):
        cfg = self.cfg
        started = [r for r in jobs.values() if r["started"] and r["started_at"]]
        iv = [(parse_time(r["started_at"]), parse_time(r["ended_at"]), r) for r in started]
        for s, e, r in iv:
            if e < s:
                self.fail(f"seq {r['seq']}: ended_at before started_at")
        # Per key: no overlap; per slot: no overlap; at most -j at once.
        iv.sort(key=lambda x: (x[0], x[1]))
        for i, (s1, e1, r1) in enumerate(iv):
            for s2, e2, r2 in iv[i + 1:]:
                if s2 >= e1:
                    break
                if r1["key"] == r2["key"]:
                    self.fail(f"seq {r1['seq']} and {r2['seq']} of key {r1['key']!r} overlap "
                              f"({r1['started_at']}..{r1['ended_at']} / "
                              f"{r2['started_at']}..{r2['ended_at']})")
                if r1["slot"] == r2["slot"]:
                    self.fail(f"seq {r1['seq']} and {r2['seq']} share slot {r1['slot']} "
                              f"while overlapping")
        points = sorted([(s, 1) for s, _, _ in iv] + [(e, -1) for _, e, _ in iv],
                        key=lambda p: (p[0], p[1]))
        cur = peak = 0
        for _, d in points:
            cur += d
            peak = max(peak, cur)
        if peak > cfg["j"]:
            self.fail(f"{peak} jobs ran at once with -j {cfg['j']}")
        # After a counted stop signal: nothing starts, and the shutdown is bounded.
        if self.sent:
            ts1 = self.lanes_stopped_at(self.sent[0][0])
            # Lanes stopped, or one of its jobs, after the signal: the shutdown waits as long.
            paused = sum(end - max(start, ts1) for _, start, end, _ in self.paused if end > ts1)
            if self.exit_status == 128 + int(SIGNALS[self.sent[0][1]]):
                for s, e, r in iv:
                    if s > ts1 + 0.5:
                        self.fail(f"seq {r['seq']} started {s - ts1:.3f}s after "
                                  f"{self.sent[0][1]}")
                    limit = cfg["grace_eff"] + cfg["leak_eff"] + 1.0 + paused
                    if cfg["timeout"] is not None:
                        limit += cfg["grace_eff"]   # already being stopped for its timeout
                    if e > ts1 + limit:
                        self.fail(f"seq {r['seq']} ended {e - ts1:.3f}s after "
                                  f"{self.sent[0][1]} (grace {cfg['grace_eff']})")
                sweep = max([j.sweep for j in self.jobs] + [0.0])
                limit = 2 * cfg["grace_eff"] + cfg["leak_eff"] + sweep + 2.0 + paused
                if self.t_end > ts1 + limit:
                    self.fail(f"lanes exited {self.t_end - ts1:.3f}s after "
                              f"{self.sent[0][1]} (bound {limit:.1f}s)")
        # After the first failure for good under --fail-fast: nothing more starts.
        if cfg["fail_fast"]:
            fails = [parse_time(r["ended_at"]) for r in jobs.values() if r["outcome"] == "failed"]
            if fails:
                first = min(fails)
                for s, e, r in iv:
                    if s > first + 0.5:
                        self.fail(f"seq {r['seq']} started {s - first:.3f}s after the first "
                                  f"failure under --fail-fast")

    def check_output(self, jobs):
        cfg = self.cfg
        mode = cfg["output"] or "prefixed"
        if mode == "none" or cfg["stdout_closed"] or cfg["fsize"] is not None:
            return
        path = os.path.join(self.scratch, "stderr" if cfg["json"] else "stdout")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            return
        keys = {j.key.encode() for j in self.jobs}
        lines = data.split(b"\n")
        if mode == "prefixed" and not cfg["json"]:
            if data and not data.endswith(b"\n"):
                self.fail("prefixed stdout does not end with a newline")
            for i, line in enumerate(lines[:-1], 1):
                if not line.startswith(b"[") or b"] " not in line \
                        or not any(line.startswith(b"[" + k + b"] ") for k in keys):
                    self.fail(f"stdout line {i} has no key prefix: {line[:80]!r}")
                    break
        # Output written before a job was killed is never dropped: each shell whose pid
        # was recorded had written its marker first.
        for job in self.jobs:
            try:
                with open(os.path.join(self.scratch, f"pids.{job.seq}")) as f:
                    attempts = [ln.split()[1] for ln in f if ln.startswith("sh ")]
            except OSError:
                continue
            for a in attempts:
                marker = f"chaos-out-{job.seq}-{a}".encode()
                if mode == "prefixed":
                    want = b"[" + job.key.encode() + b"] " + marker
                    ok = want + b"\n" in data
                elif mode == "grouped":
                    ok = b"\n" + marker + b"\n" in b"\n" + data
                else:
                    ok = marker in data
                if not ok:
                    self.fail(f"seq {job.seq} attempt {a}: its output marker is missing "
                              f"from lanes' {'stderr' if cfg['json'] else 'stdout'} ({mode})")

    def check_events(self, jobs):
        path = os.path.join(self.scratch, "events.jsonl")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            self.fail(f"no events file: {e}")
            return
        started, ended = {}, set()
        for i, line in enumerate(data.splitlines(), 1):
            try:
                ev = json.loads(line)
            except ValueError:
                self.fail(f"events line {i} is not JSON: {line[:120]!r}")
                return
            if ev.get("type") == "started":
                started[ev["seq"]] = started.get(ev["seq"], 0) + 1
            elif ev.get("type") == "ended" and not ev.get("retry"):
                ended.add(ev["seq"])
        for seq, r in jobs.items():
            if r["started"] and (seq not in started or seq not in ended):
                self.fail(f"seq {seq}: started, but no started/ended event")
            if started.get(seq, 0) != r["attempts"]:
                self.fail(f"seq {seq}: {started.get(seq, 0)} started events, "
                          f"attempts={r['attempts']}")


def describe(binary, cfg, jobs, args, text):
    out = []
    out.append("  command: " + " ".join([binary] + [repr(a) if " " in a else a for a in args])
               + (" < (stdin" + (f", streamed every {cfg['stream_gap']}s" if cfg["stream"]
                                 else "") + ")" if cfg["stdin"] else ""))
    out.append(f"  lanes in its own {'process group' if cfg['process_group'] else 'session'}"
               + (f"; its stdout a pipe closed after {cfg['stdout_keep']} bytes"
                  if cfg["stdout_closed"] else ""))
    for d, name, target in cfg["signals"]:
        out.append(f"  planned: {name} to {target} at +{d:.3f}s")
    for d, kind, length, target in cfg["pauses"]:
        out.append(f"  planned: {kind} ({target}) at +{d:.3f}s for {length:.3f}s")
    if cfg["fsize"] is not None:
        out.append(f"  file-size limit: {cfg['fsize']} bytes")
    if cfg["invalid"]:
        out.append(f"  invalid lines at seq {cfg['invalid']}")
    for j in jobs:
        out.append(f"  job {j.seq:2d} [{j.key}] {j.kind:18s} {j.body}")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# --lock-dir mode: several lanes sharing one lock directory, one of them killed at random.

LOCK_KEYS = ["a", "b", "c", "d"]


def lock_dir_iteration(rng, binary, scratch, bound, containment):
    """Starts 2-4 lanes over the same keys and one lock directory, sends SIGKILL or SIGINT to
    one of them at a random moment, and checks: per key no two jobs (of any process, orphans
    included) overlap; the shared cap held; once every job's processes are gone, `lanes locks`
    shows no key held and a later run over every key ends at once. Returns the problems."""
    problems = []
    locks = os.path.join(scratch, "locks")
    tag = f"chaos-lock-{os.getpid()}-{rng.randrange(10 ** 9)}"
    env = dict(os.environ, CHAOS_DIR=scratch, CHAOS_TAG=tag)
    env.pop("LANES_LOCK_DIR", None)
    os.makedirs(os.path.join(scratch, "running"))
    shared = rng.choice([None, 1, 2, 3])
    # Each job: its start in log.KEY, its pid in pids, a count of jobs in flight host-wide
    # (through entries in running/), a short sleep, its end in log.KEY. The end is written by
    # a trap too, so a job stopped by SIGINT still closes its interval before it exits.
    job = ('trap \'rmdir "$CHAOS_DIR/running/$$" 2>/dev/null; '
           'echo "end $LANES_KEY $$ $(date +%s%N)" >> "$CHAOS_DIR/log.$LANES_KEY"; exit 1\' INT TERM; '
           'echo "start $LANES_KEY $$ $(date +%s%N)" >> "$CHAOS_DIR/log.$LANES_KEY"; '
           'mkdir "$CHAOS_DIR/running/$$"; ls "$CHAOS_DIR/running" | wc -l >> "$CHAOS_DIR/counts"; '
           'sleep {t}; rmdir "$CHAOS_DIR/running/$$"; '
           'echo "end $LANES_KEY $$ $(date +%s%N)" >> "$CHAOS_DIR/log.$LANES_KEY"')
    processes = []
    for p in range(rng.randint(2, 4)):
        lines = "".join(
            f"{rng.choice(LOCK_KEYS)}\t{job.replace('{t}', f'0.{rng.randint(0, 15):02d}')}\n"
            for _ in range(rng.randint(5, 20)))
        path = os.path.join(scratch, f"jobs{p}.tsv")
        with open(path, "w") as f:
            f.write(lines)
        argv = [binary, "-j", str(rng.randint(1, 4)), "--containment", containment,
                "--output", "none", "--lock-dir", locks, path]
        if shared:
            argv[1:1] = ["--shared-max-concurrent", str(shared)]
        processes.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
    victim = rng.randrange(len(processes))
    how = rng.choice([signal.SIGKILL, signal.SIGINT])
    time.sleep(rng.uniform(0, 0.6))
    try:
        processes[victim].send_signal(how)
    except OSError:
        pass
    deadline = time.time() + bound
    for i, process in enumerate(processes):
        try:
            process.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            problems.append(f"lanes {i} did not end within {bound}s (a key or slot never freed?)")
            process.kill()
            process.wait()
    # Orphans of a SIGKILLed lanes run on; they end by themselves within their sleep.
    while time.time() < deadline and tagged_processes(tag.encode()):
        time.sleep(0.05)
    for pid in tagged_processes(tag.encode()):
        problems.append(f"job process {pid} still alive")
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for key in LOCK_KEYS:
        try:
            with open(os.path.join(scratch, f"log.{key}")) as f:
                lines = [line.split() for line in f]
        except FileNotFoundError:
            continue
        # Spans are taken from the order of the lines, not their timestamps: each line is one
        # O_APPEND write made while its job lives, so the file order is the order of events. A
        # signal can kill `date` inside a line's command substitution and leave the timestamp
        # empty; the line still counts.
        spans = {}
        for index, fields in enumerate(lines):
            if len(fields) < 3 or fields[0] not in ("start", "end"):
                problems.append(f"key {key}: unreadable log line {index + 1}: {fields!r}")
                continue
            word, pid = fields[0], fields[2]
            if word == "start":
                spans[pid] = [index, None]
            elif pid in spans and spans[pid][1] is None:
                spans[pid][1] = index
        ordered = sorted(spans.items(), key=lambda item: item[1][0])
        for (p1, (s1, e1)), (p2, (s2, _)) in zip(ordered, ordered[1:]):
            if e1 is None or e1 > s2:
                problems.append(f"key {key}: jobs overlap (pid {p1} from line {s1 + 1} to "
                                f"{'no end' if e1 is None else f'line {e1 + 1}'}, pid {p2} "
                                f"from line {s2 + 1})")
    if shared:
        try:
            with open(os.path.join(scratch, "counts")) as f:
                counts = [int(line) for line in f if line.strip()]
        except FileNotFoundError:
            counts = []
        if any(n > shared for n in counts):
            problems.append(f"more than {shared} jobs at once: {max(counts)}")
    listing = subprocess.run([binary, "locks", locks], capture_output=True, text=True)
    if listing.stdout.splitlines()[:1] != ["no key is held"]:
        problems.append(f"keys still held after every job ended: {listing.stdout!r}")
    later = os.path.join(scratch, "later.tsv")
    with open(later, "w") as f:
        f.write("".join(f"{key}\ttrue\n" for key in LOCK_KEYS))
    argv = [binary, "--output", "none", "--lock-dir", locks, later]
    if shared:
        argv[1:1] = ["--shared-max-concurrent", str(shared)]
    try:
        done = subprocess.run(argv, env=env, timeout=10, capture_output=True)
        if done.returncode != 0:
            problems.append(f"a later run failed: {done.returncode}")
    except subprocess.TimeoutExpired:
        problems.append("a later run over every key blocked")
    return problems, f"{len(processes)} lanes, {how.name} to lanes {victim}, shared {shared}"


def lock_dir_main(opts, binary, base, seed):
    passed = failed = 0
    for i in range(opts.first, opts.first + opts.iterations):
        rng = random.Random(f"{seed}:{i}")
        scratch = os.path.join(base, f"it{i:05d}")
        os.makedirs(scratch)
        problems, what = lock_dir_iteration(rng, binary, scratch, opts.bound, opts.containment)
        if opts.verbose:
            print(f"iter {i}: {what}: {'FAIL' if problems else 'ok'}", flush=True)
        if problems:
            failed += 1
            print(f"\nchaos: FAILED seed {seed} iteration {i} --lock-dir ({what}); replay: "
                  f"python3 {sys.argv[0]} --lock-dir --seed {seed} --first {i} --iterations 1 "
                  f"{opts.binary}", flush=True)
            for p in problems[:30]:
                print(f"  PROBLEM: {p}")
            print(f"  scratch kept: {scratch}", flush=True)
        else:
            passed += 1
            if not opts.keep:
                shutil.rmtree(scratch, ignore_errors=True)
    if failed == 0 and not opts.keep:
        shutil.rmtree(base, ignore_errors=True)
    print(f"chaos: {passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


def main():
    ap = argparse.ArgumentParser(description="chaos test driver for lanes")
    ap.add_argument("binary")
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--first", type=int, default=0, help="first iteration number")
    ap.add_argument("--keep", action="store_true", help="keep every scratch directory")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--bound", type=float, default=30.0, help="seconds before lanes is killed")
    ap.add_argument("--containment", choices=["auto", "cgroup", "process-group"],
                    default="auto", help="lanes' --containment in every run")
    ap.add_argument("--lock-dir", action="store_true",
                    help="several lanes sharing a lock directory, one killed at random")
    opts = ap.parse_args()
    # lanes inherits ignored signals across exec, and a signal that reaches it before it
    # resets them is lost (a driver started in the background by a non-interactive shell
    # ignores SIGINT; under nohup, SIGHUP, which lanes then keeps ignoring by design).
    # Start lanes as a terminal would: with default dispositions.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)
    seed = opts.seed if opts.seed is not None else random.SystemRandom().randrange(10 ** 9)
    binary_src = os.path.abspath(opts.binary)
    if not os.access(binary_src, os.X_OK):
        print(f"chaos: {binary_src} is not executable", file=sys.stderr)
        return 2
    base = tempfile.mkdtemp(prefix="lanes-chaos-")
    # A private copy: the binary under test must not change while others rebuild it.
    binary = os.path.join(base, "lanes")
    shutil.copy2(binary_src, binary)
    with open(binary, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    print(f"chaos: seed {seed}, {opts.iterations} iterations from {opts.first}, "
          f"binary {binary_src} (sha256 {digest}), scratch {base}", flush=True)
    if opts.lock_dir:
        return lock_dir_main(opts, binary, base, seed)
    passed = failed = 0
    sweep_notes = 0
    t0 = time.time()
    for i in range(opts.first, opts.first + opts.iterations):
        rng = random.Random(f"{seed}:{i}")
        scratch = os.path.join(base, f"it{i:05d}")
        os.makedirs(scratch)
        cfg, jobs, text, args = plan_iteration(rng, scratch)
        args = ["--containment", opts.containment] + args
        run = Run(binary, scratch, cfg, jobs, text, args, opts.bound)
        ti = time.time()
        try:
            killed = run.execute()
            run.check(killed)
        except Exception as e:  # a driver error is a failure too, with its context
            import traceback
            run.fail("driver error: " + "".join(traceback.format_exception(e)).strip())
            for pid in tagged_processes(run.tag):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        dt = time.time() - ti
        sweep_notes += sum(1 for n in run.notes if n.startswith("SWEEP-SIGNAL"))
        if not opts.verbose and not run.problems:
            for n in run.notes:
                if n.startswith("SWEEP-SIGNAL"):
                    print(f"chaos: note: seed {seed} iteration {i}: {n}", flush=True)
        if opts.verbose:
            sent = ",".join(f"{n}@{ts - run.t_start:.2f}s/{tg}" for ts, n, tg in run.sent)
            print(f"iter {i} seed {seed}: {len(jobs)} jobs, -j {cfg['j']}, "
                  f"exit {run.exit_status}, {dt:.2f}s, signals [{sent}], "
                  f"{'FAIL' if run.problems else 'ok'}"
                  + "".join(f"\n  note: {n}" for n in run.notes), flush=True)
        if run.problems:
            failed += 1
            print(f"\nchaos: FAILED seed {seed} iteration {i} (exit {run.exit_status}, "
                  f"{dt:.2f}s); replay: python3 {sys.argv[0]} --seed {seed} --first {i} "
                  f"--iterations 1 {opts.binary}", flush=True)
            print(describe(binary, cfg, jobs, args, text))
            for s in run.sent:
                print(f"  sent: {s[1]} to {s[2]} at +{s[0] - run.t_start:.3f}s")
            for kind, start, end, seq in run.paused:
                print(f"  paused: {kind}{'' if seq is None else f' seq {seq}'} from "
                      f"+{start - run.t_start:.3f}s to +{end - run.t_start:.3f}s")
            for n in run.notes:
                print(f"  note: {n}")
            for p in run.problems[:30]:
                print(f"  PROBLEM: {p}")
            print(f"  scratch kept: {scratch}", flush=True)
        else:
            passed += 1
            if not opts.keep:
                shutil.rmtree(scratch, ignore_errors=True)
    if opts.verbose or sweep_notes:
        print(f"chaos: {time.time() - t0:.1f}s; {sweep_notes} signal(s) ignored while lanes "
              f"was finishing after its last job", flush=True)
    if failed == 0 and not opts.keep:
        shutil.rmtree(base, ignore_errors=True)
    print(f"chaos: {passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
