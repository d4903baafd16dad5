//! CreateTopics: validated and executed by the controller shard.

use super::authorize::{self, Caller};
use super::{decode, encode, str_bytes, Reply};
use crate::controller::{ControllerOp, NewTopic};
use crate::security::acl::{Operation, ResourceType::Cluster, CLUSTER_NAME};
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::ResponseError;
use std::rc::Rc;

pub async fn handle(
    shard: &Rc<Shard>,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let req: CreateTopicsRequest = decode(body, version)?;
    let topics: Vec<NewTopic> = req
        .topics
        .iter()
        .map(|t| NewTopic {
            name: t.name.0.to_string(),
            // With a manual assignment the partition count is the assignment's length; every
            // replica is on this broker either way.
            partitions: if t.assignments.is_empty() {
                t.num_partitions
            } else {
                t.assignments.len() as i32
            },
            replication_factor: t.replication_factor,
            configs: t
                .configs
                .iter()
                .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
                .collect(),
        })
        .collect();
    let names: Vec<String> = topics.iter().map(|t| t.name.clone()).collect();
    // CREATE on the cluster, or on each topic.
    let anywhere = authorize::permits(shard, caller, Operation::Create, Cluster, CLUSTER_NAME);
    let allowed: Vec<bool> = names
        .iter()
        .map(|n| anywhere || authorize::topic(shard, caller, Operation::Create, n))
        .collect();
    let validate_only = req.validate_only;
    let op = |topics| ControllerOp::CreateTopics {
        topics,
        validate_only,
    };
    let denied = ResponseError::TopicAuthorizationFailed;
    let outcomes = super::submit_allowed(shard, topics, &allowed, op, denied).await;
    let catalog = shard.catalog();
    let mut results = Vec::with_capacity(names.len());
    for (name, (code, message)) in names.iter().zip(outcomes) {
        let mut r = CreatableTopicResult::default()
            .with_name(kafka_protocol::messages::TopicName(str_bytes(name)))
            .with_error_code(code);
        if version >= 1 {
            r = r.with_error_message(message.as_deref().map(str_bytes));
        }
        if version >= 5 {
            let topic = catalog.topics.get(name).filter(|_| code == 0);
            r = r
                .with_num_partitions(topic.map_or(-1, |t| t.record.partitions as i32))
                .with_replication_factor(if topic.is_some() { 1 } else { -1 });
            if version >= 7 {
                if let Some(t) = topic {
                    r = r.with_topic_id(uuid::Uuid::from_bytes(t.record.id));
                }
            }
        }
        results.push(r);
    }
    encode(
        &CreateTopicsResponse::default().with_topics(results),
        version,
    )
}
