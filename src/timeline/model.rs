//! What a timeline shows, read from a report in two passes of bounded memory: the run's
//! [`Figures`] (first pass: per key a few numbers, under a hash of the key), then either every
//! job's bars ([`Detail`], for a run of at most [`DETAIL_LIMIT`] jobs) or per-key and
//! per-slot totals by time bucket ([`Aggregate`]) for larger runs.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::path::Path;

use serde::Serialize;

use super::events::InFlight;
use super::report::{parse_ms, JobLine, Line, ReadError, ReportReader, SLACK_MS};
use crate::output::framing::escape_controls;

/// Runs of at most this many jobs are drawn job by job; larger ones are aggregated.
pub(crate) const DETAIL_LIMIT: u64 = 5_000;
/// An aggregated timeline has a row for each of this many keys (the busiest), and one for
/// the others.
pub(crate) const AGGREGATE_KEYS: usize = 40;
/// An aggregated timeline has at most this many slot rows (slots beyond are grouped).
pub(crate) const AGGREGATE_SLOTS: u32 = 64;
/// An aggregated timeline cuts the run into this many time buckets.
pub(crate) const BUCKETS: usize = 400;
/// How many of the slowest keys and longest waits the figures list.
const TOP: usize = 5;

/// The outcome classes bars are coloured by.
pub(crate) const OUTCOMES: [&str; 6] = [
    "succeeded",
    "failed",
    "interrupted",
    "rejected",
    "skipped",
    "running",
];

/// The wait causes, in the order of the schema.
pub(crate) const CAUSES: [&str; 7] = crate::core::WaitCause::NAMES;

fn outcome_index(outcome: &str) -> usize {
    OUTCOMES.iter().position(|o| *o == outcome).unwrap_or(2)
}

fn cause_index(cause: &str) -> Option<usize> {
    CAUSES.iter().position(|c| *c == cause)
}

/// A key's hash, by which per-key figures are kept in bounded memory (64 bits: among a million
/// keys, the chance that two collide, and are counted as one, is about 3 in 100 million).
pub(crate) fn key_hash(key: Option<&str>) -> u64 {
    let mut hasher = DefaultHasher::new();
    key.hash(&mut hasher);
    hasher.finish()
}

/// The label of a key's row: the key as it is, or [`NO_KEY`]; a key
/// [`shown_quoted`](crate::report::shown_quoted) is written as a JSON string, so that no two
/// rows look alike.
pub(crate) fn key_label(key: Option<&str>) -> String {
    use crate::report::{shown_quoted, NO_KEY};
    match key {
        None => NO_KEY.to_owned(),
        Some(key) if shown_quoted(key) => {
            serde_json::to_string(key).unwrap_or_else(|_| key.to_owned())
        }
        Some(key) => key.to_owned(),
    }
}

/// One key among the slowest: its chain (first wait or start to last end) is its critical
/// path, since a key's jobs run one after another.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct KeyFigure {
    /// The key.
    pub key: String,
    /// From its first job's admission to its last job's end, in ms.
    pub chain_ms: u64,
    /// Its jobs' running time, in ms.
    pub busy_ms: u64,
    /// Its jobs' waiting time, in ms.
    pub wait_ms: u64,
    /// Its jobs.
    pub jobs: u64,
}

/// One of the longest waits.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WaitFigure {
    /// The job.
    pub seq: u64,
    /// Its key.
    pub key: String,
    /// Its whole wait, in ms.
    pub wait_ms: u64,
    /// The cause it waited for longest.
    pub cause: String,
    /// For `key_busy`: the job it waited behind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub behind: Option<u64>,
}

/// The run's figures, for the header.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Figures {
    /// The report file, as given.
    pub report: String,
    /// The run's start (RFC 3339).
    pub started_at: String,
    /// `-j`.
    pub max_concurrent: u64,
    /// Wall time, in ms: the summary's, or to the last end seen.
    pub wall_ms: u64,
    /// Whether the report has its summary (the run finished).
    pub finished: bool,
    /// The summary's exit status, when it has one.
    pub exit_code: Option<i64>,
    /// Job records.
    pub jobs: u64,
    /// Jobs by outcome.
    pub outcomes: BTreeMap<String, u64>,
    /// Distinct keys.
    pub keys: u64,
    /// Running time of every try, in ms.
    pub busy_ms: u64,
    /// busy / (wall × the cap), 0 to 1; the cap is the larger of `max_concurrent` and the
    /// largest slot seen (`lanes set -j` raises a server's cap while it runs).
    pub utilisation: f64,
    /// Waiting time by cause, in ms.
    pub waits: BTreeMap<String, u64>,
    /// The slowest keys.
    pub slowest_keys: Vec<KeyFigure>,
    /// The longest waits.
    pub longest_waits: Vec<WaitFigure>,
    /// Retried tries.
    pub retries: u64,
    /// Jobs superseded.
    pub superseded: u64,
    /// The largest slot seen.
    pub slots: u32,
    /// Jobs with no record yet that were running at the events file's end.
    pub running: u64,
    /// Jobs with no record yet that were waiting at the events file's end.
    pub waiting: u64,
    /// Jobs with no record yet that had ended by their events.
    pub ended: u64,
}

