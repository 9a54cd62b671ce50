//! CLI releases: the `terraform` and `tofu` binaries as their vendors publish them, named and
//! checked the way the vendors name them.
//!
//! A release is a product, a version and, per platform, one zip named
//! `<product>_<version>_<os>_<arch>.zip` (OpenTofu also publishes each as `.tar.gz`), listed
//! with its SHA-256 in `<product>_<version>_SHA256SUMS`, which the vendor signs (checked by
//! `trust::Verifier::verify_release`). [`release_builds`] reads that list: only the builds of
//! the release it belongs to count, so a signed list cannot lend its signature to a file of
//! another product or version.
//!
//! The vendors' own documents that list releases are here too: HashiCorp's `index.json`
//! ([`HashicorpIndex`], [`HashicorpRelease`]) and OpenTofu's `api.json` ([`TofuIndex`]).

use std::collections::BTreeMap;
use std::fmt;

use crate::address::{Platform, Version};
use crate::hash::Sha256;

/// A CLI whose releases can be mirrored.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Product {
    /// HashiCorp's `terraform`, from releases.hashicorp.com.
    Terraform,
    /// OpenTofu's `tofu`, from its GitHub releases.
    Tofu,
}

impl Product {
    pub const ALL: [Product; 2] = [Product::Terraform, Product::Tofu];

    /// The name in file names and paths.
    pub fn as_str(self) -> &'static str {
        match self {
            Product::Terraform => "terraform",
            Product::Tofu => "tofu",
        }
    }

    pub fn parse(name: &str) -> Option<Product> {
        Product::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl fmt::Display for Product {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a release's build is packed. Every vendor publishes zips; OpenTofu also publishes
/// `.tar.gz` files, which are what its own downloader (tofudl) installs.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum Packing {
    #[default]
    #[serde(rename = "zip")]
    Zip,
    #[serde(rename = "tar.gz")]
    TarGz,
}

impl Packing {
    pub const ALL: [Packing; 2] = [Packing::Zip, Packing::TarGz];

    /// The file name's suffix: `.zip`, `.tar.gz`.
    pub fn suffix(self) -> &'static str {
        match self {
            Packing::Zip => ".zip",
            Packing::TarGz => ".tar.gz",
        }
    }

    pub fn is_zip(&self) -> bool {
        *self == Packing::Zip
    }
}

/// One platform's build of one release, packed one way (a zip unless said otherwise). Ordered
/// by product, version, platform, then packing.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReleaseKey {
    pub product: Product,
    pub version: Version,
    pub platform: Platform,
    pub packing: Packing,
}

impl ReleaseKey {
    /// `<product>_<version>_<os>_<arch>.zip` (or `.tar.gz`)
    pub fn filename(&self) -> String {
        format!(
            "{}_{}_{}{}",
            self.product,
            self.version,
            self.platform,
            self.packing.suffix()
        )
    }

    /// The release's build that `filename` names, if it is one of this product and version.
    pub fn from_filename(
        product: Product,
        version: &Version,
        filename: &str,
    ) -> Option<ReleaseKey> {
        let rest = filename.strip_prefix(&format!("{product}_{version}_"))?;
        Packing::ALL.into_iter().find_map(|packing| {
            let platform = rest.strip_suffix(packing.suffix())?;
            Some(ReleaseKey {
                product,
                version: version.clone(),
                platform: Platform::parse(platform).ok()?,
                packing,
            })
        })
    }
}

impl ReleaseKey {
    /// Which build of its release it is, for people: `linux_amd64`, `linux_amd64 (tar.gz)`.
    pub fn build_name(&self) -> String {
        match self.packing {
            Packing::Zip => self.platform.to_string(),
            Packing::TarGz => format!("{} (tar.gz)", self.platform),
        }
    }
}

impl fmt::Display for ReleaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.product, self.version, self.build_name())
    }
}

/// `<product>_<version>_SHA256SUMS`
pub fn sums_filename(product: Product, version: &Version) -> String {
    format!("{product}_{version}_SHA256SUMS")
}

