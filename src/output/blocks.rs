//! Grouped output's blocks and their order: each job's whole output is written as one block
//! when its record is known, at once or (`--keep-order`) in input order. The ordering is a
//! plain value; the writing happens in one task, so blocks never interleave.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, Notify};

use super::capture::{Capture, SharedSpill};
use super::sink::SinkTx;

/// One job's (or batch's) captured output with its header line.
#[derive(Debug)]
pub(crate) struct Block {
    /// `==> [key] seq 3: failed (exit_status) <==\n`
    pub header: String,
    pub stdout: Capture,
    pub stderr: Capture,
}

impl Block {
    /// Bytes of its output held in memory.
    pub(crate) fn in_memory(&self) -> usize {
        self.stdout.in_memory() + self.stderr.in_memory()
    }

    /// Writes the header and the captured stdout to `stdout`, the captured stderr to `stderr`.
    /// Returns false when part of the output could not be read back from its spill file (it
    /// is then said in its place).
    pub(crate) async fn write(self, stdout: &SinkTx, stderr: &SinkTx) -> bool {
        let _ = stdout.send(self.header.into_bytes()).await;
        let mut whole = true;
        for (capture, sink) in [(self.stdout, stdout), (self.stderr, stderr)] {
            if let Err(err) = capture.replay(sink).await {
                whole = false;
                let message = format!(
                    "lanes: cannot read back captured output from its temporary file: {err}; \
                     the output is incomplete\n"
                );
                let _ = sink.send(message.into_bytes()).await;
            }
        }
        whole
    }
}

/// The line before a grouped block: `==> [key] seq 3: failed (exit_status) <==`.
/// A try of a job that has more than one (`--retries`) is named, and one that goes again is
/// said so: `==> [key] seq 3: failed (exit_status), try 1, retried <==`, then `==> [key] seq
/// 3: succeeded, try 2 <==`; a job's first and only try is not.
pub(crate) fn header(
    key: &str,
    seq: u64,
    outcome: crate::core::Outcome,
    attempt: u32,
    retried: bool,
) -> String {
    let prefix = super::framing::prefix_for(key, false);
    let key = String::from_utf8_lossy(&prefix);
    let reason = outcome
        .reason()
        .map_or_else(String::new, |reason| format!(" ({reason})"));
    let attempt = match (attempt, retried) {
        (_, true) => format!(", try {attempt}, retried"),
        (1, false) => String::new(),
        (_, false) => format!(", try {attempt}"),
    };
    format!(
        "==> {key}seq {seq}: {}{reason}{attempt} <==\n",
        outcome.name()
    )
}

/// Decides when blocks may be written: at once, or after every job with a smaller seq has its
/// record (`--keep-order`). Every seq must be reported once through [`BlockOrder::finished`],
/// with or without a block (a job that never ran has none), or later blocks wait for it.
#[derive(Debug)]
pub(crate) struct BlockOrder {
    keep_order: bool,
    /// The smallest seq not yet finished.
    next: u64,
    /// Finished seqs above `next`, with their blocks.
    held: BTreeMap<u64, Vec<Block>>,
    /// Bytes of output the held blocks keep in memory.
    held_in_memory: usize,
}

impl BlockOrder {
    /// A new order; seqs start at 1.
    pub(crate) fn new(keep_order: bool) -> Self {
        BlockOrder {
            keep_order,
            next: 1,
            held: BTreeMap::new(),
            held_in_memory: 0,
        }
    }

    /// Whether the blocks of job `seq`, finished now, would be held back for an earlier job.
    pub(crate) fn would_hold(&self, seq: u64) -> bool {
        self.keep_order && seq > self.next && !self.held.contains_key(&seq)
    }

    /// Bytes of output the held blocks keep in memory.
    pub(crate) fn held_in_memory(&self) -> usize {
        self.held_in_memory
    }

    /// Whether no block is held.
    pub(crate) fn holds_none(&self) -> bool {
        self.held.is_empty()
    }

