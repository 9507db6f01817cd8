//! README "Running on a Slurm cluster": `--backend slurm` keeps the lanes (per key in order,
//! one at a time, also across runs), the cap, timeouts and Ctrl-C, and writes the same report
//! as a local run. Needs a cluster: `SLURM_CONF` set and `sinfo` answering (CI starts one with
//! `scripts/slurm-test-cluster.sh`); otherwise each test returns early, saying so.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::records::*;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(20);

/// One Slurm test at a time: the test cluster has 2 CPUs, and the timing of one test must not
/// depend on another's jobs.
static CLUSTER: Mutex<()> = Mutex::new(());

/// The cluster, locked for this test; `None` (after saying so) when there is none.
fn cluster() -> Option<MutexGuard<'static, ()>> {
    let Some(conf) = std::env::var_os("SLURM_CONF") else {
        eprintln!("slurm tests skipped: no cluster (SLURM_CONF unset)");
        return None;
    };
    let answers = Command::new("timeout")
        .args(["15", "sinfo", "-h"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !answers {
        eprintln!("slurm tests skipped: no cluster (sinfo does not answer, SLURM_CONF={conf:?})");
        return None;
    }
    Some(
        CLUSTER
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
    )
}

/// A job-name prefix of this test's own, so that its jobs can be told apart on the cluster.
fn prefix() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "lanesit{}x{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The cluster's pending and running jobs whose name has `prefix` (`squeue -h`).
fn queued(prefix: &str) -> Vec<String> {
    let out = Command::new("squeue")
        .args(["-h", "-o", "%i %j %T"])
        .output()
        .expect("squeue");
    assert!(out.status.success(), "squeue: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| {
            line.split(' ')
                .nth(1)
                .is_some_and(|name| name.starts_with(&format!("{prefix}.")))
        })
        .map(str::to_owned)
        .collect()
}

fn assert_queue_empties(prefix: &str) {
    let mut last = Vec::new();
    let empty = wait_until(Duration::from_secs(5), || {
        last = queued(prefix);
        last.is_empty()
    });
    assert!(
        empty,
        "jobs left on the cluster 5 s after lanes ended: {last:?}"
    );
}

fn slurm_run(prefix: &str) -> Run {
    Run::new().args(["--backend", "slurm", "--slurm-name-prefix", prefix])
}

/// Job intervals logged by the jobs themselves: seq → (key, start ns, end ns).
fn intervals(lines: &[String]) -> BTreeMap<String, (String, i128, i128)> {
    let mut found: BTreeMap<String, (String, i128, i128)> = BTreeMap::new();
    for line in lines {
        let parts: Vec<&str> = line.split(' ').collect();
        let (what, key, id, at) = (parts[0], parts[1], parts[2], parts[3].parse().unwrap());
        let entry = found.entry(id.to_owned()).or_insert((key.to_owned(), 0, 0));
        match what {
            "start" => entry.1 = at,
            "end" => entry.2 = at,
            other => panic!("{other}"),
        }
    }
    for (id, (_, start, end)) in &found {
        assert!(*start > 0 && *end >= *start, "{id}: {start} .. {end}");
    }
    found
}

/// A job logging its start and end (by its own clock) under `id` to `$D/log`.
fn timed(id: &str, seconds: &str) -> String {
    format!(
        "echo \"start $LANES_KEY {id} $(date +%s%N) $SLURM_JOB_ID\" >> \"$D/log\"; sleep {seconds}; \
         echo \"end $LANES_KEY {id} $(date +%s%N)\" >> \"$D/log\""
    )
}

