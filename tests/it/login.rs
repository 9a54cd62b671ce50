//! `terraform login` against provender (`[auth.cli_login]`), the person signing in through
//! single sign-on at a fake identity provider ([`crate::support::issuer`]):
//! - the real `terraform login`, its browser headless Chromium, stores a token that then
//!   serves the real `terraform init` through the network mirror, a `git clone` through the git
//!   door and a release download, each with nothing but that token; the registry facade, the
//!   module registry and the OCI registry take it too, as a bearer token or as the password of
//!   Basic credentials, and every door refuses a request without one;
//! - expired tokens, tokens revoked by their person (API) or by an operator (`provender
//!   tokens`), and another mirror's tokens are refused at every door, with a 401 that says to
//!   run `terraform login <host>` again;
//! - a person outside the claim rules gets no code;
//! - the token endpoint trades a code once, only with its verifier, client and redirect URI,
//!   and the authorization endpoint never redirects to anything but a loopback listener, nor
//!   answers a consent form from another site;
//! - "Your tokens" lists a person's tokens and revokes them in the browser.
//!
//! Where no real CLI is needed, the CLI's side is played here: a PKCE pair, a listener on
//! loopback for the redirect, the token request; the person's browser is either Chromium or,
//! for protocol checks, an [`Agent`] that follows the redirects over HTTP keeping cookies.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use http::StatusCode;
use serde_json::Value;
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::pages::check_page;
use crate::support::browser::Browser;
use crate::support::cli::{self, path_str};
use crate::support::http::{Got, get, send};
use crate::support::issuer::FakeIssuer;
use crate::support::origin::{FakeOrigin, ModuleSpec, ProviderSpec};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror, config_toml};
use crate::support::static_server::StaticServer;
use crate::support::tf_config::{self, FOO};
use crate::support::{TERRAFORM, Terraform, TerraformOutput, https_client_no_redirects, poll};

/// A person the claim rule (`email = "*@acme.example"`) lets in.
const ALICE: &str = "alice@acme.example";
/// Another one.
const BOB: &str = "bob@acme.example";
/// Someone it refuses.
const MALLORY: &str = "mallory@evil.example";
/// The client ID every login uses (the CLIs send what `login.v1` names).
const CLIENT_ID: &str = "terraform-cli";
/// The git origin's host name (reached through `connect_to`).
const GIT_HOST: &str = "git.example.test";
/// How long the CLI's side waits for a browser step or a command.
const STEP: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// The mirror

/// What a test's mirror has besides single sign-on and `terraform login`.
#[derive(Default)]
struct Spec {
    /// Keys of `[auth.cli_login]`.
    cli_login: &'static str,
    /// More `[cache]` keys and tables (an object store).
    cache: String,
    /// Whole tables appended to the configuration.
    more_toml: String,
    /// Keys of `[upstream]`.
    upstream: &'static str,
    /// The clock the server judges expiry by.
    clock: Option<Arc<provender::clock::ManualClock>>,
    /// A git repository at the origin (`acme/terraform-aws-net.git`), and the git door open
    /// to its host.
    git: bool,
}

/// A mirror with single sign-on at a fake provider and `terraform login` on, in front of a fake
/// origin serving `acme/foo` 1.0.0 for this machine.
struct Setup {
    ca: TestCa,
    origin: FakeOrigin,
    issuer: FakeIssuer,
    mirror: TestMirror,
    /// Trusts the test CA, follows no redirect.
    client: reqwest::Client,
    /// The configuration's extra parts, to write the same configuration for the operator
    /// commands.
    extra_toml: String,
    upstream: &'static str,
    /// Whether the origin serves a module (and its git repository).
    git: bool,
}

/// The provider's `[auth]` (people at acme.example), releases protected, and `terraform login`
/// on with `cli_login` keys.
fn login_toml(issuer: &FakeIssuer, cli_login: &str) -> String {
    let sso = issuer.sso_toml();
    let sso = sso.replacen("[auth]\n", "[auth]\nprotect_releases = true\n", 1);
    assert!(sso.contains("protect_releases"), "{sso}");
    format!("{sso}\n[auth.cli_login]\n{cli_login}\n")
}

impl Setup {
    async fn start(spec: Spec) -> Setup {
        Setup::start_with_ca(TestCa::new(), spec).await
    }

    /// [`start`](Self::start) with certificates from `ca` (which other origins share).
    async fn start_with_ca(ca: TestCa, spec: Spec) -> Setup {
        let (os, arch) = tf_config::local_platform();
        let providers = vec![ProviderSpec::new("acme", "foo", &["1.0.0"], &[(os, arch)])];
        let (origin, git) = if spec.git {
            let modules = vec![ModuleSpec::new("acme", "net", "aws", &["1.0.0"])];
            let origin =
                FakeOrigin::start_with_modules(&ca, &[REGISTRY, GIT_HOST], providers, modules)
                    .await;
            let git = format!(
                "[git]\nallowed_hosts = [\"{GIT_HOST}\"]\n\n[upstream.hosts.\"{GIT_HOST}\"]\nconnect_to = \"{}\"\n",
                origin.addr()
            );
            (origin, git)
        } else {
            (
                FakeOrigin::start(&ca, &[REGISTRY], providers).await,
                String::new(),
            )
        };
        let issuer = FakeIssuer::start(&ca).await;
        issuer.register_client("provender-pages", "pages-client-secret");
        let extra_toml = format!(
            "{}\n{git}\n{}",
            login_toml(&issuer, spec.cli_login),
            spec.more_toml
        );
        let mirror = TestMirror::start_with(
            &ca,
            &origin,
            MirrorOptions {
                extra_toml: &extra_toml,
                extra_cache: &spec.cache,
                extra_upstream: spec.upstream,
                clock: spec.clock,
                ..Default::default()
            },
        )
        .await;
        let client = https_client_no_redirects(&ca);
        Setup {
            ca,
            origin,
            issuer,
            mirror,
            client,
            extra_toml,
            upstream: spec.upstream,
            git: spec.git,
        }
    }

    /// `localhost:<port>`: the host `terraform login` is given and stores the token under.
    fn host(&self) -> String {
        host_of(&self.mirror)
    }

