//! Property tests of the per-key policies: the scheduler against a naive reference model that
//! takes the policies as parameters, plus a ledger that checks the contract from the
//! scheduler's answers alone (coalescing, cancel once, retries in order, sticky slots, batch
//! bounds, every job ending exactly once, no wake-up in the past).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::Index;

use super::super::*;
use super::{fail, ms};

const KEYS: [&str; 4] = ["a", "b", "c", "d"];

#[derive(Debug, Clone)]
enum Op {
    Admit {
        key: usize,
        rank: i64,
        timeout: Option<u64>,
        weight: usize,
    },
    Take,
    /// Release one running job as done.
    Succeed(Index),
    /// Release one running job as failed, at the current time.
    Fail(Index),
    /// Release (done, then failed) a seq that is not in flight.
    ReleaseNotRunning(Index),
    Advance(u64),
    /// What the shell does when it wakes: jump to `next_deadline()`, expire, start all it can.
    Wake,
    Expire,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..KEYS.len(), -2i64..3, prop::option::weighted(0.3, 0u64..60), 0usize..7)
            .prop_map(|(key, rank, timeout, weight)| Op::Admit { key, rank, timeout, weight }),
        5 => Just(Op::Take),
        3 => any::<Index>().prop_map(Op::Succeed),
        3 => any::<Index>().prop_map(Op::Fail),
        1 => any::<Index>().prop_map(Op::ReleaseNotRunning),
        2 => (0u64..40).prop_map(Op::Advance),
        2 => Just(Op::Wake),
        1 => Just(Op::Expire),
    ]
}

fn delay() -> impl Strategy<Value = Duration> {
    prop_oneof![Just(Duration::ZERO), (1u64..50).prop_map(ms)]
}

fn bytes() -> impl Strategy<Value = usize> {
    prop_oneof![Just(usize::MAX), 0usize..16]
}

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct MJob {
    seq: Seq,
    key: usize,
    rank: i64,
    timeout: Option<Duration>,
    weight: usize,
    queued_at: Tick,
    /// Tries already made.
    attempts: u32,
    /// A retry's place in its batch (0 for a fresh job).
    retry_pos: usize,
    /// With batching, a retry's batch: its first job.
    batch: Option<Seq>,
}

impl MJob {
    /// Lane order: a waiting retry (its batch, in order) first, then fresh jobs by rank, then
    /// input order.
    fn lane_order(&self) -> (bool, usize, i64, Seq) {
        (self.attempts == 0, self.retry_pos, self.rank, self.seq)
    }
}

#[derive(Debug, Clone)]
struct MRun {
    seq: Seq,
    key: usize,
    slot: u32,
    deadline: Option<Tick>,
    expired: bool,
    batch: Vec<MJob>,
    attempts: u32,
    cancelling: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct MStart {
    seq: Seq,
    key: usize,
    slot: u32,
    waited: Duration,
    attempt: u32,
    batch: Vec<Seq>,
}

/// The naive model: flat lists scanned in full at every step.
#[derive(Debug)]
struct Model {
    max_concurrent: usize,
    max_queued: usize,
    policy: Policy,
    waiting: Vec<MJob>,
    running: Vec<MRun>,
    /// Keys in the ready line, with the event number at which each joined.
    ready_since: HashMap<usize, u64>,
    events: u64,
    /// Lanes waiting out a retry delay: (until, key).
    held: Vec<(Tick, usize)>,
    bound: HashMap<usize, u32>,
    draining: bool,
    /// The latest time any transition was given (`release` gives none): a partial batch due
    /// at or before it waits for a slot, not for a wake-up.
    clock: Tick,
}

impl Model {
    fn new(limits: Limits, policy: Policy) -> Self {
        Model {
            max_concurrent: limits.max_concurrent.max(1),
            max_queued: limits.max_queued.max(1),
            policy: Policy {
                coalesce_latest: policy.coalesce_latest || policy.cancel_in_progress,
                batch_size: policy.batch_size.max(1),
                ..policy
            },
            waiting: Vec::new(),
            running: Vec::new(),
            ready_since: HashMap::new(),
            events: 0,
            held: Vec::new(),
            bound: HashMap::new(),
            draining: false,
            clock: Duration::ZERO,
        }
    }

    fn tick(&mut self, now: Tick) {
        self.clock = self.clock.max(now);
    }

    fn busy(&self, key: usize) -> bool {
        self.running.iter().any(|r| r.key == key)
    }

    /// The jobs of `key` in flight: a running batch's members (0 when idle).
    fn in_flight(&self, key: usize) -> usize {
        self.running
            .iter()
            .filter(|r| r.key == key)
            .map(|r| r.batch.len())
            .sum()
    }

    fn has_waiting(&self, key: usize) -> bool {
        self.waiting.iter().any(|w| w.key == key)
    }

    fn join_ready(&mut self, key: usize) {
        self.events += 1;
        assert!(
            self.ready_since.insert(key, self.events).is_none(),
            "model: key {key} joined the ready line twice"
        );
    }

    fn lane(&self, key: usize) -> Vec<MJob> {
        let mut lane: Vec<MJob> = self
            .waiting
            .iter()
            .filter(|w| w.key == key)
            .cloned()
            .collect();
        lane.sort_by_key(MJob::lane_order);
        lane
    }

