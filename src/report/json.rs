//! The JSON Lines report (SPEC §5.2): the record types, which are the public schema, and their
//! serialisation, one line per record. The JSON Schema `schema/report.schema.json` is generated
//! from these types by [`schema`] (see `crate::generate`), so their doc comments are its
//! descriptions.

use std::borrow::Cow;
use std::time::SystemTime;

#[cfg(test)]
use schemars::generate::SchemaSettings;
#[cfg(test)]
use schemars::transform::RecursiveTransform;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;
use serde_json::{json, Value};

use crate::core::Outcome;

/// The report schema's version; raised on any incompatible change to the records.
/// 2: the `skipped` outcome (a record for each job `--resume` skipped; `jobs` counts them).
pub(crate) const SCHEMA_VERSION: u32 = 2;

/// The first line of a report: which `lanes` wrote it, under which schema version, and how the
/// run was set up.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "run", deny_unknown_fields)]
pub(crate) struct RunRecord {
    /// The record's kind: always `"run"`.
    #[serde(rename = "type")]
    #[schemars(extend("const" = "run"))]
    pub kind: &'static str,
    /// The version of `lanes` that wrote the report.
    pub version: &'static str,
    /// The version of the report schema, raised on any incompatible change to the records.
    #[schemars(extend("const" = SCHEMA_VERSION))]
    pub schema: u32,
    /// When the run started.
    #[schemars(with = "Timestamp")]
    pub started_at: String,
    /// The process id of the `lanes` that wrote the report: what a job of another `lanes`
    /// that waited for a key this one held names in its `lock_holder` (with `started_at`).
    pub pid: u32,
    /// The most jobs in flight at once (`-j`, `--max-concurrent`).
    #[schemars(range(min = 1))]
    pub max_concurrent: usize,
    /// Where the jobs were read from: `"-"` for stdin, else the path as given.
    pub source: String,
    /// The command template each job's argument was put into (`--command`, a trailing command
    /// as a template, a manifest's `command`), as given; `null` without one (each record's
    /// `command` is then the whole command). `--resume` matches jobs only against a report of
    /// the same template.
    pub command: Option<String>,
    /// `--colsep`, where the template's column placeholders (`{1}`, `{2}`…) split each
    /// argument; left out when the template has none (or there is none). `--resume` matches
    /// jobs only against a report of the same template and separator.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub colsep: Option<String>,
    /// What holds each job's processes together: `"cgroup"` (a cgroup v2 per job) or
    /// `"process_group"` (the job's own process group).
    #[schemars(extend("enum" = ["cgroup", "process_group"]))]
    pub containment: &'static str,
}

