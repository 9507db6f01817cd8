//! From what was typed to what it means: the command line and the manifest merged into one
//! validated [`RunConfig`] (flags override the manifest, the manifest overrides defaults).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::cli::Cli;
use crate::core::Policy;
use crate::input::arguments::RecordFormat;
use crate::input::manifest::{self, Manifest, ManifestError};
use crate::key_template::{KeyTemplate, KeyTemplateError};
use crate::settings::{BackendKind, Coalesce, ContainmentMode, OnFull, OutputMode, When};
use crate::template::{Template, TemplateError};

/// The default grace period between the first signal and SIGKILL.
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(5);
/// The default bound on jobs admitted but not started.
pub(crate) const DEFAULT_MAX_QUEUED: usize = 10_000;
/// The default shell.
pub(crate) const DEFAULT_SHELL: &str = "sh";

/// Where the jobs come from.
#[derive(Debug)]
pub(crate) enum Source {
    /// `KEY<TAB>COMMAND` lines on stdin.
    Stdin,
    /// `KEY<TAB>COMMAND` lines in a file.
    LinesFile(PathBuf),
    /// The arguments given after `:::`.
    List(Vec<Vec<u8>>),
    /// A parsed, validated manifest.
    Manifest {
        path: PathBuf,
        manifest: Box<Manifest>,
    },
    /// `lanes serve`: submissions on a Unix socket (`--socket`, or the default path).
    Socket(Option<PathBuf>),
}

impl Source {
    /// How the report's `run` record names the source: `"-"` for stdin, else the path.
    pub(crate) fn describe(&self) -> String {
        match self {
            Source::Stdin => "-".to_owned(),
            Source::List(_) => ":::".to_owned(),
            Source::LinesFile(path) | Source::Manifest { path, .. } => path.display().to_string(),
            Source::Socket(path) => path.as_ref().map_or_else(
                || crate::serve::socket::default_path().display().to_string(),
                |path| path.display().to_string(),
            ),
        }
    }
}

/// Everything a run needs, validated.
#[derive(Debug)]
pub(crate) struct RunConfig {
    pub source: Source,
    /// `lanes serve --journal`.
    pub journal: Option<PathBuf>,
    /// `lanes serve --requeue-lost`.
    pub requeue_lost: bool,
    /// ≥ 1.
    pub max_concurrent: usize,
    /// The run's named resources (`[resources]`, then `--resource`), in that order.
    pub resources: Vec<crate::core::Resource>,
    /// What a job needs that does not say (`--weight`, `--needs`); `None` for weight 1 and
    /// no resource. A manifest job's own is resolved into it.
    pub default_needs: Option<Arc<crate::core::Needs>>,
    /// ≥ 1.
    pub max_queued: usize,
    /// Per-key policies for the core.
    pub policy: Policy,
    /// `--events FILE`.
    pub events: Option<PathBuf>,
    /// `--resume REPORT`.
    pub resume: Option<PathBuf>,
    /// `--command` or the trailing command: the record's text is then an argument.
    pub template: Option<Template>,
    /// How input records are separated and keyed (`-0`, `--key`).
    pub records: RecordFormat,
    /// The run-wide turn timeout as given (0 for none); see [`RunConfig::turn_timeout`].
    timeout: Option<Duration>,
    pub grace: Duration,
    pub leak_window: Duration,
    /// How many threads start jobs beside the event loop, and when; see [`spawn_threads`].
    pub spawn_threads: SpawnThreads,
    /// `--containment`.
    pub containment: ContainmentMode,
    pub shell: String,
    /// Added to every job's environment (the manifest's `[env]`).
    pub env: Vec<(String, String)>,
    pub strict: bool,
    /// `--dry-run`.
    pub dry_run: bool,
    pub report: Option<PathBuf>,
    pub json: bool,
    pub output: OutputMode,
    pub results: Option<PathBuf>,
    /// `--results-clean`: remove an earlier run's files from the results directory.
    pub results_clean: bool,
    /// `--keep-order` (grouped blocks in input order).
    pub keep_order: bool,
    pub color: When,
    pub progress: When,
    /// `--junit FILE`.
    pub junit: Option<PathBuf>,
    /// Where jobs run.
    pub backend: Backend,
    /// `--lock-dir`/`LANES_LOCK_DIR`/`lock_dir`: key lanes shared with other processes.
    pub lock_dir: Option<PathBuf>,
    /// Where `lock_dir` was given, as messages name it: `--lock-dir`, `LANES_LOCK_DIR`, or the
    /// manifest's `lock_dir` with its place.
    pub lock_dir_given_as: String,
    /// `--shared-max-concurrent`: most jobs in flight across the processes sharing `lock_dir`.
    pub shared_max_concurrent: Option<usize>,
    /// `--coordinate`/`LANES_COORDINATE`/`coordinate`: key lanes shared by a fleet of hosts
    /// through this PostgreSQL URL (it may hold a password: never shown).
    pub coordinate: Option<String>,
    /// How the user gave [`RunConfig::coordinate`], for messages: `--coordinate`,
    /// `LANES_COORDINATE`, or the manifest's `coordinate` with its file, line and column.
    pub coordinate_given_as: String,
    /// `--namespace`/`namespace`: the fleet's name in the database.
    pub namespace: String,
    /// `--host-id`: this host's name to the fleet; `None` for the host name.
    pub host_id: Option<String>,
    /// `--coordinate-records`: job records also go into the fleet's database.
    pub coordinate_records: bool,
}

/// Slurm options (`--backend slurm`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SlurmOptions {
    /// Job names are `PREFIX.HASH(key)`: with `--dependency=singleton`, one job per name and
    /// user runs at a time on the cluster, across concurrent runs too (`--slurm-name-prefix`).
    pub name_prefix: String,
    /// `--licenses=NAME:1` for every job: a cluster-wide cap (`Licenses=NAME:N` in slurm.conf).
    pub license: Option<String>,
    pub partition: Option<String>,
    pub account: Option<String>,
    pub qos: Option<String>,
}

/// The backend of a run: where its jobs run (this machine, or a Slurm cluster through
/// `sbatch`). A plain setting; starting and stopping jobs on it is the shell's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Backend {
    Local,
    Slurm {
        options: SlurmOptions,
        /// Marks this run's jobs (`--comment`), so that a fallback `scancel` touches only them.
        run_id: String,
    },
}

impl Backend {
    /// A Slurm backend for this run.
    pub(crate) fn slurm(options: SlurmOptions) -> Self {
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        Backend::Slurm {
            options,
            run_id: format!("lanes-{}-{started}", std::process::id()),
        }
    }
}

/// What `lanes` knows of its surroundings when it decides on colours and the live display.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Surroundings {
    pub stdout_is_terminal: bool,
    /// stdout is a pipe, a FIFO or a socket: what lanes writes there may reach the terminal by
    /// another way (`lanes … | tee log`).
    pub stdout_is_pipe: bool,
    pub stderr_is_terminal: bool,
    /// `NO_COLOR` set and not empty (<https://no-color.org>).
    pub no_color: bool,
    /// `CI` set: logs are read later, not watched.
    pub ci: bool,
    /// `TERM=dumb`.
    pub dumb_terminal: bool,
    /// The jobs are typed on the terminal (stdin is one, and the input): a display redrawn
    /// there would draw over what is being typed.
    pub jobs_typed: bool,
}

impl Surroundings {
    /// Reads the process's environment and terminals.
    pub(crate) fn detect() -> Self {
        use std::io::IsTerminal;
        let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
        Surroundings {
            stdout_is_terminal: std::io::stdout().is_terminal(),
            stdout_is_pipe: is_pipe(&std::io::stdout()),
            stderr_is_terminal: std::io::stderr().is_terminal(),
            no_color: set("NO_COLOR"),
            ci: ci_is_true(std::env::var_os("CI").as_deref()),
            dumb_terminal: std::env::var_os("TERM").is_some_and(|t| t == "dumb"),
            jobs_typed: false,
        }
    }
}