    /// The next batch of a lane: the longest prefix of the jobs at the same try as the first
    /// (a retried batch goes again alone) within the count and byte bounds, at least one job.
    fn batch(&self, key: usize) -> Vec<MJob> {
        self.batch_of(self.lane(key))
    }

    /// How many of the waiting jobs of `key` run before job `seq`: those of the batches its
    /// lane makes, as it stands, before the one `seq` is in.
    fn waiting_ahead_of(&self, key: usize, seq: Seq) -> usize {
        let mut lane = self.lane(key);
        let mut before = 0;
        loop {
            let batch = self.batch_of(lane.clone());
            if batch.iter().any(|j| j.seq == seq) {
                return before;
            }
            before += batch.len();
            lane.drain(..batch.len());
        }
    }

    /// The batch the first of `lane` (in lane order, not empty) would lead.
    fn batch_of(&self, lane: Vec<MJob>) -> Vec<MJob> {
        let first = lane[0].attempts;
        let group: Vec<MJob> = lane
            .into_iter()
            .take_while(|j| j.attempts == first)
            .collect();
        let mut n = 1;
        for k in 2..=group.len().min(self.policy.batch_size) {
            let total: usize = group[..k].iter().map(|j| j.weight).sum();
            if total > self.policy.batch_bytes {
                break;
            }
            n = k;
        }
        group[..n].to_vec()
    }

    /// When a lane may be taken under `--batch-delay`: `None` for at once.
    fn batch_ready_at(&self, key: usize) -> Option<Tick> {
        // No debounce, or no job can join the batch (nothing more is admitted): at once.
        if self.policy.batch_delay.is_zero()
            || self.draining
            || self.waiting.len() >= self.max_queued
        {
            return None;
        }
        let lane = self.lane(key);
        if lane[0].attempts > 0 {
            return None; // a retry is paced by --retry-delay only
        }
        let batch = self.batch(key);
        let n = batch.len();
        let weight: usize = batch.iter().map(|j| j.weight).sum();
        if n == self.policy.batch_size || n < lane.len() || weight >= self.policy.batch_bytes {
            return None;
        }
        let oldest = lane.iter().map(|j| j.queued_at).min()?;
        Some(oldest + self.policy.batch_delay)
    }

    /// The slot `key` would get now, if any.
    fn slot_for(&self, key: usize) -> Option<u32> {
        if self.running.len() >= self.max_concurrent {
            return None;
        }
        let used = |slot: u32| self.running.iter().any(|r| r.slot == slot);
        match self.bound.get(&key) {
            Some(&slot) => (!used(slot)).then_some(slot),
            None => (1..=self.max_concurrent as u32).find(|&s| !used(s)),
        }
    }

    /// Whether a job of `key` admitted at `now` would be the next one taken: its key idle
    /// with nothing waiting, no ready key that could be taken, a slot for it; never when
    /// batching.
    fn starts_at_once(&self, key: usize, now: Tick) -> bool {
        !self.policy.batching()
            && self.policy.retries == 0
            && !self.draining
            && !self.busy(key)
            && !self.has_waiting(key)
            && self.slot_for(key).is_some()
            && !self.ready_since.keys().any(|&k| {
                self.slot_for(k).is_some() && self.batch_ready_at(k).is_none_or(|at| at <= now)
            })
    }

    fn admit(&mut self, w: MJob) -> Admission {
        self.tick(w.queued_at);
        if self.draining {
            return Admission::Closed;
        }
        let key = w.key;
        let pending = if self.policy.coalesce_latest {
            self.waiting
                .iter()
                .position(|o| o.key == key && o.attempts == 0)
        } else {
            None
        };
        // --cancel-in-progress: the key's retries waiting out their delay go, and make room.
        let going = if self.policy.cancel_in_progress && !self.busy(key) {
            self.waiting
                .iter()
                .filter(|o| o.key == key && o.attempts > 0)
                .count()
        } else {
            0
        };
        if self.waiting.len() - going >= self.max_queued
            && pending.is_none()
            && !self.starts_at_once(key, w.queued_at)
        {
            return Admission::Full;
        }
        let pending_seq = pending.map(|i| self.waiting[i].seq);
        let busy = self.busy(key);
        // --cancel-in-progress: the key's retry waiting out its delay is superseded.
        let mut retries = Vec::new();
        if self.policy.cancel_in_progress && !busy {
            let mut gone: Vec<MJob> = Vec::new();
            let mut i = 0;
            while i < self.waiting.len() {
                if self.waiting[i].key == key && self.waiting[i].attempts > 0 {
                    gone.push(self.waiting.remove(i));
                } else {
                    i += 1;
                }
            }
            gone.sort_by_key(|job| job.retry_pos);
            let now = w.queued_at;
            retries = gone
                .into_iter()
                .map(|job| Account {
                    seq: job.seq,
                    outcome: Outcome::Interrupted(StopReason::Superseded),
                    attempts: job.attempts,
                    waited: Some(now - job.queued_at),
                    // Compared without them: the model does not keep tries.
                    waits: Vec::new(),
                    tries: Vec::new(),
                    superseded_by: Some(w.seq),
                    batch: job.batch,
                    ended_at: now,
                    in_flight: false,
                    grant: None,
                })
                .collect();
            self.held.retain(|&(_, held)| held != key);
        }
        let pending = pending.map(|i| {
            // Its index before the retries left.
            let seq = pending_seq.expect("seen");
            let _ = i;
            self.waiting
                .iter()
                .position(|o| o.seq == seq)
                .expect("still waiting")
        });
        if !busy && !self.has_waiting(key) && !self.ready_since.contains_key(&key) {
            self.join_ready(key);
        }
        let replaced = pending.map(|i| self.waiting.remove(i).seq);
        let seq = w.seq;
        self.waiting.push(w);
        let ahead = self.waiting_ahead_of(key, seq) + self.in_flight(key);
        let mut cancel = None;
        if self.policy.cancel_in_progress {
            if let Some(run) = self.running.iter_mut().find(|r| r.key == key) {
                if !run.cancelling {
                    run.cancelling = true;
                    cancel = Some(run.seq);
                }
            }
        }
        if self.policy.coalesce_latest {
            Admission::Superseding {
                ahead,
                replaced,
                cancel,
                retries,
            }
        } else {
            Admission::Queued { ahead }
        }
    }

