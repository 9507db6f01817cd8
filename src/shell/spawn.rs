//! Starting a job: its command line, environment, working directory and pipes prepared
//! ([`spawn`]), and its process started: stdin from /dev/null, stdout and stderr to the given
//! pipes (or /dev/null), a process group of its own, an empty signal mask and every signal at
//! its default action, in the given directory, with a prepared environment built once for the
//! run instead of at every spawn.
//!
//! On x86-64 every job is started by hand ([`clone_child`]): `clone3(2)` with `CLONE_VM |
//! CLONE_VFORK` on a stack of its own, as glibc's posix_spawn does ([`start_child`]), and with
//! `CLONE_INTO_CGROUP` for a job contained in a cgroup, which posix_spawn cannot ask for. The
//! child resets only the signals `lanes` may have changed
//! ([`super::signal::CHANGED_DISPOSITIONS`], 15 system calls), where posix_spawn makes one
//! for each of the 64, and `dup2`s a `/dev/null` opened once.
//!
//! Elsewhere a job outside a cgroup is started with `posix_spawn(3)`. Rust's `Command` also
//! uses posix_spawn, but cannot ask for every signal to be reset: glibc then starts the child
//! with its two internal signals (32 and 33) ignored. Asking here with `POSIX_SPAWN_SETSIGDEF`
//! for all signals, those two included, keeps SPEC §2's promise. glibc's child keeps pending
//! what was sent to lanes' process group before its `setpgid`, which lanes' own child discards
//! ([`discard_pending_signals`]); README "Limits" says so.

use crate::descriptors::is_passing_shortage;
use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use nix::libc;

use std::path::PathBuf;
use std::time::Duration;

use tokio::net::unix::pipe;
use tokio::sync::oneshot;

use super::signal::{bit, CHANGED_DISPOSITIONS};
use super::unix::set_nonblocking;
use crate::config::Backend;
use crate::core::ExitFacts;

/// The environment every job of a run starts from: lanes' own plus the run's additions, as
/// `KEY=VALUE` strings, built once.
#[derive(Debug, Default)]
pub(crate) struct BaseEnv {
    entries: Vec<(Vec<u8>, CString)>,
}

impl BaseEnv {
    /// lanes' environment with `additions` applied (later ones win). Variables whose name or
    /// value holds a NUL byte cannot be passed and are left out.
    pub(crate) fn new(additions: &[(String, String)]) -> Self {
        let mut vars: Vec<(Vec<u8>, Vec<u8>)> = std::env::vars_os()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect();
        for (key, value) in additions {
            vars.retain(|(k, _)| k != key.as_bytes());
            vars.push((key.as_bytes().to_vec(), value.as_bytes().to_vec()));
        }
        let entries = vars
            .into_iter()
            .filter_map(|(key, value)| {
                let mut pair = key.clone();
                pair.push(b'=');
                pair.extend_from_slice(&value);
                CString::new(pair).ok().map(|c| (key, c))
            })
            .collect();
        BaseEnv { entries }
    }

    /// The same without the variables `names` (lanes' own, set per job where they apply:
    /// an inherited `LANES_RESOURCE_GPU` must not reach a job granted no GPU).
    pub(crate) fn without(mut self, names: &[String]) -> Self {
        self.entries
            .retain(|(key, _)| !names.iter().any(|name| name.as_bytes() == key.as_slice()));
        self
    }
}

/// Where each program name was found on lanes' `PATH`, looked up once per run instead of at
/// every spawn (where `posix_spawnp` tries `execve` in each directory of `PATH` in turn, and
/// fails in every one before the right one).
///
/// The search follows `posix_spawnp`'s (POSIX `execvp`): a name holding a `/` is used as it is;
/// otherwise the first directory of `PATH` (`/bin:/usr/bin` when unset) holding a regular file
/// that may be executed. Only absolute finds are kept: a relative directory in `PATH` (an empty
/// one means `.`) depends on the job's working directory, so such names are left to
/// `posix_spawnp` every time, as are names found nowhere (for its exact error).
#[derive(Debug, Default)]
pub(crate) struct ProgramPaths {
    found: Mutex<HashMap<Vec<u8>, CString>>,
}

impl ProgramPaths {
    /// The absolute path `name` runs from, if it can be known before the spawn.
    fn resolve(&self, name: &[u8]) -> Option<CString> {
        if name.is_empty() || name.contains(&b'/') {
            return None;
        }
        if let Some(path) = self.found().get(name) {
            return Some(path.clone());
        }
        let search = std::env::var_os("PATH");
        let search = search
            .as_deref()
            .map_or(&b"/bin:/usr/bin"[..], OsStr::as_bytes);
        let found = find_on_path(search, name)?;
        self.found().insert(name.to_vec(), found.clone());
        Some(found)
    }

    /// Forgets where `name` was found (it could not be run from there any more).
    fn forget(&self, name: &[u8]) {
        self.found().remove(name);
    }

