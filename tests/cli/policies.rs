//! SPEC §3.2–3.4, §3.6, §5.3: per-key policies (`--coalesce latest`, `--cancel-in-progress`),
//! `--on-full reject`, manifest `rank`, `--retries` and `--retry-delay`, `--fail-fast`,
//! `--sticky-slots` and the `--events` stream.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::Duration;

use serde_json::Value;

use crate::records::*;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(10);

/// A run whose report goes to `report` (decoded with [`Records`], which accepts
/// `superseded_by`).
fn run_to(scratch: &Scratch, report: &std::path::Path) -> Run {
    Run::new()
        .scratch(scratch)
        .no_report()
        .arg("--report")
        .arg(report)
}

#[test]
fn coalesce_latest_runs_the_first_and_the_newest_job_of_each_key() {
    let scratch = Scratch::new();
    let report = scratch.join("report.jsonl");
    let keys = ["k0", "k1", "k2"];
    let mut input = String::new();
    for i in 0..1000 {
        input.push_str(&format!(
            "{}\techo $LANES_SEQ >> \"$D/ran-$LANES_KEY\"; sleep 0.05\n",
            keys[i % 3]
        ));
    }
    let out = run_to(&scratch, &report)
        .args(["--coalesce", "latest", "-j", "3"])
        .stdin(input)
        .run();
    out.code(0);
    let records = Records::read(&report);
    let seqs: BTreeSet<u64> = records.jobs.iter().map(|job| job.seq).collect();
    assert_eq!(seqs, (1..=1000).collect(), "exactly one record per job");
    let mut first_ran = Vec::new();
    assert_eq!(records.summary.failed + records.summary.rejected, 0);
    for (k, key) in keys.iter().enumerate() {
        let key_seqs: Vec<u64> = (0..1000u64)
            .filter(|i| *i as usize % 3 == k)
            .map(|i| i + 1)
            .collect();
        let next: BTreeMap<u64, u64> = key_seqs.windows(2).map(|w| (w[0], w[1])).collect();
        let lane = records.by_key(key);
        assert_eq!(lane.len(), key_seqs.len());
        let mut ran = Vec::new();
        for job in &lane {
            match job.result() {
                ("succeeded", None) => {
                    assert!(job.started && job.superseded_by.is_none(), "{job:?}");
                    ran.push(job.seq);
                }
                ("interrupted", Some("superseded")) => {
                    assert!(!job.started, "a superseded job never started: {job:?}");
                    assert_eq!(job.attempts, 0, "{job:?}");
                    // Only the pending job is replaced, and it is replaced by the next job of
                    // its key to arrive.
                    assert_eq!(job.superseded_by, next.get(&job.seq).copied(), "{job:?}");
                }
                other => panic!("unexpected {other:?}: {job:?}"),
            }
        }
        assert_eq!(ran.last(), key_seqs.last(), "the last job of {key} ran");
        first_ran.push((key, ran.first().copied(), key_seqs[0]));
        let logged: Vec<u64> = scratch
            .lines(&format!("ran-{key}"))
            .iter()
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(logged, ran, "the jobs of {key} that ran, in order");
        // One running at a time, in seq order.
        let mut started: Vec<_> = lane.iter().filter(|job| job.started).collect();
        started.sort_by_key(|job| job.seq);
        for pair in started.windows(2) {
            assert!(
                pair[1].start_ms() >= pair[0].end_ms(),
                "{key}: seq {} started before seq {} ended",
                pair[1].seq,
                pair[0].seq
            );
        }
    }
    assert_eq!(
        records.summary.succeeded + records.summary.interrupted,
        1000
    );
    // Each key was idle with a free slot when its first job came: that job starts at once,
    // and is never the pending job a newer one replaces.
    for (key, ran, first) in first_ran {
        assert_eq!(
            ran,
            Some(first),
            "the first job of {key} ran (the first job of each key that ran is reported)"
        );
    }
}