/// The vendor's name for the detached signature of a release's SHA256SUMS (the first of
/// [`signature_suffixes`]).
pub fn signature_filename(product: Product, version: &Version) -> String {
    format!(
        "{}{}",
        sums_filename(product, version),
        signature_suffixes(product)[0]
    )
}

/// The names a release's SHA256SUMS signature goes by, after `<product>_<version>_SHA256SUMS`:
/// HashiCorp publishes the same signature as `.sig` and `.<key id>.sig`, OpenTofu as `.gpgsig`.
pub fn signature_suffixes(product: Product) -> &'static [&'static str] {
    match product {
        Product::Terraform => &[".sig", ".72D7468F.sig"],
        Product::Tofu => &[".gpgsig"],
    }
}

/// A file of a release that the mirror serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseFile {
    /// `<product>_<version>_SHA256SUMS`
    Sums,
    /// Its detached signature, under any of the names installers ask for.
    Signature,
    /// One platform's build: its zip, or its `.tar.gz`.
    Build(ReleaseKey),
}

impl ReleaseFile {
    /// The file `name` of `product` `version`, if the mirror serves such a file.
    pub fn parse(product: Product, version: &Version, name: &str) -> Option<ReleaseFile> {
        let sums = sums_filename(product, version);
        if name == sums {
            return Some(ReleaseFile::Sums);
        }
        if let Some(suffix) = name.strip_prefix(&sums) {
            let signature = signature_suffixes(product).contains(&suffix);
            return signature.then_some(ReleaseFile::Signature);
        }
        ReleaseKey::from_filename(product, version, name).map(ReleaseFile::Build)
    }
}

/// What is wrong with a release's SHA256SUMS.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReleaseSumsError {
    #[error("SHA256SUMS is not UTF-8 text")]
    NotText,
    #[error("SHA256SUMS line {line} is not `<sha256>  <file>`")]
    Malformed { line: usize },
    #[error("SHA256SUMS line {line} names {file}, which is not a file of {product} {version}")]
    ForeignFile {
        line: usize,
        file: String,
        product: Product,
        version: String,
    },
    #[error("SHA256SUMS lists {file} twice")]
    Duplicate { file: String },
    #[error("SHA256SUMS lists no zip of {product} {version}")]
    NoZips { product: Product, version: String },
}

/// Every platform's build that a release's SHA256SUMS lists (each with its SHA-256): the zips
/// and, where the vendor publishes them, the `.tar.gz` files.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReleaseBuilds {
    /// Each platform's zip.
    pub zips: BTreeMap<Platform, Sha256>,
    /// Each platform's `.tar.gz`, where the vendor publishes them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tarballs: BTreeMap<Platform, Sha256>,
}

impl ReleaseBuilds {
    /// The builds packed one way.
    pub fn of(&self, packing: Packing) -> &BTreeMap<Platform, Sha256> {
        match packing {
            Packing::Zip => &self.zips,
            Packing::TarGz => &self.tarballs,
        }
    }

    fn of_mut(&mut self, packing: Packing) -> &mut BTreeMap<Platform, Sha256> {
        match packing {
            Packing::Zip => &mut self.zips,
            Packing::TarGz => &mut self.tarballs,
        }
    }
}

