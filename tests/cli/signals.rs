//! SPEC §4: the first SIGINT/SIGTERM/SIGHUP stops gracefully, a second one kills, and lanes
//! exits 128+N after every job's group is empty.

use std::io::Write;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(10);

/// A job that logs each INT, TERM and HUP it gets to `$D/sig-KEY`, never exits by itself.
fn stubborn_job() -> &'static str {
    "for s in INT TERM HUP; do trap \"echo $s >> \\\"\\$D/sig-$LANES_KEY\\\"\" $s; done; \
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
