//! Writer threads for lanes' stdout, stderr and the report: each takes whole buffers over a
//! bounded channel and writes each with one `write_all`, so a slow reader applies backpressure
//! to the jobs instead of growing memory, and a closed pipe (EPIPE) stops the writing, never
//! the run. A writer thread starts with the first buffer sent to it; when no thread can be
//! started (EAGAIN: `ulimit -u`), a task of the event loop writes the buffers instead.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use tokio::sync::mpsc;

/// How many buffers may wait for a writer thread before senders wait.
const DEPTH: usize = 16;

/// Bytes written to lanes' stdout and stderr so far, by every sink: whether a reader still
/// takes anything ([`output_written`]).
static OUTPUT_WRITTEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Bytes of lanes' own notices about a wait for a reader, sent to stderr: no sign that any
/// reader reads ([`output_written`] leaves them out).
static NOTICES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Bytes written to lanes' stdout and stderr so far, less lanes' notices about its waits for
/// readers ([`notice_sent`]): a wait for a slow reader that sees this grow knows the reader
/// still reads. It may shrink for a moment (a notice counted before it is written).
pub(crate) fn output_written() -> u64 {
    OUTPUT_WRITTEN
        .load(std::sync::atomic::Ordering::Relaxed)
        .saturating_sub(NOTICES.load(std::sync::atomic::Ordering::Relaxed))
}

/// A notice of `bytes` about a wait for a reader goes to stderr: its writing is no progress of
/// the wait.
pub(crate) fn notice_sent(bytes: usize) {
    NOTICES.fetch_add(bytes as u64, std::sync::atomic::Ordering::Relaxed);
}

