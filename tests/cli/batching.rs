//! SPEC §3.5: `--command` templates (placeholders, quoting, errors) and per-key batches
//! bounded by count (`--batch-size`), bytes (`--batch-bytes`) and delay (`--batch-delay`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use crate::records::*;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(10);

/// A run whose report goes to `report` (decoded with [`Records`], which accepts `batch`).
fn run_to(scratch: &Scratch, report: &Path) -> Run {
    Run::new()
        .scratch(scratch)
        .no_report()
        .arg("--report")
        .arg(report)
}

/// The file names anywhere under `dir`.
fn names_under(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        names.push(entry.file_name().to_string_lossy().into_owned());
        if entry.file_type().unwrap().is_dir() {
            names.extend(names_under(&entry.path()));
        }
    }
    names
}

/// `text` quoted the way the README says substitutions are: single quotes, `'` as `'\''`.
fn quoted_len(text: &str) -> usize {
    text.len() + 2 + 3 * text.matches('\'').count()
}

#[test]
fn placeholders_are_replaced_and_the_record_keeps_the_argument() {
    let scratch = Scratch::new();
    let template = "printf '%s|%s|%s|%s|{{lit}}\\n' {} {key} {seq} {slot} > \"$D/out-$LANES_SEQ\"";
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "2", "--command", template])
        .stdin("alpha\targ one\nbeta\tsecond\targ\nalpha\tthird\n")
        .run();
    out.code(0);
    for (seq, arg, key) in [
        (1, "arg one", "alpha"),
        (2, "second\targ", "beta"),
        (3, "third", "alpha"),
    ] {
        let job = out.job(seq);
        assert_eq!(job.command.as_deref(), Some(arg), "{job:?}");
        assert_eq!(job.key.as_deref(), Some(key));
        let slot = job.slot.unwrap();
        assert_eq!(
            scratch.read(&format!("out-{seq}")),
            format!("{arg}|{key}|{seq}|{slot}|{{lit}}\n")
        );
    }
}

#[test]
fn without_a_placeholder_the_argument_is_appended() {
    let out = Run::new()
        .args(["--command", "printf '<%s>\\n'"])
        .stdin("k\tone arg\nk\t-n\n")
        .run();
    out.code(0);
    assert_eq!(out.stdout(), "[k] <one arg>\n[k] <-n>\n", "{}", out.dump());
}

#[test]
fn hostile_keys_and_arguments_arrive_literally() {
    let scratch = Scratch::new();
    let work = scratch.mkdir("work");
    let keys = [
        "$(touch pwned-k1)",
        "`touch pwned-k2`",
        "k;touch pwned-k3",
        "it's \"q\"",
        "-n",
        "--help",
        "*",
    ];
    let args = [
        "$(touch pwned1)",
        "`touch pwned2`",
        "x; touch pwned3",
        "'; touch pwned4; '",
        "\"$(touch pwned5)\"",
        "-n",
        "--version",
        "*",
        "$HOME",
        "a\\b\\\\c",
        "|| touch pwned6 &&",
        "{} {key} {{",
    ];
    let mut input = String::new();
    let mut want = Vec::new();
    for (i, arg) in args.iter().enumerate() {
        let key = keys[i % keys.len()];
        input.push_str(&format!("{key}\t{arg}\n"));
        want.push((key, *arg));
    }
    let out = Run::new()
        .scratch(&scratch)
        .cwd(&work)
        .args([
            "-j",
            "3",
            "--command",
            "printf '%s\\n' {key} {} > \"$D/out-$LANES_SEQ\"",
        ])
        .stdin(input)
        .run();
    out.code(0);
    for (i, (key, arg)) in want.iter().enumerate() {
        let seq = i as u64 + 1;
        assert_eq!(
            scratch.lines(&format!("out-{seq}")),
            [key.to_string(), arg.to_string()],
            "seq {seq}"
        );
        let job = out.job(seq);
        assert_eq!(
            (job.key.as_deref(), job.command.as_deref()),
            (Some(*key), Some(*arg))
        );
    }
    let pwned: Vec<String> = names_under(scratch.path())
        .into_iter()
        .filter(|name| name.contains("pwned"))
        .collect();
    assert!(pwned.is_empty(), "injected commands ran: {pwned:?}");
}