/// `--cancel-in-progress`: a job waiting out its `--retry-delay` is in progress too; a newer
/// job of its key supersedes it at once (keeping its failed try), instead of waiting through
/// every retry (which also made the exit status depend on when the newer job came).
#[test]
fn cancel_in_progress_supersedes_a_job_waiting_for_its_retry() {
    let scratch = Scratch::new();
    let report = scratch.join("report.jsonl");
    let events_path = scratch.join("events.jsonl");
    let mut running = run_to(&scratch, &report)
        .args([
            "--cancel-in-progress",
            "--retries",
            "3",
            "--retry-delay",
            "60s",
            "--events",
        ])
        .arg(&events_path)
        .stdin_piped()
        .spawn();
    running
        .stdin()
        .write_all(b"a\ttouch \"$D/tried.$LANES_ATTEMPT\"; exit 5\n")
        .unwrap();
    running.stdin().flush().unwrap();
    // The newer job must come while the first waits out its delay, not while its try runs:
    // wait for the event that ends the first try and schedules its retry.
    assert!(
        wait_until(WAIT, || events(&events_path)
            .iter()
            .any(|e| e["type"] == "ended"
                && int(e, "seq") == 1
                && e["retry"] == true)),
        "the first try did not end with a retry: {:?}",
        events(&events_path)
    );
    assert!(scratch.exists("tried.1"));
    running
        .stdin()
        .write_all(b"a\ttouch \"$D/newer\"\n")
        .unwrap();
    running.stdin().flush().unwrap();
    scratch.wait_for("newer", WAIT);
    running.close_stdin();
    let out = running.wait();
    out.code(0);
    assert!(!scratch.exists("tried.2"), "the retry ran");
    let records = Records::read(&report);
    let old = records.job(1);
    assert_eq!(old.result(), ("interrupted", Some("superseded")), "{old:?}");
    assert_eq!(old.superseded_by, Some(2), "{old:?}");
    assert_eq!((old.attempts, old.tries.len()), (1, 1), "{old:?}");
    assert_eq!(old.exit_code, Some(5), "its try's exit status: {old:?}");
    assert_eq!(records.job(2).result(), ("succeeded", None));
}

#[test]
fn cancel_in_progress_interrupts_the_running_job_and_its_whole_tree() {
    let scratch = Scratch::new();
    let report = scratch.join("report.jsonl");
    let mut running = run_to(&scratch, &report)
        .args(["--cancel-in-progress", "--grace", "3", "-j", "3"])
        .stdin_piped()
        .spawn();
    let first = "sleep 30 & echo $! > \"$D/child1\"; echo $$ > \"$D/shell1\"; \
                 touch \"$D/up1\"; wait";
    let other = format!("touch \"$D/up-o\"; {}", await_file("release-o"));
    running
        .stdin()
        .write_all(format!("k\t{first}\no\t{other}\n").as_bytes())
        .unwrap();
    running.stdin().flush().unwrap();
    scratch.wait_for("up1", WAIT);
    scratch.wait_for("up-o", WAIT);
    let (shell, child) = (scratch.pid("shell1"), scratch.pid("child1"));
    running
        .stdin()
        .write_all(b"k\techo $$ > \"$D/ran3\"\n")
        .unwrap();
    running.stdin().flush().unwrap();
    scratch.wait_for("ran3", WAIT);
    // The running job of another key is not touched.
    let so_far = std::fs::read_to_string(&report).unwrap_or_default();
    assert!(
        !so_far.contains("\"seq\":2,"),
        "the other key's job was stopped:\n{so_far}"
    );
    scratch.write("release-o", "");
    running.close_stdin();
    let out = running.wait();
    out.code(0);
    let records = Records::read(&report);
    let old = records.job(1);
    assert_eq!(old.result(), ("interrupted", Some("superseded")), "{old:?}");
    assert!(old.started, "{old:?}");
    assert_eq!(old.superseded_by, Some(3), "{old:?}");
    assert_eq!(old.signal.as_deref(), Some("SIGTERM"), "{old:?}");
    assert!(
        old.duration_ms.unwrap() < 3000,
        "stopped by SIGTERM, not after the grace: {old:?}"
    );
    let new = records.job(3);
    assert_eq!(new.result(), ("succeeded", None), "{new:?}");
    assert!(new.start_ms() >= old.end_ms(), "{old:?}\n{new:?}");
    assert_eq!(records.job(2).result(), ("succeeded", None));
    assert!(!alive(shell), "the superseded job's shell is gone");
    assert!(
        !alive(child),
        "the superseded job's background child is gone"
    );
}

#[test]
fn on_full_reject_records_queue_full_and_runs_the_rest() {
    let scratch = Scratch::new();
    let run = Run::new()
        .scratch(&scratch)
        .args(["-j", "1", "--max-queued", "2", "--on-full", "reject"])
        .stdin_piped();
    let mut running = run.spawn();
    running
        .stdin()
        .write_all(format!("a\ttouch \"$D/up\"; {}\n", await_file("release")).as_bytes())
        .unwrap();
    running.stdin().flush().unwrap();
    scratch.wait_for("up", WAIT);
    // One running; two fit in the queue (one of the running key, one of another); the
    // other three are rejected, whatever their key.
    running
        .stdin()
        .write_all(
            b"a\techo 2 >> \"$D/ran\"\nb\techo 3 >> \"$D/ran\"\na\techo 4 >> \"$D/ran\"\n\
              c\techo 5 >> \"$D/ran\"\nb\techo 6 >> \"$D/ran\"\n",
        )
        .unwrap();
    running.stdin().flush().unwrap();
    assert!(
        wait_until(WAIT, || running
            .report_so_far()
            .matches("queue_full")
            .count()
            == 3),
        "three queue_full records:\n{}",
        running.report_so_far()
    );
    scratch.write("release", "");
    running.close_stdin();
    let out = running.wait();
    out.code(1);
    for seq in [1, 2, 3] {
        assert_eq!(out.job(seq).result(), ("succeeded", None), "{}", out.dump());
    }
    for seq in [4, 5, 6] {
        let job = out.job(seq);
        assert_eq!(job.result(), ("rejected", Some("queue_full")), "{job:?}");
        assert!(!job.started && job.attempts == 0, "{job:?}");
    }
    let mut ran = scratch.lines("ran");
    ran.sort();
    assert_eq!(ran, ["2", "3"], "rejected jobs never ran");
    let summary = &out.report().summary;
    assert_eq!((summary.succeeded, summary.rejected), (3, 3));
}

