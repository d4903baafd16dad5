//! AlterConfigs: replaces a topic's config overrides (or a broker scope's dynamic configs, see
//! `storage/broker_config.rs`) with the given set; keys left out go back to their defaults. IncrementalAlterConfigs (`incremental_alter_configs.rs`) edits them key by
//! key. Both are executed by the controller, which validates the result like CreateTopics does,
//! persists it, and installs it on every shard; open partitions use the new settings from their
//! next append or roll, and retention from its next pass.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, Reply};
use crate::controller::{self, ConfigChange, ControllerOp};
use crate::security::acl::Operation;
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse};
use kafka_protocol::ResponseError;

/// Both APIs answer (error, message, type, name) per resource, each in a response type of its
/// own with the same builder methods.
macro_rules! resource_responses {
    ($response:ty, $resources:expr, $outcomes:expr) => {
        $resources
            .iter()
            .zip($outcomes)
            .map(|(r, (code, message))| {
                <$response>::default()
                    .with_error_code(code)
                    .with_error_message(message.as_deref().map(super::str_bytes))
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name.clone())
            })
            .collect()
    };
}
pub(super) use resource_responses;

/// Kafka's resource types: a topic, and a broker (named by its node id, or "" for the
/// cluster-wide default). Broker loggers are not alterable here.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const GROUP: i8 = 32;

/// One resource's outcome: an error code and message.
pub(super) type Outcome = (i16, Option<String>);

/// A resource of either request: its type and name, and the change asked of it (or the outcome
/// already decided, for a malformed one).
pub(super) struct Resource {
    pub resource_type: i8,
    pub name: String,
    pub change: Result<ConfigChange, Outcome>,
}

/// Runs the changes on the controller: topics' in one operation, each broker scope's in one
/// of its own. One outcome per resource, in order.
pub(super) async fn alter(
    services: &Services,
    caller: &Caller,
    resources: Vec<Resource>,
    validate_only: bool,
) -> Vec<Outcome> {
    let shard = &services.shard;
    let mut decided = Vec::with_capacity(resources.len());
    let mut topics = Vec::new();
    let node = shard.config.node_id.to_string();
    for r in resources {
        let refused = |m: String| Some((ResponseError::InvalidRequest.code(), Some(m)));
        if let Some(denied) = configs_refusal(
            shard,
            caller,
            Operation::AlterConfigs,
            r.resource_type,
            &r.name,
        ) {
            decided.push(Some((denied.code(), None)));
            continue;
        }
        match (r.resource_type, r.change) {
            (_, Err(outcome)) => decided.push(Some(outcome)),
            (TOPIC, Ok(change)) => {
                decided.push(None);
                topics.push((r.name, change));
            }
            (BROKER, Ok(change)) if r.name.is_empty() || r.name == node => {
                let op = ControllerOp::AlterBrokerConfigs {
                    broker: r.name,
                    change,
                    validate_only,
                };
                decided.push(Some(submit_one(services, op).await));
            }
            (BROKER, Ok(_)) => decided.push(refused(format!("no broker {} here", r.name))),
            (other, Ok(_)) => {
                decided.push(refused(format!("resource type {other} cannot be altered")))
            }
        }
    }
    let n = topics.len();
    let outcomes = if n == 0 {
        Vec::new()
    } else {
        let op = ControllerOp::AlterConfigs {
            topics,
            validate_only,
        };
        match controller::submit(&services.controllers, op).await {
            Ok(o) => o,
            _ => vec![(ResponseError::NotController.code(), None); n],
        }
    };
    let mut outcomes = outcomes.into_iter();
    decided
        .into_iter()
        .map(|d| d.unwrap_or_else(|| outcomes.next().expect("one outcome per topic")))
        .collect()
}

/// The error for a caller without `op` (DESCRIBE_CONFIGS or ALTER_CONFIGS) on a config
/// resource: on the topic, or on the cluster for a broker's configs.
pub(super) fn configs_refusal(
    shard: &Shard,
    caller: &Caller,
    op: Operation,
    resource_type: i8,
    name: &str,
) -> Option<ResponseError> {
    match resource_type {
        TOPIC if !authorize::topic(shard, caller, op, name) => {
            Some(ResponseError::TopicAuthorizationFailed)
        }
        BROKER if !authorize::cluster(shard, caller, op) => {
            Some(ResponseError::ClusterAuthorizationFailed)
        }
        GROUP if !authorize::group(shard, caller, op, name) => {
            Some(ResponseError::GroupAuthorizationFailed)
        }
        _ => None,
    }
}

async fn submit_one(services: &Services, op: ControllerOp) -> Outcome {
    match controller::submit(&services.controllers, op).await {
        Ok(mut o) => o.pop().expect("one outcome for one scope"),
        Err(_) => (ResponseError::NotController.code(), None),
    }
}

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let req: AlterConfigsRequest = decode(body, version)?;
    let resources = req
        .resources
        .iter()
        .map(|r| {
            let overrides = r
                .configs
                .iter()
                .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
                .collect();
            Resource {
                resource_type: r.resource_type,
                name: r.resource_name.to_string(),
                change: Ok(ConfigChange::Replace(overrides)),
            }
        })
        .collect();
    let outcomes = alter(services, caller, resources, req.validate_only).await;
    let responses = resource_responses!(AlterConfigsResourceResponse, req.resources, outcomes);
    encode(
        &AlterConfigsResponse::default().with_responses(responses),
        version,
    )
}
