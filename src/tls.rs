//! TLS for the mirror's own listener: loading the operator's certificate, or generating a
//! self-signed CA and server certificate into `<cache.dir>/tls` on first start.
//!
//! The generated CA's private key is never written to disk: it signs the server certificate once
//! and is dropped. Clients trust `ca.pem` (e.g. `SSL_CERT_FILE`); to change the certificate's
//! names, delete the `tls` directory and restart.
//!
//! The certificate in use is a [`ReloadingCert`]: the server reads its files again on `SIGHUP`
//! and whenever they change (checked every `server.tls_reload_interval`), so renewed
//! certificates are picked up by new connections without a restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use anyhow::Context as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Makes aws-lc-rs the process-wide rustls provider (idempotent): its AES-GCM and ChaCha20
/// code uses the CPU's vector instructions (AVX-512 where there is any), which the record layer
/// of every archive served spends most of its CPU in.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
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

/// Builds the listener's TLS configuration (HTTP/2 and HTTP/1.1 via ALPN) around `cert`.
pub fn server_config(cert: Arc<ReloadingCert>) -> Arc<rustls::ServerConfig> {
    install_crypto_provider();
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

/// What identifies the contents of the certificate and key files: a SHA-256 of each (the files
/// are small; times and sizes can survive a change, e.g. `cp -p` of a same-sized renewal).
type Stamp = Option<[u8; 32]>;

/// The bytes of the certificate and key files, each read once (following symbolic links, so a
/// swapped link, as Kubernetes secret volumes do, counts).
struct Files {
    cert: std::io::Result<Vec<u8>>,
    key: std::io::Result<Vec<u8>>,
}

impl Files {
    fn read(cert: &Path, key: &Path) -> Files {
        Files {
            cert: std::fs::read(cert),
            key: std::fs::read(key),
        }
    }

    fn stamps(&self) -> (Stamp, Stamp) {
        use sha2::Digest as _;
        let stamp = |bytes: &std::io::Result<Vec<u8>>| {
            bytes.as_ref().ok().map(|b| sha2::Sha256::digest(b).into())
        };
        (stamp(&self.cert), stamp(&self.key))
    }
}

/// The listener's certificate and key, read from their PEM files and read again when the files
/// change, so a renewed certificate is served without a restart. A reload that fails (a file
/// half-written, a key that does not match) keeps the certificate in use.
#[derive(Debug)]
pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<Loaded>,
}

#[derive(Debug, Clone)]
struct Loaded {
    key: Arc<CertifiedKey>,
    stamps: (Stamp, Stamp),
    /// The leaf certificate's notAfter, as a Unix timestamp.
    not_after: i64,
}

impl ReloadingCert {
    /// Reads the files; errors name the configuration key and file at fault.
    pub fn load(cert_path: &Path, key_path: &Path) -> anyhow::Result<ReloadingCert> {
        let loaded = read_pair(cert_path, key_path, Files::read(cert_path, key_path))?;
        Ok(ReloadingCert {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            current: RwLock::new(loaded),
        })
    }

    /// Reads the files again if either changed since they were last read (or always, with
    /// `force`). Returns whether a new certificate is now in use.
    pub fn reload(&self, force: bool) -> anyhow::Result<bool> {
        let files = Files::read(&self.cert_path, &self.key_path);
        let stamps = files.stamps();
        if !force && stamps == self.loaded().stamps {
            return Ok(false);
        }
        let result = read_pair(&self.cert_path, &self.key_path, files);
        let mut current = self.current.write().expect("certificate lock");
        match result {
            Ok(loaded) => {
                let changed = loaded.key.cert != current.key.cert;
                *current = loaded;
                Ok(changed)
            }
            Err(e) => {
                // Not again until the files change once more.
                current.stamps = stamps;
                Err(e)
            }
        }
    }

    /// When the certificate in use expires, as a Unix timestamp.
    pub fn not_after(&self) -> i64 {
        self.loaded().not_after
    }

    fn loaded(&self) -> Loaded {
        self.current.read().expect("certificate lock").clone()
    }
}

