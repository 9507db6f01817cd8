//! `--lock-dir DIR`: the host-wide locks that let every `lanes` process sharing DIR share its
//! key lanes, and `--shared-max-concurrent` slots. All of it rests on `flock(2)`, which the
//! kernel releases when the last descriptor of the open file goes: a crashed or killed holder
//! never leaves a lock behind.
//!
//! Layout of DIR:
//! - `keys/<sha256 of the key, hex>.lock`: holding the key is an exclusive `flock` on it. The
//!   holder writes `{"pid":…,"run":…,"key":…}` into it (the file keeps the last holder's).
//! - `keys/<hash>.q/<ticket>`: the key's waiters, first come first served. A ticket is named
//!   `<CLOCK_REALTIME ns, 20 digits>-<pid, 10 digits>-<sequence, 10 digits>` and is
//!   `flock`-held by its waiter from before it appears (it is created locked under another name
//!   and renamed into place). The first waiter waits on the key with a blocking `flock`, each
//!   other one on the ticket just ahead of its own: nothing polls. A ticket whose lock can be
//!   taken was given up (its waiter got the key, or died) and is removed by whoever sees it.
//! - `slots/<i>.lock`, i from 0 to N−1: a shared slot is an exclusive `flock` on one of them.
//!
//! The key's and the slot's descriptors are handed to the job (descriptors 3 and 4), so that
//! its processes hold them for as long as they live, even when `lanes` itself is killed.

use std::collections::{HashMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::libc;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::file_lock::flock;
use crate::report::entry::HostWait;
use crate::report::json::LockHolder;

/// Who holds a key: written into the key's lock file by the process that acquires it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Holder {
    /// The `lanes` process that acquired it (its job's processes may hold it after it died).
    pub(crate) pid: u32,
    /// That process's run: the `started_at` of its run record.
    pub(crate) run: String,
    /// The key itself.
    pub(crate) key: String,
    /// The PID namespace `pid` is a number in: the inode of that process's
    /// `/proc/self/ns/pid`. Absent from lines written before it was; such a holder is taken to
    /// be in the reader's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pid_namespace: Option<u64>,
    /// Whether that process's jobs take shared slots (`--shared-max-concurrent`): only then
    /// may it hold a key while its job waits for one. Absent (false) from lines written
    /// before it was, and from processes without the flag.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) shared_slots: bool,
    /// Written as that process let the key go: whatever holds the lock file now is not it (a
    /// process its job left holding descriptor 3, or a program other than lanes).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) released: bool,
}

/// Why DIR cannot be used; each message names DIR.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LockDirError {
    /// Not a directory, not creatable, not writable.
    #[error("{given_as} {dir}: {why}")]
    Unusable {
        /// Where DIR was given: `--lock-dir`, or [`LockDirError::given_as`]'s name.
        given_as: String,
        /// The directory as given.
        dir: String,
        /// What is wrong with it.
        why: String,
    },
    /// `lanes locks DIR`: DIR cannot be listed.
    #[error("{dir}: {why}")]
    Unlisted {
        /// The directory as given.
        dir: String,
        /// What is wrong with it.
        why: String,
    },
}

impl LockDirError {
    /// The same error, saying DIR was given as `name` (`LANES_LOCK_DIR`, the manifest's
    /// `lock_dir`) rather than with `--lock-dir`.
    #[must_use]
    pub(crate) fn given_as(mut self, name: &str) -> Self {
        if let LockDirError::Unusable { given_as, .. } = &mut self {
            name.clone_into(given_as);
        }
        self
    }
}

fn unusable(dir: &Path, why: impl std::fmt::Display) -> LockDirError {
    LockDirError::Unusable {
        given_as: "--lock-dir".to_owned(),
        dir: dir.display().to_string(),
        why: why.to_string(),
    }
}

/// A key's host-wide lock (and shared slot) held by this process, until dropped. Dropping it
/// closes this process's descriptors only: a job that inherited them keeps holding them.
#[derive(Debug)]
pub(crate) struct Grant {
    /// The key's lock.
    pub(crate) key: OwnedFd,
    /// The shared slot's lock, under `--shared-max-concurrent`.
    pub(crate) slot: Option<OwnedFd>,
    /// How long the key was waited for, and who held it when the wait began: told once, in
    /// the records of the first run that starts under the grant.
    pub(crate) wait: Option<HostWait>,
    /// `--coordinate`: the database session that holds the key (`key` is a duplicate of its
    /// socket); dropping it lets the key go.
    pub(crate) fleet: Option<Box<crate::shell::coordinate::FleetHold>>,
    /// `--lock-dir`: the line written over the holder's as the key is let go (the lock still
    /// held), so that `lanes locks` and other processes' records never name this process as
    /// the holder of a lock file something else holds afterwards.
    pub(crate) released: Option<Box<Holder>>,
}

impl Drop for Grant {
    fn drop(&mut self) {
        if let Some(holder) = self.released.take() {
            let _ = write_line(&self.key, &holder);
        }
    }
}

impl Holder {
    /// The holder this line names now: none once it has let the key go (`released`), whatever
    /// holds the lock file then.
    fn still_holding(self) -> Option<Holder> {
        (!self.released).then_some(self)
    }

    /// This holder's line as written when it lets the key go (`released`).
    fn into_released(self) -> Option<Box<Holder>> {
        Some(Box::new(Holder {
            released: true,
            ..self
        }))
    }

    /// Whether this is `identity`, the process reading it: the same pid in the same PID
    /// namespace, in the same run (a process of another container may have the same pid).
    fn is(&self, identity: &Identity) -> bool {
        self.pid == identity.pid
            && self.run == identity.run
            && (self.pid_namespace.is_none() || self.pid_namespace == identity.pid_namespace)
    }

    /// Whether `pid` is a number in another PID namespace than this process's (known only
    /// when the holder wrote its namespace).
    fn elsewhere(&self, ours: Option<u64>) -> bool {
        matches!((self.pid_namespace, ours), (Some(theirs), Some(ours)) if theirs != ours)
    }

    /// As `lanes locks` shows it: `pid N (run R)`, the pid said to be another namespace's.
    fn shown(&self, ours: Option<u64>) -> String {
        let elsewhere = if self.elsewhere(ours) {
            " of another PID namespace"
        } else {
            ""
        };
        format!("pid {}{elsewhere} (run {})", self.pid, self.run)
    }

    /// As records and events name it.
    pub(crate) fn named(self) -> LockHolder {
        LockHolder {
            pid: self.pid,
            run: self.run,
            host: None,
        }
    }
}

