//! The module registry facade end to end: the real `terraform` CLI installs registry modules
//! through provender (a `host` block sending `modules.v1` and `providers.v1` to it), from a fake
//! origin serving every download form and a real git server.
//!
//! - every source form (absolute and relative archive URLs, `git::https` with `?ref=`, a
//!   `//subdir`, a GitHub-style `//*` tarball, a JSON-only download answer) and a module that
//!   calls another registry module install with exactly the origin's files;
//! - a second `init` in a fresh directory sends the origin nothing; with the origin gone, and
//!   after a restart on the same cache, `init` still works;
//! - a git tag moved upstream does not change what is served; a repository's `.gitattributes`
//!   cannot change a package's bytes (`export-subst`, `export-ignore`);
//! - hostile origins (`..` and absolute entries, links out of the tree, gzip and zip bombs, a
//!   tar header declaring 256 MiB, a redirect loop, endless git, a git tree bomb, a reference
//!   that is an option, private addresses) get a clear JSON error and leave nothing in the
//!   cache; the real binary refuses that tar header without its memory growing by it;
//! - `seed`, `ls`, `export --bundle`, `import` and `verify` carry modules into an offline mirror
//!   that `terraform init` installs from.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use reqwest::StatusCode;
use serde_json::Value;
use tempfile::TempDir;

use crate::support::cli::{config_file, path_str, provender, sealed_config};
use crate::support::http::get;
use crate::support::origin::{
    DownloadAnswer, FakeOrigin, Fault, HostileModule, LONG_NAME_BOMB_DECLARED, ModuleSource,
    ModuleSpec, RequestKind,
};
use crate::support::pki::TestCa;
use crate::support::provender::{
    MirrorOptions, REGISTRY, ServerProcess, TestMirror, files_under, write_config,
};
use crate::support::tf_config::{self, root_module};
use crate::support::{Terraform, TerraformOutput, https_client};

/// The modules the origin serves, one per source form.
fn modules() -> Vec<ModuleSpec> {
    let spec = |name: &str, versions: &[&str]| ModuleSpec::new("acme", name, "test", versions);
    vec![
        spec("net", &["1.0.0", "1.1.0"]),
        spec("rel", &["1.0.0"])
            .source(ModuleSource::RelativeArchive)
            .answer(DownloadAnswer::HeaderAndJson)
            .with_child("acme/leaf/test", "1.0.0"),
        spec("leaf", &["1.0.0"]),
        spec("gitmod", &["1.0.0", "1.1.0"])
            .source(ModuleSource::Git)
            .with_file("modules/extra/main.tf", "# a nested directory\n"),
        spec("gh", &["2.0.0"]).source(ModuleSource::GithubTarball),
        spec("sub", &["1.0.0"]).source(ModuleSource::Subdir("modules/inner".to_owned())),
        spec("gitsub", &["1.0.0"])
            .source(ModuleSource::GitSubdir("modules/inner".to_owned()))
            .answer(DownloadAnswer::HeaderAndJson),
        spec("json", &["1.0.0"]).answer(DownloadAnswer::JsonOnly),
    ]
}

/// A root module calling every module of [`modules`]: `(call name, module name, version)`.
const CALLS: [(&str, &str, &str); 7] = [
    ("net", "net", "1.0.0"),
    ("rel", "rel", "1.0.0"),
    ("git", "gitmod", "1.1.0"),
    ("gh", "gh", "2.0.0"),
    ("sub", "sub", "1.0.0"),
    ("gitsub", "gitsub", "1.0.0"),
    ("json", "json", "1.0.0"),
];

fn root_tf() -> String {
    let mut tf = String::new();
    for (call, name, version) in CALLS {
        let constraint = if name == "gitmod" { "~> 1.0" } else { version };
        tf.push_str(&format!(
            "module \"{call}\" {{\n  source  = \"acme/{name}/test\"\n  version = \"{constraint}\"\n}}\n\n"
        ));
    }
    tf.push_str("output \"child\" {\n  value = module.rel.child_message\n}\n");
    tf
}

async fn origin(ca: &TestCa) -> FakeOrigin {
    FakeOrigin::start_with_modules(ca, &[REGISTRY], Vec::new(), modules()).await
}

