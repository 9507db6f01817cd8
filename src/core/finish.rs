//! The end of a run (one job, or a batch): its outcome classified from the facts the shell
//! observed and the reason the core asked it to stop, whether it goes again (`--retries`), and
//! whether it stops the run (`--fail-fast`).

use nix::sys::signal::Signal;

use super::account::Account;
use super::outcome::{classify, ExitFacts, FailReason, Outcome, StopReason};
use super::shutdown::Halt;
use super::state::{Scheduler, Seq, Tick, Try};
use super::transition::Released;

/// What the shell observed of a run that the core had started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunFacts {
    /// How the direct child ended; `None` when its process could not be started.
    pub exit: Option<ExitFacts>,
    /// Whether a stop the core ordered reached the job before it was over (its direct child
    /// running, or processes it left in the leak window).
    pub stopped_while_running: bool,
    /// When the run ended: its process group empty, or the spawn failed.
    pub ended_at: Tick,
}

/// The core's verdict on a run that ended.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The try's outcome, shared by every job of a batch. Its members' records (`accounts`)
    /// may say otherwise: a try that failed with tries left while the run stops is recorded
    /// `interrupted`, with the stop's reason.
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
        let members = run.members();
        let this_try = Try {
            slot: run.slot,
            waited: run.waited,
            started_at: run.started_at,
            ended_at: facts.ended_at,
            outcome,
            exit: facts.exit,
        };
        // Every member of a batch made the same tries, each after its own wait; a job's
        // history is its own otherwise.
        let earlier: Vec<_> = run
            .batch
            .iter()
            .enumerate()
            .map(|(i, w)| (w.tries.clone(), run.member_wait(i)))
            .collect();
        let attempt = run.attempts;
        let grant = run.grant.clone();
        // Tries left, its key not being cancelled: only a stop of the run (drain) would keep
        // a failed try from being retried.
        let cancelled = self.lanes.get(&run.key).is_some_and(|lane| lane.cancelling);
        let tries_left = self.tries_left(attempt, cancelled);
        let superseded_by = run
            .superseded_by
            .filter(|_| outcome == Outcome::Interrupted(StopReason::Superseded));
        if self.spawn_hold.take().is_some() {
            self.capacity_changed(self.clock);
        }
        if self.weighs() {
            // A retry delay that ran out before this end waited, from then, for what the
            // run's capacity was before this run's weight and resources came free.
            let at = facts.ended_at.max(self.clock);
            self.clock = at;
            self.rejoin_held(at);
        }
        let released = if let Outcome::Failed(reason) = outcome {
            self.release_failed(seq, facts.ended_at, reason, facts.exit)
        } else {
            self.release_at(seq, None, Some(now))
        };
        let retry = matches!(released, Released::Retry { .. });
        // A try that failed with tries left while the run stops is the job stopped before its
        // retry: `interrupted` with the stop's reason, as a job stopped while it waits out its
        // retry delay is (its tries told), not `failed` by a try that would have been retried.
        let recorded = match outcome {
            Outcome::Failed(_) if !retry && tries_left && self.draining => {
                Outcome::Interrupted(self.stopping.unwrap_or(StopReason::Shutdown))
            }
            _ => outcome,
        };
        let batch = self.policy.batching().then_some(seq);
        let accounts = if retry {
            Vec::new()
        } else {
            members
                .iter()
                .zip(earlier)
                .map(|(&member, (mut tries, (waited, waits)))| Account {
                    seq: member,
                    outcome: recorded,
                    attempts: attempt,
                    tries: {
                        tries.push(Try { waited, ..this_try });
                        tries
                    },
                    waited: (!this_try.started()).then_some(waited),
                    waits,
                    superseded_by,
                    batch,
                    ended_at: facts.ended_at,
                    in_flight: true,
                    grant: grant.clone(),
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
