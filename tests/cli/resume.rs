//! SPEC §5.2 `--resume REPORT`: a run stopped half-way is completed by a second run that
//! skips what succeeded (matched by key, command and occurrence), tolerating a torn last line,
//! also when REPORT is the file `--report` writes.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::records::*;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(10);

/// A job that logs `id` to `$D/ran`, then (until `$D/phase2` exists) fails with `fail` or
/// blocks when asked to.
fn job(id: &str, phase1: &str) -> String {
    format!("echo {id} >> \"$D/ran\"; [ -e \"$D/phase2\" ] || {{ {phase1}; }}")
}

/// How often each id ran.
fn ran_counts(scratch: &Scratch) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for id in scratch.lines("ran") {
        *counts.entry(id).or_default() += 1;
    }
    counts
}

/// The records of jobs the run ran (all but the `skipped` ones), in the order written.
fn ran(records: &Records) -> Vec<&JobRecord> {
    records
        .jobs
        .iter()
        .filter(|job| job.outcome != "skipped")
        .collect()
}

/// The seqs of the `skipped` records, in order, after checking that each says why and
/// tells of no run.
fn skipped_seqs(records: &Records) -> Vec<u64> {
    let mut seqs = Vec::new();
    for job in records.jobs.iter().filter(|job| job.outcome == "skipped") {
        assert!(
            matches!(
                job.result(),
                ("skipped", Some("succeeded_before" | "superseded_before"))
            ),
            "{job:?}"
        );
        assert!(
            !job.started && job.attempts == 0 && job.wait_ms.is_none(),
            "{job:?}"
        );
        assert!(job.key.is_some() && job.command.is_some(), "{job:?}");
        seqs.push(job.seq);
    }
    seqs.sort_unstable();
    seqs
}

/// A run with its report at `report` (read with [`Records`], which accepts `skipped`).
fn run_to(scratch: &Scratch, report: &Path) -> Run {
    Run::new()
        .scratch(scratch)
        .no_report()
        .arg("--report")
        .arg(report)
}

