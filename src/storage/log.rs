//! The log of one partition: its segments, offsets and durability state. Owned by one shard and
//! never shared across threads.
//!
//! Offsets and positions: `log_end_offset` (LEO) is the next offset to assign (appends to a
//! partition are serialized by its append lock); the written, synced and committed ends (the
//! high watermark) are kept by `positions.rs`.
//!
//! Invariants, asserted: log start ≤ high watermark ≤ synced ≤ written ≤ LEO, and none of them
//! moves back except by `truncate_to`; offsets are assigned densely from the LEO; a segment's
//! readable range lies within its file.
//!
//! Methods are synchronous planners around the async file I/O done by the caller, so that no
//! `RefCell` borrow is held across an await.

use super::disk::Disk;
use super::epochs::LeaderEpochs;
use super::positions::{LogPosition, LogPositions};
use super::producer_snapshots;
use super::producer_state::{self, ProducerTable, Snapshot};
use super::recovery::{self, CLEAN_MARKER};
use super::segment::{SegmentMeta, MAX_RELATIVE_OFFSET};
use super::segment_file::{SegmentFile, Volume};
use super::txn_index::{self, AbortedTxn};
use crate::protocol::batch::{self, BatchHeader};
use bytes::Bytes;
use glommio::io::{BufferedFile, OpenOptions};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// The file in a partition's directory that names its topic's id.
pub const TOPIC_ID_FILE: &str = ".topic_id";

/// Settings a log takes from its topic's configuration.
#[derive(Debug, Clone)]
pub struct LogSettings {
    pub segment_bytes: u64,
    pub segment_ms: u64,
    pub index_interval_bytes: u32,
    pub log_append_time: bool,
}

pub struct Segment {
    pub meta: SegmentMeta,
    pub file: Rc<SegmentFile>,
}

impl Segment {
    fn new(meta: SegmentMeta, file: SegmentFile) -> Segment {
        Segment {
            meta,
            file: Rc::new(file),
        }
    }

    fn plan(&self, position: u64, readable: u64) -> ReadPlan {
        ReadPlan {
            file: self.file.clone(),
            segment_base: self.meta.base_offset,
            position,
            readable,
        }
    }
}

pub struct PartitionLog {
    /// Where the files are: the operating system's, or the simulator's disk.
    volume: Volume,
    pub dir: PathBuf,
    pub settings: LogSettings,
    pub segments: Vec<Segment>,
    pub log_start_offset: i64,
    pub leader_epoch: i32,
    /// The written, synced and committed ends (`positions.rs`).
    positions: LogPositions,
    /// Set after a failed sync, or a failed write that could not be undone: the partition refuses
    /// work until a restart recovers it. After a failed fdatasync the kernel may have dropped the
    /// dirty pages, so no later sync could prove them durable.
    pub failed: bool,
    /// Idempotent producers' sequence state, rebuilt on open from the snapshot and the log tail.
    pub producers: ProducerTable,
    /// Compaction has cleaned the segments below this offset (in memory: after a restart the
    /// whole log counts as dirty once).
    pub cleaned_to: i64,
    /// Where each leader epoch's records begin (replication's truncation; `epochs.rs`).
    pub epochs: LeaderEpochs,
    /// The aborted transactions whose markers the log holds, in marker order (`txn_index.rs`):
    /// what a read_committed fetch names so that the client drops their records.
    pub aborted: Vec<AbortedTxn>,
}

/// An append planned by `prepare_append`: the caller writes `data` at `position` of `file`.
pub struct AppendPlan {
    pub file: Rc<SegmentFile>,
    pub position: u64,
    /// The batches as the producer sent them, still in the request's buffer.
    records: Bytes,
    /// Each batch's header with the broker-owned fields rewritten; the bytes after it are
    /// written straight from `records`.
    heads: Vec<[u8; batch::HEADER_BYTES]>,
    pub base_offset: i64,
    pub end_offset: i64,
    pub log_append_time_ms: i64,
    /// Where the log ends once the batches are written.
    pub end: LogPosition,
    /// The abort markers among the batches, as index entries: synced before the batches are
    /// written (see `txn_index.rs`).
    aborted: Vec<AbortedTxn>,
    /// When it was planned (producer state's last update; an undo's rebuild).
    now_ms: u64,
}

/// Where a truncation cuts (`PartitionLog::cut_plan`).
struct Cut {
    /// The later segments, out of the list, whose files go.
    doomed: Vec<i64>,
    /// The kept segment's file, and the bytes of it to look in for the first batch to cut.
    file: Rc<SegmentFile>,
    from: u64,
    size: u64,
}

/// The broker-owned header fields a leader's append writes into each batch.
#[derive(Clone, Copy)]
struct Stamp {
    leader_epoch: i32,
    append_time: Option<i64>,
}

/// Work for the flusher: sync these files, then call `complete_sync(target)`. The bytes
/// between `from` (where the previous work ended) and `target` are new since then.
pub struct SyncWork {
    pub files: Vec<Rc<SegmentFile>>,
    pub from: LogPosition,
    pub target: LogPosition,
}

/// What a read covers: bytes `[position, position+len)` of `file`, of which whole batches from
/// `start_offset` on are returned.
pub struct ReadPlan {
    pub file: Rc<SegmentFile>,
    /// The segment the range lies in.
    pub segment_base: i64,
    pub position: u64,
    /// Bytes readable from `position`: to the end of the segment or the high watermark.
    pub readable: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadError {
    OffsetOutOfRange,
}

/// Writes a plan's batches, each as its rewritten header then the rest of it from the request's
/// buffer: no copy of record bytes in user space (`SegmentFile::write_at`).
fn write_batches(plan: &AppendPlan) -> std::io::Result<()> {
    let mut pieces: Vec<&[u8]> = Vec::with_capacity(plan.heads.len() * 2);
    let mut at = 0;
    for head in &plan.heads {
        let size = batch::peek_size(head).expect("a validated header");
        pieces.push(head);
        // Only non-empty pieces (a writer skips a piece once wholly written).
        if size > batch::HEADER_BYTES {
            pieces.push(&plan.records[at + batch::HEADER_BYTES..at + size]);
        }
        at += size;
    }
    plan.file.write_at(plan.position, &pieces)
}

impl PartitionLog {
    /// Opens (recovering if needed) or creates the log in `dir`.
    pub async fn open(
        (volume, dir): (Volume, PathBuf),
        settings: LogSettings,
        leader_epoch: i32,
        now_ms: u64,
    ) -> std::io::Result<PartitionLog> {
        let disk = volume.disk();
        disk.create_dir_all(&dir)?;
        let segments = Self::recover_segments(&volume, &dir, &settings, now_ms).await?;
        let last = &segments.last().expect("at least one segment").meta;
        let high_watermark = LogPosition {
            offset: last.next_offset,
            segment_base: last.base_offset,
            file_position: last.size_bytes,
        };
        // DeleteRecords may have moved the start inside the first segment (see retention.rs).
        let log_start_offset = super::retention::read_log_start(&*disk, &dir)
            .unwrap_or(i64::MIN)
            .clamp(segments[0].meta.base_offset, high_watermark.offset);
        let sources = producer_sources(&*disk, &dir, &segments, high_watermark.offset);
        let producers = rebuild_producers(sources, high_watermark.offset, now_ms).await?;
        let epochs = LeaderEpochs::load(&*disk, &dir, high_watermark.offset)?;
        let bases: Vec<i64> = segments.iter().map(|s| s.meta.base_offset).collect();
        let span = (log_start_offset, high_watermark.offset);
        let aborted = recovery::load_aborted(&*disk, &dir, &bases, span)?;
        Ok(PartitionLog {
            volume,
            dir,
            settings,
            segments,
            log_start_offset,
            leader_epoch,
            positions: LogPositions::at(high_watermark),
            failed: false,
            producers,
            cleaned_to: log_start_offset,
            epochs,
            aborted,
        })
    }

