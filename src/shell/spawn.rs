//! Starting a job: its command line, environment, working directory and pipes prepared
//! ([`spawn`]), and its process started with `posix_spawnp(3)`: stdin from /dev/null, stdout and stderr to
//! the given pipes (or /dev/null), a process group of its own, an empty signal mask and every
//! signal at its default action, in the given directory, with a prepared environment.
//!
//! Rust's `Command` also uses posix_spawn, but cannot ask for every signal to be reset: glibc
//! then starts the child with its two internal signals (32 and 33) ignored. Asking here with
//! `POSIX_SPAWN_SETSIGDEF` for all signals, those two included, keeps SPEC §2's promise, and
//! the environment of the run is built once instead of at every spawn.

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use nix::libc;

use std::path::PathBuf;
use std::time::Duration;

use tokio::net::unix::pipe;
use tokio::sync::oneshot;

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

/// Starts the process; returns its pid, which is also its process group id.
///
/// # Errors
/// The error `posix_spawnp` reports: the program not found (ENOENT), the directory missing,
/// EAGAIN/EMFILE/ENFILE when processes or descriptors run short, or a NUL byte in an argument.
pub(crate) fn posix_spawn(request: &Request<'_>) -> io::Result<i32> {
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
    if let Some(cgroup) = request.cgroup {
        let name = request.program.as_bytes();
        let resolved = request.programs.resolve(name);
        let plan = ChildPlan {
            path: resolved
                .as_ref()
                .map_or(argv_owned[0].as_ptr(), |p| p.as_ptr()),
            search: resolved.is_none(),
            argv: argv.as_ptr(),
            envp: envp.as_ptr(),
            cwd: cwd.as_ptr(),
            dev_null: dev_null.as_ptr(),
            stdout: request.stdout.map(AsRawFd::as_raw_fd),
            stderr: request.stderr.map(AsRawFd::as_raw_fd),
            locks: request.locks,
        };
        return match clone_into_cgroup(&plan, cgroup) {
            Err(err) if resolved.is_some() && is_gone(&err) => {
                // Gone or changed since it was found: search again, as posix_spawnp does.
                request.programs.forget(name);
                let plan = ChildPlan {
                    path: argv_owned[0].as_ptr(),
                    search: true,
                    ..plan
                };
                clone_into_cgroup(&plan, cgroup)
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

/// What the child does between `clone3` and `execve`, all prepared beforehand: after a fork
/// of a multi-threaded process only async-signal-safe calls may be made (POSIX `fork`), so
/// the child allocates nothing and takes no lock.
#[derive(Clone, Copy)]
struct ChildPlan {
    /// The program's path, or (with `search`) its name to look up on `PATH`.
    path: *const libc::c_char,
    search: bool,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    dev_null: *const libc::c_char,
    stdout: Option<RawFd>,
    stderr: Option<RawFd>,
    locks: [Option<RawFd>; 2],
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

fn is_gone(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::ENOENT | libc::ENOTDIR | libc::EACCES)
    )
}

/// Starts a process born into the cgroup `cgroup` (`clone3` with `CLONE_INTO_CGROUP`), so
/// that it is in the cgroup before it runs a single instruction of the job, then sets it up as
/// `posix_spawn` would (see [`posix_spawn`]) and execs. `CLONE_VFORK` holds this thread until
/// the exec; an exec error comes back through a close-on-exec pipe.
fn clone_into_cgroup(plan: &ChildPlan, cgroup: RawFd) -> io::Result<i32> {
    let (report_read, report_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP | libc::CLONE_VFORK as u64,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup as u64,
        ..CloneArgs::default()
    };
    let report = report_write.as_raw_fd();
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
    drop(report_write);
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    let pid = pid as i32;
    let mut errno = [0u8; 4];
    let mut file = std::fs::File::from(report_read);
    use std::io::Read as _;
    match file.read(&mut errno) {
        Ok(4) => {
            // The exec failed and the child exited: reap it here, nobody else knows it.
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
            Err(io::Error::from_raw_os_error(i32::from_ne_bytes(errno)))
        }
        _ => Ok(pid),
    }
}

/// The child's side of [`clone_into_cgroup`]: stdin from /dev/null, stdout and stderr to the
/// pipes (or /dev/null), a process group of its own, every signal at its default action and
/// none blocked, the working directory, then `execve` (or a `PATH` search). On failure the
/// errno goes to `report` and the child exits 127.
///
/// # Safety
/// Only in the child of a fork; `plan`'s pointers must be valid there.
unsafe fn exec_child(plan: &ChildPlan, report: RawFd) -> ! {
    // Raw system calls: glibc's `sigaction` and `sigprocmask` refuse its two internal signals
    // (32, 33), which must start at their default too.
    let default = KernelSigaction::default();
    for signal in 1..=64 {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP {
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
        fail(report);
    }
    // Descriptors opened here are close-on-exec; `dup2` gives the standard ones without it,
    // and one that landed on its own number has the flag cleared.
    let stdin = libc::open(plan.dev_null, libc::O_RDONLY | libc::O_CLOEXEC);
    if stdin < 0 || !onto(stdin, 0) {
        fail(report);
    }
    for (target, pipe) in [(1, plan.stdout), (2, plan.stderr)] {
        let source = match pipe {
            Some(fd) => fd,
            None => libc::open(plan.dev_null, libc::O_WRONLY | libc::O_CLOEXEC),
        };
        if source < 0 || !onto(source, target) {
            fail(report);
        }
    }
    for (target, lock) in (LOCK_FD_FIRST..).zip(plan.locks) {
        if let Some(fd) = lock {
            if !onto(fd, target) {
                fail(report);
            }
        }
    }
    if libc::chdir(plan.cwd) != 0 {
        fail(report);
    }
    let empty: u64 = 0;
    libc::syscall(
        libc::SYS_rt_sigprocmask,
        libc::SIG_SETMASK,
        std::ptr::addr_of!(empty),
        std::ptr::null_mut::<u64>(),
        8usize,
    );
    if plan.search {
        libc::execvpe(plan.path, plan.argv, plan.envp);
    } else {
        libc::execve(plan.path, plan.argv, plan.envp);
    }
    fail(report)
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

/// Makes `fd` descriptor `target` without close-on-exec.
///
/// # Safety
/// Only in the child of a fork.
unsafe fn onto(fd: RawFd, target: RawFd) -> bool {
    if fd == target {
        libc::fcntl(fd, libc::F_SETFD, 0) == 0
    } else {
        libc::dup2(fd, target) == target
    }
}

/// The child's end after a failed step of [`exec_child`]: its errno to `report`, exit 127.
///
/// # Safety
/// Only in the child of a fork.
unsafe fn fail(report: RawFd) -> ! {
    let errno = *libc::__errno_location();
    let bytes = errno.to_ne_bytes();
    libc::write(report, bytes.as_ptr().cast(), bytes.len());
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
    /// lanes' own working directory, physical, for `PWD` when `cwd` is `None`.
    pub own_cwd: &'a Path,
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
    let pwd: PathBuf = match launch.cwd {
        Some(dir) => match std::fs::canonicalize(dir) {
            Ok(real) if real.is_dir() => real,
            Ok(_) => {
                return Err(SpawnError::Failed(format!(
                    "cannot use working directory {}: not a directory",
                    dir.display()
                )))
            }
            Err(err) if is_transient(&err) => return Err(SpawnError::Transient(err)),
            Err(err) => {
                return Err(SpawnError::Failed(format!(
                    "cannot use working directory {}: {err}",
                    dir.display()
                )))
            }
        },
        None => launch.own_cwd.to_path_buf(),
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
        ("PWD".to_owned(), pwd.clone().into_os_string()),
    ]);
    if let Some(grant) = launch.grant {
        env.extend(grant.parts().filter_map(|part| {
            let value = crate::resources::granted_value(grant, part.name)?;
            Some((crate::resources::env_name(part.name), value.into()))
        }));
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
        cwd: pwd,
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
        let pid = posix_spawn(&request).map_err(|err| classify_error(err, &self.program))?;
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
    if is_transient(&err) {
        SpawnError::Transient(err)
    } else {
        SpawnError::Failed(format!("cannot run `{}`: {err}", program.to_string_lossy()))
    }
}

fn async_pipe(fd: OwnedFd) -> io::Result<pipe::Receiver> {
    set_nonblocking(&fd)?;
    pipe::Receiver::from_owned_fd_unchecked(fd)
}

/// Whether a spawn error is a passing shortage of processes or descriptors.
pub(crate) fn is_transient(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc_errno::EAGAIN | libc_errno::EMFILE | libc_errno::ENFILE)
    )
}

mod libc_errno {
    use nix::errno::Errno;
    pub(super) const EAGAIN: i32 = Errno::EAGAIN as i32;
    pub(super) const EMFILE: i32 = Errno::EMFILE as i32;
    pub(super) const ENFILE: i32 = Errno::ENFILE as i32;
}
