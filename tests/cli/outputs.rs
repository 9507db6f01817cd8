//! SPEC §5.1, §5.3, §5.4: grouped output (contiguous blocks, `--keep-order`, bounded memory),
//! `--results DIR`, `--junit FILE`, colours and escape codes, and the report against its JSON
//! Schema.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{json, Value};

use crate::output::{records_in_pieces, RECORDS_IN_PIECES};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(10);

/// A grouped block header: `(key, seq, outcome-and-reason)`.
fn header(line: &str) -> Option<(String, u64, String)> {
    let rest = line.strip_prefix("==> [")?.strip_suffix(" <==")?;
    let (key, rest) = rest.split_once("] seq ")?;
    let (seq, outcome) = rest.split_once(": ")?;
    Some((key.to_owned(), seq.parse().ok()?, outcome.to_owned()))
}

/// `outcome` or `outcome (reason)`, as a header shows a record.
fn shown(job: &JobRecord) -> String {
    match &job.reason {
        Some(reason) => format!("{} ({reason})", job.outcome),
        None => job.outcome.clone(),
    }
}

/// Splits grouped stdout into blocks: `(key, seq, outcome, lines)` in order.
fn blocks(stdout: &str) -> Vec<(String, u64, String, Vec<String>)> {
    let mut blocks: Vec<(String, u64, String, Vec<String>)> = Vec::new();
    for line in stdout.lines() {
        match header(line) {
            Some((key, seq, outcome)) => blocks.push((key, seq, outcome, Vec::new())),
            None => blocks
                .last_mut()
                .unwrap_or_else(|| panic!("output before the first header: {line:?}"))
                .3
                .push(line.to_owned()),
        }
    }
    blocks
}

/// A job printing 5 lines on stdout and on stderr, interleaved, with pauses.
fn chatty(extra: &str) -> String {
    format!(
        "for i in 1 2 3 4 5; do echo \"out $LANES_SEQ $i\"; echo \"err $LANES_SEQ $i\" >&2; \
         sleep 0.01; done{extra}"
    )
}

#[test]
fn grouped_output_writes_each_job_as_one_contiguous_block() {
    let keys = ["a", "b", "c", "a", "b", "c", "a", "b"];
    let mut input = String::new();
    for (i, key) in keys.iter().enumerate() {
        let extra = if i == 5 { "; exit 2" } else { "" };
        input.push_str(&format!("{key}\t{}\n", chatty(extra)));
    }
    let out = Run::new()
        .args(["-j", "3", "--output", "grouped"])
        .stdin(input)
        .run();
    out.code(1);
    let report = out.report();
    let blocks = blocks(&out.stdout());
    let order: Vec<u64> = blocks.iter().map(|b| b.1).collect();
    let records: Vec<u64> = report.jobs.iter().map(|j| j.seq).collect();
    assert_eq!(
        order,
        records,
        "blocks in the order jobs end\n{}",
        out.dump()
    );
    for (key, seq, outcome, lines) in &blocks {
        let job = report.job(*seq);
        assert_eq!(Some(key.as_str()), job.key.as_deref());
        assert_eq!(outcome, &shown(job), "header of seq {seq}");
        let want: Vec<String> = (1..=5).map(|i| format!("out {seq} {i}")).collect();
        assert_eq!(lines, &want, "block of seq {seq} (unprefixed, whole)");
    }
    assert_eq!(report.job(6).result(), ("failed", Some("exit_status")));
    // Stderr: each job's lines together, unprefixed, before lanes' own summary.
    let stderr = out.stderr();
    let lines: Vec<&str> = stderr.lines().collect();
    for seq in 1..=keys.len() {
        let first = lines
            .iter()
            .position(|l| *l == format!("err {seq} 1"))
            .unwrap_or_else(|| panic!("no stderr of seq {seq}\n{}", out.dump()));
        let want: Vec<String> = (1..=5).map(|i| format!("err {seq} {i}")).collect();
        assert_eq!(
            lines[first..first + 5],
            want.iter().map(String::as_str).collect::<Vec<_>>()[..],
            "stderr of seq {seq} in one piece\n{stderr}"
        );
    }
}

#[test]
fn grouped_blocks_stay_whole_when_lines_arrive_in_pieces() {
    let keys = ["A", "B", "C", "D"];
    let input: String = keys
        .iter()
        .map(|k| format!("{k}\t{RECORDS_IN_PIECES}\n"))
        .collect();
    let out = Run::new()
        .env("PAD", "x".repeat(250))
        .args(["-j", "4", "--output", "grouped"])
        .stdin(input)
        .run();
    out.code(0);
    let blocks = blocks(&out.stdout());
    let shown: BTreeSet<&str> = blocks.iter().map(|b| b.0.as_str()).collect();
    assert_eq!(shown, keys.into_iter().collect(), "one block per job");
    assert_eq!(blocks.len(), 4, "one block per job");
    for (key, seq, outcome, lines) in &blocks {
        assert_eq!(key, keys[*seq as usize - 1]);
        assert_eq!(outcome, "succeeded");
        assert!(
            *lines == records_in_pieces(key),
            "the block of {key} is broken, mixed or cut: {} lines",
            lines.len()
        );
    }
}

/// Where stdout and stderr are one file (`2>&1`, one terminal), each grouped block's stderr
/// follows its own stdout, before the next block's header, also for blocks that waited for an
/// earlier job (`--keep-order`) and were written together.
#[test]
fn with_stdout_and_stderr_in_one_file_each_blocks_stderr_stays_in_its_block() {
    let scratch = Scratch::new();
    scratch.write(
        "jobs.tsv",
        format!(
            "a\t{}; echo a-out; echo a-err >&2\n\
             b\techo b-out; echo b-err >&2\n\
             c\techo c-out; echo c-err >&2\n",
            await_file("go")
        ),
    );
    for extra in [&["--keep-order"][..], &[]] {
        let _ = fs::remove_file(scratch.join("go"));
        let merged = scratch.join("merged.txt");
        let report = scratch.join("report.jsonl");
        let command = format!(
            "{} -j 3 --output grouped --report {} {} {} > {} 2>&1",
            sh_quote(BIN),
            sh_quote(report.to_str().unwrap()),
            extra.join(" "),
            sh_quote(scratch.join("jobs.tsv").to_str().unwrap()),
            sh_quote(merged.to_str().unwrap()),
        );
        let mut child = Spawned::start(
            Command::new("sh")
                .args(["-c", &command])
                .env("D", scratch.path())
                .stdin(std::process::Stdio::null()),
        );
        // b and c end while a waits.
        assert!(wait_until(WAIT, || {
            let so_far = fs::read_to_string(&report).unwrap_or_default();
            so_far.contains("\"seq\":2,") && so_far.contains("\"seq\":3,")
        }));
        scratch.write("go", "");
        assert!(child.wait().unwrap().success());
        let text = fs::read_to_string(&merged).unwrap();
        let blocks: Vec<&str> = text
            .lines()
            .filter(|line| !line.starts_with("lanes: "))
            .collect();
        for key in ["a", "b", "c"] {
            let header = blocks
                .iter()
                .position(|line| line.starts_with(&format!("==> [{key}]")))
                .unwrap_or_else(|| panic!("no block of {key}:\n{text}"));
            assert_eq!(
                blocks[header + 1..header + 3],
                [format!("{key}-out"), format!("{key}-err")],
                "{extra:?}:\n{text}"
            );
        }
    }
}

