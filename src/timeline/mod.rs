//! `lanes timeline REPORT [--events EVENTS] -o OUT [--format html|json|md]`: a run drawn from
//! its report: an HTML page ([`html`]), a Chrome trace ([`trace`]) or Markdown with a Mermaid
//! Gantt chart ([`markdown`]). The report is read line by line, twice at most ([`model`]), so
//! that a report of a million jobs is drawn in bounded memory; OUT is written whole or not at
//! all (a temporary file renamed into place).

mod events;
mod html;
mod markdown;
mod model;
mod report;
mod trace;

use std::io::{BufWriter, Write};
use std::path::Path;

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

/// Writes the timeline of the report at `report` to `output`.
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
    let dir = match output.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let mut file = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write {}", output.display()))?;
    {
        let mut out = BufWriter::with_capacity(1 << 16, file.as_file_mut());
        match format {
            Format::Trace => {
                if let Some(events) = events {
                    let first = model::FirstPass::read(report)?;
                    events::read(events, &first)?;
                }
                trace::write(report, &mut out)?;
            }
            Format::Html | Format::Markdown => {
                let timeline = model::build(report, events)?;
                if format == Format::Html {
                    html::write(&timeline, &mut out)
                } else {
                    markdown::write(&timeline, &mut out)
                }
                .with_context(|| format!("cannot write {}", output.display()))?;
            }
        }
        out.flush()
            .with_context(|| format!("cannot write {}", output.display()))?;
    }
    // Readable by others, as a file written with the usual umask is (a temporary file is
    // private).
    let _ = std::fs::set_permissions(
        file.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    );
    file.persist(output)
        .with_context(|| format!("cannot write {}", output.display()))?;
    Ok(())
}
