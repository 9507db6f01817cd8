//! Thin, safe wrappers over the Unix calls the shell needs: signalling a process group, asking
//! whether a group still has live members, becoming a child subreaper, descriptor hygiene.

use std::os::fd::{AsRawFd, RawFd};

use nix::errno::Errno;
use nix::libc;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// Sends `signal` to every process of the process group `pgid` (`killpg(3)`). A group that is
/// already empty (ESRCH) is not an error; other errors are ignored too, as there is nothing
/// better to do with a group we may not signal.
pub(crate) fn signal_group(pgid: i32, signal: Signal) {
    let _ = killpg(Pid::from_raw(pgid), signal);
}

/// Sends `signal` to the single process `pid` (`kill(2)`); errors are ignored as for groups.
pub(crate) fn signal_process(pid: i32, signal: Signal) {
    let _ = kill(Pid::from_raw(pid), signal);
}

/// Whether the process group `pgid` still has a member that is not a zombie.
///
/// `kill(-pgid, 0)` (POSIX `kill(2)` with signal 0) tells whether any member exists; zombies
/// count as members there, so when it says yes, `/proc/*/stat` is read to see whether any
/// member is not a zombie (state `Z`). Zombies whose parent is `lanes` are reaped before this is
/// asked, so in practice only zombies of live parents inside the group are seen.
///
/// A `/proc` listing is a snapshot: a process forked just after it, by a parent that died
/// before its own entry was read, would be missed. So "only zombies" must be seen twice, and
/// `kill` asked again, before the group counts as empty.
pub(crate) fn group_alive(pgid: i32) -> bool {
    for _ in 0..2 {
        match kill(Pid::from_raw(-pgid), None) {
            Err(Errno::ESRCH) => return false,
            Ok(()) | Err(_) => {
                if group_has_live_member(pgid) {
                    return true;
                }
            }
        }
    }
    !matches!(kill(Pid::from_raw(-pgid), None), Err(Errno::ESRCH)) && group_has_live_member(pgid)
}

fn group_has_live_member(pgid: i32) -> bool {
    let Ok(pids) = proc_pids() else {
        return true;
    };
    pids.filter_map(proc_stat)
        .any(|stat| stat.pgid == pgid && stat.state != 'Z')
}

/// One process as `/proc/PID/stat` shows it (proc(5)).
pub(crate) struct ProcStat {
    /// Its state letter (`R`, `S`, `Z`, …).
    pub(crate) state: char,
    pub(crate) ppid: i32,
    pub(crate) pgid: i32,
    /// Its kernel flags (`PF_*`, field 9).
    pub(crate) flags: u64,
}

/// The pids listed in `/proc` now.
///
/// # Errors
/// When `/proc` cannot be read.
pub(crate) fn proc_pids() -> std::io::Result<impl Iterator<Item = i32>> {
    Ok(std::fs::read_dir("/proc")?
        .flatten()
        .filter_map(|entry| entry.file_name().to_str().and_then(|n| n.parse().ok())))
}

/// Every process listed in `/proc` now, by pid, with its state, parent and process group: one
/// pass, for the looks that need the whole process tree. `None` when `/proc` cannot be read.
pub(crate) fn proc_snapshot() -> Option<std::collections::HashMap<i32, ProcStat>> {
    Some(
        proc_pids()
            .ok()?
            .filter_map(|pid| proc_stat(pid).map(|stat| (pid, stat)))
            .collect(),
    )
}

/// `pid`'s state, parent, process group and flags, when it still exists.
pub(crate) fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: fields after it are counted
    // from its last ')'. State is field 3, ppid 4, pgrp 5.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    // After pgrp: session, tty_nr, tpgid, then flags.
    let flags = fields.nth(3)?.parse().ok()?;
    Some(ProcStat {
        state,
        ppid,
        pgid,
        flags,
    })
}

/// Whether process `pid` is exiting now: its exit under way (`PF_EXITING`, 0x4 in the flags,
/// field 9 of `/proc/PID/stat`, `include/linux/sched.h`), which no signal changes any more, or
/// already a zombie; false when it cannot be read.
pub(crate) fn exiting(pid: i32) -> bool {
    const PF_EXITING: u64 = 0x4;
    proc_stat(pid)
        .is_some_and(|stat| matches!(stat.state, 'Z' | 'X') || stat.flags & PF_EXITING != 0)
}

/// The soft and hard limits on open descriptors (`RLIMIT_NOFILE`) `lanes` was started with,
/// when [`raise_descriptor_limit`] raised its own soft limit: what every job is given back.
static STARTING_DESCRIPTOR_LIMIT: std::sync::OnceLock<[u64; 2]> = std::sync::OnceLock::new();

/// Raises `lanes`' own soft limit on open descriptors to its hard limit, as Go's runtime does
/// (Go 1.19 release notes, "os"): a run of many jobs holds a few descriptors for each (pipes,
/// its cgroup), and the usual soft limit of 1024 would hold a `-j 300` run back for want of
/// them. Jobs are given the limit `lanes` was started with back before their `exec`
/// ([`job_descriptor_limit`]), so a job that uses `select(2)` never meets descriptors past
/// 1023. Only where every job is started by `lanes`' own child
/// ([`super::spawn::EVERY_JOB_BY_OWN_CHILD`]): `posix_spawn` cannot set a limit. Call it
/// before any thread starts.
pub(crate) fn raise_descriptor_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    if !super::spawn::EVERY_JOB_BY_OWN_CHILD {
        return;
    }
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        let _ = STARTING_DESCRIPTOR_LIMIT.set([soft, hard]);
    }
}

