//! Kafka's ACL model (KIP-11, KIP-290's prefixed patterns) and its authorizer's rule, without
//! I/O: an ACL allows or denies a principal, from a host, an operation on resources named
//! literally or by prefix. A request is allowed for a super user; otherwise denied if any
//! matching DENY applies, allowed if a matching ALLOW does, and where no ACL names the
//! resource at all, allowed only with `allow_everyone_if_no_acl_found`. DESCRIBE is implied by
//! READ, WRITE, DELETE and ALTER, and DESCRIBE_CONFIGS by ALTER_CONFIGS (Kafka's rule).
//! Filters select ACLs for DescribeAcls and DeleteAcls. The numeric codes are Kafka's.

/// Bound on the ACLs one authorizer holds.
pub const MAX_ACLS: usize = 100_000;
/// The one cluster resource's name.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// A literal resource name, principal or host that matches any.
pub const WILDCARD: &str = "*";
pub const ANY_USER: &str = "User:*";

macro_rules! codes {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $code:expr),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn code(self) -> i8 {
                match self { $($name::$variant => $code),+ }
            }

            pub fn from_code(code: i8) -> Option<$name> {
                $name::ALL.iter().copied().find(|v| v.code() == code)
            }
        }
    };
}

codes!(
    /// A resource type; `Any` only in filters.
    ResourceType { Any = 1, Topic = 2, Group = 3, Cluster = 4, TransactionalId = 5 }
);
codes!(
    /// How an ACL names its resources; `Any` and `Match` only in filters.
    PatternType { Any = 1, Match = 2, Literal = 3, Prefixed = 4 }
);
codes!(
    /// An operation; `Any` only in filters, `All` covers every operation.
    Operation {
        Any = 1, All = 2, Read = 3, Write = 4, Create = 5, Delete = 6, Alter = 7, Describe = 8,
        ClusterAction = 9, DescribeConfigs = 10, AlterConfigs = 11, IdempotentWrite = 12,
    }
);
codes!(
    /// `Any` only in filters.
    Permission { Any = 1, Deny = 2, Allow = 3 }
);

/// One ACL (Kafka's AclBinding).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Acl {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern: PatternType,
    pub principal: String,
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl Acl {
    /// Why CreateAcls must refuse this ACL, if it must (INVALID_REQUEST's message).
    pub fn invalid(&self) -> Option<&'static str> {
        if self.resource_type == ResourceType::Any {
            return Some("an ACL names one resource type");
        }
        if !matches!(self.pattern, PatternType::Literal | PatternType::Prefixed) {
            return Some("an ACL's pattern is LITERAL or PREFIXED");
        }
        if matches!(self.operation, Operation::Any) || self.permission == Permission::Any {
            return Some("an ACL names one operation and one permission");
        }
        if self.name.is_empty() || self.host.is_empty() {
            return Some("an ACL's resource name and host must not be empty");
        }
        if self.resource_type == ResourceType::Cluster && self.name != CLUSTER_NAME {
            return Some("the cluster resource is named kafka-cluster");
        }
        if self.pattern == PatternType::Prefixed && self.name == WILDCARD {
            return Some("a PREFIXED ACL cannot be named *");
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => None,
            _ => Some("a principal is TYPE:NAME, such as User:alice"),
        }
    }

    /// Whether this ACL's resource pattern covers the resource `name` of `kind`.
    fn covers(&self, kind: ResourceType, name: &str) -> bool {
        self.resource_type == kind
            && match self.pattern {
                PatternType::Literal => self.name == name || self.name == WILDCARD,
                PatternType::Prefixed => name.starts_with(&self.name),
                PatternType::Any | PatternType::Match => false,
            }
    }

    fn applies_to(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == ANY_USER)
            && (self.host == host || self.host == WILDCARD)
    }
}

/// The operations an ACL for which grants `op`: itself, ALL, and the ones that imply it.
fn granting(op: Operation) -> &'static [Operation] {
    use Operation::*;
    match op {
        Describe => &[Describe, All, Read, Write, Delete, Alter],
        DescribeConfigs => &[DescribeConfigs, All, AlterConfigs],
        Read => &[Read, All],
        Write => &[Write, All],
        Create => &[Create, All],
        Delete => &[Delete, All],
        Alter => &[Alter, All],
        ClusterAction => &[ClusterAction, All],
        AlterConfigs => &[AlterConfigs, All],
        IdempotentWrite => &[IdempotentWrite, All],
        All => &[All],
        Any => &[],
    }
}

/// Selects ACLs (Kafka's AclBindingFilter): None, or an `Any` value, matches everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: ResourceType,
    pub name: Option<String>,
    pub pattern: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Operation,
    pub permission: Permission,
}

