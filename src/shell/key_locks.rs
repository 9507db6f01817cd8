//! Where a run's shared key lanes live: a lock directory on this host (`--lock-dir`) or a
//! PostgreSQL database shared by a fleet of hosts (`--coordinate`). Both carry out the same
//! decisions of the core (`core::hostwide`) and report grants the same way.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::coordinate::{CheckedCoordinator, Coordinator};
use super::lock_dir::{Acquired, CheckedLockDir, Grant, LockDir};
use crate::report::json::LockHolder;

/// Shared key lanes checked before the run starts.
pub(crate) enum CheckedKeyLocks {
    /// `--lock-dir`.
    Dir(CheckedLockDir),
    /// `--coordinate`.
    Fleet(Box<CheckedCoordinator>),
}

impl CheckedKeyLocks {
    /// In use by run `run` (the `started_at` of its run record); grants are reported on
    /// `report`.
    pub(crate) fn start(self, run: String, report: mpsc::UnboundedSender<Acquired>) -> KeyLocks {
        match self {
            CheckedKeyLocks::Dir(dir) => KeyLocks::Dir(dir.start(run, report)),
            CheckedKeyLocks::Fleet(db) => KeyLocks::Fleet(db.start(run, report)),
        }
    }
}

/// Shared key lanes in use.
pub(crate) enum KeyLocks {
    /// `--lock-dir`.
    Dir(LockDir),
    /// `--coordinate`.
    Fleet(Coordinator),
}

impl KeyLocks {
    /// Starts acquiring `key`'s lock: returns it when it was free at once (a lock directory
    /// only), else reports the grant later.
    pub(crate) fn acquire(&self, key: Arc<str>) -> Option<Grant> {
        match self {
            KeyLocks::Dir(dir) => dir.acquire(key),
            KeyLocks::Fleet(db) => {
                db.acquire(key);
                None
            }
        }
    }

    /// Waits until the locks let go so far are let go (a database's are let go by a task).
    pub(crate) async fn settle(&self) {
        if let KeyLocks::Fleet(db) = self {
            db.settle().await;
        }
    }

    /// `--coordinate-records`: the writer of job records into the fleet's database.
    pub(crate) fn records(&self) -> Option<crate::report::mirror::Mirror> {
        match self {
            KeyLocks::Dir(_) => None,
            KeyLocks::Fleet(db) => {
                let (mirror, feed) = crate::report::mirror::Mirror::channel();
                db.records(feed);
                Some(mirror)
            }
        }
    }

    /// Which other process holds `key` now, when that can be known without waiting (a lock
    /// directory); never this one.
    pub(crate) fn other_holder(&self, key: &str) -> Option<LockHolder> {
        match self {
            KeyLocks::Dir(dir) => dir.other_holder(key).map(super::lock_dir::Holder::named),
            KeyLocks::Fleet(_) => None,
        }
    }
}