    /// A person whose browser is played over HTTP.
    fn person(&self, login: &str) -> Agent<'_> {
        Agent::new(&self.client, &self.mirror, login)
    }

    /// The network mirror's version list of `acme/foo`, with `token` as a bearer token.
    async fn index(&self, token: Option<&str>) -> Got {
        index_at(&self.client, &self.mirror, token).await
    }

    /// Checks that `token` is refused at the network mirror as one to log in again for, and
    /// at every other door.
    async fn assert_refused(&self, token: &str, what: &str) {
        let got = self.index(Some(token)).await;
        assert_refused_at(&got, &self.host(), what);
        for (door, status) in self.doors(Some(token)).await {
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}, at {door}");
        }
    }

    /// What each door answers `token` (as bearer, and as the password of Basic credentials
    /// with any user name), or no credentials: the network mirror, the registry facade, the
    /// OCI registry (also its token endpoint), and the module registry when the origin has
    /// modules.
    async fn doors(&self, token: Option<&str>) -> Vec<(String, StatusCode)> {
        let mut urls = vec![
            self.mirror.url(&format!("{REGISTRY}/acme/foo/index.json")),
            self.mirror
                .url(&format!("v1/providers/{REGISTRY}/acme/foo/versions")),
            self.mirror
                .root_url(&format!("/v2/{REGISTRY}/acme/foo/tags/list")),
        ];
        if self.git {
            urls.push(
                self.mirror
                    .url(&format!("v1/modules/{REGISTRY}/acme/net/aws/versions")),
            );
        }
        let oci_token = format!(
            "{}?service=provender&scope=repository:{REGISTRY}/acme/foo:pull",
            self.mirror.root_url("/v2/token")
        );
        let mut answers = Vec::new();
        for url in &urls {
            let req = self.client.get(url);
            let req = match token {
                Some(token) => req.bearer_auth(token),
                None => req,
            };
            answers.push((format!("{url} (bearer)"), send(url, req).await.status));
        }
        for url in urls.iter().chain([&oci_token]) {
            let req = self.client.get(url);
            let req = match token {
                Some(token) => req.basic_auth("anyone", Some(token)),
                None => req,
            };
            answers.push((format!("{url} (basic)"), send(url, req).await.status));
        }
        answers
    }

    /// `GET -/api/v1/tokens` with `token` as bearer: the caller's tokens.
    async fn listed_tokens(&self, token: &str) -> Vec<Value> {
        let url = self.mirror.url("-/api/v1/tokens");
        let got = send(&url, self.client.get(&url).bearer_auth(token)).await;
        assert_eq!(got.status, StatusCode::OK, "{}", got.text());
        got.json()["tokens"]
            .as_array()
            .expect("a list of tokens")
            .clone()
    }

    /// `POST -/api/v1/tokens/<id>/revoke` with `token` as bearer.
    async fn revoke(&self, id: &str, token: &str) -> Got {
        let url = self.mirror.url(&format!("-/api/v1/tokens/{id}/revoke"));
        send(&url, self.client.post(&url).bearer_auth(token)).await
    }

    /// This mirror's configuration as a file for the operator commands (same cache, same
    /// `[auth]`), in `dir`.
    fn operator_config(&self, dir: &Path) -> String {
        let toml = config_toml(
            &self.ca,
            dir,
            &self.mirror.cache_dir,
            "127.0.0.1:0",
            self.origin.addr(),
            &MirrorOptions {
                extra_toml: &self.extra_toml,
                extra_upstream: self.upstream,
                ..Default::default()
            },
        );
        let path = dir.join("provender.toml");
        std::fs::write(&path, toml).unwrap();
        path_str(&path).to_string()
    }
}

fn host_of(mirror: &TestMirror) -> String {
    format!("localhost:{}", mirror.url.port().unwrap())
}

async fn index_at(client: &reqwest::Client, mirror: &TestMirror, token: Option<&str>) -> Got {
    let url = mirror.url(&format!("{REGISTRY}/acme/foo/index.json"));
    let mut req = client.get(&url);
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    send(&url, req).await
}

/// A 401 whose JSON error tells the person to run `terraform login <host>` again.
fn assert_refused_at(got: &Got, host: &str, what: &str) {
    assert_eq!(
        got.status,
        StatusCode::UNAUTHORIZED,
        "{what}: {}",
        got.text()
    );
    let message = got.message();
    assert!(
        message.contains(&format!("terraform login {host}")),
        "{what}: the 401 does not say to run `terraform login {host}`: {}",
        got.text()
    );
}

/// The ID a token's records and pages name it by: `pvt_<id>.<secret>`.
fn token_id(token: &str) -> &str {
    token
        .strip_prefix("pvt_")
        .and_then(|t| t.split_once('.'))
        .map(|(id, _)| id)
        .unwrap_or_else(|| panic!("not a person token: {token}"))
}

/// Whether `token` looks like `pvt_<32 hex>.<64 hex>`.
fn is_person_token(token: &str) -> bool {
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    token
        .strip_prefix("pvt_")
        .and_then(|t| t.split_once('.'))
        .is_some_and(|(id, secret)| hex(id, 32) && hex(secret, 64))
}

// ---------------------------------------------------------------------------------------------
// The CLI's side of the login protocol

/// A PKCE pair and a state, as the CLI makes them.
struct Pkce {
    verifier: String,
    challenge: String,
    state: String,
}

impl Pkce {
    fn new() -> Pkce {
        let random = |n: usize| -> String {
            (0..n)
                .map(|_| format!("{:02x}", fastrand::u8(..)))
                .collect()
        };
        let verifier = random(32);
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(
            ring::digest::digest(&ring::digest::SHA256, verifier.as_bytes()),
        );
        Pkce {
            verifier,
            challenge,
            state: random(16),
        }
    }
}

/// The redirect URI a CLI listening on `port` sends.
fn redirect_uri(port: u16) -> String {
    format!("http://localhost:{port}/login")
}

