//! The command line as clap sees it: flags, their help text and examples. No logic here.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::settings::{BackendKind, Coalesce, ContainmentMode, OnFull, OutputMode, When};

use crate::count::{count_u32, count_u64, times_u32};
use crate::duration::parse_duration;

const EXAMPLES: &str = "\
Examples:
  # Jobs as KEY<TAB>COMMAND lines: per key one at a time, at most 4 at once
  printf 'db\\tsleep 1; echo migrated\\nweb\\techo built\\ndb\\techo seeded\\n' | lanes -j 4

  # A TOML manifest, with a JSON Lines report for CI
  lanes --max-concurrent 8 --report report.jsonl examples/deploy/deploy.toml

  # The report on stdout (job output goes to stderr), failed jobs with jq
  lanes --json jobs.tsv | jq -c 'select(.type == \"job\" and .outcome != \"succeeded\")'

  # A trailing command, as with xargs: one argument per line, every line its own key
  ls *.gz | lanes -j 4 gzip -t

  # Files of one directory one at a time, NUL-separated names, arguments on the command line
  find . -name '*.png' -print0 | lanes -0 --key '{//}' -- optipng {}
  lanes echo ::: a b c

  # A server that callers wake: the run's options, jobs from `lanes submit`
  lanes serve -j 4 --report served.jsonl &
  lanes submit deploy-api -- ./deploy.sh api";

const USAGE: &str = "lanes [OPTIONS] [FILE]
       lanes [OPTIONS] [--] COMMAND [ARGS]... [::: ARG...]
       lanes [OPTIONS] ::: ARG...
       lanes serve [OPTIONS]";

/// Tasks besides running jobs (`lanes TASK …`); a file of jobs named like one is given as
/// `./NAME`. Each task's options, and its help (the doc comment of its options), are a struct of
/// their own, so that a task's command line is parsed with its own definition alone
/// ([`crate::trailing_command::parse_task`]). A variant has no doc comment of its own: clap
/// would show it instead of its struct's.
#[derive(Debug, clap::Subcommand)]
#[allow(missing_docs)]
pub enum Task {
    Locks(LocksArgs),
    Submit(SubmitArgs),
    Cancel(CancelArgs),
    Status(StatusArgs),
    Set(SetArgs),
    Drain(DrainArgs),
    Close(CloseArgs),
    Timeline(TimelineArgs),
}

/// List the keys held in a lock directory (--lock-dir) or a fleet's database
/// (--coordinate), their holders and their waiters.
#[derive(Debug, clap::Args)]
pub struct LocksArgs {
    /// The lock directory.
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// The fleet's database (also `LANES_COORDINATE`).
    #[arg(long, value_name = "URL", conflicts_with = "dir",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub coordinate: Option<String>,
    /// The fleet's namespace in the database.
    #[arg(long, value_name = "NAME", default_value = "lanes",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub namespace: String,
}

/// Submit a job to a `lanes serve` (KEY -- COMMAND...), or without KEY one job per stdin
/// line of KEY<TAB>COMMAND. Exit status: 0 started, 1 failed (its process could not start),
/// 10 queued, 11 coalesced, 12 rejected, 13 closed, 2 error; with --wait, the job's own.
#[derive(Debug, clap::Args)]
pub struct SubmitArgs {
    /// The server's socket (default: LANES_SOCKET, else $XDG_RUNTIME_DIR/lanes/lanes.sock,
    /// else /tmp/lanes-UID/lanes.sock).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Print the answers (and with --wait the record) as JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Wait for the job's record and exit as the job did (0, its exit status, 128 + the
    /// signal, or 1).
    #[arg(long)]
    pub wait: bool,
    /// The job's key.
    #[arg(value_name = "KEY")]
    pub key: Option<String>,
    /// The command: one word is shell text, several a program and its arguments.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Drop a key's waiting jobs and stop its running job (reason `cancelled`) on a `lanes
/// serve`; returns once that job's processes are gone.
#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    /// The server's socket.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
    /// The key.
    #[arg(value_name = "KEY")]
    pub key: String,
}

