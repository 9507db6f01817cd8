//! Reading a report for a timeline, one line at a time (a report of a million jobs is never
//! held whole): its `run` header checked, each `job` record decoded leniently (fields a
//! timeline does not draw are ignored), a torn last line (a report still being written)
//! skipped, anything else that is not a record of a lanes report an error naming the file and
//! line.

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::report::json::SCHEMA_VERSION;

/// Why a report (or events file) cannot be drawn; the message names the file and line.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    /// The file cannot be opened or read.
    // The I/O error is told in the message and is not the error's source, so that a chain of
    // causes does not tell it twice.
    #[error("cannot read {}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// A line is not what a lanes report (or events file) has there.
    #[error("{}:{line}: {why}", path.display())]
    Bad {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: u64,
        /// What is wrong, for people.
        why: String,
    },
}

/// The `run` header of a report.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct RunHeader {
    /// Always `"run"`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The schema version.
    pub schema: u32,
    /// When the run started (RFC 3339).
    pub started_at: String,
    /// `-j`.
    pub max_concurrent: u64,
    /// The version of lanes that wrote it.
    #[serde(default)]
    pub version: String,
}

/// One try of a job, as a timeline draws it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct TryLine<'a> {
    /// 1-based.
    pub attempt: u32,
    /// Its outcome (`failed` for a retried try).
    #[serde(borrow)]
    pub outcome: Cow<'a, str>,
    /// Why it ended so (`exit_status`, `timeout`...), if the outcome has a reason.
    #[serde(default, borrow)]
    pub reason: Option<Cow<'a, str>>,
    /// Its slot, when it started.
    pub slot: Option<u32>,
    /// When it started.
    #[serde(borrow)]
    pub started_at: Option<Cow<'a, str>>,
    /// When it ended.
    #[serde(borrow)]
    pub ended_at: Cow<'a, str>,
}

/// One stretch of a job's wait.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WaitLine<'a> {
    /// Its cause's name.
    #[serde(borrow)]
    pub cause: Cow<'a, str>,
    /// `key_busy`: the job waited behind.
    #[serde(default)]
    pub behind: Option<u64>,
    /// `resource`: the named resource it was short of.
    #[serde(default, borrow)]
    pub resource: Option<Cow<'a, str>>,
    /// When it began.
    #[serde(borrow)]
    pub started_at: Cow<'a, str>,
    /// How long.
    pub ms: u64,
}

/// A job record, as a timeline draws it; `raw` is the record itself (its fields are the hover
/// details).
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct JobLine<'a> {
    /// The job's number.
    pub seq: u64,
    /// Its key (`None` for an input line without one).
    #[serde(default, borrow)]
    pub key: Option<Cow<'a, str>>,
    /// Its command.
    #[serde(default, borrow)]
    pub command: Option<Cow<'a, str>>,
    /// Its outcome.
    #[serde(borrow)]
    pub outcome: Cow<'a, str>,
    /// Why.
    #[serde(default, borrow)]
    pub reason: Option<Cow<'a, str>>,
    /// When its last try started.
    #[serde(default, borrow)]
    pub started_at: Option<Cow<'a, str>>,
    /// When its record was decided.
    #[serde(borrow)]
    pub ended_at: Cow<'a, str>,
    /// Its wait, in ms.
    #[serde(default)]
    pub wait_ms: Option<u64>,
    /// The job that superseded it.
    #[serde(default)]
    pub superseded_by: Option<u64>,
    /// With batching, the seq of its batch's first job.
    #[serde(default)]
    pub batch: Option<u64>,
    /// Its share of `-j` while it ran (absent: 1).
    #[serde(default)]
    pub weight: Option<u64>,
    /// Its tries.
    #[serde(default, borrow)]
    pub tries: Vec<TryLine<'a>>,
    /// Its wait split by cause (absent from reports of lanes before the field existed).
    #[serde(default, borrow)]
    pub waits: Vec<WaitLine<'a>>,
}

