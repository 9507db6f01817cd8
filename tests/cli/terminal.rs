//! lanes in a real terminal: a tmux pane (a server of its own per test, on its own socket,
//! killed at the end) with an interactive shell. Job control (Ctrl-Z, `fg`), jobs that stop on
//! the terminal, and the live display (resize, a piped stdout, Ctrl-C). Synchronised through
//! files the jobs touch and through what the pane shows, polled with deadlines.
//!
//! Skipped, with a message, where tmux is not installed.

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::support::{
    await_file, group_members, pid_namespaces, sh_quote, state, wait_until, Report, Run, Scratch,
    BIN,
};

/// One tmux server with one pane running an interactive shell, `width` × `height`.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// Starts the server, or `None` (saying so) where tmux is missing.
    fn start(name: &str, width: u16, height: u16, dir: &Path) -> Option<Tmux> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        if Command::new("tmux")
            .arg("-V")
            .stdout(Stdio::null())
            .status()
            .map_or(true, |status| !status.success())
        {
            eprintln!("skipped: tmux is not installed, so {name} cannot run in a terminal");
            return None;
        }
        let socket = format!(
            "lanes-it-{}-{}-{name}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let tmux = Tmux { socket };
        let shell = "env -i PATH=\"$PATH\" HOME=\"$HOME\" TERM=xterm-256color PS1='$ ' \
                     bash --norc --noprofile -i";
        let started = tmux.run(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            "-c",
            dir.to_str().unwrap(),
            shell,
        ]);
        assert!(
            started.status.success(),
            "tmux did not start: {}",
            String::from_utf8_lossy(&started.stderr)
        );
        // The shell is ready once its prompt shows.
        tmux.wait_screen("the shell's prompt", Duration::from_secs(10), |screen| {
            screen.contains('$')
        });
        Some(tmux)
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("tmux runs")
    }

    /// Types `line` and Enter.
    fn type_line(&self, line: &str) {
        self.run(&["send-keys", "-l", line]);
        self.run(&["send-keys", "Enter"]);
    }

    /// Sends one key (`C-z`, `C-c`).
    fn key(&self, key: &str) {
        self.run(&["send-keys", key]);
    }

    /// What the pane shows now.
    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p"]).stdout).into_owned()
    }

    /// The pane's scrollback and screen, wrapped rows joined.
    fn history(&self) -> String {
        String::from_utf8_lossy(
            &self
                .run(&["capture-pane", "-p", "-J", "-S", "-1000"])
                .stdout,
        )
        .into_owned()
    }

    fn resize(&self, width: u16, height: u16) {
        let out = self.run(&[
            "resize-window",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Waits until the screen satisfies `done`; returns it; panics with it after `timeout`.
    fn wait_screen(&self, what: &str, timeout: Duration, done: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not seen within {timeout:?}; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.run(&["kill-server"]);
    }
}

/// The shell line that runs lanes with `args` (its report goes to `$D/report`), as the
/// shell's job itself, so that the shell tells of its stop only once lanes has stopped.
fn lanes_line(args: &str, dir: &Path) -> String {
    format!(
        "D={}; export D; {} --report \"$D/report\" {args}",
        sh_quote(dir.to_str().unwrap()),
        sh_quote(BIN)
    )
}

/// Waits for lanes' end (its report whole, and the shell's prompt back); returns the report.
fn ended(scratch: &Scratch, tmux: &Tmux, timeout: Duration) -> Report {
    let report = report_whole(scratch, tmux, timeout);
    prompt_back(tmux, timeout);
    report
}

/// Waits for lanes' report to be whole; returns it.
fn report_whole(scratch: &Scratch, tmux: &Tmux, timeout: Duration) -> Report {
    let mut report = None;
    if !wait_until(timeout, || {
        report = fs::read_to_string(scratch.join("report"))
            .ok()
            .and_then(|text| Report::parse(&text).ok());
        report.is_some()
    }) {
        panic!("lanes did not end within {timeout:?}:\n{}", tmux.history());
    }
    report.unwrap()
}

/// Waits for the shell's prompt to be the pane's last line.
fn prompt_back(tmux: &Tmux, timeout: Duration) {
    tmux.wait_screen("the shell's prompt", timeout, |screen| {
        screen.lines().rev().find(|l| !l.trim().is_empty()) == Some("$")
    });
}

/// Whether `pid`'s cgroup (v2) is frozen (`cgroup.events`: `frozen 1`).
fn frozen(pid: i32) -> bool {
    let Ok(cgroups) = fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return false;
    };
    let Some(path) = cgroups.lines().find_map(|line| line.strip_prefix("0::")) else {
        return false;
    };
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mounts
        .lines()
        .filter(|line| {
            line.split(" - ")
                .nth(1)
                .is_some_and(|fs| fs.starts_with("cgroup2 "))
        })
        .filter_map(|line| line.split(' ').nth(4))
        .any(|mount| {
            fs::read_to_string(format!("{mount}{path}/cgroup.events"))
                .is_ok_and(|events| events.lines().any(|l| l == "frozen 1"))
        })
}

#[test]
fn ctrl_z_stops_the_jobs_and_their_timeouts_until_fg() {
    ctrl_z_then_fg("process-group");
}

#[test]
fn ctrl_z_freezes_the_jobs_cgroups_until_fg() {
    let probe = Run::new()
        .args(["--containment", "cgroup"])
        .stdin("k\ttrue\n")
        .run();
    if probe.code != 0 {
        eprintln!("skipped: no cgroup can be created here");
        return;
    }
    ctrl_z_then_fg("cgroup");
}

/// Ctrl-Z in a terminal with two jobs running under `containment`, then `fg` after longer
/// than their timeout: they were stopped (state `T` without cgroups; with cgroups, their
/// cgroups frozen), went nowhere meanwhile, and succeed.
fn ctrl_z_then_fg(containment: &str) {
    let scratch = Scratch::new();
    let Some(tmux) = Tmux::start("ctrl_z", 120, 30, scratch.path()) else {
        return;
    };
    // Job a also starts a process that leaves its process group (and session).
    scratch.write(
        "jobs",
        "a\techo $$ > \"$D/a.pid\"; \
         setsid sh -c 'echo $$ > \"$D/stray.pid\"; sleep 2; touch \"$D/stray.done\"' & \
         sleep 2; touch \"$D/a.done\"\n\
         b\techo $$ > \"$D/b.pid\"; sleep 2; touch \"$D/b.done\"\n",
    );
    tmux.type_line(&lanes_line(
        // The stray gets long enough to finish after `fg` on a loaded machine (by default it
        // would get 200 ms after its job's shell exits).
        &format!("--containment {containment} --timeout 3 --leak-window 10s -j 2 \"$D/jobs\""),
        scratch.path(),
    ));
    scratch.wait_for("a.pid", Duration::from_secs(10));
    scratch.wait_for("b.pid", Duration::from_secs(10));
    scratch.wait_for("stray.pid", Duration::from_secs(10));
    let groups = [
        scratch.pid("a.pid"),
        scratch.pid("b.pid"),
        scratch.pid("stray.pid"),
    ];
    tmux.key("C-z");
    // Every process of both jobs is stopped (the shells and their sleeps, the stray).
    let stopped = |pid: i32| {
        if containment == "cgroup" {
            frozen(pid)
        } else {
            state(pid) == Some('T')
        }
    };
    let all_stopped = || {
        groups.iter().all(|&pgid| {
            let members = group_members(pgid);
            !members.is_empty() && members.iter().all(|&pid| stopped(pid))
        })
    };
    let states = || {
        groups
            .iter()
            .flat_map(|&pgid| group_members(pgid))
            .map(|pid| (pid, state(pid), stopped(pid)))
            .collect::<Vec<_>>()
    };
    assert!(
        wait_until(Duration::from_secs(5), all_stopped),
        "the jobs were not stopped by Ctrl-Z: {:?} (pid, state, stopped) in groups {groups:?}\n{}",
        states(),
        tmux.screen()
    );
    let screen = tmux.wait_screen(
        "the shell saying lanes stopped",
        Duration::from_secs(5),
        |s| s.contains("Stopped"),
    );
    // The display was cleared as lanes stopped.
    assert!(!screen.contains(" running · "), "{screen}");
    // Longer than the timeout: the jobs neither run nor time out meanwhile.
    std::thread::sleep(Duration::from_millis(3500));
    assert!(all_stopped(), "the jobs went on while lanes was stopped");
    assert!(!scratch.exists("a.done") && !scratch.exists("b.done"));
    assert!(!scratch.exists("stray.done"));
    tmux.type_line("fg");
    let report = ended(&scratch, &tmux, Duration::from_secs(20));
    assert_eq!(report.summary.exit_code, 0);
    for job in &report.jobs {
        assert_eq!(job.outcome, "succeeded", "{job:?}");
    }
    assert_eq!(report.jobs.len(), 2);
    assert!(scratch.exists("a.done") && scratch.exists("b.done") && scratch.exists("stray.done"));
}

/// Under `stty tostop` a background lanes writes its jobs' output and its summary, and ends:
/// stopped by its own write (SIGTTOU) it would leave its jobs running with no one to watch
/// their timeouts, or, at its end, never end.
#[test]
fn in_the_background_under_tostop_lanes_writes_its_output_and_ends() {
    let scratch = Scratch::new();
    let Some(tmux) = Tmux::start("tostop_bg", 120, 30, scratch.path()) else {
        return;
    };
    scratch.write("jobs", "a\techo hi-from-a; sleep 0.3; echo bye-from-a\n");
    tmux.type_line(&format!(
        "stty tostop; {} \"$D/jobs\" & wait $!; echo \"exited=$?\"; stty -tostop",
        lanes_line("--timeout 20", scratch.path())
    ));
    let screen = tmux.wait_screen("the shell's answer", Duration::from_secs(20), |s| {
        s.lines().any(|line| line.starts_with("exited="))
    });
    assert!(screen.lines().any(|line| line == "exited=0"), "{screen}");
    assert!(screen.contains("[a] bye-from-a"), "{screen}");
    assert!(screen.contains("lanes: 1 job in"), "{screen}");
}

#[test]
fn after_ctrl_z_and_bg_nothing_is_drawn_until_fg() {
    // In the background the display would draw over the shell's prompt and what is typed
    // there: it waits for `fg`.
    let scratch = Scratch::new();
    let Some(tmux) = Tmux::start("ctrl_z_bg", 120, 30, scratch.path()) else {
        return;
    };
    scratch.write(
        "jobs",
        "a\techo $$ > \"$D/a.pid\"; until [ -e \"$D/go\" ]; do sleep 0.05; done\n",
    );
    tmux.type_line(&lanes_line("--progress always \"$D/jobs\"", scratch.path()));
    scratch.wait_for("a.pid", Duration::from_secs(10));
    tmux.wait_screen("the display", Duration::from_secs(5), |s| {
        s.contains(" running · ")
    });
    tmux.key("C-z");
    tmux.wait_screen("lanes stopped", Duration::from_secs(5), |s| {
        s.contains("Stopped")
    });
    tmux.type_line("bg");
    tmux.type_line("echo typed-after-bg");
    tmux.wait_screen("the shell's answer", Duration::from_secs(5), |s| {
        s.lines().any(|line| line == "typed-after-bg")
    });
    // The display is looked at once a second: three looks.
    std::thread::sleep(Duration::from_millis(3200));
    let screen = tmux.screen();
    assert!(
        !screen.contains(" running · "),
        "drawn in the background:\n{screen}"
    );
    assert!(
        screen.lines().any(|line| line == "typed-after-bg"),
        "{screen}"
    );
    tmux.type_line("fg");
    tmux.wait_screen("the display after fg", Duration::from_secs(5), |s| {
        s.contains(" running · ")
    });
    scratch.write("go", "");
    let report = ended(&scratch, &tmux, Duration::from_secs(20));
    assert_eq!(report.summary.exit_code, 0);
    assert_eq!(report.jobs.len(), 1);
}

#[test]
fn a_job_waiting_for_its_retry_is_counted_as_queued() {
    let scratch = Scratch::new();
    let Some(tmux) = Tmux::start("retry_queued", 120, 30, scratch.path()) else {
        return;
    };
    scratch.write(
        "jobs",
        "r\ttouch \"$D/tried\"; [ -e \"$D/go\" ]\n\
         other\tuntil [ -e \"$D/go\" ]; do sleep 0.05; done\n",
    );
    tmux.type_line(&lanes_line(
        "--progress always --retries 1 --retry-delay 30s \"$D/jobs\"",
        scratch.path(),
    ));
    scratch.wait_for("tried", Duration::from_secs(10));
    // r's first try failed: it waits for its retry, queued again; other runs.
    tmux.wait_screen("the retry counted", Duration::from_secs(5), |s| {
        s.contains("0/2 done · 1 running · 1 queued")
    });
    tmux.key("C-c");
    let report = ended(&scratch, &tmux, Duration::from_secs(20));
    assert_eq!(report.jobs.len(), 2);
}

/// The counts of every status line in `raw` (what was written to the terminal) that tells the
/// total `total`: (done, running, stopped, queued, and the job lines under it, `  [key]`).
fn status_counts(raw: &str, total: usize) -> Vec<[usize; 5]> {
    let marker = format!("/{total} done · ");
    let mut counts = Vec::new();
    let mut rest = raw;
    while let Some(at) = rest.find(&marker) {
        let digits = rest[..at]
            .bytes()
            .rev()
            .take_while(u8::is_ascii_digit)
            .count();
        let done: usize = rest[at - digits..at].parse().unwrap();
        let after = &rest[at + marker.len()..];
        // Up to the failed count: `N running · [N stopped · ]N queued`.
        let line = &after[..after.find(" failed").expect("a whole status line")];
        let line = &line[..line.rfind(" · ").expect("a failed count")];
        let mut parts = [done, 0, 0, 0, 0];
        for part in line.split(" · ") {
            let (n, what) = part
                .split_once(' ')
                .unwrap_or_else(|| panic!("{part:?} in {line:?}"));
            let slot = match what {
                "running" => 1,
                "stopped" => 2,
                "queued" => 3,
                other => panic!("{other:?} in {line:?}"),
            };
            parts[slot] = n.parse().unwrap();
        }
        // The frame's job lines: up to the next frame's status line, or the summary.
        let frame = &after[..after.find(&marker).unwrap_or(after.len())];
        let frame = &frame[..frame.find("lanes: ").unwrap_or(frame.len())];
        parts[4] = frame.matches("  [").count();
        counts.push(parts);
        rest = after;
    }
    counts
}

#[test]
fn every_frame_counts_each_job_once() {
    let scratch = Scratch::new();
    let Some(tmux) = Tmux::start("each_once", 120, 30, scratch.path()) else {
        return;
    };
    let total = 3_000;
    let jobs: String = (0..total).map(|i| format!("k{}\ttrue\n", i % 8)).collect();
    scratch.write("jobs", jobs);
    // Every byte written to the pane, escape sequences and all: each frame drawn.
    let raw = scratch.join("raw");
    let piped = tmux.run(&[
        "pipe-pane",
        "-o",
        &format!("cat >> {}", sh_quote(raw.to_str().unwrap())),
    ]);
    assert!(piped.status.success());
    tmux.type_line(&lanes_line(
        "--progress always -j 4 \"$D/jobs\"",
        scratch.path(),
    ));
    let report = ended(&scratch, &tmux, Duration::from_secs(60));
    assert_eq!(report.jobs.len(), total);
    let raw = fs::read_to_string(&raw).unwrap();
    let frames = status_counts(&raw, total);
    assert!(frames.len() >= 3, "too few frames to tell:\n{raw}");
    // Each job is done, running, stopped or queued: never in two of them, never in none; and
    // each running or stopped one has its line.
    let wrong: Vec<_> = frames
        .iter()
        .filter(|[done, running, stopped, queued, lines]| {
            done + running + stopped + queued != total || running + stopped != *lines
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {} frames do not add up to {total} or do not show a line per running job \
         (done, running, stopped, queued, lines): {wrong:?}",
        wrong.len(),
        frames.len()
    );
}

#[test]
fn a_job_past_its_timeout_shows_as_stopping_until_its_grace_period_ends() {
    let scratch = Scratch::new();
    let Some(tmux) = Tmux::start("timeout_shown", 120, 30, scratch.path()) else {
        return;
    };
    // It ignores SIGTERM: it lives on through its grace period, until SIGKILL.
    scratch.write(
        "jobs",
        "slow\ttrap '' TERM; touch \"$D/up\"; sleep 30\n\
         quick\tsleep 30\n",
    );
    tmux.type_line(&lanes_line(
        "--progress always --timeout 1 --grace 3 \"$D/jobs\"",
        scratch.path(),
    ));
    scratch.wait_for("up", Duration::from_secs(10));
    let screen = tmux.wait_screen("the timeout's stop shown", Duration::from_secs(10), |s| {
        s.contains("[slow]") && s.contains("stopping (timeout): trap")
    });
    assert!(
        !screen.contains("[quick]") || screen.contains("stopping (timeout): sleep 30"),
        "{screen}"
    );
    let report = ended(&scratch, &tmux, Duration::from_secs(20));
    assert_eq!(report.jobs.len(), 2);
    assert!(report
        .jobs
        .iter()
        .all(|job| job.reason.as_deref() == Some("timeout")));
}

/// A terminal that takes nothing (Ctrl-S: XOFF) holds the display and the output written
/// to it, not the run: a job's timeout still stops it on time, and its record is written.
#[test]
fn a_terminal_that_takes_nothing_holds_the_display_not_the_timeouts() {
    let scratch = Scratch::new();
    let Some(tmux) = Tmux::start("xoff", 120, 30, scratch.path()) else {
        return;
    };
    scratch.write(
        "jobs",
        "victim\ttouch \"$D/up\"; exec sleep 60\n\
         noisy\tyes 'a line of output that fills the terminal' | head -c 2000000\n",
    );
    tmux.type_line(&lanes_line(
        "--progress always -j 2 --timeout 4 --grace 1 \"$D/jobs\"",
        scratch.path(),
    ));
    scratch.wait_for("up", Duration::from_secs(10));
    tmux.key("C-s");
    let report = scratch.join("report");
    let victim = wait_until(Duration::from_secs(20), || {
        fs::read_to_string(&report).is_ok_and(|text| text.contains("\"key\":\"victim\""))
    });
    tmux.key("C-q");
    assert!(
        victim,
        "no record of the timed-out job while the terminal took nothing"
    );
    let report = ended(&scratch, &tmux, Duration::from_secs(60));
    let job = report.job(1);
    assert_eq!(job.reason.as_deref(), Some("timeout"));
    let duration = job.duration_ms.unwrap();
    assert!((4000..6000).contains(&duration), "{duration} ms");
}

#[test]
fn after_a_sigstop_and_fg_the_display_starts_afresh_below_the_shell_without_echo() {
    let scratch = Scratch::new();
    let Some(tmux) = Tmux::start("sigstop_fg", 120, 30, scratch.path()) else {
        return;
    };
    // The job's shell is lanes' child.
    scratch.write("jobs", "a\techo $PPID > \"$D/lanes.pid\"; sleep 30\n");
    tmux.type_line(&lanes_line("--progress always \"$D/jobs\"", scratch.path()));
    scratch.wait_for("lanes.pid", Duration::from_secs(10));
    tmux.wait_screen("the display", Duration::from_secs(10), |s| {
        s.contains("1 running")
    });
    // A stop lanes cannot see coming: the shell takes the terminal, with echo on.
    let lanes = scratch.pid("lanes.pid");
    let stopped = Command::new("kill")
        .args(["-STOP", &lanes.to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    tmux.wait_screen(
        "the shell saying lanes stopped",
        Duration::from_secs(5),
        |s| s.contains("Stopped"),
    );
    tmux.type_line("fg");
    // lanes draws a new frame below what the shell wrote (`fg`, the command), not over it.
    let screen = tmux.wait_screen("a frame below `fg`", Duration::from_secs(5), |s| {
        s.split_once("$ fg\n")
            .is_some_and(|(_, below)| below.contains(" running · "))
    });
    let below = screen.split_once("$ fg\n").unwrap().1;
    assert!(
        below.contains("--progress always"),
        "the shell's line was drawn over:\n{screen}"
    );
    // And echo is off again while the display is drawn.
    let tty =
        String::from_utf8(tmux.run(&["display-message", "-p", "#{pane_tty}"]).stdout).unwrap();
    let echo_off = || {
        let settings = Command::new("stty")
            .args(["-a", "-F", tty.trim()])
            .output()
            .unwrap();
        String::from_utf8_lossy(&settings.stdout)
            .split_whitespace()
            .any(|flag| flag == "-echo")
    };
    assert!(
        wait_until(Duration::from_secs(5), echo_off),
        "echo stayed on after fg:\n{}",
        tmux.screen()
    );
    tmux.key("C-c");
    let report = ended(&scratch, &tmux, Duration::from_secs(20));
    assert_eq!(report.jobs.len(), 1);
}

#[test]
fn after_a_sigstop_and_a_sigcont_without_fg_nothing_is_drawn_over_the_shell() {
    let scratch = Scratch::new();
    let Some(tmux) = Tmux::start("sigstop_cont", 120, 30, scratch.path()) else {
        return;
    };
    // A clock: t1, t2, … five a second, for as long as the job runs.
    scratch.write(
        "jobs",
        "a\techo $PPID > \"$D/lanes.pid\"; i=0; \
         while :; do i=$((i+1)); touch \"$D/t$i\"; sleep 0.2; done\n",
    );
    tmux.type_line(&lanes_line("--progress always \"$D/jobs\"", scratch.path()));
    scratch.wait_for("lanes.pid", Duration::from_secs(10));
    tmux.wait_screen("the display", Duration::from_secs(10), |s| {
        s.contains("1 running")
    });
    let lanes = scratch.pid("lanes.pid").to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &lanes])
        .status()
        .unwrap()
        .success());
    tmux.wait_screen(
        "the shell saying lanes stopped",
        Duration::from_secs(5),
        |s| s.contains("Stopped"),
    );
    assert!(Command::new("kill")
        .args(["-CONT", &lanes])
        .status()
        .unwrap()
        .success());
    // Two seconds of the job's clock later: past any once-a-second look.
    let now = (1..)
        .take_while(|i| scratch.exists(&format!("t{i}")))
        .count();
    scratch.wait_for(&format!("t{}", now + 10), Duration::from_secs(10));
    let screen = tmux.screen();
    let below = screen.split_once("Stopped").map_or("", |(_, below)| below);
    assert!(
        !below.contains(" running · "),
        "drawn over the shell while in the background:\n{screen}"
    );
    tmux.type_line("fg");
    tmux.wait_screen("the display after fg", Duration::from_secs(5), |s| {
        s.split_once("$ fg\n")
            .is_some_and(|(_, b)| b.contains(" running · "))
    });
    tmux.key("C-c");
    let report = ended(&scratch, &tmux, Duration::from_secs(20));
    assert_eq!(report.jobs.len(), 1);
}

#[test]
fn raw_output_s_unfinished_line_is_not_drawn_over_by_the_display() {
    let scratch = Scratch::new();
    let Some(tmux) = Tmux::start("raw_partial", 120, 30, scratch.path()) else {
        return;
    };
    scratch.write(
        "jobs",
        "p\tprintf 'partial-'; touch \"$D/printed\"; \
         until [ -e \"$D/go\" ]; do sleep 0.05; done; echo line\n",
    );
    tmux.type_line(&lanes_line(
        "--progress always --output raw \"$D/jobs\"",
        scratch.path(),
    ));
    scratch.wait_for("printed", Duration::from_secs(10));
    // A frame drawn a second after the job's start, well after its `printf`.
    tmux.wait_screen("a frame after the printf", Duration::from_secs(10), |s| {
        s.contains("[p]   1s")
    });
    scratch.write("go", "");
    let report = ended(&scratch, &tmux, Duration::from_secs(20));
    assert_eq!(report.jobs.len(), 1);
    let history = tmux.history();
    assert!(
        history.lines().any(|line| line == "partial-line"),
        "the line is not whole:\n{history}"
    );
}

#[test]
fn a_job_reading_the_terminal_shows_as_stopped_and_says_why() {
    let scratch = Scratch::new();
    let Some(tmux) = Tmux::start("tty_read", 120, 30, scratch.path()) else {
        return;
    };
    scratch.write(
        "jobs",
        "asks\techo $$ > \"$D/asks.pid\"; read x < /dev/tty\n\
         works\tsleep 30\n",
    );
    tmux.type_line(&lanes_line("--progress always \"$D/jobs\"", scratch.path()));
    let screen = tmux.wait_screen("the stopped job", Duration::from_secs(10), |s| {
        s.contains("STOPPED (SIGTTIN: waiting for terminal input)")
    });
    let stopped: Vec<&str> = screen.lines().filter(|l| l.contains("STOPPED")).collect();
    assert_eq!(stopped.len(), 1, "{screen}");
    assert!(stopped[0].starts_with("  [asks]"), "{screen}");
    // Separate buckets: the stopped job is not counted as running too.
    assert!(screen.contains("1 running · 1 stopped"), "{screen}");
    tmux.key("C-c");
    let report = ended(&scratch, &tmux, Duration::from_secs(20));
    assert_eq!(report.summary.exit_code, 130);
    let asks = report.by_key("asks")[0];
    assert_eq!(asks.outcome, "interrupted");
    let error = asks.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("SIGTTIN: waiting for terminal input"),
        "{asks:?}"
    );
    // The summary says it too.
    let history = tmux.history();
    assert!(
        history
            .lines()
            .any(|l| l.contains("[asks]") && l.contains("stopped (SIGTTIN")),
        "{history}"
    );
}