#[test]
fn an_unknown_placeholder_is_a_usage_error_naming_it() {
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .args(["--command", "touch \"$D/ran\" {file}"])
        .stdin("k\tx\n")
        .run();
    out.code(2);
    assert!(out.stderr().contains("{file}"), "{}", out.dump());
    assert!(!scratch.exists("ran"));
}

#[test]
fn an_argument_whose_command_would_be_too_long_is_invalid_input() {
    // 50 000 bytes fit in one argument, but the template passes it three times: the command
    // (150 000 bytes and more) could never start, so the line is refused, not tried.
    let long = "x".repeat(50_000);
    let out = Run::new()
        .args([
            "-j",
            "1",
            "--retries",
            "2",
            "--command",
            "printf %.1s {} {} {}",
        ])
        .stdin(format!("a\tok\nb\t{long}\nc\tfine\n"))
        .run();
    out.code(1);
    let job = out.job(2);
    assert_eq!(job.result(), ("rejected", Some("invalid_input")), "{job:?}");
    assert_eq!(
        (job.line, job.key.as_deref(), job.attempts),
        (2, Some("b"), 0)
    );
    let error = job.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("with the command template, the job's command would be")
            && error.contains("MAX_ARG_STRLEN"),
        "{error}"
    );
    assert_eq!(out.job(1).result(), ("succeeded", None));
    assert_eq!(out.job(3).result(), ("succeeded", None));
}

#[test]
fn a_command_too_long_once_templated_is_refused_up_front_by_strict_and_by_a_manifest() {
    // `--strict` and a manifest check every job before anything runs (exit 2, nothing run,
    // no report); the length of the command a template makes of a job is part of that check.
    let long = "x".repeat(50_000);
    let scratch = Scratch::new();
    let strict = Run::new()
        .scratch(&scratch)
        .args(["--strict", "--command", "printf %.1s {} {} {}"])
        .stdin(format!("a\ttouch-first\nb\t{long}\n"))
        .run();
    strict.code(2);
    assert!(strict.report_text.is_none(), "{}", strict.dump());
    assert!(
        strict
            .stderr()
            .contains("-:2: with the command template, the job's command would be"),
        "{}",
        strict.dump()
    );
    let manifest = scratch.write(
        "jobs.toml",
        format!(
            "command = \"touch \\\"$D/ran\\\" && printf %.1s {{}} {{}} {{}}\"\n\n\
             [[job]]\nkey = \"a\"\ncmd = \"short\"\n\n[[job]]\nkey = \"b\"\ncmd = \"{long}\"\n"
        ),
    );
    let out = Run::new().scratch(&scratch).arg(&manifest).run();
    out.code(2);
    assert!(!scratch.exists("ran"), "{}", out.dump());
    assert!(
        out.stderr()
            .contains("jobs.toml:7:1: with the command template"),
        "{}",
        out.dump()
    );
}

#[test]
fn batch_bytes_above_what_one_argument_holds_is_a_usage_error() {
    // A batch runs as the one argument of `sh -c`: a bound past MAX_ARG_STRLEN (128 KiB with
    // 4 KiB pages) would let every full batch fail to start with E2BIG.
    let scratch = Scratch::new();
    scratch.write(
        "jobs.toml",
        "command = \"touch \\\"$D/ran\\\"\"\nbatch_size = 2\nbatch_bytes = 100000000\n\
         [[job]]\nkey = \"k\"\ncmd = \"x\"\n",
    );
    // In the scratch directory: a job that ran would touch its argument there.
    let from_flag = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .args(["--command", "touch \"$D/ran\"", "--batch-size", "2"])
        .args(["--batch-bytes", "100000000"])
        .stdin("k\tx\n");
    let from_manifest = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .arg(scratch.join("jobs.toml"));
    for (run, name) in [
        (from_flag, "--batch-bytes 100000000"),
        (from_manifest, "jobs.toml:3:15) 100000000"),
    ] {
        let out = run.run();
        out.code(2);
        assert!(
            out.stderr().contains(name) && out.stderr().contains("MAX_ARG_STRLEN"),
            "{}",
            out.dump()
        );
        assert!(!scratch.exists("ran"));
    }
    // The bound leaves room for the template's own text: the most it names is accepted, one
    // more is not.
    let with = |bytes: &str| {
        Run::new()
            .no_report()
            .args([
                "--command",
                "true",
                "--batch-size",
                "2",
                "--batch-bytes",
                bytes,
            ])
            .stdin("k\tx\n")
            .run()
    };
    let refused = with("100000000");
    refused.code(2);
    let most: usize = refused
        .stderr()
        .split("give at most ")
        .nth(1)
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}", refused.dump()));
    // 128 KiB (with 4 KiB pages) less "true ".
    assert!(most >= 131_066, "{most}");
    with(&most.to_string()).code(0);
    with(&(most + 1).to_string()).code(2);
}

