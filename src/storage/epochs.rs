//! The leader epoch cache of one partition (KIP-101): at which offset each leader epoch's
//! records begin. A follower that starts following a new leader asks it where the follower's
//! latest epoch ends (OffsetsForLeaderEpoch) and truncates its log there, so a tail written
//! under an old leader that the new leader never had is removed before it fetches.
//!
//! Kept in memory and in `leader-epoch-checkpoint` next to the segments, rewritten (write,
//! sync, rename) when an epoch begins: once per leadership change, never per append. The file
//! is written before the first batch of the new epoch, so the log never holds an epoch the file
//! lacks; entries past the log end after a crash are dropped on open.

use super::disk::Disk;
use std::path::Path;

const FILE: &str = "leader-epoch-checkpoint";
/// Bound on the entries kept: one per leadership change that appended records; the oldest go
/// first (a follower that far behind truncates to its high watermark instead).
const MAX_ENTRIES: usize = 4096;

/// What OffsetsForLeaderEpoch answers when the log knows no epoch at or below the one asked.
pub const UNDEFINED: (i32, i64) = (-1, -1);

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochs {
    /// (epoch, start offset), both strictly increasing.
    entries: Vec<(i32, i64)>,
}

impl LeaderEpochs {
    /// The cache of the log in `dir`, less entries that begin past `log_end` (written before a
    /// crash that lost their records). A missing or unreadable file is an empty cache. The
    /// cut is saved at once, as Kafka's cache does: an entry left in the file would come back
    /// at a later restart once the log grew past its start again, naming an epoch that
    /// never wrote there.
    pub fn load(disk: &dyn Disk, dir: &Path, log_end: i64) -> std::io::Result<LeaderEpochs> {
        let raw = disk
            .read(&dir.join(FILE))
            .ok()
            .flatten()
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&raw);
        let mut cache = LeaderEpochs::default();
        for line in text.lines() {
            let mut parts = line.split_whitespace().map(str::parse::<i64>);
            if let (Some(Ok(epoch)), Some(Ok(start))) = (parts.next(), parts.next()) {
                if epoch >= 0 && epoch <= i32::MAX as i64 {
                    cache.assign(epoch as i32, start);
                }
            }
        }
        if cache.truncate_from(log_end + 1) {
            cache.save(disk, dir)?;
        }
        Ok(cache)
    }

    /// Writes the cache next to the log, atomically and durably (`Disk::replace`).
    pub fn save(&self, disk: &dyn Disk, dir: &Path) -> std::io::Result<()> {
        let text: String = self
            .entries
            .iter()
            .map(|(epoch, start)| format!("{epoch} {start}\n"))
            .collect();
        disk.replace(&dir.join(FILE), text.as_bytes())
    }

    /// The newest epoch, if any.
    pub fn latest(&self) -> Option<i32> {
        self.entries.last().map(|e| e.0)
    }

    /// Notes that `epoch` begins at `start`. True when that changed the cache (the caller
    /// saves it). An epoch older than the newest is ignored; a newer one beginning below the
    /// newest's start first drops the entries it overlaps.
    pub fn assign(&mut self, epoch: i32, start: i64) -> bool {
        if self.latest().is_some_and(|l| l >= epoch) {
            return false;
        }
        self.truncate_from(start);
        self.entries.push((epoch, start));
        if self.entries.len() > MAX_ENTRIES {
            self.entries.remove(0);
        }
        true
    }

    /// Drops the epochs that begin at or after `offset` (the log was truncated there). True
    /// when that changed the cache.
    pub fn truncate_from(&mut self, offset: i64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.1 < offset);
        self.entries.len() != before
    }

    /// Where `epoch` ends in this log whose end is `log_end`: the largest epoch at or below it
    /// that the log knows, and the start of the epoch after that one (the log end for the
    /// newest). `UNDEFINED` when the log knows no epoch at or below it.
    pub fn end_offset_for(&self, epoch: i32, log_end: i64) -> (i32, i64) {
        let i = self.entries.partition_point(|e| e.0 <= epoch);
        if i == 0 {
            return UNDEFINED;
        }
        let found = self.entries[i - 1].0;
        let end = self.entries.get(i).map_or(log_end, |next| next.1);
        (found, end)
    }

    /// OffsetsForLeaderEpoch's answer for `epoch` from a log at leader epoch `current` spanning
    /// `log_start..log_end`, by Kafka's rules (`LeaderEpochFileCache.endOffsetFor`): an epoch
    /// past the current one, or -1 (a follower with no epochs), has no end here. An epoch older
    /// than every one the log knows ends where the oldest it knows begins: that follower's log
    /// is none of this one's history from there (its epoch led before an unclean election, or
    /// retention removed it here), so it truncates there rather than keep a tail that was never
    /// this leader's. A log without a cache (a single node's, whose one epoch never changes)
    /// holds only its current epoch, from its start.
    pub fn answer_for(
        &self,
        epoch: i32,
        current: i32,
        (log_start, log_end): (i64, i64),
    ) -> (i32, i64) {
        if epoch > current || epoch == UNDEFINED.0 {
            return UNDEFINED;
        }
        let mut only = LeaderEpochs::default();
        let known = match self.latest() {
            Some(_) => self,
            None => {
                only.assign(current, log_start);
                &only
            }
        };
        match known.entries.first() {
            Some(&(oldest, start)) if epoch < oldest => (epoch, start),
            _ => known.end_offset_for(epoch, log_end),
        }
    }
}

