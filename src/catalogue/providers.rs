//! The provider views: every cached provider, its versions and their platforms, and the
//! search and filters of the providers page and `GET -/api/v1/providers`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use futures_util::StreamExt;

use serde::Serialize;

use super::{API_VERSION, secs};
use crate::address::{Platform, ProviderAddr, Version};
use crate::error::Result;
use crate::hash;
use crate::mirror::Core;
use crate::records::{SignatureKind, VersionRecord};

/// One provider with the versions of it the cache holds archives of, newest first.
#[derive(Debug, Clone, Serialize)]
pub struct ProviderEntry {
    /// `registry.terraform.io/hashicorp/aws`.
    pub source: String,
    pub hostname: String,
    pub namespace: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub versions: Vec<VersionEntry>,
}

/// One cached version of a provider.
#[derive(Debug, Clone, Serialize)]
pub struct VersionEntry {
    pub version: String,
    /// The weakest trust level among its platforms (`official`, `partner`, `community`,
    /// `unsigned`, `unverified`).
    pub trust: &'static str,
    /// Long ID of the key that signed its SHA256SUMS, when signed.
    pub signing_key: Option<String>,
    /// When its download metadata was fetched from the origin (Unix seconds).
    pub fetched_at: Option<u64>,
    /// Whether every platform it offers has an `h1:` hash (lock files list all of them).
    pub complete_hashes: bool,
    pub platforms: Vec<PlatformEntry>,
}

/// One platform of a version: the verified package, and the archive if it is cached.
#[derive(Debug, Clone, Serialize)]
pub struct PlatformEntry {
    /// `linux_amd64`.
    pub platform: String,
    pub sha256: Option<String>,
    pub h1: Option<String>,
    pub zh: Option<String>,
    /// Whether the archive itself is in the cache.
    pub cached: bool,
    pub size: Option<u64>,
    /// When the archive was last served or stored (Unix seconds).
    pub last_used: Option<u64>,
    /// Where the origin offered it (absent for an archive imported without its origin's
    /// download metadata).
    pub origin_url: Option<String>,
}

impl VersionEntry {
    /// The platforms whose archives are cached.
    pub fn cached(&self) -> impl Iterator<Item = &PlatformEntry> {
        self.platforms.iter().filter(|p| p.cached)
    }
}

impl ProviderEntry {
    fn summary(&self) -> ProviderSummary {
        let mut trust: Vec<&'static str> = Vec::new();
        for level in SignatureKind::ALL.iter().rev().map(|k| k.as_str()) {
            if self.versions.iter().any(|v| v.trust == level) {
                trust.push(level);
            }
        }
        let cached = || self.versions.iter().flat_map(VersionEntry::cached);
        let platforms: BTreeSet<&str> = cached().map(|p| p.platform.as_str()).collect();
        ProviderSummary {
            source: self.source.clone(),
            hostname: self.hostname.clone(),
            namespace: self.namespace.clone(),
            type_: self.type_.clone(),
            versions: self.versions.len(),
            latest: self.versions.first().map(|v| v.version.clone()),
            trust,
            platforms: platforms.into_iter().map(str::to_string).collect(),
            complete_hashes: self.versions.iter().all(|v| v.complete_hashes),
            size: cached().filter_map(|p| p.size).sum(),
            last_used: cached().filter_map(|p| p.last_used).max(),
        }
    }
}

/// `GET -/api/v1/providers`: the providers a query selects.
#[derive(Debug, Clone, Serialize)]
pub struct ProviderList {
    pub api_version: u32,
    /// How many providers the cache holds.
    pub total: usize,
    pub providers: Vec<ProviderSummary>,
    /// The values each filter can take, from every cached provider.
    pub choices: Choices,
}

