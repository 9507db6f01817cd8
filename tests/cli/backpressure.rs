//! A destination that stops reading (a paused pager, a slow consumer) holds back job output
//! through the jobs' pipes, never lanes' supervision: timeouts, stop signals, exit statuses and
//! durations stay those of the jobs.

use std::io::Read;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::*;

const WAIT: Duration = Duration::from_secs(10);

/// Writes `$D/pid-KEY`, then lines for ever (`yes`, which any stop signal ends).
fn flood() -> &'static str {
    "echo $$ > \"$D/pid-$LANES_KEY\"; exec yes aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
}

#[test]
fn a_blocked_stdout_delays_output_but_not_timeouts_outcomes_or_durations() {
    let scratch = Scratch::new();
    let mut running = Run::new()
        .scratch(&scratch)
        .own_stdout()
        .args(["-j", "2", "--timeout", "1", "--grace", "0.5"])
        .stdin(format!(
            "a\t{}\nb\tsleep 0.2; echo b-done; touch \"$D/b-ended\"\n",
            flood()
        ))
        .spawn();
    // Nobody reads lanes' stdout yet: the timeout still reaches the flooding job.
    let stdout = running.take_stdout();
    scratch.wait_for("b-ended", WAIT);
    scratch.wait_for("pid-a", WAIT);
    let a = scratch.pid("pid-a");
    assert!(wait_until(WAIT, || !alive(a)), "the timeout stops job a");
    // Now the reader comes back.
    let reader = read_in_background(stdout);
    let out = running.wait();
    let text = String::from_utf8(reader.join().unwrap()).unwrap();
    out.code(1);
    let a = out.job(1);
    assert_eq!(a.result(), ("interrupted", Some("timeout")), "{a:?}");
    let b = out.job(2);
    assert_eq!(b.result(), ("succeeded", None), "{b:?}");
    assert_eq!(b.exit_code, Some(0));
    assert!(b.duration_ms.unwrap() < 900, "{b:?}");
    assert!(text.contains("[b] b-done\n"));
    assert_eq!(a.signal.as_deref(), Some("SIGTERM"), "{a:?}");
    // Whole lines only, none lost from the job that finished.
    assert!(text
        .lines()
        .all(|line| line == "[b] b-done" || line == "[a] aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
}

/// Two jobs `a` and `b` that [`flood`] lanes' stdout, returned (not read) once the pipe to
/// this test is full (64 KiB): from then on lanes' stdout is blocked. `grace` is `--grace`.
fn floods_blocking_stdout(grace: &str) -> (Scratch, Running, std::process::ChildStdout) {
    let scratch = Scratch::new();
    let mut running = Run::new()
        .scratch(&scratch)
        .own_stdout()
        .args(["-j", "2", "--grace", grace])
        .stdin(format!("a\t{job}\nb\t{job}\n", job = flood()))
        .spawn();
    let stdout = running.take_stdout();
    scratch.wait_for("pid-a", WAIT);
    scratch.wait_for("pid-b", WAIT);
    assert!(wait_until(WAIT, || unread_bytes(&stdout) >= 60_000));
    (scratch, running, stdout)
}

#[test]
fn ctrl_c_reaches_jobs_while_stdout_is_blocked_and_a_second_one_ends_the_run() {
    let (scratch, running, stdout) = floods_blocking_stdout("5");
    let pids = [scratch.pid("pid-a"), scratch.pid("pid-b")];
    running.signal(Signal::SIGINT);
    assert!(
        wait_until(WAIT, || pids.iter().all(|&pid| !alive(pid))),
        "SIGINT reaches both jobs"
    );
    // Their output still waits for the reader; a second Ctrl-C gives up on it.
    running.signal(Signal::SIGINT);
    let out = running.wait();
    drop(stdout);
    out.code(130);
    for seq in [1, 2] {
        let job = out.job(seq);
        assert_eq!(job.result(), ("interrupted", Some("shutdown")), "{job:?}");
        assert_eq!(job.signal.as_deref(), Some("SIGINT"), "{job:?}");
    }
    assert!(out.elapsed < Duration::from_secs(8), "{:?}", out.elapsed);
}

#[test]
fn one_stop_signal_ends_a_run_whose_reader_stalled_for_good() {
    // A pipe nobody reads (a dead dashboard): one SIGTERM stops the jobs, and their output
    // that the reader takes nothing of for 5 s is dropped; lanes ends without a second signal.
    let (_scratch, running, stdout) = floods_blocking_stdout("1");
    running.signal(Signal::SIGTERM);
    let out = running.wait();
    drop(stdout);
    out.code(143);
    for seq in [1, 2] {
        let job = out.job(seq);
        assert_eq!(job.result(), ("interrupted", Some("shutdown")), "{job:?}");
    }
    assert!(out.elapsed < Duration::from_secs(20), "{:?}", out.elapsed);
    assert!(
        out.stderr()
            .contains("output that its reader did not take was dropped"),
        "{}",
        out.stderr()
    );
}

#[test]
fn after_one_stop_signal_a_slow_reader_that_still_reads_gets_every_byte() {
    // 300 kB wait in lanes and in the pipe (64 KiB) for a reader that reads 32 kB a second:
    // more than 5 s of reading, but never 5 s without taking anything.
    let scratch = Scratch::new();
    let mut running = Run::new()
        .scratch(&scratch)
        .own_stdout()
        .stdin(
            "a\thead -c 300000 /dev/zero | tr '\\0' a | fold -w 99; touch \"$D/written\"; \
             exec sleep 30\n",
        )
        .spawn();
    let mut stdout = running.take_stdout();
    scratch.wait_for("written", WAIT);
    running.signal(Signal::SIGINT);
    let text = read_slowly(&mut stdout, 8192);
    let out = running.wait();
    out.code(130);
    let body: String = String::from_utf8(text)
        .unwrap()
        .lines()
        .map(|line| line.strip_prefix("[a] ").unwrap_or("?"))
        .collect();
    assert_eq!(body.len(), 300_000, "{:?}", out.elapsed);
    assert!(body.bytes().all(|b| b == b'a'));
}

#[test]
fn after_one_stop_signal_jobs_whose_output_takes_turns_at_a_slow_reader_lose_none() {
    const JOBS: usize = 30;
    // Thirty jobs whose output fills lanes' queue for stdout, read at 64 kB a second: after the
    // stop each job's output waits its turn for longer than 5 s, while the reader never stops
    // taking something. Nothing is dropped.
    let scratch = Scratch::new();
    let line = format!("{}\n", "b".repeat(98));
    scratch.write("block", line.repeat(650));
    let job = "echo $$ > \"$D/pid-$LANES_KEY\"; while :; do cat \"$D/block\"; done";
    let input: String = (1..=JOBS).map(|i| format!("k{i}\t{job}\n")).collect();
    let mut running = Run::new()
        .scratch(&scratch)
        .own_stdout()
        .args(["-j", &JOBS.to_string()])
        .stdin(input)
        .spawn();
    let mut stdout = running.take_stdout();
    for i in 1..=JOBS {
        scratch.wait_for(&format!("pid-k{i}"), WAIT);
    }
    // lanes' queue for stdout is full, and so is each job's share of what waits.
    assert!(wait_until(WAIT, || unread_bytes(&stdout) >= 60_000));
    std::thread::sleep(Duration::from_millis(500));
    running.signal(Signal::SIGINT);
    let text = read_slowly(&mut stdout, 16384);
    let out = running.wait();
    out.code(130);
    assert!(
        !out.stderr().contains("was dropped"),
        "{:?}: {}",
        out.elapsed,
        out.stderr()
    );
    assert!(text.len() > 1_000_000, "{} bytes", text.len());
    assert!(text.ends_with(b"\n"));
}

/// Reads `stdout` to its end at most `chunk` bytes every 250 ms: a slow reader that never
/// stops reading.
fn read_slowly(stdout: &mut std::process::ChildStdout, chunk: usize) -> Vec<u8> {
    let mut text = Vec::new();
    let mut buffer = vec![0u8; chunk];
    loop {
        let n = stdout.read(&mut buffer).unwrap();
        if n == 0 {
            return text;
        }
        text.extend_from_slice(&buffer[..n]);
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Bytes waiting in a pipe (FIONREAD, ioctl_list(2)).
fn unread_bytes(pipe: &impl std::os::fd::AsRawFd) -> usize {
    let mut count: nix::libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which points at `count`.
    let ok = unsafe { nix::libc::ioctl(pipe.as_raw_fd(), nix::libc::FIONREAD, &mut count) } == 0;
    if ok {
        usize::try_from(count).unwrap_or(0)
    } else {
        0
    }
}

/// A run whose one job has ended, with every record written, while its output still waits
/// for lanes' stdout (returned, not read). The job's 100 kB are more than the pipe to the
/// reader holds (64 KiB) and fit in what lanes holds back for one stream whatever the sizes of
/// its reads (a 64 KiB pending buffer). (More would depend on how the job's writes were cut
/// into reads.)
fn output_waiting_for_a_stalled_reader() -> (Running, std::process::ChildStdout) {
    let mut running = Run::new()
        .own_stdout()
        .stdin("a\thead -c 100000 /dev/zero | tr '\\0' a | fold -w 99\n")
        .spawn();
    let stdout = running.take_stdout();
    assert!(wait_until(WAIT, || running
        .report_so_far()
        .contains("\"type\":\"summary\"")));
    (running, stdout)
}

/// Reads `stdout` to its end on a thread of its own.
fn read_in_background(mut stdout: std::process::ChildStdout) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut text = Vec::new();
        stdout.read_to_end(&mut text).unwrap();
        text
    })
}

#[test]
fn a_run_whose_output_waits_for_a_stalled_reader_ends_at_a_stop_signal() {
    let (running, stdout) = output_waiting_for_a_stalled_reader();
    running.signal(Signal::SIGINT);
    let out = running.wait();
    drop(stdout);
    // The jobs decided the exit status, as the summary record says.
    out.code(0);
    assert_eq!(out.job(1).result(), ("succeeded", None));
    assert!(out.elapsed < Duration::from_secs(8), "{:?}", out.elapsed);
}

#[test]
fn a_ctrl_z_while_lanes_waits_for_a_reader_of_its_last_output_stops_lanes() {
    // Every job has ended and has its record; only its output waits for a reader that does
    // not read (a pager left paused). Ctrl-Z must stop lanes then too, as any program.
    let (running, stdout) = output_waiting_for_a_stalled_reader();
    let pid = running.pid();
    running.signal(Signal::SIGTSTP);
    assert!(
        wait_until(WAIT, || state(pid) == Some('T')),
        "lanes {:?} 10 s after SIGTSTP, waiting for its reader",
        state(pid)
    );
    running.signal(Signal::SIGCONT);
    assert!(wait_until(WAIT, || state(pid) != Some('T')));
    // The reader comes back: every byte of the job's output reaches it.
    let reader = read_in_background(stdout);
    let out = running.wait();
    let text = String::from_utf8(reader.join().unwrap()).unwrap();
    out.code(0);
    assert_eq!(out.job(1).result(), ("succeeded", None));
    let body: String = text
        .lines()
        .map(|line| line.strip_prefix("[a] ").unwrap_or("?"))
        .collect();
    assert_eq!(body.len(), 100_000);
    assert!(body.bytes().all(|b| b == b'a'));
}

#[test]
fn a_second_ctrl_c_ends_the_run_with_stdout_and_stderr_both_stalled() {
    let scratch = Scratch::new();
    let fifo = scratch.join("stderr.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // Held open for reading, never read: lanes' stderr stalls once the FIFO is full.
    let held = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&fifo)
        .unwrap();
    let mut running = Run::new()
        .scratch(&scratch)
        .own_stdout()
        .wrapper(&format!("exec 2>{}", sh_quote(fifo.to_str().unwrap())))
        .args(["-j", "2", "--grace", "20"])
        .stdin(
            "a\ttrap 'touch \"$D/int-a\"' INT TERM; echo $$ > \"$D/pid-a\"; seq 1 300000; sleep 30\n\
             b\ttrap 'touch \"$D/int-b\"' INT; echo $$ > \"$D/pid-b\"; seq 1 300000 >&2; sleep 30\n",
        )
        .spawn();
    let stdout = running.take_stdout();
    scratch.wait_for("pid-a", WAIT);
    scratch.wait_for("pid-b", WAIT);
    assert!(wait_until(WAIT, || unread_bytes(&stdout) >= 60_000
        && unread_bytes(&held) >= 60_000));
    running.signal(Signal::SIGINT);
    // Both shells trap SIGINT (their `seq` dies of it) and go on sleeping.
    scratch.wait_for("int-a", WAIT);
    scratch.wait_for("int-b", WAIT);
    // The second Ctrl-C kills them and ends the run at once, output unwritten.
    running.signal(Signal::SIGINT);
    let out = running.wait();
    drop((stdout, held));
    out.code(130);
    for seq in [1, 2] {
        let job = out.job(seq);
        assert_eq!(job.result(), ("interrupted", Some("shutdown")), "{job:?}");
    }
    assert!(out.elapsed < Duration::from_secs(10), "{:?}", out.elapsed);
}

#[test]
fn grouped_output_waiting_for_a_stalled_reader_holds_new_jobs_back() {
    let scratch = Scratch::new();
    let job = "touch \"$D/ran-$LANES_SEQ\"; head -c 1500000 /dev/zero | tr '\\0' a | fold -w 99";
    let input: String = (1..=10).map(|i| format!("k{i}\t{job}\n")).collect();
    let mut running = Run::new()
        .scratch(&scratch)
        .own_stdout()
        .args(["-j", "2", "--output", "grouped"])
        .stdin(input)
        .spawn();
    let stdout = running.take_stdout();
    let ran = |scratch: &Scratch| {
        (1..=10)
            .filter(|i| scratch.exists(&format!("ran-{i}")))
            .count()
    };
    assert!(wait_until(WAIT, || unread_bytes(&stdout) >= 60_000));
    // Two blocks waiting to be written (one per slot) stop new jobs: at most two running and
    // two written or waiting, never all ten, however long the reader stays away.
    assert!(!wait_until(Duration::from_secs(2), || ran(&scratch) > 5));
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let mut stdout = stdout;
        stdout.read_to_end(&mut text).unwrap();
        text
    });
    let out = running.wait();
    let text = reader.join().unwrap();
    out.code(0);
    assert_eq!(out.report().summary.succeeded, 10);
    // Every job's output, whole, once the reader is back (headers aside).
    let payload = text
        .split(|&b| b == b'\n')
        .filter(|line| !line.starts_with(b"==> "))
        .map(|line| line.iter().filter(|&&b| b == b'a').count())
        .sum::<usize>();
    assert_eq!(payload, 10 * 1_500_000);
}