/// Whether `CI` says the run is in continuous integration: set to anything but an empty
/// value, `0`, `false`, `no` or `off` (any case).
pub(crate) fn ci_is_true(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|value| {
        let value = value.to_string_lossy().trim().to_ascii_lowercase();
        !matches!(value.as_str(), "" | "0" | "false" | "no" | "off")
    })
}

/// Whether escape codes may go to a stream (SPEC §5.4): always/never as asked; `auto` only on
/// a terminal, without NO_COLOR, CI or TERM=dumb.
pub(crate) fn use_color(choice: When, is_terminal: bool, env: &Surroundings) -> bool {
    match choice {
        When::Always => true,
        When::Never => false,
        When::Auto => is_terminal && !env.no_color && !env.ci && !env.dumb_terminal,
    }
}

/// Whether the live display is drawn on stderr (SPEC §5.4). Not under `auto` when stdout is a
/// pipe: job output may then reach the same terminal through it (`lanes … | tee log`), and the
/// display, redrawn over the last rows, would erase it.
pub(crate) fn use_progress(progress: When, color: When, env: &Surroundings) -> bool {
    match progress {
        When::Always => true,
        When::Never => false,
        When::Auto => {
            color != When::Never
                && !env.stdout_is_pipe
                && !env.jobs_typed
                && use_color(When::Auto, env.stderr_is_terminal, env)
        }
    }
}

/// Whether `stream` is a pipe, a FIFO or a socket.
fn is_pipe(stream: &impl std::os::fd::AsFd) -> bool {
    use std::os::unix::fs::FileTypeExt;
    stream
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(|file| file.metadata())
        .is_ok_and(|meta| meta.file_type().is_fifo() || meta.file_type().is_socket())
}

/// Why a configuration could not be built; nothing has run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfigError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Template(#[from] TemplateError),
    #[error(transparent)]
    KeyTemplate(#[from] KeyTemplateError),
    /// Flags that make no sense together.
    #[error("{0}")]
    Usage(String),
}

/// The default bound on a batch's quoted argument bytes: under Linux's `MAX_ARG_STRLEN`
/// (128 KiB for one argument, and `SHELL -c COMMAND` passes the whole command as one).
pub(crate) const DEFAULT_BATCH_BYTES: usize = 100_000;

impl RunConfig {
    /// The run's template as its run record tells it: the text and the column separator its
    /// column placeholders use (see [`crate::template::Template::recorded`]); `(None, None)`
    /// without a template.
    pub(crate) fn recorded_template(&self) -> (Option<String>, Option<String>) {
        match self
            .template
            .as_ref()
            .map(crate::template::Template::recorded)
        {
            Some((text, colsep)) => (Some(text), colsep),
            None => (None, None),
        }
    }
}

