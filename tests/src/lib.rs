//! Integration and interoperability suites for nvmeof (see `tests/tests/`).
//!
//! - [`raw_client`]: a raw-PDU NVMe/TCP host used by the target integration tests.
//! - [`harness`]: starting a target on loopback with RAM namespaces.
//! - [`slow_backend`]: a backend completing asynchronously after a delay.
//! - [`flaky_backend`]: a backend failing chosen operations with a chosen status.
//! - [`durability_log`]: a backend logging the writes (with or without FUA) and Flushes it gets.
//! - [`conformance`]: commands a host can get wrong, with the status our
//!   target and Linux nvmet answer each with.

/// The [`nvmeof_target::backend::Backend`] methods of a test backend that
/// wraps a `MemBackend` in its `inner` field and describes itself as
/// `$what` and the RAM's description: all but `submit`.
macro_rules! backend_over_ram {
    ($what:literal) => {
        fn size(&self) -> u64 {
            self.inner.size()
        }
        fn block_size(&self) -> u32 {
            self.inner.block_size()
        }
        fn volatile_write_cache(&self) -> bool {
            false
        }
        fn describe(&self) -> String {
            format!("{} {}", $what, self.inner.describe())
        }
        fn resize(&self, new_size: u64) -> Result<(), String> {
            self.inner.resize(new_size)
        }
    };
}

pub mod capsule_log;
pub mod conformance;
pub mod durability_log;
pub mod flaky_backend;
pub mod harness;
pub mod raw_client;
pub mod slow_backend;
