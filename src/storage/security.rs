//! The catalog's security metadata (issue 19): users' SCRAM credentials and the ACLs, as
//! stored (rkyv records, in the catalog file and the metadata log) and as served (a lookup
//! table and an `Authorizer`, rebuilt with each catalog). No password is ever stored: a
//! credential is a salt, an iteration count and two derived keys.

use crate::config::Config;
use crate::security::acl::{self, Acl, Authorizer};
use crate::security::scram::{self, Credential};
use std::collections::HashMap;

/// Bound on stored SCRAM credentials (users × mechanisms).
pub const MAX_CREDENTIALS: usize = 100_000;

/// One user's credential for one mechanism, as stored.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct ScramCredentialRecord {
    pub user: String,
    /// Kafka's ScramMechanism code: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512.
    pub mechanism: i8,
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl ScramCredentialRecord {
    pub fn new(user: &str, c: &Credential) -> ScramCredentialRecord {
        ScramCredentialRecord {
            user: user.to_string(),
            mechanism: c.mechanism.code(),
            salt: c.salt.clone(),
            iterations: c.iterations,
            stored_key: c.stored_key.clone(),
            server_key: c.server_key.clone(),
        }
    }

    /// The credential; None for a mechanism this Sluice does not know (a corrupt record).
    pub fn credential(&self) -> Option<Credential> {
        Some(Credential {
            mechanism: scram::Mechanism::from_code(self.mechanism)?,
            salt: self.salt.clone(),
            iterations: self.iterations,
            stored_key: self.stored_key.clone(),
            server_key: self.server_key.clone(),
        })
    }
}

/// One ACL, as stored (Kafka's codes).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct AclRecord {
    pub resource_type: i8,
    pub name: String,
    pub pattern: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission: i8,
}

impl AclRecord {
    pub fn new(a: &Acl) -> AclRecord {
        AclRecord {
            resource_type: a.resource_type.code(),
            name: a.name.clone(),
            pattern: a.pattern.code(),
            principal: a.principal.clone(),
            host: a.host.clone(),
            operation: a.operation.code(),
            permission: a.permission.code(),
        }
    }

    /// The ACL; None for codes this Sluice does not know (a corrupt record).
    pub fn acl(&self) -> Option<Acl> {
        Some(Acl {
            resource_type: acl::ResourceType::from_code(self.resource_type)?,
            name: self.name.clone(),
            pattern: acl::PatternType::from_code(self.pattern)?,
            principal: self.principal.clone(),
            host: self.host.clone(),
            operation: acl::Operation::from_code(self.operation)?,
            permission: acl::Permission::from_code(self.permission)?,
        })
    }
}

/// What the shards serve from: credentials by (user, mechanism), and the authorizer.
#[derive(Debug, Clone, Default)]
pub struct SecurityView {
    /// The credentials and ACLs as the metadata log stores them.
    pub stored_credentials: Vec<ScramCredentialRecord>,
    pub stored_acls: Vec<AclRecord>,
    credentials: HashMap<(String, scram::Mechanism), Credential>,
    pub authorizer: Authorizer,
    /// Whether requests are authorized (`[authorization] enabled`).
    pub authorizing: bool,
}

impl SecurityView {
    pub fn new(
        credentials: &[ScramCredentialRecord],
        acls: &[AclRecord],
        config: &Config,
    ) -> Result<SecurityView, String> {
        let mut view = SecurityView {
            stored_credentials: credentials.to_vec(),
            stored_acls: acls.to_vec(),
            authorizing: config.authorization.enabled,
            ..SecurityView::default()
        };
        for r in credentials {
            let c = r
                .credential()
                .ok_or_else(|| format!("user {}: unknown mechanism {}", r.user, r.mechanism))?;
            view.credentials.insert((r.user.clone(), c.mechanism), c);
        }
        view.authorizer.super_users = config.authorization.super_users.clone();
        if config.cluster.secret.is_some() {
            // The other nodes of the cluster (`security::node`).
            let nodes = crate::security::user_principal(crate::security::node::NODE_USER);
            view.authorizer.super_users.push(nodes);
        }
        view.authorizer.allow_everyone_if_no_acl_found =
            config.authorization.allow_everyone_if_no_acl_found;
        for r in acls {
            let a = r
                .acl()
                .ok_or_else(|| format!("unknown codes in ACL {r:?}"))?;
            view.authorizer.add(a).map_err(String::from)?;
        }
        Ok(view)
    }

