//! Supervising one started job until its process group is empty: its exit, its pipes (pumped
//! by [`crate::output::pump`]), and the stop escalation the core decides
//! ([`crate::core::Escalation`]) carried out on the process group (SPEC §2, §4).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::sync::mpsc;
use tokio::time::{sleep, Instant};

use super::cgroup::{JobCgroup, Usage};
use super::lineage;
use super::reap::Reaper;
use super::signal::ReaderWatch;
use super::sleep_until_opt;
use super::spawn::Spawned;
use super::unix::{exiting, group_alive, signal_group, signal_process};
use crate::config::Backend;
use crate::core::{Action, Escalation, Event, ExitFacts};
use crate::output::capture::Capture;
use crate::output::pump::{readable, room, OutputPlan, Stream};

/// What the driver asks of a running job's supervisor.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Control {
    /// The core ordered a stop: `signal` to the job's process group, SIGKILL after the grace
    /// period. Only the first counts.
    Stop { signal: Signal },
    /// SIGKILL to the job's process group now (a second Ctrl-C).
    Kill,
    /// The run is stopping on a stop signal: once the job's processes are gone, its output
    /// still waiting is dropped when lanes' stdout and stderr take nothing for
    /// [`UNREAD_AFTER_STOP`](super::signal::UNREAD_AFTER_STOP) ([`ReaderWatch`]: a stalled reader of lanes' output does not
    /// hold a stopped run for ever).
    Ending,
}

/// Timing rules of supervision, and how stops are delivered.
#[derive(Debug, Clone)]
pub(crate) struct Timing {
    /// The backend: locally a stop signals the whole process group and ends in SIGKILL; under
    /// Slurm it is SIGINT to `srun` and, past the grace period, `scancel`.
    pub backend: Arc<Backend>,
    /// The try being supervised (names the Slurm job).
    pub attempt: u32,
    /// From the first signal to SIGKILL.
    pub grace: Duration,
    /// After the direct child exits: how long the rest of the group and the pipes get.
    pub leak_window: Duration,
    /// How long lanes has been stopped (Ctrl-Z) in this run: the grace period and the leak
    /// window stand still meanwhile, as the jobs do.
    pub time_stopped: TimeStopped,
}

/// The time `lanes` has spent stopped by Ctrl-Z so far in the run, in nanoseconds: added to
/// by the event loop when it is continued ([`super::launch::Launcher::thaw`]), read by every
/// supervisor, whose clock leaves it out.
#[derive(Debug, Clone, Default)]
pub(crate) struct TimeStopped(Arc<AtomicU64>);

