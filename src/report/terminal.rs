//! The terminal the live display is drawn on: how `indicatif` writes its frames there
//! ([`Rows`]: no row of an earlier frame left behind, whatever the terminal did on a resize),
//! and the terminal's echo, off while the display is drawn ([`Echo`]).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use console::measure_text_width;
use indicatif::{ProgressDrawTarget, TermLike};

/// How often the display is redrawn at most, per second.
const REFRESH_HZ: u8 = 10;

/// Where the display is drawn: stderr when it is a terminal, through [`Rows`].
pub(super) fn draw_target() -> ProgressDrawTarget {
    let term = console::Term::stderr();
    if term.is_term() {
        ProgressDrawTarget::term_like_with_hz(
            Box::new(Rows {
                term,
                ended: AtomicBool::new(false),
                drawn: Mutex::new(Drawn::default()),
                gone: AtomicBool::new(false),
            }),
            REFRESH_HZ,
        )
    } else {
        ProgressDrawTarget::hidden()
    }
}

/// The terminal as `indicatif` draws on it (in its "move the cursor" mode: up to the frame's
/// first row, then each line over the last frame's), with three changes, so that no row of an
/// earlier frame stays behind:
/// - `indicatif` ends each line with spaces up to the last column and lets the terminal wrap
///   onto the next row, which marks the row as wrapped for terminals that reflow wrapped rows
///   when resized (VTE). Here each line ends with "erase to the end of the row", and the next
///   line starts on a new row (`\r\n`).
/// - A terminal that narrows breaks the last frame's lines into more rows (tmux reflows every
///   line wider than the new width). The first move up after a resize counts the rows the last
///   frame's lines take at the new width.
/// - Each frame ends with "erase below": a frame shorter than the last leaves nothing under it
///   (nothing is ever written below the display).
///
/// A terminal that is gone (hung up: EIO; its reader closed: EPIPE) is not written to again,
/// and no error of a write reaches `indicatif`, which panics on one where it clears and draws
/// around a line written under the display (`MultiProgress::suspend`).
#[derive(Debug)]
struct Rows {
    term: console::Term,
    /// A line was ended: the next text starts on a new row.
    ended: AtomicBool,
    drawn: Mutex<Drawn>,
    /// A write failed for good: nothing more is written.
    gone: AtomicBool,
}

/// The lines of the last frame drawn, and the width they were drawn at.
#[derive(Debug, Default)]
struct Drawn {
    width: u16,
    /// The widths of the last frame's lines, in columns.
    lines: Vec<usize>,
    /// The lines of the frame being drawn.
    drawing: Vec<usize>,
}

