//! `[server]`: the listener, TLS, the public URL and the connection limits.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, invalid};

/// `[server]`
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address and port to listen on (`0.0.0.0:8443` accepts connections from other machines).
    pub listen: String,
    /// URL path under which the mirror is served; the CLI's `network_mirror` URL must end with
    /// it. Letters, digits, `-`, `.`, `_`, `~` between single slashes.
    pub base_path: String,
    /// PEM certificate chain for HTTPS, with `tls_key`. Neither: provender generates a CA and a
    /// certificate for localhost into `<cache.dir>/tls` on first start and logs how to trust it.
    #[schemars(extend("format" = "path"))]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert`; set both or neither.
    #[schemars(extend("format" = "path"))]
    pub tls_key: Option<PathBuf>,
    /// The URL clients use to reach the mirror (behind a reverse proxy, the proxy's), shown in
    /// the start-up log and on the pages; unset: `https://localhost:<port><base_path>` (or the
    /// listen address when it is a specific one).
    pub public_url: Option<String>,
    /// How long responses in flight may continue after SIGTERM before connections are closed.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub shutdown_grace: Duration,
    /// After SIGTERM, how long to keep accepting connections while `/readyz` answers 503
    /// "draining", so that a load balancer stops sending new clients first (`"0s"`: stop at once).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub drain_delay: Duration,
    /// How often the certificate and key files are checked for changes; a renewed pair is
    /// loaded without a restart (SIGHUP reloads at once). `"0s"`: only on SIGHUP; else at least
    /// 1s.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub tls_reload_interval: Duration,
    /// Log one line per request (target `provender::access`: peer, method, path, status, route,
    /// bytes, time to the response head, user agent).
    pub access_log: bool,
    /// The most a client request waits for its answer to start, whatever it waits on.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub request_budget: Duration,
    /// The most `/readyz` waits for the cache's store to answer.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub ready_timeout: Duration,
    /// How long a client may take to finish its TLS handshake.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub tls_handshake_timeout: Duration,
    /// HTTP/1.1: how long a client may take to send a whole request head, counted from the end
    /// of the previous response (so it also closes a keep-alive connection left unused that long).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub header_read_timeout: Duration,
    /// How long a connection may have no request in flight before it is closed; a response
    /// being sent is in flight however slowly the client reads.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub idle_timeout: Duration,
    /// HTTP/2: ping the client this often, and close the connection when a ping is not
    /// answered within `http2_keep_alive_timeout` (`"0s"`: no pings).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub http2_keep_alive_interval: Duration,
    /// HTTP/2: how long to wait for a ping's answer.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub http2_keep_alive_timeout: Duration,
    /// Open client connections at most: past it, a new connection is closed as soon as it is
    /// accepted, while established ones keep being served. Keep it well under the process's
    /// open-file limit.
    pub max_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8443".into(),
            base_path: "/".into(),
            tls_cert: None,
            tls_key: None,
            public_url: None,
            shutdown_grace: Duration::from_secs(30),
            drain_delay: Duration::ZERO,
            request_budget: Duration::from_secs(30),
            ready_timeout: Duration::from_secs(5),
            tls_reload_interval: Duration::from_secs(60),
            access_log: false,
            tls_handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            http2_keep_alive_interval: Duration::from_secs(20),
            http2_keep_alive_timeout: Duration::from_secs(20),
            max_connections: 4096,
        }
    }
}

