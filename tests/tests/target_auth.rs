//! Target integration tests: DH-HMAC-CHAP in-band authentication, driven
//! message by message over loopback TCP (what nvmet does is the reference;
//! the Linux host against this target is the interop suite's `auth` step).

use std::time::Duration;

use bytes::Bytes;
use nvmeof_common::auth::chap::{self, Exchange};
use nvmeof_common::auth::message::{Failure, Negotiate, Reply};
use nvmeof_common::auth::{
    AuthCmd, AuthMessage, DhGroup, DhKeyPair, DhchapSecret, FailureReason, HashId, CONNECT_AUTHREQ_ATR,
};
use nvmeof_common::spec::identify::Cns;
use nvmeof_common::spec::property::PropertyOffset;
use nvmeof_common::spec::DISCOVERY_NQN;
use nvmeof_common::{SglDescriptor, Status};
use nvmeof_target::config::{HostKeys, TargetConfig};
use nvmeof_tests::harness::*;
use nvmeof_tests::raw_client::{Completion, RawClient, HOSTNQN};

const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:99999999-8888-7777-6666-555555555555";

fn host_key() -> DhchapSecret {
    DhchapSecret::new((1u8..=32).collect(), HashId::SHA256).unwrap()
}

fn ctrl_key() -> DhchapSecret {
    DhchapSecret::new((100u8..148).collect(), HashId::SHA384).unwrap()
}

/// The default configuration with HOSTNQN needing `keys` and OTHER_HOST allowed without.
fn config(keys: HostKeys) -> TargetConfig {
    let mut cfg = default_config();
    let s = &mut cfg.subsystems[0];
    s.allowed_hosts = Some(vec![HOSTNQN.into(), OTHER_HOST.into()]);
    s.host_keys.insert(HOSTNQN.into(), keys);
    cfg
}

async fn send(c: &mut RawClient, msg: &AuthMessage) -> Completion {
    let b = Bytes::from(msg.encode());
    c.submit(AuthCmd::dhchap(b.len() as u32).to_sqe(true, 0), Some(b)).await
}

async fn recv(c: &mut RawClient) -> AuthMessage {
    let al = 4096;
    let mut sqe = AuthCmd::dhchap(al).to_sqe(false, 0);
    sqe.set_sgl(SglDescriptor::transport(al));
    let r = c.submit(sqe, None).await.ok();
    assert_eq!(r.data.len(), al as usize, "Receive returns AL bytes");
    AuthMessage::decode(&r.data).expect("a message")
}

/// What the host side of one exchange does differently.
#[derive(Clone)]
struct Host {
    key: DhchapSecret,
    /// Ask the controller to authenticate with this key.
    ctrl_key: Option<DhchapSecret>,
    hashes: Vec<HashId>,
    groups: Vec<DhGroup>,
    t_id: u16,
    subnqn: String,
}

impl Host {
    fn new() -> Self {
        Self {
            key: host_key(),
            ctrl_key: None,
            hashes: HashId::ALL.to_vec(),
            groups: DhGroup::ALL.to_vec(),
            t_id: 7,
            subnqn: SUBNQN.into(),
        }
    }
}

