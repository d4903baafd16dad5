//! Broker configs as AlterConfigs, IncrementalAlterConfigs and DescribeConfigs see them
//! (KIP-226): the one table of broker keys.
//!
//! - Dynamic keys (`DYNAMIC`) may be changed at runtime, for the whole cluster (the resource
//!   named "") or for one broker (its node id); a broker's own value wins. They are persisted
//!   in the catalog, so they survive restarts, and installed on every shard with it. Each is
//!   either a topic default (`log.retention.ms` is the default of `retention.ms`: topics
//!   without an override of their own follow it) or a broker setting (connection limits, the
//!   log cleaner).
//!   A few are accepted with no effect: Kafka's listener settings for mechanisms Sluice does
//!   not serve (Kerberos, OAUTHBEARER's login refresh), which Kafka changes at runtime and
//!   admin tools set; they are checked, stored and described.
//! - Static keys (`STATIC`) come from the config file; they are described, read-only, and a
//!   change is refused as Kafka refuses it: INVALID_REQUEST, "Cannot update these configs
//!   dynamically", naming the keys.

use crate::config::Config;
use crate::storage::topic_config::{self, integer, Kind, TopicConfig};

/// The broker settings dynamic configs change (the rest of the broker's settings are static).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerSettings {
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    pub cleaner_backoff_ms: u64,
    pub cleaner_dedupe_buffer_bytes: usize,
}

impl BrokerSettings {
    /// The config file's values.
    pub fn of(config: &Config) -> BrokerSettings {
        BrokerSettings {
            max_connections: config.max_connections,
            max_connections_per_ip: config.max_connections_per_ip,
            cleaner_backoff_ms: config.log.cleaner_interval_ms,
            cleaner_dedupe_buffer_bytes: config.log.cleaner_dedupe_buffer_bytes,
        }
    }
}

