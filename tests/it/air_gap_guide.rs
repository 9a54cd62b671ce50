//! The user guide's air-gap chapter (`docs/src/air-gap.md`), walked exactly as written: the
//! site configurations, the CLI configuration, the example Terraform configuration and the
//! commands are the chapter's own files under `docs/src/air-gap/`, read from there, and every
//! command of `walk.sh` is run in order, site by site, with the real `provender`, `terraform`,
//! `git` and `curl`. A step that fails fails the test; before the sealed site's first step,
//! the connected site's server and every origin are stopped for good.
//!
//! The test changes only what a test must, by substituting the names the chapter's "What to
//! replace" table tells its reader to replace:
//! - `mirror.example.com` and `0.0.0.0:443` become `127.0.0.1:<port>` (one port: the two
//!   sites' servers run one after the other);
//! - `/etc/provender` and `/var/lib/provender` become each site's own directories, and
//!   `/media/transfer` a directory between them;
//! - `ed25519:REPLACE-WITH-THE-CONNECTED-SITE-KEY` becomes the line of the connected site's
//!   `site.key.pub`, once `keygen` has written it;
//!
//! and it adds what reaches local stand-ins instead of the real origins: to the connected
//! site's configuration `upstream.ca_file` (the test CA) and `upstream.allow_private_networks`,
//! `[upstream.hosts]` entries sending `registry.terraform.io` and `git.example.com` to the fake
//! origin, and `releases.hashicorp_url` for a static server holding the real terraform binary's
//! release; to both sites' `releases.hashicorp_key_file`, the test key that release is signed
//! with (in place of HashiCorp's); and to the connected site's `terraform get` a `host` block
//! and git's `insteadOf` sending it to the fake origin. The fixtures are what the chapter's
//! reader already has:
//! the origins' providers and modules that `main.tf` names, the git repository of its `git::`
//! module, CI's `dist/` for `acme/app`, the mirror's certificate and the CI token.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::cli::{Run, snapshot};
use crate::support::origin::{FakeOrigin, ModuleSource, ModuleSpec, ProviderSpec};
use crate::support::pki::TestCa;
use crate::support::provender::{REGISTRY, ServerProcess, free_port};
use crate::support::static_server::StaticServer;
use crate::support::{TIMEOUT, Terraform, tf_config};

/// The chapter's files.
const GUIDE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/src/air-gap");
/// The git host the example's `git::` module names.
const GIT_HOST: &str = "git.example.com";

/// Where a step of `walk.sh` runs, by its `##` heading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Connected,
    Carry,
    Sealed,
    Client,
}

impl Place {
    fn of_heading(heading: &str) -> Place {
        let h = heading.to_ascii_lowercase();
        if h.contains("connected site") {
            Place::Connected
        } else if h.contains("carry") {
            Place::Carry
        } else if h.contains("runs terraform") {
            Place::Client
        } else if h.contains("sealed site") {
            Place::Sealed
        } else {
            panic!("walk.sh: a heading the test does not know: {heading:?}")
        }
    }
}

/// The walk's state: the names substituted, each place's directory, what runs.
struct Walk {
    ca: TestCa,
    work: tempfile::TempDir,
    host: String,
    connected: PathBuf,
    sealed: PathBuf,
    client: PathBuf,
    transfer: PathBuf,
    /// The public key of the connected site, once made.
    site_key: Option<String>,
    /// What the connected site's configuration gets added (the stand-ins for the origins).
    stand_ins: String,
    releases: String,
    /// The stand-in release's vendor key (`releases.hashicorp_key_file`), at both sites.
    vendor_key: String,
    servers: Vec<ServerProcess>,
    /// `export`ed variables, for the client's commands.
    env: BTreeMap<String, String>,
    terraform: Option<Terraform>,
    /// The release zip the static origin serves, to compare with what the client downloads.
    terraform_zip: Vec<u8>,
    /// terraform at the connected site, which reaches the origins themselves: here a `host`
    /// block and git's `insteadOf` send it to the fake origin (what `connect_to` does for the
    /// mirror).
    connected_terraform: Terraform,
}

