//! SPEC §2: what a job inherits (descriptors, signal dispositions and mask), processes that
//! escape or outlive their job, jobs closing their output early, a closed stdout, and a low
//! descriptor limit.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::records::*;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(10);

/// Shell code listing the job shell's open descriptors (`fd N` lines). The glob itself reads
/// the directory through a descriptor that is closed again when the loop runs: only entries
/// still present then are listed.
const LIST_FDS: &str =
    "for f in /proc/$$/fd/*; do if [ -L \"$f\" ]; then echo \"fd ${f##*/}\"; fi; done";

/// The `fd N` lines of `key` in prefixed output.
fn fds_of(stdout: &str, key: &str) -> Vec<String> {
    let prefix = format!("[{key}] fd ");
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
        .collect()
}

#[test]
fn jobs_get_only_0_1_2_with_every_output_file_open_and_inherited_descriptors() {
    let scratch = Scratch::new();
    let job = format!(
        "touch \"$D/up-$LANES_KEY\"; {}; {}; {}; {LIST_FDS}",
        await_file("up-a"),
        await_file("up-b"),
        await_file("up-c")
    );
    let out = Run::new()
        .scratch(&scratch)
        .wrapper("exec 7</dev/null 8>\"$D/inherited\" 9<&0")
        .args(["-j", "3", "--events"])
        .arg(scratch.join("events.jsonl"))
        .arg("--results")
        .arg(scratch.join("results"))
        .arg("--junit")
        .arg(scratch.join("junit.xml"))
        .stdin(format!("a\t{job}\nb\t{job}\nc\t{job}\n"))
        .run();
    out.code(0);
    for key in ["a", "b", "c"] {
        assert_eq!(
            fds_of(&out.stdout(), key),
            ["0", "1", "2"],
            "descriptors of job {key}\n{}",
            out.dump()
        );
    }
}

#[test]
fn jobs_get_only_0_1_2_while_grouped_output_is_spilled_to_a_file() {
    // Job `big` writes 2 MB (past the 1 MiB held in memory, so its block goes to a temporary
    // file) and stays; job `lister` then lists its descriptors.
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .args(["-j", "2", "--output", "grouped"])
        .stdin(format!(
            "big\thead -c 2000000 /dev/zero | tr '\\0' x; echo; touch \"$D/spilled\"; {}\n\
             lister\t{}; {LIST_FDS}; touch \"$D/listed\"\n",
            await_file("listed"),
            await_file("spilled")
        ))
        .run();
    out.code(0);
    let stdout = out.stdout();
    let block = stdout
        .split("==> [lister] seq 2: succeeded <==\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no lister block\n{}", out.dump()));
    let fds: Vec<&str> = block
        .lines()
        .take_while(|l| !l.starts_with("==> "))
        .collect();
    assert_eq!(fds, ["fd 0", "fd 1", "fd 2"]);
}

/// Prints the job shell's `SigBlk` and `SigIgn` lines of `/proc/$$/status`. The shell reads
/// the file itself (`read` is a builtin): `grep … /proc/$$/status` would catch dash while it
/// waits for grep, with every signal blocked for a moment.
const PRINT_MASKS: &str =
    "k\twhile IFS= read -r l; do case $l in SigBlk*|SigIgn*) echo \"$l\";; esac; \
    done < /proc/$$/status\n";

/// `SigBlk` and `SigIgn` of a job's shell, as printed by the job.
fn masks(out: &Output) -> Vec<(String, u64)> {
    out.stdout()
        .lines()
        .filter_map(|l| l.strip_prefix("[k] "))
        .map(|l| {
            let (name, hex) = l.split_once(":\t").unwrap();
            (
                name.to_owned(),
                u64::from_str_radix(hex.trim(), 16).unwrap(),
            )
        })
        .collect()
}

/// That the run succeeded and its job ([`PRINT_MASKS`]) started with no signal blocked or
/// ignored; `context` goes into the failure's message.
fn assert_nothing_blocked_or_ignored(out: &Output, context: &str) {
    out.code(0);
    assert_eq!(
        masks(out),
        [("SigBlk".to_owned(), 0), ("SigIgn".to_owned(), 0)],
        "{context}\n{}",
        out.dump()
    );
}

