//! The service's journal: every admitted submission is appended (and flushed with
//! `fdatasync` before its answer is sent), every start and every final record too, so that a
//! server killed outright (`kill -9`, a crash) loses nothing: `lanes serve` on the same journal
//! re-admits every job that had no final record, in its original order, and records the ones
//! that were running as `interrupted`/`server_lost` (or re-admits them, `--requeue-lost`).
//!
//! Format: JSON Lines, first `{"journal":1,"last":SEQ,"report":PATH}` (the highest seq handed
//! out when the file was written; the absolute path of the server's `--report` file, absent
//! without one), then `{"a":SEQ,"k":KEY,"c":COMMAND}` (admitted),
//! `{"s":SEQ}` (started), `{"x":SEQ}` (`lanes cancel` dropped or is stopping it),
//! `{"p":SEQ,"b":NEWER}` (superseded by job NEWER: dropped while it waited, or being stopped
//! under `--cancel-in-progress`), `{"t":SEQ,"r":REASON}` (the server is ending and dropped or
//! is stopping it: REASON `shutdown` for `lanes close` or a stop signal, `fail_fast`),
//! `{"e":SEQ}` (its record is in the report). The file is rewritten
//! with only the jobs still live when it holds many more lines than live jobs (compaction),
//! so that it does not grow with the jobs a long-running server has seen.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::core::{Seq, StopReason};

/// The format's version, in its first line. Version 2 added the `u` line (a start that did not
/// happen) and the `n` line (a seq that numbered no admitted job); version 3 the `x` line (a
/// job cancelled before its record was in the report); version 4 the `p` line (a job
/// superseded before its record was in the report); version 5 the `t` line (a job dropped or
/// being stopped as the server ended). An older journal has none of them and reads the same.
const VERSION: u32 = 5;

/// The oldest version read.
const OLDEST_READ: u32 = 1;

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
enum Line {
    Header {
        journal: u32,
        /// The highest seq handed out before the file was rewritten.
        #[serde(default)]
        last: Seq,
        /// The report file the server that wrote the header writes its records to.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        report: Option<PathBuf>,
        /// What the server that wrote the header runs its jobs under (absent before version
        /// 4).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        under: Option<RunsUnder>,
    },
    Admitted {
        a: Seq,
        k: String,
        c: String,
    },
    Started {
        s: Seq,
    },
    /// A start journaled before its spawn did not happen: the spawn failed.
    NotStarted {
        u: Seq,
    },
    /// A seq handed out to a submission that was not admitted (rejected): never live, but
    /// never handed out again.
    Numbered {
        n: Seq,
    },
    /// `lanes cancel` dropped the job (waiting) or is stopping it (running): a later server
    /// records it `cancelled`, never runs it again.
    Cancelled {
        x: Seq,
    },
    /// A newer job of the key superseded it (`--coalesce` dropped it while it waited, or
    /// `--cancel-in-progress` is stopping it): a later server records it `superseded` by
    /// `b`, never runs it again.
    Superseded {
        p: Seq,
        b: Seq,
    },
    /// The server is ending (`lanes close`, a stop signal, `--fail-fast`) and dropped the job
    /// (waiting) or is stopping it (running): a later server records it `interrupted` with
    /// that reason, never runs it again.
    Closing {
        t: Seq,
        r: Closing,
    },
    Ended {
        e: Seq,
    },
}

/// Why a server that was ending dropped or was stopping a job ([`Journal::closing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Closing {
    /// `lanes close`, or a stop signal (reason `shutdown`).
    Shutdown,
    /// A job failed for good under `--fail-fast` (reason `fail_fast`).
    FailFast,
}

impl Closing {
    /// The end of a server that stops its jobs for `reason`, if it is one.
    pub(crate) fn of(reason: StopReason) -> Option<Closing> {
        match reason {
            StopReason::Shutdown => Some(Closing::Shutdown),
            StopReason::FailFast => Some(Closing::FailFast),
            _ => None,
        }
    }

    /// The reason the jobs it stops are recorded with.
    pub(crate) fn reason(self) -> StopReason {
        match self {
            Closing::Shutdown => StopReason::Shutdown,
            Closing::FailFast => StopReason::FailFast,
        }
    }
}

/// What a server runs each journaled job's text under: a job's text alone does not say what it
/// runs. Under a command template it is an argument, which another server without the
/// template would run as a command; a relative path in it means another file in another
/// directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunsUnder {
    /// The command template (`--command`, a trailing command, the manifest's `command`), as
    /// the run record has it; absent when each job's text is its command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The `--colsep` the template's column placeholders split at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub colsep: Option<String>,
    /// The shell that runs each command (`--shell`).
    pub shell: String,
    /// The working directory the jobs run in (absolute).
    pub cwd: PathBuf,
}

impl RunsUnder {
    /// What differs in `self` (this server's) from `earlier`, for a person: `--command 'x'
    /// (the journal's: none)`, one part after another.
    fn differences(&self, earlier: &RunsUnder) -> Vec<String> {
        let shown = |value: Option<&str>| value.map_or("none".to_owned(), |v| format!("`{v}`"));
        let mut differences = Vec::new();
        if (&self.command, &self.colsep) != (&earlier.command, &earlier.colsep) {
            let with_colsep = |command: Option<&String>, colsep: Option<&String>| {
                let command = shown(command.map(String::as_str));
                match colsep {
                    Some(colsep) => format!("{command} with --colsep `{colsep}`"),
                    None => command,
                }
            };
            differences.push(format!(
                "the command template is {} here, {} in the journal",
                with_colsep(self.command.as_ref(), self.colsep.as_ref()),
                with_colsep(earlier.command.as_ref(), earlier.colsep.as_ref()),
            ));
        }
        if self.shell != earlier.shell {
            differences.push(format!(
                "the shell is `{}` here, `{}` in the journal",
                self.shell, earlier.shell
            ));
        }
        if self.cwd != earlier.cwd {
            differences.push(format!(
                "the working directory is {} here, {} in the journal",
                self.cwd.display(),
                earlier.cwd.display()
            ));
        }
        differences
    }
}

/// A job the journal knows to be live (admitted, without its final record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LiveJob {
    /// Its seq, kept across restarts.
    pub seq: Seq,
    /// Its key.
    pub key: String,
    /// Its command.
    pub command: String,
    /// Whether it had started (it was running when the server ended).
    pub started: bool,
    /// Whether `lanes cancel` had dropped it or was stopping it.
    pub cancelled: bool,
    /// The newer job that superseded it (dropped while it waited, or being stopped).
    pub superseded_by: Option<Seq>,
    /// Why the ending server dropped it or was stopping it.
    pub closing: Option<Closing>,
}

impl LiveJob {
    /// Whether the job is recorded, never run (again), whatever the next server's
    /// `--requeue-lost`: cancelled, superseded, or dropped or being stopped as its server ended.
    pub(crate) fn settled(&self) -> bool {
        self.cancelled || self.superseded_by.is_some() || self.closing.is_some()
    }
}

