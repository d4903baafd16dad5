//! OffsetCommit: durable (fsynced) in `__consumer_offsets` before it is answered.

use super::{decode, encode, Reply};
use crate::group::{ops, route, OffsetEntry};
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse, TopicName};
use kafka_protocol::ResponseError;
use std::rc::Rc;

/// Per request topic, each partition's index and either an index into the offsets to commit
/// or an error found here.
type Layout = Vec<(TopicName, Vec<(i32, Result<usize, i16>)>)>;

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: OffsetCommitRequest = decode(body, version)?;
    let group = req.group_id.0.to_string();
    let (offsets, layout) = listed(shard, version, &req);
    let n = offsets.len();
    let codes: Vec<i16> = if group.is_empty() {
        vec![ResponseError::InvalidGroupId.code(); n]
    } else if n == 0 {
        Vec::new()
    } else {
        let op = ops::Commit {
            group: group.clone(),
            member: req.member_id.to_string(),
            generation: req.generation_id_or_member_epoch,
            instance: req.group_instance_id.as_ref().map(|s| s.to_string()),
            offsets,
        };
        route(shard, op).await.unwrap_or_else(|c| vec![c; n])
    };
    let topics = layout
        .into_iter()
        .map(|(name, row)| {
            let partitions = row
                .into_iter()
                .map(|(p, slot)| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(slot.map_or_else(|c| c, |i| codes[i]))
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect();
    encode(
        &OffsetCommitResponse::default().with_topics(topics),
        version,
    )
}

/// The offsets to commit (partitions that exist) and the response's layout.
fn listed(shard: &Shard, version: i16, req: &OffsetCommitRequest) -> (Vec<OffsetEntry>, Layout) {
    let catalog = shard.catalog();
    let mut offsets = Vec::new();
    let mut layout = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let name = t.name.0.to_string();
        let known = catalog.topics.get(&name);
        let row = t
            .partitions
            .iter()
            .map(|p| {
                if !known.is_some_and(|k| k.has_partition(p.partition_index)) {
                    let unknown = ResponseError::UnknownTopicOrPartition.code();
                    return (p.partition_index, Err(unknown));
                }
                let epoch = if version >= 6 {
                    p.committed_leader_epoch
                } else {
                    -1
                };
                let metadata = p
                    .committed_metadata
                    .as_ref()
                    .map(|m| m.to_string())
                    .unwrap_or_default();
                offsets.push((
                    name.clone(),
                    p.partition_index,
                    p.committed_offset,
                    epoch,
                    metadata,
                ));
                (p.partition_index, Ok(offsets.len() - 1))
            })
            .collect();
        layout.push((t.name.clone(), row));
    }
    (offsets, layout)
}
