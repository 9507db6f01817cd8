//! Host-wide keys (`--lock-dir`): a key's lane shared with every `lanes` process that uses the
//! same lock directory. Before a job of such a key may be taken, the shell must hold the key's
//! host-wide lock; the core decides when to ask for it and when to let it go.
//!
//! - A key is asked for when it is in the ready line (its first job waits and no job of it is
//!   in flight here): [`Scheduler::host_keys`] returns it in `acquire`. While the shell waits
//!   for the lock the key's jobs take no slot, and other keys go on.
//! - [`Scheduler::host_key_acquired`] makes the key's first job takeable.
//! - The lock is kept while a job of the key is in flight and while a retry of it waits first
//!   in its lane (so that the key's order holds through `--retry-delay`); once a job ends and
//!   no retry follows, [`Scheduler::host_keys`] returns the key in `release`, even if more of
//!   its jobs wait here: those ask again, behind the jobs other processes readied meanwhile
//!   (first come, first served across processes; no process keeps a key for ever).
//! - At most `max_concurrent` + [`HOST_LOOKAHEAD`] keys are asked for or held without a job in
//!   flight at once, so that a long ready line does not hold a lock (and a thread) per key.
//! - A key whose lock cannot even be asked for, for want of descriptors, is asked again; once
//!   nothing of this run could free one ([`Scheduler::host_key_short`]: no job in flight, no
//!   key held, every key asked for short too), its first job is let go without the lock, for
//!   the shell to fail it (`spawn_error`) instead of waiting for ever.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use nix::sys::signal::Signal;

use super::outcome::StopReason;
use super::shutdown::StopOrder;
use super::state::{Scheduler, Tick};
use super::wait::{Touched, WaitCause};

/// How many keys beyond `max_concurrent` may be asked for (or held, waiting for a slot of
/// this process) at once: past that, further keys wait behind them.
pub const HOST_LOOKAHEAD: usize = 16;

/// Where a host-wide lock this process holds stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holding {
    /// Acquired for the key's first waiting job, which is not taken yet.
    Idle,
    /// A job of the key was taken under it.
    Taken,
    /// Not held: the lock could not be asked for, for want of descriptors, and nothing of
    /// this run would free one ([`Scheduler::host_key_short`]). The key's first job may be
    /// taken, for the shell to fail it; the key is asked for again after it.
    Unlocked,
}

/// How many times in a row a key's request must have run short of descriptors before it is
/// given up with nothing else in flight: once may be the moment another request or the
/// event loop held the last one.
const SHORT_IN_A_ROW: u32 = 2;

/// The host-wide locks asked for and held.
#[derive(Debug, Default)]
pub(crate) struct HostKeys {
    /// Keys whose lock the shell was asked to acquire and has not reported yet.
    asked: HashSet<Arc<str>>,
    /// Keys whose lock this process holds.
    held: HashMap<Arc<str>, Holding>,
    /// Keys asked for whose lock is held while a shared slot (`--shared-max-concurrent`) is
    /// waited for.
    locked: HashSet<Arc<str>>,
    /// Keys asked for whose request ran short of descriptors, and how many times in a row
    /// with nothing of the run in flight since ([`Scheduler::host_key_short`]).
    short: HashMap<Arc<str>, u32>,
    /// At most this many keys asked for or held without a job in flight, where the shell's
    /// descriptors allow fewer than `max_concurrent` + [`HOST_LOOKAHEAD`]
    /// ([`Scheduler::limit_host_requests`]).
    most: Option<usize>,
}

/// What the shell must do with host-wide locks now ([`Scheduler::host_keys`]).
#[must_use]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostKeyOrders {
    /// Keys whose lock to start acquiring (in ready-line order); report each with
    /// [`Scheduler::host_key_acquired`].
    pub acquire: Vec<Arc<str>>,
    /// Keys whose lock no job needs any more: let them go.
    pub release: Vec<Arc<str>>,
}

impl HostKeyOrders {
    /// Whether there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.acquire.is_empty() && self.release.is_empty()
    }
}

impl Scheduler {
    /// Makes every key host-wide: from now on a job is taken only under its key's host-wide
    /// lock ([`Scheduler::host_keys`]).
    pub fn share_keys(&mut self) {
        self.host.get_or_insert_with(HostKeys::default);
    }

    /// Asks for at most `most` keys at once (at least one), asked for or held without a job in
    /// flight, should that be fewer than `max_concurrent` + [`HOST_LOOKAHEAD`]: what the shell's
    /// descriptors allow, each waiting request holding a few (its lock file, its ticket, its
    /// line's directory) that the jobs then cannot have. No effect unless keys are host-wide.
    pub fn limit_host_requests(&mut self, most: usize) {
        if let Some(host) = self.host.as_mut() {
            host.most = Some(most.max(1));
        }
    }

    /// Whether keys are host-wide.
    pub fn keys_shared(&self) -> bool {
        self.host.is_some()
    }

