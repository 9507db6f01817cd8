//! `--dry-run`: the order in which the scheduler would start a run's jobs, found by running the
//! real decisions ([`Scheduler::offer`], [`Scheduler::take`], [`Scheduler::finish`]) on a
//! virtual clock where every job succeeds and every run of a round ends at the same time; with
//! weights or named resources and a `reserve_after` above zero, the runs of a round end one
//! after another instead (see [`plan`]).

use std::sync::Arc;
use std::time::Duration;

use super::{
    ExitFacts, Grant, JobRequest, Limits, Offer, Policy, Resource, RunFacts, Scheduler, Seq, Tick,
};

/// One run the scheduler would start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// 1-based: runs of one round would start together, each after the round before ended.
    pub round: u64,
    /// The slot it would take (`LANES_SLOT`).
    pub slot: u32,
    /// The jobs of the run, in lane order, its first job first (one job unless batching).
    pub batch: Vec<Seq>,
    /// The weight and named units it would hold (`{res.NAME}`); `None` for weight 1 and no
    /// resource.
    pub grant: Option<Arc<Grant>>,
    /// `--cancel-in-progress`: the newer job of its key whose arrival would stop it while it
    /// runs (a run stops it as soon as it comes, a file's jobs come at once: as it starts).
    pub superseded_by: Option<Seq>,
}

/// What would become of each job offered, in start order; jobs that would never start (those
/// superseded under `--coalesce latest`, rejected when the queue is full) are in `dropped`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The runs, in the order they would start.
    pub runs: Vec<Planned>,
    /// The jobs that would never start.
    pub dropped: Vec<Seq>,
}

/// The duration of every job on the virtual clock.
const ROUND: Duration = Duration::from_millis(1);

