//! The static mirror layout and the bundle format shared by `export` and `import`.
//!
//! A mirror directory is exactly what `terraform providers mirror` writes:
//!
//! ```text
//! <host>/<namespace>/<type>/index.json                 {"versions": {"1.2.0": {}}}
//! <host>/<namespace>/<type>/<version>.json             {"archives": {"linux_amd64": {"hashes": [...], "url": "<zip>"}}}
//! <host>/<namespace>/<type>/terraform-provider-<type>_<version>_<os>_<arch>.zip
//! ```
//!
//! A bundle is one uncompressed tar file: first `provender-bundle.json` (the [`Manifest`]: every
//! archive with its size, SHA-256 and `h1:`, plus the origin's download metadata and checksum
//! files where the cache has them), then, when the exporting site has a key,
//! `provender-bundle.json.sig` (its signature over the manifest's bytes, see
//! [`crate::trust::site`]), then the mirror layout above, then the origin's SHA256SUMS files and
//! signatures under `provender-origin/`. Extracted, a bundle is itself a usable mirror
//! directory. Import trusts nothing in it that the manifest does not pin by hash, and accepts no
//! entry the manifest does not name.
//!
//! A bundle comes from outside, so [`walk`] reads it as hostile input: every size is bounded
//! (extension headers by [`crate::tarball`], before any entry's name is known), every path must
//! be one the manifest puts in the layout, every entry must be a regular file, named once. What
//! is wrong is a [`BundleError`]: the entry, and why.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Read};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::address::{Platform, ProviderAddr, Version};
use crate::hash::{H1, Hashing, Sha256};
use crate::records::releases::{Packing, Product, ReleaseKey, signature_filename, sums_filename};
use crate::records::{Package, SumsRef, docs};

/// The manifest's name inside a bundle (always its first entry).
pub const MANIFEST_NAME: &str = "provender-bundle.json";
/// The `format` field of every manifest.
pub const FORMAT: &str = "provender-bundle";
/// The manifest format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Where the origin's checksum files live inside a bundle.
pub const ORIGIN_DIR: &str = "provender-origin";
/// The manifest's signature inside a bundle (its second entry, when the bundle is signed).
pub const SIGNATURE_NAME: &str = "provender-bundle.json.sig";
/// Largest manifest, signature, mirror JSON document or checksum file accepted.
pub const MAX_DOCUMENT: u64 = 64 << 20;

/// Why a bundle, or one entry of it, is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{entry}: {problem}")]
pub struct BundleError {
    /// The entry by its name in the bundle (the manifest's own problems are
    /// `provender-bundle.json`'s), `manifest` when the bundle starts with something else, or
    /// `tar entry <n>` (the n-th header of the tar stream) when the stream itself is at fault.
    pub entry: String,
    /// Why.
    pub problem: String,
}

impl BundleError {
    pub fn new(entry: impl Into<String>, problem: impl std::fmt::Display) -> BundleError {
        BundleError {
            entry: entry.into(),
            problem: problem.to_string(),
        }
    }

    /// A problem with the manifest (what it says, not how it was read).
    fn manifest(problem: impl std::fmt::Display) -> BundleError {
        BundleError::new(MANIFEST_NAME, problem)
    }
}

/// What a bundle holds, with every hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: String,
    pub format_version: u32,
    /// Unix seconds when the bundle was made.
    pub created_at: u64,
    pub versions: Vec<BundleVersion>,
    /// Module packages, each with its record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub modules: Vec<BundleModule>,
    /// The CLIs' own releases, each with the vendor's signed SHA256SUMS.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub releases: Vec<BundleRelease>,
    /// Repositories of the git cache, each as one `git bundle`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub git: Vec<BundleGit>,
    /// The publication records of the published versions it carries (private namespaces):
    /// who published each, when, and its digest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub publications: Vec<crate::records::publish::Publication>,
    /// What it carries, in brief ([`Contents::of`] the lists above), so that the importing
    /// site's configuration can be read off it. Bundles made before it was written have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contents: Option<Contents>,
}

/// What a bundle carries, in brief: each kind counted, and what a site needs configured to
/// serve it (the registry hosts of its providers and modules, the hosts of its git
/// repositories, the CLIs of its releases, the hostname and namespaces of its published
/// versions). It is always [`Contents::of`] the manifest's lists: import refuses a manifest
/// whose `contents` says otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contents {
    /// Provider versions and their archives (published ones included).
    pub provider_versions: usize,
    pub provider_archives: usize,
    /// The registry hosts of the providers and modules that are not published versions.
    pub registry_hosts: BTreeSet<String>,
    /// Module versions (published ones included).
    pub module_versions: usize,
    /// Repositories of the git cache, and their hosts.
    pub git_repositories: usize,
    pub git_hosts: BTreeSet<String>,
    /// CLI releases, their builds, and the CLIs they are of (`terraform`, `tofu`).
    pub release_versions: usize,
    pub release_builds: usize,
    pub release_products: BTreeSet<String>,
    /// Published versions (publication records), and their namespaces by hostname.
    pub publications: usize,
    pub published: BTreeMap<String, BTreeSet<String>>,
}

