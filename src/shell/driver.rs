//! The one event loop: input items, job ends, the core's next deadline, spawn retries and stop
//! signals go in; the core decides; the driver carries out its decisions and records every job.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal as unix_signal, SignalKind};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::backend::Backend;
use super::child::{self, Control, Ended, Launch, OutputPlan, SpawnError, Timing};
use super::input::{InputItem, JobSpec};
use super::reap::Reaper;
use super::signal::{next_signal, recv_optional, ShutdownLevel, StopSignals};
use super::sleep_until_opt;
use super::spawn::{BaseEnv, ProgramPaths};
use super::unix::{self, signal_name};
use crate::cli::{OnFull, OutputMode};
use crate::config::RunConfig;
use crate::core::{
    classify, Admission, ExitFacts, FailReason, JobRequest, Limits, Outcome, RejectReason,
    Released, Scheduler, Seq, Start, StopReason, Tick,
};
use crate::exit;
use crate::output::blocks::{self, Block, BlockOrder};
use crate::output::framing::prefix_for;
use crate::output::results::{IndexEntry, INDEX};
use crate::output::sink::SinkTx;
use crate::report::events::{self, Event, EventLog};
use crate::report::json::{timestamp, JobRecord, RunRecord, SCHEMA_VERSION};
use crate::report::recorder::Recorder;
use crate::resume::Resume;
use crate::template;
use std::io::Write as _;

/// First and longest pause before a spawn that failed with EAGAIN/EMFILE/ENFILE is retried.
const RESPAWN_FIRST: Duration = Duration::from_millis(5);
const RESPAWN_MAX: Duration = Duration::from_millis(500);

/// Most input items admitted in one turn of the loop.
const INPUT_BURST: usize = 256;

/// The sinks job output and status text go to.
pub struct Streams {
    /// Job stdout (lanes' stdout, or its stderr under `--json`).
    pub job_stdout: SinkTx,
    /// Job stderr and lanes' own messages.
    pub stderr: SinkTx,
    /// Whether key prefixes on the job-stdout sink are coloured.
    pub color_stdout: bool,
    /// Whether key prefixes on the stderr sink are coloured.
    pub color_stderr: bool,
}

/// A job the driver knows: admitted and not yet recorded.
struct Job {
    spec: JobSpec,
    /// Boxed, like `previous`: only jobs in flight have one, and a waiting job is kept small
    /// (a full queue holds `--max-queued` of them).
    started: Option<Box<Started>>,
    attempts: u32,
    /// The seq of the newer job that made this one stop (`--cancel-in-progress`).
    superseded_by: Option<Seq>,
    /// For the job a run is known by: every job of the run (itself first; a batch's members).
    members: Vec<Seq>,
    /// The last try, when the job waits for a retry: when it started and ended.
    previous: Option<Box<(Started, SystemTime, Instant)>>,
}

struct Started {
    at: SystemTime,
    instant: Instant,
    slot: u32,
    waited: Duration,
}

/// How a run ended.
pub struct RunEnd {
    /// lanes' exit status.
    pub code: u8,
    /// The human summary, for stderr.
    pub summary: String,
    /// A second stop signal forced the end: output that cannot be written soon is dropped.
    pub forced: bool,
    /// The stop signals, still listened to while the last output is written.
    pub signals: Option<StopSignals>,
}