impl RunConfig {
    /// Merges the command line with the manifest it names, if any.
    ///
    /// # Errors
    /// An invalid manifest ([`ManifestError`], naming file, line and column).
    pub(crate) fn from_cli(cli: Cli) -> Result<Self, ConfigError> {
        check_serve(&cli)?;
        let plain = cli.trailing_command.is_some()
            || cli.key.is_some()
            || cli.arguments.is_some()
            || cli.arg_file.is_some();
        if let Some(arguments) = &cli.arguments {
            if let Some(file) = cli
                .file
                .as_ref()
                .or(cli.manifest.as_ref())
                .or(cli.arg_file.as_ref())
            {
                return Err(ConfigError::Usage(format!(
                    "`::: ARG...` gives the input, so {} cannot be read too",
                    file.display()
                )));
            }
            if arguments.is_empty() {
                return Err(ConfigError::Usage(
                    "nothing after `:::`: give the arguments to run the command for".into(),
                ));
            }
        }
        let is_manifest = cli.manifest.is_some()
            || cli
                .file
                .as_deref()
                .is_some_and(crate::input::manifest::is_manifest_name);
        if is_manifest && (plain || cli.null) {
            return Err(ConfigError::Usage(
                "a manifest's jobs have their own keys and commands: a trailing command, --key, \
                 -0, -a and `:::` apply to input records"
                    .into(),
            ));
        }
        let mut source = match (cli.manifest, cli.file) {
            _ if cli.serve => Source::Socket(cli.socket.clone()),
            _ if cli.arguments.is_some() => Source::List(cli.arguments.clone().unwrap_or_default()),
            // `-a -`: stdin, as for FILE (and GNU parallel's `-a -`).
            _ if cli.arg_file.as_deref() == Some(Path::new("-")) => Source::Stdin,
            _ if cli.arg_file.is_some() => {
                Source::LinesFile(cli.arg_file.clone().unwrap_or_default())
            }
            (Some(path), _) => load_manifest(path)?,
            (None, Some(path)) if path == Path::new("-") => Source::Stdin,
            (None, Some(path)) if crate::input::manifest::is_manifest_name(&path) => {
                load_manifest_by_name(path)?
            }
            (None, Some(path)) if path.is_dir() => {
                return Err(ConfigError::Usage(format!(
                    "{} is a directory, not a file of jobs",
                    path.display()
                )))
            }
            (None, Some(path)) => Source::LinesFile(path),
            (None, None) => Source::Stdin,
        };
        let settings = match &source {
            Source::Manifest { manifest, .. } => manifest.settings.clone(),
            _ => Default::default(),
        };
        let origins = Origins {
            manifest: match &source {
                Source::Manifest { path, .. } => Some(path.clone()),
                _ => None,
            },
            places: settings.places.clone(),
        };
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        check_distinct_files(&source, &cli.report, &cli.events, &cli.junit, &cli.resume)?;
        if cli.keep_order && cli.output != OutputMode::Grouped {
            return Err(ConfigError::Usage(
                "--keep-order orders the blocks of --output grouped; add --output grouped".into(),
            ));
        }
        if cli.shell.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return Err(ConfigError::Usage("--shell must name a program".into()));
        }
        if cli.command.is_some() && cli.trailing_command.is_some() {
            return Err(ConfigError::Usage(
                "--command and a trailing command both give the command: use one".into(),
            ));
        }
        // What gave the template, for errors about it.
        let template_origin = if cli.trailing_command.is_some() {
            "the trailing command".to_owned()
        } else if cli.command.is_some() {
            "--command".to_owned()
        } else {
            // Where in the manifest, as its other settings are named.
            origins.name(false, "the manifest's `command`", "command", "command")
        };
        let template_origin = template_origin.as_str();
        let command = match &cli.trailing_command {
            Some(words) => {
                crate::trailing_command::check_program(
                    words,
                    std::env::var_os("PATH").as_deref(),
                    cli.trailing_after_dashes,
                )
                .map_err(ConfigError::Usage)?;
                if words.len() > 1 {
                    crate::trailing_command::check_shell_scripts(words)
                        .map_err(ConfigError::Usage)?;
                }
                Some(crate::trailing_command::template_text(words))
            }
            None => cli.command.or(settings.command),
        };
        if command.as_deref().is_some_and(|c| c.trim().is_empty()) {
            return Err(ConfigError::Usage(format!(
                "the command ({template_origin}) is empty or blank: give the command to run for \
                 each argument"
            )));
        }
        let template = match command {
            Some(text) => Some(
                Template::parse(&text)
                    .map_err(|err| {
                        // The error names what gave the template.
                        ConfigError::Usage(err.to_string().replace("--command", template_origin))
                    })?
                    .with_colsep(cli.colsep.clone()),
            ),
            None => None,
        };
        if cli.colsep.as_deref() == Some("") {
            return Err(ConfigError::Usage(
                "--colsep is empty: give the string that separates columns".into(),
            ));
        }
        let mut records = RecordFormat {
            delimiter: if cli.null { b'\0' } else { b'\n' },
            key: if plain {
                Some(KeyTemplate::parse(
                    cli.key.as_deref().unwrap_or("{}"),
                    cli.colsep.clone(),
                )?)
            } else {
                None
            },
            hint_no_tab: !plain && template.is_some(),
            columns: None,
            whole_commands: plain && template.is_none(),
        };
        let columns_named = template
            .as_ref()
            .map_or(0, Template::largest_column)
            .max(records.key.as_ref().map_or(0, KeyTemplate::largest_column));
        records.columns = cli
            .colsep
            .clone()
            .filter(|_| columns_named > 1)
            .map(|sep| (sep, columns_named));
        if let Some(colsep) = cli.colsep.as_deref().filter(|_| columns_named == 0) {
            // GNU parallel passes the columns as arguments where nothing names them; lanes
            // would pass the whole argument, and a manifest's jobs would not see it at all.
            let mut looked_in: Vec<String> = Vec::new();
            if template.is_some() {
                looked_in.push(format!("not in {template_origin}"));
            }
            if records.key.is_some() {
                looked_in.push("not in the key (--key)".to_owned());
            }
            if looked_in.is_empty() {
                looked_in.push("there is no command template, nor --key".to_owned());
            }
            return Err(ConfigError::Usage(format!(
                "--colsep `{colsep}` is given, but no column placeholder ({{1}}, {{2}}…) uses it \
                 ({}): name the columns where they go (`echo {{1}} {{2}}`), or leave --colsep out",
                looked_in.join(", ")
            )));
        }
        if cli.colsep.is_none() {
            // Without --colsep `{1}` is the whole argument and every later column empty.
            let named = [
                (
                    template_origin,
                    template.as_ref().map_or(0, Template::largest_column),
                ),
                (
                    "--key",
                    records.key.as_ref().map_or(0, KeyTemplate::largest_column),
                ),
            ];
            if let Some((flag, column)) = named.into_iter().find(|&(_, column)| column > 1) {
                // `lanes echo {1} {2} --colsep ,`: options after the command are its words.
                let in_command = template.as_ref().is_some_and(|t| {
                    t.recorded()
                        .0
                        .split_whitespace()
                        .any(|word| word.starts_with("--colsep"))
                });
                let hint = if in_command {
                    " before the command (after it, `--colsep` is a word of the command)"
                } else {
                    ""
                };
                return Err(ConfigError::Usage(format!(
                    "{flag} names column {{{column}}}, but there is no --colsep to split the \
                     argument into columns (without it {{1}} is the whole argument and every \
                     later column is empty): give --colsep SEP{hint}"
                )));
            }
        }
        // `--batch-bytes` alone batches by bytes only, as `xargs -s` does.
        let bytes_given = cli.batch_bytes.is_some() || settings.batch_bytes.is_some();
        let batch_size = cli
            .batch_size
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
            .or(settings.batch_size)
            .unwrap_or(if bytes_given { usize::MAX } else { 1 });
        // A batch's command is the template's own text and the batch's quoted arguments: one
        // argument of `SHELL -c`, so its bound must leave room for the text.
        let limit = crate::arg_limit::max_argument_bytes();
        let text = template.as_ref().map_or(0, Template::text_len);
        let most = limit.saturating_sub(text).max(1);
        let batch_bytes = match cli
            .batch_bytes
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
            .or(settings.batch_bytes)
        {
            // Without a template, batching is refused below, for that.
            Some(bytes) if bytes > most && template.is_some() => {
                let name = origins.name(
                    cli.batch_bytes.is_some(),
                    "--batch-bytes",
                    "batch_bytes",
                    "batch_bytes",
                );
                return Err(ConfigError::Usage(format!(
                    "{name} {bytes} is more than one argument can hold: a batch runs as \
                     `SHELL -c COMMAND`, and COMMAND is at most {limit} bytes here (the \
                     system's limit on one argument, MAX_ARG_STRLEN), {text} of them the \
                     template's own text; give at most {most}"
                )));
            }
            Some(bytes) => bytes,
            None => DEFAULT_BATCH_BYTES.min(most),
        };
        let batch_delay = cli.batch_delay.or(settings.batch_delay).unwrap_or_default();
        if !batch_delay.is_zero() && batch_size == 1 {
            // A batch of one is always full: the delay would never apply.
            let delay = origins.name(
                cli.batch_delay.is_some(),
                "--batch-delay",
                "batch_delay",
                "batch_delay",
            );
            return Err(ConfigError::Usage(format!(
                "{delay} waits for a key's batch to fill, but a batch holds one job here: give \
                 --batch-size above 1 or --batch-bytes"
            )));
        }
        let retry_delay = cli.retry_delay.or(settings.retry_delay).unwrap_or_default();
        if !retry_delay.is_zero() && cli.retries.or(settings.retries).unwrap_or(0) == 0 {
            // Without retries no job waits for one: the delay would never apply.
            let delay = origins.name(
                cli.retry_delay.is_some(),
                "--retry-delay",
                "retry_delay",
                "retry_delay",
            );
            return Err(ConfigError::Usage(format!(
                "{delay} is the wait before a failed job's retry, but no job is retried here: \
                 give --retries N"
            )));
        }
        let batching = batch_size > 1 || !batch_delay.is_zero();
        let coalesce = cli.coalesce.or(settings.coalesce);
        let coalesce_latest = coalesce == Some(Coalesce::Latest);
        let cancel_in_progress = flag(
            cli.cancel_in_progress,
            cli.no_cancel_in_progress,
            settings.cancel_in_progress,
        );
        let cancel_name = || {
            origins.name(
                cli.cancel_in_progress,
                "--cancel-in-progress",
                "cancel_in_progress",
                "cancel_in_progress = true",
            )
        };
        let coalesce_name = |value: &str| {
            origins.name(
                cli.coalesce.is_some(),
                &format!("--coalesce {value}"),
                "coalesce",
                &format!("coalesce = \"{value}\""),
            )
        };
        if cancel_in_progress && coalesce == Some(Coalesce::Off) {
            return Err(ConfigError::Usage(format!(
                "{} keeps one running and one pending job per key (it implies --coalesce \
                 latest), while {} keeps every job: use one or the other",
                cancel_name(),
                coalesce_name("off")
            )));
        }
        // The setting that makes the run batch, as an error names it (a `--batch-delay`
        // alone was refused above).
        let batch_name = || {
            let size_given = cli.batch_size.is_some() || settings.batch_size.is_some();
            if size_given && batch_size > 1 {
                let flag = cli.batch_size.is_some();
                origins.name(flag, "--batch-size", "batch_size", "batch_size")
            } else {
                let flag = cli.batch_bytes.is_some();
                origins.name(flag, "--batch-bytes", "batch_bytes", "batch_bytes")
            }
        };
        if batching && template.is_none() {
            // `lanes serve` takes neither a trailing command nor a manifest.
            let ways = if cli.serve {
                "--command"
            } else {
                "--command, a trailing command or the manifest's `command`"
            };
            return Err(ConfigError::Usage(format!(
                "{} needs a command template ({ways}): a batch runs one command for the \
                 arguments of several jobs",
                batch_name()
            )));
        }
        if batching && plain && cli.key.as_deref().unwrap_or("{}") == "{}" {
            return Err(ConfigError::Usage(format!(
                "{} batches the arguments of one key, and here every distinct line is its own \
                 key (the key template is `{{}}`): no batch would hold more than one argument. \
                 Group lines into keys with --key (`--key '{{//}}'`: a directory's files \
                 together), or give KEY<TAB>ARGUMENT lines with --command",
                batch_name()
            )));
        }
        if let Some(at) = template
            .as_ref()
            .filter(|_| batching)
            .and_then(Template::args_in_assignment)
        {
            return Err(ConfigError::Usage(format!(
                "{} puts several arguments where {template_origin} has its argument in a \
                 word that begins `NAME=` (byte {at}): as an assignment, the first would be \
                 the value and the next a command to run (`x='a' 'b'` runs `b`). Assign each \
                 (`for x in {{}}; do …; done`) or use the arguments as words (`cmd {{}}`)",
                batch_name()
            )));
        }
        if batching && (coalesce_latest || cancel_in_progress) {
            let dropping = if cancel_in_progress {
                cancel_name()
            } else {
                coalesce_name("latest")
            };
            return Err(ConfigError::Usage(format!(
                "{} runs every waiting job of a key together, while {dropping} drops all but \
                 the newest: use one or the other",
                batch_name()
            )));
        }
        // Each from the flag, else the variable, else the manifest; the level (3, 2, 1) it came
        // from decides between the two: the flag wins over the variable, the variable over the
        // manifest, as for each alone.
        let env_lock_dir = std::env::var_os("LANES_LOCK_DIR").map(PathBuf::from);
        let env_coordinate = std::env::var("LANES_COORDINATE").ok();
        // A variable set but empty (`LANES_LOCK_DIR=$LOCKS` with LOCKS unset) where it would be
        // taken: a run meant to share its keys would otherwise run without a word. Either flag
        // wins over both variables, as over set ones.
        // `lanes serve` shares no key: an empty variable asks for nothing there.
        let flag_given = cli.lock_dir.is_some() || cli.coordinate.is_some();
        if cli.backend != BackendKind::Slurm && !flag_given && !cli.serve {
            for (name, empty) in [
                (
                    "LANES_LOCK_DIR",
                    env_lock_dir
                        .as_ref()
                        .is_some_and(|dir| dir.as_os_str().is_empty()),
                ),
                (
                    "LANES_COORDINATE",
                    env_coordinate.as_ref().is_some_and(String::is_empty),
                ),
            ] {
                if empty {
                    return Err(ConfigError::Usage(format!(
                        "{name} is set but empty: set it to share keys with other lanes, or \
                         unset it (`unset {name}`) to share none"
                    )));
                }
            }
        }
        let env_lock_dir = env_lock_dir.filter(|dir| !dir.as_os_str().is_empty());
        let env_coordinate = env_coordinate.filter(|url| !url.is_empty());
        let level = |flag: bool, env: bool, manifest: bool| {
            if flag {
                3
            } else if env {
                2
            } else {
                u8::from(manifest)
            }
        };
        let lock_dir_level = level(
            cli.lock_dir.is_some(),
            env_lock_dir.is_some(),
            settings.lock_dir.is_some(),
        );
        let coordinate_level = level(
            cli.coordinate.is_some(),
            env_coordinate.is_some(),
            settings.coordinate.is_some(),
        );
        // A `coordinate` that gave way to a `--lock-dir` given at a higher level: the fleet
        // settings that came with it (the manifest's `namespace`) are moot, not wrong.
        let mut coordinate_given_way = false;
        let lock_dir_given_as = match lock_dir_level {
            3 => "--lock-dir".to_owned(),
            2 => "LANES_LOCK_DIR".to_owned(),
            _ => origins.name(false, "--lock-dir", "lock_dir", "lock_dir"),
        };
        let coordinate_given_as = match coordinate_level {
            3 => "--coordinate".to_owned(),
            2 => "LANES_COORDINATE".to_owned(),
            _ => origins.name(false, "--coordinate", "coordinate", "coordinate"),
        };
        let mut lock_dir = cli.lock_dir.or(env_lock_dir).or(settings.lock_dir);
        if lock_dir
            .as_deref()
            .is_some_and(|dir| looks_like_a_database(&dir.to_string_lossy()))
        {
            // Not quoted: it may hold a password. Made as a directory, it would have been
            // written to disk, and shared no key with another host.
            return Err(ConfigError::Usage(format!(
                "{lock_dir_given_as} is a database's connection string, not a directory: to \
                 share keys through PostgreSQL give it as --coordinate URL (or \
                 LANES_COORDINATE); a lock directory is a path on this host"
            )));
        }
        let mut coordinate = cli.coordinate.or(env_coordinate).or(settings.coordinate);
        if cli.backend == BackendKind::Slurm {
            // The variables are defaults for runs whose jobs run on this host; a Slurm run's
            // keys are shared cluster-wide already, so a variable exported for local runs does
            // not stop it (a flag or the manifest asking for either is refused below).
            if lock_dir_level == 2 {
                lock_dir = None;
            }
            if coordinate_level == 2 {
                coordinate = None;
            }
        }
        if coordinate.is_some() && lock_dir.is_some() {
            if lock_dir_level == coordinate_level {
                let (coordinate, lock_dir) = match lock_dir_level {
                    2 => ("LANES_COORDINATE".to_owned(), "LANES_LOCK_DIR".to_owned()),
                    level => (
                        origins.name(level == 3, "--coordinate", "coordinate", "coordinate"),
                        origins.name(level == 3, "--lock-dir", "lock_dir", "lock_dir"),
                    ),
                };
                return Err(ConfigError::Usage(format!(
                    "{coordinate} shares keys across hosts and {lock_dir} within one host: use \
                     one or the other"
                )));
            }
            if lock_dir_level > coordinate_level {
                coordinate = None;
                coordinate_given_way = true;
            } else {
                lock_dir = None;
            }
        }
        let shared_max_concurrent = cli
            .shared_max_concurrent
            .map(|n| n as usize)
            .or(settings.shared_max_concurrent);
        if coordinate.is_some() && cli.backend == BackendKind::Slurm {
            return Err(ConfigError::Usage(
                "--coordinate shares keys between hosts running their own jobs; with --backend \
                 slurm, jobs already share their keys cluster-wide (--slurm-name-prefix)"
                    .into(),
            ));
        }
        let namespace_flag = cli.namespace.is_some();
        let namespace = cli
            .namespace
            .or(settings.namespace)
            .unwrap_or_else(|| "lanes".to_owned());
        let coordinate_records = cli.coordinate_records && !cli.no_coordinate_records;
        let namespace_asked = namespace != "lanes" && (namespace_flag || !coordinate_given_way);
        if coordinate.is_none() && (cli.host_id.is_some() || namespace_asked || coordinate_records)
        {
            let fleet = if cli.host_id.is_some() {
                "--host-id".to_owned()
            } else if coordinate_records {
                "--coordinate-records".to_owned()
            } else {
                origins.name(namespace_flag, "--namespace", "namespace", "namespace")
            };
            return Err(ConfigError::Usage(format!(
                "{fleet} is about a fleet's database: add --coordinate URL"
            )));
        }
        let host_id = cli.host_id;
        if shared_max_concurrent.is_some() && lock_dir.is_none() && coordinate.is_none() {
            let shared = origins.name(
                cli.shared_max_concurrent.is_some(),
                "--shared-max-concurrent",
                "shared_max_concurrent",
                "shared_max_concurrent",
            );
            // `lanes serve` shares its keys with no other process.
            let add = if cli.serve {
                "`lanes serve` shares its keys with no other process"
            } else {
                "add --lock-dir DIR or --coordinate URL"
            };
            return Err(ConfigError::Usage(format!(
                "{shared} caps the jobs of every process sharing a lock directory or a fleet's \
                 database: {add}"
            )));
        }
        if cli.backend != BackendKind::Slurm {
            // Where a job runs is the backend's: without Slurm, these would ask for nothing.
            let given = [
                ("--slurm-name-prefix", cli.slurm_name_prefix.is_some()),
                ("--slurm-license", cli.slurm_license.is_some()),
                ("--slurm-partition", cli.slurm_partition.is_some()),
                ("--slurm-account", cli.slurm_account.is_some()),
                ("--slurm-qos", cli.slurm_qos.is_some()),
            ];
            if let Some((flag, _)) = given.iter().find(|(_, given)| *given) {
                return Err(ConfigError::Usage(format!(
                    "{flag} is about jobs run on a Slurm cluster, but they run here: add \
                     --backend slurm"
                )));
            }
        }
        if let Some(license) = cli.slurm_license.as_deref() {
            if license.is_empty()
                || license.contains([':', ',', '='])
                || license.contains(char::is_whitespace)
            {
                return Err(ConfigError::Usage(format!(
                    "--slurm-license {license:?}: give one license name (each job takes one of \
                     it, `--licenses=NAME:1`), without a count, a comma or spaces"
                )));
            }
        }
        if lock_dir.is_some() && cli.backend == BackendKind::Slurm {
            return Err(ConfigError::Usage(
                "--lock-dir shares keys between the processes of one host; with --backend \
                 slurm, jobs already share their keys cluster-wide (--slurm-name-prefix)"
                    .into(),
            ));
        }
        let max_concurrent = cli
            .max_concurrent
            .map(|n| n as usize)
            .or(settings.max_concurrent)
            .unwrap_or(cpus)
            .max(1);
        let resources = run_resources(&cli.resource, settings.resources)?;
        let default_needs =
            default_needs(cli.weight, cli.needs.as_deref(), &resources, max_concurrent)?;
        if let Source::Manifest { path, manifest } = &mut source {
            // A seq is at most the number of jobs: its digits are counted for the longest.
            let last_seq = manifest.jobs.len() as u64;
            for job in &mut manifest.jobs {
                job.resolved_needs = job_needs(
                    path,
                    job,
                    &default_needs,
                    &resources,
                    &cli.resource,
                    max_concurrent,
                )?;
                // The run's own needs were checked once, in `default_needs`.
                let own_needs = job.resolved_needs.as_ref().filter(|needs| {
                    !default_needs
                        .as_ref()
                        .is_some_and(|d| Arc::ptr_eq(d, needs))
                });
                if let Some(message) = own_needs
                    .and_then(|needs| crate::resources::too_long_to_hand(needs, &resources))
                {
                    let (line, column) = job
                        .needs
                        .as_ref()
                        .map_or((job.line, 1), |needs| (needs.line, needs.column));
                    return Err(ConfigError::Manifest(ManifestError::Invalid {
                        path: path.clone(),
                        line,
                        column,
                        message: format!("`needs`: {message}"),
                    }));
                }
                let missing = records
                    .missing_columns(&job.cmd)
                    .map(|message| format!("the job's `cmd` {message}"));
                if let Some(message) = missing.or_else(|| {
                    template
                        .as_ref()
                        .and_then(|t| t.too_long(&job.cmd, &job.key, last_seq, max_concurrent))
                }) {
                    return Err(ConfigError::Manifest(ManifestError::Invalid {
                        path: path.clone(),
                        line: job.line,
                        column: 1,
                        message,
                    }));
                }
            }
        }
        let weighed = default_needs.is_some()
            || matches!(&source, Source::Manifest { manifest, .. }
                if manifest.jobs.iter().any(|j| j.resolved_needs.is_some()));
        if weighed && batching {
            // The first weight or needs given, as written.
            let per_job = match (&source, cli.weight.is_some()) {
                (_, true) => "--weight".to_owned(),
                (Source::Manifest { path, manifest }, false) if default_needs.is_none() => manifest
                    .jobs
                    .iter()
                    .find_map(|job| {
                        let (name, line, column) = match (&job.weight, &job.needs) {
                            (Some(w), _) => ("weight", w.line, w.column),
                            (None, Some(n)) => ("needs", n.line, n.column),
                            (None, None) => return None,
                        };
                        Some(format!(
                            "job `{}`'s `{name}` at {}:{line}:{column}",
                            job.key.escape_default(),
                            path.display()
                        ))
                    })
                    .unwrap_or_else(|| "--needs".to_owned()),
                _ => "--needs".to_owned(),
            };
            return Err(ConfigError::Usage(format!(
                "weights and resource needs are per job ({per_job}), while {} runs several jobs \
                 as one: use one or the other",
                batch_name()
            )));
        }
        let heaviest = match &source {
            Source::Manifest { manifest, .. } => manifest
                .jobs
                .iter()
                .map(|j| j.resolved_needs.as_ref().map_or(1, |n| n.weight))
                .max()
                .unwrap_or(1),
            _ => default_needs.as_ref().map_or(1, |n| n.weight),
        } as usize;
        let max_queued_weight = cli
            .max_queued_weight
            .map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
        if heaviest > max_queued_weight {
            return Err(ConfigError::Usage(format!(
                "--max-queued-weight {max_queued_weight} is less than the weight {heaviest} of a \
                 job: it could never be queued"
            )));
        }
        if cli.backend == BackendKind::Slurm {
            crate::resources::check_slurm_resources(&resources)
                .map_err(|m| ConfigError::Usage(format!("--backend slurm: {m}")))?;
        }
        if let Some(name) = template.as_ref().and_then(|t| {
            t.resource_names()
                .find(|name| !resources.iter().any(|r| *r.name == **name))
        }) {
            return Err(ConfigError::Usage(format!(
                "{template_origin} uses {{res.{name}}}, but the run has no resource {name:?} \
                 (declare it with --resource or [resources])"
            )));
        }
        Ok(RunConfig {
            journal: cli.journal,
            requeue_lost: cli.requeue_lost,
            lock_dir,
            lock_dir_given_as,
            coordinate_given_as,
            shared_max_concurrent,
            coordinate,
            namespace,
            host_id,
            coordinate_records,
            max_concurrent,
            resources,
            default_needs,
            max_queued: cli
                .max_queued
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
                .or(settings.max_queued)
                .unwrap_or(DEFAULT_MAX_QUEUED),
            policy: Policy {
                fail_fast: flag(cli.fail_fast, cli.no_fail_fast, settings.fail_fast),
                on_full: match cli.on_full.or(settings.on_full).unwrap_or(OnFull::Wait) {
                    OnFull::Wait => crate::core::OnFull::Wait,
                    OnFull::Reject => crate::core::OnFull::Reject,
                },
                coalesce_latest,
                cancel_in_progress,
                retries: cli.retries.or(settings.retries).unwrap_or(0),
                retry_delay,
                sticky_slots: flag(cli.sticky_slots, cli.no_sticky_slots, settings.sticky_slots),
                batch_size,
                batch_bytes,
                batch_delay,
                reserve_after: cli.reserve_after.unwrap_or_default(),
                max_queued_weight,
                heaviest,
            },
            template,
            records,
            events: cli.events,
            resume: cli.resume,
            timeout: cli.timeout.or(settings.timeout),
            grace: cli.grace.or(settings.grace).unwrap_or(DEFAULT_GRACE),
            leak_window: cli.leak_window,
            spawn_threads: spawn_threads(
                std::env::var_os("LANES_SPAWN_THREADS").as_deref(),
                cpus,
                max_concurrent,
            )?,
            containment: cli.containment,
            shell: cli
                .shell
                .or(settings.shell)
                .unwrap_or_else(|| DEFAULT_SHELL.to_owned()),
            env: settings.env,
            strict: cli.strict,
            dry_run: cli.dry_run,
            report: cli.report,
            json: cli.json,
            output: cli.output,
            results_clean: cli.results_clean,
            results: cli.results,
            keep_order: cli.keep_order,
            color: cli.color,
            progress: cli.progress,
            junit: cli.junit,
            backend: match cli.backend {
                BackendKind::Local => Backend::Local,
                BackendKind::Slurm => Backend::slurm(SlurmOptions {
                    name_prefix: cli.slurm_name_prefix.unwrap_or_else(|| "lanes".to_owned()),
                    license: cli.slurm_license,
                    partition: cli.slurm_partition,
                    account: cli.slurm_account,
                    qos: cli.slurm_qos,
                }),
            },
            source,
        })
    }
}

