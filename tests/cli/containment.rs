//! A job is every process it started: processes that move to another process group or session
//! (`timeout(1)`, `set -m`, `setsid`, a double fork, `setpgid`) still belong to their job. No
//! next job of the key starts while one of them lives, and none outlives the run, with
//! `--timeout`, Ctrl-C, `--cancel-in-progress` and a plain end; in cgroup mode and in the
//! process-group fallback alike.

use std::io::Write;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::records::*;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(15);

/// The ways a job's process leaves the job's process group. Each starts a process that writes
/// its pid to `$D/esc.pid` and would live 30 s.
const ESCAPES: [(&str, &str); 5] = [
    (
        "timeout(1)",
        "timeout 30 sh -c 'echo $$ > \"$D/esc.pid\"; exec sleep 30' &",
    ),
    (
        "set -m",
        "sh -c 'set -m; sh -c \"echo \\$\\$ > \\\"$D/esc.pid\\\"; exec sleep 30\" & wait' &",
    ),
    (
        "setsid",
        "setsid sh -c 'echo $$ > \"$D/esc.pid\"; exec sleep 30' &",
    ),
    (
        "double fork",
        "( setsid sh -c 'echo $$ > \"$D/esc.pid\"; exec sleep 30' & ) &",
    ),
    (
        "setpgid",
        "python3 -c 'import os,time; os.setpgid(0,0); open(os.environ[\"D\"]+\"/esc.pid\",\"w\").write(str(os.getpid())); time.sleep(30)' &",
    ),
];

/// Waits in the job until the escaped process has written its pid.
const WAIT_FOR_ESCAPEE: &str = "while [ ! -s \"$D/esc.pid\" ]; do sleep 0.01; done";

/// The key's next job: notes whether the escaped process still lives when it starts.
const CHECK: &str = "if kill -0 \"$(cat \"$D/esc.pid\")\" 2>/dev/null; then echo alive; \
                     else echo dead; fi > \"$D/check\"";

/// Whether lanes can contain jobs in cgroups here (root, or a delegated cgroup).
fn cgroups_available() -> bool {
    let out = Run::new()
        .no_report()
        .args(["--containment", "cgroup"])
        .run();
    out.code == 0
}

fn modes() -> Vec<&'static str> {
    let mut modes = vec!["process-group"];
    if cgroups_available() {
        modes.push("cgroup");
    } else {
        eprintln!("cgroup containment not available here: only the process-group mode is tested");
    }
    modes
}

fn assert_contained(scratch: &Scratch, out: &Output, mode: &str, escape: &str) {
    assert_eq!(
        scratch.read("check").trim(),
        "dead",
        "{mode}, {escape}: the key's next job started while the escaped process lived\n{}",
        out.dump()
    );
    let pid = scratch.pid("esc.pid");
    assert!(
        !alive(pid),
        "{mode}, {escape}: the escaped process outlived the run"
    );
}

#[test]
fn the_run_record_names_the_containment() {
    for mode in modes() {
        let out = Run::new()
            .args(["--containment", mode])
            .stdin("k\ttrue\n")
            .run();
        out.code(0);
        assert_eq!(out.report().run.containment, mode.replace('-', "_"));
        let job = out.job(1);
        assert_eq!(job.cpu_ms.is_some(), mode == "cgroup", "{job:?}");
        if mode != "cgroup" {
            assert_eq!(job.memory_peak_bytes, None, "{job:?}");
        }
    }
}

#[test]
fn a_timeout_ends_every_process_of_the_job_before_the_next_job_of_its_key() {
    for mode in modes() {
        for (escape, start) in ESCAPES {
            let scratch = Scratch::new();
            // The timeout leaves the escaped process (python3 included) time to start even on a
            // loaded machine; the job then waits for its timeout.
            let jobs = format!("k\t{start} {WAIT_FOR_ESCAPEE}; sleep 30\nk\t{CHECK}\n");
            let out = Run::new()
                .scratch(&scratch)
                .args(["--containment", mode, "--timeout", "2", "--grace", "1"])
                .stdin(jobs)
                .run();
            out.code(1);
            assert_eq!(out.job(1).result(), ("interrupted", Some("timeout")));
            assert_eq!(out.job(2).result(), ("succeeded", None));
            assert_contained(&scratch, &out, mode, escape);
        }
    }
}

/// A process of a timed-out job that ignores SIGTERM lives on through the grace period, long
/// past the leak window; lanes was stopping the job, so it is not leaked. Once SIGKILL has
/// emptied the group, its pipes are at EOF, even where the event loop has not heard of it yet:
/// taking them for pipes held open elsewhere made `leaked` true in most runs of cgroup mode.
#[test]
fn the_leftovers_of_a_timed_out_job_are_not_leaked_however_long_they_ignore_sigterm() {
    for mode in modes() {
        let scratch = Scratch::new();
        let jobs: String = (1..=6)
            .map(|n| {
                format!(
                    "k{n}\tsh -c 'trap \"\" TERM; : > \"$D/ready.{n}\"; exec sleep 30' & {}; \
                     sleep 30\n",
                    await_file(&format!("ready.{n}"))
                )
            })
            .collect();
        let out = Run::new()
            .scratch(&scratch)
            .args(["--containment", mode, "-j", "6", "--timeout", "2"])
            .args(["--grace", "0.5", "--leak-window", "100ms"])
            .stdin(jobs)
            .run();
        out.code(1);
        for seq in 1..=6 {
            let job = out.job(seq);
            assert_eq!(job.result(), ("interrupted", Some("timeout")), "{mode}");
            assert!(!job.leaked, "{mode}: {job:?}");
        }
    }
}

