//! RAM backend: executes inline on the queue's task (no thread hop), for
//! tests and benchmarks.

use std::sync::RwLock;

use bytes::{Bytes, BytesMut};
use nvmeof_common::Status;

use super::{Backend, CompletionSink, IoCompletion, IoOp};

/// A namespace held in memory. Contents are lost on exit.
pub struct MemBackend {
    data: RwLock<Vec<u8>>,
    block_size: u32,
}

impl MemBackend {
    /// A zero-filled namespace of `size` bytes (rounded down to whole blocks).
    pub fn new(size: u64, block_size: u32) -> Self {
        let size = size / block_size as u64 * block_size as u64;
        Self { data: RwLock::new(vec![0; size as usize]), block_size }
    }

    /// Flips bits of one byte (test hook for verify-mode and corruption tests).
    pub fn corrupt_byte(&self, offset: u64) {
        let mut d = self.data.write().unwrap();
        if let Some(b) = d.get_mut(offset as usize) {
            *b ^= 0xFF;
        }
    }

    fn execute(&self, op: IoOp) -> (Status, Bytes) {
        let in_range =
            |off: u64, len: u64, size: usize| off.checked_add(len).is_some_and(|e| e <= size as u64);
        match op {
            IoOp::Read { offset, len } => {
                let d = self.data.read().unwrap();
                if !in_range(offset, len as u64, d.len()) {
                    return (Status::LBA_RANGE.with_dnr(), Bytes::new());
                }
                let o = offset as usize;
                (Status::SUCCESS, Bytes::copy_from_slice(&d[o..o + len]))
            }
            IoOp::Write { offset, data, .. } => {
                let mut d = self.data.write().unwrap();
                if !in_range(offset, data.len() as u64, d.len()) {
                    return (Status::LBA_RANGE.with_dnr(), Bytes::new());
                }
                let o = offset as usize;
                d[o..o + data.len()].copy_from_slice(&data);
                (Status::SUCCESS, Bytes::new())
            }
            IoOp::Flush => (Status::SUCCESS, Bytes::new()),
            IoOp::WriteZeroes { offset, len, .. } => {
                let mut d = self.data.write().unwrap();
                if !in_range(offset, len, d.len()) {
                    return (Status::LBA_RANGE.with_dnr(), Bytes::new());
                }
                d[offset as usize..(offset + len) as usize].fill(0);
                (Status::SUCCESS, Bytes::new())
            }
            IoOp::Deallocate { ranges } => {
                let mut d = self.data.write().unwrap();
                for (offset, len) in ranges {
                    if !in_range(offset, len, d.len()) {
                        return (Status::LBA_RANGE.with_dnr(), Bytes::new());
                    }
                    d[offset as usize..(offset + len) as usize].fill(0);
                }
                (Status::SUCCESS, Bytes::new())
            }
        }
    }
}

impl Backend for MemBackend {
    fn size(&self) -> u64 {
        self.data.read().unwrap().len() as u64
    }
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn volatile_write_cache(&self) -> bool {
        false
    }
    fn describe(&self) -> String {
        format!("ram {} MiB", self.size() >> 20)
    }
    fn resize(&self, new_size: u64) -> Result<(), String> {
        let new_size = new_size / self.block_size as u64 * self.block_size as u64;
        self.data.write().unwrap().resize(new_size as usize, 0);
        Ok(())
    }
    fn read_into(
        &self,
        tag: u32,
        offset: u64,
        mut buf: BytesMut,
        _sink: &CompletionSink,
    ) -> Option<IoCompletion> {
        let d = self.data.read().unwrap();
        let len = buf.len();
        if offset.checked_add(len as u64).is_none_or(|e| e > d.len() as u64) {
            return Some(IoCompletion::status(tag, Status::LBA_RANGE.with_dnr()));
        }
        buf.copy_from_slice(&d[offset as usize..offset as usize + len]);
        Some(IoCompletion { tag, status: Status::SUCCESS, result: 0, data: buf.freeze() })
    }
    fn submit(&self, tag: u32, op: IoOp, _sink: &CompletionSink) -> Option<IoCompletion> {
        let (status, data) = self.execute(op);
        Some(IoCompletion { tag, status, result: 0, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_write_zero_and_range() {
        let b = MemBackend::new(1 << 20, 512);
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let w =
            b.submit(1, IoOp::Write { offset: 512, data: Bytes::from_static(&[7; 512]), fua: false }, &tx);
        assert_eq!(w.unwrap().status, Status::SUCCESS);
        let r = b.submit(2, IoOp::Read { offset: 512, len: 512 }, &tx).unwrap();
        assert_eq!((r.tag, &r.data[..]), (2, &[7u8; 512][..]));
        let z = b.submit(3, IoOp::WriteZeroes { offset: 512, len: 512, deallocate: true }, &tx).unwrap();
        assert!(z.status.is_success());
        assert_eq!(&b.submit(4, IoOp::Read { offset: 512, len: 4 }, &tx).unwrap().data[..], &[0; 4]);
        let oob = b.submit(5, IoOp::Read { offset: (1 << 20) - 512, len: 1024 }, &tx).unwrap();
        assert_eq!(oob.status, Status::LBA_RANGE.with_dnr());
    }
}