/// The limit on open descriptors (`RLIMIT_NOFILE`: soft, hard) a job's process sets before its
/// `exec`: the one `lanes` was started with, when [`raise_descriptor_limit`] raised its own;
/// `None` when it did not (jobs inherit `lanes`' own, the same).
pub(crate) fn job_descriptor_limit() -> Option<[u64; 2]> {
    STARTING_DESCRIPTOR_LIMIT.get().copied()
}

/// Makes `lanes` a child subreaper (Linux `prctl(PR_SET_CHILD_SUBREAPER)`, see `prctl(2)`):
/// orphans of its jobs are re-parented to it, so it can reap them and see when a job's
/// process group is really empty. Elsewhere this does nothing.
pub(crate) fn become_subreaper() {
    #[cfg(target_os = "linux")]
    {
        let _ = nix::sys::prctl::set_child_subreaper(true);
    }
}

/// Marks every open descriptor above 2 close-on-exec, so that no descriptor `lanes` inherited
/// reaches a job (SPEC §2). Descriptors `lanes` opens itself are close-on-exec already (Rust
/// and tokio open everything with `O_CLOEXEC`).
pub(crate) fn close_inherited_descriptors_on_exec() {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd").or_else(|_| std::fs::read_dir("/dev/fd"))
    else {
        return;
    };
    let fds: Vec<RawFd> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in fds {
        set_cloexec(fd);
    }
}

fn set_cloexec(fd: RawFd) {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    if let Ok(bits) = fcntl(fd, FcntlArg::F_GETFD) {
        let flags = FdFlag::from_bits_truncate(bits) | FdFlag::FD_CLOEXEC;
        let _ = fcntl(fd, FcntlArg::F_SETFD(flags));
    }
}

/// Makes a fresh pipe's read end non-blocking: its status flags become `O_NONBLOCK` alone.
pub(crate) fn set_nonblocking(fd: &impl AsRawFd) -> std::io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    // A pipe's read end from pipe2(O_CLOEXEC) has no status flag but O_RDONLY (an access
    // mode, which F_SETFL ignores), so there is nothing to read back first.
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    Ok(())
}

/// Resets every signal that `lanes` inherited as ignored (`SIG_IGN`) to its default action, so
/// that jobs start with default dispositions (SPEC §2) even when `lanes` was started in the
/// background by a non-interactive shell (which ignores SIGINT and SIGQUIT for it, POSIX
/// "Shell Command Language" §2.11). SIGHUP stays ignored when it was (`nohup lanes …`), and
/// the return value says so; SIGPIPE is left to Rust, which ignores it itself. The real-time
/// signals (34..=64) are reset too: a job's process resets only the signals `lanes` may have
/// changed ([`super::signal::CHANGED_DISPOSITIONS`]), so every other must be at its default.
///
/// Call it first thing in `main`, before any thread starts.
pub(crate) fn reset_ignored_signals() -> bool {
    let mut hangup_ignored = false;
    let standard = Signal::iterator()
        .filter(|signal| !matches!(signal, Signal::SIGKILL | Signal::SIGSTOP | Signal::SIGPIPE))
        .map(|signal| signal as libc::c_int);
    for signal in standard.chain(super::signal::REAL_TIME) {
        if super::signal::disposition(signal) != Some(libc::SIG_IGN) {
            continue;
        }
        if signal == libc::SIGHUP {
            hangup_ignored = true;
            continue;
        }
        // SAFETY: installs SIG_DFL; no handler of ours runs, and no other thread exists yet.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
        }
    }
    hangup_ignored
}

/// Makes every thread allocate from glibc's one main arena (`mallopt(M_ARENA_MAX, 1)`,
/// mallopt(3)). lanes' threads only pass buffers to each other, so they gain nothing from
/// arenas of their own, which cost a 64 MiB reservation and page faults each at start and
/// hold freed memory apart from the main thread's. Call it before any thread starts.
pub(crate) fn use_one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: a plain setting of the allocator, made while only this thread runs.
    unsafe {
        nix::libc::mallopt(nix::libc::M_ARENA_MAX, 1);
    }
}

/// The pids of the children of this process's main thread (Linux
/// `/proc/self/task/PID/children`, see `proc(5)`): the jobs it started itself, and every
/// orphan re-parented to `lanes` as subreaper (the kernel hands orphans to the subreaper's
/// first live thread, its main thread). Jobs started by the spawning threads are their
/// children, not these.
pub(crate) fn main_thread_children() -> Vec<i32> {
    let me = std::process::id();
    std::fs::read_to_string(format!("/proc/self/task/{me}/children")).map_or_else(
        |_| Vec::new(),
        |text| {
            text.split_ascii_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
                .collect()
        },
    )
}

/// The pids of every child of this process (Linux `/proc/self/task/*/children`, see
/// `proc(5)`): after the run, these are processes that left their job's process group and
/// were re-parented to `lanes` as subreaper. Empty where the file does not exist.
pub(crate) fn children() -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            pids.extend(
                text.split_ascii_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Sends `signal` to `pid`'s whole process group when it leads one, else to `pid` alone.
pub(crate) fn signal_escapee(pid: i32, signal: Signal) {
    let pid = Pid::from_raw(pid);
    match nix::unistd::getpgid(Some(pid)) {
        Ok(pgid) if pgid == pid => {
            let _ = killpg(pgid, signal);
        }
        _ => {
            let _ = kill(pid, signal);
        }
    }
}