#[test]
fn manifest_rank_orders_each_lane_independently() {
    let scratch = Scratch::new();
    let job = |key: &str, name: &str, rank: Option<i64>| {
        let rank = rank.map(|r| format!("rank = {r}\n")).unwrap_or_default();
        format!(
            "[[job]]\nkey = \"{key}\"\ncmd = 'echo {name} >> \"$D/order-{key}\"; sleep 0.02'\n{rank}\n"
        )
    };
    let text = [
        job("db", "db-r2", Some(2)),
        job("web", "web-r1", Some(1)),
        job("db", "db-r0a", None),
        job("web", "web-rm9", Some(-9)),
        job("db", "db-rm1", Some(-1)),
        job("db", "db-r0b", Some(0)),
        job("web", "web-r1b", Some(1)),
        job("db", "db-r1", Some(1)),
    ]
    .concat();
    let manifest = scratch.write("release.toml", text);
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "2"])
        .arg(&manifest)
        .run();
    out.code(0);
    assert_eq!(
        scratch.lines("order-db"),
        ["db-rm1", "db-r0a", "db-r0b", "db-r1", "db-r2"],
        "{}",
        out.dump()
    );
    assert_eq!(
        scratch.lines("order-web"),
        ["web-rm9", "web-r1", "web-r1b"],
        "{}",
        out.dump()
    );
    // The records agree, and seq stays the file order.
    for (key, order) in [("db", vec![5, 3, 6, 8, 1]), ("web", vec![4, 2, 7])] {
        for pair in order.windows(2) {
            let (before, after) = (out.job(pair[0]), out.job(pair[1]));
            assert_eq!(before.key.as_deref(), Some(key));
            assert!(after.start_ms() >= before.end_ms(), "{before:?}\n{after:?}");
        }
    }
}

/// A job that fails on its first two tries and succeeds on the third (a counter file per
/// key), logging its attempt number.
const FLAKY: &str = "echo \"try $LANES_ATTEMPT\" >> \"$D/log-$LANES_KEY\"; \
    n=$(cat \"$D/count-$LANES_KEY\" 2>/dev/null || echo 0); n=$((n+1)); \
    echo $n > \"$D/count-$LANES_KEY\"; [ $n -ge 3 ] || exit 7";

#[test]
fn retries_rerun_a_failed_job_first_in_its_lane() {
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .args(["--retries", "2", "-j", "3"])
        .stdin(format!(
            "k\t{FLAKY}\nk\techo next >> \"$D/log-k\"\nother\techo other >> \"$D/log-other\"\n"
        ))
        .run();
    out.code(0);
    assert_eq!(
        scratch.lines("log-k"),
        ["try 1", "try 2", "try 3", "next"],
        "the retries come before the key's next job\n{}",
        out.dump()
    );
    let flaky = out.job(1);
    assert_eq!(flaky.result(), ("succeeded", None), "{flaky:?}");
    assert_eq!(flaky.attempts, 3, "{flaky:?}");
    let next = out.job(2);
    assert_eq!(next.attempts, 1);
    assert!(
        next.start_ms() >= flaky.end_ms(),
        "the key's next job started after the retried one ended: {flaky:?}\n{next:?}"
    );
    assert_eq!(out.job(3).result(), ("succeeded", None));
}

#[test]
fn a_job_failing_every_try_is_failed_and_interrupted_jobs_are_not_retried() {
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .args([
            "--retries",
            "2",
            "--timeout",
            "0.3",
            "--grace",
            "1",
            "-j",
            "2",
        ])
        .stdin(
            "f\techo $LANES_ATTEMPT >> \"$D/tries-f\"; exit 4\n\
             t\techo $LANES_ATTEMPT >> \"$D/tries-t\"; sleep 10\n",
        )
        .run();
    out.code(1);
    let failed = out.job(1);
    assert_eq!(
        failed.result(),
        ("failed", Some("exit_status")),
        "{failed:?}"
    );
    assert_eq!(
        (failed.attempts, failed.exit_code),
        (3, Some(4)),
        "{failed:?}"
    );
    assert_eq!(scratch.lines("tries-f"), ["1", "2", "3"]);
    let timed_out = out.job(2);
    assert_eq!(timed_out.result(), ("interrupted", Some("timeout")));
    assert_eq!(timed_out.attempts, 1, "{timed_out:?}");
    assert_eq!(
        scratch.lines("tries-t"),
        ["1"],
        "a timed-out job is not retried"
    );
}

