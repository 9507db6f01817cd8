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

/// What the terminal shows of shell `command`, run on a pseudo-terminal by script(1) (`TERM`
/// xterm, neither CI nor NO_COLOR set); it must succeed.
fn on_a_terminal(command: &str) -> String {
    let out = std::process::Command::new("script")
        .args(["-qec", command, "/dev/null"])
        .env_remove("CI")
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("script(1) runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
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
    let terminal = on_a_terminal(&command);
    assert!(terminal.contains("to-out"), "{terminal:?}");
    assert!(
        terminal.contains('\u{1b}'),
        "stdout is a terminal: {terminal:?}"
    );
    let err = scratch.read("err.txt");
    assert!(err.contains("[k] to-err"), "{err:?}");
    assert!(!err.contains('\u{1b}'), "escape codes in a file: {err:?}");
}

/// The lines of `stream` shown with the prefix `[key] `, without it, in order.
fn lines_of<'a>(stream: &'a [u8], key: &str) -> Vec<&'a [u8]> {
    let prefix = format!("[{key}] ");
    stream
        .split(|&b| b == b'\n')
        .filter_map(|line| line.strip_prefix(prefix.as_bytes()))
        .collect()
}

#[test]
fn jobs_writing_far_more_than_a_pipe_holds_on_either_stream_finish_and_lose_nothing() {
    // `big` writes about 1 MB to stdout; `err` about 130 kB to stderr before its first byte on
    // stdout; `mix` alternates between the two. Reading one stream to its end before the
    // other, or only after the job exits, blocks them all: the timeout then shows it.
    let x100 = "x".repeat(100);
    let out = Run::new()
        .env("X100", &x100)
        .args(["-j", "3", "--timeout", "20"])
        .stdin(
            "big\ti=0; while [ $i -lt 10000 ]; do echo \"$i $X100\"; i=$((i+1)); done\n\
             err\ti=0; while [ $i -lt 20000 ]; do echo e$i; i=$((i+1)); done >&2; echo done-out\n\
             mix\ti=0; while [ $i -lt 5000 ]; do echo o$i; echo E$i >&2; i=$((i+1)); done\n",
        )
        .run();
    out.code(0);
    let numbered = |tag: &str, n: usize, tail: &str| -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| format!("{tag}{i}{tail}").into_bytes())
            .collect()
    };
    let check = |stream: &[u8], key: &str, want: Vec<Vec<u8>>, what: &str| {
        let got = lines_of(stream, key);
        assert!(
            got.len() == want.len() && got.iter().zip(&want).all(|(g, w)| g == w),
            "{what} of {key}: {} lines, expected {}; first difference at line {:?}",
            got.len(),
            want.len(),
            got.iter().zip(&want).position(|(g, w)| g != w)
        );
    };
    check(
        &out.stdout,
        "big",
        numbered("", 10_000, &format!(" {x100}")),
        "stdout",
    );
    check(&out.stderr, "err", numbered("e", 20_000, ""), "stderr");
    check(&out.stdout, "err", vec![b"done-out".to_vec()], "stdout");
    check(&out.stdout, "mix", numbered("o", 5000, ""), "stdout");
    check(&out.stderr, "mix", numbered("E", 5000, ""), "stderr");
    assert_eq!(out.report().summary.succeeded, 3);
}

/// A job printing 2 000 JSON records, each in three writes (head, 250 bytes of padding from
/// `$PAD`, tail), so that lines reach lanes in pieces while other jobs write too.
pub const RECORDS_IN_PIECES: &str = "n=0; while [ $n -lt 2000 ]; do \
    printf '{\"k\":\"%s\",\"n\":%d,' \"$LANES_KEY\" $n; printf '\"pad\":\"%s\"' \"$PAD\"; \
    printf '}\\n'; n=$((n+1)); done";

/// The 2 000 lines a [`RECORDS_IN_PIECES`] job of `key` prints.
pub fn records_in_pieces(key: &str) -> Vec<String> {
    let pad = "x".repeat(250);
    (0..2000)
        .map(|n| format!("{{\"k\":\"{key}\",\"n\":{n},\"pad\":\"{pad}\"}}"))
        .collect()
}

