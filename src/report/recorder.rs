//! The recorder: every job end becomes exactly one record, handed at once to the report's
//! writer thread (file) and/or the stdout sink, and counted for the summary.

use std::path::PathBuf;
use std::sync::Arc;

use super::entry::Entry;
use super::human;
use super::json::{to_line, RunRecord, SummaryRecord};
use super::junit::JunitReport;
use super::progress::Progress;
use crate::core::{Outcome, StopReason};
use crate::output::sink::{Marks, SinkTx};
use crate::output::spool::Spool;

/// A mark behind the records queued at one moment ([`Recorder::report_mark`]).
pub(crate) struct ReportMark {
    /// The report file's writer answers once it has written what was queued before.
    file: Option<tokio::sync::oneshot::Receiver<()>>,
    /// Under `--json`: the stdout sink's mark ([`SinkTx::mark`]).
    stdout: Option<u64>,
}

/// Where report lines go, and the running counts.
pub(crate) struct Recorder {
    /// The report file, written by a thread of its own: a reader that reads slowly (a FIFO)
    /// never holds up the run.
    file: Option<Spool>,
    file_name: String,
    stdout: Option<SinkTx>,
    /// `--json`: how far stdout's writer has got (kept after the sink is let go).
    stdout_marks: Option<Arc<Marks>>,
    /// `--json`: records on their way to the stdout sink through a task of their own, so that
    /// a blocked stdout never holds up the run (signals, timeouts, the next records). Started
    /// with the first record.
    forward: Option<(
        tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
        tokio::task::JoinHandle<()>,
    )>,
    summary: SummaryRecord,
    listed: Vec<String>,
    unlisted: u64,
    any_bad: bool,
    /// The JUnit file could not be written whole.
    report_lost: bool,
    /// With the file, held open since the start until it is written: a regular one locked
    /// (see `run.rs`'s `create_output`), a FIFO or a device written through it.
    junit: Option<(PathBuf, JunitReport, Option<std::fs::File>)>,
    progress: Option<Progress>,
    /// `--coordinate-records`: job records also go to the fleet's database.
    fleet: Option<super::mirror::Mirror>,
}

impl Recorder {
    /// A recorder writing to `file` (named `file_name` in messages) and/or, for `--json`, to
    /// the stdout sink.
    pub(crate) fn new(file: Option<Spool>, file_name: String, stdout: Option<SinkTx>) -> Self {
        Recorder {
            file,
            file_name,
            stdout_marks: stdout.as_ref().map(SinkTx::marks),
            stdout,
            forward: None,
            summary: SummaryRecord {
                kind: "summary",
                ..SummaryRecord::default()
            },
            listed: Vec::new(),
            unlisted: 0,
            any_bad: false,
            report_lost: false,
            junit: None,
            progress: None,
            fleet: None,
        }
    }

    /// Also collects a JUnit XML file, written to `path` by [`Recorder::finish`].
    pub(crate) fn with_junit(
        mut self,
        path: PathBuf,
        report: JunitReport,
        held: Option<std::fs::File>,
    ) -> Self {
        self.junit = Some((path, report, held));
        self
    }

    /// Also feeds the live display.
    pub(crate) fn with_progress(mut self, progress: Progress) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Also writes job records into the fleet's database (`--coordinate-records`).
    pub(crate) fn record_to_fleet(&mut self, fleet: super::mirror::Mirror) {
        self.fleet = Some(fleet);
    }

    /// The live display, when there is one.
    pub(crate) fn progress(&mut self) -> Option<&mut Progress> {
        self.progress.as_mut()
    }

    /// Writes the `run` header.
    pub(crate) async fn start(&mut self, run: &RunRecord) {
        self.write_line(to_line(run)).await;
    }

