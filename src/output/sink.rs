//! Writer threads for lanes' stdout, stderr and the report: each takes whole buffers over a
//! bounded channel and writes each with one `write_all`, so a slow reader applies backpressure
//! to the jobs instead of growing memory, and a closed pipe (EPIPE) stops the writing, never
//! the run.

use std::io::Write;
use std::thread::JoinHandle;

use tokio::sync::mpsc;

/// How many buffers may wait for a writer thread before senders wait.
const DEPTH: usize = 64;

/// A cloneable handle that sends buffers to a [`Sink`].
pub type SinkTx = mpsc::Sender<Vec<u8>>;

/// A writer thread that owns one destination.
pub struct Sink {
    tx: Option<SinkTx>,
    thread: Option<JoinHandle<()>>,
}

impl Sink {
    /// Starts a writer thread for `destination`, called `name` in messages (`"stdout"`). With
    /// `display`, each buffer is written while the live display is suspended (cleared, then
    /// drawn again below the new text).
    pub fn spawn(
        name: &'static str,
        mut destination: Box<dyn Write + Send>,
        display: Option<indicatif::MultiProgress>,
    ) -> Self {
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(DEPTH);
        let thread = std::thread::Builder::new()
            .name(format!("lanes-{name}"))
            .spawn(move || {
                let mut closed = false;
                while let Some(buffer) = rx.blocking_recv() {
                    if closed {
                        continue;
                    }
                    let written = match &display {
                        Some(display) => display.suspend(|| destination.write_all(&buffer)),
                        None => destination.write_all(&buffer),
                    };
                    if let Err(err) = written {
                        closed = true;
                        if err.kind() == std::io::ErrorKind::BrokenPipe {
                            eprintln!("lanes: {name} closed (broken pipe); output for it is dropped, the jobs go on");
                        } else {
                            eprintln!("lanes: cannot write to {name}: {err}; output for it is dropped, the jobs go on");
                        }
                    }
                }
                if !closed {
                    let _ = destination.flush();
                }
            })
            .expect("a writer thread can be started");
        Sink {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    /// A handle for sending buffers.
    pub fn sender(&self) -> SinkTx {
        self.tx.clone().expect("the sink is open until closed")
    }

    /// Sends `buffer` from outside the runtime (blocking while the queue is full).
    pub fn write_now(&self, buffer: Vec<u8>) {
        if let Some(tx) = &self.tx {
            let _ = tx.blocking_send(buffer);
        }
    }

    /// Closes the sink and waits until everything sent has been written. Other senders must be
    /// dropped first, or this waits for them.
    pub fn close(mut self) {
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// lanes' own stdout as a destination: a duplicate of descriptor 1 written without buffering
/// (one `write` per buffer).
pub fn stdout_file() -> std::io::Result<std::fs::File> {
    use std::os::fd::AsFd;
    Ok(std::fs::File::from(
        std::io::stdout().as_fd().try_clone_to_owned()?,
    ))
}

/// lanes' own stderr as a destination, like [`stdout_file`].
pub fn stderr_file() -> std::io::Result<std::fs::File> {
    use std::os::fd::AsFd;
    Ok(std::fs::File::from(
        std::io::stderr().as_fd().try_clone_to_owned()?,
    ))
}
