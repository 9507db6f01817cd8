//! The listening side of `lanes serve`: accepts connections on the socket, checks each peer's
//! uid, reads request lines in bounded memory and hands each request to the event loop as a
//! [`Call`], writing back the answers in order. It decides nothing: the driver answers.

use std::os::fd::AsFd as _;

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader, Interest};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use super::protocol::{answer_line, parse_request, Answer, Request, MAX_REQUEST_BYTES};

/// One request on its way to the event loop, with where its answer goes.
pub(crate) struct Call {
    /// What was asked.
    pub request: Request,
    /// The pid of the client that asked (`SO_PEERCRED`), when known: the driver tells a
    /// request made from inside one of its own jobs.
    pub peer: Option<i32>,
    /// The answer.
    pub reply: oneshot::Sender<Reply>,
}

/// The event loop's answer to a [`Call`].
pub(crate) struct Reply {
    /// The answer, written at once.
    pub answer: Answer,
    /// A later answer on the same connection (`submit` with `wait`: the record), written when
    /// it comes. Its sender dropped unsent: nothing more is written, and the connection stays
    /// open until then (`drain`, `close`: until the server ends).
    pub then: Option<oneshot::Receiver<Answer>>,
    /// Told once the later answer is written (`drain`, `close`: the server waits for it
    /// before it exits, so that its `ended` answer is not lost).
    pub written: Option<oneshot::Sender<()>>,
}

impl Reply {
    /// `answer` alone: nothing follows it.
    pub(crate) fn now(answer: Answer) -> Reply {
        Reply::followed_by(answer, None)
    }

    /// `answer`, then what comes on `then` when there is one (a record), with nobody told when
    /// it is written.
    pub(crate) fn followed_by(answer: Answer, then: Option<oneshot::Receiver<Answer>>) -> Reply {
        Reply {
            answer,
            then,
            written: None,
        }
    }
}

/// How many calls may wait for the event loop before connections wait to hand theirs over.
const CALL_DEPTH: usize = 1024;

/// The socket being served, and the calls coming from it.
pub(crate) struct Listening {
    /// The calls, in the order their requests were read per connection.
    pub calls: mpsc::Receiver<Call>,
    /// The answers to those calls not written yet: the server waits for them before it exits.
    pub owed: Arc<Owed>,
}

/// How many calls handed to the event loop have an answer not yet written to its connection
/// (still to be made, gathered, or being written): at its end, the server waits until none
/// is owed, so that no client loses the answer to a submission that has a seq and a record.
/// A call whose connection is closed or given up on is owed no more.
#[derive(Default)]
pub(crate) struct Owed {
    count: AtomicUsize,
    settled: Notify,
}

impl Owed {
    /// One more answer owed, until the returned guard is dropped.
    fn owe(self: &Arc<Self>) -> OwedAnswer {
        self.count.fetch_add(1, Ordering::SeqCst);
        OwedAnswer(Arc::clone(self))
    }

