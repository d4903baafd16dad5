//! Security (issue 19), the parts without I/O: SASL's SCRAM-SHA-256/512 and PLAIN exchanges
//! (`scram.rs`, `plain.rs`) over credentials that hold no password, one connection's
//! handshake-then-authenticate state machine (`sasl.rs`), Kafka's ACL model (`acl.rs`) and
//! mutual TLS's principal (`principal.rs`), and how nodes prove the cluster secret to each
//! other (`node.rs`). The connection (`server/connection.rs`) drives
//! them; the catalog (`storage/security.rs`) keeps credentials and ACLs.

pub mod acl;
pub mod node;
pub mod plain;
pub mod principal;
pub mod sasl;
pub mod scram;

/// Why an authentication failed: said to the client (SASL_AUTHENTICATION_FAILED's message)
/// and logged. Never names whether the user exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaslError(pub &'static str);

pub type SaslResult<T> = Result<T, SaslError>;

/// The principal Kafka gives an authenticated SASL user: `User:<name>`.
pub fn user_principal(name: &str) -> String {
    format!("User:{name}")
}
