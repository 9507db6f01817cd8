//! `--dry-run`: what would run, per key in order, with round, slot and batch; nothing runs.

use crate::support::*;

#[test]
fn a_dry_run_prints_the_plan_and_runs_nothing() {
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["--dry-run", "-j", "2", "--report"])
        .arg(scratch.join("report.jsonl"))
        .stdin(
            "a\ttouch \"$D/ran-1\"\na\ttouch \"$D/ran-2\"\nb\ttouch \"$D/ran-3\"\n\
             c\ttouch \"$D/ran-4\"\nbad\n",
        )
        .run();
    out.code(0);
    assert_eq!(
        out.stdout(),
        "lanes: dry run of 4 jobs in 3 keys, at most 2 at once: nothing runs\n\
         [a]\n  seq 1  round 1  slot 1  touch \"$D/ran-1\"\n  seq 2  round 2  slot 2  touch \"$D/ran-2\"\n\
         [b]\n  seq 3  round 1  slot 2  touch \"$D/ran-3\"\n\
         [c]\n  seq 4  round 2  slot 1  touch \"$D/ran-4\"\n\
         invalid: line 5: no tab between key and command (expected KEY<TAB>COMMAND); for lines \
         without keys, add --key '{}' (each line a command, its own key) or give the command \
         after the options (lanes [OPTIONS] -- COMMAND)\n"
    );
    for seq in 1..=4 {
        assert!(!scratch.exists(&format!("ran-{seq}")));
    }
    assert!(!scratch.exists("report.jsonl"));
}

#[test]
fn a_dry_run_shows_batches_and_rendered_commands() {
    let out = Run::new()
        .no_report()
        .args(["--dry-run", "-j", "3", "--key", "{//}", "--batch-size", "2"])
        .args(["echo", ":::", "d/a", "d/b c", "d/c", "e/x"])
        .run();
    out.code(0);
    assert_eq!(
        out.stdout(),
        "lanes: dry run of 4 jobs in 2 keys, at most 3 at once: nothing runs\n\
         [d]\n  seq 1 (batch of 2: [1, 2])  round 1  slot 1  echo 'd/a' 'd/b c'\n\
         \x20 seq 3  round 2  slot 1  echo 'd/c'\n\
         [e]\n  seq 4  round 1  slot 2  echo 'e/x'\n"
    );
}

#[test]
fn a_dry_run_hands_out_named_units_as_the_run_would() {
    let out = Run::new()
        .no_report()
        .args([
            "--dry-run",
            "-j",
            "2",
            "--resource",
            "gpu=g0,g1",
            "--needs",
            "gpu=1",
        ])
        .args(["echo", "{}", "{res.gpu}", ":::", "a", "b", "c"])
        .run();
    out.code(0);
    assert_eq!(
        out.stdout(),
        "lanes: dry run of 3 jobs in 3 keys, at most 2 at once: nothing runs\n\
         [a]\n  seq 1  round 1  slot 1  holds gpu=g0  echo 'a' 'g0'\n\
         [b]\n  seq 2  round 1  slot 2  holds gpu=g1  echo 'b' 'g1'\n\
         [c]\n  seq 3  round 2  slot 1  holds gpu=g0  echo 'c' 'g0'\n"
    );
}

#[test]
fn a_dry_run_leaves_out_what_resume_would_skip() {
    let scratch = Scratch::new();
    let report = scratch.join("first.jsonl");
    let jobs = "a\ttrue\nb\tfalse\n";
    Run::new()
        .no_report()
        .arg("--report")
        .arg(&report)
        .stdin(jobs)
        .run()
        .code(1);
    let out = Run::new()
        .no_report()
        .args(["--dry-run", "-j", "1", "--resume"])
        .arg(&report)
        .stdin(jobs)
        .run();
    out.code(0);
    assert_eq!(
        out.stdout(),
        "lanes: dry run of 1 job in 1 key, at most 1 at once: nothing runs\n\
         [b]\n  seq 2  round 1  slot 1  false\n\
         skipped: seq 1 (succeeded in the --resume report)\n"
    );
}

