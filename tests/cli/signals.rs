//! SPEC §4: the first SIGINT/SIGTERM/SIGHUP/SIGQUIT stops gracefully, a second one kills, and
//! lanes exits 128+N after every job's group is empty; no other signal ends lanes without
//! stopping its jobs, and a stop signal in lanes' first moments is not lost.

use std::io::Write;
use std::os::unix::process::CommandExt as _;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(10);

/// A job that logs each INT, TERM, HUP and QUIT it gets to `$D/sig-KEY`, never exits by
/// itself.
fn stubborn_job() -> &'static str {
    "for s in INT TERM HUP QUIT; do trap \"echo $s >> \\\"\\$D/sig-$LANES_KEY\\\"\" $s; done; \
     touch \"$D/up-$LANES_KEY\"; while :; do sleep 0.05; done"
}

fn first_signal_stops_gracefully(signal: Signal, name: &str, status: i32) {
    let scratch = Scratch::new();
    let mut running = Run::new()
        .scratch(&scratch)
        .args(["-j", "2", "--grace", "1"])
        .stdin_piped()
        .spawn();
    let input = format!(
        "a\t{job}\nb\t{job}\na\ttouch \"$D/ran-3\"\nc\ttouch \"$D/ran-4\"\n",
        job = stubborn_job()
    );
    running.stdin().write_all(input.as_bytes()).unwrap();
    running.stdin().flush().unwrap();
    // Stdin stays open: after the signal lanes stops reading and ends anyway.
    scratch.wait_for("up-a", WAIT);
    scratch.wait_for("up-b", WAIT);
    running.signal(signal);
    let out = running.wait();
    out.code(status);
    for seq in [1, 2] {
        let job = out.job(seq);
        assert_eq!(job.result(), ("interrupted", Some("shutdown")), "{job:?}");
        assert!(job.started, "{job:?}");
        // The jobs ignore the signal: SIGKILL after the grace period.
        assert_eq!(job.signal.as_deref(), Some("SIGKILL"), "{job:?}");
        let key = job.key.as_deref().unwrap();
        assert_eq!(
            scratch.lines(&format!("sig-{key}")),
            [name],
            "job {key} gets the signal lanes got, exactly once"
        );
    }
    for seq in [3, 4] {
        let job = out.job(seq);
        assert_eq!(job.result(), ("interrupted", Some("shutdown")), "{job:?}");
        assert!(!job.started, "{job:?}");
    }
    assert!(!scratch.exists("ran-3") && !scratch.exists("ran-4"));
    assert_eq!(out.report().summary.interrupted, 4);
    assert!(out.elapsed < Duration::from_secs(15), "{:?}", out.elapsed);
}

#[test]
fn sigint_stops_gracefully_and_exits_130() {
    first_signal_stops_gracefully(Signal::SIGINT, "INT", 130);
}

#[test]
fn sigterm_stops_gracefully_and_exits_143() {
    first_signal_stops_gracefully(Signal::SIGTERM, "TERM", 143);
}

#[test]
fn sighup_stops_gracefully_and_exits_129() {
    first_signal_stops_gracefully(Signal::SIGHUP, "HUP", 129);
}

#[test]
fn sigquit_stops_gracefully_and_exits_131() {
    // Ctrl-\ reaches only lanes (its jobs have groups of their own): it must not die of it.
    first_signal_stops_gracefully(Signal::SIGQUIT, "QUIT", 131);
}

#[test]
fn sigxcpu_stops_gracefully_the_jobs_get_sigterm_and_lanes_exits_152() {
    // lanes' own CPU-time limit: no concern of the jobs, which are stopped with SIGTERM.
    first_signal_stops_gracefully(Signal::SIGXCPU, "TERM", 152);
}

