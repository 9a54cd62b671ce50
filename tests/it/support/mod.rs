//! Shared support for the integration tests.
//!
//! - [`pki`]: a throw-away certificate authority and server certificates;
//! - [`origin`]: a fake origin registry (providers, modules, and a git server) over real TLS;
//! - [`provender`]: provender itself, in this process or as the real binary;
//! - [`http`]: requests to it, read whole;
//! - [`tf_config`]: CLI configurations and root modules for the `terraform` CLI;
//! - [`throttle`]: a TCP proxy that slows or cuts the origin's traffic;
//! - [`egress_proxy`]: an HTTP `CONNECT` proxy, as on networks without direct internet access;
//! - [`static_server`]: nginx serving a directory over TLS;
//! - here: the crypto provider, a timeout around every await ([`within`]), polling until
//!   something holds ([`poll`], [`eventually`]), a reqwest client trusting only a test CA, and a
//!   hermetic runner for the real `terraform` CLI.

// Each test module uses a different subset of these helpers.
#![allow(dead_code)]

pub mod browser;
pub mod cli;
pub mod egress_proxy;
pub mod garage;
pub mod http;
pub mod issuer;
pub mod origin;
pub mod pki;
pub mod provender;
pub mod static_server;
pub mod tf_config;
pub mod throttle;

use std::fs::File;
use std::future::IntoFuture;
use std::io::{Read, Seek};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use self::pki::TestCa;

/// The limit [`within`] puts on every await.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The `terraform` binary the end-to-end tests run.
pub const TERRAFORM: &str = "/usr/local/bin/terraform";

/// The limit on one `terraform` command.
pub const TERRAFORM_TIMEOUT: Duration = Duration::from_secs(120);

/// Installs ring as the process-wide rustls crypto provider (idempotent). reqwest is built
/// with `rustls-no-provider`, so clients need this before they are built.
pub fn install_crypto_provider() {
    // Err only means a provider is already installed, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Awaits `fut`, panicking with `what` if it takes longer than [`TIMEOUT`].
pub async fn within<F: IntoFuture>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(TIMEOUT, fut).await {
        Ok(output) => output,
        Err(_) => panic!("timed out after {TIMEOUT:?}: {what}"),
    }
}

/// How often [`poll`] checks.
const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Runs `check` until it gives `Some`, pausing 25 ms after each try, `limit / 25 ms` tries at
/// the most (so for at least `limit`); `None` if it never did.
pub async fn poll<T>(limit: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    let tries = limit.as_millis() / POLL_INTERVAL.as_millis();
    for _ in 0..tries {
        if let Some(found) = check().await {
            return Some(found);
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    None
}

/// Waits until `cond` holds (see [`poll`]), panicking with `what` if it still does not after
/// `limit`.
pub async fn eventually(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    if poll(limit, async || cond().then_some(())).await.is_none() {
        panic!("still not true after {limit:?}: {what}");
    }
}

/// Accepts connections on `listener` until the returned task is aborted, serving each with
/// `serve` in its own task; aborting the returned task also ends every open connection.
pub fn serve_connections<F, Fut>(
    listener: tokio::net::TcpListener,
    serve: F,
) -> tokio::task::JoinHandle<()>
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => {
                        conns.spawn(serve(tcp));
                    }
                    // E.g. too many open files: back off instead of spinning.
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                },
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
    })
}

/// The value of one series (`name{labels}`) in a Prometheus text page; 0 when absent.
pub fn sample(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0)
}

/// The `h1:` hash a network-mirror `<version>.json` lists for `platform` (`os_arch`), if any.
pub fn h1_of(doc: &serde_json::Value, platform: &str) -> Option<String> {
    doc["archives"][platform]["hashes"]
        .as_array()?
        .iter()
        .filter_map(serde_json::Value::as_str)
        .find(|h| h.starts_with("h1:"))
        .map(str::to_string)
}

/// A reqwest client that trusts only `ca`, ignores proxy settings and resolves each
/// `(host, addr)` pair to `addr` (a URL without a port then connects to `addr`'s port).
pub fn https_client(ca: &TestCa, resolve: &[(&str, SocketAddr)]) -> reqwest::Client {
    https_builder(ca, resolve)
        .build()
        .expect("build reqwest client")
}

/// Like [`https_client`], speaking HTTP/2 only (with prior knowledge, as over ALPN).
pub fn https_client_h2(ca: &TestCa) -> reqwest::Client {
    https_builder(ca, &[])
        .http2_prior_knowledge()
        .build()
        .expect("build reqwest client")
}

/// Like [`https_client`], without following redirects (to see them).
pub fn https_client_no_redirects(ca: &TestCa) -> reqwest::Client {
    https_builder(ca, &[])
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("build reqwest client")
}

fn https_builder(ca: &TestCa, resolve: &[(&str, SocketAddr)]) -> reqwest::ClientBuilder {
    install_crypto_provider();
    let root = reqwest::Certificate::from_pem(ca.ca_pem().as_bytes()).expect("parse CA PEM");
    let mut builder = reqwest::Client::builder()
        .tls_certs_only([root])
        .no_proxy()
        .timeout(TIMEOUT);
    for (host, addr) in resolve {
        builder = builder.resolve(host, *addr);
    }
    builder
}

