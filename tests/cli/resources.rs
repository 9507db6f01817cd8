//! Weights and named resources: a job starts only when its weight fits in `-j` and every
//! resource it needs is free; named units are handed to it and never held twice; a heavy job
//! is not starved by light ones; bad declarations stop the run before anything runs.

use std::collections::BTreeSet;

use crate::support::*;

/// The most jobs in flight at once, and the most of `amount(job)` held at once, from the
/// records' start and end times (an end at the same millisecond as a start comes first: a
/// job's resources are given back before the next job is started with them).
fn peak(jobs: &[&JobRecord], amount: impl Fn(&JobRecord) -> u64) -> u64 {
    let mut events: Vec<(i64, i64)> = Vec::new();
    for job in jobs {
        let n = amount(job) as i64;
        events.push((job.start_ms(), n));
        events.push((job.end_ms(), -n));
    }
    events.sort();
    let (mut now, mut most) = (0i64, 0i64);
    for (_, delta) in events {
        now += delta;
        most = most.max(now);
    }
    most as u64
}

/// Whether two jobs ran at the same time.
fn overlap(a: &JobRecord, b: &JobRecord) -> bool {
    a.start_ms() < b.end_ms() && b.start_ms() < a.end_ms()
}

fn units<'a>(job: &'a JobRecord, name: &str) -> &'a [String] {
    job.resources
        .as_ref()
        .and_then(|r| r.get(name))
        .and_then(|g| g.units.as_deref())
        .unwrap_or(&[])
}

#[test]
fn four_gpus_never_hold_five_jobs() {
    let scratch = Scratch::new();
    let lines: String = (1..=10)
        .map(|i| format!("k{i}\techo \"$LANES_RESOURCE_GPU\" > gpu.$LANES_SEQ; sleep 0.3\n"))
        .collect();
    let out = Run::new()
        .cwd(scratch.path())
        .args(["-j", "10", "--resource", "gpu=0,1,2,3", "--needs", "gpu=1"])
        .stdin(lines)
        .run();
    out.code(0);
    let report = out.report();
    let jobs: Vec<&JobRecord> = report.jobs.iter().collect();
    assert_eq!(jobs.len(), 10);
    // -j 10 would let all ten run at once; the four GPUs hold four at most.
    let most = peak(&jobs, |_| 1);
    assert!((2..=4).contains(&most), "{most} at once\n{}", out.dump());
    for job in &jobs {
        let held = units(job, "gpu");
        assert_eq!(held.len(), 1, "{job:?}");
        // What the job was handed is what the record says it held.
        assert_eq!(scratch.read(&format!("gpu.{}", job.seq)).trim(), held[0]);
        assert!(["0", "1", "2", "3"].contains(&held[0].as_str()));
    }
    for a in &jobs {
        for b in &jobs {
            if a.seq < b.seq && overlap(a, b) {
                assert_ne!(units(a, "gpu"), units(b, "gpu"), "{a:?}\n{b:?}");
            }
        }
    }
    // The six that could not start at once waited for a GPU, and their records say so.
    let for_gpu = jobs
        .iter()
        .filter(|job| {
            job.waits
                .iter()
                .any(|w| w.cause == "resource" && w.resource.as_deref() == Some("gpu"))
        })
        .count();
    assert!(for_gpu >= 6, "{for_gpu} waited for a GPU\n{}", out.dump());
}

#[test]
fn weights_hold_against_the_cap() {
    let scratch = Scratch::new();
    let mut manifest = String::from("max_concurrent = 4\n");
    for (i, weight) in [3, 2, 2, 1, 3, 1, 2, 4].iter().enumerate() {
        manifest.push_str(&format!(
            "[[job]]\nkey = \"k{i}\"\ncmd = \"sleep 0.2\"\nweight = {weight}\n"
        ));
    }
    scratch.write("w.toml", manifest);
    let out = Run::new().cwd(scratch.path()).arg("w.toml").run();
    out.code(0);
    let report = out.report();
    let jobs: Vec<&JobRecord> = report.jobs.iter().collect();
    let weight = |job: &JobRecord| u64::from(job.weight.unwrap_or(1));
    assert_eq!(report.job(8).weight, Some(4));
    assert_eq!(report.job(4).weight, None, "weight 1 is not written");
    assert!(peak(&jobs, weight) <= 4, "{}", out.dump());
    // Without weights, four of these would run at once.
    assert!(peak(&jobs, |_| 1) < 4, "{}", out.dump());
}

