//! Shared code of the bundled tools.
