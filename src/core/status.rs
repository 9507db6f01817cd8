//! What runs now, as a status report shows it (SIGUSR1 to `lanes`): a read-only view of the
//! running jobs.

use std::sync::Arc;

use super::outcome::StopReason;
use super::state::{Scheduler, Seq, Tick};

/// One run in flight, as the status report lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningJob {
    /// The run, known by its first job.
    pub seq: Seq,
    /// Its lane.
    pub key: Arc<str>,
    /// Its slot, 1..=max_concurrent (above a cap lowered since it started).
    pub slot: u32,
    /// Its try: 1 on the first.
    pub attempt: u32,
    /// The jobs it runs, in lane order: a batch's members, the one job without batching.
    pub members: Vec<Seq>,
    /// When its process started (time since the run started).
    pub started_at: Tick,
    /// Why it is being stopped, when it is.
    pub stopping: Option<StopReason>,
}

impl Scheduler {
    /// Every run in flight, in seq order.
    pub fn running_jobs(&self) -> Vec<RunningJob> {
        let mut jobs: Vec<RunningJob> = self
            .running
            .iter()
            .map(|(&seq, run)| RunningJob {
                seq,
                key: Arc::clone(&run.key),
                slot: run.slot,
                attempt: run.attempts,
                members: run.members(),
                started_at: run.started_at,
                stopping: run.stop,
            })
            .collect();
        jobs.sort_unstable_by_key(|job| job.seq);
        jobs
    }
}

/// One key's waiting jobs, as a status report lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingLane {
    /// The key.
    pub key: Arc<str>,
    /// How many jobs of the key are in flight, ahead of every waiting one: 0, 1, or a
    /// running batch's members.
    pub in_flight: usize,
    /// Its waiting jobs in the order they will run, each with how many of the key's jobs
    /// run before it (`in_flight` included; under batching, the jobs it would be taken with
    /// are not ahead of it).
    pub waiting: Vec<(Seq, usize)>,
}

impl Scheduler {
    /// Every key with jobs waiting, by its first waiting job's seq.
    pub fn waiting_lanes(&self) -> Vec<WaitingLane> {
        let mut lanes: Vec<WaitingLane> = self
            .lanes
            .iter()
            .filter(|(_, lane)| !lane.waiting.is_empty())
            .map(|(key, lane)| {
                let in_flight = lane.in_flight(&self.running);
                // Without batching (a batch size of 1) each job is a batch of its own.
                let ahead = super::transition::waiting_ahead(
                    &lane.waiting,
                    self.policy.batch_size,
                    self.policy.batch_bytes,
                );
                WaitingLane {
                    key: Arc::clone(key),
                    in_flight,
                    waiting: lane
                        .waiting
                        .iter()
                        .zip(ahead)
                        .map(|(w, ahead)| (w.seq, in_flight + ahead))
                        .collect(),
                }
            })
            .collect();
        lanes.sort_unstable_by_key(|lane| lane.waiting[0].0);
        lanes
    }

    /// The jobs of run `seq` (by its first job) while it is in flight, in lane order: a
    /// batch's members, or the one job; empty when no such run is in flight.
    pub fn members_of(&self, seq: Seq) -> Vec<Seq> {
        self.running
            .get(&seq)
            .map_or_else(Vec::new, super::state::Running::members)
    }

    /// The slot of run `seq` (by its first job) while it is in flight.
    pub fn slot_of(&self, seq: Seq) -> Option<u32> {
        self.running.get(&seq).map(|run| run.slot)
    }
}