/// The most spawning threads `LANES_SPAWN_THREADS` may ask for.
const MOST_SPAWN_THREADS: usize = 16;

/// How jobs are started: by how many spawning threads beside the event loop, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SpawnThreads {
    /// 0: the event loop starts every job itself.
    pub threads: usize,
    /// The threads take a start only while other work (jobs' ends, input lines, the round's
    /// later starts) waits for the event loop behind it (a burst); any other start the event
    /// loop makes itself.
    pub only_in_bursts: bool,
}

/// How jobs are started: `LANES_SPAWN_THREADS` threads, taking every start, when it is set
/// (digits only, 0 to [`MOST_SPAWN_THREADS`]); else, with `max_concurrent` jobs in flight at
/// most on a machine of `cpus`:
/// - 3 CPUs or more: one thread per CPU, at most four, taking every start;
/// - 2 CPUs and `max_concurrent` above 2: two threads, taking every start;
/// - otherwise (1 CPU, or no more jobs in flight than CPUs): one thread taking starts only in
///   bursts.
///
/// Starting a process holds its thread until the child has called `execve`, so only threads
/// overlap spawns; but each start handed to a thread costs two wake-ups between threads (the
/// order there, the outcome back), and that wait falls on the one job that ends and the one
/// that starts in its place. With no more jobs in flight than CPUs, each end waits for that
/// hand-over while a CPU has nothing else to run: the event loop starting the next job itself
/// is faster (5,000 × `sh -c true` at `-j 2` on 2 CPUs: 2.26 s against 2.77 s with two
/// threads). With more jobs in flight than CPUs, other jobs keep the CPUs busy meanwhile and
/// two starts overlap: `-j 8`, 2.03 s against 2.29 s. When many jobs end at once, a thread lets
/// the event loop handle the next end while a job starts (`bench/README.md`).
///
/// # Errors
/// A value that is not a whole number from 0 to [`MOST_SPAWN_THREADS`].
fn spawn_threads(
    value: Option<&std::ffi::OsStr>,
    cpus: usize,
    max_concurrent: usize,
) -> Result<SpawnThreads, ConfigError> {
    match value.filter(|value| !value.is_empty()) {
        None if cpus == 2 && max_concurrent > cpus => Ok(SpawnThreads {
            threads: 2,
            only_in_bursts: false,
        }),
        None if cpus <= 2 => Ok(SpawnThreads {
            threads: 1,
            only_in_bursts: true,
        }),
        None => Ok(SpawnThreads {
            threads: cpus.min(4),
            only_in_bursts: false,
        }),
        Some(value) => value
            .to_str()
            .filter(|text| text.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|text| text.parse::<usize>().ok())
            .filter(|&threads| threads <= MOST_SPAWN_THREADS)
            .map(|threads| SpawnThreads {
                threads,
                only_in_bursts: false,
            })
            .ok_or_else(|| {
                ConfigError::Usage(format!(
                    "LANES_SPAWN_THREADS must be a number of threads from 0 to \
                     {MOST_SPAWN_THREADS}, not {value:?}"
                ))
            }),
    }
}

