//! The sign-in paths under attack, against a real provender and a fake identity provider over
//! TLS ([`crate::support::issuer`], which counts every request it gets): anonymous starts and
//! forged or replayed callbacks reach the provider at most once, and are rate-limited with 429
//! and `Retry-After`; a provider answering 429 does not stop the refresh of its keys for ID
//! tokens; an unverified e-mail address gets no session; and the sign-in form is refused from
//! another origin by `Origin` when `Sec-Fetch-Site` is missing.

use std::time::Duration;

use http::StatusCode;
use serde_json::json;

use crate::support::http::{Got, get, send};
use crate::support::https_client_no_redirects;
use crate::support::issuer::FakeIssuer;
use crate::support::origin::FakeOrigin;
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror};

const DISCOVERY: &str = "/.well-known/openid-configuration";
const AUDIENCE: &str = "https://mirror.example.com";

/// A provider that knows the mirror's pages as a client.
async fn provider(ca: &TestCa) -> FakeIssuer {
    let issuer = FakeIssuer::start(ca).await;
    issuer.register_client("provender-pages", "pages-client-secret");
    issuer
}

/// A mirror signing people in at a fresh [`provider`] with [`FakeIssuer::sso_toml`]; and a client that
/// does not follow redirects.
async fn sso_mirror(ca: &TestCa) -> (FakeOrigin, FakeIssuer, TestMirror, reqwest::Client) {
    let origin = FakeOrigin::acme_foo(ca).await;
    let issuer = provider(ca).await;
    let mirror = TestMirror::start_with_toml(ca, &origin, &issuer.sso_toml()).await;
    (origin, issuer, mirror, https_client_no_redirects(ca))
}

/// Whether `got` sets a session cookie.
fn sets_session(got: &Got) -> bool {
    got.headers
        .get_all("set-cookie")
        .iter()
        .any(|c| c.to_str().unwrap().starts_with("provender_session="))
}

/// A sign-in started at the mirror: the URL the browser is sent to, and the state cookie.
async fn start(client: &reqwest::Client, mirror: &TestMirror) -> (url::Url, String) {
    let started = get(client, &mirror.url("-/sign-in/sso")).await;
    assert_eq!(started.status, StatusCode::SEE_OTHER, "{}", started.text());
    let to = url::Url::parse(started.headers["location"].to_str().unwrap()).unwrap();
    let cookie = started.headers["set-cookie"].to_str().unwrap();
    (to, cookie.split(';').next().unwrap().to_string())
}

fn state_of(to: &url::Url) -> String {
    to.query_pairs()
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v.into_owned())
        .expect("a state")
}

/// The callback with `code`, the state of `to` and `cookie`.
async fn callback(
    client: &reqwest::Client,
    mirror: &TestMirror,
    to: &url::Url,
    cookie: &str,
    code: &str,
) -> Got {
    let query = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("code", code)
        .append_pair("state", &state_of(to))
        .finish();
    let url = mirror.url(&format!("-/sign-in/callback?{query}"));
    send(&url, client.get(&url).header("cookie", cookie)).await
}

/// A whole sign-in over HTTP as `login`: started at the mirror, approved at the provider (as
/// its sign-in form does), and the provider's answer taken back to the mirror.
async fn sign_in(client: &reqwest::Client, mirror: &TestMirror, login: &str) -> Got {
    let (to, cookie) = start(client, mirror).await;
    let mut approve = to.clone();
    approve.set_path("/authorize/approve");
    approve.query_pairs_mut().append_pair("login", login);
    let approved = get(client, approve.as_str()).await;
    assert_eq!(
        approved.status,
        StatusCode::SEE_OTHER,
        "{}",
        approved.text()
    );
    let back = approved.headers["location"].to_str().unwrap().to_string();
    assert!(
        back.starts_with(&mirror.url("-/sign-in/callback")),
        "{back}"
    );
    send(&back, client.get(&back).header("cookie", cookie)).await
}

