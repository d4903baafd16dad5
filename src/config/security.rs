//! The security sections of the config (issue 19): `[[listeners]]`, `[tls]`, `[sasl]` and
//! `[authorization]`, with their validation. A config without `[[listeners]]` has one
//! PLAINTEXT listener at `listen` (advertised as `advertised_listener`), as before.

use super::{bad, host_port};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Bound on listeners: each is a socket per shard.
pub const MAX_LISTENERS: usize = 16;
/// Bound on bootstrap users and super users (config lists, read at start).
pub const MAX_CONFIGURED_USERS: usize = 1000;

/// How a listener's clients connect and authenticate (Kafka's `security.protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }

    /// Kafka's name, as DescribeCluster and logs say it.
    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }
}

/// One `[[listeners]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    pub name: String,
    pub address: String,
    /// HOST:PORT written into Metadata for this listener's clients; defaults to `address`.
    pub advertised: Option<String>,
    pub security_protocol: SecurityProtocol,
}

impl ListenerConfig {
    /// (host, port) this listener's clients are told to connect to.
    pub fn advertised(&self) -> (String, i32) {
        let addr = self.advertised.as_deref().unwrap_or(&self.address);
        host_port(addr).unwrap_or_else(|| ("127.0.0.1".into(), 9092))
    }
}

/// `[tls]`: the certificate SSL and SASL_SSL listeners present (reloaded on SIGHUP).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM: the certificate chain, the broker's own first.
    pub cert_file: PathBuf,
    /// PEM: the private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// PEM: the CAs client certificates must chain to. When set, SSL listeners require a
    /// client certificate (mutual TLS) and SASL_SSL listeners accept one.
    pub client_ca_file: Option<PathBuf>,
}

/// A user created at start if it has no credentials yet.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BootstrapUser {
    pub name: String,
    pub password: String,
}

/// `[sasl]`: the mechanisms SASL listeners offer.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SaslConfig {
    pub mechanisms: Vec<String>,
    pub bootstrap_users: Vec<BootstrapUser>,
    /// Kafka's `connections.max.reauth.ms` (KIP-368): a SASL session's lifetime, after which
    /// the client must authenticate again on the same connection or be disconnected. 0: no
    /// lifetime.
    pub connections_max_reauth_ms: u64,
}

impl Default for SaslConfig {
    fn default() -> Self {
        SaslConfig {
            mechanisms: SASL_MECHANISMS.map(String::from).to_vec(),
            bootstrap_users: Vec::new(),
            connections_max_reauth_ms: 0,
        }
    }
}

/// `[authorization]`: Kafka's StandardAuthorizer settings.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AuthorizationConfig {
    pub enabled: bool,
    /// Principals allowed everything (`User:admin`).
    pub super_users: Vec<String>,
    /// Where no ACL names a resource, allow everyone (Kafka's
    /// `allow.everyone.if.no.acl.found`).
    pub allow_everyone_if_no_acl_found: bool,
}

/// The SASL mechanisms Sluice serves (`security::sasl::Mechanism`'s names).
pub const SASL_MECHANISMS: [&str; 3] = ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"];
/// Bound on `sasl.connections_max_reauth_ms`: a week.
pub const MAX_REAUTH_MS: u64 = 7 * 24 * 3600 * 1000;
/// Bound on a user name's length (a SCRAM message is bounded at 4 KiB).
pub const MAX_USERNAME_BYTES: usize = 255;

/// The name of the listener a config without `[[listeners]]` has.
pub const DEFAULT_LISTENER_NAME: &str = "PLAINTEXT";

impl super::Config {
    /// The listeners in effect: `[[listeners]]`, or one PLAINTEXT listener at `listen`.
    pub fn effective_listeners(&self) -> Vec<ListenerConfig> {
        if !self.listeners.is_empty() {
            return self.listeners.clone();
        }
        vec![ListenerConfig {
            name: DEFAULT_LISTENER_NAME.into(),
            address: self.listen.clone(),
            advertised: self.advertised_listener.clone(),
            security_protocol: SecurityProtocol::Plaintext,
        }]
    }

    pub(super) fn validate_security(&self) -> anyhow::Result<()> {
        self.validate_listeners()?;
        self.validate_sasl()?;
        let users = &self.authorization.super_users;
        if users.len() > MAX_CONFIGURED_USERS {
            return bad("authorization.super_users", "too many".into());
        }
        if let Some(u) = users.iter().find(|u| !is_principal(u)) {
            return bad(
                "authorization.super_users",
                format!("{u:?} is not TYPE:NAME, such as User:admin"),
            );
        }
        Ok(())
    }