#[test]
fn signals_that_would_end_lanes_by_default_change_nothing() {
    let scratch = Scratch::new();
    let running = Run::new()
        .scratch(&scratch)
        .stdin(
            "k\t: > \"$D/up\"; while [ ! -e \"$D/go\" ]; do sleep 0.02; done; echo done\n\
             k\twhile IFS= read -r l; do case $l in SigPnd*|ShdPnd*|SigBlk*|SigIgn*) echo \"$l\";; esac; \
             done < /proc/$$/status\n",
        )
        .spawn();
    scratch.wait_for("up", WAIT);
    let pid = Pid::from_raw(running.pid());
    for signal in [
        Signal::SIGUSR2,
        Signal::SIGALRM,
        Signal::SIGVTALRM,
        Signal::SIGPROF,
        Signal::SIGIO,
        Signal::SIGSYS,
        Signal::SIGPIPE,
        Signal::SIGXFSZ,
        Signal::SIGPWR,
        Signal::SIGSTKFLT,
    ] {
        nix::sys::signal::kill(pid, signal).unwrap();
    }
    for realtime in [34, 40, 64] {
        // SAFETY: a plain kill(2) of lanes' pid.
        assert_eq!(unsafe { nix::libc::kill(pid.as_raw(), realtime) }, 0);
    }
    scratch.write("go", "");
    let out = running.wait();
    out.code(0);
    assert_eq!(out.job(1).result(), ("succeeded", None), "{}", out.dump());
    assert!(out.stdout().contains("done"), "{}", out.dump());
    // lanes holds the signals it blocks pending; a job started afterwards has none of them
    // pending, blocked or ignored.
    let stdout = out.stdout();
    let sets: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("[k] "))
        .filter(|l| l.contains(":\t"))
        .collect();
    assert_eq!(sets.len(), 4, "{}", out.dump());
    for line in sets {
        let (_, hex) = line.split_once(":\t").unwrap();
        assert_eq!(
            u64::from_str_radix(hex.trim(), 16),
            Ok(0),
            "{line}\n{}",
            out.dump()
        );
    }
}

#[test]
fn sigusr1_writes_a_status_of_the_running_jobs_to_stderr() {
    let scratch = Scratch::new();
    let running = Run::new()
        .scratch(&scratch)
        .wrapper("exec 2>\"$D/stderr\"")
        .args(["-j", "2"])
        .stdin(
            "build\t: > \"$D/up-1\"; while [ ! -e \"$D/go\" ]; do sleep 0.02; done\n\
             test\t: > \"$D/up-2\"; while [ ! -e \"$D/go\" ]; do sleep 0.02; done\n\
             later\ttrue\n",
        )
        .spawn();
    scratch.wait_for("up-1", WAIT);
    scratch.wait_for("up-2", WAIT);
    running.signal(Signal::SIGUSR1);
    assert!(
        wait_until(WAIT, || scratch.read("stderr").contains("seq 2 [test]")),
        "no status came: {}",
        scratch.read("stderr")
    );
    // The run goes on as if nothing came.
    scratch.write("go", "");
    let out = running.wait();
    out.code(0);
    assert_eq!(out.report().summary.succeeded, 3, "{}", out.dump());
    let stderr = scratch.read("stderr");
    assert!(
        stderr.contains("lanes: status after ") && stderr.contains(": 2 running, 1 queued"),
        "{}",
        out.dump()
    );
    for line in ["  seq 1 [build] running ", "  seq 2 [test] running "] {
        assert!(stderr.contains(line), "no {line:?}\n{}", out.dump());
    }
}

/// A running job whose every process is stopped (here by SIGSTOP) is said so in the status,
/// as the display says it: it will not end by itself.
#[test]
fn sigusr1_s_status_says_which_running_job_is_stopped() {
    let scratch = Scratch::new();
    let running = Run::new()
        .scratch(&scratch)
        .wrapper("exec 2>\"$D/stderr\"")
        .args(["-j", "2", "--containment", "process-group"])
        .stdin(
            "held\techo $$ > \"$D/pid\"; kill -STOP $$\n\
             free\t: > \"$D/up\"; while [ ! -e \"$D/go\" ]; do sleep 0.02; done\n",
        )
        .spawn();
    scratch.wait_for("up", WAIT);
    scratch.wait_for("pid", WAIT);
    let held = scratch.pid("pid");
    assert!(wait_until(WAIT, || state(held) == Some('T')));
    running.signal(Signal::SIGUSR1);
    assert!(
        wait_until(WAIT, || scratch.read("stderr").contains("seq 2 [free]")),
        "no status came: {}",
        scratch.read("stderr")
    );
    // The job lanes started, continued by its pid.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(held), Signal::SIGCONT).unwrap();
    scratch.write("go", "");
    let out = running.wait();
    out.code(0);
    let stderr = scratch.read("stderr");
    assert!(
        stderr.contains(": 2 running (1 of them stopped), 0 queued"),
        "{stderr}"
    );
    assert!(
        stderr.contains("  seq 1 [held] running ") && stderr.contains(", STOPPED ("),
        "{stderr}"
    );
}

/// Whether `pid` blocks or catches SIGINT now (`SigBlk`, `SigCgt` in `/proc/PID/status`):
/// lanes blocks it from its first instruction until its handler stands.
pub(crate) fn blocks_or_catches_sigint(pid: i32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let has_sigint = |field: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .is_some_and(|mask| mask & (1 << (Signal::SIGINT as i32 - 1)) != 0)
    };
    has_sigint("SigBlk:") || has_sigint("SigCgt:")
}

/// Whether `pid` runs lanes now (its wrapper has exec'd it).
pub(crate) fn runs_lanes(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim() == "lanes")
}

