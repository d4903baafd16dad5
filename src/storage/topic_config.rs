//! Topic configuration: the one table of topic config keys (`KEYS`), and a topic's resolved
//! configuration (`TopicConfig`): the broker's defaults with the topic's overrides applied.
//!
//! Every use of a key goes through the table: CreateTopics and AlterConfigs validate overrides
//! with it (`TopicConfig::resolve`), IncrementalAlterConfigs finds list-valued keys in it,
//! DescribeConfigs reports each key's value, type and read-only flag from it, and the catalog
//! resolves stored overrides with it at start-up. A key not in the table is INVALID_CONFIG.

use crate::config::{LogConfig, TopicDefaults};

/// Kafka's ConfigType, as DescribeConfigs v3+ reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Boolean = 1,
    String = 2,
    Int = 3,
    Short = 4,
    Long = 5,
    Double = 6,
    /// A comma-separated list: IncrementalAlterConfigs may APPEND to it and SUBTRACT from it.
    List = 7,
    /// A Java class name (only broker keys have this type).
    Class = 8,
}

/// One topic config key: its name, type, how an override is checked and applied, and how the
/// effective value reads.
pub struct Key {
    pub name: &'static str,
    pub kind: Kind,
    /// Whether AlterConfigs may change it (DescribeConfigs' `read_only`).
    pub read_only: bool,
    /// Checks `value` and sets it on the config; the error names the key and the rule.
    pub apply: fn(&mut TopicConfig, &str) -> Result<(), String>,
    /// The effective value, as DescribeConfigs reports it.
    pub read: fn(&TopicConfig) -> String,
}

/// The topic key (and dynamic broker default) that allows unclean leader elections.
pub const UNCLEAN_LEADER_ELECTION: &str = "unclean.leader.election.enable";

/// The resolved configuration of a topic: defaults with its overrides applied.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicConfig {
    pub cleanup_policy: String,
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub segment_bytes: u64,
    pub segment_ms: u64,
    pub max_message_bytes: u32,
    pub log_append_time: bool,
    /// Accepted and reported; not enforced until partitions are replicated (a lone copy is
    /// always the whole in-sync set).
    pub min_insync_replicas: i32,
    pub index_interval_bytes: u32,
    /// Compaction cleans a log once this share of its closed bytes is new since the last pass.
    pub min_cleanable_dirty_ratio: f64,
    /// Compaction removes a tombstone once its segment is older than this.
    pub delete_retention_ms: i64,
    /// `compression.type`: `producer` keeps each batch as sent; a codec name (or
    /// `uncompressed`) converts batches in any other codec (see `partition/ingest.rs`).
    pub compression_type: String,
    /// KIP-390: `compression.gzip.level` (-1: the codec's default, 6) and
    /// `compression.zstd.level`, used when the broker compresses; `compression.lz4.level` is
    /// accepted and reported, with no effect (lz4_flex has one level).
    pub gzip_level: i32,
    pub lz4_level: i32,
    pub zstd_level: i32,
    /// Compaction leaves segments younger than this alone.
    pub min_compaction_lag_ms: i64,
    /// Compaction cleans a dirty segment older than this whatever the dirty ratio.
    pub max_compaction_lag_ms: i64,
    /// KIP-937: CreateTime records further before / after the broker's clock are refused.
    pub timestamp_before_max_ms: i64,
    pub timestamp_after_max_ms: i64,
    /// Accepted and reported, and always met: the high watermark never passes a record that
    /// is not on disk, so every record is flushed before any consumer sees it.
    pub flush_messages: i64,
    pub flush_ms: i64,
    /// Accepted and reported, no effect (Kafka 3.x ignores it for the v2 format too).
    pub message_format_version: String,
    /// Accepted and reported, no effect: segments grow as they are written.
    pub preallocate: bool,
    /// Whether the controller may elect a replica that is not in sync when the last in-sync
    /// one is gone (losing what only it held): Kafka's default, false.
    pub unclean_leader_election: bool,
    /// Accepted and reported; no effect until partitions are replicated.
    pub leader_replication_throttled_replicas: String,
    pub follower_replication_throttled_replicas: String,
    /// The keys accepted with no effect (`ACCEPTED`), by name, with their values.
    pub accepted: Vec<(&'static str, String)>,
}

