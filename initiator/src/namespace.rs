//! Namespace handle: block I/O split by the maximum transfer size.

use std::io::{IoSlice, IoSliceMut};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nvmeof_common::opcode::IoOpcode;
use nvmeof_common::spec::copy::{self, CopyCmd, CopyRange, ONCS_COPY};
use nvmeof_common::spec::dsm::{DsmCmd, DsmRange, DSM_MAX_RANGES};
use nvmeof_common::spec::identify::{Csi, IdentifyCmd, IDENTIFY_DATA_LEN, ONCS_WRITE_ZEROES};
use nvmeof_common::spec::reservation::{
    AcquireAction, RegisterAction, ReleaseAction, ReservationCmd, ReservationKeys, ReservationStatus,
    ReservationType, REGISTRANT_EXT_LEN, STATUS_EXT_HEADER_LEN,
};
use nvmeof_common::spec::zns::{
    IdentifyNsZns, ZoneDescriptor, ZoneMgmtRecvCmd, ZoneMgmtSendCmd, ZoneReport, ZoneReportFilter,
    ZoneSendAction, ZONE_DESCRIPTOR_LEN, ZONE_REPORT_HEADER_LEN,
};
use nvmeof_common::spec::{Cns, IdentifyCtrlNvm, IdentifyNamespace};
use nvmeof_common::sqe::{FUSE_FIRST, FUSE_SECOND};
use nvmeof_common::status::StatusCodeType;
use nvmeof_common::{Sqe, Status};
use tracing::debug;

use crate::controller::{Controller, QueueUse};
use crate::driver::{Payload, QueueShared, Xfer};
use crate::error::{Error, Result};

/// NLB is a 16-bit 0's based field: at most 65536 blocks per command.
const MAX_NLB: u64 = 1 << 16;

/// Commands of a [`Namespace::write_zeroes`] or [`Namespace::verify`] built
/// and submitted at a time.
const NO_DATA_GROUP: u64 = 256;

/// Commands of a [`Namespace::copy`] submitted at a time.
const COPY_GROUP: usize = 256;
/// Largest Report Zones [`Namespace::zones`] asks for in one command:
/// 2047 zone descriptors.
const REPORT_ZONES_MAX_LEN: usize = 128 << 10;

/// Splits a copy of `ranges` into Copy commands within `id`'s limits:
/// each command's source ranges and block count. MSSRL or MCL 0 count as
/// the largest the fields can express.
fn copy_commands(id: &IdentifyNamespace, ranges: &[(u64, u32)]) -> Result<Vec<(Vec<CopyRange>, u64)>> {
    let mssrl = match id.mssrl {
        0 => MAX_NLB,
        n => n as u64,
    };
    let mcl = match id.mcl {
        0 => u32::MAX as u64,
        n => n as u64,
    };
    let per_command = id.msrc as usize + 1;
    let mut commands: Vec<(Vec<CopyRange>, u64)> = Vec::new();
    let mut cur: (Vec<CopyRange>, u64) = (Vec::new(), 0);
    for &(lba, blocks) in ranges {
        if blocks == 0 {
            return Err(Error::InvalidArgument(format!("copy range at LBA {lba} of 0 blocks")));
        }
        check_range(lba, blocks as u64)?;
        let (mut lba, mut left) = (lba, blocks as u64);
        while left > 0 {
            if cur.0.len() == per_command || cur.1 == mcl {
                commands.push(std::mem::take(&mut cur));
            }
            let n = left.min(mssrl).min(mcl - cur.1);
            cur.0.push(CopyRange::new(lba, n as u32).expect("1 to 65536 blocks"));
            cur.1 += n;
            (lba, left) = (lba + n, left - n);
        }
    }
    if !cur.0.is_empty() {
        commands.push(cur);
    }
    Ok(commands)
}

/// Splits a deallocation of `ranges` into Dataset Management commands within
/// the controller's limits (Identify CNS 06h): at most DMRL ranges per
/// command (and 256, what NR can say), DMRSL blocks per range and DMSL
/// blocks per command, each 0 meaning no limit. A range past a limit is cut
/// into pieces, which may end one command and start the next (deallocating
/// the same blocks); empty ranges are left out.
fn dsm_commands(ranges: &[(u64, u32)], limits: &IdentifyCtrlNvm) -> Result<Vec<Vec<DsmRange>>> {
    let per_cmd = match limits.dmrl {
        0 => DSM_MAX_RANGES,
        n => (n as usize).min(DSM_MAX_RANGES),
    };
    let per_range = match limits.dmrsl {
        0 => u32::MAX,
        n => n,
    };
    let cmd_blocks = match limits.dmsl {
        0 => u64::MAX,
        n => n,
    };
    let mut cmds = Vec::new();
    let mut cur: Vec<DsmRange> = Vec::new();
    let mut cur_blocks = 0u64;
    for &(mut slba, nlb) in ranges {
        check_range(slba, nlb as u64)?;
        let mut left = nlb;
        while left > 0 {
            if cur.len() == per_cmd || cur_blocks == cmd_blocks {
                cmds.push(std::mem::take(&mut cur));
                cur_blocks = 0;
            }
            let take = left.min(per_range).min((cmd_blocks - cur_blocks).min(u32::MAX as u64) as u32);
            cur.push(DsmRange { cattr: 0, nlb: take, slba });
            cur_blocks += take as u64;
            slba += take as u64;
            left -= take;
        }
    }
    if !cur.is_empty() {
        cmds.push(cur);
    }
    Ok(cmds)
}

/// Refuses a range whose end is past the last 64-bit LBA. Split requests
/// compute each piece's LBA as `lba + offset`: that overflowed (a panic in
/// debug builds; in release builds the pieces after the first wrapped around to
/// LBA 0 and up, so a write near `u64::MAX` overwrote the namespace's first
/// blocks). No namespace holds such a range, so it is an invalid argument.
fn check_range(lba: u64, blocks: u64) -> Result<()> {
    if lba.checked_add(blocks).is_none() {
        return Err(Error::InvalidArgument(format!(
            "{blocks} blocks from LBA {lba} pass the last 64-bit LBA"
        )));
    }
    Ok(())
}

/// Options of a read or write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoFlags {
    /// Force Unit Access (CDW12 bit 30).
    pub fua: bool,
    /// Limited Retry (CDW12 bit 31): the controller applies limited retry
    /// efforts, and the host does not send the command again after a status
    /// without DNR either ([`crate::ConnectOptions::max_retries`]): the
    /// Linux host sets LR on failfast and readahead requests, which it does
    /// not retry.
    pub limited_retry: bool,
}

impl IoFlags {
    /// Flags with FUA set.
    pub const FUA: Self = Self { fua: true, limited_retry: false };

    fn cdw12_bits(self) -> u32 {
        (self.fua as u32) << 30 | (self.limited_retry as u32) << 31
    }
}

/// A namespace of a connected controller. Cheap to clone, `Send + Sync`,
/// usable from many tasks at once; every request goes to an I/O queue picked
/// by [`crate::QueueSelect`] and may have many siblings in flight.
#[derive(Clone)]
pub struct Namespace {
    ctrl: Controller,
    nsid: u32,
    lba_shift: u32,
    /// Size in blocks (NSZE), shared with every handle of the namespace on
    /// this controller and kept current by the change notices.
    nsze: Arc<std::sync::atomic::AtomicU64>,
    /// Most blocks per command (MDTS, option, 16-bit NLB).
    max_blocks: u64,
    /// Most blocks per Write Zeroes (the controller's WZSL, 16-bit NLB).
    zeroes_blocks: u64,
    /// Most blocks per Verify (the controller's VSL, 16-bit NLB).
    verify_blocks: u64,
    /// [`Self::zero_out`] writes zeroes instead of sending Write Zeroes:
    /// the controller refused one (shared by the clones of this handle).
    zeroes_refused: Arc<std::sync::atomic::AtomicBool>,
    identify: Arc<IdentifyNamespace>,
    /// [`crate::ConnectOptions::max_retries`].
    max_retries: u8,
    /// Path errors are left to a [`crate::MultipathNamespace`] above, which
    /// moves the command to another path (Linux `nvme_failover_req`).
    fail_over: bool,
}

impl std::fmt::Debug for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namespace")
            .field("nsid", &self.nsid)
            .field("block_size", &self.block_size())
            .field("blocks", &self.blocks())
            .finish()
    }
}