#[test]
fn jobs_start_with_no_signal_blocked_or_ignored_even_when_lanes_was() {
    // A shell that ignores SIGINT (as `cmd &` in a script does).
    let out = Run::new()
        .wrapper("trap '' INT QUIT")
        .stdin(PRINT_MASKS)
        .run();
    assert_nothing_blocked_or_ignored(&out, "");
    // Python: SIGPIPE and SIGXFSZ ignored by default; here also SIGINT ignored and two
    // signals blocked, then lanes exec'd with all of that.
    let out = Run::new()
        .wrapper(
            "exec python3 -c 'import os, signal, sys; \
             signal.signal(signal.SIGINT, signal.SIG_IGN); \
             signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGTERM}); \
             os.execv(sys.argv[1], sys.argv[1:])' \"$0\" \"$@\"",
        )
        .stdin(PRINT_MASKS)
        .run();
    assert_nothing_blocked_or_ignored(&out, "");
}

#[test]
fn jobs_start_with_no_real_time_signal_ignored_or_blocked_even_when_lanes_was() {
    // Real-time signals ignored and blocked when lanes is exec'd: a job's process resets only
    // the dispositions lanes itself may change, so lanes must reset inherited ones at start.
    for containment in ["auto", "process-group"] {
        let out = Run::new()
            .wrapper(
                "exec python3 -c 'import os, signal, sys; \
                 [signal.signal(s, signal.SIG_IGN) for s in (34, 40, 64, signal.SIGUSR2, signal.SIGTTOU)]; \
                 signal.pthread_sigmask(signal.SIG_BLOCK, {45, 63}); \
                 os.execv(sys.argv[1], sys.argv[1:])' \"$0\" \"$@\"",
            )
            .args(["--containment", containment])
            .stdin(PRINT_MASKS)
            .run();
        assert_nothing_blocked_or_ignored(&out, &format!("--containment {containment}"));
    }
}

#[test]
fn a_setsid_process_holding_the_pipes_is_leaked_and_gone_after_the_run() {
    let scratch = Scratch::new();
    let started = Instant::now();
    let out = Run::new()
        .scratch(&scratch)
        .args(["--grace", "1"])
        .stdin(
            "k\tsetsid sleep 30 & echo $! > \"$D/pid\"; echo shell-done\n\
             k\techo next\n",
        )
        .run();
    out.code(0);
    let job = out.job(1);
    assert_eq!(job.result(), ("succeeded", None), "{job:?}");
    assert!(job.leaked, "{job:?}");
    assert!(out.stdout().contains("[k] shell-done\n"));
    assert_eq!(out.job(2).result(), ("succeeded", None));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the run waited for the escaped process: {:?}",
        started.elapsed()
    );
    assert!(
        !alive(scratch.pid("pid")),
        "the setsid'd process outlived lanes"
    );
}

#[test]
fn a_double_forked_process_is_gone_after_the_run() {
    let scratch = Scratch::new();
    let out = Run::new()
        .scratch(&scratch)
        .args(["--grace", "1"])
        .stdin("k\t( (sleep 30 & echo $! > \"$D/pid\") & ); echo forked\n")
        .run();
    out.code(0);
    let job = out.job(1);
    assert_eq!(job.result(), ("succeeded", None), "{job:?}");
    assert!(job.leaked, "{job:?}");
    assert!(out.elapsed < Duration::from_secs(10), "{:?}", out.elapsed);
    assert!(!alive(scratch.pid("pid")));
}

#[test]
fn a_job_that_closes_its_output_is_still_supervised_to_its_end() {
    let scratch = Scratch::new();
    let run = Run::new().scratch(&scratch);
    let report = run.report_path();
    let running = run
        .stdin(format!(
            "k\techo before; exec >&- 2>&-; touch \"$D/closed\"; {}; touch \"$D/end1\"\n\
             k\ttouch \"$D/ran2\"\n",
            await_file("go")
        ))
        .spawn();
    scratch.wait_for("closed", WAIT);
    // Both pipes are at EOF while the job runs on: give lanes time to get that wrong.
    let ended_early = wait_until(Duration::from_millis(600), || {
        std::fs::read_to_string(&report)
            .unwrap_or_default()
            .contains("\"type\":\"job\"")
            || scratch.exists("ran2")
    });
    assert!(
        !ended_early,
        "the job was taken as ended at EOF on its pipes"
    );
    let go = now_ms();
    scratch.write("go", "");
    let out = running.wait();
    out.code(0);
    let job = out.job(1);
    assert_eq!(job.result(), ("succeeded", None), "{job:?}");
    assert!(!job.leaked, "{job:?}");
    assert!(job.end_ms() >= go, "ended {} before go {go}", job.end_ms());
    assert!(scratch.exists("end1"));
    assert!(out.job(2).start_ms() >= job.end_ms());
    assert!(out.stdout().contains("[k] before\n"));
}

/// Runs `lanes … | head -1` through bash with pipefail: lanes' exit status is the pipeline's.
fn through_head(scratch: &Scratch, input: String) -> Output {
    Run::new()
        .scratch(scratch)
        .wrapper(
            "exec bash -c 'set -o pipefail; \"$0\" \"$@\" | head -1 > \"$D/head\"' \"$0\" \"$@\"",
        )
        .args(["-j", "3"])
        .stdin(input)
        .run()
}