    fn found(&self) -> MutexGuard<'_, HashMap<Vec<u8>, CString>> {
        self.found.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The file the program `name` runs from, as its one name (links followed): `name` itself when
/// it holds a `/`, else found on `PATH` as [`ProgramPaths`] finds it; `None` when not found.
/// Two spellings of one program (`sh`, `/bin/sh`, `/usr/bin/sh` where `/bin` is a link) give
/// one file.
pub(crate) fn program_file(name: &str) -> Option<std::path::PathBuf> {
    let path = if name.contains('/') {
        std::path::PathBuf::from(name)
    } else {
        let search = std::env::var_os("PATH");
        let search = search
            .as_deref()
            .map_or(&b"/bin:/usr/bin"[..], OsStr::as_bytes);
        let found = find_on_path(search, name.as_bytes())?;
        std::path::PathBuf::from(OsStr::from_bytes(found.as_bytes()))
    };
    std::fs::canonicalize(path).ok()
}

/// The first `dir/name` along `search` (a `PATH` value) that is a regular file this process
/// may execute; `None` when a relative directory comes first or nothing is found.
fn find_on_path(search: &[u8], name: &[u8]) -> Option<CString> {
    for dir in search.split(|&b| b == b':') {
        if !dir.starts_with(b"/") {
            // `.` or a relative directory: resolved against the job's own directory.
            return None;
        }
        let mut candidate = dir.to_vec();
        if !candidate.ends_with(b"/") {
            candidate.push(b'/');
        }
        candidate.extend_from_slice(name);
        let path = Path::new(OsStr::from_bytes(&candidate));
        let is_file = path.metadata().is_ok_and(|meta| meta.is_file());
        if is_file && nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok() {
            return CString::new(candidate).ok();
        }
    }
    None
}

/// One process to start.
pub(crate) struct Request<'a> {
    pub program: &'a OsStr,
    pub args: &'a [std::ffi::OsString],
    pub base_env: &'a BaseEnv,
    /// Where programs were found on `PATH`.
    pub programs: &'a ProgramPaths,
    /// Set on top of the base environment (later ones win).
    pub env: &'a [(&'a str, &'a OsStr)],
    pub cwd: &'a Path,
    /// Write ends for the child's stdout and stderr; `None`: /dev/null.
    pub stdout: Option<&'a OwnedFd>,
    pub stderr: Option<&'a OwnedFd>,
    /// The cgroup (an open cgroup2 directory) the process is born into; `None`: lanes' own.
    pub cgroup: Option<RawFd>,
    /// `--lock-dir`: descriptors the child gets as 3 (its key's lock) and 4 (its shared
    /// slot's); each at least 10, so that placing one never overwrites another.
    pub locks: [Option<RawFd>; 2],
}

/// Whether every job is started by lanes' own child ([`clone_child`]), and not only one born
/// into a cgroup: where the `CLONE_VM` child is built (x86-64). It resets only the signals
/// lanes may have changed, where posix_spawn, asked to reset all, makes a system call for each
/// of the 64, and it can set the job's descriptor limit
/// ([`super::unix::raise_descriptor_limit`]), which posix_spawn cannot.
pub(crate) const EVERY_JOB_BY_OWN_CHILD: bool = cfg!(target_arch = "x86_64");

/// Starts the process; returns its pid, which is also its process group id.
///
/// # Errors
/// The error `posix_spawnp` would report: the program not found (ENOENT), the directory missing,
/// EAGAIN/EMFILE/ENFILE when processes or descriptors run short, or a NUL byte in an argument.
pub(crate) fn spawn_process(request: &Request<'_>) -> io::Result<i32> {
    let program = cstring(request.program.as_bytes())?;
    let mut argv_owned = vec![program.clone()];
    for arg in request.args {
        argv_owned.push(cstring(arg.as_bytes())?);
    }
    let overrides: Vec<CString> = request
        .env
        .iter()
        .map(|(key, value)| {
            let mut pair = key.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            cstring(&pair)
        })
        .collect::<io::Result<_>>()?;
    let overridden = |key: &[u8]| request.env.iter().any(|(k, _)| k.as_bytes() == key);
    let mut envp: Vec<*const libc::c_char> = request
        .base_env
        .entries
        .iter()
        .filter(|(key, _)| !overridden(key))
        .map(|(_, pair)| pair.as_ptr())
        .chain(overrides.iter().map(|pair| pair.as_ptr()))
        .collect();
    envp.push(std::ptr::null());
    let mut argv: Vec<*const libc::c_char> = argv_owned.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let cwd = cstring(request.cwd.as_os_str().as_bytes())?;
    let dev_null = c"/dev/null";
    if EVERY_JOB_BY_OWN_CHILD || request.cgroup.is_some() {
        let cgroup = request.cgroup;
        debug_assert_eq!(
            super::signal::unchanged_are_default(),
            Ok(()),
            "a signal outside CHANGED_DISPOSITIONS is not at its default"
        );
        let name = request.program.as_bytes();
        let resolved = request.programs.resolve(name);
        let plan = ChildPlan {
            path: resolved
                .as_ref()
                .map_or(argv_owned[0].as_ptr(), |p| p.as_ptr()),
            argv: argv.as_ptr(),
            argc: argv_owned.len(),
            envp: envp.as_ptr(),
            cwd: cwd.as_ptr(),
            dev_null: dev_null.as_ptr(),
            null: opened_dev_null(),
            descriptor_limit: super::unix::job_descriptor_limit(),
            stdout: request.stdout.map(AsRawFd::as_raw_fd),
            stderr: request.stderr.map(AsRawFd::as_raw_fd),
            locks: request.locks,
            failure: std::ptr::null(),
        };
        return match clone_child(&plan, cgroup) {
            Err(err) if resolved.is_some() && is_gone(&err) => {
                // Gone or changed since it was found: search again, as posix_spawnp does.
                request.programs.forget(name);
                let plan = ChildPlan {
                    path: argv_owned[0].as_ptr(),
                    ..plan
                };
                clone_child(&plan, cgroup)
            }
            other => other,
        };
    }

    let mut actions = FileActions::new()?;
    let mut attr = Attributes::new()?;
    // SAFETY: every pointer passed below points into values that outlive the call
    // (`actions`, `attr`, the CStrings and the vectors above); the descriptors are open.
    unsafe {
        check(libc::posix_spawn_file_actions_addopen(
            &mut actions.0,
            0,
            dev_null.as_ptr(),
            libc::O_RDONLY,
            0,
        ))?;
        for (target, pipe) in [(1, request.stdout), (2, request.stderr)] {
            match pipe {
                Some(fd) => check(libc::posix_spawn_file_actions_adddup2(
                    &mut actions.0,
                    fd.as_raw_fd(),
                    target,
                ))?,
                None => check(libc::posix_spawn_file_actions_addopen(
                    &mut actions.0,
                    target,
                    dev_null.as_ptr(),
                    libc::O_WRONLY,
                    0,
                ))?,
            }
        }
        for (target, lock) in (LOCK_FD_FIRST..).zip(request.locks) {
            if let Some(fd) = lock {
                check(libc::posix_spawn_file_actions_adddup2(
                    &mut actions.0,
                    fd,
                    target,
                ))?;
            }
        }
        check(libc::posix_spawn_file_actions_addchdir_np(
            &mut actions.0,
            cwd.as_ptr(),
        ))?;

        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        check(libc::posix_spawnattr_setsigmask(&mut attr.0, &empty))?;
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        add_internal_signals(&mut all);
        check(libc::posix_spawnattr_setsigdefault(&mut attr.0, &all))?;
        check(libc::posix_spawnattr_setpgroup(&mut attr.0, 0))?;
        let flags = libc::POSIX_SPAWN_SETPGROUP
            | libc::POSIX_SPAWN_SETSIGMASK
            | libc::POSIX_SPAWN_SETSIGDEF;
        check(libc::posix_spawnattr_setflags(
            &mut attr.0,
            flags as libc::c_short,
        ))?;

        let mut pid: libc::pid_t = 0;
        let name = request.program.as_bytes();
        if let Some(path) = request.programs.resolve(name) {
            let code = libc::posix_spawn(
                &mut pid,
                path.as_ptr(),
                &actions.0,
                &attr.0,
                argv.as_ptr().cast(),
                envp.as_ptr().cast(),
            );
            match code {
                0 => return Ok(pid),
                // Gone or changed since it was found: search again, as posix_spawnp does.
                libc::ENOENT | libc::ENOTDIR | libc::EACCES => request.programs.forget(name),
                _ => return Err(io::Error::from_raw_os_error(code)),
            }
        }
        check(libc::posix_spawnp(
            &mut pid,
            argv_owned[0].as_ptr(),
            &actions.0,
            &attr.0,
            argv.as_ptr().cast(),
            envp.as_ptr().cast(),
        ))?;
        Ok(pid)
    }
}

