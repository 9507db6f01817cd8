//! SPEC §3.1: one job per key in flight, a key's jobs in order, the global cap, the FIFO
//! ready line (no starvation, no head-of-line blocking), and slots.

use std::collections::BTreeSet;
use std::io::Write;
use std::time::Duration;

use crate::support::*;

/// A job that detects another job of its key running at the same time (a lock directory
/// per key), and logs its seq to `$D/log-KEY`.
const EXCLUSIVE: &str =
    "mkdir \"$D/lock-$LANES_KEY\" || echo \"overlap $LANES_KEY $LANES_SEQ\" >> \"$D/errors\"; \
     echo $LANES_SEQ >> \"$D/log-$LANES_KEY\"; sleep 0.05; rmdir \"$D/lock-$LANES_KEY\"";

#[test]
fn a_lane_runs_one_job_at_a_time_in_input_order() {
    let scratch = Scratch::new();
    let keys = ["red", "green", "blue"];
    let mut input = String::new();
    let mut want: Vec<(String, Vec<u64>)> =
        keys.iter().map(|k| (k.to_string(), Vec::new())).collect();
    for i in 0..18u64 {
        let k = (i * 7 % 5 % 3) as usize;
        input.push_str(&format!("{}\t{EXCLUSIVE}\n", keys[k]));
        want[k].1.push(i + 1);
    }
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "3"])
        .stdin(input)
        .run();
    out.code(0);
    assert!(
        !scratch.exists("errors"),
        "jobs of one key overlapped: {}",
        scratch.read("errors")
    );
    let report = out.report();
    for (key, seqs) in &want {
        let log: Vec<u64> = scratch
            .lines(&format!("log-{key}"))
            .iter()
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(&log, seqs, "order of lane {key}");
        let jobs = report.by_key(key);
        for pair in jobs.windows(2) {
            assert!(
                pair[1].start_ms() >= pair[0].end_ms(),
                "lane {key}: seq {} started before seq {} ended",
                pair[1].seq,
                pair[0].seq
            );
        }
    }
}

#[test]
fn the_cap_is_never_exceeded_and_is_reached_with_unique_slots() {
    let scratch = Scratch::new();
    scratch.mkdir("running");
    // Each job counts the jobs running with it and claims its slot; the first three wait
    // until three run at once (only possible if the cap of 3 is used).
    let count = "mkdir \"$D/running/$LANES_SEQ\"; \
        mkdir \"$D/slot-$LANES_SLOT\" || echo \"slot $LANES_SLOT twice\" >> \"$D/errors\"; \
        echo $LANES_SLOT > \"$D/seen-slot-$LANES_SEQ\"; \
        ls \"$D/running\" | wc -l >> \"$D/counts\"";
    let release = "sleep 0.1; rmdir \"$D/slot-$LANES_SLOT\"; rmdir \"$D/running/$LANES_SEQ\"";
    let fill = "n=0; until [ $(ls \"$D/running\" | wc -l) -ge 3 ]; do n=$((n+1)); \
        if [ $n -gt 500 ]; then echo 'never 3 at once' >&2; exit 97; fi; sleep 0.02; done";
    let mut input = String::new();
    for i in 1..=12 {
        let wait = if i <= 3 { fill } else { "true" };
        input.push_str(&format!("key{i}\t{count}; {wait}; {release}\n"));
    }
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "3"])
        .stdin(input)
        .run();
    out.code(0);
    assert!(!scratch.exists("errors"), "{}", scratch.read("errors"));
    let counts: Vec<usize> = scratch
        .lines("counts")
        .iter()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 12);
    assert!(
        counts.iter().all(|&c| c <= 3),
        "more than 3 jobs at once: {counts:?}"
    );
    for job in &out.report().jobs {
        let seen: u32 = scratch
            .read(&format!("seen-slot-{}", job.seq))
            .trim()
            .parse()
            .unwrap();
        assert_eq!(job.slot, Some(seen), "{job:?}");
        assert!((1..=3).contains(&seen));
    }
}

#[test]
fn the_cap_holds_when_the_report_says_so_too() {
    // From the records alone: at no instant are more than 2 jobs between start and end.
    let mut input = String::new();
    for i in 0..8 {
        input.push_str(&format!("k{i}\tsleep 0.15\n"));
    }
    let out = Run::new().args(["-j", "2"]).stdin(input).run();
    out.code(0);
    let jobs = &out.report().jobs;
    for job in jobs {
        let t = job.start_ms();
        // Jobs that started strictly before `t` and ended strictly after it.
        let overlapping = jobs
            .iter()
            .filter(|o| o.seq != job.seq && o.start_ms() <= t && o.end_ms() > t)
            .count();
        assert!(
            overlapping < 2,
            "seq {} started with {overlapping} others",
            job.seq
        );
    }
}

