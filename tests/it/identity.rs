//! Workload identity: clients presenting an OpenID Connect ID token from a configured issuer
//! (a fake one over TLS, see [`crate::support::issuer`]) instead of one of the mirror's tokens.
//! The real `terraform init` installs through the mirror with a GitHub-Actions-shaped token and
//! is refused with an expired one, one for another audience, one from another issuer and one
//! that fails a claim rule; GitLab CI's and Kubernetes' tokens pass by their own claims; hostile
//! tokens are refused; the issuer's keys are fetched once, again on rotation (never once per
//! request), never from a loopback address (named or redirected to), and an issuer outage locks
//! out nobody whose key is cached, and a slow answer from the issuer holds up only the tokens
//! that need its new keys. Every door that takes a token takes an ID token, the OCI registry's
//! token endpoint included. A sign-in session is accepted only by the server it was issued
//! for, not by another deployment sharing the key.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use base64::Engine as _;
use http::StatusCode;
use serde_json::{Value, json};

use crate::support::http::send;
use crate::support::issuer::FakeIssuer;
use crate::support::origin::{FakeOrigin, ProviderSpec};
use crate::support::pki::TestCa;
use crate::support::provender::{REGISTRY, TestMirror};
use crate::support::tf_config::{self, FOO};
use crate::support::{Terraform, https_client, https_client_no_redirects};

const AUDIENCE: &str = "https://mirror.example.com";

/// A GitHub Actions job's claims (its real claim set), valid for five minutes.
fn github(owner: &str) -> Value {
    let now = provender::clock::now_secs();
    json!({
        "jti": "0b4a1f0c-6a0e-4c5b-9a51-6f1b2d0c9e11",
        "sub": format!("repo:{owner}/infra:ref:refs/heads/main"),
        "aud": AUDIENCE,
        "ref": "refs/heads/main",
        "sha": "d6a3c8f4e2b1a09876543210fedcba9876543210",
        "repository": format!("{owner}/infra"),
        "repository_owner": owner,
        "repository_owner_id": "1234567",
        "repository_visibility": "private",
        "repository_id": "7654321",
        "actor": "octocat",
        "actor_id": "583231",
        "workflow": "plan",
        "workflow_ref": format!("{owner}/infra/.github/workflows/plan.yml@refs/heads/main"),
        "event_name": "push",
        "ref_type": "branch",
        "job_workflow_ref": format!("{owner}/infra/.github/workflows/plan.yml@refs/heads/main"),
        "runner_environment": "github-hosted",
        "run_id": "9876543210",
        "run_number": "42",
        "run_attempt": "1",
        "iat": now,
        "nbf": now,
        "exp": now + 300,
    })
}

async fn setup() -> (TestCa, FakeOrigin, FakeIssuer, TestMirror) {
    let ca = TestCa::new();
    let origin = FakeOrigin::acme_foo(&ca).await;
    let issuer = FakeIssuer::start(&ca).await;
    let toml = format!(
        r#"[auth]
url_signing_key = "{key}"

[[auth.issuers]]
name = "github"
issuer = "{url}"
audiences = ["{AUDIENCE}"]
claims = {{ repository_owner = "acme", ref = "refs/heads/*" }}
refetch_interval = "1s"

{hosts}"#,
        key = "k".repeat(40),
        url = issuer.url(),
        hosts = issuer.host_toml(),
    );
    let mirror = TestMirror::start_with_toml(&ca, &origin, &toml).await;
    (ca, origin, issuer, mirror)
}

/// What the mirror answers to `acme/foo`'s `index.json` asked for with a bearer token: a
/// future of its own, so that it can be spawned.
fn index_status(
    ca: &TestCa,
    mirror: &TestMirror,
) -> impl Fn(String) -> Pin<Box<dyn Future<Output = StatusCode> + Send>> {
    let client = https_client(ca, &[]);
    let index = mirror.url(&format!("{REGISTRY}/acme/foo/index.json"));
    move |token: String| {
        let client = client.clone();
        let index = index.clone();
        Box::pin(async move {
            send("index", client.get(&index).bearer_auth(token))
                .await
                .status
        })
    }
}

