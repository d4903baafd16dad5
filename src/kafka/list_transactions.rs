//! ListTransactions v0–1 (KIP-664): the transactional ids every shard coordinates, filtered by
//! state, producer id and (v1) how long their transaction has run. State names Kafka does not
//! know come back as `unknown_state_filters` and match nothing. v2's id pattern (a Java
//! regular expression, KIP-1152) is not served: clients ask for v1 and filter themselves.

use super::authorize::{self, Caller};
use super::{decode, encode, str_bytes, Reply};
use crate::security::acl::{Operation, ResourceType};
use crate::shard::Shard;
use crate::txn::service;
use crate::txn::state::{ListFilter, State};
use bytes::Bytes;
use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, TransactionalId,
};
use std::rc::Rc;

pub async fn handle(
    shard: &Rc<Shard>,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let req: ListTransactionsRequest = decode(body, version)?;
    let mut states = Vec::new();
    let mut unknown = Vec::new();
    for name in &req.state_filters {
        match State::from_name(name) {
            Some(state) => states.push(state),
            None => unknown.push(name.clone()),
        }
    }
    let mut response = ListTransactionsResponse::default().with_unknown_state_filters(unknown);
    if states.is_empty() && !req.state_filters.is_empty() {
        // Only unknown states were asked for: nothing can match.
        return encode(&response, version);
    }
    let filter = ListFilter {
        states,
        producer_ids: req.producer_id_filters.iter().map(|p| p.0).collect(),
        min_duration_ms: req.duration_filter,
    };
    response = match service::list_all(shard, filter).await {
        Ok(listed) => response.with_transaction_states(
            listed
                .into_iter()
                .filter(|(id, _, _)| {
                    authorize::permits(
                        shard,
                        caller,
                        Operation::Describe,
                        ResourceType::TransactionalId,
                        id,
                    )
                })
                .map(|(id, producer_id, state)| {
                    TransactionState::default()
                        .with_transactional_id(TransactionalId(str_bytes(&id)))
                        .with_producer_id(ProducerId(producer_id))
                        .with_transaction_state(str_bytes(state.name()))
                })
                .collect(),
        ),
        Err(e) => response.with_error_code(e.code()),
    };
    encode(&response, version)
}
