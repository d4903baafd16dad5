//! DescribeAcls (v0–3): the ACLs a filter matches, grouped by resource pattern. Needs DESCRIBE
//! on the cluster; SECURITY_DISABLED where authorization is off.

use super::authorize::Caller;
use super::create_acls::refusal;
use super::{decode, encode, str_bytes, Reply};
use crate::security::acl::{self, Acl, AclFilter};
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{DescribeAclsRequest, DescribeAclsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

pub fn handle(shard: &Shard, caller: &Caller, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: DescribeAclsRequest = decode(body, version)?;
    let resp = DescribeAclsResponse::default();
    if let Some((code, message)) = refusal(shard, caller, acl::Operation::Describe) {
        let resp = resp.with_error_message(message.as_deref().map(str_bytes));
        return encode(&resp.with_error_code(code), version);
    }
    let filter = filter(
        [req.resource_type_filter, req.pattern_type_filter],
        [req.operation, req.permission_type],
        [
            &req.resource_name_filter,
            &req.principal_filter,
            &req.host_filter,
        ],
    );
    let Some(filter) = filter else {
        let code = ResponseError::InvalidRequest.code();
        return encode(&resp.with_error_code(code), version);
    };
    let matched = shard.catalog().security.authorizer.describe(&filter);
    let mut resources: Vec<DescribeAclsResource> = Vec::new();
    for a in matched {
        let same = |r: &DescribeAclsResource| {
            r.resource_type == a.resource_type.code()
                && r.resource_name.as_str() == a.name
                && r.pattern_type == a.pattern.code()
        };
        let description = AclDescription::default()
            .with_principal(str_bytes(&a.principal))
            .with_host(str_bytes(&a.host))
            .with_operation(a.operation.code())
            .with_permission_type(a.permission.code());
        match resources.iter_mut().find(|r| same(r)) {
            Some(r) => r.acls.push(description),
            None => resources.push(resource(&a).with_acls(vec![description])),
        }
    }
    encode(&resp.with_resources(resources), version)
}

fn resource(a: &Acl) -> DescribeAclsResource {
    DescribeAclsResource::default()
        .with_resource_type(a.resource_type.code())
        .with_resource_name(str_bytes(&a.name))
        .with_pattern_type(a.pattern.code())
}

/// A filter from its request fields: [resource type, pattern type], [operation, permission],
/// [resource name, principal, host]. None for a code this Sluice does not know.
pub fn filter(
    [kind, pattern]: [i8; 2],
    [operation, permission]: [i8; 2],
    [name, principal, host]: [&Option<StrBytes>; 3],
) -> Option<AclFilter> {
    let text = |s: &Option<StrBytes>| s.as_ref().map(|s| s.to_string());
    Some(AclFilter {
        resource_type: acl::ResourceType::from_code(kind)?,
        name: text(name),
        pattern: acl::PatternType::from_code(pattern)?,
        principal: text(principal),
        host: text(host),
        operation: acl::Operation::from_code(operation)?,
        permission: acl::Permission::from_code(permission)?,
    })
}
