//! TLS client configuration (rustls with the ring provider).

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;

use crate::config::TlsOptions;

/// Builds the rustls client configuration from [`TlsOptions`]: the system
/// roots (or the bundled webpki roots when the system has none), plus every
/// certificate in `extra_ca_files`; ALPN `http/1.1`.
///
/// Errors: a CA file that cannot be read or holds no certificate.
pub fn client_config(options: &TlsOptions) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let mut roots = RootCertStore::empty();
    if options.system_roots {
        let native = rustls_native_certs::load_native_certs();
        for cert in native.certs {
            let _ = roots.add(cert);
        }
        if roots.is_empty() {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
    }
    for path in &options.extra_ca_files {
        let pem = std::fs::read(path)
            .map_err(|e| anyhow::anyhow!("reading CA file {}: {e}", path.display()))?;
        let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut pem.as_slice())
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("parsing CA file {}: {e}", path.display()))?;
        if certs.is_empty() {
            anyhow::bail!("CA file {} holds no PEM certificate", path.display());
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| anyhow::anyhow!("CA file {}: {e}", path.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
