//! The scheduler's state as a plain value: lanes of waiting jobs, the ready line, running jobs,
//! free slots and turn deadlines. Ids and keys only, never process handles.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::outcome::{ExitFacts, Outcome, StopReason};
use super::resources::{Grant, Needs, Pool, Resource};

/// How hard stop signals have asked `lanes` to stop. Ordered: a later, more severe level wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ShutdownLevel {
    /// Keep running.
    Running,
    /// Stop intake, forward the signal to every running job's group, SIGKILL after the grace.
    Graceful,
    /// SIGKILL every running job's group at once.
    Forced,
}

/// The first pause after a spawn shortage (EAGAIN, EMFILE, ENFILE).
pub const BACKOFF_FIRST: Duration = Duration::from_millis(5);
/// The longest pause after repeated spawn shortages; the pause doubles up to it.
pub const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// A job's number: 1-based, in input order.
pub type Seq = u64;

/// A point in time, as the time elapsed since the run started.
pub type Tick = Duration;

/// The run's scheduling bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// At most this many jobs in flight overall (`--max-concurrent`, ≥ 1).
    pub max_concurrent: usize,
    /// At most this many jobs admitted but not yet started, across all keys (`--max-queued`, ≥ 1).
    pub max_queued: usize,
}

/// Per-key policies (SPEC §3.2, §3.4, §3.6). The default runs every job, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// `--coalesce latest`: per key at most one job waits; a newer job replaces it.
    pub coalesce_latest: bool,
    /// `--cancel-in-progress`: a newer job also interrupts the key's running job. Implies
    /// `coalesce_latest` (the "1 running + 1 pending" rule of CI concurrency groups).
    pub cancel_in_progress: bool,
    /// `--retries N`: a failed job runs up to N more times, first in its lane.
    pub retries: u32,
    /// `--retry-delay`: the pause before a retry; the key's other jobs wait behind it.
    pub retry_delay: Duration,
    /// `--sticky-slots`: a key's first job binds the key to its slot for the whole run.
    pub sticky_slots: bool,
    /// `--batch-size`: at most this many waiting jobs of a lane run as one batch (≥ 1).
    pub batch_size: usize,
    /// `--batch-bytes`: at most this many argument bytes (the jobs' `weight`) in one batch; a
    /// batch always holds at least one job.
    pub batch_bytes: usize,
    /// `--batch-delay`: a lane whose batch is not full waits until its oldest job has waited
    /// this long (a debounce for streamed input).
    pub batch_delay: Duration,
    /// `--fail-fast`: the first job that fails for good stops the run (reason `fail_fast`).
    pub fail_fast: bool,
    /// `--on-full`: what a job meets when `max_queued` jobs already wait.
    pub on_full: OnFull,
    /// `--reserve-after`: once the first key of the ready line that does not fit (its weight
    /// or a resource it needs is short) has waited this long, what it needs is set aside for
    /// it ([`super::resources::reserves`]); zero sets aside at once.
    pub reserve_after: Duration,
    /// `--max-queued-weight`: at most this much weight (each job's `Needs::weight`, 1 when it
    /// declares none) admitted and not yet started; `usize::MAX` for no bound. On top of
    /// `Limits::max_queued`, and under the same `on_full` policy.
    pub max_queued_weight: usize,
    /// The largest weight any job of the run may have (≤ `max_queued_weight`): under
    /// `--on-full wait` input is read only while a job that heavy would be admitted, so that
    /// no job is ever refused for want of weight room.
    pub heaviest: usize,
}

/// What happens to a job that arrives while `max_queued` jobs wait (`--on-full`, SPEC §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnFull {
    /// Input is not read until there is room (backpressure).
    #[default]
    Wait,
    /// The job is recorded `rejected`/`queue_full` at once.
    Reject,
}