/// The authorization request a CLI listening on `port` sends its browser to, with `change`
/// applied to its parameters (to make it wrong).
fn authorize_url_with(
    mirror: &TestMirror,
    port: u16,
    pkce: &Pkce,
    change: impl FnOnce(&mut Vec<(&'static str, String)>),
) -> String {
    let mut params = vec![
        ("response_type", "code".to_string()),
        ("client_id", CLIENT_ID.to_string()),
        ("redirect_uri", redirect_uri(port)),
        ("state", pkce.state.clone()),
        ("code_challenge", pkce.challenge.clone()),
        ("code_challenge_method", "S256".to_string()),
    ];
    change(&mut params);
    let query = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(params)
        .finish();
    format!("{}?{query}", mirror.url("-/login/authorize"))
}

fn authorize_url(mirror: &TestMirror, port: u16, pkce: &Pkce) -> String {
    authorize_url_with(mirror, port, pkce, |_| {})
}

/// The token request's fields for `code`, as the CLI sends them.
fn token_request(code: &str, port: u16, verifier: &str) -> Vec<(&'static str, String)> {
    vec![
        ("grant_type", "authorization_code".to_string()),
        ("code", code.to_string()),
        ("redirect_uri", redirect_uri(port)),
        ("client_id", CLIENT_ID.to_string()),
        ("code_verifier", verifier.to_string()),
    ]
}

/// `POST -/login/token` with `fields`, as the CLI sends it (a form, no credentials).
async fn exchange(client: &reqwest::Client, mirror: &TestMirror, fields: &[(&str, String)]) -> Got {
    let url = mirror.url("-/login/token");
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields.iter().map(|(k, v)| (*k, v.as_str())))
        .finish();
    send(
        &url,
        client
            .post(&url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body),
    )
    .await
}

/// The access token of a successful token answer, checked.
fn access_token(got: &Got) -> String {
    assert_eq!(got.status, StatusCode::OK, "{}", got.text());
    let doc = got.json();
    let token = doc["access_token"].as_str().unwrap_or_default().to_string();
    assert!(is_person_token(&token), "{doc}");
    assert_eq!(doc["token_type"], "bearer", "{doc}");
    assert!(doc["expires_in"].as_u64().is_some(), "{doc}");
    token
}

/// A 400 with OAuth's `invalid_grant`.
fn assert_invalid_grant(got: &Got, what: &str) {
    assert_eq!(
        got.status,
        StatusCode::BAD_REQUEST,
        "{what}: {}",
        got.text()
    );
    assert_eq!(
        got.json()["error"],
        "invalid_grant",
        "{what}: {}",
        got.text()
    );
}

/// The code and state a redirect to the CLI's listener on `port` carries.
fn code_in_redirect(got: &Got, port: u16) -> (String, String) {
    assert_eq!(got.status, StatusCode::SEE_OTHER, "{}", got.text());
    let location = got.headers["location"].to_str().unwrap();
    let to = url::Url::parse(location).unwrap();
    assert_eq!(
        (to.scheme(), to.host_str(), to.port(), to.path()),
        ("http", Some("localhost"), Some(port), "/login"),
        "{location}"
    );
    let query: BTreeMap<String, String> = to.query_pairs().into_owned().collect();
    (
        query.get("code").cloned().unwrap_or_default(),
        query.get("state").cloned().unwrap_or_default(),
    )
}

/// A stand-in for the CLI's listener on 127.0.0.1: notes every request target and answers 200.
struct Listener {
    port: u16,
    targets: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Listener {
    async fn start() -> Listener {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = tcp.local_addr().unwrap().port();
        let targets = Arc::new(Mutex::new(Vec::new()));
        let noted = targets.clone();
        let task = crate::support::serve_connections(tcp, move |mut conn| {
            let noted = noted.clone();
            async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 << 10 {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head);
                if let Some(target) = head.split(' ').nth(1) {
                    noted.lock().unwrap().push(target.to_string());
                }
                let page = "<!doctype html><title>CLI</title><p>The code reached the CLI.</p>";
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
                    page.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
                let _ = conn.shutdown().await;
            }
        });
        Listener {
            port,
            targets,
            task,
        }
    }

    /// The `(code, state)` of every request to `/login` so far.
    fn logins(&self) -> Vec<(String, String)> {
        self.targets
            .lock()
            .unwrap()
            .iter()
            .filter_map(|t| {
                let url = url::Url::parse(&format!("http://localhost{t}")).ok()?;
                (url.path() == "/login").then(|| {
                    let q: BTreeMap<String, String> = url.query_pairs().into_owned().collect();
                    (
                        q.get("code").cloned().unwrap_or_default(),
                        q.get("state").cloned().unwrap_or_default(),
                    )
                })
            })
            .collect()
    }

    /// Waits for the `n`th request to `/login` (from 1); its code, once its state is checked.
    async fn code(&self, n: usize, state: &str) -> String {
        let (code, got_state) = poll(STEP, async || self.logins().get(n - 1).cloned())
            .await
            .unwrap_or_else(|| panic!("no code reached the listener: {:?}", self.targets));
        assert_eq!(got_state, state, "the state comes back unchanged");
        assert!(!code.is_empty());
        code
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---------------------------------------------------------------------------------------------
// The person's browser, over HTTP

/// A person's browser played over HTTP: keeps cookies, follows redirects one at a time, signs
/// in at the fake provider as `login` and submits the consent form as a browser on the
/// mirror's page does.
struct Agent<'a> {
    client: &'a reqwest::Client,
    mirror: &'a TestMirror,
    login: String,
    cookies: BTreeMap<String, String>,
}

/// The consent page's form: where it posts and what.
struct Form {
    action: String,
    fields: Vec<(String, String)>,
}

impl<'a> Agent<'a> {
    fn new(client: &'a reqwest::Client, mirror: &'a TestMirror, login: &str) -> Agent<'a> {
        Agent {
            client,
            mirror,
            login: login.to_string(),
            cookies: BTreeMap::new(),
        }
    }

    fn with_cookies(&self, mut req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        if !self.cookies.is_empty() {
            let jar: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            req = req.header("cookie", jar.join("; "));
        }
        req
    }

    fn keep_cookies(&mut self, got: &Got) {
        for set in got.headers.get_all("set-cookie") {
            let pair = set.to_str().unwrap().split(';').next().unwrap_or_default();
            if let Some((name, value)) = pair.split_once('=') {
                if value.is_empty() {
                    self.cookies.remove(name);
                } else {
                    self.cookies.insert(name.to_string(), value.to_string());
                }
            }
        }
    }

    async fn get(&mut self, url: &str) -> Got {
        let got = send(url, self.with_cookies(self.client.get(url))).await;
        self.keep_cookies(&got);
        got
    }

    /// Posts `fields` to `url` as a form on the mirror's own page does (`Sec-Fetch-Site: site`).
    async fn post_form(&mut self, url: &str, fields: &[(String, String)], site: &str) -> Got {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let req = self
            .client
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", self.mirror.url.origin().ascii_serialization())
            .header("sec-fetch-site", site)
            .body(body);
        let got = send(url, self.with_cookies(req)).await;
        self.keep_cookies(&got);
        got
    }

    /// Goes to `url` and follows redirects and pages that refresh at once to another (signing
    /// in at the provider on the way) until an answer that is neither, or a redirect that
    /// leaves for a plain-HTTP listener: the URL that gave it, and it.
    async fn visit(&mut self, url: &str) -> (url::Url, Got) {
        let mut url = url::Url::parse(url).unwrap();
        for _ in 0..12 {
            let got = self.get(url.as_str()).await;
            let location = if got.status.is_redirection() {
                got.headers["location"].to_str().unwrap().to_string()
            } else if let Some(refresh) = meta_refresh(&got) {
                refresh
            } else {
                return (url, got);
            };
            let mut next = url.join(&location).unwrap();
            if next.scheme() == "http" {
                return (url, got);
            }
            if next.path() == "/authorize" && next.port() != self.mirror.url.port() {
                // The provider's sign-in form, filled in and sent as its page does.
                next.set_path("/authorize/approve");
                next.query_pairs_mut().append_pair("login", &self.login);
            }
            url = next;
        }
        panic!("more than 12 redirects, last to {url}");
    }

    /// The consent page for `authorize` (signing in first when needed).
    async fn consent_page(&mut self, authorize: &str) -> Form {
        let (url, page) = self.visit(authorize).await;
        assert_eq!(page.status, StatusCode::OK, "{url}: {}", page.text());
        let html = page.text();
        assert!(
            html.contains("<title>Sign the CLI in · provender</title>"),
            "{url} is not the consent page:\n{html}"
        );
        consent_form(&url, &html)
    }

    /// Allows the login `authorize` asks for: the answer to the consent form.
    async fn allow(&mut self, authorize: &str) -> Got {
        let mut form = self.consent_page(authorize).await;
        form.fields.retain(|(k, _)| k != "decision");
        form.fields.push(("decision".into(), "allow".into()));
        self.post_form(&form.action.clone(), &form.fields, "same-origin")
            .await
    }

    /// A token for this person, obtained as `terraform login` does.
    async fn token(&mut self) -> String {
        let pkce = Pkce::new();
        let port = 20000 + fastrand::u16(..10000);
        let allowed = self.allow(&authorize_url(self.mirror, port, &pkce)).await;
        let (code, state) = code_in_redirect(&allowed, port);
        assert_eq!(state, pkce.state);
        let got = exchange(
            self.client,
            self.mirror,
            &token_request(&code, port, &pkce.verifier),
        )
        .await;
        access_token(&got)
    }
}

/// Where a page that refreshes at once (`<meta http-equiv="refresh" content="0;url=...">`)
/// sends the browser.
fn meta_refresh(got: &Got) -> Option<String> {
    if got.status != StatusCode::OK {
        return None;
    }
    let html = got.text();
    let meta = html
        .match_indices("<meta")
        .map(|(at, _)| attributes(&html[at + "<meta".len()..]))
        .find(|a| {
            a.get("http-equiv")
                .is_some_and(|v| v.eq_ignore_ascii_case("refresh"))
        })?;
    let content = meta.get("content")?;
    let (delay, target) = content.split_once(';')?;
    let target = target.trim();
    let target = target
        .strip_prefix("url=")
        .or_else(|| target.strip_prefix("URL="))?;
    (delay.trim() == "0").then(|| target.trim_matches(['"', '\'']).to_string())
}

/// The form holding the button `#allow` in `html` (the page at `page`): its action and fields
/// (hidden inputs, and the button's own name and value).
fn consent_form(page: &url::Url, html: &str) -> Form {
    let button = html
        .find("id=\"allow\"")
        .unwrap_or_else(|| panic!("no #allow on the consent page:\n{html}"));
    let start = html[..button]
        .rfind("<form")
        .unwrap_or_else(|| panic!("#allow is in no form:\n{html}"));
    let end = html[button..]
        .find("</form>")
        .map_or(html.len(), |e| button + e);
    let form = &html[start..end];
    let tags = |name: &str| -> Vec<BTreeMap<String, String>> {
        form.match_indices(&format!("<{name}"))
            .map(|(at, _)| attributes(&form[at + name.len() + 1..]))
            .collect()
    };
    let action = tags("form")[0].get("action").cloned().unwrap_or_default();
    let mut fields = Vec::new();
    for input in tags("input") {
        if input.get("type").map(String::as_str) == Some("hidden")
            && let Some(name) = input.get("name")
        {
            fields.push((
                name.clone(),
                input.get("value").cloned().unwrap_or_default(),
            ));
        }
    }
    for button in tags("button") {
        if button.get("id").map(String::as_str) == Some("allow")
            && let Some(name) = button.get("name")
        {
            fields.push((
                name.clone(),
                button.get("value").cloned().unwrap_or_default(),
            ));
        }
    }
    Form {
        action: page.join(&action).unwrap().to_string(),
        fields,
    }
}

/// The attributes of the tag whose text (after its name) starts `rest`, entities decoded.
fn attributes(rest: &str) -> BTreeMap<String, String> {
    let tag = &rest[..rest.find('>').unwrap_or(rest.len())];
    let mut out = BTreeMap::new();
    let mut s = tag.trim_start();
    while !s.is_empty() {
        let name_end = s
            .find(|c: char| c == '=' || c.is_whitespace() || c == '/')
            .unwrap_or(s.len());
        let name = s[..name_end].to_ascii_lowercase();
        s = &s[name_end..];
        let mut value = String::new();
        if let Some(after) = s.strip_prefix('=') {
            let (quoted, tail) = match after.chars().next() {
                Some(q @ ('"' | '\'')) => {
                    let body = &after[1..];
                    let close = body.find(q).unwrap_or(body.len());
                    (&body[..close], &body[(close + 1).min(body.len())..])
                }
                _ => {
                    let close = after.find(char::is_whitespace).unwrap_or(after.len());
                    (&after[..close], &after[close..])
                }
            };
            value = decode_entities(quoted);
            s = tail;
        } else if name.is_empty() {
            s = &s[1.min(s.len())..];
        }
        if !name.is_empty() {
            out.insert(name, value);
        }
        s = s.trim_start();
    }
    out
}

fn decode_entities(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(end) = rest.find(';') else { break };
        let entity = &rest[1..end];
        let decoded = match entity {
            "amp" => Some('&'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            "lt" => Some('<'),
            "gt" => Some('>'),
            _ => entity
                .strip_prefix("#x")
                .or_else(|| entity.strip_prefix("#X"))
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

// ---------------------------------------------------------------------------------------------
// The person's browser, Chromium

/// Waits until the browser shows a loaded page whose URL path ends with `path`; the URL.
async fn arrives_at(browser: &Browser, path: &str) -> url::Url {
    let reached = poll(STEP, async || {
        let url = browser.client.current_url().await.ok()?;
        let ready = browser
            .run("return document.readyState;", vec![])
            .await
            .as_str()
            .map(str::to_string);
        (url.path().ends_with(path) && ready.as_deref() == Some("complete")).then_some(url)
    })
    .await;
    match reached {
        Some(url) => url,
        None => panic!(
            "the browser stayed at {}, not at …{path}",
            browser.client.current_url().await.unwrap()
        ),
    }
}

/// Signs in as `login` on the provider's form the browser shows.
async fn sign_in_at_provider(browser: &Browser, issuer: &FakeIssuer, login: &str) {
    let url = arrives_at(browser, "/authorize").await;
    assert_eq!(
        url.port(),
        Some(issuer.addr().port()),
        "the provider's sign-in form: {url}"
    );
    browser.find("#login").await.send_keys(login).await.unwrap();
    browser.find("#approve").await.click().await.unwrap();
}

/// The consent page is shown: its title checked, and axe and the console too when `check` names
/// the page.
async fn on_consent_page(browser: &Browser, mirror: &TestMirror, check: Option<&str>) {
    arrives_at(browser, "-/login/authorize").await;
    assert_eq!(
        browser.client.title().await.unwrap(),
        "Sign the CLI in · provender"
    );
    if let Some(name) = check {
        check_page(browser, mirror, name).await;
    }
}

/// A token for the person signed in in `browser` (signing in as `login` first, if given),
/// obtained with the browser through the consent page and `listener` as the CLI's listener;
/// `check` names the consent page for [`check_page`].
async fn token_in_browser(
    browser: &Browser,
    setup: &Setup,
    listener: &Listener,
    login: Option<&str>,
    check: Option<&str>,
) -> String {
    let pkce = Pkce::new();
    let before = listener.logins().len();
    browser
        .goto(&authorize_url(&setup.mirror, listener.port, &pkce))
        .await;
    if let Some(login) = login {
        sign_in_at_provider(browser, &setup.issuer, login).await;
    }
    on_consent_page(browser, &setup.mirror, check).await;
    browser.find("#allow").await.click().await.unwrap();
    let code = listener.code(before + 1, &pkce.state).await;
    let got = exchange(
        &setup.client,
        &setup.mirror,
        &token_request(&code, listener.port, &pkce.verifier),
    )
    .await;
    access_token(&got)
}

// ---------------------------------------------------------------------------------------------
// The real CLIs

/// The real `terraform login <host>` in `terraform`'s HOME, answering "yes", its browser a
/// script that only notes the URL it is given and returns at once.
struct TerraformLogin {
    child: tokio::process::Child,
    opened: PathBuf,
    stdout: std::fs::File,
    stderr: std::fs::File,
    host: String,
    _bin: TempDir,
}

impl TerraformLogin {
    async fn start(terraform: &Terraform, host: &str) -> TerraformLogin {
        let bin = tempfile::Builder::new()
            .prefix("provender-browser-")
            .tempdir()
            .unwrap();
        let opened = bin.path().join("opened");
        let script = bin.path().join("xdg-open");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nprintf '%s\\n' \"$1\" >> '{}'\nexit 0\n",
                opened.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let path = format!(
            "{}:{}",
            bin.path().display(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
        );
        // Where terraform keeps its credentials: it saves into this directory without making
        // it (any other command, or its update check, has made it on a person's computer).
        std::fs::create_dir_all(terraform.home().join(".terraform.d")).unwrap();
        let stdout = tempfile::tempfile().unwrap();
        let stderr = tempfile::tempfile().unwrap();
        let mut child = tokio::process::Command::new(TERRAFORM)
            .args(["login", "-no-color", host])
            .env_clear()
            .env("PATH", path)
            .env("HOME", terraform.home())
            .env("SSL_CERT_FILE", terraform.ca_file())
            .env("SSL_CERT_DIR", terraform.home().join("empty-cert-dir"))
            .env("CHECKPOINT_DISABLE", "1")
            .stdin(Stdio::piped())
            .stdout(stdout.try_clone().unwrap())
            .stderr(stderr.try_clone().unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {TERRAFORM}: {e}"));
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"yes\n").await.unwrap();
        drop(stdin);
        TerraformLogin {
            child,
            opened,
            stdout,
            stderr,
            host: host.to_string(),
            _bin: bin,
        }
    }

    fn output(&self) -> String {
        format!(
            "--- stdout ---\n{}\n--- stderr ---\n{}",
            read_whole(&self.stdout),
            read_whole(&self.stderr)
        )
    }

    /// The URL terraform gave its browser.
    async fn browser_url(&mut self) -> String {
        let opened = poll(STEP, async || {
            let text = std::fs::read_to_string(&self.opened).ok()?;
            // A whole line: the script has written it.
            let line = text.split_inclusive('\n').next()?;
            line.strip_suffix('\n').map(str::to_string)
        })
        .await;
        match opened {
            Some(url) => url,
            None => {
                let _ = self.child.start_kill();
                panic!("terraform opened no browser:\n{}", self.output())
            }
        }
    }

    /// Waits for terraform to end.
    async fn finish(mut self) -> TerraformOutput {
        let status = match tokio::time::timeout(STEP * 2, self.child.wait()).await {
            Ok(status) => status.unwrap(),
            Err(_) => {
                let _ = self.child.start_kill();
                panic!("terraform login still waits:\n{}", self.output());
            }
        };
        TerraformOutput {
            args: vec!["login".into(), "-no-color".into(), self.host.clone()],
            status,
            stdout: read_whole(&self.stdout),
            stderr: read_whole(&self.stderr),
        }
    }
}

/// What a command wrote to `file` so far.
fn read_whole(file: &std::fs::File) -> String {
    let mut file = file.try_clone().unwrap();
    std::io::Seek::rewind(&mut file).unwrap();
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut bytes).unwrap();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A `terraform` whose CLI configuration is `cli_config` in `$HOME/.terraformrc`, where a person
/// keeps it: terraform reads the credentials `terraform login` stores only along with its
/// configuration directory, which `TF_CLI_CONFIG_FILE` would replace (an empty one is unset).
fn terraform_at_home(ca: &TestCa, cli_config: &str) -> Terraform {
    let terraform = Terraform::new(ca, cli_config).env("TF_CLI_CONFIG_FILE", "");
    std::fs::write(terraform.home().join(".terraformrc"), cli_config).unwrap();
    terraform
}

/// A HOME for `git` trusting the test CA, with `netrc` as its `.netrc` when given.
fn git_home(ca: &TestCa, netrc: Option<&str>) -> TempDir {
    let home = tempfile::Builder::new()
        .prefix("provender-git-home-")
        .tempdir()
        .unwrap();
    let ca_file = ca.write_ca(home.path());
    std::fs::write(
        home.path().join(".gitconfig"),
        format!("[http]\n\tsslCAInfo = {}\n", ca_file.display()),
    )
    .unwrap();
    if let Some(netrc) = netrc {
        let path = home.path().join(".netrc");
        std::fs::write(&path, netrc).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
    }
    home
}

/// `git args` in `home` (also its working directory), without prompts: success and output.
async fn git(home: &Path, args: &[&str]) -> (bool, String) {
    crate::git::run_git(home, home, args).await
}

// ---------------------------------------------------------------------------------------------
// The tests

#[tokio::test(flavor = "multi_thread")]
async fn terraform_login_through_single_sign_on_then_init_git_and_releases_with_the_stored_token() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let zip = crate::release_pages::terraform_origin(&work.path().join("origin"), &["1.11.4"]);
    let releases = StaticServer::start(&ca, &work.path().join("origin"));
    let setup = Setup::start_with_ca(
        ca,
        Spec {
            more_toml: crate::releases::releases_toml(&work.path().join("keys"), &releases, false),
            upstream: "allow_private_networks = true",
            git: true,
            ..Default::default()
        },
    )
    .await;
    let mirror = &setup.mirror;
    let host = setup.host();
    let cli_config = tf_config::network_mirror(mirror.url.as_str());

    // terraform reads `login.v1` and sends its browser to the mirror's authorization endpoint.
    let terraform = terraform_at_home(&setup.ca, &cli_config);
    let mut login = TerraformLogin::start(&terraform, &host).await;
    let opened = login.browser_url().await;
    assert!(
        opened.starts_with(&mirror.url("-/login/authorize?")),
        "{opened}"
    );
    let query: BTreeMap<String, String> = url::Url::parse(&opened)
        .unwrap()
        .query_pairs()
        .into_owned()
        .collect();
    assert_eq!(query["client_id"], CLIENT_ID);
    assert_eq!(query["code_challenge_method"], "S256");
    let listening = url::Url::parse(&query["redirect_uri"]).unwrap();

    // The person signs in with single sign-on, allows the login, and the browser lands on
    // terraform's own listener, which takes the code.
    let browser = Browser::start().await;
    browser.goto(&opened).await;
    sign_in_at_provider(&browser, &setup.issuer, ALICE).await;
    on_consent_page(&browser, mirror, None).await;
    browser.find("#allow").await.click().await.unwrap();
    let landed = arrives_at(&browser, "/login").await;
    assert_eq!(
        (landed.scheme(), landed.port()),
        ("http", listening.port()),
        "{landed}"
    );
    let out = login.finish().await;
    out.assert_success();
    assert!(
        out.stdout.contains("Success!"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    browser.close().await;

    // The token it stored, under the mirror's host.
    let credentials = terraform.home().join(".terraform.d/credentials.tfrc.json");
    let stored: Value = serde_json::from_slice(&std::fs::read(&credentials).unwrap()).unwrap();
    let token = stored["credentials"][&host]["token"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(is_person_token(&token), "{stored}");

    // `terraform init` through the network mirror with nothing but that stored token; from
    // another HOME, without it, the mirror answers 401 (which terraform reports so whether or
    // not it sent credentials).
    let dir = tf_config::root_module(FOO);
    terraform.init(dir.path()).await.assert_success();
    let elsewhere = tf_config::root_module(FOO);
    let refused = terraform_at_home(&setup.ca, &cli_config)
        .init(elsewhere.path())
        .await;
    refused.assert_failure();
    let said = refused
        .combined()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        said.contains(&format!(
            "host {host} rejected the given authentication credentials"
        )),
        "{said}"
    );
    // The other doors take the token too (the module registry among them).
    for (door, status) in setup.doors(Some(&token)).await {
        assert_eq!(status, StatusCode::OK, "the stored token, at {door}");
    }
    for (door, status) in setup.doors(None).await {
        assert_eq!(status, StatusCode::UNAUTHORIZED, "no token, at {door}");
    }
    // The person's list shows the token, used.
    let used = poll(Duration::from_secs(10), async || {
        let listed = setup.listed_tokens(&token).await;
        listed
            .into_iter()
            .find(|t| t["id"] == token_id(&token) && !t["last_used"].is_null())
    })
    .await
    .expect("the token's use is recorded");
    assert_eq!(used["state"], "active", "{used}");
    assert!(used["person"].as_str().unwrap().contains(ALICE), "{used}");

    // `git clone` through the git door, the token the password in `.netrc` (any user name).
    let repo = mirror.url(&format!("git/{GIT_HOST}/git/acme/terraform-aws-net.git"));
    let anonymous = git_home(&setup.ca, None);
    let (ok, text) = git(anonymous.path(), &["clone", "--quiet", &repo, "repo"]).await;
    assert!(!ok, "cloned without credentials: {text}");
    let home = git_home(
        &setup.ca,
        Some(&format!(
            "machine localhost\nlogin anyone\npassword {token}\n"
        )),
    );
    let (ok, text) = git(home.path(), &["clone", "--quiet", &repo, "repo"]).await;
    assert!(ok, "{text}");
    let (ok, tagged) = git(home.path(), &["-C", "repo", "rev-parse", "v1.0.0^{commit}"]).await;
    assert!(ok, "{tagged}");
    assert_eq!(
        tagged.trim(),
        setup.origin.git_commit("acme", "net", "aws", "1.0.0")
    );

    // A release download with the token as Basic credentials' password.
    let release = mirror.url("releases/terraform/1.11.4/terraform_1.11.4_linux_amd64.zip");
    assert_eq!(
        get(&setup.client, &release).await.status,
        StatusCode::UNAUTHORIZED
    );
    let got = send(
        &release,
        setup
            .client
            .get(&release)
            .basic_auth("installer", Some(&token)),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.text());
    assert!(got.body == zip, "the release's zip, as signed");
}

#[tokio::test(flavor = "multi_thread")]
async fn expired_revoked_and_other_mirror_tokens_are_refused() {
    let clock = provender::clock::ManualClock::at(provender::clock::now_secs());
    let setup = Setup::start(Spec {
        cli_login: "token_ttl = \"1h\"",
        clock: Some(clock.clone()),
        ..Default::default()
    })
    .await;
    let mut alice = setup.person(ALICE);
    let expiring = alice.token().await;
    let by_person = alice.token().await;
    let by_operator = alice.token().await;
    let mut bob = setup.person(BOB);
    let bobs = [bob.token().await, bob.token().await];
    for token in [&expiring, &by_person, &by_operator, &bobs[0], &bobs[1]] {
        assert_eq!(setup.index(Some(token)).await.status, StatusCode::OK);
    }

    // Each person lists their own tokens, which last `token_ttl`.
    let listed = setup.listed_tokens(&expiring).await;
    let ids: std::collections::BTreeSet<&str> =
        listed.iter().map(|t| t["id"].as_str().unwrap()).collect();
    let alices: std::collections::BTreeSet<&str> = [&expiring, &by_person, &by_operator]
        .into_iter()
        .map(|t| token_id(t))
        .collect();
    assert_eq!(ids, alices, "{listed:#?}");
    for t in &listed {
        assert_eq!(t["state"], "active", "{t}");
        assert!(t["person"].as_str().unwrap().contains(ALICE), "{t}");
        let lifetime = t["expires"].as_u64().unwrap() - t["created"].as_u64().unwrap();
        assert_eq!(lifetime, 3600, "{t}");
    }
    let bob_person = setup.listed_tokens(&bobs[0]).await[0]["person"]
        .as_str()
        .unwrap()
        .to_string();

    // An OCI client's registry token, traded for the token about to be revoked: good for the
    // repository it names only.
    let trade_url = format!(
        "{}?service=provender&scope=repository:{REGISTRY}/acme/foo:pull",
        setup.mirror.root_url("/v2/token")
    );
    let traded = send(
        &trade_url,
        setup
            .client
            .get(&trade_url)
            .basic_auth("tofu", Some(&by_person)),
    )
    .await;
    assert_eq!(traded.status, StatusCode::OK, "{}", traded.text());
    let registry_token = traded.json()["token"].as_str().unwrap().to_string();
    let tags_url = setup
        .mirror
        .root_url(&format!("/v2/{REGISTRY}/acme/foo/tags/list"));
    let tags = async |token: &str| {
        send(&tags_url, setup.client.get(&tags_url).bearer_auth(token))
            .await
            .status
    };
    assert_eq!(tags(&registry_token).await, StatusCode::OK);

    // Revoked by its person through the API: refused at once, and so is what it was traded for.
    let revoked = setup.revoke(token_id(&by_person), &expiring).await;
    assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.text());
    setup
        .assert_refused(&by_person, "revoked through the API")
        .await;
    assert_eq!(tags(&registry_token).await, StatusCode::UNAUTHORIZED);
    // Someone else's token is not another person's to revoke.
    let not_theirs = setup.revoke(token_id(&by_operator), &bobs[0]).await;
    assert_eq!(
        not_theirs.status,
        StatusCode::NOT_FOUND,
        "{}",
        not_theirs.text()
    );
    assert_eq!(setup.index(Some(&by_operator)).await.status, StatusCode::OK);

    // Revoked by an operator: one token by its ID, then all of a person's.
    let dir = tempfile::tempdir().unwrap();
    let config = setup.operator_config(dir.path());
    let all = cli::provender(&["tokens", "list", "--config", &config]).await;
    all.ok();
    for token in [&expiring, &by_person, &by_operator, &bobs[0], &bobs[1]] {
        assert!(all.stdout.contains(token_id(token)), "{}", all.out());
    }
    let only_bob = cli::provender(&[
        "tokens",
        "list",
        "--config",
        &config,
        "--person",
        &bob_person,
    ])
    .await;
    only_bob.ok();
    assert!(
        bobs.iter().all(|t| only_bob.stdout.contains(token_id(t)))
            && alices.iter().all(|id| !only_bob.stdout.contains(id)),
        "{}",
        only_bob.out()
    );
    cli::provender(&[
        "tokens",
        "revoke",
        token_id(&by_operator),
        "--config",
        &config,
    ])
    .await
    .ok();
    cli::provender(&[
        "tokens",
        "revoke",
        "--person",
        &bob_person,
        "--config",
        &config,
    ])
    .await
    .ok();
    // Another process's revocation reaches the running server within seconds (of its clock).
    clock.advance(Duration::from_secs(120));
    for token in [&by_operator, &bobs[0], &bobs[1]] {
        poll(Duration::from_secs(20), async || {
            let status = setup.index(Some(token)).await.status;
            (status == StatusCode::UNAUTHORIZED).then_some(())
        })
        .await
        .expect("an operator's revocation is seen within seconds");
        setup.assert_refused(token, "revoked by an operator").await;
    }
    assert_eq!(setup.index(Some(&expiring)).await.status, StatusCode::OK);

    // A token of another mirror (same provider, same person, even the same signing key).
    let other =
        TestMirror::start_with_toml(&setup.ca, &setup.origin, &login_toml(&setup.issuer, "")).await;
    let foreign = Agent::new(&setup.client, &other, ALICE).token().await;
    assert_eq!(
        index_at(&setup.client, &other, Some(&foreign)).await.status,
        StatusCode::OK
    );
    setup.assert_refused(&foreign, "another mirror's").await;

    // Past `token_ttl`: expired, as bearer and as Basic credentials' password.
    clock.advance(Duration::from_secs(3600));
    setup.assert_refused(&expiring, "expired").await;
    let index = setup.mirror.url(&format!("{REGISTRY}/acme/foo/index.json"));
    let basic = send(
        &index,
        setup
            .client
            .get(&index)
            .basic_auth("anyone", Some(&expiring)),
    )
    .await;
    assert_refused_at(&basic, &setup.host(), "expired, as a password");
    // The person's session still lists them all, each in its state.
    let url = setup.mirror.url("-/api/v1/tokens");
    let got = send(&url, alice.with_cookies(setup.client.get(&url))).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.text());
    let states: BTreeMap<String, String> = got.json()["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap().to_string(),
                t["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let expected: BTreeMap<String, String> = [
        (&expiring, "expired"),
        (&by_person, "revoked"),
        (&by_operator, "revoked"),
    ]
    .into_iter()
    .map(|(t, s)| (token_id(t).to_string(), s.to_string()))
    .collect();
    assert_eq!(states, expected);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_outside_the_claim_rules_gets_no_token() {
    let setup = Setup::start(Spec::default()).await;
    let listener = Listener::start().await;
    let pkce = Pkce::new();
    let authorize = authorize_url(&setup.mirror, listener.port, &pkce);

    // The provider vouches for mallory; the claim rule refuses her, and says so.
    let browser = Browser::start().await;
    browser.goto(&authorize).await;
    sign_in_at_provider(&browser, &setup.issuer, MALLORY).await;
    let refused_at = arrives_at(&browser, "-/sign-in/callback").await;
    let said = browser.text("main").await;
    assert!(
        said.contains("You may not sign in here"),
        "{refused_at}: {said}"
    );
    assert_eq!(
        setup.issuer.exchanges(),
        1,
        "the provider's code was traded"
    );
    // She has no session: the same request sends her to the provider again, not to a consent
    // page.
    browser.goto(&authorize).await;
    sign_in_at_provider(&browser, &setup.issuer, MALLORY).await;
    arrives_at(&browser, "-/sign-in/callback").await;
    browser.close().await;
    assert!(
        listener.targets.lock().unwrap().is_empty(),
        "something reached the CLI's listener: {:?}",
        listener.targets
    );

    // Over HTTP likewise: the redirects end at the refusal, none towards a listener.
    let mut mallory = setup.person(MALLORY);
    let (url, got) = mallory.visit(&authorize).await;
    assert!(
        !got.status.is_redirection() && url.path().ends_with("-/sign-in/callback"),
        "{url}: {} {}",
        got.status,
        got.text()
    );
    assert!(
        got.text().contains("You may not sign in here"),
        "{}",
        got.text()
    );
    assert!(
        !mallory.cookies.contains_key("provender_session"),
        "{:?}",
        mallory.cookies
    );
}

/// `authorize_url` with `key` set to `value`, or left out when `None`.
fn authorize_url_changing(
    mirror: &TestMirror,
    port: u16,
    pkce: &Pkce,
    key: &str,
    value: Option<&str>,
) -> String {
    authorize_url_with(mirror, port, pkce, |params| {
        params.retain(|(k, _)| *k != key);
        if let Some(value) = value {
            let key = params_key(key);
            params.push((key, value.to_string()));
        }
    })
}

/// The `'static` name of an authorization request parameter.
fn params_key(key: &str) -> &'static str {
    [
        "response_type",
        "client_id",
        "redirect_uri",
        "state",
        "code_challenge",
        "code_challenge_method",
    ]
    .into_iter()
    .find(|k| *k == key)
    .unwrap_or_else(|| panic!("no parameter {key}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_token_endpoint_refuses_replayed_codes_wrong_verifiers_and_foreign_redirects() {
    let setup = Setup::start(Spec {
        cli_login: "token_ttl = \"2h\"",
        ..Default::default()
    })
    .await;
    let mirror = &setup.mirror;
    let client = &setup.client;
    let port = 10000 + fastrand::u16(..50000);

    // Discovery, open to anyone, names the endpoints.
    let discovery = get(client, &mirror.root_url("/.well-known/terraform.json")).await;
    assert_eq!(discovery.status, StatusCode::OK, "{}", discovery.text());
    let login = &discovery.json()["login.v1"];
    assert_eq!(login["client"], CLIENT_ID, "{login}");
    assert_eq!(login["grant_types"], serde_json::json!(["authz_code"]));
    // Relative URLs are resolved against the discovery document's, as the CLIs do.
    let discovery_url = url::Url::parse(&mirror.root_url("/.well-known/terraform.json")).unwrap();
    let endpoint = |key: &str| {
        let named = login[key].as_str().unwrap_or_default();
        discovery_url
            .join(named)
            .map(String::from)
            .unwrap_or_default()
    };
    assert_eq!(
        endpoint("authz"),
        mirror.url("-/login/authorize"),
        "{login}"
    );
    assert_eq!(endpoint("token"), mirror.url("-/login/token"), "{login}");

    // Requests that cannot be answered get an error page and never a redirect: before
    // sign-in, after it, and as a consent form sent back with the allow button.
    let mut alice = setup.person(ALICE);
    let pkce = Pkce::new();
    alice
        .consent_page(&authorize_url(mirror, port, &pkce))
        .await;
    let bad = [
        (
            "redirect_uri",
            Some(format!("https://localhost:{port}/login")),
        ),
        (
            "redirect_uri",
            Some(format!("http://evil.example:{port}/login")),
        ),
        (
            "redirect_uri",
            Some(format!("http://localhost.evil.example:{port}/login")),
        ),
        (
            "redirect_uri",
            Some(format!("http://localhost:{port}/elsewhere")),
        ),
        (
            "redirect_uri",
            Some(format!("http://localhost:{port}/login/more")),
        ),
        (
            "redirect_uri",
            Some(format!("http://someone@localhost:{port}/login")),
        ),
        ("redirect_uri", None),
        ("client_id", Some("someone-else".to_string())),
        ("client_id", None),
        ("code_challenge_method", Some("plain".to_string())),
        ("code_challenge_method", None),
        ("code_challenge", None),
    ];
    for (key, value) in &bad {
        let what = format!("{key} = {value:?}");
        let url = authorize_url_changing(mirror, port, &pkce, key, value.as_deref());
        for signed_in in [false, true] {
            let got = if signed_in {
                alice.get(&url).await
            } else {
                get(client, &url).await
            };
            assert_eq!(
                got.status,
                StatusCode::BAD_REQUEST,
                "{what} (signed in: {signed_in}): {}",
                got.text()
            );
            assert!(got.headers.get("location").is_none(), "{what}");
        }
        let mut fields: Vec<(String, String)> = url::Url::parse(&url)
            .unwrap()
            .query_pairs()
            .into_owned()
            .collect();
        fields.push(("decision".into(), "allow".into()));
        let posted = alice
            .post_form(&mirror.url("-/login/authorize"), &fields, "same-origin")
            .await;
        assert_eq!(
            posted.status,
            StatusCode::BAD_REQUEST,
            "{what}: {}",
            posted.text()
        );
        assert!(posted.headers.get("location").is_none(), "{what}");
    }
    // A consent form from another site, or a cancel, sends no code anywhere.
    let mut form = alice
        .consent_page(&authorize_url(mirror, port, &pkce))
        .await;
    form.fields.retain(|(k, _)| k != "decision");
    let mut allow = form.fields.clone();
    allow.push(("decision".into(), "allow".into()));
    let cross = alice.post_form(&form.action, &allow, "cross-site").await;
    assert_eq!(cross.status, StatusCode::FORBIDDEN, "{}", cross.text());
    let mut cancel = form.fields.clone();
    cancel.push(("decision".into(), "cancel".into()));
    let cancelled = alice.post_form(&form.action, &cancel, "same-origin").await;
    assert!(
        cancelled.headers.get("location").is_none(),
        "a cancel redirects: {:?}",
        cancelled.headers
    );

    // Codes, each for its own PKCE pair.
    let mut code_for = async |pkce: &Pkce| {
        let allowed = alice.allow(&authorize_url(mirror, port, pkce)).await;
        let (code, state) = code_in_redirect(&allowed, port);
        assert_eq!(state, pkce.state, "the state comes back unchanged");
        code
    };
    let (first, second, third, fourth) = (Pkce::new(), Pkce::new(), Pkce::new(), Pkce::new());
    let first_code = code_for(&first).await;
    let second_code = code_for(&second).await;
    let third_code = code_for(&third).await;
    let fourth_code = code_for(&fourth).await;

    // A wrong verifier (another pair's), another redirect URI, another client, no code.
    let wrong_verifier = exchange(
        client,
        mirror,
        &token_request(&second_code, port, &first.verifier),
    )
    .await;
    assert_invalid_grant(&wrong_verifier, "a wrong verifier");
    let other_redirect = exchange(
        client,
        mirror,
        &token_request(&third_code, port + 1, &third.verifier),
    )
    .await;
    assert_invalid_grant(&other_redirect, "another redirect URI");
    let mut other_client = token_request(&fourth_code, port, &fourth.verifier);
    other_client[3].1 = "someone-else".into();
    let other_client = exchange(client, mirror, &other_client).await;
    assert_eq!(
        other_client.status,
        StatusCode::BAD_REQUEST,
        "{}",
        other_client.text()
    );
    let forged = exchange(
        client,
        mirror,
        &token_request("not-a-code-of-this-mirror", port, &first.verifier),
    )
    .await;
    assert_invalid_grant(&forged, "a forged code");

    // The right verifier gets a token lasting `token_ttl`, once.
    let traded = exchange(
        client,
        mirror,
        &token_request(&first_code, port, &first.verifier),
    )
    .await;
    let token = access_token(&traded);
    assert_eq!(traded.json()["expires_in"], 7200);
    for (door, status) in setup.doors(Some(&token)).await {
        assert_eq!(status, StatusCode::OK, "the new token, at {door}");
    }
    for (door, status) in setup.doors(None).await {
        assert_eq!(status, StatusCode::UNAUTHORIZED, "no token, at {door}");
    }
    let replayed = exchange(
        client,
        mirror,
        &token_request(&first_code, port, &first.verifier),
    )
    .await;
    assert_invalid_grant(&replayed, "a replayed code");

    // A listener named by its address, 127.0.0.1, is as good as `localhost`.
    let by_address = Pkce::new();
    let redirect = format!("http://127.0.0.1:{port}/login");
    let url = authorize_url_changing(mirror, port, &by_address, "redirect_uri", Some(&redirect));
    let allowed = alice.allow(&url).await;
    assert_eq!(allowed.status, StatusCode::SEE_OTHER, "{}", allowed.text());
    let back = url::Url::parse(allowed.headers["location"].to_str().unwrap()).unwrap();
    assert_eq!(
        format!("{}{}", back.origin().ascii_serialization(), back.path()),
        redirect
    );
    let code = back
        .query_pairs()
        .find(|(k, _)| k == "code")
        .map(|(_, v)| v.into_owned())
        .expect("a code");
    let mut fields = token_request(&code, port, &by_address.verifier);
    fields[2].1 = redirect;
    let other_token = access_token(&exchange(client, mirror, &fields).await);

    // Only those two trades made tokens.
    let listed: std::collections::BTreeSet<String> = setup
        .listed_tokens(&token)
        .await
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    let traded: std::collections::BTreeSet<String> = [&token, &other_token]
        .into_iter()
        .map(|t| token_id(t).to_string())
        .collect();
    assert_eq!(listed, traded);
    // And the metrics say so.
    let metrics_url = setup.mirror.root_url("/metrics");
    let metrics = send(&metrics_url, client.get(&metrics_url).bearer_auth(&token)).await;
    assert_eq!(metrics.status, StatusCode::OK);
    assert!(
        metrics
            .text()
            .contains("provender_person_tokens_total{event=\"issued\"} 2"),
        "{}",
        metrics.text()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_tokens_page_lists_and_revokes_in_the_browser() {
    let setup = Setup::start(Spec::default()).await;
    let listener = Listener::start().await;
    let browser = Browser::start().await;
    // Two logins: the first signs in with single sign-on, the second finds the session.
    let first = token_in_browser(
        &browser,
        &setup,
        &listener,
        Some(ALICE),
        Some("login-consent"),
    )
    .await;
    let second = token_in_browser(&browser, &setup, &listener, None, None).await;
    assert_ne!(first, second);
    for token in [&first, &second] {
        assert_eq!(setup.index(Some(token)).await.status, StatusCode::OK);
    }

    // The start page shows the command to run.
    browser.goto(setup.mirror.url.as_str()).await;
    let start = browser.text("main").await;
    let command = format!("terraform login {}", setup.host());
    assert!(start.contains(&command), "no `{command}` in:\n{start}");

    // "Your tokens": one row per token, with where it came from and what asked for it.
    browser.goto(&setup.mirror.url("-/tokens")).await;
    assert_eq!(
        browser.client.title().await.unwrap(),
        "Your tokens · provender"
    );
    let mut shown = Vec::new();
    for row in browser.find_all("#tokens tr[data-token-id]").await {
        let id = row.attr("data-token-id").await.unwrap().unwrap_or_default();
        let text = row.text().await.unwrap();
        assert!(
            text.contains(CLIENT_ID) && text.contains("127.0.0.1"),
            "{id}: {text}"
        );
        shown.push(id);
    }
    shown.sort();
    let mut ids = vec![token_id(&first).to_string(), token_id(&second).to_string()];
    ids.sort();
    assert_eq!(shown, ids);
    check_page(&browser, &setup.mirror, "tokens").await;

    // Revoking the first with its button: refused from then on, the other still good.
    let row = |id: &str| format!("#tokens tr[data-token-id='{id}']");
    browser
        .click_to_page(&format!("{} button.revoke", row(token_id(&first))))
        .await;
    setup.assert_refused(&first, "revoked in the browser").await;
    assert_eq!(setup.index(Some(&second)).await.status, StatusCode::OK);
    assert!(
        browser
            .find_all(&format!("{} button.revoke", row(token_id(&first))))
            .await
            .is_empty(),
        "a revoked token still offers its revoke button"
    );
    assert_eq!(
        browser
            .find_all(&format!("{} button.revoke", row(token_id(&second))))
            .await
            .len(),
        1
    );
    check_page(&browser, &setup.mirror, "tokens-revoked").await;
    browser.close().await;
    let states: BTreeMap<String, String> = setup
        .listed_tokens(&second)
        .await
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap().to_string(),
                t["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(states[token_id(&first)], "revoked");
    assert_eq!(states[token_id(&second)], "active");
}

#[tokio::test(flavor = "multi_thread")]
async fn on_an_object_store_every_replica_accepts_a_token_and_sees_its_revocation() {
    let garage = crate::support::garage::Garage::start("provender-login");
    let dirs = tempfile::tempdir().unwrap();
    let cache_of = |name: &str| {
        let dir = dirs.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        garage.cache_toml(&dir, "mirror")
    };
    let setup = Setup::start(Spec {
        cache: cache_of("a"),
        ..Default::default()
    })
    .await;
    let other_cache = cache_of("b");
    let other = TestMirror::start_with(
        &setup.ca,
        &setup.origin,
        MirrorOptions {
            extra_toml: &setup.extra_toml,
            extra_cache: &other_cache,
            ..Default::default()
        },
    )
    .await;
    // A token made at one replica is good at the other, which reads its record from the store.
    let mut alice = setup.person(ALICE);
    let token = alice.token().await;
    let at_other = index_at(&setup.client, &other, Some(&token)).await;
    assert_eq!(at_other.status, StatusCode::OK, "{}", at_other.text());
    // Revoked at the first, it is refused there at once and at the other within seconds.
    let revoked = setup.revoke(token_id(&token), &token).await;
    assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.text());
    assert_eq!(
        setup.index(Some(&token)).await.status,
        StatusCode::UNAUTHORIZED
    );
    let refused = crate::support::poll(Duration::from_secs(20), async || {
        let got = index_at(&setup.client, &other, Some(&token)).await;
        (got.status == StatusCode::UNAUTHORIZED).then_some(got)
    })
    .await
    .expect("the other replica refuses the revoked token within its record cache's 10 s");
    assert_refused_at(&refused, &host_of(&other), "revoked at another replica");
    // Nothing of the token's secret is in the bucket: the record holds its digest.
    let secret = token.split('.').nth(1).unwrap();
    let record = garage_object(&garage, &format!("auth/tokens/{}.json", token_id(&token))).await;
    assert!(record.contains("secret_sha256"), "{record}");
    assert!(!record.contains(secret), "{record}");
}

/// An object under `garage`'s `mirror` prefix, as text.
async fn garage_object(garage: &crate::support::garage::Garage, key: &str) -> String {
    let storage = provender::storage::ObjectStorage::new(&garage.settings("mirror")).unwrap();
    let bytes =
        provender::storage::Storage::read(&storage, &provender::storage::Key::parse(key).unwrap())
            .await
            .unwrap()
            .expect("the object is in the bucket");
    String::from_utf8(bytes.to_vec()).unwrap()
}
