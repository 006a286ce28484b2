//! DH-HMAC-CHAP in-band authentication of one queue, host side, as the Linux
//! host runs it (`nvme_queue_auth_work` in `drivers/nvme/host/auth.c`), right
//! after a Connect whose response sets AUTHREQ.ATR (`nvmf_connect_admin_queue`,
//! `nvmf_connect_io_queue`):
//!
//! 1. Authentication Send: AUTH_Negotiate, every hash and DH group;
//! 2. Authentication Receive: DH-HMAC-CHAP_Challenge (or AUTH_Failure1);
//! 3. Authentication Send: DH-HMAC-CHAP_Reply with R1 (and S2, C2 when
//!    the controller must authenticate too);
//! 4. Authentication Receive: DH-HMAC-CHAP_Success1 (R2 checked when asked);
//! 5. Authentication Send: DH-HMAC-CHAP_Success2 (bidirectional only), or
//!    AUTH_Failure2 when the host refuses the controller's answer.
//!
//! [`HostExchange`] holds the protocol steps without any I/O (and is what the
//! unit tests drive); [`authenticate`] runs them over a queue's connection
//! with setup commands, before the queue accepts anything else.

use std::time::Duration;

use nvmeof_common::auth::chap::{
    ctrl_response, host_response, response_challenge, responses_equal, Exchange,
};
use nvmeof_common::auth::message::{Challenge, Failure, Negotiate, Reply};
use nvmeof_common::auth::{
    next_seqnum, random_bytes, AuthCmd, AuthMessage, DhGroup, DhKeyPair, DhchapSecret, FailureReason, HashId,
};
use tracing::{debug, info, warn};

use crate::driver::{Payload, QueueShared};
use crate::error::{AuthError, Error, Result};

/// Allocation length of every Authentication Receive: Linux's `CHAP_BUF_SIZE`
/// (4 KiB, "enough for ffdhe8192"; a challenge is at most 16 + 64 + 1024
/// bytes). nvmet, and our target, answer with exactly AL bytes.
pub(crate) const RECEIVE_LEN: u32 = 4096;

/// Why a step failed, and the AUTH_Failure2 explanation to send, if any.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Fail {
    pub(crate) reason: AuthError,
    /// Explanation of the AUTH_Failure2 to send before giving up. Linux sends
    /// one for unusable parameters and a wrong R2 (`goto fail2`), none for an
    /// AUTH_Failure1 or a message of the wrong type or transaction.
    pub(crate) failure2: Option<FailureReason>,
}

impl Fail {
    /// A controller message the host answers with AUTH_Failure2 (`why`).
    fn refuse(what: impl Into<String>, why: FailureReason) -> Self {
        Self { reason: AuthError::Protocol { what: what.into(), sent: Some(why) }, failure2: Some(why) }
    }

    /// A controller message the host stops at without answering.
    fn stop(reason: AuthError) -> Self {
        Self { reason, failure2: None }
    }
}

/// What the challenge fixed, kept for checking Success1. No `Debug`: it
/// holds the session key.
struct Negotiated {
    hash: HashId,
    dhgroup: DhGroup,
    /// The Diffie-Hellman shared secret (not for the NULL group).
    session_key: Option<Vec<u8>>,
    /// S2 and C2 when the host asked the controller to authenticate.
    ctrl_challenge: Option<(u32, Vec<u8>)>,
}

/// One DH-HMAC-CHAP transaction of the host on one queue, without I/O.
pub(crate) struct HostExchange {
    qid: u16,
    t_id: u16,
    hostnqn: String,
    subnqn: String,
    key: DhchapSecret,
    ctrl_key: Option<DhchapSecret>,
    negotiated: Option<Negotiated>,
}

