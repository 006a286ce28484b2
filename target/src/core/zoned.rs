//! The zones of a zoned namespace (Zoned Namespace command set, CSI 02h):
//! their states and write pointers, sans-IO.
//!
//! nvmet exports a zoned namespace only where the block device under it is
//! zoned (`nvmet_bdev_zns_enable`); SPDK emulates one over any bdev
//! (`bdev_zone_block_create`). This is SPDK's way: any file, block device
//! or RAM namespace can be exported zoned (configuration `zoned`), every
//! zone of the same power-of-two size (the Linux host refuses others,
//! `nvme_update_zone_info`), sequential write required (ZNS defines no
//! other type), capacity equal to its size (ZOC 0: the host refuses
//! variable capacity).
//!
//! The rules (ZNS 1.1 §2.1, the zone state machine, and Linux's `null_blk`
//! zoned emulation, which nvmet passes through): a write must start at its
//! zone's write pointer (Zone Invalid Write) and stay within the zone
//! (Zone Boundary Error); Zone Append writes at the pointer and returns
//! where. A write to an Empty or Closed zone opens it implicitly; Open,
//! Close, Finish and Reset move zones by hand; a zone that fills becomes
//! Full. Open zones count against Maximum Open Resources (MOR), open and
//! closed ones against Maximum Active Resources (MAR); at MOR a write opens
//! its zone by closing an implicitly opened one, as `null_blk` does, and
//! fails with Too Many Open Zones where none is.
//!
//! Zone states are not kept on disk while the target runs: a zone whose
//! blocks hold no data where the namespace starts (a hole of a sparse file,
//! RAM) starts Empty, any other Full, so what a file holds stays readable
//! and is overwritten only after a Reset (SPDK's zoned bdev starts every
//! zone Full). With a `zone_state_file`, a clean stop saves the states
//! ([`Zones::save`]) after the data is flushed, and the next start restores
//! them ([`Zones::restore`]) and deletes the file, so a crash later can
//! never bring back write pointers older than the data acknowledged since:
//! it falls back to Full.

use std::sync::{Mutex, MutexGuard};

use nvmeof_common::spec::zns::{
    ZoneDescriptor, ZoneReport, ZoneReportFilter, ZoneSendAction, ZoneState, ZoneType,
};
use nvmeof_common::Status;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How a namespace is zoned (configuration `zoned`, `zone_size`,
/// `max_open_zones`, `max_active_zones`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneConfig {
    /// Zone size in bytes: a power of two, at least one block.
    pub zone_size: u64,
    /// Most zones open at once (MOR + 1); `None`: no limit.
    pub max_open: Option<u32>,
    /// Most zones open or closed at once (MAR + 1); `None`: no limit.
    pub max_active: Option<u32>,
}

/// First bytes of a zone state file ([`Zones::save`]).
const STATE_MAGIC: &[u8; 8] = b"NVMFZST1";

/// Zone size when the configuration gives none: 64 MiB, a common ZNS SSD
/// size and `null_blk`'s `zone_size` default's order.
pub const DEFAULT_ZONE_SIZE: u64 = 64 << 20;

impl ZoneConfig {
    /// Checks the settings for blocks of `block_size` bytes; an error names
    /// the configuration key at fault and why. The zone size must be a
    /// power of two (the Linux host refuses other sizes,
    /// `nvme_update_zone_info`) of at least one block; the limits at least
    /// 1, with no more open than active zones.
    pub fn check(&self, block_size: u64) -> Result<(), (&'static str, String)> {
        if !self.zone_size.is_power_of_two() || self.zone_size < block_size {
            return Err((
                "zone_size",
                format!(
                    "{} is not a power of two of at least the block size ({block_size}); Linux hosts refuse others",
                    self.zone_size
                ),
            ));
        }
        if self.max_open == Some(0) {
            return Err(("max_open_zones", "must be at least 1".into()));
        }
        if self.max_active == Some(0) {
            return Err(("max_active_zones", "must be at least 1".into()));
        }
        if let (Some(o), Some(a)) = (self.max_open, self.max_active) {
            if o > a {
                return Err(("max_open_zones", format!("{o} is more than max_active_zones ({a})")));
            }
        }
        Ok(())
    }
}

impl Default for ZoneConfig {
    fn default() -> Self {
        Self { zone_size: DEFAULT_ZONE_SIZE, max_open: None, max_active: None }
    }
}

