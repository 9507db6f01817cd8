//! Locks on files with `flock(2)`: retried when a signal interrupts the call, and, for a file
//! lanes writes (a report, a journal's lock file), waited for a moment while another process
//! holds it.

use std::os::fd::AsRawFd;

use nix::libc;

/// `flock(2)` on `file`, retried when interrupted.
///
/// # Errors
/// As `flock(2)` says: `WouldBlock` for a lock another holds under `LOCK_NB`.
pub(crate) fn flock(file: &impl AsRawFd, operation: libc::c_int) -> std::io::Result<()> {
    loop {
        // SAFETY: `flock` on an open descriptor has no memory effects.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// How long a lock of a file lanes writes (a report, a journal's lock file) is waited for
/// while another process holds it, before that process is taken to be another lanes: for a
/// moment after `kill -9` of a lanes, a child of it that has not yet started its command still
/// holds the lock (its descriptor closes only at its `execve`).
pub(crate) const BRIEF_HOLD: std::time::Duration = std::time::Duration::from_secs(1);

/// [`flock`] with `LOCK_NB` added to `operation`, tried again every 10 ms for up to
/// [`BRIEF_HOLD`] while another holds the lock.
///
/// # Errors
/// `WouldBlock` when the lock is still held after that; any other error at once.
pub(crate) fn flock_after_brief_hold(
    file: &impl AsRawFd,
    operation: libc::c_int,
) -> std::io::Result<()> {
    let until = std::time::Instant::now() + BRIEF_HOLD;
    loop {
        match flock(file, operation | libc::LOCK_NB) {
            Err(err)
                if err.kind() == std::io::ErrorKind::WouldBlock
                    && std::time::Instant::now() < until =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            done => return done,
        }
    }
}
