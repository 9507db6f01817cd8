//! Reaping: the one place that calls `waitpid`. Every child of `lanes` (a job's direct child,
//! or an orphan re-parented to `lanes` as subreaper) is reaped here; exit facts of direct
//! children are handed to the task that supervises them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use nix::libc;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::sync::oneshot;

use crate::core::ExitFacts;

/// Hands each reaped direct child's [`ExitFacts`] to whoever registered its pid.
///
/// Jobs are spawned on other threads ([`super::spawner`]) while the event loop reaps with
/// `waitpid(-1)`, so a child can exit and be reaped before its spawning thread has learned
/// its pid. Exact attribution is kept this way: a spawn is announced before it starts
/// ([`Reaper::spawn_begins`], which returns the count of reaps so far); while any spawn is
/// in flight, the facts of every unknown pid reaped are kept with the count at their reap; a
/// finished spawn ([`Reaper::spawn_ended`]) claims its pid's facts only when they were reaped
/// after its own announcement (a pid reaped before could not be its child, only an orphan
/// whose pid was reused). Facts no spawn in flight can claim are dropped.
#[derive(Clone, Default)]
pub(crate) struct Reaper {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    waiters: HashMap<i32, oneshot::Sender<ExitFacts>>,
    /// Reaps made so far (of any child).
    reaps: u64,
    /// Spawns in flight, by the value of `reaps` when each began.
    spawning: Vec<u64>,
    /// Facts of pids reaped while a spawn was in flight and nobody watched them, with the
    /// value of `reaps` at their reap.
    unclaimed: HashMap<i32, (u64, ExitFacts)>,
}

/// A spawn in flight, announced to the [`Reaper`]: give it back with
/// [`Reaper::spawn_ended`].
#[must_use]
pub(crate) struct SpawnTicket(u64);

impl Inner {
    /// Child `pid` was reaped: its facts go to its watcher, or are kept while a spawn in
    /// flight may claim them.
    fn reaped(&mut self, pid: i32, facts: ExitFacts) {
        self.reaps += 1;
        if let Some(tx) = self.waiters.remove(&pid) {
            let _ = tx.send(facts);
        } else if !self.spawning.is_empty() {
            let at = self.reaps;
            self.unclaimed.insert(pid, (at, facts));
        }
    }

    /// Forgets the spawn `ticket`, and what only it could still have claimed: what was reaped
    /// before the oldest spawn still in flight began is nobody's child.
    fn forget(&mut self, ticket: &SpawnTicket) {
        if let Some(at) = self.spawning.iter().position(|&at| at == ticket.0) {
            self.spawning.swap_remove(at);
        }
        match self.spawning.iter().min().copied() {
            None => self.unclaimed.clear(),
            Some(oldest) => self.unclaimed.retain(|_, (reaped, _)| *reaped > oldest),
        }
    }
}

impl Reaper {
    /// Announces a spawn about to start on another thread than the reaping one.
    pub(crate) fn spawn_begins(&self) -> SpawnTicket {
        let mut inner = self.lock();
        let at = inner.reaps;
        inner.spawning.push(at);
        SpawnTicket(at)
    }

    /// Ends the spawn `ticket` announced, which started `pid`: the channel of that child's
    /// exit facts (already sent, when it was reaped meanwhile).
    pub(crate) fn spawn_ended(
        &self,
        ticket: SpawnTicket,
        pid: i32,
    ) -> oneshot::Receiver<ExitFacts> {
        let (tx, rx) = oneshot::channel();
        let mut inner = self.lock();
        match inner.unclaimed.remove(&pid) {
            Some((reaped, facts)) if reaped > ticket.0 => {
                let _ = tx.send(facts);
            }
            _ => {
                inner.waiters.insert(pid, tx);
            }
        }
        inner.forget(&ticket);
        rx
    }

    /// Ends the spawn `ticket` announced, which started nothing.
    pub(crate) fn spawn_failed(&self, ticket: SpawnTicket) {
        self.lock().forget(&ticket);
    }

    /// Whether `pid` is a running job's direct child, not yet reaped.
    pub(crate) fn watches(&self, pid: i32) -> bool {
        self.lock().waiters.contains_key(&pid)
    }

