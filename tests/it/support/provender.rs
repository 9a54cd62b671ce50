//! Running provender itself in tests: a server in this process, configured like an operator
//! would (TOML), fronting a [`FakeOrigin`] reached as `registry.terraform.io` through
//! `connect_to`, with certificates from the test CA and real certificate checking both ways.

use std::path::{Path, PathBuf};

use provender::config::Config;
use provender::server::{RunningServer, Server};
use tempfile::TempDir;

use super::origin::FakeOrigin;
use super::pki::TestCa;
use super::within;

/// The registry host name the fake origin stands in for.
pub const REGISTRY: &str = "registry.terraform.io";

/// A provender server plus the directories it uses.
pub struct TestMirror {
    /// Holds the certificates and (unless given) the cache directory.
    pub dir: TempDir,
    /// The cache directory (`cache.dir`).
    pub cache_dir: PathBuf,
    /// The mirror's base URL (`https://localhost:PORT/...`).
    pub url: url::Url,
    server: Option<RunningServer>,
}

/// Everything needed to write a configuration for one test.
#[derive(Default)]
pub struct MirrorOptions<'a> {
    /// Extra TOML merged in: whole tables such as `[upstream]\nplatforms = [...]` are not
    /// allowed twice, so give keys through the fields below where they exist.
    pub extra_upstream: &'a str,
    /// Extra keys for `[server]`.
    pub extra_server: &'a str,
    /// Reuse this cache directory instead of a fresh one.
    pub cache_dir: Option<&'a Path>,
}

impl TestMirror {
    /// Starts provender with defaults suitable for tests.
    pub async fn start(ca: &TestCa, origin: &FakeOrigin) -> TestMirror {
        Self::start_with(ca, origin, MirrorOptions::default()).await
    }

    /// Starts provender with extra configuration.
    pub async fn start_with(
        ca: &TestCa,
        origin: &FakeOrigin,
        opts: MirrorOptions<'_>,
    ) -> TestMirror {
        let dir = tempfile::Builder::new()
            .prefix("provender-mirror-")
            .tempdir()
            .expect("temp dir");
        let issued = ca.issue(&["localhost", "127.0.0.1"]);
        let cert = dir.path().join("mirror.pem");
        let key = dir.path().join("mirror-key.pem");
        std::fs::write(&cert, &issued.cert_pem).unwrap();
        std::fs::write(&key, &issued.key_pem).unwrap();
        let ca_file = ca.write_ca(dir.path());
        let cache_dir = opts
            .cache_dir
            .map(Path::to_path_buf)
            .unwrap_or_else(|| dir.path().join("cache"));
        let toml = format!(
            r#"
[server]
listen = "127.0.0.1:0"
tls_cert = "{cert}"
tls_key = "{key}"
shutdown_grace = "2s"
{extra_server}

[cache]
dir = "{cache}"

[upstream]
allowed_hosts = ["{REGISTRY}"]
ca_file = "{ca}"
{extra_upstream}

[upstream.hosts."{REGISTRY}"]
connect_to = "{origin}"
"#,
            cert = cert.display(),
            key = key.display(),
            cache = cache_dir.display(),
            ca = ca_file.display(),
            origin = origin.addr(),
            extra_server = opts.extra_server,
            extra_upstream = opts.extra_upstream,
        );
        let settings = Config::from_toml(&toml)
            .and_then(|c| c.validate())
            .expect("test configuration is valid");
        let server = within("binding provender", Server::bind(settings))
            .await
            .expect("provender binds");
        let running = server.spawn();
        let url = running.base_url.clone();
        TestMirror {
            dir,
            cache_dir,
            url,
            server: Some(running),
        }
    }

    /// The URL of `path` below the mirror's base URL.
    pub fn url(&self, path: &str) -> String {
        self.url.join(path).expect("valid path").to_string()
    }

    /// The URL of `path` at the server's root (admin endpoints).
    pub fn root_url(&self, path: &str) -> String {
        let mut u = self.url.clone();
        u.set_path(path);
        u.to_string()
    }

    /// Stops the server gracefully, keeping the directories.
    pub async fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            within("stopping provender", server.stop())
                .await
                .expect("clean shutdown");
        }
    }

    /// Archives (`.zip` files) currently in the cache.
    pub fn cached_archives(&self) -> Vec<PathBuf> {
        files_under(&self.cache_dir.join("archives"))
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "zip"))
            .collect()
    }

    /// Files left in the staging directory.
    pub fn staging_files(&self) -> Vec<PathBuf> {
        files_under(&self.cache_dir.join("tmp"))
    }
}

/// Every regular file below `dir`, recursively (empty if it does not exist).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}
