//! Publishing the organisation's own providers and modules to private namespaces under the
//! mirror's own hostname: a GitHub-Actions-shaped ID token publishes a provider release (the
//! files GoReleaser makes) under its rule and is refused outside it, a person's token
//! publishes a module; the real `terraform init` and `terraform providers lock` install and
//! lock the published provider (its SHA256SUMS signature checked by terraform against the
//! registry's own key, found through service discovery) and module beside a public provider
//! through the mirror, then `-lockfile=readonly` agrees. Publishing the same files again
//! changes nothing, other files get 409 and change nothing; a yanked version is no longer
//! offered, but whoever names it still gets it. Hostile publications are refused with a clear
//! 4xx and leave nothing behind.

use std::io::Write as _;
use std::path::Path;

use http::StatusCode;
use serde_json::{Value, json};

use crate::support::http::send;
use crate::support::issuer::FakeIssuer;
use crate::support::origin::{FakeOrigin, HostileModule, ProviderSpec};
use crate::support::pki::TestCa;
use crate::support::provender::{MirrorOptions, REGISTRY, TestMirror, free_port};
use crate::support::tf_config::{self, local_platform};
use crate::support::{Terraform, https_client};

const AUDIENCE: &str = "https://mirror.example.com";
const PUBLISHER: &str = "platform-team-token-0123456789abcdef";
const READER: &str = "reader-token-0123456789abcdef01234567";

/// A GitHub Actions job's claims in `repository`, valid for five minutes.
fn github(repository: &str) -> Value {
    let now = provender::clock::now_secs();
    json!({
        "sub": format!("repo:{repository}:ref:refs/tags/v1.1.0"),
        "aud": AUDIENCE,
        "ref": "refs/tags/v1.1.0",
        "repository": repository,
        "repository_owner": repository.split('/').next().unwrap(),
        "workflow": "release",
        "event_name": "push",
        "ref_type": "tag",
        "runner_environment": "github-hosted",
        "iat": now,
        "nbf": now,
        "exp": now + 300,
    })
}

struct Setup {
    ca: TestCa,
    origin: FakeOrigin,
    issuer: FakeIssuer,
    mirror: TestMirror,
    /// `127.0.0.1:<port>`: the mirror's own hostname, under which `acme` is private.
    host: String,
    _keys: tempfile::TempDir,
}

async fn setup(extra_publishing: &str) -> Setup {
    setup_with(extra_publishing, "").await
}

/// [`setup`], with keys for `[publishing.namespaces.acme]`.
async fn setup_with(extra_publishing: &str, acme: &str) -> Setup {
    let ca = TestCa::new();
    let platforms = tf_config::local_platform_and(&[("linux", "amd64"), ("darwin", "arm64")]);
    let origin = FakeOrigin::start_with_modules(
        &ca,
        &[REGISTRY],
        vec![
            ProviderSpec::new("acme", "foo", &["1.0.0", "1.1.0"], &platforms),
            ProviderSpec::new("acme", "bar", &["2.0.0"], &platforms),
        ],
        vec![],
    )
    .await;
    let issuer = FakeIssuer::start(&ca).await;
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("provider-signing.asc");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_provender"))
        .args(["keygen", "--provider-signing", "--output"])
        .arg(&key_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let port = free_port();
    // Terraform wants a dot in a module registry's hostname; an IP address has dots.
    let host = format!("127.0.0.1:{port}");
    let toml = format!(
        r#"[auth]
url_signing_key = "{signing}"

[[auth.clients]]
name = "platform"
token = "{PUBLISHER}"

[[auth.clients]]
name = "reader"
token = "{READER}"

[[auth.issuers]]
name = "github"
issuer = "{url}"
audiences = ["{AUDIENCE}"]
claims = {{ repository_owner = "acme" }}

[[auth.rules]]
name = "provider-releases"
clients = ["github:repo:acme/terraform-provider-foo:*"]
publish = ["acme/foo"]

[[auth.rules]]
name = "platform"
clients = ["platform"]
publish = ["acme/*"]

[[auth.rules]]
name = "everyone"
clients = ["*"]

[publishing]
hostname = "{host}"
signing_key = "{key}"
{extra_publishing}

[publishing.namespaces.acme]
{acme}

{hosts}"#,
        signing = "k".repeat(40),
        url = issuer.url(),
        key = key_file.display(),
        hosts = issuer.host_toml(),
    );
    let listen = format!("127.0.0.1:{port}");
    let mirror = TestMirror::start_with(
        &ca,
        &origin,
        MirrorOptions {
            extra_toml: &toml,
            listen: Some(&listen),
            ..Default::default()
        },
    )
    .await;
    Setup {
        ca,
        origin,
        issuer,
        mirror,
        host,
        _keys: keys,
    }
}

/// A tar stream of `(name, bytes)` files, as `tar -cf - <files>` makes it.
pub(crate) fn tar_of(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    for (name, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.append_data(&mut header, name, &bytes[..]).unwrap();
    }
    tar.into_inner().unwrap()
}

/// A provider release of `acme/foo` `version` as GoReleaser lays it out, made from the
/// origin's zips (renamed nothing: the names are the same), with a manifest.
pub(crate) fn release(origin: &FakeOrigin, version: &str) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut sums = String::new();
    for (os, arch) in tf_config::local_platform_and(&[("linux", "amd64"), ("darwin", "arm64")]) {
        let name = origin.filename("acme", "foo", version, os, arch);
        let bytes = origin.archive("acme", "foo", version, os, arch);
        sums.push_str(&format!("{}  {name}\n", sha256(&bytes)));
        files.push((name, bytes));
    }
    let manifest = br#"{"version":1,"metadata":{"protocol_versions":["5.0"]}}"#.to_vec();
    let manifest_name = format!("terraform-provider-foo_{version}_manifest.json");
    sums.push_str(&format!("{}  {manifest_name}\n", sha256(&manifest)));
    files.push((manifest_name, manifest));
    files.push((
        format!("terraform-provider-foo_{version}_SHA256SUMS"),
        sums.into_bytes(),
    ));
    files
}