#[test]
fn piping_into_head_keeps_the_jobs_exit_status_and_leaves_nothing() {
    let talk = "i=0; while [ $i -lt 5000 ]; do i=$((i+1)); echo \"$LANES_KEY line $i\"; done";
    for (fail, status) in [(false, 0), (true, 1)] {
        let scratch = Scratch::new();
        let mut input = String::new();
        for i in 0..8 {
            let tail = if fail && i == 5 { "; exit 4" } else { "" };
            input.push_str(&format!(
                "k{i}\t{talk}; echo $$ > \"$D/pid-$LANES_SEQ\"{tail}\n"
            ));
        }
        let out = through_head(&scratch, input);
        out.code(status);
        let head = scratch.read("head");
        assert_eq!(head.lines().count(), 1, "{head}");
        assert!(head.starts_with("[k"), "{head}");
        let report = out.report();
        assert_eq!(report.jobs.len(), 8);
        assert_eq!(report.summary.succeeded, if fail { 7 } else { 8 });
        if fail {
            assert_eq!(out.job(6).exit_code, Some(4));
        }
        for seq in 1..=8 {
            assert!(!alive(scratch.pid(&format!("pid-{seq}"))));
        }
        let notices = out
            .stderr()
            .lines()
            .filter(|l| l.to_lowercase().contains("broken pipe"))
            .count();
        assert_eq!(notices, 1, "lanes says so once\n{}", out.dump());
    }
}

#[test]
fn a_low_descriptor_limit_with_a_high_cap_completes_every_job() {
    let scratch = Scratch::new();
    let mut input = String::new();
    for i in 0..300 {
        input.push_str(&format!(
            "key{i}\techo $LANES_SEQ >> \"$D/done\"; sleep 0.2; echo out; echo err >&2\n"
        ));
    }
    let out = Run::new()
        .scratch(&scratch)
        .wrapper("ulimit -n 64")
        .args(["-j", "200"])
        .stdin(input)
        .run();
    out.code(0);
    let report = out.report();
    assert_eq!(report.summary.succeeded, 300, "{}", out.dump());
    let done: BTreeSet<u64> = scratch
        .lines("done")
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(done, (1..=300).collect());
    assert_eq!(out.stdout().lines().count(), 300);
}

/// The most descriptors and the peak resident set (KiB) seen in process `pid`, sampled until
/// `stop` is set.
fn sample_usage(pid: i32, stop: Arc<AtomicBool>) -> thread::JoinHandle<(usize, u64)> {
    thread::spawn(move || {
        let (mut descriptors, mut peak_kib) = (0, 0);
        while !stop.load(Ordering::SeqCst) {
            if let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
                descriptors = descriptors.max(entries.count());
            }
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let hwm = status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse().ok());
            peak_kib = peak_kib.max(hwm.unwrap_or(0));
            thread::sleep(Duration::from_millis(2));
        }
        (descriptors, peak_kib)
    })
}

#[test]
fn thousands_of_jobs_hold_descriptors_for_running_jobs_only_and_lose_none() {
    // 2 000 jobs over 100 keys: ten times the queue bound, so reading waits for room, and far
    // more jobs than the 128 descriptors lanes may open. Descriptors belong to the 16 running
    // jobs (a few each), never to queued or finished ones.
    const JOBS: usize = 2000;
    let input: String = (0..JOBS)
        .map(|i| format!("k{}\techo j{i}\n", i % 100))
        .collect();
    let running = Run::new()
        .wrapper("ulimit -n 128")
        .args(["-j", "16", "--max-queued", "200"])
        .stdin(input)
        .spawn();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample_usage(running.pid(), Arc::clone(&stop));
    let out = running.wait();
    stop.store(true, Ordering::SeqCst);
    let (descriptors, peak_kib) = sampler.join().unwrap();
    out.code(0);
    assert!(descriptors > 0, "lanes was never sampled");
    assert!(
        descriptors <= 4 * 16 + 32,
        "lanes had {descriptors} descriptors open at once for 16 running jobs"
    );
    assert!(peak_kib < 256 * 1024, "peak RSS {peak_kib} KiB");
    let report = out.report();
    assert_eq!(report.jobs.len(), JOBS, "{}", out.stderr());
    assert_eq!(report.summary.succeeded, JOBS as u64);
    let shown: BTreeSet<String> = out
        .stdout()
        .lines()
        .map(|l| l.split_once("] ").expect("prefixed").1.to_owned())
        .collect();
    assert_eq!(out.stdout().lines().count(), JOBS, "a job's line twice");
    assert_eq!(shown, (0..JOBS).map(|i| format!("j{i}")).collect());
    let stderr = out.stderr().to_lowercase();
    assert!(
        !stderr.contains("too many open files") && !stderr.contains("temporarily unavailable"),
        "{stderr}"
    );
}

