#!/usr/bin/env python3
"""Turns bench/run.sh's raw figures into the table (markdown, on stdout) and a JSON summary.

    summarize.py RAW.tsv MACHINE.txt OUT.json

Ratios are paired: a tool's figure over the floor's (or another tool's) in the same round,
then the median over the rounds. Noise is the spread of the floor's own wall time over the
rounds ((max - min) / median).
"""
import csv
import json
import statistics
import sys

MIB = 1024.0

FLOOR_OF = {
    "a-j2": "floor",
    "a-j8": "floor",
    "b": "floor",
    "c-100x1MB": "capture-floor",
    "c-8x50MB": "capture-floor",
    "f-50keys": "floor",
}
IDEAL_OF = {"b": 0.2, "f-sleep-5keys": 2.0, "timeout": 0.3}


def load(path):
    rows = []
    with open(path) as f:
        for row in csv.DictReader(f, delimiter="\t"):
            for k in ("wall_s", "user_s", "sys_s", "producer_end_s", "first_out_s",
                      "self_user_s", "self_sys_s"):
                row[k] = float(row[k])
            for k in ("jobs", "round", "maxrss_kib", "exit", "left"):
                row[k] = int(float(row[k]))
            rows.append(row)
    return rows


def by_round(rows, workload, tool):
    return {r["round"]: r for r in rows if r["workload"] == workload and r["tool"] == tool}


def paired(rows, workload, a, b, fn):
    ra, rb = by_round(rows, workload, a), by_round(rows, workload, b)
    vals = [fn(ra[k], rb[k]) for k in ra if k in rb and ra[k]["wall_s"] > 0 and rb[k]["wall_s"] > 0]
    return statistics.median(vals) if vals else None


def wall_ratio(rows, workload, a, b):
    return paired(rows, workload, a, b, lambda x, y: x["wall_s"] / y["wall_s"])


def cpu_over(rows, workload, tool, floor):
    """The tool's own CPU (all its threads, none of its jobs) over the floor's, per job, in µs."""
    def per_job(x, y):
        own = x["self_user_s"] + x["self_sys_s"] - y["self_user_s"] - y["self_sys_s"]
        return own / x["jobs"] * 1e6

    return paired(rows, workload, tool, floor, per_job)


def fmt(v, spec):
    return "–" if v is None else format(v, spec)


