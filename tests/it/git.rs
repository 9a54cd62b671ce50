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

async fn origin(ca: &TestCa) -> FakeOrigin {
    FakeOrigin::start_with_modules(
        ca,
        &[REGISTRY, GIT_HOST],
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
    let text = format!(
        "[url \"{}\"]\n\tinsteadOf = https://{GIT_HOST}/\n[http]\n\tsslCAInfo = {}\n",
        mirror.url(&format!("git/{GIT_HOST}/")),
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
        let dir = tempfile::Builder::new()
            .prefix("provender-git-home-")
            .tempdir()
            .unwrap();
        let ca_file = ca.write_ca(dir.path());
        gitconfig(dir.path(), mirror, &ca_file);
        GitHome { dir }
    }

    /// Runs `git args` in `cwd` without blocking the runtime; its output and success.
    async fn git(&self, cwd: &Path, args: &[&str]) -> (bool, String) {
        let home = self.dir.path().to_path_buf();
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
    // A private origin's token goes to it, as git sends credentials.
    let git = git_toml_with(
        &origin,
        "refresh_after = \"1h\"",
        "token = \"origin-secret-0123456789\"\ngit_username = \"bot\"",
    );
    let mut mirror = mirror_with(&ca, &origin, &git, "").await;
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
    assert!(
        git_requests
            .iter()
            .all(|r| r.authorization.as_deref() == Some(basic.as_str())),
        "every request to the git origin carries its token"
    );

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
    let mut mirror = mirror(&ca, &origin, "", "").await;
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
    // edge's token read from a file; the registry origin is never reached either.
    let work = tempfile::tempdir().unwrap();
    let token_file = work.path().join("token");
    std::fs::write(&token_file, token).unwrap();
    let centre_host = format!("localhost:{}", centre.url.port().unwrap());
    let edge_toml = format!(
        "[git]\nallowed_hosts = [\"{GIT_HOST}\"]\nrefresh_after = \"0s\"\n\n\
         [upstream.hosts.\"{GIT_HOST}\"]\nvia = \"{}\"\n\n\
         [upstream.hosts.\"{centre_host}\"]\ntoken_file = \"{}\"\n",
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
    let home = GitHome::new(&ca, &edge);
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