/// Runs the exchange as the Linux host does; the controller's failure
/// message, or the negotiated hash and group.
async fn authenticate(c: &mut RawClient, h: &Host) -> Result<(HashId, DhGroup), Failure> {
    send(c, &AuthMessage::Negotiate(Negotiate::new(h.t_id, &h.hashes, &h.groups))).await.ok();
    let ch = match recv(c).await {
        AuthMessage::Challenge(ch) => ch,
        AuthMessage::Failure1(f) => return Err(f),
        m => panic!("expected a challenge, got {m:?}"),
    };
    assert_eq!(ch.t_id, h.t_id);
    assert_eq!(ch.challenge.len(), ch.hash.len());
    assert_eq!(ch.dh_value.len(), ch.dhgroup.value_len());
    let dh = DhKeyPair::generate(ch.dhgroup);
    let session = dh.as_ref().map(|d| d.shared_secret(&ch.dh_value).expect("the controller's DH value"));
    let aug = |c: &[u8]| match &session {
        Some(s) => chap::augmented_challenge(ch.hash, s, c),
        None => c.to_vec(),
    };
    let c1 = aug(&ch.challenge);
    // The NQN this queue connected with (R1 covers it).
    let hostnqn = c.hostnqn.clone();
    let x = Exchange {
        hash: ch.hash,
        challenge: &c1,
        seqnum: ch.seqnum,
        t_id: h.t_id,
        sc_c: 0,
        hostnqn: &hostnqn,
        subnqn: &h.subnqn,
    };
    let response = chap::host_response(&h.key.transformed(&hostnqn), &x);
    let c2 = nvmeof_common::auth::random_bytes(ch.hash.len());
    let s2 = 0x5eed;
    let reply = Reply {
        t_id: h.t_id,
        seqnum: if h.ctrl_key.is_some() { s2 } else { 0 },
        response,
        challenge: h.ctrl_key.as_ref().map(|_| c2.clone()),
        dh_value: dh.as_ref().map(|d| d.public().to_vec()).unwrap_or_default(),
    };
    send(c, &AuthMessage::Reply(reply)).await.ok();
    let s1 = match recv(c).await {
        AuthMessage::Success1(s) => s,
        AuthMessage::Failure1(f) => return Err(f),
        m => panic!("expected Success1, got {m:?}"),
    };
    assert_eq!((s1.t_id, s1.hl as usize), (h.t_id, ch.hash.len()));
    if let Some(k) = &h.ctrl_key {
        let c2 = aug(&c2);
        let x = Exchange { challenge: &c2, seqnum: s2, ..x };
        let want = chap::ctrl_response(&k.transformed(&h.subnqn), &x);
        if s1.response.as_deref() != Some(&want[..]) {
            send(c, &AuthMessage::Failure2(Failure::new(h.t_id, FailureReason::FAILED))).await.ok();
            return Err(Failure::new(h.t_id, FailureReason::FAILED));
        }
        send(c, &AuthMessage::Success2(h.t_id)).await.ok();
    } else {
        assert_eq!(s1.response, None, "no R2 unless asked");
    }
    Ok((ch.hash, ch.dhgroup))
}

/// An admin queue of HOSTNQN that still has to authenticate.
async fn admin(addr: std::net::SocketAddr) -> RawClient {
    let mut a = RawClient::connect(addr).await;
    let cqe = a.admin_connect(SUBNQN, HOSTNQN).await;
    assert!(cqe.status.is_success(), "{}", cqe.status);
    assert_ne!(cqe.dw0() & CONNECT_AUTHREQ_ATR, 0, "ATR set for a host with keys");
    a
}

fn auth_required() -> Status {
    Status::AUTH_REQUIRED.with_dnr()
}

#[tokio::test]
async fn every_queue_authenticates_before_its_commands_run() {
    let (_server, addr) = start(&config(HostKeys::new(host_key()))).await;
    let mut a = admin(addr).await;
    // Fabrics commands run before authentication (Property Get here), others
    // get Authentication Required with DNR (nvmet_check_auth_status).
    a.property_get(PropertyOffset::CAP, true).await.ok();
    a.enable().await;
    a.identify(Cns::CTRL, 0).await.expect_status(auth_required());
    assert_eq!(authenticate(&mut a, &Host::new()).await, Ok((HashId::SHA256, DhGroup::NULL)));
    a.identify(Cns::CTRL, 0).await.ok();
    // An I/O queue gets ATR too (nvmet 6.12 sets it on every queue) and
    // authenticates on its own.
    let mut io = RawClient::connect(addr).await;
    let cqe = io.io_connect(1, a.cntlid, SUBNQN, HOSTNQN).await;
    assert!(cqe.status.is_success() && cqe.dw0() & CONNECT_AUTHREQ_ATR != 0, "{cqe:?}");
    io.read(1, 0, 1, NS1_BS).await.expect_status(auth_required());
    authenticate(&mut io, &Host { t_id: 9, ..Host::new() }).await.unwrap();
    io.read(1, 0, 1, NS1_BS).await.ok();
    // Re-authentication (a new Negotiate on a live queue) keeps it usable.
    authenticate(&mut a, &Host { t_id: 10, ..Host::new() }).await.unwrap();
    a.identify(Cns::CTRL, 0).await.ok();
}