    /// Job `seq` has its final record; `blocks` is its output (one per try, oldest first).
    /// Returns the blocks that may be written now, in order.
    pub(crate) fn finished(&mut self, seq: u64, blocks: Vec<Block>) -> Vec<Block> {
        if !self.keep_order {
            return blocks;
        }
        if seq < self.next || self.held.contains_key(&seq) {
            // Reported twice: never hold anything back for it.
            return blocks;
        }
        self.held_in_memory += blocks.iter().map(Block::in_memory).sum::<usize>();
        self.held.insert(seq, blocks);
        let mut ready = Vec::new();
        while let Some(blocks) = self.held.remove(&self.next) {
            self.held_in_memory -= blocks.iter().map(Block::in_memory).sum::<usize>();
            ready.extend(blocks);
            self.next += 1;
        }
        ready
    }

    /// Everything still held (at the end of a run, when some seq was never reported, e.g. input
    /// that was never read after a shutdown), in seq order.
    pub(crate) fn drain(&mut self) -> Vec<Block> {
        self.held_in_memory = 0;
        std::mem::take(&mut self.held)
            .into_values()
            .flatten()
            .collect()
    }
}

/// Grouped output on its way out: the blocks' order, the blocks of tries that were retried,
/// and the one task that writes blocks. A job's block is written after the job has ended and
/// left its slot, so without a bound a reader that stopped reading would let finished jobs'
/// blocks (and their spill files) pile up while new jobs start: [`GroupedOutput::waiting`]
/// tells the core how many wait.
pub(crate) struct GroupedOutput {
    order: BlockOrder,
    /// Blocks of tries that were retried, written with the job's final block.
    tries: HashMap<u64, Vec<Block>>,
    keep_order: bool,
    tx: Option<mpsc::UnboundedSender<Block>>,
    writer: Option<tokio::task::JoinHandle<()>>,
    backlog: Arc<Backlog>,
    /// `--keep-order`: where held blocks' output goes past [`HELD_IN_MEMORY`] (and every held
    /// block's own spill file), made when first needed and let go once nothing is held.
    shared: Option<SharedSpill>,
}

/// `--keep-order`: the most bytes of output the blocks held back for an earlier job keep in
/// memory, all together (8 MiB); the output of later ones goes to one temporary file. Each
/// block's own bound ([`super::capture::SPILL_AT`]) alone would let memory grow with the
/// number of jobs held behind a slow one.
pub(crate) const HELD_IN_MEMORY: usize = 8 * 1024 * 1024;

#[derive(Default)]
struct Backlog {
    /// Blocks handed to the writer task and not written yet.
    count: AtomicUsize,
    /// Signalled each time a block has been written.
    written: Notify,
    /// A block could not be read back whole from its spill file.
    lost: AtomicBool,
}

