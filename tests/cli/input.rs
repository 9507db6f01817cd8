//! SPEC §1.1: the line format, invalid lines, `--strict`, opaque keys, streamed input.

use std::io::Write;
use std::time::Duration;

use crate::support::*;

#[test]
fn a_line_splits_at_the_first_tab_only() {
    let out = Run::new().stdin("k\tprintf '[%s]\\n' 'x\ty'\n").run();
    out.code(0);
    assert_eq!(out.stdout(), "[k] [x\ty]\n");
    let job = out.job(1);
    assert_eq!(job.key.as_deref(), Some("k"));
    assert_eq!(job.command.as_deref(), Some("printf '[%s]\\n' 'x\ty'"));
}

#[test]
fn crlf_input_and_a_last_line_without_newline() {
    let out = Run::new()
        .args(["-j", "1"])
        .stdin("a\techo one\r\nb\techo two")
        .run();
    out.code(0);
    assert_eq!(out.stdout(), "[a] one\n[b] two\n");
    let report = out.report();
    assert_eq!(report.jobs.len(), 2);
    assert_eq!(out.job(1).command.as_deref(), Some("echo one"));
    assert_eq!(out.job(2).command.as_deref(), Some("echo two"));
    assert_eq!((out.job(2).seq, out.job(2).line), (2, 2));
}

#[test]
fn a_last_line_without_newline_runs_from_a_file_and_from_a_manifest() {
    let scratch = Scratch::new();
    scratch.write("jobs.txt", "a\techo first\nb\techo last-without-newline");
    scratch.write(
        "jobs.toml",
        "[[job]]\nkey = \"a\"\ncmd = \"echo first\"\n\n\
         [[job]]\nkey = \"b\"\ncmd = \"echo last-without-newline\"",
    );
    for file in ["jobs.txt", "jobs.toml"] {
        let out = Run::new().cwd(scratch.path()).args(["-j", "1", file]).run();
        out.code(0);
        assert_eq!(
            out.stdout(),
            "[a] first\n[b] last-without-newline\n",
            "{file}\n{}",
            out.dump()
        );
        assert_eq!(out.report().summary.succeeded, 2, "{file}");
    }
}

#[test]
fn an_unterminated_last_line_runs_only_once_the_input_has_ended() {
    // Until EOF the last line may still grow: lanes must neither run it early nor wait for a
    // newline that never comes.
    let scratch = Scratch::new();
    let mut running = Run::new()
        .scratch(&scratch)
        .args(["-j", "2"])
        .stdin_piped()
        .spawn();
    running
        .stdin()
        .write_all(b"a\ttouch \"$D/a-ran\"\n")
        .unwrap();
    running.stdin().flush().unwrap();
    scratch.wait_for("a-ran", Duration::from_secs(10));
    running
        .stdin()
        .write_all(b"b\t[ -e \"$D/eof\" ] || touch \"$D/early\"; echo last-")
        .unwrap();
    running.stdin().flush().unwrap();
    // Give lanes time to get that wrong.
    let ran_early = wait_until(Duration::from_millis(500), || {
        scratch.exists("early") || running.report_so_far().contains("\"seq\":2,")
    });
    assert!(!ran_early, "the unterminated line ran before EOF");
    running.stdin().write_all(b"without-newline").unwrap();
    scratch.write("eof", "");
    running.close_stdin();
    let out = running.wait();
    out.code(0);
    assert_eq!(out.stdout(), "[b] last-without-newline\n", "{}", out.dump());
    assert!(!scratch.exists("early"));
    assert_eq!(
        out.job(2).command.as_deref(),
        Some("[ -e \"$D/eof\" ] || touch \"$D/early\"; echo last-without-newline")
    );
}

#[test]
fn blank_and_comment_lines_are_skipped_and_take_no_seq() {
    let input =
        "\n   \n# comment\techo not-a-job\na\techo 1\n \t \r\n#b\techo not-either\nb\techo 2\n";
    let out = Run::new().args(["-j", "1"]).stdin(input).run();
    out.code(0);
    let report = out.report();
    assert_eq!(report.jobs.len(), 2, "{}", out.dump());
    assert_eq!((out.job(1).line, out.job(1).key.as_deref()), (4, Some("a")));
    assert_eq!((out.job(2).line, out.job(2).key.as_deref()), (7, Some("b")));
    assert!(!out.stdout().contains("not-"), "{}", out.dump());
}