/// How a try sends its early SIGINT.
#[derive(Clone, Copy, Debug)]
enum Early {
    /// lanes inherits SIGINT blocked, and it is sent as soon as lanes' pid exists: it is
    /// pending before lanes' first instruction, and must not stay pending for ever.
    InheritedBlocked,
    /// Sent the moment lanes' own code has run (SIGINT blocked or caught): in the window
    /// between the first instruction and the handler.
    FirstInstruction,
}

/// Starts lanes `tries` times and stops it with a SIGINT at its very start, each way in turn:
/// every time it must stop its jobs and exit 130 with a whole report.
fn sigint_at_once(tries: usize, wrapper: Option<&str>) {
    for attempt in 0..tries {
        let early = if attempt % 2 == 0 {
            Early::InheritedBlocked
        } else {
            Early::FirstInstruction
        };
        let mut run = Run::new()
            .args(["-j", "2", "--grace", "20"])
            .stdin("a\texec sleep 30\nb\texec sleep 30\nc\ttrue\n");
        if let Some(prefix) = wrapper {
            run = run.wrapper(prefix);
        }
        // Without a wrapper, the SIGINT is pending before lanes' first instruction (sent before
        // its exec); a wrapper's own `trap` would discard a pending one, so then it is sent
        // once lanes runs, still blocked, which may be after lanes has unblocked it.
        let pending_at_exec = matches!(early, Early::InheritedBlocked) && wrapper.is_none();
        if pending_at_exec {
            run = run.pending(&[Signal::SIGINT]);
        } else if let Early::InheritedBlocked = early {
            run = run.blocking(&[Signal::SIGINT]);
        }
        let running = run.spawn();
        let started = Instant::now();
        let ready = |pid| match early {
            // A wrapper's own `trap` would discard a pending SIGINT: lanes must run first.
            Early::InheritedBlocked => wrapper.is_none() || runs_lanes(pid),
            Early::FirstInstruction => runs_lanes(pid) && blocks_or_catches_sigint(pid),
        };
        while !ready(running.pid()) {
            assert!(
                started.elapsed() < WAIT,
                "try {attempt}: lanes never started"
            );
            std::hint::spin_loop();
        }
        if !pending_at_exec {
            running.signal(Signal::SIGINT);
        }
        let out = running.wait();
        assert_eq!(out.code, 130, "try {attempt} ({early:?})\n{}", out.dump());
        // Whole (the harness parsed it); input not read before the signal is never read.
        let report = out.report();
        assert!(report.jobs.len() <= 3, "try {attempt}\n{}", out.dump());
        for job in &report.jobs {
            assert_eq!(
                job.result(),
                ("interrupted", Some("shutdown")),
                "try {attempt} ({early:?}): {job:?}"
            );
            if pending_at_exec {
                // The signal came before lanes ran: nothing starts after it.
                assert!(!job.started, "try {attempt}: {job:?}");
            }
        }
        assert!(
            out.elapsed < Duration::from_secs(10),
            "try {attempt} ({early:?}): a job waited out the grace\n{}",
            out.dump()
        );
    }
}

#[test]
fn a_sigint_in_lanes_first_moments_stops_the_run_with_a_whole_report() {
    sigint_at_once(50, None);
}

#[test]
fn an_early_sigint_is_not_lost_when_lanes_inherits_it_ignored() {
    // A non-interactive shell starts background commands with SIGINT ignored; lanes resets
    // it, and one that comes meanwhile waits, blocked, for the handler.
    sigint_at_once(20, Some("trap '' INT"));
}

#[test]
fn a_stop_signal_after_every_job_ended_leaves_the_exit_status_to_the_jobs() {
    // The job succeeds but leaves a process that escaped it (no environment, a session of
    // its own) and ignores SIGTERM: lanes waits the grace for it after the last record. A
    // SIGTERM then kills it at once, and the status stays the jobs' (0), as when a stop
    // signal ends the wait for a slow reader of the output.
    let scratch = Scratch::new();
    let running = Run::new()
        .scratch(&scratch)
        .args(["--containment", "process-group", "--grace", "30"])
        .stdin(
            "a\tenv -i D=\"$D\" setsid sh -c 'trap \"\" TERM; echo $$ > \"$D/escaped\"; \
             while :; do sleep 0.05; done' </dev/null >/dev/null 2>&1 & \
             while [ ! -s \"$D/escaped\" ]; do sleep 0.01; done\n",
        )
        .spawn();
    assert!(
        wait_until(WAIT, || running
            .report_so_far()
            .contains("\"type\":\"job\"")),
        "the job never ended"
    );
    let escaped = scratch.pid("escaped");
    assert!(alive(escaped), "the escaped process is already gone");
    let sent = Instant::now();
    running.signal(Signal::SIGTERM);
    let out = running.wait();
    out.code(0);
    assert!(sent.elapsed() < Duration::from_secs(10), "{}", out.dump());
    assert_eq!(out.job(1).result(), ("succeeded", None), "{}", out.dump());
    assert!(!alive(escaped), "the escaped process outlived lanes");
}

