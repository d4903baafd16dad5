//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), the server's side, as Kafka speaks
//! them (KIP-84): two client messages, two answers. A user's credential per mechanism is a
//! salt, an iteration count and two keys derived from the password (`Credential`); the
//! password itself is never stored.
//!
//! The exchange, with `H` the mechanism's hash and `HMAC` keyed by its first argument:
//! - client-first `n,[a=authzid],n=user,r=cnonce` → server-first `r=cnonce+snonce,s=salt,i=n`;
//! - client-final `c=base64(gs2 header),r=nonce,p=proof` → server-final `v=signature`, where
//!   the proof XOR `HMAC(StoredKey, AuthMessage)` must hash to StoredKey, and the signature is
//!   `HMAC(ServerKey, AuthMessage)` (AuthMessage: client-first-bare, server-first and
//!   client-final without the proof, joined by commas).
//!
//! Pure: the server nonce comes in as a value, the credential through a lookup.

use super::{SaslError, SaslResult};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

/// Kafka's bounds on a credential's iteration count.
pub const MIN_ITERATIONS: u32 = 4096;
pub const MAX_ITERATIONS: u32 = 16384;
/// Bound on one client message (bytes): a name, two nonces and a proof, with room to spare.
pub const MAX_MESSAGE_BYTES: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mechanism {
    Sha256,
    Sha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::Sha256, Mechanism::Sha512];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha256 => "SCRAM-SHA-256",
            Mechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Kafka's ScramMechanism code (Describe/AlterUserScramCredentials).
    pub fn code(self) -> i8 {
        match self {
            Mechanism::Sha256 => 1,
            Mechanism::Sha512 => 2,
        }
    }

    pub fn from_code(code: i8) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.code() == code)
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => Sha256::digest(data).to_vec(),
            Mechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        fn mac<M: Mac + hmac::digest::KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
            let mut m = <M as hmac::digest::KeyInit>::new_from_slice(key)
                .expect("HMAC takes a key of any length");
            m.update(data);
            m.finalize().into_bytes().to_vec()
        }
        match self {
            Mechanism::Sha256 => mac::<Hmac<Sha256>>(key, data),
            Mechanism::Sha512 => mac::<Hmac<Sha512>>(key, data),
        }
    }

    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => {
                pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec()
            }
            Mechanism::Sha512 => {
                pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec()
            }
        }
    }
}

/// A user's SCRAM credential for one mechanism: what the server keeps instead of a password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    pub mechanism: Mechanism,
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl Credential {
    /// The credential of `password` (salted with `salt`, `iterations` rounds of PBKDF2), as
    /// AlterUserScramCredentials' salted password gives it or a bootstrap user's password.
    pub fn new(mechanism: Mechanism, password: &[u8], salt: &[u8], iterations: u32) -> Credential {
        let salted = mechanism.salted_password(password, salt, iterations);
        Credential::from_salted(mechanism, &salted, salt, iterations)
    }

    /// The credential from a salted password (AlterUserScramCredentials sends that, never the
    /// password).
    pub fn from_salted(
        mechanism: Mechanism,
        salted_password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Credential {
        let client_key = mechanism.hmac(salted_password, b"Client Key");
        Credential {
            mechanism,
            salt: salt.to_vec(),
            iterations,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, b"Server Key"),
        }
    }

    /// Whether `password` is this credential's (PLAIN): its stored key, derived again,
    /// compared in constant time.
    pub fn matches(&self, password: &[u8]) -> bool {
        let again = Credential::new(self.mechanism, password, &self.salt, self.iterations);
        bool::from(again.stored_key.ct_eq(&self.stored_key))
    }
}

