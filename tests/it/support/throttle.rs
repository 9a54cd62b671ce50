//! A TCP proxy that shapes traffic between provender and the fake origin: it can slow the
//! origin's answers to a given rate or cut connections after some bytes, the way a real network
//! misbehaves. It works below TLS, so neither program is changed: provender's `connect_to`
//! simply points here.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
struct Shape {
    /// Bytes per second from the origin to the client; 0 = unlimited.
    rate: AtomicU64,
    /// Close a connection after this many bytes from the origin; 0 = never.
    cut_after: AtomicU64,
    connections: AtomicUsize,
}

/// A running proxy; dropping it closes every connection.
pub struct Throttle {
    addr: SocketAddr,
    shape: Arc<Shape>,
    task: tokio::task::JoinHandle<()>,
}

impl Throttle {
    /// Listens on 127.0.0.1:0 and forwards every connection to `target`.
    pub async fn start(target: SocketAddr) -> Throttle {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the throttle");
        let addr = listener.local_addr().unwrap();
        let shape = Arc::new(Shape::default());
        let counted = shape.clone();
        let task = super::serve_connections(listener, move |client| {
            counted.connections.fetch_add(1, Ordering::SeqCst);
            proxy(client, target, counted.clone())
        });
        Throttle { addr, shape, task }
    }

    /// The address to give provender as `connect_to`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Limits origin-to-client traffic to `bytes_per_sec` per connection (0: unlimited).
    pub fn set_rate(&self, bytes_per_sec: u64) {
        self.shape.rate.store(bytes_per_sec, Ordering::SeqCst);
    }

    /// Closes each connection once the origin has sent `bytes` on it (0: never).
    pub fn cut_after(&self, bytes: u64) {
        self.shape.cut_after.store(bytes, Ordering::SeqCst);
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shape.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn proxy(client: TcpStream, target: SocketAddr, shape: Arc<Shape>) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = async {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    };
    let downstream = async {
        let mut buf = vec![0u8; 8 * 1024];
        let mut sent: u64 = 0;
        loop {
            let rate = shape.rate.load(Ordering::SeqCst);
            let cut = shape.cut_after.load(Ordering::SeqCst);
            let mut want = buf.len();
            if cut > 0 {
                if sent >= cut {
                    break;
                }
                want = want.min((cut - sent) as usize);
            }
            let n = match server_read.read(&mut buf[..want]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if rate > 0 {
                tokio::time::sleep(Duration::from_secs_f64(n as f64 / rate as f64)).await;
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
            sent += n as u64;
        }
        let _ = client_write.shutdown().await;
    };
    // Either direction ending ends the connection (a cut drops both).
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
}
