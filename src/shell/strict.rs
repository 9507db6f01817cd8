//! `--strict`: the whole input is read and checked before anything starts (SPEC §1.1), in
//! bounded memory. The lines are copied, as read, to an unnamed temporary file (in `TMPDIR`),
//! which the run then reads as its input; only the line being checked is held in memory
//! ([`LineReader`] bounds it). A stop signal while checking ends the wait at once; Ctrl-Z
//! stops `lanes` at once.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context as _};
use nix::sys::signal::Signal;

use super::input::{Commands, Feed};
use super::signal::{
    hold_watched, next_signal, terminal_stop_requested, StopSignals, TerminalStop,
};
use crate::input::arguments::{RecordFormat, RecordReader};
use crate::input::lines::LineItem;

/// What checking the input came to.
pub(crate) enum Checked {
    /// Every line is valid: the run reads them from here.
    Valid(Feed),
    /// A stop signal came first, after `lines` lines (blank lines and comments not counted)
    /// were checked, none of them invalid. The reading is abandoned.
    Interrupted {
        /// The stop signal.
        signal: Signal,
        /// Lines checked.
        lines: u64,
    },
}

/// Reads and checks all of `reader` (named `source` in messages) on a thread of its own while
/// waiting for it, or for a stop signal on `signals`. Must run inside the tokio runtime.
///
/// # Errors
/// The first invalid line (its line number and why), a read error, or no room for the copy;
/// nothing has run.
pub(crate) async fn check(
    reader: Box<dyn BufRead + Send>,
    source: String,
    format: RecordFormat,
    commands: Commands,
    signals: &mut Option<StopSignals>,
) -> anyhow::Result<Checked> {
    let checked = Arc::new(AtomicU64::new(0));
    let (tx, rx) = tokio::sync::oneshot::channel();
    let counter = Arc::clone(&checked);
    std::thread::Builder::new()
        .name("lanes-strict".into())
        .spawn(move || {
            let _ = tx.send(check_all(reader, &source, format, commands, &counter));
        })
        .context("cannot start the thread that checks the input")?;
    // Ctrl-Z while checking: nothing has started, so lanes stops at once, as any program would
    // (a producer stopped with it would otherwise leave lanes waiting for its input, holding
    // the terminal).
    let terminal_stop = TerminalStop::listen_or_release();
    let mut rx = rx;
    let checked = loop {
        tokio::select! {
            biased;
            Some(signal) = next_signal(signals) => break Ok(Checked::Interrupted {
                signal,
                lines: checked.load(Ordering::Relaxed),
            }),
            Some(stop) = terminal_stop_requested(&terminal_stop) => stop.stop_if_still_requested(),
            result = &mut rx => break match result {
                Ok(result) => result.map(Checked::Valid),
                Err(_) => Err(anyhow::anyhow!(
                    "the check of the input (--strict) ended without an answer"
                )),
            },
        }
    };
    if terminal_stop.is_none() {
        hold_watched();
    }
    checked
}

/// Checks every line, copying them to a temporary file while all are valid; counts the lines
/// checked in `checked`. The whole input is read even past an invalid line, so that a
/// producer writing into a pipe is never cut off with EPIPE (SPEC §1.1); only the first
/// invalid line is named.
fn check_all(
    reader: Box<dyn BufRead + Send>,
    source: &str,
    format: RecordFormat,
    commands: Commands,
    checked: &AtomicU64,
) -> anyhow::Result<Feed> {
    let file = tempfile::tempfile().with_context(|| {
        format!(
            "cannot create a temporary file in {} (TMPDIR, else /tmp) to hold the input for \
             --strict",
            std::env::temp_dir().display()
        )
    })?;
    let mut spool = Spool {
        input: reader,
        copy: BufWriter::with_capacity(64 * 1024, file),
        error: None,
    };
    let mut first_invalid = None;
    for numbered in RecordReader::new(&mut spool, format.clone()) {
        let numbered = numbered.context("cannot read the input")?;
        let invalid = match numbered.item {
            LineItem::Invalid { message, .. } => Some(message),
            LineItem::Job { key, command } => commands.too_long(&command, &key, numbered.seq),
        };
        if let Some(message) = invalid {
            first_invalid = Some((numbered.line, message));
            break;
        }
        checked.store(numbered.seq, Ordering::Relaxed);
    }
    if let Some((line, message)) = first_invalid {
        // The rest is read and dropped.
        std::io::copy(&mut spool.input, &mut std::io::sink()).context("cannot read the input")?;
        bail!("{source}:{line}: {message} (--strict: nothing was run)");
    }
    if let Some(err) = spool.error {
        return Err(err).context("cannot copy the input for --strict to a temporary file");
    }
    let mut file = spool
        .copy
        .into_inner()
        .map_err(std::io::IntoInnerError::into_error)
        .context("cannot copy the input for --strict to a temporary file")?;
    file.rewind()
        .context("cannot read back the input copied for --strict")?;
    let copy = Box::new(BufReader::with_capacity(64 * 1024, file));
    Ok(if format.is_tab_lines() && !format.hint_no_tab {
        Feed::Lines(copy)
    } else {
        Feed::Records(Box::new(RecordReader::new(copy, format)))
    })
}

