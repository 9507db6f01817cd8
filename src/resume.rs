//! `--resume REPORT`: which jobs of an earlier run already succeeded, matched by key, command
//! and occurrence number (the n-th identical key+command pair in input order), so that a run
//! can be repeated without redoing them (SPEC §5.2).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde::Deserialize;

use crate::core::SkipReason;
use crate::report::json::SCHEMA_VERSION;

/// Whether `line`, which is not a whole record, is the beginning of a `run` record torn by a
/// crash: it begins as every report does, or is a beginning of that.
fn is_torn_run_record(line: &str) -> bool {
    line.starts_with(RUN_PREFIX) || RUN_PREFIX.starts_with(line)
}

/// The part of a report line resuming needs: any record's `type`, a `run` record's `schema`,
/// a job record's key, command, outcome and reason.
#[derive(Debug, Deserialize)]
struct PastRecord {
    /// Empty when the record has none.
    #[serde(rename = "type", default)]
    kind: String,
    schema: Option<u64>,
    seq: Option<u64>,
    key: Option<String>,
    command: Option<String>,
    outcome: Option<String>,
    reason: Option<String>,
}

/// The longest line read from a report: far more than any record (a command is at most
/// [`crate::arg_limit::max_argument_bytes`], at most six bytes each once escaped).
const MAX_LINE: u64 = 16 << 20;

/// How every report begins, as `lanes` writes it: its `run` record's first field.
const RUN_PREFIX: &str = r#"{"type":"run""#;

/// Why a report cannot be used to resume.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ResumeError {
    #[error("cannot read the report {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("--resume {path}: not a lanes report: {why}; give it a file written by --report (or --json)")]
    NotAReport { path: String, why: String },
    #[error("{path}:{line}: not a lanes report line ({error})")]
    Parse {
        path: String,
        line: usize,
        error: String,
    },
}

/// A key+command pair's occurrences (1-based) that were done, each with how.
type DoneOccurrences = Vec<(u32, SkipReason)>;

/// The jobs an earlier report holds as done (succeeded, or superseded by a newer job of their
/// key), and the matching of new jobs against them.
#[derive(Debug, Default)]
pub(crate) struct Resume {
    /// For each key+command pair done at least once: the occurrence numbers (1-based) that
    /// were done, each with how.
    done: HashMap<(String, String), DoneOccurrences>,
    /// Occurrences seen so far in the new run, for pairs in `done` only (memory is bounded
    /// by the old report, not by the new input).
    seen: HashMap<(String, String), u32>,
    /// The earlier run's command template and the column separator its column placeholders
    /// used: `Some((None, None))` for a run without one, `None` for a report that does not say
    /// (written by a lanes before 0.2, or empty).
    template: Option<(Option<String>, Option<String>)>,
}

impl Resume {
    /// Reads an earlier report (see [`Resume::parse_lines`]); `newest_wins` under
    /// `--coalesce latest` or `--cancel-in-progress`.
    ///
    /// # Errors
    /// The report cannot be read, or is not a lanes report.
    pub(crate) fn load(path: &Path, newest_wins: bool) -> Result<Self, ResumeError> {
        let name = path.display().to_string();
        let read_error = |error| ResumeError::Read {
            path: name.clone(),
            error,
        };
        if let Some(err) = crate::closed_stdin::named_by(path) {
            return Err(read_error(err));
        }
        let mut reader = BufReader::new(File::open(path).map_err(read_error)?);
        // Read line by line, never whole: a report of a million records is hundreds of MB.
        let mut number = 0;
        let lines = std::iter::from_fn(|| {
            let mut line = Vec::new();
            if let Err(error) = (&mut reader)
                .take(MAX_LINE + 1)
                .read_until(b'\n', &mut line)
            {
                return Some(Err(read_error(error)));
            }
            if line.is_empty() {
                return None;
            }
            number += 1;
            if line.len() as u64 > MAX_LINE {
                return Some(Err(ResumeError::NotAReport {
                    path: name.clone(),
                    why: format!("line {number} is longer than any record ({MAX_LINE} bytes)"),
                }));
            }
            let ended = line.ends_with(b"\n");
            let line = line.strip_suffix(b"\n").unwrap_or(&line);
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let line = String::from_utf8_lossy(line).into_owned();
            // A byte order mark an editor or tool put before the first record is no part of it.
            let line = match line.strip_prefix('\u{feff}') {
                Some(rest) if number == 1 => rest.to_owned(),
                _ => line,
            };
            Some(Ok((line, ended)))
        });
        Self::parse_lines(&name, lines, newest_wins)
    }