#[test]
fn batching_without_command_is_a_usage_error() {
    for flags in [
        ["--batch-size", "5"],
        ["--batch-delay", "1s"],
        ["--batch-bytes", "100"],
        // More than one argument can hold: no template's text to speak of, so the missing
        // template is what is said.
        ["--batch-bytes", "10000000"],
    ] {
        let scratch = Scratch::new();
        let out = Run::new()
            .scratch(&scratch)
            .args(flags)
            .stdin("k\ttouch \"$D/ran\"\n")
            .run();
        assert_eq!(out.code, 2, "{flags:?}\n{}", out.dump());
        // (`--batch-delay` alone is refused first for the batch of one it would wait for.)
        assert!(
            flags[0] == "--batch-delay" || out.stderr().contains("needs a command template"),
            "{flags:?}\n{}",
            out.dump()
        );
        assert!(!scratch.exists("ran"), "{flags:?}");
    }
}

/// With a trailing command and the default key `{}`, every distinct line is its own key, and
/// a batch holds one key's arguments: batching would change nothing (xargs' `-n 3` habit).
#[test]
fn batching_lines_that_are_each_their_own_key_is_a_usage_error_that_says_how_to_group_them() {
    let scratch = Scratch::new();
    for extra in [&[][..], &["--key", "{}"][..]] {
        let out = Run::new()
            .scratch(&scratch)
            .args(["--batch-size", "3"])
            .args(extra)
            .args(["sh", "-c", "touch \"$D/ran\"", "sh"])
            .stdin("1\n2\n3\n")
            .run();
        out.code(2);
        assert!(
            out.stderr()
                .contains("every distinct line is its own key (the key template is `{}`)")
                && out.stderr().contains("Group lines into keys with --key"),
            "{}",
            out.dump()
        );
        assert!(!scratch.exists("ran"));
    }
    // Grouped by a key, they batch.
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["--batch-size", "3", "--key", "{.}", "echo"])
        .args([":::", "a.1", "a.2", "a.3"])
        .run();
    out.code(0);
    assert_eq!(out.stdout(), "[a] a.1 a.2 a.3\n");
}

#[test]
fn batching_with_coalescing_is_a_usage_error() {
    for flags in [vec!["--coalesce", "latest"], vec!["--cancel-in-progress"]] {
        let scratch = Scratch::new();
        let out = Run::new()
            .scratch(&scratch)
            .args(["--command", "touch \"$D/ran\"", "--batch-size", "10"])
            .args(&flags)
            .stdin("k\tx\n")
            .run();
        assert_eq!(out.code, 2, "{flags:?}\n{}", out.dump());
        assert!(!scratch.exists("ran"), "{flags:?}");
        assert!(
            !out.stderr().is_empty(),
            "{flags:?}: a usage error says why"
        );
    }
}

