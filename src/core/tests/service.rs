//! `lanes cancel KEY` and `lanes set -j N`: the key's waiting jobs dropped in lane order and its
//! running job stopped once; the cap changed without stopping anything, slots staying 1..=N.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use super::*;

#[test]
fn cancel_drops_the_keys_waiting_jobs_and_stops_its_running_one() {
    let mut s = sched(2, 100);
    for (seq, key) in [(1, "a"), (2, "b"), (3, "a"), (4, "a")] {
        admit(&mut s, job(seq, key, 0), ms(0));
    }
    assert_eq!(take_all(&mut s, ms(0)), vec![1, 2]);
    let cancel = s.cancel_key("a", ms(10));
    let dropped: Vec<Seq> = cancel.dropped.iter().map(|a| a.seq).collect();
    assert_eq!(dropped, vec![3, 4]);
    for account in &cancel.dropped {
        assert_eq!(account.outcome, Outcome::Interrupted(StopReason::Cancelled));
        assert_eq!(account.waited, Some(ms(10)));
        assert_eq!(account.attempts, 0);
    }
    assert_eq!(cancel.running, Some(1));
    let stop = cancel.stop.expect("the running job is stopped");
    assert_eq!((stop.seq, stop.reason), (1, StopReason::Cancelled));
    assert_eq!(stop.signal, nix::sys::signal::Signal::SIGTERM);
    assert_eq!(s.queued(), 0);
    // The run ends interrupted for the cancel.
    let finished = s
        .finish(
            1,
            RunFacts {
                exit: Some(ExitFacts::Signaled(15)),
                stopped_while_running: true,
                ended_at: ms(20),
            },
            ms(20),
        )
        .expect("in flight");
    assert_eq!(
        finished.outcome,
        Outcome::Interrupted(StopReason::Cancelled)
    );
    // The key takes new jobs, which start as usual; "b" was never touched.
    assert_eq!(admit(&mut s, job(5, "a", 0), ms(30)), 0);
    assert_eq!(take_all(&mut s, ms(30)), vec![5]);
    assert!(s.running_jobs().iter().any(|r| r.seq == 2));
}

#[test]
fn a_second_cancel_sends_no_second_stop_and_an_idle_key_is_a_no_op() {
    let mut s = sched(1, 100);
    admit(&mut s, job(1, "a", 0), ms(0));
    let _ = take(&mut s, ms(0));
    let first = s.cancel_key("a", ms(1));
    assert!(first.stop.is_some());
    let second = s.cancel_key("a", ms(2));
    assert_eq!((second.running, second.stop), (Some(1), None));
    let none = s.cancel_key("nobody", ms(3));
    assert!(none.dropped.is_empty() && none.running.is_none() && none.stop.is_none());
}

#[test]
fn a_job_of_a_cancelled_key_admitted_while_its_run_stops_waits_for_that_run() {
    let mut s = sched(4, 100);
    admit(&mut s, job(1, "a", 0), ms(0));
    let _ = take(&mut s, ms(0));
    let _ = s.cancel_key("a", ms(1));
    assert_eq!(admit(&mut s, job(2, "a", 0), ms(2)), 1);
    assert_eq!(take_all(&mut s, ms(2)), Vec::<Seq>::new());
    release(&mut s, 1);
    assert_eq!(take_all(&mut s, ms(3)), vec![2]);
}

#[test]
fn cancel_of_a_key_waiting_for_a_slot_takes_it_off_the_ready_line() {
    let mut s = sched(1, 100);
    admit(&mut s, job(1, "x", 0), ms(0));
    let _ = take(&mut s, ms(0));
    admit(&mut s, job(2, "a", 0), ms(0));
    admit(&mut s, job(3, "b", 0), ms(0));
    let cancel = s.cancel_key("a", ms(1));
    assert_eq!(cancel.dropped.len(), 1);
    assert_eq!(cancel.running, None);
    release(&mut s, 1);
    assert_eq!(take_all(&mut s, ms(2)), vec![3]);
    assert_eq!(s.lane_count(), 1);
}

