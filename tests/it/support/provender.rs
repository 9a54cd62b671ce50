//! Running provender itself in tests: a server in this process, configured like an operator
//! would (TOML), fronting a [`FakeOrigin`] reached as `registry.terraform.io` through
//! `connect_to`, with certificates from the test CA and real certificate checking both ways.

use std::path::{Path, PathBuf};

use provender::config::Config;
use provender::server::{RunningServer, Server};
use tempfile::TempDir;

use super::http::get;
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
    /// Extra keys for `[cache]`.
    pub extra_cache: &'a str,
    /// Reuse this cache directory instead of a fresh one.
    pub cache_dir: Option<&'a Path>,
    /// Reach the origin at this address instead of its own (e.g. through a [`super::throttle::Throttle`]).
    pub connect_to: Option<std::net::SocketAddr>,
    /// More `upstream.allowed_hosts` besides [`REGISTRY`].
    pub allowed_hosts: &'a [&'a str],
    /// TOML appended at the end: whole tables such as `[auth]` or more `[upstream.hosts."..."]`.
    pub extra_toml: &'a str,
    /// Give [`REGISTRY`] no `connect_to`: it is reached by name (through `upstream.proxy`).
    pub by_name: bool,
    /// The background complete-hashes job: off (`None`, so that origin request counts are
    /// the clients' own), or on with these `[complete_hashes]` keys.
    pub hash_job: Option<&'a str>,
    /// Listen here instead of on a free port chosen at bind time (for a configuration that
    /// must name its own port, such as `publishing.hostname`; see [`free_port`]).
    pub listen: Option<&'a str>,
    /// The clock version lists and the policy's cooldown judge ages by (the system's when
    /// `None`), so a test moves time instead of waiting for it.
    pub clock: Option<std::sync::Arc<provender::clock::ManualClock>>,
}

