//! DescribeProducers v0 (KIP-664): the idempotent and transactional producers a partition's
//! leader has state for: epoch, last sequence, when it last wrote, and where its ongoing
//! transaction began. `kafka-transactions describe-producers`, `find-hanging` and `abort` read
//! it. Answered by the leader only (NOT_LEADER_OR_FOLLOWER elsewhere), for callers that may
//! read the topic.

use super::authorize::{self, Caller};
use super::{decode, encode, per_partition, Reply};
use crate::partition::TopicPartition;
use crate::security::acl::Operation;
use crate::shard::mesh::Request;
use crate::shard::Shard;
use crate::storage::producer_state::ProducerEntry;
use bytes::Bytes;
use futures::future::LocalBoxFuture;
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};
use kafka_protocol::ResponseError;
use std::rc::Rc;
use std::sync::Arc;

/// A partition's answer: its error code and producers.
type Described = (i16, Arc<[ProducerEntry]>);

/// Reads the producer states of partitions of one shard.
struct DescribeOnOwner(Vec<TopicPartition>);

impl Request for DescribeOnOwner {
    type Reply = Vec<Described>;
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, Vec<Described>> {
        Box::pin(async move {
            let unknown = ResponseError::UnknownTopicOrPartition.code();
            self.0
                .into_iter()
                .map(|tp| match shard.partition(tp) {
                    Some(p) => (0, p.producers().into()),
                    None => (unknown, Arc::from([])),
                })
                .collect()
        })
    }
}

pub async fn handle(
    shard: &Rc<Shard>,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let req: DescribeProducersRequest = decode(body, version)?;
    let readable = |t: &str| authorize::topic(shard, caller, Operation::Read, t);
    let outcomes = per_partition(
        shard,
        (
            req.topics
                .iter()
                .map(|t| (&t.name, t.partition_indexes.as_slice())),
            readable,
        ),
        |&p| p,
        |tp, _| tp,
        DescribeOnOwner,
        |e| (e.code(), Arc::from([])),
    )
    .await;
    let topics = outcomes
        .into_iter()
        .map(|(name, row)| {
            let partitions = row
                .into_iter()
                .map(|(index, (error_code, producers))| {
                    PartitionResponse::default()
                        .with_partition_index(index)
                        .with_error_code(error_code)
                        .with_active_producers(producers.iter().map(producer_state).collect())
                })
                .collect();
            TopicResponse::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect();
    encode(
        &DescribeProducersResponse::default().with_topics(topics),
        version,
    )
}

fn producer_state(p: &ProducerEntry) -> ProducerState {
    ProducerState::default()
        .with_producer_id(ProducerId(p.producer_id))
        .with_producer_epoch(i32::from(p.epoch))
        .with_last_sequence(p.batches.last().map_or(-1, |b| b.last_sequence))
        .with_last_timestamp(p.last_update_ms)
        .with_coordinator_epoch(p.coordinator_epoch)
        .with_current_txn_start_offset(p.txn_first_offset.unwrap_or(-1))
}
