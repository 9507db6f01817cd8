//! The TOML manifest: parsing and validation into plain job specs; nothing runs here.
//!
//! A manifest holds run-level settings (`max_concurrent`, `timeout`, `grace`, `shell`,
//! `[env]`) and any number of `[[job]]` tables (`key`, `cmd`, `timeout`, `cwd`, `env`,
//! `rank`). Everything is checked here: unknown fields, wrong types, missing or empty
//! values and bad durations are reported as `PATH:LINE:COLUMN: MESSAGE`, pointing at the
//! offending key or value.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use toml::Spanned;

use crate::core::Resource;
use crate::duration::{parse_duration, seconds_to_duration};
use crate::resources::{check_name, is_size, parse_amount, parse_units_at, Need};
use crate::settings::{Coalesce, OnFull};

/// Run-level settings from the manifest; `None` where the manifest does not set them.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ManifestSettings {
    /// Most jobs in flight at once; at least 1.
    pub max_concurrent: Option<usize>,
    /// Per-job turn timeout.
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when a job is stopped.
    pub grace: Option<Duration>,
    /// Shell that runs each `cmd` (the runner's default is `sh`); never empty.
    pub shell: Option<String>,
    /// `[env]`, in key order.
    pub env: Vec<(String, String)>,
    /// Most jobs admitted but not started; at least 1.
    pub max_queued: Option<usize>,
    /// What a job meets when the queue is full.
    pub on_full: Option<OnFull>,
    /// Per-key coalescing.
    pub coalesce: Option<Coalesce>,
    /// Whether a newer job of a key interrupts the running one.
    pub cancel_in_progress: Option<bool>,
    /// How many more times a failed job runs.
    pub retries: Option<u32>,
    /// Pause before a retry.
    pub retry_delay: Option<Duration>,
    /// Whether the first failure stops the run.
    pub fail_fast: Option<bool>,
    /// Whether keys are bound to stable slots.
    pub sticky_slots: Option<bool>,
    /// The directory whose key lanes are shared with other processes (relative to the
    /// manifest's directory).
    pub lock_dir: Option<PathBuf>,
    /// Most jobs in flight across every process sharing `lock_dir`; 1 to 1024.
    pub shared_max_concurrent: Option<usize>,
    /// The PostgreSQL URL whose key lanes are shared by a fleet of hosts (`--coordinate`).
    pub coordinate: Option<String>,
    /// The fleet's namespace in that database (`--namespace`).
    pub namespace: Option<String>,
    /// The `--command` template: each job's `cmd` is then its argument.
    pub command: Option<String>,
    /// Most jobs per batch; at least 1.
    pub batch_size: Option<usize>,
    /// Most argument bytes per batch; at least 1.
    pub batch_bytes: Option<usize>,
    /// Debounce before a partial batch runs.
    pub batch_delay: Option<Duration>,
    /// `[resources]`, in name order, each with where it is written.
    pub resources: Vec<Located<Resource>>,
    /// Where the settings that can conflict with others are written (their values): key →
    /// (1-based line, 1-based column), for errors found once the command line is merged in.
    pub places: BTreeMap<&'static str, (u64, u64)>,
}

/// A value and where the manifest writes it (1-based line and column), for errors found
/// once the command line is merged in.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Located<T> {
    /// The value.
    pub value: T,
    /// 1-based line.
    pub line: u64,
    /// 1-based column, in characters.
    pub column: u64,
}

/// One of a job's `needs`, with where its name and its amount are written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NeedAt {
    /// The need (its name not yet checked against the run's resources).
    pub need: Need,
    /// Where its name is written: 1-based line and column.
    pub name_at: (u64, u64),
    /// Where its amount is written: 1-based line and column.
    pub amount_at: (u64, u64),
}

/// One `[[job]]` table.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ManifestJob {
    /// 1-based line of the `[[job]]` header.
    pub line: u64,
    /// The lane key; never empty.
    pub key: String,
    /// The shell command; never empty or only whitespace.
    pub cmd: String,
    /// Overrides the run's timeout for this job.
    pub timeout: Option<Duration>,
    /// Already resolved against the manifest's directory.
    pub cwd: Option<PathBuf>,
    /// The job's `env`, in key order.
    pub env: Vec<(String, String)>,
    /// Order within the lane: lower runs first, ties keep file order; 0 when not set.
    pub rank: i64,
    /// Its share of the cap (`weight`, ≥ 1), when set.
    pub weight: Option<Located<u32>>,
    /// Its `needs`, in name order, when set (names not yet checked against the run's
    /// resources).
    pub needs: Option<Located<Vec<NeedAt>>>,
    /// Its weight and needs resolved against the run's resources and cap (or the run's
    /// default); set when the command line is merged in.
    pub resolved_needs: Option<std::sync::Arc<crate::core::Needs>>,
}

/// A parsed and validated manifest.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Manifest {
    /// Run-level settings.
    pub settings: ManifestSettings,
    /// In file order.
    pub jobs: Vec<ManifestJob>,
}

/// Errors: `Display` gives `PATH:LINE:COLUMN: MESSAGE`, or `PATH: MESSAGE` for read errors.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ManifestError {
    /// The file could not be read: missing, not permitted, a directory, not UTF-8.
    ///
    /// The OS error is part of the message (and deliberately not a `source`, so that
    /// error chains do not print it twice).
    #[error("{}: cannot read manifest: {error}", path.display())]
    Read {
        /// The path as given to [`load`].
        path: PathBuf,
        /// The error from the OS.
        error: std::io::Error,
    },
    /// The text is not a valid manifest: TOML syntax, an unknown field, a wrong type, a
    /// missing field, or a value that fails a check (empty key, bad duration, ...).
    #[error("{}:{line}:{column}: {message}", path.display())]
    Invalid {
        /// The path as given to [`load`] or [`parse`].
        path: PathBuf,
        /// 1-based line of the offending place.
        line: u64,
        /// 1-based column (in characters) of the offending place.
        column: u64,
        /// What is wrong, for a person.
        message: String,
    },
}

/// Whether `path` names a manifest by its name alone: it ends in `.toml`, in any case
/// (`jobs.toml`, `JOBS.TOML`, and a file named `.toml` itself).
pub(crate) fn is_manifest_name(path: &Path) -> bool {
    let name = path.as_os_str().as_encoded_bytes();
    name.len() >= 5 && name[name.len() - 5..].eq_ignore_ascii_case(b".toml")
}

/// Reads and validates the manifest at `path`.
///
/// # Errors
/// [`ManifestError::Read`] when the file cannot be read as UTF-8 text;
/// [`ManifestError::Invalid`] as for [`parse`].
pub(crate) fn load(path: &Path) -> Result<Manifest, ManifestError> {
    let read = if path == Path::new("-") {
        // `--manifest -`: the manifest on stdin.
        let mut bytes = Vec::new();
        match crate::closed_stdin::refusal() {
            Some(why) => Err(std::io::Error::other(format!("stdin: {why}"))),
            None => std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes).map(|_| bytes),
        }
    } else if let Some(err) = crate::closed_stdin::named_by(path) {
        Err(err)
    } else {
        std::fs::read(path)
    };
    let bytes = read.map_err(|error| ManifestError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    match String::from_utf8(bytes) {
        Ok(text) => parse(path, &text),
        Err(err) => {
            // Where the first byte that is not UTF-8 is, as people count lines and columns.
            let valid = err.utf8_error().valid_up_to();
            let before = String::from_utf8_lossy(&err.as_bytes()[..valid]);
            let before = before.strip_prefix('\u{feff}').unwrap_or(&before);
            let (line, column) = LineIndex::new(before).at(before.len());
            Err(ManifestError::Invalid {
                path: path.to_path_buf(),
                line,
                column,
                message: "a byte that is not UTF-8: a manifest is UTF-8 text".to_owned(),
            })
        }
    }
}

/// Parses manifest `text` as if read from `path` (used by `load` and by tests).
///
/// `path` names the file in errors, and its parent directory (`.` when it has none) is
/// the base for relative `cwd` values. Nothing on disk is touched.
///
/// # Errors
/// [`ManifestError::Invalid`] with the line and column of the first problem found.
pub(crate) fn parse(path: &Path, text: &str) -> Result<Manifest, ManifestError> {
    // Editors do not show a byte order mark; leave it out so columns match what people see.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines = LineIndex::new(text);
    let invalid = |offset: usize, message: String| {
        let (line, column) = lines.at(offset);
        ManifestError::Invalid {
            path: path.to_path_buf(),
            line,
            column,
            message,
        }
    };
    let raw: RawManifest = toml::from_str(text).map_err(|err| {
        // Without a span the parser is speaking of the document as a whole.
        let offset = err.span().map_or(0, |span| span.start);
        invalid(offset, explained(text, offset, err.message()))
    })?;
    let base = manifest_dir(path);
    raw.validate(&lines, &base)
        .map_err(|(offset, message)| invalid(offset, message))
}