#[test]
fn lines_of_stdout_and_stderr_in_one_pipe_are_never_mixed() {
    // `lanes … 2>&1 | cat`: lines of 3,000 bytes, two jobs' on stdout and stderr at once, and a
    // third job's short lines on stderr. lanes writes its lines in batches larger than a pipe
    // takes at once (PIPE_BUF): without one writer at a time, one sink's batch went into the
    // pipe between the pieces of the other's, in the middle of a line.
    let scratch = Scratch::new();
    let lines = |key: &str, count: usize, width: usize, to: &str| {
        format!(
            "{key}\tawk -v k={key} -v n={count} -v w={width} 'BEGIN {{ s = \"\"; \
             for (j = 0; j < w; j++) s = s \"x\"; for (i = 0; i < n; i++) \
             printf \"%s%d:%s\\n\", k, i, s }}' {to}\n"
        )
    };
    scratch.write(
        "jobs.tsv",
        [
            lines("A", 3000, 3000, ""),
            lines("B", 100_000, 10, ">&2"),
            lines("C", 3000, 3000, ">&2"),
        ]
        .concat(),
    );
    // Four rounds: a mixed line came in about half of the rounds before.
    for _ in 0..4 {
        one_pipe_round(&scratch);
    }
}

/// One run of `jobs.tsv` of [`lines_of_stdout_and_stderr_in_one_pipe_are_never_mixed`]:
/// checks every line whole and counts them.
fn one_pipe_round(scratch: &Scratch) {
    let merged = scratch.join("merged.txt");
    let command = format!(
        "{} -j 3 {} 2>&1 | cat > {}",
        sh_quote(BIN),
        sh_quote(scratch.join("jobs.tsv").to_str().unwrap()),
        sh_quote(merged.to_str().unwrap()),
    );
    let mut child = Spawned::start(
        Command::new("sh")
            .args(["-c", &command])
            .stdin(std::process::Stdio::null()),
    );
    assert!(child.wait().unwrap().success());
    let text = fs::read_to_string(&merged).unwrap();
    let mut counts = BTreeMap::new();
    for line in text.lines().filter(|line| !line.starts_with("lanes: ")) {
        let whole = ["A", "B", "C"].iter().find(|key| {
            line.strip_prefix(&format!("[{key}] {key}"))
                .and_then(|rest| rest.split_once(':'))
                .is_some_and(|(number, xs)| {
                    number.parse::<u32>().is_ok() && xs.bytes().all(|b| b == b'x')
                })
        });
        let key = whole.unwrap_or_else(|| panic!("a mixed line: {}", &line[..line.len().min(120)]));
        *counts.entry(*key).or_insert(0) += 1;
    }
    assert_eq!(
        counts,
        BTreeMap::from([("A", 3000), ("B", 100_000), ("C", 3000)])
    );
}

#[test]
fn keep_order_writes_blocks_in_input_order_even_when_later_jobs_end_first() {
    let scratch = Scratch::new();
    let run = Run::new()
        .scratch(&scratch)
        .args(["-j", "3", "--output", "grouped", "--keep-order"]);
    let report_path = run.report_path();
    let running = run
        .stdin(format!(
            "a\t{}; echo one; echo one-err >&2\nb\techo two\nc\techo three; echo three-err >&2\n",
            await_file("go")
        ))
        .spawn();
    // Jobs 2 and 3 end (their records are written) while job 1 still runs.
    assert!(wait_until(WAIT, || {
        let so_far = std::fs::read_to_string(&report_path).unwrap_or_default();
        so_far.contains("\"seq\":2,") && so_far.contains("\"seq\":3,")
    }));
    scratch.write("go", "");
    let out = running.wait();
    out.code(0);
    let ended: Vec<u64> = out.report().jobs.iter().map(|j| j.seq).collect();
    assert_eq!(ended.last(), Some(&1), "later jobs ended first: {ended:?}");
    assert_eq!(
        out.stdout(),
        "==> [a] seq 1: succeeded <==\none\n\
         ==> [b] seq 2: succeeded <==\ntwo\n\
         ==> [c] seq 3: succeeded <==\nthree\n",
        "{}",
        out.dump()
    );
    assert!(
        out.stderr().starts_with("one-err\nthree-err\n"),
        "{}",
        out.dump()
    );
}

/// `VmHWM` (peak resident set) of process `pid`, in KiB.
fn peak_rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in {status}"))
}