#[tokio::test]
async fn hosts_without_keys_and_the_discovery_controller_need_none() {
    let (_server, addr) = start(&config(HostKeys::new(host_key()))).await;
    let mut other = RawClient::connect(addr).await;
    let cqe = other.admin_connect(SUBNQN, OTHER_HOST).await;
    assert!(cqe.status.is_success() && cqe.dw0() & CONNECT_AUTHREQ_ATR == 0, "{cqe:?}");
    other.enable().await;
    other.identify(Cns::CTRL, 0).await.ok();
    // nvmet_setup_auth: never on the discovery subsystem.
    let mut disc = RawClient::connect(addr).await;
    let cqe = disc.admin_connect(DISCOVERY_NQN, HOSTNQN).await;
    assert!(cqe.status.is_success() && cqe.dw0() & CONNECT_AUTHREQ_ATR == 0, "{cqe:?}");
    disc.enable().await;
    disc.identify(Cns::CTRL, 0).await.ok();
}

#[tokio::test]
async fn configured_hash_and_group_are_used_in_both_directions() {
    for (hash, group) in [
        (HashId::SHA256, DhGroup::NULL),
        (HashId::SHA384, DhGroup::FFDHE2048),
        (HashId::SHA512, DhGroup::FFDHE3072),
    ] {
        let keys = HostKeys { ctrl_key: Some(ctrl_key()), hash, dhgroup: group, ..HostKeys::new(host_key()) };
        let (_server, addr) = start(&config(keys)).await;
        let mut a = admin(addr).await;
        let host = Host { ctrl_key: Some(ctrl_key()), ..Host::new() };
        assert_eq!(authenticate(&mut a, &host).await, Ok((hash, group)));
        a.enable().await;
        a.identify(Cns::CTRL, 0).await.ok();
    }
}

#[tokio::test]
async fn the_hosts_first_usable_choice_when_it_lacks_the_configured_one() {
    let keys = HostKeys { hash: HashId::SHA512, dhgroup: DhGroup::FFDHE4096, ..HostKeys::new(host_key()) };
    let (_server, addr) = start(&config(keys)).await;
    let mut a = admin(addr).await;
    // Unknown identifiers are skipped, as nvmet's fallback does.
    let host = Host {
        hashes: vec![HashId(9), HashId::SHA384],
        groups: vec![DhGroup(9), DhGroup::FFDHE2048],
        ..Host::new()
    };
    assert_eq!(authenticate(&mut a, &host).await, Ok((HashId::SHA384, DhGroup::FFDHE2048)));
    for (hashes, groups, why) in [
        (vec![HashId(9)], DhGroup::ALL.to_vec(), FailureReason::HASH_UNUSABLE),
        (HashId::ALL.to_vec(), vec![DhGroup(7)], FailureReason::DHGROUP_UNUSABLE),
    ] {
        let mut a = admin(addr).await;
        let host = Host { hashes, groups, ..Host::new() };
        assert_eq!(authenticate(&mut a, &host).await, Err(Failure::new(7, why)));
        // Failure1 ends the association (nvmet_ctrl_fatal_error).
        a.expect_closed_within(Duration::from_secs(5)).await;
    }
}

