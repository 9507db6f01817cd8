//! The live display on a terminal (SPEC §5.4): one status line — done/total, running, queued,
//! failed, elapsed — and one line per running job (key, elapsed, command cut to the width),
//! drawn on stderr with `indicatif`. Job output is written above it through
//! [`Progress::handle`]'s `suspend`, never through it.

use std::collections::HashMap;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// The live display. Everything is a no-op once [`Progress::finish`] has run.
pub(crate) struct Progress {
    multi: MultiProgress,
    status: ProgressBar,
    lines: HashMap<u64, ProgressBar>,
    /// At most this many job lines are shown; the status line counts the rest.
    max_lines: usize,
    /// The terminal's width in columns.
    width: u16,
    done: u64,
    failed: u64,
    running: usize,
    queued: usize,
    total: Option<u64>,
}

/// How often the display is redrawn, per second.
const REFRESH_HZ: u8 = 10;

impl Progress {
    /// A display on stderr, showing at most `max_lines` running jobs, `width` columns wide.
    pub(crate) fn new(max_lines: usize, width: u16) -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr_with_hz(REFRESH_HZ));
        let status = multi.add(ProgressBar::new_spinner());
        status.set_style(
            ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        status.enable_steady_tick(Duration::from_millis(100));
        let progress = Progress {
            multi,
            status,
            lines: HashMap::new(),
            max_lines,
            width,
            done: 0,
            failed: 0,
            running: 0,
            queued: 0,
            total: None,
        };
        progress.redraw();
        progress
    }

    /// The handle writers use to print above the display (`suspend`).
    pub(crate) fn handle(&self) -> MultiProgress {
        self.multi.clone()
    }

    /// The number of jobs in all, once the input has ended.
    pub(crate) fn set_total(&mut self, total: u64) {
        self.total = Some(total);
        self.redraw();
    }

    /// How many jobs wait now.
    pub(crate) fn set_queued(&mut self, queued: usize) {
        if queued != self.queued {
            self.queued = queued;
            self.redraw();
        }
    }

    /// A run started (a job, or a batch known by its first job's seq).
    pub(crate) fn started(&mut self, seq: u64, key: &str, command: &str) {
        self.running += 1;
        if self.lines.len() < self.max_lines {
            let line = self.multi.add(ProgressBar::new_spinner());
            line.set_style(
                ProgressStyle::with_template("  {prefix} {elapsed:>4} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            // Control characters escaped, anything else as it is; long keys cut to a third of
            // the width.
            let mut shown = crate::output::framing::escape_controls(key);
            let most = usize::from(self.width / 3).max(8);
            if shown.chars().count() > most {
                shown = shown.chars().take(most - 1).chain(['…']).collect();
            }
            let prefix = format!("[{shown}]");
            // Cut to the width, leaving the last columns free: a full last line would wrap when
            // the terminal echoes `^C` after it, and the display could then not be cleared.
            let room = usize::from(self.width).saturating_sub(prefix.chars().count() + 12);
            let command: String = command
                .chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .take(room)
                .collect();
            line.set_prefix(prefix);
            line.set_message(command);
            self.lines.insert(seq, line);
        }
        self.redraw();
    }

    /// A run (known by its first job's seq) ended; its line goes.
    pub(crate) fn run_ended(&mut self, seq: u64) {
        self.running = self.running.saturating_sub(1);
        if let Some(line) = self.lines.remove(&seq) {
            line.finish_and_clear();
            self.multi.remove(&line);
        }
        self.redraw();
    }

    /// A job's record was written; `bad` when it did not succeed (superseded counts as fine).
    pub(crate) fn recorded(&mut self, bad: bool) {
        self.done += 1;
        self.failed += u64::from(bad);
        self.redraw();
    }

    /// Redraws the running jobs' lines, so that their elapsed times move.
    pub(crate) fn tick(&self) {
        for line in self.lines.values() {
            line.tick();
        }
    }

    /// Clears the display for good.
    pub(crate) fn finish(&mut self) {
        for (_, line) in self.lines.drain() {
            line.finish_and_clear();
        }
        self.status.finish_and_clear();
        let _ = self.multi.clear();
        // Writers still hold the handle: from now on they write plainly, nothing is redrawn.
        self.multi.set_draw_target(ProgressDrawTarget::hidden());
    }

    fn redraw(&self) {
        let done = match self.total {
            Some(total) => format!("{}/{total} done", self.done),
            None => format!("{} done", self.done),
        };
        let hidden = self.running.saturating_sub(self.lines.len());
        let more = if hidden > 0 {
            format!(" ({hidden} not shown)")
        } else {
            String::new()
        };
        self.status.set_message(format!(
            "{done} · {} running{more} · {} queued · {} failed",
            self.running, self.queued, self.failed
        ));
    }
}