#[test]
fn invalid_lines_are_rejected_and_the_other_jobs_run() {
    let mut input = Vec::new();
    input.extend_from_slice(b"a\techo ok-a\n"); // 1
    input.extend_from_slice(b"no tab on this line\n"); // 2
    input.extend_from_slice(b"\techo empty key\n"); // 3
    input.extend_from_slice(b"c\t   \n"); // 4
    input.extend_from_slice(b"\n"); // blank
    input.extend_from_slice(b"d\techo \xff\xfe\n"); // 6
    input.extend_from_slice(b"\xff\techo bad key\n"); // 7
    input.extend_from_slice(b"e\techo ok-e\n"); // 8
    let out = Run::new().args(["-j", "2"]).stdin(input).run();
    out.code(1);
    let report = out.report();
    assert_eq!(report.jobs.len(), 7, "{}", out.dump());
    for (seq, line, key) in [
        (2, 2, None),
        (3, 3, Some("")),
        (4, 4, Some("c")),
        (5, 6, Some("d")),
        (6, 7, None),
    ] {
        let job = out.job(seq);
        assert_eq!(job.result(), ("rejected", Some("invalid_input")), "{job:?}");
        assert_eq!(job.line, line, "{job:?}");
        assert_eq!(job.key.as_deref(), key, "{job:?}");
        assert!(!job.started);
        assert!(
            job.error.as_deref().is_some_and(|e| !e.is_empty()),
            "{job:?}"
        );
    }
    for (seq, line, key) in [(1, 1, "a"), (7, 8, "e")] {
        let job = out.job(seq);
        assert_eq!(job.result(), ("succeeded", None));
        assert_eq!((job.line, job.key.as_deref()), (line, Some(key)));
    }
    assert!(out.stdout().contains("[a] ok-a\n"), "{}", out.dump());
    assert!(out.stdout().contains("[e] ok-e\n"), "{}", out.dump());
    assert_eq!(report.summary.rejected, 5);
    assert_eq!(report.summary.succeeded, 2);
}

/// A line without a tab says what it may have been meant as: a TOML manifest piped to stdin
/// points to `--manifest`, plain lines (a command per line, or arguments) to `--key '{}'` and
/// to a command after the options; under `-0` too. Nothing of it runs.
#[test]
fn a_line_without_a_tab_says_how_to_give_what_it_looks_like() {
    // The last line aligned with a tab: its setting is no key, and its comment no command.
    let manifest = "# jobs\n[[job]]\nkey = \"a\"\ncmd = \"touch ran\"\t# touch\n";
    let out = Run::new().stdin(manifest).run();
    out.code(1);
    assert_eq!(out.report().jobs.len(), 3, "{}", out.dump());
    for job in &out.report().jobs {
        assert_eq!(job.result(), ("rejected", Some("invalid_input")), "{job:?}");
        let error = job.error.as_deref().unwrap_or_default();
        let why = if job.line == 4 {
            "the key looks like a TOML setting"
        } else {
            "no tab"
        };
        assert!(
            error.contains(why) && error.contains("--manifest -"),
            "{job:?}"
        );
        // A key that is read whole is the record's, as for any other invalid line.
        let key = (job.line == 4).then_some("cmd = \"touch ran\"");
        assert_eq!(job.key.as_deref(), key, "{job:?}");
    }
    for (args, input) in [
        (&[][..], &b"touch ran\n"[..]),
        (&["-0"][..], b"touch ran\0"),
    ] {
        let out = Run::new().args(args).stdin(input).run();
        out.code(1);
        let job = out.job(1);
        assert_eq!(job.result(), ("rejected", Some("invalid_input")), "{job:?}");
        let error = job.error.as_deref().unwrap_or_default();
        assert!(
            error.contains("no tab") && error.contains("--key '{}'") && !error.contains("TOML"),
            "{args:?}: {job:?}"
        );
        assert!(
            out.stderr().contains("lanes [OPTIONS] -- COMMAND"),
            "{}",
            out.dump()
        );
    }
}

/// A directory given as the input (`-a DIR`, `< DIR`) is refused before the run begins, naming
/// it, as a file that does not exist is: it opened, and its first read ended a run of no jobs
/// with exit 1, a report without a word of why, and a message that named no file.
#[test]
fn a_directory_as_the_input_is_refused_naming_it() {
    let scratch = Scratch::new();
    std::fs::create_dir(scratch.join("dir")).unwrap();
    let out = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .args(["-a", "dir", "echo"])
        .run();
    out.code(2);
    assert!(
        out.stderr().contains("cannot read dir: it is a directory"),
        "{}",
        out.dump()
    );
    let out = Run::new()
        .scratch(&scratch)
        .stdin_file(scratch.join("dir"))
        .run();
    out.code(2);
    assert!(
        out.stderr()
            .contains("cannot read stdin: it is a directory"),
        "{}",
        out.dump()
    );
}

