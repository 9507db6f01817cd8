//! SPEC §5.1 and §4: job output (`prefixed`, `raw`, `none`), `--json`, and a closed stdout.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::time::Duration;

use crate::support::*;

#[test]
fn prefixed_lines_stay_whole_under_concurrency() {
    const LINES: usize = 2000;
    let keys = ["k1", "k2", "k3", "k4"];
    let big = "B".repeat(10_000);
    // Every 100th line is 10 000 bytes: longer than PIPE_BUF, so it reaches lanes in pieces.
    let job = format!(
        "i=0; while [ $i -lt {LINES} ]; do i=$((i+1)); \
         if [ $((i % 100)) -eq 0 ]; then echo \"$LANES_KEY-$i-$BIG\"; \
         else echo \"$LANES_KEY-$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"; fi; \
         if [ $((i % 4)) -eq 0 ]; then echo \"$LANES_KEY-err-$i\" >&2; fi; done"
    );
    let input: String = keys.iter().map(|k| format!("{k}\t{job}\n")).collect();
    let out = Run::new()
        .env("BIG", &big)
        .args(["-j", "4"])
        .stdin(input)
        .run();
    out.code(0);

    let mut next: BTreeMap<&str, usize> = keys.iter().map(|k| (*k, 1)).collect();
    for line in out.stdout().lines() {
        let (prefix, rest) = line
            .split_once("] ")
            .unwrap_or_else(|| panic!("unprefixed stdout line {:.80}", line));
        let key = prefix.strip_prefix('[').expect("prefix starts with [");
        let i = next.get_mut(key).unwrap_or_else(|| panic!("key {key:?}"));
        let tail = if *i % 100 == 0 {
            big.as_str()
        } else {
            "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
        };
        assert_eq!(
            rest,
            format!("{key}-{i}-{tail}"),
            "a broken or mixed line of {key} (expected line {i})"
        );
        *i += 1;
    }
    assert!(next.values().all(|&n| n == LINES + 1), "{next:?}");

    let mut next_err: BTreeMap<&str, usize> = keys.iter().map(|k| (*k, 4)).collect();
    for line in out.stderr().lines().filter(|l| l.starts_with('[')) {
        let (prefix, rest) = line.split_once("] ").expect("prefixed");
        let key = &prefix[1..];
        let i = next_err.get_mut(key).expect("known key");
        assert_eq!(rest, format!("{key}-err-{i}"));
        *i += 4;
    }
    assert!(next_err.values().all(|&n| n == LINES + 4), "{next_err:?}");
}

#[test]
fn job_stderr_goes_to_stderr_and_stdout_to_stdout() {
    let out = Run::new().stdin("k\techo to-out; echo to-err >&2\n").run();
    out.code(0);
    assert_eq!(out.stdout(), "[k] to-out\n");
    assert!(out.stderr().contains("[k] to-err\n"), "{}", out.dump());
    assert!(!out.stderr().contains("to-out"));
    // Not a terminal: no colours, no escape codes.
    assert!(!out.stdout.contains(&0x1b) && !out.stderr.contains(&0x1b));
}

#[test]
fn a_last_line_without_newline_is_written_with_one() {
    let out = Run::new()
        .stdin("k\tprintf 'a\\nno-newline'; printf 'partial' >&2\n")
        .run();
    out.code(0);
    assert_eq!(out.stdout(), "[k] a\n[k] no-newline\n");
    assert!(out.stderr().contains("[k] partial\n"), "{}", out.dump());
}

#[test]
fn bytes_that_are_not_utf8_pass_through_unchanged() {
    let out = Run::new()
        .stdin("k\tprintf '\\377\\376 caf\\303\\251\\n'\n")
        .run();
    out.code(0);
    assert_eq!(out.stdout, b"[k] \xff\xfe caf\xc3\xa9\n");
}

#[test]
fn lines_longer_than_64_kib_come_in_prefixed_pieces() {
    let out = Run::new()
        .stdin("k\thead -c 150000 /dev/zero | tr '\\0' x; echo\n")
        .run();
    out.code(0);
    let stdout = out.stdout();
    let pieces: Vec<&str> = stdout.lines().collect();
    assert_eq!(pieces.len(), 3, "150 000 bytes in 64 KiB pieces");
    let mut total = 0;
    for piece in &pieces {
        let body = piece.strip_prefix("[k] ").expect("each piece is prefixed");
        assert!(body.len() <= 64 * 1024);
        assert!(body.bytes().all(|b| b == b'x'));
        total += body.len();
    }
    assert_eq!(total, 150_000);
}

#[test]
fn json_puts_only_the_report_on_stdout() {
    let out = Run::new()
        .no_report()
        .args(["--json", "-j", "2"])
        .stdin("a\techo out-a; echo err-a >&2\nb\texit 3\n")
        .run();
    out.code(1);
    let report = out.stdout_report();
    assert_eq!(report.jobs.len(), 2);
    assert_eq!(report.job(2).exit_code, Some(3));
    assert!(out.stderr().contains("[a] out-a\n"), "{}", out.dump());
    assert!(out.stderr().contains("[a] err-a\n"), "{}", out.dump());
}

