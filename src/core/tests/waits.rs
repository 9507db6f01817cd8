//! Why jobs wait: the cause of each waiting job in constructed scenarios (every cause there
//! is), the `waiting` changes told of, and the spans of each record's wait adding up to it.

use std::sync::Arc;
use std::time::Duration;

use super::super::*;
use super::{assert_waits_add_up, job, keys, ms, told_wait};

fn scheduler(max_concurrent: usize, policy: Policy) -> Scheduler {
    let mut s = Scheduler::with_policy(
        Limits {
            max_concurrent,
            max_queued: 100,
        },
        policy,
    );
    s.report_wait_changes();
    s
}

fn exited(code: i32, at: Tick) -> RunFacts {
    RunFacts {
        exit: Some(ExitFacts::Exited(code)),
        stopped_while_running: false,
        ended_at: at,
    }
}

fn span(cause: WaitCause, from: u64, to: u64) -> WaitSpan {
    WaitSpan {
        cause,
        started_at: ms(from),
        ended_at: ms(to),
    }
}

fn behind(seq: Seq) -> WaitCause {
    WaitCause::KeyBusy { behind: seq }
}

/// The changes told of since the last call, as (seq, cause, at in ms).
fn changes(s: &mut Scheduler) -> Vec<(Seq, WaitCause, u64)> {
    s.take_wait_changes()
        .into_iter()
        .map(|c| (c.seq, c.cause, c.at.as_millis() as u64))
        .collect()
}

/// Ends run `seq` at `now` with `code`, and returns its members' accounts, checked.
fn end(s: &mut Scheduler, seq: Seq, code: i32, now: Tick) -> Vec<Account> {
    let finished = s.finish(seq, exited(code, now), now).expect("in flight");
    for account in &finished.accounts {
        assert_waits_add_up(&account.waits, told_wait(account), "account");
    }
    finished.accounts
}

#[test]
fn a_job_waits_behind_its_key_then_for_the_cap() {
    let mut s = scheduler(1, Policy::default());
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(job(2, "a", 0), ms(0));
    let _ = s.admit(job(3, "b", 0), ms(0));
    assert_eq!(
        changes(&mut s),
        [
            (1, WaitCause::Cap, 0),
            (2, behind(1), 0),
            (3, WaitCause::Cap, 0)
        ]
    );
    assert_eq!(s.take(ms(5)).map(|st| st.seq), Some(1));
    assert_eq!(s.take(ms(5)), None);
    // 1 in flight: 2 still waits behind it, no change told.
    assert_eq!(changes(&mut s), []);
    let accounts = end(&mut s, 1, 0, ms(30));
    assert_eq!(accounts[0].waits, [span(WaitCause::Cap, 0, 5)]);
    // The key is free: 2 waits for the one slot, which 3 (first in the ready line) takes.
    assert_eq!(changes(&mut s), [(2, WaitCause::Cap, 30)]);
    assert_eq!(s.take(ms(30)).map(|st| st.seq), Some(3));
    let _ = end(&mut s, 3, 0, ms(40));
    assert_eq!(s.take(ms(40)).map(|st| st.seq), Some(2));
    let accounts = end(&mut s, 2, 0, ms(50));
    assert_eq!(
        accounts[0].waits,
        [span(behind(1), 0, 30), span(WaitCause::Cap, 30, 40)]
    );
}

#[test]
fn a_retry_waits_out_its_delay_and_the_jobs_behind_it_wait_behind_it() {
    let policy = Policy {
        retries: 1,
        retry_delay: ms(100),
        ..Policy::default()
    };
    let mut s = scheduler(2, policy);
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(job(2, "a", 0), ms(0));
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(1));
    let finished = s.finish(1, exited(1, ms(10)), ms(10)).expect("in flight");
    assert!(finished.retry);
    let _ = changes(&mut s);
    // The delay is over at 110; the lane is next looked at (expire) late, at 150. The other
    // slot was free all along, so nothing but the delay held the retry: it never waited for
    // the cap, and its delay lasts until the shell came to it.
    assert!(s.expire(ms(150)).is_empty());
    assert_eq!(s.take(ms(150)).map(|st| st.seq), Some(1));
    assert_eq!(changes(&mut s), []);
    let accounts = end(&mut s, 1, 0, ms(160));
    assert_eq!(accounts[0].waits, [span(WaitCause::RetryDelay, 10, 150)]);
    assert_eq!(accounts[0].tries.last().map(|t| t.waited), Some(ms(140)));
    assert_eq!(s.take(ms(160)).map(|st| st.seq), Some(2));
    let accounts = end(&mut s, 2, 0, ms(170));
    assert_eq!(accounts[0].waits, [span(behind(1), 0, 160)]);
}

