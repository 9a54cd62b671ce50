//! One client connection, from accept to close, within the bounds of `[server]`: how many may be
//! open, how long the TLS handshake and a request head may take, and how long a connection may
//! sit with no request in flight.
//!
//! hyper times the HTTP/1.1 request head itself (`server.header_read_timeout`; its timer starts
//! when the previous response ends, so it also closes keep-alive connections left idle) and
//! pings HTTP/2 clients. It has no idle timeout, so [`serve`] keeps one: an [`Activity`] counts
//! the requests in flight (a request is in flight from its complete head until its response body
//! is dropped), and a connection with none for `server.idle_timeout` is shut down gracefully.
//! A long download is a request in flight however slowly it goes, so it is never cut for
//! idleness; neither is a client's own HTTP/2 ping enough to hold an idle connection open.
//!
//! A connection ends with a **lingering close**. An answer given before the request's body was
//! all read (a 413 for an upload past its limit, a refusal) leaves the client still sending;
//! a socket closed with unread bytes in it is reset, and a reset can destroy the answer before
//! the client reads it (curl then says "broken pipe", with no status). So once hyper is done,
//! the server ends its own side (TLS close_notify, TCP FIN) and reads and drops what the client
//! still sends until it closes, for at most [`LINGER_TIME`] in all, [`LINGER_IDLE`] between
//! reads and [`LINGER_BYTES`]; then it closes. HTTP/2 answers early by resetting the stream
//! instead, and its connections end the same way.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use prometheus::IntGauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

use super::routes;
use crate::config::ConnectionLimits;
use crate::metrics::{ConnectionClose, Metrics};

/// HTTP/2 streams a client may have open at once on one connection. RFC 9113 advises at least
/// 100; Terraform and OpenTofu fetch a few archives at a time.
const MAX_CONCURRENT_STREAMS: u32 = 100;

/// HTTP/2: most bytes of request headers (as HTTP/2 counts them: names, values and 32 per
/// field). The mirror's requests carry a path and at most a bearer token.
const MAX_HEADER_LIST_SIZE: u32 = 16 * 1024;

/// Bytes gathered before they are encrypted and sent. HTTP/2 writes each DATA frame on its own
/// (16 KiB, the size clients allow, plus a 9-byte head): straight into TLS, every frame would be
/// two TLS records and a system call. Gathered, four frames go out as four full records in one
/// call. Writes larger than this (HTTP/1.1's archive chunks) pass through without a copy.
const WRITE_BUFFER: usize = 64 * 1024;

/// Longest a connection lingers after its last answer, reading what the client still sends.
const LINGER_TIME: Duration = Duration::from_secs(10);
/// Longest a lingering connection waits for the client's next bytes.
const LINGER_IDLE: Duration = Duration::from_secs(2);
/// Most bytes a lingering connection reads (and drops) before it closes regardless.
const LINGER_BYTES: u64 = 64 << 20;

/// The HTTP/1.1 and HTTP/2 settings every connection is served with.
pub(super) fn http_builder(limits: &ConnectionLimits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.http2_keep_alive_interval)
        .keep_alive_timeout(limits.http2_keep_alive_timeout)
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .max_header_list_size(MAX_HEADER_LIST_SIZE);
    builder
}

/// The connection slots (`server.max_connections`) and the gauge of those in use.
pub(super) struct Slots {
    free: Arc<Semaphore>,
    open: IntGauge,
}

impl Slots {
    pub(super) fn new(max: usize, metrics: &Metrics) -> Slots {
        metrics
            .connections_max
            .set(i64::try_from(max).unwrap_or(i64::MAX));
        Slots {
            free: Arc::new(Semaphore::new(max)),
            open: metrics.connections_open.clone(),
        }
    }

    /// A slot for a connection just accepted; `None` when all are taken.
    pub(super) fn take(&self) -> Option<Slot> {
        let permit = self.free.clone().try_acquire_owned().ok()?;
        self.open.inc();
        Some(Slot {
            _permit: permit,
            open: self.open.clone(),
        })
    }
}

/// A connection's place among `server.max_connections`, given back when dropped.
pub(super) struct Slot {
    _permit: OwnedSemaphorePermit,
    open: IntGauge,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.dec();
    }
}

/// What one connection needs besides its socket.
pub(super) struct Shared {
    pub tls: TlsAcceptor,
    pub http: auto::Builder<TokioExecutor>,
    pub app: Arc<routes::App>,
    pub metrics: Arc<Metrics>,
    pub limits: ConnectionLimits,
}

