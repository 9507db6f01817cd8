//! Why and when running jobs are asked to stop, and how the run winds down: the stop signals
//! to `lanes` (SPEC §4), turn timeouts, `--fail-fast`, and the halt that drains every waiting
//! job with the reason it never ran.

use nix::sys::signal::Signal;

use super::account::Account;
use super::outcome::{Outcome, StopReason};
use super::state::{Scheduler, Seq, ShutdownLevel, Tick};

/// A running job the shell must ask to stop: `signal` to its process group, then the grace
/// period and SIGKILL ([`super::Escalation`]). The core keeps `reason` for the job's record.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopOrder {
    /// The run, known by its first job.
    pub seq: Seq,
    /// SIGTERM, or the stop signal `lanes` received (forwarded on shutdown).
    pub signal: Signal,
    /// Why the core wants it stopped.
    pub reason: StopReason,
}

/// The run winds down: nothing more starts.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Halt {
    /// Why the run stops.
    pub reason: StopReason,
    /// Every job that was waiting, in seq order: each ends `interrupted` for `reason` without
    /// starting (again).
    pub drained: Vec<Account>,
    /// The running jobs to stop.
    pub stops: Vec<StopOrder>,
    /// Whether input stops being read now: always on shutdown; after `--fail-fast` only when
    /// the input does not end by itself (stdin), since a file or manifest is read to its end
    /// so that every job gets its record.
    pub close_input: bool,
}

/// What a stop signal to `lanes` means now.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignalVerdict {
    /// The first: a graceful shutdown.
    Halt(Halt),
    /// A later one: SIGKILL to these runs' process groups at once (the grace is cut short).
    Kill(Vec<Seq>),
}

/// The signal a stop signal to `lanes` is forwarded to its jobs as: the same one (SPEC §4),
/// but SIGXCPU, which says that `lanes`' own CPU-time limit was reached and is no concern of
/// the jobs: they get SIGTERM.
pub fn forwarded(signal: Signal) -> Signal {
    match signal {
        Signal::SIGXCPU => Signal::SIGTERM,
        other => other,
    }
}

impl Scheduler {
    /// Tells the core whether the input ends by itself (a file or a manifest), which decides
    /// whether it is still read to its end after `--fail-fast`.
    pub fn set_input_finite(&mut self, finite: bool) {
        self.input_finite = finite;
    }

    /// A stop signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGXCPU) reached `lanes` at `now`.
    /// The first halts the run (reason `shutdown`) and forwards `signal` to every running job
    /// ([`forwarded`]); any later one kills what still runs (SPEC §4).
    pub fn signal_received(&mut self, signal: Signal, now: Tick) -> SignalVerdict {
        if self.shutdown == ShutdownLevel::Running {
            self.shutdown = ShutdownLevel::Graceful;
            self.stop_signal = Some(signal);
            SignalVerdict::Halt(self.halt(StopReason::Shutdown, forwarded(signal), now))
        } else {
            self.shutdown = ShutdownLevel::Forced;
            let mut runs: Vec<Seq> = self.running.keys().copied().collect();
            runs.sort_unstable();
            SignalVerdict::Kill(runs)
        }
    }

    /// `lanes close` (service mode) at `now`: the run halts as on a stop signal, reason
    /// `shutdown`: every waiting job is drained and every running one gets SIGTERM, then the
    /// grace and SIGKILL. No stop signal is recorded: the exit status stays the jobs'.
    pub fn close(&mut self, now: Tick) -> Halt {
        self.halt(StopReason::Shutdown, Signal::SIGTERM, now)
    }

    /// The first stop signal received while jobs ran or waited, if any: it decides the exit
    /// status (SPEC §6). One that comes once every job has ended and has its record is not
    /// told to the core: it only shortens `lanes`' last waits (escaped processes, output for
    /// a slow reader), and the exit status stays the jobs' (the summary's).
    pub fn stop_signal(&self) -> Option<Signal> {
        self.stop_signal
    }

    /// Whether a second stop signal forced the end: output that cannot be written soon is
    /// then dropped.
    pub fn is_forced(&self) -> bool {
        self.shutdown == ShutdownLevel::Forced
    }

    /// Stops the run for `reason` at `now`: nothing more is admitted or started, every waiting
    /// job is drained, and every running job not already stopping is asked to stop with
    /// `signal`. The first reason is the one later admissions are closed with.
    pub(crate) fn halt(&mut self, reason: StopReason, signal: Signal, now: Tick) -> Halt {
        self.stopping.get_or_insert(reason);
        let close_input = reason != StopReason::FailFast || !self.input_finite;
        if close_input {
            self.intake_closed.get_or_insert(reason);
        }
        self.spawn_hold = None;
        let outcome = Outcome::Interrupted(reason);
        let drained = self
            .drain(now)
            .into_iter()
            .map(|job| Account {
                seq: job.seq,
                outcome,
                attempts: job.attempts,
                // A retry that never got its turn tells of the tries it made.
                tries: job.tries,
                waited: Some(job.waited),
                waits: job.waits,
                superseded_by: None,
                batch: job.batch,
                ended_at: now,
                in_flight: false,
                grant: None,
            })
            .collect();
        let mut stops: Vec<StopOrder> = self
            .running
            .iter_mut()
            .filter(|(_, run)| run.stop.is_none())
            .map(|(&seq, run)| {
                run.stop = Some(reason);
                StopOrder {
                    seq,
                    signal,
                    reason,
                }
            })
            .collect();
        stops.sort_unstable_by_key(|stop| stop.seq);
        Halt {
            reason,
            drained,
            stops,
            close_input,
        }
    }

    /// Turn timeouts that have run out at `now`, soonest first: each running job is asked to
    /// stop with SIGTERM, reason `timeout`, unless it is already stopping for another reason
    /// (the first reason wins). Lanes whose retry delay is over rejoin the ready line.
    pub fn expire_turns(&mut self, now: Tick) -> Vec<StopOrder> {
        self.expire(now)
            .into_iter()
            .filter_map(|expired| {
                let run = self.running.get_mut(&expired.seq)?;
                if run.stop.is_some() {
                    return None;
                }
                run.stop = Some(StopReason::Timeout);
                Some(StopOrder {
                    seq: expired.seq,
                    signal: Signal::SIGTERM,
                    reason: StopReason::Timeout,
                })
            })
            .collect()
    }

    /// Why the run is stopping, if it is.
    pub fn stopping(&self) -> Option<StopReason> {
        self.stopping
    }
}