    /// Returns once no answer is owed.
    pub(crate) async fn settled(&self) {
        loop {
            let notified = self.settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// One answer [`Owed`]: dropped once it is written (or can never be).
struct OwedAnswer(Arc<Owed>);

impl Drop for OwedAnswer {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.settled.notify_waiters();
        }
    }
}

/// Starts accepting on `listener` (inside the runtime): every connection gets a task of its
/// own.
///
/// # Errors
/// The listener cannot be registered with the event loop.
pub(crate) fn start(listener: std::os::unix::net::UnixListener) -> std::io::Result<Listening> {
    listener.set_nonblocking(true)?;
    let listener = UnixListener::from_std(listener)?;
    let (tx, calls) = mpsc::channel(CALL_DEPTH);
    let owed = Arc::<Owed>::default();
    let owing = Arc::clone(&owed);
    let mut most = max_connections();
    // Descriptors are kept from the jobs only where they are scarce: a spare for each of 256
    // connections costs every job's `execve` their closing.
    let scarce = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .is_ok_and(|(soft, _)| soft < SCARCE_BELOW);
    let spares = scarce.then(|| SPARES.get_or_init(|| Spares::new(most)));
    if let Some(spares) = spares {
        // As many connections as there are spares beside the server's own descriptors: a
        // connection without one could take the descriptor that `status`, `cancel` or
        // `close` need. Two at least: one may wait for a record, one is kept for those.
        most = spares.held().min(most);
        spares.keep_at_most(most);
        // Not even `/proc/self/fd` can be read without a descriptor free.
        let free = crate::descriptors::free().unwrap_or(0);
        if most >= 2 && free < HEADROOM + KEPT_ONCE_RUNNING {
            // Said once: each job that cannot start says so in its record.
            eprintln!(
                "lanes: only {free} descriptors are free beside the server's own and those \
                 kept for {most} connections: jobs will fail to start for want of them (raise \
                 `ulimit -n`)"
            );
        }
        if most < 2 {
            return Err(std::io::Error::other(format!(
                "too few descriptors are free beside the server's own for the two \
                 connections it serves at least (free: {most}; raise `ulimit -n`)"
            )));
        }
    }
    let open = std::sync::Arc::new(tokio::sync::Semaphore::new(most));
    let most_waits = most_waiting(most);
    let waits = std::sync::Arc::new(tokio::sync::Semaphore::new(most_waits));
    let idle = Arc::new(IdleConnections::default());
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let serving = Serving {
                        calls: tx.clone(),
                        owed: Arc::clone(&owing),
                        waits: (Arc::clone(&waits), most_waits),
                        idle: Arc::clone(&idle),
                        spares,
                    };
                    match std::sync::Arc::clone(&open).try_acquire_owned() {
                        Ok(permit) => {
                            tokio::spawn(serving.serve(stream, permit));
                        }
                        // Every place taken: the connection idle longest, if idle long enough,
                        // makes room; else this one is refused.
                        Err(_) if idle.close_longest_idle() => {
                            let open = Arc::clone(&open);
                            tokio::spawn(async move {
                                match tokio::time::timeout(ROOM_WAIT, open.acquire_owned()).await {
                                    Ok(Ok(permit)) => serving.serve(stream, permit).await,
                                    _ => refuse(stream, most).await,
                                }
                            });
                        }
                        Err(_) => {
                            tokio::spawn(refuse(stream, most));
                        }
                    }
                }
                // Out of descriptors: a spare one is given up for this connection, taken
                // again once a connection closes.
                Err(err)
                    if matches!(
                        err.raw_os_error(),
                        Some(nix::libc::EMFILE | nix::libc::ENFILE)
                    ) && spares.is_some_and(Spares::give_one_up) => {}
                // Out of descriptors with no spare left, and the like: the next connection
                // may fare better.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
            }
        }
    });
    Ok(Listening { calls, owed })
}

/// What a connection accepted needs to be served, beside its place.
struct Serving {
    calls: mpsc::Sender<Call>,
    owed: Arc<Owed>,
    waits: (Arc<tokio::sync::Semaphore>, usize),
    idle: Arc<IdleConnections>,
    spares: Option<&'static Spares>,
}

impl Serving {
    /// Serves `stream` in the place `permit` holds, until it closes.
    async fn serve(self, stream: UnixStream, permit: tokio::sync::OwnedSemaphorePermit) {
        if let Some(spares) = self.spares {
            spares.connection_opened();
        }
        serve_connection(stream, self.calls, self.owed, self.waits, self.idle).await;
        drop(permit);
        if let Some(spares) = self.spares {
            spares.connection_closed();
        }
    }
}

/// How long a connection must have sent no request, waiting for one, before a new connection
/// may take its place when every place is taken: a client that forgot its connection, or many
/// idle ones, lock out `status`, `cancel`, `drain` and `close` for no longer than this, rather
/// than for [`IDLE_TIMEOUT`].
const IDLE_BEFORE_MAKING_ROOM: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a new connection waits for the place of the idle one closed for it.
const ROOM_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// A connection waiting for a request: since when, how to close it, and its share of
/// [`PIPELINE_BYTES`], all of it free once every answer it owes its client is made (one still
/// to come: a `cancel` waiting out a grace period, say).
struct Waiting {
    since: std::time::Instant,
    close: Arc<Notify>,
    budget: Arc<tokio::sync::Semaphore>,
}

/// The connections waiting for a request.
#[derive(Default)]
struct IdleConnections {
    next: std::sync::atomic::AtomicU64,
    waiting: std::sync::Mutex<std::collections::HashMap<u64, Waiting>>,
}

impl IdleConnections {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, Waiting>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A number for a new connection.
    fn id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Connection `id` waits for a request from now on; `close` is told if it is to make room,
    /// which it may only while its `budget` is whole (no answer owed).
    fn waiting(&self, id: u64, close: &Arc<Notify>, budget: &Arc<tokio::sync::Semaphore>) {
        self.lock().insert(
            id,
            Waiting {
                since: std::time::Instant::now(),
                close: Arc::clone(close),
                budget: Arc::clone(budget),
            },
        );
    }