impl HostExchange {
    /// A transaction `t_id` on queue `qid` with the host's `key` and, for
    /// bidirectional authentication, the controller's `ctrl_key`.
    pub(crate) fn new(
        qid: u16,
        t_id: u16,
        hostnqn: &str,
        subnqn: &str,
        key: DhchapSecret,
        ctrl_key: Option<DhchapSecret>,
    ) -> Self {
        Self {
            qid,
            t_id,
            hostnqn: hostnqn.to_string(),
            subnqn: subnqn.to_string(),
            key,
            ctrl_key,
            negotiated: None,
        }
    }

    /// AUTH_Negotiate: one DH-HMAC-CHAP descriptor with every hash and group
    /// (`nvme_auth_set_dhchap_negotiate_data`), no secure channel concatenation.
    pub(crate) fn negotiate(&self) -> Vec<u8> {
        AuthMessage::Negotiate(Negotiate::new(self.t_id, &HashId::ALL, &DhGroup::ALL)).encode()
    }

    /// AUTH_Failure2 with `why`.
    pub(crate) fn failure2(&self, why: FailureReason) -> Vec<u8> {
        AuthMessage::Failure2(Failure::new(self.t_id, why)).encode()
    }

    /// The message the controller answered with, if `pick` takes it and it
    /// belongs to this transaction (`nvme_auth_receive_validate`: AUTH_Failure1
    /// gives its explanation; another message or another transaction ends
    /// the exchange without an AUTH_Failure2).
    fn expect<T>(&self, data: &[u8], what: &str, pick: fn(AuthMessage) -> Option<T>) -> Result<T, Fail> {
        let m = match AuthMessage::decode(data) {
            Ok(AuthMessage::Failure1(f)) => return Err(Fail::stop(AuthError::Refused(f.explanation))),
            Ok(m) => m,
            Err(why) => {
                return Err(Fail::stop(AuthError::Protocol {
                    what: format!("unreadable message instead of {what}: {why}"),
                    sent: None,
                }))
            }
        };
        let (id, t_id) = (m.id(), m.t_id());
        let Some(v) = pick(m) else {
            return Err(Fail::stop(AuthError::Protocol {
                what: format!("message {id:#04x} instead of {what}"),
                sent: None,
            }));
        };
        if t_id != self.t_id {
            return Err(Fail::stop(AuthError::Protocol {
                what: format!("{what} of transaction {t_id}, expected {}", self.t_id),
                sent: None,
            }));
        }
        Ok(v)
    }

    /// Checks the controller's answer to AUTH_Negotiate: a DH-HMAC-CHAP_Challenge
    /// with a hash and group the host offered and values of their sizes
    /// (`nvme_auth_process_dhchap_challenge`).
    pub(crate) fn challenge(&self, data: &[u8]) -> Result<Challenge, Fail> {
        let c = self.expect(data, "DH-HMAC-CHAP_Challenge", |m| match m {
            AuthMessage::Challenge(c) => Some(c),
            _ => None,
        })?;
        // A hash of another length (HL) is unusable too (Linux: "invalid hash length").
        if !HashId::ALL.contains(&c.hash) || c.challenge.len() != c.hash.len() {
            return Err(Fail::refuse(
                format!("challenge with hash {} and HL {}", c.hash.0, c.challenge.len()),
                FailureReason::HASH_UNUSABLE,
            ));
        }
        if !DhGroup::ALL.contains(&c.dhgroup) {
            return Err(Fail::refuse(
                format!("challenge with DH group {}, which the host did not offer", c.dhgroup.0),
                FailureReason::DHGROUP_UNUSABLE,
            ));
        }
        if c.dhgroup == DhGroup::NULL {
            if !c.dh_value.is_empty() {
                // Linux: "invalid DH value for NULL DH".
                return Err(Fail::refuse(
                    format!("challenge with the NULL DH group and a {}-byte DH value", c.dh_value.len()),
                    FailureReason::INCORRECT_PAYLOAD,
                ));
            }
        } else if c.dh_value.len() != c.dhgroup.value_len() {
            // Linux refuses an empty value ("empty DH value") as an unusable
            // group, and a value of another length fails the shared secret.
            let why = if c.dh_value.is_empty() {
                FailureReason::DHGROUP_UNUSABLE
            } else {
                FailureReason::INCORRECT_PAYLOAD
            };
            return Err(Fail::refuse(
                format!(
                    "challenge with a {}-byte DH value for {} ({} bytes)",
                    c.dh_value.len(),
                    c.dhgroup.name().unwrap_or("?"),
                    c.dhgroup.value_len()
                ),
                why,
            ));
        }
        Ok(c)
    }

