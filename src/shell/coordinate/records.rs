//! `--coordinate-records`: every job record also goes into the table `lanes_records` of the
//! fleet's database, so that a fleet has one history to query
//! (`SELECT … FROM lanes_records WHERE outcome = 'failed'`). The JSON Lines report is unchanged.
//! Records are written in order by a task with a session of its own; one that cannot be
//! written is said once on stderr and makes the run's exit status 1, as a report file that
//! cannot be written does.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::session::{self, error_text};
use super::Shared;
use crate::report::mirror::{MirrorFeed, MirrorMessage};

/// The writer of a run's job records into the database.
pub(crate) struct FleetRecords;

const INSERT: &str = "
INSERT INTO lanes_records (namespace, host, run, seq, key, outcome, reason, record)
SELECT $1, $2, $3, (r->>'seq')::bigint, r->>'key', r->>'outcome', r->>'reason', r
FROM (SELECT $4::text::jsonb AS r) AS record";

impl FleetRecords {
    /// Starts the writer of `shared`'s run.
    pub(super) fn start(shared: Arc<Shared>, feed: MirrorFeed) {
        let MirrorFeed {
            mut rx,
            lost: failed,
        } = feed;
        tokio::spawn(async move {
            let (report, _) = mpsc::unbounded_channel();
            let mut session = None;
            let mut said = false;
            while let Some(message) = rx.recv().await {
                let line = match message {
                    MirrorMessage::Flush(done) => {
                        let _ = done.send(());
                        continue;
                    }
                    MirrorMessage::Record(line) => line,
                };
                if failed.load(Ordering::Relaxed) {
                    continue;
                }
                if session.is_none() {
                    match session::connect(&shared.params, report.clone()).await {
                        Ok(opened) => session = Some(opened),
                        Err(err) => {
                            failed.store(true, Ordering::Relaxed);
                            if !std::mem::replace(&mut said, true) {
                                eprintln!(
                                    "lanes: --coordinate-records: {err}; the fleet's records \
                                     of this run are incomplete"
                                );
                            }
                            continue;
                        }
                    }
                }
                let Some(open) = &session else { continue };
                let written = open
                    .client
                    .execute(
                        INSERT,
                        &[
                            &shared.settings.namespace,
                            &shared.settings.host_id,
                            &shared.run,
                            &line,
                        ],
                    )
                    .await;
                if let Err(err) = written {
                    failed.store(true, Ordering::Relaxed);
                    if !std::mem::replace(&mut said, true) {
                        eprintln!(
                            "lanes: --coordinate-records: cannot write a record into \
                             lanes_records: {}; the fleet's records of this run are incomplete",
                            error_text(&err)
                        );
                    }
                }
            }
        });
    }
}
