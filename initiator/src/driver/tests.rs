//! Driver tests against a scripted controller on a loopback socket. The
//! driver runs on a current-thread runtime, so the test decides when it runs.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc as std_mpsc;

use nvmeof_common::decoder::Role;
use nvmeof_common::pdu::{CapsuleResp, DigestFlags, IcResp};
use nvmeof_common::{DecoderConfig, Pdu, Status};

use super::*;

const WAIT: Duration = Duration::from_secs(10);

/// What the scripted controller tells the test.
#[derive(Debug, PartialEq)]
enum Seen {
    /// The CIDs of the commands received after Connect.
    Commands(Vec<u16>),
    /// Their responses are written (in the host's receive buffer).
    Answered,
    /// The host closed the connection; how many more commands came first.
    Closed { more: usize },
}

/// Accepts one connection, answers ICReq and Connect, waits for `expect`
/// commands, reports them, answers each (result = its CID + 0x1000) once the
/// test says so, and then reads until the host closes.
fn scripted_controller(
    listener: TcpListener,
    expect: usize,
    go: std_mpsc::Receiver<()>,
    tx: std_mpsc::Sender<Seen>,
) {
    let (mut s, _) = listener.accept().unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.set_nodelay(true).unwrap();
    let mut dec = PduDecoder::new(DecoderConfig::new(Role::Controller));
    let enc = EncodeConfig::default();
    let mut buf = BytesMut::new();
    let mut next = |s: &mut std::net::TcpStream, buf: &mut BytesMut| -> Option<Pdu> {
        loop {
            if let Some(p) = dec.decode(buf).unwrap() {
                return Some(p);
            }
            let mut chunk = [0u8; 4096];
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    };
    let resp = |cid: u16, result: u64| {
        Pdu::CapsuleResp(CapsuleResp { cqe: Cqe { result, sqhd: 0, sqid: 1, cid, status: Status::SUCCESS } })
            .encode_to_vec(&enc)
    };
    assert!(matches!(next(&mut s, &mut buf), Some(Pdu::IcReq(_))));
    let ic = IcResp { pfv: 0, cpda: 0, dgst: DigestFlags::new(false, false), maxh2cdata: 128 << 10 };
    s.write_all(&Pdu::IcResp(ic).encode_to_vec(&enc)).unwrap();
    let Some(Pdu::CapsuleCmd(connect)) = next(&mut s, &mut buf) else { panic!("expected Connect") };
    s.write_all(&resp(connect.sqe.cid(), 1)).unwrap();
    let mut cids = Vec::new();
    while cids.len() < expect {
        let Some(Pdu::CapsuleCmd(c)) = next(&mut s, &mut buf) else { panic!("expected a command") };
        cids.push(c.sqe.cid());
    }
    tx.send(Seen::Commands(cids.clone())).unwrap();
    go.recv_timeout(WAIT).unwrap();
    // One write: on loopback its bytes are in the host's receive buffer when
    // it returns (a second small write could wait for an ACK, Nagle).
    let answers: Vec<u8> = cids.iter().flat_map(|&cid| resp(cid, 0x1000 + u64::from(cid))).collect();
    s.write_all(&answers).unwrap();
    tx.send(Seen::Answered).unwrap();
    let mut more = 0;
    while let Some(p) = next(&mut s, &mut buf) {
        if matches!(p, Pdu::CapsuleCmd(_)) {
            more += 1;
        }
    }
    tx.send(Seen::Closed { more }).unwrap();
}

/// A queue dropped while its controller's responses sit unread in the socket
/// (here by `Detach`, as the reconnect sends every queue when one of them
/// failed) completes those commands with the controller's answers: the one
/// sent once does not fail with `ConnectionLost`, the other is not
/// resubmitted.
#[test]
fn dropped_connection_delivers_the_responses_already_received() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (go_tx, go_rx) = std_mpsc::channel();
        let (seen_tx, seen) = std_mpsc::channel();
        let peer = std::thread::spawn(move || scripted_controller(listener, 2, go_rx, seen_tx));

        let params = DriverParams {
            requeue: true,
            busy_poll: Duration::ZERO,
            sup_tx: None,
            span: tracing::Span::none(),
            busy_queues: Arc::new(AtomicUsize::new(0)),
            comp_seen: None,
        };
        let q = spawn_driver(1, 8, WAIT, params);
        let stream = TcpStream::connect(addr).await.unwrap();
        let (reply, connected) = oneshot::channel();
        let connect = Command {
            sqe: Sqe::new(0x7F),
            data: DataXfer::Write(Bytes::from(vec![0u8; 1024])),
            timeout: None,
        };
        let cfg = QueueConfig::new(1, 8);
        q.send_ctrl(DriverCtrl::Attach { stream, cfg, connect, epoch: 1, release: true, reply });
        tokio::time::timeout(WAIT, connected).await.unwrap().unwrap().unwrap();

        let (q1, q2) = (q.clone(), q.clone());
        let once = tokio::spawn(async move { q1.execute_once(Sqe::new(0x00), Payload::None).await });
        let plain = tokio::spawn(async move { q2.execute(Sqe::new(0x00), Payload::None, None, false).await });
        // Let the driver send both (bounded wait, yielding to it).
        let start = Instant::now();
        let cids = loop {
            match seen.try_recv() {
                Ok(Seen::Commands(c)) => break c,
                Ok(other) => panic!("unexpected {other:?}"),
                Err(_) => {
                    assert!(start.elapsed() < WAIT, "the commands never reached the controller");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        };
        // The responses arrive while this thread (the driver's) does not
        // yield: the driver sees them only after the Detach below.
        go_tx.send(()).unwrap();
        assert_eq!(seen.recv_timeout(WAIT).unwrap(), Seen::Answered);
        q.send_ctrl(DriverCtrl::Detach);

        let mut results = Vec::new();
        for task in [once, plain] {
            let cqe = tokio::time::timeout(WAIT, task)
                .await
                .expect("the command never completed")
                .unwrap()
                .expect("the controller's answer");
            results.push(cqe.result);
        }
        let mut want: Vec<u64> = cids.iter().map(|&c| 0x1000 + u64::from(c)).collect();
        want.sort_unstable();
        results.sort_unstable();
        assert_eq!(results, want);
        // The Detach closed the socket without resubmitting anything.
        let closed = tokio::task::spawn_blocking(move || seen.recv_timeout(WAIT).unwrap()).await.unwrap();
        assert_eq!(closed, Seen::Closed { more: 0 });
        peer.join().unwrap();
        q.send_ctrl(DriverCtrl::Shutdown);
    });
}

