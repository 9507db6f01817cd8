//! What the tests of keys shared by several lanes processes have in common, whether they share
//! them through a lock directory (`--lock-dir`) or a database (`--coordinate`): jobs that mark
//! their start and end in a log per key, the checks that no two jobs of a key ran at once, and
//! the holder-then-waiter start that puts a job in a key's line.

use std::path::PathBuf;
use std::time::Duration;

use crate::support::*;

/// Shell code that appends `WORD KEY PID NANOSECONDS` to `$D/log.KEY` (one small `O_APPEND`
/// write, so lines of concurrent jobs never mix).
pub fn mark(word: &str) -> String {
    format!("echo \"{word} $LANES_KEY $$ $(date +%s%N)\" >> \"$D/log.$LANES_KEY\"")
}

/// A job line of key `key` whose command marks its start, runs `body` (shell code; none when
/// empty) and marks its end.
pub fn marked_job(key: &str, body: &str) -> String {
    let body = if body.is_empty() {
        String::new()
    } else {
        format!("{body}; ")
    };
    format!("{key}\t{}; {body}{}\n", mark("start"), mark("end"))
}

/// A job line of key `key` whose command marks its start, then waits for the file `$D/go` and
/// ends without marking its end.
pub fn holding_job(key: &str) -> String {
    format!("{key}\t{}; {}\n", mark("start"), await_file("go"))
}

/// The commands of the jobs that race for `keys`: five rounds, each a job of every key, which
/// marks its start and end around a sleep of 0 to 40 ms; as (key, command), round by round.
pub fn rounds_of_marked_jobs<'k>(keys: &[&'k str]) -> Vec<(&'k str, String)> {
    (0..5)
        .flat_map(|round| {
            keys.iter().map(move |&key| {
                let command = format!("{}; sleep 0.0{round}; {}", mark("start"), mark("end"));
                (key, command)
            })
        })
        .collect()
}

/// One job of a key, as its marks in `$D/log.KEY` tell it.
pub struct Interval {
    /// When it marked its end, in nanoseconds since the epoch.
    pub end: u128,
    /// The pid of the job's shell, as written.
    pub pid: String,
}

/// The jobs written to `$D/log.KEY`, in the order written; checks that every start is
/// followed by its own end before the next start: no two jobs of the key overlapped,
/// whichever process or host ran them.
pub fn intervals(scratch: &Scratch, key: &str) -> Vec<Interval> {
    let lines = scratch.lines(&format!("log.{key}"));
    assert_eq!(lines.len() % 2, 0, "unfinished job of {key}: {lines:#?}");
    let mut out: Vec<Interval> = Vec::new();
    for pair in lines.chunks(2) {
        let start: Vec<&str> = pair[0].split(' ').collect();
        let end: Vec<&str> = pair[1].split(' ').collect();
        assert_eq!(
            (start[0], end[0], start[2]),
            ("start", "end", end[2]),
            "jobs of {key} overlapped: {lines:#?}"
        );
        let (s, e): (u128, u128) = (start[3].parse().unwrap(), end[3].parse().unwrap());
        assert!(s <= e, "{lines:#?}");
        if let Some(previous) = out.last() {
            assert!(previous.end <= s, "jobs of {key} overlapped: {lines:#?}");
        }
        out.push(Interval {
            end: e,
            pid: start[2].to_owned(),
        });
    }
    out
}

/// Checks that every run of `outputs` exited 0 with `jobs` jobs in its report, each with a
/// `lock_wait_ms`.
pub fn check_all_ran_and_waited(outputs: &[Output], jobs: usize) {
    for output in outputs {
        output.code(0);
        assert_eq!(output.report().jobs.len(), jobs);
        for job in &output.report().jobs {
            assert!(job.lock_wait_ms.is_some(), "{job:?}");
        }
    }
}