/// The TOML parser's `message` for the problem at byte `offset` of `text`, in words that name
/// the setting and say what to write where the parser's do not: the setting of a value of the
/// wrong type or too large, a date-time (a "map" to the parser), a NUL byte, a run setting
/// written after the first `[[job]]` (it then belongs to that job), `[job]` for `[[job]]`.
fn explained(text: &str, offset: usize, message: &str) -> String {
    // One line (`invalid table header` and its reason were two).
    let message = &message.trim_end().replace('\n', ": ");
    let before = text.get(..offset).unwrap_or_default();
    let line = &before[before.rfind('\n').map_or(0, |newline| newline + 1)..];
    // `name = ` before a value: the setting the value is for (the last of an inline table).
    let name = line
        .trim_end()
        .strip_suffix('=')
        .and_then(|before| before.rsplit([',', '{']).next())
        .map(str::trim)
        .filter(|name| !name.is_empty());
    let named = |message: String| match name {
        Some(name) => format!("`{name}`: {message}"),
        None => message,
    };
    let at = text.get(offset..).unwrap_or_default();
    if at.starts_with('\0') {
        return "a NUL byte: a manifest is text".to_owned();
    }
    if message.starts_with("number too large to fit") {
        return named(format!("{message}: a TOML integer is at most {}", i64::MAX));
    }
    if message == "wanted string or table" {
        return named("invalid type: expected a string or a table".to_owned());
    }
    if let Some(rest) = message.strip_prefix("invalid type: map, ") {
        // A date-time is a table to the parser.
        let date = at.len() >= 5
            && at.as_bytes()[..4].iter().all(u8::is_ascii_digit)
            && at.as_bytes()[4] == b'-';
        if date {
            return named(format!("invalid type: date-time, {rest}"));
        }
        if rest == "expected a sequence" && line.trim().is_empty() && at.starts_with("[job]") {
            return "`[job]` is one table: each job is an element of the array `job`, written \
                    `[[job]]`"
                .to_owned();
        }
    }
    if message.starts_with("invalid type:") {
        // TOML's word for what serde calls a map.
        let message = message
            .replace(", expected a map", ", expected a table")
            .replace("invalid type: map,", "invalid type: table,");
        return named(message);
    }
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let field = rest.split('`').next().unwrap_or_default();
        let in_job = rest.contains("expected one of `key`, `cmd`");
        if in_job && RUN_SETTINGS.contains(&field) {
            return format!(
                "{message}; `{field}` is a run setting: write it before the first `[[job]]` \
                 (after it, a line belongs to that job)"
            );
        }
        if !in_job && ["jobs", "Job", "task", "tasks"].contains(&field) {
            return format!("`{field}` is no setting: each job is written `[[job]]`");
        }
    }
    if message.starts_with("expected \"") {
        // A word of a setting's own (`coalesce`, `on_full`), as on the command line.
        return named(message.to_owned());
    }
    message.to_owned()
}

/// The manifest's top-level settings ([`RawManifest`]'s fields, `job` aside).
const RUN_SETTINGS: [&str; 22] = [
    "max_concurrent",
    "timeout",
    "grace",
    "shell",
    "env",
    "max_queued",
    "on_full",
    "coalesce",
    "cancel_in_progress",
    "retries",
    "retry_delay",
    "fail_fast",
    "sticky_slots",
    "lock_dir",
    "shared_max_concurrent",
    "coordinate",
    "namespace",
    "command",
    "batch_size",
    "batch_bytes",
    "batch_delay",
    "resources",
];

/// A failed check: byte offset into the text, and the message.
type Problem = (usize, String);

/// Where each line of a manifest's text starts, found once, so that the place of every job and
/// setting is found by a binary search rather than a scan from the top of the file (a scan per
/// job made a manifest's load grow with jobs × file size).
struct LineIndex<'t> {
    text: &'t str,
    /// Byte offset of each line's first byte; the first is 0.
    starts: Vec<usize>,
}

impl<'t> LineIndex<'t> {
    fn new(text: &'t str) -> Self {
        let starts = std::iter::once(0)
            .chain(memchr::memchr_iter(b'\n', text.as_bytes()).map(|newline| newline + 1))
            .collect();
        LineIndex { text, starts }
    }

    /// Converts a byte offset in the text to a 1-based line and a 1-based column in
    /// characters. Offsets past the end (or inside a character) are clamped; never panics.
    fn at(&self, offset: usize) -> (u64, u64) {
        let bytes = self.text.as_bytes();
        let offset = offset.min(bytes.len());
        // The last line starting at or before `offset`; `starts[0]` is 0, so there is one.
        let line = self.starts.partition_point(|&start| start <= offset);
        let line_start = self.starts[line - 1];
        // Count characters by their first bytes (UTF-8 continuation bytes are 0b10xx_xxxx).
        let chars = bytes[line_start..offset]
            .iter()
            .filter(|&&b| b & 0xC0 != 0x80)
            .count();
        (to_u64(line), to_u64(chars + 1))
    }
}

fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// The directory relative `cwd` values are resolved against.
fn manifest_dir(path: &Path) -> PathBuf {
    crate::containing_dir::containing_dir(path).to_path_buf()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    max_concurrent: Option<Spanned<WholeNumber>>,
    timeout: Option<Spanned<RawDuration>>,
    grace: Option<Spanned<RawDuration>>,
    shell: Option<Spanned<String>>,
    #[serde(default)]
    env: RawEnv,
    max_queued: Option<Spanned<WholeNumber>>,
    on_full: Option<OnFull>,
    coalesce: Option<Spanned<Coalesce>>,
    cancel_in_progress: Option<Spanned<bool>>,
    retries: Option<Spanned<WholeNumber>>,
    retry_delay: Option<Spanned<RawDuration>>,
    fail_fast: Option<bool>,
    sticky_slots: Option<bool>,
    lock_dir: Option<Spanned<String>>,
    shared_max_concurrent: Option<Spanned<WholeNumber>>,
    coordinate: Option<Spanned<String>>,
    namespace: Option<Spanned<String>>,
    command: Option<Spanned<String>>,
    batch_size: Option<Spanned<WholeNumber>>,
    batch_bytes: Option<Spanned<WholeNumber>>,
    batch_delay: Option<Spanned<RawDuration>>,
    #[serde(default)]
    resources: BTreeMap<Spanned<String>, Spanned<RawStock>>,
    #[serde(default)]
    job: Vec<Spanned<RawJob>>,
}

/// A whole number setting within `min..=max`, or the problem with it.
fn bounded(
    value: Option<Spanned<WholeNumber>>,
    field: &str,
    min: i64,
    max: i64,
) -> Result<Option<i64>, Problem> {
    let Some(value) = value else {
        return Ok(None);
    };
    let span = value.span();
    let n = value.into_inner().0;
    if (min..=max).contains(&n) {
        Ok(Some(n))
    } else {
        Err((
            span.start,
            format!("`{field}` must be between {min} and {max}, not {n}"),
        ))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJob {
    key: Spanned<String>,
    cmd: Spanned<String>,
    timeout: Option<Spanned<RawDuration>>,
    cwd: Option<Spanned<String>>,
    #[serde(default)]
    env: RawEnv,
    #[serde(default)]
    rank: WholeNumber,
    weight: Option<Spanned<WholeNumber>>,
    // Not `Spanned` itself: a dotted key's table (`needs.gpu = 1`) has no span in the `toml`
    // crate and would be refused; its keys and values have theirs.
    needs: Option<BTreeMap<Spanned<String>, Spanned<RawAmount>>>,
}

/// An `env` table; `Spanned<String>` keys order by their text alone.
type RawEnv = BTreeMap<Spanned<String>, EnvValue>;

/// An `env` value: a string. Not `Spanned` itself: a dotted name (`A.B = "x"`) makes a table
/// that the `toml` crate gives no span, and `Spanned` would refuse it with a message about
/// spans; this says what is wrong instead (errors about the value point at its name).
struct EnvValue(String);

impl<'de> Deserialize<'de> for EnvValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EnvVisitor;

        impl<'de> Visitor<'de> for EnvVisitor {
            type Value = EnvValue;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<EnvValue, E> {
                Ok(EnvValue(text.to_owned()))
            }

            fn visit_map<A: de::MapAccess<'de>>(self, _: A) -> Result<EnvValue, A::Error> {
                Err(de::Error::custom(
                    "an environment variable's value is a string, not a table (a name with a \
                     dot is written in quotes: \"A.B\" = \"x\")",
                ))
            }
        }

        deserializer.deserialize_any(EnvVisitor)
    }
}

