//! CreateAcls (v0–3): adds ACLs through the controller (the catalog, or the metadata log in a
//! cluster); they apply on every shard as soon as the controller installs them. Needs ALTER on
//! the cluster; SECURITY_DISABLED where authorization is off, as Kafka without an authorizer.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, str_bytes, Reply};
use crate::controller::security_ops::SecurityChange;
use crate::controller::Outcome;
use crate::security::acl::{self, Acl};
use crate::shard::Shard;
use crate::storage::security::AclRecord;
use bytes::Bytes;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::{CreateAclsRequest, CreateAclsResponse};
use kafka_protocol::ResponseError;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: CreateAclsRequest = decode(body, version)?;
    let refused = refusal(shard, caller, acl::Operation::Alter);
    let items: Vec<Result<AclRecord, Outcome>> = req
        .creations
        .iter()
        .map(|c| match &refused {
            Some(e) => Err(e.clone()),
            None => parse(c).map(|a| AclRecord::new(&a)),
        })
        .collect();
    let changes: Vec<SecurityChange> = items
        .iter()
        .filter_map(|i| i.as_ref().ok().cloned().map(SecurityChange::CreateAcl))
        .collect();
    let mut done = super::submit_security(&services.controllers, changes)
        .await
        .into_iter();
    let results = items
        .into_iter()
        .map(|item| {
            let (code, message) = match item {
                Ok(_) => done.next().expect("one outcome per change"),
                Err(e) => e,
            };
            AclCreationResult::default()
                .with_error_code(code)
                .with_error_message(message.as_deref().map(str_bytes))
        })
        .collect();
    encode(
        &CreateAclsResponse::default().with_results(results),
        version,
    )
}

/// Why an ACL API must refuse the whole request, if it must: authorization off
/// (SECURITY_DISABLED), or the caller lacks `op` on the cluster.
pub fn refusal(shard: &Shard, caller: &Caller, op: acl::Operation) -> Option<Outcome> {
    if !shard.catalog().security.authorizing {
        let why = "No Authorizer is configured ([authorization] enabled = false)";
        return Some((ResponseError::SecurityDisabled.code(), Some(why.into())));
    }
    if !authorize::cluster(shard, caller, op) {
        return Some((ResponseError::ClusterAuthorizationFailed.code(), None));
    }
    None
}

fn parse(c: &AclCreation) -> Result<Acl, Outcome> {
    let invalid = |why: &str| (ResponseError::InvalidRequest.code(), Some(why.to_string()));
    let a = Acl {
        resource_type: acl::ResourceType::from_code(c.resource_type)
            .ok_or_else(|| invalid("unknown resource type"))?,
        name: c.resource_name.to_string(),
        pattern: acl::PatternType::from_code(c.resource_pattern_type)
            .ok_or_else(|| invalid("unknown pattern type"))?,
        principal: c.principal.to_string(),
        host: c.host.to_string(),
        operation: acl::Operation::from_code(c.operation)
            .ok_or_else(|| invalid("unknown operation"))?,
        permission: acl::Permission::from_code(c.permission_type)
            .ok_or_else(|| invalid("unknown permission type"))?,
    };
    match a.invalid() {
        Some(why) => Err(invalid(why)),
        None => Ok(a),
    }
}