impl Contents {
    /// What `manifest` carries, from its lists.
    pub fn of(manifest: &Manifest) -> Contents {
        let published_hosts: BTreeSet<(String, String)> = manifest
            .publications
            .iter()
            .filter_map(|p| {
                p.provider()
                    .map(|a| (a.hostname.to_string(), a.namespace.to_ascii_lowercase()))
                    .or_else(|| {
                        p.module()
                            .map(|a| (a.hostname.to_string(), a.namespace.to_ascii_lowercase()))
                    })
            })
            .collect();
        let is_published = |host: &str, namespace: &str| {
            published_hosts.contains(&(host.to_string(), namespace.to_ascii_lowercase()))
        };
        let mut published: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (host, namespace) in &published_hosts {
            published
                .entry(host.clone())
                .or_default()
                .insert(namespace.clone());
        }
        let providers = manifest
            .versions
            .iter()
            .filter_map(|v| parse_source(&v.source).ok())
            .filter(|a| !is_published(a.hostname.as_str(), &a.namespace))
            .map(|a| a.hostname.to_string());
        let modules = manifest
            .modules
            .iter()
            .filter_map(|m| parse_module_source(&m.source).ok())
            .filter(|a| !is_published(a.hostname.as_str(), &a.namespace))
            .map(|a| a.hostname.to_string());
        Contents {
            provider_versions: manifest.versions.len(),
            provider_archives: manifest.versions.iter().map(|v| v.archives.len()).sum(),
            registry_hosts: providers.chain(modules).collect(),
            module_versions: manifest.modules.len(),
            git_repositories: manifest.git.len(),
            git_hosts: manifest
                .git
                .iter()
                .filter_map(|g| parse_git_repo(&g.repo).ok())
                .map(|r| r.host.to_string())
                .collect(),
            release_versions: manifest.releases.len(),
            release_builds: manifest.releases.iter().map(|r| r.builds.len()).sum(),
            release_products: manifest
                .releases
                .iter()
                .map(|r| r.cli.as_str().to_string())
                .collect(),
            publications: manifest.publications.len(),
            published,
        }
    }
}

/// One repository of the git cache in a bundle: a `git bundle` of every reference it had, and
/// those references, so that import can check the repository it makes is the one exported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleGit {
    /// `host/path`, as the git door names it.
    pub repo: String,
    /// Path inside the bundle ([`git_path`]).
    pub path: String,
    pub size: u64,
    /// SHA-256 of the `git bundle` file.
    pub sha256: Sha256,
    /// The branch `HEAD` names (`refs/heads/...`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// Every reference and the object it names.
    pub refs: BTreeMap<String, String>,
}

/// Where git repositories live inside a bundle.
pub const GIT_DIR: &str = "provender-git";

/// Path of a git repository's `git bundle` inside a bundle: `provender-git/<host>/<path>.bundle`.
pub fn git_path(repo: &crate::address::GitRepo) -> String {
    format!("{GIT_DIR}/{repo}.bundle")
}

/// Parses a manifest git `repo` (`host/path`).
pub fn parse_git_repo(repo: &str) -> Result<crate::address::GitRepo, BundleError> {
    let parsed = crate::address::GitRepo::parse(repo).map_err(BundleError::manifest)?;
    if parsed.to_string() != repo {
        return Err(BundleError::manifest(format!(
            "git repository {repo:?} is not in canonical host/path form"
        )));
    }
    Ok(parsed)
}

/// One CLI release in a bundle: the vendor's SHA256SUMS and its signature, as published, and
/// the zips of it the bundle carries. Import checks them as a fetch does
/// (`mirror::releases::verify_release_sums`): the vendor's signature is what vouches for them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleRelease {
    pub cli: Product,
    pub version: Version,
    /// Path of the SHA256SUMS inside the bundle ([`release_path`]).
    pub sums_path: String,
    pub sums_sha256: Sha256,
    /// Path of its signature inside the bundle.
    pub signature_path: String,
    pub signature_sha256: Sha256,
    pub builds: Vec<BundleBuild>,
}

/// One platform's build of a release in a bundle: its zip, or its `.tar.gz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleBuild {
    pub platform: Platform,
    #[serde(default, skip_serializing_if = "Packing::is_zip")]
    pub packing: Packing,
    /// Path inside the bundle ([`release_path`]).
    pub path: String,
    pub size: u64,
    pub sha256: Sha256,
}

/// Where a release's file lives inside a bundle: where the mirror serves it,
/// `releases/<cli>/<version>/<file>`.
pub fn release_path(cli: Product, version: &Version, file: &str) -> String {
    format!("releases/{cli}/{version}/{file}")
}

