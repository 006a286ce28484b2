//! Async NVMe-over-TCP initiator library (work in progress).
