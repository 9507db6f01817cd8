//! Files of records that lanes writes while jobs run (the report, the events file): each is
//! written by a thread of its own, fed through an unbounded queue, so that a reader that reads
//! slowly or not at all (a FIFO, a pipe into a dashboard) holds back the file, never
//! supervision: timeouts, stop signals and the times in the records are the jobs' own. What
//! waits in the queue is a few hundred bytes per record; the run's end waits for it under the
//! patience rules of lanes' other output (`crate::shell::signal::until_stopped`).
//!
//! A write that fails is said once on stderr, naming the file and the error; a failure other
//! than a reader gone (EPIPE) — a full disk (ENOSPC), a file-size limit (EFBIG), EIO — marks
//! the file [`Spool::lost`], which makes the exit status 1 (the report is incomplete). Any
//! failure, EPIPE included, marks it [`Spool::failed`]: what is queued after it is not written.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// What the writer thread is asked to do.
enum Message {
    /// Write these bytes with one `write_all`.
    Write(Vec<u8>),
    /// Answer once everything sent before is written (or given up).
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// Where a spool's bytes go: its writer thread, or, when no thread could be started, the
/// file itself, written on the caller's thread.
enum Destination {
    Thread(mpsc::Sender<Message>),
    Direct,
}

/// One file of records written by its own thread (see the module's documentation).
pub(crate) struct Spool {
    destination: Destination,
    writer: Arc<Mutex<Writer>>,
    lost: Arc<AtomicBool>,
    failed: Arc<AtomicBool>,
}

/// The file and what is known of it: its name for messages, and whether it failed.
struct Writer {
    /// `the report report.jsonl`: how messages name the file.
    name: String,
    file: Option<File>,
    lost: Arc<AtomicBool>,
    failed: Arc<AtomicBool>,
}

impl Writer {
    fn write(&mut self, bytes: &[u8]) {
        let Some(file) = &mut self.file else {
            return;
        };
        if let Err(err) = file.write_all(bytes) {
            self.file = None;
            self.failed.store(true, Ordering::Relaxed);
            let reader_gone = err.kind() == std::io::ErrorKind::BrokenPipe;
            // A reader that went away (`--report /dev/stdout | head`) decides nothing
            // (SPEC §4); a file that could not be stored (a full disk) does.
            if !reader_gone {
                self.lost.store(true, Ordering::Relaxed);
            }
            eprintln!(
                "lanes: cannot write {}: {err}; it is incomplete, the run goes on",
                self.name
            );
        }
    }
}

impl Spool {
    /// A spool writing to `file`, called `name` in messages (`"the report r.jsonl"`).
    pub(crate) fn new(name: String, file: File) -> Self {
        let lost = Arc::new(AtomicBool::new(false));
        let failed = Arc::new(AtomicBool::new(false));
        let writer = Arc::new(Mutex::new(Writer {
            name,
            file: Some(file),
            lost: Arc::clone(&lost),
            failed: Arc::clone(&failed),
        }));
        let (tx, rx) = mpsc::channel::<Message>();
        let thread = {
            let writer = Arc::clone(&writer);
            std::thread::Builder::new()
                .name("lanes-records".to_owned())
                .spawn(move || {
                    for message in rx {
                        match message {
                            Message::Write(bytes) => lock(&writer).write(&bytes),
                            Message::Flush(done) => {
                                let _ = done.send(());
                            }
                        }
                    }
                })
        };
        // Without a thread (out of processes: `ulimit -u`), the file is written on the
        // caller's thread, as it comes: a slow reader then slows the run.
        let destination = match thread {
            Ok(_detached) => Destination::Thread(tx),
            Err(_) => Destination::Direct,
        };
        Spool {
            destination,
            writer,
            lost,
            failed,
        }
    }

    /// Queues `bytes` to be written with one `write_all`; never waits for the reader.
    pub(crate) fn write(&self, bytes: Vec<u8>) {
        match &self.destination {
            Destination::Thread(tx) => {
                let _ = tx.send(Message::Write(bytes));
            }
            Destination::Direct => lock(&self.writer).write(&bytes),
        }
    }

    /// Whether a write failed for another reason than a reader gone (EPIPE): the file is
    /// incomplete.
    pub(crate) fn lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }

    /// Whether a write failed for any reason, a reader gone (EPIPE) included: the bytes
    /// queued since were not written, nor will be. A record is in the file only while this is
    /// false (after [`Spool::written`]).
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// A ticket that is answered (or dropped) once everything queued so far has been
    /// written, or has failed; `None` when everything queued is written already (no writer
    /// thread: written as it comes).
    pub(crate) fn flush_ticket(&self) -> Option<tokio::sync::oneshot::Receiver<()>> {
        match &self.destination {
            Destination::Thread(tx) => {
                let (done, answer) = tokio::sync::oneshot::channel();
                tx.send(Message::Flush(done)).ok().map(|()| answer)
            }
            Destination::Direct => None,
        }
    }

    /// Resolves once everything queued so far has been written (or has failed).
    pub(crate) fn written(&self) -> impl std::future::Future<Output = ()> + use<> {
        let answer = match &self.destination {
            Destination::Thread(tx) => {
                let (done, answer) = tokio::sync::oneshot::channel();
                tx.send(Message::Flush(done)).ok().map(|()| answer)
            }
            Destination::Direct => None,
        };
        async move {
            if let Some(answer) = answer {
                let _ = answer.await;
            }
        }
    }
}

/// The writer, whoever held it last.
fn lock(writer: &Mutex<Writer>) -> std::sync::MutexGuard<'_, Writer> {
    writer
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::Spool;

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn everything_queued_is_written_in_order_before_written_resolves() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.jsonl");
        let spool = Spool::new("the report".into(), std::fs::File::create(&path).unwrap());
        for i in 0..100 {
            spool.write(format!("{i}\n").into_bytes());
        }
        block_on(spool.written());
        let expected: String = (0..100).map(|i| format!("{i}\n")).collect();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), expected);
        assert!(!spool.lost());
        assert!(!spool.failed());
    }

    #[test]
    fn a_full_disk_marks_the_file_lost() {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let spool = Spool::new("the report /dev/full".into(), full);
        spool.write(b"x\n".to_vec());
        block_on(spool.written());
        assert!(spool.lost());
        assert!(spool.failed());
    }

    #[test]
    fn a_reader_gone_fails_the_file_without_losing_it() {
        let (read, write) = nix::unistd::pipe().unwrap();
        drop(read);
        let spool = Spool::new("the report".into(), std::fs::File::from(write));
        spool.write(b"x\n".to_vec());
        block_on(spool.written());
        assert!(!spool.lost(), "EPIPE decides nothing about the exit status");
        assert!(spool.failed(), "but the record is not in the file");
    }
}
