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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn stopped_time_counts_toward_no_timeout() {
        let mut s = Scheduler::new(Limits {
            max_concurrent: 1,
            max_queued: 10,
        });
        let _ = s.offer(
            JobRequest {
                seq: 1,
                key: Arc::from("k"),
                rank: 0,
                timeout: Some(ms(100)),
                weight: 0,
            },
            false,
            ms(0),
        );
        let _ = s.take(ms(0)).unwrap();
        s.spawned(1, ms(0));
        // Stopped from 50 to 1050: the timeout is at 1100 now.
        s.resumed(ms(1000));
        assert_eq!(s.next_deadline(), Some(ms(1100)));
        assert!(s.expire_turns(ms(1099)).is_empty());
        assert_eq!(s.expire_turns(ms(1100)).len(), 1);
    }

    #[test]
    fn retry_delays_and_spawn_pauses_stand_still_too() {
        let mut s = Scheduler::with_policy(
            Limits {
                max_concurrent: 2,
                max_queued: 10,
            },
            Policy {
                retries: 1,
                retry_delay: ms(100),
                ..Policy::default()
            },
        );
        for (seq, key) in [(1, "a"), (2, "b")] {
            let _ = s.offer(
                JobRequest {
                    seq,
                    key: Arc::from(key),
                    rank: 0,
                    timeout: None,
                    weight: 0,
                },
                false,
                ms(0),
            );
        }
        let _ = s.take(ms(0)).unwrap();
        s.spawned(1, ms(0));
        let facts = RunFacts {
            exit: Some(ExitFacts::Exited(1)),
            stopped_while_running: false,
            ended_at: ms(10),
        };
        assert!(s.finish(1, facts, ms(10)).unwrap().retry);
        let _ = s.take(ms(10)).unwrap();
        let _ = s.spawn_failed(2, SpawnFailure::Shortage { descriptors: false }, ms(20));
        s.resumed(ms(500));
        assert_eq!(
            s.next_deadline(),
            Some(ms(525)),
            "the spawn pause, 5 ms after 20"
        );
        assert_eq!(s.take(ms(524)), None);
        assert_eq!(s.take(ms(525)).unwrap().seq, 2);
        assert!(s.expire_turns(ms(609)).is_empty());
        let _ = s.expire_turns(ms(610));
        assert_eq!(
            s.take(ms(610)).unwrap().seq,
            1,
            "the retry, 100 ms after 10, + 500"
        );
    }
}
