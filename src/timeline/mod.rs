//! `lanes timeline REPORT [--events EVENTS] -o OUT [--format html|json|md]`: a run drawn from
//! its report: an HTML page ([`html`]), a Chrome trace ([`trace`]) or Markdown with a Mermaid
//! Gantt chart ([`markdown`]). The report is read line by line, twice at most ([`model`]), so
//! that a report of a million jobs is drawn in bounded memory; OUT is written whole or not at
//! all (a temporary file renamed into place), unless it is a FIFO, a device or `-` (stdout),
//! which are written into directly.

mod events;
mod html;
mod markdown;
mod model;
mod report;
mod trace;

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// The formats a timeline is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Html,
    Trace,
    Markdown,
}

/// The format `--format` names, or else OUT's extension.
fn format_of(output: &Path, format: Option<&str>) -> anyhow::Result<Format> {
    let named = format.map(str::to_owned).or_else(|| {
        output
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
    });
    Ok(match named.as_deref() {
        Some("html" | "htm") => Format::Html,
        Some("json") => Format::Trace,
        Some("md" | "markdown") => Format::Markdown,
        _ => bail!(
            "cannot tell which format to write {}: name it .html, .json or .md, or give \
             --format html|json|md",
            output.display()
        ),
    })
}

/// Where a timeline goes, `-o` resolved.
enum Target {
    /// `-o -`: stdout.
    Stdout,
    /// A path that exists and is neither a regular file nor a directory (a FIFO, a terminal,
    /// `/dev/null`): written to directly, as it is.
    Direct(PathBuf),
    /// A regular file (symbolic links followed), or a path where nothing is yet (a dangling
    /// link followed to where it points): a temporary file beside it, renamed
    /// onto it when whole; an existing file's permission bits are kept.
    Replace(PathBuf, Option<std::fs::Permissions>),
}

/// The path `output` leads to, symbolic links followed (a dangling link leads to the path it
/// names, so that the file is created there and the link kept).
fn resolve_links(output: &Path) -> anyhow::Result<PathBuf> {
    let mut path = output.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let to = std::fs::read_link(&path)
                    .with_context(|| format!("cannot write {}", output.display()))?;
                path = match path.parent() {
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                };
            }
            _ => return Ok(path),
        }
    }
    bail!(
        "cannot write {}: too many levels of symbolic links",
        output.display()
    )
}

impl Target {
    fn of(output: &Path) -> anyhow::Result<Target> {
        if output.as_os_str() == "-" {
            return Ok(Target::Stdout);
        }
        match std::fs::metadata(output) {
            Ok(meta) if meta.is_dir() => {
                bail!("cannot write {}: it is a directory", output.display())
            }
            Ok(meta) if meta.is_file() => Ok(Target::Replace(
                std::fs::canonicalize(output)
                    .with_context(|| format!("cannot write {}", output.display()))?,
                Some(meta.permissions()),
            )),
            // Opened by its own name: `/dev/stdout` leads to `/proc/self/fd/1`, whose link
            // names no path (`pipe:[..]`) but opens.
            Ok(_) => Ok(Target::Direct(output.to_path_buf())),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                Ok(Target::Replace(resolve_links(output)?, None))
            }
            Err(err) => Err(err).with_context(|| format!("cannot write {}", output.display())),
        }
    }
}

/// Writes the timeline of the report at `report` to `output` (`-` for stdout).
///
/// # Errors
/// A report that is not a lanes report, or of a newer schema, or with a bad line; an events
/// file that is not one or is from another run (each naming the file and line); OUT not
/// writable.
pub(crate) fn write(
    report: &Path,
    events: Option<&Path>,
    output: &Path,
    format: Option<&str>,
) -> anyhow::Result<()> {
    let format = format_of(output, format)?;
    if report.as_os_str() == "-" && events.is_some_and(|events| events.as_os_str() == "-") {
        bail!("the report and the events cannot both be read from stdin (-): name a file for one");
    }
    for input in std::iter::once(report).chain(events) {
        let file = std::fs::metadata(input).is_ok_and(|meta| meta.is_file());
        if file && output.as_os_str() != "-" && crate::config::same_file(input, output) {
            bail!(
                "{} is both an input and the output: the timeline would replace it; give \
                 another -o",
                output.display()
            );
        }
    }
    // A pipe or a FIFO (`<(…)`, `/dev/stdin`) is read once into a temporary file: a
    // timeline reads its report more than once. Errors still name the path given.
    let spooled_report = Spooled::of(report)?;
    let spooled_events = events.map(Spooled::of).transpose()?;
    let named = |err: anyhow::Error| {
        let err = spooled_report.named(err);
        match &spooled_events {
            Some(events) => events.named(err),
            None => err,
        }
    };
    let read_report = spooled_report.path();
    let read_events = spooled_events.as_ref().map(Spooled::path);
    write_spooled(read_report, read_events, report, output, format).map_err(named)
}

/// An input as read: the path given, or a temporary copy of what a pipe or FIFO there held.
struct Spooled<'a> {
    given: &'a Path,
    copy: Option<tempfile::TempPath>,
}