#[derive(Clone, Copy, Debug)]
struct Zone {
    state: ZoneState,
    /// Absolute LBA of the next write.
    wp: u64,
}

#[derive(Debug)]
struct Table {
    zones: Vec<Zone>,
    /// Zones implicitly or explicitly open.
    open: u32,
    /// Zones open or closed.
    active: u32,
}

/// A Zone Management Send that changed the zones' states, or (a Reset) the
/// blocks to drop before it does.
#[derive(Debug, PartialEq, Eq)]
pub enum ZoneMgmt {
    /// Done.
    Done,
    /// Reset: deallocate `ranges` (byte offset, byte length) on the
    /// backend, then call [`Zones::finish_reset`] with `zones`.
    Reset {
        /// The zones to reset (indexes).
        zones: Vec<u64>,
        /// Byte ranges that may hold their data.
        ranges: Vec<(u64, u64)>,
    },
}

/// The zones of one namespace.
#[derive(Debug)]
pub struct Zones {
    /// log2 of the zone size in blocks.
    shift: u32,
    block_shift: u32,
    count: u64,
    max_open: Option<u32>,
    max_active: Option<u32>,
    table: Mutex<Table>,
}

fn dnr(s: Status) -> Status {
    s.with_dnr()
}

impl Zones {
    /// The zones of a namespace of `blocks` blocks of `1 << block_shift`
    /// bytes: as many whole zones as fit. `holds_data(offset, len)` says
    /// whether a zone's bytes may hold data (such a zone starts Full, others
    /// Empty). Fails where the zone size is no power of two, smaller than a
    /// block, or larger than the namespace.
    pub fn new(
        cfg: ZoneConfig,
        blocks: u64,
        block_shift: u32,
        holds_data: impl Fn(u64, u64) -> bool,
    ) -> Result<Self, String> {
        cfg.check(1 << block_shift).map_err(|(key, why)| format!("{key}: {why}"))?;
        let shift = (cfg.zone_size >> block_shift).trailing_zeros();
        let count = blocks >> shift;
        if count == 0 {
            return Err(format!(
                "zone size {} is larger than the namespace ({} bytes)",
                cfg.zone_size,
                blocks << block_shift
            ));
        }
        let zones = (0..count)
            .map(|i| {
                let zslba = i << shift;
                if holds_data(zslba << block_shift, cfg.zone_size) {
                    Zone { state: ZoneState::FULL, wp: zslba + (1 << shift) }
                } else {
                    Zone { state: ZoneState::EMPTY, wp: zslba }
                }
            })
            .collect();
        Ok(Self {
            shift,
            block_shift,
            count,
            max_open: cfg.max_open,
            max_active: cfg.max_active,
            table: Mutex::new(Table { zones, open: 0, active: 0 }),
        })
    }

    /// Zone size in blocks (ZSZE).
    pub fn zone_blocks(&self) -> u64 {
        1 << self.shift
    }
    /// Number of zones.
    pub fn count(&self) -> u64 {
        self.count
    }
    /// Blocks the zones cover (the namespace's size).
    pub fn blocks(&self) -> u64 {
        self.count << self.shift
    }
    /// MOR as Identify reports it (0's based; `NO_ZONE_LIMIT` for none).
    pub fn mor(&self) -> u32 {
        self.max_open.map_or(nvmeof_common::spec::zns::NO_ZONE_LIMIT, |n| n - 1)
    }
    /// MAR as Identify reports it.
    pub fn mar(&self) -> u32 {
        self.max_active.map_or(nvmeof_common::spec::zns::NO_ZONE_LIMIT, |n| n - 1)
    }
    /// How many zones are Empty and how many Full.
    pub fn initial_counts(&self) -> (u64, u64) {
        let t = lock(&self.table);
        let n = |s| t.zones.iter().filter(|z| z.state == s).count() as u64;
        (n(ZoneState::EMPTY), n(ZoneState::FULL))
    }
    /// (state, write pointer) of the zone holding `lba`.
    pub fn zone_of(&self, lba: u64) -> Option<(ZoneState, u64)> {
        let t = lock(&self.table);
        t.zones.get((lba >> self.shift) as usize).map(|z| (z.state, z.wp))
    }

    fn zone_end(&self, idx: usize) -> u64 {
        ((idx as u64) + 1) << self.shift
    }

