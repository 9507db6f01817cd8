//! One job's process: spawning `SHELL -c COMMAND` in a process group of its own, and
//! supervising it until its process group is empty: reading its pipes, the leak window, the
//! grace period and the escalation from the first signal to SIGKILL (SPEC §2, §4).

use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nix::sys::signal::Signal;
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{sleep, Instant};

use super::backend::Backend;
use super::reap::Reaper;
use super::sleep_until_opt;
use super::spawn::{self, BaseEnv, ProgramPaths};
use super::unix::{group_alive, set_nonblocking, signal_group, signal_process};
use crate::cli::OutputMode;
use crate::core::{ExitFacts, StopReason};
use crate::output::capture::Capture;
use crate::output::framing::LineFramer;
use crate::output::results::ResultFiles;
use crate::output::sink::SinkTx;

/// What it takes to start one job.
#[derive(Debug)]
pub struct Launch<'a> {
    pub shell: &'a str,
    pub command: &'a str,
    /// The job's working directory; `None` for lanes' own.
    pub cwd: Option<&'a Path>,
    /// lanes' own working directory, physical, for `PWD` when `cwd` is `None`.
    pub own_cwd: &'a Path,
    /// lanes' own environment with the run's additions (the manifest's `[env]`).
    pub env: &'a BaseEnv,
    /// Where programs were found on `PATH` (the shell, `srun`).
    pub programs: &'a ProgramPaths,
    pub job_env: &'a [(String, String)],
    pub key: &'a str,
    pub seq: u64,
    pub slot: u32,
    pub attempt: u32,
    /// Whether stdout and stderr are captured (through pipes) or discarded.
    pub capture: bool,
    /// Where the command runs.
    pub backend: &'a Backend,
    /// The turn timeout (a Slurm job's `--time`).
    pub timeout: Option<Duration>,
}

/// A started job: its pid (also its process group id), its exit notification and its pipes.
pub struct Spawned {
    pub pid: i32,
    pub exit: oneshot::Receiver<ExitFacts>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
}

/// Why a job could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// Out of processes or descriptors for now (EAGAIN, EMFILE, ENFILE): try again later.
    #[error("{0}")]
    Transient(io::Error),
    /// The job cannot start: its record is `failed`, reason `spawn_error`.
    #[error("{0}")]
    Failed(String),
}

/// Starts `SHELL -c COMMAND` with stdin from /dev/null, in a process group of its own, with
/// `LANES_KEY`, `LANES_SEQ`, `LANES_SLOT`, `LANES_ATTEMPT` and `PWD` set; the spawned process
/// starts with default signal dispositions and an empty signal mask (Rust's `Command` resets
/// both) and with no descriptor but 0, 1 and 2.
///
/// # Errors
/// [`SpawnError::Transient`] for EAGAIN/EMFILE/ENFILE, [`SpawnError::Failed`] for anything
/// else, naming the missing directory or the shell.
pub fn spawn(launch: &Launch<'_>, reaper: &Reaper) -> Result<Spawned, SpawnError> {
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
    let (program, args) = launch.backend.argv(
        launch.shell,
        launch.command,
        launch.key,
        launch.seq,
        launch.attempt,
        launch.timeout,
    );
    let pipes = if launch.capture {
        match (pipe(), pipe()) {
            (Ok(out), Ok(err)) => Some((out, err)),
            (Err(err), _) | (_, Err(err)) => return Err(classify_error(err, &program)),
        }
    } else {
        None
    };
    let seq = launch.seq.to_string();
    let slot = launch.slot.to_string();
    let attempt = launch.attempt.to_string();
    let mut env: Vec<(&str, &OsStr)> = launch
        .job_env
        .iter()
        .map(|(k, v)| (k.as_str(), OsStr::new(v)))
        .collect();
    env.extend([
        ("LANES_KEY", OsStr::new(launch.key)),
        ("LANES_SEQ", OsStr::new(&seq)),
        ("LANES_SLOT", OsStr::new(&slot)),
        ("LANES_ATTEMPT", OsStr::new(&attempt)),
        ("PWD", pwd.as_os_str()),
    ]);
    let request = spawn::Request {
        program: &program,
        args: &args,
        base_env: launch.env,
        programs: launch.programs,
        env: &env,
        cwd: &pwd,
        stdout: pipes.as_ref().map(|(out, _)| &out.1),
        stderr: pipes.as_ref().map(|(_, err)| &err.1),
    };
    let pid = spawn::spawn(&request).map_err(|err| classify_error(err, &program))?;
    let exit = reaper.watch(pid);
    // The write ends close here: the child holds its own copies.
    let (stdout, stderr) = match pipes {
        Some(((out, _), (err, _))) => (async_pipe(out).ok(), async_pipe(err).ok()),
        None => (None, None),
    };
    Ok(Spawned {
        pid,
        exit,
        // A pipe that cannot be registered is read as if closed; the job still runs.
        stdout,
        stderr,
    })
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
pub fn is_transient(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc_errno::EAGAIN | libc_errno::EMFILE | libc_errno::ENFILE)
    )
}

