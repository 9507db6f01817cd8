//! SPEC §5.2: the JSON Lines report: its records, their order, times and counts.

use std::collections::BTreeSet;
use std::fs;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::support::*;

#[test]
fn the_run_record_comes_first_and_describes_the_run() {
    let out = Run::new().args(["-j", "3"]).stdin("a\techo 1\n").run();
    out.code(0);
    let run = &out.report().run;
    assert_eq!(run.kind, "run");
    assert_eq!(run.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(run.schema, 2);
    assert_eq!(run.max_concurrent, 3);
    assert_eq!(run.source, "-");
    parse_time(&run.started_at).unwrap();
    let first = out.report_text.as_ref().unwrap().lines().next().unwrap();
    assert!(first.starts_with("{\"type\":\"run\""), "{first}");
}

#[test]
fn every_job_has_exactly_one_record_and_the_summary_counts_them() {
    let scratch = Scratch::new();
    let input =
        "ok\ttrue\nbad\texit 2\nno tab\nslow\tsleep 10\nok\techo again\nkill\tkill -KILL $$\n";
    let jobs = scratch.write("jobs.txt", input);
    let out = Run::new()
        .args(["-j", "3", "--timeout", "0.3", "--grace", "1"])
        .arg(&jobs)
        .run();
    out.code(1);
    let report = out.report();
    let seqs: BTreeSet<u64> = report.jobs.iter().map(|j| j.seq).collect();
    assert_eq!(seqs, (1..=6).collect());
    let s = &report.summary;
    assert_eq!(s.kind, "summary");
    assert_eq!(
        (
            s.jobs,
            s.succeeded,
            s.failed,
            s.interrupted,
            s.rejected,
            s.skipped
        ),
        (6, 2, 2, 1, 1, 0)
    );
    assert_eq!(s.exit_code, 1);
    assert_eq!(report.run.source, jobs.display().to_string());
    let text = out.report_text.as_ref().unwrap();
    assert!(text
        .lines()
        .last()
        .unwrap()
        .starts_with("{\"type\":\"summary\""));
    assert_eq!(text.lines().count(), 8);
}

#[test]
fn records_are_written_in_the_order_jobs_end() {
    let out = Run::new()
        .args(["-j", "3"])
        .stdin("slow\tsleep 0.6\nmedium\tsleep 0.3\nfast\ttrue\n")
        .run();
    out.code(0);
    let order: Vec<u64> = out.report().jobs.iter().map(|j| j.seq).collect();
    assert_eq!(order, [3, 2, 1]);
}

#[test]
fn records_are_flushed_as_soon_as_they_are_known() {
    // Job 1 runs until job 2's record is in the report file.
    let run = Run::new().args(["-j", "2"]);
    let report = sh_quote(&run.report_path().display().to_string());
    let input = format!(
        "a\tn=0; until grep -q '\"seq\":2,' {report}; do n=$((n+1)); \
         if [ $n -gt 500 ]; then exit 97; fi; sleep 0.02; done\nb\ttrue\n"
    );
    let out = run.stdin(input).run();
    out.code(0);
    assert_eq!(out.job(1).result(), ("succeeded", None), "{}", out.dump());
}

#[test]
fn times_are_rfc3339_utc_milliseconds_and_durations_integer_milliseconds() {
    let out = Run::new()
        .args(["-j", "1"])
        .stdin("k\tsleep 0.3\nk\ttrue\n")
        .run();
    out.code(0);
    let text = out.report_text.as_ref().unwrap();
    // The raw JSON: integers, not floats or strings.
    for line in text.lines() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        for field in ["duration_ms", "wait_ms"] {
            if let Some(v) = value.get(field).filter(|v| !v.is_null()) {
                assert!(v.is_u64(), "{field} is not an integer: {line}");
            }
        }
        for field in ["started_at", "ended_at"] {
            if let Some(v) = value.get(field).filter(|v| !v.is_null()) {
                let text = v.as_str().expect("a string");
                assert!(text.ends_with('Z') && text.len() == 24, "{field}: {text}");
            }
        }
    }
    let (first, second) = (out.job(1), out.job(2));
    let ms = first.duration_ms.unwrap();
    assert!((280..3000).contains(&ms), "sleep 0.3 took {ms} ms");
    assert!(second.start_ms() >= first.end_ms());
    assert!(second.wait_ms.unwrap() >= 250, "{second:?}");
    let run_start = parse_time(&out.report().run.started_at).unwrap();
    assert!(first.start_ms() >= run_start);
    let summary = &out.report().summary;
    assert!(summary.duration_ms >= first.duration_ms.unwrap() + second.duration_ms.unwrap());
    assert!(Duration::from_millis(summary.duration_ms) <= out.elapsed + Duration::from_millis(50));
}