/// A destination whose writes are counted in [`OUTPUT_WRITTEN`] as they happen (a large
/// buffer written to a slow reader is counted write by write, not once at its end).
struct Counted(Box<dyn Write + Send>);

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.0.write(buf)?;
        OUTPUT_WRITTEN.fetch_add(written as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// The most bytes of an unfinished line held back while the live display is drawn.
const PARTIAL_MAX: usize = 64 * 1024;

/// What a writer thread needs, kept until the first buffer is sent: a run that writes nothing
/// to a destination starts no thread for it.
struct Pending {
    name: &'static str,
    lost: Arc<std::sync::atomic::AtomicBool>,
    marks: Arc<Marks>,
    destination: Box<dyn Write + Send>,
    /// The destination's descriptor, when it has one: lets [`Sink::try_write_now`] see whether a
    /// write would block.
    fd: Option<std::os::fd::RawFd>,
    /// Held through each write when another sink writes to the same file ([`Sink::sharing`]):
    /// a write of more than `PIPE_BUF` bytes to a pipe may be split, and another writer's
    /// bytes land between its pieces, in the middle of a line.
    shared: Option<Arc<Mutex<()>>>,
    display: Option<indicatif::MultiProgress>,
    /// With the display: the end of the last line written, held back until its newline (or
    /// the end), since the display, drawn below a part of a line, would draw over it.
    partial: Vec<u8>,
    rx: mpsc::Receiver<Vec<u8>>,
    /// A write failed: the rest is dropped.
    closed: bool,
}

impl Pending {
    /// Writes `buffer` whole (with the display, up to its last newline: see `partial`), holding
    /// the lock of a file shared with another sink.
    fn write(&mut self, buffer: &[u8]) -> std::io::Result<()> {
        let shared = self.shared.clone();
        let _one_writer = shared.as_deref().map(lock);
        self.write_unshared(buffer)
    }

    fn write_unshared(&mut self, buffer: &[u8]) -> std::io::Result<()> {
        let Some(display) = &self.display else {
            return self.destination.write_all(buffer);
        };
        let Some(end) = buffer.iter().rposition(|&byte| byte == b'\n') else {
            self.partial.extend_from_slice(buffer);
            if self.partial.len() > PARTIAL_MAX {
                // A line this long is written as it is: memory stays bounded.
                let long = std::mem::take(&mut self.partial);
                return display.suspend(|| self.destination.write_all(&long));
            }
            return Ok(());
        };
        let (lines, rest) = buffer.split_at(end + 1);
        let written = if self.partial.is_empty() {
            display.suspend(|| self.destination.write_all(lines))
        } else {
            self.partial.extend_from_slice(lines);
            let whole = std::mem::take(&mut self.partial);
            display.suspend(|| self.destination.write_all(&whole))
        };
        self.partial.extend_from_slice(rest);
        written
    }

    /// The end: writes what was held back, and flushes.
    fn finish(&mut self) {
        if self.closed {
            return;
        }
        let shared = self.shared.clone();
        let _one_writer = shared.as_deref().map(lock);
        if !self.partial.is_empty() {
            let rest = std::mem::take(&mut self.partial);
            let written = match &self.display {
                Some(display) => display.suspend(|| self.destination.write_all(&rest)),
                None => self.destination.write_all(&rest),
            };
            if written.is_err() {
                return;
            }
        }
        let _ = self.destination.flush();
    }
}

/// A writer thread's state: not started yet (everything it needs), started, or a task of the
/// event loop in its place because no thread could be started.
enum Writer {
    Pending(Pending),
    Started(JoinHandle<()>),
    Task(tokio::task::JoinHandle<()>),
    Closed,
}

/// A cloneable handle that sends buffers to a [`Sink`]; the first buffer sent starts the
/// sink's writer thread.
#[derive(Clone)]
pub(crate) struct SinkTx {
    tx: mpsc::Sender<Vec<u8>>,
    writer: Arc<Mutex<Writer>>,
    /// Set by the writer thread when a write failed other than for a reader gone (EPIPE).
    lost: Arc<std::sync::atomic::AtomicBool>,
    marks: Arc<Marks>,
}

/// Where the writer has got to in what was sent: an empty buffer is a mark, and the writer
/// counts each one it comes to (written past, or dropped after a failed write), so that a
/// sender can learn that everything it sent before a mark is written, or never will be.
#[derive(Default)]
pub(crate) struct Marks {
    /// Marks handed out ([`SinkTx::mark`]).
    sent: std::sync::atomic::AtomicU64,
    /// Marks the writer came to.
    reached: std::sync::atomic::AtomicU64,
    /// A write failed, for any reason (a reader gone too): what was sent since is dropped.
    failed: std::sync::atomic::AtomicBool,
    /// The marks the writer had come to when a write failed.
    reached_before_failure: std::sync::atomic::AtomicU64,
    changed: tokio::sync::Notify,
}

impl Marks {
    /// How many marks the writer came to with everything before them written: every mark
    /// it came to, or, once a write failed, those it had come to before.
    pub(crate) fn written_through(&self) -> u64 {
        use std::sync::atomic::Ordering;
        if self.failed() {
            self.reached_before_failure.load(Ordering::Acquire)
        } else {
            self.reached.load(Ordering::Acquire)
        }
    }

    /// Resolves once the writer came to mark `n`, or a write failed.
    pub(crate) async fn wait_for(&self, n: u64) {
        use std::sync::atomic::Ordering;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.reached.load(Ordering::Acquire) >= n || self.failed() {
                return;
            }
            changed.await;
        }
    }

    /// Whether a write failed for any reason, a reader gone (EPIPE) included.
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl SinkTx {
    /// Whether a write failed for another reason than a reader gone (EPIPE): a full disk.
    pub(crate) fn lost(&self) -> bool {
        self.lost.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A mark's number ([`Marks`]), to send with [`SinkTx::send_mark`] in the order handed
    /// out: everything sent through this sink before it is written once the writer reached
    /// it ([`SinkTx::marks`]) without a failure.
    pub(crate) fn mark(&self) -> u64 {
        self.marks
            .sent
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel)
            + 1
    }

    /// Where the writer has got to ([`SinkTx::mark`]).
    pub(crate) fn marks(&self) -> Arc<Marks> {
        Arc::clone(&self.marks)
    }

    /// Queues `buffer` for writing, waiting while [`DEPTH`] buffers wait (backpressure).
    ///
    /// # Errors
    /// The buffer back when the sink is closed.
    pub(crate) async fn send(
        &self,
        buffer: Vec<u8>,
    ) -> Result<(), mpsc::error::SendError<Vec<u8>>> {
        // An empty buffer writes nothing; sent, it would be a mark ([`Marks`]).
        if buffer.is_empty() {
            return Ok(());
        }
        start(&self.writer);
        self.tx.send(buffer).await
    }

    /// Sends the mark [`SinkTx::mark`] handed out (in the order they were handed out).
    pub(crate) async fn send_mark(&self) {
        start(&self.writer);
        let _ = self.tx.send(Vec::new()).await;
    }
}

/// A sender whose buffers go to the returned receiver instead of a writer thread (for tests).
#[cfg(test)]
pub(crate) fn test_channel(depth: usize) -> (SinkTx, mpsc::Receiver<Vec<u8>>) {
    let (tx, rx) = mpsc::channel(depth);
    let writer = Arc::new(Mutex::new(Writer::Closed));
    let lost = Arc::default();
    let marks = Arc::default();
    (
        SinkTx {
            tx,
            writer,
            lost,
            marks,
        },
        rx,
    )
}

impl SinkTx {
    /// A place in the queue, waited for while [`DEPTH`] buffers wait (backpressure); sending
    /// through it cannot block.
    ///
    /// # Errors
    /// When the sink is closed.
    pub(crate) async fn reserve_owned(
        self,
    ) -> Result<mpsc::OwnedPermit<Vec<u8>>, mpsc::error::SendError<()>> {
        start(&self.writer);
        self.tx.reserve_owned().await
    }
}

/// Starts the writer thread unless it runs already. When none can be started (EAGAIN:
/// `ulimit -u`), a task of the event loop writes instead: each write then holds the event loop
/// until it is done, but nothing is lost.
fn start(writer: &Mutex<Writer>) {
    let mut writer = lock(writer);
    if !matches!(*writer, Writer::Pending(_)) {
        return;
    }
    let Writer::Pending(pending) = std::mem::replace(&mut *writer, Writer::Closed) else {
        return;
    };
    // Handed to the thread through a slot, so that it is still here when no thread starts.
    let name = format!("lanes-{}", pending.name);
    let slot = Arc::new(Mutex::new(Some(pending)));
    let theirs = Arc::clone(&slot);
    let spawned = std::thread::Builder::new().name(name).spawn(move || {
        if let Some(pending) = lock(&theirs).take() {
            write_all(pending);
        }
    });
    let err = match spawned {
        Ok(thread) => {
            *writer = Writer::Started(thread);
            return;
        }
        Err(err) => err,
    };
    let Some(mut pending) = lock(&slot).take() else {
        return;
    };
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            *writer = Writer::Task(runtime.spawn(async move {
                while let Some(buffer) = pending.rx.recv().await {
                    write_one(&mut pending, &buffer);
                }
                pending.finish();
            }));
        }
        // No event loop either: the channel closes with `pending`, and the output is dropped
        // as for a closed pipe.
        Err(_) => eprintln!(
            "lanes: cannot start the writer for {}: {err}; its output is dropped",
            pending.name
        ),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Whether `len` bytes can be written to `fd` at once without blocking.
fn writable_now(fd: std::os::fd::RawFd, len: usize) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    // SAFETY: the descriptor stays open for the call (the sink owns it).
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let mut fds = [PollFd::new(borrowed, PollFlags::POLLOUT)];
    len <= nix::libc::PIPE_BUF
        && matches!(poll(&mut fds, PollTimeout::ZERO), Ok(1))
        && fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLOUT))
}