/// Checks that the reports of `outputs` agree with the marks: per key, no two jobs'
/// [started_at, ended_at] overlap, whichever run recorded them.
pub fn check_reports_never_overlap(outputs: &[Output], key: &str) {
    let mut spans: Vec<(i64, i64)> = outputs
        .iter()
        .flat_map(|o| o.report().by_key(key))
        .map(|job| (job.start_ms(), job.end_ms()))
        .collect();
    spans.sort_unstable();
    for pair in spans.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "{key}: {spans:?}");
    }
}

/// Starts `holder`, waits (10 s at most) until its job has written the file `started`, starts
/// `waiter`, and waits (10 s at most) until the listing `locks` gives contains `queued`;
/// fails showing the listing when it never does. Returns (holder, waiter).
pub fn hold_then_queue(
    scratch: &Scratch,
    holder: Run,
    started: &str,
    waiter: Run,
    locks: impl Fn() -> String,
    queued: &str,
) -> (Running, Running) {
    let holder = holder.spawn();
    scratch.wait_for(started, Duration::from_secs(10));
    let waiter = waiter.spawn();
    wait_for_listing(locks, queued);
    (holder, waiter)
}

/// Waits (10 s at most) until the listing `locks` gives contains `text`; fails showing the
/// listing when it never does.
pub fn wait_for_listing(locks: impl Fn() -> String, text: &str) {
    assert!(
        wait_until(Duration::from_secs(10), || locks().contains(text)),
        "{}",
        locks()
    );
}

/// A job of the shared-cap tests: it enters `$D/running/`, appends to `$D/counts` how many
/// jobs are in, stays 100 ms and leaves.
const COUNTING_JOB: &str = "mkdir \"$D/running/$LANES_KEY.$$\"; \
     ls \"$D/running\" | wc -l >> \"$D/counts\"; \
     sleep 0.1; rmdir \"$D/running/$LANES_KEY.$$\"";

/// Makes `$D/running` and writes the job files of the shared-cap tests: for each of
/// `processes` processes P, `jobsP.tsv` with six counting jobs of its own keys `pPkI`.
pub fn counting_job_files(scratch: &Scratch, processes: usize) -> Vec<PathBuf> {
    scratch.mkdir("running");
    (0..processes)
        .map(|p| {
            let jobs: String = (0..6)
                .map(|i| format!("p{p}k{i}\t{COUNTING_JOB}\n"))
                .collect();
            scratch.write(&format!("jobs{p}.tsv"), jobs)
        })
        .collect()
}

/// Checks `$D/counts` after the 18 counting jobs of three processes ran under a shared cap of
/// 2: never more than two at once, and two at once at least once.
pub fn check_counts_under_a_cap_of_two(scratch: &Scratch) {
    let counts: Vec<u32> = scratch
        .lines("counts")
        .iter()
        .map(|line| line.trim().parse().unwrap())
        .collect();
    assert_eq!(counts.len(), 18);
    assert!(counts.iter().all(|&n| n <= 2), "{counts:?}");
    assert!(
        counts.contains(&2),
        "two jobs never ran at once: {counts:?}"
    );
}

/// A job line of key `key` that writes its shell's pid to `$D/orphan.pid`, waits for the file
/// `$D/go`, stays 100 ms more and marks its end: a job that runs on once its lanes is killed.
pub fn orphan_job(key: &str) -> String {
    marked_job(
        key,
        &format!(
            "echo $$ > \"$D/orphan.pid\"; {}; sleep 0.1",
            await_file("go")
        ),
    )
}

/// Checks that the first jobs of the named `runs` never ran at once (`what` says what that
/// would break), from their records' start and end; returns the names in the order their
/// jobs started.
pub fn check_one_at_a_time<'n>(runs: &[(&'n str, &Output)], what: &str) -> Vec<&'n str> {
    let mut spans: Vec<(&str, i64, i64)> = runs
        .iter()
        .map(|(name, out)| (*name, out.job(1).start_ms(), out.job(1).end_ms()))
        .collect();
    spans.sort_by_key(|&(_, start, _)| start);
    for pair in spans.windows(2) {
        assert!(pair[0].2 <= pair[1].1, "{what}: {spans:?}");
    }
    spans.into_iter().map(|(name, _, _)| name).collect()
}
