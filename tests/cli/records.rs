//! Reports and event files of runs that `Report::parse` in `support` does not accept on
//! purpose: records with `superseded_by` or `batch` set (`--coalesce`, `--cancel-in-progress`,
//! `--batch-size`) and summaries with `skipped` (`--resume`). The records are decoded into the
//! same strict types, and the invariants that do not depend on those flags are checked here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use crate::support::*;

/// A whole report decoded without the "no superseded_by, no batch, no skipped" rule.
#[derive(Debug, Clone)]
pub struct Records {
    pub run: RunRecord,
    pub jobs: Vec<JobRecord>,
    pub summary: SummaryRecord,
}

impl Records {
    /// Decodes `text` (a complete report: run record, job records, summary) and checks that
    /// every line is a complete record, that each seq has one record and that the summary
    /// counts the records.
    pub fn parse(text: &str) -> Records {
        assert!(
            text.ends_with('\n'),
            "the report's last line is torn:\n{text}"
        );
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.len() >= 2, "a report has at least 2 lines:\n{text}");
        let run: RunRecord = serde_json::from_str(lines[0])
            .unwrap_or_else(|err| panic!("run record: {err}: {}", lines[0]));
        assert_eq!(run.kind, "run");
        let last = lines[lines.len() - 1];
        let summary: SummaryRecord =
            serde_json::from_str(last).unwrap_or_else(|err| panic!("summary: {err}: {last}"));
        assert_eq!(summary.kind, "summary");
        let mut jobs = Vec::new();
        let mut seqs = BTreeSet::new();
        let mut counts = BTreeMap::<String, u64>::new();
        for line in &lines[1..lines.len() - 1] {
            let value: Value =
                serde_json::from_str(line).unwrap_or_else(|err| panic!("not JSON ({err}): {line}"));
            let fields: BTreeSet<&str> = value
                .as_object()
                .unwrap_or_else(|| panic!("not an object: {line}"))
                .keys()
                .map(String::as_str)
                .collect();
            // `waits` is there when the job waited, and then not empty.
            let mut want: BTreeSet<&str> = JOB_FIELDS.iter().copied().collect();
            if value.get("waits").is_some() {
                assert!(
                    value["waits"].as_array().is_some_and(|w| !w.is_empty()),
                    "empty waits: {line}"
                );
                want.insert("waits");
            }
            assert_eq!(fields, want, "job record fields: {line}");
            let job: JobRecord =
                serde_json::from_value(value).unwrap_or_else(|err| panic!("{err}: {line}"));
            assert_eq!(job.kind, "job", "{line}");
            assert!(seqs.insert(job.seq), "seq {} has two records", job.seq);
            if job.started {
                assert!(job.started_at.is_some() && job.slot.is_some(), "{line}");
                assert!(job.start_ms() <= job.end_ms(), "{line}");
            } else {
                assert!(job.started_at.is_none() && job.slot.is_none(), "{line}");
            }
            parse_time(&job.ended_at).unwrap();
            *counts.entry(job.outcome.clone()).or_default() += 1;
            jobs.push(job);
        }
        let count = |outcome: &str| counts.get(outcome).copied().unwrap_or(0);
        assert_eq!(
            (
                summary.jobs,
                summary.succeeded,
                summary.failed,
                summary.interrupted,
                summary.rejected,
                summary.skipped
            ),
            (
                jobs.len() as u64,
                count("succeeded"),
                count("failed"),
                count("interrupted"),
                count("rejected"),
                count("skipped")
            ),
            "the summary counts the records:\n{text}"
        );
        Records { run, jobs, summary }
    }

    /// Reads and decodes the report at `path`.
    pub fn read(path: &Path) -> Records {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()));
        Records::parse(&text)
    }

    /// The record of job `seq`.
    pub fn job(&self, seq: u64) -> &JobRecord {
        self.jobs
            .iter()
            .find(|job| job.seq == seq)
            .unwrap_or_else(|| panic!("no record for seq {seq} in {:#?}", self.jobs))
    }

    /// The records of `key`, in seq order.
    pub fn by_key(&self, key: &str) -> Vec<&JobRecord> {
        let mut jobs: Vec<_> = self
            .jobs
            .iter()
            .filter(|job| job.key.as_deref() == Some(key))
            .collect();
        jobs.sort_by_key(|job| job.seq);
        jobs
    }
}

/// The events of an `--events` file written so far (complete lines only).
pub fn events(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let complete = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    complete
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|err| panic!("event ({err}): {line}"))
        })
        .collect()
}

/// Waits until the events file at `path` tells of a try that goes again (`ended` with `retry`
/// true): its job then waits out its retry delay. Panics after 10 s.
pub fn wait_for_a_retry(path: &Path) {
    assert!(
        wait_until(std::time::Duration::from_secs(10), || events(path)
            .iter()
            .any(|event| event["type"] == "ended" && event["retry"] == true)),
        "no try went again: {:?}",
        events(path)
    );
}