/// Serves one accepted connection until the client leaves, it is closed for one of the limits,
/// or the server shuts down (`closing` turns true) and its responses in progress are finished.
/// `slot` is held until then.
pub(super) async fn serve(
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    mut closing: watch::Receiver<bool>,
    slot: Slot,
) {
    let _slot = slot;
    let limits = &shared.limits;
    let closed = |reason: ConnectionClose| shared.metrics.connection_closed(reason);
    let tls =
        match tokio::time::timeout(limits.tls_handshake_timeout, shared.tls.accept(stream)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                tracing::debug!(%peer, "TLS handshake failed: {e}");
                return;
            }
            Err(_) => {
                tracing::debug!(%peer, "TLS handshake timed out (server.tls_handshake_timeout)");
                closed(ConnectionClose::HandshakeTimeout);
                return;
            }
        };

    let activity = Arc::new(Activity::new());
    let service = {
        let (app, activity) = (shared.app.clone(), activity.clone());
        hyper::service::service_fn(move |req| {
            let busy = Busy::start(&activity);
            let app = app.clone();
            async move {
                let resp = app.handle(req, peer).await?;
                Ok::<_, std::convert::Infallible>(resp.map(|body| Tracked { body, _busy: busy }))
            }
        })
    };
    let stream = Arc::new(Mutex::new(tokio::io::BufWriter::with_capacity(
        WRITE_BUFFER,
        tls,
    )));
    let io = TokioIo::new(Watched {
        inner: stream.clone(),
        activity: activity.clone(),
    });
    let mut conn = Box::pin(shared.http.serve_connection(io, service));

    let result = tokio::select! {
        result = conn.as_mut() => result,
        () = idle_for(&activity, limits.idle_timeout) => {
            tracing::debug!(%peer, "closing an idle connection (server.idle_timeout)");
            closed(ConnectionClose::Idle);
            // HTTP/1.1 closes at once; HTTP/2 says GOAWAY and waits for the client's answer,
            // for at most another idle_timeout. Either way the close is counted, as idle.
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(limits.idle_timeout, conn.as_mut()).await;
            Ok(())
        }
        () = server_closing(&mut closing) => {
            conn.as_mut().graceful_shutdown();
            conn.as_mut().await
        }
    };
    if let Err(e) = result {
        match e.downcast_ref::<hyper::Error>() {
            Some(e) if e.is_timeout() => {
                let reason = activity.timeout_reason();
                tracing::debug!(%peer, reason = reason.as_str(), "connection timed out: {e}");
                closed(reason);
            }
            _ => tracing::debug!(%peer, "connection ended with an error: {e}"),
        }
    }
    // hyper is done with the stream: take it back, and close it lingering (a shutdown does
    // not wait for that: this connection has no answer left to give).
    drop(conn);
    drop(closing);
    if let Ok(stream) = Arc::try_unwrap(stream) {
        linger(stream.into_inner().unwrap_or_else(PoisonError::into_inner)).await;
    }
}

/// Ends the server's side of `io` (if hyper has not yet), then reads and drops what the
/// client still sends until it closes its side, within [`LINGER_TIME`], [`LINGER_IDLE`]
/// between reads and [`LINGER_BYTES`]: the client reads the last answer before the socket is
/// closed (see the module's documentation).
async fn linger<T: AsyncRead + AsyncWrite + Unpin>(mut io: T) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = tokio::time::timeout(LINGER_TIME, async {
        if tokio::time::timeout(LINGER_IDLE, io.shutdown())
            .await
            .is_err()
        {
            return;
        }
        let mut buf = vec![0u8; 16 << 10];
        let mut read = 0u64;
        while read < LINGER_BYTES {
            match tokio::time::timeout(LINGER_IDLE, io.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => read += n as u64,
                _ => return,
            }
        }
    })
    .await;
}

/// Resolves once the server shuts down (or is gone).
async fn server_closing(closing: &mut watch::Receiver<bool>) {
    let _ = closing.wait_for(|closing| *closing).await;
}

/// Resolves once the connection has had no request in flight for `limit`.
async fn idle_for(activity: &Activity, limit: Duration) {
    loop {
        let deadline = match activity.idle_since() {
            Some(since) => since + limit,
            // Busy: nothing can expire before `limit` from now.
            None => Instant::now() + limit,
        };
        if deadline <= Instant::now() {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

/// What a connection is doing, shared by its IO, its requests and its idle timer.
struct Activity(Mutex<ActivityState>);

struct ActivityState {
    /// Requests whose response body has not been dropped yet.
    in_flight: usize,
    /// When `in_flight` last became 0 (or the connection was established).
    idle_since: Instant,
    /// Whether bytes arrived since then: a request head may be on its way.
    received: bool,
}

impl Activity {
    fn new() -> Activity {
        Activity(Mutex::new(ActivityState {
            in_flight: 0,
            idle_since: Instant::now(),
            received: false,
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ActivityState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Since when no request has been in flight; `None` while one is.
    fn idle_since(&self) -> Option<Instant> {
        let state = self.state();
        (state.in_flight == 0).then_some(state.idle_since)
    }

    fn received(&self) {
        self.state().received = true;
    }

    /// The `reason` for a timeout hyper ended the connection with. Its timers are HTTP/1.1's
    /// request-head timer and HTTP/2's keep-alive ping: with a request in flight only an
    /// unanswered ping ends a connection; otherwise the head timer did, on a head that was
    /// arriving too slowly, or on a keep-alive connection nobody used.
    fn timeout_reason(&self) -> ConnectionClose {
        let state = self.state();
        if state.in_flight > 0 {
            ConnectionClose::KeepAliveTimeout
        } else if state.received {
            ConnectionClose::HeaderTimeout
        } else {
            ConnectionClose::Idle
        }
    }
}

/// A request in flight, from its complete head until its response body is dropped.
struct Busy(Arc<Activity>);

impl Busy {
    fn start(activity: &Arc<Activity>) -> Busy {
        activity.state().in_flight += 1;
        Busy(activity.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.in_flight -= 1;
        if state.in_flight == 0 {
            state.idle_since = Instant::now();
            state.received = false;
        }
    }
}

/// A response body that keeps its request counted as in flight while hyper sends it.
struct Tracked {
    body: routes::Body,
    _busy: Busy,
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The connection's byte stream, noting in its [`Activity`] when bytes arrive; shared with
/// [`serve`], which takes it back for the lingering close once hyper is done with it (hyper
/// is its only user until then, so the lock is never contended).
struct Watched<T> {
    inner: Arc<Mutex<T>>,
    activity: Arc<Activity>,
}

impl<T> Watched<T> {
    fn stream(&self) -> std::sync::MutexGuard<'_, T> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut *self.stream()).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.received();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.stream()).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut *self.stream()).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream().is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.stream()).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.stream()).poll_shutdown(cx)
    }
}