impl<'a> Spooled<'a> {
    fn of(given: &'a Path) -> anyhow::Result<Self> {
        let cannot = || format!("cannot read {}", given.display());
        let stdin = given.as_os_str() == "-";
        if let Some(why) = crate::closed_stdin::refusal().filter(|_| stdin) {
            anyhow::bail!("cannot read stdin: {why}");
        }
        if let Some(err) = crate::closed_stdin::named_by(given) {
            return Err(anyhow::Error::new(err).context(cannot()));
        }
        let regular =
            !stdin && std::fs::metadata(given).map_or(true, |meta| meta.is_file() || meta.is_dir());
        if regular {
            return Ok(Spooled { given, copy: None });
        }
        let mut from: Box<dyn std::io::Read> = if stdin {
            Box::new(std::io::stdin().lock())
        } else {
            Box::new(std::fs::File::open(given).with_context(cannot)?)
        };
        let mut copy = tempfile::NamedTempFile::new()
            .map_err(without_temporary_name)
            .with_context(|| format!("cannot keep a copy of {}", given.display()))?;
        std::io::copy(&mut *from, copy.as_file_mut())
            .map_err(without_temporary_name)
            .with_context(cannot)?;
        Ok(Spooled {
            given,
            copy: Some(copy.into_temp_path()),
        })
    }

    fn path(&self) -> &Path {
        self.copy.as_deref().unwrap_or(self.given)
    }

    /// `err` naming the path given where it names the copy.
    fn named(&self, err: anyhow::Error) -> anyhow::Error {
        let Some(copy) = &self.copy else { return err };
        match err.downcast::<report::ReadError>() {
            Ok(report::ReadError::Io { path, error }) if path == **copy => report::ReadError::Io {
                path: self.given.to_path_buf(),
                error,
            }
            .into(),
            Ok(report::ReadError::Bad { path, line, why }) if path == **copy => {
                report::ReadError::Bad {
                    path: self.given.to_path_buf(),
                    line,
                    why,
                }
                .into()
            }
            Ok(other) => other.into(),
            Err(err) => err,
        }
    }
}

/// [`write`], once its inputs are files that can be read more than once; `name` is the
/// report's path as given (the page's title).
fn write_spooled(
    report: &Path,
    events: Option<&Path>,
    name: &Path,
    output: &Path,
    format: Format,
) -> anyhow::Result<()> {
    // The inputs are checked readable before anything is created or opened for writing.
    report::ReportReader::open(report)?;
    if let Some(events) = events {
        report::LineReader::open(events)?;
    }
    let cannot = || format!("cannot write {}", output.display());
    match Target::of(output)? {
        Target::Stdout => {
            // One closed when lanes started (`>&-`) cannot be written, and says so.
            let mut stdout = crate::output::sink::stdout_destination();
            // A reader that stopped reading (`| head`) ends the timeline quietly.
            if let Err(err) = write_to(report, events, name, format, output, &mut *stdout) {
                let broken_pipe = err.chain().any(|cause| {
                    cause
                        .downcast_ref::<std::io::Error>()
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
                });
                if !broken_pipe {
                    return Err(err);
                }
            }
        }
        Target::Direct(path) => {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .with_context(cannot)?;
            write_to(report, events, name, format, output, &mut file)?;
        }
        Target::Replace(path, permissions) => {
            let dir = crate::containing_dir::containing_dir(&path);
            let mut file = tempfile::NamedTempFile::new_in(dir)
                .map_err(without_temporary_name)
                .with_context(cannot)?;
            write_to(report, events, name, format, output, file.as_file_mut())?;
            // An existing file keeps its permission bits; a new one is readable by others, as
            // a file written with the usual umask is (a temporary file is private).
            let permissions =
                permissions.unwrap_or_else(|| std::os::unix::fs::PermissionsExt::from_mode(0o644));
            std::fs::set_permissions(file.path(), permissions).with_context(cannot)?;
            file.persist(&path)
                .map_err(|err| without_temporary_name(err.error))
                .with_context(cannot)?;
        }
    }
    Ok(())
}

/// The error without the name of the temporary file it befell, a name the user never gave:
/// the `tempfile` crate's errors end in ` at path "…"`.
fn without_temporary_name(err: std::io::Error) -> std::io::Error {
    let text = err.to_string();
    match text.split_once(" at path ") {
        Some((bare, _)) => std::io::Error::new(err.kind(), bare.to_owned()),
        None => err,
    }
}

/// Writes the timeline into `sink`, buffered (`output` names it in errors).
fn write_to(
    report: &Path,
    events: Option<&Path>,
    name: &Path,
    format: Format,
    output: &Path,
    sink: &mut dyn Write,
) -> anyhow::Result<()> {
    let cannot = || format!("cannot write {}", output.display());
    let mut out = BufWriter::with_capacity(1 << 16, sink);
    match format {
        Format::Trace => {
            if let Some(events) = events {
                let first = model::FirstPass::read(report)?;
                events::read(events, &first)?;
            }
            match trace::write(report, name, &mut out) {
                Ok(()) => {}
                Err(trace::TraceError::Read(err)) => return Err(err.into()),
                Err(trace::TraceError::Write(err)) => return Err(err).with_context(cannot),
            }
        }
        Format::Html => {
            let mut timeline = model::build(report, events)?;
            timeline.figures.report = name.display().to_string();
            html::write(&timeline, &mut out).with_context(cannot)?;
        }
        Format::Markdown => {
            let mut timeline = model::build(report, events)?;
            timeline.figures.report = name.display().to_string();
            markdown::write(&timeline, &mut out).with_context(cannot)?;
        }
    }
    out.flush().with_context(cannot)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_error_names_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let err = tempfile::NamedTempFile::new_in(&missing).unwrap_err();
        assert!(err.to_string().contains(".tmp"), "{err}");
        let bare = super::without_temporary_name(err);
        assert!(!bare.to_string().contains(".tmp"), "{bare}");
        assert_eq!(bare.kind(), std::io::ErrorKind::NotFound);
    }
}
