//! A property test of weights and named resources on a virtual clock, against a simple
//! reference model of the rule: keys in ready-line order, the first that fits starts, and the
//! first that does not fit, once it has waited `reserve_after`, has its needs set aside from
//! what later keys may use. Checked after every step: the cap and every resource within their
//! capacity, one job per key, each key's jobs in admission order, named units never held by
//! two running jobs; and at the end, every job starts while a stream of light jobs keeps
//! coming (liveness under the reservation rule).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::Index;

use super::super::*;
use super::ms;

const KEYS: [&str; 4] = ["a", "b", "c", "d"];

#[derive(Debug, Clone)]
enum Op {
    /// A job of this key, weight, amount of `mem` and number of `gpu` units.
    Admit(usize, u32, u64, u64),
    Take,
    Release(Index),
    Advance(u64),
}

#[derive(Debug, Clone, Copy)]
struct Setup {
    cap: usize,
    mem: u64,
    gpus: u64,
    reserve_after: u64,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        1usize..5,
        1u64..10,
        1u64..5,
        prop_oneof![Just(0u64), Just(20)],
    )
        .prop_map(|(cap, mem, gpus, reserve_after)| Setup {
            cap,
            mem,
            gpus,
            reserve_after,
        })
}

fn ops(s: Setup) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        5 => (0..KEYS.len(), 1..=s.cap as u32, 0..=s.mem, 0..=s.gpus)
            .prop_map(|(k, w, m, g)| Op::Admit(k, w, m, g)),
        5 => Just(Op::Take),
        4 => any::<Index>().prop_map(Op::Release),
        2 => (0u64..30).prop_map(Op::Advance),
    ];
    prop::collection::vec(op, 1..80)
}

#[derive(Debug, Clone)]
struct MJob {
    seq: Seq,
    key: Arc<str>,
    weight: u64,
    mem: u64,
    gpus: u64,
    queued_at: Tick,
}

/// The reference: lanes, the ready line and what is free, as plain vectors.
#[derive(Default)]
struct Model {
    lanes: HashMap<Arc<str>, VecDeque<MJob>>,
    busy: BTreeSet<Arc<str>>,
    ready: Vec<Arc<str>>,
    /// Free: cap, mem, gpu units.
    free: [u64; 3],
    reserve_after: Duration,
}

impl Model {
    fn admit(&mut self, job: MJob) {
        let lane = self.lanes.entry(Arc::clone(&job.key)).or_default();
        if lane.is_empty() && !self.busy.contains(&job.key) {
            self.ready.push(Arc::clone(&job.key));
        }
        lane.push_back(job);
    }

    fn take(&mut self, now: Tick) -> Option<MJob> {
        let mut aside = [0u64; 3];
        let mut reserving = false;
        for i in 0..self.ready.len() {
            let job = &self.lanes[&self.ready[i]][0];
            let need = [job.weight, job.mem, job.gpus];
            // What it does not need, it takes nothing of.
            if (0..3).all(|r| need[r] == 0 || need[r] + aside[r] <= self.free[r]) {
                let key = self.ready.remove(i);
                let job = self.lanes.get_mut(&key).unwrap().pop_front().unwrap();
                for (free, need) in self.free.iter_mut().zip(need) {
                    *free -= need;
                }
                self.busy.insert(key);
                return Some(job);
            }
            if !reserving && now - job.queued_at >= self.reserve_after {
                reserving = true;
                aside = need;
            }
        }
        None
    }

    fn release(&mut self, job: &MJob) {
        for (free, need) in self.free.iter_mut().zip([job.weight, job.mem, job.gpus]) {
            *free += need;
        }
        self.busy.remove(&job.key);
        if self.lanes[&job.key].is_empty() {
            self.lanes.remove(&job.key);
        } else {
            self.ready.push(Arc::clone(&job.key));
        }
    }
}

struct Harness {
    s: Scheduler,
    m: Model,
    setup: Setup,
    now: Tick,
    next_seq: Seq,
    /// Running: (job, the gpu units it holds), oldest first.
    running: Vec<(MJob, Vec<Arc<str>>)>,
    /// Per key, the seqs admitted and not yet started, in admission order.
    pending: HashMap<Arc<str>, VecDeque<Seq>>,
    /// Each job's weight.
    weights: HashMap<Seq, u64>,
}

impl Harness {
    fn new(setup: Setup) -> Self {
        let mut s = Scheduler::with_policy(
            Limits {
                max_concurrent: setup.cap,
                max_queued: usize::MAX,
            },
            Policy {
                reserve_after: ms(setup.reserve_after),
                ..Policy::default()
            },
        );
        s.set_resources(vec![
            Resource {
                name: Arc::from("mem"),
                stock: Stock::Count(setup.mem),
            },
            Resource {
                name: Arc::from("gpu"),
                stock: Stock::Units((0..setup.gpus).map(|i| Arc::from(i.to_string())).collect()),
            },
        ]);
        Harness {
            s,
            m: Model {
                free: [setup.cap as u64, setup.mem, setup.gpus],
                reserve_after: ms(setup.reserve_after),
                ..Model::default()
            },
            setup,
            now: Tick::ZERO,
            next_seq: 1,
            running: Vec::new(),
            pending: HashMap::new(),
            weights: HashMap::new(),
        }
    }

