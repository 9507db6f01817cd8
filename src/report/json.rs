//! The JSON Lines report (SPEC §5.2): the record types, which are the public schema
//! (`schema/report.schema.json`), and their serialisation, one line per record.

use std::time::SystemTime;

use serde::Serialize;

/// The report schema's version; raised on any incompatible change to the records.
pub const SCHEMA_VERSION: u32 = 1;

/// First line of a report.
#[derive(Debug, Serialize)]
pub struct RunRecord {
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The version of `lanes` that wrote the report.
    pub version: &'static str,
    /// [`SCHEMA_VERSION`].
    pub schema: u32,
    /// RFC 3339 UTC with milliseconds.
    pub started_at: String,
    pub max_concurrent: usize,
    /// `"-"` for stdin, else the path as given.
    pub source: String,
}

/// One job's record, written when the job ends (or is rejected, or dropped at shutdown).
#[derive(Debug, Clone, Serialize)]
pub struct JobRecord {
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// 1-based job number in input order.
    pub seq: u64,
    /// 1-based source line (the `[[job]]` header line in a manifest).
    pub line: u64,
    /// `null` for an input line without a tab (or whose key is not UTF-8).
    pub key: Option<String>,
    /// `null` for an invalid input line.
    pub command: Option<String>,
    /// `succeeded`, `failed`, `interrupted` or `rejected`.
    pub outcome: &'static str,
    /// `null` for `succeeded`; see SPEC §5.2 for the words.
    pub reason: Option<&'static str>,
    /// The direct child's exit status, when it exited normally.
    pub exit_code: Option<i32>,
    /// The signal that ended the direct child (`"SIGKILL"`), when a signal did.
    pub signal: Option<String>,
    /// Whether a process was started for the job.
    pub started: bool,
    /// RFC 3339 UTC with milliseconds; `null` when not started.
    pub started_at: Option<String>,
    /// RFC 3339 UTC with milliseconds: when the record was decided.
    pub ended_at: String,
    /// From start to end, in milliseconds; `null` when not started.
    pub duration_ms: Option<u64>,
    /// From admission to start (or to the end, when it never started), in milliseconds; `null`
    /// for a job that was never admitted (rejected).
    pub wait_ms: Option<u64>,
    /// Tries made (0 when never started).
    pub attempts: u32,
    /// 1..=max_concurrent, when started.
    pub slot: Option<u32>,
    /// Whether processes of the job's group outlived its shell past the leak window and were
    /// terminated, or held its output pipes open.
    pub leaked: bool,
    /// The seq of the job that replaced this one (`superseded` only).
    pub superseded_by: Option<u64>,
    /// The seq of the first job of the batch this job ran in (batching only).
    pub batch: Option<u64>,
    /// A message for people: the OS error of a spawn error, why a line is invalid.
    pub error: Option<String>,
}

/// Last line of a report.
#[derive(Debug, Default, Clone, Serialize)]
pub struct SummaryRecord {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub jobs: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub interrupted: u64,
    pub rejected: u64,
    /// Jobs not run because `--resume` found them already succeeded.
    pub skipped: u64,
    /// Wall time of the whole run, in milliseconds.
    pub duration_ms: u64,
    /// The status `lanes` exits with.
    pub exit_code: u8,
}

/// Formats `time` as RFC 3339 UTC with milliseconds (`2026-11-29T11:35:56.123Z`).
pub fn timestamp(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

/// One record as one line: JSON followed by `\n`.
pub fn to_line(record: &impl Serialize) -> Vec<u8> {
    let mut line = serde_json::to_vec(record).expect("report records always serialise");
    line.push(b'\n');
    line
}
