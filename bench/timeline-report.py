#!/usr/bin/env python3
"""Writes a synthetic lanes report of N jobs to stdout, as `lanes --report` writes them: a run
record, N job records (every field, waits included) in the order they end, a summary. Jobs run
20-200 ms each with -j J; their keys are K distinct keys (K = N for all distinct). Lines come
faster than jobs run, and at most 1,000 jobs wait at once (as with --max-queued 1000): a job is
admitted when the job 1,000 before it has started. Used by bench/timeline.sh to draw a timeline
of a million jobs.

    timeline-report.py N K J > report.jsonl
"""
import heapq
import json
import random
import sys
from datetime import datetime, timedelta, timezone


def main():
    n, k, j = (int(a) for a in sys.argv[1:4])
    rng = random.Random(1)
    origin = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)

    def ts(ms):
        t = origin + timedelta(milliseconds=ms)
        return t.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (t.microsecond // 1000)

    out = sys.stdout
    out.write(json.dumps({"type": "run", "version": "0.1.0", "schema": 2,
                          "started_at": ts(0), "max_concurrent": j, "source": "-",
                          "containment": "process_group"}, separators=(",", ":")) + "\n")
    slots = [(0, s) for s in range(1, j + 1)]  # (free at, slot)
    key_free = {}
    ends = []
    failed = 0
    starts = {}
    for seq in range(1, n + 1):
        key = "key-%d" % (seq % k)
        # 50 lines a ms, each admitted once the queue has room.
        queued = max(seq // 50, starts.pop(seq - 1000, 0))
        free_at, slot = heapq.heappop(slots)
        key_at = key_free.get(key, 0)
        start = max(queued, free_at, key_at)
        starts[seq] = start
        dur = rng.randint(20, 200)
        end = start + dur
        heapq.heappush(slots, (end, slot))
        key_free[key] = end
        waits = []
        if key_at > queued:
            waits.append({"cause": "key_busy", "behind": max(1, seq - k), "started_at": ts(queued),
                          "ms": min(key_at, start) - queued})
        rest_from = max(queued, min(key_at, start))
        if start > rest_from:
            waits.append({"cause": "cap", "started_at": ts(rest_from), "ms": start - rest_from})
        ok = rng.random() > 0.01
        failed += not ok
        record = {"type": "job", "seq": seq, "line": seq, "key": key, "command": "make %d" % seq,
                  "outcome": "succeeded" if ok else "failed",
                  "reason": None if ok else "exit_status", "exit_code": 0 if ok else 1,
                  "signal": None, "started": True, "started_at": ts(start), "ended_at": ts(end),
                  "duration_ms": dur, "wait_ms": start - queued, "attempts": 1, "flaky": False,
                  "slot": slot, "leaked": False, "superseded_by": None, "batch": None,
                  "error": None, "cpu_ms": None, "memory_peak_bytes": None,
                  "tries": [{"attempt": 1, "outcome": "succeeded" if ok else "failed",
                             "reason": None if ok else "exit_status",
                             "exit_code": 0 if ok else 1, "signal": None, "slot": slot,
                             "started_at": ts(start), "ended_at": ts(end), "duration_ms": dur}]}
        if waits:
            record["waits"] = waits
        # Records come in the order jobs end; a small heap keeps that order cheaply.
        heapq.heappush(ends, (end, seq, json.dumps(record, separators=(",", ":"))))
        while len(ends) > 4 * j:
            out.write(heapq.heappop(ends)[2] + "\n")
    last = 0
    while ends:
        end, _, line = heapq.heappop(ends)
        last = end
        out.write(line + "\n")
    out.write(json.dumps({"type": "summary", "jobs": n, "succeeded": n - failed, "flaky": 0,
                          "failed": failed, "interrupted": 0, "rejected": 0, "skipped": 0,
                          "duration_ms": last, "exit_code": 1 if failed else 0},
                         separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