#[test]
fn a_delay_that_ran_out_with_every_slot_taken_waits_for_the_cap_from_its_end() {
    let policy = Policy {
        retries: 1,
        retry_delay: ms(100),
        ..Policy::default()
    };
    let mut s = scheduler(1, policy);
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(job(2, "b", 0), ms(0));
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(1));
    assert!(
        s.finish(1, exited(1, ms(10)), ms(10))
            .expect("in flight")
            .retry
    );
    // b takes the one slot while a's retry waits out its delay, and holds it past 110.
    assert_eq!(s.take(ms(20)).map(|st| st.seq), Some(2));
    let _ = changes(&mut s);
    assert!(s.expire(ms(150)).is_empty());
    assert_eq!(changes(&mut s), [(1, WaitCause::Cap, 110)]);
    let _ = end(&mut s, 2, 0, ms(200));
    assert_eq!(s.take(ms(200)).map(|st| st.seq), Some(1));
    let accounts = end(&mut s, 1, 0, ms(210));
    assert_eq!(
        accounts[0].waits,
        [
            span(WaitCause::RetryDelay, 10, 110),
            span(WaitCause::Cap, 110, 200)
        ]
    );
}

#[test]
fn a_delay_that_ran_out_while_other_jobs_ended_with_slots_free_never_waited_for_the_cap() {
    let policy = Policy {
        retries: 1,
        retry_delay: ms(100),
        ..Policy::default()
    };
    let mut s = scheduler(4, policy);
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(job(2, "b", 0), ms(0));
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(1));
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(2));
    assert!(
        s.finish(1, exited(1, ms(10)), ms(10))
            .expect("in flight")
            .retry
    );
    // b ends after a's delay ran out, before the shell comes to a: a slot freed with others
    // free all along, which tells nothing of a cap that was never reached.
    let _ = end(&mut s, 2, 0, ms(112));
    assert!(s.expire(ms(115)).is_empty());
    assert_eq!(s.take(ms(115)).map(|st| st.seq), Some(1));
    let accounts = end(&mut s, 1, 0, ms(120));
    assert_eq!(accounts[0].waits, [span(WaitCause::RetryDelay, 10, 115)]);
}

#[test]
fn a_delay_found_over_while_the_shell_handles_other_ends_before_the_take_never_waited_for_the_cap()
{
    // The shell wakes late for a's delay (over at 110) and rejoins it at 111, then handles
    // the ends of b and c before it takes a at 114: slots free all along, and the ends only
    // freed more. a waited for its delay until it started, not for the cap.
    let policy = Policy {
        retries: 1,
        retry_delay: ms(100),
        ..Policy::default()
    };
    for weighted in [false, true] {
        let mut s = scheduler(8, policy);
        if weighted {
            s.set_resources(vec![Resource {
                name: Arc::from("gpu"),
                stock: Stock::Units((0..4).map(|i| Arc::from(i.to_string())).collect()),
            }]);
        }
        for (seq, key) in [(1, "a"), (2, "b"), (3, "c")] {
            let request = if weighted {
                needing(seq, key, 1, 1)
            } else {
                job(seq, key, 0)
            };
            let _ = s.admit(request, ms(0));
        }
        for seq in 1..=3 {
            assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(seq));
        }
        assert!(
            s.finish(1, exited(1, ms(10)), ms(10))
                .expect("in flight")
                .retry
        );
        assert!(s.expire(ms(111)).is_empty());
        let _ = end(&mut s, 2, 0, ms(112));
        let _ = end(&mut s, 3, 0, ms(113));
        assert_eq!(s.take(ms(114)).map(|st| st.seq), Some(1));
        let accounts = end(&mut s, 1, 0, ms(120));
        assert_eq!(
            accounts[0].waits,
            [span(WaitCause::RetryDelay, 10, 114)],
            "weighted: {weighted}"
        );
    }
}

/// Cap 4, one GPU, a retry with a 100 ms delay: job 1 (key a) took the GPU at 0 and failed at
/// 10, its retry held until 110.
fn a_gpu_job_failed_once() -> Scheduler {
    let policy = Policy {
        retries: 1,
        retry_delay: ms(100),
        ..Policy::default()
    };
    let mut s = scheduler(4, policy);
    s.set_resources(vec![Resource {
        name: Arc::from("gpu"),
        stock: Stock::Units(vec![Arc::from("0")]),
    }]);
    let _ = s.admit(needing(1, "a", 1, 1), ms(0));
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(1));
    assert!(
        s.finish(1, exited(1, ms(10)), ms(10))
            .expect("in flight")
            .retry
    );
    s
}

#[test]
fn in_a_run_with_resources_a_delay_that_ran_out_with_what_it_needs_free_never_waited_for_the_cap() {
    let mut s = a_gpu_job_failed_once();
    let _ = changes(&mut s);
    // The delay is over at 110; the shell comes to it at 113, the GPU and slots free all
    // along: only the delay held it, until it started.
    assert!(s.expire(ms(113)).is_empty());
    assert_eq!(s.take(ms(113)).map(|st| st.seq), Some(1));
    assert_eq!(changes(&mut s), []);
    let accounts = end(&mut s, 1, 0, ms(120));
    assert_eq!(accounts[0].waits, [span(WaitCause::RetryDelay, 10, 113)]);
}

