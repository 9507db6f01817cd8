#!/usr/bin/env python3
"""--coordinate: what sharing keys across hosts through PostgreSQL costs, beside --lock-dir.
See bench/README.md ("Fleet-wide keys").

Starts a PostgreSQL server of its own (initdb and pg_ctl on PATH or under
/usr/lib/postgresql/*/bin, as the `postgres` user when run as root; a Unix socket in a
temporary directory, no TCP), then, each round, three lanes processes started together, each
with 1,000 jobs over the same 30 keys (`k0`..`k29` in turn), in three ways:

- none:        no sharing (the baseline for lanes' own CPU);
- lock-dir:    one --lock-dir (a fresh directory each round);
- coordinate:  one database (a fresh --namespace each round), --host-id h0..h2.

Each job is `--shell bash` text that appends `s KEY HOST $EPOCHREALTIME` as it starts and
`e KEY HOST $EPOCHREALTIME` as it ends to one log (no fork). Per key, the hand-over latency is
the time from a job's `e` to the next job's `s`; "between hosts" counts only hand-overs where
the next job belongs to another process. Coordination cost per job: (own CPU of the three
lanes sharing keys - own CPU of the three not sharing) / 3,000, own CPU being lanes' own
threads (bench/rusage.c). Server CPU per job: the CPU the database's server processes used
during the run (the postmaster's reaped children), / 3,000.

Then, per round, the same three processes with 300 jobs each over one key, -j 1, with
--lock-dir and with --coordinate: one job at a time fleet-wide, so that the hand-over between
hosts is measured on a machine not busy with other jobs; and, as the floor, one lanes alone
with its 300 jobs over that key and no lock: a job's exit, its reaping and the next job's
spawn and shell start, which every hand-over includes.

Environment: LANES_BIN (default target/release/lanes), BENCH_REPS (default 3), BENCH_J (each
lanes' -j, default 30).
"""

import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
LANES = os.environ.get("LANES_BIN", os.path.join(ROOT, "target", "release", "lanes"))
REPS = int(os.environ.get("BENCH_REPS", "3"))
# Each lanes' -j: by default every process may run every key at once, so that a key handed to
# a host finds a free slot there and the hand-over measures the coordination, not a wait for a
# local slot.
J = os.environ.get("BENCH_J", "30")
PROCESSES = 3
JOBS = 1000
KEYS = 30
ONE_KEY_JOBS = 300


def postgres_bin():
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if os.path.isfile(os.path.join(directory, "initdb")) and os.path.isfile(
            os.path.join(directory, "pg_ctl")
        ):
            return directory
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


def as_server_user(argv):
    return (["runuser", "-u", "postgres", "--"] + argv) if os.geteuid() == 0 else argv


