//! Whether lanes' stdin (descriptor 0) was closed when it started (`lanes … <&-`, a pipeline
//! that lost its producer): noted by lanes' first code, before Rust's start-up puts
//! `/dev/null` there, so that whatever would read stdin refuses it rather than take it for an
//! empty input.

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether descriptor 0 was closed when lanes started (`lanes … <&-`), before Rust's start-up
/// put `/dev/null` there ([`note`]): read, it would give no job and no word.
static STDIN_CLOSED: AtomicBool = AtomicBool::new(false);

/// Notes whether descriptor 0 is closed. For lanes' first code (an ELF constructor), as
/// [`crate::output::sink::note_closed_stdout`] is.
pub(crate) fn note() {
    // SAFETY: `fcntl(F_GETFD)` reads a descriptor's flags; it touches no memory of ours.
    let closed = unsafe { nix::libc::fcntl(nix::libc::STDIN_FILENO, nix::libc::F_GETFD) } == -1;
    STDIN_CLOSED.store(closed, Ordering::Relaxed);
}

/// Why stdin cannot be read, when descriptor 0 was closed at start: whatever reads it (jobs,
/// `--manifest -`, `lanes submit`, `lanes timeline -`) refuses it rather than take it for an
/// empty input.
pub(crate) fn refusal() -> Option<&'static str> {
    STDIN_CLOSED
        .load(Ordering::Relaxed)
        .then_some("it was closed when lanes started (`<&-`)")
}

/// When `path` names lanes' stdin (`/dev/stdin`, `/dev/fd/0`, `/proc/self/fd/0`) and descriptor
/// 0 was closed at start: the error to refuse it with, as stdin itself is refused
/// ([`refusal`]), rather than read the `/dev/null` put there as an empty file.
pub(crate) fn named_by(path: &std::path::Path) -> Option<std::io::Error> {
    const NAMES: [&str; 3] = ["/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"];
    let names_stdin = NAMES.iter().any(|name| path == std::path::Path::new(name));
    refusal().filter(|_| names_stdin).map(|_| {
        std::io::Error::other("it names stdin, which was closed when lanes started (`<&-`)")
    })
}