/// The events of `kind` (`queued`, `started`, `ended`).
pub fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|event| event["type"] == kind)
        .collect()
}

/// `field` of an event as an integer.
pub fn int(event: &Value, field: &str) -> u64 {
    event[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} of {event} is not an integer"))
}

/// Milliseconds since the epoch of an event's `at`.
pub fn at_ms(event: &Value) -> i64 {
    parse_time(event["at"].as_str().expect("at")).unwrap()
}

/// Asserts that no two started jobs of one key overlap in time, from the records alone.
pub fn assert_no_overlap_per_key(jobs: &[JobRecord]) {
    let mut by_key: BTreeMap<&str, Vec<&JobRecord>> = BTreeMap::new();
    for job in jobs.iter().filter(|job| job.started) {
        by_key
            .entry(job.key.as_deref().unwrap())
            .or_default()
            .push(job);
    }
    for (key, mut lane) in by_key {
        lane.sort_by_key(|job| (job.start_ms(), job.seq));
        for pair in lane.windows(2) {
            assert!(
                pair[1].start_ms() >= pair[0].end_ms(),
                "key {key:?}: seq {} ({} .. {}) and seq {} ({} .. {}) overlap",
                pair[0].seq,
                pair[0].start_ms(),
                pair[0].end_ms(),
                pair[1].seq,
                pair[1].start_ms(),
                pair[1].end_ms()
            );
        }
    }
}

/// The current time in milliseconds since the epoch (the clock the report's times use).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn a_retried_job_keeps_every_try_in_its_record() {
    // Try 1 exits 2, try 2 exits 1, try 3 succeeds.
    let out = Run::new()
        .args(["--retries", "2"])
        .stdin("k\texit $((3 - LANES_ATTEMPT))\n")
        .run();
    out.code(0);
    let job = out.job(1);
    assert_eq!((job.result(), job.attempts), (("succeeded", None), 3));
    let tries: Vec<(u32, &str, Option<&str>, Option<i32>)> = job
        .tries
        .iter()
        .map(|t| {
            (
                t.attempt,
                t.outcome.as_str(),
                t.reason.as_deref(),
                t.exit_code,
            )
        })
        .collect();
    assert_eq!(
        tries,
        [
            (1, "failed", Some("exit_status"), Some(2)),
            (2, "failed", Some("exit_status"), Some(1)),
            (3, "succeeded", None, Some(0)),
        ],
        "{job:?}"
    );
    // One after the other; the record's own times are the last try's.
    for pair in job.tries.windows(2) {
        let end = parse_time(&pair[0].ended_at).unwrap();
        let next = parse_time(pair[1].started_at.as_deref().unwrap()).unwrap();
        assert!(end <= next, "{job:?}");
    }
    assert_eq!(job.tries[2].started_at, job.started_at);
    assert_eq!(job.tries[2].duration_ms, job.duration_ms);
}

#[test]
fn a_stop_during_the_retry_delay_keeps_the_failed_try_and_its_exit_status() {
    let scratch = Scratch::new();
    let events = scratch.join("events.jsonl");
    let running = Run::new()
        .scratch(&scratch)
        .args(["--retries", "1", "--retry-delay", "30", "--events"])
        .arg(&events)
        .stdin("k\techo failing >&2; exit 7\n")
        .spawn();
    // The try has ended and its retry waits out the delay.
    let waiting = wait_until(std::time::Duration::from_secs(10), || {
        std::fs::read_to_string(&events).is_ok_and(|text| text.contains("\"retry\":true"))
    });
    running.signal(nix::sys::signal::Signal::SIGINT);
    let out = running.wait();
    assert!(waiting, "no retry was announced\n{}", out.dump());
    out.code(130);
    let job = out.job(1);
    assert_eq!(job.result(), ("interrupted", Some("shutdown")), "{job:?}");
    assert_eq!((job.attempts, job.exit_code), (1, Some(7)), "{job:?}");
    assert!(job.started && job.duration_ms.is_some(), "{job:?}");
    let tried = &job.tries[..];
    assert_eq!(tried.len(), 1, "{job:?}");
    assert_eq!(
        (
            tried[0].outcome.as_str(),
            tried[0].reason.as_deref(),
            tried[0].exit_code
        ),
        ("failed", Some("exit_status"), Some(7))
    );
    assert_eq!(tried[0].started_at, job.started_at);
    // The summary names the failed try's exit status and its stderr.
    assert!(out.stderr().contains("| failing"), "{}", out.dump());
    // In cgroup containment, its CPU time is the try's, as for any other record.
    let report = out.report.as_ref().expect("the report");
    if report.run.containment == "cgroup" {
        assert!(job.cpu_ms.is_some(), "{job:?}");
    }
}
