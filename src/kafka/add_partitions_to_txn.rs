//! AddPartitionsToTxn. v0–3, from clients: a transactional producer adds partitions to its
//! ongoing transaction before it writes to them. Every partition gets the request's one
//! outcome, as Kafka answers; unknown partitions fail the request (UNKNOWN_TOPIC_OR_PARTITION
//! for them, OPERATION_NOT_ATTEMPTED for the others). v4–5, from brokers (KIP-890): several
//! transactions at once, each either added or, with `verify_only`, checked: whether each
//! partition is in the producer's ongoing transaction, asked by a partition leader before it
//! takes transactional batches (`txn/remote.rs`).

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, Reply};
use crate::security::acl::Operation;
use crate::shard::Shard;
use crate::txn::{ops, service};
use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTransaction;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse};
use kafka_protocol::ResponseError;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: AddPartitionsToTxnRequest = decode(body, version)?;
    if version >= crate::txn::remote::VERIFY_VERSION {
        // Only brokers send the batched form (KIP-890): CLUSTER_ACTION.
        if !authorize::cluster(shard, caller, Operation::ClusterAction) {
            let code = ResponseError::ClusterAuthorizationFailed.code();
            let resp = AddPartitionsToTxnResponse::default().with_error_code(code);
            return encode(&resp, version);
        }
        return from_broker(services, version, &req).await;
    }
    let refused = refusals(shard, caller, &req);
    let wanted: Vec<(String, i32)> = req
        .v3_and_below_topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), *p)))
        .collect();
    let all_known = wanted.iter().all(|(t, p)| refused(t, *p).is_none());
    let outcome = if all_known {
        let add = ops::AddPartitions {
            id: req.v3_and_below_transactional_id.0.to_string(),
            producer_id: req.v3_and_below_producer_id.0,
            epoch: req.v3_and_below_producer_epoch,
            partitions: wanted,
        };
        match service::route(&services.txns, add).await {
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
                    let code = refused(&t.name, p).map_or(outcome, |e| e.code());
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

/// v4–5: each transaction added or verified; every partition answered.
/// A partition's own refusal (v3 and below), found before the coordinator is asked: the
/// transactional id refused (every partition's), the topic not writable, or unknown.
fn refusals(
    shard: &Shard,
    caller: &Caller,
    req: &AddPartitionsToTxnRequest,
) -> impl Fn(&str, i32) -> Option<ResponseError> {
    let catalog = shard.catalog();
    let id = &req.v3_and_below_transactional_id.0;
    let txn_denied = !authorize::transactional_id(shard, caller, Operation::Write, id);
    let mut writable = std::collections::HashMap::new();
    for t in &req.v3_and_below_topics {
        let w = authorize::topic(shard, caller, Operation::Write, &t.name.0);
        writable.insert(t.name.0.to_string(), w);
    }
    move |topic: &str, p: i32| {
        let known = catalog
            .topics
            .get(topic)
            .is_some_and(|t| t.has_partition(p));
        if txn_denied {
            Some(ResponseError::TransactionalIdAuthorizationFailed)
        } else if !writable[topic] {
            Some(ResponseError::TopicAuthorizationFailed)
        } else if !known {
            Some(ResponseError::UnknownTopicOrPartition)
        } else {
            None
        }
    }
}

async fn from_broker(
    services: &Services,
    version: i16,
    req: &AddPartitionsToTxnRequest,
) -> anyhow::Result<Reply> {
    if crate::rpc::cut_off() {
        anyhow::bail!(
            "a broker's AddPartitionsToTxn while cut off from the other nodes (fault hook)"
        );
    }
    let answers = req
        .transactions
        .iter()
        .map(|t| answer(services, t, version));
    let results = futures::future::join_all(answers).await;
    let resp = AddPartitionsToTxnResponse::default().with_results_by_transaction(results);
    encode(&resp, version)
}

/// The first version whose verification answers TRANSACTION_ABORTABLE where older ones answer
/// INVALID_TXN_STATE (KIP-890: the producer aborts and goes on, instead of failing).
const ABORTABLE_VERSION: i16 = 5;

async fn answer(
    services: &Services,
    t: &AddPartitionsToTxnTransaction,
    version: i16,
) -> AddPartitionsToTxnResult {
    let id = t.transactional_id.0.to_string();
    let partitions: Vec<(String, i32)> = t
        .topics
        .iter()
        .flat_map(|topic| {
            topic
                .partitions
                .iter()
                .map(|p| (topic.name.0.to_string(), *p))
        })
        .collect();
    let n = partitions.len();
    let verify = ops::Verify {
        id,
        producer_id: t.producer_id.0,
        epoch: t.producer_epoch,
        partitions,
        add: !t.verify_only,
    };
    let outcomes = service::route(&services.txns, verify)
        .await
        .unwrap_or_else(|e| vec![Err(e); n]);
    let mut outcomes = outcomes.into_iter();
    let topic_results = t
        .topics
        .iter()
        .map(|topic| {
            let results = topic
                .partitions
                .iter()
                .map(|&p| {
                    let code = match outcomes.next().and_then(Result::err) {
                        None => 0,
                        Some(ResponseError::InvalidTxnState) if version >= ABORTABLE_VERSION => {
                            ResponseError::TransactionAbortable.code()
                        }
                        Some(e) => e.code(),
                    };
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(p)
                        .with_partition_error_code(code)
                })
                .collect();
            AddPartitionsToTxnTopicResult::default()
                .with_name(topic.name.clone())
                .with_results_by_partition(results)
        })
        .collect();
    AddPartitionsToTxnResult::default()
        .with_transactional_id(t.transactional_id.clone())
        .with_topic_results(topic_results)
}