    /// The DH-HMAC-CHAP_Reply to a checked challenge: the host's DH value
    /// and, with it, the challenge augmented with the shared secret; R1 with
    /// the host key transformed by the host NQN; S2 (nonzero) and a random
    /// C2 for bidirectional authentication, else S2 = 0 and no C2
    /// (`nvme_auth_set_dhchap_reply_data`). The Diffie-Hellman part costs
    /// two modular exponentiations: run it off the async threads.
    pub(crate) fn reply(&mut self, c: &Challenge) -> Result<Vec<u8>, Fail> {
        let (hash, dhgroup) = (c.hash, c.dhgroup);
        let (dh_value, session_key) = match DhKeyPair::generate(dhgroup) {
            None => (Vec::new(), None),
            Some(pair) => {
                let s = pair.shared_secret(&c.dh_value).map_err(|e| {
                    Fail::refuse(format!("the controller's DH value: {e}"), FailureReason::INCORRECT_PAYLOAD)
                })?;
                (pair.public().to_vec(), Some(s))
            }
        };
        let c1 = response_challenge(hash, session_key.as_deref(), &c.challenge);
        let x = self.exchange(hash, &c1, c.seqnum);
        let response = host_response(&self.key.transformed(&self.hostnqn), &x);
        let ctrl_challenge = self.ctrl_key.as_ref().map(|_| (next_seqnum(), random_bytes(hash.len())));
        let reply = Reply {
            t_id: self.t_id,
            seqnum: ctrl_challenge.as_ref().map_or(0, |(s2, _)| *s2),
            response,
            challenge: ctrl_challenge.as_ref().map(|(_, c2)| c2.clone()),
            dh_value,
        };
        self.negotiated = Some(Negotiated { hash, dhgroup, session_key, ctrl_challenge });
        Ok(AuthMessage::Reply(reply).encode())
    }

    /// Checks DH-HMAC-CHAP_Success1 (`nvme_auth_process_dhchap_success1`);
    /// returns the DH-HMAC-CHAP_Success2 to send when the controller had to
    /// authenticate too. Stricter than Linux, which accepts a Success1
    /// without R2 (RVALID clear) after asking for one: here that fails, since
    /// the controller would not have proven anything.
    pub(crate) fn success1(&self, data: &[u8]) -> Result<Option<Vec<u8>>, Fail> {
        let n = self.negotiated.as_ref().expect("success1 follows reply");
        let s = self.expect(data, "DH-HMAC-CHAP_Success1", |m| match m {
            AuthMessage::Success1(s) => Some(s),
            _ => None,
        })?;
        if s.hl as usize != n.hash.len() {
            return Err(Fail::refuse(
                format!("Success1 with HL {}, the hash's is {}", s.hl, n.hash.len()),
                FailureReason::HASH_UNUSABLE,
            ));
        }
        let (Some((s2, c2)), Some(ctrl_key)) = (&n.ctrl_challenge, &self.ctrl_key) else {
            if s.response.is_some() {
                debug!(qid = self.qid, "Success1 carries a response the host did not ask for; ignored");
            }
            return Ok(None);
        };
        let Some(r2) = &s.response else {
            return Err(Fail::refuse(
                "Success1 without the controller's response (RVALID clear) to the host's challenge",
                FailureReason::FAILED,
            ));
        };
        // C2 augmented with the same session key as C1 (`nvme_auth_dhchap_setup_ctrl_response`),
        // the controller key transformed with the subsystem NQN.
        let c2 = response_challenge(n.hash, n.session_key.as_deref(), c2);
        let want = ctrl_response(&ctrl_key.transformed(&self.subnqn), &self.exchange(n.hash, &c2, *s2));
        if !responses_equal(&want, r2) {
            return Err(Fail {
                reason: AuthError::ControllerMismatch,
                failure2: Some(FailureReason::FAILED),
            });
        }
        Ok(Some(AuthMessage::Success2(self.t_id).encode()))
    }

