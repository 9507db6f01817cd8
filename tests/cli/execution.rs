//! SPEC §2: how a job runs: environment, stdin, process group, descriptors, signal state,
//! spawn errors, signals that end a job, and the leak window.

use std::io::Write;
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

#[test]
fn jobs_see_the_lanes_variables_and_the_runners_environment() {
    let out = Run::new()
        .env("RUNNER_VAR", "from-runner")
        .args(["-j", "1"])
        .stdin(
            "alpha\techo \"$LANES_KEY|$LANES_SEQ|$LANES_SLOT|$LANES_ATTEMPT|$RUNNER_VAR\"\n\
             # comment\n\
             beta\techo \"$LANES_KEY|$LANES_SEQ|$LANES_SLOT|$LANES_ATTEMPT|$RUNNER_VAR\"\n",
        )
        .run();
    out.code(0);
    assert_eq!(
        out.stdout(),
        "[alpha] alpha|1|1|1|from-runner\n[beta] beta|2|1|1|from-runner\n"
    );
    for seq in [1, 2] {
        let job = out.job(seq);
        assert_eq!((job.slot, job.attempts), (Some(1), 1), "{job:?}");
    }
}

#[test]
fn stdin_of_a_job_is_dev_null() {
    // lanes' own stdin stays open while the job runs: a job reading it would hang.
    let scratch = Scratch::new();
    let mut running = Run::new()
        .scratch(&scratch)
        .args(["-j", "1"])
        .stdin_piped()
        .spawn();
    running
        .stdin()
        .write_all(b"k\treadlink /proc/$$/fd/0; cat; echo \"cat-ended\"\n")
        .unwrap();
    running.stdin().flush().unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || running
            .report_so_far()
            .contains("\"type\":\"job\"")),
        "the job did not end while lanes' stdin stayed open"
    );
    running.close_stdin();
    let out = running.wait();
    out.code(0);
    assert_eq!(out.stdout(), "[k] /dev/null\n[k] cat-ended\n");
}

#[test]
fn each_job_runs_in_a_process_group_of_its_own() {
    let scratch = Scratch::new();
    // Fields 1, 4, 5 and 6 of /proc/PID/stat: pid, ppid, pgrp, session ("sh" has no space).
    let job = format!(
        "set -- $(cat /proc/$$/stat); echo \"$1 $4 $5 $6\" > \"$D/stat-$LANES_SEQ\"; \
         touch \"$D/up-$LANES_SEQ\"; {}; {}",
        await_file("up-1"),
        await_file("up-2")
    );
    let running = Run::new()
        .scratch(&scratch)
        .args(["-j", "2"])
        .stdin(format!("a\t{job}\nb\t{job}\n"))
        .spawn();
    let lanes_pid = running.pid();
    let out = running.wait();
    out.code(0);
    let mut groups = Vec::new();
    for seq in [1, 2] {
        let stat: Vec<i32> = scratch
            .read(&format!("stat-{seq}"))
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        let (pid, ppid, pgrp) = (stat[0], stat[1], stat[2]);
        assert_eq!(ppid, lanes_pid, "the job's shell is lanes' child");
        assert_eq!(
            pgrp, pid,
            "the job's shell leads a process group of its own"
        );
        assert_ne!(pgrp, lanes_pid, "not lanes' group");
        groups.push(pgrp);
    }
    assert_ne!(groups[0], groups[1]);
}

#[test]
fn jobs_have_no_descriptor_but_0_1_2() {
    // lanes inherits descriptors 7 and 9 from its parent, writes a report (its own
    // descriptor) and runs three jobs at once (each with pipes of its own). Each job, once all
    // three run, replaces its shell with `ls -l /proc/self/fd`: what ls lists beyond 0, 1, 2
    // is the directory it opened itself, and anything the job inherited.
    let scratch = Scratch::new();
    let job = format!(
        "touch \"$D/up-$LANES_SEQ\"; {}; {}; {}; exec ls -l /proc/self/fd",
        await_file("up-1"),
        await_file("up-2"),
        await_file("up-3")
    );
    let out = Run::new()
        .scratch(&scratch)
        .wrapper("exec 7</dev/null 9>\"$D/inherited\"")
        .args(["-j", "3"])
        .stdin(format!("a\t{job}\nb\t{job}\nc\t{job}\n"))
        .run();
    out.code(0);
    for key in ["a", "b", "c"] {
        let prefix = format!("[{key}] ");
        let mut fds = Vec::new();
        for line in out.stdout().lines() {
            let Some(entry) = line.strip_prefix(&prefix) else {
                continue;
            };
            let Some((left, target)) = entry.split_once(" -> ") else {
                continue; // "total 0"
            };
            let fd = left.rsplit(' ').next().unwrap().to_owned();
            let own_listing = target.starts_with("/proc/") && target.ends_with("/fd");
            if !own_listing {
                fds.push(format!("{fd} -> {target}"));
            }
        }
        let numbers: Vec<&str> = fds.iter().map(|f| f.split(' ').next().unwrap()).collect();
        assert_eq!(
            numbers,
            ["0", "1", "2"],
            "descriptors of job {key}: {fds:?}"
        );
        assert!(fds[0].ends_with("/dev/null"), "{fds:?}");
    }
}