/// What a `lanes serve` runs and what waits, its counters and its cap.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The server's socket.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Change a `lanes serve`'s cap on running jobs; lowering it stops nothing.
#[derive(Debug, clap::Args)]
pub struct SetArgs {
    /// The server's socket.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
    /// The new cap.
    #[arg(short = 'j', long = "max-concurrent", value_name = "N", value_parser = count_u32, allow_negative_numbers = true)]
    pub max_concurrent: u32,
}

/// Make a `lanes serve` admit nothing more, finish what it admitted and end; returns once
/// it has written its report.
#[derive(Debug, clap::Args)]
pub struct DrainArgs {
    /// The server's socket.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Make a `lanes serve` admit nothing more, stop every job (reason `shutdown`) and end;
/// returns once it has written its report.
#[derive(Debug, clap::Args)]
pub struct CloseArgs {
    /// The server's socket.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Print the answer as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Draw a run from its report (--report): what ran when, in which slot, and why every job
/// waited; as an HTML page, a Chrome trace (JSON, for Perfetto) or Markdown with a Mermaid
/// Gantt chart.
#[derive(Debug, clap::Args)]
pub struct TimelineArgs {
    /// The report of the run (JSON Lines, as --report writes it; one still being written
    /// will do; `-`: stdin).
    #[arg(value_name = "REPORT")]
    pub report: PathBuf,
    /// The run's events file (--events; `-`: stdin): jobs still running or waiting, which
    /// have no record yet, are drawn from it.
    #[arg(long, value_name = "EVENTS")]
    pub events: Option<PathBuf>,
    /// Where to write the timeline (`-`: stdout).
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: PathBuf,
    /// html, json (Chrome Trace Event format) or md (Mermaid); by default from OUT's
    /// extension (.html/.htm, .json, .md).
    #[arg(long, value_name = "FORMAT", value_parser = ["html", "json", "md"])]
    pub format: Option<String>,
}

/// Run keyed shell jobs through per-key lanes: at most one job of a key in flight, a key's jobs
/// in order, all under a global cap, with turn timeouts, clean Ctrl-C and a JSON Lines report.
///
/// COMMAND [ARGS]... after the options (after `--`, or without it when COMMAND is not an
/// existing file) runs once per input line with the line as its argument, as xargs does: the
/// input is then one argument per line, and every distinct line its own key unless --key says
/// otherwise. `{}` and the other placeholders of --command work in ARGS; one word is shell
/// text, several words a program and its arguments, each passed as it is. Words after `:::`
/// are the input arguments instead of stdin.
#[derive(Debug, Parser)]
#[command(
    name = "lanes",
    version,
    after_help = EXAMPLES,
    max_term_width = 100,
    args_conflicts_with_subcommands = true,
    override_usage = USAGE,
    args_override_self = true,
    // Unstyled, so that an error quoting an argument can show its escape sequences escaped
    // (see `trailing_command::plain_error`), told apart from styles there are none of.
    styles = clap::builder::Styles::plain()
)]
pub struct Cli {
    /// Another task than running jobs.
    #[command(subcommand)]
    pub task: Option<Task>,

    /// Jobs to run: a file of KEY<TAB>COMMAND lines, or a TOML manifest when the name ends in
    /// `.toml`. Without FILE, or with `-`, lines are read from stdin.
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,

    /// The trailing command's words (`lanes [OPTIONS] -- COMMAND [ARGS]...`).
    #[arg(skip)]
    pub trailing_command: Option<Vec<String>>,

    /// The trailing command came after `--` (it was never FILE).
    #[arg(skip)]
    pub trailing_after_dashes: bool,

    /// `lanes serve [OPTIONS]`: jobs come from the socket, not from stdin.
    #[arg(skip)]
    pub serve: bool,