/// One provider in a list.
#[derive(Debug, Clone, Serialize)]
pub struct ProviderSummary {
    pub source: String,
    pub hostname: String,
    pub namespace: String,
    #[serde(rename = "type")]
    pub type_: String,
    /// How many versions have archives cached.
    pub versions: usize,
    /// The newest of them.
    pub latest: Option<String>,
    /// The trust levels among them, strongest first.
    pub trust: Vec<&'static str>,
    /// The platforms with archives cached, of any version.
    pub platforms: Vec<String>,
    /// Whether every version has every platform's `h1:`.
    pub complete_hashes: bool,
    /// Bytes of cached archives.
    pub size: u64,
    /// When any of its archives was last used (Unix seconds).
    pub last_used: Option<u64>,
}

/// The values the filters can take.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Choices {
    pub hostnames: Vec<String>,
    pub namespaces: Vec<String>,
    pub trust: Vec<&'static str>,
    pub platforms: Vec<String>,
}

/// What the providers page and `GET -/api/v1/providers` are asked for; every part optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderQuery {
    /// A part of the source address (`aws`, `hashicorp/`), any case.
    pub q: String,
    pub hostname: String,
    pub namespace: String,
    /// Has a version at this trust level.
    pub trust: String,
    /// Has an archive cached for this platform.
    pub platform: String,
}

impl ProviderQuery {
    /// Reads `q`, `hostname`, `namespace`, `trust` and `platform` from a query string (other
    /// keys are left to the caller; a repeated key keeps its last value).
    pub fn parse(query: Option<&str>) -> ProviderQuery {
        let mut out = ProviderQuery::default();
        for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            let value = value.trim().to_string();
            match &*key {
                "q" => out.q = value,
                "hostname" => out.hostname = value,
                "namespace" => out.namespace = value,
                "trust" => out.trust = value,
                "platform" => out.platform = value,
                _ => {}
            }
        }
        out
    }

    /// Whether nothing is asked for.
    pub fn is_empty(&self) -> bool {
        *self == ProviderQuery::default()
    }

    fn selects(&self, p: &ProviderSummary) -> bool {
        let q = self.q.to_lowercase();
        (q.is_empty() || p.source.to_lowercase().contains(&q))
            && (self.hostname.is_empty() || p.hostname == self.hostname)
            && (self.namespace.is_empty() || p.namespace == self.namespace)
            && (self.trust.is_empty() || p.trust.contains(&self.trust.as_str()))
            && (self.platform.is_empty() || p.platforms.contains(&self.platform))
    }
}

impl ProviderList {
    /// The summaries a query selects, among `all` (see [`summaries`]).
    pub(super) fn of(
        all: &[ProviderSummary],
        choices: &Choices,
        query: &ProviderQuery,
    ) -> ProviderList {
        ProviderList {
            api_version: API_VERSION,
            total: all.len(),
            providers: all.iter().filter(|p| query.selects(p)).cloned().collect(),
            choices: choices.clone(),
        }
    }
}

/// Each provider's summary, and the values the filters can take.
pub(super) fn summaries(all: &[ProviderEntry]) -> (Vec<ProviderSummary>, Choices) {
    let mut hostnames = BTreeSet::new();
    let mut namespaces = BTreeSet::new();
    let mut platforms = BTreeSet::new();
    let mut trust = BTreeSet::new();
    let summaries: Vec<ProviderSummary> = all
        .iter()
        .map(|p| {
            let summary = p.summary();
            hostnames.insert(p.hostname.clone());
            namespaces.insert(p.namespace.clone());
            platforms.extend(summary.platforms.iter().cloned());
            trust.extend(
                summary
                    .trust
                    .iter()
                    .filter_map(|l| l.parse::<SignatureKind>().ok()),
            );
            summary
        })
        .collect();
    let choices = Choices {
        hostnames: hostnames.into_iter().collect(),
        namespaces: namespaces.into_iter().collect(),
        trust: trust.into_iter().rev().map(SignatureKind::as_str).collect(),
        platforms: platforms.into_iter().collect(),
    };
    (summaries, choices)
}

/// `GET -/api/v1/providers/<hostname>/<namespace>/<type>`.
#[derive(Debug, Clone, Serialize)]
pub struct Provider {
    pub api_version: u32,
    pub provider: ProviderEntry,
}