/// The run's resources: the manifest's, then each `--resource` (one of the same name replaces
/// the manifest's).
fn run_resources(
    flags: &[String],
    manifest: Vec<crate::input::manifest::Located<crate::core::Resource>>,
) -> Result<Vec<crate::core::Resource>, ConfigError> {
    let mut resources: Vec<crate::core::Resource> = manifest.into_iter().map(|r| r.value).collect();
    let mut given: Vec<Arc<str>> = Vec::new();
    for flag in flags {
        let resource = crate::resources::parse_resource(flag)
            .map_err(|m| ConfigError::Usage(format!("--resource {flag}: {m}")))?;
        if given.contains(&resource.name) {
            return Err(ConfigError::Usage(format!(
                "--resource {flag}: {:?} is given twice",
                resource.name
            )));
        }
        given.push(Arc::clone(&resource.name));
        match resources.iter_mut().find(|r| r.name == resource.name) {
            Some(old) => *old = resource,
            None => resources.push(resource),
        }
    }
    Ok(resources)
}

/// What a job needs that says nothing: `--weight` and `--needs`, checked against the run.
fn default_needs(
    weight: Option<u32>,
    needs: Option<&str>,
    resources: &[crate::core::Resource],
    cap: usize,
) -> Result<Option<Arc<crate::core::Needs>>, ConfigError> {
    let parsed = match needs {
        Some(text) => crate::resources::parse_needs(text)
            .map_err(|m| ConfigError::Usage(format!("--needs {text}: {m}")))?,
        None => Vec::new(),
    };
    let resolved = crate::resources::resolve(weight.unwrap_or(1), &parsed, resources, cap)
        .map_err(|(fault, m)| {
            let flag = match fault {
                crate::resources::NeedFault::Weight => {
                    format!("--weight {}", weight.unwrap_or(1))
                }
                _ => format!("--needs {}", needs.unwrap_or_default()),
            };
            ConfigError::Usage(format!("{flag}: {m}"))
        })?;
    if let Some(message) = resolved
        .as_deref()
        .and_then(|resolved| crate::resources::too_long_to_hand(resolved, resources))
    {
        return Err(ConfigError::Usage(format!(
            "--needs {}: {message}",
            needs.unwrap_or_default()
        )));
    }
    Ok(resolved)
}

