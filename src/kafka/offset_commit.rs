//! OffsetCommit: durable (fsynced) in `__consumer_offsets` before it is answered.

use super::{decode, encode, Reply};
use crate::group::{route, GroupOp, GroupReply};
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};
use kafka_protocol::ResponseError;
use std::rc::Rc;

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: OffsetCommitRequest = decode(body, version)?;
    let group = req.group_id.0.to_string();
    let catalog = shard.catalog();
    // Per request partition: Ok(index into `offsets`) or an error found here.
    let mut offsets = Vec::new();
    let mut layout = Vec::with_capacity(req.topics.len());
    for t in &req.topics {
        let name = t.name.0.to_string();
        let known = catalog.topics.get(&name);
        let row: Vec<(i32, Result<usize, i16>)> = t
            .partitions
            .iter()
            .map(|p| {
                let slot = if known.is_none_or(|k| {
                    p.partition_index < 0 || p.partition_index >= k.record.partitions as i32
                }) {
                    Err(ResponseError::UnknownTopicOrPartition.code())
                } else {
                    offsets.push((
                        name.clone(),
                        p.partition_index,
                        p.committed_offset,
                        if version >= 6 {
                            p.committed_leader_epoch
                        } else {
                            -1
                        },
                        p.committed_metadata
                            .as_ref()
                            .map(|m| m.to_string())
                            .unwrap_or_default(),
                    ));
                    Ok(offsets.len() - 1)
                };
                (p.partition_index, slot)
            })
            .collect();
        layout.push((t.name.clone(), row));
    }
    let n = offsets.len();
    let codes: Vec<i16> = if group.is_empty() {
        vec![ResponseError::InvalidGroupId.code(); n]
    } else if n == 0 {
        Vec::new()
    } else {
        let op = GroupOp::Commit {
            group: group.clone(),
            member: req.member_id.to_string(),
            generation: req.generation_id_or_member_epoch,
            instance: req.group_instance_id.as_ref().map(|s| s.to_string()),
            offsets,
        };
        match route(shard, &group, op).await {
            Ok(GroupReply::Commit(c)) => c,
            Ok(_) => unreachable!("a commit gets commit codes"),
            Err(c) => vec![c; n],
        }
    };
    let topics = layout
        .into_iter()
        .map(|(name, row)| {
            let partitions = row
                .into_iter()
                .map(|(p, slot)| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(match slot {
                            Ok(i) => codes[i],
                            Err(c) => c,
                        })
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
