//! OffsetForLeaderEpoch (KIP-101, KIP-320): where a leader epoch ends in the leader's log. A
//! follower that starts following a new leader asks where its newest epoch ends and cuts its
//! log there; a consumer asks after a leader change to detect a truncated log.

use super::authorize::{self, Caller};
use super::{decode, encode, per_partition, Reply};
use crate::partition::TopicPartition;
use crate::security::acl::Operation;
use crate::shard::mesh::Request;
use crate::shard::Shard;
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use kafka_protocol::ResponseError;
use std::rc::Rc;

/// (epoch found, its end offset, error code).
type Outcome = (i32, i64, i16);

/// Per item: (partition, the epoch the asker believes current, the epoch asked about).
struct EpochEndOnOwner(Vec<(TopicPartition, i32, i32)>);

impl Request for EpochEndOnOwner {
    type Reply = Vec<Outcome>;
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, Vec<Outcome>> {
        let out = self
            .0
            .into_iter()
            .map(|(tp, current, asked)| match shard.partition(tp) {
                None => failed(ResponseError::UnknownTopicOrPartition),
                Some(p) if p.is_failed() => failed(ResponseError::KafkaStorageError),
                Some(p) if current >= 0 && current < p.leader_epoch() => {
                    failed(ResponseError::FencedLeaderEpoch)
                }
                Some(p) if current > p.leader_epoch() => failed(ResponseError::UnknownLeaderEpoch),
                Some(p) if !p.is_leader() => failed(ResponseError::NotLeaderOrFollower),
                Some(p) => {
                    let (epoch, end) = p.replication().epoch_end(asked);
                    (epoch, end, 0)
                }
            })
            .collect();
        Box::pin(async move { out })
    }
}

fn failed(e: ResponseError) -> Outcome {
    (-1, -1, e.code())
}

pub async fn handle(
    shard: &Rc<Shard>,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let req: OffsetForLeaderEpochRequest = decode(body, version)?;
    if req.replica_id.0 >= 0 && crate::rpc::cut_off() {
        anyhow::bail!("a follower's request while cut off from the other nodes (fault hook)");
    }
    let describable = |t: &str| authorize::topic(shard, caller, Operation::Describe, t);
    let outcomes = per_partition(
        shard,
        (
            req.topics
                .iter()
                .map(|t| (&t.topic, t.partitions.as_slice())),
            describable,
        ),
        |p| p.partition,
        |tp, p| (tp, p.current_leader_epoch, p.leader_epoch),
        EpochEndOnOwner,
        failed,
    )
    .await;
    let topics = outcomes
        .into_iter()
        .map(|(name, row)| {
            let partitions = row
                .into_iter()
                .map(|(index, (epoch, end, error))| {
                    EpochEndOffset::default()
                        .with_partition(index)
                        .with_error_code(error)
                        .with_leader_epoch(epoch)
                        .with_end_offset(end)
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(name)
                .with_partitions(partitions)
        })
        .collect();
    encode(
        &OffsetForLeaderEpochResponse::default().with_topics(topics),
        version,
    )
}