/// The SHA-256 of every platform's build that a release's SHA256SUMS lists. Every line must
/// name a file of this product and version (`<product>_<version>_...`): the list is signed as a
/// whole, and a line for anything else is a sign of a mixed-up or forged list. Lines for the
/// release's other files (packages, manifests) are read and left out. A release must list at
/// least one zip.
pub fn release_builds(
    product: Product,
    version: &Version,
    sums: &[u8],
) -> Result<ReleaseBuilds, ReleaseSumsError> {
    let text = std::str::from_utf8(sums).map_err(|_| ReleaseSumsError::NotText)?;
    let prefix = format!("{product}_{version}_");
    let mut builds = ReleaseBuilds::default();
    let mut seen = std::collections::BTreeSet::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let malformed = ReleaseSumsError::Malformed { line: line_no };
        let (hash, rest) = line.split_once(' ').ok_or(malformed.clone())?;
        let file = rest
            .strip_prefix(' ')
            .or_else(|| rest.strip_prefix('*'))
            .ok_or(malformed.clone())?;
        let sha256 = Sha256::parse(&hash.to_ascii_lowercase()).map_err(|_| malformed)?;
        if !file.starts_with(&prefix) || file.contains(['/', '\\']) {
            return Err(ReleaseSumsError::ForeignFile {
                line: line_no,
                file: file.to_string(),
                product,
                version: version.to_string(),
            });
        }
        if !seen.insert(file.to_string()) {
            return Err(ReleaseSumsError::Duplicate {
                file: file.to_string(),
            });
        }
        if let Some(key) = ReleaseKey::from_filename(product, version, file) {
            builds.of_mut(key.packing).insert(key.platform, sha256);
        }
    }
    if builds.zips.is_empty() {
        return Err(ReleaseSumsError::NoZips {
            product,
            version: version.to_string(),
        });
    }
    Ok(builds)
}

/// What is recorded of a release once its SHA256SUMS verified: stored as
/// `releases/<product>/<version>/release.json`, written after the SHA256SUMS and signature
/// copies it vouches for (the commit point).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReleaseRecord {
    pub product: Product,
    pub version: Version,
    /// Each platform's builds and their SHA-256, from the verified SHA256SUMS.
    #[serde(flatten)]
    pub builds: ReleaseBuilds,
    /// The long ID of the vendor key that signed the SHA256SUMS.
    pub signed_by: String,
    /// When it was fetched from the origin (Unix seconds).
    pub fetched_at: u64,
}

impl ReleaseRecord {
    /// The signed SHA-256 of one of its builds, if the release has it.
    pub fn sha256_of(&self, key: &ReleaseKey) -> Option<&Sha256> {
        self.builds.of(key.packing).get(&key.platform)
    }

    /// Every build it lists, with its signed SHA-256: zips, then `.tar.gz` files.
    pub fn all_builds(&self) -> impl Iterator<Item = (ReleaseKey, &Sha256)> {
        Packing::ALL
            .into_iter()
            .flat_map(|packing| self.builds.of(packing).iter().map(move |b| (packing, b)))
            .map(|(packing, (platform, sha256))| {
                let key = ReleaseKey {
                    product: self.product,
                    version: self.version.clone(),
                    platform: platform.clone(),
                    packing,
                };
                (key, sha256)
            })
    }
}

/// What is recorded of a stored release build, zip or `.tar.gz` (its commit point).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReleaseZip {
    pub sha256: Sha256,
    pub size: u64,
}

/// A product's releases as its vendor lists them (HashiCorp's `index.json`, OpenTofu's
/// `api.json`), as the store keeps them: `releases/<product>/index.json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReleaseList {
    pub product: Product,
    /// When the origin answered (Unix seconds).
    pub fetched_at: u64,
    /// Whether the origin listed the product at all.
    pub found: bool,
    /// Each release's version and the files it has, newest last as the vendor lists them.
    pub releases: Vec<ListedRelease>,
    /// When this mirror first saw each release (for a cooldown, `policy.min_age`).
    #[serde(default, skip_serializing_if = "super::FirstSeen::is_unset")]
    pub seen: super::FirstSeen,
}

/// One release in a [`ReleaseList`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ListedRelease {
    pub version: Version,
    /// File names, as the vendor lists them.
    pub files: Vec<String>,
}

impl ReleaseList {
    /// From HashiCorp's `index.json` of `product`: each version's builds, SHA256SUMS and
    /// signatures. Versions that are not valid versions are left out.
    pub fn from_hashicorp(product: Product, index: HashicorpIndex, now: u64) -> ReleaseList {
        let mut releases: Vec<ListedRelease> = index
            .versions
            .into_values()
            .filter_map(|r| {
                let version = Version::parse(&r.version).ok()?;
                let mut files: Vec<String> = r.builds.into_iter().map(|b| b.filename).collect();
                files.push(r.shasums);
                files.extend(r.shasums_signatures);
                files.extend(r.shasums_signature);
                files.dedup();
                Some(ListedRelease { version, files })
            })
            .collect();
        releases.sort_by(|a, b| a.version.cmp(&b.version));
        ReleaseList {
            product,
            fetched_at: now,
            found: true,
            releases,
            seen: Default::default(),
        }
    }