    /// The segments recovery leaves in `dir` (one empty segment for a new log), open, with
    /// what lies past the recovered end gone and the whole made durable.
    async fn recover_segments(
        volume: &Volume,
        dir: &Path,
        settings: &LogSettings,
        now_ms: u64,
    ) -> std::io::Result<Vec<Segment>> {
        let interval = settings.index_interval_bytes;
        let disk = volume.disk();
        let recovered = recovery::recover(&*disk, dir, interval, now_ms)?;
        if recovered.truncated_bytes > 0 {
            let cut = recovered.truncated_bytes;
            log::warn!(
                "partition {}: recovery truncated {cut} bytes",
                dir.display()
            );
        }
        let mut metas = recovered.segments;
        if metas.is_empty() {
            metas.push(SegmentMeta::new(0, now_ms));
        }
        let recovered_end = metas.last().expect("at least one segment").next_offset;
        let mut segments = Vec::with_capacity(metas.len());
        for meta in metas {
            let path = SegmentMeta::log_path(dir, meta.base_offset);
            segments.push(Segment::new(meta, volume.open_segment(&path).await?));
        }
        // A roll's producer snapshot is durable before the closed segment's tail: past the
        // recovered end, it describes records a crash lost, and must be gone (durably: the
        // directory sync below) before the log grows past its offset again.
        producer_snapshots::remove_above(&*disk, dir, recovered_end)?;
        volume.sync_dir(dir).await?;
        // After recovery everything on disk is whole; make it durable before calling it so.
        let last = &segments.last().expect("at least one segment").file;
        last.fdatasync().await?;
        Ok(segments)
    }

    pub fn log_end_offset(&self) -> i64 {
        self.active().meta.next_offset
    }

    pub fn high_watermark(&self) -> i64 {
        self.positions.high_watermark().offset
    }

    /// After a restart of a replicated log: the high watermark goes back from the recovered
    /// log end to the checkpoint's offset when that lies within this log, else to the log
    /// start when that begins a segment (see `hw_checkpoint.rs`). Only the checkpoint's
    /// offset counts: its place is looked up again in the log as it is now
    /// (`committed_position`), since a checkpoint taken before a truncation and a rewrite of
    /// the tail (an unclean election) names bytes that now hold other batches. Called before
    /// the log serves anything.
    pub async fn restart_high_watermark(
        log: &std::cell::RefCell<PartitionLog>,
        checkpoint: Option<i64>,
    ) -> std::io::Result<()> {
        let within = {
            let l = log.borrow();
            checkpoint.filter(|&o| o >= l.log_start_offset && o <= l.high_watermark())
        };
        let found = match within {
            Some(offset) => Some(Self::committed_position(log, offset).await?),
            None => None,
        };
        let mut l = log.borrow_mut();
        let first = &l.segments[0].meta;
        let start = (l.log_start_offset == first.base_offset).then_some(LogPosition {
            offset: first.base_offset,
            segment_base: first.base_offset,
            file_position: 0,
        });
        if let Some(hw) = found.or(start) {
            l.positions.restart_high_watermark(hw);
        }
        Ok(())
    }

    /// The place of a high watermark at most `offset` (within the log): the start of the
    /// batch holding `offset`, with that batch's base as the offset when `offset` lies inside
    /// it (a high watermark sits between batches), found through the offset index.
    async fn committed_position(
        log: &std::cell::RefCell<PartitionLog>,
        offset: i64,
    ) -> std::io::Result<LogPosition> {
        let (file, from, size, segment_base) = {
            let l = log.borrow();
            if offset == l.log_end_offset() {
                return Ok(l.positions.written());
            }
            let i = l.segments.partition_point(|s| s.meta.base_offset <= offset) - 1;
            let meta = &l.segments[i].meta;
            let (_, indexed) = meta.offset_index.lookup((offset - meta.base_offset) as u32);
            let file = l.segments[i].file.clone();
            (file, indexed as u64, meta.size_bytes, meta.base_offset)
        };
        let at = first_batch_reaching(&file, from, size, offset).await?;
        let base = match at < size {
            true => file.read_header(at).await?.base_offset.min(offset),
            false => offset,
        };
        Ok(LogPosition {
            offset: base,
            segment_base,
            file_position: at,
        })
    }

    /// The high watermark with its place in the log: the bound of consumers' reads.
    pub fn hw_position(&self) -> LogPosition {
        self.positions.high_watermark()
    }

    /// Where the last completed fdatasync left the log: the most a commit rule may commit.
    pub fn synced(&self) -> LogPosition {
        self.positions.synced()
    }

