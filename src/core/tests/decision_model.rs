//! A property test of the decision layer the shell drives (offer, take, spawned, spawn
//! failures, finish, expire_turns, signals) on a virtual clock, against a simple reference
//! ledger that knows only the contract: every job offered ends exactly once (a skipped one at once), a
//! run is stopped at most once and only for the first reason, an outcome is `interrupted`
//! exactly when a stop the core ordered reached the running child, nothing starts or is
//! admitted once the run halts, `--fail-fast` halts once, after the first failure for good,
//! and a deferred spawn comes back as the same run.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use proptest::prelude::*;
use proptest::sample::Index;

use super::super::*;
use super::ms;

const KEYS: [&str; 3] = ["a", "b", "c"];

#[derive(Debug, Clone)]
enum Op {
    Offer {
        key: usize,
        timeout: Option<u64>,
        skip: bool,
    },
    Take,
    /// The running run at this index ended: exit status, and whether a stop reached it first.
    End(Index, i32, bool),
    Shortage {
        descriptors: bool,
    },
    SpawnFails,
    Advance(u64),
    Wake,
    Signal,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..KEYS.len(), prop::option::weighted(0.3, 1u64..40), prop::bool::weighted(0.1))
            .prop_map(|(key, timeout, skip)| Op::Offer { key, timeout, skip }),
        5 => Just(Op::Take),
        5 => (any::<Index>(), prop_oneof![Just(0), Just(1), Just(143)], any::<bool>())
            .prop_map(|(i, code, stopped)| Op::End(i, code, stopped)),
        1 => any::<bool>().prop_map(|descriptors| Op::Shortage { descriptors }),
        1 => Just(Op::SpawnFails),
        2 => (0u64..30).prop_map(Op::Advance),
        2 => Just(Op::Wake),
        1 => Just(Op::Signal),
    ]
}

/// What the reference ledger knows of a run in flight.
#[derive(Debug)]
struct Flight {
    members: Vec<Seq>,
    /// Taken, not yet spawned (the spawn decision is pending).
    spawned: bool,
    /// The reason of the one stop ordered, if any.
    stop: Option<StopReason>,
}

struct Harness {
    s: Scheduler,
    now: Tick,
    next_seq: Seq,
    policy: Policy,
    /// Jobs offered and not yet ended.
    open: BTreeSet<Seq>,
    flights: HashMap<Seq, Flight>,
    halted: Option<StopReason>,
    halts: usize,
    /// Descriptor shortages met alone since the last spawn that succeeded.
    lone_shortages: u32,
    /// `--max-queued`.
    max_queued: usize,
}

impl Harness {
    fn account(&mut self, account: &Account, step: usize) {
        self.account_of(account, step, false);
    }

    /// Checks `account`; `superseded` when its run was being stopped for a newer job of its
    /// key (`--cancel-in-progress`), which no retry follows.
    fn account_of(&mut self, account: &Account, step: usize, superseded: bool) {
        assert!(
            self.open.remove(&account.seq),
            "step {step}: seq {} ended twice or was never offered: {account:?}",
            account.seq
        );
        assert_eq!(
            account.tries.len(),
            account.attempts as usize,
            "step {step}: one try per attempt: {account:?}"
        );
        for (i, tried) in account.tries.iter().enumerate() {
            assert!(tried.started_at <= tried.ended_at, "step {step}: {tried:?}");
            let last = i + 1 == account.tries.len();
            if !last {
                assert!(
                    matches!(tried.outcome, Outcome::Failed(_)),
                    "step {step}: a try retried without failing: {account:?}"
                );
            } else if account.in_flight {
                // A try that failed with tries left once the run stops: the job is recorded
                // stopped before its retry.
                let want = match (tried.outcome, self.halted) {
                    (Outcome::Failed(_), Some(reason))
                        if account.attempts <= self.policy.retries && !superseded =>
                    {
                        Outcome::Interrupted(reason)
                    }
                    (outcome, _) => outcome,
                };
                assert_eq!(want, account.outcome, "step {step}: {account:?}");
            }
        }
        crate::core::tests::assert_waits_add_up(
            &account.waits,
            crate::core::tests::told_wait(account),
            &format!("step {step}: seq {}", account.seq),
        );
        if account.superseded_by.is_some() {
            assert_eq!(
                account.outcome,
                Outcome::Interrupted(StopReason::Superseded),
                "step {step}: superseded_by on another outcome"
            );
        }
    }

