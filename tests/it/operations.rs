//! What operators rely on while the server runs:
//! - the listener's certificate is renewed without a restart: new connections get the new
//!   certificate once its files change (polled) or on SIGHUP (the real binary), and the expiry
//!   of the certificate in use is exported as a metric;
//! - JSON logs (`--log-format json`) with an access log line per request
//!   (`server.access_log`), from the real binary;
//! - the systemd unit in `deploy/` passes `systemd-analyze verify`;
//! - `/readyz` answers 503 with its reason when the cache cannot be read or written and while
//!   the server drains after SIGTERM (`server.drain_delay`), while `/healthz` stays 200;
//! - a port in use ends the process with 69, not the configuration error's 78.

use std::time::Duration;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use crate::support::origin::FakeOrigin;
use crate::support::pki::{Issued, TestCa};
use crate::support::provender::{MirrorOptions, REGISTRY, ServerProcess, TestMirror, write_config};
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
/// The renewed certificate is valid until 2040-01-01.
fn renew(dir: &std::path::Path, ca: &TestCa) -> Issued {
    let issued = ca.issue_until(&["localhost", "127.0.0.1"], 2040);
    std::fs::write(dir.join("mirror-key.pem"), &issued.key_pem).unwrap();
    std::fs::write(dir.join("mirror.pem"), &issued.cert_pem).unwrap();
    issued
}