    /// Reaps every child that has exited (`waitpid(-1, WNOHANG)` until none is left), and
    /// delivers the exit facts of watched ones. Orphans are reaped and forgotten (kept a
    /// while, when spawns are in flight: see [`Reaper`]).
    ///
    /// The raw `waitpid` of libc: nix's turns the status of a child killed by a signal it has
    /// no name for (the real-time signals, 32..=64) into an error, after the kernel has reaped
    /// it, and that child's end would be lost.
    pub(crate) fn reap(&self) {
        loop {
            let mut status: libc::c_int = 0;
            // SAFETY: `status` is a valid place for the status; WNOHANG never blocks.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid == 0 {
                return;
            }
            if pid < 0 {
                match Errno::last() {
                    Errno::EINTR => continue,
                    // ECHILD: no child left.
                    _ => return,
                }
            }
            let facts = if libc::WIFEXITED(status) {
                ExitFacts::Exited(libc::WEXITSTATUS(status))
            } else if libc::WIFSIGNALED(status) {
                ExitFacts::Signaled(libc::WTERMSIG(status))
            } else {
                // Stopped or continued: not asked for, so not reported.
                continue;
            };
            self.lock().reaped(pid, facts);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Terminates what escaped its job's process group (`setsid`, a double fork into another
/// session) and was re-parented to `lanes`: SIGTERM (then SIGCONT) to each one's group, SIGKILL after the
/// grace period to what is left, so that no process of any job outlives the run. A stop signal
/// meanwhile ends the grace at once. Returns the first stop signal that came, and whether
/// there was any escapee to sweep.
pub(crate) async fn sweep_escapees(
    reaper: &Reaper,
    grace: std::time::Duration,
    signals: &mut Option<super::signal::StopSignals>,
) -> (Option<nix::sys::signal::Signal>, bool) {
    use nix::sys::signal::Signal;
    use std::time::Duration;
    use tokio::time::Instant;

    let mut came = None;
    let mut signalled = std::collections::HashSet::new();
    let mut deadline = Instant::now() + grace;
    // Bounded: after SIGKILL nothing survives long; 2 s of SIGKILL passes cover reaping, and
    // the processes of an escapee's that are handed to lanes as their parents die. Counted
    // from the first such pass, so that a stop of lanes meanwhile (Ctrl-Z, SIGSTOP: the
    // escapees are not stopped with it) spends none of them.
    let mut give_up = None;
    loop {
        reaper.reap();
        let left = super::unix::children();
        if left.is_empty() || give_up.is_some_and(|give_up| Instant::now() >= give_up) {
            return (came, !signalled.is_empty() || give_up.is_some());
        }
        let forced = Instant::now() >= deadline;
        if forced && give_up.is_none() {
            give_up = Some(Instant::now() + Duration::from_secs(2));
        }
        for pid in left {
            // New escapees (re-parented as their parents die) get SIGTERM as they come.
            if forced {
                super::unix::signal_escapee(pid, Signal::SIGKILL);
            } else if signalled.insert(pid) {
                super::unix::signal_escapee(pid, Signal::SIGTERM);
                // A stopped escapee hears SIGTERM only once continued.
                super::unix::signal_escapee(pid, Signal::SIGCONT);
            }
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
            Some(signal) = super::signal::next_signal(signals) => {
                // A stop signal now: nothing waits any more.
                came.get_or_insert(signal);
                deadline = Instant::now();
            }
        }
    }
}

/// The signal that stopped direct child `pid`, when it is stopped now. Only looks
/// (`waitid(WSTOPPED | WNOWAIT)`): nothing is reaped, and the stop stays reportable.
pub(crate) fn stop_signal(pid: i32) -> Option<Signal> {
    let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    match waitid(Id::Pid(Pid::from_raw(pid)), flags) {
        Ok(WaitStatus::Stopped(_, signal)) => Some(signal),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bookkeeping alone, without `waitpid`: `reaped` stands for a reap of the event loop.
    fn reaper() -> Reaper {
        Reaper::default()
    }

    fn reaped(reaper: &Reaper, pid: i32, code: i32) {
        reaper.lock().reaped(pid, ExitFacts::Exited(code));
    }

    #[test]
    fn a_child_reaped_before_its_spawn_returned_is_attributed_to_it() {
        let reaper = reaper();
        let ticket = reaper.spawn_begins();
        reaped(&reaper, 41, 7);
        let mut exit = reaper.spawn_ended(ticket, 41);
        assert_eq!(exit.try_recv().ok(), Some(ExitFacts::Exited(7)));
        assert!(!reaper.watches(41));
    }

    #[test]
    fn a_child_reaped_after_its_spawn_returned_reaches_its_watcher() {
        let reaper = reaper();
        let ticket = reaper.spawn_begins();
        let mut exit = reaper.spawn_ended(ticket, 41);
        assert!(reaper.watches(41));
        assert!(exit.try_recv().is_err());
        reaped(&reaper, 41, 3);
        assert_eq!(exit.try_recv().ok(), Some(ExitFacts::Exited(3)));
    }

    #[test]
    fn an_orphan_reaped_before_a_spawn_began_is_never_taken_for_its_child() {
        let reaper = reaper();
        let first = reaper.spawn_begins();
        // An orphan with pid 41 is reaped while a spawn is in flight...
        reaped(&reaper, 41, 9);
        // ...and a second spawn, begun after that reap, is given pid 41 again (reused).
        let second = reaper.spawn_begins();
        let mut exit = reaper.spawn_ended(second, 41);
        assert!(
            exit.try_recv().is_err(),
            "the orphan's exit was taken for the job's"
        );
        assert!(reaper.watches(41));
        reaper.spawn_failed(first);
        reaped(&reaper, 41, 0);
        assert_eq!(exit.try_recv().ok(), Some(ExitFacts::Exited(0)));
    }

    #[test]
    fn unclaimed_exits_are_dropped_once_no_spawn_can_claim_them() {
        let reaper = reaper();
        reaped(&reaper, 5, 0);
        assert!(
            reaper.lock().unclaimed.is_empty(),
            "kept with no spawn in flight"
        );
        let first = reaper.spawn_begins();
        reaped(&reaper, 6, 0);
        let second = reaper.spawn_begins();
        reaped(&reaper, 7, 0);
        assert_eq!(reaper.lock().unclaimed.len(), 2);
        // The first spawn ends: pid 6 was reaped before the second began, so nobody can
        // claim it any more; pid 7 may still be the second's.
        reaper.spawn_failed(first);
        let kept: Vec<i32> = reaper.lock().unclaimed.keys().copied().collect();
        assert_eq!(kept, [7]);
        reaper.spawn_failed(second);
        assert!(reaper.lock().unclaimed.is_empty());
    }
}
