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
    /// How many jobs it runs (a batch), 1 without batching.
    pub jobs: usize,
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
                jobs: run.batch.len().max(1),
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
    /// Whether a job of the key is in flight (it is ahead of every waiting one).
    pub busy: bool,
    /// Its waiting jobs in the order they will run: the i-th has `i + busy` jobs ahead.
    pub waiting: Vec<Seq>,
}

impl Scheduler {
    /// Every key with jobs waiting, by its first waiting job's seq.
    pub fn waiting_lanes(&self) -> Vec<WaitingLane> {
        let mut lanes: Vec<WaitingLane> = self
            .lanes
            .iter()
            .filter(|(_, lane)| !lane.waiting.is_empty())
            .map(|(key, lane)| WaitingLane {
                key: Arc::clone(key),
                busy: lane.busy,
                waiting: lane.waiting.iter().map(|w| w.seq).collect(),
            })
            .collect();
        lanes.sort_unstable_by_key(|lane| lane.waiting[0]);
        lanes
    }

    /// The slot of run `seq` (by its first job) while it is in flight.
    pub fn slot_of(&self, seq: Seq) -> Option<u32> {
        self.running.get(&seq).map(|run| run.slot)
    }
}
