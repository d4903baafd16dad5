//! Durable storage: segmented partition logs, their indexes, recovery, and the topic catalog.
//!
//! ## Durability and recovery
//!
//! - Four positions per log, in this order: high watermark (HW) ≤ synced ≤ written ≤ log end
//!   offset (LEO). LEO moves when offsets are assigned, written when the pwritev returns, synced
//!   when an fdatasync covering it completes (of its file, or of the shard journal holding its
//!   bytes), HW when the partition's commit rule says so
//!   (`partition/commit.rs`: alone, at once; replicated, once every in-sync replica synced it).
//!   Only `truncate_to` moves any of them back (a failed write's undo; a follower's divergent
//!   tail).
//! - `partitionLeaderEpoch` is stamped on every stored batch: the controller's leader epoch in a
//!   cluster, `SINGLE_NODE_LEADER_EPOCH` (0) alone; Metadata and ListOffsets report the same.
//! - The shard journal (`storage/journal.rs` has the format and the rules; `partition/journal.rs`
//!   the writer). Why: an fdatasync of a file that grew also writes its inode; overwriting blocks
//!   already written does not (about half the time here, `sluice probe`). So a pass's small
//!   appends, one per partition, go to one preallocated, zero-written file as CRC'd records
//!   (partition directory, topic id, segment, position, bytes) with one fdatasync, and the segment
//!   files are synced later, together. The file is four chunks filled in turn; leaving a chunk
//!   starts the syncs of the segment files its records cover, and the writer enters a chunk again
//!   only once they completed, so its records are no longer needed when overwritten and no pass
//!   waits on a journal's worth of writeback. A partition that changes its files other than by
//!   appending (a follower's truncation, compaction's swap, deleting a replica) first `fence`s:
//!   every covered file synced, the journal voided, under the journal's lock, which each flusher
//!   pass also holds (`Environment::fence_journal`, which counts its fdatasyncs; the power-loss
//!   tests of a cleaning pass over journaled segments and of a truncated tail fail on builds that
//!   skip either fence). At start, before any shard opens a partition, every journal's records are
//!   written back into the segment files that still exist and still belong to the record's topic
//!   (chunks in order), the files synced, the journals voided; recovery then sees whole segments.
//!   `log.journal_bytes` (16 MiB; 0: none) sizes it. A failed journal write or sync sends that
//!   pass's appends, and all later ones, to their own files.
//! - Names: a new file or directory that must outlast a power cut has the directory holding it
//!   fsynced after it is made (POSIX's rule; `storage/disk.rs::create_dir_durably`,
//!   `sync_parent`): the data dir, partition directories, `__meta`, `__raft`, `__journal`, each
//!   segment, index and marker file (`sync_dir` after them), the Raft log and the
//!   aborted-transaction index when first created, and every rename.
//! - A roll syncs the closing segment before it writes anything that follows it (the
//!   producer snapshot as of the new base, the closing indexes, the new segment's name): no
//!   later segment outlives a crash that lost an earlier one's tail, a gap recovery could not
//!   tell from one compaction leaves (found by the simulator once its logs rolled).
//! - Clean close (SIGTERM): sync every file, write the active segment's indexes and a
//!   `.clean_shutdown` marker per partition.
//! - Start-up (`storage/recovery.rs`): with the marker, indexes are trusted and only the bytes
//!   after the last index entry are scanned; without it, the last segment is scanned from its
//!   start. A scan from an index that stops short is redone from the segment's start before
//!   anything is cut, so a bad index file never costs data. Either way every scanned batch is
//!   CRC-checked, and the first torn or corrupt batch is cut off with everything after it (log line
//!   `recovery: … truncating N bytes`). Older segments whose index files are missing or wrong get
//!   them rebuilt.
//! - The catalog is written to a temporary file, synced, renamed over the old one, and the
//!   directory synced. Its file starts with `SLUICAT` and a format version (2: dynamic broker
//!   configs added), so a later layout can be told from damage and migrated, and a newer file is
//!   refused by name; versions 1 and 0 (no header, written before it existed) are read with their
//!   own layout and rewritten as version 2 at the next change. Each partition directory holds its
//!   topic id, so a directory left by a deleted topic is never mistaken for a new topic of the same
//!   name.
//! - Start-up and recovery use blocking std::fs before the shard serves anything; all I/O after
//!   that goes through glommio (io_uring), except deleting a topic's directory, appends (pwritev,
//!   ARCHITECTURE.md, "Copies on the data path") and fetch sends (sendfile).
//! - A write that fails (ENOSPC, EIO) is undone in memory and on disk (the leader epoch cache,
//!   which the append did not change, stays as it was), and answered KAFKA_STORAGE_ERROR; the partition serves again as soon as the disk has room. A failed
//!   fdatasync instead takes the partition offline until restart: the kernel may have dropped the
//!   dirty pages, so no later sync could prove them durable.
pub mod broker_config;
pub mod catalog;
pub mod compaction;
pub mod disk;
pub mod epochs;
pub mod features;
pub mod hw_checkpoint;
pub mod index;
pub mod journal;
pub mod log;
pub mod positions;
pub mod producer_snapshots;
pub mod producer_state;
pub mod read;
pub mod recovery;
pub mod retention;
pub mod security;
pub mod segment;
pub mod segment_file;
pub mod topic_config;
pub mod txn_index;