/// A hermetic environment for the real `terraform` CLI: its own HOME, a CLI config file,
/// and a certificate store holding only the test CA. Nothing is inherited from the
/// caller's environment except `PATH`.
pub struct Terraform {
    home: TempDir,
    cli_config: PathBuf,
    ca_file: PathBuf,
    env: Vec<(String, String)>,
}

/// What one `terraform` command did.
#[derive(Debug)]
pub struct TerraformOutput {
    /// The arguments, for messages.
    pub args: Vec<String>,
    /// The exit status.
    pub status: ExitStatus,
    /// Everything written to stdout.
    pub stdout: String,
    /// Everything written to stderr.
    pub stderr: String,
}

impl Terraform {
    /// A new environment trusting only `ca`, with `cli_config` as its CLI configuration
    /// (e.g. a `host` block pointing at a [`origin::FakeOrigin`], or a `provider_installation`
    /// block with a `network_mirror`).
    pub fn new(ca: &TestCa, cli_config: &str) -> Terraform {
        let home = tempfile::Builder::new()
            .prefix("provender-tf-home-")
            .tempdir()
            .expect("create terraform HOME");
        let cli_config_path = home.path().join("terraform.rc");
        std::fs::write(&cli_config_path, cli_config).expect("write CLI config");
        let ca_file = ca.write_ca(home.path());
        std::fs::create_dir(home.path().join("empty-cert-dir")).expect("create empty cert dir");
        Terraform {
            home,
            cli_config: cli_config_path,
            ca_file,
            env: Vec::new(),
        }
    }

    /// Adds an environment variable to every command (e.g. `TF_PLUGIN_CACHE_DIR`).
    pub fn env(mut self, key: &str, value: &str) -> Terraform {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    /// The HOME directory of every command.
    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// The CA file given as `SSL_CERT_FILE`.
    pub fn ca_file(&self) -> &Path {
        &self.ca_file
    }

    /// Runs `terraform init` in `dir` (no prompts, no colour).
    pub async fn init(&self, dir: &Path) -> TerraformOutput {
        self.run(dir, &["init", "-input=false", "-no-color"]).await
    }

    /// Runs `terraform <args>` in `dir` without blocking the runtime (servers in the same
    /// test keep answering), killing it after [`TERRAFORM_TIMEOUT`].
    pub async fn run(&self, dir: &Path, args: &[&str]) -> TerraformOutput {
        let mut stdout = tempfile::tempfile().expect("create stdout file");
        let mut stderr = tempfile::tempfile().expect("create stderr file");
        let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned());
        let mut child = Command::new(TERRAFORM)
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("PATH", path)
            .env("HOME", self.home())
            .env("TF_CLI_CONFIG_FILE", &self.cli_config)
            .env("SSL_CERT_FILE", &self.ca_file)
            .env("SSL_CERT_DIR", self.home().join("empty-cert-dir"))
            .env("TF_IN_AUTOMATION", "1")
            .env("CHECKPOINT_DISABLE", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(stdout.try_clone().expect("clone stdout file"))
            .stderr(stderr.try_clone().expect("clone stderr file"))
            .spawn()
            .unwrap_or_else(|err| panic!("cannot run {TERRAFORM}: {err}"));

        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for terraform") {
                break status;
            }
            if started.elapsed() > TERRAFORM_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "terraform {args:?} still running after {TERRAFORM_TIMEOUT:?}\n\
                     --- stdout ---\n{}\n--- stderr ---\n{}",
                    read_all(&mut stdout),
                    read_all(&mut stderr)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        TerraformOutput {
            args: args.iter().map(|arg| (*arg).to_owned()).collect(),
            status,
            stdout: read_all(&mut stdout),
            stderr: read_all(&mut stderr),
        }
    }
}

impl TerraformOutput {
    /// Panics, showing both output streams, unless the command exited successfully.
    pub fn assert_success(&self) -> &TerraformOutput {
        assert!(
            self.status.success(),
            "terraform {:?} failed ({})\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.args,
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }

    /// Panics, showing both output streams, if the command exited successfully.
    pub fn assert_failure(&self) -> &TerraformOutput {
        assert!(
            !self.status.success(),
            "terraform {:?} unexpectedly succeeded\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.args,
            self.stdout,
            self.stderr
        );
        self
    }

    /// stdout followed by stderr, for `contains` checks that do not care which.
    pub fn combined(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs `terraform init`, which must succeed, in a fresh root module holding `main_tf`, from a
/// fresh HOME (no plugin cache) trusting `ca` and configured by `cli_config`. Returns the
/// module's directory.
pub async fn init_fresh(ca: &TestCa, cli_config: &str, main_tf: &str) -> TempDir {
    let dir = tf_config::root_module(main_tf);
    Terraform::new(ca, cli_config)
        .init(dir.path())
        .await
        .assert_success();
    dir
}

/// Reads a whole (possibly already written to) temporary file from its start.
fn read_all(file: &mut File) -> String {
    file.rewind().expect("rewind output file");
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).expect("read output file");
    String::from_utf8_lossy(&bytes).into_owned()
}
