//! Starting a run the core took: its command rendered, its process spawned with the run's
//! environment, and a task that supervises it until its process group is empty and then
//! reports how it ended.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::cgroup::{CgroupRun, JobCgroup};
use super::reap::Reaper;
use super::spawn::{self, BaseEnv, Launch, ProgramPaths, SpawnError};
use super::spawner::{SpawnOutcome, Spawner};
use super::supervise::{self, Control, Ended, TimeStopped, Timing};
use crate::config::{Backend, RunConfig, SpawnThreads};
use crate::core::{SpawnFailure, Start};
use crate::input::JobSpec;
use crate::output::framing::prefix_for;
use crate::output::pump::OutputPlan;
use crate::output::sink::SinkTx;
use crate::settings::OutputMode;
use crate::template::Template;

/// The sinks job output and status text go to.
pub(crate) struct Streams {
    /// Job stdout (lanes' stdout, or its stderr under `--json`).
    pub(crate) job_stdout: SinkTx,
    /// Job stderr and lanes' own messages.
    pub(crate) stderr: SinkTx,
    /// Whether key prefixes on the job-stdout sink are coloured.
    pub(crate) color_stdout: bool,
    /// Whether key prefixes on the stderr sink are coloured.
    pub(crate) color_stderr: bool,
    /// Whether `job_stdout` and `stderr` end in one file (one terminal, `2>&1`, `--json`):
    /// output whose order across them matters (a grouped block) then goes through one of them.
    pub(crate) one_destination: bool,
}

/// The most starts handed to each spawning thread and not yet back (see
/// [`Launcher::hand_to_spawning_thread`]).
const QUEUED_PER_THREAD: usize = 2;

/// Everything every start of a run shares, prepared once.
pub(crate) struct Launcher {
    shell: String,
    template: Option<Template>,
    /// The environment every job starts from.
    base_env: Arc<BaseEnv>,
    /// `LANES_RESOURCE_<NAME>` of each named resource: set by lanes for the units granted,
    /// never taken from a job's own `env`.
    resource_vars: Vec<String>,
    /// Where the shell (or `srun`) was found on `PATH`.
    programs: Arc<ProgramPaths>,
    /// lanes' own working directory, physical; `None` when it has none (deleted under it).
    own_cwd: Option<PathBuf>,
    backend: Arc<Backend>,
    output: OutputMode,
    results_dir: Option<Arc<Path>>,
    grace: Duration,
    leak_window: Duration,
    /// How long lanes has been stopped by Ctrl-Z: every supervisor's clock leaves it out.
    time_stopped: TimeStopped,
    streams: Streams,
    reaper: Reaper,
    ended_tx: mpsc::UnboundedSender<Ended>,
    /// The run's cgroup, when jobs are contained in cgroups.
    cgroups: Option<CgroupRun>,
    /// The threads that start jobs, started with the first job; `None` before, when the run
    /// has none (`spawn_threads` 0), and when none could be started or they were given up
    /// (jobs then start on this thread).
    spawner: Option<Spawner>,
    /// How many spawning threads to start with the first start handed to them, and when they
    /// take one; 0 threads once they may not (or need not) be started.
    spawn_threads: SpawnThreads,
    /// Whether other work waits for the event loop behind the next start
    /// ([`Launcher::set_backlog`]).
    backlog: bool,
    /// Starts handed to spawning threads whose outcome has not come back.
    on_threads: usize,
    /// Where spawn outcomes go (the spawner's channel, used directly without it).
    outcomes: mpsc::UnboundedSender<SpawnOutcome>,
    /// The runs whose spawn is in flight, by first seq: what their start needs once the pid
    /// is known.
    starting: HashMap<crate::core::Seq, Starting>,
}

/// A run handed to the spawner: how it was taken, and what its supervisor needs once it has
/// started.
struct Starting {
    start: Start,
    control: mpsc::UnboundedReceiver<Control>,
    cgroup: Option<JobCgroup>,
    plan: OutputPlan,
    timing: Timing,
    /// Handed to a spawning thread (counted in `on_threads` until its outcome comes back).
    by_thread: bool,
}

/// What came of a spawn ([`Launcher::spawned`]): the run as it was taken, and the pid of its
/// direct child or why it did not start.
pub(crate) type Spawned = (Start, Result<i32, NotStarted>);

