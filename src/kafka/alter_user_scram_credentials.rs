//! AlterUserScramCredentials (KIP-554): sets credentials from a salted password (the client
//! salts and hashes; the password never reaches the broker) and deletes them. One result per
//! user: UNACCEPTABLE_CREDENTIAL (empty name or password, iterations outside 4096..=16384),
//! UNSUPPORTED_SASL_MECHANISM, DUPLICATE_RESOURCE (a user's mechanism twice), RESOURCE_NOT_FOUND
//! (deleting what is not there). Needs ALTER on the cluster.

use super::authorize::{self, Caller};
use super::Services;
use super::{decode, encode, str_bytes, Reply};
use crate::controller::security_ops::SecurityChange;
use crate::controller::Outcome;
use crate::security::acl::Operation;
use crate::security::scram::{self, Credential};
use crate::storage::security::ScramCredentialRecord;
use bytes::Bytes;
use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
};
use kafka_protocol::ResponseError;

/// Bound on the salt and salted password a client sends (bytes).
const MAX_CREDENTIAL_BYTES: usize = 1024;

pub async fn handle(
    services: &Services,
    caller: &Caller,
    version: i16,
    body: Bytes,
) -> anyhow::Result<Reply> {
    let shard = &services.shard;
    let req: AlterUserScramCredentialsRequest = decode(body, version)?;
    // (user, mechanism code, the change or why it is refused), in request order.
    let mut items: Vec<(String, i8, Result<SecurityChange, Outcome>)> = Vec::new();
    for d in &req.deletions {
        let change = SecurityChange::DeleteCredential {
            user: d.name.to_string(),
            mechanism: d.mechanism,
        };
        items.push((
            d.name.to_string(),
            d.mechanism,
            mechanism_of(&d.name, d.mechanism).map(|_| change),
        ));
    }
    for u in &req.upsertions {
        items.push((u.name.to_string(), u.mechanism, upsertion(u)));
    }
    refuse_duplicates(&mut items);
    let denied = !authorize::cluster(shard, caller, Operation::Alter);
    let outcomes = submit(services, &items, denied).await;
    let mut results: Vec<AlterUserScramCredentialsResult> = Vec::new();
    for ((user, _, _), (code, message)) in items.iter().zip(outcomes) {
        match results.iter_mut().find(|r| r.user.as_str() == user) {
            Some(r) if r.error_code == 0 && code != 0 => {
                r.error_code = code;
                r.error_message = message.as_deref().map(str_bytes);
            }
            Some(_) => {}
            None => results.push(
                AlterUserScramCredentialsResult::default()
                    .with_user(str_bytes(user))
                    .with_error_code(code)
                    .with_error_message(message.as_deref().map(str_bytes)),
            ),
        }
    }
    encode(
        &AlterUserScramCredentialsResponse::default().with_results(results),
        version,
    )
}

/// Each item's outcome: refused here, or the controller's.
async fn submit(
    services: &Services,
    items: &[(String, i8, Result<SecurityChange, Outcome>)],
    denied: bool,
) -> Vec<Outcome> {
    if denied {
        let e = ResponseError::ClusterAuthorizationFailed;
        return items.iter().map(|_| (e.code(), None)).collect();
    }
    let changes: Vec<SecurityChange> = items
        .iter()
        .filter_map(|(_, _, c)| c.as_ref().ok().cloned())
        .collect();
    let mut done = super::submit_security(&services.controllers, changes)
        .await
        .into_iter();
    items
        .iter()
        .map(|(_, _, c)| match c {
            Ok(_) => done.next().expect("one outcome per change"),
            Err(e) => e.clone(),
        })
        .collect()
}

/// An upsertion's change: its credential from the salted password, if acceptable.
fn upsertion(u: &ScramCredentialUpsertion) -> Result<SecurityChange, Outcome> {
    let m = mechanism_of(&u.name, u.mechanism)?;
    if u.iterations < scram::MIN_ITERATIONS as i32 {
        return Err(unacceptable("Too few iterations"));
    }
    if u.iterations > scram::MAX_ITERATIONS as i32 {
        return Err(unacceptable("Too many iterations"));
    }
    let (salt, salted) = (&u.salt, &u.salted_password);
    let sizes_ok = (1..=MAX_CREDENTIAL_BYTES).contains(&salt.len())
        && (1..=MAX_CREDENTIAL_BYTES).contains(&salted.len());
    if !sizes_ok {
        return Err(unacceptable(
            "salt and salted password must be 1 to 1024 bytes",
        ));
    }
    let c = Credential::from_salted(m, salted, salt, u.iterations as u32);
    Ok(SecurityChange::SetCredential {
        record: ScramCredentialRecord::new(&u.name, &c),
        if_absent: false,
    })
}

/// The mechanism of a deletion or upsertion, if the user name and mechanism are acceptable.
fn mechanism_of(name: &str, mechanism: i8) -> Result<scram::Mechanism, Outcome> {
    if name.is_empty() {
        return Err(unacceptable("Username must not be empty"));
    }
    if name == crate::security::node::NODE_USER {
        // Its credential is derived from the cluster secret; a stored one would never be used.
        return Err(unacceptable(
            "This username is reserved for the cluster's nodes",
        ));
    }
    scram::Mechanism::from_code(mechanism).ok_or((
        ResponseError::UnsupportedSaslMechanism.code(),
        Some("Unknown SCRAM mechanism".to_string()),
    ))
}

fn unacceptable(why: &str) -> Outcome {
    (
        ResponseError::UnacceptableCredential.code(),
        Some(why.to_string()),
    )
}

/// A user's mechanism named twice (in deletions, upsertions or both) is refused in both places.
fn refuse_duplicates(items: &mut [(String, i8, Result<SecurityChange, Outcome>)]) {
    let keys: Vec<(String, i8)> = items.iter().map(|(u, m, _)| (u.clone(), *m)).collect();
    for (i, item) in items.iter_mut().enumerate() {
        if keys.iter().filter(|k| **k == keys[i]).count() > 1 {
            let why = "A user credential cannot be altered twice in the same request";
            item.2 = Err((
                ResponseError::DuplicateResource.code(),
                Some(why.to_string()),
            ));
        }
    }
}
