//! The cluster-secret handshake that opens an RPC connection (`security::node` has the
//! proofs): HELLO (the dialer's nonce), CHALLENGE (the server's nonce and proof), PROOF (the
//! dialer's proof). A server reads nothing else from a connection until the dialer has proven
//! the secret, and the dialer sends nothing else until the server has; any other frame, a
//! wrong proof or a wrong size closes the connection with the reason.

use super::frame::{CHALLENGE, HELLO, PROOF};
use super::stream::RpcStream;
use super::{read_frame_of, Writer};
use crate::security::node::{NodeSecret, Side, NONCE_BYTES, PROOF_BYTES};
use futures::io::ReadHalf;
use std::io::{Error, ErrorKind};
use std::time::Duration;

/// Time a dialer has to finish the handshake once connected.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The dialer's side: proves the secret and checks the server's proof.
pub async fn open(
    reader: &mut ReadHalf<RpcStream>,
    writer: &Writer,
    secret: &NodeSecret,
) -> std::io::Result<()> {
    let client_nonce = nonce();
    writer.write(HELLO, 0, &client_nonce).await?;
    let challenge = expect(reader, CHALLENGE, NONCE_BYTES + PROOF_BYTES).await?;
    let (server_nonce, proof) = challenge.split_at(NONCE_BYTES);
    if !secret.check_rpc_proof(Side::Server, &client_nonce, server_nonce, proof) {
        return Err(denied("the peer does not hold this cluster's secret"));
    }
    let mine = secret.rpc_proof(Side::Client, &client_nonce, server_nonce);
    writer.write(PROOF, 0, &mine).await
}

/// The server's side: answers a HELLO and checks the dialer's proof, within
/// `HANDSHAKE_TIMEOUT`.
pub async fn answer(
    reader: &mut ReadHalf<RpcStream>,
    writer: &Writer,
    secret: &NodeSecret,
) -> std::io::Result<()> {
    let exchange = async {
        let client_nonce = expect(reader, HELLO, NONCE_BYTES).await?;
        let server_nonce = nonce();
        let mut challenge = server_nonce.to_vec();
        challenge.extend(secret.rpc_proof(Side::Server, &client_nonce, &server_nonce));
        writer.write(CHALLENGE, 0, &challenge).await?;
        let proof = expect(reader, PROOF, PROOF_BYTES).await?;
        if !secret.check_rpc_proof(Side::Client, &client_nonce, &server_nonce, &proof) {
            return Err(denied("the dialer does not hold this cluster's secret"));
        }
        Ok(())
    };
    super::within(HANDSHAKE_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|| Err(denied("no cluster-secret handshake in time")))
}

/// The next frame, which must be of `kind` with a payload of `bytes`.
async fn expect(
    reader: &mut ReadHalf<RpcStream>,
    kind: u8,
    bytes: usize,
) -> std::io::Result<Vec<u8>> {
    match read_frame_of(reader, bytes).await? {
        Some((h, payload)) if h.kind == kind && payload.len() == bytes => Ok(payload),
        Some((h, _)) => Err(denied(&format!(
            "expected the cluster-secret handshake (frame kind {kind:#x}), got kind {:#x}",
            h.kind
        ))),
        None => Err(denied("closed during the cluster-secret handshake")),
    }
}

fn denied(why: &str) -> Error {
    Error::new(ErrorKind::PermissionDenied, why.to_string())
}

/// A fresh nonce: 244 random bits from the OS (two v4 UUIDs draw from getrandom).
fn nonce() -> [u8; NONCE_BYTES] {
    let mut out = [0u8; NONCE_BYTES];
    out[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    out[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
    out
}