/// A CLI configuration sending registry.terraform.io's registry protocols to `mirror`.
fn through(mirror: &url::Url) -> String {
    let base = mirror.as_str();
    tf_config::registry_host_with_modules(
        &format!("{base}v1/providers/{REGISTRY}/"),
        &format!("{base}v1/modules/{REGISTRY}/"),
    )
}

/// `terraform init` in a fresh directory holding [`root_tf`]; the directory and the output.
async fn init(terraform: &Terraform) -> (TempDir, TerraformOutput) {
    let root = root_module(&root_tf());
    let out = terraform.init(root.path()).await;
    (root, out)
}

/// Every regular file under `dir` (`.git` skipped), relative path → content.
fn files_of(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    files_under(dir)
        .into_iter()
        .filter(|p| !p.components().any(|c| c.as_os_str() == ".git"))
        .map(|p| {
            let rel = p.strip_prefix(dir).unwrap().to_str().unwrap().to_owned();
            (rel, std::fs::read(&p).unwrap())
        })
        .collect()
}

/// Checks that `root`'s installed modules hold exactly the origin's files, each version as
/// called; returns the manifest's `Key → (Dir, Version)`.
fn assert_installed(root: &Path, origin: &FakeOrigin) {
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(root.join(".terraform/modules/modules.json")).unwrap(),
    )
    .unwrap();
    let installed: BTreeMap<&str, (&str, &str)> = manifest["Modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["Key"].as_str().unwrap(),
                (
                    m["Dir"].as_str().unwrap(),
                    m["Version"].as_str().unwrap_or_default(),
                ),
            )
        })
        .collect();
    let wanted = CALLS
        .iter()
        .map(|(call, name, version)| (*call, *name, *version))
        .chain([("rel.child", "leaf", "1.0.0")]);
    for (key, name, version) in wanted {
        let (dir, got_version) = installed
            .get(key)
            .unwrap_or_else(|| panic!("module {key} not installed: {manifest}"));
        assert_eq!(*got_version, version, "{key}");
        assert_eq!(
            files_of(&root.join(dir)),
            origin.module_files("acme", name, "test", version),
            "{key}: the installed files are not the origin's"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn terraform_installs_every_source_form_through_the_mirror_then_from_its_cache_alone() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let mirror = TestMirror::start(&ca, &origin).await;
    // Only provender is reachable for the CLI: git has no CA for the origin.
    let terraform = Terraform::new(&ca, &through(&mirror.url));

    let (first, out) = init(&terraform).await;
    out.assert_success();
    assert_installed(first.path(), &origin);
    terraform
        .run(first.path(), &["validate", "-no-color"])
        .await
        .assert_success();
    assert!(origin.count(RequestKind::Git) >= 2, "git was used");
    // One download answer per module version; provender sends nothing else for providers.
    assert_eq!(origin.count(RequestKind::ModuleDownload), 8);

    // A fresh directory: versions and packages come from the cache; the origin hears nothing.
    origin.reset_counts();
    let (second, out) = init(&terraform).await;
    out.assert_success();
    assert_installed(second.path(), &origin);
    assert_eq!(origin.total_requests(), 0, "{:?}", origin.requests());

    // A restart on the same cache, the origin unreachable: the cache alone serves.
    let closed: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let cache_dir = mirror.cache_dir.clone();
    let restarted = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            cache_dir: Some(&cache_dir),
            connect_to: Some(closed),
            ..Default::default()
        },
    )
    .await;
    origin.stop().await;
    let terraform = Terraform::new(&ca, &through(&restarted.url));
    let (third, out) = init(&terraform).await;
    out.assert_success();
    let manifest = std::fs::read_to_string(third.path().join(".terraform/modules/modules.json"));
    assert!(manifest.unwrap().contains("\"rel.child\""));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_git_tag_moved_upstream_does_not_change_the_cached_package() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    let download = mirror.url(&format!(
        "v1/modules/{REGISTRY}/acme/gitmod/test/1.0.0/download"
    ));
    let first = get(&client, &download).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    let location = first.headers["x-terraform-get"]
        .to_str()
        .unwrap()
        .to_owned();
    // OpenTofu reads the same location from the JSON body.
    assert_eq!(first.json()["location"], location.as_str());
    assert!(location.contains("?checksum=sha256:"), "{location}");
    let package = get(&client, &mirror.url(location.split('?').next().unwrap())).await;
    assert_eq!(package.status, StatusCode::OK);
    let before = origin.git_commit("acme", "gitmod", "test", "1.0.0");

    let moved = origin.move_tag(
        "acme",
        "gitmod",
        "test",
        "1.0.0",
        &[("main.tf", b"output \"moved\" { value = true }\n".as_slice())],
    );
    assert_ne!(moved, before);
    let again = get(&client, &download).await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(
        again.headers["x-terraform-get"], first.headers["x-terraform-get"],
        "same checksum, same package"
    );
    let served = get(&client, &mirror.url(location.split('?').next().unwrap())).await;
    assert_eq!(served.body, package.body);

    // Terraform, from a fresh directory, gets the original content.
    let terraform = Terraform::new(&ca, &through(&mirror.url));
    let root = root_module(
        "module \"git\" {\n  source  = \"acme/gitmod/test\"\n  version = \"1.0.0\"\n}\n",
    );
    terraform.init(root.path()).await.assert_success();
    assert_eq!(
        files_of(&root.path().join(".terraform/modules/git")),
        origin.module_files("acme", "gitmod", "test", "1.0.0")
    );

    // The record names the commit the tag had when it was fetched.
    let record: Value = serde_json::from_slice(
        &std::fs::read(mirror.cache_dir.join(format!(
            "modules/{REGISTRY}/acme/gitmod/test/1.0.0/module.json"
        )))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(record["source"]["commit"], before.as_str(), "{record}");
}

