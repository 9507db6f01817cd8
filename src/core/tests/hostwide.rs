//! Host-wide keys (`--lock-dir`): unit tests of when a key's lock is asked for, taken under and
//! let go, and a property test of several schedulers (processes) sharing a reference lock
//! table that grants each key first come, first served: at most one job per key in flight
//! across all of them, every job runs, and nothing stays held or queued at the end.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use proptest::prelude::*;
use proptest::sample::Index;

use super::super::*;
use super::{job, keys, ms};

fn shared(max_concurrent: usize) -> Scheduler {
    let mut s = Scheduler::new(Limits {
        max_concurrent,
        max_queued: 100,
    });
    s.share_keys();
    s
}

fn ended(code: i32, at: Tick) -> RunFacts {
    RunFacts {
        exit: Some(ExitFacts::Exited(code)),
        stopped_while_running: false,
        ended_at: at,
    }
}

#[test]
fn nothing_is_taken_before_the_key_is_held_and_other_keys_go_on() {
    let mut s = shared(2);
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(job(2, "b", 0), ms(0));
    assert_eq!(s.take(ms(0)), None, "no key is held yet");
    let orders = s.host_keys();
    assert_eq!(keys(&orders.acquire), ["a", "b"]);
    assert!(orders.release.is_empty());
    assert!(s.host_keys().is_empty(), "each key is asked for once");
    // `a` is held by another process for a while: `b` goes first, and takes the only slot
    // it needs, not two.
    assert!(s.host_key_acquired("b", ms(0)));
    let start = s.take(ms(1)).expect("b is held");
    assert_eq!((start.seq, start.slot), (2, 1));
    assert_eq!(s.take(ms(1)), None, "a waits for its lock, holding no slot");
    assert!(s.host_key_acquired("a", ms(0)));
    assert_eq!(s.take(ms(2)).map(|st| (st.seq, st.slot)), Some((1, 2)));
}

#[test]
fn the_lock_goes_when_the_job_ends_and_more_jobs_of_the_key_ask_again() {
    let mut s = shared(1);
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(job(2, "a", 0), ms(0));
    let _ = s.host_keys();
    assert!(s.host_key_acquired("a", ms(0)));
    let start = s.take(ms(0)).expect("held");
    assert!(s.host_keys().is_empty(), "held while its job runs");
    let _ = s.finish(start.seq, ended(0, ms(5)), ms(5));
    assert_eq!(s.take(ms(5)), None, "the next job waits for the next grant");
    let orders = s.host_keys();
    assert_eq!(keys(&orders.release), ["a"]);
    assert_eq!(
        keys(&orders.acquire),
        ["a"],
        "asked again, behind other processes"
    );
    assert!(s.host_key_acquired("a", ms(0)));
    assert_eq!(s.take(ms(6)).map(|st| st.seq), Some(2));
}

#[test]
fn a_retry_keeps_the_lock_through_its_delay() {
    let mut s = Scheduler::with_policy(
        Limits {
            max_concurrent: 1,
            max_queued: 10,
        },
        Policy {
            retries: 1,
            retry_delay: ms(50),
            ..Policy::default()
        },
    );
    s.share_keys();
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.host_keys();
    assert!(s.host_key_acquired("a", ms(0)));
    let start = s.take(ms(0)).expect("held");
    let finished = s.finish(start.seq, ended(1, ms(5)), ms(5)).expect("ran");
    assert!(finished.retry);
    assert!(s.host_keys().is_empty(), "kept, and not asked for again");
    let _ = s.expire(ms(55));
    assert_eq!(s.take(ms(55)).map(|st| st.attempt), Some(2));
    let _ = s.finish(1, ended(0, ms(60)), ms(60));
    assert_eq!(keys(&s.host_keys().release), ["a"]);
}

#[test]
fn a_lock_granted_after_its_jobs_were_dropped_is_let_go() {
    let mut s = shared(1);
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(job(2, "b", 0), ms(0));
    let _ = s.host_keys();
    assert!(s.host_key_acquired("b", ms(0)));
    let drained = s.drain(ms(1));
    assert_eq!(drained.len(), 2);
    assert!(!s.host_key_acquired("a", ms(0)), "no job needs it now");
    let orders = s.host_keys();
    assert_eq!(keys(&orders.release), ["b"]);
    assert!(orders.acquire.is_empty());
}

