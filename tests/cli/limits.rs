//! Resource limits on lanes itself (`ulimit -f`, `-n`, `-u`): never a death by signal, never a
//! panic; a clear message and a documented status, and no job left behind.

use std::time::Duration;

use crate::support::*;

#[test]
fn a_report_past_the_file_size_limit_is_a_write_error_not_a_death() {
    // `ulimit -f 1`: 512 bytes. The report outgrows it with its second record: the write
    // fails with EFBIG (lanes ignores SIGXFSZ), which is handled like a full disk. The jobs'
    // output outgrows it in the result files too.
    let scratch = Scratch::new();
    let report = scratch.join("report.jsonl");
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .wrapper("ulimit -f 1")
        .arg("--report")
        .arg(&report)
        .arg("--results")
        .arg(scratch.join("results"))
        .args(["--output", "none"])
        .stdin(
            "a\tseq 1 20000; touch \"$D/a-ran\"\n\
             b\tseq 1 20000; touch \"$D/b-ran\"\n\
             c\ttouch \"$D/c-ran\"\n",
        )
        .run();
    out.code(1);
    assert!(
        out.stderr().contains("cannot write the report") && out.stderr().contains("File too large"),
        "{}",
        out.dump()
    );
    assert!(out.stderr().contains("3 succeeded"), "{}", out.dump());
    for job in ["a", "b", "c"] {
        assert!(
            scratch.exists(&format!("{job}-ran")),
            "{job}\n{}",
            out.dump()
        );
    }
    let stored = std::fs::metadata(&report).unwrap().len();
    assert!(stored <= 512, "{stored} bytes");
}

#[test]
fn no_descriptor_limit_makes_lanes_panic() {
    let scratch = Scratch::new();
    // With the report files, and without (then the limits at which lanes' own stdout and
    // stderr cannot be duplicated are other ones).
    for files in [true, false] {
        for limit in 0..=40 {
            let mut run = Run::new()
                .scratch(&scratch)
                .no_report()
                .wrapper(&format!("ulimit -n {limit}"));
            if files {
                run = run
                    .arg("--report")
                    .arg(scratch.join("report.jsonl"))
                    .arg("--events")
                    .arg(scratch.join("events.jsonl"))
                    .arg("--junit")
                    .arg(scratch.join("junit.xml"));
            }
            let out = run.stdin("a\ttrue\nb\ttrue\n").run();
            ended_plainly(limit, &out);
        }
    }
}

#[test]
fn under_lock_dir_no_descriptor_limit_makes_a_run_wait_for_ever() {
    // Where not one key's lock file can be opened with nothing of the run in flight, nothing
    // will free a descriptor: the jobs fail (`spawn_error`) instead of waiting for ever.
    let scratch = Scratch::new();
    let dir = scratch.join("locks");
    let mut failed_for_want_of_a_lock = 0;
    for limit in 0..=40 {
        let out = Run::new()
            .scratch(&scratch)
            .wrapper(&format!("ulimit -n {limit}"))
            .args(["-j", "1", "--lock-dir"])
            .arg(&dir)
            .stdin("a\ttrue\na\ttrue\nb\ttrue\n")
            .run();
        ended_plainly(limit, &out);
        assert!(
            out.elapsed < Duration::from_secs(30),
            "ulimit -n {limit}\n{}",
            out.dump()
        );
        if out.code == 1 && out.stderr().contains("cannot lock key") {
            failed_for_want_of_a_lock += 1;
            // The key's next job asks again, and fails in its turn.
            for seq in [1, 2, 3] {
                let job = out.job(seq);
                assert_eq!(job.result(), ("failed", Some("spawn_error")), "{job:?}");
                assert!(
                    job.error.as_deref().unwrap().contains("ulimit -n"),
                    "{job:?}"
                );
            }
        }
    }
    assert!(
        failed_for_want_of_a_lock > 0,
        "no limit left lanes without a lock file"
    );
}

