//! The git door: `git::https://` module sources through the mirror, with the real `git` and
//! the real `terraform` rewriting their URLs with git's own `insteadOf`, against a git origin
//! served by `git http-backend` over HTTPS on loopback; and an edge mirror whose git host goes
//! `via` a centre, refreshed through the centre's door with the edge's token.

use std::path::Path;
use std::process::{Command, Stdio};

use tempfile::TempDir;

use crate::support::cli;
use crate::support::origin::{DEEP_TREE, FakeOrigin, ModuleSource, ModuleSpec, OPTION_BRANCH};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror};
use crate::support::{Terraform, https_client, within};

/// The git origin's host name (reached through `connect_to`; it resolves nowhere).
const GIT_HOST: &str = "git.example.test";
/// A second name for the same origin, for bounds per host.
const GIT_HOST2: &str = "git2.example.test";

async fn origin(ca: &TestCa) -> FakeOrigin {
    FakeOrigin::start_with_modules(
        ca,
        &[REGISTRY, GIT_HOST, GIT_HOST2],
        vec![],
        vec![
            ModuleSpec::new("acme", "net", "aws", &["1.0.0", "1.1.0"]),
            ModuleSpec::new("acme", "vpc", "aws", &["2.0.0"])
                .source(ModuleSource::GitSubdir("modules/vpc".into())),
        ],
    )
    .await
}

/// `[git]` allowing the origin's host, with `keys` added, and the host reached at the origin.
fn git_toml(origin: &FakeOrigin, keys: &str) -> String {
    git_toml_with(origin, keys, "")
}

/// [`git_toml`], with `host_keys` added to the host's `[upstream.hosts]` table.
fn git_toml_with(origin: &FakeOrigin, keys: &str, host_keys: &str) -> String {
    format!(
        "[git]\nallowed_hosts = [\"{GIT_HOST}\"]\n{keys}\n\n[upstream.hosts.\"{GIT_HOST}\"]\nconnect_to = \"{}\"\n{host_keys}\n",
        origin.addr()
    )
}

async fn mirror(ca: &TestCa, origin: &FakeOrigin, git_keys: &str, more: &str) -> TestMirror {
    mirror_with(ca, origin, &git_toml(origin, git_keys), more).await
}

/// A mirror with `git` (the `[git]` and host tables) and `more` (whole tables) in its
/// configuration.
async fn mirror_with(ca: &TestCa, origin: &FakeOrigin, git: &str, more: &str) -> TestMirror {
    let toml = format!("{git}\n{more}");
    TestMirror::start_with(
        ca,
        origin,
        MirrorOptions {
            extra_toml: &toml,
            ..Default::default()
        },
    )
    .await
}

/// The origin URL of a fixture repository, as a configuration writes it.
fn origin_url(repo: &str) -> String {
    format!("https://{GIT_HOST}/git/acme/{repo}")
}

/// A git configuration sending `https://GIT_HOST/` to the mirror and trusting the test CA.
fn gitconfig(home: &Path, mirror: &TestMirror, ca_file: &Path) {
    gitconfig_as(home, mirror, ca_file, None);
}

/// [`gitconfig`], with `token` as the password of Basic credentials when given.
fn gitconfig_as(home: &Path, mirror: &TestMirror, ca_file: &Path, token: Option<&str>) {
    let mut base = mirror.url(&format!("git/{GIT_HOST}/"));
    if let Some(token) = token {
        base = base.replacen("https://", &format!("https://git:{token}@"), 1);
    }
    let text = format!(
        "[url \"{base}\"]\n\tinsteadOf = https://{GIT_HOST}/\n[http]\n\tsslCAInfo = {}\n",
        ca_file.display()
    );
    std::fs::write(home.join(".gitconfig"), text).unwrap();
}

/// A home for the `git` CLI, configured for `mirror`.
struct GitHome {
    dir: TempDir,
}

impl GitHome {
    fn new(ca: &TestCa, mirror: &TestMirror) -> GitHome {
        Self::new_as(ca, mirror, None)
    }

    /// A home whose `insteadOf` carries `token` as a credential helper would give it.
    fn new_as(ca: &TestCa, mirror: &TestMirror, token: Option<&str>) -> GitHome {
        let dir = tempfile::Builder::new()
            .prefix("provender-git-home-")
            .tempdir()
            .unwrap();
        let ca_file = ca.write_ca(dir.path());
        gitconfig_as(dir.path(), mirror, &ca_file, token);
        GitHome { dir }
    }

    /// Runs `git args` in `cwd` without blocking the runtime; its output and success.
    async fn git(&self, cwd: &Path, args: &[&str]) -> (bool, String) {
        run_git(self.dir.path(), cwd, args).await
    }

    /// `git clone extra... url dest` in the home; panics unless it succeeds.
    async fn clone(&self, url: &str, dest: &str, extra: &[&str]) -> String {
        let mut args = vec!["clone", "--quiet"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[url, dest]);
        let (ok, text) = self.git(self.dir.path(), &args).await;
        assert!(ok, "git {args:?} failed:\n{text}");
        let (ok, head) = self
            .git(&self.dir.path().join(dest), &["rev-parse", "HEAD"])
            .await;
        assert!(ok, "{head}");
        head.trim().to_owned()
    }
}

/// Runs `git args` in `cwd` with `home` as its home, without prompts or the system's
/// configuration and without blocking the runtime: its success and output.
pub async fn run_git(home: &Path, cwd: &Path, args: &[&str]) -> (bool, String) {
    let home = home.to_path_buf();
    let cwd = cwd.to_path_buf();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    within(
        "running git",
        tokio::task::spawn_blocking(move || {
            let out = Command::new("git")
                .args(&args)
                .current_dir(cwd)
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("HOME", &home)
                .env("GIT_TERMINAL_PROMPT", "0")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .stdin(Stdio::null())
                .output()
                .expect("run git");
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            (out.status.success(), text)
        }),
    )
    .await
    .unwrap()
}

/// The `VERSION` file of each module `terraform init` installed, by module key.
fn installed_versions(dir: &Path) -> std::collections::BTreeMap<String, String> {
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join(".terraform/modules/modules.json")).unwrap(),
    )
    .unwrap();
    manifest["Modules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["Key"] != "")
        .map(|m| {
            let module_dir = dir.join(m["Dir"].as_str().unwrap());
            let version = std::fs::read_to_string(module_dir.join("VERSION"))
                .unwrap_or_else(|e| panic!("{}: {e}", module_dir.display()));
            (
                m["Key"].as_str().unwrap().to_owned(),
                version.trim().to_owned(),
            )
        })
        .collect()
}

/// Origin requests for `info/refs` of the repository `repo` so far.
fn origin_refs_requests(origin: &FakeOrigin, repo: &str) -> usize {
    origin
        .requests()
        .iter()
        .filter(|r| r.path == format!("/git/acme/{repo}/info/refs"))
        .count()
}