    /// Connection `id` is busy (a request came) or closed.
    fn busy(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Tells the connection idle longest to close, if it has been idle for
    /// [`IDLE_BEFORE_MAKING_ROOM`] and owes no answer; returns whether one was.
    fn close_longest_idle(&self) -> bool {
        let mut waiting = self.lock();
        let longest = waiting
            .iter()
            .filter(|(_, idle)| {
                idle.since.elapsed() >= IDLE_BEFORE_MAKING_ROOM
                    && idle.budget.available_permits() == PIPELINE_BYTES
            })
            .min_by_key(|(_, idle)| idle.since)
            .map(|(&id, _)| id);
        match longest.and_then(|id| waiting.remove(&id)) {
            Some(idle) => {
                idle.close.notify_one();
                true
            }
            None => false,
        }
    }
}

/// The most connections served at once: 256, or a quarter of the descriptors this process may
/// open when that is less, so that idle clients can never take the descriptors the jobs and
/// the journal need.
fn max_connections() -> usize {
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft);
    usize::try_from(soft / 4).unwrap_or(256).clamp(1, 256)
}

/// The most connections that may wait for a job's record at once (`submit --wait`): all but
/// an eighth of [`max_connections`] (at least one), kept for the requests that act on the
/// jobs waited for (`status`, `cancel`, `drain`, `close`), so that waiting clients can never
/// lock those out.
fn most_waiting(most: usize) -> usize {
    most.saturating_sub((most / 8).max(1)).max(1)
}

/// The server's spare descriptors, once it listens.
static SPARES: std::sync::OnceLock<Spares> = std::sync::OnceLock::new();

/// Whether the server holds every spare descriptor it keeps for connections ([`Spares`]),
/// opening them again first as far as descriptors are free, and [`HEADROOM`] more are free
/// beside them; always true outside `lanes serve`. A job may start only then: the descriptor
/// a connection or a job gave back goes to the spares before any job's pipes or cgroup can
/// take it, and the jobs leave the server the descriptors its own work needs (a job's end:
/// its cgroup's files, `/proc`).
pub(crate) fn spares_held() -> bool {
    SPARES.get().is_none_or(|spares| {
        spares.refill()
            && (0..HEADROOM)
                .map(|_| std::fs::File::open("/dev/null"))
                .collect::<std::io::Result<Vec<_>>>()
                .is_ok()
    })
}

/// Descriptors a job's start leaves free beside the spares, for the server's own work.
const HEADROOM: usize = 8;

/// Descriptors the server holds for good once it has started a job (the watch on its jobs'
/// cgroups, the cgroup kept for the next job, and the like): with fewer than [`HEADROOM`] and
/// these free at the start, a first job may start and no later one.
const KEPT_ONCE_RUNNING: usize = 3;

/// The soft limit on open descriptors (`RLIMIT_NOFILE`) below which the server keeps
/// descriptors from its jobs ([`Spares`]); above it (`lanes` raises its soft limit to the hard
/// one, often 524,288 or more) jobs run short of descriptors long before connections do.
const SCARCE_BELOW: u64 = 8192;

/// Descriptors held for connections only: one for each connection the server may still accept
/// ([`max_connections`] less those open). The jobs' pipes, cgroups and files cannot take them,
/// so that with every other descriptor taken (a small `ulimit -n`, many jobs) the listener
/// can still accept the `status`, `cancel`, `drain` or `close` that ends the waits: a
/// connection takes a spare's number (closed just before its `accept`), and gives it back
/// when it closes.
struct Spares {
    held: std::sync::Mutex<SpareFiles>,
}

/// The spares held, open on `/dev/null`, close-on-exec, and how many there should be.
struct SpareFiles {
    files: Vec<std::fs::File>,
    target: usize,
}