/// Module packages (and their records) in a cache directory.
/// The files of a `.tar.gz` package, path → content.
fn package_files(tar_gz: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(tar_gz));
    let mut files = BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.header().entry_type().is_file() {
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let mut body = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut body).unwrap();
            files.insert(path, body);
        }
    }
    files
}

/// `git archive` would expand `$Format:...$` under `export-subst` (with `%ar`, "N seconds ago",
/// different at each fetch) and drop `export-ignore` files: neither happens, so a package from
/// git holds what a clone holds, the same bytes at every fetch and on every replica.
#[tokio::test(flavor = "multi_thread")]
async fn git_packages_ignore_the_repositorys_export_attributes() {
    let ca = TestCa::new();
    let spec = ModuleSpec::new("acme", "attrs", "test", &["1.0.0"])
        .source(ModuleSource::Git)
        .with_file(
            ".gitattributes",
            "when.txt export-subst\nignored.txt export-ignore\n",
        )
        .with_file("when.txt", "$Format:%ar %H$\n")
        .with_file("ignored.txt", "kept\n");
    let origin = FakeOrigin::start_with_modules(&ca, &[REGISTRY], Vec::new(), vec![spec]).await;
    let client = https_client(&ca, &[]);
    let mut fetched = Vec::new();
    for _ in 0..2 {
        let mirror = TestMirror::start(&ca, &origin).await;
        let url = mirror.url(&format!(
            "v1/modules/{REGISTRY}/acme/attrs/test/1.0.0/module.tar.gz"
        ));
        let got = get(&client, &url).await;
        assert_eq!(got.status, StatusCode::OK, "{}", got.text());
        fetched.push(got.body);
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    }
    let files = package_files(&fetched[0]);
    assert_eq!(files["when.txt"], b"$Format:%ar %H$\n", "{files:?}");
    assert_eq!(files["ignored.txt"], b"kept\n");
    assert_eq!(fetched[0], fetched[1], "two fetches, the same package");
}

/// Processes whose command line holds `needle`, seen by scanning `/proc` until `stop` is set.
fn watch_command_lines(
    needle: &'static str,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<(usize, Vec<String>)> {
    std::thread::spawn(move || {
        let (mut scans, mut seen) = (0, Vec::new());
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
                    let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                    if text.contains(needle) {
                        seen.push(text);
                    }
                }
            }
            scans += 1;
        }
        (scans, seen)
    })
}

