//! Stopped processes (SPEC §8): whatever lanes signals to end it hears the signal, because
//! SIGCONT follows. (Ctrl-Z and `fg` in a real terminal are in `terminal.rs`.)

use std::time::Duration;

use crate::support::*;

#[test]
fn a_stopped_process_that_escaped_its_job_hears_its_sigterm() {
    let scratch = Scratch::new();
    // It clears its environment and leaves the session: only the last sweep finds it. It
    // stops itself; on SIGTERM it leaves a mark and exits.
    scratch.write(
        "escapee.sh",
        "trap 'touch \"$D/termed\"; exit 0' TERM\n\
         echo $$ > \"$D/esc.tmp\"; mv \"$D/esc.tmp\" \"$D/esc\"\n\
         kill -STOP $$\n\
         sleep 30\n",
    );
    let out = Run::new()
        .scratch(&scratch)
        .args(["--containment", "process-group", "--grace", "10"])
        .stdin(
            "k\tsetsid env -i D=\"$D\" sh \"$D/escapee.sh\" </dev/null >/dev/null 2>&1 & \
             n=0; until [ -e \"$D/esc\" ] && grep -q '^State:.*T' \"/proc/$(cat \"$D/esc\")/status\"; \
             do n=$((n+1)); [ $n -gt 1000 ] && exit 97; sleep 0.01; done\n",
        )
        .run();
    out.code(0);
    let pid = scratch.pid("esc");
    assert!(
        scratch.exists("termed"),
        "the stopped escapee never heard SIGTERM\n{}",
        out.dump()
    );
    assert!(!alive(pid));
    // Well before the grace period would have run out.
    assert!(out.elapsed < Duration::from_secs(8), "{:?}", out.elapsed);
}

#[test]
fn the_events_tell_when_a_job_is_found_stopped_and_running_again() {
    let scratch = Scratch::new();
    let events = scratch.join("events");
    let running = Run::new()
        .scratch(&scratch)
        .arg("--events")
        .arg(&events)
        .stdin(format!(
            "k\techo $$ > \"$D/pid\"; kill -STOP $$; {}\n",
            await_file("go")
        ))
        .spawn();
    let seen = |what: &str| {
        std::fs::read_to_string(&events)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .find(|event| event["type"] == what)
    };
    // Checked once a second.
    assert!(wait_until(Duration::from_secs(10), || seen("stopped").is_some()));
    let stopped = seen("stopped").unwrap();
    assert_eq!(stopped["seq"], 1);
    assert_eq!(stopped["key"], "k");
    assert_eq!(stopped["why"], "SIGSTOP");
    assert!(seen("continued").is_none());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(scratch.pid("pid")),
        nix::sys::signal::Signal::SIGCONT,
    )
    .unwrap();
    assert!(wait_until(Duration::from_secs(10), || seen("continued").is_some()));
    assert_eq!(seen("continued").unwrap()["seq"], 1);
    scratch.write("go", "");
    let out = running.wait();
    out.code(0);
    assert_eq!(out.job(1).result(), ("succeeded", None));
}

/// Whether the job's shell `pid` is held by a stop: stopped itself (`T`), or waiting
/// (`D`, in `vfork`, as `dash` starts a command) for a child that was stopped before its
/// `exec`.
fn held_stopped(pid: i32) -> bool {
    match state(pid) {
        Some('T') => true,
        Some('D') => std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|child| child.parse().ok())
            .any(|child| state(child) == Some('T')),
        _ => false,
    }
}

/// Whether `pid` (lanes, the test's child) is stopped, or has exited (a zombie, not yet
/// waited for, or gone).
fn stopped_or_gone(pid: i32) -> bool {
    matches!(state(pid), Some('T' | 'Z' | 'X') | None)
}

