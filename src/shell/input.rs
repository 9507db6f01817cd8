//! The input thread: reads jobs from stdin, a lines file or a loaded manifest and hands them
//! to the driver over a bounded channel, so that a full queue pauses reading (backpressure).

use std::io::{BufRead, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::core::admission_order;
use crate::input::lines::{LineItem, LineReader, NumberedLine};
use crate::input::manifest::Manifest;
use crate::input::{InputItem, JobSpec};
use crate::template::Template;

/// Where the input thread reads from.
pub(crate) enum Feed {
    /// Lines from a reader (stdin, a file, or the copy `--strict` checked).
    Lines(Box<dyn BufRead + Send>),
    /// Records of any other form (`-0`, plain records): see `input::arguments`.
    Records(Box<dyn Iterator<Item = std::io::Result<NumberedLine>> + Send>),
    /// Lines already read and validated (`--strict`).
    Preloaded(Vec<NumberedLine>),
    /// A validated manifest's jobs.
    Manifest(Box<Manifest>),
}

/// The most items that may wait in the channel between the input thread and the driver.
const CHANNEL_DEPTH: usize = 64;

/// Whether the input is stdin read through [`WatchedStdin`]: then [`Input::close`] waits for
/// the item the input thread may hold.
static STDIN_WATCHED: AtomicBool = AtomicBool::new(false);

/// Set while the input thread is inside a `read` of stdin ([`WatchedStdin`]): it then holds
/// no whole line it has not handed over (a line it read is parsed and sent before the next
/// `read`).
static IN_STDIN_READ: AtomicBool = AtomicBool::new(false);

/// Set by [`Input::close`] for stdin: the input thread's next `read` of stdin fails with
/// [`StoppedReading`] instead of taking more input, so that only lines already read are
/// handed over (and get records) after a stop, however fast more input comes.
static STOP_READING: AtomicBool = AtomicBool::new(false);

/// The error a `read` of stdin ends with once [`Input::close`] stopped reading: not a read
/// error, and not reported as one.
#[derive(Debug)]
struct StoppedReading;

impl std::fmt::Display for StoppedReading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("reading stopped")
    }
}

impl std::error::Error for StoppedReading {}

/// Whether `err` is the end [`StoppedReading`] puts to a read, not a failure of the input.
fn is_stopped_reading(err: &std::io::Error) -> bool {
    err.get_ref()
        .is_some_and(|inner| inner.is::<StoppedReading>())
}

/// How long [`Input::close`] waits at most for the input thread to hand over what it read:
/// parsing and sending a buffer of lines takes microseconds, unless the thread is not
/// scheduled.
const HANDOVER_WAIT: Duration = Duration::from_secs(2);

/// Stdin, read so that [`Input::close`] can tell whether the input thread is waiting for more
/// input (inside a `read`) or holds lines it read and has not handed over yet.
pub(crate) struct WatchedStdin(std::io::Stdin);

impl WatchedStdin {
    /// Stdin, watched; one run reads it.
    pub(crate) fn new() -> Self {
        STDIN_WATCHED.store(true, Ordering::SeqCst);
        WatchedStdin(std::io::stdin())
    }

    /// The input thread does not read stdin after all (`--strict` read it to its end, and the
    /// thread reads the copy): [`Input::close`] has no read to wait for.
    pub(crate) fn unwatch() {
        STDIN_WATCHED.store(false, Ordering::SeqCst);
    }
}

impl Read for WatchedStdin {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        IN_STDIN_READ.store(true, Ordering::SeqCst);
        // Looked at after the flag above is set: a close that saw no read under way finds
        // this one failing, and one that saw it holds no line of it.
        if STOP_READING.load(Ordering::SeqCst) {
            IN_STDIN_READ.store(false, Ordering::SeqCst);
            return Err(std::io::Error::other(StoppedReading));
        }
        let read = self.0.read(buf);
        IN_STDIN_READ.store(false, Ordering::SeqCst);
        read
    }
}

/// Starts the input thread; its items arrive on the returned receiver, which ends at EOF.
/// `max_queued` bounds the read-ahead: the channel holds at most an eighth of it (1 to 64
/// items), so that reading pauses soon after `--max-queued` jobs wait.
///
/// # Errors
/// When the thread cannot be started (EAGAIN: `ulimit -u`).
pub(crate) fn start(
    feed: Feed,
    max_queued: usize,
    commands: Commands,
) -> std::io::Result<mpsc::Receiver<InputItem>> {
    let depth = (max_queued / 8).clamp(1, CHANNEL_DEPTH);
    let (tx, rx) = mpsc::channel(depth);
    std::thread::Builder::new()
        .name("lanes-input".into())
        .spawn(move || run(feed, &tx, &commands))?;
    Ok(rx)
}

