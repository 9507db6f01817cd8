//! SPEC §2: the turn timeout, SIGTERM to the whole process group, the grace period, SIGKILL.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::sys::stat::Mode;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn a_timeout_interrupts_the_job_and_ends_its_whole_process_tree() {
    let scratch = Scratch::new();
    // A long grace: the tree dies at SIGTERM, so the job must end long before it.
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "2", "--timeout", "0.5", "--grace", "20"])
        .stdin(
            "k\techo \"$$\" > \"$D/sh\"; echo before; \
             sleep 30 & echo $! > \"$D/bg\"; \
             (sleep 31; echo never) & echo $! > \"$D/sub\"; \
             sh -c 'echo $$ > \"$D/grandchild\"; sleep 32' ; echo never\n\
             k\techo next\n",
        )
        .run();
    out.code(1);
    let job = out.job(1);
    assert_eq!(job.result(), ("interrupted", Some("timeout")), "{job:?}");
    assert!(job.started);
    let ms = job.duration_ms.unwrap();
    assert!((400..5000).contains(&ms), "timeout 0.5 s, ran {ms} ms");
    for name in ["sh", "bg", "sub", "grandchild"] {
        let pid = scratch.pid(name);
        assert!(!alive(pid), "{name} ({pid}) outlived the timeout");
    }
    assert!(
        out.stdout().contains("[k] before\n"),
        "output written before the timeout is kept\n{}",
        out.dump()
    );
    assert!(!out.stdout().contains("never"));
    // The lane moves on.
    assert_eq!(out.job(2).result(), ("succeeded", None));
    assert!(out.stdout().contains("[k] next\n"));
    assert!(out.elapsed < Duration::from_secs(10), "{:?}", out.elapsed);
}

#[test]
fn timeouts_accept_seconds_and_humantime() {
    for timeout in ["0.3", "300ms"] {
        let out = Run::new()
            .args(["--timeout", timeout, "--grace", "1"])
            .stdin("k\tsleep 10\n")
            .run();
        out.code(1);
        let job = out.job(1);
        assert_eq!(job.result(), ("interrupted", Some("timeout")), "{job:?}");
        assert_eq!(job.signal.as_deref(), Some("SIGTERM"), "{job:?}");
        let ms = job.duration_ms.unwrap();
        assert!((150..3000).contains(&ms), "--timeout {timeout}: {ms} ms");
    }
}

#[test]
fn a_job_that_ignores_sigterm_is_killed_after_the_grace_period_not_before() {
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .args(["--timeout", "0.5", "--grace", "1.5"])
        .stdin(
            "k\ttrap 'echo term >> \"$D/term\"' TERM; echo $$ > \"$D/pid\"; \
             while :; do sleep 0.05; done\n",
        )
        .run();
    out.code(1);
    let job = out.job(1);
    assert_eq!(job.result(), ("interrupted", Some("timeout")), "{job:?}");
    assert_eq!(job.signal.as_deref(), Some("SIGKILL"), "{job:?}");
    let ms = job.duration_ms.unwrap();
    assert!(
        (1850..6000).contains(&ms),
        "timeout 0.5 s + grace 1.5 s, SIGKILL after {ms} ms"
    );
    assert_eq!(
        scratch.lines("term"),
        ["term"],
        "SIGTERM first, and only once"
    );
    assert!(!alive(scratch.pid("pid")));
}

#[test]
fn a_job_within_its_timeout_is_not_touched() {
    let out = Run::new()
        .args(["--timeout", "5", "--grace", "1"])
        .stdin("k\tsleep 0.3; echo done\n")
        .run();
    out.code(0);
    assert_eq!(out.stdout(), "[k] done\n");
}

#[test]
fn the_timeout_counts_from_the_jobs_start_not_its_admission() {
    // Three jobs of one lane, 0.5 s each, under a 0.9 s timeout: all succeed although the last
    // was admitted 1 s before it could start.
    let out = Run::new()
        .args(["--timeout", "0.9", "--grace", "1"])
        .stdin("k\tsleep 0.5\nk\tsleep 0.5\nk\tsleep 0.5\n")
        .run();
    out.code(0);
    let last = out.job(3);
    assert!(last.wait_ms.unwrap() > 900, "{last:?}");
}