    /// With `lanes serve`: the socket to listen on (default: LANES_SOCKET, else
    /// $XDG_RUNTIME_DIR/lanes/lanes.sock, else /tmp/lanes-UID/lanes.sock, in a directory only
    /// this user can enter).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// With `lanes serve`: the journal of admitted jobs (default: beside the socket, named
    /// after it, `lanes.journal`). A server started on a journal an earlier one left re-admits
    /// the jobs that have no record yet, in their order.
    #[arg(long, value_name = "PATH")]
    pub journal: Option<PathBuf>,

    /// With `lanes serve`: run again the jobs the journal says were running when the earlier
    /// server ended without recording them, instead of recording them interrupted, reason
    /// `server_lost`.
    #[arg(long, overrides_with = "no_requeue_lost")]
    pub requeue_lost: bool,

    /// Undo --requeue-lost.
    #[arg(long, overrides_with = "requeue_lost")]
    pub no_requeue_lost: bool,

    /// The words after `:::`: the input arguments, instead of stdin (bytes: input need not
    /// be text).
    #[arg(skip)]
    pub arguments: Option<Vec<Vec<u8>>>,

    /// Read the input arguments from FILE, one per line (per NUL-terminated record with -0),
    /// instead of stdin.
    #[arg(short = 'a', long, value_name = "FILE", conflicts_with_all = ["file", "manifest"])]
    pub arg_file: Option<PathBuf>,

    /// Records end with a NUL byte instead of a newline (`find -print0`, `xargs -0`), so that
    /// arguments and commands may hold newlines.
    #[arg(short = '0', long, overrides_with = "no_null")]
    pub null: bool,

    /// Records end with a newline (undoes -0).
    #[arg(long, overrides_with = "null")]
    pub no_null: bool,

    /// Compute each job's key from its input record (then a whole record, no tab): `{}` the
    /// record, `{1}`, `{2}`... its columns (--colsep), `{/}` basename, `{//}` dirname, `{.}`
    /// without extension, `{/.}` basename without extension. Default with a trailing command,
    /// `:::` or -a: `{}`, every distinct record its own key.
    #[arg(long, value_name = "TEMPLATE")]
    pub key: Option<String>,

    /// Print what would run, per key in order, with its round, slot and batch (as if every
    /// job took the same time and succeeded), then exit 0: nothing runs, no report is written.
    #[arg(long, overrides_with = "no_dry_run")]
    pub dry_run: bool,

    /// Undo --dry-run.
    #[arg(long, overrides_with = "dry_run")]
    pub no_dry_run: bool,

    /// Split records into the columns `{1}`, `{2}`... at the string SEP (not a regex).
    #[arg(long, value_name = "SEP")]
    pub colsep: Option<String>,

    /// Read FILE as a TOML manifest whatever its name.
    #[arg(long, value_name = "FILE", conflicts_with = "file")]
    pub manifest: Option<PathBuf>,

    /// At most N jobs in flight overall [default: the number of CPUs].
    #[arg(short = 'j', long, value_name = "N", value_parser = count_u32, allow_negative_numbers = true)]
    pub max_concurrent: Option<u32>,

    /// Per-job turn timeout: seconds (`20`, `0.5`) or units (`250ms`, `10m`). Past it the job's
    /// process group gets SIGTERM, then SIGKILL after the grace period.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_negative_numbers = true)]
    pub timeout: Option<Duration>,

    /// Grace period between SIGTERM (or the forwarded signal) and SIGKILL [default: 5s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_negative_numbers = true)]
    pub grace: Option<Duration>,

    /// How long to wait, after a job's shell exits, for the rest of its process group and for
    /// EOF on its pipes before the leftovers are terminated and the job marked `leaked`.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, default_value = "200ms", allow_negative_numbers = true)]
    pub leak_window: Duration,