/// Checks what every batched report holds: each batch is a run of consecutive jobs of one
/// lane that share start, end, slot and outcome, named by its first job's seq. Returns
/// batch → member seqs.
fn check_batches(records: &Records) -> BTreeMap<u64, Vec<u64>> {
    let mut batches: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for job in &records.jobs {
        let batch = job
            .batch
            .unwrap_or_else(|| panic!("a batched run's record without batch: {job:?}"));
        batches.entry(batch).or_default().push(job.seq);
    }
    for (batch, members) in &mut batches {
        members.sort_unstable();
        assert_eq!(members[0], *batch, "a batch is named by its first job");
        let first = records.job(*batch);
        let lane: Vec<u64> = records
            .by_key(first.key.as_deref().unwrap())
            .iter()
            .map(|job| job.seq)
            .collect();
        let at = lane.iter().position(|&s| s == *batch).unwrap();
        assert_eq!(
            &lane[at..at + members.len()],
            &members[..],
            "a batch takes consecutive jobs of its lane"
        );
        for &seq in members.iter() {
            let job = records.job(seq);
            assert_eq!(job.key, first.key);
            assert_eq!(
                (&job.outcome, &job.reason, job.exit_code, job.started),
                (
                    &first.outcome,
                    &first.reason,
                    first.exit_code,
                    first.started
                ),
                "jobs of batch {batch} share the outcome"
            );
            assert_eq!(
                (&job.started_at, &job.ended_at, job.slot, job.attempts),
                (
                    &first.started_at,
                    &first.ended_at,
                    first.slot,
                    first.attempts
                ),
                "jobs of batch {batch} share the run"
            );
        }
    }
    // Batches of one key never overlap in time.
    let leaders: Vec<JobRecord> = batches
        .keys()
        .map(|&batch| records.job(batch).clone())
        .collect();
    assert_no_overlap_per_key(&leaders);
    batches
}

#[test]
fn ten_thousand_arguments_in_batches_of_at_most_100() {
    const LINES: usize = 10_000;
    const KEYS: usize = 20;
    let scratch = Scratch::new();
    let report = scratch.join("report.jsonl");
    scratch.mkdir("out");
    let mut input = String::new();
    let mut want: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in 0..LINES {
        let key = format!("repo{}", (i * 7) % KEYS);
        let arg = format!("file{i}");
        input.push_str(&format!("{key}\t{arg}\n"));
        want.entry(key).or_default().push(arg);
    }
    let out = run_to(&scratch, &report)
        .cwd(scratch.path())
        .args([
            "--command",
            "printf \"%s\\n\" {} >> out/{key}",
            "--batch-size",
            "100",
        ])
        .stdin(input)
        .run();
    out.code(0);
    for (key, args) in &want {
        assert_eq!(
            &scratch.lines(&format!("out/{key}")),
            args,
            "every argument of {key} exactly once, in order"
        );
    }
    let records = Records::read(&report);
    assert_eq!(records.jobs.len(), LINES);
    assert_eq!(records.summary.succeeded, LINES as u64);
    let batches = check_batches(&records);
    let mut runs_per_key: BTreeMap<String, usize> = BTreeMap::new();
    for (batch, members) in &batches {
        assert!(members.len() <= 100, "batch {batch} has {}", members.len());
        *runs_per_key
            .entry(records.job(*batch).key.clone().unwrap())
            .or_default() += 1;
    }
    for (key, args) in &want {
        let limit = args.len().div_ceil(100) + 5;
        let runs = runs_per_key[key];
        assert!(
            runs <= limit,
            "{key}: {runs} runs for {} arguments",
            args.len()
        );
    }
}

#[test]
fn batch_bytes_bounds_each_runs_quoted_arguments() {
    batch_bytes_bound_each_run(&["--batch-size", "1000"]);
}

#[test]
fn batch_bytes_alone_batches_by_bytes_as_xargs_s_does() {
    batch_bytes_bound_each_run(&[]);
}

/// A template that holds the batch's arguments twice (`{}` and `{.}`) counts them twice: at
/// the default `--batch-bytes`, no full batch's command is too long to start (E2BIG).
#[test]
fn a_template_with_two_argument_placeholders_counts_each_argument_twice() {
    let scratch = Scratch::new();
    let report = scratch.join("report.jsonl");
    let input: String = (0..9000).map(|i| format!("k\tfile{i:05}.txt\n")).collect();
    let out = run_to(&scratch, &report)
        .args([
            "--output",
            "none",
            "--batch-size",
            "20000",
            "--command",
            "printf '%s %s\\n' {} {.} > /dev/null",
        ])
        .stdin(input)
        .run();
    out.code(0);
    let records = Records::read(&report);
    let batches = check_batches(&records);
    assert!(batches.len() > 1, "{} batches", batches.len());
}