/// An integer config value within `lo..=hi`, or an error naming the key and the range.
pub fn integer(key: &str, value: &str, lo: i64, hi: i64) -> Result<i64, String> {
    match value.trim().parse::<i64>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        _ => Err(format!(
            "invalid value {value:?} for {key}: expected an integer in {lo}..={hi}"
        )),
    }
}

fn one_of<'a>(key: &str, value: &'a str, allowed: &[&str]) -> Result<&'a str, String> {
    if allowed.contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "invalid value {value:?} for {key}: expected one of {allowed:?}"
        ))
    }
}

const CLEANUP_POLICIES: &[&str] = &["delete", "compact", "compact,delete", "delete,compact"];

/// A `Kind::Long` key stored in one i64 field, at least `lo`.
macro_rules! long_key {
    ($name:literal, $field:ident, $lo:expr) => {
        Key {
            name: $name,
            kind: Kind::Long,
            read_only: false,
            apply: |c, v| {
                c.$field = integer($name, v, $lo, i64::MAX)?;
                Ok(())
            },
            read: |c| c.$field.to_string(),
        }
    };
}

/// A `Kind::Int` key stored in one i32 field, within `lo..=hi`.
macro_rules! int_key {
    ($name:literal, $field:ident, $lo:expr, $hi:expr) => {
        Key {
            name: $name,
            kind: Kind::Int,
            read_only: false,
            apply: |c, v| {
                c.$field = integer($name, v, $lo, $hi)? as i32;
                Ok(())
            },
            read: |c| c.$field.to_string(),
        }
    };
}

/// Kafka 4.4's topic keys that have no effect here, with Kafka's defaults: tiered storage
/// (its settings while it is off; `remote.storage.enable=true` is refused, as Kafka refuses it
/// without a remote log manager), index and deletion tuning for files Sluice lays out its own
/// way, and the dead-letter queue of share groups.
const ACCEPTED: &[(&str, &str)] = &[
    ("file.delete.delay.ms", "60000"),
    ("segment.index.bytes", "10485760"),
    ("segment.jitter.ms", "0"),
    ("local.retention.ms", "-2"),
    ("local.retention.bytes", "-2"),
    ("remote.storage.enable", "false"),
    ("remote.log.copy.disable", "false"),
    ("remote.log.delete.on.disable", "false"),
    ("remote.copy.lag.bytes", "-1"),
    ("remote.copy.lag.ms", "0"),
    ("max.decompressed.message.bytes", "2147483639"),
    ("errors.deadletterqueue.group.enable", "false"),
];

/// A key of `ACCEPTED`: `check` vets a value, which is stored and read back.
macro_rules! accepted_key {
    ($name:literal, $kind:expr, $check:expr) => {
        Key {
            name: $name,
            kind: $kind,
            read_only: false,
            apply: |c, v| {
                $check($name, v)?;
                c.set_accepted($name, v);
                Ok(())
            },
            read: |c| c.accepted_value($name),
        }
    };
}

fn long_from<const LO: i64>(key: &str, v: &str) -> Result<(), String> {
    integer(key, v, LO, i64::MAX).map(|_| ())
}

fn boolean(key: &str, v: &str) -> Result<(), String> {
    one_of(key, v, &["true", "false"]).map(|_| ())
}

fn tiering_off(key: &str, v: &str) -> Result<(), String> {
    one_of(key, v, &["false"])
        .map(|_| ())
        .map_err(|_| format!("{key}: tiered storage is not served by this broker"))
}