mod libc_errno {
    use nix::errno::Errno;
    pub const EAGAIN: i32 = Errno::EAGAIN as i32;
    pub const EMFILE: i32 = Errno::EMFILE as i32;
    pub const ENFILE: i32 = Errno::ENFILE as i32;
}

/// What the driver asks of a running job's supervisor.
#[derive(Debug, Clone, Copy)]
pub enum Control {
    /// Send `signal` to the job's process group once, then SIGKILL after the grace period.
    /// The first stop's reason is kept.
    Stop { signal: Signal, reason: StopReason },
    /// SIGKILL to the job's process group now (a second Ctrl-C).
    Kill,
}

/// Where a job's output goes (SPEC §5.1).
pub struct OutputPlan {
    pub mode: OutputMode,
    /// The job's stdout destination (lanes' stdout, or its stderr under `--json`).
    pub stdout: SinkTx,
    pub stderr: SinkTx,
    /// `[key] `, for prefixed stdout lines.
    pub prefix: Arc<[u8]>,
    /// The same for stderr lines (coloured or not, as stderr is).
    pub err_prefix: Arc<[u8]>,
    pub key: Arc<str>,
    /// `--results DIR`.
    pub results_dir: Option<Arc<Path>>,
}

/// Timing rules of supervision, and how stops are delivered.
#[derive(Debug, Clone)]
pub struct Timing {
    /// The backend: locally a stop signals the whole process group and ends in SIGKILL; under
    /// Slurm it is SIGINT to `srun` and, past the grace period, `scancel`.
    pub backend: Arc<Backend>,
    /// The try being supervised (names the Slurm job).
    pub attempt: u32,
    /// From the first signal to SIGKILL.
    pub grace: Duration,
    /// After the direct child exits: how long the rest of the group and the pipes get.
    pub leak_window: Duration,
}

/// How a supervised job ended: the facts the driver needs for its record.
#[derive(Debug)]
pub struct Ended {
    pub seq: u64,
    pub exit: ExitFacts,
    /// The reason of a stop requested while the direct child still ran.
    pub stopped_before_exit: Option<StopReason>,
    /// Processes of the group outlived the shell past the leak window, or something held the
    /// job's pipes open.
    pub leaked: bool,
    pub ended_at: SystemTime,
    pub ended_instant: Instant,
    /// A problem with the job's output files, for the record's `error`.
    pub output_error: Option<String>,
    /// The last bytes of the job's stderr (at most [`TAIL_BYTES`]), for the summary and JUnit.
    pub stderr_tail: Vec<u8>,
    /// `--output grouped`: the whole stdout and stderr, to be written as one block.
    pub captured: Option<(Capture, Capture)>,
}

/// How much of a job's stderr is kept for the summary and the JUnit file, in bytes.
pub const TAIL_BYTES: usize = 4096;

/// How often the process group is checked for emptiness once the direct child has exited and
/// members are left.
const GROUP_POLL: Duration = Duration::from_millis(10);

/// Size of one read from a job's pipe, in bytes: a whole pipe buffer (Linux's default pipe
/// capacity, pipe(7)).
const READ_SIZE: usize = 64 * 1024;

/// A stream's pipe is not read while this many bytes of it wait for its sink.
const PENDING_MAX: usize = 64 * 1024;

/// At most this many bytes are read from a pipe after its job's process group is gone, beyond
/// which a process outside the group is taken to be writing into it.
const DRAIN_MAX: usize = 4 * 1024 * 1024;

thread_local! {
    /// The one buffer every job's pipe is read into: a read's data is passed on before the
    /// next read, so jobs need no buffer of their own (and a job that writes nothing costs no
    /// buffer at all).
    static READ_BUFFER: std::cell::RefCell<Box<[u8]>> =
        std::cell::RefCell::new(vec![0; READ_SIZE].into_boxed_slice());
}

