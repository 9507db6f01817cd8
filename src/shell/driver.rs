//! The one event loop: input items, job ends, the core's next deadline and stop signals come
//! in; each goes to the core, and the driver carries out what the core decided (start, stop,
//! record). It decides nothing itself.

use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{signal as unix_signal, SignalKind};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::cgroup::{CgroupRun, Usage};
use super::input::Input;
use super::key_locks::{CheckedKeyLocks, KeyLocks};
use super::launch::{Launcher, NotStarted, Streams};
use super::lock_dir::{Acquired, Grant};
use super::reap::{sweep_escapees, Reaper};
use super::signal::{
    child_exited, next_signal, recv_optional, terminal_stop_requested, until_stopped, StopSignals,
};
use super::sleep_until_opt;
use super::spawner::SpawnOutcome;
use super::supervise::{Control, Ended};
use crate::config::{RunConfig, Source};
use crate::core::{
    Account, Finished, Halt, Limits, Offer, Outcome, RejectReason, RunFacts, Scheduler, Seq,
    SignalVerdict, SpawnVerdict, Start, StopOrder, Tick,
};
use crate::exit;
use crate::input::{InputItem, JobSpec};
use crate::output::blocks::{self, Block, GroupedOutput};
use crate::output::results::ResultsIndex;
use crate::report::entry::HostWait;
use crate::report::json::{timestamp, LockHolder};
use crate::report::ledger::{JobFacts, Ledger};
use crate::resume::Resume;
use crate::serve::journal::Closing;

mod service;

/// Most input items admitted in one turn of the loop.
const INPUT_BURST: usize = 256;

/// The longest a round of starts, or a burst of input lines with their starts, goes on before
/// the event loop turns. A turn that took longer is followed by a yield to the runtime, which
/// then reads what came meanwhile (stop signals, child exits, timers): the loop would
/// otherwise find a branch ready at every turn (more input, more starts) and never let it.
/// Without both, `-j 2000` on a busy machine (about 200 starts a second) saw Ctrl-C and turn
/// deadlines seconds late.
const TURN_BUDGET: Duration = Duration::from_millis(20);

/// Descriptors a key's waiting request holds under `--lock-dir`: its lock file, its ticket, its
/// line's directory and the keys' directory (measured: 96 open for 20 waiting requests).
const DESCRIPTORS_PER_REQUEST: usize = 4;

/// Descriptors kept aside from key requests beyond their half: lanes' own files and the
/// moments a request or a start opens one more.
const DESCRIPTORS_KEPT: usize = 16;

/// How many keys may be asked for at once under `--lock-dir` with `free` descriptors: their
/// requests may hold at most half of what is free (less a few kept aside), the rest being for
/// the jobs (their pipes, their cgroups, their keys' locks). Under a small `ulimit -n` the
/// requests would otherwise hold every descriptor, and jobs fail to start for want of one that
/// no running job would give back.
fn host_requests_within(free: usize) -> usize {
    free.saturating_sub(DESCRIPTORS_KEPT) / (2 * DESCRIPTORS_PER_REQUEST)
}

/// How a run ended.
pub(crate) struct RunEnd {
    /// lanes' exit status.
    pub code: u8,
    /// The human summary, for stderr.
    pub summary: String,
    /// A second stop signal forced the end: output that cannot be written soon is dropped.
    pub forced: bool,
    /// The stop signals, still listened to while the last output is written.
    pub signals: Option<StopSignals>,
    /// Output for lanes' stdout or stderr was dropped after a stop signal (nobody took it).
    pub output_dropped: bool,
}

/// What the shell keeps of a run's end besides the core's verdict: the facts its process
/// left.
#[derive(Default)]
struct RunOutput {
    leaked: bool,
    error: Option<String>,
    stderr_tail: Vec<u8>,
    /// The stderr tails of the tries retried before this one, oldest first (`--retries`).
    retried_tails: Vec<Vec<u8>>,
    block: Option<Block>,
    usage: Usage,
}

/// What is kept of the tries of a job that were retried, until its record is written.
#[derive(Default)]
struct RetriedTries {
    /// Each retried try's stderr tail (at most a few KiB), oldest first.
    tails: Vec<Vec<u8>>,
    /// The latest retried try's usage.
    usage: Usage,
}

/// A run as prepared before its event loop starts.
pub(crate) struct Prepared {
    /// The validated configuration.
    pub(crate) config: RunConfig,
    /// SIGHUP was ignored at start (`nohup`): it stays ignored.
    pub(crate) hangup_ignored: bool,
    /// Items from the input thread.
    pub(crate) input: mpsc::Receiver<InputItem>,
    /// Where job output goes.
    pub(crate) streams: Streams,
    /// Where records and events go.
    pub(crate) ledger: Ledger,
    /// `--resume`: the successes of an earlier report.
    pub(crate) resume: Option<Resume>,
    /// Tick zero of the run's one clock.
    pub(crate) t0: Instant,
    /// The run's cgroup, when jobs are contained in cgroups.
    pub(crate) cgroups: Option<CgroupRun>,
    /// The stop signals, when already listened to (while `--strict` checked the input), so
    /// that none is missed in between; else they are listened to from the start of [`drive`].
    pub(crate) signals: Option<StopSignals>,
    /// `--lock-dir`, `--coordinate`: where the key lanes this run shares live.
    pub(crate) lock_dir: Option<CheckedKeyLocks>,
    /// `lanes serve`: the socket's requests, instead of input.
    pub(crate) service: Option<crate::serve::ServiceStart>,
}