/// Every topic config key Sluice serves.
pub const KEYS: &[Key] = &[
    Key {
        name: "cleanup.policy",
        kind: Kind::List,
        read_only: false,
        apply: |c, v| {
            c.cleanup_policy = one_of("cleanup.policy", v, CLEANUP_POLICIES)?.to_string();
            Ok(())
        },
        read: |c| c.cleanup_policy.clone(),
    },
    Key {
        name: "retention.ms",
        kind: Kind::Long,
        read_only: false,
        apply: |c, v| {
            c.retention_ms = integer("retention.ms", v, -1, i64::MAX)?;
            Ok(())
        },
        read: |c| c.retention_ms.to_string(),
    },
    Key {
        name: "retention.bytes",
        kind: Kind::Long,
        read_only: false,
        apply: |c, v| {
            c.retention_bytes = integer("retention.bytes", v, -1, i64::MAX)?;
            Ok(())
        },
        read: |c| c.retention_bytes.to_string(),
    },
    Key {
        name: "segment.bytes",
        kind: Kind::Int,
        read_only: false,
        apply: |c, v| {
            c.segment_bytes = integer("segment.bytes", v, 1024, u32::MAX as i64)? as u64;
            Ok(())
        },
        read: |c| c.segment_bytes.to_string(),
    },
    Key {
        name: "segment.ms",
        kind: Kind::Long,
        read_only: false,
        apply: |c, v| {
            c.segment_ms = integer("segment.ms", v, 1, i64::MAX)? as u64;
            Ok(())
        },
        read: |c| c.segment_ms.to_string(),
    },
    Key {
        name: "max.message.bytes",
        kind: Kind::Int,
        read_only: false,
        apply: |c, v| {
            c.max_message_bytes = integer("max.message.bytes", v, 0, i32::MAX as i64)? as u32;
            Ok(())
        },
        read: |c| c.max_message_bytes.to_string(),
    },
    Key {
        name: "message.timestamp.type",
        kind: Kind::String,
        read_only: false,
        apply: |c, v| {
            let allowed = &["CreateTime", "LogAppendTime"];
            c.log_append_time = one_of("message.timestamp.type", v, allowed)? == "LogAppendTime";
            Ok(())
        },
        read: |c| {
            let name = if c.log_append_time {
                "LogAppendTime"
            } else {
                "CreateTime"
            };
            name.to_string()
        },
    },
    Key {
        name: "min.insync.replicas",
        kind: Kind::Int,
        read_only: false,
        apply: |c, v| {
            c.min_insync_replicas = integer("min.insync.replicas", v, 1, i32::MAX as i64)? as i32;
            Ok(())
        },
        read: |c| c.min_insync_replicas.to_string(),
    },
    Key {
        name: "index.interval.bytes",
        kind: Kind::Int,
        read_only: false,
        apply: |c, v| {
            let bytes = integer("index.interval.bytes", v, 1, i32::MAX as i64)?;
            c.index_interval_bytes = bytes as u32;
            Ok(())
        },
        read: |c| c.index_interval_bytes.to_string(),
    },
    Key {
        name: "min.cleanable.dirty.ratio",
        kind: Kind::Double,
        read_only: false,
        apply: |c, v| match v.trim().parse::<f64>() {
            Ok(r) if (0.0..=1.0).contains(&r) => {
                c.min_cleanable_dirty_ratio = r;
                Ok(())
            }
            _ => Err(format!(
                "invalid value {v:?} for min.cleanable.dirty.ratio: expected a number in 0..=1"
            )),
        },
        read: |c| c.min_cleanable_dirty_ratio.to_string(),
    },
    Key {
        name: "delete.retention.ms",
        kind: Kind::Long,
        read_only: false,
        apply: |c, v| {
            c.delete_retention_ms = integer("delete.retention.ms", v, 0, i64::MAX)?;
            Ok(())
        },
        read: |c| c.delete_retention_ms.to_string(),
    },
    Key {
        name: "compression.type",
        kind: Kind::String,
        read_only: false,
        apply: |c, v| {
            c.compression_type = one_of("compression.type", v, COMPRESSION_TYPES)?.to_string();
            Ok(())
        },
        read: |c| c.compression_type.clone(),
    },
    Key {
        name: "compression.gzip.level",
        kind: Kind::Int,
        read_only: false,
        // Kafka's rule: 1..=9, or -1 for the codec's default.
        apply: |c, v| {
            let level = integer("compression.gzip.level", v, -1, 9)? as i32;
            if level == 0 {
                return Err(
                    "invalid value \"0\" for compression.gzip.level: expected -1 or 1..=9".into(),
                );
            }
            c.gzip_level = level;
            Ok(())
        },
        read: |c| c.gzip_level.to_string(),
    },
    int_key!("compression.lz4.level", lz4_level, 1, 17),
    int_key!("compression.zstd.level", zstd_level, -131072, 22),
    long_key!("min.compaction.lag.ms", min_compaction_lag_ms, 0),
    long_key!("max.compaction.lag.ms", max_compaction_lag_ms, 1),
    long_key!(
        "message.timestamp.before.max.ms",
        timestamp_before_max_ms,
        0
    ),
    long_key!("message.timestamp.after.max.ms", timestamp_after_max_ms, 0),
    long_key!("flush.messages", flush_messages, 1),
    long_key!("flush.ms", flush_ms, 0),
    Key {
        name: "message.format.version",
        kind: Kind::String,
        read_only: false,
        apply: |c, v| {
            let version_like = v.starts_with(|ch: char| ch.is_ascii_digit())
                && v.chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '.' || ch == '-');
            if !version_like {
                return Err(format!(
                    "invalid value {v:?} for message.format.version: expected a Kafka version such as 3.0-IV1"
                ));
            }
            c.message_format_version = v.to_string();
            Ok(())
        },
        read: |c| c.message_format_version.clone(),
    },
    Key {
        name: "preallocate",
        kind: Kind::Boolean,
        read_only: false,
        apply: |c, v| {
            c.preallocate = one_of("preallocate", v, &["true", "false"])? == "true";
            Ok(())
        },
        read: |c| c.preallocate.to_string(),
    },
    Key {
        name: UNCLEAN_LEADER_ELECTION,
        kind: Kind::Boolean,
        read_only: false,
        apply: |c, v| {
            c.unclean_leader_election =
                one_of(UNCLEAN_LEADER_ELECTION, v, &["true", "false"])? == "true";
            Ok(())
        },
        read: |c| c.unclean_leader_election.to_string(),
    },
    Key {
        name: "leader.replication.throttled.replicas",
        kind: Kind::List,
        read_only: false,
        apply: |c, v| {
            c.leader_replication_throttled_replicas = throttled_replicas(v)?;
            Ok(())
        },
        read: |c| c.leader_replication_throttled_replicas.clone(),
    },
    Key {
        name: "follower.replication.throttled.replicas",
        kind: Kind::List,
        read_only: false,
        apply: |c, v| {
            c.follower_replication_throttled_replicas = throttled_replicas(v)?;
            Ok(())
        },
        read: |c| c.follower_replication_throttled_replicas.clone(),
    },
    accepted_key!("file.delete.delay.ms", Kind::Long, long_from::<0>),
    accepted_key!("segment.index.bytes", Kind::Int, |k, v| integer(
        k,
        v,
        4,
        i32::MAX as i64
    )
    .map(|_| ())),
    accepted_key!("segment.jitter.ms", Kind::Long, long_from::<0>),
    accepted_key!("local.retention.ms", Kind::Long, long_from::<-2>),
    accepted_key!("local.retention.bytes", Kind::Long, long_from::<-2>),
    accepted_key!("remote.storage.enable", Kind::Boolean, tiering_off),
    accepted_key!("remote.log.copy.disable", Kind::Boolean, boolean),
    accepted_key!("remote.log.delete.on.disable", Kind::Boolean, boolean),
    accepted_key!("remote.copy.lag.bytes", Kind::Long, long_from::<-1>),
    accepted_key!("remote.copy.lag.ms", Kind::Long, long_from::<0>),
    accepted_key!("max.decompressed.message.bytes", Kind::Int, |k, v| integer(
        k,
        v,
        0,
        i32::MAX as i64
    )
    .map(|_| ())),
    accepted_key!(
        "errors.deadletterqueue.group.enable",
        Kind::Boolean,
        boolean
    ),
];