/// A manifest's jobs are admitted by rank across keys; the dry run plans in that order too, so
/// its rounds are the order the run starts them (at `-j 1`), and `--coalesce latest` drops the
/// same job in both.
#[test]
fn a_dry_run_of_a_ranked_manifest_plans_the_order_the_run_starts() {
    let scratch = Scratch::new();
    let manifest = scratch.write(
        "jobs.toml",
        "[[job]]\nkey = \"b\"\ncmd = \"sleep 0.01\"\n\
         [[job]]\nkey = \"a\"\ncmd = \"sleep 0.01\"\nrank = 5\n\
         [[job]]\nkey = \"c\"\ncmd = \"sleep 0.01\"\n\
         [[job]]\nkey = \"a\"\ncmd = \"sleep 0.01\"\nrank = 0\n",
    );
    let plan = Run::new()
        .no_report()
        .args(["-j", "1", "--dry-run"])
        .arg(&manifest)
        .run();
    plan.code(0);
    // (round, seq) of each planned line, by round.
    let mut planned: Vec<(u64, u64)> = plan
        .stdout()
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            (words.first() == Some(&"seq"))
                .then(|| (words[3].parse().unwrap(), words[1].parse().unwrap()))
        })
        .collect();
    planned.sort_unstable();
    let planned: Vec<u64> = planned.into_iter().map(|(_, seq)| seq).collect();
    let ran = Run::new().args(["-j", "1"]).arg(&manifest).run();
    ran.code(0);
    let mut started: Vec<(i64, u64)> = (1..=4).map(|seq| (ran.job(seq).start_ms(), seq)).collect();
    started.sort_unstable();
    let started: Vec<u64> = started.into_iter().map(|(_, seq)| seq).collect();
    assert_eq!(planned, vec![1, 3, 4, 2], "{}", plan.stdout());
    assert_eq!(started, planned);
}

#[test]
fn a_dry_run_says_reserve_after_counts_its_rounds_of_a_millisecond() {
    let run = |reserve: &str| {
        Run::new()
            .no_report()
            .args(["--dry-run", "-j", "2", "--reserve-after", reserve])
            .args(["--resource", "gpu=g0,g1", "--needs", "gpu=1"])
            .args(["echo", "{}", ":::", "a", "b", "c"])
            .run()
    };
    let noted = run("100s");
    noted.code(0);
    let stdout = noted.stdout();
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[1].starts_with("lanes: --reserve-after 1m 40s counts the plan's rounds of 1 ms"),
        "{stdout}"
    );
    // At once (the default) is what the plan models: no note.
    let plain = run("0s");
    plain.code(0);
    assert!(
        !plain.stdout().contains("counts the plan's rounds"),
        "{}",
        plain.stdout()
    );
}