/// The CLI configuration: the mirror, with `token` as its credentials.
fn cli(mirror: &TestMirror, token: &str) -> String {
    tf_config::network_mirror_with_token(&mirror.url, token)
}

#[tokio::test(flavor = "multi_thread")]
async fn terraform_installs_with_a_ci_jobs_id_token_and_is_refused_with_a_bad_one() {
    let (ca, _origin, issuer, mirror) = setup().await;
    let good = issuer.token(&github("acme"));
    let dir = tf_config::root_module(FOO);
    Terraform::new(&ca, &cli(&mirror, &good))
        .init(dir.path())
        .await
        .assert_success();

    let mut expired = github("acme");
    expired["exp"] = json!(provender::clock::now_secs() - 120);
    let mut other_audience = github("acme");
    other_audience["aud"] = json!("https://github.com/acme");
    let mut other_owner = github("evil");
    other_owner["repository_owner"] = json!("evil");
    let other_issuer = {
        // Signed by the same key, but claiming to come from elsewhere.
        let token = issuer.token(&github("acme"));
        let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
        let mut claims = github("acme");
        claims["iss"] = json!("https://token.actions.githubusercontent.com");
        parts[1] = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims.to_string());
        parts.join(".")
    };
    for (what, token) in [
        ("expired", issuer.token(&expired)),
        ("another audience", issuer.token(&other_audience)),
        ("another issuer", other_issuer),
        ("a failed claim rule", issuer.token(&other_owner)),
    ] {
        let dir = tf_config::root_module(FOO);
        let out = Terraform::new(&ca, &cli(&mirror, &token))
            .init(dir.path())
            .await;
        out.assert_failure();
        assert!(
            out.combined()
                .contains("rejected the given authentication credentials"),
            "{what}: {}",
            out.combined()
        );
    }
    assert_eq!(issuer.jwks_requests(), 1, "the key set is fetched once");
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_tokens_rotation_and_outages() {
    let (ca, _origin, issuer, mirror) = setup().await;
    let status = index_status(&ca, &mirror);
    assert_eq!(status(issuer.token(&github("acme"))).await, 200);
    assert_eq!(issuer.jwks_requests(), 1);

    // Every door that takes a token takes an ID token: the registry facade, the module
    // registry, the pages and their API (and none answers without one).
    let good = issuer.token(&github("acme"));
    let client = https_client_no_redirects(&ca);
    for path in [
        format!("v1/providers/{REGISTRY}/acme/foo/versions"),
        format!("v1/modules/{REGISTRY}/acme/net/test/versions"),
        "-/providers".to_string(),
        "-/api/v1/status".to_string(),
    ] {
        let url = mirror.url(&path);
        let with = send(&path, client.get(&url).bearer_auth(&good))
            .await
            .status;
        assert_ne!(with, 401, "{path}");
        assert!(with.as_u16() < 500, "{path}: {with}");
        let without = send(&path, client.get(&url)).await.status;
        assert!(
            without == 401 || without == 303,
            "{path} without a token: {without}"
        );
    }

    // The OCI registry takes it as its bearer token, and trades it at /v2/token (as the
    // password of Basic credentials, as OCI clients send it).
    let tags = mirror
        .url
        .join(&format!("/v2/{REGISTRY}/acme/foo/tags/list"))
        .unwrap();
    let listed = send("tags", client.get(tags.clone()).bearer_auth(&good)).await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert_eq!(listed.json()["tags"], json!(["1.0.0"]));
    assert_eq!(send("tags", client.get(tags)).await.status, 401);
    let token_url = mirror.url.join("/v2/token").unwrap();
    let traded = send(
        "token",
        client.get(token_url.clone()).basic_auth("ci", Some(&good)),
    )
    .await;
    assert_eq!(traded.status, 200, "{}", traded.text());
    assert_eq!(traded.json()["token"], json!(good));
    let mut other_owner = github("evil");
    other_owner["repository_owner"] = json!("evil");
    let refused = send(
        "token",
        client
            .get(token_url)
            .basic_auth("ci", Some(issuer.token(&other_owner))),
    )
    .await;
    assert_eq!(refused.status, 401);

    // alg: none; HS256 keyed with the issuer's public key set; oversized; garbage.
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let mut claims = github("acme");
    claims["iss"] = json!(issuer.url());
    let none = format!("{}.{}.", b64(&json!({ "alg": "none" })), b64(&claims));
    let hs256 = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(issuer.public_jwk().as_bytes()),
    )
    .unwrap();
    let mut big = github("acme");
    big["padding"] = json!("x".repeat(10_000));
    for (what, token) in [
        ("alg none", none),
        ("HS256", hs256),
        ("oversized", issuer.token(&big)),
        ("garbage", "aaaa.bbbb.cccc".to_string()),
    ] {
        assert_eq!(status(token).await, 401, "{what}");
    }

    // Tokens naming an unknown key: at most one fetch per refetch interval, not one each.
    let before = issuer.jwks_requests();
    let mut unknown = Vec::new();
    for i in 0..20 {
        unknown.push(naming_key(
            &issuer.token(&github("acme")),
            &format!("nope-{i}"),
        ));
    }
    for token in unknown {
        assert_eq!(status(token).await, 401);
    }
    assert!(
        issuer.jwks_requests() - before <= 1,
        "{} fetches for 20 unknown key IDs",
        issuer.jwks_requests() - before
    );

    // Rotation: a token signed by the new key is accepted after one fetch.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    issuer.rotate("key-2");
    let before = issuer.jwks_requests();
    assert_eq!(status(issuer.token(&github("acme"))).await, 200);
    assert_eq!(issuer.jwks_requests(), before + 1);

    // The issuer goes down: a token of the cached key still works.
    issuer.set_down(true);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(status(issuer.token(&github("acme"))).await, 200);
    issuer.set_down(false);

    // A key set on a loopback address is never fetched: named there by the discovery
    // document, or reached by a redirect from the issuer's own host. (The issuer does answer
    // there: were it fetched, the token would pass and the count would move.)
    for (kid, jwks_uri) in [
        ("key-3", issuer.key_set_on_loopback()),
        (
            "key-4",
            issuer.redirecting_to(&issuer.key_set_on_loopback()),
        ),
    ] {
        issuer.rotate(kid);
        issuer.set_jwks_uri(&jwks_uri);
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let before = issuer.jwks_requests();
        assert_eq!(
            status(issuer.token(&github("acme"))).await,
            401,
            "{jwks_uri}"
        );
        assert_eq!(issuer.jwks_requests(), before, "{jwks_uri}");
    }
}

