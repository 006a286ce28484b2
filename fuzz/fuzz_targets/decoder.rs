//! Streaming decoder fuzz target: the first byte picks role, digests and a
//! split point; the rest is fed as a byte stream in two chunks. Decoded PDUs
//! must re-encode and decode to the same value.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use nvmeof_common::decoder::{DecoderConfig, PduDecoder, Role};
use nvmeof_common::pdu::EncodeConfig;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    let role = if sel & 1 == 0 { Role::Controller } else { Role::Host };
    let cfg = DecoderConfig {
        hdgst: sel & 2 != 0,
        ddgst: sel & 4 != 0,
        max_capsule_data: 16384,
        max_data_pdu: 65536,
        ..DecoderConfig::new(role)
    };
    let enc = EncodeConfig { hdgst: cfg.hdgst, ddgst: cfg.ddgst, pda: 0 };
    let mut dec = PduDecoder::new(cfg);
    let split = (sel as usize >> 3).min(rest.len());
    let mut buf = BytesMut::from(&rest[..split]);
    let mut fed_rest = false;
    for _ in 0..1024 {
        match dec.decode(&mut buf) {
            Ok(Some(pdu)) => {
                let bytes = pdu.encode_to_vec(&enc);
                let mut again = PduDecoder::new(cfg);
                let back = again.decode(&mut BytesMut::from(&bytes[..])).expect("re-encoded PDU decodes");
                assert_eq!(back, Some(pdu));
            }
            Ok(None) if !fed_rest => {
                buf.extend_from_slice(&rest[split..]);
                fed_rest = true;
            }
            Ok(None) => break,
            Err(e) if e.is_fatal() => break,
            Err(_) => {}
        }
    }
});
