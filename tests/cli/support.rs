//! The harness: a builder that runs the real `lanes` binary, test-local report types decoded
//! strictly (a schema change fails the suite), the invariants every report must hold, and
//! helpers for processes and files.
//!
//! Every run is tagged with a unique `LANES_IT_TAG` environment variable, which lanes passes to
//! its jobs. After lanes exits, any live process still carrying the tag is a process left
//! behind: the run fails (and the leftovers are killed, by pid).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::Deserialize;
use serde_json::Value;
use tempfile::TempDir;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_lanes");

/// The environment variable that marks every process of one run.
const TAG_VAR: &str = "LANES_IT_TAG";

/// How long a run may take before the harness kills it and fails the test.
const RUN_DEADLINE: Duration = Duration::from_secs(40);

// ---------------------------------------------------------------------------------------------
// Report records, decoded strictly.

/// The `run` record: the report's first line.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRecord {
    #[serde(rename = "type")]
    pub kind: String,
    pub version: String,
    pub schema: u64,
    pub started_at: String,
    /// The writing lanes' process id.
    pub pid: u64,
    pub max_concurrent: u64,
    pub source: String,
    /// The command template, as given (`null` without one).
    pub command: Option<String>,
    /// `--colsep`, when the template's column placeholders use it.
    #[serde(default)]
    pub colsep: Option<String>,
    pub containment: String,
}

/// One `job` record.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRecord {
    #[serde(rename = "type")]
    pub kind: String,
    pub seq: u64,
    pub line: u64,
    pub key: Option<String>,
    pub command: Option<String>,
    pub outcome: String,
    pub reason: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub started: bool,
    pub started_at: Option<String>,
    pub ended_at: String,
    pub duration_ms: Option<u64>,
    pub wait_ms: Option<u64>,
    pub attempts: u32,
    pub flaky: bool,
    pub slot: Option<u32>,
    pub leaked: bool,
    pub superseded_by: Option<u64>,
    pub batch: Option<u64>,
    pub error: Option<String>,
    pub cpu_ms: Option<u64>,
    pub memory_peak_bytes: Option<u64>,
    pub tries: Vec<TryRecord>,
    /// Absent when the job did not wait.
    #[serde(default)]
    pub waits: Vec<WaitRecord>,
    /// `--lock-dir` only.
    #[serde(default)]
    pub lock_wait_ms: Option<u64>,
    /// `--lock-dir` only.
    #[serde(default)]
    pub lock_holder: Option<LockHolder>,
    /// Only for a job that held a weight other than 1 or named resources.
    #[serde(default)]
    pub weight: Option<u32>,
    /// Only for a job that held named resources.
    #[serde(default)]
    pub resources: Option<std::collections::BTreeMap<String, Granted>>,
}

/// What a job held of one named resource.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Granted {
    pub amount: u64,
    #[serde(default)]
    pub units: Option<Vec<String>>,
}

/// One entry of a job record's `tries`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TryRecord {
    pub attempt: u32,
    pub outcome: String,
    pub reason: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<String>,
    pub slot: Option<u32>,
    pub started_at: Option<String>,
    pub ended_at: String,
    pub duration_ms: Option<u64>,
}

/// One entry of a job record's `waits`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitRecord {
    pub cause: String,
    #[serde(default)]
    pub behind: Option<u64>,
    /// Only for `resource`: the named resource the job was short of.
    #[serde(default)]
    pub resource: Option<String>,
    pub started_at: String,
    pub ms: u64,
}

/// Who held a key host-wide (`--lock-dir`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LockHolder {
    pub pid: u32,
    pub run: String,
    /// `--coordinate` only: the holder's `--host-id`.
    #[serde(default)]
    pub host: Option<String>,
}

/// The fields a `job` record has with `--lock-dir` only, both or neither.
const LOCK_FIELDS: &[&str] = &["lock_wait_ms", "lock_holder"];

/// The `summary` record: the report's last line.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SummaryRecord {
    #[serde(rename = "type")]
    pub kind: String,
    pub jobs: u64,
    pub succeeded: u64,
    pub flaky: u64,
    pub failed: u64,
    pub interrupted: u64,
    pub rejected: u64,
    pub skipped: u64,
    pub duration_ms: u64,
    pub exit_code: i32,
}

const RUN_FIELDS: &[&str] = &[
    "type",
    "version",
    "schema",
    "started_at",
    "pid",
    "max_concurrent",
    "source",
    "command",
    "containment",
];
/// The fields of a `job` record, exactly.
pub const JOB_FIELDS: &[&str] = &[
    "type",
    "seq",
    "line",
    "key",
    "command",
    "outcome",
    "reason",
    "exit_code",
    "signal",
    "started",
    "started_at",
    "ended_at",
    "duration_ms",
    "wait_ms",
    "attempts",
    "flaky",
    "slot",
    "leaked",
    "superseded_by",
    "batch",
    "error",
    "cpu_ms",
    "memory_peak_bytes",
    "tries",
];
const SUMMARY_FIELDS: &[&str] = &[
    "type",
    "jobs",
    "succeeded",
    "flaky",
    "failed",
    "interrupted",
    "rejected",
    "skipped",
    "duration_ms",
    "exit_code",
];

/// A whole report: run record, job records in the order written, summary.
#[derive(Debug, Clone)]
pub struct Report {
    pub run: RunRecord,
    pub jobs: Vec<JobRecord>,
    pub summary: SummaryRecord,
}

