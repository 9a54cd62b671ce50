//! Operators' and approvers' side of the version policy:
//! - `provender policy` on the store: a waiver admits a denied version (`check` exits 0), a hold
//!   refuses one (exit 1), a revocation ends a waiver; `history` shows every record with who,
//!   when and why; a bad kind, version or `--until` is a usage error (78) naming the argument;
//!   `list --json` and `history --json` are the API's documents;
//! - the API: `GET -/api/v1/policy` lists a cached version the rules deny, with its rule and the
//!   clients that fetched it (the usage counts), and `provender usage --refused` says the same;
//!   `POST -/api/v1/policy/approvals` records an approver's hold or waiver (201, under the
//!   client's name) and the doors obey it at once; a client without `approve = true` gets 403,
//!   bad input 400 naming the field, a revocation of nothing 404, and with authentication off
//!   every approval is refused (403: there is no one to name);
//! - the page, in the real browser with axe-core: a held, a denied and a waived version with
//!   their rules, the rules, the audit trail, and an approver's waive form that works.
//!
//! A version can only be refused in the cache if it was cached first: each mirror here is
//! filled without rules, stopped (which writes its usage counts), and started again on the same
//! cache with them.

use std::time::Duration;

use http::StatusCode;
use serde_json::{Value, json};

use crate::pages::check_page;
use crate::support::browser::Browser;
use crate::support::cli::{config_file, provender};
use crate::support::http::{get, send};
use crate::support::origin::{FakeOrigin, ProviderSpec};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror, config_toml};
use crate::support::{https_client, poll, sample};

const APPROVER_TOKEN: &str = "approver-token-0123456789abcdef";
const READER_TOKEN: &str = "reader-token-0123456789abcdef00";

/// Authentication with two named clients: `platform` may approve, `ci` may not.
fn auth_toml() -> String {
    format!(
        r#"
[auth]
url_signing_key = "{key}"
session_ttl = "2h"

[[auth.clients]]
name = "platform"
token = "{APPROVER_TOKEN}"

[[auth.clients]]
name = "ci"
token = "{READER_TOKEN}"

[[auth.rules]]
name = "platform-team"
clients = ["platform"]
approve = true

[[auth.rules]]
name = "everyone"
clients = ["*"]
"#,
        key = "k".repeat(40)
    )
}

/// Rules denying acme/foo 1.0.0 and everything from 1.2.0 on.
const RULES: &str = r#"
[policy]
[[policy.rules]]
name = "foo-1.0.0-regression"
providers = ["registry.terraform.io/acme/foo"]
versions = "1.0.0"
action = "deny"
reason = "1.0.0 deletes buckets"
link = "https://example.com/advisories/7"

[[policy.rules]]
name = "foo-not-yet"
providers = ["registry.terraform.io/acme/*"]
versions = ">= 1.2.0"
action = "deny"
reason = "not reviewed yet"
"#;

/// A mirror whose cache holds acme/foo 1.0.0, 1.1.0 and 1.2.0 (fetched by `ci`, the usage
/// counts written), started again with `auth` and the [`RULES`].
async fn filled_then_ruled(
    ca: &TestCa,
    origin: &FakeOrigin,
    auth: &str,
) -> (TestMirror, TestMirror) {
    let mut first = TestMirror::start_with(
        ca,
        origin,
        MirrorOptions {
            extra_toml: &format!("{auth}\n[usage]\nflush_interval = \"1s\"\n"),
            ..Default::default()
        },
    )
    .await;
    let client = https_client(ca, &[]);
    for version in ["1.0.0", "1.1.0", "1.2.0"] {
        let zip = format!("{REGISTRY}/acme/foo/terraform-provider-foo_{version}_linux_amd64.zip");
        let got = send(&zip, client.get(first.url(&zip)).bearer_auth(READER_TOKEN)).await;
        assert_eq!(got.status, StatusCode::OK, "{zip}: {}", got.text());
    }
    poll(Duration::from_secs(10), async || {
        let metrics = send(
            "metrics",
            client
                .get(first.root_url("/metrics"))
                .bearer_auth(READER_TOKEN),
        )
        .await
        .text();
        (sample(&metrics, "provender_cache_archives") == 3).then_some(())
    })
    .await
    .expect("the archives are committed");
    first.stop().await;
    let ruled = TestMirror::start_with(
        ca,
        origin,
        MirrorOptions {
            cache_dir: Some(&first.cache_dir),
            extra_toml: &format!("{auth}\n{RULES}"),
            ..Default::default()
        },
    )
    .await;
    (first, ruled)
}

