//! DeleteAcls (v0–3): removes the ACLs each filter matches and lists them. The matches are
//! taken from this shard's catalog and removed through the controller, ACL by ACL. Needs ALTER
//! on the cluster; SECURITY_DISABLED where authorization is off.

use super::authorize::Caller;
use super::create_acls::refusal;
use super::describe_acls::filter;
use super::Services;
use super::{decode, encode, str_bytes, Reply};
use crate::controller::security_ops::SecurityChange;
use crate::controller::Outcome;
use crate::security::acl::{self, Acl};
use crate::storage::security::AclRecord;
use bytes::Bytes;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::{DeleteAclsRequest, DeleteAclsResponse};
use kafka_protocol::ResponseError;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: DeleteAclsRequest = decode(body, version)?;
    let refused = refusal(shard, caller, acl::Operation::Alter);
    let catalog = shard.catalog();
    // Per filter: the ACLs it matches, or its refusal.
    let matched: Vec<Result<Vec<Acl>, Outcome>> = req
        .filters
        .iter()
        .map(|f| {
            if let Some(e) = &refused {
                return Err(e.clone());
            }
            let parsed = filter(
                [f.resource_type_filter, f.pattern_type_filter],
                [f.operation, f.permission_type],
                [&f.resource_name_filter, &f.principal_filter, &f.host_filter],
            );
            let invalid = (ResponseError::InvalidRequest.code(), None);
            parsed
                .map(|f| catalog.security.authorizer.describe(&f))
                .ok_or(invalid)
        })
        .collect();
    let mut seen = std::collections::HashSet::new();
    let gone: Vec<Acl> = matched
        .iter()
        .flatten()
        .flatten()
        .filter(|a| seen.insert(*a))
        .cloned()
        .collect();
    let changes = gone
        .iter()
        .map(|a| SecurityChange::DeleteAcl(AclRecord::new(a)))
        .collect();
    let outcomes = super::submit_security(&services.controllers, changes).await;
    let outcome_of = |a: &Acl| {
        let i = gone
            .iter()
            .position(|g| g == a)
            .expect("every match is removed");
        outcomes[i].clone()
    };
    let results = matched
        .into_iter()
        .map(|m| match m {
            Err((code, message)) => DeleteAclsFilterResult::default()
                .with_error_code(code)
                .with_error_message(message.as_deref().map(str_bytes)),
            Ok(acls) => DeleteAclsFilterResult::default()
                .with_matching_acls(acls.iter().map(|a| matching(a, outcome_of(a))).collect()),
        })
        .collect();
    encode(
        &DeleteAclsResponse::default().with_filter_results(results),
        version,
    )
}

fn matching(a: &Acl, (code, message): Outcome) -> DeleteAclsMatchingAcl {
    DeleteAclsMatchingAcl::default()
        .with_error_code(code)
        .with_error_message(message.as_deref().map(str_bytes))
        .with_resource_type(a.resource_type.code())
        .with_resource_name(str_bytes(&a.name))
        .with_pattern_type(a.pattern.code())
        .with_principal(str_bytes(&a.principal))
        .with_host(str_bytes(&a.host))
        .with_operation(a.operation.code())
        .with_permission_type(a.permission.code())
}