#[test]
fn slurm_keeps_lanes_in_order_one_at_a_time_under_the_cap() {
    let Some(_cluster) = cluster() else { return };
    let prefix = prefix();
    let scratch = Scratch::new();
    let keys = ["a", "b", "c"];
    let mut input = String::new();
    for i in 0..9usize {
        input.push_str(&format!(
            "{}\t{}\n",
            keys[i % 3],
            timed(&format!("{}", i + 1), "0.5")
        ));
    }
    let out = slurm_run(&prefix)
        .scratch(&scratch)
        .args(["-j", "2"])
        .stdin(input)
        .run();
    out.code(0);
    assert_eq!(out.report().summary.succeeded, 9, "{}", out.dump());
    let log = scratch.lines("log");
    let job_ids: Vec<&str> = log
        .iter()
        .filter(|l| l.starts_with("start "))
        .map(|l| l.split(' ').nth(4).unwrap_or(""))
        .collect();
    assert!(
        job_ids.iter().all(|id| !id.is_empty()),
        "jobs ran outside Slurm: {log:?}"
    );
    let runs = intervals(&log);
    assert_eq!(runs.len(), 9);
    for key in keys {
        let mut lane: Vec<(u64, i128, i128)> = runs
            .iter()
            .filter(|(_, (k, _, _))| k == key)
            .map(|(id, (_, s, e))| (id.parse().unwrap(), *s, *e))
            .collect();
        lane.sort_by_key(|&(_, start, _)| start);
        let order: Vec<u64> = lane.iter().map(|r| r.0).collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(order, sorted, "lane {key} ran out of order");
        for pair in lane.windows(2) {
            assert!(
                pair[1].1 >= pair[0].2,
                "lane {key}: job {} started before job {} ended",
                pair[1].0,
                pair[0].0
            );
        }
    }
    // At no instant more than 2 jobs between their start and end.
    let mut edges: Vec<(i128, i32)> = Vec::new();
    for (_, start, end) in runs.values() {
        edges.push((*start, 1));
        edges.push((*end, -1));
    }
    edges.sort();
    let mut running = 0;
    for (at, step) in edges {
        running += step;
        assert!(running <= 2, "{running} jobs at once at {at}: {log:#?}");
    }
    assert_no_overlap_per_key(&out.report().jobs);
    assert_queue_empties(&prefix);
}

#[test]
fn slurm_timeout_cancels_the_job_on_the_cluster() {
    let Some(_cluster) = cluster() else { return };
    let prefix = prefix();
    let scratch = Scratch::new();
    let out = slurm_run(&prefix)
        .scratch(&scratch)
        .args(["-j", "2", "--timeout", "2", "--grace", "2"])
        .stdin(
            "t\ttouch \"$D/up\"; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 1; done; \
             touch \"$D/finished\"\n\
             u\ttrue\n",
        )
        .run();
    out.code(1);
    let job = out.job(1);
    assert_eq!(
        job.result(),
        ("interrupted", Some("timeout")),
        "{}",
        out.dump()
    );
    assert!(job.started);
    assert!(
        job.duration_ms.unwrap() < 9000,
        "stopped long after its timeout: {job:?}"
    );
    assert_eq!(out.job(2).result(), ("succeeded", None));
    assert!(scratch.exists("up"));
    assert_queue_empties(&prefix);
    assert!(
        !scratch.exists("finished"),
        "the job ran on after its timeout"
    );
}

#[test]
fn slurm_sigint_cancels_running_jobs_and_records_the_rest() {
    let Some(_cluster) = cluster() else { return };
    let prefix = prefix();
    let scratch = Scratch::new();
    let long = |name: &str| {
        format!("touch \"$D/up-{name}\"; for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 1; done")
    };
    let running = slurm_run(&prefix)
        .scratch(&scratch)
        .args(["-j", "2", "--grace", "2"])
        .stdin(format!(
            "x\t{}\ny\t{}\nx\ttouch \"$D/ran3\"\n",
            long("x"),
            long("y")
        ))
        .spawn();
    scratch.wait_for("up-x", WAIT);
    scratch.wait_for("up-y", WAIT);
    running.signal(Signal::SIGINT);
    let out = running.wait();
    out.code(130);
    for seq in [1, 2] {
        let job = out.job(seq);
        assert_eq!(job.result(), ("interrupted", Some("shutdown")), "{job:?}");
        assert!(job.started, "{job:?}");
    }
    let third = out.job(3);
    assert_eq!(third.result(), ("interrupted", Some("shutdown")));
    assert!(!third.started);
    assert!(!scratch.exists("ran3"));
    assert!(out.elapsed < Duration::from_secs(20), "{:?}", out.elapsed);
    assert_queue_empties(&prefix);
}

