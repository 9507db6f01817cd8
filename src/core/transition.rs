//! The scheduler's decisions: admit (with coalescing and cancel-in-progress), take, release
//! (with retries), drain, expire and the next deadline. Each is a plain function of
//! (state, input, now) whose result must be applied by the caller.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use super::outcome::{ExitFacts, FailReason, Outcome};
use super::resources::{reserves, short_of, weight_of, Grant, Needs, Short, Shortage, ONE};
use super::state::{JobRequest, Lane, Running, Scheduler, Seq, Tick, Try, Waiting};
use super::wait::{Touched, WaitLog, WaitSpan};

/// The answer to [`Scheduler::admit`].
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Queued in its lane; `ahead` jobs of the same key (waiting or in flight) come before it.
    Queued {
        /// Jobs of its key before it.
        ahead: usize,
    },
    /// Queued under `--coalesce latest`/`--cancel-in-progress`: `replaced` is the waiting job
    /// it took the place of (record it `interrupted`/`superseded`, never started), `cancel`
    /// the running job of its key to stop (reason `superseded`); both superseded by this job.
    Superseding {
        /// Jobs of its key before it.
        ahead: usize,
        /// The waiting job it replaced.
        replaced: Option<Seq>,
        /// The running job of its key to stop.
        cancel: Option<Seq>,
        /// `--cancel-in-progress`: the job of its key that was waiting out its retry delay
        /// (a retried batch: each of its jobs), superseded with the tries it made: their
        /// final accounts.
        retries: Vec<super::account::Account>,
    },
    /// `max_queued` jobs already wait; the job was not admitted.
    Full,
    /// The scheduler is draining; the job was not admitted.
    Closed,
}

/// A job the shell must start now.
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// The run's first job, by which it is known.
    pub seq: Seq,
    /// Its lane.
    pub key: Arc<str>,
    /// 1..=max_concurrent: the smallest slot free when the job starts, or the key's own slot
    /// under `--sticky-slots`.
    pub slot: u32,
    /// How long the job waited between admission (or its retry) and start.
    pub waited: Duration,
    /// Which try this is: 1 for the first.
    pub attempt: u32,
    /// Every job of this run in lane order, `seq` first; just `[seq]` when not batching.
    pub batch: Vec<Seq>,
    /// The weight and named units it holds until released; `None` for weight 1 and no
    /// resource.
    pub grant: Option<Arc<Grant>>,
}

/// The answer to [`Scheduler::release`] and [`Scheduler::release_failed`].
#[must_use]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    /// The job was in flight; its slot and key are free again.
    Done {
        /// Its lane.
        key: Arc<str>,
        /// The slot it freed.
        slot: u32,
    },
    /// The job failed and goes again, first in its lane (`--retries`); no record yet.
    Retry {
        /// Its lane.
        key: Arc<str>,
        /// The slot it freed.
        slot: u32,
        /// The try that comes next.
        attempt: u32,
    },
    /// No such job was in flight (already released, or never started).
    Unknown,
}

/// A waiting job removed by [`Scheduler::drain`]; it never started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drained {
    /// The job.
    pub seq: Seq,
    /// Its lane.
    pub key: Arc<str>,
    /// From its admission (or re-queueing for a retry) to the drain.
    pub waited: Duration,
    /// Tries already made (a retry waiting for its turn has made some).
    pub attempts: u32,
    /// The tries it made, oldest first (a retry waiting for its turn has made some).
    pub tries: Vec<Try>,
    /// The spans of the wait its record tells of: this wait, or for a retry whose last try
    /// started, the wait before that try.
    pub waits: Vec<WaitSpan>,
    /// With batching, a retry's: the first job of the batch its tries ran in.
    pub batch: Option<Seq>,
}

/// How many jobs from the front of a lane make one batch: at most `size` jobs and `bytes`
/// weight, all with as many tries behind them as the first (a retried batch goes again as it
/// was, never merged with new jobs), and always at least one.
pub(crate) fn batch_len(
    waiting: &std::collections::VecDeque<Waiting>,
    size: usize,
    bytes: usize,
) -> usize {
    batch_len_from(waiting, 0, size, bytes)
}

/// [`batch_len`] of the lane's jobs from index `start` on: the batch that job would lead.
fn batch_len_from(
    waiting: &std::collections::VecDeque<Waiting>,
    start: usize,
    size: usize,
    bytes: usize,
) -> usize {
    let mut total = 0usize;
    let mut count = 0;
    let attempts = waiting.get(start).map_or(0, |w| w.attempts);
    for job in waiting.range(start.min(waiting.len())..).take(size) {
        if job.attempts != attempts {
            break;
        }
        total = total.saturating_add(job.weight);
        if count > 0 && total > bytes {
            break;
        }
        count += 1;
    }
    count.max(usize::from(start < waiting.len()))
}