/// `compression.type` values: Kafka's names.
const COMPRESSION_TYPES: &[&str] = &["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"];

/// Kafka's throttled-replica lists: empty, `*`, or `partition:broker` pairs.
fn throttled_replicas(v: &str) -> Result<String, String> {
    let pair = |p: &str| {
        let mut it = p.trim().split(':');
        let ok = |s: Option<&str>| s.is_some_and(|s| s.parse::<u32>().is_ok());
        ok(it.next()) && ok(it.next()) && it.next().is_none()
    };
    let v = v.trim();
    if v.is_empty() || v == "*" || v.split(',').all(pair) {
        Ok(v.to_string())
    } else {
        Err(format!(
            "invalid value {v:?} for a throttled replicas list: expected *, or partition:broker pairs"
        ))
    }
}

/// The table entry for `name`.
pub fn key(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
}

/// Kafka's default for `delete.retention.ms`: one day.
const DEFAULT_DELETE_RETENTION_MS: i64 = 24 * 3600 * 1000;
/// Kafka 3.x's default for `message.format.version`.
const DEFAULT_MESSAGE_FORMAT_VERSION: &str = "3.0-IV1";
/// Kafka's default for `message.timestamp.after.max.ms` since 4.0: one hour.
const DEFAULT_TIMESTAMP_AFTER_MAX_MS: i64 = 3600 * 1000;
/// Kafka's default for `min.cleanable.dirty.ratio`.
const DEFAULT_MIN_CLEANABLE_DIRTY_RATIO: f64 = 0.5;