/// Whether a command that failed with `status` is sent again, and after
/// what delay (Linux `nvme_decide_disposition` and `nvme_retry_req`): only a
/// status without DNR, and not a path error where a multipath layer fails
/// over (`fail_over`); the delay is the Command Retry Delay time that the
/// status's CRD field selects among `crdt` (Identify Controller CRDT1–3, in
/// 100 ms units), none where CRD is 0.
fn retry_delay(status: Status, crdt: [u16; 3], fail_over: bool) -> Option<Duration> {
    if status.dnr() || (fail_over && status.sct() == StatusCodeType::PATH) {
        return None;
    }
    let delay = match status.crd() {
        0 => 0,
        crd => crdt[crd as usize - 1],
    };
    Some(Duration::from_millis(u64::from(delay) * 100))
}

/// The data of one command, kept so that the command can be sent again.
enum Data<'a> {
    None,
    Read(&'a mut [u8]),
    Write(&'a [u8]),
    Bytes(Bytes),
    /// A read of `len` bytes into an owned buffer ([`Namespace::read_buf`]),
    /// which is with the driver while the command runs and back here after
    /// it (`None` where the driver could not give it back).
    Owned(Option<BytesMut>, usize),
    /// A read into pieces of the caller's buffers, in order
    /// ([`Namespace::read_vectored`]).
    ReadV(Vec<&'a mut [u8]>),
    /// A write of pieces of the caller's buffers, in order
    /// ([`Namespace::write_vectored`]).
    WriteV(Vec<&'a [u8]>),
}

/// A piece of a vectored request: a caller's buffer, or a part of one.
trait Piece<'a>: std::ops::Deref<Target = [u8]> + Sized {
    /// The first `at` bytes and the rest.
    fn split(self, at: usize) -> (Self, Self);
    /// The data of one command made of `pieces`.
    fn data(pieces: Vec<Self>) -> Data<'a>;
}

impl<'a> Piece<'a> for &'a mut [u8] {
    fn split(self, at: usize) -> (Self, Self) {
        self.split_at_mut(at)
    }

    fn data(pieces: Vec<Self>) -> Data<'a> {
        Data::ReadV(pieces)
    }
}

impl<'a> Piece<'a> for &'a [u8] {
    fn split(self, at: usize) -> (Self, Self) {
        self.split_at(at)
    }

    fn data(pieces: Vec<Self>) -> Data<'a> {
        Data::WriteV(pieces)
    }
}

/// Cuts `pieces` (whose lengths add up to a multiple of `chunk`, or less at
/// the end) into groups of `chunk` bytes, splitting a piece across a
/// boundary: one group per command of a vectored request.
fn regroup<'a, B: Piece<'a>>(pieces: impl IntoIterator<Item = B>, chunk: usize) -> Vec<Vec<B>> {
    let mut groups = Vec::new();
    let (mut group, mut room) = (Vec::new(), chunk);
    for mut piece in pieces {
        while piece.len() > room {
            let (head, tail) = piece.split(room);
            group.push(head);
            groups.push(std::mem::take(&mut group));
            (piece, room) = (tail, chunk);
        }
        room -= piece.len();
        if !piece.is_empty() {
            group.push(piece);
        }
        if room == 0 {
            groups.push(std::mem::take(&mut group));
            room = chunk;
        }
    }
    if !group.is_empty() {
        groups.push(group);
    }
    groups
}

/// The queues `ops` may go to: the read queues when every one reads.
fn queue_use(ops: &[Op<'_>]) -> QueueUse {
    if ops.iter().all(|op| op.data.is_read()) {
        QueueUse::Read
    } else {
        QueueUse::Default
    }
}

impl Data<'_> {
    /// Whether the command reads.
    fn is_read(&self) -> bool {
        matches!(self, Data::Read(_) | Data::Owned(..) | Data::ReadV(_))
    }

    /// The payload of one execution of the command. (Cloning `Bytes` costs
    /// no allocation here: the queue clones every write's `Bytes` anyway.)
    fn payload(&mut self) -> Payload<'_> {
        match self {
            Data::None => Payload::None,
            Data::Read(b) => Payload::Read(b),
            Data::Write(b) => Payload::Write(b),
            Data::Bytes(b) => Payload::WriteBytes(b.clone()),
            Data::Owned(..) | Data::ReadV(_) | Data::WriteV(_) => {
                unreachable!("owned and vectored transfers go through Data::xfer")
            }
        }
    }

    /// [`Self::payload`] for the driver's batch: an owned buffer goes with
    /// the command, emptied of what a failed execution left in it.
    fn xfer(&mut self) -> Xfer<'_> {
        match self {
            Data::Owned(buf, len) => {
                let mut buf = buf.take().expect("an owned read is sent with its buffer");
                buf.clear();
                Xfer::ReadOwned(buf, *len)
            }
            Data::ReadV(pieces) => Xfer::ReadScatter(pieces),
            Data::WriteV(pieces) => Xfer::WriteGather(pieces),
            other => Xfer::P(other.payload()),
        }
    }

    /// Whether the command can be sent again: an owned read needs its
    /// buffer back.
    fn resendable(&self) -> bool {
        !matches!(self, Data::Owned(None, _))
    }
}

/// One command of a request (a request above the maximum transfer size is
/// several).
struct Op<'a> {
    /// The request it belongs to (a [`Batch`] index).
    owner: usize,
    sqe: Sqe,
    data: Data<'a>,
    /// Times it may be sent again after a status without DNR.
    retries: u8,
}

/// Requests submitted together: one wake-up of the queue driver and one
/// vectored write for all of them (up to the queue depth at a time).
pub struct Batch<'a> {
    ns: &'a Namespace,
    ops: Vec<Op<'a>>,
    count: usize,
    invalid: Vec<(usize, Error)>,
}

impl Namespace {
    pub(crate) fn new(ctrl: Controller, nsid: u32, id: IdentifyNamespace) -> Result<Self> {
        if id.nsze == 0 || id.ncap == 0 {
            return Err(Error::InvalidArgument(format!("namespace {nsid} is not active")));
        }
        let bs = id
            .block_size()
            .filter(|b| b.is_power_of_two() && (512..=1 << 16).contains(b))
            .ok_or_else(|| Error::Controller(format!("namespace {nsid}: unusable LBA format")))?;
        if id.lbaf.get(id.lba_format_index()).is_some_and(|f| f.ms != 0) && id.flbas & 0x10 != 0 {
            return Err(Error::Controller(format!("namespace {nsid}: extended-LBA metadata not supported")));
        }
        let lba_shift = bs.trailing_zeros();
        // Also within the SGL's 32-bit length: without MDTS, 65536 blocks of
        // 64 KiB are 4 GiB, which no command can carry.
        let max_blocks = match ctrl.info().max_transfer {
            Some(m) => (m as u64) >> lba_shift,
            None => MAX_NLB,
        }
        .min(u32::MAX as u64 >> lba_shift)
        .clamp(1, MAX_NLB);
        // WZSL or VSL 0 reports no limit: the command's 16-bit NLB is the
        // bound (Linux falls back to MDTS for Write Zeroes there; a target
        // executes either).
        let nvm = ctrl.info().nvm_limits;
        let no_data_blocks = |field| {
            IdentifyCtrlNvm::limit_bytes(field).map_or(MAX_NLB, |b| (b >> lba_shift).clamp(1, MAX_NLB))
        };
        let (zeroes_blocks, verify_blocks) = (no_data_blocks(nvm.wzsl), no_data_blocks(nvm.vsl));
        let max_retries = ctrl.core().max_retries();
        let nsze = ctrl.namespace_size_cell(nsid, id.nsze);
        Ok(Self {
            ctrl,
            nsid,
            lba_shift,
            nsze,
            max_blocks,
            zeroes_blocks,
            verify_blocks,
            zeroes_refused: Arc::default(),
            identify: Arc::new(id),
            max_retries,
            fail_over: false,
        })
    }

    /// This namespace for a [`crate::MultipathNamespace`] path: a path error
    /// is returned at once, for the multipath layer to fail over.
    pub(crate) fn for_multipath(mut self) -> Self {
        self.fail_over = true;
        self
    }

    /// Times a command of a request with `flags` may be sent again: none
    /// with Limited Retry, which the Linux host sets on requests it does not
    /// retry itself (`REQ_FAILFAST_DEV`, readahead).
    fn retries(&self, flags: IoFlags) -> u8 {
        if flags.limited_retry {
            0
        } else {
            self.max_retries
        }
    }