impl Walk {
    /// The directory a place's commands run in.
    fn dir(&self, place: Place) -> &Path {
        match place {
            Place::Connected => &self.connected,
            Place::Carry | Place::Sealed => &self.sealed,
            Place::Client => &self.client,
        }
    }

    /// `text` with the chapter's names replaced by this test's, for a place.
    fn substitute(&self, text: &str, place: Place) -> String {
        let site = match place {
            Place::Connected => &self.connected,
            _ => &self.sealed,
        };
        let mut out = text
            .replace("/etc/provender", &site.join("etc").display().to_string())
            .replace(
                "/var/lib/provender",
                &site.join("cache").display().to_string(),
            )
            .replace("/media/transfer", &self.transfer.display().to_string())
            .replace("0.0.0.0:443", &self.host)
            .replace("mirror.example.com", &self.host);
        if let Some(key) = &self.site_key {
            out = out.replace("ed25519:REPLACE-WITH-THE-CONNECTED-SITE-KEY", key);
        }
        out
    }

    /// Writes a chapter file, substituted, into a place's directory (and returns its path).
    fn place_file(&self, name: &str, place: Place, to: &str) -> PathBuf {
        let text = std::fs::read_to_string(Path::new(GUIDE).join(name))
            .unwrap_or_else(|e| panic!("{GUIDE}/{name}: {e}"));
        let path = self.dir(place).join(to);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, self.substitute(&text, place)).unwrap();
        path
    }

    /// The site's `etc` directory with what its reader already has: the mirror's certificate
    /// for the hostname, the CA's, and (at the connected site) CI's token.
    fn etc(&self, place: Place) -> PathBuf {
        let etc = self.dir(place).join("etc");
        std::fs::create_dir_all(etc.join("tls")).unwrap();
        let issued = self.ca.issue(&["127.0.0.1", "localhost"]);
        std::fs::write(etc.join("tls/mirror.crt"), &issued.cert_pem).unwrap();
        std::fs::write(etc.join("tls/mirror.key"), &issued.key_pem).unwrap();
        self.ca.write_ca(&etc.join("tls"));
        etc
    }
}

/// Splits one shell command line into words: spaces separate, double and single quotes group
/// (and are removed); a trailing `&` is a word of its own. Enough for `walk.sh`, which uses
/// nothing else (the test fails on anything it does not read).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let mut started = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                started = true;
            }
            (None, ' ' | '\t') => {
                if started {
                    out.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            (None, '$' | '`' | '|' | ';' | '<' | '>' | '\\') => {
                panic!("walk.sh: the test does not read {c:?} in {line:?}")
            }
            (None, c) => {
                word.push(c);
                started = true;
            }
        }
    }
    assert!(quote.is_none(), "walk.sh: an unclosed quote in {line:?}");
    if started {
        out.push(word);
    }
    out
}

/// The commands of `walk.sh`, each with the place it runs at.
fn steps(script: &str) -> Vec<(Place, String)> {
    let mut place = None;
    let mut out = Vec::new();
    for line in script.lines() {
        let line = line.trim();
        if let Some(heading) = line.strip_prefix("## ") {
            place = Some(Place::of_heading(heading));
            continue;
        }
        if line.is_empty() || line.starts_with('#') || line == "set -eu" {
            continue;
        }
        let place = place.unwrap_or_else(|| panic!("walk.sh: {line:?} comes before any heading"));
        out.push((place, line.to_string()));
    }
    out
}