    /// Room for one more open zone (and, from `from` Empty, one more
    /// active one): where MOR is reached, closes an implicitly opened zone
    /// (not `idx`) when `implicit_close` allows it.
    fn make_room(
        &self,
        t: &mut Table,
        idx: usize,
        from: ZoneState,
        implicit_close: bool,
    ) -> Result<(), Status> {
        if from == ZoneState::EMPTY && self.max_active.is_some_and(|m| t.active >= m) {
            return Err(dnr(Status::ZONE_TOO_MANY_ACTIVE));
        }
        if self.max_open.is_some_and(|m| t.open >= m) {
            let victim = implicit_close
                .then(|| {
                    t.zones
                        .iter()
                        .enumerate()
                        .position(|(i, z)| i != idx && z.state == ZoneState::IMPLICITLY_OPEN)
                })
                .flatten();
            let Some(v) = victim else { return Err(dnr(Status::ZONE_TOO_MANY_OPEN)) };
            t.zones[v].state = ZoneState::CLOSED;
            t.open -= 1;
        }
        Ok(())
    }

    /// Moves zone `idx` to `to` and keeps the counts.
    fn set_state(t: &mut Table, idx: usize, to: ZoneState) {
        let from = t.zones[idx].state;
        t.open = t.open - from.is_open() as u32 + to.is_open() as u32;
        t.active = t.active - from.is_active() as u32 + to.is_active() as u32;
        t.zones[idx].state = to;
    }

    /// A write of `nlb` blocks at `slba` (`append`: a Zone Append to the zone
    /// starting at `slba`): checks it against the zone and moves the write
    /// pointer past it; returns the LBA the data goes to. The range is
    /// within the namespace (checked before).
    pub fn write(&self, slba: u64, nlb: u64, append: bool) -> Result<u64, Status> {
        let idx = (slba >> self.shift) as usize;
        if idx as u64 >= self.count {
            return Err(dnr(Status::LBA_RANGE));
        }
        // nvmet_bdev_execute_zone_append: SLBA must be the zone's first LBA.
        if append && slba & (self.zone_blocks() - 1) != 0 {
            return Err(dnr(Status::INVALID_FIELD));
        }
        let end = self.zone_end(idx);
        let mut t = lock(&self.table);
        let z = t.zones[idx];
        match z.state {
            ZoneState::FULL => return Err(dnr(Status::ZONE_FULL)),
            ZoneState::READ_ONLY => return Err(dnr(Status::ZONE_READ_ONLY)),
            ZoneState::OFFLINE => return Err(dnr(Status::ZONE_OFFLINE)),
            _ => {}
        }
        let start = if append { z.wp } else { slba };
        if start != z.wp {
            return Err(dnr(Status::ZONE_INVALID_WRITE));
        }
        if start + nlb > end {
            return Err(dnr(Status::ZONE_BOUNDARY_ERROR));
        }
        if matches!(z.state, ZoneState::EMPTY | ZoneState::CLOSED) {
            self.make_room(&mut t, idx, z.state, true)?;
            Self::set_state(&mut t, idx, ZoneState::IMPLICITLY_OPEN);
        }
        let wp = start + nlb;
        t.zones[idx].wp = wp;
        if wp == end {
            Self::set_state(&mut t, idx, ZoneState::FULL);
        }
        Ok(start)
    }