#[test]
fn an_interrupted_run_is_completed_by_resume_without_redoing_successes() {
    let scratch = Scratch::new();
    // (id, what it does in the first run): a and c get some jobs done before they block,
    // b blocks at once.
    let plan = [
        ("a1", "true"),
        ("b1", "block"),
        ("c1", "true"),
        ("a2", "true"),
        ("c2", "true"),
        ("a3", "block"),
        ("c3", "true"),
        ("b2", "true"),
        ("c4", "block"),
        ("a4", "true"),
        ("b3", "true"),
        ("b4", "true"),
    ];
    let mut input = String::new();
    let mut seq_of = BTreeMap::new();
    for (i, (id, phase1)) in plan.iter().enumerate() {
        let phase1 = if *phase1 == "block" {
            format!("touch \"$D/blocked-{id}\"; sleep 30")
        } else {
            phase1.to_string()
        };
        input.push_str(&format!("{}\t{}\n", &id[..1], job(id, &phase1)));
        seq_of.insert(id.to_string(), i as u64 + 1);
    }
    let jobs = scratch.write("jobs.tsv", input);
    let first_report = scratch.join("first.jsonl");
    let running = run_to(&scratch, &first_report)
        .args(["-j", "3"])
        .arg(&jobs)
        .spawn();
    for id in ["a3", "b1", "c4"] {
        scratch.wait_for(&format!("blocked-{id}"), WAIT);
    }
    // Ctrl-C as a terminal sends it: to lanes' whole process group.
    killpg(Pid::from_raw(running.pid()), Signal::SIGINT).unwrap();
    let out = running.wait();
    out.code(130);
    let first = Records::read(&first_report);
    let succeeded_first: Vec<&str> = first
        .jobs
        .iter()
        .filter(|j| j.outcome == "succeeded")
        .map(|j| j.command.as_deref().unwrap())
        .collect();
    assert_eq!(succeeded_first.len(), 5, "{:#?}", first.jobs);
    assert_eq!(first.jobs.len(), 12);

    scratch.write("phase2", "");
    let second_report = scratch.join("second.jsonl");
    let out = run_to(&scratch, &second_report)
        .args(["-j", "3", "--resume"])
        .arg(&first_report)
        .arg(&jobs)
        .run();
    out.code(0);
    let second = Records::read(&second_report);
    assert_eq!(second.run.source, jobs.display().to_string());
    assert_eq!(
        second.summary.skipped, 5,
        "skipped = the first run's successes"
    );
    assert_eq!(
        second.jobs.len(),
        12,
        "a record for every job, skipped ones included"
    );
    assert_eq!(ran(&second).len(), 7);
    let mut first_successes: Vec<u64> = first
        .jobs
        .iter()
        .filter(|j| j.outcome == "succeeded")
        .map(|j| j.seq)
        .collect();
    first_successes.sort_unstable();
    assert_eq!(skipped_seqs(&second), first_successes);
    // Across both reports, exactly one success per job.
    let mut successes: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
    for job in first.jobs.iter().chain(ran(&second)) {
        if job.outcome == "succeeded" {
            successes
                .entry((job.key.clone().unwrap(), job.command.clone().unwrap()))
                .or_default()
                .push(job.seq);
        }
    }
    assert_eq!(successes.len(), 12, "{successes:#?}");
    for ((key, _), seqs) in &successes {
        assert_eq!(seqs.len(), 1, "{key}: {seqs:?}");
    }
    // The second run numbers jobs as the first did.
    for job in ran(&second) {
        let id = job.command.as_deref().unwrap()[5..7].to_owned();
        assert_eq!(job.seq, seq_of[&id], "{job:?}");
        assert_eq!(job.result(), ("succeeded", None));
    }
    // What succeeded did not run again; what was running when stopped ran twice.
    let counts = ran_counts(&scratch);
    for (id, phase1) in plan {
        // Blocked jobs ran in both runs; the others once (in the first run, or, when they
        // never started there, in the second).
        let want = if phase1 == "block" { 2 } else { 1 };
        assert_eq!(counts.get(id).copied(), Some(want), "{id}: {counts:?}");
    }
}

#[test]
fn a_torn_last_line_in_the_report_is_ignored() {
    let scratch = Scratch::new();
    let mut input = String::new();
    for (id, phase1) in [
        ("k1", "true"),
        ("k2", "exit 5"),
        ("k3", "true"),
        ("k4", "exit 6"),
        ("k5", "true"),
    ] {
        input.push_str(&format!("k\t{}\n", job(id, phase1)));
    }
    let jobs = scratch.write("jobs.tsv", &input);
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "1"])
        .arg(&jobs)
        .run();
    out.code(1);
    // A crash while writing k5's record: no summary, half a line.
    let text = out.report_text.clone().unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let last_job = lines[lines.len() - 2];
    assert!(
        last_job.contains("k5") && last_job.contains("succeeded"),
        "{text}"
    );
    let torn = format!(
        "{}\n{}",
        lines[..lines.len() - 2].join("\n"),
        &last_job[..last_job.len() / 2]
    );
    let first_report = scratch.write("torn.jsonl", torn);
    scratch.write("phase2", "");
    let second_report = scratch.join("second.jsonl");
    let out = run_to(&scratch, &second_report)
        .arg("--resume")
        .arg(&first_report)
        .arg(&jobs)
        .run();
    out.code(0);
    let second = Records::read(&second_report);
    assert_eq!(second.summary.skipped, 2);
    assert_eq!(skipped_seqs(&second), [1, 3]);
    let seqs: Vec<u64> = ran(&second).iter().map(|j| j.seq).collect();
    assert_eq!(
        seqs,
        [2, 4, 5],
        "the failed jobs and the one whose record was torn"
    );
    let counts = ran_counts(&scratch);
    let want: BTreeMap<String, usize> = [("k1", 1), ("k2", 2), ("k3", 1), ("k4", 2), ("k5", 2)]
        .into_iter()
        .map(|(id, n)| (id.to_owned(), n))
        .collect();
    assert_eq!(counts, want);
}