#[test]
fn retry_delay_is_respected_between_tries() {
    let scratch = Scratch::new();
    let job = format!(
        "date +%s%N >> \"$D/starts\"; {FLAKY_BODY}; r=$?; date +%s%N >> \"$D/ends\"; exit $r",
        FLAKY_BODY = "( n=$(cat \"$D/count\" 2>/dev/null || echo 0); n=$((n+1)); \
                      echo $n > \"$D/count\"; [ $n -ge 3 ] )"
    );
    let out = Run::new()
        .scratch(&scratch)
        .args(["--retries", "2", "--retry-delay", "300ms"])
        .stdin(format!("k\t{job}\n"))
        .run();
    out.code(0);
    assert_eq!(out.job(1).attempts, 3);
    let nanos = |name: &str| -> Vec<i128> {
        scratch
            .lines(name)
            .iter()
            .map(|l| l.trim().parse().unwrap())
            .collect()
    };
    let (starts, ends) = (nanos("starts"), nanos("ends"));
    assert_eq!((starts.len(), ends.len()), (3, 3));
    for i in 0..2 {
        let gap_ms = (starts[i + 1] - ends[i]) / 1_000_000;
        assert!(
            (300..2000).contains(&gap_ms),
            "try {} started {gap_ms} ms after try {} ended (delay 300ms)",
            i + 2,
            i + 1
        );
    }
}

#[test]
fn fail_fast_interrupts_running_and_waiting_jobs() {
    let scratch = Scratch::new();
    let events = scratch.join("events.jsonl");
    let mut running = Run::new()
        .scratch(&scratch)
        .args(["--fail-fast", "-j", "2", "--grace", "2", "--events"])
        .arg(&events)
        .stdin_piped()
        .spawn();
    let input = format!(
        "a\techo $$ > \"$D/pid1\"; touch \"$D/up1\"; sleep 30\n\
         b\t{}; exit 3\n\
         a\ttouch \"$D/ran3\"\n\
         c\ttouch \"$D/ran4\"\n",
        await_file("go")
    );
    running.stdin().write_all(input.as_bytes()).unwrap();
    running.stdin().flush().unwrap();
    scratch.wait_for("up1", WAIT);
    assert!(
        wait_until(WAIT, || of_kind(&crate::records::events(&events), "queued")
            .len()
            == 4),
        "four jobs queued"
    );
    scratch.write("go", "");
    // Stdin stays open: lanes stops reading it after the failure.
    let out = running.wait();
    out.code(1);
    let failed = out.job(2);
    assert_eq!(
        failed.result(),
        ("failed", Some("exit_status")),
        "{failed:?}"
    );
    let stopped = out.job(1);
    assert_eq!(
        stopped.result(),
        ("interrupted", Some("fail_fast")),
        "{stopped:?}"
    );
    assert!(stopped.started);
    for seq in [3, 4] {
        let job = out.job(seq);
        assert_eq!(job.result(), ("interrupted", Some("fail_fast")), "{job:?}");
        assert!(!job.started, "{job:?}");
    }
    assert!(!scratch.exists("ran3") && !scratch.exists("ran4"));
    assert!(!alive(scratch.pid("pid1")));
    assert!(out.elapsed < Duration::from_secs(15), "{:?}", out.elapsed);
}

#[test]
fn fail_fast_with_a_file_gives_every_line_a_record() {
    const LINES: u64 = 2000;
    let scratch = Scratch::new();
    let mut input = String::from("a\texit 1\n");
    for i in 2..=LINES {
        input.push_str(&format!("k{}\ttouch \"$D/ran-$LANES_SEQ\"\n", i % 7));
    }
    let file = scratch.write("jobs.tsv", input);
    let out = Run::new()
        .scratch(&scratch)
        .args(["--fail-fast", "-j", "1", "--max-queued", "50"])
        .arg(&file)
        .run();
    out.code(1);
    let report = out.report();
    let seqs: BTreeSet<u64> = report.jobs.iter().map(|job| job.seq).collect();
    assert_eq!(seqs, (1..=LINES).collect(), "every line has a record");
    assert_eq!(out.job(1).result(), ("failed", Some("exit_status")));
    for job in report.jobs.iter().filter(|job| job.seq > 1) {
        // One slot: nothing runs beside the failing job, nothing after it.
        assert_eq!(job.result(), ("interrupted", Some("fail_fast")), "{job:?}");
        assert!(!job.started, "{job:?}");
        assert!(!scratch.exists(&format!("ran-{}", job.seq)), "{job:?}");
    }
    assert_eq!(report.summary.interrupted, LINES - 1);
}