    /// From OpenTofu's `api.json`.
    pub fn from_tofu(index: TofuIndex, now: u64) -> ReleaseList {
        let mut releases: Vec<ListedRelease> = index
            .versions
            .into_iter()
            .filter_map(|r| {
                Some(ListedRelease {
                    version: Version::parse(&r.id).ok()?,
                    files: r.files,
                })
            })
            .collect();
        releases.sort_by(|a, b| a.version.cmp(&b.version));
        ReleaseList {
            product: Product::Tofu,
            fetched_at: now,
            found: true,
            releases,
            seen: Default::default(),
        }
    }

    /// HashiCorp's `index.json` entry of one release, its file URLs under `base` (the mirror's
    /// `releases/<product>/`).
    pub fn hashicorp_release(&self, release: &ListedRelease, base: &str) -> HashicorpRelease {
        let (product, version) = (self.product, &release.version);
        let sums = sums_filename(product, version);
        // The signatures this mirror serves, under the names the vendor lists.
        let signatures: Vec<String> = release
            .files
            .iter()
            .filter(|f| ReleaseFile::parse(product, version, f) == Some(ReleaseFile::Signature))
            .cloned()
            .collect();
        HashicorpRelease {
            name: product.to_string(),
            version: version.to_string(),
            shasums: sums.clone(),
            shasums_signature: signatures
                .iter()
                .find(|f| **f == format!("{sums}.sig"))
                .cloned(),
            shasums_signatures: signatures,
            builds: release
                .files
                .iter()
                .filter_map(|f| ReleaseKey::from_filename(product, version, f))
                .map(|key| HashicorpBuild {
                    name: product.to_string(),
                    version: version.to_string(),
                    os: key.platform.os.clone(),
                    arch: key.platform.arch.clone(),
                    url: format!("{base}{version}/{}", key.filename()),
                    filename: key.filename(),
                })
                .collect(),
        }
    }

    /// HashiCorp's `index.json` of the whole product.
    pub fn hashicorp_index(&self, base: &str) -> HashicorpIndex {
        HashicorpIndex {
            name: self.product.to_string(),
            versions: self
                .releases
                .iter()
                .map(|r| (r.version.to_string(), self.hashicorp_release(r, base)))
                .collect(),
        }
    }

    /// OpenTofu's `api.json`, newest first as OpenTofu lists it; each release's `files` only
    /// those the mirror serves ([`served_files`](Self::served_files)), in the vendor's order.
    pub fn tofu_index(&self) -> TofuIndex {
        TofuIndex {
            versions: self
                .releases
                .iter()
                .rev()
                .map(|r| TofuRelease {
                    id: r.version.to_string(),
                    files: self.served_files(r),
                })
                .collect(),
        }
    }
}

/// One entry of a GitHub-releases-API-shaped list (`GET /repos/<owner>/<repo>/releases`), the
/// fields tofuenv reads of it (`name`, `v<version>`) and those scripts commonly filter on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GithubRelease {
    pub name: String,
    pub tag_name: String,
    pub prerelease: bool,
    pub draft: bool,
}

impl ReleaseList {
    /// The release `version`, if the list has it.
    pub fn release(&self, version: &Version) -> Option<&ListedRelease> {
        self.releases.iter().find(|r| &r.version == version)
    }

    /// Every release as GitHub's releases API lists OpenTofu's: newest first, named `v<version>`.
    pub fn github_releases(&self) -> Vec<GithubRelease> {
        self.releases
            .iter()
            .rev()
            .map(|r| {
                let tag = format!("v{}", r.version);
                GithubRelease {
                    name: tag.clone(),
                    tag_name: tag,
                    prerelease: r.version.prerelease().is_some(),
                    draft: false,
                }
            })
            .collect()
    }