/// The values of `LANES_SPAWN_THREADS` the spawn tests run under: the machine's default (empty
/// is unset; on two CPUs, the event loop and one thread for bursts, both in one run), every job
/// started on the event loop's thread, and every job from two spawning threads.
const SPAWN_THREADS: [&str; 3] = ["", "0", "2"];

/// Jobs start from several spawning threads at once (or one after another on the event loop):
/// each still gets only its own 0, 1 and 2 (and no pipe of a job spawned beside it).
#[test]
fn jobs_spawned_side_by_side_get_only_their_own_0_1_2() {
    for threads in SPAWN_THREADS {
        let input: String = (0..64).map(|i| format!("k{i}\t{LIST_FDS}\n")).collect();
        let out = Run::new()
            .env("LANES_SPAWN_THREADS", threads)
            .args(["-j", "8"])
            .stdin(input)
            .run();
        out.code(0);
        let stdout = out.stdout();
        for i in 0..64 {
            assert_eq!(
                fds_of(&stdout, &format!("k{i}")),
                ["0", "1", "2"],
                "descriptors of job k{i}, {threads} spawning threads\n{}",
                out.dump()
            );
        }
    }
}

/// Jobs that exit at once, many in flight: a child that exits (and is reaped) before its
/// spawning thread has handed over its pid still has its own exit status in its record.
#[test]
fn every_job_of_a_fast_stream_has_its_own_exit_status() {
    const JOBS: u64 = 1500;
    let input: String = (1..=JOBS)
        .map(|i| format!("k{}\texit $((LANES_SEQ % 7))\n", i % 50))
        .collect();
    for threads in SPAWN_THREADS {
        let out = Run::new()
            .env("LANES_SPAWN_THREADS", threads)
            .args(["-j", "8"])
            .stdin(input.as_str())
            .run();
        out.code(1);
        let report = out.report();
        assert_eq!(report.jobs.len() as u64, JOBS);
        for job in &report.jobs {
            let want = i32::try_from(job.seq % 7).unwrap();
            assert_eq!(
                job.exit_code,
                Some(want),
                "seq {} ({}), {threads} spawning threads",
                job.seq,
                job.outcome
            );
            assert_eq!(job.outcome, if want == 0 { "succeeded" } else { "failed" });
        }
        assert_no_overlap_per_key(&report.jobs);
    }
}

/// `LANES_SPAWN_THREADS` sets how many threads start jobs beside the event loop: a job sees
/// that many `spawn-N` threads in lanes, its parent. A thread takes its name once it runs, so
/// the job looks again (for up to 10 s) until it sees as many as wanted.
#[test]
fn lanes_spawn_threads_sets_the_spawning_threads() {
    for (threads, want) in [("0", 0), ("2", 2), ("3", 3)] {
        let count =
            "grep -c '^spawn-' /proc/$PPID/task/*/comm | awk -F: '{ n += $2 } END { print n }'";
        let out = Run::new()
            .env("LANES_SPAWN_THREADS", threads)
            .stdin(format!(
                "k\ti=0; while [ \"$({count})\" -lt {want} ] && [ $i -lt 200 ]; do \
                 sleep 0.05; i=$((i + 1)); done; {count}\n"
            ))
            .run();
        out.code(0);
        let shown = out.stdout();
        let count = shown.trim().rsplit(' ').next().unwrap_or_default();
        assert_eq!(count, want.to_string(), "{threads}: {}", out.dump());
    }
}

/// `LANES_SPAWN_THREADS` that is not a number of threads from 0 to 16 is a usage error that
/// names it, before any job runs.
#[test]
fn a_bad_spawn_thread_count_is_a_usage_error() {
    for bad in ["many", "-1", "17", "2.5"] {
        let scratch = Scratch::new();
        let marker = scratch.join("ran");
        let out = Run::new()
            .env("LANES_SPAWN_THREADS", bad)
            .stdin(format!(
                "k\ttouch {}\n",
                sh_quote(&marker.to_string_lossy())
            ))
            .no_report()
            .run();
        out.code(2);
        assert!(
            out.stderr().contains("LANES_SPAWN_THREADS") && out.stderr().contains(bad),
            "{}",
            out.dump()
        );
        assert!(!marker.exists(), "a job ran with LANES_SPAWN_THREADS={bad}");
    }
}