impl BundleRelease {
    /// Which build of the release `build` is.
    pub fn key(&self, build: &BundleBuild) -> ReleaseKey {
        ReleaseKey {
            product: self.cli,
            version: self.version.clone(),
            platform: build.platform.clone(),
            packing: build.packing,
        }
    }

    /// Checks that it names its files where the layout puts them, each build once.
    fn check(&self) -> Result<(), BundleError> {
        let (cli, version) = (self.cli, &self.version);
        let at = format!("{cli} {version}");
        let problem = if self.sums_path != release_path(cli, version, &sums_filename(cli, version))
            || self.signature_path != release_path(cli, version, &signature_filename(cli, version))
        {
            "its SHA256SUMS or signature is not where the layout puts it".to_string()
        } else {
            let mut builds = BTreeSet::new();
            let wrong = self.builds.iter().find_map(|b| {
                let key = self.key(b);
                if !builds.insert(key.filename()) {
                    Some(format!("{} is listed twice", key.filename()))
                } else if b.path != release_path(cli, version, &key.filename()) {
                    Some(format!("path {:?} is not where the layout puts it", b.path))
                } else {
                    None
                }
            });
            match wrong {
                Some(problem) => problem,
                None => return Ok(()),
            }
        };
        Err(BundleError::manifest(format!("{at}: {problem}")))
    }
}

/// One module version's package in a bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleModule {
    /// `host/namespace/name/system`.
    pub source: String,
    pub version: Version,
    /// Path inside the bundle ([`module_path`]).
    pub path: String,
    pub size: u64,
    /// SHA-256 of the package.
    pub sha256: Sha256,
    /// Where the exporting site fetched it from.
    pub record: crate::records::ModuleRecord,
}

/// Where module packages live inside a bundle.
pub const MODULES_DIR: &str = "provender-modules";

/// Path of a module package inside a bundle.
pub fn module_path(addr: &crate::address::ModuleAddr, version: &Version) -> String {
    format!(
        "{MODULES_DIR}/{addr}/{version}/{}",
        crate::address::MODULE_ARCHIVE
    )
}

/// Parses a manifest module `source`, which must be the full `host/namespace/name/system` form.
pub fn parse_module_source(source: &str) -> Result<crate::address::ModuleAddr, BundleError> {
    let addr = crate::address::ModuleAddr::parse_in(source, "-").map_err(BundleError::manifest)?;
    if addr.to_string() != source {
        return Err(BundleError::manifest(format!(
            "module source {source:?} is not in canonical host/namespace/name/system form"
        )));
    }
    Ok(addr)
}

/// One provider version in a bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleVersion {
    /// `host/namespace/type`.
    pub source: String,
    pub version: Version,
    /// Plugin protocol versions the origin lists (empty when unknown).
    #[serde(default)]
    pub protocols: Vec<String>,
    pub archives: Vec<BundleArchive>,
    /// The origin's SHA256SUMS files, in the order the packages' `shasums_url`s refer to.
    #[serde(default)]
    pub sums: Vec<BundleSums>,
}

/// One archive in a bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleArchive {
    pub platform: Platform,
    /// Path inside the bundle (the mirror layout).
    pub path: String,
    pub size: u64,
    /// SHA-256 (the `zh:` hash).
    pub sha256: Sha256,
    /// `h1:` hash of the zip.
    pub h1: H1,
    /// The origin's download metadata, when the cache has it.
    #[serde(default)]
    pub origin: Option<Package>,
}

/// One SHA256SUMS file and its signature, as the origin published them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleSums {
    /// The version record's reference to the file: its URLs at the origin (and how its signature
    /// verified when the cache fetched it; re-checked on import).
    pub reference: SumsRef,
    pub path: String,
    pub sha256: Sha256,
    pub signature_path: String,
    pub signature_sha256: Sha256,
}

/// Path of a provider's `index.json`.
pub fn index_path(addr: &ProviderAddr) -> String {
    format!("{addr}/index.json")
}

/// Path of a version's `<version>.json`.
pub fn version_path(addr: &ProviderAddr, version: &Version) -> String {
    format!("{addr}/{version}.json")
}

/// Path of an origin checksum file (or its signature) inside a bundle.
pub fn sums_path(addr: &ProviderAddr, version: &Version, n: usize, signature: bool) -> String {
    let suffix = if signature { ".sig" } else { "" };
    format!("{ORIGIN_DIR}/{addr}/{version}.SHA256SUMS.{n}{suffix}")
}

/// `index.json` as `terraform providers mirror` writes it (two-space indent, sorted keys).
pub fn index_json<'a>(versions: impl IntoIterator<Item = &'a Version>) -> Vec<u8> {
    docs::to_pretty(&docs::MirrorIndex::of(versions))
}

/// One archive's entry in `<version>.json`.
pub struct MirrorEntry<'a> {
    pub platform: &'a Platform,
    pub filename: String,
    pub h1: &'a H1,
    pub sha256: &'a Sha256,
}

