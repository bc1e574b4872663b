//! Bytes appended above a replica's high watermark, by the offset each append ends at: when
//! the high watermark passes them, they are what consumer fetches parked on the partition
//! (DelayedFetch, counting toward `fetch.min.bytes`) may now read. Leaders and followers alike.

use std::collections::VecDeque;

#[derive(Debug, Default)]
pub(super) struct Uncommitted {
    /// `(end offset, bytes)` of each append, oldest first.
    appends: VecDeque<(i64, i64)>,
}

impl Uncommitted {
    pub(super) fn appended(&mut self, end_offset: i64, bytes: i64) {
        self.appends.push_back((end_offset, bytes));
    }

    /// The log was truncated to `log_end`: appends past it are gone.
    pub(super) fn truncate(&mut self, log_end: i64) {
        while self.appends.back().is_some_and(|&(end, _)| end > log_end) {
            self.appends.pop_back();
        }
    }

    /// The bytes of the appends that `hw` now covers, each counted once.
    pub(super) fn take_committed(&mut self, hw: i64) -> i64 {
        let mut n = 0;
        while let Some(&(end, bytes)) = self.appends.front() {
            if end > hw {
                break;
            }
            n += bytes;
            self.appends.pop_front();
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_bytes_are_taken_once_the_high_watermark_passes_them() {
        let mut s = Uncommitted::default();
        s.appended(10, 100);
        s.appended(20, 50);
        s.appended(30, 7);
        assert_eq!(s.take_committed(9), 0);
        assert_eq!(s.take_committed(20), 150);
        assert_eq!(s.take_committed(20), 0);
        assert_eq!(s.take_committed(100), 7);
    }

    #[test]
    fn a_truncation_drops_the_appends_past_the_new_log_end() {
        let mut s = Uncommitted::default();
        s.appended(10, 100);
        s.appended(20, 50);
        s.truncate(15);
        s.appended(18, 30);
        assert_eq!(s.take_committed(18), 130);
    }
}
