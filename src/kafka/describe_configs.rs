//! DescribeConfigs for topics (every key of the topic config table, with its source, type and
//! read-only flag), for groups (Kafka's group configs at their defaults) and for this broker
//! (the broker key table of `storage/broker_config.rs`: dynamic keys with their effective
//! values, static ones read-only).

use super::alter_configs::configs_refusal;
use super::Caller;
use super::{decode, encode, str_bytes, Reply};
use crate::security::acl::Operation;
use crate::shard::Shard;
use crate::storage::broker_config;
use crate::storage::catalog::{self, Catalog, TopicMeta};
use crate::storage::topic_config::Kind;
use bytes::Bytes;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::ResponseError;
use std::rc::Rc;

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const RESOURCE_GROUP: i8 = 32;
// ConfigSource values from Kafka's DescribeConfigsResponse.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_DYNAMIC_BROKER: i8 = 2;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

/// One config entry of a response.
pub(crate) struct Described<'a> {
    pub name: &'a str,
    /// None: unset (null on the wire).
    pub value: Option<String>,
    pub kind: Kind,
    pub source: i8,
    pub read_only: bool,
}

fn entry(d: Described, version: i16) -> DescribeConfigsResourceResult {
    let mut e = DescribeConfigsResourceResult::default()
        .with_name(str_bytes(d.name))
        .with_value(d.value.as_deref().map(str_bytes))
        .with_read_only(d.read_only)
        .with_config_source(d.source);
    if version >= 3 {
        // Documentation only when asked for (include_documentation): null otherwise, as
        // from Kafka.
        e = e.with_config_type(d.kind as i8).with_documentation(None);
    }
    e
}

pub async fn handle(
    shard: &Rc<Shard>,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let req: DescribeConfigsRequest = decode(body, version)?;
    let catalog = shard.catalog();
    let results = req
        .resources
        .iter()
        .map(|res| {
            let out = DescribeConfigsResult::default()
                .with_resource_type(res.resource_type)
                .with_resource_name(res.resource_name.clone());
            let node = shard.config.node_id.to_string();
            let name = res.resource_name.as_str();
            let op = Operation::DescribeConfigs;
            if let Some(e) = configs_refusal(shard, caller, op, res.resource_type, name) {
                return out.with_error_code(e.code());
            }
            match res.resource_type {
                RESOURCE_TOPIC => match catalog.topics.get(name) {
                    Some(t) => {
                        let asked = (version, req.include_synonyms);
                        out.with_configs(topic_configs(&catalog, &node, t, res, asked))
                    }
                    None => out
                        .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                        .with_error_message(Some(str_bytes(&format!(
                            "topic {name} does not exist"
                        )))),
                },
                RESOURCE_BROKER if name.is_empty() || name == node => {
                    out.with_configs(broker_configs(shard, &catalog, res, version))
                }
                RESOURCE_GROUP => out.with_configs(group_configs(res, version)),
                _ => out
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(str_bytes("unsupported resource type or broker id"))),
            }
        })
        .collect();
    encode(
        &DescribeConfigsResponse::default().with_results(results),
        version,
    )
}

/// Whether the request asks for key `name` (no list: every key).
fn wanted(res: &DescribeConfigsResource, name: &str) -> bool {
    res.configuration_keys
        .as_ref()
        .is_none_or(|keys| keys.iter().any(|x| x.as_str() == name))
}

/// Where a dynamic broker key's value comes from: this broker's own override, the
/// cluster-wide one, or neither (None).
fn dynamic_source(catalog: &Catalog, node: &str, name: &str) -> Option<i8> {
    dynamic_override(catalog, node, name).map(|(_, source)| source)
}

/// A dynamic broker key's own override and where it is set: this broker's
/// (DYNAMIC_BROKER_CONFIG), else the cluster-wide one (DYNAMIC_DEFAULT_BROKER_CONFIG).
fn dynamic_override(catalog: &Catalog, node: &str, name: &str) -> Option<(String, i8)> {
    [
        (node, SOURCE_DYNAMIC_BROKER),
        ("", SOURCE_DYNAMIC_DEFAULT_BROKER),
    ]
    .into_iter()
    .find_map(|(scope, source)| {
        let configs = catalog::scope_configs(&catalog.broker_configs, scope);
        let (_, value) = configs.iter().find(|(k, _)| k == name)?;
        Some((value.clone(), source))
    })
}