impl Policy {
    /// Whether jobs run in batches (`--batch-size` > 1 or a `--batch-delay`).
    pub fn batching(&self) -> bool {
        self.batch_size > 1 || !self.batch_delay.is_zero()
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            coalesce_latest: false,
            cancel_in_progress: false,
            retries: 0,
            retry_delay: Duration::ZERO,
            sticky_slots: false,
            batch_size: 1,
            batch_bytes: usize::MAX,
            batch_delay: Duration::ZERO,
            fail_fast: false,
            on_full: OnFull::Wait,
            reserve_after: Duration::ZERO,
            max_queued_weight: usize::MAX,
            heaviest: 1,
        }
    }
}

/// What the core needs to know of a job to schedule it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRequest {
    /// The job's number.
    pub seq: Seq,
    /// The lane; compared byte for byte.
    pub key: Arc<str>,
    /// Lower runs first within its lane; ties keep input order.
    pub rank: i64,
    /// The turn timeout, counted from the job's start; `None` for no limit.
    pub timeout: Option<Duration>,
    /// The job's share of a batch's byte bound (its argument's length in bytes); 0 when not
    /// batching.
    pub weight: usize,
    /// Its weight and named resources; `None` for weight 1 and no resource. A batch runs on
    /// its first job's needs.
    pub needs: Option<Arc<Needs>>,
}

/// A job waiting in its lane.
#[derive(Debug, Clone)]
pub(crate) struct Waiting {
    pub(crate) seq: Seq,
    pub(crate) rank: i64,
    pub(crate) timeout: Option<Duration>,
    pub(crate) queued_at: Tick,
    /// Tries already made (0 for a new job, ≥ 1 for a retry).
    pub(crate) attempts: u32,
    /// Admitted again from an earlier `lanes serve`'s journal: its `queued` answer promised
    /// it a run, so no later job coalesces it away.
    pub(crate) promised: bool,
    pub(crate) weight: usize,
    pub(crate) needs: Option<Arc<Needs>>,
    /// The tries it made, oldest first (a job waiting for its retry): its record tells of
    /// them, also should the run stop before the retry starts. Empty, and so no allocation,
    /// for most waiting jobs.
    pub(crate) tries: Vec<Try>,
    /// Why it waits, and why it waited so far ([`super::wait`]).
    pub(crate) wait: super::wait::WaitLog,
    /// With batching, a retry's: the first job of the batch its tries ran in (its record's
    /// `batch` should the run stop before the retry starts).
    pub(crate) batch: Option<Seq>,
}

/// One try of a job: where, when (times since the run started) and how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Try {
    /// The slot it ran in, 1..=max_concurrent.
    pub slot: u32,
    /// From admission (or the retry's re-queueing) to the start.
    pub waited: Duration,
    /// When its process started; when it was taken, for a try whose process could not be
    /// started (`exit` is `None`).
    pub started_at: Tick,
    /// When it ended (its process group empty, or its spawn failed).
    pub ended_at: Tick,
    /// Its outcome: the job's, for its last try; `failed` for every try that was retried.
    pub outcome: Outcome,
    /// How its direct child ended; `None` when its process could not be started.
    pub exit: Option<ExitFacts>,
}

impl Try {
    /// Whether a process was started for it.
    pub fn started(&self) -> bool {
        self.exit.is_some()
    }
}

/// One key's lane: its waiting jobs in run order and whether one of its jobs is in flight.
#[derive(Debug, Default)]
pub(crate) struct Lane {
    pub(crate) waiting: VecDeque<Waiting>,
    pub(crate) busy: bool,
    /// The running job was told to stop because a newer job superseded it.
    pub(crate) cancelling: bool,
    /// Until this time the lane's first job (a retry) may not start.
    pub(crate) held_until: Option<Tick>,
    /// The run of this key in flight, by its first job, while `busy`.
    pub(crate) running_seq: Option<Seq>,
}

impl Lane {
    /// How many jobs of the key are in flight, ahead of every waiting one (`running`: the
    /// scheduler's runs): 0, 1, or a running batch's members.
    pub(crate) fn in_flight(&self, running: &HashMap<Seq, Running>) -> usize {
        match self.running_seq.filter(|_| self.busy) {
            Some(seq) => running.get(&seq).map_or(1, |run| run.batch.len()),
            None => 0,
        }
    }

