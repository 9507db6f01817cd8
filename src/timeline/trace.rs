//! The timeline as a Chrome trace (the Trace Event format's JSON object form, which Perfetto
//! and `chrome://tracing` open): process 1 has a thread per key, process 2 a thread per slot.
//! Each try is a complete event (`ph` `X`, times in microseconds from the run's start) on its
//! key's thread and its slot's; each wait span is an async event (`ph` `b` and `e`, its job's
//! seq the id: a job's own track, as the waits of one key's jobs overlap); a job that never ran
//! is an instant event (`ph` `i`). Thread names are metadata events (`ph` `M`).
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

/// Puts the separator before an event (none before the first).
fn separate(out: &mut impl Write, first: &mut bool) -> io::Result<()> {
    if !*first {
        out.write_all(b",\n")?;
    }
    *first = false;
    Ok(())
}

fn event(out: &mut impl Write, first: &mut bool, value: &serde_json::Value) -> io::Result<()> {
    separate(out, first)?;
    serde_json::to_writer(&mut *out, value)?;
    Ok(())
}

/// `text` as a JSON string.
fn string(text: &str) -> String {
    serde_json::to_string(text).expect("a string serialises")
}

/// A key as a trace names it: as the page and the Markdown show it, its control characters
/// and bidi controls escaped (`\u{202e}`), so that a viewer's track names cannot be reordered
/// or broken by one.
fn shown(key: Option<&str>) -> String {
    crate::output::framing::escape_controls(&key_label(key))
}

/// Writes the trace of the report at `path` (`name`: its path as given, in the trace's
/// metadata).
pub(crate) fn write(path: &Path, name: &Path, out: &mut impl Write) -> Result<(), TraceError> {
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
    let mut slots_named: std::collections::HashSet<u32> = std::collections::HashSet::new();
    let us = |ms: u64| ms * 1000;
    let mut text = String::new();
    while let Some((_, line)) = reader.next(false, &mut text)? {
        let Line::Job(job, _) = line else { continue };
        // The key as shown, made once for the job's names.
        let key = shown(job.key.as_deref());
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
                            "args": {"name": &key}}),
                )?;
                next
            }
        };
        // Written directly (not through JSON values): a million jobs make millions of events.
        let label = string(&key);
        let command = job.command.as_deref().map_or_else(
            || "null".to_owned(),
            |command| string(&crate::output::framing::escape_controls(command)),
        );
        let seq = job.seq;
        let spans = spans(&job, origin);
        // Every wait of a record has a known cause (the reader refuses others), so the spans
        // are the record's waits in order.
        for (&(start, end, cause), wait) in spans.waits.iter().zip(&job.waits) {
            let behind = wait
                .behind
                .map_or_else(|| "null".to_owned(), |b| b.to_string());
            // `resource` waits name the resource (gpu or mem), as the record does.
            let resource = wait.resource.as_deref().map_or_else(String::new, |name| {
                format!(",\"resource\":{}", string(name))
            });
            // Async events (`b`/`e`, by the job's seq): waits of one key overlap, which
            // complete events on one thread must not.
            separate(out, &mut first)?;
            write!(
                out,
                r#"{{"name":"wait: {c}","cat":"wait","ph":"b","id":{seq},"ts":{ts},"pid":{KEYS_PID},"tid":{tid},"args":{{"seq":{seq},"cause":"{c}","behind":{behind}{resource}}}}}"#,
                c = CAUSES[cause],
                ts = us(start),
            )?;
            separate(out, &mut first)?;
            write!(
                out,
                r#"{{"name":"wait: {c}","cat":"wait","ph":"e","id":{seq},"ts":{ts},"pid":{KEYS_PID},"tid":{tid}}}"#,
                c = CAUSES[cause],
                ts = us(end),
            )?;
        }
        for &(start, end, outcome, slot, attempt, retried) in &spans.tries {
            // The try's own reason (a retried try's `exit_status` or `timeout`, not the
            // record's).
            let reason = job
                .tries
                .iter()
                .find(|t| t.attempt == attempt)
                .and_then(|t| t.reason.as_deref())
                .map_or_else(|| "null".to_owned(), string);
            let args = format!(
                r#"{{"seq":{seq},"key":{label},"command":{command},"outcome":"{o}","attempt":{attempt},"retried":{retried},"slot":{slot},"reason":{reason}}}"#,
                o = OUTCOMES[outcome],
            );
            separate(out, &mut first)?;
            write!(
                out,
                r#"{{"name":{label},"cat":"try","ph":"X","ts":{ts},"dur":{dur},"pid":{KEYS_PID},"tid":{tid},"args":{args}}}"#,
                ts = us(start),
                dur = us(end - start),
            )?;
            if slot >= 1 {
                if slots_named.insert(slot) {
                    event(
                        out,
                        &mut first,
                        &json!({"name": "thread_name", "ph": "M", "pid": SLOTS_PID,
                                "tid": slot, "args": {"name": format!("slot {slot}")}}),
                    )?;
                }
                separate(out, &mut first)?;
                write!(
                    out,
                    r#"{{"name":{label},"cat":"try","ph":"X","ts":{ts},"dur":{dur},"pid":{SLOTS_PID},"tid":{slot},"args":{args}}}"#,
                    ts = us(start),
                    dur = us(end - start),
                )?;
            }
        }
        if spans.tries.is_empty() {
            event(
                out,
                &mut first,
                &json!({"name": format!("{key} ({})", job.outcome),
                        "cat": "never_ran", "ph": "i", "s": "t", "ts": us(spans.ended),
                        "pid": KEYS_PID, "tid": tid, "args": {"seq": job.seq,
                        "outcome": &job.outcome, "reason": &job.reason}}),
            )?;
        }
    }
    out.write_all(b"\n],\"displayTimeUnit\":\"ms\",\"otherData\":")?;
    serde_json::to_writer(
        &mut *out,
        &json!({"report": crate::output::framing::escape_controls(&name.display().to_string()),
                "started_at": reader.run.started_at,
                "max_concurrent": reader.run.max_concurrent}),
    )
    .map_err(io::Error::from)?;
    out.write_all(b"}\n")?;
    Ok(())
}