/// A manifest job's needs: its own `weight` and `needs` where given, else the run's
/// (`--weight`, `--needs`); errors point at the job's value, and name the `--resource` flag
/// that set a resource the job needs more of than the run has (`flags`: each `--resource`).
fn job_needs(
    path: &Path,
    job: &crate::input::manifest::ManifestJob,
    default: &Option<Arc<crate::core::Needs>>,
    resources: &[crate::core::Resource],
    flags: &[String],
    cap: usize,
) -> Result<Option<Arc<crate::core::Needs>>, ConfigError> {
    if job.weight.is_none() && job.needs.is_none() {
        return Ok(default.clone());
    }
    let weight = match &job.weight {
        Some(w) => w.value,
        None => default.as_ref().map_or(1, |d| d.weight),
    };
    let needs: Vec<crate::resources::Need> = match &job.needs {
        Some(needs) => needs.value.iter().map(|n| n.need.clone()).collect(),
        // The run's needs, by name again.
        None => default.as_ref().map_or(Vec::new(), |d| {
            d.resources
                .iter()
                .map(|&(index, amount)| crate::resources::Need {
                    name: resources[index].name.to_string(),
                    amount,
                    sized: false,
                })
                .collect()
        }),
    };
    crate::resources::resolve(weight, &needs, resources, cap).map_err(|(fault, mut message)| {
        use crate::resources::NeedFault;
        if let NeedFault::Amount(i) = fault {
            let name = &needs[i].name;
            // The flags were read once already ([`run_resources`]): each is valid.
            if let Some(flag) = flags.iter().find(|flag| {
                crate::resources::parse_resource(flag).is_ok_and(|r| *r.name == **name)
            }) {
                message.push_str(&format!(
                    " (the run's {name:?} is set by --resource {flag})"
                ));
            }
        }
        let written = |i: usize| job.needs.as_ref().and_then(|n| n.value.get(i));
        let (line, column) = match fault {
            NeedFault::Name(i) => written(i).map(|n| n.name_at),
            NeedFault::Amount(i) => written(i).map(|n| n.amount_at),
            NeedFault::Weight => None,
        }
        .or(job.weight.as_ref().map(|w| (w.line, w.column)))
        .unwrap_or((job.line, 1));
        ConfigError::Manifest(ManifestError::Invalid {
            path: path.to_path_buf(),
            line,
            column,
            message,
        })
    })
}