#[test]
fn at_most_the_cap_plus_the_lookahead_is_asked_for() {
    let mut s = shared(2);
    for seq in 1..=100 {
        let _ = s.admit(job(seq, &format!("k{seq}"), 0), ms(0));
    }
    let asked = s.host_keys().acquire;
    assert_eq!(asked.len(), 2 + HOST_LOOKAHEAD);
    assert_eq!(&*asked[0], "k1");
    assert!(
        s.host_keys().acquire.is_empty(),
        "no room until one is granted"
    );
    assert!(s.host_key_acquired("k3", ms(0)));
    assert!(
        s.host_keys().acquire.is_empty(),
        "held and idle still counts"
    );
    let _ = s.take(ms(1)).expect("k3 is held");
    assert_eq!(
        keys(&s.host_keys().acquire),
        [&*format!("k{}", 2 + HOST_LOOKAHEAD + 1)]
    );
}

#[test]
fn where_descriptors_are_few_fewer_keys_are_asked_for_and_always_one() {
    let mut s = shared(8);
    s.limit_host_requests(3);
    for seq in 1..=100 {
        let _ = s.admit(job(seq, &format!("k{seq}"), 0), ms(0));
    }
    assert_eq!(keys(&s.host_keys().acquire), ["k1", "k2", "k3"]);
    assert!(s.host_key_acquired("k1", ms(0)));
    let _ = s.take(ms(1)).expect("k1 is held");
    assert_eq!(
        keys(&s.host_keys().acquire),
        ["k4"],
        "k1's job runs: room for one"
    );
    let mut s = shared(8);
    s.limit_host_requests(0);
    for seq in 1..=3 {
        let _ = s.admit(job(seq, &format!("k{seq}"), 0), ms(0));
    }
    assert_eq!(keys(&s.host_keys().acquire), ["k1"], "never none");
}

#[test]
fn keys_short_of_descriptors_with_nothing_in_flight_are_given_up_and_their_jobs_taken() {
    let mut s = shared(2);
    for (seq, key) in [(1, "a"), (2, "b"), (3, "a")] {
        let _ = s.admit(job(seq, key, 0), ms(0));
    }
    assert_eq!(keys(&s.host_keys().acquire), ["a", "b"]);
    // Twice each, in a row: once may be a moment's shortage.
    assert!(s.host_key_short("a", ms(1)).is_empty());
    assert!(s.host_key_short("b", ms(1)).is_empty());
    assert!(
        s.host_key_short("a", ms(2)).is_empty(),
        "b is short once only"
    );
    assert_eq!(keys(&s.host_key_short("b", ms(2))), ["a", "b"]);
    // Taken without the lock, for the shell to fail: nothing to let go, nothing asked.
    assert_eq!(s.take(ms(3)).map(|st| st.seq), Some(1));
    assert_eq!(s.take(ms(3)).map(|st| st.seq), Some(2));
    assert!(s.host_keys().is_empty(), "a's next job waits for a's job");
    let _ = s.spawn_failed(1, SpawnFailure::Failed, ms(4));
    let orders = s.host_keys();
    assert!(orders.release.is_empty(), "no lock was held");
    assert_eq!(keys(&orders.acquire), ["a"], "a's next job asks again");
    assert_eq!(s.take(ms(5)), None, "and is not taken without it");
}

#[test]
fn a_shortage_is_not_given_up_while_anything_of_the_run_may_free_a_descriptor() {
    let mut s = shared(2);
    for (seq, key) in [(1, "a"), (2, "b"), (3, "c")] {
        let _ = s.admit(job(seq, key, 0), ms(0));
    }
    assert_eq!(keys(&s.host_keys().acquire), ["a", "b", "c"]);
    // b's job runs, and c waits for another process: a's shortage waits for them.
    assert!(s.host_key_acquired("b", ms(0)));
    let start = s.take(ms(0)).expect("b is held");
    for at in 1..=5 {
        assert!(s.host_key_short("a", ms(at)).is_empty(), "b's job runs");
    }
    let _ = s.finish(start.seq, ended(0, ms(6)), ms(6));
    assert_eq!(keys(&s.host_keys().release), ["b"]);
    for at in 7..=10 {
        assert!(s.host_key_short("a", ms(at)).is_empty(), "c may be granted");
    }
    // c is short too from now on: twice each in a row, counted from b's end.
    assert!(s.host_key_short("c", ms(11)).is_empty());
    assert_eq!(keys(&s.host_key_short("c", ms(12))), ["a", "c"]);
}