#[test]
fn jobs_that_obey_the_signal_end_without_waiting_for_the_grace_period() {
    // The marker is written by a builtin and the shell then becomes `sleep`: a shell waiting
    // for a foreground child that exits normally would otherwise survive the one SIGINT.
    let scratch = Scratch::new();
    let running = Run::new()
        .scratch(&scratch)
        .args(["-j", "2", "--grace", "20"])
        .stdin(
            "a\techo $$ > \"$D/pid-a\"; : > \"$D/up-a\"; exec sleep 30\n\
             b\techo $$ > \"$D/pid-b\"; : > \"$D/up-b\"; exec sleep 30\n",
        )
        .spawn();
    scratch.wait_for("up-a", WAIT);
    scratch.wait_for("up-b", WAIT);
    let sent = Instant::now();
    running.signal(Signal::SIGINT);
    let out = running.wait();
    out.code(130);
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "{:?}\n{}",
        sent.elapsed(),
        out.dump()
    );
    for (seq, key) in [(1, "a"), (2, "b")] {
        let job = out.job(seq);
        assert_eq!(job.result(), ("interrupted", Some("shutdown")), "{job:?}");
        assert_eq!(job.signal.as_deref(), Some("SIGINT"), "{job:?}");
        assert!(!alive(scratch.pid(&format!("pid-{key}"))));
    }
}

#[test]
fn background_processes_that_ignore_sigint_get_sigterm_at_once() {
    // A non-interactive shell starts `&` processes with SIGINT ignored: when the shell itself
    // has exited, lanes terminates the rest of the group without waiting out the grace.
    let scratch = Scratch::new();
    let running = Run::new()
        .scratch(&scratch)
        .args(["--grace", "20"])
        .stdin("k\tsleep 30 & echo $! > \"$D/bg\"; : > \"$D/up\"; wait\n")
        .spawn();
    scratch.wait_for("up", WAIT);
    let sent = Instant::now();
    running.signal(Signal::SIGINT);
    let out = running.wait();
    out.code(130);
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "lanes waited {:?} for a background process",
        sent.elapsed()
    );
    assert_eq!(out.job(1).result(), ("interrupted", Some("shutdown")));
    assert!(!alive(scratch.pid("bg")));
}

#[test]
fn a_second_signal_kills_every_job_at_once() {
    let scratch = Scratch::new();
    let running = Run::new()
        .scratch(&scratch)
        .args(["-j", "2", "--grace", "30"])
        .stdin(format!("a\t{}\nb\t{}\n", stubborn_job(), stubborn_job()))
        .spawn();
    scratch.wait_for("up-a", WAIT);
    scratch.wait_for("up-b", WAIT);
    running.signal(Signal::SIGINT);
    assert!(
        wait_until(WAIT, || scratch.exists("sig-a") && scratch.exists("sig-b")),
        "the jobs never got the first SIGINT"
    );
    let second = Instant::now();
    running.signal(Signal::SIGINT);
    let out = running.wait();
    out.code(130);
    assert!(
        second.elapsed() < Duration::from_secs(5),
        "a second signal must not wait for the 30 s grace: {:?}",
        second.elapsed()
    );
    for seq in [1, 2] {
        let job = out.job(seq);
        assert_eq!(job.result(), ("interrupted", Some("shutdown")), "{job:?}");
        assert_eq!(job.signal.as_deref(), Some("SIGKILL"), "{job:?}");
    }
    assert_eq!(scratch.lines("sig-a"), ["INT"]);
}

#[test]
fn a_job_already_stopping_for_its_timeout_keeps_reason_timeout() {
    let scratch = Scratch::new();
    scratch.write(
        "m.toml",
        format!(
            "[[job]]\nkey = \"a\"\ntimeout = \"0.5s\"\ncmd = '{}'\n\n\
             [[job]]\nkey = \"b\"\ncmd = ': > \"$D/up-b\"; exec sleep 30'\n",
            stubborn_job()
        ),
    );
    let running = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .args(["-j", "2", "--grace", "2", "m.toml"])
        .spawn();
    // Job a ignores the timeout's SIGTERM and is in its grace period; job b runs normally.
    assert!(
        wait_until(WAIT, || scratch.lines("sig-a") == ["TERM"]),
        "job a never got the timeout's SIGTERM"
    );
    scratch.wait_for("up-b", WAIT);
    running.signal(Signal::SIGINT);
    let out = running.wait();
    out.code(130);
    let a = out.job(1);
    assert_eq!(a.result(), ("interrupted", Some("timeout")), "{a:?}");
    let b = out.job(2);
    assert_eq!(b.result(), ("interrupted", Some("shutdown")), "{b:?}");
    assert!(b.started);
}

