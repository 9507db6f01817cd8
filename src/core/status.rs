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