#[test]
fn a_plain_end_waits_for_every_process_of_the_job() {
    for mode in modes() {
        for (escape, start) in ESCAPES {
            let scratch = Scratch::new();
            // The job's shell exits at once; what it left behind is terminated after the leak
            // window, and only then does the key's next job start.
            let jobs = format!("k\t{start} {WAIT_FOR_ESCAPEE}\nk\t{CHECK}\n");
            let out = Run::new()
                .scratch(&scratch)
                .args(["--containment", mode, "--grace", "1"])
                .stdin(jobs)
                .run();
            out.code(0);
            assert!(out.job(1).leaked, "{mode}, {escape}: {:?}", out.job(1));
            assert_contained(&scratch, &out, mode, escape);
        }
    }
}

/// A job whose shell exits while a process it left goes on (its pipes closed) ends as soon as
/// that process ends, well within the leak window: in cgroup mode lanes then watches the job's
/// `cgroup.events`, in process-group mode it looks at the group from time to time.
#[test]
fn a_job_ends_when_the_last_process_it_left_ends_within_the_leak_window() {
    for mode in modes() {
        let scratch = Scratch::new();
        // The shell exits at once; the process it leaves ends half a second later.
        let jobs = "k\tsleep 0.5 >/dev/null 2>&1 &\n";
        let out = Run::new()
            .scratch(&scratch)
            .args(["--containment", mode, "--leak-window", "120s"])
            .stdin(jobs)
            .run();
        out.code(0);
        let job = out.job(1);
        assert_eq!(job.result(), ("succeeded", None), "{mode}: {}", out.dump());
        assert!(!job.leaked, "{mode}: {job:?}");
        let took = job.duration_ms.unwrap_or(u64::MAX);
        assert!(
            took < 60_000,
            "{mode}: the job ended {took} ms after it started, at its leak window, not when \
             the process it left ended"
        );
    }
}

/// In process-group mode, a process that left the job's group with an empty environment
/// (`env -i setsid`) carries no job's variables: no job waits for it (it escapes its key's
/// order, as the README says), and it is still terminated when the run ends. It used to be
/// taken for a process in the middle of an `execve`: every job with processes outside its group
/// then waited for it, a timeout and Ctrl-C could not end it, and the run lasted as long as it.
#[test]
fn a_process_with_an_empty_environment_holds_no_job_and_outlives_no_run() {
    let scratch = Scratch::new();
    let jobs = "k\tenv -i setsid sleep 30 </dev/null >/dev/null 2>&1 & echo $! > \"$D/esc.pid\"\n\
                j\tsleep 0.2 >/dev/null 2>&1 &\n";
    let out = Run::new()
        .scratch(&scratch)
        .args([
            "--containment",
            "process-group",
            "--timeout",
            "10",
            "--grace",
            "1",
        ])
        .stdin(jobs)
        .run();
    out.code(0);
    for seq in [1, 2] {
        let job = out.job(seq);
        assert_eq!(job.result(), ("succeeded", None), "{}", out.dump());
        let took = job.duration_ms.unwrap_or(u64::MAX);
        assert!(took < 5_000, "job {seq} took {took} ms: {job:?}");
    }
    let pid = scratch.pid("esc.pid");
    assert!(
        !alive(pid),
        "the process with an empty environment outlived the run"
    );
}

#[test]
fn cancel_in_progress_ends_every_process_of_the_job_before_the_newer_one_starts() {
    for mode in modes() {
        for (escape, start) in ESCAPES {
            let scratch = Scratch::new();
            let report = scratch.join("report.jsonl");
            let mut running = Run::new()
                .scratch(&scratch)
                .no_report()
                .arg("--report")
                .arg(&report)
                .args([
                    "--containment",
                    mode,
                    "--cancel-in-progress",
                    "--grace",
                    "1",
                ])
                .stdin_piped()
                .spawn();
            let first = format!("k\t{start} {WAIT_FOR_ESCAPEE}; touch \"$D/up\"; sleep 30\n");
            running.stdin().write_all(first.as_bytes()).unwrap();
            running.stdin().flush().unwrap();
            scratch.wait_for("up", WAIT);
            running
                .stdin()
                .write_all(format!("k\t{CHECK}\n").as_bytes())
                .unwrap();
            running.close_stdin();
            let out = running.wait();
            out.code(0);
            let records = Records::read(&report);
            let first = records.job(1);
            assert_eq!(
                (first.outcome.as_str(), first.reason.as_deref()),
                ("interrupted", Some("superseded"))
            );
            assert_contained(&scratch, &out, mode, escape);
        }
    }
}

#[test]
fn ctrl_c_ends_every_process_of_every_job() {
    for mode in modes() {
        for (escape, start) in ESCAPES {
            let scratch = Scratch::new();
            let mut running = Run::new()
                .scratch(&scratch)
                .args(["--containment", mode, "--grace", "1"])
                .stdin_piped()
                .spawn();
            let first = format!("k\t{start} {WAIT_FOR_ESCAPEE}; touch \"$D/up\"; sleep 30\n");
            running.stdin().write_all(first.as_bytes()).unwrap();
            running.stdin().flush().unwrap();
            scratch.wait_for("up", WAIT);
            running.signal(Signal::SIGINT);
            let out = running.wait();
            out.code(130);
            let pid = scratch.pid("esc.pid");
            assert!(!alive(pid), "{mode}, {escape}: outlived the run");
        }
    }
}