#[test]
fn a_dry_run_plans_a_job_short_of_its_share_behind_lighter_ones_until_it_may_reserve() {
    // Two GPUs; job 2 needs both, the ten others one each on keys of their own. In a run
    // whose jobs end one by one, the lighter jobs take each GPU as it is freed until job 2
    // has waited --reserve-after: the plan must show that, not job 2 in its second round.
    let scratch = Scratch::new();
    let mut manifest = String::from("max_concurrent = 4\n[resources]\ngpu = [\"0\", \"1\"]\n");
    for seq in 1..=11 {
        let gpus = if seq == 2 { 2 } else { 1 };
        manifest.push_str(&format!(
            "[[job]]\nkey = \"k{seq}\"\ncmd = \"job {seq}\"\nneeds = {{ gpu = {gpus} }}\n"
        ));
    }
    let manifest = scratch.write("gpus.toml", manifest);
    let round_of_2 = |reserve: &str| -> u64 {
        let out = Run::new()
            .no_report()
            .args(["--dry-run", "--reserve-after", reserve])
            .arg(&manifest)
            .run();
        out.code(0);
        let stdout = out.stdout();
        let row = stdout
            .lines()
            .find(|line| line.trim_start().starts_with("seq 2 "))
            .unwrap_or_else(|| panic!("{stdout}"));
        row.split("round ")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(round_of_2("0s"), 2);
    let late = round_of_2("100s");
    assert!(late >= 6, "job 2 planned in round {late}");
}

#[test]
fn a_dry_run_shows_a_newline_and_a_backslash_n_apart_and_bash_reads_each_back() {
    let out = Run::new()
        .no_report()
        .args(["--dry-run", "-j", "1", "-0", "echo"])
        .stdin("a\nb\0a\\nb\0a\u{202e}b\0")
        .run();
    out.code(0);
    let stdout = out.stdout();
    let rows: Vec<&str> = stdout
        .lines()
        .filter_map(|row| row.split_once("slot 1  ").map(|(_, command)| command))
        .collect();
    assert_eq!(rows.len(), 3, "{}", out.dump());
    assert_ne!(rows[0], rows[1], "{}", out.dump());
    // Each row, given to bash as a word, is the command that would run, in any locale.
    for (row, argument) in rows.iter().zip(["a\nb", "a\\nb", "a\u{202e}b"]) {
        let read_back = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("printf %s {row}"))
            .env("LC_ALL", "C")
            .output()
            .expect("bash runs");
        let expected = format!("echo '{argument}'");
        // A row with nothing to escape is the command itself.
        if *row == expected {
            continue;
        }
        assert_eq!(
            String::from_utf8_lossy(&read_back.stdout),
            expected,
            "row {row:?}"
        );
    }
    assert!(rows[0].starts_with("$'"), "{}", out.dump());
}

#[test]
fn a_dry_run_of_weighed_jobs_says_the_cap_is_shared_by_weight() {
    let out = Run::new()
        .no_report()
        .args(["--dry-run", "-j", "3", "--weight", "2"])
        .stdin("a\ttrue\nb\ttrue\n")
        .run();
    out.code(0);
    assert_eq!(
        out.stdout(),
        "lanes: dry run of 2 jobs in 2 keys, -j 3 shared by weight: nothing runs\n\
         [a]\n  seq 1  round 1  slot 1  holds weight=2  true\n\
         [b]\n  seq 2  round 2  slot 1  holds weight=2  true\n",
        "{}",
        out.dump()
    );
}

#[test]
fn a_dry_run_refuses_the_outputs_the_run_would_refuse_and_makes_none() {
    // A results directory an earlier run left files in, or a report in a directory that is
    // not there: the run would refuse to start (exit 2), so a dry run used as a check before
    // it must not say 0.
    let scratch = Scratch::new();
    std::fs::create_dir(scratch.join("results")).unwrap();
    scratch.write("results/earlier.txt", "x");
    let refused = |args: &[&str], said: &str| {
        for dry in [true, false] {
            let mut run = Run::new().scratch(&scratch).no_report();
            if dry {
                run = run.arg("--dry-run");
            }
            let out = run.args(args).stdin("a\ttouch \"$D/ran\"\n").run();
            out.code(2);
            assert!(out.stderr().contains(said), "dry {dry}: {}", out.dump());
            assert!(!scratch.exists("ran"));
        }
    };
    let results = scratch.join("results");
    let results = results.to_str().unwrap();
    refused(&["--results", results], "is not empty");
    refused(
        &["--results", results, "--results-clean"],
        "holds earlier.txt, which lanes did not write",
    );
    let below_a_file = format!("{results}/earlier.txt/sub");
    refused(
        &["--results", &below_a_file],
        "cannot create the results directory",
    );
    let report = scratch.join("missing/report.jsonl");
    refused(
        &["--report", report.to_str().unwrap()],
        "cannot create the report",
    );
    // A link to nothing, where the directory would be made.
    let dangling = scratch.join("dangling");
    std::os::unix::fs::symlink(scratch.join("nowhere/at/all"), &dangling).unwrap();
    refused(
        &["--results", dangling.to_str().unwrap()],
        "cannot create the results directory",
    );
    // A lock directory that is a file.
    let file = format!("{results}/earlier.txt");
    refused(&["--lock-dir", &file], "not a directory");
    // What the run would make, the dry run checks and leaves unmade.
    let fresh = scratch.join("fresh/deeper");
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["--dry-run", "--results"])
        .arg(&fresh)
        .stdin("a\ttrue\n")
        .run();
    out.code(0);
    assert!(!scratch.join("fresh").exists());
}

