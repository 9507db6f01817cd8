//! The ledger: the one place that turns what happened into what `lanes` tells. Every event
//! (`--events`), every job record (report file, `--json`), JUnit test case, summary count and
//! display update is written from here, from typed values: the core's [`Account`] of a job
//! and the facts its process left. Times are [`Tick`]s on the run's one clock, turned into
//! wall-clock timestamps from the moment the run started, so that a record's `duration_ms`
//! is exactly its `ended_at − started_at`.

use std::time::{Duration, SystemTime};

use super::entry::{Entry, HostWait, TryEntry, WaitEntry};
use super::events::{Event, EventLog};
use super::json::{timestamp, to_line, LockHolder, RunRecord, SCHEMA_VERSION};
use super::progress::Progress;
use super::recorder::Recorder;
use crate::core::{Account, Outcome, Seq, Tick, WaitChange};

/// What the shell adds to a job's [`Account`]: what the job was and what its last process did.
#[derive(Debug, Default)]
pub(crate) struct JobFacts<'a> {
    /// 1-based source line.
    pub line: u64,
    /// `None` for an input line without a usable key.
    pub key: Option<&'a str>,
    /// `None` for an invalid input line.
    pub command: Option<&'a str>,
    /// Processes outlived the direct child past the leak window.
    pub leaked: bool,
    /// A message for people (spawn error, invalid line, output file problem).
    pub error: Option<String>,
    /// The end of the job's stderr.
    pub stderr_tail: &'a [u8],
    /// The ends of the stderr of its tries that were retried, oldest first (`--retries`).
    pub retried_tails: &'a [Vec<u8>],
    /// CPU time of the try that just ended, where its cgroup told.
    pub cpu: Option<Duration>,
    /// Peak memory of the try that just ended, where its cgroup told.
    pub memory_peak: Option<u64>,
    /// `--lock-dir` only: the job's wait for its key's host-wide lock, if it waited.
    pub lock: Option<Option<HostWait>>,
    /// `--lock-dir` only: for a job stopped before it started while it waited for its key,
    /// the process that held the key when the wait began.
    pub lock_waited_on: Option<LockHolder>,
}

/// Events, records, JUnit, summary and display of one run.
pub(crate) struct Ledger {
    /// The wall-clock time of tick zero.
    origin: SystemTime,
    recorder: Recorder,
    events: EventLog,
    /// The latest `ended_at` of the records written so far (zero before the first).
    latest_end: Tick,
}

impl Ledger {
    /// A ledger whose ticks count from `origin` (the wall-clock time the run started).
    pub(crate) fn new(origin: SystemTime, recorder: Recorder, events: EventLog) -> Self {
        Ledger {
            origin,
            recorder,
            events,
            latest_end: Tick::ZERO,
        }
    }

    /// The latest end of a job the records written so far tell of (its record's `ended_at`
    /// or its `ended` event's): zero before the first record.
    pub(crate) fn latest_end(&self) -> Tick {
        self.latest_end
    }

    /// The wall-clock time of `tick`.
    pub(crate) fn at(&self, tick: Tick) -> SystemTime {
        self.origin + tick
    }

    /// Writes the report's `run` header.
    pub(crate) async fn run_started(
        &mut self,
        max_concurrent: usize,
        source: String,
        (command, colsep): (Option<String>, Option<String>),
        containment: &'static str,
    ) {
        self.recorder
            .start(&RunRecord {
                kind: "run",
                version: env!("CARGO_PKG_VERSION"),
                schema: SCHEMA_VERSION,
                started_at: timestamp(self.origin),
                pid: std::process::id(),
                max_concurrent,
                source,
                command,
                colsep,
                containment,
            })
            .await;
    }

    /// A job was admitted into its lane, `ahead` jobs of its key before it; `held_by` is the process holding its key host-wide (`--lock-dir`).
    pub(crate) fn queued(
        &mut self,
        seq: Seq,
        key: &str,
        ahead: usize,
        held_by: Option<LockHolder>,
        now: Tick,
    ) {
        if self.events.enabled() {
            let at = timestamp(self.at(now));
            self.events.write(&Event::Queued {
                seq,
                key,
                ahead,
                held_by,
                at,
            });
        }
    }

    /// Whether an events file is written (`--events`).
    pub(crate) fn tells_events(&self) -> bool {
        self.events.enabled()
    }

    /// Waiting jobs' causes changed: one `waiting` event each.
    pub(crate) fn waiting(&mut self, changes: &[WaitChange]) {
        if !self.events.enabled() {
            return;
        }
        for change in changes {
            let at = timestamp(self.at(change.at));
            self.events.write(&Event::Waiting {
                seq: change.seq,
                key: &change.key,
                cause: change.cause.name(),
                behind: change.cause.behind(),
                resource: change.cause.resource(),
                at,
            });
        }
    }

