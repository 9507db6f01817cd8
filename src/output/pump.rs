//! Pumping one job's output from its pipes to where it goes (SPEC §5.1): line framing with key
//! prefixes, raw bytes, grouped capture, `--results` files and the stderr tail, with a bound on
//! what waits for a full sink, so that a blocked destination holds the job back through its
//! own pipe.

use std::io;
use std::sync::Arc;

use tokio::net::unix::pipe;

use super::capture::Capture;
use super::framing::LineFramer;
use super::results::ResultFiles;
use super::sink::SinkTx;

use crate::settings::OutputMode;

/// Where a job's output goes (SPEC §5.1).
pub(crate) struct OutputPlan {
    pub mode: OutputMode,
    /// The job's stdout destination (lanes' stdout, or its stderr under `--json`).
    pub stdout: SinkTx,
    pub stderr: SinkTx,
    /// `[key] `, for prefixed stdout lines.
    pub prefix: Arc<[u8]>,
    /// The same for stderr lines (coloured or not, as stderr is).
    pub err_prefix: Arc<[u8]>,
    pub key: Arc<str>,
    /// `--results DIR`: the job's two files there, created before its start.
    pub results: Option<super::results::ResultFiles>,
}

/// How much of a job's stderr is kept for the summary and the JUnit file, in bytes.
pub(crate) const TAIL_BYTES: usize = 4096;

/// Size of one read from a job's pipe, in bytes: a whole pipe buffer (Linux's default pipe
/// capacity, pipe(7)).
const READ_SIZE: usize = 64 * 1024;

/// A stream's pipe is not read while this many bytes of it wait for its sink.
const PENDING_MAX: usize = 64 * 1024;

/// At most this many bytes are read from a pipe after its job's process group is gone, beyond
/// which a process outside the group is taken to be writing into it.
const DRAIN_MAX: usize = 4 * 1024 * 1024;

thread_local! {
    /// The one buffer every job's pipe is read into: a read's data is passed on before the
    /// next read, so jobs need no buffer of their own (and a job that writes nothing costs no
    /// buffer at all).
    static READ_BUFFER: std::cell::RefCell<Box<[u8]>> =
        std::cell::RefCell::new(vec![0; READ_SIZE].into_boxed_slice());
}

/// The pipe is readable; never, without a pipe.
pub(crate) async fn readable(pipe: &Option<pipe::Receiver>) -> io::Result<()> {
    match pipe {
        Some(pipe) => pipe.readable().await,
        None => std::future::pending().await,
    }
}

/// One of a job's two output streams on its way out.
pub(crate) struct Stream {
    is_stderr: bool,
    /// Where lines or bytes go as they come (prefixed, raw).
    sink: Option<SinkTx>,
    framer: Option<LineFramer>,
    /// Everything, held until the job ends (grouped).
    capture: Option<Capture>,
    /// The last bytes seen (stderr only), at most [`TAIL_BYTES`] once trimmed.
    tail: Vec<u8>,
    /// Read and framed, not yet handed to the sink (which may be full: lanes' stdout blocked).
    pending: Vec<u8>,
}