/// Git sources go through `upstream.proxy` like every other origin request, and the proxy's
/// credentials reach git in its environment: no process ever shows them on its command line.
#[tokio::test(flavor = "multi_thread")]
async fn git_goes_through_the_proxy_without_showing_its_credentials() {
    use crate::support::egress_proxy::EgressProxy;
    use base64::Engine as _;
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let proxy = EgressProxy::start(origin.addr()).await;
    let credentials = base64::engine::general_purpose::STANDARD.encode("egress:s3cret-git");
    proxy.require_authorization(&format!("Basic {credentials}"));
    let setting = format!("proxy = \"http://egress:s3cret-git@{}\"", proxy.addr());
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_upstream: &setting,
            by_name: true,
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = watch_command_lines("s3cret-git", stop.clone());
    let got = get(
        &client,
        &mirror.url(&format!(
            "v1/modules/{REGISTRY}/acme/gitmod/test/1.0.0/download"
        )),
    )
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (scans, seen) = watcher.join().unwrap();
    assert!(got.status.is_success(), "{}", got.text());
    assert!(
        origin.count(RequestKind::Git) > 0,
        "git fetched from the origin"
    );
    assert!(scans > 10, "the watcher looked only {scans} times");
    assert!(seen.is_empty(), "credentials on a command line: {seen:?}");
    let tunnels = proxy.tunnels();
    assert!(
        tunnels.len() >= 2
            && tunnels
                .iter()
                .all(|t| t.authorization.as_deref() == Some(&*format!("Basic {credentials}"))),
        "{tunnels:?}"
    );
}

fn cached_modules(cache: &Path) -> Vec<PathBuf> {
    files_under(&cache.join("modules"))
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "versions.json"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_origins_get_a_clear_error_and_leave_nothing_behind() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_toml: "[modules]\nmax_unpacked_size = \"64 MiB\"\nmax_git_size = \"4 MiB\"\ngit_timeout = \"20s\"\n",
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    let download = mirror.url(&format!(
        "v1/modules/{REGISTRY}/acme/net/test/1.0.0/download"
    ));

    let cases: Vec<(Fault, StatusCode, &str)> = vec![
        (
            Fault::HostileModule(HostileModule::DotDot),
            StatusCode::BAD_GATEWAY,
            "..",
        ),
        (
            Fault::HostileModule(HostileModule::AbsolutePath),
            StatusCode::BAD_GATEWAY,
            "absolute",
        ),
        (
            Fault::HostileModule(HostileModule::Symlink),
            StatusCode::BAD_GATEWAY,
            "secrets.tf",
        ),
        (
            Fault::HostileModule(HostileModule::GzipBomb),
            StatusCode::BAD_GATEWAY,
            "modules.max_unpacked_size",
        ),
        (
            Fault::HostileModule(HostileModule::LongNameBomb),
            StatusCode::BAD_GATEWAY,
            "tar entry 1: a GNU long-name header of 268435456 bytes, more than 65536",
        ),
        (
            Fault::HostileModule(HostileModule::ZipBomb),
            StatusCode::BAD_GATEWAY,
            "modules.max_unpacked_size",
        ),
        (
            Fault::HostileModule(HostileModule::RedirectLoop),
            StatusCode::BAD_GATEWAY,
            "redirect",
        ),
        (
            Fault::HostileModule(HostileModule::EndlessGit),
            StatusCode::BAD_GATEWAY,
            "modules.max_git_size",
        ),
        // Within every fetch limit, but its archive would be 256 GiB: stopped at the cap a
        // package within the unpacking limits can take, long before modules.git_timeout.
        (
            Fault::HostileModule(HostileModule::TreeBombGit),
            StatusCode::BAD_GATEWAY,
            "modules.max_unpacked_size",
        ),
        (
            Fault::HostileModule(HostileModule::OptionRef),
            StatusCode::BAD_GATEWAY,
            "not a valid git reference",
        ),
        (
            Fault::ModuleLocation("https://127.0.0.1:1/x.tar.gz"),
            StatusCode::BAD_GATEWAY,
            "127.0.0.1",
        ),
        (
            Fault::ModuleLocation("https://localhost/x.tar.gz"),
            StatusCode::BAD_GATEWAY,
            "localhost",
        ),
        (
            Fault::ModuleLocation("git::ssh://git@example.com/acme/net.git"),
            StatusCode::BAD_GATEWAY,
            "git::ssh",
        ),
        (
            Fault::ModuleLocation("file:///etc/passwd"),
            StatusCode::BAD_GATEWAY,
            "file:///etc/passwd",
        ),
    ];
    for (fault, status, names) in cases {
        let what = format!("{fault:?}");
        origin.clear_faults();
        origin.set_fault(fault);
        let got = get(&client, &download).await;
        assert_eq!(got.status, status, "{what}: {}", got.text());
        assert!(
            got.content_type().starts_with("application/json"),
            "{what}: {}",
            got.content_type()
        );
        let message = got.message();
        assert!(
            message.contains(names),
            "{what}: the error should name {names:?}: {message}"
        );
        assert!(got.headers.get("x-terraform-get").is_none(), "{what}");
        assert_eq!(
            cached_modules(&mirror.cache_dir),
            Vec::<PathBuf>::new(),
            "{what}"
        );
        assert_eq!(mirror.staging_files(), Vec::<PathBuf>::new(), "{what}");
    }
    assert!(
        origin.endless_git_bytes_sent() < 64 << 20,
        "the git fetch was stopped early: {} bytes",
        origin.endless_git_bytes_sent()
    );

    // The origin behaves again: the same version installs cleanly.
    origin.clear_faults();
    let got = get(&client, &download).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.text());
    assert_eq!(cached_modules(&mirror.cache_dir).len(), 2);
}