/// A reader that copies every byte consumed from `input` to `copy`; the first write error is
/// kept in `error` (and nothing more is copied).
struct Spool {
    input: Box<dyn BufRead + Send>,
    copy: BufWriter<File>,
    error: Option<std::io::Error>,
}

impl Read for Spool {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Spool {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        self.input.fill_buf()
    }

    fn consume(&mut self, amount: usize) {
        if amount > 0 && self.error.is_none() {
            // The buffer still holds what is consumed: `fill_buf` reads nothing new here.
            match self.input.fill_buf() {
                Ok(buffered) => {
                    let end = amount.min(buffered.len());
                    if let Err(err) = self.copy.write_all(&buffered[..end]) {
                        self.error = Some(err);
                    }
                }
                Err(err) => self.error = Some(err),
            }
        }
        self.input.consume(amount);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::lines::LineReader;

    /// Lines run as they are: no template to make them longer.
    fn no_template() -> Commands {
        Commands {
            template: None,
            max_slot: 1,
            default_needs: None,
        }
    }

    /// The default input form: `KEY<TAB>COMMAND` lines.
    fn tab_lines() -> RecordFormat {
        RecordFormat {
            delimiter: b'\n',
            key: None,
            hint_no_tab: false,
            columns: None,
            whole_commands: false,
        }
    }

    fn lines_of(feed: Feed) -> Vec<(u64, u64, LineItem)> {
        let Feed::Lines(reader) = feed else {
            panic!("not lines");
        };
        LineReader::new(reader)
            .map(|line| {
                let line = line.unwrap();
                (line.seq, line.line, line.item)
            })
            .collect()
    }

    #[test]
    fn valid_input_is_read_back_with_the_same_numbering() {
        let input = "\u{feff}a\techo 1\n\n# c\nb\techo 2\r\nc\techo 3";
        let reader = Box::new(BufReader::with_capacity(3, input.as_bytes()));
        let checked = AtomicU64::new(0);
        let feed = check_all(reader, "-", tab_lines(), no_template(), &checked).unwrap();
        let want = lines_of(Feed::Lines(Box::new(input.as_bytes())));
        assert_eq!(lines_of(feed), want);
        assert_eq!(want.len(), 3);
        assert_eq!(checked.load(Ordering::Relaxed), 3);
    }

    /// Counts the bytes read from it.
    struct Counting(std::io::Cursor<Vec<u8>>, Arc<AtomicU64>);

    impl Read for Counting {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.0.read(out)?;
            self.1.fetch_add(n as u64, Ordering::Relaxed);
            Ok(n)
        }
    }

    #[test]
    fn the_first_invalid_line_is_named_and_the_rest_is_read() {
        let input = b"a\techo 1\nno tab\nalso no tab\nb\techo 2\n".to_vec();
        let (size, read) = (input.len() as u64, Arc::new(AtomicU64::new(0)));
        let reader = Counting(std::io::Cursor::new(input), Arc::clone(&read));
        let checked = AtomicU64::new(0);
        let err = check_all(
            Box::new(BufReader::new(reader)),
            "jobs.tsv",
            tab_lines(),
            no_template(),
            &checked,
        )
        .err()
        .unwrap();
        assert!(err.to_string().starts_with("jobs.tsv:2: no tab"), "{err}");
        assert_eq!(read.load(Ordering::Relaxed), size);
    }
}