    /// Parses report `text`; `name` is used in errors (see [`Resume::parse_lines`]).
    ///
    /// # Errors
    /// Text that is not a lanes report.
    #[cfg(test)]
    pub(crate) fn parse(name: &str, text: &str, newest_wins: bool) -> Result<Self, ResumeError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let lines = text.split_inclusive('\n').map(|line| {
            let ended = line.ends_with('\n');
            let line = line.strip_suffix('\n').unwrap_or(line);
            Ok((line.strip_suffix('\r').unwrap_or(line).to_owned(), ended))
        });
        Self::parse_lines(name, lines, newest_wins)
    }

    /// Parses a report's `lines` (without their line ends, each with whether it ended with a
    /// newline), read one at a time; `name` is used in errors. A report begins with its `run`
    /// record (of a schema this `lanes` reads), then holds only `job` records and a `summary`.
    /// A torn last line (unparsable, and cut before its newline) is ignored, as a crash can
    /// leave one; any other unparsable line is an error. An empty
    /// file is a report with no records: lanes creates the report before it writes to it.
    /// Records `succeeded`, `interrupted` as `superseded`, or `skipped` (by a `--resume`
    /// before) count as done, each with its [`SkipReason`]. When the `newest_wins`
    /// (`--coalesce latest`, `--cancel-in-progress`: only a key's newest job matters), a job
    /// not done counts as superseded when a later job of its key (by seq) was done: it never
    /// runs after a newer one that was done. What is kept is each job's key and command, not
    /// the records.
    ///
    /// # Errors
    /// A line that cannot be read; text that is not a lanes report: another first line (an
    /// events file, a jobs file), another kind of record, a line that is not a JSON object
    /// and not a torn last one.
    fn parse_lines(
        name: &str,
        lines: impl Iterator<Item = Result<(String, bool), ResumeError>>,
        newest_wins: bool,
    ) -> Result<Self, ResumeError> {
        let mut lines = lines
            .filter(|line| line.as_ref().map_or(true, |(l, _)| !l.trim().is_empty()))
            .enumerate()
            .peekable();
        let mut template = None;
        let not_a_report = |why: String| ResumeError::NotAReport {
            path: name.to_owned(),
            why,
        };
        let mut jobs: Vec<(u64, String, String, Option<SkipReason>)> = Vec::new();
        let mut seqs = std::collections::HashSet::new();
        let mut summary = None;
        while let Some((index, line)) = lines.next() {
            let (line, ended) = line?;
            let line = line.as_str();
            // Torn: the last line, cut before its newline (lanes writes a record and its
            // newline at once); a whole line that is no record is no torn one.
            let torn = lines.peek().is_none() && !ended;
            if let Some(summary) = summary {
                // Nothing follows a summary, torn or whole: lanes writes it last.
                return Err(not_a_report(format!(
                    "line {} comes after the summary (line {summary}), which is a report's \
                     last record",
                    index + 1
                )));
            }
            let record: PastRecord = match serde_json::from_str(line) {
                Ok(record) => record,
                Err(_) if index == 0 && torn && is_torn_run_record(line) => break,
                Err(error) if index == 0 => {
                    return Err(not_a_report(format!(
                        "its first line is not a JSON record ({error})"
                    )))
                }
                Err(_) if torn => break,
                Err(error) => {
                    return Err(ResumeError::Parse {
                        path: name.to_owned(),
                        line: index + 1,
                        error: error.to_string(),
                    })
                }
            };
            match (index, record.kind.as_str()) {
                (0, "run") => {
                    if let Some(schema) = record.schema.filter(|&s| s > u64::from(SCHEMA_VERSION)) {
                        return Err(not_a_report(format!(
                            "it was written by a newer lanes (report schema {schema}; this \
                             lanes reads up to {SCHEMA_VERSION})"
                        )));
                    }
                    template = serde_json::from_str::<serde_json::Value>(line)
                        .ok()
                        .and_then(|run| {
                            let command = run.get("command")?.as_str().map(str::to_owned);
                            let colsep = run
                                .get("colsep")
                                .and_then(|c| c.as_str())
                                .map(str::to_owned);
                            Some((command, colsep))
                        });
                }
                (0, "queued" | "started" | "ended") => {
                    return Err(not_a_report(format!(
                        "its first line is a `{}` event: it is an events file (--events)",
                        record.kind
                    )))
                }
                (0, "") => {
                    return Err(not_a_report(
                        "its first line is not the `run` record a report begins with (it has \
                         no `type`)"
                            .to_owned(),
                    ))
                }
                (0, other) => {
                    return Err(not_a_report(format!(
                        "its first line is not the `run` record a report begins with (it is a \
                         `{other}` record)"
                    )))
                }
                (_, "job") => {
                    let line = index + 1;
                    let Some(seq) = record.seq else {
                        return Err(not_a_report(format!(
                            "line {line} is a job record without `seq`"
                        )));
                    };
                    let outcome = record.outcome.unwrap_or_default();
                    if !crate::core::Outcome::ALL
                        .iter()
                        .any(|o| o.name() == outcome)
                    {
                        return Err(not_a_report(format!(
                            "line {line}: the record of seq {seq} has no outcome lanes writes \
                             ({outcome:?})"
                        )));
                    }
                    if !seqs.insert(seq) {
                        return Err(not_a_report(format!(
                            "line {line} is a second record of seq {seq}; every job has one"
                        )));
                    }
                    // A line refused before it was a job has no key or command: nothing matches it.
                    if let (Some(key), Some(command)) = (record.key, record.command) {
                        // A superseded job (`--coalesce latest`, `--cancel-in-progress`) was
                        // replaced by a newer job of its key: that one runs again if it did not
                        // succeed, and the stale one is never run after it.
                        let done = match (outcome.as_str(), record.reason.as_deref()) {
                            ("succeeded", _) => Some(SkipReason::SucceededBefore),
                            ("interrupted", Some("superseded"))
                            | ("skipped", Some("superseded_before")) => {
                                Some(SkipReason::SupersededBefore)
                            }
                            ("skipped", _) => Some(SkipReason::SucceededBefore),
                            _ => None,
                        };
                        jobs.push((seq, key, command, done));
                    }
                }
                (_, "summary") => summary = Some(index + 1),
                (_, other) => {
                    return Err(not_a_report(format!(
                        "line {} is a `{other}` record; a report holds one `run` record, then \
                         `job` records and a `summary`",
                        index + 1
                    )))
                }
            }
        }
        jobs.sort_by_key(|job| job.0);
        if newest_wins {
            // From the newest back: a key with a job done later supersedes its older jobs.
            let mut done_later = std::collections::HashSet::new();
            for (_, key, _, how) in jobs.iter_mut().rev() {
                match how {
                    Some(_) => {
                        done_later.insert(key.clone());
                    }
                    None if done_later.contains(key) => *how = Some(SkipReason::SupersededBefore),
                    None => {}
                }
            }
        }
        // Each pair's occurrences counted, and the ones done kept, in one map (each pair's
        // text once).
        let mut occurrences: HashMap<(String, String), (u32, DoneOccurrences)> = HashMap::new();
        for (_, key, command, how) in jobs {
            let (n, done) = occurrences.entry((key, command)).or_default();
            *n += 1;
            if let Some(why) = how {
                done.push((*n, why));
            }
        }
        let done = occurrences
            .into_iter()
            .filter(|(_, (_, done))| !done.is_empty())
            .map(|(pair, (_, done))| (pair, done))
            .collect();
        Ok(Resume {
            done,
            seen: HashMap::new(),
            template,
        })
    }

    /// Matches nothing when the earlier run put its arguments into another command template
    /// than `current` (this run's, as given, and the `--colsep` its column placeholders use):
    /// a record's `command` is then the argument only, and the same argument in another
    /// template is another job. Returns what to tell the user then.
    pub(crate) fn for_template(
        &mut self,
        name: &str,
        current: (Option<&str>, Option<&str>),
    ) -> Option<String> {
        let (text, colsep) = self.template.as_ref()?;
        let earlier = (text.as_deref(), colsep.as_deref());
        if earlier == current || self.done.is_empty() {
            return None;
        }
        self.done.clear();
        let shown = |(template, colsep): (Option<&str>, Option<&str>)| {
            template.map_or_else(
                || "no command template".to_owned(),
                |t| {
                    let split = colsep.map_or_else(String::new, |sep| {
                        format!(
                            " split at --colsep `{}`",
                            crate::output::framing::escape_controls(sep)
                        )
                    });
                    format!(
                        "the command template `{}`{split}",
                        crate::output::framing::escape_controls(t)
                    )
                },
            )
        };
        Some(format!(
            "--resume {name}: its run put each argument into {}, this run into {}: no job \
             matches, so every job runs",
            shown(earlier),
            shown(current)
        ))
    }

    /// Called for every new job in input order: whether it was done before and is skipped,
    /// and why.
    pub(crate) fn skip(&mut self, key: &str, command: &str) -> Option<SkipReason> {
        let pair = (key.to_owned(), command.to_owned());
        let done = self.done.get(&pair)?;
        let n = self.seen.entry(pair).or_default();
        *n += 1;
        done.iter()
            .find(|&&(occurrence, _)| occurrence == *n)
            .map(|&(_, why)| why)
    }

    /// How many jobs of the earlier report were done (succeeded or superseded).
    #[cfg(test)]
    pub(crate) fn done_count(&self) -> usize {
        self.done.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = concat!(
        r#"{"type":"run","version":"0.1.0"}"#,
        "\n",
        r#"{"type":"job","seq":2,"key":"a","command":"echo x","outcome":"failed"}"#,
        "\n",
        r#"{"type":"job","seq":1,"key":"a","command":"echo x","outcome":"succeeded"}"#,
        "\n",
        r#"{"type":"job","seq":3,"key":"a","command":"echo x","outcome":"succeeded"}"#,
        "\n",
        r#"{"type":"job","seq":4,"key":"b","command":"true","outcome":"succeeded"}"#,
        "\n",
        r#"{"type":"job","seq":5,"key":null,"command":null,"outcome":"rejected"}"#,
        "\n",
        r#"{"type":"job","seq":6,"key":"c","comm"#,
    );

    #[test]
    fn a_job_superseded_before_is_skipped_and_its_newer_job_runs_unless_it_succeeded() {
        let report = concat!(
            r#"{"type":"run","version":"0.1.0"}"#,
            "\n",
            r#"{"type":"job","seq":1,"key":"a","command":"v1","outcome":"succeeded"}"#,
            "\n",
            r#"{"type":"job","seq":2,"key":"a","command":"v2","outcome":"interrupted","reason":"superseded"}"#,
            "\n",
            r#"{"type":"job","seq":3,"key":"a","command":"v3","outcome":"interrupted","reason":"superseded"}"#,
            "\n",
            r#"{"type":"job","seq":4,"key":"a","command":"v4","outcome":"failed","reason":"exit_status"}"#,
            "\n",
            r#"{"type":"job","seq":5,"key":"b","command":"w","outcome":"interrupted","reason":"shutdown"}"#,
            "\n",
        );
        let mut resume = Resume::parse("r.jsonl", report, false).unwrap();
        assert_eq!(resume.skip("a", "v1"), Some(SkipReason::SucceededBefore));
        assert_eq!(resume.skip("a", "v2"), Some(SkipReason::SupersededBefore));
        assert_eq!(resume.skip("a", "v3"), Some(SkipReason::SupersededBefore));
        assert_eq!(resume.skip("a", "v4"), None);
        assert_eq!(resume.skip("b", "w"), None);
        // Skipped for it in a resumed run's report: skipped for it again.
        let resumed = concat!(
            r#"{"type":"run","version":"0.1.0"}"#,
            "\n",
            r#"{"type":"job","seq":1,"key":"a","command":"v1","outcome":"skipped","reason":"succeeded_before"}"#,
            "\n",
            r#"{"type":"job","seq":2,"key":"a","command":"v2","outcome":"skipped","reason":"superseded_before"}"#,
            "\n",
        );
        let mut resume = Resume::parse("r.jsonl", resumed, false).unwrap();
        assert_eq!(resume.skip("a", "v1"), Some(SkipReason::SucceededBefore));
        assert_eq!(resume.skip("a", "v2"), Some(SkipReason::SupersededBefore));
    }

    #[test]
    fn under_newest_wins_a_job_older_than_a_done_one_of_its_key_is_superseded() {
        let report = concat!(
            r#"{"type":"run","version":"0.1.0"}"#,
            "\n",
            r#"{"type":"job","seq":1,"key":"a","command":"v1","outcome":"failed","reason":"exit_status"}"#,
            "\n",
            r#"{"type":"job","seq":3,"key":"a","command":"v3","outcome":"failed","reason":"exit_status"}"#,
            "\n",
            r#"{"type":"job","seq":2,"key":"a","command":"v2","outcome":"succeeded"}"#,
            "\n",
            r#"{"type":"job","seq":4,"key":"b","command":"w1","outcome":"interrupted","reason":"timeout"}"#,
            "\n",
            r#"{"type":"job","seq":5,"key":"b","command":"w2","outcome":"failed","reason":"exit_status"}"#,
            "\n",
        );
        let mut resume = Resume::parse("r.jsonl", report, true).unwrap();
        assert_eq!(resume.skip("a", "v1"), Some(SkipReason::SupersededBefore));
        assert_eq!(resume.skip("a", "v2"), Some(SkipReason::SucceededBefore));
        // Newer than the one done: it runs again.
        assert_eq!(resume.skip("a", "v3"), None);
        // No job of the key was done: each runs again.
        assert_eq!(resume.skip("b", "w1"), None);
        assert_eq!(resume.skip("b", "w2"), None);
        // Without the policy, an older job that failed runs again.
        let mut resume = Resume::parse("r.jsonl", report, false).unwrap();
        assert_eq!(resume.skip("a", "v1"), None);
    }

    #[test]
    fn matches_by_key_command_and_occurrence() {
        let mut resume = Resume::parse("r.jsonl", REPORT, false).unwrap();
        assert_eq!(resume.done_count(), 3);
        // a/echo x: occurrence 1 succeeded, 2 failed, 3 succeeded.
        assert!(resume.skip("a", "echo x").is_some());
        assert!(resume.skip("a", "echo x").is_none());
        assert!(resume.skip("a", "echo x").is_some());
        assert!(
            resume.skip("a", "echo x").is_none(),
            "a fourth occurrence is new"
        );
        assert!(resume.skip("b", "true").is_some());
        assert!(
            resume.skip("b", "true ").is_none(),
            "a changed command is a new job"
        );
        assert!(resume.skip("c", "anything").is_none());
    }

    #[test]
    fn a_torn_line_elsewhere_is_an_error() {
        let text = "{\"type\":\"run\"}\n{\"type\":\"jo\n{\"type\":\"summary\"}\n";
        let err = Resume::parse("r.jsonl", text, false).unwrap_err();
        assert!(err.to_string().starts_with("r.jsonl:2:"), "{err}");
        // A whole last line (its newline there) that is no record was not torn by a crash.
        let text = "{\"type\":\"run\"}\nnot json\n";
        let err = Resume::parse("r.jsonl", text, false).unwrap_err();
        assert!(err.to_string().starts_with("r.jsonl:2:"), "{err}");
        // Cut before its newline, it is ignored.
        let text = "{\"type\":\"run\"}\n{\"type\":\"jo";
        assert!(Resume::parse("r.jsonl", text, false).is_ok());
    }

    #[test]
    fn a_skipped_record_counts_as_a_success_and_keeps_occurrences() {
        // A resumed run's report: occurrence 1 was skipped (it succeeded before), 2 failed
        // again, 3 succeeded now.
        let text = concat!(
            r#"{"type":"run","schema":2}"#,
            "\n",
            r#"{"type":"job","seq":1,"key":"a","command":"x","outcome":"skipped"}"#,
            "\n",
            r#"{"type":"job","seq":3,"key":"a","command":"x","outcome":"succeeded"}"#,
            "\n",
            r#"{"type":"job","seq":2,"key":"a","command":"x","outcome":"failed"}"#,
            "\n",
            r#"{"type":"summary","jobs":3}"#,
            "\n",
        );
        let mut resume = Resume::parse("b.jsonl", text, false).unwrap();
        assert_eq!(resume.done_count(), 2);
        assert!(resume.skip("a", "x").is_some());
        assert!(resume.skip("a", "x").is_none());
        assert!(resume.skip("a", "x").is_some());
    }

    #[test]
    fn an_empty_file_or_a_lone_run_record_is_a_report_of_nothing() {
        for text in [
            "",
            "\n",
            "{\"type\":\"run\",\"schema\":1}\n",
            "{\"type\":\"ru",
            "{\"type\":\"run\",\"versi",
        ] {
            let resume =
                Resume::parse("r.jsonl", text, false).unwrap_or_else(|e| panic!("{text:?}: {e}"));
            assert_eq!(resume.done_count(), 0, "{text:?}");
        }
    }

    #[test]
    fn files_that_are_not_reports_are_refused_saying_why() {
        let cases = [
            (
                "{\"type\":\"queued\",\"seq\":1,\"key\":\"a\",\"ahead\":0}\n",
                "events file (--events)",
            ),
            ("a\techo x\nb\techo y\n", "first line is not a JSON record"),
            ("a\techo x", "first line is not a JSON record"),
            ("{\"type\":\"job\",\"seq\":1}\n", "not the `run` record"),
            ("{\"type\":\"run\",\"schema\":99}\n", "newer lanes"),
            (
                "{\"type\":\"run\"}\n{\"type\":\"started\"}\n{\"type\":\"summary\"}\n",
                "line 2 is a `started` record",
            ),
            (
                "{\"type\":\"run\"}\n{\"type\":\"summary\"}\n{\"type\":\"run\"}\n",
                "line 3 comes after the summary (line 2)",
            ),
            (
                "{\"type\":\"run\"}\n{\"type\":\"job\"}\n{\"type\":\"summary\"}\n",
                "line 2 is a job record without `seq`",
            ),
            (
                "{\"type\":\"run\"}\n{\"type\":\"job\",\"seq\":1,\"key\":\"a\",\"command\":\"x\",\"outcome\":\"weird\"}\n",
                "line 2: the record of seq 1 has no outcome lanes writes (\"weird\")",
            ),
            (
                "{\"type\":\"run\"}\n{\"type\":\"job\",\"seq\":1,\"key\":\"a\",\"command\":\"x\"}\n",
                "the record of seq 1 has no outcome",
            ),
            (
                concat!(
                    "{\"type\":\"run\"}\n",
                    "{\"type\":\"job\",\"seq\":1,\"key\":\"a\",\"command\":\"x\",\"outcome\":\"failed\"}\n",
                    "{\"type\":\"job\",\"seq\":1,\"key\":\"a\",\"command\":\"x\",\"outcome\":\"succeeded\"}\n",
                ),
                "line 3 is a second record of seq 1",
            ),
            (
                concat!(
                    "{\"type\":\"run\"}\n",
                    "{\"type\":\"summary\"}\n",
                    "{\"type\":\"job\",\"seq\":1,\"key\":\"a\",\"command\":\"x\",\"outcome\":\"succeeded\"}\n",
                ),
                "line 3 comes after the summary (line 2)",
            ),
            (
                "{\"type\":\"run\"}\n{\"type\":\"summary\"}\ngarbage\n",
                "line 3 comes after the summary (line 2)",
            ),
        ];
        for (text, why) in cases {
            let err = Resume::parse("x.jsonl", text, false)
                .unwrap_err()
                .to_string();
            assert!(
                err.starts_with("--resume x.jsonl: not a lanes report: ") && err.contains(why),
                "{text:?}: {err}"
            );
        }
    }
}