/// `--keep-order` behind a slow first job: the blocks held for it keep at most 8 MiB in memory
/// all together, and one temporary file, not a descriptor each: 40 blocks of 1 MB (each under
/// the 1 MiB a block keeps in memory) took 40 MB, and 400 of them 400 MB. The output is whole
/// and in order.
#[test]
fn keep_order_behind_a_slow_job_keeps_memory_and_descriptors_bounded() {
    const SMALL: usize = 40;
    const LARGE: usize = 5;
    let scratch = Scratch::new();
    let fifo = scratch.join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let mut input = String::from("first\tread x < \"$D/fifo\"; echo \"got $x\"\n");
    for i in 0..SMALL {
        input.push_str(&format!(
            "s{i}\thead -c 1000000 /dev/zero | tr '\\0' s; touch \"$D/done.$LANES_SEQ\"\n"
        ));
    }
    for i in 0..LARGE {
        input.push_str(&format!(
            "l{i}\thead -c 2000000 /dev/zero | tr '\\0' l; touch \"$D/done.$LANES_SEQ\"\n"
        ));
    }
    let running = Run::new()
        .scratch(&scratch)
        .args(["-j", "4", "--output", "grouped", "--keep-order"])
        .stdin(input)
        .spawn();
    let done = || {
        (2..=1 + SMALL + LARGE)
            .filter(|seq| scratch.exists(&format!("done.{seq}")))
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(60), || done() == SMALL + LARGE),
        "{} of the jobs behind the first ended",
        done()
    );
    // Each job's block is held once its record is: the last job's end is awaited through
    // its record being counted as held, not through time.
    assert!(
        wait_until(WAIT, || {
            let held_files = fs::read_dir(format!("/proc/{}/fd", running.pid()))
                .map(|fds| {
                    fds.filter_map(Result::ok)
                        .filter_map(|fd| fs::read_link(fd.path()).ok())
                        .filter(|target| target.to_string_lossy().ends_with("(deleted)"))
                        .count()
                })
                .unwrap_or(0);
            held_files <= 1
        }),
        "held blocks keep a temporary file each"
    );
    let peak = peak_rss_kib(running.pid());
    fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .unwrap()
        .write_all(b"x\n")
        .unwrap();
    let out = running.wait();
    out.code(0);
    let stdout = &out.stdout;
    let mut want = b"==> [first] seq 1: succeeded <==\ngot x\n".to_vec();
    for i in 0..SMALL {
        want.extend_from_slice(format!("==> [s{i}] seq {}: succeeded <==\n", i + 2).as_bytes());
        want.extend(std::iter::repeat_n(b's', 1_000_000));
        want.push(b'\n');
    }
    for i in 0..LARGE {
        let seq = i + 2 + SMALL;
        want.extend_from_slice(format!("==> [l{i}] seq {seq}: succeeded <==\n").as_bytes());
        want.extend(std::iter::repeat_n(b'l', 2_000_000));
        want.push(b'\n');
    }
    assert!(
        *stdout == want,
        "grouped stdout ({} bytes) differs",
        stdout.len()
    );
    assert!(
        peak < 48 * 1024,
        "lanes' peak RSS was {peak} KiB with {SMALL} blocks of 1 MB held"
    );
}

#[test]
fn grouped_output_of_a_5_mb_job_keeps_memory_low() {
    const LINES: usize = 308_404; // of 17 bytes: just under 5 MiB
    let scratch = Scratch::new();
    let fifo = scratch.join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let mut running = Run::new()
        .scratch(&scratch)
        .own_stdout()
        .args(["-j", "1", "--output", "grouped"])
        .stdin(format!(
            "big\tyes 0123456789abcdef | head -n {LINES}\n\
             last\ttouch \"$D/ready\"; read x < \"$D/fifo\"; echo \"got $x\"\n"
        ))
        .spawn();
    let mut stdout = running.take_stdout();
    let count = Arc::new(AtomicUsize::new(0));
    let reader = {
        let count = Arc::clone(&count);
        thread::spawn(move || {
            let mut all = Vec::new();
            let mut buf = vec![0; 1 << 16];
            loop {
                match stdout.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        all.extend_from_slice(&buf[..n]);
                        count.fetch_add(n, Ordering::SeqCst);
                    }
                }
            }
            all
        })
    };
    scratch.wait_for("ready", WAIT);
    let block = "==> [big] seq 1: succeeded <==\n".len() + LINES * 17;
    assert!(
        wait_until(WAIT, || count.load(Ordering::SeqCst) >= block),
        "the big block was written: {} bytes",
        count.load(Ordering::SeqCst)
    );
    let peak = peak_rss_kib(running.pid());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&fifo)
        .unwrap()
        .write_all(b"x\n")
        .unwrap();
    let out = running.wait();
    out.code(0);
    let stdout = reader.join().unwrap();
    let mut want = b"==> [big] seq 1: succeeded <==\n".to_vec();
    for _ in 0..LINES {
        want.extend_from_slice(b"0123456789abcdef\n");
    }
    want.extend_from_slice(b"==> [last] seq 2: succeeded <==\ngot x\n");
    assert!(
        stdout == want,
        "grouped stdout ({} bytes) differs",
        stdout.len()
    );
    assert!(
        peak < 64 * 1024,
        "lanes' peak RSS was {peak} KiB for a 5 MB block"
    );
}

#[test]
fn results_files_stay_inside_the_directory_whatever_the_key() {
    let scratch = Scratch::new();
    let work = scratch.mkdir("work");
    let long_key = "k".repeat(150) + &"/".repeat(150);
    assert_eq!(long_key.len(), 300);
    let keys = [
        "../x",
        "/etc/y",
        "a/b",
        long_key.as_str(),
        "plain",
        "..",
        ".",
    ];
    assert!(!Path::new("/etc/y").exists());
    let mut input = String::new();
    for key in &keys {
        input.push_str(&format!(
            "{key}\techo \"out of $LANES_SEQ\"; echo \"err of $LANES_SEQ\" >&2\n"
        ));
    }
    let dir = scratch.join("work/res/sub");
    let out = Run::new()
        .scratch(&scratch)
        .cwd(&work)
        .arg("--results")
        .arg("res/sub")
        .stdin(input)
        .run();
    out.code(0);
    assert!(!Path::new("/etc/y").exists());
    // Nothing but the results directory appeared.
    let mut everything = Vec::new();
    walk(scratch.path(), &mut everything);
    for path in &everything {
        assert!(
            path.starts_with(&dir) || *path == scratch.join("work/res") || *path == work,
            "{} is outside the results directory",
            path.display()
        );
    }
    let mut files = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        assert!(entry.file_type().unwrap().is_file(), "{:?}", entry.path());
        let name = entry.file_name().into_string().unwrap();
        assert!(name.len() <= 255, "{name}");
        files.insert(name);
    }
    let index = std::fs::read_to_string(dir.join("index.jsonl")).unwrap();
    let mut indexed = BTreeSet::new();
    for line in index.lines() {
        let entry: Value = serde_json::from_str(line).unwrap();
        let fields: BTreeSet<&str> = entry
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(
            fields,
            ["key", "seq", "stderr", "stdout"].into_iter().collect()
        );
        let seq = entry["seq"].as_u64().unwrap();
        assert_eq!(entry["key"], keys[seq as usize - 1], "{line}");
        assert!(indexed.insert(seq), "seq {seq} indexed twice");
        for (stream, text) in [("stdout", "out"), ("stderr", "err")] {
            let name = entry[stream].as_str().unwrap();
            assert!(
                !name.contains('/') && name != ".." && name != ".",
                "{stream} of seq {seq}: {name:?}"
            );
            assert!(name.starts_with(&format!("{seq:06}-")), "{name}");
            assert!(files.contains(name), "{name} is not in the directory");
            assert_eq!(
                std::fs::read_to_string(dir.join(name)).unwrap(),
                format!("{text} of {seq}\n"),
                "{name}"
            );
        }
    }
    assert_eq!(indexed, (1..=keys.len() as u64).collect());
    assert_eq!(files.len(), 2 * keys.len() + 1, "{files:?}");
}

