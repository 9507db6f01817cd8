//! The end-of-run summary for people, on stderr: counts by outcome, wall time, and each job
//! that failed, was interrupted or was rejected, with its reason.

use std::fmt::Write as _;
use std::time::Duration;

use super::entry::Entry;
use super::json::SummaryRecord;
use crate::core::Outcome;

/// How many bad jobs the summary lists by name; the rest are counted.
pub(crate) const MAX_LISTED: usize = 20;

/// How many of a bad job's last stderr lines the summary shows.
pub(crate) const TAIL_LINES: usize = 3;

/// A bad job's summary entry: `failed      seq 5 [key] exit_status (exit 3)`, then the last
/// lines of its stderr, indented.
pub(crate) fn bad_job_line(entry: &Entry<'_>) -> String {
    let outcome = entry.outcome;
    let mut line = format!(
        "  {:<11} seq {} [{}] {}",
        outcome.name(),
        entry.seq,
        entry.key.unwrap_or("?").escape_default(),
        outcome.reason().unwrap_or("")
    );
    if let (Some(code), Outcome::Failed(_)) = (entry.exit_code(), outcome) {
        let _ = write!(line, " (exit {code})");
    }
    if let Some(signal) = entry.signal() {
        let _ = write!(line, " ({signal})");
    }
    if let Some(error) = entry.error {
        let _ = write!(line, ": {error}");
    }
    let tail = String::from_utf8_lossy(entry.stderr_tail);
    let lines: Vec<&str> = tail.lines().filter(|l| !l.trim().is_empty()).collect();
    for text in &lines[lines.len().saturating_sub(TAIL_LINES)..] {
        let clean: String = text
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let _ = write!(line, "\n      | {clean}");
    }
    line
}

/// The whole summary: one line of counts, then the listed bad jobs, then how many more.
pub(crate) fn summary(
    summary: &SummaryRecord,
    listed: &[String],
    unlisted: u64,
    has_report: bool,
) -> String {
    let mut text = format!(
        "lanes: {} in {}: {} succeeded{}, {} failed, {} interrupted, {} rejected",
        crate::plural::plural(summary.jobs, "job"),
        humantime::format_duration(Duration::from_millis(summary.duration_ms)),
        summary.succeeded,
        if summary.flaky > 0 {
            format!(" ({} flaky)", summary.flaky)
        } else {
            String::new()
        },
        summary.failed,
        summary.interrupted,
        summary.rejected,
    );
    if summary.skipped > 0 {
        let _ = write!(text, ", {} skipped", summary.skipped);
    }
    text.push('\n');
    for line in listed {
        text.push_str(line);
        text.push('\n');
    }
    if unlisted > 0 {
        let see = if has_report { " (see the report)" } else { "" };
        let _ = writeln!(text, "  … and {unlisted} more{see}");
    }
    text
}