#[test]
fn strict_mode_exits_2_naming_the_line_and_runs_nothing() {
    let scratch = Scratch::new();
    let run = Run::new()
        .scratch(&scratch)
        .args(["--strict", "-j", "2"])
        .stdin(
            "a\ttouch \"$D/ran\"\n\nb\techo fine\nthis line has no tab\nc\ttouch \"$D/ran-c\"\n",
        );
    let report_path = run.report_path();
    let out = run.run();
    out.code(2);
    assert!(
        out.stderr().contains(":4:") || out.stderr().contains("line 4"),
        "stderr names line 4\n{}",
        out.dump()
    );
    assert!(
        !scratch.exists("ran") && !scratch.exists("ran-c"),
        "a job ran"
    );
    assert!(out.stdout.is_empty(), "{}", out.dump());
    let written = std::fs::read_to_string(report_path).unwrap_or_default();
    assert!(written.is_empty(), "--strict wrote a report: {written}");
}

#[test]
fn strict_mode_reads_stdin_to_eof_before_exiting() {
    // The invalid line comes first, then about 2 MB of valid lines: the feeder must be able
    // to write all of it (no EPIPE), because lanes reads its input to the end first.
    let mut input = b"bad line without tab\n".to_vec();
    for i in 0..40_000 {
        writeln!(input, "k{i}\techo {i} padding-padding-padding").unwrap();
    }
    let out = Run::new().arg("--strict").stdin(input).run();
    out.code(2);
    match &out.feeder {
        Some(Ok(())) => {}
        other => panic!(
            "lanes exited before reading stdin to EOF (feeder: {other:?})\n{}",
            out.stderr()
        ),
    }
}

#[test]
fn strict_mode_with_valid_input_runs_everything() {
    let out = Run::new()
        .args(["--strict", "-j", "2"])
        .stdin("a\techo 1\n# c\nb\techo 2\r\n")
        .run();
    out.code(0);
    assert_eq!(out.report().summary.succeeded, 2);
}

#[test]
fn keys_are_opaque_byte_exact_strings() {
    let scratch = Scratch::new();
    let keys = ["a b", "x/../y", "..", "ü-ключ", "/abs"];
    let mut input = String::new();
    for key in keys {
        input.push_str(&format!(
            "{key}\tprintf %s \"$LANES_KEY\" > \"$D/key-$LANES_SEQ\"; echo hi\n"
        ));
    }
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "3"])
        .stdin(input)
        .run();
    out.code(0);
    for (i, key) in keys.iter().enumerate() {
        let seq = i as u64 + 1;
        assert_eq!(scratch.read(&format!("key-{seq}")), *key);
        assert_eq!(out.job(seq).key.as_deref(), Some(*key));
        assert!(
            out.stdout().contains(&format!("[{key}] hi\n")),
            "{}",
            out.dump()
        );
    }
}

#[test]
fn keys_differing_only_in_case_are_different_lanes() {
    // Each job waits for the other to have started: only possible when "A" and "a" are two
    // lanes running side by side.
    let scratch = Scratch::new();
    let input = format!(
        "A\ttouch \"$D/A-up\"; {}\na\ttouch \"$D/a-up\"; {}\n",
        await_file("a-up"),
        await_file("A-up")
    );
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "2"])
        .stdin(input)
        .run();
    out.code(0);
    assert_eq!(out.report().summary.succeeded, 2);
}

#[test]
fn input_is_streamed_jobs_start_before_eof() {
    let scratch = Scratch::new();
    let mut running = Run::new()
        .scratch(&scratch)
        .args(["-j", "2"])
        .stdin_piped()
        .spawn();
    running
        .stdin()
        .write_all(b"a\ttouch \"$D/first\"\n")
        .unwrap();
    running.stdin().flush().unwrap();
    // Stdin stays open: the first job must run anyway.
    scratch.wait_for("first", Duration::from_secs(10));
    running.stdin().write_all(b"b\techo second\n").unwrap();
    running.close_stdin();
    let out = running.wait();
    out.code(0);
    assert_eq!(out.report().summary.succeeded, 2);
    assert!(out.stdout().contains("[b] second\n"));
}