#[test]
fn identical_lines_are_matched_by_occurrence() {
    let scratch = Scratch::new();
    // The same line four times; a counter makes the 2nd and 4th run fail (and only those).
    let line = "k\tn=$(cat \"$D/c\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$D/c\"; \
                echo $n >> \"$D/ran\"; [ $n != 2 ] && [ $n != 4 ]\n";
    let jobs = scratch.write("jobs.tsv", line.repeat(4));
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "1"])
        .arg(&jobs)
        .run();
    out.code(1);
    let outcomes: Vec<&str> = (1..=4).map(|seq| out.job(seq).outcome.as_str()).collect();
    assert_eq!(outcomes, ["succeeded", "failed", "succeeded", "failed"]);
    let first_report = scratch.write("first.jsonl", out.report_text.clone().unwrap());
    let second_report = scratch.join("second.jsonl");
    let out = run_to(&scratch, &second_report)
        .args(["-j", "1", "--resume"])
        .arg(&first_report)
        .arg(&jobs)
        .run();
    out.code(0);
    let second = Records::read(&second_report);
    assert_eq!(second.summary.skipped, 2);
    assert_eq!(skipped_seqs(&second), [1, 3]);
    let seqs: Vec<u64> = ran(&second).iter().map(|j| j.seq).collect();
    assert_eq!(seqs, [2, 4], "the 2nd and 4th occurrences run again");
    assert!(ran(&second).iter().all(|j| j.outcome == "succeeded"));
    assert_eq!(scratch.lines("ran"), ["1", "2", "3", "4", "5", "6"]);
}

#[test]
fn resume_may_read_the_file_report_writes() {
    let scratch = Scratch::new();
    let report = scratch.join("run.jsonl");
    let mut input = String::new();
    for (i, phase1) in ["true", "exit 3", "true", "true", "exit 4"]
        .iter()
        .enumerate()
    {
        input.push_str(&format!("k{}\t{}\n", i % 2, job(&format!("j{i}"), phase1)));
    }
    let jobs = scratch.write("jobs.tsv", input);
    let out = run_to(&scratch, &report).arg(&jobs).run();
    out.code(1);
    let first = Records::read(&report);
    assert_eq!(first.summary.failed, 2);
    scratch.write("phase2", "");
    let out = run_to(&scratch, &report)
        .arg("--resume")
        .arg(&report)
        .arg(&jobs)
        .run();
    out.code(0);
    let second = Records::read(&report);
    assert_eq!(second.summary.skipped, 3, "read before it was rewritten");
    assert_eq!(skipped_seqs(&second), [1, 3, 4]);
    let seqs: Vec<u64> = {
        let mut seqs: Vec<u64> = ran(&second).iter().map(|j| j.seq).collect();
        seqs.sort_unstable();
        seqs
    };
    assert_eq!(seqs, [2, 5]);
    let counts = ran_counts(&scratch);
    assert_eq!(counts.values().sum::<usize>(), 7, "{counts:?}");
    assert_eq!((counts["j1"], counts["j4"], counts["j0"]), (2, 2, 1));
}