#[test]
fn a_heavy_job_is_not_starved_by_a_stream_of_light_ones() {
    let scratch = Scratch::new();
    let mut manifest = String::from("max_concurrent = 2\n");
    for i in 1..=12 {
        let weight = if i == 3 { 2 } else { 1 };
        manifest.push_str(&format!(
            "[[job]]\nkey = \"k{i}\"\ncmd = \"sleep 0.15\"\nweight = {weight}\n"
        ));
    }
    scratch.write("h.toml", manifest);
    let out = Run::new().cwd(scratch.path()).arg("h.toml").run();
    out.code(0);
    let report = out.report();
    let heavy = report.job(3);
    // Light jobs that came before it run first; none that came after overtakes it: the cap
    // is set aside for it at once (--reserve-after 0s).
    for light in 4..=12 {
        assert!(
            report.job(light).start_ms() >= heavy.end_ms(),
            "seq {light} overtook the heavy job\n{}",
            out.dump()
        );
    }
    assert!(heavy.start_ms() >= report.job(1).end_ms().min(report.job(2).end_ms()));
}

#[test]
fn before_reserve_after_light_jobs_may_overtake_but_not_for_ever() {
    let scratch = Scratch::new();
    let mut manifest = String::from("max_concurrent = 2\n");
    for i in 1..=12 {
        let weight = if i == 2 { 2 } else { 1 };
        manifest.push_str(&format!(
            "[[job]]\nkey = \"k{i}\"\ncmd = \"sleep 0.2\"\nweight = {weight}\n"
        ));
    }
    scratch.write("h.toml", manifest);
    let out = Run::new()
        .cwd(scratch.path())
        .args(["--reserve-after", "300ms", "h.toml"])
        .run();
    out.code(0);
    let report = out.report();
    let heavy = report.job(2);
    // Job 3 fits beside job 1 while the heavy job has waited less than 300ms: it overtakes.
    assert!(
        report.job(3).start_ms() < heavy.start_ms(),
        "{}",
        out.dump()
    );
    // Once the heavy job has waited 300ms it is next: light jobs do not keep it waiting to
    // the end of the run.
    let after: Vec<u64> = (4..=12)
        .filter(|&seq| report.job(seq).start_ms() >= heavy.end_ms())
        .collect();
    assert!(
        after.len() >= 5,
        "only {after:?} ran after it\n{}",
        out.dump()
    );
}

#[test]
fn units_and_amounts_reach_the_command_template() {
    let out = Run::new()
        .args([
            "-j",
            "1",
            "--resource",
            "gpu=a,b",
            "--resource",
            "mem=1K",
            "--needs",
            "gpu=2,mem=1K",
            "--command",
            "echo {} gpu={res.gpu} mem={res.mem} env=$LANES_RESOURCE_GPU",
            ":::",
            "x",
        ])
        .run();
    out.code(0);
    assert!(
        out.stdout().contains("gpu=a,b mem=1024 env=a,b\n"),
        "{}",
        out.dump()
    );
    let job = out.job(1);
    assert_eq!(units(job, "gpu"), ["a", "b"]);
    assert_eq!(job.resources.as_ref().unwrap()["mem"].amount, 1024);
    assert_eq!(job.resources.as_ref().unwrap()["mem"].units, None);
}

#[test]
fn runs_without_resources_write_no_resource_fields() {
    let out = Run::new().stdin("a\ttrue\n").run();
    out.code(0);
    let job = out.job(1);
    assert_eq!((job.weight, job.resources.is_some()), (None, false));
}

/// Runs lanes with `args` in `scratch` on a job that would create `ran`; expects exit 2, the
/// message on stderr, and nothing run.
fn refused(scratch: &Scratch, args: &[&str], message: &str) {
    let out = Run::new()
        .cwd(scratch.path())
        .args(args)
        .stdin("a\ttouch ran\n")
        .no_report()
        .run();
    out.code(2);
    assert!(out.stderr().contains(message), "{message}\n{}", out.dump());
    assert!(!scratch.exists("ran"), "a job ran\n{}", out.dump());
}