/// Runs the whole job stream to its end.
pub(crate) async fn drive(prepared: Prepared) -> RunEnd {
    let Prepared {
        config,
        hangup_ignored,
        input,
        streams,
        ledger,
        resume,
        t0,
        cgroups,
        signals,
        lock_dir,
        service,
    } = prepared;
    let (service, mut calls, recovered) = match service {
        Some(start) => (
            Some(service::Service::new(
                start.journal,
                start.requeue_lost,
                start.listening.owed,
            )),
            Some(start.listening.calls),
            Some(start.recovered),
        ),
        None => (None, None, None),
    };
    let reaper = Reaper::default();
    // SIGCHLD first, so that no child's exit can be missed.
    let child_exits = super::signal::ChildExits::listen().ok();
    let mut sigchld = if child_exits.is_none() {
        // The handler first: one pending now is then taken by it, not discarded.
        let stream = unix_signal(SignalKind::child()).ok();
        super::signal::release_watched(nix::sys::signal::Signal::SIGCHLD);
        stream
    } else {
        None
    };
    let mut signals = signals.or_else(|| StopSignals::install(!hangup_ignored).ok());
    // A stop signal that came before the handlers stood was pending until now: it is the
    // first one `next` gives (see `StopSignals::install`), and the loop below, biased to
    // signals, takes it before anything starts.
    // SIGUSR1: a status of the running jobs.
    let mut status_requests = signals.as_mut().and_then(StopSignals::take_status_requests);
    // Ctrl-Z: lanes stops with its jobs.
    let terminal_stop = super::signal::TerminalStop::listen_or_release();
    // The terminal was resized: the display is laid out again.
    let mut resized = unix_signal(SignalKind::window_change()).ok();
    // lanes was continued, maybe after a SIGSTOP: the display may have to start afresh.
    let mut continued = unix_signal(SignalKind::from_raw(nix::libc::SIGCONT)).ok();
    let (ended_tx, mut ended_rx) = mpsc::unbounded_channel();
    let (spawned_tx, mut spawned_rx) = mpsc::unbounded_channel();
    let mut core = Scheduler::with_policy(
        Limits {
            max_concurrent: config.max_concurrent,
            max_queued: config.max_queued,
        },
        config.policy,
    );
    core.set_resources(config.resources.clone());
    core.set_input_finite(!matches!(config.source, Source::Stdin | Source::Socket(_)));
    let (acquired_tx, mut acquired_rx) = mpsc::unbounded_channel();
    let lock_dir = lock_dir.map(|dir| dir.start(timestamp(ledger.at(Tick::ZERO)), acquired_tx));
    if let Some(locks) = &lock_dir {
        core.share_keys();
        if matches!(locks, KeyLocks::Dir(_)) {
            if let Some(free) = crate::descriptors::free() {
                core.limit_host_requests(host_requests_within(free));
            }
        }
    }
    if ledger.tells_events() {
        core.report_wait_changes();
    }
    let job_capacity = config
        .max_queued
        .saturating_add(config.max_concurrent)
        .min(1 << 20);
    let mut driver = Driver {
        grouped: GroupedOutput::new(
            config.keep_order,
            streams.job_stdout.clone(),
            // A block's stderr after its stdout, and before the next block's header: one
            // writer keeps that order where both end in one file.
            if streams.one_destination {
                streams.job_stdout.clone()
            } else {
                streams.stderr.clone()
            },
        ),
        launcher: Launcher::new(&config, streams, reaper, (spawned_tx, ended_tx), cgroups),
        core,
        results_index: ResultsIndex::create(config.results.as_deref()),
        config,
        t0,
        // Sized for a full queue up front (see `Scheduler::with_policy`).
        jobs: HashMap::with_capacity(job_capacity),
        controls: HashMap::new(),
        input: Input::new(input),
        read_error: false,
        ledger,
        resume,
        received: 0,
        output_lost: false,
        output_dropped: false,
        over_at: Tick::ZERO,
        retry_tails: HashMap::new(),
        decided_at: None,
        round_cut: None,
        stopped: HashMap::new(),
        lock_dir,
        grants: HashMap::new(),
        host_waits: HashMap::new(),
        asked_holders: HashMap::new(),
        unlockable: HashMap::new(),
        unlocked_failed: false,
        descriptor_retry: None,
        terminal_given_up: false,
        service,
        lock_lost: HashMap::new(),
    };
    if let Some(message) = driver.results_index.take_error() {
        driver.lose_output(message);
    }
    if driver.config.coordinate_records {
        if let Some(records) = driver.lock_dir.as_ref().and_then(KeyLocks::records) {
            driver.ledger.record_to_fleet(records);
        }
    }
    driver
        .ledger
        .run_started(
            driver.config.max_concurrent,
            driver.config.source.describe(),
            driver.config.recorded_template(),
            driver.launcher.containment(),
        )
        .await;
    if let Some(recovered) = recovered {
        driver.recover(recovered).await;
    }
    let mut redraw = tokio::time::interval(Duration::from_secs(1));
    redraw.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut spin = tokio::time::interval(crate::report::progress::SPIN);
    spin.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    // `lanes serve`: the records the ends to journal wait behind, once written.
    let mut ends_written: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>> =
        None;
    let mut turn_began = std::time::Instant::now();
    loop {
        if turn_began.elapsed() >= TURN_BUDGET {
            // A long turn: the runtime reads what came meanwhile before the next one.
            tokio::task::yield_now().await;
        }
        turn_began = std::time::Instant::now();
        driver.start_ready(!ended_rx.is_empty()).await;
        driver.journal_ends().await;
        if ends_written.is_none() && driver.ends_waiting() {
            ends_written = Some(Box::pin(driver.ledger.report_written()));
        }
        driver.settle_display();
        if driver.is_done() {
            break;
        }
        let wake = driver.core.next_deadline().map(|tick| driver.t0 + tick);
        let settle = driver
            .core
            .wait_changes_settle_at()
            .map(|tick| driver.t0 + tick);
        let accept_input = driver.input.is_open() && driver.core.may_read_input();
        let backlogged = driver.core.output_backlogged();
        tokio::select! {
            biased;
            // First: after a stop lanes could not see coming (SIGSTOP), nothing may be drawn
            // before the display has started afresh.
            Some(()) = recv_optional(&mut continued), if driver.ledger.progress().is_some() => {
                if let Some(progress) = driver.ledger.progress() {
                    progress.continued();
                }
            }
            Some(signal) = next_signal(&mut signals) => driver.on_signal(signal).await,
            Some(()) = recv_optional(&mut status_requests) => driver.on_status_request().await,
            Some(()) = child_exited(&child_exits) => driver.launcher.reaper().reap(),
            Some(()) = recv_optional(&mut sigchld) => driver.launcher.reaper().reap(),
            Some(stop) = terminal_stop_requested(&terminal_stop) => {
                driver.on_terminal_stop(stop, &mut spawned_rx).await;
            }
            Some(outcome) = spawned_rx.recv() => {
                // Every spawn back so far, at once: their turn deadlines count from their
                // starts, however many a burst made.
                driver.on_spawned(outcome).await;
                while let Ok(outcome) = spawned_rx.try_recv() {
                    driver.on_spawned(outcome).await;
                }
            }
            Some(ended) = ended_rx.recv() => driver.on_ended(ended).await,
            Some(acquired) = acquired_rx.recv(), if driver.lock_dir.is_some() => {
                driver.on_acquired(acquired).await;
            }
            () = sleep_until_opt(wake) => driver.on_wake(),
            // A cause told once it shows in its record (the loop's next round tells it).
            () = sleep_until_opt(settle) => {}
            () = driver.grouped.written(), if backlogged => {},
            item = driver.input.recv(), if accept_input => driver.on_input(item).await,
            Some(call) = service::next_call(&mut calls) => driver.on_calls(call, &mut calls).await,
            () = written_optional(&mut ends_written) => ends_written = None,
            _ = redraw.tick(), if driver.ledger.watches_stops() => driver.redraw(),
            Some(()) = recv_optional(&mut resized), if driver.ledger.progress().is_some() => {
                if let Some(progress) = driver.ledger.progress() {
                    progress.resized();
                }
            }
            _ = spin.tick(), if driver.ledger.progress().is_some() => {
                if let Some(progress) = driver.ledger.progress() {
                    progress.spin();
                }
            }
            // Last: a round of starts cut short goes on at the loop's next turn.
            () = std::future::ready(()), if driver.round_cut.is_some() => {}
        }
    }
    // Every job has ended and has its record: from here on Ctrl-Z stops lanes as it would
    // any program, while it waits for processes that escaped their jobs and for the readers
    // of its output. There is no job to stop with it, and the display is done, so that the
    // terminal goes back to the shell as it was.
    if let Some(cleared) = driver
        .ledger
        .progress()
        .map(crate::report::progress::Progress::finish_later)
    {
        // Waited for as a reader of lanes' output is: a terminal that takes nothing holds the
        // run's end until a stop signal gives up on it.
        let mut forced = driver.core.is_forced();
        if until_stopped(cleared, &mut forced, &mut signals)
            .await
            .is_none()
        {
            // The waits for lanes' other output are as short from here on.
            driver.terminal_given_up = true;
        }
    }
    if let Some(progress) = driver.ledger.progress() {
        progress.finish();
    }
    drop(terminal_stop);
    // Ctrl-Z stops lanes at once from here on, as any program. SIGTTOU stays blocked: its
    // summary, written from the background under `stty tostop`, is written as its jobs'
    // output was, and lanes ends.
    super::signal::release_watched(nix::sys::signal::Signal::SIGTSTP);
    // `lanes serve`: the event loop takes no more calls; each one sent from now on, or left
    // in the channel, is answered `closed` (`ending`) by its connection.
    drop(calls);
    let mut end = driver.finish(&mut signals).await;
    end.signals = signals;
    end
}