    /// Whether a job waits and none of the key is in flight: its first job is next to take.
    pub(crate) fn first_is_next(&self) -> bool {
        !self.waiting.is_empty() && !self.busy
    }
}

/// A job in flight.
#[derive(Debug, Clone)]
pub(crate) struct Running {
    pub(crate) key: Arc<str>,
    pub(crate) slot: u32,
    pub(crate) deadline: Option<Tick>,
    /// The jobs of this run, in lane order; the first is the one the run is known by.
    pub(crate) batch: Vec<Waiting>,
    /// Tries made, this one included.
    pub(crate) attempts: u32,
    /// How long the run's first job waited before it was taken.
    pub(crate) waited: Duration,
    /// When its process started (`spawned`); the time it was taken until then.
    pub(crate) started_at: Tick,
    /// Whether the shell said its process started (`spawned`).
    pub(crate) spawned: bool,
    /// Why the core asked it to stop; the first reason wins.
    pub(crate) stop: Option<StopReason>,
    /// The newer job that superseded it (`--cancel-in-progress`).
    pub(crate) superseded_by: Option<Seq>,
    /// Its weight and resources; `None` for weight 1 and no resource.
    pub(crate) grant: Option<Arc<Grant>>,
}

impl Running {
    /// Its jobs' seqs, in lane order (a batch's members; the one job without batching).
    pub(crate) fn members(&self) -> Vec<Seq> {
        self.batch.iter().map(|w| w.seq).collect()
    }

    /// The wait of the batch's member at `index` (0: the run's first job), from its own
    /// admission (or re-queueing) to when the run was taken: how long, and its spans.
    pub(crate) fn member_wait(&self, index: usize) -> (Duration, Vec<super::wait::WaitSpan>) {
        let taken_at = self.batch[0].queued_at + self.waited;
        let member = &self.batch[index];
        (
            taken_at.saturating_sub(member.queued_at),
            member.wait.clone().close(taken_at),
        )
    }
}

