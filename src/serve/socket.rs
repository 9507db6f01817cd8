//! Where the service's socket lives and who may use it: a per-user directory only its owner
//! can enter (`$XDG_RUNTIME_DIR/lanes`, else `/tmp/lanes-UID`), the socket itself mode 0600,
//! and each connection's peer credentials (`SO_PEERCRED`) checked against the server's uid.
//! There is no TCP listener.

use std::io;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{DirBuilderExt as _, FileTypeExt as _, MetadataExt as _, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::socket::{getsockopt, send, sockopt::PeerCredentials, MsgFlags};
use nix::unistd::Uid;

/// The socket's file name inside the default directory.
const SOCKET_NAME: &str = "lanes.sock";

/// The socket path when no `--socket` is given: `LANES_SOCKET` when set and not empty, else
/// `$XDG_RUNTIME_DIR/lanes/lanes.sock` when `XDG_RUNTIME_DIR` is an absolute path, else
/// `/tmp/lanes-UID/lanes.sock` (the directory's uid being the effective uid). Nothing is
/// created here.
pub(crate) fn default_path() -> PathBuf {
    from_environment().unwrap_or_else(|| default_dir().join(SOCKET_NAME))
}

/// `LANES_SOCKET`, when set and not empty.
fn from_environment() -> Option<PathBuf> {
    std::env::var_os("LANES_SOCKET")
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
}

fn default_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("lanes"),
        _ => PathBuf::from(format!("/tmp/lanes-{}", Uid::effective())),
    }
}

/// The socket path to serve on: `given`, or the default one, whose directory is created mode
/// 0700 if missing.
///
/// # Errors
/// The default directory cannot be created, or exists and is not a directory owned by this
/// user with no access for others (someone else could have made it to listen in).
pub(crate) fn serve_path(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(path) = given.map(Path::to_owned).or_else(from_environment) {
        return Ok(path);
    }
    let dir = default_dir();
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
        Err(err) => anyhow::bail!(
            "cannot create the socket directory {}: {err}",
            dir.display()
        ),
    }
    check_private_dir(&dir)?;
    Ok(dir.join(SOCKET_NAME))
}

/// Refuses a directory that is a symbolic link, not a directory, owned by another user, or
/// open to group or others.
fn check_private_dir(dir: &Path) -> anyhow::Result<()> {
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|err| anyhow::anyhow!("cannot examine {}: {err}", dir.display()))?;
    if !meta.file_type().is_dir() {
        anyhow::bail!(
            "{} is not a directory: refusing to put the socket there (remove it, or give \
             --socket)",
            dir.display()
        );
    }
    let me = Uid::effective().as_raw();
    if meta.uid() != me {
        anyhow::bail!(
            "{} belongs to uid {}, not to this user (uid {me}): refusing to put the socket \
             there (remove it, or give --socket)",
            dir.display(),
            meta.uid()
        );
    }
    // With its special bits (a sticky 1777 directory is no private one either).
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        anyhow::bail!(
            "{} has mode {mode:03o}: others could reach the socket; refusing (chmod 700 it, or \
             give --socket)",
            dir.display()
        );
    }
    Ok(())
}

/// How long a process accepting connections on an existing socket has to answer a `status`
/// request before it is taken for one that listens but does not answer.
pub(crate) const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);

