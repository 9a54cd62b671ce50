//! A fake OpenID Connect issuer over TLS on loopback, standing in for GitHub Actions', GitLab's
//! or a Kubernetes cluster's token issuer: its discovery document and key set (JWKS), with key
//! rotation, a count of key-set requests, an outage switch, and a hold on key-set answers (a
//! slow issuer whose pace the test sets). Tokens are signed here with
//! its current P-256 key (ES256), carrying whatever claims a test gives.
//!
//! It is also an identity provider for people: an authorization endpoint (a sign-in form that
//! takes any login, reached by browsers at `https://localhost:<port>/authorize`) and a token
//! endpoint that trades a code for an ID token only with the PKCE verifier whose S256
//! challenge the code was issued for, the redirect URI and the client's ID and secret.
//!
//! For the sign-in paths' hostile cases ([`SignOn`]) it counts every request by path, can
//! answer its token endpoint with 429, and can issue ID tokens whose e-mail is not verified.

use std::collections::HashMap;
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
    /// Its port, for the browser-facing authorization endpoint.
    port: u16,
    /// Its host name.
    host: String,
    /// The registered client: ID and secret.
    client: Mutex<Option<(String, String)>>,
    /// Codes handed out and not yet traded.
    codes: Mutex<HashMap<String, Grant>>,
    /// Codes traded for ID tokens.
    exchanges: AtomicUsize,
    /// While true, key-set requests wait (see [`FakeIssuer::hold_key_set`]).
    key_set_hold: tokio::sync::watch::Sender<bool>,
    /// Key-set requests waiting for the hold to end.
    key_set_held: AtomicUsize,
    sign_on: SignOn,
}

/// What a code was issued for.
struct Grant {
    client_id: String,
    redirect_uri: String,
    challenge: String,
    nonce: String,
    login: String,
}

/// The issuer; stops when dropped.
pub struct FakeIssuer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl FakeIssuer {
    /// Starts the issuer at [`ISSUER_HOST`] with one key.
    pub async fn start(ca: &TestCa) -> FakeIssuer {
        Self::start_at(ca, ISSUER_HOST).await
    }

