//! CreatePartitions: grows a topic; new partitions open on their owning shards.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, str_bytes, Reply};
use crate::controller::{ControllerOp, NewPartitions};
use crate::security::acl::Operation;
use bytes::Bytes;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use kafka_protocol::ResponseError;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: CreatePartitionsRequest = decode(body, version)?;
    let topics: Vec<NewPartitions> = req
        .topics
        .iter()
        .map(|t| NewPartitions {
            name: t.name.0.to_string(),
            count: t.count,
            assignments: t.assignments.as_ref().map(|a| {
                a.iter()
                    .map(|p| p.broker_ids.iter().map(|b| b.0).collect())
                    .collect()
            }),
        })
        .collect();
    let allowed: Vec<bool> = topics
        .iter()
        .map(|t| authorize::topic(shard, caller, Operation::Alter, &t.name))
        .collect();
    let validate_only = req.validate_only;
    let op = |topics| ControllerOp::CreatePartitions {
        topics,
        validate_only,
    };
    let denied = ResponseError::TopicAuthorizationFailed;
    let outcomes = super::submit_allowed(&services.controllers, topics, &allowed, op, denied).await;
    let results = req
        .topics
        .iter()
        .zip(outcomes)
        .map(|(t, (code, message))| {
            CreatePartitionsTopicResult::default()
                .with_name(t.name.clone())
                .with_error_code(code)
                .with_error_message(message.as_deref().map(str_bytes))
        })
        .collect();
    encode(
        &CreatePartitionsResponse::default().with_results(results),
        version,
    )
}