/// Supervises a started job until its process group is empty and its pipes are at EOF (or
/// past the leak window, held open by a process outside the group), then returns how it ended.
pub async fn supervise(
    seq: u64,
    spawned: Spawned,
    mut control: mpsc::UnboundedReceiver<Control>,
    plan: OutputPlan,
    timing: Timing,
    reaper: Reaper,
) -> Ended {
    let Spawned {
        pid,
        exit: mut exit_rx,
        mut stdout,
        mut stderr,
    } = spawned;
    let mut out = Stream::new(&plan, false);
    let mut err = Stream::new(&plan, true);
    let mut results = plan
        .results_dir
        .as_deref()
        .map(|dir| ResultFiles::create(dir, seq, &plan.key));
    let mut exit: Option<ExitFacts> = None;
    let mut stop: Option<(Signal, StopReason)> = None;
    let mut stopped_before_exit = None;
    let mut leaked = false;
    let mut leak_at: Option<Instant> = None;
    let mut window_over = false;
    let mut grace_at: Option<Instant> = None;
    let mut control_open = true;
    // A second Ctrl-C came: output still waiting for the sink is not waited for.
    let mut killed = false;

    loop {
        if exit.is_some() {
            let pipes_open = stdout.is_some() || stderr.is_some();
            // A pipe not read because its output waits for a full sink: whether the job is
            // over cannot wait for its EOF.
            let held_back =
                (stdout.is_some() && !out.may_read()) || (stderr.is_some() && !err.may_read());
            if !pipes_open || window_over || held_back {
                reaper.reap();
                if !group_alive(pid) {
                    // What the group left in the pipes is read now; a pipe still open after
                    // that is held by a process that left the group (setsid, a double fork
                    // into another session): stop reading, keep what was read.
                    out.drain(&mut stdout, results.as_mut());
                    err.drain(&mut stderr, results.as_mut());
                    let still_open = stdout.is_some() || stderr.is_some();
                    if !still_open {
                        break;
                    }
                    if window_over {
                        leaked = true;
                        break;
                    }
                    // Until the leak window is over, the holder may still close it.
                }
            }
        }
        tokio::select! {
            biased;
            message = control.recv(), if control_open => match message {
                Some(Control::Stop { signal, reason }) => {
                    if stop.is_none() {
                        stop = Some((signal, reason));
                        if exit.is_none() {
                            stopped_before_exit = Some(reason);
                            if timing.backend.is_local() {
                                signal_group(pid, signal);
                            } else {
                                signal_process(pid, timing.backend.stop_signal(signal));
                            }
                        } else {
                            // The shell is gone; what is left (background processes of a
                            // non-interactive shell ignore SIGINT) gets SIGTERM at once.
                            signal_group(pid, Signal::SIGTERM);
                        }
                        grace_at = Some(Instant::now() + timing.grace);
                    }
                }
                Some(Control::Kill) => {
                    force(pid, seq, &timing, exit.is_none());
                    grace_at = None;
                    killed = true;
                }
                None => control_open = false,
            },
            facts = &mut exit_rx, if exit.is_none() => {
                // The reaper never drops a watched pid's sender before sending; should it be
                // gone anyway, the job is taken as killed.
                exit = Some(facts.unwrap_or(ExitFacts::Signaled(Signal::SIGKILL as i32)));
                leak_at = Some(Instant::now() + timing.leak_window);
                if let Some((signal, _)) = stop {
                    if signal != Signal::SIGTERM && signal != Signal::SIGKILL {
                        signal_group(pid, Signal::SIGTERM);
                    }
                }
            },
            permit = room(&out) => out.hand_over(permit),
            permit = room(&err) => err.hand_over(permit),
            ready = readable(&stdout), if out.may_read() => {
                if !out.pump(&mut stdout, ready, results.as_mut()) {
                    stdout = None;
                }
            },
            ready = readable(&stderr), if err.may_read() => {
                if !err.pump(&mut stderr, ready, results.as_mut()) {
                    stderr = None;
                }
            },
            () = sleep_until_opt(leak_at) => {
                leak_at = None;
                window_over = true;
                reaper.reap();
                if group_alive(pid) {
                    // Left over past the window, unless lanes itself was already stopping
                    // the job when its shell exited.
                    if stopped_before_exit.is_none() {
                        leaked = true;
                    }
                    if stop.is_none() {
                        signal_group(pid, Signal::SIGTERM);
                        grace_at = Some(Instant::now() + timing.grace);
                    }
                }
            },
            () = sleep_until_opt(grace_at) => {
                grace_at = None;
                force(pid, seq, &timing, exit.is_none());
            },
            () = sleep(GROUP_POLL), if exit.is_some() => {},
        }
    }
    // The job is over now, whenever its output gets written.
    let ended_at = SystemTime::now();
    let ended_instant = Instant::now();
    let mut exit = exit.unwrap_or(ExitFacts::Signaled(Signal::SIGKILL as i32));
    let mut note = None;
    if exit == ExitFacts::Exited(0) && stopped_before_exit.is_none() && !timing.backend.is_local() {
        // A cancelled Slurm job can leave srun with status 0: ask the cluster.
        if let Some(state) = timing.backend.final_state(seq, timing.attempt) {
            if ended_badly(&state) {
                exit = ExitFacts::Signaled(Signal::SIGKILL as i32);
                note = Some(format!("the Slurm job ended {state}"));
            }
        }
    }
    out.finish();
    err.finish();
    // What waits for a full sink is written before the job is reported, so that its output
    // comes before anything written after its record; a second Ctrl-C (Kill) drops it.
    while !killed && (!out.pending.is_empty() || !err.pending.is_empty()) {
        tokio::select! {
            biased;
            message = control.recv(), if control_open => match message {
                Some(Control::Kill) => killed = true,
                Some(Control::Stop { .. }) => {}
                None => control_open = false,
            },
            permit = room(&out) => out.hand_over(permit),
            permit = room(&err) => err.hand_over(permit),
        }
    }
    let captured = match (out.capture.take(), err.capture.take()) {
        (Some(stdout), Some(stderr)) => Some((stdout, stderr)),
        _ => None,
    };
    Ended {
        seq,
        exit,
        stopped_before_exit,
        leaked,
        ended_at,
        ended_instant,
        output_error: note.or(results.and_then(|r| r.error)),
        stderr_tail: err.tail,
        captured,
    }
}