/// `token` with its header naming the key `kid` instead (its signature no longer verifies,
/// which matters only once a key by that ID is found).
fn naming_key(token: &str, kid: &str) -> String {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let (header, rest) = token.split_once('.').unwrap();
    let mut h: Value = serde_json::from_slice(&b64.decode(header).unwrap()).unwrap();
    h["kid"] = json!(kid);
    format!("{}.{rest}", b64.encode(h.to_string()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_issuer_holds_up_only_the_tokens_that_need_its_new_keys() {
    let (ca, _origin, issuer, mirror) = setup().await;
    let status = index_status(&ca, &mirror);
    assert_eq!(status(issuer.token(&github("acme"))).await, 200);
    assert_eq!(issuer.jwks_requests(), 1);

    // Past the refetch interval, a token naming a made-up key makes the mirror ask the issuer
    // again, and the issuer takes its time.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    issuer.hold_key_set();
    let stuck = tokio::spawn(status(naming_key(
        &issuer.token(&github("acme")),
        "made-up",
    )));
    crate::support::eventually("the key set is asked for", Duration::from_secs(10), || {
        issuer.key_set_requests_held() == 1
    })
    .await;

    // Tokens whose key the mirror holds are answered meanwhile.
    for _ in 0..3 {
        let answered = tokio::time::timeout(
            Duration::from_secs(5),
            status(issuer.token(&github("acme"))),
        )
        .await
        .expect("a token whose key is held waits for no fetch");
        assert_eq!(answered, 200);
    }
    assert!(!stuck.is_finished(), "the made-up key's token waits");
    assert_eq!(issuer.key_set_requests_held(), 1);

    issuer.release_key_set();
    assert_eq!(stuck.await.unwrap(), 401);
    assert_eq!(issuer.jwks_requests(), 2);
}

/// A GitLab CI job's ID token claims (its real claim set), valid for five minutes.
fn gitlab(namespace: &str, protected: bool) -> Value {
    let now = provender::clock::now_secs();
    json!({
        "namespace_id": "72",
        "namespace_path": namespace,
        "project_id": "20",
        "project_path": format!("{namespace}/infra"),
        "user_id": "1",
        "user_login": "sample-user",
        "user_email": "sample-user@example.com",
        "user_access_level": "developer",
        "pipeline_id": "574",
        "pipeline_source": "push",
        "job_id": "302",
        "ref": "main",
        "ref_type": "branch",
        "ref_path": "refs/heads/main",
        "ref_protected": protected.to_string(),
        "runner_id": 1,
        "runner_environment": "gitlab-hosted",
        "sha": "714a629c0b401fdce83e847fc9589983fc6f46bc",
        "project_visibility": "private",
        "ci_config_ref_uri": format!("gitlab.example/{namespace}/infra//.gitlab-ci.yml@refs/heads/main"),
        "ci_config_sha": "714a629c0b401fdce83e847fc9589983fc6f46bc",
        "jti": "235b3a54-b797-45c7-ae9a-f72d7bc6ef5b",
        "sub": format!("project_path:{namespace}/infra:ref_type:branch:ref:main"),
        "aud": AUDIENCE,
        "iat": now,
        "nbf": now - 5,
        "exp": now + 300,
    })
}

/// A Kubernetes projected service-account token's claims (its real claim set).
fn kubernetes(namespace: &str) -> Value {
    let now = provender::clock::now_secs();
    json!({
        "aud": [AUDIENCE],
        "exp": now + 3600,
        "iat": now,
        "nbf": now,
        "jti": "e7d1a6ab-3e22-4f8a-8f2d-0b3a5e0d7c11",
        "kubernetes.io": {
            "namespace": namespace,
            "node": { "name": "node-1", "uid": "646e7c5e-32d6-4d42-9dbd-e504e6cbe6b1" },
            "pod": { "name": "plan-7d9f8", "uid": "5e0bd49b-f040-43b0-99b7-22765a53f7f3" },
            "serviceaccount": { "name": "terraform", "uid": "14ee3fa4-a7e2-420f-9f9a-dbc4507c3798" },
            "warnafter": now + 3000,
        },
        "sub": format!("system:serviceaccount:{namespace}:terraform"),
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn gitlab_and_kubernetes_tokens_pass_by_their_own_claims() {
    let ca = TestCa::new();
    let origin = FakeOrigin::start(
        &ca,
        &[REGISTRY],
        vec![ProviderSpec::new(
            "acme",
            "foo",
            &["1.0.0"],
            &[tf_config::local_platform()],
        )],
    )
    .await;
    let gitlab_issuer = FakeIssuer::start_at(&ca, "gitlab.example").await;
    let cluster = FakeIssuer::start_at(&ca, "cluster.example").await;
    let toml = format!(
        r#"[auth]
url_signing_key = "{key}"

[[auth.issuers]]
name = "gitlab"
issuer = "{gitlab}"
audiences = ["{AUDIENCE}"]
claims = {{ namespace_path = ["acme", "acme/*"], ref_protected = "true" }}

[[auth.issuers]]
name = "cluster"
issuer = "{cluster}"
audiences = ["{AUDIENCE}"]
claims = {{ "/kubernetes.io/namespace" = "ci" }}

{gitlab_host}
{cluster_host}"#,
        key = "k".repeat(40),
        gitlab = gitlab_issuer.url(),
        cluster = cluster.url(),
        gitlab_host = gitlab_issuer.host_toml(),
        cluster_host = cluster.host_toml(),
    );
    let mirror = TestMirror::start_with_toml(&ca, &origin, &toml).await;
    for token in [
        gitlab_issuer.token(&gitlab("acme", true)),
        cluster.token(&kubernetes("ci")),
    ] {
        let dir = tf_config::root_module(FOO);
        Terraform::new(&ca, &cli(&mirror, &token))
            .init(dir.path())
            .await
            .assert_success();
    }
    let client = https_client(&ca, &[]);
    let index = mirror.url(&format!("{REGISTRY}/acme/foo/index.json"));
    for (what, token) in [
        (
            "another namespace",
            gitlab_issuer.token(&gitlab("evil", true)),
        ),
        (
            "an unprotected ref",
            gitlab_issuer.token(&gitlab("acme", false)),
        ),
        (
            "another cluster namespace",
            cluster.token(&kubernetes("prod")),
        ),
        // Signed by the cluster, claiming to be GitLab's.
        ("another issuer's name", {
            let mut claims = gitlab("acme", true);
            claims["iss"] = json!(gitlab_issuer.url());
            let token = cluster.token(&claims);
            let (_, rest) = token.split_once('.').unwrap();
            let (_, signature) = rest.rsplit_once('.').unwrap();
            let header = token.split('.').next().unwrap();
            format!(
                "{header}.{}.{signature}",
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims.to_string())
            )
        }),
    ] {
        let got = send("index", client.get(&index).bearer_auth(&token)).await;
        assert_eq!(got.status, 401, "{what}: {}", got.text());
    }
    // Each is named by its issuer and its `sub` in the metrics (and the logs and usage).
    let metrics = send(
        "metrics",
        client
            .get(mirror.url.join("/metrics").unwrap())
            .bearer_auth(cluster.token(&kubernetes("ci"))),
    )
    .await
    .text();
    for name in [
        "gitlab:project_path:acme/infra:ref_type:branch:ref:main",
        "cluster:system:serviceaccount:ci:terraform",
    ] {
        assert_eq!(
            crate::support::sample(
                &metrics,
                &format!("provender_client_downloads_total{{client=\"{name}\"}}")
            ),
            1,
            "{name}: {metrics}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_is_accepted_only_by_the_server_it_was_issued_for() {
    const TOKEN: &str = "shared-token-0123456789";
    let ca = TestCa::new();
    let origin = FakeOrigin::start(&ca, &[REGISTRY], vec![]).await;
    // Two deployments with the same key and token (a copied configuration).
    let toml = format!(
        "[auth]\ntokens = [\"{TOKEN}\"]\nurl_signing_key = \"{}\"\n",
        "k".repeat(40)
    );
    let here = TestMirror::start_with_toml(&ca, &origin, &toml).await;
    let elsewhere = TestMirror::start_with_toml(&ca, &origin, &toml).await;
    let client = https_client_no_redirects(&ca);
    let sign_in = client
        .post(here.url("-/sign-in"))
        .header("origin", here.url.origin().ascii_serialization())
        .header("sec-fetch-site", "same-origin")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}"));
    let signed_in = send("sign-in", sign_in).await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.text());
    let cookie = signed_in
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.split(';').next()?.strip_prefix("provender_session="))
        .expect("a session cookie")
        .to_string();
    let status = async |mirror: &TestMirror| {
        let url = mirror.url("-/api/v1/status");
        let req = client
            .get(&url)
            .header("cookie", format!("provender_session={cookie}"));
        send(&url, req).await.status
    };
    assert_eq!(status(&here).await, 200);
    assert_eq!(status(&elsewhere).await, 401, "another server's session");
}