#[test]
fn hostile_keys_stay_data_never_paths_or_shell_code() {
    let scratch = Scratch::new();
    let work = scratch.mkdir("run");
    let long_key = "k".repeat(300);
    let keys = [
        "a/b",
        "a_b",
        "../escape",
        "/abs-key",
        "..",
        ".",
        "has space",
        "ünï/cödé",
        "$(touch pwned)",
        long_key.as_str(),
        "ctl\u{1}x",
        "a/b",
    ];
    let abs_key_existed = Path::new("/abs-key").exists();
    // The first jobs of a/b and a_b wait for each other: only two lanes run them both.
    let mut input = String::new();
    for (i, key) in keys.iter().enumerate() {
        let job = match i + 1 {
            1 => format!("touch \"$D/up-1\"; {}; echo ok-1", await_file("up-2")),
            2 => format!("touch \"$D/up-2\"; {}; echo ok-2", await_file("up-1")),
            seq => format!("echo ok-{seq}"),
        };
        input.push_str(&format!("{key}\t{job}\n"));
    }
    let out = Run::new()
        .scratch(&scratch)
        .cwd(&work)
        .args(["-j", "4", "--results", "res"])
        .stdin(input)
        .run();
    out.code(0);
    for (i, key) in keys.iter().enumerate() {
        let job = out.job(i as u64 + 1);
        assert_eq!(job.key.as_deref(), Some(*key), "{job:?}");
    }
    assert!(
        out.job(12).start_ms() >= out.job(1).end_ms(),
        "the two jobs of a/b overlapped"
    );
    let stderr = out.stderr().to_lowercase();
    assert!(
        !stderr.contains("name too long") && !stderr.contains("no such file"),
        "{}",
        out.dump()
    );
    // Nothing was created but the results and the two markers: no escape from res/, no
    // `pwned` from a key run as shell code.
    let res = work.join("res");
    let mut everything = Vec::new();
    walk(scratch.path(), &mut everything);
    for path in &everything {
        assert!(
            path.starts_with(&res)
                || *path == work
                || *path == scratch.join("up-1")
                || *path == scratch.join("up-2"),
            "{} was created",
            path.display()
        );
    }
    assert!(abs_key_existed || !Path::new("/abs-key").exists());
    // Each job's stdout is in a file of its own, whose name holds no control character.
    let mut files_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for entry in std::fs::read_dir(&res).unwrap().flatten() {
        let name = entry.file_name().into_string().unwrap();
        assert!(!name.chars().any(char::is_control), "{name:?}");
        for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
            if line.starts_with("ok-") {
                files_of
                    .entry(line.to_owned())
                    .or_default()
                    .push(name.clone());
            }
        }
    }
    for seq in 1..=keys.len() {
        let files = files_of.remove(&format!("ok-{seq}")).unwrap_or_default();
        assert_eq!(files.len(), 1, "ok-{seq} is in {files:?}");
    }
    assert!(files_of.is_empty(), "{files_of:?}");
}

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        out.push(path.clone());
        if entry.file_type().unwrap().is_dir() {
            walk(&path, out);
        }
    }
}

/// `(tests, failures, errors, skipped)` of a `<testsuite>` or `<testsuites>` element.
fn counts(node: roxmltree::Node<'_, '_>) -> [u64; 4] {
    ["tests", "failures", "errors", "skipped"].map(|name| {
        node.attribute(name)
            .unwrap_or_else(|| panic!("no {name} on {node:?}"))
            .parse()
            .unwrap()
    })
}

/// `(tests, failures, errors, skipped)` counted from the `<testcase>` children.
fn counted(suite: roxmltree::Node<'_, '_>) -> [u64; 4] {
    let mut counts = [0; 4];
    for case in suite.children().filter(|n| n.has_tag_name("testcase")) {
        counts[0] += 1;
        for (i, tag) in [(1, "failure"), (2, "error"), (3, "skipped")] {
            if case.children().any(|n| n.has_tag_name(tag)) {
                counts[i] += 1;
            }
        }
    }
    counts
}

fn suites<'a, 'i>(doc: &'a roxmltree::Document<'i>) -> BTreeMap<String, roxmltree::Node<'a, 'i>> {
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    root.children()
        .filter(|n| n.has_tag_name("testsuite"))
        .map(|n| (n.attribute("name").unwrap().to_owned(), n))
        .collect()
}

