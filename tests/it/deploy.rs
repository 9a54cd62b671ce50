//! The deployment artefacts in `deploy/`, checked with the real tools:
//! - the alert rules pass `promtool check rules` and their unit tests (`promtool test rules`);
//! - a real scrape of a running provender passes `promtool check metrics`, and every metric the
//!   Grafana dashboard and the alert rules query is one it exports (a renamed metric fails),
//!   and the guide's metrics table (docs/src/operations/metrics.md) names every metric it exports;
//! - the Helm chart lints and renders (default values and the object-store example), its YAML
//!   parses, and the configuration it renders is one provender accepts;
//! - the YAML under `deploy/` passes yamllint;
//! - end to end: a real Prometheus scrapes provender while `terraform init` runs through it, and
//!   PromQL queries return the hit, miss and request counts that happened.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::http::get;
use crate::support::origin::{FakeOrigin, ProviderSpec};
use crate::support::pki::TestCa;
use crate::support::provender::{REGISTRY, TestMirror};
use crate::support::tf_config::{self, FOO_BAR_DIRS, local_platform_and};
use crate::support::{https_client, init_fresh, poll};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Runs a tool to completion; panics, with its output, unless it succeeds.
fn run(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {tool} ({e}): .ci/test installs it"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{tool} {args:?} failed:\n{text}");
    text
}

/// `$HELM`, else the copy `.ci/test` installs under `target/ci-tools`, else `helm` on the PATH.
fn helm() -> String {
    if let Ok(helm) = std::env::var("HELM") {
        return helm;
    }
    let installed = repo("target/ci-tools/helm/helm");
    if installed.is_file() {
        return installed.display().to_string();
    }
    "helm".into()
}

async fn origin(ca: &TestCa) -> FakeOrigin {
    let p = local_platform_and(&[("linux", "amd64")]);
    FakeOrigin::start(
        ca,
        &[REGISTRY],
        vec![
            ProviderSpec::new("acme", "foo", &["1.0.0", "1.1.0"], &p),
            ProviderSpec::new("acme", "bar", &["2.3.0"], &p),
            ProviderSpec::new("acme", "dirs", &["0.1.0"], &p),
        ],
    )
    .await
}

#[test]
fn alert_rules_pass_promtool_and_their_unit_tests() {
    let checked = run(
        "promtool",
        &["check", "rules", "deploy/prometheus/alerts.yml"],
    );
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = run(
        "promtool",
        &["test", "rules", "deploy/prometheus/alerts_test.yml"],
    );
    assert!(tested.contains("SUCCESS"), "{tested}");
}

#[test]
fn the_yaml_under_deploy_lints() {
    run("yamllint", &["-c", "deploy/.yamllint.yml", "deploy/"]);
}