/// Resolves once `written` has (never without it).
async fn written_optional(
    written: &mut Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>,
) {
    match written {
        Some(written) => written.await,
        None => std::future::pending().await,
    }
}

/// How long lanes waits, its jobs over, for a reader of its files before it says so.
const READER_NOTICE: Duration = Duration::from_secs(2);

/// `work`, saying on stderr, once it has taken [`READER_NOTICE`], that lanes waits for the
/// reader of `what`: a reader that holds a FIFO open and never reads would otherwise look like
/// a hang.
async fn saying_if_slow<F: std::future::Future>(
    work: F,
    stderr: crate::output::sink::SinkTx,
    what: &str,
    stopped: bool,
) -> F::Output {
    tokio::pin!(work);
    tokio::select! {
        done = &mut work => return done,
        () = tokio::time::sleep(READER_NOTICE) => {}
    }
    let notice = format!(
        "lanes: every job has ended; waiting for the reader of {what} to read it ({})\n",
        if stopped {
            "given up on once lanes' output takes nothing for 5 s, or at another stop signal"
        } else {
            "a stop signal gives up on it"
        }
    );
    crate::output::sink::notice_sent(notice.len());
    let _ = stderr.send(notice.into_bytes()).await;
    work.await
}

/// What became of a job offered ([`Driver::admit_job`]).
enum Admitted {
    /// `--resume` skipped it; it has its record.
    Skipped,
    /// Not admitted; it has its record, with this outcome.
    Refused(Outcome),
    /// Queued, `ahead` jobs of its key before it, maybe in the place of `replaced`.
    Queued { ahead: usize, replaced: Option<Seq> },
}

struct Driver {
    config: RunConfig,
    /// Starts what the core takes.
    launcher: Launcher,
    core: Scheduler,
    /// Tick zero of the run's one clock.
    t0: Instant,
    /// What each admitted job is, until its record is written. Boxed: a table that churns
    /// through distinct entries grows to twice the buckets its peak needs (hashbrown resizes
    /// rather than rehashing in place once more than half full), so its buckets are kept to a
    /// pointer each.
    jobs: HashMap<Seq, Box<JobSpec>>,
    /// The supervisor of each run in flight, and its direct child's pid (its process group;
    /// 0 while its spawn is in flight).
    controls: HashMap<Seq, (mpsc::UnboundedSender<Control>, i32)>,
    input: Input,
    read_error: bool,
    ledger: Ledger,
    /// `--resume`: the successes of an earlier report.
    resume: Option<Resume>,
    /// Input items accepted so far (jobs and invalid lines, not skipped ones): the total, once
    /// the input has ended.
    received: u64,
    results_index: ResultsIndex,
    grouped: GroupedOutput,
    /// Output that could not be stored whole (`--results`, grouped spill files): the exit
    /// status is 1, as for the report.
    output_lost: bool,
    /// A job's output was dropped after a stop signal, its reader taking nothing.
    output_dropped: bool,
    /// The latest moment, other than a record's end, that the run's time counts to: the
    /// input's end, a stop signal that ended the input, the end of a sweep of escapees (see
    /// [`Driver::run_end`]).
    over_at: Tick,
    /// The stderr tail and the CPU time and peak memory of the last try of each run waiting
    /// for its retry, by its first job: should the run stop before the retry starts, the
    /// record tells of that try.
    retry_tails: HashMap<Seq, RetriedTries>,
    /// When the event just carried out was (an input item admitted, a job's end, a deadline
    /// reached): the starts it makes possible are decided at that same moment, so that a job
    /// it freed to go waited for nothing but lanes (no `cap` while the cap was not reached).
    /// Taken by the next round of starts.
    decided_at: Option<Tick>,
    /// A round of starts that went on past [`TURN_BUDGET`] stopped, more to start: the moment
    /// its starts were decided at, for the next round to go on with.
    round_cut: Option<Tick>,
    /// The runs in flight last found stopped, and why.
    stopped: HashMap<Seq, &'static str>,
    /// `--lock-dir`, `--coordinate`: where keys' shared locks are acquired.
    lock_dir: Option<KeyLocks>,
    /// The host-wide locks this process holds, by key.
    grants: HashMap<Arc<str>, Grant>,
    /// What the records of jobs started under a fresh grant tell of its wait.
    host_waits: HashMap<Seq, HostWait>,
    /// The keys asked for that another process held when asked, and who held them: told in
    /// the record of a job stopped before it got its key.
    asked_holders: HashMap<Arc<str>, LockHolder>,
    /// Keys given up for want of descriptors nothing of this run would free
    /// ([`Scheduler::host_key_short`]), and what their first job's record says.
    unlockable: HashMap<Arc<str>, String>,
    /// A job of such a key failed in this round of starts: another round follows.
    unlocked_failed: bool,
    /// The run whose next try starts or ends it (out of descriptors with no other job of the
    /// run to free one: [`SpawnVerdict::Deferred`]'s `last_try_next`). `lanes serve` answers
    /// its submissions then, not `queued`.
    descriptor_retry: Option<Seq>,
    /// The terminal the display is drawn on took nothing after a stop signal, and was given
    /// up on: the waits for lanes' other output are short.
    terminal_given_up: bool,
    /// `lanes serve`: what the service keeps between requests.
    service: Option<service::Service>,
    /// Runs stopped because their key's lock was lost, and why: told in their records.
    lock_lost: HashMap<Seq, String>,
}

impl Driver {
    fn tick(&self) -> Tick {
        self.t0.elapsed()
    }

    /// The run's end, once the event loop is done: every job and what it left is over, the
    /// latest of the records' ends, the input's end, a stop signal and the end of a sweep of
    /// escapees. Not the loop's own end: a job's supervisor hands the job's last output on
    /// before it tells of the job's end, and a reader of lanes' stdout that reads slowly
    /// holds that hand-over (backpressure); waiting for readers of lanes' output and files is
    /// no part of the run's time. `lanes serve` ends when it is drained or closed: the loop's
    /// end.
    fn run_end(&self) -> Tick {
        if self.service.is_some() {
            return self.tick();
        }
        self.over_at.max(self.ledger.latest_end())
    }

    /// Everything the last event brought is carried out: the live display may show it, with
    /// the number of jobs waiting now (a retry waiting out its delay among them).
    fn settle_display(&mut self) {
        let queued = self.core.queued();
        if let Some(progress) = self.ledger.progress() {
            progress.settle(queued);
        }
    }

    fn is_done(&self) -> bool {
        !self.input.is_open()
            && self.core.is_idle()
            && self
                .service
                .as_ref()
                .is_none_or(|service| !self.admits(service))
    }

    /// Why a job was refused for a full queue: the count bound, or the weight bound
    /// (`--max-queued-weight`) when the count had room.
    fn queue_full_error(&self) -> String {
        if self.core.queued() < self.config.max_queued {
            format!(
                "the jobs waiting already weighed {} of --max-queued-weight {}",
                self.core.queued_weight(),
                self.config.policy.max_queued_weight
            )
        } else {
            // As many as the bound, or more after a restarted server took over its journal's.
            let queued = self.core.queued();
            let waiting = crate::plural::plural(queued as u64, "job");
            let verb = if queued == 1 { "was" } else { "were" };
            let bound = self.config.max_queued;
            if queued > bound {
                format!("{waiting} {verb} already waiting (--max-queued {bound})")
            } else {
                format!("{waiting} {verb} already waiting (--max-queued)")
            }
        }
    }

