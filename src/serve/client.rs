//! The client commands of `lanes serve`: `submit`, `cancel`, `status`, `set`, `drain` and
//! `close`. Each connects to the socket, sends its requests and prints the answers (human
//! lines, or the answers' JSON with `--json`); the exit status says what the answer was.

use std::io::{BufRead, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

use super::protocol::{parse_answer, request_line, Answer, Request, Status, MAX_REQUEST_BYTES};
use crate::exit;
use crate::input::lines::{parse_line, Limits, LineItem};

/// A client command's connection to the server.
struct Connection {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    path: PathBuf,
}

impl Connection {
    fn open(socket: Option<&Path>) -> anyhow::Result<Self> {
        let path = socket.map_or_else(super::socket::default_path, Path::to_owned);
        let stream = UnixStream::connect(&path).with_context(|| {
            format!(
                "cannot reach a lanes server at {} (is `lanes serve` running? --socket names \
                 another)",
                path.display()
            )
        })?;
        // Nothing is sent to a socket of another user (a `/tmp/lanes-UID` made first by
        // someone else): the request's command may hold secrets, and the answer would lie.
        let server = super::socket::Peer::of(&stream)
            .with_context(|| format!("cannot tell who serves {} (SO_PEERCRED)", path.display()))?;
        if !server.is_this_user() {
            bail!(
                "the socket {} is served by uid {}, not by this user (uid {}): nothing was sent \
                 (a lanes server serves its own user only; give --socket your server's socket)",
                path.display(),
                server.uid,
                nix::unistd::Uid::effective().as_raw()
            );
        }
        let writer = stream.try_clone().context("cannot use the socket")?;
        Ok(Connection {
            reader: BufReader::new(stream),
            writer,
            path,
        })
    }

    fn send(&mut self, request: &Request) -> anyhow::Result<()> {
        let Err(err) = self.writer.write_all(&request_line(request)) else {
            return Ok(());
        };
        // A server that refused the connection (another uid) said why before closing it.
        if let Ok(Some((_, Answer::Error { error }))) = self.answer() {
            bail!("the server refused the request: {error}");
        }
        Err(err).with_context(|| format!("cannot send to the server at {}", self.path.display()))
    }

    /// The next answer, as its line and as read; `None` when the server closed the connection
    /// (or reset it: a server that exits with requests of ours unread resets the connection
    /// once its answers before them are read).
    fn answer(&mut self) -> anyhow::Result<Option<(String, Answer)>> {
        let mut line = String::new();
        let n = match self.reader.read_line(&mut line) {
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionReset => return Ok(None),
            read => read.with_context(|| {
                format!("cannot read from the server at {}", self.path.display())
            })?,
        };
        if n == 0 {
            return Ok(None);
        }
        let text = line.trim_end_matches('\n').to_owned();
        let answer = parse_answer(text.as_bytes())
            .map_err(|err| anyhow::anyhow!("the server's answer is not understood: {err}"))?;
        Ok(Some((text, answer)))
    }

    fn expect_answer(&mut self) -> anyhow::Result<(String, Answer)> {
        self.answer()?.ok_or_else(|| {
            anyhow::anyhow!(
                "the server closed the connection without an answer (killed or crashed?); \
                     what it was asked may have been done before it ended (a job admitted runs \
                     under a server started again on its journal)"
            )
        })
    }
}

/// The exit status for an answer to a submission (see [`crate::exit`]).
fn status_of(answer: &Answer) -> u8 {
    match answer {
        Answer::Started { .. } => exit::SUCCESS,
        Answer::Failed { .. } => exit::JOBS_FAILED,
        Answer::Queued { .. } => exit::QUEUED,
        Answer::Coalesced { .. } => exit::COALESCED,
        Answer::Rejected { .. } => exit::REJECTED,
        Answer::Closed { .. } => exit::CLOSED,
        _ => exit::USAGE,
    }
}

/// An answer as a line for a person.
fn human(answer: &Answer) -> String {
    match answer {
        Answer::Started { seq, key, slot } => {
            format!("started seq {seq} (key {}) in slot {slot}", shown_key(key))
        }
        Answer::Failed { seq, key, reason } => {
            format!(
                "failed seq {seq} (key {}): it could not start ({reason}); see its record",
                shown_key(key)
            )
        }
        Answer::Queued { seq, key, ahead } => {
            format!("queued seq {seq} (key {}), {ahead} ahead", shown_key(key))
        }
        Answer::Coalesced {
            seq,
            key,
            ahead,
            replaced,
        } => format!(
            "coalesced seq {seq} (key {}), replacing seq {replaced}, {ahead} ahead",
            shown_key(key)
        ),
        Answer::Rejected {
            seq,
            key,
            reason,
            error: None,
        } => format!("rejected seq {seq} (key {}): {reason}", shown_key(key)),
        Answer::Rejected {
            seq,
            key,
            reason,
            error: Some(error),
        } => format!(
            "rejected seq {seq} (key {}): {reason}: {error}",
            shown_key(key)
        ),
        Answer::Closed { why } => format!("closed: the server admits no more jobs ({why})"),
        Answer::Cancelled {
            key,
            dropped,
            stopped,
            stopping,
        } => {
            let dropped = if dropped.is_empty() {
                "no waiting job dropped".to_owned()
            } else {
                let seqs: Vec<String> = dropped.iter().map(u64::to_string).collect();
                format!("dropped seq {}", seqs.join(", "))
            };
            match (stopped, stopping) {
                (Some(seq), _) => {
                    format!(
                        "cancelled key {}: {dropped}; stopped seq {seq}",
                        shown_key(key)
                    )
                }
                (None, Some(run)) => format!(
                    "cancelled key {}: {dropped}; seq {} was already being stopped ({})",
                    shown_key(key),
                    run.seq,
                    run.reason
                ),
                (None, None) => format!(
                    "cancelled key {}: {dropped}; nothing was running",
                    shown_key(key)
                ),
            }
        }
        Answer::Set {
            max_concurrent,
            previous,
        } => format!("max concurrent {max_concurrent} (was {previous})"),
        Answer::Ending {
            why,
            running,
            waiting,
            from_job: None,
        } => format!("{why}: {running} running, {waiting} waiting"),
        Answer::Ending {
            why,
            running,
            waiting,
            from_job: Some(seq),
        } => format!(
            "{why}: {running} running, {waiting} waiting; asked from inside job {seq}, which \
             the server's end waits for: not waiting for that end"
        ),
        Answer::Ended {
            exit_code,
            report_complete: true,
        } => format!("ended: its report is written (exit status {exit_code})"),
        Answer::Ended { exit_code, .. } => format!(
            "ended: its report is incomplete, the journal keeps the jobs it may lack for the \
             next server (exit status {exit_code})"
        ),
        Answer::Status(status) => human_status(status),
        Answer::Record { record } => record.to_string(),
        Answer::Error { error } => format!("error: {error}"),
    }
}

/// A key or command as shown to a person: control characters escaped, so that none can break
/// a line or move the cursor (as in a run's output).
fn shown(text: &str) -> String {
    crate::output::framing::escape_controls(text)
}

/// A key as shown to a person: [`shown`], cut as a run's summary cuts it
/// ([`crate::output::framing::cut_key`]).
fn shown_key(key: &str) -> String {
    crate::output::framing::cut_key(shown(key))
}

fn human_status(status: &Status) -> String {
    let waiting: usize = status.waiting.iter().map(|lane| lane.jobs.len()).sum();
    let mut text = format!(
        "max concurrent {}, {} running, {waiting} waiting, {} submitted, {} ended{}",
        status.max_concurrent,
        status.running.len(),
        status.submitted,
        status.ended,
        if status.admitting {
            ""
        } else {
            ", admitting no more"
        }
    );
    for run in &status.running {
        let stopping = run
            .stopping
            .as_ref()
            .map(|why| format!(" (stopping: {why})"))
            .unwrap_or_default();
        // A batch's members after its first: the batch they run in.
        let batch = run
            .batch
            .filter(|&first| first != run.seq)
            .map(|first| format!(", in the batch of seq {first}"))
            .unwrap_or_default();
        text.push_str(&format!(
            "\nrunning seq {} (key {}{batch}) in slot {}, {:.1}s{stopping}: {}",
            run.seq,
            shown_key(&run.key),
            run.slot,
            run.elapsed,
            shown(&run.command)
        ));
    }
    for lane in &status.waiting {
        let jobs: Vec<String> = lane
            .jobs
            .iter()
            .map(|job| format!("seq {} ({} ahead)", job.seq, job.ahead))
            .collect();
        text.push_str(&format!(
            "\nwaiting (key {}): {}",
            shown_key(&lane.key),
            jobs.join(", ")
        ));
    }
    text
}

/// Writes `text` and a newline to stdout. A closed stdout (`lanes status | head -1`) is no
/// error: what the reader did not want is dropped quietly, and the exit status stays the
/// answer's.
fn say(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    quiet_on_closed_pipe(
        stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.write_all(b"\n"))
            .and_then(|()| stdout.flush()),
    )
}