#[test]
fn a_job_runs_its_whole_timeout_before_it_is_stopped() {
    // Many jobs start at once; each must have run (by its own record) at least the timeout
    // before SIGTERM ends it. 1 ms of slack for the truncation of duration_ms.
    let input: String = (0..24).map(|i| format!("k{i}\tsleep 10\n")).collect();
    let out = Run::new()
        .args(["-j", "24", "--timeout", "0.2", "--grace", "1"])
        .stdin(input)
        .run();
    out.code(1);
    let short: Vec<(u64, u64)> = out
        .report()
        .jobs
        .iter()
        .map(|job| {
            assert_eq!(job.result(), ("interrupted", Some("timeout")), "{job:?}");
            (job.seq, job.duration_ms.unwrap())
        })
        .filter(|&(_, ms)| ms < 199)
        .collect();
    assert!(
        short.is_empty(),
        "jobs stopped before their 200 ms timeout (seq, duration_ms): {short:?}"
    );
}

#[test]
fn a_timeout_kills_a_process_that_ignores_sigterm_after_the_jobs_shell_has_died() {
    // The job's shell dies of the timeout's SIGTERM at once; its child ignores SIGTERM, so
    // only the SIGKILL at the end of the grace period, sent to the group, ends it.
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .args(["--timeout", "1", "--grace", "1.5"])
        .stdin(
            "k\tsh -c 'trap \"\" TERM; echo $$ > \"$D/pid\"; : > \"$D/up\"; exec sleep 30' \
             & wait\n",
        )
        .run();
    out.code(1);
    assert!(
        scratch.exists("up"),
        "the child was not ready before the timeout"
    );
    let job = out.job(1);
    assert_eq!(job.result(), ("interrupted", Some("timeout")), "{job:?}");
    let ms = job.duration_ms.unwrap();
    assert!(
        (2450..7000).contains(&ms),
        "timeout 1 s + grace 1.5 s, the job's group was empty after {ms} ms"
    );
    assert!(!alive(scratch.pid("pid")), "the child outlived its job");
    assert!(out.elapsed < Duration::from_secs(10), "{:?}", out.elapsed);
}

#[test]
fn timed_out_jobs_leave_no_zombie_while_the_run_goes_on() {
    // Three jobs time out: a shell that became `sleep`, a shell waiting for a background
    // `sleep`, and a shell whose child (a grandchild of lanes, adopted by it once the shell
    // is gone) became `sleep`. Job `hold` keeps the run going until the test opens a FIFO.
    let scratch = Scratch::new();
    let release = scratch.join("release");
    nix::unistd::mkfifo(&release, Mode::from_bits_truncate(0o600)).unwrap();
    scratch.write(
        "m.toml",
        r#"[[job]]
key = "hold"
cmd = 'read x < "$D/release"'

[[job]]
key = "z1"
cmd = 'echo $$ > "$D/pid-z1"; exec sleep 30'
timeout = "1s"

[[job]]
key = "z2"
cmd = 'sleep 30 & echo $! > "$D/pid-z2"; wait'
timeout = "1s"

[[job]]
key = "z3"
cmd = """sh -c 'echo $$ > "$D/pid-z3"; exec sleep 30' & wait"""
timeout = "1s"
"#,
    );
    let running = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .args(["-j", "4", "--grace", "1", "m.toml"])
        .spawn();
    assert!(
        wait_until(WAIT, || running
            .report_so_far()
            .lines()
            .filter(|record| record.contains("\"reason\":\"timeout\""))
            .count()
            == 3),
        "the three jobs did not time out\n{}",
        running.report_so_far()
    );
    let lanes = running.pid();
    let mut zombies = Vec::new();
    let reaped = wait_until(Duration::from_secs(2), || {
        zombies = zombie_descendants(lanes);
        zombies.is_empty()
    });
    assert!(
        reaped,
        "zombies under lanes after the timeouts: {zombies:?}"
    );
    for key in ["z1", "z2", "z3"] {
        assert!(
            !alive(scratch.pid(&format!("pid-{key}"))),
            "{key}'s sleep lives on"
        );
    }
    assert!(alive(lanes), "the run ended before job hold did");
    // The FIFO's reader is job hold: opening it does not block.
    OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(&release)
        .and_then(|mut fifo| fifo.write_all(b"go\n"))
        .expect("job hold reads the FIFO");
    let out = running.wait();
    out.code(1);
    assert_eq!(out.job(1).result(), ("succeeded", None), "{}", out.dump());
    for seq in 2..=4 {
        let job = out.job(seq);
        assert_eq!(job.result(), ("interrupted", Some("timeout")), "{job:?}");
    }
}