impl GroupedOutput {
    /// Starts the writer task (inside the runtime): headers and stdout captures go to
    /// `stdout`, stderr captures to `stderr`.
    pub(crate) fn new(keep_order: bool, stdout: SinkTx, stderr: SinkTx) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Block>();
        let backlog = Arc::new(Backlog::default());
        let writer = {
            let backlog = Arc::clone(&backlog);
            tokio::spawn(async move {
                while let Some(block) = rx.recv().await {
                    if !block.write(&stdout, &stderr).await {
                        backlog.lost.store(true, Ordering::Relaxed);
                    }
                    backlog.count.fetch_sub(1, Ordering::Relaxed);
                    backlog.written.notify_one();
                }
            })
        };
        GroupedOutput {
            order: BlockOrder::new(keep_order),
            tries: HashMap::new(),
            keep_order,
            tx: Some(tx),
            writer: Some(writer),
            backlog,
            shared: None,
        }
    }

    /// How many blocks wait for the reader.
    pub(crate) fn waiting(&self) -> usize {
        self.backlog.count.load(Ordering::Relaxed)
    }

    /// Whether a block could not be read back whole (the exit status is then 1).
    pub(crate) fn lost(&self) -> bool {
        self.backlog.lost.load(Ordering::Relaxed)
    }

    /// Resolves when a block has been written.
    pub(crate) async fn written(&self) {
        self.backlog.written.notified().await;
    }

    /// A try of the run known by `seq` ended and goes again: its block is written now, or
    /// (`--keep-order`) with the job's final block.
    pub(crate) fn retried(&mut self, seq: u64, block: Option<Block>) {
        let tries = self.tries.entry(seq).or_default();
        tries.extend(block);
        if !self.keep_order {
            let ready = std::mem::take(tries);
            self.tries.remove(&seq);
            self.send(ready);
        }
    }

    /// Job `seq` has its final record; `block` is the output of its last try (only for the
    /// run's first job). Every seq must be reported once ([`BlockOrder::finished`]).
    pub(crate) fn finished(&mut self, seq: u64, block: Option<Block>) {
        let mut blocks = self.tries.remove(&seq).unwrap_or_default();
        blocks.extend(block);
        if self.order.would_hold(seq) {
            self.store_held(&mut blocks);
        }
        let ready = self.order.finished(seq, blocks);
        self.send(ready);
        if self.order.holds_none() {
            // Its stored output goes with the blocks just sent.
            self.shared = None;
        }
    }

    /// Blocks about to be held back: a spill file of their own is moved to the shared file
    /// (a descriptor each would pile up), and so is their output in memory once the held
    /// blocks keep [`HELD_IN_MEMORY`]. A shared file that cannot be made or written leaves
    /// them as they are.
    fn store_held(&mut self, blocks: &mut [Block]) {
        let mut in_memory = self.order.held_in_memory();
        for block in blocks {
            for capture in [&mut block.stdout, &mut block.stderr] {
                let own_file = capture.has_own_file();
                let over = in_memory + capture.in_memory() > HELD_IN_MEMORY;
                if !(own_file || over) {
                    in_memory += capture.in_memory();
                    continue;
                }
                if self.shared.is_none() {
                    self.shared = SharedSpill::new().ok();
                }
                let stored = self
                    .shared
                    .as_mut()
                    .is_some_and(|shared| capture.store_in(shared).is_ok());
                if !stored {
                    in_memory += capture.in_memory();
                }
            }
        }
    }

    fn send(&mut self, ready: Vec<Block>) {
        if let Some(tx) = &self.tx {
            for block in ready {
                // Counted before it is sent: the writer may be done with it at once.
                self.backlog.count.fetch_add(1, Ordering::Relaxed);
                if tx.send(block).is_err() {
                    self.backlog.count.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Sends what is still held (a seq never reported, e.g. input never read after a
    /// shutdown) and closes the queue; returns the writer task, which ends once every block is
    /// written.
    pub(crate) fn close(&mut self) -> Option<tokio::task::JoinHandle<()>> {
        let held = self.order.drain();
        self.send(held);
        self.tx = None;
        self.writer.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(name: &str) -> Block {
        Block {
            header: name.to_owned(),
            stdout: Capture::default(),
            stderr: Capture::default(),
        }
    }

    fn names(blocks: Vec<Block>) -> Vec<String> {
        blocks.into_iter().map(|b| b.header).collect()
    }

    #[test]
    fn without_keep_order_blocks_go_at_once() {
        let mut order = BlockOrder::new(false);
        assert_eq!(names(order.finished(3, vec![block("3")])), ["3"]);
        assert_eq!(names(order.finished(1, vec![block("1")])), ["1"]);
    }

    #[test]
    fn keep_order_holds_blocks_until_earlier_seqs_finish() {
        let mut order = BlockOrder::new(true);
        assert!(order.finished(3, vec![block("3")]).is_empty());
        assert!(order.finished(2, vec![]).is_empty(), "1 is still running");
        assert_eq!(
            names(order.finished(1, vec![block("1a"), block("1b")])),
            ["1a", "1b", "3"]
        );
        assert_eq!(names(order.finished(4, vec![block("4")])), ["4"]);
    }

    #[test]
    fn drain_returns_what_is_held_in_order() {
        let mut order = BlockOrder::new(true);
        assert!(order.finished(5, vec![block("5")]).is_empty());
        assert!(order.finished(3, vec![block("3")]).is_empty());
        assert_eq!(names(order.drain()), ["3", "5"]);
    }
}