/// 80 jobs over two keys, batched under `--batch-bytes 200` with `flags`: every batch's
/// arguments are its members', within the bound unless one alone is over it.
fn batch_bytes_bound_each_run(flags: &[&str]) {
    const BOUND: usize = 200;
    let scratch = Scratch::new();
    let report = scratch.join("report.jsonl");
    scratch.mkdir("runs");
    let mut input = String::new();
    let mut args = Vec::new();
    for i in 0..80usize {
        let arg = if i == 40 {
            // Longer than the bound on its own: a batch of one.
            format!("long-{}", "y".repeat(BOUND + 50))
        } else {
            format!(
                "a{i}-{}{}",
                "x".repeat(i % 37),
                if i % 5 == 0 { "'q'" } else { "" }
            )
        };
        input.push_str(&format!("{}\t{arg}\n", ["k", "j"][i % 2]));
        args.push(arg);
    }
    let out = run_to(&scratch, &report)
        .args([
            "-j",
            "2",
            "--command",
            "printf '%s\\n' {} > \"$D/runs/{seq}\"",
            "--batch-bytes",
            &BOUND.to_string(),
        ])
        .args(flags)
        .stdin(input)
        .run();
    out.code(0);
    let records = Records::read(&report);
    let batches = check_batches(&records);
    let mut seen = Vec::new();
    let mut largest = 0;
    for (batch, members) in &batches {
        let run = scratch.lines(&format!("runs/{batch}"));
        let want: Vec<String> = members
            .iter()
            .map(|&seq| args[seq as usize - 1].clone())
            .collect();
        assert_eq!(run, want, "run of batch {batch} got its members' arguments");
        let bytes: usize = run.iter().map(|a| quoted_len(a)).sum::<usize>() + run.len() - 1;
        if run.len() > 1 {
            assert!(
                bytes <= BOUND,
                "batch {batch}: {} arguments of {bytes} quoted bytes (bound {BOUND})",
                run.len()
            );
        }
        largest = largest.max(run.len());
        seen.extend(members.iter().copied());
    }
    assert!(largest > 1, "no batch held two jobs: {batches:?}");
    seen.sort_unstable();
    assert_eq!(seen, (1..=80).collect::<Vec<u64>>());
    assert_eq!(batches[&41], [41], "a job over the bound runs alone");
}

#[test]
fn batch_delay_gathers_each_burst_into_one_batch() {
    let scratch = Scratch::new();
    let report = scratch.join("report.jsonl");
    let events_path = scratch.join("events.jsonl");
    let mut running = run_to(&scratch, &report)
        .args([
            "-j",
            "2",
            "--command",
            "printf '%s\\n' {} >> \"$D/out\"; for a in {}; do [ \"$a\" != fail ] || exit 3; done",
            "--batch-size",
            "100",
            "--batch-delay",
            "200ms",
            "--events",
        ])
        .arg(&events_path)
        .stdin_piped()
        .spawn();
    let bursts: [&[&str]; 3] = [
        &["a1", "a2", "a3", "a4", "a5"],
        &["b1", "b2", "b3", "fail", "b5", "b6", "b7"],
        &["c1", "c2", "c3"],
    ];
    let mut first_seq = 1u64;
    let mut want_batches = BTreeMap::new();
    for burst in bursts {
        let text: String = burst.iter().map(|arg| format!("k\t{arg}\n")).collect();
        running.stdin().write_all(text.as_bytes()).unwrap();
        running.stdin().flush().unwrap();
        let seqs: Vec<u64> = (first_seq..first_seq + burst.len() as u64).collect();
        let last = *seqs.last().unwrap();
        assert!(
            wait_until(WAIT, || of_kind(&events(&events_path), "ended")
                .iter()
                .any(|e| int(e, "seq") == last)),
            "burst {seqs:?} did not run"
        );
        want_batches.insert(first_seq, seqs);
        first_seq = last + 1;
    }
    running.close_stdin();
    let out = running.wait();
    out.code(1);
    let all = events(&events_path);
    let mut started: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for event in of_kind(&all, "started") {
        started
            .entry(int(event, "batch"))
            .or_default()
            .push(int(event, "seq"));
    }
    for members in started.values_mut() {
        members.sort_unstable();
    }
    assert_eq!(started, want_batches, "started events by batch");
    // The delay: each batch started at least 200 ms after its oldest job was queued.
    let queued: BTreeMap<u64, i64> = of_kind(&all, "queued")
        .iter()
        .map(|e| (int(e, "seq"), at_ms(e)))
        .collect();
    for event in of_kind(&all, "started") {
        let batch = int(event, "batch");
        let waited = at_ms(event) - queued[&batch];
        assert!(waited >= 199, "batch {batch} started after {waited} ms");
    }
    let records = Records::read(&report);
    let batches = check_batches(&records);
    assert_eq!(batches, want_batches, "records by batch");
    for seq in 1..=15u64 {
        let job = records.job(seq);
        let want = if (6..=12).contains(&seq) {
            ("failed", Some("exit_status"))
        } else {
            ("succeeded", None)
        };
        assert_eq!(job.result(), want, "{job:?}");
        if job.outcome == "failed" {
            assert_eq!(job.exit_code, Some(3));
        }
    }
    let args: Vec<String> = bursts.concat().iter().map(|s| s.to_string()).collect();
    assert_eq!(scratch.lines("out"), args);
    let distinct: BTreeSet<u64> = records.jobs.iter().filter_map(|j| j.batch).collect();
    assert_eq!(distinct.len(), 3);
}

