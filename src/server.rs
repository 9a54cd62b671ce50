//! The HTTPS listener: accept loop, TLS (with certificate reloads), HTTP/1.1 and HTTP/2, graceful
//! shutdown. Each connection is served by [`conn`], within the `[server]` limits on connections.
//!
//! [`Server::bind`] does everything that can fail (certificates, cache directories, the upstream
//! client) before it binds the socket, so a bad setup never leaves a half-started server.
//! Requests are answered by [`routes`].

mod conn;
mod identity;
mod links;
mod pages;
mod respond;
mod routes;
pub(crate) mod site;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::config::{Settings, TlsSource};
use crate::metrics::{ConnectionClose, Metrics, TlsReload};
use crate::mirror::Mirror;
use crate::tls;

/// A bound, not yet running server.
pub struct Server {
    listener: TcpListener,
    shared: Arc<conn::Shared>,
    slots: conn::Slots,
    ca_file: Option<PathBuf>,
    grace: Duration,
    drain_delay: Duration,
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The listening socket could not be bound (the port is in use, or may not be used): a
    /// condition of the machine, worth retrying, not of the configuration.
    #[error("server.listen: cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// Certificates, the cache directories or the upstream client could not be set up.
    #[error("{0:#}")]
    Setup(#[from] anyhow::Error),
}

impl Server {
    /// Prepares TLS and the cache, then binds `server.listen`.
    pub async fn bind(settings: Settings) -> Result<Server, StartError> {
        Server::bind_at(settings, crate::clock::system()).await
    }

