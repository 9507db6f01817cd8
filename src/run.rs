//! One run from the command line to the exit status: the configuration, the input, the
//! outputs and their writer threads, the event loop, and the last writes (job output first,
//! then the summary, the last thing a person reads).

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal as _};
use std::time::SystemTime;

use anyhow::{bail, Context as _};

use crate::cli::Cli;
use crate::config::{use_color, use_progress, RunConfig, Source, Surroundings};
use crate::input::arguments::{from_list, RecordReader};
use crate::input::lines::{LineItem, NumberedLine};
use crate::output::sink::{stderr_file, Sink};
use crate::output::spool::Spool;
use crate::report::events::EventLog;
use crate::report::junit::JunitReport;
use crate::report::ledger::Ledger;
use crate::report::progress::Progress;
use crate::report::recorder::Recorder;
use crate::settings::ContainmentMode;
use crate::shell::cgroup::CgroupRun;
use crate::shell::coordinate::{CheckedCoordinator, FleetSettings};
use crate::shell::driver::{drive, Prepared, RunEnd};
use crate::shell::input::Feed;
use crate::shell::key_locks::CheckedKeyLocks;
use crate::shell::launch::Streams;
use crate::shell::lock_dir::LockDir;
use crate::shell::signal::{until_stopped, StopSignals, FORCED_WRITE_WAIT};
use crate::shell::strict::Checked;