impl RawManifest {
    /// `lines` finds places in the parsed text (for job lines), `base` is the directory for
    /// relative `cwd`.
    fn validate(self, lines: &LineIndex<'_>, base: &Path) -> Result<Manifest, Problem> {
        // As `-j`: at most u32::MAX (a weight, a slot number and `LANES_SLOT` are u32).
        let max_concurrent = bounded(
            self.max_concurrent,
            "max_concurrent",
            1,
            i64::from(u32::MAX),
        )?
        .and_then(|n| usize::try_from(n).ok());
        let shell = match self.shell {
            None => None,
            Some(shell) => {
                check_text(&shell, "shell")?;
                Some(shell.into_inner())
            }
        };
        let mut places = BTreeMap::new();
        {
            let mut place = |key: &'static str, span: Option<std::ops::Range<usize>>| {
                if let Some(span) = span {
                    places.insert(key, lines.at(span.start));
                }
            };
            place("coalesce", self.coalesce.as_ref().map(Spanned::span));
            place(
                "cancel_in_progress",
                self.cancel_in_progress.as_ref().map(Spanned::span),
            );
            place("lock_dir", self.lock_dir.as_ref().map(Spanned::span));
            place("coordinate", self.coordinate.as_ref().map(Spanned::span));
            place("namespace", self.namespace.as_ref().map(Spanned::span));
            place(
                "shared_max_concurrent",
                self.shared_max_concurrent.as_ref().map(Spanned::span),
            );
            place("batch_size", self.batch_size.as_ref().map(Spanned::span));
            place("batch_bytes", self.batch_bytes.as_ref().map(Spanned::span));
            place("batch_delay", self.batch_delay.as_ref().map(Spanned::span));
            place("retry_delay", self.retry_delay.as_ref().map(Spanned::span));
            place("command", self.command.as_ref().map(Spanned::span));
        }
        let settings = ManifestSettings {
            places,
            max_concurrent,
            timeout: resolve_duration(self.timeout, "timeout")?,
            grace: resolve_duration(self.grace, "grace")?,
            shell,
            env: resolve_env(self.env)?,
            max_queued: bounded(self.max_queued, "max_queued", 1, i64::MAX)?
                .and_then(|n| usize::try_from(n).ok()),
            on_full: self.on_full,
            coalesce: self.coalesce.map(Spanned::into_inner),
            cancel_in_progress: self.cancel_in_progress.map(Spanned::into_inner),
            retries: bounded(self.retries, "retries", 0, i64::from(u32::MAX))?
                .and_then(|n| u32::try_from(n).ok()),
            retry_delay: resolve_duration(self.retry_delay, "retry_delay")?,
            fail_fast: self.fail_fast,
            sticky_slots: self.sticky_slots,
            lock_dir: match self.lock_dir {
                None => None,
                Some(dir) => {
                    check_text(&dir, "lock_dir")?;
                    Some(base.join(dir.into_inner()))
                }
            },
            shared_max_concurrent: bounded(
                self.shared_max_concurrent,
                "shared_max_concurrent",
                1,
                1024,
            )?
            .and_then(|n| usize::try_from(n).ok()),
            coordinate: match self.coordinate {
                None => None,
                Some(url) => {
                    check_text(&url, "coordinate")?;
                    Some(url.into_inner())
                }
            },
            namespace: match self.namespace {
                None => None,
                Some(namespace) => {
                    check_text(&namespace, "namespace")?;
                    Some(namespace.into_inner())
                }
            },
            command: match self.command {
                None => None,
                Some(command) => {
                    check_text(&command, "command")?;
                    // Checked here too, so that its error points into the file.
                    if let Err(err) = crate::template::Template::parse(command.get_ref()) {
                        let message = err.to_string().replace("in --command", "in `command`");
                        return Err((command.span().start, message));
                    }
                    Some(command.into_inner())
                }
            },
            batch_size: bounded(self.batch_size, "batch_size", 1, i64::MAX)?
                .and_then(|n| usize::try_from(n).ok()),
            // Its upper bound depends on the template: checked with the run's settings.
            batch_bytes: bounded(self.batch_bytes, "batch_bytes", 1, i64::MAX)
                .map_err(|(at, _)| {
                    let most = crate::arg_limit::max_argument_bytes();
                    let message = format!(
                        "`batch_bytes` must be a whole number of bytes from 1 to what one \
                         argument can hold ({most} here), less the template's own text"
                    );
                    (at, message)
                })?
                .and_then(|n| usize::try_from(n).ok()),
            batch_delay: resolve_duration(self.batch_delay, "batch_delay")?,
            resources: resolve_resources(self.resources, lines)?,
        };
        let jobs = self
            .job
            .into_iter()
            .map(|job| {
                let (line, _) = lines.at(job.span().start);
                job.into_inner().validate(line, base, lines)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Manifest { settings, jobs })
    }
}

impl RawJob {
    /// `line` is where the job's table (its `[[job]]` header) starts.
    fn validate(
        self,
        line: u64,
        base: &Path,
        lines: &LineIndex<'_>,
    ) -> Result<ManifestJob, Problem> {
        let key_at = self.key.span().start;
        if self.key.get_ref().is_empty() {
            return Err((self.key.span().start, "`key` must not be empty".to_string()));
        }
        check_no_nul(&self.key, "key")?;
        check_length(&self.key, "key", crate::arg_limit::max_key_bytes())?;
        check_text(&self.cmd, "cmd")?;
        check_length(&self.cmd, "cmd", crate::arg_limit::max_argument_bytes())?;
        let timeout = resolve_duration(self.timeout, "timeout")?;
        let cwd = match self.cwd {
            None => None,
            Some(cwd) => {
                if cwd.get_ref().is_empty() {
                    return Err((
                        cwd.span().start,
                        "`cwd` must not be empty (use \".\" for the manifest's directory)"
                            .to_string(),
                    ));
                }
                check_no_nul(&cwd, "cwd")?;
                let dir = Path::new(cwd.get_ref());
                Some(if dir.is_absolute() {
                    dir.to_path_buf()
                } else {
                    base.join(dir)
                })
            }
        };
        Ok(ManifestJob {
            line,
            key: self.key.into_inner(),
            cmd: self.cmd.into_inner(),
            timeout,
            cwd,
            env: resolve_env(self.env)?,
            rank: self.rank.0,
            weight: match self.weight {
                None => None,
                Some(weight) => {
                    let start = weight.span().start;
                    let n = weight.into_inner().0;
                    let value = u32::try_from(n).ok().filter(|&w| w >= 1).ok_or_else(|| {
                        (
                            start,
                            if n >= 1 {
                                format!(
                                    "`weight` {n} is too large (a weight is at most the cap, -j)"
                                )
                            } else {
                                format!("`weight` must be a whole number of at least 1, not {n}")
                            },
                        )
                    })?;
                    Some(located(lines, start, value))
                }
            },
            needs: match self.needs {
                None => None,
                Some(needs) => {
                    let start = needs
                        .keys()
                        .map(|name| name.span().start)
                        .min()
                        .unwrap_or(key_at);
                    let list = needs
                        .into_iter()
                        .map(|(name, amount)| {
                            check_name(name.get_ref()).map_err(|m| (name.span().start, m))?;
                            let at = amount.span().start;
                            let amount = amount.into_inner();
                            let sized = matches!(&amount, RawAmount::Text(t) if is_size(t));
                            let amount = amount
                                .resolve()
                                .map_err(|m| (at, format!("`needs.{}`: {m}", name.get_ref())))?;
                            Ok(NeedAt {
                                name_at: lines.at(name.span().start),
                                amount_at: lines.at(at),
                                need: Need {
                                    name: name.into_inner(),
                                    amount,
                                    sized,
                                },
                            })
                        })
                        .collect::<Result<Vec<_>, Problem>>()?;
                    Some(located(lines, start, list))
                }
            },
            resolved_needs: None,
        })
    }
}

