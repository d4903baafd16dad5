//! Feature levels (KIP-584, KIP-778): the cluster-wide `metadata.version`, and which on-disk
//! and on-wire formats each level writes (pure).
//!
//! A Sluice binary supports a range of levels and writes the formats of the level its
//! cluster finalised, not the newest it knows: a new binary beside older ones (a rolling
//! upgrade) writes what they read, and is replaced by an older one again (a downgrade) until
//! the operator finalises the new level (UpdateFeatures, `controller::features`). Every format
//! change from level 2 on names its level here.
//!
//! | level | release | what it adds |
//! |---|---|---|
//! | 1 | 0.1 | catalog format 5, metadata entries of format 1 (no level recorded) |
//! | 2 | 0.2 | catalog format 6 (the level, partition epochs); partition epochs in AlterPartition |

/// The feature's name, as Kafka names it.
pub const METADATA_VERSION: &str = "metadata.version";
/// The lowest level this Sluice runs at: what Sluice 0.1 wrote, before levels existed (a
/// catalog that records none is at this level).
pub const MIN_METADATA_VERSION: i16 = 1;
/// The highest level this Sluice runs at; a new cluster starts here.
pub const MAX_METADATA_VERSION: i16 = 2;
/// From this level: the catalog records its level and every partition's epoch (format 6), and
/// a leader's in-sync set change carries the partition epoch it was computed from.
pub const PARTITION_EPOCHS: i16 = 2;

/// The level a catalog's recorded `metadata_version` means (0: none recorded, level 1).
pub fn level(recorded: i16) -> i16 {
    recorded.max(MIN_METADATA_VERSION)
}

/// Whether this Sluice runs at `level`.
pub fn supported(level: i16) -> bool {
    (MIN_METADATA_VERSION..=MAX_METADATA_VERSION).contains(&level)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_a_range_this_sluice_runs_at() {
        assert_eq!(level(0), 1, "a catalog of 0.1 records no level");
        assert_eq!(level(2), 2);
        assert!(supported(MIN_METADATA_VERSION) && supported(MAX_METADATA_VERSION));
        assert!(!supported(0) && !supported(MAX_METADATA_VERSION + 1));
        assert!(supported(PARTITION_EPOCHS));
    }
}