    /// The locks to acquire and to let go now; empty when keys are not host-wide. Call before
    /// [`Scheduler::take`].
    pub fn host_keys(&mut self) -> HostKeyOrders {
        let Some(host) = self.host.as_mut() else {
            return HostKeyOrders::default();
        };
        let mut orders = HostKeyOrders::default();
        let lanes = &self.lanes;
        host.held.retain(|key, holding| {
            let lane = lanes.get(key);
            let needed = match holding {
                // Granted for a job not taken yet: needed while one waits.
                Holding::Idle => lane.is_some_and(|lane| !lane.waiting.is_empty() || lane.busy),
                // Needed while its job runs, or while a retry of it waits first in the lane.
                Holding::Taken => lane.is_some_and(|lane| {
                    lane.busy || lane.waiting.front().is_some_and(|w| w.attempts > 0)
                }),
                // Kept for its first job until taken (then gone): no lock to let go.
                Holding::Unlocked => return lane.is_some_and(|lane| lane.first_is_next()),
            };
            if !needed {
                orders.release.push(Arc::clone(key));
            }
            needed
        });
        if self.draining {
            return orders;
        }
        let budget = self
            .limits
            .max_concurrent
            .saturating_add(HOST_LOOKAHEAD)
            .min(host.most.unwrap_or(usize::MAX));
        let mut outstanding = host.asked.len()
            + host
                .held
                .values()
                .filter(|&&holding| holding == Holding::Idle)
                .count();
        for key in &self.ready {
            if outstanding >= budget {
                break;
            }
            if host.asked.contains(key) || host.held.contains_key(key) {
                continue;
            }
            // A named resource can stay taken for hours: a key whose first job is short of
            // one is not asked for (and held from every other process) until it frees. A
            // key's job waiting for a slot (`-j`) asks at once: slots turn over.
            if short_of_named(lanes, self.pool.as_deref(), key).is_some() {
                continue;
            }
            host.asked.insert(Arc::clone(key));
            orders.acquire.push(Arc::clone(key));
            outstanding += 1;
        }
        orders
    }

    /// The shell holds `key`'s host-wide lock now (at `now`). Returns whether a job still
    /// needs it; when not (its jobs were dropped meanwhile), the shell lets it go at once.
    pub fn host_key_acquired(&mut self, key: &str, now: Tick) -> bool {
        self.clock = self.clock.max(now);
        let Some(host) = self.host.as_mut() else {
            return false;
        };
        let Some(key) = host.asked.take(key) else {
            return false;
        };
        host.locked.remove(&key);
        // Descriptors were free: every shortage counts afresh.
        host.short.clear();
        let needed = !self.draining
            && self
                .lanes
                .get(&key)
                .is_some_and(|lane| lane.first_is_next());
        if needed {
            host.held.insert(Arc::clone(&key), Holding::Idle);
            self.refresh_waits(&key, Touched::Front, now);
        }
        needed
    }

    /// The shell holds `key`'s host-wide lock and now waits for a shared slot
    /// (`--shared-max-concurrent`) before it reports the key acquired, at `now`: its first job
    /// waits `shared_cap` from here.
    pub fn host_key_locked(&mut self, key: &str, now: Tick) {
        self.clock = self.clock.max(now);
        let Some(host) = self.host.as_mut() else {
            return;
        };
        let Some(key) = host.asked.get(key).cloned() else {
            return;
        };
        host.locked.insert(Arc::clone(&key));
        self.refresh_waits(&key, Touched::Front, now);
    }

    /// Why a key whose first job could otherwise be taken waits, as far as host-wide locks
    /// go: `None` when they let it be taken.
    pub(crate) fn host_cause(&self, key: &str) -> Option<WaitCause> {
        let host = self.host.as_ref()?;
        if self.host_allows(key) {
            return None;
        }
        if !host.asked.contains(key) && !host.held.contains_key(key) {
            // Not asked for while a named resource it needs is taken: that is its cause.
            if let Some(name) = short_of_named(&self.lanes, self.pool.as_deref(), key) {
                return Some(WaitCause::Resource { name });
            }
        }
        Some(if host.locked.contains(key) {
            WaitCause::SharedCap
        } else {
            WaitCause::Lock
        })
    }

    /// The shell could not acquire `key`'s lock (an error, not contention); it may be asked
    /// for again.
    pub fn host_key_failed(&mut self, key: &str) {
        if let Some(host) = self.host.as_mut() {
            host.asked.remove(key);
            host.locked.remove(key);
            host.short.remove(key);
        }
    }