/// The release of `from` under the name of `to`: other files for `to`, consistently listed.
pub(crate) fn relabelled(origin: &FakeOrigin, from: &str, to: &str) -> Vec<(String, Vec<u8>)> {
    let mut files = release(origin, from);
    for f in &mut files {
        f.0 = f.0.replace(from, to);
    }
    let sums = files
        .iter()
        .filter(|f| !f.0.ends_with("SHA256SUMS"))
        .map(|f| format!("{}  {}\n", sha256(&f.1), f.0))
        .collect::<String>();
    files.last_mut().unwrap().1 = sums.into_bytes();
    files
}

pub(crate) fn sha256(bytes: &[u8]) -> String {
    provender::hash::Sha256::of(bytes).to_string()
}

/// A module's `.tar.gz` with `main.tf` holding `body`.
pub(crate) fn module_tgz(body: &str) -> Vec<u8> {
    let tar = tar_of(&[("main.tf".into(), body.as_bytes().to_vec())]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar).unwrap();
    gz.finish().unwrap()
}

impl Setup {
    async fn put(&self, path: &str, token: &str, body: Vec<u8>) -> (StatusCode, Value) {
        let client = https_client(&self.ca, &[]);
        let got = send(
            "publish",
            client
                .put(self.mirror.url(&format!("-/api/v1/publish/{path}")))
                .bearer_auth(token)
                .body(body),
        )
        .await;
        let json = serde_json::from_slice(&got.body).unwrap_or(Value::Null);
        (got.status, json)
    }

    /// `PUT` with curl over `http` (`--http1.1` or `--http2`): the status, the protocol curl
    /// says it used, and the JSON answer.
    fn curl_put(&self, path: &str, token: &str, body: &[u8], http: &str) -> (u16, String, Value) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("body");
        std::fs::write(&file, body).unwrap();
        let ca = self.ca.write_ca(dir.path());
        let out = std::process::Command::new("curl")
            .args(["-sS", http, "--cacert"])
            .arg(&ca)
            .args(["-H", &format!("Authorization: Bearer {token}"), "-T"])
            .arg(&file)
            .args(["-w", "\n%{http_code} %{http_version}"])
            .arg(self.mirror.url(&format!("-/api/v1/publish/{path}")))
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let (body, tail) = text.rsplit_once('\n').unwrap();
        let (code, version) = tail.split_once(' ').unwrap();
        let json = serde_json::from_str(body).unwrap_or(Value::Null);
        (code.parse().unwrap(), version.to_string(), json)
    }

    async fn post(&self, path: &str, token: &str) -> (StatusCode, Value) {
        let client = https_client(&self.ca, &[]);
        let got = send(
            "publish",
            client
                .post(self.mirror.url(&format!("-/api/v1/publish/{path}")))
                .bearer_auth(token),
        )
        .await;
        (
            got.status,
            serde_json::from_slice(&got.body).unwrap_or(Value::Null),
        )
    }

    async fn get(&self, path: &str) -> (StatusCode, Vec<u8>) {
        let client = https_client(&self.ca, &[]);
        let got = send("get", client.get(self.mirror.url(path)).bearer_auth(READER)).await;
        (got.status, got.body.to_vec())
    }

    /// The CLI configuration: everything through the mirror (the network mirror for public
    /// providers at `init`, the registry facade for `providers lock`'s), the mirror's own
    /// hostname found by service discovery and installed from directly (Terraform's network
    /// mirror client cannot name a provider whose hostname has a port), and the reader's
    /// token for it.
    fn cli(&self) -> String {
        let url = format!("https://{}{}", self.host, self.mirror.url.path());
        let host = &self.host;
        format!(
            r#"provider_installation {{
  network_mirror {{
    url     = "{url}"
    exclude = ["{host}/*/*"]
  }}
  direct {{
    include = ["{host}/*/*"]
  }}
}}
host "{REGISTRY}" {{
  services = {{
    "providers.v1" = "{url}v1/providers/{REGISTRY}/"
  }}
}}
credentials "{host}" {{
  token = "{READER}"
}}
credentials "{REGISTRY}" {{
  token = "{READER}"
}}
"#
        )
    }

    fn main_tf(&self) -> String {
        format!(
            r#"terraform {{
  required_providers {{
    foo = {{ source = "{host}/acme/foo", version = "~> 1.0" }}
    bar = {{ source = "acme/bar" }}
  }}
}}

module "vpc" {{
  source  = "{host}/acme/vpc/aws"
  version = "~> 1.4"
}}
"#,
            host = self.host
        )
    }
}

fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    crate::support::provender::files_under(dir)
}

