//! DH-HMAC-CHAP on the controller side: the Authentication Send and Receive
//! commands and each queue's state (nvmet `fabrics-cmd-auth.c`, `auth.c`).
//!
//! A host with keys ([`HostKeys`]) gets AUTHREQ.ATR in the Connect response
//! of every queue, admin and I/O (nvmet 6.12's `nvmet_connect_result`), and
//! until it has authenticated on that queue every command but the Fabrics
//! ones fails with Authentication Required (01h/91h, DNR; `nvmet_check_auth_status`).
//! The steps follow nvmet's `dhchap_step`: a message the controller cannot
//! use is answered with AUTH_Failure1 at the next Receive, after which the
//! queue closes (nvmet_ctrl_fatal_error; the admin queue takes the controller
//! with it); a message out of sequence, or AUTH_Failure2 from the host, closes
//! it at once.

use bytes::Bytes;
use nvmeof_common::auth::chap::{self, Exchange};
use nvmeof_common::auth::message::{Challenge, Failure, Negotiate, Success1, AUTH_ID_DHCHAP};
use nvmeof_common::auth::{self as a, AuthCmd, AuthMessage, DhGroup, DhKeyPair, FailureReason, HashId};
use nvmeof_common::{Sqe, Status};
use tracing::{debug, info, warn};

use super::{expect_len, QueueCtx, Response};
use crate::config::HostKeys;

/// Largest Authentication Send or Receive transfer accepted. The largest
/// message is a Reply with SHA-512 and ffdhe8192: 16 + 2 × 64 + 1024 bytes.
/// (nvmet allocates whatever TL or AL says.)
pub const MAX_AUTH_LEN: u32 = 8192;

/// Where a queue is in the exchange (nvmet's `dhchap_step`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Step {
    /// Waiting for AUTH_Negotiate.
    #[default]
    Negotiate,
    /// The host reads the challenge next.
    Challenge,
    /// Waiting for the Reply.
    Reply,
    /// The host reads Success1 next.
    Success1,
    /// Waiting for Success2 (bidirectional).
    Success2,
    /// The host reads AUTH_Failure1 next, with this explanation.
    Failure1(FailureReason),
    /// Finished.
    Done,
}

/// One transaction's values.
#[derive(Debug)]
struct Transaction {
    hash: HashId,
    dhgroup: DhGroup,
    s1: u32,
    c1: Vec<u8>,
    dh: Option<DhKeyPair>,
    session_key: Option<Vec<u8>>,
    s2: u32,
    c2: Option<Vec<u8>>,
}

/// A queue's authentication state.
#[derive(Debug)]
pub struct QueueAuth {
    /// Whether commands other than Fabrics ones may run.
    pub authenticated: bool,
    step: Step,
    /// The transaction's ID, from the last AUTH_Negotiate: kept even when the
    /// negotiation is refused, for the Failure1 (nvmet stores `dhchap_tid`
    /// before it checks the message).
    t_id: u16,
    tx: Option<Box<Transaction>>,
}

impl Default for QueueAuth {
    /// A queue that needs no authentication.
    fn default() -> Self {
        Self { authenticated: true, step: Step::Negotiate, t_id: 0, tx: None }
    }
}

impl QueueAuth {
    /// The state after Connect: authentication is required when the host has keys.
    pub fn after_connect(required: bool) -> Self {
        Self { authenticated: !required, step: Step::Negotiate, t_id: 0, tx: None }
    }
}

/// The SQE field an Authentication Send/Receive's Invalid Field names (its
/// Error Information log entry; nvmet's `error_loc`).
pub fn invalid_field_offset(sqe: &Sqe) -> u16 {
    let c = AuthCmd::from_sqe(sqe);
    (if c.secp != a::SECP_NVME_AUTH {
        a::sqe_off::SECP
    } else if c.spsp0 != a::SPSP {
        a::sqe_off::SPSP0
    } else if c.spsp1 != a::SPSP {
        a::sqe_off::SPSP1
    } else {
        a::sqe_off::TL
    }) as u16
}