#[test]
fn hundreds_of_timeouts_at_once_in_process_group_mode_are_all_applied_on_time() {
    // Each stop looks in /proc for the job's processes that left its group: once per job
    // against every process of the run, that grew with the square of the jobs running, and
    // at -j 200 the last jobs were stopped seconds late (many ran to their own end first).
    const JOBS: usize = 200;
    let input: String = (0..JOBS).map(|i| format!("k{i}\tsleep 3\n")).collect();
    let out = Run::new()
        .args(["--containment", "process-group", "-j", "200"])
        .args(["--timeout", "1", "--grace", "1"])
        .stdin(input)
        .run();
    out.code(1);
    let report = out.report();
    assert_eq!(report.jobs.len(), JOBS, "{}", out.stderr());
    for job in &report.jobs {
        assert_eq!(job.result(), ("interrupted", Some("timeout")), "{job:?}");
        assert_eq!(job.signal.as_deref(), Some("SIGTERM"), "{job:?}");
    }
}

#[test]
fn a_stop_signal_reaches_hundreds_of_jobs_at_once_in_process_group_mode() {
    let scratch = Scratch::new();
    const JOBS: usize = 200;
    let input: String = (0..JOBS)
        .map(|i| format!("k{i}\techo up >> \"$D/up\"; sleep 3\n"))
        .collect();
    let running = Run::new()
        .scratch(&scratch)
        .args([
            "--containment",
            "process-group",
            "-j",
            "200",
            "--grace",
            "1",
        ])
        .stdin(input)
        .spawn();
    assert!(
        wait_until(Duration::from_secs(20), || scratch.exists("up")
            && scratch.read("up").lines().count() == JOBS),
        "the jobs did not all start"
    );
    running.signal(Signal::SIGINT);
    let out = running.wait();
    out.code(130);
    let report = out.report();
    assert_eq!(report.jobs.len(), JOBS, "{}", out.stderr());
    for job in &report.jobs {
        assert_eq!(job.result(), ("interrupted", Some("shutdown")), "{job:?}");
        assert_eq!(job.signal.as_deref(), Some("SIGINT"), "{job:?}");
    }
}

#[test]
fn a_job_that_ended_as_its_timeout_came_keeps_its_own_outcome() {
    // Deadlines of a millisecond: many of these jobs end right as their timeout's stop is
    // sent. A stop that finds the job's processes gone, or its shell's exit under way, stops
    // nothing; only an exit that begins in the very moment the stop is sent can still be
    // taken as stopped.
    let jobs = 200;
    let input: String = (0..jobs).map(|i| format!("k{i}\techo {i}\n")).collect();
    let out = Run::new()
        .args(["-j", "4", "--timeout", "0.001"])
        .stdin(input)
        .run();
    let report = out.report();
    assert_eq!(report.jobs.len(), jobs);
    for job in &report.jobs {
        match job.result() {
            ("succeeded", None) => assert_eq!(job.exit_code, Some(0), "{job:?}"),
            ("interrupted", Some("timeout")) => {}
            _ => panic!("{job:?}"),
        }
    }
    let stopped_but_ended_on_their_own = report
        .jobs
        .iter()
        .filter(|job| job.reason.as_deref() == Some("timeout") && job.signal.is_none())
        .count();
    assert!(
        stopped_but_ended_on_their_own <= jobs / 20,
        "{stopped_but_ended_on_their_own} of {jobs} jobs were taken as stopped by their timeout \
         but exited on their own\n{}",
        out.dump()
    );
}