fn located<T>(lines: &LineIndex<'_>, offset: usize, value: T) -> Located<T> {
    let (line, column) = lines.at(offset);
    Located {
        value,
        line,
        column,
    }
}

/// `[resources]`: `NAME = N` or `"32G"` (an amount), `NAME = ["0", "1"]` (named units).
fn resolve_resources(
    table: BTreeMap<Spanned<String>, Spanned<RawStock>>,
    lines: &LineIndex<'_>,
) -> Result<Vec<Located<Resource>>, Problem> {
    table
        .into_iter()
        .map(|(name, stock)| {
            check_name(name.get_ref()).map_err(|m| (name.span().start, m))?;
            let at = stock.span().start;
            let what = |m: String| (at, format!("`resources.{}`: {m}", name.get_ref()));
            let stock = match stock.into_inner() {
                RawStock::Amount(amount) => {
                    crate::core::Stock::Count(amount.resolve().map_err(what)?)
                }
                RawStock::Units(ids) => parse_units_at(ids.iter().map(|id| id.get_ref().as_str()))
                    .map_err(|(index, message)| {
                        // At the id it is about, not at the array.
                        let (_, message) = what(message);
                        let at = ids.get(index).map_or(at, |id| id.span().start);
                        (at, message)
                    })?,
            };
            Ok(located(
                lines,
                name.span().start,
                Resource {
                    name: std::sync::Arc::from(name.into_inner()),
                    stock,
                },
            ))
        })
        .collect()
}

/// Rejects a value that is empty or only whitespace, or contains NUL.
fn check_text(value: &Spanned<String>, field: &str) -> Result<(), Problem> {
    if value.get_ref().trim().is_empty() {
        return Err((
            value.span().start,
            format!("`{field}` must not be empty or only whitespace"),
        ));
    }
    check_no_nul(value, field)
}

/// Rejects a value containing NUL, which cannot be passed to a process.
fn check_no_nul(value: &Spanned<String>, what: &str) -> Result<(), Problem> {
    check_no_nul_at(value.get_ref(), value.span().start, what)
}

/// [`check_no_nul`] for `text`, pointing at byte offset `at` of the manifest.
fn check_no_nul_at(text: &str, at: usize, what: &str) -> Result<(), Problem> {
    if text.contains('\0') {
        return Err((at, format!("`{what}` must not contain a NUL character")));
    }
    Ok(())
}

/// Rejects a key or command longer than `limit` bytes: no process could be given it
/// ([`crate::arg_limit`]).
fn check_length(value: &Spanned<String>, what: &str, limit: usize) -> Result<(), Problem> {
    if value.get_ref().len() > limit {
        let passed_as = if what == "key" {
            "`LANES_KEY=KEY`"
        } else {
            "the one argument of `SHELL -c COMMAND`"
        };
        return Err((
            value.span().start,
            format!(
                "`{what}` is longer than {limit} bytes, the most {passed_as} can hold (the \
                 system's limit on one argument, MAX_ARG_STRLEN)"
            ),
        ));
    }
    Ok(())
}

fn resolve_env(env: RawEnv) -> Result<Vec<(String, String)>, Problem> {
    env.into_iter()
        .map(|(name, value)| {
            let bad_name = if name.get_ref().is_empty() {
                Some("must not be empty")
            } else if name.get_ref().contains('=') {
                Some("must not contain `=`")
            } else if name.get_ref().contains('\0') {
                Some("must not contain a NUL character")
            } else {
                None
            };
            if let Some(why) = bad_name {
                return Err((
                    name.span().start,
                    format!("environment variable name {:?} {why}", name.get_ref()),
                ));
            }
            check_no_nul_at(
                &value.0,
                name.span().start,
                &format!("env.{}", name.get_ref()),
            )?;
            // `NAME=value` is one string of `execve(2)`'s, bounded as one argument is.
            let bytes = name.get_ref().len() + 1 + value.0.len();
            let most = crate::arg_limit::max_argument_bytes();
            if bytes > most {
                return Err((
                    name.span().start,
                    format!(
                        "env.{}: `NAME=value` is {bytes} bytes, more than one environment \
                         string can hold ({most} bytes): no job could be started with it",
                        name.get_ref()
                    ),
                ));
            }
            Ok((name.into_inner(), value.0))
        })
        .collect()
}

fn resolve_duration(
    value: Option<Spanned<RawDuration>>,
    field: &str,
) -> Result<Option<Duration>, Problem> {
    let Some(value) = value else {
        return Ok(None);
    };
    let start = value.span().start;
    let parsed = match value.into_inner() {
        RawDuration::Text(text) => parse_duration(&text),
        RawDuration::Int(n) => seconds_to_duration(n as f64).ok_or_else(|| not_seconds(n)),
        RawDuration::Float(x) => seconds_to_duration(x).ok_or_else(|| not_seconds(x)),
    };
    parsed
        .map(Some)
        .map_err(|message| (start, format!("invalid duration for `{field}`: {message}")))
}

fn not_seconds(n: impl fmt::Display) -> String {
    format!(
        "`{n}` is not a non-negative, finite number of seconds up to {}",
        crate::duration::MAX_SECONDS
    )
}

/// A duration as written: a string for [`parse_duration`] or a number of seconds.
enum RawDuration {
    Text(String),
    Int(i64),
    Float(f64),
}

impl<'de> Deserialize<'de> for RawDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;

        impl Visitor<'_> for DurationVisitor {
            type Value = RawDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"10m\" or a number of seconds")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<RawDuration, E> {
                Ok(RawDuration::Text(text.to_string()))
            }

            fn visit_i64<E: de::Error>(self, n: i64) -> Result<RawDuration, E> {
                Ok(RawDuration::Int(n))
            }

            fn visit_u64<E: de::Error>(self, n: u64) -> Result<RawDuration, E> {
                Ok(i64::try_from(n).map_or(RawDuration::Float(n as f64), RawDuration::Int))
            }

            fn visit_f64<E: de::Error>(self, x: f64) -> Result<RawDuration, E> {
                Ok(RawDuration::Float(x))
            }
        }

        deserializer.deserialize_any(DurationVisitor)
    }
}

/// An amount as written: a whole number or a string such as `"8G"` ([`parse_amount`]).
enum RawAmount {
    Text(String),
    Int(i64),
}

impl RawAmount {
    fn resolve(self) -> Result<u64, String> {
        match self {
            RawAmount::Text(text) => parse_amount(&text),
            RawAmount::Int(n) => u64::try_from(n)
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| format!("an amount must be at least 1, not {n}")),
        }
    }
}

/// A `[resources]` value: an amount, or an array of named units (strings or integers).
enum RawStock {
    Amount(RawAmount),
    Units(Vec<Spanned<UnitId>>),
}

/// A unit id of a `[resources]` array: a string, or an integer written as one.
struct UnitId(String);

impl UnitId {
    fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for UnitId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct UnitIdVisitor;

        impl Visitor<'_> for UnitIdVisitor {
            type Value = UnitId;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a unit id: a string or an integer")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<UnitId, E> {
                Ok(UnitId(text.to_owned()))
            }

            fn visit_i64<E: de::Error>(self, n: i64) -> Result<UnitId, E> {
                Ok(UnitId(n.to_string()))
            }

            fn visit_u64<E: de::Error>(self, n: u64) -> Result<UnitId, E> {
                Ok(UnitId(n.to_string()))
            }
        }

        deserializer.deserialize_any(UnitIdVisitor)
    }
}

impl<'de> Deserialize<'de> for RawAmount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match deserializer.deserialize_any(StockVisitor { units: false })? {
            RawStock::Amount(amount) => Ok(amount),
            RawStock::Units(_) => Err(de::Error::custom(
                "expected an amount such as 2 or \"8G\", not an array",
            )),
        }
    }
}

impl<'de> Deserialize<'de> for RawStock {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StockVisitor { units: true })
    }
}

/// Reads an amount, or (`units`: a `[resources]` value) an array of unit ids.
struct StockVisitor {
    units: bool,
}