    fn take(&mut self, now: Tick) -> Option<MStart> {
        self.tick(now);
        if self.draining || self.running.len() >= self.max_concurrent {
            return None;
        }
        let key = self
            .ready_since
            .keys()
            .copied()
            .filter(|&k| {
                self.slot_for(k).is_some() && self.batch_ready_at(k).is_none_or(|at| at <= now)
            })
            .min_by_key(|k| self.ready_since[k])?;
        self.ready_since.remove(&key);
        let slot = self.slot_for(key).expect("checked");
        if self.policy.sticky_slots {
            self.bound.entry(key).or_insert(slot);
        }
        let batch = self.batch(key);
        let seqs: Vec<Seq> = batch.iter().map(|j| j.seq).collect();
        self.waiting.retain(|w| !seqs.contains(&w.seq));
        let first = &batch[0];
        let start = MStart {
            seq: first.seq,
            key,
            slot,
            waited: now - first.queued_at,
            attempt: first.attempts + 1,
            batch: seqs,
        };
        self.running.push(MRun {
            seq: first.seq,
            key,
            slot,
            // The batch runs under its shortest turn timeout.
            deadline: batch
                .iter()
                .filter_map(|j| j.timeout)
                .min()
                .map(|t| now + t),
            expired: false,
            attempts: first.attempts + 1,
            batch,
            cancelling: false,
        });
        Some(start)
    }

    fn release(&mut self, seq: Seq, failed_at: Option<Tick>) -> Option<(Released, usize)> {
        if let Some(now) = failed_at {
            self.tick(now);
        }
        let i = self.running.iter().position(|r| r.seq == seq)?;
        let run = self.running.remove(i);
        let key = run.key;
        let name: Arc<str> = Arc::from(KEYS[key]);
        let retry = failed_at
            .filter(|_| run.attempts <= self.policy.retries && !self.draining && !run.cancelling);
        if let Some(now) = retry {
            for (pos, mut job) in run.batch.into_iter().enumerate() {
                job.queued_at = now;
                job.attempts = run.attempts;
                job.retry_pos = pos;
                job.batch = self.policy.batching().then_some(seq);
                self.waiting.push(job);
            }
            if self.policy.retry_delay.is_zero() {
                self.join_ready(key);
            } else {
                self.held.push((now + self.policy.retry_delay, key));
            }
            let released = Released::Retry {
                key: name,
                slot: run.slot,
                attempt: run.attempts + 1,
            };
            return Some((released, key));
        }
        if !self.draining && self.has_waiting(key) {
            self.join_ready(key);
        }
        Some((
            Released::Done {
                key: name,
                slot: run.slot,
            },
            key,
        ))
    }

    fn drain(&mut self, now: Tick) -> Vec<Drained> {
        self.tick(now);
        self.draining = true;
        self.ready_since.clear();
        self.held.clear();
        let mut out: Vec<Drained> = self
            .waiting
            .drain(..)
            .map(|w| Drained {
                seq: w.seq,
                key: Arc::from(KEYS[w.key]),
                waited: now - w.queued_at,
                attempts: w.attempts,
                // Compared without it: the model does not keep tries.
                tries: Vec::new(),
                waits: Vec::new(),
                batch: w.batch,
            })
            .collect();
        out.sort_by_key(|d| d.seq);
        out
    }

    fn expire(&mut self, now: Tick) -> Vec<Seq> {
        self.tick(now);
        let mut over: Vec<(Tick, usize)> = self
            .held
            .iter()
            .copied()
            .filter(|&(until, _)| until <= now)
            .collect();
        over.sort();
        self.held.retain(|&(until, _)| until > now);
        for (_, key) in over {
            self.join_ready(key);
        }
        let mut due: Vec<(Tick, Seq)> = Vec::new();
        for r in &mut self.running {
            if let Some(d) = r.deadline {
                if !r.expired && d <= now {
                    r.expired = true;
                    due.push((d, r.seq));
                }
            }
        }
        due.sort();
        due.into_iter().map(|(_, seq)| seq).collect()
    }

    /// The next time something can happen without an input: a turn deadline, the end of a
    /// retry delay, or the end of a ready lane's batch delay still to come (one already over
    /// waits for a slot, which only a release can free).
    fn next_deadline(&self) -> Option<Tick> {
        let turn = self
            .running
            .iter()
            .filter(|r| !r.expired)
            .filter_map(|r| r.deadline)
            .min();
        let held = self.held.iter().map(|&(until, _)| until).min();
        let batch = self
            .ready_since
            .keys()
            .filter_map(|&k| self.batch_ready_at(k))
            .filter(|&at| at > self.clock)
            .min();
        [turn, held, batch].into_iter().flatten().min()
    }