    fn exchange<'a>(&'a self, hash: HashId, challenge: &'a [u8], seqnum: u32) -> Exchange<'a> {
        Exchange {
            hash,
            challenge,
            seqnum,
            t_id: self.t_id,
            sc_c: 0,
            hostnqn: &self.hostnqn,
            subnqn: &self.subnqn,
        }
    }

    /// What was negotiated, once the reply is built.
    fn summary(&self) -> Authentication {
        let n = self.negotiated.as_ref().expect("the reply was built");
        Authentication { hash: n.hash, dhgroup: n.dhgroup, bidirectional: n.ctrl_challenge.is_some() }
    }
}

/// What a DH-HMAC-CHAP exchange used ([`ControllerInfo::authentication`](crate::ControllerInfo::authentication)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Authentication {
    /// The hash function.
    pub hash: HashId,
    /// The Diffie-Hellman group (NULL: none).
    pub dhgroup: DhGroup,
    /// The controller authenticated itself too (a controller secret was given).
    pub bidirectional: bool,
}

/// Runs the exchange on queue `q`, whose Connect asked for it, with setup
/// commands (the queue is not released to other commands yet). Each command
/// may take `timeout`. Errors: [`Error::Auth`] when either side refuses or a
/// command fails with an NVMe status; transport errors and timeouts as they
/// come (a reconnect may help with those).
pub(crate) async fn authenticate(
    q: &QueueShared,
    ex: HostExchange,
    timeout: Duration,
) -> Result<Authentication> {
    let qid = ex.qid;
    let r = run(q, ex, timeout).await;
    if let Err(e) = &r {
        warn!(qid, error = %e, "authentication failed");
    }
    r
}

async fn run(q: &QueueShared, mut ex: HostExchange, timeout: Duration) -> Result<Authentication> {
    let qid = ex.qid;
    debug!(qid, t_id = ex.t_id, "authentication: sending AUTH_Negotiate");
    send(q, qid, &ex.negotiate(), timeout, "Authentication Send (AUTH_Negotiate)").await?;
    debug!(qid, "authentication: receiving the challenge");
    let data = receive(q, qid, timeout, "Authentication Receive (DH-HMAC-CHAP_Challenge)").await?;
    let c = match ex.challenge(&data) {
        Ok(c) => c,
        Err(f) => return fail(q, &ex, f, timeout).await,
    };
    let reply = if c.dhgroup == DhGroup::NULL {
        ex.reply(&c)
    } else {
        debug!(qid, dhgroup = c.dhgroup.name(), "authentication: Diffie-Hellman exchange");
        // Two exponentiations of up to 8192 bits: not on the runtime's
        // worker threads (Linux runs the exchange in a workqueue).
        let (back, r) = tokio::task::spawn_blocking(move || {
            let r = ex.reply(&c);
            (ex, r)
        })
        .await
        .map_err(|_| Error::Shutdown)?;
        ex = back;
        r
    };
    let reply = match reply {
        Ok(r) => r,
        Err(f) => return fail(q, &ex, f, timeout).await,
    };
    debug!(qid, "authentication: sending DH-HMAC-CHAP_Reply");
    send(q, qid, &reply, timeout, "Authentication Send (DH-HMAC-CHAP_Reply)").await?;
    debug!(qid, "authentication: receiving DH-HMAC-CHAP_Success1");
    let data = receive(q, qid, timeout, "Authentication Receive (DH-HMAC-CHAP_Success1)").await?;
    match ex.success1(&data) {
        Err(f) => return fail(q, &ex, f, timeout).await,
        Ok(Some(success2)) => {
            debug!(qid, "authentication: controller authenticated; sending DH-HMAC-CHAP_Success2");
            send(q, qid, &success2, timeout, "Authentication Send (DH-HMAC-CHAP_Success2)").await?;
        }
        Ok(None) => {}
    }
    let a = ex.summary();
    info!(
        qid,
        hash = a.hash.name(),
        dhgroup = a.dhgroup.name(),
        bidirectional = a.bidirectional,
        "authenticated"
    );
    Ok(a)
}