/// Runs `lanes` as the command line says; returns the exit status (SPEC §6).
///
/// # Errors
/// Anything that stops the run before the first job could start: an invalid manifest, a
/// `--strict` input error, an unreadable input file, a report file that cannot be created. The
/// caller prints the error and exits with [`exit::USAGE`].
pub fn run(cli: Cli, hangup_ignored: bool) -> anyhow::Result<u8> {
    // A manifest from a FIFO or a pipe (`--manifest -`) is read to its end here, before
    // anything starts, for as long as its writer takes: a stop signal meanwhile ends lanes at
    // once, as any program. Otherwise one waits for the run's handlers, as it does from the
    // process's first step, and the run it stops has a whole report.
    let mut config = if manifest_from_a_pipe(&cli) {
        crate::shell::signal::stoppable_at_start(|| RunConfig::from_cli(cli))?
    } else {
        RunConfig::from_cli(cli)?
    };
    if config.dry_run {
        // What the run would refuse before it starts, the dry run refuses too (nothing made).
        check_outputs(&config)?;
        if let Some(dir) = &config.results {
            crate::output::results::check_dir(dir, config.results_clean, config.resume.is_some())
                .map_err(anyhow::Error::msg)?;
        }
        if let Some(dir) = &config.lock_dir {
            crate::shell::lock_dir::check(dir)
                .map_err(|err| err.given_as(&config.lock_dir_given_as))?;
        }
        check_cluster(&config)?;
        if config.containment == ContainmentMode::Cgroup {
            // Made to find out whether it can be, and removed at once.
            drop(containment(config.containment)?);
        }
        let resume = load_resume(&config)?;
        let runtime = event_loop()?;
        if let (None, Some(url)) = (&config.lock_dir, &config.coordinate) {
            // The database can be reached, as the run's start finds out (its tables are
            // left as they are).
            // A stop signal meanwhile ends lanes at once, as any program: nothing was planned.
            crate::shell::signal::stoppable_at_start(|| {
                runtime.block_on(CheckedCoordinator::reach(url))
            })
            .map_err(|err| coordinate_error(&err, &config.coordinate_given_as))?;
        }
        return match feed_for(&config, &runtime, hangup_ignored, None)? {
            // Reading the input to plan it (for as long as its writer takes): a stop signal
            // meanwhile ends lanes at once, as any program, and no plan is printed.
            (Checked::Valid(feed), None) => crate::shell::signal::stoppable_at_start(|| {
                crate::dry_run::print(&config, feed, resume)
            }),
            // `--strict` read it already, its handlers standing: the plan is made at once.
            (Checked::Valid(feed), Some(_)) => crate::dry_run::print(&config, feed, resume),
            (Checked::Interrupted { signal, lines }, _) => {
                eprintln!(
                    "lanes: {signal} while checking the input (--strict): {} checked, none \
                     invalid so far; no plan",
                    crate::plural::plural(lines, "line")
                );
                Ok(crate::exit::for_run(Some(signal as i32), false))
            }
        };
    }
    check_cluster(&config)?;
    let cgroups = containment(config.containment)?;
    let runtime = event_loop()?;
    // `lanes serve`: a second server on the same socket or journal, or a socket that cannot be
    // bound, fails before any file is made; the journal is read before the report is created
    // (it may be the earlier server's, holding records the journal needs); the socket is bound
    // once the outputs are open, so that no client is accepted by a server still opening them.
    // The outputs can be made: checked before anything is (a journal rewritten, an output
    // emptied), so that a failed start leaves every file as it was.
    check_outputs(&config)?;
    let serving = match &config.source {
        Source::Socket(given) => {
            let path = crate::serve::socket::serve_path(given.as_deref())?;
            for (flag, _, output) in outputs(&config) {
                if output.is_some_and(|output| crate::config::same_file(output, &path)) {
                    bail!(
                        "{flag} {} is the server's socket: give each its own path",
                        path.display()
                    );
                }
            }
            crate::serve::socket::check_free(&path)?;
            let journal_path = config
                .journal
                .clone()
                .unwrap_or_else(|| crate::serve::journal::default_path(&path));
            let lock_path = crate::serve::journal::lock_path(&journal_path);
            for (what, file) in [("journal", &journal_path), ("journal's lock", &lock_path)] {
                if crate::config::same_file(file, &path) {
                    let hint = if config.journal.is_some() {
                        "give --journal another path"
                    } else {
                        "the journal is by default the socket's path with the extension \
                         `.journal`: give --journal, or another name to the socket"
                    };
                    bail!(
                        "the {what} {} would be the server's socket: {hint}",
                        file.display()
                    );
                }
            }
            check_journal_apart(&journal_path, &config)?;
            crate::serve::socket::check_length(&path)?;
            check_output(&path).with_context(|| format!("cannot listen on {}", path.display()))?;
            let (command, colsep) = config.recorded_template();
            let under = std::env::current_dir()
                .ok()
                .map(|cwd| crate::serve::journal::RunsUnder {
                    command,
                    colsep,
                    // Its file: `sh` and `/bin/sh` are one shell.
                    shell: crate::shell::spawn::program_file(&config.shell)
                        .map_or_else(|| config.shell.clone(), |file| file.display().to_string()),
                    cwd,
                });
            let journal = crate::serve::journal::Journal::open_under(
                &journal_path,
                config.requeue_lost,
                config.report.as_deref(),
                under,
            )?;
            if let Some(report) = &journal.1.report_unread {
                eprintln!(
                    "lanes: the earlier server's report {} cannot be read: its jobs left without \
                     a record are recorded (or run) as if none had been written",
                    report.display()
                );
            }
            // The server's jobs reach it by default (`lanes drain`, `lanes submit` inside
            // one), wherever they change directory.
            if let Some(socket) = std::path::absolute(&path)
                .ok()
                .and_then(|absolute| absolute.into_os_string().into_string().ok())
            {
                config.env.push(("LANES_SOCKET".to_owned(), socket));
            }
            Some((path, journal))
        }
        _ => None,
    };
    // The run's one clock: every time in the report is tick zero plus a tick. It starts
    // before the database of `--coordinate` is waited for and `--strict` checks the input, so
    // that the run's duration covers both.
    let (origin, t0) = (SystemTime::now(), tokio::time::Instant::now());
    // A stop signal that came while the database of `--coordinate` was waited for: nothing
    // is read or run, and the report says so. Its handlers, installed for that wait, are the
    // run's.
    let mut stopped_at_start = None;
    let mut early_signals = None;
    if !config.resources.is_empty() && (config.lock_dir.is_some() || config.coordinate.is_some()) {
        // Keys are shared with other processes; units of a resource are not.
        eprintln!(
            "lanes: named resources are handed out by this lanes alone: other lanes processes \
             sharing keys with it do not share their units (make each unit a key to share it)"
        );
    }
    let lock_dir = match (&config.lock_dir, &config.coordinate) {
        (Some(dir), _) => Some(CheckedKeyLocks::Dir(
            LockDir::open(dir, config.shared_max_concurrent)
                .map_err(|err| err.given_as(&config.lock_dir_given_as))?,
        )),
        (None, Some(url)) => {
            let settings = FleetSettings {
                namespace: config.namespace.clone(),
                host_id: config
                    .host_id
                    .clone()
                    .unwrap_or_else(crate::shell::coordinate::host_name),
                grace: config.grace,
                shared_slots: config.shared_max_concurrent,
                records: config.coordinate_records,
            };
            // Up to 10 s for a database that does not answer: a stop signal meanwhile ends
            // the wait at once.
            let mut signals = {
                let _guard = runtime.enter();
                StopSignals::install(!hangup_ignored).ok()
            };
            let opened = runtime.block_on(async {
                tokio::select! {
                    biased;
                    Some(signal) = crate::shell::signal::next_signal(&mut signals) => Err(signal),
                    opened = CheckedCoordinator::open(url, settings) => Ok(opened),
                }
            });
            early_signals = signals;
            match opened {
                Ok(opened) => {
                    Some(CheckedKeyLocks::Fleet(Box::new(opened.map_err(|err| {
                        coordinate_error(&err, &config.coordinate_given_as)
                    })?)))
                }
                Err(signal) => {
                    stopped_at_start = Some(signal);
                    None
                }
            }
        }
        (None, None) => None,
    };
    let (feed, check_signals) = match stopped_at_start {
        Some(signal) => (Checked::Interrupted { signal, lines: 0 }, early_signals),
        None => feed_for(&config, &runtime, hangup_ignored, early_signals)?,
    };
    let resume = load_resume(&config)?;
    if let Some(dir) = &config.results {
        crate::output::results::prepare_dir(dir, config.results_clean, config.resume.is_some())
            .map_err(anyhow::Error::msg)?;
    }
    let report_file = match &config.report {
        Some(path) => Some(
            create_output(path)
                .with_context(|| format!("cannot create the report {}", path.display()))?,
        ),
        None => None,
    };
    let events = match &config.events {
        Some(path) => Some(Spool::new(
            format!("the events file {}", path.display()),
            create_output(path)
                .with_context(|| format!("cannot create the events file {}", path.display()))?,
        )),
        None => None,
    };
    let env = Surroundings {
        jobs_typed: typed_input(&config),
        ..Surroundings::detect()
    };
    let progress = use_progress(config.progress, config.color, &env)
        .then(|| Progress::new(typed_input(&config)));
    let display = progress.as_ref().map(Progress::handle);
    let stdout = Sink::spawn(
        "stdout",
        crate::output::sink::stdout_destination(),
        display.clone().filter(|_| env.stdout_is_terminal),
    );
    let stderr = Sink::spawn(
        "stderr",
        match stderr_file() {
            Ok(file) => Box::new(file),
            Err(_) => Box::new(std::io::stderr()),
        },
        display,
    )
    // The destination is a duplicate of descriptor 2: polling 2 tells about it.
    .with_fd(2);
    // One file behind both (`2>&1 | tee log`): each write of one waits for the other's to end.
    let (stdout, stderr) = if crate::output::sink::stdout_is_stderr() {
        let one_file = std::sync::Arc::new(std::sync::Mutex::new(()));
        (stdout.sharing(&one_file), stderr.sharing(&one_file))
    } else {
        (stdout, stderr)
    };
    let color_stdout = use_color(config.color, env.stdout_is_terminal, &env);
    let color_stderr = use_color(config.color, env.stderr_is_terminal, &env);
    let streams = Streams {
        job_stdout: if config.json {
            stderr.sender()
        } else {
            stdout.sender()
        },
        stderr: stderr.sender(),
        color_stdout: if config.json {
            color_stderr
        } else {
            color_stdout
        },
        color_stderr,
        one_destination: config.json || crate::output::sink::stdout_is_stderr(),
    };
    let report_file = report_file
        .zip(config.report.as_ref())
        .map(|(file, path)| Spool::new(format!("the report {}", path.display()), file));
    let mut recorder = Recorder::new(
        report_file,
        config
            .report
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        config.json.then(|| stdout.sender()),
    );
    if let Some(path) = &config.junit {
        // Made now, so that a path that cannot be written fails before anything runs, and held
        // until it is written at the end: a regular file locked, a FIFO open to the reader
        // that came for it (opened again at the end, it would wait for another).
        let held = create_output(path)
            .with_context(|| format!("cannot create the JUnit file {}", path.display()))?;
        let held = Some(held);
        let name = format!("lanes {}", config.source.describe());
        recorder = recorder.with_junit(path.clone(), JunitReport::new(&name, origin), held);
    }
    if let Some(mut progress) = progress {
        // Under `--resume` the jobs skipped are not counted: the total comes at the input's end.
        if let (Source::Manifest { manifest, .. }, None) = (&config.source, &config.resume) {
            progress.set_total(manifest.jobs.len() as u64);
        }
        recorder = recorder.with_progress(progress);
    }
    let ledger = Ledger::new(origin, recorder, EventLog::new(events));
    // Removes the socket file however the server ends from here on.
    let mut socket_file = None;
    let service = match serving {
        Some((path, (journal, recovered))) => {
            let listener = crate::serve::socket::bind(&path)?;
            socket_file = Some(crate::serve::socket::SocketFile(path));
            let _guard = runtime.enter();
            Some(crate::serve::ServiceStart {
                listening: crate::serve::server::start(listener)
                    .context("cannot listen on the socket")?,
                journal,
                recovered,
                requeue_lost: config.requeue_lost,
            })
        }
        None => None,
    };
    let end = match feed {
        Checked::Valid(feed) => {
            let input = {
                let _guard = runtime.enter();
                let commands = crate::shell::input::Commands::of(&config);
                crate::shell::input::start(feed, config.max_queued, commands)
                    .context("cannot start the thread that reads the input (raise `ulimit -u`)")?
            };
            runtime.block_on(drive(Prepared {
                config,
                hangup_ignored,
                input,
                streams,
                ledger,
                resume,
                t0,
                cgroups,
                signals: check_signals,
                lock_dir,
                service,
            }))
        }
        Checked::Interrupted { signal, lines } => runtime.block_on(interrupted_check(
            ledger,
            &config,
            cgroups.is_some(),
            (signal, lines, stopped_at_start.is_some()),
            t0,
            check_signals,
        )),
    };
    // Nothing answers on the socket any more.
    drop(socket_file);
    // Job output first, then the summary: it is the last thing a person reads. A reader that
    // stopped reading is waited for until a stop signal comes, then for a moment only; what
    // is left unwritten then ends with the process.
    let mut end = end;
    let mut stopping = end.forced;
    // Under `--json` the report is stdout; else the jobs' output is, a CI job's log.
    let stdout_lost = stdout.lost_flag();
    let all_written = close_sink(&runtime, stdout, None, &mut stopping, &mut end.signals);
    if !all_written {
        stopping = true;
    }
    if !all_written || end.output_dropped {
        // Said with the summary, on stderr (which may be read when stdout is not).
        end.summary.insert_str(
            0,
            "lanes: output that its reader did not take was dropped (the run was stopped; the \
             last line written may be cut short)\n",
        );
    }
    // Records or output that failed to reach it after the exit status was decided (its
    // writer thread writes behind the run) still make the status 1.
    if end.code == crate::exit::SUCCESS && stdout_lost.load(std::sync::atomic::Ordering::Relaxed) {
        end.code = 1;
    }
    // Ctrl-C while the jobs were typed at an echoing terminal left `^C` (after any
    // half-typed line) where the cursor is: the summary starts on a line of its own.
    if end.code == crate::exit::for_signal(nix::sys::signal::Signal::SIGINT as i32)
        && env.jobs_typed
        && crate::report::stderr_echoes()
    {
        end.summary.insert(0, '\n');
    }
    // With colours on stderr, the colours a job's output left set (no reset after it) are
    // reset first: the summary is lanes' own text, in the terminal's own colours. (Without,
    // no escape code at all.)
    if color_stderr && !end.summary.is_empty() {
        end.summary.insert_str(0, "\x1b[0m");
    }
    let summary = std::mem::take(&mut end.summary).into_bytes();
    let last = (!stderr.try_write_now(&summary)).then_some(summary);
    close_sink(&runtime, stderr, last, &mut stopping, &mut end.signals);
    // A writer thread still blocked is not waited for.
    runtime.shutdown_background();
    Ok(end.code)
}