/// For each of a lane's waiting jobs, in lane order, how many of the waiting jobs run before
/// it: those of the batches the lane's front makes before the job's own, as they stand (a
/// job that would share a batch with those before it waits behind none of them). Without
/// batching (`size` 1), every job before it.
pub(crate) fn waiting_ahead(
    waiting: &std::collections::VecDeque<Waiting>,
    size: usize,
    bytes: usize,
) -> Vec<usize> {
    let mut ahead = Vec::with_capacity(waiting.len());
    while ahead.len() < waiting.len() {
        let start = ahead.len();
        let count = batch_len_from(waiting, start, size, bytes);
        ahead.extend(std::iter::repeat_n(start, count));
    }
    ahead
}

/// [`waiting_ahead`] of the one waiting job at `position`, without the rest: where the batch
/// it is in starts.
fn batch_start(
    waiting: &std::collections::VecDeque<Waiting>,
    position: usize,
    size: usize,
    bytes: usize,
) -> usize {
    let mut start = 0;
    while start < waiting.len() {
        let count = batch_len_from(waiting, start, size, bytes);
        if position < start + count {
            break;
        }
        start += count;
    }
    start
}

/// A running job whose turn timeout has passed; reported once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    /// The run, by its first job.
    pub seq: Seq,
}

impl Scheduler {
    /// Admits a job into its lane at time `now`: after every waiting job of lower or equal rank
    /// (ties keep input order). A key that was idle with nothing waiting joins the back of the
    /// ready line. Under `--coalesce latest` the job replaces the lane's waiting job; under
    /// `--cancel-in-progress` it also asks for the running job to stop.
    pub fn admit(&mut self, job: JobRequest, now: Tick) -> Admission {
        self.admit_within(job, true, now)
    }

