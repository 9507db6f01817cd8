//! `--junit FILE`: the run as JUnit XML for CI dashboards — a test suite per key, a test case per job.
//!
//! The document is built with `quick-junit`, which writes the XML and computes the counts
//! (`tests`, `failures`, `errors`, `skipped`) of each suite and of the whole run from the test
//! cases. A job's [`Entry`] becomes a test case named `seq N: COMMAND`, in the suite (and class)
//! named after its key, that is:
//! - `succeeded`: a success;
//! - `interrupted` for `superseded`: `<skipped message="superseded by seq N">`;
//! - `skipped` (`--resume`): `<skipped message="succeeded before (--resume)">`, or
//!   `superseded before` for one a newer job of its key replaced there;
//! - `failed`: `<failure type=REASON message=…>`, the message being `exit status 3`,
//!   `killed by SIGSEGV` or the spawn error's text;
//! - `interrupted` for `timeout`, `shutdown`, `fail_fast`: `<error type=REASON message=REASON>`;
//! - `rejected`: `<error type=REASON message=ERROR>`.
//!
//! A job's tries that were retried (`--retries`) are `<flakyFailure>` elements of a case that
//! succeeded in the end, `<rerunFailure>` elements of one that did not (the Maven Surefire
//! convention), each with its reason as `type`, its exit status as `message`, its start, its
//! time and its own stderr tail in `<system-err>` (when not empty).
//!
//! Failing and erroring cases carry the job's stderr tail in `<system-err>`; every case carries
//! `attempts`, `slot`, `exit_code`, `signal` (those that are set) and `leaked` as properties.
//!
//! Text that XML 1.0 cannot hold, or that would only be noise in it, is removed: ANSI escape
//! sequences, control characters and U+FFFE/U+FFFF; except in a key (a suite's name) and a
//! command (in a case's name), where they are shown escaped, so that keys stay apart and a
//! name shows the command that ran. The stderr tail keeps its newlines, and
//! its tabs as spaces to the next tab stop (`quick-junit` would drop tabs); names and
//! attributes are kept on one line.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

// chrono is here only because quick-junit's API takes `DateTime<FixedOffset>` timestamps: the
// report's times are `SystemTime`s, converted directly by `date_time`.
use chrono::{DateTime, FixedOffset, Utc};
use quick_junit::{
    NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestRerun, TestSuite, XmlString,
};

use super::entry::{millis, signal_name, written_duration_ms, Entry};
use super::NO_KEY;
use crate::core::{ExitFacts, FailReason, Outcome, SkipReason, StopReason};
use crate::output::framing::is_hidden;

/// Longest command, in characters, put into a test case name.
const COMMAND_CHARS: usize = 200;
/// Longest stderr tail, in bytes, kept per job (the caller already bounds it; this is a guard).
const STDERR_TAIL_BYTES: usize = 4096;
/// Tab stops of the stderr tail, in columns.
const TAB_STOP: usize = 8;

/// Collects what the JUnit file needs while the run goes on; memory is one small entry per
/// job (no output is kept beyond the tail given to `add`).
#[derive(Debug)]
pub(crate) struct JunitReport {
    /// Name of the `<testsuites>` element.
    name: String,
    /// When the run started.
    started_at: SystemTime,
    /// The latest `ended_at` of the entries added, to the whole millisecond, for the run's
    /// `time` when its end is not told ([`JunitReport::end`]).
    last_end: Option<SystemTime>,
    /// The run's end, as the summary's `duration_ms` counts it.
    run_end: Option<SystemTime>,
    /// One per distinct key, in the order first added.
    suites: Vec<Suite>,
    /// Key → index into `suites`.
    index: HashMap<Option<String>, usize>,
}

/// The jobs of one key.
#[derive(Debug)]
struct Suite {
    /// Cleaned key, or [`NO_KEY`].
    name: XmlString,
    /// Smallest seq among `cases`: the key's first appearance in the input.
    first_seq: u64,
    /// In the order added.
    cases: Vec<Case>,
}

/// What the document needs of one job.
#[derive(Debug)]
struct Case {
    seq: u64,
    /// `seq N: COMMAND`, cleaned.
    name: XmlString,
    time_ms: u64,
    /// When its last try started.
    started_at: Option<SystemTime>,
    verdict: Verdict,
    attempts: u32,
    slot: Option<u32>,
    exit_code: Option<i32>,
    /// The signal's name (always fit: `SIGSEGV`, `SIG40`).
    signal: Option<String>,
    leaked: bool,
    /// Cleaned stderr tail; only for failures and errors, and only when not empty.
    stderr: Option<XmlString>,
    /// Its tries that were retried (`--retries`), oldest first.
    reruns: Vec<Rerun>,
}

/// A try that was retried: a `<flakyFailure>` of a case that passed in the end, a
/// `<rerunFailure>` of one that did not (the Maven Surefire convention).
#[derive(Debug)]
struct Rerun {
    /// The reason.
    ty: &'static str,
    /// `exit status 3`, `killed by SIGSEGV`, `spawn error`.
    message: String,
    started_at: Option<SystemTime>,
    time: Option<Duration>,
    /// Its stderr tail, cleaned as the case's; `None` when empty.
    stderr: Option<String>,
}

#[derive(Debug)]
enum Verdict {
    /// Its earlier tries, if any, are `<flakyFailure>`s (from the record's tries).
    Success,
    Skipped {
        message: XmlString,
    },
    /// `<failure>` (`failure: true`) or `<error>`.
    NonSuccess {
        failure: bool,
        /// The reason.
        ty: &'static str,
        message: XmlString,
    },
}

