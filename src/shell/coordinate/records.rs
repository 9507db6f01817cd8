//! `--coordinate-records`: every job record also goes into the table `lanes_records` of the
//! fleet's database, so that a fleet has one history to query
//! (`SELECT … FROM lanes_records WHERE outcome = 'failed'`). The JSON Lines report is unchanged.
//! Records are written in order by a task with a session of its own (opened with the run's
//! check of the database, before any key's), those that came while the last were written
//! together in one statement. A statement whose session was lost, or whose connection was
//! refused or not answered within [`ANSWER_TIMEOUT`], is tried again on a new session: while
//! the run goes on, until it is written (a database restart or failover of any length loses no
//! record), unless more than [`HELD_RECORDS`] records wait behind it; once the run has ended,
//! until [`END_WINDOW`] after its end. A record given up on is said on stderr, names the job,
//! and makes the run's exit status 1, as a report file that cannot be written does; the
//! records after it are still written. A statement the server refuses is written again record
//! by record, so that a refused record is lost alone; once a statement was given up on for
//! want of the database, each later one is tried once until one is written, so that an outage
//! at the end costs the run's end one wait, not one per record.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::session::{self, error_text, Session};
use super::Shared;
use crate::report::mirror::{MirrorFeed, MirrorMessage};

/// `$4` is a JSON array of records, inserted in its order; `$5` the writer's pid. A record
/// already in (an earlier try whose commit went through, its answer lost) is left as it is:
/// each job of a run (its namespace, host, pid and start) has one row (the unique index
/// `lanes_records_once`).
const INSERT: &str = "
INSERT INTO lanes_records (namespace, host, pid, run, seq, key, outcome, reason, record)
SELECT $1, $2, $5, $3, (r->>'seq')::bigint, r->>'key', r->>'outcome', r->>'reason', r
FROM jsonb_array_elements($4::text::jsonb) WITH ORDINALITY AS records(r, n)
ORDER BY n
ON CONFLICT (namespace, host, pid, run, seq) DO NOTHING";

/// How long after the run's end a statement is still tried again, each time on a new
/// session, after its session was lost or a connection was refused (a server restarting, or
/// short of connections): the longest the run's end waits for a database out of reach.
const END_WINDOW: Duration = Duration::from_secs(30);

/// The most records that may wait behind a statement tried again while the run goes on: past
/// it, the statement is given up on, so that a database gone for good holds a bounded memory
/// (a record is a few KiB at most).
const HELD_RECORDS: usize = 10_000;

/// The pause before the first new connection after a session was lost; it doubles before each
/// next one, up to [`MAX_RECONNECT_DELAY`].
const RECONNECT_DELAY: Duration = Duration::from_millis(500);

/// The longest pause between two new connections.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(4);

/// How long a try may take (connecting included) before its session counts as lost: a server
/// that does not answer (stopped, or its host gone) would hold the run's end forever.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// The most records in one statement (a record is a few KiB at most: its stderr tail).
const STATEMENT_RECORDS: usize = 500;

/// Why a statement was not written.
struct Unwritten {
    /// The server refused it (another try would be refused too); else it could not be
    /// reached.
    refused: bool,
    /// For people: the server's error, or the last way it could not be reached.
    text: String,
    /// A try was sent and got no answer (or its session was lost before the answer): the
    /// server may have committed it, and the records may be in the table after all.
    maybe_in: bool,
}

/// The records' writer: its session, whether the database was out of reach at the last
/// statement, and the run's end.
struct Writer {
    shared: Arc<Shared>,
    session: Option<Session>,
    unreachable: bool,
    ended: Arc<OnceLock<std::time::Instant>>,
}

/// What a statement whose try failed for want of the database comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// Try it again.
    Again,
    /// Give it up: the run has ended and [`END_WINDOW`] is over, or the database was already
    /// out of reach for the last statement, or too many records wait behind it.
    GiveUp,
}

/// Whether a statement whose last try failed for want of the database is tried again after
/// `delay`, at `now`: `first_try` is when it was first tried; `ended` when the run ended, if
/// it has; `waiting` how many records are queued behind it; `unreachable` whether the last
/// statement was given up on for want of the database.
fn retry(
    first_try: Instant,
    now: Instant,
    delay: Duration,
    ended: Option<Instant>,
    waiting: usize,
    unreachable: bool,
) -> Retry {
    if unreachable || waiting > HELD_RECORDS {
        return Retry::GiveUp;
    }
    match ended {
        None => Retry::Again,
        Some(ended) if now + delay < ended.max(first_try) + END_WINDOW => Retry::Again,
        Some(_) => Retry::GiveUp,
    }
}