    /// [`Scheduler::admit`], with the queue's bounds (`max_queued`, `max_queued_weight`)
    /// applied only when `bounded`: a job an earlier `lanes serve` admitted (its journal says
    /// so) was promised its run, and is admitted again whatever this run's bounds; the queue
    /// may then hold more than they allow until it drains below them.
    pub(crate) fn admit_within(&mut self, job: JobRequest, bounded: bool, now: Tick) -> Admission {
        self.clock = self.clock.max(now);
        if self.draining {
            return Admission::Closed;
        }
        // A job admitted again from an earlier server's journal was promised its run: it
        // coalesces nothing away and supersedes no running job, as its first server (which
        // answered it `queued`) did not, whatever this server's policy.
        let coalesce = self.policy.coalesce_latest && bounded;
        // The lane's pending job: under coalescing at most one waiting job is fresh (a retry
        // waiting at the front, or a promised job, is never replaced).
        let pending = if coalesce {
            self.lanes.get(&job.key).and_then(|lane| {
                lane.waiting
                    .iter()
                    .position(|w| w.attempts == 0 && !w.promised)
            })
        } else {
            None
        };
        let replaceable = pending.is_some();
        self.refresh_waits(&job.key, Touched::Elapsed, now);
        let weight = weight_of(job.needs.as_deref());
        let replaced_weight = pending
            .and_then(|i| self.lanes.get(&job.key)?.waiting.get(i))
            .map_or(0, |w| weight_of(w.needs.as_deref()));
        // `--cancel-in-progress`: the key's jobs waiting out their retry delay go, superseded
        // (below), and make room as a replaced job does.
        let (retries_going, retries_weight) = if self.policy.cancel_in_progress && bounded {
            self.lanes
                .get(&job.key)
                .filter(|lane| !lane.busy)
                .map_or((0, 0), |lane| {
                    lane.waiting
                        .iter()
                        .take_while(|w| w.attempts > 0 && !w.promised)
                        .fold((0, 0), |(count, weight), w| {
                            (count + 1, weight + weight_of(w.needs.as_deref()))
                        })
                })
        } else {
            (0, 0)
        };
        let over_count = self.queued - retries_going >= self.limits.max_queued && !replaceable;
        let over_weight = (self.queued_weight - replaced_weight - retries_weight)
            .saturating_add(weight)
            > self.policy.max_queued_weight;
        // The bounds are on jobs that wait: one that the next take starts would never wait.
        if bounded && (over_count || over_weight) && !self.starts_at_once(&job, now) {
            return Admission::Full;
        }
        self.queued_weight = self.queued_weight - replaced_weight + weight;
        // A new lane's queue starts with room for one job, not the four `VecDeque` would
        // reserve on its first push: with distinct keys, most lanes never hold more.
        let lane = self.lanes.entry(Arc::clone(&job.key)).or_insert_with(|| {
            Box::new(Lane {
                waiting: VecDeque::with_capacity(1),
                ..Lane::default()
            })
        });
        let was_waiting = !lane.waiting.is_empty();
        let replaced_at = pending;
        // The replaced job tells of its wait up to now, as a job stopped while waiting does.
        let mut replaced_wait = None;
        let replaced = pending.and_then(|i| lane.waiting.remove(i)).map(|mut w| {
            let waits = if w.tries.last().is_some_and(Try::started) {
                w.wait.take_before_retry()
            } else {
                w.wait.close_told(now, &mut self.wait_changes)
            };
            replaced_wait = Some((now.saturating_sub(w.queued_at), waits));
            w.seq
        });
        // `--cancel-in-progress`: a job of the key waiting out its retry delay is in progress
        // as much as a running one; the newer job supersedes it, and it keeps its tries.
        // They are the `retries_going` first of its lane (counted above): the job `pending`
        // replaced came after them.
        let mut retries_superseded = Vec::new();
        let mut rejoin = false;
        if retries_going > 0 {
            if let Some(until) = lane.held_until.take() {
                // Held out of the ready line until its delay ends: the newer job joins it.
                self.held
                    .retain(|(at, held)| !(*at == until && *held == job.key));
                rejoin = true;
            }
            for mut waiting in lane.waiting.drain(..retries_going) {
                self.queued -= 1;
                self.queued_weight -= weight_of(waiting.needs.as_deref());
                // It tells of its wait up to the try it made (as a cancelled one does).
                let waits = if waiting.tries.last().is_some_and(Try::started) {
                    waiting.wait.take_before_retry()
                } else {
                    waiting.wait.close_told(now, &mut self.wait_changes)
                };
                retries_superseded.push(super::account::Account {
                    seq: waiting.seq,
                    outcome: Outcome::Interrupted(super::outcome::StopReason::Superseded),
                    attempts: waiting.attempts,
                    waited: Some(now.saturating_sub(waiting.queued_at)),
                    waits,
                    tries: waiting.tries,
                    superseded_by: Some(job.seq),
                    batch: waiting.batch,
                    ended_at: now,
                    in_flight: false,
                    grant: None,
                });
            }
        }
        let replaced_at = replaced_at.map(|i| i - retries_going);
        // Retries wait at the front of their lane whatever the ranks of later jobs.
        let retries = lane.waiting.iter().take_while(|w| w.attempts > 0).count();
        let position = lane
            .waiting
            .iter()
            .rposition(|w| w.rank <= job.rank)
            .map_or(0, |i| i + 1)
            .max(retries);
        lane.waiting.insert(
            position,
            Waiting {
                seq: job.seq,
                rank: job.rank,
                timeout: job.timeout,
                queued_at: now,
                attempts: 0,
                promised: !bounded,
                weight: job.weight,
                needs: job.needs,
                tries: Vec::new(),
                wait: WaitLog::new(now),
                batch: None,
            },
        );
        // A running batch is as many jobs ahead as it has members; under batching, the jobs
        // the new one would be taken with are not ahead of it.
        let before = if self.policy.batching() {
            batch_start(
                &lane.waiting,
                position,
                self.policy.batch_size,
                self.policy.batch_bytes,
            )
        } else {
            position
        };
        let ahead = before + lane.in_flight(&self.running);
        // A running job admitted again from a journal is as promised as a waiting one: no
        // newer job supersedes it.
        let cancel = if self.policy.cancel_in_progress && bounded && lane.busy && !lane.cancelling {
            let superseded = self
                .running
                .iter_mut()
                .find(|(_, run)| run.key == job.key)
                .filter(|(_, run)| !run.batch.iter().any(|w| w.promised))
                .map(|(&seq, run)| {
                    run.superseded_by = Some(job.seq);
                    seq
                });
            lane.cancelling = superseded.is_some();
            superseded
        } else {
            None
        };
        let key = Arc::clone(&job.key);
        if !lane.busy && (!was_waiting || rejoin) {
            self.ready.push_back(job.key);
        }
        if replaced.is_none() {
            self.queued += 1;
        }
        if let Some(i) = replaced_at.filter(|&i| i != position) {
            self.refresh_waits(&key, Touched::At(i), now);
        }
        self.refresh_waits(&key, Touched::At(position), now);
        self.replaced_wait = replaced_wait;
        if coalesce {
            Admission::Superseding {
                ahead,
                replaced,
                cancel,
                retries: retries_superseded,
            }
        } else {
            Admission::Queued { ahead }
        }
    }

    /// Takes the next job to start at `now`, if a slot is free: the first key in the ready line
    /// that can run now (under `--sticky-slots`, whose slot is free; when batching, whose batch
    /// is full or whose oldest job has waited `--batch-delay`; whose first job's weight and
    /// named resources fit, after what is set aside for an earlier key that does not fit:
    /// [`Scheduler::short_of`]), with its first waiting job, or the longest prefix of its lane
    /// that fits the batch bounds. The run holds its weight and resources ([`Start::grant`])
    /// until it is released. `None` when the cap is reached, nothing is ready or fits, or the
    /// scheduler is draining.
    pub fn take(&mut self, now: Tick) -> Option<Start> {
        let start = self.take_next(now);
        if start.is_none() {
            // Nothing more starts: what the ready keys are short of may have changed.
            self.refresh_ready_waits(now);
        }
        start
    }