#[test]
fn in_a_run_with_resources_a_delay_that_ran_out_with_the_resource_held_waits_for_it_from_its_end() {
    let mut s = a_gpu_job_failed_once();
    // b takes the GPU during a's delay and holds it past its end.
    let _ = s.admit(needing(2, "b", 1, 1), ms(20));
    assert_eq!(s.take(ms(20)).map(|st| st.seq), Some(2));
    let _ = changes(&mut s);
    assert!(s.expire(ms(113)).is_empty());
    assert_eq!(s.take(ms(113)), None);
    assert_eq!(changes(&mut s), [(1, gpu(), 110)]);
    let _ = end(&mut s, 2, 0, ms(200));
    assert_eq!(s.take(ms(200)).map(|st| st.seq), Some(1));
    let accounts = end(&mut s, 1, 0, ms(210));
    assert_eq!(
        accounts[0].waits,
        [span(WaitCause::RetryDelay, 10, 110), span(gpu(), 110, 200)]
    );
}

#[test]
fn in_a_run_with_resources_a_delay_that_ran_out_before_the_resource_was_freed_waited_for_it() {
    let mut s = a_gpu_job_failed_once();
    let _ = s.admit(needing(2, "b", 1, 1), ms(20));
    assert_eq!(s.take(ms(20)).map(|st| st.seq), Some(2));
    let _ = changes(&mut s);
    // b frees the GPU at 112, after a's delay ran out (110) and before the shell came to a
    // (115): a waited for the GPU from 110 to 112, not for the cap.
    let _ = end(&mut s, 2, 0, ms(112));
    assert!(s.expire(ms(115)).is_empty());
    assert_eq!(s.take(ms(115)).map(|st| st.seq), Some(1));
    let accounts = end(&mut s, 1, 0, ms(120));
    let causes: Vec<&WaitCause> = accounts[0].waits.iter().map(|w| &w.cause).collect();
    assert_eq!(causes.first(), Some(&&WaitCause::RetryDelay), "{causes:?}");
    assert!(!causes.contains(&&WaitCause::Cap), "{causes:?}");
}

#[test]
fn a_partial_batch_found_ready_late_waited_for_its_delay_not_the_cap() {
    let policy = Policy {
        batch_size: 3,
        batch_delay: ms(50),
        ..Policy::default()
    };
    let mut s = scheduler(4, policy);
    let _ = s.admit(job(1, "a", 0), ms(0));
    assert_eq!(s.take(ms(0)), None);
    // The delay is out at 50; the shell comes to it at 51.5, every slot free.
    assert_eq!(s.take(ms(51) + us(500)).map(|st| st.seq), Some(1));
    assert_eq!(changes(&mut s), [(1, WaitCause::BatchDelay, 0)]);
    let accounts = end(&mut s, 1, 0, ms(60));
    assert_eq!(
        accounts[0].waits,
        [WaitSpan {
            cause: WaitCause::BatchDelay,
            started_at: ms(0),
            ended_at: ms(51) + us(500),
        }]
    );
}

#[test]
fn a_partial_batch_whose_delay_ran_out_with_the_slot_taken_says_cap_when_woken_for_it() {
    // Cap 1, held by x's batch; partial batches of keys a and b wait out their 100 ms delay. The core asks to
    // be woken at its end (next_deadline); woken then, it tells the batch's wait for the cap
    // at once, not at the batch's start a job-length later.
    let policy = Policy {
        batch_size: 3,
        batch_delay: ms(100),
        ..Policy::default()
    };
    let mut s = scheduler(1, policy);
    for seq in 7..=9 {
        let _ = s.admit(job(seq, "x", 0), ms(0));
    }
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(job(2, "b", 0), ms(0));
    // x's batch is full: it goes at once.
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(7));
    let _ = changes(&mut s);
    assert_eq!(s.next_deadline(), Some(ms(100)));
    assert!(s.expire(ms(101)).is_empty());
    assert_eq!(s.take(ms(101)), None);
    assert_eq!(
        changes(&mut s),
        [(1, WaitCause::Cap, 100), (2, WaitCause::Cap, 100)]
    );
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn a_partial_batch_waits_out_its_delay_and_a_full_one_does_not() {
    let policy = Policy {
        batch_size: 3,
        batch_delay: ms(50),
        ..Policy::default()
    };
    let mut s = scheduler(1, policy);
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(job(2, "a", 0), ms(10));
    assert_eq!(
        changes(&mut s),
        [
            (1, WaitCause::BatchDelay, 0),
            (2, WaitCause::BatchDelay, 10)
        ]
    );
    assert_eq!(s.take(ms(20)), None);
    // The third job fills the batch: all three wait for nothing but a slot.
    let _ = s.admit(job(3, "a", 0), ms(30));
    let _ = s.admit(job(4, "a", 0), ms(30));
    assert_eq!(
        changes(&mut s),
        [
            (1, WaitCause::Cap, 30),
            (2, WaitCause::Cap, 30),
            (3, WaitCause::Cap, 30),
            (4, behind(3), 30)
        ]
    );
    let start = s.take(ms(35)).expect("a full batch");
    assert_eq!(start.batch, [1, 2, 3]);
    // 4 is now a batch of its own, waiting behind the batch in flight (known by 1).
    assert_eq!(changes(&mut s), [(4, behind(1), 35)]);
    let accounts = end(&mut s, 1, 0, ms(40));
    // Each member tells of its own wait, from its own admission to the batch's start, as its
    // wait_ms does: what its `waiting` events told.
    let own = |from: u64| {
        let mut spans = vec![span(WaitCause::Cap, 30, 35)];
        if from < 30 {
            spans.insert(0, span(WaitCause::BatchDelay, from, 30));
        }
        spans
    };
    let waits: Vec<(Seq, Vec<WaitSpan>)> =
        accounts.iter().map(|a| (a.seq, a.waits.clone())).collect();
    assert_eq!(waits, [(1, own(0)), (2, own(10)), (3, own(30))]);
    let waited: Vec<Option<Duration>> = accounts.iter().map(told_wait).collect();
    assert_eq!(waited, [Some(ms(35)), Some(ms(25)), Some(ms(5))]);
    // 4 alone: its delay runs from its admission; not taken before it is out.
    assert_eq!(s.take(ms(60)), None);
    assert_eq!(s.take(ms(80)).map(|st| st.seq), Some(4));
    let accounts = end(&mut s, 4, 0, ms(90));
    assert_eq!(
        accounts[0].waits,
        [
            span(behind(3), 30, 35),
            span(behind(1), 35, 40),
            span(WaitCause::BatchDelay, 40, 80)
        ]
    );
}

