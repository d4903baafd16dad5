//! DescribeGroups: state, protocol and members of each group.

use super::authorize::{self, Caller};
use super::Services;
use super::{authorized_operations, decode, encode, str_bytes, Reply};
use crate::group::{ops, route};
use crate::security::acl::Operation;
use bytes::Bytes;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};
use kafka_protocol::ResponseError;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: DescribeGroupsRequest = decode(body, version)?;
    let mut groups = Vec::with_capacity(req.groups.len());
    for g in &req.groups {
        let out = DescribedGroup::default().with_group_id(g.clone());
        if !authorize::group(shard, caller, Operation::Describe, &g.0) {
            let code = ResponseError::GroupAuthorizationFailed.code();
            groups.push(out.with_error_code(code));
            continue;
        }
        let described = match route(
            &services.groups,
            ops::Describe {
                group: g.0.to_string(),
            },
        )
        .await
        {
            Ok(d) => out
                .with_authorized_operations(if req.include_authorized_operations {
                    authorized_operations::group()
                } else {
                    authorized_operations::NOT_REQUESTED
                })
                .with_group_state(str_bytes(d.state))
                .with_protocol_type(str_bytes(&d.protocol_type))
                .with_protocol_data(str_bytes(&d.protocol))
                .with_members(
                    d.members
                        .into_iter()
                        .map(|m| {
                            let mut dm = DescribedGroupMember::default()
                                .with_member_id(str_bytes(&m.member_id))
                                .with_client_id(str_bytes(&m.client_id))
                                .with_client_host(str_bytes(&m.client_host))
                                .with_member_metadata(m.metadata)
                                .with_member_assignment(m.assignment);
                            if version >= 4 {
                                dm = dm.with_group_instance_id(
                                    m.group_instance_id.as_deref().map(str_bytes),
                                );
                            }
                            dm
                        })
                        .collect(),
                ),
            // Kafka's answer for a group it cannot describe: the code, an empty state.
            Err(c) => out.with_error_code(c),
        };
        groups.push(not_found_from_v6(described, version));
    }
    encode(
        &DescribeGroupsResponse::default().with_groups(groups),
        version,
    )
}

/// From v6 (KIP-1043) a group that does not exist is GROUP_ID_NOT_FOUND; before, a Dead group
/// without error.
fn not_found_from_v6(g: DescribedGroup, version: i16) -> DescribedGroup {
    let absent = g.error_code == 0 && g.group_state.as_str() == "Dead" && g.members.is_empty();
    if version >= 6 && absent {
        g.with_error_code(ResponseError::GroupIdNotFound.code())
    } else {
        g
    }
}