#[test]
fn a_jobs_started_at_is_when_its_process_started_not_when_its_round_of_starts_ended() {
    // 60 jobs start at once, one after the other: each one's started_at is no later than the
    // moment its own shell ran (both on the wall clock, in milliseconds; 1 ms of slack).
    let scratch = Scratch::new();
    let jobs: String = (1..=60)
        .map(|n| format!("k{n}\tdate +%s%3N > \"$D/t.$LANES_SEQ\"\n"))
        .collect();
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "60"])
        .stdin(jobs)
        .run();
    out.code(0);
    for job in &out.report().jobs {
        let ran: i64 = scratch
            .read(&format!("t.{}", job.seq))
            .trim()
            .parse()
            .expect("a time in ms");
        assert!(
            job.start_ms() <= ran + 1,
            "job {} ran at {ran} but its started_at says {} ({} ms later)\n{}",
            job.seq,
            job.start_ms(),
            job.start_ms() - ran,
            out.dump()
        );
    }
}

#[test]
fn an_empty_input_writes_a_run_and_a_summary() {
    let out = Run::new().stdin("# nothing\n\n").run();
    out.code(0);
    let report = out.report();
    assert!(report.jobs.is_empty());
    assert_eq!(report.summary.jobs, 0);
}

#[test]
fn the_report_file_is_replaced_not_appended() {
    let scratch = Scratch::new();
    let path = scratch.write("r.jsonl", "{\"old\":true}\n");
    let out = Run::new()
        .no_report()
        .arg("--report")
        .arg(&path)
        .stdin("k\ttrue\n")
        .run();
    out.code(0);
    let report = Report::must_parse(&fs::read_to_string(&path).unwrap());
    assert_eq!(report.jobs.len(), 1);
}

#[test]
fn the_cap_defaults_to_the_number_of_cpus() {
    let out = Run::new().stdin("k\ttrue\n").run();
    out.code(0);
    let cpus = std::thread::available_parallelism().unwrap().get() as u64;
    assert_eq!(out.report().run.max_concurrent, cpus);
}

#[test]
fn a_report_that_cannot_be_stored_makes_the_run_exit_1_though_every_job_runs() {
    // /dev/full: every write fails with ENOSPC, like a full disk.
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["--report", "/dev/full"])
        .stdin("a\ttouch \"$D/a-ran\"\nb\ttouch \"$D/b-ran\"\n")
        .run();
    out.code(1);
    assert!(scratch.exists("a-ran") && scratch.exists("b-ran"));
    assert!(
        out.stderr().contains("cannot write the report /dev/full"),
        "{}",
        out.dump()
    );
    assert!(out.stderr().contains("2 succeeded"), "{}", out.dump());
}

#[test]
fn junit_events_and_json_report_that_cannot_be_stored_make_the_run_exit_1() {
    for (wrapper, args, what) in [
        ("exec >/dev/full", vec!["--json"], "stdout"),
        // The jobs' output, a CI job's log on a full disk.
        ("exec >/dev/full", vec![], "stdout"),
        // Closed: the output is lost as on a full disk, not dropped without a word.
        ("exec >&-", vec![], "stdout"),
        ("exec >&-", vec!["--json"], "stdout"),
        (":", vec!["--junit", "/dev/full"], "the JUnit file"),
        (":", vec!["--events", "/dev/full"], "the events file"),
    ] {
        let scratch = Scratch::new();
        let out = Run::new()
            .scratch(&scratch)
            .wrapper(wrapper)
            .args(args)
            .stdin("a\techo out; sleep 0.2; touch \"$D/a-ran\"\n")
            .run();
        out.code(1);
        assert!(scratch.exists("a-ran"), "{what}");
        assert!(
            out.stderr().contains("cannot write"),
            "{what}: {}",
            out.dump()
        );
    }
}