/// Maps an NVMe status of an Authentication Send or Receive to [`AuthError::Status`].
fn status_err(qid: u16, step: &'static str, e: Error) -> Error {
    match e {
        Error::Nvme { status, .. } => Error::Auth { qid, reason: AuthError::Status { step, status } },
        e => e,
    }
}

/// Authentication Send of `msg` (in the capsule: at most 16 + 2·64 + 1024 bytes).
async fn send(q: &QueueShared, qid: u16, msg: &[u8], timeout: Duration, step: &'static str) -> Result<()> {
    let sqe = AuthCmd::dhchap(msg.len() as u32).to_sqe(true, 0);
    q.execute(sqe, Payload::Write(msg), Some(timeout), true)
        .await
        .map(drop)
        .map_err(|e| status_err(qid, step, e))
}

/// Authentication Receive of [`RECEIVE_LEN`] bytes.
async fn receive(q: &QueueShared, qid: u16, timeout: Duration, step: &'static str) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; RECEIVE_LEN as usize];
    let sqe = AuthCmd::dhchap(RECEIVE_LEN).to_sqe(false, 0);
    q.execute(sqe, Payload::Read(&mut buf), Some(timeout), true)
        .await
        .map_err(|e| status_err(qid, step, e))?;
    Ok(buf)
}

/// Ends the exchange: sends AUTH_Failure2 where `f` says so (its outcome
/// does not matter: the queue is closed next either way, as Linux only
/// keeps the first error) and returns the failure.
async fn fail<T>(q: &QueueShared, ex: &HostExchange, f: Fail, timeout: Duration) -> Result<T> {
    if let Some(why) = f.failure2 {
        debug!(qid = ex.qid, %why, "authentication: sending AUTH_Failure2");
        if let Err(e) =
            send(q, ex.qid, &ex.failure2(why), timeout, "Authentication Send (AUTH_Failure2)").await
        {
            debug!(qid = ex.qid, error = %e, "AUTH_Failure2 not delivered");
        }
    }
    Err(Error::Auth { qid: ex.qid, reason: f.reason })
}

#[cfg(test)]
mod tests {
    use nvmeof_common::auth::chap::augmented_challenge;
    use nvmeof_common::auth::message::Success1;

    use super::*;

    const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:host";
    const SUBNQN: &str = "nqn.2026-11.io.nvmeof:disk";
    const T_ID: u16 = 7;

    fn secret(byte: u8, transform: HashId) -> DhchapSecret {
        DhchapSecret::new(vec![byte; 32], transform).unwrap()
    }

    /// The controller's side, computed independently of [`HostExchange`]
    /// from the common primitives (as nvmet's `nvmet_auth_host_hash` and
    /// `nvmet_auth_ctrl_hash` do).
    struct Ctrl {
        hash: HashId,
        dhgroup: DhGroup,
        s1: u32,
        c1: Vec<u8>,
        dh: Option<DhKeyPair>,
    }

    impl Ctrl {
        fn new(hash: HashId, dhgroup: DhGroup) -> Self {
            Self {
                hash,
                dhgroup,
                s1: 0x5151_0001,
                c1: random_bytes(hash.len()),
                dh: DhKeyPair::generate(dhgroup),
            }
        }

