//! A run's events file (`--events`) for its timeline: checked to belong to the report's run,
//! and read for the jobs that have no record yet (running or waiting when the report was
//! read: a run still going, or one that was killed).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::model::{FirstPass, CAUSES};
use super::report::{parse_ms, LineReader, ReadError, SLACK_MS};

/// One event line, as far as a timeline reads it.
#[derive(Debug, Deserialize)]
struct EventLine {
    #[serde(rename = "type")]
    kind: String,
    seq: u64,
    #[serde(default)]
    key: Option<String>,
    at: String,
    #[serde(default)]
    cause: Option<String>,
    #[serde(default)]
    slot: Option<u32>,
    #[serde(default)]
    attempt: Option<u32>,
    #[serde(default)]
    retry: Option<bool>,
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

/// A job with no record: what its events tell of it.
#[derive(Debug, Clone)]
pub(crate) struct InFlightJob {
    /// The job.
    pub seq: u64,
    /// Its key.
    pub key: String,
    /// When it was queued (or re-queued), ms from the run's start.
    pub queued_at: u64,
    /// Its causes of waiting since then: (cause index, since).
    pub waits: Vec<(usize, u64)>,
    /// When its current try started.
    pub started_at: Option<u64>,
    /// Its current try's slot.
    pub slot: Option<u32>,
    /// Its current try.
    pub attempt: u32,
    /// When its last try ended for good, by an `ended` event, though the report has no
    /// record of it yet (its writer had not caught up, or the report was cut short).
    pub ended_at: Option<u64>,
    /// The outcome its `ended` event told (`failed`, …), when it has ended.
    pub outcome: Option<String>,
    /// The reason its `ended` event told (`timeout`, `shutdown`, …).
    pub reason: Option<String>,
    /// Its tries before the current one, each retried: (start, end, slot, attempt), ms from
    /// the run's start.
    pub earlier: Vec<(u64, u64, Option<u32>, u32)>,
}

impl InFlightJob {
    /// What the page tells of it on hover.
    pub(crate) fn record(&self) -> serde_json::Value {
        serde_json::json!({
            "seq": self.seq,
            "key": self.key,
            "outcome": match (self.ended_at, self.started_at) {
                (Some(_), _) => self.outcome.as_deref().unwrap_or("ended"),
                (None, Some(_)) => "running",
                (None, None) => "waiting",
            },
            "reason": self.reason,
            "attempts": self.attempt,
            "slot": self.slot,
            "note": "no record yet: read from the events file",
        })
    }
}

/// The jobs with no record, and the time of the last event.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    /// In seq order (of a run drawn job by job; none of one drawn aggregated).
    pub jobs: Vec<InFlightJob>,
    /// How many jobs with no record were running at the file's end.
    pub running: u64,
    /// How many jobs with no record were waiting at the file's end.
    pub waiting: u64,
    /// How many jobs with no record had ended, by their events.
    pub ended: u64,
    /// The running time of the jobs with no record, ms: each try from its `started` event to
    /// its `ended` event (or the last event), a batch's run once.
    pub busy_ms: u64,
    /// The last event's time, ms from the run's start: "now" for what still runs.
    pub last_at: u64,
    /// The jobs with no record took the run past [`super::model::DETAIL_LIMIT`] jobs, though
    /// its report holds fewer: it is drawn aggregated, and `jobs` is empty.
    pub too_many: bool,
}