/// A run under `ulimit -n LIMIT` ended as lanes ends for want of descriptors: no panic, and
/// an exit status that says what happened.
fn ended_plainly(limit: u32, out: &Output) {
    let stderr = out.stderr();
    assert!(
        !stderr.contains("panicked") && !stderr.contains("internal error"),
        "ulimit -n {limit}\n{}",
        out.dump()
    );
    match out.code {
        // Too few for the dynamic loader: lanes never started.
        127 => assert!(stderr.contains("error while loading shared libraries")),
        // Nothing could run: a usage error naming the limit; or jobs that could not start,
        // which lanes says on stderr.
        1 | 2 => assert!(
            stderr.contains("lanes:"),
            "ulimit -n {limit}\n{}",
            out.dump()
        ),
        0 => {}
        _ => panic!("ulimit -n {limit}: exit {}\n{}", out.code, out.dump()),
    }
}

#[test]
fn a_server_short_of_descriptors_never_calls_its_journal_no_journal() {
    // The journal a clean end leaves (its header alone), read again under every small limit:
    // a second open of it for want of a descriptor once made it "no journal".
    let scratch = Scratch::new();
    let socket = scratch.join("lanes.sock");
    scratch.write("lanes.journal", "{\"journal\":3,\"last\":0}\n");
    // (Each too small for a server to start: it says why and ends.)
    for limit in 8..=15 {
        let out = Run::new()
            .scratch(&scratch)
            .no_report()
            .wrapper(&format!("ulimit -n {limit}"))
            .arg("serve")
            .arg("--socket")
            .arg(&socket)
            .run();
        let stderr = out.stderr();
        assert!(
            !stderr.contains("not a journal line"),
            "ulimit -n {limit}\n{}",
            out.dump()
        );
        if out.code == 2 && stderr.contains("Too many open files") {
            assert!(
                stderr.contains("raise `ulimit -n`"),
                "ulimit -n {limit}\n{}",
                out.dump()
            );
        }
    }
}

#[test]
fn lanes_own_output_survives_when_no_thread_can_be_started() {
    // RLIMIT_NPROC counts every process and thread of the user, and root is exempt from it:
    // the run is made as `nobody`, with room for lanes and its one job but no writer thread.
    // The job runs until lanes has written its stderr line (builtins only: it cannot fork
    // either), so that no thread can start while lanes writes.
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("skipped: needs root, to run lanes as nobody under `ulimit -u`");
        return;
    }
    let Some(setpriv) = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|path| std::path::Path::new(path).exists())
    else {
        eprintln!("skipped: no setpriv");
        return;
    };
    let scratch = Scratch::new();
    // `nobody` reads lanes' stderr file through the scratch directory.
    std::fs::set_permissions(
        scratch.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .wrapper(&format!(
            "exec >\"$D/out\" 2>\"$D/err\" {setpriv} --reuid=nobody --regid=nogroup \
             --clear-groups prlimit --nproc=2 \"$0\" \"$@\""
        ))
        .stdin(
            "a\techo out; echo err >&2; \
             until read -r line < \"$D/err\" && [ \"$line\" = \"[a] err\" ]; do :; done; exit 3\n",
        )
        .run();
    out.code(1);
    let (stdout, stderr) = (scratch.read("out"), scratch.read("err"));
    assert_eq!(stdout, "[a] out\n", "{}", out.dump());
    assert!(stderr.starts_with("[a] err\n"), "{stderr}");
    assert!(
        stderr.contains("1 job in") && stderr.contains("1 failed"),
        "{stderr}"
    );
}

#[test]
fn lanes_raises_its_own_descriptor_limit_and_jobs_get_the_one_it_was_given() {
    // A soft limit under the hard one (as a login's 1024): lanes takes the hard limit for
    // itself (its parent here, `$PPID`), and gives its jobs the soft limit it was given, so a
    // job using select(2) never meets descriptors past it.
    // What lanes inherits from this process.
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    if hard <= 200 {
        eprintln!("the hard limit on descriptors is {hard}: nothing to raise; skipped");
        return;
    }
    for containment in ["auto", "process-group"] {
        let out = Run::new()
            .wrapper("ulimit -Sn 200")
            .args(["--containment", containment])
            .stdin(
                "k\techo \"job $(ulimit -Sn) $(ulimit -Hn)\"; \
                 grep '^Max open files' /proc/$PPID/limits\n",
            )
            .run();
        out.code(0);
        assert!(
            out.stdout().contains(&format!("[k] job 200 {hard}\n")),
            "--containment {containment}\n{}",
            out.dump()
        );
        let lanes_own: Vec<String> = out
            .stdout()
            .lines()
            .find_map(|l| l.strip_prefix("[k] Max open files"))
            .unwrap_or_else(|| panic!("no limits line\n{}", out.dump()))
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        assert_eq!(
            lanes_own[..2],
            [hard.to_string(), hard.to_string()],
            "--containment {containment}\n{}",
            out.dump()
        );
    }
}

