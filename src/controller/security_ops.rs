//! Credential and ACL changes on the controller (issue 19): checked against the catalog the
//! controller holds (the authoritative one), then written as metadata records. One outcome per
//! change, in order.

use super::records::MetadataRecord;
use super::{err, push, Outcome};
use crate::storage::catalog::CatalogRecord;
use crate::storage::security::{self, AclRecord, ScramCredentialRecord};
use kafka_protocol::ResponseError;

/// One change to the security metadata.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub enum SecurityChange {
    /// Sets a user's credential for its mechanism; with `if_absent`, only where the user has
    /// none for it yet (bootstrap users: a password changed since is kept).
    SetCredential {
        record: ScramCredentialRecord,
        if_absent: bool,
    },
    /// Removes a user's credential for a mechanism (Kafka's code); RESOURCE_NOT_FOUND if it
    /// has none.
    DeleteCredential {
        user: String,
        mechanism: i8,
    },
    CreateAcl(AclRecord),
    /// Removes an ACL; one that is gone already is no error.
    DeleteAcl(AclRecord),
}

/// Applies `changes` to `record`, pushing their metadata records to `out`.
pub(super) fn apply(
    record: &mut CatalogRecord,
    out: &mut Vec<MetadataRecord>,
    changes: Vec<SecurityChange>,
) -> Vec<Outcome> {
    changes
        .into_iter()
        .map(|change| apply_one(record, out, change))
        .collect()
}

fn apply_one(
    record: &mut CatalogRecord,
    out: &mut Vec<MetadataRecord>,
    change: SecurityChange,
) -> Outcome {
    let has = |r: &CatalogRecord, user: &str, mechanism: i8| {
        r.scram_credentials
            .iter()
            .any(|c| c.user == user && c.mechanism == mechanism)
    };
    let next = match change {
        SecurityChange::SetCredential {
            record: c,
            if_absent,
        } => {
            if if_absent && has(record, &c.user, c.mechanism) {
                return (0, None);
            }
            if !security::credential_fits(&record.scram_credentials, &c.user) {
                return err(ResponseError::PolicyViolation, "too many credentials");
            }
            MetadataRecord::SetScramCredential(Box::new(c))
        }
        SecurityChange::DeleteCredential { user, mechanism } => {
            if !has(record, &user, mechanism) {
                let why = "no such credential for that mechanism";
                return err(ResponseError::ResourceNotFound, why);
            }
            MetadataRecord::DeleteScramCredential(Box::new((user, mechanism)))
        }
        SecurityChange::CreateAcl(a) => {
            if record.acls.contains(&a) {
                return (0, None);
            }
            if !security::acl_fits(&record.acls, &a) {
                return err(ResponseError::PolicyViolation, "too many ACLs");
            }
            MetadataRecord::CreateAcl(Box::new(a))
        }
        SecurityChange::DeleteAcl(a) => {
            if !record.acls.contains(&a) {
                return (0, None);
            }
            MetadataRecord::DeleteAcl(Box::new(a))
        }
    };
    push(record, out, next);
    (0, None)
}