impl Figures {
    /// The jobs drawn: `N jobs`, and how many of them have no record yet (known from the
    /// events alone), when some have none.
    pub(crate) fn jobs_text(&self) -> String {
        let unrecorded = self.running + self.waiting + self.ended;
        let all = crate::plural::plural(self.jobs + unrecorded, "job");
        if unrecorded == 0 {
            all
        } else {
            format!("{all}, {unrecorded} of them with no record yet")
        }
    }

    /// How the run ended, for the header: `finished`, with its exit status when it was not 0
    /// (and the signal that stopped lanes, for 128+N); or that it had not finished.
    pub(crate) fn end_text(&self) -> String {
        if !self.finished {
            return "not finished (no summary: interrupted, or still being written)".to_owned();
        }
        let Some(code) = self.exit_code.filter(|&code| code != 0) else {
            return "finished".to_owned();
        };
        // 128+N: lanes was stopped by signal N (one the system names).
        let signal = (code > 128)
            .then(|| i32::try_from(code - 128).ok())
            .flatten()
            .and_then(|n| nix::sys::signal::Signal::try_from(n).ok());
        match signal {
            Some(signal) => format!(
                "finished: stopped by {}, exit status {code}",
                signal.as_str()
            ),
            None => format!("finished: exit status {code}"),
        }
    }

    /// The cap as the header tells it: `-j 4`, or for a server whose cap was raised while it
    /// ran (`lanes set -j`), `-j 1, raised to at least 6` (the largest slot seen).
    pub(crate) fn cap_text(&self) -> String {
        let seen = u64::from(self.slots);
        if seen > self.max_concurrent {
            format!("-j {}, raised to at least {seen}", self.max_concurrent)
        } else {
            format!("-j {}", self.max_concurrent)
        }
    }

    /// The jobs with no record yet, from the events file: `3 running, 2926 waiting`, and
    /// `, 5 ended` when some had ended by their events.
    pub(crate) fn unrecorded_text(&self) -> String {
        let mut text = format!("{} running, {} waiting", self.running, self.waiting);
        if self.ended > 0 {
            text.push_str(&format!(", {} ended", self.ended));
        }
        text
    }

    /// Sets `utilisation` from `busy_ms`, `wall_ms` and the cap.
    fn set_utilisation(&mut self) {
        let capacity = self.wall_ms as f64 * self.max_concurrent.max(u64::from(self.slots)) as f64;
        self.utilisation = if capacity > 0.0 {
            (self.busy_ms as f64 / capacity).min(1.0)
        } else {
            0.0
        };
    }
}

/// What the first pass keeps of a key: 24 bytes (a million distinct keys cost about 60 MB
/// with the table's own overhead). Times in ms from the run's start: a server's run may last
/// months.
#[derive(Debug, Clone, Copy)]
struct KeyAcc {
    busy: u64,
    first: u64,
    last: u64,
}

/// What the second pass counts of the slowest keys: jobs, and waiting time in ms.
type SlowCounts = HashMap<u64, (u64, u64)>;

/// A job's intervals relative to the run's start, in ms.
pub(crate) struct Spans {
    /// Its tries that started: (start, end, outcome index, slot, attempt, retried).
    pub tries: Vec<(u64, u64, usize, u32, u32, bool)>,
    /// Its waits: (start, end, cause index).
    pub waits: Vec<(u64, u64, usize)>,
    /// When its record was decided.
    pub ended: u64,
}

/// A job's intervals.
pub(crate) fn spans(job: &JobLine<'_>, origin: i64) -> Spans {
    let rel = |text: &str| parse_ms(text).map_or(0, |ms| (ms - origin).max(0) as u64);
    let last = job.tries.len();
    let tries = job
        .tries
        .iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let start = rel(t.started_at.as_deref()?);
            let end = rel(&t.ended_at).max(start);
            Some((
                start,
                end,
                outcome_index(&t.outcome),
                t.slot.unwrap_or(0),
                t.attempt,
                i + 1 < last,
            ))
        })
        .collect();
    let waits = job
        .waits
        .iter()
        .filter_map(|w| {
            let start = rel(&w.started_at);
            Some((start, start + w.ms, cause_index(&w.cause)?))
        })
        .collect();
    Spans {
        tries,
        waits,
        ended: rel(&job.ended_at),
    }
}

/// The most a job's wait is drawn longer than recorded, to meet its try's bar.
const SPAWN_GAP_MS: u64 = 1_000;