/// What a dynamic key changes.
enum Target {
    /// The default of this topic key.
    Topic(&'static str),
    /// A broker setting: checks and applies a value (the config file bounds some), and reads it.
    Broker {
        kind: Kind,
        apply: fn(&mut BrokerSettings, &str, &Config) -> Result<(), String>,
        read: fn(&BrokerSettings) -> String,
    },
    /// Accepted with no effect: the value is checked as its kind and stored; it reads as its
    /// override (the caller looks that up), else this default.
    Accepted { kind: Kind, default: &'static str },
}

pub struct DynamicKey {
    pub name: &'static str,
    target: Target,
}

const fn topic(name: &'static str, topic_key: &'static str) -> DynamicKey {
    DynamicKey {
        name,
        target: Target::Topic(topic_key),
    }
}

const fn accepted(name: &'static str, kind: Kind, default: &'static str) -> DynamicKey {
    DynamicKey {
        name,
        target: Target::Accepted { kind, default },
    }
}

/// Every key that may change at runtime.
pub const DYNAMIC: &[DynamicKey] = &[
    topic("log.cleanup.policy", "cleanup.policy"),
    topic("log.retention.ms", "retention.ms"),
    topic("log.retention.bytes", "retention.bytes"),
    topic("log.segment.bytes", "segment.bytes"),
    topic("log.roll.ms", "segment.ms"),
    topic("message.max.bytes", "max.message.bytes"),
    topic("log.message.timestamp.type", "message.timestamp.type"),
    topic("log.index.interval.bytes", "index.interval.bytes"),
    topic("compression.type", "compression.type"),
    topic("min.insync.replicas", "min.insync.replicas"),
    topic(
        "log.cleaner.min.cleanable.ratio",
        "min.cleanable.dirty.ratio",
    ),
    topic("log.cleaner.delete.retention.ms", "delete.retention.ms"),
    topic("log.cleaner.min.compaction.lag.ms", "min.compaction.lag.ms"),
    topic("log.cleaner.max.compaction.lag.ms", "max.compaction.lag.ms"),
    topic(
        "log.message.timestamp.before.max.ms",
        "message.timestamp.before.max.ms",
    ),
    topic(
        "log.message.timestamp.after.max.ms",
        "message.timestamp.after.max.ms",
    ),
    topic("log.flush.interval.messages", "flush.messages"),
    topic("log.flush.interval.ms", "flush.ms"),
    topic("log.preallocate", "preallocate"),
    topic(
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
    ),
    DynamicKey {
        name: "max.connections",
        target: Target::Broker {
            kind: Kind::Int,
            // The descriptor budget is sized at start-up for the config file's value.
            apply: |s, v, c| {
                s.max_connections =
                    integer("max.connections", v, 1, c.max_connections as i64)? as usize;
                Ok(())
            },
            read: |s| s.max_connections.to_string(),
        },
    },
    DynamicKey {
        name: "max.connections.per.ip",
        target: Target::Broker {
            kind: Kind::Int,
            apply: |s, v, _| {
                s.max_connections_per_ip =
                    integer("max.connections.per.ip", v, 0, i32::MAX as i64)? as usize;
                Ok(())
            },
            read: |s| s.max_connections_per_ip.to_string(),
        },
    },
    DynamicKey {
        name: "log.cleaner.backoff.ms",
        target: Target::Broker {
            kind: Kind::Long,
            apply: |s, v, _| {
                s.cleaner_backoff_ms = integer("log.cleaner.backoff.ms", v, 1, i64::MAX)? as u64;
                Ok(())
            },
            read: |s| s.cleaner_backoff_ms.to_string(),
        },
    },
    DynamicKey {
        name: "log.cleaner.dedupe.buffer.size",
        target: Target::Broker {
            kind: Kind::Long,
            apply: |s, v, _| {
                let bytes = integer("log.cleaner.dedupe.buffer.size", v, 1 << 20, 1 << 40)?;
                s.cleaner_dedupe_buffer_bytes = bytes as usize;
                Ok(())
            },
            read: |s| s.cleaner_dedupe_buffer_bytes.to_string(),
        },
    },
    // Replication quotas (KIP-73), Kafka's default of no limit: replication is not throttled
    // yet. kafka-reassign-partitions sets them with --throttle and clears them on --verify.
    accepted(
        "leader.replication.throttled.rate",
        Kind::Long,
        "9223372036854775807",
    ),
    accepted(
        "follower.replication.throttled.rate",
        Kind::Long,
        "9223372036854775807",
    ),
    accepted(
        "replica.alter.log.dirs.io.max.bytes.per.second",
        Kind::Long,
        "9223372036854775807",
    ),
    // Kafka's defaults. Kerberos (GSSAPI) and OAUTHBEARER are not served here.
    accepted("sasl.kerberos.kinit.cmd", Kind::String, "/usr/bin/kinit"),
    accepted("sasl.kerberos.min.time.before.relogin", Kind::Long, "60000"),
    accepted("sasl.kerberos.ticket.renew.jitter", Kind::Double, "0.05"),
    accepted(
        "sasl.kerberos.ticket.renew.window.factor",
        Kind::Double,
        "0.8",
    ),
    accepted(
        "sasl.kerberos.principal.to.local.rules",
        Kind::List,
        "DEFAULT",
    ),
    accepted("sasl.login.refresh.window.factor", Kind::Double, "0.8"),
    accepted("sasl.login.refresh.window.jitter", Kind::Double, "0.05"),
    accepted("sasl.login.refresh.min.period.seconds", Kind::Short, "60"),
    accepted("sasl.login.refresh.buffer.seconds", Kind::Short, "300"),
];

/// A read-only broker key: its type and its value from the config file (None: unset, as
/// Kafka reports an unset `broker.rack`).
pub struct StaticKey {
    pub name: &'static str,
    pub kind: Kind,
    pub read: fn(&Config) -> Option<String>,
}

/// The static keys a client may ask about.
pub const STATIC: &[StaticKey] = &[
    StaticKey {
        name: "node.id",
        kind: Kind::Int,
        read: |c| Some(c.node_id.to_string()),
    },
    StaticKey {
        name: "broker.id",
        kind: Kind::Int,
        read: |c| Some(c.node_id.to_string()),
    },
    StaticKey {
        name: "listeners",
        kind: Kind::String,
        read: |c| Some(format!("PLAINTEXT://{}", c.listen)),
    },
    StaticKey {
        name: "log.dirs",
        kind: Kind::String,
        read: |c| Some(c.data_dir.display().to_string()),
    },
    StaticKey {
        name: "num.partitions",
        kind: Kind::Int,
        read: |c| Some(c.topic_defaults.num_partitions.to_string()),
    },
    StaticKey {
        name: "auto.create.topics.enable",
        kind: Kind::Boolean,
        read: |c| Some(c.auto_create_topics.to_string()),
    },
    StaticKey {
        name: "socket.request.max.bytes",
        kind: Kind::Int,
        read: |c| Some(c.request_max_bytes.to_string()),
    },
    StaticKey {
        name: "connections.max.idle.ms",
        kind: Kind::Long,
        read: |c| Some(c.connections_max_idle_ms.to_string()),
    },
    StaticKey {
        name: "offsets.topic.num.partitions",
        kind: Kind::Int,
        read: |c| Some(c.offsets_topic_partitions.to_string()),
    },
    StaticKey {
        name: "broker.rack",
        kind: Kind::String,
        read: |c| c.rack.clone(),
    },
    StaticKey {
        name: "replica.selector.class",
        kind: Kind::Class,
        read: |c| c.fetch.replica_selector.kafka_class().map(str::to_string),
    },
    StaticKey {
        name: "connections.max.reauth.ms",
        kind: Kind::Long,
        read: |c| Some(c.sasl.connections_max_reauth_ms.to_string()),
    },
];

pub fn dynamic_key(name: &str) -> Option<&'static DynamicKey> {
    DYNAMIC.iter().find(|k| k.name == name)
}

/// The broker key that sets the default of topic key `topic_key`, if any.
pub fn default_of(topic_key: &str) -> Option<&'static DynamicKey> {
    DYNAMIC
        .iter()
        .find(|k| matches!(k.target, Target::Topic(t) if t == topic_key))
}