/// A task besides running jobs: `lanes locks`, and the client commands of `lanes serve`.
/// Runs a task (`lanes TASK …`, see [`crate::cli::Task`]); returns the exit status. Call
/// [`crate::prepare_task_process`] first.
///
/// # Errors
/// What stops the task: no server to reach, a bad report, an unreachable database; the caller
/// prints it and exits with [`exit::USAGE`].
pub fn run_task(task: crate::cli::Task) -> anyhow::Result<u8> {
    use crate::cli::{
        CancelArgs, CloseArgs, DrainArgs, LocksArgs, SetArgs, StatusArgs, SubmitArgs, Task,
        TimelineArgs,
    };
    use crate::serve::client;
    use crate::serve::protocol::Request;
    match task {
        Task::Timeline(TimelineArgs {
            report,
            events,
            output,
            format,
        }) => {
            crate::timeline::write(&report, events.as_deref(), &output, format.as_deref())?;
            Ok(0)
        }
        Task::Locks(LocksArgs {
            dir,
            coordinate,
            namespace,
        }) => {
            let coordinate = coordinate.or_else(|| {
                std::env::var("LANES_COORDINATE")
                    .ok()
                    .filter(|url| !url.is_empty())
            });
            // As a run takes them: the flag, then the environment.
            let dir = dir.or_else(|| {
                std::env::var_os("LANES_LOCK_DIR")
                    .filter(|dir| !dir.is_empty() && coordinate.is_none())
                    .map(std::path::PathBuf::from)
            });
            // A database URL given where DIR goes (`--coordinate` forgotten) is taken as the
            // database: read as a path, the error would show it, password and all.
            let (dir, coordinate) = match dir {
                Some(dir)
                    if crate::config::looks_like_a_database(&dir.to_string_lossy())
                        && !dir.exists() =>
                {
                    (None, Some(dir.to_string_lossy().into_owned()))
                }
                dir => (dir, coordinate),
            };
            match (dir, coordinate) {
                (Some(dir), _) => print_quietly(&crate::shell::lock_dir::describe(&dir)?)?,
                (None, Some(url)) => {
                    let runtime = event_loop()?;
                    let text =
                        runtime.block_on(crate::shell::coordinate::describe(&url, &namespace))?;
                    print_quietly(&text)?;
                }
                (None, None) => {
                    let empty = ["LANES_LOCK_DIR", "LANES_COORDINATE"]
                        .into_iter()
                        .filter(|name| std::env::var_os(name).is_some_and(|v| v.is_empty()))
                        .map(|name| format!(" ({name} is set but empty)"))
                        .collect::<String>();
                    bail!(
                        "lanes locks: name a lock directory (DIR, or LANES_LOCK_DIR) or a \
                         database (--coordinate URL, or LANES_COORDINATE){empty}"
                    )
                }
            }
            Ok(0)
        }
        Task::Submit(SubmitArgs {
            socket,
            json,
            wait,
            key,
            command,
        }) => client::submit(socket.as_deref(), json, wait, key, &command),
        Task::Cancel(CancelArgs { socket, json, key }) => {
            client::request(socket.as_deref(), json, Request::Cancel { key })
        }
        Task::Status(StatusArgs { socket, json }) => {
            client::request(socket.as_deref(), json, Request::Status {})
        }
        Task::Set(SetArgs {
            socket,
            json,
            max_concurrent,
        }) => client::request(
            socket.as_deref(),
            json,
            Request::Set {
                max_concurrent: max_concurrent as usize,
            },
        ),
        Task::Drain(DrainArgs { socket, json }) => {
            client::request(socket.as_deref(), json, Request::Drain {})
        }
        Task::Close(CloseArgs { socket, json }) => {
            client::request(socket.as_deref(), json, Request::Close {})
        }
    }
}