    fn halt(&mut self, halt: &Halt, step: usize) {
        self.halts += 1;
        self.halted.get_or_insert(halt.reason);
        for account in &halt.drained {
            assert_eq!(
                account.outcome,
                Outcome::Interrupted(halt.reason),
                "step {step}"
            );
            assert!(!account.in_flight);
            self.account(account, step);
        }
        for stop in &halt.stops {
            self.ordered(stop, step);
        }
    }

    fn ordered(&mut self, stop: &StopOrder, step: usize) {
        let flight = self
            .flights
            .get_mut(&stop.seq)
            .unwrap_or_else(|| panic!("step {step}: a stop for {} not in flight", stop.seq));
        assert!(
            flight.stop.is_none(),
            "step {step}: stopped twice: {stop:?}"
        );
        flight.stop = Some(stop.reason);
    }

    fn finished(&mut self, seq: Seq, finished: Finished, facts: RunFacts, step: usize) {
        let flight = self.flights.remove(&seq).expect("in flight");
        assert_eq!(finished.members, flight.members, "step {step}");
        let want = match facts.exit {
            None => Outcome::Failed(FailReason::SpawnError),
            Some(exit) => classify(exit, flight.stop.filter(|_| facts.stopped_while_running)),
        };
        assert_eq!(finished.outcome, want, "step {step}: {flight:?} {facts:?}");
        if finished.retry {
            assert!(finished.accounts.is_empty() && finished.halt.is_none());
            assert!(
                matches!(want, Outcome::Failed(_)),
                "step {step}: only failures retry"
            );
            return;
        }
        let seqs: Vec<Seq> = finished.accounts.iter().map(|a| a.seq).collect();
        assert_eq!(seqs, flight.members, "step {step}");
        let superseded = flight.stop == Some(StopReason::Superseded);
        for account in &finished.accounts {
            assert!(account.in_flight);
            self.account_of(account, step, superseded);
        }
        let failed = matches!(want, Outcome::Failed(_));
        let fail_fast_due = self.policy.fail_fast && failed && self.halted.is_none();
        assert_eq!(finished.halt.is_some(), fail_fast_due, "step {step}");
        if let Some(halt) = &finished.halt {
            assert_eq!(halt.reason, StopReason::FailFast);
            self.halt(halt, step);
        }
    }

    /// Takes the next job and spawns it at once, as the shell does; most spawns succeed.
    fn take(&mut self, step: usize) -> Option<Seq> {
        let start = self.s.take(self.now)?;
        assert!(self.halted.is_none(), "step {step}: a start after the halt");
        for member in &start.batch {
            assert!(self.open.contains(member), "step {step}: {start:?}");
        }
        self.flights.insert(
            start.seq,
            Flight {
                members: start.batch.clone(),
                spawned: false,
                stop: None,
            },
        );
        self.s.spawned(start.seq, self.now);
        self.lone_shortages = 0;
        self.flights.get_mut(&start.seq).unwrap().spawned = true;
        Some(start.seq)
    }

    fn running(&self) -> Vec<Seq> {
        let mut seqs: Vec<Seq> = self
            .flights
            .iter()
            .filter(|(_, f)| f.spawned)
            .map(|(&seq, _)| seq)
            .collect();
        seqs.sort_unstable();
        seqs
    }

