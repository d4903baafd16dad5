//! ListGroups: asks every shard for the groups it coordinates; v4 filters by state, v5 by
//! type (KIP-848: every group here is a classic one).

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, str_bytes, Reply};
use crate::security::acl::{Operation, ResourceType, CLUSTER_NAME};
use bytes::Bytes;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};

const CLASSIC: &str = "classic";

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: ListGroupsRequest = decode(body, version)?;
    let mut groups = Vec::new();
    // Every group with DESCRIBE on the cluster; else those the caller may describe (Kafka's).
    let listed =
        |kind, name: &str| authorize::permits(shard, caller, Operation::Describe, kind, name);
    let all = listed(ResourceType::Cluster, CLUSTER_NAME);
    for (id, protocol_type, state) in crate::group::list_all(&services.groups).await {
        if !all && !listed(ResourceType::Group, &id) {
            continue;
        }
        let wanted = req.states_filter.is_empty()
            || req
                .states_filter
                .iter()
                .any(|s| s.as_str().eq_ignore_ascii_case(state));
        // Kafka's group types: "classic" is this broker's one kind.
        let typed = req.types_filter.is_empty()
            || req
                .types_filter
                .iter()
                .any(|t| t.as_str().eq_ignore_ascii_case(CLASSIC));
        if !wanted || !typed {
            continue;
        }
        let mut g = ListedGroup::default()
            .with_group_id(GroupId(str_bytes(&id)))
            .with_protocol_type(str_bytes(&protocol_type));
        if version >= 4 {
            g = g.with_group_state(str_bytes(state));
        }
        if version >= 5 {
            g = g.with_group_type(str_bytes(CLASSIC));
        }
        groups.push(g);
    }
    encode(&ListGroupsResponse::default().with_groups(groups), version)
}