/// The whole scheduling state. Memory is proportional to the jobs waiting and running: a lane
/// with nothing waiting and nothing in flight is removed.
#[derive(Debug)]
pub struct Scheduler {
    pub(crate) limits: Limits,
    pub(crate) policy: Policy,
    /// Lanes boxed: under distinct keys the map churns, and hashbrown then grows it to twice
    /// the buckets of its peak (it resizes rather than rehashing in place once more than half
    /// full), so each bucket is kept to a key and a pointer.
    pub(crate) lanes: HashMap<Arc<str>, Box<Lane>>,
    /// Keys that are idle and have work, first come first served (SPEC §3.1).
    pub(crate) ready: VecDeque<Arc<str>>,
    pub(crate) running: HashMap<Seq, Running>,
    /// Turn deadlines of running jobs, soonest first.
    pub(crate) deadlines: BTreeSet<(Tick, Seq)>,
    /// Retries waiting out `retry_delay`, by the time their lane may go on.
    pub(crate) held: BTreeSet<(Tick, Arc<str>)>,
    /// Slots released and free again, smallest first. Slots are handed out lazily: every
    /// slot from `next_slot` to max_concurrent is free too, so memory does not grow with `-j`.
    pub(crate) free_slots: BTreeSet<u32>,
    /// The smallest slot never handed out yet.
    pub(crate) next_slot: u32,
    /// The largest slot: max_concurrent.
    pub(crate) last_slot: u32,
    /// `--sticky-slots`: the slot each key is bound to. Kept for the whole run, so it grows
    /// with the number of distinct keys.
    pub(crate) bound_slots: HashMap<Arc<str>, u32>,
    /// Jobs admitted and not yet started.
    pub(crate) queued: usize,
    /// The weight of the jobs admitted and not yet started.
    pub(crate) queued_weight: usize,
    /// Units of the cap held by running jobs: their weights (each job 1 unless it says).
    pub(crate) used_weight: usize,
    /// The run's named resources and what of them is free; `None` when it has none.
    pub(crate) pool: Option<Box<Pool>>,
    /// Set by `drain`: nothing is admitted or started any more.
    pub(crate) draining: bool,
    /// Why the run is stopping (set with `draining` by a halt); the first reason wins.
    pub(crate) stopping: Option<StopReason>,
    /// Why input is no longer read, when it is not.
    pub(crate) intake_closed: Option<StopReason>,
    /// Whether the input ends by itself (a file or a manifest): after `--fail-fast` it is
    /// still read to its end, so that every job gets its record.
    pub(crate) input_finite: bool,
    /// Whether the input has ended: no job joins a batch any more ([`Scheduler::input_ended`]).
    pub(crate) input_ended: bool,
    /// After a spawn shortage (EAGAIN/EMFILE/ENFILE), nothing starts before this time.
    pub(crate) spawn_hold: Option<Tick>,
    /// The next pause after a spawn shortage; doubles up to [`BACKOFF_MAX`].
    pub(crate) spawn_backoff: Duration,
    /// Descriptor shortages (EMFILE) met by a run with no other in flight since the last
    /// spawn that succeeded (see [`Scheduler::spawn_failed`]).
    pub(crate) lone_descriptor_shortages: u32,
    /// After a spawn shortage, until a spawn succeeds: one start at a time, so that runs
    /// tried again together do not all run short again at once.
    pub(crate) spawn_probing: bool,
    /// Finished jobs' grouped output blocks not written yet.
    pub(crate) output_backlog: usize,
    /// How far the stop signals received have taken the run.
    pub(crate) shutdown: ShutdownLevel,
    /// The first stop signal received; it decides the exit status.
    pub(crate) stop_signal: Option<Signal>,
    /// The latest `now` any transition was given: a partial batch due at or before it needs a
    /// slot, not a wake-up, so `next_deadline` leaves it out.
    pub(crate) clock: Tick,
    /// When the run's capacity last changed other than by starts and ends: a spawn
    /// shortage's pause set or over, grouped output's backlog moved, the cap set, a sticky
    /// slot freed (in a run with weights or named resources, any job's end). A delay that ran
    /// out before the shell looked waited for the cap in between only if the cap was short
    /// then; while nothing changed it since (and it was not full,
    /// [`Scheduler::cap_full_until`]), it was as free then as it is now.
    pub(crate) capacity_changed_at: Tick,
    /// When the cap last stopped being full (every unit of `-j` held): a job found free to go
    /// waited for the cap before it only if the cap was full since its cause began.
    pub(crate) cap_full_until: Tick,
    /// `--lock-dir`: the host-wide locks of keys asked for and held; `None` when keys are
    /// this process's own.
    pub(crate) host: Option<super::hostwide::HostKeys>,
    /// Changes of waiting jobs' causes not yet taken by the shell, when it wants them
    /// ([`Scheduler::report_wait_changes`]).
    pub(crate) wait_changes: Option<super::wait::WaitChanges>,
    /// The wait of the job the last admission replaced (`--coalesce latest`): how long, and
    /// its spans; taken by [`Scheduler::offer`] for that job's account.
    pub(crate) replaced_wait: Option<(Duration, Vec<super::wait::WaitSpan>)>,
}

impl Scheduler {
    /// An empty scheduler with the default policy. `limits` values below 1 are raised to 1.
    pub fn new(limits: Limits) -> Self {
        Self::with_policy(limits, Policy::default())
    }