impl Report {
    /// Decodes a complete report and checks the invariants every report holds (see
    /// [`Report::check`]).
    pub fn parse(text: &str) -> Result<Report, String> {
        Report::parse_raised(text, None)
    }

    /// As [`Report::parse`], for a server whose cap `lanes set -j` raised to `cap` while it
    /// ran: its jobs' slots go up to `cap`, above the `run` record's `max_concurrent`.
    pub fn parse_raised(text: &str, cap: Option<u64>) -> Result<Report, String> {
        if text.is_empty() {
            return Err("the report is empty".into());
        }
        if !text.ends_with('\n') {
            return Err("the report's last line has no newline (torn)".into());
        }
        let lines: Vec<&str> = text.lines().collect();
        if lines.len() < 2 {
            return Err(format!(
                "a report has at least 2 lines, got {}",
                lines.len()
            ));
        }
        let run: RunRecord = decode(lines[0], "run", RUN_FIELDS)?;
        let summary: SummaryRecord = decode(lines[lines.len() - 1], "summary", SUMMARY_FIELDS)?;
        let jobs = lines[1..lines.len() - 1]
            .iter()
            .map(|line| decode::<JobRecord>(line, "job", JOB_FIELDS))
            .collect::<Result<Vec<_>, _>>()?;
        let report = Report { run, jobs, summary };
        report.check(cap)?;
        Ok(report)
    }

    /// Parses a report, panicking with the text on failure.
    pub fn must_parse(text: &str) -> Report {
        Report::parse(text).unwrap_or_else(|err| panic!("bad report: {err}\n---\n{text}---"))
    }