fn owned(text: Cow<'_, str>) -> Cow<'static, str> {
    Cow::Owned(text.into_owned())
}

impl JobLine<'_> {
    /// The record, holding its own text.
    pub(crate) fn into_owned(self) -> JobLine<'static> {
        JobLine {
            seq: self.seq,
            key: self.key.map(owned),
            command: self.command.map(owned),
            outcome: owned(self.outcome),
            reason: self.reason.map(owned),
            started_at: self.started_at.map(owned),
            ended_at: owned(self.ended_at),
            wait_ms: self.wait_ms,
            superseded_by: self.superseded_by,
            batch: self.batch,
            weight: self.weight,
            tries: self
                .tries
                .into_iter()
                .map(|t| TryLine {
                    attempt: t.attempt,
                    outcome: owned(t.outcome),
                    reason: t.reason.map(owned),
                    slot: t.slot,
                    started_at: t.started_at.map(owned),
                    ended_at: owned(t.ended_at),
                })
                .collect(),
            waits: self
                .waits
                .into_iter()
                .map(|w| WaitLine {
                    cause: owned(w.cause),
                    behind: w.behind,
                    resource: w.resource.map(owned),
                    started_at: owned(w.started_at),
                    ms: w.ms,
                })
                .collect(),
        }
    }
}

/// One line of a report.
#[derive(Debug)]
pub(crate) enum Line<'a> {
    /// A job record, and the record as JSON.
    Job(Box<JobLine<'a>>, serde_json::Value),
    /// The summary: the run's wall time and exit status.
    Summary {
        /// Wall time of the run, in ms.
        duration_ms: u64,
        /// lanes' exit status (`exit_code`), when the summary gives it.
        exit_code: Option<i64>,
    },
}

/// A report opened for reading, its header read and checked.
pub(crate) struct ReportReader {
    path: PathBuf,
    lines: LineReader,
    /// The header.
    pub run: RunHeader,
    /// The run's start, in ms since the epoch.
    pub origin_ms: i64,
    /// The line of the summary, once read: nothing may follow it.
    summary_line: Option<u64>,
    /// The seqs of the records read: each job has one record.
    seen: SeqSet,
}

impl ReportReader {
    /// Opens `path` and checks its first line is the `run` header of a lanes report of a
    /// schema this lanes reads.
    pub(crate) fn open(path: &Path) -> Result<Self, ReadError> {
        Self::open_upto(path, u64::MAX)
    }

    /// As [`ReportReader::open`], reading no further than the first `length` bytes: a report
    /// still being written is read again as far as an earlier pass read it
    /// ([`ReportReader::consumed`]), so that both passes see the same records.
    pub(crate) fn open_upto(path: &Path, length: u64) -> Result<Self, ReadError> {
        let mut lines = LineReader::open_upto(path, length)?;
        let bad = |line, why: String| ReadError::Bad {
            path: path.to_path_buf(),
            line,
            why,
        };
        let mut text = String::new();
        let Some((number, complete)) = lines.next_line(&mut text)? else {
            return Err(bad(
                1,
                "empty: a run that recorded nothing (not even its `run` record) has nothing to \
                 draw"
                    .into(),
            ));
        };
        let value: serde_json::Value = match serde_json::from_str(&text) {
            Ok(value) => value,
            Err(_) if starts_with_whole_value(&text) => {
                return Err(bad(
                    number,
                    "not JSON Lines: another record follows the `run` record on its line (a \
                     lanes report has one record per line)"
                        .into(),
                ))
            }
            Err(_) if !complete && text.starts_with(r#"{"type":"run""#) => {
                return Err(bad(
                    number,
                    "only a torn `run` record: a run that recorded nothing yet has nothing to \
                     draw"
                        .into(),
                ))
            }
            Err(err) => {
                return Err(bad(
                    number,
                    format!("not a lanes report (not a JSON line: {err})"),
                ))
            }
        };
        match value.get("type").and_then(|t| t.as_str()) {
            Some("run") => {}
            Some(kind @ ("queued" | "waiting" | "started" | "ended" | "stopped" | "continued")) => {
                return Err(bad(
                    number,
                    format!(
                        "not a lanes report: its first line is a `{kind}` event: it is an \
                         events file (give it with --events)"
                    ),
                ))
            }
            _ => {
                return Err(bad(
                    number,
                    "not a lanes report (its first line is no `run` record)".into(),
                ))
            }
        }
        let run: RunHeader = serde_json::from_value(value)
            .map_err(|err| bad(number, format!("not a lanes report's `run` record: {err}")))?;
        if run.schema > SCHEMA_VERSION {
            return Err(bad(
                number,
                format!(
                    "the report's schema version is {} (lanes {}); this lanes reads versions up \
                     to {SCHEMA_VERSION}: use a newer lanes",
                    run.schema, run.version
                ),
            ));
        }
        debug_assert_eq!(run.kind, "run");
        if run.max_concurrent == 0 {
            return Err(bad(
                number,
                "max_concurrent 0: a lanes run runs at least one job at a time".into(),
            ));
        }
        let origin_ms = parse_ms(&run.started_at)
            .ok_or_else(|| bad(number, format!("bad started_at {:?}", run.started_at)))?;
        Ok(ReportReader {
            path: path.to_path_buf(),
            lines,
            run,
            origin_ms,
            summary_line: None,
            seen: SeqSet::default(),
        })
    }

