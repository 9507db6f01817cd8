//! Tests of the scheduling core: concrete unit tests of each transition and a no-starvation
//! property. The property test against a naive reference model, with every policy and the
//! default one alike, is `tests/policy_model.rs`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::Index;

use super::*;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Keys as text (a host-key order's `acquire` or `release`).
fn keys(list: &[Arc<str>]) -> Vec<&str> {
    list.iter().map(|k| &**k).collect()
}

/// Releases run `seq` as failed at `now`, its shell having exited with status 1.
fn fail(s: &mut Scheduler, seq: Seq, now: Tick) -> Released {
    s.release_failed(seq, now, FailReason::ExitStatus, Some(ExitFacts::Exited(1)))
}

/// Checks a wait split by cause: spans in time order, each following the one before, no two
/// consecutive ones with the same cause, adding up to `waited` (`None`: no spans at all).
pub(crate) fn assert_waits_add_up(waits: &[WaitSpan], waited: Option<Duration>, what: &str) {
    let Some(waited) = waited else {
        assert!(waits.is_empty(), "{what}: spans without a wait: {waits:?}");
        return;
    };
    let total: Duration = waits.iter().map(|w| w.ended_at - w.started_at).sum();
    assert_eq!(total, waited, "{what}: the spans {waits:?} do not add up");
    for w in waits {
        assert!(
            w.started_at < w.ended_at,
            "{what}: an empty span in {waits:?}"
        );
    }
    for pair in waits.windows(2) {
        assert_eq!(
            pair[0].ended_at, pair[1].started_at,
            "{what}: a gap in {waits:?}"
        );
        assert_ne!(
            pair[0].cause, pair[1].cause,
            "{what}: unmerged spans {waits:?}"
        );
    }
}

/// The wait an account's record tells of (`wait_ms`): its last try's, when that try
/// started, else the account's own.
pub(crate) fn told_wait(account: &Account) -> Option<Duration> {
    account.tried().map(|t| t.waited).or(account.waited)
}

fn sched(max_concurrent: usize, max_queued: usize) -> Scheduler {
    Scheduler::new(Limits {
        max_concurrent,
        max_queued,
    })
}

fn job(seq: Seq, key: &str, rank: i64) -> JobRequest {
    JobRequest {
        weight: 0,
        needs: None,
        seq,
        key: Arc::from(key),
        rank,
        timeout: None,
    }
}

fn timed(seq: Seq, key: &str, timeout: Duration) -> JobRequest {
    JobRequest {
        weight: 0,
        timeout: Some(timeout),
        ..job(seq, key, 0)
    }
}

/// Admits `req` at `now`, asserts it was queued and returns its `ahead`.
fn admit(s: &mut Scheduler, req: JobRequest, now: Tick) -> usize {
    let seq = req.seq;
    match s.admit(req, now) {
        Admission::Queued { ahead } => ahead,
        other => panic!("job {seq} was not queued: {other:?}"),
    }
}

/// Takes a job at `now`, asserting there is one, and starts its process at once, as the shell
/// would (its turn deadline counts from `now`).
fn take(s: &mut Scheduler, now: Tick) -> Start {
    let start = s.take(now).expect("a job should start");
    s.spawned(start.seq, now);
    start
}

/// Takes jobs until `take` answers `None`, each started at once; returns their seqs in start
/// order.
fn take_all(s: &mut Scheduler, now: Tick) -> Vec<Seq> {
    std::iter::from_fn(|| {
        let start = s.take(now)?;
        s.spawned(start.seq, now);
        Some(start.seq)
    })
    .collect()
}

fn release(s: &mut Scheduler, seq: Seq) -> (Arc<str>, u32) {
    match s.release(seq) {
        Released::Done { key, slot } => (key, slot),
        Released::Retry { .. } => panic!("job {seq} was released as done, not failed"),
        Released::Unknown => panic!("job {seq} should have been in flight"),
    }
}

fn expired(s: &mut Scheduler, now: Tick) -> Vec<Seq> {
    s.expire(now).into_iter().map(|e| e.seq).collect()
}

// ---------------------------------------------------------------------------------------------
// Unit tests
// ---------------------------------------------------------------------------------------------

#[test]
fn limits_below_one_are_raised_to_one() {
    let mut s = sched(0, 0);
    assert_eq!(
        s.limits(),
        Limits {
            max_concurrent: 1,
            max_queued: 1
        }
    );
    assert_eq!(admit(&mut s, job(1, "a", 0), ms(0)), 0);
    assert_eq!(s.admit(job(2, "b", 0), ms(0)), Admission::Full);
    assert_eq!(take(&mut s, ms(0)).slot, 1);
    assert_eq!(admit(&mut s, job(3, "b", 0), ms(0)), 0);
    assert_eq!(s.take(ms(0)), None, "one job in flight is the cap");
}

#[test]
fn the_cap_is_respected() {
    let mut s = sched(2, 10);
    for (seq, key) in [(1, "a"), (2, "b"), (3, "c")] {
        admit(&mut s, job(seq, key, 0), ms(0));
    }
    assert_eq!(take_all(&mut s, ms(0)), vec![1, 2]);
    assert_eq!(s.running(), 2);
    assert_eq!(s.queued(), 1);
    assert_eq!(s.take(ms(1)), None);
    release(&mut s, 1);
    assert_eq!(take_all(&mut s, ms(2)), vec![3]);
    assert_eq!(s.running(), 2);
    assert_eq!(s.queued(), 0);
}

#[test]
fn one_job_per_key_in_flight_and_a_busy_key_blocks_no_other() {
    let mut s = sched(4, 10);
    for seq in 1..=3 {
        admit(&mut s, job(seq, "a", 0), ms(0));
    }
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    assert_eq!(s.take(ms(0)), None, "slots are free but key a is busy");
    admit(&mut s, job(4, "b", 0), ms(1));
    let b = take(&mut s, ms(1));
    assert_eq!((b.seq, &*b.key), (4, "b"), "busy key a must not block b");
    assert_eq!(s.take(ms(1)), None);
    assert_eq!(release(&mut s, 1), (Arc::from("a"), 1));
    assert_eq!(take_all(&mut s, ms(2)), vec![2]);
    release(&mut s, 2);
    assert_eq!(take_all(&mut s, ms(3)), vec![3]);
}

#[test]
fn keys_are_served_first_come_first_served() {
    let mut s = sched(1, 10);
    // Admission order b, d, a, c: neither alphabetical nor hash order in general.
    for (seq, key) in [(1, "b"), (2, "d"), (3, "a"), (4, "c")] {
        admit(&mut s, job(seq, key, 0), ms(0));
    }
    let mut order = Vec::new();
    while let Some(st) = s.take(ms(0)) {
        order.push(st.key.to_string());
        release(&mut s, st.seq);
    }
    assert_eq!(order, ["b", "d", "a", "c"]);
}

#[test]
fn a_released_key_with_more_work_rejoins_the_back_of_the_ready_line() {
    let mut s = sched(1, 10);
    for seq in 1..=3 {
        admit(&mut s, job(seq, "hot", 0), ms(0));
    }
    admit(&mut s, job(4, "a", 0), ms(0));
    admit(&mut s, job(5, "b", 0), ms(0));
    let mut order = Vec::new();
    while let Some(st) = s.take(ms(0)) {
        order.push(st.seq);
        release(&mut s, st.seq);
    }
    assert_eq!(order, vec![1, 4, 5, 2, 3]);
}

#[test]
fn a_busy_key_joins_the_ready_line_at_release_not_at_admission() {
    let mut s = sched(2, 10);
    admit(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    admit(&mut s, job(2, "a", 0), ms(1)); // a is busy: a does not join yet
    admit(&mut s, job(3, "b", 0), ms(2)); // b is idle: b joins now
    admit(&mut s, job(4, "c", 0), ms(3));
    assert_eq!(take(&mut s, ms(3)).seq, 3);
    release(&mut s, 1); // a joins behind c
    release(&mut s, 3);
    assert_eq!(take_all(&mut s, ms(4)), vec![4, 2]);
}

#[test]
fn a_key_that_went_idle_rejoins_the_back_when_it_gets_work_again() {
    let mut s = sched(1, 10);
    admit(&mut s, job(1, "a", 0), ms(0));
    admit(&mut s, job(2, "b", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    release(&mut s, 1); // a idle, lane gone
    admit(&mut s, job(3, "c", 0), ms(1));
    admit(&mut s, job(4, "a", 0), ms(2)); // a comes back after c
    let mut order = Vec::new();
    while let Some(st) = s.take(ms(3)) {
        order.push(st.seq);
        release(&mut s, st.seq);
    }
    assert_eq!(order, vec![2, 3, 4]);
}

#[test]
fn ranks_order_a_lane_and_ties_keep_admission_order() {
    let mut s = sched(3, 10);
    let ranks = [(1, 5), (2, 1), (3, 3), (4, 1), (5, -2), (6, 3), (7, 5)];
    for (seq, rank) in ranks {
        admit(&mut s, job(seq, "a", rank), ms(0));
    }
    let mut order = Vec::new();
    while let Some(st) = s.take(ms(0)) {
        assert_eq!(s.take(ms(0)), None, "one job of a at a time");
        order.push(st.seq);
        release(&mut s, st.seq);
    }
    assert_eq!(order, vec![5, 2, 4, 3, 6, 1, 7]);
}

#[test]
fn a_lower_rank_admitted_while_busy_runs_next() {
    let mut s = sched(1, 10);
    admit(&mut s, job(1, "a", 0), ms(0));
    admit(&mut s, job(2, "a", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    assert_eq!(admit(&mut s, job(3, "a", -1), ms(1)), 1, "only job 1 ahead");
    release(&mut s, 1);
    assert_eq!(take(&mut s, ms(2)).seq, 3);
}

#[test]
fn ahead_counts_same_key_jobs_that_run_first() {
    let mut s = sched(2, 20);
    assert_eq!(admit(&mut s, job(1, "a", 5), ms(0)), 0);
    assert_eq!(admit(&mut s, job(2, "a", 1), ms(0)), 0);
    assert_eq!(admit(&mut s, job(3, "a", 3), ms(0)), 1);
    assert_eq!(admit(&mut s, job(4, "a", 1), ms(0)), 1);
    assert_eq!(admit(&mut s, job(5, "a", 5), ms(0)), 4);
    assert_eq!(admit(&mut s, job(6, "a", 9), ms(0)), 5);
    // Other keys do not count.
    assert_eq!(admit(&mut s, job(7, "b", 9), ms(0)), 0);
    assert_eq!(admit(&mut s, job(8, "b", 9), ms(0)), 1);
    // Job 2 (rank 1) starts; a is in flight: + 1.
    assert_eq!(take(&mut s, ms(0)).seq, 2);
    assert_eq!(admit(&mut s, job(9, "a", 1), ms(1)), 2); // in flight + job 4
    assert_eq!(admit(&mut s, job(10, "a", -7), ms(1)), 1); // in flight only
    assert_eq!(admit(&mut s, job(11, "a", 100), ms(1)), 8); // in flight + 7 waiting
                                                            // Key c with a job in flight and nothing waiting.
    assert_eq!(admit(&mut s, job(12, "c", 0), ms(1)), 0);
    release(&mut s, 2);
    let c = take_all(&mut s, ms(2));
    assert!(c.contains(&12), "c should have started: {c:?}");
    assert_eq!(admit(&mut s, job(13, "c", 0), ms(2)), 1);
}

#[test]
fn ahead_matches_the_actual_start_order() {
    // `ahead` counts the jobs admitted before this one that start before it; jobs admitted
    // later with a lower rank may still overtake it.
    let mut s = sched(1, 20);
    let ranks = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5];
    let mut ahead = Vec::new();
    let mut order = Vec::new();
    for (i, rank) in ranks.into_iter().enumerate() {
        let seq = i as Seq + 1;
        ahead.push(admit(&mut s, job(seq, "k", rank), ms(0)));
        if seq == 4 {
            order.push(take(&mut s, ms(0)).seq);
        }
    }
    release(&mut s, order[0]);
    while let Some(st) = s.take(ms(1)) {
        order.push(st.seq);
        release(&mut s, st.seq);
    }
    assert_eq!(order, vec![2, 4, 7, 1, 10, 3, 5, 9, 11, 8, 6]);
    let position = |seq: Seq| order.iter().position(|&o| o == seq).unwrap();
    for seq in 1..=ranks.len() as Seq {
        let before = (1..seq).filter(|&o| position(o) < position(seq)).count();
        assert_eq!(ahead[seq as usize - 1], before, "job {seq}");
    }
}

#[test]
fn a_job_offered_again_is_admitted_past_the_queue_bounds_and_later_ones_are_not() {
    let mut s = sched(1, 1);
    admit(&mut s, job(1, "a", 0), ms(0));
    assert!(!s.has_room());
    for seq in [2, 3] {
        match s.offer_again(job(seq, "b", 0), ms(0)) {
            crate::core::Offer::Queued { ahead, .. } => assert_eq!(ahead, seq as usize - 2),
            other => panic!("seq {seq}: {other:?}"),
        }
    }
    assert_eq!(s.queued(), 3, "the queue holds more than max_queued");
    assert!(matches!(
        s.offer(job(4, "c", 0), None, ms(0)),
        crate::core::Offer::Refused(_)
    ));
    let mut order = Vec::new();
    while let Some(st) = s.take(ms(1)) {
        order.push(st.seq);
        release(&mut s, st.seq);
    }
    assert_eq!(order, [1, 2, 3]);
    assert!(s.has_room(), "room again once it drained below the bound");
}

#[test]
fn full_at_max_queued() {
    let mut s = sched(1, 2);
    admit(&mut s, job(1, "a", 0), ms(0));
    admit(&mut s, job(2, "b", 0), ms(0));
    assert!(!s.has_room());
    assert_eq!(s.admit(job(3, "c", 0), ms(0)), Admission::Full);
    assert_eq!(s.admit(job(3, "a", 0), ms(0)), Admission::Full);
    assert_eq!(s.queued(), 2);
    assert_eq!(s.lane_count(), 2, "a refused job makes no lane");
    // Starting a job makes room: running jobs do not count against max_queued.
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    assert!(s.has_room());
    assert_eq!(admit(&mut s, job(3, "c", 0), ms(1)), 0);
    assert_eq!(s.admit(job(4, "d", 0), ms(1)), Admission::Full);
    // The refused job 3 of key c never shows up: only the admitted one does.
    release(&mut s, 1);
    let mut order = Vec::new();
    while let Some(st) = s.take(ms(2)) {
        order.push(st.seq);
        release(&mut s, st.seq);
    }
    assert_eq!(order, vec![2, 3]);
    assert!(s.is_idle());
}

#[test]
fn closed_after_drain() {
    let mut s = sched(2, 10);
    admit(&mut s, job(1, "a", 0), ms(0));
    admit(&mut s, job(2, "b", 0), ms(0));
    assert!(!s.is_draining());
    let drained = s.drain(ms(1));
    assert_eq!(drained.len(), 2);
    assert!(s.is_draining());
    assert!(!s.has_room());
    assert_eq!(s.admit(job(3, "c", 0), ms(2)), Admission::Closed);
    assert_eq!(s.take(ms(2)), None);
    assert_eq!(s.queued(), 0);
    assert_eq!(s.lane_count(), 0);
    assert!(s.is_idle());
    // Closed wins over Full.
    let mut s = sched(1, 1);
    admit(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(s.admit(job(2, "a", 0), ms(0)), Admission::Full);
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    assert!(s.drain(ms(0)).is_empty());
    assert_eq!(s.admit(job(2, "a", 0), ms(0)), Admission::Closed);
}

#[test]
fn drain_returns_waiting_jobs_sorted_and_leaves_running_ones() {
    let mut s = sched(2, 20);
    let jobs = [
        (1, "a", 0, 0),
        (2, "b", 0, 1),
        (3, "a", -5, 2),
        (4, "c", 7, 3),
        (5, "b", -9, 4),
        (6, "a", 2, 5),
        (7, "d", 0, 6),
    ];
    for (seq, key, rank, at) in jobs {
        admit(&mut s, job(seq, key, rank), ms(at));
    }
    // Within a and b the lower ranks start: 3 and 5.
    assert_eq!(take_all(&mut s, ms(10)), vec![3, 5]);
    let drained = s.drain(ms(20));
    let span = |cause, from, to| WaitSpan {
        cause,
        started_at: ms(from),
        ended_at: ms(to),
    };
    let behind = |seq| WaitCause::KeyBusy { behind: seq };
    // 1 and 2 first wait for a slot, then behind the lower ranks put before them (3 and 5,
    // in flight from 10 on); 6 waits behind 1 from its admission.
    let expected: Vec<Drained> = [
        (
            1,
            "a",
            0,
            vec![span(WaitCause::Cap, 0, 2), span(behind(3), 2, 20)],
        ),
        (
            2,
            "b",
            1,
            vec![span(WaitCause::Cap, 1, 4), span(behind(5), 4, 20)],
        ),
        (4, "c", 3, vec![span(WaitCause::Cap, 3, 20)]),
        (6, "a", 5, vec![span(behind(1), 5, 20)]),
        (7, "d", 6, vec![span(WaitCause::Cap, 6, 20)]),
    ]
    .into_iter()
    .map(|(seq, key, at, waits)| Drained {
        seq,
        key: Arc::from(key),
        waited: ms(20 - at),
        attempts: 0,
        tries: Vec::new(),
        waits,
        batch: None,
    })
    .collect();
    assert_eq!(drained, expected);
    assert_eq!(s.queued(), 0);
    assert_eq!(s.running(), 2);
    assert_eq!(s.lane_count(), 2, "the running jobs' lanes stay");
    assert!(!s.is_idle());
    assert_eq!(s.take(ms(21)), None);
    assert!(s.drain(ms(21)).is_empty(), "a second drain finds nothing");
    assert_eq!(release(&mut s, 5), (Arc::from("b"), 2));
    assert_eq!(s.take(ms(22)), None, "b had work but it was drained");
    assert_eq!(release(&mut s, 3), (Arc::from("a"), 1));
    assert_eq!(s.lane_count(), 0);
    assert!(s.is_idle());
    assert_eq!(s.take(ms(23)), None);
}

#[test]
fn release_of_an_unknown_seq() {
    let mut s = sched(2, 10);
    assert_eq!(s.release(1), Released::Unknown);
    admit(&mut s, job(1, "a", 0), ms(0));
    admit(&mut s, job(2, "a", 0), ms(0));
    assert_eq!(s.release(1), Released::Unknown, "waiting, not started");
    assert_eq!((s.queued(), s.running(), s.lane_count()), (2, 0, 1));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    assert_eq!(s.release(2), Released::Unknown, "still waiting");
    assert_eq!(s.release(99), Released::Unknown);
    assert_eq!(s.take(ms(0)), None, "an unknown release frees nothing");
    assert_eq!(
        s.release(1),
        Released::Done {
            key: Arc::from("a"),
            slot: 1
        }
    );
    assert_eq!(s.release(1), Released::Unknown, "released twice");
    assert_eq!(take(&mut s, ms(1)).seq, 2);
    assert_eq!((s.queued(), s.running(), s.lane_count()), (0, 1, 1));
}

#[test]
fn slots_are_the_smallest_free_and_reused_after_release() {
    let mut s = sched(3, 20);
    for (seq, key) in [(1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e"), (6, "f")] {
        admit(&mut s, job(seq, key, 0), ms(0));
    }
    let slots: Vec<(Seq, u32)> = std::iter::from_fn(|| s.take(ms(0)))
        .map(|st| (st.seq, st.slot))
        .collect();
    assert_eq!(slots, vec![(1, 1), (2, 2), (3, 3)]);
    assert_eq!(release(&mut s, 2).1, 2);
    let st = take(&mut s, ms(1));
    assert_eq!((st.seq, st.slot), (4, 2));
    assert_eq!(release(&mut s, 3).1, 3);
    assert_eq!(release(&mut s, 1).1, 1);
    let st = take(&mut s, ms(2));
    assert_eq!((st.seq, st.slot), (5, 1));
    let st = take(&mut s, ms(2));
    assert_eq!((st.seq, st.slot), (6, 3));
    assert_eq!(s.take(ms(2)), None);
}

#[test]
fn start_reports_how_long_the_job_waited() {
    let mut s = sched(1, 10);
    admit(&mut s, job(1, "a", 0), ms(5));
    admit(&mut s, job(2, "b", 0), ms(7));
    assert_eq!(take(&mut s, ms(12)).waited, ms(7));
    release(&mut s, 1);
    assert_eq!(take(&mut s, ms(30)).waited, ms(23));
}

#[test]
fn expire_and_next_deadline_on_a_virtual_clock() {
    let mut s = sched(4, 10);
    assert_eq!(s.next_deadline(), None);
    admit(&mut s, timed(1, "a", ms(100)), ms(0));
    admit(&mut s, timed(2, "b", ms(30)), ms(0));
    admit(&mut s, job(3, "c", 0), ms(0)); // no timeout
    admit(&mut s, timed(4, "d", ms(50)), ms(0));
    assert_eq!(s.next_deadline(), None, "waiting jobs have no deadline yet");
    assert_eq!(take(&mut s, ms(10)).seq, 1); // deadline 110
    assert_eq!(s.next_deadline(), Some(ms(110)));
    assert_eq!(take(&mut s, ms(20)).seq, 2); // deadline 50
    assert_eq!(take(&mut s, ms(25)).seq, 3); // none
    assert_eq!(take(&mut s, ms(40)).seq, 4); // deadline 90
    assert_eq!(s.next_deadline(), Some(ms(50)));

    assert!(expired(&mut s, ms(49)).is_empty(), "never early");
    assert_eq!(s.next_deadline(), Some(ms(50)));
    assert_eq!(expired(&mut s, ms(50)), vec![2], "due at its deadline");
    assert!(expired(&mut s, ms(50)).is_empty(), "reported once");
    assert_eq!(s.next_deadline(), Some(ms(90)));

    // Jump past two deadlines at once: soonest first.
    assert_eq!(expired(&mut s, ms(500)), vec![4, 1]);
    assert_eq!(s.next_deadline(), None);
    assert!(expired(&mut s, ms(10_000)).is_empty());
    // Expired jobs are still in flight until released.
    assert_eq!(s.running(), 4);
    assert_eq!(release(&mut s, 2).1, 2);
    assert_eq!(s.release(2), Released::Unknown);
}

#[test]
fn release_before_the_deadline_cancels_it() {
    let mut s = sched(2, 10);
    admit(&mut s, timed(1, "a", ms(10)), ms(0));
    admit(&mut s, timed(2, "b", ms(20)), ms(0));
    take_all(&mut s, ms(0));
    release(&mut s, 1);
    assert_eq!(s.next_deadline(), Some(ms(20)));
    assert_eq!(expired(&mut s, ms(25)), vec![2]);
    // A job started later gets its deadline from its own start.
    admit(&mut s, timed(3, "a", ms(10)), ms(25));
    assert_eq!(take(&mut s, ms(30)).seq, 3);
    assert_eq!(s.next_deadline(), Some(ms(40)));
    assert!(expired(&mut s, ms(39)).is_empty());
    release(&mut s, 3);
    assert_eq!(s.next_deadline(), None);
    assert!(expired(&mut s, ms(1000)).is_empty());
}

#[test]
fn equal_deadlines_and_zero_timeouts() {
    let mut s = sched(3, 10);
    admit(&mut s, timed(1, "a", ms(0)), ms(0));
    admit(&mut s, timed(2, "b", ms(5)), ms(0));
    admit(&mut s, timed(3, "c", ms(10)), ms(0));
    assert_eq!(take(&mut s, ms(10)).seq, 1); // deadline 10
    assert_eq!(take(&mut s, ms(5)).seq, 2); // deadline 10 (a clock may be read before)
    assert_eq!(take(&mut s, ms(0)).seq, 3); // deadline 10
    assert_eq!(s.next_deadline(), Some(ms(10)));
    assert!(expired(&mut s, ms(9)).is_empty());
    assert_eq!(expired(&mut s, ms(10)), vec![1, 2, 3]);
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn huge_timeouts_do_not_overflow() {
    let mut s = sched(1, 10);
    admit(&mut s, timed(1, "a", Duration::MAX), ms(0));
    assert_eq!(take(&mut s, ms(5)).seq, 1);
    assert_eq!(s.next_deadline(), Some(Duration::MAX));
    assert!(expired(&mut s, ms(1_000_000)).is_empty());
}

#[test]
fn lanes_are_removed_when_idle() {
    let mut s = sched(2, 10);
    assert_eq!(s.lane_count(), 0);
    admit(&mut s, job(1, "a", 0), ms(0));
    admit(&mut s, job(2, "a", 0), ms(0));
    admit(&mut s, job(3, "b", 0), ms(0));
    assert_eq!(s.lane_count(), 2);
    assert_eq!(take_all(&mut s, ms(0)), vec![1, 3]);
    assert_eq!(s.lane_count(), 2);
    release(&mut s, 3);
    assert_eq!(s.lane_count(), 1, "b: nothing waiting, nothing in flight");
    release(&mut s, 1);
    assert_eq!(s.lane_count(), 1, "a still has job 2 waiting");
    assert_eq!(take(&mut s, ms(1)).seq, 2);
    assert_eq!(s.lane_count(), 1, "a has job 2 in flight");
    release(&mut s, 2);
    assert_eq!(s.lane_count(), 0);
    assert!(s.is_idle());
    // A lane comes back with new work.
    admit(&mut s, job(4, "b", 0), ms(2));
    assert_eq!(s.lane_count(), 1);
}

// ---------------------------------------------------------------------------------------------
// No starvation
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// One key always has more work (a backlog, and a new job each time one of its jobs is
    /// released); every other key gets one job at some round. Each other key's job starts
    /// within as many takes as there are keys after it was admitted.
    #[test]
    fn no_key_starves_behind_a_key_that_always_has_work(
        max_concurrent in 1usize..=3,
        others in 1usize..=6,
        hot_backlog in 1usize..=3,
        admit_round in prop::collection::vec(0usize..30, 6),
        picks in prop::collection::vec(any::<Index>(), 120),
    ) {
        let mut s = sched(max_concurrent, 1000);
        let hot: Arc<str> = Arc::from("hot");
        let mut next_seq: Seq = 1;
        let mut now = Duration::ZERO;
        for _ in 0..hot_backlog {
            admit(&mut s, job(next_seq, "hot", 0), now);
            next_seq += 1;
        }
        let total_keys = others + 1;
        let mut takes = 0usize;
        // other key index -> takes done when it was admitted / when it started
        let mut admitted_at: HashMap<usize, usize> = HashMap::new();
        let mut started_at: HashMap<usize, usize> = HashMap::new();
        let mut seq_of: HashMap<Seq, usize> = HashMap::new();
        let mut running: Vec<(Seq, Arc<str>)> = Vec::new();

        for (round, pick) in picks.iter().enumerate() {
            for (k, &at) in admit_round.iter().enumerate().take(others) {
                if at == round {
                    let name = format!("k{k}");
                    admit(&mut s, job(next_seq, &name, 0), now);
                    seq_of.insert(next_seq, k);
                    admitted_at.insert(k, takes);
                    next_seq += 1;
                }
            }
            while let Some(st) = s.take(now) {
                takes += 1;
                if let Some(&k) = seq_of.get(&st.seq) {
                    started_at.insert(k, takes);
                    let waited_takes = takes - admitted_at[&k];
                    prop_assert!(
                        waited_takes <= total_keys,
                        "k{} started {} takes after its admission; {} keys",
                        k, waited_takes, total_keys
                    );
                }
                running.push((st.seq, st.key));
            }
            prop_assert!(!running.is_empty(), "the hot key always has work");
            let (seq, key) = running.remove(pick.index(running.len()));
            release(&mut s, seq);
            if key == hot {
                admit(&mut s, job(next_seq, "hot", 0), now);
                next_seq += 1;
            }
            now += ms(1);
        }
        for k in 0..others {
            prop_assert!(started_at.contains_key(&k), "k{} never started", k);
        }
    }
}

#[test]
fn no_starvation_with_a_single_slot_is_round_robin() {
    // Cap 1, hot key with a deep backlog, three other keys admitted at once: each other key
    // starts before hot's second job.
    let mut s = sched(1, 100);
    for seq in 1..=10 {
        admit(&mut s, job(seq, "hot", 0), ms(0));
    }
    admit(&mut s, job(11, "x", 0), ms(0));
    admit(&mut s, job(12, "y", 0), ms(0));
    admit(&mut s, job(13, "z", 0), ms(0));
    let mut keys = Vec::new();
    for _ in 0..6 {
        let st = take(&mut s, ms(0));
        keys.push(st.key.to_string());
        release(&mut s, st.seq);
    }
    assert_eq!(keys, ["hot", "x", "y", "z", "hot", "hot"]);
}

// ---------------------------------------------------------------------------------------------
// Per-key policies: unit tests, and a property test against a model extended by the policies
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod policies;
#[cfg(test)]
mod policy_model;

mod decision_model;

mod decisions;

mod hostwide;
mod service;

mod resource_model;

mod waits;

#[test]
fn the_turn_clock_restarts_when_the_process_really_starts() {
    let mut s = sched(1, 10);
    admit(&mut s, timed(1, "a", ms(100)), ms(0));
    let start = take(&mut s, ms(0));
    assert_eq!(s.next_deadline(), Some(ms(100)));
    s.started(start.seq, ms(30));
    assert_eq!(s.next_deadline(), Some(ms(130)));
    assert!(expired(&mut s, ms(129)).is_empty());
    assert_eq!(expired(&mut s, ms(130)), [1]);
}

/// A run whose process is still being made has no turn deadline yet, however long its spawn
/// takes: a stop ordered meanwhile would stop it the moment it starts (a long round of starts
/// on a busy machine stopped jobs as `timeout` a few ms into their turn).
#[test]
fn a_run_not_yet_started_has_no_turn_deadline() {
    let mut s = sched(2, 10);
    admit(&mut s, timed(1, "a", ms(100)), ms(0));
    admit(&mut s, timed(2, "b", ms(100)), ms(0));
    let first = s.take(ms(0)).unwrap();
    let second = s.take(ms(0)).unwrap();
    assert_eq!(s.next_deadline(), None);
    assert!(expired(&mut s, ms(500)).is_empty());
    s.spawned(first.seq, ms(600));
    assert_eq!(s.next_deadline(), Some(ms(700)));
    assert!(expired(&mut s, ms(699)).is_empty());
    assert_eq!(expired(&mut s, ms(700)), [1]);
    // Started later still: its own turn.
    s.spawned(second.seq, ms(650));
    assert_eq!(expired(&mut s, ms(750)), [2]);
}
