//! A RAM backend that logs the writes, Flushes and Deallocates reaching it,
//! so a test can see which writes had Force Unit Access and where the
//! Flushes fell, and the extent of every read and write (where requests
//! went and how large they were).

use std::sync::{Arc, Mutex};

use nvmeof_target::backend::{Backend, IoCompletion, IoOp, MemBackend, QueueIo};

/// RAM storage logging `W` for a write with FUA, `w` for one without, `F`
/// for a Flush and `D` for a Deallocate, in the order they are submitted
/// (reads are not logged).
pub struct DurabilityLog {
    inner: Arc<MemBackend>,
    ops: Mutex<String>,
    extents: Mutex<Vec<(char, u64, u64)>>,
}

impl DurabilityLog {
    /// `size` bytes of RAM in `block_size` blocks.
    pub fn new(size: u64, block_size: u32) -> Self {
        Self {
            inner: Arc::new(MemBackend::new(size, block_size)),
            ops: Mutex::default(),
            extents: Mutex::default(),
        }
    }

    /// `('R' or 'W', byte offset, bytes)` of each read and write so far, in
    /// the order they were submitted; the record starts again empty.
    pub fn take_extents(&self) -> Vec<(char, u64, u64)> {
        std::mem::take(&mut *self.extents.lock().unwrap())
    }

    /// The log so far, which starts again empty.
    pub fn take(&self) -> String {
        std::mem::take(&mut *self.ops.lock().unwrap())
    }
}

impl Backend for DurabilityLog {
    backend_over_ram!("durability-logging");

    fn submit(&self, tag: u32, op: IoOp, io: &QueueIo) -> Option<IoCompletion> {
        let mark = match &op {
            IoOp::Write { fua: true, .. } => Some('W'),
            IoOp::Write { fua: false, .. } => Some('w'),
            IoOp::Flush => Some('F'),
            IoOp::Deallocate { .. } => Some('D'),
            _ => None,
        };
        if let Some(c) = mark {
            self.ops.lock().unwrap().push(c);
        }
        let extent = match &op {
            IoOp::Read { offset, len } => Some(('R', *offset, *len as u64)),
            IoOp::Write { offset, data, .. } => Some(('W', *offset, data.len() as u64)),
            _ => None,
        };
        if let Some(e) = extent {
            self.extents.lock().unwrap().push(e);
        }
        self.inner.submit(tag, op, io)
    }
}
