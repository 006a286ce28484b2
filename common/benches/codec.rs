//! Codec benchmarks: CapsuleCmd and 4 KiB C2HData encode+decode, with and
//! without digests, and CRC32C throughput.

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nvmeof_common::decoder::{DecoderConfig, PduDecoder, Role};
use nvmeof_common::pdu::{C2hData, CapsuleCmd, EncodeConfig, Pdu};
use nvmeof_common::sqe::{SglDescriptor, Sqe};

fn roundtrip(c: &mut Criterion) {
    let mut sqe = Sqe::new(0x02);
    sqe.set_cid(7).set_nsid(1).set_sgl(SglDescriptor::transport(4096)).set_nlb(7);
    let cmd = Pdu::CapsuleCmd(CapsuleCmd::new(sqe));
    let c2h = Pdu::C2hData(C2hData {
        cccid: 7,
        datao: 0,
        data: Bytes::from(vec![0xA5u8; 4096]),
        last: true,
        success: true,
    });
    let mut g = c.benchmark_group("encode_decode");
    for (name, pdu, role) in [("capsule_cmd", &cmd, Role::Controller), ("c2h_data_4k", &c2h, Role::Host)] {
        for digests in [false, true] {
            let enc = EncodeConfig { hdgst: digests, ddgst: digests, pda: 0 };
            let mut dec =
                PduDecoder::new(DecoderConfig { hdgst: digests, ddgst: digests, ..DecoderConfig::new(role) });
            let mut hdr = BytesMut::with_capacity(256);
            let mut rx = BytesMut::with_capacity(8192);
            let id = BenchmarkId::new(name, if digests { "digests" } else { "plain" });
            g.bench_function(id, |b| {
                b.iter(|| {
                    hdr.clear();
                    let tail = pdu.encode(&enc, &mut hdr);
                    // Simulate the socket: header and payload land in the receive buffer.
                    rx.extend_from_slice(&hdr);
                    if let Some(t) = &tail {
                        rx.extend_from_slice(&t.data);
                        if let Some(d) = t.ddgst {
                            rx.extend_from_slice(&d);
                        }
                    }
                    let out = dec.decode(&mut rx).unwrap().unwrap();
                    std::hint::black_box(out);
                })
            });
        }
    }
    g.finish();
}

fn crc(c: &mut Criterion) {
    let mut g = c.benchmark_group("crc32c");
    for size in [72usize, 4096, 131072] {
        let data = vec![0x5Au8; size];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::from_parameter(size), &data, |b, d| {
            b.iter(|| nvmeof_common::digest::crc32c(std::hint::black_box(d)))
        });
    }
    g.finish();
}

criterion_group!(benches, roundtrip, crc);
criterion_main!(benches);