/// Whether a Slurm job state says the job was ended by the cluster rather than by its own exit
/// (`squeue(1)` JOB STATE CODES).
fn ended_badly(state: &str) -> bool {
    matches!(
        state,
        "CANCELLED"
            | "TIMEOUT"
            | "FAILED"
            | "NODE_FAIL"
            | "PREEMPTED"
            | "OUT_OF_MEMORY"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "REVOKED"
    )
}

/// The end of the grace period, or a second Ctrl-C: SIGKILL to the whole group locally; under
/// Slurm, `scancel` of the job (never SIGKILL to `srun`, which would leave the job running on
/// the cluster) and SIGINT to `srun` again.
fn force(pid: i32, seq: u64, timing: &Timing, running: bool) {
    if timing.backend.is_local() {
        signal_group(pid, Signal::SIGKILL);
    } else if running {
        timing.backend.cancel(seq, timing.attempt);
        signal_process(pid, Signal::SIGINT);
    } else {
        signal_group(pid, Signal::SIGKILL);
    }
}

async fn readable(pipe: &Option<pipe::Receiver>) -> io::Result<()> {
    match pipe {
        Some(pipe) => pipe.readable().await,
        None => std::future::pending().await,
    }
}

/// One of a job's two output streams on its way out.
struct Stream {
    is_stderr: bool,
    /// Where lines or bytes go as they come (prefixed, raw).
    sink: Option<SinkTx>,
    framer: Option<LineFramer>,
    /// Everything, held until the job ends (grouped).
    capture: Option<Capture>,
    /// The last bytes seen (stderr only), at most [`TAIL_BYTES`] once trimmed.
    tail: Vec<u8>,
    /// Read and framed, not yet handed to the sink (which may be full: lanes' stdout blocked).
    pending: Vec<u8>,
}

