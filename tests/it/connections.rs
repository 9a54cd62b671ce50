//! Slow and idle clients cannot hold the server:
//! - request heads trickled a line a second are cut at `server.header_read_timeout`, while an
//!   ordinary client keeps being answered;
//! - HTTP/1.1 and HTTP/2 connections with no request in flight (idle keep-alive, silent after
//!   the handshake, an HTTP/2 client that keeps pinging) are closed at `server.idle_timeout`,
//!   while slow but progressing downloads over either protocol run to their end;
//! - past `server.max_connections`, new connections are closed at once, established ones keep
//!   working, and new ones are served again once some close; `/metrics` shows the count.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use crate::support::http::get;
use crate::support::origin::{FakeOrigin, ProviderSpec};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror};
use crate::support::{https_client, poll, sample, within};

/// The archive of the one provider the origin serves.
const ARCHIVE: &str = "acme/foo/terraform-provider-foo_1.0.0_linux_amd64.zip";

/// Starts an origin (with archives of about `payload` bytes) and provender with these extra
/// `[server]` keys.
async fn start(payload: usize, server_keys: &str) -> (TestCa, FakeOrigin, TestMirror) {
    let ca = TestCa::new();
    let spec = ProviderSpec::new("acme", "foo", &["1.0.0"], &[("linux", "amd64")]);
    let origin = FakeOrigin::start(&ca, &[REGISTRY], vec![spec.with_payload(payload)]).await;
    let opts = MirrorOptions {
        extra_server: server_keys,
        ..Default::default()
    };
    let mirror = TestMirror::start_with(&ca, &origin, opts).await;
    (ca, origin, mirror)
}

/// A TLS client trusting `ca`, offering these ALPN protocols.
fn connector(ca: &TestCa, alpn: &[&[u8]]) -> tokio_rustls::TlsConnector {
    crate::support::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca.ca_pem().as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

fn server_addr(mirror: &TestMirror) -> std::net::SocketAddr {
    let port = mirror.url.port().expect("the test mirror has a port");
    std::net::SocketAddr::from(([127, 0, 0, 1], port))
}

/// A TCP connection to the mirror, with the TLS handshake done.
async fn connect(
    tls: &tokio_rustls::TlsConnector,
    mirror: &TestMirror,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(server_addr(mirror)).await?;
    tls.connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
}

/// Reads until the server closes the connection (end of stream or an error); returns what was
/// read.
async fn until_closed<R: tokio::io::AsyncRead + Unpin>(reader: &mut R) -> Vec<u8> {
    let mut got = Vec::new();
    let _ = reader.read_to_end(&mut got).await;
    got
}

/// How long after `since` the server closed the connection, or `None` if it still had not
/// `limit` after `since`.
async fn closed_after<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut R,
    since: Instant,
    limit: Duration,
) -> Option<Duration> {
    let left = limit.saturating_sub(since.elapsed());
    tokio::time::timeout(left, until_closed(reader))
        .await
        .ok()
        .map(|_| since.elapsed())
}

/// Reads one HTTP/1.1 response whose body has a `Content-Length`; returns its status and body.
/// With `pace`, reads no faster than it allows.
async fn read_response<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut R,
    pace: Option<&Pace>,
) -> (u16, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 16 << 10];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = within("a response head", reader.read(&mut chunk))
            .await
            .unwrap();
        assert!(n > 0, "the connection closed before a response head");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("a content-length");
    let mut body = buf.split_off(head_end);
    while body.len() < length {
        if let Some(pace) = pace {
            pace.after(body.len()).await;
        }
        let n = within("a response body", reader.read(&mut chunk))
            .await
            .unwrap_or(0);
        assert!(
            n > 0,
            "the connection closed after {} of {length} body bytes",
            body.len()
        );
        body.extend_from_slice(&chunk[..n]);
    }
    (status, body)
}

/// Reads no faster than `rate` bytes per second.
struct Pace {
    started: Instant,
    rate: f64,
}

impl Pace {
    fn new(rate: usize) -> Pace {
        Pace {
            started: Instant::now(),
            rate: rate as f64,
        }
    }