    /// Starts every job the core says may start now. `backlog`: other work waits for the event
    /// loop behind these starts (jobs' ends, input lines); a round's later starts wait behind
    /// its first ([`Launcher::set_backlog`]).
    async fn start_ready(&mut self, backlog: bool) {
        // A job that failed for want of its key's lock readies the key's next job, whose lock
        // is asked for in another round.
        while {
            self.start_round(backlog).await;
            std::mem::take(&mut self.unlocked_failed) && self.round_cut.is_none()
        } {}
    }

    /// One round of [`Driver::start_ready`]: the host-wide locks to ask for and let go, then
    /// the takes.
    async fn start_round(&mut self, backlog: bool) {
        self.core.set_output_backlog(self.grouped.waiting());
        if let Some(lock_dir) = &self.lock_dir {
            let orders = self.core.host_keys();
            for key in orders.release {
                self.grants.remove(&key);
                self.asked_holders.remove(&key);
            }
            for key in orders.acquire {
                match lock_dir.acquire(Arc::clone(&key)) {
                    Some(grant) => {
                        if self.core.host_key_acquired(&key, self.tick()) {
                            self.grants.insert(key, grant);
                        }
                    }
                    None => {
                        // This lanes itself may already hold the key while it waits for a
                        // shared slot: the key was free, and no other lanes is its holder.
                        if let Some(holder) = lock_dir.other_holder(&key) {
                            self.asked_holders.insert(key, holder);
                        }
                    }
                }
            }
        }
        // The causes decided since the last round are told after the take that may start
        // their jobs: a job taken at once waited for nothing, and is told no cause
        // (`WaitLog::end_told`).
        self.launcher.set_backlog(backlog);
        // A round's starts are decided at one moment: a job started after others of its
        // round waited for nothing but lanes making their processes, which is no cause of
        // its wait (the cap was not reached); its `started_at` says when its process was made.
        // Never before a change the core already made since (a key's lock granted above).
        // A round cut short goes on at the moment its starts were decided, unless something
        // was decided since.
        let cut = self.round_cut.take();
        let now = match self.decided_at.take().or(cut) {
            Some(at) => at.max(self.core.latest()),
            None => self.tick(),
        };
        let began = std::time::Instant::now();
        while let Some(start) = self.core.take(now) {
            // What the take itself decided (a delay that ran out) comes before `started`; the
            // other jobs' causes wait for the round's end, as one of them may start next.
            for &seq in &start.batch {
                self.tell_waits_of(seq);
            }
            self.launch(start).await;
            // The round's next starts wait behind this one: a burst.
            self.launcher.set_backlog(true);
            if began.elapsed() >= TURN_BUDGET {
                // The loop turns (stop signals, deadlines, spawns back), then goes on.
                self.round_cut = Some(now);
                break;
            }
        }
        // A cause decided less than a millisecond ago waits: its job may start within it.
        let changes = self.core.take_settled_wait_changes(self.tick());
        if !changes.is_empty() {
            self.ledger.waiting(&changes);
        }
        if !self.input.is_open() && self.service.is_none() && self.core.queued() == 0 {
            // No job comes from the input any more and every job has started: the empty job
            // cgroups kept for later jobs go now, and each job's when it ends, while other
            // jobs still run, not all at the run's end. (`lanes serve` has no input to end.)
            self.launcher.last_jobs_started();
        }
    }

    /// Writes a `waiting` event for each change of the job `seq`'s cause the core decided and
    /// no event told yet (none are kept without an events file).
    fn tell_waits_of(&mut self, seq: Seq) {
        let changes = self.core.take_wait_changes_of(seq);
        if !changes.is_empty() {
            self.ledger.waiting(&changes);
        }
    }

    async fn launch(&mut self, start: Start) {
        let Some(job) = self.jobs.get(&start.seq) else {
            return;
        };
        let members = start
            .batch
            .iter()
            .filter_map(|seq| self.jobs.get(seq))
            .map(|member| member.command.as_str());
        let command = self.launcher.command(job, &start, members);
        let grant = self.grants.get(&start.key);
        if grant.is_none() && self.lock_dir.is_some() {
            // A key given up for want of descriptors: its job fails, never run without it.
            let (seq, key) = (start.seq, Arc::clone(&start.key));
            let message = self.unlockable.remove(&key).unwrap_or_else(|| {
                format!("the lock of key {key:?} is not held: the job is not run without it")
            });
            let failure = crate::core::SpawnFailure::Failed;
            self.not_started(seq, &start.batch, &key, NotStarted { failure, message })
                .await;
            self.unlocked_failed = true;
            return;
        }
        let locks = grant.map_or([None, None], |grant| {
            [
                Some(grant.key.as_raw_fd()),
                grant.slot.as_ref().map(AsRawFd::as_raw_fd),
            ]
        });
        let (seq, key) = (start.seq, Arc::clone(&job.key));
        // Journaled before the spawn: a server killed while it is under way leaves the job
        // `server_lost`, never run a second time by the next server.
        // The batch is kept only to take such a start back if the spawn fails.
        let batch = match &mut self.service {
            Some(service) => {
                service.starting(&start.batch);
                start.batch.clone()
            }
            None => Vec::new(),
        };
        // What its submissions' answers need, should it not start.
        let answer = self.service.is_some().then(|| start.clone());
        match self.launcher.launch(job, start, &command, locks) {
            Ok(control) => {
                self.controls.insert(seq, (control, 0));
                // The display shows the run from now on: the core no longer counts it as
                // waiting, though its spawn may come back only on a later turn of the loop.
                if let Some(progress) = self.ledger.progress() {
                    progress.started(seq, &key, &command);
                }
            }
            Err(not_started) => {
                self.not_started(seq, &batch, &key, not_started).await;
                if let Some(start) = answer {
                    self.answer_unstarted(&start);
                }
            }
        }
    }

    /// Answers the submissions of `start`'s run, which did not start: `failed` or `queued`,
    /// except while the core tries it once more for want of descriptors
    /// ([`Driver::descriptor_retry`]): that try's end is their answer.
    fn answer_unstarted(&mut self, start: &Start) {
        if self.descriptor_retry == Some(start.seq) && self.jobs.contains_key(&start.seq) {
            return;
        }
        self.answer_started(start, false);
    }

    /// A spawn handed to the spawning threads came back: the run started (the core, the
    /// events and the fleet are told), or it did not.
    async fn on_spawned(&mut self, outcome: SpawnOutcome) {
        // The process started when its spawn began, not when the loop came to it.
        let now = Instant::from_std(outcome.at).saturating_duration_since(self.t0);
        let Some((start, launched)) = self.launcher.spawned(outcome) else {
            return;
        };
        let key = Arc::clone(&start.key);
        let pid = match launched {
            Ok(pid) => pid,
            Err(not_started) => {
                self.controls.remove(&start.seq);
                self.not_started(start.seq, &start.batch, &key, not_started)
                    .await;
                self.answer_unstarted(&start);
                return;
            }
        };
        if let Some(entry) = self.controls.get_mut(&start.seq) {
            entry.1 = pid;
        }
        if let Some(grant) = self.grants.get_mut(&start.key) {
            if let Some(fleet) = &grant.fleet {
                fleet.started(start.seq);
            }
            if let Some(mut wait) = grant.wait.take() {
                // The key may have been asked for a job this one superseded
                // (`--cancel-in-progress`, `--coalesce latest`): it waited for it no longer
                // than it waited at all.
                wait.waited = wait.waited.min(start.waited);
                for &seq in &start.batch {
                    self.host_waits.insert(seq, wait.clone());
                }
            }
        }
        self.core.spawned(start.seq, now);
        if self.descriptor_retry == Some(start.seq) {
            self.descriptor_retry = None;
        }
        let batch = self.config.policy.batching().then_some(start.seq);
        let (slot, attempt) = (start.slot, start.attempt);
        self.ledger
            .started(&start.batch, &key, slot, attempt, batch, now);
        self.answer_started(&start, true);
    }

