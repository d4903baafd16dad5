//! Retention: which old segments go, and moving the log start offset (DeleteRecords).
//!
//! The rules are Kafka's (`UnifiedLog.deleteOldSegments`), oldest segment first:
//! - by time: every record in it is older than `retention.ms` (its largest timestamp is);
//! - by size: the log stays at or above `retention.bytes` without it;
//! - by log start: the next segment starts at or below the log start offset (DeleteRecords).
//!
//! A segment goes only when a rule says so, when every offset in it is below the high watermark
//! (nothing a consumer could not yet read is deleted), and when every older one goes too, so
//! that the log stays contiguous. Time and size apply only to topics whose `cleanup.policy`
//! includes `delete`; DeleteRecords is refused for the others, as Kafka does.
//!
//! `deletable` is pure (the clock is a value) so the rules are unit-tested without files; the
//! file work is in `delete_oldest` and `advance_log_start`, over a `PartitionLog`.
//!
//! ## Passes, files and the log start
//!
//! Each shard runs one retention pass over its partitions every `log.retention_check_interval_ms`
//! (5 minutes, as Kafka), parked on its timing wheel. Per partition, under the append lock:
//! `retention::deletable` (pure: segments, high watermark, log start and the clock as values)
//! counts the oldest segments that may go, Kafka's rules: every record older than `retention.ms`
//! (a segment's largest timestamp), or the rest of the log still holding `retention.bytes`, or the
//! next segment starting at or below the log start offset. Only segments wholly below the high
//! watermark go, oldest first, stopping at the first that stays. If that is every segment, the log
//! rolls first, so an expired log becomes one empty segment at its end offset and offsets carry on.
//! Time and size apply only to `cleanup.policy=delete` topics (`__consumer_offsets` is compact).
//!
//! Files go index first, log last, then the directory is synced: a crash midway leaves a whole
//! segment that recovery re-indexes and the next pass deletes. An in-flight fetch keeps its own
//! descriptor, so a deleted segment is still sent whole.
//!
//! The log start offset is the first segment's base, unless DeleteRecords moved it inside that
//! segment: then it is written to `log-start-offset` (write, sync, rename, sync dir) before the
//! answer, and read back on open. Fetches below it get OFFSET_OUT_OF_RANGE (clients reset with
//! `auto.offset.reset`), ListOffsets earliest returns it, and DeleteRecords deletes the segments
//! wholly below it at once.

use super::disk::Disk;
use super::log::PartitionLog;
use super::segment_file::Volume;
use super::{recovery, segment};
use std::cell::RefCell;
use std::path::Path;

/// The file that holds a log start offset moved inside the first segment by DeleteRecords (a
/// start at a segment base needs no file: the segment itself says it).
pub const LOG_START_FILE: &str = "log-start-offset";

/// A topic's retention settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// `cleanup.policy` includes `delete`.
    pub delete: bool,
    /// -1: keep forever.
    pub retention_ms: i64,
    /// -1: no size bound.
    pub retention_bytes: i64,
}

impl Policy {
    /// Only the segments wholly below the log start offset go.
    pub const LOG_START_ONLY: Policy = Policy {
        delete: false,
        retention_ms: -1,
        retention_bytes: -1,
    };
}

/// What the rules need of a segment.
#[derive(Debug, Clone, Copy)]
pub struct SegmentView {
    pub base_offset: i64,
    /// One past its last offset.
    pub next_offset: i64,
    pub size_bytes: u64,
    /// Largest record timestamp in it (ms); -1 if it has none.
    pub max_timestamp: i64,
    /// When it was created (ms): its age when no record carries a timestamp.
    pub created_ms: u64,
}

/// How many of the oldest segments may be deleted now. The count may include the last (active)
/// segment; the caller then rolls first, because a log always keeps one segment.
pub fn deletable(
    segments: &[SegmentView],
    high_watermark: i64,
    log_start_offset: i64,
    now_ms: u64,
    policy: Policy,
) -> usize {
    let total_bytes: u64 = segments.iter().map(|s| s.size_bytes).sum();
    // Bytes the log holds beyond `retention.bytes`; negative or None: nothing to shed by size.
    let mut excess_bytes = (policy.delete && policy.retention_bytes >= 0)
        .then(|| total_bytes as i128 - policy.retention_bytes as i128);
    let mut count = 0;
    for (i, s) in segments.iter().enumerate() {
        let next = segments.get(i + 1);
        let upper = next.map_or(s.next_offset, |n| n.base_offset);
        // An empty active segment holds nothing to delete; an empty closed one (all compacted
        // away) still goes in order.
        if (s.size_bytes == 0 && next.is_none()) || upper > high_watermark {
            break;
        }
        let by_time = policy.delete
            && policy.retention_ms >= 0
            && segment::age_ms(s.max_timestamp, s.created_ms, now_ms) > policy.retention_ms;
        let by_size = excess_bytes.is_some_and(|e| e - s.size_bytes as i128 >= 0);
        let by_start = next.is_some_and(|n| n.base_offset <= log_start_offset);
        if !(by_time || by_size || by_start) {
            break;
        }
        if let Some(e) = excess_bytes.as_mut() {
            *e -= s.size_bytes as i128;
        }
        count += 1;
    }
    count
}