/// Names a setting in an error: its flag when the command line gave it, else how the manifest
/// writes it and where (`` `batch_size` (jobs.toml:3:14) ``).
struct Origins {
    /// The manifest's path, when the run has one.
    manifest: Option<PathBuf>,
    /// Where the manifest writes its settings ([`manifest::ManifestSettings::places`]).
    places: std::collections::BTreeMap<&'static str, (u64, u64)>,
}

impl Origins {
    /// `flag` when `from_flag`, else `written` with the place of the manifest's `key` (or
    /// `flag` when the manifest does not write it either).
    fn name(&self, from_flag: bool, flag: &str, key: &'static str, written: &str) -> String {
        match (&self.manifest, self.places.get(key)) {
            (Some(path), Some((line, column))) if !from_flag => {
                format!("`{written}` ({}:{line}:{column})", path.display())
            }
            _ => flag.to_owned(),
        }
    }
}

/// Whether `text`, given where a path goes, is a PostgreSQL connection string instead: a URL
/// of scheme `postgres:` or `postgresql:` (any case, however many slashes follow), or
/// libpq's `KEY=VALUE` form naming a host, database, user or password. Such text may hold a
/// password, and is never quoted in a message.
pub(crate) fn looks_like_a_database(text: &str) -> bool {
    let lower = text.trim_start().to_ascii_lowercase();
    if lower.starts_with("postgres:") || lower.starts_with("postgresql:") {
        return true;
    }
    lower.split_whitespace().any(|word| {
        [
            "host=",
            "hostaddr=",
            "dbname=",
            "user=",
            "password=",
            "port=",
        ]
        .iter()
        .any(|key| word.starts_with(key))
    })
}

/// A boolean setting: `--no-X` (given last, clap drops the other) turns it off, even over a
/// manifest's `true`; `--X` turns it on; else the manifest decides, else off.
fn flag(on: bool, off: bool, manifest: Option<bool>) -> bool {
    !off && (on || manifest.unwrap_or(false))
}

impl RunConfig {
    /// How many times a job's quoted argument counts toward a batch's byte bound: once for
    /// each argument placeholder of the template (`echo {} {.}` holds a batch's arguments
    /// twice); 0 without batching.
    pub(crate) fn batch_copies(&self) -> usize {
        if !self.policy.batching() {
            return 0;
        }
        self.template
            .as_ref()
            .map_or(1, Template::argument_placeholders)
            .max(1)
    }

    /// What a job of input records needs: the run's default; `None` for a manifest, whose
    /// jobs' needs are resolved one by one.
    pub(crate) fn run_default_needs(&self) -> Option<Arc<crate::core::Needs>> {
        match self.source {
            Source::Manifest { .. } => None,
            _ => self.default_needs.clone(),
        }
    }

    /// A job's turn timeout, decided once for every source: the job's own (a manifest's
    /// `timeout`) overrides the run's (`--timeout`, the manifest's top-level `timeout`), and 0
    /// from any of them means no timeout, as for timeout(1).
    pub(crate) fn turn_timeout(&self, job: Option<Duration>) -> Option<Duration> {
        job.or(self.timeout).filter(|t| !t.is_zero())
    }
}

/// `lanes serve` takes its jobs from the socket only, and `--socket` belongs to it.
fn check_serve(cli: &Cli) -> Result<(), ConfigError> {
    if !cli.serve {
        let given = [
            (cli.socket.is_some(), "--socket"),
            (cli.journal.is_some(), "--journal"),
            (cli.requeue_lost, "--requeue-lost"),
        ];
        if let Some((_, what)) = given.iter().find(|(given, _)| *given) {
            return Err(ConfigError::Usage(format!(
                "{what} goes with `lanes serve` (and `--socket` with the client commands, each \
                 named first: `lanes status --socket PATH`)"
            )));
        }
        return Ok(());
    }
    let word = cli
        .trailing_command
        .as_ref()
        .and_then(|words| words.first())
        .map_or_else(String::new, |word| {
            format!("a FILE of jobs or a trailing command (`{word}`)")
        });
    let input = [
        (cli.file.is_some(), "a FILE of jobs"),
        (cli.manifest.is_some(), "--manifest"),
        (cli.arguments.is_some(), "`::: ARG...`"),
        (cli.arg_file.is_some(), "-a"),
        (cli.trailing_command.is_some(), word.as_str()),
        (cli.key.is_some(), "--key"),
        (cli.null, "-0"),
    ];
    if let Some((_, what)) = input.iter().find(|(given, _)| *given) {
        // A trailing command or a manifest may be meant as the template of every job.
        let template = if cli.trailing_command.is_some() || cli.manifest.is_some() {
            "; for a command template applied to every submission, give --command TEMPLATE"
        } else {
            ""
        };
        return Err(ConfigError::Usage(format!(
            "`lanes serve` takes its jobs from `lanes submit`, not from {what}{template}"
        )));
    }
    let other = [
        (cli.dry_run, "--dry-run"),
        (cli.strict, "--strict"),
        (cli.resume.is_some(), "--resume"),
        (
            cli.lock_dir.is_some()
                || std::env::var_os("LANES_LOCK_DIR").is_some_and(|dir| !dir.is_empty()),
            "--lock-dir (or LANES_LOCK_DIR)",
        ),
        (
            cli.coordinate.is_some()
                || std::env::var_os("LANES_COORDINATE").is_some_and(|url| !url.is_empty()),
            "--coordinate (or LANES_COORDINATE)",
        ),
    ];
    if let Some((_, what)) = other.iter().find(|(given, _)| *given) {
        return Err(ConfigError::Usage(format!(
            "{what} does not go with `lanes serve`"
        )));
    }
    Ok(())
}

/// The files lanes writes must differ from each other and from the input: `--report
/// jobs.tsv jobs.tsv` would destroy the jobs before reading them. (`--resume` may name the
/// `--report` file: it is read before the report is written.)
fn check_distinct_files(
    source: &Source,
    report: &Option<PathBuf>,
    events: &Option<PathBuf>,
    junit: &Option<PathBuf>,
    resume: &Option<PathBuf>,
) -> Result<(), ConfigError> {
    let is_input = |path: &Path| match source {
        Source::LinesFile(input) | Source::Manifest { path: input, .. } => same_file(input, path),
        Source::Stdin => stdin_is(path),
        Source::List(_) | Source::Socket(_) => false,
    };
    let outputs = [
        ("--report", report),
        ("--events", events),
        ("--junit", junit),
    ];
    for (i, (flag, path)) in outputs.iter().enumerate() {
        let Some(path) = path else { continue };
        if is_input(path) {
            return Err(ConfigError::Usage(format!(
                "{flag} {} is the input file: it would be overwritten",
                path.display()
            )));
        }
        for (other_flag, other) in &outputs[i + 1..] {
            if other.as_deref().is_some_and(|other| same_file(other, path)) {
                return Err(ConfigError::Usage(format!(
                    "{flag} and {other_flag} name the same file {}",
                    path.display()
                )));
            }
        }
        if *flag != "--report" && resume.as_deref().is_some_and(|r| same_file(r, path)) {
            return Err(ConfigError::Usage(format!(
                "{flag} {} is the report to resume from",
                path.display()
            )));
        }
    }
    Ok(())
}

/// Whether stdin is the regular file `path` (`lanes --report jobs.tsv < jobs.tsv`): the same
/// device and inode.
fn stdin_is(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    // `/dev/stdin` is a link to descriptor 0's file (proc(5)); a pipe or a terminal is no
    // regular file.
    let Ok(stdin) = std::fs::metadata("/dev/stdin") else {
        return false;
    };
    stdin.is_file()
        && std::fs::metadata(path)
            .is_ok_and(|file| (file.dev(), file.ino()) == (stdin.dev(), stdin.ino()))
}

