//! OffsetIndex and TimeIndex: Kafka's sparse, memory-mapped segment indexes, preallocated
//! while a segment is active and trimmed to their entries when it rolls or closes.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use memmap2::MmapMut;

use super::error::{Result, StorageError};

/// A file of fixed-size big-endian entries whose key is an offset relative to the segment's base.
/// OffsetIndex and TimeIndex dereference to it for what they share. Like Kafka's indexes it keeps
/// only the mapping, not an open file: a broker with 10,000 partitions then needs one descriptor
/// per segment (its `.log`), not three.
pub struct IndexFile {
    path: PathBuf,
    mmap: MmapMut,
    entries: usize,
    entry_size: usize,
    base_offset: i64,
}

fn round_down(n: u64, m: usize) -> u64 {
    n - n % m as u64
}

/// Maps the whole index file, with readahead off (`MADV_RANDOM`). An active index is a sparse
/// preallocated file, and the kernel's readahead turned the first write into it into a read of
/// a large window of holes: 2–3 ms per index on this machine, paid under the log's lock by the
/// append that writes a new segment's first entry. Lookups touch a few pages of a binary search,
/// which need no readahead either.
fn map(file: &File, path: &Path) -> Result<MmapMut> {
    // SAFETY: the file is ours (Kafka's layout keeps one writer per log dir, guarded by `.lock`),
    // and every access is bounds-checked against the mapped length.
    let mmap = unsafe { MmapMut::map_mut(file) }.map_err(StorageError::io(path))?;
    if !mmap.is_empty() {
        if let Err(e) = mmap.advise(memmap2::Advice::Random) {
            tracing::debug!(path = %path.display(), error = %e, "index readahead left on");
        }
    }
    Ok(mmap)
}