    fn validate_listeners(&self) -> anyhow::Result<()> {
        let listeners = &self.listeners;
        if listeners.len() > MAX_LISTENERS {
            return bad("listeners", format!("at most {MAX_LISTENERS}"));
        }
        for (i, l) in listeners.iter().enumerate() {
            let earlier = &listeners[..i];
            let valid_name = !l.name.is_empty()
                && l.name.len() <= 64
                && l.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid_name || earlier.iter().any(|e| e.name == l.name) {
                return bad(
                    "listeners.name",
                    format!("{:?} is empty, odd or taken", l.name),
                );
            }
            if l.address.parse::<SocketAddr>().is_err() {
                let why = format!("{:?} is not HOST:PORT with a numeric host", l.address);
                return bad("listeners.address", why);
            }
            if earlier.iter().any(|e| e.address == l.address) {
                return bad("listeners.address", format!("{} is taken twice", l.address));
            }
            if let Some(adv) = l.advertised.as_deref().filter(|a| host_port(a).is_none()) {
                return bad("listeners.advertised", format!("{adv:?} is not HOST:PORT"));
            }
            if l.security_protocol.tls() && self.tls.is_none() {
                let why = format!("listener {:?} uses TLS, which needs [tls]", l.name);
                return bad("tls", why);
            }
        }
        let secured = listeners
            .iter()
            .any(|l| l.security_protocol != SecurityProtocol::Plaintext);
        if self.is_clustered() && (listeners.len() > 1 || secured) {
            // A clustered node registers one endpoint, which other nodes fetch from in plain
            // Kafka; several listeners and inter-node security come with the registration's
            // listener list.
            return bad(
                "listeners",
                "a node of a cluster has one PLAINTEXT listener and no authorization for now"
                    .into(),
            );
        }
        Ok(())
    }

    fn validate_sasl(&self) -> anyhow::Result<()> {
        let sasl = &self.sasl;
        let known = |m: &String| SASL_MECHANISMS.contains(&m.as_str());
        if let Some(m) = sasl.mechanisms.iter().find(|m| !known(m)) {
            let why = format!("{m:?}: the mechanisms are SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN");
            return bad("sasl.mechanisms", why);
        }
        let needs_sasl = self
            .effective_listeners()
            .iter()
            .any(|l| l.security_protocol.sasl());
        if needs_sasl && sasl.mechanisms.is_empty() {
            return bad("sasl.mechanisms", "a SASL listener needs one".into());
        }
        if sasl.connections_max_reauth_ms > MAX_REAUTH_MS {
            let why = format!("{} is over {MAX_REAUTH_MS}", sasl.connections_max_reauth_ms);
            return bad("sasl.connections_max_reauth_ms", why);
        }
        if sasl.bootstrap_users.len() > MAX_CONFIGURED_USERS {
            return bad("sasl.bootstrap_users", "too many".into());
        }
        for u in &sasl.bootstrap_users {
            if u.name.is_empty() || u.name.len() > MAX_USERNAME_BYTES || u.password.is_empty() {
                let why = format!("user {:?}: a name and a password", u.name);
                return bad("sasl.bootstrap_users", why);
            }
        }
        Ok(())
    }
}

/// `TYPE:NAME` with both parts non-empty.
fn is_principal(p: &str) -> bool {
    p.split_once(':')
        .is_some_and(|(kind, name)| !kind.is_empty() && !name.is_empty())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn check(text: &str) -> Result<Config, String> {
        let c = Config::parse(&format!("shards = 1\n{text}")).map_err(|e| e.to_string())?;
        c.validate().map_err(|e| e.to_string())?;
        Ok(c)
    }

    #[test]
    fn listeners_replace_listen_and_are_checked() {
        let c = check("").unwrap();
        let l = c.effective_listeners();
        assert_eq!((l.len(), l[0].name.as_str()), (1, "PLAINTEXT"));
        assert_eq!(l[0].advertised(), ("127.0.0.1".to_string(), 9092));
        let two = r#"
            [[listeners]]
            name = "in"
            address = "127.0.0.1:9092"
            security_protocol = "PLAINTEXT"
            [[listeners]]
            name = "out"
            address = "127.0.0.1:9093"
            advertised = "broker1.example:19093"
            security_protocol = "SASL_PLAINTEXT"
        "#;
        let c = check(two).unwrap();
        let l = c.effective_listeners();
        assert_eq!(l[1].advertised(), ("broker1.example".to_string(), 19093));
        assert!(l[1].security_protocol.sasl() && !l[1].security_protocol.tls());
        let tls = two.replace("SASL_PLAINTEXT", "SASL_SSL");
        assert!(check(&tls).unwrap_err().contains("[tls]"));
        let twice = two.replace("9093", "9092");
        assert!(check(&twice).unwrap_err().contains("taken twice"));
        let same_name = two.replace("\"out\"", "\"in\"");
        assert!(check(&same_name).unwrap_err().contains("listeners.name"));
        let bad = two.replace("SASL_PLAINTEXT", "KERBEROS");
        assert!(check(&bad).is_err());
        let mechanisms = format!("{two}\n[sasl]\nmechanisms = [\"GSSAPI\"]\n");
        assert!(check(&mechanisms).unwrap_err().contains("sasl.mechanisms"));
        let none = format!("{two}\n[sasl]\nmechanisms = []\n");
        assert!(check(&none).unwrap_err().contains("needs one"));
    }

    #[test]
    fn users_and_super_users_are_checked() {
        let ok = "[sasl]\nbootstrap_users = [{ name = \"admin\", password = \"s\" }]\n[authorization]\nenabled = true\nsuper_users = [\"User:admin\"]\n";
        let c = check(ok).unwrap();
        assert!(c.authorization.enabled && !c.authorization.allow_everyone_if_no_acl_found);
        assert!(check(&ok.replace("\"User:admin\"", "\"admin\"")).is_err());
        assert!(check(&ok.replace("password = \"s\"", "password = \"\"")).is_err());
    }
}