/// Every key of the topic config table: overridden ones as dynamic topic configs, those whose
/// default is a dynamic broker config as that, the rest as defaults.
/// With `synonyms` (v1+), each key's synonyms as Kafka lists them: the topic's own override,
/// then the broker key that sets its default, where that has a value.
fn topic_configs(
    catalog: &Catalog,
    node: &str,
    t: &TopicMeta,
    res: &DescribeConfigsResource,
    (version, synonyms): (i16, bool),
) -> Vec<DescribeConfigsResourceResult> {
    let defaults = (synonyms && version >= 1).then(Defaults::new);
    described_topic(catalog, node, t)
        .filter(|d| wanted(res, d.name))
        .map(|d| {
            let listed = match &defaults {
                Some(defaults) => topic_synonyms(catalog, node, &d, defaults),
                None => Vec::new(),
            };
            entry(d, version).with_synonyms(listed)
        })
        .collect()
}

fn topic_synonyms(
    catalog: &Catalog,
    node: &str,
    d: &Described,
    defaults: &Defaults,
) -> Vec<DescribeConfigsSynonym> {
    let synonym = |name: &str, value: Option<String>, source: i8| {
        DescribeConfigsSynonym::default()
            .with_name(str_bytes(name))
            .with_value(value.as_deref().map(str_bytes))
            .with_source(source)
    };
    let mut out = Vec::new();
    if d.source == SOURCE_DYNAMIC_TOPIC {
        out.push(synonym(d.name, d.value.clone(), SOURCE_DYNAMIC_TOPIC));
    }
    if let Some(b) = broker_config::default_of(d.name) {
        let (value, source) = broker_value(catalog, node, b, defaults);
        if value.is_some() {
            out.push(synonym(b.name, value, source));
        }
    }
    out
}

/// A topic's configs as DescribeConfigs reports them, in the config table's order.
pub(crate) fn described_topic<'a>(
    catalog: &'a Catalog,
    node: &'a str,
    t: &'a TopicMeta,
) -> impl Iterator<Item = Described<'static>> + 'a {
    t.config.entries().map(move |(k, value)| {
        let overridden = t.record.configs.iter().any(|(o, _)| o == k.name);
        let broker_default =
            broker_config::default_of(k.name).and_then(|b| dynamic_source(catalog, node, b.name));
        let source = match (overridden, broker_default) {
            (true, _) => SOURCE_DYNAMIC_TOPIC,
            (false, Some(source)) => source,
            (false, None) => SOURCE_DEFAULT,
        };
        Described {
            name: k.name,
            value: Some(value),
            kind: k.kind,
            source,
            read_only: k.read_only,
        }
    })
}

/// The broker's configs: each dynamic key with its effective value and source, then the
/// static keys (read-only). The cluster-wide resource ("") lists only the keys set for the
/// whole cluster, as Kafka does.
fn broker_configs(
    shard: &Shard,
    catalog: &Catalog,
    res: &DescribeConfigsResource,
    version: i16,
) -> Vec<DescribeConfigsResourceResult> {
    let node = shard.config.node_id.to_string();
    let cluster_wide = res.resource_name.is_empty();
    let cluster = catalog::scope_configs(&catalog.broker_configs, "");
    let defaults = Defaults::new();
    let mut out: Vec<DescribeConfigsResourceResult> = broker_config::DYNAMIC
        .iter()
        .filter(|k| wanted(res, k.name))
        .filter_map(|k| {
            let (value, source) = if cluster_wide {
                let (_, v) = cluster.iter().find(|(n, _)| n == k.name)?;
                (Some(v.clone()), SOURCE_DYNAMIC_DEFAULT_BROKER)
            } else {
                broker_value(catalog, &node, k, &defaults)
            };
            let d = Described {
                name: k.name,
                value,
                kind: k.kind(),
                source,
                read_only: false,
            };
            Some(entry(d, version))
        })
        .collect();
    if cluster_wide {
        return out;
    }
    let fixed = broker_config::STATIC.iter().filter(|k| wanted(res, k.name));
    out.extend(fixed.map(|k| {
        let value = (k.read)(&shard.config);
        let d = Described {
            name: k.name,
            source: defaults.source_of(value == (k.read)(&defaults.config)),
            value,
            kind: k.kind,
            read_only: true,
        };
        entry(d, version)
    }));
    out
}