    /// A try of the run `members` (its first job first) started in `slot`.
    pub(crate) fn started(
        &mut self,
        members: &[Seq],
        key: &str,
        slot: u32,
        attempt: u32,
        batch: Option<Seq>,
        now: Tick,
    ) {
        if self.events.enabled() {
            let at = timestamp(self.at(now));
            for &seq in members {
                self.events.write(&Event::Started {
                    seq,
                    key,
                    slot,
                    attempt,
                    batch,
                    at: at.clone(),
                });
            }
        }
    }

    /// A try of the run `members` ended with `outcome`; `retry` says it goes again.
    pub(crate) fn try_ended(
        &mut self,
        members: &[Seq],
        key: &str,
        outcome: Outcome,
        attempt: u32,
        retry: bool,
        now: Tick,
    ) {
        if let Some(progress) = self.recorder.progress() {
            progress.run_ended(members[0]);
        }
        if self.events.enabled() {
            let at = timestamp(self.at(now));
            for &seq in members {
                self.write_ended(seq, Some(key), outcome, attempt, retry, at.clone());
            }
        }
    }

    fn write_ended(
        &mut self,
        seq: Seq,
        key: Option<&str>,
        outcome: Outcome,
        attempt: u32,
        retry: bool,
        at: String,
    ) {
        self.events.write(&Event::Ended {
            seq,
            key,
            outcome: outcome.name(),
            reason: outcome.reason(),
            attempt,
            retry,
            at,
        });
    }

    /// Writes a job's one record from its account and facts, and counts it. A job that was not
    /// in flight when it ended (never started, or waiting for a retry) gets its `ended` event
    /// here. Returns whether the job started (it then has result files to index).
    pub(crate) async fn close(&mut self, account: &Account, facts: JobFacts<'_>) -> bool {
        self.close_encoded(account, facts, false).await.0
    }

    /// [`Ledger::close`], also returning the record's line (newline included) when `encode`
    /// asks for it (`lanes submit --wait`).
    pub(crate) async fn close_encoded(
        &mut self,
        account: &Account,
        facts: JobFacts<'_>,
        encode: bool,
    ) -> (bool, Option<Vec<u8>>) {
        let tried = account.tried().copied();
        let ended_at = match tried {
            // A retry that never got its turn: the record tells of its last try.
            Some(tried) if !account.in_flight => tried.ended_at,
            _ => account.ended_at,
        };
        self.latest_end = self.latest_end.max(ended_at).max(account.ended_at);
        let tries = account
            .tries
            .iter()
            .map(|t| TryEntry {
                slot: t.started().then_some(t.slot),
                started_at: t.started().then(|| self.at(t.started_at)),
                ended_at: self.at(t.ended_at),
                duration: t.started().then(|| t.ended_at.saturating_sub(t.started_at)),
                outcome: t.outcome,
                exit: t.exit,
            })
            .collect();
        let entry = Entry {
            seq: account.seq,
            line: facts.line,
            key: facts.key,
            command: facts.command,
            outcome: account.outcome,
            exit: tried.and_then(|t| t.exit),
            attempts: account.attempts,
            slot: tried.map(|t| t.slot),
            started_at: tried.map(|t| self.at(t.started_at)),
            ended_at: self.at(ended_at),
            duration: tried.map(|t| t.ended_at.saturating_sub(t.started_at)),
            waited: tried.map(|t| t.waited).or(account.waited),
            leaked: facts.leaked,
            superseded_by: account.superseded_by,
            batch: account.batch,
            error: facts.error.as_deref(),
            stderr_tail: facts.stderr_tail,
            retried_tails: facts.retried_tails,
            // Its last try's, whether it ended in flight or was stopped waiting for its retry.
            cpu: facts.cpu.filter(|_| tried.is_some()),
            memory_peak: facts.memory_peak.filter(|_| tried.is_some()),
            tries,
            lock: facts.lock.as_ref().map(Option::as_ref),
            lock_waited_on: facts.lock_waited_on.as_ref(),
            grant: account.grant.as_deref().filter(|_| tried.is_some()),
            waits: WaitEntry::of(&account.waits, self.origin),
        };
        if !account.in_flight && self.events.enabled() {
            let at = timestamp(self.at(account.ended_at));
            self.write_ended(
                account.seq,
                facts.key,
                account.outcome,
                account.attempts,
                false,
                at,
            );
        }
        let started = entry.started();
        let encoded = encode.then(|| to_line(&entry.to_record()));
        self.recorder.job(&entry).await;
        (started, encoded)
    }

