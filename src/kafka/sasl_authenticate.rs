//! SaslAuthenticate (v0–2): one token of the exchange SaslHandshake chose (KIP-152). A
//! failure answers SASL_AUTHENTICATION_FAILED (or ILLEGAL_SASL_STATE) with its reason, and
//! the connection closes after the answer, as Kafka's does. With
//! `sasl.connections_max_reauth_ms` the answer (v1+) gives the session that lifetime, and the
//! client re-authenticates on the same connection before it ends (KIP-368).

use super::{decode, encode_body};
use crate::protocol::chunk::Chunk;
use crate::security::node::NODE_USER;
use crate::security::sasl::{Answer, Exchange, Refused};
use crate::security::scram;
use crate::shard::Shard;
use bytes::Bytes;
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslAuthenticateResponse};
use kafka_protocol::ResponseError;

/// Where a token leaves the exchange.
pub enum Outcome {
    /// Send the answer and wait for the next token.
    Continue,
    /// Authenticated as this principal.
    Authenticated(String),
    /// Send the answer, then close.
    Failed(String),
}

pub fn handle(
    shard: &Shard,
    exchange: Option<&mut Exchange>,
    version: i16,
    body: Bytes,
) -> anyhow::Result<(Vec<Chunk>, Outcome)> {
    let req: SaslAuthenticateRequest = decode(body, version)?;
    let (answer, outcome) = match exchange {
        Some(x) => token(shard, x, &req.auth_bytes),
        None => (
            Err(Refused::IllegalState),
            Outcome::Failed("no SASL here".into()),
        ),
    };
    let lifetime_ms = match &outcome {
        Outcome::Authenticated(_) => shard.config.sasl.connections_max_reauth_ms as i64,
        _ => 0,
    };
    let resp = match answer {
        Ok(bytes) => SaslAuthenticateResponse::default()
            .with_error_message(None)
            .with_auth_bytes(bytes.into())
            .with_session_lifetime_ms(lifetime_ms),
        Err(refused) => {
            let (code, why) = match refused {
                Refused::Failed(e) => (ResponseError::SaslAuthenticationFailed, e.0),
                _ => (ResponseError::IllegalSaslState, "unexpected SASL token"),
            };
            SaslAuthenticateResponse::default()
                .with_error_code(code.code())
                .with_error_message(Some(super::str_bytes(&format!(
                    "Authentication failed: {why}"
                ))))
        }
    };
    Ok((encode_body(&resp, version)?, outcome))
}

/// Runs one token through the exchange: the bytes to answer (or why not) and where the
/// exchange stands. Shared with SaslHandshake v0's bare tokens.
pub fn token(
    shard: &Shard,
    exchange: &mut Exchange,
    token: &[u8],
) -> (Result<Vec<u8>, Refused>, Outcome) {
    let catalog = shard.catalog();
    // The node user's credential is derived from the cluster secret, never looked up.
    let nodes = &shard.login;
    let lookup = |user: &str, m: scram::Mechanism| match user {
        NODE_USER => nodes.credential(m),
        _ => catalog.security.credential(user, m),
    };
    match exchange.authenticate(token, server_nonce, lookup) {
        Ok(Answer::Challenge(bytes)) => (Ok(bytes), Outcome::Continue),
        Ok(Answer::Done { principal, token }) => (Ok(token), Outcome::Authenticated(principal)),
        Err(refused) => {
            let why = match &refused {
                Refused::Failed(e) => e.0.to_string(),
                other => format!("{other:?}"),
            };
            (Err(refused), Outcome::Failed(why))
        }
    }
}

/// A SCRAM server nonce: 256 bits from the OS's random source (two v4 UUIDs, which draw from
/// getrandom), in hex: printable and without commas, as RFC 5802 asks.
fn server_nonce() -> String {
    let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    format!("{}{}", a.simple(), b.simple())
}