/// A run's output files: each one's flag, its name in messages, and its path when given.
fn outputs(config: &RunConfig) -> [(&'static str, &'static str, Option<&std::path::Path>); 3] {
    [
        ("--report", "the report", config.report.as_deref()),
        ("--events", "the events file", config.events.as_deref()),
        ("--junit", "the JUnit file", config.junit.as_deref()),
    ]
}

/// Whether every output file of the run (`--report`, `--events`, `--junit`) can be made,
/// without making any ([`check_output`]).
///
/// # Errors
/// The first that cannot, naming it and why (a socket, a directory, no permission, another
/// lanes' file).
fn check_outputs(config: &RunConfig) -> anyhow::Result<()> {
    // A dry run starts no job whose output could mix in.
    if config.json && !config.dry_run && report_mixed_with_stderr() {
        bail!(
            "--json writes the report to stdout, and stdout is the same file as stderr (`2>&1`, \
             `&>`), where the jobs' output and lanes' own messages go: the report would be mixed \
             with them. Send stderr elsewhere (`2>lanes.log`), or write the report to a file of \
             its own with --report FILE"
        );
    }
    for (_, what, path) in outputs(config) {
        if let Some(path) = path {
            let socket = std::fs::metadata(path)
                .is_ok_and(|meta| std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()));
            if socket {
                bail!(
                    "cannot create {what} {}: it is a socket (a lanes serve's?), not a file",
                    path.display()
                );
            }
            check_output(path)
                .with_context(|| format!("cannot create {what} {}", path.display()))?;
        }
    }
    Ok(())
}

