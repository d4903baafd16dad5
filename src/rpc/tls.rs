//! TLS as a node dials another node's TLS listener (issue 19): a rustls client (ring
//! provider, TLS 1.2 and 1.3) that checks the peer's certificate against `[tls] ca_file`
//! (else `client_ca_file`) and the address dialed, and presents this node's own certificate
//! where the peer asks for one (mutual TLS). Read at start and again on SIGHUP, as the
//! server's side (`server/tls.rs`) is; both read PEM files through the helpers here.

use crate::config::security::TlsConfig;
use futures_rustls::{TlsAcceptor, TlsConnector};
use rustls::ClientConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::{Arc, RwLock};

static CURRENT: RwLock<Option<TlsConnector>> = RwLock::new(None);

/// An error naming a `[tls]` file and why it cannot be used.
pub fn unusable(p: &Path, e: &dyn std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("[tls] {}: {e}", p.display())
}

/// The certificates of a PEM file (a chain, or CAs); Err names the file.
pub fn certificates(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let found: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| unusable(path, &e))?
        .collect::<Result<_, _>>()
        .map_err(|e| unusable(path, &e))?;
    if found.is_empty() {
        return Err(unusable(path, &"no certificate in the file"));
    }
    Ok(found)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn private_key(path: &Path) -> anyhow::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| unusable(path, &e))
}

/// The CAs of a PEM file, as a trust store.
pub fn roots(path: &Path) -> anyhow::Result<Arc<rustls::RootCertStore>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(path)? {
        roots.add(cert).map_err(|e| unusable(path, &e))?;
    }
    Ok(Arc::new(roots))
}

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds the client side from `[tls]` (start, SIGHUP); nothing where no CA is trusted.
/// Err: unusable files (at start, start-up stops naming them; on SIGHUP the previous stays).
pub fn load(tls: &TlsConfig) -> anyhow::Result<()> {
    let Some(ca_file) = tls.trusted_ca_file() else {
        return Ok(());
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_root_certificates(roots(ca_file)?);
    let chain = certificates(&tls.cert_file)?;
    let key = private_key(&tls.key_file)?;
    let config = builder
        .with_client_auth_cert(chain, key)
        .map_err(|e| unusable(&tls.key_file, &e))?;
    *CURRENT.write().expect("TLS client lock") = Some(TlsConnector::from(Arc::new(config)));
    let acceptor = rpc_server(tls, ca_file)?;
    *RPC_ACCEPTOR.write().expect("TLS RPC lock") = Some(acceptor);
    Ok(())
}

/// The RPC listener's TLS side, once `load` found a trusted CA: every RPC connection is then
/// TLS, accepted only from a dialer whose certificate the CA signed (mutual TLS), and dialed
/// only to a peer whose certificate the CA signed for the address dialed.
static RPC_ACCEPTOR: RwLock<Option<TlsAcceptor>> = RwLock::new(None);

fn rpc_server(tls: &TlsConfig, ca_file: &Path) -> anyhow::Result<TlsAcceptor> {
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots(ca_file)?, provider())
            .build()
            .map_err(|e| unusable(ca_file, &e))?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certificates(&tls.cert_file)?, private_key(&tls.key_file)?)
        .map_err(|e| unusable(&tls.cert_file, &e))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The RPC listener's TLS acceptor, where RPC is encrypted.
pub fn rpc_acceptor() -> Option<TlsAcceptor> {
    RPC_ACCEPTOR.read().expect("TLS RPC lock").clone()
}

/// What dials a peer's RPC port, where RPC is encrypted.
pub fn rpc_dialer() -> Option<TlsConnector> {
    rpc_acceptor().and(connector())
}

/// The client side in force, if loaded.
pub fn connector() -> Option<TlsConnector> {
    CURRENT.read().expect("TLS client lock").clone()
}