/// The blocked and ignored signal sets of a job's process, as bit masks, with lanes started
/// with signals ignored (as a background job of a script would be).
fn job_signal_sets() -> (u64, u64) {
    let out = Run::new()
        .wrapper("trap '' INT QUIT TERM USR1 USR2 ALRM")
        .args(["-j", "1"])
        .stdin("k\texec grep -E '^Sig(Blk|Ign):' /proc/self/status\n")
        .run();
    out.code(0);
    let mask = |name: &str| {
        let line = out
            .stdout()
            .lines()
            .find_map(|l| l.strip_prefix(&format!("[k] {name}:\t")).map(str::to_owned))
            .unwrap_or_else(|| panic!("no {name}\n{}", out.dump()));
        u64::from_str_radix(&line, 16).unwrap()
    };
    (mask("SigBlk"), mask("SigIgn"))
}

#[test]
fn jobs_start_with_standard_signals_at_default_and_an_empty_mask() {
    let (blocked, ignored) = job_signal_sets();
    assert_eq!(blocked, 0, "blocked signals {blocked:#x}");
    // Signals 1..=31: bit N-1.
    assert_eq!(
        ignored & 0x7fff_ffff,
        0,
        "ignored standard signals {ignored:#x}"
    );
}

#[test]
fn jobs_start_with_no_signal_ignored_at_all() {
    // Also the real-time range: a job must not inherit e.g. signals 32 and 33 as ignored.
    let (_, ignored) = job_signal_sets();
    let ignored_signals: Vec<u32> = (1..=64).filter(|n| ignored & (1 << (n - 1)) != 0).collect();
    assert!(
        ignored_signals.is_empty(),
        "a job starts with signals {ignored_signals:?} ignored (SigIgn {ignored:#018x})"
    );
}

#[test]
fn a_missing_cwd_is_a_spawn_error_and_the_lane_moves_on() {
    let scratch = Scratch::new();
    scratch.write(
        "m.toml",
        "[[job]]\nkey = \"k\"\ncmd = 'touch \"$D/ran-1\"'\ncwd = \"no/such/dir\"\n\n\
         [[job]]\nkey = \"k\"\ncmd = 'touch \"$D/ran-2\"'\n",
    );
    let out = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .arg("m.toml")
        .run();
    out.code(1);
    let failed = out.job(1);
    assert_eq!(
        failed.result(),
        ("failed", Some("spawn_error")),
        "{failed:?}"
    );
    let error = failed.error.as_deref().unwrap();
    assert!(error.contains("No such file or directory"), "{error}");
    assert!(
        error.contains("no/such/dir"),
        "the error names the directory: {error}"
    );
    assert!(!scratch.exists("ran-1"));
    assert_eq!(out.job(2).result(), ("succeeded", None));
    assert!(scratch.exists("ran-2"));
}

#[test]
fn a_missing_shell_is_a_spawn_error_for_every_job() {
    let out = Run::new()
        .args(["--shell", "/nonexistent/shell", "-j", "2"])
        .stdin("a\techo 1\na\techo 2\nb\techo 3\n")
        .run();
    out.code(1);
    let report = out.report();
    assert_eq!(report.summary.failed, 3, "{}", out.dump());
    for job in &report.jobs {
        assert_eq!(job.result(), ("failed", Some("spawn_error")), "{job:?}");
        let error = job.error.as_deref().unwrap();
        assert!(error.contains("No such file or directory"), "{error}");
    }
}

#[test]
fn a_shell_that_cannot_be_executed_is_a_spawn_error() {
    let scratch = Scratch::new();
    let not_executable = scratch.write("not-a-shell", "#!/bin/sh\necho hi\n");
    let out = Run::new()
        .arg("--shell")
        .arg(&not_executable)
        .stdin("a\techo 1\n")
        .run();
    out.code(1);
    let job = out.job(1);
    assert_eq!(job.result(), ("failed", Some("spawn_error")), "{job:?}");
    assert!(
        job.error.as_deref().unwrap().contains("Permission denied"),
        "{job:?}"
    );
}