    /// The invariants of SPEC §5.2 that hold for every report; slots go up to `cap` when
    /// given, else to the run's `max_concurrent`.
    fn check(&self, cap: Option<u64>) -> Result<(), String> {
        let run_start = parse_time(&self.run.started_at)?;
        if self.run.version != env!("CARGO_PKG_VERSION") {
            return Err(format!("run version {:?}", self.run.version));
        }
        let mut seqs = BTreeSet::new();
        let mut counts = BTreeMap::<&str, u64>::new();
        for job in &self.jobs {
            check_job(job, cap.unwrap_or(self.run.max_concurrent), run_start)
                .map_err(|err| format!("job seq {}: {err}: {job:?}", job.seq))?;
            if !seqs.insert(job.seq) {
                return Err(format!("seq {} has two records", job.seq));
            }
            *counts.entry(job.outcome.as_str()).or_default() += 1;
        }
        let s = &self.summary;
        let count = |outcome: &str| counts.get(outcome).copied().unwrap_or(0);
        let want = (
            self.jobs.len() as u64,
            count("succeeded"),
            count("failed"),
            count("interrupted"),
            count("rejected"),
        );
        let got = (s.jobs, s.succeeded, s.failed, s.interrupted, s.rejected);
        if want != got {
            return Err(format!(
                "summary (jobs, succeeded, failed, interrupted, rejected) = {got:?}, records say {want:?}"
            ));
        }
        let flaky = self.jobs.iter().filter(|job| job.flaky).count() as u64;
        if s.flaky != flaky {
            return Err(format!("summary flaky = {}, records say {flaky}", s.flaky));
        }
        if s.skipped != 0 {
            return Err("skipped without --resume".into());
        }
        // The summary's duration covers every record: the run ends after its last job.
        let mut last_end = run_start;
        for job in &self.jobs {
            last_end = last_end.max(parse_time(&job.ended_at)?);
        }
        if (s.duration_ms as i64) < last_end - run_start {
            return Err(format!(
                "summary duration_ms {} is less than the last ended_at minus the run's started_at ({} ms)",
                s.duration_ms,
                last_end - run_start
            ));
        }
        Ok(())
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

impl JobRecord {
    /// `(outcome, reason)` as plain strings, for compact assertions.
    pub fn result(&self) -> (&str, Option<&str>) {
        (self.outcome.as_str(), self.reason.as_deref())
    }

    /// `started_at` in milliseconds since the epoch.
    pub fn start_ms(&self) -> i64 {
        parse_time(self.started_at.as_deref().expect("job started")).unwrap()
    }

    /// `ended_at` in milliseconds since the epoch.
    pub fn end_ms(&self) -> i64 {
        parse_time(&self.ended_at).unwrap()
    }
}

fn decode<T: for<'de> Deserialize<'de>>(
    line: &str,
    kind: &str,
    fields: &[&str],
) -> Result<T, String> {
    let value: Value =
        serde_json::from_str(line).map_err(|err| format!("not JSON ({err}): {line}"))?;
    let object = value
        .as_object()
        .ok_or_else(|| format!("not an object: {line}"))?;
    if object.get("type").and_then(Value::as_str) != Some(kind) {
        return Err(format!("expected a {kind:?} record: {line}"));
    }
    let got: BTreeSet<&str> = object.keys().map(String::as_str).collect();
    let mut want: BTreeSet<&str> = fields.iter().copied().collect();
    if kind == "job" && object.contains_key(LOCK_FIELDS[0]) {
        want.extend(LOCK_FIELDS);
    }
    // `colsep` only where the template's column placeholders split arguments.
    if kind == "run" && object.contains_key("colsep") {
        want.insert("colsep");
    }
    // A job that held a weight or named resources has `weight`, and `resources` if it held
    // any; a job that held neither has neither.
    if kind == "job" && object.contains_key("weight") {
        want.insert("weight");
        if object.contains_key("resources") {
            want.insert("resources");
        }
    }
    if kind == "job" && object.contains_key("waits") {
        if object["waits"].as_array().is_none_or(Vec::is_empty) {
            return Err(format!("waits present but empty: {line}"));
        }
        want.insert("waits");
    }
    if got != want {
        return Err(format!(
            "{kind} record fields differ: missing {:?}, unexpected {:?}: {line}",
            want.difference(&got).collect::<Vec<_>>(),
            got.difference(&want).collect::<Vec<_>>()
        ));
    }
    serde_json::from_value(value).map_err(|err| format!("{kind} record: {err}: {line}"))
}

fn check_job(job: &JobRecord, max_concurrent: u64, run_start: i64) -> Result<(), String> {
    if job.kind != "job" {
        return Err("not a job record".into());
    }
    if job.seq == 0 || job.line == 0 {
        return Err("seq and line are 1-based".into());
    }
    if job.line < job.seq {
        return Err("a job's line is never before its seq".into());
    }
    if job.flaky != (job.outcome == "succeeded" && job.attempts > 1) {
        return Err("flaky means succeeded after a failed try".into());
    }
    let reason = job.reason.as_deref();
    match job.outcome.as_str() {
        "succeeded" => {
            if reason.is_some() || job.exit_code != Some(0) || job.signal.is_some() || !job.started
            {
                return Err("succeeded means reason null, exit_code 0, no signal, started".into());
            }
        }
        "failed" => match reason {
            Some("exit_status") => {
                if !matches!(job.exit_code, Some(code) if code != 0) || job.signal.is_some() {
                    return Err("exit_status means a non-zero exit_code, no signal".into());
                }
            }
            Some("killed") => {
                if job.exit_code.is_some() || job.signal.is_none() {
                    return Err("killed means a signal and no exit_code".into());
                }
            }
            Some("spawn_error") => {
                if job.error.is_none() {
                    return Err("spawn_error without error".into());
                }
            }
            other => return Err(format!("failed with reason {other:?}")),
        },
        "interrupted" => {
            if !matches!(
                reason,
                Some(
                    "timeout"
                        | "shutdown"
                        | "fail_fast"
                        | "superseded"
                        | "cancelled"
                        | "server_lost"
                        | "lock_lost"
                )
            ) {
                return Err(format!("interrupted with reason {reason:?}"));
            }
        }
        "rejected" => {
            if !matches!(reason, Some("invalid_input" | "queue_full")) || job.started {
                return Err("rejected: invalid_input or queue_full, never started".into());
            }
            if reason == Some("invalid_input") && job.error.is_none() {
                return Err("invalid_input without error".into());
            }
        }
        other => return Err(format!("unknown outcome {other:?}")),
    }
    let ended = parse_time(&job.ended_at)?;
    if ended < run_start {
        return Err("ended before the run started".into());
    }
    let waited: u64 = job.waits.iter().map(|w| w.ms).sum();
    if waited != job.wait_ms.unwrap_or(0) {
        return Err(format!(
            "waits add up to {waited} ms, wait_ms is {:?}",
            job.wait_ms
        ));
    }
    for pair in job.waits.windows(2) {
        if (&pair[0].cause, pair[0].behind, &pair[0].resource)
            == (&pair[1].cause, pair[1].behind, &pair[1].resource)
        {
            return Err("two consecutive waits with one cause".into());
        }
    }
    for wait in &job.waits {
        const CAUSES: &[&str] = &[
            "key_busy",
            "cap",
            "lock",
            "shared_cap",
            "batch_delay",
            "retry_delay",
            "resource",
        ];
        if !CAUSES.contains(&wait.cause.as_str()) || wait.ms == 0 {
            return Err(format!("bad wait {wait:?}"));
        }
        if wait.behind.is_some() != (wait.cause == "key_busy") {
            return Err(format!("behind on a wait for {}", wait.cause));
        }
        if wait.resource.is_some() != (wait.cause == "resource") {
            return Err(format!("resource on a wait for {}", wait.cause));
        }
        if parse_time(&wait.started_at)? < run_start {
            return Err("a wait began before the run".into());
        }
    }
    if job.started {
        let started = parse_time(
            job.started_at
                .as_deref()
                .ok_or("started without started_at")?,
        )?;
        let duration = job.duration_ms.ok_or("started without duration_ms")?;
        if started < run_start || ended < started {
            return Err("started_at out of order".into());
        }
        // README: a record's `duration_ms` is its `ended_at` minus its `started_at`.
        if ended - started != duration as i64 {
            return Err(format!(
                "duration_ms {duration} but ended_at - started_at = {}",
                ended - started
            ));
        }
        let slot = u64::from(job.slot.ok_or("started without slot")?);
        if slot == 0 || slot > max_concurrent {
            return Err(format!("slot {slot} outside 1..={max_concurrent}"));
        }
        if job.attempts < 1 {
            return Err("started with attempts 0".into());
        }
        if job.command.is_none() || job.key.is_none() {
            return Err("started without key or command".into());
        }
    } else {
        // A spawn error is a try that started nothing; other jobs never started made none.
        let tries = if reason == Some("spawn_error") { 1 } else { 0 };
        if job.started_at.is_some()
            || job.duration_ms.is_some()
            || job.slot.is_some()
            || job.attempts > tries
            || job.exit_code.is_some()
            || job.signal.is_some()
            || job.leaked
        {
            return Err("a job never started has no start, duration, slot, attempts, exit".into());
        }
    }
    if job.superseded_by.is_some() || job.batch.is_some() {
        return Err("superseded_by/batch set without --coalesce/--batch-size".into());
    }
    check_tries(job, max_concurrent, run_start)
}

/// A record's `tries`: one per attempt, numbered from 1, each with consistent times; every
/// try but the last failed (it was retried); the record's exit status is its last try's.
fn check_tries(job: &JobRecord, max_concurrent: u64, run_start: i64) -> Result<(), String> {
    if job.tries.len() != job.attempts as usize {
        return Err(format!(
            "{} tries for {} attempts",
            job.tries.len(),
            job.attempts
        ));
    }
    for (i, t) in job.tries.iter().enumerate() {
        if t.attempt as usize != i + 1 {
            return Err(format!("try {} numbered {}", i + 1, t.attempt));
        }
        let ended = parse_time(&t.ended_at)?;
        match (&t.started_at, t.duration_ms, t.slot) {
            (Some(started), Some(duration), Some(slot)) => {
                let started = parse_time(started)?;
                if started < run_start || ended < started {
                    return Err(format!("try {}: times out of order", t.attempt));
                }
                if ended - started != duration as i64 {
                    return Err(format!(
                        "try {}: duration_ms {duration} but ended_at - started_at = {}",
                        t.attempt,
                        ended - started
                    ));
                }
                if slot == 0 || u64::from(slot) > max_concurrent {
                    return Err(format!("try {}: slot {slot}", t.attempt));
                }
            }
            (None, None, None) => {
                if t.reason.as_deref() != Some("spawn_error") {
                    return Err(format!("try {} not started but no spawn_error", t.attempt));
                }
            }
            _ => {
                return Err(format!(
                    "try {}: start, duration and slot go together",
                    t.attempt
                ))
            }
        }
        if i + 1 < job.tries.len() && t.outcome != "failed" {
            return Err(format!("try {} was retried but did not fail", t.attempt));
        }
    }
    if let Some(last) = job.tries.last().filter(|t| t.started_at.is_some()) {
        if (last.exit_code, &last.signal) != (job.exit_code, &job.signal) {
            return Err("the record's exit status is not its last try's".into());
        }
        if job.started && (last.started_at != job.started_at || last.slot != job.slot) {
            return Err("the record's start is not its last try's".into());
        }
    }
    Ok(())
}

/// Parses an RFC 3339 UTC timestamp with milliseconds (`2026-01-02T03:04:05.678Z`, exactly
/// that shape) into milliseconds since the epoch.
pub fn parse_time(text: &str) -> Result<i64, String> {
    let bytes = text.as_bytes();
    let shape_ok = bytes.len() == 24
        && bytes.iter().enumerate().all(|(i, &b)| match i {
            4 | 7 => b == b'-',
            10 => b == b'T',
            13 | 16 => b == b':',
            19 => b == b'.',
            23 => b == b'Z',
            _ => b.is_ascii_digit(),
        });
    if !shape_ok {
        return Err(format!(
            "timestamp {text:?} is not YYYY-MM-DDTHH:MM:SS.mmmZ"
        ));
    }
    let time = humantime::parse_rfc3339(text).map_err(|err| format!("{text:?}: {err}"))?;
    let ms = time
        .duration_since(UNIX_EPOCH)
        .map_err(|_| format!("{text:?} before 1970"))?
        .as_millis();
    Ok(ms as i64)
}

// ---------------------------------------------------------------------------------------------
// Scratch directories.

/// A temporary directory for one test: job markers, logs, input files.
pub struct Scratch {
    dir: TempDir,
}

impl Scratch {
    pub fn new() -> Scratch {
        Scratch {
            dir: tempfile::Builder::new()
                .prefix("lanes-it-")
                .tempdir()
                .expect("temporary directory"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `contents` to `name` (creating parent directories); returns the path.
    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.join(name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::write(&path, contents).unwrap();
        path
    }

    pub fn mkdir(&self, name: &str) -> PathBuf {
        let path = self.join(name);
        fs::create_dir_all(&path).unwrap();
        path
    }

    pub fn exists(&self, name: &str) -> bool {
        self.join(name).exists()
    }

    /// The text of `name`; panics when it does not exist.
    pub fn read(&self, name: &str) -> String {
        fs::read_to_string(self.join(name))
            .unwrap_or_else(|err| panic!("cannot read {name}: {err}"))
    }

    /// The lines of `name`, or none when it does not exist.
    pub fn lines(&self, name: &str) -> Vec<String> {
        fs::read_to_string(self.join(name))
            .map(|text| text.lines().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// The pid a job wrote to `name`. A job's `echo $$ > FILE` creates the file before it
    /// writes the pid: an empty file is waited on (bounded) until the pid is there.
    pub fn pid(&self, name: &str) -> i32 {
        let mut text = self.read(name);
        wait_until(Duration::from_secs(5), || {
            text = self.read(name);
            text.trim().parse::<i32>().is_ok()
        });
        text.trim()
            .parse()
            .unwrap_or_else(|err| panic!("{name} holds no pid: {err}"))
    }

    /// Waits (polling, bounded) until `name` exists; panics after `timeout`.
    pub fn wait_for(&self, name: &str, timeout: Duration) {
        let path = self.join(name);
        assert!(
            wait_until(timeout, || path.exists()),
            "{name} did not appear within {timeout:?}"
        );
    }
}

/// Polls `done` every few milliseconds until it holds or `timeout` passes; returns whether
/// it held.
pub fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// Shell code for a job: wait (polling, bounded to about 15 s) until the file `$D/NAME`
/// exists; when it never does, exit 97 with a message on stderr, so a scheduling bug shows as
/// a failed job instead of a hang.
pub fn await_file(name: &str) -> String {
    format!(
        "n=0; until [ -e \"$D/{name}\" ]; do n=$((n+1)); \
         if [ $n -gt 750 ]; then echo 'gave up waiting for {name}' >&2; exit 97; fi; \
         sleep 0.02; done"
    )
}

/// Whether `unshare --pid --fork --mount-proc` works here (root, util-linux); says so when not.
pub fn pid_namespaces(test: &str) -> bool {
    let works = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--kill-child", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !works {
        eprintln!("skipped: {test} needs `unshare --pid` (root and util-linux)");
    }
    works
}

/// The `Run::wrapper` prefix that starts lanes as the first process of a PID namespace of its
/// own (pid 1 there, its own `/proc`), killed with the `unshare` the test started.
pub const IN_A_PID_NAMESPACE: &str =
    "exec unshare --pid --fork --mount-proc --kill-child \"$0\" \"$@\"";

/// Quotes `text` for `sh`.
pub fn sh_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

// ---------------------------------------------------------------------------------------------
// Processes.

/// Whether `pid` is a live process (present and not a zombie).
pub fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next());
            state.is_some_and(|state| state != 'Z' && state != 'X')
        }
        Err(_) => false,
    }
}

/// The state letter of `pid` (`/proc/PID/stat`: `R`, `S`, `T` when stopped...), while it
/// exists.
pub fn state(pid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// `(pid, state, ppid, pgrp)` of every process, from `/proc/PID/stat`.
fn processes() -> Vec<(i32, char, i32, i32)> {
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command name in parentheses: state, ppid, pgrp.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next());
        let ppid = fields.next().and_then(|s| s.parse().ok());
        let pgrp = fields.next().and_then(|s| s.parse().ok());
        if let (Some(state), Some(ppid), Some(pgrp)) = (state, ppid, pgrp) {
            found.push((pid, state, ppid, pgrp));
        }
    }
    found
}

/// The process group of `pid`, while the process exists.
pub fn process_group(pid: i32) -> Option<i32> {
    processes()
        .into_iter()
        .find(|&(p, ..)| p == pid)
        .map(|(.., pgrp)| pgrp)
}

/// The live (not zombie) processes of process group `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    processes()
        .into_iter()
        .filter(|&(_, state, _, pgrp)| pgrp == pgid && state != 'Z' && state != 'X')
        .map(|(pid, ..)| pid)
        .collect()
}