    /// What holds a job's processes together: `cgroup` (a cgroup v2 per job: nothing escapes by
    /// changing process group or session), `process-group` (each job's own process group), or
    /// `auto` (cgroup where lanes can create one, else process group).
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub containment: ContainmentMode,

    /// Shell that runs each command as `SHELL -c COMMAND` [default: sh].
    #[arg(long, value_name = "SHELL")]
    pub shell: Option<String>,

    /// At most N jobs admitted but not yet started, across all keys [default: 10000].
    #[arg(long, value_name = "N", value_parser = count_u64, allow_negative_numbers = true)]
    pub max_queued: Option<u64>,

    /// What a new job meets when --max-queued jobs wait: `wait` pauses reading input until
    /// there is room (backpressure); `reject` records it as rejected (queue_full) unless it
    /// starts at once (its key idle, a slot free) [default: wait].
    #[arg(long, value_name = "POLICY", value_enum)]
    pub on_full: Option<OnFull>,

    /// Coalesce waiting jobs per key: `latest` keeps at most one running and one pending job
    /// per key, a newer job replacing the pending one (recorded as superseded) [default: off].
    #[arg(long, value_name = "MODE", value_enum)]
    pub coalesce: Option<Coalesce>,

    /// A newer job of a key also interrupts the key's running job (superseded), then starts.
    /// Implies --coalesce latest.
    #[arg(long, overrides_with = "no_cancel_in_progress")]
    pub cancel_in_progress: bool,

    /// Undo --cancel-in-progress (and a manifest's `cancel_in_progress = true`).
    #[arg(long, overrides_with = "cancel_in_progress")]
    pub no_cancel_in_progress: bool,

    /// Re-run a failed job up to N more times, first in its own lane [default: 0].
    #[arg(long, value_name = "N", value_parser = times_u32, allow_negative_numbers = true)]
    pub retries: Option<u32>,

    /// Pause before each retry; the key's later jobs wait behind it [default: 0s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_negative_numbers = true)]
    pub retry_delay: Option<Duration>,

    /// After the first failed job, start nothing more and stop the running jobs.
    #[arg(long, overrides_with = "no_fail_fast")]
    pub fail_fast: bool,

    /// Undo --fail-fast (and a manifest's `fail_fast = true`).
    #[arg(long, overrides_with = "fail_fast")]
    pub no_fail_fast: bool,

    /// Bind each key to the slot its first job ran in; later jobs of the key wait for that
    /// slot (`LANES_SLOT`), for per-slot resources such as a GPU or a port.
    #[arg(long, overrides_with = "no_sticky_slots")]
    pub sticky_slots: bool,

    /// Share key lanes with every lanes process given the same DIR (created when missing): at
    /// most one job per key in flight across all of them, first come first served. Also
    /// `LANES_LOCK_DIR`. A job holds its key (descriptor 3) for as long as it lives.
    #[arg(long, value_name = "DIR")]
    pub lock_dir: Option<PathBuf>,

    /// With --lock-dir: at most N jobs in flight across every process sharing DIR, on top of
    /// each process's own -j. A job holds its shared slot on descriptor 4.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024), allow_negative_numbers = true)]
    pub shared_max_concurrent: Option<u32>,

    /// Share key lanes with every lanes process on every host given the same PostgreSQL URL
    /// (`postgres://USER@HOST:PORT/DB`; also `LANES_COORDINATE`, and the `PG*` environment
    /// variables and ~/.pgpass for what the URL leaves out): at most one job per key in flight
    /// across the fleet, first come first served. A job holds its key's database session
    /// (descriptor 3) for as long as it lives.
    #[arg(long, value_name = "URL", conflicts_with = "lock_dir",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub coordinate: Option<String>,

    /// With --coordinate: the fleet's name in the database, so that several fleets may share
    /// one [default: lanes].
    #[arg(long, value_name = "NAME",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub namespace: Option<String>,

