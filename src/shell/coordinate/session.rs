//! One database session of `--coordinate`: a connection over a socket lanes opens itself, so
//! that a duplicate of the socket can be handed to a job (descriptor 3). The session, and the
//! locks it holds, then lives for as long as any process holds the socket: lanes killed with
//! SIGKILL leaves the key held by the job that runs on.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio_postgres::{Client, NoTls};

use super::params::{Params, Target};
use crate::shell::lock_dir::Acquired;

/// What a session holds now: the key and the grant's number, told when the session is lost.
pub(crate) type Holding = Arc<Mutex<Option<(Arc<str>, u64)>>>;

/// An open session.
pub(crate) struct Session {
    /// The client; queries take `&self`, so the heartbeat shares it.
    pub(crate) client: Arc<Client>,
    /// A duplicate of the connection's socket (close-on-exec, numbered 10 or more).
    pub(crate) socket: OwnedFd,
    /// The server process serving this session (`pg_backend_pid()`).
    pub(crate) backend_pid: i32,
    /// The key it holds, if any: reported as lost when the connection ends.
    pub(crate) holding: Holding,
    /// A message for each notification the session receives (`--shared-max-concurrent`: a
    /// shared slot was let go).
    pub(crate) notified: mpsc::UnboundedReceiver<()>,
    /// Whether the session listens for them yet.
    pub(crate) listening: bool,
    /// Its prepared statements, once it is registered.
    pub(crate) prepared: Option<super::statements::Statements>,
}

/// `client_connection_check_interval` of every session: how often the server looks whether the
/// client of a session that waits for a lock is still there.
pub(crate) const CONNECTION_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Why a connection could not be made; never carries a password.
pub(crate) type ConnectError = String;

/// Opens a session to `params` and starts the task that drives its connection: when the
/// connection ends while the session holds a key, [`Acquired::Lost`] goes to `report`.
///
/// # Errors
/// The server cannot be reached, refuses the login, or the first query fails.
pub(crate) async fn connect(
    params: &Params,
    report: mpsc::UnboundedSender<Acquired>,
) -> Result<Session, ConnectError> {
    let holding: Holding = Arc::new(Mutex::new(None));
    let (notify, notified) = mpsc::unbounded_channel();
    let (client, socket) = match &params.target {
        Target::Unix(path) => {
            let stream = tokio::net::UnixStream::connect(path)
                .await
                .map_err(|err| format!("cannot connect to {params}: {err}"))?;
            let socket = dup(stream.as_fd())?;
            let (client, connection) = params
                .config
                .connect_raw(stream, NoTls)
                .await
                .map_err(|err| format!("cannot log in to {params}: {}", error_text(&err)))?;
            drive(connection, Arc::clone(&holding), report, notify);
            (client, socket)
        }
        Target::Tcp(host, port) => {
            let stream = tokio::net::TcpStream::connect((host.as_str(), *port))
                .await
                .map_err(|err| format!("cannot connect to {params}: {err}"))?;
            let _ = stream.set_nodelay(true);
            let socket = dup(stream.as_fd())?;
            let (client, connection) = params
                .config
                .connect_raw(stream, NoTls)
                .await
                .map_err(|err| format!("cannot log in to {params}: {}", error_text(&err)))?;
            drive(connection, Arc::clone(&holding), report, notify);
            (client, socket)
        }
    };
    let row = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .map_err(|err| format!("{params}: {}", error_text(&err)))?;
    // A server process blocked in `pg_advisory_lock` does not notice that its client is gone
    // (killed, or ended while it waited) unless told to look: PostgreSQL 14 and later then
    // end the session within the interval, and the waiter leaves the lock's queue. A session
    // that holds a key is idle between heartbeats, and the records' session between records:
    // a role's or database's `idle_session_timeout` (14 and later too) would end them, and
    // lose every key held. Older servers know neither setting; the error is harmless.
    let _ = client
        .batch_execute(&format!(
            "SET client_connection_check_interval = {}; SET idle_session_timeout = 0",
            CONNECTION_CHECK.as_millis()
        ))
        .await;
    Ok(Session {
        client: Arc::new(client),
        socket,
        backend_pid: row.get(0),
        holding,
        notified,
        listening: false,
        prepared: None,
    })
}

fn dup(fd: std::os::fd::BorrowedFd<'_>) -> Result<OwnedFd, ConnectError> {
    fd.try_clone_to_owned()
        .map(crate::shell::lock_dir::above_placements)
        .map_err(|err| format!("cannot duplicate the connection's socket: {err}"))
}

/// Drives the connection until it ends, passing on notifications; then, when the session held
/// a key, says so.
fn drive<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    holding: Holding,
    report: mpsc::UnboundedSender<Acquired>,
    notify: mpsc::UnboundedSender<()>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let why = loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(tokio_postgres::AsyncMessage::Notification(_))) => {
                    let _ = notify.send(());
                }
                Some(Ok(_)) => {}
                Some(Err(err)) => break format!("connection lost: {}", error_text(&err)),
                None => break "the server closed the connection".to_owned(),
            }
        };
        let held = holding.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((key, grant)) = held {
            let _ = report.send(Acquired::Lost { key, grant, why });
        }
    });
}

/// A client error with what the server said (tokio-postgres's own text is only "db error"):
/// its severity and message. The server never repeats a password.
pub(crate) fn error_text(err: &tokio_postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => format!("{} {}: {}", db.severity(), db.code().code(), db.message()),
        None => {
            let mut text = err.to_string();
            let mut source = std::error::Error::source(err);
            while let Some(cause) = source {
                text.push_str(": ");
                text.push_str(&cause.to_string());
                source = cause.source();
            }
            text
        }
    }
}