#[test]
fn host_wide_keys_wait_for_the_lock_then_the_shared_slot() {
    let mut s = scheduler(2, Policy::default());
    s.share_keys();
    let _ = s.admit(job(1, "a", 0), ms(0));
    assert_eq!(changes(&mut s), [(1, WaitCause::Lock, 0)]);
    let orders = s.host_keys();
    assert_eq!(orders.acquire.len(), 1);
    s.host_key_locked("a", ms(20));
    assert_eq!(changes(&mut s), [(1, WaitCause::SharedCap, 20)]);
    assert!(s.host_key_acquired("a", ms(45)));
    assert_eq!(changes(&mut s), [(1, WaitCause::Cap, 45)]);
    assert_eq!(s.take(ms(45)).map(|st| st.seq), Some(1));
    let accounts = end(&mut s, 1, 0, ms(50));
    assert_eq!(
        accounts[0].waits,
        [
            span(WaitCause::Lock, 0, 20),
            span(WaitCause::SharedCap, 20, 45)
        ]
    );
}

#[test]
fn a_key_lost_while_its_job_waits_for_a_slot_waits_for_the_lock_again() {
    let mut s = scheduler(1, Policy::default());
    s.share_keys();
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(job(2, "b", 0), ms(0));
    let _ = s.host_keys();
    assert!(s.host_key_acquired("a", ms(5)));
    assert_eq!(s.take(ms(5)).map(|st| st.seq), Some(1));
    assert!(s.host_key_acquired("b", ms(6)));
    assert_eq!(
        changes(&mut s),
        [
            (1, WaitCause::Lock, 0),
            (2, WaitCause::Lock, 0),
            (2, WaitCause::Cap, 6)
        ]
    );
    // Its key's session is lost while the slot is taken: nothing of b ran, it asks again.
    assert!(s.host_key_lost("b", ms(10)).is_empty());
    assert_eq!(changes(&mut s), [(2, WaitCause::Lock, 10)]);
    assert_eq!(keys(&s.host_keys().acquire), ["b"]);
}

#[test]
fn a_spawn_shortage_sends_the_job_back_waiting_for_the_cap() {
    let mut s = scheduler(2, Policy::default());
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(job(2, "b", 0), ms(0));
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(1));
    s.spawned(1, ms(0));
    let _ = s.admit(job(3, "a", 0), ms(0));
    assert_eq!(s.take(ms(10)).map(|st| st.seq), Some(2));
    let verdict = s.spawn_failed(2, SpawnFailure::Shortage { descriptors: false }, ms(12));
    assert!(matches!(verdict, SpawnVerdict::Deferred { .. }));
    assert_eq!(s.take(ms(30)).map(|st| st.seq), Some(2));
    s.spawned(2, ms(31));
    let accounts = end(&mut s, 2, 0, ms(40));
    // Contiguous from its admission: the cap, its spawn tried and deferred, the cap again.
    assert_eq!(accounts[0].waits, [span(WaitCause::Cap, 0, 30)]);
    let accounts = end(&mut s, 1, 0, ms(50));
    assert_eq!(accounts[0].waits, []);
    assert_eq!(s.take(ms(50)).map(|st| st.seq), Some(3));
    let accounts = end(&mut s, 3, 0, ms(60));
    assert_eq!(accounts[0].waits, [span(behind(1), 0, 50)]);
}