#[test]
fn a_batch_delay_without_a_batch_of_more_than_one_is_a_usage_error() {
    let scratch = Scratch::new();
    let run = |flags: &[&str]| {
        // No report checked: a batched run's records have `batch` set.
        Run::new()
            .scratch(&scratch)
            .no_report()
            .args(["--command", "touch \"$D/ran.\"{}"])
            .args(flags)
            .stdin("k\ta\n")
            .run()
    };
    let out = run(&["--batch-delay", "5ms"]);
    out.code(2);
    assert!(
        out.stderr().contains(
            "--batch-delay waits for a key's batch to fill, but a batch holds one job here"
        ),
        "{}",
        out.dump()
    );
    assert!(!scratch.exists("ran.a"));
    run(&["--batch-delay", "5ms", "--batch-bytes", "100"]).code(0);
    assert!(scratch.exists("ran.a"));
}

#[test]
fn a_batch_stopped_in_its_retry_delay_keeps_its_batch_in_every_record() {
    let scratch = Scratch::new();
    let report = scratch.join("report.jsonl");
    let events_path = scratch.join("events.jsonl");
    let running = run_to(&scratch, &report)
        .args([
            "-j",
            "2",
            "--command",
            "exit 3; true {}",
            "--batch-size",
            "2",
            // Each batch waits for its second job: a busy machine may let lanes read a key's
            // first line alone and start it before the second is read.
            "--batch-delay",
            "30s",
            "--retries",
            "3",
            "--retry-delay",
            "60s",
            "--events",
        ])
        .arg(&events_path)
        .stdin("a\t1\na\t2\nb\t3\nb\t4\n")
        .spawn();
    // Both batches failed once and wait out their retry delay.
    assert!(wait_until(WAIT, || {
        of_kind(&events(&events_path), "ended")
            .iter()
            .filter(|e| e["retry"] == true)
            .count()
            == 4
    }));
    running.signal(nix::sys::signal::Signal::SIGTERM);
    running.wait().code(143);
    let batches: BTreeMap<u64, Option<u64>> = events(&report)
        .iter()
        .filter(|r| r["type"] == "job")
        .map(|r| (r["seq"].as_u64().unwrap(), r["batch"].as_u64()))
        .collect();
    assert_eq!(
        batches,
        BTreeMap::from([(1, Some(1)), (2, Some(1)), (3, Some(3)), (4, Some(3))])
    );
}

