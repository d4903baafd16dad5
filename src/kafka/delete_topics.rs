//! DeleteTopics, by name or (v6) by topic id.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, str_bytes, Reply};
use crate::controller::ControllerOp;
use crate::security::acl::Operation;
use crate::shard::Shard;
use crate::storage::catalog::is_internal;
use bytes::Bytes;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use kafka_protocol::ResponseError;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: DeleteTopicsRequest = decode(body, version)?;
    let wanted = wanted(shard, &req, version);
    // The broker's own topics are not deleted (stricter than Kafka, which deletes them and
    // loses every group's offsets or transaction): they are answered below, not submitted.
    let known: Vec<String> = wanted
        .iter()
        .filter_map(|(n, _)| n.clone())
        .filter(|n| !is_internal(n))
        .collect();
    let allowed: Vec<bool> = known
        .iter()
        .map(|t| authorize::topic(shard, caller, Operation::Delete, t))
        .collect();
    let op = |names| ControllerOp::DeleteTopics { names };
    let denied = ResponseError::TopicAuthorizationFailed;
    let mut outcomes = super::submit_allowed(&services.controllers, known, &allowed, op, denied)
        .await
        .into_iter();
    let mut responses = Vec::with_capacity(wanted.len());
    for (name, id) in wanted {
        let (code, message) = match &name {
            Some(n) if is_internal(n) => (
                ResponseError::InvalidRequest.code(),
                Some(format!("{n} is the broker's own topic and is not deleted")),
            ),
            Some(_) => outcomes.next().expect("one outcome per known name"),
            None => (
                ResponseError::UnknownTopicId.code(),
                Some(format!("topic id {id} does not exist")),
            ),
        };
        let mut r = DeletableTopicResult::default()
            .with_name(name.map(|n| TopicName(str_bytes(&n))))
            .with_error_code(code);
        if version >= 5 {
            r = r.with_error_message(message.as_deref().map(str_bytes));
        }
        if version >= 6 {
            r = r.with_topic_id(id);
        }
        responses.push(r);
    }
    encode(
        &DeleteTopicsResponse::default().with_responses(responses),
        version,
    )
}

/// The topics asked for: (name if known, topic id as requested). v6 names each by name or id;
/// one named by name is answered with its id, as Kafka's is.
fn wanted(
    shard: &Shard,
    req: &DeleteTopicsRequest,
    version: i16,
) -> Vec<(Option<String>, uuid::Uuid)> {
    let catalog = shard.catalog();
    if version < 6 {
        return req
            .topic_names
            .iter()
            .map(|n| (Some(n.0.to_string()), uuid::Uuid::nil()))
            .collect();
    }
    req.topics
        .iter()
        .map(|t| match &t.name {
            Some(n) => (
                Some(n.0.to_string()),
                catalog
                    .topics
                    .get(n.0.as_str())
                    .map_or(t.topic_id, |t| uuid::Uuid::from_bytes(t.record.id)),
            ),
            None => (
                catalog
                    .by_id
                    .get(t.topic_id.as_bytes())
                    .map(|t| t.record.name.clone()),
                t.topic_id,
            ),
        })
        .collect()
}