    /// A run whose process could not be started: the core decides whether it is tried again
    /// later or ends, with the error in its record.
    async fn not_started(
        &mut self,
        seq: Seq,
        batch: &[Seq],
        key: &Arc<str>,
        not_started: NotStarted,
    ) {
        // Its start, journaled before the spawn, is taken back: no process of it ran.
        if let Some(service) = &mut self.service {
            service.not_started(batch);
        }
        if let Some(progress) = self.ledger.progress() {
            progress.run_ended(seq);
        }
        let now = self.tick();
        match self.core.spawn_failed(seq, not_started.failure, now) {
            SpawnVerdict::Deferred { last_try_next, .. } => {
                self.descriptor_retry = if last_try_next {
                    Some(seq)
                } else {
                    self.descriptor_retry.filter(|&retry| retry != seq)
                };
            }
            SpawnVerdict::Ended(finished) => {
                if self.descriptor_retry == Some(seq) {
                    self.descriptor_retry = None;
                }
                let output = RunOutput {
                    error: Some(not_started.message),
                    ..RunOutput::default()
                };
                self.conclude(key, finished, output, now).await;
            }
        }
    }

    /// Accepts an input item, then whatever else the input thread has ready (up to a bound,
    /// while the core reads input), so that a burst of lines is admitted before jobs are
    /// taken: lanes then see their whole backlog (fuller batches) and the loop turns less.
    async fn on_input(&mut self, item: Option<InputItem>) {
        let Some(item) = item else {
            self.input_ended();
            return;
        };
        self.accept(item).await;
        let began = std::time::Instant::now();
        for _ in 0..INPUT_BURST {
            if self.core.starts_between_admissions() {
                // The input's next lines wait behind these starts.
                self.start_ready(true).await;
            }
            // Past the budget of a turn (or with a round of starts cut short), the loop turns
            // before more lines come in.
            if !self.core.may_read_input()
                || self.round_cut.is_some()
                || began.elapsed() >= TURN_BUDGET
            {
                break;
            }
            match self.input.try_recv() {
                Ok(Some(item)) => self.accept(item).await,
                Ok(None) => break,
                Err(()) => {
                    self.input_ended();
                    break;
                }
            }
        }
    }

    /// The input is at its end: the display learns the total, and a batch waiting out
    /// `--batch-delay` for more jobs goes.
    fn input_ended(&mut self) {
        if self.service.is_some() {
            // `lanes serve` has no input: its jobs come from the socket, with no total.
            return;
        }
        self.ledger.input_ended(self.received);
        let now = self.tick();
        self.over_at = self.over_at.max(now);
        self.core.input_ended(now);
    }

    async fn accept(&mut self, item: InputItem) {
        self.received += 1;
        let now = self.tick();
        self.decided_at = Some(now);
        match item {
            InputItem::Job(spec) => {
                let _ = self.admit_job(spec, now).await;
            }
            InputItem::Invalid {
                seq,
                line,
                key,
                message,
            } => {
                let account = self.core.invalid_input(seq, now);
                let facts = JobFacts {
                    line,
                    key: key.as_deref(),
                    error: Some(format!("line {line}: {message}")),
                    lock: self.lock_dir.is_some().then_some(None),
                    ..JobFacts::default()
                };
                self.ledger.close(&account, facts).await;
                self.grouped.finished(seq, None);
            }
            InputItem::ReadError(message) => {
                self.read_error = true;
                let _ = self
                    .launcher
                    .stderr()
                    .send(format!("lanes: {message}; no more jobs are read\n").into_bytes())
                    .await;
                let _ = self.input.close();
            }
        }
    }

    /// Offers a job to the core and carries out what it decided: its record when it is
    /// skipped or refused, else its `queued` event, the record of the job it replaced and the
    /// stop of the running job it supersedes.
    async fn admit_job(&mut self, spec: JobSpec, now: Tick) -> Admitted {
        self.offer_job(spec, true, now).await
    }

    /// Offers `spec` to the core, under the queue's bounds only when `bounded` (see
    /// [`Scheduler::offer_again`]), and carries out what it decided.
    async fn offer_job(&mut self, mut spec: JobSpec, bounded: bool, now: Tick) -> Admitted {
        spec.timeout = self.config.turn_timeout(spec.timeout);
        let skipped = self
            .resume
            .as_mut()
            .and_then(|resume| resume.skip(&spec.key, &spec.command));
        let request = spec.request(self.config.batch_copies());
        let offer = if bounded || skipped.is_some() {
            self.core.offer(request, skipped, now)
        } else {
            self.core.offer_again(request, now)
        };
        match offer {
            Offer::Skipped(account) => {
                self.received -= 1;
                self.close(&account, &spec, RunOutput::default()).await;
                Admitted::Skipped
            }
            Offer::Refused(account) => {
                let error = (account.outcome == Outcome::Rejected(RejectReason::QueueFull))
                    .then(|| self.queue_full_error());
                let outcome = account.outcome;
                self.close(
                    &account,
                    &spec,
                    RunOutput {
                        error,
                        ..RunOutput::default()
                    },
                )
                .await;
                Admitted::Refused(outcome)
            }
            Offer::Queued {
                ahead,
                replaced,
                cancel,
                retries,
            } => {
                // Held by this process (a job of the key runs here): no other process holds it.
                let held_by = self
                    .lock_dir
                    .as_ref()
                    .and_then(|dir| dir.other_holder(&spec.key));
                self.ledger.queued(spec.seq, &spec.key, ahead, held_by, now);
                let by = spec.seq;
                self.jobs.insert(spec.seq, Box::new(spec));
                let replaced_seq = replaced.as_ref().map(|account| account.seq);
                // Journaled before any record: a server killed before the records are in the
                // report leaves them to the next server as superseded, not to be run (again).
                if let Some(service) = self.service.as_mut() {
                    let stopping = cancel
                        .iter()
                        .flat_map(|stop| self.core.members_of(stop.seq));
                    let dropped = replaced.iter().chain(&retries).map(|account| account.seq);
                    service.superseded(dropped.chain(stopping), by);
                }
                if let Some(account) = replaced {
                    self.close_waiting(&account).await;
                }
                for account in retries {
                    self.close_waiting(&account).await;
                }
                self.send_stops(cancel);
                Admitted::Queued {
                    ahead,
                    replaced: replaced_seq,
                }
            }
        }
    }

    /// Sends each stop the core ordered to its job's supervisor; the display says why.
    fn send_stops(&mut self, stops: impl IntoIterator<Item = StopOrder>) {
        for stop in stops {
            if let Some((control, _)) = self.controls.get(&stop.seq) {
                let _ = control.send(Control::Stop {
                    signal: stop.signal,
                });
                if let (Some(progress), Some(why)) = (
                    self.ledger.progress(),
                    Outcome::Interrupted(stop.reason).reason(),
                ) {
                    progress.stopping_run(stop.seq, why);
                }
            }
        }
    }