#[test]
fn a_busy_key_does_not_starve_another() {
    // One slot. "busy" has six jobs queued before "other" has its only one: the ready line is
    // first come, first served, so "other" runs right after busy's first job.
    let scratch = Scratch::new();
    let mut input = String::new();
    for _ in 0..6 {
        input.push_str("busy\techo busy-$LANES_SEQ >> \"$D/order\"; sleep 0.2\n");
    }
    input.push_str("other\techo other >> \"$D/order\"\n");
    let jobs = scratch.write("jobs.txt", input);
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "1"])
        .arg(&jobs)
        .run();
    out.code(0);
    let order = scratch.lines("order");
    assert_eq!(
        order.iter().position(|l| l == "other"),
        Some(1),
        "start order {order:?}"
    );
}

#[test]
fn busy_lanes_take_turns() {
    let scratch = Scratch::new();
    let mut input = String::new();
    for key in ["a", "b"] {
        for _ in 0..4 {
            input.push_str(&format!(
                "{key}\techo $LANES_KEY >> \"$D/order\"; sleep 0.1\n"
            ));
        }
    }
    let jobs = scratch.write("jobs.txt", input);
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "1"])
        .stdin_file(&jobs)
        .run();
    out.code(0);
    assert_eq!(
        scratch.lines("order"),
        ["a", "b", "a", "b", "a", "b", "a", "b"]
    );
}

#[test]
fn a_busy_key_never_blocks_another_key() {
    // Key a's first job waits until key b's last job has run; a's later jobs sit in the
    // input before all of b's. Any head-of-line blocking deadlocks (and job a gives up).
    let scratch = Scratch::new();
    let input = format!(
        "a\t{}\na\techo a2\na\techo a3\nb\techo b1\nb\techo b2\nb\ttouch \"$D/b-done\"\n",
        await_file("b-done")
    );
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "2"])
        .stdin(input)
        .run();
    out.code(0);
    assert_eq!(out.report().summary.succeeded, 6);
}

#[test]
fn a_job_gets_the_smallest_free_slot() {
    // a, b, c take slots 1, 2, 3; b and c end while a runs; d then gets slot 2.
    let scratch = Scratch::new();
    let mut running = Run::new()
        .scratch(&scratch)
        .args(["-j", "3"])
        .stdin_piped()
        .spawn();
    let first = format!(
        "a\techo $LANES_SLOT > \"$D/slot-a\"; {}\nb\techo $LANES_SLOT > \"$D/slot-b\"\n\
         c\techo $LANES_SLOT > \"$D/slot-c\"\n",
        await_file("release")
    );
    running.stdin().write_all(first.as_bytes()).unwrap();
    running.stdin().flush().unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || {
            let text = running.report_so_far();
            text.contains("\"seq\":2,") && text.contains("\"seq\":3,")
        }),
        "jobs b and c did not end"
    );
    running
        .stdin()
        .write_all(b"d\techo $LANES_SLOT > \"$D/slot-d\"; touch \"$D/release\"\n")
        .unwrap();
    running.close_stdin();
    let out = running.wait();
    out.code(0);
    let slots: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|k| scratch.read(&format!("slot-{k}")).trim().to_owned())
        .collect();
    assert_eq!(slots, ["1", "2", "3", "2"]);
    assert_eq!(out.job(4).slot, Some(2));
}

#[test]
fn a_queued_job_waits_and_the_wait_is_recorded() {
    let out = Run::new()
        .args(["-j", "2"])
        .stdin("k\tsleep 0.4\nk\ttrue\nother\ttrue\n")
        .run();
    out.code(0);
    let (first, second, other) = (out.job(1), out.job(2), out.job(3));
    assert!(second.wait_ms.unwrap() >= 350, "{second:?}");
    assert!(second.start_ms() >= first.end_ms());
    assert!(other.wait_ms.unwrap() < 300, "{other:?}");
    let keys: BTreeSet<_> = out.report().jobs.iter().map(|j| j.slot).collect();
    assert!(keys.iter().all(|s| matches!(s, Some(1 | 2))));
}

#[test]
fn many_keys_many_jobs_all_run_exactly_once() {
    let scratch = Scratch::new();
    let mut input = Vec::new();
    for i in 0..200 {
        writeln!(input, "k{}\techo $LANES_SEQ >> \"$D/ran\"", i % 13).unwrap();
    }
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "4"])
        .stdin(input)
        .run();
    out.code(0);
    let mut ran: Vec<u64> = scratch
        .lines("ran")
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
    ran.sort_unstable();
    assert_eq!(ran, (1..=200).collect::<Vec<u64>>());
    assert_eq!(out.report().summary.succeeded, 200);
}
