//! The listener's certificate is renewed without a restart: new connections get the new
//! certificate once its files change (polled) or on SIGHUP (the real binary), and the expiry of
//! the certificate in use is exported as a metric.

use std::time::Duration;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use crate::support::origin::{FakeOrigin, ProviderSpec};
use crate::support::pki::{Issued, TestCa};
use crate::support::provender::{MirrorOptions, REGISTRY, ServerProcess, TestMirror, config_toml};
use crate::support::{install_crypto_provider, poll, sample};

/// The certificate a fresh connection to `url` is shown (DER).
async fn served_certificate(ca: &TestCa, url: &str) -> Vec<u8> {
    install_crypto_provider();
    let root = reqwest::Certificate::from_pem(ca.ca_pem().as_bytes()).unwrap();
    // A new client per call: a pooled connection would keep the certificate it started with.
    let client = reqwest::Client::builder()
        .tls_certs_only([root])
        .no_proxy()
        .tls_info(true)
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let resp = client.get(url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .expect("the peer certificate")
        .to_vec()
}

fn der(issued: &Issued) -> Vec<u8> {
    CertificateDer::from_pem_slice(issued.cert_pem.as_bytes())
        .unwrap()
        .to_vec()
}

/// Replaces the certificate files a test mirror was configured with (see `config_toml`).
fn renew(dir: &std::path::Path, ca: &TestCa) -> Issued {
    let issued = ca.issue(&["localhost", "127.0.0.1"]);
    std::fs::write(dir.join("mirror-key.pem"), &issued.key_pem).unwrap();
    std::fs::write(dir.join("mirror.pem"), &issued.cert_pem).unwrap();
    issued
}

async fn origin(ca: &TestCa) -> FakeOrigin {
    FakeOrigin::start(
        ca,
        &[REGISTRY],
        vec![ProviderSpec::new(
            "acme",
            "foo",
            &["1.0.0"],
            &[("linux", "amd64")],
        )],
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn renewed_certificate_files_are_served_without_a_restart() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_server: "tls_reload_interval = \"100ms\"",
            ..MirrorOptions::default()
        },
    )
    .await;
    let health = mirror.root_url("/healthz");
    let first = served_certificate(&ca, &health).await;

    let renewed = renew(mirror.dir.path(), &ca);
    assert_ne!(der(&renewed), first);
    let switched = poll(Duration::from_secs(10), async || {
        (served_certificate(&ca, &health).await == der(&renewed)).then_some(())
    })
    .await;
    assert!(
        switched.is_some(),
        "the renewed certificate is never served"
    );

    // A broken renewal keeps the certificate in use, and is counted.
    const FAILED: &str = r#"provender_tls_reloads_total{result="error"}"#;
    let client = crate::support::https_client(&ca, &[]);
    let failed_before = sample(&mirror.metrics(&client).await, FAILED);
    std::fs::write(mirror.dir.path().join("mirror.pem"), "not a certificate").unwrap();
    let counted = poll(Duration::from_secs(10), async || {
        let m = mirror.metrics(&client).await;
        (sample(&m, FAILED) > failed_before).then_some(m)
    })
    .await;
    let metrics = counted.expect("the failed reload is counted");
    assert!(
        sample(&metrics, r#"provender_tls_reloads_total{result="ok"}"#) >= 1,
        "{metrics}"
    );
    let expiry = sample(
        &metrics,
        "provender_tls_certificate_expiry_timestamp_seconds",
    );
    assert!(expiry > 1_700_000_000, "{metrics}");
    assert_eq!(served_certificate(&ca, &health).await, der(&renewed));
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_reloads_the_certificate() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let dir = tempfile::tempdir().unwrap();
    let opts = MirrorOptions {
        extra_server: "tls_reload_interval = \"0s\"",
        ..MirrorOptions::default()
    };
    let toml = config_toml(
        &ca,
        dir.path(),
        &dir.path().join("cache"),
        "127.0.0.1:0",
        origin.addr(),
        &opts,
    );
    let config = dir.path().join("provender.toml");
    std::fs::write(&config, toml).unwrap();
    let server = ServerProcess::spawn(&config);
    let mut health = server.url.clone();
    health.set_path("/healthz");
    let health = health.to_string();
    let first = served_certificate(&ca, &health).await;

    let renewed = renew(dir.path(), &ca);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        served_certificate(&ca, &health).await,
        first,
        "no polling with tls_reload_interval = 0s"
    );
    server.signal("HUP");
    let switched = poll(Duration::from_secs(10), async || {
        (served_certificate(&ca, &health).await == der(&renewed)).then_some(())
    })
    .await;
    assert!(
        switched.is_some(),
        "SIGHUP did not reload:\n{}",
        server.log()
    );
    // The log is read from the process's stderr by another thread.
    let logged = poll(Duration::from_secs(10), async || {
        server
            .log()
            .contains("TLS certificate reloaded")
            .then_some(())
    })
    .await;
    assert!(logged.is_some(), "{}", server.log());
}