    /// With --coordinate: write every job record into the database's `lanes_records` table
    /// as well (the report is unchanged), so that the fleet has one history to query.
    #[arg(long, overrides_with = "no_coordinate_records")]
    pub coordinate_records: bool,

    /// Undo --coordinate-records.
    #[arg(long, overrides_with = "coordinate_records")]
    pub no_coordinate_records: bool,

    /// With --coordinate: how this host is named to the others (`lanes locks`, `lock_holder`)
    /// [default: the host name].
    #[arg(long, value_name = "NAME",
          value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub host_id: Option<String>,

    /// Undo --sticky-slots (and a manifest's `sticky_slots = true`).
    #[arg(long, overrides_with = "sticky_slots")]
    pub no_sticky_slots: bool,

    /// At most W of weight admitted but not yet started, across all keys (each job counts its
    /// weight, 1 when it declares none), on top of --max-queued; --on-full applies to both
    /// [default: no bound].
    #[arg(long, value_name = "W", value_parser = count_u64, allow_negative_numbers = true)]
    pub max_queued_weight: Option<u64>,

    /// Every job's share of -j unless the manifest gives its own `weight`: a job of weight W
    /// starts only when W units of -j are free [default: 1].
    #[arg(long, value_name = "W", value_parser = count_u32, allow_negative_numbers = true)]
    pub weight: Option<u32>,

    /// A named resource of the run (repeatable; overrides the manifest's `[resources]` entry
    /// of that name): `NAME=N` an amount (`cpu=8`, `mem=32G`: K, M, G, T, P are powers of 1024)
    /// or `NAME=ID,ID,…` named units (`gpu=0,1,2,3`; one unit: `port=8001,`).
    #[arg(long, value_name = "NAME=SPEC")]
    pub resource: Vec<String>,

    /// What every job needs of the run's resources unless the manifest gives its own `needs`:
    /// `NAME=N,…` (`gpu=1,mem=8G`). A job starts only when all of it is free, and holds it
    /// until its process group is empty; named units are handed over as
    /// `LANES_RESOURCE_<NAME>` and `{res.NAME}`.
    #[arg(long, value_name = "NAME=N,…")]
    pub needs: Option<String>,

    /// Once the first waiting key whose job does not fit (its weight or a resource is short)
    /// has waited D, what it needs is set aside for it: later keys start only in what is free
    /// beyond it, so it is not starved. 0s sets aside at once (strict order between keys)
    /// [default: 0s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_negative_numbers = true)]
    pub reserve_after: Option<Duration>,

    /// Treat the text after the tab as an argument and run TEMPLATE for it: `{}` is the
    /// argument (a batch's arguments), `{key}` the key, `{seq}` and `{slot}` numbers; every
    /// substitution is shell-quoted. Without `{}`, the argument is appended. `{{`/`}}` are
    /// literal braces.
    #[arg(long, value_name = "TEMPLATE")]
    pub command: Option<String>,

    /// With --command: merge up to N waiting jobs of one lane into one run; `{}` expands to
    /// all their arguments, in lane order [default: 1].
    #[arg(long, value_name = "N", value_parser = count_u64, allow_negative_numbers = true)]
    pub batch_size: Option<u64>,