/// The writer thread: writes each buffer with one `write_all` until every sender is gone.
fn write_all(mut pending: Pending) {
    while let Some(buffer) = pending.rx.blocking_recv() {
        write_one(&mut pending, &buffer);
    }
    pending.finish();
}

/// Writes one buffer whole, unless an earlier write failed; the first failure is reported.
/// An empty buffer is a mark ([`Marks`]): counted, written or not.
fn write_one(pending: &mut Pending, buffer: &[u8]) {
    if buffer.is_empty() {
        pending
            .marks
            .reached
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        pending.marks.changed.notify_waiters();
        return;
    }
    if pending.closed {
        return;
    }
    let written = pending.write(buffer);
    if let Err(err) = written {
        let name = pending.name;
        pending.closed = true;
        let marks = &pending.marks;
        marks.reached_before_failure.store(
            marks.reached.load(std::sync::atomic::Ordering::Acquire),
            std::sync::atomic::Ordering::Release,
        );
        marks
            .failed
            .store(true, std::sync::atomic::Ordering::Release);
        pending.marks.changed.notify_waiters();
        pending.lost.store(
            err.kind() != std::io::ErrorKind::BrokenPipe,
            std::sync::atomic::Ordering::Relaxed,
        );
        if err.kind() == std::io::ErrorKind::BrokenPipe {
            eprintln!(
                "lanes: {name} closed (broken pipe); output for it is dropped, the jobs go on"
            );
        } else {
            eprintln!(
                "lanes: cannot write to {name}: {err}; output for it is dropped, the jobs go on"
            );
        }
    }
}

/// One destination's writer thread, started by the first buffer sent to it.
pub(crate) struct Sink {
    tx: Option<SinkTx>,
}