/// Starts the writer of `shared`'s run's job records into the database (see the module's
/// documentation).
/// `session` is the one opened with the run's check, if any.
pub(super) fn start(shared: Arc<Shared>, session: Option<Session>, feed: MirrorFeed) {
    let MirrorFeed {
        mut rx,
        lost: failed,
        ended,
        pending,
    } = feed;
    tokio::spawn(async move {
        let mut writer = Writer {
            shared,
            session,
            unreachable: false,
            ended,
        };
        let mut held: Option<MirrorMessage> = None;
        loop {
            let message = match held.take() {
                Some(message) => message,
                None => match rx.recv().await {
                    Some(message) => message,
                    None => break,
                },
            };
            let (mut seqs, mut lines) = match message {
                MirrorMessage::Flush(done) => {
                    let _ = done.send(());
                    continue;
                }
                MirrorMessage::Record(seq, line) => (vec![seq], vec![line]),
            };
            // The records that came meanwhile go with it, up to a flush (answered after them).
            while lines.len() < STATEMENT_RECORDS {
                match rx.try_recv() {
                    Ok(MirrorMessage::Record(seq, line)) => {
                        seqs.push(seq);
                        lines.push(line);
                    }
                    Ok(flush) => {
                        held = Some(flush);
                        break;
                    }
                    Err(_) => break,
                }
            }
            let lost = writer.write_all(&lines, &rx).await;
            if !lost.is_empty() {
                failed.store(true, Ordering::Relaxed);
            }
            for (line, err, maybe_in) in lost {
                if maybe_in {
                    eprintln!(
                        "lanes: --coordinate-records: the record of {} may not be in \
                         lanes_records (given up on: {err}; a try of it was sent and not \
                         answered, and is there if the server committed it)",
                        which(line)
                    );
                } else {
                    eprintln!(
                        "lanes: --coordinate-records: the record of {} was not written into \
                         lanes_records: {err}",
                        which(line)
                    );
                }
            }
            for seq in seqs {
                pending.told(seq);
            }
        }
    });
}

impl Writer {
    /// Writes `lines` in one statement, or record by record when the server refuses it; the
    /// records lost, each with why.
    /// `rx` is the queue of records behind them.
    async fn write_all<'a>(
        &mut self,
        lines: &'a [String],
        rx: &mpsc::UnboundedReceiver<MirrorMessage>,
    ) -> Vec<(&'a String, String, bool)> {
        match self.write(lines, rx).await {
            Ok(()) => Vec::new(),
            Err(Unwritten { refused: true, .. }) if lines.len() > 1 => {
                let mut lost = Vec::new();
                for line in lines {
                    if let Err(err) = self.write(std::slice::from_ref(line), rx).await {
                        lost.push((line, err.text, err.maybe_in));
                    }
                }
                lost
            }
            Err(err) => lines
                .iter()
                .map(|line| (line, err.text.clone(), err.maybe_in))
                .collect(),
        }
    }

    /// Writes `lines` in one statement on the session, opening it (again) when there is none
    /// or it was lost; `rx` is the queue behind them (see [`retry`]).
    async fn write(
        &mut self,
        lines: &[String],
        rx: &mpsc::UnboundedReceiver<MirrorMessage>,
    ) -> Result<(), Unwritten> {
        let mut last = String::new();
        let mut maybe_in = false;
        let records = format!("[{}]", lines.join(","));
        let first_try = Instant::now();
        let mut delay = RECONNECT_DELAY;
        for attempt in 0.. {
            if attempt > 0 {
                let ended = self.ended.get().map(|&at| Instant::from_std(at));
                let now = Instant::now();
                if retry(first_try, now, delay, ended, rx.len(), self.unreachable) == Retry::GiveUp
                {
                    break;
                }
            }
            if self
                .session
                .as_ref()
                .is_some_and(|open| open.client.is_closed())
            {
                self.session = None;
            }
            if self.session.is_none() {
                if attempt > 0 {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(MAX_RECONNECT_DELAY);
                }
                let (report, _) = mpsc::unbounded_channel();
                let connect = session::connect(&self.shared.params, report);
                match tokio::time::timeout(ANSWER_TIMEOUT, connect).await {
                    Ok(Ok(opened)) => self.session = Some(opened),
                    Ok(Err(err)) => {
                        last = err;
                        continue;
                    }
                    Err(_) => {
                        last = format!(
                            "{}: no answer within {} s",
                            self.shared.params,
                            ANSWER_TIMEOUT.as_secs()
                        );
                        continue;
                    }
                }
            }
            let Some(open) = self.session.as_ref() else {
                continue;
            };
            let shared = &self.shared;
            let pid = i32::try_from(shared.pid).unwrap_or(i32::MAX);
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] = [
                &shared.settings.namespace,
                &shared.settings.host_id,
                &shared.run,
                &records,
                &pid,
            ];
            let written = open.client.execute(INSERT, &params);
            let Ok(written) = tokio::time::timeout(ANSWER_TIMEOUT, written).await else {
                last = format!("no answer within {} s", ANSWER_TIMEOUT.as_secs());
                maybe_in = true;
                self.session = None;
                if attempt == 0 && !self.unreachable {
                    eprintln!(
                        "lanes: --coordinate-records: the database did not answer within {} \
                         s; connecting again",
                        ANSWER_TIMEOUT.as_secs()
                    );
                }
                continue;
            };
            match written {
                Ok(_) => {
                    self.unreachable = false;
                    return Ok(());
                }
                // The server refused the statement: another attempt would be refused too. A
                // FATAL error (a shutdown, `pg_terminate_backend`) ends the session instead.
                Err(err) if refused(&err) && !open.client.is_closed() => {
                    self.unreachable = false;
                    return Err(Unwritten {
                        refused: true,
                        text: error_text(&err),
                        maybe_in,
                    });
                }
                Err(err) => {
                    last = error_text(&err);
                    // Lost with the statement sent: its commit may have gone through.
                    maybe_in = true;
                    self.session = None;
                    if attempt == 0 && !self.unreachable {
                        eprintln!(
                            "lanes: --coordinate-records: the session was lost ({last}); \
                             connecting again"
                        );
                    }
                }
            }
        }
        self.unreachable = true;
        Err(Unwritten {
            refused: false,
            text: last,
            maybe_in,
        })
    }
}