/// One job's record, written when the job ends (or is rejected, or is dropped at shutdown, or
/// is skipped by `--resume`). Job records come in the order jobs end, not in input order.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[schemars(
    rename = "job",
    deny_unknown_fields,
    extend("allOf" = reasons_by_outcome())
)]
pub(crate) struct JobRecord {
    /// The record's kind: always `"job"`.
    #[serde(rename = "type")]
    #[schemars(extend("const" = "job"))]
    pub kind: &'static str,
    /// The 1-based job number, in input order (invalid lines included).
    #[schemars(range(min = 1))]
    pub seq: u64,
    /// The 1-based source line: the job's line, or in a manifest its `[[job]]` header line.
    #[schemars(range(min = 1))]
    pub line: u64,
    /// The job's key as given; `null` for an input line without a tab (or whose key is not
    /// UTF-8).
    pub key: Option<String>,
    /// The job's command as given (with `--command`, the text after the tab, not the expanded
    /// template); `null` for an invalid input line.
    pub command: Option<String>,
    /// How the job ended: `succeeded` (exit status 0), `failed`, `interrupted` (stopped or
    /// dropped by `lanes`), `rejected` (never queued) or `skipped` (not run: `--resume` found it
    /// succeeded, or skipped, in the report resumed from; so a report of a resumed run is a
    /// basis for the next `--resume`).
    #[schemars(extend("enum" = outcome_words()))]
    pub outcome: &'static str,
    /// Why the job ended as it did; `null` for `succeeded`. `failed`: `exit_status` (a non-zero
    /// exit status), `killed` (a signal `lanes` did not send, e.g. SIGSEGV), `spawn_error` (the
    /// job could not be started). `interrupted`: `timeout`, `shutdown` (`lanes` got SIGINT,
    /// SIGTERM or SIGHUP), `fail_fast` (another job failed under `--fail-fast`), `superseded` (a
    /// newer job of the same key replaced it). `rejected`: `invalid_input` (a malformed input
    /// line), `queue_full` (`--on-full reject` with `--max-queued` jobs waiting). `skipped`:
    /// `succeeded_before`, `superseded_before` (the `--resume` report holds it as succeeded, or
    /// as replaced by a newer job of its key).
    #[schemars(extend("enum" = reason_words()))]
    pub reason: Option<&'static str>,
    /// The direct child's exit status, when it exited normally; else `null`.
    pub exit_code: Option<i32>,
    /// The name of the signal that ended the direct child (`"SIGKILL"`), when a signal did;
    /// else `null`.
    #[schemars(regex(pattern = r"^SIG[A-Z0-9]+$"))]
    pub signal: Option<String>,
    /// Whether a process was started for the job.
    pub started: bool,
    /// When the job's process started (its last try); `null` when not started.
    #[schemars(with = "Option<Timestamp>")]
    pub started_at: Option<String>,
    /// When the job's record was decided: when it ended, or for a job that never started, when
    /// it was rejected, dropped or skipped. Never `null`.
    #[schemars(with = "Timestamp")]
    pub ended_at: String,
    /// From start to end, in milliseconds; `null` when not started.
    pub duration_ms: Option<u64>,
    /// From admission to start (or to the end, when it never started), in milliseconds; `null`
    /// for a job that was never admitted (rejected, skipped).
    pub wait_ms: Option<u64>,
    /// Tries made, a start that failed (`spawn_error`) included; 0 when never tried.
    pub attempts: u32,
    /// Whether the job is flaky: it `succeeded` after a failed try (`--retries`).
    pub flaky: bool,
    /// The slot the job ran in, 1 to `max_concurrent`, when started; else `null`.
    #[schemars(range(min = 1))]
    pub slot: Option<u32>,
    /// Whether processes of the job's group outlived its shell past the leak window and were
    /// terminated (not when lanes was stopping the job as its shell exited: its processes got
    /// the stop with the shell), or held its output pipes open.
    pub leaked: bool,
    /// The `seq` of the job that replaced this one (`superseded` only); else `null`.
    #[schemars(range(min = 1))]
    pub superseded_by: Option<u64>,
    /// With batching, the `seq` of the first job of the batch this job ran in; else `null`.
    #[schemars(range(min = 1))]
    pub batch: Option<u64>,
    /// A message for people: the OS error of a spawn error, why a line is invalid, a problem
    /// with the job's result files, that its processes were stopped when lanes stopped it;
    /// else `null`.
    pub error: Option<String>,
    /// CPU time of all the processes of the job's last try, in milliseconds, from its cgroup;
    /// `null` when it did not start or jobs are not in cgroups.
    pub cpu_ms: Option<u64>,
    /// The largest memory use of the job's last try at any moment, in bytes, from its cgroup
    /// (`memory.peak`); `null` where the memory controller is not enabled for it.
    pub memory_peak_bytes: Option<u64>,
    /// Every try the job made, oldest first: as many as `attempts` (empty when never tried).
    /// Under `--retries` each try but the last is `failed`; the last has the job's outcome.
    /// A job stopped while it waited for its retry (`--retry-delay`) keeps its failed tries
    /// here, and the top-level fields tell of its last one.
    pub tries: Vec<TryRecord>,
    /// Why the job waited, split by cause, in time order: the wait `wait_ms` tells of (from
    /// admission, or a retry's re-queueing, to the start; or to the end for a job that never
    /// started), as consecutive spans whose `ms` add up to `wait_ms` exactly; a span's cause
    /// differs from the one before it. Absent when the job did not wait (`wait_ms` `null` or
    /// 0). Each member of a batch tells of its own wait, from its own admission (or
    /// re-queueing) to the batch's start, as its `wait_ms` does. Added under schema 2 without raising it: an optional field, which readers that do
    /// not know it ignore, and which reports written before it lack.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waits: Vec<WaitRecord>,
    /// `--lock-dir` only (absent otherwise): how long this job waited, in milliseconds, for its
    /// key's host-wide lock (and its shared slot) before it could be taken (a retried job:
    /// before its first try); `null` for a job that did not start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_wait_ms: Option<Option<u64>>,
    /// `--lock-dir` only (absent otherwise): the process that held the key when this job began
    /// to wait for it; `null` when the key was free.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_holder: Option<Option<LockHolder>>,
    /// Only for a job that ran holding a weight other than 1 or named resources (absent
    /// otherwise): its last try's share of the cap (`-j`), from its `weight` or `--weight`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub weight: Option<u32>,
    /// Only for a job that ran holding named resources (absent otherwise): what its last try
    /// held, by resource name (`--resource`, `[resources]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<std::collections::BTreeMap<String, GrantRecord>>,
}