#[test]
fn containment_cgroup_where_it_is_impossible_is_a_usage_error() {
    if cgroups_available() {
        eprintln!("cgroups are available here: the refusal is not tested");
        return;
    }
    let out = Run::new()
        .no_report()
        .args(["--containment", "cgroup"])
        .run();
    out.code(2);
    assert!(
        out.stderr().contains("--containment cgroup"),
        "{}",
        out.dump()
    );
}

#[test]
fn a_second_ctrl_c_kills_escaped_processes_at_once() {
    for mode in modes() {
        let scratch = Scratch::new();
        let mut running = Run::new()
            .scratch(&scratch)
            .args(["--containment", mode, "--grace", "20"])
            .stdin_piped()
            .spawn();
        let job = "trap '' INT TERM HUP; \
                   setsid sh -c 'trap \"\" TERM INT; echo $$ > \"$D/esc.pid\"; exec sleep 30' & \
                   while [ ! -s \"$D/esc.pid\" ]; do sleep 0.01; done; touch \"$D/up\"; sleep 30";
        running
            .stdin()
            .write_all(format!("k\t{job}\n").as_bytes())
            .unwrap();
        running.stdin().flush().unwrap();
        scratch.wait_for("up", WAIT);
        running.signal(Signal::SIGINT);
        std::thread::sleep(Duration::from_millis(200));
        running.signal(Signal::SIGINT);
        let out = running.wait();
        out.code(130);
        assert!(
            out.elapsed < Duration::from_secs(10),
            "{mode}: the grace period was waited out: {:?}",
            out.elapsed
        );
        assert!(!alive(scratch.pid("esc.pid")), "{mode}: outlived the run");
    }
}

/// How many lines `name` holds now.
fn count(scratch: &Scratch, name: &str) -> usize {
    std::fs::read_to_string(scratch.join(name))
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

#[test]
fn ctrl_z_or_sigttou_stops_the_jobs_with_lanes_and_stopped_time_counts_toward_no_timeout() {
    // SIGTTOU is what a write to the terminal from the background sends under `stty tostop`:
    // lanes must not stop while its jobs run on, their timeouts unwatched.
    let runs = modes()
        .into_iter()
        .flat_map(|mode| [(mode, Signal::SIGTSTP), (mode, Signal::SIGTTOU)]);
    for (mode, signal) in runs {
        let scratch = Scratch::new();
        // 30 ticks, 50 ms apart: 1.5 s of work, under the 2.5 s timeout unless stopped time
        // counted.
        let job = "for i in $(seq 30); do echo $i >> \"$D/ticks\"; sleep 0.05; done";
        let mut running = Run::new()
            .scratch(&scratch)
            .args(["--containment", mode, "--timeout", "2.5"])
            .stdin_piped()
            .spawn();
        running
            .stdin()
            .write_all(format!("k\t{job}\n").as_bytes())
            .unwrap();
        running.close_stdin();
        assert!(wait_until(WAIT, || count(&scratch, "ticks") >= 3));
        running.signal(signal);
        std::thread::sleep(Duration::from_millis(300));
        let stopped_at = count(&scratch, "ticks");
        std::thread::sleep(Duration::from_secs(2));
        assert_eq!(
            count(&scratch, "ticks"),
            stopped_at,
            "{mode}, {signal}: the job ran on while lanes was stopped"
        );
        running.signal(Signal::SIGCONT);
        let out = running.wait();
        out.code(0);
        assert_eq!(out.job(1).result(), ("succeeded", None), "{mode}, {signal}");
        assert_eq!(count(&scratch, "ticks"), 30);
    }
}

#[test]
fn fg_leaves_a_job_process_that_stopped_itself_stopped_and_continues_the_rest() {
    // The job's shell stops itself (as a job reading the terminal, or one a debugger holds,
    // is stopped); a loop it started goes on. Ctrl-Z stops the loop with lanes; `fg` must
    // continue the loop and leave the shell stopped, as it was before the Ctrl-Z.
    for mode in modes() {
        let scratch = Scratch::new();
        let job = "( while :; do echo x >> \"$D/ticks\"; sleep 0.02; done ) & \
                   echo $! > \"$D/loop\"; echo $$ > \"$D/sh.tmp\"; mv \"$D/sh.tmp\" \"$D/sh\"; \
                   kill -STOP $$; kill $(cat \"$D/loop\"); touch \"$D/resumed\"";
        let running = Run::new()
            .scratch(&scratch)
            .args(["--containment", mode])
            .stdin(format!("k\t{job}\n"))
            .spawn();
        assert!(wait_until(WAIT, || scratch.exists("sh")
            && state(scratch.pid("sh")) == Some('T')
            && count(&scratch, "ticks") >= 3));
        let shell = scratch.pid("sh");
        running.signal(Signal::SIGTSTP);
        assert!(wait_until(WAIT, || state(running.pid()) == Some('T')));
        // A cgroup is frozen a moment after lanes is seen stopped.
        std::thread::sleep(Duration::from_millis(300));
        let stopped_at = count(&scratch, "ticks");
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            count(&scratch, "ticks"),
            stopped_at,
            "{mode}: the job's loop ran on while lanes was stopped"
        );
        running.signal(Signal::SIGCONT);
        assert!(
            wait_until(WAIT, || count(&scratch, "ticks") > stopped_at + 3),
            "{mode}: the job's loop was not continued"
        );
        assert_eq!(
            state(shell),
            Some('T'),
            "{mode}: the shell that stopped itself was continued"
        );
        assert!(!scratch.exists("resumed"), "{mode}");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(shell), Signal::SIGCONT).unwrap();
        let out = running.wait();
        out.code(0);
        assert_eq!(out.job(1).result(), ("succeeded", None), "{mode}");
        assert!(scratch.exists("resumed"), "{mode}");
    }
}