/// `/dev/null` opened once for the whole run, for reading and for writing, close-on-exec:
/// what every job's stdin and uncaptured streams are `dup2`'d from, instead of the child
/// opening the path at each spawn. -1 for one that could not be opened (the child then opens
/// the path, and fails the spawn with its error). Kept open until `lanes` exits.
fn opened_dev_null() -> [RawFd; 2] {
    static OPENED: std::sync::OnceLock<[RawFd; 2]> = std::sync::OnceLock::new();
    *OPENED.get_or_init(|| {
        // SAFETY: opens a path given as a C string; the descriptors are never closed, so no
        // other owner can come to hold the same numbers.
        [libc::O_RDONLY, libc::O_WRONLY]
            .map(|mode| unsafe { libc::open(c"/dev/null".as_ptr(), mode | libc::O_CLOEXEC) })
    })
}

/// What the child does between `clone3` and `execve`, all prepared beforehand: after a fork
/// of a multi-threaded process only async-signal-safe calls may be made (POSIX `fork`), so
/// the child allocates nothing and takes no lock. A `CLONE_VM` child (x86-64) also shares
/// lanes' memory: it writes nothing but its own stack, errno (this thread's, unused while
/// `CLONE_VFORK` holds the thread) and, if a step fails, `failure`, and reads this plan in
/// place.
#[derive(Clone, Copy)]
struct ChildPlan {
    /// The program's path, or its name (without a `/`) to look up on `PATH`: execvpe(3)
    /// tells them apart.
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    /// The number of arguments in `argv` (for the size of a `CLONE_VM` child's stack).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    argc: usize,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    dev_null: *const libc::c_char,
    /// `/dev/null` open for reading and for writing, in that order ([`opened_dev_null`]);
    /// -1: open `dev_null` instead ([`dev_null_for`]).
    null: [RawFd; 2],
    /// The limit on open descriptors (soft, hard) to set before the `exec`: the one `lanes`
    /// was started with, when it raised its own ([`super::unix::raise_descriptor_limit`]).
    descriptor_limit: Option<[u64; 2]>,
    stdout: Option<RawFd>,
    stderr: Option<RawFd>,
    locks: [Option<RawFd>; 2],
    /// Where a `CLONE_VM` child puts the errno of the step that failed (see [`fail`]); null
    /// for a child that does not share lanes' memory.
    failure: *const AtomicI32,
}

/// The descriptor of a job's first lock (`--lock-dir`): its key's; the shared slot's follows.
const LOCK_FD_FIRST: RawFd = 3;

/// `struct clone_args` of `clone3(2)`, up to `cgroup` (`CLONE_ARGS_SIZE_VER2`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `CLONE_INTO_CGROUP` (Linux 5.7, `include/uapi/linux/sched.h`).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `clone3`'s flag for a child born into `cgroup`: none without one.
fn into_cgroup(cgroup: Option<RawFd>) -> u64 {
    if cgroup.is_some() {
        CLONE_INTO_CGROUP
    } else {
        0
    }
}

fn is_gone(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::EACCES)
    )
}