#[test]
fn a_stop_signal_ends_every_running_jobs_whole_tree_and_starts_nothing_new() {
    // Each running job has a child started with `&`, which a non-interactive shell starts
    // with SIGINT ignored; c waits behind them. lanes is stopped three ways: Ctrl-C (SIGINT to
    // its whole process group, as a terminal sends it), SIGINT to its pid alone, and SIGTERM
    // to its pid alone (as a CI system stops a step). The long grace means the children must
    // go when their shells have: lanes may not wait it out.
    for (how, status) in [("ctrl-c", 130), ("sigint", 130), ("sigterm", 143)] {
        let scratch = Scratch::new();
        let running = Run::new()
            .scratch(&scratch)
            .args(["-j", "2", "--grace", "20"])
            .stdin(
                "a\tsh -c 'echo $$ > \"$D/pid-a\"; : > \"$D/up-a\"; exec sleep 30' & wait\n\
                 b\tsleep 30 & echo $! > \"$D/pid-b\"; : > \"$D/up-b\"; wait\n\
                 c\ttouch \"$D/ran-c\"\n",
            )
            .spawn();
        scratch.wait_for("up-a", WAIT);
        scratch.wait_for("up-b", WAIT);
        let children = [scratch.pid("pid-a"), scratch.pid("pid-b")];
        let groups = children.map(|pid| {
            process_group(pid).unwrap_or_else(|| panic!("{how}: child {pid} is already gone"))
        });
        for group in groups {
            assert_ne!(
                group,
                running.pid(),
                "{how}: a job runs in lanes' process group"
            );
        }
        let sent = Instant::now();
        match how {
            "ctrl-c" => killpg(Pid::from_raw(running.pid()), Signal::SIGINT).unwrap(),
            "sigint" => running.signal(Signal::SIGINT),
            _ => running.signal(Signal::SIGTERM),
        }
        let out = running.wait();
        let took = sent.elapsed();
        out.code(status);
        assert!(
            took < Duration::from_secs(5),
            "{how}: lanes took {took:?} to stop\n{}",
            out.dump()
        );
        for (pid, group) in children.into_iter().zip(groups) {
            assert!(!alive(pid), "{how}: child {pid} outlived lanes");
            let left = group_members(group);
            assert!(left.is_empty(), "{how}: group {group} still has {left:?}");
        }
        for seq in [1, 2] {
            let job = out.job(seq);
            assert_eq!(
                job.result(),
                ("interrupted", Some("shutdown")),
                "{how}: {job:?}"
            );
            assert!(job.started, "{how}: {job:?}");
        }
        let queued = out.job(3);
        assert_eq!(queued.key.as_deref(), Some("c"));
        assert_eq!(
            queued.result(),
            ("interrupted", Some("shutdown")),
            "{how}: {queued:?}"
        );
        assert!(!queued.started, "{how}: {queued:?}");
        assert!(
            !scratch.exists("ran-c"),
            "{how}: job c started after the signal"
        );
    }
}

#[test]
fn a_second_ctrl_c_cuts_a_slow_cleanup_short_and_every_job_keeps_its_record() {
    // The job answers SIGINT and SIGTERM with a 30 s cleanup. The first Ctrl-C gives it its
    // grace period; the second kills it at once. The job queued behind it never runs.
    let scratch = Scratch::new();
    let running = Run::new()
        .scratch(&scratch)
        .args(["-j", "1", "--grace", "20"])
        .stdin(
            "slow\ttrap ': > \"$D/cleanup\"; sleep 30' INT TERM; echo $$ > \"$D/pid\"; \
             : > \"$D/up\"; while :; do sleep 0.05; done\n\
             later\ttouch \"$D/ran-later\"\n",
        )
        .spawn();
    scratch.wait_for("up", WAIT);
    let shell = scratch.pid("pid");
    let group = process_group(shell).expect("the job runs");
    let lanes = Pid::from_raw(running.pid());
    killpg(lanes, Signal::SIGINT).unwrap();
    scratch.wait_for("cleanup", WAIT);
    assert!(
        !wait_until(Duration::from_millis(500), || !alive(shell)),
        "the first Ctrl-C did not leave the job its grace period"
    );
    assert!(alive(running.pid()), "lanes exited during the grace period");
    let second = Instant::now();
    killpg(lanes, Signal::SIGINT).unwrap();
    let out = running.wait();
    out.code(130);
    assert!(
        second.elapsed() < Duration::from_secs(5),
        "the second Ctrl-C waited {:?}",
        second.elapsed()
    );
    assert!(
        group_members(group).is_empty(),
        "the job's group outlived lanes"
    );
    let slow = out.job(1);
    assert_eq!(slow.result(), ("interrupted", Some("shutdown")), "{slow:?}");
    assert_eq!(slow.signal.as_deref(), Some("SIGKILL"), "{slow:?}");
    let later = out.job(2);
    assert_eq!(
        later.result(),
        ("interrupted", Some("shutdown")),
        "{later:?}"
    );
    assert!(!later.started, "{later:?}");
    assert!(!scratch.exists("ran-later"));
}