impl Rows {
    /// Writes through `write` unless the terminal is gone; an error is kept from the caller,
    /// and one that says the terminal is gone for good (EIO, EPIPE, ENXIO, EBADF) ends the
    /// writing.
    fn write(&self, write: impl FnOnce(&console::Term) -> io::Result<()>) -> io::Result<()> {
        if self.gone.load(Ordering::Relaxed) {
            return Ok(());
        }
        if let Err(err) = write(&self.term) {
            if matches!(
                err.raw_os_error(),
                Some(nix::libc::EIO | nix::libc::EPIPE | nix::libc::ENXIO | nix::libc::EBADF)
            ) {
                self.gone.store(true, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// The cursor moves: no line waits for its new row.
    fn moved(&self) {
        self.ended.store(false, Ordering::Relaxed);
    }

    fn drawn(&self) -> std::sync::MutexGuard<'_, Drawn> {
        self.drawn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl TermLike for Rows {
    fn width(&self) -> u16 {
        self.term.size().1
    }

    fn height(&self) -> u16 {
        self.term.size().0
    }

    fn move_cursor_up(&self, n: usize) -> io::Result<()> {
        self.moved();
        let width = self.width();
        let mut drawn = self.drawn();
        let mut up = n;
        if width != drawn.width && width > 0 && !drawn.lines.is_empty() {
            // The last frame's lines, as the terminal has laid them out again.
            let rows: usize = drawn
                .lines
                .iter()
                .map(|&line| line.div_ceil(usize::from(width)).max(1))
                .sum();
            up = rows - 1;
            drawn.width = width;
        }
        self.write(|term| term.move_cursor_up(up))
    }

    fn move_cursor_down(&self, n: usize) -> io::Result<()> {
        self.moved();
        self.write(|term| term.move_cursor_down(n))
    }

    fn move_cursor_right(&self, n: usize) -> io::Result<()> {
        self.write(|term| term.move_cursor_right(n))
    }

    fn move_cursor_left(&self, n: usize) -> io::Result<()> {
        self.write(|term| term.move_cursor_left(n))
    }

    fn write_line(&self, s: &str) -> io::Result<()> {
        self.moved();
        self.write(|term| term.write_line(s))
    }

    fn write_str(&self, s: &str) -> io::Result<()> {
        if s.bytes().all(|b| b == b' ') {
            // The padding after a line.
            self.ended.store(true, Ordering::Relaxed);
            return self.write(|term| term.write_str("\x1b[K"));
        }
        if s != "\r" && self.ended.swap(false, Ordering::Relaxed) {
            self.write(|term| term.write_str("\r\n"))?;
        }
        if s != "\r" {
            self.drawn().drawing.push(measure_text_width(s));
        }
        self.write(|term| term.write_str(s))
    }

    fn clear_line(&self) -> io::Result<()> {
        self.write(console::Term::clear_line)
    }

    fn flush(&self) -> io::Result<()> {
        // The end of a frame.
        let width = self.width();
        let mut drawn = self.drawn();
        drawn.lines = std::mem::take(&mut drawn.drawing);
        drawn.width = width;
        if !drawn.lines.is_empty() {
            self.write(|term| term.write_str("\x1b[J"))?;
        }
        self.write(console::Term::flush)
    }
}

/// The terminal's echo, turned off on stderr's terminal while the display is drawn, and its
/// settings before, to put back. Only ever touched while `lanes` is in the terminal's
/// foreground: changing a terminal's settings from the background would stop `lanes`
/// (SIGTTOU).
pub(super) struct Echo {
    saved: nix::sys::termios::Termios,
}

impl Echo {
    /// Turns echo off, when stderr is a terminal of which `lanes` is in the foreground.
    pub(super) fn off() -> Option<Echo> {
        use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, SetArg};
        let stderr = std::io::stderr();
        without_sigttou(|| {
            if !in_foreground(&stderr) {
                return None;
            }
            let saved = tcgetattr(&stderr).ok()?;
            if !saved.local_flags.contains(LocalFlags::ECHO) {
                return None;
            }
            let mut quiet = saved.clone();
            quiet.local_flags.remove(LocalFlags::ECHO);
            tcsetattr(&stderr, SetArg::TCSANOW, &quiet).ok()?;
            Some(Echo { saved })
        })
    }

    /// Whether the terminal echoes again although this turned echo off: someone else (a shell
    /// that had the terminal while `lanes` was stopped) set its own settings meanwhile.
    pub(super) fn turned_back_on(&self) -> bool {
        use nix::sys::termios::{tcgetattr, LocalFlags};
        tcgetattr(std::io::stderr()).is_ok_and(|now| now.local_flags.contains(LocalFlags::ECHO))
    }

    /// Puts the settings back, when `lanes` is still in the foreground (a shell that took the
    /// terminal back sets its own).
    pub(super) fn restore(self) {
        use nix::sys::termios::{tcgetattr, tcsetattr, LocalFlags, SetArg};
        let stderr = std::io::stderr();
        without_sigttou(|| {
            if !in_foreground(&stderr) {
                return;
            }
            // Only echo is given back: other settings may have been changed meanwhile.
            if let Ok(mut now) = tcgetattr(&stderr) {
                now.local_flags.set(
                    LocalFlags::ECHO,
                    self.saved.local_flags.contains(LocalFlags::ECHO),
                );
                let _ = tcsetattr(&stderr, SetArg::TCSANOW, &now);
            }
        });
    }
}

/// Whether stderr is a terminal that echoes what is typed: Ctrl-C there leaves `^C`, after
/// anything half typed, where the cursor is.
pub(crate) fn stderr_echoes() -> bool {
    use nix::sys::termios::{tcgetattr, LocalFlags};
    use std::io::IsTerminal as _;
    std::io::stderr().is_terminal()
        && tcgetattr(std::io::stderr()).is_ok_and(|t| t.local_flags.contains(LocalFlags::ECHO))
}

/// Whether `lanes` is in the foreground of the terminal `fd` is: `None` when that cannot be
/// told, because `fd` is no terminal, or because `lanes`' process group cannot be seen (in a
/// PID namespace that its group's leader is outside of, `unshare --pid --fork lanes …`,
/// `getpgrp` and `tcgetpgrp` both give 0 whoever is in the foreground).
fn foreground(fd: &std::io::Stderr) -> Option<bool> {
    let own = nix::unistd::getpgrp();
    if own.as_raw() == 0 {
        return None;
    }
    nix::unistd::tcgetpgrp(fd).ok().map(|group| group == own)
}

/// Whether `lanes` is known to be in the foreground of the terminal `fd` is ([`foreground`]).
fn in_foreground(fd: &std::io::Stderr) -> bool {
    foreground(fd) == Some(true)
}

/// Whether `lanes` is known to be in the background of its terminal (stderr): the terminal's
/// foreground process group is another's (`lanes … &`, or `bg` after Ctrl-Z). Not when that
/// cannot be told ([`foreground`]).
pub(super) fn in_background() -> bool {
    foreground(&std::io::stderr()) == Some(false)
}

/// Runs `f` with SIGTTOU blocked in the calling thread: a terminal's settings changed from the
/// background are then changed (tcsetattr(3)) instead of stopping lanes in the middle of the
/// call. `f` checks [`in_foreground`] first; blocking closes the moment between that check and
/// the change in which a shell could take the terminal back (after Ctrl-Z, as soon as the rest
/// of lanes' job has stopped). A stop there would be undone by `fg`, after which lanes would
/// stop itself again, for good.
fn without_sigttou<T>(f: impl FnOnce() -> T) -> T {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal};
    let earlier = SigSet::from(Signal::SIGTTOU).thread_swap_mask(SigmaskHow::SIG_BLOCK);
    let result = f();
    if let Ok(earlier) = earlier {
        let _ = earlier.thread_set_mask();
    }
    result
}