#[test]
fn jobs_from_a_file_and_from_dash() {
    let scratch = Scratch::new();
    scratch.write("jobs.txt", "a\techo from-file\nb\techo again\n");
    let out = Run::new()
        .cwd(scratch.path())
        .args(["-j", "2", "jobs.txt"])
        .stdin("x\techo from-stdin\n")
        .run();
    out.code(0);
    assert!(out.stdout().contains("[a] from-file\n"), "{}", out.dump());
    assert!(!out.stdout().contains("from-stdin"), "{}", out.dump());
    assert_eq!(out.report().run.source, "jobs.txt");
    assert_eq!(out.report().jobs.len(), 2);

    let out = Run::new()
        .args(["-j", "2", "-"])
        .stdin("x\techo from-stdin\n")
        .run();
    out.code(0);
    assert_eq!(out.stdout(), "[x] from-stdin\n");
    assert_eq!(out.report().run.source, "-");
}

#[test]
fn a_line_longer_than_one_argument_is_invalid_input_and_the_others_run() {
    // No process can be given a command longer than MAX_ARG_STRLEN (128 KiB with 4 KiB
    // pages): such a line is refused when read, never tried.
    let mut input = b"a\techo ok-a\n".to_vec();
    input.extend_from_slice(b"b\techo ");
    input.extend(std::iter::repeat_n(b'x', 200_000));
    input.extend_from_slice(b"\nc\techo ok-c\n");
    let out = Run::new()
        .args(["-j", "1", "--retries", "2"])
        .stdin(input)
        .run();
    out.code(1);
    let job = out.job(2);
    assert_eq!(job.result(), ("rejected", Some("invalid_input")), "{job:?}");
    assert_eq!((job.line, job.key.as_deref()), (2, Some("b")));
    assert_eq!(job.attempts, 0);
    let error = job.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("command is longer than") && error.contains("MAX_ARG_STRLEN"),
        "{error}"
    );
    assert_eq!(out.job(3).result(), ("succeeded", None));
    assert_eq!(out.job(3).line, 3);
    assert_eq!(out.stdout(), "[a] ok-a\n[c] ok-c\n", "{}", out.dump());
}

#[test]
fn a_line_of_hundreds_of_megabytes_is_refused_in_bounded_memory() {
    // The line is refused once it is longer than any command can be, and the rest of it is
    // read and dropped: lanes' peak memory stays far below the line's size. lanes is held
    // running (its last job waits for a marker) so that its peak can be read from /proc.
    const LINE: usize = 128 << 20;
    let scratch = Scratch::new();
    let mut running = Run::new()
        .scratch(&scratch)
        .args(["-j", "1"])
        .stdin_piped()
        .spawn();
    let chunk = vec![b'x'; 1 << 20];
    running.stdin().write_all(b"huge\t").unwrap();
    for _ in 0..LINE / chunk.len() {
        running.stdin().write_all(&chunk).unwrap();
    }
    running
        .stdin()
        .write_all(b"\nw\ttouch \"$D/started\"; while [ ! -e \"$D/go\" ]; do sleep 0.01; done\n")
        .unwrap();
    running.stdin().flush().unwrap();
    scratch.wait_for("started", Duration::from_secs(30));
    let peak_kib = peak_rss_kib(running.pid());
    scratch.write("go", "");
    running.close_stdin();
    let out = running.wait();
    out.code(1);
    assert!(
        peak_kib < 64 * 1024,
        "lanes' peak RSS was {peak_kib} KiB for a {LINE}-byte line"
    );
    assert_eq!(
        out.job(1).result(),
        ("rejected", Some("invalid_input")),
        "{}",
        out.dump()
    );
    assert_eq!(out.job(1).key.as_deref(), Some("huge"));
    assert_eq!(
        (out.job(2).line, out.job(2).result()),
        (2, ("succeeded", None))
    );
}

#[test]
fn a_nul_byte_in_a_command_is_invalid_input_with_and_without_strict() {
    let input = b"a\techo a\0b\nc\techo ok-c\n";
    let out = Run::new()
        .args(["-j", "1", "--retries", "2"])
        .stdin(&input[..])
        .run();
    out.code(1);
    let job = out.job(1);
    assert_eq!(job.result(), ("rejected", Some("invalid_input")), "{job:?}");
    assert_eq!((job.attempts, job.key.as_deref()), (0, Some("a")));
    assert!(
        job.error
            .as_deref()
            .unwrap_or_default()
            .contains("NUL byte"),
        "{job:?}"
    );
    assert_eq!(out.job(2).result(), ("succeeded", None));

    let out = Run::new().arg("--strict").stdin(&input[..]).run();
    out.code(2);
    assert!(
        out.stderr().contains(":1: the command holds a NUL byte"),
        "{}",
        out.dump()
    );
    assert!(out.stdout.is_empty(), "{}", out.dump());
}