/// Writes `text` and a newline to stderr in one write, so that the lines of clients sharing a
/// stderr (jobs of one server waiting for others) are never run together; a failure to write
/// changes nothing.
fn complain(text: &str) {
    let mut line = String::with_capacity(text.len() + 1);
    line.push_str(text);
    line.push('\n');
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// A write's result, a broken pipe (the reader is gone) counted as done.
fn quiet_on_closed_pipe(result: std::io::Result<()>) -> anyhow::Result<()> {
    match result {
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("cannot write to stdout"),
    }
}

/// Prints one answer: its JSON line, or its human line; an error answer goes to stderr.
fn print(line: &str, answer: &Answer, json: bool) -> anyhow::Result<()> {
    if let Answer::Error { error } = answer {
        complain(&format!("lanes: the server refused the request: {error}"));
        if json {
            say(line)?;
        }
        return Ok(());
    }
    if json {
        say(line)
    } else {
        say(&human(answer))
    }
}

/// The shell text of a submitted command: one word as it is, several quoted word by word.
fn command_text(words: &[String]) -> String {
    if let [one] = words {
        return one.clone();
    }
    words
        .iter()
        .map(|word| crate::template::shell_quote(word))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `lanes submit [--socket S] [--json] [--wait] KEY -- COMMAND…`, or without KEY, lines of
/// `KEY<TAB>COMMAND` from stdin, one answer line each.
///
/// # Errors
/// No server, a broken connection, or a bad command line.
pub(crate) fn submit(
    socket: Option<&Path>,
    json: bool,
    wait: bool,
    key: Option<String>,
    command: &[String],
) -> anyhow::Result<u8> {
    let Some(key) = key else {
        if command.first().is_some_and(|word| word.starts_with('-')) {
            // `lanes submit -- -x -- make`, as clap's tip for `-x` suggests: no KEY may begin
            // with `-` on the command line.
            bail!(
                "a COMMAND needs its KEY: `lanes submit KEY -- COMMAND...`; a KEY that begins \
                 with `-` is given on stdin: `printf -- '{}\\tCOMMAND\\n' | lanes submit`",
                shown(&command[0])
            );
        }
        if !command.is_empty() {
            bail!("a COMMAND needs its KEY: `lanes submit KEY -- COMMAND...`");
        }
        if wait {
            bail!("--wait needs one job: `lanes submit --wait KEY -- COMMAND...`");
        }
        return submit_lines(socket, json);
    };
    if command.is_empty() {
        bail!("nothing to run: `lanes submit KEY -- COMMAND...` (or lines of KEY<TAB>COMMAND on stdin without KEY)");
    }
    let mut connection = Connection::open(socket)?;
    connection.send(&Request::Submit {
        key,
        command: command_text(command),
        wait,
    })?;
    let (line, answer) = connection.expect_answer()?;
    print(&line, &answer, json)?;
    let status = status_of(&answer);
    if !wait
        || !matches!(
            answer,
            Answer::Started { .. }
                | Answer::Queued { .. }
                | Answer::Coalesced { .. }
                | Answer::Failed { .. }
        )
    {
        return Ok(status);
    }
    let Some((line, record)) = connection.answer()? else {
        bail!(
            "the server ended before seq {} had its record (killed or crashed?); a server \
             started again on its journal runs it, or records it if it had started",
            seq_of(&answer)
        );
    };
    let Answer::Record { record } = record else {
        print(&line, &record, json)?;
        return Ok(exit::USAGE);
    };
    if json {
        say(&record.to_string())?;
    } else {
        complain(&record_summary(&record));
    }
    Ok(job_status(&record))
}

/// The seq an answer to a submission names (0 for none).
fn seq_of(answer: &Answer) -> u64 {
    match answer {
        Answer::Started { seq, .. }
        | Answer::Failed { seq, .. }
        | Answer::Queued { seq, .. }
        | Answer::Coalesced { seq, .. }
        | Answer::Rejected { seq, .. } => *seq,
        _ => 0,
    }
}

/// A record in one line for a person: `seq 3 (key k) succeeded` or `… interrupted (cancelled)`.
fn record_summary(record: &serde_json::Value) -> String {
    let field = |name: &str| record.get(name).and_then(serde_json::Value::as_str);
    let mut text = format!(
        "seq {} (key {}) {}",
        record
            .get("seq")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0),
        shown_key(field("key").unwrap_or("")),
        field("outcome").unwrap_or("?")
    );
    // How it ended, as a run's summary says it: `(exit_status, exit 3)`, `(killed, SIGKILL)`.
    let exit = record
        .get("exit_code")
        .and_then(serde_json::Value::as_i64)
        .filter(|&code| code != 0)
        .map(|code| format!("exit {code}"))
        .or_else(|| field("signal").map(str::to_owned));
    match (field("reason"), exit) {
        (Some(reason), Some(exit)) => text.push_str(&format!(" ({reason}, {exit})")),
        (Some(reason), None) => text.push_str(&format!(" ({reason})")),
        (None, Some(exit)) => text.push_str(&format!(" ({exit})")),
        (None, None) => {}
    }
    text
}

/// `--wait`: exit as the job did: 0 for a success, its exit status, 128 + the signal that
/// ended it, or 1 for a job that did not end by itself (never started, rejected, or stopped
/// by lanes: outcome `interrupted`, whatever its status or signal).
fn job_status(record: &serde_json::Value) -> u8 {
    match record.get("outcome").and_then(serde_json::Value::as_str) {
        Some("succeeded") => return exit::SUCCESS,
        // Stopped by lanes (`cancel`, `close`, a timeout, a stop signal to the server): its
        // exit status or signal is lanes' doing, not the job's.
        Some("interrupted") => return exit::JOBS_FAILED,
        _ => {}
    }
    if let Some(code) = record.get("exit_code").and_then(serde_json::Value::as_i64) {
        if code != 0 {
            return u8::try_from(code).unwrap_or(exit::JOBS_FAILED);
        }
    }
    if let Some(name) = record.get("signal").and_then(serde_json::Value::as_str) {
        if let Ok(signal) = name.parse::<nix::sys::signal::Signal>() {
            return exit::for_signal(signal as i32);
        }
    }
    exit::JOBS_FAILED
}

/// Submissions read from stdin, sent by a thread of their own while the answers are read
/// (the server answers in order): one answer line each. The exit status is the highest of the
/// answers' statuses; a line that is no job by a run's rules (no tab, an empty key or command,
/// bytes that are not UTF-8, a NUL) is said on stderr, not sent, and makes it 2, and so does an
/// `error` answer.
fn submit_lines(socket: Option<&Path>, json: bool) -> anyhow::Result<u8> {
    // The rules of a run's input lines; the server checks the system's limits.
    const UNLIMITED: Limits = Limits {
        key: usize::MAX,
        command: usize::MAX,
    };
    if let Some(why) = crate::closed_stdin::refusal() {
        anyhow::bail!("cannot read the submissions from stdin: {why}");
    }
    let mut connection = Connection::open(socket)?;
    let mut writer = std::io::BufWriter::with_capacity(64 * 1024, connection.writer.try_clone()?);
    let sender = std::thread::Builder::new()
        .name("lanes-submit".into())
        .spawn(move || -> (u64, u8, Option<String>) {
            let mut input = BufReader::with_capacity(64 * 1024, std::io::stdin());
            let (mut sent, mut status, mut failure) = (0u64, exit::SUCCESS, None);
            let mut line = Vec::new();
            let mut number = 0u64;
            loop {
                line.clear();
                match input.read_until(b'\n', &mut line) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(err) => {
                        failure = Some(format!("cannot read stdin: {err}"));
                        break;
                    }
                }
                number += 1;
                let mut raw = line.strip_suffix(b"\n").unwrap_or(&line);
                if number == 1 {
                    // A UTF-8 byte order mark is not part of the first key (as in a run).
                    raw = raw.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(raw);
                }
                if raw.len() > MAX_REQUEST_BYTES / 2 {
                    complain(&format!(
                        "lanes: stdin line {number}: longer than a request may be; not sent"
                    ));
                    status = status.max(exit::USAGE);
                    continue;
                }
                let (key, command) = match parse_line(raw, UNLIMITED) {
                    None => continue,
                    Some(LineItem::Job { key, command }) => (key, command),
                    Some(LineItem::Invalid { message, .. }) => {
                        complain(&format!("lanes: stdin line {number}: {message}; not sent"));
                        status = status.max(exit::USAGE);
                        continue;
                    }
                };
                let request = Request::Submit {
                    key,
                    command,
                    wait: false,
                };
                // Control characters grow sixfold in JSON (`\u0001`): the request, not the
                // line, must fit, or the server would close the connection on the whole batch.
                let encoded = request_line(&request);
                if encoded.len() > MAX_REQUEST_BYTES + 1 {
                    complain(&format!(
                        "lanes: stdin line {number}: longer than a request may be once encoded \
                         as JSON; not sent"
                    ));
                    status = status.max(exit::USAGE);
                    continue;
                }
                if writer.write_all(&encoded).is_err() {
                    failure = Some(format!(
                        "the server closed the connection; stdin from line {number} on was not sent"
                    ));
                    break;
                }
                sent += 1;
                // Lines that come one by one (a watcher) go at once; a burst goes together.
                if input.buffer().is_empty() && writer.flush().is_err() {
                    failure = Some(format!(
                        "the server closed the connection; stdin after line {number} was not sent"
                    ));
                    break;
                }
            }
            let _ = writer.flush();
            let _ = writer.get_ref().shutdown(std::net::Shutdown::Write);
            (sent, status, failure)
        })
        .context("cannot start a thread (raise `ulimit -u`)")?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut status = exit::SUCCESS;
    let mut answered = 0u64;
    let mut refused = false;
    // The first answer, when an error: all the server says to a connection it refuses.
    let mut first_refused = false;
    while let Some((line, answer)) = connection.answer()? {
        answered += 1;
        if let Answer::Error { error } = &answer {
            complain(&format!("lanes: the server refused a request: {error}"));
            refused = true;
            first_refused |= answered == 1;
        }
        if json {
            quiet_on_closed_pipe(writeln!(out, "{line}"))?;
        } else if !matches!(answer, Answer::Error { .. }) {
            quiet_on_closed_pipe(writeln!(out, "{}", human(&answer)))?;
        }
        status = status.max(status_of(&answer));
        if connection.reader.buffer().is_empty() {
            quiet_on_closed_pipe(out.flush())?;
        }
    }
    quiet_on_closed_pipe(out.flush())?;
    let (sent, read_status, failure) = sender
        .join()
        .map_err(|_| anyhow::anyhow!("the sending thread failed"))?;
    if answered == 1 && first_refused && sent > 1 {
        // One error, then the connection closed: the connection was refused (the server
        // serves as many as it may), not the first submission alone.
        bail!("the server closed the connection; none of the {sent} submissions sent was admitted");
    }
    // A submission sent and not answered may have been admitted (journaled) all the same.
    let unanswered = if answered < sent {
        "; the unanswered ones may have been admitted before it ended (a server started again \
         on its journal runs them): look in its report before sending them again"
    } else {
        ""
    };
    if let Some(failure) = failure {
        bail!("{failure}; it answered {answered} of the {sent} submissions sent{unanswered}");
    }
    if answered < sent {
        bail!("the server ended after answering {answered} of {sent} submissions{unanswered}");
    }
    // A line not sent, or not admitted for an error, is an error whatever the others'
    // answers: `queued` must not hide it.
    Ok(if read_status == exit::USAGE || refused {
        exit::USAGE
    } else {
        status
    })
}

