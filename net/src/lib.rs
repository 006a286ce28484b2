//! Socket helpers shared by the target's and the initiator's TCP drivers.
//!
//! Both drivers busy-poll their sockets for a bounded time after activity
//! (`--poll-us`), which tokio's readiness-cached `try_read*` cannot do on its
//! own; the two calls here are what such a loop needs.

#![deny(missing_docs)]

use std::os::fd::AsRawFd;

use bytes::BufMut;
use tokio::net::TcpStream;

/// Whether the socket has something to read (data, EOF or an error), asked
/// with a zero-timeout `poll(2)`.
///
/// Busy-polling with `recv` takes the socket lock on every try; the peer's
/// softirq delivering into the socket then finds it owned and defers the
/// segment to the backlog (processed at `release_sock`) or spins on the lock,
/// which on paravirtualised guests can halt the vCPU. `tcp_poll` reads the
/// receive state without the lock, so a spin loop only calls `recv` when
/// there is something to take.
pub fn readable_now(stream: &TcpStream) -> bool {
    let mut pfd = libc::pollfd { fd: stream.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, zero timeout.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n != 0
}

/// Reads from the socket into `buf`'s spare capacity, with a real `recv` call
/// even when tokio has no readiness cached.
///
/// tokio's `try_read*` answer `WouldBlock` from cached readiness without a
/// syscall until the reactor has seen an epoll event, so a busy-poll loop built
/// on them never sees data that arrived meanwhile. The read goes through
/// `try_io` first (which clears readiness race-free on `WouldBlock`); only when
/// tokio had no readiness cached is `recv` called directly. `Ok(0)`: the peer
/// closed (or `buf` has no spare capacity).
pub fn recv_buf<B: BufMut>(stream: &TcpStream, buf: &mut B) -> std::io::Result<usize> {
    fn raw<B: BufMut>(stream: &TcpStream, buf: &mut B) -> std::io::Result<usize> {
        let sock = socket2::SockRef::from(stream);
        let dst = buf.chunk_mut();
        // SAFETY: `recv` only writes into the slice and reports how many bytes it
        // initialised; exactly those are committed with `advance_mut`.
        let n = sock.recv(unsafe { dst.as_uninit_slice_mut() })?;
        unsafe { buf.advance_mut(n) };
        Ok(n)
    }
    let mut called = false;
    match stream.try_io(tokio::io::Interest::READABLE, || {
        called = true;
        raw(stream, buf)
    }) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && !called => raw(stream, buf),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn sees_data_and_eof_without_the_reactor() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        assert!(!readable_now(&b));
        let mut buf = bytes::BytesMut::with_capacity(64);
        let e = recv_buf(&b, &mut buf).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        a.write_all(b"hello").await.unwrap();
        // Bounded wait for loopback delivery: 1000 × 1 ms.
        for _ in 0..1000 {
            if readable_now(&b) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(readable_now(&b));
        // No `readable().await` first: tokio has no readiness cached, the
        // direct `recv` still finds the bytes.
        assert_eq!(recv_buf(&b, &mut buf).unwrap(), 5);
        assert_eq!(&buf[..], b"hello");
        drop(a);
        for _ in 0..1000 {
            if readable_now(&b) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(recv_buf(&b, &mut buf).unwrap(), 0, "EOF");
    }
}