/// One line of `--dry-run --json`, as a pipeline decodes it.
#[derive(Debug, serde::Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum PlanLine {
    Plan {
        jobs: u64,
        keys: u64,
        max_concurrent: u64,
        shared_by_weight: bool,
    },
    Planned {
        seq: u64,
        batch: Option<Vec<u64>>,
        key: String,
        round: u64,
        slot: u32,
        weight: u32,
        resources: std::collections::BTreeMap<String, String>,
        command: String,
        superseded_by: Option<u64>,
    },
    NotRun {
        seq: u64,
    },
    Skipped {
        seq: u64,
        reason: String,
    },
    Invalid {
        line: u64,
        error: String,
    },
}

/// `--dry-run --json`: the plan as JSON Lines, each line fitting `schema/plan.schema.json`,
/// with what the text plan says (the rows, the jobs never run, skipped, invalid); nothing runs.
#[test]
fn a_dry_run_under_json_writes_the_plan_as_json_lines() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/plan.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let schema = jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema)
        .expect("a valid JSON Schema");
    let scratch = Scratch::new();
    let report = scratch.join("first.jsonl");
    Run::new()
        .no_report()
        .arg("--report")
        .arg(&report)
        .stdin("done\ttrue\n")
        .run()
        .code(0);
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["--dry-run", "--json", "-j", "2", "--coalesce", "latest"])
        .args(["--resource", "gpu=g0,g1", "--resume"])
        .arg(&report)
        .stdin(
            "done\ttrue\nk\ttouch \"$D/ran-1\"\nk\ttouch \"$D/ran-2\"\nk\ttouch \"$D/ran-3\"\n\
             w\techo '\u{1b}[1m'\nbad\n",
        )
        .run();
    out.code(0);
    let stdout = out.stdout();
    let lines: Vec<PlanLine> = stdout
        .lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            let errors: Vec<String> = schema.iter_errors(&value).map(|e| e.to_string()).collect();
            assert!(errors.is_empty(), "{line}: {errors:?}");
            serde_json::from_value(value).unwrap()
        })
        .collect();
    let planned = |seq: u64, key: &str, round: u64, slot: u32, command: &str| PlanLine::Planned {
        seq,
        batch: None,
        key: key.to_owned(),
        round,
        slot,
        weight: 1,
        resources: Default::default(),
        command: command.to_owned(),
        superseded_by: None,
    };
    assert_eq!(
        lines,
        [
            PlanLine::Plan {
                jobs: 4,
                keys: 2,
                max_concurrent: 2,
                shared_by_weight: false
            },
            planned(2, "k", 1, 1, "touch \"$D/ran-1\""),
            planned(4, "k", 2, 1, "touch \"$D/ran-3\""),
            // Controls as JSON escapes them, not as the text plan quotes them.
            planned(5, "w", 1, 2, "echo '\u{1b}[1m'"),
            PlanLine::NotRun { seq: 3 },
            PlanLine::Skipped {
                seq: 1,
                reason: "succeeded_before".to_owned()
            },
            PlanLine::Invalid {
                line: 6,
                error: "no tab between key and command (expected KEY<TAB>COMMAND); for lines \
                        without keys, add --key '{}' (each line a command, its own key) or give \
                        the command after the options (lanes [OPTIONS] -- COMMAND)"
                    .to_owned()
            },
        ],
        "{}",
        out.dump()
    );
    for seq in 1..=3 {
        assert!(!scratch.exists(&format!("ran-{seq}")));
    }
    // What a job would hold; a batch.
    let second = |args: &[&str]| -> PlanLine {
        let out = Run::new()
            .no_report()
            .args(["--dry-run", "--json", "-j", "3"])
            .args(args)
            .run();
        out.code(0);
        let line = out.stdout().lines().nth(1).map(str::to_owned);
        serde_json::from_str(&line.unwrap_or_default())
            .unwrap_or_else(|err| panic!("{err}\n{}", out.dump()))
    };
    assert_eq!(
        second(&[
            "--weight",
            "2",
            "--resource",
            "gpu=g0,g1",
            "--needs",
            "gpu=1",
            "echo",
            "{}",
            ":::",
            "a"
        ]),
        PlanLine::Planned {
            seq: 1,
            batch: None,
            key: "a".to_owned(),
            round: 1,
            slot: 1,
            weight: 2,
            resources: [("gpu".to_owned(), "g0".to_owned())].into(),
            command: "echo 'a'".to_owned(),
            superseded_by: None,
        }
    );
    assert_eq!(
        second(&[
            "--batch-size",
            "2",
            "--key",
            "{//}",
            "echo",
            "{}",
            ":::",
            "d/a",
            "d/b"
        ]),
        PlanLine::Planned {
            seq: 1,
            batch: Some(vec![1, 2]),
            key: "d".to_owned(),
            round: 1,
            slot: 1,
            weight: 1,
            resources: Default::default(),
            command: "echo 'd/a' 'd/b'".to_owned(),
            superseded_by: None,
        }
    );
}