#[test]
fn junit_has_a_suite_per_key_with_the_right_counts() {
    let scratch = Scratch::new();
    let junit = scratch.join("junit.xml");
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "2", "--timeout", "0.5", "--grace", "1", "--junit"])
        .arg(&junit)
        .stdin(
            "a\ttrue\n\
             a\techo 'boom <&>' >&2; exit 3\n\
             b\tsleep 5\n\
             b\ttrue\n\
             this line has no tab\n\
             c\tkill -SEGV $$\n",
        )
        .run();
    out.code(1);
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    let suites = suites(&doc);
    let names: BTreeSet<&str> = suites.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["(no key)", "a", "b", "c"].into_iter().collect(),
        "{xml}"
    );
    for (name, want) in [
        ("a", [2, 1, 0, 0]),
        ("b", [2, 0, 1, 0]),
        ("c", [1, 1, 0, 0]),
        ("(no key)", [1, 0, 1, 0]),
    ] {
        let suite = suites[name];
        assert_eq!(counts(suite), want, "suite {name}\n{xml}");
        assert_eq!(counted(suite), want, "test cases of suite {name}\n{xml}");
    }
    assert_eq!(counts(doc.root_element()), [6, 2, 2, 0], "{xml}");
    let case = |suite: &str, seq: u64| {
        suites[suite]
            .children()
            .find(|n| {
                n.has_tag_name("testcase")
                    && n.attribute("name")
                        .is_some_and(|name| name.starts_with(&format!("seq {seq}:")))
            })
            .unwrap_or_else(|| panic!("no case seq {seq} in {suite}\n{xml}"))
    };
    let failed = case("a", 2);
    let failure = failed
        .children()
        .find(|n| n.has_tag_name("failure"))
        .unwrap();
    assert_eq!(failure.attribute("type"), Some("exit_status"));
    assert_eq!(failure.attribute("message"), Some("exit status 3"));
    let err = failed
        .children()
        .find(|n| n.has_tag_name("system-err"))
        .and_then(|n| n.text())
        .unwrap_or_default();
    assert!(err.contains("boom <&>"), "stderr tail: {err:?}");
    let timeout = case("b", 3);
    let error = timeout
        .children()
        .find(|n| n.has_tag_name("error"))
        .unwrap();
    assert_eq!(error.attribute("type"), Some("timeout"));
    let killed = case("c", 6);
    let failure = killed
        .children()
        .find(|n| n.has_tag_name("failure"))
        .unwrap();
    assert_eq!(failure.attribute("type"), Some("killed"));
    assert!(failure.attribute("message").unwrap().contains("SIGSEGV"));
}

#[test]
fn junit_skips_superseded_jobs() {
    let scratch = Scratch::new();
    let junit = scratch.join("junit.xml");
    let report = scratch.join("report.jsonl");
    let mut running = Run::new()
        .scratch(&scratch)
        .no_report()
        .arg("--report")
        .arg(&report)
        .args(["--coalesce", "latest", "--junit"])
        .arg(&junit)
        .stdin_piped()
        .spawn();
    running
        .stdin()
        .write_all(format!("s\ttouch \"$D/up\"; {}\n", await_file("go")).as_bytes())
        .unwrap();
    running.stdin().flush().unwrap();
    scratch.wait_for("up", WAIT);
    running.stdin().write_all(b"s\ttrue\ns\ttrue\n").unwrap();
    running.stdin().flush().unwrap();
    assert!(wait_until(WAIT, || std::fs::read_to_string(&report)
        .unwrap_or_default()
        .contains("superseded")));
    scratch.write("go", "");
    running.close_stdin();
    let out = running.wait();
    out.code(0);
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let suites = suites(&doc);
    assert_eq!(counts(suites["s"]), [3, 0, 0, 1], "{xml}");
    assert_eq!(counted(suites["s"]), [3, 0, 0, 1], "{xml}");
    let skipped = suites["s"]
        .descendants()
        .find(|n| n.has_tag_name("skipped"))
        .unwrap();
    assert_eq!(skipped.attribute("message"), Some("superseded by seq 3"));
}

/// Jobs whose own output is plain, one of which fails (so the end summary lists it).
const PLAIN_JOBS: &str = "a\techo hello; echo warn >&2\nb\techo world\nb\texit 4\n";

#[test]
fn no_escape_code_or_carriage_return_reaches_a_pipe() {
    for flags in [
        vec![],
        vec!["--color", "never"],
        vec![
            "--color",
            "auto",
            "--progress",
            "auto",
            "--output",
            "grouped",
        ],
        vec!["--json"],
    ] {
        let out = Run::new()
            .env("TERM", "xterm-256color")
            .env("COLORTERM", "truecolor")
            .args(["-j", "2"])
            .args(&flags)
            .stdin(PLAIN_JOBS)
            .run();
        out.code(1);
        for (name, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            assert!(
                !bytes.contains(&0x1b) && !bytes.contains(&b'\r'),
                "{flags:?}: ESC or CR on {name}: {:?}",
                String::from_utf8_lossy(bytes)
            );
        }
        assert!(out.stderr().contains("exit"), "{flags:?}: {}", out.dump());
    }
}

#[test]
fn a_run_long_enough_to_draw_progress_writes_no_escape_code_to_pipes() {
    // Twenty jobs of 0.2 s, four at a time: about a second in which a progress display or a
    // spinner would be redrawn, under a terminal type that claims every colour.
    let input: String = (0..20)
        .map(|i| format!("k{}\tsleep 0.2; echo plain-{i}\n", i % 5))
        .collect();
    for json in [false, true] {
        let mut run = Run::new()
            .wrapper("unset CLICOLOR_FORCE FORCE_COLOR")
            .env("TERM", "xterm-256color")
            .env("COLORTERM", "truecolor")
            .args(["-j", "4"])
            .stdin(&input);
        if json {
            run = run.no_report().arg("--json");
        }
        let out = run.run();
        out.code(0);
        for (name, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
            assert!(
                !bytes.contains(&0x1b) && !bytes.contains(&b'\r'),
                "--json {json}: ESC or CR on {name}: {:?}",
                String::from_utf8_lossy(bytes)
            );
        }
        let (shown, other) = if json {
            (out.stderr(), out.stdout())
        } else {
            (out.stdout(), out.stderr())
        };
        for i in 0..20 {
            let line = format!("[k{}] plain-{i}", i % 5);
            let times = shown.lines().filter(|l| *l == line).count();
            assert_eq!(times, 1, "--json {json}: {line:?}\n{}", out.dump());
        }
        assert!(
            !other.lines().any(|l| l.starts_with("[k")),
            "job output on the wrong stream\n{}",
            out.dump()
        );
        // Under --json, stdout is the report and nothing else.
        let report = if json {
            out.stdout_report()
        } else {
            out.report().clone()
        };
        assert_eq!(report.summary.succeeded, 20, "{}", out.dump());
    }
}

/// `text` without ANSI CSI sequences (`ESC [ … final byte`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn color_always_colours_the_prefixes() {
    let out = Run::new()
        .args(["-j", "1", "--color", "always", "--progress", "never"])
        .stdin("a\techo hello; echo oops >&2\nb\techo world\n")
        .run();
    out.code(0);
    let stdout = out.stdout();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.dump());
    for (line, plain) in lines.iter().zip(["[a] hello", "[b] world"]) {
        assert!(
            line.starts_with('\x1b'),
            "no escape before the prefix: {line:?}"
        );
        assert_eq!(strip_ansi(line), plain, "{line:?}");
        let text = plain.split(' ').nth(1).unwrap();
        assert!(
            line.ends_with(&format!(" {text}")),
            "the job's text is not coloured: {line:?}"
        );
    }
    let err_line = out
        .stderr()
        .lines()
        .find(|l| l.ends_with("oops"))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("{}", out.dump()));
    assert!(err_line.contains('\x1b'), "{err_line:?}");
    assert_eq!(strip_ansi(&err_line), "[a] oops");
}