/// Whether lanes' stdout and stderr are one file, pipe or socket, which a report on stdout
/// would share with the jobs' output: not a terminal or `/dev/null` (character devices), where
/// nothing parses the report.
fn report_mixed_with_stderr() -> bool {
    let character_device = nix::sys::stat::fstat(nix::libc::STDOUT_FILENO)
        .is_ok_and(|meta| meta.st_mode & nix::libc::S_IFMT == nix::libc::S_IFCHR);
    crate::output::sink::stdout_is_stderr() && !character_device
}

/// A `--coordinate` error as the user gave the URL: the flag, `LANES_COORDINATE`, or the
/// manifest's `coordinate` with its file, line and column.
fn coordinate_error(err: &impl std::fmt::Display, given_as: &str) -> anyhow::Error {
    let text = err.to_string();
    match text.strip_prefix("--coordinate") {
        Some(rest) if rest.starts_with(':') => anyhow::anyhow!("{given_as}{rest}"),
        _ => anyhow::anyhow!(text),
    }
}

/// Whether the output file `path` (or a server's socket) can be made without making it: an
/// existing one writable and not in use ([`check_unclaimed`]), a new one's directory there and
/// writable (`access(2)`, as the process's real ids).
///
/// # Errors
/// Why it cannot, as the system says it, or whose file it is.
fn check_output(path: &std::path::Path) -> std::io::Result<()> {
    use nix::unistd::{access, AccessFlags};
    let os = |errno: nix::errno::Errno| std::io::Error::from_raw_os_error(errno as i32);
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Err(std::io::Error::from_raw_os_error(nix::libc::EISDIR)),
        Ok(meta) => {
            access(path, AccessFlags::W_OK).map_err(os)?;
            if meta.is_file() {
                if let Ok(file) = File::open(path) {
                    check_unclaimed(&file, path, nix::libc::LOCK_SH)?;
                }
            }
            Ok(())
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            let dir = crate::containing_dir::containing_dir(path);
            access(dir, AccessFlags::W_OK | AccessFlags::X_OK).map_err(os)
        }
        Err(err) => Err(err),
    }
}

/// Refuses a regular file that is another lanes' output ([`check_unlocked`]) or a `lanes
/// serve` journal (it begins as one does, `{"journal":`).
///
/// # Errors
/// Whose file it is, in words.
fn check_unclaimed(
    file: &File,
    path: &std::path::Path,
    operation: nix::libc::c_int,
) -> std::io::Result<()> {
    check_unlocked(file, operation)?;
    if let Some(stream) = own_stream(file) {
        return Err(std::io::Error::other(format!(
            "it is the file lanes' {stream} goes to, which it would overwrite from its start"
        )));
    }
    if crate::serve::journal::is_journal(path) {
        return Err(std::io::Error::other(
            "it is the journal of a `lanes serve`, which would lose the jobs it keeps",
        ));
    }
    Ok(())
}

/// Which of lanes' own stdout and stderr is the regular file `file` is (the same device and
/// inode), if either: an output opened on it apart would write over what goes to the stream.
fn own_stream(file: &File) -> Option<&'static str> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = file.metadata().ok().filter(std::fs::Metadata::is_file)?;
    [(1, "stdout"), (2, "stderr")]
        .into_iter()
        .find(|&(fd, _)| {
            nix::sys::stat::fstat(fd)
                .is_ok_and(|stream| stream.st_dev == meta.dev() && stream.st_ino == meta.ino())
        })
        .map(|(_, name)| name)
}

/// Refuses a file another lanes writes its report or events to: `file` is locked with
/// `operation` (`LOCK_SH` or `LOCK_EX`; `flock(2)`, waited for only through a brief hold, see
/// [`crate::file_lock::BRIEF_HOLD`]), which fails while such a lanes holds its exclusive
/// lock (for its whole run). A file system without `flock` refuses nothing.
///
/// # Errors
/// The lock is held (`WouldBlock`).
fn check_unlocked(file: &File, operation: nix::libc::c_int) -> std::io::Result<()> {
    match crate::file_lock::flock_after_brief_hold(file, operation) {
        Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => Err(std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            "another lanes writes its report or events to it (it holds the file's lock)",
        )),
        _ => Ok(()),
    }
}

/// Refuses a `lanes serve` journal that is not a regular file (`/dev/null` would keep
/// nothing, so no admission would survive a crash) or that is also the report, the events or
/// the JUnit file (creating that would empty the journal, or the journal overwrite it), that
/// another lanes writes its report or events to, or that holds something other than a
/// journal: all found out before the journal's lock file is made.
fn check_journal_apart(journal: &std::path::Path, config: &RunConfig) -> anyhow::Result<()> {
    if let Ok(meta) = std::fs::metadata(journal) {
        if !meta.is_file() {
            bail!(
                "the journal {} is not a regular file: it would keep no admission (give \
                 --journal a file)",
                journal.display()
            );
        }
    }
    for (flag, _, output) in outputs(config) {
        if output.is_some_and(|output| crate::config::same_file(output, journal)) {
            bail!(
                "{flag} {} is the journal of `lanes serve`: give each its own file",
                journal.display()
            );
        }
    }
    if let Ok(file) = File::open(journal) {
        if let Err(err) = check_unlocked(&file, nix::libc::LOCK_SH) {
            bail!("the journal {} cannot be used: {err}", journal.display());
        }
        // Found out before its lock is made: a file of another kind is no journal.
        if file.metadata().is_ok_and(|meta| meta.len() > 0)
            && !crate::serve::journal::begins_as_journal(&file)
        {
            bail!(
                "the journal {}: line 1 is not a journal line (a journal begins with \
                 {{\"journal\":); start the server on a new journal",
                journal.display()
            );
        }
    }
    Ok(())
}

