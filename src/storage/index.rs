//! Sparse per-segment indexes, kept in memory and written beside the segment when it closes.
//!
//! - Offset index: (offset relative to the segment base, file position), one entry each
//!   `index.interval.bytes` of log, always at a batch start. Lookup gives the last entry at or
//!   before an offset, so a read starts at most one interval plus one batch early.
//! - Time index: (max timestamp so far, relative offset), added with the offset entries when the
//!   segment's max timestamp grew.
//!
//! On disk both are flat arrays of big-endian entries (8 and 12 bytes), as Kafka's are.

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OffsetIndex {
    entries: Vec<(u32, u32)>,
}

impl OffsetIndex {
    pub const ENTRY_BYTES: usize = 8;

    pub fn push(&mut self, relative_offset: u32, position: u32) {
        assert!(
            self.entries
                .last()
                .is_none_or(|&(o, p)| o < relative_offset && p < position),
            "index entries increase in offset and position"
        );
        self.entries.push((relative_offset, position));
    }

    /// The entry with the largest offset <= `relative_offset`, or (0, 0).
    pub fn lookup(&self, relative_offset: u32) -> (u32, u32) {
        let i = self.entries.partition_point(|&(o, _)| o <= relative_offset);
        if i == 0 {
            (0, 0)
        } else {
            self.entries[i - 1]
        }
    }

    /// The last indexed batch start at or before `position` (0, the first batch, if none).
    pub fn batch_start_at_or_before(&self, position: u32) -> u32 {
        let i = self.entries.partition_point(|&(_, p)| p <= position);
        if i == 0 {
            0
        } else {
            self.entries[i - 1].1
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops entries at or past `position` (after a truncation of the segment).
    pub fn truncate_to_position(&mut self, position: u32) {
        let keep = self.entries.partition_point(|&(_, p)| p < position);
        self.entries.truncate(keep);
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * Self::ENTRY_BYTES);
        for &(o, p) in &self.entries {
            out.extend(o.to_be_bytes());
            out.extend(p.to_be_bytes());
        }
        out
    }

    /// Loads an index file; None if it is malformed or points past `segment_size`, in which case
    /// the caller rebuilds it from the segment.
    pub fn from_bytes(raw: &[u8], segment_size: u64) -> Option<OffsetIndex> {
        if !raw.len().is_multiple_of(Self::ENTRY_BYTES) {
            return None;
        }
        let mut index = OffsetIndex::default();
        for e in raw.chunks_exact(Self::ENTRY_BYTES) {
            let o = u32::from_be_bytes(e[0..4].try_into().ok()?);
            let p = u32::from_be_bytes(e[4..8].try_into().ok()?);
            if p as u64 >= segment_size
                || index
                    .entries
                    .last()
                    .is_some_and(|&(lo, lp)| lo >= o || lp >= p)
            {
                return None;
            }
            index.entries.push((o, p));
        }
        Some(index)
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TimeIndex {
    entries: Vec<(i64, u32)>,
}

impl TimeIndex {
    pub const ENTRY_BYTES: usize = 12;

    /// Adds an entry if `max_timestamp` is larger than the last one, keeping both columns sorted.
    pub fn maybe_push(&mut self, max_timestamp: i64, relative_offset: u32) {
        if self
            .entries
            .last()
            .is_none_or(|&(t, o)| max_timestamp > t && relative_offset > o)
        {
            self.entries.push((max_timestamp, relative_offset));
        }
    }

    /// Relative offset of the last entry whose timestamp is < `timestamp`: every record before it
    /// is older than `timestamp`, so a search may start there. 0 if there is none.
    pub fn lookup(&self, timestamp: i64) -> u32 {
        let i = self.entries.partition_point(|&(t, _)| t < timestamp);
        if i == 0 {
            0
        } else {
            self.entries[i - 1].1
        }
    }

    /// The largest timestamp indexed: entries are added whenever the maximum grows.
    pub fn max_timestamp(&self) -> Option<i64> {
        self.entries.last().map(|&(t, _)| t)
    }

    pub fn truncate_to_offset(&mut self, relative_offset: u32) {
        let keep = self.entries.partition_point(|&(_, o)| o < relative_offset);
        self.entries.truncate(keep);
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * Self::ENTRY_BYTES);
        for &(t, o) in &self.entries {
            out.extend(t.to_be_bytes());
            out.extend(o.to_be_bytes());
        }
        out
    }

    pub fn from_bytes(raw: &[u8]) -> Option<TimeIndex> {
        if !raw.len().is_multiple_of(Self::ENTRY_BYTES) {
            return None;
        }
        let mut index = TimeIndex::default();
        for e in raw.chunks_exact(Self::ENTRY_BYTES) {
            let t = i64::from_be_bytes(e[0..8].try_into().ok()?);
            let o = u32::from_be_bytes(e[8..12].try_into().ok()?);
            if index
                .entries
                .last()
                .is_some_and(|&(lt, lo)| lt >= t || lo >= o)
            {
                return None;
            }
            index.entries.push((t, o));
        }
        Some(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_lookup() {
        let mut i = OffsetIndex::default();
        assert_eq!(i.lookup(5), (0, 0));
        i.push(10, 4096);
        i.push(20, 8200);
        assert_eq!(i.lookup(9), (0, 0));
        assert_eq!(i.lookup(10), (10, 4096));
        assert_eq!(i.lookup(19), (10, 4096));
        assert_eq!(i.lookup(1000), (20, 8200));
        i.truncate_to_position(8200);
        assert_eq!(i.lookup(1000), (10, 4096));
    }

    #[test]
    fn offset_round_trip_and_rejects() {
        let mut i = OffsetIndex::default();
        i.push(1, 100);
        i.push(5, 300);
        let raw = i.to_bytes();
        assert_eq!(OffsetIndex::from_bytes(&raw, 1000), Some(i));
        assert_eq!(
            OffsetIndex::from_bytes(&raw, 200),
            None,
            "points past the segment"
        );
        assert_eq!(OffsetIndex::from_bytes(&raw[..7], 1000), None, "torn entry");
    }

    #[test]
    fn time_lookup() {
        let mut t = TimeIndex::default();
        t.maybe_push(100, 0);
        t.maybe_push(90, 3); // not larger: ignored
        t.maybe_push(200, 10);
        assert_eq!(t.lookup(50), 0);
        assert_eq!(t.lookup(150), 0);
        assert_eq!(t.lookup(201), 10);
        assert_eq!(TimeIndex::from_bytes(&t.to_bytes()), Some(t.clone()));
        t.truncate_to_offset(10);
        assert_eq!(t.lookup(500), 0);
    }
}
