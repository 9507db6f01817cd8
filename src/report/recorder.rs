//! The recorder: every job end becomes exactly one record, written and flushed at once to the
//! report (file and/or stdout), and counted for the summary.

use std::fs::File;
use std::io::Write;

use super::human;
use super::json::{to_line, JobRecord, RunRecord, SummaryRecord};
use crate::core::Outcome;
use crate::output::sink::SinkTx;

/// Where report lines go, and the running counts.
pub struct Recorder {
    file: Option<File>,
    file_name: String,
    stdout: Option<SinkTx>,
    summary: SummaryRecord,
    listed: Vec<String>,
    unlisted: u64,
    any_bad: bool,
}

impl Recorder {
    /// A recorder writing to `file` (named `file_name` in messages) and/or, for `--json`, to
    /// the stdout sink.
    pub fn new(file: Option<File>, file_name: String, stdout: Option<SinkTx>) -> Self {
        Recorder {
            file,
            file_name,
            stdout,
            summary: SummaryRecord {
                kind: "summary",
                ..SummaryRecord::default()
            },
            listed: Vec::new(),
            unlisted: 0,
            any_bad: false,
        }
    }

    /// Writes the `run` header.
    pub async fn start(&mut self, run: &RunRecord) {
        self.write_line(to_line(run)).await;
    }

    /// Writes one job's record and counts it.
    pub async fn job(&mut self, record: JobRecord, outcome: Outcome) {
        self.summary.jobs += 1;
        match outcome {
            Outcome::Succeeded => self.summary.succeeded += 1,
            Outcome::Failed(_) => self.summary.failed += 1,
            Outcome::Interrupted(_) => self.summary.interrupted += 1,
            Outcome::Rejected(_) => self.summary.rejected += 1,
        }
        if outcome.is_bad() {
            self.any_bad = true;
            if self.listed.len() < human::MAX_LISTED {
                self.listed.push(human::bad_job_line(&record));
            } else {
                self.unlisted += 1;
            }
        }
        self.write_line(to_line(&record)).await;
    }

    /// Counts a job skipped because `--resume` found it already succeeded (no record).
    pub fn skipped(&mut self) {
        self.summary.skipped += 1;
    }

    /// Whether any job ended in an outcome that makes the exit status 1.
    pub fn any_bad(&self) -> bool {
        self.any_bad
    }

    /// Writes the `summary` record; returns the human summary text.
    pub async fn finish(&mut self, duration_ms: u64, exit_code: u8) -> String {
        self.summary.duration_ms = duration_ms;
        self.summary.exit_code = exit_code;
        let line = to_line(&self.summary);
        self.write_line(line).await;
        self.stdout = None;
        human::summary(&self.summary, &self.listed, self.unlisted)
    }

    /// One record, one `write` to the file (unbuffered, so flushed when written), one buffer
    /// to the stdout sink. A failing report file is reported once and then left alone.
    async fn write_line(&mut self, line: Vec<u8>) {
        if let Some(file) = &mut self.file {
            if let Err(err) = file.write_all(&line) {
                eprintln!(
                    "lanes: cannot write the report {}: {err}; the run goes on",
                    self.file_name
                );
                self.file = None;
            }
        }
        if let Some(stdout) = &self.stdout {
            let _ = stdout.send(line).await;
        }
    }
}
