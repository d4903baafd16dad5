//! TLS for SSL and SASL_SSL listeners (issue 19): rustls (ring provider, TLS 1.2 and 1.3) over
//! glommio's TCP stream through futures-rustls. The certificate, key and client CAs come from
//! `[tls]` and are read again on SIGHUP: new connections get the new certificate, open ones
//! keep theirs; a reload that fails is logged and the previous files stay in use.
//!
//! There is no sendfile under TLS: records are encrypted in user space, so TLS fetches take
//! the copying path. The kernel's TLS offload (kTLS) would allow sendfile again; Sluice checks
//! for the kernel's `tls` module at start and says which path TLS takes (no offload yet).

use crate::config::{Config, SecurityProtocol};
use crate::rpc::tls as rpc_tls;
use futures_rustls::TlsAcceptor;
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use std::sync::{Arc, RwLock};

/// The server configs in force: one per kind of client authentication a listener asks for.
struct Acceptors {
    /// No client certificate asked for (no `client_ca_file`).
    none: TlsAcceptor,
    /// With `client_ca_file`: SSL listeners require a certificate, SASL_SSL ones accept one.
    required: Option<TlsAcceptor>,
    optional: Option<TlsAcceptor>,
}

static CURRENT: RwLock<Option<Arc<Acceptors>>> = RwLock::new(None);

/// Loads `[tls]` at start, where a listener uses TLS or the node is clustered. Err: the files
/// are unusable (start-up stops, naming them).
pub fn load(config: &Config) -> anyhow::Result<()> {
    // A node of a cluster with a trusted CA dials TLS listeners and speaks TLS on its RPC port.
    if let (Some(tls), true) = (&config.tls, config.is_clustered()) {
        rpc_tls::load(tls)?;
    }
    let uses_tls = config
        .effective_listeners()
        .iter()
        .any(|l| l.security_protocol.tls());
    let Some(tls) = config.tls.as_ref().filter(|_| uses_tls) else {
        return Ok(());
    };
    let acceptors = build(tls)?;
    *CURRENT.write().expect("TLS config lock") = Some(Arc::new(acceptors));
    if kernel_tls_available() {
        log::info!("TLS: the kernel's tls module is loaded, but Sluice does not offload to it yet; TLS fetches are copied and encrypted in user space");
    } else {
        log::info!("TLS: no kernel TLS offload (the tls module is not loaded); TLS fetches are copied and encrypted in user space");
    }
    Ok(())
}

/// Reads `[tls]`'s files again (SIGHUP). Keeps the previous ones if the new ones are unusable.
pub fn reload(config: &Config) {
    let Some(tls) = &config.tls else { return };
    if CURRENT.read().expect("TLS config lock").is_none() {
        if config.is_clustered() {
            if let Err(e) = rpc_tls::load(tls) {
                log::error!("TLS: reload failed, keeping the previous certificate: {e}");
            }
        }
        return;
    }
    let reloaded = build(tls).and_then(|a| {
        if config.is_clustered() {
            rpc_tls::load(tls)?;
        }
        Ok(a)
    });
    match reloaded {
        Ok(a) => {
            *CURRENT.write().expect("TLS config lock") = Some(Arc::new(a));
            log::info!("TLS: reloaded {}", tls.cert_file.display());
        }
        Err(e) => log::error!("TLS: reload failed, keeping the previous certificate: {e}"),
    }
}

/// The acceptor for a new connection on a listener of `protocol`.
pub fn acceptor(protocol: SecurityProtocol) -> Option<TlsAcceptor> {
    let current = CURRENT.read().expect("TLS config lock").clone()?;
    match protocol {
        SecurityProtocol::Ssl => current.required.clone(),
        SecurityProtocol::SaslSsl => current.optional.clone(),
        _ => None,
    }
    .or(Some(current.none.clone()))
}