/// Starts the job's process with `clone3`, born into the cgroup `cgroup` when there is one
/// (`CLONE_INTO_CGROUP`, so that it is in the cgroup before it runs a single instruction of
/// the job), then sets it up as `posix_spawn` would (see [`spawn_process`]) and execs.
/// `CLONE_VFORK` holds this thread until the exec or the child's exit; an exec error comes
/// back in memory the child shares with lanes (x86-64, as glibc's posix_spawn does), else
/// through a close-on-exec pipe. The child is started by [`start_child`]; one whose exec
/// failed is reaped here, any other by the [`Reaper`].
///
/// # Errors
/// `clone3`'s own (EAGAIN, ENOMEM, EBUSY or EOPNOTSUPP for the cgroup, …), or the errno of
/// the child's step that failed (`setpgid`, `open`, `dup2`, `chdir`, `execve`).
fn clone_child(plan: &ChildPlan, cgroup: Option<RawFd>) -> io::Result<i32> {
    #[cfg(target_arch = "x86_64")]
    {
        let failure = AtomicI32::new(0);
        let plan = ChildPlan {
            failure: &raw const failure,
            ..*plan
        };
        let pid = start_child(&plan, cgroup, -1)?;
        // The child has exec'd or exited (CLONE_VFORK): what it wrote is there.
        match failure.load(Ordering::Acquire) {
            0 => Ok(pid),
            errno => Err(failed_child(pid, errno)),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let (report_read, report_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let pid = start_child(plan, cgroup, report_write.as_raw_fd());
        drop(report_write);
        let pid = pid?;
        let mut errno = [0u8; 4];
        let mut file = std::fs::File::from(report_read);
        use std::io::Read as _;
        match file.read(&mut errno) {
            Ok(4) => Err(failed_child(pid, i32::from_ne_bytes(errno))),
            _ => Ok(pid),
        }
    }
}

/// Reaps child `pid`, whose exec failed with `errno` (it exited 127, and nobody else knows
/// it), and gives that error.
fn failed_child(pid: i32, errno: i32) -> io::Error {
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
    io::Error::from_raw_os_error(errno)
}

/// `CLONE_VM` (`include/uapi/linux/sched.h`): the child shares this address space.
#[cfg(target_arch = "x86_64")]
const CLONE_VM: u64 = libc::CLONE_VM as u64;

/// The least stack a child gets: [`exec_child`]'s frames, glibc's `execvpe` (a `PATH`
/// buffer of up to `PATH_MAX` bytes and, for a script without `#!`, a copy of `argv`, both on
/// the stack) and room for the compiler's stack probes. glibc's posix_spawn maps 32 KiB plus
/// `argv`'s size for the same child.
#[cfg(target_arch = "x86_64")]
const CHILD_STACK_MIN: usize = 64 * 1024;

/// A child stack: an anonymous private mapping whose lowest page is a guard (`PROT_NONE`),
/// so that an overflow faults in the child instead of writing below the mapping.
#[cfg(target_arch = "x86_64")]
struct ChildStack {
    /// The start of the mapping (the guard page).
    base: *mut libc::c_void,
    /// The whole mapping's length in bytes, guard page included.
    len: usize,
}

#[cfg(target_arch = "x86_64")]
impl ChildStack {
    /// Maps a stack of at least `usable` bytes (rounded up to whole pages) plus a guard page.
    ///
    /// # Errors
    /// `mmap`'s or `mprotect`'s (ENOMEM).
    fn map(usable: usize) -> io::Result<Self> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .unwrap_or(4096)
            .max(4096);
        let len = usable.div_ceil(page) * page + page;
        // SAFETY: a fresh anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = ChildStack { base, len };
        // SAFETY: the first page of the mapping just made.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The usable part: (its lowest address, its length in bytes), as `clone3` takes them
    /// (`stack`, `stack_size`: the kernel starts the child's stack pointer at their sum).
    fn usable(&self, page: usize) -> (u64, u64) {
        (self.base as u64 + page as u64, (self.len - page) as u64)
    }
}

#[cfg(target_arch = "x86_64")]
impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; no child runs on it any more
        // (`CLONE_VFORK` returns only after the child's exec or exit).
        unsafe {
            libc::munmap(self.base, self.len);
        }
    }
}

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// Each spawning thread's child stack, mapped at its first cgroup spawn and kept: a
    /// `CLONE_VFORK` child is done with it when `clone3` returns, so one per thread is enough
    /// and threads spawning at once never share one. Grown when a long `argv` needs more.
    static CHILD_STACK: std::cell::RefCell<Option<ChildStack>> = const { std::cell::RefCell::new(None) };
}

/// Starts the child of [`clone_child`] with `clone3(CLONE_VM | CLONE_VFORK |
/// CLONE_INTO_CGROUP)`, as cheap as `posix_spawn`: the child shares lanes' address space
/// (no page tables copied, no copy-on-write faults afterwards) until it execs, and this thread
/// waits meanwhile. It is glibc's posix_spawn's way (`sysdeps/unix/sysv/linux/spawni.c`:
/// `clone` with `CLONE_VM | CLONE_VFORK` on an mmap'ed stack), with `clone3(2)` for
/// `CLONE_INTO_CGROUP`, which glibc's `clone` cannot pass.
///
/// A child sharing the memory must not run on this thread's stack: it would overwrite the
/// frames this thread returns into. `clone3(2)` starts it on the given stack (`stack`,
/// `stack_size`) at the instruction after the system call, with no frame to return to, so the
/// call is made in assembly ([`clone3_on_stack`]) and the child, on its new stack, calls
/// [`child_main`], which never returns.
///
/// Every signal, glibc's internal 32 and 33 included, is blocked in this thread around the
/// call (the child inherits the mask): a handler of lanes' run in the child would run on
/// lanes' memory, in a process that is not lanes. The child resets every disposition to the
/// default first, and only then unblocks everything ([`exec_child`]); this thread restores its
/// own mask once `clone3` has returned (after the child's exec or exit).
///
/// # Errors
/// `clone3`'s, or `mmap`'s for a first stack.
#[cfg(target_arch = "x86_64")]
fn start_child(plan: &ChildPlan, cgroup: Option<RawFd>, report: RawFd) -> io::Result<i32> {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .unwrap_or(4096)
        .max(4096);
    // glibc's execvpe copies `argv` onto the stack to run a script without `#!` with /bin/sh.
    let need = CHILD_STACK_MIN + (plan.argc + 2) * std::mem::size_of::<usize>();
    CHILD_STACK.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot
            .as_ref()
            .is_none_or(|stack| stack.usable(page).1 < need as u64)
        {
            *slot = None;
            *slot = Some(ChildStack::map(need)?);
        }
        let (stack, stack_size) = slot.as_ref().map_or((0, 0), |s| s.usable(page));
        let args = CloneArgs {
            flags: CLONE_VM | libc::CLONE_VFORK as u64 | into_cgroup(cgroup),
            exit_signal: libc::SIGCHLD as u64,
            stack,
            stack_size,
            cgroup: cgroup.map_or(0, |fd| fd as u64),
            ..CloneArgs::default()
        };
        // Every signal blocked: no handler of lanes may run in the child.
        let old_mask = set_signal_mask(!0);
        // SAFETY: `args` names a mapped stack no other thread uses; `plan`'s pointers stay
        // valid until this returns (CLONE_VFORK); the child runs `child_main`, which only
        // makes async-signal-safe calls and execs or exits.
        let ret = unsafe { clone3_on_stack(&args, plan, report) };
        set_signal_mask(old_mask);
        if ret < 0 {
            Err(io::Error::from_raw_os_error(-ret as i32))
        } else {
            Ok(ret as i32)
        }
    })
}