/// The plan's stdout: a reader that goes away decides nothing (as for any filter); one that
/// cannot be written (a full disk, closed when lanes started) makes the exit status 1, said.
#[test]
fn a_dry_run_whose_stdout_cannot_be_written_says_so() {
    let jobs: String = (1..=20_000).map(|n| format!("k{n}\ttrue\n")).collect();
    for (wrapper, code, said) in [
        (
            "exec >/dev/full",
            1,
            "lanes: cannot write the plan to stdout:",
        ),
        ("exec >&-", 1, "lanes: cannot write the plan to stdout:"),
        (
            "mkfifo \"$D/p\"; head -c 10 \"$D/p\" >/dev/null & exec >\"$D/p\"",
            0,
            "stdout closed (broken pipe)",
        ),
    ] {
        let scratch = Scratch::new();
        let out = Run::new()
            .scratch(&scratch)
            .no_report()
            .wrapper(wrapper)
            .arg("--dry-run")
            .stdin(jobs.clone())
            .run();
        out.code(code);
        assert!(out.stderr().contains(said), "{wrapper}: {}", out.dump());
    }
}

/// `--cancel-in-progress` on jobs that come at once: the first job of a key starts and is
/// stopped by the next one's arrival, which the next again replaces while it waits; the plan
/// says so, as the run records it.
#[test]
fn a_dry_run_says_which_run_cancel_in_progress_stops_as_it_starts() {
    let jobs = "d\tsleep 5; echo v1\nd\tsleep 5; echo v2\nd\techo v3\n";
    let out = Run::new()
        .no_report()
        .args(["--dry-run", "-j", "2", "--cancel-in-progress"])
        .stdin(jobs)
        .run();
    out.code(0);
    assert_eq!(
        out.stdout(),
        "lanes: dry run of 3 jobs in 1 key, at most 2 at once: nothing runs\n\
         [d]\n  seq 1  round 1  slot 1  sleep 5; echo v1  (stopped as it starts: superseded by \
         seq 2, --cancel-in-progress)\n  seq 3  round 2  slot 1  echo v3\n\
         not run: seq 2 (superseded or rejected)\n",
        "{}",
        out.dump()
    );
    // The run: (`superseded_by` is a field the suite's report check keeps for `--coalesce`.)
    let ran = Run::new()
        .no_report()
        .args([
            "--json",
            "--cancel-in-progress",
            "--grace",
            "0.1",
            "-j",
            "2",
        ])
        .stdin(jobs)
        .run();
    ran.code(0);
    let mut outcomes: Vec<(u64, String, serde_json::Value)> = ran
        .stdout()
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|record| record["type"] == "job")
        .map(|record| {
            let seq = record["seq"].as_u64().unwrap();
            let outcome = record["outcome"].as_str().unwrap().to_owned();
            (seq, outcome, record["superseded_by"].clone())
        })
        .collect();
    outcomes.sort_by_key(|&(seq, _, _)| seq);
    assert_eq!(
        outcomes,
        [
            (1, "interrupted".to_owned(), serde_json::json!(2)),
            (2, "interrupted".to_owned(), serde_json::json!(3)),
            (3, "succeeded".to_owned(), serde_json::Value::Null),
        ],
        "{}",
        ran.dump()
    );
}