#[test]
fn bad_flags_are_refused_before_anything_runs() {
    let scratch = Scratch::new();
    refused(
        &scratch,
        &["--resource", "mem=8GG", "--needs", "mem=1"],
        "--resource mem=8GG: \"8GG\" is not an amount",
    );
    refused(
        &scratch,
        &["--resource", "gpu=0,1,0"],
        "--resource gpu=0,1,0: unit id \"0\" is given twice",
    );
    refused(
        &scratch,
        &["--resource", "gpu=0,1", "--needs", "tpu=1"],
        "--needs tpu=1: unknown resource \"tpu\"",
    );
    refused(
        &scratch,
        &["--resource", "gpu=0,1", "--needs", "gpu=3"],
        "--needs gpu=3: needs 3 of \"gpu\", more than the 2 the run has",
    );
    refused(
        &scratch,
        &["--resource", "gpu=0,1", "--needs", "gpu=1G"],
        "--needs gpu=1G: resource \"gpu\" is 2 named units: a job needs a count of them, such \
         as 1, not a size",
    );
    refused(
        &scratch,
        &["-j", "2", "--weight", "3"],
        "--weight 3: weight 3 is more than the cap of 2",
    );
    refused(&scratch, &["--weight", "0"], "--weight");
    refused(&scratch, &["--weight=-1"], "--weight");
    refused(
        &scratch,
        &["--command", "echo {res.gpu}"],
        "--command uses {res.gpu}, but the run has no resource \"gpu\"",
    );
    refused(
        &scratch,
        &["echo", "{res.gpu}", ":::", "a"],
        "the trailing command uses {res.gpu}, but the run has no resource \"gpu\"",
    );
}

#[test]
fn bad_manifests_are_pointed_at_before_anything_runs() {
    let scratch = Scratch::new();
    let cases = [
        (
            "[resources]\ngpu = [\"0\", \"1\"]\n[[job]]\nkey = \"a\"\ncmd = \"touch ran\"\nneeds = { gpu = 1, tpu = 2 }\n",
            "m.toml:6:20: unknown resource \"tpu\"",
        ),
        (
            "[resources]\ngpu = [\"0\", \"1\"]\n[[job]]\nkey = \"a\"\ncmd = \"touch ran\"\nneeds = { gpu = 3 }\n",
            "m.toml:6:17: needs 3 of \"gpu\", more than the 2 the run has",
        ),
        (
            "[resources]\ngpu = [\"0\", \"1\"]\n[[job]]\nkey = \"a\"\ncmd = \"touch ran\"\nneeds = { gpu = \"1G\" }\n",
            "m.toml:6:17: resource \"gpu\" is 2 named units: a job needs a count of them",
        ),
        (
            "[resources]\ngpu = 2\n[[job]]\nkey = \"a\"\ncmd = \"touch ran\"\nneeds = { gpu = true }\n",
            "m.toml:6:17: `gpu`: invalid type: boolean `true`, expected an amount such as 2 or \"8G\"\n",
        ),
        (
            "[resources]\nmem = \"8GG\"\n[[job]]\nkey = \"a\"\ncmd = \"touch ran\"\n",
            "m.toml:2:7: `resources.mem`: \"8GG\" is not an amount",
        ),
        (
            "[resources]\ngpu = [\"0\", \"0\"]\n[[job]]\nkey = \"a\"\ncmd = \"touch ran\"\n",
            "m.toml:2:13: `resources.gpu`: unit id \"0\" is given twice",
        ),
        (
            "[[job]]\nkey = \"a\"\ncmd = \"touch ran\"\nweight = 0\n",
            "m.toml:4:10: `weight` must be a whole number of at least 1, not 0",
        ),
        (
            "max_concurrent = 2\n[[job]]\nkey = \"a\"\ncmd = \"touch ran\"\nweight = 3\n",
            "m.toml:5:10: weight 3 is more than the cap of 2",
        ),
        (
            "command = \"echo {}\"\nbatch_size = 2\n[resources]\ngpu = 1\n\
             [[job]]\nkey = \"a\"\ncmd = \"touch ran\"\n\
             [[job]]\nkey = \"b\"\ncmd = \"touch ran\"\nneeds = { gpu = 1 }\n",
            "per job (job `b`'s `needs` at m.toml:11:11), while `batch_size` (m.toml:2:14)",
        ),
    ];
    for (text, message) in cases {
        scratch.write("m.toml", text);
        let out = Run::new()
            .cwd(scratch.path())
            .arg("m.toml")
            .no_report()
            .run();
        out.code(2);
        assert!(out.stderr().contains(message), "{message}\n{}", out.dump());
        assert!(!scratch.exists("ran"));
    }
    // A `--resource` that replaced the manifest's is named where a job needs more of it.
    scratch.write(
        "m.toml",
        "[resources]\ngpu = 4\n[[job]]\nkey = \"a\"\ncmd = \"touch ran\"\nneeds = { gpu = 3 }\n",
    );
    let out = Run::new()
        .cwd(scratch.path())
        .args(["--resource", "gpu=2", "m.toml"])
        .no_report()
        .run();
    out.code(2);
    assert!(
        out.stderr().contains(
            "m.toml:6:17: needs 3 of \"gpu\", more than the 2 the run has: the job could never \
             start (the run's \"gpu\" is set by --resource gpu=2)"
        ),
        "{}",
        out.dump()
    );
    assert!(!scratch.exists("ran"));
}