#[test]
fn concurrent_slurm_runs_sharing_a_key_never_overlap_on_it() {
    let Some(_cluster) = cluster() else { return };
    let prefix = prefix();
    let scratch = Scratch::new();
    let input = |run: &str| -> String {
        (1..=3)
            .map(|i| format!("shared\t{}\n", timed(&format!("{run}{i}"), "0.4")))
            .collect()
    };
    let first = slurm_run(&prefix)
        .scratch(&scratch)
        .args(["-j", "2"])
        .stdin(input("A"))
        .spawn();
    let second = slurm_run(&prefix)
        .scratch(&scratch)
        .args(["-j", "2"])
        .stdin(input("B"))
        .spawn();
    let (first, second) = (first.wait(), second.wait());
    first.code(0);
    second.code(0);
    let runs = intervals(&scratch.lines("log"));
    assert_eq!(runs.len(), 6, "{runs:?}");
    let mut all: Vec<(&String, i128, i128)> =
        runs.iter().map(|(id, (_, s, e))| (id, *s, *e)).collect();
    all.sort_by_key(|&(_, start, _)| start);
    for pair in all.windows(2) {
        assert!(
            pair[1].1 >= pair[0].2,
            "{} started before {} ended: {all:?}",
            pair[1].0,
            pair[0].0
        );
    }
    // Each run kept its own order.
    for run in ["A", "B"] {
        let order: Vec<&str> = all
            .iter()
            .filter(|(id, _, _)| id.starts_with(run))
            .map(|(id, _, _)| id.as_str())
            .collect();
        assert_eq!(order, [1, 2, 3].map(|i| format!("{run}{i}")));
    }
    assert_queue_empties(&prefix);
}

#[test]
fn a_slurm_report_has_the_shape_of_a_local_one() {
    let Some(_cluster) = cluster() else { return };
    let prefix = prefix();
    let input =
        "a\ttrue\na\texit 3\nb\techo hi\nthis line has no tab\nc\tsh -c 'exit 7'\nb\ttrue\n";
    let local = Run::new().args(["-j", "2"]).stdin(input).run();
    let slurm = slurm_run(&prefix).args(["-j", "2"]).stdin(input).run();
    assert_eq!(local.code, 1, "{}", local.dump());
    assert_eq!(slurm.code, local.code, "{}", slurm.dump());
    let (local, slurm) = (local.report(), slurm.report());
    assert_eq!(slurm.run.max_concurrent, local.run.max_concurrent);
    assert_eq!(slurm.run.source, local.run.source);
    assert_eq!(slurm.jobs.len(), local.jobs.len());
    let shape = |job: &JobRecord| {
        (
            job.key.clone(),
            job.command.clone(),
            job.line,
            job.outcome.clone(),
            job.reason.clone(),
            job.exit_code,
            job.signal.clone(),
            job.started,
            job.attempts,
            job.leaked,
            job.error.is_some(),
        )
    };
    for job in &local.jobs {
        assert_eq!(
            shape(slurm.job(job.seq)),
            shape(job),
            "seq {}: slurm vs local",
            job.seq
        );
    }
    let counts = |r: &Report| {
        let s = &r.summary;
        (
            s.jobs,
            s.succeeded,
            s.failed,
            s.interrupted,
            s.rejected,
            s.exit_code,
        )
    };
    assert_eq!(counts(slurm), counts(local));
    assert_queue_empties(&prefix);
}

#[test]
fn slurm_asks_the_cluster_for_the_memory_a_job_needs() {
    let Some(_cluster) = cluster() else { return };
    let prefix = prefix();
    let out = slurm_run(&prefix)
        .args(["--resource", "mem=64M", "--needs", "mem=32M"])
        .stdin(
            "a\techo \"lanes=$LANES_RESOURCE_MEM $(scontrol show job \"$SLURM_JOB_ID\" | \
             grep -o 'MinMemoryNode=[^ ]*')\"\n",
        )
        .run();
    out.code(0);
    assert!(
        out.stdout()
            .contains(&format!("[a] lanes={} MinMemoryNode=32M\n", 32 << 20)),
        "{}",
        out.dump()
    );
    assert_queue_empties(&prefix);
}

