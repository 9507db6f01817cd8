//! The service protocol (`lanes serve`): JSON Lines over a Unix socket, one request per line,
//! one answer line per request, in order. Any language can speak it; the README documents it.
//! Parsing is pure: a line becomes a [`Request`] or an error message, never a panic.

use serde::{Deserialize, Serialize};

/// The protocol's version: every request says `"v": 1`, every answer carries it.
pub(crate) const VERSION: u32 = 1;

/// The longest request line accepted, newline excluded: a command as long as one argument
/// can be (`MAX_ARG_STRLEN`, 128 KiB) and its key fit, with room for JSON escapes. A longer
/// line gets an `error` answer and the connection is closed (its rest is never read).
pub(crate) const MAX_REQUEST_BYTES: usize = 1 << 20;

/// What a client asks of the server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Request {
    /// Admit one job. With `wait`, a second answer line (`record`) follows when its record is
    /// written.
    Submit {
        /// The lane.
        key: String,
        /// Shell text, run as `SHELL -c COMMAND`.
        command: String,
        /// Answer again with the job's record when it has one.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        wait: bool,
    },
    /// Drop the key's waiting jobs and stop its running job (reason `cancelled`); answered once
    /// that job's processes are gone.
    Cancel {
        /// The lane.
        key: String,
    },
    /// What runs and waits, the counters and the cap.
    Status {},
    /// Change the cap on running jobs.
    Set {
        /// The new cap, ≥ 1.
        max_concurrent: usize,
    },
    /// Admit nothing more, finish what was admitted, then end. The connection stays open
    /// until the server has written its report, then closes.
    Drain {},
    /// Admit nothing more, stop every job (reason `shutdown`), then end. The connection stays
    /// open until the server has written its report, then closes.
    Close {},
}

fn complete() -> bool {
    true
}

// A serde predicate takes its field by reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_complete(complete: &bool) -> bool {
    *complete
}

/// The server's answer to one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub(crate) enum Answer {
    /// The job started at once, in `slot`.
    Started {
        /// The job's number in the report.
        seq: u64,
        /// Its key.
        key: String,
        /// Its slot (`LANES_SLOT`).
        slot: u32,
    },
    /// The job was admitted but its process could not be started (`--shell` missing, ...):
    /// its record is written, `failed`, reason `spawn_error`.
    Failed {
        /// The job's number in the report.
        seq: u64,
        /// Its key.
        key: String,
        /// The record's `reason`: `spawn_error`.
        reason: String,
    },
    /// The job waits: `ahead` jobs of its key (waiting or running) come before it, or none
    /// but every slot is taken.
    Queued {
        /// The job's number in the report.
        seq: u64,
        /// Its key.
        key: String,
        /// Jobs of its key before it.
        ahead: usize,
    },
    /// `--coalesce latest`: the job took the place of the key's waiting job `replaced`, whose
    /// record says `superseded`.
    Coalesced {
        /// The job's number in the report.
        seq: u64,
        /// Its key.
        key: String,
        /// Jobs of its key before it.
        ahead: usize,
        /// The seq of the job it replaced.
        replaced: u64,
    },
    /// Not admitted; its record says why (`queue_full`, or `invalid_input`: a key or command
    /// longer than one argument of `execve(2)` may be).
    Rejected {
        /// The job's number in the report.
        seq: u64,
        /// Its key.
        key: String,
        /// The record's `reason`.
        reason: String,
        /// Why, for a person, when the reason needs one (`invalid_input`: what is too
        /// long); the record's `error`. Absent otherwise.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The server admits nothing more (draining, closing, stopped by a signal or by
    /// `--fail-fast`, or ending); nothing was recorded.
    Closed {
        /// Why: `draining`, `closing`, `stopping`, `fail_fast` or `ending`.
        why: String,
    },
    /// `cancel`: what was dropped and stopped. Sent once the stopped job has ended.
    Cancelled {
        /// The key.
        key: String,
        /// Seqs of the waiting jobs dropped, in lane order.
        dropped: Vec<u64>,
        /// The run this cancel stopped (by its first seq; a batch's other jobs stop with it),
        /// if one ran and was not already being stopped.
        stopped: Option<u64>,
        /// The run that was already being stopped for another reason (its records keep that
        /// reason), if one was: the answer still waits for its end. Absent otherwise.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stopping: Option<StoppingRun>,
    },
    /// `status`.
    Status(Box<Status>),
    /// `set`: the cap now and before.
    Set {
        /// The cap in force now.
        max_concurrent: usize,
        /// The cap before.
        previous: usize,
    },
    /// `drain` or `close` accepted: the server ends once nothing runs.
    Ending {
        /// `draining`, `closing`, `stopping` (a stop signal) or `fail_fast`.
        why: String,
        /// Jobs running now.
        running: usize,
        /// Jobs waiting now (`drain`: still to run; `close`: dropped).
        waiting: usize,
        /// The seq of the server's running job the request came from (the client runs inside
        /// it): the server can end only after that job, so no `ended` follows, and the
        /// connection closes after this answer. Absent otherwise.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from_job: Option<u64>,
    },
    /// `drain` or `close`: the server has ended, its report (and JUnit file) written; sent
    /// after [`Answer::Ending`], just before the connection closes. A connection that closes
    /// without it lost its server before the end (killed).
    Ended {
        /// The server's exit status.
        exit_code: u8,
        /// `false` when a record failed to reach the report (a full disk, its reader gone):
        /// the journal keeps the jobs whose records may be missing, for the next server.
        /// Left out when `true`.
        #[serde(default = "complete", skip_serializing_if = "is_complete")]
        report_complete: bool,
    },
    /// The record of a job submitted with `wait`: the report's own line, as an object.
    Record {
        /// The record.
        record: serde_json::Value,
    },
    /// The request was not understood or not allowed; nothing changed.
    Error {
        /// Why, for a person.
        error: String,
    },
}

