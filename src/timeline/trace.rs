//! The timeline as a Chrome trace (the Trace Event format's JSON object form, which Perfetto
//! and `chrome://tracing` open): process 1 has a thread per key, process 2 a thread per slot.
//! Each try is a complete event (`ph` `X`, times in microseconds from the run's start) on its
//! key's thread and its slot's; each wait span is a complete event on its key's thread; a job
//! that never ran is an instant event (`ph` `i`). Thread names are metadata events (`ph` `M`).
//! Written while the report is read, one event a line.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::Path;

use serde_json::json;

use super::model::{key_hash, key_label, spans, CAUSES, OUTCOMES};
use super::report::{Line, ReadError, ReportReader};

const KEYS_PID: u32 = 1;
const SLOTS_PID: u32 = 2;

/// Why a trace could not be written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TraceError {
    /// The report.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The output.
    #[error(transparent)]
    Write(#[from] io::Error),
}

fn event(out: &mut impl Write, first: &mut bool, value: &serde_json::Value) -> io::Result<()> {
    if !*first {
        out.write_all(b",\n")?;
    }
    *first = false;
    serde_json::to_writer(&mut *out, value)?;
    Ok(())
}

/// Writes the trace of the report at `path`.
pub(crate) fn write(path: &Path, out: &mut impl Write) -> Result<(), TraceError> {
    let mut reader = ReportReader::open(path)?;
    let origin = reader.origin_ms;
    let mut first = true;
    out.write_all(b"{\"traceEvents\":[\n")?;
    for (pid, name) in [(KEYS_PID, "keys"), (SLOTS_PID, "slots")] {
        event(
            out,
            &mut first,
            &json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                    "args": {"name": name}}),
        )?;
    }
    // By a hash of the key: a million distinct keys cost 16 bytes each here.
    let mut threads: HashMap<u64, u64> = HashMap::new();
    let mut slots_named: Vec<bool> = Vec::new();
    let us = |ms: u64| ms * 1000;
    while let Some((_, line)) = reader.next(false)? {
        let Line::Job(job, _) = line else { continue };
        let next = threads.len() as u64 + 1;
        let hash = key_hash(job.key.as_deref());
        let tid = match threads.get(&hash) {
            Some(&tid) => tid,
            None => {
                threads.insert(hash, next);
                event(
                    out,
                    &mut first,
                    &json!({"name": "thread_name", "ph": "M", "pid": KEYS_PID, "tid": next,
                            "args": {"name": key_label(job.key.as_deref())}}),
                )?;
                next
            }
        };
        let label = key_label(job.key.as_deref());
        let spans = spans(&job, origin);
        for &(start, end, cause) in &spans.waits {
            event(
                out,
                &mut first,
                &json!({"name": format!("wait: {}", CAUSES[cause]), "cat": "wait", "ph": "X",
                        "ts": us(start), "dur": us(end - start), "pid": KEYS_PID, "tid": tid,
                        "args": {"seq": job.seq, "cause": CAUSES[cause],
                                 "behind": job.waits.iter().find(|w| w.cause == CAUSES[cause])
                                     .and_then(|w| w.behind)}}),
            )?;
        }
        for &(start, end, outcome, slot, attempt, retried) in &spans.tries {
            let args = json!({"seq": job.seq, "key": &label, "command": &job.command,
                              "outcome": OUTCOMES[outcome], "attempt": attempt,
                              "retried": retried, "slot": slot, "reason": &job.reason});
            event(
                out,
                &mut first,
                &json!({"name": &label, "cat": "try", "ph": "X", "ts": us(start),
                        "dur": us(end - start), "pid": KEYS_PID, "tid": tid, "args": &args}),
            )?;
            if slot >= 1 {
                let index = slot as usize;
                if slots_named.len() <= index {
                    slots_named.resize(index + 1, false);
                }
                if !slots_named[index] {
                    slots_named[index] = true;
                    event(
                        out,
                        &mut first,
                        &json!({"name": "thread_name", "ph": "M", "pid": SLOTS_PID,
                                "tid": slot, "args": {"name": format!("slot {slot}")}}),
                    )?;
                }
                event(
                    out,
                    &mut first,
                    &json!({"name": &label, "cat": "try", "ph": "X", "ts": us(start),
                            "dur": us(end - start), "pid": SLOTS_PID, "tid": slot,
                            "args": &args}),
                )?;
            }
        }
        if spans.tries.is_empty() {
            event(
                out,
                &mut first,
                &json!({"name": format!("{} ({})", label, job.outcome), "cat": "never_ran",
                        "ph": "i", "s": "t", "ts": us(spans.ended), "pid": KEYS_PID,
                        "tid": tid, "args": {"seq": job.seq, "outcome": &job.outcome,
                                             "reason": &job.reason}}),
            )?;
        }
    }
    out.write_all(b"\n],\"displayTimeUnit\":\"ms\",\"otherData\":")?;
    serde_json::to_writer(
        &mut *out,
        &json!({"report": path.display().to_string(), "started_at": reader.run.started_at,
                "max_concurrent": reader.run.max_concurrent}),
    )
    .map_err(io::Error::from)?;
    out.write_all(b"}\n")?;
    Ok(())
}
