//! A second destination of the job records (`--coordinate-records`: a fleet's database): the
//! recorder hands each record over as it writes it to the report, without waiting, and at the
//! end waits until the destination has taken every one. The writer at the other end (in the
//! shell) reads a [`MirrorFeed`] and says whether anything was lost.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

/// What the writer at the other end is handed, in order.
pub(crate) enum MirrorMessage {
    /// One job record: its job's `seq`, and its JSON Lines text without the newline.
    Record(u64, String),
    /// Answer once every record before this one is written (or given up on).
    Flush(oneshot::Sender<()>),
}

/// The recorder's end: records on their way to the second destination.
pub(crate) struct Mirror {
    tx: mpsc::UnboundedSender<MirrorMessage>,
    lost: Arc<AtomicBool>,
    ended: Arc<OnceLock<Instant>>,
    pending: PendingRecords,
}

/// The `seq`s of the records handed over whose fate the writer has not told yet: neither
/// written nor said lost. What a run's end names when it gives up waiting for them.
#[derive(Clone, Default)]
pub(crate) struct PendingRecords(Arc<Mutex<BTreeSet<u64>>>);

impl PendingRecords {
    fn set(&self) -> std::sync::MutexGuard<'_, BTreeSet<u64>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The writer has written `seq`'s record, or said that it could not.
    pub(crate) fn told(&self, seq: u64) {
        self.set().remove(&seq);
    }
}

/// The writer's end: the records to write, and where to say that one could not be.
pub(crate) struct MirrorFeed {
    /// The records and flush requests, in order.
    pub(crate) rx: mpsc::UnboundedReceiver<MirrorMessage>,
    /// Set by the writer when a record could not be written.
    pub(crate) lost: Arc<AtomicBool>,
    /// When the run's end began to wait for the records ([`Mirror::written`]); unset while
    /// the run goes on, when a writer may keep trying a record for as long as it takes.
    pub(crate) ended: Arc<OnceLock<Instant>>,
    /// Where the writer tells each record's fate ([`PendingRecords::told`]).
    pub(crate) pending: PendingRecords,
}

impl Mirror {
    /// A mirror and the feed its writer reads.
    pub(crate) fn channel() -> (Mirror, MirrorFeed) {
        let (tx, rx) = mpsc::unbounded_channel();
        let lost = Arc::new(AtomicBool::new(false));
        let ended = Arc::new(OnceLock::new());
        let pending = PendingRecords::default();
        let feed = MirrorFeed {
            rx,
            lost: Arc::clone(&lost),
            ended: Arc::clone(&ended),
            pending: pending.clone(),
        };
        let mirror = Mirror {
            tx,
            lost,
            ended,
            pending,
        };
        (mirror, feed)
    }

    /// Queues job `seq`'s record (its JSON Lines text; a trailing newline is dropped).
    pub(crate) fn record(&self, seq: u64, line: &[u8]) {
        let line = String::from_utf8_lossy(line)
            .trim_end_matches('\n')
            .to_owned();
        self.pending.set().insert(seq);
        if self.tx.send(MirrorMessage::Record(seq, line)).is_err() {
            self.pending.told(seq);
            self.lost.store(true, Ordering::Relaxed);
        }
    }

    /// The `seq`s of the records neither written nor said lost yet, in order.
    pub(crate) fn pending(&self) -> Vec<u64> {
        self.pending.set().iter().copied().collect()
    }

    /// Resolves once every record queued so far is written (or given up on). Called by the
    /// run's end: from the first call on, the writer's tries are bounded
    /// ([`MirrorFeed::ended`]).
    pub(crate) fn written(&self) -> impl std::future::Future<Output = ()> + use<> {
        let _ = self.ended.set(Instant::now());
        let (done, wait) = oneshot::channel();
        let _ = self.tx.send(MirrorMessage::Flush(done));
        async move {
            let _ = wait.await;
        }
    }

    /// Whether a record could not be written.
    pub(crate) fn lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn records_arrive_in_order_and_a_flush_waits_for_them() {
        let (mirror, mut feed) = Mirror::channel();
        mirror.record(1, b"{\"seq\":1}\n");
        mirror.record(2, b"{\"seq\":2}");
        assert_eq!(mirror.pending(), [1, 2]);
        let written = mirror.written();
        let mut seen = Vec::new();
        while let Some(message) = feed.rx.recv().await {
            match message {
                MirrorMessage::Record(seq, line) => {
                    seen.push(line);
                    feed.pending.told(seq);
                }
                MirrorMessage::Flush(done) => {
                    let _ = done.send(());
                    break;
                }
            }
        }
        written.await;
        assert_eq!(seen, ["{\"seq\":1}", "{\"seq\":2}"]);
        assert!(
            feed.ended.get().is_some(),
            "the writer is told the run has ended"
        );
        assert_eq!(mirror.pending(), [0; 0], "every record's fate was told");
        assert!(!mirror.lost());
        feed.lost.store(true, Ordering::Relaxed);
        assert!(mirror.lost(), "the writer's word reaches the recorder");
        drop(feed);
        mirror.record(3, b"{}");
        assert!(mirror.lost(), "a record with no writer is lost");
        assert_eq!(mirror.pending(), [0; 0], "and its loss told at once");
    }
}