#[test]
fn ctrl_c_says_what_is_being_stopped_and_leaves_no_status_line_behind() {
    let scratch = Scratch::new();
    let Some(tmux) = Tmux::start("ctrl_c", 100, 30, scratch.path()) else {
        return;
    };
    // The job ignores SIGINT: it runs on through the grace period.
    scratch.write(
        "jobs",
        "stubborn\ttrap '' INT; touch \"$D/ready\"; sleep 60\n\
         queued\ttrue\n",
    );
    tmux.type_line(&lanes_line(
        "--progress always -j 1 --max-queued 1 --grace 60 \"$D/jobs\"",
        scratch.path(),
    ));
    scratch.wait_for("ready", Duration::from_secs(10));
    tmux.wait_screen("the display", Duration::from_secs(10), |s| {
        s.contains("1 running")
    });
    // Typing and Enter during the run move nothing.
    tmux.type_line("typed");
    tmux.key("C-c");
    tmux.wait_screen("the stopping line", Duration::from_secs(10), |s| {
        s.contains("stopping 1 job… (Ctrl-C again to kill)")
    });
    tmux.key("C-c");
    ended(&scratch, &tmux, Duration::from_secs(20));
    let history = tmux.history();
    // No frame of the display is left in the scrollback.
    for line in history.lines() {
        assert!(
            !line.contains(" running · ")
                && !line.contains("stopping")
                && !line.starts_with("  [stubborn]"),
            "a line of the display stayed behind: {line:?}\n{history}"
        );
    }
    let report = Report::must_parse(&scratch.read("report"));
    assert_eq!(report.summary.exit_code, 130);
    assert_eq!(report.by_key("stubborn")[0].outcome, "interrupted");
}