/// What an earlier server left to do.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Recovered {
    /// The live jobs, in seq order (their admission order).
    pub jobs: Vec<LiveJob>,
    /// The highest seq ever handed out: new jobs are numbered after it.
    pub last_seq: Seq,
    /// The report file of the server that wrote the journal.
    pub report: Option<PathBuf>,
    /// What the server that wrote the journal ran its jobs under (unknown before version 4).
    pub under: Option<RunsUnder>,
    /// The earlier server's report, when live jobs were left and it could not be read (gone,
    /// no regular file, unreadable): none of them was found recorded there.
    pub report_unread: Option<PathBuf>,
}

/// Replays journal lines.
///
/// # Errors
/// A line that is no journal line, other than a last one cut short (a write the crash
/// interrupted): which line and why.
fn replay(text: impl BufRead) -> Result<Recovered, String> {
    let mut live: BTreeMap<Seq, LiveJob> = BTreeMap::new();
    let mut last_seq = 0;
    let mut last_admitted = 0;
    let mut report = None;
    let mut under = None;
    let mut torn: Option<usize> = None;
    // The header's version, once read: it comes first.
    let mut version = None;
    let mut text = text;
    let mut number = 0;
    loop {
        let mut line = Vec::new();
        let read = text
            .read_until(b'\n', &mut line)
            .map_err(|err| format!("cannot read it: {err}"))?;
        if read == 0 {
            break;
        }
        number += 1;
        // Each line is written with one `write`, its newline last: only a last line without
        // its newline can be a write a crash cut short.
        let whole = line.last() == Some(&b'\n');
        if whole {
            line.pop();
        }
        if line.is_empty() {
            continue;
        }
        if let Some(previous) = torn {
            return Err(format!("line {previous} is not a journal line"));
        }
        let Ok(parsed) = serde_json::from_slice::<Line>(&line) else {
            // The header is never cut short (a new journal is written whole, then renamed
            // into place): a first line that is none is no journal.
            if whole || version.is_none() {
                return Err(format!("line {number} is not a journal line"));
            }
            torn = Some(number);
            continue;
        };
        if version.is_none() && !matches!(parsed, Line::Header { .. }) {
            return Err(format!(
                "line {number}: a journal begins with its header line"
            ));
        }
        match parsed {
            Line::Header {
                journal,
                last,
                report: named,
                under: runs_under,
            } if (OLDEST_READ..=VERSION).contains(&journal) => {
                if last == Seq::MAX {
                    return Err(format!(
                        "line {number}: last seq {last} leaves no seq to hand out"
                    ));
                }
                last_seq = last_seq.max(last);
                report = named;
                under = runs_under;
                version = Some(journal);
            }
            Line::Header { journal, .. } => {
                return Err(format!(
                    "line {number}: journal version {journal}, this lanes reads versions \
                     {OLDEST_READ} to {VERSION}"
                ))
            }
            Line::Admitted { a, k, c } => {
                // Admissions are written in seq order, each seq once.
                if a <= last_admitted || a == Seq::MAX {
                    return Err(format!(
                        "line {number}: seq {a} admitted again, out of order or out of range"
                    ));
                }
                if k.is_empty() || c.trim().is_empty() {
                    return Err(format!(
                        "line {number}: seq {a} has an empty key or command"
                    ));
                }
                last_admitted = a;
                last_seq = last_seq.max(a);
                live.insert(
                    a,
                    LiveJob {
                        seq: a,
                        key: k,
                        command: c,
                        started: false,
                        cancelled: false,
                        superseded_by: None,
                        closing: None,
                    },
                );
            }
            // A start, or its taking back, is of a job admitted and not ended.
            Line::Started { s } => match live.get_mut(&s) {
                Some(job) => job.started = true,
                None => return Err(unknown(number, s, "started")),
            },
            Line::NotStarted { u } => match live.get_mut(&u) {
                Some(job) => job.started = false,
                None => return Err(unknown(number, u, "not started")),
            },
            Line::Cancelled { x } => match live.get_mut(&x) {
                Some(job) => job.cancelled = true,
                None => return Err(unknown(number, x, "cancelled")),
            },
            Line::Superseded { p, b } => match live.get_mut(&p) {
                Some(job) if b > p => job.superseded_by = Some(b),
                Some(_) => {
                    return Err(format!(
                        "line {number}: seq {p} superseded by seq {b}, which is not newer"
                    ))
                }
                None => return Err(unknown(number, p, "superseded")),
            },
            Line::Closing { t, r } => match live.get_mut(&t) {
                Some(job) => job.closing = Some(r),
                None => return Err(unknown(number, t, "closing")),
            },
            Line::Ended { e } => {
                // From version 2 on, an end is of a job admitted, or of a seq handed out
                // before (a rejected submission's, numbered by an `n` line, or one journaled
                // before a rewrite).
                if live.remove(&e).is_none() && version >= Some(2) && e > last_seq {
                    return Err(unknown(number, e, "ended"));
                }
                // A rejected job's end names a seq no admission did (version 1 journals).
                last_seq = last_seq.max(e.min(Seq::MAX - 1));
            }
            Line::Numbered { n } => {
                if n == Seq::MAX {
                    return Err(format!("line {number}: seq {n} is out of range"));
                }
                last_seq = last_seq.max(n);
            }
        }
    }
    if number == 0 {
        // lanes writes a journal whole and renames it into place: it is never empty.
        return Err(
            "it is empty, so no journal (a truncated one would lose its jobs): \
                    remove it to start afresh"
                .to_owned(),
        );
    }
    Ok(Recovered {
        jobs: live.into_values().collect(),
        last_seq,
        report,
        under,
        report_unread: None,
    })
}

/// The error for a line about seq `seq` that no admission before it made.
fn unknown(number: usize, seq: Seq, what: &str) -> String {
    format!("line {number}: seq {seq} {what}, but no line before it admitted it")
}

/// The seqs among `live` (each with its key and command) that have a job record in the
/// report at `path` (JSON Lines; a line that is no record, such as one a kill cut short, is
/// passed over). A record counts only with the key and command the journal admitted under its
/// seq: the file may have been replaced since (another run's report under the same name,
/// whose seqs mean other jobs). A missing or unreadable file has none, and so has one that is
/// no regular file (a FIFO would wait for a writer).
fn recorded_in(path: &Path, live: &BTreeMap<Seq, (&str, &str)>) -> Vec<Seq> {
    if !std::fs::metadata(path).is_ok_and(|meta| meta.is_file()) {
        return Vec::new();
    }
    #[derive(Deserialize)]
    struct Record {
        #[serde(rename = "type")]
        kind: String,
        seq: Seq,
        key: Option<String>,
        command: Option<String>,
    }
    let Ok(file) = File::open(path) else {
        return Vec::new();
    };
    BufReader::new(file)
        .split(b'\n')
        .map_while(Result::ok)
        .filter_map(|line| serde_json::from_slice::<Record>(&line).ok())
        .filter(|record| {
            record.kind == "job"
                && live.get(&record.seq).is_some_and(|&(key, command)| {
                    record.key.as_deref() == Some(key) && record.command.as_deref() == Some(command)
                })
        })
        .map(|record| record.seq)
        .collect()
}

