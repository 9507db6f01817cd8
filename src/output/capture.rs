//! Holding a job's whole output until it ends (`--output grouped`): in memory up to a limit,
//! then spilled to an unnamed temporary file, so memory never scales with a job's output.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt as _;
use std::sync::Arc;

use super::sink::SinkTx;

/// Bytes kept in memory per captured stream before it spills to a temporary file (1 MiB).
pub(crate) const SPILL_AT: usize = 1024 * 1024;

/// Size of the pieces a spilled capture is sent in, in bytes.
const REPLAY_CHUNK: usize = 64 * 1024;

/// One captured stream.
#[derive(Debug, Default)]
pub(crate) struct Capture {
    memory: Vec<u8>,
    spill: Option<File>,
    /// Moved into a file shared with other captures ([`Capture::store_in`]): where.
    stored: Option<Stored>,
    /// A spill file that failed; the rest of the output is lost, and said so when replayed.
    failed: Option<String>,
}

/// A capture's bytes in a [`SharedSpill`]: `len` bytes from `offset`.
#[derive(Debug)]
struct Stored {
    file: Arc<File>,
    offset: u64,
    len: u64,
}

/// One unnamed temporary file that many captures are moved into, one after another: blocks
/// held back (`--keep-order`) keep neither memory nor a descriptor each. It is removed once
/// the last capture in it is replayed or dropped.
#[derive(Debug)]
pub(crate) struct SharedSpill {
    file: Arc<File>,
    len: u64,
}

impl SharedSpill {
    /// A new shared file in `TMPDIR`.
    ///
    /// # Errors
    /// It cannot be created.
    pub(crate) fn new() -> io::Result<Self> {
        Ok(SharedSpill {
            file: Arc::new(tempfile::tempfile()?),
            len: 0,
        })
    }
}

impl Capture {
    /// Appends `data`; spills to a temporary file once more than [`SPILL_AT`] bytes are held.
    pub(crate) fn push(&mut self, data: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        if let Some(file) = &mut self.spill {
            if let Err(err) = file.write_all(data) {
                self.failed = Some(err.to_string());
            }
            return;
        }
        self.memory.extend_from_slice(data);
        if self.memory.len() > SPILL_AT {
            match tempfile::tempfile().and_then(|mut file| {
                file.write_all(&self.memory)?;
                Ok(file)
            }) {
                Ok(file) => {
                    self.spill = Some(file);
                    self.memory = Vec::new();
                }
                Err(err) => {
                    // What is held in memory is kept; what comes after is lost.
                    self.failed = Some(err.to_string());
                }
            }
        }
    }

    /// Bytes of it held in memory.
    pub(crate) fn in_memory(&self) -> usize {
        self.memory.len()
    }

    /// Whether it holds a spill file of its own (an open descriptor).
    pub(crate) fn has_own_file(&self) -> bool {
        self.spill.is_some()
    }

    /// Moves what it holds (in memory, or in a spill file of its own) to the end of `shared`,
    /// so that it keeps neither memory nor a descriptor; nothing more may be pushed.
    ///
    /// # Errors
    /// `shared` cannot be written (a full disk): the capture is left as it was.
    pub(crate) fn store_in(&mut self, shared: &mut SharedSpill) -> io::Result<()> {
        if self.stored.is_some() {
            return Ok(());
        }
        let offset = shared.len;
        let len = match &mut self.spill {
            Some(own) => {
                own.seek(SeekFrom::Start(0))?;
                let mut to = shared.file.as_ref();
                to.seek(SeekFrom::Start(offset))?;
                io::copy(own, &mut to)
            }
            None => shared
                .file
                .write_all_at(&self.memory, offset)
                .map(|()| self.memory.len() as u64),
        }?;
        shared.len += len;
        self.stored = Some(Stored {
            file: Arc::clone(&shared.file),
            offset,
            len,
        });
        self.spill = None;
        self.memory = Vec::new();
        Ok(())
    }

    /// Why part of the output was lost (its spill file could not be created or written: a
    /// full disk, a file-size limit, no temporary directory), if it was.
    pub(crate) fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Sends everything captured to `sink`, in order, in pieces of at most 64 KiB, adding a
    /// newline when the output did not end with one.
    pub(crate) async fn replay(self, sink: &SinkTx) -> io::Result<()> {
        let mut last = None;
        if let Some(stored) = self.stored {
            let mut at = 0;
            while at < stored.len {
                let mut chunk = vec![0; REPLAY_CHUNK.min((stored.len - at) as usize)];
                stored.file.read_exact_at(&mut chunk, stored.offset + at)?;
                at += chunk.len() as u64;
                last = chunk.last().copied();
                let _ = sink.send(chunk).await;
            }
        } else if let Some(mut file) = self.spill {
            file.seek(SeekFrom::Start(0))?;
            loop {
                let mut chunk = vec![0; REPLAY_CHUNK];
                let n = file.read(&mut chunk)?;
                if n == 0 {
                    break;
                }
                chunk.truncate(n);
                last = chunk.last().copied();
                let _ = sink.send(chunk).await;
            }
        } else if !self.memory.is_empty() {
            last = self.memory.last().copied();
            let _ = sink.send(self.memory).await;
        }
        if last.is_some_and(|b| b != b'\n') {
            let _ = sink.send(b"\n".to_vec()).await;
        }
        if let Some(err) = self.failed {
            let message = format!("lanes: part of this output was lost: {err}\n");
            let _ = sink.send(message.into_bytes()).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn replayed(capture: Capture) -> Vec<u8> {
        let (tx, mut rx) = crate::output::sink::test_channel(1024);
        capture.replay(&tx).await.unwrap();
        drop(tx);
        let mut out = Vec::new();
        while let Some(chunk) = rx.recv().await {
            out.extend_from_slice(&chunk);
        }
        out
    }

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn small_output_stays_in_memory_and_gets_a_final_newline() {
        let mut capture = Capture::default();
        capture.push(b"a\nb");
        assert!(capture.spill.is_none());
        assert_eq!(block_on(replayed(capture)), b"a\nb\n");
    }

    #[test]
    fn large_output_spills_and_replays_byte_for_byte() {
        let mut capture = Capture::default();
        let mut expected = Vec::new();
        for i in 0..50_000u32 {
            let line = format!("line {i} {}\n", "x".repeat(40));
            capture.push(line.as_bytes());
            expected.extend_from_slice(line.as_bytes());
        }
        assert!(capture.spill.is_some());
        assert!(capture.memory.is_empty());
        assert_eq!(block_on(replayed(capture)), expected);
    }

    #[test]
    fn captures_stored_in_one_shared_file_replay_each_its_own_bytes() {
        let mut shared = SharedSpill::new().unwrap();
        let mut small = Capture::default();
        small.push(b"small\nno newline");
        let mut large = Capture::default();
        let mut big: Vec<u8> = (0..3 * SPILL_AT).map(|i| (i % 251) as u8).collect();
        big.push(b'\n');
        large.push(&big);
        assert!(large.spill.is_some());
        let mut empty = Capture::default();
        for capture in [&mut small, &mut large, &mut empty] {
            capture.store_in(&mut shared).unwrap();
            assert_eq!(capture.in_memory(), 0);
            assert!(capture.spill.is_none());
        }
        assert_eq!(shared.len, 16 + big.len() as u64);
        // Replayed in another order than stored.
        assert_eq!(block_on(replayed(empty)), b"");
        let replayed_large = block_on(replayed(large));
        assert!(
            replayed_large == big,
            "{} bytes replayed",
            replayed_large.len()
        );
        assert_eq!(block_on(replayed(small)), b"small\nno newline\n");
    }
}