#[test]
fn after_a_resize_the_display_fits_and_counts_the_jobs_not_shown() {
    let scratch = Scratch::new();
    let Some(tmux) = Tmux::start("resize", 150, 40, scratch.path()) else {
        return;
    };
    let mut jobs = String::new();
    for n in 1..=12 {
        jobs.push_str(&format!(
            "job-{n}\ttouch \"$D/started-{n}\"; : a command long enough to be cut at any width \
             of the terminal it is shown on; {}\n",
            await_file("go")
        ));
    }
    scratch.write("jobs", jobs);
    tmux.type_line(&lanes_line(
        "--progress always -j 12 \"$D/jobs\"",
        scratch.path(),
    ));
    tmux.wait_screen("12 running jobs", Duration::from_secs(15), |s| {
        s.lines().filter(|l| l.starts_with("  [job-")).count() == 12
    });
    tmux.resize(40, 10);
    // 10 rows: 7 for jobs, so 6 job lines and the count of the other 6. tmux reflows the old
    // frame's rows first; the display is laid out again once its count is the last row.
    let screen = tmux.wait_screen("the display laid out again", Duration::from_secs(5), |s| {
        s.lines().rfind(|l| !l.trim().is_empty()) == Some("  … and 6 more running")
    });
    let rows: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
    let status = rows
        .iter()
        .position(|row| row.contains(" 0/12 done · 12 running"))
        .unwrap_or_else(|| panic!("no status line:\n{screen}"));
    // Above the display, only what the shell showed: no row of an earlier frame is left.
    for row in &rows[..status] {
        assert!(
            !["job-", "command long", "until", "done ·"]
                .iter()
                .any(|part| row.contains(part)),
            "a row of an earlier frame stayed behind: {row:?}\n{screen}"
        );
    }
    // Then 6 job lines and the count: no row is the wrapped tail of a line.
    let display = &rows[status + 1..];
    assert_eq!(display.len(), 7, "{screen}");
    for row in &display[..6] {
        assert!(
            row.starts_with("  [job-"),
            "unexpected row {row:?}:\n{screen}"
        );
    }
    assert_eq!(display[6], "  … and 6 more running");
    for row in &rows[status..] {
        assert!(row.chars().count() < 40, "{row:?} fills the width");
    }
    // Wider again: every job is shown, one row each. (What the terminal pushed into its
    // scrollback when it narrowed, it may bring back above the display: that is out of reach.)
    tmux.resize(120, 30);
    tmux.wait_screen("every job shown again", Duration::from_secs(5), |s| {
        let rows: Vec<&str> = s.lines().filter(|l| !l.trim().is_empty()).collect();
        rows.len() > 13
            && rows[rows.len() - 13].contains("0/12 done · 12 running")
            && rows[rows.len() - 12..]
                .iter()
                .all(|row| row.starts_with("  [job-") && row.chars().count() < 120)
    });
    scratch.write("go", "");
    let report = ended(&scratch, &tmux, Duration::from_secs(30));
    assert_eq!(report.summary.exit_code, 0);
    assert_eq!(report.summary.succeeded, 12);
}

