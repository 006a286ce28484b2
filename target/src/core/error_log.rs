//! A controller's Error Information log (LID 01h): the last
//! [`ERROR_LOG_ENTRIES`] failed commands, newest first, as nvmet keeps them
//! (`nvmet_set_error` fills one of `NVMET_ERROR_LOG_SLOTS` per failure and
//! `nvmet_execute_get_log_page_error` returns them newest first).

use std::collections::VecDeque;

use nvmeof_common::spec::log::{ErrorLogEntry, ERROR_LOG_ENTRY_LEN};

/// Entries kept (Identify Controller ELPE + 1; nvmet `NVMET_ERROR_LOG_SLOTS`).
pub const ERROR_LOG_ENTRIES: usize = 128;

/// The log: a lifetime error count and the newest entries.
#[derive(Debug, Default)]
pub struct ErrorLog {
    /// Errors recorded since the controller was created: the Error Count of
    /// the newest entry, and the SMART log's Number of Error Information Log
    /// Entries (nvmet's `err_counter`).
    count: u64,
    /// Newest at the front, at most [`ERROR_LOG_ENTRIES`].
    entries: VecDeque<ErrorLogEntry>,
}

impl ErrorLog {
    /// Records `entry`, giving it the next Error Count (its own
    /// `error_count` is overwritten); the oldest entry goes once the log is
    /// full. Returns the count given.
    pub fn record(&mut self, mut entry: ErrorLogEntry) -> u64 {
        // The spec: a count past FFFFFFFF_FFFFFFFFh rolls over to 1 (0 marks
        // an unused entry).
        self.count = self.count.checked_add(1).unwrap_or(1);
        entry.error_count = self.count;
        if self.entries.len() == ERROR_LOG_ENTRIES {
            self.entries.pop_back();
        }
        self.entries.push_front(entry);
        self.count
    }

    /// Errors recorded so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The whole page: [`ERROR_LOG_ENTRIES`] entries of 64 bytes, newest
    /// first, unused ones zero.
    pub fn encode(&self) -> Vec<u8> {
        let mut page = vec![0; ERROR_LOG_ENTRIES * ERROR_LOG_ENTRY_LEN];
        for (e, out) in self.entries.iter().zip(page.chunks_exact_mut(ERROR_LOG_ENTRY_LEN)) {
            out.copy_from_slice(&e.encode());
        }
        page
    }
}

#[cfg(test)]
mod tests {
    use nvmeof_common::spec::log::decode_error_log;

    use super::*;

    #[test]
    fn newest_first_and_the_oldest_goes_when_full() {
        let mut log = ErrorLog::default();
        assert_eq!(log.encode(), vec![0; ERROR_LOG_ENTRIES * ERROR_LOG_ENTRY_LEN]);
        for cid in 0..ERROR_LOG_ENTRIES as u16 + 3 {
            let n = log.record(ErrorLogEntry { cid, error_count: 99, ..Default::default() });
            assert_eq!(n, cid as u64 + 1);
        }
        assert_eq!(log.count(), ERROR_LOG_ENTRIES as u64 + 3);
        let entries = decode_error_log(&log.encode());
        assert_eq!(entries.len(), ERROR_LOG_ENTRIES);
        // Newest (count 131, CID 130) first, down to count 4: the three oldest went.
        for (i, e) in entries.iter().enumerate() {
            assert_eq!(e.error_count, (ERROR_LOG_ENTRIES + 3 - i) as u64);
            assert_eq!(e.cid as u64, e.error_count - 1);
        }
    }
}