/// Whether `a` and `b` name the same file: when both exist, the same device and inode
/// (symbolic links followed, so that a hard link or a link to the file is caught too); else
/// the same path once its symbolic links (a link to a file not made yet) and its directory are
/// resolved (`./r.jsonl` and `r.jsonl`), or as given.
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    if let (Ok(a), Ok(b)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        return (a.dev(), a.ino()) == (b.dev(), b.ino());
    }
    let resolved = |path: &Path| {
        let path = link_target(path);
        let path = path.as_path();
        let name = path.file_name()?;
        let dir = crate::containing_dir::containing_dir(path);
        std::fs::canonicalize(dir).ok().map(|dir| dir.join(name))
    };
    match (resolved(a), resolved(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a == b,
    }
}

/// Where `path` leads through its symbolic links, followed even when the last one leads to
/// nothing yet (at most 40, as the kernel's `ELOOP` bound): the path a file opened there
/// would be made at.
fn link_target(path: &Path) -> PathBuf {
    let mut path = path.to_path_buf();
    for _ in 0..40 {
        let is_link = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
        let Some(target) = is_link.then(|| std::fs::read_link(&path).ok()).flatten() else {
            break;
        };
        path = match path.parent() {
            Some(dir) if target.is_relative() => dir.join(target),
            _ => target,
        };
    }
    path
}

fn load_manifest(path: PathBuf) -> Result<Source, ConfigError> {
    let manifest = Box::new(manifest::load(&path)?);
    Ok(Source::Manifest { path, manifest })
}

/// [`load_manifest`] for a FILE taken as a manifest by its name (`*.toml`): an error on a
/// first line that holds a tab, as a `KEY<TAB>COMMAND` line does, also says that the name
/// made it a manifest.
fn load_manifest_by_name(path: PathBuf) -> Result<Source, ConfigError> {
    match manifest::load(&path) {
        Ok(manifest) => Ok(Source::Manifest {
            path,
            manifest: Box::new(manifest),
        }),
        Err(ManifestError::Invalid {
            path,
            line,
            column,
            mut message,
        }) => {
            let tab_lines = std::fs::read(&path).is_ok_and(|text| {
                text.split(|&b| b == b'\n')
                    .find(|line| !line.trim_ascii().is_empty() && !line.starts_with(b"#"))
                    .is_some_and(|line| line.contains(&b'\t'))
            });
            if tab_lines {
                message.push_str(
                    "; a FILE named *.toml is read as a manifest: give KEY<TAB>COMMAND lines \
                     on stdin (`lanes < FILE`) or in a file named otherwise",
                );
            }
            Err(ConfigError::Manifest(ManifestError::Invalid {
                path,
                line,
                column,
                message,
            }))
        }
        Err(err) => Err(err.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terminal() -> Surroundings {
        Surroundings {
            stdout_is_terminal: true,
            stderr_is_terminal: true,
            ..Surroundings::default()
        }
    }

    #[test]
    fn ci_counts_only_when_true() {
        for value in ["true", "1", "yes", "TRUE", "github"] {
            assert!(ci_is_true(Some(std::ffi::OsStr::new(value))), "{value}");
        }
        for value in ["", "0", "false", "False", "no", "off"] {
            assert!(!ci_is_true(Some(std::ffi::OsStr::new(value))), "{value}");
        }
        assert!(!ci_is_true(None));
    }

    #[test]
    fn auto_colour_needs_a_terminal_and_no_opt_out() {
        assert!(use_color(When::Auto, true, &terminal()));
        assert!(!use_color(When::Auto, false, &terminal()));
        for env in [
            Surroundings {
                no_color: true,
                ..terminal()
            },
            Surroundings {
                ci: true,
                ..terminal()
            },
            Surroundings {
                dumb_terminal: true,
                ..terminal()
            },
        ] {
            assert!(!use_color(When::Auto, true, &env), "{env:?}");
        }
        assert!(use_color(When::Always, false, &Surroundings::default()));
        assert!(!use_color(When::Never, true, &terminal()));
    }

    #[test]
    fn the_display_follows_stderr_and_colour_never() {
        assert!(use_progress(When::Auto, When::Auto, &terminal()));
        let piped = Surroundings {
            stderr_is_terminal: false,
            ..terminal()
        };
        assert!(!use_progress(When::Auto, When::Auto, &piped));
        assert!(!use_progress(When::Auto, When::Never, &terminal()));
        assert!(!use_progress(
            When::Auto,
            When::Auto,
            &Surroundings {
                ci: true,
                ..terminal()
            }
        ));
        assert!(use_progress(When::Always, When::Never, &piped));
        // `lanes … | tee log`: job output reaches the terminal through the pipe.
        let teed = Surroundings {
            stdout_is_terminal: false,
            stdout_is_pipe: true,
            ..terminal()
        };
        assert!(!use_progress(When::Auto, When::Auto, &teed));
        assert!(use_progress(When::Always, When::Auto, &teed));
        // `lanes … > log`: nothing else reaches the terminal.
        let to_file = Surroundings {
            stdout_is_terminal: false,
            ..terminal()
        };
        assert!(use_progress(When::Auto, When::Auto, &to_file));
        // Jobs typed on the terminal: the display would draw over the typing.
        let typed = Surroundings {
            jobs_typed: true,
            ..terminal()
        };
        assert!(!use_progress(When::Auto, When::Auto, &typed));
        assert!(use_progress(When::Always, When::Auto, &typed));
    }

    #[test]
    fn the_default_batch_bound_leaves_room_for_a_long_template() {
        use clap::Parser as _;
        let config = |template: &str| {
            let cli = Cli::try_parse_from(["lanes", "--command", template]).unwrap();
            RunConfig::from_cli(cli).unwrap().policy.batch_bytes
        };
        assert_eq!(config("echo"), DEFAULT_BATCH_BYTES);
        let long = format!("echo {}", "x".repeat(60_000));
        let text = long.len() + 1; // and the space before the appended `{}`
        assert_eq!(config(&long), crate::arg_limit::max_argument_bytes() - text);
    }

    #[test]
    fn spawning_threads_take_only_bursts_on_two_cpus_unless_more_jobs_than_cpus_run() {
        use std::ffi::OsStr;
        let threads = |value: Option<&str>, cpus| spawn_threads(value.map(OsStr::new), cpus, cpus);
        let always = |threads| SpawnThreads {
            threads,
            only_in_bursts: false,
        };
        let in_bursts = SpawnThreads {
            threads: 1,
            only_in_bursts: true,
        };
        assert_eq!(threads(None, 1).unwrap(), in_bursts);
        assert_eq!(threads(None, 2).unwrap(), in_bursts);
        assert_eq!(threads(None, 3).unwrap(), always(3));
        assert_eq!(threads(None, 64).unwrap(), always(4));
        let with_jobs = |cpus, jobs| spawn_threads(None, cpus, jobs).unwrap();
        assert_eq!(with_jobs(2, 3), always(2), "more jobs in flight than CPUs");
        assert_eq!(with_jobs(2, 8), always(2));
        assert_eq!(with_jobs(2, 1), in_bursts);
        assert_eq!(with_jobs(1, 8), in_bursts, "one CPU overlaps no spawns");
        assert_eq!(with_jobs(4, 1), always(4));
        assert_eq!(
            spawn_threads(Some(OsStr::new("1")), 2, 8).unwrap(),
            always(1),
            "asked for"
        );
        assert_eq!(threads(Some(""), 8).unwrap(), always(4), "empty is unset");
        assert_eq!(threads(Some("2"), 2).unwrap(), always(2));
        assert_eq!(threads(Some("0"), 64).unwrap(), always(0));
        assert_eq!(threads(Some("16"), 1).unwrap(), always(16));
        for bad in ["17", "-1", "two", "1.5", "+2", " 2", "2 ", "0x2"] {
            let err = threads(Some(bad), 2).unwrap_err().to_string();
            assert!(
                err.contains("LANES_SPAWN_THREADS") && err.contains(bad),
                "{err}"
            );
        }
    }
}