/// What an acquisition thread reports to the event loop.
#[derive(Debug)]
pub(crate) enum Acquired {
    /// The key is held.
    Granted(Arc<str>, Grant),
    /// The key's lock is held and a shared slot (`--shared-max-concurrent`) is waited for;
    /// `Granted` follows.
    Locked(Arc<str>),
    /// `--coordinate`: the key was asked for and another process holds it; the wait goes on.
    /// Told so that a job stopped before it gets the key names its holder.
    HeldBy(Arc<str>, LockHolder),
    /// A message for people (a file that could not be used for a while); the wait goes on.
    Notice(String),
    /// The key's lock could not be asked for, for want of descriptors (EMFILE, `error`); it is
    /// asked again until [`LockDir::give_up`].
    Short {
        /// The key.
        key: Arc<str>,
        /// What opening its lock file said.
        error: String,
    },
    /// `--coordinate`: the key held under grant number `grant` was lost (`why`, for people).
    Lost {
        /// The key.
        key: Arc<str>,
        /// The grant's number ([`crate::shell::coordinate::FleetHold::grant`]).
        grant: u64,
        /// What happened.
        why: String,
    },
}

/// A lock directory checked and prepared, before the run starts ([`LockDir::open`]).
pub(crate) struct CheckedLockDir {
    root: PathBuf,
    slots: Option<Arc<SlotPool>>,
}

impl CheckedLockDir {
    /// The directory in use, as `run` (the `started_at` of this process's run record) of this
    /// process; grants are reported on `report`.
    pub(crate) fn start(self, run: String, report: mpsc::UnboundedSender<Acquired>) -> LockDir {
        LockDir {
            root: self.root,
            identity: Identity {
                pid: std::process::id(),
                run,
                pid_namespace: own_pid_namespace(),
                shared_slots: self.slots.is_some(),
            },
            slots: self.slots,
            report,
            asking: Arc::default(),
        }
    }
}

/// An open lock directory.
pub(crate) struct LockDir {
    root: PathBuf,
    identity: Identity,
    slots: Option<Arc<SlotPool>>,
    report: mpsc::UnboundedSender<Acquired>,
    /// Each key's request under way on a thread, by a flag that tells the thread to give up.
    asking: Arc<Asking>,
}

/// The requests under way on threads, each by the flag that tells it to give up.
type Asking = Mutex<HashMap<Arc<str>, Arc<AtomicBool>>>;

/// Forgets `key`'s request once its thread is done, unless a later request took its place.
fn done_asking(asking: &Asking, key: &str, flag: &Arc<AtomicBool>) {
    let mut asking = asking
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if asking
        .get(key)
        .is_some_and(|current| Arc::ptr_eq(current, flag))
    {
        asking.remove(key);
    }
}

#[derive(Clone)]
struct Identity {
    pid: u32,
    run: String,
    /// [`Holder::pid_namespace`]; `None` where `/proc` cannot tell.
    pid_namespace: Option<u64>,
    /// [`Holder::shared_slots`].
    shared_slots: bool,
}

impl Identity {
    /// This process, as the holder of `key`.
    fn holding(&self, key: &str) -> Holder {
        Holder {
            pid: self.pid,
            run: self.run.clone(),
            key: key.to_owned(),
            pid_namespace: self.pid_namespace,
            shared_slots: self.shared_slots,
            released: false,
        }
    }
}

/// The inode of this process's `/proc/self/ns/pid`: which PID namespace its pids are numbers
/// in (namespaces(7)); `None` without `/proc`.
fn own_pid_namespace() -> Option<u64> {
    fs::metadata("/proc/self/ns/pid")
        .ok()
        .map(|meta| meta.ino())
}

impl LockDir {
    /// Opens DIR (created when missing), checks that it is a writable directory on which
    /// `flock` works, and prepares `shared_slots` slot files.
    ///
    /// # Errors
    /// DIR not a directory, not creatable, not writable, or `flock` not working on it.
    pub(crate) fn open(
        dir: &Path,
        shared_slots: Option<usize>,
    ) -> Result<CheckedLockDir, LockDirError> {
        prepare(dir)?;
        let slots = match shared_slots {
            Some(count) => {
                let held = HeldDir::open(&dir.join("slots"))
                    .map_err(|err| unusable(dir, format!("cannot open slots/: {err}")))?;
                for i in 0..count {
                    open_lock_file(&held.path().join(format!("{i}.lock")))
                        .map_err(|err| unusable(dir, format!("cannot create slot {i}: {err}")))?;
                }
                Some(Arc::new(SlotPool {
                    dir: held.path(),
                    _held: held,
                    count,
                    state: Mutex::new(PoolState::default()),
                    wanted: Condvar::new(),
                }))
            }
            None => None,
        };
        Ok(CheckedLockDir {
            root: dir.to_path_buf(),
            slots,
        })
    }

