//! Job control: while `lanes` and its jobs are stopped (Ctrl-Z, SIGTSTP), the run's deadlines
//! stand still, so that stopped time counts toward no turn timeout, retry delay or spawn pause.

use std::time::Duration;

use super::state::{Scheduler, Tick};

impl Scheduler {
    /// The run was stopped for `stopped` and goes on now: every deadline moves that much later
    /// (turn timeouts, retry delays, the pause after a spawn shortage).
    pub fn resumed(&mut self, stopped: Duration) {
        if stopped.is_zero() {
            return;
        }
        let later = |at: Tick| at.saturating_add(stopped);
        self.deadlines = std::mem::take(&mut self.deadlines)
            .into_iter()
            .map(|(at, seq)| (later(at), seq))
            .collect();
        for run in self.running.values_mut() {
            run.deadline = run.deadline.map(later);
        }
        self.held = std::mem::take(&mut self.held)
            .into_iter()
            .map(|(at, key)| (later(at), key))
            .collect();
        for lane in self.lanes.values_mut() {
            lane.held_until = lane.held_until.map(later);
        }
        self.spawn_hold = self.spawn_hold.map(later);
    }
}
