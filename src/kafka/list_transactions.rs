//! ListTransactions v0–2 (KIP-664): the transactional ids every shard coordinates, filtered by
//! state, producer id, (v1) how long their transaction has run and (v2, KIP-1152) a regular
//! expression the whole id must match. State names Kafka does not know come back as
//! `unknown_state_filters` and match nothing. Patterns are the regex crate's syntax (RE2's),
//! which shares Java's for everything but backreferences and lookaround.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, str_bytes, Reply};
use crate::security::acl::{Operation, ResourceType};
use crate::txn::service;
use crate::txn::state::{ListFilter, State};
use bytes::Bytes;
use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, TransactionalId,
};
use kafka_protocol::ResponseError;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: ListTransactionsRequest = decode(body, version)?;
    let pattern = match id_pattern(req.transactional_id_pattern.as_deref()) {
        Ok(pattern) => pattern,
        Err(e) => {
            let refused = ListTransactionsResponse::default().with_error_code(e.code());
            return encode(&refused, version);
        }
    };
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
    response = match service::list_all(&services.txns, filter).await {
        Ok(listed) => response.with_transaction_states(
            listed
                .into_iter()
                .filter(|(id, _, _)| pattern.as_ref().is_none_or(|p| p.is_match(id)))
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

/// Longest id pattern taken: a regular expression compiles in time and memory linear in it.
const MAX_PATTERN_BYTES: usize = 4096;

/// The compiled id pattern, anchored to match whole ids; None (no filter) for a null or empty
/// one. INVALID_REGULAR_EXPRESSION for one that does not compile or is too long.
fn id_pattern(pattern: Option<&str>) -> Result<Option<regex::Regex>, ResponseError> {
    match pattern {
        None | Some("") => Ok(None),
        Some(p) if p.len() > MAX_PATTERN_BYTES => Err(ResponseError::InvalidRegularExpression),
        Some(p) => regex::Regex::new(&format!("^(?:{p})$"))
            .map(Some)
            .map_err(|_| ResponseError::InvalidRegularExpression),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_pattern_matches_whole_ids() {
        let p = id_pattern(Some("t-.*")).unwrap().unwrap();
        assert!(p.is_match("t-1") && !p.is_match("xt-1"));
        let p = id_pattern(Some("a|b")).unwrap().unwrap();
        assert!(p.is_match("a") && p.is_match("b") && !p.is_match("ab"));
        assert!(id_pattern(None).unwrap().is_none());
        assert!(id_pattern(Some("")).unwrap().is_none());
        assert_eq!(
            id_pattern(Some("(")).unwrap_err(),
            ResponseError::InvalidRegularExpression
        );
    }
}
