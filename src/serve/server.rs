//! The listening side of `lanes serve`: accepts connections on the socket, checks each peer's
//! uid, reads request lines in bounded memory and hands each request to the event loop as a
//! [`Call`], writing back the answers in order. It decides nothing: the driver answers.

use tokio::io::{
    AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader, BufWriter,
};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};

use super::protocol::{answer_line, parse_request, Answer, Request, MAX_REQUEST_BYTES};

/// One request on its way to the event loop, with where its answer goes.
pub(crate) struct Call {
    /// What was asked.
    pub request: Request,
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
}

/// How many calls may wait for the event loop before connections wait to hand theirs over.
const CALL_DEPTH: usize = 1024;

/// The socket being served, and the calls coming from it.
pub(crate) struct Listening {
    /// The calls, in the order their requests were read per connection.
    pub calls: mpsc::Receiver<Call>,
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
    let most = max_connections();
    let open = std::sync::Arc::new(tokio::sync::Semaphore::new(most));
    tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => match std::sync::Arc::clone(&open).try_acquire_owned() {
                    Ok(permit) => {
                        let calls = tx.clone();
                        tokio::spawn(async move {
                            serve_connection(stream, calls).await;
                            drop(permit);
                        });
                    }
                    Err(_) => {
                        tokio::spawn(refuse(stream, most));
                    }
                },
                // Out of descriptors and the like: the next connection may fare better.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
            }
        }
    });
    Ok(Listening { calls })
}

/// The most connections served at once: 256, or a quarter of the descriptors this process may
/// open when that is less, so that idle clients can never take the descriptors the jobs and
/// the journal need.
fn max_connections() -> usize {
    let soft = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft);
    usize::try_from(soft / 4).unwrap_or(256).clamp(1, 256)
}

/// Answers a connection over [`max_connections`] with an error, then closes it.
async fn refuse(stream: UnixStream, most: usize) {
    let error = format!(
        "the server serves {most} connections already (the most it serves at once); try again \
         once one has closed"
    );
    let (_, write) = stream.into_split();
    say_error(BufWriter::new(write), error).await;
}

/// Writes an `error` answer on a connection that is then closed (a refused peer or one too
/// many connections): a failure to write changes nothing.
async fn say_error(mut writer: BufWriter<tokio::net::unix::OwnedWriteHalf>, error: String) {
    let _ = writer
        .write_all(&answer_line(&Answer::Error { error }))
        .await;
    let _ = writer.flush().await;
}

/// How long a connection may go without sending a whole request before the server reads no
/// more from it: the answers still pending are written, then it is closed.
const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// How many requests of one connection may be on their way to the event loop before its
/// reading waits for their answers: a client may send many before reading (pipelining).
const PIPELINE_DEPTH: usize = 256;

/// An answer on its way to a connection: ready, or still to come from the event loop (and,
/// for a request answered twice, who waits until both answers are written).
enum Pending {
    Now(Reply),
    Later(oneshot::Receiver<Reply>, Option<oneshot::Sender<()>>),
}

