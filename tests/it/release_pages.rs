//! How installers and people find the CLI releases the mirror serves (`[releases]`), against
//! fake release origins in the vendors' layouts (see [`crate::releases`]):
//! - tfenv's and tenv's HTML listing `releases/terraform/` (and `releases/tofu/`): every
//!   release newest first, one link per line, no other version-like text; tfenv's own pipeline
//!   (`curl -sSf "$TFENV_REMOTE/terraform/" | grep -o -E ... | uniq`) run on it yields the
//!   versions newest first; without the slash, a 301 to it (tenv asks for it so); each release's
//!   own listing links files that download;
//! - tofuenv with `TOFUENV_REMOTE=<mirror>releases/tofu`: its listing command (`curl -H "Accept:
//!   application/vnd.github+json" | jq -r ".[].name"`) gets the releases in the shape of GitHub's
//!   releases API, newest first, and its downloads of `download/v<version>/<file>` are the
//!   origin's files, the zip from the same one origin download as `tofu/<version>/<file>`, and
//!   check out against the SHA256SUMS as tofuenv checks them;
//! - OpenTofu's `api.json` as served names only the files the mirror serves, whatever a
//!   hostile vendor list names (other products and versions, paths, URLs);
//! - the "CLI releases" page in a real browser: the cached releases, each installer's set-up
//!   lines with this mirror's URL, copied exactly; what the page says when `[releases]` is off;
//!   the same view in the JSON API.

use std::path::Path;

use crate::pages::{check_page, clipboard_becomes, rows, snippet};
use crate::releases::{
    mirror, sha256_hex, write_api_json, write_release, write_tofu_release, zip_of,
};
use crate::support::browser::Browser;
use crate::support::http::{get, send};
use crate::support::origin::FakeOrigin;
use crate::support::pki::TestCa;
use crate::support::provender::{REGISTRY, TestMirror};
use crate::support::static_server::StaticServer;
use crate::support::{https_client, https_client_no_redirects, poll, sample, within};

/// tfenv's pattern for versions on the listing page (`libexec/tfenv-list-remote`).
const TFENV_PATTERN: &str = r"[0-9]+\.[0-9]+\.[0-9]+(-(rc|beta|alpha|oci)-?[0-9]*)?";

/// HashiCorp's `terraform/index.json` listing `versions` (in the order given, as a map), each
/// with a linux_amd64 build; and 1.11.4's files, signed with the test key. Returns 1.11.4's zip.
pub fn terraform_origin(root: &Path, versions: &[&str]) -> Vec<u8> {
    let zip = zip_of("terraform", b"#!/bin/sh\necho terraform\n", true);
    write_release(
        &root.join("hashicorp/terraform/1.11.4"),
        "terraform_1.11.4_SHA256SUMS",
        &[("terraform_1.11.4_linux_amd64.zip", &zip)],
        &[
            "terraform_1.11.4_SHA256SUMS.sig",
            "terraform_1.11.4_SHA256SUMS.72D7468F.sig",
        ],
        false,
    );
    let mut listed = serde_json::Map::new();
    for v in versions {
        let file = format!("terraform_{v}_linux_amd64.zip");
        listed.insert(
            v.to_string(),
            serde_json::json!({
                "name": "terraform", "version": v,
                "shasums": format!("terraform_{v}_SHA256SUMS"),
                "shasums_signature": format!("terraform_{v}_SHA256SUMS.sig"),
                "shasums_signatures": [
                    format!("terraform_{v}_SHA256SUMS.72D7468F.sig"),
                    format!("terraform_{v}_SHA256SUMS.sig"),
                ],
                "builds": [{
                    "name": "terraform", "version": v, "os": "linux", "arch": "amd64",
                    "filename": file,
                    "url": format!("https://releases.hashicorp.com/terraform/{v}/{file}"),
                }],
            }),
        );
    }
    let index = serde_json::json!({"name": "terraform", "versions": listed});
    std::fs::write(
        root.join("hashicorp/terraform/index.json"),
        serde_json::to_vec(&index).unwrap(),
    )
    .unwrap();
    zip
}

