//! `lanes serve` in the event loop: each request from the socket ([`Call`]) is answered from
//! what the core decides (admission, cancel, the cap, close); answers that wait for a job's
//! end (`submit --wait`, `cancel`) are kept here until its record is written.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::{Admitted, Driver};
use crate::core::{Outcome, RejectReason, Seq, StopReason};
use crate::input::JobSpec;
use crate::serve::journal::{Closing, Journal, Recovered};
use crate::serve::protocol::{
    Answer, Request, RunningEntry, Status, StoppingRun, WaitingEntry, WaitingJob,
};
use crate::serve::server::{Call, Owed, Reply};

/// A job whose record was handed to the report and whose end is not journaled yet.
pub(super) struct Ended {
    seq: Seq,
    key: Arc<str>,
    command: String,
}

/// A `submit --wait` client: where its job's record goes, and the run of this server (by its
/// first seq) it asked from, if one.
type RecordWaiter = (oneshot::Sender<Answer>, Option<Seq>);

/// Most requests answered in one turn of the loop (one `fdatasync` of the journal for all).
const CALL_BURST: usize = 256;

/// How the error of a job the earlier server did not record ends: why it has no record.
const SERVER_LOST: &str =
    "the earlier lanes serve ended without recording it (killed, crashed, or its \
report could not be written)";

/// A submission waiting for its spawn: its reply, the record that follows (`--wait`), and the
/// jobs ahead of it at admission.
type AwaitingStart = (
    oneshot::Sender<Reply>,
    Option<oneshot::Receiver<Answer>>,
    usize,
);

/// How long the server waits, at its end, for its `ended` answers and every answer still
/// owed to be written (a client that reads nothing is not waited for longer).
const ENDED_WRITE: std::time::Duration = std::time::Duration::from_secs(5);

/// What the service keeps between requests.
pub(super) struct Service {
    /// Admissions, starts and records, for a server started after this one dies.
    journal: Journal,
    /// `--requeue-lost`.
    requeue_lost: bool,
    /// Jobs whose record was handed to the report, not yet journaled as ended (that waits
    /// until the record is in the file).
    pending_ends: Vec<Ended>,
    /// Jobs whose records were handed to the report, behind the mark queued after them;
    /// journaled as ended once the report's writers (the file's, stdout's under `--json`)
    /// have written through it.
    behind_marks: std::collections::VecDeque<(crate::report::recorder::ReportMark, Vec<Ended>)>,
    /// Jobs whose process runs (journaled as started), for compaction.
    running: HashSet<Seq>,
    /// Answers to submissions, sent once the journal holds them on disk.
    deferred: Vec<(oneshot::Sender<Reply>, Reply)>,
    /// Submissions taken to start whose spawn is in flight, by seq: answered once it is known
    /// whether the process started (the reply, what follows it, and the jobs ahead of it at
    /// admission).
    awaiting_start: HashMap<Seq, AwaitingStart>,
    /// The last seq handed out.
    last_seq: Seq,
    /// Set by `drain` or `close`: nothing more is admitted.
    ending: Option<&'static str>,
    /// The connections of `drain` and `close`, held open until the server ends: where their
    /// `ended` answer goes, and what tells that it was written ([`Driver::say_ended`]).
    held: Vec<(oneshot::Sender<Answer>, oneshot::Receiver<()>)>,
    /// `submit --wait`: who waits for each job's record.
    records: HashMap<Seq, Vec<RecordWaiter>>,
    /// `cancel`: the answers sent once the stopped run (by its first seq) has its record.
    cancels: HashMap<Seq, Vec<(oneshot::Sender<Reply>, Answer)>>,
    /// Jobs admitted since the start.
    submitted: u64,
    /// Records written since the start.
    ended: u64,
    /// The journal's first write failure was said on stderr.
    failure_said: bool,
    /// That the report file failed, and the journal keeps every job since, was said on
    /// stderr.
    report_failure_said: bool,
    /// That the journal could not be rewritten was said on stderr (once: each later try is
    /// as likely to fail while the disk stays full).
    compaction_failure_said: bool,
    /// The answers not yet written to their connections, waited for at the end.
    owed: Arc<Owed>,
}