/// The journal file, open for appending.
pub(crate) struct Journal {
    /// `PATH.lock`, open with an exclusive `flock` on it while the server runs: two servers
    /// on one journal would each re-admit the other's jobs.
    _lock: File,
    path: PathBuf,
    file: File,
    /// The report file named in the header (absolute).
    report: Option<PathBuf>,
    /// What this server runs its jobs under, named in the header.
    under: Option<RunsUnder>,
    /// Lines written since the file was last rewritten.
    lines: u64,
    /// The highest seq admitted.
    last_seq: Seq,
    /// Written and not yet flushed to the disk.
    unsynced: bool,
    /// The file's length after its last line written whole: a write that fails part way (the
    /// disk full) is cut back to it, so that the file stays a journal.
    len: u64,
    /// Why a line could not be written, since the first such failure: an admission can no
    /// longer be promised durable (see [`Journal::failure`]).
    failure: Option<String>,
    /// Jobs whose admission could not be written: no later line names them (a start or an
    /// end of a seq the file never admitted would make it no journal).
    unjournaled: std::collections::HashSet<Seq>,
    /// Live jobs journaled as cancelled (kept by a rewrite).
    cancelled: std::collections::HashSet<Seq>,
    /// Live jobs journaled as superseded, each with the job that superseded it (kept by a
    /// rewrite).
    superseded: std::collections::HashMap<Seq, Seq>,
    /// Live jobs journaled as dropped or being stopped by the server's end, each with why
    /// (kept by a rewrite).
    closing: std::collections::HashMap<Seq, Closing>,
    /// A flush to the disk (`fdatasync`) failed: from then on no line is known to be on it,
    /// though the page cache may still hold it for a server started after a kill.
    flush_failed: bool,
}

/// Lines beyond twice the live jobs that the journal may hold before it is rewritten.
const COMPACTION_SLACK: u64 = 4096;

impl Journal {
    /// Opens the journal at `path`, creating it (mode 0600) when missing, and returns what an
    /// earlier server left in it. A live job whose record is in the earlier server's report
    /// file (it was killed after writing the record, before journaling its end) is not
    /// live: it has its record. The file is then rewritten with just that, naming `report`
    /// (this server's report file) in its header; with `requeue_lost`, the jobs that had
    /// started are written as not started, since they are admitted again. Call it before
    /// `report` is created: it may be the earlier server's.
    ///
    /// # Errors
    /// It cannot be read, created or written; it is no journal (which line, and why).
    #[cfg(test)]
    pub(crate) fn open(
        path: &Path,
        requeue_lost: bool,
        report: Option<&Path>,
    ) -> anyhow::Result<(Journal, Recovered)> {
        Self::open_under(path, requeue_lost, report, None)
    }

    /// [`Journal::open`] for a server that runs its jobs `under` that: it is named in the
    /// header, and a journal whose live jobs an earlier server ran under something else is
    /// refused (their texts would mean other commands here).
    ///
    /// # Errors
    /// As [`Journal::open`]'s; the live jobs were journaled under another command template,
    /// shell or working directory (each difference named).
    pub(crate) fn open_under(
        path: &Path,
        requeue_lost: bool,
        report: Option<&Path>,
        under: Option<RunsUnder>,
    ) -> anyhow::Result<(Journal, Recovered)> {
        let real = one_name(path)?;
        let path = real.as_path();
        let lock = lock(path)?;
        let mut recovered = match File::open(path) {
            Ok(file) => replay(BufReader::new(file))
                .map_err(|err| anyhow::anyhow!("the journal {}: {err}", path.display()))?,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Recovered::default(),
            Err(err) => anyhow::bail!("cannot read the journal {}: {err}", path.display()),
        };
        if let Some(earlier) = recovered.report.as_deref() {
            let live = recovered
                .jobs
                .iter()
                .map(|job| (job.seq, (job.key.as_str(), job.command.as_str())))
                .collect();
            let recorded = recorded_in(earlier, &live);
            recovered.jobs.retain(|job| !recorded.contains(&job.seq));
            let readable = std::fs::metadata(earlier).is_ok_and(|meta| meta.is_file())
                && File::open(earlier).is_ok();
            if !readable && !recovered.jobs.is_empty() {
                recovered.report_unread = Some(earlier.to_owned());
            }
        }
        // The jobs this server would run: not those it only records (cancelled, superseded,
        // and without `--requeue-lost` the ones that had started).
        let to_run = recovered
            .jobs
            .iter()
            .filter(|job| !job.settled() && (!job.started || requeue_lost))
            .count();
        if let (Some(under), Some(earlier), 1..) = (&under, &recovered.under, to_run) {
            let differences = under.differences(earlier);
            if !differences.is_empty() {
                let left = recovered.jobs.len();
                anyhow::bail!(
                    "the journal {} holds {to_run} job{} an earlier server admitted that this \
                     one would run, and {}: {} would run as other commands here; start the \
                     server as the earlier one ran (the same --command, --colsep and --shell, \
                     in the same directory), or on another --journal (the {left} job{} left in \
                     this one then get no record)",
                    path.display(),
                    if to_run == 1 { "" } else { "s" },
                    differences.join(", "),
                    if to_run == 1 { "it" } else { "they" },
                    if left == 1 { "" } else { "s" },
                );
            }
        }
        let report = report
            .map(std::path::absolute)
            .transpose()
            .map_err(|err| anyhow::anyhow!("cannot name the report's absolute path: {err}"))?;
        // The earlier server's report holds the only records of the jobs it ended: written
        // afresh, they would have none.
        if let (Some(report), Some(earlier), false) =
            (&report, &recovered.report, recovered.jobs.is_empty())
        {
            if report == earlier && std::fs::metadata(earlier).is_ok_and(|meta| meta.len() > 0) {
                anyhow::bail!(
                    "the report {} is the one of the earlier server, which ended with {} job{} \
                     left: it holds the only records of the jobs that server ended, and this \
                     server would write it afresh; give this server another --report",
                    report.display(),
                    recovered.jobs.len(),
                    if recovered.jobs.len() == 1 { "" } else { "s" },
                );
            }
        }
        let jobs = recovered.jobs.iter().map(|job| Live {
            seq: job.seq,
            key: job.key.as_str(),
            command: job.command.as_str(),
            // A cancelled, superseded or closed job is not run again: it stays started.
            started: job.started && (!requeue_lost || job.settled()),
            cancelled: job.cancelled,
            superseded_by: job.superseded_by,
            closing: job.closing,
        });
        let file = rewrite(
            path,
            recovered.last_seq,
            report.as_deref(),
            under.as_ref(),
            jobs,
        )
        .map_err(|err| anyhow::anyhow!("cannot write the journal {}: {err}", path.display()))?;
        Ok((
            Journal {
                _lock: lock,
                path: path.to_owned(),
                len: file.metadata().map_or(0, |meta| meta.len()),
                file,
                report,
                under,
                lines: 0,
                last_seq: recovered.last_seq,
                unsynced: false,
                failure: None,
                unjournaled: std::collections::HashSet::new(),
                cancelled: recovered
                    .jobs
                    .iter()
                    .filter(|job| job.cancelled)
                    .map(|job| job.seq)
                    .collect(),
                superseded: recovered
                    .jobs
                    .iter()
                    .filter_map(|job| Some((job.seq, job.superseded_by?)))
                    .collect(),
                closing: recovered
                    .jobs
                    .iter()
                    .filter_map(|job| Some((job.seq, job.closing?)))
                    .collect(),
                flush_failed: false,
            },
            recovered,
        ))
    }