#[test]
fn with_stdout_piped_to_the_terminal_the_display_erases_nothing() {
    let scratch = Scratch::new();
    let Some(tmux) = Tmux::start("tee", 100, 30, scratch.path()) else {
        return;
    };
    let mut jobs = String::new();
    for n in 1..=3 {
        jobs.push_str(&format!(
            "k{n}\techo output-of-{n}; touch \"$D/said-{n}\"; {}\n",
            await_file("go")
        ));
    }
    scratch.write("jobs", jobs);
    let line = lanes_line("-j 3 \"$D/jobs\" | cat", scratch.path());
    tmux.type_line(&line);
    for n in 1..=3 {
        scratch.wait_for(&format!("said-{n}"), Duration::from_secs(10));
    }
    let screen = tmux.wait_screen("every job's output", Duration::from_secs(10), |s| {
        (1..=3).all(|n| s.contains(&format!("[k{n}] output-of-{n}")))
    });
    assert!(!screen.contains(" running · "), "a live display:\n{screen}");
    scratch.write("go", "");
    let report = ended(&scratch, &tmux, Duration::from_secs(30));
    let history = tmux.history();
    for n in 1..=3 {
        assert!(
            history.contains(&format!("[k{n}] output-of-{n}")),
            "output {n} was erased:\n{history}"
        );
    }
    assert!(history.contains("lanes: 3 jobs in"), "{history}");
    assert_eq!(report.summary.succeeded, 3);
}

