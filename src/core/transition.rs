//! The scheduler's decisions: admit, take, release, drain, expire and the next deadline.
//! Each is a plain function of (state, input, now) whose result must be applied by the caller.

use std::cmp::Reverse;
use std::sync::Arc;
use std::time::Duration;

use super::state::{JobRequest, Lane, Running, Scheduler, Seq, Tick, Waiting};

/// The answer to [`Scheduler::admit`].
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Queued in its lane; `ahead` jobs of the same key (waiting or in flight) come before it.
    Queued { ahead: usize },
    /// `max_queued` jobs already wait; the job was not admitted.
    Full,
    /// The scheduler is draining; the job was not admitted.
    Closed,
}

/// A job the shell must start now.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    pub seq: Seq,
    pub key: Arc<str>,
    /// 1..=max_concurrent: the smallest slot free when the job starts.
    pub slot: u32,
    /// How long the job waited between admission and start.
    pub waited: Duration,
}

/// The answer to [`Scheduler::release`].
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    /// The job was in flight; its slot and key are free again.
    Done { key: Arc<str>, slot: u32 },
    /// No such job was in flight (already released, or never started).
    Unknown,
}

/// A waiting job removed by [`Scheduler::drain`]; it never started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drained {
    pub seq: Seq,
    pub key: Arc<str>,
    pub waited: Duration,
}

/// A running job whose turn timeout has passed; reported once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    pub seq: Seq,
}

impl Scheduler {
    /// Admits a job into its lane at time `now`: after every waiting job of lower or equal rank
    /// (ties keep input order). A key that was idle with nothing waiting joins the back of the
    /// ready line.
    pub fn admit(&mut self, job: JobRequest, now: Tick) -> Admission {
        if self.draining {
            return Admission::Closed;
        }
        if self.queued >= self.limits.max_queued {
            return Admission::Full;
        }
        let lane = self.lanes.entry(Arc::clone(&job.key)).or_default();
        let was_waiting = !lane.waiting.is_empty();
        let position = lane
            .waiting
            .iter()
            .rposition(|w| w.rank <= job.rank)
            .map_or(0, |i| i + 1);
        lane.waiting.insert(
            position,
            Waiting {
                seq: job.seq,
                rank: job.rank,
                timeout: job.timeout,
                queued_at: now,
            },
        );
        let ahead = position + usize::from(lane.busy);
        if !lane.busy && !was_waiting {
            self.ready.push_back(job.key);
        }
        self.queued += 1;
        Admission::Queued { ahead }
    }

    /// Takes the next job to start at `now`, if a slot is free: the first waiting job of the key
    /// at the front of the ready line. `None` when the cap is reached, nothing is ready, or the
    /// scheduler is draining.
    pub fn take(&mut self, now: Tick) -> Option<Start> {
        if self.draining || self.running.len() >= self.limits.max_concurrent {
            return None;
        }
        let key = self.ready.pop_front()?;
        let Some(Reverse(slot)) = self.free_slots.pop() else {
            self.ready.push_front(key);
            return None;
        };
        let lane = self
            .lanes
            .get_mut(&key)
            .expect("a key in the ready line has a lane");
        let job = lane
            .waiting
            .pop_front()
            .expect("a key in the ready line has a waiting job");
        lane.busy = true;
        self.queued -= 1;
        let deadline = job.timeout.map(|t| now.saturating_add(t));
        if let Some(at) = deadline {
            self.deadlines.insert((at, job.seq));
        }
        self.running.insert(
            job.seq,
            Running {
                key: Arc::clone(&key),
                slot,
                deadline,
            },
        );
        Some(Start {
            seq: job.seq,
            key,
            slot,
            waited: now.saturating_sub(job.queued_at),
        })
    }

    /// Releases a job that was in flight: frees its slot; its key goes to the back of the ready
    /// line when more of its jobs wait, and its lane is removed when none do.
    pub fn release(&mut self, seq: Seq) -> Released {
        let Some(run) = self.running.remove(&seq) else {
            return Released::Unknown;
        };
        if let Some(at) = run.deadline {
            self.deadlines.remove(&(at, seq));
        }
        self.free_slots.push(Reverse(run.slot));
        let lane: &mut Lane = self
            .lanes
            .get_mut(&run.key)
            .expect("a running job's key has a lane");
        lane.busy = false;
        if lane.waiting.is_empty() {
            self.lanes.remove(&run.key);
        } else if !self.draining {
            self.ready.push_back(Arc::clone(&run.key));
        }
        Released::Done {
            key: run.key,
            slot: run.slot,
        }
    }

    /// Stops admitting and starting, and removes every waiting job, in input order. Running
    /// jobs stay until released.
    pub fn drain(&mut self, now: Tick) -> Vec<Drained> {
        self.draining = true;
        self.ready.clear();
        let mut drained = Vec::with_capacity(self.queued);
        self.lanes.retain(|key, lane| {
            drained.extend(lane.waiting.drain(..).map(|w| Drained {
                seq: w.seq,
                key: Arc::clone(key),
                waited: now.saturating_sub(w.queued_at),
            }));
            lane.busy
        });
        self.queued = 0;
        drained.sort_by_key(|d| d.seq);
        drained
    }

    /// Running jobs whose turn deadline is at or before `now`, soonest first. Each is reported
    /// once: its deadline is cleared.
    pub fn expire(&mut self, now: Tick) -> Vec<Expired> {
        let mut expired = Vec::new();
        while let Some(&(at, seq)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            if let Some(run) = self.running.get_mut(&seq) {
                run.deadline = None;
            }
            expired.push(Expired { seq });
        }
        expired
    }

    /// The next time the core needs to be woken (`expire`), if any.
    pub fn next_deadline(&self) -> Option<Tick> {
        self.deadlines.first().map(|&(at, _)| at)
    }
}