/// A FIFO whose reader reads nothing until released: lanes' writes to it fill its buffer (set
/// to the smallest a pipe can have) and then cannot go on until the reader reads.
struct StalledReader {
    release: std::sync::mpsc::Sender<()>,
    reader: std::thread::JoinHandle<String>,
}

impl StalledReader {
    fn new(path: &std::path::Path) -> StalledReader {
        use nix::fcntl::{fcntl, FcntlArg, OFlag};
        use std::io::Read;
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // Open without waiting for a writer, so that lanes' open does not wait either.
        let mut fifo = fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(path)
            .unwrap();
        fcntl(fifo.as_raw_fd(), FcntlArg::F_SETPIPE_SZ(4096)).unwrap();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let reader = std::thread::spawn(move || {
            let _ = released.recv();
            fcntl(fifo.as_raw_fd(), FcntlArg::F_SETFL(OFlag::empty())).unwrap();
            let mut text = String::new();
            fifo.read_to_string(&mut text).unwrap();
            text
        });
        StalledReader { release, reader }
    }

    /// Lets the reader read everything, to the writer's end.
    fn read_all(self) -> String {
        let _ = self.release.send(());
        self.reader.join().unwrap()
    }
}

/// Input: a job on key `slow` first, then 40 quick jobs of key `f` (their records and events
/// fill a stalled reader's pipe), the last of which touches `$D/filled`.
fn slow_job_then_fillers(slow: &str) -> String {
    let mut input = format!("slow\t{slow}\n");
    for _ in 0..39 {
        input.push_str("f\ttrue\n");
    }
    input.push_str("f\ttouch \"$D/filled\"\n");
    input
}

/// lanes writing `flag`'s file (`--report` or `--events`) into a FIFO whose reader is
/// stalled ([`StalledReader`]), with `args`, on [`slow_job_then_fillers`]`(slow)`; returned
/// once its quick jobs have all run, or 10 s have passed (`filled`: whether they ran).
fn run_behind_a_stalled_reader(
    scratch: &Scratch,
    flag: &str,
    args: &[&str],
    slow: &str,
) -> (StalledReader, Running, bool) {
    let fifo = scratch.join(&format!("{}.fifo", flag.trim_start_matches("--")));
    let reader = StalledReader::new(&fifo);
    let mut run = Run::new().scratch(scratch);
    if flag == "--report" {
        // The report is the FIFO, not the harness's own file.
        run = run.no_report();
    }
    let running = run
        .arg(flag)
        .arg(&fifo)
        .args(args)
        .stdin(slow_job_then_fillers(slow))
        .spawn();
    let filled = wait_until(Duration::from_secs(10), || scratch.exists("filled"));
    (reader, running, filled)
}

#[test]
fn a_report_reader_that_stalls_delays_no_timeout() {
    let scratch = Scratch::new();
    let (reader, running, filled) = run_behind_a_stalled_reader(
        &scratch,
        "--report",
        &["-j", "2", "--timeout", "0.3", "--grace", "5"],
        "sleep 5",
    );
    // The reader stays stalled well past the slow job's timeout.
    std::thread::sleep(Duration::from_secs(2));
    let text = reader.read_all();
    let out = running.wait();
    assert!(filled, "the quick jobs did not all run\n{}", out.dump());
    out.code(1);
    let report = Report::must_parse(&text);
    let slow = report.job(1);
    assert_eq!(
        (slow.outcome.as_str(), slow.reason.as_deref()),
        ("interrupted", Some("timeout"))
    );
    // Stopped at its timeout, not when the reader came back 2 s later.
    let ms = slow.duration_ms.unwrap();
    assert!((300..1500).contains(&ms), "{slow:?}\n{}", out.dump());
    assert_eq!(report.summary.succeeded, 40);
}

