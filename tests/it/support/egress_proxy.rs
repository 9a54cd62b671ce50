//! An HTTP `CONNECT` proxy, like the egress proxies of networks without direct internet access.
//! It records every tunnel asked for (target and `Proxy-Authorization`), can demand
//! credentials (407 otherwise), and sends every tunnel to one address, the fake origin, whatever
//! name was asked for: it plays the proxy's DNS too.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One `CONNECT` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tunnel {
    /// `host:port` as asked for.
    pub target: String,
    /// The `Proxy-Authorization` header, if any.
    pub authorization: Option<String>,
}

#[derive(Default)]
struct State {
    tunnels: Mutex<Vec<Tunnel>>,
    /// The `Proxy-Authorization` value required, if any.
    required: Mutex<Option<String>>,
}

/// A running proxy; dropping it closes every connection.
pub struct EgressProxy {
    addr: SocketAddr,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl EgressProxy {
    /// Listens on 127.0.0.1:0; every tunnel goes to `route`.
    pub async fn start(route: SocketAddr) -> EgressProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the egress proxy");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State::default());
        let serving = state.clone();
        let task = super::serve_connections(listener, move |client| {
            serve(client, route, serving.clone())
        });
        EgressProxy { addr, state, task }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Refuses tunnels (407) unless they carry this `Proxy-Authorization` value.
    pub fn require_authorization(&self, value: &str) {
        *self.state.required.lock().unwrap() = Some(value.to_string());
    }

    /// Every tunnel asked for so far, refused ones included.
    pub fn tunnels(&self) -> Vec<Tunnel> {
        self.state.tunnels.lock().unwrap().clone()
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads the request head (up to the blank line), at most 16 KiB.
async fn read_head(client: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 16 * 1024 || client.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    String::from_utf8(head).ok()
}

async fn serve(mut client: TcpStream, route: SocketAddr, state: Arc<State>) {
    let Some(head) = read_head(&mut client).await else {
        return;
    };
    let mut lines = head.lines();
    let request = lines.next().unwrap_or_default();
    let mut parts = request.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "CONNECT" {
        let _ = client
            .write_all(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    }
    let authorization = lines.find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("proxy-authorization")
            .then(|| value.trim().to_string())
    });
    state.tunnels.lock().unwrap().push(Tunnel {
        target: target.to_string(),
        authorization: authorization.clone(),
    });
    let required = state.required.lock().unwrap().clone();
    if required.is_some() && required != authorization {
        let _ = client
            .write_all(
                b"HTTP/1.1 407 Proxy Authentication Required\r\n\
                  proxy-authenticate: Basic realm=\"egress\"\r\ncontent-length: 0\r\n\r\n",
            )
            .await;
        return;
    }
    let Ok(mut server) = TcpStream::connect(route).await else {
        let _ = client
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}
