//! `--events FILE`: JSON Lines of every lifecycle event as it happens (SPEC §5.3), one write
//! per event, for live dashboards; written by a thread of its own, so that a dashboard that
//! reads slowly never holds up the run ([`Spool`]).

use serde::Serialize;

use super::json::{to_line, LockHolder};
use crate::output::spool::Spool;

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
    /// Every process of a running job was found stopped (checked once a second); `why` as the
    /// display says it (`SIGTTIN: waiting for terminal input`).
    Stopped {
        seq: u64,
        key: &'a str,
        why: &'static str,
        at: String,
    },
    /// A job found stopped runs again.
    Continued { seq: u64, key: &'a str, at: String },
}

/// Writes events to a file; silent when no `--events` was given.
#[derive(Default)]
pub(crate) struct EventLog {
    file: Option<Spool>,
}

impl EventLog {
    /// An event log writing to `file`, or a silent one.
    pub(crate) fn new(file: Option<Spool>) -> Self {
        EventLog { file }
    }

    /// Whether the events file could not be written to its end (the exit status is then 1).
    pub(crate) fn lost(&self) -> bool {
        self.file.as_ref().is_some_and(Spool::lost)
    }

    /// Whether events are written at all (to skip building them).
    pub(crate) fn enabled(&self) -> bool {
        self.file.is_some()
    }

    /// Queues one event, written with one `write`. A failing file is reported once and then
    /// left alone.
    pub(crate) fn write(&mut self, event: &Event<'_>) {
        if let Some(file) = &self.file {
            file.write(to_line(event));
        }
    }

    /// Resolves once every event queued so far is written.
    pub(crate) fn written(&self) -> impl std::future::Future<Output = ()> + use<> {
        let written = self.file.as_ref().map(Spool::written);
        async move {
            if let Some(written) = written {
                written.await;
            }
        }
    }
}