/// What a job held of one named resource.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[schemars(rename = "granted", deny_unknown_fields)]
pub(crate) struct GrantRecord {
    /// The amount: bytes for a size such as `8G`, else a count; for named units, how many.
    #[schemars(range(min = 1))]
    pub amount: u64,
    /// The named units it held (`LANES_RESOURCE_<NAME>`), in the resource's order; absent
    /// for a resource that is an amount.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub units: Option<Vec<String>>,
}

/// One try of a job: when and where it ran, and how it ended.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[schemars(rename = "try", deny_unknown_fields)]
pub(crate) struct TryRecord {
    /// The try's number, from 1 (`LANES_ATTEMPT`).
    #[schemars(range(min = 1))]
    pub attempt: u32,
    /// How the try ended: `failed` for a try that was retried; the job's outcome for its last.
    #[schemars(extend("enum" = outcome_words()))]
    pub outcome: &'static str,
    /// Why the try ended as it did, as the job record's `reason`.
    #[schemars(extend("enum" = reason_words()))]
    pub reason: Option<&'static str>,
    /// The direct child's exit status, when it exited normally; else `null`.
    pub exit_code: Option<i32>,
    /// The name of the signal that ended the direct child, when a signal did; else `null`.
    #[schemars(regex(pattern = r"^SIG[A-Z0-9]+$"))]
    pub signal: Option<String>,
    /// The slot the try ran in; `null` when its process could not be started.
    #[schemars(range(min = 1))]
    pub slot: Option<u32>,
    /// When the try's process started; `null` when it could not be started (`spawn_error`).
    #[schemars(with = "Option<Timestamp>")]
    pub started_at: Option<String>,
    /// When the try ended.
    #[schemars(with = "Timestamp")]
    pub ended_at: String,
    /// From start to end, in milliseconds; `null` when not started.
    pub duration_ms: Option<u64>,
}

/// One stretch of a job's wait with one cause.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[schemars(rename = "wait", deny_unknown_fields)]
pub(crate) struct WaitRecord {
    /// Why it waited: `key_busy` (a job of its own key was in flight or ahead of it in its
    /// lane), `cap` (its key was free but every slot of `-j` was taken, or starts were held
    /// back for the run's capacity: a spawn shortage's pause, grouped output waiting for its
    /// reader), `lock` (its key was held by another `lanes` process, `--lock-dir`),
    /// `shared_cap` (every `--shared-max-concurrent` slot was taken), `batch_delay` (its batch
    /// waited out `--batch-delay`), `retry_delay` (a retry waited out `--retry-delay`), `resource` (its weight fitted but a
    /// named resource it needed was short, `resource` names it).
    #[schemars(extend("enum" = crate::core::WaitCause::NAMES))]
    pub cause: &'static str,
    /// `key_busy` only (absent otherwise): the seq of the job it waited behind: the one just
    /// ahead of it in its lane, or the one in flight (a batch's first job).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub behind: Option<u64>,
    /// `resource` only (absent otherwise): the named resource it waited for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// When this cause began.
    #[schemars(with = "Timestamp")]
    pub started_at: String,
    /// How long it lasted, in milliseconds.
    pub ms: u64,
}

/// Who held a key host-wide (`--lock-dir`): a `lanes` process and its run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub(crate) struct LockHolder {
    /// The `lanes` process that acquired the key (its job may hold it after it is gone).
    pub pid: u32,
    /// That process's run: the `started_at` of its `run` record.
    #[schemars(with = "Timestamp")]
    pub run: String,
    /// `--coordinate`: the holder's `--host-id`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// The last line of a report: counts by outcome, the run's wall time and its exit status.
