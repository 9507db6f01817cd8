//! `--coordinate-records`: every job record also goes into the table `lanes_records` of the
//! fleet's database, so that a fleet has one history to query
//! (`SELECT … FROM lanes_records WHERE outcome = 'failed'`). The JSON Lines report is unchanged.
//! Records are written in order by a task with a session of its own (opened with the run's
//! check of the database, before any key's), those that came while the last were written
//! together in one statement. A record that cannot be written (refused by the server, or its
//! session lost, or silent for [`ANSWER_TIMEOUT`], and not regained within [`RETRY_WINDOW`]) is
//! said on stderr, names the job, and makes the run's exit status 1, as a report file that
//! cannot be written does; the records after it are still written. A statement the server
//! refuses is written again record by record, so that a refused record is lost alone; while
//! the database cannot be reached, each statement is tried once, so that an outage costs the
//! run's end one wait, not one per record.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::session::{self, error_text, Session};
use super::Shared;
use crate::report::mirror::{MirrorFeed, MirrorMessage};

/// `$4` is a JSON array of records, inserted in its order.
const INSERT: &str = "
INSERT INTO lanes_records (namespace, host, run, seq, key, outcome, reason, record)
SELECT $1, $2, $3, (r->>'seq')::bigint, r->>'key', r->>'outcome', r->>'reason', r
FROM jsonb_array_elements($4::text::jsonb) WITH ORDINALITY AS records(r, n)
ORDER BY n";

/// How long a statement is tried again, each time on a new session, after its session was
/// lost or a connection was refused (a server restarting, or short of connections), while
/// the database can be reached; once it could not be within this time, each later statement
/// is tried once until one is written.
const RETRY_WINDOW: Duration = Duration::from_secs(16);

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
}

/// The records' writer: its session, and whether the database was out of reach at the last
/// statement.
struct Writer {
    shared: Arc<Shared>,
    session: Option<Session>,
    unreachable: bool,
}

/// Starts the writer of `shared`'s run's job records into the database (see the module's
/// documentation).
/// `session` is the one opened with the run's check, if any.
pub(super) fn start(shared: Arc<Shared>, session: Option<Session>, feed: MirrorFeed) {
    let MirrorFeed {
        mut rx,
        lost: failed,
    } = feed;
    tokio::spawn(async move {
        let mut writer = Writer {
            shared,
            session,
            unreachable: false,
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
            let mut lines = match message {
                MirrorMessage::Flush(done) => {
                    let _ = done.send(());
                    continue;
                }
                MirrorMessage::Record(line) => vec![line],
            };
            // The records that came meanwhile go with it, up to a flush (answered after them).
            while lines.len() < STATEMENT_RECORDS {
                match rx.try_recv() {
                    Ok(MirrorMessage::Record(line)) => lines.push(line),
                    Ok(flush) => {
                        held = Some(flush);
                        break;
                    }
                    Err(_) => break,
                }
            }
            let lost = writer.write_all(&lines).await;
            if !lost.is_empty() {
                failed.store(true, Ordering::Relaxed);
            }
            for (line, err) in lost {
                eprintln!(
                    "lanes: --coordinate-records: the record of {} was not written into \
                     lanes_records: {err}",
                    which(line)
                );
            }
        }
    });
}

impl Writer {
    /// Writes `lines` in one statement, or record by record when the server refuses it; the
    /// records lost, each with why.
    async fn write_all<'a>(&mut self, lines: &'a [String]) -> Vec<(&'a String, String)> {
        match self.write(lines).await {
            Ok(()) => Vec::new(),
            Err(Unwritten { refused: true, .. }) if lines.len() > 1 => {
                let mut lost = Vec::new();
                for line in lines {
                    if let Err(err) = self.write(std::slice::from_ref(line)).await {
                        lost.push((line, err.text));
                    }
                }
                lost
            }
            Err(err) => lines.iter().map(|line| (line, err.text.clone())).collect(),
        }
    }

    /// Writes `lines` in one statement on the session, opening it (again) when there is none
    /// or it was lost.
    async fn write(&mut self, lines: &[String]) -> Result<(), Unwritten> {
        let mut last = String::new();
        let records = format!("[{}]", lines.join(","));
        let first_try = tokio::time::Instant::now();
        let mut delay = RECONNECT_DELAY;
        for attempt in 0.. {
            // Once out of reach, one try; else tries until the window is over.
            if attempt > 0 && (self.unreachable || first_try.elapsed() + delay >= RETRY_WINDOW) {
                break;
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
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] = [
                &shared.settings.namespace,
                &shared.settings.host_id,
                &shared.run,
                &records,
            ];
            let written = open.client.execute(INSERT, &params);
            let Ok(written) = tokio::time::timeout(ANSWER_TIMEOUT, written).await else {
                last = format!("no answer within {} s", ANSWER_TIMEOUT.as_secs());
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
                    });
                }
                Err(err) => {
                    last = error_text(&err);
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
