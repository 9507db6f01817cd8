//! SPEC §3.3: `--max-queued` bounds admitted jobs; `--on-full wait` pauses reading input
//! (backpressure, nothing lost), `--on-full reject` rejects with `queue_full`.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::support::*;

#[test]
fn a_full_queue_pauses_reading_input_and_loses_nothing() {
    const LINES: usize = 120;
    const LINE_BYTES: usize = 32 * 1024;
    let scratch = Scratch::new();
    let mut running = Run::new()
        .scratch(&scratch)
        .args(["-j", "1", "--max-queued", "5"])
        .stdin_piped()
        .spawn();
    // Big lines, so that pipe and read buffers (64 KiB each) hold only a few of them. The
    // first job blocks until the test releases it.
    let padding = "#".repeat(LINE_BYTES);
    let mut lines = vec![format!(
        "k0\ttouch \"$D/up\"; {} {padding}\n",
        await_file("release")
    )];
    for i in 1..LINES {
        lines.push(format!("k{i}\techo $LANES_SEQ >> \"$D/ran\" {padding}\n"));
    }
    let written = Arc::new(AtomicUsize::new(0));
    let mut stdin = running.take_stdin();
    let feeder = {
        let written = Arc::clone(&written);
        thread::spawn(move || {
            for line in lines {
                stdin.write_all(line.as_bytes())?;
                written.fetch_add(1, Ordering::SeqCst);
            }
            Ok::<(), std::io::Error>(())
        })
    };
    scratch.wait_for("up", Duration::from_secs(10));
    // While the first job blocks, the feeder must get stuck: 1 running + 5 queued + what
    // fits in the pipe and lanes' read buffer (a few 32 KiB lines) + one line in hand.
    let all = wait_until(Duration::from_millis(1500), || {
        written.load(Ordering::SeqCst) == LINES
    });
    let stuck_at = written.load(Ordering::SeqCst);
    scratch.write("release", "");
    let out = running.wait();
    feeder.join().unwrap().expect("the feeder wrote every line");
    out.code(0);
    assert!(
        !all && stuck_at <= 20,
        "lanes read {stuck_at} of {LINES} lines while one job ran and 5 could wait"
    );
    let mut ran: Vec<usize> = scratch
        .lines("ran")
        .iter()
        .map(|l| l.parse().unwrap())
        .collect();
    ran.sort_unstable();
    assert_eq!(ran, (2..=LINES).collect::<Vec<_>>(), "nothing is lost");
    assert_eq!(out.report().summary.succeeded, LINES as u64);
}

#[test]
fn a_full_queue_rejects_with_queue_full_under_on_full_reject() {
    // One slot, room for 2 waiting jobs. The first job is running before the others arrive
    // and runs until three rejections are in the report (records are flushed as they
    // happen): of the five others, two wait and three are rejected.
    let scratch = Scratch::new();
    let run = Run::new()
        .scratch(&scratch)
        .args(["-j", "1", "--max-queued", "2", "--on-full", "reject"])
        .stdin_piped();
    let report = sh_quote(&run.report_path().display().to_string());
    let first = format!(
        "touch \"$D/up\"; n=0; until [ \"$(grep -c queue_full {report})\" -ge 3 ]; do \
         n=$((n+1)); if [ $n -gt 500 ]; then exit 97; fi; sleep 0.02; done"
    );
    let mut running = run.spawn();
    running
        .stdin()
        .write_all(format!("a\t{first}\n").as_bytes())
        .unwrap();
    running.stdin().flush().unwrap();
    scratch.wait_for("up", Duration::from_secs(10));
    running
        .stdin()
        .write_all(b"b\ttrue\nc\ttrue\nd\ttrue\ne\ttrue\nf\ttrue\n")
        .unwrap();
    running.close_stdin();
    let out = running.wait();
    out.code(1);
    let report = out.report();
    assert_eq!(out.job(1).result(), ("succeeded", None), "{}", out.dump());
    for seq in [2, 3] {
        assert_eq!(out.job(seq).result(), ("succeeded", None), "{}", out.dump());
    }
    for seq in [4, 5, 6] {
        let job = out.job(seq);
        assert_eq!(job.result(), ("rejected", Some("queue_full")), "{job:?}");
        assert!(!job.started);
        assert_eq!(job.key.as_deref(), Some(["d", "e", "f"][seq as usize - 4]));
    }
    assert_eq!(report.summary.rejected, 3);
}

/// The bound is on jobs that wait: with `--max-queued` jobs waiting for their busy key, a job
/// of an idle key with a slot free starts under `--on-full reject`, where one that would wait
/// is refused. The job that starts is the one that lets the first job end.
#[test]
fn under_on_full_reject_a_job_that_starts_at_once_is_not_refused() {
    let scratch = Scratch::new();
    let run = Run::new()
        .scratch(&scratch)
        .args(["-j", "2", "--max-queued", "1", "--on-full", "reject"])
        .stdin_piped();
    let report = sh_quote(&run.report_path().display().to_string());
    let mut running = run.spawn();
    running
        .stdin()
        .write_all(format!("a\ttouch \"$D/up\"; {}\n", await_file("go")).as_bytes())
        .unwrap();
    running.stdin().flush().unwrap();
    scratch.wait_for("up", Duration::from_secs(10));
    // The second a waits behind the first and fills the queue; b starts, and lets the first
    // a end once the third a, which would wait, has been refused.
    let b = format!(
        "n=0; until grep -q queue_full {report}; do n=$((n+1)); \
         if [ $n -gt 500 ]; then exit 97; fi; sleep 0.02; done; touch \"$D/go\""
    );
    running
        .stdin()
        .write_all(format!("a\ttrue\nb\t{b}\na\ttrue\n").as_bytes())
        .unwrap();
    running.close_stdin();
    let out = running.wait();
    out.code(1);
    for seq in [1, 2, 3] {
        assert_eq!(out.job(seq).result(), ("succeeded", None), "{}", out.dump());
    }
    let refused = out.job(4);
    assert_eq!(
        refused.result(),
        ("rejected", Some("queue_full")),
        "{}",
        out.dump()
    );
    assert!(!refused.started);
}