#[test]
fn fg_leaves_stopped_a_process_that_stopped_itself_in_a_group_that_left_the_job() {
    // A `setsid` shell (a group of its own, outside the job's) runs a loop, and its child
    // stops itself. Ctrl-Z stops that group with the job; `fg` must continue the loop and
    // leave the child stopped.
    for mode in modes() {
        let scratch = Scratch::new();
        scratch.write(
            "child.sh",
            "echo $$ > \"$D/sh.tmp\"; mv \"$D/sh.tmp\" \"$D/sh\"; kill -STOP $$; touch \"$D/resumed\"\n",
        );
        scratch.write(
            "leader.sh",
            "sh \"$D/child.sh\" & c=$!\n\
             until [ -e \"$D/done\" ]; do echo x >> \"$D/ticks\"; sleep 0.02; done\n\
             kill -CONT $c; wait $c\n",
        );
        let running = Run::new()
            .scratch(&scratch)
            .args(["--containment", mode])
            .stdin("k\tsetsid sh \"$D/leader.sh\" & wait\n")
            .spawn();
        assert!(wait_until(WAIT, || scratch.exists("sh")
            && state(scratch.pid("sh")) == Some('T')
            && count(&scratch, "ticks") >= 3));
        let child = scratch.pid("sh");
        running.signal(Signal::SIGTSTP);
        assert!(wait_until(WAIT, || state(running.pid()) == Some('T')));
        std::thread::sleep(Duration::from_millis(300));
        let stopped_at = count(&scratch, "ticks");
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            count(&scratch, "ticks"),
            stopped_at,
            "{mode}: the loop ran on while lanes was stopped"
        );
        running.signal(Signal::SIGCONT);
        assert!(
            wait_until(WAIT, || count(&scratch, "ticks") > stopped_at + 3),
            "{mode}: the loop was not continued"
        );
        assert_eq!(
            state(child),
            Some('T'),
            "{mode}: the stopped child was continued"
        );
        assert!(!scratch.exists("resumed"), "{mode}");
        scratch.write("done", "");
        let out = running.wait();
        out.code(0);
        assert_eq!(out.job(1).result(), ("succeeded", None), "{mode}");
        assert!(scratch.exists("resumed"), "{mode}");
    }
}

/// A job's tracer: starts `sleep 60` as its child and holds it as a debugger does
/// (`PTRACE_ATTACH`; state `t`), says so in `$D/held`, lets it go (`PTRACE_DETACH`) once
/// `$D/go` exists, and writes the state it is in a moment later to `$D/state`. Exits 3 when it
/// may not trace.
const TRACER: &str = r#"
import ctypes, os, signal, time
D = os.environ["D"]
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
pid = os.fork()
if pid == 0:
    os.execvp("sleep", ["sleep", "60"])
if libc.ptrace(16, pid, None, None) != 0:
    os.kill(pid, signal.SIGKILL)
    raise SystemExit(3)
os.waitpid(pid, os.WUNTRACED)
open(D + "/held", "w").close()
while not os.path.exists(D + "/go"):
    time.sleep(0.01)
libc.ptrace(17, pid, None, None)
time.sleep(0.3)
state = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0]
open(D + "/state", "w").write(state)
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
"#;

#[test]
fn a_process_a_debugger_held_through_ctrl_z_runs_on_once_let_go() {
    // Ctrl-Z stops the job's processes, one in a debugger's trace stop included (the stop
    // waits, pending); `fg` must continue that one too, or it would stop for good the moment
    // the debugger lets it go. Process-group mode only: in cgroup mode lanes sends no signal,
    // and the kernel's freezer sometimes leaves the process stopped once let go (2 of 17 runs
    // here; the README says so).
    let mode = "process-group";
    let scratch = Scratch::new();
    scratch.write("tracer.py", TRACER);
    let running = Run::new()
        .scratch(&scratch)
        .args(["--containment", mode])
        .stdin("k\tpython3 \"$D/tracer.py\"\n")
        .spawn();
    assert!(wait_until(WAIT, || scratch.exists("held") || !alive(running.pid())));
    if !scratch.exists("held") {
        let out = running.wait();
        assert_eq!(out.job(1).exit_code, Some(3), "{}", out.dump());
        eprintln!("{mode}: no ptrace here: skipped");
        return;
    }
    running.signal(Signal::SIGTSTP);
    assert!(wait_until(WAIT, || state(running.pid()) == Some('T')));
    // A cgroup is frozen a moment after lanes is seen stopped.
    std::thread::sleep(Duration::from_millis(200));
    running.signal(Signal::SIGCONT);
    assert!(wait_until(WAIT, || state(running.pid()) != Some('T')));
    scratch.write("go", "");
    let out = running.wait();
    out.code(0);
    assert_eq!(
        scratch.read("state"),
        "S",
        "{mode}: the process the debugger let go is not running"
    );
    assert_eq!(out.job(1).result(), ("succeeded", None), "{mode}");
}