    fn take_next(&mut self, now: Tick) -> Option<Start> {
        self.clock = self.clock.max(now);
        if !self.may_take(now) {
            return None;
        }
        if let Some(until) = self.spawn_hold.take() {
            // Its time has come ([`Scheduler::may_take`]).
            self.capacity_changed(until);
        }
        let (index, slot) = self.next_to_take(now)?;
        let key = self.ready.remove(index)?;
        self.refresh_waits(&key, Touched::Front, now);
        self.take_slot(slot);
        self.host_taken(&key);
        if self.policy.sticky_slots {
            self.bound_slots.entry(Arc::clone(&key)).or_insert(slot);
        }
        let lane = self
            .lanes
            .get_mut(&key)
            .expect("a key in the ready line has a lane");
        let count = batch_len(
            &lane.waiting,
            self.policy.batch_size,
            self.policy.batch_bytes,
        );
        let mut batch: Vec<Waiting> = lane.waiting.drain(..count).collect();
        lane.busy = true;
        lane.running_seq = Some(batch[0].seq);
        lane.cancelling = false;
        self.queued -= batch.len();
        self.queued_weight -= batch
            .iter()
            .map(|w| weight_of(w.needs.as_deref()))
            .sum::<usize>();
        let first = &batch[0];
        let (seq, attempts) = (first.seq, first.attempts + 1);
        let waited = now.saturating_sub(first.queued_at);
        // A batch runs on its first job's needs.
        let grant = first.needs.as_deref().map(|needs| {
            Arc::new(match self.pool.as_mut() {
                Some(pool) => pool.grant(&key, needs, self.policy.sticky_slots),
                None => Grant {
                    weight: needs.weight,
                    catalog: None,
                    held: Vec::new(),
                },
            })
        });
        self.used_weight += grant.as_ref().map_or(1, |g| g.weight as usize);
        // Its turn deadline counts from its process's start ([`Scheduler::started`]), not from
        // now: a spawn may take a while (a busy machine, a long round of starts), and a stop
        // ordered before it would stop the job as it starts.
        for member in &mut batch {
            member.wait.end_told(now, &mut self.wait_changes);
        }
        let seqs: Vec<Seq> = batch.iter().map(|w| w.seq).collect();
        self.running.insert(
            seq,
            Running {
                key: Arc::clone(&key),
                slot,
                deadline: None,
                batch,
                attempts,
                waited,
                started_at: now,
                spawned: false,
                stop: None,
                superseded_by: None,
                grant: grant.clone(),
            },
        );
        self.refresh_waits(&key, Touched::Front, now);
        Some(Start {
            seq,
            key,
            slot,
            waited,
            attempt: attempts,
            batch: seqs,
            grant,
        })
    }

    /// Whether the run may start a job at `now` at all, whatever the ready keys: not
    /// draining, room in the cap, grouped output not backlogged, some key held host-wide
    /// (`--lock-dir`), no spawn shortage's hold still on, no start still being probed.
    pub(crate) fn may_take(&self, now: Tick) -> bool {
        !self.draining
            && self.used_weight < self.limits.max_concurrent
            // As many finished jobs' output blocks wait for a reader as jobs may run: a
            // stalled reader stalls the run (backpressure) instead of piling up blocks.
            && self.output_backlog < self.limits.max_concurrent
            && self.host_may_take()
            && self.spawn_hold.is_none_or(|until| until <= now)
            && !(self.spawn_probing && self.running.values().any(|run| !run.spawned))
    }

    /// Whether `job`, admitted at `now`, would be the next job [`Scheduler::take`] starts:
    /// its key idle with nothing waiting, no ready key taken before it, a slot free and its
    /// needs fitting (after what is set aside for an earlier key), its key held host-wide
    /// where keys are shared (`--lock-dir`: a new key's lock is yet to be taken, so never).
    /// Never when batching (a batch waits for the jobs admitted after its first), nor under
    /// `--retries`.
    fn starts_at_once(&self, job: &JobRequest, now: Tick) -> bool {
        // Under `--retries` a job that starts may come back to wait for its retry: admitted past
        // the bound, failing jobs would pile up without one.
        if self.policy.batching() || self.policy.retries > 0 || !self.may_take(now) {
            return false;
        }
        if self
            .lanes
            .get(&job.key)
            .is_some_and(|lane| lane.busy || !lane.waiting.is_empty() || lane.held_until.is_some())
        {
            return false;
        }
        let needs = job.needs.as_deref().unwrap_or(&ONE);
        let behind = self.ready.len();
        self.walk_ready_then(
            now,
            usize::MAX,
            Some((&job.key, needs)),
            |index, _, candidate| {
                let fits = candidate.is_some_and(|(slot, short)| slot.is_some() && short.is_none());
                // A ready key that fits is taken before it.
                (index == behind || fits).then_some(index == behind && fits)
            },
        ) == Some(true)
    }

