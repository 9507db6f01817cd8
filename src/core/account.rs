//! A job's final account: everything the core knows of it when its one record is written.

use std::sync::Arc;
use std::time::Duration;

use super::outcome::Outcome;
use super::resources::Grant;
use super::state::{Seq, Tick, Try};
use super::wait::WaitSpan;

/// A job's final account, from which its one record is written: everything the core knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// The job.
    pub seq: Seq,
    /// How it ended.
    pub outcome: Outcome,
    /// Tries made (0 when never started).
    pub attempts: u32,
    /// Every try it made, oldest first: as many as `attempts`, spawn errors included.
    pub tries: Vec<Try>,
    /// From admission to its end, for a job that was admitted and never started (this time);
    /// `None` for a job never admitted, or superseded while waiting (SPEC §5.2).
    pub waited: Option<Duration>,
    /// The spans of the wait the record's `wait_ms` tells of, oldest first, adding up to it
    /// (the last try's wait, or the wait of a job that never started); empty for a job never
    /// admitted or superseded while waiting.
    pub waits: Vec<WaitSpan>,
    /// The newer job that superseded it (`superseded` only).
    pub superseded_by: Option<Seq>,
    /// The first job of the batch it ran in (batching only).
    pub batch: Option<Seq>,
    /// When its record was decided.
    pub ended_at: Tick,
    /// Whether it ended as a run in flight: the end of its try was already told (the `ended`
    /// event); otherwise the record is the first word of its end.
    pub in_flight: bool,
    /// The weight and named units its last try held; `None` for weight 1 and no resource,
    /// or when it never started.
    pub grant: Option<Arc<Grant>>,
}

impl Account {
    /// Its last try, when that try's process started: what the record's top-level fields
    /// (slot, times, exit status) tell of.
    pub fn tried(&self) -> Option<&Try> {
        self.tries.last().filter(|t| t.started())
    }

    /// The account of a job that ends without ever being admitted (rejected) or without
    /// starting (closed intake, superseded while waiting).
    pub(crate) fn unstarted(seq: Seq, outcome: Outcome, now: Tick) -> Self {
        Account {
            seq,
            outcome,
            attempts: 0,
            tries: Vec::new(),
            waited: None,
            waits: Vec::new(),
            superseded_by: None,
            batch: None,
            ended_at: now,
            in_flight: false,
            grant: None,
        }
    }
}
