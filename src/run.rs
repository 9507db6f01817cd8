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
use crate::output::sink::{stderr_file, stdout_file, Sink};
use crate::report::events::EventLog;
use crate::report::junit::JunitReport;
use crate::report::ledger::Ledger;
use crate::report::progress::Progress;
use crate::report::recorder::Recorder;
use crate::settings::ContainmentMode;
use crate::shell::cgroup::CgroupRun;
use crate::shell::driver::{drive, Prepared};
use crate::shell::input::Feed;
use crate::shell::launch::Streams;
use crate::shell::signal::{until_stopped, StopSignals, FORCED_WRITE_WAIT};

/// Runs `lanes` as the command line says; returns the exit status (SPEC §6).
///
/// # Errors
/// Anything that stops the run before the first job could start: an invalid manifest, a
/// `--strict` input error, an unreadable input file, a report file that cannot be created. The
/// caller prints the error and exits with [`exit::USAGE`].
pub fn run(cli: Cli, hangup_ignored: bool) -> anyhow::Result<u8> {
    let config = RunConfig::from_cli(cli)?;
    if config.dry_run {
        let resume = load_resume(&config)?;
        return crate::dry_run::print(&config, feed_for(&config)?, resume);
    }
    let cgroups = containment(config.containment)?;
    let feed = feed_for(&config)?;
    let resume = load_resume(&config)?;
    if let Some(dir) = &config.results {
        crate::output::results::prepare_dir(dir, config.results_clean)
            .map_err(anyhow::Error::msg)?;
    }
    let report_file = match &config.report {
        Some(path) => Some(
            File::create(path)
                .with_context(|| format!("cannot create the report {}", path.display()))?,
        ),
        None => None,
    };
    let events = match &config.events {
        Some(path) => Some(
            File::create(path)
                .with_context(|| format!("cannot create the events file {}", path.display()))?,
        ),
        None => None,
    };
    let env = Surroundings::detect();
    let progress = use_progress(config.progress, config.color, &env).then(|| {
        let (rows, columns) = terminal_size().unwrap_or((24, 80));
        let lines = usize::from(rows).saturating_sub(4).clamp(1, 20);
        Progress::new(lines, columns)
    });
    let display = progress.as_ref().map(Progress::handle);
    let stdout = Sink::spawn(
        "stdout",
        match stdout_file() {
            Ok(file) => Box::new(file),
            Err(_) => Box::new(std::io::sink()),
        },
        display.clone().filter(|_| env.stdout_is_terminal),
    );
    let stderr = Sink::spawn(
        "stderr",
        match stderr_file() {
            Ok(file) => Box::new(file),
            Err(_) => Box::new(std::io::sink()),
        },
        display,
    )
    // The destination is a duplicate of descriptor 2: polling 2 tells about it.
    .with_fd(2);
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
    };
    // The run's one clock: every time in the report is tick zero plus a tick.
    let (origin, t0) = (SystemTime::now(), tokio::time::Instant::now());
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
        // Made now, so that a path that cannot be written fails before anything runs.
        File::create(path)
            .with_context(|| format!("cannot create the JUnit file {}", path.display()))?;
        let name = format!("lanes {}", config.source.describe());
        recorder = recorder.with_junit(path.clone(), JunitReport::new(&name, origin));
    }
    if let Some(mut progress) = progress {
        if let Source::Manifest { manifest, .. } = &config.source {
            progress.set_total(manifest.jobs.len() as u64);
        }
        recorder = recorder.with_progress(progress);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the event loop")?;
    let input = {
        let _guard = runtime.enter();
        crate::shell::input::start(feed, config.max_queued)
    };
    let ledger = Ledger::new(origin, recorder, EventLog::new(events));
    let end = runtime.block_on(drive(Prepared {
        config,
        hangup_ignored,
        input,
        streams,
        ledger,
        resume,
        t0,
        cgroups,
    }));
    // Job output first, then the summary: it is the last thing a person reads. A reader that
    // stopped reading is waited for until a stop signal comes, then for a moment only; what
    // is left unwritten then ends with the process.
    let mut end = end;
    let mut stopping = end.forced;
    if !close_sink(&runtime, stdout, None, &mut stopping, &mut end.signals) {
        stopping = true;
    }
    let summary = std::mem::take(&mut end.summary).into_bytes();
    let last = (!stderr.try_write_now(&summary)).then_some(summary);
    close_sink(&runtime, stderr, last, &mut stopping, &mut end.signals);
    // A writer thread still blocked is not waited for.
    runtime.shutdown_background();
    Ok(end.code)
}

/// `--resume`: the successes of the earlier report.
fn load_resume(config: &RunConfig) -> anyhow::Result<Option<crate::resume::Resume>> {
    Ok(match &config.resume {
        Some(path) => Some(crate::resume::Resume::load(path)?),
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
            tokio::task::spawn_blocking(move || sink.close_within(None))
                .await
                .unwrap_or(false)
        };
        until_stopped(written, stopping, signals)
            .await
            .unwrap_or(false)
    })
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

/// Opens the input. Under `--strict` the whole input is read and validated here, before
/// anything starts.
fn feed_for(config: &RunConfig) -> anyhow::Result<Feed> {
    let reader: Box<dyn BufRead + Send> = match &config.source {
        Source::Manifest { manifest, .. } => return Ok(Feed::Manifest(manifest.clone())),
        Source::List(arguments) => {
            let records = from_list(arguments, &config.records);
            return checked(config, Box::new(records.into_iter().map(Ok)));
        }
        Source::Stdin => {
            if std::io::stdin().is_terminal() {
                let what = if config.records.key.is_some() {
                    "arguments"
                } else {
                    "jobs"
                };
                eprintln!("lanes: reading {what} from the terminal (end with Ctrl-D)");
            }
            Box::new(BufReader::with_capacity(64 * 1024, std::io::stdin()))
        }
        Source::LinesFile(path) => Box::new(BufReader::with_capacity(
            64 * 1024,
            File::open(path).with_context(|| format!("cannot open {}", path.display()))?,
        )),
    };
    if config.records.is_tab_lines() && !config.records.hint_no_tab && !config.strict {
        return Ok(Feed::Lines(reader));
    }
    checked(
        config,
        Box::new(RecordReader::new(reader, config.records.clone())),
    )
}

/// The records as they come, or under `--strict` all of them read and validated first.
fn checked(
    config: &RunConfig,
    records: Box<dyn Iterator<Item = std::io::Result<NumberedLine>> + Send>,
) -> anyhow::Result<Feed> {
    if !config.strict {
        return Ok(Feed::Records(records));
    }
    // The whole input is read even past an invalid line, so that a producer writing into a
    // pipe is never cut off with EPIPE (SPEC §1.1); only the first invalid line is named.
    let mut lines = Vec::new();
    let mut first_invalid = None;
    for numbered in records {
        let numbered = numbered.context("cannot read the input")?;
        match &numbered.item {
            LineItem::Invalid { message, .. } => {
                first_invalid.get_or_insert_with(|| (numbered.line, message.clone()));
            }
            LineItem::Job { .. } if first_invalid.is_none() => lines.push(numbered),
            LineItem::Job { .. } => {}
        }
    }
    if let Some((line, message)) = first_invalid {
        bail!(
            "{}:{line}: {message} (--strict: nothing was run)",
            config.source.describe()
        );
    }
    Ok(Feed::Preloaded(lines))
}

/// The terminal's size (rows, columns), when stderr is a terminal.
fn terminal_size() -> Option<(u16, u16)> {
    console::Term::stderr().size_checked()
}