impl Spares {
    fn new(most: usize) -> Self {
        let spares = Spares {
            held: std::sync::Mutex::new(SpareFiles {
                files: Vec::with_capacity(most),
                target: most,
            }),
        };
        spares.refill();
        spares
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SpareFiles> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many spares are held.
    fn held(&self) -> usize {
        self.lock().files.len()
    }

    /// Keeps at most `most` spares, from now on.
    fn keep_at_most(&self, most: usize) {
        let mut held = self.lock();
        held.target = held.target.min(most);
        held.files.truncate(most);
    }

    /// Closes one spare, if one is held, so that an `accept` can take its number; returns
    /// whether one was.
    fn give_one_up(&self) -> bool {
        self.lock().files.pop().is_some()
    }

    /// A connection was accepted: one spare fewer is kept (closed now, unless the `accept`
    /// took one's number already).
    fn connection_opened(&self) {
        let mut held = self.lock();
        held.target = held.target.saturating_sub(1);
        if held.files.len() > held.target {
            held.files.pop();
        }
    }

    /// A connection closed: its spare is kept again, as soon as a descriptor is free.
    fn connection_closed(&self) {
        self.lock().target += 1;
        self.refill();
    }

    /// Opens spares again up to the target, as far as descriptors are free; returns whether
    /// every one is held.
    fn refill(&self) -> bool {
        let mut held = self.lock();
        while held.files.len() < held.target {
            match std::fs::File::open("/dev/null") {
                Ok(file) => held.files.push(file),
                Err(_) => return false,
            }
        }
        true
    }
}

/// Answers a connection over [`max_connections`] with an error, then closes it.
async fn refuse(stream: UnixStream, most: usize) {
    let error = format!(
        "the server serves {most} connections already (the most it serves at once); try again \
         once one has closed"
    );
    let (_, write) = stream.into_split();
    say_error(Out::new(write), error).await;
}

/// Writes an `error` answer on a connection that is then closed (a refused peer or one too
/// many connections): a failure to write changes nothing.
async fn say_error(mut out: Out, error: String) {
    out.push(&Answer::Error { error });
    let _ = out.flush().await;
}

/// How long a connection may go without sending a whole request before the server reads no
/// more from it (the answers still pending are written, then it is closed), and how long a
/// write of answers may make no progress (a client that reads none) before the connection is
/// closed.
const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Most bytes of answers gathered before they are written, whatever answers follow.
const OUT_BATCH: usize = 64 * 1024;

/// The answers of one connection on their way out: answer lines gathered, then written
/// together.
struct Out {
    stream: OwnedWriteHalf,
    /// Answer lines not written yet (a part of the first, possibly, written already).
    gathered: Vec<u8>,
}

impl Out {
    fn new(stream: OwnedWriteHalf) -> Self {
        Out {
            stream,
            gathered: Vec::new(),
        }
    }

    /// Adds `answer`'s line to what is to be written.
    fn push(&mut self, answer: &Answer) {
        self.gathered.extend_from_slice(&answer_line(answer));
    }

    /// Whether enough is gathered to be written now, whatever follows.
    fn full(&self) -> bool {
        self.gathered.len() >= OUT_BATCH
    }

    /// Writes what is gathered.
    ///
    /// # Errors
    /// The write fails (the peer is gone), or the peer takes nothing for [`IDLE_TIMEOUT`]
    /// (`TimedOut`).
    async fn flush(&mut self) -> std::io::Result<()> {
        let mut written = 0;
        while written < self.gathered.len() {
            let write = self.stream.write(&self.gathered[written..]);
            match tokio::time::timeout(IDLE_TIMEOUT, write).await {
                Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
                Ok(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(Ok(n)) => written += n,
                Ok(Err(err)) => return Err(err),
            }
        }
        self.gathered.clear();
        // A large answer (a `status` of many jobs) leaves no large buffer behind.
        if self.gathered.capacity() > 2 * OUT_BATCH {
            self.gathered = Vec::new();
        }
        Ok(())
    }
}

/// Returns once the peer of `stream` has closed its socket (the socket hangs up: `POLLHUP`);
/// a peer that only shut down its writing (a client that sent its requests and waits for
/// the answers) has not.
///
/// The watch costs no descriptor: it waits on the connection's own registration for a closed
/// read side (`Interest::PRIORITY` wakes on that and on priority data, which a Unix stream
/// socket never has, never on the data waiting to be read), so that a waiting client holds
/// one descriptor of the server, as [`Spares`] counts. A closed read side stays set and
/// wakes no one again: a peer that only shut down its writing is looked at every
/// [`HALF_CLOSED_CHECK`] until it closes.
async fn hung_up(stream: &UnixStream) {
    if stream.ready(Interest::PRIORITY).await.is_err() {
        return std::future::pending().await;
    }
    while !peer_closed(stream.as_fd()) {
        tokio::time::sleep(HALF_CLOSED_CHECK).await;
    }
}

/// How often a peer that shut down its writing is looked at for a close while it waits for
/// an answer (see [`hung_up`]).
const HALF_CLOSED_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether the socket `fd` has hung up (`poll` with no wait).
fn peer_closed(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(fd, PollFlags::empty())];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(1))
        && fds[0]
            .revents()
            .is_some_and(|events| events.contains(PollFlags::POLLHUP))
}

/// How many requests of one connection may be on their way to the event loop before its
/// reading waits for their answers: a client may send many before reading (pipelining).
const PIPELINE_DEPTH: usize = 256;