impl JunitReport {
    /// An empty report for a run named `run_name` (the `<testsuites>` name) that started at
    /// `started_at`.
    pub(crate) fn new(run_name: &str, started_at: SystemTime) -> Self {
        Self {
            name: run_name.to_owned(),
            started_at,
            last_end: None,
            run_end: None,
            suites: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// The run ended at `at`: the document's `time` is from the run's start to it, as the
    /// report's summary counts its `duration_ms` (the input read to its end included).
    pub(crate) fn end(&mut self, at: SystemTime) {
        self.run_end = Some(at);
    }

    /// Adds one job's final entry; its `stderr_tail` (the last lines of its stderr, may be
    /// empty) is already bounded by the caller (≤ 4 KiB).
    pub(crate) fn add(&mut self, entry: &Entry<'_>) {
        let end = whole_millis(entry.ended_at);
        if self.last_end.is_none_or(|last| end > last) {
            self.last_end = Some(end);
        }
        let reruns = reruns(entry);
        let mut verdict = verdict(entry);
        let stderr = match &mut verdict {
            Verdict::NonSuccess { .. } => {
                Some(text_block(entry.stderr_tail)).filter(|s| !s.is_empty())
            }
            // Superseded or cancelled while it waited for its retry: a skipped case has no
            // `<rerunFailure>`, so its message tells of the failed tries, and its stderr stays.
            Verdict::Skipped { message } if !reruns.is_empty() => {
                let last = &reruns[reruns.len() - 1];
                let tries = match reruns.len() {
                    1 => "1 failed try".to_owned(),
                    n => format!("{n} failed tries"),
                };
                *message = format!(
                    "{}, after {tries} (the last: {})",
                    message.as_str(),
                    last.message
                )
                .into();
                skipped_tries_stderr(entry, &reruns)
            }
            Verdict::Success | Verdict::Skipped { .. } => None,
        };
        let name = match entry.command {
            Some(command) => format!(
                "seq {}: {}",
                entry.seq,
                command_name(command, COMMAND_CHARS)
            ),
            None => format!("seq {}: (invalid line {})", entry.seq, entry.line),
        };
        let case = Case {
            seq: entry.seq,
            name: name.into(),
            // As the record's `duration_ms`: its written `ended_at` minus its `started_at`.
            time_ms: entry
                .started_at
                .filter(|_| entry.started())
                .map_or(0, |started_at| {
                    written_duration_ms(started_at, entry.ended_at)
                }),
            started_at: entry.started_at,
            verdict,
            attempts: entry.attempts,
            slot: entry.slot,
            exit_code: entry.exit_code(),
            signal: entry.signal(),
            leaked: entry.leaked,
            stderr: stderr.map(XmlString::new),
            reruns,
        };

        let key = entry.key.map(str::to_owned);
        let suite = match self.index.get(&key) {
            Some(&i) => &mut self.suites[i],
            None => {
                let name = match entry.key {
                    Some(key) => key_name(key),
                    None => NO_KEY.to_owned(),
                };
                self.index.insert(key, self.suites.len());
                self.suites.push(Suite {
                    name: name.into(),
                    first_seq: entry.seq,
                    cases: Vec::new(),
                });
                self.suites.last_mut().expect("just pushed")
            }
        };
        suite.first_seq = suite.first_seq.min(entry.seq);
        suite.cases.push(case);
    }

    /// Renders the whole document (UTF-8 XML). Suites in order of each key's first appearance,
    /// test cases in seq order within a suite.
    ///
    /// A key's first appearance is its smallest seq, that is its first job in the input: jobs
    /// end (and are added) in another order, and the document does not depend on it.
    pub(crate) fn to_xml(&self) -> String {
        let mut report = Report::new(self.name.as_str());
        report.set_timestamp(date_time(self.started_at));
        if let Some(end) = self.run_end.or(self.last_end) {
            report.set_time(Duration::from_millis(written_duration_ms(
                self.started_at,
                end,
            )));
        }

        // `XmlString::new` is slow (it runs a terminal parser over the text): the texts of a job
        // were made once, in `add`, and the few short ones shared by many cases are made once
        // here; cloning them is a copy.
        let mut texts = Texts::default();
        let mut suites: Vec<&Suite> = self.suites.iter().collect();
        suites.sort_by_key(|suite| suite.first_seq);
        for suite in suites {
            let mut cases: Vec<&Case> = suite.cases.iter().collect();
            cases.sort_by_key(|case| case.seq);

            let mut test_suite = TestSuite::new(suite.name.clone());
            test_suite.set_time(Duration::from_millis(
                cases.iter().map(|case| case.time_ms).sum(),
            ));
            if let Some(first) = cases.iter().filter_map(|case| case.started_at).min() {
                test_suite.set_timestamp(date_time(first));
            }
            test_suite.add_test_cases(
                cases
                    .into_iter()
                    .map(|case| case.test_case(&suite.name, &mut texts)),
            );
            report.add_test_suite(test_suite);
        }

        report
            .to_string()
            .expect("a JUnit report always serialises to memory")
    }
}

/// `at` as the timestamp type quick-junit takes, in UTC. (It writes timestamps to the
/// millisecond, truncated.)
fn date_time(at: SystemTime) -> DateTime<FixedOffset> {
    DateTime::<Utc>::from(at).into()
}

/// `at` truncated to the whole millisecond, as the report's `ended_at` has it: the run's
/// `time` is measured to that.
fn whole_millis(at: SystemTime) -> SystemTime {
    match at.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => SystemTime::UNIX_EPOCH + Duration::from_millis(millis(since)),
        // Before 1970: no report gives such a time; leave it.
        Err(_) => at,
    }
}

/// Short texts made into [`XmlString`]s once per document.
#[derive(Default)]
struct Texts(HashMap<String, XmlString>);

impl Texts {
    fn get(&mut self, text: impl std::fmt::Display) -> XmlString {
        let text = text.to_string();
        match self.0.get(&text) {
            Some(xml) => xml.clone(),
            None => {
                let xml = XmlString::new(&text);
                self.0.insert(text, xml.clone());
                xml
            }
        }
    }