/// Ctrl-Z and `fg` as a shell makes them, over and over until lanes (`pid`, its process
/// group's leader) has exited: SIGTSTP to the group, lanes seen stopped (10 s at most, else the
/// test fails), `stopped_for`, SIGCONT to the group. Returns how many stops there were.
fn ctrl_z_and_fg_until_the_end(pid: i32, stopped_for: Duration) -> usize {
    use nix::sys::signal::{killpg, Signal};
    let group = nix::unistd::Pid::from_raw(pid);
    let mut stops = 0;
    while state(pid).is_some_and(|state| state != 'Z') {
        if killpg(group, Signal::SIGTSTP).is_err() {
            break;
        }
        assert!(
            wait_until(Duration::from_secs(10), || stopped_or_gone(pid)),
            "lanes did not stop within 10 s of SIGTSTP number {} (state {:?})",
            stops + 1,
            state(pid)
        );
        stops += 1;
        std::thread::sleep(stopped_for);
        let _ = killpg(group, Signal::SIGCONT);
        std::thread::sleep(Duration::from_millis(2));
    }
    stops
}

#[test]
fn a_ctrl_z_while_jobs_start_stops_lanes_and_a_continue_lets_the_run_finish() {
    // Ctrl-Z reaches lanes' whole process group, and a job's process is in it for a moment
    // as it starts: the Ctrl-Z must stop lanes, never that process before its exec (which
    // would hold lanes, waiting for that exec, for good).
    let jobs: String = (1..=3000).map(|n| format!("k{}\ttrue\n", n % 16)).collect();
    let running = Run::new().args(["-j", "4"]).stdin(jobs).spawn();
    let stops = ctrl_z_and_fg_until_the_end(running.pid(), Duration::ZERO);
    let out = running.wait();
    out.code(0);
    assert!(stops > 5, "only {stops} stops during the run");
    let report = out.report();
    assert_eq!(report.jobs.len(), 3000);
    assert!(report
        .jobs
        .iter()
        .all(|job| job.result() == ("succeeded", None)));
}

/// Sends lanes (`running`) `pairs` SIGTSTP and SIGCONT pairs, back to back, each to lanes'
/// pid or, where `to_group(pair)`, to its process group, `apart(pair)` after the last; after
/// every `check_every`th pair, lanes must leave state `T` within 3 s (stopped by a SIGTSTP,
/// it is continued by the SIGCONT behind it). Then stops lanes with SIGINT.
fn tstp_cont_pairs(
    running: Running,
    pairs: u64,
    to_group: impl Fn(u64) -> bool,
    apart: impl Fn(u64) -> Duration,
    check_every: u64,
) {
    use nix::sys::signal::{kill, killpg, Signal};
    use nix::unistd::Pid;
    let pid = running.pid();
    let lanes = Pid::from_raw(pid);
    for pair in 1..=pairs {
        let sent = if to_group(pair) {
            killpg(lanes, Signal::SIGTSTP).and_then(|()| killpg(lanes, Signal::SIGCONT))
        } else {
            kill(lanes, Signal::SIGTSTP).and_then(|()| kill(lanes, Signal::SIGCONT))
        };
        assert!(sent.is_ok(), "lanes ended before pair {pair}");
        std::thread::sleep(apart(pair));
        if pair % check_every == 0 {
            assert!(
                wait_until(Duration::from_secs(3), || state(pid) != Some('T')),
                "lanes stayed stopped after SIGTSTP and SIGCONT number {pair}"
            );
        }
    }
    running.signal(Signal::SIGINT);
    let out = running.wait();
    out.code(130);
}

#[test]
fn a_sigtstp_called_off_by_sigcont_before_lanes_acts_stops_nothing() {
    // `kill -TSTP` then `kill -CONT` at once, to lanes' pid or to its group, while lanes
    // reads a long input and runs jobs: lanes must not stop itself after the SIGCONT came, or
    // nothing would continue it. Continued at once, it may stop for a moment, never for long.
    let jobs: String = (1..=20_000)
        .map(|n| format!("k{}\tsleep 0.02\n", n % 64))
        .collect();
    let running = Run::new().args(["-j", "8"]).stdin(jobs).spawn();
    tstp_cont_pairs(
        running,
        150,
        |pair| pair % 2 == 0,
        |_| Duration::from_millis(10),
        1,
    );
}

#[test]
fn a_sigcont_right_behind_a_sigtstp_never_leaves_lanes_stopped() {
    // SIGTSTP and SIGCONT back to back, thousands of times and unevenly spaced (0 to 250 µs
    // apart), so that some SIGCONT comes at every moment of lanes' work on the SIGTSTP, the
    // last moment before it stops included: however late it comes, lanes must not stay
    // stopped. Checked after every 20th pair.
    let scratch = Scratch::new();
    let jobs: String = (1..=50_000)
        .map(|n| format!("k{}\ttouch \"$D/started\"; sleep 0.02\n", n % 64))
        .collect();
    let running = Run::new()
        .scratch(&scratch)
        .args(["-j", "8"])
        .stdin(jobs)
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || scratch.exists("started")));
    tstp_cont_pairs(
        running,
        3000,
        |_| false,
        |pair| Duration::from_micros((pair * 37) % 250),
        20,
    );
}