// ---------------------------------------------------------------------------------------------
// The report against `schema/report.schema.json`, the JSON Schema generated from the record
// types (`src/generate.rs`), checked by the `jsonschema` crate.

/// A validator for the committed report schema (itself checked against the draft 2020-12
/// meta-schema when built), with `format` checked too.
pub(crate) fn schema() -> jsonschema::Validator {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/report.schema.json");
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap_or_else(|err| panic!("the report schema is not a valid JSON Schema: {err}"))
}

/// What `schema` finds wrong with `record`, one line each (empty when it fits).
pub(crate) fn schema_errors(schema: &jsonschema::Validator, record: &Value) -> Vec<String> {
    schema
        .iter_errors(record)
        .map(|err| format!("{}: {err}", err.instance_path()))
        .collect()
}

#[test]
fn the_schema_refuses_broken_records() {
    let schema = schema();
    let good = json!({"type":"job","seq":2,"line":2,"key":"b","command":"exit 3","outcome":"failed",
        "reason":"exit_status","exit_code":3,"signal":null,"started":true,
        "started_at":"2026-11-29T11:45:26.051Z","ended_at":"2026-11-29T11:45:26.053Z",
        "duration_ms":2,"wait_ms":0,"attempts":1,"flaky":false,"slot":2,"leaked":false,"superseded_by":null,
        "batch":null,"error":null,"cpu_ms":4,"memory_peak_bytes":null,
        "tries":[{"attempt":1,"outcome":"failed","reason":"exit_status","exit_code":3,
        "signal":null,"slot":2,"started_at":"2026-11-29T11:45:26.051Z",
        "ended_at":"2026-11-29T11:45:26.053Z","duration_ms":2}]});
    assert_eq!(schema_errors(&schema, &good), Vec::<String>::new());
    let broken: Vec<(&str, Value)> = vec![
        ("type", json!("jobs")),
        ("extra", json!(1)),
        ("outcome", json!("passed")),
        ("outcome", json!("skipped")), // not with reason `exit_status`
        ("outcome", json!(null)),
        ("reason", json!("timeout")), // not a reason of `failed`
        ("reason", json!(null)),      // nor is none
        ("reason", json!("oops")),
        ("ended_at", json!("2026-11-29T11:45:26Z")),
        ("ended_at", json!("2026-11-29 11:45:26.053Z")),
        ("ended_at", json!(null)),
        ("started_at", json!("yesterday")),
        ("seq", json!(0)),
        ("seq", json!("2")),
        ("key", json!(7)),
        ("duration_ms", json!(2.5)),
        ("wait_ms", json!(-1)),
        ("slot", json!(0)),
        ("signal", json!("KILL")),
        ("leaked", json!("no")),
        ("started", json!(null)),
        ("cpu_ms", json!(-3)),
        ("memory_peak_bytes", json!("1G")),
        ("tries", json!(null)),
        ("tries", json!([{"attempt": 0}])),
        (
            "tries",
            json!([{"attempt":1,"outcome":"failed","reason":"exit_status","exit_code":3,
            "signal":null,"slot":2,"started_at":"2026-11-29T11:45:26.051Z",
            "ended_at":"2026-11-29T11:45:26.053Z","duration_ms":2,"extra":1}]),
        ),
    ];
    for (field, bad) in broken {
        let mut record = good.clone();
        record[field] = bad.clone();
        assert!(
            !schema_errors(&schema, &record).is_empty(),
            "{field} = {bad} accepted"
        );
    }
    for field in ["batch", "reason", "ended_at", "type"] {
        let mut missing = good.clone();
        missing.as_object_mut().unwrap().remove(field);
        assert!(
            !schema_errors(&schema, &missing).is_empty(),
            "a record without {field} accepted"
        );
    }
    // The reasons go with their outcomes.
    let mut succeeded = good.clone();
    succeeded["outcome"] = json!("succeeded");
    assert!(!schema_errors(&schema, &succeeded).is_empty());
    succeeded["reason"] = json!(null);
    assert_eq!(schema_errors(&schema, &succeeded), Vec::<String>::new());
    let skipped = json!({"type":"job","seq":1,"line":1,"key":"b","command":"true",
        "outcome":"skipped","reason":"succeeded_before","exit_code":null,"signal":null,
        "started":false,"started_at":null,"ended_at":"2026-11-29T11:45:26.053Z",
        "duration_ms":null,"wait_ms":null,"attempts":0,"slot":null,"leaked":false,
        "superseded_by":null,"batch":null,"error":null,"cpu_ms":null,"memory_peak_bytes":null,
        "tries":[],"flaky":false});
    assert_eq!(schema_errors(&schema, &skipped), Vec::<String>::new());
    let run = json!({"type":"run","version":"0.1.0","schema":2,
        "started_at":"2026-11-29T11:45:26.050Z","pid":4711,"max_concurrent":2,"source":"-",
        "command":null,"containment":"cgroup"});
    assert_eq!(schema_errors(&schema, &run), Vec::<String>::new());
    for (field, bad) in [
        ("schema", json!(1)),
        ("schema", json!(3)),
        ("max_concurrent", json!(0)),
        ("version", json!(1)),
    ] {
        let mut record = run.clone();
        record[field] = bad.clone();
        assert!(
            !schema_errors(&schema, &record).is_empty(),
            "run {field} = {bad} accepted"
        );
    }
    let summary = json!({"type":"summary","jobs":1,"succeeded":1,"flaky":0,"failed":0,"interrupted":0,
        "rejected":0,"skipped":0,"duration_ms":3,"exit_code":0});
    assert_eq!(schema_errors(&schema, &summary), Vec::<String>::new());
    for (field, bad) in [
        ("exit_code", json!(256)),
        ("failed", json!(-1)),
        ("jobs", json!("1")),
        ("type", json!("run")),
    ] {
        let mut record = summary.clone();
        record[field] = bad.clone();
        assert!(
            !schema_errors(&schema, &record).is_empty(),
            "summary {field} = {bad} accepted"
        );
    }
    for not_a_record in [json!(null), json!([]), json!({}), json!("job")] {
        assert!(!schema_errors(&schema, &not_a_record).is_empty());
    }
}