    fn property(&mut self, name: &str, value: impl std::fmt::Display) -> Property {
        Property {
            name: self.get(name),
            value: self.get(value),
        }
    }
}

impl Case {
    fn test_case(&self, classname: &XmlString, texts: &mut Texts) -> TestCase {
        let mut status = match &self.verdict {
            Verdict::Success => TestCaseStatus::success(),
            Verdict::Skipped { message } => {
                let mut status = TestCaseStatus::skipped();
                status.set_message(message.clone());
                status
            }
            Verdict::NonSuccess {
                failure,
                ty,
                message,
            } => {
                let kind = if *failure {
                    NonSuccessKind::Failure
                } else {
                    NonSuccessKind::Error
                };
                let mut status = TestCaseStatus::non_success(kind);
                status.set_type(texts.get(*ty)).set_message(message.clone());
                status
            }
        };

        status.add_reruns(self.reruns.iter().map(|rerun| {
            let mut run = TestRerun::new(NonSuccessKind::Failure);
            run.set_type(texts.get(rerun.ty))
                .set_message(XmlString::new(&rerun.message));
            if let Some(started_at) = rerun.started_at {
                run.set_timestamp(date_time(started_at));
            }
            if let Some(time) = rerun.time {
                run.set_time(time);
            }
            if let Some(stderr) = &rerun.stderr {
                run.set_system_err(XmlString::new(stderr));
            }
            run
        }));
        let mut case = TestCase::new(self.name.clone(), status);
        case.set_classname(classname.clone())
            .set_time(Duration::from_millis(self.time_ms));
        if let Some(started_at) = self.started_at {
            case.set_timestamp(date_time(started_at));
        }
        case.add_property(texts.property("attempts", self.attempts));
        if let Some(slot) = self.slot {
            case.add_property(texts.property("slot", slot));
        }
        if let Some(code) = self.exit_code {
            case.add_property(texts.property("exit_code", code));
        }
        if let Some(signal) = &self.signal {
            case.add_property(texts.property("signal", signal));
        }
        case.add_property(texts.property("leaked", self.leaked));
        if let Some(stderr) = &self.stderr {
            case.set_system_err(stderr.clone());
        }
        case
    }
}

/// How a job shows in the document.
fn verdict(entry: &Entry<'_>) -> Verdict {
    // lanes' own words about the job, quoting what the user gave (a path, a shell): what
    // they quote is escaped as on the terminal (`\u{1b}`), not dropped, so that it still
    // names what it was.
    let error = entry
        .error
        .map(|e| one_line(&crate::output::framing::escape_controls(e), usize::MAX));
    // The `type` attribute's text (and the message of an interruption).
    let reason = entry.outcome.reason().unwrap_or(entry.outcome.name());
    match entry.outcome {
        Outcome::Succeeded => Verdict::Success,
        Outcome::Interrupted(StopReason::Superseded) => Verdict::Skipped {
            message: match entry.superseded_by {
                Some(seq) => format!("superseded by seq {seq}").into(),
                None => "superseded".into(),
            },
        },
        Outcome::Skipped(SkipReason::SucceededBefore) => Verdict::Skipped {
            message: "succeeded before (--resume)".into(),
        },
        Outcome::Skipped(SkipReason::SupersededBefore) => Verdict::Skipped {
            message: "superseded before (--resume): a newer job of its key replaced it".into(),
        },
        Outcome::Interrupted(StopReason::Cancelled) => Verdict::Skipped {
            message: "cancelled (lanes cancel)".into(),
        },
        Outcome::Failed(why) => Verdict::NonSuccess {
            failure: true,
            ty: reason,
            message: failure_message(entry, why, error, reason).into(),
        },
        Outcome::Rejected(_) => Verdict::NonSuccess {
            failure: false,
            ty: reason,
            message: error.unwrap_or_else(|| reason.to_owned()).into(),
        },
        Outcome::Interrupted(
            StopReason::Timeout
            | StopReason::Shutdown
            | StopReason::FailFast
            | StopReason::ServerLost
            | StopReason::LockLost,
        ) => Verdict::NonSuccess {
            failure: false,
            ty: reason,
            message: reason.into(),
        },
    }
}

/// The stderr of a skipped case whose job made tries (superseded or cancelled during its
/// retries): each try's tail, oldest first, headed by its number when there are several; the
/// last try's own tail when it was stopped as it ran (it was not retried).
fn skipped_tries_stderr(entry: &Entry<'_>, reruns: &[Rerun]) -> Option<String> {
    let mut blocks: Vec<(usize, String)> = reruns
        .iter()
        .enumerate()
        .filter_map(|(i, rerun)| rerun.stderr.clone().map(|text| (i + 1, text)))
        .collect();
    // Its last try was stopped as it ran, or the tails of the tries retried were not kept.
    if reruns.len() < entry.tries.len() || blocks.is_empty() {
        let last = text_block(entry.stderr_tail);
        if !last.is_empty() {
            blocks.push((entry.tries.len(), last));
        }
    }
    if blocks.len() <= 1 {
        return blocks.pop().map(|(_, text)| text);
    }
    let mut text = String::new();
    for (attempt, block) in blocks {
        text.push_str(&format!("--- try {attempt} ---\n{block}"));
        if !text.ends_with('\n') {
            text.push('\n');
        }
    }
    Some(text)
}

/// The tries of `entry` that were retried: every try but the last, and the last too when the
/// job did not end with it (a stop while it waited for its retry).
fn reruns(entry: &Entry<'_>) -> Vec<Rerun> {
    let retried = match entry.tries.split_last() {
        Some((last, earlier)) if last.outcome == entry.outcome => earlier,
        _ => &entry.tries[..],
    };
    retried
        .iter()
        .enumerate()
        .map(|(i, t)| Rerun {
            ty: t.outcome.reason().unwrap_or(t.outcome.name()),
            message: match t.exit {
                Some(ExitFacts::Exited(code)) => format!("exit status {code}"),
                Some(ExitFacts::Signaled(signal)) => format!("killed by {}", signal_name(signal)),
                None => "spawn error".to_owned(),
            },
            started_at: t.started_at,
            time: t.started_at.map(|started_at| {
                Duration::from_millis(written_duration_ms(started_at, t.ended_at))
            }),
            stderr: entry
                .retried_tails
                .get(i)
                .map(|tail| text_block(tail))
                .filter(|text| !text.is_empty()),
        })
        .collect()
}

/// `exit status 3`, `killed by SIGSEGV`, or the spawn error's text (`error`, cleaned);
/// `reason` is the reason's word, for a failure with neither.
fn failure_message(
    entry: &Entry<'_>,
    why: FailReason,
    error: Option<String>,
    reason: &str,
) -> String {
    let spawn_error = why == FailReason::SpawnError;
    match (entry.signal(), entry.exit_code(), error) {
        (_, _, Some(error)) if spawn_error => error,
        (Some(signal), _, _) => format!("killed by {signal}"),
        (None, Some(code), _) => format!("exit status {code}"),
        (None, None, Some(error)) => error,
        (None, None, None) if spawn_error => "spawn error".to_owned(),
        (None, None, None) => reason.to_owned(),
    }
}

/// Whether `c` may go into the document. XML 1.0 has no place for the C0 controls other than
/// tab, newline and carriage return, nor for U+FFFE and U+FFFF; DEL and the C1 controls are
/// allowed but discouraged, and go too. (Callers deal with tab and newline first.)
fn kept(c: char) -> bool {
    !(c.is_control() || matches!(c, '\u{fffe}' | '\u{ffff}'))
}

/// Whether `c` goes into a suite's or a case's name as it is: what XML can hold, less what
/// lanes escapes wherever it shows a key ([`is_hidden`]: bidi controls that would reorder the
/// name in a CI's page, as on the terminal).
fn shown_in_name(c: char) -> bool {
    kept(c) && !is_hidden(c)
}

/// The characters of a text without its ANSI escape sequences: CSI (`ESC [ … final`), strings
/// (OSC, DCS, SOS, PM, APC: to BEL or `ESC \`, and never past a newline) and the other
/// `ESC …` escapes. A lone ESC goes too.
struct Unescaped<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
}

