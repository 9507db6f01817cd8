//! `--events FILE`: JSON Lines of every lifecycle event as it happens (SPEC §5.3), one write
//! per event, for live dashboards.

use std::fs::File;
use std::io::Write;

use serde::Serialize;

use super::json::{to_line, LockHolder};

/// One lifecycle event.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Event<'a> {
    /// Admitted into its lane; `ahead` jobs of the same key run before it.
    Queued {
        seq: u64,
        key: &'a str,
        ahead: usize,
        /// `--lock-dir`: the process holding the key host-wide when the job was admitted.
        #[serde(skip_serializing_if = "Option::is_none")]
        held_by: Option<LockHolder>,
        at: String,
    },
    /// A try started in `slot`.
    Started {
        seq: u64,
        key: &'a str,
        slot: u32,
        attempt: u32,
        /// The seq of the batch's first job, when batching.
        #[serde(skip_serializing_if = "Option::is_none")]
        batch: Option<u64>,
        at: String,
    },
    /// A try ended, or a job that never ran got its record; `retry` is true when the job goes
    /// again (`--retries`), and then no record is written yet. `key` is `null` for an input
    /// line without one, as in the record.
    Ended {
        seq: u64,
        key: Option<&'a str>,
        outcome: &'static str,
        reason: Option<&'static str>,
        attempt: u32,
        retry: bool,
        at: String,
    },
}

/// Writes events to a file; silent when no `--events` was given.
#[derive(Default)]
pub(crate) struct EventLog {
    file: Option<File>,
    /// A write failed for want of storage (not a reader gone): the file is incomplete.
    lost: bool,
}

impl EventLog {
    /// An event log writing to `file`, or a silent one.
    pub(crate) fn new(file: Option<File>) -> Self {
        EventLog { file, lost: false }
    }

    /// Whether the events file could not be written to its end (the exit status is then 1).
    pub(crate) fn lost(&self) -> bool {
        self.lost
    }

    /// Whether events are written at all (to skip building them).
    pub(crate) fn enabled(&self) -> bool {
        self.file.is_some()
    }

    /// Writes one event with one `write`. A failing file is reported once and then dropped.
    pub(crate) fn write(&mut self, event: &Event<'_>) {
        if let Some(file) = &mut self.file {
            if let Err(err) = file.write_all(&to_line(event)) {
                eprintln!("lanes: cannot write the events file: {err}; the run goes on");
                self.file = None;
                self.lost = err.kind() != std::io::ErrorKind::BrokenPipe;
            }
        }
    }
}