    /// Whether anything is told of stopped jobs (the display or the events file).
    pub(crate) fn watches_stops(&mut self) -> bool {
        self.events.enabled() || self.recorder.progress().is_some()
    }

    /// A run in flight (known by its first job's seq) was found stopped (`why`), or running
    /// again (`None`).
    pub(crate) fn stop_changed(
        &mut self,
        seq: Seq,
        key: &str,
        why: Option<&'static str>,
        now: Tick,
    ) {
        if self.events.enabled() {
            let at = timestamp(self.at(now));
            self.events.write(&match why {
                Some(why) => Event::Stopped { seq, key, why, at },
                None => Event::Continued { seq, key, at },
            });
        }
    }

    /// The input ended after `total` jobs: the display learns the total.
    pub(crate) fn input_ended(&mut self, total: u64) {
        if let Some(progress) = self.recorder.progress() {
            progress.set_total(total);
        }
    }

    /// Also writes job records into the fleet's database (`--coordinate-records`).
    pub(crate) fn record_to_fleet(&mut self, fleet: super::mirror::Mirror) {
        self.recorder.record_to_fleet(fleet);
    }

    /// The live display, when there is one.
    pub(crate) fn progress(&mut self) -> Option<&mut Progress> {
        self.recorder.progress()
    }

    /// Whether any job ended in an outcome that makes the exit status 1.
    pub(crate) fn any_bad(&self) -> bool {
        self.recorder.any_bad()
    }

    /// Whether the report, the events file or the JUnit file could not be stored whole.
    pub(crate) fn lost(&self) -> bool {
        self.recorder.report_lost() || self.events.lost()
    }

    /// Writes the JUnit file, if any (before the exit status is decided), for a run that
    /// ended at `end`.
    pub(crate) async fn write_junit(&mut self, end: Tick) {
        let at = self.at(end);
        self.recorder.write_junit(at).await;
    }

    /// Whether a record failed to reach the report (see
    /// [`super::recorder::Recorder::report_failed`]): from then on no record is known to be
    /// in it.
    pub(crate) fn report_failed(&self) -> bool {
        self.recorder.report_failed()
    }

    /// See [`super::recorder::Recorder::report_mark`].
    pub(crate) fn report_mark(&mut self) -> super::recorder::ReportMark {
        self.recorder.report_mark()
    }

    /// See [`super::recorder::Recorder::written_through`].
    pub(crate) fn written_through(&self, mark: &mut super::recorder::ReportMark) -> bool {
        self.recorder.written_through(mark)
    }

    /// Resolves once every record so far is in the report, stdout's under `--json` included
    /// (see [`super::recorder::Recorder::report_written`]).
    pub(crate) fn report_written(&mut self) -> impl std::future::Future<Output = ()> + use<> {
        self.recorder.report_written()
    }

    /// The two halves of [`Ledger::written`]: the report file's, then the events file's.
    pub(crate) fn written_each(
        &self,
    ) -> (
        impl std::future::Future<Output = ()> + use<>,
        impl std::future::Future<Output = ()> + use<>,
    ) {
        (self.recorder.written(), self.events.written())
    }

    /// Resolves once every record and event queued so far is in its file: the files' writer
    /// threads never hold up the run, and the run's end waits for them (a reader may be slow).
    pub(crate) fn written(&self) -> impl std::future::Future<Output = ()> + use<> {
        let (records, events) = self.written_each();
        async move {
            records.await;
            events.await;
        }
    }

    /// Resolves once every record so far is in the fleet's database, or was given up on there
    /// (`--coordinate-records`); at once without it.
    pub(crate) fn fleet_written(&self) -> impl std::future::Future<Output = ()> + use<> {
        self.recorder.fleet_written()
    }

    /// See [`Recorder::fleet_pending`].
    pub(crate) fn fleet_pending(&self) -> Vec<u64> {
        self.recorder.fleet_pending()
    }

    /// Writes the `summary` record, the run ending at `now`; returns the human summary and,
    /// under `--json`, the task still handing records to stdout (see [`Recorder::finish`]).
    /// Its `duration_ms` is the run's end minus the `run` record's `started_at` as both are
    /// written to the millisecond, as a job record's is: never less than any record's
    /// `ended_at` minus that `started_at`.
    pub(crate) async fn finish(
        &mut self,
        now: Tick,
        exit_code: u8,
    ) -> (String, Option<tokio::task::JoinHandle<()>>) {
        let duration_ms = super::entry::written_duration_ms(self.origin, self.at(now));
        self.recorder.finish(duration_ms, exit_code).await
    }
}
