//! DescribeConfigs for topics (every known key, with its source) and for this broker.

use super::{decode, encode, str_bytes, Reply};
use crate::shard::Shard;
use bytes::Bytes;
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
// ConfigType values (v3+).
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;
const TYPE_LONG: i8 = 5;
const TYPE_LIST: i8 = 7;
const TYPE_BOOLEAN: i8 = 1;
const TYPE_DOUBLE: i8 = 6;

fn config_type(key: &str) -> i8 {
    match key {
        "cleanup.policy" => TYPE_LIST,
        "retention.ms"
        | "retention.bytes"
        | "segment.ms"
        | "log.segment.bytes"
        | "delete.retention.ms" => TYPE_LONG,
        "segment.bytes"
        | "max.message.bytes"
        | "min.insync.replicas"
        | "index.interval.bytes"
        | "num.partitions"
        | "socket.request.max.bytes" => TYPE_INT,
        "auto.create.topics.enable" => TYPE_BOOLEAN,
        "min.cleanable.dirty.ratio" => TYPE_DOUBLE,
        _ => TYPE_STRING,
    }
}

fn entry(
    key: &str,
    value: String,
    source: i8,
    read_only: bool,
    version: i16,
) -> DescribeConfigsResourceResult {
    let mut e = DescribeConfigsResourceResult::default()
        .with_name(str_bytes(key))
        .with_value(Some(str_bytes(&value)))
        .with_read_only(read_only)
        .with_config_source(source);
    if version >= 3 {
        e = e.with_config_type(config_type(key));
    }
    e
}

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: DescribeConfigsRequest = decode(body, version)?;
    let catalog = shard.catalog();
    let mut results = Vec::with_capacity(req.resources.len());
    for res in &req.resources {
        let wanted = |k: &str| {
            res.configuration_keys
                .as_ref()
                .is_none_or(|keys| keys.iter().any(|x| x.as_str() == k))
        };
        let mut out = DescribeConfigsResult::default()
            .with_resource_type(res.resource_type)
            .with_resource_name(res.resource_name.clone());
        match res.resource_type {
            RESOURCE_TOPIC => match catalog.topics.get(res.resource_name.as_str()) {
                Some(t) => {
                    let configs = t
                        .config
                        .entries()
                        .into_iter()
                        .filter(|(k, _)| wanted(k))
                        .map(|(k, v)| {
                            let overridden = t.record.configs.iter().any(|(ok, _)| ok == k);
                            entry(
                                k,
                                v,
                                if overridden {
                                    SOURCE_DYNAMIC_TOPIC
                                } else {
                                    SOURCE_DEFAULT
                                },
                                false,
                                version,
                            )
                        })
                        .collect();
                    out = out.with_configs(configs);
                }
                None => {
                    out = out
                        .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                        .with_error_message(Some(str_bytes(&format!(
                            "topic {} does not exist",
                            res.resource_name.as_str()
                        ))));
                }
            },
            RESOURCE_BROKER
                if res.resource_name.is_empty()
                    || res.resource_name.as_str() == shard.config.node_id.to_string() =>
            {
                let c = &shard.config;
                let configs = [
                    ("log.segment.bytes", c.log.segment_bytes.to_string()),
                    (
                        "num.partitions",
                        c.topic_defaults.num_partitions.to_string(),
                    ),
                    (
                        "auto.create.topics.enable",
                        c.auto_create_topics.to_string(),
                    ),
                    ("socket.request.max.bytes", c.request_max_bytes.to_string()),
                ]
                .into_iter()
                .filter(|(k, _)| wanted(k))
                .map(|(k, v)| entry(k, v, SOURCE_STATIC_BROKER, true, version))
                .collect();
                out = out.with_configs(configs);
            }
            _ => {
                out = out
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(str_bytes("unsupported resource type or broker id")));
            }
        }
        results.push(out);
    }
    encode(
        &DescribeConfigsResponse::default().with_results(results),
        version,
    )
}