#[tokio::test(flavor = "multi_thread")]
async fn renewed_certificate_files_are_served_without_a_restart() {
    let ca = TestCa::new();
    let origin = FakeOrigin::acme_foo(&ca).await;
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_server: "tls_reload_interval = \"1s\"",
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
    assert_eq!(
        expiry, 2_208_988_800,
        "2040-01-01, the renewed certificate's: {metrics}"
    );
    assert_eq!(served_certificate(&ca, &health).await, der(&renewed));
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_reloads_the_certificate() {
    let ca = TestCa::new();
    let origin = FakeOrigin::acme_foo(&ca).await;
    let dir = tempfile::tempdir().unwrap();
    let opts = MirrorOptions {
        extra_server: "tls_reload_interval = \"0s\"",
        ..MirrorOptions::default()
    };
    let config = write_config(&ca, dir.path(), origin.addr(), &opts);
    let server = ServerProcess::spawn(&config);
    let mut health = server.url.clone();
    health.set_path("/healthz");
    let health = health.to_string();
    let first = served_certificate(&ca, &health).await;

    let renewed = renew(dir.path(), &ca);
    // Longer than the shortest polling interval allowed (1s).
    tokio::time::sleep(Duration::from_millis(1500)).await;
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

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_carry_an_access_line_per_request() {
    let ca = TestCa::new();
    let origin = FakeOrigin::acme_foo(&ca).await;
    let dir = tempfile::tempdir().unwrap();
    // A named client and an unnamed token: the access lines name who asked.
    let opts = MirrorOptions {
        extra_server: "access_log = true",
        extra_toml: "[auth]\ntokens = [\"unnamed-token-0123456789\"]\n\n\
                     [[auth.clients]]\nname = \"ci-runners\"\ntoken = \"named-token-0123456789\"\n",
        ..MirrorOptions::default()
    };
    let config = write_config(&ca, dir.path(), origin.addr(), &opts);
    let server = ServerProcess::spawn_with_env(&config, &[("PROVENDER_LOG_FORMAT", "json")]);
    let client = crate::support::https_client(&ca, &[]);
    let index = server.url(&format!("{REGISTRY}/acme/foo/index.json"));
    let got = client
        .get(format!("{index}?ignored=secret"))
        .header("user-agent", "Terraform/1.11.4")
        .bearer_auth("named-token-0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 200);
    let missing = server.url(&format!("{REGISTRY}/acme/nothing/index.json"));
    let got = client
        .get(&missing)
        .bearer_auth("unnamed-token-0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 404);

    // Every line is a JSON object; the access lines name the request and its answer.
    let lines = poll(Duration::from_secs(10), async || {
        let log = server.log();
        let lines: Vec<serde_json::Value> = log
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        let access: Vec<serde_json::Value> = lines
            .into_iter()
            .filter(|l| l["target"] == "provender::access")
            .collect();
        (access.len() >= 2).then_some(access)
    })
    .await
    .unwrap_or_else(|| panic!("no access lines:\n{}", server.log()));
    let fields = &lines[0]["fields"];
    assert_eq!(fields["method"], "GET");
    assert_eq!(
        fields["path"],
        format!("{}{REGISTRY}/acme/foo/index.json", server.url.path())
    );
    assert_eq!(fields["status"], 200);
    assert_eq!(fields["route"], "index");
    assert_eq!(fields["peer"], "127.0.0.1");
    assert_eq!(fields["user_agent"], "Terraform/1.11.4");
    assert!(fields["head_ms"].as_f64().is_some(), "{fields}");
    assert_eq!(fields["client"], "ci-runners");
    assert!(!server.log().contains("secret"), "query strings stay out");
    assert!(
        !server.log().contains("token-0123456789"),
        "tokens stay out"
    );
    assert_eq!(lines[1]["fields"]["status"], 404);
    let unnamed = lines[1]["fields"]["client"].as_str().unwrap();
    assert!(
        unnamed.starts_with("token:") && unnamed.len() == 22,
        "{unnamed}"
    );
}

/// `deploy/provender.service` passes `systemd-analyze verify` with its `ExecStart` pointing at
/// the built binary, and starts it the way the other tests do (`serve --config FILE`).
#[test]
fn the_systemd_unit_verifies() {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/provender.service"
    ))
    .unwrap();
    let exec = "ExecStart=/usr/local/bin/provender serve --config /etc/provender/config.toml";
    assert!(unit.contains(exec), "{unit}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("provender.service");
    let binary = env!("CARGO_BIN_EXE_provender");
    std::fs::write(&path, unit.replace("/usr/local/bin/provender", binary)).unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (from systemd) is needed to check the unit");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stderr.contains("provender.service"),
        "warnings about the unit: {stderr}"
    );
}

/// `/readyz` as a client sees it: the status and the JSON body.
async fn readyz(client: &reqwest::Client, url: &str) -> (u16, serde_json::Value) {
    let got = crate::support::http::get(client, url).await;
    (got.status.as_u16(), got.json())
}

#[tokio::test(flavor = "multi_thread")]
async fn readyz_says_when_the_cache_cannot_be_read_or_written() {
    let ca = TestCa::new();
    let origin = FakeOrigin::acme_foo(&ca).await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = crate::support::https_client(&ca, &[]);
    let url = mirror.root_url("/readyz");
    assert_eq!(readyz(&client, &url).await.0, 200);

    // Downloads cannot be staged: tmp/ is not a directory any more.
    let tmp = mirror.cache_dir.join("tmp");
    std::fs::rename(&tmp, mirror.cache_dir.join("tmp.away")).unwrap();
    std::fs::write(&tmp, b"not a directory").unwrap();
    let (status, body) = readyz(&client, &url).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"], "unavailable");
    assert!(body["reason"].as_str().unwrap().contains("tmp"), "{body}");
    let healthz = crate::support::http::get(&client, &mirror.root_url("/healthz")).await;
    assert_eq!(healthz.status, 200, "liveness is not readiness");
    std::fs::remove_file(&tmp).unwrap();
    std::fs::rename(mirror.cache_dir.join("tmp.away"), &tmp).unwrap();
    assert_eq!(readyz(&client, &url).await.0, 200);

    // The store cannot be read or written: the cache directory is not a directory any more.
    let away = mirror.cache_dir.with_extension("away");
    std::fs::rename(&mirror.cache_dir, &away).unwrap();
    std::fs::write(&mirror.cache_dir, b"not a directory").unwrap();
    let (status, body) = readyz(&client, &url).await;
    assert_eq!(status, 503, "{body}");
    assert!(body["reason"].as_str().unwrap().contains("store"), "{body}");
    std::fs::remove_file(&mirror.cache_dir).unwrap();
    std::fs::rename(&away, &mirror.cache_dir).unwrap();
    assert_eq!(readyz(&client, &url).await.0, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn readyz_says_draining_after_sigterm_while_connections_are_still_taken() {
    let ca = TestCa::new();
    let origin = FakeOrigin::acme_foo(&ca).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        &ca,
        dir.path(),
        origin.addr(),
        &MirrorOptions {
            extra_server: "drain_delay = \"3s\"",
            ..Default::default()
        },
    );
    let mut server = ServerProcess::spawn(&config);
    let client = crate::support::https_client(&ca, &[]);
    let mut root = server.url.clone();
    root.set_path("/readyz");
    assert_eq!(readyz(&client, root.as_str()).await.0, 200);
    server.signal("TERM");
    let draining = poll(Duration::from_secs(5), async || {
        // A fresh client: new connections are still accepted during the delay.
        let fresh = crate::support::https_client(&ca, &[]);
        let (status, body) = readyz(&fresh, root.as_str()).await;
        (status == 503).then_some(body)
    })
    .await
    .expect("/readyz turns 503 after SIGTERM");
    assert_eq!(draining["status"], "draining", "{draining}");
    let mut health = server.url.clone();
    health.set_path("/healthz");
    let fresh = crate::support::https_client(&ca, &[]);
    assert_eq!(
        crate::support::http::get(&fresh, health.as_str())
            .await
            .status,
        200
    );
    let status = tokio::task::spawn_blocking(move || server.wait())
        .await
        .unwrap();
    assert!(status.success(), "clean exit after the delay: {status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_port_in_use_is_not_a_configuration_error() {
    let ca = TestCa::new();
    let origin = FakeOrigin::acme_foo(&ca).await;
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let config = write_config(&ca, dir.path(), origin.addr(), &MirrorOptions::default());
    let text = std::fs::read_to_string(&config).unwrap();
    let port = taken.local_addr().unwrap().port();
    std::fs::write(
        &config,
        text.replace(
            "listen = \"127.0.0.1:0\"",
            &format!("listen = \"127.0.0.1:{port}\""),
        ),
    )
    .unwrap();
    let run = |config: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_provender"))
            .args(["serve", "--config"])
            .arg(config)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&config);
    assert_eq!(out.status.code(), Some(69), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("server.listen: cannot bind"), "{stderr}");
    // A configuration error keeps 78, which the systemd unit does not restart on.
    std::fs::write(&config, "[server]\nlisten = \"nowhere\"\n").unwrap();
    assert_eq!(run(&config).status.code(), Some(78));
    drop(taken);
}