/// The most memory the real server may use while refusing [`HostileModule::LongNameBomb`]
/// (it peaks near 30 MiB; without a bound on the header it reached 827 MiB).
const LONG_NAME_BOMB_PEAK: u64 = 200 << 20;

/// The real binary, whose memory is its own, fetches a package whose first header declares a
/// 256 MiB name: a 502 naming the header, its peak memory well below that, nothing cached.
#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_tar_header_is_refused_without_reading_it() {
    let ca = TestCa::new();
    let origin = FakeOrigin::start_with_modules(
        &ca,
        &[REGISTRY],
        Vec::new(),
        vec![ModuleSpec::new("acme", "net", "test", &["1.0.0"])],
    )
    .await;
    origin.set_fault(Fault::HostileModule(HostileModule::LongNameBomb));
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(&ca, dir.path(), origin.addr(), &MirrorOptions::default());
    let server = ServerProcess::spawn(&config);
    let client = https_client(&ca, &[]);

    let got = get(
        &client,
        &server.url(&format!(
            "v1/modules/{REGISTRY}/acme/net/test/1.0.0/download"
        )),
    )
    .await;
    assert_eq!(got.status, StatusCode::BAD_GATEWAY, "{}", got.text());
    assert!(got.content_type().starts_with("application/json"));
    let message = got.message();
    assert!(
        message.contains(&format!(
            "tar entry 1: a GNU long-name header of {LONG_NAME_BOMB_DECLARED} bytes, more than 65536"
        )),
        "{message}"
    );
    assert_eq!(origin.count(RequestKind::ModuleArchive), 1, "fetched once");
    let peak = server.peak_memory();
    assert!(
        peak < LONG_NAME_BOMB_PEAK,
        "peak resident memory {} MiB",
        peak >> 20
    );
    assert_eq!(
        cached_modules(&dir.path().join("cache")),
        Vec::<PathBuf>::new()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_modules_and_hosts_get_json_errors() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let mirror = TestMirror::start(&ca, &origin).await;
    let client = https_client(&ca, &[]);
    for (path, status) in [
        (
            format!("v1/modules/{REGISTRY}/acme/nope/test/versions"),
            StatusCode::NOT_FOUND,
        ),
        (
            format!("v1/modules/{REGISTRY}/acme/net/test/9.9.9/download"),
            StatusCode::NOT_FOUND,
        ),
        (
            "v1/modules/example.com/acme/net/test/versions".to_owned(),
            StatusCode::NOT_FOUND,
        ),
        (
            format!("v1/modules/{REGISTRY}/acme/net/test/not-a-version/download"),
            StatusCode::BAD_REQUEST,
        ),
        (
            format!("v1/modules/{REGISTRY}/acme/net/test/9.9.9/module.tar.gz"),
            StatusCode::NOT_FOUND,
        ),
    ] {
        let got = get(&client, &mirror.url(&path)).await;
        assert_eq!(got.status, status, "{path}: {}", got.text());
        assert!(!got.message().is_empty(), "{path}: {}", got.text());
    }
    let versions = get(
        &client,
        &mirror.url(&format!("v1/modules/{REGISTRY}/acme/net/test/versions")),
    )
    .await;
    assert_eq!(versions.status, StatusCode::OK);
    assert_eq!(
        versions.json(),
        serde_json::json!({"modules": [{"versions": [{"version": "1.0.0"}, {"version": "1.1.0"}]}]})
    );
    // Discovery on the mirror itself names both protocols.
    let discovery = get(&client, &mirror.root_url("/.well-known/terraform.json")).await;
    assert_eq!(discovery.status, StatusCode::OK);
    let doc = discovery.json();
    assert!(
        doc["modules.v1"]
            .as_str()
            .unwrap()
            .ends_with("v1/modules/-/"),
        "{doc}"
    );
    assert!(
        doc["providers.v1"]
            .as_str()
            .unwrap()
            .ends_with("v1/providers/-/"),
        "{doc}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn modules_cross_an_air_gap_with_seed_export_import_and_verify() {
    let ca = TestCa::new();
    let origin = origin(&ca).await;
    let work = tempfile::tempdir().unwrap();
    let online = work.path().join("online");
    let cfg = config_file(work.path(), "online.toml", &online, origin.addr(), &ca, "");
    let cfg = path_str(&cfg);

    // Seed from a configuration that was never initialised: its registry module calls are
    // resolved, fetched and read (rel calls leaf), plus one given on the command line.
    let config_dir = root_module(&root_tf());
    let seeded = provender(&[
        "seed",
        "--config",
        cfg,
        "--module",
        "acme/net/test@1.1.0",
        path_str(config_dir.path()),
    ])
    .await;
    seeded.ok();
    let mut seen: Vec<String> = crate::support::cli::listed_modules(cfg)
        .await
        .into_iter()
        .map(|(shown, _)| shown)
        .collect();
    seen.sort();
    let mut expected: Vec<String> = CALLS
        .iter()
        .map(|(_, name, version)| format!("{REGISTRY}/acme/{name}/test@{version}"))
        .chain([
            format!("{REGISTRY}/acme/leaf/test@1.0.0"),
            format!("{REGISTRY}/acme/net/test@1.1.0"),
        ])
        .collect();
    expected.sort();
    assert_eq!(seen, expected);
    let table = provender(&["ls", "--config", cfg]).await;
    table.ok();
    assert!(
        table.stdout.contains("acme/gitmod/test"),
        "{}",
        table.stdout
    );

    // Export a signed bundle, import it into an empty cache, serve that cache sealed.
    let bundle = work.path().join("modules.bundle");
    provender(&["export", "--config", cfg, "--bundle", path_str(&bundle)])
        .await
        .ok();
    let offline = work.path().join("offline");
    let sealed = sealed_config(work.path(), "offline.toml", &offline, &ca);
    let imported = provender(&["import", "--config", path_str(&sealed), path_str(&bundle)]).await;
    imported.ok();
    assert!(imported.out().contains("module"), "{}", imported.out());
    origin.stop().await;
    let closed: SocketAddr = "127.0.0.1:9".parse().unwrap();
    let dummy = self::origin(&ca).await;
    let mirror = TestMirror::start_with(
        &ca,
        &dummy,
        MirrorOptions {
            cache_dir: Some(&offline),
            connect_to: Some(closed),
            extra_upstream: "offline = true",
            ..Default::default()
        },
    )
    .await;
    let terraform = Terraform::new(&ca, &through(&mirror.url));
    let (root, out) = init(&terraform).await;
    out.assert_success();
    assert_eq!(dummy.total_requests(), 0);
    let manifest = std::fs::read_to_string(root.path().join(".terraform/modules/modules.json"));
    assert!(manifest.unwrap().contains("\"rel.child\""));
    // The sealed site reads each module's documentation from the imported package.
    let client = https_client(&ca, &[]);
    let docs = get(
        &client,
        &mirror.url(&format!("-/api/v1/modules/{REGISTRY}/acme/net/test/1.0.0")),
    )
    .await;
    assert_eq!(docs.status, StatusCode::OK, "{}", docs.text());
    assert_eq!(docs.json()["docs"]["root"]["inputs"][0]["name"], "greeting");
    let docs_file = offline.join(format!("modules/{REGISTRY}/acme/net/test/1.0.0/docs.json"));
    assert!(docs_file.exists(), "kept beside the package");

    // verify re-hashes packages; a damaged one is quarantined and reported.
    let offline_cfg = path_str(&sealed);
    provender(&["verify", "--config", offline_cfg]).await.ok();
    let package = offline.join(format!(
        "modules/{REGISTRY}/acme/net/test/1.0.0/module.tar.gz"
    ));
    let mut bytes = std::fs::read(&package).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&package, bytes).unwrap();
    let found = provender(&["verify", "--config", offline_cfg]).await;
    found.fails(1);
    assert!(found.out().contains("acme/net/test"), "{}", found.out());
    assert!(!package.exists(), "the damaged package is out of service");
    assert!(!docs_file.exists(), "its documentation goes with it");
}

