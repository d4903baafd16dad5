//! A node's transaction calls to other nodes, over their Kafka listeners as Kafka's brokers
//! make them: WriteTxnMarkers to a partition's leader (`markers.rs`), and AddPartitionsToTxn
//! v4's verification (KIP-890 part 1) or addition (part 2) from a partition leader or group
//! coordinator to the transactional id's coordinator. Each shard keeps idle connections per node for reuse, and
//! bounds its calls in flight: a caller past the bound waits for one to finish.

use super::markers::Marker;
use super::ops::Verify;
use super::service::{route, state_partition, Txns, TXN_STATE_TOPIC};
use crate::rpc::kafka_client::KafkaClient;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ProducerId, TopicName, TransactionalId,
    WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::{Request, StrBytes};
use kafka_protocol::ResponseError;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

/// Calls a shard has in flight to other nodes at most.
const MAX_CALLS: u64 = 64;
/// Idle connections a shard keeps per node.
const MAX_IDLE_PER_NODE: usize = 8;
/// How long a call waits for its answer (a marker's commit included).
const CALL_LIMIT: Duration = Duration::from_secs(35);
const CLIENT_ID: &str = "sluice-txn-coordinator";
/// WriteTxnMarkers' one version (v0 went with Kafka 4.0).
const WRITE_TXN_MARKERS_VERSION: i16 = 1;
/// AddPartitionsToTxn's first version with verification (brokers only).
pub const VERIFY_VERSION: i16 = 4;

/// One shard's connections to other nodes.
pub struct Remote {
    idle: RefCell<HashMap<String, Vec<KafkaClient>>>,
    calls: glommio::sync::Semaphore,
}

impl Default for Remote {
    fn default() -> Remote {
        Remote {
            idle: RefCell::new(HashMap::new()),
            calls: glommio::sync::Semaphore::new(MAX_CALLS),
        }
    }
}

/// Sends `req` to node `node`'s Kafka listener and waits for its response. Err: the node is
/// not known live, or the call failed (its connection is then dropped).
async fn call<R: Request>(
    txns: &Txns,
    node: i32,
    version: i16,
    req: &R,
) -> std::io::Result<R::Response> {
    let shard = &txns.shard;
    let target = shard
        .inter_broker_target(node)
        .ok_or_else(|| std::io::Error::other(format!("node {node} is not live")))?;
    let remote = &txns.remote;
    if remote.calls.available() == 0 {
        log::debug!(
            "shard {}: {MAX_CALLS} transaction calls to other nodes in flight; waiting",
            shard.id
        );
    }
    let _permit = remote
        .calls
        .acquire_permit(1)
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let pooled = remote
        .idle
        .borrow_mut()
        .get_mut(&target.addr)
        .and_then(Vec::pop);
    let pooled = pooled.filter(|c| c.target == target);
    let mut client = pooled.unwrap_or_else(|| {
        let login = txns.shard.login.clone();
        KafkaClient::new(target.clone(), CLIENT_ID, login)
    });
    let answer = client.call(version, req, CALL_LIMIT).await;
    if answer.is_ok() {
        let mut idle = remote.idle.borrow_mut();
        let kept = idle.entry(target.addr).or_default();
        if kept.len() < MAX_IDLE_PER_NODE {
            kept.push(client);
        }
    }
    answer
}

/// Writes `marker` on node `leader` (WriteTxnMarkers) and waits for its commit there.
pub async fn write_marker(
    txns: &Rc<Txns>,
    leader: i32,
    topic: &str,
    marker: &Marker,
) -> Result<(), ResponseError> {
    let req = WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(marker.producer_id))
        .with_producer_epoch(marker.producer_epoch)
        .with_transaction_result(marker.commit)
        .with_coordinator_epoch(marker.coordinator_epoch)
        .with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(TopicName(str_bytes(topic)))
            .with_partition_indexes(vec![marker.tp.partition])])]);
    let resp = call(txns, leader, WRITE_TXN_MARKERS_VERSION, &req)
        .await
        .map_err(|e| {
            log::debug!("WriteTxnMarkers to node {leader}: {e}");
            ResponseError::NotLeaderOrFollower
        })?;
    let code = resp
        .markers
        .iter()
        .flat_map(|m| m.topics.iter().flat_map(|t| t.partitions.iter()))
        .find(|p| p.partition_index == marker.tp.partition)
        .map_or(ResponseError::UnknownServerError.code(), |p| p.error_code);
    result_of(code)
}

/// An error code as an outcome (0: Ok).
pub fn result_of(code: i16) -> Result<(), ResponseError> {
    ResponseError::try_from_code(code).map_or(Ok(()), Err)
}

/// Whether each partition of `verify` is in the producer's ongoing transaction (added first
/// with `verify.add`), asked of the id's coordinator: this node's (over the mesh) or another
/// node's (AddPartitionsToTxn v4, `verify_only` unless adding). Err: no coordinator could answer now (COORDINATOR_NOT_AVAILABLE,
/// NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS).
pub async fn verify(
    txns: &Rc<Txns>,
    verify: Verify,
) -> Result<Vec<Result<(), ResponseError>>, ResponseError> {
    let shard = &txns.shard;
    let catalog = shard.catalog();
    let topic = catalog
        .topics
        .get(TXN_STATE_TOPIC)
        .ok_or(ResponseError::CoordinatorNotAvailable)?;
    let partition = state_partition(&verify.id, topic.record.partitions);
    let coordinator = catalog.leader_of(topic, partition);
    if coordinator == catalog.here.node_id {
        return route(txns, verify).await;
    }
    let req = verify_request(&verify);
    let resp = call(txns, coordinator, VERIFY_VERSION, &req)
        .await
        .map_err(|e| {
            log::debug!("verifying {} with node {coordinator}: {e}", verify.id);
            ResponseError::CoordinatorNotAvailable
        })?;
    verdicts(&verify, &resp)
}