impl TimeStopped {
    /// `lanes` was stopped for `stopped`.
    pub(crate) fn add(&self, stopped: Duration) {
        let nanos = u64::try_from(stopped.as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The whole time stopped so far.
    fn total(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}

/// How a supervised job ended: facts only; the core classifies them.
#[derive(Debug)]
pub(crate) struct Ended {
    /// The run, known by its first job.
    pub seq: u64,
    /// How the direct child ended.
    pub exit: ExitFacts,
    /// Whether a stop reached the job before it was over.
    pub stopped_while_running: bool,
    /// Processes of the group outlived the shell past the leak window, or something held the
    /// job's pipes open.
    pub leaked: bool,
    /// When the job was over (its group empty), before its output was flushed.
    pub ended_at: Instant,
    /// A problem with the job's output files, or that its processes were stopped when lanes
    /// stopped it, for the record's `error`.
    pub output_error: Option<String>,
    /// Output that could not be stored whole (a `--results` file, the grouped output's spill
    /// file), each naming the file and the error: said on stderr, and the exit status is 1.
    pub lost: Vec<String>,
    /// The last bytes of the job's stderr, for the summary and JUnit.
    pub stderr_tail: Vec<u8>,
    /// `--output grouped`: the whole stdout and stderr, to be written as one block.
    pub captured: Option<(Capture, Capture)>,
    /// What the job used, where its cgroup told.
    pub usage: Usage,
    /// Output of the job that lanes' stdout or stderr took nothing of for
    /// [`UNREAD_AFTER_STOP`](super::signal::UNREAD_AFTER_STOP) after a stop signal was dropped.
    pub dropped: bool,
}

/// How often the process group is checked for emptiness once the direct child has exited and
/// members are left.
const GROUP_POLL: Duration = Duration::from_millis(10);

/// Supervises a started job until its process group is empty and its pipes are at EOF (or
/// past the leak window, held open by a process outside the group), then returns how it ended.
pub(crate) async fn supervise(
    seq: u64,
    spawned: Spawned,
    job_cgroup: Option<JobCgroup>,
    mut control: mpsc::UnboundedReceiver<Control>,
    mut plan: OutputPlan,
    timing: Timing,
    reaper: Reaper,
) -> Ended {
    let Spawned {
        pid,
        exit: mut exit_rx,
        mut stdout,
        mut stderr,
    } = spawned;
    let mut out = Stream::new(&plan, false);
    let mut err = Stream::new(&plan, true);
    let mut results = plan.results.take();
    // The supervisor's clock: time since the start, less the time lanes spent stopped since.
    let origin = Instant::now();
    let stopped_before = timing.time_stopped.total();
    let tick = || {
        let stopped = timing.time_stopped.total().saturating_sub(stopped_before);
        origin.elapsed().saturating_sub(stopped)
    };
    let mut escalation = Escalation::new(timing.grace, timing.leak_window);
    let job = Job {
        pid,
        seq,
        attempt: timing.attempt,
        cgroup: job_cgroup,
        reaper: reaper.clone(),
    };
    let mut exit: Option<ExitFacts> = None;
    let mut control_open = true;
    // A second Ctrl-C came: output still waiting for the sink is not waited for.
    let mut killed = false;
    // The run is stopping on a stop signal ([`Control::Ending`]).
    let mut ending = false;
    // Whether the job was looked at when the first stop reached it, and what was seen: a job
    // whose processes were all stopped then (a read of the terminal) says so in its record.
    let mut stop_seen = false;
    let mut was_stopped = None;
    // A stop that came while the direct child was exiting: carried out once its exit is
    // known, on what the job left (nothing, most often: the job then ended on its own).
    let mut deferred_stop = None;

    loop {
        let pipes_open = stdout.is_some() || stderr.is_some();
        // A pipe not read because its output waits for a full sink: whether the job is over
        // cannot wait for its EOF.
        let held_back =
            (stdout.is_some() && !out.may_read()) || (stderr.is_some() && !err.may_read());
        if escalation.may_be_over(pipes_open, held_back) {
            reaper.reap();
            if !job.alive() {
                // What the group left in the pipes is read now; a pipe still open after that
                // is held by a process that left the group (setsid, a double fork into
                // another session): stop reading, keep what was read.
                out.drain(&mut stdout, results.as_mut());
                err.drain(&mut stderr, results.as_mut());
                if escalation.group_gone(stdout.is_some() || stderr.is_some()) {
                    break;
                }
            }
        }
        // Taken afresh each time round: after a stop the deadline lies later by the time
        // stopped (a timer set before fires early, and finds nothing due).
        let wake = escalation
            .next_deadline()
            .map(|at| Instant::now() + at.saturating_sub(tick()));
        let actions = tokio::select! {
            biased;
            message = control.recv(), if control_open => match message {
                Some(Control::Stop { signal }) => {
                    // The core's deadline and the job's end may come a moment apart: its exit
                    // is taken first, and a stop that finds none of its processes left
                    // stopped nothing (the job ended on its own; what it left in its pipes is
                    // read next).
                    let mut actions = Vec::new();
                    if exit.is_none() {
                        reaper.reap();
                        if let Ok(facts) = exit_rx.try_recv() {
                            exit = Some(facts);
                            actions = escalation.on(Event::Exited, tick());
                        }
                    }
                    if exit.is_none() && timing.backend.is_local() && exiting(pid) {
                        // Its exit is under way: the stop waits for it, and then goes to
                        // what the job left, if anything.
                        deferred_stop.get_or_insert(signal);
                    } else if !escalation.exited() || job.alive() {
                        actions.extend(escalation.on(Event::Stop(signal), tick()));
                    }
                    actions
                }
                Some(Control::Kill) => {
                    killed = true;
                    escalation.on(Event::Kill, tick())
                }
                Some(Control::Ending) => {
                    ending = true;
                    Vec::new()
                }
                None => {
                    control_open = false;
                    Vec::new()
                }
            },
            facts = &mut exit_rx, if exit.is_none() => {
                // The reaper never drops a watched pid's sender before sending; should it be
                // gone anyway, the job is taken as killed.
                exit = Some(facts.unwrap_or(ExitFacts::Signaled(Signal::SIGKILL as i32)));
                let mut actions = escalation.on(Event::Exited, tick());
                if let Some(signal) = deferred_stop.take() {
                    reaper.reap();
                    if job.alive() {
                        actions.extend(escalation.on(Event::Stop(signal), tick()));
                    }
                }
                actions
            },
            permit = room(&out) => { out.hand_over(permit); Vec::new() },
            permit = room(&err) => { err.hand_over(permit); Vec::new() },
            ready = readable(&stdout), if out.may_read() => {
                if !out.pump(&mut stdout, ready, results.as_mut()) {
                    stdout = None;
                }
                Vec::new()
            },
            ready = readable(&stderr), if err.may_read() => {
                if !err.pump(&mut stderr, ready, results.as_mut()) {
                    stderr = None;
                }
                Vec::new()
            },
            () = sleep_until_opt(wake) => {
                reaper.reap();
                escalation.on(Event::Due { group_alive: job.alive() }, tick())
            },
            () = job.changed(), if escalation.exited() => Vec::new(),
        };
        for action in actions {
            if !stop_seen && matches!(action, Action::Deliver(_)) && timing.backend.is_local() {
                stop_seen = true;
                was_stopped = super::stopped::why_stopped(seq, pid)
                    .map(|why| format!("its processes were stopped ({why}) when lanes stopped it"));
            }
            job.apply(action, seq, &timing);
        }
    }
    // The job is over now, whenever its output gets written.
    let ended_at = Instant::now();
    let mut exit = exit.unwrap_or(ExitFacts::Signaled(Signal::SIGKILL as i32));
    if exit == ExitFacts::Signaled(Signal::SIGKILL as i32) {
        if let Some(cgroup) = &job.cgroup {
            // Killed by SIGKILL, maybe through its own `cgroup.kill`: a cgroup that was killed
            // kills what is later started into it, so it serves no other job.
            cgroup.not_reusable();
        }
    }
    let mut note = None;
    if exit == ExitFacts::Exited(0)
        && !escalation.stopped_while_running()
        && !timing.backend.is_local()
    {
        // A cancelled Slurm job can leave srun with status 0: ask the cluster.
        if let Some(state) = timing.backend.final_state(seq, timing.attempt).await {
            if ended_badly(&state) {
                exit = ExitFacts::Signaled(Signal::SIGKILL as i32);
                note = Some(format!("the Slurm job ended {state}"));
            } else if super::backend::is_active(&state) {
                // Not over on the cluster long after srun: what a cancel leaves when processes
                // of the job linger on the node; not known to have succeeded.
                exit = ExitFacts::Signaled(Signal::SIGKILL as i32);
                note = Some(format!(
                    "the Slurm job was still {state} {} s after srun ended (processes of it \
                     left on the node?): not known to have succeeded",
                    super::backend::STATE_PATIENCE.as_secs()
                ));
            }
        }
    }
    out.finish();
    err.finish();
    // What waits for a full sink is written before the job is reported, so that its output
    // comes before anything written after its record; a second Ctrl-C (Kill) drops it, and so
    // does a sink that takes nothing of it for a while once the run is stopping.
    // Progress is lanes' stdout and stderr taking anything, this job's output or another's:
    // jobs whose output waits take turns at a sink that a slow reader drains.
    let mut watch = ReaderWatch::new();
    let mut dropped = false;
    while !killed && (out.has_pending() || err.has_pending()) {
        let give_up = ending.then(|| watch.deadline());
        tokio::select! {
            biased;
            message = control.recv(), if control_open => match message {
                Some(Control::Kill) => killed = true,
                Some(Control::Ending) => ending = true,
                Some(Control::Stop { .. }) => {}
                None => control_open = false,
            },
            permit = room(&out) => {
                out.hand_over(permit);
                watch.taken();
            }
            permit = room(&err) => {
                err.hand_over(permit);
                watch.taken();
            }
            () = sleep_until_opt(give_up) => if watch.stalled() {
                killed = true;
                dropped = true;
            },
        }
    }
    let mut lost: Vec<String> = results
        .as_ref()
        .and_then(|r| r.error.clone())
        .into_iter()
        .collect();
    let (out_capture, err_capture) = (out.take_capture(), err.take_capture());
    // A grouped block's spill that failed, for the record's `error` too.
    let mut spill_failed: Vec<String> = Vec::new();
    for (capture, stream) in [(&out_capture, "stdout"), (&err_capture, "stderr")] {
        if let Some(failure) = capture.as_ref().and_then(Capture::failure) {
            spill_failed.push(format!(
                "cannot hold the {stream} of job {seq} [{}] beyond {} MiB in a temporary file \
                 (TMPDIR): {failure}; the rest of it is lost",
                plan.key.escape_default(),
                crate::output::capture::SPILL_AT >> 20
            ));
        }
    }
    lost.extend(spill_failed.iter().cloned());
    let captured = match (out_capture, err_capture) {
        (Some(stdout), Some(stderr)) => Some((stdout, stderr)),
        _ => None,
    };
    let usage = job
        .cgroup
        .as_ref()
        .map(JobCgroup::usage)
        .unwrap_or_default();
    Ended {
        seq,
        usage,
        exit,
        stopped_while_running: escalation.stopped_while_running(),
        leaked: escalation.leaked(),
        ended_at,
        // A grouped block's spill that failed is the record's too, as a `--results` file's:
        // a reader of the report alone sees which job's output was cut short.
        output_error: [note, was_stopped, results.and_then(|r| r.error)]
            .into_iter()
            .flatten()
            .chain(spill_failed)
            .reduce(|all, one| format!("{all}; {one}")),
        lost,
        stderr_tail: err.into_tail(),
        captured,
        dropped,
    }
}

/// A job's processes: its process group, led by its direct child `pid`, and, when jobs are
/// contained in cgroups, its cgroup, which holds every process it started; without one, the
/// processes that left the group are traced through `/proc` ([`lineage`]).
struct Job {
    pid: i32,
    /// The run's first job: its `LANES_SEQ`.
    seq: u64,
    /// Its `LANES_ATTEMPT`.
    attempt: u32,
    cgroup: Option<JobCgroup>,
    reaper: Reaper,
}

impl Job {
    /// Whether any process of the job is left (not a zombie).
    fn alive(&self) -> bool {
        match &self.cgroup {
            Some(cgroup) => cgroup.populated(),
            None => {
                if group_alive(self.pid) {
                    return true;
                }
                if !lineage::has_orphans(|pid| self.reaper.watches(pid)) {
                    return false;
                }
                // A `/proc` scan is a snapshot of processes that change while it is read (a
                // process leaving the group, or in the middle of an `execve`): "none left" is
                // believed when two scans a moment apart agree.
                let none_left =
                    |this: &Self| lineage::strays(this.pid, this.seq, this.attempt).is_empty();
                if !none_left(self) {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(2));
                group_alive(self.pid) || !none_left(self)
            }
        }
    }

    /// Resolves when the job may be over: its cgroup's state changed (watched, not polled), or
    /// [`GROUP_POLL`] passed without a cgroup.
    async fn changed(&self) {
        match &self.cgroup {
            Some(cgroup) => cgroup.changed(GROUP_POLL).await,
            None => sleep(GROUP_POLL).await,
        }
    }

    /// `signal` to every process of the job, then SIGCONT so that a stopped one hears it.
    fn signal_all(&self, signal: Signal) {
        match &self.cgroup {
            Some(cgroup) if cgroup.signal_all(signal) => {}
            // No cgroup, or its processes could not be read (no descriptor free): its process
            // group, and the processes that left it.
            _ => {
                let strays = lineage::strays_to_signal(self.pid, self.seq, self.attempt);
                signal_group(self.pid, signal);
                for &pid in &strays {
                    signal_process(pid, signal);
                }
                if signal != Signal::SIGKILL {
                    signal_group(self.pid, Signal::SIGCONT);
                    for pid in strays {
                        signal_process(pid, Signal::SIGCONT);
                    }
                }
            }
        }
    }

    /// Carries out one escalation step on the job, as its backend wants it.
    fn apply(&self, action: Action, seq: u64, timing: &Timing) {
        let local = timing.backend.is_local();
        match action {
            Action::Deliver(signal) if !local => {
                signal_process(self.pid, timing.backend.stop_signal(signal));
            }
            Action::Deliver(signal) => self.signal_all(signal),
            Action::TermGroup => self.signal_all(Signal::SIGTERM),
            Action::Force { running } if !local && running => {
                timing.backend.cancel(seq, timing.attempt);
                signal_process(self.pid, Signal::SIGINT);
            }
            Action::Force { .. } => match &self.cgroup {
                Some(cgroup) if cgroup.kill() => {}
                _ => self.signal_all(Signal::SIGKILL),
            },
        }
    }
}

/// Whether a Slurm job state says the job was ended by the cluster rather than by its own exit
/// (`squeue(1)` JOB STATE CODES).
fn ended_badly(state: &str) -> bool {
    matches!(
        state,
        "CANCELLED"
            | "TIMEOUT"
            | "FAILED"
            | "NODE_FAIL"
            | "PREEMPTED"
            | "OUT_OF_MEMORY"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "REVOKED"
    )
}