/// A port nobody listens on now (bound and let go), for a server that must know its port
/// before it starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl TestMirror {
    /// Starts provender with defaults suitable for tests.
    pub async fn start(ca: &TestCa, origin: &FakeOrigin) -> TestMirror {
        Self::start_with(ca, origin, MirrorOptions::default()).await
    }

    /// Starts provender with defaults and `toml` appended (whole tables: `[auth]`, ...).
    pub async fn start_with_toml(ca: &TestCa, origin: &FakeOrigin, toml: &str) -> TestMirror {
        Self::start_with(
            ca,
            origin,
            MirrorOptions {
                extra_toml: toml,
                ..Default::default()
            },
        )
        .await
    }

    /// Starts provender on an existing cache directory, otherwise with defaults.
    pub async fn start_on(ca: &TestCa, origin: &FakeOrigin, cache_dir: &Path) -> TestMirror {
        let opts = MirrorOptions {
            cache_dir: Some(cache_dir),
            ..Default::default()
        };
        Self::start_with(ca, origin, opts).await
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
        let cache_dir = opts
            .cache_dir
            .map(Path::to_path_buf)
            .unwrap_or_else(|| dir.path().join("cache"));
        let toml = config_toml(
            ca,
            dir.path(),
            &cache_dir,
            opts.listen.unwrap_or("127.0.0.1:0"),
            opts.connect_to.unwrap_or(origin.addr()),
            &opts,
        );
        let settings = Config::from_toml(&toml)
            .and_then(|c| c.validate())
            .expect("test configuration is valid");
        let clock: std::sync::Arc<dyn provender::clock::Clock> = match &opts.clock {
            Some(clock) => clock.clone(),
            None => provender::clock::system(),
        };
        let server = within("binding provender", Server::bind_at(settings, clock))
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

    /// Its `/metrics` page (Prometheus text).
    pub async fn metrics(&self, client: &reqwest::Client) -> String {
        let got = get(client, &self.root_url("/metrics")).await;
        String::from_utf8(got.body).expect("metrics are UTF-8")
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

/// A complete provender configuration for tests: HTTPS with a certificate from `ca` (written
/// into `dir`), the cache in `cache_dir`, and the fake origin reached as [`REGISTRY`] at `origin`.
pub fn config_toml(
    ca: &TestCa,
    dir: &Path,
    cache_dir: &Path,
    listen: &str,
    origin: std::net::SocketAddr,
    opts: &MirrorOptions<'_>,
) -> String {
    let issued = ca.issue(&["localhost", "127.0.0.1"]);
    let cert = dir.join("mirror.pem");
    let key = dir.join("mirror-key.pem");
    std::fs::write(&cert, &issued.cert_pem).unwrap();
    std::fs::write(&key, &issued.key_pem).unwrap();
    let ca_file = ca.write_ca(dir);
    format!(
        r#"
[server]
listen = "{listen}"
tls_cert = "{cert}"
tls_key = "{key}"
shutdown_grace = "5s"
{extra_server}

[cache]
dir = "{cache}"
{extra_cache}

[upstream]
allowed_hosts = [{allowed_hosts}]
ca_file = "{ca}"
{extra_upstream}

[complete_hashes]
{hash_job}

{pinned}

{extra_toml}
"#,
        hash_job = match opts.hash_job {
            Some(keys) => format!("enabled = true\n{keys}"),
            None => "enabled = false".to_string(),
        },
        pinned = if opts.by_name {
            String::new()
        } else {
            format!("[upstream.hosts.\"{REGISTRY}\"]\nconnect_to = \"{origin}\"")
        },
        allowed_hosts = std::iter::once(REGISTRY)
            .chain(opts.allowed_hosts.iter().copied())
            .map(|h| format!("{h:?}"))
            .collect::<Vec<_>>()
            .join(", "),
        extra_toml = opts.extra_toml,
        cert = cert.display(),
        key = key.display(),
        cache = cache_dir.display(),
        ca = ca_file.display(),
        extra_server = opts.extra_server,
        extra_cache = opts.extra_cache,
        extra_upstream = opts.extra_upstream,
    )
}

/// Writes `<dir>/provender.toml` for the real binary: the [`config_toml`] of a server on a free
/// port with its cache in `<dir>/cache`, reaching the origin at `origin`. Returns its path.
pub fn write_config(
    ca: &TestCa,
    dir: &Path,
    origin: std::net::SocketAddr,
    opts: &MirrorOptions<'_>,
) -> PathBuf {
    let toml = config_toml(ca, dir, &dir.join("cache"), "127.0.0.1:0", origin, opts);
    let config = dir.join("provender.toml");
    std::fs::write(&config, toml).expect("write the configuration");
    config
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

/// provender as a separate process (the real binary), for tests that signal or kill it.
pub struct ServerProcess {
    child: std::process::Child,
    /// The mirror's base URL.
    pub url: url::Url,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl ServerProcess {
    /// Runs `provender serve --config <config>` and waits until it listens.
    pub fn spawn(config: &Path) -> ServerProcess {
        Self::spawn_with_env(config, &[])
    }

    /// Like [`spawn`](Self::spawn), with more environment variables.
    pub fn spawn_with_env(config: &Path, env: &[(&str, &str)]) -> ServerProcess {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_provender"))
            .args(["serve", "--config"])
            .arg(config)
            .env("PROVENDER_LOG", "info")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start the provender binary");
        let stderr = child.stderr.take().unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                // In text and in JSON logs alike: "... (mirror base URL <url>)...".
                if let Some(url) = line.split("mirror base URL ").nth(1) {
                    let _ = tx.send(url.split(')').next().unwrap_or_default().to_string());
                }
                sink.lock().unwrap().push(line);
            }
        });
        let url = match rx.recv_timeout(std::time::Duration::from_secs(20)) {
            Ok(url) => url::Url::parse(&url).expect("a base URL in the start-up log"),
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "provender did not start:\n{}",
                    log.lock().unwrap().join("\n")
                );
            }
        };
        ServerProcess { child, url, log }
    }

    /// The URL of `path` below the base URL.
    pub fn url(&self, path: &str) -> String {
        self.url.join(path).unwrap().to_string()
    }

    /// The URL of `path` at the server's root (admin endpoints).
    pub fn root_url(&self, path: &str) -> String {
        let mut u = self.url.clone();
        u.set_path(path);
        u.to_string()
    }

    /// Sends a signal (`"TERM"`, `"KILL"`).
    pub fn signal(&self, name: &str) {
        let status = std::process::Command::new("kill")
            .args([format!("-{name}"), self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Waits for the process to exit (at most 30 s) and returns its status.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        let started = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if started.elapsed() > std::time::Duration::from_secs(30) {
                let _ = self.child.kill();
                panic!("provender did not exit:\n{}", self.log());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Its peak resident memory so far, in bytes (`VmHWM` in `/proc/<pid>/status`).
    pub fn peak_memory(&self) -> u64 {
        let path = format!("/proc/{}/status", self.child.id());
        let status = std::fs::read_to_string(&path).expect("read the process status");
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no VmHWM in {path}:\n{status}"));
        kib * 1024
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
