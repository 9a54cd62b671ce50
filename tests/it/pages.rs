//! The pages, in a real browser (headless Chromium through chromedriver, see
//! [`crate::support::browser`]), over a provender filled through the real protocols from a fake
//! origin over TLS: what a person sees and copies, search and filters, a lock-file block the
//! real `terraform init -lockfile=readonly` accepts, sign-in with authentication on (and no page
//! or API route without it), hostile origin text shown as text, and on every page no console
//! error, nothing loaded from elsewhere, no serious axe-core finding, and no sideways
//! scrolling on a phone.
//!
//! With `PROVENDER_SCREENSHOTS=<dir>` the tests save the README's screenshots there.

use std::time::Duration;

use fantoccini::key::Key;
use http::StatusCode;

use crate::support::browser::Browser;
use crate::support::http::{get, send};
use crate::support::origin::{FakeOrigin, Fault, ModuleSource, ModuleSpec, ProviderSpec};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror};
use crate::support::tf_config::{self, FOO};
use crate::support::{Terraform, https_client, https_client_no_redirects, init_fresh, poll};

const PLATFORMS: &[(&str, &str)] = &[("linux", "amd64"), ("darwin", "arm64")];

/// Checks what every page must satisfy, then saves its screenshot.
pub(crate) async fn check_page(browser: &Browser, mirror: &TestMirror, name: &str) {
    let origin = mirror.url.origin().ascii_serialization();
    let errors = browser.console("SEVERE").await;
    assert!(errors.is_empty(), "{name}: console errors: {errors:#?}");
    for url in browser.loaded_urls().await {
        assert!(
            url.starts_with(&origin),
            "{name} loaded {url}, outside {origin}"
        );
    }
    let findings = browser.serious_accessibility_violations().await;
    assert!(findings.is_empty(), "{name}: axe-core: {findings:#?}");
    let sideways = browser
        .run(
            "return document.documentElement.scrollWidth - window.innerWidth;",
            vec![],
        )
        .await;
    assert!(
        sideways.as_i64().unwrap() <= 0,
        "{name} scrolls sideways by {sideways} px"
    );
    browser.screenshot(name).await;
}

/// A `<pre>`'s exact text.
pub(crate) async fn snippet(browser: &Browser, id: &str) -> String {
    let text = browser
        .run(
            "return document.getElementById(arguments[0]).textContent;",
            vec![id.into()],
        )
        .await;
    text.as_str().unwrap().to_string()
}

/// Waits for the clipboard to hold `expected` (the copy is asynchronous).
pub(crate) async fn clipboard_becomes(browser: &Browser, expected: &str) {
    let got = poll(Duration::from_secs(5), async || {
        let now = browser.clipboard().await;
        (now == expected).then_some(now)
    })
    .await;
    assert!(
        got.is_some(),
        "the clipboard holds {:?}, not {expected:?}",
        browser.clipboard().await
    );
}