/// One job (`sleep 1`, its pid in `a.pid`, then `a.done`) run by `lanes ARGS` in a new PID
/// namespace, started from a tmux pane as `unshare … COMMAND`, where `{lanes}` in `command`
/// stands for lanes and its arguments (`{quoted}` for the same as one shell word); Ctrl-Z once
/// the job runs, and the shell has said the job stopped. `None` (said) where PID namespaces or
/// tmux cannot be had.
fn ctrl_z_under_unshare(test: &str, command: &str, args: &str) -> Option<(Scratch, Tmux)> {
    if !pid_namespaces(test) {
        return None;
    }
    let scratch = Scratch::new();
    let tmux = Tmux::start(test, 120, 30, scratch.path())?;
    scratch.write(
        "jobs",
        "a\techo $$ > \"$D/a.pid\"; sleep 1; touch \"$D/a.done\"\n",
    );
    let lanes = format!(
        "{} --progress always {args} --report \"$D/report\" \"$D/jobs\"",
        sh_quote(BIN)
    );
    tmux.type_line(&format!(
        "D={}; export D; unshare --pid --fork --mount-proc --kill-child {}",
        sh_quote(scratch.path().to_str().unwrap()),
        command
            .replace("{quoted}", &sh_quote(&lanes))
            .replace("{lanes}", &lanes)
    ));
    scratch.wait_for("a.pid", Duration::from_secs(10));
    tmux.key("C-z");
    tmux.wait_screen(
        "the shell saying the job stopped",
        Duration::from_secs(5),
        |s| s.contains("Stopped"),
    );
    Some((scratch, tmux))
}