#[test]
fn json_and_a_report_file_hold_the_same_records() {
    let out = Run::new()
        .args(["--json", "-j", "2"])
        .stdin("a\techo 1\nb\techo 2\na\tfalse\n")
        .run();
    out.code(1);
    assert_eq!(out.stdout(), *out.report_text.as_ref().unwrap());
}

#[test]
fn output_none_discards_job_output() {
    let out = Run::new()
        .args(["--output", "none"])
        .stdin("k\techo to-out; echo to-err >&2\n")
        .run();
    out.code(0);
    assert!(out.stdout.is_empty(), "{}", out.dump());
    assert!(!out.stderr().contains("to-err"), "{}", out.dump());
    assert_eq!(out.job(1).result(), ("succeeded", None));
}

#[test]
fn output_raw_writes_bytes_as_they_come() {
    let out = Run::new()
        .args(["--output", "raw"])
        .stdin("k\tprintf 'a\\n\\377b'; printf 'E1\\n' >&2\n")
        .run();
    out.code(0);
    assert_eq!(out.stdout, b"a\n\xffb");
    assert!(out.stderr().starts_with("E1\n"), "{}", out.dump());
    assert!(!out.stderr().contains("[k]"));
}

#[test]
fn a_closed_stdout_is_not_a_crash_and_jobs_still_run() {
    // Like `lanes … | head -1`: the reader goes away after one line while jobs still write.
    let scratch = Scratch::new();
    let mut running = Run::new()
        .scratch(&scratch)
        .own_stdout()
        .args(["-j", "2"])
        .stdin(format!(
            "a\techo first; {}; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); echo line $i; done\n\
             a\techo $$ > \"$D/after.pid\"; echo more\n\
             b\t{}; echo from-b; exit 3\n",
            await_file("closed"),
            await_file("closed")
        ))
        .spawn();
    let mut stdout = BufReader::new(running.take_stdout());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert_eq!(first, "[a] first\n");
    drop(stdout);
    scratch.write("closed", "");
    let out = running.wait();
    // The exit status is the jobs' (one failed), not a crash.
    out.code(1);
    let report = out.report();
    assert_eq!(report.summary.succeeded, 2, "{}", out.dump());
    assert_eq!(out.job(3).exit_code, Some(3));
    assert!(!alive(scratch.pid("after.pid")));
    assert!(!out.stderr().contains("panicked"), "{}", out.dump());
}

#[test]
fn a_closed_report_pipe_is_not_a_crash() {
    // `lanes --json … | head -1`: only the run record is read.
    let scratch = Scratch::new();
    let mut running = Run::new()
        .scratch(&scratch)
        .own_stdout()
        .args(["--json", "-j", "2"])
        .stdin(format!(
            "a\t{}; echo a-ran\nb\t{}; touch \"$D/b-ran\"\n",
            await_file("closed"),
            await_file("closed")
        ))
        .spawn();
    let mut stdout = BufReader::new(running.take_stdout());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    assert!(first.starts_with("{\"type\":\"run\""), "{first}");
    drop(stdout);
    scratch.write("closed", "");
    let out = running.wait();
    out.code(0);
    assert!(scratch.exists("b-ran"));
    // The report file is complete all the same.
    assert_eq!(out.report().summary.succeeded, 2);
    assert!(out.stderr().contains("[a] a-ran\n"), "{}", out.dump());
    assert!(out.elapsed < Duration::from_secs(20));
}

#[test]
fn each_stream_is_coloured_by_its_own_terminal_decision() {
    // stdout on a terminal (a pty from script(1)), stderr into a file: prefixes on stdout are
    // coloured, the file gets none of the escape codes.
    let scratch = Scratch::new();
    scratch.write("jobs.tsv", "k\techo to-out; echo to-err >&2\n");
    let command = format!(
        "{} --progress never {} < {} 2> {}",
        sh_quote(BIN),
        sh_quote(scratch.join("jobs.tsv").to_str().unwrap()),
        "/dev/null",
        sh_quote(scratch.join("err.txt").to_str().unwrap()),
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env_remove("CI")
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script(1) runs");
    assert!(out.status.success(), "{out:?}");
    let terminal = String::from_utf8_lossy(&out.stdout);
    assert!(terminal.contains("to-out"), "{terminal:?}");
    assert!(
        terminal.contains('\u{1b}'),
        "stdout is a terminal: {terminal:?}"
    );
    let err = scratch.read("err.txt");
    assert!(err.contains("[k] to-err"), "{err:?}");
    assert!(!err.contains('\u{1b}'), "escape codes in a file: {err:?}");
}