/// Reads the events file at `path` against the report read in `first`.
pub(crate) fn read(path: &Path, first: &FirstPass) -> Result<InFlight, ReadError> {
    let mut lines = LineReader::open(path)?;
    let bad = |line: u64, why: String| ReadError::Bad {
        path: path.to_path_buf(),
        line,
        why,
    };
    let origin = first.origin;
    let mut track = first.detailed();
    let mut too_many = false;
    let mut open: BTreeMap<u64, InFlightJob> = BTreeMap::new();
    // Of a run drawn aggregated: each job with no record, and whether it runs.
    let mut counted: std::collections::HashMap<u64, bool> = std::collections::HashMap::new();
    // Of every job with no record: the slot of its running try, and when each slot's run
    // started (a batch's members start together in one slot: one run).
    let mut running_in: std::collections::HashMap<u64, u32> = std::collections::HashMap::new();
    let mut slot_started: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
    let mut busy_ms = 0u64;
    let mut ended = 0u64;
    let mut last_at = 0u64;
    let mut text = String::new();
    while let Some((number, complete)) = lines.next_line(&mut text)? {
        if text.trim().is_empty() {
            continue;
        }
        let event: EventLine = match serde_json::from_str(&text) {
            Ok(event) => event,
            Err(_) if !complete => break,
            Err(err) => {
                // A report's line given as events: said as such.
                let kind = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned));
                let why = match kind.as_deref() {
                    Some(kind @ ("run" | "job" | "summary")) => format!(
                        "not a lanes events file: this line is a report's `{kind}` record: it \
                         is a report (give it as the report, before --events)"
                    ),
                    _ => format!("not an event of a lanes events file: {err}"),
                };
                return Err(bad(number, why));
            }
        };
        if !matches!(
            event.kind.as_str(),
            "queued" | "waiting" | "started" | "ended" | "stopped" | "continued"
        ) {
            return Err(bad(number, format!("unknown event type {:?}", event.kind)));
        }
        let at =
            parse_ms(&event.at).ok_or_else(|| bad(number, format!("bad time {:?}", event.at)))?;
        if at < origin - SLACK_MS {
            return Err(bad(
                number,
                format!(
                    "an events file from another run: this event ({}) is from before the \
                     report's run started ({})",
                    event.at, first.figures.started_at
                ),
            ));
        }
        if let Some(end) = first.end.filter(|&end| at > end + SLACK_MS) {
            return Err(bad(
                number,
                format!(
                    "an events file from another run: this event ({}) is from after the \
                     report's run ended ({} ms after its start)",
                    event.at,
                    end - origin
                ),
            ));
        }
        // A slot above the report's `max_concurrent` is a server's whose cap was raised.
        if event.slot == Some(0) {
            return Err(bad(number, "slot 0: slots start at 1".to_owned()));
        }
        let rel = (at - origin).max(0) as u64;
        last_at = last_at.max(rel);
        if let Some((recorded_key, tries)) = first.recorded.get(&event.seq) {
            if event.kind == "started" {
                let attempt = event.attempt.unwrap_or(1);
                match tries.iter().find(|(a, _, _)| *a == attempt) {
                    // The event and the record take a try's start from the same tick.
                    Some((_, _, Some(started))) if *started != at => {
                        return Err(bad(
                            number,
                            format!(
                                "an events file from another run: job {} try {attempt} \
                                 started at {} here, {} ms {} it did in the report",
                                event.seq,
                                event.at,
                                (at - started).abs(),
                                if at > *started { "after" } else { "before" }
                            ),
                        ))
                    }
                    Some((_, slot, _)) if event.slot.is_none() || *slot == event.slot => {}
                    Some((_, slot, _)) => {
                        return Err(bad(
                            number,
                            format!(
                                "an events file from another run: job {} try {attempt} \
                                 started in slot {} here but in slot {} in the report",
                                event.seq,
                                event.slot.unwrap_or(0),
                                slot.map_or_else(|| "none".to_owned(), |s| s.to_string())
                            ),
                        ))
                    }
                    None => {
                        return Err(bad(
                            number,
                            format!(
                                "an events file from another run: job {} started try \
                                 {attempt} here, which its record does not have",
                                event.seq
                            ),
                        ))
                    }
                }
            }
            if event.key.is_some() && recorded_key != &event.key {
                return Err(bad(
                    number,
                    format!(
                        "an events file from another run: job {} has key {:?} here but {:?} \
                         in the report",
                        event.seq,
                        event.key.as_deref().unwrap_or(""),
                        recorded_key.as_deref().unwrap_or("")
                    ),
                ));
            }
            continue;
        }
        if first.end.is_some() && !first.recorded_seqs.contains(event.seq) {
            // A finished run recorded every job it admitted.
            return Err(bad(
                number,
                format!(
                    "an events file from another run: job {} has events here, but the report \
                     of this finished run has no record of it",
                    event.seq
                ),
            ));
        }
        // (A run drawn aggregated keeps only the recorded seqs: its recorded jobs' events
        // come this far.)
        let unrecorded = !first.recorded_seqs.contains(event.seq);
        if unrecorded {
            match event.kind.as_str() {
                "started" => {
                    if let Some(slot) = event.slot {
                        running_in.insert(event.seq, slot);
                        slot_started.entry(slot).or_insert(rel);
                    }
                }
                "ended" => {
                    if let Some(slot) = running_in.remove(&event.seq) {
                        if let Some(start) = slot_started.remove(&slot) {
                            busy_ms += rel.saturating_sub(start);
                        }
                    }
                    if event.retry != Some(true) {
                        ended += 1;
                    }
                }
                _ => {}
            }
        }
        if !track {
            // A run drawn aggregated: only how many jobs with no record run and wait.
            if unrecorded {
                match (event.kind.as_str(), event.retry) {
                    ("queued", _) | ("ended", Some(true)) => {
                        counted.insert(event.seq, false);
                    }
                    ("started", _) => {
                        counted.insert(event.seq, true);
                    }
                    ("ended", _) => {
                        counted.remove(&event.seq);
                    }
                    _ => {}
                }
            }
            continue;
        }
        if event.kind == "queued"
            && !open.contains_key(&event.seq)
            && first.figures.jobs + open.len() as u64 >= super::model::DETAIL_LIMIT
        {
            // One job more than a page draws one by one (a report cut short early, its
            // events going on): from here on only counted, as for a run drawn aggregated.
            too_many = true;
            track = false;
            for (seq, job) in std::mem::take(&mut open) {
                if job.ended_at.is_none() {
                    counted.insert(seq, job.started_at.is_some());
                }
            }
            counted.insert(event.seq, false);
            continue;
        }
        let key = event.key.clone().unwrap_or_default();
        match event.kind.as_str() {
            "queued" => {
                open.insert(
                    event.seq,
                    InFlightJob {
                        seq: event.seq,
                        key,
                        queued_at: rel,
                        waits: Vec::new(),
                        started_at: None,
                        slot: None,
                        attempt: 0,
                        ended_at: None,
                        outcome: None,
                        reason: None,
                        earlier: Vec::new(),
                    },
                );
            }
            "waiting" => {
                if let Some(job) = open.get_mut(&event.seq) {
                    if let Some(cause) = event
                        .cause
                        .as_deref()
                        .and_then(|c| CAUSES.iter().position(|k| *k == c))
                    {
                        if let Some(start) = job.started_at.take() {
                            // A retry's wait begins: the try before it is over.
                            job.earlier.push((start, rel, job.slot.take(), job.attempt));
                            job.waits.clear();
                        }
                        job.waits.push((cause, rel));
                    }
                }
            }
            "started" => {
                if let Some(job) = open.get_mut(&event.seq) {
                    job.started_at = Some(rel);
                    job.slot = event.slot;
                    job.attempt = event.attempt.unwrap_or(1);
                }
            }
            "ended" => {
                if event.retry == Some(true) {
                    if let Some(job) = open.get_mut(&event.seq) {
                        if let Some(start) = job.started_at.take() {
                            job.earlier.push((start, rel, job.slot.take(), job.attempt));
                        }
                        job.slot = None;
                        job.waits.clear();
                        job.queued_at = rel;
                    }
                } else if let Some(job) = open.get_mut(&event.seq) {
                    job.ended_at = Some(rel);
                    job.outcome = event.outcome.clone();
                    job.reason = event.reason.clone();
                }
            }
            _ => {}
        }
    }
    busy_ms += slot_started
        .values()
        .map(|start| last_at.saturating_sub(*start))
        .sum::<u64>();
    let (running, waiting) = if track {
        let live = || open.values().filter(|j| j.ended_at.is_none());
        let running = live().filter(|j| j.started_at.is_some()).count() as u64;
        (running, live().count() as u64 - running)
    } else {
        let running = counted.values().filter(|&&r| r).count() as u64;
        (running, counted.len() as u64 - running)
    };
    Ok(InFlight {
        jobs: open.into_values().collect(),
        running,
        waiting,
        ended,
        busy_ms,
        last_at,
        too_many,
    })
}
