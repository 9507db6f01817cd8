//! What `lanes` tells about a run: the JSON Lines report and the human summary.

pub mod entry;
pub mod events;
pub mod human;
pub mod json;
pub mod junit;
pub mod progress;
pub mod recorder;