    /// Acquires `key`'s lock (and a shared slot): at once when both are free and nobody
    /// waits for the key, else on a thread of its own, which reports the grant on the channel
    /// given to [`LockDir::start`].
    pub(crate) fn acquire(&self, key: Arc<str>) -> Option<Grant> {
        let asked = Instant::now();
        let held = KeyPaths::held(&self.root, &key)
            .and_then(|paths| try_key_now(&paths, &key, &self.identity))
            .ok()
            .flatten();
        let root = self.root.clone();
        let slot = match (&held, &self.slots) {
            (None, _) => None,
            (Some(_), None) => Some(None),
            (Some(_), Some(pool)) => pool.try_take().map(Some),
        };
        let held = match (held, slot) {
            (Some(lock), Some(slot)) => {
                let released = self.identity.holding(&key).into_released();
                return Some(Grant {
                    released,
                    key: above_placements(lock.into()),
                    slot: slot.map(|slot| {
                        let _ = write_holder(&slot, &key, &self.identity);
                        above_placements(slot)
                    }),
                    wait: Some(HostWait {
                        waited: asked.elapsed(),
                        holder: None,
                    }),
                    fleet: None,
                });
            }
            // The key without a slot: the thread waits for the slot.
            (held, _) => held,
        };
        let identity = self.identity.clone();
        let slots = self.slots.clone();
        let report = self.report.clone();
        let given_up = Arc::new(AtomicBool::new(false));
        self.asking
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(Arc::clone(&key), Arc::clone(&given_up));
        let asking = Arc::clone(&self.asking);
        let spawned = std::thread::Builder::new()
            .name("lanes-lock".into())
            .spawn(move || {
                let mut delay = Duration::from_millis(10);
                // The same error of this key is said again at most every 30 s.
                let mut said: Option<(String, Instant)> = None;
                let mut held = held.map(|lock| (OwnedFd::from(lock), None));
                let (key_fd, holder) = loop {
                    if let Some(held) = held.take() {
                        break held;
                    }
                    if given_up.load(Ordering::Relaxed) {
                        done_asking(&asking, &key, &given_up);
                        return;
                    }
                    let paths = KeyPaths::held(&root, &key);
                    match paths.and_then(|paths| acquire_key(&paths, &key, &identity)) {
                        Ok(held) => break held,
                        Err(err) if is_out_of_descriptors(&err) => {
                            // The process's shortage, not this key's: said once for all keys.
                            if shortage_to_say() {
                                let _ = report.send(Acquired::Notice(format!(
                                    "cannot lock keys in {}: {err}; trying again as descriptors come \
                                     free (raise `ulimit -n`; said again \
                                     at most every 30 s)",
                                    root.display()
                                )));
                            }
                            let _ = report.send(Acquired::Short {
                                key: Arc::clone(&key),
                                error: err.to_string(),
                            });
                            std::thread::sleep(delay);
                            delay = (delay * 2).min(Duration::from_secs(1));
                        }
                        Err(err) => {
                            let text = err.to_string();
                            let again = said.as_ref().is_none_or(|(last, at)| {
                                *last != text || at.elapsed() >= NOTICE_EVERY
                            });
                            if again {
                                let _ = report.send(Acquired::Notice(format!(
                                    "cannot lock key {key:?} in {}: {text}; trying again (said \
                                     again at most every 30 s)",
                                    KeyPaths::of(&root, &key).lock.display()
                                )));
                                said = Some((text, Instant::now()));
                            }
                            std::thread::sleep(delay);
                            delay = (delay * 2).min(Duration::from_secs(1));
                        }
                    }
                };
                if slots.is_some() {
                    let _ = report.send(Acquired::Locked(Arc::clone(&key)));
                }
                let slot = slots.map(|pool| {
                    let slot = pool.take();
                    // Which key it serves, for `lanes locks`.
                    let _ = write_holder(&slot, &key, &identity);
                    above_placements(slot)
                });
                let grant = Grant {
                    released: identity.holding(&key).into_released(),
                    key: above_placements(key_fd),
                    slot,
                    wait: Some(HostWait {
                        waited: asked.elapsed(),
                        holder: holder.map(Holder::named),
                    }),
                    fleet: None,
                };
                done_asking(&asking, &key, &given_up);
                let _ = report.send(Acquired::Granted(key, grant));
            });
        if let Err(err) = spawned {
            let _ = self.report.send(Acquired::Notice(format!(
                "cannot start a thread to wait for a key: {err}"
            )));
        }
        None
    }

    /// Stops asking for `key`'s lock (a request short of descriptors that nothing of this
    /// run would free: [`crate::core::Scheduler::host_key_short`]). A grant already on its way
    /// is still reported, and let go as one no job needs.
    pub(crate) fn give_up(&self, key: &str) {
        if let Some(flag) = self
            .asking
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key)
        {
            flag.store(true, Ordering::Relaxed);
        }
    }

    /// Which other process holds `key` now, if any (read from its lock file): this process,
    /// which may hold it for a job of the key or while it waits for a shared slot, is none.
    pub(crate) fn other_holder(&self, key: &str) -> Option<Holder> {
        let paths = KeyPaths::of(&self.root, key);
        let file = open_entry(&paths.lock)?;
        held_by_probe(&file).filter(|holder| !holder.is(&self.identity))
    }
}

/// What [`prepare`] would refuse, found without making anything (`--dry-run`): DIR that is
/// not a directory, a link to nothing, or DIR, its `keys/` and `slots/`, or (for a DIR to be
/// made) its nearest existing ancestor, that this user may not write in (`access(2)`). Whether
/// `flock` works on it is found only by the run.
///
/// # Errors
/// As [`prepare`]'s, in the same words.
pub(crate) fn check(dir: &Path) -> Result<(), LockDirError> {
    use nix::unistd::{access, AccessFlags};
    let writable = |path: &Path| access(path, AccessFlags::W_OK | AccessFlags::X_OK);
    match fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => Err(unusable(dir, "not a directory")),
        Ok(_) => {
            for sub in ["keys", "slots"] {
                let path = dir.join(sub);
                let made = fs::metadata(&path).is_ok();
                let checked = if made { &path } else { dir };
                writable(checked).map_err(|err| {
                    let err = io::Error::from_raw_os_error(err as i32);
                    if made {
                        unusable(
                            dir,
                            format!(
                                "{sub}/ is not writable by this user ({err}): give DIR and \
                                 what is in it the same permissions for every user of it"
                            ),
                        )
                    } else {
                        unusable(dir, format!("cannot create {sub}/: {err}"))
                    }
                })?;
            }
            Ok(())
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            if let Some(dangling) = dangling(dir) {
                return Err(dangling);
            }
            crate::containing_dir::check_creatable(dir)
                .map_err(|err| unusable(dir, format!("cannot create: {err}")))
        }
        Err(err) => Err(unusable(dir, err)),
    }
}

/// DIR, not found, as a symbolic link to nothing: no directory is made through it.
fn dangling(dir: &Path) -> Option<LockDirError> {
    fs::symlink_metadata(dir)
        .is_ok_and(|meta| meta.file_type().is_symlink())
        .then(|| {
            unusable(
                dir,
                "a symbolic link to a directory that does not exist: create it, or name another \
                 DIR",
            )
        })
}

/// Creates DIR and its subdirectories, and checks that it is writable and `flock` works on it.
fn prepare(dir: &Path) -> Result<(), LockDirError> {
    match fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => return Err(unusable(dir, "not a directory")),
        Ok(_) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            if let Some(dangling) = dangling(dir) {
                return Err(dangling);
            }
            fs::create_dir_all(dir).map_err(|err| unusable(dir, format!("cannot create: {err}")))?
        }
        Err(err) => return Err(unusable(dir, err)),
    }
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = fs::metadata(dir).map_or(0o755, |meta| meta.permissions().mode() & 0o7777);
        let _ = SHARED_MODE.set(mode);
    }
    for sub in ["keys", "slots"] {
        create_shared_dir(&dir.join(sub))
            .map_err(|err| unusable(dir, format!("cannot create {sub}/: {err}")))?;
        // Made by another user with a narrower mode: refused now, not met at the first key.
        nix::unistd::access(
            &dir.join(sub),
            nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
        )
        .map_err(|err| {
            unusable(
                dir,
                format!(
                    "{sub}/ is not writable by this user ({err}): give DIR and what is in it \
                     the same permissions for every user of it"
                ),
            )
        })?;
    }
    // Two open file descriptions of one file: while the first holds an exclusive lock, the
    // second must be refused (EWOULDBLOCK). A filesystem without working `flock` (NFS mounted
    // with `nolock`, some FUSE filesystems) would grant both, or fail.
    let probe = tempfile::Builder::new()
        .prefix(".probe-")
        .tempfile_in(dir)
        .map_err(|err| {
            if is_out_of_descriptors(&err) {
                unusable(
                    dir,
                    "cannot open a file in it: too many open files (raise `ulimit -n`)",
                )
            } else {
                unusable(dir, format!("not writable: {err}"))
            }
        })?;
    let second = File::open(probe.path()).map_err(|err| unusable(dir, err))?;
    if let Err(err) = flock(probe.as_file(), libc::LOCK_EX | libc::LOCK_NB) {
        return Err(unusable(dir, format!("flock does not work here: {err}")));
    }
    match flock(&second, libc::LOCK_EX | libc::LOCK_NB) {
        Err(err) if err.raw_os_error() == Some(libc::EWOULDBLOCK) => Ok(()),
        Ok(()) => Err(unusable(
            dir,
            "flock does not work here: a second lock of a locked file was granted \
             (a network filesystem without lock support?)",
        )),
        Err(err) => Err(unusable(dir, format!("flock does not work here: {err}"))),
    }
}