    /// An empty scheduler with per-key policies. `limits` values below 1 are raised to 1.
    pub fn with_policy(limits: Limits, policy: Policy) -> Self {
        let limits = Limits {
            max_concurrent: limits.max_concurrent.max(1),
            max_queued: limits.max_queued.max(1),
        };
        let slots = u32::try_from(limits.max_concurrent).unwrap_or(u32::MAX);
        let policy = Policy {
            coalesce_latest: policy.coalesce_latest || policy.cancel_in_progress,
            batch_size: policy.batch_size.max(1),
            ..policy
        };
        // Sized for a full queue up front, so that the maps never grow by doubling while full
        // (both tables would be alive at the peak); untouched pages cost no memory.
        let capacity = limits
            .max_queued
            .saturating_add(limits.max_concurrent)
            .min(1 << 20);
        Scheduler {
            limits,
            policy,
            lanes: HashMap::with_capacity(capacity),
            ready: VecDeque::new(),
            running: HashMap::new(),
            deadlines: BTreeSet::new(),
            held: BTreeSet::new(),
            free_slots: BTreeSet::new(),
            next_slot: 1,
            last_slot: slots,
            bound_slots: HashMap::new(),
            queued: 0,
            queued_weight: 0,
            used_weight: 0,
            pool: None,
            draining: false,
            stopping: None,
            intake_closed: None,
            input_finite: false,
            input_ended: false,
            spawn_hold: None,
            spawn_backoff: BACKOFF_FIRST,
            lone_descriptor_shortages: 0,
            spawn_probing: false,
            output_backlog: 0,
            shutdown: ShutdownLevel::Running,
            stop_signal: None,
            clock: Tick::ZERO,
            capacity_changed_at: Tick::ZERO,
            cap_full_until: Tick::ZERO,
            host: None,
            wait_changes: None,
            replaced_wait: None,
        }
    }

    /// Gives the run its named resources (`--resource`, the manifest's `[resources]`), before
    /// any job is admitted. Jobs' needs refer to them by index in this list.
    pub fn set_resources(&mut self, resources: Vec<Resource>) {
        self.pool = (!resources.is_empty()).then(|| Box::new(Pool::new(resources)));
    }

    /// The bounds this scheduler enforces.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The per-key policies in force.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The smallest free slot, if any.
    pub(crate) fn smallest_free_slot(&self) -> Option<u32> {
        self.free_slots
            .first()
            .copied()
            .or((self.next_slot <= self.last_slot).then_some(self.next_slot))
    }

    /// Whether `slot` is free.
    pub(crate) fn slot_is_free(&self, slot: u32) -> bool {
        self.free_slots.contains(&slot) || (slot >= self.next_slot && slot <= self.last_slot)
    }

    /// Marks `slot` (free, as found by the two functions above) as taken.
    pub(crate) fn take_slot(&mut self, slot: u32) {
        if !self.free_slots.remove(&slot) {
            // A never-used slot: the ones below it that were skipped (a sticky key's slot
            // taken out of order) become explicitly free.
            for skipped in self.next_slot..slot {
                self.free_slots.insert(skipped);
            }
            self.next_slot = self.next_slot.max(slot + 1);
        }
    }

    /// The latest time a transition was given (the core's clock: it never goes back).
    pub fn latest(&self) -> Tick {
        self.clock
    }

    /// Jobs admitted and not yet started.
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Runs in flight (a batch is one run: [`Scheduler::jobs_in_flight`] counts its jobs).
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// How many jobs are in flight: each member of a running batch counts.
    pub fn jobs_in_flight(&self) -> usize {
        self.running.values().map(|run| run.batch.len()).sum()
    }

    /// Whether another job can be admitted without exceeding `max_queued`, nor (however heavy
    /// it is, up to `Policy::heaviest`) `Policy::max_queued_weight`.
    pub fn has_room(&self) -> bool {
        !self.draining
            && self.queued < self.limits.max_queued
            && self.queued_weight.saturating_add(self.policy.heaviest)
                <= self.policy.max_queued_weight
    }

    /// Whether the run declares weights above 1 or named resources: only then can a ready
    /// job wait for something other than a free slot.
    pub(crate) fn weighs(&self) -> bool {
        self.pool.is_some() || self.policy.heaviest > 1
    }

    /// The weight admitted and not yet started (`--max-queued-weight`).
    pub fn queued_weight(&self) -> usize {
        self.queued_weight
    }

    /// Whether nothing waits and nothing runs.
    pub fn is_idle(&self) -> bool {
        self.queued == 0 && self.running.is_empty()
    }

    /// Whether `drain` was called.
    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// Number of lanes currently held in memory (keys with work waiting or in flight).
    pub fn lane_count(&self) -> usize {
        self.lanes.len()
    }
}