#[test]
fn every_record_of_runs_with_mixed_outcomes_fits_the_schema() {
    let schema = schema();
    let scratch = Scratch::new();
    let mut reports = Vec::new();
    // Succeeded, failed (exit status, killed), timeout, invalid line, leaked.
    let out = Run::new()
        .args([
            "-j",
            "3",
            "--timeout",
            "0.5",
            "--grace",
            "1",
            "--leak-window",
            "100ms",
        ])
        .stdin(
            "a\ttrue\na\texit 3\nb\tkill -SEGV $$\nc\tsleep 5\nno tab here\n\
             d\tsleep 5 & echo started\n",
        )
        .run();
    out.code(1);
    reports.push(out.report_text.clone().unwrap());
    // Superseded (superseded_by set), from a coalescing run.
    let report = scratch.join("coalesce.jsonl");
    let out = Run::new()
        .no_report()
        .arg("--report")
        .arg(&report)
        .args(["--coalesce", "latest", "-j", "1"])
        .stdin("k\tsleep 0.2\nk\ttrue\nk\ttrue\nk\ttrue\n")
        .run();
    out.code(0);
    reports.push(std::fs::read_to_string(&report).unwrap());
    // Batches (batch set), from a batching run.
    let report = scratch.join("batch.jsonl");
    let out = Run::new()
        .no_report()
        .arg("--report")
        .arg(&report)
        .args(["--command", "true", "--batch-size", "3"])
        .stdin("k\t1\nk\t2\nk\t3\nk\t4\nj\t5\n")
        .run();
    out.code(0);
    reports.push(std::fs::read_to_string(&report).unwrap());
    // The report on stdout (`--json`): a full queue, then a failure under `--fail-fast`.
    let mut running = Run::new()
        .scratch(&scratch)
        .args([
            "--json",
            "-j",
            "1",
            "--max-queued",
            "1",
            "--on-full",
            "reject",
            "--fail-fast",
        ])
        .stdin_piped()
        .spawn();
    running
        .stdin()
        .write_all(format!("a\ttouch \"$D/up\"; {}; exit 3\n", await_file("go")).as_bytes())
        .unwrap();
    running.stdin().flush().unwrap();
    scratch.wait_for("up", WAIT);
    // One waits in the queue (then is stopped by the failure), the other is rejected.
    running.stdin().write_all(b"b\ttrue\nc\ttrue\n").unwrap();
    running.stdin().flush().unwrap();
    assert!(
        wait_until(WAIT, || running.report_so_far().contains("queue_full")),
        "a queue_full record:\n{}",
        running.report_so_far()
    );
    scratch.write("go", "");
    running.close_stdin();
    let out = running.wait();
    out.code(1);
    reports.push(out.stdout());
    // A manifest job that cannot start, and one stopped by SIGTERM.
    scratch.write(
        "m.toml",
        "[[job]]\nkey = \"x\"\ncmd = 'true'\ncwd = \"no/such/dir\"\n\n\
         [[job]]\nkey = \"y\"\ncmd = 'touch \"$D/up-y\"; sleep 30'\n",
    );
    let running = Run::new()
        .scratch(&scratch)
        .cwd(scratch.path())
        .args(["-j", "2", "--grace", "1"])
        .arg("m.toml")
        .spawn();
    scratch.wait_for("up-y", WAIT);
    running.signal(Signal::SIGTERM);
    let out = running.wait();
    out.code(143);
    reports.push(out.report_text.clone().unwrap());
    let mut results = BTreeSet::new();
    let mut set_fields = BTreeSet::new();
    for text in &reports {
        let mut kinds = Vec::new();
        for line in text.lines() {
            let record: Value = serde_json::from_str(line).unwrap();
            let errors = schema_errors(&schema, &record);
            assert!(errors.is_empty(), "{line}\n{errors:#?}");
            kinds.push(record["type"].as_str().unwrap().to_owned());
            if record["type"] == "job" {
                results.insert((
                    record["outcome"].as_str().unwrap().to_owned(),
                    record["reason"].as_str().map(str::to_owned),
                ));
                for field in ["superseded_by", "batch", "signal", "error"] {
                    if !record[field].is_null() {
                        set_fields.insert(field);
                    }
                }
                if record["leaked"] == true {
                    set_fields.insert("leaked");
                }
            }
        }
        assert_eq!(kinds.first().map(String::as_str), Some("run"), "{text}");
        assert_eq!(kinds.last().map(String::as_str), Some("summary"), "{text}");
    }
    // The runs did produce the variety they were meant to: every outcome with every reason.
    let every = [
        ("succeeded", None),
        ("failed", Some("exit_status")),
        ("failed", Some("killed")),
        ("failed", Some("spawn_error")),
        ("interrupted", Some("timeout")),
        ("interrupted", Some("shutdown")),
        ("interrupted", Some("fail_fast")),
        ("interrupted", Some("superseded")),
        ("rejected", Some("invalid_input")),
        ("rejected", Some("queue_full")),
    ];
    let every: BTreeSet<(String, Option<String>)> = every
        .iter()
        .map(|(outcome, reason)| (outcome.to_string(), reason.map(str::to_owned)))
        .collect();
    assert_eq!(results, every);
    assert_eq!(
        set_fields,
        ["batch", "error", "leaked", "signal", "superseded_by"]
            .into_iter()
            .collect(),
        "{results:?}"
    );
}

#[test]
fn results_files_that_cannot_be_stored_are_said_and_make_the_run_exit_1() {
    // Under a file-size limit of 64 KiB (`ulimit -f`: lanes ignores SIGXFSZ, so a write past it
    // fails with EFBIG), job 1's stdout file cannot be stored whole; the report, the index and
    // job 2's files stay far below it.
    let scratch = Scratch::new();
    let dir = scratch.join("res");
    let out = Run::new()
        .scratch(&scratch)
        .wrapper("ulimit -f 128; exec \"$0\" \"$@\"")
        .arg("--results")
        .arg(&dir)
        .stdin(
            "a\thead -c 200000 /dev/zero | tr '\\0' x; echo err >&2; touch \"$D/a-ran\"\n\
             b\techo fine\n",
        )
        .run();
    out.code(1);
    assert!(scratch.exists("a-ran"));
    let stderr = out.stderr();
    let file = dir.join("000001-a.stdout");
    assert!(
        stderr.contains(&format!("cannot write {}", file.display()))
            && stderr.contains("File too large"),
        "{}",
        out.dump()
    );
    assert_eq!(fs::metadata(&file).unwrap().len(), 128 * 512);
    // The jobs still succeeded, and the files that could be stored are whole.
    assert_eq!(out.job(1).result(), ("succeeded", None));
    assert_eq!(out.job(2).result(), ("succeeded", None));
    assert_eq!(
        fs::read_to_string(dir.join("000001-a.stderr")).unwrap(),
        "err\n"
    );
    assert_eq!(
        fs::read_to_string(dir.join("000002-b.stdout")).unwrap(),
        "fine\n"
    );
    let index = fs::read_to_string(dir.join("index.jsonl")).unwrap();
    assert_eq!(index.lines().count(), 2, "{index}");
}

