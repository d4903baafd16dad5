//! The file-descriptor budget. Every partition holds descriptors (two per open segment), every
//! connection one, and a process past its RLIMIT_NOFILE fails to open a partition (EMFILE) or
//! to accept a client. So at start the soft limit is raised to the hard limit, a reserve is kept
//! for connections and the broker's own files, and the bounds on topics and partitions per shard
//! that the controller enforces are derived from what is left, unless the config sets them.
//!
//! The arithmetic is pure (`derive`) and unit-tested; `apply` reads and raises the limit.

use crate::config::Config;

/// Descriptors a partition is budgeted: its active segment's two (the file and the duplicate
/// fetches send from) and a closed segment's two. Partitions with more segments hold more;
/// `sluice_open_descriptors` shows the truth, and a warning is logged near the limit.
pub const DESCRIPTORS_PER_PARTITION: u64 = 4;
/// Descriptors kept for the broker itself: standard streams, the data dir lock, the metrics
/// listener, catalog and index writes, compaction copies.
pub const RESERVED_DESCRIPTORS: u64 = 256;
/// Descriptors each shard's executor holds: io_uring rings, event and timer descriptors, its
/// listening socket.
pub const DESCRIPTORS_PER_SHARD: u64 = 64;

/// What the budget allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Derived {
    pub partitions_per_shard: usize,
    pub topics: usize,
    /// Descriptors kept for client connections.
    pub connection_reserve: u64,
}

/// The bounds a `limit`-descriptor process can hold with `shards` shards and at most
/// `max_connections` connections. Connections get their full reserve while it leaves at least
/// half the budget to partitions; past that they are cut to half (and the caller warns).
pub fn derive(limit: u64, shards: usize, max_connections: usize) -> Derived {
    let fixed = RESERVED_DESCRIPTORS + DESCRIPTORS_PER_SHARD * shards as u64;
    let usable = limit.saturating_sub(fixed);
    let connection_reserve = (max_connections as u64).min(usable / 2);
    let partitions = (usable - connection_reserve) / DESCRIPTORS_PER_PARTITION;
    // Room for `__consumer_offsets` at least, whatever the limit.
    let per_shard = (partitions / shards.max(1) as u64).max(MIN_PARTITIONS_PER_SHARD as u64);
    Derived {
        partitions_per_shard: per_shard as usize,
        topics: (per_shard as usize).saturating_mul(shards),
        connection_reserve,
    }
}

/// A floor under the derived bound, so that a tiny limit still leaves the internal topic room.
const MIN_PARTITIONS_PER_SHARD: usize = 64;

/// Raises the soft RLIMIT_NOFILE to the hard limit and fills in the bounds the config leaves
/// at 0 (derive). Returns the descriptor limit in force.
pub fn apply(config: &mut Config) -> anyhow::Result<u64> {
    let limit = raise_nofile()?;
    let derived = derive(limit, config.shards, config.max_connections);
    if derived.connection_reserve < config.max_connections as u64 {
        log::warn!(
            "the descriptor limit ({limit}) cannot hold max_connections ({}) and partitions too: {} descriptors kept for connections; raise the hard RLIMIT_NOFILE or lower max_connections",
            config.max_connections,
            derived.connection_reserve
        );
    }
    if config.max_partitions_per_shard == 0 {
        config.max_partitions_per_shard = derived.partitions_per_shard;
    } else if config.max_partitions_per_shard > derived.partitions_per_shard {
        log::warn!(
            "max_partitions_per_shard = {} is above what {limit} descriptors hold ({}): partitions may fail to open with EMFILE",
            config.max_partitions_per_shard,
            derived.partitions_per_shard
        );
    }
    if config.max_topics == 0 {
        config.max_topics = derived.topics;
    }
    log::info!(
        "descriptor limit {limit}: at most {} partitions per shard, {} topics, {} connections",
        config.max_partitions_per_shard,
        config.max_topics,
        config.max_connections
    );
    Ok(limit)
}

/// Sets the soft descriptor limit to the hard one; returns it.
fn raise_nofile() -> anyhow::Result<u64> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit write/read only the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        anyhow::bail!(
            "cannot read RLIMIT_NOFILE: {}",
            std::io::Error::last_os_error()
        );
    }
    if rl.rlim_cur < rl.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: rl.rlim_max,
            rlim_max: rl.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            log::info!(
                "raised the soft descriptor limit from {} to {}",
                rl.rlim_cur,
                rl.rlim_max
            );
            rl.rlim_cur = rl.rlim_max;
        } else {
            log::warn!(
                "cannot raise the soft descriptor limit from {} to {}: {}",
                rl.rlim_cur,
                rl.rlim_max,
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(rl.rlim_cur)
}

/// Descriptors the process holds now (the entries of /proc/self/fd), or None if unreadable.
pub fn open_descriptors() -> Option<u64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_20000_descriptor_limit_splits_between_connections_and_partitions() {
        // This machine: 20,000 descriptors, 2 shards, the default 10,000 connections, which
        // would leave partitions less than half of the 19,616 usable: each side gets 9,808.
        // 5,000 partitions (10,000 descriptors at the least) are over the budget.
        let d = derive(20_000, 2, 10_000);
        assert_eq!(d.connection_reserve, 9_808);
        assert_eq!(d.partitions_per_shard, 9_808 / 4 / 2);
        assert_eq!(d.topics, 2 * (9_808 / 4 / 2));
        let roomy = derive(100_000, 2, 10_000);
        assert_eq!(roomy.connection_reserve, 10_000);
        assert_eq!(roomy.partitions_per_shard, (100_000 - 384 - 10_000) / 4 / 2);
    }

    #[test]
    fn a_small_limit_cuts_the_connection_reserve_and_keeps_a_floor() {
        let d = derive(1024, 4, 10_000);
        assert_eq!(d.connection_reserve, (1024 - 256 - 256) / 2);
        assert_eq!(d.partitions_per_shard, MIN_PARTITIONS_PER_SHARD);
        let huge = derive(1 << 20, 16, 10_000);
        assert!(huge.partitions_per_shard > 15_000);
    }
}