impl ReloadingCert {
    /// The certificate and key in use.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.read().expect("certificate lock").key.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// Parses `files` (read from `cert` and `key_path`, named in errors).
fn read_pair(cert: &Path, key_path: &Path, files: Files) -> anyhow::Result<Loaded> {
    let stamps = files.stamps();
    let cert_pem = files
        .cert
        .with_context(|| format!("server.tls_cert {}", cert.display()))?;
    let key_pem = files
        .key
        .with_context(|| format!("server.tls_key {}", key_path.display()))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .with_context(|| {
            format!(
                "server.tls_cert {}: not a PEM certificate chain",
                cert.display()
            )
        })?;
    let Some(leaf) = certs.first() else {
        anyhow::bail!(
            "server.tls_cert {}: contains no certificate",
            cert.display()
        );
    };
    let not_after = x509_parser::parse_x509_certificate(leaf)
        .map(|(_, c)| c.validity().not_after.timestamp())
        .map_err(|e| {
            anyhow::anyhow!(
                "server.tls_cert {}: cannot read the first certificate: {e}",
                cert.display()
            )
        })?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .with_context(|| format!("server.tls_key {}: no PEM private key", key_path.display()))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| {
        anyhow::anyhow!(
            "server.tls_key {}: unusable private key: {e}",
            key_path.display()
        )
    })?;
    let key = CertifiedKey::new(certs, signing);
    key.keys_match().map_err(|e| {
        anyhow::anyhow!(
            "server.tls_cert {} and server.tls_key {} do not form a usable certificate and key \
             pair: {e}",
            cert.display(),
            key_path.display()
        )
    })?;
    Ok(Loaded {
        key: Arc::new(key),
        stamps,
        not_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate for `localhost` valid until the start of `year`, and its key.
    fn pair(year: i32) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.not_after = rcgen::date_time_ymd(year, 1, 1);
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn der(pem: &str) -> Vec<u8> {
        CertificateDer::from_pem_slice(pem.as_bytes())
            .unwrap()
            .to_vec()
    }

    #[test]
    fn changed_files_are_loaded_and_bad_ones_keep_the_current_pair() {
        install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        let (cert_a, key_a) = pair(2031);
        std::fs::write(&cert_path, &cert_a).unwrap();
        std::fs::write(&key_path, &key_a).unwrap();
        let cert = ReloadingCert::load(&cert_path, &key_path).unwrap();
        assert_eq!(cert.current().cert[0].as_ref(), der(&cert_a));
        assert_eq!(cert.not_after(), 1_924_992_000, "2031-01-01T00:00:00Z");
        assert!(!cert.reload(false).unwrap(), "nothing changed");

        // Renewed in place with the old modification times kept (`cp -p`): still noticed.
        let (cert_b, key_b) = pair(2032);
        for (path, text) in [(&cert_path, &cert_b), (&key_path, &key_b)] {
            let kept = std::fs::metadata(path).unwrap().modified().unwrap();
            std::fs::write(path, text).unwrap();
            let file = std::fs::File::options().write(true).open(path).unwrap();
            file.set_modified(kept).unwrap();
        }
        assert!(cert.reload(false).unwrap());
        assert_eq!(cert.current().cert[0].as_ref(), der(&cert_b));
        assert_eq!(cert.not_after(), 1_956_528_000, "2032-01-01T00:00:00Z");

        // A certificate renewed before its key is written: refused, the pair in use stays.
        std::fs::write(&cert_path, &cert_a).unwrap();
        let e = cert.reload(false).unwrap_err().to_string();
        assert!(
            e.contains("do not form a usable") && e.contains("key.pem"),
            "{e}"
        );
        assert_eq!(cert.current().cert[0].as_ref(), der(&cert_b));
        assert!(
            !cert.reload(false).unwrap(),
            "not retried until the files change"
        );
        std::fs::write(&key_path, &key_a).unwrap();
        assert!(cert.reload(false).unwrap());
        assert_eq!(cert.current().cert[0].as_ref(), der(&cert_a));

        std::fs::write(&cert_path, "-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
        let e = cert.reload(true).unwrap_err().to_string();
        assert!(
            e.contains("server.tls_cert") && e.contains("cert.pem"),
            "{e}"
        );
        assert_eq!(cert.current().cert[0].as_ref(), der(&cert_a));
        assert!(ReloadingCert::load(&cert_path, &key_path).is_err());
    }
}