    /// The request for `key`'s lock ran short of descriptors at `now` (EMFILE: the lock file
    /// could not be opened) and is tried again. Only this run's own work holds this process's
    /// descriptors, so when nothing of it could free one — no job in flight, no key held, and
    /// every key asked for short too, each [`SHORT_IN_A_ROW`] times in a row — nothing ever
    /// will: those keys are given up and returned, for the shell to stop asking. Each one's
    /// first job may then be taken without the lock, for the shell to fail it
    /// (`failed`/`spawn_error`, or a retry under `--retries`, which asks for the lock again),
    /// and the key's later jobs ask again. Returns nothing while something may still free one.
    pub fn host_key_short(&mut self, key: &str, now: Tick) -> Vec<Arc<str>> {
        self.clock = self.clock.max(now);
        let Some(host) = self.host.as_mut() else {
            return Vec::new();
        };
        let Some(key) = host.asked.get(key).cloned() else {
            return Vec::new();
        };
        if !self.running.is_empty() || !host.held.is_empty() {
            // Something of this run will free descriptors: every shortage counts afresh.
            host.short.clear();
            return Vec::new();
        }
        *host.short.entry(key).or_default() += 1;
        let nothing_frees = host
            .asked
            .iter()
            .all(|asked| host.short.get(asked).is_some_and(|&n| n >= SHORT_IN_A_ROW));
        if !nothing_frees {
            return Vec::new();
        }
        let mut given_up: Vec<Arc<str>> = host.short.drain().map(|(key, _)| key).collect();
        given_up.sort_unstable();
        for key in &given_up {
            host.asked.remove(key);
            host.locked.remove(key);
            if self.lanes.get(key).is_some_and(|lane| lane.first_is_next()) {
                host.held.insert(Arc::clone(key), Holding::Unlocked);
            }
        }
        for key in &given_up {
            self.refresh_waits(key, Touched::Front, now);
        }
        given_up
    }

    /// The shell lost `key`'s lock while holding it (`--coordinate`: the database session that
    /// held it ended or stopped answering). The lock counts as let go; the key's running job,
    /// if any, is asked to stop with SIGTERM, reason `lock_lost` (unless it is already stopping
    /// for another reason: the first reason wins). A job of the key still waiting asks for the
    /// lock again, behind the waiters of other processes, and waits `lock` from `now` (one
    /// granted the key and waiting for a slot waited `cap` until then).
    pub fn host_key_lost(&mut self, key: &str, now: Tick) -> Vec<StopOrder> {
        self.clock = self.clock.max(now);
        let Some(host) = self.host.as_mut() else {
            return Vec::new();
        };
        if host.held.remove(key).is_none() {
            return Vec::new();
        }
        self.refresh_waits(key, Touched::Front, now);
        let mut stops: Vec<StopOrder> = self
            .running
            .iter_mut()
            .filter(|(_, run)| &*run.key == key && run.stop.is_none())
            .map(|(&seq, run)| {
                run.stop = Some(StopReason::LockLost);
                StopOrder {
                    seq,
                    signal: Signal::SIGTERM,
                    reason: StopReason::LockLost,
                }
            })
            .collect();
        stops.sort_unstable_by_key(|stop| stop.seq);
        stops
    }

    /// Whether [`Scheduler::take`] may take `key`'s first job as far as host-wide locks go.
    pub(crate) fn host_allows(&self, key: &str) -> bool {
        let Some(host) = self.host.as_ref() else {
            return true;
        };
        match host.held.get(key) {
            Some(Holding::Idle | Holding::Unlocked) => true,
            // Still held for a retry waiting first in its lane.
            Some(Holding::Taken) => self.lanes.get(key).is_some_and(|lane| {
                !lane.busy && lane.waiting.front().is_some_and(|w| w.attempts > 0)
            }),
            None => false,
        }
    }

    /// Whether some key is held host-wide, so that a [`Scheduler::take`] may find one.
    pub(crate) fn host_may_take(&self) -> bool {
        self.host.as_ref().is_none_or(|host| !host.held.is_empty())
    }

    /// A job of `key` was taken under its host-wide lock (or, given up, without it: the key
    /// is then no longer held).
    pub(crate) fn host_taken(&mut self, key: &Arc<str>) {
        let Some(host) = self.host.as_mut() else {
            return;
        };
        // A job taken: its end will free descriptors, and shortages count afresh.
        host.short.clear();
        match host.held.get_mut(key) {
            Some(Holding::Unlocked) => {
                host.held.remove(key);
            }
            Some(holding) => *holding = Holding::Taken,
            None => {}
        }
    }
}

/// The named resource the first waiting job of `key` needs more of than is free now
/// (whatever the cap and what is set aside for earlier keys), if any.
fn short_of_named(
    lanes: &HashMap<Arc<str>, Box<super::state::Lane>>,
    pool: Option<&super::resources::Pool>,
    key: &str,
) -> Option<Arc<str>> {
    let pool = pool?;
    let needs = lanes.get(key)?.waiting.front()?.needs.as_deref()?;
    // The cap left out (all of it free), and nothing set aside: named resources alone.
    match super::resources::short_of(needs, usize::MAX, &pool.free, None)? {
        super::resources::Short::Resource(index) => Some(Arc::clone(pool.name(index))),
        super::resources::Short::Cap => None,
    }
}