        fn challenge_msg(&self, t_id: u16) -> Challenge {
            Challenge {
                t_id,
                hash: self.hash,
                dhgroup: self.dhgroup,
                seqnum: self.s1,
                challenge: self.c1.clone(),
                dh_value: self.dh.as_ref().map(|d| d.public().to_vec()).unwrap_or_default(),
            }
        }

        /// The challenge as the target sends it: zero-filled to AL.
        fn challenge(&self) -> Vec<u8> {
            padded(AuthMessage::Challenge(self.challenge_msg(T_ID)))
        }

        /// Checks the reply's R1 with the host key; returns it with the session key.
        fn check_reply(&self, data: &[u8], host_key: &DhchapSecret) -> (Reply, Option<Vec<u8>>) {
            let Ok(AuthMessage::Reply(r)) = AuthMessage::decode(data) else { panic!("not a reply") };
            assert_eq!(r.t_id, T_ID);
            let session = self.dh.as_ref().map(|d| d.shared_secret(&r.dh_value).unwrap());
            let c1 =
                session.as_ref().map_or(self.c1.clone(), |k| augmented_challenge(self.hash, k, &self.c1));
            let x = exchange(self.hash, &c1, self.s1);
            assert_eq!(r.response, host_response(&host_key.transformed(HOSTNQN), &x), "R1");
            (r, session)
        }

        /// Success1 with R2 from `ctrl_key` when the reply asked for it.
        fn success1(&self, r: &Reply, session: Option<&[u8]>, ctrl_key: &DhchapSecret) -> Vec<u8> {
            let response = r.challenge.as_ref().map(|c2| {
                let c2 = session.map_or(c2.clone(), |k| augmented_challenge(self.hash, k, c2));
                ctrl_response(&ctrl_key.transformed(SUBNQN), &exchange(self.hash, &c2, r.seqnum))
            });
            padded(AuthMessage::Success1(Success1 { t_id: T_ID, hl: self.hash.len() as u8, response }))
        }
    }

