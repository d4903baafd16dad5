//! Where a log's writes, syncs and commits stand: the positions `PartitionLog` keeps beside its
//! segments, as a part without I/O of its own, so that the simulator's log (`sim::replica`)
//! runs the same bookkeeping over its model of the disk.
//!
//! - `written`: the end of the bytes whose write has completed. Offsets are assigned (the log
//!   end moves) before the write is issued, so a sync planned meanwhile must stop here, not at
//!   the log end: syncing to the log end would call a write durable that has not reached the
//!   page cache yet.
//! - `planned`: where the last sync handed to the flusher ends (`take_sync`): the next one
//!   covers the bytes from here.
//! - `synced`: everything below it is covered by a completed fdatasync on this node.
//! - `high_watermark`: everything below it is committed, as the partition's commit rule decides
//!   (`partition::commit`). Consumers read only below it, so nothing they see can vanish in a
//!   crash.
//! - `ends`: the end of each batch above the high watermark, oldest first, so that an offset a
//!   replica reports (always a batch end) maps to its place in the log when the commit rule
//!   moves the high watermark there.
//!
//! Invariants, asserted: high watermark ≤ synced ≤ written and planned ≤ written; none of them
//! moves back except by `truncated` (and `restart_high_watermark`, before the log serves
//! anything); `ends` ascend, lie above the high watermark and at or below the log end noted.

use std::collections::VecDeque;

/// A place in the log: an offset and where it sits in the segment files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogPosition {
    pub offset: i64,
    pub segment_base: i64,
    pub file_position: u64,
}

/// Bound on the batch ends a log tracks above its high watermark. Past it, ends are not
/// noted: the high watermark then moves only to ends that were, which is later, never wrong.
const MAX_TRACKED_ENDS: usize = 65_536;

#[derive(Debug, Clone)]
pub struct LogPositions {
    high_watermark: LogPosition,
    synced: LogPosition,
    written: LogPosition,
    planned: LogPosition,
    /// Whether bytes were written since the last sync was planned.
    dirty: bool,
    ends: VecDeque<LogPosition>,
}

impl LogPositions {
    /// A log whose every byte up to `end` is written, durable and committed (an opened log
    /// after recovery; a log restarted empty).
    pub fn at(end: LogPosition) -> LogPositions {
        LogPositions {
            high_watermark: end,
            synced: end,
            written: end,
            planned: end,
            dirty: false,
            ends: VecDeque::new(),
        }
    }

    pub fn high_watermark(&self) -> LogPosition {
        self.high_watermark
    }

    pub fn synced(&self) -> LogPosition {
        self.synced
    }

    pub fn written(&self) -> LogPosition {
        self.written
    }

    /// A batch planned at the log end ends at `end`.
    pub fn note_batch_end(&mut self, end: LogPosition) {
        assert!(
            end.offset > self.high_watermark.offset
                && self.ends.back().is_none_or(|e| e.offset < end.offset),
            "batch ends ascend above the high watermark: {end:?} after {:?}",
            self.ends.back()
        );
        if self.ends.len() < MAX_TRACKED_ENDS {
            self.ends.push_back(end);
        }
    }

    /// The write of the batches from `base_offset` to `end` completed: the next sync covers
    /// them.
    pub fn wrote(&mut self, base_offset: i64, end: LogPosition) {
        assert!(
            base_offset == self.written.offset && end.offset >= base_offset,
            "appends are serialized: written {} base {base_offset} end {}",
            self.written.offset,
            end.offset
        );
        self.written = end;
        self.dirty = true;
    }

    /// The sync the flusher must do to cover every completed write, as (from, target): the
    /// bytes between the previous sync's target and `target` are new. None when clean.
    pub fn take_sync(&mut self) -> Option<(LogPosition, LogPosition)> {
        if !std::mem::take(&mut self.dirty) {
            return None;
        }
        let from = std::mem::replace(&mut self.planned, self.written);
        if crate::inject::active(crate::inject::Bug::FlusherAcksBeforeFsync) {
            self.synced = self.written;
        }
        Some((from, self.written))
    }

    /// The sync covering `target` completed. An older target may arrive after a newer one (a
    /// sync of a truncated log's old tail, say): `synced` keeps the furthest.
    pub fn complete_sync(&mut self, target: LogPosition) {
        assert!(
            target.offset <= self.written.offset,
            "a sync covers only completed writes: {} past {}",
            target.offset,
            self.written.offset
        );
        if target.offset > self.synced.offset {
            self.synced = target;
        }
    }