/// A vectored read's pieces take each chunk at its offset in the whole,
/// whatever piece it starts in or how many it spans; bytes past the end are
/// dropped.
#[test]
fn scatter_puts_chunks_across_pieces() {
    let whole: Vec<u8> = (0..100u8).collect();
    let lens = [1usize, 7, 0, 30, 13, 49];
    // Chunks of every size from every offset, in any order.
    for size in 1..=37 {
        let mut bufs: Vec<Vec<u8>> = lens.iter().map(|&l| vec![0xee; l]).collect();
        let mut pieces: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
        assert_eq!(pieces.total(), 100);
        let mut offs: Vec<usize> = (0..100).step_by(size).collect();
        offs.reverse();
        let mut copied = 0;
        for off in offs {
            copied += pieces.put(off, &whole[off..(off + size).min(100)]);
        }
        assert_eq!(copied, 100);
        assert_eq!(bufs.concat(), whole, "chunks of {size}");
    }
    let mut b = [0u8; 4];
    let mut pieces: Vec<&mut [u8]> = vec![&mut b[..]];
    assert_eq!(pieces.put(2, &[1, 2, 3, 4]), 2, "past the end dropped");
    assert_eq!(pieces.put(9, &[1]), 0);
    assert_eq!(b, [0, 0, 1, 2]);
}