#[test]
fn a_drained_job_and_a_retry_stopped_in_its_delay_tell_of_the_wait_their_record_does() {
    let policy = Policy {
        retries: 1,
        retry_delay: Duration::from_secs(1),
        ..Policy::default()
    };
    let mut s = scheduler(1, policy);
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(job(2, "b", 0), ms(0));
    assert_eq!(s.take(ms(5)).map(|st| st.seq), Some(1));
    assert!(s.finish(1, exited(1, ms(10)), ms(10)).expect("ran").retry);
    let drained = s.drain(ms(20));
    // 1: its record tells of its last try's wait (5 ms, for the cap); 2: of its whole wait.
    assert_eq!(drained[0].waits, [span(WaitCause::Cap, 0, 5)]);
    assert_eq!(drained[1].waits, [span(WaitCause::Cap, 0, 20)]);
}

#[test]
fn a_rank_put_ahead_changes_whom_the_next_job_waits_behind() {
    let mut s = scheduler(1, Policy::default());
    let _ = s.admit(job(9, "x", 0), ms(0));
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(9));
    let _ = s.admit(job(1, "a", 5), ms(0));
    let _ = s.admit(job(2, "a", 5), ms(0));
    let _ = changes(&mut s);
    let _ = s.admit(job(3, "a", 1), ms(10));
    assert_eq!(
        changes(&mut s),
        [(3, WaitCause::Cap, 10), (1, behind(3), 10)],
        "2 still waits behind 1"
    );
}

#[test]
fn changes_are_not_kept_unless_asked_for() {
    let mut s = Scheduler::new(Limits {
        max_concurrent: 1,
        max_queued: 10,
    });
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(job(2, "a", 0), ms(0));
    assert!(s.take_wait_changes().is_empty());
    let _ = Arc::<str>::from("a");
}

fn needing(seq: Seq, key: &str, weight: u32, gpus: u64) -> JobRequest {
    JobRequest {
        needs: Some(Arc::new(Needs {
            weight,
            resources: if gpus > 0 {
                vec![(0, gpus)]
            } else {
                Vec::new()
            },
        })),
        ..job(seq, key, 0)
    }
}

fn gpu() -> WaitCause {
    WaitCause::Resource {
        name: Arc::from("gpu"),
    }
}

#[test]
fn a_job_short_of_a_named_resource_waits_for_it() {
    let mut s = scheduler(3, Policy::default());
    s.set_resources(vec![Resource {
        name: Arc::from("gpu"),
        stock: Stock::Units(vec![Arc::from("0")]),
    }]);
    let _ = s.admit(needing(1, "a", 1, 1), ms(0));
    let _ = s.admit(needing(2, "b", 1, 1), ms(0));
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(1));
    assert_eq!(s.take(ms(0)), None);
    // The one GPU is held by 1: 2 waits for it, though slots are free.
    let told = changes(&mut s);
    assert_eq!(told.last(), Some(&(2, gpu(), 0)));
    // A job needing no GPU starts beside it (in what is free beyond 2's reservation); 2
    // still waits for the GPU.
    let _ = s.admit(job(3, "c", 0), ms(10));
    assert_eq!(s.take(ms(10)).map(|st| st.seq), Some(3));
    assert_eq!(s.take(ms(10)), None);
    // Taken as it came: it waited for nothing, and no cause is told for it.
    assert_eq!(changes(&mut s), []);
    let _ = end(&mut s, 1, 0, ms(20));
    assert_eq!(s.take(ms(20)).map(|st| st.seq), Some(2));
    // It fitted and was taken: no change of cause is told for it (it no longer waits).
    assert_eq!(changes(&mut s), []);
    let accounts = end(&mut s, 2, 0, ms(40));
    assert_eq!(accounts[0].waits, [span(gpu(), 0, 20)]);
}

#[test]
fn a_job_reserved_for_then_short_of_the_cap_says_so() {
    // Cap 2, one GPU: 1 holds the GPU, 2 waits for it (and has one unit of the cap set
    // aside); when 1 ends, 3 (no GPU) already holds the other unit, so 2 waits for the cap.
    let mut s = scheduler(2, Policy::default());
    s.set_resources(vec![Resource {
        name: Arc::from("gpu"),
        stock: Stock::Units(vec![Arc::from("0")]),
    }]);
    let _ = s.admit(needing(1, "a", 1, 1), ms(0));
    let _ = s.admit(job(3, "c", 0), ms(0));
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(1));
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(3));
    let _ = s.admit(needing(2, "b", 1, 1), ms(5));
    assert_eq!(s.take(ms(5)), None);
    assert_eq!(changes(&mut s).last(), Some(&(2, WaitCause::Cap, 5)));
    let _ = end(&mut s, 3, 0, ms(10));
    assert_eq!(s.take(ms(10)), None);
    assert_eq!(changes(&mut s), [(2, gpu(), 10)]);
    let _ = end(&mut s, 1, 0, ms(20));
    assert_eq!(s.take(ms(20)).map(|st| st.seq), Some(2));
    let accounts = end(&mut s, 2, 0, ms(30));
    assert_eq!(
        accounts[0].waits,
        [span(WaitCause::Cap, 5, 10), span(gpu(), 10, 20)]
    );
}

