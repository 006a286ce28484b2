//! Known-answer layouts, error variants and round trips for the PDU codec.

use super::*;
use crate::cqe::Cqe;
use crate::decoder::{DecoderConfig, PduDecoder, Role};
use crate::error::{DecodeError, Fes};
use crate::sqe::{SglDescriptor, Sqe};
use crate::status::Status;
use proptest::prelude::*;

fn dec(role: Role, hd: bool, dd: bool) -> PduDecoder {
    PduDecoder::new(DecoderConfig { hdgst: hd, ddgst: dd, ..DecoderConfig::new(role) })
}

fn decode_all(role: Role, hd: bool, dd: bool, bytes: &[u8]) -> Result<Option<Pdu>, DecodeError> {
    let mut buf = BytesMut::from(bytes);
    let r = dec(role, hd, dd).decode(&mut buf);
    if let Ok(Some(_)) = r {
        assert!(buf.is_empty());
    }
    r
}

/// Reference §3.8, laid out by hand: a 4 KiB read CapsuleCmd and its C2HData.
#[test]
fn hand_laid_read_capsule_and_c2h_data() {
    let mut sqe = Sqe::new(0x02);
    sqe.set_cid(0x0003).set_nsid(1).set_sgl(SglDescriptor::transport(4096)).set_slba(0).set_nlb(7);
    let cmd = Pdu::CapsuleCmd(CapsuleCmd::new(sqe));
    let bytes = cmd.encode_to_vec(&EncodeConfig::default());
    let mut expected = vec![0x04, 0x00, 0x48, 0x00, 0x48, 0x00, 0x00, 0x00];
    expected.extend_from_slice(&[0x02, 0x40, 0x03, 0x00, 0x01, 0, 0, 0]);
    expected.extend_from_slice(&[0; 16]); // CDW2-3, MPTR
    expected.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x10, 0, 0, 0, 0, 0, 0x5A]);
    expected.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0]);
    expected.extend_from_slice(&[0; 12]);
    assert_eq!(bytes, expected);
    assert_eq!(decode_all(Role::Controller, false, false, &bytes).unwrap(), Some(cmd));

    let data: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
    let c2h = Pdu::C2hData(C2hData {
        cccid: 3,
        datao: 0,
        data: Bytes::from(data.clone()),
        last: true,
        success: false,
    });
    let bytes = c2h.encode_to_vec(&EncodeConfig::default());
    assert_eq!(
        &bytes[..24],
        &[0x07, 0x04, 0x18, 0x18, 0x18, 0x10, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(&bytes[24..], &data[..]);
    assert_eq!(decode_all(Role::Host, false, false, &bytes).unwrap(), Some(c2h));
}

/// Reference §1.6: a CapsuleResp with header digest.
#[test]
fn capsule_resp_with_header_digest_known_answer() {
    let resp = Pdu::CapsuleResp(CapsuleResp { cqe: Cqe::default() });
    let bytes = resp.encode_to_vec(&EncodeConfig { hdgst: true, ddgst: true, pda: 0 });
    assert_eq!(&bytes[..8], &[0x05, 0x01, 0x18, 0x00, 0x1c, 0, 0, 0]);
    assert_eq!(&bytes[24..], &[0x9b, 0x12, 0x03, 0x89]);
    assert_eq!(decode_all(Role::Host, true, true, &bytes).unwrap(), Some(resp));
}

#[test]
fn data_digest_pdo_and_padding() {
    let d = Pdu::H2cData(H2cData {
        cccid: 9,
        ttag: 2,
        datao: 4096,
        data: Bytes::from(vec![0u8; 32]),
        last: true,
    });
    let cfg = EncodeConfig { hdgst: true, ddgst: true, pda: 3 };
    let bytes = d.encode_to_vec(&cfg);
    // PDO = round_up(24 + 4, 16) = 32, zero padding, DDGST of 32 zero bytes.
    assert_eq!(bytes[3], 32);
    assert_eq!(bytes[1], PduFlags::HDGSTF | PduFlags::DDGSTF | PduFlags::LAST_PDU);
    assert_eq!(&bytes[28..32], &[0; 4]);
    assert_eq!(&bytes[64..], &[0xaa, 0x36, 0x91, 0x8a]);
    assert_eq!(u32::from_le_bytes(bytes[4..8].try_into().unwrap()), 68);
    let mut p = PduDecoder::new(DecoderConfig {
        hdgst: true,
        ddgst: true,
        pda: 3,
        ..DecoderConfig::new(Role::Controller)
    });
    assert_eq!(p.decode(&mut BytesMut::from(&bytes[..])).unwrap(), Some(d));
}

#[test]
fn not_yet_until_whole_pdu() {
    let resp =
        Pdu::R2t(R2t { cccid: 1, ttag: 2, r2to: 0, r2tl: 8192 }).encode_to_vec(&EncodeConfig::default());
    let mut d = dec(Role::Host, false, false);
    let mut buf = BytesMut::new();
    for (i, b) in resp.iter().enumerate() {
        buf.extend_from_slice(&[*b]);
        let r = d.decode(&mut buf).unwrap();
        assert_eq!(r.is_some(), i == resp.len() - 1);
    }
}

fn ch(ty: u8, flags: u8, hlen: u8, pdo: u8, plen: u32) -> Vec<u8> {
    let mut v = vec![ty, flags, hlen, pdo];
    v.extend_from_slice(&plen.to_le_bytes());
    v.resize(plen.max(8) as usize, 0);
    v
}

/// One test per decode-error variant, with its FES/FEI mapping.
#[test]
fn every_decode_error_variant() {
    use DecodeError::*;
    let c = Role::Controller;
    let h = Role::Host;
    let check = |role, hd, dd, bytes: Vec<u8>, want: DecodeError, fes: Fes, fei: u32| {
        let got = decode_all(role, hd, dd, &bytes).unwrap_err();
        assert_eq!(got, want);
        assert_eq!((got.fes(), got.fei()), (fes, fei), "{want:?}");
    };
    let ihf = Fes::INVALID_HEADER_FIELD;
    check(c, false, false, ch(0x08, 0, 24, 0, 24), UnknownPduType(8), ihf, 0);
    check(c, false, false, ch(0x05, 0, 24, 0, 24), UnexpectedPduType(PduType::CAPSULE_RESP), ihf, 0);
    check(
        c,
        false,
        false,
        ch(0x04, 0, 24, 0, 72),
        InvalidHlen { pdu_type: PduType::CAPSULE_CMD, hlen: 24 },
        ihf,
        2,
    );
    check(
        c,
        false,
        false,
        ch(0x00, 0, 128, 0, 127),
        InvalidPlen { pdu_type: PduType::IC_REQ, plen: 127 },
        ihf,
        4,
    );
    check(h, false, false, ch(0x09, 0, 24, 24, 24), InvalidPdo { pdu_type: PduType::R2T, pdo: 24 }, ihf, 3);
    check(
        c,
        false,
        false,
        ch(0x06, 0, 24, 20, 40),
        InvalidPdo { pdu_type: PduType::H2C_DATA, pdo: 20 },
        ihf,
        3,
    );
    check(c, true, false, ch(0x04, 0, 72, 0, 72), MissingHeaderDigest(PduType::CAPSULE_CMD), ihf, 1);
    check(c, false, false, ch(0x04, 1, 72, 0, 76), UnexpectedHeaderDigest(PduType::CAPSULE_CMD), ihf, 1);
    check(c, false, true, ch(0x06, 0, 24, 24, 32), MissingDataDigest(PduType::H2C_DATA), ihf, 1);
    check(c, false, false, ch(0x06, 2, 24, 24, 32), UnexpectedDataDigest(PduType::H2C_DATA), ihf, 1);
    // SUCCESS without LAST_PDU.
    let mut p = ch(0x07, PduFlags::SUCCESS, 24, 24, 28);
    p[16] = 4;
    check(h, false, false, p, InvalidFlags { pdu_type: PduType::C2H_DATA, flags: 8 }, ihf, 1);
    // Header digest mismatch.
    let mut p = Pdu::CapsuleResp(CapsuleResp { cqe: Cqe::default() })
        .encode_to_vec(&EncodeConfig { hdgst: true, ..Default::default() });
    p[24] ^= 1;
    let got = decode_all(h, true, false, &p).unwrap_err();
    assert!(matches!(got, HeaderDigest { .. }));
    assert_eq!((got.fes(), got.fei()), (Fes::HEADER_DIGEST, 0));
    // Data digest mismatch: reported with the CID, not fatal.
    let mut p = Pdu::C2hData(C2hData {
        cccid: 77,
        datao: 0,
        data: Bytes::from_static(&[1, 2, 3, 4]),
        last: true,
        success: false,
    })
    .encode_to_vec(&EncodeConfig { hdgst: false, ddgst: true, pda: 0 });
    p[25] ^= 1;
    let got = decode_all(h, false, true, &p).unwrap_err();
    assert!(matches!(got, DataDigest { cccid: 77, .. }));
    assert!(!got.is_fatal());
    // DATAL disagrees with PLEN.
    let mut p = ch(0x06, 0, 24, 24, 32);
    p[16] = 4;
    check(
        c,
        false,
        false,
        p,
        DataLengthMismatch { pdu_type: PduType::H2C_DATA, datal: 4, actual: 8 },
        ihf,
        16,
    );
    // Zero-length data PDU (PDO = PLEN).
    check(
        c,
        false,
        false,
        ch(0x06, 0, 24, 24, 24),
        InvalidPdo { pdu_type: PduType::H2C_DATA, pdo: 24 },
        ihf,
        3,
    );
    // Over-long data: rejected from the common header alone, before buffering.
    let mut d = PduDecoder::new(DecoderConfig { max_data_pdu: 8192, ..DecoderConfig::new(c) });
    let mut buf = BytesMut::from(&ch(0x06, 0, 24, 24, 24 + 8193)[..8]);
    let got = d.decode(&mut buf).unwrap_err();
    assert_eq!(got, DataTooLong { pdu_type: PduType::H2C_DATA, len: 8193, max: 8192 });
    assert_eq!((got.fes(), got.fei()), (Fes::DATA_LIMIT_EXCEEDED, 0));
    // ICReq/ICResp field validation.
    let bad = IcReq { pfv: 1, ..Default::default() }.validate(0).unwrap_err();
    assert_eq!((bad.clone(), bad.fes(), bad.fei()), (UnsupportedPfv(1), ihf, 8));
    let bad = IcReq { hpda: 1, ..Default::default() }.validate(0).unwrap_err();
    assert_eq!((bad.clone(), bad.fei()), (UnsupportedPda(1), 10));
    let bad = IcReq { dgst: DigestFlags(4), ..Default::default() }.validate(0).unwrap_err();
    assert_eq!((bad.clone(), bad.fei()), (InvalidDigestField(4), 11));
    let resp = IcResp { maxh2cdata: 1000, ..Default::default() };
    assert!(matches!(resp.validate(DigestFlags(0), 0), Err(InvalidIcResp(_))));
    let resp = IcResp { maxh2cdata: 4096, dgst: DigestFlags(1), ..Default::default() };
    assert_eq!(resp.validate(DigestFlags(0), 0), Err(InvalidDigestField(1)));
    // TermReq PLEN outside 24..=152.
    check(
        h,
        false,
        false,
        ch(0x03, 0, 24, 0, 153),
        InvalidPlen { pdu_type: PduType::C2H_TERM_REQ, plen: 153 },
        ihf,
        4,
    );
}

#[test]
fn term_req_carries_offending_header() {
    let err = DecodeError::InvalidHlen { pdu_type: PduType::CAPSULE_CMD, hlen: 24 };
    let offending = ch(0x04, 0, 24, 0, 72);
    let t = TermReq::for_error(&err, &offending);
    let bytes = Pdu::C2hTermReq(t.clone()).encode_to_vec(&EncodeConfig { hdgst: true, ddgst: true, pda: 0 });
    // No digests on TermReq, error data right after the 24-byte header.
    assert_eq!(&bytes[..8], &[0x03, 0, 24, 0, 96, 0, 0, 0]);
    assert_eq!(&bytes[8..14], &[1, 0, 2, 0, 0, 0]);
    assert_eq!(&bytes[24..], &offending[..]);
    assert_eq!(decode_all(Role::Host, true, true, &bytes).unwrap(), Some(Pdu::C2hTermReq(t)));
}

fn arb_bytes(max: usize) -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 1..max).prop_map(Bytes::from)
}