#[test]
fn a_sigtstp_stops_lanes_and_its_job_even_when_lanes_inherits_it_blocked() {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    for blocked in [false, true] {
        let scratch = Scratch::new();
        let mut run = Run::new()
            .scratch(&scratch)
            .args(["--containment", "process-group"])
            .stdin(format!("k\techo $$ > \"$D/pid\"; {}\n", await_file("go")));
        if blocked {
            run = run.blocking(&[Signal::SIGTSTP]);
        }
        let running = run.spawn();
        let pid = running.pid();
        let lanes = Pid::from_raw(pid);
        assert!(wait_until(Duration::from_secs(10), || scratch.exists("pid")));
        let job = scratch.pid("pid");
        kill(lanes, Signal::SIGTSTP).unwrap();
        assert!(
            wait_until(Duration::from_secs(10), || state(pid) == Some('T')
                && held_stopped(job)),
            "blocked {blocked}: lanes {:?}, its job {:?} after SIGTSTP",
            state(pid),
            state(job)
        );
        kill(lanes, Signal::SIGCONT).unwrap();
        assert!(
            wait_until(Duration::from_secs(10), || state(pid) != Some('T')
                && state(job) != Some('T')),
            "blocked {blocked}: lanes {:?}, its job {:?} after SIGCONT",
            state(pid),
            state(job)
        );
        scratch.write("go", "");
        let out = running.wait();
        out.code(0);
        assert_eq!(out.job(1).result(), ("succeeded", None));
    }
}

#[test]
fn a_ctrl_z_while_strict_checks_the_input_stops_lanes_at_once() {
    // With --strict nothing starts before the input ends: a producer stopped by the same
    // Ctrl-Z would never end it, so lanes must stop then, not once the check is over.
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use std::io::Write as _;
    let mut running = Run::new().arg("--strict").stdin_piped().spawn();
    let pid = running.pid();
    running.stdin().write_all(b"k\techo one\n").unwrap();
    running.stdin().flush().unwrap();
    // The check runs on a thread of its own: once it is there, lanes is checking.
    let checking = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|task| {
                std::fs::read_to_string(task.path().join("comm"))
                    .is_ok_and(|comm| comm.trim() == "lanes-strict")
            })
    };
    assert!(wait_until(Duration::from_secs(10), checking));
    kill(Pid::from_raw(pid), Signal::SIGTSTP).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || state(pid) == Some('T')),
        "lanes {:?} 10 s after SIGTSTP, its input still open",
        state(pid)
    );
    kill(Pid::from_raw(pid), Signal::SIGCONT).unwrap();
    assert!(wait_until(Duration::from_secs(10), || state(pid) != Some('T')));
    running.stdin().write_all(b"k\techo two\n").unwrap();
    running.close_stdin();
    let out = running.wait();
    out.code(0);
    assert_eq!(out.report().jobs.len(), 2);
}

#[test]
fn no_job_runs_while_lanes_is_stopped_even_one_starting_at_the_ctrl_z() {
    // Each job looks at lanes (its parent) once it runs: stopped ('T') means the job ran
    // while lanes was stopped by Ctrl-Z, which stops every job with it. Spawning threads
    // (LANES_SPAWN_THREADS) make starts that are under way when the Ctrl-Z comes.
    for threads in ["0", "2"] {
        let scratch = Scratch::new();
        let jobs: String = (1..=1500)
            .map(|n| {
                format!(
                    "k{}\tset -- $(sed 's/.*) //' /proc/$PPID/stat); \
                     [ \"$1\" = T ] && echo $LANES_SEQ >> \"$D/ran-while-stopped\"; true\n",
                    n % 16
                )
            })
            .collect();
        let running = Run::new()
            .scratch(&scratch)
            .env("LANES_SPAWN_THREADS", threads)
            .args(["-j", "8", "--containment", "process-group"])
            .stdin(jobs)
            .spawn();
        // Stopped a while each time: a job left running would look at lanes meanwhile.
        let stops = ctrl_z_and_fg_until_the_end(running.pid(), Duration::from_millis(5));
        let out = running.wait();
        out.code(0);
        assert!(stops > 5, "only {stops} stops during the run");
        assert!(
            !scratch.exists("ran-while-stopped"),
            "LANES_SPAWN_THREADS={threads}: jobs ran while lanes was stopped: {}",
            scratch.read("ran-while-stopped")
        );
    }
}