/// A shell that is a script without `#!` runs with /bin/sh, as execvp(3) runs it, whether it
/// is named by its path or found on `PATH`.
#[test]
fn a_shell_script_without_a_shebang_runs_with_bin_sh_by_path_and_by_name() {
    use std::os::unix::fs::PermissionsExt as _;
    let scratch = Scratch::new();
    let dir = scratch.mkdir("bin");
    let shell = dir.join("plainsh");
    std::fs::write(&shell, "echo \"plain shell: $*\"\n").unwrap();
    std::fs::set_permissions(&shell, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for given in [shell.to_str().unwrap(), "plainsh"] {
        let out = Run::new()
            .env("PATH", &path)
            .args(["--shell", given])
            .stdin("a\tx\n")
            .run();
        out.code(0);
        assert!(
            out.stdout().contains("plain shell: -c x"),
            "--shell {given}: {}",
            out.dump()
        );
    }
}

#[test]
fn a_job_ended_by_a_signal_is_killed_with_the_signals_name() {
    let scratch = Scratch::new();
    let out = Run::new()
        .cwd(scratch.path())
        .args(["-j", "3"])
        .stdin("segv\tulimit -c 0; kill -SEGV $$\nkill\tkill -KILL $$\nterm\tkill -TERM $$\n")
        .run();
    out.code(1);
    for (seq, signal) in [(1, "SIGSEGV"), (2, "SIGKILL"), (3, "SIGTERM")] {
        let job = out.job(seq);
        assert_eq!(job.result(), ("failed", Some("killed")), "{job:?}");
        assert_eq!(job.signal.as_deref(), Some(signal), "{job:?}");
        assert_eq!(job.exit_code, None);
        assert!(!job.leaked);
    }
}

#[test]
fn an_exit_status_above_128_is_an_exit_status_not_a_signal() {
    // A shell reports a child killed by signal N as status 128+N; lanes sees how its own
    // child ended, so `exit 137` stays an exit status and SIGKILL stays a signal.
    let out = Run::new()
        .args(["-j", "3"])
        .stdin("e137\texit 137\ne143\texit 143\nk9\tkill -KILL $$\n")
        .run();
    out.code(1);
    for (seq, code) in [(1, 137), (2, 143)] {
        let job = out.job(seq);
        assert_eq!(job.result(), ("failed", Some("exit_status")), "{job:?}");
        assert_eq!((job.exit_code, job.signal.as_deref()), (Some(code), None));
    }
    let killed = out.job(3);
    assert_eq!(killed.result(), ("failed", Some("killed")), "{killed:?}");
    assert_eq!(
        (killed.exit_code, killed.signal.as_deref()),
        (None, Some("SIGKILL"))
    );
}

#[test]
fn a_non_zero_exit_is_failed_with_its_exit_code() {
    let out = Run::new()
        .args(["-j", "2"])
        .stdin("a\texit 3\nb\tfalse\nc\ttrue\n")
        .run();
    out.code(1);
    assert_eq!(out.job(1).result(), ("failed", Some("exit_status")));
    assert_eq!(out.job(1).exit_code, Some(3));
    assert_eq!(out.job(2).exit_code, Some(1));
    assert_eq!(out.job(3).result(), ("succeeded", None));
}

#[test]
fn a_background_process_left_behind_is_killed_and_the_job_marked_leaked() {
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "2", "--leak-window", "100ms", "--grace", "1"])
        .stdin(
            "k\tsleep 30 & echo $! > \"$D/bg\"; echo started\n\
             k\tp=$(cat \"$D/bg\"); if [ -d /proc/$p ] && ! grep -q zombie /proc/$p/status; \
             then echo alive; else echo gone; fi\n\
             q\tsleep 31 >/dev/null 2>&1 & echo $! > \"$D/bg-quiet\"; exit 4\n",
        )
        .run();
    out.code(1);
    let leaked = out.job(1);
    assert_eq!(leaked.result(), ("succeeded", None), "{leaked:?}");
    assert!(leaked.leaked, "{leaked:?}");
    assert!(leaked.duration_ms.unwrap() < 5000, "{leaked:?}");
    assert!(
        out.stdout().contains("[k] gone\n"),
        "the next job of the key saw the leftover alive\n{}",
        out.dump()
    );
    let quiet = out.job(3);
    assert_eq!(quiet.result(), ("failed", Some("exit_status")), "{quiet:?}");
    assert_eq!(quiet.exit_code, Some(4));
    assert!(quiet.leaked, "{quiet:?}");
    assert!(!out.job(2).leaked);
    assert!(!alive(scratch.pid("bg")) && !alive(scratch.pid("bg-quiet")));
    assert!(out.elapsed < Duration::from_secs(10), "{:?}", out.elapsed);
}