#[test]
fn the_time_lanes_waits_for_a_slow_report_reader_is_not_the_runs() {
    let scratch = Scratch::new();
    let (reader, running, filled) =
        run_behind_a_stalled_reader(&scratch, "--report", &["-j", "2"], "true");
    // Every job is over; the reader comes back 2 s later.
    std::thread::sleep(Duration::from_secs(2));
    let text = reader.read_all();
    let out = running.wait();
    assert!(filled, "the quick jobs did not all run\n{}", out.dump());
    out.code(0);
    assert!(out.elapsed >= Duration::from_secs(2), "{}", out.dump());
    let report = Report::must_parse(&text);
    assert_eq!(report.summary.succeeded, 41);
    let last_end = (1..=41)
        .map(|seq| report.job(seq).duration_ms.unwrap())
        .max()
        .unwrap();
    assert!(
        report.summary.duration_ms < 1500,
        "the run took {} ms by its summary (a job took at most {last_end} ms)\n{}",
        report.summary.duration_ms,
        out.dump()
    );
    let said = format!("41 jobs in {}ms", report.summary.duration_ms);
    assert!(out.stderr().contains(&said), "{said}\n{}", out.dump());
}

#[test]
fn an_events_reader_that_stalls_delays_no_stop_signal() {
    let scratch = Scratch::new();
    let (reader, running, filled) = run_behind_a_stalled_reader(
        &scratch,
        "--events",
        &["-j", "2"],
        "trap 'touch \"$D/got-int\"; exit 0' INT; while :; do sleep 0.05; done",
    );
    running.signal(Signal::SIGINT);
    // The job hears Ctrl-C while the reader still reads nothing.
    let heard = wait_until(Duration::from_secs(3), || scratch.exists("got-int"));
    let events = reader.read_all();
    let out = running.wait();
    assert!(filled, "the quick jobs did not all run\n{}", out.dump());
    assert!(heard, "Ctrl-C did not reach the job\n{}", out.dump());
    out.code(130);
    let slow = out.job(1);
    assert_eq!(
        (slow.outcome.as_str(), slow.reason.as_deref()),
        ("interrupted", Some("shutdown"))
    );
    assert!(slow.duration_ms.is_some());
    // Every event reached the reader in the end: three for each quick job, two for the slow.
    let ended = events
        .lines()
        .filter(|line| line.contains("\"type\":\"ended\""))
        .count();
    assert_eq!(ended, 41, "{events}");
}

#[test]
fn a_report_given_up_on_after_a_second_stop_signal_is_said() {
    let scratch = Scratch::new();
    let (reader, running, filled) = run_behind_a_stalled_reader(
        &scratch,
        "--report",
        &["-j", "2"],
        "trap 'touch \"$D/got-term\"; exit 0' TERM; while :; do sleep 0.05; done",
    );
    running.signal(Signal::SIGTERM);
    // The first stop reached the job (lanes now waits for the reader); the second gives up.
    let heard = wait_until(Duration::from_secs(5), || scratch.exists("got-term"));
    running.signal(Signal::SIGTERM);
    let out = running.wait();
    drop(reader);
    assert!(filled, "the quick jobs did not all run\n{}", out.dump());
    assert!(heard, "SIGTERM did not reach the job\n{}", out.dump());
    out.code(143);
    assert!(
        out.stderr()
            .contains("the report or events file was given up on"),
        "{}",
        out.dump()
    );
}