/// What a job's command becomes: itself, or (`--command`) a template rendered with it as the
/// argument, in a slot of at most `max_slot`.
pub(crate) struct Commands {
    /// `--command`.
    pub template: Option<Template>,
    /// The highest slot number (`--max-concurrent`).
    pub max_slot: usize,
    /// What a job of input records needs (`--weight`, `--needs`); a manifest's jobs come
    /// with their own, resolved.
    pub default_needs: Option<Arc<crate::core::Needs>>,
}

impl Commands {
    /// The run's: its template, cap and default needs.
    pub(crate) fn of(config: &crate::config::RunConfig) -> Self {
        Commands {
            template: config.template.clone(),
            max_slot: config.max_concurrent,
            default_needs: config.run_default_needs(),
        }
    }

    /// Why job `seq`'s command, `command` under key `key`, is too long to run once the
    /// template makes it (see [`Template::too_long`]); `None` without a template.
    pub(crate) fn too_long(&self, command: &str, key: &str, seq: u64) -> Option<String> {
        self.template
            .as_ref()
            .and_then(|template| template.too_long(command, key, seq, self.max_slot))
    }

    /// `item`, or an invalid line in its place when the command its job would run is longer
    /// than one argument can be ([`crate::arg_limit`]): with a template, a job's own text can
    /// be short enough while the command it becomes is not.
    fn check(&self, mut item: InputItem) -> InputItem {
        if let InputItem::Job(spec) = &mut item {
            if spec.needs.is_none() {
                spec.needs.clone_from(&self.default_needs);
            }
        }
        let InputItem::Job(spec) = &item else {
            return item;
        };
        let Some(message) = self.too_long(&spec.command, &spec.key, spec.seq) else {
            return item;
        };
        InputItem::Invalid {
            seq: spec.seq,
            line: spec.line,
            key: Some(spec.key.to_string()),
            message,
        }
    }
}

fn run(feed: Feed, tx: &mpsc::Sender<InputItem>, commands: &Commands) {
    let send = |item| tx.blocking_send(commands.check(item)).is_ok();
    match feed {
        Feed::Lines(reader) => forward(LineReader::new(reader), &send),
        Feed::Records(records) => forward(records, &send),
        Feed::Preloaded(lines) => {
            for numbered in lines {
                if !send(from_line(numbered)) {
                    return;
                }
            }
        }
        Feed::Manifest(manifest) => {
            let ranks: Vec<i64> = manifest.jobs.iter().map(|job| job.rank).collect();
            let mut jobs: Vec<Option<_>> = manifest.jobs.into_iter().map(Some).collect();
            for index in admission_order(&ranks) {
                let Some(job) = jobs[index].take() else {
                    continue;
                };
                let spec = JobSpec {
                    seq: index as u64 + 1,
                    line: job.line,
                    key: Arc::from(job.key),
                    command: job.cmd,
                    rank: job.rank,
                    timeout: job.timeout,
                    cwd: job.cwd,
                    env: job.env,
                    needs: job.resolved_needs,
                };
                if !send(InputItem::Job(spec)) {
                    return;
                }
            }
        }
    }
}

fn from_line(numbered: NumberedLine) -> InputItem {
    match numbered.item {
        LineItem::Job { key, command } => InputItem::Job(JobSpec {
            seq: numbered.seq,
            line: numbered.line,
            key: Arc::from(key),
            command,
            rank: 0,
            timeout: None,
            cwd: None,
            env: Vec::new(),
            needs: None,
        }),
        LineItem::Invalid { key, message } => InputItem::Invalid {
            seq: numbered.seq,
            line: numbered.line,
            key,
            message,
        },
    }
}

/// The driver's end of the input: open until the input ends or is closed.
pub(crate) struct Input {
    rx: Option<mpsc::Receiver<InputItem>>,
}

impl Input {
    /// The receiving end of [`start`].
    pub(crate) fn new(rx: mpsc::Receiver<InputItem>) -> Self {
        Input { rx: Some(rx) }
    }

    /// Whether more items may come.
    pub(crate) fn is_open(&self) -> bool {
        self.rx.is_some()
    }

    /// The next item; `None` at the end of the input (it is then closed). Never resolves once
    /// closed.
    pub(crate) async fn recv(&mut self) -> Option<InputItem> {
        let item = match &mut self.rx {
            Some(rx) => rx.recv().await,
            None => std::future::pending().await,
        };
        if item.is_none() {
            self.rx = None;
        }
        item
    }