    /// Bytes of every segment on disk (DescribeLogDirs' partition size).
    pub fn size_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.meta.size_bytes).sum()
    }

    /// Bytes of the log from `offset` to the written end (a follower's lag): exact in the
    /// segments after `offset`'s, within an index interval in its own.
    pub fn bytes_after(&self, offset: i64) -> u64 {
        let i = self
            .segments
            .partition_point(|s| s.meta.base_offset <= offset)
            .max(1)
            - 1;
        let s = &self.segments[i];
        let relative = (offset - s.meta.base_offset).clamp(0, u32::MAX as i64) as u32;
        let (_, position) = s.meta.offset_index.lookup(relative);
        let rest: u64 = self.segments[i + 1..]
            .iter()
            .map(|s| s.meta.size_bytes)
            .sum();
        s.meta.size_bytes.saturating_sub(position as u64) + rest
    }

    /// The end of the bytes whose write has completed: what followers may fetch.
    pub fn written(&self) -> LogPosition {
        self.positions.written()
    }

    /// Moves the high watermark as far towards `offset`, which a commit rule computed, as the
    /// log's batch ends and synced end allow (`LogPositions::commit_up_to`).
    pub fn commit_up_to(&mut self, offset: i64) -> Option<i64> {
        self.positions.commit_up_to(offset)
    }

    /// Where the log's files are.
    pub fn volume(&self) -> &Volume {
        &self.volume
    }

    /// The small files' disk and the log's directory, taken before an await.
    fn disk_and_dir(&self) -> (Rc<dyn Disk>, PathBuf) {
        (self.volume.disk(), self.dir.clone())
    }

    fn active(&self) -> &Segment {
        self.segments
            .last()
            .expect("a log always has an active segment")
    }

    /// Whether appending `len` bytes holding `offsets` offsets at `now_ms` must first roll to a
    /// new segment: for size, for age, or (as Kafka does) because the last offset would sit more
    /// than i32::MAX past the segment's base, which its indexes cannot express.
    pub fn needs_roll(&self, len: u64, offsets: i64, now_ms: u64) -> bool {
        let meta = &self.active().meta;
        !meta.is_empty()
            && (meta.size_bytes + len > self.settings.segment_bytes
                || now_ms.saturating_sub(meta.created_ms) >= self.settings.segment_ms
                || meta.next_offset + offsets - meta.base_offset > MAX_RELATIVE_OFFSET)
    }

    /// Rolls to a new segment starting at the LEO. Async: syncs the closing segment, writes a
    /// producer-state snapshot as of the new base and the closing segment's indexes, then
    /// creates the new segment's file.
    pub async fn roll(log: &std::cell::RefCell<PartitionLog>, now_ms: u64) -> std::io::Result<()> {
        let (volume, dir, base, closing_base, offset_index, time_index) = {
            let l = log.borrow();
            let m = &l.active().meta;
            (
                l.volume.clone(),
                l.dir.clone(),
                l.log_end_offset(),
                m.base_offset,
                m.offset_index.to_bytes(),
                m.time_index.to_bytes(),
            )
        };
        // The closing segment's bytes are durable before anything that follows them is: a crash
        // must not keep the next segment (or a snapshot as of its base) after losing this
        // one's tail, a gap in the log that recovery could not tell from compaction's.
        if !crate::inject::active(crate::inject::Bug::RollSkipsClosingSync) {
            let closing = log.borrow().active().file.clone();
            closing.fdatasync().await?;
        }
        let snapshot = Snapshot {
            offset: base,
            producers: log.borrow().producers.to_entries(),
        };
        producer_snapshots::write(&volume, &dir, &snapshot).await?;
        write_indexes(&volume, &dir, closing_base, offset_index, time_index).await?;
        let file = volume
            .open_segment(&SegmentMeta::log_path(&dir, base))
            .await?;
        volume.sync_dir(&dir).await?;
        let mut l = log.borrow_mut();
        assert_eq!(
            l.log_end_offset(),
            base,
            "appends are serialized around a roll"
        );
        l.segments
            .push(Segment::new(SegmentMeta::new(base, now_ms), file));
        log::info!("partition {}: rolled to segment {base}", dir.display());
        Ok(())
    }

    /// Assigns offsets to already-validated batches and plans their write: a copy of each
    /// batch's 61-byte header with the broker-owned fields rewritten, and the rest of each batch
    /// left in the request's buffer (see ARCHITECTURE.md, "copies").
    pub fn prepare_append(
        &mut self,
        records: &Bytes,
        headers: &[BatchHeader],
        now_ms: u64,
    ) -> AppendPlan {
        let append_time = if self.settings.log_append_time {
            Some(now_ms as i64)
        } else {
            None
        };
        let stamp = Stamp {
            leader_epoch: self.leader_epoch,
            append_time,
        };
        self.plan_batches(records, headers, Some(stamp), now_ms)
    }

    /// Plans the write of batches a follower fetched from its leader: kept exactly as the
    /// leader wrote them (offsets, epochs, CRCs). The caller checked that they begin at the
    /// log end and are dense.
    pub fn prepare_replica_append(
        &mut self,
        records: &Bytes,
        headers: &[BatchHeader],
        now_ms: u64,
    ) -> AppendPlan {
        assert_eq!(
            headers.first().map(|h| h.base_offset),
            Some(self.log_end_offset()),
            "replicated batches begin at the log end"
        );
        self.plan_batches(records, headers, None, now_ms)
    }

    /// Plans a write of `headers`' batches at the log end; with a stamp, each gets the next
    /// offsets, the leader epoch and (LogAppendTime) the time in its header copy.
    fn plan_batches(
        &mut self,
        records: &Bytes,
        headers: &[BatchHeader],
        stamp: Option<Stamp>,
        now_ms: u64,
    ) -> AppendPlan {
        let interval = self.settings.index_interval_bytes;
        let base_offset = self.log_end_offset();
        let segment = self.segments.last_mut().expect("active segment");
        let (segment_base, position) = (segment.meta.base_offset, segment.meta.size_bytes);
        let mut at = 0usize;
        let mut next = base_offset;
        let mut heads = Vec::with_capacity(headers.len());
        let mut aborted = Vec::new();
        for h in headers {
            let (head, assigned) = assign(&records[at..at + h.size_bytes], h, next, stamp);
            assert_eq!(assigned.base_offset, next, "batches are dense");
            heads.push(head);
            segment
                .meta
                .note_batch(&assigned, position + at as u64, interval);
            let marker = assigned
                .is_control()
                .then(|| txn_index::Marker::of(&records[at..at + h.size_bytes]));
            let producers = &mut self.producers;
            aborted.extend(txn_index::record(
                producers,
                &assigned,
                marker,
                now_ms as i64,
            ));
            next = assigned.next_offset();
            at += h.size_bytes;
            self.positions.note_batch_end(LogPosition {
                offset: next,
                segment_base,
                file_position: position + at as u64,
            });
        }
        assert_eq!(at, records.len(), "the headers cover the records exactly");
        assert!(
            next > base_offset,
            "offsets move forward: {base_offset} → {next}"
        );
        let end = LogPosition {
            offset: next,
            segment_base,
            file_position: segment.meta.size_bytes,
        };
        AppendPlan {
            file: segment.file.clone(),
            position,
            records: records.clone(),
            heads,
            base_offset,
            end_offset: next,
            log_append_time_ms: stamp.and_then(|s| s.append_time).unwrap_or(-1),
            end,
            aborted,
            now_ms,
        }
    }

    /// Writes an append planned by `prepare_append` and makes it the next sync's work. If the
    /// write fails (ENOSPC, EIO), the append is undone: the LEO, indexes and producer state go
    /// back to where they were, so the partition keeps serving and a later append can succeed
    /// once the disk has room again. Only if the undo fails too is the partition marked failed.
    /// The caller holds the partition's append lock.
    pub async fn write(
        log: &std::cell::RefCell<PartitionLog>,
        plan: AppendPlan,
    ) -> std::io::Result<()> {
        // Most appends end no transaction: nothing to index, and no disk handle taken.
        let index = (!plan.aborted.is_empty()).then(|| log.borrow().disk_and_dir());
        let indexed = index.as_ref().map_or(Ok(()), |(disk, dir)| {
            let mut entries = plan.aborted.iter();
            entries.try_for_each(|e| txn_index::append_synced(&**disk, dir, e))
        });
        let error = match indexed.and_then(|()| write_batches(&plan)) {
            Ok(()) => {
                let mut l = log.borrow_mut();
                l.positions.wrote(plan.base_offset, plan.end);
                l.aborted.extend_from_slice(&plan.aborted);
                return Ok(());
            }
            Err(e) => e,
        };
        if let Some((disk, dir)) = index {
            // Entries synced for markers that were not written must not outlive them.
            let kept = log.borrow().aborted.clone();
            if let Err(e) = txn_index::rewrite(&*disk, &dir, &kept) {
                log::error!("{}: cannot rewrite {}: {e}", dir.display(), txn_index::FILE);
            }
        }
        // The epoch cache stays as it is: the append did not change it, and a leader's entry
        // for its own epoch may begin right here (the bug the simulator found: an undone
        // first append of a new leader took that entry away, and a follower then kept a
        // divergent tail).
        let undone = match crate::inject::active(crate::inject::Bug::UndoDropsEpochStart) {
            true => PartitionLog::truncate_to(log, plan.base_offset, plan.now_ms).await,
            false => PartitionLog::cut_tail(log, plan.base_offset, plan.now_ms)
                .await
                .map(drop),
        };
        if let Err(undo) = undone {
            log::error!(
                "partition {}: cannot undo a failed append ({undo}); offline until restart",
                log.borrow().dir.display()
            );
            log.borrow_mut().failed = true;
        }
        Err(error)
    }

    /// What the flusher must sync to cover everything written so far; None when clean.
    pub fn take_sync_work(&mut self) -> Option<SyncWork> {
        if self.failed {
            return None;
        }
        let (from, target) = self.positions.take_sync()?;
        // The bytes before `from` are earlier work's: this work's are in the segment `from`
        // lies in and every later one. (A roll synced the closed ones already; naming them
        // keeps the work's files covering its bytes, which the shard journal relies on.)
        let first = self
            .segments
            .partition_point(|s| s.meta.base_offset < from.segment_base);
        assert!(
            first < self.segments.len(),
            "sync work from segment {} covers the active segment",
            from.segment_base
        );
        let files = self.segments[first..]
            .iter()
            .map(|s| s.file.clone())
            .collect();
        Some(SyncWork {
            files,
            from,
            target,
        })
    }

    /// Records that the sync covering `target` completed.
    pub fn complete_sync(&mut self, target: LogPosition) {
        self.positions.complete_sync(target);
    }

    /// Moves the high watermark to `to`, which the commit rule chose: at most the synced end,
    /// and never backwards.
    pub fn advance_high_watermark(&mut self, to: LogPosition) {
        self.positions.advance_high_watermark(to);
    }

    /// Plans a read of whole batches holding `offset`, bounded by the high watermark.
    /// Ok(None) means the offset is at the high watermark: nothing to read yet.
    pub fn plan_read(&self, offset: i64) -> Result<Option<ReadPlan>, ReadError> {
        self.plan_read_below(offset, self.positions.high_watermark())
    }

    /// Plans a read of whole batches holding `offset`, bounded by `hw`: the high watermark for
    /// consumers, the written end for followers.
    pub fn plan_read_below(
        &self,
        offset: i64,
        hw: LogPosition,
    ) -> Result<Option<ReadPlan>, ReadError> {
        if offset < self.log_start_offset || offset > hw.offset {
            return Err(ReadError::OffsetOutOfRange);
        }
        if offset == hw.offset {
            return Ok(None);
        }
        let i = self
            .segments
            .partition_point(|s| s.meta.base_offset <= offset)
            - 1;
        let segment = &self.segments[i];
        let end = if segment.meta.base_offset == hw.segment_base {
            hw.file_position
        } else {
            segment.meta.size_bytes
        };
        let relative = (offset - segment.meta.base_offset) as u32;
        let (_, position) = segment.meta.offset_index.lookup(relative);
        // Past the last record a segment holds (compaction can remove a closed segment's tail),
        // or past its readable bytes: the next records are in the first later segment that
        // holds any (compaction may have emptied some).
        if offset >= segment.meta.next_offset || position as u64 >= end {
            return Ok(self.segments[i + 1..]
                .iter()
                .find(|s| next_end(s, &hw) > 0)
                .map(|s| s.plan(0, next_end(s, &hw))));
        }
        assert!(
            end <= segment.meta.size_bytes,
            "readable end {end} past segment {} size {}",
            segment.meta.base_offset,
            segment.meta.size_bytes
        );
        Ok(Some(segment.plan(position as u64, end - position as u64)))
    }

    /// The last batch start at or before byte `limit` of the segment at `segment_base` that the
    /// offset index knows; 0 (the segment's first batch) if none, or if the segment is gone.
    pub fn batch_start_at_or_before(&self, segment_base: i64, limit: u64) -> u64 {
        let i = self
            .segments
            .partition_point(|s| s.meta.base_offset < segment_base);
        match self.segments.get(i) {
            Some(s) if s.meta.base_offset == segment_base => s
                .meta
                .offset_index
                .batch_start_at_or_before(limit.min(u32::MAX as u64) as u32)
                as u64,
            _ => 0,
        }
    }

    /// The largest record timestamp of the segments holding records below the high watermark
    /// (ListOffsets' MAX_TIMESTAMP, KIP-734); None when there are none.
    pub fn max_timestamp(&self) -> Option<i64> {
        let hw = self.high_watermark();
        self.segments
            .iter()
            .filter(|s| s.meta.base_offset < hw && s.meta.next_offset > s.meta.base_offset)
            .map(|s| s.meta.max_timestamp)
            .max()
    }

    /// The earliest offset whose batch may hold a timestamp >= `timestamp`, and where to start
    /// reading for it; None when every stored record is older.
    pub fn plan_timestamp_lookup(&self, timestamp: i64) -> Option<(ReadPlan, i64)> {
        let hw = self.positions.high_watermark();
        let i = self
            .segments
            .iter()
            .position(|s| s.meta.max_timestamp >= timestamp && s.meta.base_offset < hw.offset)?;
        let segment = &self.segments[i];
        let relative = segment.meta.time_index.lookup(timestamp);
        let (index_rel, position) = segment.meta.offset_index.lookup(relative);
        let end = if segment.meta.base_offset == hw.segment_base {
            hw.file_position
        } else {
            segment.meta.size_bytes
        };
        if position as u64 >= end {
            return None;
        }
        Some((
            segment.plan(position as u64, end - position as u64),
            segment.meta.base_offset + index_rel as i64,
        ))
    }

    /// Puts `cleaned`, a compacted copy of the closed segment at `base` (already synced), in that
    /// segment's place, with `meta` its bookkeeping. Returns false, and removes the copy, if the
    /// segment is no longer there as it was read (retention deleted it meanwhile). The caller
    /// holds the partition's append lock.
    ///
    /// Crash-safe at every step: the old index files go first (a segment without them is
    /// re-indexed by recovery), then the rename swaps the data atomically, then the new index
    /// files are written. Readers holding the old file keep reading the old data.
    pub async fn replace_segment(
        log: &std::cell::RefCell<PartitionLog>,
        old_size_bytes: u64,
        cleaned: &Path,
        meta: SegmentMeta,
        aborts_removed: &[i64],
    ) -> std::io::Result<bool> {
        let base = meta.base_offset;
        let (volume, dir, found) = {
            let l = log.borrow();
            let found = l
                .segments
                .iter()
                .position(|s| s.meta.base_offset == base && s.meta.size_bytes == old_size_bytes);
            let found = found.filter(|&i| i + 1 < l.segments.len());
            (l.volume.clone(), l.dir.clone(), found)
        };
        let disk = volume.disk();
        let Some(i) = found else {
            disk.remove(cleaned)?;
            return Ok(false);
        };
        // The abort markers removed take their index entries with them: the index without
        // them is made durable aside first, and replaces the old one once the segment is
        // swapped (recovery finishes or drops it: `txn_index::settle_swaps`).
        let entries = (!aborts_removed.is_empty()).then(|| {
            let l = log.borrow();
            let kept = l
                .aborted
                .iter()
                .filter(|e| !aborts_removed.contains(&e.last_offset));
            kept.copied().collect::<Vec<_>>()
        });
        if let Some(entries) = &entries {
            txn_index::write_next(&*disk, &dir, base, entries)?;
        }
        recovery::remove_indexes(&*disk, &dir, base)?;
        disk.rename(cleaned, &SegmentMeta::log_path(&dir, base))?;
        let file = volume
            .open_segment(&SegmentMeta::log_path(&dir, base))
            .await?;
        let (offset_index, time_index) = (meta.offset_index.to_bytes(), meta.time_index.to_bytes());
        write_indexes(&volume, &dir, base, offset_index, time_index).await?;
        volume.sync_dir(&dir).await?;
        if entries.is_some() {
            txn_index::adopt_next(&*disk, &dir, base)?;
        }
        let mut l = log.borrow_mut();
        assert_eq!(
            l.segments[i].meta.base_offset, base,
            "swaps hold the append lock"
        );
        l.segments[i] = Segment::new(meta, file);
        if let Some(entries) = entries {
            l.aborted = entries;
        }
        Ok(true)
    }

    /// Writes the index files and the clean-shutdown marker, after a final sync. Called once no
    /// more appends can arrive.
    pub async fn close(log: &std::cell::RefCell<PartitionLog>) -> std::io::Result<()> {
        let (volume, dir, files, base, offset_index, time_index, failed) = {
            let l = log.borrow();
            let m = &l.active().meta;
            let files: Vec<_> = l.segments.iter().map(|s| s.file.clone()).collect();
            (
                l.volume.clone(),
                l.dir.clone(),
                files,
                m.base_offset,
                m.offset_index.to_bytes(),
                m.time_index.to_bytes(),
                l.failed,
            )
        };
        for f in &files {
            f.fdatasync().await?;
        }
        if failed {
            return Ok(()); // no marker: the next start recovers fully
        }
        write_indexes(&volume, &dir, base, offset_index, time_index).await?;
        let snapshot = {
            let l = log.borrow();
            Snapshot {
                offset: l.log_end_offset(),
                producers: l.producers.to_entries(),
            }
        };
        producer_snapshots::write(&volume, &dir, &snapshot).await?;
        volume
            .write_file(&dir.join(CLEAN_MARKER), Vec::new())
            .await?;
        volume.sync_dir(&dir).await
    }

    /// Removes every record at or after `offset` (rounded down to the batch holding it), for
    /// replication's divergence handling, and the leader epochs that begin there. Later
    /// segments are deleted; producer state is rebuilt as of the cut (`producer_snapshots`),
    /// at `now_ms`. The caller holds the partition's append lock, so no append interleaves.
    pub async fn truncate_to(
        log: &std::cell::RefCell<PartitionLog>,
        offset: i64,
        now_ms: u64,
    ) -> std::io::Result<()> {
        let Some(end) = Self::cut_tail(log, offset, now_ms).await? else {
            return Ok(());
        };
        let mut l = log.borrow_mut();
        if l.epochs.truncate_from(end) {
            let (disk, dir) = l.disk_and_dir();
            l.epochs.save(&*disk, &dir)?;
        }
        Ok(())
    }

    /// `truncate_to` without the epoch cache: the records from `offset` go, with their
    /// segments, indexes, producer state and aborted-transaction entries. Returns the new log
    /// end, None when nothing lay at or past `offset`.
    async fn cut_tail(
        log: &std::cell::RefCell<PartitionLog>,
        offset: i64,
        now_ms: u64,
    ) -> std::io::Result<Option<i64>> {
        let Some(Cut {
            doomed,
            file: keep_file,
            from,
            size,
        }) = log.borrow_mut().cut_plan(offset)
        else {
            return Ok(None);
        };
        let (disk, dir) = log.borrow().disk_and_dir();
        for base in doomed {
            recovery::remove_segment(&*disk, &dir, base)?;
        }
        let cut = first_batch_reaching(&keep_file, from, size, offset).await?;
        keep_file.truncate(cut).await?;
        keep_file.fdatasync().await?;
        let meta = Self::meta_up_to(log, &keep_file, cut).await?;
        let end = LogPosition {
            offset: meta.next_offset,
            segment_base: meta.base_offset,
            file_position: meta.size_bytes,
        };
        log.borrow_mut().segments.last_mut().expect("segment").meta = meta;
        Self::producers_after_cut(log, end.offset, now_ms).await?;
        let mut guard = log.borrow_mut();
        let l = &mut *guard;
        l.positions.truncated(end);
        let kept = l.aborted.partition_point(|e| e.last_offset < end.offset);
        if kept < l.aborted.len() {
            l.aborted.truncate(kept);
            txn_index::rewrite(&*disk, &dir, &l.aborted)?;
        }
        Ok(Some(end.offset))
    }

    /// Replaces the whole log with an empty one starting at `offset`: a follower's, when its
    /// leader no longer has the records that would continue it (everything here lies below the
    /// leader's log start, Kafka's `truncateFullyAndStartAt`), or an empty log moved back to the
    /// base of the leader's batch holding that start. In an order a crash cannot harm: the log
    /// start first (a crash leaves the old log, all of it below its start, which the follower
    /// replaces again), then the old segments and what describes them, then the new segment.
    /// The caller holds the append lock and has fenced the journal.
    pub async fn restart_at(
        log: &std::cell::RefCell<PartitionLog>,
        offset: i64,
        now_ms: u64,
    ) -> std::io::Result<()> {
        let (volume, dir, bases) = {
            let l = log.borrow();
            let empty = l.log_start_offset == l.log_end_offset();
            assert!(
                l.log_end_offset() < offset || empty,
                "only an empty log, or one wholly below {offset}, restarts there"
            );
            let bases: Vec<i64> = l.segments.iter().map(|s| s.meta.base_offset).collect();
            (l.volume.clone(), l.dir.clone(), bases)
        };
        let disk = volume.disk();
        super::retention::write_log_start(&volume, &dir, offset).await?;
        for base in bases {
            recovery::remove_segment(&*disk, &dir, base)?;
        }
        producer_snapshots::remove_above(&*disk, &dir, i64::MIN)?;
        txn_index::rewrite(&*disk, &dir, &[])?;
        LeaderEpochs::default().save(&*disk, &dir)?;
        let file = volume
            .open_segment(&SegmentMeta::log_path(&dir, offset))
            .await?;
        volume.sync_dir(&dir).await?;
        let segment = Segment::new(SegmentMeta::new(offset, now_ms), file);
        log.borrow_mut().reset_to(segment, offset);
        Ok(())
    }

    /// The bookkeeping of a log that is `segment` alone, empty and starting at `offset`
    /// (`restart_at`). A sync still in flight for the old files completes below every position
    /// here and changes nothing (`complete_sync` keeps the furthest).
    fn reset_to(&mut self, segment: Segment, offset: i64) {
        let start = LogPosition {
            offset,
            segment_base: offset,
            file_position: 0,
        };
        self.segments = vec![segment];
        self.log_start_offset = offset;
        self.positions = LogPositions::at(start);
        self.producers = ProducerTable::default();
        self.cleaned_to = offset;
        self.epochs = LeaderEpochs::default();
        self.aborted.clear();
    }

    /// Where a truncation at `offset` cuts (None: past the log end): the later segments, which
    /// leave the list now and whose files the caller removes; the kept segment's file; and the
    /// bytes of it to look in for the first batch reaching `offset`, from the index entry at or
    /// before it to the end of what was written (undoing a failed append on a full disk must
    /// not read the header that was never written).
    fn cut_plan(&mut self, offset: i64) -> Option<Cut> {
        if offset >= self.log_end_offset() {
            return None;
        }
        let offset = offset.max(self.log_start_offset);
        let keep = self
            .segments
            .partition_point(|s| s.meta.base_offset <= offset)
            .max(1);
        let doomed: Vec<i64> = self
            .segments
            .drain(keep..)
            .map(|s| s.meta.base_offset)
            .collect();
        let seg = self.segments.last().expect("kept a segment");
        let (_, position) = seg
            .meta
            .offset_index
            .lookup((offset - seg.meta.base_offset) as u32);
        let written = self.positions.written();
        let size = match seg.meta.base_offset.cmp(&written.segment_base) {
            std::cmp::Ordering::Less => seg.meta.size_bytes,
            std::cmp::Ordering::Equal => written.file_position.min(seg.meta.size_bytes),
            std::cmp::Ordering::Greater => 0,
        };
        Some(Cut {
            doomed,
            file: seg.file.clone(),
            from: (position as u64).min(size),
            size,
        })
    }

    /// Producer state as a log that never held the cut tail has it: rebuilt from a snapshot at
    /// or below `end` and the batches between. Snapshots past the cut go with it.
    async fn producers_after_cut(
        log: &std::cell::RefCell<PartitionLog>,
        end: i64,
        now_ms: u64,
    ) -> std::io::Result<()> {
        let (disk, dir) = log.borrow().disk_and_dir();
        producer_snapshots::remove_above(&*disk, &dir, end)?;
        if !producer_state::truncation_rebuilds() {
            log.borrow_mut().producers.truncate(end);
            return Ok(());
        }
        let sources = producer_sources(&*disk, &dir, &log.borrow().segments, end);
        let producers = rebuild_producers(sources, end, now_ms).await?;
        let mut l = log.borrow_mut();
        assert_eq!(l.log_end_offset(), end, "no append during a truncation");
        l.producers = producers;
        Ok(())
    }

    /// The kept segment's bookkeeping up to byte `cut`: its indexes as they were at the last
    /// entry before the cut, then the batches after that entry noted again.
    async fn meta_up_to(
        log: &std::cell::RefCell<PartitionLog>,
        file: &SegmentFile,
        cut: u64,
    ) -> std::io::Result<SegmentMeta> {
        let mut meta = log
            .borrow()
            .segments
            .last()
            .expect("segment")
            .meta
            .cut_at(cut);
        let interval = log.borrow().settings.index_interval_bytes;
        let mut at = meta.size_bytes;
        while at < cut {
            let h = file.read_header(at).await?;
            meta.note_batch(&h, at, interval);
            at += h.size_bytes as u64;
        }
        Ok(meta)
    }
}