/// Parse step of Authentication Send and Receive (`nvmet_execute_auth_send`
/// / `_receive` checks, in their order): SECP, SPSP0, SPSP1, a zero length,
/// then the SGL length against TL or AL.
pub fn parse(sqe: &Sqe) -> Result<(), Status> {
    let c = AuthCmd::from_sqe(sqe);
    if c.secp != a::SECP_NVME_AUTH || c.spsp0 != a::SPSP || c.spsp1 != a::SPSP || c.len == 0 {
        return Err(Status::INVALID_FIELD.with_dnr());
    }
    if c.len > MAX_AUTH_LEN {
        warn!(len = c.len, limit = MAX_AUTH_LEN, "authentication transfer above the limit");
        return Err(Status::INVALID_FIELD.with_dnr());
    }
    expect_len(sqe, c.len as u64)
}

fn fail(auth: &mut QueueAuth, reason: FailureReason) {
    debug!(%reason, "authentication: AUTH_Failure1 next");
    auth.step = Step::Failure1(reason);
}

/// Ends the exchange for good: the queue closes once this command's response
/// is out (nvmet_ctrl_fatal_error).
fn fatal(ctx: &mut QueueCtx, why: &str) -> Response {
    warn!(why, "authentication failed; closing the queue");
    ctx.auth.authenticated = false;
    ctx.auth.tx = None;
    ctx.close_requested = true;
    Response::status(Status::SUCCESS)
}

/// The hash and group to use: the configured one when the host offers it,
/// else the first the host offers that is known here (nvmet_auth_negotiate's fallback).
fn choose(keys: Option<&HostKeys>, n: &Negotiate) -> Result<(HashId, DhGroup), FailureReason> {
    let (want_hash, want_group) = keys.map_or((HashId::SHA256, DhGroup::NULL), |k| (k.hash, k.dhgroup));
    let hash = if n.hashes.contains(&want_hash) {
        want_hash
    } else {
        *n.hashes.iter().find(|h| h.is_known()).ok_or(FailureReason::HASH_UNUSABLE)?
    };
    let group = if n.dhgroups.contains(&want_group) {
        want_group
    } else {
        *n.dhgroups.iter().find(|g| g.is_known()).ok_or(FailureReason::DHGROUP_UNUSABLE)?
    };
    Ok((hash, group))
}

fn negotiate(ctx: &mut QueueCtx, n: &Negotiate) -> Result<Box<Transaction>, FailureReason> {
    // Secure channel concatenation needs TLS, which this target does not
    // offer (nvmet without CONFIG_NVME_TARGET_TCP_TLS answers the same).
    if n.sc_c != 0 {
        return Err(FailureReason::CONCAT_MISMATCH);
    }
    if n.napd != 1 {
        return Err(FailureReason::HASH_UNUSABLE);
    }
    if n.auth_id != AUTH_ID_DHCHAP {
        return Err(FailureReason::INCORRECT_PAYLOAD);
    }
    let ctrl = ctx.ctrl.as_ref().expect("authentication runs on connected queues");
    if ctx.qid == Some(0) {
        ctrl.refresh_host_keys();
    }
    let keys = ctrl.host_keys();
    let (hash, dhgroup) = choose(keys.as_deref(), n)?;
    debug!(hash = hash.name(), dhgroup = dhgroup.name(), t_id = n.t_id, "authentication: negotiated");
    Ok(Box::new(Transaction {
        hash,
        dhgroup,
        s1: 0,
        c1: Vec::new(),
        dh: None,
        session_key: None,
        s2: 0,
        c2: None,
    }))
}

