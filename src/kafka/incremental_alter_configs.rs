//! IncrementalAlterConfigs: SET, DELETE, APPEND or SUBTRACT single keys of a topic's config
//! overrides (what `kafka-configs --alter` and the AdminClient's `incremental_alter_configs`
//! send). See `alter_configs.rs` for how a change is applied.

use super::alter_configs::{alter, not_a_topic, TOPIC};
use super::{decode, encode, str_bytes, Reply};
use crate::shard::messages::ConfigChange;
use crate::shard::Shard;
use crate::storage::catalog::ConfigOp;
use bytes::Bytes;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use kafka_protocol::ResponseError;
use std::rc::Rc;

pub async fn handle(shard: &Rc<Shard>, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: IncrementalAlterConfigsRequest = decode(body, version)?;
    let resources = req
        .resources
        .iter()
        .map(|r| {
            if r.resource_type != TOPIC {
                return Err(not_a_topic());
            }
            let edits = r
                .configs
                .iter()
                .map(|c| {
                    let op = ConfigOp::from_code(c.config_operation).ok_or_else(|| {
                        (
                            ResponseError::InvalidRequest.code(),
                            Some(format!("unknown config operation {}", c.config_operation)),
                        )
                    })?;
                    Ok((
                        c.name.to_string(),
                        op,
                        c.value.as_ref().map(|v| v.to_string()),
                    ))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((
                r.resource_name.to_string(),
                ConfigChange::Incremental(edits),
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
        &IncrementalAlterConfigsResponse::default().with_responses(responses),
        version,
    )
}