/// `clone3(args, sizeof *args)` whose child runs `child_main(plan, report)` on the stack
/// `args` names; in this process the child's pid, or `-errno`.
///
/// The system call is made from assembly: the child starts at the next instruction with its
/// stack pointer at the top of the new stack and every other register as the parent's, so it
/// must not return into the Rust frame around it. It clears the frame pointer (the end of a
/// backtrace), aligns the stack to 16 bytes (System V ABI) and calls `child_main`, which
/// never returns (`ud2` after the call traps if it did). `syscall` clobbers `rcx` and `r11`.
///
/// # Safety
/// `args` must name a mapped, writable stack that nothing else uses and include `CLONE_VM`
/// and `CLONE_VFORK` (this thread is then suspended until the child's exec or exit); all
/// signals should be blocked; `plan`'s pointers must be valid.
#[cfg(target_arch = "x86_64")]
unsafe fn clone3_on_stack(args: &CloneArgs, plan: &ChildPlan, report: RawFd) -> i64 {
    let ret: i64;
    std::arch::asm!(
        "syscall",
        "test rax, rax",
        "jnz 2f",
        // The child, on its new stack.
        "xor ebp, ebp",
        "and rsp, -16",
        "mov rdi, r12",
        "mov esi, r13d",
        "call {entry}",
        "ud2",
        "2:",
        entry = sym child_main,
        inlateout("rax") libc::SYS_clone3 => ret,
        in("rdi") std::ptr::from_ref(args),
        in("rsi") std::mem::size_of::<CloneArgs>(),
        in("r12") std::ptr::from_ref(plan),
        in("r13") report,
        lateout("rcx") _,
        lateout("r11") _,
    );
    ret
}

/// The child of [`clone3_on_stack`], on its own stack: [`exec_child`].
///
/// # Safety
/// Only as the entry of a `CLONE_VM | CLONE_VFORK` child; `plan` must be valid.
#[cfg(target_arch = "x86_64")]
unsafe extern "C" fn child_main(plan: *const ChildPlan, report: RawFd) -> ! {
    exec_child(&*plan, report)
}

/// Sets the calling thread's signal mask to `mask` (bit N-1 for signal N, glibc's internal
/// 32 and 33 included) and returns the mask it had. A raw `rt_sigprocmask`: glibc's
/// `pthread_sigmask` and `sigprocmask` quietly leave 32 and 33 out of the set (glibc's
/// posix_spawn blocks them with its internal `__libc_signal_block_all`); the kernel leaves out
/// SIGKILL and SIGSTOP. Async-signal-safe: the child of a fork may call it.
fn set_signal_mask(mask: u64) -> u64 {
    let mut old: u64 = 0;
    // SAFETY: both pointers point to 8-byte sets, the kernel's sigset size on 64-bit Linux.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            std::ptr::addr_of!(mask),
            std::ptr::addr_of_mut!(old),
            8usize,
        );
    }
    old
}

/// Starts the child of [`clone_child`] where no assembly trampoline is built: `clone3`
/// with `CLONE_VFORK | CLONE_INTO_CGROUP` but without `CLONE_VM`, a fork (the child copies
/// lanes' page tables) that returns into this frame on its copy of the stack.
///
/// # Errors
/// `clone3`'s.
#[cfg(not(target_arch = "x86_64"))]
fn start_child(plan: &ChildPlan, cgroup: Option<RawFd>, report: RawFd) -> io::Result<i32> {
    let args = CloneArgs {
        flags: into_cgroup(cgroup) | libc::CLONE_VFORK as u64,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.map_or(0, |fd| fd as u64),
        ..CloneArgs::default()
    };
    // SAFETY: clone3 without CLONE_VM forks: the child runs on a copy of this address space and
    // only calls async-signal-safe functions with pointers prepared before the call
    // (`exec_child`), then execs or exits.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            std::ptr::addr_of!(args),
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid == 0 {
        // SAFETY: see above; never returns.
        unsafe { exec_child(plan, report) }
    }
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid as i32)
}