#[test]
fn slurm_asks_the_cluster_for_a_license_of_another_resource() {
    let Some(_cluster) = cluster() else { return };
    let prefix = prefix();
    // The test cluster has the license `lanes` (8 of them).
    let out = slurm_run(&prefix)
        .args(["--resource", "lanes=4", "--needs", "lanes=2"])
        .stdin(
            "a\techo \"lanes=$LANES_RESOURCE_LANES $(scontrol show job \"$SLURM_JOB_ID\" | \
             grep -o 'Licenses=[^ ]*')\"\n",
        )
        .run();
    out.code(0);
    assert!(
        out.stdout().contains("[a] lanes=2 Licenses=lanes:2\n"),
        "{}",
        out.dump()
    );
    assert_queue_empties(&prefix);
    // A license the cluster lacks is an error before anything runs.
    refused_before_anything_runs(
        &prefix,
        &["--resource", "fluent=4", "--needs", "fluent=1"],
        "the cluster has no license \"fluent\"",
    );
}

/// A run given `args` exits 2 saying `message`, and its one job never ran.
fn refused_before_anything_runs(prefix: &str, args: &[&str], message: &str) {
    let scratch = Scratch::new();
    let out = slurm_run(prefix)
        .cwd(scratch.path())
        .args(args)
        .stdin("a\ttouch ran\n")
        .no_report()
        .run();
    out.code(2);
    assert!(out.stderr().contains(message), "{}", out.dump());
    assert!(!scratch.exists("ran"));
}

#[test]
fn slurm_refuses_resources_it_cannot_map_before_anything_runs() {
    // No cluster needed: the run stops before any job is submitted.
    let scratch = Scratch::new();
    for (args, message) in [
        (
            ["--resource", "port=8001,8002"],
            "--backend slurm: resource \"port\" is named units",
        ),
        (
            ["--resource", "gpu=0,1"],
            "--backend slurm: with --backend slurm the cluster picks the GPUs",
        ),
    ] {
        let out = Run::new()
            .cwd(scratch.path())
            .args(["--backend", "slurm"])
            .args(args)
            .stdin("a\ttouch ran\n")
            .no_report()
            .run();
        out.code(2);
        assert!(out.stderr().contains(message), "{}", out.dump());
        assert!(!scratch.exists("ran"));
    }
}