#[tokio::test]
async fn terraform_init_fetches_git_sources_through_the_mirror_and_again_with_the_origin_down() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    // Every client's info/refs asks the origin, so the second init below meets the outage.
    let mut mirror = mirror(&ca, &origin, "refresh_after = \"0s\"", "").await;
    let commit = origin.git_commit("acme", "net", "aws", "1.1.0");
    let origin_addr = origin.addr();
    // The sealed server below needs an origin to be configured against; it never reaches it.
    let origin_stub = FakeOrigin::start(&ca, &[REGISTRY], vec![]).await;
    let net = origin_url("terraform-aws-net.git");
    let vpc = origin_url("terraform-aws-vpc.git");
    let main_tf = format!(
        "module \"tag\" {{\n  source = \"git::{net}?ref=v1.0.0\"\n}}\n\
         module \"commit\" {{\n  source = \"git::{net}?ref={commit}\"\n}}\n\
         module \"shallow\" {{\n  source = \"git::{net}?ref=v1.1.0&depth=1\"\n}}\n\
         module \"subdir\" {{\n  source = \"git::{vpc}//modules/vpc?ref=v2.0.0\"\n}}\n\
         module \"default_branch\" {{\n  source = \"git::{net}\"\n}}\n"
    );
    let want: std::collections::BTreeMap<String, String> = [
        ("commit", "1.1.0"),
        ("default_branch", "1.1.0"),
        ("shallow", "1.1.0"),
        ("subdir", "2.0.0"),
        ("tag", "1.0.0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();

    let init = |mirror: &TestMirror| {
        let tf = Terraform::new(&ca, "");
        gitconfig(tf.home(), mirror, tf.ca_file());
        let root = crate::support::tf_config::root_module(&main_tf);
        (tf, root)
    };
    let (tf, root) = init(&mirror);
    tf.init(root.path()).await.assert_success();
    assert_eq!(installed_versions(root.path()), want);
    assert!(origin_refs_requests(&origin, "terraform-aws-net.git") > 0);

    // `seed` follows the configuration's git sources into a cache of its own.
    let seeding = tempfile::tempdir().unwrap();
    let seed_cfg = cli::config_file(
        seeding.path(),
        "seed.toml",
        &seeding.path().join("cache"),
        origin.addr(),
        &ca,
        "",
    );
    let mut text = std::fs::read_to_string(&seed_cfg).unwrap();
    text.push_str(&git_toml(&origin, ""));
    std::fs::write(&seed_cfg, text).unwrap();
    let seeded = cli::provender(&[
        "seed",
        "--config",
        cli::path_str(&seed_cfg),
        cli::path_str(root.path()),
    ])
    .await;
    seeded.ok();
    assert!(
        seeded.out().contains("git repositories: 2 up to date"),
        "{}",
        seeded.out()
    );

    // The origin goes away: the cached copies are served as they are.
    origin.stop().await;
    let (tf, root) = init(&mirror);
    tf.init(root.path()).await.assert_success();
    assert_eq!(installed_versions(root.path()), want);

    let metrics = mirror.metrics(&https_client(&ca, &[])).await;
    assert!(
        crate::support::sample(&metrics, "provender_git_refreshes_total{outcome=\"stale\"}") > 0,
        "{metrics}"
    );

    // Across an air gap: a signed bundle of the git cache, imported by a sealed server that
    // has never seen the origin, serves the same init.
    let work = tempfile::tempdir().unwrap();
    let exporting = cli::config_file(
        work.path(),
        "export.toml",
        &mirror.cache_dir,
        origin_addr,
        &ca,
        "",
    );
    let bundle = work.path().join("git.bundle.tar");
    let exported = cli::provender(&[
        "export",
        "--config",
        cli::path_str(&exporting),
        "--bundle",
        cli::path_str(&bundle),
    ])
    .await;
    exported.ok();
    assert!(
        exported.out().contains("2 git repositories"),
        "{}",
        exported.out()
    );
    mirror.stop().await;
    let sealed_cache = work.path().join("sealed-cache");
    let sealed = cli::sealed_config(work.path(), "sealed.toml", &sealed_cache, &ca);
    // A site imports the git repositories it serves: their host is in its git.allowed_hosts.
    let mut text = std::fs::read_to_string(&sealed).unwrap();
    text.push_str(&format!("\n[git]\nallowed_hosts = [\"{GIT_HOST}\"]\n"));
    std::fs::write(&sealed, text).unwrap();
    let imported = cli::import(cli::path_str(&sealed), &bundle).await;
    imported.ok();
    assert!(
        imported.out().contains("git repositories: 2"),
        "{}",
        imported.out()
    );
    let toml = format!("[git]\nallowed_hosts = [\"{GIT_HOST}\"]\n");
    let mut sealed_mirror = TestMirror::start_with(
        &ca,
        &origin_stub,
        MirrorOptions {
            cache_dir: Some(&sealed_cache),
            extra_upstream: "offline = true",
            extra_toml: &toml,
            ..Default::default()
        },
    )
    .await;
    let (tf, root) = init(&sealed_mirror);
    tf.init(root.path()).await.assert_success();
    assert_eq!(installed_versions(root.path()), want);

    // A bundle whose git bundle was changed is refused whole, and leaves the cache unchanged.
    let tampered = work.path().join("tampered.tar");
    let target = format!("provender-git/{GIT_HOST}/git/acme/terraform-aws-net.git.bundle");
    cli::tamper(&bundle, &tampered, &target, |bytes| {
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
    });
    let other_cache = work.path().join("other-cache");
    let other = cli::sealed_config(work.path(), "other.toml", &other_cache, &ca);
    let refused = cli::import(cli::path_str(&other), &tampered).await;
    refused.fails(1);
    assert!(!other_cache.join("git").exists() || walk(&other_cache.join("git")).is_empty());
    sealed_mirror.stop().await;
}

#[tokio::test]
async fn git_clients_clone_and_fetch_over_both_protocols_and_concurrent_clones_share_one_refresh() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let mut mirror = mirror(&ca, &origin, "refresh_after = \"1h\"", "").await;
    let home = GitHome::new(&ca, &mirror);
    let url = origin_url("terraform-aws-net.git");
    let tip = origin.git_commit("acme", "net", "aws", "1.1.0");

    // Twenty clones at once: one refresh from the origin (its ls-remote and its fetch, each
    // starting with one info/refs), every clone the same commit.
    let clones = (0..20).map(|i| {
        let (home, url) = (&home, url.clone());
        async move { home.clone(&url, &format!("clone-{i}"), &[]).await }
    });
    let heads = futures_util::future::join_all(clones).await;
    assert!(heads.iter().all(|h| *h == tip), "{heads:?}");
    assert_eq!(origin_refs_requests(&origin, "terraform-aws-net.git"), 2);

    // The same clone over each HTTP version git's curl speaks.
    for version in ["HTTP/1.1", "HTTP/2"] {
        let dest = format!("over-{}", version.replace('/', "-"));
        let head = home
            .clone(&url, &dest, &["-c", &format!("http.version={version}")])
            .await;
        assert_eq!(head, tip, "{version}");
    }

    // Protocol v0, a shallow clone of a tag, and a fetch in an existing clone.
    let v0 = home.clone(&url, "v0", &["-c", "protocol.version=0"]).await;
    assert_eq!(v0, tip);
    let tag = origin.git_commit("acme", "net", "aws", "1.0.0");
    let shallow = home
        .clone(&url, "shallow", &["--depth", "1", "--branch", "v1.0.0"])
        .await;
    assert_eq!(shallow, tag);
    for protocol in ["2", "0"] {
        let (ok, text) = home
            .git(
                &home.dir.path().join("v0"),
                &[
                    "-c",
                    &format!("protocol.version={protocol}"),
                    "fetch",
                    "origin",
                    "--tags",
                ],
            )
            .await;
        assert!(ok, "fetch over protocol {protocol}: {text}");
    }
    // Nothing was fetched from the origin for these: the copy was fresh.
    assert_eq!(origin_refs_requests(&origin, "terraform-aws-net.git"), 2);

    // `ls` lists the cached repositories; `prune` removes one no client used lately, and
    // keeps one a kept configuration calls a module from.
    home.clone(&origin_url("terraform-aws-vpc.git"), "vpc", &[])
        .await;
    let cfg = cli::config_file(
        home.dir.path(),
        "ops.toml",
        &mirror.cache_dir,
        origin.addr(),
        &ca,
        "",
    );
    let listed = cli::provender(&["ls", "--json", "--config", cli::path_str(&cfg)]).await;
    listed.ok();
    let repos: Vec<String> = serde_json::from_str::<serde_json::Value>(&listed.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == "git")
        .map(|o| o["repository"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        repos,
        [
            format!("{GIT_HOST}/git/acme/terraform-aws-net.git"),
            format!("{GIT_HOST}/git/acme/terraform-aws-vpc.git")
        ]
    );
    let kept = crate::support::tf_config::root_module(&format!(
        "module \"net\" {{\n  source = \"git::{url}?ref=v1.0.0\"\n}}\n"
    ));
    std::fs::create_dir_all(kept.path().join(".terraform/modules")).unwrap();
    std::fs::write(
        kept.path().join(".terraform/modules/modules.json"),
        format!(
            r#"{{"Modules":[{{"Key":"","Source":"","Dir":"."}},{{"Key":"net","Source":"git::{url}?ref=v1.0.0","Dir":".terraform/modules/net"}}]}}"#
        ),
    )
    .unwrap();
    std::fs::create_dir_all(kept.path().join(".terraform/modules/net")).unwrap();
    // What a first fetch stopped with its process would leave: never served, pruned as old.
    let unfinished = mirror
        .cache_dir
        .join("git")
        .join(GIT_HOST)
        .join("unfinished.git");
    std::fs::create_dir_all(&unfinished).unwrap();
    std::fs::write(unfinished.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    // Last uses are kept in whole seconds.
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    let pruned = cli::provender(&[
        "prune",
        "--config",
        cli::path_str(&cfg),
        "--unused-for",
        "1s",
        "--keep",
        cli::path_str(kept.path()),
    ])
    .await;
    pruned.ok();
    assert!(
        pruned.out().contains("1 git repository") && pruned.out().contains("kept by --keep"),
        "{}",
        pruned.out()
    );
    assert!(
        !unfinished.exists(),
        "an unfinished repository directory is pruned"
    );
    let listed = cli::provender(&["ls", "--json", "--config", cli::path_str(&cfg)]).await;
    assert!(
        !listed.stdout.contains("terraform-aws-vpc.git"),
        "{}",
        listed.stdout
    );
    assert!(
        listed.stdout.contains("terraform-aws-net.git"),
        "{}",
        listed.stdout
    );

    // The modules page and its API list what the git cache holds.
    let client = https_client(&ca, &[]);
    let api = crate::support::http::get(&client, &mirror.url("-/api/v1/modules")).await;
    assert_eq!(api.status.as_u16(), 200);
    let listed: Vec<String> = api.json()["git"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["repository"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        listed,
        [format!("{GIT_HOST}/git/acme/terraform-aws-net.git")]
    );
    let start = crate::support::http::get(&client, &mirror.url("")).await;
    assert!(
        start.text().contains(".insteadOf")
            && start
                .text()
                .contains(&format!("{}git/{GIT_HOST}/", mirror.url(""))),
        "the start page gives the insteadOf line: {}",
        start.text()
    );
    let page = crate::support::http::get(&client, &mirror.url("-/modules")).await;
    assert!(
        page.text().contains("Git repositories")
            && page.text().contains("git/acme/terraform-aws-net.git"),
        "{}",
        page.text()
    );

    // A push is refused, and so is a host that is not allowed.
    let (ok, text) = home
        .git(
            &home.dir.path().join("v0"),
            &["push", "origin", "HEAD:refs/heads/x"],
        )
        .await;
    assert!(!ok && text.contains("403"), "{text}");
    let other = crate::support::http::get(
        &client,
        &mirror.url("git/elsewhere.example/acme/x.git/info/refs?service=git-upload-pack"),
    )
    .await;
    assert_eq!(other.status.as_u16(), 403, "{}", other.text());
    assert!(
        other.text().contains("git.allowed_hosts"),
        "{}",
        other.text()
    );
    mirror.stop().await;
}

#[tokio::test]
async fn git_clients_need_a_token_and_a_rule_that_allows_the_repository() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let auth = "[[auth.clients]]\nname = \"reader\"\ntoken = \"tok-reader-0123456789abcdef\"\n\n\
                [[auth.clients]]\nname = \"other\"\ntoken = \"tok-other-0123456789abcdef\"\n\n\
                [[auth.rules]]\nname = \"other-repos\"\nclients = [\"other\"]\ngit = [\"elsewhere.example/*\"]\n\n\
                [usage]\nflush_interval = \"1s\"\n";
    let mut mirror = mirror(&ca, &origin, "", auth).await;
    let home = GitHome::new(&ca, &mirror);
    let url = origin_url("terraform-aws-net.git");

    // No credentials: 401 with the Basic challenge git answers with its credential helper.
    let client = https_client(&ca, &[]);
    let refs = mirror.url(&format!(
        "git/{GIT_HOST}/git/acme/terraform-aws-net.git/info/refs?service=git-upload-pack"
    ));
    let bare = crate::support::http::get(&client, &refs).await;
    assert_eq!(bare.status.as_u16(), 401);
    assert_eq!(
        bare.headers
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some("Basic realm=\"provender\"")
    );
    let (ok, text) = home
        .git(home.dir.path(), &["clone", &url, "anonymous"])
        .await;
    assert!(!ok, "{text}");

    // A token as the password of Basic credentials, as a credential helper gives it.
    let with_token = |user_token: &str| {
        mirror.url(&format!("git/{GIT_HOST}/")).replacen(
            "https://",
            &format!("https://{user_token}@"),
            1,
        )
    };
    let reader = format!(
        "{}git/acme/terraform-aws-net.git",
        with_token("git:tok-reader-0123456789abcdef")
    );
    let (ok, text) = home
        .git(home.dir.path(), &["clone", &reader, "reader"])
        .await;
    assert!(ok, "{text}");
    // The fetch counts as the reader's use of the repository.
    let repo = format!("{GIT_HOST}/git/acme/terraform-aws-net.git");
    let used = crate::support::poll(std::time::Duration::from_secs(15), async || {
        let got = client
            .get(mirror.url("-/api/v1/usage?days=0"))
            .bearer_auth("tok-reader-0123456789abcdef")
            .send()
            .await
            .ok()?;
        let doc: serde_json::Value = serde_json::from_slice(&got.bytes().await.ok()?).ok()?;
        doc.to_string().contains(&repo).then_some(doc)
    })
    .await;
    let used = used.expect("the git fetch reached the usage counts");
    assert!(used.to_string().contains("\"git\""), "{used}");
    let other = format!(
        "{}git/acme/terraform-aws-net.git",
        with_token("git:tok-other-0123456789abcdef")
    );
    let (ok, text) = home.git(home.dir.path(), &["clone", &other, "other"]).await;
    assert!(!ok && text.contains("403"), "{text}");
    mirror.stop().await;
}

#[tokio::test]
async fn a_cache_only_client_gets_what_is_cached_and_hostile_origins_are_bounded() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let auth = "[[auth.clients]]\nname = \"ci\"\ntoken = \"tok-ci-0123456789abcdef\"\n\n\
                [[auth.clients]]\nname = \"filler\"\ntoken = \"tok-fill-0123456789abcdef\"\n\n\
                [[auth.rules]]\nname = \"readers\"\nclients = [\"ci\"]\nfill = false\n";
    let mut mirror = mirror(
        &ca,
        &origin,
        "refresh_after = \"0s\"\nmax_repository_size = \"4 MiB\"",
        auth,
    )
    .await;
    let home = GitHome::new(&ca, &mirror);
    let base = |token: &str| {
        mirror.url(&format!("git/{GIT_HOST}/git/acme/")).replacen(
            "https://",
            &format!("https://git:{token}@"),
            1,
        )
    };
    let net = format!("{}terraform-aws-net.git", base("tok-ci-0123456789abcdef"));
    let (ok, text) = home.git(home.dir.path(), &["clone", &net, "early"]).await;
    assert!(!ok && text.contains("403"), "not cached yet: {text}");
    let filled = format!("{}terraform-aws-net.git", base("tok-fill-0123456789abcdef"));
    home.clone(&filled, "filled", &[]).await;
    let before = origin_refs_requests(&origin, "terraform-aws-net.git");
    home.clone(&net, "cached", &[]).await;
    assert_eq!(
        origin_refs_requests(&origin, "terraform-aws-net.git"),
        before,
        "a cache-only client never makes the mirror ask the origin"
    );

    // A repository whose pack never ends: the refresh stops at git.max_repository_size and
    // nothing of it is kept or served.
    let endless = mirror
        .url(&format!("git/{GIT_HOST}/git/endless.git"))
        .replacen("https://", "https://git:tok-fill-0123456789abcdef@", 1);
    let (ok, text) = home
        .git(home.dir.path(), &["clone", &endless, "endless"])
        .await;
    assert!(!ok, "{text}");
    assert!(
        origin.endless_git_bytes_sent() < 64 * 1024 * 1024,
        "the mirror stopped reading: {} bytes sent",
        origin.endless_git_bytes_sent()
    );
    // Branches named like options, and an origin HEAD naming one: data to git, never its
    // arguments.
    let hostile = mirror
        .url(&format!("git/{GIT_HOST}/git/hostile-refs.git"))
        .replacen("https://", "https://git:tok-fill-0123456789abcdef@", 1);
    for protocol in ["2", "0"] {
        let dest = format!("hostile-v{protocol}");
        let version = format!("protocol.version={protocol}");
        let (ok, text) = home
            .git(home.dir.path(), &["-c", &version, "clone", &hostile, &dest])
            .await;
        assert!(ok, "{text}");
        let (ok, branches) = home
            .git(&home.dir.path().join(&dest), &["branch", "-r"])
            .await;
        assert!(
            ok && branches.contains(&format!("origin/{OPTION_BRANCH}"))
                && branches.contains("origin/-x"),
            "{branches}"
        );
    }

    // A tree deeper than git walks: the refresh fails and nothing of it is kept.
    let deep = mirror
        .url(&format!("git/{GIT_HOST}/git/deep.git"))
        .replacen("https://", "https://git:tok-fill-0123456789abcdef@", 1);
    let (ok, text) = home.git(home.dir.path(), &["clone", &deep, "deep"]).await;
    assert!(!ok, "{DEEP_TREE} levels deep: {text}");
    // The failure is remembered (cache.not_found_ttl): asking again does not reach the origin.
    let deep_refs = || {
        origin
            .requests()
            .iter()
            .filter(|r| r.path == "/git/deep.git/info/refs")
            .count()
    };
    let asked = deep_refs();
    let (ok, _) = home
        .git(home.dir.path(), &["clone", &deep, "deep-again"])
        .await;
    assert!(!ok);
    assert_eq!(
        deep_refs(),
        asked,
        "no second refresh within cache.not_found_ttl"
    );

    // Only whole repositories are left: every directory is one that was served.
    let host_dir = mirror.cache_dir.join("git").join(GIT_HOST);
    let dirs: Vec<_> = std::fs::read_dir(&host_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    let origins: Vec<String> = dirs
        .iter()
        .map(|d| std::fs::read_to_string(d.join("provender-origin")).unwrap_or_default())
        .collect();
    assert_eq!(dirs.len(), 2, "{origins:?}");
    assert!(
        origins.iter().any(|r| r.contains("hostile-refs"))
            && origins.iter().any(|r| r.contains("terraform-aws-net")),
        "{origins:?}"
    );
    assert!(dirs.iter().all(|d| d.join("provender-refreshed").is_file()));
    mirror.stop().await;
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

#[tokio::test]
async fn the_door_answers_as_git_s_own_server_does() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let mut mirror = self::mirror(&ca, &origin, "", "").await;
    let client = https_client(&ca, &[]);
    let repo = mirror.url(&format!("git/{GIT_HOST}/git/acme/terraform-aws-net.git"));
    let refs = format!("{repo}/info/refs?service=git-upload-pack");
    let get = |protocol: Option<&'static str>| {
        let mut req = client.get(&refs);
        if let Some(p) = protocol {
            req = req.header("Git-Protocol", p);
        }
        async move {
            let got = req.send().await.unwrap();
            let kind = got.headers()["content-type"].to_str().unwrap().to_owned();
            (got.status().as_u16(), kind, got.bytes().await.unwrap())
        }
    };
    // Before info/refs, a fetch request finds nothing cached.
    let early = client
        .post(format!("{repo}/git-upload-pack"))
        .body("0000")
        .send()
        .await
        .unwrap();
    assert_eq!(early.status().as_u16(), 404);

    let (status, kind, v0) = get(None).await;
    assert_eq!(
        (status, kind.as_str()),
        (200, "application/x-git-upload-pack-advertisement")
    );
    assert!(
        v0.starts_with(b"001e# service=git-upload-pack\n0000"),
        "{v0:?}"
    );
    assert!(String::from_utf8_lossy(&v0).contains("refs/heads/main"));
    let (status, _, v2) = get(Some("version=2")).await;
    assert_eq!(status, 200);
    assert!(v2.starts_with(b"000eversion 2\n"), "{v2:?}");

    // A v2 ls-refs, gzip-encoded as git sends large requests.
    let gzip = |bytes: &[u8]| {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut enc, bytes).unwrap();
        enc.finish().unwrap()
    };
    let post = |body: Vec<u8>, encoding: &'static str| {
        client
            .post(format!("{repo}/git-upload-pack"))
            .header("Git-Protocol", "version=2")
            .header("Content-Type", "application/x-git-upload-pack-request")
            .header("Content-Encoding", encoding)
            .body(body)
            .send()
    };
    let listed = post(gzip(b"0014command=ls-refs\n0000"), "gzip")
        .await
        .unwrap();
    assert_eq!(listed.status().as_u16(), 200);
    assert_eq!(
        listed.headers()["content-type"],
        "application/x-git-upload-pack-result"
    );
    let text = listed.text().await.unwrap();
    assert!(
        text.contains("refs/heads/main") && text.contains("refs/tags/v1.1.0"),
        "{text}"
    );
    // A small body that inflates past git.max_request_size, and an encoding git never sends.
    let bomb = post(gzip(&vec![0u8; 17 << 20]), "gzip").await.unwrap();
    assert_eq!(bomb.status().as_u16(), 413);
    let odd = post(b"0000".to_vec(), "br").await.unwrap();
    assert_eq!(odd.status().as_u16(), 400);
    // The dumb protocol and pushes are not served.
    let dumb = client.get(format!("{repo}/HEAD")).send().await.unwrap();
    assert_eq!(dumb.status().as_u16(), 404);
    let push = client
        .get(format!("{repo}/info/refs?service=git-receive-pack"))
        .send()
        .await
        .unwrap();
    assert_eq!(push.status().as_u16(), 403);
    mirror.stop().await;
}