/// The server's state after answering a client-first message.
#[derive(Debug)]
pub struct FirstAnswered {
    pub username: String,
    credential: Credential,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

impl FirstAnswered {
    /// The server-first message to send.
    pub fn server_first(&self) -> &[u8] {
        self.server_first.as_bytes()
    }
}

fn text(msg: &[u8]) -> SaslResult<&str> {
    if msg.len() > MAX_MESSAGE_BYTES {
        return Err(SaslError("SCRAM message too long"));
    }
    std::str::from_utf8(msg).map_err(|_| SaslError("SCRAM message is not UTF-8"))
}

/// A `saslname`: `=2C` stands for `,` and `=3D` for `=`; any other `=` is malformed.
fn decode_saslname(raw: &str) -> SaslResult<String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('=') {
        out.push_str(&rest[..at]);
        let escaped = rest.get(at..at + 3);
        out.push(match escaped {
            Some("=2C") => ',',
            Some("=3D") => '=',
            _ => return Err(SaslError("malformed SCRAM username")),
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The value of attribute `name` (`name=value`) of `field`.
fn attribute(field: Option<&str>, name: char) -> SaslResult<&str> {
    field
        .and_then(|f| f.strip_prefix(name))
        .and_then(|f| f.strip_prefix('='))
        .ok_or(SaslError("malformed SCRAM message"))
}

/// Answers a client-first message with `server_nonce` (printable, no comma), the user's
/// credential found by `lookup`. Channel binding is not offered (`p=` is refused), nor are
/// delegation tokens (the `tokenauth` extension).
pub fn client_first(
    msg: &[u8],
    server_nonce: &str,
    lookup: impl FnOnce(&str) -> Option<Credential>,
) -> SaslResult<FirstAnswered> {
    let msg = text(msg)?;
    let mut fields = msg.splitn(3, ',');
    let (cbind, authzid, bare) = (fields.next(), fields.next(), fields.next());
    let (Some(cbind @ ("n" | "y")), Some(authzid), Some(bare)) = (cbind, authzid, bare) else {
        return Err(SaslError("SCRAM channel binding is not supported"));
    };
    let mut attrs = bare.split(',');
    let username = decode_saslname(attribute(attrs.next(), 'n')?)?;
    let client_nonce = attribute(attrs.next(), 'r')?;
    if attrs.any(|ext| ext.starts_with("tokenauth=")) {
        return Err(SaslError("delegation tokens are not supported"));
    }
    if !authzid.is_empty() && decode_saslname(attribute(Some(authzid), 'a')?)? != username {
        return Err(SaslError(
            "SCRAM authorization id differs from the username",
        ));
    }
    if username.is_empty() || client_nonce.is_empty() {
        return Err(SaslError("malformed SCRAM message"));
    }
    let credential = lookup(&username).ok_or(SaslError("invalid credentials"))?;
    let nonce = format!("{client_nonce}{server_nonce}");
    let server_first = format!(
        "r={nonce},s={},i={}",
        BASE64.encode(&credential.salt),
        credential.iterations
    );
    Ok(FirstAnswered {
        username,
        credential,
        gs2_header: format!("{cbind},{authzid},"),
        client_first_bare: bare.to_string(),
        server_first,
        nonce,
    })
}

/// Checks a client-final message against the exchange so far; Ok: the server-final message,
/// and the user is authenticated.
pub fn client_final(first: &FirstAnswered, msg: &[u8]) -> SaslResult<Vec<u8>> {
    let msg = text(msg)?;
    let (without_proof, proof) = msg
        .rsplit_once(",p=")
        .ok_or(SaslError("malformed SCRAM message"))?;
    let mut attrs = without_proof.split(',');
    let binding = attribute(attrs.next(), 'c')?;
    let nonce = attribute(attrs.next(), 'r')?;
    if BASE64.decode(binding).ok().as_deref() != Some(first.gs2_header.as_bytes()) {
        return Err(SaslError("SCRAM channel binding does not match"));
    }
    if nonce != first.nonce {
        return Err(SaslError("SCRAM nonce does not match"));
    }
    let proof = BASE64
        .decode(proof)
        .map_err(|_| SaslError("malformed SCRAM proof"))?;
    let c = &first.credential;
    let auth_message = format!(
        "{},{},{without_proof}",
        first.client_first_bare, first.server_first
    );
    let signature = c.mechanism.hmac(&c.stored_key, auth_message.as_bytes());
    if proof.len() != signature.len() {
        return Err(SaslError("invalid credentials"));
    }
    let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
    if !bool::from(c.mechanism.hash(&client_key).ct_eq(&c.stored_key)) {
        return Err(SaslError("invalid credentials"));
    }
    let server_signature = c.mechanism.hmac(&c.server_key, auth_message.as_bytes());
    Ok(format!("v={}", BASE64.encode(server_signature)).into_bytes())
}

pub mod client;
#[cfg(test)]
mod tests;