/// A program that writes its stdout until the pipe to lanes stays full for 100 ms (lanes
/// holding back what its own stdout's reader has not taken), then ends: its last output is
/// still in lanes.
const FILLS_ITS_PIPE: &str = r#"import os, time
os.set_blocking(1, False)
lines = (b"x" * 99 + b"\n") * 600
def fits():
    try:
        os.write(1, lines)
        return True
    except BlockingIOError:
        return False
while True:
    while fits():
        pass
    time.sleep(0.1)
    if not fits():
        break
"#;

/// A run whose one job has filled lanes' stdout (returned, not read) and has ended and been
/// reaped while its output waits.
fn ended_job_waiting_for_its_reader(scratch: &Scratch) -> (Running, std::process::ChildStdout) {
    scratch.write("fill.py", FILLS_ITS_PIPE);
    let mut running = Run::new()
        .scratch(scratch)
        .own_stdout()
        .stdin("a\tpython3 \"$D/fill.py\"; echo $$ > \"$D/pid\"\n")
        .spawn();
    let stdout = running.take_stdout();
    scratch.wait_for("pid", WAIT);
    let pid = scratch.pid("pid");
    assert!(
        wait_until(WAIT, || !std::path::Path::new(&format!("/proc/{pid}"))
            .exists()),
        "the job ends and is reaped while its output waits"
    );
    (running, stdout)
}