    /// `Authorizer::authorize_any`, always true when authorization is off.
    pub fn allows_any(
        &self,
        principal: &str,
        host: &str,
        op: acl::Operation,
        kind: acl::ResourceType,
    ) -> bool {
        !self.authorizing || self.authorizer.authorize_any(principal, host, op, kind)
    }

    /// `user`'s credential for `mechanism`.
    pub fn credential(&self, user: &str, mechanism: scram::Mechanism) -> Option<Credential> {
        self.credentials
            .get(&(user.to_string(), mechanism))
            .cloned()
    }

    /// Whether `principal` (from `host`) may do `op` on the resource: always when
    /// authorization is off.
    pub fn allows(
        &self,
        principal: &str,
        host: &str,
        op: acl::Operation,
        kind: acl::ResourceType,
        name: &str,
    ) -> bool {
        !self.authorizing || self.authorizer.authorize(principal, host, op, kind, name)
    }
}

/// Whether a credential of `user` fits in `records`: a user already there may add or replace
/// one, a new user only below `MAX_CREDENTIALS`.
pub fn credential_fits(records: &[ScramCredentialRecord], user: &str) -> bool {
    records.len() < MAX_CREDENTIALS || records.iter().any(|x| x.user == user)
}

/// Whether `acl` fits in `acls`: one there already does, a new one only below `MAX_ACLS`.
pub fn acl_fits(acls: &[AclRecord], acl: &AclRecord) -> bool {
    acls.len() < acl::MAX_ACLS || acls.contains(acl)
}

/// Sets `user`'s credential for its mechanism in `records` (replacing one there).
pub fn set_credential(records: &mut Vec<ScramCredentialRecord>, r: &ScramCredentialRecord) {
    match records
        .iter_mut()
        .find(|x| x.user == r.user && x.mechanism == r.mechanism)
    {
        Some(x) => *x = r.clone(),
        None => records.push(r.clone()),
    }
}

/// Removes `user`'s credential for `mechanism`; false if there was none.
pub fn delete_credential(
    records: &mut Vec<ScramCredentialRecord>,
    user: &str,
    mechanism: i8,
) -> bool {
    let before = records.len();
    records.retain(|x| !(x.user == user && x.mechanism == mechanism));
    records.len() < before
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_and_acls_round_trip_through_their_records() {
        let c = Credential::new(scram::Mechanism::Sha512, b"pw", b"salt", 4096);
        let r = ScramCredentialRecord::new("alice", &c);
        assert_eq!(r.credential(), Some(c.clone()));
        let a = Acl {
            resource_type: acl::ResourceType::Topic,
            name: "logs".into(),
            pattern: acl::PatternType::Prefixed,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: acl::Operation::Write,
            permission: acl::Permission::Allow,
        };
        let ar = AclRecord::new(&a);
        assert_eq!(ar.acl(), Some(a));
        let mut config = Config::default();
        config.authorization.enabled = true;
        let view = SecurityView::new(&[r], &[ar], &config).unwrap();
        assert_eq!(view.credential("alice", scram::Mechanism::Sha512), Some(c));
        assert_eq!(view.credential("alice", scram::Mechanism::Sha256), None);
        let (write, topic) = (acl::Operation::Write, acl::ResourceType::Topic);
        assert!(view.allows("User:alice", "1.2.3.4", write, topic, "logs-1"));
        assert!(!view.allows("User:bob", "1.2.3.4", write, topic, "logs-1"));
    }

    #[test]
    fn a_credential_is_replaced_per_mechanism_and_deleted() {
        let mut records = Vec::new();
        let c1 = Credential::new(scram::Mechanism::Sha256, b"a", b"s1", 4096);
        let c2 = Credential::new(scram::Mechanism::Sha256, b"b", b"s2", 4096);
        set_credential(&mut records, &ScramCredentialRecord::new("u", &c1));
        set_credential(&mut records, &ScramCredentialRecord::new("u", &c2));
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].credential(), Some(c2));
        assert!(!delete_credential(&mut records, "u", 2));
        assert!(delete_credential(&mut records, "u", 1));
        assert!(records.is_empty());
    }
}