    /// Appends `line`; whether it was written whole.
    fn append(&mut self, line: &Line) -> bool {
        let mut bytes = serde_json::to_vec(line).expect("journal lines always serialise");
        bytes.push(b'\n');
        // One write per line: a kill leaves the lines written whole (the page cache outlives
        // the process); `sync` makes them outlive the machine too. A write that fails (the
        // disk full) is cut back, kept as the failure, and reported by the `sync` that must
        // precede the answer: the write's error is not one `fdatasync` would return.
        let written = match self.file.write_all(&bytes) {
            Ok(()) => {
                self.len += bytes.len() as u64;
                true
            }
            Err(err) => {
                let _ = self.file.set_len(self.len);
                self.failure
                    .get_or_insert_with(|| format!("{}: {err}", self.path.display()));
                false
            }
        };
        self.lines += 1;
        self.unsynced = true;
        written
    }

    /// A job was admitted.
    pub(crate) fn admitted(&mut self, seq: Seq, key: &str, command: &str) {
        self.last_seq = self.last_seq.max(seq);
        let written = self.append(&Line::Admitted {
            a: seq,
            k: key.to_owned(),
            c: command.to_owned(),
        });
        if !written {
            self.unjournaled.insert(seq);
        }
    }

    /// A job's process is about to start: written before the spawn, so that a server killed
    /// while it is under way never leaves a job that ran journaled as one that did not (the
    /// next server would run it again).
    pub(crate) fn started(&mut self, seq: Seq) {
        if !self.unjournaled.contains(&seq) {
            self.append(&Line::Started { s: seq });
        }
    }

    /// The spawn of a job journaled as [`Journal::started`] failed: no process of it ran.
    pub(crate) fn not_started(&mut self, seq: Seq) {
        if !self.unjournaled.contains(&seq) {
            self.append(&Line::NotStarted { u: seq });
        }
    }

    /// `lanes cancel` dropped job `seq` (waiting) or is stopping it (running): a server
    /// started after a crash records it `cancelled` instead of running it (again).
    pub(crate) fn cancelled(&mut self, seq: Seq) {
        if !self.unjournaled.contains(&seq) && self.cancelled.insert(seq) {
            self.append(&Line::Cancelled { x: seq });
        }
    }

    /// Job `seq` was superseded by the newer job `by` (`--coalesce` dropped it while it
    /// waited, or `--cancel-in-progress` is stopping it; journaled before its record is
    /// handed to the report): a server started after a crash records it `superseded` instead
    /// of running it (again).
    pub(crate) fn superseded(&mut self, seq: Seq, by: Seq) {
        if !self.unjournaled.contains(&seq) && self.superseded.insert(seq, by).is_none() {
            self.append(&Line::Superseded { p: seq, b: by });
        }
    }

    /// The server is ending (`why`) and dropped job `seq` (waiting) or is stopping it
    /// (running; journaled before its record is handed to the report): a server started after
    /// a crash records it `interrupted` for `why` instead of running it (again).
    pub(crate) fn closing(&mut self, seq: Seq, why: Closing) {
        if !self.unjournaled.contains(&seq)
            && !self.cancelled.contains(&seq)
            && !self.superseded.contains_key(&seq)
            && self.closing.insert(seq, why).is_none()
        {
            self.append(&Line::Closing { t: seq, r: why });
        }
    }

    /// A job's final record is in the report.
    pub(crate) fn ended(&mut self, seq: Seq) {
        self.last_seq = self.last_seq.max(seq);
        self.cancelled.remove(&seq);
        self.superseded.remove(&seq);
        self.closing.remove(&seq);
        if !self.unjournaled.remove(&seq) {
            self.append(&Line::Ended { e: seq });
        }
    }

    /// Seq `seq` was handed out to a submission that was not admitted (rejected): written
    /// before its answer goes (with the next [`Journal::sync`]), so that no later server hands
    /// it out again.
    pub(crate) fn numbered(&mut self, seq: Seq) {
        self.last_seq = self.last_seq.max(seq);
        let _ = self.append(&Line::Numbered { n: seq });
    }

    /// Flushes what was appended to the disk (`fdatasync`).
    ///
    /// # Errors
    /// The disk refused it: admissions cannot be promised durable.
    pub(crate) fn sync(&mut self) -> std::io::Result<()> {
        if self.unsynced && !self.flush_failed {
            if let Err(err) = self.file.sync_data() {
                // Kept: Linux reports a failed writeback once, and a second `fdatasync` could
                // succeed without the lines being on the disk.
                self.flush_failed = true;
                self.failure
                    .get_or_insert_with(|| format!("{}: {err}", self.path.display()));
            } else {
                self.unsynced = false;
            }
        }
        match &self.failure {
            Some(failure) => Err(std::io::Error::other(failure.clone())),
            None => Ok(()),
        }
    }

    /// Whether job `seq`'s admission is on the disk, as far as anything is since the last
    /// [`Journal::sync`]: its line was written whole and no flush failed. A job whose line was
    /// cut back is in no journal a later server reads.
    pub(crate) fn holds(&self, seq: Seq) -> bool {
        !self.flush_failed && !self.unjournaled.contains(&seq)
    }

    /// Whether job `seq`'s admission line was cut back (the disk full): no server started
    /// later knows of it.
    pub(crate) fn lost_admission(&self, seq: Seq) -> bool {
        self.unjournaled.contains(&seq)
    }

    /// Why a line could not be written, since the first failure (the journal's path and the
    /// error): from then on no admission can be promised durable, and the server admits no
    /// more jobs.
    pub(crate) fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// Whether the file holds so many more lines than `live` jobs that it should be
    /// rewritten ([`Journal::compact`]).
    pub(crate) fn wants_compaction(&self, live: usize) -> bool {
        self.lines > 2 * live as u64 + COMPACTION_SLACK
    }

    /// Rewrites the file with only `jobs` (seq order), atomically (a new file renamed over the
    /// old one, both flushed).
    ///
    /// # Errors
    /// The new file cannot be written; the old one is then kept and appended to.
    pub(crate) fn compact<'a>(
        &mut self,
        jobs: impl Iterator<Item = (Seq, &'a str, &'a str, bool)>,
    ) -> std::io::Result<()> {
        let (cancelled, superseded, closing) = (&self.cancelled, &self.superseded, &self.closing);
        let jobs = jobs.map(|(seq, key, command, started)| Live {
            seq,
            key,
            command,
            started,
            cancelled: cancelled.contains(&seq),
            superseded_by: superseded.get(&seq).copied(),
            closing: closing.get(&seq).copied(),
        });
        self.file = rewrite(
            &self.path,
            self.last_seq,
            self.report.as_deref(),
            self.under.as_ref(),
            jobs,
        )?;
        self.len = self.file.metadata().map_or(0, |meta| meta.len());
        self.lines = 0;
        self.unsynced = false;
        Ok(())
    }

    /// Every job has its final record (the server ended cleanly): the journal is emptied.
    pub(crate) fn finish(&mut self) {
        let _ = self.compact(std::iter::empty());
    }
}