/// How many bytes of requests of one connection may be on their way (read, their answers not
/// yet gathered for writing) before its reading waits: 1 MiB. An answer repeats its request's
/// key, so this bounds what the answers of a client that reads none can hold too, whatever
/// the size of its keys; a longer request still goes through, alone.
const PIPELINE_BYTES: usize = 1 << 20;

/// A request's answer due on a connection, with the share of [`PIPELINE_BYTES`] its request
/// holds until the answer is gathered for writing.
struct Due {
    pending: Pending,
    held: tokio::sync::OwnedSemaphorePermit,
    /// For a call handed to the event loop: its answer is owed until written.
    owed: Option<OwedAnswer>,
}

/// An answer on its way to a connection: ready, or still to come from the event loop (and,
/// for a request answered twice, who waits until both answers are written).
enum Pending {
    Now(Reply),
    Later(oneshot::Receiver<Reply>, Option<oneshot::Sender<()>>),
}

/// One client: its peer checked, then request after request until it hangs up, each answered
/// in order. A malformed request gets an `error` answer and the next line is read; an
/// oversized one gets an `error` answer and the connection is closed.
///
/// What one connection makes the server hold is bounded: at most [`PIPELINE_DEPTH`] requests
/// and [`PIPELINE_BYTES`] of them on their way, and a request whose answer comes late or may be large (`status`, and those
/// answered twice) is the last one read until its answer is written. A peer that closes its
/// socket while answers are still due ends the connection at once (a job it submitted runs
/// on), so that it holds none of the [`max_connections`].
async fn serve_connection(
    stream: UnixStream,
    calls: mpsc::Sender<Call>,
    owed: Arc<Owed>,
    (waits, most_waits): (Arc<tokio::sync::Semaphore>, usize),
    idle: Arc<IdleConnections>,
) {
    let (read, write) = stream.into_split();
    let out = Out::new(write);
    let peer = match super::socket::check_peer(&read.as_ref()) {
        Ok(peer) => peer,
        Err(error) => {
            say_error(out, error).await;
            return;
        }
    };
    let (pending_tx, pending_rx) = mpsc::channel::<Due>(PIPELINE_DEPTH);
    let mut writing = tokio::spawn(write_answers(out, pending_rx));
    let budget = std::sync::Arc::new(tokio::sync::Semaphore::new(PIPELINE_BYTES));
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    // The peer closed its socket while an answer was due.
    let mut gone = false;
    let id = idle.id();
    let make_room = Arc::new(Notify::new());
    loop {
        line.clear();
        // Waiting for a request with none buffered: closed to make room for a new connection
        // once idle long enough (the answers still due are written first, as after
        // [`IDLE_TIMEOUT`]).
        if reader.buffer().is_empty() {
            idle.waiting(id, &make_room, &budget);
        }
        let limit = (MAX_REQUEST_BYTES + 1) as u64;
        let mut bounded = (&mut reader).take(limit);
        let read = bounded.read_until(b'\n', &mut line);
        let outcome = tokio::select! {
            // A request already buffered is taken without watching the writer.
            biased;
            read = tokio::time::timeout(IDLE_TIMEOUT, read) => match read {
                // Idle that long: closed, so that forgotten clients hold no descriptor.
                Err(_) | Ok(Ok(0) | Err(_)) => false,
                Ok(Ok(_)) => true,
            },
            // The answers can be written no more (a write failed or made no progress).
            () = pending_tx.closed() => false,
            // Idle long enough, and a new connection needs its place.
            () = make_room.notified() => false,
        };
        idle.busy(id);
        if !outcome {
            break;
        }
        // Its share of the bytes on their way: waits while the answers before it are unwritten.
        let cost = u32::try_from(line.len().clamp(1, PIPELINE_BYTES)).unwrap_or(u32::MAX);
        let Ok(held) = std::sync::Arc::clone(&budget)
            .acquire_many_owned(cost)
            .await
        else {
            break;
        };
        let due = |pending, owed| Due {
            pending,
            held,
            owed,
        };
        if line.last() == Some(&b'\n') {
            line.pop();
        } else if line.len() > MAX_REQUEST_BYTES {
            let error = format!(
                "the request is longer than {MAX_REQUEST_BYTES} bytes; the connection is closed"
            );
            let _ = pending_tx
                .send(due(Pending::Now(Reply::now(Answer::Error { error })), None))
                .await;
            break;
        }
        // A byte order mark (what some editors and .NET's writers put first) is no part of
        // the request.
        if line.starts_with(b"\xef\xbb\xbf") {
            line.drain(..3);
        }
        // A blank line (white space alone) is no request, and has no answer.
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let request = parse_request(&line);
        // A `submit --wait` holds one of the [`most_waiting`] until its record is written (to
        // the end of this turn: the connection reads nothing more until then).
        let waiting = matches!(request, Ok(Request::Submit { wait: true, .. }))
            .then(|| Arc::clone(&waits).try_acquire_owned().ok());
        let (pending, owing) = match request {
            Err(error) => (Pending::Now(Reply::now(Answer::Error { error })), None),
            Ok(Request::Submit { wait: true, .. }) if matches!(waiting, Some(None)) => {
                let clients = crate::plural::plural(most_waits as u64, "client");
                let verb = if most_waits == 1 {
                    "waits for its job's record"
                } else {
                    "wait for their jobs' records"
                };
                let error = format!(
                    "{clients} {verb} already, the most that may wait at once (the other \
                     connections are kept for status, cancel, drain and close); submit \
                     without --wait, or try again once one has its record"
                );
                (Pending::Now(Reply::now(Answer::Error { error })), None)
            }
            Ok(request) => {
                // A request whose answer has a second part (`submit` with `wait`, `drain`,
                // `close`) or can be large (`status`: every running and waiting job) is the
                // last one read until its answer is written: the requests after it are
                // answered as of their turn, not as of their arrival, and a client that reads
                // no answers makes the server hold at most one such answer.
                let one_at_a_time = matches!(
                    request,
                    Request::Submit { wait: true, .. }
                        | Request::Drain {}
                        | Request::Close {}
                        | Request::Status {}
                );
                // `ended` is the last answer of `drain` and `close`: nothing after them is read.
                let last = matches!(request, Request::Drain {} | Request::Close {});
                let (tx, rx) = oneshot::channel();
                let owing = owed.owe();
                match calls
                    .send(Call {
                        request,
                        peer,
                        reply: tx,
                    })
                    .await
                {
                    Ok(()) if one_at_a_time => {
                        let (done_tx, done_rx) = oneshot::channel();
                        if pending_tx
                            .send(due(Pending::Later(rx, Some(done_tx)), Some(owing)))
                            .await
                            .is_err()
                        {
                            break;
                        }
                        tokio::select! {
                            done = done_rx => if done.is_err() {
                                break;
                            },
                            () = hung_up(reader.get_ref().as_ref()) => {
                                gone = true;
                                break;
                            }
                        }
                        if last {
                            break;
                        }
                        continue;
                    }
                    Ok(()) => (Pending::Later(rx, None), Some(owing)),
                    Err(_) => (Pending::Now(ended()), None),
                }
            }
        };
        if pending_tx.send(due(pending, owing)).await.is_err() {
            break;
        }
    }
    drop(pending_tx);
    // The answers still due are written (a `cancel` waiting out a long grace, say), unless
    // the peer is gone.
    if gone
        || tokio::select! {
            biased;
            _ = &mut writing => false,
            () = hung_up(reader.get_ref().as_ref()) => true,
        }
    {
        writing.abort();
        let _ = writing.await;
    }
}