    /// Starts an issuer named `host` (reached through provender's `connect_to`) with one key.
    pub async fn start_at(ca: &TestCa, host: &str) -> FakeIssuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tls = TlsAcceptor::from(ca.issue(&[host, "localhost"]).server_config());
        let shared = Arc::new(Shared {
            keys: Mutex::new(vec![new_key("key-1")]),
            jwks_requests: AtomicUsize::new(0),
            down: AtomicBool::new(false),
            jwks_uri: Mutex::new(None),
            port: addr.port(),
            host: host.to_string(),
            client: Mutex::new(None),
            codes: Mutex::new(HashMap::new()),
            exchanges: AtomicUsize::new(0),
            key_set_hold: tokio::sync::watch::Sender::new(false),
            key_set_held: AtomicUsize::new(0),
            sign_on: SignOn::default(),
        });
        let serving = shared.clone();
        let server = super::serve_connections(listener, move |tcp| {
            let tls = tls.clone();
            let shared = serving.clone();
            async move {
                let Ok(stream) = tls.accept(tcp).await else {
                    return;
                };
                let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let shared = shared.clone();
                    async move {
                        let (head, body) = req.into_parts();
                        if head.uri.path() == "/.well-known/jwks" {
                            while_key_set_held(&shared).await;
                        }
                        let body = http_body_util::BodyExt::collect(body)
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        Ok::<_, Infallible>(answer(&shared, &Request::from_parts(head, body)))
                    }
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

    /// Where provender connects for its host.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its URL, as tokens' `iss` names it.
    pub fn url(&self) -> String {
        format!("https://{}", self.shared.host)
    }

    /// `[auth]` signing people at acme.example in here, as the client `provender-pages` (see
    /// [`register_client`](Self::register_client)), with [`host_toml`](Self::host_toml).
    pub fn sso_toml(&self) -> String {
        format!(
            r#"[auth]
url_signing_key = "{key}"

[auth.single_sign_on]
issuer = "{url}"
client_id = "provender-pages"
client_secret = "pages-client-secret"
claims = {{ email = "*@acme.example" }}

{hosts}"#,
            key = "k".repeat(40),
            url = self.url(),
            hosts = self.host_toml(),
        )
    }

    /// The `[upstream.hosts]` table that sends provender here.
    pub fn host_toml(&self) -> String {
        format!(
            "[upstream.hosts.\"{}\"]\nconnect_to = \"{}\"\n",
            self.shared.host, self.addr
        )
    }

    /// A URL on this issuer that redirects to `to`.
    pub fn redirecting_to(&self, to: &str) -> String {
        let query = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("to", to)
            .finish();
        format!("{}/redirect?{query}", self.url())
    }

    /// Its key set, at `localhost` (a loopback address) on its own port.
    pub fn key_set_on_loopback(&self) -> String {
        format!("https://localhost:{}/.well-known/jwks", self.addr.port())
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

    /// Registers the client people sign in to (its ID and secret).
    pub fn register_client(&self, id: &str, secret: &str) {
        *self.shared.client.lock().unwrap() = Some((id.to_string(), secret.to_string()));
    }

    /// How many codes were traded for ID tokens.
    pub fn exchanges(&self) -> usize {
        self.shared.exchanges.load(Ordering::SeqCst)
    }

    /// Holds every key-set request from now on until [`Self::release_key_set`].
    pub fn hold_key_set(&self) {
        self.shared.key_set_hold.send_replace(true);
    }

    /// Answers the held key-set requests, and those that come later at once.
    pub fn release_key_set(&self) {
        self.shared.key_set_hold.send_replace(false);
    }

    /// How many key-set requests are being held.
    pub fn key_set_requests_held(&self) -> usize {
        self.shared.key_set_held.load(Ordering::SeqCst)
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

/// Waits while key-set answers are held.
async fn while_key_set_held(shared: &Shared) {
    let mut hold = shared.key_set_hold.subscribe();
    if *hold.borrow_and_update() {
        shared.key_set_held.fetch_add(1, Ordering::SeqCst);
        let _ = hold.wait_for(|held| !held).await;
        shared.key_set_held.fetch_sub(1, Ordering::SeqCst);
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

fn answer(shared: &Shared, req: &Request<Bytes>) -> Response<Full<Bytes>> {
    let json_answer = |status: u16, body: Value| {
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap()
    };
    shared.sign_on.count(req.uri().path());
    if shared.down.load(Ordering::SeqCst) {
        return json_answer(503, json!({ "error": "down" }));
    }
    match req.uri().path() {
        "/.well-known/openid-configuration" => json_answer(
            200,
            json!({
                "issuer": format!("https://{}", shared.host),
                "jwks_uri": shared.jwks_uri.lock().unwrap().clone()
                    .unwrap_or_else(|| format!("https://{}/.well-known/jwks", shared.host)),
                "id_token_signing_alg_values_supported": ["ES256"],
                "authorization_endpoint": format!("https://localhost:{}/authorize", shared.port),
                "token_endpoint": format!("https://{}/token", shared.host),
                "response_types_supported": ["code"],
                "code_challenge_methods_supported": ["S256"],
            }),
        ),
        "/redirect" => Response::builder()
            .status(302)
            .header(
                "location",
                query_of(req).get("to").cloned().unwrap_or_default(),
            )
            .body(Full::new(Bytes::new()))
            .unwrap(),
        "/authorize" => authorize_form(shared, req),
        "/authorize/approve" => approve(shared, req),
        "/token" => shared
            .sign_on
            .throttled()
            .unwrap_or_else(|| exchange(shared, req)),
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

fn query_of(req: &Request<Bytes>) -> HashMap<String, String> {
    url::form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

fn text(status: u16, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('"', "&quot;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// `GET /authorize`: checks the request as a provider does, then shows a sign-in form.
fn authorize_form(shared: &Shared, req: &Request<Bytes>) -> Response<Full<Bytes>> {
    let q = query_of(req);
    let client = shared.client.lock().unwrap().clone();
    let problems = [
        (
            q.get("response_type").map(String::as_str) != Some("code"),
            "response_type",
        ),
        (
            client.as_ref().map(|c| &c.0) != q.get("client_id"),
            "client_id",
        ),
        (
            q.get("code_challenge_method").map(String::as_str) != Some("S256"),
            "code_challenge_method",
        ),
        (
            q.get("code_challenge").is_none_or(|c| c.len() != 43),
            "code_challenge",
        ),
        (q.get("state").is_none_or(String::is_empty), "state"),
        (q.get("nonce").is_none_or(String::is_empty), "nonce"),
        (
            !q.get("scope")
                .is_some_and(|s| s.split(' ').any(|w| w == "openid")),
            "scope",
        ),
        (
            !q.get("redirect_uri")
                .is_some_and(|u| u.starts_with("https://")),
            "redirect_uri",
        ),
    ];
    if let Some((_, what)) = problems.iter().find(|(bad, _)| *bad) {
        return text(
            400,
            "text/plain",
            format!("bad authorization request: {what}"),
        );
    }
    let hidden: String = [
        "client_id",
        "redirect_uri",
        "state",
        "nonce",
        "code_challenge",
    ]
    .iter()
    .map(|k| {
        format!(
            "<input type=\"hidden\" name=\"{k}\" value=\"{}\">",
            escape(&q[*k])
        )
    })
    .collect();
    text(
        200,
        "text/html; charset=utf-8",
        format!(
            "<!doctype html><html lang=\"en\"><head><title>Identity provider</title><link rel=\"icon\" href=\"data:,\"></head><body><main>\
             <h1>Sign in to the identity provider</h1>\
             <form method=\"get\" action=\"/authorize/approve\">{hidden}\
             <label for=\"login\">Login</label> <input id=\"login\" name=\"login\">\
             <button id=\"approve\" type=\"submit\">Sign in</button></form></main></body></html>"
        ),
    )
}

/// The form's answer: a code, and the browser sent back to the client with it.
fn approve(shared: &Shared, req: &Request<Bytes>) -> Response<Full<Bytes>> {
    let q = query_of(req);
    let code = format!("code-{}", fastrand::u64(..));
    let redirect_uri = q.get("redirect_uri").cloned().unwrap_or_default();
    shared.codes.lock().unwrap().insert(
        code.clone(),
        Grant {
            client_id: q.get("client_id").cloned().unwrap_or_default(),
            redirect_uri: redirect_uri.clone(),
            challenge: q.get("code_challenge").cloned().unwrap_or_default(),
            nonce: q.get("nonce").cloned().unwrap_or_default(),
            login: q.get("login").cloned().unwrap_or_default(),
        },
    );
    let mut back = url::Url::parse(&redirect_uri).unwrap();
    back.query_pairs_mut()
        .append_pair("code", &code)
        .append_pair("state", q.get("state").map_or("", String::as_str));
    Response::builder()
        .status(303)
        .header("location", back.as_str())
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// `POST /token`: a code traded once, with the verifier of its challenge, for an ID token.
fn exchange(shared: &Shared, req: &Request<Bytes>) -> Response<Full<Bytes>> {
    let refuse = |why: &str| {
        text(
            400,
            "application/json",
            json!({ "error": "invalid_grant", "error_description": why }).to_string(),
        )
    };
    if req.method() != hyper::Method::POST {
        return refuse("POST only");
    }
    let form: HashMap<String, String> = url::form_urlencoded::parse(req.body())
        .into_owned()
        .collect();
    let field = |k: &str| form.get(k).map_or("", String::as_str);
    if field("grant_type") != "authorization_code" {
        return refuse("grant_type");
    }
    let Some(grant) = shared.codes.lock().unwrap().remove(field("code")) else {
        return refuse("unknown or used code");
    };
    let (client_id, secret) = shared.client.lock().unwrap().clone().unwrap_or_default();
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(ring::digest::digest(
        &ring::digest::SHA256,
        field("code_verifier").as_bytes(),
    ));
    if field("client_id") != client_id || grant.client_id != client_id {
        return refuse("client_id");
    }
    if field("client_secret") != secret {
        return refuse("client_secret");
    }
    if field("redirect_uri") != grant.redirect_uri {
        return refuse("redirect_uri");
    }
    if challenge != grant.challenge {
        return refuse("code_verifier does not match the code_challenge");
    }
    shared.exchanges.fetch_add(1, Ordering::SeqCst);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut claims = json!({
        "iss": format!("https://{}", shared.host),
        "sub": format!("user-{}", grant.login.len()),
        "aud": client_id,
        "email": grant.login,
        "email_verified": true,
        "nonce": grant.nonce,
        "iat": now,
        "exp": now + 300,
    });
    shared.sign_on.mark_email(&mut claims);
    let keys = shared.keys.lock().unwrap();
    let key = keys.last().unwrap();
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(key.kid.clone());
    let id_token = jsonwebtoken::encode(&header, &claims, &key.encoding).unwrap();
    text(
        200,
        "application/json",
        json!({ "access_token": "opaque", "token_type": "Bearer", "expires_in": 300, "id_token": id_token })
            .to_string(),
    )
}

/// The sign-in paths' hostile cases: requests counted by path, a throttled token endpoint,
/// unverified e-mail addresses.
#[derive(Default)]
struct SignOn {
    /// Requests received, by path.
    requests: Mutex<HashMap<String, usize>>,
    /// How many more token requests answer 429.
    throttled: AtomicUsize,
    /// The `email_verified` claim of the ID tokens it issues: `true` when `None`, left out when
    /// `Some(Value::Null)`.
    email_verified: Mutex<Option<Value>>,
}

impl SignOn {
    fn count(&self, path: &str) {
        *self
            .requests
            .lock()
            .unwrap()
            .entry(path.to_string())
            .or_default() += 1;
    }

    /// A 429 with `Retry-After`, while any are left to give.
    fn throttled(&self) -> Option<Response<Full<Bytes>>> {
        self.throttled
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .ok()?;
        Some(
            Response::builder()
                .status(429)
                .header("content-type", "application/json")
                .header("retry-after", "1")
                .body(Full::new(Bytes::from(
                    json!({ "error": "slow_down" }).to_string(),
                )))
                .unwrap(),
        )
    }

    fn mark_email(&self, claims: &mut Value) {
        match self.email_verified.lock().unwrap().clone() {
            None => {}
            Some(Value::Null) => {
                claims.as_object_mut().unwrap().remove("email_verified");
            }
            Some(verified) => claims["email_verified"] = verified,
        }
    }
}

impl FakeIssuer {
    /// How many requests reached `path` (`/token`, `/.well-known/openid-configuration`, ...).
    pub fn requests(&self, path: &str) -> usize {
        self.shared
            .sign_on
            .requests
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// The next `n` token requests answer 429 (with `Retry-After: 1`).
    pub fn throttle_token_endpoint(&self, n: usize) {
        self.shared.sign_on.throttled.store(n, Ordering::SeqCst);
    }

    /// The `email_verified` claim of the ID tokens it issues from now on (`None`: left out).
    pub fn set_email_verified(&self, verified: Option<bool>) {
        *self.shared.sign_on.email_verified.lock().unwrap() =
            Some(verified.map_or(Value::Null, Value::Bool));
    }
}