#[test]
fn without_shared_keys_nothing_is_asked_for() {
    let mut s = Scheduler::new(Limits {
        max_concurrent: 1,
        max_queued: 10,
    });
    let _ = s.admit(job(1, "a", 0), ms(0));
    assert!(s.host_keys().is_empty());
    assert!(s.take(ms(0)).is_some());
}

// ---------------------------------------------------------------------------------------------
// Several schedulers sharing a reference lock table
// ---------------------------------------------------------------------------------------------

const KEYS: [&str; 3] = ["a", "b", "c"];
const PROCESSES: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    Offer {
        process: usize,
        key: usize,
    },
    /// The process applies its lock orders (the shell's turn of the loop) and takes jobs.
    Turn(usize),
    /// The lock table hands each free key to the first process waiting for it.
    Grant,
    /// A running job of the process ends (exit status 0 or 1).
    End(usize, Index, i32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..PROCESSES, 0..KEYS.len()).prop_map(|(process, key)| Op::Offer { process, key }),
        4 => (0..PROCESSES).prop_map(Op::Turn),
        3 => Just(Op::Grant),
        4 => (0..PROCESSES, any::<Index>(), prop_oneof![Just(0), Just(1)])
            .prop_map(|(p, i, code)| Op::End(p, i, code)),
    ]
}

/// The lock directory as the contract sees it: per key a holder and a first-come queue.
#[derive(Default)]
struct LockTable {
    holder: HashMap<Arc<str>, usize>,
    queue: HashMap<Arc<str>, VecDeque<usize>>,
}

struct World {
    processes: Vec<Scheduler>,
    table: LockTable,
    now: Tick,
    next_seq: Seq,
    /// Jobs offered and not finished for good.
    open: Vec<Seq>,
    /// Runs in flight: (process, seq, key).
    running: Vec<(usize, Seq, Arc<str>)>,
}

impl World {
    fn new(policy: Policy) -> Self {
        let processes = (0..PROCESSES)
            .map(|_| {
                let mut s = Scheduler::with_policy(
                    Limits {
                        max_concurrent: 2,
                        max_queued: 50,
                    },
                    policy,
                );
                s.share_keys();
                s
            })
            .collect();
        World {
            processes,
            table: LockTable::default(),
            now: Tick::ZERO,
            next_seq: 1,
            open: Vec::new(),
            running: Vec::new(),
        }
    }

    fn apply(&mut self, op: &Op) {
        self.now += ms(1);
        match *op {
            Op::Offer { process, key } => {
                let seq = self.next_seq;
                self.next_seq += 1;
                if matches!(
                    self.processes[process].admit(job(seq, KEYS[key], 0), self.now),
                    Admission::Queued { .. }
                ) {
                    self.open.push(seq);
                }
            }
            Op::Turn(process) => self.turn(process),
            Op::Grant => self.grant(),
            Op::End(process, index, code) => {
                let mine = self.running.iter().filter(|r| r.0 == process).count();
                if mine > 0 {
                    self.end(process, index.index(mine), code);
                }
            }
        }
        self.check();
    }

    /// Ends the `nth` run in flight of `process` with exit status `code`.
    fn end(&mut self, process: usize, nth: usize, code: i32) {
        let at = (0..self.running.len())
            .filter(|&i| self.running[i].0 == process)
            .nth(nth)
            .expect("in range");
        let (_, seq, _) = self.running.remove(at);
        let finished = self.processes[process]
            .finish(seq, ended(code, self.now), self.now)
            .expect("the run was in flight");
        if !finished.retry {
            self.open.retain(|s| !finished.members.contains(s));
        }
        self.check();
    }

    fn turn(&mut self, process: usize) {
        let orders = self.processes[process].host_keys();
        for key in orders.release {
            assert_eq!(
                self.table.holder.remove(&key),
                Some(process),
                "{key} let go by a process that did not hold it"
            );
        }
        for key in orders.acquire {
            let queue = self.table.queue.entry(Arc::clone(&key)).or_default();
            assert!(!queue.contains(&process), "{key} asked for twice");
            assert_ne!(self.table.holder.get(&key), Some(&process));
            queue.push_back(process);
        }
        while let Some(start) = self.processes[process].take(self.now) {
            self.running.push((process, start.seq, start.key));
        }
    }