    /// The furthest known batch end at or below `offset` and above the high watermark, no
    /// further than `synced`: where a commit rule that computed `offset` may move the high
    /// watermark. None when there is none.
    pub fn committable_at(&self, offset: i64) -> Option<LogPosition> {
        let offset = offset.min(self.synced.offset);
        if offset == self.synced.offset {
            return Some(self.synced);
        }
        let i = self.ends.partition_point(|e| e.offset <= offset);
        (i > 0).then(|| self.ends[i - 1])
    }

    /// The commit rule computed `offset`: the high watermark moves to the furthest batch end
    /// `committable_at` allows, if that is past it. Returns where it moved.
    pub fn commit_up_to(&mut self, offset: i64) -> Option<i64> {
        let to = self.committable_at(offset)?;
        if to.offset <= self.high_watermark.offset {
            return None;
        }
        self.advance_high_watermark(to);
        Some(to.offset)
    }

    /// Moves the high watermark to `to`, which the commit rule chose: at most the synced end,
    /// and never backwards.
    pub fn advance_high_watermark(&mut self, to: LogPosition) {
        assert!(
            to.offset <= self.synced.offset,
            "committed {} past synced {}",
            to.offset,
            self.synced.offset
        );
        assert!(
            to.offset >= self.high_watermark.offset,
            "high watermark moved back from {} to {}",
            self.high_watermark.offset,
            to.offset
        );
        self.high_watermark = to;
        while self.ends.front().is_some_and(|e| e.offset <= to.offset) {
            self.ends.pop_front();
        }
    }

    /// After a restart of a replicated log the high watermark goes back to `to`, what its
    /// checkpoint said (the recovered log end may hold records never committed). Before the
    /// log serves anything.
    pub fn restart_high_watermark(&mut self, to: LogPosition) {
        assert!(
            to.offset <= self.high_watermark.offset && self.ends.is_empty(),
            "a restart moves an opened log's high watermark back: {to:?} from {:?}",
            self.high_watermark
        );
        self.high_watermark = to;
    }

    /// The log was cut at `end`: every position past it comes back to it, and the batch ends
    /// past it go.
    pub fn truncated(&mut self, end: LogPosition) {
        let positions = [
            &mut self.high_watermark,
            &mut self.synced,
            &mut self.written,
            &mut self.planned,
        ];
        for position in positions {
            if position.offset > end.offset {
                *position = end;
            }
        }
        while self.ends.back().is_some_and(|e| e.offset > end.offset) {
            self.ends.pop_back();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: i64) -> LogPosition {
        LogPosition {
            offset,
            segment_base: 0,
            file_position: offset as u64 * 100,
        }
    }

    /// Two batches written (0..3, 3..5): one sync covers both; the high watermark moves only
    /// to a noted batch end at or below what the commit rule computed, never past the sync.
    #[test]
    fn a_sync_covers_completed_writes_and_commits_stop_at_batch_ends() {
        let mut p = LogPositions::at(at(0));
        assert_eq!(p.take_sync(), None, "nothing written");
        p.note_batch_end(at(3));
        p.note_batch_end(at(5));
        p.wrote(0, at(5));
        assert_eq!(
            p.committable_at(5),
            Some(at(0)),
            "no further than the synced end"
        );
        assert_eq!(p.take_sync(), Some((at(0), at(5))));
        assert_eq!(p.take_sync(), None, "nothing new since");
        p.complete_sync(at(5));
        assert_eq!(p.committable_at(4), Some(at(3)));
        p.advance_high_watermark(at(3));
        assert_eq!(
            p.committable_at(4),
            None,
            "no batch end above 3 and at or below 4"
        );
        assert_eq!(p.committable_at(9), Some(at(5)));
    }

    /// A cut below the synced end: written and synced come back to it, the high watermark
    /// below it stays, and the next sync begins there.
    #[test]
    fn a_truncation_brings_every_position_past_the_cut_back_to_it() {
        let mut p = LogPositions::at(at(0));
        for end in [2, 4, 6] {
            p.note_batch_end(at(end));
        }
        p.wrote(0, at(6));
        assert_eq!(p.take_sync(), Some((at(0), at(6))));
        p.complete_sync(at(6));
        p.advance_high_watermark(at(2));
        p.truncated(at(4));
        assert_eq!(
            (p.written(), p.synced(), p.high_watermark()),
            (at(4), at(4), at(2))
        );
        assert_eq!(p.committable_at(9), Some(at(4)));
        p.note_batch_end(at(7));
        p.wrote(4, at(7));
        assert_eq!(p.take_sync(), Some((at(4), at(7))));
    }
}