    async fn on_ended(&mut self, ended: Ended) {
        self.controls.remove(&ended.seq);
        let facts = RunFacts {
            exit: Some(ended.exit),
            stopped_while_running: ended.stopped_while_running,
            ended_at: ended.ended_at.saturating_duration_since(self.t0),
        };
        let now = self.tick();
        self.decided_at = Some(now);
        let Some(finished) = self.core.finish(ended.seq, facts, now) else {
            return;
        };
        let key = self
            .jobs
            .get(&ended.seq)
            .map_or_else(|| Arc::from(""), |job| Arc::clone(&job.key));
        let block = ended.captured.map(|(stdout, stderr)| Block {
            header: blocks::header(
                &key,
                ended.seq,
                finished.outcome,
                finished.attempt,
                finished.retry,
            ),
            stdout,
            stderr,
        });
        for message in ended.lost {
            self.lose_output(message);
        }
        self.output_dropped |= ended.dropped;
        let lost = self
            .lock_lost
            .remove(&ended.seq)
            .filter(|_| finished.outcome == Outcome::Interrupted(crate::core::StopReason::LockLost))
            .map(|why| format!("the lock of key {key:?} was lost: {why}"));
        let output = RunOutput {
            leaked: ended.leaked,
            error: ended.output_error.or(lost),
            stderr_tail: ended.stderr_tail,
            retried_tails: Vec::new(),
            block,
            usage: ended.usage,
        };
        self.conclude(&key, finished, output, facts.ended_at).await;
    }

    /// Carries out the core's verdict on a run that ended: the try's `ended` events, then
    /// (unless it goes again) every member's record, then the halt `--fail-fast` asked for.
    async fn conclude(&mut self, key: &str, finished: Finished, output: RunOutput, at: Tick) {
        let first = finished.members[0];
        self.ledger.try_ended(
            &finished.members,
            key,
            finished.outcome,
            finished.attempt,
            finished.retry,
            at,
        );
        let RunOutput {
            leaked,
            error,
            stderr_tail,
            retried_tails: _,
            mut block,
            usage,
        } = output;
        if finished.retry {
            self.grouped.retried(first, block);
            let retried = self.retry_tails.entry(first).or_default();
            retried.tails.push(stderr_tail);
            retried.usage = usage;
            return;
        }
        let mut retried_tails = self
            .retry_tails
            .remove(&first)
            .map(|retried| retried.tails)
            .unwrap_or_default();
        for account in &finished.accounts {
            let Some(spec) = self.jobs.remove(&account.seq) else {
                continue;
            };
            let output = RunOutput {
                leaked,
                error: error.clone(),
                stderr_tail: if account.seq == first {
                    stderr_tail.clone()
                } else {
                    Vec::new()
                },
                // The first job's alone, as its block is: taken, not copied.
                retried_tails: if account.seq == first {
                    std::mem::take(&mut retried_tails)
                } else {
                    Vec::new()
                },
                block: if account.seq == first {
                    block.take()
                } else {
                    None
                },
                usage,
            };
            self.close(account, &spec, output).await;
        }
        if let Some(halt) = finished.halt {
            self.apply_halt(halt).await;
        }
    }

    /// For a job that never started and waited for its key's host-wide lock: who held the
    /// key when this process asked for it (a grant that came too late for the job names its
    /// holder too).
    fn lock_waited_on(&self, account: &Account, key: &str) -> Option<LockHolder> {
        let waited_for_lock = account.tries.is_empty()
            && account
                .waits
                .iter()
                .any(|span| span.cause == crate::core::WaitCause::Lock);
        if !waited_for_lock {
            return None;
        }
        self.asked_holders.get(key).cloned().or_else(|| {
            self.grants
                .get(key)
                .and_then(|grant| grant.wait.as_ref())
                .and_then(|wait| wait.holder.clone())
        })
    }

    /// Writes the record of a job that was waiting (superseded, drained by a halt).
    async fn close_waiting(&mut self, account: &Account) {
        if let Some(spec) = self.jobs.remove(&account.seq) {
            // Stopped while it waited for its retry: its record's tail is its last try's, and
            // every try it made was retried.
            let RetriedTries { tails, usage } =
                self.retry_tails.remove(&account.seq).unwrap_or_default();
            let output = RunOutput {
                stderr_tail: tails.last().cloned().unwrap_or_default(),
                retried_tails: tails,
                usage,
                ..RunOutput::default()
            };
            self.close(account, &spec, output).await;
        }
    }

    /// Writes one job's final record, indexes its result files, and lets its grouped output
    /// go when its turn has come.
    async fn close(&mut self, account: &Account, spec: &JobSpec, output: RunOutput) {
        // A job's causes are told before its `ended` event (only its own: another job's cause
        // decided just now may last no time, `WaitLog::end_told`).
        self.tell_waits_of(account.seq);
        let facts = JobFacts {
            line: spec.line,
            key: Some(&spec.key),
            command: Some(&spec.command),
            leaked: output.leaked,
            error: output.error,
            stderr_tail: &output.stderr_tail,
            retried_tails: &output.retried_tails,
            cpu: output.usage.cpu,
            memory_peak: output.usage.memory_peak,
            lock: self
                .lock_dir
                .is_some()
                .then(|| self.host_waits.remove(&account.seq)),
            lock_waited_on: self.lock_waited_on(account, &spec.key),
        };
        let encode = self
            .service
            .as_ref()
            .is_some_and(|service| service.wants_record(account.seq));
        let (started, record) = self.ledger.close_encoded(account, facts, encode).await;
        if let Some(service) = &mut self.service {
            service.recorded(account.seq, &spec.key, &spec.command, record);
        }
        if started {
            self.results_index
                .add(account.seq, &spec.key, account.batch.unwrap_or(account.seq));
            if let Some(message) = self.results_index.take_error() {
                self.lose_output(message);
            }
        }
        self.grouped.finished(account.seq, output.block);
    }

    /// Output that could not be stored whole: said on stderr (by a task of its own, so that a
    /// stalled stderr holds up nothing), and the exit status will be 1.
    fn lose_output(&mut self, message: String) {
        self.output_lost = true;
        let stderr = self.launcher.stderr().clone();
        let line = format!("lanes: {message}; the output is incomplete, the run goes on\n");
        tokio::spawn(async move {
            let _ = stderr.send(line.into_bytes()).await;
        });
    }