    fn lane_count(&self) -> usize {
        let keys: HashSet<usize> = self
            .waiting
            .iter()
            .map(|w| w.key)
            .chain(self.running.iter().map(|r| r.key))
            .collect();
        keys.len()
    }

    /// The model's own invariant: a key is in the ready line exactly when it has work, is idle,
    /// is not held, and the scheduler is not draining.
    fn check_itself(&self) {
        for key in 0..KEYS.len() {
            let held = self.held.iter().any(|&(_, k)| k == key);
            let should = !self.draining && self.has_waiting(key) && !self.busy(key) && !held;
            assert_eq!(
                self.ready_since.contains_key(&key),
                should,
                "model: ready line wrong for key {key}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The ledger: the contract, checked from the scheduler's answers alone
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Waiting,
    Running,
    Ended,
}

#[derive(Debug)]
struct JobInfo {
    key: Arc<str>,
    rank: i64,
    weight: usize,
    timeout: Option<Duration>,
    life: Life,
    queued_at: Tick,
    /// Tries made so far.
    tries: u32,
}

#[derive(Debug)]
struct Run {
    key: Arc<str>,
    slot: u32,
    batch: Vec<Seq>,
    attempt: u32,
}

#[derive(Debug)]
struct Ledger {
    limits: Limits,
    policy: Policy,
    jobs: HashMap<Seq, JobInfo>,
    runs: HashMap<Seq, Run>,
    in_flight: HashMap<Arc<str>, Seq>,
    /// Under coalescing: each key's fresh waiting job.
    pending: HashMap<Arc<str>, Seq>,
    /// Runs asked to stop by cancel-in-progress.
    cancelled: HashSet<Seq>,
    /// A key's retried batch, which must be the key's next start.
    retry_next: HashMap<Arc<str>, Vec<Seq>>,
    /// Under sticky slots: each key's slot, once bound.
    slot_of: HashMap<Arc<str>, u32>,
    deadline: HashMap<Seq, Tick>,
    expired: HashSet<Seq>,
    draining: bool,
}

impl Ledger {
    fn new(limits: Limits, policy: Policy) -> Self {
        Ledger {
            limits,
            policy,
            jobs: HashMap::new(),
            runs: HashMap::new(),
            in_flight: HashMap::new(),
            pending: HashMap::new(),
            cancelled: HashSet::new(),
            retry_next: HashMap::new(),
            slot_of: HashMap::new(),
            deadline: HashMap::new(),
            expired: HashSet::new(),
            draining: false,
        }
    }

    fn waiting(&self) -> impl Iterator<Item = (&Seq, &JobInfo)> {
        self.jobs.iter().filter(|(_, j)| j.life == Life::Waiting)
    }

    /// Checks an admission against the contract and records it. True when the job was
    /// admitted past `max_queued`, which only a job the next take starts may be.
    fn admitted(
        &mut self,
        req: &JobRequest,
        got: &Admission,
        queued_before: usize,
        now: Tick,
    ) -> bool {
        let seq = req.seq;
        let key = &req.key;
        let coalesce = self.policy.coalesce_latest;
        let (grows, replaced, cancel) = match *got {
            Admission::Closed => {
                assert!(self.draining, "job {seq}: Closed before drain");
                return false;
            }
            Admission::Full => {
                assert!(
                    queued_before >= self.limits.max_queued,
                    "job {seq}: Full with room"
                );
                assert!(
                    !self.pending.contains_key(key),
                    "job {seq}: Full although it could replace {:?}",
                    self.pending.get(key)
                );
                return false;
            }
            Admission::Queued { .. } => {
                assert!(!coalesce, "job {seq}: Queued under coalescing");
                (true, None, None)
            }
            Admission::Superseding {
                replaced,
                cancel,
                ref retries,
                ..
            } => {
                assert!(coalesce, "job {seq}: Superseding without coalescing");
                let retried = self.retry_next.get(key).cloned();
                let waiting_retry = retried.is_some() && !self.in_flight.contains_key(key);
                if self.policy.cancel_in_progress && waiting_retry {
                    let seqs: Vec<Seq> = retries.iter().map(|a| a.seq).collect();
                    assert_eq!(
                        Some(seqs),
                        retried,
                        "job {seq}: the retry waiting in its lane was not superseded"
                    );
                    self.retry_next.remove(key);
                    for account in retries {
                        let info = self.jobs.get_mut(&account.seq).expect("a known job");
                        assert_eq!(info.life, Life::Waiting);
                        assert!(info.tries > 0);
                        assert_eq!(account.superseded_by, Some(seq));
                        info.life = Life::Ended;
                    }
                } else {
                    assert!(retries.is_empty(), "job {seq}: superseded {retries:?}");
                }
                (replaced.is_none(), replaced, cancel)
            }
        };
        assert!(!self.draining, "job {seq} admitted after drain");
        let superseded = match got {
            Admission::Superseding { ref retries, .. } => retries.len(),
            _ => 0,
        };
        let past_bound = grows && queued_before - superseded >= self.limits.max_queued;
        if coalesce {
            assert_eq!(
                replaced,
                self.pending.get(key).copied(),
                "job {seq}: the newest job replaces the key's pending one"
            );
            if let Some(old) = replaced {
                assert!(old < seq, "job {seq} replaced a newer job {old}");
                let info = self.jobs.get_mut(&old).expect("replaced a known job");
                assert_eq!((info.life, info.tries), (Life::Waiting, 0));
                assert_eq!(&info.key, key);
                info.life = Life::Ended;
            }
            self.pending.insert(Arc::clone(key), seq);
        }
        match cancel {
            Some(c) => {
                assert!(self.policy.cancel_in_progress, "cancel without the policy");
                assert_eq!(
                    self.in_flight.get(key),
                    Some(&c),
                    "cancel of a job not running"
                );
                assert!(self.cancelled.insert(c), "job {c} cancelled twice");
            }
            None if self.policy.cancel_in_progress => {
                if let Some(run) = self.in_flight.get(key) {
                    assert!(
                        self.cancelled.contains(run),
                        "job {seq}: running job {run} of its key was not cancelled"
                    );
                }
            }
            None => {}
        }
        let info = JobInfo {
            key: Arc::clone(key),
            rank: req.rank,
            weight: req.weight,
            timeout: req.timeout,
            life: Life::Waiting,
            queued_at: now,
            tries: 0,
        };
        if past_bound {
            assert!(
                !self.in_flight.contains_key(key) && !self.waiting().any(|(_, j)| j.key == *key),
                "job {seq} admitted past max_queued behind another job of its key"
            );
        }
        assert!(self.jobs.insert(seq, info).is_none(), "seq {seq} reused");
        past_bound
    }

    fn started(&mut self, st: &Start, now: Tick) {
        let key = &st.key;
        assert!(
            self.runs.len() < self.limits.max_concurrent,
            "over the cap: {} runs",
            self.runs.len() + 1
        );
        assert!(
            (1..=self.limits.max_concurrent as u32).contains(&st.slot),
            "slot {} out of range",
            st.slot
        );
        assert!(
            self.runs.values().all(|r| r.slot != st.slot),
            "slot {} used twice",
            st.slot
        );
        assert_eq!(
            st.batch.first(),
            Some(&st.seq),
            "a run is known by its first job"
        );
        let distinct: HashSet<Seq> = st.batch.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            st.batch.len(),
            "a job twice in {:?}",
            st.batch
        );
        assert!(st.batch.len() <= self.policy.batch_size, "batch too long");
        let infos: Vec<&JobInfo> = st.batch.iter().map(|s| &self.jobs[s]).collect();
        for (seq, info) in st.batch.iter().zip(&infos) {
            assert_eq!(
                info.life,
                Life::Waiting,
                "job {seq} started but was not waiting"
            );
            assert_eq!(&info.key, key, "job {seq} of another key in the batch");
        }
        let weight: usize = infos.iter().map(|i| i.weight).sum();
        assert!(
            st.batch.len() == 1 || weight <= self.policy.batch_bytes,
            "batch {:?} weighs {weight}",
            st.batch
        );
        let tries = infos[0].tries;
        assert!(
            infos.iter().all(|i| i.tries == tries),
            "tries differ in a batch"
        );
        assert_eq!(st.attempt, tries + 1, "attempt of {:?}", st.batch);
        assert_eq!(
            st.waited,
            now - infos[0].queued_at,
            "waited of job {}",
            st.seq
        );
        if let Some(other) = self.in_flight.get(key) {
            panic!("key {key} has two runs in flight: {other} and {}", st.seq);
        }
        match self.retry_next.remove(key) {
            Some(retried) => assert_eq!(
                st.batch, retried,
                "key {key}: the retried batch must run next, as it was"
            ),
            None => {
                assert_eq!(tries, 0, "a retry started out of turn");
                // Lane order: the batch is the front of the key's fresh waiting jobs.
                let order = |s: &Seq| (self.jobs[s].rank, *s);
                let orders: Vec<(i64, Seq)> = st.batch.iter().map(order).collect();
                assert!(orders.windows(2).all(|w| w[0] < w[1]), "batch out of order");
                let last = *orders.last().expect("non-empty");
                for (seq, info) in self.waiting() {
                    if &info.key == key && !st.batch.contains(seq) {
                        assert!(
                            (info.rank, *seq) > last,
                            "job {seq} of {key} was skipped by batch {:?}",
                            st.batch
                        );
                    }
                }
            }
        }
        if self.policy.sticky_slots {
            let bound = *self.slot_of.entry(Arc::clone(key)).or_insert(st.slot);
            assert_eq!(st.slot, bound, "key {key} moved from slot {bound}");
        }
        if self.pending.get(key).is_some_and(|p| st.batch.contains(p)) {
            self.pending.remove(key);
        }
        if let Some(t) = st
            .batch
            .iter()
            .filter_map(|seq| self.jobs[seq].timeout)
            .min()
        {
            self.deadline.insert(st.seq, now.saturating_add(t));
        }
        for seq in &st.batch {
            self.jobs.get_mut(seq).expect("known").life = Life::Running;
        }
        self.in_flight.insert(Arc::clone(key), st.seq);
        self.runs.insert(
            st.seq,
            Run {
                key: Arc::clone(key),
                slot: st.slot,
                batch: st.batch.clone(),
                attempt: st.attempt,
            },
        );
    }

    fn released(&mut self, seq: Seq, got: &Released, failed_at: Option<Tick>) {
        let Some(run) = self.runs.remove(&seq) else {
            assert_eq!(*got, Released::Unknown, "job {seq} was not in flight");
            return;
        };
        assert_eq!(self.in_flight.remove(&run.key), Some(seq));
        self.deadline.remove(&seq);
        self.expired.remove(&seq); // a retry gets a new turn deadline
        let cancelled = self.cancelled.contains(&seq);
        match got {
            Released::Unknown => panic!("job {seq} was in flight"),
            Released::Done { key, slot } => {
                assert_eq!((key, *slot), (&run.key, run.slot));
                if failed_at.is_some() {
                    assert!(
                        run.attempt > self.policy.retries || self.draining || cancelled,
                        "job {seq} failed at try {} of 1 + {} and was not retried",
                        run.attempt,
                        self.policy.retries
                    );
                }
                for s in &run.batch {
                    self.jobs.get_mut(s).expect("known").life = Life::Ended;
                }
            }
            Released::Retry { key, slot, attempt } => {
                let now = failed_at.expect("only a failure is retried");
                assert_eq!((key, *slot), (&run.key, run.slot));
                assert_eq!(*attempt, run.attempt + 1);
                assert!(
                    run.attempt <= self.policy.retries,
                    "retried past its retries"
                );
                assert!(!self.draining, "retried after drain");
                assert!(!cancelled, "a cancelled job was retried");
                for s in &run.batch {
                    let info = self.jobs.get_mut(s).expect("known");
                    info.life = Life::Waiting;
                    info.tries = run.attempt;
                    info.queued_at = now;
                }
                self.retry_next.insert(Arc::clone(&run.key), run.batch);
            }
        }
    }

    fn drained(&mut self, got: &[Drained], now: Tick) {
        self.draining = true;
        let mut want: Vec<Seq> = self.waiting().map(|(s, _)| *s).collect();
        want.sort_unstable();
        let seqs: Vec<Seq> = got.iter().map(|d| d.seq).collect();
        assert_eq!(
            seqs, want,
            "drain returns every waiting job, in input order"
        );
        for d in got {
            let info = self.jobs.get_mut(&d.seq).expect("known");
            assert_eq!(
                (&d.key, d.waited, d.attempts),
                (&info.key, now - info.queued_at, info.tries)
            );
            info.life = Life::Ended;
        }
        self.pending.clear();
        self.retry_next.clear();
    }

    fn expired(&mut self, seq: Seq, now: Tick) {
        assert!(
            self.runs.contains_key(&seq),
            "job {seq} expired but is not in flight"
        );
        let deadline = self.deadline[&seq];
        assert!(deadline <= now, "job {seq} expired early");
        assert!(self.expired.insert(seq), "job {seq} expired twice");
    }

    fn check(&self, s: &Scheduler, step: usize) {
        let waiting = self.waiting().count();
        assert_eq!(s.queued(), waiting, "step {step}: queued()");
        assert_eq!(s.running(), self.runs.len(), "step {step}: running()");
        assert!(
            s.running() <= self.limits.max_concurrent,
            "step {step}: cap"
        );
        let fresh = self.waiting().filter(|(_, j)| j.tries == 0).count();
        assert!(
            fresh <= self.limits.max_queued,
            "step {step}: {fresh} new jobs wait, max_queued {}",
            self.limits.max_queued
        );
        assert_eq!(
            s.has_room(),
            !self.draining && waiting < self.limits.max_queued,
            "step {step}: has_room()"
        );
        if self.policy.coalesce_latest {
            let mut per_key: HashMap<&Arc<str>, usize> = HashMap::new();
            for (_, j) in self.waiting().filter(|(_, j)| j.tries == 0) {
                *per_key.entry(&j.key).or_default() += 1;
            }
            assert!(
                per_key.values().all(|&n| n <= 1),
                "step {step}: two pending jobs for a key: {per_key:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The runner
// ---------------------------------------------------------------------------------------------

struct Harness {
    s: Scheduler,
    m: Model,
    ledger: Ledger,
    keys: Vec<Arc<str>>,
    now: Tick,
    next_seq: Seq,
}

impl Harness {
    fn new(limits: Limits, policy: Policy) -> Self {
        let s = Scheduler::with_policy(limits, policy);
        let ledger = Ledger::new(s.limits(), s.policy());
        Harness {
            m: Model::new(limits, policy),
            s,
            ledger,
            keys: KEYS.iter().map(|k| Arc::from(*k)).collect(),
            now: Duration::ZERO,
            next_seq: 1,
        }
    }

    fn check(&self, step: usize) {
        let (s, m) = (&self.s, &self.m);
        m.check_itself();
        self.ledger.check(s, step);
        assert_eq!(s.policy(), m.policy, "step {step}: policy()");
        assert_eq!(s.running(), m.running.len(), "step {step}: running()");
        assert_eq!(s.queued(), m.waiting.len(), "step {step}: queued()");
        assert_eq!(s.lane_count(), m.lane_count(), "step {step}: lane_count()");
        assert_eq!(s.is_draining(), m.draining, "step {step}: is_draining()");
        assert_eq!(
            s.is_idle(),
            m.waiting.is_empty() && m.running.is_empty(),
            "step {step}: is_idle()"
        );
        for (k, name) in KEYS.iter().enumerate() {
            let want = m.waiting.iter().filter(|w| w.key == k).count() + m.in_flight(k);
            assert_eq!(
                s.ahead_in_lane(name),
                want,
                "step {step}: ahead_in_lane({name})"
            );
        }
        assert_eq!(
            s.next_deadline(),
            m.next_deadline(),
            "step {step}: next_deadline() at {:?}",
            self.now
        );
    }

    fn take(&mut self, step: usize) -> bool {
        let got = self.s.take(self.now);
        // The shell starts its process at once: its turn deadline counts from now.
        if let Some(start) = &got {
            self.s.spawned(start.seq, self.now);
        }
        let want = self.m.take(self.now);
        match (&got, want) {
            (None, None) => false,
            (Some(st), Some(want)) => {
                let got_start = MStart {
                    seq: st.seq,
                    key: KEYS
                        .iter()
                        .position(|k| **k == *st.key)
                        .expect("a known key"),
                    slot: st.slot,
                    waited: st.waited,
                    attempt: st.attempt,
                    batch: st.batch.clone(),
                };
                assert_eq!(got_start, want, "step {step}: take at {:?}", self.now);
                self.ledger.started(st, self.now);
                true
            }
            (got, want) => panic!(
                "step {step}: take at {:?}: {got:?}, model {want:?}",
                self.now
            ),
        }
    }

    fn release(&mut self, seq: Seq, failed: bool, step: usize) {
        let failed_at = failed.then_some(self.now);
        let got = if failed {
            fail(&mut self.s, seq, self.now)
        } else {
            self.s.release(seq)
        };
        let want = self
            .m
            .release(seq, failed_at)
            .map_or(Released::Unknown, |r| r.0);
        assert_eq!(
            got, want,
            "step {step}: release of {seq} (failed: {failed})"
        );
        self.ledger.released(seq, &got, failed_at);
    }

    fn expire(&mut self, step: usize) {
        let got: Vec<Seq> = self.s.expire(self.now).into_iter().map(|e| e.seq).collect();
        assert_eq!(
            got,
            self.m.expire(self.now),
            "step {step}: expire at {:?}",
            self.now
        );
        for seq in got {
            self.ledger.expired(seq, self.now);
        }
    }

    fn drain(&mut self, step: usize) {
        let mut got = self.s.drain(self.now);
        for drained in &mut got {
            // A retry waiting for its turn tells of its last try, which ended when it failed.
            let waits = std::mem::take(&mut drained.waits);
            let told = match drained.tries.last() {
                Some(last) if last.started() => last.waited,
                _ => drained.waited,
            };
            crate::core::tests::assert_waits_add_up(
                &waits,
                Some(told),
                &format!("step {step}: drained {}", drained.seq),
            );
            let tries = std::mem::take(&mut drained.tries);
            assert_eq!(
                tries.len(),
                drained.attempts as usize,
                "step {step}: one try per attempt"
            );
            for tried in tries {
                assert!(tried.started_at <= tried.ended_at, "step {step}: {tried:?}");
                assert!(
                    matches!(tried.outcome, Outcome::Failed(_)),
                    "step {step}: a retried try that did not fail: {tried:?}"
                );
            }
        }
        assert_eq!(got, self.m.drain(self.now), "step {step}: drain");
        self.ledger.drained(&got, self.now);
    }

    fn step(&mut self, step: usize, op: &Op) {
        match *op {
            Op::Admit {
                key,
                rank,
                timeout,
                weight,
            } => {
                let seq = self.next_seq;
                self.next_seq += 1;
                let timeout = timeout.map(ms);
                let req = JobRequest {
                    seq,
                    key: Arc::clone(&self.keys[key]),
                    rank,
                    timeout,
                    weight,
                    needs: None,
                };
                let queued_before = self.s.queued();
                let mut got = self.s.admit(req.clone(), self.now);
                let want = self.m.admit(MJob {
                    seq,
                    key,
                    rank,
                    timeout,
                    weight,
                    queued_at: self.now,
                    attempts: 0,
                    retry_pos: 0,
                    batch: None,
                });
                if let Admission::Superseding { retries, .. } = &mut got {
                    for account in retries.iter_mut() {
                        assert_eq!(
                            account.tries.len() as u32,
                            account.attempts,
                            "step {step}: a superseded retry keeps its tries"
                        );
                        // Compared without them: the model does not keep tries.
                        account.tries.clear();
                        account.waits.clear();
                    }
                }
                assert_eq!(got, want, "step {step}: admit of job {seq}");
                if self.ledger.admitted(&req, &got, queued_before, self.now) {
                    // Past the bound: the shell's take, right after, starts it.
                    assert!(self.take(step), "step {step}: job {seq} past the bound");
                    assert_eq!(
                        self.ledger.jobs[&seq].life,
                        Life::Running,
                        "step {step}: job {seq} admitted past the bound did not start"
                    );
                }
            }
            Op::Take => {
                self.take(step);
            }
            Op::Succeed(i) | Op::Fail(i) => {
                if self.m.running.is_empty() {
                    return;
                }
                let seq = self.m.running[i.index(self.m.running.len())].seq;
                self.release(seq, matches!(op, Op::Fail(_)), step);
            }
            Op::ReleaseNotRunning(i) => {
                let seq = if self.m.waiting.is_empty() {
                    self.next_seq + 1000
                } else {
                    self.m.waiting[i.index(self.m.waiting.len())].seq
                };
                self.release(seq, false, step);
                self.release(seq, true, step);
            }
            Op::Advance(d) => self.now += ms(d),
            Op::Wake => {
                if let Some(at) = self.s.next_deadline() {
                    self.now = self.now.max(at);
                }
                self.expire(step);
                while self.take(step) {}
                self.expire(step); // a job just started with a zero timeout
                let next = self.s.next_deadline();
                assert!(
                    next.is_none_or(|at| at > self.now),
                    "step {step}: woken at {:?}, nothing more can start, yet next_deadline() \
                     is {next:?}: the shell would wake again at once",
                    self.now
                );
            }
            Op::Expire => self.expire(step),
        }
    }

    /// Ends the run: drain, then release every run still in flight (alternately as failed,
    /// which must not be retried any more); every admitted job must have ended exactly once.
    fn finish(&mut self, step: usize) {
        if !self.s.is_draining() {
            self.drain(step);
            self.check(step);
        }
        let seq = self.next_seq;
        assert_eq!(
            self.s.admit(super::job(seq, "a", 0), self.now),
            Admission::Closed
        );
        assert_eq!(self.s.take(self.now), None);
        self.expire(step);
        let mut running: Vec<Seq> = self.m.running.iter().map(|r| r.seq).collect();
        running.sort_unstable();
        for (i, seq) in running.into_iter().enumerate() {
            self.release(seq, i % 2 == 0, step);
            assert!(
                matches!(self.ledger.jobs[&seq].life, Life::Ended),
                "job {seq} retried after drain"
            );
            self.check(step);
        }
        for (seq, info) in &self.ledger.jobs {
            assert_eq!(info.life, Life::Ended, "job {seq} never ended");
        }
        assert!(self.s.is_idle());
        assert_eq!(self.s.lane_count(), 0);
        assert_eq!(self.s.next_deadline(), None);
    }
}

fn run(limits: Limits, policy: Policy, ops: &[Op], drain_at: usize) {
    let mut h = Harness::new(limits, policy);
    for (step, op) in ops.iter().enumerate() {
        if step == drain_at {
            h.drain(step);
            h.check(step);
        }
        h.step(step, op);
        h.check(step);
    }
    h.finish(ops.len());
}

fn limits() -> impl Strategy<Value = Limits> {
    (1usize..=4, 1usize..=8).prop_map(|(max_concurrent, max_queued)| Limits {
        max_concurrent,
        max_queued,
    })
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 0..120)
}

/// Where to drain: `usize::MAX` for only at the end.
fn drain_at(ops: &[Op], back: Option<usize>) -> usize {
    back.map_or(usize::MAX, |b| ops.len().saturating_sub(b))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn coalescing_and_cancel_in_progress_agree_with_the_model(
        limits in limits(),
        cancel_in_progress in any::<bool>(),
        retries in 0u32..2,
        ops in ops(),
        back in prop::option::weighted(0.3, 0usize..10),
    ) {
        let policy = Policy { coalesce_latest: true, cancel_in_progress, retries, ..Policy::default() };
        run(limits, policy, &ops, drain_at(&ops, back));
    }

    #[test]
    fn retries_agree_with_the_model(
        limits in limits(),
        retries in 0u32..4,
        retry_delay in delay(),
        batch_size in 1usize..4,
        ops in ops(),
        back in prop::option::weighted(0.3, 0usize..10),
    ) {
        let policy = Policy { retries, retry_delay, batch_size, ..Policy::default() };
        run(limits, policy, &ops, drain_at(&ops, back));
    }

    #[test]
    fn sticky_slots_agree_with_the_model(
        max_concurrent in 1usize..=3,
        max_queued in 1usize..=8,
        retries in 0u32..2,
        ops in ops(),
        back in prop::option::weighted(0.3, 0usize..10),
    ) {
        let policy = Policy { sticky_slots: true, retries, ..Policy::default() };
        let limits = Limits { max_concurrent, max_queued };
        run(limits, policy, &ops, drain_at(&ops, back));
    }

    #[test]
    fn batching_agrees_with_the_model(
        limits in limits(),
        batch_size in 1usize..5,
        batch_bytes in bytes(),
        batch_delay in delay(),
        ops in ops(),
        back in prop::option::weighted(0.3, 0usize..10),
    ) {
        let policy = Policy { batch_size, batch_bytes, batch_delay, ..Policy::default() };
        run(limits, policy, &ops, drain_at(&ops, back));
    }

}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn all_policies_together_agree_with_the_model(
        limits in limits(),
        flags in (any::<bool>(), any::<bool>(), any::<bool>()),
        retries in 0u32..3,
        retry_delay in delay(),
        batch in (1usize..5, bytes(), delay()),
        ops in ops(),
        back in prop::option::weighted(0.3, 0usize..10),
    ) {
        let (coalesce_latest, cancel_in_progress, sticky_slots) = flags;
        let (batch_size, batch_bytes, batch_delay) = batch;
        let policy = Policy {
            coalesce_latest,
            cancel_in_progress,
            retries,
            retry_delay,
            sticky_slots,
            batch_size,
            batch_bytes,
            batch_delay,
            ..Policy::default()
        };
        run(limits, policy, &ops, drain_at(&ops, back));
    }
}