/// The child's side of [`clone_child`]: stdin from /dev/null, stdout and stderr to the
/// pipes (or /dev/null), a process group of its own, every signal at its default action,
/// none pending ([`discard_pending_signals`]) and none blocked, the working directory, then
/// `execvpe` (a `PATH` search only for a name without `/`; a file without `#!` runs with
/// /bin/sh). On failure the errno goes where [`fail`] puts it and the child exits 127.
///
/// Only system calls through glibc's thin wrappers and raw `syscall`, no allocation, no lock:
/// the same in a forked child and in a `CLONE_VM` one on its own stack.
///
/// # Safety
/// Only in the child of [`start_child`]; `plan`'s pointers must be valid there.
unsafe fn exec_child(plan: &ChildPlan, report: RawFd) -> ! {
    // Only the signals lanes may have changed: every other is at its default already
    // (`signal::unchanged_are_default`), and a blocked one is unblocked below. Raw system
    // calls: glibc's `sigaction` and `sigprocmask` refuse its two internal signals (32, 33),
    // which must start at their default too.
    let default = KernelSigaction::default();
    for signal in 1..=64 {
        if CHANGED_DISPOSITIONS & bit(signal) != 0 {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                std::ptr::addr_of!(default),
                std::ptr::null_mut::<KernelSigaction>(),
                8usize,
            );
        }
    }
    if libc::setpgid(0, 0) != 0 {
        fail(plan, report);
    }
    discard_pending_signals();
    // Descriptors opened here are close-on-exec; `dup2` gives the standard ones without it,
    // and one that landed on its own number has the flag cleared.
    let stdin = dev_null_for(plan, libc::O_RDONLY);
    if stdin < 0 || !onto(stdin, 0) {
        fail(plan, report);
    }
    for (target, pipe) in [(1, plan.stdout), (2, plan.stderr)] {
        let source = match pipe {
            Some(fd) => fd,
            None => dev_null_for(plan, libc::O_WRONLY),
        };
        if source < 0 || !onto(source, target) {
            fail(plan, report);
        }
    }
    for (target, lock) in (LOCK_FD_FIRST..).zip(plan.locks) {
        if let Some(fd) = lock {
            if !onto(fd, target) {
                fail(plan, report);
            }
        }
    }
    if libc::chdir(plan.cwd) != 0 {
        fail(plan, report);
    }
    if let Some(limit) = &plan.descriptor_limit {
        // `prlimit64` of this process (pid 0): lowering a soft limit cannot fail.
        libc::syscall(
            libc::SYS_prlimit64,
            0,
            libc::RLIMIT_NOFILE,
            limit.as_ptr(),
            std::ptr::null_mut::<u64>(),
        );
    }
    set_signal_mask(0);
    // A path (holding a `/`, as a program found on PATH does) is not searched for, and a file
    // without `#!` (ENOEXEC) runs with /bin/sh, as execvp(3) runs it.
    libc::execvpe(plan.path, plan.argv, plan.envp);
    fail(plan, report)
}

/// Discards every signal pending in the child. Until its `setpgid` the child was in lanes'
/// process group, and what was sent to that group meanwhile (Ctrl-Z or Ctrl-C at the terminal,
/// `kill -TSTP -PGID`) reached it too, and waits, blocked. It was meant for lanes, which takes
/// it itself; nothing else knows the child's pid before its `exec`. Left pending, it would act
/// at the unblocking: SIGTSTP would stop the child before its `exec`, and with it the thread
/// that spawned it (`CLONE_VFORK` holds that thread until the `exec`) for good; SIGINT would
/// end a job that never ran; others would reach the job. A pending signal is discarded by
/// setting its action to `SIG_IGN` (POSIX, `sigaction`), and the default is then set again.
///
/// # Safety
/// Only in the child of [`start_child`], after its `setpgid` and before it unblocks signals.
unsafe fn discard_pending_signals() {
    let mut pending: u64 = 0;
    // SAFETY: the kernel writes an 8-byte set, its sigset size on 64-bit Linux.
    libc::syscall(
        libc::SYS_rt_sigpending,
        std::ptr::addr_of_mut!(pending),
        8usize,
    );
    if pending == 0 {
        return;
    }
    let ignore = KernelSigaction {
        handler: libc::SIG_IGN,
        ..KernelSigaction::default()
    };
    let default = KernelSigaction::default();
    for signal in 1..=64 {
        if pending & bit(signal) == 0 {
            continue;
        }
        for action in [&ignore, &default] {
            libc::syscall(
                libc::SYS_rt_sigaction,
                signal,
                std::ptr::from_ref(action),
                std::ptr::null_mut::<KernelSigaction>(),
                8usize,
            );
        }
    }
}

/// The kernel's `struct sigaction` for `rt_sigaction(2)` on x86-64 and aarch64: handler,
/// flags, restorer, mask. All zero: the default action, no flags, nothing blocked.
#[repr(C)]
#[derive(Default)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// `/dev/null` for reading (`O_RDONLY`) or writing (`O_WRONLY`): the descriptor opened once
/// ([`opened_dev_null`]), else opened now, close-on-exec; -1 when it cannot be.
///
/// # Safety
/// Only in the child of [`start_child`].
unsafe fn dev_null_for(plan: &ChildPlan, mode: libc::c_int) -> RawFd {
    let opened = plan.null[usize::from(mode == libc::O_WRONLY)];
    if opened >= 0 {
        opened
    } else {
        libc::open(plan.dev_null, mode | libc::O_CLOEXEC)
    }
}

/// Makes `fd` descriptor `target` without close-on-exec.
///
/// # Safety
/// Only in the child of [`start_child`].
unsafe fn onto(fd: RawFd, target: RawFd) -> bool {
    if fd == target {
        libc::fcntl(fd, libc::F_SETFD, 0) == 0
    } else {
        libc::dup2(fd, target) == target
    }
}

/// The child's end after a failed step of [`exec_child`]: its errno to the plan's `failure`
/// (in lanes' memory, for a `CLONE_VM` child) and to `report` (a pipe, when not -1), then
/// exit 127.
///
/// # Safety
/// Only in the child of [`start_child`]; `plan.failure` null or valid.
unsafe fn fail(plan: &ChildPlan, report: RawFd) -> ! {
    let errno = *libc::__errno_location();
    if let Some(failure) = plan.failure.as_ref() {
        failure.store(errno, Ordering::Release);
    }
    if report >= 0 {
        let bytes = errno.to_ne_bytes();
        libc::write(report, bytes.as_ptr().cast(), bytes.len());
    }
    libc::_exit(127)
}

/// Adds signals 32 and 33 to `set`. glibc's `sigfillset` leaves out its two internal signals,
/// and its posix_spawn then starts the child with them ignored; named in the set of signals
/// to reset (`posix_spawnattr_setsigdefault`), they start at their default like every other.
/// `sigaddset` refuses them too, so the bits are set directly: on 64-bit Linux the set's first
/// word holds signals 1..=64, signal N at bit N-1.
fn add_internal_signals(set: &mut libc::sigset_t) {
    #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
    {
        let first_word = std::ptr::from_mut(set).cast::<u64>();
        // SAFETY: `sigset_t` on 64-bit Linux is an array of 16 u64 words; the first is in
        // bounds and properly aligned.
        unsafe {
            *first_word |= (1 << 31) | (1 << 32);
        }
    }
}

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a NUL byte in an argument or variable",
        )
    })
}