    /// Whether a command that failed with `e` after `tried` retries of
    /// `allowed` is sent again, and after what delay: [`retry_delay`] for an
    /// NVMe status, never for any other error (a lost connection is the
    /// reconnect policy's business).
    fn retry_delay(&self, e: &Error, tried: u8, allowed: u8) -> Option<Duration> {
        let Error::Nvme { status, .. } = e else { return None };
        if tried >= allowed {
            return None;
        }
        let crdt = if status.crd() == 0 { [0; 3] } else { self.ctrl.info().identify.crdt };
        retry_delay(*status, crdt, self.fail_over)
    }

    /// Waits before retry `tried + 1` of a command that failed with `e`, or
    /// returns `e` where it is not retried.
    async fn before_retry(&self, e: Error, tried: u8, allowed: u8) -> Result<()> {
        let delay = self.retry_delay(&e, tried, allowed).ok_or_else(|| e.clone())?;
        debug!(nsid = self.nsid, retry = tried + 1, ?delay, error = %e, "retrying");
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        Ok(())
    }

    /// Runs one command, sending it again after a status without DNR (at
    /// most `allowed` times).
    async fn run_one(&self, q: &QueueShared, sqe: Sqe, data: &mut Data<'_>, allowed: u8) -> Result<()> {
        let mut tried = 0;
        loop {
            match q.execute(sqe, data.xfer(), None, false).await {
                Ok(_) => return Ok(()),
                Err(e) => self.before_retry(e, tried, allowed).await?,
            }
            tried += 1;
        }
    }

    /// Runs `ops` on one queue, submitted together; the commands that fail
    /// with a status without DNR are sent again together, each at most its
    /// `retries` times. Returns each command's outcome.
    async fn run_ops(&self, q: &QueueShared, ops: &mut [Op<'_>]) -> Vec<Result<()>> {
        // `None`: not run yet, or to be sent again.
        let mut results: Vec<Option<Result<()>>> = (0..ops.len()).map(|_| None).collect();
        let mut tried = 0;
        loop {
            let (pending, batch): (Vec<usize>, Vec<_>) = ops
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| results[*i].is_none())
                .map(|(i, op)| (i, (op.sqe, op.data.xfer())))
                .unzip();
            if pending.is_empty() {
                break;
            }
            let done = q.execute_batch(batch).await;
            let (mut delay, mut again) = (Duration::ZERO, 0);
            for (i, (r, owned)) in pending.into_iter().zip(done) {
                if let Data::Owned(buf, _) = &mut ops[i].data {
                    *buf = owned;
                }
                let e = match r {
                    Ok(_) => {
                        results[i] = Some(Ok(()));
                        continue;
                    }
                    Err(e) => e,
                };
                match self.retry_delay(&e, tried, ops[i].retries).filter(|_| ops[i].data.resendable()) {
                    Some(d) => (delay, again) = (delay.max(d), again + 1),
                    None => results[i] = Some(Err(e)),
                }
            }
            if again > 0 {
                debug!(nsid = self.nsid, retry = tried + 1, commands = again, ?delay, "retrying");
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
            }
            tried += 1;
        }
        results.into_iter().map(|r| r.expect("every command ran")).collect()
    }

    /// Runs the commands of one request on one queue; its first error, in command order.
    async fn run(&self, mut ops: Vec<Op<'_>>) -> Result<()> {
        let q = self.ctrl.core().pick_io(queue_use(&ops))?;
        if let [op] = &mut ops[..] {
            // No batch bookkeeping for one command.
            return self.run_one(q, op.sqe, &mut op.data, op.retries).await;
        }
        self.run_ops(q, &mut ops).await.into_iter().collect()
    }