def start_postgres(work):
    bin_dir = postgres_bin()
    if bin_dir is None:
        sys.exit("PostgreSQL (initdb, pg_ctl) is not installed: skipped")
    pg = os.path.join(work, "pg")
    os.mkdir(pg)
    if os.geteuid() == 0:
        shutil.chown(pg, "postgres", "postgres")
    data = os.path.join(pg, "data")
    subprocess.run(
        as_server_user([os.path.join(bin_dir, "initdb"), "-A", "trust", "-U", "postgres", "-D", data]),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    options = f"-k {pg} -c listen_addresses='' -c max_connections=200 -c fsync=off"
    subprocess.run(
        as_server_user([os.path.join(bin_dir, "pg_ctl"), "-w", "-D", data, "-o", options,
                        "-l", os.path.join(pg, "log"), "start"]),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    with open(os.path.join(data, "postmaster.pid")) as f:
        pid = int(f.readline())
    return f"postgres://postgres@/postgres?host={pg}", pid


def stop_postgres(pid):
    try:
        os.kill(pid, 2)  # SIGINT: fast shutdown
    except ProcessLookupError:
        return
    for _ in range(3000):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)


def own_cpu(path):
    with open(path) as f:
        fields = f.read().split("\t")
    return float(fields[4]) + float(fields[5])


def server_cpu(pid):
    """CPU seconds of the server's reaped processes (its backends that have exited)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # Fields 16 and 17 of stat(5) (cutime, cstime), counted from field 3 here.
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def handovers(log):
    """Per key, (gap ms, between hosts?) from each job's end to the next job's start."""
    starts, ends = {}, {}
    with open(log) as f:
        for line in f:
            kind, key, host, at = line.split()
            (starts if kind == "s" else ends).setdefault(key, []).append((float(at), host))
    gaps = []
    for key, key_starts in starts.items():
        key_starts.sort()
        key_ends = sorted(ends[key])
        for (end, host), (start, next_host) in zip(key_ends, key_starts[1:]):
            if start < end:
                sys.exit(f"two jobs of {key} overlapped")
            gaps.append(((start - end) * 1000, host != next_host))
    return gaps


def main():
    work = tempfile.mkdtemp(prefix="lanes-bench-coordinate.")
    os.chmod(work, 0o755)  # the server user reaches its directory inside
    subprocess.run(["cc", "-O2", "-o", os.path.join(work, "rusage"),
                    os.path.join(BENCH, "rusage.c")], check=True)
    rusage = os.path.join(work, "rusage")
    url, pg_pid = start_postgres(work)
    try:
        log = os.path.join(work, "log")

        def write_inputs(name, jobs, keys):
            paths = []
            for p in range(PROCESSES):
                path = os.path.join(work, f"{name}{p}.tsv")
                with open(path, "w") as f:
                    for i in range(jobs):
                        f.write(f"k{i % keys}\t"
                                f"printf 's %s h{p} %s\\n' \"$LANES_KEY\" \"$EPOCHREALTIME\" >> {log}; "
                                f"printf 'e %s h{p} %s\\n' \"$LANES_KEY\" \"$EPOCHREALTIME\" >> {log}\n")
                paths.append(path)
            return paths

        inputs = write_inputs("jobs", JOBS, KEYS)
        # One key, -j 1: one job at a time fleet-wide, so that the hand-over is measured on
        # a machine that is not busy with other jobs.
        one_key = write_inputs("one", ONE_KEY_JOBS, 1)
        def commands(mode, round_, inputs=inputs, j=J):
            base = [LANES, "-j", j, "--shell", "bash", "--containment", "process-group",
                    "--output", "none"]
            extra = {
                "none": lambda p: [],
                "lock-dir": lambda p: ["--lock-dir", os.path.join(work, f"locks{round_}")],
                "coordinate": lambda p: ["--coordinate", url, "--namespace", f"bench{round_}",
                                         "--host-id", f"h{p}"],
            }[mode]
            return [base + extra(p) + [inputs[p]] for p in range(PROCESSES)]

        modes = ["none", "lock-dir", "coordinate"]
        rows = {mode: [] for mode in modes}
        for round_ in range(REPS):
            order = modes[round_ % 3:] + modes[:round_ % 3]
            for mode in order:
                if os.path.exists(log):
                    os.remove(log)
                server_before = server_cpu(pg_pid)
                began = time.monotonic()
                started = []
                for p, argv in enumerate(commands(mode, round_)):
                    out = os.path.join(work, f"{mode}{p}.rusage")
                    started.append((subprocess.Popen([rusage, out] + argv,
                                                     stdout=subprocess.DEVNULL,
                                                     stderr=subprocess.DEVNULL), out))
                for process, _ in started:
                    if process.wait() != 0:
                        sys.exit(f"{mode}: exit status {process.returncode}")
                wall = time.monotonic() - began
                cpu = sum(own_cpu(out) for _, out in started)
                gaps = handovers(log) if mode != "none" else []
                time.sleep(0.5)  # the sessions' server processes exit and are reaped
                server = server_cpu(pg_pid) - server_before
                rows[mode].append((wall, cpu, gaps, server))
            print(f"round {round_ + 1}/{REPS} done", file=sys.stderr)

        print(f"{PROCESSES} processes x {JOBS} jobs over {KEYS} keys, -j {J} each, {REPS} rounds")
        print()
        print("| workload | wall median s | lanes CPU median s | lanes cost per job ms | "
              "server CPU per job ms | hand-over median ms (between hosts) | "
              "hand-over p90 ms (between hosts) | hand-overs between hosts |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        base_cpu = [row[1] for row in rows["none"]]
        for mode in modes:
            walls = [row[0] for row in rows[mode]]
            cpus = [row[1] for row in rows[mode]]
            server = statistics.median(row[3] for row in rows[mode]) / (PROCESSES * JOBS) * 1000
            cost = statistics.median(
                (c - b) / (PROCESSES * JOBS) * 1000 for c, b in zip(cpus, base_cpu)
            )
            between = sorted(g for row in rows[mode] for g, other in row[2] if other)
            if between:
                median = f"{statistics.median(between):.2f}"
                p90 = f"{between[int(len(between) * 0.9)]:.2f}"
            else:
                median = p90 = "–"
            print(f"| {mode} | {statistics.median(walls):.2f} | {statistics.median(cpus):.2f} | "
                  f"{cost:.3f} | {server:.3f} | {median} | {p90} | {len(between)} |")
        # The floor: one lanes alone, no lock, the same job over one key: a key's next job
        # starts when the last ends, in the same process.
        one = {"one process, no lock (floor)": [], "lock-dir": [], "coordinate": []}
        for round_ in range(REPS):
            for mode in one:
                if os.path.exists(log):
                    os.remove(log)
                if mode in ("lock-dir", "coordinate"):
                    argvs = commands(mode, f"one{round_}", one_key, "1")
                else:
                    argvs = commands("none", f"one{round_}", one_key, "1")[:1]
                processes = [subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL)
                             for argv in argvs]
                for process in processes:
                    if process.wait() != 0:
                        sys.exit(f"one key, {mode}: exit status {process.returncode}")
                floor = len(argvs) == 1
                one[mode].extend(g for g, other in handovers(log) if other or floor)
        print()
        print(f"one key, {PROCESSES} processes x {ONE_KEY_JOBS} jobs, -j 1 each, {REPS} rounds: "
              "hand-over between hosts, from a job's end to the next host's job's start (the "
              "floor: one process's next job of the key)")
        print()
        print("| workload | median ms | p90 ms | hand-overs |")
        print("|---|---:|---:|---:|")
        for mode, gaps in one.items():
            gaps.sort()
            print(f"| {mode} | {statistics.median(gaps):.2f} | {gaps[int(len(gaps) * 0.9)]:.2f} "
                  f"| {len(gaps)} |")
    finally:
        stop_postgres(pg_pid)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
