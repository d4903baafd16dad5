//! The security sections of the config (issue 19): `[[listeners]]`, `[tls]`, `[sasl]` and
//! `[authorization]`, with their validation. A config without `[[listeners]]` has one
//! PLAINTEXT listener at `listen` (advertised as `advertised_listener`), as before.

use super::{bad, host_port};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Bound on listeners: each is a socket per shard.
pub const MAX_LISTENERS: usize = 16;
/// Shortest `[cluster] secret` accepted: 128 bits written as hex or base64.
pub const MIN_CLUSTER_SECRET_BYTES: usize = 16;
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

    /// Kafka's id (`org.apache.kafka.common.security.auth.SecurityProtocol`), as registrations
    /// store it.
    pub fn id(self) -> i16 {
        match self {
            SecurityProtocol::Plaintext => 0,
            SecurityProtocol::Ssl => 1,
            SecurityProtocol::SaslPlaintext => 2,
            SecurityProtocol::SaslSsl => 3,
        }
    }

    pub fn from_id(id: i16) -> Option<SecurityProtocol> {
        [
            SecurityProtocol::Plaintext,
            SecurityProtocol::Ssl,
            SecurityProtocol::SaslPlaintext,
            SecurityProtocol::SaslSsl,
        ]
        .into_iter()
        .find(|p| p.id() == id)
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
    /// PEM: the CAs this node trusts when it connects to other nodes' TLS listeners (Kafka's
    /// truststore); defaults to `client_ca_file`. Under mutual TLS the node presents its own
    /// certificate (`cert_file`).
    pub ca_file: Option<PathBuf>,
}

impl TlsConfig {
    /// The CAs other nodes' certificates are checked against.
    pub fn trusted_ca_file(&self) -> Option<&PathBuf> {
        self.ca_file.as_ref().or(self.client_ca_file.as_ref())
    }
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
        self.validate_inter_broker()
    }

    /// The inter-broker listener exists; in a cluster with security, nodes can prove
    /// themselves to each other on it and on the RPC port.
    fn validate_inter_broker(&self) -> anyhow::Result<()> {
        let listeners = self.effective_listeners();
        if let Some(name) = &self.inter_broker_listener {
            if !listeners.iter().any(|l| l.name == *name) {
                return bad(
                    "inter_broker_listener",
                    format!("no listener is named {name:?}"),
                );
            }
        }
        if !self.is_clustered() {
            return Ok(());
        }
        let secured = self.authorization.enabled
            || listeners
                .iter()
                .any(|l| l.security_protocol != SecurityProtocol::Plaintext);
        if secured && self.cluster.secret.is_none() {
            let why = "a cluster with a TLS or SASL listener or authorization needs one: \
                       nodes prove it to each other";
            return bad("cluster.secret", why.into());
        }
        let protocol = self.inter_broker_listener().security_protocol;
        let trusted = self
            .tls
            .as_ref()
            .is_some_and(|t| t.trusted_ca_file().is_some());
        if protocol.tls() && !trusted {
            let why = "the inter-broker listener uses TLS: ca_file (or client_ca_file) is \
                       what other nodes' certificates are checked against";
            return bad("tls.ca_file", why.into());
        }
        let scram = self.sasl.mechanisms.iter().any(|m| m.starts_with("SCRAM-"));
        if protocol.sasl() && !scram {
            let why = "the inter-broker listener uses SASL: nodes log in with SCRAM";
            return bad("sasl.mechanisms", why.into());
        }
        Ok(())
    }

    /// The name of the listener other nodes dial this one on (no copy: followers ask each
    /// round).
    pub fn inter_broker_listener_name(&self) -> &str {
        match (&self.inter_broker_listener, self.listeners.first()) {
            (Some(name), _) => name,
            (None, Some(first)) => &first.name,
            (None, None) => DEFAULT_LISTENER_NAME,
        }
    }

    /// The listener other nodes dial this one on.
    pub fn inter_broker_listener(&self) -> ListenerConfig {
        let name = self.inter_broker_listener_name();
        let listeners = self.effective_listeners();
        let found = listeners.iter().find(|l| l.name == name);
        found
            .expect("validated: the inter-broker listener exists")
            .clone()
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
    fn a_secured_cluster_needs_a_secret_and_a_usable_inter_broker_listener() {
        let cluster = r#"
            node_id = 1
            rpc_listen = "127.0.0.1:7001"
            voters = ["1@127.0.0.1:7001"]
            inter_broker_listener = "internal"
            [[listeners]]
            name = "external"
            address = "127.0.0.1:9092"
            security_protocol = "SASL_PLAINTEXT"
            [[listeners]]
            name = "internal"
            address = "127.0.0.1:9093"
            security_protocol = "SASL_SSL"
            [tls]
            cert_file = "c.pem"
            key_file = "k.pem"
            ca_file = "ca.pem"
        "#;
        assert!(check(cluster).unwrap_err().contains("cluster.secret"));
        let with_secret = format!("{cluster}\n[cluster]\nsecret = \"0123456789abcdef\"\n");
        let c = check(&with_secret).unwrap();
        assert_eq!(c.inter_broker_listener().name, "internal");
        let short = with_secret.replace("0123456789abcdef", "short");
        assert!(check(&short).unwrap_err().contains("cluster.secret"));
        let untrusted = with_secret.replace("ca_file = \"ca.pem\"", "");
        assert!(check(&untrusted).unwrap_err().contains("tls.ca_file"));
        let plain_only = format!("{with_secret}\n[sasl]\nmechanisms = [\"PLAIN\"]\n");
        assert!(check(&plain_only).unwrap_err().contains("SCRAM"));
        let unknown = with_secret.replace(
            "inter_broker_listener = \"internal\"",
            "inter_broker_listener = \"x\"",
        );
        assert!(check(&unknown)
            .unwrap_err()
            .contains("inter_broker_listener"));
        // Authorization alone in a cluster needs the secret too.
        let plain =
            "node_id = 1\nrpc_listen = \"127.0.0.1:7001\"\nvoters = [\"1@127.0.0.1:7001\"]\n";
        assert!(check(plain).is_ok());
        let authorizing = format!("{plain}[authorization]\nenabled = true\n");
        assert!(check(&authorizing).unwrap_err().contains("cluster.secret"));
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