    /// Waits until `total` bytes are due.
    async fn after(&self, total: usize) {
        let due = self.started + Duration::from_secs_f64(total as f64 / self.rate);
        tokio::time::sleep_until(due.into()).await;
    }
}

/// An HTTP/2 connection (hyper's client) to the mirror; the task ends when the connection
/// does. The client pings the server every 200 ms, even with no request open.
async fn http2(
    ca: &TestCa,
    mirror: &TestMirror,
) -> (
    hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
    tokio::task::JoinHandle<Result<(), hyper::Error>>,
) {
    let tls = within("TLS handshake", connect(&connector(ca, &[b"h2"]), mirror))
        .await
        .expect("TLS handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_millis(200))
        .keep_alive_while_idle(true)
        .handshake(TokioIo::new(tls))
        .await
        .expect("HTTP/2 handshake");
    (send, tokio::spawn(conn))
}

/// `GET url` on an HTTP/2 connection; the status and whole body.
async fn h2_get(
    send: &mut hyper::client::conn::http2::SendRequest<Empty<Bytes>>,
    url: &str,
) -> (u16, Vec<u8>) {
    let req = http::Request::get(url).body(Empty::new()).unwrap();
    let resp = within(url, send.send_request(req))
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = resp.status().as_u16();
    let body = within(url, resp.into_body().collect()).await.unwrap();
    (status, body.to_bytes().to_vec())
}

/// `server.idle_timeout` in the idle tests.
const IDLE: Duration = Duration::from_millis(500);

/// The earliest a client may see an idle connection close, measured from when it read the last
/// response: the server counts from when it sent it, a moment before.
const EARLIEST: Duration = Duration::from_millis(400);

/// `provender_connections_closed_total{reason="<reason>"}`.
fn closed_for(metrics: &str, reason: &str) -> u64 {
    sample(
        metrics,
        &format!("provender_connections_closed_total{{reason=\"{reason}\"}}"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn request_heads_trickled_slowly_are_cut_at_the_header_read_timeout() {
    const SLOW: usize = 200;
    let (ca, _origin, mirror) =
        start(0, "header_read_timeout = \"2s\"\nidle_timeout = \"30s\"").await;
    let tls = connector(&ca, &[b"http/1.1"]);
    let client = https_client(&ca, &[]);

    let mut slow = tokio::task::JoinSet::new();
    for _ in 0..SLOW {
        let stream = within("a slow client's handshake", connect(&tls, &mirror))
            .await
            .expect("TLS handshake");
        slow.spawn(async move {
            let (mut reader, mut writer) = tokio::io::split(stream);
            let started = Instant::now();
            let trickle = async {
                let _ = writer.write_all(b"GET /healthz HTTP/1.1\r\n").await;
                for line in 0.. {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let header = format!("X-Slow-{line}: 1\r\n");
                    if writer.write_all(header.as_bytes()).await.is_err() {
                        break;
                    }
                }
                std::future::pending::<()>().await;
            };
            tokio::select! {
                closed = closed_after(&mut reader, started, Duration::from_secs(8)) => closed,
                () = trickle => unreachable!(),
            }
        });
    }

    // An ordinary client is answered all along.
    let mut answered = 0;
    let mut closed = Vec::new();
    while !slow.is_empty() {
        let got = get(&client, &mirror.root_url("/healthz")).await;
        assert_eq!(
            got.status, 200,
            "an ordinary request while slow clients wait"
        );
        answered += 1;
        while let Some(done) = slow.try_join_next() {
            closed.push(done.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        answered >= 10,
        "only {answered} ordinary requests were made"
    );

    let still_open = closed.iter().filter(|c| c.is_none()).count();
    assert_eq!(
        still_open, 0,
        "{still_open} of {SLOW} slow clients were still connected 8 s after they began their \
         request heads (server.header_read_timeout = 2s)"
    );
    let earliest = closed.iter().flatten().min().unwrap();
    assert!(
        *earliest >= Duration::from_millis(1500),
        "a slow client was cut after {earliest:?}, before the 2 s header_read_timeout"
    );
    let metrics = mirror.metrics(&client).await;
    assert_eq!(
        closed_for(&metrics, "header_timeout"),
        SLOW as u64,
        "{metrics}"
    );
    assert_eq!(closed_for(&metrics, "idle"), 0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_http1_connections_are_closed_but_a_slow_download_is_not() {
    let (ca, _origin, mirror) = start(
        16 << 20,
        "idle_timeout = \"500ms\"\nheader_read_timeout = \"1s\"",
    )
    .await;
    let tls = connector(&ca, &[b"http/1.1"]);
    let client = https_client(&ca, &[]);
    let archive = get(&client, &mirror.url(&format!("{REGISTRY}/{ARCHIVE}"))).await;
    assert_eq!(archive.status, 200, "{}", archive.text());

    // A keep-alive connection that answered a request, then has nothing to do.
    let mut used = within("handshake", connect(&tls, &mirror)).await.unwrap();
    used.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_response(&mut used, None).await.0, 200);
    let limit = Duration::from_secs(5);
    let answered = Instant::now();
    let used_closed = tokio::spawn(async move { closed_after(&mut used, answered, limit).await });
    // One that never sends a byte after its handshake.
    let mut silent = within("handshake", connect(&tls, &mirror)).await.unwrap();
    let connected = Instant::now();
    let silent_closed =
        tokio::spawn(async move { closed_after(&mut silent, connected, limit).await });

    // A download read at 8 MiB/s takes four times idle_timeout and twice header_read_timeout,
    // and through a 64 KiB receive buffer the server is sending all along.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(64 << 10).unwrap();
    let tcp = socket.connect(server_addr(&mirror)).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let mut download = within("handshake", tls.connect(name, tcp)).await.unwrap();
    let path = mirror.url.join(&format!("{REGISTRY}/{ARCHIVE}")).unwrap();
    let request = format!("GET {} HTTP/1.1\r\nHost: localhost\r\n\r\n", path.path());
    download.write_all(request.as_bytes()).await.unwrap();
    let pace = Pace::new(8 << 20);
    let (status, body) = read_response(&mut download, Some(&pace)).await;
    let took = pace.started.elapsed();
    assert_eq!(status, 200);
    assert!(
        took >= IDLE * 3,
        "the download took only {took:?}: too fast to show anything about idle_timeout"
    );
    assert!(body == archive.body, "the slow download is the archive");

    for (what, closed) in [
        ("a keep-alive connection after its response", used_closed),
        ("a connection silent after its handshake", silent_closed),
    ] {
        let after = within(what, closed).await.unwrap();
        let after = after.unwrap_or_else(|| panic!("{what} was still open after {limit:?}"));
        assert!(
            after >= EARLIEST,
            "{what} was closed after {after:?}, before idle_timeout"
        );
        assert!(after < took, "{what} was closed only after {after:?}");
    }
    let metrics = mirror.metrics(&client).await;
    assert!(closed_for(&metrics, "idle") >= 2, "{metrics}");
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_http2_connections_are_closed_even_while_the_client_pings() {
    let (ca, _origin, mirror) = start(16 << 20, "idle_timeout = \"500ms\"").await;

    // A connection with one request, then nothing but its client's pings.
    let (mut send, conn) = http2(&ca, &mirror).await;
    assert_eq!(h2_get(&mut send, &mirror.root_url("/healthz")).await.0, 200);
    let asked = Instant::now();
    let idle_closed = tokio::spawn(async move {
        let ended = tokio::time::timeout(Duration::from_secs(5), conn).await;
        (asked.elapsed(), ended.map(|joined| joined.unwrap()))
    });

    // On another, a stream read slowly (8 MiB/s, for four times idle_timeout) is not cut.
    let (mut send, conn) = http2(&ca, &mirror).await;
    let req = http::Request::get(mirror.url(&format!("{REGISTRY}/{ARCHIVE}")))
        .body(Empty::new())
        .unwrap();
    let resp = within("archive", send.send_request(req)).await.unwrap();
    assert_eq!(resp.status(), 200);
    let expected: usize = resp.headers()["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut body = resp.into_body();
    let pace = Pace::new(8 << 20);
    let mut received = 0;
    while let Some(frame) = within("a frame", body.frame()).await {
        let frame = frame.unwrap_or_else(|e| panic!("the download was cut: {e}"));
        if let Some(data) = frame.data_ref() {
            received += data.len();
        }
        pace.after(received).await;
    }
    let took = pace.started.elapsed();
    assert!(took >= IDLE * 3, "the download took only {took:?}");
    assert_eq!(received, expected, "the slow HTTP/2 download ended early");
    // Once it is done, that connection is idle too.
    let ended = tokio::time::timeout(Duration::from_secs(5), conn).await;
    let ended = ended.expect("an HTTP/2 connection idle after its download was open after 5 s");
    assert!(ended.unwrap().is_ok(), "closed with GOAWAY, not an error");

    let (after, ended) = within("the idle connection", idle_closed).await.unwrap();
    let ended = ended.unwrap_or_else(|_| panic!("an idle HTTP/2 connection was open after 5 s"));
    assert!(ended.is_ok(), "closed with GOAWAY, not an error: {ended:?}");
    assert!(after >= EARLIEST, "closed {after:?} after its last request");

    let client = https_client(&ca, &[]);
    let metrics = mirror.metrics(&client).await;
    assert!(closed_for(&metrics, "idle") >= 2, "{metrics}");
    assert_eq!(closed_for(&metrics, "keep_alive_timeout"), 0, "{metrics}");
}

#[tokio::test(flavor = "multi_thread")]
async fn past_max_connections_new_connections_are_closed_at_once() {
    const MAX: usize = 20;
    let (ca, _origin, mirror) = start(0, "max_connections = 20\nidle_timeout = \"30s\"").await;
    let open = |metrics: &str| sample(metrics, "provender_connections_open");

    // One connection to ask with, and MAX - 1 that only hold a place.
    let (mut send, _conn) = http2(&ca, &mirror).await;
    let tls = connector(&ca, &[b"http/1.1"]);
    let mut holders = Vec::new();
    for _ in 1..MAX {
        let held = within("handshake", connect(&tls, &mirror)).await;
        holders.push(held.expect("a connection within max_connections"));
    }
    let (_, metrics) = h2_get(&mut send, &mirror.root_url("/metrics")).await;
    let metrics = String::from_utf8(metrics).unwrap();
    assert_eq!(open(&metrics), MAX as u64, "{metrics}");
    assert_eq!(sample(&metrics, "provender_connections_max"), MAX as u64);

    // One more is closed straight away, before its TLS handshake.
    let started = Instant::now();
    let extra = tokio::time::timeout(Duration::from_secs(2), connect(&tls, &mirror)).await;
    match extra {
        Ok(Err(_)) => {}
        Ok(Ok(_)) => panic!("a connection past max_connections = {MAX} was served"),
        Err(_) => panic!("a connection past max_connections was not closed within 2 s"),
    }
    assert!(started.elapsed() < Duration::from_secs(1));

    // The established connections keep working.
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            h2_get(&mut send, &mirror.root_url(path)).await.0,
            200,
            "{path}"
        );
    }
    let mut holder = holders.pop().unwrap();
    holder
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(read_response(&mut holder, None).await.0, 200);
    holders.push(holder);

    // Once the holders leave, new connections are served again.
    drop(holders);
    let freed = poll(Duration::from_secs(5), async || {
        let (_, metrics) = h2_get(&mut send, &mirror.root_url("/metrics")).await;
        let metrics = String::from_utf8(metrics).unwrap();
        (open(&metrics) == 1).then_some(metrics)
    })
    .await
    .expect("the gauge of open connections went back to 1 once the holders left");
    assert!(closed_for(&freed, "limit") >= 1, "{freed}");
    let client = https_client(&ca, &[]);
    assert_eq!(get(&client, &mirror.root_url("/healthz")).await.status, 200);
}
