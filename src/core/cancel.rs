//! `lanes cancel KEY` (service mode): every waiting job of one key is dropped and its running
//! job asked to stop, each with reason `cancelled`. Other keys are untouched.

use nix::sys::signal::Signal;

use super::account::Account;
use super::outcome::{Outcome, StopReason};
use super::shutdown::StopOrder;
use super::state::{Scheduler, Seq, Tick};

/// What cancelling a key means now.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancel {
    /// The key's waiting jobs, in lane order: each ends `interrupted`/`cancelled`, never
    /// started (again).
    pub dropped: Vec<Account>,
    /// The key's run in flight, by its first job, if any: the cancel is over once it has ended.
    pub running: Option<Seq>,
    /// The stop to send to that run (SIGTERM, then the grace and SIGKILL); `None` when nothing
    /// runs or the run is already being stopped for another reason (the first reason wins).
    pub stop: Option<StopOrder>,
    /// The jobs of that run, in lane order (a batch's members; the one job without batching).
    pub members: Vec<Seq>,
    /// Why that run was already being stopped, when it was: its records keep that reason.
    pub already: Option<StopReason>,
}

impl Scheduler {
    /// Cancels `key` at `now`: its waiting jobs leave the queue (and the key the ready line),
    /// and its running job, if any, is asked to stop with reason `cancelled`. A key with
    /// nothing waiting or running is left as it is. New jobs of the key may be admitted at
    /// once; they start after the stopped run has ended, as any job of a busy key.
    pub fn cancel_key(&mut self, key: &str, now: Tick) -> Cancel {
        self.clock = self.clock.max(now);
        let Some(lane) = self.lanes.get_mut(key) else {
            return Cancel {
                dropped: Vec::new(),
                running: None,
                stop: None,
                members: Vec::new(),
                already: None,
            };
        };
        let dropped_weight: usize = lane
            .waiting
            .iter()
            .map(|job| super::resources::weight_of(job.needs.as_deref()))
            .sum();
        let dropped: Vec<Account> = lane
            .waiting
            .drain(..)
            .map(|mut job| {
                // A job waiting for its retry tells of its wait up to the try it made.
                let waits = if job.tries.last().is_some_and(super::state::Try::started) {
                    job.wait.take_before_retry()
                } else {
                    job.wait.close_told(now, &mut self.wait_changes)
                };
                Account {
                    seq: job.seq,
                    outcome: Outcome::Interrupted(StopReason::Cancelled),
                    attempts: job.attempts,
                    waited: Some(now.saturating_sub(job.queued_at)),
                    waits,
                    tries: job.tries,
                    superseded_by: None,
                    batch: job.batch,
                    ended_at: now,
                    in_flight: false,
                    grant: None,
                }
            })
            .collect();
        let busy = lane.busy;
        if let Some(until) = lane.held_until.take() {
            self.held
                .retain(|(at, held)| !(*at == until && &**held == key));
        }
        self.queued -= dropped.len();
        self.queued_weight -= dropped_weight;
        self.ready.retain(|ready| &**ready != key);
        if !busy {
            self.lanes.remove(key);
        }
        let running = self.running.iter_mut().find(|(_, run)| &*run.key == key);
        let (running, stop, members, already) = match running {
            Some((&seq, run)) => {
                let already = run.stop;
                let stop = already.is_none().then(|| {
                    run.stop = Some(StopReason::Cancelled);
                    StopOrder {
                        seq,
                        signal: Signal::SIGTERM,
                        reason: StopReason::Cancelled,
                    }
                });
                let members = run.members();
                (Some(seq), stop, members, already)
            }
            None => (None, None, Vec::new(), None),
        };
        Cancel {
            dropped,
            running,
            stop,
            members,
            already,
        }
    }
}