/// A job's waits as drawn: the last one reaching the start of the try it preceded. A wait
/// ends when lanes begins starting the job, and the try's `started_at` is taken once its
/// process is running, a few ms later; the drawing closes that gap (of at most
/// [`SPAWN_GAP_MS`]) so that no wait seems to end before its job starts. The figures keep
/// the recorded waits.
pub(crate) fn drawn_waits(spans: &Spans) -> Vec<(u64, u64, usize)> {
    let mut waits = spans.waits.clone();
    let last_end = waits.iter().map(|w| w.1).max();
    if let (Some(last_end), Some(try_start)) = (last_end, spans.tries.last().map(|t| t.0)) {
        if try_start >= last_end && try_start - last_end <= SPAWN_GAP_MS {
            for wait in waits.iter_mut().filter(|w| w.1 == last_end) {
                wait.1 = try_start;
            }
        }
    }
    waits
}

/// A try that started, as its record tells: (attempt, slot, start in ms since the epoch).
pub(crate) type TryStart = (u32, Option<u32>, Option<i64>);

/// The first pass: the figures, and the hashes of the busiest keys.
pub(crate) struct FirstPass {
    /// The figures (the names of the slowest keys are filled in by the second pass).
    pub figures: Figures,
    keys: HashMap<u64, KeyAcc>,
    slow: Vec<(u64, u64)>,
    /// The key of each job that has a record, and the (attempt, slot) of each of its tries
    /// that started (of a run drawn job by job; else of its first jobs only).
    pub recorded: HashMap<u64, (Option<String>, Vec<TryStart>)>,
    /// The report's start, ms since the epoch.
    pub origin: i64,
    /// The run's end, ms since the epoch, when the report has its summary.
    pub end: Option<i64>,
    /// How many bytes of the report this pass read: a later pass reads no further, so that a
    /// report still being written is drawn as one reading of it.
    pub length: u64,
    /// The seqs of every record (of a run drawn aggregated too, where `recorded` holds only
    /// its first jobs).
    pub recorded_seqs: super::report::SeqSet,
}

impl FirstPass {
    /// Reads the whole report once.
    pub(crate) fn read(path: &Path) -> Result<Self, ReadError> {
        let mut reader = ReportReader::open(path)?;
        let origin = reader.origin_ms;
        let mut figures = Figures {
            report: path.display().to_string(),
            started_at: reader.run.started_at.clone(),
            max_concurrent: reader.run.max_concurrent.max(1),
            wall_ms: 0,
            finished: false,
            exit_code: None,
            jobs: 0,
            outcomes: BTreeMap::new(),
            keys: 0,
            busy_ms: 0,
            utilisation: 0.0,
            waits: BTreeMap::new(),
            slowest_keys: Vec::new(),
            longest_waits: Vec::new(),
            retries: 0,
            superseded: 0,
            slots: 0,
            running: 0,
            waiting: 0,
            ended: 0,
        };
        let mut keys: HashMap<u64, KeyAcc> = HashMap::new();
        let mut longest: Vec<WaitFigure> = Vec::new();
        let mut recorded = HashMap::new();
        let mut last_end = 0u64;
        // The record that ends last: its line and seq.
        let mut last_record = (0, 0);
        let mut summary = None;
        let mut text = String::new();
        while let Some((number, line)) = reader.next(false, &mut text)? {
            let job = match line {
                Line::Summary {
                    duration_ms,
                    exit_code,
                } => {
                    summary = Some(duration_ms);
                    figures.exit_code = exit_code;
                    continue;
                }
                Line::Job(job, _) => job,
            };
            figures.jobs += 1;
            if figures.jobs <= DETAIL_LIMIT + 1 {
                let tries = job
                    .tries
                    .iter()
                    .filter(|t| t.started_at.is_some())
                    .map(|t| {
                        let at = t.started_at.as_deref().and_then(super::report::parse_ms);
                        (t.attempt, t.slot, at)
                    })
                    .collect();
                recorded.insert(job.seq, (job.key.as_deref().map(str::to_owned), tries));
            }
            match figures.outcomes.get_mut(&*job.outcome) {
                Some(count) => *count += 1,
                None => {
                    figures.outcomes.insert(job.outcome.to_string(), 1);
                }
            }
            figures.superseded += u64::from(job.superseded_by.is_some());
            let spans = spans(&job, origin);
            let ends = spans
                .tries
                .iter()
                .map(|t| t.1)
                .chain(spans.waits.iter().map(|w| w.1))
                .fold(spans.ended, u64::max);
            if ends > last_end {
                (last_end, last_record) = (ends, (number, job.seq));
            }
            let acc = keys.entry(key_hash(job.key.as_deref())).or_insert(KeyAcc {
                busy: 0,
                first: u64::MAX,
                last: 0,
            });
            let own = job.holds_its_slot();
            // A job of weight W held W units of -j while it ran.
            let weight = job.weight.unwrap_or(1).max(1);
            for &(start, end, _, slot, _, retried) in &spans.tries {
                if own {
                    figures.busy_ms += (end - start).saturating_mul(weight);
                    acc.busy += end - start;
                }
                acc.first = acc.first.min(start);
                acc.last = acc.last.max(end);
                figures.slots = figures.slots.max(slot);
                figures.retries += u64::from(retried);
            }
            for &(start, end, cause) in &spans.waits {
                *figures.waits.entry(CAUSES[cause].to_owned()).or_default() += end - start;
                acc.first = acc.first.min(start);
                // A job that never started ends its key's chain where its wait ended.
                acc.last = acc.last.max(end);
            }
            let wait_ms = job.wait_ms.unwrap_or(0);
            if wait_ms > 0
                && (longest.len() < TOP || longest.last().is_some_and(|w| w.wait_ms < wait_ms))
            {
                let main = job.waits.iter().max_by_key(|w| w.ms);
                longest.push(WaitFigure {
                    seq: job.seq,
                    key: key_label(job.key.as_deref()),
                    wait_ms,
                    // A resource wait names its resource, as the record does.
                    cause: main.map_or_else(
                        || "unknown".to_owned(),
                        |w| match w.resource.as_deref() {
                            Some(name) => format!("{} ({})", w.cause, escape_controls(name)),
                            None => w.cause.to_string(),
                        },
                    ),
                    behind: main.and_then(|w| w.behind),
                });
                longest.sort_by(|a, b| b.wait_ms.cmp(&a.wait_ms).then(a.seq.cmp(&b.seq)));
                longest.truncate(TOP);
            }
        }
        if let Some(duration) = summary.filter(|&ms| last_end > ms + SLACK_MS as u64) {
            let (line, seq) = last_record;
            return Err(ReadError::Bad {
                path: path.to_path_buf(),
                line,
                why: format!(
                    "the record of seq {seq} ends {} ms after the run's end (the summary's \
                     duration_ms {duration})",
                    last_end - duration
                ),
            });
        }
        figures.finished = summary.is_some();
        figures.wall_ms = summary.unwrap_or(last_end).max(last_end);
        // Lines refused before they had a key share the `(no key)` row, and are no key.
        figures.keys = keys.len() as u64 - u64::from(keys.contains_key(&key_hash(None)));
        figures.longest_waits = longest;
        figures.set_utilisation();
        let mut slow: Vec<(u64, u64)> = keys
            .iter()
            .filter(|(_, acc)| acc.last >= acc.first)
            .map(|(&hash, acc)| (hash, acc.last - acc.first))
            .collect();
        slow.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        slow.truncate(TOP);
        Ok(FirstPass {
            figures,
            keys,
            slow,
            recorded,
            origin,
            end: summary.map(|ms| origin + ms as i64),
            length: reader.consumed(),
            recorded_seqs: reader.take_seen(),
        })
    }