/// `lanes status`: the server's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Status {
    /// The cap on running jobs.
    pub max_concurrent: usize,
    /// Whether submissions are admitted (false once draining or closing).
    pub admitting: bool,
    /// Runs in flight, by seq.
    pub running: Vec<RunningEntry>,
    /// Keys with jobs waiting, by their first waiting job.
    pub waiting: Vec<WaitingEntry>,
    /// Jobs submitted and admitted since the server started.
    pub submitted: u64,
    /// Jobs with their record written.
    pub ended: u64,
}

/// One job in flight (each member of a running batch has its own).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct RunningEntry {
    /// The job.
    pub seq: u64,
    /// Its key.
    pub key: String,
    /// Its slot.
    pub slot: u32,
    /// Its try, 1 on the first.
    pub attempt: u32,
    /// Seconds since its process started.
    pub elapsed: f64,
    /// Its command.
    pub command: String,
    /// Why it is being stopped, when it is (`cancelled`, `timeout`, ...).
    pub stopping: Option<String>,
    /// Under batching, the seq of its batch's first job (every member is listed); absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
}

/// A run a `cancel` found already being stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoppingRun {
    /// Its first job.
    pub seq: u64,
    /// Why it is being stopped (`superseded`, `shutdown`, `timeout`, ...).
    pub reason: String,
}

/// One key's waiting jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct WaitingEntry {
    /// The key.
    pub key: String,
    /// Its waiting jobs in run order, each with the number of jobs of the key ahead of it.
    pub jobs: Vec<WaitingJob>,
}

/// A waiting job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct WaitingJob {
    /// The job.
    pub seq: u64,
    /// Jobs of its key before it.
    pub ahead: usize,
}

/// A JSON object whose fields are each given once: a request naming a field twice is refused
/// rather than read as its last value.
struct UniqueFields(serde_json::Map<String, serde_json::Value>);

