//! From a job taken to a process running: the start confirmed, a spawn shortage deferred with
//! back-off, a spawn that cannot succeed failed, and the gate finished jobs' unwritten output
//! puts on new starts.

use std::sync::Arc;

use super::finish::{Finished, RunFacts};
use super::state::{Scheduler, Seq, Tick, BACKOFF_FIRST, BACKOFF_MAX};
use super::wait::{Touched, WaitCause};

/// Why a taken job's process could not be started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnFailure {
    /// Out of processes or descriptors for now (EAGAIN, EMFILE, ENFILE). `descriptors` is
    /// true for EMFILE: only jobs of this run can free descriptors of this process.
    Shortage {
        /// EMFILE: out of this process's descriptors.
        descriptors: bool,
    },
    /// It cannot start (a missing working directory, no shell, an exec error).
    Failed,
}

/// The core's answer to a failed spawn.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpawnVerdict {
    /// The run goes back to the front of its lane and its key to the front of the ready
    /// line; nothing starts before `until` (or before a running job ends and frees
    /// resources), so that a shortage does not pile up taken-but-unstarted jobs.
    Deferred {
        /// Nothing starts before this time.
        until: Tick,
        /// Out of descriptors with no other run in flight: its next try either starts it or
        /// ends it (the rule of [`Scheduler::spawn_failed`]), whatever else happens meanwhile.
        last_try_next: bool,
    },
    /// The run ends `failed`/`spawn_error` (or is retried, `--retries`): out of descriptors
    /// twice in a row with no other job of this run in flight, nothing would ever free one.
    Ended(Finished),
}

impl Scheduler {
    /// The shell started the process of the run known by `seq` at `now`: its turn deadline
    /// counts from here, and the spawn back-off starts afresh.
    pub fn spawned(&mut self, seq: Seq, now: Tick) {
        self.spawn_backoff = BACKOFF_FIRST;
        self.lone_descriptor_shortages = 0;
        self.spawn_probing = false;
        self.started(seq, now);
    }

    /// The process of the run known by `seq` could not be started at `now`.
    ///
    /// A shortage is deferred, with back-off, and starts are then taken one at a time until
    /// one succeeds (so that runs tried again together do not all run short together again),
    /// except that of descriptors (EMFILE: only jobs of
    /// this run hold this process's descriptors) met with no other run in flight for the
    /// second time in a row (no spawn succeeded between): then nothing will free one, and the
    /// run ends. Once is not enough: runs whose spawns were in flight together may all have
    /// failed at once, the last of them alone, and the descriptors the others gave back when
    /// they failed let it start when tried again.
    pub fn spawn_failed(&mut self, seq: Seq, failure: SpawnFailure, now: Tick) -> SpawnVerdict {
        let others_running = self.running.len() > 1;
        let defer = match failure {
            SpawnFailure::Shortage { descriptors: false } => true,
            SpawnFailure::Shortage { descriptors: true } if others_running => true,
            SpawnFailure::Shortage { descriptors: true } => {
                self.lone_descriptor_shortages += 1;
                self.lone_descriptor_shortages < 2
            }
            SpawnFailure::Failed => false,
        };
        let last_try_next =
            matches!(failure, SpawnFailure::Shortage { descriptors: true }) && !others_running;
        if defer && self.defer(seq, now) {
            let until = now.saturating_add(self.spawn_backoff);
            self.spawn_hold = Some(until);
            self.capacity_changed(now);
            self.spawn_probing = true;
            self.spawn_backoff = (self.spawn_backoff * 2).min(BACKOFF_MAX);
            return SpawnVerdict::Deferred {
                until,
                last_try_next,
            };
        }
        let facts = RunFacts {
            exit: None,
            stopped_while_running: false,
            ended_at: now,
        };
        match self.finish(seq, facts, now) {
            Some(finished) => SpawnVerdict::Ended(finished),
            None => SpawnVerdict::Deferred {
                until: now,
                last_try_next: false,
            },
        }
    }

    /// Puts a taken run back at the front of its lane, its key first in the ready line, as
    /// if never taken: its tries and its admission time are kept, its slot is freed.
    fn defer(&mut self, seq: Seq, now: Tick) -> bool {
        self.clock = self.clock.max(now);
        let Some((run, _)) = self.vacate(seq) else {
            return false;
        };
        let lane = self
            .lanes
            .get_mut(&run.key)
            .expect("a running job's key has a lane");
        self.queued += run.batch.len();
        self.queued_weight += run
            .batch
            .iter()
            .map(|w| super::resources::weight_of(w.needs.as_deref()))
            .sum::<usize>();
        for mut job in run.batch.into_iter().rev() {
            // From its take on it waited for the run's capacity (a spawn shortage).
            let seq = job.seq;
            job.wait.set_told(
                seq,
                &run.key,
                (WaitCause::Cap, run.started_at, None),
                &mut self.wait_changes,
            );
            lane.waiting.push_front(job);
        }
        // A busy key is never in the ready line: it goes first, as it was taken first.
        self.ready.push_front(Arc::clone(&run.key));
        self.refresh_waits(&run.key, Touched::Front, now);
        true
    }

    /// The shell reports how many finished jobs' grouped output blocks wait for the reader.
    /// While as many wait as jobs may run, nothing starts ([`Scheduler::take`]).
    pub fn set_output_backlog(&mut self, blocks: usize) {
        if blocks != self.output_backlog {
            self.capacity_changed(self.clock);
        }
        self.output_backlog = blocks;
    }

    /// Whether new starts wait for grouped output to be written.
    pub fn output_backlogged(&self) -> bool {
        self.output_backlog >= self.limits.max_concurrent
    }

    /// Whether jobs start between the admissions of a burst of input lines, so that a key's
    /// first job runs at once rather than being coalesced away by a line read in the same
    /// burst. Not when batching: a batch wants the whole burst.
    pub fn starts_between_admissions(&self) -> bool {
        !self.policy.batching()
    }
}