    /// Writes one job's record and counts it, in the summary, the JUnit file and the display.
    pub(crate) async fn job(&mut self, entry: &Entry<'_>) {
        let outcome = entry.outcome;
        self.summary.jobs += 1;
        match outcome {
            Outcome::Succeeded => {
                self.summary.succeeded += 1;
                self.summary.flaky += u64::from(entry.flaky());
            }
            Outcome::Failed(_) => self.summary.failed += 1,
            Outcome::Interrupted(_) => self.summary.interrupted += 1,
            Outcome::Rejected(_) => self.summary.rejected += 1,
            Outcome::Skipped(_) => self.summary.skipped += 1,
        }
        // Listed: every job that did not succeed and was not superseded or skipped; a
        // cancelled one too, though it does not make the exit status 1.
        let cancelled = outcome == Outcome::Interrupted(StopReason::Cancelled);
        if outcome.is_bad() || cancelled {
            self.any_bad |= !cancelled;
            if self.listed.len() < human::MAX_LISTED {
                self.listed.push(human::bad_job_line(entry));
            } else {
                self.unlisted += 1;
            }
        }
        if let Some((_, junit, _)) = &mut self.junit {
            junit.add(entry);
        }
        if let Some(progress) = &mut self.progress {
            // The display counts the jobs this run runs: a skipped one is not among them.
            if !matches!(outcome, Outcome::Skipped(_)) {
                progress.recorded(outcome);
            }
        }
        if self.writes() || self.fleet.is_some() {
            let line = to_line(&entry.to_record());
            if let Some(fleet) = &self.fleet {
                fleet.record(entry.seq, &line);
            }
            if self.writes() {
                self.write_line(line).await;
            }
        }
    }

    /// Whether records go anywhere (a report file, or stdout under `--json`): without either,
    /// job records are not encoded at all.
    fn writes(&self) -> bool {
        self.file.is_some() || self.stdout.is_some()
    }

    /// Whether any job ended in an outcome that makes the exit status 1.
    pub(crate) fn any_bad(&self) -> bool {
        self.any_bad
    }

    /// Whether the report file could not be written to the end: CI must not take a partial
    /// report for a whole one, so the exit status is then 1 too.
    pub(crate) fn report_lost(&self) -> bool {
        self.report_lost
            || self.fleet.as_ref().is_some_and(|fleet| fleet.lost())
            || self.file.as_ref().is_some_and(Spool::lost)
            || self.stdout.as_ref().is_some_and(SinkTx::lost)
    }

    /// Whether a record handed to the report file, or under `--json` to stdout, failed to
    /// reach it (any write error, a reader gone included): the records queued since are not
    /// there either.
    pub(crate) fn report_failed(&self) -> bool {
        self.file.as_ref().is_some_and(Spool::failed)
            || self.stdout_marks.as_deref().is_some_and(Marks::failed)
    }

    /// A mark behind the records queued so far, in the report file and (under `--json`) on
    /// stdout: [`Recorder::written_through`] tells, without waiting, when they are all
    /// written.
    pub(crate) fn report_mark(&mut self) -> ReportMark {
        ReportMark {
            file: self.file.as_ref().and_then(Spool::flush_ticket),
            stdout: self.mark_stdout(),
        }
    }

    /// Whether the records before `mark` are all written (never waits): the file's writer
    /// has passed it with no write failed (it sets a failure before it answers, so the failure
    /// is read after its answer), and stdout's writer has passed it before any failure. After
    /// a failure a mark is never written through: [`Recorder::report_failed`] says why.
    pub(crate) fn written_through(&self, mark: &mut ReportMark) -> bool {
        if let Some(ticket) = &mut mark.file {
            if matches!(
                ticket.try_recv(),
                Err(tokio::sync::oneshot::error::TryRecvError::Empty)
            ) {
                return false;
            }
            mark.file = None;
        }
        !self.file.as_ref().is_some_and(Spool::failed)
            && mark.stdout.is_none_or(|n| {
                n <= self
                    .stdout_marks
                    .as_deref()
                    .map_or(0, Marks::written_through)
            })
    }

    /// Under `--json`: a mark sent to stdout behind the records queued so far, its number
    /// ([`Marks::written_through`]).
    fn mark_stdout(&mut self) -> Option<u64> {
        let stdout = self.stdout.clone()?;
        let mark = stdout.mark();
        let _ = self.forwarder(&stdout).send(Vec::new());
        Some(mark)
    }

    /// Resolves once every record queued so far is in the report file and, under `--json`,
    /// written to stdout (or has failed to be: [`Recorder::report_failed`]). Unlike
    /// [`Recorder::written`], it waits for stdout's reader too.
    pub(crate) fn report_written(&mut self) -> impl std::future::Future<Output = ()> + use<> {
        let file = self.written();
        let stdout = self.mark_stdout().zip(self.stdout_marks.clone());
        async move {
            file.await;
            if let Some((mark, marks)) = stdout {
                marks.wait_for(mark).await;
            }
        }
    }

    /// Resolves once every record queued so far is in the report file.
    pub(crate) fn written(&self) -> impl std::future::Future<Output = ()> + use<> {
        let written = self.file.as_ref().map(Spool::written);
        async move {
            if let Some(written) = written {
                written.await;
            }
        }
    }