/// The zombies among the descendants of `pid`: exited processes nobody has reaped.
pub fn zombie_descendants(pid: i32) -> Vec<i32> {
    let all = processes();
    let mut tree = BTreeSet::from([pid]);
    loop {
        let before = tree.len();
        for &(p, _, ppid, _) in &all {
            if tree.contains(&ppid) {
                tree.insert(p);
            }
        }
        if tree.len() == before {
            break;
        }
    }
    all.into_iter()
        .filter(|&(p, state, ..)| p != pid && tree.contains(&p) && state == 'Z')
        .map(|(p, ..)| p)
        .collect()
}

/// The live processes whose environment holds `LANES_IT_TAG=tag`.
fn tagged(tag: &str) -> Vec<(i32, String)> {
    let needle = format!("{TAG_VAR}={tag}\0");
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environ) = fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if environ
            .windows(needle.len())
            .any(|window| window == needle.as_bytes())
            && alive(pid)
        {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or_default();
            found.push((pid, cmdline));
        }
    }
    found
}

/// SIGKILLs every live process of the run tagged `tag`; returns what was killed.
fn kill_tagged(tag: &str) -> Vec<(i32, String)> {
    let mut killed = Vec::new();
    for _ in 0..5 {
        let found = tagged(tag);
        if found.is_empty() {
            break;
        }
        for (pid, cmdline) in found {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            killed.push((pid, cmdline));
        }
        thread::sleep(Duration::from_millis(20));
    }
    killed
}