    fn exchange<'a>(hash: HashId, challenge: &'a [u8], seqnum: u32) -> Exchange<'a> {
        Exchange { hash, challenge, seqnum, t_id: T_ID, sc_c: 0, hostnqn: HOSTNQN, subnqn: SUBNQN }
    }

    fn padded(m: AuthMessage) -> Vec<u8> {
        let mut b = m.encode();
        b.resize(RECEIVE_LEN as usize, 0);
        b
    }

    fn host(ctrl_key: Option<DhchapSecret>) -> HostExchange {
        HostExchange::new(3, T_ID, HOSTNQN, SUBNQN, secret(0x11, HashId::SHA256), ctrl_key)
    }

    /// The explanation of the AUTH_Failure2 `f` asks for.
    fn failure2(f: Result<impl std::fmt::Debug, Fail>) -> Option<FailureReason> {
        f.expect_err("the step must fail").failure2
    }

    #[test]
    fn negotiate_offers_every_hash_and_group() {
        let h = host(None);
        let Ok(AuthMessage::Negotiate(n)) = AuthMessage::decode(&h.negotiate()) else { panic!() };
        assert_eq!((n.t_id, n.sc_c, n.napd), (T_ID, 0, 1));
        assert_eq!(n.hashes, HashId::ALL);
        assert_eq!(n.dhgroups, DhGroup::ALL);
        let Ok(AuthMessage::Failure2(f)) = AuthMessage::decode(&h.failure2(FailureReason::FAILED)) else {
            panic!()
        };
        assert_eq!(f, Failure::new(T_ID, FailureReason::FAILED));
    }

    #[test]
    fn unidirectional_null_group_exchange() {
        let mut h = host(None);
        let ctrl = Ctrl::new(HashId::SHA256, DhGroup::NULL);
        let c = h.challenge(&ctrl.challenge()).unwrap();
        let reply = h.reply(&c).unwrap();
        let (r, session) = ctrl.check_reply(&reply, &secret(0x11, HashId::SHA256));
        // No bidirectional authentication: S2 0, CVALID clear, no DH value.
        assert_eq!((r.seqnum, r.challenge.as_ref(), r.dh_value.len(), session), (0, None, 0, None));
        // No Success2 without bidirectional authentication.
        let s1 = ctrl.success1(&r, None, &secret(0x22, HashId(0)));
        assert_eq!(h.success1(&s1), Ok(None));
        let want = Authentication { hash: HashId::SHA256, dhgroup: DhGroup::NULL, bidirectional: false };
        assert_eq!(h.summary(), want);
    }

    #[test]
    fn bidirectional_ffdhe_exchange_with_transformed_keys() {
        let ctrl_key = secret(0x22, HashId::SHA384);
        let mut h = host(Some(ctrl_key.clone()));
        let ctrl = Ctrl::new(HashId::SHA384, DhGroup::FFDHE2048);
        let c = h.challenge(&ctrl.challenge()).unwrap();
        let reply = h.reply(&c).unwrap();
        let (r, session) = ctrl.check_reply(&reply, &secret(0x11, HashId::SHA256));
        assert_eq!(r.dh_value.len(), 256);
        assert_ne!(r.seqnum, 0);
        assert_eq!(r.challenge.as_ref().map(Vec::len), Some(48));
        let s1 = ctrl.success1(&r, session.as_deref(), &ctrl_key);
        let s2 = h.success1(&s1).unwrap().expect("Success2 after bidirectional authentication");
        assert_eq!(AuthMessage::decode(&s2), Ok(AuthMessage::Success2(T_ID)));
        let want = Authentication { hash: HashId::SHA384, dhgroup: DhGroup::FFDHE2048, bidirectional: true };
        assert_eq!(h.summary(), want);
        // Each reply takes a new S2 and C2.
        let mut h2 = host(Some(ctrl_key));
        let reply2 = h2.reply(&h2.challenge(&ctrl.challenge()).unwrap()).unwrap();
        let (r2, _) = ctrl.check_reply(&reply2, &secret(0x11, HashId::SHA256));
        assert_ne!((r2.seqnum, &r2.challenge), (r.seqnum, &r.challenge));
    }

    #[test]
    fn wrong_transaction_or_message_stops_without_failure2() {
        let h = host(None);
        let ctrl = Ctrl::new(HashId::SHA256, DhGroup::NULL);
        let other = padded(AuthMessage::Challenge(ctrl.challenge_msg(T_ID + 1)));
        let f = h.challenge(&other).unwrap_err();
        assert!(
            matches!(&f.reason, AuthError::Protocol { what, sent: None } if what.contains("transaction 8")),
            "{f:?}"
        );
        assert_eq!(f.failure2, None);
        // Success1 where the challenge belongs.
        let s1 = padded(AuthMessage::Success1(Success1 { t_id: T_ID, hl: 32, response: None }));
        assert_eq!(failure2(h.challenge(&s1)), None);
        // Garbage.
        assert_eq!(failure2(h.challenge(&[0x09; 64])), None);
    }

    #[test]
    fn failure1_carries_the_controllers_explanation() {
        let mut h = host(None);
        let f1 = padded(AuthMessage::Failure1(Failure::new(T_ID, FailureReason::HASH_UNUSABLE)));
        let f = h.challenge(&f1).unwrap_err();
        assert_eq!(f, Fail { reason: AuthError::Refused(FailureReason::HASH_UNUSABLE), failure2: None });
        assert!(f.reason.to_string().contains("hash function not usable"), "{}", f.reason);
        // After the reply: a wrong host key is answered with Failure1 (FAILED).
        let ctrl = Ctrl::new(HashId::SHA256, DhGroup::NULL);
        h.reply(&h.challenge(&ctrl.challenge()).unwrap()).unwrap();
        let f1 = padded(AuthMessage::Failure1(Failure::new(T_ID, FailureReason::FAILED)));
        assert_eq!(h.success1(&f1).unwrap_err().reason, AuthError::Refused(FailureReason::FAILED));
    }

    #[test]
    fn unusable_hash_is_refused_with_failure2() {
        let h = host(None);
        let mut c = Ctrl::new(HashId::SHA256, DhGroup::NULL).challenge_msg(T_ID);
        c.hash = HashId(4);
        assert_eq!(
            failure2(h.challenge(&padded(AuthMessage::Challenge(c.clone())))),
            Some(FailureReason::HASH_UNUSABLE)
        );
        // A known hash with another HL.
        c.hash = HashId::SHA256;
        c.challenge = vec![1; 48];
        let f = h.challenge(&padded(AuthMessage::Challenge(c))).unwrap_err();
        assert_eq!(f.failure2, Some(FailureReason::HASH_UNUSABLE));
        assert!(matches!(f.reason, AuthError::Protocol { sent: Some(FailureReason::HASH_UNUSABLE), .. }));
    }

    #[test]
    fn group_not_offered_or_bad_dh_value_is_refused_with_failure2() {
        let mut h = host(None);
        let ctrl = Ctrl::new(HashId::SHA256, DhGroup::FFDHE2048);
        let with = |f: &dyn Fn(&mut Challenge)| {
            let mut c = ctrl.challenge_msg(T_ID);
            f(&mut c);
            padded(AuthMessage::Challenge(c))
        };
        let r = h.challenge(&with(&|c| c.dhgroup = DhGroup(6)));
        assert_eq!(failure2(r), Some(FailureReason::DHGROUP_UNUSABLE));
        let r = h.challenge(&with(&|c| c.dh_value.clear()));
        assert_eq!(failure2(r), Some(FailureReason::DHGROUP_UNUSABLE));
        let r = h.challenge(&with(&|c| c.dh_value.truncate(255)));
        assert_eq!(failure2(r), Some(FailureReason::INCORRECT_PAYLOAD));
        let r = h.challenge(&with(&|c| c.dhgroup = DhGroup::NULL));
        assert_eq!(failure2(r), Some(FailureReason::INCORRECT_PAYLOAD));
        // A value of the right length but out of range (1) fails the shared secret.
        let c = h
            .challenge(&with(&|c| {
                c.dh_value = vec![0; 256];
                c.dh_value[255] = 1;
            }))
            .unwrap();
        assert_eq!(failure2(h.reply(&c)), Some(FailureReason::INCORRECT_PAYLOAD));
    }

    #[test]
    fn bad_controller_response_is_answered_with_failure2() {
        let ctrl_key = secret(0x22, HashId(0));
        let ctrl = Ctrl::new(HashId::SHA512, DhGroup::NULL);
        let mut h = host(Some(ctrl_key));
        let reply = h.reply(&h.challenge(&ctrl.challenge()).unwrap()).unwrap();
        let (r, _) = ctrl.check_reply(&reply, &secret(0x11, HashId::SHA256));
        // The controller holds another key: R2 does not match.
        let s1 = ctrl.success1(&r, None, &secret(0x23, HashId(0)));
        assert_eq!(
            h.success1(&s1),
            Err(Fail { reason: AuthError::ControllerMismatch, failure2: Some(FailureReason::FAILED) })
        );
        // No R2 at all though the host asked for one.
        let s1 = padded(AuthMessage::Success1(Success1 { t_id: T_ID, hl: 64, response: None }));
        assert_eq!(failure2(h.success1(&s1)), Some(FailureReason::FAILED));
        // Another HL than the hash's.
        let s1 = padded(AuthMessage::Success1(Success1 { t_id: T_ID, hl: 32, response: Some(vec![0; 32]) }));
        assert_eq!(failure2(h.success1(&s1)), Some(FailureReason::HASH_UNUSABLE));
        // Success1 of another transaction: stop, no Failure2 (as Linux).
        let s1 = padded(AuthMessage::Success1(Success1 { t_id: 1, hl: 64, response: None }));
        assert_eq!(failure2(h.success1(&s1)), None);
    }
}