/// Where the first batch holding an offset at or after `offset` starts, scanning headers from
/// byte `from` (a batch start) up to `size`; `size` if none does.
async fn first_batch_reaching(
    file: &SegmentFile,
    from: u64,
    size: u64,
    offset: i64,
) -> std::io::Result<u64> {
    let mut position = from;
    while position < size {
        let h = file.read_header(position).await?;
        if h.last_offset() >= offset {
            break;
        }
        position += h.size_bytes as u64;
    }
    Ok(position)
}

fn next_end(segment: &Segment, hw: &LogPosition) -> u64 {
    if segment.meta.base_offset == hw.segment_base {
        hw.file_position
    } else {
        segment.meta.size_bytes
    }
}

/// What producer state as of `end` is rebuilt from: the newest snapshot at or below it, and
/// the segments' bytes from the snapshot's offset (the index entry before it) on.
fn producer_sources(
    disk: &dyn Disk,
    dir: &Path,
    segments: &[Segment],
    end: i64,
) -> (Option<Snapshot>, Vec<producer_snapshots::Span>) {
    let snapshot = producer_snapshots::newest_at_or_below(disk, dir, end);
    let from = snapshot.as_ref().map_or(i64::MIN, |s| s.offset);
    let spans = segments
        .iter()
        .filter(|s| s.meta.next_offset > from)
        .map(|s| {
            let m = &s.meta;
            let relative = (from.max(m.base_offset) - m.base_offset) as u32;
            producer_snapshots::Span {
                file: s.file.clone(),
                from_position: m.offset_index.lookup(relative).1 as u64,
                to_position: m.size_bytes,
            }
        })
        .collect();
    (snapshot, spans)
}