    fn step(&mut self, step: usize, op: &Op) {
        match *op {
            Op::Offer { key, timeout, skip } => {
                if !self.s.may_read_input() && self.policy.on_full == OnFull::Wait && !skip {
                    // The shell would not read now.
                    assert!(!self.s.has_room() || self.s.intake_closed().is_some());
                    return;
                }
                let seq = self.next_seq;
                self.next_seq += 1;
                let request = JobRequest {
                    seq,
                    key: Arc::from(KEYS[key]),
                    rank: 0,
                    timeout: timeout.map(ms),
                    weight: 0,
                    needs: None,
                };
                let queued_before = self.s.queued();
                // Either reason a report gives, by turns.
                let why = skip.then_some(if seq % 2 == 0 {
                    SkipReason::SucceededBefore
                } else {
                    SkipReason::SupersededBefore
                });
                match self.s.offer(request, why, self.now) {
                    Offer::Skipped(account) => {
                        let why = why.expect("skipped only when the report says so");
                        assert_eq!((account.seq, account.outcome), (seq, Outcome::Skipped(why)));
                        self.open.insert(seq);
                        self.account(&account, step);
                    }
                    Offer::Refused(account) => {
                        assert!(!skip);
                        match account.outcome {
                            Outcome::Interrupted(reason) => {
                                assert!(self.halted.is_some(), "step {step}: refused unhalted");
                                assert_eq!(Some(reason), self.halted, "step {step}");
                            }
                            Outcome::Rejected(RejectReason::QueueFull) => {
                                assert_eq!(self.policy.on_full, OnFull::Reject);
                            }
                            other => panic!("step {step}: refused as {other:?}"),
                        }
                        self.open.insert(seq);
                        self.account(&account, step);
                    }
                    Offer::Queued {
                        replaced,
                        cancel,
                        retries,
                        ..
                    } => {
                        assert!(!skip && self.halted.is_none(), "step {step}: admitted");
                        self.open.insert(seq);
                        let replacing = replaced.is_some();
                        if let Some(account) = replaced {
                            self.account(&account, step);
                        }
                        for account in &retries {
                            assert_eq!(
                                account.outcome,
                                Outcome::Interrupted(StopReason::Superseded),
                                "step {step}: a superseded retry"
                            );
                            self.account(account, step);
                        }
                        if let Some(stop) = cancel {
                            assert_eq!(stop.reason, StopReason::Superseded);
                            self.ordered(&stop, step);
                        }
                        if !replacing && queued_before - retries.len() >= self.max_queued {
                            // Past the bound only for a job the shell's next take starts.
                            let taken = self
                                .flights
                                .values()
                                .all(|f| f.spawned)
                                .then(|| self.take(step));
                            assert_eq!(
                                taken.flatten(),
                                Some(seq),
                                "step {step}: admitted past --max-queued and not started"
                            );
                        }
                    }
                }
            }
            Op::Take => {
                if self.flights.values().any(|f| !f.spawned) {
                    return;
                }
                self.take(step);
            }
            Op::Shortage { .. } | Op::SpawnFails => {
                let Some(start) = self.s.take(self.now) else {
                    return;
                };
                let failure = match *op {
                    Op::Shortage { descriptors } => SpawnFailure::Shortage { descriptors },
                    _ => SpawnFailure::Failed,
                };
                let alone = self.flights.is_empty();
                // Out of descriptors alone twice in a row (no spawn succeeded between): ends.
                let lone_descriptors =
                    matches!(failure, SpawnFailure::Shortage { descriptors: true }) && alone;
                if lone_descriptors {
                    self.lone_shortages += 1;
                }
                self.flights.insert(
                    start.seq,
                    Flight {
                        members: start.batch.clone(),
                        spawned: false,
                        stop: None,
                    },
                );
                match self.s.spawn_failed(start.seq, failure, self.now) {
                    SpawnVerdict::Deferred {
                        until,
                        last_try_next,
                    } => {
                        assert!(
                            matches!(failure, SpawnFailure::Shortage { .. })
                                && (!lone_descriptors || self.lone_shortages < 2),
                            "step {step}: deferred {failure:?}"
                        );
                        assert_eq!(last_try_next, lone_descriptors, "step {step}");
                        assert!(until > self.now);
                        self.flights.remove(&start.seq);
                        assert_eq!(self.s.take(self.now), None, "step {step}: held");
                        // It comes back first, as the same run.
                        let again = self.s.take(until).expect("the deferred run");
                        assert_eq!(again.batch, start.batch, "step {step}");
                        assert_eq!(again.attempt, start.attempt, "step {step}");
                        self.now = self.now.max(until);
                        self.flights.insert(
                            again.seq,
                            Flight {
                                members: again.batch.clone(),
                                spawned: true,
                                stop: None,
                            },
                        );
                        self.s.spawned(again.seq, self.now);
                        self.lone_shortages = 0;
                    }
                    SpawnVerdict::Ended(finished) => {
                        assert!(
                            !matches!(failure, SpawnFailure::Shortage { .. })
                                || (lone_descriptors && self.lone_shortages >= 2),
                            "step {step}: ended {failure:?}"
                        );
                        let facts = RunFacts {
                            exit: None,
                            stopped_while_running: false,
                            ended_at: self.now,
                        };
                        self.finished(start.seq, finished, facts, step);
                    }
                }
            }
            Op::End(i, code, stopped) => {
                let running = self.running();
                if running.is_empty() {
                    return;
                }
                let seq = running[i.index(running.len())];
                let facts = RunFacts {
                    exit: Some(ExitFacts::Exited(code)),
                    stopped_while_running: stopped,
                    ended_at: self.now,
                };
                let finished = self.s.finish(seq, facts, self.now).expect("in flight");
                self.finished(seq, finished, facts, step);
            }
            Op::Advance(d) => self.now += ms(d),
            Op::Wake => {
                if let Some(at) = self.s.next_deadline() {
                    self.now = self.now.max(at);
                }
                for stop in self.s.expire_turns(self.now) {
                    assert_eq!(stop.reason, StopReason::Timeout);
                    self.ordered(&stop, step);
                }
            }
            Op::Signal => match self.s.signal_received(Signal::SIGINT, self.now) {
                SignalVerdict::Halt(halt) => {
                    assert_eq!(halt.reason, StopReason::Shutdown);
                    assert!(halt.close_input);
                    self.halt(&halt, step);
                }
                SignalVerdict::Kill(runs) => assert_eq!(runs, self.running(), "step {step}"),
            },
        }
        assert!(
            self.halts <= 2,
            "step {step}: fail-fast then shutdown at most"
        );
    }

