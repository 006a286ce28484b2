//! A backend that completes every operation asynchronously after a delay, so a
//! test can have commands genuinely in flight inside the target.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nvmeof_target::backend::{Backend, IoOp, MemBackend, QueueIo};

/// RAM storage whose completions arrive on the queue's sink after `delay`.
pub struct SlowBackend {
    inner: Arc<MemBackend>,
    delay: Duration,
    submitted: AtomicUsize,
}

impl SlowBackend {
    /// `size` bytes of RAM, completions delayed by `delay`.
    pub fn new(size: u64, block_size: u32, delay: Duration) -> Self {
        Self { inner: Arc::new(MemBackend::new(size, block_size)), delay, submitted: AtomicUsize::new(0) }
    }

    /// Operations submitted so far (each one is in flight for `delay`).
    pub fn submitted(&self) -> usize {
        self.submitted.load(Ordering::Acquire)
    }
}

impl Backend for SlowBackend {
    backend_over_ram!("slow");

    fn submit(&self, tag: u32, op: IoOp, io: &QueueIo) -> Option<nvmeof_target::backend::IoCompletion> {
        let c = self.inner.submit(tag, op, io).expect("RAM completes inline");
        self.submitted.fetch_add(1, Ordering::AcqRel);
        let sink = io.sink.clone();
        let delay = self.delay;
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = sink.send(c);
        });
        None
    }
}