/// Kafka 4.4's group configs (KIP-848 consumer groups, KIP-932 share groups, KIP-1071
/// streams groups) at their defaults: this broker's classic groups have none of their own,
/// so every group reports these (Kafka reports them for any group id).
const GROUP_CONFIGS: &[(&str, &str, Kind)] = &[
    ("consumer.session.timeout.ms", "45000", Kind::Int),
    ("consumer.heartbeat.interval.ms", "5000", Kind::Int),
    ("consumer.assignment.interval.ms", "1000", Kind::Int),
    ("share.session.timeout.ms", "45000", Kind::Int),
    ("share.heartbeat.interval.ms", "5000", Kind::Int),
    ("share.record.lock.duration.ms", "30000", Kind::Int),
    ("share.delivery.count.limit", "5", Kind::Int),
    ("share.partition.max.record.locks", "2000", Kind::Int),
    ("share.assignment.interval.ms", "1000", Kind::Int),
    ("share.auto.offset.reset", "latest", Kind::String),
    ("share.isolation.level", "read_uncommitted", Kind::String),
    ("share.renew.acknowledge.enable", "true", Kind::Boolean),
    ("streams.session.timeout.ms", "45000", Kind::Int),
    ("streams.heartbeat.interval.ms", "5000", Kind::Int),
    ("streams.num.standby.replicas", "0", Kind::Int),
    ("streams.initial.rebalance.delay.ms", "3000", Kind::Int),
    ("streams.assignment.interval.ms", "1000", Kind::Int),
    ("streams.assignor.name", "sticky", Kind::String),
    ("streams.rack.aware.assignment.tags", "", Kind::List),
    (
        "errors.deadletterqueue.copy.record.enable",
        "false",
        Kind::Boolean,
    ),
    ("errors.deadletterqueue.topic.name", "", Kind::String),
];

fn group_configs(
    res: &DescribeConfigsResource,
    version: i16,
) -> Vec<DescribeConfigsResourceResult> {
    GROUP_CONFIGS
        .iter()
        .filter(|(name, _, _)| wanted(res, name))
        .map(|&(name, value, kind)| {
            let d = Described {
                name,
                value: Some(value.to_string()),
                kind,
                source: SOURCE_DEFAULT,
                read_only: false,
            };
            entry(d, version)
        })
        .collect()
}

/// Kafka's broker keys whose default is null (an hours-valued key governs: `log.retention.hours`,
/// `log.roll.hours`; or none applies): reported null, as Kafka reports them, until set.
const NULL_BY_DEFAULT: &[&str] = &["log.retention.ms", "log.roll.ms", "log.flush.interval.ms"];

/// A dynamic broker key's value and source on this broker: its override (this broker's, then
/// the cluster's), else the config file's value (STATIC_BROKER_CONFIG) or the built-in default
/// (DEFAULT_CONFIG).
fn broker_value(
    catalog: &Catalog,
    node: &str,
    k: &broker_config::DynamicKey,
    defaults: &Defaults,
) -> (Option<String>, i8) {
    // A key accepted with no effect reads as its override; the others' effective values
    // already have theirs applied.
    let value = match dynamic_override(catalog, node, k.name) {
        Some((set, source)) if k.is_accepted() => return (Some(set), source),
        Some((_, source)) => {
            return (
                Some(k.read(&catalog.broker, &catalog.topic_defaults)),
                source,
            )
        }
        None => k.read(&catalog.broker, &catalog.topic_defaults),
    };
    match value == defaults.dynamic(k) {
        true if NULL_BY_DEFAULT.contains(&k.name) => (None, SOURCE_DEFAULT),
        true => (Some(value), SOURCE_DEFAULT),
        false => (Some(value), SOURCE_STATIC_BROKER),
    }
}

/// The built-in defaults, to tell a value the config file set (STATIC_BROKER_CONFIG) from one
/// it left alone (DEFAULT_CONFIG), as Kafka's DescribeConfigs does.
struct Defaults {
    config: crate::config::Config,
    resolved: broker_config::Resolved,
}

impl Defaults {
    fn new() -> Defaults {
        let config = crate::config::Config::default();
        let resolved = broker_config::resolve(&config, &[]).expect("no overrides resolve");
        Defaults { config, resolved }
    }

    fn dynamic(&self, k: &broker_config::DynamicKey) -> String {
        k.read(&self.resolved.settings, &self.resolved.topic_defaults)
    }

    fn source_of(&self, is_default: bool) -> i8 {
        if is_default {
            SOURCE_DEFAULT
        } else {
            SOURCE_STATIC_BROKER
        }
    }
}