/// Why a DeleteRecords offset was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdvanceError {
    /// Negative (other than -1), or past the high watermark.
    OffsetOutOfRange,
}

/// What retention reads of each of `log`'s segments.
fn segment_views(log: &PartitionLog) -> Vec<SegmentView> {
    log.segments
        .iter()
        .map(|s| SegmentView {
            base_offset: s.meta.base_offset,
            next_offset: s.meta.next_offset,
            size_bytes: s.meta.size_bytes,
            max_timestamp: s.meta.max_timestamp,
            created_ms: s.meta.created_ms,
        })
        .collect()
}

/// How many of `log`'s oldest segments retention may delete now.
pub fn count(log: &PartitionLog, now_ms: u64, policy: Policy) -> usize {
    deletable(
        &segment_views(log),
        log.high_watermark(),
        log.log_start_offset,
        now_ms,
        policy,
    )
}

/// Deletes the `count` oldest segments, rolling first if that is all of them, and moves the
/// log start offset to the first segment left. Returns the bytes freed. The caller holds the
/// partition's append lock.
///
/// Readers are safe: an in-flight fetch holds its segment's file open (its own descriptor),
/// and the file's blocks are freed when the last one closes.
pub async fn delete_oldest(
    log: &RefCell<PartitionLog>,
    count: usize,
    now_ms: u64,
) -> std::io::Result<u64> {
    if count == 0 {
        return Ok(0);
    }
    if count >= log.borrow().segments.len() {
        PartitionLog::roll(log, now_ms).await?;
    }
    let (volume, dir, doomed) = {
        let mut l = log.borrow_mut();
        assert!(count < l.segments.len(), "the active segment is kept");
        let doomed: Vec<(i64, u64)> = l
            .segments
            .drain(..count)
            .map(|s| (s.meta.base_offset, s.meta.size_bytes))
            .collect();
        let first = l.segments[0].meta.base_offset;
        l.log_start_offset = l.log_start_offset.max(first);
        (l.volume().clone(), l.dir.clone(), doomed)
    };
    for &(base, _) in &doomed {
        recovery::remove_segment(&*volume.disk(), &dir, base)?;
    }
    volume.sync_dir(&dir).await?;
    let freed = doomed.iter().map(|&(_, size)| size).sum();
    log::info!(
        "partition {}: retention deleted {} segments ({freed} bytes); log starts at {}",
        dir.display(),
        doomed.len(),
        log.borrow().log_start_offset
    );
    Ok(freed)
}

/// Moves the log start offset up to `offset` (-1: the high watermark), as DeleteRecords
/// asks, durably. Returns the new log start offset (the partition's low watermark); never
/// moves it down. The segments wholly below it are then for `delete_oldest`
/// (`Policy::LOG_START_ONLY`). The caller holds the partition's append lock.
pub async fn advance_log_start(
    log: &RefCell<PartitionLog>,
    offset: i64,
) -> std::io::Result<Result<i64, AdvanceError>> {
    let (volume, dir, target) = {
        let l = log.borrow();
        let hw = l.high_watermark();
        let target = if offset == -1 { hw } else { offset };
        if target < 0 || target > hw {
            return Ok(Err(AdvanceError::OffsetOutOfRange));
        }
        if target <= l.log_start_offset {
            return Ok(Ok(l.log_start_offset));
        }
        (l.volume().clone(), l.dir.clone(), target)
    };
    write_log_start(&volume, &dir, target).await?;
    log.borrow_mut().log_start_offset = target;
    Ok(Ok(target))
}

/// Replaces the log start file atomically: a crash leaves the old value or the new one.
pub(super) async fn write_log_start(
    volume: &Volume,
    dir: &Path,
    offset: i64,
) -> std::io::Result<()> {
    let tmp = dir.join(format!("{LOG_START_FILE}.tmp"));
    volume
        .write_file(&tmp, offset.to_le_bytes().to_vec())
        .await?;
    // `Disk::rename` is durable (it syncs the directory).
    volume.disk().rename(&tmp, &dir.join(LOG_START_FILE))
}