/// `<version>.json` with both `h1:` and `zh:` for each archive.
pub fn version_json<'a>(entries: impl IntoIterator<Item = MirrorEntry<'a>>) -> Vec<u8> {
    let archives = entries
        .into_iter()
        .map(|e| {
            let hashes = vec![e.h1.to_string(), crate::hash::zh(e.sha256)];
            let url = e.filename;
            (e.platform.to_string(), docs::MirrorArchive { hashes, url })
        })
        .collect();
    docs::to_pretty(&docs::MirrorVersion { archives })
}

impl Manifest {
    /// The mirror JSON documents a bundle with this manifest carries, by path.
    pub fn mirror_documents(&self) -> Result<BTreeMap<String, Vec<u8>>, BundleError> {
        let mut by_provider: BTreeMap<ProviderAddr, Vec<&BundleVersion>> = BTreeMap::new();
        for v in &self.versions {
            let addr = parse_source(&v.source)?;
            by_provider.entry(addr).or_default().push(v);
        }
        let mut docs = BTreeMap::new();
        for (addr, versions) in by_provider {
            docs.insert(
                index_path(&addr),
                index_json(versions.iter().map(|v| &v.version)),
            );
            for v in versions {
                let entries = v.archives.iter().map(|a| MirrorEntry {
                    platform: &a.platform,
                    filename: addr.archive_filename(&v.version, &a.platform),
                    h1: &a.h1,
                    sha256: &a.sha256,
                });
                docs.insert(version_path(&addr, &v.version), version_json(entries));
            }
        }
        Ok(docs)
    }
}

/// What a bundle entry must be, by the manifest: an archive (version `v`, archive `a`), a mirror
/// document with exactly these bytes, or an origin checksum file (version `v`, file `s`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    Archive { v: usize, a: usize },
    Module { m: usize },
    Git { g: usize },
    ReleaseBuild { r: usize, z: usize },
    ReleaseSums { r: usize, signature: bool },
    Document(Vec<u8>),
    Sums { v: usize, s: usize, signature: bool },
}

impl Manifest {
    /// Parses a manifest and checks that it is one this build reads and that every entry it
    /// names is where the layout puts it.
    pub fn parse(bytes: &[u8]) -> Result<Manifest, BundleError> {
        let manifest: Manifest = crate::records::from_json(bytes).map_err(BundleError::manifest)?;
        if manifest.format != FORMAT || manifest.format_version != FORMAT_VERSION {
            return Err(BundleError::manifest(format!(
                "format {:?} version {} is not {FORMAT} version {FORMAT_VERSION}",
                manifest.format, manifest.format_version
            )));
        }
        let mut seen = BTreeSet::new();
        for v in &manifest.versions {
            let at = format!("{} {}", v.source, v.version);
            let addr = parse_source(&v.source)?;
            if !seen.insert((addr.clone(), v.version.clone())) {
                return Err(BundleError::manifest(format!("{at} is listed twice")));
            }
            check_version_entry(&at, &addr, v)?;
        }
        let mut modules = BTreeSet::new();
        for m in &manifest.modules {
            let at = format!("module {} {}", m.source, m.version);
            let addr = parse_module_source(&m.source)?;
            if !modules.insert((addr.clone(), m.version.clone())) {
                return Err(BundleError::manifest(format!("{at} is listed twice")));
            }
            let problem = if m.path != module_path(&addr, &m.version) {
                format!("path {:?} is not where the layout puts it", m.path)
            } else if m.record.sha256 != m.sha256 || m.record.size != m.size {
                "its record describes another package".to_string()
            } else {
                continue;
            };
            return Err(BundleError::manifest(format!("{at}: {problem}")));
        }
        let mut repos = BTreeSet::new();
        for g in &manifest.git {
            let at = format!("git repository {}", g.repo);
            let repo = parse_git_repo(&g.repo)?;
            if !repos.insert(repo.clone()) {
                return Err(BundleError::manifest(format!("{at} is listed twice")));
            }
            if g.path != git_path(&repo) {
                return Err(BundleError::manifest(format!(
                    "{at}: path {:?} is not where the layout puts it",
                    g.path
                )));
            }
            let well_formed = |name: &str, id: &str| {
                name.starts_with("refs/")
                    && crate::upstream::valid_reference(name)
                    && matches!(id.len(), 40 | 64)
                    && id.bytes().all(|b| b.is_ascii_hexdigit())
            };
            if let Some((name, id)) = g.refs.iter().find(|(n, i)| !well_formed(n, i)) {
                return Err(BundleError::manifest(format!(
                    "{at}: reference {name:?} -> {id:?} is not a reference to an object id"
                )));
            }
            if g.head.as_ref().is_some_and(|h| !g.refs.contains_key(h)) {
                return Err(BundleError::manifest(format!(
                    "{at}: HEAD names a reference it does not list"
                )));
            }
        }
        let mut releases = BTreeSet::new();
        for r in &manifest.releases {
            if !releases.insert((r.cli, r.version.clone())) {
                return Err(BundleError::manifest(format!(
                    "{} {} is listed twice",
                    r.cli, r.version
                )));
            }
            r.check()?;
        }
        if let Some(said) = &manifest.contents {
            if *said != Contents::of(&manifest) {
                return Err(BundleError::manifest(
                    "its contents summary does not match the versions, modules, releases, git \
                     repositories and publications it lists",
                ));
            }
        }
        Ok(manifest)
    }