impl AclFilter {
    pub fn matches(&self, acl: &Acl) -> bool {
        let kind =
            self.resource_type == ResourceType::Any || self.resource_type == acl.resource_type;
        let resource = match (self.pattern, &self.name) {
            // MATCH: the ACLs that would apply to a resource of this name.
            (PatternType::Match, Some(name)) => acl.covers(acl.resource_type, name),
            (PatternType::Match | PatternType::Any, None) => true,
            (PatternType::Any, Some(name)) => acl.name == *name,
            (pattern, name) => {
                pattern == acl.pattern && name.as_ref().is_none_or(|n| *n == acl.name)
            }
        };
        let principal = self.principal.as_ref().is_none_or(|p| *p == acl.principal);
        let host = self.host.as_ref().is_none_or(|h| *h == acl.host);
        let operation = self.operation == Operation::Any || self.operation == acl.operation;
        let permission = self.permission == Permission::Any || self.permission == acl.permission;
        kind && resource && principal && host && operation && permission
    }
}

/// The ACLs in force and the rule that reads them.
#[derive(Debug, Clone, Default)]
pub struct Authorizer {
    acls: Vec<Acl>,
    pub super_users: Vec<String>,
    pub allow_everyone_if_no_acl_found: bool,
}

impl Authorizer {
    /// Whether `principal`, connected from `host`, may do `op` on the resource `name` of `kind`.
    pub fn authorize(
        &self,
        principal: &str,
        host: &str,
        op: Operation,
        kind: ResourceType,
        name: &str,
    ) -> bool {
        if self.super_users.iter().any(|s| s == principal) {
            return true;
        }
        let mut on_resource = self.acls.iter().filter(|a| a.covers(kind, name)).peekable();
        if on_resource.peek().is_none() {
            return self.allow_everyone_if_no_acl_found;
        }
        let (mut allowed, granted_by) = (false, granting(op));
        for acl in on_resource.filter(|a| a.applies_to(principal, host)) {
            match acl.permission {
                Permission::Deny if acl.operation == op || acl.operation == Operation::All => {
                    return false;
                }
                Permission::Allow if granted_by.contains(&acl.operation) => allowed = true,
                _ => {}
            }
        }
        allowed
    }

    /// Whether `principal` from `host` may do `op` on at least one resource of `kind` (Kafka's
    /// authorizeByResourceType, which an idempotent producer's InitProducerId asks with WRITE
    /// on topics): a super user; where no ACL names a resource of the kind, the
    /// `allow_everyone_if_no_acl_found` default; else an ALLOW that no DENY covers whole (a
    /// DENY on every name, on the same literal name, or on a prefix of its name).
    pub fn authorize_any(
        &self,
        principal: &str,
        host: &str,
        op: Operation,
        kind: ResourceType,
    ) -> bool {
        if self.super_users.iter().any(|s| s == principal) {
            return true;
        }
        if !self.acls.iter().any(|a| a.resource_type == kind) {
            return self.allow_everyone_if_no_acl_found;
        }
        let mine = |a: &&Acl| a.resource_type == kind && a.applies_to(principal, host);
        let denies: Vec<&Acl> = self
            .acls
            .iter()
            .filter(mine)
            .filter(|a| a.permission == Permission::Deny)
            .filter(|a| a.operation == op || a.operation == Operation::All)
            .collect();
        let covered = |allow: &Acl| {
            denies.iter().any(|d| match d.pattern {
                PatternType::Literal => d.name == WILDCARD || d.name == allow.name,
                _ => allow.name.starts_with(&d.name),
            })
        };
        self.acls
            .iter()
            .filter(mine)
            .filter(|a| a.permission == Permission::Allow && granting(op).contains(&a.operation))
            .any(|a| !covered(a))
    }

    /// Adds an ACL (already validated); adding one that exists changes nothing. Err: the
    /// authorizer is full (`MAX_ACLS`).
    pub fn add(&mut self, acl: Acl) -> Result<(), &'static str> {
        debug_assert!(acl.invalid().is_none(), "{acl:?}");
        if self.acls.contains(&acl) {
            return Ok(());
        }
        if self.acls.len() >= MAX_ACLS {
            return Err("too many ACLs");
        }
        self.acls.push(acl);
        Ok(())
    }

    /// The ACLs `filter` matches.
    pub fn describe(&self, filter: &AclFilter) -> Vec<Acl> {
        self.acls
            .iter()
            .filter(|a| filter.matches(a))
            .cloned()
            .collect()
    }

    /// Removes and returns the ACLs `filter` matches.
    pub fn remove(&mut self, filter: &AclFilter) -> Vec<Acl> {
        let (gone, kept) = std::mem::take(&mut self.acls)
            .into_iter()
            .partition(|a| filter.matches(a));
        self.acls = kept;
        gone
    }
}

#[cfg(test)]
mod tests;