#[test]
fn a_chain_of_resumes_never_reruns_a_success() {
    // Three identical lines and one other. Every try of the identical ones logs its number n
    // (counted across all runs) and succeeds only when n is listed in $D/ok. Run 1: tries 1,
    // 2, 3 (only the first succeeds); run 2 (--resume run 1): tries 4 and 5 (4 succeeds);
    // run 3 (--resume run 2) must run only seq 3 (try 6): seq 1 and 2 succeeded in runs 1
    // and 2, and the other job in run 1. Run 2's report must tell run 3 all of that.
    let scratch = Scratch::new();
    let same = "k\tn=$(cat \"$D/c\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$D/c\"; \
                echo $n >> \"$D/ran\"; grep -qx $n \"$D/ok\"\n";
    let other = "m\techo m >> \"$D/ran-m\"\n";
    let jobs = scratch.write("jobs.tsv", format!("{same}{same}{same}{other}"));
    let reports = ["a.jsonl", "b.jsonl", "c.jsonl"].map(|name| scratch.join(name));
    let oks = ["1\n", "1\n4\n", "1\n4\n6\n"];
    let codes = [1, 1, 0];
    for (i, report) in reports.iter().enumerate() {
        scratch.write("ok", oks[i]);
        let mut run = run_to(&scratch, report).args(["-j", "1"]);
        if i > 0 {
            run = run.arg("--resume").arg(&reports[i - 1]);
        }
        if i == 2 {
            run = run
                .arg("--junit")
                .arg(scratch.join("c.xml"))
                .arg("--events")
                .arg(scratch.join("c-events.jsonl"));
        }
        let out = run.arg(&jobs).run();
        assert_eq!(out.code, codes[i], "run {}\n{}", i + 1, out.dump());
    }
    assert_eq!(scratch.lines("ran"), ["1", "2", "3", "4", "5", "6"]);
    assert_eq!(scratch.lines("ran-m"), ["m"], "the other job ran once");
    let b = Records::read(&reports[1]);
    assert_eq!(skipped_seqs(&b), [1, 4]);
    let c = Records::read(&reports[2]);
    assert_eq!(skipped_seqs(&c), [1, 2, 4]);
    let ran_c: Vec<(u64, &str)> = ran(&c)
        .iter()
        .map(|j| (j.seq, j.outcome.as_str()))
        .collect();
    assert_eq!(ran_c, [(3, "succeeded")]);
    assert_eq!((c.summary.jobs, c.summary.skipped), (4, 3));
    // JUnit: a skipped job is a skipped test case; events: an `ended` event and no other.
    let xml = scratch.read("c.xml");
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let skipped_cases = doc
        .descendants()
        .filter(|n| n.has_tag_name("skipped"))
        .filter(|n| n.attribute("message") == Some("succeeded before (--resume)"))
        .count();
    assert_eq!(skipped_cases, 3, "{xml}");
    let events = events(&scratch.join("c-events.jsonl"));
    for seq in [1, 2, 4] {
        let of_seq: Vec<&serde_json::Value> = events
            .iter()
            .filter(|e| e["seq"].as_u64() == Some(seq))
            .collect();
        assert_eq!(of_seq.len(), 1, "{of_seq:?}");
        assert_eq!(of_seq[0]["type"], "ended");
        assert_eq!(of_seq[0]["outcome"], "skipped");
        assert_eq!(of_seq[0]["reason"], "succeeded_before");
    }
}

#[test]
fn resume_refuses_a_file_that_is_not_a_report() {
    let scratch = Scratch::new();
    let jobs = scratch.write("jobs.tsv", "k\ttouch \"$D/ran\"\n");
    // An events file of a real run, the jobs file itself, and a report of another program.
    let events = scratch.join("events.jsonl");
    Run::new()
        .scratch(&scratch)
        .no_report()
        .arg("--events")
        .arg(&events)
        .stdin("k\ttrue\n")
        .run()
        .code(0);
    let other = scratch.write("other.jsonl", "{\"status\":\"ok\"}\n");
    // A real report with its job's record copied after its summary, and one whose record
    // lost its outcome.
    let report = scratch.join("report.jsonl");
    Run::new()
        .scratch(&scratch)
        .no_report()
        .arg("--report")
        .arg(&report)
        .stdin("k\ttouch \"$D/ran\"\n")
        .run()
        .code(0);
    std::fs::remove_file(scratch.join("ran")).unwrap();
    let text = std::fs::read_to_string(&report).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let appended = scratch.write("appended.jsonl", format!("{text}{}\n", lines[1]));
    let no_outcome = scratch.write(
        "no-outcome.jsonl",
        text.replace("\"outcome\":\"succeeded\"", "\"outcome\":\"done\""),
    );
    for (file, why) in [
        (&events, "it is an events file (--events)"),
        (&jobs, "its first line is not a JSON record"),
        (&other, "its first line is not the `run` record"),
        (&appended, "line 4 comes after the summary (line 3)"),
        (
            &no_outcome,
            "the record of seq 1 has no outcome lanes writes (\"done\")",
        ),
    ] {
        let out = Run::new()
            .scratch(&scratch)
            .no_report()
            .arg("--resume")
            .arg(file)
            .arg(&jobs)
            .run();
        out.code(2);
        let want = format!("--resume {}: not a lanes report", file.display());
        assert!(
            out.stderr().contains(&want) && out.stderr().contains(why),
            "{}",
            out.dump()
        );
        assert!(!scratch.exists("ran"), "{}", out.dump());
    }
    // An empty file is a report of nothing: lanes creates its report before writing to it.
    let empty = scratch.write("empty.jsonl", "");
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .arg("--resume")
        .arg(&empty)
        .arg(&jobs)
        .run();
    out.code(0);
    assert!(scratch.exists("ran"));
}