    /// [`Server::bind`] with the clock version lists and the policy's cooldown judge ages by.
    pub async fn bind_at(
        settings: Settings,
        clock: Arc<dyn crate::clock::Clock>,
    ) -> Result<Server, StartError> {
        settings
            .check_git_credentials()
            .map_err(|e| StartError::Setup(anyhow::Error::new(e)))?;
        let settings = Arc::new(settings);
        let metrics = Arc::new(Metrics::new());
        let ((cert_file, key_file), ca_file) = match &settings.server.tls {
            TlsSource::Files { cert, key } => ((cert.clone(), key.clone()), None),
            TlsSource::SelfSigned => {
                let files = tls::SelfSigned::in_dir(&settings.cache.dir);
                let mut names = Vec::new();
                if let Some(host) = settings
                    .server
                    .public_url
                    .as_ref()
                    .and_then(|u| u.host_str())
                {
                    names.push(host.trim_matches(['[', ']']).to_string());
                }
                if !settings.server.listen.ip().is_unspecified() {
                    names.push(settings.server.listen.ip().to_string());
                }
                if files.ensure(&names)? {
                    tracing::info!(ca = %files.ca_cert.display(), "generated a self-signed CA and server certificate");
                }
                ((files.cert, files.key), Some(files.ca_cert))
            }
        };
        let cert = Arc::new(tls::ReloadingCert::load(&cert_file, &key_file)?);
        metrics.tls_not_after.set(cert.not_after());
        warn_if_expiring(&cert);
        let tls = TlsAcceptor::from(tls::server_config(cert.clone()));
        let mirror = Mirror::open_at(settings.clone(), metrics.clone(), clock)?;
        if let Err(e) = mirror.core().policy().approvals().refresh().await {
            tracing::warn!("cannot read policy approvals from the store yet: {e}");
        }
        let listener = TcpListener::bind(settings.server.listen)
            .await
            .map_err(|source| StartError::Bind {
                addr: settings.server.listen,
                source,
            })?;
        let local = listener.local_addr().map_err(|source| StartError::Bind {
            addr: settings.server.listen,
            source,
        })?;
        let base_url = match &settings.server.public_url {
            Some(u) => u.clone(),
            None => {
                let mut u = settings.server.public_url();
                let _ = u.set_port(Some(local.port()));
                u
            }
        };
        crate::reverify::spawn(
            mirror.core(),
            metrics.clone(),
            settings.cache.reverify_interval,
        );
        let someone_publishes = settings.auth.enabled() && settings.auth.rules.any_publish();
        if !settings.trust.private.namespaces.is_empty() && !someone_publishes {
            tracing::warn!(
                "publishing.namespaces is set, but no [[auth.rules]] entry has publish patterns \
                 (or authentication is off): nobody can publish"
            );
        }
        mirror.core().start_hash_job();
        mirror.core().start_tier_recheck();
        watch_certificate(&cert, settings.server.tls_reload_interval, metrics.clone());
        watch_policy(mirror.core(), metrics.clone());
        let usage_mirror = mirror.core().clone();
        tokio::spawn(async move {
            if let Err(e) = usage_mirror.refresh_usage().await {
                tracing::warn!("cannot measure the cache: {e}");
            }
        });
        let ca_pem = match &ca_file {
            Some(path) => {
                Some(bytes::Bytes::from(std::fs::read(path).map_err(|e| {
                    anyhow::anyhow!("reading {}: {e}", path.display())
                })?))
            }
            None => None,
        };
        let app = Arc::new(routes::App::new(
            settings.clone(),
            mirror,
            metrics.clone(),
            base_url,
            ca_pem,
        ));
        app.usage().spawn();
        let limits = settings.server.connections.clone();
        Ok(Server {
            listener,
            slots: conn::Slots::new(limits.max_connections, &metrics),
            shared: Arc::new(conn::Shared {
                tls,
                http: conn::http_builder(&limits),
                app,
                metrics,
                limits,
            }),
            ca_file,
            grace: settings.server.shutdown_grace,
            drain_delay: settings.server.drain_delay,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// The URL clients should use as `network_mirror` base.
    pub fn base_url(&self) -> &url::Url {
        &self.shared.app.base_url
    }

    /// The generated CA certificate clients must trust, when the server made its own.
    pub fn ca_file(&self) -> Option<&PathBuf> {
        self.ca_file.as_ref()
    }

    /// Serves until `shutdown` completes; then `/readyz` says draining, connections are still
    /// accepted for `server.drain_delay`, and then no more are, while in-flight responses finish
    /// for up to `server.shutdown_grace`.
    ///
    /// Past `server.max_connections` open connections, a new one is accepted and closed at once
    /// rather than left unaccepted: its client learns straight away instead of waiting in the
    /// listen backlog for a slot (a load balancer can try another replica), and the backlog
    /// does not fill with connections whose clients gave up long ago.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let (closing, _) = tokio::sync::watch::channel(false);
        tokio::pin!(shutdown);
        let drained = tokio::time::sleep(Duration::MAX);
        tokio::pin!(drained);
        let mut draining = false;
        let mut refusing = false;
        loop {
            let (stream, peer) = tokio::select! {
                accepted = self.listener.accept() => match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        // Usually out of file descriptors: back off instead of spinning.
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = &mut shutdown, if !draining => {
                    draining = true;
                    self.shared.app.start_draining();
                    if self.drain_delay.is_zero() {
                        break;
                    }
                    tracing::info!(delay = ?self.drain_delay, "draining: /readyz answers 503; still accepting connections for server.drain_delay");
                    drained.as_mut().reset(tokio::time::Instant::now() + self.drain_delay);
                    continue;
                }
                () = &mut drained, if draining => break,
            };
            let Some(slot) = self.slots.take() else {
                if !refusing {
                    refusing = true;
                    tracing::warn!(
                        max = self.shared.limits.max_connections,
                        "server.max_connections connections are open: closing new ones until some end"
                    );
                }
                self.shared
                    .metrics
                    .connection_closed(ConnectionClose::Limit);
                drop(stream);
                continue;
            };
            refusing = false;
            let _ = stream.set_nodelay(true);
            tokio::spawn(conn::serve(
                self.shared.clone(),
                stream,
                peer,
                closing.subscribe(),
                slot,
            ));
        }
        drop(self.listener);
        tracing::info!("shutting down: no new connections, finishing responses in progress");
        let deadline = tokio::time::Instant::now() + self.grace;
        closing.send_replace(true);
        tokio::select! {
            () = closing.closed() => tracing::info!("all connections closed"),
            () = tokio::time::sleep_until(deadline) => tracing::warn!("shutdown grace period over; closing remaining connections"),
        }
        // Downloads run detached from connections: let them finish and commit, so the cache is
        // left clean (an unfinished one is discarded from tmp/ at the next start anyway).
        tokio::select! {
            () = self.shared.app.mirror().core().drain() => {}
            () = tokio::time::sleep_until(deadline) => tracing::warn!("shutdown grace period over; abandoning unfinished downloads"),
        }
        if let Err(e) = self.shared.app.usage().flush().await {
            tracing::warn!("cannot write the usage counts: {e}");
        }
        Ok(())
    }

    /// Runs the server in a background task (for tests and embedding).
    pub fn spawn(self) -> RunningServer {
        let addr = self.local_addr();
        let base_url = self.base_url().clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(self.run(async move {
            let _ = rx.await;
        }));
        RunningServer {
            addr,
            base_url,
            stop: Some(tx),
            task,
        }
    }
}

/// A server running in a background task.
pub struct RunningServer {
    pub addr: SocketAddr,
    pub base_url: url::Url,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl RunningServer {
    /// Shuts down gracefully and waits for it.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        (&mut self.task).await.context("server task panicked")?
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        if self.stop.is_some() {
            self.task.abort();
        }
    }
}

/// Reloads the listener's certificate on SIGHUP and, every `interval` (unless zero), when its
/// files changed. The SIGHUP handler is installed before this returns, so from then on the
/// signal reloads instead of ending the process. Ends once the server (and with it the TLS
/// configuration holding the certificate) is gone.
fn watch_certificate(cert: &Arc<tls::ReloadingCert>, interval: Duration, metrics: Arc<Metrics>) {
    let weak = Arc::downgrade(cert);
    let mut hangups = Hangups::new("the certificate");
    tokio::spawn(async move {
        loop {
            let force = tokio::select! {
                () = tokio::time::sleep(interval), if !interval.is_zero() => false,
                Some(()) = hangups.next() => true,
                else => return,
            };
            let Some(cert) = weak.upgrade() else { return };
            let reloading = cert.clone();
            let result = tokio::task::spawn_blocking(move || reloading.reload(force))
                .await
                .unwrap_or_else(|e| Err(anyhow::anyhow!("certificate reload task failed: {e}")));
            match result {
                Ok(changed) => {
                    if changed || force {
                        metrics.tls_reloaded(TlsReload::Ok);
                        metrics.tls_not_after.set(cert.not_after());
                        tracing::info!(
                            changed,
                            not_after = cert.not_after(),
                            "TLS certificate reloaded"
                        );
                        warn_if_expiring(&cert);
                    }
                }
                Err(e) => {
                    metrics.tls_reloaded(TlsReload::Error);
                    tracing::error!("{e:#}; keeping the current TLS certificate");
                }
            }
        }
    });
}

/// SIGHUP, which reloads what is read from files (each watcher listens on a stream of its own);
/// where it cannot be listened for, files are reloaded only when they change.
struct Hangups {
    #[cfg(unix)]
    signals: Option<tokio::signal::unix::Signal>,
}

impl Hangups {
    /// Listens for SIGHUP from now on (so the signal no longer ends the process); `what` names
    /// what it reloads, for the warning when it cannot.
    fn new(what: &str) -> Hangups {
        #[cfg(unix)]
        {
            let kind = tokio::signal::unix::SignalKind::hangup();
            let signals = tokio::signal::unix::signal(kind)
                .map_err(|e| {
                    tracing::warn!("cannot listen for SIGHUP; {what} reloads only on change: {e}");
                })
                .ok();
            Hangups { signals }
        }
        #[cfg(not(unix))]
        {
            let _ = what;
            Hangups {}
        }
    }

    /// The next SIGHUP (never, without a stream).
    async fn next(&mut self) -> Option<()> {
        #[cfg(unix)]
        if let Some(s) = self.signals.as_mut() {
            return s.recv().await;
        }
        std::future::pending().await
    }
}

/// How often the policy's rules file is looked at for changes, and approvals made by other
/// replicas (or `provender policy`) are read from the store.
const POLICY_POLL: Duration = Duration::from_secs(2);

/// Keeps the version policy current: reads `policy.rules_file` again when it changes and on
/// SIGHUP (an invalid file is refused whole and the rules in force stay), and reads approvals
/// recorded elsewhere. Ends once the core is gone.
fn watch_policy(core: &Arc<crate::mirror::Core>, metrics: Arc<Metrics>) {
    let weak = Arc::downgrade(core);
    let mut hangups = Hangups::new("the policy rules file");
    let stamp = |path: &std::path::Path| {
        std::fs::metadata(path)
            .ok()
            .map(|m| (m.modified().ok(), m.len()))
    };
    let mut last = core.policy().rules_file().map(stamp);
    tokio::spawn(async move {
        loop {
            let forced = tokio::select! {
                () = tokio::time::sleep(POLICY_POLL) => false,
                Some(()) = hangups.next() => true,
            };
            let Some(core) = weak.upgrade() else { return };
            let policy = core.policy();
            if let Some(path) = policy.rules_file() {
                let now = Some(stamp(path));
                if forced || now != last {
                    last = now;
                    match policy.reload() {
                        Ok(rules) => {
                            metrics.policy_reloads.with_label_values(&["ok"]).inc();
                            tracing::info!(rules, file = %path.display(), "policy rules reloaded");
                        }
                        Err(e) => {
                            metrics.policy_reloads.with_label_values(&["error"]).inc();
                            tracing::error!(
                                "policy rules file refused, the rules in force stay: {e}"
                            );
                        }
                    }
                }
            }
            if let Err(e) = policy.approvals().refresh().await {
                tracing::warn!("cannot read policy approvals from the store: {e}");
            }
        }
    });
}

/// Logs a warning when the certificate in use expires within two weeks (or has expired).
fn warn_if_expiring(cert: &tls::ReloadingCert) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default();
    let left = cert.not_after() - now;
    if left <= 0 {
        tracing::warn!("the TLS certificate has expired; clients will refuse it");
    } else if left < 14 * 24 * 3600 {
        tracing::warn!(
            days = left / (24 * 3600),
            "the TLS certificate expires in less than two weeks"
        );
    }
}