#[test]
fn a_slow_reader_of_lanes_stdout_is_no_part_of_the_run_s_duration() {
    let scratch = Scratch::new();
    let (running, stdout) = ended_job_waiting_for_its_reader(&scratch);
    // The reader comes back late.
    std::thread::sleep(Duration::from_millis(300));
    let reading = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let reader = read_in_background(stdout);
    let out = running.wait();
    let text = reader.join().unwrap();
    out.code(0);
    assert!(text.len() > 200_000, "{} bytes of output", text.len());
    let report = out.report();
    let job = out.job(1);
    let run_end = parse_time(&report.run.started_at).unwrap()
        + i64::try_from(report.summary.duration_ms).unwrap();
    assert!(
        run_end < reading,
        "the run ended {} ms after the reader came back, its job {} ms before\n{}",
        run_end - reading,
        reading - job.end_ms(),
        out.dump()
    );
    assert!(run_end >= job.end_ms(), "{}", out.dump());
}

/// Stop signals that come while a run's ended job's output waits for a stalled reader (the
/// first, then a second to drop it at once) end the wait; they are no part of the run's time
/// either: input had ended, and the run ended with its job.
#[test]
fn stop_signals_while_output_waits_for_a_stalled_reader_are_no_part_of_the_run_s_duration() {
    let scratch = Scratch::new();
    let (running, stdout) = ended_job_waiting_for_its_reader(&scratch);
    std::thread::sleep(Duration::from_millis(300));
    let signalled = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    running.signal(Signal::SIGINT);
    std::thread::sleep(Duration::from_millis(300));
    running.signal(Signal::SIGINT);
    let out = running.wait();
    drop(stdout);
    let report = out.report();
    let job = out.job(1);
    let run_end = parse_time(&report.run.started_at).unwrap()
        + i64::try_from(report.summary.duration_ms).unwrap();
    assert!(
        run_end < signalled,
        "the run ended {} ms after the first stop signal, its job {} ms before it\n{}",
        run_end - signalled,
        signalled - job.end_ms(),
        out.dump()
    );
    assert!(run_end >= job.end_ms(), "{}", out.dump());
}
