//! `--coordinate-records`: every job record also goes into the table `lanes_records` of the
//! fleet's database, so that a fleet has one history to query
//! (`SELECT … FROM lanes_records WHERE outcome = 'failed'`). The JSON Lines report is unchanged.
//! Records are written in order by a task with a session of its own; one that cannot be
//! written is said once on stderr and makes the run's exit status 1, as a report file that
//! cannot be written does.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::session::{self, error_text};
use super::Shared;

enum Message {
    Record(String),
    Flush(oneshot::Sender<()>),
}

/// The records on their way to the database.
pub(crate) struct FleetRecords {
    tx: mpsc::UnboundedSender<Message>,
    lost: Arc<AtomicBool>,
}

const INSERT: &str = "
INSERT INTO lanes_records (namespace, host, run, seq, key, outcome, reason, record)
SELECT $1, $2, $3, (r->>'seq')::bigint, r->>'key', r->>'outcome', r->>'reason', r
FROM (SELECT $4::text::jsonb AS r) AS record";

impl FleetRecords {
    /// Starts the writer of `shared`'s run.
    pub(super) fn start(shared: Arc<Shared>) -> FleetRecords {
        let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
        let lost = Arc::new(AtomicBool::new(false));
        let failed = Arc::clone(&lost);
        tokio::spawn(async move {
            let (report, _) = mpsc::unbounded_channel();
            let mut session = None;
            let mut said = false;
            while let Some(message) = rx.recv().await {
                let line = match message {
                    Message::Flush(done) => {
                        let _ = done.send(());
                        continue;
                    }
                    Message::Record(line) => line,
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
        FleetRecords { tx, lost }
    }

    /// Queues one job record (its JSON Lines text, without the newline).
    pub(crate) fn record(&self, line: &[u8]) {
        let line = String::from_utf8_lossy(line)
            .trim_end_matches('\n')
            .to_owned();
        if self.tx.send(Message::Record(line)).is_err() {
            self.lost.store(true, Ordering::Relaxed);
        }
    }

    /// Resolves once every record queued so far is written (or given up on).
    pub(crate) fn written(&self) -> impl std::future::Future<Output = ()> + use<> {
        let (done, wait) = oneshot::channel();
        let _ = self.tx.send(Message::Flush(done));
        async move {
            let _ = wait.await;
        }
    }

    /// Whether a record could not be written.
    pub(crate) fn lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }
}
