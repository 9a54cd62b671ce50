//! A fake OpenID Connect issuer over TLS on loopback, standing in for GitHub Actions', GitLab's
//! or a Kubernetes cluster's token issuer: its discovery document and key set (JWKS), with key
//! rotation, a count of key-set requests, and an outage switch. Tokens are signed here with
//! its current P-256 key (ES256), carrying whatever claims a test gives.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use ring::signature::KeyPair as _;
use serde_json::{Value, json};
use tokio_rustls::TlsAcceptor;

use super::pki::TestCa;

/// The issuer's host name, reached through provender's `connect_to`.
pub const ISSUER_HOST: &str = "issuer.example";

struct Key {
    kid: String,
    encoding: EncodingKey,
    jwk: Value,
}

struct Shared {
    /// The keys the set lists; the last one signs.
    keys: Mutex<Vec<Key>>,
    jwks_requests: AtomicUsize,
    down: AtomicBool,
    /// A `jwks_uri` to name instead of its own.
    jwks_uri: Mutex<Option<String>>,
}

/// The issuer; stops when dropped.
pub struct FakeIssuer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl FakeIssuer {
    /// Starts the issuer with one key.
    pub async fn start(ca: &TestCa) -> FakeIssuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tls = TlsAcceptor::from(ca.issue(&[ISSUER_HOST]).server_config());
        let shared = Arc::new(Shared {
            keys: Mutex::new(vec![new_key("key-1")]),
            jwks_requests: AtomicUsize::new(0),
            down: AtomicBool::new(false),
            jwks_uri: Mutex::new(None),
        });
        let serving = shared.clone();
        let server = super::serve_connections(listener, move |tcp| {
            let tls = tls.clone();
            let shared = serving.clone();
            async move {
                let Ok(stream) = tls.accept(tcp).await else {
                    return;
                };
                let service = service_fn(move |req| {
                    let shared = shared.clone();
                    async move { Ok::<_, Infallible>(answer(&shared, &req)) }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            }
        });
        FakeIssuer {
            addr,
            shared,
            server,
        }
    }

    /// Where provender connects for [`ISSUER_HOST`].
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its URL, as tokens' `iss` names it.
    pub fn url(&self) -> String {
        format!("https://{ISSUER_HOST}")
    }

    /// A token with these claims (`iss` added), signed with the current key.
    pub fn token(&self, claims: &Value) -> String {
        let mut claims = claims.clone();
        claims["iss"] = json!(self.url());
        let keys = self.shared.keys.lock().unwrap();
        let key = keys.last().unwrap();
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(key.kid.clone());
        jsonwebtoken::encode(&header, &claims, &key.encoding).unwrap()
    }

    /// The current key's JWK, as its key set publishes it.
    pub fn public_jwk(&self) -> String {
        self.shared
            .keys
            .lock()
            .unwrap()
            .last()
            .unwrap()
            .jwk
            .to_string()
    }

    /// Rotates to a new signing key; the key set lists only the new one.
    pub fn rotate(&self, kid: &str) {
        *self.shared.keys.lock().unwrap() = vec![new_key(kid)];
    }

    /// How many times the key set was fetched.
    pub fn jwks_requests(&self) -> usize {
        self.shared.jwks_requests.load(Ordering::SeqCst)
    }

    /// Names `uri` as its key set's location from now on.
    pub fn set_jwks_uri(&self, uri: &str) {
        *self.shared.jwks_uri.lock().unwrap() = Some(uri.to_string());
    }

    /// While down, every request answers 503.
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::SeqCst);
    }
}

impl Drop for FakeIssuer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn new_key(kid: &str) -> Key {
    let rng = ring::rand::SystemRandom::new();
    let alg = &ring::signature::ECDSA_P256_SHA256_FIXED_SIGNING;
    let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
    let pair = ring::signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
    let point = pair.public_key().as_ref();
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    Key {
        kid: kid.to_string(),
        encoding: EncodingKey::from_ec_der(pkcs8.as_ref()),
        jwk: json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
            "x": b64(&point[1..33]), "y": b64(&point[33..65]),
        }),
    }
}

fn answer(shared: &Shared, req: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
    let json_answer = |status: u16, body: Value| {
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap()
    };
    if shared.down.load(Ordering::SeqCst) {
        return json_answer(503, json!({ "error": "down" }));
    }
    match req.uri().path() {
        "/.well-known/openid-configuration" => json_answer(
            200,
            json!({
                "issuer": format!("https://{ISSUER_HOST}"),
                "jwks_uri": shared.jwks_uri.lock().unwrap().clone()
                    .unwrap_or_else(|| format!("https://{ISSUER_HOST}/.well-known/jwks")),
                "id_token_signing_alg_values_supported": ["ES256"],
            }),
        ),
        "/.well-known/jwks" => {
            shared.jwks_requests.fetch_add(1, Ordering::SeqCst);
            let keys: Vec<Value> = shared
                .keys
                .lock()
                .unwrap()
                .iter()
                .map(|k| k.jwk.clone())
                .collect();
            json_answer(200, json!({ "keys": keys }))
        }
        _ => json_answer(404, json!({ "error": "not found" })),
    }
}
