//! The end of a run (one job, or a batch): its outcome classified from the facts the shell
//! observed and the reason the core asked it to stop, whether it goes again (`--retries`), and
//! whether it stops the run (`--fail-fast`).

use std::time::Duration;

use nix::sys::signal::Signal;

use super::outcome::{classify, ExitFacts, FailReason, Outcome, StopReason};
use super::shutdown::Halt;
use super::state::{Scheduler, Seq, Tick, Try};
use super::transition::Released;

/// What the shell observed of a run that the core had started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunFacts {
    /// How the direct child ended; `None` when its process could not be started.
    pub exit: Option<ExitFacts>,
    /// Whether a stop the core ordered reached the job while its direct child still ran.
    pub stopped_while_running: bool,
    /// When the run ended: its process group empty, or the spawn failed.
    pub ended_at: Tick,
}

/// A job's final account, from which its one record is written: everything the core knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// The job.
    pub seq: Seq,
    /// How it ended.
    pub outcome: Outcome,
    /// Tries made (0 when never started).
    pub attempts: u32,
    /// Its last try, when it started at least once.
    pub tried: Option<Try>,
    /// From admission to its end, for a job that was admitted and never started (this time);
    /// `None` for a job never admitted, or superseded while waiting (SPEC §5.2).
    pub waited: Option<Duration>,
    /// The newer job that superseded it (`superseded` only).
    pub superseded_by: Option<Seq>,
    /// The first job of the batch it ran in (batching only).
    pub batch: Option<Seq>,
    /// When its record was decided.
    pub ended_at: Tick,
    /// Whether it ended as a run in flight: the end of its try was already told (the `ended`
    /// event); otherwise the record is the first word of its end.
    pub in_flight: bool,
}

impl Account {
    /// The account of a job that ends without ever being admitted (rejected) or without
    /// starting (closed intake, superseded while waiting).
    pub(crate) fn unstarted(seq: Seq, outcome: Outcome, now: Tick) -> Self {
        Account {
            seq,
            outcome,
            attempts: 0,
            tried: None,
            waited: None,
            superseded_by: None,
            batch: None,
            ended_at: now,
            in_flight: false,
        }
    }
}

/// The core's verdict on a run that ended.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The run's outcome, shared by every job of a batch.
    pub outcome: Outcome,
    /// The try that ended.
    pub attempt: u32,
    /// Every job of the run, its first job first.
    pub members: Vec<Seq>,
    /// The run goes again (`--retries`): no record yet, `accounts` is empty.
    pub retry: bool,
    /// The members' final accounts, unless retried.
    pub accounts: Vec<Account>,
    /// `--fail-fast`: this failure stops the run.
    pub halt: Option<Halt>,
}

impl Scheduler {
    /// The run known by `seq` ended with `facts`: classifies its outcome (a job the core asked
    /// to stop while its direct child still ran is `interrupted` with the core's reason,
    /// SPEC §4), releases its slot and key, and decides on a retry and on `--fail-fast`.
    /// Resources the run held are free again, so a spawn held back by a shortage may try again
    /// at once. `None` when no such run is in flight.
    pub fn finish(&mut self, seq: Seq, facts: RunFacts, now: Tick) -> Option<Finished> {
        let run = self.running.get(&seq)?;
        let outcome = match facts.exit {
            None => Outcome::Failed(FailReason::SpawnError),
            Some(exit) => classify(exit, run.stop.filter(|_| facts.stopped_while_running)),
        };
        let members: Vec<Seq> = run.batch.iter().map(|w| w.seq).collect();
        let tried = facts.exit.map(|_| Try {
            slot: run.slot,
            waited: run.waited,
            started_at: run.started_at,
            ended_at: facts.ended_at,
        });
        let (attempt, waited) = (run.attempts, run.waited);
        let superseded_by = run
            .superseded_by
            .filter(|_| outcome == Outcome::Interrupted(StopReason::Superseded));
        self.spawn_hold = None;
        let released = if matches!(outcome, Outcome::Failed(_)) {
            self.release_failed(seq, facts.ended_at.max(self.clock))
        } else {
            self.release(seq)
        };
        let retry = matches!(released, Released::Retry { .. });
        let batch = self.policy.batching().then_some(seq);
        let accounts = if retry {
            Vec::new()
        } else {
            members
                .iter()
                .map(|&member| Account {
                    seq: member,
                    outcome,
                    attempts: attempt,
                    tried,
                    waited: tried.is_none().then_some(waited),
                    superseded_by,
                    batch,
                    ended_at: facts.ended_at,
                    in_flight: true,
                })
                .collect()
        };
        let halt = (!retry
            && self.policy.fail_fast
            && matches!(outcome, Outcome::Failed(_))
            && self.stopping.is_none())
        .then(|| self.halt(StopReason::FailFast, Signal::SIGTERM, now));
        Some(Finished {
            outcome,
            attempt,
            members,
            retry,
            accounts,
            halt,
        })
    }
}