/// `fd` as a descriptor numbered 10 or more (close-on-exec), so that placing a job's locks on
/// 3 and 4 never overwrites one before it is placed; `fd` itself when it cannot be moved.
pub(crate) fn above_placements(fd: OwnedFd) -> OwnedFd {
    if fd.as_raw_fd() >= 10 {
        return fd;
    }
    match nix::fcntl::fcntl(fd.as_raw_fd(), nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(10)) {
        // SAFETY: a descriptor just returned by `fcntl`, owned by nothing else.
        Ok(moved) => unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(moved) },
        Err(_) => fd,
    }
}

/// DIR's permission bits (set once DIR is prepared): the subdirectories and files lanes
/// creates in DIR get them (files without the execute bits), whatever the creator's umask, so
/// that every user who may write DIR may use the keys, slots and tickets another user created
/// (a cron job as one user, a terminal as another).
static SHARED_MODE: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// The mode of the directories lanes creates in DIR.
fn shared_dir_mode() -> u32 {
    SHARED_MODE.get().copied().unwrap_or(0o755)
}

/// The mode of the files lanes creates in DIR; always readable by their owner.
fn shared_file_mode() -> u32 {
    (shared_dir_mode() & 0o666) | 0o600
}

/// Gives `file` (open) the shared mode when this user owns it and it has another; errors are
/// left to the users of the file to meet.
fn share_file(file: &File) {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = shared_file_mode();
    if let Ok(meta) = file.metadata() {
        if meta.uid() == nix::unistd::geteuid().as_raw() && meta.mode() & 0o7777 != mode {
            let _ = file.set_permissions(fs::Permissions::from_mode(mode));
        }
    }
}

/// Creates the directory `path` with the shared mode; one that exists is fine, if it is a
/// directory itself: a symbolic link there (another user of a shared DIR may have made one)
/// is refused, so that nothing lanes makes or locks lies outside DIR.
fn create_shared_dir(path: &Path) -> io::Result<()> {
    match fs::create_dir(path) {
        Ok(()) => {
            // Through a descriptor of the directory made: its name swapped for a link since
            // is not followed.
            if let Ok(made) = HeldDir::open(path) {
                let _ = nix::sys::stat::fchmod(
                    made.fd.as_raw_fd(),
                    nix::sys::stat::Mode::from_bits_truncate(shared_dir_mode()),
                );
            }
            Ok(())
        }
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
            existing_dir(path, &fs::symlink_metadata(path)?)
        }
        Err(err) => Err(err),
    }
}

/// Whether what is at `path` (`meta`, not following a link) may serve as a directory of
/// DIR: a directory itself, not a symbolic link to one nor anything else.
fn existing_dir(path: &Path, meta: &fs::Metadata) -> io::Result<()> {
    if meta.file_type().is_symlink() {
        Err(not_followed(path))
    } else if !meta.is_dir() {
        Err(io::Error::other(format!(
            "{} is there but is not a directory",
            shown_name(path)
        )))
    } else {
        Ok(())
    }
}

/// The error for a symbolic link met in DIR.
fn not_followed(path: &Path) -> io::Error {
    io::Error::other(format!(
        "{} is a symbolic link, and lanes follows no link inside a lock directory: remove it",
        shown_name(path)
    ))
}

/// `path`'s last component, as a message names a file of DIR (its full path may go through
/// a held directory's descriptor).
fn shown_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |name| name.to_string_lossy().into_owned(),
    )
}

/// Opens an existing file of DIR for reading (a ticket, a lock file to look at), without
/// following a symbolic link; `None` when it is not a regular file.
fn open_entry(path: &Path) -> Option<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    file.metadata().ok()?.is_file().then_some(file)
}

/// Opens (creating) a lock file for reading only, close-on-exec: a job gets it only as
/// descriptor 3 or 4 (`spawn`), never by accident, and a job that writes to its descriptor 3
/// (as a program handed a status descriptor would) gets EBADF instead of overwriting who holds
/// the key. `flock` needs no more; the holder line is written through a descriptor of its own
/// ([`write_holder`]).
///
/// A symbolic link is never followed (`O_NOFOLLOW`), and what is there must be a regular
/// file: a link planted in a shared DIR must not make lanes write, truncate or `chmod` a file
/// outside it, nor a FIFO there block it.
fn open_lock_file(path: &Path) -> io::Result<File> {
    // `O_CREAT` with reading only: std's `create` asks for write access too.
    let flags = libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CREAT;
    let opened = OpenOptions::new()
        .read(true)
        .mode(0o666)
        .custom_flags(flags)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(err) if err.raw_os_error() == Some(libc::ELOOP) => return Err(not_followed(path)),
        Err(err) => return Err(err),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file: remove it",
            shown_name(path)
        )));
    }
    {
        if meta.nlink() != 1 {
            // A hard link to a file elsewhere (another user of a shared DIR may make one):
            // its holder line and mode must not be written into that file.
            return Err(io::Error::other(format!(
                "{} has {} hard links, so it is also a file outside the lock directory: \
                 remove it",
                shown_name(path),
                meta.nlink()
            )));
        }
    }
    share_file(&file);
    Ok(file)
}

/// A directory of DIR held open (`O_DIRECTORY | O_NOFOLLOW`): what lanes makes and locks in
/// it is named through the descriptor (`/proc/self/fd/N/NAME`), so that the directory's name
/// swapped for a link to elsewhere after it was opened is never followed.
struct HeldDir {
    fd: OwnedFd,
}