/// Runs the whole job stream to its end.
pub async fn drive(
    config: RunConfig,
    hangup_ignored: bool,
    input: mpsc::Receiver<InputItem>,
    streams: Streams,
    mut recorder: Recorder,
    events: EventLog,
    resume: Option<Resume>,
) -> RunEnd {
    let reaper = Reaper::default();
    // SIGCHLD first, so that no child's exit can be missed.
    let mut sigchld = unix_signal(SignalKind::child()).ok();
    let mut signals = StopSignals::install(!hangup_ignored).ok();
    let started_at = SystemTime::now();
    recorder
        .start(&RunRecord {
            kind: "run",
            version: env!("CARGO_PKG_VERSION"),
            schema: SCHEMA_VERSION,
            started_at: timestamp(started_at),
            max_concurrent: config.max_concurrent,
            source: config.source.describe(),
        })
        .await;
    let (ended_tx, ended_rx) = mpsc::unbounded_channel();
    let keep_order = config.keep_order;
    let (block_tx, mut block_rx) = mpsc::unbounded_channel::<Block>();
    let blocks_waiting = Arc::new(BlocksWaiting::default());
    let block_writer = {
        let (stdout, stderr) = (streams.job_stdout.clone(), streams.stderr.clone());
        let waiting = Arc::clone(&blocks_waiting);
        tokio::spawn(async move {
            while let Some(block) = block_rx.recv().await {
                block.write(&stdout, &stderr).await;
                waiting
                    .count
                    .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                waiting.written.notify_one();
            }
        })
    };
    let block_tx = Some(block_tx);
    let results_index = config
        .results
        .as_deref()
        .and_then(|dir| std::fs::File::create(dir.join(INDEX)).ok());
    let backend = Arc::new(config.backend.clone());
    let job_capacity = config
        .max_queued
        .saturating_add(config.max_concurrent)
        .min(1 << 20);
    let mut driver = Driver {
        base_env: BaseEnv::new(&config.env),
        programs: ProgramPaths::default(),
        backend,
        core: Scheduler::with_policy(
            Limits {
                max_concurrent: config.max_concurrent,
                max_queued: config.max_queued,
            },
            config.policy,
        ),
        input_finite: !matches!(config.source, crate::config::Source::Stdin),
        own_cwd: std::env::current_dir()
            .and_then(std::fs::canonicalize)
            .unwrap_or_else(|_| PathBuf::from(".")),
        results_dir: config.results.as_deref().map(Arc::from),
        config,
        t0: Instant::now(),
        // Sized for a full queue up front (see `Scheduler::with_policy`).
        jobs: HashMap::with_capacity(job_capacity),
        controls: HashMap::new(),
        respawn: VecDeque::new(),
        respawn_at: None,
        backoff: RESPAWN_FIRST,
        level: ShutdownLevel::Running,
        stop_signal: None,
        input: Some(input),
        read_error: false,
        ended_tx,
        reaper,
        streams,
        recorder,
        events,
        resume,
        received: 0,
        failed_fast: false,
        results_index,
        blocks: BlockOrder::new(keep_order),
        tries: HashMap::new(),
        block_tx,
        block_writer: Some(block_writer),
        blocks_waiting,
    };
    let mut ended_rx = ended_rx;
    let mut redraw = tokio::time::interval(Duration::from_secs(1));
    redraw.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        driver.start_ready().await;
        if driver.is_done() {
            break;
        }
        let wake = driver.next_wake();
        let accept_input = driver.input.is_some() && driver.can_accept();
        tokio::select! {
            biased;
            Some((signal, level)) = next_signal(&mut signals) => driver.on_signal(signal, level).await,
            Some(()) = recv_optional(&mut sigchld) => driver.reaper.reap(),
            Some(ended) = ended_rx.recv() => driver.on_ended(ended).await,
            () = sleep_until_opt(wake) => driver.on_wake().await,
            () = driver.blocks_waiting.written.notified(), if driver.blocks_backlogged() => {},
            item = recv_input(&mut driver.input), if accept_input => driver.on_input(item).await,
            _ = redraw.tick(), if driver.recorder.has_progress() => {
                if let Some(progress) = driver.recorder.progress() {
                    progress.tick();
                }
            }
        }
    }
    let mut end = driver.finish(started_at, &mut signals).await;
    end.signals = signals;
    end
}