#[test]
fn lowering_the_cap_stops_nothing_and_starts_fewer() {
    let mut s = sched(3, 100);
    for seq in 1..=6 {
        admit(&mut s, job(seq, &format!("k{seq}"), 0), ms(0));
    }
    assert_eq!(take_all(&mut s, ms(0)), vec![1, 2, 3]);
    assert_eq!(s.set_max_concurrent(1), 3);
    assert_eq!(s.running(), 3);
    release(&mut s, 1);
    assert!(s.take(ms(1)).is_none(), "two still run, the cap is 1");
    release(&mut s, 3);
    assert!(s.take(ms(1)).is_none());
    release(&mut s, 2);
    let start = take(&mut s, ms(2));
    assert_eq!((start.seq, start.slot), (4, 1));
    assert_eq!(s.set_max_concurrent(3), 1);
    let more: Vec<(Seq, u32)> = std::iter::from_fn(|| s.take(ms(3)))
        .map(|st| (st.seq, st.slot))
        .collect();
    assert_eq!(more, vec![(5, 2), (6, 3)]);
}

#[derive(Debug, Clone)]
enum Step {
    Admit(u8),
    Take,
    Release(prop::sample::Index),
    Cancel(u8),
    SetCap(u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u8..4).prop_map(Step::Admit),
        3 => Just(Step::Take),
        2 => any::<prop::sample::Index>().prop_map(Step::Release),
        1 => (0u8..4).prop_map(Step::Cancel),
        1 => (1u8..5).prop_map(Step::SetCap),
    ]
}

proptest! {
    /// Against a reference model: jobs run per key in admission order (a cancel drops the
    /// waiting ones, never reorders), at most one per key, never more than the cap in force
    /// when each starts, slots distinct and within the cap, and every job ends exactly once
    /// (started and released, or dropped by a cancel).
    #[test]
    fn cancel_and_cap_changes_keep_the_lanes_rules(steps in prop::collection::vec(step(), 1..80)) {
        let mut s = sched(2, 1000);
        let mut cap = 2usize;
        let mut next: Seq = 1;
        // The model: per key, the jobs admitted and not yet started or dropped, in order.
        let mut waiting: HashMap<String, Vec<Seq>> = HashMap::new();
        let mut running: Vec<(Seq, String, u32)> = Vec::new();
        let mut ended: HashSet<Seq> = HashSet::new();
        for step in steps {
            match step {
                Step::Admit(k) => {
                    let key = format!("k{k}");
                    let ahead = admit(&mut s, job(next, &key, 0), ms(0));
                    let lane = waiting.entry(key.clone()).or_default();
                    let busy = running.iter().any(|(_, rk, _)| *rk == key);
                    prop_assert_eq!(ahead, lane.len() + usize::from(busy));
                    lane.push(next);
                    next += 1;
                }
                Step::Take => {
                    while let Some(start) = s.take(ms(0)) {
                        let key = start.key.to_string();
                        prop_assert!(running.len() < cap, "cap {} exceeded", cap);
                        prop_assert!(!running.iter().any(|(_, rk, _)| *rk == key));
                        prop_assert!(start.slot as usize <= cap);
                        prop_assert!(!running.iter().any(|(_, _, slot)| *slot == start.slot));
                        let lane = waiting.get_mut(&key).expect("a started key had work");
                        prop_assert_eq!(lane.first().copied(), Some(start.seq));
                        lane.remove(0);
                        running.push((start.seq, key, start.slot));
                    }
                }
                Step::Release(index) => {
                    if !running.is_empty() {
                        let (seq, _, _) = running.remove(index.index(running.len()));
                        release(&mut s, seq);
                        prop_assert!(ended.insert(seq));
                    }
                }
                Step::Cancel(k) => {
                    let key = format!("k{k}");
                    let cancel = s.cancel_key(&key, ms(0));
                    let dropped: Vec<Seq> = cancel.dropped.iter().map(|a| a.seq).collect();
                    prop_assert_eq!(&dropped, &waiting.remove(&key).unwrap_or_default());
                    for seq in dropped {
                        prop_assert!(ended.insert(seq));
                    }
                    let model_running = running.iter().find(|(_, rk, _)| *rk == key).map(|r| r.0);
                    prop_assert_eq!(cancel.running, model_running);
                }
                Step::SetCap(n) => {
                    prop_assert_eq!(s.set_max_concurrent(usize::from(n)), cap);
                    cap = usize::from(n);
                }
            }
            let waiting_now: usize = waiting.values().map(Vec::len).sum();
            prop_assert_eq!(s.queued(), waiting_now);
            prop_assert_eq!(s.running(), running.len());
        }
        // Everything left runs to its end: nothing is lost.
        loop {
            while let Some(start) = s.take(ms(0)) {
                running.push((start.seq, start.key.to_string(), start.slot));
            }
            let Some((seq, _, _)) = running.pop() else { break };
            release(&mut s, seq);
            prop_assert!(ended.insert(seq));
        }
        prop_assert_eq!(ended.len() as u64, next - 1);
        prop_assert!(s.is_idle());
    }
}