impl TopicConfig {
    /// The broker's defaults, before any override.
    pub fn defaults(defaults: &TopicDefaults, log: &LogConfig) -> TopicConfig {
        TopicConfig {
            cleanup_policy: defaults.cleanup_policy.clone(),
            retention_ms: defaults.retention_ms,
            retention_bytes: defaults.retention_bytes,
            segment_bytes: log.segment_bytes,
            segment_ms: log.segment_ms,
            max_message_bytes: defaults.max_message_bytes,
            log_append_time: defaults.message_timestamp_type == "LogAppendTime",
            min_insync_replicas: 1,
            index_interval_bytes: log.index_interval_bytes,
            min_cleanable_dirty_ratio: DEFAULT_MIN_CLEANABLE_DIRTY_RATIO,
            delete_retention_ms: DEFAULT_DELETE_RETENTION_MS,
            compression_type: "producer".to_string(),
            gzip_level: -1,
            lz4_level: 9,
            zstd_level: 3,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            timestamp_before_max_ms: i64::MAX,
            // Kafka 4.0's default: an hour past the broker's clock.
            timestamp_after_max_ms: DEFAULT_TIMESTAMP_AFTER_MAX_MS,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            message_format_version: DEFAULT_MESSAGE_FORMAT_VERSION.to_string(),
            preallocate: false,
            unclean_leader_election: false,
            leader_replication_throttled_replicas: String::new(),
            follower_replication_throttled_replicas: String::new(),
            accepted: ACCEPTED.iter().map(|(k, v)| (*k, v.to_string())).collect(),
        }
    }

    fn set_accepted(&mut self, name: &'static str, value: &str) {
        let slot = self.accepted.iter_mut().find(|(k, _)| *k == name);
        slot.expect("every accepted key has a default").1 = value.to_string();
    }

    fn accepted_value(&self, name: &str) -> String {
        let slot = self.accepted.iter().find(|(k, _)| *k == name);
        slot.expect("every accepted key has a default").1.clone()
    }

    /// The defaults with `overrides` applied in order; the first unknown key or bad value is
    /// the error.
    pub fn resolve(
        defaults: &TopicDefaults,
        log: &LogConfig,
        overrides: &[(String, String)],
    ) -> Result<TopicConfig, String> {
        TopicConfig::defaults(defaults, log).with_overrides(overrides)
    }

    /// This config with `overrides` applied in order (a topic's own overrides on top of the
    /// defaults in effect); the first unknown key or bad value is the error.
    pub fn with_overrides(&self, overrides: &[(String, String)]) -> Result<TopicConfig, String> {
        let mut c = self.clone();
        for (name, value) in overrides {
            let k = key(name).ok_or_else(|| format!("unknown topic config {name:?}"))?;
            (k.apply)(&mut c, value)?;
        }
        Ok(c)
    }

