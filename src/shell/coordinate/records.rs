//! `--coordinate-records`: every job record also goes into the table `lanes_records` of the
//! fleet's database, so that a fleet has one history to query
//! (`SELECT … FROM lanes_records WHERE outcome = 'failed'`). The JSON Lines report is unchanged.
//! Records are written in order by a task with a session of its own, each on its own: one that
//! cannot be written (refused by the server, or its session lost, or silent for
//! [`ANSWER_TIMEOUT`], and not regained within [`ATTEMPTS`] tries) is said on stderr, names the job, and makes the run's exit status 1, as a
//! report file that cannot be written does; the records after it are still written.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::session::{self, error_text, Session};
use super::Shared;
use crate::report::mirror::{MirrorFeed, MirrorMessage};

const INSERT: &str = "
INSERT INTO lanes_records (namespace, host, run, seq, key, outcome, reason, record)
SELECT $1, $2, $3, (r->>'seq')::bigint, r->>'key', r->>'outcome', r->>'reason', r
FROM (SELECT $4::text::jsonb AS r) AS record";

/// How many times a record is tried on a session lost meanwhile (each time on a new one).
const ATTEMPTS: u32 = 3;

/// The pause before each new connection after a session was lost.
const RECONNECT_DELAY: Duration = Duration::from_millis(500);

/// How long a try may take (connecting included) before its session counts as lost: a server
/// that does not answer (stopped, or its host gone) would hold the run's end forever.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts the writer of `shared`'s run's job records into the database. Each record is
/// written on its own: one that the server refuses is lost alone (said on stderr), and a lost
/// session is opened again for the next attempt (at most [`ATTEMPTS`] per record).
pub(super) fn start(shared: Arc<Shared>, feed: MirrorFeed) {
    let MirrorFeed {
        mut rx,
        lost: failed,
    } = feed;
    tokio::spawn(async move {
        let mut session: Option<Session> = None;
        while let Some(message) = rx.recv().await {
            let line = match message {
                MirrorMessage::Flush(done) => {
                    let _ = done.send(());
                    continue;
                }
                MirrorMessage::Record(line) => line,
            };
            if let Err(err) = write(&shared, &mut session, &line).await {
                failed.store(true, Ordering::Relaxed);
                eprintln!(
                    "lanes: --coordinate-records: the record of {} was not written into \
                     lanes_records: {err}",
                    which(&line)
                );
            }
        }
    });
}

/// Writes `line` on `session`, opening it (again) when there is none or it was lost.
async fn write(shared: &Shared, session: &mut Option<Session>, line: &str) -> Result<(), String> {
    let mut last = String::new();
    for attempt in 0..ATTEMPTS {
        if session.as_ref().is_some_and(|open| open.client.is_closed()) {
            *session = None;
        }
        if session.is_none() {
            if attempt > 0 {
                tokio::time::sleep(RECONNECT_DELAY).await;
            }
            let (report, _) = mpsc::unbounded_channel();
            let connect = session::connect(&shared.params, report);
            match tokio::time::timeout(ANSWER_TIMEOUT, connect).await {
                Ok(Ok(opened)) => *session = Some(opened),
                Ok(Err(err)) => {
                    last = err;
                    continue;
                }
                Err(_) => {
                    last = format!(
                        "{}: no answer within {} s",
                        shared.params,
                        ANSWER_TIMEOUT.as_secs()
                    );
                    continue;
                }
            }
        }
        let Some(open) = session.as_ref() else {
            continue;
        };
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] = [
            &shared.settings.namespace,
            &shared.settings.host_id,
            &shared.run,
            &line,
        ];
        let written = open.client.execute(INSERT, &params);
        let Ok(written) = tokio::time::timeout(ANSWER_TIMEOUT, written).await else {
            last = format!("no answer within {} s", ANSWER_TIMEOUT.as_secs());
            *session = None;
            if attempt == 0 {
                eprintln!(
                    "lanes: --coordinate-records: the database did not answer within {} s; \
                     connecting again",
                    ANSWER_TIMEOUT.as_secs()
                );
            }
            continue;
        };
        match written {
            Ok(_) => return Ok(()),
            // The server refused this record: another attempt would be refused too.
            Err(err) if err.as_db_error().is_some() && !open.client.is_closed() => {
                return Err(error_text(&err));
            }
            Err(err) => {
                last = error_text(&err);
                *session = None;
                if attempt == 0 {
                    eprintln!(
                        "lanes: --coordinate-records: the session was lost ({last}); \
                         connecting again"
                    );
                }
            }
        }
    }
    Err(last)
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