#[derive(Debug, Default, Clone, Serialize, JsonSchema)]
#[schemars(rename = "summary", deny_unknown_fields)]
pub(crate) struct SummaryRecord {
    /// The record's kind: always `"summary"`.
    #[serde(rename = "type")]
    #[schemars(extend("const" = "summary"))]
    pub kind: &'static str,
    /// Job records in the report: the sum of the five outcome counts (`skipped` included).
    pub jobs: u64,
    /// Jobs that `succeeded`.
    pub succeeded: u64,
    /// Of the jobs that succeeded, those that did after a failed try (`flaky` records).
    pub flaky: u64,
    /// Jobs that `failed`.
    pub failed: u64,
    /// Jobs that were `interrupted`.
    pub interrupted: u64,
    /// Jobs that were `rejected`.
    pub rejected: u64,
    /// Jobs `skipped`: not run because `--resume` found them already succeeded.
    pub skipped: u64,
    /// Wall time of the whole run, in milliseconds.
    pub duration_ms: u64,
    /// The status `lanes` exits with.
    pub exit_code: u8,
}

/// The schema of a timestamp field (the fields themselves are `String`s): RFC 3339 UTC with
/// milliseconds, as [`timestamp`] writes it.
pub(crate) struct Timestamp;

impl JsonSchema for Timestamp {
    fn schema_name() -> Cow<'static, str> {
        "timestamp".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "RFC 3339 UTC with milliseconds (`2026-11-29T11:35:56.123Z`).",
            "type": "string",
            "format": "date-time",
            "pattern": r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$",
        })
    }
}

/// The `outcome` words, in the order of [`Outcome::ALL`].
pub(crate) fn outcome_words() -> Vec<&'static str> {
    let mut words = Vec::new();
    for outcome in Outcome::ALL {
        if !words.contains(&outcome.name()) {
            words.push(outcome.name());
        }
    }
    words
}

/// The `reason` words (`null` for a success), in the order of [`Outcome::ALL`].
pub(crate) fn reason_words() -> Vec<Option<&'static str>> {
    Outcome::ALL
        .iter()
        .map(|outcome| outcome.reason())
        .collect()
}

/// For each `outcome` word, the `reason` words that go with it, as `if`/`then` schemas.
fn reasons_by_outcome() -> Vec<Value> {
    outcome_words()
        .into_iter()
        .map(|word| {
            let reasons: Vec<Option<&str>> = Outcome::ALL
                .iter()
                .filter(|outcome| outcome.name() == word)
                .map(|outcome| outcome.reason())
                .collect();
            json!({
                "if": { "properties": { "outcome": { "const": word } } },
                "then": { "properties": { "reason": { "enum": reasons } } },
            })
        })
        .collect()
}

/// Joins the lines of a schema's description (doc comments are wrapped at 100 columns),
/// keeping paragraph breaks.
#[cfg(test)]
pub(crate) fn unwrap_description(schema: &mut Schema) {
    if let Some(Value::String(text)) = schema.get_mut("description") {
        *text = text
            .split("\n\n")
            .map(|paragraph| {
                paragraph
                    .lines()
                    .map(str::trim)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join("\n\n");
    }
}

/// The JSON Schema (draft 2020-12) of one report line: any of the three records, told apart
/// by their `type`.
#[cfg(test)]
pub(crate) fn schema() -> Schema {
    let mut generator = SchemaSettings::draft2020_12()
        .for_serialize()
        .with_transform(RecursiveTransform(unwrap_description))
        .into_generator();
    let records = [
        generator.subschema_for::<RunRecord>(),
        generator.subschema_for::<JobRecord>(),
        generator.subschema_for::<SummaryRecord>(),
    ];
    let mut schema = json_schema!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "lanes/report.schema.json",
        "title": format!("lanes JSON Lines report record (schema {SCHEMA_VERSION})"),
        "description": "Each line of a lanes report is one of these records: a `run` header \
            first, one `job` record per job in the order jobs end, a `summary` last.",
        "oneOf": records,
    });
    schema.insert("$defs".to_owned(), generator.take_definitions(true).into());
    schema
}

/// Formats `time` as RFC 3339 UTC with milliseconds (`2026-11-29T11:35:56.123Z`).
pub(crate) fn timestamp(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

/// One record as one line: JSON followed by `\n`.
pub(crate) fn to_line(record: &impl Serialize) -> Vec<u8> {
    let mut line = serde_json::to_vec(record).expect("report records always serialise");
    line.push(b'\n');
    line
}
