//! How a job ended: the five outcomes, their reasons, and the rule that maps exit facts to them.

use serde::Serialize;

/// What the operating system said about a job's direct child when it was reaped
/// (`waitpid(2)`: `WIFEXITED`/`WEXITSTATUS`, `WIFSIGNALED`/`WTERMSIG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitFacts {
    /// Exited normally with this exit status (0..=255).
    Exited(i32),
    /// Terminated by this signal number.
    Signaled(i32),
}

/// Why `lanes` itself stopped a running job or dropped a waiting one. The first cause wins:
/// a job already being stopped for its timeout keeps `Timeout` when a shutdown follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The job ran past its turn timeout.
    Timeout,
    /// `lanes` received SIGINT, SIGTERM or SIGHUP.
    Shutdown,
    /// Another job failed under `--fail-fast`.
    FailFast,
    /// A newer job of the same key replaced it (`--coalesce`, `--cancel-in-progress`).
    Superseded,
    /// `lanes cancel KEY` asked for its key's jobs to be dropped and stopped (`lanes serve`).
    Cancelled,
    /// It was running when its `lanes serve` ended without recording it (killed, crashed);
    /// the next server on the same journal records it so (`lanes serve`).
    ServerLost,
    /// Its key's fleet-wide lock (`--coordinate`) was lost while it ran: the database session
    /// that held it ended (server restart, `pg_terminate_backend`, network) or stopped
    /// answering, so another host may take the key.
    LockLost,
}

/// Why a job counts as failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailReason {
    /// The direct child exited with a non-zero exit status.
    ExitStatus,
    /// The direct child was terminated by a signal `lanes` did not send (e.g. SIGSEGV).
    Killed,
    /// The job could not be started (missing `cwd`, shell not found, exec error).
    SpawnError,
}

/// Why a job was refused before it could be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RejectReason {
    /// The input line is malformed (no tab, empty key or command, not UTF-8).
    InvalidInput,
    /// `--on-full reject` and `--max-queued` jobs were already waiting.
    QueueFull,
}

/// Why `--resume` did not run a job again: what the report resumed from says of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// It succeeded there (or was skipped there for that reason).
    SucceededBefore,
    /// A newer job of its key replaced it there (`--coalesce latest`, `--cancel-in-progress`;
    /// or it was skipped there for that reason): it never ran to its end, and is not run
    /// after that newer job.
    SupersededBefore,
}

/// The one outcome every job ends with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It ran and its direct child exited 0.
    Succeeded,
    /// It ran (or could not start) and did not succeed.
    Failed(FailReason),
    /// `lanes` stopped it, or it never ran because the run stopped or a newer job replaced it.
    Interrupted(StopReason),
    /// It was refused before it could be queued.
    Rejected(RejectReason),
    /// `--resume`: the report resumed from holds it as done, so it was not run again.
    Skipped(SkipReason),
}

impl Outcome {
    /// Every outcome with every reason, in declaration order: the `outcome` and `reason` words
    /// the report schema allows, and which reasons go with which outcome.
    pub const ALL: [Outcome; 15] = [
        Outcome::Succeeded,
        Outcome::Failed(FailReason::ExitStatus),
        Outcome::Failed(FailReason::Killed),
        Outcome::Failed(FailReason::SpawnError),
        Outcome::Interrupted(StopReason::Timeout),
        Outcome::Interrupted(StopReason::Shutdown),
        Outcome::Interrupted(StopReason::FailFast),
        Outcome::Interrupted(StopReason::Superseded),
        Outcome::Interrupted(StopReason::Cancelled),
        Outcome::Interrupted(StopReason::ServerLost),
        Outcome::Interrupted(StopReason::LockLost),
        Outcome::Rejected(RejectReason::InvalidInput),
        Outcome::Rejected(RejectReason::QueueFull),
        Outcome::Skipped(SkipReason::SucceededBefore),
        Outcome::Skipped(SkipReason::SupersededBefore),
    ];