impl DynamicKey {
    pub fn kind(&self) -> Kind {
        match &self.target {
            Target::Topic(t) => topic_config::key(t).expect("mapped to a topic key").kind,
            Target::Broker { kind, .. } | Target::Accepted { kind, .. } => *kind,
        }
    }

    /// The key's effective value: the topic default, the broker setting, or for a key
    /// accepted with no effect its default (its override is the catalog's to read).
    pub fn read(&self, settings: &BrokerSettings, topic_defaults: &TopicConfig) -> String {
        match &self.target {
            Target::Topic(t) => (topic_config::key(t).expect("mapped").read)(topic_defaults),
            Target::Broker { read, .. } => read(settings),
            Target::Accepted { default, .. } => default.to_string(),
        }
    }

    /// Whether the key is accepted with no effect (its value is only stored).
    pub fn is_accepted(&self) -> bool {
        matches!(self.target, Target::Accepted { .. })
    }
}

/// The dynamic overrides in effect, resolved: the broker settings, and the topic config every
/// topic starts from (the config file's defaults with the dynamic topic defaults applied).
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub settings: BrokerSettings,
    pub topic_defaults: TopicConfig,
}

/// Applies `overrides` (Kafka key, value), in order, over the config file's values. Errors
/// name the key: one that is not dynamic, or a value its check refuses.
pub fn resolve(config: &Config, overrides: &[(String, String)]) -> Result<Resolved, String> {
    let mut settings = BrokerSettings::of(config);
    let mut topic_defaults = TopicConfig::defaults(&config.topic_defaults, &config.log);
    for (name, value) in overrides {
        let key = dynamic_key(name).ok_or_else(|| not_dynamic(&[name.as_str()]))?;
        match &key.target {
            Target::Topic(t) => {
                let topic_key = topic_config::key(t).expect("mapped");
                (topic_key.apply)(&mut topic_defaults, value)
                    .map_err(|e| format!("{name}: {e}"))?;
            }
            Target::Broker { apply, .. } => apply(&mut settings, value, config)?,
            Target::Accepted { kind, .. } => check_kind(name, *kind, value)?,
        }
    }
    Ok(Resolved {
        settings,
        topic_defaults,
    })
}

/// A value of a key accepted with no effect, checked as its kind.
fn check_kind(name: &str, kind: Kind, value: &str) -> Result<(), String> {
    let ok = match kind {
        Kind::Long | Kind::Int => return integer(name, value, i64::MIN, i64::MAX).map(|_| ()),
        Kind::Short => return integer(name, value, i16::MIN.into(), i16::MAX.into()).map(|_| ()),
        Kind::Double => value.trim().parse::<f64>().is_ok_and(f64::is_finite),
        Kind::Boolean => matches!(value, "true" | "false"),
        Kind::String | Kind::List | Kind::Class => true,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid value {value:?} for {name}: expected a {kind:?}"
        ))
    }
}

/// Kafka's message for keys that cannot change at runtime.
pub fn not_dynamic(names: &[&str]) -> String {
    format!(
        "Cannot update these configs dynamically: [{}]",
        names.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dynamic_key_resolves_and_reads_back() {
        let config = Config::default();
        let samples = [
            ("log.retention.ms", "5000"),
            ("compression.type", "lz4"),
            ("log.cleanup.policy", "compact"),
            ("max.connections", "10"),
            ("max.connections.per.ip", "3"),
            ("log.cleaner.backoff.ms", "250"),
            ("log.cleaner.dedupe.buffer.size", "2097152"),
        ];
        for (name, value) in samples {
            let r = resolve(&config, &[(name.into(), value.into())]).unwrap();
            assert_eq!(
                dynamic_key(name)
                    .unwrap()
                    .read(&r.settings, &r.topic_defaults),
                value
            );
        }
        for k in DYNAMIC {
            let _ = k.kind(); // every topic mapping names a real topic key
        }
    }

    #[test]
    fn static_keys_and_bad_values_are_refused_by_name() {
        let config = Config::default();
        let err = resolve(&config, &[("log.dirs".into(), "/x".into())]).unwrap_err();
        assert!(err.contains("Cannot update these configs dynamically: [log.dirs]"));
        let err = resolve(&config, &[("log.retention.ms".into(), "soon".into())]).unwrap_err();
        assert!(err.contains("log.retention.ms"));
        let above = (config.max_connections + 1).to_string();
        assert!(resolve(&config, &[("max.connections".into(), above)]).is_err());
    }
}