/// Refuses a `path` a server listens on, or that is no socket: for a second server, before
/// it makes anything ([`bind`] checks again).
///
/// A server is known by its answer: a successful `connect` alone proves nothing, since a
/// listening socket outlives its server in any process that holds a copy of it (a child of a
/// server killed with `kill -9`, between its `clone` and its `exec`), and such a socket takes
/// connections nobody will accept. So a `status` request is sent and an answer line awaited,
/// for at most [`ANSWER_TIMEOUT`]: an answer is a live server, anything else written back a
/// live process of another kind (also when it closed before the request reached it); end of
/// file or a reset with nothing written is a socket left behind (replaced by [`bind`]); silence
/// is refused too.
///
/// # Errors
/// A server already listens there; a process accepts connections there but does not answer
/// within [`ANSWER_TIMEOUT`]; the path exists and is no socket.
pub(crate) fn check_free(path: &Path) -> anyhow::Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        anyhow::bail!(
            "{} exists and is not a socket: refusing to replace it",
            path.display()
        );
    }
    let stream = match connect_within(path, ANSWER_TIMEOUT) {
        Ok(stream) => stream,
        Err(nix::errno::Errno::EAGAIN) => anyhow::bail!(
            "a process listens on {} but takes no connection within {} s (its backlog is \
             full): refusing to replace its socket (stop that process, or give another \
             --socket)",
            path.display(),
            ANSWER_TIMEOUT.as_secs()
        ),
        // Refused (nobody listens), or gone: a socket left behind.
        Err(_) => return Ok(()),
    };
    match probe(&stream) {
        Probe::Answered => anyhow::bail!(
            "a lanes server already listens on {} (stop it with `lanes close`)",
            path.display()
        ),
        Probe::Other => anyhow::bail!(
            "a process listens on {} and answers, but not as a lanes server: refusing to \
             replace its socket (stop that process, or give another --socket)",
            path.display()
        ),
        Probe::Silent => anyhow::bail!(
            "a process listens on {} but does not answer within {} s (no answer to a status \
             request): refusing to replace its socket (stop that process, or give another \
             --socket)",
            path.display(),
            ANSWER_TIMEOUT.as_secs()
        ),
        Probe::Gone => Ok(()),
    }
}

/// Connects to the socket at `path` without blocking for longer than `patience`: a listener
/// whose backlog is full makes a blocking `connect` wait until it accepts, for ever if it never
/// does (unix(7): a non-blocking one fails with EAGAIN instead, tried again every 50 ms).
///
/// # Errors
/// EAGAIN when the backlog stayed full; ECONNREFUSED when nobody listens; another error.
fn connect_within(path: &Path, patience: Duration) -> Result<UnixStream, nix::errno::Errno> {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let address = UnixAddr::new(path)?;
    let deadline = std::time::Instant::now() + patience;
    loop {
        let fd = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            None,
        )?;
        match connect(fd.as_raw_fd(), &address) {
            Ok(()) => {
                let stream = UnixStream::from(fd);
                stream
                    .set_nonblocking(false)
                    .map_err(|_| nix::errno::Errno::EIO)?;
                return Ok(stream);
            }
            Err(nix::errno::Errno::EAGAIN) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(err) => return Err(err),
        }
    }
}

/// What a connection to an existing socket found.
#[derive(Debug, PartialEq, Eq)]
enum Probe {
    /// An answer line of the protocol came: a lanes server listens.
    Answered,
    /// Something else came back: a process that is no lanes server listens.
    Other,
    /// No answer within [`ANSWER_TIMEOUT`].
    Silent,
    /// End of file, a reset or another error: nobody will ever answer.
    Gone,
}