/// Producer state as of `end` (`producer_state::rebuild`): the snapshot, then the idempotent
/// batches read back from the log past it.
async fn rebuild_producers(
    (snapshot, spans): (Option<Snapshot>, Vec<producer_snapshots::Span>),
    end: i64,
    now_ms: u64,
) -> std::io::Result<ProducerTable> {
    let from = snapshot.as_ref().map_or(i64::MIN, |s| s.offset);
    let scanned = producer_snapshots::scan(&spans, from).await?;
    Ok(producer_state::rebuild(
        snapshot,
        end,
        &scanned,
        now_ms as i64,
    ))
}

/// Writes the two index files of the segment at `base`, from bytes taken while the log was
/// borrowed (no borrow is held across the writes).
async fn write_indexes(
    volume: &Volume,
    dir: &Path,
    base: i64,
    offset_index: Vec<u8>,
    time_index: Vec<u8>,
) -> std::io::Result<()> {
    let offsets = SegmentMeta::index_path(dir, base);
    volume.write_file(&offsets, offset_index).await?;
    let times = SegmentMeta::time_index_path(dir, base);
    volume.write_file(&times, time_index).await
}

/// Creates (or empties) a file to write from the start.
pub async fn create_file(path: &Path) -> std::io::Result<BufferedFile> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .buffered_open(path)
        .await
        .map_err(std::io::Error::from)
}

/// Writes a whole small file (index, marker) and makes it durable.
pub async fn write_file(path: &Path, data: Vec<u8>) -> std::io::Result<()> {
    let file = create_file(path).await?;
    if !data.is_empty() {
        file.write_at(data, 0).await.map_err(std::io::Error::from)?;
    }
    file.fdatasync().await.map_err(std::io::Error::from)?;
    file.close().await.map_err(std::io::Error::from)
}