#[test]
fn sticky_slots_keep_each_key_in_one_slot() {
    let scratch = Scratch::new();
    let keys = ["a", "b", "c", "d", "e", "f"];
    let mut input = String::new();
    for i in 0..36usize {
        input.push_str(&format!(
            "{}\techo \"$LANES_KEY $LANES_SLOT\" >> \"$D/slots\"; sleep 0.0{}\n",
            keys[(i * 5) % 6],
            i % 7
        ));
    }
    let out = Run::new()
        .scratch(&scratch)
        .args(["--sticky-slots", "-j", "3"])
        .stdin(input)
        .run();
    out.code(0);
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in scratch.lines("slots") {
        let (key, slot) = line.split_once(' ').unwrap();
        seen.entry(key.into()).or_default().insert(slot.into());
    }
    assert_eq!(seen.len(), 6);
    for (key, slots) in &seen {
        assert_eq!(slots.len(), 1, "key {key} ran in slots {slots:?}");
        let slot: u32 = slots.iter().next().unwrap().parse().unwrap();
        for job in out.report().by_key(key) {
            assert_eq!(job.slot, Some(slot), "{job:?}");
        }
    }
}

#[test]
fn a_sticky_key_waits_for_its_slot_while_another_is_free() {
    let scratch = Scratch::new();
    let mut running = Run::new()
        .scratch(&scratch)
        .args(["--sticky-slots", "-j", "2"])
        .stdin_piped()
        .spawn();
    let send = |running: &mut Running, text: &str| {
        running.stdin().write_all(text.as_bytes()).unwrap();
        running.stdin().flush().unwrap();
    };
    // x binds slot 1 and ends; y then binds slot 1 and stays.
    send(&mut running, "x\ttrue\n");
    assert!(wait_until(WAIT, || running
        .report_so_far()
        .contains("\"seq\":1,")));
    send(
        &mut running,
        &format!("y\ttouch \"$D/up-y\"; {}\n", await_file("release")),
    );
    scratch.wait_for("up-y", WAIT);
    // x's next job must wait for slot 1; z, behind it in line, takes the free slot 2.
    send(&mut running, "x\ttouch \"$D/ran-x\"\nz\ttrue\n");
    assert!(wait_until(WAIT, || running
        .report_so_far()
        .contains("\"seq\":4,")));
    assert!(
        !scratch.exists("ran-x"),
        "x ran in another slot than its own:\n{}",
        running.report_so_far()
    );
    scratch.write("release", "");
    running.close_stdin();
    let out = running.wait();
    out.code(0);
    let slots: Vec<Option<u32>> = (1..=4).map(|seq| out.job(seq).slot).collect();
    assert_eq!(
        slots,
        [Some(1), Some(1), Some(1), Some(2)],
        "{}",
        out.dump()
    );
    assert!(out.job(3).start_ms() >= out.job(2).end_ms());
}

/// The events of one job, in file order.
fn events_of(events: &[Value], seq: u64) -> Vec<&Value> {
    events.iter().filter(|e| int(e, "seq") == seq).collect()
}

