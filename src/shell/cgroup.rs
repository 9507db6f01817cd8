//! Containment in cgroups (v2): a cgroup for the run, and in it one per running job that the
//! job's first process is born into (`clone3(2)` with `CLONE_INTO_CGROUP`), so that every
//! process the job starts stays in it whatever it does with process groups and sessions. A job
//! cgroup its job left empty, with no cgroup below it, serves a later job (its CPU time and
//! peak memory counted from the hand-over), which spares a `mkdir` and an `rmdir` per job. A job is over when
//! its cgroup is empty (`cgroup.events`: `populated 0`, watched with inotify); stopping it
//! signals every process in it, and `cgroup.kill` ends them all at once (Linux
//! `Documentation/admin-guide/cgroup-v2.rst`).
//!
//! The run's cgroup is `lanes-PID` below the cgroup `lanes` itself is in, on the
//! cgroup2 mount (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on hybrid hosts). Only cgroups
//! named so are ever created or removed: a run killed with SIGKILL leaves empty ones, which the
//! next run below the same cgroup removes.

use std::ffi::CStr;
use std::fs;
use std::io::{self, Read as _, Seek as _, Write as _};
use std::os::fd::{AsRawFd, FromRawFd as _, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use nix::libc;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use nix::sys::signal::Signal;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

/// The run's cgroup: jobs' cgroups are made in it.
#[derive(Debug)]
pub(crate) struct CgroupRun {
    dir: PathBuf,
    /// An exclusive `flock` on the run's cgroup directory, held while the run lives.
    _lock: OwnedFd,
    /// The run's one inotify instance on its jobs' `cgroup.events`, made with the first job
    /// (inside the event loop). One for the run, not one per job: closing an inotify instance
    /// waits for an SRCU grace period, milliseconds per job.
    watcher: std::cell::OnceCell<Option<Arc<Watcher>>>,
    /// Jobs' cgroups that are empty and wait for the next job.
    pool: Arc<Pool>,
}

/// At most this many empty jobs' cgroups are kept for the next jobs; more are removed.
const POOL_MAX: usize = 64;

/// Where the memory controller is enabled, an empty job cgroup with more memory than this
/// still charged to it (bytes: page cache its job left) is not reused.
const LEFTOVER_MAX: u64 = 1 << 20;

/// The run's empty jobs' cgroups, kept open: handing one to the next job costs a few reads and
/// writes where making and removing one costs a `mkdir` and an `rmdir`.
#[derive(Debug, Default)]
struct Pool {
    state: Mutex<PoolState>,
}

#[derive(Debug, Default)]
struct PoolState {
    idle: Vec<Slot>,
    /// How many jobs' cgroups were made: the next is `job-N` with N one more.
    made: u64,
    /// The run is over, or no job waits to start ([`CgroupRun::keep_no_more`]): cgroups
    /// given back are removed.
    closed: bool,
}

impl Pool {
    fn state(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One job cgroup, open, whichever job it serves.
#[derive(Debug)]
struct Slot {
    dir: PathBuf,
    /// The directory, open: what `CLONE_INTO_CGROUP` takes.
    fd: OwnedFd,
    /// The run's inotify instance, which a job that leaves processes behind watches its
    /// `cgroup.events` with ([`JobCgroup::populated`]); `None` where inotify cannot be had.
    watcher: Option<Arc<Watcher>>,
    /// Its `cgroup.events`, `cpu.stat` and `cgroup.stat`, read for every job it serves.
    events: Interface,
    cpu_stat: Interface,
    stat: Interface,
    /// Its `memory.peak`, open for reading and writing, where the memory controller is
    /// enabled for it and the kernel resets the peak seen through a descriptor when it is
    /// written (Linux 6.12): each job's peak is read through it after a reset.
    peak: Option<fs::File>,
    /// Whether `memory.peak` exists (the memory controller is enabled for it): without it, no
    /// job's peak is looked for.
    has_peak: bool,
    /// Whether controllers are enabled for it (`cgroup.controllers`): then a job may have
    /// enabled them for cgroups below it (`cgroup.subtree_control`), which keeps processes
    /// out of it, and that is looked at before it is reused.
    controllers: bool,
}

impl Slot {
    /// Makes the next cgroup of the run in `run`, watched by `watcher`.
    fn make(run: &Path, n: u64, watcher: Option<&Arc<Watcher>>) -> io::Result<Slot> {
        let dir = run.join(format!("job-{n}"));
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
            Err(err) => return Err(err),
        }
        let fd = match fs::File::open(&dir) {
            Ok(file) => OwnedFd::from(file),
            Err(err) => {
                let _ = fs::remove_dir(&dir);
                return Err(err);
            }
        };
        let (peak, has_peak) = match fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.join("memory.peak"))
        {
            Ok(mut file) => {
                let reset = file.write_all(b"0").is_ok();
                (Some(file).filter(|_| reset), true)
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => (None, false),
            // There, but not writable: a kernel before 6.12.
            Err(_) => (None, true),
        };
        let controllers =
            read_in(&fd, c"cgroup.controllers").is_none_or(|text| !text.trim().is_empty());
        Ok(Slot {
            events: Interface::open(&fd, c"cgroup.events"),
            cpu_stat: Interface::open(&fd, c"cpu.stat"),
            stat: Interface::open(&fd, c"cgroup.stat"),
            dir,
            fd,
            watcher: watcher.cloned(),
            peak,
            has_peak,
            controllers,
        })
    }

    /// Whether it may serve another job: not where the memory controller is enabled and its
    /// peak cannot be reset (an earlier kernel), as the next job's record would show an
    /// earlier job's peak.
    fn reusable(&self) -> bool {
        self.peak.is_some() || !self.has_peak
    }

    /// Whether the job that was in it left it as it was made: empty, not frozen (by itself),
    /// with no cgroup below it, no controller enabled for cgroups below it and (with the
    /// memory controller) next to no memory charged to it.
    fn as_made(&self) -> bool {
        let Some(events) = self.events.read(&self.fd) else {
            return false;
        };
        // `frozen 1` is also seen while the whole run is frozen: not reused then either.
        let settled = events
            .lines()
            .all(|line| !matches!(line.trim(), "populated 1" | "frozen 1"))
            && events.lines().any(|line| line.trim() == "populated 0");
        if !settled {
            return false;
        }
        let childless = self
            .stat
            .read(&self.fd)
            .is_some_and(|text| text.lines().any(|line| line.trim() == "nr_descendants 0"));
        if !childless {
            return false;
        }
        if self.controllers
            && !read_in(&self.fd, c"cgroup.subtree_control")
                .is_some_and(|text| text.trim().is_empty())
        {
            return false;
        }
        // A reset peak starts from the memory still charged to the cgroup (the page cache of
        // files the job wrote): the next job's peak would count it.
        self.peak.is_none()
            || read_in(&self.fd, c"memory.current")
                .and_then(|text| text.trim().parse::<u64>().ok())
                .is_some_and(|bytes| bytes <= LEFTOVER_MAX)
    }

    /// Readies it for the next job: its peak memory reset; its CPU time so far, to be taken
    /// off the job's. `None` when it cannot serve (the reset failed).
    fn hand_out(&mut self) -> Option<Option<u64>> {
        if let Some(peak) = &mut self.peak {
            peak.write_all(b"0").ok()?;
        }
        Some(self.cpu_usec())
    }

    /// `usage_usec` of its `cpu.stat`: CPU time of every process that was ever in it.
    fn cpu_usec(&self) -> Option<u64> {
        self.cpu_stat.read(&self.fd).and_then(|text| {
            text.lines().find_map(|line| {
                line.strip_prefix("usage_usec ")
                    .and_then(|n| n.trim().parse::<u64>().ok())
            })
        })
    }

    /// Removes it, with any cgroup below it; a process still in it keeps it, and the run's
    /// removal tries again.
    fn remove(self) {
        remove_dirs(&self.dir);
    }
}

/// One interface file of a job's cgroup, kept open and read again from its start for each
/// job: a `pread` at offset 0 makes the kernel's `seq_file` produce the file anew, which
/// spares an `openat` and a `close` at every read. Where it is not kept open ([`keep_open`])
/// or could not be opened, each read opens it by name.
#[derive(Debug)]
struct Interface {
    name: &'static CStr,
    file: Option<OwnedFd>,
}

/// The least soft limit on open descriptors (`RLIMIT_NOFILE`) at which job cgroups keep their
/// interface files open ([`Interface`]): three more descriptors for each job cgroup, running
/// or kept for the next job, are spent only where descriptors are plenty (`lanes` raises its
/// soft limit to the hard one, often 524,288 or more); under a tight `ulimit -n` each read
/// opens the file by name, as descriptors are kept for jobs.
const KEEP_OPEN_FROM: u64 = 8192;

/// Whether job cgroups keep their interface files open: see [`KEEP_OPEN_FROM`].
fn keep_open() -> bool {
    static KEEP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *KEEP.get_or_init(|| {
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .is_ok_and(|(soft, _)| soft >= KEEP_OPEN_FROM)
    })
}

impl Interface {
    /// Opens `name` in the cgroup open as `dir`, where descriptors are plenty ([`keep_open`]).
    fn open(dir: &OwnedFd, name: &'static CStr) -> Self {
        Interface {
            name,
            file: keep_open().then(|| open_in(dir, name)).flatten(),
        }
    }

    /// Its text now; `None` when it cannot be read.
    fn read(&self, dir: &OwnedFd) -> Option<String> {
        match &self.file {
            Some(file) => read_whole(file),
            None => read_in(dir, self.name),
        }
    }
}

/// The interface file `name` of the cgroup open as `dir`, open for reading. Opened relative
/// to the directory's descriptor: no walk of the whole path.
fn open_in(dir: &OwnedFd, name: &CStr) -> Option<OwnedFd> {
    // SAFETY: `name` is NUL-terminated and `dir` an open descriptor; the result is checked.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    // SAFETY: `fd`, when valid, was just opened here and nothing else owns it.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The text of the interface file `name` of the cgroup open as `dir`, `None` when it cannot
/// be read ([`read_whole`]).
fn read_in(dir: &OwnedFd, name: &CStr) -> Option<String> {
    read_whole(&open_in(dir, name)?)
}

/// The whole text of an open interface file, read from its start with `pread` (so the same
/// descriptor can be read again), without asking its size first: these files are small and
/// made at once (kernfs `seq_file`s), so a read that leaves room for another line has reached
/// the end, and the read that would return 0 is left out. A read that fills most of the buffer
/// is followed by more. `None` when it cannot be read.
fn read_whole(file: &OwnedFd) -> Option<String> {
    /// Longer than any one line of a cgroup's interface files.
    const LINE_ROOM: usize = 512;
    let mut bytes = Vec::with_capacity(4096);
    loop {
        if bytes.capacity() - bytes.len() < LINE_ROOM {
            bytes.reserve(bytes.capacity());
        }
        let start = bytes.len();
        bytes.resize(bytes.capacity(), 0);
        let read = nix::sys::uio::pread(file, &mut bytes[start..], start as libc::off_t);
        let got = match read {
            Ok(got) => got,
            Err(nix::errno::Errno::EINTR) => 0,
            Err(_) => return None,
        };
        bytes.truncate(start + got);
        if got == 0 || bytes.capacity() - bytes.len() >= LINE_ROOM {
            break;
        }
    }
    String::from_utf8(bytes).ok()
}

/// Why cgroup containment is not possible here.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unavailable {
    /// No cgroup2 file system is mounted.
    #[error("no cgroup2 file system is mounted")]
    NoMount,
    /// `/proc/self/cgroup` names no cgroup2 path.
    #[error("lanes' own cgroup is not known (/proc/self/cgroup)")]
    NoOwnCgroup,
    /// The cgroup cannot be written (not root, no delegation).
    #[error("cannot create a cgroup under {path}: {source} (run as root, or under a delegated cgroup: `systemd-run --user --scope -p Delegate=yes lanes …`)")]
    NotWritable {
        /// Where.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

impl CgroupRun {
    /// Creates the run's cgroup below the cgroup `lanes` is in, removing empty run cgroups of
    /// earlier runs whose `lanes` is gone.
    ///
    /// # Errors
    /// [`Unavailable`] when there is no cgroup2 mount or it cannot be written.
    pub(crate) fn create() -> Result<Self, Unavailable> {
        let mount = cgroup2_mount().ok_or(Unavailable::NoMount)?;
        let own = own_cgroup().ok_or(Unavailable::NoOwnCgroup)?;
        let parent = mount.join(own.trim_start_matches('/'));
        // Runs that start at once in one cgroup take turns (an exclusive `flock` on the
        // parent, held until this run's own lock is taken): else one could take another's
        // new cgroup, not yet locked, for a stale one and remove it, or hold its lock. A
        // holder that keeps it longer than a moment (not a lanes) is not waited for.
        let turn = fs::File::open(&parent).map(OwnedFd::from).ok();
        if let Some(turn) = &turn {
            let _ = crate::file_lock::flock_after_brief_hold(turn, libc::LOCK_EX);
        }
        remove_stale_runs(&parent);
        // The pid alone is not unique: runs in other PID namespaces may share this cgroup.
        let (dir, lock) = loop {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .subsec_nanos();
            let dir = parent.join(format!("lanes-{}-{nanos:x}", std::process::id()));
            match fs::create_dir(&dir) {
                Ok(()) => {}
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(source) => {
                    return Err(Unavailable::NotWritable {
                        path: parent,
                        source,
                    })
                }
            }
            // Held for the whole run: another run finds a run cgroup stale only when it can
            // take this lock, that is when this run is gone.
            match fs::File::open(&dir).map(OwnedFd::from) {
                Ok(fd) if crate::file_lock::flock(&fd, libc::LOCK_EX | libc::LOCK_NB).is_ok() => {
                    break (dir, fd)
                }
                _ => {
                    let _ = fs::remove_dir(&dir);
                    return Err(Unavailable::NotWritable {
                        path: parent,
                        source: io::Error::other("cannot lock the run's cgroup"),
                    });
                }
            }
        };
        let run = CgroupRun {
            dir,
            _lock: lock,
            watcher: std::cell::OnceCell::new(),
            pool: Arc::default(),
        };
        drop(turn);
        // A cgroup the jobs cannot be given (cgroup.max.depth, cgroup.max.descendants) is no
        // containment: found out now, not at the first job. The probe is the first job's
        // cgroup ([`CgroupRun::job`] makes `job-1` first and finds it made), removed with the
        // run's when no job comes.
        fs::create_dir(run.dir.join("job-1")).map_err(|source| Unavailable::NotWritable {
            path: run.dir.clone(),
            source,
        })?;
        Ok(run)
    }

    /// The cgroup of a job's try: an empty one that an earlier job left, or a new one.
    ///
    /// # Errors
    /// When it cannot be made or opened (out of descriptors, `cgroup.max.descendants`).
    pub(crate) fn job(&self) -> io::Result<JobCgroup> {
        loop {
            let Some(mut slot) = self.pool.state().idle.pop() else {
                break;
            };
            match slot.hand_out() {
                Some(baseline) => {
                    return Ok(JobCgroup {
                        slot: Some(slot),
                        pool: Arc::clone(&self.pool),
                        cpu_baseline: baseline,
                        killed: AtomicBool::new(false),
                        watch: OnceLock::new(),
                    })
                }
                None => slot.remove(),
            }
        }
        let n = {
            let mut state = self.pool.state();
            state.made += 1;
            state.made
        };
        let watcher = self.watcher.get_or_init(Watcher::start).as_ref();
        let slot = Slot::make(&self.dir, n, watcher)?;
        Ok(JobCgroup {
            slot: Some(slot),
            pool: Arc::clone(&self.pool),
            cpu_baseline: Some(0),
            killed: AtomicBool::new(false),
            watch: OnceLock::new(),
        })
    }
}

impl CgroupRun {
    /// Removes the empty job cgroups kept for later jobs, closing their descriptors: for a
    /// start that ran out of descriptors. Returns how many there were.
    pub(crate) fn release_idle(&self) -> usize {
        let idle = std::mem::take(&mut self.pool.state().idle);
        let released = idle.len();
        for slot in idle {
            slot.remove();
        }
        released
    }

    /// Keeps no more empty job cgroups for later jobs: those kept are removed now, and each
    /// job's is removed when its job ends, so that the run's end has none left to remove.
    /// Idempotent (once closed, no cgroup is kept again); a job that starts after makes a new
    /// cgroup ([`CgroupRun::job`]).
    pub(crate) fn keep_no_more(&self) {
        let idle = {
            let mut state = self.pool.state();
            if state.closed {
                return;
            }
            state.closed = true;
            std::mem::take(&mut state.idle)
        };
        for slot in idle {
            slot.remove();
        }
    }

    /// Freezes (or thaws) every job of the run at once (`cgroup.freeze` of the run's cgroup).
    pub(crate) fn freeze(&self, frozen: bool) {
        let _ = fs::write(
            self.dir.join("cgroup.freeze"),
            if frozen { b"1" as &[u8] } else { b"0" },
        );
    }
}

impl Drop for CgroupRun {
    fn drop(&mut self) {
        self.keep_no_more();
        remove_dirs(&self.dir);
    }
}

/// One job's cgroup. When dropped (the job over), given back to the run for the next job if
/// the job left it as it was made (empty, no cgroup below it, not frozen), else removed.
#[derive(Debug)]
pub(crate) struct JobCgroup {
    /// `None` only once dropped.
    slot: Option<Slot>,
    pool: Arc<Pool>,
    /// `usage_usec` of its `cpu.stat` when the job was given it: earlier jobs' CPU time.
    cpu_baseline: Option<u64>,
    /// `cgroup.kill` was written: the kernel then kills every process born into the cgroup
    /// afterwards with `CLONE_INTO_CGROUP` (its kill count differs from the one the clone
    /// started with), so the cgroup serves no other job.
    killed: AtomicBool,
    /// The inotify watch on its `cgroup.events`, made the first time processes of the job
    /// were seen left in it ([`JobCgroup::populated`]); `Some(None)` when it could not be
    /// made. A job whose exit and pipes' end find it empty needs none: the kernel's
    /// notifications of `cgroup.events` (delayed to one per 10 ms per file, then handed out by
    /// a kernel worker) would wake lanes once more per job for nothing.
    watch: OnceLock<Option<Watch>>,
}

/// What a job used, read from its cgroup when it ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// CPU time of all its processes (`cpu.stat` `usage_usec`).
    pub(crate) cpu: Option<Duration>,
    /// Its largest memory use at any moment (`memory.peak`), where the memory controller is
    /// enabled for it.
    pub(crate) memory_peak: Option<u64>,
}

impl JobCgroup {
    fn slot(&self) -> &Slot {
        self.slot
            .as_ref()
            .expect("a job's cgroup is there until dropped")
    }

    fn dir(&self) -> &Path {
        &self.slot().dir
    }

    /// Removes it rather than keep it for a later job: for a start that failed for want of
    /// descriptors, which must not keep one more open.
    pub(crate) fn discard(mut self) {
        if let Some(slot) = self.slot.take() {
            slot.remove();
        }
    }

    /// The open directory, for `CLONE_INTO_CGROUP`.
    pub(crate) fn fd(&self) -> RawFd {
        self.slot().fd.as_raw_fd()
    }

    /// Whether any process is in it (`cgroup.events`). The first time one is, its
    /// `cgroup.events` is watched from then on (see [`JobCgroup::changed`]) and read once
    /// more, so that a change between the read and the watch is not missed.
    pub(crate) fn populated(&self) -> bool {
        let slot = self.slot();
        let read = || match slot.events.read(&slot.fd) {
            Some(text) => text.lines().any(|line| line.trim() == "populated 1"),
            // Gone or unreadable: nothing can be seen in it any more.
            None => false,
        };
        if !read() {
            return false;
        }
        if self.watch.get().is_some() {
            return true;
        }
        let _ = self.watch.set(
            slot.watcher
                .as_ref()
                .and_then(|watcher| watcher.watch(&slot.dir.join("cgroup.events"))),
        );
        read()
    }

    /// Sends `signal` to every process in it (and in cgroups the job made below it), then
    /// SIGCONT, so that a stopped process hears it (as timeout(1) and systemd do). One pass: a
    /// process the job forks after the pass (a trap's cleanup) is left alone, as a process
    /// group signal would leave it; `cgroup.kill` at the end of the grace period catches
    /// everything. Returns false, signalling nothing, when the cgroup's processes cannot be
    /// read (no descriptor free: `ulimit -n`): the caller signals the job's process group.
    #[must_use]
    pub(crate) fn signal_all(&self, signal: Signal) -> bool {
        let Some(pids) = self.pids() else {
            return false;
        };
        for &pid in &pids {
            super::unix::signal_process(pid, signal);
        }
        if signal != Signal::SIGKILL && signal != Signal::SIGCONT {
            for &pid in &pids {
                super::unix::signal_process(pid, Signal::SIGCONT);
            }
        }
        true
    }

    /// Keeps this cgroup from serving a later job: it is removed once empty.
    pub(crate) fn not_reusable(&self) {
        self.killed.store(true, Ordering::Relaxed);
    }

    /// SIGKILL to every process in it at once (`cgroup.kill`, Linux 5.14); where that file is
    /// missing, SIGKILL to each process, a few passes. Returns false when neither could be
    /// done (no descriptor free): the caller kills the job's process group.
    #[must_use]
    pub(crate) fn kill(&self) -> bool {
        self.killed.store(true, Ordering::Relaxed);
        let written = fs::OpenOptions::new()
            .write(true)
            .open(self.dir().join("cgroup.kill"))
            .and_then(|mut file| file.write_all(b"1"));
        if written.is_err() {
            for _ in 0..3 {
                let Some(pids) = self.pids() else {
                    return false;
                };
                if pids.is_empty() {
                    break;
                }
                for pid in pids {
                    super::unix::signal_process(pid, Signal::SIGKILL);
                }
            }
        }
        true
    }

    /// The processes in the job's cgroup and in any cgroup the job made below it. Pids of
    /// processes in another PID namespace read as 0 and are left out: `kill(0, …)` would
    /// signal lanes' own process group. `None` when the job's own `cgroup.procs` cannot be
    /// read (no descriptor free).
    fn pids(&self) -> Option<Vec<i32>> {
        let mut pids = Vec::new();
        let mut dirs = vec![self.dir().to_path_buf()];
        let mut first = true;
        while let Some(dir) = dirs.pop() {
            let mut text = String::new();
            let read = fs::File::open(dir.join("cgroup.procs"))
                .and_then(|mut file| file.read_to_string(&mut text));
            if read.is_err() && first {
                return None;
            }
            first = false;
            pids.extend(
                text.split_ascii_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                    .filter(|&pid| pid > 0),
            );
            if let Ok(entries) = fs::read_dir(&dir) {
                dirs.extend(
                    entries
                        .flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
        Some(pids)
    }

    /// What the job used, as far as the cgroup tells: its CPU time past the baseline taken
    /// when it was given the cgroup, and its peak memory since the reset then.
    pub(crate) fn usage(&self) -> Usage {
        let slot = self.slot();
        let cpu = slot
            .cpu_usec()
            .zip(self.cpu_baseline)
            .map(|(now, before)| Duration::from_micros(now.saturating_sub(before)));
        let memory_peak = match &slot.peak {
            // Read through the descriptor that reset it.
            Some(file) => {
                let mut file = file;
                let mut text = String::new();
                file.rewind()
                    .and_then(|()| file.read_to_string(&mut text))
                    .ok()
                    .and_then(|_| text.trim().parse::<u64>().ok())
            }
            None if slot.has_peak => {
                read_in(&slot.fd, c"memory.peak").and_then(|text| text.trim().parse::<u64>().ok())
            }
            None => None,
        };
        Usage { cpu, memory_peak }
    }

    /// Resolves when the cgroup's state (`cgroup.events`: populated, frozen) may have changed
    /// since [`JobCgroup::populated`] last found processes in it; without a watch, after
    /// `fallback`. Never, before `populated` has found any: until then the job's exit and its
    /// pipes' end are what tell it may be over.
    pub(crate) async fn changed(&self, fallback: Duration) {
        match self.watch.get() {
            Some(Some(watch)) => watch.notify.notified().await,
            Some(None) => tokio::time::sleep(fallback).await,
            None => std::future::pending().await,
        }
    }
}

impl Drop for JobCgroup {
    fn drop(&mut self) {
        // The watch goes before the cgroup may serve another job, whose own watch on the same
        // file would have the same descriptor.
        drop(self.watch.take());
        let Some(slot) = self.slot.take() else {
            return;
        };
        // Looked at once more: a cgroup is reused only when nothing of its job is left.
        if slot.reusable() && !self.killed.load(Ordering::Relaxed) && slot.as_made() {
            let mut state = self.pool.state();
            if !state.closed && state.idle.len() < POOL_MAX {
                state.idle.push(slot);
                return;
            }
        }
        // Empty by now (the job is over), with any cgroup the job made below it; a process
        // that is still in it keeps it, and the run's removal tries again.
        slot.remove();
    }
}

/// The run's inotify instance and who waits on which watch.
#[derive(Debug)]
struct Watcher {
    inotify: AsyncFd<Events>,
    waiters: Mutex<HashMap<WatchDescriptor, Arc<Notify>>>,
}

/// One job's watch on its `cgroup.events`, removed when dropped.
#[derive(Debug)]
struct Watch {
    watcher: Arc<Watcher>,
    wd: WatchDescriptor,
    notify: Arc<Notify>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.watcher.forget(self.wd);
    }
}

/// The inotify instance, as tokio wants it.
#[derive(Debug)]
struct Events(Inotify);

impl AsRawFd for Events {
    fn as_raw_fd(&self) -> RawFd {
        use std::os::fd::AsFd as _;
        self.0.as_fd().as_raw_fd()
    }
}

impl Watcher {
    /// The instance and the task that hands its events out; `None` where inotify cannot be
    /// had (jobs' cgroups are then looked at from time to time).
    fn start() -> Option<Arc<Self>> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok()?;
        // SAFETY: `Events` owns the inotify descriptor and always returns it; it stays open
        // until the `AsyncFd` is dropped.
        let inotify = unsafe { AsyncFd::register(Events(inotify)) }.ok()?;
        let watcher = Arc::new(Watcher {
            inotify,
            waiters: Mutex::new(HashMap::new()),
        });
        tokio::spawn(Arc::clone(&watcher).dispatch());
        Some(watcher)
    }

    fn waiters(&self) -> std::sync::MutexGuard<'_, HashMap<WatchDescriptor, Arc<Notify>>> {
        self.waiters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn watch(self: &Arc<Self>, path: &Path) -> Option<Watch> {
        let wd = self
            .inotify
            .get_ref()
            .0
            .add_watch(path, AddWatchFlags::IN_MODIFY)
            .ok()?;
        let notify = Arc::new(Notify::new());
        self.waiters().insert(wd, Arc::clone(&notify));
        Some(Watch {
            watcher: Arc::clone(self),
            wd,
            notify,
        })
    }

    fn forget(&self, wd: WatchDescriptor) {
        self.waiters().remove(&wd);
        let _ = self.inotify.get_ref().0.rm_watch(wd);
    }

    /// Hands each event to the job waiting on its watch (a permit is kept for a job not
    /// waiting yet, so none is lost).
    async fn dispatch(self: Arc<Self>) {
        loop {
            let Ok(mut ready) = self.inotify.readable().await else {
                return;
            };
            match ready.get_inner().0.read_events() {
                Ok(events) => {
                    let waiters = self.waiters();
                    for event in events {
                        if let Some(notify) = waiters.get(&event.wd) {
                            notify.notify_one();
                        }
                    }
                }
                Err(nix::errno::Errno::EAGAIN) => ready.clear_ready(),
                Err(_) => return,
            }
        }
    }
}

/// Where cgroup2 is mounted: `/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a hybrid host,
/// when one of them is of type cgroup2 (`statfs(2)`), else the first mount of type `cgroup2`
/// in `/proc/self/mountinfo` (proc(5)).
fn cgroup2_mount() -> Option<PathBuf> {
    // Where systemd and container runtimes mount it, checked first with one `statfs` each:
    // the kernel writes the whole mount table for a read of mountinfo.
    for usual in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        if nix::sys::statfs::statfs(usual)
            .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
        {
            return Some(PathBuf::from(usual));
        }
    }
    let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let fstype = after.split_ascii_whitespace().next()?;
        (fstype == "cgroup2")
            .then(|| before.split_ascii_whitespace().nth(4).map(unescape_mount))
            .flatten()
    })
}

/// A mount point as mountinfo writes it: space, tab, newline and backslash as octal escapes.
fn unescape_mount(field: &str) -> PathBuf {
    let mut out = Vec::with_capacity(field.len());
    let bytes = field.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(u8::is_ascii_digit));
        if let (b'\\', Some(digits)) = (bytes[i], octal) {
            let code = digits.iter().fold(0u32, |n, d| n * 8 + u32::from(d - b'0'));
            out.push(u8::try_from(code).unwrap_or(b'?'));
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    use std::os::unix::ffi::OsStringExt;
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// `lanes`' own cgroup2 path (`/proc/self/cgroup`, the line `0::PATH`).
fn own_cgroup() -> Option<String> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("0::").map(str::to_owned))
}