    /// Every entry the bundle must hold after the manifest and its signature, by path.
    pub fn expected(&self) -> Result<HashMap<String, Expect>, BundleError> {
        let mut expected = HashMap::new();
        for (vi, v) in self.versions.iter().enumerate() {
            for (ai, a) in v.archives.iter().enumerate() {
                expected.insert(a.path.clone(), Expect::Archive { v: vi, a: ai });
            }
            for (si, s) in v.sums.iter().enumerate() {
                for (path, signature) in [(&s.path, false), (&s.signature_path, true)] {
                    let sums = Expect::Sums {
                        v: vi,
                        s: si,
                        signature,
                    };
                    expected.insert(path.clone(), sums);
                }
            }
        }
        for (path, doc) in self.mirror_documents()? {
            expected.insert(path, Expect::Document(doc));
        }
        for (mi, m) in self.modules.iter().enumerate() {
            expected.insert(m.path.clone(), Expect::Module { m: mi });
        }
        for (gi, g) in self.git.iter().enumerate() {
            expected.insert(g.path.clone(), Expect::Git { g: gi });
        }
        for (ri, r) in self.releases.iter().enumerate() {
            for (path, signature) in [(&r.sums_path, false), (&r.signature_path, true)] {
                expected.insert(path.clone(), Expect::ReleaseSums { r: ri, signature });
            }
            for (zi, z) in r.builds.iter().enumerate() {
                expected.insert(z.path.clone(), Expect::ReleaseBuild { r: ri, z: zi });
            }
        }
        Ok(expected)
    }
}

/// Checks that a manifest entry (`at`: its source and version) names things where the layout
/// puts them.
fn check_version_entry(
    at: &str,
    addr: &ProviderAddr,
    v: &BundleVersion,
) -> Result<(), BundleError> {
    let bad = |problem: String| BundleError::manifest(format!("{at}: {problem}"));
    let mut platforms = BTreeSet::new();
    for a in &v.archives {
        if !platforms.insert(&a.platform) {
            return Err(bad(format!("platform {} is listed twice", a.platform)));
        }
        if a.path != addr.archive_path(&v.version, &a.platform) {
            return Err(bad(format!(
                "archive path {:?} is not where the layout puts it",
                a.path
            )));
        }
        if let Some(pkg) = &a.origin {
            if pkg.shasum != a.sha256 {
                return Err(bad(format!(
                    "{}: the origin's shasum {} differs from the manifest's sha256 {}",
                    a.path, pkg.shasum, a.sha256
                )));
            }
            if !v
                .sums
                .iter()
                .any(|s| pkg.shasums_url.as_deref() == Some(s.reference.url.as_str()))
            {
                return Err(bad(format!(
                    "{}: the origin's SHA256SUMS it refers to is not in the bundle",
                    a.path
                )));
            }
        }
    }
    for (k, s) in v.sums.iter().enumerate() {
        if s.path != sums_path(addr, &v.version, k, false)
            || s.signature_path != sums_path(addr, &v.version, k, true)
        {
            return Err(bad(format!(
                "checksum file {k} is not where the layout puts it"
            )));
        }
    }
    Ok(())
}

/// Reads at most `limit` bytes of the entry `entry`; more is an error.
pub fn read_limited(
    reader: &mut impl Read,
    limit: u64,
    entry: &str,
) -> Result<Vec<u8>, BundleError> {
    let mut out = Vec::new();
    reader
        .take(limit + 1)
        .read_to_end(&mut out)
        .map_err(|e| BundleError::new(entry, e))?;
    if out.len() as u64 > limit {
        return Err(BundleError::new(
            entry,
            format!("larger than {limit} bytes"),
        ));
    }
    Ok(out)
}

/// The start of a bundle: its manifest, the manifest's exact bytes, and its signature.
#[derive(Debug)]
pub struct Head {
    pub manifest: Manifest,
    pub manifest_bytes: Vec<u8>,
    pub signature: Option<crate::trust::site::ManifestSignature>,
}

/// What a walk through a bundle found besides its archives: the origin's checksum files
/// (version, file, signature?) -> bytes, each matching the manifest's SHA-256.
pub type SumsFiles = HashMap<(usize, usize, bool), Vec<u8>>;

/// The releases' SHA256SUMS and signatures a walk found: (release, signature?) -> bytes, each
/// matching the manifest's SHA-256.
pub type ReleaseSumsFiles = HashMap<(usize, bool), Vec<u8>>;