    /// The ready key to take at `now` and its slot: the first in the ready line whose lock
    /// is held (`--lock-dir`), whose slot is free (`--sticky-slots`), whose batch may go, and
    /// whose first job fits: its weight in the free part of the cap, each resource it needs
    /// in what is free. The first key that does not fit only for want of the cap or of a
    /// resource, once it has waited `--reserve-after`, has its needs set aside: the keys
    /// after it start only in what is free beyond them ([`reserves`]).
    fn next_to_take(&self, now: Tick) -> Option<(usize, u32)> {
        self.walk_ready(now, usize::MAX, |index, _, candidate| match candidate {
            // Each running job holds at least 1 of the cap: with room in it, a slot is free.
            Some((slot, None)) => Some((index, slot.expect("a free slot within the cap"))),
            _ => None,
        })
    }

    /// Walks the first `limit` keys of the ready line at `now` as the cap and the named
    /// resources see them, until `visit` returns a value. `visit` is given each key's index,
    /// the key, and, when it may start but for its needs ([`Scheduler::candidate`]), its slot
    /// and what it is short of (`None`: it fits), measured against what is free beyond the
    /// needs set aside for the first earlier key that has waited long enough ([`reserves`]).
    fn walk_ready<T>(
        &self,
        now: Tick,
        limit: usize,
        visit: impl FnMut(usize, &Arc<str>, Option<(Option<u32>, Option<Short>)>) -> Option<T>,
    ) -> Option<T> {
        self.walk_ready_then(now, limit, None, visit)
    }

    /// [`Scheduler::walk_ready`], then, past the first `limit` ready keys, `newcomer`: a key
    /// not in the line whose first job would have these needs, as if it had joined the
    /// line's back (its index is the line's length).
    fn walk_ready_then<T>(
        &self,
        now: Tick,
        limit: usize,
        newcomer: Option<(&Arc<str>, &Needs)>,
        mut visit: impl FnMut(usize, &Arc<str>, Option<(Option<u32>, Option<Short>)>) -> Option<T>,
    ) -> Option<T> {
        let free_weight = self.limits.max_concurrent.saturating_sub(self.used_weight);
        let free: &[u64] = self.pool.as_ref().map_or(&[], |p| &p.free);
        let mut reserved: Option<&Needs> = None;
        for (index, key) in self.ready.iter().enumerate().take(limit) {
            let Some((slot, first)) = self.candidate(key, now) else {
                if let Some(found) = visit(index, key, None) {
                    return Some(found);
                }
                continue;
            };
            let needs = first.needs.as_deref().unwrap_or(&ONE);
            let short = short_of(needs, free_weight, free, reserved);
            let is_short = short.is_some();
            if let Some(found) = visit(index, key, Some((slot, short))) {
                return Some(found);
            }
            if is_short
                && reserved.is_none()
                && reserves(
                    now.saturating_sub(first.queued_at),
                    self.policy.reserve_after,
                )
            {
                reserved = Some(needs);
            }
        }
        let (key, needs) = newcomer?;
        let candidate = self.host_allows(key).then(|| self.slot_for(key)).flatten();
        let candidate = candidate.map(|slot| (slot, short_of(needs, free_weight, free, reserved)));
        visit(self.ready.len(), key, candidate)
    }

    /// A ready key that may start at `now` but for its needs: its lock is held
    /// (`--lock-dir`), its slot is free (`--sticky-slots`), its batch may go. Its slot and its
    /// first waiting job. Its slot is `None` when every slot is taken: the cap is full, so
    /// it does not fit.
    pub(super) fn candidate(&self, key: &str, now: Tick) -> Option<(Option<u32>, &Waiting)> {
        if !self.host_allows(key) {
            return None;
        }
        let slot = self.slot_for(key)?;
        let lane = self.lanes.get(key)?;
        if self
            .batch_ready_at(&lane.waiting)
            .is_some_and(|at| at > now)
        {
            return None;
        }
        Some((slot, lane.waiting.front()?))
    }

    /// The slot a job of `key` would start in: its own under `--sticky-slots` once it has
    /// one, else the smallest free one. `None` when its own slot is taken; `Some(None)` when
    /// every slot is (the cap is full).
    fn slot_for(&self, key: &str) -> Option<Option<u32>> {
        match self.bound_slots.get(key) {
            Some(&slot) => Some(Some(self.slot_is_free(slot).then_some(slot)?)),
            None => Some(self.smallest_free_slot()),
        }
    }