/// The `waiting` events of each job tell exactly the causes its record's `waits` show, with
/// the same `behind` and the same start, in a busy run of short jobs where causes change
/// within a millisecond, and in batches (each member's own wait).
#[test]
fn waiting_events_tell_each_job_what_its_record_shows() {
    // Keys in a scrambled order (a linear congruential sequence), so that jobs of a key
    // often wait behind one another and then for a slot.
    let keys = "abcdefgh";
    let mut x: u64 = 12345;
    let input: String = (0..1000)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = (x >> 61) as usize;
            format!("{}\ttrue\n", &keys[k..=k])
        })
        .collect();
    let batched = [
        "--command",
        "{}",
        "--batch-size",
        "4",
        "--batch-delay",
        "2ms",
    ];
    for args in [&["-j", "3"][..], &[&["-j", "2"][..], &batched[..]].concat()] {
        let scratch = Scratch::new();
        let events_path = scratch.join("events.jsonl");
        let report_path = scratch.join("report.jsonl");
        let out = Run::new()
            .scratch(&scratch)
            .no_report()
            .args(args)
            .args(["--output", "none", "--events"])
            .arg(&events_path)
            .arg("--report")
            .arg(&report_path)
            .stdin(input.as_str())
            .run();
        out.code(0);
        let all = events(&events_path);
        let mut told: BTreeMap<u64, Vec<(String, Option<u64>, String)>> = BTreeMap::new();
        for event in of_kind(&all, "waiting") {
            told.entry(int(event, "seq")).or_default().push((
                event["cause"].as_str().unwrap().to_owned(),
                event.get("behind").and_then(Value::as_u64),
                event["at"].as_str().unwrap().to_owned(),
            ));
        }
        // Read as plain JSON: the batched run's records have `batch` set.
        let jobs: Vec<Value> = events(&report_path)
            .into_iter()
            .filter(|record| record["type"] == "job")
            .collect();
        assert_eq!(jobs.len(), 1000);
        for job in &jobs {
            let shown: Vec<(String, Option<u64>, String)> = job
                .get("waits")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|w| {
                    (
                        w["cause"].as_str().unwrap().to_owned(),
                        w.get("behind").and_then(Value::as_u64),
                        w["started_at"].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            let seq = int(job, "seq");
            assert_eq!(
                told.remove(&seq).unwrap_or_default(),
                shown,
                "{args:?}: job {seq}"
            );
        }
        assert!(told.is_empty(), "{args:?}: {told:?}");
    }
}

#[test]
fn events_tell_queued_with_ahead_started_and_ended() {
    let scratch = Scratch::new();
    let events_path = scratch.join("events.jsonl");
    let mut running = Run::new()
        .scratch(&scratch)
        .args(["-j", "1", "--events"])
        .arg(&events_path)
        .stdin_piped()
        .spawn();
    running
        .stdin()
        .write_all(format!("a\ttouch \"$D/up\"; {}\n", await_file("go")).as_bytes())
        .unwrap();
    running.stdin().flush().unwrap();
    scratch.wait_for("up", WAIT);
    running
        .stdin()
        .write_all(b"a\ttrue\nb\ttrue\na\ttrue\nb\ttrue\na\ttrue\n")
        .unwrap();
    running.stdin().flush().unwrap();
    assert!(wait_until(WAIT, || of_kind(
        &events(&events_path),
        "queued"
    )
    .len()
        == 6));
    scratch.write("go", "");
    running.close_stdin();
    let out = running.wait();
    out.code(0);
    let all = events(&events_path);
    let ahead: BTreeMap<u64, u64> = of_kind(&all, "queued")
        .iter()
        .map(|e| (int(e, "seq"), int(e, "ahead")))
        .collect();
    // Lane a: 1 (alone), then 2, 4, 6 behind it; lane b: 3, then 5.
    let want: BTreeMap<u64, u64> = [(1, 0), (2, 1), (4, 2), (6, 3), (3, 0), (5, 1)]
        .into_iter()
        .collect();
    assert_eq!(ahead, want, "queued events' ahead");
    // The lane really ran in that order.
    let started: Vec<u64> = of_kind(&all, "started")
        .iter()
        .filter(|e| e["key"] == "a")
        .map(|e| int(e, "seq"))
        .collect();
    assert_eq!(started, [1, 2, 4, 6]);
    // Why each waited first: the key busy (behind the job just ahead in its lane), or the
    // one slot taken. Job 1 started at once: it waited for nothing and is told no cause.
    let first_cause: BTreeMap<u64, (String, Option<u64>)> = [
        (2, ("key_busy", Some(1))),
        (3, ("cap", None)),
        (4, ("key_busy", Some(2))),
        (5, ("key_busy", Some(3))),
        (6, ("key_busy", Some(4))),
    ]
    .into_iter()
    .map(|(seq, (cause, behind))| (seq, (cause.to_owned(), behind)))
    .collect();
    for seq in 1..=6 {
        let with_waits = events_of(&all, seq);
        let kinds: Vec<&str> = with_waits
            .iter()
            .map(|e| e["type"].as_str().unwrap())
            .collect();
        if seq == 1 {
            assert_eq!(kinds, ["queued", "started", "ended"], "events of seq 1");
        } else {
            assert_eq!(kinds[..2], ["queued", "waiting"], "events of seq {seq}");
            let first = with_waits[1];
            assert_eq!(
                (
                    first["cause"].as_str().unwrap().to_owned(),
                    first.get("behind").map(|b| b.as_u64().unwrap())
                ),
                first_cause[&seq],
                "{first}"
            );
        }
        let mine: Vec<&Value> = with_waits
            .into_iter()
            .filter(|e| e["type"] != "waiting")
            .collect();
        let kinds: Vec<&str> = mine.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["queued", "started", "ended"], "events of seq {seq}");
        let key = out.job(seq).key.clone().unwrap();
        for event in &mine {
            assert_eq!(event["key"], key.as_str(), "{event}");
        }
        assert_eq!((int(mine[1], "slot"), int(mine[1], "attempt")), (1, 1));
        assert_eq!(mine[2]["outcome"], "succeeded");
        assert_eq!(mine[2]["reason"], Value::Null);
        assert_eq!(mine[2]["retry"], false);
        assert_eq!(int(mine[2], "attempt"), 1);
        let times: Vec<i64> = mine.iter().map(|e| at_ms(e)).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        assert!(at_ms(mine[1]) <= out.job(seq).start_ms() + 5);
    }
}