fn build(tls: &crate::config::security::TlsConfig) -> anyhow::Result<Acceptors> {
    let chain = rpc_tls::certificates(&tls.cert_file)?;
    let key = rpc_tls::private_key(&tls.key_file)?;
    let config = |verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>| {
        let builder = ServerConfig::builder_with_provider(rpc_tls::provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
        let builder = match verifier {
            Some(v) => builder.with_client_cert_verifier(v),
            None => builder.with_no_client_auth(),
        };
        let c = builder.with_single_cert(chain.clone(), key.clone_key())?;
        anyhow::Ok(TlsAcceptor::from(Arc::new(c)))
    };
    let none = config(None).map_err(|e| rpc_tls::unusable(&tls.cert_file, &e))?;
    let Some(ca_file) = &tls.client_ca_file else {
        return Ok(Acceptors {
            none,
            required: None,
            optional: None,
        });
    };
    let roots = rpc_tls::roots(ca_file)?;
    let verifier = |optional: bool| {
        let b = WebPkiClientVerifier::builder_with_provider(roots.clone(), rpc_tls::provider());
        let b = if optional {
            b.allow_unauthenticated()
        } else {
            b
        };
        b.build().map_err(|e| rpc_tls::unusable(ca_file, &e))
    };
    Ok(Acceptors {
        none,
        required: Some(config(Some(verifier(false)?))?),
        optional: Some(config(Some(verifier(true)?))?),
    })
}

/// Whether the kernel's TLS module (kTLS) is loaded.
pub fn kernel_tls_available() -> bool {
    std::path::Path::new("/sys/module/tls").exists()
}

thread_local! {
    static FAILURES_LOGGED: crate::metrics::LogLimiter =
        const { crate::metrics::LogLimiter::new(1_000) };
}

/// What to do about a refused client certificate, where the person reading the log can act:
/// webpki, which rustls checks certificates with, takes X.509 version 3 only, and Kafka's own
/// documentation makes version 1 client certificates (`openssl x509 -req` with no
/// extensions), which Java accepts. Checking a version 1 chain by hand is not worth the risk.
fn explained(why: String) -> String {
    match why.contains("UnsupportedCertVersion") {
        true => format!(
            "{why}: the client's certificate is X.509 version 1, which Sluice does not \
             accept; reissue it as version 3 (openssl x509 -req ... -extfile with \
             `basicConstraints=CA:FALSE` and `extendedKeyUsage=clientAuth`)"
        ),
        false => why,
    }
}

/// The TLS handshake of a new connection on a TLS listener, bounded by
/// `request_read_timeout_ms`. None: it failed or timed out (plaintext or garbage on the port,
/// a refused client certificate); counted, logged at most once a second per shard, and the
/// connection closes.
pub async fn handshake(
    shard: &crate::shard::Shard,
    peer: &str,
    protocol: SecurityProtocol,
    stream: glommio::net::TcpStream,
) -> Option<futures_rustls::server::TlsStream<glommio::net::TcpStream>> {
    use futures::future::Either;
    let Some(acceptor) = acceptor(protocol) else {
        log::error!("{peer}: closing: no TLS configuration loaded");
        return None;
    };
    let timeout_ms = shard.config.request_read_timeout_ms;
    let accept = acceptor.accept(stream);
    let deadline = glommio::timer::sleep(std::time::Duration::from_millis(timeout_ms));
    futures::pin_mut!(accept, deadline);
    let why = match futures::future::select(accept, deadline).await {
        Either::Left((Ok(tls), _)) => {
            crate::metrics::bump(&shard.metrics().tls_handshakes);
            return Some(tls);
        }
        Either::Left((Err(e), _)) => explained(e.to_string()),
        Either::Right(_) => format!("no TLS handshake within {timeout_ms} ms"),
    };
    crate::metrics::bump(&shard.metrics().tls_handshake_failures);
    let now_ms = shard.clock().monotonic_ms();
    if let Some(suppressed) = FAILURES_LOGGED.with(|l| l.admit(now_ms)) {
        log::warn!("{peer}: closing: TLS handshake failed: {why} ({suppressed} more not logged)");
    }
    None
}