#[tokio::test(flavor = "multi_thread")]
async fn anonymous_sign_in_starts_ask_the_provider_once_and_are_bounded() {
    let ca = TestCa::new();
    let (_origin, issuer, mirror, client) = sso_mirror(&ca).await;

    let mut started = 0;
    let mut refused = Vec::new();
    for _ in 0..50 {
        let got = get(&client, &mirror.url("-/sign-in/sso?next=/-/status")).await;
        match got.status {
            StatusCode::SEE_OTHER => started += 1,
            StatusCode::TOO_MANY_REQUESTS => refused.push(got),
            other => panic!("a start answered {other}: {}", got.text()),
        }
    }
    assert_eq!(
        issuer.requests(DISCOVERY),
        1,
        "the provider's endpoints are fetched once for every start"
    );
    assert_eq!(issuer.requests("/token"), 0, "a start trades nothing");
    assert!(started >= 1, "sign-ins start");
    assert!(
        !refused.is_empty(),
        "50 starts from one address are too many"
    );
    for got in &refused {
        let wait: u64 = got.headers["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&wait), "Retry-After: {wait}");
        assert!(got.content_type().starts_with("text/html"));
        let page = got.text();
        assert!(
            page.contains("too many sign-ins from this address"),
            "{page}"
        );
    }
    // Once the address has its allowance back, a start uses the endpoints held, even while
    // the provider is down.
    issuer.set_down(true);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (to, _) = start(&client, &mirror).await;
    assert_eq!(to.path(), "/authorize");
    assert_eq!(issuer.requests(DISCOVERY), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn forged_and_replayed_callbacks_never_reach_the_token_endpoint() {
    let ca = TestCa::new();
    let (_origin, issuer, mirror, client) = sso_mirror(&ca).await;

    // An attacker's own sign-in comes back once; its cookie and state, replayed with other
    // codes, trade nothing more.
    let (to, cookie) = start(&client, &mirror).await;
    let first = callback(&client, &mirror, &to, &cookie, "code-guessed-0").await;
    assert_eq!(
        issuer.requests("/token"),
        1,
        "the first return trades its code"
    );
    assert_ne!(first.status, StatusCode::OK);
    for i in 1..=10 {
        let again = callback(&client, &mirror, &to, &cookie, &format!("code-guessed-{i}")).await;
        assert_eq!(again.status, StatusCode::FORBIDDEN, "{}", again.text());
        assert!(
            again.text().contains("already come back once"),
            "{}",
            again.text()
        );
    }
    assert_eq!(
        issuer.requests("/token"),
        1,
        "replays never reach the provider"
    );

    // Callbacks with states this server never issued: without a cookie, with another
    // sign-in's cookie, with a cookie of the attacker's making.
    let (_, other_cookie) = start(&client, &mirror).await;
    let forged_cookie = "provender_sso=eyJzdGF0ZSI6ImEifQ.AAAA".to_string();
    let mut answers = Vec::new();
    for i in 0..50 {
        let state = format!("forged-{i}");
        let url = mirror.url(&format!("-/sign-in/callback?code=c{i}&state={state}"));
        let mut req = client.get(&url);
        match i % 3 {
            0 => {}
            1 => req = req.header("cookie", &other_cookie),
            _ => req = req.header("cookie", &forged_cookie),
        }
        answers.push(send(&url, req).await.status);
    }
    assert!(
        answers
            .iter()
            .all(|s| matches!(*s, StatusCode::FORBIDDEN | StatusCode::TOO_MANY_REQUESTS)),
        "{answers:?}"
    );
    assert!(answers.contains(&StatusCode::FORBIDDEN));
    assert!(
        answers.contains(&StatusCode::TOO_MANY_REQUESTS),
        "callbacks are bounded too"
    );
    assert_eq!(
        issuer.requests("/token"),
        1,
        "forged callbacks never reach the provider"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_answering_429_does_not_stop_its_key_refreshes() {
    let ca = TestCa::new();
    let origin = FakeOrigin::acme_foo(&ca).await;
    let issuer = provider(&ca).await;
    // The same provider signs people in and issues the CI jobs' ID tokens.
    let toml = format!(
        r#"{sso}

[[auth.issuers]]
name = "ci"
issuer = "{url}"
audiences = ["{AUDIENCE}"]
claims = {{ sub = "job-*" }}
refetch_interval = "1s"
"#,
        sso = issuer.sso_toml(),
        url = issuer.url(),
    );
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_upstream: "breaker_failures = 3\nbreaker_cooldown = \"10m\"\n",
            extra_toml: &toml,
            ..Default::default()
        },
    )
    .await;
    let client = https_client_no_redirects(&ca);
    let index = mirror.url(&format!("{REGISTRY}/acme/foo/index.json"));
    let job = |issuer: &FakeIssuer| {
        let now = provender::clock::now_secs();
        issuer.token(&json!({ "sub": "job-1", "aud": AUDIENCE, "iat": now, "exp": now + 300 }))
    };
    let with_token = send(&index, client.get(&index).bearer_auth(job(&issuer))).await;
    assert_eq!(with_token.status, StatusCode::OK, "{}", with_token.text());
    let key_sets = issuer.jwks_requests();

    // Its token endpoint answers 429 to more sign-ins than open a circuit.
    issuer.throttle_token_endpoint(5);
    for i in 0..5 {
        let (to, cookie) = start(&client, &mirror).await;
        let got = callback(&client, &mirror, &to, &cookie, &format!("code-{i}")).await;
        assert_eq!(got.status, StatusCode::BAD_GATEWAY, "{}", got.text());
        assert!(got.text().contains("429"), "{}", got.text());
    }
    assert_eq!(issuer.requests("/token"), 5, "each reached the provider");

    // The provider rotates its key: a token signed with the new one makes the mirror fetch the
    // key set again, which the 429s did not stop.
    issuer.rotate("key-2");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let rotated = send(&index, client.get(&index).bearer_auth(job(&issuer))).await;
    assert_eq!(rotated.status, StatusCode::OK, "{}", rotated.text());
    assert_eq!(issuer.jwks_requests(), key_sets + 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unverified_email_address_gets_no_session() {
    let ca = TestCa::new();
    let (_origin, issuer, mirror, client) = sso_mirror(&ca).await;

    for verified in [Some(false), None] {
        issuer.set_email_verified(verified);
        let got = sign_in(&client, &mirror, "alice@acme.example").await;
        assert_eq!(
            got.status,
            StatusCode::FORBIDDEN,
            "{verified:?}: {}",
            got.text()
        );
        let page = got.text();
        assert!(page.contains("email_verified must be true"), "{page}");
        assert!(page.contains("absent counts as not verified"), "{page}");
        assert!(!sets_session(&got), "no session");
    }
    issuer.set_email_verified(Some(true));
    let got = sign_in(&client, &mirror, "alice@acme.example").await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.text());
    assert!(sets_session(&got), "a verified address signs in");
    assert_eq!(issuer.exchanges(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_sec_fetch_site_the_sign_in_form_must_come_from_this_origin() {
    let ca = TestCa::new();
    let origin = FakeOrigin::acme_foo(&ca).await;
    let token = "sign-on-token-0123456789abcdef";
    let toml = format!(
        "[auth]\ntokens = [\"{token}\"]\nurl_signing_key = \"{}\"\n",
        "k".repeat(40)
    );
    let mirror = TestMirror::start_with_toml(&ca, &origin, &toml).await;
    let client = https_client_no_redirects(&ca);
    let own = mirror.url.origin().ascii_serialization();
    let post = |origin: Option<&str>, fetch_site: Option<&str>| {
        let mut req = client
            .post(mirror.url("-/sign-in"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}&next=/-/status"));
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        if let Some(s) = fetch_site {
            req = req.header("sec-fetch-site", s);
        }
        send("sign-in", req)
    };
    let signed_in = |got: &Got| {
        got.headers
            .get_all("set-cookie")
            .iter()
            .any(|c| c.to_str().unwrap().starts_with("provender_session=e"))
    };
    for foreign in [
        "https://evil.example",
        "null",
        "https://localhost",
        &format!("http://localhost:{}", mirror.url.port().unwrap()),
    ] {
        let got = post(Some(foreign), None).await;
        assert_eq!(got.status, StatusCode::FORBIDDEN, "{foreign}");
        assert!(got.text().contains("another site"), "{}", got.text());
        assert!(!signed_in(&got));
    }
    let neither = post(None, None).await;
    assert_eq!(neither.status, StatusCode::FORBIDDEN);
    assert!(neither.text().contains("without Sec-Fetch-Site or Origin"));
    let own_origin = post(Some(&own), None).await;
    assert_eq!(
        own_origin.status,
        StatusCode::SEE_OTHER,
        "{}",
        own_origin.text()
    );
    assert!(signed_in(&own_origin));
    // A browser that sends Sec-Fetch-Site is judged by it.
    let same = post(Some("https://evil.example"), Some("same-origin")).await;
    assert_eq!(same.status, StatusCode::SEE_OTHER);
    let cross = post(Some(&own), Some("cross-site")).await;
    assert_eq!(cross.status, StatusCode::FORBIDDEN);
    // Signing out is held to the same rule.
    let out = send(
        "sign-out",
        client
            .post(mirror.url("-/sign-out"))
            .header("origin", "https://evil.example"),
    )
    .await;
    assert_eq!(out.status, StatusCode::FORBIDDEN);
}