    /// Zone Management Send `action` on the zone starting at `slba`, or
    /// with `select_all` on every zone in a state it applies to (nvmet
    /// `nvmet_bdev_execute_zmgmt_send_all`). Open, Close and Finish are
    /// done on return; a Reset returns the blocks to drop first
    /// ([`ZoneMgmt::Reset`]). Statuses as nvmet's (which passes the zoned
    /// device's errors on as Invalid Zone State Transition) where the
    /// specification leaves a choice: an action other than Close, Finish,
    /// Open and Reset is one too.
    pub fn manage(&self, action: ZoneSendAction, slba: u64, select_all: bool) -> Result<ZoneMgmt, Status> {
        if !matches!(
            action,
            ZoneSendAction::CLOSE | ZoneSendAction::FINISH | ZoneSendAction::OPEN | ZoneSendAction::RESET
        ) {
            return Err(dnr(Status::ZONE_INVALID_TRANSITION));
        }
        let mut t = lock(&self.table);
        let targets: Vec<usize> = if select_all {
            t.zones
                .iter()
                .enumerate()
                .filter(|(_, z)| match action {
                    ZoneSendAction::OPEN => z.state == ZoneState::CLOSED,
                    ZoneSendAction::CLOSE => z.state.is_open(),
                    ZoneSendAction::FINISH => z.state.is_active(),
                    _ => z.state.is_active() || z.state == ZoneState::FULL,
                })
                .map(|(i, _)| i)
                .collect()
        } else {
            let idx = slba >> self.shift;
            if idx >= self.count {
                return Err(dnr(Status::LBA_RANGE));
            }
            if slba & (self.zone_blocks() - 1) != 0 {
                return Err(dnr(Status::INVALID_FIELD));
            }
            vec![idx as usize]
        };
        if select_all && action == ZoneSendAction::OPEN {
            // All or nothing: the closed zones are active already.
            if self.max_open.is_some_and(|m| t.open as usize + targets.len() > m as usize) {
                return Err(dnr(Status::ZONE_TOO_MANY_OPEN));
            }
        }
        let mut reset = (Vec::new(), Vec::new());
        for idx in targets {
            let z = t.zones[idx];
            let zslba = (idx as u64) << self.shift;
            let end = self.zone_end(idx);
            match z.state {
                ZoneState::READ_ONLY => return Err(dnr(Status::ZONE_READ_ONLY)),
                ZoneState::OFFLINE => return Err(dnr(Status::ZONE_OFFLINE)),
                _ => {}
            }
            let invalid = || Err(dnr(Status::ZONE_INVALID_TRANSITION));
            match action {
                ZoneSendAction::OPEN => match z.state {
                    ZoneState::EXPLICITLY_OPEN => {}
                    ZoneState::IMPLICITLY_OPEN => Self::set_state(&mut t, idx, ZoneState::EXPLICITLY_OPEN),
                    ZoneState::EMPTY | ZoneState::CLOSED => {
                        self.make_room(&mut t, idx, z.state, true)?;
                        Self::set_state(&mut t, idx, ZoneState::EXPLICITLY_OPEN);
                    }
                    _ => return invalid(),
                },
                ZoneSendAction::CLOSE => match z.state {
                    ZoneState::CLOSED => {}
                    s if s.is_open() => {
                        let to = if z.wp == zslba { ZoneState::EMPTY } else { ZoneState::CLOSED };
                        Self::set_state(&mut t, idx, to);
                    }
                    _ => return invalid(),
                },
                ZoneSendAction::FINISH => match z.state {
                    ZoneState::FULL => {}
                    s if s.is_active() || s == ZoneState::EMPTY => {
                        if s == ZoneState::EMPTY {
                            // ZSE → ZSF passes through an active state
                            // (null_blk checks the resources for it).
                            self.make_room(&mut t, idx, s, true)?;
                        }
                        Self::set_state(&mut t, idx, ZoneState::FULL);
                        t.zones[idx].wp = end;
                    }
                    _ => return invalid(),
                },
                _ => match z.state {
                    ZoneState::EMPTY => {}
                    s if s.is_active() || s == ZoneState::FULL => {
                        let written = z.wp.min(end) - zslba;
                        // A Full zone reached by Finish may hold blocks past
                        // its last write: drop the whole zone.
                        let len = if s == ZoneState::FULL { end - zslba } else { written };
                        if len > 0 {
                            reset.1.push((zslba << self.block_shift, len << self.block_shift));
                        }
                        reset.0.push(idx as u64);
                    }
                    _ => return invalid(),
                },
            }
        }
        if action != ZoneSendAction::RESET {
            return Ok(ZoneMgmt::Done);
        }
        if reset.1.is_empty() {
            // Nothing to drop: reset now.
            for &idx in &reset.0 {
                Self::reset_zone(&mut t, idx as usize, self.shift);
            }
            return Ok(ZoneMgmt::Done);
        }
        Ok(ZoneMgmt::Reset { zones: reset.0, ranges: reset.1 })
    }