/// posix_spawn's functions return the error number instead of setting errno.
fn check(code: libc::c_int) -> io::Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(code))
    }
}

struct FileActions(libc::posix_spawn_file_actions_t);

impl FileActions {
    fn new() -> io::Result<Self> {
        // SAFETY: init fills the zeroed value; it is destroyed in Drop.
        unsafe {
            let mut actions: libc::posix_spawn_file_actions_t = std::mem::zeroed();
            check(libc::posix_spawn_file_actions_init(&mut actions))?;
            Ok(FileActions(actions))
        }
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe {
            libc::posix_spawn_file_actions_destroy(&mut self.0);
        }
    }
}

struct Attributes(libc::posix_spawnattr_t);

impl Attributes {
    fn new() -> io::Result<Self> {
        // SAFETY: init fills the zeroed value; it is destroyed in Drop.
        unsafe {
            let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
            check(libc::posix_spawnattr_init(&mut attr))?;
            Ok(Attributes(attr))
        }
    }
}

impl Drop for Attributes {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe {
            libc::posix_spawnattr_destroy(&mut self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::find_on_path;
    use std::os::unix::fs::PermissionsExt;

    fn file(dir: &std::path::Path, name: &str, mode: u32) {
        let path = dir.join(name);
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn the_first_executable_regular_file_along_the_path_is_found() {
        let temp = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            temp.path().join("a"),
            temp.path().join("b"),
            temp.path().join("c"),
        );
        for dir in [&a, &b, &c] {
            std::fs::create_dir(dir).unwrap();
        }
        file(&a, "tool", 0o644); // not executable: skipped
        std::fs::create_dir(b.join("tool")).unwrap(); // a directory: skipped
        file(&c, "tool", 0o755);
        let search = format!("{}:{}/:{}", a.display(), b.display(), c.display());
        let found = find_on_path(search.as_bytes(), b"tool").unwrap();
        assert_eq!(found.to_str().unwrap(), c.join("tool").to_str().unwrap());
        assert_eq!(find_on_path(search.as_bytes(), b"missing"), None);
    }

    #[test]
    fn a_relative_directory_before_the_find_leaves_the_search_to_the_spawn() {
        let temp = tempfile::tempdir().unwrap();
        file(temp.path(), "tool", 0o755);
        let found_first = format!("{}:", temp.path().display());
        assert!(find_on_path(found_first.as_bytes(), b"tool").is_some());
        for search in [
            format!(":{}", temp.path().display()),
            format!("bin:{}", temp.path().display()),
        ] {
            assert_eq!(find_on_path(search.as_bytes(), b"tool"), None, "{search}");
        }
    }
}

/// What it takes to start one job.
#[derive(Debug)]
pub(crate) struct Launch<'a> {
    pub shell: &'a str,
    pub command: &'a str,
    /// The job's working directory; `None` for lanes' own.
    pub cwd: Option<&'a Path>,
    /// lanes' own working directory, physical, for `PWD` when `cwd` is `None`; `None` when
    /// lanes has none (it was deleted): the job then starts in it without `PWD`.
    pub own_cwd: Option<&'a Path>,
    /// lanes' own environment with the run's additions (the manifest's `[env]`).
    pub env: &'a Arc<BaseEnv>,
    /// Where programs were found on `PATH` (the shell, `srun`).
    pub programs: &'a Arc<ProgramPaths>,
    pub job_env: &'a [(String, String)],
    pub key: &'a str,
    pub seq: u64,
    pub slot: u32,
    pub attempt: u32,
    /// The weight and named resources the run holds (`LANES_RESOURCE_<NAME>`).
    pub grant: Option<&'a crate::core::Grant>,
    /// Whether stdout is captured (through a pipe) or discarded (`/dev/null`). stderr always
    /// is: the tail of a failed job's stderr goes to the summary and JUnit whatever the
    /// output mode.
    pub capture: bool,
    /// Where the command runs.
    pub backend: &'a Backend,
    /// The turn timeout (a Slurm job's `--time`).
    pub timeout: Option<Duration>,
    /// The job's cgroup (an open directory), when jobs are contained in cgroups.
    pub cgroup: Option<RawFd>,
    /// `--lock-dir`: its key's lock and its shared slot's, handed to the job as descriptors 3
    /// and 4 (each at least 10 here).
    pub locks: [Option<RawFd>; 2],
}

/// A started job: its pid (also its process group id), its exit notification and its pipes.
pub(crate) struct Spawned {
    pub pid: i32,
    pub exit: oneshot::Receiver<ExitFacts>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
}

/// Why a job could not be started.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SpawnError {
    /// Out of processes or descriptors for now (EAGAIN, EMFILE, ENFILE): try again later.
    #[error("{0}")]
    Transient(io::Error),
    /// The job cannot start: its record is `failed`, reason `spawn_error`.
    #[error("{0}")]
    Failed(String),
}

/// A job ready to be started by [`Order::start`], on any thread: everything its spawn needs,
/// owned. Prepared by [`prepare`] on the event loop's thread.
pub(crate) struct Order {
    program: std::ffi::OsString,
    args: Vec<std::ffi::OsString>,
    base_env: Arc<BaseEnv>,
    programs: Arc<ProgramPaths>,
    /// Set on top of the base environment (later ones win).
    env: Vec<(String, std::ffi::OsString)>,
    cwd: PathBuf,
    /// Whether the job's stdout goes to a pipe (its stderr always does).
    capture: bool,
    cgroup: Option<RawFd>,
    locks: [Option<RawFd>; 2],
}

