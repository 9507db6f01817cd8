#!/usr/bin/env python3
"""--lock-dir: what sharing keys across processes costs. See bench/README.md ("Shared keys").

Workloads (each job `sh -c true`, 50 keys `k0`..`k49` in turn):

- single:      one lanes, -j 4, all 4,000 jobs, no --lock-dir (the baseline);
- single-lock: the same with --lock-dir (a fresh directory each round): the lock's own cost;
- shared:      two lanes started together, -j 2 each, 2,000 jobs each over the same 50 keys
               and one --lock-dir: wall time until both have ended.

Rounds alternate the three (the first rotating). Prints medians, the paired ratio shared /
single, and the per-job lock cost: (own CPU of single-lock - own CPU of single) / 4,000, own
CPU being lanes' own threads, none of its jobs (bench/rusage.c).

Environment: LANES_BIN (default target/release/lanes), BENCH_REPS (default 5), BENCH_NICE,
BENCH_CONTAINMENT (default process-group).
"""

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
REPS = int(os.environ.get("BENCH_REPS", "5"))
NICE = os.environ.get("BENCH_NICE")
# `--containment` of every run (default `process-group`: the cheaper start, so that the lock's
# own cost is less buried under the fork of cgroup mode).
CONTAINMENT = os.environ.get("BENCH_CONTAINMENT", "process-group")
JOBS = 4000
KEYS = 50


def build_rusage(work):
    binary = os.path.join(work, "rusage")
    subprocess.run(["cc", "-O2", "-o", binary, os.path.join(BENCH, "rusage.c")], check=True)
    return binary


def prefix():
    return ["nice", "-n", NICE] if NICE else []


def start(rusage, work, name, argv):
    out = os.path.join(work, name + ".rusage")
    process = subprocess.Popen(
        prefix() + [rusage, out] + argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return process, out


def own_cpu(path):
    with open(path) as f:
        fields = f.read().split("\t")
    return float(fields[4]) + float(fields[5])


def run(rusage, work, name, commands):
    """Starts every command at once; returns (wall seconds, summed own CPU seconds)."""
    began = time.monotonic()
    started = [start(rusage, work, f"{name}{i}", argv) for i, argv in enumerate(commands)]
    for process, _ in started:
        if process.wait() != 0:
            sys.exit(f"{name}: exit status {process.returncode}")
    wall = time.monotonic() - began
    return wall, sum(own_cpu(out) for _, out in started)


def main():
    work = tempfile.mkdtemp(prefix="lanes-bench-lockdir.")
    try:
        rusage = build_rusage(work)

        def jobs(name, count):
            path = os.path.join(work, name)
            with open(path, "w") as f:
                for i in range(count):
                    f.write(f"k{i % KEYS}\ttrue\n")
            return path

        every = jobs("all.tsv", JOBS)
        half = jobs("half.tsv", JOBS // 2)

        def fresh_dir():
            path = os.path.join(work, "locks")
            shutil.rmtree(path, ignore_errors=True)
            return path

        def single():
            return [[LANES, "-j", "4", "--containment", CONTAINMENT, "--output", "none", every]]

        def single_lock():
            return [[LANES, "-j", "4", "--containment", CONTAINMENT, "--output", "none",
                     "--lock-dir", fresh_dir(), every]]

        def shared():
            locks = fresh_dir()
            return [[LANES, "-j", "2", "--containment", CONTAINMENT, "--output", "none",
                     "--lock-dir", locks, half]] * 2

        workloads = [("single", single), ("single-lock", single_lock), ("shared", shared)]
        figures = {name: [] for name, _ in workloads}
        for round_ in range(REPS):
            order = workloads[round_ % 3 :] + workloads[: round_ % 3]
            for name, commands in order:
                figures[name].append(run(rusage, work, name, commands()))
            print(f"round {round_ + 1}/{REPS} done", file=sys.stderr)
        print("| workload | wall median s | min–max s | own CPU median s |")
        print("|---|---:|---:|---:|")
        for name, rows in figures.items():
            walls = [w for w, _ in rows]
            cpus = [c for _, c in rows]
            print(
                f"| {name} | {statistics.median(walls):.3f} | {min(walls):.3f}–{max(walls):.3f}"
                f" | {statistics.median(cpus):.3f} |"
            )
        ratios = [s[0] / b[0] for s, b in zip(figures["shared"], figures["single"])]
        costs = [
            (lock[1] - plain[1]) / JOBS * 1e6
            for lock, plain in zip(figures["single-lock"], figures["single"])
        ]
        lock_ratios = [s[0] / b[0] for s, b in zip(figures["single-lock"], figures["single"])]
        print()
        print(f"shared / single wall (paired median): {statistics.median(ratios):.3f}x "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f})")
        print(f"single-lock / single wall (paired median): {statistics.median(lock_ratios):.3f}x")
        print(f"lock cost, own CPU per job (paired median): {statistics.median(costs):.0f} µs")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