#[test]
fn the_grace_period_stands_still_while_lanes_is_stopped() {
    // Ctrl-C gives a job that ignores SIGINT and SIGTERM a 3 s grace period before SIGKILL;
    // 0.5 s into it lanes is stopped for 3 s. After `fg` the job still has about 2.5 s.
    for mode in modes() {
        let scratch = Scratch::new();
        let running = Run::new()
            .scratch(&scratch)
            .args(["--containment", mode, "--grace", "3"])
            .stdin("k\ttrap '' INT TERM; touch \"$D/up\"; sleep 30\n")
            .spawn();
        assert!(wait_until(WAIT, || scratch.exists("up")));
        running.signal(Signal::SIGINT);
        std::thread::sleep(Duration::from_millis(500));
        running.signal(Signal::SIGTSTP);
        assert!(wait_until(WAIT, || state(running.pid()) == Some('T')));
        std::thread::sleep(Duration::from_secs(3));
        let continued = std::time::Instant::now();
        running.signal(Signal::SIGCONT);
        let out = running.wait();
        let after = continued.elapsed();
        out.code(130);
        assert_eq!(
            out.job(1).result(),
            ("interrupted", Some("shutdown")),
            "{mode}"
        );
        assert_eq!(out.job(1).signal.as_deref(), Some("SIGKILL"), "{mode}");
        assert!(
            after >= Duration::from_millis(1500),
            "{mode}: SIGKILL {after:?} after fg: the time stopped counted toward the grace period"
        );
    }
}

/// The cgroup2 directory this process is in (as lanes finds its own).
fn own_cgroup_dir() -> Option<std::path::PathBuf> {
    cgroup_dir_of("self")
}

/// The cgroup2 directory process `pid` (a number, or `self`) is in.
fn cgroup_dir_of(pid: &str) -> Option<std::path::PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        (after.split_ascii_whitespace().next()? == "cgroup2")
            .then(|| before.split_ascii_whitespace().nth(4).map(str::to_owned))
            .flatten()
    })?;
    let own = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::"))?.to_owned();
    Some(std::path::Path::new(&mount).join(path.trim_start_matches('/')))
}

#[test]
fn a_cgroup_where_no_job_cgroup_can_be_made_is_no_containment() {
    if !cgroups_available() {
        eprintln!("cgroup containment not available here: skipped");
        return;
    }
    // lanes in a cgroup whose `cgroup.max.depth` is 1: the run's cgroup can be made below it,
    // no job's below that. Found out before the run: `auto` runs without cgroups, `cgroup` is
    // a usage error.
    let parent = own_cgroup_dir().expect("a cgroup2 directory");
    let limited = parent.join(format!("depth-one-{}", std::process::id()));
    std::fs::create_dir(&limited).unwrap();
    std::fs::write(limited.join("cgroup.max.depth"), "1").unwrap();
    let enter = format!(
        "echo $$ > {}",
        sh_quote(limited.join("cgroup.procs").to_str().unwrap())
    );
    let auto = Run::new().wrapper(&enter).stdin("k\ttrue\n").run();
    let cgroup = Run::new()
        .wrapper(&enter)
        .args(["--containment", "cgroup"])
        .stdin("k\ttrue\n")
        .run();
    // The dry run refuses what the run refuses.
    let dry = Run::new()
        .wrapper(&enter)
        .args(["--containment", "cgroup", "--dry-run"])
        .stdin("k\ttrue\n")
        .run();
    // Nothing of lanes' is left in it: it can be removed.
    let removed = std::fs::remove_dir(&limited);
    auto.code(0);
    assert_eq!(
        auto.report().run.containment,
        "process_group",
        "{}",
        auto.dump()
    );
    assert_eq!(auto.job(1).result(), ("succeeded", None));
    cgroup.code(2);
    assert!(
        cgroup
            .stderr()
            .contains("--containment cgroup: cannot create a cgroup under"),
        "{}",
        cgroup.dump()
    );
    dry.code(2);
    assert!(
        dry.stderr()
            .contains("--containment cgroup: cannot create a cgroup under"),
        "{}",
        dry.dump()
    );
    removed.unwrap();
}

#[test]
fn cgroups_of_runs_that_were_killed_are_removed_by_the_next_run_and_only_those() {
    if !cgroups_available() {
        eprintln!("cgroup containment not available here: skipped");
        return;
    }
    let parent = own_cgroup_dir().expect("a cgroup2 directory");
    // A run killed with SIGKILL left its (empty) cgroups; its pid is gone. A directory of
    // another name is not lanes' and stays.
    let stale = parent.join("lanes-2147483600");
    std::fs::create_dir_all(stale.join("job-3-1")).unwrap();
    let foreign = parent.join("not-lanes-test");
    std::fs::create_dir_all(&foreign).unwrap();
    let running = Run::new()
        .args(["--containment", "cgroup"])
        .stdin("k\ttrue\n")
        .spawn();
    let own = parent.join(format!("lanes-{}", running.pid()));
    let out = running.wait();
    out.code(0);
    let stale_left = stale.exists();
    let foreign_left = foreign.exists();
    let _ = std::fs::remove_dir(&foreign);
    assert!(!stale_left, "the stale run cgroup is still there");
    assert!(foreign_left, "a cgroup that is not lanes' was removed");
    assert!(
        !own.exists(),
        "the run's own cgroup is left: {}",
        own.display()
    );
}