    /// The files of `release` that the mirror serves (its builds, SHA256SUMS and signatures),
    /// each once, in the vendor's order. The vendor's list is unsigned: a name of another
    /// product or version, or one that is not a plain file name, is left out here, so that no
    /// document rendered from the list names a file the mirror would not serve (the one rule,
    /// [`ReleaseFile::parse`], that routes also go by).
    pub fn served_files(&self, release: &ListedRelease) -> Vec<String> {
        let (product, version) = (self.product, &release.version);
        let mut files: Vec<String> = Vec::new();
        for file in &release.files {
            if ReleaseFile::parse(product, version, file).is_some() && !files.contains(file) {
                files.push(file.clone());
            }
        }
        files
    }
}

/// HashiCorp's `<base>/<product>/index.json`: every release of a product.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HashicorpIndex {
    pub name: String,
    pub versions: BTreeMap<String, HashicorpRelease>,
}

/// HashiCorp's `<base>/<product>/<version>/index.json`, and each entry of the product's index.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HashicorpRelease {
    pub name: String,
    pub version: String,
    pub shasums: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shasums_signature: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shasums_signatures: Vec<String>,
    pub builds: Vec<HashicorpBuild>,
}

/// One file of a HashiCorp release.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HashicorpBuild {
    pub name: String,
    pub version: String,
    pub os: String,
    pub arch: String,
    pub filename: String,
    pub url: String,
}

/// OpenTofu's `api.json` (get.opentofu.org/tofu/api.json): every release and its files.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TofuIndex {
    pub versions: Vec<TofuRelease>,
}