impl Service {
    /// A service journaling to `journal`.
    pub(super) fn new(journal: Journal, requeue_lost: bool, owed: Arc<Owed>) -> Self {
        Service {
            journal,
            requeue_lost,
            pending_ends: Vec::new(),
            behind_marks: std::collections::VecDeque::new(),
            running: HashSet::new(),
            deferred: Vec::new(),
            awaiting_start: HashMap::new(),
            last_seq: 0,
            ending: None,
            held: Vec::new(),
            records: HashMap::new(),
            cancels: HashMap::new(),
            submitted: 0,
            ended: 0,
            failure_said: false,
            report_failure_said: false,
            compaction_failure_said: false,
            owed,
        }
    }

    /// The processes of a run are about to be spawned: its jobs are journaled as started
    /// first (see [`Journal::started`]).
    pub(super) fn starting(&mut self, batch: &[Seq]) {
        for &seq in batch {
            self.journal.started(seq);
            self.running.insert(seq);
        }
    }

    /// The spawn of a run journaled as [`Service::starting`] failed: no process ran.
    pub(super) fn not_started(&mut self, batch: &[Seq]) {
        for &seq in batch {
            if self.running.remove(&seq) {
                self.journal.not_started(seq);
            }
        }
    }

    /// The jobs `seqs` were superseded by job `by`: journaled before their records are handed
    /// to the report (see [`Journal::superseded`]).
    pub(super) fn superseded(&mut self, seqs: impl IntoIterator<Item = Seq>, by: Seq) {
        for seq in seqs {
            self.journal.superseded(seq, by);
        }
    }

    /// The server is ending (`why`) and dropped or is stopping the jobs `seqs`: journaled
    /// before their records are handed to the report and before any stop (see
    /// [`Journal::closing`]).
    pub(super) fn closing(&mut self, seqs: impl IntoIterator<Item = Seq>, why: Closing) {
        for seq in seqs {
            self.journal.closing(seq, why);
        }
    }

    /// Which runs of this server (by first seq) wait for which jobs' records, through a
    /// `submit --wait` whose client still waits.
    fn awaits(&self) -> HashMap<Seq, Vec<Seq>> {
        let mut awaits: HashMap<Seq, Vec<Seq>> = HashMap::new();
        for (&seq, waiters) in &self.records {
            for (waiter, from) in waiters {
                if let Some(run) = from.filter(|_| !waiter.is_closed()) {
                    awaits.entry(run).or_default().push(seq);
                }
            }
        }
        awaits
    }

    /// Whether the record of `seq` is waited for (encoded for `submit --wait`).
    pub(super) fn wants_record(&self, seq: Seq) -> bool {
        self.records.contains_key(&seq)
    }

    /// The record of `seq` (`key`, `command`) is written (`record`: its line, when it was
    /// wanted): the waiters for it are answered.
    pub(super) fn recorded(
        &mut self,
        seq: Seq,
        key: &Arc<str>,
        command: &str,
        record: Option<Vec<u8>>,
    ) {
        self.ended += 1;
        self.running.remove(&seq);
        self.pending_ends.push(Ended {
            seq,
            key: Arc::clone(key),
            command: command.to_owned(),
        });
        if let Some(waiters) = self.records.remove(&seq) {
            let record = record
                .and_then(|line| serde_json::from_slice(&line).ok())
                .unwrap_or(serde_json::Value::Null);
            for (waiter, _) in waiters {
                let _ = waiter.send(Answer::Record {
                    record: record.clone(),
                });
            }
        }
        if let Some(cancels) = self.cancels.remove(&seq) {
            for (reply, answer) in cancels {
                let _ = reply.send(Reply::now(answer));
            }
        }
    }
}

/// The next request from the socket; never, without a service.
pub(super) async fn next_call(calls: &mut Option<mpsc::Receiver<Call>>) -> Option<Call> {
    match calls {
        Some(calls) => calls.recv().await,
        None => std::future::pending().await,
    }
}

/// An admission's answer (`started`, `queued`, `coalesced`) as it may go out: as it is while
/// the journal holds what it promises, else (`failure`: why the journal could not be written)
/// an `error` saying what a crash of the server would do to the job, admitted and run all the
/// same. Other answers are left as they are.
fn as_journaled(reply: Reply, failure: Option<&str>, journal: &Journal) -> Reply {
    let Some(err) = failure else {
        return reply;
    };
    let seq = match &reply.answer {
        Answer::Started { seq, .. }
        | Answer::Queued { seq, .. }
        | Answer::Coalesced { seq, .. } => *seq,
        _ => return reply,
    };
    if journal.holds(seq) {
        // Its line went out whole before the failure, and is on the disk.
        return reply;
    }
    let after_a_crash = if journal.lost_admission(seq) {
        "it would not outlive a crash of the server"
    } else {
        "a server started after a crash of this one may or may not run it again"
    };
    Reply::now(Answer::Error {
        error: format!(
            "seq {seq} was admitted and runs, but the journal could not be written ({err}): \
             {after_a_crash}; this server admits no more jobs"
        ),
    })
}