#[tokio::test(flavor = "multi_thread")]
async fn published_providers_and_modules_install_lock_and_stay_immutable() {
    let s = setup("").await;
    let ci = s.issuer.token(&github("acme/terraform-provider-foo"));

    // CI publishes two releases with its ID token; a person publishes a module.
    for version in ["1.0.0", "1.1.0"] {
        let (status, body) = s
            .put(
                &format!("providers/acme/foo/{version}"),
                &ci,
                tar_of(&release(&s.origin, version)),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        assert_eq!(body["status"], "published");
        assert_eq!(
            body["publication"]["published_by"],
            "github:repo:acme/terraform-provider-foo:ref:refs/tags/v1.1.0"
        );
    }
    // The job's rule names acme/foo only.
    let (status, body) = s
        .put("modules/acme/vpc/aws/1.4.0", &ci, module_tgz("# vpc\n"))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(body.to_string().contains("provider-releases"), "{body}");
    let (status, body) = s
        .put(
            "modules/acme/vpc/aws/1.4.0",
            PUBLISHER,
            module_tgz("output \"name\" {\n  value = \"vpc\"\n}\n"),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // A published module has its documentation too.
    let (status, docs) = s
        .get(&format!("-/api/v1/modules/{}/acme/vpc/aws/1.4.0", s.host))
        .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&docs));
    let docs: Value = serde_json::from_slice(&docs).unwrap();
    assert_eq!(docs["docs"]["root"]["outputs"][0]["name"], "name");
    assert_eq!(docs["version"]["source_kind"], "published");
    // Uploads stream in over HTTP/1.1 and HTTP/2 alike.
    for (version, http, said) in [("1.4.1", "--http1.1", "1.1"), ("1.4.2", "--http2", "2")] {
        let (code, used, body) = s.curl_put(
            &format!("modules/acme/vpc/aws/{version}"),
            PUBLISHER,
            &module_tgz("# vpc\n"),
            http,
        );
        assert_eq!((code, used.as_str()), (201, said), "{body}");
    }
    // A namespace that is not private, and a reader without publish rights.
    let (status, _) = s
        .put("modules/other/vpc/aws/1.0.0", PUBLISHER, module_tgz("#\n"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = s
        .put("modules/acme/vpc/aws/1.5.0", READER, module_tgz("#\n"))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // The same files again: nothing changes. Other files: 409, nothing changes.
    let (status, body) = s
        .put(
            "providers/acme/foo/1.1.0",
            &ci,
            tar_of(&release(&s.origin, "1.1.0")),
        )
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("unchanged"))
    );
    let other = relabelled(&s.origin, "1.0.0", "1.1.0");
    let before = files_under(&s.mirror.cache_dir);
    let (status, body) = s.put("providers/acme/foo/1.1.0", &ci, tar_of(&other)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "conflict");
    let (status, _) = s
        .put(
            "modules/acme/vpc/aws/1.4.0",
            PUBLISHER,
            module_tgz("# changed\n"),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        files_under(&s.mirror.cache_dir),
        before,
        "a conflict changes nothing"
    );

    // The real terraform: init through the network mirror, lock through discovery and the
    // registry protocol (verifying the registry's signature), then readonly.
    let tf = Terraform::new(&s.ca, &s.cli());
    let dir = tf_config::root_module(&s.main_tf());
    tf.init(dir.path()).await.assert_success();
    let lock = std::fs::read_to_string(dir.path().join(".terraform.lock.hcl")).unwrap();
    assert!(
        lock.contains(&format!("provider \"{}/acme/foo\"", s.host)) && lock.contains("1.1.0"),
        "{lock}"
    );
    let out = tf
        .run(
            dir.path(),
            &[
                "providers",
                "lock",
                "-platform=linux_amd64",
                "-platform=darwin_arm64",
            ],
        )
        .await;
    out.assert_success();
    assert!(
        out.combined().contains(&format!("{}/acme/foo", s.host)),
        "{}",
        out.combined()
    );
    let lock = std::fs::read_to_string(dir.path().join(".terraform.lock.hcl")).unwrap();
    for (os, arch) in [("linux", "amd64"), ("darwin", "arm64")] {
        let zh = format!(
            "zh:{}",
            s.origin.sha256_hex("acme", "foo", "1.1.0", os, arch)
        );
        assert!(lock.contains(&zh), "{zh} in {lock}");
    }
    let _ = std::fs::remove_dir_all(dir.path().join(".terraform"));
    tf.run(dir.path(), &["init", "-lockfile=readonly"])
        .await
        .assert_success();
    let installed = dir.path().join(".terraform/modules/vpc/main.tf");
    assert!(std::fs::read_to_string(installed).unwrap().contains("vpc"));

    // Another site's provender mirrors this registry's private namespace like any registry:
    // discovery, the registry protocol with this registry's signature checked at the edge,
    // archives admitted against it.
    let hosts = [s.host.as_str()];
    let edge_toml = format!("[upstream.hosts.\"{}\"]\ntoken = \"{READER}\"\n", s.host);
    let edge = TestMirror::start_with(
        &s.ca,
        &s.origin,
        MirrorOptions {
            allowed_hosts: &hosts,
            extra_upstream: "allow_private_networks = true",
            extra_toml: &edge_toml,
            ..Default::default()
        },
    )
    .await;
    let edge_client = https_client(&s.ca, &[]);
    let got = send(
        "edge index",
        edge_client.get(edge.url(&format!("./{}/acme/foo/index.json", s.host))),
    )
    .await;
    assert_eq!(
        got.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&got.body)
    );
    let listed: Value = serde_json::from_slice(&got.body).unwrap();
    assert!(listed["versions"]["1.1.0"].is_object(), "{listed}");
    let (os, arch) = local_platform();
    let name = s.origin.filename("acme", "foo", "1.1.0", os, arch);
    let got = send(
        "edge archive",
        edge_client.get(edge.url(&format!("./{}/acme/foo/{name}", s.host))),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.body, s.origin.archive("acme", "foo", "1.1.0", os, arch));
    let record = std::fs::read(
        edge.cache_dir
            .join(format!("metadata/{}/acme/foo/1.1.0.json", s.host)),
    )
    .unwrap();
    let record: Value = serde_json::from_slice(&record).unwrap();
    assert_eq!(record["sums"][0]["trust"]["kind"], "community", "{record}");

    // The registry's signature verifies under the key it lists, and the record says private.
    let (status, doc) = s
        .get(&format!(
            "v1/providers/{}/acme/foo/1.1.0/download/linux/amd64",
            s.host
        ))
        .await;
    assert_eq!(status, StatusCode::OK);
    let doc: Value = serde_json::from_slice(&doc).unwrap();
    let keys = doc["signing_keys"]["gpg_public_keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1, "{doc}");
    // OpenTofu's `packages` extension: every platform hashed at publication, so its `h1:` and
    // size are there from the first answer (OpenTofu checks the size and can lock them all).
    for (os, arch) in tf_config::local_platform_and(&[("linux", "amd64"), ("darwin", "arm64")]) {
        let zip = s.origin.archive("acme", "foo", "1.1.0", os, arch);
        let entry = &doc["packages"][format!("{os}_{arch}")];
        assert_eq!(entry["package_size"], zip.len(), "{doc}");
        assert_eq!(entry["hashes"][0], format!("zh:{}", sha256(&zip)), "{doc}");
        assert_eq!(
            entry["hashes"][1],
            s.origin.h1_zip("acme", "foo", "1.1.0", os, arch),
            "{doc}"
        );
    }

    // Yanked: a new init takes 1.0.0; whoever names 1.1.0 still gets it.
    let (status, body) = s
        .post("providers/acme/foo/1.1.0/yank?reason=broken", PUBLISHER)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["publication"]["yanked"]["reason"], "broken");
    let fresh = tf_config::root_module(&s.main_tf());
    tf.init(fresh.path()).await.assert_success();
    let lock = std::fs::read_to_string(fresh.path().join(".terraform.lock.hcl")).unwrap();
    assert!(lock.contains("version     = \"1.0.0\""), "{lock}");
    // Terraform checks a locked version against the version list on every init (its
    // installer's own rule), so the lock pinning 1.1.0 stops there, as the README says.
    let _ = std::fs::remove_dir_all(dir.path().join(".terraform"));
    let locked = tf.init(dir.path()).await;
    locked.assert_failure();
    let said = locked
        .combined()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(said.contains("1.1.0 is no longer available"), "{said}");
    let (os, arch) = local_platform();
    let (status, _) = s.get(&format!("./{}/acme/foo/1.1.0.json", s.host)).await;
    assert_eq!(status, StatusCode::OK);
    let name = s.origin.filename("acme", "foo", "1.1.0", os, arch);
    let (status, bytes) = s.get(&format!("./{}/acme/foo/{name}", s.host)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(bytes, s.origin.archive("acme", "foo", "1.1.0", os, arch));

    // Every publication is recorded: who, when, what.
    let (status, list) = s.get("-/api/v1/publications").await;
    assert_eq!(status, StatusCode::OK);
    let list: Value = serde_json::from_slice(&list).unwrap();
    assert_eq!(list["publications"].as_array().unwrap().len(), 5, "{list}");
    let metrics = send(
        "metrics",
        https_client(&s.ca, &[])
            .get(s.mirror.root_url("/metrics"))
            .bearer_auth(READER),
    )
    .await;
    let metrics = String::from_utf8(metrics.body).unwrap();
    assert_eq!(
        crate::support::sample(&metrics, "provender_publications_total{kind=\"provider\"}"),
        2
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_publications_get_a_clear_4xx_and_leave_nothing() {
    let s = setup("max_upload_size = \"3MiB\"\n\n[modules]\nmax_unpacked_size = \"16MiB\"").await;
    let published = || files_under(&s.mirror.cache_dir.join("published"));
    let archives = || files_under(&s.mirror.cache_dir.join("archives"));

    // A zip named for another version.
    let mut wrong = release(&s.origin, "1.0.0");
    wrong.push((
        s.origin.filename("acme", "foo", "1.1.0", "linux", "amd64"),
        s.origin.archive("acme", "foo", "1.1.0", "linux", "amd64"),
    ));
    let (status, body) = s
        .put("providers/acme/foo/1.0.0", PUBLISHER, tar_of(&wrong))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("1.1.0"), "{body}");

    // A SHA256SUMS that lists other files.
    let mut listing_more = release(&s.origin, "1.0.0");
    let sums = listing_more.last_mut().unwrap();
    sums.1.extend_from_slice(
        format!(
            "{}  terraform-provider-foo_1.0.0_windows_amd64.zip\n",
            "0".repeat(64)
        )
        .as_bytes(),
    );
    let (status, body) = s
        .put("providers/acme/foo/1.0.0", PUBLISHER, tar_of(&listing_more))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("windows_amd64"), "{body}");

    // A zip whose bytes are not what SHA256SUMS lists, and one that is not a zip at all.
    let mut altered = release(&s.origin, "1.0.0");
    altered[0].1[100] ^= 0xff;
    let (status, body) = s
        .put("providers/acme/foo/1.0.0", PUBLISHER, tar_of(&altered))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // A publisher's signature where the namespace has no keys to check it with.
    let mut signed = release(&s.origin, "1.0.0");
    signed.push((
        "terraform-provider-foo_1.0.0_SHA256SUMS.sig".into(),
        b"not a signature".to_vec(),
    ));
    let (status, body) = s
        .put("providers/acme/foo/1.0.0", PUBLISHER, tar_of(&signed))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // Module archives: a bomb, a path out of the tree, a link out of the tree.
    for (hostile, expect) in [
        (HostileModule::GzipBomb, StatusCode::BAD_REQUEST),
        (HostileModule::DotDot, StatusCode::BAD_REQUEST),
        (HostileModule::Symlink, StatusCode::BAD_REQUEST),
        (HostileModule::ZipBomb, StatusCode::BAD_REQUEST),
    ] {
        let (status, body) = s
            .put(
                "modules/acme/vpc/aws/1.0.0",
                PUBLISHER,
                s.origin.hostile_archive(hostile),
            )
            .await;
        assert_eq!(status, expect, "{hostile:?}: {body}");
        assert!(body["error"]["message"].as_str().is_some(), "{body}");
    }
    // Too large an upload: 413 before it is all read, over HTTP/2 (reqwest; curl 7.88 takes
    // the stream's reset after the early answer for an error) and HTTP/1.1 (curl).
    let resp = https_client(&s.ca, &[])
        .put(s.mirror.url("-/api/v1/publish/modules/acme/vpc/aws/1.0.0"))
        .bearer_auth(PUBLISHER)
        .body(vec![7u8; 4 << 20])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "payload_too_large", "{body}");
    let big = vec![7u8; 4 << 20];
    let (code, used, body) = s.curl_put("modules/acme/vpc/aws/1.0.0", PUBLISHER, &big, "--http1.1");
    assert_eq!((code, used.as_str()), (413, "1.1"), "{body}");
    assert_eq!(body["error"]["code"], "payload_too_large", "{body}");

    assert!(published().is_empty(), "{:?}", published());
    assert!(archives().is_empty(), "{:?}", archives());
    assert!(
        s.mirror.staging_files().is_empty(),
        "{:?}",
        s.mirror.staging_files()
    );
    // And the version lists know nothing.
    let (status, _) = s.get(&format!("./{}/acme/foo/index.json", s.host)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Runs `git` in `dir` with a fixed identity.
fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=ci", "-c", "user.email=ci@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_publishes_races_resolve_once_and_bundles_carry_publications_to_a_sealed_site() {
    use crate::support::cli::{self, path_str, provender};
    let work = tempfile::tempdir().unwrap();
    let armor = work.path().join("acme-release.asc");
    std::fs::write(&armor, crate::support::origin::signing_key_armor()).unwrap();
    let s = setup_with("", &format!("keys = [\"{}\"]", armor.display())).await;
    let ci = s.issuer.token(&github("acme/terraform-provider-foo"));

    // Two publishers race for 1.1.0 with other files: one publishes, the other gets 409, and
    // what is served is the winner's.
    let (first, second) = tokio::join!(
        s.put(
            "providers/acme/foo/1.1.0",
            PUBLISHER,
            tar_of(&release(&s.origin, "1.1.0"))
        ),
        s.put(
            "providers/acme/foo/1.1.0",
            PUBLISHER,
            tar_of(&relabelled(&s.origin, "1.0.0", "1.1.0"))
        ),
    );
    let mut statuses = [first.0, second.0];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::CREATED, StatusCode::CONFLICT]);
    let winner = if first.0 == StatusCode::CREATED {
        &first.1
    } else {
        &second.1
    };
    let winner_files = winner["publication"]["files"].as_array().unwrap().clone();
    let (os, arch) = local_platform();
    let name = s.origin.filename("acme", "foo", "1.1.0", os, arch);
    let listed = winner["publication"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name.as_str())
        .unwrap()["sha256"]
        .clone();
    let (status, bytes) = s.get(&format!("./{}/acme/foo/{name}", s.host)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(json!(sha256(&bytes)), listed);

    // A publisher's own signature: by a key of the namespace's, kept; by another, refused.
    let files = release(&s.origin, "1.0.0");
    let sums = files.last().unwrap().1.clone();
    let sig = "terraform-provider-foo_1.0.0_SHA256SUMS.sig".to_string();
    let mut forged = files.clone();
    forged.push((
        sig.clone(),
        crate::support::origin::sign_detached(&sums, true),
    ));
    let (status, body) = s
        .put("providers/acme/foo/1.0.0", &ci, tar_of(&forged))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.to_string().contains("publisher signature"), "{body}");
    // GoReleaser's directory, with what else it holds, published by `provender publish`.
    let dist = work.path().join("dist");
    std::fs::create_dir(&dist).unwrap();
    for (name, bytes) in files {
        std::fs::write(dist.join(name), bytes).unwrap();
    }
    std::fs::write(
        dist.join(&sig),
        crate::support::origin::sign_detached(&sums, false),
    )
    .unwrap();
    std::fs::write(dist.join("artifacts.json"), "[]").unwrap();
    std::fs::write(dist.join("terraform-provider-foo_v1.0.0"), "binary").unwrap();
    let ca = s.ca.write_ca(work.path());
    let ci_token = work.path().join("ci.token");
    std::fs::write(&ci_token, &ci).unwrap();
    let server = s.mirror.url.to_string();
    let common = [
        "--server",
        &server,
        "--ca-file",
        path_str(&ca),
        "--token-file",
    ];
    let run = provender(
        &[
            &[
                "publish",
                "provider",
                path_str(&dist),
                "--namespace",
                "acme",
            ][..],
            &common,
            &[path_str(&ci_token)],
        ]
        .concat(),
    )
    .await;
    run.ok();
    assert!(run.stdout.contains("published: provider"), "{}", run.out());

    // A module from a git tag, by a person.
    let repo = work.path().join("vpc");
    std::fs::create_dir(&repo).unwrap();
    std::fs::write(
        repo.join("main.tf"),
        "output \"name\" {\n  value = \"vpc-2\"\n}\n",
    )
    .unwrap();
    git(&repo, &["init", "--quiet"]);
    git(&repo, &["add", "main.tf"]);
    git(&repo, &["commit", "--quiet", "-m", "vpc"]);
    git(&repo, &["tag", "v2.0.0"]);
    let person = work.path().join("person.token");
    std::fs::write(&person, PUBLISHER).unwrap();
    let source = format!("git::file://{}", repo.display());
    provender(
        &[
            &["publish", "module", "acme/vpc/aws", "2.0.0", &source][..],
            &common,
            &[path_str(&person)],
        ]
        .concat(),
    )
    .await
    .ok();
    let (_, list) = s.get("-/api/v1/publications").await;
    let list: Value = serde_json::from_slice(&list).unwrap();
    let foo100 = list["publications"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["version"] == "1.0.0")
        .unwrap()
        .clone();
    assert_eq!(foo100["publisher_key"], s.origin.key_id(), "{foo100}");
    let kept = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        foo100["publisher_signature"].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(kept, std::fs::read(dist.join(&sig)).unwrap());
    assert_eq!(list["publications"].as_array().unwrap().len(), 3, "{list}");

    // A bundle carries them to a sealed site, which answers for the mirror's hostname alone.
    let a_cfg = cli::config_file(
        work.path(),
        "a.toml",
        &s.mirror.cache_dir,
        s.origin.addr(),
        &s.ca,
        "",
    );
    let bundle = work.path().join("site.bundle");
    cli::export_bundle(path_str(&a_cfg), &bundle).await;
    let b_cache = work.path().join("b-cache");
    let b_key = work.path().join("b-signing.asc");
    provender(&["keygen", "--provider-signing", "--output", path_str(&b_key)])
        .await
        .ok();
    let publishing = format!(
        "[publishing]\nhostname = \"{}\"\nsigning_key = \"{}\"\n\n[publishing.namespaces.acme]\n",
        s.host,
        b_key.display()
    );
    let b_cfg = cli::config_file(
        work.path(),
        "b.toml",
        &b_cache,
        "127.0.0.1:9".parse().unwrap(),
        &s.ca,
        &format!("offline = true\n\n{publishing}"),
    );
    let imported = cli::import(path_str(&b_cfg), &bundle).await;
    imported.ok();
    assert!(
        imported.stdout.contains("publications recorded: 3"),
        "{}",
        imported.out()
    );
    let mut a = s.mirror;
    a.stop().await;
    let sealed = TestMirror::start_with(
        &s.ca,
        &s.origin,
        MirrorOptions {
            cache_dir: Some(&b_cache),
            extra_upstream: "offline = true",
            extra_toml: &publishing,
            ..Default::default()
        },
    )
    .await;
    let url = sealed.url.as_str();
    let host = &s.host;
    let cli_config = format!(
        "provider_installation {{\n  direct {{}}\n}}\nhost \"{host}\" {{\n  services = {{\n    \"providers.v1\" = \"{url}v1/providers/{host}/\"\n    \"modules.v1\" = \"{url}v1/modules/{host}/\"\n  }}\n}}\n"
    );
    let dir = tf_config::root_module(&format!(
        "terraform {{\n  required_providers {{\n    foo = {{ source = \"{host}/acme/foo\" }}\n  }}\n}}\n\nmodule \"vpc\" {{\n  source  = \"{host}/acme/vpc/aws\"\n  version = \"2.0.0\"\n}}\n"
    ));
    let out = Terraform::new(&s.ca, &cli_config).init(dir.path()).await;
    out.assert_success();
    assert!(out.combined().contains("key ID"), "{}", out.combined());
    let lock = std::fs::read_to_string(dir.path().join(".terraform.lock.hcl")).unwrap();
    assert!(lock.contains("1.1.0"), "{lock}");
    let client = https_client(&s.ca, &[]);
    let got = send(
        "publications",
        client.get(sealed.url("-/api/v1/publications")),
    )
    .await;
    let list: Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(list["publications"].as_array().unwrap().len(), 3, "{list}");

    // The operator commands read published versions like any: `provender lock` writes every
    // platform's hashes for the published provider from the sealed site's cache.
    let lock_out = work.path().join("locked.hcl");
    provender(&[
        "lock",
        "--config",
        path_str(&b_cfg),
        "--platform",
        "linux_amd64",
        "--platform",
        "darwin_arm64",
        "--provider",
        &format!("{host}/acme/foo@1.1.0"),
        "--output",
        path_str(&lock_out),
    ])
    .await
    .ok();
    let locked = std::fs::read_to_string(&lock_out).unwrap();
    // The race's winner's files are 1.1.0's: each platform's zh: is its SHA-256, and an h1:
    // comes with each.
    for (os, arch) in [("linux", "amd64"), ("darwin", "arm64")] {
        let name = s.origin.filename("acme", "foo", "1.1.0", os, arch);
        let sha = winner_files
            .iter()
            .find(|f| f["name"] == name.as_str())
            .unwrap()["sha256"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(locked.contains(&format!("zh:{sha}")), "{locked}");
    }
    assert_eq!(locked.matches("\"h1:").count(), 2, "{locked}");

    // Prune keeps published versions however long unused; unpublish removes one, on record.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    provender(&["prune", "--config", path_str(&b_cfg), "--unused-for", "1s"])
        .await
        .ok();
    let archives = files_under(&b_cache.join("archives"));
    assert!(
        archives
            .iter()
            .any(|p| p.to_string_lossy().ends_with(".zip")),
        "{archives:?}"
    );
    provender(&[
        "unpublish",
        "--config",
        path_str(&b_cfg),
        "module",
        "acme/vpc/aws",
        "2.0.0",
        "--reason",
        "leaked a secret",
        "--by",
        "ops",
    ])
    .await
    .ok();
    // The server sees what another process changed within a few seconds.
    let list = crate::support::poll(std::time::Duration::from_secs(15), async || {
        let got = send(
            "publications",
            client.get(sealed.url("-/api/v1/publications")),
        )
        .await;
        let list: Value = serde_json::from_slice(&got.body).unwrap();
        (list["publications"].as_array().unwrap().len() == 2).then_some(list)
    })
    .await
    .expect("the unpublished version leaves the list");
    assert_eq!(list["removed"][0]["reason"], "leaked a secret", "{list}");
    assert_eq!(list["removed"][0]["by"], "ops", "{list}");
    assert!(
        files_under(&b_cache.join("modules"))
            .iter()
            .all(|p| !p.to_string_lossy().contains("2.0.0"))
    );

    // The published page, in a real browser: each namespace, who published what, the removal.
    let browser = crate::support::browser::Browser::start().await;
    browser.goto(&sealed.url("-/published")).await;
    crate::pages::check_page(&browser, &sealed, "published").await;
    let table = browser.text("#main").await;
    assert!(
        table.contains("github:repo:acme/terraform-provider-foo") && table.contains("platform"),
        "{table}"
    );
    assert!(table.contains("leaked a secret"), "{table}");
    // And on the version's own page: its trust level, who published it.
    let page = format!("-/providers/{}/acme/foo/1.0.0", s.host);
    browser.goto(&sealed.url(&page)).await;
    crate::pages::check_page(&browser, &sealed, "published-version").await;
    let facts = browser.text("#main").await;
    assert!(
        facts.contains("private") && facts.contains("github:repo:acme/terraform-provider-foo"),
        "{facts}"
    );
    browser.close().await;
}