/// One release in OpenTofu's `api.json`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TofuRelease {
    pub id: String,
    pub files: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    #[test]
    fn builds_are_read_by_platform_and_other_files_of_the_release_left_out() {
        let sums = format!(
            "{A}  tofu_1.8.0_linux_amd64.zip\n{B}  tofu_1.8.0_darwin_arm64.zip\n\
             {A}  tofu_1.8.0_linux_amd64.tar.gz\n{B}  tofu_1.8.0_amd64.deb\n"
        );
        let builds = release_builds(Product::Tofu, &v("1.8.0"), sums.as_bytes()).unwrap();
        let zips = &builds.zips;
        assert_eq!(zips.len(), 2);
        assert_eq!(zips[&Platform::parse("linux_amd64").unwrap()].as_str(), A);
        assert_eq!(zips[&Platform::parse("darwin_arm64").unwrap()].as_str(), B);
        assert_eq!(builds.tarballs.len(), 1);
        assert_eq!(
            builds.tarballs[&Platform::parse("linux_amd64").unwrap()].as_str(),
            A
        );
    }

    #[test]
    fn a_list_with_files_of_another_release_is_refused() {
        for line in [
            format!("{A}  terraform_1.8.0_linux_amd64.zip"),
            format!("{A}  tofu_1.8.1_linux_amd64.zip"),
            format!("{A}  tofu_1.8.0_/../x.zip"),
        ] {
            let sums = format!("{B}  tofu_1.8.0_linux_amd64.zip\n{line}\n");
            let err = release_builds(Product::Tofu, &v("1.8.0"), sums.as_bytes()).unwrap_err();
            assert!(
                matches!(err, ReleaseSumsError::ForeignFile { line: 2, .. }),
                "{err}"
            );
        }
    }

    #[test]
    fn malformed_duplicate_and_empty_lists_are_refused() {
        let bad = [
            ("tofu_1.8.0_linux_amd64.zip\n".to_string(), "line 1"),
            (
                format!("{}  tofu_1.8.0_linux_amd64.zip\n", &A[1..]),
                "line 1",
            ),
            (
                format!("{A}  tofu_1.8.0_linux_amd64.zip\n{B}  tofu_1.8.0_linux_amd64.zip\n"),
                "twice",
            ),
            (format!("{A}  tofu_1.8.0_amd64.deb\n"), "no zip"),
        ];
        for (sums, says) in bad {
            let err = release_builds(Product::Tofu, &v("1.8.0"), sums.as_bytes()).unwrap_err();
            assert!(err.to_string().contains(says), "{err}");
        }
        assert_eq!(
            release_builds(Product::Tofu, &v("1.8.0"), b"\xff"),
            Err(ReleaseSumsError::NotText)
        );
    }

    #[test]
    fn file_names_round_trip() {
        let key = ReleaseKey {
            product: Product::Terraform,
            version: v("1.11.4"),
            platform: Platform::parse("linux_arm64").unwrap(),
            packing: Packing::Zip,
        };
        assert_eq!(key.filename(), "terraform_1.11.4_linux_arm64.zip");
        assert_eq!(
            ReleaseKey::from_filename(Product::Terraform, &v("1.11.4"), &key.filename()),
            Some(key)
        );
        assert_eq!(
            sums_filename(Product::Terraform, &v("1.11.4")),
            "terraform_1.11.4_SHA256SUMS"
        );
        assert_eq!(
            ReleaseKey::from_filename(
                Product::Tofu,
                &v("1.11.4"),
                "terraform_1.11.4_linux_arm64.zip"
            ),
            None
        );
    }

    #[test]
    fn api_json_names_only_files_the_mirror_serves() {
        let hostile = [
            "tofu_1.8.0_linux_amd64.zip",
            "tofu_1.8.0_SHA256SUMS",
            "tofu_1.8.0_SHA256SUMS.gpgsig",
            "terraform_1.8.0_linux_amd64.zip",
            "tofu_1.8.1_linux_amd64.zip",
            "tofu_1.8.0_linux_amd64.zip/../../../etc/passwd",
            "../tofu_1.8.0_linux_amd64.zip",
            "tofu_1.8.0_../linux_amd64.zip",
            "tofu_1.8.0_linux_amd64.zip?x=1",
            "https://evil.example/tofu_1.8.0_linux_amd64.zip",
            "tofu_1.8.0_SHA256SUMS.sig.exe",
            "tofu_1.8.0_linux_amd64.tar.gz",
            "tofu_1.8.0_linux_amd64.zip",
        ];
        let index = TofuIndex {
            versions: vec![TofuRelease {
                id: "1.8.0".into(),
                files: hostile.iter().map(|f| f.to_string()).collect(),
            }],
        };
        let served = ReleaseList::from_tofu(index, 0).tofu_index();
        assert_eq!(
            served.versions[0].files,
            [
                "tofu_1.8.0_linux_amd64.zip",
                "tofu_1.8.0_SHA256SUMS",
                "tofu_1.8.0_SHA256SUMS.gpgsig",
                "tofu_1.8.0_linux_amd64.tar.gz",
            ],
            "only this release's files, each once, in the vendor's order"
        );
    }

    #[test]
    fn the_vendors_documents_parse() {
        let hashicorp = r#"{"name":"terraform","versions":{"1.11.4":{"name":"terraform","version":"1.11.4",
            "shasums":"terraform_1.11.4_SHA256SUMS","shasums_signature":"terraform_1.11.4_SHA256SUMS.sig",
            "shasums_signatures":["terraform_1.11.4_SHA256SUMS.72D7468F.sig","terraform_1.11.4_SHA256SUMS.sig"],
            "builds":[{"name":"terraform","version":"1.11.4","os":"linux","arch":"amd64",
            "filename":"terraform_1.11.4_linux_amd64.zip",
            "url":"https://releases.hashicorp.com/terraform/1.11.4/terraform_1.11.4_linux_amd64.zip"}]}}}"#;
        let index: HashicorpIndex = serde_json::from_str(hashicorp).unwrap();
        let release = &index.versions["1.11.4"];
        assert_eq!(
            release.builds[0].filename,
            "terraform_1.11.4_linux_amd64.zip"
        );
        assert_eq!(release.shasums_signatures.len(), 2);
        let tofu = r#"{"versions":[{"id":"1.8.0","files":["tofu_1.8.0_linux_amd64.zip","tofu_1.8.0_SHA256SUMS"]}]}"#;
        let index: TofuIndex = serde_json::from_str(tofu).unwrap();
        assert_eq!(index.versions[0].id, "1.8.0");
    }
}
