//! DescribeTransactions v0 (KIP-664): each transactional id's state, producer, timeout, start
//! time and partitions, from its coordinator. An id nobody has initialised answers
//! TRANSACTIONAL_ID_NOT_FOUND; one whose coordinator is not here NOT_COORDINATOR.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, str_bytes, Reply};
use crate::security::acl::Operation;
use crate::txn::state::TxnRecord;
use crate::txn::{ops, service};
use bytes::Bytes;
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, TopicName,
};
use kafka_protocol::ResponseError;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: DescribeTransactionsRequest = decode(body, version)?;
    let described = req.transactional_ids.iter().map(|id| async move {
        let describe = ops::Describe {
            id: id.0.to_string(),
        };
        let state = TransactionState::default().with_transactional_id(id.clone());
        if !authorize::transactional_id(shard, caller, Operation::Describe, &id.0) {
            let code = ResponseError::TransactionalIdAuthorizationFailed.code();
            return state.with_error_code(code);
        }
        match service::route(&services.txns, describe).await {
            Ok(Some(r)) => described(state, &r),
            Ok(None) => state.with_error_code(ResponseError::TransactionalIdNotFound.code()),
            Err(e) => state.with_error_code(e.code()),
        }
    });
    let states = futures::future::join_all(described).await;
    encode(
        &DescribeTransactionsResponse::default().with_transaction_states(states),
        version,
    )
}

fn described(state: TransactionState, r: &TxnRecord) -> TransactionState {
    // The partitions come sorted by topic, then index: one entry per run of a topic.
    let mut topics: Vec<TopicData> = Vec::new();
    for (topic, index) in &r.partitions {
        match topics.last_mut() {
            Some(t) if t.topic.0.as_str() == topic => t.partitions.push(*index),
            _ => topics.push(
                TopicData::default()
                    .with_topic(TopicName(str_bytes(topic)))
                    .with_partitions(vec![*index]),
            ),
        }
    }
    state
        .with_transaction_state(str_bytes(r.state.name()))
        .with_transaction_timeout_ms(r.timeout_ms)
        .with_transaction_start_time_ms(r.start_ms)
        .with_producer_id(ProducerId(r.producer_id))
        .with_producer_epoch(r.producer_epoch)
        .with_topics(topics)
}
