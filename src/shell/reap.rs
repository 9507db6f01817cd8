//! Reaping: the one place that calls `waitpid`. Every child of `lanes` (a job's direct child,
//! or an orphan re-parented to `lanes` as subreaper) is reaped here; exit facts of direct
//! children are handed to the task that supervises them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::sync::oneshot;

use crate::core::ExitFacts;

/// Hands each reaped direct child's [`ExitFacts`] to whoever registered its pid.
#[derive(Clone, Default)]
pub(crate) struct Reaper {
    waiters: Arc<Mutex<HashMap<i32, oneshot::Sender<ExitFacts>>>>,
}

impl Reaper {
    /// Registers interest in the exit of direct child `pid`. Call right after spawning, before
    /// anything can call [`Reaper::reap`] (the runtime is single-threaded, so "before the next
    /// await" is enough).
    pub(crate) fn watch(&self, pid: i32) -> oneshot::Receiver<ExitFacts> {
        let (tx, rx) = oneshot::channel();
        self.lock().insert(pid, tx);
        rx
    }

    /// Whether `pid` is a running job's direct child, not yet reaped.
    pub(crate) fn watches(&self, pid: i32) -> bool {
        self.lock().contains_key(&pid)
    }

    /// Reaps every child that has exited (`waitpid(-1, WNOHANG)` until none is left), and
    /// delivers the exit facts of watched ones. Orphans are reaped and forgotten.
    pub(crate) fn reap(&self) {
        loop {
            let (pid, facts) = match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid, ExitFacts::Exited(code)),
                Ok(WaitStatus::Signaled(pid, signal, _)) => {
                    (pid, ExitFacts::Signaled(signal as i32))
                }
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return,
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(_) => return,
            };
            if let Some(tx) = self.lock().remove(&pid.as_raw()) {
                let _ = tx.send(facts);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, oneshot::Sender<ExitFacts>>> {
        self.waiters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Terminates what escaped its job's process group (`setsid`, a double fork into another
/// session) and was re-parented to `lanes`: SIGTERM (then SIGCONT) to each one's group, SIGKILL after the
/// grace period to what is left, so that no process of any job outlives the run. A stop signal
/// meanwhile ends the grace at once; the first one that came is returned.
pub(crate) async fn sweep_escapees(
    reaper: &Reaper,
    grace: std::time::Duration,
    signals: &mut Option<super::signal::StopSignals>,
) -> Option<nix::sys::signal::Signal> {
    use nix::sys::signal::Signal;
    use std::time::Duration;
    use tokio::time::Instant;

    let mut came = None;
    let mut signalled = std::collections::HashSet::new();
    let mut deadline = Instant::now() + grace;
    // Bounded: after SIGKILL nothing survives long; the extra time covers reaping.
    let give_up = deadline + Duration::from_secs(2);
    loop {
        reaper.reap();
        let left = super::unix::children();
        if left.is_empty() || Instant::now() >= give_up {
            return came;
        }
        let forced = Instant::now() >= deadline;
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