#[test]
fn the_command_line_overrides_the_manifest_and_gives_jobs_without_needs_theirs() {
    let scratch = Scratch::new();
    scratch.write(
        "m.toml",
        "[resources]\ngpu = [\"0\"]\n\
         [[job]]\nkey = \"own\"\ncmd = 'echo own=$LANES_RESOURCE_GPU'\nneeds = { gpu = 1 }\n\
         [[job]]\nkey = \"default\"\ncmd = 'echo default=$LANES_RESOURCE_GPU'\n",
    );
    let out = Run::new()
        .cwd(scratch.path())
        .args(["--resource", "gpu=7,8", "--needs", "gpu=2", "m.toml"])
        .run();
    out.code(0);
    let stdout = out.stdout();
    let lines: BTreeSet<&str> = stdout.lines().collect();
    assert!(lines.contains("[own] own=7"), "{}", out.dump());
    assert!(lines.contains("[default] default=7,8"), "{}", out.dump());
}

#[test]
fn the_queue_is_bounded_by_weight() {
    // -j 2 and weight 2: one job runs, and 4 of weight wait: two jobs; the rest are rejected
    // while the first job holds the cap (it waits for a file written after lanes ends).
    let scratch = Scratch::new();
    let mut lines = format!(
        "k1\twhile [ ! -e {} ]; do sleep 0.02; done\n",
        sh_quote(&scratch.join("go").to_string_lossy())
    );
    for i in 2..=6 {
        lines.push_str(&format!("k{i}\ttrue\n"));
    }
    lines.push_str("k7\ttrue\n");
    let running = Run::new()
        .cwd(scratch.path())
        .args([
            "-j",
            "2",
            "--weight",
            "2",
            "--max-queued-weight",
            "4",
            "--on-full",
            "reject",
        ])
        .stdin(lines)
        .spawn();
    // The first job goes once four jobs are rejected.
    assert!(
        wait_until(std::time::Duration::from_secs(20), || {
            running.report_so_far().matches("\"queue_full\"").count() >= 4
        }),
        "jobs were not rejected"
    );
    scratch.write("go", "");
    let out = running.wait();
    out.code(1);
    let report = out.report();
    let rejected: Vec<u64> = report
        .jobs
        .iter()
        .filter(|j| j.result() == ("rejected", Some("queue_full")))
        .map(|j| j.seq)
        .collect();
    assert_eq!(rejected, [4, 5, 6, 7], "{}", out.dump());
    assert_eq!(report.summary.succeeded, 3);
    // The weight bound refused them, not --max-queued (which had room): the record says so.
    for job in report.jobs.iter().filter(|j| rejected.contains(&j.seq)) {
        let error = job.error.as_deref().unwrap_or("");
        assert!(error.contains("--max-queued-weight 4"), "{error}");
    }
}

#[test]
fn an_inherited_resource_variable_never_reaches_a_job_granted_none() {
    let scratch = Scratch::new();
    scratch.write(
        "inh.toml",
        "max_concurrent = 2\n[resources]\ngpu = [\"0\", \"1\"]\n\
         [env]\nLANES_RESOURCE_GPU = \"8\"\n\
         [[job]]\nkey = \"none\"\ncmd = 'echo \"[$LANES_RESOURCE_GPU]\" > none.out'\n\
         [[job]]\nkey = \"one\"\ncmd = 'echo \"[$LANES_RESOURCE_GPU]\" > one.out'\nneeds = { gpu = 1 }\n\
         [[job]]\nkey = \"own\"\ncmd = 'echo \"[$LANES_RESOURCE_GPU]$OTHER\" > own.out'\n\
         env = { LANES_RESOURCE_GPU = \"9\", OTHER = \"kept\" }\n",
    );
    let out = Run::new()
        .cwd(scratch.path())
        .env("LANES_RESOURCE_GPU", "7")
        .arg("inh.toml")
        .run();
    out.code(0);
    assert_eq!(scratch.read("none.out").trim(), "[]", "{}", out.dump());
    assert_eq!(scratch.read("one.out").trim(), "[0]", "{}", out.dump());
    // Nor one a job's own `env` sets: the variable is lanes' to set.
    assert_eq!(scratch.read("own.out").trim(), "[]kept", "{}", out.dump());
}