/// The rows of the page's first table body.
pub(crate) async fn rows(browser: &Browser) -> Vec<String> {
    let mut out = Vec::new();
    for row in browser.find_all("main tbody tr").await {
        out.push(row.text().await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_person_sees_uses_and_copies_what_the_mirror_holds() {
    let ca = TestCa::new();
    let origin = FakeOrigin::start_with_modules(
        &ca,
        &[REGISTRY],
        vec![
            ProviderSpec::new("acme", "foo", &["1.0.0", "1.1.0"], PLATFORMS),
            ProviderSpec::new("other", "bar", &["2.0.0"], PLATFORMS),
        ],
        vec![ModuleSpec::new("acme", "gitmod", "test", &["1.0.0"]).source(ModuleSource::Git)],
    )
    .await;
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_toml: "[usage]\nflush_interval = \"1s\"\n",
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    // Fill the cache as clients do: terraform init through the network mirror (acme/foo
    // 1.1.0 for this machine's platform), a download of other/bar, a module download.
    let cli = tf_config::network_mirror(mirror.url.as_str());
    let first = init_fresh(&ca, &cli, FOO).await;
    let bar = format!("{REGISTRY}/other/bar/terraform-provider-bar_2.0.0_linux_amd64.zip");
    assert_eq!(get(&client, &mirror.url(&bar)).await.status, 200);
    let download = mirror.url(&format!(
        "v1/modules/{REGISTRY}/acme/gitmod/test/1.0.0/download"
    ));
    let answer = get(&client, &download).await;
    assert_eq!(answer.status, StatusCode::OK);
    let package = mirror
        .url
        .join(answer.headers["x-terraform-get"].to_str().unwrap())
        .unwrap();
    assert_eq!(get(&client, package.as_str()).await.status, StatusCode::OK);

    let browser = Browser::start().await;
    let base = mirror.url.as_str();

    // The start page: snippets with this mirror's URLs, copied exactly, by mouse and keyboard.
    browser.goto(base).await;
    browser.allow_clipboard().await;
    assert_eq!(
        browser.client.title().await.unwrap(),
        "Use this mirror · provender"
    );
    let network_mirror = snippet(&browser, "network-mirror").await;
    assert_eq!(network_mirror, tf_config::network_mirror(base));
    browser
        .find("button[data-copy='network-mirror']")
        .await
        .click()
        .await
        .unwrap();
    clipboard_becomes(&browser, &network_mirror).await;
    let host = format!("localhost:{}", mirror.url.port().unwrap());
    let oci = snippet(&browser, "oci-mirror").await;
    assert_eq!(
        oci,
        format!(
            "provider_installation {{\n  oci_mirror {{\n    repository_template = \"{host}/${{hostname}}/${{namespace}}/${{type}}\"\n  }}\n}}\n"
        )
    );
    let hosts = snippet(&browser, "host-block").await;
    assert!(
        hosts.contains(&format!(
            "\"modules.v1\"   = \"{base}v1/modules/{REGISTRY}/\""
        )),
        "{hosts}"
    );
    assert!(
        browser.find_all("#credentials").await.is_empty(),
        "no auth, no credentials"
    );
    // The keyboard alone, from a fresh load: the first Tab reaches the skip link, more reach
    // the OCI snippet's copy button.
    browser.goto(base).await;
    browser
        .find("body")
        .await
        .send_keys(&Key::Tab.to_string())
        .await
        .unwrap();
    let first_focus = browser
        .run("return document.activeElement.className;", vec![])
        .await;
    assert_eq!(first_focus, "skip");
    let mut reached = false;
    for _ in 0..40 {
        let focused = browser
            .run(
                "return document.activeElement.getAttribute('data-copy');",
                vec![],
            )
            .await;
        if focused == "oci-mirror" {
            reached = true;
            break;
        }
        let active = browser.client.active_element().await.unwrap();
        active.send_keys(&Key::Tab.to_string()).await.unwrap();
    }
    assert!(reached, "Tab never reached the OCI snippet's copy button");
    let active = browser.client.active_element().await.unwrap();
    active.send_keys(&Key::Enter.to_string()).await.unwrap();
    clipboard_becomes(&browser, &oci).await;
    check_page(&browser, &mirror, "start").await;

    // Providers: search and every filter.
    browser.goto(&mirror.url("-/providers")).await;
    let all = rows(&browser).await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(
        all[0].starts_with(&format!("{REGISTRY}/acme/foo")),
        "{all:?}"
    );
    check_page(&browser, &mirror, "providers").await;
    browser.find("#q").await.send_keys("bar").await.unwrap();
    browser.click_to_page(".filters button[type=submit]").await;
    let found = rows(&browser).await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with(&format!("{REGISTRY}/other/bar")),
        "{found:?}"
    );
    browser.goto(&mirror.url("-/providers")).await;
    browser.select("#namespace", "acme").await;
    browser.click_to_page(".filters button[type=submit]").await;
    let acme = rows(&browser).await;
    assert_eq!(acme.len(), 1);
    assert!(acme[0].contains("community"), "{acme:?}");
    browser.select("#platform", "linux_amd64").await;
    browser.click_to_page(".filters button[type=submit]").await;
    assert_eq!(rows(&browser).await.len(), 1, "linux_amd64 is cached");
    browser
        .goto(&mirror.url("-/providers?platform=darwin_arm64"))
        .await;
    assert!(
        rows(&browser).await.is_empty(),
        "no darwin archive is cached"
    );
    assert_eq!(browser.text(".empty").await, "No provider matches.");
    browser
        .goto(&mirror.url("-/providers?trust=official"))
        .await;
    assert!(
        rows(&browser).await.is_empty(),
        "the fake origin's key is community"
    );

    // A provider, then a version: trust, key, platforms, hashes, origin.
    browser.goto(&mirror.url("-/providers")).await;
    browser
        .click_to_page(&format!("a[href$='-/providers/{REGISTRY}/acme/foo']"))
        .await;
    let versions = rows(&browser).await;
    assert_eq!(versions.len(), 1, "only 1.1.0 has archives: {versions:?}");
    assert!(versions[0].contains(origin.key_id()), "{versions:?}");
    check_page(&browser, &mirror, "provider").await;
    browser.click_to_page("tbody a").await;
    assert_eq!(
        browser.text("h1").await,
        format!("{REGISTRY}/acme/foo 1.1.0")
    );
    let facts = browser.text(".facts").await;
    assert!(
        facts.contains("community") && facts.contains(origin.key_id()),
        "{facts}"
    );
    let platforms = rows(&browser).await;
    assert_eq!(platforms.len(), 2, "{platforms:?}");
    assert!(platforms[0].starts_with("darwin_arm64") && platforms[0].contains("no h1: yet"));
    assert!(platforms[1].contains(&format!(
        "zh:{}",
        origin.sha256_hex("acme", "foo", "1.1.0", "linux", "amd64")
    )));
    // The block for the ticked (cached) platform, then for both.
    let linux_only = snippet(&browser, "lock-file").await;
    assert!(
        browser
            .find("input[value='linux_amd64']")
            .await
            .is_selected()
            .await
            .unwrap()
    );
    check_page(&browser, &mirror, "version").await;
    browser
        .find("input[value='darwin_arm64']")
        .await
        .click()
        .await
        .unwrap();
    browser.click_to_page("form.lock button").await;
    let both = snippet(&browser, "lock-file").await;
    assert_eq!(
        both, linux_only,
        "darwin has no h1: to add; its zh: was already there"
    );
    assert!(
        browser
            .text("main")
            .await
            .contains("No h1: is known yet for darwin_arm64")
    );
    browser
        .find("button[data-copy='lock-file']")
        .await
        .click()
        .await
        .unwrap();
    clipboard_becomes(&browser, &both).await;

    // The copied block is what Terraform itself keeps: `init -lockfile=readonly` accepts it
    // without wanting a change, and it holds the hash Terraform recorded on the first install.
    let recorded = std::fs::read_to_string(first.path().join(".terraform.lock.hcl")).unwrap();
    let h1 = recorded
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix('"')?
                .strip_suffix("\",")?
                .strip_prefix("h1:")
        })
        .expect("terraform recorded an h1:");
    assert!(both.contains(&format!("\"h1:{h1}\"")), "{both}\n{recorded}");
    let fresh = tf_config::root_module(FOO);
    std::fs::write(fresh.path().join(".terraform.lock.hcl"), &both).unwrap();
    let terraform = Terraform::new(&ca, &cli);
    let readonly = ["init", "-input=false", "-no-color", "-lockfile=readonly"];
    let out = terraform.run(fresh.path(), &readonly).await;
    out.assert_success();
    assert!(
        !out.combined().contains("lock file not updated"),
        "{}",
        out.combined()
    );
    // ... and the check is real: a block whose linux hashes (its h1: and its zh:, either of
    // which Terraform accepts for an archive from a mirror) are others' is refused.
    let tampered = tf_config::root_module(FOO);
    let linux_zh = format!(
        "zh:{}",
        origin.sha256_hex("acme", "foo", "1.1.0", "linux", "amd64")
    );
    let wrong = both
        .replace(
            &format!("h1:{h1}"),
            "h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        )
        .replace(&linux_zh, &format!("zh:{}", "0".repeat(64)));
    std::fs::write(tampered.path().join(".terraform.lock.hcl"), wrong).unwrap();
    terraform
        .run(tampered.path(), &readonly)
        .await
        .assert_failure();

    // Modules: the git source and the commit its tag resolved to.
    browser.goto(&mirror.url("-/modules")).await;
    let modules = rows(&browser).await;
    assert_eq!(modules.len(), 1, "{modules:?}");
    let commit = origin.git_commit("acme", "gitmod", "test", "1.0.0");
    assert!(modules[0].contains(&commit[..12]), "{modules:?} {commit}");
    assert!(modules[0].contains("git:"), "{modules:?}");
    check_page(&browser, &mirror, "modules").await;

    // Usage: who fetched what (everyone is `anonymous` without authentication), once the
    // server has written its counts.
    let mut usage = Vec::new();
    for _ in 0..50 {
        browser.goto(&mirror.url("-/usage?days=7")).await;
        usage = rows(&browser).await;
        if usage.len() >= 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(
        usage
            .iter()
            .any(|r| r.starts_with(&format!("{REGISTRY}/acme/foo"))
                && r.contains("1.1.0")
                && r.contains("anonymous")),
        "{usage:?}"
    );
    assert!(
        usage
            .iter()
            .any(|r| r.starts_with(&format!("module {REGISTRY}/acme/gitmod/test"))),
        "{usage:?}"
    );
    browser.goto(&mirror.url("-/usage?days=7&q=gitmod")).await;
    assert_eq!(rows(&browser).await.len(), 1);
    check_page(&browser, &mirror, "usage").await;

    // Status: the origin's health and the cache.
    browser.goto(&mirror.url("-/status")).await;
    let origins = rows(&browser).await;
    assert!(
        origins
            .iter()
            .any(|r| r.starts_with(REGISTRY) && r.contains("closed")),
        "{origins:?}"
    );
    assert!(browser.text("main").await.contains("Provider archives"));
    check_page(&browser, &mirror, "status").await;

    // On a phone: every page without sideways scrolling.
    browser.client.set_window_size(390, 844).await.unwrap();
    for (page, name) in [
        ("", "phone-start"),
        ("-/providers", "phone-providers"),
        (
            &format!("-/providers/{REGISTRY}/acme/foo/1.1.0"),
            "phone-version",
        ),
        ("-/modules", "phone-modules"),
        ("-/usage", "phone-usage"),
        ("-/status", "phone-status"),
    ] {
        browser.goto(&mirror.url(page)).await;
        check_page(&browser, &mirror, name).await;
    }
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_authentication_on_every_page_and_api_route_needs_a_sign_in_or_a_token() {
    let ca = TestCa::new();
    let origin = FakeOrigin::start(
        &ca,
        &[REGISTRY],
        vec![ProviderSpec::new("acme", "foo", &["1.0.0"], PLATFORMS)],
    )
    .await;
    let token = "pages-token-0123456789abcdef";
    let toml = format!(
        "[auth]\ntokens = [\"{token}\"]\nurl_signing_key = \"{}\"\nsession_ttl = \"2h\"\n",
        "k".repeat(40)
    );
    let mirror = TestMirror::start_with_toml(&ca, &origin, &toml).await;
    let client = https_client_no_redirects(&ca);
    let zip = format!("{REGISTRY}/acme/foo/terraform-provider-foo_1.0.0_linux_amd64.zip");
    let filled = send(
        &mirror.url(&zip),
        client.get(mirror.url(&zip)).bearer_auth(token),
    )
    .await;
    assert_eq!(filled.status, 200);
    // The archive is committed after its last byte left: wait for that, so the catalogue's
    // first snapshot has it.
    poll(Duration::from_secs(10), async || {
        let metrics = send(
            "metrics",
            client
                .get(mirror.url.join("/metrics").unwrap())
                .bearer_auth(token),
        )
        .await
        .text();
        (crate::support::sample(&metrics, "provender_cache_archives") == 1).then_some(())
    })
    .await
    .expect("the archive is committed");

    let version = format!("{REGISTRY}/acme/foo/1.0.0");
    let pages = [
        String::new(),
        "-/providers".into(),
        format!("-/providers/{REGISTRY}/acme/foo"),
        format!("-/providers/{version}"),
        "-/modules".into(),
        "-/usage".into(),
        "-/published".into(),
        "-/status".into(),
        "-/policy".into(),
        "-/ca.pem".into(),
        "-/nothing-here".into(),
    ];
    let api = [
        "-/api/v1/".to_string(),
        "-/api/v1/providers".into(),
        format!("-/api/v1/providers/{REGISTRY}/acme/foo"),
        format!("-/api/v1/providers/{version}"),
        format!("-/api/v1/providers/{version}/lock?platform=linux_amd64"),
        "-/api/v1/modules".into(),
        "-/api/v1/usage?days=0".into(),
        "-/api/v1/publications".into(),
        "-/api/v1/status".into(),
        "-/api/v1/policy".into(),
        "-/api/v1/policy/history".into(),
    ];
    let forged = "provender_session=eyJpZCI6IngiLCJzdWJqZWN0IjoidG9rZW46MCIsImV4cGlyZXMiOjk5OTk5OTk5OTl9.AAAA";
    for cookie in [None, Some(forged)] {
        for page in &pages {
            let mut req = client.get(mirror.url(page));
            if let Some(c) = cookie {
                req = req.header("cookie", c);
            }
            let got = send(page, req).await;
            assert_eq!(got.status, StatusCode::SEE_OTHER, "{page} {cookie:?}");
            let location = got.headers["location"].to_str().unwrap();
            assert!(location.contains("-/sign-in?next="), "{page}: {location}");
        }
        for route in &api {
            let mut req = client.get(mirror.url(route));
            if let Some(c) = cookie {
                req = req.header("cookie", c);
            }
            let got = send(route, req).await;
            assert_eq!(got.status, StatusCode::UNAUTHORIZED, "{route} {cookie:?}");
            assert_eq!(got.json()["error"]["code"], "unauthorized", "{route}");
        }
    }
    // Scripts use the token.
    for route in &api {
        let got = send(route, client.get(mirror.url(route)).bearer_auth(token)).await;
        assert_eq!(got.status, StatusCode::OK, "{route}: {}", got.text());
    }
    // What the sign-in page itself needs is open.
    for open in [
        "-/sign-in",
        "-/static/provender.css",
        "-/static/provender.js",
    ] {
        assert_eq!(
            get(&client, &mirror.url(open)).await.status,
            StatusCode::OK,
            "{open}"
        );
    }
    // A form from another site cannot sign in.
    let cross = client
        .post(mirror.url("-/sign-in"))
        .header("sec-fetch-site", "cross-site")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"));
    assert_eq!(
        send("cross-site", cross).await.status,
        StatusCode::FORBIDDEN
    );

    let browser = Browser::start().await;
    browser.goto(&mirror.url("-/providers?q=foo")).await;
    let url = browser.client.current_url().await.unwrap();
    assert!(url.path().ends_with("-/sign-in"), "{url}");
    check_page(&browser, &mirror, "sign-in").await;
    browser
        .find("#token")
        .await
        .send_keys("not-the-token-000000")
        .await
        .unwrap();
    browser.click_to_page("form.sign-in button").await;
    assert!(
        browser
            .text("p.error")
            .await
            .contains("not one of this mirror's")
    );
    browser.find("#token").await.send_keys(token).await.unwrap();
    browser.click_to_page("form.sign-in button").await;
    let url = browser.client.current_url().await.unwrap();
    assert_eq!(
        (url.path(), url.query()),
        ("/-/providers", Some("q=foo")),
        "back where the person was going"
    );
    assert_eq!(rows(&browser).await.len(), 1);
    let cookie = browser
        .client
        .get_named_cookie("provender_session")
        .await
        .unwrap();
    assert_eq!(cookie.http_only(), Some(true));
    assert_eq!(cookie.secure(), Some(true));
    assert_eq!(cookie.same_site(), Some(cookie::SameSite::Strict));
    let expires = cookie.expires_datetime().expect("the cookie expires");
    let left = expires - cookie::time::OffsetDateTime::now_utc();
    assert!(
        left > cookie::time::Duration::minutes(110) && left <= cookie::time::Duration::hours(2),
        "session_ttl is 2h: {left}"
    );
    let value = format!("provender_session={}", cookie.value());
    // The same session reaches the API, from the browser and from a script holding it.
    browser.goto(&mirror.url("-/api/v1/status")).await;
    assert!(browser.text("body").await.contains("\"api_version\":1"));
    let with_cookie = send(
        "cookie",
        client.get(mirror.url("-/status")).header("cookie", &value),
    )
    .await;
    assert_eq!(with_cookie.status, StatusCode::OK);
    // Signing out ends it: for the browser, and for anyone replaying the cookie.
    browser.goto(&mirror.url("-/status")).await;
    browser.click_to_page(".sign-out button").await;
    let url = browser.client.current_url().await.unwrap();
    assert!(url.path().ends_with("-/sign-in"), "{url}");
    browser.goto(&mirror.url("-/status")).await;
    let url = browser.client.current_url().await.unwrap();
    assert!(url.path().ends_with("-/sign-in"), "signed out: {url}");
    let replayed = send(
        "replay",
        client.get(mirror.url("-/status")).header("cookie", &value),
    )
    .await;
    assert_eq!(replayed.status, StatusCode::SEE_OTHER);
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_origins_hostile_text_is_shown_as_text() {
    const HOSTILE: &str = "https://[<img src=x id=injected>]/x.zip";
    let ca = TestCa::new();
    let origin = FakeOrigin::start(
        &ca,
        &[REGISTRY],
        vec![ProviderSpec::new("acme", "foo", &["1.0.0"], PLATFORMS)],
    )
    .await;
    origin.set_fault(Fault::DownloadUrl(HOSTILE));
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    let zip = format!("{REGISTRY}/acme/foo/terraform-provider-foo_1.0.0_linux_amd64.zip");
    assert_eq!(get(&client, &mirror.url(&zip)).await.status, 502);
    let status = get(&client, &mirror.url("-/api/v1/status")).await.json();
    let error = status["origins"][0]["last_error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(error.contains("<img src=x id=injected>"), "{status}");

    let browser = Browser::start().await;
    browser.goto(&mirror.url("-/status")).await;
    let shown = browser.text("td.error").await;
    assert!(shown.contains("<img src=x id=injected>"), "{shown}");
    assert!(
        browser.find_all("#injected").await.is_empty(),
        "markup was injected"
    );
    assert!(browser.find_all("main img").await.is_empty());
    check_page(&browser, &mirror, "status-hostile").await;
    browser.close().await;
}

/// Waits until the browser shows a page whose URL path ends with `path`; its title.
async fn arrives_at(browser: &Browser, path: &str) -> String {
    for _ in 0..100 {
        let url = browser.client.current_url().await.unwrap();
        let ready = browser
            .run("return document.readyState;", vec![])
            .await
            .as_str()
            .map(str::to_string);
        if url.path().ends_with(path) && ready.as_deref() == Some("complete") {
            return browser.client.title().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let url = browser.client.current_url().await.unwrap();
    panic!("the browser stayed at {url}, not {path}");
}

#[tokio::test(flavor = "multi_thread")]
async fn people_sign_in_with_single_sign_on_and_pkce() {
    use crate::support::issuer::FakeIssuer;
    let ca = TestCa::new();
    let origin = FakeOrigin::start(
        &ca,
        &[REGISTRY],
        vec![ProviderSpec::new("acme", "foo", &["1.0.0"], PLATFORMS)],
    )
    .await;
    let issuer = FakeIssuer::start(&ca).await;
    issuer.register_client("provender-pages", "pages-client-secret");
    let mirror = TestMirror::start_with_toml(&ca, &origin, &issuer.sso_toml()).await;
    // Without a session nothing is reachable.
    let client = https_client_no_redirects(&ca);
    for route in ["-/providers", "-/usage", "-/status"] {
        let got = get(&client, &mirror.url(route)).await;
        assert_eq!(got.status, StatusCode::SEE_OTHER, "{route}");
    }
    let api = get(&client, &mirror.url("-/api/v1/providers")).await;
    assert_eq!(api.status, StatusCode::UNAUTHORIZED);
    // Single sign-on alone protects the pages, not the protocols.
    let index = get(
        &client,
        &mirror.url(&format!("{REGISTRY}/acme/foo/index.json")),
    )
    .await;
    assert_eq!(index.status, StatusCode::OK, "{}", index.text());

    let browser = Browser::start().await;
    let sign_in = async |login: &str| {
        browser.goto(&mirror.url("-/providers")).await;
        assert_eq!(
            arrives_at(&browser, "-/sign-in").await,
            "Sign in · provender"
        );
        assert!(
            browser.find_all("#token").await.is_empty(),
            "no token form without tokens"
        );
        browser.click_to_page("#sso").await;
        arrives_at(&browser, "/authorize").await;
        browser.find("#login").await.send_keys(login).await.unwrap();
        browser.find("#approve").await.click().await.unwrap();
    };

    // A person whose e-mail passes the claim rule signs in and lands where they were going.
    sign_in("alice@acme.example").await;
    assert_eq!(
        arrives_at(&browser, "-/providers").await,
        "Providers · provender"
    );
    assert_eq!(issuer.exchanges(), 1);
    check_page(&browser, &mirror, "providers-after-sso").await;
    let cookies = browser.client.get_all_cookies().await.unwrap();
    let session = cookies
        .iter()
        .find(|c| c.name() == "provender_session")
        .expect("a session cookie");
    assert_eq!(session.http_only(), Some(true));
    assert!(
        cookies.iter().all(|c| c.name() != "provender_sso"),
        "the sign-in's state cookie is cleared"
    );
    // The session works for the API, and ends with sign-out.
    let with_session = send(
        "api",
        client
            .get(mirror.url("-/api/v1/providers"))
            .header("cookie", format!("provender_session={}", session.value())),
    )
    .await;
    assert_eq!(
        with_session.status,
        StatusCode::OK,
        "{}",
        with_session.text()
    );
    browser.click_to_page("header.top .sign-out button").await;
    assert_eq!(
        arrives_at(&browser, "-/sign-in").await,
        "Sign in · provender"
    );
    browser.goto(&mirror.url("-/status")).await;
    arrives_at(&browser, "-/sign-in").await;

    // Someone the claim rule refuses gets no session, and is told why.
    sign_in("mallory@evil.example").await;
    arrives_at(&browser, "-/sign-in/callback").await;
    let said = browser.text("main").await;
    assert!(said.contains("You may not sign in here"), "{said}");
    assert!(said.contains("email"), "{said}");
    browser.goto(&mirror.url("-/status")).await;
    arrives_at(&browser, "-/sign-in").await;
    browser.close().await;

    // A callback this browser did not start, or with a state that is not its own, is refused
    // before any code is traded.
    let exchanges = issuer.exchanges();
    let forged = get(
        &client,
        &mirror.url("-/sign-in/callback?code=code-1&state=guessed"),
    )
    .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert!(
        forged.text().contains("not started in this browser"),
        "{}",
        forged.text()
    );
    let started = get(&client, &mirror.url("-/sign-in/sso?next=/-/status")).await;
    assert_eq!(started.status, StatusCode::SEE_OTHER);
    let to_provider = url::Url::parse(started.headers["location"].to_str().unwrap()).unwrap();
    let query: std::collections::HashMap<String, String> =
        to_provider.query_pairs().into_owned().collect();
    assert_eq!(query["code_challenge_method"], "S256");
    assert_eq!(query["client_id"], "provender-pages");
    assert!(query["redirect_uri"].ends_with("-/sign-in/callback"));
    let state_cookie = started.headers["set-cookie"].to_str().unwrap();
    assert!(state_cookie.contains("HttpOnly") && state_cookie.contains("SameSite=Lax"));
    let cookie = state_cookie.split(';').next().unwrap().to_string();
    let wrong_state = send(
        "callback",
        client
            .get(mirror.url("-/sign-in/callback?code=code-1&state=not-the-one"))
            .header("cookie", cookie),
    )
    .await;
    assert_eq!(wrong_state.status, StatusCode::FORBIDDEN);
    assert!(wrong_state.text().contains("state does not match"));
    assert_eq!(issuer.exchanges(), exchanges);
}