async fn recv_input(input: &mut Option<mpsc::Receiver<InputItem>>) -> Option<InputItem> {
    match input {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

struct Driver {
    config: RunConfig,
    /// Where jobs run.
    backend: Arc<Backend>,
    /// The environment every job starts from.
    base_env: BaseEnv,
    /// Where the shell (or `srun`) was found on `PATH`.
    programs: ProgramPaths,
    own_cwd: PathBuf,
    core: Scheduler,
    t0: Instant,
    /// Boxed: a table that churns through distinct entries grows to twice the buckets its
    /// peak needs (hashbrown resizes rather than rehashing in place once more than half full),
    /// so its buckets are kept to a pointer each.
    jobs: HashMap<Seq, Box<Job>>,
    controls: HashMap<Seq, mpsc::UnboundedSender<Control>>,
    /// Jobs taken by the core whose spawn hit a transient shortage, in order.
    respawn: VecDeque<Start>,
    respawn_at: Option<Instant>,
    backoff: Duration,
    level: ShutdownLevel,
    stop_signal: Option<Signal>,
    input: Option<mpsc::Receiver<InputItem>>,
    read_error: bool,
    ended_tx: mpsc::UnboundedSender<Ended>,
    reaper: Reaper,
    streams: Streams,
    recorder: Recorder,
    events: EventLog,
    /// `--resume`: jobs that succeeded in an earlier report are skipped.
    resume: Option<Resume>,
    /// Input items accepted so far (jobs and invalid lines, not skipped ones): the total, once
    /// the input has ended.
    received: u64,
    /// `--fail-fast` was triggered.
    failed_fast: bool,
    /// Whether the input ends by itself (a file or manifest), so that after `--fail-fast` it
    /// can still be read to its end and every job recorded.
    input_finite: bool,
    results_dir: Option<Arc<Path>>,
    /// `--results DIR`: `DIR/index.jsonl`, one line per job that ran.
    results_index: Option<std::fs::File>,
    /// Grouped output: when blocks may be written.
    blocks: BlockOrder,
    /// Grouped output of tries that were retried, written with the job's final block.
    tries: HashMap<Seq, Vec<Block>>,
    /// To the one task that writes blocks, in the order sent.
    block_tx: Option<mpsc::UnboundedSender<Block>>,
    block_writer: Option<tokio::task::JoinHandle<()>>,
    /// Grouped blocks handed to the writer task and not written yet.
    blocks_waiting: Arc<BlocksWaiting>,
}

/// Grouped output on its way out: a job's block is written after the job has ended and left
/// its slot, so without a bound a reader that stopped reading would let finished jobs' blocks
/// (and their spill files) pile up while new jobs start.
#[derive(Default)]
struct BlocksWaiting {
    count: std::sync::atomic::AtomicUsize,
    /// Signalled each time a block has been written.
    written: tokio::sync::Notify,
}

impl Driver {
    fn tick(&self) -> Tick {
        self.t0.elapsed()
    }

    fn can_accept(&self) -> bool {
        match self.config.on_full {
            // Draining (after --fail-fast, a file is read to its end): every job is recorded
            // at once, so reading never needs to wait for room.
            OnFull::Wait => self.core.has_room() || self.core.is_draining(),
            OnFull::Reject => true,
        }
    }

    fn is_done(&self) -> bool {
        self.input.is_none()
            && self.core.is_idle()
            && self.controls.is_empty()
            && self.respawn.is_empty()
    }

    fn next_wake(&self) -> Option<Instant> {
        let deadline = self.core.next_deadline().map(|tick| self.t0 + tick);
        match (deadline, self.respawn_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Starts every job the core says may start now. Waits while a spawn is being retried, so
    /// that a shortage of descriptors does not pile up taken-but-unstarted jobs.
    /// Whether grouped blocks wait for the reader: as many as jobs may run. No job starts
    /// until one of them is written, so that a stalled reader stalls the run (backpressure).
    fn blocks_backlogged(&self) -> bool {
        self.blocks_waiting
            .count
            .load(std::sync::atomic::Ordering::Relaxed)
            >= self.config.max_concurrent.max(1)
    }

    async fn start_ready(&mut self) {
        while self.respawn.is_empty() && !self.blocks_backlogged() {
            let Some(start) = self.core.take(self.tick()) else {
                break;
            };
            self.launch(start).await;
        }
    }

    async fn launch(&mut self, start: Start) {
        let Some(job) = self.jobs.get(&start.seq) else {
            let _ = self.core.release(start.seq);
            return;
        };
        let command = match &self.config.template {
            Some(template) => {
                let args: Vec<&str> = start
                    .batch
                    .iter()
                    .filter_map(|seq| self.jobs.get(seq))
                    .map(|member| member.spec.command.as_str())
                    .collect();
                template.render(&args, &job.spec.key, start.seq, start.slot)
            }
            None => job.spec.command.clone(),
        };
        let capture = self.config.output != OutputMode::None || self.results_dir.is_some();
        let spec = &job.spec;
        let launch = Launch {
            shell: &self.config.shell,
            command: &command,
            cwd: spec.cwd.as_deref(),
            own_cwd: &self.own_cwd,
            env: &self.base_env,
            programs: &self.programs,
            job_env: &spec.env,
            key: &spec.key,
            seq: spec.seq,
            slot: start.slot,
            attempt: start.attempt,
            capture,
            backend: &self.backend,
            timeout: spec.timeout.or(self.config.timeout),
        };
        let spawned = match child::spawn(&launch, &self.reaper) {
            // Out of descriptors with no job of ours running: nothing will free one, so
            // waiting would hang the run. The job fails with the reason instead.
            Err(SpawnError::Transient(err))
                if self.controls.is_empty() && err.raw_os_error() == Some(nix::libc::EMFILE) =>
            {
                Err(SpawnError::Failed(format!(
                    "cannot start a job: {err}, and no running job will free a descriptor \
                     (raise `ulimit -n`)"
                )))
            }
            other => other,
        };
        match spawned {
            Ok(spawned) => {
                self.backoff = RESPAWN_FIRST;
                let plan = OutputPlan {
                    mode: self.config.output,
                    stdout: self.streams.job_stdout.clone(),
                    stderr: self.streams.stderr.clone(),
                    prefix: Arc::from(prefix_for(&spec.key, self.streams.color_stdout)),
                    err_prefix: Arc::from(prefix_for(&spec.key, self.streams.color_stderr)),
                    key: Arc::clone(&spec.key),
                    results_dir: self.results_dir.clone(),
                };
                let now = SystemTime::now();
                let instant = Instant::now();
                // The turn timeout counts from the real start, after the spawn.
                self.core
                    .started(start.seq, instant.saturating_duration_since(self.t0));
                let batch = self.config.batching.then_some(start.seq);
                for &seq in &start.batch {
                    let Some(member) = self.jobs.get_mut(&seq) else {
                        continue;
                    };
                    member.attempts = start.attempt;
                    member.started = Some(Box::new(Started {
                        at: now,
                        instant,
                        slot: start.slot,
                        waited: start.waited,
                    }));
                    if self.events.enabled() {
                        self.events.write(&Event::Started {
                            seq,
                            key: &start.key,
                            slot: start.slot,
                            attempt: start.attempt,
                            batch,
                            at: events::now(),
                        });
                    }
                }
                if let Some(leader) = self.jobs.get_mut(&start.seq) {
                    leader.members.clone_from(&start.batch);
                }
                let queued = self.core.queued();
                if let Some(progress) = self.recorder.progress() {
                    progress.started(start.seq, &start.key, &command);
                    progress.set_queued(queued);
                }
                let (control_tx, control_rx) = mpsc::unbounded_channel();
                self.controls.insert(start.seq, control_tx);
                let timing = Timing {
                    backend: Arc::clone(&self.backend),
                    attempt: start.attempt,
                    grace: self.config.grace,
                    leak_window: self.config.leak_window,
                };
                let ended_tx = self.ended_tx.clone();
                let reaper = self.reaper.clone();
                let seq = start.seq;
                tokio::spawn(async move {
                    let ended =
                        child::supervise(seq, spawned, control_rx, plan, timing, reaper).await;
                    let _ = ended_tx.send(ended);
                });
            }
            Err(SpawnError::Transient(_)) => {
                self.respawn.push_back(start);
                self.respawn_at = Some(Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(RESPAWN_MAX);
            }
            Err(SpawnError::Failed(message)) => {
                let outcome = Outcome::Failed(FailReason::SpawnError);
                for &seq in &start.batch {
                    if let Some(member) = self.jobs.get_mut(&seq) {
                        member.attempts = start.attempt;
                    }
                }
                if self.release_run(start.seq, &start.batch, outcome, start.attempt) {
                    return;
                }
                for &seq in &start.batch {
                    let Some(job) = self.jobs.remove(&seq) else {
                        continue;
                    };
                    let mut record = base_record(&job.spec, outcome);
                    record.attempts = job.attempts;
                    record.wait_ms = Some(millis(start.waited));
                    record.batch = self.config.batching.then_some(start.seq);
                    record.error = Some(message.clone());
                    self.record(record, outcome, &[], Vec::new()).await;
                }
                self.after_final(outcome).await;
            }
        }
    }

    /// Accepts an input item, then whatever else the input thread has ready (up to a bound,
    /// while there is room), so that a burst of lines is admitted before jobs are taken:
    /// lanes then see their whole backlog (fuller batches) and the loop turns less often.
    async fn on_input(&mut self, item: Option<InputItem>) {
        let Some(item) = item else {
            self.input = None;
            self.input_ended();
            return;
        };
        self.accept(item).await;
        if !self.config.batching {
            self.start_ready().await;
        }
        for _ in 0..INPUT_BURST {
            if !self.can_accept() {
                break;
            }
            let Some(input) = self.input.as_mut() else {
                break;
            };
            match input.try_recv() {
                Ok(item) => {
                    self.accept(item).await;
                    if !self.config.batching {
                        // Start what can start before the next line is admitted, so that,
                        // say, a key's first job runs at once rather than being coalesced
                        // away by a line read in the same burst. Batching wants the burst.
                        self.start_ready().await;
                    }
                }
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    self.input = None;
                    self.input_ended();
                    break;
                }
            }
        }
    }

    /// The input is at its end: the display learns the total.
    fn input_ended(&mut self) {
        let total = self.received;
        if let Some(progress) = self.recorder.progress() {
            progress.set_total(total);
        }
    }

    async fn accept(&mut self, item: InputItem) {
        self.received += 1;
        match item {
            InputItem::Job(spec) => {
                if let Some(resume) = &mut self.resume {
                    if resume.skip(&spec.key, &spec.command) {
                        self.received -= 1;
                        self.recorder.skipped();
                        let ready = self.blocks.finished(spec.seq, Vec::new());
                        self.write_blocks(ready);
                        return;
                    }
                }
                let request = JobRequest {
                    seq: spec.seq,
                    key: Arc::clone(&spec.key),
                    rank: spec.rank,
                    timeout: spec.timeout.or(self.config.timeout),
                    weight: if self.config.batching {
                        template::weight(&spec.command)
                    } else {
                        0
                    },
                };
                let seq = spec.seq;
                let key = Arc::clone(&spec.key);
                let (ahead, replaced, cancel) = match self.core.admit(request, self.tick()) {
                    Admission::Queued { ahead } => (ahead, None, None),
                    Admission::Superseding {
                        ahead,
                        replaced,
                        cancel,
                    } => (ahead, replaced, cancel),
                    Admission::Full => {
                        let outcome = Outcome::Rejected(RejectReason::QueueFull);
                        let mut record = base_record(&spec, outcome);
                        record.error = Some(format!(
                            "{} jobs were already waiting (--max-queued)",
                            self.core.limits().max_queued
                        ));
                        self.record(record, outcome, &[], Vec::new()).await;
                        return;
                    }
                    Admission::Closed => {
                        let reason = if self.failed_fast {
                            StopReason::FailFast
                        } else {
                            StopReason::Shutdown
                        };
                        let outcome = Outcome::Interrupted(reason);
                        self.record(base_record(&spec, outcome), outcome, &[], Vec::new())
                            .await;
                        return;
                    }
                };
                self.jobs.insert(
                    seq,
                    Box::new(Job {
                        spec,
                        started: None,
                        attempts: 0,
                        superseded_by: None,
                        members: Vec::new(),
                        previous: None,
                    }),
                );
                let queued = self.core.queued();
                if let Some(progress) = self.recorder.progress() {
                    progress.set_queued(queued);
                }
                if self.events.enabled() {
                    self.events.write(&Event::Queued {
                        seq,
                        key: &key,
                        ahead,
                        at: events::now(),
                    });
                }
                if let Some(old) = replaced.and_then(|old| self.jobs.remove(&old)) {
                    let outcome = Outcome::Interrupted(StopReason::Superseded);
                    let mut record = base_record(&old.spec, outcome);
                    record.superseded_by = Some(seq);
                    record.attempts = old.attempts;
                    self.record(record, outcome, &[], Vec::new()).await;
                }
                if let Some(running) = cancel {
                    if let Some(job) = self.jobs.get_mut(&running) {
                        job.superseded_by = Some(seq);
                    }
                    if let Some(control) = self.controls.get(&running) {
                        let _ = control.send(Control::Stop {
                            signal: Signal::SIGTERM,
                            reason: StopReason::Superseded,
                        });
                    }
                }
            }
            InputItem::Invalid {
                seq,
                line,
                key,
                message,
            } => {
                let outcome = Outcome::Rejected(RejectReason::InvalidInput);
                let mut record = empty_record(seq, line, outcome);
                record.key = key;
                record.error = Some(format!("line {line}: {message}"));
                self.record(record, outcome, &[], Vec::new()).await;
            }
            InputItem::ReadError(message) => {
                self.read_error = true;
                let _ = self
                    .streams
                    .stderr
                    .send(format!("lanes: {message}; no more jobs are read\n").into_bytes())
                    .await;
                self.input = None;
            }
        }
    }

    /// Tells the core a run (one job, or a batch led by `seq`) has ended; returns true when
    /// it goes again (a retry), in which case no record is written yet.
    fn release_run(&mut self, seq: Seq, members: &[Seq], outcome: Outcome, attempt: u32) -> bool {
        let released = if matches!(outcome, Outcome::Failed(_)) {
            self.core.release_failed(seq, self.tick())
        } else {
            self.core.release(seq)
        };
        let retry = matches!(released, Released::Retry { .. });
        if self.events.enabled() {
            for member in members {
                if let Some(job) = self.jobs.get(member) {
                    self.events.write(&Event::Ended {
                        seq: *member,
                        key: &job.spec.key,
                        outcome: outcome.name(),
                        reason: outcome.reason(),
                        attempt,
                        retry,
                        at: events::now(),
                    });
                }
            }
        }
        retry
    }

    /// What follows a job's final outcome: `--fail-fast` after a failure.
    async fn after_final(&mut self, outcome: Outcome) {
        if self.config.fail_fast && matches!(outcome, Outcome::Failed(_)) && !self.failed_fast {
            self.failed_fast = true;
            self.stop_intake(StopReason::FailFast).await;
            for control in self.controls.values() {
                let _ = control.send(Control::Stop {
                    signal: Signal::SIGTERM,
                    reason: StopReason::FailFast,
                });
            }
        }
    }

    async fn on_ended(&mut self, ended: Ended) {
        self.controls.remove(&ended.seq);
        if !self.respawn.is_empty() {
            // Descriptors and processes were just freed: retry a waiting spawn now.
            self.respawn_at = Some(Instant::now());
        }
        let outcome = classify(ended.exit, ended.stopped_before_exit);
        if let Some(progress) = self.recorder.progress() {
            progress.run_ended(ended.seq);
        }
        let block = ended.captured.map(|(stdout, stderr)| {
            let key = self.jobs.get(&ended.seq).map_or("", |job| &job.spec.key);
            Block {
                header: blocks::header(key, ended.seq, outcome),
                stdout,
                stderr,
            }
        });
        let mut tries = self.tries.remove(&ended.seq).unwrap_or_default();
        tries.extend(block);
        let (attempt, members) = match self.jobs.get_mut(&ended.seq) {
            Some(job) => (job.attempts, std::mem::take(&mut job.members)),
            None => return,
        };
        if self.release_run(ended.seq, &members, outcome, attempt) {
            let ended_instant = ended.ended_instant;
            let ended_at = ended.ended_at;
            for seq in &members {
                if let Some(job) = self.jobs.get_mut(seq) {
                    // Kept for the record, should the run stop before the retry starts.
                    job.previous = job
                        .started
                        .take()
                        .map(|started| Box::new((*started, ended_at, ended_instant)));
                }
            }
            if self.config.keep_order {
                self.tries.insert(ended.seq, tries);
            } else {
                self.write_blocks(tries);
            }
            return;
        }
        for seq in &members {
            let Some(job) = self.jobs.remove(seq) else {
                continue;
            };
            let mut record = base_record(&job.spec, outcome);
            if outcome == Outcome::Interrupted(StopReason::Superseded) {
                record.superseded_by = job.superseded_by;
            }
            match ended.exit {
                ExitFacts::Exited(code) => record.exit_code = Some(code),
                ExitFacts::Signaled(signal) => record.signal = Some(signal_name(signal)),
            }
            record.attempts = job.attempts;
            record.leaked = ended.leaked;
            record.error.clone_from(&ended.output_error);
            record.batch = self.config.batching.then_some(ended.seq);
            if let Some(started) = &job.started {
                record.started = true;
                record.started_at = Some(timestamp(started.at));
                record.slot = Some(started.slot);
                record.wait_ms = Some(millis(started.waited));
                record.duration_ms = Some(millis(
                    ended
                        .ended_instant
                        .saturating_duration_since(started.instant),
                ));
            }
            record.ended_at = timestamp(ended.ended_at);
            let output = if *seq == ended.seq {
                std::mem::take(&mut tries)
            } else {
                Vec::new()
            };
            self.record(record, outcome, &ended.stderr_tail, output)
                .await;
        }
        self.after_final(outcome).await;
    }

    async fn on_wake(&mut self) {
        let now = Instant::now();
        if self.respawn_at.is_some_and(|at| at <= now) {
            self.respawn_at = None;
            while let Some(start) = self.respawn.pop_front() {
                self.launch(start).await;
                if self.respawn_at.is_some() {
                    // Still short: `launch` queued it again at the back; keep the order.
                    if let Some(again) = self.respawn.pop_back() {
                        self.respawn.push_front(again);
                    }
                    break;
                }
            }
        }
        for expired in self.core.expire(self.tick()) {
            if let Some(control) = self.controls.get(&expired.seq) {
                let _ = control.send(Control::Stop {
                    signal: Signal::SIGTERM,
                    reason: StopReason::Timeout,
                });
            }
        }
    }

    async fn on_signal(&mut self, signal: Signal, level: ShutdownLevel) {
        if level <= self.level {
            return;
        }
        self.level = level;
        match level {
            ShutdownLevel::Running => {}
            ShutdownLevel::Graceful => {
                self.stop_signal = Some(signal);
                // The display goes at once: what follows is the shutdown's own account.
                if let Some(progress) = self.recorder.progress() {
                    progress.finish();
                }
                self.stop_intake(StopReason::Shutdown).await;
                for control in self.controls.values() {
                    let _ = control.send(Control::Stop {
                        signal,
                        reason: StopReason::Shutdown,
                    });
                }
            }
            ShutdownLevel::Forced => {
                for control in self.controls.values() {
                    let _ = control.send(Control::Kill);
                }
            }
        }
    }

    /// Stops starting jobs and records every job that has not started, in input order, as
    /// interrupted for `reason`: what the core holds, what waits for a spawn retry, and what
    /// the input thread had already handed over. A shutdown stops reading input; after
    /// `--fail-fast` a file or manifest is still read to its end (each job recorded at once),
    /// stdin is not.
    async fn stop_intake(&mut self, reason: StopReason) {
        let outcome = Outcome::Interrupted(reason);
        let mut pending = Vec::new();
        let keep_reading = reason == StopReason::FailFast && self.input_finite;
        if !keep_reading {
            if let Some(mut input) = self.input.take() {
                input.close();
                while let Ok(item) = input.try_recv() {
                    pending.push(item);
                }
            }
        }
        let now = self.tick();
        let mut unstarted: Vec<(Seq, Duration)> = self
            .core
            .drain(now)
            .into_iter()
            .map(|d| (d.seq, d.waited))
            .collect();
        for start in std::mem::take(&mut self.respawn) {
            let _ = self.core.release(start.seq);
            unstarted.extend(start.batch.iter().map(|&seq| (seq, start.waited)));
        }
        self.respawn_at = None;
        unstarted.sort_by_key(|&(seq, _)| seq);
        for (seq, waited) in unstarted {
            if let Some(job) = self.jobs.remove(&seq) {
                let mut record = base_record(&job.spec, outcome);
                record.wait_ms = Some(millis(waited));
                record.attempts = job.attempts;
                if let Some((started, ended_at, ended)) = job.previous.as_deref() {
                    // It ran before and waited for a retry: the record tells of that try.
                    record.started = true;
                    record.started_at = Some(timestamp(started.at));
                    record.ended_at = timestamp(*ended_at);
                    record.slot = Some(started.slot);
                    record.wait_ms = Some(millis(started.waited));
                    record.duration_ms =
                        Some(millis(ended.saturating_duration_since(started.instant)));
                    // Its last `ended` event said it would go again; this one ends it.
                    if self.events.enabled() {
                        self.events.write(&Event::Ended {
                            seq,
                            key: &job.spec.key,
                            outcome: outcome.name(),
                            reason: outcome.reason(),
                            attempt: job.attempts,
                            retry: false,
                            at: events::now(),
                        });
                    }
                }
                self.record(record, outcome, &[], Vec::new()).await;
            }
        }
        for item in pending {
            match item {
                InputItem::Job(spec) => {
                    self.recorder
                        .job(base_record(&spec, outcome), outcome, &[])
                        .await;
                }
                other => self.accept(other).await,
            }
        }
    }

    /// Writes one job's final record, and lets its grouped output go when its turn has come.
    async fn record(
        &mut self,
        record: JobRecord,
        outcome: Outcome,
        stderr_tail: &[u8],
        output: Vec<Block>,
    ) {
        let seq = record.seq;
        if !record.started && self.events.enabled() {
            // A job that never ran ends here: rejected, superseded or stopped while waiting.
            self.events.write(&Event::Ended {
                seq,
                key: record.key.as_deref().unwrap_or(""),
                outcome: outcome.name(),
                reason: outcome.reason(),
                attempt: record.attempts,
                retry: false,
                at: events::now(),
            });
        }
        if let (Some(index), true, Some(key)) =
            (&mut self.results_index, record.started, &record.key)
        {
            let entry = IndexEntry::new(seq, key, record.batch.unwrap_or(seq));
            if let Err(err) = index.write_all(&crate::report::json::to_line(&entry)) {
                eprintln!("lanes: cannot write the results index: {err}");
                self.results_index = None;
            }
        }
        self.recorder.job(record, outcome, stderr_tail).await;
        let ready = self.blocks.finished(seq, output);
        self.write_blocks(ready);
    }

    fn write_blocks(&mut self, ready: Vec<Block>) {
        if let Some(tx) = &self.block_tx {
            for block in ready {
                // Counted before it is sent: the writer may be done with it at once.
                let count = &self.blocks_waiting.count;
                count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if tx.send(block).is_err() {
                    count.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
    }

    /// Terminates what escaped its job's process group (`setsid`, a double fork into another
    /// session) and was re-parented to lanes: SIGTERM to each one's group, SIGKILL after the
    /// grace period to what is left, so that no process of any job outlives the run.
    async fn sweep_escapees(&mut self, signals: &mut Option<StopSignals>) {
        let mut signalled = std::collections::HashSet::new();
        let mut deadline = Instant::now() + self.config.grace;
        // Bounded: after SIGKILL nothing survives long; the extra second covers reaping.
        let give_up = deadline + Duration::from_secs(2);
        loop {
            self.reaper.reap();
            let left = unix::children();
            if left.is_empty() || Instant::now() >= give_up {
                return;
            }
            let forced = Instant::now() >= deadline;
            for pid in left {
                // New escapees (re-parented as their parents die) get SIGTERM as they come.
                if forced {
                    unix::signal_escapee(pid, Signal::SIGKILL);
                } else if signalled.insert(pid) {
                    unix::signal_escapee(pid, Signal::SIGTERM);
                }
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
                Some((signal, _)) = next_signal(signals) => {
                    // A stop signal now: nothing waits any more.
                    if self.stop_signal.is_none() {
                        self.stop_signal = Some(signal);
                    }
                    deadline = Instant::now();
                }
            }
        }
    }

    /// Ends the run: returns the exit status and the human summary, which the caller writes
    /// once job output has been flushed, so that it comes last.
    async fn finish(mut self, started_at: SystemTime, signals: &mut Option<StopSignals>) -> RunEnd {
        self.sweep_escapees(signals).await;
        // Slurm: nothing of this run may stay on the cluster.
        self.backend.cancel_run();
        let held = self.blocks.drain();
        self.write_blocks(held);
        self.block_tx = None;
        let mut forced = self.level == ShutdownLevel::Forced;
        if let Some(writer) = self.block_writer.take() {
            forced = finish_unless_stopped(writer, forced, signals).await;
        }
        self.recorder.write_junit();
        let code = exit::for_run(
            self.stop_signal.map(|s| s as i32),
            self.recorder.any_bad()
                || self.read_error
                || self.recorder.report_lost()
                || self.events.lost(),
        );
        let elapsed = SystemTime::now()
            .duration_since(started_at)
            .unwrap_or_default();
        let (text, forwarder) = self.recorder.finish(millis(elapsed), code).await;
        if let Some(forwarder) = forwarder {
            forced = finish_unless_stopped(forwarder, forced, signals).await;
        }
        RunEnd {
            code,
            summary: text,
            forced,
            signals: None,
        }
    }
}

/// After a second stop signal, how long output still on its way to lanes' stdout or stderr
/// may take to be written before lanes exits without it.
pub const FORCED_WRITE_WAIT: Duration = Duration::from_millis(500);

/// Waits for a task that hands output on (grouped blocks, `--json` records) to end. Once
/// stopping (`forced`, or a stop signal comes meanwhile), it gets [`FORCED_WRITE_WAIT`] more,
/// then is aborted and what it had not handed on is dropped: a reader that stopped reading
/// would otherwise keep lanes waiting for ever. Returns whether lanes is now stopping.
async fn finish_unless_stopped(
    mut task: tokio::task::JoinHandle<()>,
    forced: bool,
    signals: &mut Option<StopSignals>,
) -> bool {
    if !forced {
        tokio::select! {
            _ = &mut task => return false,
            Some(_) = next_signal(signals) => {}
        }
    }
    if tokio::time::timeout(FORCED_WRITE_WAIT, &mut task)
        .await
        .is_err()
    {
        task.abort();
    }
    true
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A record for a job that never started, with the given outcome.
fn base_record(spec: &JobSpec, outcome: Outcome) -> JobRecord {
    let mut record = empty_record(spec.seq, spec.line, outcome);
    record.key = Some(spec.key.to_string());
    record.command = Some(spec.command.clone());
    record
}

fn empty_record(seq: Seq, line: u64, outcome: Outcome) -> JobRecord {
    JobRecord {
        kind: "job",
        seq,
        line,
        key: None,
        command: None,
        outcome: outcome.name(),
        reason: outcome.reason(),
        exit_code: None,
        signal: None,
        started: false,
        started_at: None,
        ended_at: timestamp(SystemTime::now()),
        duration_ms: None,
        wait_ms: None,
        attempts: 0,
        slot: None,
        leaked: false,
        superseded_by: None,
        batch: None,
        error: None,
    }
}