/// An output that is the very file lanes' stdout or stderr goes to (`--report /dev/stdout >
/// out`, `>> out`, `--report out > out`) would be written over from its start, apart from the
/// stream: refused, exit 2, the file left as it was. Through a pipe it is only mixed, and
/// allowed.
#[test]
fn an_output_that_is_lanes_own_stdout_or_stderr_file_is_refused() {
    use std::process::{Command, Stdio};
    let scratch = Scratch::new();
    let out = scratch.join("out.txt");
    for (flag, path, stream) in [
        ("--report", "/dev/stdout", "stdout"),
        ("--report", out.to_str().unwrap(), "stdout"),
        ("--events", "/dev/stderr", "stderr"),
        ("--junit", "/dev/stdout", "stdout"),
    ] {
        std::fs::write(&out, "kept\n").unwrap();
        let file = || std::fs::OpenOptions::new().append(true).open(&out).unwrap();
        let mut command = Command::new(BIN);
        command
            .args([flag, path, ":::", "echo job"])
            .stdin(Stdio::null());
        let (stdout, stderr) = if stream == "stdout" {
            (Stdio::from(file()), Stdio::piped())
        } else {
            (Stdio::piped(), Stdio::from(file()))
        };
        let run = command.stdout(stdout).stderr(stderr).output().unwrap();
        assert_eq!(run.status.code(), Some(2), "{flag} {path}");
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.starts_with("kept\n"), "{flag} {path}: {text}");
        assert!(
            text.contains(&format!("it is the file lanes' {stream} goes to"))
                || String::from_utf8_lossy(&run.stderr)
                    .contains(&format!("it is the file lanes' {stream} goes to")),
            "{flag} {path}: {text}"
        );
    }
    // Through a pipe: allowed, the report's lines among the job's output.
    let piped = Command::new(BIN)
        .args(["--report", "/dev/stdout", ":::", "echo job"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(piped.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&piped.stdout).contains("\"type\":\"summary\""));
}

/// A run's JUnit file is held from its start until it is written at the end: another run may
/// not take it for its report meanwhile (it would be written over at that end).
#[test]
fn a_junit_file_is_held_for_the_whole_run() {
    let scratch = Scratch::new();
    let junit = scratch.join("ju.xml");
    let first = Run::new()
        .no_report()
        .scratch(&scratch)
        .arg("--junit")
        .arg(&junit)
        .stdin(format!("a\ttouch \"$D/started\"; {}\n", await_file("go")))
        .spawn();
    scratch.wait_for("started", Duration::from_secs(20));
    let second = Run::new()
        .no_report()
        .scratch(&scratch)
        .arg("--report")
        .arg(&junit)
        .stdin("b\ttrue\n")
        .run();
    second.code(2);
    assert!(
        second.stderr().contains("another lanes writes"),
        "{}",
        second.stderr()
    );
    scratch.write("go", "");
    first.wait().code(0);
    assert!(std::fs::read_to_string(&junit)
        .unwrap()
        .starts_with("<?xml"));
}

/// A job that writes to its own run's report adds its lines among the records: every record
/// stays whole (the report is appended to, not written at lanes' own offset).
#[test]
fn a_job_writing_to_its_own_report_leaves_every_record_whole() {
    let scratch = Scratch::new();
    let report = scratch.join("self.jsonl");
    let out = Run::new()
        .no_report()
        .scratch(&scratch)
        .arg("--report")
        .arg(&report)
        .args(["-j", "1"])
        .stdin("a\tprintf '%03000d\\n' 0 >> \"$D/self.jsonl\"\nb\ttrue\n")
        .run();
    out.code(0);
    let text = std::fs::read_to_string(&report).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.contains(&"0".repeat(3000).as_str()), "{text}");
    let records: Vec<serde_json::Value> = lines
        .iter()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| r["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["run", "job", "job", "summary"], "{text}");
}

#[test]
fn a_report_that_is_the_input_file_by_any_name_is_refused_and_the_input_kept() {
    // The same file under another name (a hard link, a symbolic link, `./`), or the file
    // stdin reads: writing the report would truncate the input before a line of it is read,
    // and the run would end "successfully" with no job.
    let scratch = Scratch::new();
    let input = "a\techo hi\n";
    let jobs = scratch.write("jobs.tsv", input);
    std::fs::hard_link(&jobs, scratch.join("hard.tsv")).unwrap();
    std::os::unix::fs::symlink(&jobs, scratch.join("soft.tsv")).unwrap();
    let cases: [(&str, &str, bool); 4] = [
        ("--report", "hard.tsv", false),
        ("--events", "soft.tsv", false),
        ("--junit", "./jobs.tsv", false),
        ("--report", "hard.tsv", true),
    ];
    for (flag, output, from_stdin) in cases {
        let mut command = std::process::Command::new(BIN);
        command.current_dir(scratch.path()).args([flag, output]);
        if from_stdin {
            command.stdin(std::fs::File::open(&jobs).unwrap());
        } else {
            command.arg("jobs.tsv").stdin(std::process::Stdio::null());
        }
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag} {output}: {stderr}");
        assert!(
            stderr.contains("is the input file: it would be overwritten"),
            "{flag} {output}: {stderr}"
        );
        assert_eq!(scratch.read("jobs.tsv"), input, "{flag} {output}");
    }
}