fn reply(call: Call, answer: Answer) {
    let _ = call.reply.send(Reply::now(answer));
}

impl Driver {
    /// Whether the service still admits jobs: neither drained, closed nor stopping (a stop
    /// signal).
    pub(super) fn admits(&self, service: &Service) -> bool {
        service.ending.is_none() && self.core.stopping().is_none()
    }

    /// Whether a submission now could be admitted: the service [`Driver::admits`], its journal
    /// can be written, and it has seqs left to hand out. (A server whose journal failed goes on
    /// running what it admitted, and ends only when told to.)
    fn takes_submissions(&self, service: &Service) -> bool {
        self.admits(service)
            && service.journal.failure().is_none()
            && service.last_seq < Seq::MAX - 1
    }

    /// How a halt of the core ends the server: `fail_fast` after `--fail-fast` stopped it,
    /// else `stopping` (a stop signal, or `close`); `None` while it is not halted.
    fn stop_why(&self) -> Option<&'static str> {
        self.core.stopping().map(|reason| match reason {
            crate::core::StopReason::FailFast => "fail_fast",
            _ => "stopping",
        })
    }

    fn closed_answer(&self) -> Answer {
        let why = match &self.service {
            Some(Service {
                ending: Some(why), ..
            }) => why,
            _ => self.stop_why().unwrap_or("stopping"),
        };
        Answer::Closed {
            why: why.to_string(),
        }
    }

    /// Answers a request and whatever others are ready (up to a bound), then flushes the
    /// journal once and sends the submissions' answers: an answer promises what it says.
    pub(super) async fn on_calls(&mut self, call: Call, calls: &mut Option<mpsc::Receiver<Call>>) {
        self.on_call(call).await;
        for _ in 0..CALL_BURST {
            let Some(Ok(call)) = calls.as_mut().map(mpsc::Receiver::try_recv) else {
                break;
            };
            self.on_call(call).await;
        }
        let Some(service) = &mut self.service else {
            return;
        };
        let failed = service.journal.sync().err().map(|err| err.to_string());
        if let Some(err) = failed.as_ref().filter(|_| !service.failure_said) {
            service.failure_said = true;
            let message = format!(
                "lanes: cannot write the journal ({err}): the jobs admitted now would not outlive \
                 a crash; no more jobs are admitted (restart the server once that is mended)\n"
            );
            let _ = self.launcher.stderr().send(message.into_bytes()).await;
        }
        let Some(service) = &mut self.service else {
            return;
        };
        for (reply, answer) in service.deferred.drain(..) {
            let _ = reply.send(as_journaled(answer, failed.as_deref(), &service.journal));
        }
    }

    /// The jobs an earlier server left without a record: those that were running are
    /// recorded `interrupted`/`server_lost` (or, `--requeue-lost`, admitted again), the
    /// others admitted again, all in their order, with their seqs.
    pub(super) async fn recover(&mut self, recovered: Recovered) {
        let requeue_lost = self.service.as_ref().is_some_and(|s| s.requeue_lost);
        if let Some(service) = &mut self.service {
            service.last_seq = recovered.last_seq;
        }
        let now = self.tick();
        for job in recovered.jobs {
            // Counted as submitted to this server: each gets its record from it.
            if let Some(service) = &mut self.service {
                service.submitted += 1;
            }
            let spec = JobSpec {
                seq: job.seq,
                line: job.seq,
                key: Arc::from(job.key),
                command: job.command,
                rank: 0,
                timeout: None,
                cwd: None,
                env: Vec::new(),
                needs: self.config.run_default_needs(),
            };
            self.received += 1;
            // Recorded at once, not run (again): a job a newer one had superseded, one
            // `lanes cancel` or the server's own end had dropped or was stopping, and (without
            // `--requeue-lost`) one that was running.
            let stopped_by = match (job.cancelled, job.closing) {
                (true, _) => Some((StopReason::Cancelled, "`lanes cancel`")),
                (false, Some(why)) => Some((
                    why.reason(),
                    match why {
                        Closing::Shutdown => "`lanes close` or a stop signal",
                        Closing::FailFast => "`--fail-fast`",
                    },
                )),
                (false, None) => None,
            };
            let unrun = if let Some(by) = job.superseded_by {
                let error = if job.started {
                    format!("it was being stopped, superseded by seq {by}, when {SERVER_LOST}")
                } else {
                    format!("seq {by} had superseded it when {SERVER_LOST}")
                };
                Some((self.core.superseded_with_server(job.seq, by, now), error))
            } else if let Some((reason, what)) = stopped_by {
                let error = if job.started {
                    format!("{what} was stopping it when {SERVER_LOST}")
                } else {
                    format!("{what} had dropped it when {SERVER_LOST}")
                };
                Some((self.core.stopped_with_server(job.seq, reason, now), error))
            } else if job.started && !requeue_lost {
                // The journal knows a start, not whether a try was still running or had ended
                // and waited out its retry delay.
                let error = format!(
                    "it had started (running, or waiting out its retry delay) when \
                     {SERVER_LOST}; what it did is unknown"
                );
                Some((self.core.lost_with_server(job.seq, now), error))
            } else {
                None
            };
            if let Some((account, error)) = unrun {
                let output = super::RunOutput {
                    error: Some(error),
                    ..super::RunOutput::default()
                };
                self.close(&account, &spec, output).await;
                continue;
            }
            // Its `queued` answer promised it a run: this server's queue bounds do not refuse it.
            let _ = self.offer_job(spec, false, now).await;
        }
    }

    /// Whether ends wait to be journaled behind records not yet written: the loop is then
    /// woken once they are ([`Driver::journal_ends`] on its next round), not only by the next
    /// event (a server idle after its last job kept that job live in its journal).
    pub(super) fn ends_waiting(&self) -> bool {
        self.service
            .as_ref()
            .is_some_and(|service| !service.behind_marks.is_empty())
    }

    /// Journals the ends of the jobs whose records are now in the report file and, under
    /// `--json`, written to stdout, and rewrites the journal when it has grown far beyond the
    /// live jobs. Never waits for the report's writers: a reader that reads slowly or not at
    /// all (a FIFO, stdout into a paused pager) holds up no answer, start or end; the ends
    /// follow once it has read.
    pub(super) async fn journal_ends(&mut self) {
        let Some(service) = &self.service else {
            return;
        };
        if service.pending_ends.is_empty() && service.behind_marks.is_empty() {
            return;
        }
        if !service.pending_ends.is_empty() {
            let mark = self.ledger.report_mark();
            let service = self.service.as_mut().expect("seen above");
            let ends = std::mem::take(&mut service.pending_ends);
            service.behind_marks.push_back((mark, ends));
        }
        let Some(service) = &mut self.service else {
            return;
        };
        while let Some((mark, _)) = service.behind_marks.front_mut() {
            if !self.ledger.written_through(mark) {
                break;
            }
            let (_, ends) = service.behind_marks.pop_front().expect("just seen");
            for ended in ends {
                service.journal.ended(ended.seq);
            }
        }
        let report_failed = self.ledger.report_failed();
        if report_failed {
            // These records, and every later one, are not in the report: their ends stay
            // unjournaled, so that a server started on this journal records them (as lost
            // with this one). Nor is the journal rewritten from the live jobs alone: it would
            // drop them.
            service.behind_marks.clear();
            if !service.report_failure_said {
                service.report_failure_said = true;
                let message =
                    "lanes: the report is incomplete: from now on the journal keeps every \
                               job, and a server started on it later records the jobs whose \
                               records are missing\n";
                let _ = self
                    .launcher
                    .stderr()
                    .send(message.as_bytes().to_vec())
                    .await;
            }
            return;
        }
        if service.journal.wants_compaction(self.jobs.len()) {
            // The jobs whose records are not yet known written stay in the journal too, as
            // started: a server started on it after a crash finds each one's record in the
            // report, or records it lost, and never runs it again.
            let running = &service.running;
            let mut live: Vec<(Seq, &str, &str, bool)> = self
                .jobs
                .iter()
                .map(|(seq, job)| (*seq, &*job.key, job.command.as_str(), running.contains(seq)))
                .chain(
                    service
                        .behind_marks
                        .iter()
                        .flat_map(|(_, ends)| ends)
                        .map(|ended| (ended.seq, &*ended.key, ended.command.as_str(), true)),
                )
                .collect();
            live.sort_unstable_by_key(|(seq, ..)| *seq);
            let jobs = live.into_iter();
            if let Err(err) = service.journal.compact(jobs) {
                if !std::mem::replace(&mut service.compaction_failure_said, true) {
                    let message = format!(
                        "lanes: cannot rewrite the journal ({err}); it grows on (said once)\n"
                    );
                    let _ = self.launcher.stderr().send(message.into_bytes()).await;
                }
            }
        }
    }

    /// The server ends with every job recorded: its journal is emptied.
    pub(super) fn journal_finished(&mut self) {
        if let Some(service) = &mut self.service {
            service.journal.finish();
        }
    }

    /// Answers one request.
    pub(super) async fn on_call(&mut self, call: Call) {
        if self.service.is_none() {
            return;
        }
        match call.request.clone() {
            Request::Submit { key, command, wait } => self.submit(call, key, command, wait).await,
            Request::Cancel { key } => self.cancel(call, key).await,
            Request::Status {} => {
                let status = self.status();
                reply(call, Answer::Status(Box::new(status)));
            }
            Request::Set { max_concurrent } => {
                let answer = if self.config.policy.sticky_slots {
                    Answer::Error {
                        error: "the cap cannot change under --sticky-slots (a key bound to a slot \
                                above it could never run again)"
                            .into(),
                    }
                } else if max_concurrent < self.config.policy.heaviest {
                    Answer::Error {
                        error: format!(
                            "the cap cannot go below {}, the weight of a job of this server \
                             (--weight): it could never start",
                            self.config.policy.heaviest
                        ),
                    }
                } else {
                    let previous = self.core.set_max_concurrent(max_concurrent);
                    Answer::Set {
                        max_concurrent: self.core.limits().max_concurrent,
                        previous,
                    }
                };
                reply(call, answer);
            }
            Request::Drain {} => self.end_service(call, "draining").await,
            Request::Close {} => self.end_service(call, "closing").await,
        }
    }

    /// The run of this server that `call`'s client runs inside, by its first seq, with its
    /// key: a process of one of its jobs (`LANES_SEQ`, a descendant of this server) while that
    /// run is in flight.
    fn caller_run(&self, call: &Call) -> Option<(Seq, Arc<str>)> {
        let seq = crate::shell::lineage::job_of(call.peer?)?;
        self.core.slot_of(seq)?;
        Some((seq, Arc::clone(&self.jobs.get(&seq)?.key)))
    }

    async fn submit(&mut self, call: Call, key: String, command: String, wait: bool) {
        let admits = self.service.as_ref().is_some_and(|s| self.admits(s));
        if !admits {
            let answer = self.closed_answer();
            reply(call, answer);
            return;
        }
        // The run of this server the client asks from, for a wait.
        let from = if wait { self.caller_run(&call) } else { None };
        if let Some((caller, caller_key)) = &from {
            let caller = *caller;
            let awaits = self
                .service
                .as_ref()
                .map(Service::awaits)
                .unwrap_or_default();
            if let Some(chain) = self.core.awaited_back(&key, caller, &awaits) {
                // Its job would wait in the lane behind the job that waits for it, or, under
                // `--cancel-in-progress`, stop it; or it would wait behind a job that waits,
                // through other jobs' waits, for the job asking.
                let shown = crate::output::framing::escape_controls(&key);
                let error = if **caller_key != *key {
                    let through: Vec<String> =
                        chain.iter().rev().map(|seq| format!("job {seq}")).collect();
                    format!(
                        "`submit --wait` of key {shown} from inside job {caller}: the job would \
                         wait for {}, each waiting for the next (through `submit --wait` or \
                         its lane) and the last being the job asking: none would ever end; \
                         submit it without --wait",
                        through.join(", then ")
                    )
                } else if self.config.policy.cancel_in_progress {
                    format!(
                        "`submit --wait` of key {shown} from inside job {caller}, of the same key: \
                         under --cancel-in-progress the job would stop job {caller}, which waits \
                         for it (submitted without --wait, it stops job {caller} all the same)"
                    )
                } else {
                    format!(
                        "`submit --wait` of key {shown} from inside job {caller}, of the same key: \
                         the job would run only after job {caller} ends, which waits for it; \
                         submit it without --wait"
                    )
                };
                reply(call, Answer::Error { error });
                return;
            }
        }
        let Some(service) = self.service.as_mut() else {
            return;
        };
        if let Some(failure) = service.journal.failure() {
            let error = format!(
                "the journal cannot be written ({failure}): this server admits no more jobs \
                 (restart it once that is mended)"
            );
            reply(call, Answer::Error { error });
            return;
        }
        // The journal holds seqs below `Seq::MAX`: past the last one, nothing is numbered.
        if service.last_seq >= Seq::MAX - 1 {
            let error = format!(
                "every seq up to {} was handed out: start a server on a new journal",
                service.last_seq
            );
            reply(call, Answer::Error { error });
            return;
        }
        service.last_seq += 1;
        // Every seq handed out is counted, whatever becomes of its job (`status`: `submitted`
        // ≥ `ended`).
        service.submitted += 1;
        let seq = service.last_seq;
        let (record_tx, record_rx) = oneshot::channel();
        if wait {
            let from = from.as_ref().map(|(run, _)| *run);
            service
                .records
                .entry(seq)
                .or_default()
                .push((record_tx, from));
        }
        let key: Arc<str> = Arc::from(key);
        let spec = JobSpec {
            seq,
            line: seq,
            key: Arc::clone(&key),
            command,
            rank: 0,
            timeout: None,
            cwd: None,
            env: Vec::new(),
            needs: self.config.run_default_needs(),
        };
        self.received += 1;
        let now = self.tick();
        // A job this submission frees to go waited for nothing but lanes from now on.
        self.decided_at = Some(now);
        if let Some(message) = over_limit(&spec.key, &spec.command) {
            if let Some(service) = self.service.as_mut() {
                service.journal.numbered(seq);
            }
            // It could never start (E2BIG): refused as a run refuses such a line.
            let account = self.core.invalid_input(seq, now);
            let output = super::RunOutput {
                error: Some(message.clone()),
                ..super::RunOutput::default()
            };
            self.close(&account, &spec, output).await;
            let answer = Answer::Rejected {
                seq,
                key: key.to_string(),
                reason: Outcome::Rejected(RejectReason::InvalidInput)
                    .reason()
                    .unwrap_or_default()
                    .to_owned(),
                error: Some(message),
            };
            let then = wait.then_some(record_rx);
            self.defer(call.reply, answer, then);
            return;
        }
        let admitted = self.admit_job(spec, now).await;
        if matches!(admitted, Admitted::Queued { .. }) {
            if let (Some(service), Some(job)) = (self.service.as_mut(), self.jobs.get(&seq)) {
                service.journal.admitted(seq, &job.key, &job.command);
            }
            self.start_ready(false).await;
        } else if let Some(service) = self.service.as_mut() {
            service.journal.numbered(seq);
        }
        let key = key.to_string();
        let answer = match admitted {
            // No `--resume` in service mode: nothing is skipped.
            Admitted::Skipped => Answer::Error {
                error: "skipped".into(),
            },
            Admitted::Refused(Outcome::Rejected(reason)) => Answer::Rejected {
                seq,
                key,
                reason: Outcome::Rejected(reason)
                    .reason()
                    .unwrap_or_default()
                    .to_owned(),
                error: None,
            },
            Admitted::Refused(_) => self.closed_answer(),
            Admitted::Queued { ahead, .. }
                if (self.core.slot_of(seq).is_some() && self.launcher.spawning(seq))
                    || self.descriptor_retry == Some(seq) =>
            {
                // Answered once its process has started, or could not.
                let then = wait.then_some(record_rx);
                if let Some(service) = self.service.as_mut() {
                    service
                        .awaiting_start
                        .insert(seq, (call.reply, then, ahead));
                }
                return;
            }
            Admitted::Queued { ahead, replaced } => match (self.core.slot_of(seq), replaced) {
                (Some(slot), _) => Answer::Started { seq, key, slot },
                // Its process could not be started: its record is written already.
                (None, _) if !self.jobs.contains_key(&seq) => Answer::Failed {
                    seq,
                    key,
                    reason: "spawn_error".into(),
                },
                (None, Some(replaced)) => Answer::Coalesced {
                    seq,
                    key,
                    ahead,
                    replaced,
                },
                (None, None) => Answer::Queued { seq, key, ahead },
            },
        };
        // With `wait`, the record follows: at once when it is written already (refused, or
        // its process could not start).
        let then = wait.then_some(record_rx);
        self.defer(call.reply, answer, then);
    }

    /// Holds a submission's answer (and, with `wait`, where its record follows) until the
    /// journal is flushed ([`Driver::on_calls`]).
    fn defer(
        &mut self,
        reply: oneshot::Sender<Reply>,
        answer: Answer,
        then: Option<oneshot::Receiver<Answer>>,
    ) {
        if let Some(service) = self.service.as_mut() {
            service
                .deferred
                .push((reply, Reply::followed_by(answer, then)));
        }
    }

    /// Answers the submissions of `start`'s run that waited for its spawn: `started` when its
    /// process started, else `failed` (its record is written) or `queued` (tried again later).
    pub(super) fn answer_started(&mut self, start: &crate::core::Start, started: bool) {
        for &seq in &start.batch {
            let Some((reply, then, ahead)) = self
                .service
                .as_mut()
                .and_then(|service| service.awaiting_start.remove(&seq))
            else {
                continue;
            };
            let key = start.key.to_string();
            let answer = if started {
                Answer::Started {
                    seq,
                    key,
                    slot: start.slot,
                }
            } else if !self.jobs.contains_key(&seq) {
                Answer::Failed {
                    seq,
                    key,
                    reason: "spawn_error".into(),
                }
            } else {
                Answer::Queued { seq, key, ahead }
            };
            let made = Reply::followed_by(answer, then);
            let reply_now = match &self.service {
                Some(service) => as_journaled(made, service.journal.failure(), &service.journal),
                None => made,
            };
            let _ = reply.send(reply_now);
        }
    }

    async fn cancel(&mut self, call: Call, key: String) {
        let now = self.tick();
        let cancel = self.core.cancel_key(&key, now);
        let dropped: Vec<Seq> = cancel.dropped.iter().map(|account| account.seq).collect();
        // A run already being stopped for another reason keeps that reason.
        let stopped: &[Seq] = if cancel.stop.is_some() {
            &cancel.members
        } else {
            &[]
        };
        // Journaled before any record: a server killed before the records are in the report
        // leaves them to the next server as cancelled, not to be run (again).
        if let Some(service) = self.service.as_mut() {
            for &seq in dropped.iter().chain(stopped) {
                service.journal.cancelled(seq);
            }
        }
        for account in &cancel.dropped {
            self.close_waiting(account).await;
        }
        let stopping = cancel
            .running
            .zip(cancel.already)
            .map(|(seq, reason)| StoppingRun {
                seq,
                reason: Outcome::Interrupted(reason)
                    .reason()
                    .unwrap_or_default()
                    .to_owned(),
            });
        let answer = Answer::Cancelled {
            key,
            dropped,
            stopped: cancel.running.filter(|_| cancel.stop.is_some()),
            stopping,
        };
        self.send_stops(cancel.stop);
        match (cancel.running, self.service.as_mut()) {
            (Some(seq), Some(service)) => {
                service
                    .cancels
                    .entry(seq)
                    .or_default()
                    .push((call.reply, answer));
            }
            _ => reply(call, answer),
        }
    }

    fn status(&self) -> Status {
        let now = self.tick();
        let batching = self.core.policy().batching();
        // Each job of a running batch is listed, with the batch's first job.
        let running = self
            .core
            .running_jobs()
            .into_iter()
            .flat_map(|run| {
                run.members
                    .iter()
                    .map(|&seq| RunningEntry {
                        seq,
                        key: run.key.to_string(),
                        slot: run.slot,
                        attempt: run.attempt,
                        elapsed: now.saturating_sub(run.started_at).as_secs_f64(),
                        command: self
                            .jobs
                            .get(&seq)
                            .map(|job| job.command.clone())
                            .unwrap_or_default(),
                        stopping: run
                            .stopping
                            .and_then(|reason| Outcome::Interrupted(reason).reason())
                            .map(str::to_owned),
                        batch: batching.then_some(run.seq),
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let waiting = self
            .core
            .waiting_lanes()
            .into_iter()
            .map(|lane| WaitingEntry {
                key: lane.key.to_string(),
                jobs: lane
                    .waiting
                    .iter()
                    .map(|&(seq, ahead)| WaitingJob { seq, ahead })
                    .collect(),
            })
            .collect();
        let service = self.service.as_ref();
        Status {
            max_concurrent: self.core.limits().max_concurrent,
            admitting: service.is_some_and(|s| self.takes_submissions(s)),
            running,
            waiting,
            submitted: service.map_or(0, |s| s.submitted),
            ended: service.map_or(0, |s| s.ended),
        }
    }

    /// The server has ended, its report written with exit status `code`: tells each `drain`
    /// and `close` connection so (`ended`) and waits, at most [`ENDED_WRITE`], for each answer
    /// to be written, and for every answer still owed to a connection ([`Owed`]: a burst of
    /// submissions answered just before a stop signal, say), so that the process does not end
    /// before them: a submission that has a seq and a record has its answer too.
    pub(super) async fn say_ended(&mut self, code: u8) {
        let report_complete = !self.ledger.report_failed() && !self.ledger.lost();
        let Some(service) = self.service.as_mut() else {
            return;
        };
        // Nothing is left to be answered later: what is is answered now, or ends its
        // connection's wait (the job has its record).
        for (reply, answer) in service.deferred.drain(..) {
            let _ = reply.send(answer);
        }
        for (reply, answer) in service.cancels.drain().flat_map(|(_, cancels)| cancels) {
            let _ = reply.send(Reply::now(answer));
        }
        service.awaiting_start.clear();
        service.records.clear();
        let mut written = Vec::new();
        for (held, ack) in service.held.drain(..) {
            let ended = Answer::Ended {
                exit_code: code,
                report_complete,
            };
            if held.send(ended).is_ok() {
                written.push(ack);
            }
        }
        let owed = Arc::clone(&service.owed);
        let _ = tokio::time::timeout(ENDED_WRITE, async {
            for ack in written {
                let _ = ack.await;
            }
            owed.settled().await;
        })
        .await;
    }

    /// `drain` (`why` is `draining`): nothing more is admitted, what was admitted runs. `close`
    /// (`closing`): the run halts as on a stop signal, without one. Either way the server
    /// ends once nothing runs, and the connection is held open until then.
    async fn end_service(&mut self, call: Call, why: &'static str) {
        // Jobs, as `status` and `ahead` count them: each member of a running batch.
        let (running, waiting) = (self.core.jobs_in_flight(), self.core.queued());
        let stopping = self.stop_why();
        if let Some(service) = self.service.as_mut() {
            service.ending = Some(ending_after(service.ending, stopping, why));
        }
        // The answer says how the server ends now: a `drain` during a `close` is `closing`,
        // anything after a stop signal `stopping`, after `--fail-fast` stopped it `fail_fast`.
        let now_ending = self
            .service
            .as_ref()
            .and_then(|service| service.ending)
            .unwrap_or(why);
        // Asked from inside one of this server's jobs: its end comes only after that job's,
        // so nothing waits for it (the client would wait for its own end).
        let from_job = self.caller_run(&call).map(|(seq, _)| seq);
        if why == "closing" && self.core.stopping().is_none() {
            let halt = self.core.close(self.tick());
            self.apply_halt(halt).await;
        } else if self.core.stopping().is_none() {
            // Draining is the server's end of input: nothing joins a batch any more, so a
            // batch waiting out `--batch-delay` goes now.
            let now = self.tick();
            self.decided_at = Some(now);
            self.core.input_ended(now);
            self.start_ready(false).await;
        }
        let answer = Answer::Ending {
            why: now_ending.into(),
            running,
            waiting,
            from_job,
        };
        if from_job.is_some() {
            let _ = call.reply.send(Reply::now(answer));
            return;
        }
        let (held, then) = oneshot::channel();
        let (written_tx, written) = oneshot::channel();
        if let Some(service) = self.service.as_mut() {
            service.held.push((held, written));
        }
        let _ = call.reply.send(Reply {
            answer,
            then: Some(then),
            written: Some(written_tx),
        });
    }
}

/// Why a submission could never start, when its key or command is longer than one argument
/// of `execve(2)` may be ([`crate::arg_limit`]).
fn over_limit(key: &str, command: &str) -> Option<String> {
    let (key_limit, command_limit) = (
        crate::arg_limit::max_key_bytes(),
        crate::arg_limit::max_argument_bytes(),
    );
    if key.len() > key_limit {
        return Some(format!(
            "the key is {} bytes, more than the {key_limit} one argument may hold",
            key.len()
        ));
    }
    (command.len() > command_limit).then(|| {
        format!(
            "the command is {} bytes, more than the {command_limit} one argument may hold",
            command.len()
        )
    })
}

/// How the server ends once `request` (`draining` or `closing`) is taken, given how it was
/// ending (`ending`) and how it was already stopping (`stopping`: a stop signal or a `close`,
/// or `fail_fast`): a stop stays a stop, a `close` turns a drain into a close, a `drain`
/// changes nothing begun.
fn ending_after(
    ending: Option<&'static str>,
    stopping: Option<&'static str>,
    request: &'static str,
) -> &'static str {
    match (ending, stopping) {
        (Some("closing"), _) => "closing",
        (_, Some(stop)) => stop,
        (Some(current), None) if request == "draining" => current,
        _ => request,
    }
}