    /// Whether the first job of `key` may start at `now` for all the run's capacity: its key
    /// in the ready line, a slot free, and its needs fitting in what is free beyond what is
    /// set aside for an earlier key.
    pub(crate) fn fits_now(&self, key: &str, now: Tick) -> bool {
        self.walk_ready(now, usize::MAX, |_, ready, candidate| {
            (**ready == *key)
                .then(|| candidate.is_some_and(|(slot, short)| slot.is_some() && short.is_none()))
        }) == Some(true)
    }

    /// What the first job of `key` is short of at `now`, when its key is free (in the ready
    /// line) but it cannot start for want of the cap or of a named resource: measured against
    /// what is free beyond the needs set aside for an earlier key ([`reserves`]). `None` when
    /// it fits, or its key is not ready.
    pub fn short_of(&self, key: &str, now: Tick) -> Option<Shortage> {
        self.short_of_within(key, now, usize::MAX)
    }

    /// [`Scheduler::short_of`], looking at the first `limit` ready keys only: `None` when
    /// `key` is not among them.
    pub(crate) fn short_of_within(&self, key: &str, now: Tick, limit: usize) -> Option<Shortage> {
        let short = self.walk_ready(now, limit, |_, ready, candidate| {
            (**ready == *key).then(|| candidate.and_then(|(_, short)| short))
        })??;
        Some(match short {
            Short::Cap => Shortage::Cap,
            Short::Resource(index) => Shortage::Resource(Arc::clone(
                self.pool.as_ref().expect("a resource is short").name(index),
            )),
        })
    }

    /// When a lane with these waiting jobs may be taken: `None` when at once (not batching
    /// with a delay, or its batch is full), else when its oldest job will have waited
    /// `--batch-delay`.
    pub(crate) fn batch_ready_at(
        &self,
        waiting: &std::collections::VecDeque<Waiting>,
    ) -> Option<Tick> {
        let policy = &self.policy;
        self.batch_ready_after(waiting, || {
            batch_len(waiting, policy.batch_size, policy.batch_bytes)
        })
    }

    /// Whether a lane with these waiting jobs may wait for more to join its batch: not
    /// without a debounce, nor with no job that could join it (the input ended, or the
    /// queue is full: no line is read or admitted until a job starts), nor for a retry,
    /// which goes as soon as it may.
    fn batch_may_wait(&self, waiting: &std::collections::VecDeque<Waiting>) -> bool {
        !(self.policy.batch_delay.is_zero()
            || self.input_ended
            || !self.has_room()
            || waiting.front().is_some_and(|w| w.attempts > 0))
    }

    /// [`Scheduler::batch_ready_at`], the lane's next batch being its first `count()` jobs
    /// (measured only where the batch may wait).
    pub(crate) fn batch_ready_after(
        &self,
        waiting: &std::collections::VecDeque<Waiting>,
        count: impl FnOnce() -> usize,
    ) -> Option<Tick> {
        if !self.batch_may_wait(waiting) {
            return None;
        }
        let count = count();
        let policy = &self.policy;
        if count == policy.batch_size || count < waiting.len() {
            // Full by count, or by bytes: the next job would not fit.
            return None;
        }
        let (weight, oldest) =
            waiting
                .iter()
                .fold((0usize, None::<Tick>), |(weight, oldest), w| {
                    let oldest = oldest.map_or(w.queued_at, |t| t.min(w.queued_at));
                    (weight.saturating_add(w.weight), Some(oldest))
                });
        if weight >= policy.batch_bytes {
            // Full by bytes: nothing more could join it.
            return None;
        }
        Some(oldest?.saturating_add(policy.batch_delay))
    }

    /// The shell started the process of running job `seq` at `now` (after its spawn, which may
    /// have taken a while or been retried): its turn deadline counts from here.
    pub fn started(&mut self, seq: Seq, now: Tick) {
        self.clock = self.clock.max(now);
        let Some(run) = self.running.get_mut(&seq) else {
            return;
        };
        run.started_at = now;
        run.spawned = true;
        let timeout = run.batch.iter().filter_map(|w| w.timeout).min();
        if let Some(old) = run.deadline.take() {
            self.deadlines.remove(&(old, seq));
        }
        run.deadline = timeout.map(|t| now.saturating_add(t));
        if let Some(at) = run.deadline {
            self.deadlines.insert((at, seq));
        }
    }

    /// Releases a job that was in flight and did not fail (or whose failure is final): frees
    /// its slot; its key goes to the back of the ready line when more of its jobs wait, and
    /// its lane is removed when none do.
    pub fn release(&mut self, seq: Seq) -> Released {
        self.release_at(seq, None, None)
    }