/// Creates an output file, or empties an existing one, and holds it (an exclusive `flock` for
/// as long as the file stays open) so that no other lanes takes it for its own output
/// meanwhile; a file another lanes holds, or a `lanes serve` journal, is refused and left as
/// it was ([`check_unclaimed`]). A FIFO or a device is opened as it is. A FIFO without a
/// reader holds the open back until one comes: meanwhile a stop signal ends `lanes` at once
/// and Ctrl-Z stops it (nothing has started yet), instead of waiting, blocked, for handlers
/// that stand only once the outputs are open.
///
/// # Errors
/// It cannot be opened or emptied, or it is another's.
fn create_output(path: &std::path::Path) -> std::io::Result<File> {
    use std::os::unix::fs::FileTypeExt as _;
    let meta = std::fs::metadata(path);
    if meta.as_ref().is_ok_and(|meta| meta.file_type().is_fifo()) {
        // A stop signal ends the wait from its start, not once it is said.
        if let Some(opened) = crate::shell::signal::stoppable_at_start(|| {
            open_fifo_with_a_reader(path, Some(std::time::Duration::from_secs(1)))
        }) {
            return opened;
        }
        // Said, so that a wait for a reader that never comes is no silent hang.
        let _ = std::io::Write::write_fmt(
            &mut std::io::stderr(),
            format_args!(
                "lanes: waiting for a reader of the FIFO {} (a stop signal ends lanes)\n",
                path.display()
            ),
        );
        // Before the run's handlers stand, a blocking open, which a stop signal's default
        // action ends; once they stand (`--strict`, `--coordinate` installed them to wait),
        // they would take the signal and the open would go on: polled then, and a stop noted
        // ends lanes.
        let handled = crate::shell::signal::disposition(nix::libc::SIGTERM)
            .is_some_and(|action| action != nix::libc::SIG_DFL && action != nix::libc::SIG_IGN);
        return crate::shell::signal::stoppable_at_start(|| {
            if handled {
                open_fifo_with_a_reader(path, None).unwrap_or_else(|| File::create(path))
            } else {
                File::create(path)
            }
        });
    }
    if meta.as_ref().is_ok_and(|meta| !meta.is_file()) {
        return File::create(path);
    }
    // Appended to: a job that writes to the file too (its own run's report) adds its lines
    // among the records instead of having them written over, or leaving a hole.
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)?;
    check_unclaimed(&file, path, nix::libc::LOCK_EX)?;
    file.set_len(0)?;
    Ok(file)
}

/// Opens the FIFO at `path` for writing once a reader has it open (polled without blocking:
/// with no reader, a non-blocking open fails with ENXIO, fifo(7)), for up to `patience`, or
/// for as long as it takes when `None`; then `None`. Meanwhile a stop signal a handler noted
/// ends lanes ([`crate::shell::signal::end_by_noted_stop`]).
fn open_fifo_with_a_reader(
    path: &std::path::Path,
    patience: Option<std::time::Duration>,
) -> Option<std::io::Result<File>> {
    use std::os::fd::AsRawFd as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let deadline = patience.map(|patience| std::time::Instant::now() + patience);
    loop {
        match std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(path)
        {
            Ok(file) => {
                // Written by a thread that blocks while the reader reads slowly.
                let blocking = nix::fcntl::fcntl(file.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFL)
                    .and_then(|flags| {
                        let blocking = nix::fcntl::OFlag::from_bits_truncate(flags)
                            - nix::fcntl::OFlag::O_NONBLOCK;
                        nix::fcntl::fcntl(file.as_raw_fd(), nix::fcntl::FcntlArg::F_SETFL(blocking))
                    });
                return Some(blocking.map(|_| file).map_err(std::io::Error::from));
            }
            Err(err) if err.raw_os_error() == Some(nix::libc::ENXIO) => {}
            Err(err) => return Some(Err(err)),
        }
        crate::shell::signal::end_by_noted_stop();
        if deadline.is_some_and(|deadline| std::time::Instant::now() >= deadline) {
            return None;
        }
        // Quick while a reader is likely on its way; then a look 20 times a second.
        let pause = if deadline.is_some() { 10 } else { 50 };
        std::thread::sleep(std::time::Duration::from_millis(pause));
    }
}

/// Whether the command line names a manifest that may be read from a pipe: `--manifest -`,
/// or a FIFO given as the manifest or as FILE (a FIFO FILE is read as a manifest when its
/// name says so).
fn manifest_from_a_pipe(cli: &Cli) -> bool {
    cli.manifest
        .as_deref()
        .is_some_and(|path| path == std::path::Path::new("-") || is_fifo(path))
        || cli.file.as_deref().is_some_and(is_fifo)
}

/// Whether `path` names a FIFO (through a symbolic link too).
fn is_fifo(path: &std::path::Path) -> bool {
    use std::os::unix::fs::FileTypeExt as _;
    std::fs::metadata(path).is_ok_and(|meta| meta.file_type().is_fifo())
}