/// Writes the answers of one connection in the order of its requests; a batch of answers
/// ready together goes out in one write. Ends early when a write fails or makes no progress
/// for [`IDLE_TIMEOUT`].
async fn write_answers(mut out: Out, mut pending: mpsc::Receiver<Due>) {
    // The answers gathered and not written yet that are owed (see [`Owed`]).
    let mut unwritten = Vec::new();
    loop {
        // What is gathered is written before waiting for anything: answers ready together go
        // out together, and none waits behind one not made yet.
        let next = match pending.try_recv() {
            Ok(next) => next,
            Err(mpsc::error::TryRecvError::Disconnected) => break,
            Err(mpsc::error::TryRecvError::Empty) => {
                if !write_gathered(&mut out, &mut unwritten).await {
                    return;
                }
                match pending.recv().await {
                    Some(next) => next,
                    None => break,
                }
            }
        };
        let (reply, done) = match next.pending {
            Pending::Now(reply) => (reply, None),
            Pending::Later(mut rx, done) => match rx.try_recv() {
                Ok(reply) => (reply, done),
                Err(oneshot::error::TryRecvError::Closed) => (ended(), done),
                Err(oneshot::error::TryRecvError::Empty) => {
                    if !write_gathered(&mut out, &mut unwritten).await {
                        return;
                    }
                    (rx.await.unwrap_or_else(|_| ended()), done)
                }
            },
        };
        // Gathered (at most [`OUT_BATCH`] before a write): its request's share is given back.
        out.push(&reply.answer);
        drop(next.held);
        unwritten.extend(next.owed);
        if let Some(then) = reply.then {
            if !write_gathered(&mut out, &mut unwritten).await {
                return;
            }
            match then.await {
                Ok(answer) => {
                    out.push(&answer);
                    if out.flush().await.is_err() {
                        return;
                    }
                    if let Some(written) = reply.written {
                        let _ = written.send(());
                    }
                }
                // Held until the server ends (`drain`, `close`): the connection closes.
                Err(_) => return,
            }
        } else if (done.is_some() || out.full()) && !write_gathered(&mut out, &mut unwritten).await
        {
            return;
        }
        // Written: the reading goes on.
        if let Some(done) = done {
            let _ = done.send(());
        }
    }
    let _ = out.flush().await;
}

