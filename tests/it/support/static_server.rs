//! A plain static web server for tests: nginx serving a directory over HTTPS with a certificate
//! from the test CA, as a child process on a free loopback port, killed when dropped.
//!
//! nginx must be installed (CI installs it); a test that needs it fails, never skips, when it
//! is missing.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::pki::TestCa;

/// Where nginx is looked for, in order.
const CANDIDATES: [&str; 3] = ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"];

/// A running nginx; dropping it kills the process.
pub struct StaticServer {
    child: Child,
    addr: SocketAddr,
    dir: TempDir,
}

impl StaticServer {
    /// Serves `root` at `https://localhost:PORT/` (JSON as `application/json`).
    pub fn start(ca: &TestCa, root: &Path) -> StaticServer {
        StaticServer::start_with(ca, root, "")
    }

    /// [`start`](Self::start), with `extra` (nginx directives, such as `location` blocks)
    /// added to the server's block.
    pub fn start_with(ca: &TestCa, root: &Path, extra: &str) -> StaticServer {
        let nginx = CANDIDATES
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .unwrap_or_else(|| {
                panic!(
                    "nginx is needed to test a plain static web server as a network mirror, and \
                     none is installed (looked for {CANDIDATES:?}); install it, e.g. \
                     `apt-get install nginx`"
                )
            });
        let dir = tempfile::Builder::new()
            .prefix("provender-nginx-")
            .tempdir()
            .expect("nginx temp dir");
        let issued = ca.issue(&["localhost", "127.0.0.1"]);
        let cert = dir.path().join("cert.pem");
        let key = dir.path().join("key.pem");
        std::fs::write(&cert, &issued.cert_pem).unwrap();
        std::fs::write(&key, &issued.key_pem).unwrap();
        // A free port: bind, read it, release it for nginx.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("find a free port")
            .port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let d = dir.path().display();
        let conf = format!(
            r#"daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 64; }}
http {{
  access_log {d}/access.log;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  types {{
    application/json json;
    application/zip zip;
  }}
  default_type application/octet-stream;
  server {{
    listen {addr} ssl;
    server_name localhost;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    root {root};
    {extra}
  }}
}}
"#,
            cert = cert.display(),
            key = key.display(),
            root = root.display(),
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf).unwrap();
        let child = Command::new(&nginx)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf_path)
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", nginx.display()));
        let mut server = StaticServer { child, addr, dir };
        server.wait_ready();
        server
    }

    fn wait_ready(&mut self) {
        let started = Instant::now();
        loop {
            if TcpStream::connect_timeout(&self.addr, Duration::from_millis(200)).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "nginx exited ({status}) before listening on {}:\n{}",
                    self.addr,
                    self.error_log()
                );
            }
            if started.elapsed() > Duration::from_secs(10) {
                panic!(
                    "nginx not listening on {} after 10s:\n{}",
                    self.addr,
                    self.error_log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `https://localhost:PORT/`
    pub fn url(&self) -> String {
        format!("https://localhost:{}/", self.addr.port())
    }

    /// nginx's error log so far (for failure messages).
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    /// nginx's access log so far: one line per request.
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }
}

impl Drop for StaticServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