    /// With --command: at most B bytes of quoted arguments in one batch (a batch always holds
    /// at least one job); without --batch-size, batches by bytes alone, as `xargs -s` [default:
    /// 100000, under Linux's 128 KiB limit on one argument; more than that limit, less the
    /// template's own text, is refused].
    #[arg(
        long,
        value_name = "B",
        value_parser = crate::count::argument_bytes,
        allow_negative_numbers = true
    )]
    pub batch_bytes: Option<u64>,

    /// With --command: a lane whose batch is not full waits until its oldest job has waited D
    /// (a debounce for streamed input); a full batch starts at once [default: 0s].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, allow_negative_numbers = true)]
    pub batch_delay: Option<Duration>,

    /// Skip every job that succeeded (or was skipped so) in an earlier report (matched by key,
    /// command and occurrence number); each gets a `skipped` record. A torn last line in REPORT
    /// is ignored; a file that is not a lanes report is refused. REPORT may be the same file as
    /// --report: it is read before the new report is written.
    #[arg(long, value_name = "REPORT")]
    pub resume: Option<PathBuf>,

    /// Where jobs run: `local` (here, each in a process group of its own) or `slurm` (each
    /// under `srun` on a Slurm cluster, one job per key at a time cluster-wide through
    /// `--dependency=singleton`).
    #[arg(long, value_name = "BACKEND", value_enum, default_value_t = BackendKind::Local)]
    pub backend: BackendKind,

    /// Slurm: job names are PREFIX.HASH(key); runs sharing a prefix share their keys' lanes on
    /// the cluster (default: lanes).
    #[arg(long, value_name = "PREFIX")]
    pub slurm_name_prefix: Option<String>,

    /// Slurm: every job takes one of the cluster license NAME (`--licenses=NAME:1`), a
    /// cluster-wide cap.
    #[arg(long, value_name = "NAME")]
    pub slurm_license: Option<String>,

    /// Slurm: `srun --partition`.
    #[arg(long, value_name = "PARTITION")]
    pub slurm_partition: Option<String>,

    /// Slurm: `srun --account`.
    #[arg(long, value_name = "ACCOUNT")]
    pub slurm_account: Option<String>,

    /// Slurm: `srun --qos`.
    #[arg(long, value_name = "QOS")]
    pub slurm_qos: Option<String>,

    /// Write JSON Lines lifecycle events (queued with `ahead`, started, ended) to FILE.
    #[arg(long, value_name = "FILE")]
    pub events: Option<PathBuf>,

    /// Validate the whole input before anything starts; exit 2 on the first invalid line.
    #[arg(long, overrides_with = "no_strict")]
    pub strict: bool,

    /// Undo --strict.
    #[arg(long, overrides_with = "strict")]
    pub no_strict: bool,

    /// Write the JSON Lines report to FILE.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,

    /// Write the JSON Lines report to stdout; all job output then goes to stderr.
    #[arg(long, overrides_with = "no_json")]
    pub json: bool,

    /// Undo --json.
    #[arg(long, overrides_with = "json")]
    pub no_json: bool,

    /// How job output is shown.
    #[arg(long, value_name = "MODE", value_enum, default_value_t = OutputMode::Prefixed)]
    pub output: OutputMode,

    /// With --output grouped: print the blocks in input order (a block waits for the blocks of
    /// earlier jobs).
    #[arg(long, overrides_with = "no_keep_order")]
    pub keep_order: bool,

    /// Undo --keep-order.
    #[arg(long, overrides_with = "keep_order")]
    pub no_keep_order: bool,

    /// Colour the key prefixes: `auto` on a terminal unless NO_COLOR is set or CI is true.
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = When::Auto)]
    pub color: When,

    /// The live display on stderr: `auto` when stderr is a terminal, unless NO_COLOR is set,
    /// CI is true or --color never.
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = When::Auto)]
    pub progress: When,

    /// Write JUnit XML to FILE when the run ends: a test suite per key, a test case per job.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,

    /// Also write each job's stdout and stderr to files of their own under DIR (created when
    /// missing), named from the seq and the escaped key: `000042-KEY.stdout`.
    /// A DIR that holds files is refused, so that two runs never mix, unless --results-clean.
    #[arg(long, value_name = "DIR")]
    pub results: Option<PathBuf>,

    /// With --results: first remove the files an earlier run wrote in DIR (anything else
    /// there is refused).
    #[arg(long, requires = "results", overrides_with = "no_results_clean")]
    pub results_clean: bool,

    /// Undo --results-clean.
    #[arg(long, overrides_with = "results_clean")]
    pub no_results_clean: bool,
}
