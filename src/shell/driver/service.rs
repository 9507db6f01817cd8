//! `lanes serve` in the event loop: each request from the socket ([`Call`]) is answered from
//! what the core decides (admission, cancel, the cap, close); answers that wait for a job's
//! end (`submit --wait`, `cancel`) are kept here until its record is written.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::{Admitted, Driver};
use crate::core::{Outcome, Seq};
use crate::input::JobSpec;
use crate::serve::protocol::{Answer, Request, RunningEntry, Status, WaitingEntry, WaitingJob};
use crate::serve::server::{Call, Reply};

/// What the service keeps between requests.
#[derive(Default)]
pub(super) struct Service {
    /// The last seq handed out.
    last_seq: Seq,
    /// Set by `drain` or `close`: nothing more is admitted.
    ending: Option<&'static str>,
    /// The connections of `drain` and `close`, held open until the server ends (their
    /// senders are dropped with the driver).
    held: Vec<oneshot::Sender<Answer>>,
    /// `submit --wait`: who waits for each job's record.
    records: HashMap<Seq, Vec<oneshot::Sender<Answer>>>,
    /// `cancel`: the answers sent once the stopped run (by its first seq) has its record.
    cancels: HashMap<Seq, Vec<(oneshot::Sender<Reply>, Answer)>>,
    /// Jobs admitted since the start.
    submitted: u64,
    /// Records written since the start.
    ended: u64,
}

impl Service {
    /// Whether the record of `seq` is waited for (encoded for `submit --wait`).
    pub(super) fn wants_record(&self, seq: Seq) -> bool {
        self.records.contains_key(&seq)
    }

    /// The record of `seq` is written (`record`: its line, when it was wanted): the waiters
    /// for it are answered.
    pub(super) fn recorded(&mut self, seq: Seq, record: Option<Vec<u8>>) {
        self.ended += 1;
        if let Some(waiters) = self.records.remove(&seq) {
            let record = record
                .and_then(|line| serde_json::from_slice(&line).ok())
                .unwrap_or(serde_json::Value::Null);
            for waiter in waiters {
                let _ = waiter.send(Answer::Record {
                    record: record.clone(),
                });
            }
        }
        if let Some(cancels) = self.cancels.remove(&seq) {
            for (reply, answer) in cancels {
                let _ = reply.send(Reply { answer, then: None });
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

fn reply(call: Call, answer: Answer) {
    let _ = call.reply.send(Reply { answer, then: None });
}

impl Driver {
    /// Whether the service still admits jobs: neither drained, closed nor stopping (a stop
    /// signal).
    pub(super) fn admits(&self, service: &Service) -> bool {
        service.ending.is_none() && self.core.stopping().is_none()
    }

    fn closed_answer(&self) -> Answer {
        let why = match &self.service {
            Some(Service {
                ending: Some(why), ..
            }) => why,
            _ => "stopping",
        };
        Answer::Closed {
            why: why.to_string(),
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
            Request::Status => {
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
                } else {
                    let previous = self.core.set_max_concurrent(max_concurrent);
                    Answer::Set {
                        max_concurrent: self.core.limits().max_concurrent,
                        previous,
                    }
                };
                reply(call, answer);
            }
            Request::Drain => self.end_service(call, "draining").await,
            Request::Close => self.end_service(call, "closing").await,
        }
    }

    async fn submit(&mut self, call: Call, key: String, command: String, wait: bool) {
        let admits = self.service.as_ref().is_some_and(|s| self.admits(s));
        if !admits {
            let answer = self.closed_answer();
            reply(call, answer);
            return;
        }
        let Some(service) = self.service.as_mut() else {
            return;
        };
        service.last_seq += 1;
        let seq = service.last_seq;
        let (record_tx, record_rx) = oneshot::channel();
        if wait {
            service.records.entry(seq).or_default().push(record_tx);
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
        };
        self.received += 1;
        let now = self.tick();
        let admitted = self.admit_job(spec, now).await;
        if matches!(admitted, Admitted::Queued { .. }) {
            if let Some(service) = self.service.as_mut() {
                service.submitted += 1;
            }
            self.start_ready().await;
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
            },
            Admitted::Refused(_) => self.closed_answer(),
            Admitted::Queued { ahead, replaced } => match (self.core.slot_of(seq), replaced) {
                (Some(slot), _) => Answer::Started {
                    seq,
                    key,
                    slot: Some(slot),
                },
                // Its process could not be started: its record is written already.
                (None, _) if !self.jobs.contains_key(&seq) => Answer::Started {
                    seq,
                    key,
                    slot: None,
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
        let _ = call.reply.send(Reply { answer, then });
    }

    async fn cancel(&mut self, call: Call, key: String) {
        let now = self.tick();
        let cancel = self.core.cancel_key(&key, now);
        let dropped: Vec<Seq> = cancel.dropped.iter().map(|account| account.seq).collect();
        for account in &cancel.dropped {
            self.close_waiting(account).await;
        }
        self.send_stops(cancel.stop);
        let answer = Answer::Cancelled {
            key,
            dropped,
            stopped: cancel.running,
        };
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
        let running = self
            .core
            .running_jobs()
            .into_iter()
            .map(|run| RunningEntry {
                seq: run.seq,
                key: run.key.to_string(),
                slot: run.slot,
                attempt: run.attempt,
                elapsed: now.saturating_sub(run.started_at).as_secs_f64(),
                command: self
                    .jobs
                    .get(&run.seq)
                    .map(|job| job.command.clone())
                    .unwrap_or_default(),
                stopping: run
                    .stopping
                    .and_then(|reason| Outcome::Interrupted(reason).reason())
                    .map(str::to_owned),
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
                    .enumerate()
                    .map(|(i, &seq)| WaitingJob {
                        seq,
                        ahead: i + usize::from(lane.busy),
                    })
                    .collect(),
            })
            .collect();
        let service = self.service.as_ref();
        Status {
            max_concurrent: self.core.limits().max_concurrent,
            admitting: service.is_some_and(|s| self.admits(s)),
            running,
            waiting,
            submitted: service.map_or(0, |s| s.submitted),
            ended: service.map_or(0, |s| s.ended),
        }
    }

    /// `drain` (`why` is `draining`): nothing more is admitted, what was admitted runs. `close`
    /// (`closing`): the run halts as on a stop signal, without one. Either way the server
    /// ends once nothing runs, and the connection is held open until then.
    async fn end_service(&mut self, call: Call, why: &'static str) {
        let (running, waiting) = (self.core.running(), self.core.queued());
        if let Some(service) = self.service.as_mut() {
            service.ending.get_or_insert(why);
        }
        if why == "closing" && self.core.stopping().is_none() {
            let halt = self.core.close(self.tick());
            self.apply_halt(halt).await;
        }
        let (held, then) = oneshot::channel();
        if let Some(service) = self.service.as_mut() {
            service.held.push(held);
        }
        let _ = call.reply.send(Reply {
            answer: Answer::Ending {
                why: why.into(),
                running,
                waiting,
            },
            then: Some(then),
        });
    }
}