impl LeaderEpochs {
    /// Where a follower whose log ends at `log_end` (committed up to `high_watermark`) cuts
    /// it, given its leader's answer (epoch found, its end) for the follower's newest epoch
    /// (KIP-279), and whether that settles it. The leader's end of that epoch, or the
    /// follower's own end of the older epoch the leader named, whichever is lower. When the
    /// follower lacks the epoch the leader named, its older epoch before the cut may still
    /// diverge from the leader's: it asks again with its newest epoch after the cut (its
    /// newest epoch falls each time, so this ends), as Kafka's fetcher does. A leader that
    /// knows no epoch that old: cut to what this node knows was committed. A log without
    /// epochs (empty, or from before they were kept) is not cut.
    pub fn cut_point(&self, log_end: i64, high_watermark: i64, answer: (i32, i64)) -> (i64, bool) {
        let (Some(latest), Some(first)) = (self.latest(), self.entries.first()) else {
            return (log_end, true);
        };
        if crate::inject::active(crate::inject::Bug::SkipDivergentTruncation) {
            return (log_end, true);
        }
        let (leader_epoch, end_offset) = answer;
        if leader_epoch < 0 || end_offset < 0 {
            return (high_watermark.min(log_end), true);
        }
        if leader_epoch == latest {
            return (end_offset.min(log_end), true);
        }
        let (own_epoch, own_end) = self.end_offset_for(leader_epoch, log_end);
        if own_epoch < 0 {
            // Every epoch this log knows is newer than the leader's: none of it is the
            // leader's history.
            return (end_offset.min(first.1).min(log_end), true);
        }
        (
            end_offset.min(own_end).min(log_end),
            own_epoch == leader_epoch,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::disk::OsDisk;

    #[test]
    fn end_offsets_follow_kafka_rules() {
        let mut c = LeaderEpochs::default();
        assert_eq!(c.end_offset_for(0, 10), UNDEFINED);
        assert!(c.assign(1, 0));
        assert!(c.assign(3, 40));
        assert!(!c.assign(2, 50), "older epochs are ignored");
        assert_eq!(c.end_offset_for(0, 70), UNDEFINED);
        assert_eq!(c.end_offset_for(1, 70), (1, 40));
        assert_eq!(
            c.end_offset_for(2, 70),
            (1, 40),
            "an unknown epoch maps below"
        );
        assert_eq!(c.end_offset_for(3, 70), (3, 70));
        assert_eq!(c.end_offset_for(9, 70), (3, 70));
    }

    /// Past the current epoch nothing is known; a log without a cache holds its current epoch
    /// from its start.
    #[test]
    fn answers_bound_by_the_current_epoch_and_a_cacheless_log() {
        let empty = LeaderEpochs::default();
        assert_eq!(empty.answer_for(4, 3, (5, 20)), UNDEFINED);
        assert_eq!(empty.answer_for(3, 3, (5, 20)), (3, 20));
        assert_eq!(
            empty.answer_for(2, 3, (5, 20)),
            (2, 5),
            "older: its log's start"
        );
        assert_eq!(
            empty.answer_for(-1, 3, (5, 20)),
            UNDEFINED,
            "a follower with no epoch"
        );
        let mut c = LeaderEpochs::default();
        c.assign(1, 10);
        c.assign(3, 40);
        assert_eq!(c.answer_for(2, 3, (0, 50)), (1, 40));
        assert_eq!(c.answer_for(5, 3, (0, 50)), UNDEFINED);
        assert_eq!(
            c.answer_for(0, 3, (0, 50)),
            (0, 10),
            "older than any: the oldest's start"
        );
    }

    /// The simulator's seed 229856: after an unclean election the new leader's history starts
    /// at epoch 4 from 0; a follower whose log holds epoch 0's 0..4 asks about epoch 0 and
    /// must cut all of it (Kafka answers (0, 0)), not keep it (UNDEFINED would cut it to its
    /// high watermark, 4, leaving records the leader never had below the follower's end).
    #[test]
    fn a_follower_whose_epoch_the_leader_never_had_cuts_to_the_leaders_oldest() {
        let mut leader = LeaderEpochs::default();
        leader.assign(4, 0);
        let answer = leader.answer_for(0, 4, (0, 6));
        assert_eq!(answer, (0, 0));
        let mut follower = LeaderEpochs::default();
        follower.assign(0, 0);
        assert_eq!(follower.cut_point(4, 4, answer), (0, true));
    }

    #[test]
    fn a_follower_lacking_the_leaders_epoch_cuts_in_steps() {
        // The follower led epoch 1 as a zombie at 43 (never committed), then followed epoch
        // 3 from 44; the leader's history has epoch 2 from 43 to 48. Asked about epoch 3, the
        // leader answers (2, 48): the follower cuts epoch 3 away but must ask again about
        // epoch 1, whose tail at 43 the leader never had.
        let mut c = LeaderEpochs::default();
        c.assign(0, 0);
        c.assign(1, 43);
        c.assign(3, 44);
        assert_eq!(c.cut_point(50, 40, (2, 48)), (44, false));
        assert!(c.truncate_from(44));
        assert_eq!(c.latest(), Some(1));
        // Asked about epoch 1, the leader (which has 0 up to 43) answers (0, 43).
        assert_eq!(c.cut_point(44, 40, (0, 43)), (43, true));
        // A leader that knows the follower's newest epoch settles it at once.
        assert_eq!(c.cut_point(44, 40, (1, 44)), (44, true));
        // A leader knowing no epoch that old: cut to the committed offset.
        assert_eq!(c.cut_point(44, 40, (-1, -1)), (40, true));
    }

    #[test]
    fn truncation_drops_later_epochs_and_overlaps() {
        let mut c = LeaderEpochs::default();
        c.assign(1, 0);
        c.assign(2, 10);
        c.assign(4, 20);
        assert!(c.truncate_from(15));
        assert_eq!(c.latest(), Some(2));
        // A newer epoch starting below the newest's start replaces it.
        c.assign(5, 5);
        assert_eq!(c.entries, vec![(1, 0), (5, 5)]);
    }

    #[test]
    fn saved_caches_load_less_entries_past_the_log_end() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = LeaderEpochs::default();
        c.assign(0, 0);
        c.assign(2, 100);
        c.assign(3, 200);
        c.save(&OsDisk::default(), dir.path()).unwrap();
        let load = |log_end| LeaderEpochs::load(&OsDisk::default(), dir.path(), log_end).unwrap();
        assert_eq!(load(500), c);
        let cut = load(150);
        assert_eq!(cut.entries, vec![(0, 0), (2, 100)]);
        // The cut is in the file too: once the log grows past 200 again, epoch 3 stays gone.
        assert_eq!(load(500).entries, vec![(0, 0), (2, 100)]);
        std::fs::write(dir.path().join(FILE), "garbage\n1 x\n").unwrap();
        assert_eq!(load(10), LeaderEpochs::default());
    }
}
