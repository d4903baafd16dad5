//! How the nodes of a cluster prove themselves to each other (issue 19): one shared
//! `[cluster] secret`. Pure: nonces come in as values.
//!
//! - **RPC** (`rpc/`): a connection opens with a challenge both ways. The dialer sends a nonce;
//!   the server answers its own nonce and `HMAC-SHA256(secret, "sluice rpc server" | client
//!   nonce | server nonce)`; the dialer checks that and answers the same HMAC labelled
//!   "sluice rpc client". Neither side sends anything else before the other has proven the
//!   secret, and nonces are fresh per connection, so a recorded handshake cannot be replayed.
//! - **Kafka** (followers' fetches, transaction markers): a node logs in to another node's
//!   SASL listener as `NODE_USER` with SCRAM, the password derived from the secret; the
//!   authorizer treats `User:__sluice_node` as a super user (which CLUSTER_ACTION needs). The
//!   credential is derived, never stored, and a stored credential of that name is never used.

use super::scram::{Credential, Mechanism};
use crate::config::security::MIN_CLUSTER_SECRET_BYTES;
use crate::config::Config;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The user nodes log in as on each other's SASL listeners.
pub const NODE_USER: &str = "__sluice_node";
/// Bytes of an RPC handshake nonce and of a proof (HMAC-SHA256).
pub const NONCE_BYTES: usize = 32;
pub const PROOF_BYTES: usize = 32;
/// PBKDF2 rounds of the node user's derived SCRAM credential (Kafka's minimum).
const NODE_ITERATIONS: u32 = 4096;

/// Which side of an RPC connection a proof is for: they differ, so one side's proof cannot
/// be reflected back as the other's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Server,
    Client,
}

/// The cluster secret and what is derived from it.
#[derive(Clone)]
pub struct NodeSecret {
    key: Vec<u8>,
}

impl std::fmt::Debug for NodeSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NodeSecret(..)")
    }
}

impl NodeSecret {
    pub fn new(secret: &str) -> NodeSecret {
        assert!(
            secret.len() >= MIN_CLUSTER_SECRET_BYTES,
            "config validates the length"
        );
        NodeSecret {
            key: secret.as_bytes().to_vec(),
        }
    }

    /// The config's `[cluster] secret`, if any.
    pub fn of(config: &Config) -> Option<NodeSecret> {
        config.cluster.secret.as_deref().map(NodeSecret::new)
    }

    fn mac(&self, label: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        let mut m = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        m.update(label);
        for p in parts {
            m.update(p);
        }
        m.finalize().into_bytes().to_vec()
    }

    /// The RPC handshake proof of `side` for this connection's two nonces.
    pub fn rpc_proof(&self, side: Side, client_nonce: &[u8], server_nonce: &[u8]) -> Vec<u8> {
        let label: &[u8] = match side {
            Side::Server => b"sluice rpc server",
            Side::Client => b"sluice rpc client",
        };
        self.mac(label, &[client_nonce, server_nonce])
    }

    /// Whether `proof` is `side`'s proof for the nonces (compared in constant time).
    pub fn check_rpc_proof(&self, side: Side, client: &[u8], server: &[u8], proof: &[u8]) -> bool {
        bool::from(self.rpc_proof(side, client, server).ct_eq(proof))
    }

    /// The node user's password: printable, derived from the secret.
    pub fn password(&self) -> String {
        let raw = self.mac(b"sluice node password", &[]);
        raw.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The node user's SCRAM credential for `mechanism` (PBKDF2, so derive it once).
    pub fn credential(&self, mechanism: Mechanism) -> Credential {
        let salt = &self.mac(b"sluice node salt", &[])[..16];
        Credential::new(mechanism, self.password().as_bytes(), salt, NODE_ITERATIONS)
    }
}

/// A node's part in node-to-node authentication, from its config: what it logs in to other
/// nodes with, and the node user's credentials it checks logins against (derived once, at
/// start: PBKDF2 is slow on purpose).
#[derive(Debug)]
pub struct NodeLogin {
    pub secret: Option<NodeSecret>,
    /// The SCRAM mechanism this node logs in with: SHA-512 where enabled.
    pub mechanism: Mechanism,
    credentials: Vec<Credential>,
}

impl NodeLogin {
    pub fn new(config: &Config) -> NodeLogin {
        let enabled = |m: Mechanism| config.sasl.mechanisms.iter().any(|n| n == m.name());
        let mechanism = if enabled(Mechanism::Sha512) || !enabled(Mechanism::Sha256) {
            Mechanism::Sha512
        } else {
            Mechanism::Sha256
        };
        let secret = NodeSecret::of(config);
        let credentials = secret
            .iter()
            .flat_map(|s| Mechanism::ALL.map(|m| s.credential(m)))
            .collect();
        NodeLogin {
            secret,
            mechanism,
            credentials,
        }
    }

    /// The node user's credential for `mechanism`; None without a secret (no node logs in).
    pub fn credential(&self, mechanism: Mechanism) -> Option<Credential> {
        let found = self.credentials.iter().find(|c| c.mechanism == mechanism);
        found.cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_the_secret_the_side_and_both_nonces() {
        let s = NodeSecret::new("0123456789abcdef");
        let other = NodeSecret::new("0123456789abcdeX");
        let (c, v) = ([1u8; NONCE_BYTES], [2u8; NONCE_BYTES]);
        let proof = s.rpc_proof(Side::Server, &c, &v);
        assert_eq!(proof.len(), PROOF_BYTES);
        assert!(s.check_rpc_proof(Side::Server, &c, &v, &proof));
        assert!(!s.check_rpc_proof(Side::Client, &c, &v, &proof));
        assert!(!s.check_rpc_proof(Side::Server, &v, &c, &proof));
        assert!(!other.check_rpc_proof(Side::Server, &c, &v, &proof));
        assert!(!s.check_rpc_proof(Side::Server, &c, &v, &proof[..31]));
        assert_ne!(s.password(), other.password());
        let cred = s.credential(Mechanism::Sha512);
        assert!(cred.matches(s.password().as_bytes()));
        assert!(!cred.matches(other.password().as_bytes()));
    }
}