    fn admit(&mut self, key: Arc<str>, weight: u32, mem: u64, gpus: u64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut resources = Vec::new();
        if mem > 0 {
            resources.push((0, mem));
        }
        if gpus > 0 {
            resources.push((1, gpus));
        }
        // A job that declares nothing is weight 1 with no resource: both spellings are used.
        let needs =
            (weight != 1 || !resources.is_empty()).then(|| Arc::new(Needs { weight, resources }));
        let req = JobRequest {
            seq,
            key: Arc::clone(&key),
            rank: 0,
            timeout: None,
            weight: 0,
            needs,
        };
        assert!(matches!(
            self.s.admit(req, self.now),
            Admission::Queued { .. }
        ));
        self.m.admit(MJob {
            seq,
            key: Arc::clone(&key),
            weight: u64::from(weight),
            mem,
            gpus,
            queued_at: self.now,
        });
        self.pending.entry(key).or_default().push_back(seq);
        self.weights.insert(seq, u64::from(weight));
        self.check();
    }

    /// One take, checked against the model. Whether a job started.
    fn take(&mut self) -> bool {
        // What the core says a waiting key is short of agrees with whether it may start.
        let ready: Vec<Arc<str>> = self.m.ready.clone();
        let got = self.s.take(self.now);
        let want = self.m.take(self.now);
        match (&got, &want) {
            (None, None) => {
                for key in &ready {
                    let short = self.s.short_of(key, self.now);
                    assert!(short.is_some(), "key {key} fits but nothing started");
                }
                false
            }
            (Some(start), Some(job)) => {
                assert_eq!(
                    (start.seq, &start.key),
                    (job.seq, &job.key),
                    "which job starts"
                );
                let grant = start.grant.as_deref();
                assert_eq!(grant.map_or(1, |g| u64::from(g.weight)), job.weight);
                let part = |name: &str| grant.and_then(|g| g.part(name));
                assert_eq!(part("mem").map_or(0, |p| p.amount), job.mem);
                let gpus: Vec<Arc<str>> =
                    part("gpu").map_or(Vec::new(), |p| p.units().map(Arc::from).collect());
                assert_eq!(gpus.len() as u64, job.gpus);
                let lane = self.pending.get_mut(&job.key).unwrap();
                assert_eq!(
                    lane.pop_front(),
                    Some(job.seq),
                    "key {} out of order",
                    job.key
                );
                self.running.push((job.clone(), gpus));
                self.check();
                true
            }
            _ => panic!("core took {got:?}, the model {want:?}"),
        }
    }

    fn release(&mut self, index: usize) {
        let (job, _) = self.running.remove(index);
        assert!(matches!(self.s.release(job.seq), Released::Done { .. }));
        self.m.release(&job);
        self.check();
    }

