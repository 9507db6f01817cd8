//! `--events FILE`: JSON Lines of every lifecycle event as it happens (SPEC §5.3), one write
//! per event, for live dashboards; written by a thread of its own, so that a dashboard that
//! reads slowly never holds up the run ([`Spool`]).

use schemars::JsonSchema;
use serde::Serialize;

use super::json::{outcome_words, reason_words, to_line, LockHolder, Timestamp};
use crate::output::spool::Spool;

/// One line of an events file (`--events`): a job's lifecycle event, written as it happens.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[schemars(rename = "event", deny_unknown_fields)]
pub(crate) enum Event<'a> {
    /// Admitted into its lane; `ahead` jobs of the same key run before it.
    Queued {
        /// The job's number, as in its record.
        #[schemars(range(min = 1))]
        seq: u64,
        /// The job's key.
        key: &'a str,
        /// Jobs of the same key that run before it, the running one included.
        ahead: usize,
        /// `--lock-dir`: the process holding the key host-wide when the job was admitted.
        #[serde(skip_serializing_if = "Option::is_none")]
        held_by: Option<LockHolder>,
        /// When it happened.
        #[schemars(with = "Timestamp")]
        at: String,
    },
    /// Why a waiting job does not start changed (its first cause is told after its `queued`
    /// event; only causes its record's `waits` show are told); it waits for
    /// `cause` from `at` on, until its `started` or `ended`
    /// event or its next `waiting` event. Events may come a moment after their `at`, and so
    /// after a later event of another job.
    Waiting {
        /// The job's number.
        #[schemars(range(min = 1))]
        seq: u64,
        /// The job's key.
        key: &'a str,
        /// `key_busy` (a job of its key is in flight or ahead of it), `cap` (every slot of
        /// `-j` is taken, or starts are held back for the run's capacity), `lock` (its key is
        /// held by another process, `--lock-dir`), `shared_cap` (every
        /// `--shared-max-concurrent` slot is taken), `batch_delay`, `retry_delay`, `resource`
        /// (a named resource it needs is short).
        #[schemars(extend("enum" = crate::core::WaitCause::NAMES))]
        cause: &'static str,
        /// `key_busy` only: the seq of the job it waits behind (the one just ahead of it, or
        /// the one in flight).
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1))]
        behind: Option<u64>,
        /// `resource` only: the named resource it waits for.
        #[serde(skip_serializing_if = "Option::is_none")]
        resource: Option<&'a str>,
        /// When the cause began.
        #[schemars(with = "Timestamp")]
        at: String,
    },
    /// A try started in `slot`.
    Started {
        /// The job's number.
        #[schemars(range(min = 1))]
        seq: u64,
        /// The job's key.
        key: &'a str,
        /// The slot it runs in (`LANES_SLOT`), 1 to `max_concurrent`.
        #[schemars(range(min = 1))]
        slot: u32,
        /// Which try: 1 for the first.
        #[schemars(range(min = 1))]
        attempt: u32,
        /// The seq of the batch's first job, when batching; absent otherwise.
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schemars(range(min = 1))]
        batch: Option<u64>,
        /// When it happened.
        #[schemars(with = "Timestamp")]
        at: String,
    },
    /// A try ended, or a job that never ran got its record; `retry` is true when the job goes
    /// again (`--retries`), and then no record is written yet. `key` is `null` for an input
    /// line without one, as in the record.
    Ended {
        /// The job's number.
        #[schemars(range(min = 1))]
        seq: u64,
        /// The job's key; `null` where the record's is.
        key: Option<&'a str>,
        /// The outcome of the try (the record's, when final).
        #[schemars(extend("enum" = outcome_words()))]
        outcome: &'static str,
        /// The reason, as in the record; `null` for a success.
        #[schemars(extend("enum" = reason_words()))]
        reason: Option<&'static str>,
        /// Which try ended (0 for a job that never ran).
        attempt: u32,
        /// Whether the job goes again (`--retries`): no record yet.
        retry: bool,
        /// When it happened.
        #[schemars(with = "Timestamp")]
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

/// The JSON Schema (draft 2020-12) of one line of an events file.
#[cfg(test)]
pub(crate) fn schema() -> schemars::Schema {
    let mut generator = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .with_transform(schemars::transform::RecursiveTransform(
            super::json::unwrap_description,
        ))
        .into_generator();
    let event = generator.subschema_for::<Event<'_>>();
    let mut schema = schemars::json_schema!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "lanes/events.schema.json",
        "title": "lanes events file line (--events)",
        "description": "Each line of an events file is one lifecycle event of a job, written as \
            it happens: `queued`, `waiting` whenever its cause of waiting changes, `started` per try, \
            `ended` per try (the last with `retry: false`).",
        "allOf": [event],
    });
    schema.insert("$defs".to_owned(), generator.take_definitions(true).into());
    schema
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