fn unique_tag() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

// ---------------------------------------------------------------------------------------------
// The runner.

enum StdinSpec {
    Null,
    Bytes(Vec<u8>),
    File(PathBuf),
    Piped,
}

/// A run of `lanes` to be started: arguments, input, environment.
///
/// By default the run writes its report to a private file (`--report`), which
/// [`Output::report`] decodes; stdin is `/dev/null`.
pub struct Run {
    args: Vec<OsString>,
    stdin: StdinSpec,
    cwd: Option<PathBuf>,
    env: Vec<(OsString, OsString)>,
    report: bool,
    wrapper: Option<String>,
    capture_stdout: bool,
    /// Signals blocked in the mask lanes inherits.
    blocked: Vec<Signal>,
    /// Signals sent to the child just before its exec, blocked: pending when lanes starts.
    pending: Vec<Signal>,
    dir: TempDir,
}

impl Run {
    pub fn new() -> Run {
        Run {
            args: Vec::new(),
            stdin: StdinSpec::Null,
            cwd: None,
            env: Vec::new(),
            report: true,
            wrapper: None,
            capture_stdout: true,
            blocked: Vec::new(),
            pending: Vec::new(),
            dir: tempfile::Builder::new()
                .prefix("lanes-it-run-")
                .tempdir()
                .expect("temporary directory"),
        }
    }