impl<'de> Visitor<'de> for StockVisitor {
    type Value = RawStock;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.units {
            f.write_str("an amount such as 8 or \"32G\", or an array of unit ids")
        } else {
            f.write_str("an amount such as 2 or \"8G\"")
        }
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<RawStock, E> {
        Ok(RawStock::Amount(RawAmount::Text(text.to_string())))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<RawStock, E> {
        Ok(RawStock::Amount(RawAmount::Int(n)))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<RawStock, E> {
        i64::try_from(n)
            .map(|n| RawStock::Amount(RawAmount::Int(n)))
            .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(n), &self))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<RawStock, A::Error> {
        let mut ids = Vec::new();
        while let Some(id) = seq.next_element::<Spanned<UnitId>>()? {
            ids.push(id);
        }
        Ok(RawStock::Units(ids))
    }
}

/// A TOML integer, with a friendlier "expected" message than `i64` gives.
#[derive(Default)]
struct WholeNumber(i64);

impl<'de> Deserialize<'de> for WholeNumber {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct WholeNumberVisitor;

        impl Visitor<'_> for WholeNumberVisitor {
            type Value = WholeNumber;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number")
            }

            fn visit_i64<E: de::Error>(self, n: i64) -> Result<WholeNumber, E> {
                Ok(WholeNumber(n))
            }