    /// How many bytes of the report were read so far.
    pub(crate) fn consumed(&self) -> u64 {
        self.lines.consumed
    }

    /// The seqs of the records read so far, taken out of the reader.
    pub(crate) fn take_seen(&mut self) -> SeqSet {
        std::mem::take(&mut self.seen)
    }

    /// The next job record or summary; `None` at the end (a torn last line is no line).
    /// With `raw`, a job's record as JSON comes with it (else `Value::Null`).
    /// The line is read into `text`, which the record borrows from (its strings are not
    /// copied).
    pub(crate) fn next<'t>(
        &mut self,
        raw: bool,
        text: &'t mut String,
    ) -> Result<Option<(u64, Line<'t>)>, ReadError> {
        let (number, complete) = loop {
            let Some((number, complete)) = self.lines.next_line(text)? else {
                return Ok(None);
            };
            if !text.trim().is_empty() {
                break (number, complete);
            }
        };
        if let Some(summary) = self.summary_line {
            return Err(self.bad(
                number,
                format!("a record after the summary (line {summary}): the summary is the last"),
            ));
        }
        let text: &'t str = text;
        // The common case, as lanes writes records: decoded at once.
        if !raw && complete && text.starts_with(r#"{"type":"job","#) {
            if let Ok(job) = serde_json::from_str::<JobLine<'t>>(text) {
                check_record(&job, self.origin_ms).map_err(|why| self.bad(number, why))?;
                self.check_seq(number, job.seq)?;
                return Ok(Some((
                    number,
                    Line::Job(Box::new(job), serde_json::Value::Null),
                )));
            }
        }
        let value: serde_json::Value = match serde_json::from_str(text) {
            Ok(value) => value,
            // The run is still writing its last line.
            Err(_) if !complete => return Ok(None),
            Err(err) => return Err(self.bad(number, format!("not a JSON line: {err}"))),
        };
        match value.get("type").and_then(|t| t.as_str()) {
            Some("job") => {
                let (value, kept) = if raw {
                    (value.clone(), value)
                } else {
                    (value, serde_json::Value::Null)
                };
                // Through a value, the strings copied: a record not written by lanes, or
                // `raw`.
                let job: JobLine<'t> = JobLine::deserialize(value)
                    .map_err(|err| self.bad(number, format!("bad job record: {err}")))?;
                check_record(&job, self.origin_ms).map_err(|why| self.bad(number, why))?;
                self.check_seq(number, job.seq)?;
                Ok(Some((number, Line::Job(Box::new(job), kept))))
            }
            Some("summary") => {
                let duration_ms = value
                    .get("duration_ms")
                    .and_then(serde_json::Value::as_u64)
                    .ok_or_else(|| self.bad(number, "summary without duration_ms".into()))?;
                self.summary_line = Some(number);
                let exit_code = value.get("exit_code").and_then(serde_json::Value::as_i64);
                if let Some(code) = exit_code.filter(|code| !(0..=255).contains(code)) {
                    return Err(self.bad(
                        number,
                        format!("exit_code {code} in the summary: an exit status is 0 to 255"),
                    ));
                }
                Ok(Some((
                    number,
                    Line::Summary {
                        duration_ms,
                        exit_code,
                    },
                )))
            }
            Some("run") => Err(self.bad(
                number,
                "a second `run` record: two reports in one file".into(),
            )),
            _ => Err(self.bad(
                number,
                "not a record of a lanes report (no `type` job or summary)".into(),
            )),
        }
    }

    /// A second record of one job is refused.
    fn check_seq(&mut self, line: u64, seq: u64) -> Result<(), ReadError> {
        if self.seen.insert(seq) {
            Ok(())
        } else {
            Err(self.bad(
                line,
                format!("a second record of seq {seq}: each job has one"),
            ))
        }
    }

    fn bad(&self, line: u64, why: String) -> ReadError {
        ReadError::Bad {
            path: self.path.clone(),
            line,
            why,
        }
    }
}