#[test]
fn after_ctrl_c_each_job_has_one_record_saying_whether_it_finished() {
    // Twelve jobs in three keys, two slots. The first two finish; every later one blocks once
    // it starts. Ctrl-C comes when two have finished and two are blocked: eight never start.
    let scratch = Scratch::new();
    let job = "if [ $LANES_SEQ -le 2 ]; then touch \"$D/done-$LANES_SEQ\"; \
               else : > \"$D/up-$LANES_SEQ\"; exec sleep 30; fi";
    let input: String = (0..12)
        .map(|i| format!("{}\t{job}\n", ["a", "b", "c"][i % 3]))
        .collect();
    let running = Run::new()
        .scratch(&scratch)
        .args(["-j", "2"])
        .stdin(input)
        .spawn();
    let markers = |prefix: &str| {
        (1..=12)
            .filter(|seq| scratch.exists(&format!("{prefix}-{seq}")))
            .count()
    };
    assert!(
        wait_until(WAIT, || markers("done") == 2 && markers("up") == 2),
        "two jobs did not finish and two block"
    );
    killpg(Pid::from_raw(running.pid()), Signal::SIGINT).unwrap();
    let out = running.wait();
    out.code(130);
    // The report parsed whole: run record first, summary last counting the job records.
    let report = out.report();
    assert_eq!(report.jobs.len(), 12, "{}", out.dump());
    for seq in 1..=12 {
        let job = out.job(seq);
        if scratch.exists(&format!("done-{seq}")) {
            assert_eq!(job.result(), ("succeeded", None), "{job:?}");
        } else {
            assert_eq!(job.result(), ("interrupted", Some("shutdown")), "{job:?}");
            let ran = scratch.exists(&format!("up-{seq}"));
            assert_eq!(job.started, ran, "started only if it ran: {job:?}");
        }
    }
    // Within a key, what succeeded comes before what did not.
    for key in ["a", "b", "c"] {
        let succeeded: Vec<bool> = report
            .by_key(key)
            .iter()
            .map(|job| job.outcome == "succeeded")
            .collect();
        assert!(
            succeeded.windows(2).all(|pair| pair[0] || !pair[1]),
            "key {key}: {succeeded:?}"
        );
    }
    let s = &report.summary;
    assert_eq!((s.succeeded, s.interrupted, s.failed), (2, 10, 0));
}

#[test]
fn a_job_killed_by_a_real_time_signal_is_recorded_and_its_lane_moves_on() {
    // Signals 32..=64 have no name in most libraries: a status decoded through one that knows
    // only the named signals would lose the job's end.
    for containment in ["auto", "process-group"] {
        let out = Run::new()
            .args(["--containment", containment])
            .stdin("k\tkill -40 $$; echo survived\nk\techo next\n")
            .run();
        out.code(1);
        let killed = out.job(1);
        assert_eq!(
            killed.result(),
            ("failed", Some("killed")),
            "--containment {containment}\n{}",
            out.dump()
        );
        assert_eq!(killed.signal.as_deref(), Some("SIG40"), "{}", out.dump());
        assert_eq!(out.job(2).result(), ("succeeded", None), "{}", out.dump());
        assert!(!out.stdout().contains("survived"), "{}", out.dump());
        assert!(out.stdout().contains("[k] next"), "{}", out.dump());
    }
}