#[test]
fn a_job_short_of_memory_behind_a_reserved_job_waits_for_memory_not_the_cap() {
    // `--resource mem=4G --needs mem=3G -j 2`: 1 runs with 3 of the 4; 2 waits for memory and
    // has the free slot and memory set aside; 3 is short of memory whatever is set aside, so
    // it waits for memory too, not for the cap (a slot is free).
    let mut s = scheduler(2, Policy::default());
    s.set_resources(vec![Resource {
        name: Arc::from("mem"),
        stock: Stock::Count(4),
    }]);
    let mem = || WaitCause::Resource {
        name: Arc::from("mem"),
    };
    for (seq, key) in [(1, "a"), (2, "b"), (3, "c")] {
        let _ = s.admit(needing(seq, key, 1, 3), ms(0));
    }
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(1));
    assert_eq!(s.take(ms(0)), None);
    assert_eq!(changes(&mut s), [(2, mem(), 0), (3, mem(), 0)]);
    let _ = end(&mut s, 1, 0, ms(10));
    assert_eq!(s.take(ms(10)).map(|st| st.seq), Some(2));
    assert_eq!(s.take(ms(10)), None);
    let _ = end(&mut s, 2, 0, ms(20));
    assert_eq!(s.take(ms(20)).map(|st| st.seq), Some(3));
    let accounts = end(&mut s, 3, 0, ms(30));
    assert_eq!(accounts[0].waits, [span(mem(), 0, 20)]);
}

#[test]
fn a_heavy_job_whose_weight_does_not_fit_waits_for_the_cap() {
    let mut s = scheduler(2, Policy::default());
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(needing(2, "b", 2, 0), ms(0));
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(1));
    assert_eq!(s.take(ms(0)), None);
    let _ = changes(&mut s);
    let _ = end(&mut s, 1, 0, ms(10));
    assert_eq!(s.take(ms(10)).map(|st| st.seq), Some(2));
    let accounts = end(&mut s, 2, 0, ms(20));
    assert_eq!(accounts[0].waits, [span(WaitCause::Cap, 0, 10)]);
}

#[test]
fn a_cause_its_job_starts_within_a_millisecond_of_is_not_told() {
    let mut s = scheduler(1, Policy::default());
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(job(2, "b", 0), ms(0));
    // Job 1 is taken at once: its `cap` lasted no time and is not told; job 2 waits on.
    let start = s.take(Duration::from_micros(900)).expect("a free slot");
    assert_eq!(start.seq, 1);
    assert_eq!(changes(&mut s), [(2, WaitCause::Cap, 0)]);
    // A cause taken (told) already stays told, however soon its job starts.
    let _ = end(&mut s, 1, 0, ms(10));
    assert_eq!(s.take(ms(10)).map(|st| st.seq), Some(2));
    assert_eq!(changes(&mut s), []);
    // A cause that lasted a millisecond before its job started is told.
    let _ = end(&mut s, 2, 0, ms(20));
    let _ = s.admit(job(3, "c", 0), ms(20));
    assert_eq!(s.take(ms(21)).map(|st| st.seq), Some(3));
    assert_eq!(changes(&mut s), [(3, WaitCause::Cap, 20)]);
}

#[test]
fn a_cause_is_settled_once_it_has_lasted_a_millisecond() {
    let mut s = scheduler(1, Policy::default());
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(job(2, "b", 0), ms(0));
    assert_eq!(s.wait_changes_settle_at(), Some(ms(1)));
    // Not yet settled: nothing is told, and both wait on.
    assert_eq!(s.take_settled_wait_changes(Duration::from_micros(999)), []);
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(1));
    // 1 started within the millisecond: only 2's cause is left, told once settled.
    assert_eq!(s.wait_changes_settle_at(), Some(ms(1)));
    let told = s.take_settled_wait_changes(ms(1));
    assert_eq!(
        told.into_iter()
            .map(|c| (c.seq, c.cause))
            .collect::<Vec<_>>(),
        [(2, WaitCause::Cap)]
    );
    assert_eq!(s.wait_changes_settle_at(), None);
}

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