impl HeldDir {
    /// Opens the directory `path`, whose last component must not be a symbolic link.
    fn open(path: &Path) -> io::Result<HeldDir> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|err| {
                // `O_DIRECTORY | O_NOFOLLOW` on a link fails with ENOTDIR (or ELOOP).
                if fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink()) {
                    not_followed(path)
                } else {
                    err
                }
            })?;
        Ok(HeldDir { fd: file.into() })
    }

    /// The path of the directory itself, through its descriptor.
    fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }
}

/// The files of one key.
pub(crate) struct KeyPaths {
    pub(crate) lock: PathBuf,
    pub(crate) queue: PathBuf,
    /// `keys/` held open while these paths go through it.
    _keys: Option<Arc<HeldDir>>,
}

impl KeyPaths {
    /// `keys/<sha256(key) in hex>.lock` and `.q`: no key can name a file outside DIR.
    pub(crate) fn of(root: &Path, key: &str) -> Self {
        let keys = root.join("keys");
        let hex = key_hex(key);
        KeyPaths {
            lock: keys.join(format!("{hex}.lock")),
            queue: keys.join(format!("{hex}.q")),
            _keys: None,
        }
    }

    /// The same, through `keys/` held open ([`HeldDir`]): for everything lanes makes or
    /// locks (messages name the files as [`KeyPaths::of`] does).
    fn held(root: &Path, key: &str) -> io::Result<Self> {
        let keys = HeldDir::open(&root.join("keys"))?;
        let hex = key_hex(key);
        let through = keys.path();
        Ok(KeyPaths {
            lock: through.join(format!("{hex}.lock")),
            queue: through.join(format!("{hex}.q")),
            _keys: Some(Arc::new(keys)),
        })
    }
}

/// `sha256(key)` in hex: a key's files' stem.
fn key_hex(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Who the lock file says holds it, if it is held now. A lock taken for the look is let go at
/// once.
fn held_by(file: &File) -> Option<Holder> {
    held_and_by(file).flatten().and_then(Holder::still_holding)
}

/// Whether the lock file is held now and, if so, who it says holds it (`Some(None)`: held by a
/// process that did not write who it is, such as one without write permission on it, or
/// written by something other than lanes). A lock taken for the look is let go at once.
fn held_and_by(file: &File) -> Option<Option<Holder>> {
    let probe = File::open(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
    held_and_by_probe(&probe)
}

/// Who the lock file `probe` (an open file description of its own) says holds it, if it is
/// held now; when it is free, the lock taken for the look goes with `probe`.
fn held_by_probe(probe: &File) -> Option<Holder> {
    held_and_by_probe(probe)
        .flatten()
        .and_then(Holder::still_holding)
}

/// [`held_and_by`] through `probe`, an open file description of its own: when the file is
/// free, the lock taken for the look goes with `probe`.
fn held_and_by_probe(probe: &File) -> Option<Option<Holder>> {
    match flock(probe, libc::LOCK_EX | libc::LOCK_NB) {
        Ok(()) => None,
        Err(_) => Some(read_holder(probe)),
    }
}

/// The longest holder line read: a key as long as a job's may be, escaped in JSON, and room
/// to spare. A longer first line (written by something other than lanes) is no holder, and
/// what a lock file holds past it is never read.
const HOLDER_LINE_MAX: usize = 1 << 20;

fn read_holder(file: &File) -> Option<Holder> {
    let mut buffer = vec![0; 4096];
    let mut len = 0;
    while len < buffer.len() {
        match file.read_at(&mut buffer[len..], len as u64) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
        if buffer[..len].contains(&b'\n') {
            break;
        }
        if len == buffer.len() {
            if len >= HOLDER_LINE_MAX {
                return None;
            }
            buffer.resize(buffer.len() * 2, 0);
        }
    }
    let line = buffer[..len].split(|&b| b == b'\n').next()?;
    serde_json::from_slice(line).ok()
}

static TICKETS: AtomicU64 = AtomicU64::new(0);

/// How often one key's same error is said again while lanes keeps trying to lock it, and
/// how often a shortage of descriptors is said again for all keys.
const NOTICE_EVERY: Duration = Duration::from_secs(30);

/// Whether `err` is a shortage of descriptors ([`crate::descriptors::ran_out`]).
fn is_out_of_descriptors(err: &io::Error) -> bool {
    crate::descriptors::ran_out(err)
}

/// Whether a shortage of descriptors met while locking keys is to be said now: the first
/// time, then at most every [`NOTICE_EVERY`], whichever key met it.
fn shortage_to_say() -> bool {
    static SAID: Mutex<Option<Instant>> = Mutex::new(None);
    let mut said = SAID
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let now = Instant::now();
    if said.is_some_and(|at| now.duration_since(at) < NOTICE_EVERY) {
        return false;
    }
    *said = Some(now);
    true
}

/// Waits for `key`'s lock, first come first served; returns it and who held it when this
/// process began to wait, if anyone did.
fn acquire_key(
    paths: &KeyPaths,
    key: &str,
    identity: &Identity,
) -> io::Result<(OwnedFd, Option<Holder>)> {
    if let Some(lock) = try_key_now(paths, key, identity)? {
        return Ok((lock.into(), None));
    }
    let lock = open_lock_file(&paths.lock)?;
    // This process itself, read while the key changed hands (its new holder had not written
    // its line yet), is nobody another process would be waiting behind.
    let mut holder = read_holder(&lock)
        .and_then(Holder::still_holding)
        .filter(|holder| !holder.is(identity));
    create_shared_dir(&paths.queue)?;
    // The line's directory held open: its name swapped for a link meanwhile is not followed.
    let queue = HeldDir::open(&paths.queue)?;
    let queue = queue.path();
    let (ticket, name) = take_ticket(&queue, key, identity)?;
    let result = wait_in_line(&queue, &lock, &name, identity, &mut holder);
    // Our ticket goes, whatever happened: the next waiter moves up.
    let _ = fs::remove_file(queue.join(&name));
    drop(ticket);
    result?;
    // Best effort: a lock file opened for reading only holds the key all the same.
    let _ = write_holder(&lock, key, identity);
    Ok((lock.into(), holder))
}

/// `key`'s lock, when it is free and nobody waits for it.
fn try_key_now(paths: &KeyPaths, key: &str, identity: &Identity) -> io::Result<Option<File>> {
    let queue_empty = match fs::symlink_metadata(&paths.queue) {
        Err(err) if err.kind() == io::ErrorKind::NotFound => true,
        Err(err) => return Err(err),
        Ok(meta) => {
            // A link, or no directory, where the key's line goes: said, never followed.
            existing_dir(&paths.queue, &meta)?;
            match fs::read_dir(&paths.queue) {
                // Tickets, and tickets being made (`.new-…`), are regular files; anything
                // else there is nobody's.
                Ok(mut entries) => !entries.any(|entry| {
                    entry
                        .ok()
                        .and_then(|entry| entry.file_type().ok())
                        .is_some_and(|kind| kind.is_file())
                }),
                // Gone since: its last waiter left.
                Err(err) if err.kind() == io::ErrorKind::NotFound => true,
                Err(err) => {
                    return Err(io::Error::other(format!(
                        "cannot read {}: {err}",
                        shown_name(&paths.queue)
                    )))
                }
            }
        }
    };
    if !queue_empty {
        return Ok(None);
    }
    let lock = open_lock_file(&paths.lock)?;
    if flock(&lock, libc::LOCK_EX | libc::LOCK_NB).is_err() {
        return Ok(None);
    }
    // Best effort: a lock file opened for reading only holds the key all the same.
    let _ = write_holder(&lock, key, identity);
    Ok(Some(lock))
}

/// Creates this waiter's ticket, locked before it appears under its name.
fn take_ticket(queue: &Path, key: &str, identity: &Identity) -> io::Result<(File, String)> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let seq = TICKETS.fetch_add(1, Ordering::Relaxed);
    let name = format!("{now:020}-{:010}-{seq:010}", identity.pid);
    let mut file = tempfile::Builder::new()
        .prefix(".new-")
        .tempfile_in(queue)?;
    flock(file.as_file(), libc::LOCK_EX | libc::LOCK_NB)?;
    // Readable by the waiters behind it (they wait on it with `flock`) and `lanes locks`.
    share_file(file.as_file());
    let text = serde_json::to_string(&identity.holding(key)).map_err(io::Error::other)?;
    file.write_all(text.as_bytes())?;
    let file = file.persist(queue.join(&name)).map_err(|err| err.error)?;
    Ok((file, name))
}

/// Waits until `name` is the first ticket and the key's lock is ours.
fn wait_in_line(
    queue: &Path,
    lock: &File,
    name: &str,
    identity: &Identity,
    holder: &mut Option<Holder>,
) -> io::Result<()> {
    // Tickets waited on whose file could not be removed after: passed all the same, so
    // that none is waited on twice.
    let mut passed: Vec<String> = Vec::new();
    loop {
        let ahead = tickets(queue)?
            .into_iter()
            .rfind(|ticket| ticket.as_str() < name && !passed.contains(ticket));
        match ahead {
            None => {
                if holder.is_none() {
                    *holder = held_by(lock).filter(|holder| !holder.is(identity));
                }
                return flock(lock, libc::LOCK_EX);
            }
            Some(before) => {
                let path = queue.join(&before);
                let Some(file) = open_entry(&path) else {
                    // Gone meanwhile, or not a ticket after all.
                    passed.push(before);
                    continue;
                };
                // Blocks until that waiter got the key or gave up (or died).
                flock(&file, libc::LOCK_EX)?;
                if fs::remove_file(&path).is_err() {
                    passed.push(before);
                }
            }
        }
    }
}

/// The key's ticket names, in line order: regular files only (temporary files, and
/// directories, links or anything else someone put there, left out).
fn tickets(queue: &Path) -> io::Result<Vec<String>> {
    let mut names: Vec<String> = fs::read_dir(queue)?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            entry.file_type().ok()?.is_file().then_some(())?;
            entry.file_name().into_string().ok()
        })
        .filter(|name| !name.starts_with('.'))
        .collect();
    names.sort_unstable();
    Ok(names)
}