#[test]
fn events_mark_the_tries_that_are_retried() {
    let scratch = Scratch::new();
    let events_path = scratch.join("events.jsonl");
    let out = Run::new()
        .scratch(&scratch)
        .args(["--retries", "2", "-j", "2", "--events"])
        .arg(&events_path)
        .stdin(format!("k\t{FLAKY}\nf\texit 5\n"))
        .run();
    out.code(1);
    let all = events(&events_path);
    for (seq, outcomes) in [
        (1, ["failed", "failed", "succeeded"]),
        (2, ["failed", "failed", "failed"]),
    ] {
        let with_waits = events_of(&all, seq);
        let kinds: Vec<&str> = with_waits
            .iter()
            .map(|e| e["type"].as_str().unwrap())
            .collect();
        // Two keys, two slots, no retry delay: a try waits for nothing but the event loop's
        // next round; a `waiting` event tells of it only when that lasted a millisecond (a
        // loaded machine), as the record's `waits` do for the last try.
        let last_waited = kinds
            .iter()
            .rev()
            .skip_while(|&&k| k != "started")
            .nth(1)
            .is_some_and(|&k| k == "waiting");
        assert_eq!(
            last_waited,
            !out.job(seq).waits.is_empty(),
            "events of seq {seq}: {with_waits:?}"
        );
        let mine: Vec<&Value> = with_waits
            .into_iter()
            .filter(|e| e["type"] != "waiting")
            .collect();
        let kinds: Vec<&str> = mine.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            ["queued", "started", "ended", "started", "ended", "started", "ended"],
            "events of seq {seq}: {mine:?}"
        );
        for attempt in 1..=3u64 {
            let started = mine[2 * attempt as usize - 1];
            let ended = mine[2 * attempt as usize];
            assert_eq!(int(started, "attempt"), attempt, "{started}");
            assert_eq!(int(ended, "attempt"), attempt, "{ended}");
            assert_eq!(ended["outcome"], outcomes[attempt as usize - 1], "{ended}");
            assert_eq!(ended["retry"], attempt < 3, "{ended}");
        }
        assert_eq!(out.job(seq).attempts, 3);
    }
}

#[test]
fn every_job_gets_one_final_ended_event_with_its_key_as_in_its_record() {
    let scratch = Scratch::new();
    let events_path = scratch.join("events.jsonl");
    // An invalid line (no key), a job that fails, and a job that succeeds; then jobs that cannot
    // start at all (no such shell).
    let out = Run::new()
        .scratch(&scratch)
        .arg("--events")
        .arg(&events_path)
        .stdin("no tab here\nk\texit 3\nk\ttrue\n")
        .run();
    out.code(1);
    let spawn_events = scratch.join("spawn-events.jsonl");
    let failed_starts = Run::new()
        .scratch(&scratch)
        .args(["--shell", "/nonexistent/shell", "--events"])
        .arg(&spawn_events)
        .stdin("k\ttrue\n")
        .run();
    failed_starts.code(1);
    assert_eq!(
        failed_starts.job(1).result(),
        ("failed", Some("spawn_error"))
    );
    let spawn_ended = events(&spawn_events);
    assert_eq!(
        of_kind(&spawn_ended, "ended").len(),
        1,
        "a failed start ends once: {spawn_ended:?}"
    );
    let events = events(&events_path);
    let ended = of_kind(&events, "ended");
    for seq in 1..=3 {
        let finals: Vec<&&Value> = ended
            .iter()
            .filter(|e| int(e, "seq") == seq && e["retry"] == Value::Bool(false))
            .collect();
        assert_eq!(finals.len(), 1, "seq {seq}: {finals:?}");
        let key = &finals[0]["key"];
        match out.job(seq).key.as_deref() {
            Some(want) => assert_eq!(key, want, "seq {seq}"),
            None => assert!(key.is_null(), "seq {seq}: {key}"),
        }
    }
}

/// Jobs that come together with a slot free for each start at once: no `waiting` event tells
/// of a wait their records do not have (each job's `cap`, given as its key became ready, is
/// not told when the job starts within a millisecond, though other jobs start between).
#[test]
fn jobs_that_start_at_once_are_told_no_wait() {
    let scratch = Scratch::new();
    let events_path = scratch.join("events.jsonl");
    let lines: String = (1..=6).map(|i| format!("k{i}\ttrue\n")).collect();
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "6", "--events"])
        .arg(&events_path)
        .stdin(lines)
        .run();
    out.code(0);
    let all = events(&events_path);
    assert_eq!(of_kind(&all, "started").len(), 6, "{all:?}");
    // Each job is told a cause exactly when its record shows a wait: one that lasted a
    // millisecond (only on a loaded machine here).
    for seq in 1..=6 {
        let told = events_of(&all, seq).iter().any(|e| e["type"] == "waiting");
        assert_eq!(
            told,
            !out.job(seq).waits.is_empty(),
            "seq {seq}: {:?}",
            events_of(&all, seq)
        );
    }
}