impl Stream {
    pub(crate) fn new(plan: &OutputPlan, is_stderr: bool) -> Self {
        let sink = if is_stderr {
            &plan.stderr
        } else {
            &plan.stdout
        };
        let (sink, framer, capture) = match plan.mode {
            OutputMode::Prefixed => (
                Some(sink.clone()),
                // Each stream's prefix is coloured as its own destination decides.
                Some(LineFramer::new(if is_stderr {
                    plan.err_prefix.to_vec()
                } else {
                    plan.prefix.to_vec()
                })),
                None,
            ),
            OutputMode::Raw => (Some(sink.clone()), None, None),
            OutputMode::Grouped => (Some(sink.clone()), None, Some(Capture::default())),
            OutputMode::None => (None, None, None),
        };
        Stream {
            is_stderr,
            sink,
            framer,
            capture,
            tail: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Whether the pipe may be read: not while [`PENDING_MAX`] bytes wait for the sink, so that
    /// a blocked destination holds the job back through its pipe instead of growing memory.
    pub(crate) fn may_read(&self) -> bool {
        self.pending.len() < PENDING_MAX
    }

    /// Reads everything left in the pipe once the job's process group is gone (at most a pipe
    /// buffer, but never more than [`DRAIN_MAX`] bytes), whatever waits for the sink. The pipe
    /// is closed at EOF; still open afterwards, it is held by a process outside the group.
    pub(crate) fn drain(
        &mut self,
        pipe: &mut Option<pipe::Receiver>,
        mut results: Option<&mut ResultFiles>,
    ) {
        for _ in 0..DRAIN_MAX / READ_SIZE {
            match self.read(pipe, results.as_deref_mut(), Past::Readiness) {
                Read::Data => {}
                Read::Closed => {
                    *pipe = None;
                    return;
                }
                Read::Empty => return,
            }
        }
    }

    /// Reads what is available into `pending` (or the capture). Returns false at EOF or on a
    /// read error.
    pub(crate) fn pump(
        &mut self,
        pipe: &mut Option<pipe::Receiver>,
        ready: io::Result<()>,
        results: Option<&mut ResultFiles>,
    ) -> bool {
        if ready.is_err() {
            return false;
        }
        !matches!(self.read(pipe, results, Past::Nothing), Read::Closed)
    }

    /// One read from the pipe.
    fn read(
        &mut self,
        pipe: &Option<pipe::Receiver>,
        results: Option<&mut ResultFiles>,
        past: Past,
    ) -> Read {
        let Some(reader) = pipe.as_ref() else {
            return Read::Closed;
        };
        let read = |buffer: &mut [u8]| match past {
            Past::Nothing => reader.try_read(buffer),
            Past::Readiness => {
                use std::os::fd::AsRawFd as _;
                nix::unistd::read(reader.as_raw_fd(), buffer).map_err(io::Error::from)
            }
        };
        READ_BUFFER.with_borrow_mut(|buffer| match read(buffer) {
            Ok(0) => Read::Closed,
            Ok(n) => {
                let data = &buffer[..n];
                if self.is_stderr {
                    self.tail.extend_from_slice(data);
                    if self.tail.len() > 2 * TAIL_BYTES {
                        self.tail.drain(..self.tail.len() - TAIL_BYTES);
                    }
                }
                if let Some(results) = results {
                    results.write(self.is_stderr, data);
                }
                if let Some(capture) = &mut self.capture {
                    capture.push(data);
                } else if let Some(framer) = &mut self.framer {
                    // Room for the data and a prefix on every 64 bytes of it, so that a
                    // batch of ordinary lines is built without growing.
                    self.pending.reserve(n + (n / 64 + 1) * framer.prefix_len());
                    framer.push(data, &mut self.pending);
                } else if self.sink.is_some() {
                    self.pending.extend_from_slice(data);
                }
                Read::Data
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Read::Empty,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Read::Empty,
            Err(_) => Read::Closed,
        })
    }

    /// Hands what is pending to the sink through a reserved place in its queue.
    pub(crate) fn hand_over(&mut self, permit: Option<Permit>) {
        let batch = std::mem::take(&mut self.pending);
        // An empty buffer is the sink's mark, never output.
        if let (Some(permit), false) = (permit, batch.is_empty()) {
            permit.send(batch);
        }
    }

    /// Whether output waits for the sink.
    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The whole output held for a grouped block, once.
    pub(crate) fn take_capture(&mut self) -> Option<Capture> {
        self.capture.take()
    }

    /// The last bytes seen (stderr), at most [`TAIL_BYTES`] once finished.
    pub(crate) fn into_tail(self) -> Vec<u8> {
        self.tail
    }

    /// Frames the unfinished last line (prefixed) into `pending`, and trims the tail.
    pub(crate) fn finish(&mut self) {
        if self.tail.len() > TAIL_BYTES {
            self.tail.drain(..self.tail.len() - TAIL_BYTES);
        }
        if let Some(framer) = &mut self.framer {
            framer.finish(&mut self.pending);
        }
        if self.sink.is_none() {
            self.pending.clear();
        }
    }
}

/// What one read from a job's pipe found.
enum Read {
    Data,
    /// Nothing now (EAGAIN).
    Empty,
    /// EOF or a read error.
    Closed,
}

/// How a read from a job's pipe goes about it.
#[derive(Clone, Copy)]
enum Past {
    /// As the event loop knows the pipe: nothing is read before it has seen the pipe become
    /// readable.
    Nothing,
    /// Straight from the pipe, past what the event loop has seen: once the job's processes are
    /// gone, their last output and the EOF of their exit may not have reached it yet, and a
    /// pipe they closed would be taken for one held open elsewhere (a leak).
    Readiness,
}

pub(crate) type Permit = tokio::sync::mpsc::OwnedPermit<Vec<u8>>;

/// A place in `stream`'s sink queue once one is free, when something is pending; never
/// otherwise. `None` when the sink is closed (what is pending is then dropped). The future
/// holds its own handle of the sink, not a borrow of the stream.
pub(crate) fn room(stream: &Stream) -> impl std::future::Future<Output = Option<Permit>> {
    let sink = stream
        .sink
        .as_ref()
        .filter(|_| !stream.pending.is_empty())
        .cloned();
    async move {
        match sink {
            Some(sink) => sink.reserve_owned().await.ok(),
            None => std::future::pending().await,
        }
    }
}
