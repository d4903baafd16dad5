//! CreateTopics: validated and executed by the controller shard.

use super::authorize::{self, Caller};
use super::describe_configs::described_topic;
use super::Services;
use super::{decode, encode, str_bytes, Reply};
use crate::controller::{self, ControllerOp, NewTopic};
use crate::security::acl::{Operation, ResourceType::Cluster, CLUSTER_NAME};
use crate::shard::Shard;
use crate::storage::catalog::{TopicMeta, TopicRecord};
use bytes::Bytes;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::ResponseError;
use std::sync::Arc;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: CreateTopicsRequest = decode(body, version)?;
    let (topics, duplicated) = requested(&req);
    let names: Vec<String> = topics.iter().map(|t| t.name.clone()).collect();
    // CREATE on the cluster, or on each topic.
    let anywhere = authorize::permits(shard, caller, Operation::Create, Cluster, CLUSTER_NAME);
    let allowed: Vec<bool> = names
        .iter()
        .map(|n| anywhere || authorize::topic(shard, caller, Operation::Create, n))
        .collect();
    let validate_only = req.validate_only;
    // A validated topic is answered as Kafka does, with what it would have been.
    let would_be: Vec<(TopicMeta, usize)> = match validate_only {
        true => topics.iter().filter_map(|t| would_be(shard, t)).collect(),
        false => Vec::new(),
    };
    let op = |topics| ControllerOp::CreateTopics {
        topics,
        validate_only,
    };
    let denied = ResponseError::TopicAuthorizationFailed;
    let outcomes = super::submit_allowed(&services.controllers, topics, &allowed, op, denied).await;
    let twice = |name: String| {
        let message = format!("topic {name} is named more than once in the request");
        (name, (ResponseError::InvalidRequest.code(), Some(message)))
    };
    let answers = names
        .into_iter()
        .zip(outcomes)
        .chain(duplicated.into_iter().map(twice));
    let results = answers
        .map(|(name, outcome)| {
            // Kafka leaves the new topic's details out for a creator without DESCRIBE_CONFIGS.
            let described = authorize::topic(shard, caller, Operation::DescribeConfigs, &name);
            let validated = would_be.iter().find(|(t, _)| *t.name == *name);
            result(shard, (&name, validated), outcome, (version, described))
        })
        .collect();
    encode(
        &CreateTopicsResponse::default().with_topics(results),
        version,
    )
}

/// The topics to create, and the names the request repeats: those are answered
/// INVALID_REQUEST once each and not created, as Kafka does.
fn requested(req: &CreateTopicsRequest) -> (Vec<NewTopic>, Vec<String>) {
    let mut seen = std::collections::HashMap::new();
    for t in &req.topics {
        *seen.entry(t.name.0.to_string()).or_insert(0) += 1;
    }
    let mut duplicated: Vec<String> = seen
        .iter()
        .filter(|(_, &n)| n > 1)
        .map(|(name, _)| name.clone())
        .collect();
    duplicated.sort();
    let topics = req
        .topics
        .iter()
        .filter(|t| seen[t.name.0.as_str()] == 1)
        .map(|t| NewTopic {
            name: t.name.0.to_string(),
            partitions: t.num_partitions,
            replication_factor: t.replication_factor,
            configs: t
                .configs
                .iter()
                .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
                .collect(),
            assignments: t
                .assignments
                .iter()
                .map(|a| {
                    (
                        a.partition_index,
                        a.broker_ids.iter().map(|b| b.0).collect(),
                    )
                })
                .collect(),
        })
        .collect();
    (topics, duplicated)
}

/// What a topic the controller is asked only to validate would be: its partitions, its
/// replicas (as assigned, else as the controller would place them), its configs over the
/// defaults, under a fresh id (Kafka answers a random one too). None where its configs or its
/// replication factor do not resolve: the controller refuses it then.
fn would_be(shard: &Shard, t: &NewTopic) -> Option<(TopicMeta, usize)> {
    let config = &shard.config;
    let replicas = match t.assignments.first() {
        Some((_, brokers)) => brokers.len(),
        None => controller::replication_factor(shard, &t.name, t.replication_factor).ok()?,
    };
    let record = TopicRecord {
        name: t.name.clone(),
        id: *uuid::Uuid::new_v4().as_bytes(),
        partitions: t
            .partition_count(config.topic_defaults.num_partitions)
            .max(0) as u32,
        configs: t.configs.clone(),
        assignment: Vec::new(),
    };
    let meta = TopicMeta {
        name: Arc::from(t.name.as_str()),
        config: shard.catalog().resolve_topic(&t.configs).ok()?,
        record,
        partition_epochs: Vec::new(),
    };
    Some((meta, replicas))
}

/// One topic's answer: from v5, a created (or validated) topic's partitions, replicas and
/// configs (Kafka's `CreatableTopicConfigs`, as DescribeConfigs would report them), for a
/// caller that may describe its configs; TOPIC_AUTHORIZATION_FAILED in
/// `topic_config_error_code` otherwise.
fn result(
    shard: &Shard,
    (name, validated): (&str, Option<&(TopicMeta, usize)>),
    (code, message): (i16, Option<String>),
    (version, described): (i16, bool),
) -> CreatableTopicResult {
    let mut r = CreatableTopicResult::default()
        .with_name(kafka_protocol::messages::TopicName(str_bytes(name)))
        .with_error_code(code);
    if version >= 1 {
        r = r.with_error_message(message.as_deref().map(str_bytes));
    }
    if version < 5 {
        return r;
    }
    let catalog = shard.catalog();
    // One replica on a single node (no assignments), else the first partition's.
    fn created(t: &Arc<TopicMeta>) -> (&TopicMeta, usize) {
        (
            t,
            t.record.assignment.first().map_or(1, |a| a.replicas.len()),
        )
    }
    let answer = validated.map(|(t, r)| (t, *r));
    let answer = answer.or_else(|| catalog.topics.get(name).map(created));
    let Some((t, replicas)) = answer.filter(|_| code == 0) else {
        return r.with_num_partitions(-1).with_replication_factor(-1);
    };
    if !described {
        let denied = ResponseError::TopicAuthorizationFailed.code();
        r = r.with_topic_config_error_code(denied);
        if version >= 7 {
            r = r.with_topic_id(uuid::Uuid::from_bytes(t.record.id));
        }
        return r.with_num_partitions(-1).with_replication_factor(-1);
    }
    let node = shard.config.node_id.to_string();
    let configs = described_topic(&catalog, &node, t).map(|d| {
        CreatableTopicConfigs::default()
            .with_name(str_bytes(d.name))
            .with_value(d.value.as_deref().map(str_bytes))
            .with_read_only(d.read_only)
            .with_config_source(d.source)
    });
    r = r
        .with_num_partitions(t.record.partitions as i32)
        .with_replication_factor(replicas as i16)
        .with_configs(Some(configs.collect()));
    if version >= 7 {
        r = r.with_topic_id(uuid::Uuid::from_bytes(t.record.id));
    }
    r
}