    /// Whether the run is drawn job by job.
    pub(crate) fn detailed(&self) -> bool {
        self.figures.jobs <= DETAIL_LIMIT
    }

    /// The hashes of the busiest keys, busiest first, for an aggregated timeline's rows.
    fn busiest(&self, count: usize) -> Vec<u64> {
        let mut all: Vec<(u64, u64)> = self.keys.iter().map(|(&h, a)| (h, a.busy)).collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        all.into_iter().take(count).map(|(h, _)| h).collect()
    }

    /// Fills in the slowest keys once their names are known.
    fn name_slowest(&mut self, names: &HashMap<u64, String>, counts: &SlowCounts) {
        self.figures.slowest_keys = self
            .slow
            .iter()
            .filter_map(|&(hash, chain)| {
                let acc = self.keys.get(&hash)?;
                let &(jobs, wait_ms) = counts.get(&hash)?;
                Some(KeyFigure {
                    key: names.get(&hash)?.clone(),
                    chain_ms: chain,
                    busy_ms: acc.busy,
                    wait_ms,
                    jobs,
                })
            })
            .collect();
    }
}

/// A row of a timeline.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    /// What it shows: `key`, `keys` (the others, aggregated), `slot`.
    pub kind: &'static str,
    /// Its label (a key as given: the page shows it as text).
    pub label: String,
}

/// A bar of a detailed timeline: `[row, start, end, kind, class, job, attempt]`, times in ms
/// from the run's start; kind 0 a try, 1 a wait (class: the cause), 2 a mark (a job that
/// never ran: rejected, skipped, superseded while waiting); class: the outcome (for a try:
/// + 10 when it was retried, + 20 when superseded). `job` indexes the records.
pub(crate) type Bar = (u32, u64, u64, u8, u8, u32, u32);

/// Every job's bars.
#[derive(Debug, Serialize)]
pub(crate) struct Detail {
    /// Key rows, then slot rows.
    pub rows: Vec<Row>,
    /// The bars.
    pub bars: Vec<Bar>,
    /// The records, as in the report (the hover details).
    pub jobs: Vec<serde_json::Value>,
}