impl IndexFile {
    fn open(path: &Path, base_offset: i64, max_index_size: u64, entry_size: usize) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(StorageError::io(path))?;
        let len = file.metadata().map_err(StorageError::io(path))?.len();
        let entries = if len == 0 {
            let size = round_down(max_index_size, entry_size);
            file.set_len(size).map_err(StorageError::io(path))?;
            0
        } else {
            (len / entry_size as u64) as usize
        };
        let mmap = map(&file, path)?;
        drop(file);
        Ok(IndexFile {
            path: path.to_path_buf(),
            mmap,
            entries,
            entry_size,
            base_offset,
        })
    }

    fn max_entries(&self) -> usize {
        self.mmap.len() / self.entry_size
    }

    /// Entries written.
    pub fn entries(&self) -> usize {
        self.entries
    }

    pub fn is_full(&self) -> bool {
        self.entries >= self.max_entries()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the file; the mapping stays valid (it follows the inode, not the name).
    pub fn rename_to(&mut self, to: PathBuf) -> Result<()> {
        std::fs::rename(&self.path, &to).map_err(StorageError::io(&self.path))?;
        self.path = to;
        Ok(())
    }

    /// Drops every entry (before a rebuild).
    pub fn reset(&mut self) {
        self.entries = 0;
    }

    fn entry(&self, n: usize) -> &[u8] {
        &self.mmap[n * self.entry_size..(n + 1) * self.entry_size]
    }

    fn push(&mut self, bytes: &[u8]) {
        let at = self.entries * self.entry_size;
        self.mmap[at..at + self.entry_size].copy_from_slice(bytes);
        self.entries += 1;
    }

    /// Index of the last entry whose key is ≤ `target`, by binary search over `key`.
    fn floor_slot(&self, target: i64, key: impl Fn(&[u8]) -> i64) -> Option<usize> {
        if self.entries == 0 || key(self.entry(0)) > target {
            return None;
        }
        let (mut lo, mut hi) = (0usize, self.entries - 1);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if key(self.entry(mid)) <= target {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        Some(lo)
    }

    /// Grows (preallocates) or shrinks the file; entries beyond the new end are dropped.
    pub fn resize(&mut self, new_len: u64) -> Result<()> {
        let new_len = round_down(new_len, self.entry_size);
        if new_len == self.mmap.len() as u64 {
            return Ok(());
        }
        self.mmap.flush().map_err(StorageError::io(&self.path))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .map_err(StorageError::io(&self.path))?;
        file.set_len(new_len)
            .map_err(StorageError::io(&self.path))?;
        self.mmap = map(&file, &self.path)?;
        self.entries = self.entries.min(self.max_entries());
        Ok(())
    }

    /// Shrinks the file to its entries (when the segment stops being active).
    pub fn trim_to_valid_size(&mut self) -> Result<()> {
        self.resize((self.entries * self.entry_size) as u64)
    }

    pub fn flush(&self) -> Result<()> {
        self.mmap.flush().map_err(StorageError::io(&self.path))
    }

    fn relative(&self, offset: i64) -> u32 {
        (offset - self.base_offset) as u32
    }

    fn corrupt(&self, reason: String) -> StorageError {
        StorageError::CorruptIndex {
            path: self.path.clone(),
            reason,
        }
    }

    /// Bytes in the file (preallocated or trimmed).
    pub fn file_len(&self) -> u64 {
        self.mmap.len() as u64
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Maps an offset to the file position of a batch at or before it: (relative offset u32, position u32).
pub struct OffsetIndex(IndexFile);

impl std::ops::Deref for OffsetIndex {
    type Target = IndexFile;
    fn deref(&self) -> &IndexFile {
        &self.0
    }
}

impl std::ops::DerefMut for OffsetIndex {
    fn deref_mut(&mut self) -> &mut IndexFile {
        &mut self.0
    }
}

/// One offset index entry: an absolute offset and the position of a batch ending at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetPosition {
    pub offset: i64,
    pub position: u32,
}

impl OffsetIndex {
    pub const ENTRY_SIZE: usize = 8;

    pub fn open(path: &Path, base_offset: i64, max_index_size: u64) -> Result<Self> {
        Ok(OffsetIndex(IndexFile::open(
            path,
            base_offset,
            max_index_size,
            Self::ENTRY_SIZE,
        )?))
    }

    fn decode(&self, n: usize) -> OffsetPosition {
        let e = self.0.entry(n);
        OffsetPosition {
            offset: self.0.base_offset + u32_at(e, 0) as i64,
            position: u32_at(e, 4),
        }
    }

    pub fn last_entry(&self) -> OffsetPosition {
        match self.0.entries {
            0 => OffsetPosition {
                offset: self.0.base_offset,
                position: 0,
            },
            n => self.decode(n - 1),
        }
    }

    pub fn entry_at(&self, n: usize) -> OffsetPosition {
        self.decode(n)
    }

    /// Appends an entry; offsets must grow strictly.
    pub fn append(&mut self, offset: i64, position: u32) -> Result<()> {
        if self.0.is_full() {
            return Err(self.0.corrupt("append to a full offset index".into()));
        }
        if self.0.entries > 0 && offset <= self.last_entry().offset {
            return Err(self.0.corrupt(format!(
                "offset {offset} is not larger than the last entry {}",
                self.last_entry().offset
            )));
        }
        let mut e = [0u8; 8];
        e[..4].copy_from_slice(&self.0.relative(offset).to_be_bytes());
        e[4..].copy_from_slice(&position.to_be_bytes());
        self.0.push(&e);
        Ok(())
    }

    /// The entry with the largest offset ≤ `target`, or (base offset, 0).
    pub fn lookup(&self, target: i64) -> OffsetPosition {
        let base = self.0.base_offset;
        match self.0.floor_slot(target, |e| base + u32_at(e, 0) as i64) {
            Some(slot) => self.decode(slot),
            None => OffsetPosition {
                offset: base,
                position: 0,
            },
        }
    }

    /// Removes every entry with offset ≥ `offset`.
    pub fn truncate_to(&mut self, offset: i64) {
        let base = self.0.base_offset;
        let keep = match self.0.floor_slot(offset, |e| base + u32_at(e, 0) as i64) {
            None => 0,
            Some(slot) if self.decode(slot).offset == offset => slot,
            Some(slot) => slot + 1,
        };
        self.0.entries = keep;
    }

    /// Kafka's checks: whole entries, entries not below the base offset, growing offsets at the
    /// tail, and positions within the log file.
    pub fn sanity_check(&self, log_size: u64) -> Result<()> {
        if !self.0.file_len().is_multiple_of(Self::ENTRY_SIZE as u64) {
            return Err(self.0.corrupt(format!(
                "length {} is not a multiple of {}",
                self.0.file_len(),
                Self::ENTRY_SIZE
            )));
        }
        let mut prev: Option<OffsetPosition> = None;
        for n in 0..self.0.entries {
            let e = self.decode(n);
            if let Some(p) = prev {
                if e.offset <= p.offset || e.position <= p.position {
                    return Err(self
                        .0
                        .corrupt(format!("entry {n} does not grow: {e:?} after {p:?}")));
                }
            }
            if e.position as u64 >= log_size.max(1) {
                return Err(self.0.corrupt(format!(
                    "entry {n} points at position {} past the log's {log_size} bytes",
                    e.position
                )));
            }
            prev = Some(e);
        }
        Ok(())
    }
}

/// Maps a timestamp to the offset of the first batch at or after it: (timestamp i64, relative offset u32).
pub struct TimeIndex(IndexFile);

impl std::ops::Deref for TimeIndex {
    type Target = IndexFile;
    fn deref(&self) -> &IndexFile {
        &self.0
    }
}

impl std::ops::DerefMut for TimeIndex {
    fn deref_mut(&mut self) -> &mut IndexFile {
        &mut self.0
    }
}

/// One time index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    pub timestamp: i64,
    pub offset: i64,
}

impl TimeIndex {
    pub const ENTRY_SIZE: usize = 12;

    pub fn open(path: &Path, base_offset: i64, max_index_size: u64) -> Result<Self> {
        Ok(TimeIndex(IndexFile::open(
            path,
            base_offset,
            max_index_size,
            Self::ENTRY_SIZE,
        )?))
    }

    fn decode(&self, n: usize) -> TimestampOffset {
        let e = self.0.entry(n);
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&e[..8]);
        TimestampOffset {
            timestamp: i64::from_be_bytes(ts),
            offset: self.0.base_offset + u32_at(e, 8) as i64,
        }
    }

    fn ts_key(e: &[u8]) -> i64 {
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&e[..8]);
        i64::from_be_bytes(ts)
    }

    pub fn entry_at(&self, n: usize) -> TimestampOffset {
        self.decode(n)
    }

    /// The last entry, or (-1, base offset) when empty.
    pub fn last_entry(&self) -> TimestampOffset {
        match self.0.entries {
            0 => TimestampOffset {
                timestamp: -1,
                offset: self.0.base_offset,
            },
            n => self.decode(n - 1),
        }
    }

    /// Appends `(timestamp, offset)` only when the timestamp is larger than the last entry's,
    /// as Kafka's `TimeIndex.maybeAppend`. `skip_full_check` is for the final entry on roll.
    pub fn maybe_append(
        &mut self,
        timestamp: i64,
        offset: i64,
        skip_full_check: bool,
    ) -> Result<()> {
        if !skip_full_check && self.0.is_full() {
            return Err(self.0.corrupt("append to a full time index".into()));
        }
        let last = self.last_entry();
        if self.0.entries > 0 && offset < last.offset {
            return Err(self.0.corrupt(format!(
                "offset {offset} is below the last entry's {}",
                last.offset
            )));
        }
        if self.0.entries == 0 || timestamp > last.timestamp {
            if self.0.is_full() {
                return Ok(());
            }
            let mut e = [0u8; 12];
            e[..8].copy_from_slice(&timestamp.to_be_bytes());
            e[8..].copy_from_slice(&self.0.relative(offset).to_be_bytes());
            self.0.push(&e);
        }
        Ok(())
    }

    /// The entry with the largest timestamp ≤ `target`, or (-1, base offset).
    pub fn lookup(&self, target: i64) -> TimestampOffset {
        match self.0.floor_slot(target, Self::ts_key) {
            Some(slot) => self.decode(slot),
            None => TimestampOffset {
                timestamp: -1,
                offset: self.0.base_offset,
            },
        }
    }

    /// Removes every entry whose offset is ≥ `offset`.
    pub fn truncate_to(&mut self, offset: i64) {
        let mut keep = self.0.entries;
        while keep > 0 && self.decode(keep - 1).offset >= offset {
            keep -= 1;
        }
        self.0.entries = keep;
    }

    /// Whole entries; timestamps and offsets never decrease; offsets within the segment.
    pub fn sanity_check(&self, next_offset: i64) -> Result<()> {
        if !self.0.file_len().is_multiple_of(Self::ENTRY_SIZE as u64) {
            return Err(self.0.corrupt(format!(
                "length {} is not a multiple of {}",
                self.0.file_len(),
                Self::ENTRY_SIZE
            )));
        }
        let mut prev: Option<TimestampOffset> = None;
        for n in 0..self.0.entries {
            let e = self.decode(n);
            if let Some(p) = prev {
                if e.timestamp < p.timestamp || e.offset < p.offset {
                    return Err(self
                        .0
                        .corrupt(format!("entry {n} goes backwards: {e:?} after {p:?}")));
                }
            }
            if e.offset >= next_offset.max(self.0.base_offset + 1) {
                return Err(self.0.corrupt(format!(
                    "entry {n} points at offset {} past the segment's end {next_offset}",
                    e.offset
                )));
            }
            prev = Some(e);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn preallocates_and_trims() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("00000000000000000000.index");
        let mut idx = OffsetIndex::open(&p, 0, 10 * 1024 * 1024).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 10_485_760);
        idx.append(3, 100).unwrap();
        idx.append(9, 5000).unwrap();
        idx.trim_to_valid_size().unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 16);
        let t = dir.path().join("00000000000000000000.timeindex");
        let _ti = TimeIndex::open(&t, 0, 10 * 1024 * 1024).unwrap();
        assert_eq!(std::fs::metadata(&t).unwrap().len(), 10_485_756);
    }

    /// Descriptors of this process open on `path`.
    fn open_descriptors(path: &Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target == path)
            .count()
    }

    #[test]
    fn an_index_keeps_its_mapping_but_no_open_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("00000000000000000000.index");
        let mut idx = OffsetIndex::open(&p, 0, 1024 * 1024).unwrap();
        assert_eq!(open_descriptors(&p), 0, "opened");
        idx.append(5, 10).unwrap();
        idx.trim_to_valid_size().unwrap();
        assert_eq!(open_descriptors(&p), 0, "resized");
        // The entries written through the mapping are in the file and read back.
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 8);
        assert_eq!(idx.lookup(7).offset, 5);
    }

    /// Pages of `idx`'s mapping that are in the page cache (`mincore`).
    fn resident_pages(idx: &IndexFile) -> usize {
        // SAFETY: sysconf reads a constant of the running system.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let mut vec = vec![0u8; idx.mmap.len().div_ceil(page)];
        // SAFETY: the pointer and length are the live mapping's; `vec` has a byte per page.
        let rc = unsafe {
            libc::mincore(
                idx.mmap.as_ptr() as *mut libc::c_void,
                idx.mmap.len(),
                vec.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|b| **b & 1 == 1).count()
    }

    #[test]
    fn the_first_entry_of_a_preallocated_index_faults_in_one_page_not_a_readahead_window() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = OffsetIndex::open(&dir.path().join("a.index"), 0, 10 * 1024 * 1024).unwrap();
        assert_eq!(resident_pages(&idx), 0);
        idx.append(3, 100).unwrap();
        assert_eq!(
            resident_pages(&idx),
            1,
            "readahead read holes of the sparse file"
        );
        // Growing back to the preallocated size remaps: still no readahead.
        idx.trim_to_valid_size().unwrap();
        idx.resize(10 * 1024 * 1024).unwrap();
        idx.append(9, 5000).unwrap();
        assert_eq!(resident_pages(&idx), 1);
        let found = idx.lookup(9);
        assert_eq!((found.offset, found.position), (9, 5000));
    }

    #[test]
    fn rejects_non_increasing_offsets_and_full_index() {
        let dir = tempfile::tempdir().unwrap();
        let mut idx = OffsetIndex::open(&dir.path().join("a.index"), 100, 16).unwrap();
        idx.append(101, 0).unwrap();
        assert!(idx.append(101, 10).is_err());
        idx.append(105, 20).unwrap();
        assert!(idx.is_full());
        assert!(idx.append(110, 30).is_err());
    }

    #[test]
    fn time_index_only_grows_in_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut ti = TimeIndex::open(&dir.path().join("a.timeindex"), 0, 1200).unwrap();
        ti.maybe_append(10, 1, false).unwrap();
        ti.maybe_append(10, 2, false).unwrap();
        ti.maybe_append(5, 3, false).unwrap();
        ti.maybe_append(20, 4, false).unwrap();
        assert_eq!(ti.entries(), 2);
        assert_eq!(ti.lookup(15).offset, 1);
        assert_eq!(ti.lookup(20).offset, 4);
        assert_eq!(ti.lookup(4).timestamp, -1);
        ti.truncate_to(4);
        assert_eq!(ti.entries(), 1);
    }

    proptest! {
        #[test]
        fn offset_lookup_equals_linear_scan(
            gaps in proptest::collection::vec(1i64..50, 0..300),
            targets in proptest::collection::vec(0i64..20_000, 1..50),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let base = 1000;
            let mut idx = OffsetIndex::open(&dir.path().join("p.index"), base, 8 * 400).unwrap();
            let mut entries = Vec::new();
            let mut off = base;
            for (i, g) in gaps.iter().enumerate() {
                off += g;
                idx.append(off, (i as u32 + 1) * 64).unwrap();
                entries.push(OffsetPosition { offset: off, position: (i as u32 + 1) * 64 });
            }
            for t in targets {
                let t = base + t - 1000;
                let expect = entries.iter().rev().find(|e| e.offset <= t).copied()
                    .unwrap_or(OffsetPosition { offset: base, position: 0 });
                prop_assert_eq!(idx.lookup(t), expect);
            }
        }

        #[test]
        fn truncate_keeps_only_smaller_offsets(
            n in 0usize..100, cut in 0i64..600,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut idx = OffsetIndex::open(&dir.path().join("p.index"), 0, 8 * 200).unwrap();
            for i in 0..n {
                idx.append(i as i64 * 5 + 1, i as u32 * 10).unwrap();
            }
            idx.truncate_to(cut);
            let expect = (0..n).filter(|i| (*i as i64) * 5 + 1 < cut).count();
            prop_assert_eq!(idx.entries(), expect);
        }

        #[test]
        fn time_lookup_equals_linear_scan(
            steps in proptest::collection::vec((0i64..30, 1i64..10), 0..200),
            targets in proptest::collection::vec(-10i64..4000, 1..40),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut ti = TimeIndex::open(&dir.path().join("p.timeindex"), 0, 12 * 300).unwrap();
            let mut kept: Vec<TimestampOffset> = Vec::new();
            let (mut ts, mut off) = (0i64, 0i64);
            for (dt, doff) in steps {
                ts += dt; off += doff;
                ti.maybe_append(ts, off, false).unwrap();
                if kept.last().is_none_or(|l| ts > l.timestamp) {
                    kept.push(TimestampOffset { timestamp: ts, offset: off });
                }
            }
            prop_assert_eq!(ti.entries(), kept.len());
            for t in targets {
                let expect = kept.iter().rev().find(|e| e.timestamp <= t).copied()
                    .unwrap_or(TimestampOffset { timestamp: -1, offset: 0 });
                prop_assert_eq!(ti.lookup(t), expect);
            }
        }
    }
}