#[test]
fn stdout_and_stderr_past_the_file_size_limit_are_no_crash() {
    // Both of lanes' own streams are files under `ulimit -f 1` (512 bytes): writing the jobs'
    // output fails with EFBIG on both, and so does the message saying so. A message that
    // cannot be written must not end lanes (it panicked on its stderr writer thread, exit 101).
    // The job fills stdout first and its stderr only once lanes has said so there (or after
    // 5 s): its own stderr lines would otherwise fill the 512 bytes before the message.
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .wrapper("ulimit -f 1; exec >\"$D/out\" 2>\"$D/err\"")
        .args(["-j", "1"])
        .stdin(
            "a\tseq 1 300; n=0; until grep -q 'File too large' \"$D/err\"; do \
             n=$((n+1)); [ $n -gt 500 ] && break; sleep 0.01; done; seq 1 300 >&2\n\
             b\ttouch \"$D/b-ran\"\n",
        )
        .run();
    // Every job ran; the jobs' output is incomplete, which makes the exit status 1.
    out.code(1);
    assert!(scratch.exists("b-ran"), "{}", out.dump());
    assert!(
        scratch.read("err").contains("File too large"),
        "{}",
        scratch.read("err")
    );
}

#[test]
fn a_json_report_on_stdout_cut_by_the_file_size_limit_makes_the_exit_status_1() {
    // Under `--json` the report is stdout, written by a thread behind the run. Here the `run`
    // and job records fit in `ulimit -f 2` (1,024 bytes) and the `summary`, written after the
    // exit status is decided, does not: the status must be 1 all the same (it was 0).
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .no_report()
        .wrapper("ulimit -f 2; exec >\"$D/out\" 2>\"$D/err\"")
        .args(["--json", "--output", "none", "-j", "1"])
        .stdin(format!("a\ttrue {}\n", "x".repeat(245)))
        .run();
    out.code(1);
    let written = std::fs::read(scratch.join("out")).unwrap();
    let whole: Vec<&[u8]> = written.split_inclusive(|&b| b == b'\n').collect();
    assert_eq!(whole.len(), 3, "run, job and a torn summary: {written:?}");
    assert!(!written.ends_with(b"\n"), "the summary is cut");
    assert!(
        scratch.read("err").contains("File too large"),
        "{}",
        scratch.read("err")
    );
}

/// A file-size limit met by the summary alone, the report's last line: the report is
/// incomplete, and the exit status is 1, though every job succeeded and the summary's own
/// (cut) `exit_code` said 0 (found by the chaos test: lanes exited 0).
#[test]
fn a_summary_cut_by_the_file_size_limit_makes_the_exit_status_1() {
    let scratch = Scratch::new();
    let report = scratch.join("report.jsonl");
    let run = |key: &str, limit: Option<u64>| {
        let mut run = Run::new()
            .scratch(&scratch)
            .no_report()
            .arg("--report")
            .arg(&report)
            .stdin(format!("{key}\ttrue\n"));
        if let Some(blocks) = limit {
            run = run.wrapper(&format!("ulimit -f {blocks}"));
        }
        run.run()
    };
    // Where the summary begins and how long it is, without a limit.
    run("k", None).code(0);
    let text = std::fs::read_to_string(&report).unwrap();
    let summary = text.trim_end().rsplit('\n').next().unwrap().len() + 1;
    let before = (text.len() - summary) as u64;
    // A key that puts the limit (in 512-byte blocks) in the middle of the summary: the key
    // is in the job record once.
    let blocks = (before + summary as u64 / 2).div_ceil(512);
    let pad = blocks * 512 - summary as u64 / 2 - before;
    let key = format!("k{}", "x".repeat(pad as usize));
    let out = run(&key, Some(blocks));
    let stored = std::fs::read_to_string(&report).unwrap();
    assert!(
        stored.len() as u64 == blocks * 512 && !stored.ends_with('\n'),
        "the limit did not cut the summary: {} bytes of {}",
        stored.len(),
        blocks * 512
    );
    out.code(1);
    assert!(out.stderr().contains("1 succeeded"), "{}", out.dump());
}