/// `--coalesce latest`: the waiting job a newer one replaces keeps its wait in its record
/// (`wait_ms` and `waits`), as a job stopped while waiting does.
#[test]
fn a_superseded_waiting_job_keeps_its_wait() {
    let scratch = Scratch::new();
    let report = scratch.join("report.jsonl");
    let mut running = run_to(&scratch, &report)
        .args(["--coalesce", "latest"])
        .stdin_piped()
        .spawn();
    let first = format!("a\ttouch \"$D/up\"; {}\na\ttrue\n", await_file("go"));
    running.stdin().write_all(first.as_bytes()).unwrap();
    running.stdin().flush().unwrap();
    scratch.wait_for("up", WAIT);
    std::thread::sleep(Duration::from_millis(50));
    running.stdin().write_all(b"a\ttrue\n").unwrap();
    running.stdin().flush().unwrap();
    // Superseded at once: its record is written while job 1 still runs.
    assert!(wait_until(WAIT, || std::fs::read_to_string(&report)
        .is_ok_and(|text| text.contains("\"seq\":2,"))));
    scratch.write("go", "");
    running.close_stdin();
    running.wait().code(0);
    let records = Records::read(&report);
    let old = records.job(2);
    assert_eq!(old.result(), ("interrupted", Some("superseded")), "{old:?}");
    let waited = old.wait_ms.expect("its wait is told");
    assert!(waited >= 50, "{old:?}");
    assert_eq!(
        old.waits.iter().map(|w| w.ms).sum::<u64>(),
        waited,
        "{old:?}"
    );
    assert_eq!(
        (old.waits[0].cause.as_str(), old.waits[0].behind),
        ("key_busy", Some(1)),
        "{old:?}"
    );
}

#[test]
fn a_retry_whose_delay_ran_out_with_slots_free_never_waited_for_the_cap() {
    // Four keys, each failing once, at -j 8: the cap is never reached. lanes wakes for each
    // delay's end a little after it; that moment is the delay's, not the cap's.
    four_keys_each_failing_once_wait_only_for_their_delay(&[]);
}

/// Four keys, each failing once, at -j 8 with `extra` flags: each retry waits for its delay
/// only, whatever moment lanes wakes for the delay's end.
fn four_keys_each_failing_once_wait_only_for_their_delay(extra: &[&str]) {
    let out = Run::new()
        .args(["-j", "8", "--retries", "1", "--retry-delay", "150ms"])
        .args(extra)
        .stdin("a\texit 1\nb\texit 1\nc\texit 1\nd\texit 1\n")
        .run();
    out.code(1);
    for seq in 1..=4 {
        let job = out.job(seq);
        assert_eq!(job.attempts, 2, "{}", out.dump());
        let causes: Vec<&str> = job.waits.iter().map(|w| w.cause.as_str()).collect();
        assert_eq!(causes, ["retry_delay"], "seq {seq}: {}", out.dump());
    }
}

#[test]
fn in_a_run_with_resources_a_retry_whose_delay_ran_out_with_its_needs_free_never_waited_for_the_cap(
) {
    // The same with named resources: each key needs one of four GPUs, never short.
    four_keys_each_failing_once_wait_only_for_their_delay(&[
        "--resource",
        "gpu=0,1,2,3",
        "--needs",
        "gpu=1",
    ]);
}

#[test]
fn a_burst_of_jobs_under_a_cap_never_reached_never_waited_for_the_cap() {
    // 60 keys read at once, -j 100: each job starts as lanes takes it in; the time lanes
    // spends starting the others is no wait for the cap.
    let input: String = (1..=60).map(|i| format!("k{i}\ttrue\n")).collect();
    let out = Run::new().args(["-j", "100"]).stdin(input).run();
    out.code(0);
    for seq in 1..=60 {
        let job = out.job(seq);
        assert!(
            job.waits.iter().all(|w| w.cause != "cap"),
            "seq {seq}: {:?}\n{}",
            job.waits,
            out.dump()
        );
    }
}

#[test]
fn a_retry_delay_without_retries_is_a_usage_error() {
    let scratch = Scratch::new();
    let run = |flags: &[&str]| {
        Run::new()
            .scratch(&scratch)
            .args(flags)
            .stdin("k\ttouch \"$D/ran\"\n")
            .run()
    };
    let out = run(&["--retry-delay", "1s"]);
    out.code(2);
    assert!(
        out.stderr().contains(
            "--retry-delay is the wait before a failed job's retry, but no job is retried here"
        ),
        "{}",
        out.dump()
    );
    assert!(!scratch.exists("ran"));
    run(&["--retry-delay", "1s", "--retries", "1"]).code(0);
    assert!(scratch.exists("ran"));
    // Zero is no delay, and asks for nothing.
    run(&["--retry-delay", "0"]).code(0);
}
