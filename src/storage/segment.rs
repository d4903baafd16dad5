//! One segment: a file of whole record batches starting at `base_offset`, plus its in-memory
//! sparse indexes. Pure bookkeeping; the file handle lives beside it in `log.rs`.

use super::index::{OffsetIndex, TimeIndex};
use crate::protocol::batch::BatchHeader;
use std::path::{Path, PathBuf};

/// The furthest an offset in a segment may be from its base: index entries hold the
/// difference in 32 bits, and Kafka keeps it within i32.
pub const MAX_RELATIVE_OFFSET: i64 = i32::MAX as i64;

/// How long before `now_ms` a segment's newest record was written: by its largest record
/// timestamp, or by the segment's creation when no record carries one. Retention
/// (`retention.ms`) and tombstone expiry (`delete.retention.ms`) both judge a segment by it.
pub fn age_ms(max_timestamp: i64, created_ms: u64, now_ms: u64) -> i64 {
    let newest_ms = if max_timestamp >= 0 {
        max_timestamp
    } else {
        created_ms as i64
    };
    (now_ms as i64).saturating_sub(newest_ms)
}

#[derive(Debug, Clone)]
pub struct SegmentMeta {
    pub base_offset: i64,
    /// Bytes of whole batches in the file.
    pub size_bytes: u64,
    /// One past the last offset stored; `base_offset` when empty.
    pub next_offset: i64,
    pub max_timestamp: i64,
    pub offset_index: OffsetIndex,
    pub time_index: TimeIndex,
    /// Bytes appended since the last offset-index entry.
    pub bytes_since_index: u32,
    /// When the segment was created (wall clock, ms), for `segment.ms`.
    pub created_ms: u64,
}

impl SegmentMeta {
    pub fn new(base_offset: i64, created_ms: u64) -> SegmentMeta {
        SegmentMeta {
            base_offset,
            size_bytes: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            offset_index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            bytes_since_index: 0,
            created_ms,
        }
    }

    /// A segment known up to its last offset-index entry, from its index files (or a prefix of
    /// them): the batches from there on are still to be noted. The largest timestamp comes from
    /// the time index, since batches before that entry are not scanned again and their
    /// timestamps need not be in order.
    pub fn with_indexes(
        base_offset: i64,
        created_ms: u64,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
    ) -> SegmentMeta {
        let (relative, position) = offset_index.lookup(u32::MAX);
        SegmentMeta {
            size_bytes: position as u64,
            next_offset: base_offset + relative as i64,
            max_timestamp: time_index.max_timestamp().unwrap_or(-1),
            offset_index,
            time_index,
            ..SegmentMeta::new(base_offset, created_ms)
        }
    }

    pub fn is_empty(&self) -> bool {
        self.size_bytes == 0
    }

    /// The bookkeeping of this segment once its file is cut at byte `cut` (a batch start): its
    /// indexes up to their last entry before the cut, known up to that entry
    /// (`with_indexes`). The batches from `size_bytes` to the cut are still to be noted.
    pub fn cut_at(&self, cut: u64) -> SegmentMeta {
        let mut offset_index = self.offset_index.clone();
        if !crate::inject::active(crate::inject::Bug::TruncationKeepsIndexPastEnd) {
            offset_index.truncate_to_position(cut.min(u32::MAX as u64) as u32);
        }
        let (prefix_end, _) = offset_index.lookup(u32::MAX);
        let mut time_index = self.time_index.clone();
        time_index.truncate_to_offset(prefix_end);
        SegmentMeta::with_indexes(self.base_offset, self.created_ms, offset_index, time_index)
    }

    /// Records a batch appended at `position`, adding index entries each `interval` bytes.
    pub fn note_batch(&mut self, header: &BatchHeader, position: u64, interval: u32) {
        assert_eq!(position, self.size_bytes, "batches are noted in file order");
        assert!(
            header.last_offset() - self.base_offset <= MAX_RELATIVE_OFFSET,
            "the log rolls before offsets outgrow the index"
        );
        let relative = (header.base_offset - self.base_offset) as u32;
        if self.bytes_since_index >= interval {
            self.offset_index.push(relative, position as u32);
            self.bytes_since_index = 0;
        }
        self.bytes_since_index = self
            .bytes_since_index
            .saturating_add(header.size_bytes as u32);
        if header.max_timestamp > self.max_timestamp {
            self.max_timestamp = header.max_timestamp;
            self.time_index.maybe_push(
                header.max_timestamp,
                (header.last_offset() - self.base_offset) as u32,
            );
        }
        self.size_bytes = position + header.size_bytes as u64;
        self.next_offset = header.next_offset();
    }

    pub fn log_path(dir: &Path, base_offset: i64) -> PathBuf {
        dir.join(format!("{base_offset:020}.log"))
    }
    pub fn index_path(dir: &Path, base_offset: i64) -> PathBuf {
        dir.join(format!("{base_offset:020}.index"))
    }
    pub fn time_index_path(dir: &Path, base_offset: i64) -> PathBuf {
        dir.join(format!("{base_offset:020}.timeindex"))
    }
}