    fn grant(&mut self) {
        let waiting: Vec<Arc<str>> = self.table.queue.keys().cloned().collect();
        for key in waiting {
            if self.table.holder.contains_key(&key) {
                continue;
            }
            let queue = self.table.queue.get_mut(&key).expect("listed");
            let Some(process) = queue.pop_front() else {
                continue;
            };
            if queue.is_empty() {
                self.table.queue.remove(&key);
            }
            if self.processes[process].host_key_acquired(&key, ms(0)) {
                self.table.holder.insert(key, process);
            }
        }
    }

    /// At most one job per key in flight across every process, and only under its lock.
    fn check(&self) {
        for (process, seq, key) in &self.running {
            assert_eq!(
                self.table.holder.get(key),
                Some(process),
                "job {seq} of {key} runs in process {process} without the key's lock"
            );
        }
        let mut seen = HashMap::new();
        for (process, seq, key) in &self.running {
            if let Some(other) = seen.insert(Arc::clone(key), (*process, *seq)) {
                panic!("jobs {other:?} and {seq} of {key} in flight at once");
            }
        }
    }

    /// Runs everything to its end: every job ends, and no lock is held or asked for.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            if self.open.is_empty() && self.running.is_empty() {
                break;
            }
            for process in 0..PROCESSES {
                self.apply(&Op::Turn(process));
            }
            self.apply(&Op::Grant);
            self.now += ms(100);
            for s in &mut self.processes {
                let _ = s.expire(self.now);
            }
            if let Some(&(process, _, _)) = self.running.first() {
                self.end(process, 0, 0);
            }
        }
        assert!(self.open.is_empty(), "jobs never ran: {:?}", self.open);
        for process in 0..PROCESSES {
            self.apply(&Op::Turn(process));
        }
        assert!(
            self.table.holder.is_empty(),
            "still held: {:?}",
            self.table.holder
        );
        assert!(self.table.queue.is_empty(), "still asked for");
    }
}

proptest! {
    #[test]
    fn processes_sharing_keys_never_run_a_key_twice_and_leave_nothing_held(
        ops in prop::collection::vec(op(), 1..120),
        retries in 0u32..2,
    ) {
        let policy = Policy {
            retries,
            retry_delay: ms(u64::from(retries) * 20),
            ..Policy::default()
        };
        let mut world = World::new(policy);
        for op in &ops {
            world.apply(op);
        }
        world.settle();
    }
}

#[test]
fn a_lost_lock_stops_its_job_as_lock_lost_and_the_next_job_asks_again() {
    let mut s = shared(2);
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(job(2, "a", 0), ms(0));
    let _ = s.admit(job(3, "b", 0), ms(0));
    let _ = s.host_keys();
    assert!(s.host_key_acquired("a", ms(0)));
    assert!(s.host_key_acquired("b", ms(0)));
    let first = s.take(ms(0)).expect("a is held");
    let other = s.take(ms(0)).expect("b is held");
    assert_eq!((first.seq, other.seq), (1, 3));
    let stops = s.host_key_lost("a", ms(2));
    assert_eq!(
        stops,
        [StopOrder {
            seq: 1,
            signal: nix::sys::signal::Signal::SIGTERM,
            reason: StopReason::LockLost,
        }],
        "only the job of the key lost"
    );
    assert!(s.host_key_lost("a", ms(2)).is_empty(), "told once");
    let finished = s
        .finish(
            1,
            RunFacts {
                exit: Some(ExitFacts::Signaled(15)),
                stopped_while_running: true,
                ended_at: ms(3),
            },
            ms(3),
        )
        .expect("ran");
    assert_eq!(finished.outcome, Outcome::Interrupted(StopReason::LockLost));
    assert_eq!(s.take(ms(3)), None, "job 2 waits for a new grant");
    let orders = s.host_keys();
    assert!(orders.release.is_empty(), "a lost lock is not let go again");
    assert_eq!(keys(&orders.acquire), ["a"]);
    assert!(s.host_key_acquired("a", ms(4)));
    assert_eq!(s.take(ms(4)).map(|st| st.seq), Some(2));
    assert!(s.host_key_lost("c", ms(4)).is_empty(), "a key never held");
}