/// Removes the run cgroups below `parent` left by runs whose `lanes` is gone (killed with
/// SIGKILL): only `lanes-…` directories whose lock no live run holds, and only what is empty.
/// One killed while stopped (Ctrl-Z) left its jobs frozen, with no one to thaw them: they are
/// thawed first, and run on as the orphans of any other killed run do.
fn remove_stale_runs(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with("lanes-"))
        {
            continue;
        }
        let path = entry.path();
        let Ok(fd) = fs::File::open(&path).map(OwnedFd::from) else {
            continue;
        };
        if crate::file_lock::flock(&fd, libc::LOCK_EX | libc::LOCK_NB).is_ok() {
            let _ = fs::write(path.join("cgroup.freeze"), "0");
            remove_dirs(&path);
        }
    }
}

/// Removes `dir` and every directory below it, deepest first; what is not empty stays.
fn remove_dirs(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_dirs(&entry.path());
            }
        }
    }
    let _ = fs::remove_dir(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(
            unescape_mount("/sys/fs/cgroup"),
            PathBuf::from("/sys/fs/cgroup")
        );
        assert_eq!(unescape_mount("/a\\040b"), PathBuf::from("/a b"));
    }

    #[test]
    fn interface_files_are_read_whole_whatever_their_size() {
        let dir = tempfile::tempdir().unwrap();
        let fd = OwnedFd::from(fs::File::open(dir.path()).unwrap());
        for size in [0, 1, 100, 3584, 3585, 4095, 4096, 4097, 10_000, 70_000] {
            let text: String = (0..size)
                .map(|i| char::from(b'a' + (i % 26) as u8))
                .collect();
            fs::write(dir.path().join("file"), &text).unwrap();
            assert_eq!(
                read_in(&fd, c"file").as_deref(),
                Some(text.as_str()),
                "{size} bytes"
            );
        }
        assert_eq!(read_in(&fd, c"missing"), None);
    }

    /// A file the kernel makes with a `seq_file`: the root cgroup's `name` where a cgroup2
    /// file system is mounted, else `/proc/self/status`. (Its directory, the directory open,
    /// its name.)
    fn kernel_file(name: &'static CStr) -> (PathBuf, OwnedFd, &'static CStr) {
        let dir = cgroup2_mount().unwrap_or_else(|| PathBuf::from("/proc/self"));
        let fd = OwnedFd::from(fs::File::open(&dir).unwrap());
        let name = if dir.ends_with("self") {
            c"status"
        } else {
            name
        };
        (dir, fd, name)
    }

    #[test]
    fn an_interface_file_kept_open_reads_whole_again_from_its_start() {
        // A plain `read` would continue where the first left off and give nothing; `pread` at
        // offset 0 makes the `seq_file` anew.
        let (_, fd, name) = kernel_file(c"cgroup.stat");
        let kept = Interface {
            name,
            file: open_in(&fd, name),
        };
        assert!(kept.file.is_some());
        let first = kept.read(&fd).unwrap();
        let second = kept.read(&fd).unwrap();
        assert!(!first.is_empty());
        assert_eq!(first.lines().next(), second.lines().next());
        assert_eq!(first.lines().count(), second.lines().count());
    }

    #[test]
    fn a_cgroup_interface_file_reads_as_through_its_path() {
        let (dir, fd, name) = kernel_file(c"cgroup.controllers");
        let by_path = fs::read_to_string(dir.join(name.to_str().unwrap())).unwrap();
        let read = read_in(&fd, name).unwrap();
        assert_eq!(read.lines().next(), by_path.lines().next());
        assert_eq!(read.lines().count(), by_path.lines().count());
    }
}