impl ServerConfig {
    /// `[server]`
    pub(super) fn validate(&self) -> Result<ServerSettings, ConfigError> {
        let s = self;
        let listen: SocketAddr = s.listen.parse().map_err(|_| {
            invalid(
                "server.listen",
                format!("{:?} is not an address like 127.0.0.1:8443", s.listen),
            )
        })?;
        let base_path = normalise_base_path(&s.base_path)?;
        if !s.tls_reload_interval.is_zero() && s.tls_reload_interval < Duration::from_secs(1) {
            return Err(invalid(
                "server.tls_reload_interval",
                "must be at least 1s (or 0s: reload only on SIGHUP)",
            ));
        }
        for (key, value) in [
            ("server.request_budget", s.request_budget),
            ("server.ready_timeout", s.ready_timeout),
            ("server.tls_handshake_timeout", s.tls_handshake_timeout),
            ("server.header_read_timeout", s.header_read_timeout),
            ("server.idle_timeout", s.idle_timeout),
            (
                "server.http2_keep_alive_timeout",
                s.http2_keep_alive_timeout,
            ),
        ] {
            if value.is_zero() {
                return Err(invalid(key, "must be more than 0s"));
            }
        }
        if s.max_connections == 0 {
            return Err(invalid("server.max_connections", "must be at least 1"));
        }
        // tokio's semaphore, which holds the connection slots, cannot count higher.
        if s.max_connections > tokio::sync::Semaphore::MAX_PERMITS {
            return Err(invalid(
                "server.max_connections",
                format!("must be at most {}", tokio::sync::Semaphore::MAX_PERMITS),
            ));
        }
        let tls = match (&s.tls_cert, &s.tls_key) {
            (Some(cert), Some(key)) => TlsSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            },
            (None, None) => TlsSource::SelfSigned,
            (Some(_), None) => {
                return Err(invalid(
                    "server.tls_key",
                    "must be set when server.tls_cert is set",
                ));
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "server.tls_cert",
                    "must be set when server.tls_key is set",
                ));
            }
        };
        for (key, path) in [
            ("server.tls_cert", &s.tls_cert),
            ("server.tls_key", &s.tls_key),
        ] {
            if let Some(path) = path {
                if let Err(e) = std::fs::metadata(path) {
                    return Err(invalid(key, format!("cannot read {}: {e}", path.display())));
                }
            }
        }
        let public_url = match &s.public_url {
            Some(u) => {
                let url = url::Url::parse(u)
                    .map_err(|e| invalid("server.public_url", format!("{u:?}: {e}")))?;
                if !matches!(url.scheme(), "https" | "http") || url.host().is_none() {
                    return Err(invalid(
                        "server.public_url",
                        format!("{u:?} must be an absolute https URL"),
                    ));
                }
                Some(with_trailing_slash(url))
            }
            None => None,
        };

        Ok(ServerSettings {
            listen,
            base_path,
            tls,
            public_url,
            shutdown_grace: s.shutdown_grace,
            drain_delay: s.drain_delay,
            tls_reload_interval: s.tls_reload_interval,
            access_log: s.access_log,
            request_budget: s.request_budget,
            ready_timeout: s.ready_timeout,
            connections: ConnectionLimits {
                tls_handshake_timeout: s.tls_handshake_timeout,
                header_read_timeout: s.header_read_timeout,
                idle_timeout: s.idle_timeout,
                http2_keep_alive_interval: (!s.http2_keep_alive_interval.is_zero())
                    .then_some(s.http2_keep_alive_interval),
                http2_keep_alive_timeout: s.http2_keep_alive_timeout,
                max_connections: s.max_connections,
            },
        })
    }
}

fn normalise_base_path(p: &str) -> Result<String, ConfigError> {
    if !p.starts_with('/') {
        return Err(invalid(
            "server.base_path",
            format!("{p:?} must start with '/'"),
        ));
    }
    let ok = p.split('/').filter(|s| !s.is_empty()).all(|seg| {
        seg != "."
            && seg != ".."
            && seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
    });
    if !ok || p.contains("//") {
        return Err(invalid(
            "server.base_path",
            format!(
                "{p:?} may contain only letters, digits, '-', '.', '_', '~' between single slashes"
            ),
        ));
    }
    Ok(if p.ends_with('/') {
        p.to_string()
    } else {
        format!("{p}/")
    })
}

fn with_trailing_slash(mut url: url::Url) -> url::Url {
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    url
}

/// Where the server's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsSource {
    /// `server.tls_cert` and `server.tls_key`.
    Files { cert: PathBuf, key: PathBuf },
    /// A CA and certificate generated into `<cache.dir>/tls` on first start.
    SelfSigned,
}

/// `[server]`, validated: what the listener needs.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub listen: SocketAddr,
    /// Always starts and ends with `/`.
    pub base_path: String,
    pub tls: TlsSource,
    pub public_url: Option<url::Url>,
    pub shutdown_grace: Duration,
    /// After SIGTERM, how long to keep accepting connections while `/readyz` says draining.
    pub drain_delay: Duration,
    /// How often the certificate files are checked for changes (zero: only on SIGHUP).
    pub tls_reload_interval: Duration,
    /// Log one line per request (target `provender::access`).
    pub access_log: bool,
    /// How long a client request may wait for its answer to start (its head): every call made
    /// for it is cut off then, and it is answered 504 with `Retry-After`. The git door and
    /// uploads are outside it (`server.request_budget`).
    pub request_budget: Duration,
    /// How long `/readyz` waits for the store (`server.ready_timeout`).
    pub ready_timeout: Duration,
    pub connections: ConnectionLimits,
}

/// How long clients may take and how many connections they may hold (`[server]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// From accepting a connection to the end of its TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// HTTP/1.1: for a whole request head, counted from the end of the previous response (or
    /// from the first byte of a new connection).
    pub header_read_timeout: Duration,
    /// How long a connection may have no request in flight.
    pub idle_timeout: Duration,
    /// HTTP/2: how often to ping the client (`None`: never).
    pub http2_keep_alive_interval: Option<Duration>,
    /// HTTP/2: how long to wait for a ping's answer before closing the connection.
    pub http2_keep_alive_timeout: Duration,
    /// Open connections at most; more are closed as soon as they are accepted.
    pub max_connections: usize,
}

impl ServerSettings {
    /// The URL clients use to reach the mirror, for logs and the help page.
    pub fn public_url(&self) -> url::Url {
        if let Some(u) = &self.public_url {
            return u.clone();
        }
        let scheme = "https";
        let host = match self.listen.ip() {
            ip if ip.is_unspecified() || ip.is_loopback() => "localhost".to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        let port = match self.listen.port() {
            443 => String::new(),
            p => format!(":{p}"),
        };
        url::Url::parse(&format!("{scheme}://{host}{port}{}", self.base_path))
            .expect("listen address and base path form a valid URL")
    }
}
