//! Who sends a request (`Caller`: listener, principal, address) and the authorizer's checks
//! the handlers make (Kafka's authorization table, issue 19). Every denial is counted
//! (`sluice_authorization_denials_total`) and logged, at most one line a second per shard.

use crate::config::ListenerConfig;
use crate::metrics::{bump, LogLimiter};
use crate::security::acl::{Operation, ResourceType, CLUSTER_NAME};
use crate::shard::Shard;
use std::rc::Rc;

/// The principal of a connection that has not authenticated (PLAINTEXT, or SSL without a
/// client certificate), as Kafka names it.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// Who sent a request, and where from.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The listener the connection came in on (Metadata advertises its endpoints).
    pub listener: Rc<ListenerConfig>,
    /// `User:<name>` after SASL, `User:<subject DN>` with a client certificate, else
    /// `User:ANONYMOUS`.
    pub principal: String,
    /// The client's IP address, as ACL hosts name it.
    pub host: String,
    /// "/<ip>", as Kafka reports a group member's host.
    pub client_host: String,
}

impl Caller {
    pub fn new(listener: Rc<ListenerConfig>, principal: String, host: String) -> Caller {
        Caller {
            listener,
            principal,
            client_host: format!("/{host}"),
            host,
        }
    }
}

thread_local! {
    static DENIALS_LOGGED: LogLimiter = const { LogLimiter::new(1_000) };
}

/// Whether the caller may do `op` on the resource `name` of `kind`, without counting or
/// logging a denial: for what a refusal only filters (Metadata's topic list, ListGroups) or
/// what another permission may still allow (CREATE on the cluster, or on the topic), as
/// Kafka's authorizer is asked there with logging off.
pub fn permits(
    shard: &Shard,
    caller: &Caller,
    op: Operation,
    kind: ResourceType,
    name: &str,
) -> bool {
    let catalog = shard.catalog();
    let security = &catalog.security;
    security.allows(&caller.principal, &caller.host, op, kind, name)
}

/// Whether the caller may do `op` on the resource `name` of `kind`; a denial is counted and
/// logged.
pub fn allowed(
    shard: &Shard,
    caller: &Caller,
    op: Operation,
    kind: ResourceType,
    name: &str,
) -> bool {
    if permits(shard, caller, op, kind, name) {
        return true;
    }
    bump(&shard.metrics().authorization_denials);
    let now_ms = shard.clock().monotonic_ms();
    if let Some(suppressed) = DENIALS_LOGGED.with(|l| l.admit(now_ms)) {
        log::warn!(
            "denied: {} from {} may not {op:?} {kind:?} {name:?} ({suppressed} more denials not logged)",
            caller.principal,
            caller.host
        );
    }
    false
}

/// `allowed` on the cluster resource.
pub fn cluster(shard: &Shard, caller: &Caller, op: Operation) -> bool {
    allowed(shard, caller, op, ResourceType::Cluster, CLUSTER_NAME)
}

/// `allowed` on a consumer group.
pub fn group(shard: &Shard, caller: &Caller, op: Operation, name: &str) -> bool {
    allowed(shard, caller, op, ResourceType::Group, name)
}

/// `allowed` on a topic.
pub fn topic(shard: &Shard, caller: &Caller, op: Operation, name: &str) -> bool {
    allowed(shard, caller, op, ResourceType::Topic, name)
}

/// `allowed` on a transactional id.
pub fn transactional_id(shard: &Shard, caller: &Caller, op: Operation, id: &str) -> bool {
    allowed(shard, caller, op, ResourceType::TransactionalId, id)
}