/// `lanes cancel KEY`, `lanes status`, `lanes set -j N`: one request, one answer; `status`
/// exits 13 when the server admits no more. `drain` and `close`: their answer, then the wait
/// until the server has ended: its `ended` answer, once its report is written, then end of
/// file; an end of file without it is an error (the server was killed). Asked from inside one
/// of the server's jobs (`from_job`), they wait for nothing more: that end comes after the
/// job's.
///
/// # Errors
/// No server, or a broken connection.
pub(crate) fn request(socket: Option<&Path>, json: bool, request: Request) -> anyhow::Result<u8> {
    let waits_for_end = matches!(request, Request::Drain {} | Request::Close {});
    let mut connection = Connection::open(socket)?;
    connection.send(&request)?;
    let (line, answer) = connection.expect_answer()?;
    print(&line, &answer, json)?;
    let status = match &answer {
        Answer::Error { .. } => exit::USAGE,
        Answer::Closed { .. } => exit::CLOSED,
        Answer::Status(status) if !status.admitting => exit::CLOSED,
        _ => exit::SUCCESS,
    };
    if waits_for_end && matches!(answer, Answer::Ending { from_job: None, .. }) {
        let mut ended = false;
        while let Some((line, answer)) = connection.answer()? {
            if matches!(answer, Answer::Ended { .. }) {
                print(&line, &answer, json)?;
                ended = true;
            }
        }
        if !ended {
            bail!(
                "the server ended without saying its report was written (it was killed, or \
                 crashed): its report may lack the jobs' records and the summary"
            );
        }
    }
    Ok(status)
}
