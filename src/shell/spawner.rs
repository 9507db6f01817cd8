//! Spawning off the event loop: a few threads that start prepared jobs ([`Order`]) and hand
//! back what came of each.
//!
//! Starting a process (`clone3` with `CLONE_VFORK`, or `posix_spawn(3)`) holds the calling
//! thread until the child has called `execve`: one thread can never have two spawns in
//! progress, and while it spawns it does nothing else. Spawning here instead lets the event
//! loop read pipes, reap and write records while children start, and lets several children
//! start at once where the machine has the CPUs for it. Each start handed over costs two
//! wake-ups between threads, so on one CPU, or on two running no more jobs at once than that,
//! the event loop starts jobs itself, and hands a start to the one thread only while other
//! work waits behind it (`LANES_SPAWN_THREADS`, see `crate::config::spawn_threads`).
//!
//! What the single thread guaranteed still holds:
//! - exact reaping: a child that exits before its spawning thread knows its pid is still
//!   attributed to it (see [`Reaper`]);
//! - a key's jobs start in order: its next job is taken only after the previous one ended;
//! - stops: an order sent to a job whose spawn is in flight waits in its supervisor's channel
//!   and is carried out as soon as the job has started; Ctrl-Z waits for the starts under way,
//!   so that their jobs stop with the rest;
//! - no descriptor leaks into a job: every descriptor lanes opens is close-on-exec, and a
//!   spawn only places its own job's pipes and locks;
//! - these threads block every signal, so that handlers run on the event loop's thread.

use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use super::reap::Reaper;
use super::spawn::{Order, Pipes, SpawnError};
use crate::core::{ExitFacts, Seq};

/// What came of one spawn: the pid started and its exit channel, or why nothing started.
pub(crate) struct SpawnOutcome {
    /// The run's first job.
    pub(crate) seq: Seq,
    pub(crate) result: Result<Started, SpawnError>,
    /// When the spawn began: the job's start, which its record and its timeout count from,
    /// however long the outcome then waits for the event loop (a round of starts, a busy
    /// loop). Taken just before the process is made, so that nothing the job does comes
    /// before it (its `execve` is after it; a busy machine may run the job a while before
    /// the spawning thread runs again).
    pub(crate) at: std::time::Instant,
}

/// A started process: its pid, the channel of its exit facts and its pipes' read ends.
pub(crate) type Started = (i32, oneshot::Receiver<ExitFacts>, Pipes);

/// The spawning threads. Dropping it lets them finish the orders sent and end.
pub(crate) struct Spawner {
    orders: std_mpsc::Sender<(Seq, Order)>,
}

/// Stack of a spawning thread: it only builds a job's argument and environment vectors.
const STACK: usize = 256 * 1024;

impl Spawner {
    /// Starts `threads` (at least one) spawning threads; each outcome goes to `outcomes`.
    ///
    /// # Errors
    /// When not even one thread could be started.
    pub(crate) fn new(
        threads: usize,
        reaper: Reaper,
        outcomes: mpsc::UnboundedSender<SpawnOutcome>,
    ) -> std::io::Result<Self> {
        let (orders, queue) = std_mpsc::channel::<(Seq, Order)>();
        let queue = Arc::new(Mutex::new(queue));
        let mut started = 0;
        let mut last_error = None;
        for n in 0..threads.max(1) {
            let queue = Arc::clone(&queue);
            let reaper = reaper.clone();
            let outcomes = outcomes.clone();
            let thread = std::thread::Builder::new()
                .name(format!("spawn-{n}"))
                .stack_size(STACK)
                .spawn(move || serve(&queue, &reaper, &outcomes));
            match thread {
                Ok(_) => started += 1,
                Err(err) => last_error = Some(err),
            }
        }
        match (started, last_error) {
            (0, Some(err)) => Err(err),
            _ => Ok(Spawner { orders }),
        }
    }

    /// Hands `order`, the run `seq`'s, to the next free spawning thread.
    pub(crate) fn submit(&self, seq: Seq, order: Order) {
        // The threads live as long as this sender: the send cannot fail.
        let _ = self.orders.send((seq, order));
    }
}

/// A spawning thread's loop: takes orders until the [`Spawner`] is dropped.
fn serve(
    queue: &Mutex<std_mpsc::Receiver<(Seq, Order)>>,
    reaper: &Reaper,
    outcomes: &mpsc::UnboundedSender<SpawnOutcome>,
) {
    block_signals();
    loop {
        let next = {
            let queue = queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            queue.recv()
        };
        let Ok((seq, order)) = next else {
            return;
        };
        let _ = outcomes.send(start(seq, order, reaper));
    }
}

/// Starts `order`'s process, run `seq`'s, announced to `reaper` (see [`Reaper`]): what came
/// of it, with the moment the spawn began.
pub(crate) fn start(seq: Seq, order: Order, reaper: &Reaper) -> SpawnOutcome {
    let at = std::time::Instant::now();
    let ticket = reaper.spawn_begins();
    let result = match order.start() {
        Ok((pid, pipes)) => Ok((pid, reaper.spawn_ended(ticket, pid), pipes)),
        Err(err) => {
            reaper.spawn_failed(ticket);
            Err(err)
        }
    };
    SpawnOutcome { seq, result, at }
}

/// Blocks every signal in the calling thread: handlers then run on the event loop's thread,
/// and no system call here is interrupted.
fn block_signals() {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
    let _ = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), None);
}
