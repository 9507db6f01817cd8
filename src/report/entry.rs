//! One job's final entry: the typed facts every report form is built from (the JSON Lines
//! record, the JUnit test case, the summary line), so that none of them re-reads another's
//! words or timestamps.

use std::time::{Duration, SystemTime};

use super::json::{timestamp, GrantRecord, JobRecord, LockHolder, TryRecord, WaitRecord};
use crate::core::{ExitFacts, Grant, Outcome, WaitCause, WaitSpan};

/// Everything known of a job when its one record is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry<'a> {
    /// 1-based job number in input order.
    pub seq: u64,
    /// 1-based source line (the `[[job]]` header line in a manifest).
    pub line: u64,
    /// `None` for an input line without a tab (or whose key is not UTF-8).
    pub key: Option<&'a str>,
    /// `None` for an invalid input line.
    pub command: Option<&'a str>,
    /// How the job ended.
    pub outcome: Outcome,
    /// How the direct child of its last try ended, when one ran.
    pub exit: Option<ExitFacts>,
    /// Tries made (0 when never started).
    pub attempts: u32,
    /// The slot of its last try, when it started.
    pub slot: Option<u32>,
    /// When its last try started, when it started.
    pub started_at: Option<SystemTime>,
    /// When the record was decided (the end of its last try, for a job that ran).
    pub ended_at: SystemTime,
    /// From the start of its last try to its end, when it started; `ended_at - started_at`,
    /// both read from one clock.
    pub duration: Option<Duration>,
    /// From admission to the start (or to the end, when it never started); `None` for a job
    /// never admitted.
    pub waited: Option<Duration>,
    /// Processes of its group outlived its direct child past the leak window, or held its
    /// pipes open.
    pub leaked: bool,
    /// The newer job that superseded it (`superseded` only).
    pub superseded_by: Option<u64>,
    /// The first job of the batch it ran in (batching only).
    pub batch: Option<u64>,
    /// A message for people: the OS error of a spawn error, why a line is invalid.
    pub error: Option<&'a str>,
    /// The last bytes of its stderr (at most a few KiB), for the summary and JUnit.
    pub stderr_tail: &'a [u8],
    /// The last bytes of the stderr of each of its tries that were retried, oldest first: the
    /// JUnit file's `<flakyFailure>`/`<rerunFailure>` elements (may be fewer than those tries,
    /// e.g. for a start that failed).
    pub retried_tails: &'a [Vec<u8>],
    /// CPU time of its last try's processes, where its cgroup told.
    pub cpu: Option<Duration>,
    /// Peak memory of its last try, in bytes, where its cgroup told.
    pub memory_peak: Option<u64>,
    /// Every try, oldest first (`--retries`); as many as `attempts`.
    pub tries: Vec<TryEntry>,
    /// `--lock-dir` only: its wait for its key's host-wide lock, if it waited.
    pub lock: Option<Option<&'a HostWait>>,
    /// `--lock-dir` only: for a job that never started and was stopped while it waited for its
    /// key, the process that held the key when the wait began (its `lock_holder`).
    pub lock_waited_on: Option<&'a LockHolder>,
    /// The weight and named resources its last try held; `None` for weight 1 and no
    /// resource, or when it did not start.
    pub grant: Option<&'a Grant>,
    /// Its wait (the one `waited` tells of) split by cause, oldest first.
    pub waits: Vec<WaitEntry>,
}

/// One stretch of a job's wait with one cause, for the record's `waits`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WaitEntry {
    /// Why it waited.
    pub cause: WaitCause,
    /// When the cause began.
    pub started_at: SystemTime,
    /// How long, in milliseconds: the spans of a wait add up to its `wait_ms` exactly.
    pub ms: u64,
}

impl WaitEntry {
    /// The entries of a wait beginning at `origin` (tick zero at `zero`): each span's
    /// milliseconds are the difference of its ends' whole milliseconds since the wait began,
    /// so that they add up to the whole wait's, as `wait_ms` rounds it.
    pub(crate) fn of(spans: &[WaitSpan], zero: SystemTime) -> Vec<WaitEntry> {
        let Some(first) = spans.first() else {
            return Vec::new();
        };
        let begun = first.started_at;
        let mut entries: Vec<WaitEntry> = Vec::with_capacity(spans.len());
        for span in spans {
            let ms = millis(span.ended_at.saturating_sub(begun))
                - millis(span.started_at.saturating_sub(begun));
            match entries.last_mut() {
                // Under a millisecond: nothing to tell, and the spans around it may meet.
                _ if ms == 0 => {}
                Some(last) if last.cause == span.cause => last.ms += ms,
                _ => entries.push(WaitEntry {
                    cause: span.cause.clone(),
                    started_at: zero + span.started_at,
                    ms,
                }),
            }
        }
        entries
    }

    fn to_record(&self) -> WaitRecord {
        WaitRecord {
            cause: self.cause.name(),
            behind: self.cause.behind(),
            resource: self.cause.resource().map(str::to_owned),
            started_at: timestamp(self.started_at),
            ms: self.ms,
        }
    }
}

