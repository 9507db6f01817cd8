//! Unit tests of the per-key policies with concrete values: coalescing, cancel-in-progress,
//! retries (with and without a delay), sticky slots and batching (count, bytes, delay).

use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::super::*;
use super::{fail, job, ms};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn with(max_concurrent: usize, max_queued: usize, policy: Policy) -> Scheduler {
    Scheduler::with_policy(
        Limits {
            max_concurrent,
            max_queued,
        },
        policy,
    )
}

fn coalescing() -> Policy {
    Policy {
        coalesce_latest: true,
        ..Policy::default()
    }
}

fn cancelling() -> Policy {
    Policy {
        cancel_in_progress: true,
        ..Policy::default()
    }
}

fn retrying(retries: u32, retry_delay: Duration) -> Policy {
    Policy {
        retries,
        retry_delay,
        ..Policy::default()
    }
}

fn sticky() -> Policy {
    Policy {
        sticky_slots: true,
        ..Policy::default()
    }
}

fn batching(batch_size: usize, batch_bytes: usize, batch_delay: Duration) -> Policy {
    Policy {
        batch_size,
        batch_bytes,
        batch_delay,
        ..Policy::default()
    }
}

fn weighted(seq: Seq, key: &str, weight: usize) -> JobRequest {
    JobRequest {
        weight,
        ..job(seq, key, 0)
    }
}

fn superseding(ahead: usize, replaced: Option<Seq>, cancel: Option<Seq>) -> Admission {
    Admission::Superseding {
        ahead,
        replaced,
        cancel,
        retries: Vec::new(),
    }
}

/// Admits `req` at `now`, asserting it was queued (by any policy) and not replacing anything.
fn queue(s: &mut Scheduler, req: JobRequest, now: Tick) {
    let seq = req.seq;
    match s.admit(req, now) {
        Admission::Queued { .. }
        | Admission::Superseding {
            replaced: None,
            cancel: None,
            ..
        } => {}
        other => panic!("job {seq} was not simply queued: {other:?}"),
    }
}

fn take(s: &mut Scheduler, now: Tick) -> Start {
    s.take(now).expect("a job should start")
}

/// `(seq, key, slot)` of the next start.
fn take3(s: &mut Scheduler, now: Tick) -> (Seq, String, u32) {
    let st = take(s, now);
    (st.seq, st.key.to_string(), st.slot)
}

fn batch(s: &mut Scheduler, now: Tick) -> Vec<Seq> {
    let st = take(s, now);
    assert_eq!(
        st.batch.first(),
        Some(&st.seq),
        "a batch is known by its first job"
    );
    st.batch
}

fn done(s: &mut Scheduler, seq: Seq) -> (Arc<str>, u32) {
    match s.release(seq) {
        Released::Done { key, slot } => (key, slot),
        other => panic!("job {seq}: {other:?}"),
    }
}

fn failed_done(s: &mut Scheduler, seq: Seq, now: Tick) {
    match fail(s, seq, now) {
        Released::Done { .. } => {}
        other => panic!("job {seq} should have ended: {other:?}"),
    }
}