    /// The invariants over what runs now.
    fn check(&self) {
        let weight: u64 = self.running.iter().map(|(j, _)| j.weight).sum();
        assert!(
            weight <= self.setup.cap as u64,
            "weight {weight} over the cap"
        );
        let mem: u64 = self.running.iter().map(|(j, _)| j.mem).sum();
        assert!(mem <= self.setup.mem, "mem {mem} over capacity");
        let mut units = BTreeSet::new();
        for (_, gpus) in &self.running {
            for unit in gpus {
                assert!(units.insert(Arc::clone(unit)), "gpu {unit} held twice");
            }
        }
        let waiting: u64 = self
            .pending
            .values()
            .flatten()
            .map(|s| self.weights[s])
            .sum();
        assert_eq!(self.s.queued_weight() as u64, waiting, "queued weight");
        let keys: BTreeSet<&Arc<str>> = self.running.iter().map(|(j, _)| &j.key).collect();
        assert_eq!(keys.len(), self.running.len(), "two jobs of one key run");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn weights_and_resources_hold_and_every_job_starts(
        (setup, ops) in setup().prop_flat_map(|s| (Just(s), ops(s)))
    ) {
        let mut h = Harness::new(setup);
        for op in ops {
            match op {
                Op::Admit(key, weight, mem, gpus) => h.admit(Arc::from(KEYS[key]), weight, mem, gpus),
                Op::Take => {
                    h.take();
                }
                Op::Release(i) => {
                    if !h.running.is_empty() {
                        let i = i.index(h.running.len());
                        h.release(i);
                    }
                }
                Op::Advance(n) => h.now += ms(n),
            }
        }
        // Liveness: running jobs end oldest first, one each round, while a light job on a new
        // key arrives every other round; every job admitted above starts within the bound.
        let mut rounds = 0;
        let bound = 20 + 4 * (h.next_seq as usize) * (setup.cap + 2);
        let mut light = 0;
        while h.pending.values().any(|lane| lane.iter().any(|&seq| seq < 1_000_000)) {
            prop_assert!(rounds < bound, "jobs still waiting after {rounds} rounds: {:?}", h.pending);
            while h.take() {}
            if h.running.is_empty() {
                prop_assert!(h.pending.values().all(VecDeque::is_empty), "nothing runs, jobs wait");
            } else {
                h.release(0);
            }
            if rounds % 2 == 0 {
                light += 1;
                let seq = h.next_seq;
                h.next_seq = seq.max(1_000_000);
                h.admit(Arc::from(format!("light{light}")), 1, 0, 0);
            }
            h.now += ms(10);
            rounds += 1;
        }
    }
}

fn heavy(seq: Seq, key: &str, weight: u32) -> JobRequest {
    JobRequest {
        seq,
        key: Arc::from(key),
        rank: 0,
        timeout: None,
        weight: 0,
        needs: Some(Arc::new(Needs {
            weight,
            resources: Vec::new(),
        })),
    }
}

#[test]
fn the_queue_is_bounded_by_weight_too() {
    let mut s = Scheduler::with_policy(
        Limits {
            max_concurrent: 3,
            max_queued: 100,
        },
        Policy {
            max_queued_weight: 5,
            heaviest: 3,
            on_full: OnFull::Reject,
            ..Policy::default()
        },
    );
    assert!(s.has_room());
    assert!(matches!(
        s.admit(heavy(1, "a", 3), ms(0)),
        Admission::Queued { .. }
    ));
    // 3 + 3 would pass 5: input waits under --on-full wait, though a lighter job still fits.
    assert!(!s.has_room());
    assert!(matches!(
        s.admit(heavy(2, "a", 2), ms(0)),
        Admission::Queued { .. }
    ));
    assert_eq!(s.queued_weight(), 5);
    assert_eq!(s.admit(heavy(3, "b", 1), ms(0)), Admission::Full);
    let start = s.take(ms(0)).expect("job 1 starts");
    assert_eq!((start.seq, s.queued_weight()), (1, 2));
    assert!(s.has_room());
    assert!(matches!(
        s.admit(heavy(3, "b", 3), ms(0)),
        Admission::Queued { .. }
    ));
    assert_eq!(s.queued_weight(), 5);
    assert_eq!(s.drain(ms(1)).len(), 2);
    assert_eq!(s.queued_weight(), 0);
}

#[test]
fn a_coalesced_job_gives_back_the_weight_of_the_one_it_replaces() {
    let mut s = Scheduler::with_policy(
        Limits {
            max_concurrent: 4,
            max_queued: 100,
        },
        Policy {
            coalesce_latest: true,
            max_queued_weight: 4,
            heaviest: 4,
            ..Policy::default()
        },
    );
    assert!(matches!(
        s.admit(heavy(1, "a", 4), ms(0)),
        Admission::Superseding { .. }
    ));
    let _ = s.take(ms(0)).expect("job 1 starts");
    assert!(matches!(
        s.admit(heavy(2, "a", 3), ms(0)),
        Admission::Superseding { .. }
    ));
    // Job 3 replaces job 2: 3 - 3 + 4 fits in 4.
    match s.admit(heavy(3, "a", 4), ms(0)) {
        Admission::Superseding { replaced, .. } => assert_eq!(replaced, Some(2)),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.queued_weight(), 4);
}

/// The weight bound, like `max_queued`, is on jobs that wait: a job whose weight fits in the
/// free part of the cap, its key idle, starts at once and is admitted past it; one that does
/// not fit is refused.
#[test]
fn a_job_that_fits_now_is_admitted_past_the_weight_bound() {
    let mut s = Scheduler::with_policy(
        Limits {
            max_concurrent: 4,
            max_queued: 100,
        },
        Policy {
            max_queued_weight: 2,
            heaviest: 2,
            on_full: OnFull::Reject,
            ..Policy::default()
        },
    );
    assert!(matches!(
        s.admit(heavy(1, "a", 2), ms(0)),
        Admission::Queued { .. }
    ));
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(1));
    assert!(matches!(
        s.admit(heavy(2, "a", 2), ms(0)),
        Admission::Queued { .. }
    ));
    assert_eq!(s.queued_weight(), 2);
    assert_eq!(
        s.admit(heavy(3, "b", 3), ms(1)),
        Admission::Full,
        "3 > 2 free"
    );
    assert!(matches!(
        s.admit(heavy(4, "b", 2), ms(1)),
        Admission::Queued { ahead: 0 }
    ));
    assert_eq!(s.take(ms(1)).map(|st| st.seq), Some(4));
    assert_eq!(s.queued_weight(), 2);
    assert_eq!(
        s.admit(heavy(5, "c", 1), ms(1)),
        Admission::Full,
        "the cap is full"
    );
}