async fn foo_origin(ca: &TestCa) -> FakeOrigin {
    FakeOrigin::start(
        ca,
        &[REGISTRY],
        vec![ProviderSpec::new(
            "acme",
            "foo",
            &["1.0.0", "1.1.0", "1.2.0"],
            &[("linux", "amd64")],
        )],
    )
    .await
}

/// `POST -/api/v1/policy/approvals` with `token` (none: no credentials).
async fn post_approval(
    client: &reqwest::Client,
    mirror: &TestMirror,
    token: Option<&str>,
    body: Value,
) -> crate::support::http::Got {
    let url = mirror.url("-/api/v1/policy/approvals");
    let mut req = client
        .post(&url)
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    send(&url, req).await
}

fn approval(version: &str, action: &str, reason: &str) -> Value {
    json!({
        "kind": "provider",
        "address": format!("{REGISTRY}/acme/foo"),
        "version": version,
        "action": action,
        "reason": reason,
    })
}

/// The entry of `version` among a policy view's judged versions.
fn judged<'a>(view: &'a Value, version: &str) -> Option<&'a Value> {
    view["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["version"] == version)
}

#[tokio::test(flavor = "multi_thread")]
async fn operators_waive_hold_and_revoke_from_the_command_line_with_an_audit_trail() {
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let nowhere = "127.0.0.1:9".parse().unwrap();
    let config = config_file(
        dir.path(),
        "provender.toml",
        &cache,
        nowhere,
        &ca,
        &format!("offline = true\n{RULES}"),
    );
    let config = config.to_str().unwrap();
    let foo = "registry.terraform.io/acme/foo";
    let check = async |version: &str| {
        provender(&["policy", "check", "-c", config, "provider", foo, version]).await
    };

    // Denied by a rule: check names it and exits 1.
    let denied = check("1.0.0").await;
    denied.fails(1);
    assert!(
        denied.stdout.contains("foo-1.0.0-regression"),
        "{}",
        denied.out()
    );
    assert!(
        denied.stdout.contains("1.0.0 deletes buckets"),
        "{}",
        denied.out()
    );
    check("1.1.0").await.ok();

    // A waiver admits it; a hold refuses an admitted one; a revocation ends the waiver.
    provender(&[
        "policy",
        "waive",
        "-c",
        config,
        "provider",
        "acme/foo",
        "1.0.0",
        "--reason",
        "the fix for INC-42 needs it",
        "--by",
        "alice",
        "--until",
        "2099-01-31",
    ])
    .await
    .ok();
    let admitted = check("1.0.0").await;
    admitted.ok();
    assert!(
        admitted.stdout.contains("waived by alice"),
        "{}",
        admitted.out()
    );
    provender(&[
        "policy",
        "hold",
        "-c",
        config,
        "provider",
        foo,
        "1.1.0",
        "--reason",
        "investigating a report",
    ])
    .await
    .ok();
    let held = check("1.1.0").await;
    held.fails(1);
    assert!(
        held.stdout.contains("held by an operator"),
        "{}",
        held.out()
    );
    assert!(
        held.stdout.contains("rule: approval (hold)"),
        "{}",
        held.out()
    );
    provender(&[
        "policy",
        "revoke",
        "-c",
        config,
        "provider",
        foo,
        "1.0.0",
        "--reason",
        "INC-42 is over",
        "--by",
        "bob",
    ])
    .await
    .ok();
    check("1.0.0").await.fails(1);
    // Nothing left to revoke.
    let nothing = provender(&[
        "policy", "revoke", "-c", config, "provider", foo, "1.0.0", "--reason", "again",
    ])
    .await;
    nothing.fails(78);
    assert!(
        nothing.stderr.contains("no waiver or hold in force"),
        "{}",
        nothing.out()
    );

    // The audit trail: all three, oldest first, with who, when, why and until when.
    let history = provender(&["policy", "history", "-c", config, "--json"]).await;
    history.ok();
    let doc: Value = serde_json::from_str(&history.stdout).unwrap();
    assert_eq!(doc["api_version"], 1);
    let records = doc["history"].as_array().unwrap();
    let summary: Vec<(&str, &str, &str, &str)> = records
        .iter()
        .map(|r| {
            (
                r["action"].as_str().unwrap(),
                r["version"].as_str().unwrap(),
                r["by"].as_str().unwrap(),
                r["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("waive", "1.0.0", "alice", "the fix for INC-42 needs it"),
            ("hold", "1.1.0", "operator", "investigating a report"),
            ("revoke", "1.0.0", "bob", "INC-42 is over"),
        ]
    );
    assert_eq!(records[0]["address"], foo, "short addresses are made whole");
    assert_eq!(records[0]["until"], 4_073_500_800u64);
    assert!(
        records
            .iter()
            .all(|r| r["at"].as_u64().unwrap() > 1_700_000_000)
    );
    let table = provender(&["policy", "history", "-c", config]).await;
    table.ok();
    assert!(table.stdout.contains("INC-42 is over") && table.stdout.contains("bob"));

    // `list --json`: the rules with where they are written, the approvals in force.
    let list = provender(&["policy", "list", "-c", config, "--json"]).await;
    list.ok();
    let view: Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(view["default"], "allow");
    assert_eq!(view["rules"][0]["name"], "foo-1.0.0-regression");
    assert_eq!(view["rules"][0]["place"], "policy.rules[0]");
    assert_eq!(view["rules"][1]["versions"], ">= 1.2.0");
    let in_force = view["approvals"].as_array().unwrap();
    assert_eq!(in_force.len(), 1, "{view}");
    assert_eq!(in_force[0]["action"], "hold");
    assert_eq!(view["history"].as_array().unwrap().len(), 3);

    // Usage errors name the argument, and exit 78 as every command's do.
    for (args, named) in [
        (
            vec![
                "waive", "-c", config, "thing", foo, "1.0.0", "--reason", "x",
            ],
            "KIND",
        ),
        (
            vec![
                "waive", "-c", config, "provider", foo, "one", "--reason", "x",
            ],
            "VERSION",
        ),
        (
            vec![
                "waive", "-c", config, "provider", "a/b/c/d", "1.0.0", "--reason", "x",
            ],
            "ADDRESS",
        ),
        (
            vec![
                "hold", "-c", config, "provider", foo, "1.0.0", "--reason", "x", "--until", "soon",
            ],
            "--until",
        ),
        (
            vec![
                "hold",
                "-c",
                config,
                "provider",
                foo,
                "1.0.0",
                "--reason",
                "x",
                "--until",
                "2001-01-01",
            ],
            "--until",
        ),
        (
            vec!["hold", "-c", config, "provider", foo, "1.0.0"],
            "--reason",
        ),
        (vec!["check", "-c", config, "thing", foo, "1.0.0"], "KIND"),
    ] {
        let run = provender(&[&["policy"], args.as_slice()].concat()).await;
        run.fails(78);
        assert!(
            run.stderr.contains(&format!("{named}:")),
            "{args:?} names {named}: {}",
            run.out()
        );
    }
    let after = provender(&["policy", "history", "-c", config, "--json"]).await;
    let doc: Value = serde_json::from_str(&after.stdout).unwrap();
    assert_eq!(
        doc["history"].as_array().unwrap().len(),
        3,
        "nothing recorded"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn approvers_approve_through_the_api_which_shows_refused_versions_and_who_used_them() {
    let ca = TestCa::new();
    let origin = foo_origin(&ca).await;
    let (_first, mirror) = filled_then_ruled(&ca, &origin, &auth_toml()).await;
    let client = https_client(&ca, &[]);
    let view_url = mirror.url("-/api/v1/policy");

    // The view: the denied versions with their rules, and who fetched them.
    let view = send(&view_url, client.get(&view_url).bearer_auth(READER_TOKEN))
        .await
        .json();
    assert_eq!(view["api_version"], 1);
    let denied = judged(&view, "1.0.0").expect("1.0.0 is refused");
    assert_eq!(denied["verdict"], "denied");
    assert_eq!(denied["rule"], "foo-1.0.0-regression");
    assert_eq!(denied["action"], "deny");
    assert_eq!(denied["reason"], "1.0.0 deletes buckets");
    assert_eq!(denied["link"], "https://example.com/advisories/7");
    assert_eq!(denied["address"], format!("{REGISTRY}/acme/foo"));
    assert_eq!(denied["uses"], 1);
    assert_eq!(denied["users"][0]["client"], "ci");
    assert_eq!(judged(&view, "1.2.0").unwrap()["rule"], "foo-not-yet");
    assert!(judged(&view, "1.1.0").is_none(), "1.1.0 is admitted");
    assert_eq!(view["rules"].as_array().unwrap().len(), 2);

    // The same impact from the command line, on the same store.
    let dir = tempfile::tempdir().unwrap();
    let toml = config_toml(
        &ca,
        dir.path(),
        &mirror.cache_dir,
        "127.0.0.1:0",
        origin.addr(),
        &MirrorOptions {
            extra_toml: RULES,
            ..Default::default()
        },
    );
    let config = dir.path().join("provender.toml");
    std::fs::write(&config, toml).unwrap();
    let refused = provender(&[
        "usage",
        "--refused",
        "--json",
        "-c",
        config.to_str().unwrap(),
    ])
    .await;
    refused.ok();
    let uses: Value = serde_json::from_str(&refused.stdout).unwrap();
    let uses = uses.as_array().unwrap();
    let listed: Vec<(&str, &str, &str)> = uses
        .iter()
        .map(|u| {
            (
                u["version"].as_str().unwrap(),
                u["client"].as_str().unwrap(),
                u["rule"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("1.0.0", "ci", "foo-1.0.0-regression"),
            ("1.2.0", "ci", "foo-not-yet")
        ],
        "only the refused versions' uses, each with its rule"
    );
    let all = provender(&["usage", "--json", "-c", config.to_str().unwrap()]).await;
    assert_eq!(
        serde_json::from_str::<Value>(&all.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // An approver holds 1.1.0: recorded under its client name, obeyed at once.
    let v110 = mirror.url(&format!("{REGISTRY}/acme/foo/1.1.0.json"));
    let fetch_110 = async || send(&v110, client.get(&v110).bearer_auth(READER_TOKEN)).await;
    assert_eq!(fetch_110().await.status, StatusCode::OK);
    let held = post_approval(
        &client,
        &mirror,
        Some(APPROVER_TOKEN),
        approval("1.1.0", "hold", "a report of data loss"),
    )
    .await;
    assert_eq!(held.status, StatusCode::CREATED, "{}", held.text());
    let record = &held.json()["approval"];
    assert_eq!(record["by"], "platform");
    assert_eq!(record["action"], "hold");
    assert!(record["id"].as_str().is_some_and(|id| !id.is_empty()));
    let refused_now = fetch_110().await;
    assert_eq!(
        refused_now.status,
        StatusCode::TOO_EARLY,
        "{}",
        refused_now.text()
    );
    assert_eq!(refused_now.json()["error"]["policy"]["by"], "platform");

    // ... and waives 1.0.0 until a date.
    let mut waive = approval("1.0.0", "waive", "INC-42 needs it");
    waive["until"] = "2099-01-31".into();
    let waived = post_approval(&client, &mirror, Some(APPROVER_TOKEN), waive).await;
    assert_eq!(waived.status, StatusCode::CREATED, "{}", waived.text());
    let v100 = mirror.url(&format!("{REGISTRY}/acme/foo/1.0.0.json"));
    assert_eq!(
        send(&v100, client.get(&v100).bearer_auth(READER_TOKEN))
            .await
            .status,
        StatusCode::OK
    );
    let view = send(&view_url, client.get(&view_url).bearer_auth(READER_TOKEN))
        .await
        .json();
    let held_entry = judged(&view, "1.1.0").unwrap();
    assert_eq!(
        (
            &held_entry["verdict"],
            &held_entry["rule"],
            &held_entry["by"]
        ),
        (&json!("held"), &json!("approval"), &json!("platform"))
    );
    assert_eq!(judged(&view, "1.0.0").unwrap()["verdict"], "waived");
    assert_eq!(view["approvals"].as_array().unwrap().len(), 2);
    let history_url = mirror.url("-/api/v1/policy/history");
    let history = send(
        &history_url,
        client.get(&history_url).bearer_auth(READER_TOKEN),
    )
    .await
    .json();
    let actions: Vec<&str> = history["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["hold", "waive"]);

    // A client without approve = true may not; nor may anyone without credentials.
    let refused = post_approval(
        &client,
        &mirror,
        Some(READER_TOKEN),
        approval("1.2.0", "waive", "I want it"),
    )
    .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.text());
    assert!(refused.message().contains("approve"), "{}", refused.text());
    let anonymous = post_approval(&client, &mirror, None, approval("1.2.0", "waive", "x")).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);

    // Bad input is a 400 naming the field; revoking nothing is a 404.
    let mut bad_kind = approval("1.2.0", "waive", "x");
    bad_kind["kind"] = "thing".into();
    let mut bad_until = approval("1.2.0", "waive", "x");
    bad_until["until"] = "later".into();
    let mut no_reason = approval("1.2.0", "waive", "x");
    no_reason["reason"] = " ".into();
    for (body, field) in [
        (bad_kind, "kind"),
        (approval("1.x", "waive", "x"), "version"),
        (approval("1.2.0", "bless", "x"), "action"),
        (bad_until, "until"),
        (no_reason, "reason"),
        (json!({"kind": "provider"}), "address"),
    ] {
        let got = post_approval(&client, &mirror, Some(APPROVER_TOKEN), body).await;
        assert_eq!(
            got.status,
            StatusCode::BAD_REQUEST,
            "{field}: {}",
            got.text()
        );
        assert_eq!(got.code(), "bad_request");
        assert!(got.message().contains(field), "{field}: {}", got.text());
    }
    let nothing = post_approval(
        &client,
        &mirror,
        Some(APPROVER_TOKEN),
        approval("1.2.0", "revoke", "nothing to end"),
    )
    .await;
    assert_eq!(nothing.status, StatusCode::NOT_FOUND, "{}", nothing.text());
    let history = send(
        &history_url,
        client.get(&history_url).bearer_auth(READER_TOKEN),
    )
    .await
    .json();
    assert_eq!(
        history["history"].as_array().unwrap().len(),
        2,
        "nothing else recorded"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_authentication_off_no_one_approves_through_the_api() {
    let ca = TestCa::new();
    let origin = foo_origin(&ca).await;
    let mirror = TestMirror::start_with_toml(&ca, &origin, RULES).await;
    let client = https_client(&ca, &[]);
    let got = post_approval(&client, &mirror, None, approval("1.0.0", "waive", "x")).await;
    assert_eq!(got.status, StatusCode::FORBIDDEN, "{}", got.text());
    assert!(
        got.message().contains("authentication is off"),
        "{}",
        got.text()
    );
    let history = get(&client, &mirror.url("-/api/v1/policy/history")).await;
    assert_eq!(history.status, StatusCode::OK);
    assert_eq!(history.json()["history"], json!([]));
    // The view is open like every other document without authentication.
    let view = get(&client, &mirror.url("-/api/v1/policy")).await;
    assert_eq!(view.status, StatusCode::OK);
    assert_eq!(view.json()["rules"][1]["name"], "foo-not-yet");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_policy_page_shows_held_denied_and_waived_versions_and_an_approver_waives_one() {
    let ca = TestCa::new();
    let origin = foo_origin(&ca).await;
    let (_first, mirror) = filled_then_ruled(&ca, &origin, &auth_toml()).await;
    let client = https_client(&ca, &[]);
    // 1.1.0 is held and 1.0.0 waived by the platform team; 1.2.0 stays denied by its rule.
    for (version, action) in [("1.1.0", "hold"), ("1.0.0", "waive")] {
        let got = post_approval(
            &client,
            &mirror,
            Some(APPROVER_TOKEN),
            approval(version, action, &format!("{action} for the page")),
        )
        .await;
        assert_eq!(got.status, StatusCode::CREATED, "{}", got.text());
    }

    let browser = Browser::start().await;
    browser.goto(&mirror.url("-/policy")).await;
    browser
        .find("#token")
        .await
        .send_keys(APPROVER_TOKEN)
        .await
        .unwrap();
    browser.click_to_page("form.sign-in button").await;
    let url = browser.client.current_url().await.unwrap();
    assert!(url.path().ends_with("-/policy"), "{url}");
    assert_eq!(
        browser.client.title().await.unwrap(),
        "Version policy · provender"
    );
    assert_eq!(
        browser.text("nav a[aria-current='page']").await,
        "Policy",
        "linked from the navigation"
    );
    let refused = row_texts(&browser, "tr.refused").await;
    assert_eq!(refused.len(), 2, "{refused:#?}");
    let row_of = |rows: &[String], version: &str| {
        rows.iter()
            .find(|r| r.contains(version))
            .cloned()
            .unwrap_or_else(|| panic!("no row of {version} in {rows:#?}"))
    };
    let denied = row_of(&refused, "1.2.0");
    assert!(
        denied.contains("denied") && denied.contains("foo-not-yet"),
        "{denied}"
    );
    assert!(
        denied.contains("not reviewed yet") && denied.contains("ci"),
        "{denied}"
    );
    let held = row_of(&refused, "1.1.0");
    assert!(held.contains("held") && held.contains("platform"), "{held}");
    let waived = row_texts(&browser, "tr.waived").await;
    assert_eq!(waived.len(), 1);
    assert!(waived[0].contains("1.0.0") && waived[0].contains("waive for the page"));
    let rules = row_texts(&browser, "tr.rule").await;
    assert!(rules[0].contains("foo-1.0.0-regression") && rules[0].contains("policy.rules[0]"));
    assert_eq!(row_texts(&browser, "tr.record").await.len(), 2);
    check_page(&browser, &mirror, "policy").await;

    // The approver waives 1.2.0 with the form in its row.
    let mut form = None;
    for row in browser.find_all("tr.refused").await {
        if row.text().await.unwrap().contains("1.2.0") {
            form = Some(row);
        }
    }
    let row = form.expect("1.2.0's row");
    row.find(fantoccini::Locator::Css("input[name=reason]"))
        .await
        .unwrap()
        .send_keys("reviewed in CHG-7")
        .await
        .unwrap();
    browser
        .run("window.__provender_old_page = true;", vec![])
        .await;
    row.find(fantoccini::Locator::Css("button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let reloaded = poll(Duration::from_secs(10), async || {
        let done = browser
            .run(
                "return window.__provender_old_page !== true && document.readyState === 'complete';",
                vec![],
            )
            .await;
        (done == Value::Bool(true)).then_some(())
    })
    .await;
    assert!(reloaded.is_some(), "the form led to a new page");
    let url = browser.client.current_url().await.unwrap();
    assert!(url.path().ends_with("-/policy"), "{url}");
    assert!(
        browser
            .text("#recorded")
            .await
            .contains("waive of provider"),
        "the page says what was recorded"
    );
    let waived = row_texts(&browser, "tr.waived").await;
    assert_eq!(waived.len(), 2, "{waived:#?}");
    assert!(
        waived
            .iter()
            .any(|r| r.contains("1.2.0") && r.contains("reviewed in CHG-7"))
    );
    let trail = row_texts(&browser, "tr.record").await;
    assert_eq!(trail.len(), 3);
    assert!(
        trail[2].contains("waive") && trail[2].contains("platform"),
        "{trail:#?}"
    );
    check_page(&browser, &mirror, "policy-waived").await;
    browser.close().await;

    // The waiver holds at the doors.
    let v120 = mirror.url(&format!("{REGISTRY}/acme/foo/1.2.0.json"));
    assert_eq!(
        send(&v120, client.get(&v120).bearer_auth(READER_TOKEN))
            .await
            .status,
        StatusCode::OK
    );
    // A form from another site cannot approve, even with the session.
    let cross = client
        .post(mirror.url("-/policy"))
        .bearer_auth(APPROVER_TOKEN)
        .header("sec-fetch-site", "cross-site")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("kind=provider&address=registry.terraform.io/acme/foo&version=1.1.0&action=revoke&reason=x");
    assert_eq!(
        send("cross-site", cross).await.status,
        StatusCode::FORBIDDEN
    );
}

/// The texts of the rows `css` selects.
async fn row_texts(browser: &Browser, css: &str) -> Vec<String> {
    let mut out = Vec::new();
    for row in browser.find_all(css).await {
        out.push(row.text().await.unwrap());
    }
    out
}