/// A version the origin does not list is answered from the cached version list, at the module
/// door and at the OCI door alike: twenty requests for it cost the origin one list and no
/// download request. The list is asked for again for such a version at most once per
/// `cache.not_found_ttl`; a listed version whose origin has no package is remembered as
/// missing for as long.
#[tokio::test(flavor = "multi_thread")]
async fn unknown_module_versions_are_checked_against_the_cached_list() {
    let ca = TestCa::new();
    let origin = FakeOrigin::start_with_modules(
        &ca,
        &[REGISTRY],
        Vec::new(),
        vec![ModuleSpec::new("acme", "net", "test", &["1.0.0", "1.1.0"])],
    )
    .await;
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_cache: "not_found_ttl = \"3s\"",
            ..Default::default()
        },
    )
    .await;
    let client = https_client(&ca, &[]);
    let door = |version: &str| {
        mirror.url(&format!(
            "v1/modules/{REGISTRY}/acme/net/test/{version}/download"
        ))
    };
    let oci = |version: &str| {
        mirror.root_url(&format!(
            "/v2/{REGISTRY}/modules/acme/net/test/manifests/{version}"
        ))
    };
    for _ in 0..10 {
        for url in [door("9.9.9"), oci("9.9.9")] {
            let got = get(&client, &url).await;
            assert_eq!(got.status, StatusCode::NOT_FOUND, "{url}: {}", got.text());
            assert!(
                got.text().contains("does not list version 9.9.9"),
                "{}",
                got.text()
            );
        }
    }
    assert_eq!(origin.count(RequestKind::ModuleDownload), 0);
    assert_eq!(origin.count(RequestKind::ModuleVersions), 1);

    // Once the list is older than not_found_ttl, one request asks for it again (a version
    // published since would show up); the others within the interval do not.
    tokio::time::sleep(std::time::Duration::from_millis(3100)).await;
    for _ in 0..5 {
        assert_eq!(
            get(&client, &door("9.9.9")).await.status,
            StatusCode::NOT_FOUND
        );
    }
    assert_eq!(origin.count(RequestKind::ModuleVersions), 2);
    assert_eq!(origin.count(RequestKind::ModuleDownload), 0);

    // Listed, but the origin has no package for it: remembered for not_found_ttl.
    origin.set_fault(Fault::Status {
        kind: RequestKind::ModuleDownload,
        status: 404,
    });
    for _ in 0..5 {
        for url in [door("1.1.0"), oci("1.1.0")] {
            let got = get(&client, &url).await;
            assert_eq!(got.status, StatusCode::NOT_FOUND, "{url}: {}", got.text());
        }
    }
    assert_eq!(origin.count(RequestKind::ModuleDownload), 1);
    origin.clear_faults();
    tokio::time::sleep(std::time::Duration::from_millis(3100)).await;
    let got = get(&client, &door("1.1.0")).await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.text());
    assert_eq!(origin.count(RequestKind::ModuleDownload), 2);
}