    /// A key's host-wide lock is held (kept while a job needs it, else let go at once), or an
    /// acquisition has something to say.
    async fn on_acquired(&mut self, acquired: Acquired) {
        match acquired {
            Acquired::Granted(key, grant) => {
                self.asked_holders.remove(&key);
                let now = self.tick();
                // The job the grant frees to go waited for nothing but lanes from now on.
                self.decided_at = Some(now);
                if self.core.host_key_acquired(&key, now) {
                    self.grants.insert(key, grant);
                }
            }
            Acquired::HeldBy(key, holder) => {
                self.asked_holders.insert(key, holder);
            }
            Acquired::Locked(key) => {
                let now = self.tick();
                self.core.host_key_locked(&key, now);
            }
            Acquired::Short { key, error } => {
                let now = self.tick();
                let given_up = self.core.host_key_short(&key, now);
                for key in given_up {
                    if let Some(KeyLocks::Dir(dir)) = &self.lock_dir {
                        dir.give_up(&key);
                    }
                    let message = format!(
                        "cannot lock key {key:?}: {error}, and no job of this run will free a \
                         descriptor (raise `ulimit -n`)"
                    );
                    self.unlockable.insert(key, message);
                }
            }
            Acquired::Notice(message) => {
                let _ = self
                    .launcher
                    .stderr()
                    .send(format!("lanes: {message}\n").into_bytes())
                    .await;
            }
            Acquired::Lost { key, grant, why } => {
                let current = self
                    .grants
                    .get(&key)
                    .and_then(|held| held.fleet.as_ref())
                    .is_some_and(|fleet| fleet.grant == grant);
                if !current {
                    return;
                }
                self.grants.remove(&key);
                let now = self.tick();
                let stops = self.core.host_key_lost(&key, now);
                let what = if stops.is_empty() {
                    // Held for a job not started yet (waiting for a slot, say): nothing ran
                    // under it, and that job asks for the key again.
                    "; no job of it was running (one waiting asks for the key again)".to_owned()
                } else {
                    "; its job is stopped (lock_lost)".to_owned()
                };
                let _ = self
                    .launcher
                    .stderr()
                    .send(
                        format!("lanes: lost the lock of key {key:?} ({why}){what}\n").into_bytes(),
                    )
                    .await;
                for stop in &stops {
                    self.lock_lost.insert(stop.seq, why.clone());
                }
                self.send_stops(stops);
            }
        }
    }

    /// Ctrl-Z (SIGTSTP): every job stops with lanes, and the time stopped counts toward no
    /// deadline. lanes then lets the SIGTSTP, still pending, act as its default action
    /// ([`super::signal::TerminalStop`]), and goes on here when continued (`fg`, `bg`,
    /// SIGCONT).
    ///
    /// Not as the first process of a PID namespace (a container's entrypoint): the kernel
    /// stops no namespace's init, so lanes could not stop itself, and it goes on as any init
    /// does, jobs and timers included. Nor when a SIGCONT came after the SIGTSTP, before lanes
    /// could act on it (`kill -TSTP` then `kill -CONT`): the SIGCONT discarded the SIGTSTP,
    /// so the stop was called off, and the jobs go on at once.
    ///
    /// Starts under way on the spawning threads are waited for first, and the outcomes of
    /// every start made are taken (they come on `spawned`, the event loop's own starts' too),
    /// so that their jobs stop with the rest instead of running while lanes is stopped.
    async fn on_terminal_stop(
        &mut self,
        stop: &super::signal::TerminalStop,
        spawned: &mut mpsc::UnboundedReceiver<SpawnOutcome>,
    ) {
        if std::process::id() == 1 {
            stop.discard();
            return;
        }
        loop {
            // Starts the event loop made itself have their outcomes (their pids) queued
            // already: taken first, else their jobs would run on, unfrozen.
            while let Ok(outcome) = spawned.try_recv() {
                self.on_spawned(outcome).await;
            }
            if !self.launcher.spawning_on_threads() {
                break;
            }
            match spawned.recv().await {
                Some(outcome) => self.on_spawned(outcome).await,
                None => break,
            }
        }
        let runs = self.runs();
        let frozen = self.launcher.freeze(&runs);
        if let Some(progress) = self.ledger.progress() {
            progress.pause();
        }
        let stopped_at = Instant::now();
        stop.stop_if_still_requested();
        let stopped = stopped_at.elapsed();
        self.launcher.thaw(&runs, &frozen, stopped);
        self.core.resumed(stopped);
        if let Some(progress) = self.ledger.progress() {
            progress.resume();
        }
    }

    /// The runs in flight: first seq and process group.
    fn runs(&self) -> Vec<(Seq, i32)> {
        self.controls
            .iter()
            .filter(|(_, &(_, pid))| pid > 0)
            .map(|(&seq, &(_, pid))| (seq, pid))
            .collect()
    }