/// One client: its peer checked, then request after request until it hangs up, each answered
/// in order. A malformed request gets an `error` answer and the next line is read; an
/// oversized one gets an `error` answer and the connection is closed.
async fn serve_connection(stream: UnixStream, calls: mpsc::Sender<Call>) {
    let (read, write) = stream.into_split();
    let writer = BufWriter::new(write);
    if let Err(error) = super::socket::check_peer(&read.as_ref()) {
        say_error(writer, error).await;
        return;
    }
    let (pending_tx, pending_rx) = mpsc::channel(PIPELINE_DEPTH);
    let writing = tokio::spawn(write_answers(writer, pending_rx));
    let mut reader = BufReader::new(read);
    let mut line = Vec::new();
    loop {
        line.clear();
        let limit = (MAX_REQUEST_BYTES + 1) as u64;
        let mut bounded = (&mut reader).take(limit);
        let read = bounded.read_until(b'\n', &mut line);
        match tokio::time::timeout(IDLE_TIMEOUT, read).await {
            // Idle that long: closed, so that forgotten clients hold no descriptor.
            Err(_) | Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(_)) => {}
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        } else if line.len() > MAX_REQUEST_BYTES {
            let error = format!(
                "the request is longer than {MAX_REQUEST_BYTES} bytes; the connection is closed"
            );
            let _ = pending_tx
                .send(Pending::Now(Reply {
                    answer: Answer::Error { error },
                    then: None,
                }))
                .await;
            break;
        }
        let pending = match parse_request(&line) {
            Err(error) => Pending::Now(Reply {
                answer: Answer::Error { error },
                then: None,
            }),
            Ok(request) => {
                // A request whose answer has a second part (`submit` with `wait`, `drain`,
                // `close`) is the last one read until that part is written: the requests
                // after it are answered as of their turn, not as of their arrival.
                let answered_twice = matches!(
                    request,
                    Request::Submit { wait: true, .. } | Request::Drain {} | Request::Close {}
                );
                let (tx, rx) = oneshot::channel();
                match calls.send(Call { request, reply: tx }).await {
                    Ok(()) if answered_twice => {
                        let (done_tx, done_rx) = oneshot::channel();
                        if pending_tx
                            .send(Pending::Later(rx, Some(done_tx)))
                            .await
                            .is_err()
                            || done_rx.await.is_err()
                        {
                            break;
                        }
                        continue;
                    }
                    Ok(()) => Pending::Later(rx, None),
                    Err(_) => Pending::Now(ended()),
                }
            }
        };
        if pending_tx.send(pending).await.is_err() {
            break;
        }
    }
    drop(pending_tx);
    let _ = writing.await;
}

/// Writes the answers of one connection in the order of its requests; a batch of answers
/// ready together goes out in one write.
async fn write_answers(
    mut writer: BufWriter<tokio::net::unix::OwnedWriteHalf>,
    mut pending: mpsc::Receiver<Pending>,
) {
    while let Some(next) = pending.recv().await {
        let (reply, done) = match next {
            Pending::Now(reply) => (reply, None),
            Pending::Later(rx, done) => (rx.await.unwrap_or_else(|_| ended()), done),
        };
        if writer.write_all(&answer_line(&reply.answer)).await.is_err() {
            return;
        }
        if let Some(then) = reply.then {
            if writer.flush().await.is_err() {
                return;
            }
            match then.await {
                Ok(answer) => {
                    if writer.write_all(&answer_line(&answer)).await.is_err() {
                        return;
                    }
                    if writer.flush().await.is_err() {
                        return;
                    }
                    if let Some(done) = done {
                        let _ = done.send(());
                    }
                    continue;
                }
                // Held until the server ends (`drain`, `close`): the connection closes.
                Err(_) => {
                    let _ = writer.flush().await;
                    return;
                }
            }
        }
        if pending.is_empty() && writer.flush().await.is_err() {
            return;
        }
        // Answered once only (refused, closed): the reading goes on.
        if let Some(done) = done {
            let _ = done.send(());
        }
    }
    let _ = writer.flush().await;
}

/// The answer when the event loop is gone: the server is ending.
fn ended() -> Reply {
    Reply {
        answer: Answer::Closed {
            why: "ending".into(),
        },
        then: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Reads one answer line from `read`.
    async fn answer(read: &mut BufReader<tokio::net::unix::OwnedReadHalf>) -> String {
        let mut line = String::new();
        read.read_line(&mut line).await.unwrap();
        line
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn an_idle_connection_is_read_no_more_but_its_pending_answers_are_written() {
        let (client, server) = UnixStream::pair().unwrap();
        let (tx, mut calls) = mpsc::channel(4);
        let serving = tokio::spawn(serve_connection(server, tx));
        let (read, mut write) = client.into_split();
        let mut read = BufReader::new(read);
        let status = b"{\"v\":1,\"op\":\"status\"}\n";
        // Just short of the limit, a request is still read and answered.
        tokio::time::sleep(IDLE_TIMEOUT - Duration::from_secs(1)).await;
        write.write_all(status).await.unwrap();
        let call = calls.recv().await.unwrap();
        let reply = |error: &str| Reply {
            answer: Answer::Error {
                error: error.to_owned(),
            },
            then: None,
        };
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
}