    /// The zone states as a `zone_state_file` holds them: magic, zone size
    /// in blocks, zone count, then each zone's state and write pointer, and
    /// the CRC32C of all that.
    pub fn save(&self) -> Vec<u8> {
        let t = lock(&self.table);
        let mut b = Vec::with_capacity(28 + t.zones.len() * 9);
        b.extend_from_slice(STATE_MAGIC);
        b.extend_from_slice(&self.zone_blocks().to_le_bytes());
        b.extend_from_slice(&self.count.to_le_bytes());
        for z in &t.zones {
            b.push(z.state.0);
            b.extend_from_slice(&z.wp.to_le_bytes());
        }
        let crc = nvmeof_common::digest::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Restores the zone states [`Self::save`] wrote, for zones of the same
    /// size and count; a zone open when they were saved comes back Closed
    /// (Empty if nothing was written to it), as ZNS zones do across a power
    /// cycle. Nothing changes where the bytes do not fit these zones.
    pub fn restore(&self, b: &[u8]) -> Result<(), String> {
        let want = 24 + self.count as usize * 9 + 4;
        if b.len() != want || &b[..8] != STATE_MAGIC {
            return Err(format!(
                "not a zone state file for {} zones ({} bytes, want {want})",
                self.count,
                b.len()
            ));
        }
        let (body, crc) = b.split_at(b.len() - 4);
        if nvmeof_common::digest::crc32c(body).to_le_bytes() != crc {
            return Err("zone state file: CRC mismatch".into());
        }
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        if u64_at(8) != self.zone_blocks() || u64_at(16) != self.count {
            return Err(format!(
                "zone state file is for {} zones of {} blocks, not {} of {}",
                u64_at(16),
                u64_at(8),
                self.count,
                self.zone_blocks()
            ));
        }
        let mut zones = Vec::with_capacity(self.count as usize);
        for i in 0..self.count {
            let at = 24 + i as usize * 9;
            let (zslba, end) = (i << self.shift, self.zone_end(i as usize));
            let (state, wp) = (ZoneState(b[at]), u64_at(at + 1));
            let state = match state {
                s if s.is_open() && wp == zslba => ZoneState::EMPTY,
                s if s.is_open() => ZoneState::CLOSED,
                s => s,
            };
            let valid = match state {
                ZoneState::EMPTY => wp == zslba,
                ZoneState::FULL => true,
                ZoneState::CLOSED => wp > zslba && wp < end,
                _ => false,
            };
            if !valid {
                return Err(format!("zone state file: zone {i} in state {:#x} at {wp}", b[at]));
            }
            zones.push(Zone { state, wp: if state == ZoneState::FULL { end } else { wp } });
        }
        let active = zones.iter().filter(|z| z.state.is_active()).count() as u32;
        if self.max_active.is_some_and(|m| active > m) {
            return Err(format!("zone state file: {active} closed zones, more than max_active_zones"));
        }
        *lock(&self.table) = Table { zones, open: 0, active };
        Ok(())
    }

    fn reset_zone(t: &mut Table, idx: usize, shift: u32) {
        if matches!(t.zones[idx].state, ZoneState::READ_ONLY | ZoneState::OFFLINE) {
            return;
        }
        Self::set_state(t, idx, ZoneState::EMPTY);
        t.zones[idx].wp = (idx as u64) << shift;
    }

    /// Ends a Reset once its blocks are dropped: the zones become Empty,
    /// their write pointers back at their start. A write that landed in
    /// one meanwhile ran before the Reset, as hosts order them.
    pub fn finish_reset(&self, zones: &[u64]) {
        let mut t = lock(&self.table);
        for &idx in zones {
            if idx < self.count {
                Self::reset_zone(&mut t, idx as usize, self.shift);
            }
        }
    }

    /// Report Zones (Zone Management Receive, ZRA 0) of `len` bytes from
    /// the zone holding `slba`: the zones `filter` selects, in order;
    /// Number of Zones counts every one of them, or with `partial` those
    /// whose descriptor fits (nvmet `nvmet_bdev_zone_zmgmt_recv_work`).
    /// `slba` is within the namespace and `len` at least 64 (checked
    /// before).
    pub fn report(&self, slba: u64, filter: ZoneReportFilter, partial: bool, len: usize) -> Vec<u8> {
        let room = len.saturating_sub(64) / 64;
        let first = (slba >> self.shift) as usize;
        let t = lock(&self.table);
        let mut zones = Vec::with_capacity(room.min(t.zones.len()));
        let mut matched = 0u64;
        for (i, z) in t.zones.iter().enumerate().skip(first) {
            if !filter.selects(z.state) {
                continue;
            }
            matched += 1;
            if zones.len() < room {
                let zslba = (i as u64) << self.shift;
                zones.push(ZoneDescriptor {
                    zone_type: ZoneType::SEQ_WRITE_REQUIRED,
                    state: z.state,
                    attrs: 0,
                    capacity: self.zone_blocks(),
                    slba: zslba,
                    wp: z.wp,
                });
            } else if partial {
                break;
            }
        }
        drop(t);
        let nr_zones = if partial { zones.len() as u64 } else { matched };
        ZoneReport { nr_zones, zones }.encode(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 8 zones of 16 blocks of 512 bytes.
    fn zones(max_open: Option<u32>, max_active: Option<u32>) -> Zones {
        let cfg = ZoneConfig { zone_size: 16 * 512, max_open, max_active };
        Zones::new(cfg, 8 * 16 + 5, 9, |_, _| false).unwrap()
    }

    fn state(z: &Zones, lba: u64) -> ZoneState {
        z.zone_of(lba).unwrap().0
    }

    #[test]
    fn geometry_and_initial_states() {
        let z = zones(None, None);
        assert_eq!((z.zone_blocks(), z.count(), z.blocks()), (16, 8, 128));
        assert_eq!((z.mor(), z.mar()), (u32::MAX, u32::MAX));
        // A zone whose bytes hold data starts Full.
        let cfg = ZoneConfig { zone_size: 16 * 512, max_open: Some(2), max_active: Some(3) };
        let z = Zones::new(cfg, 64, 9, |off, len| off == 16 * 512 && len == 16 * 512).unwrap();
        assert_eq!(
            (state(&z, 0), state(&z, 16), z.zone_of(16).unwrap().1),
            (ZoneState::EMPTY, ZoneState::FULL, 32)
        );
        assert_eq!((z.mor(), z.mar()), (1, 2));
        let bad = |zone_size, o, a| {
            Zones::new(ZoneConfig { zone_size, max_open: o, max_active: a }, 64, 9, |_, _| false)
        };
        assert!(bad(3 * 512, None, None).is_err());
        assert!(bad(256, None, None).is_err());
        assert!(bad(128 * 512, None, None).is_err());
        assert!(bad(512, Some(0), None).is_err());
        assert!(bad(512, Some(3), Some(2)).is_err());
    }

    #[test]
    fn writes_follow_the_write_pointer() {
        let z = zones(None, None);
        assert_eq!(z.write(0, 4, false), Ok(0));
        assert_eq!(z.zone_of(0), Some((ZoneState::IMPLICITLY_OPEN, 4)));
        assert_eq!(z.write(0, 4, false), Err(Status::ZONE_INVALID_WRITE.with_dnr()));
        assert_eq!(z.write(8, 1, false), Err(Status::ZONE_INVALID_WRITE.with_dnr()));
        assert_eq!(z.write(4, 13, false), Err(Status::ZONE_BOUNDARY_ERROR.with_dnr()));
        assert_eq!(z.write(4, 12, false), Ok(4));
        assert_eq!(z.zone_of(0), Some((ZoneState::FULL, 16)));
        assert_eq!(z.write(16, 1, false), Ok(16));
        assert_eq!(z.write(0, 1, true), Err(Status::ZONE_FULL.with_dnr()));
        // Zone Append: at the pointer, SLBA must be the zone's start.
        assert_eq!(z.write(16, 2, true), Ok(17));
        assert_eq!(z.write(17, 2, true), Err(Status::INVALID_FIELD.with_dnr()));
        assert_eq!(z.write(16, 14, true), Err(Status::ZONE_BOUNDARY_ERROR.with_dnr()));
        assert_eq!(z.write(16, 13, true), Ok(19));
        assert_eq!(state(&z, 16), ZoneState::FULL);
        assert_eq!(z.write(8 * 16, 1, false), Err(Status::LBA_RANGE.with_dnr()));
    }

    #[test]
    fn open_and_active_limits() {
        let z = zones(Some(2), Some(3));
        z.write(0, 1, false).unwrap();
        z.write(16, 1, false).unwrap();
        // At MOR a write closes an implicitly opened zone to open its own.
        z.write(32, 1, false).unwrap();
        assert_eq!(
            (state(&z, 0), state(&z, 16), state(&z, 32)),
            (ZoneState::CLOSED, ZoneState::IMPLICITLY_OPEN, ZoneState::IMPLICITLY_OPEN)
        );
        // Three active: a fourth zone is refused.
        assert_eq!(z.write(48, 1, false), Err(Status::ZONE_TOO_MANY_ACTIVE.with_dnr()));
        assert_eq!(z.manage(ZoneSendAction::OPEN, 48, false), Err(Status::ZONE_TOO_MANY_ACTIVE.with_dnr()));
        // Explicitly opened zones are never closed for room.
        z.manage(ZoneSendAction::OPEN, 16, false).unwrap();
        z.manage(ZoneSendAction::OPEN, 32, false).unwrap();
        assert_eq!(z.write(1, 1, false), Err(Status::ZONE_TOO_MANY_OPEN.with_dnr()));
        // Finishing one frees an open and an active resource.
        z.manage(ZoneSendAction::FINISH, 16, false).unwrap();
        assert_eq!(z.zone_of(16), Some((ZoneState::FULL, 32)));
        assert_eq!(z.write(1, 1, false), Ok(1));
        // A third active zone: zone 0, implicitly open, is closed for it.
        assert_eq!(z.write(48, 1, false), Ok(48));
        assert_eq!((state(&z, 0), state(&z, 48)), (ZoneState::CLOSED, ZoneState::IMPLICITLY_OPEN));
        assert_eq!(z.write(64, 1, false), Err(Status::ZONE_TOO_MANY_ACTIVE.with_dnr()));
    }

    #[test]
    fn management_transitions() {
        let z = zones(None, None);
        let invalid = Err(Status::ZONE_INVALID_TRANSITION.with_dnr());
        assert_eq!(z.manage(ZoneSendAction::CLOSE, 0, false), invalid);
        assert_eq!(z.manage(ZoneSendAction::OPEN, 0, false), Ok(ZoneMgmt::Done));
        assert_eq!(state(&z, 0), ZoneState::EXPLICITLY_OPEN);
        // Closing an open zone nothing was written to empties it.
        assert_eq!(z.manage(ZoneSendAction::CLOSE, 0, false), Ok(ZoneMgmt::Done));
        assert_eq!(state(&z, 0), ZoneState::EMPTY);
        z.write(0, 3, false).unwrap();
        z.manage(ZoneSendAction::CLOSE, 0, false).unwrap();
        assert_eq!(z.zone_of(0), Some((ZoneState::CLOSED, 3)));
        z.manage(ZoneSendAction::FINISH, 0, false).unwrap();
        assert_eq!(z.manage(ZoneSendAction::OPEN, 0, false), invalid);
        assert_eq!(z.manage(ZoneSendAction::CLOSE, 0, false), invalid);
        assert_eq!(z.manage(ZoneSendAction::OFFLINE, 0, false), invalid);
        assert_eq!(z.manage(ZoneSendAction::SET_ZDE, 0, false), invalid);
        assert_eq!(z.manage(ZoneSendAction::OPEN, 3, false), Err(Status::INVALID_FIELD.with_dnr()));
        assert_eq!(z.manage(ZoneSendAction::OPEN, 8 * 16, false), Err(Status::LBA_RANGE.with_dnr()));
        // Reset of a Full zone drops the whole zone first.
        let r = z.manage(ZoneSendAction::RESET, 0, false).unwrap();
        assert_eq!(r, ZoneMgmt::Reset { zones: vec![0], ranges: vec![(0, 16 * 512)] });
        assert_eq!(state(&z, 0), ZoneState::FULL);
        z.finish_reset(&[0]);
        assert_eq!(z.zone_of(0), Some((ZoneState::EMPTY, 0)));
        // Reset of an empty zone: nothing to drop.
        assert_eq!(z.manage(ZoneSendAction::RESET, 0, false), Ok(ZoneMgmt::Done));
    }

    #[test]
    fn select_all() {
        let z = zones(Some(3), None);
        z.write(0, 2, false).unwrap();
        z.write(16, 16, false).unwrap();
        z.write(32, 1, false).unwrap();
        z.manage(ZoneSendAction::CLOSE, 0, true).unwrap();
        assert_eq!(
            (state(&z, 0), state(&z, 16), state(&z, 32)),
            (ZoneState::CLOSED, ZoneState::FULL, ZoneState::CLOSED)
        );
        z.manage(ZoneSendAction::OPEN, 0, true).unwrap();
        assert_eq!((state(&z, 0), state(&z, 32)), (ZoneState::EXPLICITLY_OPEN, ZoneState::EXPLICITLY_OPEN));
        let r = z.manage(ZoneSendAction::RESET, 12345, true).unwrap();
        assert_eq!(
            r,
            ZoneMgmt::Reset {
                zones: vec![0, 1, 2],
                ranges: vec![(0, 1024), (16 * 512, 16 * 512), (32 * 512, 512)]
            }
        );
        z.finish_reset(&[0, 1, 2]);
        assert!((0..8).all(|i| state(&z, i * 16) == ZoneState::EMPTY));
        z.write(48, 1, false).unwrap();
        z.manage(ZoneSendAction::FINISH, 0, true).unwrap();
        assert_eq!((state(&z, 48), state(&z, 0)), (ZoneState::FULL, ZoneState::EMPTY));
    }

    #[test]
    fn states_saved_and_restored() {
        let z = zones(Some(2), Some(3));
        z.write(0, 3, false).unwrap();
        z.manage(ZoneSendAction::OPEN, 16, false).unwrap();
        z.write(32, 16, false).unwrap();
        z.write(48, 1, false).unwrap();
        z.manage(ZoneSendAction::CLOSE, 48, false).unwrap();
        let saved = z.save();
        let back = zones(Some(2), Some(3));
        back.restore(&saved).unwrap();
        // Open zones come back Closed, or Empty where nothing was written.
        assert_eq!(back.zone_of(0), Some((ZoneState::CLOSED, 3)));
        assert_eq!(back.zone_of(16), Some((ZoneState::EMPTY, 16)));
        assert_eq!(back.zone_of(32), Some((ZoneState::FULL, 48)));
        assert_eq!(back.zone_of(48), Some((ZoneState::CLOSED, 49)));
        // The counts came along: two active, none open.
        assert_eq!(back.write(3, 1, false), Ok(3));
        assert_eq!(back.write(64, 1, false), Ok(64));
        assert_eq!(back.write(80, 1, false), Err(Status::ZONE_TOO_MANY_ACTIVE.with_dnr()));
        // Other zones, a damaged file: refused, nothing changed.
        let other = Zones::new(
            ZoneConfig { zone_size: 32 * 512, max_open: None, max_active: None },
            128,
            9,
            |_, _| false,
        )
        .unwrap();
        assert!(other.restore(&saved).is_err());
        let mut bad = saved.clone();
        bad[30] ^= 1;
        let fresh = zones(None, None);
        assert!(fresh.restore(&bad).unwrap_err().contains("CRC"));
        assert!(fresh.restore(&saved[..saved.len() - 1]).is_err());
        assert_eq!(fresh.zone_of(0), Some((ZoneState::EMPTY, 0)));
    }

    #[test]
    fn reports() {
        let z = zones(None, None);
        z.write(16, 5, false).unwrap();
        z.manage(ZoneSendAction::FINISH, 32, false).unwrap();
        let all = ZoneReport::decode(&z.report(0, ZoneReportFilter::ALL, false, 4096)).unwrap();
        assert_eq!((all.nr_zones, all.zones.len()), (8, 8));
        assert_eq!(
            all.zones[1],
            ZoneDescriptor {
                zone_type: ZoneType::SEQ_WRITE_REQUIRED,
                state: ZoneState::IMPLICITLY_OPEN,
                attrs: 0,
                capacity: 16,
                slba: 16,
                wp: 21,
            }
        );
        // From the zone holding SLBA 20, room for two descriptors.
        let b = z.report(20, ZoneReportFilter::ALL, false, 64 * 3);
        let r = ZoneReport::decode(&b).unwrap();
        assert_eq!((r.nr_zones, r.zones.len(), r.zones[0].slba), (7, 2, 16));
        let r = ZoneReport::decode(&z.report(20, ZoneReportFilter::ALL, true, 64 * 3)).unwrap();
        assert_eq!((r.nr_zones, r.zones.len()), (2, 2));
        let r = ZoneReport::decode(&z.report(0, ZoneReportFilter::EMPTY, false, 4096)).unwrap();
        assert_eq!((r.nr_zones, r.zones[0].slba), (6, 0));
        let r = ZoneReport::decode(&z.report(0, ZoneReportFilter::FULL, false, 4096)).unwrap();
        assert_eq!((r.nr_zones, r.zones[0].slba, r.zones[0].wp), (1, 32, 48));
        // Header only.
        assert_eq!(
            u64::from_le_bytes(z.report(0, ZoneReportFilter::ALL, false, 64)[..8].try_into().unwrap()),
            8
        );
    }
}