/// One try of a job, for the record's `tries`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TryEntry {
    /// The slot it ran in, when its process started.
    pub slot: Option<u32>,
    /// When its process started; `None` when it could not be started (`spawn_error`).
    pub started_at: Option<SystemTime>,
    /// When it ended.
    pub ended_at: SystemTime,
    /// From its start to its end, when it started; `ended_at - started_at`.
    pub duration: Option<Duration>,
    /// How it ended: `failed` for a try that was retried, the job's outcome for the last.
    pub outcome: Outcome,
    /// How its direct child ended, when one ran.
    pub exit: Option<ExitFacts>,
}

impl TryEntry {
    /// The try's part of the record.
    fn to_record(self, attempt: u32) -> TryRecord {
        let (exit_code, signal) = exit_fields(self.exit);
        TryRecord {
            attempt,
            outcome: self.outcome.name(),
            reason: self.outcome.reason(),
            exit_code,
            signal,
            slot: self.slot,
            started_at: self.started_at.map(timestamp),
            ended_at: timestamp(self.ended_at),
            duration_ms: self
                .started_at
                .map(|started_at| written_duration_ms(started_at, self.ended_at)),
        }
    }
}

/// The `exit_code` and `signal` fields of how a direct child ended.
fn exit_fields(exit: Option<ExitFacts>) -> (Option<i32>, Option<String>) {
    match exit {
        Some(ExitFacts::Exited(code)) => (Some(code), None),
        Some(ExitFacts::Signaled(signal)) => (None, Some(signal_name(signal))),
        None => (None, None),
    }
}

/// A job's wait for its key's host-wide lock (`--lock-dir`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostWait {
    /// From asking for the lock (and a shared slot) to holding them.
    pub waited: Duration,
    /// Who held the key when the wait began, when someone did.
    pub holder: Option<LockHolder>,
}

impl Entry<'_> {
    /// Whether the job is flaky: it succeeded after a failed try.
    pub(crate) fn flaky(&self) -> bool {
        self.outcome == Outcome::Succeeded && self.attempts > 1
    }

    /// Whether a process was started for the job.
    pub(crate) fn started(&self) -> bool {
        self.started_at.is_some()
    }

    /// The exit status, when the direct child exited normally.
    pub(crate) fn exit_code(&self) -> Option<i32> {
        match self.exit {
            Some(ExitFacts::Exited(code)) => Some(code),
            _ => None,
        }
    }

    /// The name of the signal that ended the direct child (`"SIGKILL"`), when a signal did.
    pub(crate) fn signal(&self) -> Option<String> {
        match self.exit {
            Some(ExitFacts::Signaled(signal)) => Some(signal_name(signal)),
            _ => None,
        }
    }

    /// The JSON Lines record (SPEC §5.2).
    pub(crate) fn to_record(&self) -> JobRecord {
        JobRecord {
            kind: "job",
            seq: self.seq,
            line: self.line,
            key: self.key.map(str::to_owned),
            command: self.command.map(str::to_owned),
            outcome: self.outcome.name(),
            reason: self.outcome.reason(),
            exit_code: self.exit_code(),
            signal: self.signal(),
            started: self.started(),
            started_at: self.started_at.map(timestamp),
            ended_at: timestamp(self.ended_at),
            duration_ms: self
                .started_at
                .map(|started_at| written_duration_ms(started_at, self.ended_at)),
            wait_ms: self.waited.map(millis),
            attempts: self.attempts,
            flaky: self.flaky(),
            slot: self.slot,
            leaked: self.leaked,
            superseded_by: self.superseded_by,
            batch: self.batch,
            error: self.error.map(str::to_owned),
            cpu_ms: self.cpu.map(millis),
            memory_peak_bytes: self.memory_peak,
            tries: (1..)
                .zip(&self.tries)
                .map(|(attempt, t)| t.to_record(attempt))
                .collect(),
            lock_wait_ms: self.lock.map(|wait| wait.map(|w| millis(w.waited))),
            lock_holder: self.lock.map(|wait| {
                wait.and_then(|w| w.holder.clone())
                    .or_else(|| self.lock_waited_on.cloned())
            }),
            weight: self.grant.map(|g| g.weight),
            resources: self.grant.filter(|g| g.parts().next().is_some()).map(|g| {
                g.parts()
                    .map(|part| {
                        (
                            part.name.to_string(),
                            GrantRecord {
                                amount: part.amount,
                                units: part
                                    .is_units()
                                    .then(|| part.units().map(str::to_owned).collect()),
                            },
                        )
                    })
                    .collect()
            }),
            waits: self.waits.iter().map(WaitEntry::to_record).collect(),
        }
    }
}

/// A signal's name (`SIGKILL`), or `SIG` and its number for one the system does not name.
pub(crate) fn signal_name(signal: i32) -> String {
    nix::sys::signal::Signal::try_from(signal)
        .map_or_else(|_| format!("SIG{signal}"), |s| s.as_str().to_owned())
}

/// Whole milliseconds of `duration`, saturating.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `duration_ms` of a record: its `ended_at` minus its `started_at` as both are written, in
/// whole milliseconds, so that the three always agree (the times are cut to the millisecond
/// each on its own: the difference of the cut times, not the cut difference).
pub(crate) fn written_duration_ms(started_at: SystemTime, ended_at: SystemTime) -> u64 {
    let epoch_ms = |time: SystemTime| {
        time.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |since| since.as_millis())
    };
    u64::try_from(epoch_ms(ended_at).saturating_sub(epoch_ms(started_at))).unwrap_or(u64::MAX)
}