/// The log start offset a DeleteRecords left in `dir`, if any.
pub fn read_log_start(disk: &dyn Disk, dir: &Path) -> Option<i64> {
    let raw = disk.read(&dir.join(LOG_START_FILE)).ok()??;
    Some(i64::from_le_bytes(raw.as_slice().try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEEP: Policy = Policy {
        delete: true,
        retention_ms: -1,
        retention_bytes: -1,
    };

    /// Segments of `size` bytes and 10 offsets each, the i-th with largest timestamp `ts[i]`.
    fn log(ts: &[i64], size: u64) -> Vec<SegmentView> {
        ts.iter()
            .enumerate()
            .map(|(i, &t)| SegmentView {
                base_offset: i as i64 * 10,
                next_offset: i as i64 * 10 + 10,
                size_bytes: size,
                max_timestamp: t,
                created_ms: 0,
            })
            .collect()
    }

    #[test]
    fn time_deletes_the_old_prefix_only() {
        let segs = log(&[100, 200, 900, 300, 950], 10);
        let p = Policy {
            retention_ms: 500,
            ..KEEP
        };
        // now 1000: segments with newest record before 500 are old; the third is young, so the
        // fourth stays too (the log stays contiguous).
        assert_eq!(deletable(&segs, 50, 0, 1000, p), 2);
        // retention.ms is strict: exactly retention_ms old is kept.
        assert_eq!(deletable(&segs, 50, 0, 600, p), 0);
        assert_eq!(deletable(&segs, 50, 0, 601, p), 1);
        assert_eq!(deletable(&segs, 50, 0, 1000, KEEP), 0);
    }

    #[test]
    fn nothing_at_or_above_the_high_watermark_goes() {
        let segs = log(&[1, 1, 1], 10);
        let p = Policy {
            retention_ms: 0,
            ..KEEP
        };
        // The second segment ends at 20: with the high watermark at 15 it is not wholly durable.
        assert_eq!(deletable(&segs, 15, 0, 1000, p), 1);
        // Everything durable: the active segment may go too (the caller rolls).
        assert_eq!(deletable(&segs, 30, 0, 1000, p), 3);
    }

    #[test]
    fn an_empty_active_segment_is_never_counted() {
        let mut segs = log(&[1, 1], 10);
        segs.push(SegmentView {
            base_offset: 20,
            next_offset: 20,
            size_bytes: 0,
            max_timestamp: -1,
            created_ms: 0,
        });
        let p = Policy {
            retention_ms: 0,
            ..KEEP
        };
        assert_eq!(deletable(&segs, 20, 0, 1000, p), 2);
    }

    #[test]
    fn size_sheds_oldest_while_the_rest_stays_at_or_above_the_bound() {
        let segs = log(&[1, 1, 1, 1, 1], 100); // 500 bytes
        let p = |b| Policy {
            retention_bytes: b,
            ..KEEP
        };
        assert_eq!(deletable(&segs, 50, 0, 10, p(500)), 0);
        assert_eq!(deletable(&segs, 50, 0, 10, p(400)), 1);
        assert_eq!(deletable(&segs, 50, 0, 10, p(399)), 1);
        assert_eq!(deletable(&segs, 50, 0, 10, p(250)), 2);
        assert_eq!(deletable(&segs, 50, 0, 10, p(0)), 5);
        assert_eq!(deletable(&segs, 50, 0, 10, p(-1)), 0);
    }

    #[test]
    fn time_and_size_together_count_freed_bytes_once() {
        let segs = log(&[1, 2000, 2000, 2000], 100); // 400 bytes
        let p = Policy {
            delete: true,
            retention_ms: 500,
            retention_bytes: 150,
        };
        // The first goes by time (300 bytes left), the second by size (200 left, still >= 150);
        // the third would leave 100 < 150.
        assert_eq!(deletable(&segs, 40, 0, 1000, p), 2);
    }

    #[test]
    fn log_start_deletes_segments_wholly_below_it_whatever_the_policy() {
        let segs = log(&[1, 1, 1, 1], 10);
        let compact = Policy {
            delete: false,
            retention_ms: 0,
            retention_bytes: 0,
        };
        assert_eq!(deletable(&segs, 40, 0, 1000, compact), 0);
        assert_eq!(deletable(&segs, 40, 19, 1000, compact), 1);
        assert_eq!(deletable(&segs, 40, 20, 1000, compact), 2);
        // The active segment is not deleted for the log start alone.
        assert_eq!(deletable(&segs, 40, 40, 1000, compact), 3);
    }

    #[test]
    fn a_segment_without_timestamps_ages_from_its_creation() {
        let mut segs = log(&[-1], 10);
        segs[0].created_ms = 700;
        let p = Policy {
            retention_ms: 100,
            ..KEEP
        };
        assert_eq!(deletable(&segs, 10, 0, 800, p), 0);
        assert_eq!(deletable(&segs, 10, 0, 801, p), 1);
    }
}