/// Under a template with column placeholders, `--colsep` decides what each job runs: a run
/// with another separator is another run, and nothing of the earlier one is skipped.
#[test]
fn a_changed_column_separator_runs_every_job_again() {
    let scratch = Scratch::new();
    let (r1, r2, r3) = (
        scratch.join("r1.jsonl"),
        scratch.join("r2.jsonl"),
        scratch.join("r3.jsonl"),
    );
    let run = |report: &Path, resume: Option<&Path>, colsep: &str| {
        let mut run = run_to(&scratch, report).cwd(scratch.path());
        if let Some(resume) = resume {
            run = run.arg("--resume").arg(resume);
        }
        run.args(["--colsep", colsep, "--command", "touch {1}", ":::", "x,y.z"])
            .run()
    };
    run(&r1, None, ",").code(0);
    assert!(scratch.exists("x"));
    assert_eq!(Records::read(&r1).run.colsep.as_deref(), Some(","));
    let got = run(&r2, Some(&r1), ".");
    got.code(0);
    assert!(scratch.exists("x,y"), "the job of the new separator ran");
    assert!(
        got.stderr().contains("split at --colsep `,`") && got.stderr().contains("every job runs"),
        "{}",
        got.stderr()
    );
    // The same separator again skips what succeeded.
    let got = run(&r3, Some(&r2), ".");
    got.code(0);
    assert_eq!(
        skipped_seqs(&Records::read(&r3)),
        vec![1],
        "{}",
        got.stderr()
    );
}

/// A record's `command` is the argument alone under a command template, so a changed template
/// (a trailing command, `--command`) makes every job a new one: nothing is skipped, and the
/// run says why. The same template again skips what succeeded.
#[test]
fn a_changed_command_template_runs_every_job_again() {
    let scratch = Scratch::new();
    let (r1, r2, r3) = (
        scratch.join("r1.jsonl"),
        scratch.join("r2.jsonl"),
        scratch.join("r3.jsonl"),
    );
    run_to(&scratch, &r1)
        .cwd(scratch.path())
        .args(["echo", ":::", "a", "b"])
        .run()
        .code(0);
    let got = run_to(&scratch, &r2)
        .cwd(scratch.path())
        .arg("--resume")
        .arg(&r1)
        .args(["touch", ":::", "a", "b"])
        .run();
    got.code(0);
    assert!(
        scratch.exists("a") && scratch.exists("b"),
        "the new command ran"
    );
    assert!(
        got.stderr().contains("no job matches, so every job runs"),
        "{}",
        got.stderr()
    );
    assert_eq!(skipped_seqs(&Records::read(&r2)), Vec::<u64>::new());
    // The `run` records say which template each run used: a trailing command is one, with the
    // argument placeholder it is given.
    assert_eq!(Records::read(&r1).run.command.as_deref(), Some("echo {}"));
    assert_eq!(Records::read(&r2).run.command.as_deref(), Some("touch {}"));
    std::fs::remove_file(scratch.join("a")).unwrap();
    let got = run_to(&scratch, &r3)
        .cwd(scratch.path())
        .arg("--resume")
        .arg(&r2)
        .args(["--command", "touch {}", ":::", "a", "b"])
        .run();
    got.code(0);
    assert_eq!(
        skipped_seqs(&Records::read(&r3)),
        vec![1, 2],
        "{}",
        got.stderr()
    );
    assert!(!scratch.exists("a"));
    assert!(!got.stderr().contains("every job runs"), "{}", got.stderr());
}