/// Reads a small entry whose SHA-256 the manifest gives.
fn read_pinned(body: &mut impl Read, entry: &str, want: &Sha256) -> Result<Vec<u8>, BundleError> {
    let got = read_limited(body, MAX_DOCUMENT, entry)?;
    let sha = Sha256::of(&got);
    if &sha == want {
        Ok(got)
    } else {
        Err(BundleError::new(
            entry,
            format!("SHA-256 is {sha}, the manifest says {want}"),
        ))
    }
}

/// A bundle entry the caller checks itself: a provider archive (its manifest entry, version
/// `v`, archive `a`), a module package (its manifest entry, index `m`) or a release zip (its
/// manifest entry, release `r`, zip `z`).
pub enum Payload<'a> {
    Archive(&'a BundleArchive, usize, usize),
    Module(&'a BundleModule, usize),
    Git(&'a BundleGit, usize),
    ReleaseBuild(&'a BundleBuild, usize, usize),
}

/// Everything a walk through a bundle read: its head, and the checksum files it carries.
pub struct Walked {
    pub head: Head,
    pub sums: SumsFiles,
    pub release_sums: ReleaseSumsFiles,
}

/// Reads a bundle from `reader`, checking every entry against its manifest: documents byte for
/// byte, checksum files by SHA-256, and each archive and module package through
/// `payload(which, body)`, which must check it against its manifest entry. `head` sees the
/// manifest and its signature before any other entry is read; an error from it stops the walk.
/// Problems are pushed to `failed`, each naming its entry; the walk goes on where it can, so
/// one run reports them all. Returns the head and the checksum files ([`Walked`]) when the head could be
/// read.
pub fn walk<E: std::fmt::Display>(
    reader: impl Read,
    failed: &mut Vec<BundleError>,
    head: impl FnOnce(&Head) -> Result<(), E>,
    mut payload: impl FnMut(Payload<'_>, &mut dyn Read) -> Result<(), E>,
) -> Option<Walked> {
    let mut tar = tar::Archive::new(reader);
    let mut members = match crate::tarball::members(&mut tar) {
        Ok(m) => m,
        Err(e) => {
            failed.push(tar_error(e));
            return None;
        }
    };
    let (manifest, manifest_bytes) = match members.next() {
        Some(Ok(mut member)) => {
            let name = member.name();
            if name != MANIFEST_NAME {
                failed.push(BundleError::new(
                    "manifest",
                    format!("the first entry is {name:?}, not {MANIFEST_NAME}"),
                ));
                return None;
            }
            let parsed = read_limited(&mut member.body, MAX_DOCUMENT, MANIFEST_NAME)
                .and_then(|b| Manifest::parse(&b).map(|m| (m, b)));
            match parsed {
                Ok(m) => m,
                Err(e) => {
                    failed.push(e);
                    return None;
                }
            }
        }
        Some(Err(e)) => {
            failed.push(tar_error(e));
            return None;
        }
        None => {
            failed.push(BundleError::new("manifest", "the bundle is empty"));
            return None;
        }
    };
    let mut expected = match manifest.expected() {
        Ok(e) => e,
        Err(e) => {
            failed.push(e);
            return None;
        }
    };
    // The signature, if any, is the second entry; otherwise that entry is an ordinary one.
    let mut second = members.next();
    let mut signature = None;
    if let Some(Ok(member)) = &mut second {
        if member.path == SIGNATURE_NAME.as_bytes() {
            match read_limited(&mut member.body, MAX_DOCUMENT, SIGNATURE_NAME).and_then(|b| {
                serde_json::from_slice(&b).map_err(|e| BundleError::new(SIGNATURE_NAME, e))
            }) {
                Ok(sig) => signature = Some(sig),
                Err(e) => {
                    failed.push(e);
                    return None;
                }
            }
            second = None;
        }
    }
    let head_read = Head {
        manifest,
        manifest_bytes,
        signature,
    };
    if let Err(e) = head(&head_read) {
        failed.push(BundleError::new(MANIFEST_NAME, e));
        return None;
    }

    let mut sums = SumsFiles::new();
    let mut release_sums = ReleaseSumsFiles::new();
    for member in second.into_iter().chain(members) {
        let mut member = match member {
            Ok(m) => m,
            Err(e) => {
                failed.push(tar_error(e));
                break;
            }
        };
        let name = member.name();
        let Some(expect) = expected.remove(&name) else {
            failed.push(BundleError::new(
                name,
                "not named by the manifest (or present twice)",
            ));
            continue;
        };
        if member.kind() != tar::EntryType::Regular {
            failed.push(BundleError::new(name, "not a regular file"));
            continue;
        }
        let checked = match expect {
            Expect::Document(want) => {
                read_limited(&mut member.body, MAX_DOCUMENT, &name).and_then(|got| {
                    if got == want {
                        Ok(())
                    } else {
                        Err(BundleError::new(
                            &name,
                            "does not match the manifest's hashes",
                        ))
                    }
                })
            }
            Expect::Sums { v, s, signature } => {
                let meta = &head_read.manifest.versions[v].sums[s];
                let want = if signature {
                    &meta.signature_sha256
                } else {
                    &meta.sha256
                };
                read_pinned(&mut member.body, &name, want)
                    .map(|got| drop(sums.insert((v, s, signature), got)))
            }
            Expect::ReleaseSums { r, signature } => {
                let meta = &head_read.manifest.releases[r];
                let want = if signature {
                    &meta.signature_sha256
                } else {
                    &meta.sums_sha256
                };
                read_pinned(&mut member.body, &name, want)
                    .map(|got| drop(release_sums.insert((r, signature), got)))
            }
            Expect::ReleaseBuild { r, z } => payload(
                Payload::ReleaseBuild(&head_read.manifest.releases[r].builds[z], r, z),
                &mut member.body,
            )
            .map_err(|e| BundleError::new(&name, e)),
            Expect::Archive { v, a } => payload(
                Payload::Archive(&head_read.manifest.versions[v].archives[a], v, a),
                &mut member.body,
            )
            .map_err(|e| BundleError::new(&name, e)),
            Expect::Module { m } => payload(
                Payload::Module(&head_read.manifest.modules[m], m),
                &mut member.body,
            )
            .map_err(|e| BundleError::new(&name, e)),
            Expect::Git { g } => payload(
                Payload::Git(&head_read.manifest.git[g], g),
                &mut member.body,
            )
            .map_err(|e| BundleError::new(&name, e)),
        };
        if let Err(e) = checked {
            failed.push(e);
        }
    }
    let mut missing: Vec<String> = expected.into_keys().collect();
    missing.sort();
    for m in missing {
        failed.push(BundleError::new(
            m,
            "named by the manifest but missing from the bundle",
        ));
    }
    Some(Walked {
        head: head_read,
        sums,
        release_sums,
    })
}

/// A bundle's tar stream that cannot be read further, by the header at fault.
fn tar_error(e: crate::tarball::TarError) -> BundleError {
    BundleError::new(format!("tar entry {}", e.entry), e.problem)
}

/// Parses a manifest `source`, which must be the full `host/namespace/type` form.
pub fn parse_source(source: &str) -> Result<ProviderAddr, BundleError> {
    let addr = ProviderAddr::parse(source).map_err(BundleError::manifest)?;
    if addr.to_string() != source {
        return Err(BundleError::manifest(format!(
            "source {source:?} is not in canonical host/namespace/type form"
        )));
    }
    Ok(addr)
}

/// Writes a tar stream asynchronously: ustar headers from the `tar` crate, bodies streamed.
pub struct TarWriter<W> {
    out: W,
}

impl<W: AsyncWrite + Unpin> TarWriter<W> {
    pub fn new(out: W) -> Self {
        TarWriter { out }
    }

    /// Appends a regular file of exactly `size` bytes read from `body`, returning the SHA-256
    /// of what was written. Fails if `body` yields a different length.
    pub async fn append(
        &mut self,
        path: &str,
        size: u64,
        body: &mut (impl AsyncRead + Unpin),
    ) -> io::Result<Sha256> {
        let mut header = tar::Header::new_ustar();
        header
            .set_path(path)
            .map_err(|e| io::Error::other(format!("{path}: {e}")))?;
        header.set_size(size);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        self.out.write_all(header.as_bytes()).await?;
        let mut hashing = Hashing::new(body);
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = tokio::io::AsyncReadExt::read(&mut hashing, &mut buf).await?;
            if n == 0 || hashing.size() > size {
                break;
            }
            self.out.write_all(&buf[..n]).await?;
        }
        let (digest, _) = hashing.into_parts();
        if digest.size != size {
            return Err(io::Error::other(format!(
                "{path}: expected {size} bytes, read {}",
                digest.size
            )));
        }
        let pad = (512 - size % 512) % 512;
        self.out.write_all(&vec![0u8; pad as usize]).await?;
        Ok(digest.sha256)
    }

    /// Appends a file held in memory.
    pub async fn append_bytes(&mut self, path: &str, bytes: &[u8]) -> io::Result<()> {
        self.append(path, bytes.len() as u64, &mut &bytes[..])
            .await
            .map(|_| ())
    }

    /// Writes the end-of-archive marker and returns the writer.
    pub async fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&[0u8; 1024]).await?;
        self.out.flush().await?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirror_documents_look_like_terraforms() {
        let v = Version::parse("1.1.0").unwrap();
        let p = Platform::parse("linux_amd64").unwrap();
        assert_eq!(
            String::from_utf8(index_json([&v])).unwrap(),
            "{\n  \"versions\": {\n    \"1.1.0\": {}\n  }\n}\n"
        );
        let (h1, sha) = (crate::hash::test_h1(1), Sha256::of(b"zip"));
        let doc = version_json([MirrorEntry {
            platform: &p,
            filename: "terraform-provider-foo_1.1.0_linux_amd64.zip".into(),
            h1: &h1,
            sha256: &sha,
        }]);
        let parsed: serde_json::Value = serde_json::from_slice(&doc).unwrap();
        assert_eq!(
            parsed["archives"]["linux_amd64"]["hashes"],
            serde_json::json!([h1.as_str(), format!("zh:{sha}")])
        );
        assert_eq!(
            parsed["archives"]["linux_amd64"]["url"],
            "terraform-provider-foo_1.1.0_linux_amd64.zip"
        );
    }

    /// A manifest carrying one git repository, with `contents` as given.
    fn with_git(contents: Option<Contents>) -> Vec<u8> {
        let repo = crate::address::GitRepo::parse("git.example.com/acme/net.git").unwrap();
        let manifest = Manifest {
            format: FORMAT.into(),
            format_version: FORMAT_VERSION,
            created_at: 0,
            versions: Vec::new(),
            modules: Vec::new(),
            releases: Vec::new(),
            git: vec![BundleGit {
                repo: repo.to_string(),
                path: git_path(&repo),
                size: 3,
                sha256: Sha256::of(b"git"),
                head: None,
                refs: BTreeMap::new(),
            }],
            publications: Vec::new(),
            contents,
        };
        serde_json::to_vec(&manifest).unwrap()
    }

    #[test]
    fn contents_are_derived_for_older_bundles_and_must_agree_with_the_lists() {
        // A bundle made before manifests said what they carry: derived from its lists.
        let older = Manifest::parse(&with_git(None)).unwrap();
        assert_eq!(older.contents, None);
        let derived = Contents::of(&older);
        assert_eq!(derived.git_repositories, 1);
        assert_eq!(
            derived.git_hosts.iter().collect::<Vec<_>>(),
            ["git.example.com"]
        );
        assert_eq!(derived.provider_versions + derived.module_versions, 0);
        assert!(derived.published.is_empty() && derived.release_products.is_empty());
        // Written by export: parsed as it is.
        let said = Manifest::parse(&with_git(Some(derived.clone()))).unwrap();
        assert_eq!(said.contents.as_ref(), Some(&derived));
        // A summary that says otherwise than the lists is refused.
        let lying = Contents {
            git_hosts: ["elsewhere.example.com".to_string()].into(),
            ..derived
        };
        let refused = Manifest::parse(&with_git(Some(lying))).unwrap_err();
        assert!(refused.problem.contains("contents summary"), "{refused}");
    }

    /// What [`walk`] reports for `bundle`, refusing every payload.
    fn walk_problems(bundle: impl Read) -> Vec<BundleError> {
        let mut failed = Vec::new();
        walk(
            bundle,
            &mut failed,
            |_| Ok::<(), String>(()),
            |_, _| Err("no payload expected".to_string()),
        );
        failed
    }

    #[test]
    fn oversized_extension_headers_are_refused_unread() {
        use crate::tarball::tests::{EXTENSIONS, oversized_tar_gz, push};
        let manifest = format!(
            r#"{{"format":"{FORMAT}","format_version":{FORMAT_VERSION},"created_at":0,"versions":[]}}"#
        );
        let mut head = Vec::new();
        push(
            &mut head,
            tar::EntryType::Regular,
            MANIFEST_NAME,
            manifest.as_bytes(),
        );
        for (kind, extension) in EXTENSIONS {
            let problem = format!("{extension} of 16777216 bytes, more than 65536");
            for (head, entry) in [(&head[..], "tar entry 2"), (&[][..], "tar entry 1")] {
                let bundle = oversized_tar_gz(head, kind);
                let failed = walk_problems(flate2::read::GzDecoder::new(&bundle[..]));
                assert_eq!(failed, [BundleError::new(entry, &problem)], "{extension}");
            }
        }
    }

    #[tokio::test]
    async fn tar_writer_output_reads_back_with_the_tar_crate() {
        let mut w = TarWriter::new(Vec::new());
        w.append_bytes("a/b.json", b"{}").await.unwrap();
        let long = format!("{}/{}", "d".repeat(90), "f".repeat(90));
        let sha = w.append(&long, 3, &mut &b"xyz"[..]).await.unwrap();
        assert_eq!(sha, Sha256::of(b"xyz"));
        assert!(w.append("short", 5, &mut &b"xyz"[..]).await.is_err());
        let bytes = TarWriter::new(Vec::new()).finish().await.unwrap();
        assert_eq!(bytes.len(), 1024);

        let mut w = TarWriter::new(Vec::new());
        w.append_bytes("a/b.json", b"{}").await.unwrap();
        w.append(&long, 3, &mut &b"xyz"[..]).await.unwrap();
        let bytes = w.finish().await.unwrap();
        let mut archive = tar::Archive::new(&bytes[..]);
        let mut seen = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().to_string_lossy().to_string();
            let mut body = Vec::new();
            entry.read_to_end(&mut body).unwrap();
            seen.push((path, body));
        }
        assert_eq!(
            seen,
            [
                ("a/b.json".to_string(), b"{}".to_vec()),
                (long, b"xyz".to_vec())
            ]
        );
    }
}
