//! Grouped output's blocks and their order: each job's whole output is written as one block
//! when its record is known, at once or (`--keep-order`) in input order. The ordering is a
//! plain value; the writing happens in one task, so blocks never interleave.

use std::collections::BTreeMap;

use super::capture::Capture;
use super::sink::SinkTx;

/// One job's (or batch's) captured output with its header line.
#[derive(Debug)]
pub struct Block {
    /// `==> [key] seq 3: failed (exit_status) <==\n`
    pub header: String,
    pub stdout: Capture,
    pub stderr: Capture,
}

impl Block {
    /// Writes the header and the captured stdout to `stdout`, the captured stderr to `stderr`.
    pub async fn write(self, stdout: &SinkTx, stderr: &SinkTx) {
        let _ = stdout.send(self.header.into_bytes()).await;
        for (capture, sink) in [(self.stdout, stdout), (self.stderr, stderr)] {
            if let Err(err) = capture.replay(sink).await {
                let message = format!("lanes: cannot read back captured output: {err}\n");
                let _ = sink.send(message.into_bytes()).await;
            }
        }
    }
}

/// The line before a grouped block: `==> [key] seq 3: failed (exit_status) <==`.
pub fn header(key: &str, seq: u64, outcome: crate::core::Outcome) -> String {
    let prefix = super::framing::prefix_for(key, false);
    let key = String::from_utf8_lossy(&prefix);
    match outcome.reason() {
        Some(reason) => format!("==> {key}seq {seq}: {} ({reason}) <==\n", outcome.name()),
        None => format!("==> {key}seq {seq}: {} <==\n", outcome.name()),
    }
}

/// Decides when blocks may be written: at once, or after every job with a smaller seq has its
/// record (`--keep-order`). Every seq must be reported once through [`BlockOrder::finished`],
/// with or without a block (a job that never ran has none), or later blocks wait for it.
#[derive(Debug)]
pub struct BlockOrder {
    keep_order: bool,
    /// The smallest seq not yet finished.
    next: u64,
    /// Finished seqs above `next`, with their blocks.
    held: BTreeMap<u64, Vec<Block>>,
}

impl BlockOrder {
    /// A new order; seqs start at 1.
    pub fn new(keep_order: bool) -> Self {
        BlockOrder {
            keep_order,
            next: 1,
            held: BTreeMap::new(),
        }
    }

    /// Job `seq` has its final record; `blocks` is its output (one per try, oldest first).
    /// Returns the blocks that may be written now, in order.
    pub fn finished(&mut self, seq: u64, blocks: Vec<Block>) -> Vec<Block> {
        if !self.keep_order {
            return blocks;
        }
        if seq < self.next || self.held.contains_key(&seq) {
            // Reported twice: never hold anything back for it.
            return blocks;
        }
        self.held.insert(seq, blocks);
        let mut ready = Vec::new();
        while let Some(blocks) = self.held.remove(&self.next) {
            ready.extend(blocks);
            self.next += 1;
        }
        ready
    }

    /// Everything still held (at the end of a run, when some seq was never reported, e.g. input
    /// that was never read after a shutdown), in seq order.
    pub fn drain(&mut self) -> Vec<Block> {
        std::mem::take(&mut self.held)
            .into_values()
            .flatten()
            .collect()
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