#[test]
fn a_cause_that_gives_way_within_a_millisecond_of_the_records_count_is_not_told() {
    // 1 runs; 2 (key b) waits for the cap from 0.3 ms. 3 (key a) waits behind 1.
    let mut s = scheduler(1, Policy::default());
    let _ = s.admit(job(1, "a", 0), ms(0));
    assert_eq!(s.take(ms(0)).map(|st| st.seq), Some(1));
    let _ = s.admit(job(3, "a", 0), us(300));
    assert_eq!(s.take_settled_wait_changes(us(1_299)), []);
    // 1 ends 0.9 ms into 3's wait: 3 waits for the cap, still within its first millisecond.
    let _ = s.admit(job(2, "b", 0), us(1_000));
    let _ = end(&mut s, 1, 0, us(1_200));
    assert_eq!(s.take(us(1_200)).map(|st| st.seq), Some(2));
    // Its `key_busy` lasted no millisecond of its record's count and is not told; `cap` is,
    // once it reaches the next one (1.3 ms).
    assert_eq!(s.wait_changes_settle_at(), Some(us(1_300)));
    let told = s.take_settled_wait_changes(us(1_300));
    assert_eq!(
        told.into_iter()
            .map(|c| (c.seq, c.cause, c.at))
            .collect::<Vec<_>>(),
        [(3, WaitCause::Cap, us(1_200))]
    );
    let _ = end(&mut s, 2, 0, us(5_000));
    assert_eq!(s.take(us(5_000)).map(|st| st.seq), Some(3));
    let accounts = end(&mut s, 3, 0, us(6_000));
    // Its record: 0.3 → 1.2 ms is 0 whole milliseconds of its count (0 → 0), then `cap`.
    assert_eq!(
        record_causes(&accounts[0].waits),
        [(WaitCause::Cap, us(1_200))]
    );
}

/// The causes a record's `waits` show, each with when it began, counted as the report does:
/// each span's milliseconds are the difference of its ends' whole milliseconds since the
/// wait began; a span of none is left out and the spans around it join when their causes
/// are the same.
fn record_causes(spans: &[WaitSpan]) -> Vec<(WaitCause, Tick)> {
    let Some(first) = spans.first() else {
        return Vec::new();
    };
    let whole = |t: Tick| (t - first.started_at).as_millis();
    let mut shown: Vec<(WaitCause, Tick)> = Vec::new();
    for span in spans {
        if whole(span.ended_at) == whole(span.started_at) {
            continue;
        }
        if shown.last().is_some_and(|(cause, _)| *cause == span.cause) {
            continue;
        }
        shown.push((span.cause.clone(), span.started_at));
    }
    shown
}

mod told_as_recorded {
    //! The `waiting` changes told of a job are exactly the causes its record's `waits` show,
    //! whatever the times (under and over a millisecond) and whenever the shell asks.

    use std::collections::HashMap;

    use proptest::prelude::*;
    use proptest::sample::Index;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Admit(usize),
        Take,
        End(Index),
        Advance(u64),
        Tell,
        /// The next run taken cannot be spawned for a shortage: it waits again.
        Shortage,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0usize..3).prop_map(Op::Admit),
            3 => Just(Op::Take),
            3 => any::<Index>().prop_map(Op::End),
            4 => prop_oneof![0u64..400, 400u64..2_500].prop_map(Op::Advance),
            2 => Just(Op::Tell),
            1 => Just(Op::Shortage),
        ]
    }

    proptest! {
        #[test]
        fn every_job_is_told_the_causes_its_record_shows(
            cap in 1usize..3,
            batch_size in 1usize..4,
            batch_delay_us in prop_oneof![Just(0u64), 300u64..3_000],
            ops in prop::collection::vec(op(), 1..80),
        ) {
            let batch_delay = us(if batch_size > 1 { batch_delay_us } else { 0 });
            let mut s = scheduler(cap, Policy { batch_size, batch_delay, ..Policy::default() });
            let mut now = Tick::ZERO;
            let mut seq = 0;
            let mut running: Vec<Seq> = Vec::new();
            let mut told: HashMap<Seq, Vec<(WaitCause, Tick)>> = HashMap::new();
            let tell = |changes: Vec<WaitChange>,
                            told: &mut HashMap<Seq, Vec<(WaitCause, Tick)>>| {
                for c in changes {
                    told.entry(c.seq).or_default().push((c.cause, c.at));
                }
            };
            let check = |account: &Account,
                             told: &mut HashMap<Seq, Vec<(WaitCause, Tick)>>|
             -> Result<(), TestCaseError> {
                let shown = record_causes(&account.waits);
                let events = told.remove(&account.seq).unwrap_or_default();
                prop_assert_eq!(events, shown, "job {}: {:?}", account.seq, account.waits);
                Ok(())
            };
            for op in ops {
                match op {
                    Op::Admit(key) => {
                        seq += 1;
                        let _ = s.admit(job(seq, ["a", "b", "c"][key], 0), now);
                    }
                    Op::Take => {
                        while let Some(start) = s.take(now) {
                            // As the shell does: a started job's causes are told at once.
                            for &member in &start.batch {
                                tell(s.take_wait_changes_of(member), &mut told);
                            }
                            s.spawned(start.seq, now);
                            running.push(start.seq);
                        }
                    }
                    Op::End(i) if !running.is_empty() => {
                        let seq = running.remove(i.index(running.len()));
                        let accounts = end(&mut s, seq, 0, now);
                        for account in &accounts {
                            check(account, &mut told)?;
                        }
                    }
                    Op::End(_) => {}
                    Op::Advance(n) => now += us(n),
                    Op::Tell => tell(s.take_settled_wait_changes(now), &mut told),
                    Op::Shortage => {
                        if let Some(start) = s.take(now) {
                            for &member in &start.batch {
                                tell(s.take_wait_changes_of(member), &mut told);
                            }
                            let failure = SpawnFailure::Shortage { descriptors: false };
                            let verdict = s.spawn_failed(start.seq, failure, now);
                            let deferred = matches!(verdict, SpawnVerdict::Deferred { .. });
                            prop_assert!(deferred);
                        }
                    }
                }
            }
            // Every job runs to its end, and each record is checked.
            loop {
                while let Some(start) = s.take(now) {
                    for &member in &start.batch {
                        tell(s.take_wait_changes_of(member), &mut told);
                    }
                    s.spawned(start.seq, now);
                    running.push(start.seq);
                }
                if running.is_empty() {
                    if s.queued() == 0 {
                        break;
                    }
                    // Held back by a shortage's pause.
                    now += us(700);
                    continue;
                }
                now += us(700);
                let seq = running.remove(0);
                for account in &end(&mut s, seq, 0, now) {
                    check(account, &mut told)?;
                }
            }
            prop_assert_eq!(s.queued(), 0);
            prop_assert!(told.is_empty(), "told of jobs with no record: {:?}", told);
        }
    }
}