/// Checks the host's Reply (nvmet_auth_reply).
fn reply(ctx: &mut QueueCtx, r: &a::Reply) -> Result<(), FailureReason> {
    let ctrl = ctx.ctrl.clone().expect("authentication runs on connected queues");
    let t_id = ctx.auth.t_id;
    let tx = ctx.auth.tx.as_mut().expect("a transaction in the Reply step");
    if !r.dh_value.is_empty() {
        let dh = tx.dh.as_ref().ok_or(FailureReason::INCORRECT_PAYLOAD)?;
        let s = dh.shared_secret(&r.dh_value).map_err(|e| {
            debug!(error = %e, "authentication: host DH value refused");
            FailureReason::DHGROUP_UNUSABLE
        })?;
        tx.session_key = Some(s);
    }
    let Some(keys) = ctrl.host_keys() else {
        warn!("authentication: no host key for this host");
        return Err(FailureReason::FAILED);
    };
    if r.response.len() != tx.hash.len() || (tx.dhgroup != DhGroup::NULL && tx.session_key.is_none()) {
        return Err(FailureReason::FAILED);
    }
    let c1 = chap::response_challenge(tx.hash, tx.session_key.as_deref(), &tx.c1);
    let x = Exchange {
        hash: tx.hash,
        challenge: &c1,
        seqnum: tx.s1,
        t_id,
        sc_c: 0,
        hostnqn: &ctrl.hostnqn,
        subnqn: &ctrl.subsys.nqn,
    };
    let want = chap::host_response(&keys.key.transformed(&ctrl.hostnqn), &x);
    if !chap::responses_equal(&want, &r.response) {
        info!(hostnqn = %ctrl.hostnqn, "authentication: host response mismatch");
        return Err(FailureReason::FAILED);
    }
    // A sequence number of 0 asks for no bidirectional authentication (NVMe
    // Base 2.2 §8.3.4.5.4; C2 may then only seed a TLS PSK, unused here).
    tx.s2 = r.seqnum;
    tx.c2 = r.challenge.clone().filter(|_| r.seqnum != 0);
    if tx.c2.is_none() {
        ctx.auth.authenticated = true;
        info!(hash = tx.hash.name(), dhgroup = tx.dhgroup.name(), "host authenticated");
    }
    Ok(())
}

/// Execute step of Authentication Send: one message from the host.
pub fn send(ctx: &mut QueueCtx, data: &Bytes) -> Response {
    let msg = match AuthMessage::decode(data) {
        Ok(m) => m,
        // A negotiation too short for its descriptor: Failure1 with Incorrect
        // Payload (nvmet_auth_negotiate). Anything else unreadable ends it.
        Err(reason) if data.len() >= 2 && data[0] == 0 && data[1] == 0 => {
            fail(&mut ctx.auth, reason);
            return Response::status(Status::SUCCESS);
        }
        Err(reason) => return fatal(ctx, reason.describe()),
    };
    match msg {
        AuthMessage::Negotiate(n) => {
            // Any step: a (re)start of the exchange (re-authentication).
            ctx.auth.t_id = n.t_id;
            match negotiate(ctx, &n) {
                Ok(tx) => {
                    ctx.auth.tx = Some(tx);
                    ctx.auth.step = Step::Challenge;
                }
                Err(reason) => {
                    ctx.auth.tx = None;
                    fail(&mut ctx.auth, reason);
                }
            }
            Response::status(Status::SUCCESS)
        }
        AuthMessage::Failure2(f) => {
            let why = format!("host sent AUTH_Failure2: {}", f.explanation);
            fatal(ctx, &why)
        }
        m => {
            let expected = match ctx.auth.step {
                Step::Reply => a::message::id::REPLY,
                Step::Success2 => a::message::id::SUCCESS2,
                _ => return fatal(ctx, "message out of sequence"),
            };
            if m.id() != expected {
                return fatal(ctx, "message out of sequence");
            }
            if m.t_id() != ctx.auth.t_id {
                debug!(got = m.t_id(), want = ctx.auth.t_id, "authentication: wrong transaction");
                fail(&mut ctx.auth, FailureReason::INCORRECT_PAYLOAD);
                return Response::status(Status::SUCCESS);
            }
            match m {
                AuthMessage::Reply(r) => match reply(ctx, &r) {
                    Ok(()) => ctx.auth.step = Step::Success1,
                    Err(reason) => fail(&mut ctx.auth, reason),
                },
                _ => {
                    // Success2: the host accepted the controller's response.
                    ctx.auth.authenticated = true;
                    ctx.auth.step = Step::Done;
                    let tx = ctx.auth.tx.take();
                    info!(
                        hash = tx.as_ref().and_then(|t| t.hash.name()),
                        dhgroup = tx.as_ref().and_then(|t| t.dhgroup.name()),
                        "host and controller authenticated"
                    );
                }
            }
            Response::status(Status::SUCCESS)
        }
    }
}