impl<'de> Deserialize<'de> for UniqueFields {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = UniqueFields;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<Self::Value, M::Error> {
                let mut fields = serde_json::Map::new();
                while let Some((name, value)) = map.next_entry::<String, serde_json::Value>()? {
                    if fields.contains_key(&name) {
                        return Err(serde::de::Error::custom(format!(
                            "the field `{name}` is given twice"
                        )));
                    }
                    fields.insert(name, value);
                }
                Ok(UniqueFields(fields))
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

/// Reads one request line (without its newline).
///
/// # Errors
/// A message for the `error` answer: not JSON, no or another version, an unknown operation,
/// a missing, unknown or repeated field, a cap out of range, an empty key or command.
pub(crate) fn parse_request(line: &[u8]) -> Result<Request, String> {
    let UniqueFields(object) = serde_json::from_slice(line).map_err(|err| {
        let hint = if err.to_string().contains("hex escape") {
            " (a `\\u` escape of a UTF-16 surrogate, D800 to DFFF, must be one of a pair \
             that makes one character: a lone surrogate is no Unicode text)"
        } else {
            ""
        };
        format!("the request is not a valid JSON object: {err}{hint}")
    })?;
    let mut value = serde_json::Value::Object(object);
    let object = value
        .as_object_mut()
        .ok_or("the request is not a JSON object")?;
    match object.remove("v") {
        Some(serde_json::Value::Number(n)) if n.as_u64() == Some(u64::from(VERSION)) => {}
        Some(other) => {
            return Err(format!(
                "protocol version {other} is not spoken here (this server speaks \"v\": {VERSION})"
            ))
        }
        None => {
            return Err(format!(
                "the request has no \"v\" (the protocol version, {VERSION})"
            ))
        }
    }
    let op = object
        .get("op")
        .and_then(serde_json::Value::as_str)
        .unwrap_or("")
        .to_owned();
    let request: Request = serde_json::from_value(value).map_err(|err| {
        // serde names Rust types; a client speaks JSON.
        let err = err
            .to_string()
            .replace("expected usize", "expected a whole number of at least 1")
            .replace("expected u64", "expected a whole number")
            .replace(
                ", there are no fields",
                &format!(": `{op}` takes no field but \"v\" and \"op\""),
            );
        format!("bad request: {err}")
    })?;
    match &request {
        Request::Submit { key, command, .. } => {
            if key.is_empty() {
                return Err("bad request: the key is empty".into());
            }
            if command.trim().is_empty() {
                return Err("bad request: the command is empty".into());
            }
            if command.contains('\0') || key.contains('\0') {
                return Err("bad request: a key or command cannot hold a NUL byte".into());
            }
        }
        Request::Cancel { key } if key.is_empty() => {
            return Err("bad request: the key is empty".into())
        }
        Request::Set { max_concurrent }
            if *max_concurrent == 0 || u32::try_from(*max_concurrent).is_err() =>
        {
            return Err(format!(
                "bad request: max_concurrent must be at least 1 and at most {} (as `lanes set -j` \
                 takes)",
                u32::MAX
            ))
        }
        _ => {}
    }
    Ok(request)
}

/// One answer as its line, newline included.
pub(crate) fn answer_line(answer: &Answer) -> Vec<u8> {
    #[derive(Serialize)]
    struct Line<'a> {
        v: u32,
        #[serde(flatten)]
        answer: &'a Answer,
    }
    let mut line =
        serde_json::to_vec(&Line { v: VERSION, answer }).expect("answers always serialise");
    line.push(b'\n');
    line
}

/// One request as its line, newline included.
pub(crate) fn request_line(request: &Request) -> Vec<u8> {
    let mut value = serde_json::to_value(request).expect("requests always serialise");
    if let Some(object) = value.as_object_mut() {
        object.insert("v".into(), VERSION.into());
    }
    let mut line = serde_json::to_vec(&value).expect("requests always serialise");
    line.push(b'\n');
    line
}

/// Reads one answer line (without its newline).
///
/// # Errors
/// When the line is no answer of this protocol version.
pub(crate) fn parse_answer(line: &[u8]) -> Result<Answer, String> {
    let mut value: serde_json::Value =
        serde_json::from_slice(line).map_err(|err| format!("not JSON: {err}"))?;
    if let Some(object) = value.as_object_mut() {
        object.remove("v");
    }
    serde_json::from_value(value).map_err(|err| format!("not an answer: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_round_trips_through_its_line() {
        for request in [
            Request::Submit {
                key: "a b/☃".into(),
                command: "echo \"hi\"\n".into(),
                wait: true,
            },
            Request::Cancel { key: "k".into() },
            Request::Status {},
            Request::Set { max_concurrent: 3 },
            Request::Drain {},
            Request::Close {},
        ] {
            let line = request_line(&request);
            assert_eq!(line.last(), Some(&b'\n'));
            assert_eq!(parse_request(&line[..line.len() - 1]), Ok(request));
        }
    }

    #[test]
    fn a_bad_request_says_why() {
        let error = |line: &str| parse_request(line.as_bytes()).unwrap_err();
        assert!(error("nonsense").contains("not a valid JSON object"));
        let lone = error(r#"{"v":1,"op":"submit","key":"\ud800","command":"true"}"#);
        assert!(
            lone.contains("a lone surrogate is no Unicode text"),
            "{lone}"
        );
        let extra = error(r#"{"v":1,"op":"status","x":1}"#);
        assert!(
            extra.contains("unknown field `x`: `status` takes no field but \"v\" and \"op\""),
            "{extra}"
        );
        assert!(error("[1]").contains("not a valid JSON object"));
        assert!(error(r#"{"op":"status"}"#).contains("no \"v\""));
        assert!(error(r#"{"v":2,"op":"status"}"#).contains("version 2"));
        assert!(error(r#"{"v":1,"op":"launch"}"#).contains("unknown variant"));
        assert!(error(r#"{"v":1,"op":"submit","key":"k"}"#).contains("command"));
        assert!(error(r#"{"v":1,"op":"submit","key":"","command":"x"}"#).contains("key"));
        assert!(error(r#"{"v":1,"op":"submit","key":"k","command":" "}"#).contains("empty"));
        assert!(error(r#"{"v":1,"op":"status","extra":1}"#).contains("unknown field"));
        assert!(error(r#"{"v":1,"op":"set","max_concurrent":0}"#).contains("at least 1"));
        let negative = error(r#"{"v":1,"op":"set","max_concurrent":-1}"#);
        assert!(
            negative.contains("whole number") && !negative.contains("usize"),
            "{negative}"
        );
        let twice = error(r#"{"v":1,"op":"status","op":"status"}"#);
        assert!(
            twice.contains("not a valid JSON object") && twice.contains("twice"),
            "{twice}"
        );
    }

    #[test]
    fn answers_carry_the_version_and_read_back() {
        let answer = Answer::Queued {
            seq: 4,
            key: "k".into(),
            ahead: 2,
        };
        let line = answer_line(&answer);
        let text = std::str::from_utf8(&line).unwrap();
        assert_eq!(
            text,
            "{\"v\":1,\"answer\":\"queued\",\"seq\":4,\"key\":\"k\",\"ahead\":2}\n"
        );
        assert_eq!(parse_answer(&line[..line.len() - 1]), Ok(answer));
    }

    #[test]
    fn a_repeated_field_and_a_cap_out_of_range_are_refused() {
        let err = parse_request(br#"{"v":1,"op":"cancel","key":"a","key":"b"}"#).unwrap_err();
        assert!(err.contains("`key` is given twice"), "{err}");
        let err = parse_request(br#"{"v":1,"op":"set","max_concurrent":18446744073709551615}"#)
            .unwrap_err();
        assert!(err.contains("max_concurrent"), "{err}");
        let err = parse_request(br#"{"v":1,"op":"set","max_concurrent":4294967296}"#).unwrap_err();
        assert!(err.contains("max_concurrent"), "{err}");
        assert!(parse_request(br#"{"v":1,"op":"set","max_concurrent":4294967295}"#).is_ok());
    }
}