#[test]
fn a_leftover_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .args(["--leak-window", "100ms", "--grace", "1"])
        .stdin(format!(
            "k\tsh -c 'trap \"\" TERM; : > \"$D/ready\"; exec sleep 30' & echo $! > \"$D/bg\"; {}\n",
            await_file("ready")
        ))
        .run();
    out.code(0);
    let job = out.job(1);
    assert!(job.leaked, "{job:?}");
    let ms = job.duration_ms.unwrap();
    assert!(
        (1000..6000).contains(&ms),
        "leak window 100ms + grace 1s, took {ms} ms"
    );
    assert!(!alive(scratch.pid("bg")));
}

#[test]
fn a_background_process_ending_within_the_leak_window_is_not_leaked() {
    let out = Run::new()
        .args(["--leak-window", "5s"])
        .stdin("k\t(sleep 0.3; echo late) &\n")
        .run();
    out.code(0);
    let job = out.job(1);
    assert!(!job.leaked, "{job:?}");
    assert_eq!(out.stdout(), "[k] late\n");
    let ms = job.duration_ms.unwrap();
    assert!(
        (250..4000).contains(&ms),
        "the job ends when its group is empty, not after the window: {ms} ms"
    );
}

#[test]
fn an_orphan_of_a_job_is_reaped_and_the_job_ends_when_it_is_gone() {
    // The subshell exits at once, orphaning `sleep 0.3`, which lanes (a child subreaper)
    // adopts; the job ends when it exits, within the leak window, not leaked, and the next
    // job of the key finds no trace of it, not even a zombie.
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .args(["--leak-window", "5s"])
        .stdin(
            "k\t(sleep 0.3 & echo $! > \"$D/orphan\")\n\
             k\tif [ -e /proc/$(cat \"$D/orphan\") ]; then echo present; else echo reaped; fi\n",
        )
        .run();
    out.code(0);
    let job = out.job(1);
    assert!(!job.leaked, "{job:?}");
    let ms = job.duration_ms.unwrap();
    assert!((250..4000).contains(&ms), "{ms} ms");
    assert_eq!(out.stdout(), "[k] reaped\n");
}

/// `--results` under a small `ulimit -n`: a job whose two files cannot be opened for want of a
/// descriptor waits to start, as a spawn that meets EMFILE does; its output is never lost (10
/// of 40 files were, with exit 1, and the index named them all the same).
#[test]
fn running_out_of_descriptors_for_results_files_delays_jobs_and_loses_no_output() {
    let scratch = Scratch::new();
    let input: String = (1..=20).map(|i| format!("{i}\n")).collect();
    let out = Run::new()
        .scratch(&scratch)
        .wrapper("ulimit -n 30")
        .args(["-j", "8", "--results"])
        .arg(scratch.join("results"))
        .args([
            "--",
            "sh",
            "-c",
            "echo \"o$1\"; echo \"e$1\" >&2; sleep 0.2",
            "_",
            "{}",
        ])
        .stdin(input)
        .run();
    out.code(0);
    assert_eq!(out.report().summary.succeeded, 20, "{}", out.dump());
    let index = scratch.read("results/index.jsonl");
    assert_eq!(index.lines().count(), 20, "{index}");
    for line in index.lines() {
        let entry: Value = serde_json::from_str(line).unwrap();
        let seq = entry["seq"].as_u64().unwrap();
        for (stream, letter) in [("stdout", 'o'), ("stderr", 'e')] {
            let name = entry[stream].as_str().unwrap();
            let text = scratch.read(&format!("results/{name}"));
            // Each job's argument is its line, and its seq is its line.
            assert_eq!(text, format!("{letter}{seq}\n"), "{name}");
        }
    }
}

#[test]
fn running_out_of_descriptors_delays_jobs_but_never_fails_them() {
    // With 32 descriptors lanes cannot hold the pipes of 16 jobs at once: spawns hit EMFILE
    // and must be retried, never reported as failures, never lost.
    let scratch = Scratch::new();
    scratch.mkdir("running");
    let job = "mkdir \"$D/running/$LANES_SEQ\"; ls \"$D/running\" | wc -l >> \"$D/counts\"; \
               sleep 0.3; rmdir \"$D/running/$LANES_SEQ\"";
    let input: String = (0..16).map(|i| format!("k{i}\t{job}\n")).collect();
    let out = Run::new()
        .scratch(&scratch)
        .wrapper("ulimit -n 32")
        .args(["-j", "16"])
        .stdin(input)
        .run();
    out.code(0);
    assert_eq!(out.report().summary.succeeded, 16, "{}", out.dump());
    let most = scratch
        .lines("counts")
        .iter()
        .map(|l| l.trim().parse::<usize>().unwrap())
        .max()
        .unwrap();
    assert!(
        most < 16,
        "all 16 ran at once: the descriptor limit was not reached"
    );
}