#[test]
fn a_batch_waiting_out_its_delay_goes_once_the_input_has_ended() {
    let policy = Policy {
        batch_size: 5,
        batch_delay: ms(60_000),
        ..Policy::default()
    };
    let mut s = scheduler(1, policy);
    let _ = s.admit(job(1, "a", 0), ms(0));
    let _ = s.admit(job(2, "a", 0), ms(1));
    assert_eq!(s.take(ms(2)), None, "the batch waits for more jobs");
    s.input_ended(ms(3));
    let start = s.take(ms(3)).expect("no job can join it any more");
    assert_eq!(start.batch, [1, 2]);
    let accounts = end(&mut s, 1, 0, ms(10));
    assert_eq!(accounts[0].waits, [span(WaitCause::BatchDelay, 0, 3)]);
}

#[test]
fn a_batch_waiting_out_its_delay_goes_while_the_queue_is_full() {
    // Two jobs may wait; a batch of up to five could never fill.
    let policy = Policy {
        batch_size: 5,
        batch_delay: ms(60_000),
        ..Policy::default()
    };
    let mut s = Scheduler::with_policy(
        Limits {
            max_concurrent: 1,
            max_queued: 2,
        },
        policy,
    );
    let _ = s.admit(job(1, "a", 0), ms(0));
    assert_eq!(s.take(ms(1)), None, "one job: the batch waits for more");
    let _ = s.admit(job(2, "a", 0), ms(2));
    let start = s.take(ms(2)).expect("the queue is full: no job can join");
    assert_eq!(start.batch, [1, 2]);
}

#[test]
fn a_host_wide_key_short_of_a_named_resource_is_not_asked_for_until_it_frees() {
    let mut s = scheduler(3, Policy::default());
    s.share_keys();
    s.set_resources(vec![Resource {
        name: Arc::from("gpu"),
        stock: Stock::Units(vec![Arc::from("0")]),
    }]);
    let asked = |s: &mut Scheduler| -> Vec<String> {
        s.host_keys()
            .acquire
            .iter()
            .map(|k| k.to_string())
            .collect()
    };
    let _ = s.admit(needing(1, "x", 1, 1), ms(0));
    assert_eq!(asked(&mut s), ["x"]);
    assert!(s.host_key_acquired("x", ms(5)));
    assert_eq!(s.take(ms(5)).map(|st| st.seq), Some(1));
    let _ = changes(&mut s);
    // x holds the one GPU: a, which needs it too, is not asked for (no other process waits
    // behind a key on which nothing could run here), and waits for the GPU.
    let _ = s.admit(needing(2, "a", 1, 1), ms(10));
    assert!(asked(&mut s).is_empty(), "a is not asked for");
    assert_eq!(changes(&mut s), [(2, gpu(), 10)]);
    // A key needing no GPU is asked for meanwhile.
    let _ = s.admit(job(3, "b", 0), ms(12));
    assert_eq!(asked(&mut s), ["b"]);
    let _ = changes(&mut s);
    // The GPU frees: a is asked for now, and waits for its key.
    let _ = end(&mut s, 1, 0, ms(20));
    let now_asked = asked(&mut s);
    assert!(now_asked.iter().any(|k| k == "a"), "{now_asked:?}");
    assert_eq!(s.take(ms(20)), None, "a's key is not held yet");
    let told = changes(&mut s);
    assert!(told.contains(&(2, WaitCause::Lock, 20)), "{told:?}");
}