/// Writes who holds the key into its lock file (the lock is held), through a descriptor of its
/// own opened for writing: the locked one, which the key's job gets, is read-only
/// ([`open_lock_file`]). It is opened again through `/proc/self/fd` (the same file, whatever
/// its name points to now); a lock file another user made without write permission for this
/// one is left as it is.
fn write_holder(file: &impl AsRawFd, key: &str, identity: &Identity) -> io::Result<()> {
    write_line(file, &identity.holding(key))
}

/// Writes `holder`'s line over the lock file's first line, as [`write_holder`] does.
fn write_line(file: &impl AsRawFd, holder: &Holder) -> io::Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(format!("/proc/self/fd/{}", file.as_raw_fd()))?;
    let text = serde_json::to_string(holder).map_err(io::Error::other)?;
    // One line written over the old one in one call, then the file cut after it: a reader
    // reads up to the first newline and never sees half of a line mixed with another.
    let line = format!("{text}\n");
    file.write_all_at(line.as_bytes(), 0)?;
    file.set_len(line.len() as u64)
}

/// `--shared-max-concurrent`: this process's side of the shared slots. A slot is taken at once
/// when one is free; else one thread per slot waits on it with a blocking `flock` while any
/// request is open, and the first to get its slot hands it to the oldest request (a slot got
/// when no request is left is let go at once).
struct SlotPool {
    /// `slots/`, through `_held`.
    dir: PathBuf,
    _held: HeldDir,
    count: usize,
    state: Mutex<PoolState>,
    wanted: Condvar,
}

#[derive(Default)]
struct PoolState {
    requests: VecDeque<std_mpsc::SyncSender<OwnedFd>>,
    waiters_started: bool,
}

impl SlotPool {
    fn path(&self, slot: usize) -> PathBuf {
        self.dir.join(format!("{slot}.lock"))
    }

    /// A free shared slot, if one is free now.
    fn try_take(&self) -> Option<OwnedFd> {
        (0..self.count).find_map(|slot| {
            let file = open_lock_file(&self.path(slot)).ok()?;
            flock(&file, libc::LOCK_EX | libc::LOCK_NB).ok()?;
            Some(file.into())
        })
    }

    /// Blocks until this process holds a shared slot.
    fn take(self: &Arc<Self>) -> OwnedFd {
        loop {
            if let Some(fd) = self.try_take() {
                return fd;
            }
            let (tx, rx) = std_mpsc::sync_channel(1);
            {
                let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                state.requests.push_back(tx);
                if !state.waiters_started {
                    state.waiters_started = true;
                    for slot in 0..self.count {
                        let pool = Arc::clone(self);
                        let _ = std::thread::Builder::new()
                            .name("lanes-slot".into())
                            .spawn(move || pool.wait_on(slot));
                    }
                }
            }
            self.wanted.notify_all();
            if let Ok(fd) = rx.recv() {
                return fd;
            }
        }
    }