/// A stop signal while a dry run reads its input (its writer still writing) ends it by that
/// signal with no plan: a plan of part of the input is never printed as if it were whole.
/// Under `--strict` the check says it was stopped.
#[test]
fn a_stop_signal_while_a_dry_run_reads_its_input_prints_no_plan() {
    use std::io::Write as _;
    for strict in [false, true] {
        let mut run = Run::new().no_report().arg("--dry-run").stdin_piped();
        if strict {
            run = run.arg("--strict");
        }
        let mut running = run.spawn();
        running.stdin().write_all(b"a\techo 1\n").unwrap();
        // Under --strict, sent once lanes' own code runs, so that it is lanes' to tell (one
        // before that ends it by the default action). Without, it ends lanes at any moment.
        let pid = running.pid();
        assert!(wait_until(std::time::Duration::from_secs(10), || {
            !strict
                || crate::signals::runs_lanes(pid) && crate::signals::blocks_or_catches_sigint(pid)
        }));
        running.signal(nix::sys::signal::Signal::SIGINT);
        let out = running.wait();
        out.code(130);
        assert!(out.stdout().is_empty(), "{}", out.dump());
        if strict {
            assert!(
                out.stderr()
                    .contains("lanes: SIGINT while checking the input (--strict):"),
                "{}",
                out.dump()
            );
        }
    }
}

/// A key whose every job would be rejected (a full queue) has no rows, and so no header; under
/// batching, a run of one job is a batch of one, as the report's `batch` says.
#[test]
fn a_dry_run_shows_no_empty_key_and_a_batch_of_one_under_batching() {
    let out = Run::new()
        .no_report()
        .args([
            "--dry-run",
            "-j",
            "1",
            "--max-queued",
            "1",
            "--on-full",
            "reject",
        ])
        .stdin("a\ttrue\na\ttrue\na\ttrue\nd\ttrue\n")
        .run();
    out.code(0);
    assert_eq!(
        out.stdout(),
        "lanes: dry run of 4 jobs in 2 keys, at most 1 at once: nothing runs\n\
         [a]\n  seq 1  round 1  slot 1  true\n  seq 2  round 2  slot 1  true\n\
         not run: seq 3 (superseded or rejected)\nnot run: seq 4 (superseded or rejected)\n"
    );
    let out = Run::new()
        .no_report()
        .args(["--dry-run", "--json", "--batch-size", "2", "--key", "{//}"])
        .args(["echo", ":::", "d/a"])
        .run();
    out.code(0);
    let planned: serde_json::Value =
        serde_json::from_str(out.stdout().lines().nth(1).unwrap()).unwrap();
    assert_eq!(planned["batch"], serde_json::json!([1]), "{}", out.dump());
}