/// Whether `text` starts with a whole JSON value followed by more than white space: records
/// joined on one line, where JSON Lines has one per line.
fn starts_with_whole_value(text: &str) -> bool {
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<serde_json::Value>();
    matches!(values.next(), Some(Ok(_))) && values.byte_offset() < text.trim_end().len()
}

/// The seqs of the records read: a bit each up to [`SeqSet::BITS`] (a run numbers its jobs
/// from 1, so a million jobs take 125 KB), a set for any beyond.
#[derive(Default)]
pub(crate) struct SeqSet {
    bits: Vec<u64>,
    beyond: std::collections::HashSet<u64>,
}

impl SeqSet {
    const BITS: u64 = 1 << 27;

    /// The word of `bits` and the bit in it that stand for `seq` (below [`SeqSet::BITS`]).
    fn place(seq: u64) -> (usize, u64) {
        ((seq / 64) as usize, 1u64 << (seq % 64))
    }

    /// Whether `seq` is in.
    pub(crate) fn contains(&self, seq: u64) -> bool {
        if seq >= Self::BITS {
            return self.beyond.contains(&seq);
        }
        let (word, bit) = Self::place(seq);
        self.bits.get(word).is_some_and(|w| w & bit != 0)
    }

    /// Adds `seq`; false if it was there.
    fn insert(&mut self, seq: u64) -> bool {
        if seq >= Self::BITS {
            return self.beyond.insert(seq);
        }
        let (word, bit) = Self::place(seq);
        if self.bits.len() <= word {
            self.bits.resize((word + 1).next_power_of_two(), 0);
        }
        let fresh = self.bits[word] & bit == 0;
        self.bits[word] |= bit;
        fresh
    }
}

impl JobLine<'_> {
    /// Whether its tries' running time is its own to count: a batch's members ran in one
    /// slot at once, so their run is counted once, by the batch's first job.
    pub(crate) fn holds_its_slot(&self) -> bool {
        self.batch.is_none_or(|first| first == self.seq)
    }
}

/// The outcomes a job record may have.
const RECORD_OUTCOMES: [&str; 5] = ["succeeded", "failed", "interrupted", "rejected", "skipped"];

/// Times of a run's records and events may be stamped a moment before the `run` record's
/// start (it is written first, from the same clock, but rounded), or after its summary's end:
/// this much is allowed.
pub(crate) const SLACK_MS: i64 = 1_000;

/// A job record's outcome and wait causes must be ones lanes writes, its slots from 1, and
/// every time of it readable, none before the run started (`origin`, ms since the epoch), and
/// neither it nor a try ending before it started. A slot above the `run` record's
/// `max_concurrent` is a server's whose cap `lanes set -j` raised.
fn check_record(job: &JobLine<'_>, origin: i64) -> Result<(), String> {
    if job.tries.iter().any(|t| t.slot == Some(0)) {
        return Err(format!(
            "slot 0 in the record of seq {}: slots start at 1",
            job.seq
        ));
    }
    if !RECORD_OUTCOMES.contains(&&*job.outcome) {
        return Err(format!(
            "unknown outcome {:?} in the record of seq {} (one of {})",
            job.outcome,
            job.seq,
            RECORD_OUTCOMES.join(", ")
        ));
    }
    let causes = crate::core::WaitCause::NAMES;
    if let Some(wait) = job.waits.iter().find(|w| !causes.contains(&&*w.cause)) {
        return Err(format!(
            "unknown wait cause {:?} in the record of seq {} (one of {})",
            wait.cause,
            job.seq,
            causes.join(", ")
        ));
    }
    // Each time read once: readable, and not before the run started.
    let read = |time: &str| match parse_ms(time) {
        None => Err(format!(
            "bad time {time:?} in the record of seq {}",
            job.seq
        )),
        Some(ms) if ms < origin - SLACK_MS => Err(format!(
            "the record of seq {} has a time ({time}) from before the run started",
            job.seq
        )),
        Some(ms) => Ok(ms),
    };
    let ended = read(&job.ended_at)?;
    if let Some(started) = job.started_at.as_deref() {
        if ended < read(started)? {
            return Err(format!(
                "the record of seq {} ends ({}) before its job starts ({started})",
                job.seq, job.ended_at
            ));
        }
    }
    for t in &job.tries {
        let ended = read(&t.ended_at)?;
        if let Some(started) = t.started_at.as_deref() {
            if ended < read(started)? {
                return Err(format!(
                    "try {} of seq {} ends ({}) before it starts ({started})",
                    t.attempt, job.seq, t.ended_at
                ));
            }
        }
    }
    for wait in &job.waits {
        read(&wait.started_at)?;
    }
    Ok(())
}

