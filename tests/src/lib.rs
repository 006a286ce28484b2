//! Integration and interoperability suites for nvmeof (see `tests/tests/`).
//!
//! - [`raw_client`]: a raw-PDU NVMe/TCP host used by the target integration tests.
//! - [`harness`]: starting a target on loopback with RAM namespaces.
//! - [`slow_backend`]: a backend completing asynchronously after a delay.
//! - [`conformance`]: commands a host can get wrong, with the status our
//!   target and Linux nvmet answer each with.

pub mod conformance;
pub mod harness;
pub mod raw_client;
pub mod slow_backend;