#[test]
fn inside_an_allocation_each_job_is_a_cluster_job_of_its_own_run_once() {
    let Some(_cluster) = cluster() else { return };
    let prefix = prefix();
    let scratch = Scratch::new();
    std::fs::write(
        scratch.join("jobs.tsv"),
        "k\techo \"$SLURM_JOB_ID ${SLURM_STEP_ID:-none} $SLURM_NTASKS\" >> \"$D/ran\"\n",
    )
    .unwrap();
    // lanes started by an allocation (salloc; an sbatch script is the same), whose variables
    // would make srun start a step of it, twice (SLURM_NTASKS=2), outside the key's lane.
    let out = Command::new("timeout")
        .args(["60", "salloc", "-n", "1", "--job-name"])
        .arg(format!("{prefix}.alloc"))
        .args(["env", "SLURM_NTASKS=2", BIN, "--backend", "slurm"])
        .args(["--slurm-name-prefix", &prefix, "--report"])
        .arg(scratch.join("report.jsonl"))
        .arg(scratch.join("jobs.tsv"))
        .env("D", scratch.path())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("salloc runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    let allocation = stderr
        .split_whitespace()
        .skip_while(|word| *word != "allocation")
        .nth(1)
        .expect("salloc names its allocation")
        .to_owned();
    let ran = scratch.lines("ran");
    assert_eq!(ran.len(), 1, "the job ran {} times: {ran:?}", ran.len());
    let fields: Vec<&str> = ran[0].split(' ').collect();
    assert_ne!(
        fields[0], allocation,
        "ran as a step of the allocation: {ran:?}"
    );
    assert_eq!(fields[2], "1", "{ran:?}");
    assert_queue_empties(&prefix);
}

#[test]
fn a_job_the_cluster_cancelled_is_not_a_success_even_when_it_exits_0() {
    let Some(_cluster) = cluster() else { return };
    // The user's squeue defaults (here one naming no job of this run) change nothing.
    for squeue_names in [None, Some("zzz")] {
        cancelled_job_fails(squeue_names);
    }
}

fn cancelled_job_fails(squeue_names: Option<&str>) {
    let prefix = prefix();
    let scratch = Scratch::new();
    let mut run = slurm_run(&prefix).scratch(&scratch);
    if let Some(names) = squeue_names {
        run = run.env("SQUEUE_NAMES", names);
    }
    let running = run
        .stdin("k\ttrap 'exit 0' TERM; touch \"$D/up\"; sleep 30 & wait\n")
        .spawn();
    scratch.wait_for("up", WAIT);
    let ids: Vec<String> = queued(&prefix)
        .iter()
        .filter_map(|line| line.split(' ').next().map(str::to_owned))
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let cancelled = Command::new("scancel").args(&ids).status().unwrap();
    assert!(cancelled.success());
    let out = running.wait();
    out.code(1);
    let job = out.job(1);
    assert_eq!(job.outcome, "failed", "{}", out.dump());
    assert!(
        job.error
            .as_deref()
            .is_some_and(|e| e.contains("CANCELLED")),
        "{}",
        out.dump()
    );
    assert_queue_empties(&prefix);
}

#[test]
fn a_slurm_license_the_cluster_lacks_is_refused_before_anything_runs() {
    let Some(_cluster) = cluster() else { return };
    refused_before_anything_runs(
        &prefix(),
        &["--slurm-license", "nosuch"],
        "--slurm-license nosuch asks every job for a license",
    );
}

#[test]
fn a_slurm_license_with_a_count_or_a_list_is_a_usage_error() {
    // No cluster needed: refused before anything is asked of one.
    for license in ["lanes:2", "a,b", ""] {
        let out = Run::new()
            .args(["--backend", "slurm", "--slurm-license", license])
            .stdin("a\ttrue\n")
            .no_report()
            .run();
        out.code(2);
        assert!(
            out.stderr().contains("give one license name"),
            "{license:?}: {}",
            out.dump()
        );
    }
}

#[test]
fn a_lock_dir_from_the_environment_does_not_stop_a_slurm_run() {
    // LANES_LOCK_DIR is a default for local runs; --lock-dir itself is refused (lock_dir.rs).
    let scratch = Scratch::new();
    let out = Run::new()
        .env("LANES_LOCK_DIR", scratch.join("locks"))
        .args(["--backend", "slurm", "--dry-run"])
        .stdin("a\ttrue\n")
        .no_report()
        .run();
    out.code(0);
    assert!(!out.stderr().contains("--lock-dir"), "{}", out.dump());
}

/// The Slurm options ask for nothing where jobs run locally: each is a usage error without
/// `--backend slurm`, and nothing runs (no cluster needed).
#[test]
fn slurm_options_without_the_slurm_backend_are_usage_errors() {
    for (flag, value) in [
        ("--slurm-name-prefix", "x"),
        ("--slurm-license", "fluent"),
        ("--slurm-partition", "gpu"),
        ("--slurm-account", "a"),
        ("--slurm-qos", "q"),
    ] {
        let scratch = Scratch::new();
        let out = Run::new()
            .scratch(&scratch)
            .args([flag, value])
            .stdin("k\ttouch \"$D/ran\"\n")
            .run();
        out.code(2);
        assert!(
            out.stderr().contains(&format!(
                "{flag} is about jobs run on a Slurm cluster, but they run here: add --backend \
                 slurm"
            )),
            "{}",
            out.dump()
        );
        assert!(!scratch.exists("ran"), "{flag}");
    }
}