/// The edge's own client in [`an_edge_refreshes_through_its_centre_s_git_door_and_serves_with_the_centre_gone`].
const EDGE_CLIENT: &str = "tok-edge-dev-0123456789abcdef";

#[tokio::test]
async fn an_edge_refreshes_through_its_centre_s_git_door_and_serves_with_the_centre_gone() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let token = "edge-site-git-token-0123456789";
    let centre_auth = format!(
        "[[auth.clients]]\nname = \"edge\"\ntoken = \"{token}\"\n\n\
         [[auth.rules]]\nname = \"edges\"\nclients = [\"edge\"]\n"
    );
    let mut centre = mirror(&ca, &origin, "refresh_after = \"1h\"", &centre_auth).await;
    // The edge: the git host goes via the centre (it resolves nowhere from here), with the
    // edge's token read from a file; the registry origin is never reached either. Its own
    // clients authenticate: the edge's token may not serve anyone who asks.
    let work = tempfile::tempdir().unwrap();
    let token_file = work.path().join("token");
    std::fs::write(&token_file, token).unwrap();
    let centre_host = format!("localhost:{}", centre.url.port().unwrap());
    let edge_toml = format!(
        "[git]\nallowed_hosts = [\"{GIT_HOST}\"]\nrefresh_after = \"0s\"\n\n\
         [upstream.hosts.\"{GIT_HOST}\"]\nvia = \"{}\"\n\n\
         [upstream.hosts.\"{centre_host}\"]\ntoken_file = \"{}\"\n\n\
         [[auth.clients]]\nname = \"dev\"\ntoken = \"{EDGE_CLIENT}\"\n",
        centre.url,
        token_file.display()
    );
    let edge = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_upstream: "allow_private_networks = true",
            connect_to: Some("127.0.0.1:9".parse().unwrap()),
            extra_toml: &edge_toml,
            ..Default::default()
        },
    )
    .await;
    let home = GitHome::new_as(&ca, &edge, Some(EDGE_CLIENT));
    let url = origin_url("terraform-aws-net.git");
    let tip = origin.git_commit("acme", "net", "aws", "1.1.0");

    assert_eq!(home.clone(&url, "first", &[]).await, tip);
    // The centre's one refresh (its ls-remote and its fetch); the edge never asked the origin.
    assert_eq!(origin_refs_requests(&origin, "terraform-aws-net.git"), 2);
    assert!(
        origin.requests().iter().all(|r| r.authorization.is_none()),
        "the edge's token never reaches the origin: {:?}",
        origin.requests()
    );

    // The centre gone: the edge's refresh fails, and it serves its copy.
    centre.stop().await;
    assert_eq!(home.clone(&url, "second", &[]).await, tip);
    assert_eq!(origin_refs_requests(&origin, "terraform-aws-net.git"), 2);
}

