//! TLS to https upstreams. Built once at start-up and shared by every worker's connection pool:
//! a handshake is per connection, and pooled keep-alive connections amortize it.
//!
//! Trust is Mozilla's root set compiled into the binary (so that a minimal image or a Nix closure
//! without `/etc/ssl` still reaches public providers) plus the PEM files named in
//! `upstream_ca_files` (a private CA in front of a self-hosted model). Certificates are always
//! verified: there is no switch to turn verification off, so a misconfigured upstream fails with
//! a 502 rather than silently talking to whoever answers.

use std::sync::Arc;

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::{pem::PemObject, CertificateDer};

/// The client TLS configuration: built-in roots plus every certificate in `ca_files`.
pub fn client_config(ca_files: &[String]) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for path in ca_files {
        let mut added = 0;
        for cert in CertificateDer::pem_file_iter(path).map_err(|e| format!("{path}: {e}"))? {
            let cert = cert.map_err(|e| format!("{path}: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("{path}: not a usable CA certificate: {e}"))?;
            added += 1;
        }
        if added == 0 {
            return Err(format!("{path}: no PEM certificate in it"));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    // ALPN is left to the connector, which offers http/1.1 (the pool's only protocol).
    let cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_roots_and_bad_files() {
        assert!(client_config(&[]).is_ok());
        let missing = client_config(&["/nonexistent/ca.pem".into()]).unwrap_err();
        assert!(missing.starts_with("/nonexistent/ca.pem: "), "{missing}");
        let dir = std::env::temp_dir().join(format!("gw-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = client_config(&[empty.display().to_string()]).unwrap_err();
        assert!(e.contains("no PEM certificate"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
