#!/usr/bin/env python3
"""Runs one command and prints what it cost, as one tab-separated line:

    wall_s  user_s  sys_s  maxrss_kib  exit_code  producer_end_s  first_out_s  self_user_s  self_sys_s

user/sys are those of the command and every descendant it (or lanes as subreaper) reaped, from
wait4() (10 ms resolution); maxrss_kib is the largest peak resident set among them (for a job
runner: the runner itself, its jobs being smaller); self_user/self_sys the command's own CPU,
every thread of it and none of its children. All come from bench/rusage.c (its path in the
environment variable BENCH_RUSAGE). Only the measured command is counted: a producer started
with --pipe-from is waited for separately.

    measure.py [--stdin FILE | --pipe-from SHELL-CMD] [--stdout FILE] [--first-out] -- ARGV...

--pipe-from  the command's stdin is a pipe from `sh -c SHELL-CMD`; producer_end_s says when the
             producer exited (seconds after the command started; -1 without a producer).
--first-out  read the command's stdout through a pipe and report when its first byte came
             (first_out_s; -1 otherwise); the rest is discarded.
"""
import os
import subprocess
import sys
import tempfile
import threading
import time


def main():
    args = sys.argv[1:]
    stdin_path = None
    pipe_from = None
    stdout_path = "/dev/null"
    first_out = False
    while args and args[0] != "--":
        opt = args.pop(0)
        if opt == "--stdin":
            stdin_path = args.pop(0)
        elif opt == "--pipe-from":
            pipe_from = args.pop(0)
        elif opt == "--stdout":
            stdout_path = args.pop(0)
        elif opt == "--first-out":
            first_out = True
        else:
            sys.exit(f"measure.py: unknown option {opt}")
    if not args:
        sys.exit("measure.py: no command")
    argv = args[1:]

    producer = None
    if pipe_from is not None:
        producer = subprocess.Popen(["sh", "-c", pipe_from], stdout=subprocess.PIPE)
        stdin = producer.stdout
    elif stdin_path is not None:
        stdin = open(stdin_path, "rb")
    else:
        stdin = subprocess.DEVNULL
    stdout = subprocess.PIPE if first_out else open(stdout_path, "wb")

    fd, rusage_file = tempfile.mkstemp(prefix="lanes-bench-rusage.")
    os.close(fd)
    start = time.perf_counter()
    # The rusage helper sits between us and the command: a child forked from this Python process
    # would carry Python's own peak RSS into ru_maxrss (Linux keeps the pre-exec high-water mark).
    proc = subprocess.Popen(
        [os.environ["BENCH_RUSAGE"], rusage_file] + argv,
        stdin=stdin,
        stdout=stdout,
    )
    if producer is not None:
        producer.stdout.close()  # only the measured command holds the read end
    first_out_s = -1.0
    if first_out:
        chunk = proc.stdout.read1(65536)
        if chunk:
            first_out_s = time.perf_counter() - start
        while chunk:
            chunk = proc.stdout.read1(65536)
    producer_end = []
    if producer is not None:
        # The producer normally ends first (when its last line has been read).
        waiter = threading.Thread(
            target=lambda: (producer.wait(), producer_end.append(time.perf_counter() - start))
        )
        waiter.start()
    proc.wait()
    end = time.perf_counter()
    producer_end_s = -1.0
    if producer is not None:
        waiter.join()
        producer_end_s = producer_end[0]
    with open(rusage_file) as f:
        user, system, maxrss, code, self_user, self_sys = f.read().split()
    os.unlink(rusage_file)
    print(
        "\t".join(
            [
                f"{end - start:.4f}",
                user,
                system,
                maxrss,
                code,
                f"{producer_end_s:.4f}",
                f"{first_out_s:.4f}",
                self_user,
                self_sys,
            ]
        )
    )


if __name__ == "__main__":
    main()