#[test]
fn a_job_heavier_than_the_queue_bound_is_refused() {
    let scratch = Scratch::new();
    refused(
        &scratch,
        &["-j", "4", "--weight", "3", "--max-queued-weight", "2"],
        "--max-queued-weight 2 is less than the weight 3 of a job",
    );
}

#[test]
fn under_on_full_wait_a_weight_bound_refuses_nothing() {
    let lines: String = (1..=12).map(|i| format!("k{i}\tsleep 0.01\n")).collect();
    let out = Run::new()
        .args(["-j", "4", "--weight", "2", "--max-queued-weight", "2"])
        .stdin(lines)
        .run();
    out.code(0);
    assert_eq!(out.report().summary.succeeded, 12, "{}", out.dump());
}

#[test]
fn the_dry_run_plans_with_the_resources() {
    // Two GPUs, three one-GPU jobs on -j 3: two in the first round, the third in the second.
    let out = Run::new()
        .args([
            "-j",
            "3",
            "--resource",
            "gpu=0,1",
            "--needs",
            "gpu=1",
            "--dry-run",
        ])
        .stdin("a\ttrue\nb\ttrue\nc\ttrue\n")
        .no_report()
        .run();
    out.code(0);
    let stdout = out.stdout();
    let rounds: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.split("round ").nth(1)?.split(' ').next())
        .collect();
    assert_eq!(rounds, ["1", "1", "2"], "{}", out.dump());
}

#[test]
fn a_job_that_waited_for_a_resource_is_told_waiting_only_before_it_starts() {
    let scratch = Scratch::new();
    let lines: String = (1..=6).map(|i| format!("k{i}\tsleep 0.05\n")).collect();
    let out = Run::new()
        .cwd(scratch.path())
        .args(["-j", "6", "--resource", "gpu=0,1", "--needs", "gpu=1"])
        .args(["--events", "events.jsonl"])
        .stdin(lines)
        .run();
    out.code(0);
    let mut started: BTreeSet<u64> = BTreeSet::new();
    let mut waited_for_gpu = 0;
    for line in scratch.read("events.jsonl").lines() {
        let event: serde_json::Value = serde_json::from_str(line).expect("an event");
        let seq = event["seq"].as_u64().expect("a seq");
        match event["type"].as_str() {
            Some("started") => {
                started.insert(seq);
            }
            Some("waiting") => {
                assert!(
                    !started.contains(&seq),
                    "a waiting event after the job started: {line}\n{}",
                    out.dump()
                );
                if event["cause"] == "resource" {
                    assert_eq!(event["resource"], "gpu", "{line}");
                    waited_for_gpu += 1;
                }
            }
            _ => {}
        }
    }
    assert_eq!(started.len(), 6);
    assert!(waited_for_gpu >= 4, "{waited_for_gpu} waited for a GPU");
}

#[test]
fn a_trailing_command_is_handed_its_units_in_place() {
    let out = Run::new()
        .no_report()
        .args(["-j", "1", "--resource", "gpu=g0,g1", "--needs", "gpu=2"])
        .args(["printf", "%s|%s\\n", "{}", "--gpus={res.gpu}", ":::", "a"])
        .run();
    out.code(0);
    assert_eq!(out.stdout(), "[a] a|--gpus=g0,g1\n");
}

#[test]
fn units_too_many_to_hand_to_a_job_are_refused_before_the_run() {
    let scratch = Scratch::new();
    let ids: Vec<String> = (0..30_000).map(|i| format!("\"{i}\"")).collect();
    let manifest = scratch.write(
        "many.toml",
        format!(
            "[resources]\ngpu = [{}]\n[[job]]\nkey = \"a\"\ncmd = \"touch \\\"$D/ran\\\"\"\n\
             needs = {{ gpu = 30000 }}\n",
            ids.join(",")
        ),
    );
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .arg(&manifest)
        .run();
    out.code(2);
    assert!(
        out.stderr().contains("many.toml:6:11: `needs`: 30000 units of \"gpu\" are handed to a job as LANES_RESOURCE_GPU"),
        "{}",
        out.dump()
    );
    assert!(!scratch.exists("ran"));
}