/// Opens the file of jobs at `path` for reading. A FIFO without a writer holds the open back
/// until one comes: meanwhile a stop signal ends `lanes` at once (nothing has started yet),
/// by its default action or, when the run's handlers stand already (`--coordinate` installed
/// them to wait for its database), by the stop they noted.
///
/// # Errors
/// `open(2)`'s.
fn open_input(path: &std::path::Path) -> std::io::Result<File> {
    if let Some(err) = crate::closed_stdin::named_by(path) {
        return Err(err);
    }
    if !is_fifo(path) {
        return File::open(path);
    }
    crate::shell::signal::stoppable_at_start(|| loop {
        // Not `File::open`, which opens again when a signal interrupts it.
        match nix::fcntl::open(
            path,
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        ) {
            Ok(fd) => {
                // SAFETY: `open` returned this descriptor, owned by nothing else.
                return Ok(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) });
            }
            Err(nix::errno::Errno::EINTR) => crate::shell::signal::end_by_noted_stop(),
            Err(err) => return Err(err.into()),
        }
    })
}

/// Writes `text` to stdout; a closed stdout (`lanes locks DIR | head -1`) is no error.
fn print_quietly(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to stdout"),
    }
}

/// Builds the event loop. Its descriptors (its poller, its waker, the signal pipe) are made
/// sure of first: tokio cannot report a failure to make the signal pipe (it panics).
fn event_loop() -> anyhow::Result<tokio::runtime::Runtime> {
    crate::descriptors::ensure_free(EVENT_LOOP_DESCRIPTORS)
        .and_then(|()| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        })
        .context("cannot start the event loop (raise `ulimit -n`)")
}

/// The descriptors tokio's event loop opens when it is built: its poller, its waker, and the
/// signal driver's socket pair and the duplicate of its reading end.
const EVENT_LOOP_DESCRIPTORS: usize = 5;

/// `--resume`: the successes of the earlier report.
fn load_resume(config: &RunConfig) -> anyhow::Result<Option<crate::resume::Resume>> {
    Ok(match &config.resume {
        Some(path) => {
            let newest_wins = config.policy.coalesce_latest || config.policy.cancel_in_progress;
            let mut resume = crate::resume::Resume::load(path, newest_wins)?;
            let (text, colsep) = config.recorded_template();
            let current = (text.as_deref(), colsep.as_deref());
            if let Some(note) = resume.for_template(&path.display().to_string(), current) {
                eprintln!("lanes: {note}");
            }
            Some(resume)
        }
        None => None,
    })
}

/// Sends `last` to `sink`, closes it and waits until its output is written ([`until_stopped`]).
/// Returns whether everything was written.
fn close_sink(
    runtime: &tokio::runtime::Runtime,
    sink: Sink,
    last: Option<Vec<u8>>,
    stopping: &mut bool,
    signals: &mut Option<StopSignals>,
) -> bool {
    if last.is_none() && !sink.started() {
        // Nothing was sent: nothing to wait for.
        return sink.close_within(Some(FORCED_WRITE_WAIT));
    }
    runtime.block_on(async {
        let written = async {
            if let Some(bytes) = last {
                let _ = sink.sender().send(bytes).await;
            }
            // Waited for without a thread of its own: none may be left (`ulimit -u`).
            sink.closed().await
        };
        until_stopped(written, stopping, signals)
            .await
            .unwrap_or(false)
    })
}

/// `--backend slurm`: the cluster has every license the run asks of it.
///
/// # Errors
/// A license the cluster does not list, or `scontrol` that cannot be run.
fn check_cluster(config: &RunConfig) -> anyhow::Result<()> {
    let crate::config::Backend::Slurm { options, .. } = &config.backend else {
        return Ok(());
    };
    crate::shell::backend::check_cluster_licenses(
        crate::resources::slurm_license_names(&config.resources)
            .map(|name| {
                let what = format!("resource {name:?} is asked of the cluster as a license");
                (name, what)
            })
            .chain(options.license.as_deref().map(|name| {
                let what = format!("--slurm-license {name} asks every job for a license");
                (name, what)
            })),
    )
    .map_err(|message| anyhow::anyhow!("--backend slurm: {message}"))
}

/// The run's cgroup, when jobs are to be contained in cgroups (`--containment`).
///
/// # Errors
/// `--containment cgroup` where no cgroup can be created.
fn containment(mode: ContainmentMode) -> anyhow::Result<Option<CgroupRun>> {
    Ok(match mode {
        ContainmentMode::ProcessGroup => None,
        ContainmentMode::Auto => CgroupRun::create().ok(),
        ContainmentMode::Cgroup => Some(
            CgroupRun::create().map_err(|err| anyhow::anyhow!("--containment cgroup: {err}"))?,
        ),
    })
}