/// Releases a failed job, asserting it goes again; returns the try that comes next.
fn retry(s: &mut Scheduler, seq: Seq, now: Tick) -> u32 {
    match fail(s, seq, now) {
        Released::Retry { attempt, .. } => attempt,
        other => panic!("job {seq} should have been retried: {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// --coalesce latest
// ---------------------------------------------------------------------------------------------

#[test]
fn coalesce_keeps_one_pending_job_per_key_and_the_newest_wins() {
    let mut s = with(1, 10, coalescing());
    assert_eq!(s.admit(job(1, "a", 0), ms(0)), superseding(0, None, None));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    assert_eq!(s.admit(job(2, "a", 0), ms(1)), superseding(1, None, None));
    assert_eq!(
        s.admit(job(3, "a", 0), ms(2)),
        superseding(1, Some(2), None)
    );
    assert_eq!(
        s.admit(job(4, "a", 0), ms(3)),
        superseding(1, Some(3), None)
    );
    assert_eq!(s.queued(), 1, "a replacement does not grow the queue");
    // Another key has its own pending job.
    assert_eq!(s.admit(job(5, "b", 0), ms(3)), superseding(0, None, None));
    assert_eq!(
        s.admit(job(6, "b", 0), ms(4)),
        superseding(0, Some(5), None)
    );
    assert_eq!(s.queued(), 2);
    assert_eq!(
        s.running(),
        1,
        "coalescing alone never stops the running job"
    );
    done(&mut s, 1);
    // b was ready before a came back: 6, then 4.
    let st = take(&mut s, ms(5));
    assert_eq!((st.seq, st.waited), (6, ms(1)), "the newest job's own wait");
    done(&mut s, 6);
    let st = take(&mut s, ms(6));
    assert_eq!((st.seq, st.waited, st.attempt), (4, ms(3), 1));
    done(&mut s, 4);
    assert!(s.is_idle());
    assert_eq!(s.lane_count(), 0);
    // With nothing pending any more, a new job replaces nothing.
    assert_eq!(s.admit(job(7, "a", 0), ms(7)), superseding(0, None, None));
}

#[test]
fn coalesce_replaces_whatever_the_ranks() {
    let mut s = with(1, 10, coalescing());
    queue(&mut s, job(1, "a", -5), ms(0));
    assert_eq!(
        s.admit(job(2, "a", 5), ms(0)),
        superseding(0, Some(1), None)
    );
    assert_eq!(
        s.admit(job(3, "a", -9), ms(0)),
        superseding(0, Some(2), None)
    );
    assert_eq!(take(&mut s, ms(0)).seq, 3);
    assert_eq!(s.take(ms(0)), None);
}

#[test]
fn coalesce_replacement_is_allowed_at_max_queued() {
    let mut s = with(2, 1, coalescing());
    queue(&mut s, job(1, "a", 0), ms(0));
    assert!(!s.has_room());
    assert_eq!(s.admit(job(2, "b", 0), ms(0)), Admission::Full);
    assert_eq!(
        s.admit(job(3, "a", 0), ms(1)),
        superseding(0, Some(1), None)
    );
    assert_eq!(s.queued(), 1, "max_queued holds");
    assert!(!s.has_room());
    assert_eq!(s.lane_count(), 1, "the refused job of b made no lane");
    // A key whose job is running has nothing to replace: a new job of it is refused.
    assert_eq!(take(&mut s, ms(2)).seq, 3);
    queue(&mut s, job(4, "c", 0), ms(2));
    assert_eq!(s.admit(job(5, "a", 0), ms(3)), Admission::Full);
    assert_eq!(
        s.admit(job(6, "c", 0), ms(3)),
        superseding(0, Some(4), None)
    );
    assert_eq!(s.queued(), 1);
    // Draining closes the door even to a replacement.
    let drained = s.drain(ms(4));
    assert_eq!(drained.iter().map(|d| d.seq).collect::<Vec<_>>(), [6]);
    assert_eq!(s.admit(job(7, "c", 0), ms(4)), Admission::Closed);
}

#[test]
fn coalesce_never_replaces_a_waiting_retry() {
    let policy = Policy {
        retries: 1,
        ..coalescing()
    };
    let mut s = with(1, 10, policy);
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    assert_eq!(retry(&mut s, 1, ms(1)), 2);
    // The retry waits first in the lane; it is not the fresh pending job.
    assert_eq!(s.admit(job(2, "a", 0), ms(2)), superseding(1, None, None));
    assert_eq!(
        s.admit(job(3, "a", 0), ms(3)),
        superseding(1, Some(2), None)
    );
    assert_eq!(s.queued(), 2);
    let st = take(&mut s, ms(4));
    assert_eq!((st.seq, st.attempt), (1, 2));
    done(&mut s, 1);
    let st = take(&mut s, ms(5));
    assert_eq!((st.seq, st.attempt), (3, 1));
}

#[test]
fn without_coalescing_every_job_is_queued() {
    let mut s = with(1, 10, Policy::default());
    assert_eq!(
        s.admit(job(1, "a", 0), ms(0)),
        Admission::Queued { ahead: 0 }
    );
    assert_eq!(
        s.admit(job(2, "a", 0), ms(0)),
        Admission::Queued { ahead: 1 }
    );
    assert_eq!(s.queued(), 2);
}

// ---------------------------------------------------------------------------------------------
// --cancel-in-progress
// ---------------------------------------------------------------------------------------------

#[test]
fn cancel_in_progress_implies_coalesce_latest() {
    let s = with(1, 10, cancelling());
    assert!(s.policy().coalesce_latest);
    assert!(s.policy().cancel_in_progress);
    assert!(!with(1, 10, Policy::default()).policy().coalesce_latest);
}

#[test]
fn cancel_in_progress_cancels_the_running_job_once() {
    let mut s = with(2, 10, cancelling());
    // An idle key: nothing to cancel.
    assert_eq!(s.admit(job(1, "a", 0), ms(0)), superseding(0, None, None));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    assert_eq!(
        s.admit(job(2, "a", 0), ms(1)),
        superseding(1, None, Some(1))
    );
    // Job 1 is already being cancelled: only the pending job is replaced.
    assert_eq!(
        s.admit(job(3, "a", 0), ms(2)),
        superseding(1, Some(2), None)
    );
    assert_eq!(
        s.admit(job(4, "a", 0), ms(3)),
        superseding(1, Some(3), None)
    );
    // Another key is not concerned.
    assert_eq!(s.admit(job(5, "b", 0), ms(3)), superseding(0, None, None));
    assert_eq!(take(&mut s, ms(3)).seq, 5);
    assert_eq!(
        s.take(ms(3)),
        None,
        "a is still busy until job 1 is released"
    );
    done(&mut s, 1);
    assert_eq!(take(&mut s, ms(4)).seq, 4);
    // The new running job can be cancelled again, once.
    assert_eq!(
        s.admit(job(6, "a", 0), ms(5)),
        superseding(1, None, Some(4))
    );
    assert_eq!(
        s.admit(job(7, "a", 0), ms(6)),
        superseding(1, Some(6), None)
    );
    assert_eq!(
        s.admit(job(8, "b", 0), ms(6)),
        superseding(1, None, Some(5))
    );
}

#[test]
fn cancel_in_progress_at_max_queued_cancels_only_if_admitted() {
    let mut s = with(2, 1, cancelling());
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    queue(&mut s, job(2, "b", 0), ms(0));
    // Queue full and nothing of a pending: refused, and job 1 is not cancelled.
    assert_eq!(s.admit(job(3, "a", 0), ms(1)), Admission::Full);
    assert_eq!(take(&mut s, ms(1)).seq, 2);
    assert_eq!(
        s.admit(job(4, "a", 0), ms(2)),
        superseding(1, None, Some(1))
    );
}

#[test]
fn a_cancelled_job_that_fails_is_not_retried() {
    let policy = Policy {
        retries: 3,
        ..cancelling()
    };
    let mut s = with(1, 10, policy);
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    assert_eq!(
        s.admit(job(2, "a", 0), ms(1)),
        superseding(1, None, Some(1))
    );
    failed_done(&mut s, 1, ms(2));
    let st = take(&mut s, ms(3));
    assert_eq!((st.seq, st.attempt, st.batch), (2, 1, vec![2]));
    assert_eq!(s.queued(), 0);
    // Job 2 was not cancelled: it is retried when it fails.
    assert_eq!(retry(&mut s, 2, ms(4)), 2);
    let st = take(&mut s, ms(4));
    assert_eq!((st.seq, st.attempt), (2, 2));
}

// ---------------------------------------------------------------------------------------------
// --retries, --retry-delay
// ---------------------------------------------------------------------------------------------

#[test]
fn a_failed_job_is_retried_until_its_tries_run_out() {
    let mut s = with(1, 10, retrying(2, Duration::ZERO));
    queue(&mut s, job(1, "a", 0), ms(0));
    let st = take(&mut s, ms(0));
    assert_eq!((st.seq, st.attempt), (1, 1));
    assert_eq!(
        fail(&mut s, 1, ms(5)),
        Released::Retry {
            key: Arc::from("a"),
            slot: 1,
            attempt: 2
        }
    );
    assert_eq!(s.queued(), 1, "a retry waits again");
    assert_eq!(s.running(), 0);
    let st = take(&mut s, ms(7));
    assert_eq!((st.seq, st.attempt, st.waited), (1, 2, ms(2)));
    assert_eq!(retry(&mut s, 1, ms(8)), 3);
    assert_eq!(take(&mut s, ms(8)).attempt, 3);
    // 1 + 2 retries: the third failure is final.
    assert_eq!(
        fail(&mut s, 1, ms(9)),
        Released::Done {
            key: Arc::from("a"),
            slot: 1
        }
    );
    assert_eq!(fail(&mut s, 1, ms(9)), Released::Unknown);
    assert!(s.is_idle());
    assert_eq!(s.lane_count(), 0);
}

#[test]
fn a_retried_try_ends_when_its_run_ended_though_the_core_heard_of_it_later() {
    let mut s = with(2, 10, retrying(1, ms(10)));
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    // Another decision at 20 ms: the core's clock is past the run's end (15 ms) when the
    // end reaches it.
    queue(&mut s, job(2, "b", 0), ms(20));
    let failed = RunFacts {
        exit: Some(ExitFacts::Exited(1)),
        stopped_while_running: false,
        ended_at: ms(15),
    };
    let first = s.finish(1, failed, ms(20)).expect("job 1 runs");
    assert!(first.retry, "one retry is left");
    // The delay counts from the later of the two: nothing of key a before 30 ms.
    assert_eq!(take(&mut s, ms(20)).seq, 2);
    assert_eq!(
        s.next_deadline(),
        Some(ms(30)),
        "the retry delay counts from 20 ms"
    );
    assert!(s.expire(ms(30)).is_empty());
    assert_eq!(take(&mut s, ms(30)).seq, 1);
    let last = s
        .finish(
            1,
            RunFacts {
                ended_at: ms(40),
                ..failed
            },
            ms(40),
        )
        .expect("job 1 runs again");
    let ended: Vec<Tick> = last.accounts[0].tries.iter().map(|t| t.ended_at).collect();
    assert_eq!(
        ended,
        vec![ms(15), ms(40)],
        "each try ends when its run ended"
    );
}

#[test]
fn a_try_that_fails_with_tries_left_as_the_run_stops_is_recorded_stopped_before_its_retry() {
    for (reason, stop) in [
        (StopReason::Shutdown, None),
        (StopReason::FailFast, Some("b")),
    ] {
        let mut policy = retrying(3, Duration::ZERO);
        policy.fail_fast = stop.is_some();
        let mut s = with(2, 10, policy);
        queue(&mut s, job(1, "a", 0), ms(0));
        queue(&mut s, job(2, "b", 0), ms(0));
        assert_eq!(take(&mut s, ms(0)).seq, 1);
        assert_eq!(take(&mut s, ms(0)).seq, 2);
        if stop.is_some() {
            // Job 2's try fails with tries left: retried; then for good after three more.
            for at in 1..=3 {
                assert!(s.finish(2, failed_at(ms(at)), ms(at)).unwrap().retry);
                assert_eq!(take(&mut s, ms(at)).seq, 2);
            }
            let halted = s.finish(2, failed_at(ms(4)), ms(4)).unwrap();
            assert!(halted.halt.is_some(), "job 2's last failure stops the run");
        } else {
            let SignalVerdict::Halt(_) = s.signal_received(Signal::SIGINT, ms(4)) else {
                panic!("the first SIGINT halts the run");
            };
        }
        // Job 1's try ends by itself, failed, before the stop reached it: it would have been
        // retried, so its record says it was stopped, with its failed try told.
        let ended = s.finish(1, failed_at(ms(5)), ms(5)).expect("job 1 runs");
        assert!(!ended.retry, "no retry once the run stops");
        assert_eq!(
            ended.outcome,
            Outcome::Failed(FailReason::ExitStatus),
            "the try"
        );
        let account = &ended.accounts[0];
        assert_eq!(account.outcome, Outcome::Interrupted(reason), "the record");
        assert_eq!(account.tries.len(), 1);
        assert_eq!(
            account.tries[0].outcome,
            Outcome::Failed(FailReason::ExitStatus)
        );
    }
    // Its last try, or a run that goes on, keep `failed`.
    let mut s = with(1, 10, retrying(0, Duration::ZERO));
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    let _ = s.signal_received(Signal::SIGINT, ms(1));
    let ended = s.finish(1, failed_at(ms(2)), ms(2)).unwrap();
    assert_eq!(
        ended.accounts[0].outcome,
        Outcome::Failed(FailReason::ExitStatus)
    );
}

/// Facts of a run whose direct child exited 1 at `at`, no stop having reached it.
fn failed_at(at: Tick) -> RunFacts {
    RunFacts {
        exit: Some(ExitFacts::Exited(1)),
        stopped_while_running: false,
        ended_at: at,
    }
}

#[test]
fn without_retries_a_failure_is_final_and_a_success_is_never_retried() {
    let mut s = with(1, 10, Policy::default());
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    failed_done(&mut s, 1, ms(1));
    assert!(s.is_idle());
    let mut s = with(1, 10, retrying(5, Duration::ZERO));
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    done(&mut s, 1);
    assert!(s.is_idle());
    assert_eq!(fail(&mut s, 1, ms(1)), Released::Unknown);
}

#[test]
fn a_retry_runs_before_later_jobs_of_its_key() {
    let mut s = with(2, 10, retrying(1, Duration::ZERO));
    queue(&mut s, job(1, "a", 0), ms(0));
    queue(&mut s, job(2, "a", 0), ms(0));
    queue(&mut s, job(3, "b", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    assert_eq!(take(&mut s, ms(0)).seq, 3);
    queue(&mut s, job(4, "a", 0), ms(1));
    assert_eq!(retry(&mut s, 1, ms(2)), 2);
    assert_eq!(s.ahead_in_lane("a"), 3, "the retry and jobs 2 and 4 wait");
    let st = take(&mut s, ms(2));
    assert_eq!(
        (st.seq, st.attempt),
        (1, 2),
        "the retry goes first, not job 2"
    );
    assert_eq!(s.take(ms(2)), None, "one job of a at a time");
    failed_done(&mut s, 1, ms(3));
    assert_eq!(take(&mut s, ms(3)).seq, 2);
    done(&mut s, 2);
    assert_eq!(take(&mut s, ms(4)).seq, 4);
}

#[test]
fn a_retry_goes_to_the_back_of_the_ready_line() {
    let mut s = with(1, 10, retrying(1, Duration::ZERO));
    queue(&mut s, job(1, "a", 0), ms(0));
    queue(&mut s, job(2, "b", 0), ms(0));
    queue(&mut s, job(3, "c", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    assert_eq!(retry(&mut s, 1, ms(1)), 2);
    let mut order = Vec::new();
    while let Some(st) = s.take(ms(2)) {
        order.push((st.seq, st.attempt));
        done(&mut s, st.seq);
    }
    assert_eq!(order, [(2, 1), (3, 1), (1, 2)]);
}

#[test]
fn retry_delay_holds_the_lane_on_a_virtual_clock() {
    let mut s = with(2, 10, retrying(1, ms(100)));
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    assert_eq!(s.next_deadline(), None);
    assert_eq!(retry(&mut s, 1, ms(10)), 2);
    assert_eq!(s.next_deadline(), Some(ms(110)));
    assert_eq!(s.queued(), 1);
    // Later jobs of a wait behind the held retry; other keys are served meanwhile.
    queue(&mut s, job(2, "a", 0), ms(20));
    queue(&mut s, job(3, "b", 0), ms(20));
    assert_eq!(take(&mut s, ms(20)).seq, 3);
    assert_eq!(s.take(ms(20)), None, "a is held");
    assert!(s.expire(ms(109)).is_empty());
    assert_eq!(s.take(ms(109)), None, "not a tick early");
    assert_eq!(s.next_deadline(), Some(ms(110)));
    assert!(
        s.expire(ms(110)).is_empty(),
        "the end of a hold is no turn timeout"
    );
    assert_eq!(s.next_deadline(), None, "the hold is over");
    let st = take(&mut s, ms(110));
    assert_eq!((st.seq, st.attempt, st.waited), (1, 2, ms(100)));
    done(&mut s, 1);
    assert_eq!(take(&mut s, ms(111)).seq, 2);
}

#[test]
fn a_held_retry_rejoins_the_ready_line_when_its_delay_is_over() {
    let mut s = with(1, 10, retrying(1, ms(50)));
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    assert_eq!(retry(&mut s, 1, ms(0)), 2);
    queue(&mut s, job(2, "b", 0), ms(10));
    // Past the hold but not yet expired: a is not in the ready line yet.
    assert_eq!(take(&mut s, ms(60)).seq, 2);
    queue(&mut s, job(3, "c", 0), ms(60));
    assert!(s.expire(ms(60)).is_empty());
    done(&mut s, 2);
    // c joined before a's hold was found over.
    assert_eq!(take(&mut s, ms(61)).seq, 3);
    done(&mut s, 3);
    assert_eq!(take(&mut s, ms(62)).seq, 1);
}

#[test]
fn retries_never_happen_after_drain() {
    let mut s = with(2, 10, retrying(3, ms(100)));
    queue(&mut s, job(1, "a", 0), ms(0));
    queue(&mut s, job(2, "b", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    assert_eq!(take(&mut s, ms(0)).seq, 2);
    assert_eq!(retry(&mut s, 1, ms(10)), 2);
    // The held retry is drained with the tries it made; the running job is not retried.
    let drained = s.drain(ms(30));
    assert_eq!(
        drained,
        [Drained {
            batch: None,
            seq: 1,
            key: Arc::from("a"),
            waited: ms(20),
            attempts: 1,
            // Its last try: slot 1, taken at once at 0, failed at 10.
            tries: vec![Try {
                slot: 1,
                waited: ms(0),
                started_at: ms(0),
                ended_at: ms(10),
                outcome: Outcome::Failed(FailReason::ExitStatus),
                exit: Some(ExitFacts::Exited(1)),
            }],
            // The wait its record tells of: before that try, none.
            waits: Vec::new(),
        }]
    );
    assert_eq!(s.next_deadline(), None, "no hold survives a drain");
    failed_done(&mut s, 2, ms(40));
    assert!(s.expire(ms(500)).is_empty());
    assert_eq!(s.take(ms(500)), None);
    assert!(s.is_idle());
    assert_eq!(s.lane_count(), 0);
}

#[test]
fn a_failed_batch_is_retried_whole_at_the_front() {
    let policy = Policy {
        retries: 1,
        ..batching(3, usize::MAX, Duration::ZERO)
    };
    let mut s = with(1, 10, policy);
    for seq in 1..=4 {
        queue(&mut s, job(seq, "a", 0), ms(0));
    }
    assert_eq!(batch(&mut s, ms(0)), [1, 2, 3]);
    assert_eq!(s.queued(), 1);
    assert_eq!(retry(&mut s, 1, ms(1)), 2);
    assert_eq!(s.queued(), 4, "the whole batch waits again");
    let st = take(&mut s, ms(1));
    assert_eq!((st.batch, st.attempt), (vec![1, 2, 3], 2));
    failed_done(&mut s, 1, ms(2));
    let st = take(&mut s, ms(2));
    assert_eq!((st.batch, st.attempt), (vec![4], 1));
}

/// A retry cannot be refused: it comes back even when `max_queued` jobs already wait, and
/// new jobs are held off (`has_room`) until the queue is below the bound again.
#[test]
fn a_retry_is_never_refused_and_holds_off_new_jobs() {
    let mut s = with(2, 1, retrying(1, Duration::ZERO));
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    queue(&mut s, job(2, "b", 0), ms(0));
    assert!(!s.has_room());
    assert_eq!(retry(&mut s, 1, ms(1)), 2);
    assert_eq!(s.queued(), 2, "over max_queued by the retry");
    assert!(!s.has_room());
    assert_eq!(s.admit(job(3, "c", 0), ms(1)), Admission::Full);
    assert_eq!(take(&mut s, ms(1)).seq, 2);
    assert!(!s.has_room(), "still one waiting: the retry");
    assert_eq!(take(&mut s, ms(1)).seq, 1);
    assert!(s.has_room());
}

/// Retries keep the key's order: a job admitted while a retry waits never starts before it,
/// whatever its rank (SPEC §3.4: "at the front of its own lane").
#[test]
fn a_lower_rank_job_does_not_overtake_a_waiting_retry() {
    let mut s = with(1, 10, retrying(1, Duration::ZERO));
    queue(&mut s, job(1, "a", 0), ms(0));
    queue(&mut s, job(2, "a", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    assert_eq!(retry(&mut s, 1, ms(1)), 2);
    assert_eq!(
        s.admit(job(3, "a", -1), ms(2)),
        Admission::Queued { ahead: 1 },
        "the retry is ahead of any new job"
    );
    let st = take(&mut s, ms(3));
    assert_eq!((st.seq, st.attempt), (1, 2), "the retry must run next");
}

/// A retried batch goes again as it was: a job admitted meanwhile is not merged into it (it
/// would be counted at the retry's try and get fewer retries of its own).
#[test]
fn a_retried_batch_is_not_merged_with_later_jobs() {
    let policy = Policy {
        retries: 1,
        ..batching(3, usize::MAX, Duration::ZERO)
    };
    let mut s = with(1, 10, policy);
    queue(&mut s, job(1, "a", 0), ms(0));
    queue(&mut s, job(2, "a", 0), ms(0));
    assert_eq!(batch(&mut s, ms(0)), [1, 2]);
    queue(&mut s, job(3, "a", 0), ms(1));
    assert_eq!(retry(&mut s, 1, ms(2)), 2);
    let st = take(&mut s, ms(2));
    assert_eq!((st.batch, st.attempt), (vec![1, 2], 2), "the retry, alone");
    failed_done(&mut s, 1, ms(3));
    let st = take(&mut s, ms(3));
    assert_eq!((st.batch, st.attempt), (vec![3], 1));
    assert_eq!(retry(&mut s, 3, ms(4)), 2, "job 3 has its own retry");
}

/// `--batch-delay` debounces streamed input; a retry is paced by `--retry-delay` alone.
#[test]
fn a_retry_is_not_debounced_by_the_batch_delay() {
    let policy = Policy {
        retries: 1,
        ..batching(3, usize::MAX, ms(50))
    };
    let mut s = with(1, 10, policy);
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(s.take(ms(49)), None);
    assert_eq!(batch(&mut s, ms(50)), [1]);
    assert_eq!(retry(&mut s, 1, ms(60)), 2);
    let st = s.take(ms(60));
    assert_eq!(
        st.map(|st| (st.batch, st.attempt)),
        Some((vec![1], 2)),
        "job 1 waited its batch delay before its first try"
    );
}

// ---------------------------------------------------------------------------------------------
// --sticky-slots
// ---------------------------------------------------------------------------------------------

#[test]
fn sticky_slots_bind_a_key_to_its_first_slot() {
    let mut s = with(3, 10, sticky());
    for (seq, key) in [(1, "a"), (2, "b"), (3, "c")] {
        queue(&mut s, job(seq, key, 0), ms(0));
    }
    let slots: Vec<_> = std::iter::from_fn(|| s.take(ms(0)))
        .map(|st| (st.key.to_string(), st.slot))
        .collect();
    assert_eq!(slots, [("a".into(), 1), ("b".into(), 2), ("c".into(), 3)]);
    for seq in 1..=3 {
        done(&mut s, seq);
    }
    assert_eq!(s.lane_count(), 0);
    // Every slot is free: c and b still get their own, and a new key the smallest free one.
    queue(&mut s, job(4, "c", 0), ms(1));
    queue(&mut s, job(5, "b", 0), ms(1));
    queue(&mut s, job(6, "d", 0), ms(1));
    assert_eq!(take3(&mut s, ms(1)), (4, "c".into(), 3));
    assert_eq!(take3(&mut s, ms(1)), (5, "b".into(), 2));
    assert_eq!(take3(&mut s, ms(1)), (6, "d".into(), 1));
}

#[test]
fn without_sticky_slots_a_key_takes_the_smallest_free_slot() {
    let mut s = with(2, 10, Policy::default());
    queue(&mut s, job(1, "a", 0), ms(0));
    queue(&mut s, job(2, "b", 0), ms(0));
    assert_eq!(take3(&mut s, ms(0)), (1, "a".into(), 1));
    assert_eq!(take3(&mut s, ms(0)), (2, "b".into(), 2));
    done(&mut s, 1);
    queue(&mut s, job(3, "b", 0), ms(1));
    done(&mut s, 2);
    assert_eq!(take3(&mut s, ms(1)), (3, "b".into(), 1));
}

#[test]
fn a_sticky_key_waits_for_its_slot_while_other_keys_are_served() {
    let mut s = with(2, 10, sticky());
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(take3(&mut s, ms(0)), (1, "a".into(), 1));
    done(&mut s, 1);
    queue(&mut s, job(2, "c", 0), ms(1));
    assert_eq!(
        take3(&mut s, ms(1)),
        (2, "c".into(), 1),
        "c binds to slot 1 too"
    );
    // a comes back: slot 2 is free, but a is bound to slot 1 (busy with c).
    queue(&mut s, job(3, "a", 0), ms(2));
    assert_eq!(s.take(ms(2)), None, "a waits for slot 1");
    // A key behind a in the ready line is not blocked by it.
    queue(&mut s, job(4, "d", 0), ms(3));
    assert_eq!(take3(&mut s, ms(3)), (4, "d".into(), 2));
    done(&mut s, 4);
    queue(&mut s, job(5, "d", 0), ms(4));
    assert_eq!(take3(&mut s, ms(4)), (5, "d".into(), 2), "d passes a again");
    assert_eq!(s.take(ms(4)), None);
    assert_eq!(s.queued(), 1, "a still waits");
    // Slot 1 frees up: a gets it, and only then.
    assert_eq!(done(&mut s, 2).1, 1);
    assert_eq!(take3(&mut s, ms(5)), (3, "a".into(), 1));
}

#[test]
fn a_sticky_key_that_waits_keeps_its_place_in_the_ready_line() {
    let mut s = with(2, 10, sticky());
    queue(&mut s, job(1, "a", 0), ms(0));
    queue(&mut s, job(2, "b", 0), ms(0));
    assert_eq!(take3(&mut s, ms(0)), (1, "a".into(), 1));
    assert_eq!(take3(&mut s, ms(0)), (2, "b".into(), 2));
    done(&mut s, 1);
    queue(&mut s, job(3, "c", 0), ms(1));
    assert_eq!(take3(&mut s, ms(1)), (3, "c".into(), 1));
    queue(&mut s, job(4, "b", 0), ms(2)); // b busy: joins at release
    done(&mut s, 3); // slot 1 free; c idle
    queue(&mut s, job(5, "a", 0), ms(3)); // a ready, slot 1 free: would start
    queue(&mut s, job(6, "c", 0), ms(3)); // c ready behind a, also slot 1
    assert_eq!(
        take3(&mut s, ms(3)),
        (5, "a".into(), 1),
        "first come first served"
    );
    assert_eq!(s.take(ms(3)), None, "c waits for slot 1, b is busy");
    done(&mut s, 2); // b rejoins behind c
    assert_eq!(take3(&mut s, ms(4)), (4, "b".into(), 2));
    done(&mut s, 5);
    assert_eq!(take3(&mut s, ms(5)), (6, "c".into(), 1));
}

#[test]
fn a_sticky_retry_keeps_its_slot() {
    let policy = Policy {
        retries: 1,
        ..sticky()
    };
    let mut s = with(2, 10, policy);
    queue(&mut s, job(1, "a", 0), ms(0));
    queue(&mut s, job(2, "b", 0), ms(0));
    assert_eq!(take3(&mut s, ms(0)), (1, "a".into(), 1));
    assert_eq!(take3(&mut s, ms(0)), (2, "b".into(), 2));
    assert_eq!(
        fail(&mut s, 2, ms(1)),
        Released::Retry {
            key: Arc::from("b"),
            slot: 2,
            attempt: 2
        }
    );
    done(&mut s, 1);
    let st = take(&mut s, ms(2));
    assert_eq!((st.seq, st.slot, st.attempt), (2, 2, 2));
}

// ---------------------------------------------------------------------------------------------
// --batch-size, --batch-bytes
// ---------------------------------------------------------------------------------------------

#[test]
fn batch_size_one_is_no_batching() {
    let mut s = with(1, 10, batching(1, usize::MAX, ms(100)));
    queue(&mut s, job(1, "a", 0), ms(0));
    queue(&mut s, job(2, "a", 0), ms(0));
    assert_eq!(
        batch(&mut s, ms(0)),
        [1],
        "a batch of one is full: no delay"
    );
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn batch_size_zero_is_raised_to_one() {
    let mut s = with(1, 10, batching(0, usize::MAX, Duration::ZERO));
    assert_eq!(s.policy().batch_size, 1);
    queue(&mut s, job(1, "a", 0), ms(0));
    queue(&mut s, job(2, "a", 0), ms(0));
    assert_eq!(batch(&mut s, ms(0)), [1]);
}

#[test]
fn a_batch_is_the_longest_prefix_within_the_batch_size() {
    let mut s = with(1, 10, batching(3, usize::MAX, Duration::ZERO));
    for seq in 1..=5 {
        queue(&mut s, job(seq, "a", 0), ms(seq));
    }
    let st = take(&mut s, ms(10));
    assert_eq!(
        (st.seq, st.batch, st.waited, st.attempt),
        (1, vec![1, 2, 3], ms(9), 1)
    );
    assert_eq!(s.queued(), 2, "queued drops by the batch length");
    assert_eq!(s.running(), 1, "a batch is one run");
    assert_eq!(
        s.release(2),
        Released::Unknown,
        "a batch is known by its first job"
    );
    assert_eq!(s.release(3), Released::Unknown);
    done(&mut s, 1);
    assert_eq!(batch(&mut s, ms(11)), [4, 5]);
    assert_eq!(s.queued(), 0);
    done(&mut s, 4);
    assert!(s.is_idle());
    assert_eq!(s.lane_count(), 0);
}

#[test]
fn a_batch_follows_lane_order_and_holds_one_key() {
    let mut s = with(2, 20, batching(3, usize::MAX, Duration::ZERO));
    let jobs = [
        (1, "a", 5),
        (2, "b", 0),
        (3, "a", 1),
        (4, "a", 9),
        (5, "a", 1),
        (6, "a", -3),
    ];
    for (seq, key, rank) in jobs {
        queue(&mut s, job(seq, key, rank), ms(0));
    }
    let st = take(&mut s, ms(0));
    assert_eq!((st.seq, &*st.key, st.batch), (6, "a", vec![6, 3, 5]));
    assert_eq!(batch(&mut s, ms(0)), [2]);
    // A lower rank admitted while a runs goes first in the next batch.
    queue(&mut s, job(7, "a", 0), ms(1));
    done(&mut s, 6);
    assert_eq!(batch(&mut s, ms(1)), [7, 1, 4]);
}

#[test]
fn a_batch_counts_as_one_job_against_the_cap() {
    let mut s = with(2, 20, batching(4, usize::MAX, Duration::ZERO));
    for seq in 1..=4 {
        queue(&mut s, job(seq, "a", 0), ms(0));
    }
    queue(&mut s, job(5, "b", 0), ms(0));
    queue(&mut s, job(6, "c", 0), ms(0));
    assert_eq!(batch(&mut s, ms(0)), [1, 2, 3, 4]);
    assert_eq!(batch(&mut s, ms(0)), [5]);
    assert_eq!(s.take(ms(0)), None, "two runs are the cap");
    assert_eq!((s.running(), s.queued()), (2, 1));
    assert_eq!(done(&mut s, 1), (Arc::from("a"), 1));
    let st = take(&mut s, ms(1));
    assert_eq!((st.batch, st.slot), (vec![6], 1));
}

#[test]
fn batch_bytes_bounds_the_sum_of_weights() {
    let mut s = with(1, 20, batching(10, 10, Duration::ZERO));
    for (seq, weight) in [(1, 4), (2, 4), (3, 4), (4, 5), (5, 5), (6, 0), (7, 11)] {
        queue(&mut s, weighted(seq, "a", weight), ms(0));
    }
    let mut batches = Vec::new();
    while let Some(st) = s.take(ms(0)) {
        batches.push(st.batch);
        done(&mut s, st.seq);
    }
    // 4+4 (+4 > 10), 4+5 (+5 > 10), 5+0 (+11 > 10), 11 alone.
    assert_eq!(batches, [vec![1, 2], vec![3, 4], vec![5, 6], vec![7]]);
}

#[test]
fn jobs_a_job_will_be_batched_with_are_not_ahead_of_it() {
    let mut s = with(1, 20, batching(2, 10, Duration::ZERO));
    let ahead = |s: &mut Scheduler, seq: Seq, weight: usize| match s
        .admit(weighted(seq, "a", weight), ms(0))
    {
        Admission::Queued { ahead } => ahead,
        other => panic!("job {seq}: {other:?}"),
    };
    assert_eq!(ahead(&mut s, 1, 1), 0);
    assert_eq!(take(&mut s, ms(0)).batch, [1]);
    // Job 1 runs; 2 and 3 will go together, 4 and 5 after them, 6 (too heavy to share)
    // alone after those.
    assert_eq!(ahead(&mut s, 2, 1), 1, "the job in flight");
    assert_eq!(ahead(&mut s, 3, 1), 1, "2 goes with it");
    assert_eq!(ahead(&mut s, 4, 1), 3);
    assert_eq!(ahead(&mut s, 5, 1), 3);
    assert_eq!(ahead(&mut s, 6, 10), 5);
    let lanes = s.waiting_lanes();
    assert_eq!(lanes.len(), 1);
    assert_eq!(
        lanes[0].waiting,
        [(2, 1), (3, 1), (4, 3), (5, 3), (6, 5)],
        "the status says the same"
    );
    done(&mut s, 1);
    assert_eq!(take(&mut s, ms(0)).batch, [2, 3]);
    assert_eq!(s.waiting_lanes()[0].waiting, [(4, 2), (5, 2), (6, 4)]);
}

#[test]
fn the_byte_bound_is_inclusive() {
    let mut s = with(1, 20, batching(10, 10, Duration::ZERO));
    for (seq, weight) in [(1, 5), (2, 5), (3, 10), (4, 1)] {
        queue(&mut s, weighted(seq, "a", weight), ms(0));
    }
    assert_eq!(batch(&mut s, ms(0)), [1, 2]);
    done(&mut s, 1);
    assert_eq!(batch(&mut s, ms(0)), [3]);
}

#[test]
fn a_single_over_size_job_runs_alone() {
    let mut s = with(1, 20, batching(10, 10, Duration::ZERO));
    for (seq, weight) in [(1, 3), (2, 25), (3, 3), (4, 3)] {
        queue(&mut s, weighted(seq, "a", weight), ms(0));
    }
    let mut batches = Vec::new();
    while let Some(st) = s.take(ms(0)) {
        batches.push(st.batch);
        done(&mut s, st.seq);
    }
    assert_eq!(batches, [vec![1], vec![2], vec![3, 4]]);
    // Even with a byte bound of zero, every batch holds one job.
    let mut s = with(1, 20, batching(10, 0, Duration::ZERO));
    for seq in 1..=2 {
        queue(&mut s, weighted(seq, "a", 1), ms(0));
    }
    assert_eq!(batch(&mut s, ms(0)), [1]);
    done(&mut s, 1);
    assert_eq!(batch(&mut s, ms(0)), [2]);
}

#[test]
fn drain_returns_every_job_of_a_waiting_batch() {
    let mut s = with(1, 20, batching(3, usize::MAX, Duration::ZERO));
    for seq in 1..=5 {
        queue(&mut s, job(seq, "a", 0), ms(0));
    }
    assert_eq!(batch(&mut s, ms(0)), [1, 2, 3]);
    let drained: Vec<Seq> = s.drain(ms(1)).into_iter().map(|d| d.seq).collect();
    assert_eq!(drained, [4, 5]);
    done(&mut s, 1);
    assert!(s.is_idle());
}

// ---------------------------------------------------------------------------------------------
// --batch-delay
// ---------------------------------------------------------------------------------------------

#[test]
fn a_partial_batch_waits_exactly_until_its_oldest_job_has_waited_the_delay() {
    let mut s = with(1, 20, batching(3, usize::MAX, ms(100)));
    queue(&mut s, job(1, "a", 0), ms(10));
    assert_eq!(s.next_deadline(), Some(ms(110)));
    queue(&mut s, job(2, "a", 0), ms(50));
    assert_eq!(s.next_deadline(), Some(ms(110)), "from the oldest job");
    assert_eq!(s.take(ms(10)), None);
    assert_eq!(s.take(ms(109)), None, "not a tick early");
    assert!(s.expire(ms(109)).is_empty());
    let st = take(&mut s, ms(110));
    assert_eq!((st.batch, st.waited), (vec![1, 2], ms(100)));
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn the_oldest_job_counts_even_when_it_is_not_first_in_the_lane() {
    let mut s = with(1, 20, batching(3, usize::MAX, ms(100)));
    queue(&mut s, job(1, "a", 5), ms(0));
    queue(&mut s, job(2, "a", -5), ms(60));
    assert_eq!(s.next_deadline(), Some(ms(100)));
    assert_eq!(s.take(ms(99)), None);
    let st = take(&mut s, ms(100));
    assert_eq!((st.seq, st.batch, st.waited), (2, vec![2, 1], ms(40)));
}

#[test]
fn a_full_batch_starts_at_once_despite_the_delay() {
    let mut s = with(1, 20, batching(2, usize::MAX, ms(100)));
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(s.take(ms(5)), None);
    queue(&mut s, job(2, "a", 0), ms(5));
    assert_eq!(batch(&mut s, ms(5)), [1, 2], "two jobs fill the batch");
    // The next batch starts from scratch.
    queue(&mut s, job(3, "a", 0), ms(6));
    done(&mut s, 1);
    assert_eq!(s.take(ms(105)), None, "job 3 alone waits until 106");
    assert_eq!(s.next_deadline(), Some(ms(106)));
    assert_eq!(batch(&mut s, ms(106)), [3]);
}

#[test]
fn a_batch_cut_by_the_byte_bound_is_full() {
    let mut s = with(1, 20, batching(5, 10, ms(100)));
    queue(&mut s, weighted(1, "a", 6), ms(0));
    assert_eq!(s.take(ms(0)), None, "6 bytes of 10, one job of 5: partial");
    queue(&mut s, weighted(2, "a", 6), ms(1));
    assert_eq!(
        batch(&mut s, ms(1)),
        [1],
        "job 2 does not fit: the batch is full"
    );
    done(&mut s, 1);
    assert_eq!(s.take(ms(100)), None, "job 2 alone is partial again");
    assert_eq!(batch(&mut s, ms(101)), [2]);
}

/// A batch whose weight already reaches the byte bound can never grow: it is full and goes at
/// once (SPEC §3.5 "a full batch is ready at once").
#[test]
fn an_over_size_job_alone_is_a_full_batch() {
    let mut s = with(1, 20, batching(5, 10, ms(100)));
    queue(&mut s, weighted(1, "a", 25), ms(0));
    assert_eq!(s.take(ms(0)).map(|st| st.batch), Some(vec![1]));
}

#[test]
fn a_partial_batch_does_not_block_other_keys() {
    let mut s = with(2, 20, batching(2, usize::MAX, ms(100)));
    queue(&mut s, job(1, "a", 0), ms(0));
    queue(&mut s, job(2, "b", 0), ms(1));
    queue(&mut s, job(3, "b", 0), ms(2));
    assert_eq!(batch(&mut s, ms(2)), [2, 3], "b is full, a is not");
    assert_eq!(s.take(ms(2)), None);
    assert_eq!(s.next_deadline(), Some(ms(100)));
    assert_eq!(batch(&mut s, ms(100)), [1]);
}

#[test]
fn a_busy_lane_gets_no_batch_deadline_until_released() {
    let mut s = with(2, 20, batching(3, usize::MAX, ms(100)));
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(batch(&mut s, ms(100)), [1]);
    queue(&mut s, job(2, "a", 0), ms(150));
    assert_eq!(
        s.next_deadline(),
        None,
        "a is busy: taking it would not help"
    );
    done(&mut s, 1);
    assert_eq!(s.next_deadline(), Some(ms(250)));
    assert_eq!(s.take(ms(249)), None);
    assert_eq!(batch(&mut s, ms(250)), [2]);
    // Released after its delay ran out: it goes at once.
    queue(&mut s, job(3, "a", 0), ms(260));
    done(&mut s, 2);
    assert_eq!(batch(&mut s, ms(400)), [3]);
}

#[test]
fn without_a_delay_a_partial_batch_starts_at_once() {
    let mut s = with(1, 20, batching(3, usize::MAX, Duration::ZERO));
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(s.next_deadline(), None);
    assert_eq!(batch(&mut s, ms(0)), [1]);
}

/// `next_deadline` is when the core must be woken; a partial batch whose delay is over but
/// that cannot start (no slot for it) must not be reported as due, or the shell, which sleeps
/// until that time, wakes again at once, in a loop, until a job ends.
#[test]
fn a_due_batch_that_cannot_start_reports_no_past_deadline() {
    // The cap is reached.
    let mut s = with(1, 20, batching(2, usize::MAX, ms(10)));
    queue(&mut s, job(1, "x", 0), ms(0));
    queue(&mut s, job(2, "x", 0), ms(0));
    assert_eq!(batch(&mut s, ms(0)), [1, 2]);
    queue(&mut s, job(3, "a", 0), ms(0));
    assert_eq!(s.take(ms(20)), None, "the cap is reached");
    assert!(s.expire(ms(20)).is_empty());
    let next = s.next_deadline();
    assert!(
        next.is_none_or(|at| at > ms(20)),
        "next_deadline {next:?} is not after now (20ms): the shell would spin"
    );
    // Once a slot is free the batch starts at once.
    done(&mut s, 1);
    assert_eq!(batch(&mut s, ms(21)), [3]);
}

#[test]
fn a_due_sticky_batch_waiting_for_its_slot_reports_no_past_deadline() {
    let policy = Policy {
        sticky_slots: true,
        ..batching(2, usize::MAX, ms(10))
    };
    let mut s = with(2, 20, policy);
    queue(&mut s, job(1, "a", 0), ms(0));
    queue(&mut s, job(2, "a", 0), ms(0));
    assert_eq!(take3(&mut s, ms(0)), (1, "a".into(), 1));
    done(&mut s, 1);
    queue(&mut s, job(3, "c", 0), ms(0));
    queue(&mut s, job(4, "c", 0), ms(0));
    assert_eq!(take3(&mut s, ms(0)), (3, "c".into(), 1));
    queue(&mut s, job(5, "a", 0), ms(0));
    assert_eq!(s.take(ms(20)), None, "a waits for slot 1");
    let next = s.next_deadline();
    assert!(
        next.is_none_or(|at| at > ms(20)),
        "next_deadline {next:?} is not after now (20ms): the shell would spin"
    );
    done(&mut s, 3);
    assert_eq!(batch(&mut s, ms(21)), [5]);
}

#[test]
fn jobs_admitted_again_from_a_journal_coalesce_nothing_and_are_not_coalesced_away() {
    // An earlier server without coalescing answered three jobs of one key `queued`; this one
    // coalesces. Admitted again, each keeps its promised run: none replaces another, and a
    // new job replaces none of them (it joins the lane behind them).
    let mut s = with(
        1,
        10,
        Policy {
            cancel_in_progress: true,
            ..coalescing()
        },
    );
    let _ = s.admit(job(9, "busy", 0), ms(0));
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(9));
    for seq in 1..=3 {
        match s.offer_again(job(seq, "q", 0), ms(1)) {
            Offer::Queued {
                replaced, cancel, ..
            } => assert!(replaced.is_none() && cancel.is_none(), "seq {seq}"),
            other => panic!("seq {seq}: {other:?}"),
        }
    }
    match s.offer(job(4, "q", 0), None, ms(2)) {
        Offer::Queued { replaced, .. } => assert!(replaced.is_none(), "{replaced:?}"),
        other => panic!("{other:?}"),
    }
    // A fifth coalesces the fourth (fresh, not promised) away, as this server's policy says.
    match s.offer(job(5, "q", 0), None, ms(3)) {
        Offer::Queued { replaced, .. } => {
            assert_eq!(replaced.map(|account| account.seq), Some(4));
        }
        other => panic!("{other:?}"),
    }
    let _ = s.release(9);
    let mut order = Vec::new();
    while let Some(start) = s.take(ms(4)) {
        order.push(start.seq);
        let _ = s.release(start.seq);
    }
    assert_eq!(order, [1, 2, 3, 5]);
}

#[test]
fn a_running_or_retrying_job_admitted_again_from_a_journal_is_superseded_by_no_newer_job() {
    // Under --cancel-in-progress a newer job supersedes the key's running job, or one waiting
    // for its retry; not one an earlier server promised its run.
    let mut s = with(
        1,
        10,
        Policy {
            retries: 1,
            retry_delay: Duration::from_secs(60),
            ..cancelling()
        },
    );
    let _ = s.offer_again(job(1, "q", 0), ms(0));
    let _ = s.offer_again(job(2, "q", 0), ms(0));
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(1));
    match s.offer(job(3, "q", 0), None, ms(1)) {
        Offer::Queued { cancel, .. } => assert_eq!(cancel, None),
        other => panic!("{other:?}"),
    }
    // 1 fails: it waits for its retry, ahead of 2 and 3; a newer job does not supersede it.
    assert!(matches!(fail(&mut s, 1, ms(2)), Released::Retry { .. }));
    match s.offer(job(4, "q", 0), None, ms(3)) {
        Offer::Queued {
            cancel, retries, ..
        } => {
            assert_eq!(cancel, None);
            assert!(retries.is_empty(), "{retries:?}");
        }
        other => panic!("{other:?}"),
    }
}

/// `--max-queued` bounds the jobs that wait: a job the next take starts (its key idle, a
/// slot free, no ready key before it) is admitted however many jobs wait; one that would
/// wait, for its busy key, a full cap, its own slot or grouped output, is not.
#[test]
fn a_job_that_starts_at_once_is_admitted_past_max_queued() {
    let mut s = with(2, 1, Policy::default());
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    queue(&mut s, job(2, "a", 0), ms(0));
    assert!(!s.has_room());
    assert_eq!(
        s.admit(job(3, "b", 0), ms(1)),
        Admission::Queued { ahead: 0 }
    );
    assert_eq!(take(&mut s, ms(1)).seq, 3);
    assert_eq!(s.queued(), 1, "job 2 waits behind job 1; job 3 runs");
    assert_eq!(s.admit(job(4, "c", 0), ms(1)), Admission::Full, "no slot");
    assert!(matches!(s.release(3), Released::Done { slot: 2, .. }));
    assert_eq!(s.admit(job(5, "a", 0), ms(2)), Admission::Full, "busy key");
    s.set_output_backlog(2);
    assert_eq!(s.admit(job(6, "c", 0), ms(2)), Admission::Full, "backlog");
    s.set_output_backlog(0);
    queue(&mut s, job(7, "c", 0), ms(2));
    assert_eq!(take(&mut s, ms(2)).seq, 7);
}

/// A ready key that could start goes first: the new job would wait behind it.
#[test]
fn past_max_queued_a_ready_key_goes_first() {
    let mut s = with(2, 1, Policy::default());
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(s.admit(job(2, "b", 0), ms(0)), Admission::Full);
}

/// Under `--sticky-slots` a key waits for its own slot; when batching, a batch waits for
/// the jobs after its first: neither starts at once past the bound.
#[test]
fn past_max_queued_neither_a_taken_sticky_slot_nor_a_batch_starts_at_once() {
    let mut s = with(3, 1, sticky());
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(take3(&mut s, ms(0)), (1, "a".into(), 1));
    queue(&mut s, job(2, "b", 0), ms(0));
    assert_eq!(take3(&mut s, ms(0)), (2, "b".into(), 2));
    assert!(matches!(s.release(2), Released::Done { slot: 2, .. }));
    queue(&mut s, job(3, "c", 0), ms(1));
    assert_eq!(take3(&mut s, ms(1)), (3, "c".into(), 2));
    queue(&mut s, job(4, "a", 0), ms(1));
    assert!(!s.has_room());
    assert_eq!(
        s.admit(job(5, "b", 0), ms(2)),
        Admission::Full,
        "slot 2 taken"
    );
    queue(&mut s, job(6, "d", 0), ms(2));
    assert_eq!(take3(&mut s, ms(2)), (6, "d".into(), 3));

    let mut s = with(2, 1, batching(4, usize::MAX, Duration::ZERO));
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    queue(&mut s, job(2, "a", 0), ms(0));
    assert_eq!(s.admit(job(3, "b", 0), ms(1)), Admission::Full);
}

/// `--cancel-in-progress` at `max_queued`: the key's job waiting out its retry delay is
/// superseded by a newer job, which takes its place in the queue (and here starts at once):
/// the count does not grow, so the newer job is not refused. Under `--retries` a job that
/// starts at once is not admitted past the bound otherwise: it may come back to wait.
#[test]
fn at_max_queued_a_newer_job_supersedes_a_retry_waiting_out_its_delay() {
    let policy = Policy {
        cancel_in_progress: true,
        retries: 1,
        retry_delay: ms(100),
        ..Policy::default()
    };
    let mut s = with(2, 1, policy);
    queue(&mut s, job(1, "a", 0), ms(0));
    assert_eq!(take(&mut s, ms(0)).seq, 1);
    assert_eq!(retry(&mut s, 1, ms(1)), 2);
    assert_eq!(s.queued(), 1, "the retry waits out its delay");
    // Another key's job would start at once, but under --retries it may come back to wait.
    assert_eq!(s.admit(job(9, "b", 0), ms(1)), Admission::Full);
    match s.admit(job(2, "a", 0), ms(2)) {
        Admission::Superseding { retries, .. } => {
            assert_eq!(retries.iter().map(|a| a.seq).collect::<Vec<_>>(), [1]);
        }
        other => panic!("refused: {other:?}"),
    }
    assert_eq!(take(&mut s, ms(2)).seq, 2);
}