    /// The runs in flight whose every process is stopped now, and why
    /// ([`super::stopped::stopped_runs`]); none under a backend whose processes are elsewhere.
    fn stopped_runs(&self) -> HashMap<Seq, &'static str> {
        if self.launcher.backend().is_local() {
            super::stopped::stopped_runs(&self.runs())
        } else {
            HashMap::new()
        }
    }

    /// The display's tick (and the events file's): which jobs are stopped (a read of the
    /// terminal), what changed since the last tick, and elapsed times.
    fn redraw(&mut self) {
        let stopped = self.stopped_runs();
        let now = self.tick();
        self.stopped
            .retain(|seq, _| self.controls.contains_key(seq));
        // Each job of a stopped batch is told, as its processes are its batch's.
        let members = |core: &crate::core::Scheduler, seq: Seq| {
            let members = core.members_of(seq);
            if members.is_empty() {
                vec![seq]
            } else {
                members
            }
        };
        for (&seq, &why) in &stopped {
            if self.stopped.insert(seq, why) != Some(why) {
                let key = self.jobs.get(&seq).map_or("", |job| &job.key);
                for member in members(&self.core, seq) {
                    self.ledger.stop_changed(member, key, Some(why), now);
                }
            }
        }
        let continued: Vec<Seq> = self
            .stopped
            .keys()
            .filter(|seq| !stopped.contains_key(seq))
            .copied()
            .collect();
        for seq in continued {
            self.stopped.remove(&seq);
            let key = self.jobs.get(&seq).map_or("", |job| &job.key);
            for member in members(&self.core, seq) {
                self.ledger.stop_changed(member, key, None, now);
            }
        }
        if let Some(progress) = self.ledger.progress() {
            progress.set_stopped(&stopped);
            progress.tick();
        }
    }

    /// SIGUSR1: a status of the running jobs on stderr.
    async fn on_status_request(&mut self) {
        // Looked at now, as the display's tick would.
        let stopped = self.stopped_runs();
        let text = crate::report::status::status_text(
            &self.core.running_jobs(),
            self.core.queued(),
            self.tick(),
            |seq| self.jobs.get(&seq).map(|job| job.command.as_str()),
            &stopped,
        );
        let _ = self.launcher.stderr().send(text.into_bytes()).await;
    }

    fn on_wake(&mut self) {
        let now = self.tick();
        self.decided_at = Some(now);
        let stops = self.core.expire_turns(now);
        self.send_stops(stops);
    }

    async fn on_signal(&mut self, signal: nix::sys::signal::Signal) {
        let now = self.tick();
        if self.input.is_open() {
            // The signal ends the input: the run went on until then. Once the input is over,
            // the run ends with its jobs, whenever their output reaches its reader.
            self.over_at = self.over_at.max(now);
        }
        match self.core.signal_received(signal, now) {
            SignalVerdict::Halt(halt) => {
                // The display says that jobs are being stopped until they are gone.
                if let Some(progress) = self.ledger.progress() {
                    progress.stopping();
                }
                self.apply_halt(halt).await;
                // A reader of lanes' output that stalled does not hold the stopped run.
                for (control, _) in self.controls.values() {
                    let _ = control.send(Control::Ending);
                }
            }
            SignalVerdict::Kill(runs) => {
                if let Some(progress) = self.ledger.progress() {
                    progress.killing();
                }
                for seq in runs {
                    if let Some((control, _)) = self.controls.get(&seq) {
                        let _ = control.send(Control::Kill);
                    }
                }
            }
        }
    }

    /// Carries out a halt: closes input when the core says so (what the input thread had
    /// already handed over is offered to the core, which refuses it with the halt's reason),
    /// writes the drained jobs' records in seq order, and stops the running jobs.
    async fn apply_halt(&mut self, halt: Halt) {
        // Journaled before any record or stop: a server killed before the records are in
        // the report leaves these jobs to the next server as closed, not to be run (again).
        if let Some(service) = self.service.as_mut() {
            if let Some(why) = Closing::of(halt.reason) {
                let dropped = halt.drained.iter().map(|account| account.seq);
                let stopping = halt
                    .stops
                    .iter()
                    .flat_map(|stop| self.core.members_of(stop.seq));
                service.closing(dropped.chain(stopping), why);
            }
        }
        let pending = if halt.close_input {
            self.input.close()
        } else {
            Vec::new()
        };
        for account in &halt.drained {
            self.close_waiting(account).await;
        }
        for item in pending {
            self.accept(item).await;
        }
        self.send_stops(halt.stops);
    }

    /// Ends the run: returns the exit status and the human summary, which the caller writes
    /// once job output has been flushed, so that it comes last.
    async fn finish(mut self, signals: &mut Option<StopSignals>) -> RunEnd {
        // After a second stop signal, what escaped is killed at once.
        let grace = if self.core.is_forced() {
            Duration::ZERO
        } else {
            self.config.grace
        };
        // A stop signal from now on changes no outcome and not the exit status: every job has
        // its record. It only ends the waits (see `Scheduler::stop_signal`).
        let (came, swept) = sweep_escapees(self.launcher.reaper(), grace, signals).await;
        let late = came.is_some();
        if swept {
            self.over_at = self.over_at.max(self.tick());
        }
        // One stop signal ends every wait from here on: each is given at most
        // `FORCED_WRITE_WAIT` after it.
        let mut forced = self.core.is_forced() || late || self.terminal_given_up;
        // Every shared key is let go before lanes exits.
        self.grants.clear();
        if let Some(locks) = &self.lock_dir {
            // A database that does not answer lets the keys go when lanes' sessions close.
            let settle = tokio::time::timeout(Duration::from_secs(3), locks.settle());
            let _ = until_stopped(settle, &mut forced, signals).await;
        }
        // Slurm: nothing of this run may stay on the cluster.
        self.launcher.backend().cancel_run();
        let run_end = self.run_end();
        if let Some(writer) = self.grouped.close() {
            let abort = writer.abort_handle();
            if until_stopped(writer, &mut forced, signals).await.is_none() {
                // What it had not handed on is dropped, and its handles of the sinks with it.
                abort.abort();
            }
        }
        // The JUnit file, then every record and event queued so far in its file, before the
        // exit status is decided: a file that could not be stored makes it 1. A reader that
        // reads slowly is waited for as lanes' stdout is; one given up on leaves its file
        // incomplete.
        let shown = |path: &Option<std::path::PathBuf>| {
            path.as_ref()
                .map_or_else(String::new, |path| format!("`{}`", path.display()))
        };
        let (junit_file, report, events) = (
            shown(&self.config.junit),
            shown(&self.config.report),
            shown(&self.config.events),
        );
        let stopped = self.core.stop_signal().is_some();
        let junit = saying_if_slow(
            self.ledger.write_junit(run_end),
            self.launcher.stderr().clone(),
            &junit_file,
            stopped,
        );
        let junit = until_stopped(junit, &mut forced, signals).await;
        let (report_written, events_written) = self.ledger.written_each();
        let stderr = self.launcher.stderr().clone();
        // Each file's reader named only when it is the one waited for.
        let written = async {
            saying_if_slow(report_written, stderr.clone(), &report, stopped).await;
            saying_if_slow(events_written, stderr, &events, stopped).await;
        };
        let written = until_stopped(written, &mut forced, signals).await;
        // `--coordinate-records`: a database that does not answer is given up on after each
        // record's tries; a second stop signal gives up at once.
        let fleet_written = until_stopped(self.ledger.fleet_written(), &mut forced, signals).await;
        if written.is_some() && self.service.is_some() {
            // `lanes serve`: under `--json`, its records are in the report once stdout's reader
            // took them; the ends of those written are journaled.
            let taken = until_stopped(self.ledger.report_written(), &mut forced, signals).await;
            self.journal_ends().await;
            if taken.is_some() && !self.ledger.lost() && !self.ledger.report_failed() {
                // Every job's record is in the report: nothing is left for a later server.
                self.journal_finished();
            }
        }
        let code = exit::for_run(
            self.core.stop_signal().map(|s| s as i32),
            self.ledger.any_bad()
                || self.read_error
                || self.ledger.lost()
                || self.output_lost
                || self.launcher.job_stdout_lost()
                || self.grouped.lost()
                || junit.is_none()
                || written.is_none()
                || fleet_written.is_none(),
        );
        let (text, forwarder) = self.ledger.finish(run_end, code).await;
        if let Some(forwarder) = forwarder {
            let abort = forwarder.abort_handle();
            if until_stopped(forwarder, &mut forced, signals)
                .await
                .is_none()
            {
                abort.abort();
            }
        }
        let summary_written = until_stopped(self.ledger.written(), &mut forced, signals).await;
        // The summary, the report's last line, may not have gone in whole (a file-size limit
        // met by it alone): the report is incomplete, and the exit status says so, though the
        // summary's cut `exit_code` could not.
        let code = if code == exit::SUCCESS && self.ledger.lost() {
            exit::JOBS_FAILED
        } else {
            code
        };
        // `lanes serve`: the `drain` and `close` clients hear that the report is written.
        let ended = self.say_ended(code);
        let _ = until_stopped(ended, &mut forced, signals).await;
        // Files given up on (a reader that did not read them after the second stop signal):
        // said, as a file that could not be stored is.
        let mut given_up = String::new();
        if junit.is_none() {
            given_up
                .push_str("lanes: the JUnit file was given up on unwritten: it is incomplete\n");
        }
        if fleet_written.is_none() {
            given_up.push_str(&records_given_up(&self.ledger.fleet_pending()));
        }
        if written.is_none() || summary_written.is_none() {
            given_up.push_str(
                "lanes: the report or events file was given up on (its reader did not read it): \
                 it is incomplete\n",
            );
        }
        RunEnd {
            code,
            summary: given_up + &text,
            forced,
            signals: None,
            output_dropped: self.output_dropped,
        }
    }
}

/// The line that says which job records `--coordinate-records` gave up on at the run's end
/// (`seqs`, in order; the first ten named). A record whose statement was sent may yet be
/// committed by the server.
fn records_given_up(seqs: &[u64]) -> String {
    const NAMED: usize = 10;
    let mut jobs = seqs
        .iter()
        .take(NAMED)
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    if seqs.len() > NAMED {
        jobs.push_str(&format!(" and {} more", seqs.len() - NAMED));
    }
    let which = match seqs.len() {
        0 => "the records not yet in lanes_records were".to_owned(),
        1 => format!("the record of job {jobs} was"),
        _ => format!("the records of jobs {jobs} were"),
    };
    format!(
        "lanes: --coordinate-records: {which} given up on (the database did not answer): a \
         record whose statement was sent is in lanes_records if the server committed it\n"
    )
}

#[cfg(test)]
mod tests {
    use super::records_given_up;

    #[test]
    fn the_records_given_up_on_are_named_the_first_ten_by_number() {
        assert!(records_given_up(&[4]).contains(": the record of job 4 was given up on ("));
        assert!(records_given_up(&[2, 3, 4]).contains(": the records of jobs 2, 3, 4 were given"));
        let many: Vec<u64> = (1..=25).collect();
        assert!(records_given_up(&many).contains(
            ": the records of jobs 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 15 more were given"
        ));
        assert!(records_given_up(&[]).contains(": the records not yet in lanes_records were"));
    }
}