/// Every `provender_*` metric name a text mentions, histogram series reduced to their family.
fn names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("provender_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .map_or(name.clone(), str::to_string);
        out.insert(family);
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn every_metric_the_dashboard_and_alerts_query_is_exported() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    // Exercise the server so that series with labels exist.
    let (os, arch) = local_platform_and(&[])[0];
    for path in [
        format!("{REGISTRY}/acme/foo/index.json"),
        format!("{REGISTRY}/acme/foo/1.1.0.json"),
        format!("{REGISTRY}/acme/foo/terraform-provider-foo_1.1.0_{os}_{arch}.zip"),
        format!("{REGISTRY}/acme/nope/index.json"),
    ] {
        get(&client, &mirror.url(&path)).await;
    }
    let scrape = mirror.metrics(&client).await;

    // The exposition itself passes promtool's lint.
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run promtool (.ci/test installs it)");
    std::io::Write::write_all(promtool.stdin.as_mut().unwrap(), scrape.as_bytes()).unwrap();
    let linted = promtool.wait_with_output().unwrap();
    assert!(
        linted.status.success(),
        "promtool check metrics:\n{}{}",
        String::from_utf8_lossy(&linted.stdout),
        String::from_utf8_lossy(&linted.stderr)
    );

    let exported: BTreeSet<String> = scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    assert!(exported.len() > 15, "{exported:?}");
    for file in [
        "deploy/grafana/provender-dashboard.json",
        "deploy/prometheus/alerts.yml",
    ] {
        let text = std::fs::read_to_string(repo(file)).unwrap();
        if file.ends_with(".json") {
            serde_json::from_str::<serde_json::Value>(&text)
                .unwrap_or_else(|e| panic!("{file} is not JSON: {e}"));
        }
        let queried = names_in(&text);
        assert!(!queried.is_empty(), "{file} queries no metric");
        let unknown: Vec<&String> = queried.difference(&exported).collect();
        assert!(
            unknown.is_empty(),
            "{file} queries metrics provender does not export: {unknown:?}"
        );
    }

    // The guide's metrics table names every metric, so operators can look each one up.
    let chapter = "docs/src/operations/metrics.md";
    let table = std::fs::read_to_string(repo(chapter)).unwrap();
    let undocumented: Vec<&String> = exported
        .iter()
        .filter(|name| !table.contains(&format!("| `{name}` |")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "{chapter}'s metrics table lacks {undocumented:?}"
    );
}

/// `config.toml` of the ConfigMap in rendered chart output.
fn rendered_config(rendered: &str) -> String {
    let mut lines = rendered
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("config.toml: |"));
    let header = lines.next().expect("the chart renders a config.toml");
    let indent = header.len() - header.trim_start().len() + 2;
    lines
        .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() >= indent)
        .map(|l| l.get(indent..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_helm_chart_lints_and_renders_a_configuration_provender_accepts() {
    let chart = "deploy/helm/provender";
    let example = "deploy/helm/provender/examples/object-store-multi-replica.yaml";
    run(&helm(), &["lint", "--strict", chart]);
    run(&helm(), &["lint", "--strict", chart, "-f", example]);
    let dir = tempfile::tempdir().unwrap();
    let issued = TestCa::new().issue(&["localhost"]);
    std::fs::write(dir.path().join("tls.crt"), &issued.cert_pem).unwrap();
    std::fs::write(dir.path().join("tls.key"), &issued.key_pem).unwrap();
    let tls_dir = dir.path().display().to_string();
    for (name, values) in [("default", None), ("object-store", Some(example))] {
        let mut args = vec!["template", "mirror", chart];
        if let Some(v) = values {
            args.extend(["-f", v]);
        }
        let rendered = run(&helm(), &args);
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, &rendered).unwrap();
        run(
            "yamllint",
            &[
                "-d",
                "{extends: relaxed, rules: {line-length: disable}}",
                file.to_str().unwrap(),
            ],
        );
        // The chart mounts a TLS secret at these paths; stand real files in for it.
        let config = rendered_config(&rendered).replace("/etc/provender/tls", &tls_dir);
        provender::config::Config::from_toml(&config)
            .and_then(|c| c.validate())
            .unwrap_or_else(|e| panic!("the {name} chart's config.toml: {e}\n{config}"));
        for kind in [
            "kind: Service",
            "kind: ConfigMap",
            "readinessProbe",
            "livenessProbe",
        ] {
            assert!(rendered.contains(kind), "{name}: no {kind}");
        }
    }
}

/// A real Prometheus on loopback scraping `target` (https, trusting `ca`) every second.
struct Prometheus {
    child: std::process::Child,
    _dir: tempfile::TempDir,
    url: String,
}

impl Prometheus {
    fn start(target: &str, ca: &Path) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: provender\n    \
                 scheme: https\n    tls_config:\n      ca_file: {}\n      server_name: localhost\n    \
                 static_configs:\n      - targets: ['{target}']\n",
                ca.display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("run prometheus (.ci/test installs it)");
        Prometheus {
            child,
            _dir: dir,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    /// The value of an instant PromQL query that yields one sample, once it yields one.
    async fn value(&self, query: &str) -> Option<f64> {
        let client = reqwest::Client::new();
        let url =
            url::Url::parse_with_params(&format!("{}/api/v1/query", self.url), [("query", query)])
                .ok()?;
        let resp = client.get(url).send().await.ok()?;
        let body: serde_json::Value = serde_json::from_slice(&resp.bytes().await.ok()?).ok()?;
        body["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn prometheus_sees_what_terraform_init_did() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let ca_dir = tempfile::tempdir().unwrap();
    let ca_file = ca.write_ca(ca_dir.path());
    let target = format!("localhost:{}", mirror.url.port().unwrap());
    let prometheus = Prometheus::start(&target, &ca_file);
    poll(Duration::from_secs(30), async || {
        prometheus.value("up{job=\"provender\"} == 1").await
    })
    .await
    .expect("Prometheus scrapes provender");

    // Two inits in fresh directories: three archives missed, then hit.
    let cli = tf_config::network_mirror(mirror.url.as_str());
    init_fresh(&ca, &cli, FOO_BAR_DIRS).await;
    init_fresh(&ca, &cli, FOO_BAR_DIRS).await;
    let scraped = mirror.metrics(&https_client(&ca, &[])).await;
    // Terraform's downloader sends a HEAD before each GET; only the GETs are responses.
    let archive_requests = crate::support::sample(
        &scraped,
        r#"provender_http_requests_total{route="archive",status="200"}"#,
    );
    let sent = crate::support::sample(
        &scraped,
        r#"provender_archive_responses_total{trust="community"}"#,
    );
    assert_eq!(sent, 6, "{scraped}");
    assert!(archive_requests >= 6, "{scraped}");
    for (query, expected) in [
        (
            r#"provender_cache_lookups_total{kind="archive",result="miss"}"#,
            3.0,
        ),
        (
            r#"provender_cache_lookups_total{kind="archive",result="hit"}"#,
            3.0,
        ),
        (r#"sum(provender_archive_responses_total)"#, 6.0),
        (
            r#"sum(provender_http_requests_total{route="archive",status="200"})"#,
            archive_requests as f64,
        ),
        (
            r#"sum(provender_http_requests_total{route="version"})"#,
            6.0,
        ),
    ] {
        let seen = poll(Duration::from_secs(30), async || {
            prometheus
                .value(query)
                .await
                .filter(|v| (v - expected).abs() < f64::EPSILON)
        })
        .await;
        assert_eq!(seen, Some(expected), "{query}");
    }
}
