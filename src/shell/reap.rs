//! Reaping: the one place that calls `waitpid`. Every child of `lanes` (a job's direct child,
//! or an orphan re-parented to `lanes` as subreaper) is reaped here; exit facts of direct
//! children are handed to the task that supervises them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::sync::oneshot;

use crate::core::ExitFacts;

/// Hands each reaped direct child's [`ExitFacts`] to whoever registered its pid.
#[derive(Clone, Default)]
pub struct Reaper {
    waiters: Arc<Mutex<HashMap<i32, oneshot::Sender<ExitFacts>>>>,
}

impl Reaper {
    /// Registers interest in the exit of direct child `pid`. Call right after spawning, before
    /// anything can call [`Reaper::reap`] (the runtime is single-threaded, so "before the next
    /// await" is enough).
    pub fn watch(&self, pid: i32) -> oneshot::Receiver<ExitFacts> {
        let (tx, rx) = oneshot::channel();
        self.lock().insert(pid, tx);
        rx
    }

    /// Reaps every child that has exited (`waitpid(-1, WNOHANG)` until none is left), and
    /// delivers the exit facts of watched ones. Orphans are reaped and forgotten.
    pub fn reap(&self) {
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
