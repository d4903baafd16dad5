//! DescribeUserScramCredentials (KIP-554): each user's mechanisms and iteration counts, never
//! the keys. All users when none is named; RESOURCE_NOT_FOUND for a user without credentials,
//! DUPLICATE_RESOURCE for one named twice. Needs DESCRIBE on the cluster.

use super::authorize::{self, Caller};
use super::{decode, encode, str_bytes, Reply};
use crate::security::acl::Operation;
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::ResponseError;
use std::collections::BTreeMap;

pub fn handle(shard: &Shard, caller: &Caller, version: i16, body: Bytes) -> anyhow::Result<Reply> {
    let req: DescribeUserScramCredentialsRequest = decode(body, version)?;
    let resp = DescribeUserScramCredentialsResponse::default();
    if !authorize::cluster(shard, caller, Operation::Describe) {
        // Kafka's form: the error at the top and for each named user, with Kafka's message.
        let code = ResponseError::ClusterAuthorizationFailed.code();
        let why = "Cluster authorization failed.";
        let users = req.users.unwrap_or_default();
        let results = users
            .iter()
            .map(|u| result(&u.name, code, Some(why), Vec::new()))
            .collect();
        let resp = resp
            .with_error_code(code)
            .with_error_message(Some(str_bytes(why)));
        return encode(&resp.with_results(results), version);
    }
    let catalog = shard.catalog();
    let mut infos: BTreeMap<&str, Vec<CredentialInfo>> = BTreeMap::new();
    for c in &catalog.security.stored_credentials {
        let info = CredentialInfo::default()
            .with_mechanism(c.mechanism)
            .with_iterations(c.iterations as i32);
        infos.entry(c.user.as_str()).or_default().push(info);
    }
    let named: Vec<String> = req
        .users
        .unwrap_or_default()
        .iter()
        .map(|u| u.name.to_string())
        .collect();
    let results = if named.is_empty() {
        infos
            .into_iter()
            .map(|(user, infos)| result(user, 0, None, infos))
            .collect()
    } else {
        named
            .iter()
            .map(|user| {
                if named.iter().filter(|n| *n == user).count() > 1 {
                    let why = "Cannot describe the same user more than once";
                    return result(
                        user,
                        ResponseError::DuplicateResource.code(),
                        Some(why),
                        vec![],
                    );
                }
                match infos.get(user.as_str()) {
                    Some(i) => result(user, 0, None, i.clone()),
                    None => {
                        let why = "Attempt to describe a user credential that does not exist";
                        let code = ResponseError::ResourceNotFound.code();
                        result(user, code, Some(why), vec![])
                    }
                }
            })
            .collect()
    };
    encode(&resp.with_results(results), version)
}

fn result(
    user: &str,
    code: i16,
    message: Option<&str>,
    infos: Vec<CredentialInfo>,
) -> DescribeUserScramCredentialsResult {
    DescribeUserScramCredentialsResult::default()
        .with_user(str_bytes(user))
        .with_error_code(code)
        .with_error_message(message.map(str_bytes))
        .with_credential_infos(infos)
}