/// A run that could not start: what the core is told, and the message for its record.
pub(crate) struct NotStarted {
    /// For [`crate::core::Scheduler::spawn_failed`].
    pub(crate) failure: SpawnFailure,
    /// The OS error, for people.
    pub(crate) message: String,
}

impl Launcher {
    /// Prepares the run's starts: what came of each spawn goes to `outcomes` (for
    /// [`Launcher::spawned`]), and supervisors report each end on `ended_tx`.
    pub(crate) fn new(
        config: &RunConfig,
        streams: Streams,
        reaper: Reaper,
        channels: (
            mpsc::UnboundedSender<SpawnOutcome>,
            mpsc::UnboundedSender<Ended>,
        ),
        cgroups: Option<CgroupRun>,
    ) -> Self {
        let (outcomes, ended_tx) = channels;
        let resource_vars: Vec<String> = config
            .resources
            .iter()
            .map(|resource| crate::resources::env_name(&resource.name))
            .collect();
        Launcher {
            shell: config.shell.clone(),
            template: config.template.clone(),
            base_env: Arc::new(
                BaseEnv::new(&config.env).without(
                    &resource_vars
                        .iter()
                        .cloned()
                        // Set for each job where its directory is known.
                        .chain(["PWD".to_owned()])
                        .chain(config.backend.allocation_variables())
                        .collect::<Vec<_>>(),
                ),
            ),
            resource_vars,
            programs: Arc::default(),
            own_cwd: std::env::current_dir().and_then(std::fs::canonicalize).ok(),
            backend: Arc::new(config.backend.clone()),
            output: config.output,
            results_dir: config.results.as_deref().map(Arc::from),
            grace: config.grace,
            leak_window: config.leak_window,
            time_stopped: TimeStopped::default(),
            streams,
            reaper,
            ended_tx,
            cgroups,
            spawner: None,
            spawn_threads: config.spawn_threads,
            backlog: false,
            on_threads: 0,
            outcomes,
            starting: HashMap::new(),
        }
    }

