//! FindCoordinator: a group is coordinated by the leader of its `__consumer_offsets` partition
//! (on a single node, this broker, on the shard that owns the partition, which the broker
//! routes to internally). A transactional id is coordinated by the leader of its
//! `__transaction_state` partition, a topic created at the first such request (as Kafka does;
//! in a cluster once `transactions.state_log_replication_factor` brokers are live, to hold
//! every replica). v4 batches keys.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, str_bytes, Reply};
use crate::controller::{self, ControllerOp, NewTopic};
use crate::group::{offsets_partition, OFFSETS_TOPIC};
use crate::security::acl::{Operation, ResourceType};
use crate::txn::service::{state_partition, TXN_STATE_TOPIC};
use bytes::Bytes;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::ResponseError;

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

/// Where a key's coordinator is: Ok((node, host, port)) or Err(error code). Needs DESCRIBE on
/// the group or transactional id.
fn coordinator_of(
    services: &Services,
    caller: &Caller,
    key_type: i8,
    key: &str,
) -> Result<(i32, String, i32), i16> {
    let shard = &services.shard;
    let not_available = ResponseError::CoordinatorNotAvailable.code();
    let (kind, denied) = match key_type {
        KEY_TYPE_GROUP => (ResourceType::Group, ResponseError::GroupAuthorizationFailed),
        _ => (
            ResourceType::TransactionalId,
            ResponseError::TransactionalIdAuthorizationFailed,
        ),
    };
    if !authorize::allowed(shard, caller, Operation::Describe, kind, key) {
        return Err(denied.code());
    }
    let catalog = shard.catalog();
    let (topic, partition) = match key_type {
        // Groups need `__consumer_offsets` (created at first start, in a cluster once enough
        // brokers registered) and a leader for the group's partition; until then clients retry.
        KEY_TYPE_GROUP => {
            let topic = catalog.topics.get(OFFSETS_TOPIC).ok_or(not_available)?;
            (topic, offsets_partition(key, topic.record.partitions))
        }
        KEY_TYPE_TRANSACTION => match catalog.topics.get(TXN_STATE_TOPIC) {
            Some(topic) => (topic, state_partition(key, topic.record.partitions)),
            None => {
                // In a cluster, only once enough brokers are live for its replicas (Kafka
                // waits for `transaction.state.log.replication.factor` brokers).
                let live = controller::internal_topic_brokers_live(shard, TXN_STATE_TOPIC);
                if !catalog.is_clustered() || live {
                    create_txn_state_topic(services);
                }
                return Err(not_available);
            }
        },
        _ => return Err(ResponseError::InvalidRequest.code()),
    };
    let leader = catalog.leader_of(topic, partition);
    if leader == catalog.here.node_id {
        let (host, port) = caller.listener.advertised();
        return Ok((leader, host, port));
    }
    let endpoint = catalog.broker_endpoint(leader, &caller.listener.name);
    let endpoint = endpoint.ok_or(not_available)?;
    Ok((leader, endpoint.host.clone(), endpoint.port))
}

/// Creates `__transaction_state` (compacted, `transactions.state_partitions` partitions, the
/// internal topics' default replication) in the background, through the active controller in
/// a cluster; FindCoordinator answers COORDINATOR_NOT_AVAILABLE meanwhile.
fn create_txn_state_topic(services: &Services) {
    let shard = &services.shard;
    let topic = NewTopic {
        name: TXN_STATE_TOPIC.to_string(),
        partitions: shard.config.transactions.state_partitions,
        replication_factor: -1,
        assignments: Vec::new(),
        configs: vec![("cleanup.policy".to_string(), "compact".to_string())],
    };
    let op = ControllerOp::CreateTopics {
        topics: vec![topic],
        validate_only: false,
    };
    let controllers = services.controllers.clone();
    glommio::spawn_local(async move {
        let outcomes = controller::submit(&controllers, op).await;
        for (code, message) in outcomes.unwrap_or_default() {
            // TOPIC_ALREADY_EXISTS: another request created it first.
            if code != 0 && code != ResponseError::TopicAlreadyExists.code() {
                log::error!("cannot create {TXN_STATE_TOPIC}: {code} {message:?}");
            }
        }
    })
    .detach();
}

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let req: FindCoordinatorRequest = decode(body, version)?;
    let answer = |key: &str| match coordinator_of(services, caller, req.key_type, key) {
        Ok(found) => (0, found),
        Err(code) => (code, (-1, String::new(), -1)),
    };
    let resp = if version >= 4 {
        let coordinators = req
            .coordinator_keys
            .iter()
            .map(|k| {
                let (error, (node, host, port)) = answer(k);
                Coordinator::default()
                    .with_key(k.clone())
                    .with_node_id(BrokerId(node))
                    .with_host(str_bytes(&host))
                    .with_port(port)
                    .with_error_code(error)
            })
            .collect();
        FindCoordinatorResponse::default().with_coordinators(coordinators)
    } else {
        let (error, (node, host, port)) = answer(&req.key);
        FindCoordinatorResponse::default()
            .with_error_code(error)
            .with_node_id(BrokerId(node))
            .with_host(str_bytes(&host))
            .with_port(port)
    };
    encode(&resp, version)
}
