//! The status report `lanes` writes to stderr on SIGUSR1 (as `dd` does): how long the run has
//! gone, how many jobs run and wait, and each running job with how long it has run.

use std::fmt::Write as _;
use std::time::Duration;

use crate::core::{Outcome, RunningJob, Seq, Tick};

/// The status text at `now`: a line of counts, then one line per running job,
/// `  seq 3 [key] 4.1s try 2: COMMAND` (`stopping (REASON)` when it is being stopped,
/// `STOPPED (WHY)` when every process of it is stopped, as `stopped` says by seq); `command`
/// gives a job's command by seq.
pub(crate) fn status_text<'a>(
    running: &[RunningJob],
    queued: usize,
    now: Tick,
    command: impl Fn(Seq) -> Option<&'a str>,
    stopped: &std::collections::HashMap<Seq, &str>,
) -> String {
    let held = running
        .iter()
        .filter(|job| stopped.contains_key(&job.seq))
        .count();
    let held = if held > 0 {
        format!(" ({held} of them stopped)")
    } else {
        String::new()
    };
    let mut text = format!(
        "lanes: status after {}: {} running{held}, {queued} queued\n",
        seconds(now),
        running.len()
    );
    for job in running {
        let _ = write!(
            text,
            "  seq {} [{}] running {}",
            job.seq,
            job.key.escape_default(),
            seconds(now.saturating_sub(job.started_at))
        );
        // Every process of it stopped (it read the terminal, a debugger holds it): it will
        // not end by itself.
        if let Some(why) = stopped.get(&job.seq) {
            let _ = write!(text, ", STOPPED ({why})");
        }
        if job.attempt > 1 {
            let _ = write!(text, " try {}", job.attempt);
        }
        if job.members.len() > 1 {
            let _ = write!(text, " ({} jobs)", job.members.len());
        }
        if let Some(reason) = job.stopping {
            let reason = Outcome::Interrupted(reason).reason().unwrap_or("");
            let _ = write!(text, ", stopping ({reason})");
        }
        if let Some(command) = command(job.seq) {
            // As it runs: quotes as they are, only control characters escaped (one line).
            let _ = write!(
                text,
                ": {}",
                crate::output::framing::escape_controls(command)
            );
        }
        text.push('\n');
    }
    text
}

/// `12.3s`: tenths of a second.
fn seconds(time: Duration) -> String {
    format!("{:.1}s", time.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::StopReason;

    #[test]
    fn each_running_job_is_listed_with_how_long_it_has_run() {
        let job = |seq, key: &str, attempt, started_ms, stopping| RunningJob {
            seq,
            key: key.into(),
            slot: 1,
            attempt,
            members: vec![seq],
            started_at: Duration::from_millis(started_ms),
            stopping,
        };
        let running = [
            job(2, "a", 1, 1000, None),
            job(5, "b", 2, 2500, Some(StopReason::Timeout)),
        ];
        let stopped = [(2, "SIGTTIN: waiting for terminal input")].into();
        let text = status_text(
            &running,
            4,
            Duration::from_millis(3000),
            |seq| (seq == 2).then_some("make all"),
            &stopped,
        );
        assert_eq!(
            text,
            "lanes: status after 3.0s: 2 running (1 of them stopped), 4 queued\n  \
             seq 2 [a] running 2.0s, STOPPED (SIGTTIN: waiting for terminal input): make all\n  \
             seq 5 [b] running 0.5s try 2, stopping (timeout)\n"
        );
        // A command is shown as it runs: its quotes as they are, a newline escaped.
        let text = status_text(
            &running[..1],
            0,
            Duration::from_millis(3000),
            |_| Some("trap \"\" TERM; echo 'x'\nsleep 2"),
            &Default::default(),
        );
        assert!(
            text.ends_with(": trap \"\" TERM; echo 'x'\\nsleep 2\n"),
            "{text}"
        );
    }
}