    /// The containment in force, as the run record names it.
    pub(crate) fn containment(&self) -> &'static str {
        if self.cgroups.is_some() {
            "cgroup"
        } else {
            "process_group"
        }
    }

    /// The command a run executes: the job's own, or (`--command`) the template rendered with
    /// the arguments of every job of the batch, `members` in order.
    /// `members` are gathered only for a template.
    pub(crate) fn command<'a>(
        &self,
        job: &JobSpec,
        start: &Start,
        members: impl Iterator<Item = &'a str>,
    ) -> String {
        match &self.template {
            Some(template) => {
                let members: Vec<&str> = members.collect();
                template.render_granted(
                    &members,
                    &job.key,
                    start.seq,
                    start.slot,
                    start.grant.as_deref(),
                )
            }
            None => job.command.clone(),
        }
    }

    /// Hands the run `start` of `job`, as `command`, to the spawning threads, with `locks`
    /// (`--lock-dir`: its key's and shared slot's, as descriptors 3 and 4; they must stay open
    /// until [`Launcher::spawned`] is called for it). Returns the channel to its supervisor: a
    /// stop sent before the job has started is carried out once it has.
    ///
    /// # Errors
    /// When it cannot even be handed over (its cgroup, its pipes, its working directory): a
    /// shortage (EAGAIN, EMFILE, ENFILE) or a failure.
    pub(crate) fn launch(
        &mut self,
        job: &JobSpec,
        start: Start,
        command: &str,
        locks: [Option<std::os::fd::RawFd>; 2],
    ) -> Result<mpsc::UnboundedSender<Control>, NotStarted> {
        if !crate::serve::server::spares_held() {
            // `lanes serve` out of descriptors: a connection's spare is taken back first. Only
            // jobs of the server free descriptors for good (a connection that closes gives
            // its spare back): with none running, none will.
            return Err(self.after_shortage(NotStarted {
                failure: SpawnFailure::Shortage { descriptors: true },
                message: "no descriptor free beside those the server keeps for connections \
                          (raise `ulimit -n`)"
                    .to_owned(),
            }));
        }
        let cgroup = match &self.cgroups {
            Some(run) => Some(run.job().map_err(|err| {
                // Out of descriptors, or at a cgroup limit (`cgroup.max.descendants`,
                // `cgroup.max.depth`: EAGAIN): the run's own jobs ending may free one; with
                // none running, nothing will, and the job fails rather than wait for ever.
                let failure = if crate::descriptors::is_passing_shortage(&err) {
                    SpawnFailure::Shortage { descriptors: true }
                } else {
                    SpawnFailure::Failed
                };
                let hint = match err.raw_os_error() {
                    Some(nix::libc::EMFILE | nix::libc::ENFILE) => {
                        ", and no running job will free a descriptor (raise `ulimit -n`)"
                    }
                    _ => "",
                };
                NotStarted {
                    failure,
                    message: format!("cannot create the job's cgroup: {err}{hint}"),
                }
            })?),
            None => None,
        };
        // A job's own `env` cannot hand it units it was not granted (`LANES_RESOURCE_<NAME>`
        // is lanes' to set, as it is in `[env]`).
        let own_env: std::borrow::Cow<'_, [(String, String)]> = if job
            .env
            .iter()
            .any(|(name, _)| self.resource_vars.contains(name))
        {
            job.env
                .iter()
                .filter(|(name, _)| !self.resource_vars.contains(name))
                .cloned()
                .collect::<Vec<_>>()
                .into()
        } else {
            (&job.env[..]).into()
        };
        let launch = Launch {
            shell: &self.shell,
            command,
            cwd: job.cwd.as_deref(),
            own_cwd: self.own_cwd.as_deref(),
            env: &self.base_env,
            programs: &self.programs,
            job_env: &own_env,
            key: &job.key,
            seq: job.seq,
            slot: start.slot,
            attempt: start.attempt,
            grant: start.grant.as_deref(),
            capture: self.output != OutputMode::None || self.results_dir.is_some(),
            backend: &self.backend,
            timeout: job.timeout,
            cgroup: cgroup.as_ref().map(super::cgroup::JobCgroup::fd),
            locks,
        };
        // Made before the start, so that a shortage of descriptors for them waits as one
        // for the start does (the output is not lost).
        let results = match self.results_dir.as_deref() {
            Some(dir) => {
                match crate::output::results::ResultFiles::create(dir, start.seq, &job.key) {
                    Ok(files) => Some(files),
                    Err(err) => {
                        if let Some(cgroup) = cgroup {
                            cgroup.discard();
                        }
                        return Err(self.after_shortage(NotStarted {
                            failure: SpawnFailure::Shortage { descriptors: true },
                            message: format!(
                            "cannot create the job's --results files: {err}, and no running job \
                             will free a descriptor (raise `ulimit -n`)"
                        ),
                        }));
                    }
                }
            }
            None => None,
        };
        let order = match spawn::prepare(&launch) {
            Ok(order) => order,
            Err(err) => {
                if let Some(cgroup) = cgroup {
                    cgroup.discard();
                }
                return Err(self.after_shortage(not_started(err)));
            }
        };
        let key = Arc::clone(&job.key);
        let plan = OutputPlan {
            mode: self.output,
            stdout: self.streams.job_stdout.clone(),
            stderr: self.streams.stderr.clone(),
            prefix: Arc::from(prefix_for(&key, self.streams.color_stdout)),
            err_prefix: Arc::from(prefix_for(&key, self.streams.color_stderr)),
            key,
            results,
        };
        let timing = Timing {
            backend: Arc::clone(&self.backend),
            attempt: start.attempt,
            grace: self.grace,
            leak_window: self.leak_window,
            time_stopped: self.time_stopped.clone(),
        };
        let (control_tx, control) = mpsc::unbounded_channel();
        let seq = start.seq;
        let by_thread = self.hand_to_spawning_thread();
        self.starting.insert(
            seq,
            Starting {
                start,
                control,
                cgroup,
                plan,
                timing,
                by_thread,
            },
        );
        match self.spawner.as_ref().filter(|_| by_thread) {
            Some(spawner) => {
                self.on_threads += 1;
                spawner.submit(seq, order);
            }
            None => {
                // Started here.
                let _ = self
                    .outcomes
                    .send(super::spawner::start(seq, order, &self.reaper));
            }
        }
        Ok(control_tx)
    }

    /// Whether the start to be made now is the spawning threads' (see [`SpawnThreads`]): then
    /// they are there, started with the first start handed over, so that a run that never
    /// hands one over starts no thread. Otherwise the event loop makes it, as it does while
    /// [`QUEUED_PER_THREAD`] starts per thread wait for them already: a burst of thousands
    /// of starts is not queued there whole, to be made after a stop signal or a deadline the
    /// event loop has long seen (`-j 3000` on 2 CPUs made every start after Ctrl-C).
    fn hand_to_spawning_thread(&mut self) -> bool {
        let SpawnThreads {
            threads,
            only_in_bursts,
        } = self.spawn_threads;
        if threads == 0
            || self.on_threads >= threads * QUEUED_PER_THREAD
            || (only_in_bursts && !(self.backlog && self.on_threads < threads))
        {
            return false;
        }
        if self.spawner.is_none() {
            self.spawner = Spawner::new(threads, self.reaper.clone(), self.outcomes.clone()).ok();
            if self.spawner.is_none() {
                self.spawn_threads.threads = 0;
            }
        }
        self.spawner.is_some()
    }

    /// Whether other work (jobs' ends, input lines, the round's later starts) waits for the
    /// event loop behind the starts to come: with spawning threads that take only bursts, a
    /// start is then handed to one, so that the event loop goes on with that work while the
    /// job starts.
    pub(crate) fn set_backlog(&mut self, backlog: bool) {
        self.backlog = backlog;
    }

    /// Whether the run job `seq` belongs to was handed over and its spawn is in flight.
    pub(crate) fn spawning(&self, seq: crate::core::Seq) -> bool {
        self.starting
            .values()
            .any(|starting| starting.start.batch.contains(&seq))
    }

    /// What came of a spawn, with the run as it was taken: on success the
    /// task supervising the job is started and the pid of its direct child (its process
    /// group) given; `None` for a run not handed over. The result is an error when its
    /// process could not be started: a shortage (EAGAIN, EMFILE, ENFILE) or a failure.
    pub(crate) fn spawned(&mut self, outcome: SpawnOutcome) -> Option<Spawned> {
        let Starting {
            start,
            control,
            cgroup,
            plan,
            timing,
            by_thread,
        } = self.starting.remove(&outcome.seq)?;
        if by_thread {
            self.on_threads -= 1;
        }
        let (pid, exit, pipes) = match outcome.result {
            Ok(started) => started,
            Err(err) => {
                if matches!(&err, SpawnError::Transient(err) if err.raw_os_error() == Some(nix::libc::EAGAIN))
                {
                    // Out of processes: each spawning thread counts as one against
                    // RLIMIT_NPROC, so they end (once they have started what they hold), and
                    // jobs start on this thread from now on.
                    self.spawner = None;
                    self.spawn_threads.threads = 0;
                }
                if let Some(cgroup) = cgroup {
                    cgroup.discard();
                }
                let result = Err(self.after_shortage(not_started(err)));
                return Some((start, result));
            }
        };
        let spawned = pipes.spawned(pid, exit);
        let ended_tx = self.ended_tx.clone();
        let reaper = self.reaper.clone();
        let seq = outcome.seq;
        tokio::spawn(async move {
            let ended =
                supervise::supervise(seq, spawned, cgroup, control, plan, timing, reaper).await;
            let _ = ended_tx.send(ended);
        });
        Some((start, Ok(pid)))
    }

    /// No job waits to start (the input is over and every job admitted has started): job
    /// cgroups are no longer kept for later jobs ([`CgroupRun::keep_no_more`]). A retry that
    /// comes after makes a cgroup of its own.
    pub(crate) fn last_jobs_started(&self) {
        if let Some(run) = &self.cgroups {
            run.keep_no_more();
        }
    }

    /// A start that ran out of lanes' descriptors while empty job cgroups were kept open for
    /// later jobs: they are let go, and the start may be tried again even with no job
    /// running. (The failed start's own cgroup is removed before, not counted: else a start
    /// alone would be tried again for ever.)
    fn after_shortage(&self, mut not_started: NotStarted) -> NotStarted {
        if not_started.failure == (SpawnFailure::Shortage { descriptors: true })
            && self
                .cgroups
                .as_ref()
                .is_some_and(|run| run.release_idle() > 0)
        {
            not_started.failure = SpawnFailure::Shortage { descriptors: false };
        }
        not_started
    }

    /// Ctrl-Z: stops every running job (`runs`: first seq and process group) as `lanes` stops;
    /// in cgroup mode the run's cgroup is frozen (`cgroup.freeze`), which holds every process
    /// of every job and leaves a process's own stop alone; without, each job's process group
    /// and the processes that left it get SIGSTOP, and the processes already stopped before
    /// by a stop signal (a job that stopped itself, SIGTTIN; not one a debugger holds, see
    /// [`super::stopped::stopped_processes`]) are noted, so that [`Launcher::thaw`]
    /// leaves them stopped as a thawed cgroup does.
    pub(crate) fn freeze(&self, runs: &[(crate::core::Seq, i32)]) -> Frozen {
        use nix::sys::signal::Signal;
        match &self.cgroups {
            Some(run) => {
                run.freeze(true);
                Frozen::default()
            }
            None => {
                let already_stopped = super::stopped::stopped_processes(runs);
                for &(_, pgid) in runs {
                    super::unix::signal_group(pgid, Signal::SIGSTOP);
                }
                // A stray that leads a process group of its own (setsid) is stopped with its
                // group: what it forks meanwhile is stopped with it.
                let strays = super::lineage::strays_of(runs);
                for &pid in &strays {
                    super::unix::signal_escapee(pid, Signal::SIGSTOP);
                }
                Frozen {
                    strays,
                    already_stopped,
                }
            }
        }
    }

    /// `fg`/`bg`: continues what [`Launcher::freeze`] stopped (`frozen`: what it returned),
    /// lanes having been stopped for `stopped`, which no grace period or leak window counts.
    /// With no process stopped before the freeze, each job's group gets one `killpg` and each
    /// stray as [`Launcher::freeze`] signalled it; else every process of those groups and
    /// every stray is continued on its own, those stopped before left out. Nothing forks
    /// meanwhile: every process of every job is stopped.
    pub(crate) fn thaw(
        &self,
        runs: &[(crate::core::Seq, i32)],
        frozen: &Frozen,
        stopped: Duration,
    ) {
        use super::unix::{signal_escapee, signal_group, signal_process};
        use nix::sys::signal::Signal;
        self.time_stopped.add(stopped);
        if let Some(run) = &self.cgroups {
            run.freeze(false);
            return;
        }
        let held = &frozen.already_stopped;
        let procs = if held.is_empty() {
            None
        } else {
            super::unix::proc_snapshot()
        };
        let Some(procs) = procs else {
            for &(_, pgid) in runs {
                signal_group(pgid, Signal::SIGCONT);
            }
            for &pid in &frozen.strays {
                signal_escapee(pid, Signal::SIGCONT);
            }
            return;
        };
        // The groups the freeze stopped: the jobs', and those the strays lead.
        let groups: HashSet<i32> = runs
            .iter()
            .map(|&(_, pgid)| pgid)
            .chain(
                frozen
                    .strays
                    .iter()
                    .copied()
                    .filter(|pid| procs.get(pid).is_some_and(|stat| stat.pgid == *pid)),
            )
            .collect();
        for (&pid, stat) in &procs {
            let frozen_here = groups.contains(&stat.pgid) || frozen.strays.contains(&pid);
            if frozen_here && !held.contains(&pid) {
                signal_process(pid, Signal::SIGCONT);
            }
        }
    }

    /// Whether the jobs' stdout output (to lanes' stdout; to its stderr under `--json`) failed
    /// to be written so far for another reason than a reader gone: a full disk, a file-size
    /// limit.
    pub(crate) fn job_stdout_lost(&self) -> bool {
        self.streams.job_stdout.lost()
    }

    /// The sink of lanes' own messages.
    pub(crate) fn stderr(&self) -> &SinkTx {
        &self.streams.stderr
    }

    /// Where jobs run.
    pub(crate) fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Whether starts handed to the spawning threads are under way (their outcomes not yet
    /// taken by [`Launcher::spawned`]).
    pub(crate) fn spawning_on_threads(&self) -> bool {
        self.on_threads > 0
    }

    /// The reaper every start registers with.
    pub(crate) fn reaper(&self) -> &Reaper {
        &self.reaper
    }
}

/// What [`Launcher::freeze`] stopped without cgroups, for [`Launcher::thaw`]: the processes
/// that left their jobs' groups (each signalled on its own), and the processes that were
/// stopped already and stay so.
#[derive(Default)]
pub(crate) struct Frozen {
    strays: Vec<i32>,
    already_stopped: HashSet<i32>,
}

/// What the core is told of a start that failed, and the message for the record.
fn not_started(err: SpawnError) -> NotStarted {
    match err {
        SpawnError::Transient(err) => NotStarted {
            failure: SpawnFailure::Shortage {
                descriptors: err.raw_os_error() == Some(nix::libc::EMFILE),
            },
            message: format!(
                "cannot start a job: {err}, and no running job will free a descriptor \
                 (raise `ulimit -n`)"
            ),
        },
        SpawnError::Failed(message) => NotStarted {
            failure: SpawnFailure::Failed,
            message,
        },
    }
}
