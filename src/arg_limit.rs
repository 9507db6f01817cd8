//! How long one argument of a command may be: every job runs as `SHELL -c COMMAND`, so its
//! whole command (with `--command`, the expanded template of its batch) is one argument of
//! `execve(2)`, and so is each `NAME=value` of its environment (`LANES_KEY`).
//!
//! Linux bounds a single argument or environment string by `MAX_ARG_STRLEN`, 32 pages
//! (128 KiB with 4 KiB pages), terminating NUL included (`include/uapi/linux/binfmts.h`), and all
//! of them together by `ARG_MAX` (`sysconf(_SC_ARG_MAX)`, a quarter of the stack limit). A
//! longer argument fails every start with `E2BIG`, so longer input is refused when it is read.

use nix::unistd::{sysconf, SysconfVar};

/// Pages in `MAX_ARG_STRLEN` (Linux, `include/uapi/linux/binfmts.h`).
const MAX_ARG_STRLEN_PAGES: usize = 32;

/// The most bytes one argument can hold, without its terminating NUL: `MAX_ARG_STRLEN - 1`,
/// or less when `ARG_MAX` is smaller (a small stack limit). Read from the system once.
pub(crate) fn max_argument_bytes() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        let page = sysconf(SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(4096);
        let strlen = page.saturating_mul(MAX_ARG_STRLEN_PAGES);
        let arg_max = sysconf(SysconfVar::ARG_MAX)
            .ok()
            .flatten()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(usize::MAX);
        strlen.min(arg_max).saturating_sub(1)
    })
}

/// The most bytes of a job's key: its environment holds it as `LANES_KEY=KEY`, one string
/// bounded like an argument.
pub(crate) fn max_key_bytes() -> usize {
    max_argument_bytes().saturating_sub("LANES_KEY=".len())
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_argument_holds_at_least_the_classic_limit() {
        // 4 KiB pages give 131071; larger pages more. ARG_MAX is at least 128 KiB (POSIX
        // allows less, Linux never goes below 32 pages).
        assert!(super::max_argument_bytes() >= 131_071);
    }
}