impl<'a> Unescaped<'a> {
    fn new(text: &'a str) -> Self {
        Self {
            chars: text.chars().peekable(),
        }
    }

    /// Consumes the next character if `wanted` says so.
    fn skip_if(&mut self, wanted: impl Fn(char) -> bool) -> bool {
        self.chars.next_if(|&c| wanted(c)).is_some()
    }
}

impl Iterator for Unescaped<'_> {
    type Item = char;

    fn next(&mut self) -> Option<char> {
        loop {
            let c = self.chars.next()?;
            if c != '\u{1b}' {
                return Some(c);
            }
            if self.skip_if(|c| c == '[') {
                while self.skip_if(|c| ('\u{20}'..='\u{3f}').contains(&c)) {}
                self.skip_if(|c| ('\u{40}'..='\u{7e}').contains(&c));
            } else if self.skip_if(|c| matches!(c, ']' | 'P' | 'X' | '^' | '_')) {
                while let Some(&c) = self.chars.peek() {
                    match c {
                        '\u{7}' => {
                            self.chars.next();
                            break;
                        }
                        '\n' => break,
                        '\u{1b}' => {
                            // `ESC \` ends the string; another escape starts after it.
                            let mut ahead = self.chars.clone();
                            ahead.next();
                            if ahead.peek() == Some(&'\\') {
                                self.chars = ahead;
                                self.chars.next();
                            }
                            break;
                        }
                        _ => {
                            self.chars.next();
                        }
                    }
                }
            } else {
                while self.skip_if(|c| ('\u{20}'..='\u{2f}').contains(&c)) {}
                self.skip_if(|c| ('\u{30}'..='\u{7e}').contains(&c));
            }
        }
    }
}

/// `text` on one line for a name or an attribute: tabs and line breaks become spaces, other
/// unfit characters go, and at most `max` characters are kept.
fn one_line(text: &str, max: usize) -> String {
    Unescaped::new(text)
        .map(|c| {
            if matches!(c, '\t' | '\n' | '\r') {
                ' '
            } else {
                c
            }
        })
        .filter(|&c| kept(c))
        .take(max)
        .collect()
}

/// A job's command in its case's name, on one line: tabs and line breaks become spaces, and
/// what XML cannot hold is shown escaped as in a key (`\u{1b}`), not dropped, so that the name
/// shows the command that ran; at most `max` of the command's characters.
fn command_name(command: &str, max: usize) -> String {
    let mut name = String::with_capacity(command.len().min(max));
    for c in command.chars().take(max) {
        match c {
            '\t' | '\n' | '\r' => name.push(' '),
            c if shown_in_name(c) => name.push(c),
            c => name.extend(c.escape_default()),
        }
    }
    name
}

/// A key as a suite's name and its cases' class name: what XML cannot hold shown escaped
/// (`\u{1}`, `\n`, `\u{1b}`), as lanes shows keys on the terminal, not dropped: two keys
/// that differ only there stay two suites.
fn key_name(key: &str) -> String {
    if super::shown_quoted(key) {
        // Not the suite of the jobs that had none, nor another key's: quoted and escaped.
        return format!("{key:?}");
    }
    let mut name = String::with_capacity(key.len());
    for c in key.chars() {
        if shown_in_name(c) {
            name.push(c);
        } else {
            name.extend(c.escape_default());
        }
    }
    name
}