#[test]
fn lines_written_in_pieces_by_concurrent_jobs_stay_whole_and_unmixed() {
    let keys = ["A", "B", "C", "D"];
    let input: String = keys
        .iter()
        .map(|k| format!("{k}\t{RECORDS_IN_PIECES}\n"))
        .collect();
    let out = Run::new()
        .env("PAD", "x".repeat(250))
        .args(["-j", "4"])
        .stdin(input)
        .run();
    out.code(0);
    let stdout = out.stdout();
    let mut shown = 0;
    for key in keys {
        let want = records_in_pieces(key);
        let got: Vec<String> = lines_of(&out.stdout, key)
            .iter()
            .map(|line| String::from_utf8_lossy(line).into_owned())
            .collect();
        assert!(
            got == want,
            "the lines of {key} are broken, mixed or missing: {} of {}",
            got.len(),
            want.len()
        );
        shown += got.len();
    }
    assert_eq!(stdout.lines().count(), shown, "lines without a prefix");
}

#[test]
fn an_unterminated_last_line_is_ended_before_the_next_jobs_output() {
    // One slot: each job's output follows the last one's directly.
    let out = Run::new()
        .args(["-j", "1"])
        .stdin(
            "n1\tprintf 'tail-without-newline'\n\
             n2\tprintf 'line\\npartial-end'; exit 3\n\
             n3\techo next-job\n\
             e1\tprintf 'stderr-tail' >&2\n",
        )
        .run();
    out.code(1);
    assert_eq!(
        out.stdout(),
        "[n1] tail-without-newline\n[n2] line\n[n2] partial-end\n[n3] next-job\n",
        "{}",
        out.dump()
    );
    let stderr = out.stderr();
    let tails: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("stderr-tail"))
        .collect();
    assert_eq!(tails, ["[e1] stderr-tail"], "{}", out.dump());
    assert!(stderr.ends_with('\n'), "{stderr:?}");
    let n2 = out.job(2);
    assert_eq!(n2.result(), ("failed", Some("exit_status")), "{n2:?}");
    assert_eq!(n2.exit_code, Some(3));
}

#[test]
fn a_character_split_across_writes_and_bytes_that_are_not_utf8_pass_through_unchanged() {
    // `\300\377` is never UTF-8, `\351` is a Latin-1 é; the rocket (F0 9F 9A 80) comes in two
    // writes with a pause between them.
    let out = Run::new()
        .args(["-j", "3"])
        .stdin(
            "bin\tprintf 'before\\n\\300\\377 raw bytes\\nafter\\n'\n\
             bin\techo still-alive\n\
             split\tprintf '\\360\\237'; sleep 0.3; printf '\\232\\200 rocket\\n'\n\
             latin\tprintf 'caf\\351\\n'\n",
        )
        .run();
    out.code(0);
    let want: [(&str, &[&[u8]]); 3] = [
        (
            "bin",
            &[b"before", b"\xc0\xff raw bytes", b"after", b"still-alive"],
        ),
        ("split", &[b"\xf0\x9f\x9a\x80 rocket"]),
        ("latin", &[b"caf\xe9"]),
    ];
    for (key, lines) in want {
        assert_eq!(lines_of(&out.stdout, key), lines, "{}", out.dump());
    }
    let lines = out.stdout.iter().filter(|&&b| b == b'\n').count();
    assert_eq!(lines, 6, "{}", out.dump());
    for (name, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        assert!(
            !bytes.windows(3).any(|w| w == "\u{fffd}".as_bytes()),
            "U+FFFD on {name}: bytes were decoded and replaced"
        );
    }
}

/// On a terminal, colours a job's output set and never reset are reset before lanes' own
/// display and summary: they are drawn in the terminal's colours, not the job's.
#[test]
fn on_a_terminal_the_summary_and_display_are_drawn_after_a_colour_reset() {
    let scratch = Scratch::new();
    scratch.write("jobs.tsv", "k\tprintf '\\033[1;44mblue\\n'\n");
    let command = format!(
        "{} --progress always {} < /dev/null",
        sh_quote(BIN),
        sh_quote(scratch.join("jobs.tsv").to_str().unwrap()),
    );
    let terminal = on_a_terminal(&command);
    let blue = terminal.find("\u{1b}[1;44mblue").expect("the job's output");
    let summary = terminal.rfind("lanes: 1 job").expect("the summary");
    assert!(
        terminal[blue..summary].contains("\u{1b}[0m"),
        "no reset between the job's colours and the summary: {terminal:?}"
    );
}
