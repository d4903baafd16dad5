//! OffsetDelete: removes committed offsets of topics the group no longer subscribes to.

use super::{decode, encode, Reply};
use crate::group::{ops, route};
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};
use std::rc::Rc;

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: OffsetDeleteRequest = decode(body, version)?;
    let group = req.group_id.0.to_string();
    let partitions: Vec<(String, i32)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.to_string(), p.partition_index))
        })
        .collect();
    let delete = ops::DeleteOffsets { group, partitions };
    let (top, codes) = route(shard, delete)
        .await
        .unwrap_or_else(|c| (c, Vec::new()));
    let mut codes = codes.into_iter();
    let topics = req
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(codes.next().unwrap_or(0))
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