#[test]
fn grouped_output_that_cannot_be_spilled_is_said_and_makes_the_run_exit_1() {
    // No temporary directory: past 1 MiB, a grouped block cannot be spilled.
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .env("TMPDIR", scratch.join("missing"))
        .args(["--output", "grouped"])
        .stdin("big\thead -c 2000000 /dev/zero | tr '\\0' x; echo; touch \"$D/ran\"\n")
        .run();
    out.code(1);
    assert!(scratch.exists("ran"));
    assert_eq!(out.job(1).result(), ("succeeded", None));
    assert!(
        out.stderr()
            .contains("cannot hold the stdout of job 1 [big]")
            && out.stderr().contains("the output is incomplete"),
        "{}",
        out.dump()
    );
    // What was held in memory is written; the rest is said to be lost.
    assert!(
        out.stdout().contains(&"x".repeat(1 << 20)),
        "{}",
        out.stderr()
    );
    // The record says so too, as for a `--results` file: the report alone tells which job's
    // output was cut short.
    let error = out.job(1).error.clone().unwrap_or_default();
    assert!(
        error.contains("cannot hold the stdout of job 1 [big]"),
        "{error:?}"
    );
}

#[test]
fn failures_keep_their_stderr_tail_whatever_the_output_mode() {
    for mode in ["none", "prefixed", "raw", "grouped"] {
        let scratch = Scratch::new();
        let junit = scratch.join("junit.xml");
        let out = Run::new()
            .args(["--output", mode, "--junit"])
            .arg(&junit)
            .stdin("k\techo to-stdout; echo 'first words' >&2; echo 'last words' >&2; exit 3\n")
            .run();
        out.code(1);
        // Not in lanes' own output under `none`…
        if mode == "none" {
            assert!(!out.stdout().contains("to-stdout"), "{}", out.dump());
        }
        // …but in the summary's entry for the failure, and in the JUnit failure.
        let summary = out.stderr();
        let entry = summary
            .split_once("seq 1 [k] exit_status")
            .map(|(_, rest)| rest)
            .unwrap_or_else(|| panic!("{mode}: no summary entry\n{}", out.dump()));
        assert!(
            entry.contains("| first words") && entry.contains("| last words"),
            "{mode}: {}",
            out.dump()
        );
        let xml = fs::read_to_string(&junit).unwrap();
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let err = doc
            .descendants()
            .find(|n| n.has_tag_name("system-err"))
            .and_then(|n| n.text())
            .unwrap_or_default();
        assert!(err.contains("last words"), "{mode}: {xml}");
    }
}

#[test]
fn junit_shows_retried_tries_as_flaky_or_rerun_failures() {
    let scratch = Scratch::new();
    let junit = scratch.join("junit.xml");
    let out = Run::new()
        .args(["--retries", "2", "--junit"])
        .arg(&junit)
        .stdin("flaky\texit $((3 - LANES_ATTEMPT))\nbroken\texit 5\n")
        .run();
    out.code(1);
    let xml = fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let suites = suites(&doc);
    let reruns = |suite: &str, tag: &str| -> Vec<(String, String)> {
        suites[suite]
            .descendants()
            .filter(|n| n.has_tag_name(tag))
            .map(|n| {
                let attr = |name| n.attribute(name).unwrap_or_default().to_owned();
                (attr("type"), attr("message"))
            })
            .collect()
    };
    let failed = |status: &str| ("exit_status".to_owned(), format!("exit status {status}"));
    // Passed on its third try: two flaky failures, no failure.
    assert_eq!(
        reruns("flaky", "flakyFailure"),
        [failed("2"), failed("1")],
        "{xml}"
    );
    assert_eq!(counts(suites["flaky"]), [1, 0, 0, 0], "{xml}");
    // Failed every try: the last is the failure, the two before it reruns.
    assert_eq!(
        reruns("broken", "rerunFailure"),
        [failed("5"), failed("5")],
        "{xml}"
    );
    assert_eq!(counts(suites["broken"]), [1, 1, 0, 0], "{xml}");
}

/// Under `--retries`, each try of a job is a grouped block, and its header tells which try it
/// was and whether it went again: a `failed` header without `retried` is a job that failed
/// for good (every try's header said `failed (exit_status)` alike).
#[test]
fn grouped_blocks_of_a_retried_job_say_which_try_and_whether_it_went_again() {
    let out = Run::new()
        .args(["--output", "grouped", "--retries", "3", "-j", "1"])
        .stdin(
            "f\techo try $LANES_ATTEMPT; [ $LANES_ATTEMPT -ge 3 ]\n\
             g\techo once\n\
             h\techo fails; exit 4\n",
        )
        .run();
    out.code(1);
    let stdout = out.stdout();
    // Each key's blocks in order (the keys' blocks interleave as their tries take turns).
    let mut headers: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("==> "))
        .collect();
    headers.sort_by_key(|line| &line[..8]);
    assert_eq!(
        headers,
        [
            "==> [f] seq 1: failed (exit_status), try 1, retried <==",
            "==> [f] seq 1: failed (exit_status), try 2, retried <==",
            "==> [f] seq 1: succeeded, try 3 <==",
            "==> [g] seq 2: succeeded <==",
            "==> [h] seq 3: failed (exit_status), try 1, retried <==",
            "==> [h] seq 3: failed (exit_status), try 2, retried <==",
            "==> [h] seq 3: failed (exit_status), try 3, retried <==",
            "==> [h] seq 3: failed (exit_status), try 4 <==",
        ],
        "{}",
        out.dump()
    );
}
