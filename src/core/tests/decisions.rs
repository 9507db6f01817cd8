//! Tests of the decisions the shell used to make: intake, spawn shortages, classification on
//! release, fail-fast, halts and stop signals, each on a virtual clock.

use std::sync::Arc;

use nix::sys::signal::Signal;

use super::super::*;
use super::ms;

fn request(seq: Seq, key: &str) -> JobRequest {
    JobRequest {
        seq,
        key: Arc::from(key),
        rank: 0,
        timeout: None,
        weight: 0,
        needs: None,
    }
}

fn scheduler(max_concurrent: usize, max_queued: usize, policy: Policy) -> Scheduler {
    Scheduler::with_policy(
        Limits {
            max_concurrent,
            max_queued,
        },
        policy,
    )
}

fn exited(code: i32, at: Tick) -> RunFacts {
    RunFacts {
        exit: Some(ExitFacts::Exited(code)),
        stopped_while_running: false,
        ended_at: at,
    }
}

fn queued(offer: Offer) -> usize {
    match offer {
        Offer::Queued { ahead, .. } => ahead,
        other => panic!("not queued: {other:?}"),
    }
}

#[test]
fn on_full_wait_stops_reading_and_reject_refuses_with_an_account() {
    let mut wait = scheduler(1, 1, Policy::default());
    assert!(wait.may_read_input());
    assert_eq!(queued(wait.offer(request(1, "a"), None, ms(0))), 0);
    assert!(!wait.may_read_input(), "backpressure: the queue is full");
    let mut reject = scheduler(
        1,
        1,
        Policy {
            on_full: OnFull::Reject,
            ..Policy::default()
        },
    );
    let _ = reject.offer(request(1, "a"), None, ms(0));
    assert!(reject.may_read_input());
    match reject.offer(request(2, "b"), None, ms(3)) {
        Offer::Refused(account) => {
            assert_eq!(account.outcome, Outcome::Rejected(RejectReason::QueueFull));
            assert_eq!(
                (account.seq, account.waited, account.ended_at),
                (2, None, ms(3))
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_job_that_succeeded_before_is_skipped_without_being_admitted() {
    let mut s = scheduler(1, 10, Policy::default());
    match s.offer(request(1, "a"), Some(SkipReason::SucceededBefore), ms(3)) {
        Offer::Skipped(account) => {
            assert_eq!(
                (account.seq, account.outcome, account.attempts),
                (1, Outcome::Skipped(SkipReason::SucceededBefore), 0)
            );
            assert_eq!((account.ended_at, account.waited), (ms(3), None));
            assert!(account.tried().is_none() && !account.in_flight);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.queued(), 0);
}

#[test]
fn a_stop_the_core_ordered_classifies_the_run_only_if_it_reached_the_running_child() {
    let timed = |seq| JobRequest {
        timeout: Some(ms(10)),
        ..request(seq, "a")
    };
    let mut s = scheduler(2, 10, Policy::default());
    let _ = s.offer(timed(1), None, ms(0));
    let start = s.take(ms(0)).unwrap();
    s.spawned(start.seq, ms(0));
    let stops = s.expire_turns(ms(10));
    assert_eq!(
        stops,
        [StopOrder {
            seq: 1,
            signal: Signal::SIGTERM,
            reason: StopReason::Timeout
        }]
    );
    assert!(s.expire_turns(ms(20)).is_empty(), "ordered once");
    let facts = RunFacts {
        exit: Some(ExitFacts::Exited(0)),
        stopped_while_running: true,
        ended_at: ms(12),
    };
    let finished = s.finish(1, facts, ms(12)).unwrap();
    assert_eq!(finished.outcome, Outcome::Interrupted(StopReason::Timeout));
    let tried = *finished.accounts[0].tried().unwrap();
    assert_eq!(tried.outcome, Outcome::Interrupted(StopReason::Timeout));
    assert_eq!(tried.exit, Some(ExitFacts::Exited(0)));
    assert_eq!((tried.started_at, tried.ended_at), (ms(0), ms(12)));

    // The child had exited before the stop reached it: its exit status decides.
    let _ = s.offer(timed(2), None, ms(20));
    let start = s.take(ms(20)).unwrap();
    s.spawned(start.seq, ms(21));
    let _ = s.expire_turns(ms(31));
    let finished = s.finish(2, exited(0, ms(31)), ms(32)).unwrap();
    assert_eq!(finished.outcome, Outcome::Succeeded);
}

#[test]
fn the_first_stop_reason_wins() {
    let mut s = scheduler(1, 10, Policy::default());
    let _ = s.offer(
        JobRequest {
            timeout: Some(ms(5)),
            ..request(1, "a")
        },
        None,
        ms(0),
    );
    let _ = s.take(ms(0)).unwrap();
    s.spawned(1, ms(0));
    let SignalVerdict::Halt(halt) = s.signal_received(Signal::SIGINT, ms(1)) else {
        panic!("the first signal halts");
    };
    assert_eq!(halt.stops[0].reason, StopReason::Shutdown);
    assert_eq!(halt.stops[0].signal, Signal::SIGINT);
    assert!(s.expire_turns(ms(5)).is_empty(), "already stopping");
    let facts = RunFacts {
        stopped_while_running: true,
        ..exited(130, ms(6))
    };
    let finished = s.finish(1, facts, ms(6)).unwrap();
    assert_eq!(finished.outcome, Outcome::Interrupted(StopReason::Shutdown));
    assert_eq!(s.stop_signal(), Some(Signal::SIGINT));
}

#[test]
fn a_second_signal_kills_what_runs() {
    let mut s = scheduler(2, 10, Policy::default());
    for seq in 1..=3 {
        let _ = s.offer(request(seq, &format!("k{seq}")), None, ms(0));
    }
    let _ = s.take(ms(0)).unwrap();
    let _ = s.take(ms(0)).unwrap();
    let SignalVerdict::Halt(halt) = s.signal_received(Signal::SIGTERM, ms(1)) else {
        panic!("first");
    };
    assert_eq!(halt.drained.len(), 1);
    assert_eq!(
        halt.drained[0].outcome,
        Outcome::Interrupted(StopReason::Shutdown)
    );
    assert!(halt.close_input);
    assert!(!s.is_forced());
    assert_eq!(
        s.signal_received(Signal::SIGINT, ms(2)),
        SignalVerdict::Kill(vec![1, 2])
    );
    assert!(s.is_forced());
    assert_eq!(s.stop_signal(), Some(Signal::SIGTERM), "the first decides");
}

#[test]
fn a_stop_signal_is_forwarded_as_received_but_lanes_cpu_limit_as_sigterm() {
    for (received, forwarded) in [
        (Signal::SIGQUIT, Signal::SIGQUIT),
        (Signal::SIGHUP, Signal::SIGHUP),
        (Signal::SIGXCPU, Signal::SIGTERM),
    ] {
        let mut s = scheduler(2, 10, Policy::default());
        let _ = s.offer(request(1, "a"), None, ms(0));
        let _ = s.take(ms(0)).unwrap();
        s.spawned(1, ms(0));
        let SignalVerdict::Halt(halt) = s.signal_received(received, ms(1)) else {
            panic!("the first signal halts");
        };
        assert_eq!(halt.stops[0].signal, forwarded, "{received}");
        assert_eq!(
            s.stop_signal(),
            Some(received),
            "the exit status says what came"
        );
    }
}

#[test]
fn the_running_jobs_are_listed_in_seq_order_with_their_start_and_stop() {
    let mut s = scheduler(3, 10, Policy::default());
    for (seq, key) in [(1, "a"), (2, "b"), (3, "c")] {
        let _ = s.offer(request(seq, key), None, ms(0));
    }
    for at in [5, 7] {
        let start = s.take(ms(at)).unwrap();
        s.spawned(start.seq, ms(at));
    }
    let _ = s.signal_received(Signal::SIGINT, ms(9));
    let running = s.running_jobs();
    let seen: Vec<_> = running
        .iter()
        .map(|job| (job.seq, &*job.key, job.started_at, job.stopping))
        .collect();
    assert_eq!(
        seen,
        [
            (1, "a", ms(5), Some(StopReason::Shutdown)),
            (2, "b", ms(7), Some(StopReason::Shutdown)),
        ]
    );
}

#[test]
fn fail_fast_halts_once_and_keeps_reading_a_finite_input() {
    let policy = Policy {
        fail_fast: true,
        ..Policy::default()
    };
    for finite in [true, false] {
        let mut s = scheduler(2, 10, policy);
        s.set_input_finite(finite);
        for (seq, key) in [(1, "a"), (2, "b"), (3, "c")] {
            let _ = s.offer(request(seq, key), None, ms(0));
        }
        let _ = s.take(ms(0)).unwrap();
        let _ = s.take(ms(0)).unwrap();
        let finished = s.finish(1, exited(3, ms(5)), ms(5)).unwrap();
        assert_eq!(finished.outcome, Outcome::Failed(FailReason::ExitStatus));
        let halt = finished.halt.expect("a failure halts the run");
        assert_eq!(halt.reason, StopReason::FailFast);
        assert_eq!(halt.drained.iter().map(|a| a.seq).collect::<Vec<_>>(), [3]);
        assert_eq!(halt.stops.iter().map(|s| s.seq).collect::<Vec<_>>(), [2]);
        assert_eq!(halt.close_input, !finite);
        assert_eq!(s.may_read_input(), finite);
        // Later lines are refused with the reason, each recorded at once.
        match s.offer(request(4, "d"), None, ms(6)) {
            Offer::Refused(account) => {
                assert_eq!(account.outcome, Outcome::Interrupted(StopReason::FailFast));
            }
            other => panic!("{other:?}"),
        }
        let second = s.finish(2, exited(1, ms(7)), ms(7)).unwrap();
        assert!(second.halt.is_none(), "fail-fast halts once");
    }
}

#[test]
fn a_spawn_shortage_defers_the_run_to_the_front_with_back_off() {
    let mut s = scheduler(2, 10, Policy::default());
    for (seq, key) in [(1, "a"), (2, "b"), (3, "a")] {
        let _ = s.offer(request(seq, key), None, ms(0));
    }
    let first = s.take(ms(0)).unwrap();
    assert_eq!(first.seq, 1);
    let shortage = SpawnFailure::Shortage { descriptors: false };
    assert_eq!(
        s.spawn_failed(1, shortage, ms(1)),
        SpawnVerdict::Deferred {
            until: ms(6),
            last_try_next: false
        }
    );
    assert_eq!(s.take(ms(2)), None, "held back");
    assert_eq!(s.next_deadline(), Some(ms(6)));
    let again = s.take(ms(6)).unwrap();
    assert_eq!((again.seq, again.attempt, again.waited), (1, 1, ms(6)));
    // A second shortage in a row waits twice as long.
    assert_eq!(
        s.spawn_failed(1, shortage, ms(7)),
        SpawnVerdict::Deferred {
            until: ms(17),
            last_try_next: false
        }
    );
    let again = s.take(ms(17)).unwrap();
    s.spawned(again.seq, ms(17));
    assert_eq!(s.take(ms(17)).unwrap().seq, 2, "the order holds");
}

#[test]
fn out_of_descriptors_twice_with_nothing_else_in_flight_fails_the_job() {
    let mut s = scheduler(2, 10, Policy::default());
    let _ = s.offer(request(1, "a"), None, ms(0));
    let _ = s.take(ms(0)).unwrap();
    // Once alone: others that failed with it may have given their descriptors back.
    let shortage = SpawnFailure::Shortage { descriptors: true };
    let SpawnVerdict::Deferred { until, .. } = s.spawn_failed(1, shortage, ms(1)) else {
        panic!("the first lone shortage is deferred");
    };
    assert_eq!(s.take(until).unwrap().seq, 1);
    match s.spawn_failed(1, shortage, until) {
        SpawnVerdict::Ended(finished) => {
            assert_eq!(finished.outcome, Outcome::Failed(FailReason::SpawnError));
            assert_eq!(finished.accounts[0].attempts, 1);
            assert_eq!(finished.accounts[0].tried(), None);
            let tries = &finished.accounts[0].tries;
            assert_eq!(tries.len(), 1);
            assert_eq!(tries[0].outcome, Outcome::Failed(FailReason::SpawnError));
            assert_eq!(tries[0].exit, None);
            // Its wait runs from its admission to the last time it was taken.
            assert_eq!(finished.accounts[0].waited, Some(until));
        }
        other => panic!("{other:?}"),
    }
    assert!(s.is_idle());
}

#[test]
fn runs_whose_spawns_all_failed_together_are_tried_again() {
    // Three spawns in flight at once all run out of descriptors: the first two with others
    // in flight, the last alone. All three are tried again, and a success between two lone
    // shortages starts the count afresh.
    let mut s = scheduler(3, 10, Policy::default());
    for (seq, key) in [(1, "a"), (2, "b"), (3, "c")] {
        let _ = s.offer(request(seq, key), None, ms(0));
    }
    let shortage = SpawnFailure::Shortage { descriptors: true };
    for seq in 1..=3 {
        assert_eq!(s.take(ms(0)).unwrap().seq, seq);
    }
    let mut until = ms(0);
    for seq in 1..=3 {
        let verdict = s.spawn_failed(seq, shortage, ms(1));
        let SpawnVerdict::Deferred { until: at, .. } = verdict else {
            panic!("seq {seq}: {verdict:?}");
        };
        until = until.max(at);
    }
    let first = s.take(until).unwrap().seq;
    s.spawned(first, until);
    let second = s.take(until).unwrap().seq;
    s.spawned(second, until);
    let last = s.take(until).unwrap().seq;
    let _ = s.finish(first, exited(0, until), until).unwrap();
    let _ = s.finish(second, exited(0, until), until).unwrap();
    // Alone again, but a spawn succeeded since the last lone shortage: deferred once more.
    assert!(matches!(
        s.spawn_failed(last, shortage, until),
        SpawnVerdict::Deferred { .. }
    ));
}

#[test]
fn after_a_shortage_starts_are_taken_one_at_a_time_until_one_succeeds() {
    let mut s = scheduler(3, 10, Policy::default());
    for (seq, key) in [(1, "a"), (2, "b"), (3, "c")] {
        let _ = s.offer(request(seq, key), None, ms(0));
    }
    let _ = s.take(ms(0)).unwrap();
    let shortage = SpawnFailure::Shortage { descriptors: false };
    let SpawnVerdict::Deferred { until, .. } = s.spawn_failed(1, shortage, ms(1)) else {
        panic!("deferred");
    };
    assert_eq!(s.take(until).unwrap().seq, 1);
    assert_eq!(s.take(until), None, "one start at a time while probing");
    s.spawned(1, until);
    assert_eq!(s.take(until).unwrap().seq, 2, "a success ends the probing");
    assert_eq!(s.take(until).unwrap().seq, 3);
}

#[test]
fn a_job_that_ends_frees_a_held_spawn() {
    let mut s = scheduler(2, 10, Policy::default());
    for (seq, key) in [(1, "a"), (2, "b")] {
        let _ = s.offer(request(seq, key), None, ms(0));
    }
    let _ = s.take(ms(0)).unwrap();
    s.spawned(1, ms(0));
    let _ = s.take(ms(0)).unwrap();
    let _ = s.spawn_failed(2, SpawnFailure::Shortage { descriptors: true }, ms(1));
    assert_eq!(s.take(ms(2)), None);
    let _ = s.finish(1, exited(0, ms(3)), ms(3)).unwrap();
    assert_eq!(s.take(ms(3)).unwrap().seq, 2, "resources were freed");
}

#[test]
fn grouped_output_waiting_for_a_reader_holds_new_starts() {
    let mut s = scheduler(2, 10, Policy::default());
    let _ = s.offer(request(1, "a"), None, ms(0));
    s.set_output_backlog(2);
    assert!(s.output_backlogged());
    assert_eq!(s.take(ms(0)), None);
    s.set_output_backlog(1);
    assert_eq!(s.take(ms(0)).unwrap().seq, 1);
}

#[test]
fn cancel_in_progress_orders_a_superseded_stop_and_records_who() {
    let mut s = scheduler(
        2,
        10,
        Policy {
            cancel_in_progress: true,
            ..Policy::default()
        },
    );
    let _ = s.offer(request(1, "a"), None, ms(0));
    let _ = s.take(ms(0)).unwrap();
    match s.offer(request(2, "a"), None, ms(1)) {
        Offer::Queued { cancel, .. } => assert_eq!(
            cancel,
            Some(StopOrder {
                seq: 1,
                signal: Signal::SIGTERM,
                reason: StopReason::Superseded
            })
        ),
        other => panic!("{other:?}"),
    }
    match s.offer(request(3, "a"), None, ms(2)) {
        Offer::Queued {
            replaced, cancel, ..
        } => {
            let replaced = replaced.expect("2 waited");
            assert_eq!(replaced.seq, 2);
            assert_eq!(replaced.superseded_by, Some(3));
            assert_eq!(cancel, None, "1 is already stopping");
        }
        other => panic!("{other:?}"),
    }
    let facts = RunFacts {
        stopped_while_running: true,
        ..exited(143, ms(3))
    };
    let finished = s.finish(1, facts, ms(3)).unwrap();
    assert_eq!(finished.accounts[0].superseded_by, Some(2));
    assert!(!finished.outcome.is_bad());
}

#[test]
fn a_retry_waiting_for_its_turn_is_drained_with_its_failed_try_and_exit_status() {
    let mut s = scheduler(
        1,
        10,
        Policy {
            retries: 1,
            retry_delay: ms(100),
            ..Policy::default()
        },
    );
    let _ = s.offer(request(1, "a"), None, ms(0));
    let _ = s.take(ms(0)).unwrap();
    s.spawned(1, ms(2));
    let finished = s.finish(1, exited(1, ms(10)), ms(11)).unwrap();
    assert!(finished.retry && finished.accounts.is_empty());
    let SignalVerdict::Halt(halt) = s.signal_received(Signal::SIGINT, ms(20)) else {
        panic!("halt");
    };
    let account = &halt.drained[0];
    assert_eq!(account.attempts, 1);
    assert!(!account.in_flight);
    assert_eq!(account.outcome, Outcome::Interrupted(StopReason::Shutdown));
    assert_eq!(
        account.tries,
        [Try {
            slot: 1,
            waited: ms(0),
            started_at: ms(2),
            ended_at: ms(10),
            outcome: Outcome::Failed(FailReason::ExitStatus),
            exit: Some(ExitFacts::Exited(1)),
        }]
    );
    assert_eq!(account.tried(), account.tries.last());
}

#[test]
fn batching_never_starts_between_admissions() {
    let batching = Policy {
        batch_size: 4,
        ..Policy::default()
    };
    assert!(!scheduler(1, 10, batching).starts_between_admissions());
    assert!(scheduler(1, 10, Policy::default()).starts_between_admissions());
}

// Job control (`suspend.rs`).

#[test]
fn stopped_time_counts_toward_no_timeout() {
    let mut s = Scheduler::new(Limits {
        max_concurrent: 1,
        max_queued: 10,
    });
    let _ = s.offer(
        JobRequest {
            timeout: Some(ms(100)),
            ..request(1, "k")
        },
        None,
        ms(0),
    );
    let _ = s.take(ms(0)).unwrap();
    s.spawned(1, ms(0));
    // Stopped from 50 to 1050: the timeout is at 1100 now.
    s.resumed(ms(1000));
    assert_eq!(s.next_deadline(), Some(ms(1100)));
    assert!(s.expire_turns(ms(1099)).is_empty());
    assert_eq!(s.expire_turns(ms(1100)).len(), 1);
}

#[test]
fn retry_delays_and_spawn_pauses_stand_still_too() {
    let mut s = Scheduler::with_policy(
        Limits {
            max_concurrent: 2,
            max_queued: 10,
        },
        Policy {
            retries: 1,
            retry_delay: ms(100),
            ..Policy::default()
        },
    );
    for (seq, key) in [(1, "a"), (2, "b")] {
        let _ = s.offer(request(seq, key), None, ms(0));
    }
    let _ = s.take(ms(0)).unwrap();
    s.spawned(1, ms(0));
    let facts = RunFacts {
        exit: Some(ExitFacts::Exited(1)),
        stopped_while_running: false,
        ended_at: ms(10),
    };
    assert!(s.finish(1, facts, ms(10)).unwrap().retry);
    let _ = s.take(ms(10)).unwrap();
    let _ = s.spawn_failed(2, SpawnFailure::Shortage { descriptors: false }, ms(20));
    s.resumed(ms(500));
    assert_eq!(
        s.next_deadline(),
        Some(ms(525)),
        "the spawn pause, 5 ms after 20"
    );
    assert_eq!(s.take(ms(524)), None);
    assert_eq!(s.take(ms(525)).unwrap().seq, 2);
    s.spawned(2, ms(525));
    assert!(s.expire_turns(ms(609)).is_empty());
    let _ = s.expire_turns(ms(610));
    assert_eq!(
        s.take(ms(610)).unwrap().seq,
        1,
        "the retry, 100 ms after 10, + 500"
    );
}