/// The one name of the journal at `path`: symbolic links followed (the lock and the rewrites
/// then go by the file's own name, so that a second server given another path to it is
/// refused). A journal with other hard links is refused: a second server through one of them
/// would take another lock, and a report linked to it would be overwritten.
///
/// # Errors
/// The file has more than one hard link.
fn one_name(path: &Path) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    let target = link_target(path);
    let real = std::fs::canonicalize(&target).or_else(|_| {
        // Not there yet: its directory's own name, and its file name.
        match target.file_name() {
            Some(name) => std::fs::canonicalize(crate::containing_dir::containing_dir(&target))
                .map(|dir| dir.join(name)),
            None => std::path::absolute(&target),
        }
    });
    let real = real.unwrap_or_else(|_| path.to_owned());
    if let Ok(meta) = std::fs::metadata(&real) {
        if meta.nlink() > 1 {
            anyhow::bail!(
                "the journal {} has {} hard links: a journal has one name (a second server, or \
                 the report, under another would share it unseen)",
                path.display(),
                meta.nlink()
            );
        }
    }
    Ok(real)
}

/// Where the symbolic link `path` leads, followed link by link (at most 40, as the kernel
/// does), even when the file at its end does not exist yet (a dangling link, which
/// `canonicalize` does not follow): the journal is then made there, not in the link's place.
/// A path that is no link is returned as it is.
fn link_target(path: &Path) -> PathBuf {
    let mut at = path.to_owned();
    for _ in 0..40 {
        let Ok(next) = std::fs::read_link(&at) else {
            return at;
        };
        at = crate::containing_dir::containing_dir(&at).join(next);
    }
    at
}

/// Where the lock of the journal at `path` is: `PATH.lock`.
pub(crate) fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Takes the journal's lock, `PATH.lock` (created mode 0600): an exclusive `flock`, held
/// while the returned file is open, waited for only through a brief hold
/// ([`crate::file_lock::BRIEF_HOLD`]).
///
/// # Errors
/// Another server holds it, or it cannot be made.
fn lock(path: &Path) -> anyhow::Result<File> {
    let lock_path = lock_path(path);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock_path)
        .map_err(|err| anyhow::anyhow!("cannot create {}: {err}", lock_path.display()))?;
    match crate::file_lock::flock_after_brief_hold(&file, nix::libc::LOCK_EX) {
        Ok(()) => Ok(file),
        Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => anyhow::bail!(
            "another lanes serve uses the journal {} (give each server its own --journal)",
            path.display()
        ),
        Err(err) => anyhow::bail!("cannot lock {}: {err}", lock_path.display()),
    }
}

/// A live job as a rewrite writes it.
struct Live<'a> {
    seq: Seq,
    key: &'a str,
    command: &'a str,
    started: bool,
    cancelled: bool,
    superseded_by: Option<Seq>,
    closing: Option<Closing>,
}

/// Writes a journal holding `jobs` beside `path`, flushes it and renames it over `path`;
/// returns it open for appending.
fn rewrite<'a>(
    path: &Path,
    last: Seq,
    report: Option<&Path>,
    under: Option<&RunsUnder>,
    jobs: impl Iterator<Item = Live<'a>>,
) -> std::io::Result<File> {
    let mut name = path.as_os_str().to_owned();
    name.push(".new");
    let new = PathBuf::from(name);
    let written = write_new(&new, path, last, report, under, jobs);
    if written.is_err() {
        // A disk full leaves no half-written file behind.
        let _ = std::fs::remove_file(&new);
    }
    written
}

/// [`rewrite`]'s work: the new file at `new`, then renamed over `path`.
fn write_new<'a>(
    new: &Path,
    path: &Path,
    last: Seq,
    report: Option<&Path>,
    under: Option<&RunsUnder>,
    jobs: impl Iterator<Item = Live<'a>>,
) -> std::io::Result<File> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(new)?;
    let mut out = std::io::BufWriter::new(&mut file);
    let mut line = |entry: &Line| -> std::io::Result<()> {
        serde_json::to_writer(&mut out, entry)?;
        out.write_all(b"\n")
    };
    line(&Line::Header {
        journal: VERSION,
        last,
        report: report.map(Path::to_owned),
        under: under.cloned(),
    })?;
    for job in jobs {
        line(&Line::Admitted {
            a: job.seq,
            k: job.key.to_owned(),
            c: job.command.to_owned(),
        })?;
        if job.started {
            line(&Line::Started { s: job.seq })?;
        }
        if job.cancelled {
            line(&Line::Cancelled { x: job.seq })?;
        }
        if let Some(by) = job.superseded_by {
            line(&Line::Superseded { p: job.seq, b: by })?;
        }
        if let Some(why) = job.closing {
            line(&Line::Closing { t: job.seq, r: why })?;
        }
    }
    out.flush()?;
    drop(out);
    file.sync_data()?;
    std::fs::rename(new, path)?;
    // The rename is durable once the directory that holds it is.
    if let Ok(dir) = File::open(crate::containing_dir::containing_dir(path)) {
        let _ = dir.sync_all();
    }
    OpenOptions::new().append(true).open(path)
}

/// Whether the file at `path` begins as a journal does (its header's `{"journal":`): a file
/// no report, events or JUnit file may replace.
pub(crate) fn is_journal(path: &Path) -> bool {
    File::open(path).is_ok_and(|file| begins_as_journal(&file))
}

/// Whether the open `file` begins as a journal does ([`is_journal`]), read where it begins
/// whatever its offset, and left there.
pub(crate) fn begins_as_journal(file: &File) -> bool {
    use std::os::unix::fs::FileExt as _;
    const START: &[u8] = b"{\"journal\":";
    let mut start = [0u8; START.len()];
    file.read_exact_at(&mut start, 0)
        .is_ok_and(|()| start == START)
}

