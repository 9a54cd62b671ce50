//! A real Garage server (a distributed S3-compatible object store), one single-node instance per
//! test, on loopback ports of its own, with one bucket and one key.
//!
//! The binary is `$GARAGE_BIN`, else `garage` on `PATH`, else `~/.cargo/bin/garage`
//! (`cargo install garage --locked`; `.ci/test` installs it when missing). Tests that need it
//! never skip: without it they fail with a message saying how to install it.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The key every test instance is created with.
pub const ACCESS_KEY_ID: &str = "GK0123456789abcdef01234567";
const SECRET: &str = "provender-test-secret-0123456789abcdef0123456789abcdef";
/// Garage's region (SigV4 needs the client to name the same one).
pub const REGION: &str = "garage";

/// A running Garage; killed when dropped.
pub struct Garage {
    child: Child,
    dir: TempDir,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    pub bucket: String,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The Garage binary to run.
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("GARAGE_BIN") {
        return PathBuf::from(p);
    }
    if let Some(found) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("garage"))
            .find(|p| p.is_file())
    }) {
        return found;
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let installed = home.join(".cargo/bin/garage");
    assert!(
        installed.is_file(),
        "the object-store tests run a real Garage: install it with `cargo install garage --locked` \
         (or set GARAGE_BIN)"
    );
    installed
}

impl Garage {
    /// Starts a single-node Garage with bucket `bucket` and waits until its S3 API answers.
    pub fn start(bucket: &str) -> Garage {
        let dir = tempfile::Builder::new()
            .prefix("provender-garage-")
            .tempdir()
            .unwrap();
        let (rpc, s3) = (free_port(), free_port());
        let config = dir.path().join("garage.toml");
        std::fs::write(
            &config,
            format!(
                "metadata_dir = \"{meta}\"\ndata_dir = \"{data}\"\ndb_engine = \"sqlite\"\n\
                 replication_factor = 1\nrpc_bind_addr = \"127.0.0.1:{rpc}\"\n\
                 rpc_public_addr = \"127.0.0.1:{rpc}\"\n\
                 rpc_secret = \"{secret}\"\n\n[s3_api]\ns3_region = \"{REGION}\"\n\
                 api_bind_addr = \"127.0.0.1:{s3}\"\n",
                meta = dir.path().join("meta").display(),
                data = dir.path().join("data").display(),
                secret = "0f".repeat(32),
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("garage.log")).unwrap();
        let child = Command::new(binary())
            .args(["server", "--single-node", "--default-bucket"])
            .env("GARAGE_CONFIG_FILE", &config)
            .env("GARAGE_DEFAULT_ACCESS_KEY", ACCESS_KEY_ID)
            .env("GARAGE_DEFAULT_SECRET_KEY", SECRET)
            .env("GARAGE_DEFAULT_BUCKET", bucket)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start garage");
        let garage = Garage {
            child,
            dir,
            endpoint: format!("http://127.0.0.1:{s3}"),
            bucket: bucket.to_string(),
        };
        garage.wait_until_ready();
        garage
    }

    /// Polls until the bucket is there: an unauthenticated request for it answers 403 (denied)
    /// rather than a connection error.
    fn wait_until_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = self.endpoint.trim_start_matches("http://").to_string();
        loop {
            if let Ok(mut conn) = std::net::TcpStream::connect(&addr) {
                use std::io::{Read, Write};
                let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                let req = format!("GET /{} HTTP/1.0\r\nHost: {addr}\r\n\r\n", self.bucket);
                let mut answer = String::new();
                if conn.write_all(req.as_bytes()).is_ok()
                    && conn.read_to_string(&mut answer).is_ok()
                    && answer.starts_with("HTTP/1")
                {
                    // The default bucket is created right after the API starts listening.
                    std::thread::sleep(Duration::from_millis(300));
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "garage did not start:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// What Garage logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("garage.log")).unwrap_or_default()
    }

    /// Writes the secret key to a file in `dir` and returns its path (for
    /// `cache.object_store.secret_access_key_file`).
    pub fn secret_file(&self, dir: &Path) -> PathBuf {
        let path = dir.join("s3-secret");
        std::fs::write(&path, SECRET).unwrap();
        path
    }

    /// The secret key (for environment-variable credentials).
    pub fn secret(&self) -> &'static str {
        SECRET
    }

    /// The address of its S3 API (to put a [`super::throttle::Throttle`] in front of).
    pub fn addr(&self) -> std::net::SocketAddr {
        self.endpoint
            .trim_start_matches("http://")
            .parse()
            .expect("garage listens on an address")
    }

    /// `[cache]` keys and a `[cache.object_store]` table for this Garage under `prefix`, with
    /// the key from a file in `dir`.
    pub fn cache_toml(&self, dir: &Path, prefix: &str) -> String {
        self.cache_toml_at(dir, prefix, &self.endpoint)
    }

    /// [`cache_toml`](Self::cache_toml), reaching the store at `endpoint` (a proxy in front of
    /// it); more `[cache.object_store]` keys can follow.
    pub fn cache_toml_at(&self, dir: &Path, prefix: &str, endpoint: &str) -> String {
        format!(
            "backend = \"s3\"\n\n[cache.object_store]\nbucket = \"{}\"\nprefix = \"{prefix}\"\n\
             region = \"{REGION}\"\nendpoint = \"{}\"\npath_style = true\nallow_http = true\n\
             access_key_id = \"{ACCESS_KEY_ID}\"\nsecret_access_key_file = \"{}\"\n",
            self.bucket,
            endpoint,
            self.secret_file(dir).display()
        )
    }

    /// Validated object-store settings for this Garage under `prefix`.
    pub fn settings(&self, prefix: &str) -> provender::storage::ObjectStoreSettings {
        provender::storage::ObjectStoreSettings {
            provider: provender::storage::Provider::S3,
            bucket: self.bucket.clone(),
            prefix: prefix.to_string(),
            region: Some(REGION.into()),
            endpoint: Some(self.endpoint.clone()),
            path_style: true,
            allow_http: true,
            ca_file: None,
            credentials: Some(provender::storage::StaticCredentials {
                access_key_id: ACCESS_KEY_ID.into(),
                secret_access_key: SECRET.into(),
            }),
            deadlines: Default::default(),
        }
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