/// `GET -/api/v1/providers/<hostname>/<namespace>/<type>/<version>`.
#[derive(Debug, Clone, Serialize)]
pub struct VersionView {
    pub api_version: u32,
    pub source: String,
    pub hostname: String,
    pub namespace: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub version: VersionEntry,
    /// Who published it here, when and what, for a version of a private namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published: Option<super::PublishedEntry>,
}

impl VersionView {
    pub(super) fn of(
        provider: &ProviderEntry,
        version: &VersionEntry,
        published: Option<super::PublishedEntry>,
    ) -> VersionView {
        VersionView {
            api_version: API_VERSION,
            source: provider.source.clone(),
            hostname: provider.hostname.clone(),
            namespace: provider.namespace.clone(),
            type_: provider.type_.clone(),
            version: version.clone(),
            published,
        }
    }
}

/// Version records as last read, with the stamp (write time, size) they had then.
pub(super) type Known = HashMap<(ProviderAddr, Version), ((SystemTime, u64), Arc<VersionRecord>)>;

/// How many version records are read at once.
const READS: usize = 32;

/// Every provider with committed archives in the cache, by source, each version (newest first)
/// with every platform its verified record describes: one listing of the archives, one of the
/// records, and a read of each record that is new or was written again since `known` has it.
pub(super) async fn scan(core: &Core, known: &mut Known) -> Result<Vec<ProviderEntry>> {
    type Archives = BTreeMap<Platform, (u64, SystemTime)>;
    let mut cached: BTreeMap<(ProviderAddr, Version), Archives> = BTreeMap::new();
    for entry in core.archives().committed().await? {
        let used = entry.last_use();
        cached
            .entry((entry.key.addr, entry.key.version))
            .or_default()
            .insert(entry.key.platform, (entry.size, used));
    }
    let stamps = core.meta().version_stamps().await?;
    known.retain(|key, (stamp, _)| stamps.get(key) == Some(stamp) && cached.contains_key(key));
    let unread: Vec<_> = cached
        .keys()
        .filter(|key| !known.contains_key(*key))
        .filter_map(|key| Some((key.clone(), *stamps.get(key)?)))
        .collect();
    let read: Vec<_> = futures_util::stream::iter(unread)
        .map(|(key, stamp)| async move {
            let record = core.meta().read_version(&key.0, &key.1).await;
            (key, stamp, record)
        })
        .buffer_unordered(READS)
        .collect()
        .await;
    for (key, stamp, record) in read {
        if let Some(record) = record {
            known.insert(key, (stamp, Arc::new(record)));
        }
    }
    let mut providers: BTreeMap<ProviderAddr, Vec<VersionEntry>> = BTreeMap::new();
    for (key, archives) in cached {
        let record = known.get(&key).map(|(_, r)| r.as_ref());
        let entry = version_entry(&key.1, record, &archives);
        providers.entry(key.0).or_default().push(entry);
    }
    Ok(providers
        .into_iter()
        .map(|(addr, mut versions)| {
            versions.reverse();
            ProviderEntry {
                source: addr.to_string(),
                hostname: addr.hostname.to_string(),
                namespace: addr.namespace.clone(),
                type_: addr.type_.clone(),
                versions,
            }
        })
        .collect())
}