/// The default journal: beside the socket, named after it (`lanes.sock` → `lanes.journal`).
pub(crate) fn default_path(socket: &Path) -> PathBuf {
    socket.with_extension("journal")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replayed(text: &str) -> Result<Recovered, String> {
        replay(text.as_bytes())
    }

    #[test]
    fn a_link_is_followed_to_its_end_even_to_a_file_not_made_yet() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::fs::create_dir(dir.path().join("cli")).unwrap();
        let first = dir.path().join("cli").join("a");
        std::os::unix::fs::symlink("b", &first).unwrap();
        std::os::unix::fs::symlink("../real/j.journal", dir.path().join("cli").join("b")).unwrap();
        assert_eq!(
            link_target(&first),
            dir.path().join("cli").join("../real/j.journal")
        );
        let plain = dir.path().join("plain");
        assert_eq!(link_target(&plain), plain);
        let real = one_name(&first).unwrap();
        assert_eq!(
            real,
            std::fs::canonicalize(dir.path().join("real"))
                .unwrap()
                .join("j.journal")
        );
    }

    #[test]
    fn a_journal_is_known_by_its_first_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        for (text, journal) in [
            ("{\"journal\":2,\"last\":0}\n", true),
            ("{\"type\":\"run\"}\n", false),
            ("{\"jour", false),
            ("", false),
        ] {
            std::fs::write(&path, text).unwrap();
            assert_eq!(is_journal(&path), journal, "{text:?}");
        }
        assert!(!is_journal(&dir.path().join("missing")));
    }

    #[test]
    fn live_jobs_come_back_in_seq_order_with_their_starts() {
        let recovered = replayed(
            "{\"journal\":1}\n\
             {\"a\":1,\"k\":\"a\",\"c\":\"x\"}\n\
             {\"a\":2,\"k\":\"a\",\"c\":\"y\"}\n\
             {\"a\":3,\"k\":\"b\",\"c\":\"z\"}\n\
             {\"s\":1}\n{\"s\":3}\n{\"e\":3}\n",
        )
        .unwrap();
        assert_eq!(recovered.last_seq, 3);
        let jobs: Vec<(Seq, bool)> = recovered.jobs.iter().map(|j| (j.seq, j.started)).collect();
        assert_eq!(jobs, vec![(1, true), (2, false)]);
        assert_eq!(recovered.jobs[1].command, "y");
    }

    #[test]
    fn a_start_whose_spawn_failed_is_no_start_and_both_versions_read() {
        for version in [1, 2] {
            let recovered = replayed(&format!(
                "{{\"journal\":{version}}}\n\
                 {{\"a\":1,\"k\":\"a\",\"c\":\"x\"}}\n\
                 {{\"a\":2,\"k\":\"b\",\"c\":\"y\"}}\n\
                 {{\"s\":1}}\n{{\"s\":2}}\n{{\"u\":2}}\n"
            ))
            .unwrap();
            let jobs: Vec<(Seq, bool)> =
                recovered.jobs.iter().map(|j| (j.seq, j.started)).collect();
            assert_eq!(jobs, vec![(1, true), (2, false)], "version {version}");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.journal");
        {
            let (mut journal, _) = Journal::open(&path, false, None).unwrap();
            journal.admitted(1, "a", "x");
            journal.started(1);
            journal.not_started(1);
            journal.admitted(2, "a", "y");
            journal.started(2);
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("{\"journal\":5"), "{text}");
        let (_, recovered) = Journal::open(&path, false, None).unwrap();
        let jobs: Vec<(Seq, bool)> = recovered.jobs.iter().map(|j| (j.seq, j.started)).collect();
        assert_eq!(jobs, vec![(1, false), (2, true)]);
    }

    #[test]
    fn a_seq_that_numbered_a_rejected_job_is_never_handed_out_again() {
        let recovered =
            replayed("{\"journal\":2}\n{\"a\":1,\"k\":\"a\",\"c\":\"x\"}\n{\"n\":2}\n").unwrap();
        assert_eq!(recovered.last_seq, 2);
        // A version 1 journal says it only through the rejected job's end.
        let recovered = replayed("{\"journal\":1}\n{\"e\":3}\n").unwrap();
        assert_eq!(recovered.last_seq, 3);
        assert!(recovered.jobs.is_empty());
        // A clean end keeps it in the emptied journal's header.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.journal");
        {
            let (mut journal, _) = Journal::open(&path, false, None).unwrap();
            journal.admitted(1, "a", "x");
            journal.ended(1);
            journal.numbered(2);
            journal.finish();
        }
        let (_, recovered) = Journal::open(&path, false, None).unwrap();
        assert_eq!(recovered.last_seq, 2);
    }

    #[test]
    fn a_last_line_cut_short_is_dropped_and_one_in_the_middle_is_refused() {
        let recovered =
            replayed("{\"journal\":1}\n{\"a\":1,\"k\":\"a\",\"c\":\"x\"}\n{\"a\":2,\"k\"").unwrap();
        assert_eq!(recovered.jobs.len(), 1);
        let err =
            replayed("{\"journal\":1}\ngarbage\n{\"a\":1,\"k\":\"a\",\"c\":\"x\"}\n").unwrap_err();
        assert!(err.contains("line 2"), "{err}");
        let err = replayed("{\"journal\":7}\n").unwrap_err();
        assert!(err.contains("version 7"), "{err}");
    }

    #[test]
    fn lines_about_seqs_never_admitted_and_a_missing_header_are_refused() {
        let header = "{\"journal\":2}\n{\"a\":1,\"k\":\"a\",\"c\":\"x\"}\n";
        for (tail, line) in [
            ("{\"s\":5}\n", "line 3: seq 5 started"),
            ("{\"u\":5}\n", "line 3: seq 5 not started"),
            ("{\"e\":5}\n", "line 3: seq 5 ended"),
            // Started after its end.
            ("{\"e\":1}\n{\"s\":1}\n", "line 4: seq 1 started"),
        ] {
            let err = replayed(&format!("{header}{tail}")).unwrap_err();
            assert!(err.contains(line), "{tail}: {err}");
        }
        // An end of a seq handed out before: a rejected job's, or one from before a rewrite.
        assert!(replayed(&format!("{header}{{\"n\":2}}\n{{\"e\":2}}\n")).is_ok());
        assert!(replayed("{\"journal\":2,\"last\":9}\n{\"e\":4}\n").is_ok());
        let err = replayed("{\"a\":1,\"k\":\"a\",\"c\":\"x\"}\n").unwrap_err();
        assert!(
            err.contains("line 1: a journal begins with its header"),
            "{err}"
        );
    }

    #[test]
    fn a_whole_line_that_is_no_journal_line_is_refused_even_last_and_so_is_a_first_line_cut_short()
    {
        // A user's file given by mistake is refused, not overwritten.
        for text in ["{\"a\":1}\n", "ORIG\n", "ORIG"] {
            assert!(replayed(text).is_err(), "{text:?}");
        }
        let err = replayed(
            "{\"journal\":2}\n{\"a\":1,\"k\":\"a\",\"c\":\"x\"}\n\
             {\"a\":2,\"k\":\"b\",\"c\":\"y\",\"typo\":1}\n",
        )
        .unwrap_err();
        assert!(err.contains("line 3 is not a journal line"), "{err}");
        // Only a last line without its newline is a write cut short.
        let recovered =
            replayed("{\"journal\":2}\n{\"a\":1,\"k\":\"a\",\"c\":\"x\"}\n{\"a\":2,").unwrap();
        assert_eq!(recovered.jobs.len(), 1);
    }

    #[test]
    fn a_job_whose_admission_could_not_be_written_gets_no_later_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.journal");
        let (mut journal, _) = Journal::open(&path, false, None).unwrap();
        journal.admitted(1, "a", "x");
        // The disk refuses the next admission (here: the descriptor cannot write).
        let writable = std::mem::replace(&mut journal.file, File::open(&path).unwrap());
        journal.admitted(2, "b", "y");
        assert!(journal.failure().is_some());
        journal.file = writable;
        journal.started(2);
        journal.ended(2);
        journal.started(1);
        assert!(journal.sync().is_err(), "the failure stays said");
        drop(journal);
        let text = std::fs::read_to_string(&path).unwrap();
        let recovered = replayed(&text).unwrap();
        let jobs: Vec<(Seq, bool)> = recovered.jobs.iter().map(|j| (j.seq, j.started)).collect();
        assert_eq!(jobs, vec![(1, true)], "{text}");
    }

    #[test]
    fn a_cancel_is_kept_by_a_restart_and_by_compaction_until_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.journal");
        {
            let (mut journal, _) = Journal::open(&path, false, None).unwrap();
            journal.admitted(1, "a", "x");
            journal.started(1);
            journal.admitted(2, "a", "y");
            journal.cancelled(1);
            journal.cancelled(2);
            journal.cancelled(2);
            journal.admitted(3, "b", "z");
            journal.sync().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text.matches("{\"x\":").count(),
            2,
            "written once each: {text}"
        );
        // A restart with --requeue-lost keeps the cancelled job started (not to be run again).
        let (mut journal, recovered) = Journal::open(&path, true, None).unwrap();
        let jobs: Vec<(Seq, bool, bool)> = recovered
            .jobs
            .iter()
            .map(|j| (j.seq, j.started, j.cancelled))
            .collect();
        assert_eq!(jobs, [(1, true, true), (2, false, true), (3, false, false)]);
        journal.ended(2);
        journal
            .compact([(1, "a", "x", true), (3, "b", "z", false)].into_iter())
            .unwrap();
        drop(journal);
        let text = std::fs::read_to_string(&path).unwrap();
        let recovered = replayed(&text).unwrap();
        let jobs: Vec<(Seq, bool)> = recovered
            .jobs
            .iter()
            .map(|j| (j.seq, j.cancelled))
            .collect();
        assert_eq!(jobs, [(1, true), (3, false)], "{text}");
    }

    #[test]
    fn a_close_s_stops_are_kept_by_a_restart_and_by_compaction_until_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.journal");
        {
            let (mut journal, _) = Journal::open(&path, false, None).unwrap();
            journal.admitted(1, "a", "x");
            journal.started(1);
            journal.admitted(2, "b", "y");
            journal.admitted(3, "c", "z");
            journal.cancelled(3);
            journal.closing(1, Closing::Shutdown);
            journal.closing(1, Closing::Shutdown);
            journal.closing(2, Closing::Shutdown);
            // A cancel's reason stays the job's.
            journal.closing(3, Closing::Shutdown);
            journal.sync().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text.matches("{\"t\":").count(),
            2,
            "written once each, not for the cancelled job: {text}"
        );
        // A restart with --requeue-lost keeps the running job it stopped started.
        let (mut journal, recovered) = Journal::open(&path, true, None).unwrap();
        let jobs: Vec<(Seq, bool, Option<Closing>, bool)> = recovered
            .jobs
            .iter()
            .map(|j| (j.seq, j.started, j.closing, j.settled()))
            .collect();
        assert_eq!(
            jobs,
            [
                (1, true, Some(Closing::Shutdown), true),
                (2, false, Some(Closing::Shutdown), true),
                (3, false, None, true)
            ]
        );
        journal.ended(2);
        journal.ended(3);
        journal.compact([(1, "a", "x", true)].into_iter()).unwrap();
        drop(journal);
        let text = std::fs::read_to_string(&path).unwrap();
        let recovered = replayed(&text).unwrap();
        let jobs: Vec<(Seq, bool, Option<Closing>)> = recovered
            .jobs
            .iter()
            .map(|j| (j.seq, j.started, j.closing))
            .collect();
        assert_eq!(jobs, [(1, true, Some(Closing::Shutdown))], "{text}");
        // `--fail-fast`'s reason reads back as written; a stop of a job never admitted is no
        // journal.
        let good = "{\"journal\":5}\n{\"a\":1,\"k\":\"a\",\"c\":\"x\"}\n";
        let recovered = replayed(&format!("{good}{{\"t\":1,\"r\":\"fail_fast\"}}\n")).unwrap();
        assert_eq!(recovered.jobs[0].closing, Some(Closing::FailFast));
        let err = replayed(&format!("{good}{{\"t\":2,\"r\":\"shutdown\"}}\n")).unwrap_err();
        assert!(err.contains("line 3: seq 2"), "{err}");
    }

    #[test]
    fn a_supersede_is_kept_by_a_restart_and_by_compaction_until_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.journal");
        {
            let (mut journal, _) = Journal::open(&path, false, None).unwrap();
            journal.admitted(1, "a", "x");
            journal.started(1);
            journal.admitted(2, "a", "y");
            journal.superseded(1, 2);
            journal.superseded(1, 2);
            journal.admitted(3, "a", "z");
            journal.superseded(2, 3);
            journal.sync().unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text.matches("{\"p\":").count(),
            2,
            "written once each: {text}"
        );
        // A restart with --requeue-lost keeps the superseded running job started.
        let (mut journal, recovered) = Journal::open(&path, true, None).unwrap();
        let jobs: Vec<(Seq, bool, Option<Seq>)> = recovered
            .jobs
            .iter()
            .map(|j| (j.seq, j.started, j.superseded_by))
            .collect();
        assert_eq!(
            jobs,
            [(1, true, Some(2)), (2, false, Some(3)), (3, false, None)]
        );
        journal.ended(2);
        journal
            .compact([(1, "a", "x", true), (3, "a", "z", false)].into_iter())
            .unwrap();
        drop(journal);
        let text = std::fs::read_to_string(&path).unwrap();
        let recovered = replayed(&text).unwrap();
        let jobs: Vec<(Seq, bool, Option<Seq>)> = recovered
            .jobs
            .iter()
            .map(|j| (j.seq, j.started, j.superseded_by))
            .collect();
        assert_eq!(jobs, [(1, true, Some(2)), (3, false, None)], "{text}");
        // A supersede by no newer job, or of a job never admitted, is no journal.
        let bad = "{\"journal\":4}\n{\"a\":1,\"k\":\"a\",\"c\":\"x\"}\n";
        let err = replayed(&format!("{bad}{{\"p\":1,\"b\":1}}\n")).unwrap_err();
        assert!(err.contains("line 3: seq 1 superseded by seq 1"), "{err}");
        let err = replayed(&format!("{bad}{{\"p\":2,\"b\":3}}\n")).unwrap_err();
        assert!(err.contains("line 3: seq 2 superseded"), "{err}");
    }

    #[test]
    fn an_empty_file_is_no_journal_and_live_jobs_keep_what_they_run_under() {
        assert!(replayed("").unwrap_err().contains("it is empty"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.journal");
        std::fs::write(&path, "").unwrap();
        let err = Journal::open(&path, false, None).err().unwrap().to_string();
        assert!(err.contains("is empty"), "{err}");
        std::fs::remove_file(&path).unwrap();
        let under = |command: Option<&str>, cwd: &str| RunsUnder {
            command: command.map(str::to_owned),
            colsep: None,
            shell: "sh".into(),
            cwd: cwd.into(),
        };
        {
            let (mut journal, _) =
                Journal::open_under(&path, false, None, Some(under(Some("echo {}"), "/a")))
                    .unwrap();
            journal.admitted(1, "a", "x");
            journal.sync().unwrap();
        }
        let err = Journal::open_under(&path, false, None, Some(under(None, "/b")))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("holds 1 job an earlier server admitted that this one would run")
                && err.contains("the command template is none here, `echo {}` in the journal")
                && err.contains("the working directory is /b here, /a in the journal"),
            "{err}"
        );
        // The same: the job is recovered, and the rewritten header keeps what it runs under.
        let (mut journal, recovered) =
            Journal::open_under(&path, false, None, Some(under(Some("echo {}"), "/a"))).unwrap();
        assert_eq!(recovered.jobs.len(), 1);
        journal.ended(1);
        journal.sync().unwrap();
        drop(journal);
        // No live job: another server may use it under anything.
        assert!(Journal::open_under(&path, false, None, Some(under(None, "/b"))).is_ok());
        // Nor does a job it would only record (started, without --requeue-lost; cancelled)
        // refuse it; with --requeue-lost the started one would run, and does.
        {
            let (mut journal, _) =
                Journal::open_under(&path, false, None, Some(under(None, "/a"))).unwrap();
            journal.admitted(2, "a", "x");
            journal.started(2);
            journal.admitted(3, "b", "y");
            journal.cancelled(3);
            journal.sync().unwrap();
        }
        let (journal, recovered) =
            Journal::open_under(&path, false, None, Some(under(None, "/b"))).unwrap();
        assert_eq!(recovered.jobs.len(), 2);
        drop(journal);
        let err = Journal::open_under(&path, true, None, Some(under(None, "/c")))
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("holds 1 job") && err.contains("the 2 jobs left in this one"),
            "{err}"
        );
    }

    #[test]
    fn a_journal_is_known_by_one_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.journal");
        let (first, _) = Journal::open(&path, false, None).unwrap();
        // Through a symbolic link: the same lock, refused.
        let link = dir.path().join("link.journal");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let err = Journal::open(&link, false, None).err().unwrap().to_string();
        assert!(err.contains("another lanes serve"), "{err}");
        assert!(link.is_symlink(), "the link was replaced");
        drop(first);
        // Through a hard link: refused whichever name is given.
        let hard = dir.path().join("hard.journal");
        std::fs::hard_link(&path, &hard).unwrap();
        for name in [&path, &hard] {
            let err = Journal::open(name, false, None).err().unwrap().to_string();
            assert!(err.contains("hard links"), "{err}");
        }
    }

    #[test]
    fn open_rewrites_the_file_with_the_live_jobs_only_and_compaction_keeps_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.journal");
        {
            let (mut journal, recovered) = Journal::open(&path, false, None).unwrap();
            assert_eq!(recovered, Recovered::default());
            journal.admitted(1, "a", "x");
            journal.admitted(2, "b", "y");
            journal.started(1);
            journal.admitted(3, "a", "z");
            journal.ended(2);
            journal.sync().unwrap();
        }
        let (mut journal, recovered) = Journal::open(&path, false, None).unwrap();
        let second = Journal::open(&path, false, None).map(|_| ()).unwrap_err();
        assert!(
            second.to_string().contains("another lanes serve"),
            "{second}"
        );
        let seqs: Vec<Seq> = recovered.jobs.iter().map(|j| j.seq).collect();
        assert_eq!((seqs, recovered.last_seq), (vec![1, 3], 3));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 4, "{text}");
        journal.admitted(4, "c", "w");
        journal.ended(4);
        journal.compact([(3, "a", "z", false)].into_iter()).unwrap();
        journal.ended(3);
        drop(journal);
        let (_, recovered) = Journal::open(&path, false, None).unwrap();
        assert!(recovered.jobs.is_empty());
        assert_eq!(recovered.last_seq, 4, "seqs are never handed out twice");
        // Mode 0600: it holds the commands.
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn a_corrupt_journal_is_refused_naming_the_line() {
        for (text, line) in [
            ("{\"journal\":1,\"last\":18446744073709551615}\n", "line 1"),
            (
                "{\"journal\":1}\n{\"a\":1,\"k\":\"a\",\"c\":\"x\"}\n{\"a\":1,\"k\":\"b\",\"c\":\"y\"}\n",
                "line 3",
            ),
            (
                "{\"journal\":1}\n{\"a\":2,\"k\":\"a\",\"c\":\"x\"}\n{\"a\":1,\"k\":\"b\",\"c\":\"y\"}\n",
                "line 3",
            ),
            ("{\"journal\":1}\n{\"a\":1,\"k\":\"\",\"c\":\"x\"}\n", "line 2"),
            ("{\"journal\":1}\n{\"a\":1,\"k\":\"a\",\"c\":\" \"}\n", "line 2"),
            ("{\"journal\":1}\n{\"a\":0,\"k\":\"a\",\"c\":\"x\"}\n", "line 2"),
        ] {
            let err = replayed(text).unwrap_err();
            assert!(err.contains(line), "{text}: {err}");
        }
    }

    #[test]
    fn a_live_job_whose_record_is_in_the_earlier_report_is_not_live() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.journal");
        let first = dir.path().join("first.jsonl");
        {
            let (mut journal, _) = Journal::open(&path, false, Some(&first)).unwrap();
            journal.admitted(1, "a", "x");
            journal.admitted(2, "a", "y");
            journal.started(1);
            journal.sync().unwrap();
        }
        // Killed after seq 1's record reached the report, before its end was journaled; the
        // record of seq 2 was cut short.
        std::fs::write(
            &first,
            "{\"type\":\"run\",\"seq\":2}\n{\"type\":\"job\",\"seq\":1,\"key\":\"a\",\"command\":\"x\",\"outcome\":\"succeeded\"}\n{\"type\":\"job\",\"se",
        )
        .unwrap();
        let second = dir.path().join("second.jsonl");
        let (journal, recovered) = Journal::open(&path, false, Some(&second)).unwrap();
        let seqs: Vec<Seq> = recovered.jobs.iter().map(|j| j.seq).collect();
        assert_eq!(seqs, vec![2]);
        drop(journal);
        // The header names the second server's report now.
        let (_, recovered) = Journal::open(&path, false, None).unwrap();
        assert_eq!(recovered.report.as_deref(), Some(second.as_path()));
        assert_eq!(recovered.jobs.len(), 1);
    }

    #[test]
    fn a_record_of_another_job_under_a_live_seq_leaves_it_live() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.journal");
        let first = dir.path().join("first.jsonl");
        {
            let (mut journal, _) = Journal::open(&path, false, Some(&first)).unwrap();
            journal.admitted(1, "a", "sleep 30");
            journal.admitted(2, "b", "sleep 30");
            journal.admitted(3, "c", "sleep 30");
            journal.started(1);
            journal.sync().unwrap();
        }
        // The report's name was reused by an unrelated run: its seqs 1–3 are other jobs; only
        // a record with seq 3's own key and command counts.
        let unrelated = [("x", "true"), ("b", "true"), ("c", "sleep 30")]
            .iter()
            .enumerate()
            .map(|(n, (key, command))| {
                format!(
                    "{{\"type\":\"job\",\"seq\":{},\"key\":\"{key}\",\"command\":\"{command}\"}}\n",
                    n + 1
                )
            })
            .collect::<String>();
        std::fs::write(&first, unrelated).unwrap();
        let (_, recovered) =
            Journal::open(&path, false, Some(&dir.path().join("second.jsonl"))).unwrap();
        let seqs: Vec<Seq> = recovered.jobs.iter().map(|j| j.seq).collect();
        assert_eq!(seqs, vec![1, 2]);
    }
}
