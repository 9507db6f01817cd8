//! What `lanes` tells about a run: the JSON Lines report and the human summary.

pub(crate) mod entry;
pub(crate) mod events;
pub(crate) mod human;
pub(crate) mod json;
pub(crate) mod junit;
pub(crate) mod ledger;
pub(crate) mod mirror;
pub(crate) mod progress;
pub(crate) mod recorder;
pub(crate) mod status;
mod terminal;

pub(crate) use terminal::stderr_echoes;

/// What names the jobs that had no key (lines rejected before a key was read) where keys name
/// things: a JUnit suite, a timeline's row.
pub(crate) const NO_KEY: &str = "(no key)";

/// Whether `key` is to be shown quoted where [`NO_KEY`] may stand beside it: it reads as that
/// name, or begins with a quote (and could read as a quoted one), so that no key and no two
/// keys look alike.
pub(crate) fn shown_quoted(key: &str) -> bool {
    key == NO_KEY || key.starts_with('"')
}