/// A lanes killed with SIGKILL while stopped (Ctrl-Z) left its jobs frozen, and nothing would
/// ever thaw them: the next run in the same cgroup does, and they run on as the orphans of a
/// killed lanes do.
#[test]
fn jobs_a_lanes_killed_while_stopped_left_frozen_are_thawed_by_the_next_run() {
    if !cgroups_available() {
        eprintln!("cgroup containment not available here: skipped");
        return;
    }
    let scratch = Scratch::new();
    let job = "echo $$ > \"$D/pid\"; while :; do echo x >> \"$D/ticks\"; sleep 0.02; done";
    let running = Run::new()
        .scratch(&scratch)
        .args(["--containment", "cgroup"])
        .stdin(format!("k\t{job}\n"))
        .spawn();
    assert!(wait_until(WAIT, || count(&scratch, "ticks") >= 3));
    let shell = scratch.pid("pid");
    // The run's cgroup, which Ctrl-Z freezes: the job's cgroup's parent.
    let job_cgroup = cgroup_dir_of(&shell.to_string()).expect("the job's cgroup");
    let run_cgroup = job_cgroup.parent().expect("the run's cgroup");
    running.signal(Signal::SIGTSTP);
    assert!(wait_until(WAIT, || std::fs::read_to_string(
        run_cgroup.join("cgroup.events")
    )
    .is_ok_and(|events| events.contains("frozen 1"))));
    running.signal(Signal::SIGKILL);
    assert!(wait_until(WAIT, || state(running.pid()) == Some('Z')));
    // (Whether they stay frozen until then is not looked at: any lanes the suite starts in
    // this cgroup meanwhile thaws them.)
    let frozen_at = count(&scratch, "ticks");
    Run::new()
        .args(["--containment", "cgroup"])
        .stdin("other\ttrue\n")
        .run()
        .code(0);
    let thawed = wait_until(WAIT, || count(&scratch, "ticks") > frozen_at + 3);
    // Reaps the killed lanes and kills what its job left.
    drop(running);
    assert!(wait_until(WAIT, || !alive(shell)));
    assert!(thawed, "the next run left the jobs frozen");
}

#[test]
fn processes_in_cgroups_a_job_makes_below_its_own_are_stopped_with_it_and_removed() {
    if !cgroups_available() {
        eprintln!("cgroup containment not available here: skipped");
        return;
    }
    let scratch = Scratch::new();
    // The job moves a TERM-trapping loop into a cgroup of its own making, below the job's.
    let job = format!(
        "{JOB_CGROUP_DIR}; \
               echo \"$CG\" > \"$D/cg\"; mkdir \"$CG/sub\"; \
               sh -c 'echo $$ > \"$1/sub/cgroup.procs\"; \
                      trap \"echo sub-got-TERM >> \\\"$D/log\\\"; exit 0\" TERM; \
                      touch \"$D/up\"; while :; do sleep 0.05; done' sh \"$CG\" & \
               wait"
    );
    let out = Run::new()
        .scratch(&scratch)
        .args(["--containment", "cgroup", "--timeout", "1", "--grace", "10"])
        .stdin(format!("k\t{job}\n"))
        .run();
    out.code(1);
    assert!(scratch.exists("up"), "{}", out.dump());
    assert_eq!(out.job(1).result(), ("interrupted", Some("timeout")));
    assert_eq!(
        scratch.lines("log"),
        ["sub-got-TERM"],
        "the process in the nested cgroup heard the stop\n{}",
        out.dump()
    );
    assert!(
        out.elapsed < Duration::from_secs(8),
        "the grace period was waited out: {:?}",
        out.elapsed
    );
    let cgroup = scratch.read("cg");
    assert!(
        !std::path::Path::new(cgroup.trim()).exists(),
        "the job's cgroup is left: {cgroup}"
    );
}

/// Every job's shell prints its `SigBlk` and `SigIgn` from `/proc/$$/status` with builtins
/// only (an external `grep` would show the shell with signals blocked while it waits).
const PRINT_SIGNAL_SETS: &str = "while IFS= read -r l; do case $l in SigBlk*|SigIgn*) \
                                 echo \"$LANES_SEQ $l\";; esac; done < /proc/$$/status";