/// Opens the input. Under `--strict` the whole input is read and checked here, before
/// anything starts ([`crate::shell::strict`]), listening for stop signals meanwhile (on
/// `signals`, when they are installed already); the listener is returned, for the run to go on
/// listening with.
fn feed_for(
    config: &RunConfig,
    runtime: &tokio::runtime::Runtime,
    hangup_ignored: bool,
    signals: Option<StopSignals>,
) -> anyhow::Result<(Checked, Option<StopSignals>)> {
    let reader: Box<dyn BufRead + Send> = match &config.source {
        Source::Manifest { manifest, path } => {
            if manifest.jobs.is_empty() {
                eprintln!(
                    "lanes: the manifest {} has no job (each is written `[[job]]`): nothing runs",
                    path.display()
                );
            }
            return Ok((Checked::Valid(Feed::Manifest(manifest.clone())), signals));
        }
        // `lanes serve`: no input but the socket's.
        Source::Socket(_) => return Ok((Checked::Valid(Feed::Preloaded(Vec::new())), signals)),
        Source::List(arguments) => {
            let records = from_list(arguments, &config.records);
            return Ok((Checked::Valid(checked_list(config, records)?), signals));
        }
        Source::Stdin => {
            if let Some(why) = crate::closed_stdin::refusal() {
                anyhow::bail!("cannot read stdin: {why}");
            }
            let stdin_meta = nix::sys::stat::fstat(nix::libc::STDIN_FILENO);
            if stdin_meta.is_ok_and(|meta| meta.st_mode & nix::libc::S_IFMT == nix::libc::S_IFDIR) {
                anyhow::bail!("cannot read stdin: it is a directory (`< DIR`)");
            }
            if std::io::stdin().is_terminal() {
                let what = if config.records.key.is_some() {
                    "arguments"
                } else {
                    "jobs"
                };
                eprintln!("lanes: reading {what} from the terminal (end with Ctrl-D)");
            }
            Box::new(BufReader::with_capacity(
                64 * 1024,
                crate::shell::input::WatchedStdin::new(),
            ))
        }
        Source::LinesFile(path) => {
            let file =
                open_input(path).with_context(|| format!("cannot open {}", path.display()))?;
            // A directory opens, and fails at the first read, after the run has begun.
            if file.metadata().is_ok_and(|meta| meta.is_dir()) {
                anyhow::bail!("cannot read {}: it is a directory", path.display());
            }
            Box::new(BufReader::with_capacity(64 * 1024, file))
        }
    };
    if !config.strict {
        let feed = if config.records.is_tab_lines() && !config.records.hint_no_tab {
            Feed::Lines(reader)
        } else {
            Feed::Records(Box::new(RecordReader::new(reader, config.records.clone())))
        };
        return Ok((Checked::Valid(feed), signals));
    }
    runtime.block_on(async {
        let mut signals = match signals {
            Some(signals) => Some(signals),
            None => StopSignals::install(!hangup_ignored).ok(),
        };
        let checked = crate::shell::strict::check(
            reader,
            config.source.describe(),
            config.records.clone(),
            crate::shell::input::Commands::of(config),
            &mut signals,
        )
        .await?;
        // The jobs are read from the checked copy, not from stdin.
        crate::shell::input::WatchedStdin::unwatch();
        Ok((checked, signals))
    })
}

/// `::: ARG…`: the records as they are, or under `--strict` all of them validated first (they
/// are in memory already: the command line holds them).
fn checked_list(config: &RunConfig, records: Vec<NumberedLine>) -> anyhow::Result<Feed> {
    if !config.strict {
        return Ok(Feed::Records(Box::new(records.into_iter().map(Ok))));
    }
    let commands = crate::shell::input::Commands::of(config);
    if let Some((line, message)) = records.iter().find_map(|numbered| match &numbered.item {
        LineItem::Invalid { message, .. } => Some((numbered.line, message.clone())),
        LineItem::Job { key, command } => commands
            .too_long(command, key, numbered.seq)
            .map(|message| (numbered.line, message)),
    }) {
        bail!("::: argument {line}: {message} (--strict: nothing was run)");
    }
    Ok(Feed::Preloaded(records))
}

/// A stop signal came while `--strict` was still checking the input (`lines` checked), or,
/// when `at_database`, while the database of `--coordinate` was waited for at start: nothing
/// ran. The report holds its `run` record and a `summary` of no jobs whose `exit_code` is 128
/// + the signal's number, the status lanes exits with; stderr says what happened.
async fn interrupted_check(
    mut ledger: Ledger,
    config: &RunConfig,
    in_cgroups: bool,
    (signal, lines, at_database): (nix::sys::signal::Signal, u64, bool),
    t0: tokio::time::Instant,
    mut signals: Option<StopSignals>,
) -> RunEnd {
    let containment = if in_cgroups {
        "cgroup"
    } else {
        "process_group"
    };
    ledger
        .run_started(
            config.max_concurrent,
            config.source.describe(),
            config.recorded_template(),
            containment,
        )
        .await;
    // One end for both, so that the JUnit file's time is the summary's.
    let end = t0.elapsed();
    ledger.write_junit(end).await;
    let code = crate::exit::for_run(Some(signal as i32), false);
    let (_, forwarder) = ledger.finish(end, code).await;
    let mut forced = false;
    if let Some(forwarder) = forwarder {
        let abort = forwarder.abort_handle();
        if until_stopped(forwarder, &mut forced, &mut signals)
            .await
            .is_none()
        {
            abort.abort();
        }
    }
    let _ = until_stopped(ledger.written(), &mut forced, &mut signals).await;
    RunEnd {
        code,
        summary: if at_database {
            format!(
                "lanes: {signal} while waiting for the database at start (--coordinate): \
                 nothing was read or run\n"
            )
        } else {
            format!(
                "lanes: {signal} while checking the input (--strict): {} checked, none invalid \
                 so far; nothing was run\n",
                crate::plural::plural(lines, "line")
            )
        },
        forced,
        signals,
        output_dropped: false,
    }
}

/// Whether the job lines are typed on a terminal (stdin): the display then leaves the
/// terminal's echo on.
fn typed_input(config: &RunConfig) -> bool {
    use std::io::IsTerminal;
    matches!(config.source, Source::Stdin) && std::io::stdin().is_terminal()
}
