//! What comes in: whether input is read now (`--on-full`, backpressure), what becomes of each
//! job offered (queued, superseding, rejected, closed, skipped), and the order a manifest's
//! jobs are offered in.

use super::account::Account;
use super::outcome::{Outcome, RejectReason, SkipReason, StopReason};
use super::shutdown::StopOrder;
use super::state::{JobRequest, OnFull, Scheduler, Seq, Tick};
use super::transition::Admission;

/// The core's answer to a job offered at the intake.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer {
    /// Queued in its lane, `ahead` jobs of its key before it. Under `--coalesce latest` it may
    /// have replaced a waiting job (`replaced`, whose account says `superseded`), and under
    /// `--cancel-in-progress` asked for the key's running job to stop (`cancel`).
    Queued {
        /// Jobs of its key before it.
        ahead: usize,
        /// The waiting job it replaced, with its final account.
        replaced: Option<Account>,
        /// The stop to send to the key's running job.
        cancel: Option<StopOrder>,
        /// `--cancel-in-progress`: the key's job that was waiting out its retry delay,
        /// superseded (its final accounts: one per job of a retried batch).
        retries: Vec<Account>,
    },
    /// Not admitted: the job's account (`rejected`/`queue_full`, or `interrupted` when the run
    /// is stopping).
    Refused(Account),
    /// `--resume`: it succeeded in the earlier report and is not run again: its account (never
    /// admitted, `skipped`), so that the new report records it too and a later `--resume`
    /// from that report still knows it succeeded.
    Skipped(Account),
}

impl Scheduler {
    /// Whether the shell may read the next input item: under `--on-full wait` only while a
    /// job can be admitted (backpressure), or once the run is stopping (each item is then
    /// recorded at once); under `--on-full reject` always. Never once input is closed.
    pub fn may_read_input(&self) -> bool {
        if self.intake_closed.is_some() {
            return false;
        }
        match self.policy.on_full {
            OnFull::Wait => self.has_room() || self.draining,
            OnFull::Reject => true,
        }
    }

    /// Why input is no longer read, if it is not (a halt closed it).
    pub fn intake_closed(&self) -> Option<StopReason> {
        self.intake_closed
    }

    /// The input has ended at `now`: no job will join a batch any more, so a batch waiting out
    /// `--batch-delay` for more jobs may go at once (the causes of its lane are decided
    /// again). For `lanes serve`, whose jobs may come at any time, once it drains.
    pub fn input_ended(&mut self, now: Tick) {
        self.clock = self.clock.max(now);
        if std::mem::replace(&mut self.input_ended, true) || self.policy.batch_delay.is_zero() {
            return;
        }
        let delayed: Vec<std::sync::Arc<str>> = self
            .lanes
            .iter()
            .filter(|(_, lane)| {
                lane.waiting
                    .front()
                    .is_some_and(|w| w.wait.cause() == Some(&super::WaitCause::BatchDelay))
            })
            .map(|(key, _)| std::sync::Arc::clone(key))
            .collect();
        for key in delayed {
            self.refresh_waits(&key, super::wait::Touched::Front, now);
        }
    }

    /// Offers a job at `now`. `skipped` says a `--resume` report holds the same key and
    /// command as done, and why: the job is skipped, with an account of its own. Otherwise it
    /// is admitted ([`Scheduler::admit`]) or refused with its account.
    pub fn offer(&mut self, job: JobRequest, skipped: Option<SkipReason>, now: Tick) -> Offer {
        if let Some(why) = skipped {
            return Offer::Skipped(Account::unstarted(job.seq, Outcome::Skipped(why), now));
        }
        self.offer_within(job, true, now)
    }

    /// Offers again at `now` a job an earlier `lanes serve` admitted and did not record (its
    /// journal says so): its `queued` answer promised it a run, so neither `max_queued` nor
    /// `max_queued_weight` refuses it (see [`Scheduler::admit`] for the rest). A job offered
    /// after it meets a queue that may be fuller than the bounds.
    pub fn offer_again(&mut self, job: JobRequest, now: Tick) -> Offer {
        self.offer_within(job, false, now)
    }