/// The stderr tail as text: at most its last [`STDERR_TAIL_BYTES`] bytes, lossy UTF-8, tabs
/// expanded to spaces, newlines kept and other unfit characters removed.
fn text_block(bytes: &[u8]) -> String {
    let mut start = bytes.len().saturating_sub(STDERR_TAIL_BYTES);
    // Don't start inside a UTF-8 sequence.
    while start < bytes.len() && start > 0 && bytes[start] & 0xc0 == 0x80 {
        start += 1;
    }
    let text = String::from_utf8_lossy(&bytes[start..]);
    let mut out = String::with_capacity(text.len());
    let mut column = 0;
    for c in Unescaped::new(&text) {
        match c {
            '\n' => {
                out.push('\n');
                column = 0;
            }
            '\t' => {
                let spaces = TAB_STOP - column % TAB_STOP;
                out.extend(std::iter::repeat_n(' ', spaces));
                column += spaces;
            }
            c if kept(c) => {
                out.push(c);
                column += 1;
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {

    use nix::sys::signal::Signal;

    use super::*;
    use crate::core::{ExitFacts, RejectReason};
    use crate::report::entry::TryEntry;

    const WEIRD_KEY: &str = "we<&\"'>ird\u{1}\u{ffff}";
    const WEIRD_NAME: &str = "we<&\"'>ird\\u{1}\\u{ffff}";

    /// A test's time, written as the JSON report writes it.
    fn at(text: &str) -> SystemTime {
        humantime::parse_rfc3339(text).expect("a valid test time")
    }

    /// An entry with the fields a test does not care about set as for a job that never started.
    fn entry<'a>(
        seq: u64,
        key: Option<&'a str>,
        command: Option<&'a str>,
        outcome: Outcome,
    ) -> Entry<'a> {
        Entry {
            seq,
            line: seq,
            key,
            command,
            outcome,
            exit: None,
            attempts: 0,
            slot: None,
            started_at: None,
            ended_at: at(&format!("2026-11-29T11:36:{:02}.000Z", seq % 60)),
            duration: None,
            waited: None,
            leaked: false,
            superseded_by: None,
            batch: None,
            error: None,
            stderr_tail: b"",
            retried_tails: &[],
            cpu: None,
            memory_peak: None,
            tries: Vec::new(),
            lock: None,
            lock_waited_on: None,
            grant: None,
            waits: Vec::new(),
        }
    }

    fn started(mut entry: Entry<'_>, duration_ms: u64, slot: u32) -> Entry<'_> {
        let started_at = at("2026-11-29T11:35:56.123Z");
        entry.started_at = Some(started_at);
        entry.duration = Some(Duration::from_millis(duration_ms));
        // As a real entry's: the duration is from its start to its end.
        entry.ended_at = started_at + Duration::from_millis(duration_ms);
        entry.waited = Some(Duration::ZERO);
        entry.attempts = 1;
        entry.slot = Some(slot);
        entry
    }

    /// Three keys (one with markup and control characters, and null), every kind of outcome,
    /// added in an order that is not the seq order.
    fn mixed() -> JunitReport {
        let mut report = JunitReport::new("lanes jobs.tsv", at("2026-11-29T11:35:56.000Z"));

        let mut e = started(
            entry(
                2,
                Some(WEIRD_KEY),
                Some("run \u{1}thing"),
                Outcome::Failed(FailReason::ExitStatus),
            ),
            250,
            2,
        );
        e.exit = Some(ExitFacts::Exited(3));
        e.stderr_tail = b"line one\n\terror: boom\x07\x1b[31m red\x1b[0m \xff\n";
        report.add(&e);

        let mut e = started(
            entry(1, Some("alpha"), Some("make build"), Outcome::Succeeded),
            1500,
            1,
        );
        e.exit = Some(ExitFacts::Exited(0));
        e.stderr_tail = b"warning: unused\n";
        report.add(&e);

        let mut e = entry(4, None, None, Outcome::Rejected(RejectReason::InvalidInput));
        e.error = Some("no tab in line 4");
        report.add(&e);

        let mut e = started(
            entry(
                3,
                Some("alpha"),
                Some("sleep 100"),
                Outcome::Interrupted(StopReason::Timeout),
            ),
            5000,
            1,
        );
        e.exit = Some(ExitFacts::Signaled(Signal::SIGTERM as i32));
        e.stderr_tail = b"waiting for lock\n";
        report.add(&e);

        let mut e = started(
            entry(
                5,
                Some("alpha"),
                Some("./crash"),
                Outcome::Failed(FailReason::Killed),
            ),
            12,
            2,
        );
        e.exit = Some(ExitFacts::Signaled(Signal::SIGSEGV as i32));
        e.leaked = true;
        e.stderr_tail = b"Segmentation fault (core dumped)\n";
        report.add(&e);

        let mut e = entry(
            6,
            Some(WEIRD_KEY),
            Some("old"),
            Outcome::Interrupted(StopReason::Superseded),
        );
        e.superseded_by = Some(8);
        report.add(&e);

        let mut e = entry(8, Some(WEIRD_KEY), Some("new"), Outcome::Succeeded);
        e = started(e, 0, 1);
        e.exit = Some(ExitFacts::Exited(0));
        report.add(&e);

        let mut e = entry(
            7,
            Some(WEIRD_KEY),
            Some("nope"),
            Outcome::Failed(FailReason::SpawnError),
        );
        e.attempts = 1;
        e.error = Some("No such file or directory (os error 2)");
        report.add(&e);

        let mut e = entry(
            9,
            Some("alpha"),
            Some("late"),
            Outcome::Rejected(RejectReason::QueueFull),
        );
        e.error = Some("the queue is full");
        report.add(&e);

        report
    }

    fn attr<'a>(node: roxmltree::Node<'a, '_>, name: &str) -> &'a str {
        node.attribute(name)
            .unwrap_or_else(|| panic!("<{}> has no {name}", node.tag_name().name()))
    }

    fn counts<'a>(node: roxmltree::Node<'a, '_>) -> [&'a str; 4] {
        ["tests", "failures", "errors", "skipped"].map(|name| attr(node, name))
    }

    fn children<'a, 'i>(node: roxmltree::Node<'a, 'i>, tag: &str) -> Vec<roxmltree::Node<'a, 'i>> {
        node.children()
            .filter(|child| child.has_tag_name(tag))
            .collect()
    }

    fn child<'a, 'i>(node: roxmltree::Node<'a, 'i>, tag: &str) -> Option<roxmltree::Node<'a, 'i>> {
        let mut found = children(node, tag);
        assert!(found.len() <= 1, "more than one <{tag}>");
        found.pop()
    }

    fn case<'a, 'i>(doc: &'a roxmltree::Document<'i>, name: &str) -> roxmltree::Node<'a, 'i> {
        doc.descendants()
            .find(|node| node.has_tag_name("testcase") && node.attribute("name") == Some(name))
            .unwrap_or_else(|| panic!("no test case {name:?}"))
    }

    fn properties(case: roxmltree::Node<'_, '_>) -> Vec<(String, String)> {
        let Some(properties) = child(case, "properties") else {
            return Vec::new();
        };
        children(properties, "property")
            .into_iter()
            .map(|p| (attr(p, "name").to_owned(), attr(p, "value").to_owned()))
            .collect()
    }

    fn props(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_key_that_reads_as_no_key_names_a_suite_of_its_own() {
        assert_eq!(key_name("(no key)"), "\"(no key)\"");
        assert_eq!(key_name("\"(no key)\""), "\"\\\"(no key)\\\"\"");
        assert_ne!(key_name("(no key)"), NO_KEY);
        assert_eq!(key_name("alpha"), "alpha");
    }

    #[test]
    fn suites_counts_and_order() {
        let xml = mixed().to_xml();
        let doc = roxmltree::Document::parse(&xml).expect("valid XML");
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "testsuites");
        assert_eq!(attr(root, "name"), "lanes jobs.tsv");
        assert_eq!(counts(root), ["9", "3", "3", "1"]);
        assert_eq!(attr(root, "timestamp"), "2026-11-29T11:35:56.000+00:00");
        // To the latest ended_at, seq 9's 11:36:09.
        assert_eq!(attr(root, "time"), "13.000");

        let suites = children(root, "testsuite");
        let names: Vec<&str> = suites.iter().map(|s| attr(*s, "name")).collect();
        assert_eq!(names, ["alpha", WEIRD_NAME, "(no key)"]);
        assert_eq!(counts(suites[0]), ["4", "1", "2", "0"]);
        assert_eq!(counts(suites[1]), ["4", "2", "0", "1"]);
        assert_eq!(counts(suites[2]), ["1", "0", "1", "0"]);
        assert_eq!(attr(suites[0], "time"), "6.512");

        let case_names = |suite: roxmltree::Node<'_, '_>| -> Vec<String> {
            children(suite, "testcase")
                .into_iter()
                .map(|c| {
                    assert_eq!(attr(c, "classname"), attr(suite, "name"));
                    attr(c, "name").to_owned()
                })
                .collect()
        };
        assert_eq!(
            case_names(suites[0]),
            [
                "seq 1: make build",
                "seq 3: sleep 100",
                "seq 5: ./crash",
                "seq 9: late"
            ]
        );
        assert_eq!(
            case_names(suites[1]),
            [
                "seq 2: run \\u{1}thing",
                "seq 6: old",
                "seq 7: nope",
                "seq 8: new"
            ]
        );
        assert_eq!(case_names(suites[2]), ["seq 4: (invalid line 4)"]);
    }

    #[test]
    fn outcomes_map_to_elements() {
        let xml = mixed().to_xml();
        let doc = roxmltree::Document::parse(&xml).expect("valid XML");

        // succeeded: no status element, no system-err even with a tail given.
        let ok = case(&doc, "seq 1: make build");
        for tag in ["failure", "error", "skipped", "system-err", "system-out"] {
            assert!(child(ok, tag).is_none(), "success has <{tag}>");
        }
        assert_eq!(attr(ok, "time"), "1.500");
        assert_eq!(attr(ok, "timestamp"), "2026-11-29T11:35:56.123+00:00");
        assert_eq!(
            properties(ok),
            props(&[
                ("attempts", "1"),
                ("slot", "1"),
                ("exit_code", "0"),
                ("leaked", "false")
            ])
        );

        let exit = case(&doc, "seq 2: run \\u{1}thing");
        let failure = child(exit, "failure").expect("exit status is a failure");
        assert_eq!(attr(failure, "type"), "exit_status");
        assert_eq!(attr(failure, "message"), "exit status 3");
        assert!(child(exit, "error").is_none());
        let err = child(exit, "system-err")
            .expect("stderr tail")
            .text()
            .unwrap();
        assert_eq!(err, "line one\n        error: boom red \u{fffd}\n");

        let timeout = case(&doc, "seq 3: sleep 100");
        let error = child(timeout, "error").expect("timeout is an error");
        assert_eq!(attr(error, "type"), "timeout");
        assert_eq!(attr(error, "message"), "timeout");
        assert!(child(timeout, "failure").is_none());
        assert_eq!(
            child(timeout, "system-err").unwrap().text(),
            Some("waiting for lock\n")
        );
        assert_eq!(attr(timeout, "time"), "5.000");

        let invalid = case(&doc, "seq 4: (invalid line 4)");
        let error = child(invalid, "error").expect("rejected is an error");
        assert_eq!(attr(error, "type"), "invalid_input");
        assert_eq!(attr(error, "message"), "no tab in line 4");
        assert_eq!(attr(invalid, "classname"), "(no key)");
        assert_eq!(attr(invalid, "time"), "0.000");
        assert!(invalid.attribute("timestamp").is_none());
        assert!(child(invalid, "system-err").is_none());
        assert_eq!(
            properties(invalid),
            props(&[("attempts", "0"), ("leaked", "false")])
        );

        let killed = case(&doc, "seq 5: ./crash");
        let failure = child(killed, "failure").expect("killed is a failure");
        assert_eq!(attr(failure, "type"), "killed");
        assert_eq!(attr(failure, "message"), "killed by SIGSEGV");
        assert_eq!(
            child(killed, "system-err").unwrap().text(),
            Some("Segmentation fault (core dumped)\n")
        );
        assert_eq!(
            properties(killed),
            props(&[
                ("attempts", "1"),
                ("slot", "2"),
                ("signal", "SIGSEGV"),
                ("leaked", "true")
            ])
        );

        let superseded = case(&doc, "seq 6: old");
        let skipped = child(superseded, "skipped").expect("superseded is skipped");
        assert_eq!(attr(skipped, "message"), "superseded by seq 8");
        assert!(child(superseded, "error").is_none());
        assert!(child(superseded, "failure").is_none());

        let spawn = case(&doc, "seq 7: nope");
        let failure = child(spawn, "failure").expect("spawn error is a failure");
        assert_eq!(attr(failure, "type"), "spawn_error");
        assert_eq!(
            attr(failure, "message"),
            "No such file or directory (os error 2)"
        );

        let full = case(&doc, "seq 9: late");
        let error = child(full, "error").expect("queue_full is an error");
        assert_eq!(attr(error, "type"), "queue_full");
        assert_eq!(attr(error, "message"), "the queue is full");
    }

    #[test]
    fn unfit_text_is_removed() {
        let mut report = JunitReport::new("run\u{0}", SystemTime::UNIX_EPOCH);
        let long = format!("echo {}\u{1}\u{fffe}", "x".repeat(400));
        let mut e = entry(
            1,
            Some("k\u{7f}\u{85}ey\n2\u{1b}[1m"),
            Some(&long),
            Outcome::Failed(FailReason::SpawnError),
        );
        e.error = Some("bad\u{0}\u{b} thing");
        e.stderr_tail = "\u{1b}]0;title\u{7}\ttab\r\nend\u{c}\u{ffff}".as_bytes();
        report.add(&e);
        let xml = report.to_xml();
        for bad in [
            '\u{0}', '\u{1}', '\u{7}', '\u{b}', '\u{c}', '\u{1b}', '\u{7f}', '\u{85}', '\u{fffe}',
            '\u{ffff}', '\r',
        ] {
            assert!(!xml.contains(bad), "{bad:?} in {xml}");
        }
        let doc = roxmltree::Document::parse(&xml).expect("valid XML");
        assert_eq!(attr(doc.root_element(), "name"), "run");
        let suite = child(doc.root_element(), "testsuite").unwrap();
        // A key is escaped, not cut: two keys that differ only in what XML cannot hold stay
        // two suites.
        assert_eq!(attr(suite, "name"), "k\\u{7f}\\u{85}ey\\n2\\u{1b}[1m");
        let case = child(suite, "testcase").unwrap();
        assert_eq!(
            attr(case, "name"),
            format!("seq 1: echo {}", "x".repeat(195))
        );
        // lanes' words about the job are escaped as a key is: what they quote (a path) still
        // names what it was.
        assert_eq!(
            attr(child(case, "failure").unwrap(), "message"),
            "bad\\u{0}\\u{b} thing"
        );
        // A command's unfit characters are shown escaped in its case's name, the text after
        // them kept: it names the command that ran.
        let mut report = JunitReport::new("run", SystemTime::UNIX_EPOCH);
        report.add(&entry(
            1,
            Some("k"),
            Some("echo \"a\u{1b}\"; echo b\u{1}c\tx\ny"),
            Outcome::Succeeded,
        ));
        let xml = report.to_xml();
        let doc = roxmltree::Document::parse(&xml).expect("valid XML");
        let suite = child(doc.root_element(), "testsuite").unwrap();
        assert_eq!(
            attr(child(suite, "testcase").unwrap(), "name"),
            "seq 1: echo \"a\\u{1b}\"; echo b\\u{1}c x y"
        );
        assert_eq!(
            child(case, "system-err").unwrap().text(),
            Some("        tab\nend")
        );
        // Bidi controls and the line separators are escaped in names too, as on the
        // terminal: they would reorder or break the name in a CI's page.
        let mut report = JunitReport::new("run", SystemTime::UNIX_EPOCH);
        report.add(&entry(
            1,
            Some("bidi\u{202e}evil\u{202c}\u{2028}"),
            Some("true # \u{2066}x\u{61c}"),
            Outcome::Succeeded,
        ));
        let xml = report.to_xml();
        for bad in ['\u{202e}', '\u{202c}', '\u{2028}', '\u{2066}', '\u{61c}'] {
            assert!(!xml.contains(bad), "{bad:?} in {xml}");
        }
        let doc = roxmltree::Document::parse(&xml).expect("valid XML");
        let suite = child(doc.root_element(), "testsuite").unwrap();
        assert_eq!(attr(suite, "name"), "bidi\\u{202e}evil\\u{202c}\\u{2028}");
        assert_eq!(
            attr(child(suite, "testcase").unwrap(), "name"),
            "seq 1: true # \\u{2066}x\\u{61c}"
        );
    }

    #[test]
    fn stderr_tail_is_bounded() {
        let mut tail = "é".repeat(3000).into_bytes(); // 6000 bytes
        tail.extend_from_slice(b"last line\n");
        let text = text_block(&tail);
        assert!(text.len() <= STDERR_TAIL_BYTES, "{} bytes", text.len());
        assert!(text.ends_with("éélast line\n"));
        assert!(!text.contains('\u{fffd}'), "cut inside a character");
        assert_eq!(text_block(b""), "");
    }

    /// A job superseded (or cancelled) while it waited for its retry keeps its failed try:
    /// its skipped case says so, with the try's exit status, and keeps its stderr tail.
    #[test]
    fn a_job_superseded_while_it_waited_for_its_retry_tells_of_its_failed_try() {
        let mut report = JunitReport::new("run", at("2026-11-29T11:35:56.000Z"));
        let mut e = started(
            entry(
                1,
                Some("a"),
                Some("build"),
                Outcome::Interrupted(StopReason::Superseded),
            ),
            40,
            1,
        );
        e.superseded_by = Some(2);
        e.exit = Some(ExitFacts::Exited(5));
        e.stderr_tail = b"boom\n";
        e.tries = vec![TryEntry {
            slot: Some(1),
            started_at: e.started_at,
            ended_at: e.ended_at,
            duration: e.duration,
            outcome: Outcome::Failed(FailReason::ExitStatus),
            exit: Some(ExitFacts::Exited(5)),
        }];
        report.add(&e);
        let mut e = entry(
            3,
            Some("b"),
            Some("old"),
            Outcome::Interrupted(StopReason::Superseded),
        );
        e.superseded_by = Some(4);
        e.stderr_tail = b"never shown\n";
        report.add(&e);
        let xml = report.to_xml();
        let doc = roxmltree::Document::parse(&xml).expect("valid XML");
        let retried = case(&doc, "seq 1: build");
        let skipped = child(retried, "skipped").expect("superseded is skipped");
        assert_eq!(
            attr(skipped, "message"),
            "superseded by seq 2, after 1 failed try (the last: exit status 5)"
        );
        assert_eq!(child(retried, "system-err").unwrap().text(), Some("boom\n"));
        let plain = case(&doc, "seq 3: old");
        assert_eq!(
            attr(child(plain, "skipped").unwrap(), "message"),
            "superseded by seq 4"
        );
        assert!(child(plain, "system-err").is_none());
    }

    #[test]
    fn a_job_superseded_as_its_retry_ran_keeps_every_try_s_stderr() {
        let mut report = JunitReport::new("run", at("2026-11-29T11:35:56.000Z"));
        let mut e = started(
            entry(
                1,
                Some("a"),
                Some("build"),
                Outcome::Interrupted(StopReason::Superseded),
            ),
            40,
            1,
        );
        e.superseded_by = Some(2);
        e.exit = Some(ExitFacts::Signaled(15));
        let failed = TryEntry {
            slot: Some(1),
            started_at: e.started_at,
            ended_at: e.ended_at,
            duration: e.duration,
            outcome: Outcome::Failed(FailReason::ExitStatus),
            exit: Some(ExitFacts::Exited(5)),
        };
        e.tries = vec![
            failed,
            TryEntry {
                outcome: Outcome::Interrupted(StopReason::Superseded),
                exit: Some(ExitFacts::Signaled(15)),
                ..failed
            },
        ];
        let retried_tails = [b"first try's error\n".to_vec()];
        e.retried_tails = &retried_tails;
        e.stderr_tail = b"second try, stopped\n";
        report.add(&e);
        let xml = report.to_xml();
        let doc = roxmltree::Document::parse(&xml).expect("valid XML");
        let case = case(&doc, "seq 1: build");
        assert_eq!(
            child(case, "system-err").unwrap().text(),
            Some("--- try 1 ---\nfirst try's error\n--- try 2 ---\nsecond try, stopped\n")
        );
    }

    #[test]
    fn empty_run() {
        let xml = JunitReport::new("empty", SystemTime::UNIX_EPOCH).to_xml();
        let doc = roxmltree::Document::parse(&xml).expect("valid XML");
        assert_eq!(counts(doc.root_element()), ["0", "0", "0", "0"]);
        assert!(children(doc.root_element(), "testsuite").is_empty());
    }

    #[test]
    fn times_to_the_millisecond_as_in_the_json_report() {
        let micros = |n: u64| SystemTime::UNIX_EPOCH + Duration::from_micros(n);
        let mut report = JunitReport::new("run", micros(600));
        let mut e = started(entry(1, Some("k"), Some("c"), Outcome::Succeeded), 0, 1);
        e.started_at = Some(micros(123_900));
        e.duration = Some(Duration::from_micros(1_499_600));
        e.ended_at = micros(1_623_500);
        report.add(&e);
        let xml = report.to_xml();
        let doc = roxmltree::Document::parse(&xml).expect("valid XML");
        let root = doc.root_element();
        assert_eq!(attr(root, "timestamp"), "1970-01-01T00:00:00.000+00:00");
        // From the start to `ended_at` as the report writes them (0.000 and 1.623).
        assert_eq!(attr(root, "time"), "1.623");
        let suite = child(root, "testsuite").unwrap();
        // The record's `duration_ms`: 1.623 - 0.123 as written (the exact 1.4996 cut to 1.499
        // disagreed with it).
        assert_eq!(attr(suite, "time"), "1.500");
        assert_eq!(attr(suite, "timestamp"), "1970-01-01T00:00:00.123+00:00");
        let case = child(suite, "testcase").unwrap();
        assert_eq!(attr(case, "time"), "1.500");
        assert_eq!(attr(case, "timestamp"), "1970-01-01T00:00:00.123+00:00");
        // The run's end, once told (the input ended after the last job): the summary's.
        report.end(micros(2_000_400));
        let xml = report.to_xml();
        let doc = roxmltree::Document::parse(&xml).expect("valid XML");
        assert_eq!(attr(doc.root_element(), "time"), "2.000");
    }

    #[test]
    fn ten_thousand_jobs_render_whole() {
        let tail = "error: something went wrong at step 42\n".repeat(100);
        let command = format!("./run-step --with many --arguments {}", "y".repeat(150));
        let mut report = JunitReport::new("big", SystemTime::now());
        for seq in (1..=10_000u64).rev() {
            let key = format!("key-{}", seq % 100);
            let outcome = if seq % 10 == 0 {
                Outcome::Failed(FailReason::ExitStatus)
            } else {
                Outcome::Succeeded
            };
            let mut e = started(entry(seq, Some(&key), Some(&command), outcome), seq, 1);
            if let Outcome::Failed(_) = outcome {
                e.exit = Some(ExitFacts::Exited(1));
            }
            e.stderr_tail = tail.as_bytes();
            report.add(&e);
        }

        // Its speed (about 0.05 s optimised) is a benchmark's to watch, not a test's: a timed
        // assertion fails on a loaded machine.
        let xml = report.to_xml();

        let doc = roxmltree::Document::parse(&xml).expect("valid XML");
        let root = doc.root_element();
        assert_eq!(counts(root), ["10000", "1000", "0", "0"]);
        let suites = children(root, "testsuite");
        assert_eq!(suites.len(), 100);
        // key-1 first appears at seq 1, key-0 at seq 100.
        assert_eq!(attr(suites[0], "name"), "key-1");
        assert_eq!(attr(suites[99], "name"), "key-0");
        assert_eq!(counts(suites[0]), ["100", "0", "0", "0"]);
        assert_eq!(counts(suites[99]), ["100", "100", "0", "0"]);
        let cases = children(suites[0], "testcase");
        assert_eq!(cases.len(), 100);
        assert_eq!(attr(cases[0], "name"), format!("seq 1: {command}"));
        let seqs: Vec<u64> = cases
            .iter()
            .map(|c| {
                attr(*c, "name")[4..]
                    .split(':')
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap()
            })
            .collect();
        assert_eq!(seqs, (0..100).map(|i| 1 + 100 * i).collect::<Vec<u64>>());
        let failed = children(suites[99], "testcase")[0];
        let err = child(failed, "system-err").unwrap().text().unwrap();
        assert_eq!(err, tail);
    }
}
