//! IncrementalAlterConfigs: SET, DELETE, APPEND or SUBTRACT single keys of a topic's config
//! overrides (what `kafka-configs --alter` and the AdminClient's `incremental_alter_configs`
//! send). See `alter_configs.rs` for how a change is applied.

use super::alter_configs::{alter, resource_responses, Outcome, Resource};
use super::Caller;
use super::Services;
use super::{decode, encode, Reply};
use crate::controller::ConfigChange;
use crate::storage::catalog::ConfigOp;
use bytes::Bytes;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use kafka_protocol::ResponseError;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let req: IncrementalAlterConfigsRequest = decode(body, version)?;
    let resources = req
        .resources
        .iter()
        .map(|r| {
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
                .collect::<Result<Vec<_>, _>>()
                .and_then(named_once);
            Resource {
                resource_type: r.resource_type,
                name: r.resource_name.to_string(),
                change: edits.map(ConfigChange::Incremental),
            }
        })
        .collect();
    let outcomes = alter(services, caller, resources, req.validate_only).await;
    let responses = resource_responses!(AlterConfigsResourceResponse, req.resources, outcomes);
    encode(
        &IncrementalAlterConfigsResponse::default().with_responses(responses),
        version,
    )
}

/// One key's change: its name, the operation and the value.
type Edit = (String, ConfigOp, Option<String>);

/// A key named twice in one resource is INVALID_REQUEST for the whole resource, as Kafka
/// answers it (before any key is checked).
fn named_once(edits: Vec<Edit>) -> Result<Vec<Edit>, Outcome> {
    for (i, (name, _, _)) in edits.iter().enumerate() {
        if edits[..i].iter().any(|(k, _, _)| k == name) {
            let message = format!("{name} is changed twice in one request");
            return Err((ResponseError::InvalidRequest.code(), Some(message)));
        }
    }
    Ok(edits)
}