#[tokio::test]
async fn a_failed_exchange_sends_failure1_and_closes_the_queue() {
    let keys = HostKeys { ctrl_key: None, ..HostKeys::new(host_key()) };
    let (_server, addr) = start(&config(keys)).await;
    // The wrong secret.
    let mut a = admin(addr).await;
    let wrong = Host { key: DhchapSecret::new(vec![9; 32], HashId(0)).unwrap(), ..Host::new() };
    assert_eq!(authenticate(&mut a, &wrong).await, Err(Failure::new(7, FailureReason::FAILED)));
    a.expect_closed_within(Duration::from_secs(5)).await;
    // The right secret, against another subsystem NQN than Connect's: the
    // response covers both NQNs.
    let mut a = admin(addr).await;
    let other_nqn = Host { subnqn: "nqn.2024-01.io.nvmeof.test:other".into(), ..Host::new() };
    assert_eq!(authenticate(&mut a, &other_nqn).await, Err(Failure::new(7, FailureReason::FAILED)));
    // Bidirectional, but the target has no controller key.
    let mut a = admin(addr).await;
    let bidi = Host { ctrl_key: Some(ctrl_key()), ..Host::new() };
    assert_eq!(authenticate(&mut a, &bidi).await, Err(Failure::new(7, FailureReason::FAILED)));
    a.expect_closed_within(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn malformed_and_out_of_sequence_messages() {
    let keys = HostKeys { dhgroup: DhGroup::FFDHE2048, ..HostKeys::new(host_key()) };
    let (_server, addr) = start(&config(keys)).await;
    let neg = AuthMessage::Negotiate(Negotiate::new(3, &HashId::ALL, &DhGroup::ALL));

    // A Reply with another transaction ID: Failure1, Incorrect Payload.
    let mut a = admin(addr).await;
    send(&mut a, &neg).await.ok();
    let AuthMessage::Challenge(ch) = recv(&mut a).await else { panic!("no challenge") };
    let reply = |t_id, dh_value| {
        AuthMessage::Reply(Reply { t_id, seqnum: 0, response: vec![0; 32], challenge: None, dh_value })
    };
    send(&mut a, &reply(4, vec![])).await.ok();
    assert_eq!(recv(&mut a).await, AuthMessage::Failure1(Failure::new(3, FailureReason::INCORRECT_PAYLOAD)));
    a.expect_closed_within(Duration::from_secs(5)).await;

    // A degenerate DH value (1): DH group unusable.
    let mut a = admin(addr).await;
    send(&mut a, &neg).await.ok();
    let AuthMessage::Challenge(ch2) = recv(&mut a).await else { panic!("no challenge") };
    assert_eq!(ch2.dhgroup, DhGroup::FFDHE2048);
    assert_ne!(ch2.seqnum, ch.seqnum, "each challenge has its own sequence number");
    let mut one = vec![0u8; 256];
    one[255] = 1;
    send(&mut a, &reply(3, one)).await.ok();
    assert_eq!(recv(&mut a).await, AuthMessage::Failure1(Failure::new(3, FailureReason::DHGROUP_UNUSABLE)));

    // A Reply before any Negotiate: the queue closes at once (nvmet's
    // done_failure1 path), no failure message.
    let mut a = admin(addr).await;
    send(&mut a, &reply(3, vec![])).await.ok();
    a.expect_closed_within(Duration::from_secs(5)).await;

    // AUTH_Failure2 from the host ends it too.
    let mut a = admin(addr).await;
    send(&mut a, &neg).await.ok();
    send(&mut a, &AuthMessage::Failure2(Failure::new(3, FailureReason::FAILED))).await.ok();
    a.expect_closed_within(Duration::from_secs(5)).await;

    // Field checks, in nvmet's order, with DNR: SECP, SPSP0, SPSP1, a zero TL.
    let mut a = admin(addr).await;
    for (off, v) in [(43, 0xEA), (41, 0), (42, 2)] {
        let mut sqe = AuthCmd::dhchap(72).to_sqe(true, 0);
        sqe.set_byte(off, v);
        a.submit(sqe, Some(Bytes::from(neg.encode()))).await.expect_status(Status::INVALID_FIELD.with_dnr());
    }
    let mut sqe = AuthCmd::dhchap(0).to_sqe(false, 0);
    sqe.set_sgl(SglDescriptor::transport(0));
    a.submit(sqe, None).await.expect_status(Status::INVALID_FIELD.with_dnr());
    // Above this target's limit (8 KiB).
    let mut sqe = AuthCmd::dhchap(8193).to_sqe(false, 0);
    sqe.set_sgl(SglDescriptor::transport(8193));
    a.submit(sqe, None).await.expect_status(Status::INVALID_FIELD.with_dnr());
    // The queue still authenticates afterwards.
    authenticate(&mut a, &Host::new()).await.unwrap();
    a.enable().await;
    a.identify(Cns::CTRL, 0).await.ok();
}

/// A host that connects but does not authenticate holds its connection no
/// longer than a host that never connects (the ICReq/Connect limit); an
/// authenticated one is not timed.
#[tokio::test]
async fn a_queue_that_does_not_authenticate_in_time_is_closed() {
    let mut cfg = config(HostKeys::new(host_key()));
    cfg.limits.icreq_timeout_ms = 300;
    let (_server, addr) = start(&cfg).await;
    let mut idle = admin(addr).await;
    let mut done = admin(addr).await;
    authenticate(&mut done, &Host::new()).await.unwrap();
    idle.expect_closed_within(Duration::from_secs(3)).await;
    assert!(done.is_open_for(Duration::from_millis(500)).await, "an authenticated queue was closed");
    done.enable().await;
    done.identify(Cns::CTRL, 0).await.ok();
}

/// SIGHUP (a reload) rotates the keys: new associations need the new secret,
/// one made before keeps working and re-authenticates with the new one, and
/// a host whose key is removed connects without authenticating.
#[tokio::test]
async fn a_reload_rotates_the_keys() {
    let (server, addr) = start(&config(HostKeys::new(host_key()))).await;
    let mut before = admin(addr).await;
    authenticate(&mut before, &Host::new()).await.unwrap();
    before.enable().await;
    let new_key = DhchapSecret::new(vec![0x42; 48], HashId::SHA384).unwrap();
    server.reload(&config(HostKeys::new(new_key.clone()))).unwrap();
    let mut a = admin(addr).await;
    assert_eq!(authenticate(&mut a, &Host::new()).await, Err(Failure::new(7, FailureReason::FAILED)));
    let mut a = admin(addr).await;
    authenticate(&mut a, &Host { key: new_key.clone(), ..Host::new() }).await.unwrap();
    before.identify(Cns::CTRL, 0).await.ok();
    // The association made before re-authenticates with the new key: a
    // Negotiate on its admin queue takes the subsystem's current keys
    // (nvmet_setup_auth).
    authenticate(&mut before, &Host { key: new_key, t_id: 11, ..Host::new() }).await.unwrap();
    before.identify(Cns::CTRL, 0).await.ok();
    // Without keys for the host: no ATR any more.
    let mut cfg = config(HostKeys::new(host_key()));
    cfg.subsystems[0].host_keys.clear();
    server.reload(&cfg).unwrap();
    let mut a = RawClient::connect(addr).await;
    let cqe = a.admin_connect(SUBNQN, HOSTNQN).await;
    assert!(cqe.status.is_success() && cqe.dw0() & CONNECT_AUTHREQ_ATR == 0, "{cqe:?}");
}

/// A reload that allows another host with keys makes it authenticate from
/// its first Connect (hosts and keys change together), and one that drops a
/// keyed host refuses its new Connects while its association stays.
#[tokio::test]
async fn a_reload_adds_and_removes_hosts_with_keys() {
    const THIRD: &str = "nqn.2014-08.org.nvmexpress:uuid:33333333-3333-3333-3333-333333333333";
    let mut cfg = config(HostKeys::new(host_key()));
    let (server, addr) = start(&cfg).await;
    let mut before = admin(addr).await;
    authenticate(&mut before, &Host::new()).await.unwrap();
    before.enable().await;
    let cqe = RawClient::connect(addr).await.admin_connect(SUBNQN, THIRD).await;
    assert_eq!(cqe.status, Status::CONNECT_INVALID_HOST.with_dnr());

    cfg.subsystems[0].allowed_hosts = Some(vec![OTHER_HOST.into(), THIRD.into()]);
    cfg.subsystems[0].host_keys.clear();
    cfg.subsystems[0].host_keys.insert(THIRD.into(), HostKeys::new(host_key()));
    server.reload(&cfg).unwrap();
    let mut third = RawClient::connect(addr).await;
    let cqe = third.admin_connect(SUBNQN, THIRD).await;
    assert!(cqe.status.is_success() && cqe.dw0() & CONNECT_AUTHREQ_ATR != 0, "{cqe:?}");
    third.enable().await;
    third.identify(Cns::CTRL, 0).await.expect_status(auth_required());
    authenticate(&mut third, &Host::new()).await.unwrap();
    third.identify(Cns::CTRL, 0).await.ok();
    // HOSTNQN is no longer allowed: its association stays, new ones are refused.
    let cqe = RawClient::connect(addr).await.admin_connect(SUBNQN, HOSTNQN).await;
    assert_eq!(cqe.status, Status::CONNECT_INVALID_HOST.with_dnr());
    before.identify(Cns::CTRL, 0).await.ok();
}