/// Writes what `out` has gathered; the answers owed among it (`unwritten`) are then owed no
/// more. Returns whether the connection can still be written to.
async fn write_gathered(out: &mut Out, unwritten: &mut Vec<OwedAnswer>) -> bool {
    if out.gathered.is_empty() {
        return true;
    }
    let written = out.flush().await.is_ok();
    unwritten.clear();
    written
}

/// The answer when the event loop is gone: the server is ending.
fn ended() -> Reply {
    Reply::now(Answer::Closed {
        why: "ending".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    type Client = (
        tokio::task::JoinHandle<()>,
        mpsc::Receiver<Call>,
        BufReader<tokio::net::unix::OwnedReadHalf>,
        OwnedWriteHalf,
    );

    /// A connection served as a client's would be: the task serving it, the calls it makes,
    /// and the client's reading and writing ends.
    fn connect() -> Client {
        let (client, server) = UnixStream::pair().unwrap();
        let (tx, calls) = mpsc::channel(4);
        let serving = tokio::spawn(serve_connection(
            server,
            tx,
            Arc::default(),
            (Arc::new(tokio::sync::Semaphore::new(1)), 1),
            Arc::default(),
        ));
        let (read, write) = client.into_split();
        (serving, calls, BufReader::new(read), write)
    }

    /// Reads one answer line from `read`.
    async fn answer(read: &mut BufReader<tokio::net::unix::OwnedReadHalf>) -> String {
        let mut line = String::new();
        read.read_line(&mut line).await.unwrap();
        line
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn an_idle_connection_is_read_no_more_but_its_pending_answers_are_written() {
        let (serving, mut calls, mut read, mut write) = connect();
        let status = b"{\"v\":1,\"op\":\"status\"}\n";
        // Just short of the limit, a request is still read and answered.
        tokio::time::sleep(IDLE_TIMEOUT - Duration::from_secs(1)).await;
        write.write_all(status).await.unwrap();
        let call = calls.recv().await.unwrap();
        let reply = |text: &str| Reply::now(error(text));
        let _ = call.reply.send(reply("first"));
        assert!(answer(&mut read).await.contains("first"));
        // Another request, answered only after the connection has been idle too long.
        write.write_all(status).await.unwrap();
        let call = calls.recv().await.unwrap();
        tokio::time::sleep(IDLE_TIMEOUT + Duration::from_secs(1)).await;
        let _ = call.reply.send(reply("late"));
        assert!(answer(&mut read).await.contains("late"));
        // Then the connection is closed, and nothing more is read.
        assert_eq!(answer(&mut read).await, "");
        serving.await.unwrap();
        assert!(calls.try_recv().is_err());
    }

    /// A request with `wait`, as a client sends it.
    const WAIT: &[u8] =
        b"{\"v\":1,\"op\":\"submit\",\"key\":\"k\",\"command\":\"true\",\"wait\":true}\n";

    fn error(text: &str) -> Answer {
        Answer::Error {
            error: text.to_owned(),
        }
    }

    /// A peer that sends a `submit --wait`, reads the first answer and closes its socket
    /// (having shut down its writing first, when `shut_down`): the connection ends and
    /// nobody waits for the record any more.
    async fn a_peer_that_closes_while_its_record_is_due(shut_down: bool) {
        let (serving, mut calls, mut read, mut write) = connect();
        write.write_all(WAIT).await.unwrap();
        if shut_down {
            write.shutdown().await.unwrap();
        }
        let call = calls.recv().await.unwrap();
        let (record, then) = oneshot::channel();
        let _ = call
            .reply
            .send(Reply::followed_by(error("first"), Some(then)));
        assert!(answer(&mut read).await.contains("first"));
        if shut_down {
            // Time for the half-close to be seen before the close.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        drop((read, write));
        tokio::time::timeout(Duration::from_secs(20), serving)
            .await
            .expect("the connection ended")
            .unwrap();
        assert!(record.is_closed(), "nobody waits for the record any more");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_peer_that_closes_its_socket_while_its_record_is_due_ends_the_connection() {
        a_peer_that_closes_while_its_record_is_due(false).await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_peer_that_shut_down_its_writing_then_closes_while_its_record_is_due_ends_it() {
        // A closed read side wakes no one twice: the close after it is still seen.
        a_peer_that_closes_while_its_record_is_due(true).await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_peer_that_shut_down_its_writing_gets_both_answers() {
        let (serving, mut calls, mut read, mut write) = connect();
        write.write_all(WAIT).await.unwrap();
        write.shutdown().await.unwrap();
        let call = calls.recv().await.unwrap();
        let (record, then) = oneshot::channel();
        let _ = call
            .reply
            .send(Reply::followed_by(error("first"), Some(then)));
        assert!(answer(&mut read).await.contains("first"));
        // Time for a wrong reading of the half-close to end the connection.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _ = record.send(error("second"));
        assert!(answer(&mut read).await.contains("second"));
        assert_eq!(answer(&mut read).await, "");
        serving.await.unwrap();
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_status_is_the_last_request_read_until_its_answer_is_written() {
        let (serving, mut calls, mut read, mut write) = connect();
        write
            .write_all(b"{\"v\":1,\"op\":\"status\"}\n{\"v\":1,\"op\":\"status\"}\n")
            .await
            .unwrap();
        let call = calls.recv().await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(calls.try_recv().is_err(), "the second status was read");
        let _ = call.reply.send(Reply::now(error("first")));
        assert!(answer(&mut read).await.contains("first"));
        let call = calls.recv().await.unwrap();
        let _ = call.reply.send(Reply::now(error("second")));
        assert!(answer(&mut read).await.contains("second"));
        drop(write);
        assert_eq!(answer(&mut read).await, "");
        serving.await.unwrap();
    }

    /// A client that sends requests with large keys and reads no answers makes the server
    /// take about [`PIPELINE_BYTES`] of them, not [`PIPELINE_DEPTH`]; once it reads, every
    /// one is answered.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn the_requests_on_their_way_are_bounded_in_bytes_as_well_as_in_number() {
        const KEY: usize = 100 << 10;
        const SENT: usize = 40;
        let (serving, mut calls, mut read, mut write) = connect();
        let key = "k".repeat(KEY);
        let request =
            format!("{{\"v\":1,\"op\":\"submit\",\"key\":\"{key}\",\"command\":\"true\"}}\n");
        let sending = tokio::spawn(async move {
            for _ in 0..SENT {
                write.write_all(request.as_bytes()).await.unwrap();
            }
            write
        });
        // The event loop's part: each request answered at once, as large as its key.
        let reply = |key: &str| Reply::now(error(key));
        let mut taken = 0;
        while let Ok(Some(call)) = tokio::time::timeout(Duration::from_secs(5), calls.recv()).await
        {
            let _ = call.reply.send(reply(&key));
            taken += 1;
        }
        // The budget's worth (10), and what the socket's buffers and one batch of answers hold.
        assert!(
            (10..20).contains(&taken),
            "{taken} requests of {KEY} bytes taken with no answer read"
        );
        let reading = tokio::spawn(async move {
            for _ in 0..SENT {
                assert!(answer(&mut read).await.starts_with("{"));
            }
            read
        });
        while taken < SENT {
            let call = calls.recv().await.unwrap();
            let _ = call.reply.send(reply(&key));
            taken += 1;
        }
        let mut read = reading.await.unwrap();
        drop(sending.await.unwrap());
        assert_eq!(answer(&mut read).await, "");
        serving.await.unwrap();
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_peer_that_takes_no_answer_for_the_idle_timeout_is_closed() {
        let (serving, mut calls, _read, mut write) = connect();
        write
            .write_all(b"{\"v\":1,\"op\":\"status\"}\n")
            .await
            .unwrap();
        let call = calls.recv().await.unwrap();
        let start = tokio::time::Instant::now();
        // An answer far larger than the socket's buffers, never read.
        let _ = call.reply.send(Reply::now(error(&"x".repeat(4 << 20))));
        tokio::time::timeout(3 * IDLE_TIMEOUT, serving)
            .await
            .expect("the connection was closed")
            .unwrap();
        assert!(start.elapsed() >= IDLE_TIMEOUT, "{:?}", start.elapsed());
        assert!(calls.try_recv().is_err());
    }
}