/// OpenTofu's layout with 1.8.0 and 1.8.1 (each a linux_amd64 zip), signed with the test key,
/// and its `api.json` listing them newest first with the files OpenTofu lists (packages the
/// mirror does not serve among them). Returns 1.8.1's zip, SHA256SUMS and signature.
fn tofu_origin(root: &Path) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let mut newest = None;
    for v in ["1.8.0", "1.8.1"] {
        let zip = zip_of(
            "tofu",
            format!("#!/bin/sh\necho tofu {v}\n").as_bytes(),
            true,
        );
        let (sums, signature) = write_tofu_release(root, v, &[("linux_amd64.zip", &zip)], false);
        newest = Some((zip, sums, signature));
    }
    let files = |v: &str| {
        serde_json::json!([
            format!("tofu_{v}_linux_amd64.zip"),
            format!("tofu_{v}_linux_amd64.tar.gz"),
            format!("tofu_{v}_amd64.deb"),
            format!("tofu_{v}_SHA256SUMS"),
            format!("tofu_{v}_SHA256SUMS.gpgsig"),
            format!("tofu_{v}_SHA256SUMS.sig"),
        ])
    };
    let api = serde_json::json!({"versions": [
        {"id": "1.8.1", "files": files("1.8.1")},
        {"id": "1.8.0", "files": files("1.8.0")},
    ]});
    write_api_json(root, &api);
    newest.unwrap()
}

