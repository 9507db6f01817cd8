//! Supervising one started job until its process group is empty: its exit, its pipes (pumped
//! by [`crate::output::pump`]), and the stop escalation the core decides
//! ([`crate::core::Escalation`]) carried out on the process group (SPEC §2, §4).

use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::sync::mpsc;
use tokio::time::{sleep, Instant};

use super::reap::Reaper;
use super::sleep_until_opt;
use super::spawn::Spawned;
use super::unix::{group_alive, signal_group, signal_process};
use crate::config::Backend;
use crate::core::{Action, Escalation, Event, ExitFacts};
use crate::output::capture::Capture;
use crate::output::pump::{readable, room, OutputPlan, Stream};
use crate::output::results::ResultFiles;

/// What the driver asks of a running job's supervisor.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Control {
    /// The core ordered a stop: `signal` to the job's process group, SIGKILL after the grace
    /// period. Only the first counts.
    Stop { signal: Signal },
    /// SIGKILL to the job's process group now (a second Ctrl-C).
    Kill,
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
}

/// How a supervised job ended: facts only; the core classifies them.
#[derive(Debug)]
pub(crate) struct Ended {
    /// The run, known by its first job.
    pub seq: u64,
    /// How the direct child ended.
    pub exit: ExitFacts,
    /// Whether a stop reached the job while its direct child still ran.
    pub stopped_while_running: bool,
    /// Processes of the group outlived the shell past the leak window, or something held the
    /// job's pipes open.
    pub leaked: bool,
    /// When the job was over (its group empty), before its output was flushed.
    pub ended_at: Instant,
    /// A problem with the job's output files, for the record's `error`.
    pub output_error: Option<String>,
    /// The last bytes of the job's stderr, for the summary and JUnit.
    pub stderr_tail: Vec<u8>,
    /// `--output grouped`: the whole stdout and stderr, to be written as one block.
    pub captured: Option<(Capture, Capture)>,
}

/// How often the process group is checked for emptiness once the direct child has exited and
/// members are left.
const GROUP_POLL: Duration = Duration::from_millis(10);

/// Supervises a started job until its process group is empty and its pipes are at EOF (or
/// past the leak window, held open by a process outside the group), then returns how it ended.
pub(crate) async fn supervise(
    seq: u64,
    spawned: Spawned,
    mut control: mpsc::UnboundedReceiver<Control>,
    plan: OutputPlan,
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
    let mut results = plan
        .results_dir
        .as_deref()
        .map(|dir| ResultFiles::create(dir, seq, &plan.key));
    let origin = Instant::now();
    let tick = || origin.elapsed();
    let mut escalation = Escalation::new(timing.grace, timing.leak_window);
    let mut exit: Option<ExitFacts> = None;
    let mut control_open = true;
    // A second Ctrl-C came: output still waiting for the sink is not waited for.
    let mut killed = false;

    loop {
        let pipes_open = stdout.is_some() || stderr.is_some();
        // A pipe not read because its output waits for a full sink: whether the job is over
        // cannot wait for its EOF.
        let held_back =
            (stdout.is_some() && !out.may_read()) || (stderr.is_some() && !err.may_read());
        if escalation.may_be_over(pipes_open, held_back) {
            reaper.reap();
            if !group_alive(pid) {
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
        let wake = escalation.next_deadline().map(|at| origin + at);
        let actions = tokio::select! {
            biased;
            message = control.recv(), if control_open => match message {
                Some(Control::Stop { signal }) => escalation.on(Event::Stop(signal), tick()),
                Some(Control::Kill) => {
                    killed = true;
                    escalation.on(Event::Kill, tick())
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
                escalation.on(Event::Exited, tick())
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
                escalation.on(Event::Due { group_alive: group_alive(pid) }, tick())
            },
            () = sleep(GROUP_POLL), if escalation.exited() => Vec::new(),
        };
        for action in actions {
            apply(action, pid, seq, &timing);
        }
    }
    // The job is over now, whenever its output gets written.
    let ended_at = Instant::now();
    let mut exit = exit.unwrap_or(ExitFacts::Signaled(Signal::SIGKILL as i32));
    let mut note = None;
    if exit == ExitFacts::Exited(0)
        && !escalation.stopped_while_running()
        && !timing.backend.is_local()
    {
        // A cancelled Slurm job can leave srun with status 0: ask the cluster.
        if let Some(state) = timing.backend.final_state(seq, timing.attempt) {
            if ended_badly(&state) {
                exit = ExitFacts::Signaled(Signal::SIGKILL as i32);
                note = Some(format!("the Slurm job ended {state}"));
            }
        }
    }
    out.finish();
    err.finish();
    // What waits for a full sink is written before the job is reported, so that its output
    // comes before anything written after its record; a second Ctrl-C (Kill) drops it.
    while !killed && (out.has_pending() || err.has_pending()) {
        tokio::select! {
            biased;
            message = control.recv(), if control_open => match message {
                Some(Control::Kill) => killed = true,
                Some(Control::Stop { .. }) => {}
                None => control_open = false,
            },
            permit = room(&out) => out.hand_over(permit),
            permit = room(&err) => err.hand_over(permit),
        }
    }
    let captured = match (out.take_capture(), err.take_capture()) {
        (Some(stdout), Some(stderr)) => Some((stdout, stderr)),
        _ => None,
    };
    Ended {
        seq,
        exit,
        stopped_while_running: escalation.stopped_while_running(),
        leaked: escalation.leaked(),
        ended_at,
        output_error: note.or(results.and_then(|r| r.error)),
        stderr_tail: err.into_tail(),
        captured,
    }
}

/// Carries out one escalation step on the job's process (group), as its backend wants it.
fn apply(action: Action, pid: i32, seq: u64, timing: &Timing) {
    match action {
        Action::Deliver(signal) if timing.backend.is_local() => signal_group(pid, signal),
        Action::Deliver(signal) => signal_process(pid, timing.backend.stop_signal(signal)),
        Action::TermGroup => signal_group(pid, Signal::SIGTERM),
        Action::Force { running } => force(pid, seq, timing, running),
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

/// The end of the grace period, or a second Ctrl-C: SIGKILL to the whole group locally; under
/// Slurm, `scancel` of the job (never SIGKILL to `srun`, which would leave the job running on
/// the cluster) and SIGINT to `srun` again.
fn force(pid: i32, seq: u64, timing: &Timing, running: bool) {
    if timing.backend.is_local() {
        signal_group(pid, Signal::SIGKILL);
    } else if running {
        timing.backend.cancel(seq, timing.attempt);
        signal_process(pid, Signal::SIGINT);
    } else {
        signal_group(pid, Signal::SIGKILL);
    }
}