/// `awaits` from (run, jobs it waits for) pairs.
fn awaits(pairs: &[(Seq, &[Seq])]) -> HashMap<Seq, Vec<Seq>> {
    pairs
        .iter()
        .map(|(run, jobs)| (*run, jobs.to_vec()))
        .collect()
}

#[test]
fn a_wait_that_comes_back_to_the_job_asking_is_found_through_other_keys() {
    // Runs 1 (a), 2 (b) and 3 (c) in flight; 4 (a) waits behind 1.
    let mut s = sched(3, 100);
    for (seq, key) in [(1, "a"), (2, "b"), (3, "c"), (4, "a")] {
        admit(&mut s, job(seq, key, 0), ms(0));
    }
    assert_eq!(take_all(&mut s, ms(0)), vec![1, 2, 3]);
    // Run 1 asking for a new job of its own key: behind itself.
    assert_eq!(s.awaited_back("a", 1, &HashMap::new()), Some(vec![1]));
    // Nothing waits for anything: run 2 may wait for a new job of a or c.
    assert_eq!(s.awaited_back("a", 2, &HashMap::new()), None);
    assert_eq!(s.awaited_back("c", 2, &HashMap::new()), None);
    // Run 1 waits for job 2: run 2 asking for a new job of a would wait behind 1, which
    // waits for 2.
    let one_waits_for_two = awaits(&[(1, &[2])]);
    assert_eq!(s.awaited_back("a", 2, &one_waits_for_two), Some(vec![2, 1]));
    // Three keys round: 1 waits for 2, 2 for 3; 3 asking for a new job of a.
    let round = awaits(&[(1, &[2]), (2, &[3])]);
    assert_eq!(s.awaited_back("a", 3, &round), Some(vec![3, 2, 1]));
    // A new job of c asked by 1 waits behind 3, which waits for nothing: no loop.
    assert_eq!(s.awaited_back("c", 1, &one_waits_for_two), None);
    // Through a waiting job: 3 waits for job 4 (a, behind 1), and 1 asks for a new job of c.
    let through_waiting = awaits(&[(3, &[4])]);
    assert_eq!(
        s.awaited_back("c", 1, &through_waiting),
        Some(vec![1, 4, 3])
    );
    // A key with nothing in its lane is no wait at all.
    assert_eq!(s.awaited_back("z", 1, &round), None);
}

#[test]
fn under_cancel_in_progress_a_new_job_waits_for_no_run_of_its_key_but_stops_the_one_asking() {
    for (coalesce_latest, cancel_in_progress) in [(false, false), (true, false), (false, true)] {
        let mut s = Scheduler::with_policy(
            Limits {
                max_concurrent: 2,
                max_queued: 100,
            },
            Policy {
                coalesce_latest,
                cancel_in_progress,
                ..Policy::default()
            },
        );
        for (seq, key) in [(1, "a"), (2, "b")] {
            // Queued, or taking the place of no waiting job.
            let _ = s.admit(job(seq, key, 0), ms(0));
        }
        assert_eq!(take_all(&mut s, ms(0)), vec![1, 2]);
        // Run 1 waits for job 2; run 2 asks for a new job of a. Queued, or coalesced behind
        // run 1, it waits for 1's end, which waits for 2; under --cancel-in-progress it stops
        // run 1 instead (whose wait for 2 ends with it).
        let one_waits_for_two = awaits(&[(1, &[2])]);
        let want = (!cancel_in_progress).then(|| vec![2, 1]);
        assert_eq!(
            s.awaited_back("a", 2, &one_waits_for_two),
            want,
            "coalesce {coalesce_latest}, cancel {cancel_in_progress}"
        );
        // Run 1 asking for a new job of its own key: behind itself, or stopping itself.
        assert_eq!(s.awaited_back("a", 1, &HashMap::new()), Some(vec![1]));
    }
}
