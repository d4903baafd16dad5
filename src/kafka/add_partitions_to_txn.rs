//! AddPartitionsToTxn v0–3: a transactional producer adds partitions to its ongoing
//! transaction before it writes to them. Every partition gets the request's one outcome, as
//! Kafka answers; unknown partitions fail the request (UNKNOWN_TOPIC_OR_PARTITION for them,
//! OPERATION_NOT_ATTEMPTED for the others).

use super::{decode, encode, Reply};
use crate::shard::Shard;
use crate::txn::{ops, service};
use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse};
use kafka_protocol::ResponseError;
use std::rc::Rc;

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: AddPartitionsToTxnRequest = decode(body, version)?;
    let catalog = shard.catalog();
    let known = |topic: &str, p: i32| {
        catalog
            .topics
            .get(topic)
            .is_some_and(|t| t.has_partition(p))
    };
    let wanted: Vec<(String, i32)> = req
        .v3_and_below_topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), *p)))
        .collect();
    let all_known = wanted.iter().all(|(t, p)| known(t, *p));
    let outcome = if all_known {
        let add = ops::AddPartitions {
            id: req.v3_and_below_transactional_id.0.to_string(),
            producer_id: req.v3_and_below_producer_id.0,
            epoch: req.v3_and_below_producer_epoch,
            partitions: wanted,
        };
        match service::route(shard, add).await {
            Ok(Ok(())) => 0,
            Ok(Err(e)) | Err(e) => super::txn_error_code(e, version, 2),
        }
    } else {
        ResponseError::OperationNotAttempted.code()
    };
    let topics = req
        .v3_and_below_topics
        .iter()
        .map(|t| {
            let results = t
                .partitions
                .iter()
                .map(|&p| {
                    let code = if known(&t.name, p) {
                        outcome
                    } else {
                        ResponseError::UnknownTopicOrPartition.code()
                    };
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(p)
                        .with_partition_error_code(code)
                })
                .collect();
            AddPartitionsToTxnTopicResult::default()
                .with_name(t.name.clone())
                .with_results_by_partition(results)
        })
        .collect();
    let resp = AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(topics);
    encode(&resp, version)
}