/// Milliseconds since the epoch of an RFC 3339 time; lanes' own form
/// (`2026-11-29T11:35:56.123Z`) read directly, any other through humantime.
pub(crate) fn parse_ms(text: &str) -> Option<i64> {
    lanes_time_ms(text.as_bytes()).or_else(|| any_time_ms(text))
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, as lanes writes its times (days from the civil date by Howard
/// Hinnant's `days_from_civil`).
fn lanes_time_ms(b: &[u8]) -> Option<i64> {
    if b.len() != 24 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
        return None;
    }
    if b[16] != b':' || b[19] != b'.' || b[23] != b'Z' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        b[range].iter().try_fold(0i64, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + i64::from(d - b'0'))
        })
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second, milli) = (
        number(11..13)?,
        number(14..16)?,
        number(17..19)?,
        number(20..23)?,
    );
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + milli)
}

fn any_time_ms(text: &str) -> Option<i64> {
    let time = humantime::parse_rfc3339_weak(text).ok()?;
    let since = time.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(since.as_millis()).ok()
}

/// Lines of a file as text (bytes that are not UTF-8 replaced, so that any line can be told
/// of), numbered from 1, each with whether it ended with a newline.
pub(crate) struct LineReader {
    path: PathBuf,
    reader: BufReader<std::io::Take<File>>,
    number: u64,
    buffer: Vec<u8>,
    /// Bytes read so far.
    consumed: u64,
}

impl LineReader {
    /// Opens `path`.
    pub(crate) fn open(path: &Path) -> Result<Self, ReadError> {
        Self::open_upto(path, u64::MAX)
    }

    /// Opens `path`, to read no more than its first `length` bytes.
    pub(crate) fn open_upto(path: &Path, length: u64) -> Result<Self, ReadError> {
        let file = File::open(path).map_err(|error| ReadError::Io {
            path: path.to_path_buf(),
            error,
        })?;
        if file.metadata().is_ok_and(|m| m.is_dir()) {
            return Err(ReadError::Io {
                path: path.to_path_buf(),
                error: std::io::Error::other("it is a directory"),
            });
        }
        Ok(LineReader {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(1 << 16, file.take(length)),
            number: 0,
            buffer: Vec::new(),
            consumed: 0,
        })
    }

    /// The next line, into `text`: its number and whether it was complete (ended by a
    /// newline).
    pub(crate) fn next_line(
        &mut self,
        text: &mut String,
    ) -> Result<Option<(u64, bool)>, ReadError> {
        self.buffer.clear();
        let read = self
            .reader
            .read_until(b'\n', &mut self.buffer)
            .map_err(|error| ReadError::Io {
                path: self.path.clone(),
                error,
            })?;
        if read == 0 {
            return Ok(None);
        }
        self.consumed += read as u64;
        self.number += 1;
        let complete = self.buffer.last() == Some(&b'\n');
        if complete {
            self.buffer.pop();
        }
        text.clear();
        // A byte order mark at the start of the file is no part of its first line.
        if self.number == 1 && self.buffer.starts_with(b"\xef\xbb\xbf") {
            self.buffer.drain(..3);
        }
        match std::str::from_utf8(&self.buffer) {
            Ok(valid) => text.push_str(valid),
            Err(_) => text.push_str(&String::from_utf8_lossy(&self.buffer)),
        }
        Ok(Some((self.number, complete)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_times_are_read_as_humantime_reads_them() {
        for text in [
            "1970-01-01T00:00:00.000Z",
            "2026-11-29T11:35:56.123Z",
            "2000-02-29T23:59:59.999Z",
            "2100-03-01T00:00:00.001Z",
            "2026-01-02T03:04:05.600Z",
        ] {
            assert_eq!(lanes_time_ms(text.as_bytes()), any_time_ms(text), "{text}");
        }
        assert_eq!(lanes_time_ms(b"2026-13-02T03:04:05.600Z"), None);
        assert_eq!(parse_ms("2026-01-02T03:04:05Z"), Some(1_767_323_045_000));
    }
}
