//! A TCP proxy that shapes traffic between provender and a dependency (an origin, a release
//! host, an issuer, a centre, the object store): it can slow answers to a given rate or cut
//! connections after some bytes, the way a real network misbehaves, and inject the faults of a
//! dependency that hangs or dies ([`Fault`]), switched while it runs. It works below TLS, so
//! neither program is changed: provender's `connect_to` (or the store's endpoint) simply points
//! here.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does to connections, from the moment it is set (connections already open
/// included, as when the dependency itself changes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything (within [`Throttle::set_rate`] and [`Throttle::cut_after`]).
    Pass,
    /// Nothing listens: connections are refused, and open ones are reset.
    Refuse,
    /// Accept connections and never answer: nothing is forwarded either way, as from a
    /// process stopped with SIGSTOP. Lifting it lets held connections go on.
    Blackhole,
    /// Forward the first `after` bytes of each connection's answers, then nothing more on it
    /// (the connection stays open): a dependency stopping mid-stream.
    Stall { after: u64 },
    /// Forward answers at this many bytes a second per connection.
    Slow(u64),
    /// Accept connections and reset them at once; open ones are reset at their next bytes.
    Reset,
}

#[derive(Default)]
struct Shape {
    /// Bytes per second from the dependency to the client; 0 = unlimited.
    rate: AtomicU64,
    /// Close a connection after this many bytes from the dependency; 0 = never.
    cut_after: AtomicU64,
    connections: AtomicUsize,
}

/// A running proxy; dropping it closes every connection.
pub struct Throttle {
    addr: SocketAddr,
    shape: Arc<Shape>,
    fault: watch::Sender<Fault>,
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
        let (fault, faults) = watch::channel(Fault::Pass);
        let task = tokio::spawn(listen(listener, addr, target, shape.clone(), faults));
        Throttle {
            addr,
            shape,
            fault,
            task,
        }
    }

    /// The address to give provender as `connect_to`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Limits dependency-to-client traffic to `bytes_per_sec` per connection (0: unlimited).
    pub fn set_rate(&self, bytes_per_sec: u64) {
        self.shape.rate.store(bytes_per_sec, Ordering::SeqCst);
    }

    /// Closes each connection once the dependency has sent `bytes` on it (0: never).
    pub fn cut_after(&self, bytes: u64) {
        self.shape.cut_after.store(bytes, Ordering::SeqCst);
    }

    /// Switches to `fault` (see [`Fault`]); [`Fault::Pass`] ends it.
    pub fn set_fault(&self, fault: Fault) {
        self.fault.send_replace(fault);
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

/// Accepts connections while no [`Fault::Refuse`] is set; under one, the port is closed and
/// opened again (the same port) once it is lifted.
async fn listen(
    listener: TcpListener,
    addr: SocketAddr,
    target: SocketAddr,
    shape: Arc<Shape>,
    mut faults: watch::Receiver<Fault>,
) {
    let mut listener = Some(listener);
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let refused = *faults.borrow_and_update() == Fault::Refuse;
        if refused {
            listener = None;
        } else if listener.is_none() {
            // Reopen the same port; a moment's retry if the old socket lingers.
            for _ in 0..100 {
                if let Ok(l) = TcpListener::bind(addr).await {
                    listener = Some(l);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        tokio::select! {
            accepted = async { listener.as_ref().unwrap().accept().await }, if listener.is_some() => {
                match accepted {
                    Ok((client, _)) => {
                        shape.connections.fetch_add(1, Ordering::SeqCst);
                        conns.spawn(proxy(client, target, shape.clone(), faults.clone()));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
            changed = faults.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// Closes `stream` with a reset rather than a FIN.
fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

/// Waits until the fault lets a connection go on: `true` to forward, `false` to reset it.
async fn until_passable(faults: &mut watch::Receiver<Fault>) -> bool {
    loop {
        match *faults.borrow_and_update() {
            Fault::Refuse | Fault::Reset => return false,
            Fault::Blackhole => {}
            Fault::Pass | Fault::Stall { .. } | Fault::Slow(_) => return true,
        }
        if faults.changed().await.is_err() {
            return false;
        }
    }
}

async fn proxy(
    client: TcpStream,
    target: SocketAddr,
    shape: Arc<Shape>,
    mut faults: watch::Receiver<Fault>,
) {
    if !until_passable(&mut faults).await {
        reset(&client);
        return;
    }
    let Ok(server) = TcpStream::connect(target).await else {
        reset(&client);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let upstream = pump(client_read, server_write, None, faults.clone());
    let downstream = pump(server_read, client_write, Some(&shape), faults);
    // Either direction ending ends the connection (a cut drops both).
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
}

/// Copies `from` to `to` under the current fault; `shape` is given for the direction from the
/// dependency, which rates, cuts and stalls apply to.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    shape: Option<&Shape>,
    mut faults: watch::Receiver<Fault>,
) {
    let mut buf = vec![0u8; 8 * 1024];
    let mut sent: u64 = 0;
    loop {
        if !until_passable(&mut faults).await {
            reset(from.as_ref());
            return;
        }
        let fault = *faults.borrow();
        let mut want = buf.len();
        let mut rate = 0;
        if let Some(shape) = shape {
            rate = match fault {
                Fault::Slow(rate) => rate,
                _ => shape.rate.load(Ordering::SeqCst),
            };
            let cut = shape.cut_after.load(Ordering::SeqCst);
            if cut > 0 {
                if sent >= cut {
                    break;
                }
                want = want.min((cut - sent) as usize);
            }
            if let Fault::Stall { after } = fault {
                if sent >= after {
                    // Mid-stream silence: the connection stays open, nothing more comes.
                    std::future::pending::<()>().await;
                }
                want = want.min((after - sent) as usize);
            }
            if rate > 0 {
                // Small reads, so that a slow rate trickles instead of bursting.
                want = want.min((rate as usize / 10).max(1));
            }
        }
        let n = tokio::select! {
            read = from.read(&mut buf[..want]) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            // A new fault applies at once, even to a connection waiting for bytes.
            changed = faults.changed() => {
                if changed.is_err() {
                    return;
                }
                continue;
            }
        };
        if rate > 0 {
            tokio::time::sleep(Duration::from_secs_f64(n as f64 / rate as f64)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
        sent += n as u64;
    }
    let _ = to.shutdown().await;
}
