//! SaslHandshake (v0–1): names the mechanism of a SASL listener's exchange. v1 carries the
//! tokens in SaslAuthenticate requests; v0 (KIP-43's original form) sends them as bare
//! size-prefixed frames, which the connection reads as such until the exchange ends. On a
//! listener without SASL, or once authenticated, it is ILLEGAL_SASL_STATE.

use super::{decode, encode_body, str_bytes};
use crate::protocol::chunk::Chunk;
use crate::security::sasl::{Exchange, Refused};
use bytes::Bytes;
use kafka_protocol::messages::{SaslHandshakeRequest, SaslHandshakeResponse};
use kafka_protocol::ResponseError;

/// The answer, and whether the exchange may go on (else the connection closes after it).
pub fn handle(
    exchange: Option<&mut Exchange>,
    version: i16,
    body: Bytes,
) -> anyhow::Result<(Vec<Chunk>, bool)> {
    let req: SaslHandshakeRequest = decode(body, version)?;
    let (code, mechanisms) = match exchange {
        None => (ResponseError::IllegalSaslState.code(), Vec::new()),
        Some(x) => {
            let code = match x.handshake(req.mechanism.as_str()) {
                Ok(()) => 0,
                Err(Refused::Unsupported) => ResponseError::UnsupportedSaslMechanism.code(),
                Err(_) => ResponseError::IllegalSaslState.code(),
            };
            (code, x.mechanisms())
        }
    };
    let resp = SaslHandshakeResponse::default()
        .with_error_code(code)
        .with_mechanisms(mechanisms.into_iter().map(str_bytes).collect());
    Ok((encode_body(&resp, version)?, code == 0))
}