#[test]
fn cgroup_jobs_start_with_no_signal_blocked_or_ignored_even_when_lanes_was() {
    if !cgroups_available() {
        eprintln!("cgroup containment not available here: skipped");
        return;
    }
    // lanes exec'd with SIGINT, SIGQUIT and SIGUSR2 ignored and SIGUSR1 and SIGTERM blocked;
    // it blocks every signal, glibc's 32 and 33 included, around each clone3 of a job, so
    // a job that kept any of that (or a handler of lanes' run before its reset) would show it.
    let jobs: String = (1..=40)
        .map(|i| format!("k{}\t{PRINT_SIGNAL_SETS}\n", i % 4))
        .collect();
    let out = Run::new()
        .wrapper(
            "exec python3 -c 'import os, signal, sys; \
             [signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGUSR2)]; \
             signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGTERM}); \
             os.execv(sys.argv[1], sys.argv[1:])' \"$0\" \"$@\"",
        )
        .args(["--containment", "cgroup", "-j", "2"])
        .stdin(jobs)
        .run();
    out.code(0);
    let mut seen = 0;
    for line in out.stdout().lines() {
        let Some((_, rest)) = line.split_once("] ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (seq, name, hex) = (words.next(), words.next(), words.next());
        let (Some(seq), Some(name), Some(hex)) = (seq, name, hex) else {
            panic!("unexpected line {line:?}\n{}", out.dump());
        };
        let bits = u64::from_str_radix(hex, 16).unwrap();
        assert_eq!(bits, 0, "job {seq}: {name} {hex}\n{}", out.dump());
        seen += 1;
    }
    assert_eq!(seen, 80, "two lines from each of 40 jobs\n{}", out.dump());
}

#[test]
fn a_failed_exec_in_cgroup_containment_is_a_spawn_error_and_the_next_jobs_run() {
    if !cgroups_available() {
        eprintln!("cgroup containment not available here: skipped");
        return;
    }
    // A missing shell: the child's execve fails with ENOENT after clone3.
    let out = Run::new()
        .args([
            "--containment",
            "cgroup",
            "--shell",
            "/nonexistent/shell",
            "-j",
            "2",
        ])
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
    // A shell that cannot be executed (EACCES), then jobs whose shell runs: the failed
    // children were reaped and the spawning path works on.
    let scratch = Scratch::new();
    let not_executable = scratch.write("not-a-shell", "#!/bin/sh\necho hi\n");
    let out = Run::new()
        .args(["--containment", "cgroup"])
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

#[test]
fn in_cgroup_containment_a_shell_gone_from_where_it_was_found_is_searched_for_again() {
    if !cgroups_available() {
        eprintln!("cgroup containment not available here: skipped");
        return;
    }
    // `lsh` is found in first/ at the first spawn; the first job removes it, so the next
    // spawn's exec there fails (ENOENT) and lanes searches PATH again, finding second/lsh.
    let scratch = Scratch::new();
    for dir in ["first", "second"] {
        let path = scratch.write(
            &format!("{dir}/lsh"),
            format!("#!/bin/sh\necho {dir} >> \"$D/shells\"\nexec /bin/sh \"$@\"\n"),
        );
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    let path = format!(
        "{}:{}:{}",
        scratch.path().join("first").display(),
        scratch.path().join("second").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Run::new()
        .scratch(&scratch)
        .env("PATH", path)
        .args(["--containment", "cgroup", "--shell", "lsh", "-j", "1"])
        .stdin("k\trm \"$D/first/lsh\"\nk\ttrue\nk\ttrue\n")
        .run();
    out.code(0);
    assert_eq!(
        scratch.lines("shells"),
        ["first", "second", "second"],
        "{}",
        out.dump()
    );
}

/// Shell code setting `$CG` to the directory of the job's own cgroup (v2): the cgroup2 mount
/// point from `/proc/self/mountinfo` joined with the path from `/proc/self/cgroup`.
const JOB_CGROUP_DIR: &str = "CG=$(awk '$9 == \"cgroup2\" { print $5; exit }' \
                              /proc/self/mountinfo)$(sed -n 's/^0:://p' /proc/self/cgroup)";

/// Writes the job's cgroup (v2, from `/proc/self/cgroup`) to `$D/cg$LANES_SEQ`, and keeps it
/// in `$cg`.
const NOTE_CGROUP: &str =
    "cg=$(sed -n 's/^0:://p' /proc/self/cgroup); echo \"$cg\" > \"$D/cg$LANES_SEQ\"";

#[test]
fn a_job_in_the_cgroup_an_earlier_job_left_is_told_only_its_own_cpu_time_and_memory() {
    if !cgroups_available() {
        eprintln!("cgroup containment not available here: skipped");
        return;
    }
    let scratch = Scratch::new();
    // The first job touches 200 MiB and spins 0.4 s of CPU; the second is tiny, one after the
    // other in the same cgroup.
    let big = "python3 -c 'import time; b = b\"x\" * (200 << 20); t = time.process_time(); \
               any(time.process_time() - t > 0.4 for _ in iter(int, 1))'";
    let out = Run::new()
        .scratch(&scratch)
        .args(["--containment", "cgroup", "-j", "1"])
        .stdin(format!("k\t{NOTE_CGROUP}; {big}\nk\t{NOTE_CGROUP}; true\n"))
        .run();
    out.code(0);
    let (first, second) = (out.job(1), out.job(2));
    let first_cpu = first.cpu_ms.expect("the first job's CPU time");
    let second_cpu = second.cpu_ms.expect("the second job's CPU time");
    assert!(first_cpu >= 350, "{first:?}\n{}", out.dump());
    assert!(second_cpu < 100, "{second:?}\n{}", out.dump());
    match (first.memory_peak_bytes, second.memory_peak_bytes) {
        (Some(big), Some(small)) => {
            assert!(big >= 200 << 20, "{first:?}");
            assert!(small < big / 4, "{second:?}\n{first:?}");
        }
        (None, None) => {
            // Without the memory controller every empty job cgroup is reused.
            assert_eq!(
                scratch.read("cg1"),
                scratch.read("cg2"),
                "the second job did not get the first job's cgroup"
            );
        }
        peaks => panic!("one job has a peak and the other not: {peaks:?}"),
    }
}

#[test]
fn once_every_job_has_started_a_job_cgroup_goes_when_its_job_ends_and_a_retry_gets_a_new_one() {
    if !cgroups_available() {
        eprintln!("cgroup containment not available here: skipped");
        return;
    }
    let scratch = Scratch::new();
    // Jobs 1 and 2 end at once; job 2 fails its first try and is tried again. Job 3 waits
    // (for up to 20 s) until job 2's retry has run (between the tries no other job cgroup
    // may be there for a moment) and its own cgroup is the only job cgroup left in the
    // run's, then lists them.
    let wait_alone = format!(
        "{JOB_CGROUP_DIR}; RUN=$(dirname \"$CG\"); i=0; \
         while {{ [ ! -e \"$D/retried\" ] || [ $(ls -d \"$RUN\"/job-* 2>/dev/null | wc -l) -gt 1 ]; }} \
         && [ $i -lt 1000 ]; do \
         sleep 0.02; i=$((i + 1)); done; \
         ls -d \"$RUN\"/job-* > \"$D/left\"; echo \"$CG\" > \"$D/own\""
    );
    let fail_once = "[ -e \"$D/once\" ] || { touch \"$D/once\"; exit 1; }; touch \"$D/retried\"";
    let out = Run::new()
        .scratch(&scratch)
        .args(["--containment", "cgroup", "-j", "3", "--retries", "1"])
        .stdin(format!(
            "a\ttrue\nb\t{NOTE_CGROUP}; {fail_once}\nc\t{wait_alone}\n"
        ))
        .run();
    out.code(0);
    assert_eq!(out.job(2).attempts, 2, "{}", out.dump());
    // The retry ran in a cgroup of the run, made for it after every job had started.
    assert!(
        scratch.read("cg2").trim().contains("/job-"),
        "{:?}\n{}",
        scratch.read("cg2"),
        out.dump()
    );
    assert_eq!(
        scratch.lines("left"),
        vec![scratch.read("own").trim().to_string()],
        "the cgroups of jobs that ended were kept while nothing could use them\n{}",
        out.dump()
    );
}

#[test]
fn a_cgroup_a_job_left_a_cgroup_in_is_not_given_to_the_next_job() {
    if !cgroups_available() {
        eprintln!("cgroup containment not available here: skipped");
        return;
    }
    let scratch = Scratch::new();
    let mkdir_below = format!("{JOB_CGROUP_DIR}; mkdir \"$CG/left\"");
    let out = Run::new()
        .scratch(&scratch)
        .args(["--containment", "cgroup", "-j", "1"])
        .stdin(format!(
            "k\t{NOTE_CGROUP}; {mkdir_below}\nk\t{NOTE_CGROUP}; \
             ls \"$(awk '$9 == \"cgroup2\" {{ print $5; exit }}' /proc/self/mountinfo)$cg\" \
             > \"$D/ls2\"\n"
        ))
        .run();
    out.code(0);
    assert_ne!(
        scratch.read("cg1"),
        scratch.read("cg2"),
        "the cgroup with a cgroup left in it was reused\n{}",
        out.dump()
    );
    assert!(
        !scratch.lines("ls2").iter().any(|name| name == "left"),
        "{:?}",
        scratch.lines("ls2")
    );
}

#[test]
fn the_job_after_one_ended_with_cgroup_kill_starts_and_runs() {
    if !cgroups_available() {
        eprintln!("cgroup containment not available here: skipped");
        return;
    }
    // The first job ignores SIGTERM and is ended by `cgroup.kill`; a process born later into
    // a cgroup that was killed so is killed at once, so the next job must get another cgroup.
    let out = Run::new()
        .args([
            "--containment",
            "cgroup",
            "-j",
            "1",
            "--timeout",
            "0.3",
            "--grace",
            "0.2",
        ])
        .stdin("k\ttrap '' TERM; sleep 5\nk\techo second-ran\n")
        .run();
    out.code(1);
    assert_eq!(out.job(1).result(), ("interrupted", Some("timeout")));
    assert_eq!(out.job(2).result(), ("succeeded", None), "{}", out.dump());
    assert!(out.stdout().contains("second-ran"), "{}", out.dump());
}

#[test]
fn the_job_after_one_that_killed_its_own_cgroup_starts_and_runs() {
    if !cgroups_available() {
        eprintln!("cgroup containment not available here: skipped");
        return;
    }
    // The first job writes `cgroup.kill` of its own cgroup (lanes does not know); it dies by
    // SIGKILL, so its cgroup serves no later job.
    let kill_own = format!("{JOB_CGROUP_DIR}; echo 1 > \"$CG/cgroup.kill\"; sleep 5");
    let out = Run::new()
        .args(["--containment", "cgroup", "-j", "1"])
        .stdin(format!("k\t{kill_own}\nk\techo second-ran\n"))
        .run();
    out.code(1);
    assert_eq!(
        out.job(1).result(),
        ("failed", Some("killed")),
        "{}",
        out.dump()
    );
    assert_eq!(out.job(2).result(), ("succeeded", None), "{}", out.dump());
    assert!(out.stdout().contains("second-ran"), "{}", out.dump());
}

/// Runs that start at the same moment in one cgroup (a cron entry, a hook and a terminal) each
/// make and keep their own run cgroup: none takes another's new one for a stale one.
#[test]
fn runs_started_at_once_in_one_cgroup_each_get_cgroup_containment() {
    if !cgroups_available() {
        eprintln!("cgroup containment not available here: skipped");
        return;
    }
    for round in 0..30 {
        let runs: Vec<_> = (0..8)
            .map(|_| {
                std::process::Command::new(BIN)
                    .args(["--containment", "cgroup", "--output", "none"])
                    .stdin(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("lanes")
            })
            .collect();
        for mut run in runs {
            // One that failed at start has not read its input.
            let _ = run.stdin.take().unwrap().write_all(b"k\ttrue\n");
            let out = run.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "round {round}: {:?}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
