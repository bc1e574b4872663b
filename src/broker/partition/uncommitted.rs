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
}