/// The peak resident set size of process `pid` so far (`VmHWM`), in KiB.
fn peak_rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status")
}

#[test]
fn strict_checks_a_huge_input_in_bounded_memory_and_says_so_when_interrupted() {
    // 96 MiB of valid lines on a stdin that stays open: --strict is still checking when
    // SIGINT comes. Its peak memory stays far below the input's size (the lines go to a
    // temporary file), and the interruption is said on stderr, in the report and in the
    // exit status.
    const LINES: usize = 96 * 1024;
    let scratch = Scratch::new();
    let mut running = Run::new()
        .scratch(&scratch)
        .env("TMPDIR", scratch.path())
        .args(["--strict", "--events"])
        .arg(scratch.join("events.jsonl"))
        .stdin_piped()
        .spawn();
    let spawned = std::time::Instant::now();
    let line = format!("k\ttouch \"$D/ran\" {}\n", "x".repeat(1000));
    let chunk = line.repeat(64);
    for _ in 0..LINES / 64 {
        running.stdin().write_all(chunk.as_bytes()).unwrap();
    }
    running.stdin().flush().unwrap();
    let peak_kib = peak_rss_kib(running.pid());
    let checking = spawned.elapsed();
    running.signal(nix::sys::signal::Signal::SIGINT);
    let out = running.wait();
    out.code(130);
    // Every line but what the pipe still held was read and checked before the signal.
    let checked: u64 = out
        .stderr()
        .split(" checked")
        .next()
        .and_then(|head| head.rsplit(": ").next())
        .and_then(|count| count.strip_suffix(" lines"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of lines checked\n{}", out.dump()));
    let in_pipe = (1 << 20) / line.len() as u64;
    assert!(
        (LINES as u64 - in_pipe..=LINES as u64).contains(&checked),
        "{checked} lines checked of {LINES}\n{}",
        out.dump()
    );
    assert!(
        peak_kib < 48 * 1024,
        "lanes' peak RSS was {peak_kib} KiB for {} MiB of input",
        (LINES * line.len()) >> 20
    );
    assert!(
        out.stderr()
            .contains("SIGINT while checking the input (--strict)")
            && out.stderr().contains("nothing was run"),
        "{}",
        out.dump()
    );
    let report = out.report();
    assert!(report.jobs.is_empty(), "{}", out.dump());
    assert_eq!((report.summary.jobs, report.summary.exit_code), (0, 130));
    // The run's clock started before the check: its duration covers the time lanes spent
    // reading the input (less its own start-up, which the test's clock also counts).
    assert!(
        u128::from(report.summary.duration_ms) + 200 >= checking.as_millis(),
        "duration_ms {} after {checking:?} of checking\n{}",
        report.summary.duration_ms,
        out.dump()
    );
    assert!(!scratch.exists("ran"));
    assert_eq!(scratch.read("events.jsonl"), "");
}

/// A file of jobs or a manifest that is a FIFO is opened once. lanes opened it to look at its
/// first bytes (is it a program?) and again to read it: a writer that wrote everything and
/// closed in between lost it, and lanes waited for a second writer for ever.
#[test]
fn a_fifo_of_jobs_or_a_manifest_is_opened_once() {
    let scratch = Scratch::new();
    for (name, text) in [
        ("jobs", "a\ttouch \"$D/ran\"\n"),
        (
            "jobs.toml",
            "[[job]]\nkey = \"a\"\ncmd = 'touch \"$D/ran\"'\n",
        ),
    ] {
        for round in 0..10 {
            let fifo = scratch.join(&format!("{round}-{name}"));
            nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
            // The writer waits in its open; lanes' first open is the one it meets.
            let writer = {
                let fifo = fifo.clone();
                std::thread::spawn(move || std::fs::write(fifo, text))
            };
            let running = Run::new().scratch(&scratch).no_report().arg(&fifo).spawn();
            let pid = running.pid();
            // (Dropped by the panic, `running` kills lanes.)
            assert!(
                wait_until(Duration::from_secs(10), || !alive(pid)),
                "{name}, round {round}: lanes waited for a second writer"
            );
            running.wait().code(0);
            assert!(writer.join().unwrap().is_ok());
            assert!(scratch.exists("ran"), "{name}, round {round}");
            std::fs::remove_file(scratch.join("ran")).unwrap();
        }
    }
}

/// A stop signal while lanes waits for the writer of a FIFO of jobs or of a manifest, or
/// reads a manifest from a pipe that has not ended, ends it at once: nothing has started
/// (the handled signals were blocked there, and only SIGKILL ended lanes).
#[test]
fn a_stop_signal_ends_a_wait_for_the_input_before_anything_starts() {
    let scratch = Scratch::new();
    for name in ["jobs", "jobs.toml"] {
        let fifo = scratch.join(name);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let running = Run::new().scratch(&scratch).no_report().arg(&fifo).spawn();
        let pid = running.pid();
        assert!(wait_until(Duration::from_secs(10), || {
            std::fs::read_to_string(format!("/proc/{pid}/wchan"))
                .is_ok_and(|w| w.contains("wait_for_partner"))
        }));
        running.signal(nix::sys::signal::Signal::SIGINT);
        assert!(
            wait_until(Duration::from_secs(5), || !alive(pid)),
            "{name}: lanes went on waiting for a writer after SIGINT"
        );
        running.wait().code(130);
    }
    // `--manifest -` from a producer that has not ended.
    let mut running = Run::new()
        .scratch(&scratch)
        .no_report()
        .args(["--manifest", "-"])
        .stdin_piped()
        .spawn();
    running
        .stdin()
        .write_all(b"[[job]]\nkey = \"a\"\n")
        .unwrap();
    let pid = running.pid();
    assert!(wait_until(Duration::from_secs(10), || {
        std::fs::read_to_string(format!("/proc/{pid}/wchan"))
            .is_ok_and(|w| w.contains("pipe_read") || w.contains("pipe_wait"))
    }));
    running.signal(nix::sys::signal::Signal::SIGINT);
    assert!(
        wait_until(Duration::from_secs(5), || !alive(pid)),
        "lanes went on reading its manifest after SIGINT"
    );
    running.wait().code(130);
}

/// A stdin closed when lanes starts (`lanes <&-`: a pipeline that lost its producer) is no
/// empty input: whatever would read it refuses it, exit status 2, and nothing runs; a run
/// that does not read stdin does not mind.
#[test]
fn a_stdin_closed_at_start_is_refused_by_whatever_would_read_it() {
    let scratch = Scratch::new();
    let runtime = scratch.path().join("runtime");
    std::fs::create_dir(&runtime).unwrap();
    scratch.write("j.tsv", "k\ttouch \"$PWD/ran-j\"\n");
    let closed = |args: &[&str]| {
        std::process::Command::new("sh")
            .arg("-c")
            .arg("exec <&-; exec \"$0\" \"$@\"")
            .arg(BIN)
            .args(args)
            .env("XDG_RUNTIME_DIR", &runtime)
            .current_dir(scratch.path())
            .output()
            .expect("sh")
    };
    for (args, said) in [
        (
            vec![],
            "lanes: cannot read stdin: it was closed when lanes started (`<&-`)",
        ),
        (vec!["--strict"], "lanes: cannot read stdin: it was closed"),
        (vec!["--dry-run"], "lanes: cannot read stdin: it was closed"),
        (vec!["touch"], "lanes: cannot read stdin: it was closed"),
        (
            vec!["--manifest", "-"],
            "stdin: it was closed when lanes started",
        ),
        (
            vec!["submit"],
            "cannot read the submissions from stdin: it was closed",
        ),
        (
            vec!["timeline", "--output", "t.html", "-"],
            "cannot read stdin: it was closed",
        ),
        // Named by a path: the `/dev/null` Rust's start-up put there is not read as a file.
        (
            vec!["/dev/stdin"],
            "cannot open /dev/stdin: it names stdin, which was closed",
        ),
        (
            vec!["-a", "/dev/fd/0", "echo"],
            "cannot open /dev/fd/0: it names stdin",
        ),
        (
            vec!["--manifest", "/proc/self/fd/0"],
            "it names stdin, which was closed",
        ),
        (
            vec!["--resume", "/dev/stdin", "j.tsv"],
            "it names stdin, which was closed",
        ),
        (
            vec!["timeline", "--output", "t.html", "/dev/stdin"],
            "it names stdin, which was closed",
        ),
    ] {
        let out = closed(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
    assert!(!scratch.exists("ran-j"));
    let out = closed(&["touch", ":::", "ran"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(scratch.exists("ran"));
}
