//! The end-of-run summary for people, on stderr: counts by outcome, wall time, and each job
//! that failed, was interrupted or was rejected, with its reason.

use crate::output::framing::escape_controls;
use std::fmt::Write as _;
use std::time::Duration;

use super::entry::Entry;
use super::json::SummaryRecord;
use crate::output::framing::cut_key;

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
        shown_key(entry.key.unwrap_or("?")),
        outcome.reason().unwrap_or("")
    );
    // An interrupted job that exited by itself on the stop shows its status as a failed one.
    if let Some(code) = entry.exit_code() {
        let _ = write!(line, " (exit {code})");
    }
    if let Some(signal) = entry.signal() {
        let _ = write!(line, " ({signal})");
    }
    // What it quotes (a working directory, a shell, an input line) cannot reach the
    // terminal raw: escaped as keys are.
    if let Some(error) = entry.error {
        let _ = write!(line, ": {}", escape_controls(error));
    }
    let tail = String::from_utf8_lossy(entry.stderr_tail);
    let lines: Vec<&str> = tail.lines().filter(|l| !l.trim().is_empty()).collect();
    for text in &lines[lines.len().saturating_sub(TAIL_LINES)..] {
        // Controls (escape sequences' ESC among them) as spaces; the other characters that
        // hide or reorder text (bidi controls, zero-width ones) escaped, as in keys.
        let clean = escape_controls(&text.replace(char::is_control, " "));
        let _ = write!(line, "\n      | {clean}");
    }
    line
}

/// `key` escaped (control characters, quotes and non-ASCII as `\u{…}`), cut to
/// [`crate::output::framing::KEY_SHOWN`] characters with `…` when longer, so that one line of
/// the summary stays one line to read.
fn shown_key(key: &str) -> String {
    cut_key(key.escape_default().to_string())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::framing::KEY_SHOWN;

    #[test]
    fn a_long_key_is_cut_in_the_summary() {
        assert_eq!(shown_key("a\tb"), "a\\tb");
        let long = "k".repeat(131_062);
        let shown = shown_key(&long);
        assert_eq!(shown.chars().count(), KEY_SHOWN + 1);
        assert!(shown.ends_with('…'));
        assert_eq!(shown_key(&"k".repeat(KEY_SHOWN)), "k".repeat(KEY_SHOWN));
    }
}