    /// One slot's waiter: while requests are open, waits for the slot and hands it over.
    fn wait_on(&self, slot: usize) {
        loop {
            {
                let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
                let _state = self
                    .wanted
                    .wait_while(state, |s| s.requests.is_empty())
                    .unwrap_or_else(|e| e.into_inner());
            }
            let Ok(file) = open_lock_file(&self.path(slot)) else {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            };
            if flock(&file, libc::LOCK_EX).is_err() {
                continue;
            }
            let mut fd: OwnedFd = file.into();
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            while let Some(request) = state.requests.pop_front() {
                match request.try_send(fd) {
                    Ok(()) => break,
                    Err(std_mpsc::TrySendError::Full(back))
                    | Err(std_mpsc::TrySendError::Disconnected(back)) => fd = back,
                }
            }
            // Served, or no request left: a slot not handed over is let go as `fd` drops.
        }
    }
}

/// `lanes locks DIR`: the keys held in DIR, their holders and their waiters ("N ahead": the
/// holder and the waiters before it), then how many shared slots are held. Reads only: a lock
/// taken for a look is let go at once, and a ticket given up is left for a waiter to remove.
///
/// # Errors
/// DIR is not a lock directory (no `keys/` in it) or cannot be read.
pub(crate) fn describe(dir: &Path) -> Result<String, LockDirError> {
    let unlisted = |why: String| LockDirError::Unlisted {
        dir: dir.display().to_string(),
        why,
    };
    match fs::metadata(dir) {
        Err(err) => return Err(unlisted(format!("cannot be read: {err}"))),
        Ok(meta) if !meta.is_dir() => return Err(unlisted("not a directory".to_owned())),
        Ok(_) => {}
    }
    let keys = dir.join("keys");
    let entries = match fs::read_dir(&keys) {
        Ok(entries) => entries,
        // A directory no lanes has locked a key in yet.
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            return Ok("no key is held (no lanes has used this directory yet)\n".to_owned())
        }
        Err(err) => {
            return Err(unlisted(format!(
                "not a lock directory ({}: {err})",
                keys.display()
            )))
        }
    };
    let mut listed = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|ext| ext != "lock") {
            continue;
        }
        let Some(file) = open_entry(&path) else {
            continue;
        };
        let held = held_and_by(&file);
        let holder = held.clone().flatten();
        let waiters = live_tickets(&path.with_extension("q"));
        if held.is_none() && waiters.is_empty() {
            continue;
        }
        let key = holder
            .as_ref()
            .map(|h| format!("{:?}", h.key))
            .or_else(|| waiters.first().map(|w| format!("{:?}", w.key)))
            .unwrap_or_else(|| format!("the key of {}", shown_name(&path)));
        listed.push((key, held.is_some(), holder, waiters));
    }
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    let slots: Vec<PathBuf> = fs::read_dir(dir.join("slots"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|ext| ext == "lock"))
                .collect()
        })
        .unwrap_or_default();
    // The held slots, each with the key it serves (written by its holder).
    let held_slots: Vec<Option<Holder>> = slots
        .iter()
        .filter_map(|path| {
            let file = open_entry(path)?;
            match flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
                Err(err) if err.raw_os_error() == Some(libc::EWOULDBLOCK) => {
                    Some(read_holder(&file))
                }
                _ => None,
            }
        })
        .collect();
    // A slot's line is written as its key's: the same holder.
    let in_a_slot = |h: &Holder| held_slots.iter().flatten().any(|slot| slot == h);
    let mut text = String::new();
    let ours = own_pid_namespace();
    for (key, held, holder, waiters) in &listed {
        match holder {
            Some(h) if h.released => text.push_str(&format!(
                "{key}: held, but not by a lanes: the last one to hold it, {}, let it go; a \
                 process its job left, or a program other than lanes, holds the key\n",
                h.shown(ours)
            )),
            Some(h) if !h.elsewhere(ours) && exited(h.pid) => text.push_str(&format!(
                "{key}: held by {}, which has exited: a process it left holds the key\n",
                h.shown(ours)
            )),
            Some(h) if h.shared_slots && !in_a_slot(h) => text.push_str(&format!(
                "{key}: held by {}, its job waiting for a shared slot\n",
                h.shown(ours)
            )),
            Some(h) => text.push_str(&format!("{key}: held by {}\n", h.shown(ours))),
            None if *held => text.push_str(&format!(
                "{key}: held by a process that did not write who it is in the lock file\n"
            )),
            None => text.push_str(&format!("{key}: being handed over\n")),
        }
        let before = usize::from(*held);
        for (i, waiter) in waiters.iter().enumerate() {
            text.push_str(&format!(
                "  waiting: {}, {} ahead\n",
                waiter.shown(ours),
                before + i
            ));
        }
    }
    if listed.is_empty() {
        text.push_str("no key is held\n");
    }
    if !slots.is_empty() {
        text.push_str(&format!(
            "shared slots: {} of {} held\n",
            held_slots.len(),
            slots.len()
        ));
    }
    Ok(text)
}

/// Whether process `pid` of this PID namespace has exited: none exists (`kill(pid, 0)` fails
/// with ESRCH) or it is a zombie not yet reaped (`/proc/PID/stat`). A holder that exited while
/// a process it left holds its key. The pid of a holder in another PID namespace
/// ([`Holder::elsewhere`]) means nothing here, and is not asked about.
fn exited(pid: u32) -> bool {
    i32::try_from(pid).is_ok_and(|pid| {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            == Err(nix::errno::Errno::ESRCH)
            || super::unix::proc_stat(pid).is_some_and(|stat| matches!(stat.state, 'Z' | 'X'))
    })
}