#[test]
fn signals_lanes_inherits_blocked_that_it_needs_are_unblocked() {
    // SIGWINCH blocked would take the display's resizing. lanes blocks SIGCHLD and SIGTSTP
    // itself and reads them from a signalfd: that it still learns that its jobs ended is the
    // second job of the key, which starts only once the first is reaped; that an inherited
    // blocked SIGTSTP still stops lanes is in `job_control.rs`. (SIGCONT continues a process
    // whether blocked or not.) The job prints lanes'
    // own mask (its parent's, `$PPID`): its event loop's, which blocks every signal it can
    // for the moment of a spawn, and may still do so just after the job's exec (it is woken
    // then, and may not have run yet). The job reads the mask again until it is not that one.
    let out = Run::new()
        .wrapper(
            "exec python3 -c 'import os, signal, sys; \
             signal.pthread_sigmask(signal.SIG_BLOCK, \
             {signal.SIGCHLD, signal.SIGTSTP, signal.SIGWINCH, signal.SIGCONT}); \
             os.execv(sys.argv[1], sys.argv[1:])' \"$0\" \"$@\"",
        )
        .stdin(
            "k\tfor i in $(seq 200); do m=$(grep '^SigBlk' /proc/$PPID/status); \
             case $m in *fffffffffffbfeff) sleep 0.01;; *) break;; esac; done; echo \"$m\"\n\
             k\techo second\n",
        )
        .run();
    out.code(0);
    assert!(out.stdout().contains("[k] second"), "{}", out.dump());
    let blocked = out
        .stdout()
        .lines()
        .find_map(|l| l.strip_prefix("[k] SigBlk:\t"))
        .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
        .unwrap_or_else(|| panic!("no mask\n{}", out.dump()));
    assert_eq!(
        blocked & (1 << (Signal::SIGWINCH as i32 - 1)),
        0,
        "SIGWINCH blocked in lanes (SigBlk {blocked:#x})\n{}",
        out.dump()
    );
}

/// Sends `signal` to lanes' process group (`pid`'s) over and over, a fraction of a
/// millisecond apart, until `done` is set or lanes is gone.
fn signal_group_until(
    pid: i32,
    signal: Signal,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut sent = 0;
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            if killpg(Pid::from_raw(pid), signal).is_err() {
                break;
            }
            sent += 1;
            std::thread::sleep(Duration::from_micros(200));
        }
        sent
    })
}

#[test]
fn a_signal_sent_to_lanes_process_group_never_reaches_a_job_still_starting() {
    // A job's process is in lanes' group until it takes its own: what is sent to lanes' group
    // meanwhile is lanes' business. SIGUSR2 does nothing to lanes (blocked) and would end a
    // job's process that kept it pending into its exec. The signals start once lanes runs
    // jobs: one that comes before lanes' first instruction ends it, as any program.
    let scratch = Scratch::new();
    let jobs: String = std::iter::once("up\t: > \"$D/up\"\n".to_string())
        .chain((2..=3000).map(|n| format!("k{}\ttrue\n", n % 16)))
        .collect();
    let running = Run::new()
        .scratch(&scratch)
        .args(["-j", "4"])
        .stdin(jobs)
        .spawn();
    scratch.wait_for("up", WAIT);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let storm = signal_group_until(running.pid(), Signal::SIGUSR2, done.clone());
    let out = running.wait();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let sent = storm.join().unwrap();
    assert!(sent > 100, "only {sent} signals were sent during the run");
    let report = out.report();
    let hit: Vec<_> = report
        .jobs
        .iter()
        .filter(|job| job.result() != ("succeeded", None))
        .collect();
    assert!(
        hit.is_empty(),
        "{} of 3000 jobs did not succeed ({sent} SIGUSR2 sent to lanes' group), first: {:?}",
        hit.len(),
        hit.first()
    );
    out.code(0);
}

#[test]
fn a_stop_reads_no_more_input_however_fast_it_comes() {
    // A producer that never ends (as `yes`) and a queue of 5: after Ctrl-C, only lines lanes
    // had already read get records. Its read buffer holds at most 64 KiB, so 1 KiB lines make
    // at most about 64 of them, plus what its queue and input channel hold.
    let scratch = Scratch::new();
    let events_file = scratch.join("events.jsonl");
    let mut running = Run::new()
        .scratch(&scratch)
        .args(["-j", "1", "--max-queued", "5", "--events"])
        .arg(&events_file)
        .stdin_piped()
        .spawn();
    let mut stdin = running.take_stdin();
    let padding = "x".repeat(1000);
    let line = format!("k\ttouch \"$D/up\"; exec sleep 30 # {padding}\n");
    let producer = std::thread::spawn(move || {
        let mut sent = 0u64;
        while stdin.write_all(line.as_bytes()).is_ok() {
            sent += 1;
        }
        sent
    });
    scratch.wait_for("up", WAIT);
    killpg(Pid::from_raw(running.pid()), Signal::SIGINT).unwrap();
    let out = running.wait();
    let sent = producer.join().unwrap();
    out.code(130);
    let report = out.report();
    let records = report.jobs.len();
    assert!(
        records <= 200,
        "{records} records after one stop signal ({sent} lines written)"
    );
    assert_eq!(out.job(1).result(), ("interrupted", Some("shutdown")));
    assert!(report.jobs.iter().all(|job| job.seq == 1 || !job.started));
    // Every record is a job of the input, in its order: none lost between them.
    let mut seqs: Vec<u64> = report.jobs.iter().map(|job| job.seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=records as u64).collect::<Vec<_>>());
    // Each record has one `ended` event; only the jobs admitted (the one running and the five
    // the queue holds) were told `queued`: the lines read as the stop came never were.
    let events = crate::records::events(&events_file);
    let mut ended: Vec<u64> = crate::records::of_kind(&events, "ended")
        .into_iter()
        .map(|event| crate::records::int(event, "seq"))
        .collect();
    ended.sort_unstable();
    assert_eq!(ended, seqs, "one ended event per record");
    let queued: Vec<u64> = crate::records::of_kind(&events, "queued")
        .into_iter()
        .map(|event| crate::records::int(event, "seq"))
        .collect();
    assert_eq!(queued, (1..=queued.len() as u64).collect::<Vec<_>>());
    assert!(
        (1..=6).contains(&queued.len()),
        "{} jobs told queued with a queue of 5",
        queued.len()
    );
}