/// An aggregated cell: `[row, bucket, kind, class, ms]`: kind 0 running time of outcome
/// `class`, kind 1 waiting time for cause `class`.
pub(crate) type Cell = (u32, u32, u8, u8, u64);

/// Per-row, per-bucket totals.
#[derive(Debug, Serialize)]
pub(crate) struct Aggregate {
    /// The busiest keys, the others, then slots (or groups of slots).
    pub rows: Vec<Row>,
    /// How many slots (or keys: `-j` for the others) each row's time is shared by.
    pub capacity: Vec<u64>,
    /// The width of a bucket, in ms.
    pub bucket_ms: u64,
    /// The non-empty cells.
    pub cells: Vec<Cell>,
}

/// The timeline's body.
#[derive(Debug, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub(crate) enum Body {
    /// Every job.
    Detail(Detail),
    /// Totals.
    Aggregate(Aggregate),
}

/// Everything a timeline draws.
#[derive(Debug, Serialize)]
pub(crate) struct Timeline {
    /// The header.
    pub figures: Figures,
    /// The rows and bars.
    pub body: Body,
}

/// Reads `path` twice and builds its timeline; `events`, when given, adds the jobs that have
/// no record yet (a detailed timeline) and is checked to belong to the same run.
pub(crate) fn build(path: &Path, events: Option<&Path>) -> Result<Timeline, ReadError> {
    let mut first = FirstPass::read(path)?;
    let in_flight = match events {
        Some(events) => Some(super::events::read(events, &first)?),
        None => None,
    };
    if let Some(in_flight) = &in_flight {
        // The time axis (and an aggregated run's buckets) reaches the last event.
        first.figures.wall_ms = first.figures.wall_ms.max(in_flight.last_at);
    }
    let body = if first.detailed() && !in_flight.as_ref().is_some_and(|f| f.too_many) {
        detail(path, &mut first, in_flight.as_ref())?
    } else {
        aggregate(path, &mut first)?
    };
    if let Some(in_flight) = &in_flight {
        // The jobs with no record count as the records do: the run's wall time reaches the
        // last event, and their running time is busy time.
        first.figures.running = in_flight.running;
        first.figures.waiting = in_flight.waiting;
        first.figures.ended = in_flight.ended;
        first.figures.wall_ms = first.figures.wall_ms.max(in_flight.last_at);
        first.figures.busy_ms += in_flight.busy_ms;
        first.figures.set_utilisation();
    }
    Ok(Timeline {
        figures: first.figures,
        body,
    })
}