fn verify_request(verify: &Verify) -> AddPartitionsToTxnRequest {
    let mut topics: Vec<AddPartitionsToTxnTopic> = Vec::new();
    for (name, index) in &verify.partitions {
        match topics.iter_mut().find(|t| t.name.0.as_str() == name) {
            Some(t) => t.partitions.push(*index),
            None => topics.push(
                AddPartitionsToTxnTopic::default()
                    .with_name(TopicName(str_bytes(name)))
                    .with_partitions(vec![*index]),
            ),
        }
    }
    let txn = AddPartitionsToTxnTransaction::default()
        .with_transactional_id(TransactionalId(str_bytes(&verify.id)))
        .with_producer_id(ProducerId(verify.producer_id))
        .with_producer_epoch(verify.epoch)
        .with_verify_only(!verify.add)
        .with_topics(topics);
    AddPartitionsToTxnRequest::default().with_transactions(vec![txn])
}

/// The coordinator's answer per partition of `verify`, in its order. A partition it did not
/// answer counts as not verified.
fn verdicts(
    verify: &Verify,
    resp: &AddPartitionsToTxnResponse,
) -> Result<Vec<Result<(), ResponseError>>, ResponseError> {
    if resp.error_code != 0 {
        return result_of(resp.error_code).map(|()| Vec::new());
    }
    let answered = resp
        .results_by_transaction
        .iter()
        .find(|r| r.transactional_id.0.as_str() == verify.id);
    let code_of = |name: &str, index: i32| {
        let topic = answered?
            .topic_results
            .iter()
            .find(|t| t.name.0.as_str() == name)?;
        let p = topic
            .results_by_partition
            .iter()
            .find(|p| p.partition_index == index)?;
        Some(p.partition_error_code)
    };
    let mut out = Vec::with_capacity(verify.partitions.len());
    for (name, index) in &verify.partitions {
        let code = code_of(name, *index).unwrap_or(ResponseError::InvalidTxnState.code());
        match result_of(code) {
            // The coordinator itself could not answer: the whole verification waits.
            Err(
                e @ (ResponseError::NotCoordinator
                | ResponseError::CoordinatorNotAvailable
                | ResponseError::CoordinatorLoadInProgress),
            ) => return Err(e),
            verdict => out.push(verdict),
        }
    }
    Ok(out)
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::add_partitions_to_txn_response::{
        AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
    };

    fn verify() -> Verify {
        Verify {
            id: "t".to_string(),
            producer_id: 7,
            epoch: 3,
            partitions: vec![("a".into(), 0), ("b".into(), 1), ("a".into(), 2)],
            add: false,
        }
    }

    fn answered(codes: &[(&str, i32, i16)]) -> AddPartitionsToTxnResponse {
        let mut topics: Vec<AddPartitionsToTxnTopicResult> = Vec::new();
        for &(name, index, code) in codes {
            let p = AddPartitionsToTxnPartitionResult::default()
                .with_partition_index(index)
                .with_partition_error_code(code);
            match topics.iter_mut().find(|t| t.name.0.as_str() == name) {
                Some(t) => t.results_by_partition.push(p),
                None => topics.push(
                    AddPartitionsToTxnTopicResult::default()
                        .with_name(TopicName(str_bytes(name)))
                        .with_results_by_partition(vec![p]),
                ),
            }
        }
        AddPartitionsToTxnResponse::default().with_results_by_transaction(vec![
            AddPartitionsToTxnResult::default()
                .with_transactional_id(TransactionalId(str_bytes("t")))
                .with_topic_results(topics),
        ])
    }

    #[test]
    fn the_request_groups_partitions_by_topic_and_only_verifies() {
        let req = verify_request(&verify());
        let [txn] = &req.transactions[..] else {
            panic!("one transaction")
        };
        assert!(txn.verify_only);
        assert_eq!((txn.producer_id.0, txn.producer_epoch), (7, 3));
        let topics: Vec<(&str, &[i32])> = txn
            .topics
            .iter()
            .map(|t| (t.name.0.as_str(), &t.partitions[..]))
            .collect();
        assert_eq!(topics, vec![("a", &[0, 2][..]), ("b", &[1][..])]);
        let add = Verify {
            add: true,
            ..verify()
        };
        assert!(!verify_request(&add).transactions[0].verify_only);
    }

    #[test]
    fn each_partition_gets_its_own_verdict_in_the_asked_order() {
        let fenced = ResponseError::ProducerFenced.code();
        let resp = answered(&[("a", 2, fenced), ("b", 1, 0), ("a", 0, 0)]);
        let got = verdicts(&verify(), &resp).unwrap();
        assert_eq!(
            got,
            vec![Ok(()), Ok(()), Err(ResponseError::ProducerFenced)]
        );
    }

    #[test]
    fn a_partition_left_unanswered_is_not_verified() {
        let resp = answered(&[("a", 0, 0), ("b", 1, 0)]);
        let got = verdicts(&verify(), &resp).unwrap();
        assert_eq!(got[2], Err(ResponseError::InvalidTxnState));
    }

    #[test]
    fn a_coordinator_that_cannot_answer_fails_the_whole_verification() {
        let moving = ResponseError::NotCoordinator.code();
        let resp = answered(&[("a", 0, 0), ("b", 1, moving), ("a", 2, 0)]);
        assert_eq!(
            verdicts(&verify(), &resp),
            Err(ResponseError::NotCoordinator)
        );
        let refused = AddPartitionsToTxnResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
        assert_eq!(
            verdicts(&verify(), &refused),
            Err(ResponseError::ClusterAuthorizationFailed)
        );
    }
}