    /// The report's `outcome` word.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed(_) => "failed",
            Outcome::Interrupted(_) => "interrupted",
            Outcome::Rejected(_) => "rejected",
            Outcome::Skipped(_) => "skipped",
        }
    }

    /// The report's `reason` word; `None` for a success.
    pub fn reason(self) -> Option<&'static str> {
        Some(match self {
            Outcome::Succeeded => return None,
            Outcome::Failed(FailReason::ExitStatus) => "exit_status",
            Outcome::Failed(FailReason::Killed) => "killed",
            Outcome::Failed(FailReason::SpawnError) => "spawn_error",
            Outcome::Interrupted(StopReason::Timeout) => "timeout",
            Outcome::Interrupted(StopReason::Shutdown) => "shutdown",
            Outcome::Interrupted(StopReason::FailFast) => "fail_fast",
            Outcome::Interrupted(StopReason::Superseded) => "superseded",
            Outcome::Interrupted(StopReason::Cancelled) => "cancelled",
            Outcome::Interrupted(StopReason::ServerLost) => "server_lost",
            Outcome::Interrupted(StopReason::LockLost) => "lock_lost",
            Outcome::Rejected(RejectReason::InvalidInput) => "invalid_input",
            Outcome::Rejected(RejectReason::QueueFull) => "queue_full",
            Outcome::Skipped(SkipReason::SucceededBefore) => "succeeded_before",
            Outcome::Skipped(SkipReason::SupersededBefore) => "superseded_before",
        })
    }

    /// Whether this outcome makes the run's exit status 1 (SPEC §6): everything but a success,
    /// a job superseded under `--coalesce`/`--cancel-in-progress`, a job `lanes cancel`
    /// cancelled (asked for, as a superseded one is) and a job `--resume` skipped.
    pub fn is_bad(self) -> bool {
        !matches!(
            self,
            Outcome::Succeeded
                | Outcome::Interrupted(StopReason::Superseded | StopReason::Cancelled)
                | Outcome::Skipped(_)
        )
    }
}

/// Maps what happened to a started job to its outcome.
///
/// `stopped_before_exit` is the reason `lanes` signalled the job's process group while its
/// direct child was still running; such a job is `interrupted` whatever its exit status
/// (SPEC §4). Otherwise exit status 0 is a success, any other status a failure, and death by a
/// signal `lanes` did not send is `failed`/`killed`.
pub fn classify(exit: ExitFacts, stopped_before_exit: Option<StopReason>) -> Outcome {
    if let Some(reason) = stopped_before_exit {
        return Outcome::Interrupted(reason);
    }
    match exit {
        ExitFacts::Exited(0) => Outcome::Succeeded,
        ExitFacts::Exited(_) => Outcome::Failed(FailReason::ExitStatus),
        ExitFacts::Signaled(_) => Outcome::Failed(FailReason::Killed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_decides_without_a_stop() {
        assert_eq!(classify(ExitFacts::Exited(0), None), Outcome::Succeeded);
        assert_eq!(
            classify(ExitFacts::Exited(137), None),
            Outcome::Failed(FailReason::ExitStatus)
        );
        assert_eq!(
            classify(ExitFacts::Signaled(15), None),
            Outcome::Failed(FailReason::Killed)
        );
    }

    #[test]
    fn a_stop_wins_over_any_exit_status() {
        for exit in [ExitFacts::Exited(0), ExitFacts::Signaled(9)] {
            assert_eq!(
                classify(exit, Some(StopReason::Timeout)),
                Outcome::Interrupted(StopReason::Timeout)
            );
        }
    }

    #[test]
    fn all_lists_every_outcome_and_reason_once() {
        // Exhaustive: a new outcome or reason does not compile here until it is numbered; list
        // it in `ALL` at that position (the report schema's words come from `ALL`).
        let position = |outcome: Outcome| match outcome {
            Outcome::Succeeded => 0,
            Outcome::Failed(FailReason::ExitStatus) => 1,
            Outcome::Failed(FailReason::Killed) => 2,
            Outcome::Failed(FailReason::SpawnError) => 3,
            Outcome::Interrupted(StopReason::Timeout) => 4,
            Outcome::Interrupted(StopReason::Shutdown) => 5,
            Outcome::Interrupted(StopReason::FailFast) => 6,
            Outcome::Interrupted(StopReason::Superseded) => 7,
            Outcome::Interrupted(StopReason::Cancelled) => 8,
            Outcome::Interrupted(StopReason::ServerLost) => 9,
            Outcome::Interrupted(StopReason::LockLost) => 10,
            Outcome::Rejected(RejectReason::InvalidInput) => 11,
            Outcome::Rejected(RejectReason::QueueFull) => 12,
            Outcome::Skipped(SkipReason::SucceededBefore) => 13,
            Outcome::Skipped(SkipReason::SupersededBefore) => 14,
        };
        for (i, &outcome) in Outcome::ALL.iter().enumerate() {
            assert_eq!(position(outcome), i, "{outcome:?}");
        }
    }

    #[test]
    fn superseded_is_not_bad_but_other_interruptions_are() {
        assert!(!Outcome::Interrupted(StopReason::Superseded).is_bad());
        assert!(Outcome::Interrupted(StopReason::Shutdown).is_bad());
        assert!(Outcome::Rejected(RejectReason::QueueFull).is_bad());
        assert!(!Outcome::Skipped(SkipReason::SupersededBefore).is_bad());
        assert_eq!(Outcome::Succeeded.reason(), None);
        assert_eq!(
            Outcome::Failed(FailReason::SpawnError).reason(),
            Some("spawn_error")
        );
    }
}