/// The encoded message as data `al` bytes long (zero-filled; nvmet copies AL
/// bytes), or `None` when it does not fit.
fn data(msg: &AuthMessage, al: usize) -> Option<Response> {
    let mut b = msg.encode();
    if b.len() > al {
        return None;
    }
    b.resize(al, 0);
    Some(Response::data(b))
}

/// Execute step of Authentication Receive: the controller's next message.
pub fn receive(ctx: &mut QueueCtx, sqe: &Sqe) -> Response {
    let al = AuthCmd::from_sqe(sqe).len as usize;
    let ctrl = ctx.ctrl.clone().expect("authentication runs on connected queues");
    let t_id = ctx.auth.t_id;
    match ctx.auth.step {
        Step::Challenge => {
            let tx = ctx.auth.tx.as_mut().expect("a transaction in the Challenge step");
            tx.s1 = a::next_seqnum();
            tx.c1 = a::random_bytes(tx.hash.len());
            tx.dh = DhKeyPair::generate(tx.dhgroup);
            let msg = AuthMessage::Challenge(Challenge {
                t_id,
                hash: tx.hash,
                dhgroup: tx.dhgroup,
                seqnum: tx.s1,
                challenge: tx.c1.clone(),
                dh_value: tx.dh.as_ref().map(|d| d.public().to_vec()).unwrap_or_default(),
            });
            let Some(r) = data(&msg, al) else {
                // nvmet_auth_challenge: "buffer too small" is an internal error.
                warn!(al, "authentication: Receive too short for the challenge");
                return Response::status(Status::INTERNAL);
            };
            ctx.auth.step = Step::Reply;
            r
        }
        Step::Success1 => {
            let tx = ctx.auth.tx.as_ref().expect("a transaction in the Success1 step");
            let response = match &tx.c2 {
                None => None,
                Some(c2) => {
                    let keys = ctrl.host_keys();
                    let Some(key) = keys.as_ref().and_then(|k| k.ctrl_key.as_ref()) else {
                        warn!("authentication: the host asked the controller to authenticate, but it has no controller key");
                        ctx.auth.step = Step::Failure1(FailureReason::FAILED);
                        return receive(ctx, sqe);
                    };
                    let c2 = chap::response_challenge(tx.hash, tx.session_key.as_deref(), c2);
                    let x = Exchange {
                        hash: tx.hash,
                        challenge: &c2,
                        seqnum: tx.s2,
                        t_id,
                        sc_c: 0,
                        hostnqn: &ctrl.hostnqn,
                        subnqn: &ctrl.subsys.nqn,
                    };
                    Some(chap::ctrl_response(&key.transformed(&ctrl.subsys.nqn), &x))
                }
            };
            let msg = AuthMessage::Success1(Success1 { t_id, hl: tx.hash.len() as u8, response });
            let Some(r) = data(&msg, al) else {
                return Status::SGL_INVALID_DATA.with_dnr().into();
            };
            if tx.c2.is_some() {
                ctx.auth.step = Step::Success2;
            } else {
                ctx.auth.step = Step::Done;
                ctx.auth.tx = None;
            }
            r
        }
        step => {
            // Failure1, or a Receive where none is due (nvmet's default case).
            let reason = match step {
                Step::Failure1(r) => r,
                _ => FailureReason::FAILED,
            };
            let msg = AuthMessage::Failure1(Failure::new(t_id, reason));
            warn!(%reason, hostnqn = %ctrl.hostnqn, "authentication failed: AUTH_Failure1 sent, closing the queue");
            ctx.auth.authenticated = false;
            ctx.auth.tx = None;
            ctx.close_requested = true;
            data(&msg, al).unwrap_or_else(|| Status::SGL_INVALID_DATA.with_dnr().into())
        }
    }
}