/// Plans `jobs` (in input order) under `limits` and `policy`, reading input as the run would
/// (jobs start between admissions; reading pauses when `max_queued` jobs wait).
/// `resources` are the run's named resources ([`Scheduler::set_resources`]).
///
/// With weights or needs and `policy.reserve_after` above zero, the runs of a round end one
/// after another, in the order they started, and what the end of each frees is taken before
/// the next ends (the takes start the next round): as in a run, whose jobs end one by one, a
/// job short of its share waits while lighter jobs that fit take each unit as it is freed,
/// until it has waited `reserve_after` (rounds of 1 ms) and its share is set aside. Ending a
/// round's runs together would free their units together and start such a job at once.
pub fn plan(
    limits: Limits,
    policy: Policy,
    resources: Vec<Resource>,
    jobs: Vec<JobRequest>,
) -> Plan {
    let one_by_one = !policy.reserve_after.is_zero()
        && jobs
            .iter()
            .any(|job| job.weight != 1 || job.needs.is_some());
    let mut core = Scheduler::with_policy(limits, policy);
    core.set_resources(resources);
    core.set_input_finite(true);
    let mut jobs = jobs.into_iter().peekable();
    let mut plan = Plan::default();
    let mut now: Tick = Duration::ZERO;
    let mut round = 0;
    // Started as the runs of the last round ended one by one: the next round's first runs.
    let mut carried = Vec::new();
    // Runs `--cancel-in-progress` would stop, each with the job whose arrival would.
    let mut superseded = std::collections::HashMap::new();
    loop {
        // Jobs start between admissions, as when input streams in, unless batching.
        let mut started = std::mem::take(&mut carried);
        loop {
            while let Some(start) = core
                .starts_between_admissions()
                .then(|| core.take(now))
                .flatten()
            {
                core.spawned(start.seq, now);
                started.push(start);
            }
            if !core.may_read_input() {
                break;
            }
            let Some(job) = jobs.next() else { break };
            let seq = job.seq;
            match core.offer(job, None, now) {
                Offer::Queued {
                    replaced, cancel, ..
                } => {
                    plan.dropped.extend(replaced.map(|account| account.seq));
                    if let Some(stop) = cancel {
                        superseded.entry(stop.seq).or_insert(seq);
                    }
                }
                Offer::Refused(_) | Offer::Skipped(_) => plan.dropped.push(seq),
            }
        }
        if jobs.peek().is_none() {
            // Every line read: as in the run, a batch no job can join goes.
            core.input_ended(now);
        }
        while let Some(start) = core.take(now) {
            core.spawned(start.seq, now);
            started.push(start);
        }
        if started.is_empty() {
            if jobs.peek().is_none() && core.is_idle() {
                return plan;
            }
            // A partial batch waiting for --batch-delay.
            match core.next_deadline() {
                Some(at) if at > now => now = at,
                _ => return plan,
            }
            continue;
        }
        round += 1;
        now += ROUND;
        for start in started {
            let superseded_by = superseded.remove(&start.seq);
            plan.runs.push(Planned {
                round,
                slot: start.slot,
                batch: start.batch.clone(),
                grant: start.grant.clone(),
                superseded_by,
            });
            // A run stopped ends by its stop signal (SIGTERM, 15), as it would.
            let facts = RunFacts {
                exit: Some(match superseded_by {
                    Some(_) => ExitFacts::Signaled(15),
                    None => ExitFacts::Exited(0),
                }),
                stopped_while_running: superseded_by.is_some(),
                ended_at: now,
            };
            let _ = core.finish(start.seq, facts, now);
            if one_by_one {
                while let Some(next) = core.take(now) {
                    core.spawned(next.seq, now);
                    carried.push(next);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn job(seq: Seq, key: &str) -> JobRequest {
        JobRequest {
            seq,
            key: Arc::from(key),
            rank: 0,
            timeout: None,
            weight: 1,
            needs: None,
        }
    }

    fn limits(max_concurrent: usize) -> Limits {
        Limits {
            max_concurrent,
            max_queued: 2,
        }
    }

    #[test]
    fn lanes_run_in_order_under_the_cap() {
        let jobs = vec![job(1, "a"), job(2, "a"), job(3, "b"), job(4, "c")];
        let got = plan(limits(2), Policy::default(), Vec::new(), jobs);
        let rounds: Vec<_> = got
            .runs
            .iter()
            .map(|run| (run.round, run.slot, run.batch.clone()))
            .collect();
        assert_eq!(
            rounds,
            [
                (1, 1, vec![1]),
                (1, 2, vec![3]),
                // `c` got work while idle: it is ahead of `a`, whose job ended later.
                (2, 1, vec![4]),
                (2, 2, vec![2])
            ]
        );
        assert!(got.dropped.is_empty());
    }

    #[test]
    fn a_job_short_of_its_share_waits_behind_lighter_jobs_until_it_may_reserve() {
        // Two GPUs; job 2 needs both, every other job one (on keys of their own, so that each
        // is free to go). The runs of a round end one by one: a lighter job takes each GPU as
        // it is freed, until job 2 has waited `reserve_after` and its share is set aside.
        use super::super::{Needs, Stock};
        let gpus = |seq: Seq, amount: u64| JobRequest {
            needs: Some(Arc::new(Needs {
                weight: 1,
                resources: vec![(0, amount)],
            })),
            ..job(seq, &format!("k{seq}"))
        };
        let jobs: Vec<JobRequest> = (1..=12)
            .map(|seq| gpus(seq, if seq == 2 { 2 } else { 1 }))
            .collect();
        let resources = vec![Resource {
            name: Arc::from("gpu"),
            stock: Stock::Units(vec![Arc::from("0"), Arc::from("1")]),
        }];
        let limits = Limits {
            max_concurrent: 4,
            max_queued: 100,
        };
        let round_of_2 = |reserve_after: Duration| {
            let policy = Policy {
                reserve_after,
                ..Policy::default()
            };
            let got = plan(limits, policy, resources.clone(), jobs.clone());
            assert_eq!(got.runs.len(), 12, "{got:?}");
            got.runs
                .iter()
                .find(|run| run.batch == [2])
                .map(|run| run.round)
                .unwrap()
        };
        // Set aside at once: it starts as soon as the first runs end.
        assert_eq!(round_of_2(Duration::ZERO), 2);
        // Never set aside within the plan: it starts once no lighter job is left.
        let last = round_of_2(Duration::from_secs(10));
        assert!(last >= 6, "round {last}");
        // Set aside after three rounds of 1 ms: in between.
        let between = round_of_2(Duration::from_millis(3));
        assert!(2 < between && between < last, "round {between} of {last}");
    }

    #[test]
    fn a_run_cancel_in_progress_stops_is_planned_with_the_job_that_stops_it() {
        let policy = Policy {
            cancel_in_progress: true,
            ..Policy::default()
        };
        let jobs = vec![job(1, "a"), job(2, "a"), job(3, "a"), job(4, "b")];
        let got = plan(limits(2), policy, Vec::new(), jobs);
        let runs: Vec<_> = got
            .runs
            .iter()
            .map(|run| (run.round, run.batch.clone(), run.superseded_by))
            .collect();
        // Job 1 starts and job 2's arrival stops it; job 3 replaces job 2 while it waits.
        assert_eq!(
            runs,
            [
                (1, vec![1], Some(2)),
                (1, vec![4], None),
                (2, vec![3], None)
            ]
        );
        assert_eq!(got.dropped, [2]);
    }

    #[test]
    fn batches_and_superseded_jobs() {
        let batched = Policy {
            batch_size: 2,
            batch_bytes: 100,
            ..Policy::default()
        };
        let jobs = vec![job(1, "a"), job(2, "a"), job(3, "a")];
        let got = plan(
            Limits {
                max_concurrent: 1,
                max_queued: 100,
            },
            batched,
            Vec::new(),
            jobs.clone(),
        );
        let batches: Vec<_> = got.runs.iter().map(|run| run.batch.clone()).collect();
        assert_eq!(batches, [vec![1, 2], vec![3]]);
        let latest = Policy {
            coalesce_latest: true,
            ..Policy::default()
        };
        let got = plan(limits(1), latest, Vec::new(), jobs);
        assert_eq!(got.dropped, [2]);
    }
}
