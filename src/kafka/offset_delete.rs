//! OffsetDelete: removes committed offsets of topics the group no longer subscribes to.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, Reply};
use crate::group::{ops, route};
use crate::security::acl::Operation;
use bytes::Bytes;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};
use kafka_protocol::ResponseError;

/// The request's partitions, as (topic, partition), in order.
fn listed(req: &OffsetDeleteRequest) -> Vec<(String, i32)> {
    req.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.to_string(), p.partition_index))
        })
        .collect()
}

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let (shard, groups) = (&services.shard, &services.groups);
    let req: OffsetDeleteRequest = decode(body, version)?;
    let group = req.group_id.0.to_string();
    let partitions = listed(&req);
    // DELETE on the group, then READ on each topic (a partition of another is refused alone).
    let readable: Vec<bool> = partitions
        .iter()
        .map(|(t, _)| authorize::topic(shard, caller, Operation::Read, t))
        .collect();
    let allowed: Vec<(String, i32)> = partitions
        .into_iter()
        .zip(&readable)
        .filter_map(|(p, r)| r.then_some(p))
        .collect();
    let (top, codes) = if !authorize::group(shard, caller, Operation::Delete, &group) {
        (ResponseError::GroupAuthorizationFailed.code(), Vec::new())
    } else {
        let delete = ops::DeleteOffsets {
            group,
            partitions: allowed,
        };
        route(groups, delete)
            .await
            .unwrap_or_else(|c| (c, Vec::new()))
    };
    let denied = ResponseError::TopicAuthorizationFailed.code();
    let mut readable = readable.into_iter();
    let mut codes = codes.into_iter();
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let code = match readable.next() {
                        Some(false) => denied,
                        _ => codes.next().unwrap_or(0),
                    };
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            OffsetDeleteResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    encode(
        &OffsetDeleteResponse::default()
            .with_error_code(top)
            .with_topics(if top == 0 { topics } else { Vec::new() }),
        version,
    )
}