/// Appends a raw tar entry of `kind` named `name` holding `body` (padded to a block), as a
/// hostile writer makes them: any kind with any body.
fn push_entry(tar: &mut Vec<u8>, kind: tar::EntryType, name: &str, body: &[u8]) {
    let mut h = tar::Header::new_gnu();
    h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_entry_type(kind);
    h.set_mode(0o644);
    h.set_size(body.len() as u64);
    h.set_cksum();
    tar.extend_from_slice(h.as_bytes());
    tar.extend_from_slice(body);
    tar.resize(tar.len().next_multiple_of(512), 0);
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

/// A PAX record `comment=<n x's>`, as a global header's body.
fn pax_comment(n: usize) -> Vec<u8> {
    let rest = format!(" comment={}\n", "x".repeat(n));
    let mut len = rest.len() + 1;
    while format!("{len}{rest}").len() != len {
        len += 1;
    }
    format!("{len}{rest}").into_bytes()
}

#[tokio::test(flavor = "multi_thread")]
async fn uploads_that_inflate_past_the_limits_are_refused() {
    // A module's tar stream may take 1 MiB and 6 KiB per entry allowed: 1.1 MiB here.
    let s = setup(
        "max_upload_size = \"1MiB\"\n\n[modules]\nmax_unpacked_size = \"1MiB\"\nmax_entries = 16",
    )
    .await;
    // A valid release of a few KiB, after what the tar reader skips: PAX global headers (each
    // under the 64 KiB cap of one) and a `./` directory whose body nobody reads, 2 MiB each.
    let files = tar_of(&release(&s.origin, "1.0.0"));
    let mut globals = Vec::new();
    for _ in 0..36 {
        push_entry(
            &mut globals,
            tar::EntryType::XGlobalHeader,
            "g",
            &pax_comment(60_000),
        );
    }
    let mut dot = Vec::new();
    push_entry(
        &mut dot,
        tar::EntryType::Directory,
        "./",
        &vec![0u8; 2 << 20],
    );
    for (what, head) in [("global headers", &globals), ("a ./ body", &dot)] {
        let upload = gzip(&[&head[..], &files[..]].concat());
        assert!(upload.len() < 256 << 10, "{what}: {} bytes", upload.len());
        let (status, body) = s.put("providers/acme/foo/1.0.0", PUBLISHER, upload).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{what}: {body}");
        assert_eq!(body["error"]["code"], "payload_too_large", "{body}");
        assert!(
            body.to_string().contains("publishing.max_upload_size"),
            "{body}"
        );
    }
    // A module archive inflating past modules.max_unpacked_size the same way.
    let mut module = globals.clone();
    module.extend_from_slice(&tar_of(&[("main.tf".into(), b"# vpc\n".to_vec())]));
    let (status, body) = s
        .put("modules/acme/vpc/aws/1.0.0", PUBLISHER, gzip(&module))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body.to_string().contains("modules.max_unpacked_size"),
        "{body}"
    );
    assert!(files_under(&s.mirror.cache_dir.join("published")).is_empty());
    // The same release alone is published.
    let (status, body) = s
        .put("providers/acme/foo/1.0.0", PUBLISHER, gzip(&files))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// A zip holding `(name, bytes, mode)` files.
fn zip_of(files: &[(&str, &[u8], u32)]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, bytes, mode) in files {
        let options = zip::write::SimpleFileOptions::default().unix_permissions(*mode);
        zip.start_file(*name, options).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// A release of `acme/foo` `version` whose zips are `zips` by platform, with its SHA256SUMS.
fn release_of(version: &str, zips: &[((&str, &str), Vec<u8>)]) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut sums = String::new();
    for ((os, arch), bytes) in zips {
        let name = format!("terraform-provider-foo_{version}_{os}_{arch}.zip");
        sums.push_str(&format!("{}  {name}\n", sha256(bytes)));
        files.push((name, bytes.clone()));
    }
    files.push((
        format!("terraform-provider-foo_{version}_SHA256SUMS"),
        sums.into_bytes(),
    ));
    files
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_terraform_cannot_install_is_refused_and_one_it_can_installs() {
    let s = setup("").await;
    let program: &[u8] = b"#!/bin/sh\necho 'a test provider' >&2\nexit 1\n";
    let (os, arch) = local_platform();
    for (what, zip, platform, says) in [
        (
            "an empty zip",
            zip_of(&[]),
            (os, arch),
            "holds no executable",
        ),
        (
            "a README alone",
            zip_of(&[("README.md", b"# foo\n", 0o644)]),
            (os, arch),
            "holds no executable",
        ),
        (
            "another provider's executable",
            zip_of(&[("terraform-provider-bar_v1.2.0", program, 0o755)]),
            (os, arch),
            "terraform-provider-bar_v1.2.0 is another provider's",
        ),
        (
            "an executable in a directory",
            zip_of(&[("bin/terraform-provider-foo_v1.2.0", program, 0o755)]),
            (os, arch),
            "holds no executable",
        ),
        (
            "a windows executable without .exe",
            zip_of(&[("terraform-provider-foo_v1.2.0", program, 0o755)]),
            ("windows", "amd64"),
            "does not end in .exe",
        ),
    ] {
        let files = release_of("1.2.0", &[(platform, zip)]);
        let (status, body) = s
            .put("providers/acme/foo/1.2.0", PUBLISHER, tar_of(&files))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{what}: {message}");
        assert!(
            message.contains("terraform-provider-foo"),
            "{what}: {message}"
        );
    }
    assert!(files_under(&s.mirror.cache_dir.join("published")).is_empty());

    // The forms Terraform takes: the bare name here, `_v<version>.exe` for windows; the real
    // terraform installs it.
    let files = release_of(
        "1.2.0",
        &[
            (
                (os, arch),
                zip_of(&[
                    ("README.md", b"# foo\n", 0o644),
                    ("terraform-provider-foo", program, 0o755),
                ]),
            ),
            (
                ("windows", "amd64"),
                zip_of(&[("terraform-provider-foo_v1.2.0.exe", program, 0o755)]),
            ),
        ],
    );
    let (status, body) = s
        .put("providers/acme/foo/1.2.0", PUBLISHER, tar_of(&files))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let tf = Terraform::new(&s.ca, &s.cli());
    let dir = tf_config::root_module(&format!(
        "terraform {{\n  required_providers {{\n    foo = {{ source = \"{}/acme/foo\", version = \"1.2.0\" }}\n  }}\n}}\n",
        s.host
    ));
    tf.init(dir.path()).await.assert_success();
    let installed = dir.path().join(format!(
        ".terraform/providers/{}/acme/foo/1.2.0/{os}_{arch}/terraform-provider-foo",
        s.host
    ));
    assert_eq!(std::fs::read(&installed).unwrap(), program);
}

#[tokio::test(flavor = "multi_thread")]
async fn versions_differing_only_in_build_metadata_are_one_version() {
    let s = setup("").await;
    let (status, body) = s
        .put(
            "providers/acme/foo/1.0.0",
            PUBLISHER,
            tar_of(&release(&s.origin, "1.0.0")),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // 1.0.0+evil with other bytes: the same version, so a conflict, and nothing is kept.
    let before = files_under(&s.mirror.cache_dir);
    let evil = relabelled(&s.origin, "1.1.0", "1.0.0+evil");
    let (status, body) = s
        .put("providers/acme/foo/1.0.0+evil", PUBLISHER, tar_of(&evil))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "conflict", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("1.0.0 is published") && message.contains("build metadata"),
        "{message}"
    );
    let published = |p: &std::path::PathBuf| p.to_string_lossy().contains("published");
    assert_eq!(
        files_under(&s.mirror.cache_dir)
            .into_iter()
            .filter(published)
            .collect::<Vec<_>>(),
        before.into_iter().filter(published).collect::<Vec<_>>()
    );
    let (status, index) = s.get(&format!("./{}/acme/foo/index.json", s.host)).await;
    assert_eq!(status, StatusCode::OK);
    let index: Value = serde_json::from_slice(&index).unwrap();
    assert_eq!(index["versions"], json!({ "1.0.0": {} }), "{index}");
    // The other way round, for modules: a version with build metadata first, then without.
    let (status, body) = s
        .put(
            "modules/acme/vpc/aws/2.0.0+build.1",
            PUBLISHER,
            module_tgz("# one\n"),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    for version in ["2.0.0", "2.0.0+build.2"] {
        let (status, body) = s
            .put(
                &format!("modules/acme/vpc/aws/{version}"),
                PUBLISHER,
                module_tgz("# two\n"),
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{version}: {body}");
    }
    let (status, list) = s.get("-/api/v1/publications").await;
    assert_eq!(status, StatusCode::OK);
    let list: Value = serde_json::from_slice(&list).unwrap();
    let versions: Vec<&str> = list["publications"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions.len(), 2, "{list}");
    assert!(
        versions.contains(&"1.0.0") && versions.contains(&"2.0.0+build.1"),
        "{list}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_early_413_over_http1_reaches_every_client_under_load() {
    let s = setup("max_upload_size = \"1MiB\"").await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("body");
    // Far past the limit: most of it is still on its way when the answer is given.
    std::fs::write(&file, vec![7u8; 24 << 20]).unwrap();
    let ca = s.ca.write_ca(dir.path());
    let url = s.mirror.url("-/api/v1/publish/modules/acme/vpc/aws/1.0.0");
    let mut statuses = Vec::new();
    for _round in 0..10 {
        let runs: Vec<_> = (0..5)
            .map(|_| {
                let mut cmd = tokio::process::Command::new("curl");
                cmd.args(["-sS", "--http1.1", "--cacert"])
                    .arg(&ca)
                    .args(["-H", &format!("Authorization: Bearer {PUBLISHER}"), "-T"])
                    .arg(&file)
                    .args(["-o", "/dev/null", "-w", "%{http_code}"])
                    .arg(url.as_str());
                cmd.output()
            })
            .collect();
        for out in futures_util::future::join_all(runs).await {
            let out = out.unwrap();
            statuses.push(format!(
                "{} {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    let lost: Vec<&String> = statuses.iter().filter(|s| s.as_str() != "413 ").collect();
    assert!(lost.is_empty(), "{} of 50 lost: {lost:?}", lost.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_import_claims_its_published_versions_before_it_writes_them() {
    use crate::support::cli::{self, path_str, provender};
    let work = tempfile::tempdir().unwrap();
    let s = setup("").await;
    // Site A publishes several versions (each one more thing for an import to write).
    let versions = ["1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0", "1.5.0"];
    for version in versions {
        let files = relabelled(&s.origin, "1.1.0", version);
        let (status, body) = s
            .put(
                &format!("providers/acme/foo/{version}"),
                PUBLISHER,
                tar_of(&files),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{version}: {body}");
    }
    let a_cfg = cli::config_file(
        work.path(),
        "a.toml",
        &s.mirror.cache_dir,
        s.origin.addr(),
        &s.ca,
        "",
    );
    let bundle = work.path().join("site.bundle");
    cli::export_bundle(path_str(&a_cfg), &bundle).await;

    // Site B, private `acme` under the same hostname, serving while the bundle is imported.
    let b_cache = work.path().join("b-cache");
    let b_key = work.path().join("b-signing.asc");
    provender(&["keygen", "--provider-signing", "--output", path_str(&b_key)])
        .await
        .ok();
    let publishing = format!(
        "[publishing]\nhostname = \"{}\"\nsigning_key = \"{}\"\n\n[publishing.namespaces.acme]\n",
        s.host,
        b_key.display()
    );
    let auth = format!(
        "[auth]\nurl_signing_key = \"{}\"\n\n[[auth.clients]]\nname = \"platform\"\ntoken = \"{PUBLISHER}\"\n\n[[auth.rules]]\nname = \"platform\"\nclients = [\"platform\"]\npublish = [\"providers:acme/*\"]\n\n",
        "k".repeat(40)
    );
    let b_cfg = cli::config_file(
        work.path(),
        "b.toml",
        &b_cache,
        s.origin.addr(),
        &s.ca,
        &format!("offline = true\n\n{publishing}"),
    );
    let b = TestMirror::start_with(
        &s.ca,
        &s.origin,
        MirrorOptions {
            cache_dir: Some(&b_cache),
            extra_upstream: "offline = true",
            extra_toml: &format!("{auth}{publishing}"),
            ..Default::default()
        },
    )
    .await;
    let import = tokio::spawn({
        let (cfg, bundle) = (b_cfg.clone(), bundle.clone());
        async move { cli::import(path_str(&cfg), &bundle).await }
    });
    // As soon as the import writes its first archive, a publisher on B sends other files for
    // 1.0.0: the import's claim is already there, so the publisher gets 409 and the import
    // goes through whole.
    let archives = b_cache.join("archives");
    let started = std::time::Instant::now();
    while files_under(&archives).is_empty() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "the import wrote no archive"
        );
        assert!(!import.is_finished(), "the import ended before writing");
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let other = tar_of(&relabelled(&s.origin, "1.0.0", "1.0.0"));
    let other_files = relabelled(&s.origin, "1.0.0", "1.0.0");
    let client = https_client(&s.ca, &[]);
    let got = send(
        "publish on B",
        client
            .put(b.url("-/api/v1/publish/providers/acme/foo/1.0.0"))
            .bearer_auth(PUBLISHER)
            .body(other),
    )
    .await;
    let imported = import.await.unwrap();
    assert_eq!(
        got.status,
        StatusCode::CONFLICT,
        "{}; the import: {}",
        String::from_utf8_lossy(&got.body),
        imported.out()
    );
    imported.ok();
    assert!(
        imported
            .stdout
            .contains(&format!("publications recorded: {}", versions.len())),
        "{}",
        imported.out()
    );
    // What B serves for 1.0.0 is A's release, its records and publication alike.
    let (os, arch) = local_platform();
    let name = format!("terraform-provider-foo_1.0.0_{os}_{arch}.zip");
    let got = send(
        "archive on B",
        client
            .get(b.url(&format!("./{}/acme/foo/{name}", s.host)))
            .bearer_auth(PUBLISHER),
    )
    .await;
    assert_eq!(got.status, StatusCode::OK);
    let from_a = relabelled(&s.origin, "1.1.0", "1.0.0");
    let a_zip = &from_a.iter().find(|f| f.0 == name).unwrap().1;
    assert_eq!(&got.body[..], &a_zip[..]);
    assert_ne!(
        &other_files.iter().find(|f| f.0 == name).unwrap().1[..],
        &a_zip[..]
    );
}