            fn visit_u64<E: de::Error>(self, n: u64) -> Result<WholeNumber, E> {
                i64::try_from(n)
                    .map(WholeNumber)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(n), &self))
            }
        }

        deserializer.deserialize_any(WholeNumberVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "conf/jobs.toml";

    fn ok(text: &str) -> Manifest {
        match parse(Path::new(PATH), text) {
            Ok(manifest) => manifest,
            Err(err) => panic!("expected a valid manifest, got: {err}"),
        }
    }

    /// Parses `text`, expects an error, and returns (line, column, message), after checking
    /// that `Display` is `PATH:LINE:COLUMN: MESSAGE`.
    fn err(text: &str) -> (u64, u64, String) {
        match parse(Path::new(PATH), text) {
            Ok(manifest) => panic!("expected an error, got {manifest:?}"),
            Err(ManifestError::Invalid {
                path,
                line,
                column,
                message,
            }) => {
                assert_eq!(path, Path::new(PATH));
                let shown = ManifestError::Invalid {
                    path: path.clone(),
                    line,
                    column,
                    message: message.clone(),
                }
                .to_string();
                assert_eq!(shown, format!("{PATH}:{line}:{column}: {message}"));
                (line, column, message)
            }
            Err(other) => panic!("expected an Invalid error, got {other:?}"),
        }
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    const FULL: &str = r#"# Run settings; command-line flags override them.
max_concurrent = 4
timeout = "10m"
grace = 5
shell = "bash"

[env]
RUST_LOG = "info"
A_FIRST = "1"

[[job]]
key = "api"
cmd = "make deploy"
timeout = "2m"
cwd = "services/api"
env = { STAGE = "prod", DEBUG = "0" }
rank = -3

[[job]]
key = "web"
cmd = "npm run build"
timeout = 0.5
cwd = "/srv/web"

  [[job]]    # indented header
key = "api"
cmd = "true"
rank = 7
[job.env]
X = "y"
"#;

    #[test]
    fn full_manifest_every_field() {
        let mut manifest = ok(FULL);
        manifest.settings.places.clear();
        assert_eq!(
            manifest.settings,
            ManifestSettings {
                max_concurrent: Some(4),
                timeout: Some(Duration::from_secs(600)),
                grace: Some(Duration::from_secs(5)),
                shell: Some("bash".to_string()),
                env: env(&[("A_FIRST", "1"), ("RUST_LOG", "info")]),
                ..ManifestSettings::default()
            }
        );
        assert_eq!(
            manifest.jobs,
            vec![
                ManifestJob {
                    line: 11,
                    key: "api".to_string(),
                    cmd: "make deploy".to_string(),
                    timeout: Some(Duration::from_secs(120)),
                    cwd: Some(PathBuf::from("conf/services/api")),
                    env: env(&[("DEBUG", "0"), ("STAGE", "prod")]),
                    rank: -3,
                    weight: None,
                    needs: None,
                    resolved_needs: None,
                },
                ManifestJob {
                    line: 19,
                    key: "web".to_string(),
                    cmd: "npm run build".to_string(),
                    timeout: Some(Duration::from_millis(500)),
                    cwd: Some(PathBuf::from("/srv/web")),
                    env: vec![],
                    rank: 0,
                    weight: None,
                    needs: None,
                    resolved_needs: None,
                },
                ManifestJob {
                    line: 25,
                    key: "api".to_string(),
                    cmd: "true".to_string(),
                    timeout: None,
                    cwd: None,
                    env: env(&[("X", "y")]),
                    rank: 7,
                    weight: None,
                    needs: None,
                    resolved_needs: None,
                },
            ]
        );
    }

    #[test]
    fn resources_weights_and_needs() {
        let manifest = ok(r#"
[resources]
gpu = ["0", 1, "2"]
mem = "32G"
cpu = 8

[[job]]
key = "a"
cmd = "true"
weight = 2
needs = { gpu = 1, mem = "8G" }
"#);
        let names: Vec<(&str, u64)> = manifest
            .settings
            .resources
            .iter()
            .map(|r| (&*r.value.name, r.value.stock.total()))
            .collect();
        assert_eq!(names, [("cpu", 8), ("gpu", 3), ("mem", 32 << 30)]);
        let job = &manifest.jobs[0];
        assert_eq!(
            job.weight.as_ref().map(|w| (w.value, w.line, w.column)),
            Some((2, 10, 10))
        );
        let needs: Vec<_> = job
            .needs
            .as_ref()
            .unwrap()
            .value
            .iter()
            .map(|n| (n.need.name.as_str(), n.need.amount, n.name_at, n.amount_at))
            .collect();
        assert_eq!(
            needs,
            [
                ("gpu", 1, (11, 11), (11, 17)),
                ("mem", 8 << 30, (11, 20), (11, 26))
            ]
        );
    }

    #[test]
    fn a_byte_that_is_not_utf_8_is_pointed_at() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.toml");
        std::fs::write(&path, b"[[job]]\nkey = \"\xc3\xa9\"\ncmd = \"x\xff\"\n").unwrap();
        match load(&path) {
            Err(ManifestError::Invalid {
                line,
                column,
                message,
                ..
            }) => {
                assert_eq!((line, column), (3, 9));
                assert!(message.contains("not UTF-8"), "{message}");
            }
            other => panic!("expected an invalid manifest, got {other:?}"),
        }
    }

    #[test]
    fn needs_may_be_given_with_dotted_keys() {
        let text = "[resources]\ngpu = [\"0\", \"1\"]\n[[job]]\nkey = \"a\"\ncmd = \"true\"\n\
                    needs.gpu = 2\n";
        let manifest = ok(text);
        let needs = manifest.jobs[0].needs.as_ref().unwrap();
        assert_eq!(needs.value.len(), 1);
        assert_eq!(needs.value[0].need.name, "gpu");
    }

    #[test]
    fn an_env_name_with_a_dot_must_be_quoted() {
        let (line, column, message) = err("[env]\nA.B = \"x\"\n");
        assert_eq!((line, column), (2, 1));
        assert!(message.contains("not a table"), "{message}");
        assert!(message.contains("\"A.B\" = \"x\""), "{message}");
        let manifest = ok("[env]\n\"A.B\" = \"x\"\n[[job]]\nkey = \"a\"\ncmd = \"true\"\n");
        assert_eq!(manifest.settings.env, [("A.B".to_owned(), "x".to_owned())]);
        let (line, column, message) = err("[env]\nA = \"x\\u0000\"\n");
        assert_eq!((line, column), (2, 1));
        assert!(
            message.contains("`env.A` must not contain a NUL"),
            "{message}"
        );
    }

    #[test]
    fn an_integer_beyond_64_bits_is_named_with_its_range() {
        let (line, column, message) =
            err("[[job]]\nkey = \"a\"\ncmd = \"true\"\nrank = 18446744073709551615\n");
        assert_eq!((line, column), (4, 8));
        assert!(
            message.starts_with("`rank`: number too large")
                && message.ends_with("at most 9223372036854775807"),
            "{message}"
        );
    }

    #[test]
    fn bad_resources_weights_and_needs_are_pointed_at() {
        let (line, column, message) = err("[resources]\nmem = \"8GG\"\n");
        assert_eq!((line, column), (2, 7));
        assert!(
            message.contains("`resources.mem`") && message.contains("\"8GG\""),
            "{message}"
        );
        // At the id given twice, not at the array; on its own line in an array of lines.
        let (line, column, message) = err("[resources]\ngpu = [\"0\", \"1\", \"0\"]\n");
        assert_eq!((line, column), (2, 18));
        assert!(message.contains("given twice"), "{message}");
        let (line, column, _) = err("[resources]\ngpu = [\n  \"0\",\n  \"1\",\n  \"1\",\n]\n");
        assert_eq!((line, column), (5, 3));
        let (line, column, message) = err("[resources]\ngpu = [\"0\", true]\n");
        assert_eq!((line, column), (2, 13));
        assert!(message.contains("a unit id"), "{message}");
        let (line, column, message) = err("[resources]\nGPU = 1\n");
        assert_eq!((line, column), (2, 1));
        assert!(message.contains("lowercase"), "{message}");
        let (line, column, message) = err("[[job]]\nkey = \"a\"\ncmd = \"true\"\nweight = 0\n");
        assert_eq!((line, column), (4, 10));
        assert!(message.contains("at least 1, not 0"), "{message}");
        let (line, _, message) = err("[[job]]\nkey = \"a\"\ncmd = \"true\"\nweight = -2\n");
        assert_eq!(line, 4);
        assert!(message.contains("not -2"), "{message}");
        let (line, column, message) =
            err("[[job]]\nkey = \"a\"\ncmd = \"true\"\nneeds = { gpu = 0 }\n");
        assert_eq!((line, column), (4, 17));
        assert!(
            message.contains("`needs.gpu`") && message.contains("at least 1"),
            "{message}"
        );
        let (_, _, message) =
            err("[[job]]\nkey = \"a\"\ncmd = \"true\"\nneeds = { mem = \"1.5G\" }\n");
        assert!(message.contains("not an amount"), "{message}");
    }

    #[test]
    fn empty_and_job_less_files_are_valid() {
        let empty = ok("");
        assert_eq!(empty.settings, ManifestSettings::default());
        assert!(empty.jobs.is_empty());

        let settings_only = ok("# nothing to run\nshell = \"zsh\"\n");
        assert_eq!(settings_only.settings.shell.as_deref(), Some("zsh"));
        assert_eq!(settings_only.settings.max_concurrent, None);
        assert_eq!(settings_only.settings.timeout, None);
        assert!(settings_only.jobs.is_empty());
    }

    #[test]
    fn durations_as_strings_and_numbers() {
        let cases: &[(&str, Duration)] = &[
            ("\"10m\"", Duration::from_secs(600)),
            ("\"1m30s\"", Duration::from_secs(90)),
            ("\"250ms\"", Duration::from_millis(250)),
            ("\"20\"", Duration::from_secs(20)),
            ("20", Duration::from_secs(20)),
            ("0", Duration::ZERO),
            ("0.5", Duration::from_millis(500)),
            ("1.25", Duration::from_millis(1250)),
            ("2e1", Duration::from_secs(20)),
        ];
        for (written, expected) in cases {
            let manifest = ok(&format!(
                "timeout = {written}\ngrace = {written}\n[[job]]\nkey = \"k\"\ncmd = \"c\"\ntimeout = {written}\n"
            ));
            assert_eq!(manifest.settings.timeout, Some(*expected), "{written}");
            assert_eq!(manifest.settings.grace, Some(*expected), "{written}");
            assert_eq!(manifest.jobs[0].timeout, Some(*expected), "{written}");
        }
    }

    #[test]
    fn cwd_relative_absolute_and_bare_path() {
        let text = "[[job]]\nkey = \"a\"\ncmd = \"c\"\ncwd = \"sub/dir\"\n\
                    [[job]]\nkey = \"b\"\ncmd = \"c\"\ncwd = \"/abs/dir\"\n\
                    [[job]]\nkey = \"c\"\ncmd = \"c\"\ncwd = \"../up\"\n";
        let in_dir = parse(Path::new("conf/jobs.toml"), text).expect("valid");
        assert_eq!(in_dir.jobs[0].cwd, Some(PathBuf::from("conf/sub/dir")));
        assert_eq!(in_dir.jobs[1].cwd, Some(PathBuf::from("/abs/dir")));
        assert_eq!(in_dir.jobs[2].cwd, Some(PathBuf::from("conf/../up")));

        let bare = parse(Path::new("jobs.toml"), text).expect("valid");
        assert_eq!(bare.jobs[0].cwd, Some(PathBuf::from("./sub/dir")));
        assert_eq!(bare.jobs[1].cwd, Some(PathBuf::from("/abs/dir")));

        let absolute = parse(Path::new("/etc/lanes/jobs.toml"), text).expect("valid");
        assert_eq!(
            absolute.jobs[0].cwd,
            Some(PathBuf::from("/etc/lanes/sub/dir"))
        );
    }

    #[test]
    fn job_lines_follow_headers() {
        let text = "\n\n[[job]]\nkey = \"a\"\ncmd = \"c\"\n\n# comment\n\n\t[[ job ]]\n\
                    cmd = \"c\"\nkey = \"b\"\n[job.env]\nA = \"1\"\n[[job]]\nkey = \"c\"\ncmd = \"c\"";
        let lines: Vec<u64> = ok(text).jobs.iter().map(|job| job.line).collect();
        assert_eq!(lines, vec![3, 9, 14]);

        // An inline array of tables: the line where each table starts.
        let inline =
            "job = [\n  { key = \"a\", cmd = \"c\" },\n\n  { key = \"b\", cmd = \"c\" },\n]\n";
        let lines: Vec<u64> = ok(inline).jobs.iter().map(|job| job.line).collect();
        assert_eq!(lines, vec![2, 4]);
    }

    #[test]
    fn missing_trailing_newline() {
        let manifest = ok("max_concurrent = 2\n[[job]]\nkey = \"a\"\ncmd = \"echo hi\"\nrank = 2");
        assert_eq!(manifest.settings.max_concurrent, Some(2));
        assert_eq!(manifest.jobs[0].rank, 2);
        assert_eq!(manifest.jobs[0].cmd, "echo hi");

        // An error on the unterminated last line still gets its position.
        let (line, column, message) = err("[[job]]\nkey = \"a\"\ncmd = \"unterminated");
        assert_eq!((line, column), (3, 20));
        assert!(message.contains("string"), "{message}");
    }

    #[test]
    fn crlf_and_byte_order_mark() {
        let manifest = ok("\u{feff}[[job]]\r\nkey = \"a\"\r\ncmd = \"c\"\r\n\r\n[[job]]\r\nkey = \"b\"\r\ncmd = \"c\"\r\n");
        let lines: Vec<u64> = manifest.jobs.iter().map(|job| job.line).collect();
        assert_eq!(lines, vec![1, 5]);

        let (line, column, _) = err("\u{feff}bad = 1\r\n");
        assert_eq!((line, column), (1, 1));
        let (line, column, _) = err("[[job]]\r\nkey = \"\"\r\ncmd = \"c\"\r\n");
        assert_eq!((line, column), (2, 7));
    }

    #[test]
    fn the_parser_s_words_get_the_setting_and_what_to_write() {
        let said = |text: &str| err(text).2;
        assert_eq!(
            said("coalesce = true\n"),
            "`coalesce`: invalid type: boolean `true`, expected a string"
        );
        // A setting's word is a string, as on the command line: no table form.
        assert_eq!(
            said("coalesce = \"newest\"\n"),
            "`coalesce`: expected \"off\" or \"latest\", not \"newest\""
        );
        assert_eq!(
            said("coalesce = { latest = {} }\n"),
            "`coalesce`: invalid type: table, expected a string"
        );
        assert_eq!(
            said("on_full = { reject = {} }\n"),
            "`on_full`: invalid type: table, expected a string"
        );
        assert_eq!(
            said("on_full = \"Reject\"\n"),
            "`on_full`: expected \"wait\" or \"reject\", not \"Reject\""
        );
        assert_eq!(
            said("timeout = 1979-05-27T07:32:00Z\n"),
            "`timeout`: invalid type: date-time, expected a duration such as \"10m\" or a \
             number of seconds"
        );
        assert!(
            said("[[job]]\nkey = \"a\"\ncmd = \"c\"\nretries = 2\n").ends_with(
                "; `retries` is a run setting: write it before the first `[[job]]` (after it, a \
             line belongs to that job)"
            )
        );
        assert!(said("[job]\nkey = \"a\"\ncmd = \"c\"\n").contains("written `[[job]]`"));
        assert_eq!(
            err("[[job]]\nkey = \"a\"\n\0cmd = \"c\"\n"),
            (3, 1, "a NUL byte: a manifest is text".to_owned())
        );
        assert!(said("max_queued = \"x\"\n").starts_with("`max_queued`: invalid type: string"));
        assert_eq!(
            said("[resources]\ngpu = 1\n[resources]\n"),
            "invalid table header: duplicate key `resources` in document root"
        );
    }

    #[test]
    fn the_run_settings_named_in_hints_are_the_manifest_s() {
        let message = err("shel = 1\n").2;
        let listed: Vec<&str> = message
            .split_once("expected one of ")
            .unwrap()
            .1
            .split(", ")
            .map(|name| name.trim_matches('`'))
            .filter(|&name| name != "job")
            .collect();
        assert_eq!(listed, RUN_SETTINGS);
    }

    #[test]
    fn error_unknown_top_level_field() {
        let (line, column, message) = err("max_concurrent = 2\nshel = \"bash\"\n");
        assert_eq!((line, column), (2, 1));
        assert_eq!(
            message,
            "unknown field `shel`, expected one of `max_concurrent`, `timeout`, `grace`, `shell`, `env`, `max_queued`, `on_full`, `coalesce`, `cancel_in_progress`, `retries`, `retry_delay`, `fail_fast`, `sticky_slots`, `lock_dir`, `shared_max_concurrent`, `coordinate`, `namespace`, `command`, `batch_size`, `batch_bytes`, `batch_delay`, `resources`, `job`"
        );
    }

    #[test]
    fn coordinate_and_namespace_are_read_and_must_not_be_empty() {
        let m = ok(
            "coordinate = \"postgres://u@db/lanes\"\nnamespace = \"ci\"\n\
                    [[job]]\nkey = \"a\"\ncmd = \"true\"\n",
        );
        assert_eq!(
            m.settings.coordinate.as_deref(),
            Some("postgres://u@db/lanes")
        );
        assert_eq!(m.settings.namespace.as_deref(), Some("ci"));
        let (line, column, message) = err("namespace = \"  \"\n");
        assert_eq!((line, column), (1, 13));
        assert_eq!(message, "`namespace` must not be empty or only whitespace");
    }

    #[test]
    fn error_unknown_job_field() {
        let (line, column, message) = err("[[job]]\nkey = \"a\"\n  cmdd = \"x\"\n");
        assert_eq!((line, column), (3, 3));
        assert_eq!(
            message,
            "unknown field `cmdd`, expected one of `key`, `cmd`, `timeout`, `cwd`, `env`, `rank`, `weight`, `needs`"
        );
    }

    #[test]
    fn error_wrong_types() {
        let (line, column, message) = err("[[job]]\nkey = 5\ncmd = \"x\"\n");
        assert_eq!((line, column), (2, 7));
        assert_eq!(
            message,
            "`key`: invalid type: integer `5`, expected a string"
        );

        let (line, column, message) = err("max_concurrent = \"4\"\n");
        assert_eq!((line, column), (1, 18));
        assert_eq!(
            message,
            "`max_concurrent`: invalid type: string \"4\", expected a whole number"
        );

        let (line, column, message) = err("[[job]]\nkey = \"a\"\ncmd = \"x\"\nrank = 1.5\n");
        assert_eq!((line, column), (4, 8));
        assert_eq!(
            message,
            "`rank`: invalid type: floating point `1.5`, expected a whole number"
        );

        let (line, column, message) = err("grace = true\n");
        assert_eq!((line, column), (1, 9));
        assert_eq!(
            message,
            "`grace`: invalid type: boolean `true`, expected a duration such as \"10m\" or a number of seconds"
        );

        let (line, column, message) = err("[[job]]\nkey = \"a\"\ncmd = \"x\"\nenv = 3\n");
        assert_eq!((line, column), (4, 7));
        assert_eq!(
            message,
            "`env`: invalid type: integer `3`, expected a table"
        );

        let (line, column, message) = err("[job]\nkey = \"a\"\ncmd = \"x\"\n");
        assert_eq!((line, column), (1, 1));
        assert_eq!(
            message,
            "`[job]` is one table: each job is an element of the array `job`, written `[[job]]`"
        );

        let (line, column, message) = err("[[jobs]]\nkey = \"a\"\ncmd = \"x\"\n");
        assert_eq!((line, column), (1, 3));
        assert_eq!(
            message,
            "`jobs` is no setting: each job is written `[[job]]`"
        );
    }

    #[test]
    fn error_missing_key() {
        let (line, column, message) =
            err("[[job]]\nkey = \"a\"\ncmd = \"x\"\n\n[[job]]\ncmd = \"y\"\n");
        assert_eq!((line, column), (5, 1));
        assert_eq!(message, "missing field `key`");
    }

    #[test]
    fn error_missing_cmd() {
        let (line, column, message) = err("shell = \"sh\"\n[[job]]\nkey = \"a\"\n");
        assert_eq!((line, column), (2, 1));
        assert_eq!(message, "missing field `cmd`");
    }

    #[test]
    fn error_empty_key() {
        let (line, column, message) = err("[[job]]\ncmd = \"x\"\nkey   =   \"\"\n");
        assert_eq!((line, column), (3, 11));
        assert_eq!(message, "`key` must not be empty");
    }

    #[test]
    fn error_empty_or_whitespace_cmd() {
        let (line, column, message) = err("[[job]]\nkey = \"a\"\ncmd = \" \\t \"\n");
        assert_eq!((line, column), (3, 7));
        assert_eq!(message, "`cmd` must not be empty or only whitespace");

        let (line, column, message) = err("[[job]]\nkey = \"a\"\n cmd = ''\n");
        assert_eq!((line, column), (3, 8));
        assert_eq!(message, "`cmd` must not be empty or only whitespace");
    }

    #[test]
    fn error_bad_durations() {
        let (line, column, message) = err("max_concurrent = 1\ntimeout = \"soon\"\n");
        assert_eq!((line, column), (2, 11));
        assert!(
            message.starts_with("invalid duration for `timeout`: `soon` is not a duration ("),
            "{message}"
        );

        let (line, column, message) = err("grace = -1\n");
        assert_eq!((line, column), (1, 9));
        assert_eq!(
            message,
            "invalid duration for `grace`: `-1` is not a non-negative, finite number of seconds up to 1000000000"
        );

        let (line, column, message) = err("timeout = nan\n");
        assert_eq!((line, column), (1, 11));
        assert_eq!(
            message,
            "invalid duration for `timeout`: `NaN` is not a non-negative, finite number of seconds up to 1000000000"
        );

        let (line, column, message) = err("grace = -0.5\n");
        assert_eq!((line, column), (1, 9));
        assert!(message.contains("`-0.5`"), "{message}");

        let (line, column, message) = err("[[job]]\nkey = \"a\"\ncmd = \"x\"\ntimeout = \"-3s\"\n");
        assert_eq!((line, column), (4, 11));
        assert!(
            message.starts_with("invalid duration for `timeout`: `-3s`"),
            "{message}"
        );
    }

    #[test]
    fn a_bad_command_template_points_into_the_file() {
        let (line, column, message) = err("timeout = 1\ncommand = 'echo \"{}\"'\n");
        assert_eq!((line, column), (2, 11));
        assert!(
            message.starts_with("placeholder `{}` inside quotes in `command` at byte 6"),
            "{message}"
        );
        let (_, _, message) = err("command = 'echo {file}'\n");
        assert!(
            message.starts_with("unknown placeholder `{file}` in `command`"),
            "{message}"
        );
    }

    #[test]
    fn a_batch_bytes_below_one_names_the_argument_limit_not_the_type_s() {
        let (line, column, message) = err("batch_bytes = 0\n");
        assert_eq!((line, column), (1, 15));
        let most = crate::arg_limit::max_argument_bytes();
        assert_eq!(
            message,
            format!(
                "`batch_bytes` must be a whole number of bytes from 1 to what one argument can \
                 hold ({most} here), less the template's own text"
            )
        );
    }

    #[test]
    fn error_max_concurrent_below_one() {
        let (line, column, message) = err("timeout = 1\nmax_concurrent = 0\n");
        assert_eq!((line, column), (2, 18));
        assert_eq!(
            message,
            "`max_concurrent` must be between 1 and 4294967295, not 0"
        );

        let (line, column, message) = err("max_concurrent = -2\n");
        assert_eq!((line, column), (1, 18));
        assert_eq!(
            message,
            "`max_concurrent` must be between 1 and 4294967295, not -2"
        );

        let (_, _, message) = err("max_concurrent = 4294967296\n");
        assert_eq!(
            message,
            "`max_concurrent` must be between 1 and 4294967295, not 4294967296"
        );
    }

    #[test]
    fn error_non_string_env_values() {
        let (line, column, message) = err("[env]\nA = \"ok\"\nB = 5\n");
        assert_eq!((line, column), (3, 5));
        assert_eq!(message, "`B`: invalid type: integer `5`, expected a string");

        let (line, column, message) =
            err("[[job]]\nkey = \"a\"\ncmd = \"x\"\nenv = { A = \"1\", B = true }\n");
        assert_eq!((line, column), (4, 22));
        assert_eq!(
            message,
            "`B`: invalid type: boolean `true`, expected a string"
        );
    }

    #[test]
    fn error_bad_env_names_and_nul() {
        let (line, column, message) = err("[env]\n\"A=B\" = \"x\"\n");
        assert_eq!((line, column), (2, 1));
        assert_eq!(
            message,
            "environment variable name \"A=B\" must not contain `=`"
        );

        let (line, column, message) =
            err("[[job]]\nkey = \"a\"\ncmd = \"x\"\nenv = { \"\" = \"x\" }\n");
        assert_eq!((line, column), (4, 9));
        assert_eq!(message, "environment variable name \"\" must not be empty");

        let (line, column, message) = err("[[job]]\nkey = \"a\"\ncmd = \"echo \\u0000\"\n");
        assert_eq!((line, column), (3, 7));
        assert_eq!(message, "`cmd` must not contain a NUL character");

        let (line, _, message) = err("[[job]]\nkey = \"a\\u0000b\"\ncmd = \"x\"\n");
        assert_eq!(line, 2);
        assert_eq!(message, "`key` must not contain a NUL character");
    }

    #[test]
    fn error_command_or_key_longer_than_one_argument() {
        let limit = crate::arg_limit::max_argument_bytes();
        let longest = format!("[[job]]\nkey = \"a\"\ncmd = \"{}\"\n", "x".repeat(limit));
        assert_eq!(ok(&longest).jobs[0].cmd.len(), limit);
        let text = format!(
            "[[job]]\nkey = \"a\"\ncmd = \"{}\"\n",
            "x".repeat(limit + 1)
        );
        let (line, column, message) = err(&text);
        assert_eq!((line, column), (3, 7));
        assert!(
            message.starts_with(&format!("`cmd` is longer than {limit} bytes")),
            "{message}"
        );
        let key_limit = crate::arg_limit::max_key_bytes();
        let text = format!(
            "[[job]]\nkey = \"{}\"\ncmd = \"x\"\n",
            "k".repeat(key_limit + 1)
        );
        let (line, _, message) = err(&text);
        assert_eq!(line, 2);
        assert!(message.contains("`LANES_KEY=KEY`"), "{message}");
    }

    #[test]
    fn error_empty_shell_and_cwd() {
        let (line, column, message) = err("shell = \"\"\n");
        assert_eq!((line, column), (1, 9));
        assert_eq!(message, "`shell` must not be empty or only whitespace");

        let (line, column, message) = err("[[job]]\nkey = \"a\"\ncmd = \"x\"\ncwd = \"\"\n");
        assert_eq!((line, column), (4, 7));
        assert!(message.starts_with("`cwd` must not be empty"), "{message}");
    }

    #[test]
    fn error_toml_syntax() {
        let (line, column, message) = err("[[job]]\nkey = \"a\" x\ncmd = \"x\"\n");
        assert_eq!((line, column), (2, 11));
        assert!(message.starts_with("expected newline"), "{message}");

        // Columns count characters, not bytes.
        let (line, column, _) = err("[[job]]\nkey = \"é\" x\n");
        assert_eq!((line, column), (2, 11));

        let (line, column, message) = err("[[job]]\nkey = \"a\"\nkey = \"b\"\ncmd = \"x\"\n");
        assert_eq!((line, column), (3, 1));
        assert!(message.contains("duplicate key"), "{message}");
    }

    #[test]
    fn first_problem_in_file_order_among_jobs() {
        let (line, column, message) =
            err("[[job]]\nkey = \"a\"\ncmd = \"x\"\n[[job]]\nkey = \"\"\ncmd = \" \"\n");
        assert_eq!((line, column), (5, 7));
        assert_eq!(message, "`key` must not be empty");
    }

    /// The reference for [`LineIndex::at`]: a scan of the text from its start.
    fn scanned_line_column(text: &str, offset: usize) -> (u64, u64) {
        let before = &text.as_bytes()[..offset.min(text.len())];
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |newline| newline + 1);
        let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
        let chars = before[line_start..]
            .iter()
            .filter(|&&b| b & 0xC0 != 0x80)
            .count();
        (to_u64(line), to_u64(chars + 1))
    }

    proptest::proptest! {
        #[test]
        fn the_line_index_finds_every_place_a_scan_finds(
            text in "[a\nç\r€ ]{0,40}",
            offsets in proptest::collection::vec(0usize..60, 1..10),
        ) {
            let index = LineIndex::new(&text);
            for offset in offsets {
                proptest::prop_assert_eq!(index.at(offset), scanned_line_column(&text, offset));
            }
        }
    }

    #[test]
    fn line_column_is_clamped_and_counts_characters() {
        let text = "ab\nçd\n";
        let index = LineIndex::new(text);
        let line_column = |_: &str, offset| index.at(offset);
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 2), (1, 3));
        assert_eq!(line_column(text, 3), (2, 1));
        assert_eq!(line_column(text, 5), (2, 2));
        assert_eq!(line_column(text, 4), (2, 2)); // inside `ç`: the character's column
        assert_eq!(line_column(text, 7), (3, 1));
        assert_eq!(line_column(text, 1000), (3, 1));
        assert_eq!(LineIndex::new("").at(5), (1, 1));
        assert_eq!(LineIndex::new("\n\n").at(1), (2, 1));
        assert_eq!(LineIndex::new("\n\n").at(2), (3, 1));
    }

    #[test]
    fn load_reads_the_file_and_reports_read_errors() {
        let dir = std::env::temp_dir().join(format!("lanes-manifest-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        let path = dir.join("jobs.toml");
        std::fs::write(&path, "[[job]]\nkey = \"a\"\ncmd = \"x\"\ncwd = \"w\"\n").expect("write");
        let manifest = load(&path);
        let bad_path = dir.join("bad.toml");
        std::fs::write(&bad_path, "[[job]]\nkey = \"\"\ncmd = \"x\"\n").expect("write");
        let bad = load(&bad_path);
        let missing_path = dir.join("missing.toml");
        let missing = load(&missing_path);
        let directory = load(&dir);
        std::fs::remove_dir_all(&dir).expect("clean up");

        let manifest = manifest.expect("valid");
        assert_eq!(manifest.jobs[0].cwd, Some(dir.join("w")));
        assert_eq!(manifest.jobs[0].line, 1);

        let bad = bad.expect_err("empty key");
        assert_eq!(
            bad.to_string(),
            format!("{}:2:7: `key` must not be empty", bad_path.display())
        );

        match missing {
            Err(ManifestError::Read { path, error }) => {
                assert_eq!(path, missing_path);
                assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
                let shown = ManifestError::Read { path, error }.to_string();
                assert!(
                    shown.starts_with(&format!(
                        "{}: cannot read manifest: ",
                        missing_path.display()
                    )),
                    "{shown}"
                );
                assert!(shown.contains("(os error 2)"), "{shown}");
            }
            other => panic!("expected a read error, got {other:?}"),
        }
        match directory {
            Err(ManifestError::Read { path, .. }) => assert_eq!(path, dir),
            other => panic!("expected a read error for a directory, got {other:?}"),
        }
    }

    #[test]
    fn a_manifest_is_named_by_the_end_of_its_name_in_any_case() {
        for name in [
            "jobs.toml",
            "conf/JOBS.TOML",
            ".toml",
            "dir/.toml",
            "a.b.Toml",
        ] {
            assert!(is_manifest_name(Path::new(name)), "{name}");
        }
        for name in ["jobs.tsv", "toml", "jobs.toml.bak", "dir.toml/jobs", ""] {
            assert!(!is_manifest_name(Path::new(name)), "{name}");
        }
    }
}