#[test]
fn a_batch_delay_is_not_waited_out_once_the_input_has_ended() {
    // Two jobs of a batch of up to five, and a delay of a minute: the input ends at once, so
    // nothing more can join the batch, and it goes without waiting the minute.
    let scratch = Scratch::new();
    let report = scratch.join("report.jsonl");
    run_to(&scratch, &report)
        .args([
            "--command",
            "true {}",
            "--batch-size",
            "5",
            "--batch-delay",
            "60s",
        ])
        .stdin("a\t1\na\t2\n")
        .run()
        .code(0);
    let records: Vec<serde_json::Value> = events(&report)
        .into_iter()
        .filter(|r| r["type"] == "job")
        .collect();
    assert_eq!(records.len(), 2);
    for record in &records {
        assert_eq!(record["batch"], 1, "{record}");
        assert!(record["wait_ms"].as_u64().unwrap() < 30_000, "{record}");
    }
}

#[test]
fn a_batch_delay_is_not_waited_out_while_the_queue_is_full() {
    // At most two jobs wait, so a batch of up to five can never fill while input streams in:
    // the batch goes without waiting the minute, though the input has not ended.
    let scratch = Scratch::new();
    let report = scratch.join("report.jsonl");
    let mut running = run_to(&scratch, &report)
        .args([
            "--command",
            "for a in {}; do touch \"$D/ran.$a\"; done",
            "--batch-size",
            "5",
            "--batch-delay",
            "60s",
            "--max-queued",
            "2",
        ])
        .stdin_piped()
        .spawn();
    running.stdin().write_all(b"a\t1\na\t2\na\t3\n").unwrap();
    running.stdin().flush().unwrap();
    scratch.wait_for("ran.1", Duration::from_secs(20));
    running.close_stdin();
    running.wait().code(0);
    for a in ["ran.1", "ran.2", "ran.3"] {
        assert!(scratch.exists(a), "{a}");
    }
}

#[test]
fn a_batch_whose_delay_ran_out_with_the_slot_taken_is_told_waiting_for_the_cap_at_once() {
    // -j 1: a's batch runs until the test lets it go; b's partial batch waits out its 100 ms
    // delay, then for the cap. The `waiting` event saying so comes while a still runs (it
    // came only just before b's start, back-dated).
    let scratch = Scratch::new();
    let events = scratch.join("events.jsonl");
    let report = scratch.join("report.jsonl");
    let mut running = run_to(&scratch, &report)
        .args(["-j", "1", "--batch-size", "3", "--batch-delay", "100ms"])
        .arg("--events")
        .arg(&events)
        .args([
            "--command",
            "until [ -e \"$D/go\" ]; do sleep 0.02; done; echo {}",
        ])
        .stdin_piped()
        .spawn();
    running.stdin().write_all(b"a\tx1\nb\ty1\n").unwrap();
    let told = wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(&events)
            .unwrap_or_default()
            .lines()
            .any(|line| line.contains("\"seq\":2") && line.contains("\"cause\":\"cap\""))
    });
    scratch.write("go", "");
    running.close_stdin();
    running.wait().code(0);
    assert!(told, "{}", std::fs::read_to_string(&events).unwrap());
    let records = Records::read(&report);
    let b = records.job(2);
    let causes: Vec<&str> = b.waits.iter().map(|w| w.cause.as_str()).collect();
    assert_eq!(causes, ["batch_delay", "cap"], "{b:?}");
}

/// A batch's arguments in an assignment word (`x={}`) would make the second argument a
/// command: refused before anything runs; one argument per job there is fine.
#[test]
fn a_batch_in_an_assignment_word_is_refused_before_anything_runs() {
    let scratch = Scratch::new();
    let jobs = "k\ta\nk\ttouch\nk\tpwned\n";
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .cwd(scratch.path())
        .args(["--batch-size", "3", "--command", "x={}; echo \"$x\""])
        .stdin(jobs)
        .run();
    out.code(2);
    assert!(
        out.stderr().contains("in a word that begins `NAME=`"),
        "{}",
        out.dump()
    );
    assert!(!scratch.exists("pwned"));
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .cwd(scratch.path())
        .args(["--output", "raw", "--command", "x={}; echo \"$x\""])
        .stdin(jobs)
        .run();
    out.code(0);
    assert_eq!(out.stdout(), "a\ntouch\npwned\n");
    assert!(!scratch.exists("pwned"));
}
