//! Transports. Only TCP today (`tcp`), the transport ops of nvmet-tcp.

pub mod tcp;