    pub fn arg(mut self, arg: impl Into<OsString>) -> Run {
        self.args.push(arg.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Run
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Jobs on stdin, written by a feeder thread, then closed.
    pub fn stdin(mut self, bytes: impl AsRef<[u8]>) -> Run {
        self.stdin = StdinSpec::Bytes(bytes.as_ref().to_vec());
        self
    }

    /// Stdin read from a file.
    pub fn stdin_file(mut self, path: impl Into<PathBuf>) -> Run {
        self.stdin = StdinSpec::File(path.into());
        self
    }

    /// Stdin as a pipe the test writes to ([`Running::stdin`]).
    pub fn stdin_piped(mut self) -> Run {
        self.stdin = StdinSpec::Piped;
        self
    }

    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Run {
        self.cwd = Some(dir.into());
        self
    }

    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Run {
        self.env.push((name.into(), value.into()));
        self
    }

    /// `D=<scratch dir>` in the environment, for jobs' markers and logs.
    pub fn scratch(self, scratch: &Scratch) -> Run {
        self.env("D", scratch.path())
    }

    /// No `--report` file.
    pub fn no_report(mut self) -> Run {
        self.report = false;
        self
    }

    /// Starts lanes through `sh -c 'PREFIX; exec lanes ARGS…'`.
    pub fn wrapper(mut self, prefix: &str) -> Run {
        self.wrapper = Some(prefix.to_owned());
        self
    }

    /// Leaves lanes' stdout to the test ([`Running::take_stdout`]).
    pub fn own_stdout(mut self) -> Run {
        self.capture_stdout = false;
        self
    }

    /// Starts lanes (or its wrapper) with `signals` blocked in the signal mask it inherits.
    pub fn blocking(mut self, signals: &[Signal]) -> Run {
        self.blocked.extend_from_slice(signals);
        self
    }

    /// Blocks `signals` and sends them to lanes before its exec: they are pending, blocked,
    /// when its first instruction runs.
    pub fn pending(mut self, signals: &[Signal]) -> Run {
        self.blocked.extend_from_slice(signals);
        self.pending.extend_from_slice(signals);
        self
    }

    /// Where the report goes.
    pub fn report_path(&self) -> PathBuf {
        self.dir.path().join("report.jsonl")
    }

    /// Runs lanes to its end.
    pub fn run(self) -> Output {
        self.spawn().wait()
    }

    /// Starts lanes (in a process group of its own) and returns at once.
    pub fn spawn(self) -> Running {
        let tag = unique_tag();
        let report_path = self.report.then(|| self.report_path());
        let mut command = match &self.wrapper {
            Some(prefix) => {
                let mut command = Command::new("sh");
                command
                    .arg("-c")
                    .arg(format!("{prefix}\nexec \"$0\" \"$@\""))
                    .arg(BIN);
                command
            }
            None => Command::new(BIN),
        };
        if let Some(path) = &report_path {
            command.arg("--report").arg(path);
        }
        command
            .args(&self.args)
            .env(TAG_VAR, &tag)
            .env_remove("NO_COLOR")
            .env_remove("CI")
            // Keys shared with other processes only where a test asks for it.
            .env_remove("LANES_LOCK_DIR")
            .env_remove("LANES_COORDINATE")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for (name, value) in &self.env {
            command.env(name, value);
        }
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        if !self.blocked.is_empty() {
            let mut set = nix::sys::signal::SigSet::empty();
            for &signal in &self.blocked {
                set.add(signal);
            }
            let pending = self.pending.clone();
            // SAFETY: sigprocmask and kill are async-signal-safe; nothing else runs in the
            // child.
            unsafe {
                command.pre_exec(move || {
                    set.thread_block().map_err(io::Error::from)?;
                    for &signal in &pending {
                        nix::sys::signal::raise(signal).map_err(io::Error::from)?;
                    }
                    Ok(())
                });
            }
        }
        let mut bytes = None;
        match &self.stdin {
            StdinSpec::Null => {
                command.stdin(Stdio::null());
            }
            StdinSpec::Bytes(b) => {
                bytes = Some(b.clone());
                command.stdin(Stdio::piped());
            }
            StdinSpec::File(path) => {
                command.stdin(fs::File::open(path).expect("stdin file"));
            }
            StdinSpec::Piped => {
                command.stdin(Stdio::piped());
            }
        }
        let mut child = command.spawn().expect("cannot start lanes");
        let started = Instant::now();
        let mut stdin = child.stdin.take();
        let feeder = bytes.map(|bytes| {
            let mut pipe = stdin.take().expect("stdin pipe");
            thread::spawn(move || pipe.write_all(&bytes))
        });
        let stdout = child.stdout.take();
        let (stdout, out_reader) = if self.capture_stdout {
            (None, stdout.map(read_all))
        } else {
            (stdout, None)
        };
        let err_reader = child.stderr.take().map(read_all);
        Running {
            child,
            tag,
            started,
            stdin,
            feeder,
            stdout,
            out_reader,
            err_reader,
            report_path,
            done: false,
            _dir: self.dir,
        }
    }
}

fn read_all(mut pipe: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

/// A started run of lanes.
pub struct Running {
    child: Child,
    tag: String,
    started: Instant,
    stdin: Option<ChildStdin>,
    feeder: Option<JoinHandle<io::Result<()>>>,
    stdout: Option<ChildStdout>,
    out_reader: Option<JoinHandle<Vec<u8>>>,
    err_reader: Option<JoinHandle<Vec<u8>>>,
    report_path: Option<PathBuf>,
    done: bool,
    _dir: TempDir,
}

impl Running {
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    /// Sends `signal` to lanes (its pid only).
    pub fn signal(&self, signal: Signal) {
        kill(Pid::from_raw(self.pid()), signal).expect("kill lanes");
    }

    /// The stdin pipe ([`Run::stdin_piped`]).
    pub fn stdin(&mut self) -> &mut ChildStdin {
        self.stdin.as_mut().expect("stdin_piped() was not set")
    }

    /// The stdin pipe, to write from another thread ([`Run::stdin_piped`]).
    pub fn take_stdin(&mut self) -> ChildStdin {
        self.stdin.take().expect("stdin_piped() was not set")
    }

    /// Closes the stdin pipe (EOF for lanes).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Lanes' stdout ([`Run::own_stdout`]).
    pub fn take_stdout(&mut self) -> ChildStdout {
        self.stdout.take().expect("own_stdout() was not set")
    }

    /// The report file as written so far.
    pub fn report_so_far(&self) -> String {
        let path = self.report_path.as_ref().expect("a run with a report");
        fs::read_to_string(path).unwrap_or_default()
    }

    /// Waits for lanes to exit (bounded), then checks that it left no process behind and
    /// that its report, if any, is whole and consistent with its exit status.
    pub fn wait(mut self) -> Output {
        let deadline = self.started + RUN_DEADLINE;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for lanes") {
                break Some(status);
            }
            if Instant::now() >= deadline {
                break None;
            }
            thread::sleep(Duration::from_millis(5));
        };
        let elapsed = self.started.elapsed();
        // Leftovers would hold the output pipes open: find and kill them before reading.
        let survivors = kill_tagged(&self.tag);
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        self.stdin = None;
        let feeder = self.feeder.take().map(|f| f.join().expect("feeder thread"));
        let stdout = self
            .out_reader
            .take()
            .map(|r| r.join().expect("stdout reader"))
            .unwrap_or_default();
        let stderr = self
            .err_reader
            .take()
            .map(|r| r.join().expect("stderr reader"))
            .unwrap_or_default();
        self.done = true;
        let report_text = self
            .report_path
            .as_ref()
            .and_then(|path| fs::read_to_string(path).ok());
        let context = format!(
            "--- stdout:\n{}\n--- stderr:\n{}\n--- report:\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr),
            report_text.as_deref().unwrap_or("(none)")
        );
        let Some(status) = status else {
            panic!("lanes did not end within {RUN_DEADLINE:?}; killed {survivors:?}\n{context}");
        };
        assert!(
            survivors.is_empty(),
            "lanes exited ({status}) but left processes behind: {survivors:?}\n{context}"
        );
        // After a run that SIGINT stopped, lanes ends itself by SIGINT (a shell sees 130);
        // any other death by a signal is a fault.
        let code = match (status.code(), status.signal()) {
            (Some(code), _) => code,
            (None, Some(signal)) if signal == Signal::SIGINT as i32 => 128 + signal,
            (None, signal) => panic!("lanes was killed by signal {signal:?}\n{context}"),
        };
        let report = match &report_text {
            Some(text) if !text.is_empty() => {
                let report = Report::parse(text)
                    .unwrap_or_else(|err| panic!("bad report: {err}\n{context}"));
                assert_eq!(
                    report.summary.exit_code, code,
                    "the summary's exit_code is the exit status\n{context}"
                );
                Some(report)
            }
            _ => None,
        };
        Output {
            code,
            stdout,
            stderr,
            report,
            report_text,
            elapsed,
            feeder,
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.done {
            // The test panicked before `wait`: leave nothing behind.
            kill_tagged(&self.tag);
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A process started from a bare `Command`, for the shapes [`Run`] cannot make: a wrapper
/// (`prlimit`, `sh -c 'ulimit …; exec "$@"'`), a stdout read line by line, a server killed and
/// followed by another. Tagged like a run; when dropped, it and every live process carrying its
/// tag are SIGKILLed (by pid), so that a test failing halfway leaves nothing running. It derefs
/// to its [`Child`].
pub struct Spawned {
    child: Child,
    tag: String,
}

impl Spawned {
    /// Tags `command` and starts it; panics if it cannot be started.
    pub fn start(command: &mut Command) -> Self {
        let tag = unique_tag();
        let child = command
            .env(TAG_VAR, &tag)
            .spawn()
            .expect("start the command");
        Self { child, tag }
    }
}

impl std::ops::Deref for Spawned {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.child
    }
}

impl std::ops::DerefMut for Spawned {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        // A child already waited for is not signalled again (std keeps its status).
        let _ = self.child.kill();
        let _ = self.child.wait();
        kill_tagged(&self.tag);
    }
}

/// What a finished run left.
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// The decoded `--report` file, when one was written and is not empty.
    pub report: Option<Report>,
    /// The report file's text, when it exists.
    pub report_text: Option<String>,
    /// From start to exit.
    pub elapsed: Duration,
    /// How writing stdin went ([`Run::stdin`]).
    pub feeder: Option<io::Result<()>>,
}

impl Output {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// Stdout and stderr, for assertion messages.
    pub fn dump(&self) -> String {
        format!(
            "exit {}\n--- stdout:\n{}\n--- stderr:\n{}\n--- report:\n{}",
            self.code,
            self.stdout(),
            self.stderr(),
            self.report_text.as_deref().unwrap_or("(none)")
        )
    }

    /// Asserts the exit status.
    pub fn code(&self, want: i32) -> &Output {
        assert_eq!(self.code, want, "exit status\n{}", self.dump());
        self
    }

    /// The decoded report; panics when none was written.
    pub fn report(&self) -> &Report {
        self.report
            .as_ref()
            .unwrap_or_else(|| panic!("no report\n{}", self.dump()))
    }

    /// The record of job `seq`.
    pub fn job(&self, seq: u64) -> &JobRecord {
        self.report().job(seq)
    }

    /// Stdout decoded as a report (`--json`).
    pub fn stdout_report(&self) -> Report {
        let report = Report::parse(&self.stdout())
            .unwrap_or_else(|err| panic!("stdout is not a report: {err}\n{}", self.dump()));
        assert_eq!(report.summary.exit_code, self.code);
        report
    }
}

// ---------------------------------------------------------------------------------------------
// Self-tests of the harness: the checks above must be able to fail.

/// `lanes timeline REPORT [--events EVENTS] -o OUT`, run to its end.
pub fn draw_timeline(report: &Path, events: Option<&Path>, out: &Path) -> Output {
    let mut run = Run::new().no_report().arg("timeline").arg(report);
    if let Some(events) = events {
        run = run.arg("--events").arg(events);
    }
    run.arg("-o").arg(out).run()
}

#[cfg(test)]
mod harness {
    use super::*;

    const RUN: &str = r#"{"type":"run","version":"VERSION","schema":2,"started_at":"2026-01-02T03:04:05.006Z","pid":4711,"max_concurrent":2,"source":"-","command":null,"containment":"cgroup"}"#;
    const JOB: &str = r#"{"type":"job","seq":1,"line":1,"key":"k","command":"true","outcome":"succeeded","reason":null,"exit_code":0,"signal":null,"started":true,"started_at":"2026-01-02T03:04:05.010Z","ended_at":"2026-01-02T03:04:05.020Z","duration_ms":10,"wait_ms":0,"attempts":1,"flaky":false,"slot":1,"leaked":false,"superseded_by":null,"batch":null,"error":null,"cpu_ms":null,"memory_peak_bytes":null,"tries":[{"attempt":1,"outcome":"succeeded","reason":null,"exit_code":0,"signal":null,"slot":1,"started_at":"2026-01-02T03:04:05.010Z","ended_at":"2026-01-02T03:04:05.020Z","duration_ms":10}]}"#;
    const SUMMARY: &str = r#"{"type":"summary","jobs":1,"succeeded":1,"flaky":0,"failed":0,"interrupted":0,"rejected":0,"skipped":0,"duration_ms":15,"exit_code":0}"#;

    fn report(job: &str) -> String {
        format!(
            "{}\n{job}\n{SUMMARY}\n",
            RUN.replace("VERSION", env!("CARGO_PKG_VERSION"))
        )
    }

    #[test]
    fn the_decoder_accepts_a_valid_report() {
        Report::must_parse(&report(JOB));
    }

    #[test]
    fn the_decoder_rejects_schema_changes_and_broken_invariants() {
        let broken = [
            JOB.replace(r#","error":null"#, r#","error":null,"extra":1"#),
            JOB.replace(r#","batch":null"#, ""),
            JOB.replace(r#""duration_ms":10"#, r#""duration_ms":10.0"#),
            JOB.replace(r#""duration_ms":10"#, r#""duration_ms":90"#),
            // A millisecond off: `duration_ms` is exactly `ended_at - started_at`.
            JOB.replace(
                r#""duration_ms":10,"wait_ms""#,
                r#""duration_ms":9,"wait_ms""#,
            ),
            JOB.replace(r#""duration_ms":10}"#, r#""duration_ms":11}"#),
            JOB.replace(r#"05.020Z"#, r#"05.02Z"#),
            JOB.replace(r#"05.020Z"#, r#"05.020+00:00"#),
            JOB.replace(r#""slot":1,"leaked""#, r#""slot":3,"leaked""#),
            JOB.replace(r#","tries":[{"#, r#","tries":[],"x":[{"#),
            JOB.replace(r#""attempt":1"#, r#""attempt":2"#),
            JOB.replace(r#""duration_ms":10}"#, r#""duration_ms":50}"#),
            JOB.replace(r#""flaky":false"#, r#""flaky":true"#),
            JOB.replace(r#""outcome":"succeeded""#, r#""outcome":"failed""#),
        ];
        for job in &broken {
            assert!(Report::parse(&report(job)).is_err(), "accepted {job}");
        }
        let torn = report(JOB);
        assert!(Report::parse(torn.trim_end()).is_err());
        assert!(Report::parse(&torn.replace(SUMMARY, "")).is_err());
        // The job ended 14 ms into the run: a summary of 13 ms ends before it.
        let short = torn.replace(r#""duration_ms":15"#, r#""duration_ms":13"#);
        assert!(Report::parse(&short).is_err());
        Report::must_parse(&torn.replace(r#""duration_ms":15"#, r#""duration_ms":14"#));
    }

    #[test]
    fn the_runner_catches_processes_left_behind() {
        // The wrapper leaves a process behind that is not even lanes' descendant (the
        // subshell exits at once, so it is re-parented before lanes starts).
        let result = std::panic::catch_unwind(|| {
            Run::new()
                .wrapper("(sleep 30 </dev/null >/dev/null 2>&1 &)")
                .stdin("k\ttrue\n")
                .run()
        });
        let message = match result {
            Ok(out) => panic!("a leftover went unnoticed\n{}", out.dump()),
            Err(panic) => panic.downcast_ref::<String>().cloned().unwrap_or_default(),
        };
        assert!(message.contains("left processes behind"), "{message}");
        assert!(message.contains("sleep 30"), "{message}");
    }
}