impl Stream {
    fn new(plan: &OutputPlan, is_stderr: bool) -> Self {
        let sink = if is_stderr {
            &plan.stderr
        } else {
            &plan.stdout
        };
        let (sink, framer, capture) = match plan.mode {
            OutputMode::Prefixed => (
                Some(sink.clone()),
                Some(LineFramer::new(plan.prefix.to_vec())),
                None,
            ),
            OutputMode::Raw => (Some(sink.clone()), None, None),
            OutputMode::Grouped => (Some(sink.clone()), None, Some(Capture::default())),
            OutputMode::None => (None, None, None),
        };
        Stream {
            is_stderr,
            sink,
            framer,
            capture,
            tail: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Whether the pipe may be read: not while [`PENDING_MAX`] bytes wait for the sink, so that
    /// a blocked destination holds the job back through its pipe instead of growing memory.
    fn may_read(&self) -> bool {
        self.pending.len() < PENDING_MAX
    }

    /// Reads everything left in the pipe once the job's process group is gone (at most a pipe
    /// buffer, but never more than [`DRAIN_MAX`] bytes), whatever waits for the sink. The pipe
    /// is closed at EOF; still open afterwards, it is held by a process outside the group.
    fn drain(&mut self, pipe: &mut Option<pipe::Receiver>, mut results: Option<&mut ResultFiles>) {
        for _ in 0..DRAIN_MAX / READ_SIZE {
            match self.read(pipe, results.as_deref_mut()) {
                Read::Data => {}
                Read::Closed => {
                    *pipe = None;
                    return;
                }
                Read::Empty => return,
            }
        }
    }

    /// Reads what is available into `pending` (or the capture). Returns false at EOF or on a
    /// read error.
    fn pump(
        &mut self,
        pipe: &mut Option<pipe::Receiver>,
        ready: io::Result<()>,
        results: Option<&mut ResultFiles>,
    ) -> bool {
        if ready.is_err() {
            return false;
        }
        !matches!(self.read(pipe, results), Read::Closed)
    }

    /// One read from the pipe.
    fn read(&mut self, pipe: &Option<pipe::Receiver>, results: Option<&mut ResultFiles>) -> Read {
        let Some(reader) = pipe.as_ref() else {
            return Read::Closed;
        };
        READ_BUFFER.with_borrow_mut(|buffer| match reader.try_read(buffer) {
            Ok(0) => Read::Closed,
            Ok(n) => {
                let data = &buffer[..n];
                if self.is_stderr {
                    self.tail.extend_from_slice(data);
                    if self.tail.len() > 2 * TAIL_BYTES {
                        self.tail.drain(..self.tail.len() - TAIL_BYTES);
                    }
                }
                if let Some(results) = results {
                    results.write(self.is_stderr, data);
                }
                if let Some(capture) = &mut self.capture {
                    capture.push(data);
                } else if let Some(framer) = &mut self.framer {
                    // Room for the data and a prefix on every 64 bytes of it, so that a
                    // batch of ordinary lines is built without growing.
                    self.pending.reserve(n + (n / 64 + 1) * framer.prefix_len());
                    framer.push(data, &mut self.pending);
                } else if self.sink.is_some() {
                    self.pending.extend_from_slice(data);
                }
                Read::Data
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Read::Empty,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Read::Empty,
            Err(_) => Read::Closed,
        })
    }

    /// Hands what is pending to the sink through a reserved place in its queue.
    fn hand_over(&mut self, permit: Option<Permit>) {
        let batch = std::mem::take(&mut self.pending);
        if let Some(permit) = permit {
            permit.send(batch);
        }
    }

    /// Frames the unfinished last line (prefixed) into `pending`, and trims the tail.
    fn finish(&mut self) {
        if self.tail.len() > TAIL_BYTES {
            self.tail.drain(..self.tail.len() - TAIL_BYTES);
        }
        if let Some(framer) = &mut self.framer {
            framer.finish(&mut self.pending);
        }
        if self.sink.is_none() {
            self.pending.clear();
        }
    }
}

/// What one read from a job's pipe found.
enum Read {
    Data,
    /// Nothing now (EAGAIN).
    Empty,
    /// EOF or a read error.
    Closed,
}

type Permit = tokio::sync::mpsc::OwnedPermit<Vec<u8>>;

/// A place in `stream`'s sink queue once one is free, when something is pending; never
/// otherwise. `None` when the sink is closed (what is pending is then dropped). The future
/// holds its own handle of the sink, not a borrow of the stream.
fn room(stream: &Stream) -> impl std::future::Future<Output = Option<Permit>> {
    let sink = stream
        .sink
        .as_ref()
        .filter(|_| !stream.pending.is_empty())
        .cloned();
    async move {
        match sink {
            Some(sink) => sink.reserve_owned().await.ok(),
            None => std::future::pending().await,
        }
    }
}