/// lanes in a PID namespace under a shell there, its process group (the `unshare`'s) outside
/// it, where neither its own group nor the terminal's foreground one can be seen: Ctrl-Z with
/// the display on stops it and its job, and `fg` continues both, once.
#[test]
fn ctrl_z_then_fg_in_a_pid_namespace_with_the_display_on() {
    let Some((scratch, tmux)) = ctrl_z_under_unshare(
        "ctrl_z_then_fg_in_a_pid_namespace_with_the_display_on",
        "sh -c {quoted}",
        "--timeout 30",
    ) else {
        return;
    };
    tmux.type_line("fg");
    let report = ended(&scratch, &tmux, Duration::from_secs(20));
    assert_eq!(report.summary.exit_code, 0, "{}", tmux.history());
    assert_eq!(report.jobs.len(), 1);
    assert_eq!(report.jobs[0].outcome, "succeeded");
    assert!(scratch.exists("a.done"));
}

/// lanes as the first process of a PID namespace cannot be stopped: Ctrl-Z (which stops the
/// `unshare` in front of it) changes nothing for lanes, its job runs to its end meanwhile,
/// well within its timeout, and lanes ends as soon as `fg` lets the `unshare` wait for it.
#[test]
fn ctrl_z_changes_nothing_for_lanes_as_a_namespace_init() {
    let Some((scratch, tmux)) = ctrl_z_under_unshare(
        "ctrl_z_changes_nothing_for_lanes_as_a_namespace_init",
        "{lanes}",
        "--timeout 10",
    ) else {
        return;
    };
    // lanes goes on: its job ends and its record is written while the shell has the terminal.
    scratch.wait_for("a.done", Duration::from_secs(8));
    let report = report_whole(&scratch, &tmux, Duration::from_secs(8));
    assert_eq!(report.summary.exit_code, 0, "{}", tmux.history());
    assert_eq!(report.jobs[0].outcome, "succeeded");
    tmux.type_line("fg");
    prompt_back(&tmux, Duration::from_secs(10));
}