    /// Resolves once every record queued so far is in the fleet's database (or was given up
    /// on there: `--coordinate-records`), at once without it.
    pub(crate) fn fleet_written(&self) -> impl std::future::Future<Output = ()> + use<> {
        let fleet = self.fleet.as_ref().map(|fleet| fleet.written());
        async move {
            if let Some(fleet) = fleet {
                fleet.await;
            }
        }
    }

    /// The `seq`s of the job records handed to the fleet's database and not yet written there
    /// or said lost, in order.
    pub(crate) fn fleet_pending(&self) -> Vec<u64> {
        self.fleet
            .as_ref()
            .map_or_else(Vec::new, super::mirror::Mirror::pending)
    }

    /// Writes the JUnit file, if any (before the exit status is decided: a file that cannot
    /// be written makes it 1, like the report), on a thread of its own: the caller may give up
    /// on a reader that does not read (a FIFO), and the file then counts as not written.
    pub(crate) async fn write_junit(&mut self, end: std::time::SystemTime) {
        let Some((path, mut junit, held)) = self.junit.take() else {
            return;
        };
        junit.end(end);
        // Counted lost until written: a wait given up leaves it so.
        self.report_lost = true;
        let xml = junit.to_xml();
        let written = tokio::task::spawn_blocking(move || {
            let written = match held {
                // A FIFO or a device: written through what was opened at the start.
                Some(mut file) if !file.metadata().is_ok_and(|meta| meta.is_file()) => {
                    std::io::Write::write_all(&mut file, xml.as_bytes())
                }
                held => {
                    let written = std::fs::write(&path, xml);
                    drop(held);
                    written
                }
            };
            written.map_err(|err| (path, err))
        })
        .await;
        match written {
            Ok(Ok(())) => self.report_lost = false,
            Ok(Err((path, err))) => {
                eprintln!(
                    "lanes: cannot write the JUnit file {}: {err}",
                    path.display()
                );
                self.report_lost = err.kind() != std::io::ErrorKind::BrokenPipe;
            }
            Err(_) => {}
        }
    }

    /// Writes the `summary` record (after [`Recorder::write_junit`], which the exit status
    /// depends on); returns the human summary text and, under `--json`, the
    /// task still handing records to the stdout sink: the caller waits for it, or gives up on
    /// it (a second Ctrl-C; the report file, if any, has every record).
    pub(crate) async fn finish(
        &mut self,
        duration_ms: u64,
        exit_code: u8,
    ) -> (String, Option<tokio::task::JoinHandle<()>>) {
        self.summary.duration_ms = duration_ms;
        self.summary.exit_code = exit_code;
        let line = to_line(&self.summary);
        self.write_line(line).await;
        let has_report = !self.file_name.is_empty() || self.stdout.is_some();
        self.stdout = None;
        // Dropping the sender lets the task end once it has handed every record on.
        let forwarder = self.forward.take().map(|(_, task)| task);
        if let Some(mut progress) = self.progress.take() {
            progress.finish();
        }
        (
            human::summary(&self.summary, &self.listed, self.unlisted, has_report),
            forwarder,
        )
    }

    /// One record, one `write` to the file (unbuffered, so flushed when written) by its
    /// writer thread, one buffer to the stdout sink. A failing report file is reported once
    /// and then left alone.
    async fn write_line(&mut self, line: Vec<u8>) {
        let Some(stdout) = &self.stdout else {
            if let Some(file) = &self.file {
                file.write(line);
            }
            return;
        };
        if let Some(file) = &self.file {
            file.write(line.clone());
        }
        let stdout = stdout.clone();
        let _ = self.forwarder(&stdout).send(line);
    }

    /// The channel of the task that hands records on to the stdout sink (started by the first
    /// record): an empty buffer in it is a mark ([`crate::output::sink::Marks`]).
    fn forwarder(&mut self, stdout: &SinkTx) -> &tokio::sync::mpsc::UnboundedSender<Vec<u8>> {
        let (tx, _) = self.forward.get_or_insert_with(|| {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
            let stdout = stdout.clone();
            let task = tokio::spawn(async move {
                while let Some(line) = rx.recv().await {
                    if line.is_empty() {
                        stdout.send_mark().await;
                    } else {
                        let _ = stdout.send(line).await;
                    }
                }
            });
            (tx, task)
        });
        tx
    }
}
