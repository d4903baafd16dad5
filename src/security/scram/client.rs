//! SCRAM's client side, for a node logging in to another node's SASL listener as the cluster's
//! node user (`security::node`). Pure: the nonce comes in as a value. The server's final
//! message is checked, so a node also knows it reached a peer that holds the credential.

use super::{attribute, text, Mechanism, BASE64};
use crate::security::{SaslError, SaslResult};
use base64::Engine;
use subtle::ConstantTimeEq;

/// After the client-first message: what answering the server-first one needs.
pub struct Started {
    mechanism: Mechanism,
    password: Vec<u8>,
    client_first_bare: String,
    nonce: String,
}

/// After the client-final message: the server signature the server-final must carry.
pub struct Proven {
    server_signature: Vec<u8>,
}

/// The client-first message for `user` with `nonce` (printable, no comma), and the state.
/// `user` must need no escaping (no `,` or `=`), as the node user does not.
pub fn start(mechanism: Mechanism, user: &str, password: &str, nonce: &str) -> (Started, Vec<u8>) {
    assert!(!user.contains([',', '=']), "a SCRAM name without escapes");
    let bare = format!("n={user},r={nonce}");
    let message = format!("n,,{bare}").into_bytes();
    let started = Started {
        mechanism,
        password: password.as_bytes().to_vec(),
        client_first_bare: bare,
        nonce: nonce.to_string(),
    };
    (started, message)
}

impl Started {
    /// Answers the server-first message: the client-final message, with its proof.
    pub fn answer(self, server_first: &[u8]) -> SaslResult<(Proven, Vec<u8>)> {
        let server_first = text(server_first)?;
        let mut attrs = server_first.split(',');
        let nonce = attribute(attrs.next(), 'r')?;
        let salt = BASE64
            .decode(attribute(attrs.next(), 's')?)
            .map_err(|_| SaslError("malformed SCRAM salt"))?;
        let iterations: u32 = attribute(attrs.next(), 'i')?
            .parse()
            .map_err(|_| SaslError("malformed SCRAM iteration count"))?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(SaslError("SCRAM server nonce does not extend ours"));
        }
        if !(super::MIN_ITERATIONS..=super::MAX_ITERATIONS).contains(&iterations) {
            return Err(SaslError("SCRAM iteration count out of range"));
        }
        let m = self.mechanism;
        let salted = m.salted_password(&self.password, &salt, iterations);
        let client_key = m.hmac(&salted, b"Client Key");
        let without_proof = format!("c={},r={nonce}", BASE64.encode("n,,"));
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let signature = m.hmac(&m.hash(&client_key), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = m.hmac(&salted, b"Server Key");
        let proven = Proven {
            server_signature: m.hmac(&server_key, auth_message.as_bytes()),
        };
        let message = format!("{without_proof},p={}", BASE64.encode(proof));
        Ok((proven, message.into_bytes()))
    }
}

impl Proven {
    /// Checks the server-final message: the server proved it holds the credential.
    pub fn verify(&self, server_final: &[u8]) -> SaslResult<()> {
        let signature = text(server_final)?
            .strip_prefix("v=")
            .and_then(|v| BASE64.decode(v).ok())
            .ok_or(SaslError(
                "SCRAM server-final message is an error or malformed",
            ))?;
        if bool::from(signature.ct_eq(&self.server_signature)) {
            Ok(())
        } else {
            Err(SaslError("SCRAM server signature does not match"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::scram::{client_final, client_first, Credential};

    #[test]
    fn logs_in_against_the_server_side_and_checks_its_signature() {
        for m in Mechanism::ALL {
            let credential = Credential::new(m, b"s3cret", b"salty", 4096);
            let (started, first) = start(m, "node", "s3cret", "abc");
            let lookup = |u: &str| (u == "node").then(|| credential.clone());
            let answered = client_first(&first, "xyz", lookup).unwrap();
            let (proven, last) = started.answer(answered.server_first()).unwrap();
            let server_final = client_final(&answered, &last).unwrap();
            proven.verify(&server_final).unwrap();
            assert!(proven.verify(b"v=AAAA").is_err());
            assert!(proven.verify(b"e=invalid-proof").is_err());
            // A wrong password's proof is refused by the server.
            let (started, first) = start(m, "node", "wrong", "abc");
            let answered = client_first(&first, "xyz", lookup).unwrap();
            let (_, last) = started.answer(answered.server_first()).unwrap();
            assert!(client_final(&answered, &last).is_err());
        }
        // A server that does not extend the client's nonce is refused.
        let (started, _) = start(Mechanism::Sha256, "node", "p", "abc");
        assert!(started.answer(b"r=zzz,s=AAAA,i=4096").is_err());
    }
}
