//! Asymmetric Namespace Access (NVMe base spec §8.1.1; nvmet's
//! `port->ana_state[]`, `nvmet_ana_chgcnt`, `nvmet_check_ana_state`).
//!
//! Every namespace belongs to one ANA group (1 unless configured), and every
//! port reports a state per group: the same namespace can be optimized
//! through one port and inaccessible through another. The Linux host with
//! native multipath (`nvme_core.multipath=Y`, the default) reads the states
//! from the ANA log (0Ch), sends I/O down the optimized paths, and moves it
//! to another path when one answers with an ANA status. A change of state
//! raises the ANA Change notice on the controllers of that port.

use std::sync::atomic::{AtomicU8, Ordering};

use nvmeof_common::spec::log::AnaState;
use nvmeof_common::Status;

/// Highest ANA group ID (ANAGRPMAX and NANAGRPID; nvmet `NVMET_MAX_ANAGRPS`).
pub const MAX_ANA_GROUPS: u32 = 128;
/// The group of a namespace unless configured (nvmet `NVMET_DEFAULT_ANA_GRPID`).
pub const DEFAULT_ANA_GROUP: u32 = 1;

/// Parses a state name (`optimized`, `non-optimized`, `inaccessible`,
/// `persistent-loss`, `change`: [`AnaState::NAMED`]).
pub fn parse_ana_state(s: &str) -> Result<AnaState, String> {
    AnaState::from_name(s).ok_or_else(|| {
        let names: Vec<_> = AnaState::NAMED.iter().map(|(_, n)| *n).collect();
        format!("{s:?} is not an ANA state ({})", names.join(", "))
    })
}

/// The name of a state ([`parse_ana_state`]'s spelling).
pub fn ana_state_name(s: AnaState) -> &'static str {
    s.name().unwrap_or("unknown")
}

/// The ANA state of every group as one port reports it. Read by every I/O
/// command of the port's queues, written only by a reload: one relaxed byte
/// load per command, like nvmet's unlocked read of `port->ana_state`.
pub struct PortAna {
    /// Indexed by group ID; index 0 is unused.
    states: [AtomicU8; MAX_ANA_GROUPS as usize + 1],
}

impl PortAna {
    /// Every group in `state`.
    pub fn new(state: AnaState) -> Self {
        Self { states: std::array::from_fn(|_| AtomicU8::new(state.0)) }
    }

    /// The state of group `grpid` (an ID past [`MAX_ANA_GROUPS`] reads as inaccessible).
    pub fn state(&self, grpid: u32) -> AnaState {
        match self.states.get(grpid as usize) {
            Some(s) if grpid != 0 => AnaState(s.load(Ordering::Relaxed)),
            _ => AnaState::INACCESSIBLE,
        }
    }

    /// Sets the state of group `grpid` (1..=[`MAX_ANA_GROUPS`]); whether it changed.
    pub fn set(&self, grpid: u32, state: AnaState) -> bool {
        match self.states.get(grpid as usize) {
            Some(s) if grpid != 0 => s.swap(state.0, Ordering::Relaxed) != state.0,
            _ => false,
        }
    }

    /// Whether I/O to a namespace of group `grpid` may run through this port:
    /// nvmet `nvmet_check_ana_state`, whose statuses carry no DNR (the host
    /// retries on another path, or here once the state changes).
    #[inline]
    pub fn check_io(&self, grpid: u32) -> Result<(), Status> {
        match self.state(grpid) {
            AnaState::OPTIMIZED | AnaState::NON_OPTIMIZED => Ok(()),
            AnaState::PERSISTENT_LOSS => Err(Status::ANA_PERSISTENT_LOSS),
            AnaState::CHANGE => Err(Status::ANA_TRANSITION),
            _ => Err(Status::ANA_INACCESSIBLE),
        }
    }
}

impl Default for PortAna {
    /// Every group optimized.
    fn default() -> Self {
        Self::new(AnaState::OPTIMIZED)
    }
}

impl std::fmt::Debug for PortAna {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let first = self.state(1);
        let others: Vec<_> = (2..=MAX_ANA_GROUPS)
            .filter(|&g| self.state(g) != first)
            .map(|g| (g, ana_state_name(self.state(g))))
            .collect();
        f.debug_struct("PortAna").field("group 1", &ana_state_name(first)).field("others", &others).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_parse_by_nvmet_names_and_gate_io() {
        for (st, name) in AnaState::NAMED {
            assert_eq!(parse_ana_state(name), Ok(st));
            assert_eq!(ana_state_name(st), name);
        }
        assert!(parse_ana_state("active").unwrap_err().contains("non-optimized"));
        let p = PortAna::default();
        assert_eq!(p.check_io(1), Ok(()));
        assert!(p.set(2, AnaState::NON_OPTIMIZED));
        assert!(!p.set(2, AnaState::NON_OPTIMIZED), "same state: no change");
        assert_eq!(p.check_io(2), Ok(()));
        p.set(3, AnaState::INACCESSIBLE);
        p.set(4, AnaState::PERSISTENT_LOSS);
        p.set(5, AnaState::CHANGE);
        assert_eq!(p.check_io(3), Err(Status::ANA_INACCESSIBLE));
        assert_eq!(p.check_io(4), Err(Status::ANA_PERSISTENT_LOSS));
        assert_eq!(p.check_io(5), Err(Status::ANA_TRANSITION));
        // No DNR: the host may retry (on another path).
        assert!(!p.check_io(3).unwrap_err().dnr());
        // Out of range: never accessible, never set.
        assert_eq!(p.check_io(0), Err(Status::ANA_INACCESSIBLE));
        assert!(!p.set(MAX_ANA_GROUPS + 1, AnaState::OPTIMIZED));
        assert_eq!(p.check_io(MAX_ANA_GROUPS + 1), Err(Status::ANA_INACCESSIBLE));
        assert_eq!(p.check_io(MAX_ANA_GROUPS), Ok(()));
    }
}