    /// `cleanup.policy` includes `delete`: retention applies.
    pub fn deletes(&self) -> bool {
        self.cleanup_policy.split(',').any(|p| p == "delete")
    }

    /// `cleanup.policy` includes `compact`: the log cleaner applies.
    pub fn compacts(&self) -> bool {
        self.cleanup_policy.split(',').any(|p| p == "compact")
    }

    /// Every key with its effective value, in the table's order.
    pub fn entries(&self) -> impl Iterator<Item = (&'static Key, String)> + '_ {
        KEYS.iter().map(move |k| (k, (k.read)(self)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_reads_back_what_it_applied() {
        let d = TopicDefaults::default();
        let l = LogConfig::default();
        let samples = [
            ("cleanup.policy", "compact,delete"),
            ("retention.ms", "5"),
            ("retention.bytes", "-1"),
            ("segment.bytes", "2048"),
            ("segment.ms", "9"),
            ("max.message.bytes", "77"),
            ("message.timestamp.type", "LogAppendTime"),
            ("min.insync.replicas", "2"),
            ("index.interval.bytes", "10"),
            ("min.cleanable.dirty.ratio", "0.25"),
            ("delete.retention.ms", "0"),
            ("compression.type", "zstd"),
            ("compression.gzip.level", "1"),
            ("compression.lz4.level", "12"),
            ("compression.zstd.level", "-5"),
            ("min.compaction.lag.ms", "100"),
            ("max.compaction.lag.ms", "200"),
            ("message.timestamp.before.max.ms", "300"),
            ("message.timestamp.after.max.ms", "400"),
            ("flush.messages", "1"),
            ("flush.ms", "1000"),
            ("message.format.version", "2.8-IV1"),
            ("preallocate", "true"),
            (UNCLEAN_LEADER_ELECTION, "true"),
            ("leader.replication.throttled.replicas", "0:1,1:2"),
            ("follower.replication.throttled.replicas", "*"),
            ("file.delete.delay.ms", "5"),
            ("segment.index.bytes", "4096"),
            ("segment.jitter.ms", "7"),
            ("local.retention.ms", "-1"),
            ("local.retention.bytes", "100"),
            ("remote.storage.enable", "false"),
            ("remote.log.copy.disable", "true"),
            ("remote.log.delete.on.disable", "true"),
            ("remote.copy.lag.bytes", "10"),
            ("remote.copy.lag.ms", "10"),
            ("max.decompressed.message.bytes", "1000"),
            ("errors.deadletterqueue.group.enable", "true"),
        ];
        assert_eq!(samples.len(), KEYS.len(), "a sample per key");
        for (name, value) in samples {
            let c = TopicConfig::resolve(&d, &l, &[(name.into(), value.into())]).unwrap();
            assert_eq!((key(name).unwrap().read)(&c), value, "{name}");
        }
    }

    #[test]
    fn bad_values_and_unknown_keys_are_named() {
        let d = TopicDefaults::default();
        let l = LogConfig::default();
        let err = |k: &str, v: &str| TopicConfig::resolve(&d, &l, &[(k.into(), v.into())]);
        assert!(err("nope", "1").unwrap_err().contains("nope"));
        assert!(err("retention.ms", "x")
            .unwrap_err()
            .contains("retention.ms"));
        assert!(err("segment.bytes", "10").is_err());
        assert!(err("cleanup.policy", "keep").is_err());
        assert!(err("compression.type", "brotli").is_err());
        assert!(err("compression.gzip.level", "0").is_err());
        assert!(err("compression.zstd.level", "23").is_err());
        assert!(err("message.format.version", "latest").is_err());
        assert!(err("remote.storage.enable", "true").is_err());
        assert!(err("follower.replication.throttled.replicas", "0-1").is_err());
        assert!(err("min.cleanable.dirty.ratio", "2").is_err());
    }
}