    /// An item the input thread has ready, without waiting: `Ok(None)` when none is ready,
    /// `Err(())` at the end of the input (it is then closed).
    pub(crate) fn try_recv(&mut self) -> Result<Option<InputItem>, ()> {
        let Some(rx) = &mut self.rx else {
            return Ok(None);
        };
        match rx.try_recv() {
            Ok(item) => Ok(Some(item)),
            Err(mpsc::error::TryRecvError::Empty) => Ok(None),
            Err(mpsc::error::TryRecvError::Disconnected) => {
                self.rx = None;
                Err(())
            }
        }
    }

    /// Stops reading: the input thread stops at its next item. Returns what it had already
    /// read: the items it handed over, and, for stdin, every line it read before its next
    /// `read` (it may hold one while the driver closes; nothing it took from stdin may go
    /// without a record), but nothing it would read after: that `read` fails
    /// ([`StoppedReading`]), and the thread ends at it. That wait ends when the thread is in a
    /// `read`, ends, or after [`HANDOVER_WAIT`].
    pub(crate) fn close(&mut self) -> Vec<InputItem> {
        let mut pending = Vec::new();
        if let Some(mut rx) = self.rx.take() {
            if STDIN_WATCHED.load(Ordering::SeqCst) {
                STOP_READING.store(true, Ordering::SeqCst);
                take_until_reading(&mut rx, &mut pending);
            }
            rx.close();
            while let Ok(item) = rx.try_recv() {
                pending.push(item);
            }
        }
        pending
    }
}

/// Takes what the input thread hands over until it is inside a `read` of stdin (then it
/// holds nothing more), it has ended, or [`HANDOVER_WAIT`] has passed.
fn take_until_reading(rx: &mut mpsc::Receiver<InputItem>, pending: &mut Vec<InputItem>) {
    let until = Instant::now() + HANDOVER_WAIT;
    loop {
        // Looked at before the channel is emptied: what it sent before its `read` is there.
        let reading = IN_STDIN_READ.load(Ordering::SeqCst);
        loop {
            match rx.try_recv() {
                Ok(item) => pending.push(item),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return,
            }
        }
        if reading || Instant::now() >= until {
            return;
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Hands each record of `records` on as an input item; a read error ends the input with it.
fn forward(
    records: impl Iterator<Item = std::io::Result<NumberedLine>>,
    send: &impl Fn(InputItem) -> bool,
) {
    for numbered in records {
        let item = match numbered {
            Ok(numbered) => from_line(numbered),
            Err(err) if is_stopped_reading(&err) => return,
            Err(err) => {
                let _ = send(InputItem::ReadError(format!("cannot read input: {err}")));
                return;
            }
        };
        if !send(item) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(seq: u64) -> InputItem {
        InputItem::Invalid {
            seq,
            line: seq,
            key: None,
            message: String::new(),
        }
    }

    /// One test for both cases: they share the process-wide flags.
    #[test]
    fn closing_takes_what_the_input_thread_holds_and_does_not_wait_on_a_read() {
        STDIN_WATCHED.store(true, Ordering::SeqCst);

        // The thread has read line 2 and is not scheduled before the driver closes.
        IN_STDIN_READ.store(false, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel(4);
        tx.try_send(item(1)).unwrap();
        let mut input = Input::new(rx);
        let (go, closing) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            closing.recv().unwrap();
            std::thread::sleep(Duration::from_millis(50));
            let sent = tx.blocking_send(item(2)).is_ok();
            IN_STDIN_READ.store(true, Ordering::SeqCst);
            // Back in a `read` that never returns: the sender stays.
            (sent, tx)
        });
        go.send(()).unwrap();
        let pending = input.close();
        let (sent, _tx) = thread.join().unwrap();
        assert!(sent, "the thread could not hand its line over");
        let seqs: Vec<u64> = pending
            .iter()
            .map(|item| match item {
                InputItem::Invalid { seq, .. } => *seq,
                _ => 0,
            })
            .collect();
        assert_eq!(seqs, [1, 2]);

        // The thread is inside a read: nothing to wait for.
        IN_STDIN_READ.store(true, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel(4);
        let mut input = Input::new(rx);
        let started = Instant::now();
        assert!(input.close().is_empty());
        assert!(
            started.elapsed() < HANDOVER_WAIT / 2,
            "{:?}",
            started.elapsed()
        );
        drop(tx);

        // Closing stopped reading: a later read of stdin fails, and is no read error.
        assert!(STOP_READING.load(Ordering::SeqCst));
        let err = WatchedStdin(std::io::stdin())
            .read(&mut [0; 8])
            .unwrap_err();
        assert!(is_stopped_reading(&err), "{err}");
        assert!(!IN_STDIN_READ.load(Ordering::SeqCst));

        STDIN_WATCHED.store(false, Ordering::SeqCst);
        IN_STDIN_READ.store(false, Ordering::SeqCst);
        STOP_READING.store(false, Ordering::SeqCst);
    }
}
