//! Decoders of the data structures a host reads from a controller (Identify,
//! log pages, discovery log, namespace lists, reservation status): the first byte picks one, the
//! rest is its data. Whatever a controller sends must decode or fail with an
//! error, never panic or allocate by a count the data cannot back; what
//! decodes must encode again where the structure has an encoder. Also the
//! DH-HMAC-CHAP messages a controller sends (and a target receives), which
//! must round-trip.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nvmeof_common::auth::AuthMessage;
use nvmeof_common::spec::discovery::{DiscoveryLog, DiscoveryLogHeader};
use nvmeof_common::spec::dsm::decode_ranges;
use nvmeof_common::spec::identify::{decode_ns_desc_list, decode_ns_list};
use nvmeof_common::spec::log::{decode_error_log, AnaLog};
use nvmeof_common::spec::reservation::{ReservationNotification, ReservationStatus};
use nvmeof_common::spec::{IdentifyController, IdentifyNamespace};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, b)) = data.split_first() else { return };
    match sel % 11 {
        0 => {
            if let Ok(id) = IdentifyController::decode(b) {
                let _ = IdentifyController::decode(&id.encode());
            }
        }
        1 => {
            if let Ok(id) = IdentifyNamespace::decode(b) {
                let _ = IdentifyNamespace::decode(&id.encode());
            }
        }
        2 => {
            if let Ok(log) = AnaLog::decode(b) {
                let again = AnaLog::decode(&log.encode()).expect("an encoded ANA log decodes");
                assert_eq!(again, log);
            }
        }
        3 => {
            if let Ok(log) = DiscoveryLog::decode(b) {
                let _ = DiscoveryLog::decode(&log.encode());
            }
        }
        4 => {
            let _ = DiscoveryLogHeader::decode(b);
        }
        5 => {
            let _ = decode_error_log(b);
        }
        6 => {
            let _ = decode_ns_desc_list(b);
        }
        7 => {
            assert!(decode_ns_list(b).len() <= 1024);
        }
        8 => {
            if let Ok(m) = AuthMessage::decode(b) {
                assert_eq!(AuthMessage::decode(&m.encode()), Ok(m), "an encoded auth message decodes");
            }
        }
        9 => {
            if let Ok(s) = ReservationStatus::decode(b) {
                let again = ReservationStatus::decode(&s.encode(b.len())).expect("an encoded report decodes");
                assert_eq!(again, s);
            }
            let _ = ReservationNotification::decode(b);
        }
        _ => {
            let count = b.first().map_or(0, |&c| c as usize + 1);
            let _ = decode_ranges(b.get(1..).unwrap_or(&[]), count);
        }
    }
});