fn arb_sqe() -> impl Strategy<Value = Sqe> {
    proptest::collection::vec(any::<u8>(), 64).prop_map(|v| Sqe::from_slice(&v))
}

fn arb_pdu() -> impl Strategy<Value = Pdu> {
    prop_oneof![
        (any::<u8>(), any::<u8>(), any::<u32>()).prop_map(|(h, d, m)| Pdu::IcReq(IcReq {
            pfv: 0,
            hpda: h % 32,
            dgst: DigestFlags(d & 3),
            maxr2t: m
        })),
        (any::<u8>(), any::<u8>(), any::<u32>()).prop_map(|(c, d, m)| Pdu::IcResp(IcResp {
            pfv: 0,
            cpda: c % 32,
            dgst: DigestFlags(d & 3),
            maxh2cdata: m
        })),
        (any::<u16>(), any::<u32>(), proptest::collection::vec(any::<u8>(), 0..128))
            .prop_map(|(f, i, d)| Pdu::H2cTermReq(TermReq { fes: Fes(f), fei: i, data: d.into() })),
        (any::<u16>(), any::<u32>(), proptest::collection::vec(any::<u8>(), 0..128))
            .prop_map(|(f, i, d)| Pdu::C2hTermReq(TermReq { fes: Fes(f), fei: i, data: d.into() })),
        (arb_sqe(), proptest::option::of(arb_bytes(3000)))
            .prop_map(|(s, d)| Pdu::CapsuleCmd(CapsuleCmd { sqe: s, data: d.unwrap_or_default() })),
        (any::<u64>(), any::<u16>(), any::<u16>(), any::<u16>(), any::<u16>()).prop_map(|(r, h, q, c, s)| {
            Pdu::CapsuleResp(CapsuleResp {
                cqe: Cqe { result: r, sqhd: h, sqid: q, cid: c, status: Status(s & 0x7FFF) },
            })
        }),
        (any::<u16>(), any::<u16>(), any::<u32>(), arb_bytes(3000), any::<bool>()).prop_map(
            |(c, t, o, d, l)| Pdu::H2cData(H2cData { cccid: c, ttag: t, datao: o, data: d, last: l })
        ),
        (any::<u16>(), any::<u32>(), arb_bytes(3000), any::<bool>(), any::<bool>()).prop_map(
            |(c, o, d, l, s)| {
                Pdu::C2hData(C2hData { cccid: c, datao: o, data: d, last: l || s, success: s })
            }
        ),
        (any::<u16>(), any::<u16>(), any::<u32>(), any::<u32>()).prop_map(|(c, t, o, l)| Pdu::R2t(R2t {
            cccid: c,
            ttag: t,
            r2to: o,
            r2tl: l
        })),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Every PDU survives encode → decode under every digest/alignment setting.
    #[test]
    fn round_trip(pdu in arb_pdu(), hd in any::<bool>(), dd in any::<bool>(), pda in 0u8..4) {
        let role = if pdu.pdu_type().is_h2c() { Role::Controller } else { Role::Host };
        let bytes = pdu.encode_to_vec(&EncodeConfig { hdgst: hd, ddgst: dd, pda });
        let mut d = PduDecoder::new(DecoderConfig { hdgst: hd, ddgst: dd, pda, ..DecoderConfig::new(role) });
        let mut buf = BytesMut::from(&bytes[..]);
        prop_assert_eq!(d.decode(&mut buf).unwrap(), Some(pdu));
        prop_assert!(buf.is_empty());
    }

    /// Arbitrary bytes never panic the decoder, in either role and any config.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600),
                                   host in any::<bool>(), hd in any::<bool>(), dd in any::<bool>(),
                                   split in 0usize..600) {
        let role = if host { Role::Host } else { Role::Controller };
        let mut d = PduDecoder::new(DecoderConfig { hdgst: hd, ddgst: dd, max_data_pdu: 512, max_capsule_data: 512, ..DecoderConfig::new(role) });
        let mut buf = BytesMut::from(&bytes[..split.min(bytes.len())]);
        let _ = d.decode(&mut buf);
        buf.extend_from_slice(&bytes[split.min(bytes.len())..]);
        for _ in 0..64 {
            match d.decode(&mut buf) {
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(e) if e.is_fatal() => break,
                Err(_) => continue,
            }
        }
    }
}

#[test]
fn errors_in_a_whole_pdu_leave_it_in_the_buffer() {
    // Header digest and DATAL are checked once the whole PDU is in; like the
    // errors found from its first bytes, they leave it (and what follows) in
    // `buf` for the caller to quote.
    let mut bad = Pdu::CapsuleCmd(CapsuleCmd::new(Sqe::new(0x06)))
        .encode_to_vec(&EncodeConfig { hdgst: true, ..Default::default() });
    bad[73] ^= 1;
    let mut p = ch(0x06, 0, 24, 24, 32);
    p[16] = 4;
    for (hd, pdu) in [(true, bad), (false, p)] {
        let mut bytes = pdu.clone();
        bytes.extend_from_slice(&[9; 30]);
        let mut buf = BytesMut::from(&bytes[..]);
        let e = dec(Role::Controller, hd, false).decode(&mut buf).unwrap_err();
        assert!(e.is_fatal(), "{e:?}");
        assert_eq!(&buf[..], &bytes[..], "{e:?}");
    }
}