#[test]
fn the_summary_shows_the_exit_status_of_an_interrupted_job_that_exited_by_itself() {
    // The job traps the timeout's SIGTERM and exits 7: interrupted, with an exit status that
    // the summary shows as it does a failed job's.
    let out = Run::new()
        .args(["--timeout", "0.3"])
        .stdin("a\ttrap 'exit 7' TERM; while :; do sleep 0.05; done\n")
        .run();
    out.code(1);
    let job = out.job(1);
    assert_eq!(job.result(), ("interrupted", Some("timeout")), "{job:?}");
    assert_eq!(job.exit_code, Some(7), "{}", out.dump());
    assert!(
        out.stderr().contains("seq 1 [a] timeout (exit 7)"),
        "{}",
        out.dump()
    );
}

#[test]
fn after_ctrl_c_lanes_dies_by_sigint_so_a_shell_loop_running_it_stops_too() {
    // bash, in a process group of its own (a terminal's foreground job), runs lanes three
    // times in a loop; Ctrl-C (SIGINT to the group) comes during the first run. bash goes on
    // after a child that caught SIGINT and exited 130; it stops after one that died by it.
    let scratch = Scratch::new();
    let script = format!(
        "for i in 1 2 3; do {} --report \"$D/r$i\" ::: 'touch \"$D/up\"; exec sleep 30'; \
         echo \"$i $?\" >> \"$D/after\"; done",
        sh_quote(BIN)
    );
    let mut loop_shell = std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .env("D", scratch.path())
        .process_group(0)
        .spawn()
        .unwrap();
    let group = Pid::from_raw(loop_shell.id() as i32);
    scratch.wait_for("up", WAIT);
    killpg(group, Signal::SIGINT).unwrap();
    let ended = wait_until(WAIT, || loop_shell.try_wait().unwrap().is_some());
    if !ended {
        let _ = killpg(group, Signal::SIGKILL);
        let _ = loop_shell.wait();
    }
    assert!(
        ended,
        "the loop went on after Ctrl-C: {:?}",
        scratch.lines("after")
    );
    assert!(!scratch.exists("after"), "{:?}", scratch.lines("after"));
    assert!(!scratch.exists("r2"), "a second run started");
    // The first run stopped cleanly, and said 130.
    let report = Report::must_parse(&scratch.read("r1"));
    assert_eq!(report.summary.exit_code, 130);
    assert_eq!(report.jobs.len(), 1);
}

/// A job between tries when the run stops (`--retries` with tries left, no delay: its try
/// ends by itself as the stop comes, or it waits for its next) is recorded stopped before its
/// retry, `interrupted`/`shutdown`, never `failed` by a try that would have been retried.
/// Three runs: the stop meets the job at a different point of its tries each time.
#[test]
fn a_job_between_tries_when_the_run_stops_is_interrupted_not_failed() {
    for _ in 0..3 {
        let scratch = Scratch::new();
        let run = Run::new()
            .scratch(&scratch)
            .args(["--retries", "100000", "--output", "none"])
            .stdin("k\techo x >> \"$D/tries\"; exit 1\n")
            .spawn();
        assert!(
            wait_until(Duration::from_secs(10), || scratch.lines("tries").len()
                >= 5),
            "the job never tried five times"
        );
        run.signal(Signal::SIGINT);
        let out = run.wait();
        out.code(130);
        let job = out.job(1);
        assert_eq!(
            job.result(),
            ("interrupted", Some("shutdown")),
            "{}",
            out.dump()
        );
        assert!(job.attempts >= 5, "{}", out.dump());
        assert_eq!(out.report().summary.failed, 0, "{}", out.dump());
    }
}
