//! Integration and interoperability suites for nvmeof (see `tests/tests/`).