/// A version as its record describes it, with what of it is cached.
fn version_entry(
    version: &Version,
    record: Option<&VersionRecord>,
    archives: &BTreeMap<Platform, (u64, SystemTime)>,
) -> VersionEntry {
    let mut platforms: BTreeMap<Platform, PlatformEntry> = BTreeMap::new();
    if let Some(rec) = record {
        for (platform, pkg) in &rec.packages {
            platforms.insert(
                platform.clone(),
                PlatformEntry {
                    platform: platform.to_string(),
                    sha256: Some(pkg.shasum.to_string()),
                    h1: pkg.h1.as_ref().map(|h| h.to_string()),
                    zh: Some(hash::zh(&pkg.shasum)),
                    cached: false,
                    size: pkg.size,
                    last_used: None,
                    origin_url: pkg.download_url.clone(),
                },
            );
        }
    }
    for (platform, (size, used)) in archives {
        let entry = platforms
            .entry(platform.clone())
            .or_insert_with(|| PlatformEntry {
                platform: platform.to_string(),
                sha256: None,
                h1: None,
                zh: None,
                cached: false,
                size: None,
                last_used: None,
                origin_url: None,
            });
        entry.cached = true;
        entry.size = Some(*size);
        entry.last_used = Some(secs(*used));
    }
    let trust = record.map(|r| r.weakest_trust());
    let signing_key = record.and_then(|r| {
        r.sums
            .iter()
            .find_map(|s| s.trust.as_ref().and_then(|t| t.key_id.clone()))
    });
    let platforms: Vec<PlatformEntry> = platforms.into_values().collect();
    VersionEntry {
        version: version.to_string(),
        trust: trust.map_or("unverified", |t| t.as_str()),
        signing_key,
        fetched_at: record.map(|r| r.fetched_at),
        complete_hashes: !platforms.is_empty() && platforms.iter().all(|p| p.h1.is_some()),
        platforms,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::hash::{H1, Sha256};
    use crate::records::{Package, SignatureKind, SumsRef, Trust};

    fn platform(s: &str) -> Platform {
        Platform::parse(s).unwrap()
    }

    fn package(content: &[u8], h1: Option<&H1>) -> Package {
        Package {
            protocols: vec!["5.0".into()],
            filename: "terraform-provider-foo_1.0.0_linux_amd64.zip".into(),
            download_url: Some("https://example.com/a.zip".into()),
            shasum: Sha256::of(content),
            shasums_url: Some("https://example.com/SHA256SUMS".into()),
            shasums_signature_url: Some("https://example.com/SHA256SUMS.sig".into()),
            signing_keys: Vec::new(),
            h1: h1.cloned(),
            size: Some(content.len() as u64),
            reported_h1: None,
        }
    }

    fn record(packages: Vec<(&str, Package)>) -> VersionRecord {
        VersionRecord {
            fetched_at: 1_700_000_000,
            offered: packages.iter().map(|(p, _)| platform(p)).collect(),
            unavailable: Vec::new(),
            packages: packages
                .into_iter()
                .map(|(p, k)| (platform(p), k))
                .collect(),
            sums: vec![SumsRef {
                url: "https://example.com/SHA256SUMS".into(),
                signature_url: "https://example.com/SHA256SUMS.sig".into(),
                trust: Some(Trust {
                    kind: SignatureKind::Community,
                    key_id: Some("0123456789ABCDEF".into()),
                }),
            }],
            rendered: Default::default(),
        }
    }

    #[test]
    fn a_version_lists_every_platform_of_its_record_and_marks_the_cached_ones() {
        let h1 = H1::parse("h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=").unwrap();
        let rec = record(vec![
            ("linux_amd64", package(b"linux", Some(&h1))),
            ("darwin_arm64", package(b"darwin", None)),
        ]);
        let used = std::time::UNIX_EPOCH + Duration::from_secs(1_700_000_100);
        let archives = BTreeMap::from([(platform("linux_amd64"), (5, used))]);
        let v = version_entry(&Version::parse("1.0.0").unwrap(), Some(&rec), &archives);
        assert_eq!(v.version, "1.0.0");
        assert_eq!(v.trust, "community");
        assert_eq!(v.signing_key.as_deref(), Some("0123456789ABCDEF"));
        assert_eq!(v.fetched_at, Some(1_700_000_000));
        assert!(!v.complete_hashes, "darwin has no h1:");
        let names: Vec<&str> = v.platforms.iter().map(|p| p.platform.as_str()).collect();
        assert_eq!(names, ["darwin_arm64", "linux_amd64"]);
        let (darwin, linux) = (&v.platforms[0], &v.platforms[1]);
        assert!(linux.cached && !darwin.cached);
        assert_eq!(linux.last_used, Some(1_700_000_100));
        assert_eq!(linux.h1.as_deref(), Some(h1.as_str()));
        assert_eq!(
            darwin.zh.as_deref(),
            Some(hash::zh(&Sha256::of(b"darwin")).as_str())
        );
        assert_eq!(darwin.size, Some(6), "the size the origin stated");
    }

    #[test]
    fn an_archive_without_its_version_record_is_listed_as_unverified() {
        let archives = BTreeMap::from([(
            platform("linux_amd64"),
            (7, std::time::UNIX_EPOCH + Duration::from_secs(5)),
        )]);
        let v = version_entry(&Version::parse("2.0.0").unwrap(), None, &archives);
        assert_eq!(v.trust, "unverified");
        assert_eq!(v.fetched_at, None);
        assert!(!v.complete_hashes);
        assert_eq!(v.platforms.len(), 1);
        assert!(v.platforms[0].cached && v.platforms[0].sha256.is_none());
    }

    fn provider(source: &str, versions: &[(&str, &'static str, &[&str])]) -> ProviderEntry {
        let addr = ProviderAddr::parse(source).unwrap();
        ProviderEntry {
            source: addr.to_string(),
            hostname: addr.hostname.to_string(),
            namespace: addr.namespace.clone(),
            type_: addr.type_.clone(),
            versions: versions
                .iter()
                .map(|(version, trust, cached)| VersionEntry {
                    version: version.to_string(),
                    trust,
                    signing_key: None,
                    fetched_at: None,
                    complete_hashes: true,
                    platforms: cached
                        .iter()
                        .map(|p| PlatformEntry {
                            platform: p.to_string(),
                            sha256: None,
                            h1: None,
                            zh: None,
                            cached: true,
                            size: Some(10),
                            last_used: Some(5),
                            origin_url: None,
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn the_list_summarises_and_every_filter_selects() {
        let all = [
            provider(
                "registry.terraform.io/hashicorp/aws",
                &[
                    ("5.1.0", "official", &["linux_amd64", "darwin_arm64"]),
                    ("5.0.0", "official", &["linux_amd64"]),
                ],
            ),
            provider(
                "registry.opentofu.org/acme/thing",
                &[("0.1.0", "unverified", &["windows_amd64"])],
            ),
        ];
        let (summaries, choices) = summaries(&all);
        let list = ProviderList::of(&summaries, &choices, &ProviderQuery::default());
        assert_eq!(list.total, 2);
        let aws = &list.providers[0];
        assert_eq!((aws.versions, aws.latest.as_deref()), (2, Some("5.1.0")));
        assert_eq!(aws.platforms, ["darwin_arm64", "linux_amd64"]);
        assert_eq!(aws.size, 30);
        assert_eq!(
            list.choices.trust,
            ["official", "unverified"],
            "strongest first"
        );
        assert_eq!(list.choices.namespaces, ["acme", "hashicorp"]);
        let selected = |query: &str| -> Vec<String> {
            ProviderList::of(&summaries, &choices, &ProviderQuery::parse(Some(query)))
                .providers
                .into_iter()
                .map(|p| p.type_)
                .collect()
        };
        assert_eq!(selected("q=AWS"), ["aws"]);
        assert_eq!(selected("q=opentofu.org%2F"), ["thing"]);
        assert_eq!(selected("hostname=registry.terraform.io"), ["aws"]);
        assert_eq!(selected("namespace=acme"), ["thing"]);
        assert_eq!(selected("trust=unverified"), ["thing"]);
        assert_eq!(selected("platform=darwin_arm64"), ["aws"]);
        assert_eq!(
            selected("platform=darwin_arm64&trust=unverified"),
            Vec::<String>::new()
        );
        assert_eq!(
            selected("page=2&other=x"),
            ["aws", "thing"],
            "other keys are ignored"
        );
    }
}