/// A git pkt-line holding `text`.
fn pkt(text: &str) -> String {
    format!("{:04x}{text}", text.len() + 4)
}

/// A protocol v2 `fetch` of `want` (a commit), as `git fetch` sends it for a first clone.
fn v2_fetch(want: &str) -> Vec<u8> {
    format!(
        "{}0001{}{}{}0000",
        pkt("command=fetch\n"),
        pkt("no-progress\n"),
        pkt(&format!("want {want}\n")),
        pkt("done\n")
    )
    .into_bytes()
}

/// Sends a v2 fetch of `want` to the repository at `repo_url` (on the mirror) with `client`
/// (give each its own, so that each has a connection of its own), as `token`'s client, and returns the answer unread: a client that
/// stops reading. Its turn is held from when this returns.
async fn stalled_fetch(
    client: reqwest::Client,
    repo_url: &str,
    want: &str,
    token: Option<&str>,
) -> reqwest::Response {
    let mut req = client
        .post(format!("{repo_url}/git-upload-pack"))
        .header("Git-Protocol", "version=2")
        .header("Content-Type", "application/x-git-upload-pack-request")
        .body(v2_fetch(want));
    if let Some(token) = token {
        req = req.basic_auth("git", Some(token));
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    resp
}

/// `info/refs` of the repository at `repo_url` (on the mirror), as `token`'s client: what
/// makes the mirror refresh it.
async fn info_refs(client: &reqwest::Client, repo_url: &str, token: Option<&str>) -> u16 {
    let mut req = client.get(format!("{repo_url}/info/refs?service=git-upload-pack"));
    if let Some(token) = token {
        req = req.basic_auth("git", Some(token));
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let _ = resp.bytes().await;
    status
}

/// Bytes of the big repository: more than every buffer between git and a client that reads
/// nothing (pipes, the server's and the kernel's, HTTP/2 windows).
const BIG_REPO: usize = 24 << 20;

#[tokio::test(flavor = "multi_thread")]
async fn clients_that_stop_reading_lose_their_turn_and_never_hold_up_advertisements() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let big = origin.git_big_repo("big.git", BIG_REPO);
    let mut mirror = mirror(
        &ca,
        &origin,
        "max_concurrent_serves = 2\nstall_timeout = \"6s\"\nrefresh_after = \"1h\"",
        "",
    )
    .await;
    let big_url = mirror.url(&format!("git/{GIT_HOST}/git/big.git"));
    assert_eq!(
        info_refs(&https_client(&ca, &[]), &big_url, None).await,
        200
    );
    // Two clients take both turns and read nothing.
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(stalled_fetch(https_client(&ca, &[]), &big_url, &big, None).await);
    }
    let started = std::time::Instant::now();
    let home = GitHome::new(&ca, &mirror);
    let url = origin_url("terraform-aws-net.git");
    // Advertisements (info/refs, and v2's ls-refs) do not wait for a turn of the packs'.
    let (ok, text) = home.git(home.dir.path(), &["ls-remote", &url]).await;
    assert!(ok && text.contains("refs/heads/main"), "{text}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(4),
        "the advertisement waited behind the packs: {:?}",
        started.elapsed()
    );
    // A pack waits only until git.stall_timeout frees a stalled client's turn (not for
    // git.serve_timeout, ten minutes).
    let tip = origin.git_commit("acme", "net", "aws", "1.1.0");
    assert_eq!(home.clone(&url, "net", &[]).await, tip);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    drop(held);
    mirror.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn one_client_cannot_take_every_turn() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let big = origin.git_big_repo("big.git", BIG_REPO);
    let (greedy, other) = ("tok-greedy-0123456789abcdef", "tok-other-0123456789abcdef");
    let auth = format!(
        "[[auth.clients]]\nname = \"greedy\"\ntoken = \"{greedy}\"\n\n\
         [[auth.clients]]\nname = \"other\"\ntoken = \"{other}\"\n"
    );
    let mut mirror = mirror(
        &ca,
        &origin,
        "max_concurrent_serves = 2\nmax_serves_per_client = 1\nstall_timeout = \"60s\"",
        &auth,
    )
    .await;
    let big_url = mirror.url(&format!("git/{GIT_HOST}/git/big.git"));
    let client = https_client(&ca, &[]);
    assert_eq!(info_refs(&client, &big_url, Some(greedy)).await, 200);
    // The greedy client's first fetch takes a turn; its second waits for its own.
    let first = stalled_fetch(https_client(&ca, &[]), &big_url, &big, Some(greedy)).await;
    let second = {
        let (client, big_url, big) = (https_client(&ca, &[]), big_url.clone(), big.clone());
        tokio::spawn(async move { stalled_fetch(client, &big_url, &big, Some(greedy)).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    // Another client still gets the other turn at once.
    let started = std::time::Instant::now();
    let home = GitHome::new_as(&ca, &mirror, Some(other));
    let tip = origin.git_commit("acme", "net", "aws", "1.1.0");
    assert_eq!(
        home.clone(&origin_url("terraform-aws-net.git"), "net", &[])
            .await,
        tip
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert!(
        !second.is_finished(),
        "the greedy client's second fetch waits"
    );
    second.abort();
    drop(first);
    mirror.stop().await;
}

/// The real binary, whose memory is its own: requests that wait for a turn hold their first
/// few KiB, not their bodies inflated.
#[tokio::test(flavor = "multi_thread")]
async fn requests_waiting_for_a_turn_hold_no_inflated_bodies() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let big = origin.git_big_repo("big.git", BIG_REPO);
    let dir = tempfile::tempdir().unwrap();
    let git = git_toml(
        &origin,
        "max_concurrent_serves = 1\nmax_serves_per_client = 1\nrefresh_after = \"1h\"",
    );
    let config = crate::support::provender::write_config(
        &ca,
        dir.path(),
        origin.addr(),
        &MirrorOptions {
            extra_toml: &git,
            ..Default::default()
        },
    );
    let server = crate::support::provender::ServerProcess::spawn(&config);
    let big_url = server.url(&format!("git/{GIT_HOST}/git/big.git"));
    assert_eq!(
        info_refs(&https_client(&ca, &[]), &big_url, None).await,
        200
    );
    let held = stalled_fetch(https_client(&ca, &[]), &big_url, &big, None).await;
    let before = server.peak_memory();
    // Each body is 15 KiB on the wire and 15 MiB inflated (under git.max_request_size).
    let body = {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut enc, &v2_fetch(&big)).unwrap();
        std::io::Write::write_all(&mut enc, &vec![b'0'; 15 << 20]).unwrap();
        enc.finish().unwrap()
    };
    let waiting: Vec<_> = (0..24)
        .map(|_| {
            let client = https_client(&ca, &[]);
            let req = client
                .post(format!("{big_url}/git-upload-pack"))
                .header("Git-Protocol", "version=2")
                .header("Content-Encoding", "gzip")
                .body(body.clone());
            tokio::spawn(async move { req.send().await })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let after = server.peak_memory();
    assert!(
        after.saturating_sub(before) < 64 << 20,
        "the waiting requests raised the peak resident memory by {} MiB",
        after.saturating_sub(before) >> 20
    );
    assert!(waiting.iter().all(|w| !w.is_finished()), "they all wait");
    for w in waiting {
        w.abort();
    }
    drop(held);
}

#[tokio::test(flavor = "multi_thread")]
async fn refreshes_are_bounded_per_host_and_in_all_and_the_cache_in_size() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let git = format!(
        "[git]\nallowed_hosts = [\"{GIT_HOST}\", \"{GIT_HOST2}\"]\n\
         max_concurrent_refreshes = 3\nmax_refreshes_per_host = 2\n\n\
         [upstream.hosts.\"{GIT_HOST}\"]\nconnect_to = \"{addr}\"\n\n\
         [upstream.hosts.\"{GIT_HOST2}\"]\nconnect_to = \"{addr}\"\n",
        addr = origin.addr()
    );
    let mut mirror = mirror_with(&ca, &origin, &git, "").await;
    // A slow origin: every git request takes 2 s (and these repositories do not exist).
    origin.set_fault(crate::support::origin::Fault::Delay {
        kind: crate::support::origin::RequestKind::Git,
        millis: 2000,
    });
    let client = https_client(&ca, &[]);
    let asks = [GIT_HOST, GIT_HOST2].into_iter().flat_map(|host| {
        (0..6).map(move |i| {
            format!("git/{host}/git/nowhere-{i}.git/info/refs?service=git-upload-pack")
        })
    });
    let answers = futures_util::future::join_all(asks.map(|path| {
        let req = client.get(mirror.url(&path));
        async move {
            let resp = req.send().await.unwrap();
            let retry = resp.headers().get("retry-after").cloned();
            (resp.status().as_u16(), retry)
        }
    }))
    .await;
    let (peak, by_host) = origin.git_peaks();
    assert!(peak <= 3, "{peak} git requests at once at the origin");
    assert!(
        by_host.values().all(|n| *n <= 2),
        "{by_host:?} git requests at once per host"
    );
    let busy: Vec<_> = answers.iter().filter(|(s, _)| *s == 503).collect();
    assert!(busy.len() >= 6, "{answers:?}");
    assert!(busy.iter().all(|(_, retry)| retry.is_some()), "{answers:?}");
    // The others reached the origin, which has no such repository: 404, not 502.
    assert!(
        answers.iter().all(|(s, _)| *s == 503 || *s == 404),
        "{answers:?}"
    );
    origin.clear_faults();
    mirror.stop().await;

    // The git cache in all at most git.max_size: the repository used least recently goes.
    let mut mirror = self::mirror(&ca, &origin, "max_size = \"1 KiB\"", "").await;
    let home = GitHome::new(&ca, &mirror);
    home.clone(&origin_url("terraform-aws-net.git"), "net", &[])
        .await;
    home.clone(&origin_url("terraform-aws-vpc.git"), "vpc", &[])
        .await;
    let host_dir = mirror.cache_dir.join("git").join(GIT_HOST);
    let kept: Vec<String> = std::fs::read_dir(&host_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|d| std::fs::read_to_string(d.join("provender-origin")).unwrap_or_default())
        .collect();
    assert_eq!(
        kept,
        [format!("{GIT_HOST}/git/acme/terraform-aws-vpc.git")],
        "only the repository refreshed last is kept"
    );
    let asked = origin_refs_requests(&origin, "terraform-aws-net.git");
    home.clone(&origin_url("terraform-aws-net.git"), "net-again", &[])
        .await;
    assert!(origin_refs_requests(&origin, "terraform-aws-net.git") > asked);
    mirror.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_git_host_s_token_needs_client_authentication() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let token = "token = \"origin-secret-0123456789\"\ngit_username = \"bot\"";
    // Without [auth], anyone could read what the token reads: the server does not start.
    let dir = tempfile::tempdir().unwrap();
    let open = cli::config_file(
        dir.path(),
        "open.toml",
        &dir.path().join("cache"),
        origin.addr(),
        &ca,
        "",
    );
    let mut text = std::fs::read_to_string(&open).unwrap();
    text.push_str(&git_toml_with(&origin, "", token));
    text.push_str("\n[server]\nlisten = \"127.0.0.1:0\"\n");
    std::fs::write(&open, text).unwrap();
    let refused = cli::provender(&["serve", "--config", cli::path_str(&open)]).await;
    refused.fails(78);
    assert!(
        refused
            .out()
            .contains(&format!("upstream.hosts.\"{GIT_HOST}\".token"))
            && refused.out().contains("authentication"),
        "{}",
        refused.out()
    );

    // With it, the token goes to the origin with every request, as git sends credentials.
    let client_token = "tok-ci-0123456789abcdef";
    let auth = format!("[[auth.clients]]\nname = \"ci\"\ntoken = \"{client_token}\"\n");
    let git = git_toml_with(&origin, "", token);
    let mut mirror = mirror_with(&ca, &origin, &git, &auth).await;
    let home = GitHome::new_as(&ca, &mirror, Some(client_token));
    let tip = origin.git_commit("acme", "net", "aws", "1.1.0");
    assert_eq!(
        home.clone(&origin_url("terraform-aws-net.git"), "net", &[])
            .await,
        tip
    );
    let basic = {
        use base64::Engine as _;
        let encoded =
            base64::engine::general_purpose::STANDARD.encode("bot:origin-secret-0123456789");
        format!("Basic {encoded}")
    };
    let git_requests: Vec<_> = origin
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/git/"))
        .collect();
    assert!(!git_requests.is_empty());
    assert!(
        git_requests
            .iter()
            .all(|r| r.authorization.as_deref() == Some(basic.as_str())),
        "every request to the git origin carries its token"
    );
    mirror.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn objects_the_origin_scrubbed_are_not_served_after_a_refresh() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let repo = "acme/terraform-aws-net.git";
    let files = std::collections::BTreeMap::from([(
        "secret.txt".to_owned(),
        b"AKIA-leaked-secret\n".to_vec(),
    )]);
    let leak = origin.git_branch_commit(repo, "leak", &files);
    let mut mirror = mirror(&ca, &origin, "refresh_after = \"0s\"", "").await;
    let home = GitHome::new(&ca, &mirror);
    let url = origin_url("terraform-aws-net.git");
    let work = home.dir.path().join("work");
    let (ok, text) = home
        .git(home.dir.path(), &["init", "--quiet", "work"])
        .await;
    assert!(ok, "{text}");
    let fetch_by_id = |protocol: &'static str| {
        let (home, work, url, leak) = (&home, &work, url.clone(), leak.clone());
        async move {
            home.git(
                work,
                &[
                    "-c",
                    &format!("protocol.version={protocol}"),
                    "fetch",
                    "--quiet",
                    &url,
                    &leak,
                ],
            )
            .await
        }
    };
    // While a branch reaches it, the commit is served by id.
    let (ok, text) = fetch_by_id("2").await;
    assert!(ok, "{text}");
    let (ok, text) = home.git(&work, &["cat-file", "-e", &leak]).await;
    assert!(ok, "{text}");

    // The origin deletes the branch and drops its objects; the next refresh drops them too.
    origin.git_scrub_branch(repo, "leak");
    let fresh = home.dir.path().join("fresh");
    let (ok, text) = home
        .git(home.dir.path(), &["init", "--quiet", "fresh"])
        .await;
    assert!(ok, "{text}");
    for protocol in ["2", "0"] {
        let (ok, text) = home
            .git(
                &fresh,
                &[
                    "-c",
                    &format!("protocol.version={protocol}"),
                    "fetch",
                    "--quiet",
                    &url,
                    &leak,
                ],
            )
            .await;
        assert!(
            !ok,
            "protocol {protocol}: the scrubbed commit was served: {text}"
        );
        let (ok, _) = home.git(&fresh, &["cat-file", "-e", &leak]).await;
        assert!(!ok, "protocol {protocol}");
    }
    // What the references reach is still served by id.
    let tag = origin.git_commit("acme", "net", "aws", "1.0.0");
    let (ok, text) = home.git(&fresh, &["fetch", "--quiet", &url, &tag]).await;
    assert!(ok, "{text}");
    mirror.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hanging_origin_does_not_hold_up_clients_of_a_cached_copy() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let toml = git_toml(&origin, "refresh_after = \"0s\"");
    let mut mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_upstream: "connect_timeout = \"2s\"\nidle_timeout = \"20s\"",
            extra_toml: &toml,
            ..Default::default()
        },
    )
    .await;
    let home = GitHome::new(&ca, &mirror);
    let url = origin_url("terraform-aws-net.git");
    let tip = origin.git_commit("acme", "net", "aws", "1.1.0");
    assert_eq!(home.clone(&url, "first", &[]).await, tip);
    // The origin accepts connections and requests but never answers: the refresh gives up
    // after upstream.idle_timeout (20 s), the client gets the copy after
    // upstream.connect_timeout (2 s).
    origin.set_fault(crate::support::origin::Fault::Delay {
        kind: crate::support::origin::RequestKind::Git,
        millis: 3_600_000,
    });
    let started = std::time::Instant::now();
    assert_eq!(home.clone(&url, "second", &[]).await, tip);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "the clone waited {:?} for the refresh",
        started.elapsed()
    );
    // The refresh itself gives up (upstream.connect_timeout and idle_timeout), not after
    // git.fetch_timeout.
    let client = https_client(&ca, &[]);
    let stale = crate::support::poll(std::time::Duration::from_secs(45), async || {
        let metrics = mirror.metrics(&client).await;
        (crate::support::sample(&metrics, "provender_git_refreshes_total{outcome=\"stale\"}") > 0)
            .then_some(())
    })
    .await;
    assert!(
        stale.is_some(),
        "the refresh of a hanging origin never ended"
    );
    origin.clear_faults();
    mirror.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cache_only_reader_of_a_git_sourced_module_causes_no_origin_request() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let (filler, reader) = ("tok-fill-0123456789abcdef", "tok-read-0123456789abcdef");
    let auth = format!(
        "[[auth.clients]]\nname = \"filler\"\ntoken = \"{filler}\"\n\n\
         [[auth.clients]]\nname = \"reader\"\ntoken = \"{reader}\"\n\n\
         [[auth.rules]]\nname = \"readers\"\nclients = [\"reader\"]\nfill = false\n"
    );
    let mut mirror = mirror(&ca, &origin, "", &auth).await;
    let client = https_client(&ca, &[]);
    let download = format!("v1/modules/{REGISTRY}/acme/vpc/aws/2.0.0/download");
    let get = |token: &'static str| {
        let req = client.get(mirror.url(&download)).bearer_auth(token);
        async move { req.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(get(filler).await, 200);
    // The package was fetched long ago: the next download may check where its tag points.
    let cache = mirror.cache_dir.clone();
    mirror.stop().await;
    let record = cache.join(format!("modules/{REGISTRY}/acme/vpc/aws/2.0.0/module.json"));
    let mut rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    assert!(rec["source"]["reference"].is_string(), "{rec}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    rec["fetched_at"] = serde_json::json!(now - 7200);
    std::fs::write(&record, serde_json::to_vec(&rec).unwrap()).unwrap();
    let auth_toml = auth.clone();
    let toml = format!("{}\n{auth_toml}", git_toml(&origin, ""));
    let mut mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            cache_dir: Some(&cache),
            extra_toml: &toml,
            ..Default::default()
        },
    )
    .await;
    let get = |token: &'static str| {
        let req = client.get(mirror.url(&download)).bearer_auth(token);
        async move { req.send().await.unwrap().status().as_u16() }
    };
    let vpc_refs = || origin_refs_requests(&origin, "terraform-aws-vpc.git");
    let before = vpc_refs();
    assert_eq!(get(reader).await, 200);
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(
        vpc_refs(),
        before,
        "the cache-only reader made the mirror ask the origin"
    );
    // A client that may fill does make the check (so the reader's would have been seen).
    assert_eq!(get(filler).await, 200);
    let checked = crate::support::poll(std::time::Duration::from_secs(15), async || {
        (vpc_refs() > before).then_some(())
    })
    .await;
    assert!(
        checked.is_some(),
        "the filler's download checked the reference"
    );
    mirror.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn spellings_of_one_repository_share_one_copy_and_a_missing_one_is_404() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let tip = origin.git_commit("acme", "net", "aws", "1.1.0");
    let mut mirror = mirror(
        &ca,
        &origin,
        &format!("refresh_after = \"0s\"\nforge_hosts = [\"{GIT_HOST}\"]"),
        "",
    )
    .await;
    let home = GitHome::new(&ca, &mirror);
    let base = format!("https://{GIT_HOST}/git/");
    for (i, spelling) in [
        "acme/terraform-aws-net.git",
        "Acme/Terraform-AWS-Net.git",
        "acme/terraform-aws-net",
        "ACME/terraform-aws-net",
    ]
    .iter()
    .enumerate()
    {
        let head = home
            .clone(&format!("{base}{spelling}"), &format!("c{i}"), &[])
            .await;
        assert_eq!(head, tip, "{spelling}");
    }
    let host_dir = mirror.cache_dir.join("git").join(GIT_HOST);
    let copies = std::fs::read_dir(&host_dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().is_dir())
        .count();
    assert_eq!(copies, 1, "one copy for every spelling");
    // Every refresh asked the origin by the name the copy was first filled with.
    let git_paths: std::collections::BTreeSet<String> = origin
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/git/") && r.path.ends_with("/info/refs"))
        .map(|r| r.path)
        .collect();
    assert_eq!(
        git_paths,
        std::collections::BTreeSet::from(["/git/acme/terraform-aws-net.git/info/refs".to_owned()])
    );
    // An origin's "no such repository" is a 404 for git too.
    let client = https_client(&ca, &[]);
    let missing = mirror.url(&format!("git/{GIT_HOST}/git/acme/nowhere.git"));
    assert_eq!(info_refs(&client, &missing, None).await, 404);
    mirror.stop().await;

    // Elsewhere case counts: another spelling is another repository (which this origin lacks).
    let mut mirror = self::mirror(&ca, &origin, "", "").await;
    let home = GitHome::new(&ca, &mirror);
    home.clone(&format!("{base}acme/terraform-aws-net.git"), "lower", &[])
        .await;
    let (ok, text) = home
        .git(
            home.dir.path(),
            &[
                "clone",
                &format!("{base}Acme/Terraform-AWS-Net.git"),
                "upper",
            ],
        )
        .await;
    assert!(!ok && text.contains("not found"), "{text}");
    mirror.stop().await;
}

