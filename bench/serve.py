#!/usr/bin/env python3
"""lanes serve: the `lanes submit` round trip (process start included), a batch client's
submissions per second, and the server's RSS over 1,000,000 submitted jobs.

    cargo build --release && python3 bench/serve.py

Environment: LANES_BIN (default target/release/lanes), SERVE_ROUND_TRIPS (300),
SERVE_BATCH (100000 lines per batch), SERVE_TOTAL (1000000 jobs for the RSS figure),
SERVE_JOURNAL_DIR (where the journal goes; default beside the socket under /tmp; the default
socket's directory, $XDG_RUNTIME_DIR, is usually a tmpfs: /dev/shm shows that case).

The same harness starts `true`, `lanes --version` and a C client that does only a
submission's socket work (bench/submit-client.c, compiled with cc), for the floors.

Every job is submitted to one key of a server started with --coalesce latest while that key's
running job waits: each submission is admitted (journaled, flushed, answered) and supersedes
the one before it, which gets its record at once. So the figures are the service's own costs,
not the cost of starting a million processes. The distinct-key batch measures admission into
a growing queue (--max-queued raised) instead.
"""

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

LANES = os.environ.get("LANES_BIN", "target/release/lanes")
ROUND_TRIPS = int(os.environ.get("SERVE_ROUND_TRIPS", "300"))
BATCH = int(os.environ.get("SERVE_BATCH", "100000"))
TOTAL = int(os.environ.get("SERVE_TOTAL", "1000000"))
# Where the journal goes (its fdatasync is most of a lone submission's round trip on a disk):
# by default beside the socket, in a temporary directory under /tmp.
JOURNAL_DIR = os.environ.get("SERVE_JOURNAL_DIR")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Server:
    def __init__(self, directory, *options):
        self.socket = os.path.join(directory, "lanes.sock")
        self.journal = os.path.join(JOURNAL_DIR or directory, "lanes.journal")
        self.process = subprocess.Popen(
            [LANES, "serve", "--socket", self.socket, "--journal", self.journal,
             "--report", "/dev/null",
             "--output", "none", *options],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 20
        while True:
            try:
                with socket.socket(socket.AF_UNIX) as probe:
                    probe.connect(self.socket)
                break
            except OSError:
                if time.time() > deadline:
                    sys.exit("the server did not start")
                time.sleep(0.01)

    def submit(self, *args, stdin=None):
        return subprocess.run([LANES, "submit", "--socket", self.socket, *args],
                              stdin=stdin, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL).returncode

    def close(self):
        subprocess.run([LANES, "close", "--socket", self.socket],
                       stdout=subprocess.DEVNULL, check=True)
        self.process.wait()


def batch_file(directory, name, lines):
    path = os.path.join(directory, name)
    with open(path, "w") as out:
        out.writelines(lines)
    return path


def timed_batch(server, path):
    with open(path) as stdin:
        start = time.perf_counter()
        server.submit(stdin=stdin)
        return time.perf_counter() - start


def main():
    if not os.access(LANES, os.X_OK):
        sys.exit(f"{LANES} not found: cargo build --release first (or set LANES_BIN)")
    directory = tempfile.mkdtemp(prefix="lanes-bench-serve-")
    global JOURNAL_DIR
    if JOURNAL_DIR:
        JOURNAL_DIR = tempfile.mkdtemp(prefix="lanes-bench-serve-", dir=JOURNAL_DIR)
    fs = subprocess.run(["stat", "-f", "-c", "%T", JOURNAL_DIR or directory],
                        capture_output=True, text=True).stdout.strip()
    print(f"lanes serve benchmark ({LANES}; journal on {fs}, {os.cpu_count()} CPUs)")
    try:
        server = Server(directory, "--coalesce", "latest", "-j", "1")
        # The key's running job waits for the server's close.
        server.submit("hot", "--", "sleep 100000")

        times = []
        for _ in range(ROUND_TRIPS):
            start = time.perf_counter()
            server.submit("hot", "--", "true")
            times.append(time.perf_counter() - start)
        times.sort()
        def median_start(argv):
            starts = []
            for _ in range(ROUND_TRIPS):
                start = time.perf_counter()
                subprocess.run(argv, stdout=subprocess.DEVNULL)
                starts.append(time.perf_counter() - start)
            return statistics.median(starts) * 1000

        # The floors: a process that does nothing, and one that does a submission's socket
        # work and nothing else (bench/submit-client.c), started by the same harness.
        print(f"process start alone, same harness: median "
              f"{median_start([shutil.which('true') or '/bin/true']):.2f} ms for true, "
              f"{median_start([LANES, '--version']):.2f} ms for lanes --version")
        client = os.path.join(directory, "submit-client")
        source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "submit-client.c")
        if subprocess.run(["cc", "-O2", "-o", client, source]).returncode == 0:
            print(f"a C client doing only the socket work (bench/submit-client.c): median "
                  f"{median_start([client, server.socket, 'hot', 'true']):.2f} ms")
        else:
            print("a C client: not measured (no C compiler)")
        print(f"submit round trip, process start included: median "
              f"{statistics.median(times) * 1000:.2f} ms, p90 "
              f"{times[int(len(times) * 0.9)] * 1000:.2f} ms ({ROUND_TRIPS} submissions)")

        hot = batch_file(directory, "hot.tsv", ["hot\ttrue\n"] * BATCH)
        took = timed_batch(server, hot)
        print(f"batch client, one coalescing key: {BATCH / took:,.0f} submissions/s "
              f"({BATCH:,} in {took:.2f} s)")

        batches = max(1, TOTAL // BATCH)
        figures = [rss_kib(server.process.pid)]
        for _ in range(batches - 1):
            timed_batch(server, hot)
            figures.append(rss_kib(server.process.pid))
        submitted = ROUND_TRIPS + 1 + batches * BATCH
        journal = os.path.getsize(server.journal)
        print(f"server RSS after each {BATCH:,} submissions (KiB): "
              + " ".join(str(f) for f in figures))
        print(f"  {submitted:,} jobs submitted; journal {journal:,} bytes at the end")
        server.close()

        queued = Server(directory, "-j", "1", "--max-queued", str(BATCH * 2))
        queued.submit("hold", "--", "sleep 100000")
        distinct = batch_file(directory, "distinct.tsv",
                              [f"k{i}\ttrue\n" for i in range(BATCH)])
        took = timed_batch(queued, distinct)
        print(f"batch client, distinct keys queued: {BATCH / took:,.0f} submissions/s "
              f"({BATCH:,} in {took:.2f} s); server RSS {rss_kib(queued.process.pid):,} KiB "
              f"with them waiting")
        queued.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        if JOURNAL_DIR:
            shutil.rmtree(JOURNAL_DIR, ignore_errors=True)


if __name__ == "__main__":
    main()