/// Runs a bash script with `env`, the test CA trusted by curl; returns its stdout, panicking
/// with its output if it fails.
async fn bash(script: &str, env: &[(&str, &str)]) -> String {
    let mut command = tokio::process::Command::new("bash");
    command.args(["-euo", "pipefail", "-c", script]);
    for (k, v) in env {
        command.env(k, v);
    }
    let out = within("a shell pipeline", command.output())
        .await
        .expect("run bash");
    assert!(
        out.status.success(),
        "{script}\nfailed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The `<li>` lines of a listing page.
fn items(body: &str) -> Vec<&str> {
    body.lines().filter(|l| l.starts_with("<li>")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn tfenv_and_tenv_read_the_html_listings_newest_first() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("origin");
    // Listed out of order, with a pre-release and versions whose text sorts otherwise.
    let zip = terraform_origin(
        &root,
        &["1.9.8", "1.11.4", "1.10.0-rc1", "1.10.5", "1.10.0"],
    );
    tofu_origin(&root);
    let origin = StaticServer::start(&ca, &root);
    let (m, _registry) = mirror(&ca, work.path(), &origin, false).await;
    let c = https_client(&ca, &[]);
    let newest_first = ["1.11.4", "1.10.5", "1.10.0", "1.10.0-rc1", "1.9.8"];

    let page = get(&c, &m.url("releases/terraform/")).await;
    assert_eq!(page.status, 200, "{}", page.text());
    assert_eq!(page.content_type(), "text/html; charset=utf-8");
    assert!(
        page.headers["content-security-policy"]
            .to_str()
            .unwrap()
            .starts_with("default-src 'none'")
    );
    let body = page.text();
    let expected: Vec<String> = newest_first
        .iter()
        .map(|v| format!("<li><a href=\"{v}/\">terraform_{v}</a></li>"))
        .collect();
    assert_eq!(items(&body), expected, "{body}");
    for loads in ["<script", "<link", "<img", "<style"] {
        assert!(!body.contains(loads), "plain HTML: {body}");
    }

    // tfenv's list-remote, as it runs it: the page's every x.y.z, in order, the first the latest.
    let ca_file = ca.write_ca(work.path());
    let remote = m.url("releases");
    let remote = remote.trim_end_matches('/');
    let listed = bash(
        &format!(
            "curl -sSf --cacert \"$CA\" \"${{TFENV_REMOTE}}/terraform/\" | grep -o -E \"{TFENV_PATTERN}\" | uniq"
        ),
        &[
            ("CA", ca_file.to_str().unwrap()),
            ("TFENV_REMOTE", remote),
        ],
    )
    .await;
    assert_eq!(listed, newest_first.join("\n") + "\n");

    // tenv asks for the listing without the slash, follows the redirect, and reads each
    // link's target.
    let no_redirects = https_client_no_redirects(&ca);
    let moved = get(&no_redirects, &m.url("releases/terraform")).await;
    assert_eq!(moved.status, 301);
    assert_eq!(moved.headers["location"], "/releases/terraform/");
    let followed = get(&c, &m.url("releases/terraform")).await;
    assert_eq!(followed.status, 200);
    assert_eq!(followed.text(), body);

    // One release's listing: each file the mirror serves for it, linked relative to it.
    let release = get(&c, &m.url("releases/terraform/1.11.4/")).await;
    assert_eq!(release.status, 200);
    let release = release.text();
    let files = [
        "terraform_1.11.4_SHA256SUMS",
        "terraform_1.11.4_SHA256SUMS.72D7468F.sig",
        "terraform_1.11.4_SHA256SUMS.sig",
        "terraform_1.11.4_linux_amd64.zip",
    ];
    let expected: Vec<String> = files
        .iter()
        .map(|f| format!("<li><a href=\"{f}\">{f}</a></li>"))
        .collect();
    assert_eq!(items(&release), expected, "{release}");
    let listing_url = url::Url::parse(&m.url("releases/terraform/1.11.4/")).unwrap();
    let linked = listing_url.join(files[3]).unwrap();
    let got = get(&c, linked.as_str()).await;
    assert!(
        got.status == 200 && got.body == zip,
        "the linked zip downloads"
    );
    let moved = get(&no_redirects, &m.url("releases/terraform/1.11.4")).await;
    assert_eq!(moved.status, 301);
    assert_eq!(moved.headers["location"], "/releases/terraform/1.11.4/");
    assert_eq!(
        get(&c, &m.url("releases/terraform/9.9.9/")).await.status,
        404
    );

    // The same for tofu: its zips and .tar.gz files, OpenTofu's packages (.deb) left out.
    let tofu = get(&c, &m.url("releases/tofu/")).await;
    assert_eq!(tofu.status, 200);
    assert_eq!(
        items(&tofu.text()),
        [
            "<li><a href=\"1.8.1/\">tofu_1.8.1</a></li>",
            "<li><a href=\"1.8.0/\">tofu_1.8.0</a></li>"
        ]
    );
    let tofu_release = get(&c, &m.url("releases/tofu/1.8.1/")).await;
    assert_eq!(
        items(&tofu_release.text()),
        [
            "<li><a href=\"tofu_1.8.1_SHA256SUMS\">tofu_1.8.1_SHA256SUMS</a></li>",
            "<li><a href=\"tofu_1.8.1_SHA256SUMS.gpgsig\">tofu_1.8.1_SHA256SUMS.gpgsig</a></li>",
            "<li><a href=\"tofu_1.8.1_linux_amd64.tar.gz\">tofu_1.8.1_linux_amd64.tar.gz</a></li>",
            "<li><a href=\"tofu_1.8.1_linux_amd64.zip\">tofu_1.8.1_linux_amd64.zip</a></li>",
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tofuenv_lists_and_downloads_through_the_mirror() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("origin");
    let (zip, sums, signature) = tofu_origin(&root);
    let origin = StaticServer::start(&ca, &root);
    let (m, _registry) = mirror(&ca, work.path(), &origin, false).await;
    let c = https_client(&ca, &[]);
    let ca_file = ca.write_ca(work.path());
    let remote = format!("{}/tofu", m.url("releases").trim_end_matches('/'));
    let env = [
        ("CA", ca_file.to_str().unwrap()),
        ("TOFUENV_REMOTE", remote.as_str()),
    ];

    // tofuenv list-remote: GitHub's releases API, newest first, one name per release.
    let names = bash(
        "curl -sSf --cacert \"$CA\" -H \"Accept: application/vnd.github+json\" \"${TOFUENV_REMOTE}\" | jq -r \".[].name\"",
        &env,
    )
    .await;
    assert_eq!(names, "v1.8.1\nv1.8.0\n");
    let listed = bash(
        &format!(
            "curl -sSf --cacert \"$CA\" -H \"Accept: application/vnd.github+json\" \"${{TOFUENV_REMOTE}}\" | jq -r \".[].name\" | grep -o -E \"{TFENV_PATTERN}\" | uniq"
        ),
        &env,
    )
    .await;
    assert_eq!(listed, "1.8.1\n1.8.0\n");
    let json = send(&remote, c.get(&remote).header("accept", "application/json")).await;
    assert_eq!(json.status, 200);
    assert_eq!(json.headers["vary"], "accept");
    let first = &json.json()[0];
    assert_eq!(first["tag_name"], "v1.8.1");
    assert_eq!(first["prerelease"], false);
    // Anything else asking for it is sent to the HTML listing.
    let moved = get(&https_client_no_redirects(&ca), &remote).await;
    assert_eq!(moved.status, 301);
    assert_eq!(moved.headers["location"], "/releases/tofu/");
    assert_eq!(moved.headers["vary"], "accept");

    // tofuenv install 1.8.1, its downloads as it makes them, and its check of the zip.
    let dir = work.path().join("tofuenv_download");
    std::fs::create_dir_all(&dir).unwrap();
    let status = bash(
        "cd \"$DIR\"; url=\"${TOFUENV_REMOTE}/download/v1.8.1\"\n\
         curl -s --cacert \"$CA\" -w \"%{http_code}\" -f -L -o tofu_1.8.1_linux_amd64.zip \"$url/tofu_1.8.1_linux_amd64.zip\"\n\
         curl -s --cacert \"$CA\" -f -L -o tofu_1.8.1_SHA256SUMS \"$url/tofu_1.8.1_SHA256SUMS\"\n\
         curl -s --cacert \"$CA\" -f -L -o tofu_1.8.1_SHA256SUMS.gpgsig \"$url/tofu_1.8.1_SHA256SUMS.gpgsig\"\n\
         sha256sum -c <(grep -F tofu_1.8.1_linux_amd64.zip tofu_1.8.1_SHA256SUMS) >&2",
        &[env[0], env[1], ("DIR", dir.to_str().unwrap())],
    )
    .await;
    assert_eq!(status, "200", "tofuenv wants a 200 for the zip");
    assert!(std::fs::read(dir.join("tofu_1.8.1_linux_amd64.zip")).unwrap() == zip);
    assert!(std::fs::read(dir.join("tofu_1.8.1_SHA256SUMS")).unwrap() == sums);
    assert!(std::fs::read(dir.join("tofu_1.8.1_SHA256SUMS.gpgsig")).unwrap() == signature);

    // The same files as under tofu/<version>/: the zip is not downloaded again.
    let same = get(&c, &m.url("releases/tofu/1.8.1/tofu_1.8.1_linux_amd64.zip")).await;
    assert!(same.status == 200 && same.body == zip);
    let metrics = m.metrics(&c).await;
    assert_eq!(
        sample(
            &metrics,
            "provender_upstream_requests_total{host=\"localhost\",operation=\"archive\",outcome=\"ok\"}"
        ),
        1,
        "one origin download for both paths"
    );
    let head = c
        .head(format!(
            "{remote}/download/v1.8.1/tofu_1.8.1_linux_amd64.zip"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(
        head.headers()["etag"].to_str().unwrap(),
        format!("\"{}\"", sha256_hex(&zip))
    );
    for path in [
        "download/1.8.1/tofu_1.8.1_linux_amd64.zip",
        "download/v1.8.1/terraform_1.8.1_linux_amd64.zip",
    ] {
        let none = get(&c, &format!("{remote}/{path}")).await;
        assert_eq!(none.status, 404, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn api_json_names_only_the_files_the_mirror_serves_whatever_the_vendor_lists() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("origin");
    tofu_origin(&root);
    // The vendor's list is unsigned: a hostile one names files of other products and versions,
    // and names that are paths or URLs.
    let hostile = [
        "tofu_1.8.1_linux_amd64.zip",
        "terraform_1.8.1_linux_amd64.zip",
        "tofu_1.8.0_linux_amd64.zip",
        "tofu_1.8.1_linux_amd64.zip/../../../etc/passwd",
        "../tofu_1.8.1_linux_amd64.zip",
        "tofu_1.8.1_../../linux_amd64.zip",
        "https://evil.example/tofu_1.8.1_linux_amd64.zip",
        "tofu_1.8.1_linux_amd64.zip?download=1",
        "tofu_1.8.1_SHA256SUMS",
        "tofu_1.8.1_SHA256SUMS.gpgsig",
        "tofu_1.8.1_SHA256SUMS.gpgsig.exe",
        "tofu_1.8.1_linux_amd64.zip",
    ];
    let api = serde_json::json!({"versions": [{"id": "1.8.1", "files": hostile}]});
    write_api_json(&root, &api);
    let origin = StaticServer::start(&ca, &root);
    let (m, _registry) = mirror(&ca, work.path(), &origin, false).await;
    let c = https_client(&ca, &[]);
    let served = get(&c, &m.url("releases/tofu/api.json")).await;
    assert_eq!(served.status, 200);
    assert_eq!(
        served.json(),
        serde_json::json!({"versions": [{"id": "1.8.1", "files": [
            "tofu_1.8.1_linux_amd64.zip",
            "tofu_1.8.1_SHA256SUMS",
            "tofu_1.8.1_SHA256SUMS.gpgsig",
        ]}]}),
        "this release's own files, each once, in the vendor's order"
    );
    // The release's listing page goes by the same rule.
    let page = get(&c, &m.url("releases/tofu/1.8.1/")).await;
    assert_eq!(page.status, 200);
    let page = String::from_utf8_lossy(&page.body).into_owned();
    let links: Vec<&str> = page.lines().filter(|l| l.starts_with("<li>")).collect();
    assert_eq!(
        links,
        [
            r#"<li><a href="tofu_1.8.1_SHA256SUMS">tofu_1.8.1_SHA256SUMS</a></li>"#,
            r#"<li><a href="tofu_1.8.1_SHA256SUMS.gpgsig">tofu_1.8.1_SHA256SUMS.gpgsig</a></li>"#,
            r#"<li><a href="tofu_1.8.1_linux_amd64.zip">tofu_1.8.1_linux_amd64.zip</a></li>"#,
        ],
        "{page}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_releases_page_shows_the_cache_and_copies_each_installers_set_up() {
    let ca = TestCa::new();
    let work = tempfile::tempdir().unwrap();
    let root = work.path().join("origin");
    terraform_origin(&root, &["1.10.5", "1.11.4"]);
    tofu_origin(&root);
    let origin = StaticServer::start(&ca, &root);
    let (m, _registry) = mirror(&ca, work.path(), &origin, false).await;
    let c = https_client(&ca, &[]);
    // An installer's visit: the list, then a zip.
    assert_eq!(
        get(&c, &m.url("releases/terraform/index.json"))
            .await
            .status,
        200
    );
    let zip_url = m.url("releases/terraform/1.11.4/terraform_1.11.4_linux_amd64.zip");
    assert_eq!(get(&c, &zip_url).await.status, 200);
    poll(std::time::Duration::from_secs(10), async || {
        m.cache_dir
            .join("releases/terraform/1.11.4/terraform_1.11.4_linux_amd64.zip.json")
            .exists()
            .then_some(())
    })
    .await
    .expect("the zip is committed");

    let base = m.url.as_str();
    let remote = format!("{base}releases");
    let browser = Browser::start().await;
    browser.goto(base).await;
    browser.click_to_page("nav a[href$='-/releases']").await;
    browser.allow_clipboard().await;
    assert_eq!(
        browser.client.title().await.unwrap(),
        "CLI releases · provender"
    );
    let shown = rows(&browser).await;
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert!(
        shown[0].contains("1.11.4") && shown[0].contains("linux_amd64"),
        "{shown:?}"
    );
    let text = browser.text("main").await;
    assert!(
        text.contains("The vendor's list (2 releases, the newest 1.11.4)"),
        "{text}"
    );
    assert!(text.contains("No tofu zip is cached yet"), "{text}");

    // Each installer's lines, with this mirror's URL; copied exactly.
    let tfenv = snippet(&browser, "tfenv").await;
    assert_eq!(tfenv, format!("export TFENV_REMOTE={remote}\n"));
    browser
        .find("button[data-copy='tfenv']")
        .await
        .click()
        .await
        .unwrap();
    clipboard_becomes(&browser, &tfenv).await;
    assert_eq!(
        snippet(&browser, "tofuenv").await,
        format!("export TOFUENV_REMOTE={remote}/tofu\n")
    );
    let tenv_tofu = snippet(&browser, "tenv-tofu").await;
    assert!(
        tenv_tofu.contains(&format!(
            "export TOFUENV_URL_TEMPLATE='{remote}/tofu/{{{{ .Version }}}}/{{{{ .Artifact }}}}'\n"
        )),
        "{tenv_tofu}"
    );
    assert!(tenv_tofu.contains(&format!("export TOFUENV_LIST_URL={remote}/tofu/api.json\n")));
    assert!(
        snippet(&browser, "hc-install")
            .await
            .contains(&format!("ApiBaseURL: \"{remote}\","))
    );
    assert_eq!(
        snippet(&browser, "tofudl").await,
        format!(
            "export TOFUDL_API_URL={remote}/tofu/api.json\n\
             export TOFUDL_DOWNLOAD_MIRROR_URL_TEMPLATE='{remote}/tofu/{{{{ .Version }}}}/{{{{ .Artifact }}}}'\n"
        )
    );
    let mise = snippet(&browser, "mise").await;
    assert_eq!(
        mise,
        format!(
            "export MISE_URL_REPLACEMENTS='{{\"https://releases.hashicorp.com\":\"{remote}\"}}'\nmise install terraform@1.11.4\n"
        )
    );
    let curl = snippet(&browser, "curl-terraform").await;
    let expected = format!(
        "curl -fO {remote}/terraform/1.11.4/terraform_1.11.4_linux_amd64.zip\n\
         curl -fO {remote}/terraform/1.11.4/terraform_1.11.4_SHA256SUMS\n\
         sha256sum -c --ignore-missing terraform_1.11.4_SHA256SUMS\n"
    );
    assert_eq!(curl, expected);
    browser
        .find("button[data-copy='curl-terraform']")
        .await
        .click()
        .await
        .unwrap();
    clipboard_becomes(&browser, &expected).await;
    // The copied lines work: run them.
    let ca_file = ca.write_ca(work.path());
    let dir = work.path().join("by-hand");
    std::fs::create_dir_all(&dir).unwrap();
    bash(
        &format!(
            "cd \"$DIR\"\n{}",
            expected.replace("curl ", "curl --cacert \"$CA\" ")
        ),
        &[
            ("CA", ca_file.to_str().unwrap()),
            ("DIR", dir.to_str().unwrap()),
        ],
    )
    .await;
    assert!(
        browser.find_all("#curl-tofu").await.is_empty(),
        "no tofu zip cached, no curl lines for it"
    );
    check_page(&browser, &m, "releases").await;

    // The same view in the JSON API.
    let api = get(&c, &m.url("-/api/v1/releases")).await;
    assert_eq!(api.status, 200);
    let api = api.json();
    assert_eq!(api["api_version"], 1);
    assert_eq!(api["enabled"], true);
    let terraform = &api["products"][0];
    assert_eq!(terraform["product"], "terraform");
    assert_eq!(terraform["list"]["newest"], "1.11.4");
    assert_eq!(terraform["releases"][0]["version"], "1.11.4");
    assert_eq!(
        terraform["releases"][0]["zips"][0]["platform"],
        "linux_amd64"
    );
    assert_eq!(api["products"][1]["product"], "tofu");
    assert_eq!(
        get(&c, &m.url("-/api/v1/")).await.json()["documents"]["releases"],
        "releases"
    );

    // With [releases] off, the page says so and how to turn it on.
    let registry = FakeOrigin::start(&ca, &[REGISTRY], vec![]).await;
    let off = TestMirror::start(&ca, &registry).await;
    browser.goto(&off.url("-/releases")).await;
    let text = browser.text("main").await;
    assert!(
        text.contains("does not serve the CLIs' own releases"),
        "{text}"
    );
    assert!(text.contains("enabled = true"), "{text}");
    assert!(browser.find_all("pre").await.is_empty(), "no set-up lines");
    check_page(&browser, &off, "releases-off").await;
    let api = get(&c, &off.url("-/api/v1/releases")).await.json();
    assert_eq!(api["enabled"], false);
    assert_eq!(api["products"], serde_json::json!([]));
    browser.close().await;
}
