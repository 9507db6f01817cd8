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