    /// One command of a request with `flags`.
    fn op<'a>(&self, sqe: Sqe, data: Data<'a>, flags: IoFlags) -> Op<'a> {
        Op { owner: 0, sqe, data, retries: self.retries(flags) }
    }

    /// Namespace ID.
    pub fn nsid(&self) -> u32 {
        self.nsid
    }

    /// Logical block size in bytes.
    pub fn block_size(&self) -> u32 {
        1 << self.lba_shift
    }

    /// Size in logical blocks (NSZE). It follows a namespace the target
    /// resizes: with asynchronous events on
    /// ([`crate::ConnectOptions::async_events`]), the Namespace Attribute
    /// Changed notice re-reads it for every handle before
    /// [`crate::ControllerEvent::NamespacesChanged`] reaches the application
    /// (0 once the namespace is gone).
    pub fn blocks(&self) -> u64 {
        self.nsze.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Size in bytes ([`Self::blocks`]).
    pub fn size_bytes(&self) -> u64 {
        self.blocks() << self.lba_shift
    }

    /// Largest transfer one command carries (longer requests are split).
    pub fn max_transfer(&self) -> u64 {
        self.max_blocks << self.lba_shift
    }

    /// The Identify Namespace data this handle was built from.
    pub fn identify(&self) -> &IdentifyNamespace {
        &self.identify
    }

    /// The controller.
    pub fn controller(&self) -> &Controller {
        &self.ctrl
    }

    /// Blocks of a `len`-byte transfer starting at `lba`.
    fn blocks_of(&self, lba: u64, len: usize) -> Result<u64> {
        if len == 0 || len & ((1 << self.lba_shift) - 1) != 0 {
            return Err(Error::InvalidArgument(format!(
                "buffer length {len} is not a non-zero multiple of the block size {}",
                self.block_size()
            )));
        }
        let blocks = (len >> self.lba_shift) as u64;
        check_range(lba, blocks)?;
        Ok(blocks)
    }

    fn rw_sqe(&self, opcode: IoOpcode, lba: u64, blocks: u64, flags: IoFlags) -> Sqe {
        let mut s = Sqe::new(opcode.0);
        s.set_nsid(self.nsid).set_slba(lba).set_cdw(12, (blocks - 1) as u32 | flags.cdw12_bits());
        s
    }

    /// Splits `[lba, lba+blocks)` into per-command pieces: (lba, blocks, byte offset).
    fn pieces(&self, lba: u64, blocks: u64) -> impl Iterator<Item = (u64, u64, usize)> + '_ {
        let max = self.max_blocks;
        (0..blocks.div_ceil(max)).map(move |i| {
            let start = i * max;
            (lba + start, (blocks - start).min(max), (start << self.lba_shift) as usize)
        })
    }

    /// Reads `buf.len()` bytes (a multiple of the block size) starting at `lba`.
    pub async fn read(&self, lba: u64, buf: &mut [u8]) -> Result<()> {
        self.read_with(lba, buf, IoFlags::default()).await
    }

    /// Reads with flags.
    pub async fn read_with(&self, lba: u64, buf: &mut [u8], flags: IoFlags) -> Result<()> {
        let blocks = self.blocks_of(lba, buf.len())?;
        if blocks <= self.max_blocks {
            let q = self.ctrl.core().pick_io(QueueUse::Read)?;
            let sqe = self.rw_sqe(IoOpcode::READ, lba, blocks, flags);
            return self.run_one(q, sqe, &mut Data::Read(buf), self.retries(flags)).await;
        }
        let chunk = self.max_transfer() as usize;
        let ops = self
            .pieces(lba, blocks)
            .zip(buf.chunks_mut(chunk))
            .map(|((l, n, _), b)| self.op(self.rw_sqe(IoOpcode::READ, l, n, flags), Data::Read(b), flags))
            .collect();
        self.run(ops).await
    }

    /// Reads into `bufs` in order, as `preadv` does: their lengths together
    /// are a multiple of the block size (each alone may be any length), the
    /// blocks from `lba` on fill the first, then the next, and so on. One
    /// command carries them all (several above the maximum transfer size,
    /// a buffer split between two where it must): pages of a cache or rows
    /// of a tensor that are not next to each other in memory arrive without
    /// a bounce buffer, copied once from the receive buffer as with
    /// [`Self::read`].
    pub async fn read_vectored(&self, lba: u64, bufs: &mut [IoSliceMut<'_>], flags: IoFlags) -> Result<()> {
        let len = bufs.iter().map(|b| b.len()).sum();
        self.run(self.vectored_ops(IoOpcode::READ, lba, len, bufs.iter_mut().map(|b| &mut **b), flags, 0)?)
            .await
    }

    /// Writes `bufs` in order, as `pwritev` does: their lengths together are
    /// a multiple of the block size, written from `lba` on as one command
    /// (several above the maximum transfer size). The data is gathered once
    /// into a buffer the queue reuses, as [`Self::write`] copies it.
    pub async fn write_vectored(&self, lba: u64, bufs: &[IoSlice<'_>], flags: IoFlags) -> Result<()> {
        let len = bufs.iter().map(|b| b.len()).sum();
        self.run(self.vectored_ops(IoOpcode::WRITE, lba, len, bufs.iter().map(|b| &**b), flags, 0)?).await
    }

    /// The commands of a vectored read or write of `pieces` (`len` bytes
    /// together) from `lba`, for request `owner`: one per maximum transfer,
    /// each with its pieces (split where a command ends).
    fn vectored_ops<'a, B: Piece<'a>>(
        &self,
        opcode: IoOpcode,
        lba: u64,
        len: usize,
        pieces: impl IntoIterator<Item = B>,
        flags: IoFlags,
        owner: usize,
    ) -> Result<Vec<Op<'a>>> {
        let blocks = self.blocks_of(lba, len)?;
        let groups = regroup(pieces, self.max_transfer() as usize);
        Ok(self
            .pieces(lba, blocks)
            .zip(groups)
            .map(|((l, n, _), g)| Op {
                owner,
                ..self.op(self.rw_sqe(opcode, l, n, flags), B::data(g), flags)
            })
            .collect())
    }

    /// Reads `len` bytes (a multiple of the block size) starting at `lba` into
    /// a new buffer, without the intermediate copy of [`Self::read`]: see
    /// [`Self::read_buf`].
    pub async fn read_bytes(&self, lba: u64, len: usize) -> Result<Bytes> {
        self.read_buf(lba, BytesMut::new(), len).await.map(BytesMut::freeze)
    }

    /// Reads `len` bytes (a multiple of the block size) starting at `lba` and
    /// appends them to `buf`, which is returned (on error it is dropped).
    ///
    /// The buffer belongs to the request while it runs, so the queue driver
    /// may fill it itself: payload bytes that arrive together with their PDU
    /// header are copied once out of the receive buffer, the rest is read from
    /// the socket straight into `buf` (no copy). [`Self::read`] instead parks
    /// the data in the receive buffer and copies all of it into the caller's
    /// slice, because only the caller's own task may write into a borrowed
    /// slice (see the crate documentation). Dropping the returned future is
    /// safe at any point: the buffer stays with the request until the
    /// controller is done with it. Requests above the maximum transfer size
    /// are split; their pieces share `buf`'s allocation and are joined
    /// without copying.
    pub async fn read_buf(&self, lba: u64, mut buf: BytesMut, len: usize) -> Result<BytesMut> {
        let blocks = self.blocks_of(lba, len)?;
        buf.reserve(len);
        let q = self.ctrl.core().pick_io(QueueUse::Read)?;
        let missing = || Error::Controller("read data missing".into());
        if blocks <= self.max_blocks {
            let allowed = self.max_retries;
            let sqe = self.rw_sqe(IoOpcode::READ, lba, blocks, IoFlags::default());
            let base = buf.len();
            let mut tried = 0;
            loop {
                match q.execute_owned_x(sqe, buf, len).await {
                    (Ok(_), b) => return b.ok_or_else(missing),
                    (Err(e), b) => {
                        // A retry needs the buffer back (an NVMe status
                        // always brings it), without the failed read's bytes.
                        let Some(b) = b.filter(|_| self.retry_delay(&e, tried, allowed).is_some()) else {
                            return Err(e);
                        };
                        self.before_retry(e, tried, allowed).await?;
                        buf = b;
                        buf.truncate(base);
                    }
                }
                tried += 1;
            }
        }
        // One piece of the spare capacity per command, each exactly its size.
        let mut rest = buf.split_off(buf.len());
        let mut ops = Vec::new();
        for (l, n, _) in self.pieces(lba, blocks) {
            let len = (n as usize) << self.lba_shift;
            let tail = rest.split_off(len);
            let piece = std::mem::replace(&mut rest, tail);
            let sqe = self.rw_sqe(IoOpcode::READ, l, n, IoFlags::default());
            ops.push(self.op(sqe, Data::Owned(Some(piece), len), IoFlags::default()));
        }
        self.run_ops(q, &mut ops).await.into_iter().collect::<Result<()>>()?;
        for op in ops {
            let Data::Owned(piece, _) = op.data else { unreachable!("read_buf builds owned reads") };
            // Contiguous pieces of one allocation: O(1).
            buf.unsplit(piece.ok_or_else(missing)?);
        }
        Ok(buf)
    }

    /// Writes `buf` (a multiple of the block size) starting at `lba`. The data
    /// is copied once, into a buffer the queue reuses.
    pub async fn write(&self, lba: u64, buf: &[u8]) -> Result<()> {
        self.write_with(lba, buf, IoFlags::default()).await
    }

    /// Writes with flags (e.g. [`IoFlags::FUA`]).
    pub async fn write_with(&self, lba: u64, buf: &[u8], flags: IoFlags) -> Result<()> {
        self.data_out(IoOpcode::WRITE, lba, buf, flags).await
    }

    /// Writes `data` without copying it.
    pub async fn write_bytes(&self, lba: u64, data: Bytes, flags: IoFlags) -> Result<()> {
        let blocks = self.blocks_of(lba, data.len())?;
        if blocks <= self.max_blocks {
            // One command: no batch bookkeeping (nothing allocated per call).
            let q = self.ctrl.core().pick_io(QueueUse::Default)?;
            let sqe = self.rw_sqe(IoOpcode::WRITE, lba, blocks, flags);
            return self.run_one(q, sqe, &mut Data::Bytes(data), self.retries(flags)).await;
        }
        let ops = self
            .pieces(lba, blocks)
            .map(|(l, n, off)| {
                let end = off + ((n as usize) << self.lba_shift);
                self.op(self.rw_sqe(IoOpcode::WRITE, l, n, flags), Data::Bytes(data.slice(off..end)), flags)
            })
            .collect();
        self.run(ops).await
    }

    async fn data_out(&self, op: IoOpcode, lba: u64, buf: &[u8], flags: IoFlags) -> Result<()> {
        let blocks = self.blocks_of(lba, buf.len())?;
        if blocks <= self.max_blocks {
            let q = self.ctrl.core().pick_io(QueueUse::Default)?;
            let sqe = self.rw_sqe(op, lba, blocks, flags);
            return self.run_one(q, sqe, &mut Data::Write(buf), self.retries(flags)).await;
        }
        let chunk = self.max_transfer() as usize;
        let ops = self
            .pieces(lba, blocks)
            .zip(buf.chunks(chunk))
            .map(|((l, n, _), b)| self.op(self.rw_sqe(op, l, n, flags), Data::Write(b), flags))
            .collect();
        self.run(ops).await
    }

    /// Compares `buf` with the blocks at `lba` (Compare, OPC 05h). Returns
    /// `Ok(false)` on a miscompare (status Compare Failure).
    pub async fn compare(&self, lba: u64, buf: &[u8]) -> Result<bool> {
        match self.data_out(IoOpcode::COMPARE, lba, buf, IoFlags::default()).await {
            Ok(()) => Ok(true),
            Err(Error::Nvme { status, .. }) if status.code() == Status::COMPARE_FAILED => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Compare and Write: writes `new` at `lba` only if the blocks there
    /// hold `expected`, as one atomic operation (a fused Compare, FUSE 01b,
    /// and Write, FUSE 10b, sent next to each other on one queue; NVMe Base
    /// 2.0 §3.4.2). Returns `Ok(true)` when it wrote, `Ok(false)` on a
    /// miscompare (Compare Failure; the Write aborted). A compare-and-swap
    /// for locks and counters shared by hosts (VMware's ATS does this).
    ///
    /// The controller must report the operation (Identify Controller FUSES
    /// bit 0: this crate's target and SPDK do; the Linux kernel target does
    /// not), else [`Error::InvalidArgument`]; so must `expected` and `new`:
    /// the same length, whole blocks, one command's worth (MDTS). `flags`
    /// apply to the Write. Neither command is sent again, neither after a
    /// status without DNR nor after a lost connection (the pair must stay
    /// together): a failure comes back as the command's error, that of the
    /// command at fault rather than the one aborted for it.
    pub async fn compare_and_write(
        &self,
        lba: u64,
        expected: &[u8],
        new: &[u8],
        flags: IoFlags,
    ) -> Result<bool> {
        if self.ctrl.info().identify.fuses & 1 == 0 {
            return Err(Error::InvalidArgument(
                "the controller does not support Compare and Write (Identify Controller FUSES bit 0)".into(),
            ));
        }
        if expected.len() != new.len() {
            return Err(Error::InvalidArgument(format!(
                "compare and write: {} bytes to compare, {} to write",
                expected.len(),
                new.len()
            )));
        }
        let blocks = self.blocks_of(lba, new.len())?;
        if blocks > self.max_blocks {
            return Err(Error::InvalidArgument(format!(
                "compare and write of {blocks} blocks: more than one command ({} blocks)",
                self.max_blocks
            )));
        }
        let mut compare = self.rw_sqe(IoOpcode::COMPARE, lba, blocks, IoFlags::default());
        compare.set_fuse(FUSE_FIRST);
        let mut write = self.rw_sqe(IoOpcode::WRITE, lba, blocks, flags);
        write.set_fuse(FUSE_SECOND);
        let q = self.ctrl.core().pick_io(QueueUse::Default)?;
        let [c, w] =
            q.execute_fused([(compare, Payload::Write(expected)), (write, Payload::Write(new))]).await;
        let is = |e: &Error, code: Status| matches!(e, Error::Nvme { status, .. } if status.code() == code);
        match (c, w) {
            (Ok(_), Ok(_)) => Ok(true),
            (Ok(_), Err(we)) => Err(we),
            (Err(ce), w) => {
                let write_aborted = w.as_ref().err().is_some_and(|we| is(we, Status::ABORTED_FAILED_FUSED));
                if is(&ce, Status::COMPARE_FAILED) && write_aborted {
                    return Ok(false);
                }
                match w {
                    // The Compare was aborted for the Write's failure.
                    Err(we) if is(&ce, Status::ABORTED_FAILED_FUSED) => Err(we),
                    _ => Err(ce),
                }
            }
        }
    }

    /// Flush (volatile write cache to media).
    pub async fn flush(&self) -> Result<()> {
        let mut s = Sqe::new(IoOpcode::FLUSH.0);
        s.set_nsid(self.nsid);
        // Straight to the queue: `run` takes a Vec, one allocation per flush.
        self.run_one(self.ctrl.core().pick_io(QueueUse::Default)?, s, &mut Data::None, self.max_retries).await
    }

    /// Write Zeroes over `blocks` blocks from `lba`; `deallocate` sets DEAC
    /// (the controller may deallocate instead of writing). Sent as one
    /// command per 65536 blocks or the controller's Write Zeroes Size Limit
    /// (WZSL), whichever is less, 256 commands at a time: on an error, the
    /// commands already sent may have zeroed part of the range, and the rest
    /// is not sent.
    pub async fn write_zeroes(&self, lba: u64, blocks: u64, deallocate: bool, flags: IoFlags) -> Result<()> {
        if blocks == 0 {
            return Err(Error::InvalidArgument("write_zeroes of 0 blocks".into()));
        }
        let deac = (deallocate as u32) << 25;
        self.no_data(IoOpcode::WRITE_ZEROES, lba, blocks, self.zeroes_blocks, deac, flags).await
    }

    /// Zeroes `blocks` blocks from `lba` whatever the controller offers, as
    /// the Linux block layer's `blkdev_issue_zeroout` does: with Write
    /// Zeroes ([`Self::write_zeroes`], without DEAC) where Identify
    /// Controller ONCS bit 3 lists it, else with Writes of zeroes, 8 MiB at
    /// a time, each split at the maximum transfer with its commands in flight
    /// together and sharing one buffer of zeroes. A controller that refuses Write Zeroes with Invalid
    /// Opcode or Invalid Field in Command although it lists it (nvmet's file
    /// namespaces on a filesystem without `FALLOC_FL_ZERO_RANGE`, e.g.
    /// tmpfs, answer Invalid Opcode) gets the range written instead, and
    /// this handle writes from then on, as Linux turns the device's write
    /// zeroes limit off after `-EOPNOTSUPP`. Other errors are returned.
    pub async fn zero_out(&self, lba: u64, blocks: u64, flags: IoFlags) -> Result<()> {
        use std::sync::atomic::Ordering;
        const ZERO_BUF: u64 = 8 << 20;
        if blocks == 0 {
            return Err(Error::InvalidArgument("zero_out of 0 blocks".into()));
        }
        check_range(lba, blocks)?;
        if !self.zero_out_writes() {
            match self.write_zeroes(lba, blocks, false, flags).await {
                Err(e)
                    if e.status().is_some_and(|s| {
                        let c = s.code();
                        c == Status::INVALID_OPCODE || c == Status::INVALID_FIELD
                    }) =>
                {
                    tracing::info!(nsid = self.nsid, error = %e, "Write Zeroes refused: zeroing with writes from now on");
                    self.zeroes_refused.store(true, Ordering::Relaxed);
                }
                r => return r,
            }
        }
        // Memory stays at 8 MiB whatever the range (a controller without
        // MDTS allows 65536-block commands: 256 MiB of 4 KiB blocks).
        let per = (ZERO_BUF >> self.lba_shift).clamp(1, blocks);
        let zeroes = Bytes::from(vec![0u8; (per << self.lba_shift) as usize]);
        let mut at = 0;
        while at < blocks {
            let n = (blocks - at).min(per);
            self.write_bytes(lba + at, zeroes.slice(..(n << self.lba_shift) as usize), flags).await?;
            at += n;
        }
        Ok(())
    }

    /// Whether [`Self::zero_out`] writes zeroes because the controller
    /// refused a Write Zeroes (or lists none: Identify Controller ONCS bit 3).
    pub fn zero_out_writes(&self) -> bool {
        self.zeroes_refused.load(std::sync::atomic::Ordering::Relaxed)
            || self.ctrl.info().identify.oncs & ONCS_WRITE_ZEROES == 0
    }

    /// Verify (OPC 0Ch): the controller reads `blocks` blocks from `lba`
    /// and checks them (for a file or block device, that they can be read)
    /// without sending the data; a block that cannot be read fails it
    /// (Unrecovered Read Error, as a Read would). Sent as one command per
    /// 65536 blocks or the controller's Verify Size Limit (VSL), whichever
    /// is less, 256 at a time; a controller without Verify (ONCS bit 7;
    /// nvmet) answers Invalid Opcode.
    pub async fn verify(&self, lba: u64, blocks: u64, flags: IoFlags) -> Result<()> {
        if blocks == 0 {
            return Err(Error::InvalidArgument("verify of 0 blocks".into()));
        }
        self.no_data(IoOpcode::VERIFY, lba, blocks, self.verify_blocks, 0, flags).await
    }

    /// Sends `op`, a command with SLBA and NLB and no data (Write Zeroes,
    /// Verify), over `blocks` blocks from `lba`: one command per `per`
    /// blocks with `cdw12` OR-ed in, 256 commands at a time. On an error
    /// the commands already sent have acted, and the rest is not sent.
    async fn no_data(
        &self,
        op: IoOpcode,
        lba: u64,
        blocks: u64,
        per: u64,
        cdw12: u32,
        flags: IoFlags,
    ) -> Result<()> {
        check_range(lba, blocks)?;
        // In groups: the caller picks `blocks` freely, and building every
        // command at once (one per 65536 blocks) could ask for more memory than
        // exists, which aborts the process (e.g. `write_zeroes(0, u64::MAX, ..)`
        // asked for 2^48 commands). A failed group ends the request.
        let commands = blocks.div_ceil(per);
        let mut first = 0;
        while first < commands {
            let last = commands.min(first + NO_DATA_GROUP);
            let ops = (first..last)
                .map(|i| {
                    let start = i * per;
                    let n = (blocks - start).min(per);
                    let mut s = self.rw_sqe(op, lba + start, n, flags);
                    s.set_cdw(12, s.cdw(12) | cdw12);
                    self.op(s, Data::None, flags)
                })
                .collect();
            self.run(ops).await?;
            first = last;
        }
        Ok(())
    }

    /// Deallocates (TRIM) the given `(lba, blocks)` ranges with Dataset
    /// Management (AD): 256 ranges per command, or fewer and shorter ones
    /// where the controller's DMRL, DMRSL and DMSL (Identify CNS 06h) say
    /// so, as the Linux host's discard limits follow them; empty ranges are
    /// left out. Fails with [`Error::InvalidArgument`] for a range past the
    /// last 64-bit LBA, before anything is sent.
    pub async fn deallocate(&self, ranges: &[(u64, u32)]) -> Result<()> {
        let cmds = dsm_commands(ranges, &self.ctrl.info().nvm_limits)?;
        if cmds.is_empty() {
            return Ok(());
        }
        let bufs: Vec<Vec<u8>> = cmds.iter().map(|c| c.iter().flat_map(|r| r.encode()).collect()).collect();
        let ops = bufs
            .iter()
            .map(|b| {
                self.op(
                    DsmCmd::deallocate(self.nsid, b.len() / 16).to_sqe(0),
                    Data::Write(b),
                    IoFlags::default(),
                )
            })
            .collect();
        self.run(ops).await
    }

    /// Copies blocks inside the namespace: the `(lba, blocks)` source
    /// ranges, in order, to consecutive blocks from `dest_lba`, with the
    /// Copy command (OPC 19h, source ranges in descriptor format 0), so the
    /// data does not cross the network. With `flags.fua` the destination is
    /// durable when this returns.
    ///
    /// A request past the namespace's Copy limits (Identify Namespace
    /// MSSRL, MCL, MSRC) goes as several Copy commands: in flight together
    /// (256 at a time) where no source overlaps the destination, else one
    /// after the other, so a source that overlaps an earlier command's
    /// destination is read after that command wrote it. Where the
    /// controller has no Copy (ONCS bit 8 and OCFS format 0; the Linux
    /// kernel target has none), the blocks go through this host instead
    /// ([`Self::copy_through_host`]), as `copy_file_range` falls back to
    /// reading and writing. On an error, the commands already sent may
    /// have copied their part. Fails with [`Error::InvalidArgument`] for a
    /// range of 0 blocks or past the last 64-bit LBA; past the namespace's
    /// end the controller answers LBA Out of Range.
    pub async fn copy(&self, ranges: &[(u64, u32)], dest_lba: u64, flags: IoFlags) -> Result<()> {
        let ctrl = self.ctrl.info();
        if ctrl.identify.oncs & ONCS_COPY == 0 || ctrl.identify.ocfs & copy::OCFS_FORMAT0 == 0 {
            return self.copy_through_host(ranges, dest_lba, flags).await;
        }
        let commands = copy_commands(&self.identify, ranges)?;
        let total: u64 = ranges.iter().map(|&(_, n)| n as u64).sum();
        check_range(dest_lba, total)?;
        let mut dest = dest_lba;
        let mut built = Vec::with_capacity(commands.len());
        for (sources, blocks) in commands {
            let mut sqe = CopyCmd::new(self.nsid, dest, sources.len(), flags.fua).to_sqe(0);
            sqe.set_cdw(12, sqe.cdw(12) | flags.cdw12_bits() & CopyCmd::LR);
            built.push((sqe, copy::encode_ranges(&sources)?));
            dest += blocks;
        }
        let overlap = ranges.iter().any(|&(lba, n)| lba < dest_lba + total && dest_lba < lba + n as u64);
        if overlap {
            // A later command may read what an earlier one writes: in order.
            for (sqe, buf) in &built {
                let q = self.ctrl.core().pick_io(QueueUse::Default)?;
                self.run_one(q, *sqe, &mut Data::Write(buf), self.retries(flags)).await?;
            }
            return Ok(());
        }
        // No command reads what another writes: together, as a split write
        // is, a group at a time (a copy of gigabytes is thousands of them).
        for group in built.chunks(COPY_GROUP) {
            let ops = group.iter().map(|(sqe, buf)| self.op(*sqe, Data::Write(buf), flags)).collect();
            self.run(ops).await?;
        }
        Ok(())
    }

    /// The copy of [`Self::copy`] done by this host: the source blocks are
    /// read and written to the destination, one maximum transfer at a time
    /// and in order (so a source that overlaps the destination is read
    /// after the pieces before it were written, as split Copy commands
    /// are). The data crosses the network twice; memory use is one
    /// maximum transfer. [`Self::copy`] takes this way where the
    /// controller has no Copy command.
    pub async fn copy_through_host(
        &self,
        ranges: &[(u64, u32)],
        dest_lba: u64,
        flags: IoFlags,
    ) -> Result<()> {
        let pieces = IdentifyNamespace {
            mssrl: 0,
            mcl: self.max_blocks.min(u32::MAX as u64) as u32,
            msrc: (copy::COPY_MAX_RANGES - 1) as u8,
            ..IdentifyNamespace::default()
        };
        let commands = copy_commands(&pieces, ranges)?;
        let total: u64 = ranges.iter().map(|&(_, n)| n as u64).sum();
        check_range(dest_lba, total)?;
        let bs = self.block_size() as usize;
        let (mut buf, mut dest) = (Vec::new(), dest_lba);
        for (sources, blocks) in commands {
            buf.resize(blocks as usize * bs, 0);
            let mut at = 0;
            for r in &sources {
                let len = r.blocks() as usize * bs;
                self.read(r.slba, &mut buf[at..at + len]).await?;
                at += len;
            }
            self.write_with(dest, &buf[..at], flags).await?;
            dest += blocks;
        }
        Ok(())
    }

    /// Reservation Register (NVMe Base §8.19): `action` registers
    /// `new_key` for this host, replaces its key with `new_key`, or
    /// unregisters it; Replace and Unregister need `current_key` unless
    /// `ignore_existing_key`. Registrations belong to the host identifier
    /// ([`crate::HostIdentity`]), shared by every controller of this host.
    /// A refused action is [`Error::Nvme`] with Reservation Conflict.
    ///
    /// Register, Acquire and Release are never resubmitted after a lost
    /// connection (whatever [`crate::ReconnectPolicy::requeue`] says): done
    /// twice, a Replace, Preempt or Clear that succeeded the first time
    /// fails the second. They fail with [`Error::ConnectionLost`] instead,
    /// and [`Self::reservation_report`] says what happened.
    pub async fn reservation_register(
        &self,
        action: RegisterAction,
        current_key: u64,
        new_key: u64,
        ignore_existing_key: bool,
    ) -> Result<()> {
        let cmd = ReservationCmd::register(self.nsid, action, ignore_existing_key);
        self.reservation_once(cmd, ReservationKeys { current: current_key, other: new_key }).await
    }

    /// Reservation Acquire: takes a reservation of type `rtype` (Acquire),
    /// or preempts the hosts registered with `preempt_key` (Preempt,
    /// Preempt and Abort), as a host registered with `current_key`.
    pub async fn reservation_acquire(
        &self,
        action: AcquireAction,
        rtype: ReservationType,
        current_key: u64,
        preempt_key: u64,
    ) -> Result<()> {
        let cmd = ReservationCmd::acquire(self.nsid, action, rtype);
        self.reservation_once(cmd, ReservationKeys { current: current_key, other: preempt_key }).await
    }

    /// Reservation Release: releases the reservation of type `rtype` this
    /// host holds (Release), or drops the reservation and every
    /// registration (Clear), as a host registered with `current_key`.
    pub async fn reservation_release(
        &self,
        action: ReleaseAction,
        rtype: ReservationType,
        current_key: u64,
    ) -> Result<()> {
        let cmd = ReservationCmd::release(self.nsid, action, rtype);
        self.reservation_once(cmd, ReservationKeys { current: current_key, other: 0 }).await
    }

    /// Sends Register, Acquire or Release with its keys (the first
    /// [`ReservationCmd::data_len`] bytes: Release carries CRKEY alone),
    /// never resubmitted.
    async fn reservation_once(&self, cmd: ReservationCmd, keys: ReservationKeys) -> Result<()> {
        let data = keys.encode();
        let payload = Payload::Write(&data[..cmd.data_len() as usize]);
        self.ctrl.core().pick_io(QueueUse::Default)?.execute_once(cmd.to_sqe(0), payload).await.map(drop)
    }

    /// Reservation Report with the extended data structure (128-bit host
    /// identifiers, which fabrics use): the reservation held and every
    /// registrant. Asks for room for 63 registrants, then once more for all
    /// of them if there are more (bounded by the maximum transfer size).
    pub async fn reservation_report(&self) -> Result<ReservationStatus> {
        let mut len = 4096usize;
        for _ in 0..2 {
            let mut buf = vec![0u8; len];
            let cmd = ReservationCmd::report(self.nsid, len as u32);
            self.ctrl.io_command(cmd.to_sqe(0), Payload::Read(&mut buf)).await?;
            let status = ReservationStatus::decode(&buf)?;
            let need = STATUS_EXT_HEADER_LEN + status.regctl as usize * REGISTRANT_EXT_LEN;
            if need <= len || need as u64 > self.max_transfer() {
                return Ok(status);
            }
            len = need.next_multiple_of(4);
        }
        Err(Error::Controller("reservation report: the registrants kept growing while being read".into()))
    }

    /// The Zoned Namespace command set's Identify Namespace (CNS 05h, CSI
    /// 02h): zone size (`zsze[FLBAS]`, in blocks), MAR and MOR. A namespace
    /// that is not zoned answers zeroes (nvmet) or an error.
    pub async fn identify_zoned(&self) -> Result<IdentifyNsZns> {
        let mut buf = [0u8; IDENTIFY_DATA_LEN];
        let mut cmd = IdentifyCmd::new(Cns::CS_NS, self.nsid);
        cmd.csi = Csi::ZNS;
        self.ctrl.identify_raw(cmd, &mut buf).await?;
        Ok(IdentifyNsZns::decode(&buf)?)
    }

    /// Report Zones (Zone Management Receive): the zones `filter` selects
    /// from the zone holding `lba` on, at most `max_zones` descriptors (and
    /// no more than one command carries); Number of Zones counts every zone
    /// selected. Walk a large namespace with [`Self::zones`].
    pub async fn report_zones(
        &self,
        lba: u64,
        filter: ZoneReportFilter,
        max_zones: usize,
    ) -> Result<ZoneReport> {
        let most =
            (self.max_transfer() as usize).saturating_sub(ZONE_REPORT_HEADER_LEN) / ZONE_DESCRIPTOR_LEN;
        let len = ZONE_REPORT_HEADER_LEN + max_zones.clamp(1, most.max(1)) * ZONE_DESCRIPTOR_LEN;
        let mut buf = vec![0u8; len];
        let cmd = ZoneMgmtRecvCmd::report(self.nsid, lba, len as u32, filter, false);
        self.ctrl.io_command(cmd.to_sqe(0), Payload::Read(&mut buf)).await?;
        Ok(ZoneReport::decode(&buf)?)
    }

    /// Every zone of the namespace, in order (one Report Zones per
    /// maximum transfer). The zone size comes from [`Self::identify_zoned`]
    /// (a zone's capacity may be less).
    pub async fn zones(&self) -> Result<Vec<ZoneDescriptor>> {
        let zsze =
            self.identify_zoned().await?.zsze.get(self.identify.lba_format_index()).copied().unwrap_or(0);
        if zsze == 0 {
            return Err(Error::Controller(format!(
                "namespace {} reports no zone size: not zoned",
                self.nsid
            )));
        }
        let mut all: Vec<ZoneDescriptor> = Vec::new();
        let mut lba = 0;
        // Bounded: each pass reports at least one more zone, or ends.
        let nsze = self.blocks();
        while lba < nsze {
            // No more descriptors than zones are left, and no more than
            // REPORT_ZONES_MAX_LEN holds, as the Linux host bounds its report
            // buffer (`nvme_zns_alloc_report_buffer`): a buffer of the whole
            // maximum transfer (4 MiB against nvmet) for a few zones is waste.
            let left = (nsze - lba).div_ceil(zsze);
            let most = (REPORT_ZONES_MAX_LEN - ZONE_REPORT_HEADER_LEN) / ZONE_DESCRIPTOR_LEN;
            let r = self.report_zones(lba, ZoneReportFilter::ALL, (left as usize).min(most)).await?;
            let Some(last) = r.zones.last() else { break };
            let next = last.slba.saturating_add(zsze);
            if next <= lba {
                return Err(Error::Controller(format!("zone report from LBA {lba} did not move on")));
            }
            all.extend(r.zones);
            lba = next;
        }
        Ok(all)
    }

    /// Zone Management Send `action` (Open, Close, Finish, Reset) on the
    /// zone starting at `zslba`, or with `select_all` on every zone it
    /// applies to. Sent once, never resubmitted.
    pub async fn manage_zone(&self, action: ZoneSendAction, zslba: u64, select_all: bool) -> Result<()> {
        let cmd = ZoneMgmtSendCmd { nsid: self.nsid, slba: zslba, action, select_all };
        self.ctrl
            .core()
            .pick_io(QueueUse::Default)?
            .execute_once(cmd.to_sqe(0), Payload::None)
            .await
            .map(drop)
    }

    /// Zone Append: writes `data` (whole blocks, one command) at the write
    /// pointer of the zone starting at `zslba` and returns the LBA it went
    /// to. Sent once, never resubmitted (a second try could append twice).
    pub async fn zone_append(&self, zslba: u64, data: &[u8], flags: IoFlags) -> Result<u64> {
        let blocks = self.blocks_of(zslba, data.len())?;
        if blocks > self.max_blocks {
            return Err(Error::InvalidArgument(format!(
                "zone append of {blocks} blocks: more than one command ({} blocks)",
                self.max_blocks
            )));
        }
        let sqe = self.rw_sqe(IoOpcode::ZONE_APPEND, zslba, blocks, flags);
        let q = self.ctrl.core().pick_io(QueueUse::Default)?;
        let cqe = q.execute_once(sqe, Payload::Write(data)).await?;
        Ok(cqe.dw0() as u64 | (cqe.dw1() as u64) << 32)
    }

    /// Starts a batch of requests submitted together.
    pub fn batch(&self) -> Batch<'_> {
        Batch { ns: self, ops: Vec::new(), count: 0, invalid: Vec::new() }
    }
}

impl<'a> Batch<'a> {
    fn add(&mut self, f: impl FnOnce(&Namespace, usize, &mut Vec<Op<'a>>) -> Result<()>) -> usize {
        let id = self.count;
        self.count += 1;
        if let Err(e) = f(self.ns, id, &mut self.ops) {
            self.invalid.push((id, e));
        }
        id
    }

    /// Adds a read; returns its index in the results.
    pub fn read(&mut self, lba: u64, buf: &'a mut [u8], flags: IoFlags) -> usize {
        self.add(|ns, owner, ops| {
            let blocks = ns.blocks_of(lba, buf.len())?;
            let chunk = ns.max_transfer() as usize;
            for ((l, n, _), b) in ns.pieces(lba, blocks).zip(buf.chunks_mut(chunk)) {
                ops.push(Op { owner, ..ns.op(ns.rw_sqe(IoOpcode::READ, l, n, flags), Data::Read(b), flags) });
            }
            Ok(())
        })
    }

    /// Adds a write; returns its index in the results.
    pub fn write(&mut self, lba: u64, buf: &'a [u8], flags: IoFlags) -> usize {
        self.add(|ns, owner, ops| {
            let blocks = ns.blocks_of(lba, buf.len())?;
            let chunk = ns.max_transfer() as usize;
            for ((l, n, _), b) in ns.pieces(lba, blocks).zip(buf.chunks(chunk)) {
                ops.push(Op {
                    owner,
                    ..ns.op(ns.rw_sqe(IoOpcode::WRITE, l, n, flags), Data::Write(b), flags)
                });
            }
            Ok(())
        })
    }

    /// Adds a vectored read ([`Namespace::read_vectored`]); returns its
    /// index in the results.
    pub fn read_vectored(&mut self, lba: u64, bufs: &'a mut [IoSliceMut<'_>], flags: IoFlags) -> usize {
        self.add(|ns, owner, ops| {
            let len = bufs.iter().map(|b| b.len()).sum();
            let pieces = bufs.iter_mut().map(|b| &mut **b);
            ops.extend(ns.vectored_ops(IoOpcode::READ, lba, len, pieces, flags, owner)?);
            Ok(())
        })
    }

    /// Adds a vectored write ([`Namespace::write_vectored`]); returns its
    /// index in the results.
    pub fn write_vectored(&mut self, lba: u64, bufs: &'a [IoSlice<'_>], flags: IoFlags) -> usize {
        self.add(|ns, owner, ops| {
            let len = bufs.iter().map(|b| b.len()).sum();
            ops.extend(ns.vectored_ops(
                IoOpcode::WRITE,
                lba,
                len,
                bufs.iter().map(|b| &**b),
                flags,
                owner,
            )?);
            Ok(())
        })
    }

    /// Adds a flush; returns its index in the results.
    pub fn flush(&mut self) -> usize {
        self.add(|ns, owner, ops| {
            let mut s = Sqe::new(IoOpcode::FLUSH.0);
            s.set_nsid(ns.nsid);
            ops.push(Op { owner, ..ns.op(s, Data::None, IoFlags::default()) });
            Ok(())
        })
    }

    /// Number of requests added.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Submits everything on one I/O queue and waits; one result per added
    /// request, in the order added. Commands that fail with a status without
    /// DNR are sent again as [`crate::ConnectOptions::max_retries`] says.
    pub async fn submit(mut self) -> Vec<Result<()>> {
        let mut results: Vec<Result<()>> = (0..self.count).map(|_| Ok(())).collect();
        for (id, e) in self.invalid {
            results[id] = Err(e);
        }
        let q = match self.ns.ctrl.core().pick_io(queue_use(&self.ops)) {
            Ok(q) => q,
            Err(e) => return results.into_iter().map(|_| Err(e.clone())).collect(),
        };
        let done = self.ns.run_ops(q, &mut self.ops).await;
        for (owner, r) in self.ops.iter().map(|o| o.owner).zip(done) {
            if let (Err(e), Ok(())) = (r, &results[owner]) {
                results[owner] = Err(e);
            }
        }
        results
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// Dataset Management commands as (slba, blocks) lists.
    fn dsm_planned(ranges: &[(u64, u32)], dmrl: u8, dmrsl: u32, dmsl: u64) -> Vec<Vec<(u64, u32)>> {
        let limits = IdentifyCtrlNvm { dmrl, dmrsl, dmsl, ..Default::default() };
        dsm_commands(ranges, &limits)
            .unwrap()
            .into_iter()
            .map(|c| c.iter().map(|r| (r.slba, r.nlb)).collect())
            .collect()
    }

    /// A vectored request's pieces cut into groups of one command each,
    /// split where a command ends, in order, nothing lost or empty.
    #[test]
    fn vectored_pieces_are_regrouped_per_command() {
        let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        for lens in [vec![10_000], vec![1, 4095, 4097, 1807], vec![4096, 4096, 1808], vec![0, 3000, 0, 7000]]
        {
            let mut rest = &data[..];
            let pieces: Vec<&[u8]> = lens
                .iter()
                .map(|&l| {
                    let (h, t) = rest.split_at(l);
                    rest = t;
                    h
                })
                .collect();
            let groups = regroup(pieces, 4096);
            let sizes: Vec<usize> = groups.iter().map(|g| g.iter().map(|b| b.len()).sum()).collect();
            assert_eq!(sizes, [4096, 4096, 1808], "{lens:?}");
            assert!(groups.iter().flatten().all(|b| !b.is_empty()), "{lens:?}");
            assert_eq!(groups.concat().concat(), data, "{lens:?}");
        }
    }

    #[test]
    fn deallocation_splits_at_the_controllers_dsm_limits() {
        // No limits: 256 ranges a command (NR), as before; empty ranges left out.
        let many: Vec<(u64, u32)> = (0..600).map(|i| (i * 10, 5)).collect();
        let p = dsm_planned(&many, 0, 0, 0);
        assert_eq!(p.iter().map(Vec::len).collect::<Vec<_>>(), vec![256, 256, 88]);
        assert_eq!(p.concat(), many);
        assert_eq!(dsm_planned(&[(0, 0), (8, 4), (20, 0)], 0, 0, 0), vec![vec![(8, 4)]]);
        assert!(dsm_planned(&[(5, 0)], 0, 0, 0).is_empty());
        // DMRSL 100: a 250-block range in three pieces, in one command.
        assert_eq!(dsm_planned(&[(1000, 250)], 0, 100, 0), vec![vec![(1000, 100), (1100, 100), (1200, 50)]]);
        // DMRL 2: five ranges in three commands (a DMRL over 256 stays 256).
        let five: Vec<(u64, u32)> = (0..5).map(|i| (i * 100, 1)).collect();
        assert_eq!(dsm_planned(&five, 2, 0, 0).iter().map(Vec::len).collect::<Vec<_>>(), vec![2, 2, 1]);
        assert_eq!(dsm_planned(&many, 255, 0, 0)[0].len(), 255);
        // DMSL 150: commands of 150 blocks, a range cut where one ends.
        assert_eq!(
            dsm_planned(&[(0, 100), (500, 100), (900, 20)], 0, 0, 150),
            vec![vec![(0, 100), (500, 50)], vec![(550, 50), (900, 20)]]
        );
        // All three at once: no command over any limit, the same blocks overall.
        let mixed: Vec<(u64, u32)> = vec![(0, 1000), (5000, 7), (9000, 333), (20_000, 64)];
        let p = dsm_planned(&mixed, 3, 90, 200);
        for c in &p {
            assert!(
                c.len() <= 3
                    && c.iter().all(|r| r.1 <= 90)
                    && c.iter().map(|r| r.1 as u64).sum::<u64>() <= 200
            );
        }
        let total: u64 = p.iter().flatten().map(|r| r.1 as u64).sum();
        assert_eq!(total, 1000 + 7 + 333 + 64);
        // A range past the last 64-bit LBA is refused before anything is built.
        assert!(dsm_commands(&[(u64::MAX - 2, 8)], &IdentifyCtrlNvm::default()).is_err());
    }

    /// Copy commands as (source (slba, blocks) list, block count).
    fn planned(id: &IdentifyNamespace, ranges: &[(u64, u32)]) -> Vec<(Vec<(u64, u32)>, u64)> {
        copy_commands(id, ranges)
            .unwrap()
            .into_iter()
            .map(|(r, n)| (r.iter().map(|r| (r.slba, r.blocks())).collect(), n))
            .collect()
    }

    #[test]
    fn a_copy_is_split_at_the_namespace_limits_in_order() {
        let id = IdentifyNamespace { mssrl: 8, mcl: 20, msrc: 2, ..Default::default() };
        // Within the limits: one command.
        assert_eq!(planned(&id, &[(0, 8), (100, 4)]), vec![(vec![(0, 8), (100, 4)], 12)]);
        // A range over MSSRL is cut; MCL (20) and MSRC (3 ranges) end commands.
        assert_eq!(
            planned(&id, &[(0, 19), (50, 9), (70, 1), (80, 1), (90, 1)]),
            vec![
                (vec![(0, 8), (8, 8), (16, 3)], 19),
                (vec![(50, 8), (58, 1), (70, 1)], 10),
                (vec![(80, 1), (90, 1)], 2),
            ]
        );
        // MCL ends a command inside a range.
        assert_eq!(
            planned(&id, &[(0, 8), (10, 8), (20, 8)]),
            vec![(vec![(0, 8), (10, 8), (20, 4)], 20), (vec![(24, 4)], 4)]
        );
        // Zero limits: the largest the fields express (65536 blocks per range, 256 ranges).
        let open = IdentifyNamespace { mssrl: 0, mcl: 0, msrc: 255, ..Default::default() };
        assert_eq!(planned(&open, &[(0, 70_000)]), vec![(vec![(0, 65_536), (65_536, 4464)], 70_000)]);
        // Refused: an empty range, a range past the last LBA.
        assert!(copy_commands(&id, &[(0, 0)]).is_err());
        assert!(copy_commands(&id, &[(u64::MAX - 1, 4)]).is_err());
        assert!(copy_commands(&id, &[]).unwrap().is_empty());
    }

    #[test]
    fn a_status_without_dnr_is_retried_after_its_command_retry_delay() {
        let crdt = [1, 20, 300];
        assert_eq!(retry_delay(Status::INTERNAL, crdt, false), Some(Duration::ZERO));
        // CRD (bits 12:11) picks CRDT1..3, in 100 ms units.
        assert_eq!(retry_delay(Status(Status::INTERNAL.0 | 1 << 11), crdt, false), Some(MS(100)));
        assert_eq!(retry_delay(Status(Status::INTERNAL.0 | 2 << 11), crdt, false), Some(MS(2_000)));
        assert_eq!(retry_delay(Status(Status::INTERNAL.0 | 3 << 11), crdt, false), Some(MS(30_000)));
        assert_eq!(retry_delay(Status(Status::INTERNAL.0 | 1 << 11), [0; 3], false), Some(Duration::ZERO));
        // The M bit changes nothing.
        assert_eq!(retry_delay(Status::INTERNAL.with_more(), crdt, false), Some(Duration::ZERO));
    }

    #[test]
    fn dnr_and_path_errors_under_multipath_are_not_retried() {
        assert_eq!(retry_delay(Status::INTERNAL.with_dnr(), [0; 3], false), None);
        assert_eq!(retry_delay(Status::INVALID_FIELD.with_dnr(), [0; 3], true), None);
        // Path errors: retried on the same controller only without multipath
        // (Linux retries them there; under multipath it fails over).
        assert_eq!(retry_delay(Status::ANA_INACCESSIBLE, [0; 3], false), Some(Duration::ZERO));
        assert_eq!(retry_delay(Status::ANA_INACCESSIBLE, [0; 3], true), None);
        assert_eq!(retry_delay(Status::INTERNAL, [0; 3], true), Some(Duration::ZERO));
    }
}