/// Whether process `pid` is gone (or a zombie nobody waits for).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn stopping_upload_pack_stops_its_pack_objects_too() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    // The server's git, through a wrapper whose `pack-objects` hook records its process and
    // thinks for a minute before packing (protected configuration: the command line).
    let tools = tempfile::tempdir().unwrap();
    let pids = tools.path().join("pids");
    let hook = tools.path().join("slow-pack-objects");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\necho $$ >> '{}'\nsleep 60\nexec \"$@\"\n",
            pids.display()
        ),
    )
    .unwrap();
    let wrapper = tools.path().join("git");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec git -c uploadpack.packObjectsHook='{}' \"$@\"\n",
            hook.display()
        ),
    )
    .unwrap();
    for script in [&hook, &wrapper] {
        std::fs::set_permissions(script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    let more = format!("[modules]\ngit = \"{}\"\n", wrapper.display());
    let mut mirror = mirror(&ca, &origin, "serve_timeout = \"3s\"", &more).await;
    let repo_url = mirror.url(&format!("git/{GIT_HOST}/git/acme/terraform-aws-net.git"));
    assert_eq!(
        info_refs(&https_client(&ca, &[]), &repo_url, None).await,
        200
    );
    let tip = origin.git_commit("acme", "net", "aws", "1.1.0");
    let client = https_client(&ca, &[]);
    let fetch = client
        .post(format!("{repo_url}/git-upload-pack"))
        .header("Git-Protocol", "version=2")
        .body(v2_fetch(&tip))
        .send();
    let fetching = tokio::spawn(async move {
        let resp = fetch.await.unwrap();
        resp.bytes().await.map(|b| b.len())
    });
    let pid = crate::support::poll(std::time::Duration::from_secs(15), async || {
        std::fs::read_to_string(&pids)
            .ok()?
            .trim()
            .parse::<u32>()
            .ok()
    })
    .await
    .expect("the pack-objects hook ran");
    assert!(!gone(pid));
    // At git.serve_timeout the server stops upload-pack, and its child with it.
    let ended = crate::support::poll(std::time::Duration::from_secs(10), async || {
        gone(pid).then_some(())
    })
    .await;
    assert!(
        ended.is_some(),
        "pack-objects (pid {pid}) outlived upload-pack"
    );
    let answer = fetching.await.unwrap();
    assert!(
        answer.is_err(),
        "the answer ends in an error, not a short pack: {answer:?}"
    );
    mirror.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_policy_rule_refuses_a_repository_as_a_whole_and_leaves_the_others() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let tip = origin.git_commit("acme", "net", "aws", "1.1.0");
    // Named without `.git`: the rule covers every spelling the door takes.
    let policy = format!(
        "[policy]\n[[policy.rules]]\nname = \"no-vpc\"\ngit = [\"{GIT_HOST}/git/acme/terraform-aws-vpc\"]\n\
         action = \"deny\"\nreason = \"use the platform team's network module\"\n"
    );
    let mirror = mirror(&ca, &origin, "", &policy).await;
    let home = GitHome::new(&ca, &mirror);
    let head = home
        .clone(
            &format!("https://{GIT_HOST}/git/acme/terraform-aws-net.git"),
            "net",
            &[],
        )
        .await;
    assert_eq!(head, tip);
    let client = https_client(&ca, &[]);
    for spelling in ["terraform-aws-vpc.git", "terraform-aws-vpc"] {
        let got = crate::support::http::get(
            &client,
            &mirror.url(&format!(
                "git/{GIT_HOST}/git/acme/{spelling}/info/refs?service=git-upload-pack"
            )),
        )
        .await;
        assert_eq!(got.status, 410, "{spelling}: {}", got.text());
        assert!(
            got.text()
                .contains("use the platform team's network module"),
            "{}",
            got.text()
        );
    }
    let (ok, said) = home
        .git(
            home.dir.path(),
            &[
                "clone",
                "--quiet",
                &format!("https://{GIT_HOST}/git/acme/terraform-aws-vpc.git"),
                "vpc",
            ],
        )
        .await;
    assert!(!ok, "{said}");
    assert!(
        !origin
            .requests()
            .iter()
            .any(|r| r.path.contains("terraform-aws-vpc")),
        "the origin was never asked for a refused repository"
    );
}
