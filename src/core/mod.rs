//! The pure scheduling core: lanes, the ready line, the cap, slots and turn deadlines.
//!
//! Nothing in here spawns, sleeps, reads a clock or prints. Time comes in as [`Tick`] values
//! (time since the run started); the shell applies the decisions returned.

mod outcome;
mod state;
mod transition;

pub use outcome::{classify, ExitFacts, FailReason, Outcome, RejectReason, StopReason};
pub use state::{JobRequest, Limits, Policy, Scheduler, Seq, Tick};
pub use transition::{Admission, Drained, Expired, Released, Start};
#[cfg(test)]
mod tests;
