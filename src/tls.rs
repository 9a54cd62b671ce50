//! TLS for the mirror's own listener: loading the operator's certificate, or generating a
//! self-signed CA and server certificate into `<cache.dir>/tls` on first start.
//!
//! The generated CA's private key is never written to disk: it signs the server certificate once
//! and is dropped. Clients trust `ca.pem` (e.g. `SSL_CERT_FILE`); to change the certificate's
//! names, delete the `tls` directory and restart.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Makes ring the process-wide rustls provider (idempotent).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Files of the generated self-signed setup.
pub struct SelfSigned {
    pub ca_cert: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl SelfSigned {
    pub fn in_dir(cache_dir: &Path) -> SelfSigned {
        let dir = cache_dir.join("tls");
        SelfSigned {
            ca_cert: dir.join("ca.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server-key.pem"),
        }
    }

    /// Generates the CA and server certificate unless all three files exist already.
    /// Returns whether new files were written.
    pub fn ensure(&self, extra_names: &[String]) -> anyhow::Result<bool> {
        if self.ca_cert.exists() && self.cert.exists() && self.key.exists() {
            return Ok(false);
        }
        let dir = self.cert.parent().expect("tls files live in a directory");
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;

        let ca_key = rcgen::KeyPair::generate().context("generating the CA key")?;
        let mut ca_params =
            rcgen::CertificateParams::new(Vec::<String>::new()).context("CA parameters")?;
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "provender local CA");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        let ca_cert = ca_params
            .self_signed(&ca_key)
            .context("self-signing the CA")?;
        let issuer = rcgen::Issuer::new(ca_params, ca_key);

        let mut names = vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ];
        names.extend(
            extra_names
                .iter()
                .filter(|n| !names.contains(n))
                .cloned()
                .collect::<Vec<_>>(),
        );
        let key = rcgen::KeyPair::generate().context("generating the server key")?;
        let mut params =
            rcgen::CertificateParams::new(names).context("server certificate names")?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "provender");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params
            .signed_by(&key, &issuer)
            .context("signing the server certificate")?;

        write_private(&self.key, key.serialize_pem().as_bytes())?;
        std::fs::write(&self.cert, format!("{}{}", cert.pem(), ca_cert.pem()))
            .with_context(|| format!("writing {}", self.cert.display()))?;
        std::fs::write(&self.ca_cert, ca_cert.pem())
            .with_context(|| format!("writing {}", self.ca_cert.display()))?;
        Ok(true)
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(bytes)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Builds the listener's TLS configuration (HTTP/2 and HTTP/1.1 via ALPN) from PEM files.
pub fn server_config(cert: &Path, key: &Path) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    install_crypto_provider();
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("server.tls_cert {}", cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| {
            format!(
                "server.tls_cert {}: not a PEM certificate chain",
                cert.display()
            )
        })?;
    if certs.is_empty() {
        anyhow::bail!(
            "server.tls_cert {}: contains no certificate",
            cert.display()
        );
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("server.tls_key {}: no PEM private key", key.display()))?;
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context(
            "server.tls_cert and server.tls_key do not form a usable certificate and key pair",
        )?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