#[test]
fn a_ctrl_z_while_lanes_ends_processes_that_escaped_their_job_leaves_none_running() {
    // The escapee (its own session, an empty environment) and the process it started both
    // ignore SIGTERM; once the job has its record, lanes sweeps them: SIGTERM, then SIGKILL
    // after the grace period. Stopped meanwhile for longer than the grace period and the
    // time it allows for SIGKILL, lanes must still kill both once continued.
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let scratch = Scratch::new();
    scratch.write(
        "escapee.sh",
        "trap '' TERM\n\
         sleep 30 & echo $! > \"$D/child\"\n\
         echo $$ > \"$D/esc.tmp\"; mv \"$D/esc.tmp\" \"$D/esc\"\n\
         wait\n",
    );
    let running = Run::new()
        .scratch(&scratch)
        .args(["--containment", "process-group", "--grace", "1"])
        .stdin(
            "k\tsetsid env -i D=\"$D\" sh \"$D/escapee.sh\" </dev/null >/dev/null 2>&1 & \
             n=0; until [ -e \"$D/esc\" ]; do n=$((n+1)); [ $n -gt 1000 ] && exit 97; \
             sleep 0.01; done\n",
        )
        .spawn();
    assert!(wait_until(Duration::from_secs(10), || running
        .report_so_far()
        .contains("\"type\":\"job\"")));
    let escaped = [scratch.pid("esc"), scratch.pid("child")];
    let pid = running.pid();
    kill(Pid::from_raw(pid), Signal::SIGTSTP).unwrap();
    assert!(wait_until(Duration::from_secs(10), || state(pid) == Some('T')));
    // Longer than the grace period (1 s) and the 2 s of SIGKILL passes after it.
    std::thread::sleep(Duration::from_millis(3500));
    kill(Pid::from_raw(pid), Signal::SIGCONT).unwrap();
    let out = running.wait();
    let left: Vec<i32> = escaped.into_iter().filter(|&p| alive(p)).collect();
    for &p in &left {
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
    }
    assert!(left.is_empty(), "left running after lanes exited: {left:?}");
    out.code(0);
    assert_eq!(out.job(1).result(), ("succeeded", None));
}

#[test]
fn every_job_of_a_stopped_batch_is_told_stopped_and_running_again() {
    let scratch = Scratch::new();
    let events = scratch.join("events");
    let template = format!(
        "echo $$ > \"$D/pid\"; kill -STOP $$; {}; true {{}}",
        await_file("go")
    );
    // The batch waits for its second job (however late lanes reads that line, a busy machine
    // may let it take the first alone otherwise), and goes as soon as it is full.
    let running = Run::new()
        .scratch(&scratch)
        .no_report()
        .args([
            "--command",
            &template,
            "--batch-size",
            "2",
            "--batch-delay",
            "30s",
        ])
        .arg("--events")
        .arg(&events)
        .stdin("k\t1\nk\t2\n")
        .spawn();
    let seqs_of = |what: &str| -> Vec<u64> {
        std::fs::read_to_string(&events)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
            .filter(|event| event["type"] == what)
            .map(|event| event["seq"].as_u64().unwrap())
            .collect()
    };
    // Checked once a second.
    assert!(wait_until(Duration::from_secs(10), || seqs_of("stopped")
        .len()
        == 2));
    assert_eq!(seqs_of("stopped"), [1, 2]);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(scratch.pid("pid")),
        nix::sys::signal::Signal::SIGCONT,
    )
    .unwrap();
    assert!(wait_until(Duration::from_secs(10), || seqs_of("continued")
        .len()
        == 2));
    assert_eq!(seqs_of("continued"), [1, 2]);
    scratch.write("go", "");
    running.wait().code(0);
}