    /// Ends everything: every run ends, waiting jobs are drained by a halt.
    fn finish(&mut self, step: usize) {
        if self.halted.is_none() {
            if let SignalVerdict::Halt(halt) = self.s.signal_received(Signal::SIGTERM, self.now) {
                self.halt(&halt, step);
            }
        }
        while let Some(&seq) = self.running().first() {
            let facts = RunFacts {
                exit: Some(ExitFacts::Exited(0)),
                stopped_while_running: true,
                ended_at: self.now,
            };
            let finished = self.s.finish(seq, facts, self.now).expect("in flight");
            self.finished(seq, finished, facts, step);
        }
        assert!(self.s.is_idle(), "everything ended");
        assert!(self.open.is_empty(), "jobs without an end: {:?}", self.open);
    }
}

fn run(policy: Policy, limits: Limits, ops: &[Op]) {
    let mut h = Harness {
        s: Scheduler::with_policy(limits, policy),
        now: Duration::ZERO,
        next_seq: 1,
        policy,
        open: BTreeSet::new(),
        flights: HashMap::new(),
        halted: None,
        halts: 0,
        lone_shortages: 0,
        max_queued: limits.max_queued,
    };
    for (step, op) in ops.iter().enumerate() {
        h.step(step, op);
    }
    h.finish(ops.len());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn the_decisions_keep_the_contract(
        max_concurrent in 1usize..4,
        max_queued in 1usize..6,
        fail_fast in any::<bool>(),
        reject in any::<bool>(),
        cancel_in_progress in prop::bool::weighted(0.3),
        retries in 0u32..2,
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let policy = Policy {
            fail_fast,
            on_full: if reject { OnFull::Reject } else { OnFull::Wait },
            cancel_in_progress,
            retries,
            ..Policy::default()
        };
        run(policy, Limits { max_concurrent, max_queued }, &ops);
    }
}
