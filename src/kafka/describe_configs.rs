//! DescribeConfigs for topics (every key of the topic config table, with its source, type and
//! read-only flag) and for this broker (the broker key table of `storage/broker_config.rs`:
//! dynamic keys with their effective values, static ones read-only).

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
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::ResponseError;
use std::rc::Rc;

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
// ConfigSource values from Kafka's DescribeConfigsResponse.
const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_DYNAMIC_BROKER: i8 = 2;
const SOURCE_DYNAMIC_DEFAULT_BROKER: i8 = 3;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

/// One config entry of a response.
struct Described<'a> {
    name: &'a str,
    value: String,
    kind: Kind,
    source: i8,
    read_only: bool,
}

fn entry(d: Described, version: i16) -> DescribeConfigsResourceResult {
    let mut e = DescribeConfigsResourceResult::default()
        .with_name(str_bytes(d.name))
        .with_value(Some(str_bytes(&d.value)))
        .with_read_only(d.read_only)
        .with_config_source(d.source);
    if version >= 3 {
        e = e.with_config_type(d.kind as i8);
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
                    Some(t) => out.with_configs(topic_configs(&catalog, &node, t, res, version)),
                    None => out
                        .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                        .with_error_message(Some(str_bytes(&format!(
                            "topic {name} does not exist"
                        )))),
                },
                RESOURCE_BROKER if name.is_empty() || name == node => {
                    out.with_configs(broker_configs(shard, &catalog, res, version))
                }
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
    let set_in = |scope: &str| {
        catalog::scope_configs(&catalog.broker_configs, scope)
            .iter()
            .any(|(k, _)| k == name)
    };
    if set_in(node) {
        Some(SOURCE_DYNAMIC_BROKER)
    } else if set_in("") {
        Some(SOURCE_DYNAMIC_DEFAULT_BROKER)
    } else {
        None
    }
}

/// Every key of the topic config table: overridden ones as dynamic topic configs, those whose
/// default is a dynamic broker config as that, the rest as defaults.
fn topic_configs(
    catalog: &Catalog,
    node: &str,
    t: &TopicMeta,
    res: &DescribeConfigsResource,
    version: i16,
) -> Vec<DescribeConfigsResourceResult> {
    t.config
        .entries()
        .filter(|(k, _)| wanted(res, k.name))
        .map(|(k, value)| {
            let overridden = t.record.configs.iter().any(|(o, _)| o == k.name);
            let broker_default = broker_config::default_of(k.name)
                .and_then(|b| dynamic_source(catalog, node, b.name));
            let source = match (overridden, broker_default) {
                (true, _) => SOURCE_DYNAMIC_TOPIC,
                (false, Some(source)) => source,
                (false, None) => SOURCE_DEFAULT,
            };
            let d = Described {
                name: k.name,
                value,
                kind: k.kind,
                source,
                read_only: k.read_only,
            };
            entry(d, version)
        })
        .collect()
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
    let mut out: Vec<DescribeConfigsResourceResult> = broker_config::DYNAMIC
        .iter()
        .filter(|k| wanted(res, k.name))
        .filter_map(|k| {
            let (value, source) = if cluster_wide {
                let (_, v) = cluster.iter().find(|(n, _)| n == k.name)?;
                (v.clone(), SOURCE_DYNAMIC_DEFAULT_BROKER)
            } else {
                let value = k.read(&catalog.broker, &catalog.topic_defaults);
                let source = dynamic_source(catalog, &node, k.name);
                (value, source.unwrap_or(SOURCE_STATIC_BROKER))
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
        let d = Described {
            name: k.name,
            value: (k.read)(&shard.config),
            kind: k.kind,
            source: SOURCE_STATIC_BROKER,
            read_only: true,
        };
        entry(d, version)
    }));
    out
}