#[test]
fn ctrl_c_while_jobs_are_typed_leaves_the_summary_on_a_line_of_its_own() {
    let scratch = Scratch::new();
    let Some(tmux) = Tmux::start("typed_ctrl_c", 120, 30, scratch.path()) else {
        return;
    };
    // The jobs are typed at the terminal: a whole line, then half of one when Ctrl-C comes.
    tmux.type_line(&lanes_line("", scratch.path()));
    tmux.wait_screen("lanes reading", Duration::from_secs(10), |s| {
        s.contains("reading jobs from the terminal")
    });
    tmux.type_line("a\ttouch \"$D/up\"; exec sleep 30");
    scratch.wait_for("up", Duration::from_secs(10));
    tmux.run(&["send-keys", "-l", "b\techo half"]);
    tmux.wait_screen("the half line", Duration::from_secs(5), |s| {
        s.contains("echo half")
    });
    tmux.key("C-c");
    let report = ended(&scratch, &tmux, Duration::from_secs(20));
    assert_eq!(report.jobs.len(), 1);
    let screen = tmux.screen();
    let summary = screen
        .lines()
        .find(|l| l.contains("lanes: 1 job in "))
        .unwrap_or_else(|| panic!("no summary:\n{screen}"));
    assert!(summary.starts_with("lanes: "), "{screen}");
}