/// Sends a `status` request on `stream` and reads the first bytes of what comes back, for at
/// most [`ANSWER_TIMEOUT`] in all: enough to tell a lanes server's answer from another's.
fn probe(stream: &UnixStream) -> Probe {
    use std::io::Read as _;
    /// How every answer of a lanes server begins: enough to tell one.
    const PREFIX: &[u8] = b"{\"v\":";
    let silent = |err: &io::Error| {
        matches!(
            err.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        )
    };
    if stream.set_read_timeout(Some(ANSWER_TIMEOUT)).is_err()
        || stream.set_write_timeout(Some(ANSWER_TIMEOUT)).is_err()
    {
        return Probe::Gone;
    }
    let deadline = std::time::Instant::now() + ANSWER_TIMEOUT;
    let mut request: &[u8] = b"{\"v\":1,\"op\":\"status\"}\n";
    while !request.is_empty() {
        // MSG_NOSIGNAL: a peer gone already is an error here, not a SIGPIPE.
        match send(stream.as_raw_fd(), request, MsgFlags::MSG_NOSIGNAL) {
            Ok(sent) => request = &request[sent..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(err) if silent(&err.into()) => return Probe::Silent,
            // The peer closed its end: what it wrote before is still to be read (a process
            // that answers at once and closes, before the request reached it).
            Err(_) => break,
        }
    }
    // The answer's first bytes, read within what is left of [`ANSWER_TIMEOUT`] in all: a
    // peer that writes a byte at a time holds the probe no longer.
    let mut answer = Vec::new();
    let mut buffer = [0u8; 64];
    let read = loop {
        // Enough to tell: a whole prefix, a line, or bytes no lanes answer begins with.
        let undecided =
            answer.is_empty() || answer.len() < PREFIX.len() && PREFIX.starts_with(&answer);
        if !undecided {
            break Ok(());
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            break Err(io::Error::from(io::ErrorKind::TimedOut));
        }
        match (&*stream).read(&mut buffer) {
            Ok(0) => break Ok(()),
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => break Err(err),
        }
    };
    if !answer.is_empty() {
        // Whatever it wrote, whole or not: a process answers there.
        let lanes = if answer.len() >= PREFIX.len() {
            answer.starts_with(PREFIX)
        } else {
            PREFIX.starts_with(&answer)
        };
        return if lanes { Probe::Answered } else { Probe::Other };
    }
    match read {
        // End of file with nothing written: the peer is gone.
        Ok(()) => Probe::Gone,
        Err(err) if silent(&err) => Probe::Silent,
        Err(_) => Probe::Gone,
    }
}

/// The socket file of this server, removed when dropped: when the server ends, and when it
/// fails to start after binding.
pub(crate) struct SocketFile(pub PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Checks, before the server makes any file, that `path` is short enough for a socket (at
/// most 107 bytes on Linux, `unix(7)`); whether its directory takes a new file is checked as
/// for every output ([`crate::run`]).
///
/// # Errors
/// The path is too long; the message names it.
pub(crate) fn check_length(path: &Path) -> anyhow::Result<()> {
    if nix::sys::socket::UnixAddr::new(path).is_err() {
        anyhow::bail!(
            "cannot listen on {}: a socket's path may be at most 107 bytes long (unix(7)); give \
             a shorter --socket",
            path.display()
        );
    }
    Ok(())
}

/// Binds the socket at `path`, mode 0600 from the start (the umask is narrowed around the
/// bind). A socket file left by a server that is gone (nothing answers on it, see
/// [`check_free`]) is replaced.
///
/// # Errors
/// A server already listens there; the path exists and is no socket; the bind fails.
pub(crate) fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    if std::fs::symlink_metadata(path).is_ok() {
        check_free(path)?;
        std::fs::remove_file(path).map_err(|err| {
            anyhow::anyhow!("cannot remove the stale socket {}: {err}", path.display())
        })?;
    }
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener =
        bound.map_err(|err| anyhow::anyhow!("cannot listen on {}: {err}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|err| anyhow::anyhow!("cannot make {} mode 0600: {err}", path.display()))?;
    Ok(listener)
}

/// Who is at the other end of a connected Unix socket, as of its `connect` (`SO_PEERCRED`,
/// unix(7)).
pub(crate) struct Peer {
    /// The peer's effective uid.
    pub(crate) uid: u32,
    /// The peer's pid, when this PID namespace can name it (the kernel says 0 otherwise).
    pub(crate) pid: Option<i32>,
}

impl Peer {
    /// The credentials of `stream`'s peer.
    ///
    /// # Errors
    /// `getsockopt`'s, when they cannot be read.
    pub(crate) fn of(stream: &impl std::os::fd::AsFd) -> nix::Result<Self> {
        let credentials = getsockopt(stream, PeerCredentials)?;
        Ok(Peer {
            uid: credentials.uid(),
            pid: (credentials.pid() > 0).then_some(credentials.pid()),
        })
    }

    /// Whether the peer runs as this process's effective uid: a server serves its own user
    /// only, and a client talks to its own user's server only.
    pub(crate) fn is_this_user(&self) -> bool {
        self.uid == Uid::effective().as_raw()
    }
}

/// Whether the peer of `stream` runs as this process's effective uid; the message for the
/// refusal when not. Returns the peer's pid, when this PID namespace can name it.
///
/// # Errors
/// The peer's uid, when another, as the `error` answer's text; or why it cannot be known.
pub(crate) fn check_peer(stream: &impl std::os::fd::AsFd) -> Result<Option<i32>, String> {
    let peer = Peer::of(stream)
        .map_err(|err| format!("cannot read the peer's credentials (SO_PEERCRED): {err}"))?;
    if !peer.is_this_user() {
        return Err(format!(
            "permission denied: this lanes server belongs to uid {}; uid {} may not use it",
            Uid::effective().as_raw(),
            peer.uid
        ));
    }
    Ok(peer.pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_whose_backlog_is_full_is_refused_within_the_patience_not_waited_for() {
        use nix::sys::socket::{
            bind, connect, listen, socket, AddressFamily, Backlog, SockFlag, SockType, UnixAddr,
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("full.sock");
        let address = UnixAddr::new(&path).unwrap();
        let listener = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::empty(),
            None,
        )
        .unwrap();
        bind(listener.as_raw_fd(), &address).unwrap();
        listen(&listener, Backlog::new(0).unwrap()).unwrap();
        // Never accepted: fill its backlog.
        let mut queued = Vec::new();
        loop {
            let fd = socket(
                AddressFamily::Unix,
                SockType::Stream,
                SockFlag::SOCK_NONBLOCK,
                None,
            )
            .unwrap();
            match connect(fd.as_raw_fd(), &address) {
                Ok(()) => queued.push(fd),
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(err) => panic!("{err}"),
            }
            assert!(queued.len() < 64, "the backlog never filled");
        }
        let started = std::time::Instant::now();
        let err = check_free(&path).unwrap_err().to_string();
        assert!(err.contains("takes no connection"), "{err}");
        assert!(started.elapsed() < ANSWER_TIMEOUT + Duration::from_secs(2));
        assert!(path.exists(), "its socket is left as it was");
    }

    #[test]
    fn a_peer_that_writes_a_byte_at_a_time_holds_the_probe_no_longer_than_its_patience() {
        use std::io::Write as _;
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let writer = std::thread::spawn(move || {
            // A byte every half second for 10 s, never a newline.
            for _ in 0..20 {
                if theirs.write_all(b"x").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        let started = std::time::Instant::now();
        assert_eq!(probe(&ours), Probe::Other);
        assert!(started.elapsed() <= ANSWER_TIMEOUT + Duration::from_millis(500));
        drop(ours);
        writer.join().unwrap();
    }

    #[test]
    fn a_process_that_answered_and_closed_before_the_request_came_is_no_socket_left_behind() {
        use std::io::Write as _;
        // The peer writes its own answer and closes before reading anything: sending the
        // request fails (EPIPE), and its answer is still there to be read.
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        theirs.write_all(b"HTTP/1.0 400 Bad\r\n\r\n").unwrap();
        drop(theirs);
        assert_eq!(probe(&ours), Probe::Other);
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        theirs.write_all(b"{\"v\":1,\"answer\":\"status\"").unwrap();
        drop(theirs);
        assert_eq!(probe(&ours), Probe::Answered);
        // Nothing written before the close: nobody answers there.
        let (ours, theirs) = UnixStream::pair().unwrap();
        drop(theirs);
        assert_eq!(probe(&ours), Probe::Gone);
    }
}
