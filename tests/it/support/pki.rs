//! A throw-away certificate authority for TLS tests.
//!
//! Every test that talks TLS builds its own [`TestCa`] at runtime with rcgen, so no key
//! material is checked in and every certificate check in the tests is a real one: clients
//! trust exactly this CA (through `ca.pem`, `SSL_CERT_FILE` or a reqwest root store) and
//! servers present a leaf issued by it. Nothing here accepts "any certificate".

use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A self-signed certificate authority (basic constraints CA, key usage cert-sign) whose
/// key lives only in memory for the lifetime of the test.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
    ca_pem: String,
}

/// A leaf certificate issued by a [`TestCa`], in PEM form.
#[derive(Clone, Debug)]
pub struct Issued {
    /// The leaf certificate followed by the CA certificate (the chain a server presents).
    pub cert_pem: String,
    /// The leaf's private key (PKCS#8 PEM).
    pub key_pem: String,
}

impl TestCa {
    /// Generates a new CA with a fresh ECDSA P-256 key.
    pub fn new() -> TestCa {
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, "provender test CA");
        name.push(DnType::OrganizationName, "provender tests");
        params.distinguished_name = name;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("generate test CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("self-sign test CA");
        let ca_pem = issuer.pem();
        TestCa { issuer, ca_pem }
    }

    /// The CA certificate in PEM form.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Issues a server certificate valid for `names`: each name that parses as an
    /// [`IpAddr`] becomes an IP subject alternative name, every other one a DNS name.
    ///
    /// Panics on a name rcgen cannot encode (these are tests).
    pub fn issue(&self, names: &[&str]) -> Issued {
        self.issue_with(names, CertificateParams::default())
    }

    /// Like [`issue`](Self::issue), valid until the start of `year`.
    pub fn issue_until(&self, names: &[&str], year: i32) -> Issued {
        let mut params = CertificateParams::default();
        params.not_after = rcgen::date_time_ymd(year, 1, 1);
        self.issue_with(names, params)
    }

    fn issue_with(&self, names: &[&str], mut params: CertificateParams) -> Issued {
        assert!(!names.is_empty(), "a certificate needs at least one name");
        params.subject_alt_names = names
            .iter()
            .map(|name| match name.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(
                    (*name)
                        .try_into()
                        .unwrap_or_else(|err| panic!("bad DNS name {name:?}: {err}")),
                ),
            })
            .collect();
        let mut subject = DistinguishedName::new();
        subject.push(DnType::CommonName, names[0]);
        params.distinguished_name = subject;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;

        let key = KeyPair::generate().expect("generate leaf key");
        let leaf = params
            .signed_by(&key, &self.issuer)
            .expect("sign leaf certificate");
        Issued {
            cert_pem: format!("{}{}", leaf.pem(), self.ca_pem),
            key_pem: key.serialize_pem(),
        }
    }

    /// Writes the CA certificate to `dir/ca.pem` and returns that path (for
    /// `SSL_CERT_FILE` or provender's upstream `ca_file`).
    pub fn write_ca(&self, dir: &Path) -> PathBuf {
        let path = dir.join("ca.pem");
        fs::write(&path, &self.ca_pem)
            .unwrap_or_else(|err| panic!("write {}: {err}", path.display()));
        path
    }
}

impl Default for TestCa {
    fn default() -> Self {
        TestCa::new()
    }
}

impl Issued {
    /// A rustls server configuration presenting this certificate chain, offering ALPN
    /// `h2` and `http/1.1`, built on the ring provider.
    pub fn server_config(&self) -> Arc<rustls::ServerConfig> {
        let chain = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("parse certificate chain PEM");
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).expect("parse key PEM");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("certificate and key match");
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(config)
    }
}