/// A terminal that goes away (its window closed, an ssh session lost) while the display is
/// drawn: lanes stops on the SIGHUP as on any stop signal, and a job's last words, which can
/// no longer be written anywhere, end nothing early. Every job gets its record, the one that
/// ignores SIGHUP is killed after the grace period, and the summary says SIGHUP.
#[test]
fn a_terminal_that_hangs_up_under_the_display_still_gets_every_job_stopped_and_recorded() {
    let scratch = Scratch::new();
    let Some(tmux) = Tmux::start("hang_up", 100, 30, scratch.path()) else {
        return;
    };
    scratch.write(
        "jobs",
        "talks\ttrap 'echo cleaning up; echo more >&2; exit 1' HUP TERM INT; \
         touch \"$D/up-talks\"; sleep 30 & wait\n\
         deaf\ttrap '' HUP TERM INT; touch \"$D/up-deaf\"; sleep 30\n",
    );
    tmux.type_line(&lanes_line(
        "--progress always -j 2 --grace 1 \"$D/jobs\"",
        scratch.path(),
    ));
    scratch.wait_for("up-talks", Duration::from_secs(10));
    scratch.wait_for("up-deaf", Duration::from_secs(10));
    tmux.wait_screen("the display", Duration::from_secs(10), |s| {
        s.contains("2 running")
    });
    // The pane's terminal closes: its shell, then lanes, get SIGHUP.
    tmux.run(&["kill-server"]);
    let mut report = None;
    assert!(
        wait_until(Duration::from_secs(20), || {
            report = fs::read_to_string(scratch.join("report"))
                .ok()
                .and_then(|text| Report::parse(&text).ok());
            report.is_some()
        }),
        "no whole report: {:?}",
        fs::read_to_string(scratch.join("report"))
    );
    let report = report.unwrap();
    assert_eq!(report.summary.exit_code, 129, "{report:?}");
    for key in ["talks", "deaf"] {
        let job = &report.by_key(key)[0];
        assert_eq!(
            (job.outcome.as_str(), job.reason.as_deref()),
            ("interrupted", Some("shutdown")),
            "{key}"
        );
    }
}

/// Whether a thread of `pid` is held in a write to a terminal that takes nothing
/// (`wait_woken`, where the kernel parks a writer to a full terminal).
fn thread_held_in_a_write(pid: i32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(Result::ok).any(|task| {
        fs::read_to_string(task.path().join("wchan")).is_ok_and(|w| w.trim() == "wait_woken")
    })
}

/// A terminal that stops taking output (Ctrl-S; a stalled ssh session) holds the display in a
/// write. A stop signal sent from elsewhere (a CI timeout, `kill`) still ends the run: the
/// display is given up on as a reader of lanes' output is, and the report gets its summary.
#[test]
fn a_stop_signal_ends_a_run_whose_terminal_takes_nothing() {
    let scratch = Scratch::new();
    let Some(tmux) = Tmux::start("xoff", 100, 30, scratch.path()) else {
        return;
    };
    scratch.write(
        "jobs",
        "flood\ttouch \"$D/up\"; while :; do echo flood line; done\n",
    );
    tmux.type_line(&lanes_line(
        "--progress always --grace 1 \"$D/jobs\"",
        scratch.path(),
    ));
    scratch.wait_for("up", Duration::from_secs(10));
    let first = fs::read_to_string(scratch.join("report")).unwrap_or_default();
    let run: serde_json::Value =
        serde_json::from_str(first.lines().next().expect("the run record")).unwrap();
    let pid = i32::try_from(run["pid"].as_i64().expect("lanes' pid")).unwrap();
    tmux.key("C-s");
    assert!(
        wait_until(Duration::from_secs(20), || thread_held_in_a_write(pid)),
        "lanes never waited for the terminal"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let report = report_whole(&scratch, &tmux, Duration::from_secs(40));
    assert_eq!(report.summary.exit_code, 143);
    assert_eq!(report.by_key("flood")[0].outcome, "interrupted");
    // The terminal takes output again, and lanes is gone.
    tmux.key("C-q");
    assert!(wait_until(Duration::from_secs(10), || state(pid).is_none()));
}