    /// Releases a job that was in flight and failed, its try having ended at `ended_at`. Under
    /// `--retries N` a job with tries left goes back to the front of its own lane, so its key's
    /// order holds; with a `--retry-delay` the lane waits that long before it can be taken
    /// again, counted from `ended_at` or the core's latest reading of the clock, whichever is
    /// later (the clock never goes back). The try is recorded as failed for `reason` at
    /// `ended_at`, its direct child having ended as `exit` (`None`: it could not be started).
    pub fn release_failed(
        &mut self,
        seq: Seq,
        ended_at: Tick,
        reason: FailReason,
        exit: Option<ExitFacts>,
    ) -> Released {
        self.release_at(seq, Some((ended_at, reason, exit)), None)
    }

    /// Whether a failed try of a run that has made `attempts` tries goes again unless the run
    /// stops: tries are left (`--retries`) and its key is not being cancelled (`cancelled`).
    pub(crate) fn tries_left(&self, attempts: u32, cancelled: bool) -> bool {
        attempts <= self.policy.retries && !cancelled
    }

    /// Releases run `seq`, failed or not; `at`, when known, is when (the clock's latest
    /// reading otherwise), for the causes of its key's waiting jobs.
    pub(crate) fn release_at(
        &mut self,
        seq: Seq,
        failed: Option<(Tick, FailReason, Option<ExitFacts>)>,
        at: Option<Tick>,
    ) -> Released {
        let failed_at = failed.map(|(ended_at, _, _)| ended_at.max(self.clock));
        if let Some(now) = failed_at {
            self.clock = now;
        }
        let Some((run, cancelled)) = self.vacate(seq) else {
            return Released::Unknown;
        };
        let retry_at =
            failed_at.filter(|_| self.tries_left(run.attempts, cancelled) && !self.draining);
        let lane = self
            .lanes
            .get_mut(&run.key)
            .expect("a running job's key has a lane");
        if let (Some(now), Some((ended_at, reason, exit))) = (retry_at, failed) {
            self.queued += run.batch.len();
            self.queued_weight += run
                .batch
                .iter()
                .map(|w| weight_of(w.needs.as_deref()))
                .sum::<usize>();
            let tried = Try {
                slot: run.slot,
                waited: run.waited,
                started_at: run.started_at,
                ended_at,
                outcome: Outcome::Failed(reason),
                exit,
            };
            // Each member tells of its own wait before the try.
            let waits: Vec<(Duration, Vec<super::wait::WaitSpan>)> =
                (0..run.batch.len()).map(|i| run.member_wait(i)).collect();
            let batch = self.policy.batching().then_some(seq);
            for (mut job, (waited, before)) in run.batch.into_iter().zip(waits).rev() {
                job.batch = batch;
                job.queued_at = now;
                job.attempts = run.attempts;
                job.tries.push(Try { waited, ..tried });
                job.wait.retry(before, now);
                lane.waiting.push_front(job);
            }
            let delay = self.policy.retry_delay;
            if delay.is_zero() {
                self.ready.push_back(Arc::clone(&run.key));
            } else {
                let until = now.saturating_add(delay);
                lane.held_until = Some(until);
                self.held.insert((until, Arc::clone(&run.key)));
            }
            self.refresh_waits(&run.key, Touched::Front, now);
            return Released::Retry {
                key: run.key,
                slot: run.slot,
                attempt: run.attempts + 1,
            };
        }
        if lane.waiting.is_empty() {
            self.lanes.remove(&run.key);
        } else if !self.draining {
            self.ready.push_back(Arc::clone(&run.key));
            let now = at.unwrap_or(self.clock).max(self.clock);
            self.refresh_waits(&run.key, Touched::Front, now);
        }
        Released::Done {
            key: run.key,
            slot: run.slot,
        }
    }

    /// Lanes whose retry delay is over at `now` rejoin the ready line, in the order their
    /// delays ran out. Each one's wait is decided again with its key in the line and its
    /// delay's end still known, so that the delay ends when it did and what held the job from
    /// then (the cap, a named resource) is found as the line is now.
    pub(crate) fn rejoin_held(&mut self, now: Tick) {
        while let Some((until, _)) = self.held.first() {
            if *until > now {
                break;
            }
            let (_, key) = self.held.pop_first().expect("just seen");
            if !self.lanes.contains_key(&key) {
                continue;
            }
            self.ready.push_back(Arc::clone(&key));
            self.refresh_waits(&key, Touched::Front, now);
            if let Some(lane) = self.lanes.get_mut(&key) {
                lane.held_until = None;
            }
            self.refresh_waits(&key, Touched::Front, now);
        }
    }