/// A byte order mark before the report's first record (an editor's) is no part of it.
#[test]
fn a_report_that_starts_with_a_byte_order_mark_is_read() {
    let scratch = Scratch::new();
    let r1 = scratch.join("r1.jsonl");
    run_to(&scratch, &r1)
        .stdin("a\ttrue\nb\ttrue\n")
        .run()
        .code(0);
    let bom = scratch.write(
        "bom.jsonl",
        format!("\u{feff}{}", std::fs::read_to_string(&r1).unwrap()),
    );
    let r2 = scratch.join("r2.jsonl");
    let got = run_to(&scratch, &r2)
        .arg("--resume")
        .arg(&bom)
        .stdin("a\ttrue\nb\ttrue\n")
        .run();
    got.code(0);
    assert_eq!(skipped_seqs(&Records::read(&r2)), vec![1, 2]);
}

/// A run under `--coalesce latest` whose newest job of a key succeeded is done: resumed, it
/// runs none of the jobs that newer one superseded, so nothing older runs after it.
#[test]
fn jobs_superseded_before_are_not_run_after_the_newer_job_that_replaced_them() {
    let scratch = Scratch::new();
    let events = scratch.join("events.jsonl");
    // v1 runs until every later job is read and v2..v4 were superseded; v5 runs last.
    let jobs: String = (1..=5)
        .map(|v| {
            let body = if v == 1 {
                await_file("go")
            } else {
                "true".to_owned()
            };
            format!("a\techo v{v} >> \"$D/ran\"; {body}\n")
        })
        .collect();
    let input = scratch.write("jobs.tsv", &jobs);
    let first_report = scratch.join("first.jsonl");
    let first = run_to(&scratch, &first_report)
        .args(["--coalesce", "latest", "--events"])
        .arg(&events)
        .arg(&input)
        .spawn();
    assert!(wait_until(WAIT, || std::fs::read_to_string(&events)
        .unwrap_or_default()
        .matches("\"superseded\"")
        .count()
        >= 3));
    scratch.write("go", "");
    first.wait().code(0);
    assert_eq!(scratch.lines("ran"), ["v1", "v5"]);
    let second = run_to(&scratch, &scratch.join("second.jsonl"))
        .args(["--coalesce", "latest", "--resume"])
        .arg(&first_report)
        .arg(&input)
        .run();
    second.code(0);
    assert_eq!(scratch.lines("ran"), ["v1", "v5"], "nothing ran again");
    let records = Records::parse(&scratch.read("second.jsonl"));
    assert_eq!(skipped_seqs(&records), [1, 2, 3, 4, 5]);
    // Each says why: v2..v4 never succeeded (they were replaced), and say so; and so again
    // in a report resumed from this one.
    let reasons = |records: &Records| -> Vec<(u64, Option<String>)> {
        let mut reasons: Vec<(u64, Option<String>)> = records
            .jobs
            .iter()
            .map(|job| (job.seq, job.reason.clone()))
            .collect();
        reasons.sort();
        reasons
    };
    let want: Vec<(u64, Option<String>)> = [
        (1, "succeeded_before"),
        (2, "superseded_before"),
        (3, "superseded_before"),
        (4, "superseded_before"),
        (5, "succeeded_before"),
    ]
    .into_iter()
    .map(|(seq, why)| (seq, Some(why.to_owned())))
    .collect();
    assert_eq!(reasons(&records), want);
    let third = run_to(&scratch, &scratch.join("third.jsonl"))
        .args(["--coalesce", "latest", "--resume"])
        .arg(scratch.join("second.jsonl"))
        .arg(&input)
        .run();
    third.code(0);
    assert_eq!(reasons(&Records::parse(&scratch.read("third.jsonl"))), want);
    assert_eq!(scratch.lines("ran"), ["v1", "v5"], "nothing ran again");
}