/// fdatasyncs `files` concurrently; returns how many.
pub async fn sync_files(files: &[Rc<SegmentFile>]) -> std::io::Result<u64> {
    let syncs = files.iter().map(|f| f.fdatasync());
    for result in futures::future::join_all(syncs).await {
        result?;
    }
    Ok(files.len() as u64)
}

/// Makes new directory entries (segment files) durable.
pub async fn sync_dir(dir: &Path) -> std::io::Result<()> {
    let d = glommio::io::Directory::open(dir)
        .await
        .map_err(std::io::Error::from)?;
    d.sync().await.map_err(std::io::Error::from)?;
    d.close().await.map_err(std::io::Error::from)
}

/// The header batch `bytes` (described by `h`) is written with, and its description: with
/// `stamp`, the leader's offsets from `base_offset` (and LogAppendTime); without, as it came.
fn assign(
    bytes: &[u8],
    h: &BatchHeader,
    base_offset: i64,
    stamp: Option<Stamp>,
) -> ([u8; batch::HEADER_BYTES], BatchHeader) {
    let mut head: [u8; batch::HEADER_BYTES] = bytes[..batch::HEADER_BYTES]
        .try_into()
        .expect("validated batches hold a whole header");
    let mut assigned = *h;
    if let Some(stamp) = stamp {
        let body = &bytes[batch::HEADER_BYTES..];
        batch::assign_header(
            &mut head,
            body,
            base_offset,
            stamp.leader_epoch,
            stamp.append_time,
        );
        assigned.base_offset = base_offset;
        if let Some(ts) = stamp.append_time {
            assigned.max_timestamp = ts;
        }
    }
    (head, assigned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::batch::{self, synthetic};
    use crate::storage::read::{locate_batches, Limit};
    use crate::storage::retention;
    use std::cell::RefCell;

    fn settings(segment_bytes: u64) -> LogSettings {
        LogSettings {
            segment_bytes,
            segment_ms: u64::MAX,
            index_interval_bytes: 256,
            log_append_time: false,
        }
    }

    /// Appends `count`-record batches the way the shard does: roll if needed, plan, write.
    async fn append(log: &RefCell<PartitionLog>, count: i32) -> (i64, i64) {
        let raw = Bytes::from(synthetic(0, count, 40, 1000));
        let headers = batch::validate_all(&raw).unwrap();
        if log.borrow().needs_roll(raw.len() as u64, count as i64, 0) {
            PartitionLog::roll(log, 0).await.unwrap();
        }
        let plan = log.borrow_mut().prepare_append(&raw, &headers, 0);
        let offsets = (plan.base_offset, plan.end_offset);
        PartitionLog::write(log, plan).await.unwrap();
        offsets
    }

    async fn sync(log: &RefCell<PartitionLog>) {
        let work = log.borrow_mut().take_sync_work().unwrap();
        for f in &work.files {
            f.fdatasync().await.unwrap();
        }
        let mut l = log.borrow_mut();
        l.complete_sync(work.target);
        // A lone copy commits what it synced (the commit rule of `partition/commit.rs`).
        let synced = l.synced();
        l.advance_high_watermark(synced);
    }

    async fn read_offsets(log: &RefCell<PartitionLog>, from: i64) -> Vec<i64> {
        let mut out = Vec::new();
        let mut next = from;
        loop {
            let plan = log.borrow().plan_read(next).unwrap();
            let Some(plan) = plan else { return out };
            let boundary = |limit| {
                log.borrow()
                    .batch_start_at_or_before(plan.segment_base, limit)
            };
            let bytes =
                crate::storage::read::read_batches(&plan, next, Limit::bytes(1 << 20), boundary)
                    .await
                    .unwrap();
            // A planned read that returns nothing would never end the loop.
            assert!(!bytes.is_empty(), "a read at {next} returned nothing");
            let mut at = 0;
            while at < bytes.len() {
                let b = &bytes[at..at + batch::peek_size(&bytes[at..]).unwrap()];
                let h = batch::validate(b).unwrap();
                let records = batch::records(b).unwrap();
                out.extend(records.iter().map(|r| r.offset).filter(|&o| o >= next));
                at += h.size_bytes;
                next = h.next_offset();
            }
        }
    }

    /// An empty log of 1 MiB segments.
    async fn open_log(path: std::path::PathBuf) -> RefCell<PartitionLog> {
        RefCell::new(
            PartitionLog::open((Volume::Os, path), settings(1 << 20), 0, 0)
                .await
                .unwrap(),
        )
    }

    /// A log of 2 KiB segments holding 30 batches of 3 records (offsets 0..90), not synced.
    /// The log at `path` with 2 KiB segments (several per `filled_log`), opened or reopened.
    async fn open_small_segments(path: std::path::PathBuf) -> RefCell<PartitionLog> {
        RefCell::new(
            PartitionLog::open((Volume::Os, path), settings(2048), 0, 0)
                .await
                .unwrap(),
        )
    }

    async fn filled_log(path: std::path::PathBuf) -> RefCell<PartitionLog> {
        let log = open_small_segments(path).await;
        for _ in 0..30 {
            append(&log, 3).await;
        }
        log
    }

    fn run<F: std::future::Future<Output = ()> + 'static>(f: impl FnOnce() -> F + Send + 'static) {
        glommio::LocalExecutorBuilder::default()
            .spawn(f)
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn append_sync_read_roll_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        run(move || async move {
            let log = filled_log(path.clone()).await;
            assert_eq!(log.borrow().log_end_offset(), 90);
            assert_eq!(
                log.borrow().high_watermark(),
                0,
                "nothing is readable before a sync"
            );
            assert!(read_offsets(&log, 0).await.is_empty());
            sync(&log).await;
            assert_eq!(log.borrow().high_watermark(), 90);
            assert!(log.borrow().segments.len() >= 3, "2 KiB segments roll");
            assert_eq!(read_offsets(&log, 0).await, (0..90).collect::<Vec<_>>());
            assert_eq!(read_offsets(&log, 44).await, (44..90).collect::<Vec<_>>());
            assert_eq!(
                log.borrow().plan_read(91).err(),
                Some(ReadError::OffsetOutOfRange)
            );
            PartitionLog::close(&log).await.unwrap();
            let reopened = open_small_segments(path).await;
            assert_eq!(reopened.borrow().log_end_offset(), 90);
            assert_eq!(
                read_offsets(&reopened, 31).await,
                (31..90).collect::<Vec<_>>()
            );
        });
    }

    #[test]
    fn a_checkpointed_high_watermark_is_placed_in_the_log_as_it_is_now() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        run(move || async move {
            // A checkpoint at offset 2 over batches of one record each...
            let log = open_log(path.clone()).await;
            for _ in 0..2 {
                append(&log, 1).await;
            }
            sync(&log).await;
            let checkpoint = log.borrow().hw_position();
            assert_eq!(checkpoint.offset, 2);
            // ...then the tail rewritten (an unclean election): offset 2 now lies inside a
            // batch of four records, and the checkpoint's byte position inside that batch.
            PartitionLog::truncate_to(&log, 0, 0).await.unwrap();
            append(&log, 4).await;
            append(&log, 1).await;
            sync(&log).await;
            PartitionLog::close(&log).await.unwrap();
            let log = open_log(path.clone()).await;
            PartitionLog::restart_high_watermark(&log, Some(2))
                .await
                .unwrap();
            let at_start = LogPosition {
                offset: 0,
                segment_base: 0,
                file_position: 0,
            };
            assert_eq!(
                log.borrow().hw_position(),
                at_start,
                "back to the batch's start"
            );
            assert!(read_offsets(&log, 0).await.is_empty());
            // A checkpoint between batches keeps its offset, at that batch boundary.
            let log = open_log(path).await;
            PartitionLog::restart_high_watermark(&log, Some(4))
                .await
                .unwrap();
            assert_eq!(log.borrow().high_watermark(), 4);
            assert_eq!(read_offsets(&log, 0).await, vec![0, 1, 2, 3]);
        });
    }

    #[test]
    fn producer_snapshots_past_the_recovered_end_are_removed_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        run(move || async move {
            let log = open_log(path.clone()).await;
            append(&log, 3).await;
            sync(&log).await;
            drop(log);
            // As if a roll at 100 had written its snapshot and a crash then lost the records.
            let lost = Snapshot {
                offset: 100,
                producers: Vec::new(),
            };
            producer_snapshots::write(&Volume::Os, &path, &lost)
                .await
                .unwrap();
            let _reopened = open_log(path.clone()).await;
            assert!(!producer_snapshots::path(&path, 100).exists());
        });
    }

    #[test]
    fn rolls_by_age() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        run(move || async move {
            let s = LogSettings {
                segment_ms: 10,
                ..settings(1 << 20)
            };
            let log = RefCell::new(
                PartitionLog::open((Volume::Os, path), s, 0, 0)
                    .await
                    .unwrap(),
            );
            append(&log, 1).await;
            assert!(!log.borrow().needs_roll(100, 1, 9));
            assert!(
                log.borrow().needs_roll(100, 1, 10),
                "the segment is 10 ms old"
            );
            PartitionLog::roll(&log, 10).await.unwrap();
            assert_eq!(log.borrow().segments.len(), 2);
            assert!(
                !log.borrow().needs_roll(100, 1, 15),
                "an empty segment never rolls"
            );
        });
    }

    #[test]
    fn rolls_before_offsets_outgrow_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        run(move || async move {
            let log = open_log(path).await;
            append(&log, 3).await;
            let room = MAX_RELATIVE_OFFSET - 3;
            assert!(!log.borrow().needs_roll(100, room, 0));
            assert!(log.borrow().needs_roll(100, room + 1, 0));
        });
    }

    /// The spans a fetch sends: whole batches, the first one whole even past max_bytes when the
    /// limit allows it (else nothing), and
    /// the end found through the index the same as by walking every header.
    #[test]
    fn located_spans_end_at_batch_boundaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        run(move || async move {
            let log = open_log(path).await;
            let mut sizes = Vec::new();
            for i in 0..40 {
                let raw = Bytes::from(synthetic(0, 1 + i % 4, 30 + 7 * i as usize, 1000));
                sizes.push(raw.len() as u64);
                let headers = batch::validate_all(&raw).unwrap();
                let plan = log.borrow_mut().prepare_append(&raw, &headers, 0);
                PartitionLog::write(&log, plan).await.unwrap();
            }
            sync(&log).await;
            let plan = log.borrow().plan_read(0).unwrap().unwrap();
            let boundary = |limit| {
                log.borrow()
                    .batch_start_at_or_before(plan.segment_base, limit)
            };
            let total: u64 = sizes.iter().sum();
            for max_bytes in [1, 100, 257, 600, 1000, 2500, total - 1, total, total + 5] {
                for whole_first_batch in [true, false] {
                    let limit = Limit {
                        max_bytes: max_bytes as usize,
                        whole_first_batch,
                    };
                    let span = locate_batches(&plan, 0, limit, boundary).await.unwrap();
                    // What a header-by-header walk takes: the first batch (only if it fits or
                    // the limit lets it go over), then whole ones that fit.
                    if sizes[0] > max_bytes && !whole_first_batch {
                        assert_eq!(span, None, "max_bytes {max_bytes}");
                        continue;
                    }
                    let mut want = sizes[0];
                    for s in &sizes[1..] {
                        if want + s > max_bytes {
                            break;
                        }
                        want += s;
                    }
                    let span = span.unwrap();
                    assert_eq!(
                        (span.position, span.len),
                        (0, want),
                        "max_bytes {max_bytes}"
                    );
                }
            }
        });
    }

    #[test]
    fn truncate_to_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        run(move || async move {
            let log = filled_log(path.clone()).await;
            sync(&log).await;
            let segments_before = log.borrow().segments.len();
            // Offset 40 sits inside the batch [39, 41]: that whole batch goes.
            PartitionLog::truncate_to(&log, 40, 0).await.unwrap();
            assert_eq!(log.borrow().log_end_offset(), 39);
            assert_eq!(log.borrow().high_watermark(), 39);
            assert!(log.borrow().segments.len() < segments_before);
            assert_eq!(read_offsets(&log, 0).await, (0..39).collect::<Vec<_>>());
            // The log goes on from the cut.
            assert_eq!(append(&log, 2).await, (39, 41));
            sync(&log).await;
            assert_eq!(read_offsets(&log, 35).await, (35..41).collect::<Vec<_>>());
            // And a restart without a clean close recovers the same log.
            drop(log);
            let reopened = open_small_segments(path).await;
            assert_eq!(reopened.borrow().log_end_offset(), 41);
            assert_eq!(
                read_offsets(&reopened, 0).await,
                (0..41).collect::<Vec<_>>()
            );
        });
    }

    /// A follower whose whole log (90 records) lies below its leader's log start restarts empty
    /// there, takes the leader's batches from it, and reopens as it was; an empty log may move
    /// back to the base of the leader's batch that holds the start.
    #[test]
    fn a_log_restarts_empty_at_its_leaders_log_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        run(move || async move {
            let log = filled_log(path.clone()).await;
            sync(&log).await;
            assert_eq!(log.borrow().log_end_offset(), 90);
            PartitionLog::restart_at(&log, 200, 0).await.unwrap();
            {
                let l = log.borrow();
                assert_eq!(
                    (l.log_start_offset, l.log_end_offset(), l.high_watermark()),
                    (200, 200, 200)
                );
                assert_eq!(l.segments.len(), 1);
                assert!(l.producers.is_empty() && l.epochs.latest().is_none());
            }
            // The leader's log start lies inside its batch [198, 201]: back to 198.
            PartitionLog::restart_at(&log, 198, 0).await.unwrap();
            append_replica(&log, Bytes::from(synthetic(198, 4, 40, 1000))).await;
            sync(&log).await;
            assert_eq!(
                read_offsets(&log, 198).await,
                (198..202).collect::<Vec<_>>()
            );
            drop(log);
            let reopened = open_small_segments(path.clone()).await;
            let l = reopened.borrow();
            assert_eq!((l.log_start_offset, l.log_end_offset()), (198, 202));
            assert_eq!(l.segments[0].meta.base_offset, 198);
            let files = std::fs::read_dir(&path).unwrap();
            let logs = files.filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                name.to_string_lossy().ends_with(".log")
            });
            assert_eq!(logs.count(), 1, "the old segments are gone");
        });
    }

    /// A batch of `producer_id`'s transaction at `sequence` (or, with `commit`, its marker),
    /// at `base_offset` in leader epoch `leader_epoch`, as a leader wrote it.
    fn txn_batch(
        base_offset: i64,
        leader_epoch: i32,
        sequence: i32,
        commit: Option<bool>,
    ) -> Bytes {
        use crate::protocol::control;
        let mut b = match commit {
            Some(commit) => control::marker(7, 0, commit, 0, 1000),
            None => control::transactional(&[(None, Some(&b"v"[..])); 3], 7, 0, 1000),
        };
        if commit.is_none() {
            b[53..57].copy_from_slice(&sequence.to_be_bytes());
        }
        b[0..8].copy_from_slice(&base_offset.to_be_bytes());
        b[12..16].copy_from_slice(&leader_epoch.to_be_bytes());
        batch::seal(&mut b);
        Bytes::from(b)
    }

    /// Appends `b` as a follower does (offsets and epochs as the leader wrote them).
    async fn append_replica(log: &RefCell<PartitionLog>, b: Bytes) {
        let headers = batch::validate_all(&b).unwrap();
        if log.borrow().needs_roll(b.len() as u64, 1, 0) {
            PartitionLog::roll(log, 0).await.unwrap();
        }
        let plan = log.borrow_mut().prepare_replica_append(&b, &headers, 0);
        PartitionLog::write(log, plan).await.unwrap();
    }

    /// Producer state without the times of its last updates (which differ between replicas).
    fn producers_of(log: &RefCell<PartitionLog>) -> Vec<producer_state::ProducerEntry> {
        let mut entries = log.borrow().producers.to_entries();
        entries.iter_mut().for_each(|e| e.last_update_ms = 0);
        entries.sort_by_key(|e| e.producer_id);
        entries
    }

    /// The bug the simulator found once replica logs could fill up: a leader whose first
    /// append in its epoch fails (here the abort marker's index entry cannot be written) undoes
    /// it, and keeps the epoch cache's entry for its own epoch, which begins exactly where the
    /// undo cuts. Without it, OffsetsForLeaderEpoch answered the previous epoch's end with
    /// this log's end, and a follower kept a divergent tail.
    #[test]
    fn an_undone_append_keeps_the_leaders_epoch_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        run(move || async move {
            let log = PartitionLog::open((Volume::Os, path.clone()), settings(1 << 20), 0, 0);
            let log = RefCell::new(log.await.unwrap());
            log.borrow_mut().epochs.assign(1, 0);
            append_replica(&log, txn_batch(0, 1, 0, None)).await;
            // This node leads epoch 2 from offset 3, as `ReplicaState::assign` notes it.
            log.borrow_mut().epochs.assign(2, 3);
            log.borrow_mut().leader_epoch = 2;
            std::fs::create_dir(path.join(txn_index::FILE)).unwrap(); // no index can be written
            let marker = txn_batch(0, 0, 0, Some(false));
            let headers = batch::validate_all(&marker).unwrap();
            let plan = log.borrow_mut().prepare_append(&marker, &headers, 0);
            assert!(PartitionLog::write(&log, plan).await.is_err());
            let l = log.borrow();
            assert_eq!(l.log_end_offset(), 3, "the append is undone");
            assert!(!l.failed);
            assert_eq!(
                l.epochs.end_offset_for(1, 3),
                (1, 3),
                "epoch 1 ends where 2 begins"
            );
            assert_eq!(l.epochs.latest(), Some(2));
        });
    }

    /// Issue 36's first bug. A replica that led in epoch 0, wrote a transaction (offsets 0..9
    /// in three batches) and an abort marker at 9 that no other replica got, then was truncated
    /// back to 9 (KIP-279) and took the new leader's abort marker from epoch 1, holds what a
    /// replica that never diverged holds: the same producer state and aborted-transaction
    /// index, so a read_committed fetch through it names the aborted transaction. With a roll
    /// inside the transaction (its snapshot is below the cut) and without (none is); with and
    /// without a clean restart before the truncation (its snapshot, as of the log end, lies
    /// past the cut).
    #[test]
    fn a_truncated_replica_reopens_the_transaction_its_cut_marker_had_closed() {
        for (segment_bytes, restart) in
            [(250, false), (250, true), (1 << 20, false), (1 << 20, true)]
        {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().to_path_buf();
            run(move || async move {
                let open = |name: &str| {
                    let p = path.join(name);
                    async move {
                        let log =
                            PartitionLog::open((Volume::Os, p), settings(segment_bytes), 0, 0)
                                .await;
                        RefCell::new(log.unwrap())
                    }
                };
                let never = open("never").await;
                let diverged = open("diverged").await;
                for log in [&never, &diverged] {
                    for base in [0, 3, 6] {
                        append_replica(log, txn_batch(base, 0, base as i32, None)).await;
                    }
                }
                append_replica(&diverged, txn_batch(9, 0, 0, Some(false))).await;
                let diverged = if restart {
                    PartitionLog::close(&diverged).await.unwrap();
                    open("diverged").await
                } else {
                    diverged
                };
                PartitionLog::truncate_to(&diverged, 9, 0).await.unwrap();
                assert_eq!(
                    diverged.borrow().aborted,
                    Vec::new(),
                    "the cut marker's entry goes"
                );
                assert_eq!(
                    producers_of(&diverged),
                    producers_of(&never),
                    "as of offset 9"
                );
                assert_eq!(diverged.borrow().producers.first_unstable_offset(), Some(0));
                for log in [&never, &diverged] {
                    append_replica(log, txn_batch(9, 1, 0, Some(false))).await;
                }
                assert_eq!(producers_of(&diverged), producers_of(&never));
                let entries = never.borrow().aborted.clone();
                assert_eq!(entries.len(), 1);
                assert_eq!(diverged.borrow().aborted, entries);
                let carried = txn_index::aborted_between(&diverged.borrow().aborted, 0, 10);
                assert_eq!(carried, vec![(7, 0)], "read_committed drops offsets 0..9");
            });
        }
    }

    #[test]
    fn retention_and_delete_records_move_the_log_start() {
        use crate::storage::retention::{AdvanceError, Policy};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        run(move || async move {
            let log = filled_log(path.clone()).await;
            sync(&log).await;
            let bases: Vec<i64> = log
                .borrow()
                .segments
                .iter()
                .map(|s| s.meta.base_offset)
                .collect();
            assert!(bases.len() >= 3, "{bases:?}");
            // Retention drops the oldest segment: its files go, reads below the start fail.
            assert!(retention::delete_oldest(&log, 1, 0).await.unwrap() > 0);
            assert_eq!(log.borrow().log_start_offset, bases[1]);
            assert!(!SegmentMeta::log_path(&path, 0).exists());
            assert!(!SegmentMeta::index_path(&path, 0).exists());
            assert_eq!(
                log.borrow().plan_read(0).err(),
                Some(ReadError::OffsetOutOfRange)
            );
            assert_eq!(
                read_offsets(&log, bases[1]).await,
                (bases[1]..90).collect::<Vec<_>>()
            );
            // DeleteRecords inside the third segment: durable, never backwards, never past the
            // high watermark; the second segment is then wholly below the start.
            let cut = bases[2] + 1;
            let advance = |offset| retention::advance_log_start(&log, offset);
            assert_eq!(advance(cut).await.unwrap(), Ok(cut));
            assert_eq!(advance(cut - 2).await.unwrap(), Ok(cut));
            assert_eq!(
                advance(91).await.unwrap(),
                Err(AdvanceError::OffsetOutOfRange)
            );
            let count = retention::count(&log.borrow(), 0, Policy::LOG_START_ONLY);
            assert_eq!(count, 1);
            retention::delete_oldest(&log, count, 0).await.unwrap();
            assert_eq!(read_offsets(&log, cut).await, (cut..90).collect::<Vec<_>>());
            drop(log);
            let log = open_small_segments(path).await;
            assert_eq!(
                log.borrow().log_start_offset,
                cut,
                "the start survives a restart"
            );
            assert_eq!(log.borrow().segments[0].meta.base_offset, bases[2]);
            // Everything may go: the log rolls and keeps its offsets.
            let all = log.borrow().segments.len();
            retention::delete_oldest(&log, all, 0).await.unwrap();
            assert_eq!(log.borrow().segments.len(), 1);
            assert_eq!(log.borrow().log_start_offset, 90);
            assert_eq!(append(&log, 3).await, (90, 93));
        });
    }

    #[test]
    fn compacted_segments_are_swapped_in_and_reads_skip_their_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        run(move || async move {
            let log = filled_log(path.clone()).await;
            sync(&log).await;
            let (bases, sizes): (Vec<i64>, Vec<u64>) = log
                .borrow()
                .segments
                .iter()
                .map(|s| (s.meta.base_offset, s.meta.size_bytes))
                .unzip();
            assert!(bases.len() >= 3, "{bases:?}");
            // The first segment compacted to nothing; the second to its first batch only.
            let cleaned = path.join("first.cleaned");
            std::fs::write(&cleaned, b"").unwrap();
            let empty = SegmentMeta::new(bases[0], 0);
            assert!(
                PartitionLog::replace_segment(&log, sizes[0], &cleaned, empty, &[])
                    .await
                    .unwrap()
            );
            let second = std::fs::read(SegmentMeta::log_path(&path, bases[1])).unwrap();
            let head = &second[..batch::peek_size(&second).unwrap()];
            let header = batch::validate(head).unwrap();
            let mut meta = SegmentMeta::new(bases[1], 0);
            meta.note_batch(&header, 0, 256);
            let cleaned = path.join("second.cleaned");
            std::fs::write(&cleaned, head).unwrap();
            assert!(
                PartitionLog::replace_segment(&log, sizes[1], &cleaned, meta, &[])
                    .await
                    .unwrap()
            );
            // A segment no longer as it was read is left alone, and the copy removed.
            let stale = path.join("stale.cleaned");
            std::fs::write(&stale, b"").unwrap();
            let m = SegmentMeta::new(bases[1], 0);
            assert!(
                !PartitionLog::replace_segment(&log, sizes[1], &stale, m, &[])
                    .await
                    .unwrap()
            );
            assert!(!stale.exists());
            let kept: Vec<i64> = (header.base_offset..header.next_offset()).collect();
            let want: Vec<i64> = kept.iter().copied().chain(bases[2]..90).collect();
            // From anywhere in a gap, reading goes on at the next record left: past the end of
            // the compacted second segment, that is the third segment.
            assert_eq!(read_offsets(&log, 0).await, want);
            assert_eq!(
                read_offsets(&log, header.next_offset() + 1).await,
                (bases[2]..90).collect::<Vec<_>>()
            );
            // And a restart finds the same log.
            drop(log);
            let log = open_small_segments(path).await;
            assert_eq!(read_offsets(&log, 0).await, want);
        });
    }
}