/// The tickets of a key's waiters that are alive, in line order.
fn live_tickets(queue: &Path) -> Vec<Holder> {
    let Ok(names) = tickets(queue) else {
        return Vec::new();
    };
    names
        .into_iter()
        .filter_map(|name| {
            let file = open_entry(&queue.join(name))?;
            // A ticket whose lock can be taken was given up.
            if flock(&file, libc::LOCK_SH | libc::LOCK_NB).is_ok() {
                return None;
            }
            read_holder(&file)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shortage_of_descriptors_is_known_under_the_errors_that_name_a_path() {
        #[derive(Debug)]
        struct AtPath(io::Error);
        impl std::fmt::Display for AtPath {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{} at path \"x\"", self.0)
            }
        }
        impl std::error::Error for AtPath {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let emfile = || io::Error::from_raw_os_error(libc::EMFILE);
        assert!(is_out_of_descriptors(&emfile()));
        assert!(is_out_of_descriptors(&io::Error::other(emfile())));
        assert!(is_out_of_descriptors(&io::Error::other(AtPath(emfile()))));
        assert!(!is_out_of_descriptors(&io::Error::other(AtPath(
            io::Error::from_raw_os_error(libc::ENOENT)
        ))));
        // As the temporary-file crate makes it: the OS error in the text only.
        let at_path = io::Error::other(format!("{} at path \"/proc/self/fd/39/.new-x\"", emfile()));
        assert!(is_out_of_descriptors(&at_path));
    }

    fn identity(pid: u32) -> Identity {
        Identity {
            pid,
            run: "2026-01-01T00:00:00.000Z".into(),
            pid_namespace: Some(4026531836),
            shared_slots: false,
        }
    }

    #[test]
    fn a_holder_is_this_process_only_in_its_namespace_and_run() {
        let me = identity(1);
        assert!(me.holding("k").is(&me));
        let other_namespace = Holder {
            pid_namespace: Some(4026532000),
            ..me.holding("k")
        };
        assert!(!other_namespace.is(&me));
        assert!(other_namespace.elsewhere(me.pid_namespace));
        assert_eq!(
            other_namespace.shown(me.pid_namespace),
            "pid 1 of another PID namespace (run 2026-01-01T00:00:00.000Z)"
        );
        let other_run = Holder {
            run: "2026-01-01T00:00:00.001Z".into(),
            ..me.holding("k")
        };
        assert!(!other_run.is(&me));
        // A line written before holders named their namespace: taken to be the reader's.
        let old: Holder =
            serde_json::from_str(r#"{"pid":1,"run":"2026-01-01T00:00:00.000Z","key":"k"}"#)
                .unwrap();
        assert!(old.is(&me));
        assert!(!old.elsewhere(me.pid_namespace));
        assert_eq!(
            old.shown(me.pid_namespace),
            "pid 1 (run 2026-01-01T00:00:00.000Z)"
        );
    }

    #[test]
    fn a_key_names_a_file_inside_the_directory_whatever_it_is() {
        let root = Path::new("/locks");
        for key in ["../../etc/passwd", "/abs", "a/b", "", "ключ", "x\ny"] {
            let paths = KeyPaths::of(root, key);
            assert_eq!(paths.lock.parent(), Some(root.join("keys").as_path()));
            let name = paths.lock.file_name().unwrap().to_str().unwrap().to_owned();
            assert_eq!(name.len(), 64 + ".lock".len(), "{name}");
            assert!(name
                .trim_end_matches(".lock")
                .bytes()
                .all(|b| b.is_ascii_hexdigit()));
        }
        assert_ne!(KeyPaths::of(root, "a").lock, KeyPaths::of(root, "b").lock);
    }

    #[test]
    fn the_check_refuses_what_prepare_refuses_and_makes_nothing() {
        let scratch = tempfile::tempdir().unwrap();
        let file = scratch.path().join("file");
        fs::write(&file, "").unwrap();
        assert_eq!(
            check(&file).unwrap_err().to_string(),
            prepare(&file).unwrap_err().to_string()
        );
        let dangling = scratch.path().join("dangling");
        std::os::unix::fs::symlink(scratch.path().join("nowhere"), &dangling).unwrap();
        assert_eq!(
            check(&dangling).unwrap_err().to_string(),
            prepare(&dangling).unwrap_err().to_string()
        );
        let below = file.join("sub");
        assert_eq!(
            check(&below).unwrap_err().to_string(),
            prepare(&below).unwrap_err().to_string()
        );
        let missing = scratch.path().join("a/b");
        check(&missing).unwrap();
        assert!(!scratch.path().join("a").exists());
    }

    #[test]
    fn a_file_is_not_a_lock_directory_and_a_missing_one_is_created() {
        let scratch = tempfile::tempdir().unwrap();
        let file = scratch.path().join("file");
        fs::write(&file, "").unwrap();
        let err = prepare(&file).unwrap_err().to_string();
        assert_eq!(
            err,
            format!("--lock-dir {}: not a directory", file.display())
        );
        let missing = scratch.path().join("a/b");
        prepare(&missing).unwrap();
        assert!(missing.join("keys").is_dir() && missing.join("slots").is_dir());
        assert_eq!(describe(&missing).unwrap(), "no key is held\n");
    }

    #[test]
    fn a_held_key_is_refused_to_others_and_names_its_holder_until_let_go() {
        let scratch = tempfile::tempdir().unwrap();
        prepare(scratch.path()).unwrap();
        let paths = KeyPaths::of(scratch.path(), "db");
        let held = try_key_now(&paths, "db", &identity(7))
            .unwrap()
            .expect("free");
        assert!(try_key_now(&paths, "db", &identity(8)).unwrap().is_none());
        let file = File::open(&paths.lock).unwrap();
        let holder = held_by(&file).expect("held");
        assert_eq!((holder.pid, holder.key.as_str()), (7, "db"));
        drop(held);
        assert_eq!(held_by(&file), None);
        assert!(try_key_now(&paths, "db", &identity(8)).unwrap().is_some());
    }

    #[test]
    fn waiters_get_the_key_in_the_order_they_asked_and_a_dead_waiter_is_skipped() {
        let scratch = tempfile::tempdir().unwrap();
        let root = scratch.path().to_path_buf();
        prepare(&root).unwrap();
        let paths = KeyPaths::of(&root, "k");
        let holder = try_key_now(&paths, "k", &identity(1))
            .unwrap()
            .expect("free");
        // A waiter that gave up (its ticket no longer locked), ahead of everyone.
        fs::create_dir_all(&paths.queue).unwrap();
        fs::write(
            paths.queue.join(format!("{:020}-0000000000-0000000000", 0)),
            "",
        )
        .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let mut threads = Vec::new();
        for pid in 2..=4u32 {
            let tx = tx.clone();
            let root = root.clone();
            threads.push(std::thread::spawn(move || {
                let paths = KeyPaths::of(&root, "k");
                let (fd, held_by) = acquire_key(&paths, "k", &identity(pid)).unwrap();
                tx.send((pid, held_by.map(|h| h.pid))).unwrap();
                drop(fd);
            }));
            // The next waiter asks once this one's ticket is in line.
            let live = || {
                tickets(&paths.queue)
                    .unwrap_or_default()
                    .iter()
                    .filter(|name| !name.starts_with(&format!("{:020}", 0)))
                    .count()
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            while live() < pid as usize - 1 {
                assert!(Instant::now() < deadline, "waiter {pid} never queued");
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        drop(holder);
        let order: Vec<(u32, Option<u32>)> = (2..=4).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(
            order[0],
            (2, Some(1)),
            "the first waiter, told who held the key"
        );
        assert_eq!(order.iter().map(|o| o.0).collect::<Vec<_>>(), [2, 3, 4]);
        for thread in threads {
            thread.join().unwrap();
        }
        assert!(tickets(&paths.queue).unwrap().is_empty(), "no ticket left");
    }
}
