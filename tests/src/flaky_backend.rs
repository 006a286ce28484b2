//! A RAM backend that fails the operations it is told to fail, with the NVMe
//! status it is given: a test can have a target answer with a transient error
//! (one without Do Not Retry) exactly where it wants one.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use nvmeof_common::Status;
use nvmeof_target::backend::{Backend, IoCompletion, IoOp, MemBackend, QueueIo};

/// RAM storage whose next operations fail with queued statuses.
pub struct FlakyBackend {
    inner: Arc<MemBackend>,
    failures: Mutex<VecDeque<Status>>,
    submitted: AtomicUsize,
    kinds: Mutex<String>,
}

impl FlakyBackend {
    /// `size` bytes of RAM in `block_size` blocks.
    pub fn new(size: u64, block_size: u32) -> Self {
        Self {
            inner: Arc::new(MemBackend::new(size, block_size)),
            failures: Mutex::default(),
            submitted: 0.into(),
            kinds: Mutex::default(),
        }
    }

    /// The next operations, one per status, fail with these statuses (and do
    /// nothing else); the ones after them run.
    pub fn fail_next(&self, statuses: impl IntoIterator<Item = Status>) {
        self.failures.lock().unwrap().extend(statuses);
    }

    /// Statuses queued by [`Self::fail_next`] not yet used.
    pub fn failures_left(&self) -> usize {
        self.failures.lock().unwrap().len()
    }

    /// What reached the backend so far, failed operations included, one
    /// letter each: `R` read, `W` write, `Z` write zeroes, `F` flush, `D`
    /// deallocate, `?` anything else; the record starts again empty.
    pub fn take_kinds(&self) -> String {
        std::mem::take(&mut *self.kinds.lock().unwrap())
    }

    /// Operations that reached the backend so far, failed ones included.
    pub fn submitted(&self) -> usize {
        self.submitted.load(Ordering::Acquire)
    }
}

impl Backend for FlakyBackend {
    backend_over_ram!("flaky");

    fn submit(&self, tag: u32, op: IoOp, io: &QueueIo) -> Option<IoCompletion> {
        self.submitted.fetch_add(1, Ordering::AcqRel);
        self.kinds.lock().unwrap().push(match op {
            IoOp::Read { .. } => 'R',
            IoOp::Write { .. } => 'W',
            IoOp::WriteZeroes { .. } => 'Z',
            IoOp::Flush => 'F',
            IoOp::Deallocate { .. } => 'D',
            #[allow(unreachable_patterns)]
            _ => '?',
        });
        let failure = self.failures.lock().unwrap().pop_front();
        match failure {
            Some(status) => Some(IoCompletion::status(tag, status)),
            None => self.inner.submit(tag, op, io),
        }
    }
}