def main():
    raw, machine, out_json = sys.argv[1:4]
    rows = load(raw)
    machine_lines = open(machine).read().strip().splitlines()

    order = []
    for r in rows:
        key = (r["workload"], r["tool"])
        if key not in order:
            order.append(key)

    summary = []
    for workload, tool in order:
        rs = [r for r in rows if r["workload"] == workload and r["tool"] == tool]
        ok = [r for r in rs if r["wall_s"] > 0]
        walls = [r["wall_s"] for r in ok]
        rss = [r["maxrss_kib"] for r in ok if r["maxrss_kib"] >= 0]
        jobs = rs[0]["jobs"]
        floor = FLOOR_OF.get(workload)
        entry = {
            "workload": workload,
            "tool": tool,
            "jobs": jobs,
            "rounds": len(rs),
            "wall_median_s": statistics.median(walls) if walls else None,
            "wall_min_s": min(walls) if walls else None,
            "wall_max_s": max(walls) if walls else None,
            "cpu_median_s": statistics.median([r["user_s"] + r["sys_s"] for r in ok]) if ok else None,
            "maxrss_median_kib": statistics.median(rss) if rss else None,
            "maxrss_max_kib": max(rss) if rss else None,
            "exit_codes": sorted({r["exit"] for r in rs}),
            "left_max": max((r["left"] for r in rs), default=0),
            "producer_end_median_s": statistics.median([r["producer_end_s"] for r in ok]) if ok else None,
            "first_out_median_s": statistics.median([r["first_out_s"] for r in ok]) if ok else None,
            "ratio": None,
            "ratio_to": None,
            "cpu_us_per_job_over_floor": None,
        }
        if floor and tool != floor:
            entry["ratio"] = wall_ratio(rows, workload, tool, floor)
            entry["ratio_to"] = floor
            entry["cpu_us_per_job_over_floor"] = cpu_over(rows, workload, tool, floor)
        elif workload in IDEAL_OF and tool != floor:
            entry["ratio"] = entry["wall_median_s"] / IDEAL_OF[workload] if walls else None
            entry["ratio_to"] = f"ideal {IDEAL_OF[workload]} s"
        if floor == tool and walls:
            entry["noise"] = (max(walls) - min(walls)) / statistics.median(walls)
        summary.append(entry)

    def get(workload, tool):
        for e in summary:
            if e["workload"] == workload and e["tool"] == tool:
                return e
        return None

    # ---- the table
    out = []
    partial = any(line.startswith("workloads:") for line in machine_lines)
    out.append("# lanes benchmark: " + ("a partial run\n" if partial else "latest figures\n"))
    for line in machine_lines:
        out.append(f"- {line}")
    out.append("")
    out.append(
        "| workload | tool | jobs | wall median s | min–max s | jobs/s | ratio (paired median) "
        "| own CPU µs/job over floor | peak RSS MiB (median / max) | exit |"
    )
    out.append("|---|---|---:|---:|---:|---:|---|---:|---:|---|")
    for e in summary:
        if e["workload"] == "g-start":
            continue
        jobs_s = e["jobs"] / e["wall_median_s"] if e["jobs"] and e["wall_median_s"] else None
        ratio = "–"
        if e["ratio"] is not None:
            ratio = f"{e['ratio']:.2f}× {e['ratio_to']}"
        elif "noise" in e:
            ratio = f"(floor; spread {e['noise'] * 100:.0f}%)"
        rss = (
            f"{e['maxrss_median_kib'] / MIB:.1f} / {e['maxrss_max_kib'] / MIB:.1f}"
            if e["maxrss_median_kib"] is not None
            else "–"
        )
        extra = ""
        if e["workload"] == "timeout":
            extra = f", {e['left_max']} left"
        if e["workload"] == "d-stream":
            extra = f", first output {e['first_out_median_s']:.3f} s, input ended {e['producer_end_median_s']:.3f} s"
        out.append(
            f"| {e['workload']} | {e['tool']} | {e['jobs']} | {fmt(e['wall_median_s'], '.3f')} "
            f"| {fmt(e['wall_min_s'], '.3f')}–{fmt(e['wall_max_s'], '.3f')} | {fmt(jobs_s, ',.0f')} "
            f"| {ratio} | {fmt(e['cpu_us_per_job_over_floor'], '.0f')} | {rss} "
            f"| {','.join(map(str, e['exit_codes']))}{extra} |"
        )
    start = [e for e in summary if e["workload"] == "g-start"]
    if start:
        out.append("")
        out.append("Start-up (hyperfine -N, median of each round's median over 100 runs):\n")
        out.append("| command | median ms | min–max ms (over rounds) |")
        out.append("|---|---:|---:|")
        for e in start:
            out.append(
                f"| {e['tool']} | {e['wall_median_s'] * 1e3:.2f} "
                f"| {e['wall_min_s'] * 1e3:.2f}–{e['wall_max_s'] * 1e3:.2f} |"
            )

    # ---- the targets
    checks = []

    def check(name, value, text, met):
        checks.append({"target": name, "figure": text, "met": met, "value": value})

    for w in ("a-j2", "a-j8"):
        if not get(w, "lanes"):
            continue
        r = wall_ratio(rows, w, "lanes", "floor")
        check(f"({w}) wall ≤ 1.10× floor", r, f"{fmt(r, '.2f')}×", r is not None and r <= 1.10)
        c = cpu_over(rows, w, "lanes", "floor")
        # Rounded first: the CPU times are sums of seconds with float noise (60.00000000000001).
        check(f"({w}) lanes CPU ≤ 60 µs/job over floor", c, f"{fmt(c, '.0f')} µs",
              c is not None and round(c, 1) <= 60)
        for peer in ("xargs", "rust-parallel"):
            if get(w, peer):
                r = wall_ratio(rows, w, "lanes", peer)
                check(f"({w}) faster than {peer}", r, f"{fmt(r, '.2f')}× {peer}", r is not None and r < 1.0)
        if get(w, "parallel"):
            r = wall_ratio(rows, w, "parallel", "lanes")
            check(f"({w}) ≥ 5× faster than GNU parallel", r, f"parallel takes {fmt(r, '.1f')}× lanes", r is not None and r >= 5)
        if get(w, "floor-1thread"):
            r = wall_ratio(rows, w, "lanes", "floor-1thread")
            check(f"({w}) against the one-thread spawn loop (no target)", r, f"{fmt(r, '.2f')}×", None)
        if get(w, "floor-capture"):
            r = wall_ratio(rows, w, "lanes", "floor-capture")
            check(f"({w}) against the spawn loop that reads its jobs' output (no target)", r, f"{fmt(r, '.2f')}×", None)
    if get("b", "lanes"):
        r = wall_ratio(rows, "b", "lanes", "floor")
        check("(b) ≤ 1.15× floor", r, f"{fmt(r, '.2f')}×", r is not None and r <= 1.15)
    if get("c-100x1MB", "lanes"):
        r = wall_ratio(rows, "c-100x1MB", "lanes", "capture-floor")
        check("(c) 100 × 1 MB: wall ≤ 1.3× capture floor", r, f"{fmt(r, '.2f')}×", r is not None and r <= 1.3)
        m = get("c-100x1MB", "lanes")["maxrss_max_kib"] / MIB
        check("(c) 100 × 1 MB: peak RSS ≤ 16 MiB", m, f"{m:.1f} MiB", m <= 16)
    if get("c-8x50MB", "lanes"):
        m = get("c-8x50MB", "lanes")["maxrss_max_kib"] / MIB
        check("(c) 8 × 50 MB: peak RSS ≤ 16 MiB", m, f"{m:.1f} MiB", m <= 16)
    for letter in ("d", "e"):
        sizes = sorted(
            {e["jobs"] for e in summary if e["workload"].startswith(letter + "-") and e["workload"][2:].isdigit()}
        )
        if len(sizes) < 2:
            continue
        small, big = get(f"{letter}-{sizes[0]}", "lanes"), get(f"{letter}-{sizes[-1]}", "lanes")
        mb, ms = big["maxrss_max_kib"] / MIB, small["maxrss_max_kib"] / MIB
        check(f"({letter}) {sizes[-1]:,} lines: peak RSS ≤ 16 MiB", mb, f"{mb:.1f} MiB", mb <= 16)
        check(
            f"({letter}) {sizes[-1]:,} lines within 1 MiB of {sizes[0]:,}",
            mb - ms,
            f"{mb:.1f} vs {ms:.1f} MiB ({mb - ms:+.2f})",
            mb - ms <= 1.0,
        )
    s = get("d-stream", "lanes")
    if s:
        check(
            "(d) jobs start before input ends",
            s["first_out_median_s"],
            f"first job output at {s['first_out_median_s']:.3f} s, input ended at {s['producer_end_median_s']:.3f} s",
            0 <= s["first_out_median_s"] < s["producer_end_median_s"],
        )
    if get("f-50keys", "lanes-50keys"):
        r = wall_ratio(rows, "f-50keys", "lanes-50keys", "lanes-unique")
        check("(f) 50 keys ≤ 1.05× unique keys", r, f"{fmt(r, '.2f')}×", r is not None and r <= 1.05)
        if get("f-50keys", "xargs-flock"):
            r = wall_ratio(rows, "f-50keys", "lanes-50keys", "xargs-flock")
            check("(f) 50 keys ≤ 0.7× flock under xargs", r, f"{fmt(r, '.2f')}×", r is not None and r <= 0.7)
    if get("f-sem-50keys", "xargs-sem"):
        n = get("f-sem-50keys", "xargs-sem")["jobs"]
        r = wall_ratio(rows, "f-sem-50keys", "lanes-50keys", "xargs-sem")
        check(f"(f) {n} jobs over 50 keys vs sem --id under xargs (no target)", r, f"{fmt(r, '.3f')}×", None)
    e = get("f-sleep-5keys", "lanes")
    if e:
        r = e["wall_median_s"] / 2.0
        check("(f) 200 × sleep 0.05 over 5 sorted keys ≤ 1.15× 2.0 s", r, f"{e['wall_median_s']:.2f} s = {r:.2f}×", r <= 1.15)
    if get("g-start", "lanes (empty input)") and get("g-start", "xargs -r (empty input)"):
        r = wall_ratio(rows, "g-start", "lanes (empty input)", "xargs -r (empty input)")
        check("(g) start-up (empty input) ≤ 2× xargs", r, f"{fmt(r, '.2f')}×", r is not None and r <= 2)
        r = wall_ratio(rows, "g-start", "lanes --version", "xargs -r (empty input)")
        check("(g) lanes --version ≤ 2× xargs on empty input", r, f"{fmt(r, '.2f')}×", r is not None and r <= 2)
    e = get("g-idle", "lanes")
    if e:
        m = e["maxrss_max_kib"] / MIB
        check("(g) idle peak RSS ≤ 8 MiB", m, f"{m:.1f} MiB", m <= 8)
    e = get("timeout", "lanes")
    if e:
        r = e["wall_median_s"] / 0.3
        check("timeouts ≤ 1.2× 0.3 s", r, f"{e['wall_median_s']:.3f} s = {r:.2f}×", r <= 1.2)
        check("timeouts: no process left", e["left_max"], f"{e['left_max']} left", e["left_max"] == 0)

    out.append("")
    out.append("## Targets\n")
    out.append("| target | figure | met |")
    out.append("|---|---|---|")
    for c in checks:
        met = "n/a" if c["met"] is None else ("yes" if c["met"] else "**no**")
        out.append(f"| {c['target']} | {c['figure']} | {met} |")
    print("\n".join(out))

    with open(out_json, "w") as f:
        json.dump({"machine": machine_lines, "results": summary, "targets": checks}, f, indent=1)


if __name__ == "__main__":
    main()