    fn offer_within(&mut self, job: JobRequest, bounded: bool, now: Tick) -> Offer {
        let seq = job.seq;
        match self.admit_within(job, bounded, now) {
            Admission::Queued { ahead } => Offer::Queued {
                ahead,
                replaced: None,
                cancel: None,
                retries: Vec::new(),
            },
            Admission::Superseding {
                ahead,
                replaced,
                cancel,
                retries,
            } => Offer::Queued {
                retries,
                ahead,
                replaced: replaced.map(|old| {
                    let (waited, waits) = self.replaced_wait.take().unwrap_or_default();
                    Account {
                        superseded_by: Some(seq),
                        waited: Some(waited),
                        waits,
                        ..Account::unstarted(old, Outcome::Interrupted(StopReason::Superseded), now)
                    }
                }),
                cancel: cancel.and_then(|running| self.supersede(running)),
            },
            Admission::Full => Offer::Refused(Account::unstarted(
                seq,
                Outcome::Rejected(RejectReason::QueueFull),
                now,
            )),
            Admission::Closed => {
                let reason = self
                    .intake_closed
                    .or(self.stopping)
                    .unwrap_or(StopReason::Shutdown);
                Offer::Refused(Account::unstarted(seq, Outcome::Interrupted(reason), now))
            }
        }
    }

    /// The account of an input line that is not a job (`rejected`/`invalid_input`).
    pub fn invalid_input(&self, seq: Seq, now: Tick) -> Account {
        Account::unstarted(seq, Outcome::Rejected(RejectReason::InvalidInput), now)
    }

    /// The account of a job that was running when an earlier `lanes serve` ended without
    /// recording it (its journal says so), when it is not run again: `interrupted`,
    /// `server_lost`, with no start of this run's (what its try did was lost with the server).
    pub fn lost_with_server(&self, seq: Seq, now: Tick) -> Account {
        Account::unstarted(seq, Outcome::Interrupted(StopReason::ServerLost), now)
    }

    /// The account of a job that an earlier `lanes serve` had dropped or was stopping for
    /// `reason` and then ended without recording it (its journal says so): `lanes cancel`
    /// (`cancelled`), or the server's own end (`lanes close` or a stop signal: `shutdown`;
    /// `fail_fast`). `interrupted` for `reason`, with no start of this run's.
    pub fn stopped_with_server(&self, seq: Seq, reason: StopReason, now: Tick) -> Account {
        Account::unstarted(seq, Outcome::Interrupted(reason), now)
    }

    /// The account of a job that a newer job `by` had superseded (dropped while it waited, or
    /// being stopped under `--cancel-in-progress`) when an earlier `lanes serve` ended without
    /// recording it (its journal says so): `interrupted`, `superseded`, `superseded_by` `by`,
    /// with no start of this run's.
    pub fn superseded_with_server(&self, seq: Seq, by: Seq, now: Tick) -> Account {
        Account {
            superseded_by: Some(by),
            ..Account::unstarted(seq, Outcome::Interrupted(StopReason::Superseded), now)
        }
    }

    /// `--cancel-in-progress`: the running job `seq` is asked to stop (SIGTERM, reason
    /// `superseded`), unless it already stops for another reason.
    fn supersede(&mut self, seq: Seq) -> Option<StopOrder> {
        let run = self.running.get_mut(&seq)?;
        if run.stop.is_some() {
            return None;
        }
        run.stop = Some(StopReason::Superseded);
        Some(StopOrder {
            seq,
            signal: nix::sys::signal::Signal::SIGTERM,
            reason: StopReason::Superseded,
        })
    }
}

/// The order a manifest's jobs are offered in, as indexes into `ranks` (one rank per job, in
/// file order): lower rank first, file order among equal ranks (a stable sort), so that each
/// lane is admitted in (rank, file order) and lower ranks reach the ready line first.
pub fn admission_order(ranks: &[i64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..ranks.len()).collect();
    order.sort_by_key(|&i| ranks[i]);
    order
}

#[cfg(test)]
mod tests {
    use super::admission_order;

    #[test]
    fn lower_ranks_first_and_file_order_among_equals() {
        assert_eq!(admission_order(&[0, -1, 0, 2, -1]), vec![1, 4, 0, 2, 3]);
        assert_eq!(admission_order(&[]), Vec::<usize>::new());
    }
}