/// Runs `program` with `args` in `dir`, with only `PATH` and `env` in its environment.
async fn run(dir: &Path, program: &str, args: &[String], env: &[(&str, String)]) -> Run {
    let (dir, program, argv) = (dir.to_path_buf(), program.to_string(), args.to_vec());
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let shown: Vec<String> = std::iter::once(program.clone())
        .chain(argv.iter().cloned())
        .collect();
    let output = tokio::time::timeout(
        TIMEOUT * 4,
        tokio::task::spawn_blocking(move || {
            Command::new(&program)
                .args(&argv)
                .current_dir(&dir)
                .env_clear()
                .env("PATH", std::env::var("PATH").unwrap_or_default())
                .envs(env)
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("run {program}: {e}"))
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("{shown:?} did not finish"))
    .expect("runner");
    Run {
        args: shown,
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// CI's `dist/` for `acme/app` 1.0.0, as GoReleaser lays it out: each platform's zip and the
/// SHA256SUMS listing them.
fn dist(origin: &FakeOrigin, dir: &Path, platforms: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    let mut sums = String::new();
    for (os, arch) in platforms {
        let name = origin.filename("acme", "app", "1.0.0", os, arch);
        let bytes = origin.archive("acme", "app", "1.0.0", os, arch);
        sums.push_str(&format!(
            "{}  {name}\n",
            crate::releases::sha256_hex(&bytes)
        ));
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    std::fs::write(dir.join("terraform-provider-app_1.0.0_SHA256SUMS"), sums).unwrap();
}

/// The commands of the chapter's own fenced `sh` blocks (continuation lines joined), so that
/// the prose cannot say other than `walk.sh` does.
fn chapter_commands(chapter: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in chapter.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        if !in_sh || line.starts_with("{{#include") {
            continue;
        }
        let line = line.trim();
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head.trim_end());
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let command = std::mem::take(&mut pending);
        if !command.is_empty() && !command.starts_with('#') {
            out.push(command.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn the_air_gap_chapter_walks_as_written() {
    let chapter =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/src/air-gap.md"))
            .unwrap();
    for file in [
        "connected.toml",
        "sealed.toml",
        "terraform.tfrc",
        "main.tf",
        "walk.sh",
    ] {
        assert!(
            chapter.contains(&format!("{{{{#include air-gap/{file}}}}}")),
            "the chapter includes {file}"
        );
    }
    let script = std::fs::read_to_string(Path::new(GUIDE).join("walk.sh")).unwrap();
    let steps = steps(&script);
    let walked: Vec<String> = steps
        .iter()
        .map(|(_, s)| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    for command in chapter_commands(&chapter) {
        assert!(
            walked.contains(&command),
            "the chapter shows a command walk.sh does not run: {command}"
        );
    }

    // The origins: the registry with the providers and modules main.tf names (and acme/app's
    // zips, which CI built), its git server, and HashiCorp's releases.
    let ca = TestCa::new();
    let platforms = tf_config::local_platform_and(&[("linux", "amd64"), ("darwin", "arm64")]);
    let origin = FakeOrigin::start_with_modules(
        &ca,
        &[REGISTRY, GIT_HOST],
        vec![
            ProviderSpec::new("integrations", "github", &["6.2.0"], &platforms),
            ProviderSpec::new("cloudflare", "cloudflare", &["4.40.0"], &platforms),
            ProviderSpec::new("acme", "app", &["1.0.0"], &platforms),
        ],
        vec![
            ModuleSpec::new("terraform-aws-modules", "network", "aws", &["5.1.0"]),
            ModuleSpec::new("acme", "service", "aws", &["1.2.0"]).source(ModuleSource::Git),
        ],
    )
    .await;
    let work = tempfile::tempdir().unwrap();
    let releases_root = work.path().join("releases-origin");
    let (terraform_zip, _, _) = crate::releases::terraform_release(&releases_root);
    let releases_origin = StaticServer::start(&ca, &releases_root);
    let key = work.path().join("vendor-key.asc");
    std::fs::write(&key, crate::support::origin::signing_key_armor()).unwrap();

    let port = free_port();
    let mut walk = Walk {
        host: format!("127.0.0.1:{port}"),
        connected: work.path().join("connected"),
        sealed: work.path().join("sealed"),
        client: work.path().join("client"),
        transfer: work.path().join("transfer"),
        site_key: None,
        stand_ins: format!(
            "ca_file = \"{ca}\"\nallow_private_networks = true\n",
            ca = ca.write_ca(work.path()).display()
        ),
        releases: format!("hashicorp_url = \"{}hashicorp\"\n", releases_origin.url()),
        vendor_key: format!("hashicorp_key_file = \"{}\"\n", key.display()),
        servers: Vec::new(),
        env: BTreeMap::new(),
        terraform: None,
        terraform_zip,
        connected_terraform: connected_terraform(&ca, &origin),
        work,
        ca,
    };
    for dir in [&walk.connected, &walk.sealed, &walk.client, &walk.transfer] {
        std::fs::create_dir_all(dir).unwrap();
    }

    // The connected site: its configuration (with the stand-ins), its certificate and CI's
    // token, the team's configuration in infra/, and CI's dist/.
    let etc = walk.etc(Place::Connected);
    std::fs::write(
        etc.join("ci.token"),
        "ci-publishing-token-0123456789abcdef01\n",
    )
    .unwrap();
    let connected = walk.place_file("connected.toml", Place::Connected, "connected.toml");
    let text = std::fs::read_to_string(&connected).unwrap();
    let text = add_to_table(&text, "upstream", &walk.stand_ins);
    let text = add_to_table(&text, "releases", &walk.releases);
    let text = add_to_table(&text, "releases", &walk.vendor_key);
    let hosts = format!(
        "\n[upstream.hosts.\"{REGISTRY}\"]\nconnect_to = \"{addr}\"\n\n\
         [upstream.hosts.\"{GIT_HOST}\"]\nconnect_to = \"{addr}\"\n",
        addr = origin.addr()
    );
    std::fs::write(&connected, format!("{text}{hosts}")).unwrap();
    walk.place_file("main.tf", Place::Connected, "infra/main.tf");
    dist(&origin, &walk.connected.join("dist"), &platforms);

    let mut origin = Some(origin);
    let mut releases_origin = Some(releases_origin);
    let mut place = None;
    for (at, line) in &steps {
        if place != Some(*at) {
            place = Some(*at);
            enter(&mut walk, *at, &mut origin, &mut releases_origin).await;
        }
        step(&mut walk, *at, line).await;
    }
    assert_eq!(place, Some(Place::Client), "walk.sh ends at a client");

    // What the walk left: terraform installed every provider and both modules from the
    // sealed site, the published one checked against the registry's signature.
    let infra = walk.client.join("infra");
    let lock = std::fs::read_to_string(infra.join(".terraform.lock.hcl")).unwrap();
    for source in [
        format!("{REGISTRY}/integrations/github"),
        format!("{REGISTRY}/cloudflare/cloudflare"),
        format!("{}/acme/app", walk.host),
    ] {
        assert!(lock.contains(&source), "{source} in the lock file:\n{lock}");
    }
    let modules = std::fs::read_to_string(infra.join(".terraform/modules/modules.json")).unwrap();
    for module in ["\"network\"", "\"service\""] {
        assert!(modules.contains(module), "{module} installed: {modules}");
    }
    let service = std::fs::read_to_string(infra.join(".terraform/modules/service/VERSION"))
        .unwrap_or_default();
    assert_eq!(service.trim(), "1.2.0", "the git module's tag");
    // The sealed mirror's start page shows the same client set-ups as its start-up log.
    let server = walk.servers.last().expect("the sealed site's server");
    let page = crate::support::https_client(&walk.ca, &[])
        .get(server.url("-/"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for wanted in [
        format!("{}git/{GIT_HOST}/", server.url),
        ".insteadOf".to_string(),
        ".sslCAInfo".to_string(),
        "GIT_SSL_CAINFO".to_string(),
        format!("{}releases", server.url),
    ] {
        assert!(
            page.contains(&wanted),
            "{wanted} on the start page:\n{page}"
        );
    }
    for mut server in std::mem::take(&mut walk.servers) {
        server.signal("TERM");
        server.wait();
    }
    configured_less(&walk).await;
}

/// The same bundle at a site with no configuration for some of what it carries: the rest is
/// admitted (exit status 3), each part left out is named with the settings that would admit
/// it, `--check` says so first and changes nothing, and with those settings added the same
/// bundle admits the rest. A changed file still refuses the whole bundle.
async fn configured_less(walk: &Walk) {
    let bundle = walk.transfer.join("provender.tar");
    let site = walk.work.path().join("bare");
    let cache = site.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let cfg = site.join("bare.toml");
    std::fs::write(
        &cfg,
        format!(
            "[cache]\ndir = \"{}\"\n\n[upstream]\noffline = true\nallowed_hosts = [\"{REGISTRY}\"]\n\n\
             [bundles]\ntrusted_keys = [\"{}\"]\n\n[releases]\nenabled = false\n{}",
            cache.display(),
            walk.site_key.as_deref().unwrap(),
            walk.vendor_key,
        ),
    )
    .unwrap();
    let provender = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let site = site.clone();
        async move { run(&site, env!("CARGO_BIN_EXE_provender"), &args, &[]).await }
    };
    let (cfg, bundle) = (cfg.to_str().unwrap(), bundle.to_str().unwrap());
    let parts = [
        (
            format!("published provider {}/acme/app 1.0.0", walk.host),
            vec![
                "[publishing]".to_string(),
                format!("hostname = \"{}\"", walk.host),
                "[publishing.namespaces.acme]".to_string(),
            ],
        ),
        (
            format!("git repository {GIT_HOST}/git/acme/terraform-aws-service.git"),
            vec![
                "[git]".to_string(),
                format!("allowed_hosts = [\"{GIT_HOST}\"]"),
            ],
        ),
        (
            "CLI release terraform 1.11.4".to_string(),
            vec!["[releases]".to_string(), "enabled = true".to_string()],
        ),
    ];
    let check = provender(&["import", "--config", cfg, "--check", bundle]).await;
    check.fails(3);
    assert!(snapshot(&cache).is_empty(), "--check admits nothing");
    let out = check.out();
    assert!(out.contains("would leave out (3):"), "{out}");
    for (what, settings) in &parts {
        assert!(out.contains(what.as_str()), "{what}:\n{out}");
        for line in settings {
            assert!(out.contains(line.as_str()), "{line}:\n{out}");
        }
    }

    let partly = provender(&["import", "--config", cfg, bundle]).await;
    partly.fails(3);
    let out = partly.out();
    assert!(out.contains("left out (3):"), "{out}");
    for (what, settings) in &parts {
        let at = out
            .find(what.as_str())
            .unwrap_or_else(|| panic!("{what}:\n{out}"));
        for line in settings {
            assert!(
                out[at..].contains(line.as_str()),
                "{line} after {what}:\n{out}"
            );
        }
    }
    let zips = crate::support::cli::zips(&cache);
    assert!(
        zips.iter()
            .any(|z| z.starts_with("terraform-provider-github_6.2.0")),
        "the public providers are admitted: {zips:?}"
    );
    assert!(
        !zips
            .iter()
            .any(|z| z.starts_with("terraform-provider-app_") || z.starts_with("terraform_")),
        "the published provider and the CLI are left out: {zips:?}"
    );
    assert!(out.contains("modules: 1 added"), "{out}");

    // With the settings it named, the same bundle admits the rest.
    let key = site.join("provider-signing.asc");
    provender(&[
        "keygen",
        "--provider-signing",
        "--output",
        key.to_str().unwrap(),
    ])
    .await
    .ok();
    let mut text = std::fs::read_to_string(cfg)
        .unwrap()
        .replace("enabled = false", "enabled = true");
    text.push_str(&format!(
        "\n[git]\nallowed_hosts = [\"{GIT_HOST}\"]\n\n\
         [publishing]\nhostname = \"{}\"\nsigning_key = \"{}\"\n\n[publishing.namespaces.acme]\n",
        walk.host,
        key.display()
    ));
    std::fs::write(cfg, text).unwrap();
    let rest = provender(&["import", "--config", cfg, bundle]).await;
    rest.ok();
    let out = rest.out();
    assert!(out.contains("publications recorded: 1"), "{out}");
    assert!(out.contains("git repositories: 1"), "{out}");
    assert!(out.contains("CLI release zips: 2 added"), "{out}");
    assert!(!out.contains("left out"), "{out}");

    // A changed file is an integrity failure, not a part left out: nothing is admitted.
    let tampered = site.join("tampered.tar");
    let zip =
        format!("{REGISTRY}/integrations/github/terraform-provider-github_6.2.0_linux_amd64.zip");
    crate::support::cli::tamper(Path::new(bundle), &tampered, &zip, |bytes| {
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
    });
    let other = site.join("other-cache");
    let other_cfg = site.join("other.toml");
    std::fs::write(
        &other_cfg,
        std::fs::read_to_string(cfg)
            .unwrap()
            .replace(&cache.display().to_string(), &other.display().to_string()),
    )
    .unwrap();
    let other_cfg = other_cfg.to_str().unwrap();
    for args in [
        vec![
            "import",
            "--config",
            other_cfg,
            "--check",
            tampered.to_str().unwrap(),
        ],
        vec!["import", "--config", other_cfg, tampered.to_str().unwrap()],
    ] {
        let refused = provender(&args).await;
        refused.fails(1);
        assert!(
            refused.out().contains("nothing imported"),
            "{}",
            refused.out()
        );
    }
    assert!(snapshot(&other).is_empty(), "nothing admitted");
}

/// terraform at the connected site, reaching the fake origin for `registry.terraform.io` and
/// for `git.example.com`.
fn connected_terraform(ca: &TestCa, origin: &FakeOrigin) -> Terraform {
    let terraform = Terraform::new(
        ca,
        &tf_config::registry_host_with_modules(
            &origin.providers_v1_url(),
            &origin.modules_v1_url(),
        ),
    );
    let gitconfig = format!(
        "[url \"{}/\"]\n\tinsteadOf = https://{GIT_HOST}/\n[http]\n\tsslCAInfo = {}\n",
        origin.base_url(),
        terraform.ca_file().display()
    );
    std::fs::write(terraform.home().join(".gitconfig"), gitconfig).unwrap();
    terraform
}

/// `text` with `lines` added at the end of its table `[name]` (which must be there).
fn add_to_table(text: &str, name: &str, lines: &str) -> String {
    let header = format!("[{name}]\n");
    let at = text
        .find(&header)
        .unwrap_or_else(|| panic!("no [{name}] table in:\n{text}"));
    let body = at + header.len();
    let end = text[body..]
        .find("\n[")
        .map_or(text.len(), |i| body + i + 1);
    format!("{}{lines}{}", &text[..end], &text[end..])
}

/// What entering a place takes: at the carry, the connected site's server and every origin
/// stop for good; the sealed site gets its configuration (with the connected site's key,
/// made by now) and certificate; the client its CLI configuration and the team's
/// configuration.
async fn enter(
    walk: &mut Walk,
    place: Place,
    origin: &mut Option<FakeOrigin>,
    releases_origin: &mut Option<StaticServer>,
) {
    match place {
        Place::Connected => {}
        Place::Carry | Place::Sealed => {
            for mut server in std::mem::take(&mut walk.servers) {
                server.signal("TERM");
                server.wait();
            }
            if let Some(origin) = origin.take() {
                origin.stop().await;
            }
            releases_origin.take();
            if walk.site_key.is_none() {
                let public = walk.connected.join("etc/site.key.pub");
                let key = std::fs::read_to_string(&public)
                    .unwrap_or_else(|e| panic!("{}: {e}", public.display()));
                walk.site_key = Some(key.trim().to_string());
            }
            if !walk.sealed.join("sealed.toml").exists() {
                walk.etc(Place::Sealed);
                let sealed = walk.place_file("sealed.toml", Place::Sealed, "sealed.toml");
                let text = std::fs::read_to_string(&sealed).unwrap();
                std::fs::write(&sealed, add_to_table(&text, "releases", &walk.vendor_key)).unwrap();
            }
        }
        Place::Client => {
            walk.place_file("terraform.tfrc", Place::Client, "terraform.tfrc");
            walk.place_file("main.tf", Place::Client, "infra/main.tf");
            let tfrc = std::fs::read_to_string(walk.client.join("terraform.tfrc")).unwrap();
            walk.terraform = Some(Terraform::new(&walk.ca, &tfrc));
        }
    }
}

/// Runs one command of `walk.sh` at `place`, as written (names substituted), and checks that
/// it did what the chapter says.
async fn step(walk: &mut Walk, place: Place, line: &str) {
    let line = walk.substitute(line, place);
    let mut args = words(&line);
    let background = args.last().is_some_and(|w| w == "&");
    if background {
        args.pop();
    }
    let program = args.remove(0);
    let dir = walk.dir(place).to_path_buf();
    match program.as_str() {
        "provender" if background => {
            assert_eq!(args[..2], ["serve", "--config"], "{line}");
            let server = ServerProcess::spawn(&dir.join(&args[2]));
            if place == Place::Sealed {
                // The start-up log shows each client's set-up, with this mirror's URLs: the
                // installers' base URL and git's insteadOf and CA lines.
                let wanted = [
                    format!("{}releases", server.url),
                    format!("url.\"{}git/{GIT_HOST}/\".insteadOf", server.url),
                    format!("http.\"{}\".sslCAInfo", server.url),
                ];
                let logged = crate::support::poll(std::time::Duration::from_secs(10), async || {
                    let log = server.log();
                    wanted.iter().all(|w| log.contains(w)).then_some(())
                })
                .await;
                assert!(
                    logged.is_some(),
                    "the client set-ups {wanted:?} in the start-up log:\n{}",
                    server.log()
                );
            }
            walk.servers.push(server);
        }
        "provender" => {
            let check = args.iter().any(|a| a == "--check");
            let cache = dir.join("cache");
            let before = check.then(|| snapshot(&cache));
            let ran = run(&dir, env!("CARGO_BIN_EXE_provender"), &args, &[]).await;
            ran.ok();
            if let Some(before) = before {
                assert!(
                    before == snapshot(&cache),
                    "import --check changed the cache"
                );
                let out = ran.out();
                assert!(out.contains("would leave out: nothing"), "{out}");
                // The configuration it prints is the one the chapter gives the sealed site.
                let sealed = std::fs::read_to_string(dir.join("sealed.toml")).unwrap();
                for wanted in [
                    format!("allowed_hosts = [\"{REGISTRY}\"]"),
                    format!("allowed_hosts = [\"{GIT_HOST}\"]"),
                    "enabled = true".to_string(),
                    format!("hostname = \"{}\"", walk.host),
                    "[publishing.namespaces.acme]".to_string(),
                    format!("trusted_keys = [\"{}\"]", walk.site_key.as_deref().unwrap()),
                ] {
                    assert!(out.contains(&wanted), "--check prints {wanted}:\n{out}");
                    let compact = sealed.split_whitespace().collect::<String>();
                    assert!(
                        compact.contains(&wanted.split_whitespace().collect::<String>()),
                        "sealed.toml has {wanted}"
                    );
                }
            } else if args.first().is_some_and(|a| a == "import") {
                let out = ran.out();
                assert!(out.contains("publications recorded: 1"), "{out}");
                assert!(out.contains("git repositories: 1"), "{out}");
                assert!(out.contains("CLI release zips: 2 added"), "{out}");
                assert!(!out.contains("left out"), "{out}");
            }
        }
        "git" => {
            let terraform = walk.terraform.as_ref().expect("a client");
            let home = terraform.home().display().to_string();
            run(&dir, "git", &args, &[("HOME", home)]).await.ok();
        }
        "curl" => {
            run(&dir, "curl", &args, &[]).await.ok();
            let out = args[args.iter().position(|a| a == "-o").unwrap() + 1].clone();
            let got = std::fs::read(dir.join(out)).unwrap();
            assert!(
                got == walk.terraform_zip,
                "the release zip as the vendor signed it"
            );
        }
        "export" => {
            let (name, value) = args[0].split_once('=').expect("export NAME=VALUE");
            let value = if name == "TF_CLI_CONFIG_FILE" {
                dir.join(value).display().to_string()
            } else {
                value.to_string()
            };
            walk.env.insert(name.to_string(), value);
        }
        "terraform" if place == Place::Connected => {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            walk.connected_terraform
                .run(&dir, &args)
                .await
                .assert_success();
        }
        "terraform" => {
            let mut terraform = walk.terraform.take().expect("a client");
            for (name, value) in &walk.env {
                terraform = terraform.env(name, value);
            }
            let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
            args.extend(["-input=false", "-no-color"]);
            terraform.run(&dir, &args).await.assert_success();
            walk.terraform = Some(terraform);
        }
        other => panic!("walk.sh runs {other:?}, which the test does not know: {line}"),
    }
}
