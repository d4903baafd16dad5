//! DescribeConfigs for topics (every key of the topic config table, with its source, type and
//! read-only flag) and for this broker.

use super::{decode, encode, str_bytes, Reply};
use crate::shard::Shard;
use crate::storage::catalog::TopicMeta;
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

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
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
            match res.resource_type {
                RESOURCE_TOPIC => match catalog.topics.get(name) {
                    Some(t) => out.with_configs(topic_configs(t, res, version)),
                    None => out
                        .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                        .with_error_message(Some(str_bytes(&format!(
                            "topic {name} does not exist"
                        )))),
                },
                RESOURCE_BROKER if name.is_empty() || name == node => {
                    out.with_configs(broker_configs(shard, res, version))
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

/// Every key of the topic config table: overridden ones as dynamic topic configs, the rest as
/// defaults.
fn topic_configs(
    t: &TopicMeta,
    res: &DescribeConfigsResource,
    version: i16,
) -> Vec<DescribeConfigsResourceResult> {
    t.config
        .entries()
        .filter(|(k, _)| wanted(res, k.name))
        .map(|(k, value)| {
            let overridden = t.record.configs.iter().any(|(o, _)| o == k.name);
            let source = if overridden {
                SOURCE_DYNAMIC_TOPIC
            } else {
                SOURCE_DEFAULT
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

/// The broker settings a client may ask about; all come from the config file (read-only).
fn broker_configs(
    shard: &Shard,
    res: &DescribeConfigsResource,
    version: i16,
) -> Vec<DescribeConfigsResourceResult> {
    let c = &shard.config;
    [
        (
            "log.segment.bytes",
            c.log.segment_bytes.to_string(),
            Kind::Int,
        ),
        (
            "num.partitions",
            c.topic_defaults.num_partitions.to_string(),
            Kind::Int,
        ),
        (
            "auto.create.topics.enable",
            c.auto_create_topics.to_string(),
            Kind::Boolean,
        ),
        (
            "socket.request.max.bytes",
            c.request_max_bytes.to_string(),
            Kind::Int,
        ),
    ]
    .into_iter()
    .filter(|(k, _, _)| wanted(res, k))
    .map(|(name, value, kind)| {
        let d = Described {
            name,
            value,
            kind,
            source: SOURCE_STATIC_BROKER,
            read_only: true,
        };
        entry(d, version)
    })
    .collect()
}
