//! DescribeClientQuotas v0-1 (KIP-546): the quotas set for users, client ids and IPs. Sluice
//! sets none yet (AlterClientQuotas is not served), so every valid filter matches no entity;
//! `kafka-configs --describe --entity-type users` reads it beside the SCRAM credentials. A
//! filter Kafka refuses is refused with Kafka's error and the reason: an unknown entity type
//! with UNSUPPORTED_VERSION, a repeated one, an exact match without a name or an IP beside a
//! user or client id with INVALID_REQUEST. Needs
//! DESCRIBE_CONFIGS on the cluster.

use super::authorize::{self, Caller};
use super::{decode, encode, str_bytes, Reply};
use crate::security::acl::Operation;
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{DescribeClientQuotasRequest, DescribeClientQuotasResponse};
use kafka_protocol::ResponseError;
use std::rc::Rc;

/// The entity types a quota is set for.
const ENTITY_TYPES: [&str; 3] = ["user", "client-id", "ip"];
/// A component's match type: the entity named by `match` (the others: the default entity, any
/// entity with a name).
const MATCH_EXACT: i8 = 0;

pub fn handle(
    shard: &Rc<Shard>,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let req: DescribeClientQuotasRequest = decode(body, version)?;
    let response = DescribeClientQuotasResponse::default();
    let response = if !authorize::cluster(shard, caller, Operation::DescribeConfigs) {
        let code = ResponseError::ClusterAuthorizationFailed.code();
        response.with_error_code(code)
    } else if let Err((e, why)) = check_filter(&req.components) {
        response
            .with_error_code(e.code())
            .with_error_message(Some(str_bytes(&why)))
    } else {
        response.with_entries(Some(Vec::new()))
    };
    encode(&response, version)
}

fn invalid(why: String) -> (ResponseError, String) {
    (ResponseError::InvalidRequest, why)
}

/// Kafka's rules for a filter's components: the error and why, for the first it breaks.
fn check_filter(components: &[ComponentData]) -> Result<(), (ResponseError, String)> {
    let mut types: Vec<&str> = Vec::with_capacity(components.len());
    for c in components {
        let entity_type = c.entity_type.as_str();
        if !ENTITY_TYPES.contains(&entity_type) {
            // Kafka's answer to a type it does not know: UNSUPPORTED_VERSION.
            let why = format!("Custom entity type '{entity_type}' not supported");
            return Err((ResponseError::UnsupportedVersion, why));
        }
        if types.contains(&entity_type) {
            return Err(invalid(format!("duplicate entity type {entity_type:?}")));
        }
        if !(0..=2).contains(&c.match_type) {
            return Err(invalid(format!("unknown match type {}", c.match_type)));
        }
        if c.match_type == MATCH_EXACT && c._match.is_none() {
            return Err(invalid(format!(
                "an exact match of {entity_type:?} needs a name"
            )));
        }
        types.push(entity_type);
    }
    if types.contains(&"ip") && types.len() > 1 {
        let why = "an ip filter cannot be combined with user or client-id";
        return Err(invalid(why.to_string()));
    }
    Ok(())
}
