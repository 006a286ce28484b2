//! A TCP proxy that logs which queue each command capsule travels on.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use nvmeof_common::sqe::fabrics_off::QID;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy that records the queue and opcode of every command capsule
/// hosts send through it: what the target receives, on which queue.
pub struct CapsuleLog {
    /// Where the initiator connects.
    pub addr: SocketAddr,
    /// (QID, opcode) of each command capsule after its queue's Connect, in
    /// the order the proxy forwarded them.
    pub commands: Arc<Mutex<Vec<(u16, u8)>>>,
}

impl CapsuleLog {
    /// Listens on 127.0.0.1:0 and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let commands: Arc<Mutex<Vec<(u16, u8)>>> = Default::default();
        let log = commands.clone();
        tokio::spawn(async move {
            while let Ok((down, _)) = l.accept().await {
                let Ok(up) = TcpStream::connect(upstream).await else { continue };
                let _ = (down.set_nodelay(true), up.set_nodelay(true));
                let (mut dr, mut dw) = down.into_split();
                let (mut ur, mut uw) = up.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut ur, &mut dw).await;
                });
                let log = log.clone();
                tokio::spawn(async move {
                    let mut qid = None;
                    let mut pdu = Vec::new();
                    // One whole PDU at a time (PLEN covers digests and data).
                    loop {
                        let mut ch = [0u8; 8];
                        if dr.read_exact(&mut ch).await.is_err() {
                            return;
                        }
                        let plen = u32::from_le_bytes(ch[4..8].try_into().unwrap()) as usize;
                        if !(8..=64 << 20).contains(&plen) {
                            return;
                        }
                        pdu.clear();
                        pdu.extend_from_slice(&ch);
                        pdu.resize(plen, 0);
                        if dr.read_exact(&mut pdu[8..]).await.is_err() {
                            return;
                        }
                        // CapsuleCmd: the SQE follows the 8-byte header.
                        if ch[0] == 0x04 && plen >= 72 {
                            let (opcode, fctype) = (pdu[8], pdu[8 + 4]);
                            if opcode == 0x7f && fctype == 0x01 {
                                qid = Some(u16::from_le_bytes([pdu[8 + QID], pdu[9 + QID]]));
                            } else if let Some(q) = qid {
                                log.lock().unwrap().push((q, opcode));
                            }
                        }
                        if uw.write_all(&pdu).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Self { addr, commands }
    }
}