/// Under `--coalesce latest` (or `--cancel-in-progress`), an older job that failed before a
/// newer job of its key succeeded is not run again on resume: that would put an older deploy
/// over a newer one. Without the policy it runs again, as any job that did not succeed.
#[test]
fn an_older_job_that_failed_before_a_newer_one_of_its_key_succeeded_is_not_run_again() {
    for policy in [&["--coalesce", "latest"][..], &[]] {
        let scratch = Scratch::new();
        // v2 waits for v1, which runs: coalescing replaces waiting jobs only.
        let input = scratch.write(
            "jobs.tsv",
            "web\techo v1 >> \"$D/ran\"; exit 1\nweb\techo v2 >> \"$D/ran\"\n",
        );
        let first_report = scratch.join("first.jsonl");
        run_to(&scratch, &first_report)
            .args(policy)
            .arg(&input)
            .run()
            .code(1);
        assert_eq!(scratch.lines("ran"), ["v1", "v2"], "{policy:?}");
        let second_report = scratch.join("second.jsonl");
        let second = run_to(&scratch, &second_report)
            .args(policy)
            .arg("--resume")
            .arg(&first_report)
            .arg(&input)
            .run();
        let records = Records::read(&second_report);
        if policy.is_empty() {
            second.code(1);
            assert_eq!(scratch.lines("ran"), ["v1", "v2", "v1"]);
            assert_eq!(skipped_seqs(&records), [2]);
        } else {
            second.code(0);
            assert_eq!(
                scratch.lines("ran"),
                ["v1", "v2"],
                "{policy:?}: nothing ran again"
            );
            assert_eq!(skipped_seqs(&records), [1, 2], "{policy:?}");
            assert_eq!(
                records.job(1).reason.as_deref(),
                Some("superseded_before"),
                "{policy:?}"
            );
        }
    }
}

/// `--resume` with `--results DIR`: the earlier run's files are the results of the jobs this
/// run skips, so DIR is kept and added to (it was refused as not empty, and `--results-clean`
/// removed the skipped jobs' output for good).
#[test]
fn a_resumed_run_adds_to_the_results_of_the_run_it_resumes() {
    let scratch = Scratch::new();
    let dir = scratch.join("res");
    let jobs = scratch.write(
        "jobs.tsv",
        "a\techo A\nb\techo B-$(cat \"$D/b-says\"); test -e \"$D/b-ok\"\n",
    );
    let first = scratch.join("first.jsonl");
    scratch.write("b-says", "first");
    run_to(&scratch, &first)
        .arg("--results")
        .arg(&dir)
        .arg(&jobs)
        .run()
        .code(1);
    scratch.write("b-says", "second");
    scratch.write("b-ok", "");
    run_to(&scratch, &scratch.join("second.jsonl"))
        .arg("--results")
        .arg(&dir)
        .arg("--resume")
        .arg(&first)
        .arg(&jobs)
        .run()
        .code(0);
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    assert_eq!(
        read("000001-a.stdout"),
        "A\n",
        "a's output, from the first run, is kept"
    );
    assert_eq!(
        read("000002-b.stdout"),
        "B-second\n",
        "b's, run again, is afresh"
    );
    let index: Vec<serde_json::Value> = read("index.jsonl")
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let mut seqs: Vec<u64> = index.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    // The first run's lines (in the order its jobs ended), then the second's.
    assert_eq!(seqs.pop(), Some(2), "{index:?}");
    seqs.sort_unstable();
    assert_eq!(seqs, [1, 2], "{index:?}");
    // A file lanes did not write is still refused.
    scratch.write("res/notes.txt", "mine");
    let out = run_to(&scratch, &scratch.join("third.jsonl"))
        .arg("--results")
        .arg(&dir)
        .arg("--resume")
        .arg(scratch.join("second.jsonl"))
        .arg(&jobs)
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("holds notes.txt, which lanes did not write"),
        "{}",
        out.dump()
    );
}