fn detail(
    path: &Path,
    first: &mut FirstPass,
    in_flight: Option<&InFlight>,
) -> Result<Body, ReadError> {
    let mut reader = ReportReader::open_upto(path, first.length)?;
    let origin = first.origin;
    let mut jobs: Vec<(JobLine<'static>, serde_json::Value)> = Vec::new();
    let mut text = String::new();
    while let Some((_, line)) = reader.next(true, &mut text)? {
        if let Line::Job(job, raw) = line {
            jobs.push((job.into_owned(), raw));
        }
    }
    // Keys in the order their first job began (waiting or running).
    let mut first_seen: HashMap<Option<String>, u64> = HashMap::new();
    let mut all_spans = Vec::with_capacity(jobs.len());
    for (job, _) in &jobs {
        let spans = spans(job, origin);
        let begin = spans
            .waits
            .iter()
            .map(|w| w.0)
            .chain(spans.tries.iter().map(|t| t.0))
            .min()
            .unwrap_or(spans.ended);
        let entry = first_seen
            .entry(job.key.as_deref().map(str::to_owned))
            .or_insert(u64::MAX);
        *entry = (*entry).min(begin);
        all_spans.push(spans);
    }
    if let Some(in_flight) = in_flight {
        for job in &in_flight.jobs {
            let entry = first_seen.entry(Some(job.key.clone())).or_insert(u64::MAX);
            *entry = (*entry).min(job.queued_at);
        }
    }
    let mut keys: Vec<(Option<String>, u64)> = first_seen.into_iter().collect();
    keys.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    let row_of: HashMap<Option<String>, u32> = keys
        .iter()
        .enumerate()
        .map(|(i, (key, _))| (key.clone(), i as u32))
        .collect();
    let mut rows: Vec<Row> = keys
        .iter()
        .map(|(key, _)| Row {
            kind: "key",
            label: key_label(key.as_deref()),
        })
        .collect();
    // One row per slot some try used (a run's slots are its smallest free ones, but a row
    // for every slot up to the largest would let one record size the page).
    let used: std::collections::BTreeSet<u32> = all_spans
        .iter()
        .flat_map(|spans| spans.tries.iter().map(|t| t.3))
        .chain(
            in_flight
                .into_iter()
                .flat_map(|f| f.jobs.iter())
                .flat_map(|j| {
                    j.slot
                        .into_iter()
                        .chain(j.earlier.iter().filter_map(|e| e.2))
                }),
        )
        .filter(|&slot| slot >= 1)
        .collect();
    first.figures.slots = first.figures.slots.max(used.last().copied().unwrap_or(0));
    let slot_row: HashMap<u32, u32> = used
        .iter()
        .enumerate()
        .map(|(i, &slot)| (slot, rows.len() as u32 + i as u32))
        .collect();
    rows.extend(used.iter().map(|slot| Row {
        kind: "slot",
        label: format!("slot {slot}"),
    }));
    let mut bars: Vec<Bar> = Vec::new();
    let mut names = HashMap::new();
    let mut counts = SlowCounts::new();
    for (index, ((job, _), spans)) in jobs.iter().zip(&all_spans).enumerate() {
        let hash = key_hash(job.key.as_deref());
        names.insert(hash, key_label(job.key.as_deref()));
        let count = counts.entry(hash).or_default();
        count.0 += 1;
        count.1 += job.waits.iter().map(|w| w.ms).sum::<u64>();
        let row = row_of[&job.key.as_deref().map(str::to_owned)];
        let index = index as u32;
        let superseded = job.reason.as_deref() == Some("superseded");
        for (start, end, cause) in drawn_waits(spans) {
            bars.push((row, start, end, 1, cause as u8, index, 0));
        }
        for &(start, end, outcome, slot, attempt, retried) in &spans.tries {
            let class = outcome as u8
                + if retried {
                    10
                } else if superseded {
                    20
                } else {
                    0
                };
            bars.push((row, start, end, 0, class, index, attempt));
            if slot >= 1 {
                bars.push((slot_row[&slot], start, end, 0, class, index, attempt));
            }
        }
        if spans.tries.is_empty() {
            let outcome = outcome_index(&job.outcome) as u8 + if superseded { 20 } else { 0 };
            bars.push((row, spans.ended, spans.ended, 2, outcome, index, 0));
        }
    }
    let mut records: Vec<serde_json::Value> = jobs.into_iter().map(|(_, raw)| raw).collect();
    if let Some(in_flight) = in_flight {
        let now = in_flight.last_at;
        for job in &in_flight.jobs {
            let row = row_of[&Some(job.key.clone())];
            let index = records.len() as u32;
            // Ended while it waited for a retry: its last try was its last, and the wait after
            // it is drawn no more than its record would tell it.
            let ended_waiting = job.ended_at.is_some() && job.started_at.is_none();
            let waits: &[(usize, u64)] = if ended_waiting && !job.earlier.is_empty() {
                &[]
            } else {
                &job.waits
            };
            for (i, (cause, since)) in waits.iter().enumerate() {
                let until = waits
                    .get(i + 1)
                    .map(|w| w.1)
                    .or(job.started_at)
                    .or(job.ended_at)
                    .unwrap_or(now);
                if until > *since {
                    bars.push((row, *since, until, 1, *cause as u8, index, 0));
                }
            }
            // Its earlier tries, each retried (drawn as a record's retried tries are), but
            // the last of a job that ended while it waited for its retry: its last try.
            for (i, &(start, end, slot, attempt)) in job.earlier.iter().enumerate() {
                let last = ended_waiting && i + 1 == job.earlier.len();
                let class = outcome_index("failed") as u8 + if last { 0 } else { 10 };
                bars.push((row, start, end, 0, class, index, attempt));
                if let Some(slot) = slot {
                    bars.push((slot_row[&slot], start, end, 0, class, index, attempt));
                }
            }
            if let (Some(start), Some(slot)) = (job.started_at, job.slot) {
                // A job whose events say it ended, with no record, is drawn to its end, in
                // the colour of the outcome its `ended` event told.
                let end = job.ended_at.unwrap_or(now);
                let class = match (&job.ended_at, &job.outcome) {
                    (Some(_), Some(outcome)) => outcome_index(outcome),
                    _ => outcome_index("running"),
                } as u8;
                bars.push((row, start, end, 0, class, index, job.attempt));
                bars.push((slot_row[&slot], start, end, 0, class, index, job.attempt));
            }
            records.push(job.record());
        }
    }
    first.name_slowest(&names, &counts);
    Ok(Body::Detail(Detail {
        rows,
        bars,
        jobs: records,
    }))
}

fn aggregate(path: &Path, first: &mut FirstPass) -> Result<Body, ReadError> {
    let busiest = first.busiest(AGGREGATE_KEYS);
    let row_of: HashMap<u64, u32> = busiest
        .iter()
        .enumerate()
        .map(|(i, &h)| (h, i as u32))
        .collect();
    let slow: HashSet<u64> = first.slow.iter().map(|&(h, _)| h).collect();
    let mut counts = SlowCounts::new();
    let others = busiest.len() as u32;
    let has_others = first.keys.len() > busiest.len();
    let slot_base = others + u32::from(has_others);
    let slots = first.figures.slots.max(1);
    let per_slot_row = slots.div_ceil(AGGREGATE_SLOTS);
    let slot_rows = slots.div_ceil(per_slot_row);
    let bucket_ms = first.figures.wall_ms.div_ceil(BUCKETS as u64).max(1);
    // Running ms by outcome and waiting ms by cause, per row and bucket.
    let row_count = (slot_base + slot_rows) as usize;
    let mut busy = Grid::new(row_count, OUTCOMES.len(), bucket_ms);
    let mut waiting = Grid::new(row_count, CAUSES.len(), bucket_ms);
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut reader = ReportReader::open_upto(path, first.length)?;
    let origin = first.origin;
    let mut text = String::new();
    while let Some((_, line)) = reader.next(false, &mut text)? {
        let Line::Job(job, _) = line else { continue };
        let hash = key_hash(job.key.as_deref());
        if (row_of.contains_key(&hash) || slow.contains(&hash)) && !names.contains_key(&hash) {
            names.insert(hash, key_label(job.key.as_deref()));
        }
        if slow.contains(&hash) {
            let count = counts.entry(hash).or_default();
            count.0 += 1;
            count.1 += job.waits.iter().map(|w| w.ms).sum::<u64>();
        }
        let row = row_of
            .get(&hash)
            .copied()
            .unwrap_or(others)
            .min(slot_base.saturating_sub(1)) as usize;
        let spans = spans(&job, origin);
        // A batch's run is counted once, by its first job.
        let tries: &[_] = if job.holds_its_slot() {
            &spans.tries
        } else {
            &[]
        };
        for &(start, end, outcome, slot, _, _) in tries {
            busy.add(row, outcome, start, end);
            if slot >= 1 {
                let srow = (slot_base + (slot - 1) / per_slot_row) as usize;
                busy.add(srow, outcome, start, end);
            }
        }
        for &(start, end, cause) in &spans.waits {
            waiting.add(row, cause, start, end);
        }
    }
    let mut rows: Vec<Row> = busiest
        .iter()
        .map(|h| Row {
            kind: "key",
            label: names.get(h).cloned().unwrap_or_default(),
        })
        .collect();
    let mut capacity = vec![1u64; rows.len()];
    if has_others {
        rows.push(Row {
            kind: "keys",
            label: format!("{} other keys", first.keys.len() - busiest.len()),
        });
        capacity.push(first.figures.max_concurrent);
    }
    for group in 0..slot_rows {
        let low = group * per_slot_row + 1;
        let high = ((group + 1) * per_slot_row).min(slots);
        rows.push(Row {
            kind: "slot",
            label: if low == high {
                format!("slot {low}")
            } else {
                format!("slots {low}-{high}")
            },
        });
        capacity.push(u64::from(high - low + 1));
    }
    let (busy, waiting) = (busy.finish(), waiting.finish());
    let mut cells: Vec<Cell> = Vec::new();
    for row in 0..row_count {
        for bucket in 0..BUCKETS {
            for (class, &ms) in busy.cell(row, bucket).iter().enumerate() {
                if ms > 0 {
                    cells.push((row as u32, bucket as u32, 0, class as u8, ms));
                }
            }
            for (class, &ms) in waiting.cell(row, bucket).iter().enumerate() {
                if ms > 0 {
                    cells.push((row as u32, bucket as u32, 1, class as u8, ms));
                }
            }
        }
    }
    first.name_slowest(&names, &counts);
    Ok(Body::Aggregate(Aggregate {
        rows,
        capacity,
        bucket_ms,
        cells,
    }))
}

/// Time per row, bucket and class (an outcome, or a cause), an interval added in constant
/// time however many buckets it covers: the partial buckets at its ends directly, the whole
/// ones between as a difference array summed up by [`Grid::finish`].
struct Grid {
    bucket_ms: u64,
    classes: usize,
    /// ms, by (row, bucket, class).
    sums: Vec<u64>,
    /// Whole buckets covered: +1 where a run of them starts, -1 past its end, by (row,
    /// bucket, class), with one bucket more per row.
    whole: Vec<i64>,
}

impl Grid {
    fn new(rows: usize, classes: usize, bucket_ms: u64) -> Self {
        Grid {
            bucket_ms,
            classes,
            sums: vec![0; rows * BUCKETS * classes],
            whole: vec![0; rows * (BUCKETS + 1) * classes],
        }
    }

    fn at(&self, row: usize, bucket: u64, class: usize) -> usize {
        (row * BUCKETS + bucket as usize) * self.classes + class
    }

    fn whole_at(&self, row: usize, bucket: u64, class: usize) -> usize {
        (row * (BUCKETS + 1) + bucket as usize) * self.classes + class
    }

    /// Adds the interval from `start` to `end` (ms) to `row`'s `class`; time past the last
    /// bucket counts in it.
    fn add(&mut self, row: usize, class: usize, start: u64, end: u64) {
        if end <= start {
            return;
        }
        let last = BUCKETS as u64 - 1;
        let first_bucket = (start / self.bucket_ms).min(last);
        let last_bucket = ((end - 1) / self.bucket_ms).min(last);
        if first_bucket == last_bucket {
            let at = self.at(row, first_bucket, class);
            self.sums[at] += end - start;
            return;
        }
        let at = self.at(row, first_bucket, class);
        self.sums[at] += (first_bucket + 1) * self.bucket_ms - start;
        let at = self.at(row, last_bucket, class);
        self.sums[at] += end - last_bucket * self.bucket_ms;
        if last_bucket > first_bucket + 1 {
            let from = self.whole_at(row, first_bucket + 1, class);
            let to = self.whole_at(row, last_bucket, class);
            self.whole[from] += 1;
            self.whole[to] -= 1;
        }
    }

    /// The totals.
    fn finish(mut self) -> Self {
        let rows = self.sums.len() / (BUCKETS * self.classes);
        for row in 0..rows {
            for class in 0..self.classes {
                let mut covering = 0i64;
                for bucket in 0..BUCKETS as u64 {
                    covering += self.whole[self.whole_at(row, bucket, class)];
                    let at = self.at(row, bucket, class);
                    self.sums[at] += covering.max(0) as u64 * self.bucket_ms;
                }
            }
        }
        self
    }

    /// A cell's totals, by class (after [`Grid::finish`]).
    fn cell(&self, row: usize, bucket: usize) -> &[u64] {
        let at = self.at(row, bucket as u64, 0);
        &self.sums[at..at + self.classes]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_two_keys_and_the_missing_key_share_a_label() {
        let labels: Vec<String> = [None, Some("(no key)"), Some("\"(no key)\""), Some("a")]
            .into_iter()
            .map(key_label)
            .collect();
        assert_eq!(labels[0], "(no key)");
        assert_eq!(labels[3], "a");
        let distinct: std::collections::HashSet<&String> = labels.iter().collect();
        assert_eq!(distinct.len(), labels.len(), "{labels:?}");
    }

    #[test]
    fn a_report_that_grows_between_the_passes_is_drawn_as_the_first_pass_read_it() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/timeline/unfinished.jsonl");
        let text = std::fs::read_to_string(fixture).unwrap();
        // Its last line is torn: the one before is the last whole record.
        let mut lines: Vec<&str> = text.lines().collect();
        lines.pop();
        let last = lines.pop().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("live.jsonl");
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        let mut first = FirstPass::read(&path).unwrap();
        let counted = first.figures.jobs;
        // The run writes one more record before the second pass.
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut file, format!("{last}\n").as_bytes()).unwrap();
        let Body::Detail(drawn) = detail(&path, &mut first, None).unwrap() else {
            panic!("a small run is drawn job by job");
        };
        assert_eq!(drawn.jobs.len() as u64, counted);
        assert_eq!(FirstPass::read(&path).unwrap().figures.jobs, counted + 1);
    }

    #[test]
    fn a_wait_is_drawn_up_to_its_tries_bar() {
        // Waited 0..7 ms (key_busy) then 7..12 ms (cap); the process started at 15 ms.
        let spans = Spans {
            tries: vec![(15, 40, 0, 1, 1, false)],
            waits: vec![(0, 7, 0), (7, 12, 1)],
            ended: 40,
        };
        assert_eq!(drawn_waits(&spans), vec![(0, 7, 0), (7, 15, 1)]);
        // A gap longer than a start takes is left as it is.
        let far = Spans {
            tries: vec![(5_000, 6_000, 0, 1, 1, false)],
            ..spans
        };
        assert_eq!(drawn_waits(&far), vec![(0, 7, 0), (7, 12, 1)]);
    }

    #[test]
    fn a_grid_adds_an_interval_to_the_buckets_it_covers() {
        let mut grid = Grid::new(2, 2, 10);
        grid.add(1, 1, 5, 37);
        grid.add(1, 1, 12, 14);
        grid.add(0, 0, 3995, 4100);
        let grid = grid.finish();
        assert_eq!(grid.cell(1, 0), [0, 5]);
        assert_eq!(grid.cell(1, 1), [0, 12]);
        assert_eq!(grid.cell(1, 2), [0, 10]);
        assert_eq!(grid.cell(1, 3), [0, 7]);
        assert_eq!(grid.cell(1, 4), [0, 0]);
        // Past the last bucket: counted in it.
        assert_eq!(grid.cell(0, BUCKETS - 1), [105, 0]);
        let total: u64 = (0..BUCKETS).map(|b| grid.cell(1, b)[1]).sum();
        assert_eq!(total, 32 + 2);
    }
}