/// Whether `err` is the server refusing a statement (a session that goes on), not the
/// session ending: an error of severity `ERROR` outside the classes of a lost connection (08)
/// and of an operator's intervention (57: a shutdown, a terminated session).
fn refused(err: &tokio_postgres::Error) -> bool {
    err.as_db_error().is_some_and(|db| {
        let class = &db.code().code()[..2];
        db.severity() == "ERROR" && class != "08" && class != "57"
    })
}

/// The record `line` named for people: its `seq` and `key`.
fn which(line: &str) -> String {
    let record: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
    let seq = record
        .get("seq")
        .map_or_else(|| "?".to_owned(), ToString::to_string);
    match record.get("key").and_then(serde_json::Value::as_str) {
        Some(key) => format!("job {seq} (key {key:?})"),
        None => format!("job {seq}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn while_the_run_goes_on_a_statement_is_tried_again_however_long_it_takes() {
        let start = Instant::now();
        let hour_later = start + 3600 * S;
        assert_eq!(
            retry(start, hour_later, 4 * S, None, 0, false),
            Retry::Again
        );
        assert_eq!(
            retry(start, hour_later, 4 * S, None, HELD_RECORDS, false),
            Retry::Again
        );
    }

    #[test]
    fn too_many_records_behind_a_statement_give_it_up() {
        let start = Instant::now();
        assert_eq!(
            retry(start, start + S, S, None, HELD_RECORDS + 1, false),
            Retry::GiveUp
        );
    }

    #[test]
    fn after_the_run_s_end_a_statement_is_tried_until_the_end_window_is_over() {
        let start = Instant::now();
        // Ended as the statement was first tried: the window counts from then.
        let ended = Some(start);
        assert_eq!(
            retry(start, start + 20 * S, 4 * S, ended, 0, false),
            Retry::Again
        );
        assert_eq!(
            retry(start, start + 26 * S, 4 * S, ended, 0, false),
            Retry::GiveUp
        );
        // A statement first tried long before the end still gets the whole window from the end.
        let ended = Some(start + 600 * S);
        assert_eq!(
            retry(start, start + 620 * S, 4 * S, ended, 0, false),
            Retry::Again
        );
        assert_eq!(
            retry(start, start + 627 * S, 4 * S, ended, 0, false),
            Retry::GiveUp
        );
        // A statement first tried after the end (queued behind one given up on) counts from
        // its own first try.
        let ended = Some(start);
        let later = start + 40 * S;
        assert_eq!(retry(later, later + S, S, ended, 0, false), Retry::Again);
    }

    #[test]
    fn once_a_statement_was_given_up_for_want_of_the_database_the_next_get_one_try() {
        let start = Instant::now();
        assert_eq!(
            retry(start, start, RECONNECT_DELAY, None, 0, true),
            Retry::GiveUp
        );
        assert_eq!(
            retry(start, start, RECONNECT_DELAY, Some(start), 0, true),
            Retry::GiveUp
        );
    }
}