impl Sink {
    /// A sink for `destination`, called `name` in messages (`"stdout"`). With `display`, each
    /// buffer is written while the live display is suspended (cleared, then drawn again below
    /// the new text).
    pub(crate) fn spawn(
        name: &'static str,
        destination: Box<dyn Write + Send>,
        display: Option<indicatif::MultiProgress>,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<Vec<u8>>(DEPTH);
        let lost = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let marks = Arc::new(Marks::default());
        let writer = Writer::Pending(Pending {
            name,
            lost: Arc::clone(&lost),
            marks: Arc::clone(&marks),
            destination: Box::new(Counted(destination)),
            fd: None,
            shared: None,
            display,
            partial: Vec::new(),
            rx,
            closed: false,
        });
        Sink {
            tx: Some(SinkTx {
                tx,
                writer: Arc::new(Mutex::new(writer)),
                lost,
                marks,
            }),
        }
    }

    /// The flag its writer thread sets when a write failed other than for a reader gone
    /// (see [`SinkTx::lost`]), to be read once the sink is closed.
    pub(crate) fn lost_flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.tx
            .as_ref()
            .map_or_else(Arc::default, |tx| Arc::clone(&tx.lost))
    }

    /// Whether a writer thread was started (anything was sent).
    pub(crate) fn started(&self) -> bool {
        self.tx.as_ref().is_some_and(|tx| {
            let writer = tx
                .writer
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            matches!(*writer, Writer::Started(_) | Writer::Task(_))
        })
    }

    /// A handle for sending buffers.
    pub(crate) fn sender(&self) -> SinkTx {
        self.tx.clone().expect("the sink is open until closed")
    }

    /// Notes the destination's descriptor (see [`Sink::try_write_now`]).
    #[must_use]
    pub(crate) fn with_fd(self, fd: std::os::fd::RawFd) -> Self {
        if let Some(tx) = &self.tx {
            let mut writer = tx
                .writer
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Writer::Pending(pending) = &mut *writer {
                pending.fd = Some(fd);
            }
        }
        self
    }

    /// Makes this sink hold `one_file` through each write: another sink writing to the same
    /// file (lanes' stdout and stderr, `2>&1 | tee log`) holds it too, so that neither
    /// writes in the middle of the other's lines.
    pub(crate) fn sharing(self, one_file: &Arc<Mutex<()>>) -> Self {
        if let Some(tx) = &self.tx {
            if let Writer::Pending(pending) = &mut *lock(&tx.writer) {
                pending.shared = Some(Arc::clone(one_file));
            }
        }
        self
    }

    /// Writes `buffer` directly on this thread, when no writer thread runs yet and the write
    /// cannot block: the destination has no descriptor (a test's buffer) or polls writable
    /// and `buffer` is at most `PIPE_BUF` bytes (written whole at once to a pipe, POSIX
    /// `write(2)`). Returns false, writing nothing, otherwise: then send it.
    pub(crate) fn try_write_now(&self, buffer: &[u8]) -> bool {
        let Some(tx) = &self.tx else {
            return true;
        };
        let mut writer = tx
            .writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Writer::Pending(pending) = &mut *writer else {
            return false;
        };
        if !pending.fd.is_none_or(|fd| writable_now(fd, buffer.len())) {
            return false;
        }
        if pending.write(buffer).is_ok() {
            let _ = pending.destination.flush();
        }
        true
    }

    /// Closes the sink and waits until everything sent has been written, at most `patience`
    /// (`None`: for as long as it takes); returns whether everything was written. Other
    /// senders must be dropped first, or this waits for them. A writer still blocked after that (a reader
    /// that stopped reading) is left to end with the process, and what it had not written is
    /// lost.
    pub(crate) fn close_within(mut self, patience: Option<std::time::Duration>) -> bool {
        let Some(tx) = self.tx.take() else {
            return true;
        };
        let writer = std::mem::replace(
            &mut *tx
                .writer
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
            Writer::Closed,
        );
        drop(tx);
        let thread = match writer {
            Writer::Started(thread) => thread,
            // Only the event loop can wait for its task ([`Sink::closed`]).
            Writer::Task(task) => return task.is_finished(),
            Writer::Pending(mut pending) => {
                pending.finish();
                return true;
            }
            Writer::Closed => return true,
        };
        if let Some(patience) = patience {
            let give_up = std::time::Instant::now() + patience;
            while !thread.is_finished() {
                if std::time::Instant::now() >= give_up {
                    return false;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        thread.join().is_ok()
    }
}

impl Sink {
    /// Closes the sink and waits, without blocking the thread, until everything sent has been
    /// written; returns whether the writer ended well. Other senders must be dropped first.
    pub(crate) async fn closed(mut self) -> bool {
        let Some(tx) = self.tx.take() else {
            return true;
        };
        let writer = std::mem::replace(&mut *lock(&tx.writer), Writer::Closed);
        drop(tx);
        match writer {
            Writer::Started(thread) => {
                while !thread.is_finished() {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
                thread.join().is_ok()
            }
            Writer::Task(task) => task.await.is_ok(),
            Writer::Pending(mut pending) => {
                pending.finish();
                true
            }
            Writer::Closed => true,
        }
    }
}

/// Whether descriptor 1 was closed when lanes started (`lanes … >&-`), before Rust's start-up
/// put `/dev/null` there ([`note_closed_stdout`]).
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Notes whether descriptor 1 is closed. For lanes' first code (an ELF constructor), before
/// Rust's start-up opens `/dev/null` on a closed standard descriptor, which would make the
/// jobs' output vanish without a word.
pub(crate) fn note_closed_stdout() {
    // SAFETY: `fcntl(F_GETFD)` reads a descriptor's flags; it touches no memory of ours.
    let closed = unsafe { nix::libc::fcntl(nix::libc::STDOUT_FILENO, nix::libc::F_GETFD) } == -1;
    STDOUT_CLOSED.store(closed, std::sync::atomic::Ordering::Relaxed);
}

/// lanes' stdout as a destination, as [`stdout_file`] opens it, or, when descriptor 1 was
/// closed at start, a destination every write to which fails with EBADF, as a write to a
/// closed descriptor does: said once, as for a full disk, and the exit status is 1.
pub(crate) fn stdout_destination() -> Box<dyn std::io::Write + Send> {
    struct Closed;
    impl std::io::Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other(
                "it was closed when lanes started (`>&-`)",
            ))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    if STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed) {
        return Box::new(Closed);
    }
    // No descriptor left to duplicate it (`ulimit -n`): written through the process's own.
    match stdout_file() {
        Ok(file) => Box::new(file),
        Err(_) => Box::new(std::io::stdout()),
    }
}

/// lanes' own stdout as a destination: a duplicate of descriptor 1 written without buffering
/// (one `write` per buffer).
pub(crate) fn stdout_file() -> std::io::Result<std::fs::File> {
    use std::os::fd::AsFd;
    Ok(std::fs::File::from(
        std::io::stdout().as_fd().try_clone_to_owned()?,
    ))
}

/// Whether lanes' stdout and stderr are one file (`2>&1`, one terminal, one pipe): the same
/// device and inode. Two writers to it keep no order between them.
pub(crate) fn stdout_is_stderr() -> bool {
    use nix::libc::{STDERR_FILENO, STDOUT_FILENO};
    use nix::sys::stat::fstat;
    match (fstat(STDOUT_FILENO), fstat(STDERR_FILENO)) {
        (Ok(out), Ok(err)) => (out.st_dev, out.st_ino) == (err.st_dev, err.st_ino),
        _ => false,
    }
}

/// lanes' own stderr as a destination, like [`stdout_file`].
pub(crate) fn stderr_file() -> std::io::Result<std::fs::File> {
    use std::os::fd::AsFd;
    Ok(std::fs::File::from(
        std::io::stderr().as_fd().try_clone_to_owned()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::Sink;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    /// A destination that appends to a shared buffer.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn nothing_sent_starts_no_thread_and_a_direct_write_still_lands() {
        let out = Shared::default();
        let sink = Sink::spawn("test", Box::new(out.clone()), None);
        let _sender = sink.sender();
        assert!(sink.try_write_now(b"summary\n"));
        assert!(!sink.started());
        drop(_sender);
        assert!(sink.close_within(None));
        assert_eq!(out.0.lock().unwrap().as_slice(), b"summary\n");
    }

    #[test]
    fn the_first_send_starts_the_thread_and_everything_is_written_in_order() {
        let out = Shared::default();
        let sink = Sink::spawn("test", Box::new(out.clone()), None);
        let sender = sink.sender();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            for i in 0..200 {
                sender.send(format!("{i}\n").into_bytes()).await.unwrap();
            }
        });
        assert!(sink.started());
        assert!(
            !sink.try_write_now(b"end\n"),
            "the thread runs: not written directly"
        );
        runtime.block_on(async { sender.send(b"end\n".to_vec()).await.unwrap() });
        drop(sender);
        assert!(sink.close_within(None));
        let expected: String = (0..200).map(|i| format!("{i}\n")).collect::<String>() + "end\n";
        assert_eq!(
            String::from_utf8(out.0.lock().unwrap().clone()).unwrap(),
            expected
        );
    }
}
