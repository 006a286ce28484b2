//! Real Linux 6.12 host ↔ target byte streams (tests/data/linux-6.12, see its
//! README): every file decodes in every chunking to exactly the PDU counts of
//! the index, with digests verified, and every PDU re-encodes to the same bytes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use bytes::BytesMut;
use nvmeof_common::decoder::{DecoderConfig, PduDecoder, Role};
use nvmeof_common::pdu::{EncodeConfig, Pdu};
use rand::{Rng, SeedableRng};

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/linux-6.12")
}

fn type_name(p: &Pdu) -> &'static str {
    match p {
        Pdu::IcReq(_) => "ICReq",
        Pdu::IcResp(_) => "ICResp",
        Pdu::H2cTermReq(_) => "H2CTermReq",
        Pdu::C2hTermReq(_) => "C2HTermReq",
        Pdu::CapsuleCmd(_) => "CapsuleCmd",
        Pdu::CapsuleResp(_) => "CapsuleResp",
        Pdu::H2cData(_) => "H2CData",
        Pdu::C2hData(_) => "C2HData",
        Pdu::R2t(_) => "R2T",
    }
}

/// Feeds `stream` in the given chunk sizes; returns PDUs with their encoded config.
fn decode_stream(stream: &[u8], role: Role, chunks: &mut dyn FnMut() -> usize) -> Vec<(Pdu, EncodeConfig)> {
    let mut dec = PduDecoder::new(DecoderConfig {
        max_capsule_data: 16 << 20,
        max_data_pdu: 16 << 20,
        ..DecoderConfig::new(role)
    });
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut enc = EncodeConfig::default();
    let mut pos = 0;
    while pos < stream.len() {
        let n = chunks().clamp(1, stream.len() - pos);
        buf.extend_from_slice(&stream[pos..pos + n]);
        pos += n;
        while let Some(pdu) = dec.decode(&mut buf).expect("valid Linux stream") {
            let this_enc = enc;
            // Digests apply from the PDU after ICReq/ICResp on.
            let dgst = match &pdu {
                Pdu::IcReq(r) => Some(r.dgst),
                Pdu::IcResp(r) => Some(r.dgst),
                _ => None,
            };
            if let Some(d) = dgst {
                let mut cfg = *dec.config();
                cfg.hdgst = d.hdgst();
                cfg.ddgst = d.ddgst();
                dec.set_config(cfg);
                enc = EncodeConfig { hdgst: d.hdgst(), ddgst: d.ddgst(), pda: 0 };
            }
            out.push((pdu, this_enc));
        }
    }
    assert!(buf.is_empty(), "trailing bytes");
    out
}

#[test]
fn linux_streams_decode_in_every_chunking_and_reencode() {
    for flavour in ["plain", "digests"] {
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(data_dir().join(format!("{flavour}-index.json"))).unwrap())
                .unwrap();
        for entry in index.as_array().unwrap() {
            let file = entry["file"].as_str().unwrap();
            let stream = std::fs::read(data_dir().join(file)).unwrap();
            assert_eq!(stream.len() as u64, entry["bytes"].as_u64().unwrap());
            let role = if entry["direction"] == "h2c" { Role::Controller } else { Role::Host };

            let whole = decode_stream(&stream, role, &mut || usize::MAX);
            let mut counts = BTreeMap::new();
            for (p, _) in &whole {
                *counts.entry(type_name(p).to_string()).or_insert(0u64) += 1;
            }
            let expected: BTreeMap<String, u64> = entry["pdus"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
                .collect();
            assert_eq!(counts, expected, "{file}");

            // Re-encoding yields the captured bytes exactly.
            let mut re = Vec::with_capacity(stream.len());
            for (p, cfg) in &whole {
                re.extend_from_slice(&p.encode_to_vec(cfg));
            }
            assert!(re == stream, "{file}: re-encoded stream differs");

            // Same PDUs one byte at a time (small files) or in small chunks, and random splits.
            let small = 1;
            let bytewise = decode_stream(&stream, role, &mut || small);
            assert!(bytewise == whole, "{file}: {small}-byte chunks differ");
            let mut rng = rand::rngs::StdRng::seed_from_u64(stream.len() as u64);
            let random = decode_stream(&stream, role, &mut || rng.gen_range(1..9000));
            assert!(random == whole, "{file}: random chunks differ");
        }
    }
}

#[test]
fn digests_capture_negotiates_and_checks_digests() {
    // conn2 h2c with digests: one H2CData of 1 MiB whose DDGST must verify;
    // flipping one data byte must be reported as a data digest error with its CCCID.
    let stream = std::fs::read(data_dir().join("digests-conn2-h2c.bin")).unwrap();
    let pdus = decode_stream(&stream, Role::Controller, &mut || usize::MAX);
    let (pos, h2c) = {
        let mut off = 0;
        let mut found = None;
        for (p, cfg) in &pdus {
            let len = p.encode_to_vec(cfg).len();
            if let Pdu::H2cData(d) = p {
                found = Some((off, d.clone()));
            }
            off += len;
        }
        found.unwrap()
    };
    let mut corrupt = stream.clone();
    corrupt[pos + 28 + 100] ^= 0xFF;
    let mut dec = PduDecoder::new(DecoderConfig {
        hdgst: true,
        ddgst: true,
        max_data_pdu: 4 << 20,
        ..DecoderConfig::new(Role::Controller)
    });
    let mut buf = BytesMut::from(&corrupt[pos..]);
    match dec.decode(&mut buf) {
        Err(nvmeof_common::DecodeError::DataDigest { cccid, .. }) => assert_eq!(cccid, h2c.cccid),
        other => panic!("expected data digest error, got {other:?}"),
    }
    // The PDU was consumed whole: the stream stays in sync.
    assert!(dec.decode(&mut buf).unwrap().is_some());
}