#[test]
fn outputs_that_are_one_file_through_a_link_to_a_file_not_made_yet_are_refused() {
    let scratch = Scratch::new();
    std::os::unix::fs::symlink("r.jsonl", scratch.join("link.jsonl")).unwrap();
    let out = std::process::Command::new(BIN)
        .current_dir(scratch.path())
        .args(["--report", "r.jsonl", "--events", "link.jsonl"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--report and --events name the same file"),
        "{stderr}"
    );
    assert!(!scratch.exists("r.jsonl"), "nothing is made");
}

/// A new FIFO `report.fifo` in `scratch`, and a lanes given it as `--report` (and `extra`),
/// its stderr in `$D/err`, that runs `job` (a job line) once a reader opens the FIFO.
fn run_with_report_fifo(
    scratch: &Scratch,
    extra: &[&str],
    job: &str,
) -> (std::path::PathBuf, Running) {
    let fifo = scratch.join("report.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let running = Run::new()
        .scratch(scratch)
        .no_report()
        .wrapper("exec 2>\"$D/err\"")
        .arg("--report")
        .arg(&fifo)
        .args(extra)
        .stdin(job)
        .spawn();
    (fifo, running)
}

#[test]
fn a_report_fifo_without_a_reader_or_a_reader_that_does_not_read_is_said_not_silent() {
    // At the start: no reader has the FIFO open, and lanes says it waits for one.
    let scratch = Scratch::new();
    let said = |what: &str| {
        let what = what.to_owned();
        let err = scratch.join("err");
        move || fs::read_to_string(&err).unwrap_or_default().contains(&what)
    };
    let (fifo, running) = run_with_report_fifo(&scratch, &[], "a\ttrue\n");
    assert!(
        wait_until(
            Duration::from_secs(10),
            said("lanes: waiting for a reader of the FIFO")
        ),
        "{}",
        fs::read_to_string(scratch.join("err")).unwrap_or_default()
    );
    let text = fs::read_to_string(&fifo).unwrap();
    running.wait().code(0);
    assert_eq!(Report::must_parse(&text).jobs.len(), 1);
    // At the end: the reader has it open and reads nothing; every job has ended, and lanes
    // says what it waits for.
    let scratch = Scratch::new();
    let reader = StalledReader::new(&scratch.join("report.fifo"));
    let running = Run::new()
        .scratch(&scratch)
        .no_report()
        .wrapper("exec 2>\"$D/err\"")
        .arg("--report")
        .arg(scratch.join("report.fifo"))
        .stdin(slow_job_then_fillers("true"))
        .spawn();
    let said = |what: &str| {
        let what = what.to_owned();
        let err = scratch.join("err");
        move || fs::read_to_string(&err).unwrap_or_default().contains(&what)
    };
    assert!(
        wait_until(
            Duration::from_secs(10),
            said(&format!(
                "every job has ended; waiting for the reader of `{}`",
                scratch.join("report.fifo").display()
            ))
        ),
        "{}",
        fs::read_to_string(scratch.join("err")).unwrap_or_default()
    );
    let text = reader.read_all();
    running.wait().code(0);
    assert_eq!(Report::must_parse(&text).jobs.len(), 41);
    assert!(!fs::read_to_string(scratch.join("err"))
        .unwrap()
        .contains("waiting for a reader of the FIFO"));
}

#[test]
fn a_junit_fifo_is_written_to_the_reader_that_opened_it_first() {
    // The reader is started first, as for a report FIFO: it gets the whole XML, not an end of
    // file at the start while lanes waits, at its end, for a second reader.
    let scratch = Scratch::new();
    let fifo = scratch.join("junit.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || fs::read_to_string(fifo).unwrap())
    };
    let out = Run::new()
        .arg("--junit")
        .arg(&fifo)
        .stdin("a\techo 1\nb\texit 3\n")
        .run();
    out.code(1);
    let xml = reader.join().unwrap();
    assert!(xml.starts_with("<?xml"), "{xml:?}");
    assert!(
        xml.contains("<testsuites") && xml.contains("failures=\"1\""),
        "{xml}"
    );
}

/// A stop signal while lanes waits for a reader of its report FIFO ends it at once, whether or
/// not its handlers stand already (`--strict` installs them to check the input first).
#[test]
fn a_stop_signal_ends_the_wait_for_a_report_fifos_reader() {
    for strict in [false, true] {
        let scratch = Scratch::new();
        let extra: &[&str] = if strict { &["--strict"] } else { &[] };
        let (_, running) = run_with_report_fifo(&scratch, extra, "a\ttouch \"$D/ran\"\n");
        let err = scratch.join("err");
        assert!(wait_until(Duration::from_secs(10), || {
            fs::read_to_string(&err)
                .unwrap_or_default()
                .contains("waiting for a reader of the FIFO")
        }));
        running.signal(Signal::SIGINT);
        let pid = running.pid();
        assert!(
            wait_until(Duration::from_secs(5), || !alive(pid)),
            "strict {strict}: lanes went on waiting after SIGINT"
        );
        running.wait().code(130);
        assert!(!scratch.exists("ran"));
    }
    // A signal in the wait's first second, before lanes says it waits, ends it as well: the
    // message never comes.
    let scratch = Scratch::new();
    let (_, running) = run_with_report_fifo(&scratch, &[], "a\ttouch \"$D/ran\"\n");
    let pid = running.pid();
    // Polling for a reader: asleep between two tries.
    assert!(wait_until(Duration::from_secs(10), || {
        fs::read_to_string(format!("/proc/{pid}/wchan")).is_ok_and(|w| w.contains("nanosleep"))
    }));
    running.signal(Signal::SIGINT);
    running.wait().code(130);
    let err = fs::read_to_string(scratch.join("err")).unwrap_or_default();
    assert!(!err.contains("waiting for a reader"), "{err}");
    assert!(!scratch.exists("ran"));
}

/// After one stop signal, a report FIFO whose reader takes nothing is given up on once lanes'
/// output has taken nothing for 5 s; lanes' own notice that it waits is no sign of a reader
/// (it counted as one, and the wait started over: about 10 s).
#[test]
fn after_a_stop_signal_a_report_fifo_that_takes_nothing_is_given_up_on_in_5_s() {
    let scratch = Scratch::new();
    let fifo = scratch.join("report.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // A reader that opens it and never reads.
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || fs::File::open(fifo).unwrap())
    };
    let jobs: String = (1..=300)
        .map(|i| format!("k{i}\techo out{i}\n"))
        .chain(["z\ttouch \"$D/up\"; sleep 100\n".to_owned()])
        .collect();
    let running = Run::new()
        .scratch(&scratch)
        .no_report()
        .wrapper("exec 2>\"$D/err\"")
        .args(["--progress", "never", "-j", "2", "--report"])
        .arg(&fifo)
        .stdin(jobs)
        .spawn();
    let _held = reader.join().unwrap();
    scratch.wait_for("up", Duration::from_secs(20));
    let signalled = std::time::Instant::now();
    running.signal(Signal::SIGTERM);
    running.wait().code(143);
    let waited = signalled.elapsed();
    let err = fs::read_to_string(scratch.join("err")).unwrap_or_default();
    assert!(waited < Duration::from_secs(8), "{waited:?}\n{err}");
    assert!(
        err.contains("given up on once lanes' output takes nothing for 5 s")
            && err.contains("was given up on"),
        "{err}"
    );
}

/// The JUnit file's times are the report's: `<testsuites time>` is the summary's
/// `duration_ms` (an input that stays open after the last job counts in both), and a test
/// case's `time` its record's `duration_ms` (it was the exact duration cut to the millisecond,
/// 1 ms off the record's about half the time).
#[test]
fn junit_times_are_the_report_s() {
    let scratch = Scratch::new();
    let junit = scratch.join("ju.xml");
    let jobs: String = (1..=8)
        .map(|i| format!("k{i}\tsleep 0.0{i}; touch \"$D/done{i}\"\n"))
        .collect();
    let mut running = Run::new()
        .scratch(&scratch)
        .arg("--junit")
        .arg(&junit)
        .stdin_piped()
        .spawn();
    std::io::Write::write_all(running.stdin(), jobs.as_bytes()).unwrap();
    for i in 1..=8 {
        scratch.wait_for(&format!("done{i}"), Duration::from_secs(10));
    }
    // The input stays open a while after the last job: the run lasts until it ends.
    std::thread::sleep(Duration::from_millis(300));
    running.close_stdin();
    let out = running.wait();
    out.code(0);
    let report = out.report();
    let xml = fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let millis = |node: roxmltree::Node<'_, '_>| -> u64 {
        let seconds = node.attribute("time").unwrap();
        let (whole, fraction) = seconds.split_once('.').unwrap();
        whole.parse::<u64>().unwrap() * 1000 + fraction.parse::<u64>().unwrap()
    };
    assert!(report.summary.duration_ms >= 300, "{:?}", report.summary);
    assert_eq!(
        millis(doc.root_element()),
        report.summary.duration_ms,
        "{xml}"
    );
    for case in doc.descendants().filter(|n| n.has_tag_name("testcase")) {
        let name = case.attribute("name").unwrap();
        let seq: u64 = name["seq ".len()..name.find(':').unwrap()].parse().unwrap();
        let record = report.jobs.iter().find(|job| job.seq == seq).unwrap();
        assert_eq!(Some(millis(case)), record.duration_ms, "{name}");
    }
}

/// `--json` with stderr sent to the same file or pipe as stdout (`&> log`, `2>&1 | jq`) would
/// mix the jobs' output and lanes' messages into the report: refused before anything runs. A
/// terminal or `/dev/null` for both is no report anyone parses, and is taken.
#[test]
fn a_json_report_sharing_its_file_or_pipe_with_stderr_is_refused() {
    for wrapper in ["exec 2>&1", "exec >\"$D/all\" 2>&1"] {
        let scratch = Scratch::new();
        let out = Run::new()
            .scratch(&scratch)
            .no_report()
            .wrapper(wrapper)
            .arg("--json")
            .stdin("k\ttouch \"$D/ran\"\n")
            .run();
        out.code(2);
        let said = if scratch.exists("all") {
            scratch.read("all")
        } else {
            out.stdout()
        };
        assert!(
            said.contains(
                "--json writes the report to stdout, and stdout is the same file as stderr"
            ),
            "{wrapper}: {said}\n{}",
            out.dump()
        );
        assert!(!scratch.exists("ran"), "{wrapper}");
    }
    let scratch = Scratch::new();
    Run::new()
        .scratch(&scratch)
        .no_report()
        .wrapper("exec >/dev/null 2>&1")
        .arg("--json")
        .stdin("k\ttouch \"$D/ran\"\n")
        .run()
        .code(0);
    assert!(scratch.exists("ran"));
    // A dry run starts no job: its JSON plan mixes with nothing.
    let out = Run::new()
        .no_report()
        .wrapper("exec 2>&1")
        .args(["--dry-run", "--json"])
        .stdin("k\ttrue\n")
        .run();
    out.code(0);
    assert!(
        out.stdout().starts_with("{\"type\":\"plan\""),
        "{}",
        out.dump()
    );
}

/// The last lines of a failed job's stderr quoted in the summary cannot reorder or hide text:
/// controls become spaces, bidi controls and zero-width characters are escaped, as in keys.
#[test]
fn a_failed_job_s_stderr_in_the_summary_shows_bidi_and_zero_width_characters_escaped() {
    let out = Run::new()
        .stdin("k\tprintf 'a\\033[31mb\\342\\200\\256evil\\342\\200\\213\\n' >&2; exit 3\n")
        .run();
    out.code(1);
    let stderr = out.stderr();
    let quoted = stderr
        .lines()
        .find(|line| line.trim_start().starts_with('|'))
        .unwrap_or_else(|| panic!("no stderr line quoted: {}", out.dump()));
    assert_eq!(
        quoted.trim_start(),
        "| a [31mb\\u{202e}evil\\u{200b}",
        "{stderr}"
    );
}