/// The read ends of a started job's pipes.
pub(crate) struct Pipes {
    stdout: Option<OwnedFd>,
    stderr: OwnedFd,
}

impl Pipes {
    /// The job started as `pid`: its [`Spawned`], reading these pipes.
    pub(crate) fn spawned(self, pid: i32, exit: oneshot::Receiver<ExitFacts>) -> Spawned {
        Spawned {
            pid,
            exit,
            // A pipe that cannot be registered is read as if closed; the job still runs.
            stdout: self.stdout.and_then(|out| async_pipe(out).ok()),
            stderr: async_pipe(self.stderr).ok(),
        }
    }
}

/// Prepares `SHELL -c COMMAND` to start with stdin from /dev/null, in a process group of its
/// own, with `LANES_KEY`, `LANES_SEQ`, `LANES_SLOT`, `LANES_ATTEMPT`, `PWD` and a
/// `LANES_RESOURCE_<NAME>` for each named resource it was granted set; the spawned process
/// starts with default signal dispositions and an empty signal mask (Rust's `Command` resets
/// both) and with no descriptor but 0, 1 and 2 — and under `--lock-dir` its key's lock as 3
/// (`LANES_LOCK_FD`) and its shared slot's as 4 (`LANES_SLOT_LOCK_FD`), the one exception, so
/// that its processes hold them as long as they live.
///
/// # Errors
/// [`SpawnError::Transient`] for EAGAIN/EMFILE/ENFILE, [`SpawnError::Failed`] for anything
/// else, naming the missing directory.
pub(crate) fn prepare(launch: &Launch<'_>) -> Result<Order, SpawnError> {
    let pwd: Option<PathBuf> = match launch.cwd {
        Some(dir) => match std::fs::canonicalize(dir) {
            Ok(real) if real.is_dir() => Some(real),
            Ok(_) => {
                return Err(SpawnError::Failed(format!(
                    "cannot use working directory {}: not a directory",
                    dir.display()
                )))
            }
            Err(err) if is_passing_shortage(&err) => return Err(SpawnError::Transient(err)),
            Err(err) => {
                return Err(SpawnError::Failed(format!(
                    "cannot use working directory {}: {err}",
                    dir.display()
                )))
            }
        },
        None => launch.own_cwd.map(Path::to_path_buf),
    };
    let job = super::backend::JobIdentity {
        key: launch.key,
        seq: launch.seq,
        attempt: launch.attempt,
    };
    let (program, args) = launch.backend.argv(
        launch.shell,
        launch.command,
        job,
        launch.timeout,
        launch.grant,
    );
    let mut env: Vec<(String, std::ffi::OsString)> = launch
        .job_env
        .iter()
        .map(|(k, v)| (k.clone(), v.into()))
        .collect();
    env.extend([
        ("LANES_KEY".to_owned(), launch.key.into()),
        ("LANES_SEQ".to_owned(), launch.seq.to_string().into()),
        ("LANES_SLOT".to_owned(), launch.slot.to_string().into()),
        (
            "LANES_ATTEMPT".to_owned(),
            launch.attempt.to_string().into(),
        ),
    ]);
    if let Some(pwd) = &pwd {
        env.push(("PWD".to_owned(), pwd.clone().into_os_string()));
    }
    if let Some(grant) = launch.grant {
        env.extend(
            crate::resources::granted_values(grant)
                .map(|(name, value)| (crate::resources::env_name(name), value.into())),
        );
    }
    if launch.locks[0].is_some() {
        env.push(("LANES_LOCK_FD".to_owned(), "3".into()));
    }
    if launch.locks[1].is_some() {
        env.push(("LANES_SLOT_LOCK_FD".to_owned(), "4".into()));
    }
    Ok(Order {
        program,
        args,
        base_env: Arc::clone(launch.env),
        programs: Arc::clone(launch.programs),
        env,
        cwd: pwd.unwrap_or_else(|| PathBuf::from(".")),
        capture: launch.capture,
        cgroup: launch.cgroup,
        locks: launch.locks,
    })
}

impl Order {
    /// Makes the job's pipes and starts its process; returns its pid, which is also its
    /// process group id, and the read ends of its pipes (the write ends close here, once the
    /// child holds its copies).
    ///
    /// # Errors
    /// [`SpawnError::Transient`] for EAGAIN/EMFILE/ENFILE, [`SpawnError::Failed`] for anything
    /// else, naming the shell.
    pub(crate) fn start(self) -> Result<(i32, Pipes), SpawnError> {
        // stderr is always read, for its tail; stdout only when it goes somewhere.
        let out_pipe = match self.capture.then(pipe).transpose() {
            Ok(out) => out,
            Err(err) => return Err(classify_error(err, &self.program)),
        };
        let err_pipe = pipe().map_err(|err| classify_error(err, &self.program))?;
        let env: Vec<(&str, &OsStr)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_os_str()))
            .collect();
        let request = Request {
            program: &self.program,
            args: &self.args,
            base_env: &self.base_env,
            programs: &self.programs,
            env: &env,
            cwd: &self.cwd,
            stdout: out_pipe.as_ref().map(|out| &out.1),
            stderr: Some(&err_pipe.1),
            cgroup: self.cgroup,
            locks: self.locks,
        };
        let pid = spawn_process(&request).map_err(|err| classify_error(err, &self.program))?;
        let pipes = Pipes {
            stdout: out_pipe.map(|out| out.0),
            stderr: err_pipe.0,
        };
        Ok((pid, pipes))
    }
}

/// A pipe whose both ends are close-on-exec: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
}

fn classify_error(err: io::Error, program: &OsStr) -> SpawnError {
    if is_passing_shortage(&err) {
        SpawnError::Transient(err)
    } else {
        SpawnError::Failed(format!("cannot run `{}`: {err}", program.to_string_lossy()))
    }
}

fn async_pipe(fd: OwnedFd) -> io::Result<pipe::Receiver> {
    set_nonblocking(&fd)?;
    pipe::Receiver::from_owned_fd_unchecked(fd)
}