    /// `--batch-delay`: the ready keys whose partial batch has waited out its delay by `now`
    /// while still told `batch_delay` have their waits decided again, so that what holds them
    /// from then (the cap) is told when the core is woken for it ([`Scheduler::next_deadline`]),
    /// not at the batch's start.
    fn end_batch_delays(&mut self, now: Tick) {
        if self.policy.batch_delay.is_zero() || self.wait_changes.is_none() {
            return;
        }
        let due: Vec<Arc<str>> = self
            .ready
            .iter()
            .filter(|key| {
                self.lanes.get(*key).is_some_and(|lane| {
                    lane.waiting
                        .front()
                        .is_some_and(|w| w.wait.cause() == Some(&super::WaitCause::BatchDelay))
                        && self
                            .batch_ready_at(&lane.waiting)
                            .is_none_or(|at| at <= now)
                })
            })
            .cloned()
            .collect();
        for key in due {
            self.refresh_waits(&key, Touched::Front, now);
        }
    }

    /// Takes run `seq` out of flight: its turn deadline and slot go, its lane is idle again.
    /// Returns the run and whether a newer job of its key had asked it to stop
    /// (`--cancel-in-progress`).
    pub(crate) fn vacate(&mut self, seq: Seq) -> Option<(Running, bool)> {
        let run = self.running.remove(&seq)?;
        if let Some(at) = run.deadline {
            self.deadlines.remove(&(at, seq));
        }
        if self.used_weight >= self.limits.max_concurrent {
            self.cap_full_until = self.cap_full_until.max(self.clock);
        }
        if self.policy.sticky_slots || self.weighs() {
            // Its key's slot is free again: a job bound to it waited for it until now. With
            // weights or named resources, what it held may be what another job lacked.
            self.capacity_changed(self.clock);
        }
        // A slot above a lowered cap (`set_max_concurrent`) is not handed out again.
        if run.slot <= self.last_slot {
            self.free_slots.insert(run.slot);
        }
        match &run.grant {
            Some(grant) => {
                self.used_weight -= grant.weight as usize;
                if let Some(pool) = self.pool.as_mut() {
                    pool.give_back(grant);
                }
            }
            None => self.used_weight -= 1,
        }
        let lane = self
            .lanes
            .get_mut(&run.key)
            .expect("a running job's key has a lane");
        let cancelled = lane.cancelling;
        lane.busy = false;
        lane.running_seq = None;
        lane.cancelling = false;
        Some((run, cancelled))
    }

    /// Stops admitting and starting, and removes every waiting job, in input order. Running
    /// jobs stay until released.
    pub fn drain(&mut self, now: Tick) -> Vec<Drained> {
        self.clock = self.clock.max(now);
        self.draining = true;
        self.ready.clear();
        self.held.clear();
        let mut drained = Vec::with_capacity(self.queued);
        self.lanes.retain(|key, lane| {
            lane.held_until = None;
            drained.extend(lane.waiting.drain(..).map(|mut w| {
                let last_started = w.tries.last().is_some_and(Try::started);
                let waits = if last_started {
                    w.wait.take_before_retry()
                } else {
                    w.wait.close_told(now, &mut self.wait_changes)
                };
                Drained {
                    seq: w.seq,
                    key: Arc::clone(key),
                    waited: now.saturating_sub(w.queued_at),
                    attempts: w.attempts,
                    tries: w.tries,
                    waits,
                    batch: w.batch,
                }
            }));
            lane.busy
        });
        self.queued = 0;
        self.queued_weight = 0;
        drained.sort_by_key(|d| d.seq);
        drained
    }

    /// Running jobs whose turn deadline is at or before `now`, soonest first. Each is reported
    /// once: its deadline is cleared. Lanes whose retry delay is over rejoin the ready line.
    pub fn expire(&mut self, now: Tick) -> Vec<Expired> {
        self.clock = self.clock.max(now);
        self.rejoin_held(now);
        self.end_batch_delays(now);
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

    /// The next time the core needs to be woken, if any: a turn deadline (`expire`), the end
    /// of a retry delay (`expire`), a partial batch's delay running out (`take`), or the end of
    /// the pause after a spawn shortage (`take`).
    pub fn next_deadline(&self) -> Option<Tick> {
        let turn = self.deadlines.first().map(|&(at, _)| at);
        let held = self.held.first().map(|(at, _)| *at);
        let batch = if self.policy.batch_delay.is_zero() {
            None
        } else {
            self.ready
                .iter()
                .filter_map(|key| self.batch_ready_at(&self.lanes.get(key)?.waiting))
                .filter(|&at| at > self.clock)
                .min()
        };
        let spawn = self.spawn_hold.filter(|&at| at > self.clock);
        [turn, held, batch, spawn].into_iter().flatten().min()
    }

    /// How many jobs of `key` are ahead of a job that would be admitted now (waiting, plus
    /// those in flight: one, or a running batch's members); 0 for an idle key.
    pub fn ahead_in_lane(&self, key: &str) -> usize {
        self.lanes
            .get(key)
            .map_or(0, |lane| lane.waiting.len() + lane.in_flight(&self.running))
    }
}
