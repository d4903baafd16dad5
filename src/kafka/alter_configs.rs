//! AlterConfigs: replaces a topic's config overrides with the given set; keys left out go back
//! to their defaults. IncrementalAlterConfigs (`incremental_alter_configs.rs`) edits them key by
//! key. Both are executed by the controller, which validates the result like CreateTopics does,
//! persists it, and installs it on every shard; open partitions use the new settings from their
//! next append or roll, and retention from its next pass.

use super::{decode, encode, str_bytes, Reply};
use crate::shard::messages::{ConfigChange, ControllerOp, ShardReply, ShardRequest};
use crate::shard::{Shard, CONTROLLER_SHARD};
use bytes::Bytes;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse};
use kafka_protocol::ResponseError;
use std::rc::Rc;

/// Kafka's resource type for a topic; the others (broker, broker logger) are not alterable here.
pub(super) const TOPIC: i8 = 2;

/// One resource's outcome: an error code and message.
pub(super) type Outcome = (i16, Option<String>);

/// Why a resource other than a topic is refused.
pub(super) fn not_a_topic() -> Outcome {
    (
        ResponseError::InvalidRequest.code(),
        Some("only topic configs can be altered: broker settings come from the config file".into()),
    )
}

/// Runs the topic changes on the controller; `resources` holds either a topic change or the
/// outcome already decided for that resource. One outcome per resource, in order.
pub(super) async fn alter(
    shard: &Rc<Shard>,
    resources: Vec<Result<(String, ConfigChange), Outcome>>,
    validate_only: bool,
) -> Vec<Outcome> {
    let mut decided = Vec::with_capacity(resources.len());
    let mut topics = Vec::new();
    for r in resources {
        match r {
            Ok(topic) => {
                decided.push(None);
                topics.push(topic);
            }
            Err(outcome) => decided.push(Some(outcome)),
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
        match shard
            .call(CONTROLLER_SHARD, ShardRequest::Controller(op))
            .await
        {
            Ok(ShardReply::Controller(o)) => o,
            _ => vec![(ResponseError::NotController.code(), None); n],
        }
    };
    let mut outcomes = outcomes.into_iter();
    decided
        .into_iter()
        .map(|d| d.unwrap_or_else(|| outcomes.next().expect("one outcome per topic")))
        .collect()
}

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: AlterConfigsRequest = decode(body, version)?;
    let resources = req
        .resources
        .iter()
        .map(|r| {
            if r.resource_type != TOPIC {
                return Err(not_a_topic());
            }
            let overrides = r
                .configs
                .iter()
                .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
                .collect();
            Ok((
                r.resource_name.to_string(),
                ConfigChange::Replace(overrides),
            ))
        })
        .collect();
    let outcomes = alter(shard, resources, req.validate_only).await;
    let responses = req
        .resources
        .iter()
        .zip(outcomes)
        .map(|(r, (code, message))| {
            AlterConfigsResourceResponse::default()
                .with_error_code(code)
                .with_error_message(message.as_deref().map(str_bytes))
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone())
        })
        .collect();
    encode(
        &AlterConfigsResponse::default().with_responses(responses),
        version,
    )
}
