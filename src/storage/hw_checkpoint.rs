//! A replicated partition's high watermark, checkpointed next to its segments (Kafka's
//! replication-offset-checkpoint), so that a restart does not count the recovered log end as
//! committed: in a cluster, a tail this node wrote may never have reached the other in-sync
//! replicas, and a consumer must not read it before they have it.
//!
//! Written every few seconds and at clean close, by rename without fsync: a stale or lost
//! checkpoint only makes the restarted high watermark lower (the log start at worst), which
//! the followers' next fetches move up again. A restart takes only its offset and places it
//! in the log as it is then (`PartitionLog::restart_high_watermark`): the byte position kept
//! beside it may name bytes a truncation and a rewrite of the tail have since replaced.

use super::disk::Disk;
use super::positions::LogPosition;
use std::path::Path;

const FILE: &str = "high-watermark-checkpoint";

/// The checkpoint in `dir`, if there is a readable one.
pub fn read(disk: &dyn Disk, dir: &Path) -> Option<LogPosition> {
    let raw = disk.read(&dir.join(FILE)).ok()??;
    let text = String::from_utf8(raw).ok()?;
    let mut parts = text.split_whitespace().map(str::parse::<i64>);
    let (Some(Ok(offset)), Some(Ok(segment_base)), Some(Ok(position))) =
        (parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    Some(LogPosition {
        offset,
        segment_base,
        file_position: u64::try_from(position).ok()?,
    })
}

/// Replaces the checkpoint (write, rename; see the module doc for why no fsync).
pub fn write(disk: &dyn Disk, dir: &Path, hw: LogPosition) -> std::io::Result<()> {
    let text = format!("{} {} {}\n", hw.offset, hw.segment_base, hw.file_position);
    disk.replace_unsynced(&dir.join(FILE), text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::disk::OsDisk;

    #[test]
    fn checkpoints_round_trip_and_garbage_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let disk = OsDisk::default();
        assert_eq!(read(&disk, dir.path()), None);
        let hw = LogPosition {
            offset: 120,
            segment_base: 100,
            file_position: 4096,
        };
        write(&disk, dir.path(), hw).unwrap();
        assert_eq!(read(&disk, dir.path()), Some(hw));
        std::fs::write(dir.path().join(FILE), "12 x").unwrap();
        assert_eq!(read(&disk, dir.path()), None);
    }
}
