//! The pure scheduling core: every decision about starting and stopping jobs.
//!
//! Nothing in here spawns, sleeps, reads a clock or prints. Time comes in as [`Tick`] values
//! (time since the run started); the shell applies the decisions returned, each a
//! `#[must_use]` value. Where each decision lives:
//!
//! - [`intake`]: whether input is read now, and what becomes of each job offered;
//! - [`transition`]: the lanes themselves: admit, take, release, drain, expire;
//! - [`dispatch`]: a taken job's spawn confirmed, deferred after a shortage, or failed;
//! - [`finish`]: a run's end classified, retried, or stopping the run (`--fail-fast`), and
//!   [`account`] the final account every record is written from;
//! - [`shutdown`]: stop signals, turn timeouts and the halt that drains the run;
//! - [`status`]: what runs and waits now, for a status report (SIGUSR1, `lanes status`);
//! - [`cancel`]: `lanes cancel KEY`: a key's waiting jobs dropped, its running job stopped;
//! - [`awaits`]: `lanes submit --wait` from inside a job: whether the wait would come back to
//!   the job asking;
//! - [`cap`]: `lanes set -j N`: the cap changed while jobs run;
//! - [`suspend`]: Ctrl-Z: stopped time counts toward no deadline;
//! - [`hostwide`]: `--lock-dir`: when a key's host-wide lock is asked for and let go;
//! - [`escalation`]: one stopping job's signal, grace period, SIGKILL and leak window;
//! - [`resources`]: weights and named resources: fitting, granting, the no-starvation rule;
//! - [`plan`]: `--dry-run`, the same decisions on a virtual clock;
//! - [`wait`]: why each waiting job waits, and its wait split by cause.

mod account;
mod awaits;
mod cancel;
mod cap;
mod dispatch;
mod escalation;
mod finish;
mod hostwide;
mod intake;
mod outcome;
mod plan;
mod resources;
mod shutdown;
mod state;
mod status;
mod suspend;
mod transition;
mod wait;

pub use account::Account;
pub use cancel::Cancel;
pub use dispatch::{SpawnFailure, SpawnVerdict};
pub use escalation::{Action, Escalation, Event};
pub use finish::{Finished, RunFacts};
pub use hostwide::{HostKeyOrders, HOST_LOOKAHEAD};
pub use intake::{admission_order, Offer};
pub use outcome::{classify, ExitFacts, FailReason, Outcome, RejectReason, SkipReason, StopReason};
pub use plan::{plan, Plan, Planned};
pub use resources::{reserves, Grant, GrantPart, Needs, Resource, Shortage, Stock};
pub use shutdown::{forwarded, Halt, SignalVerdict, StopOrder};
pub use state::{
    JobRequest, Limits, OnFull, Policy, Scheduler, Seq, ShutdownLevel, Tick, Try, BACKOFF_FIRST,
    BACKOFF_MAX,
};
pub use status::{RunningJob, WaitingLane};
pub use transition::{Admission, Drained, Expired, Released, Start};
pub use wait::{WaitCause, WaitChange, WaitSpan};
#[cfg(test)]
mod tests;
