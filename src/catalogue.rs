//! What the cache holds, for people and scripts: typed views of the cached providers, built from
//! the verified records alone (no origin is asked). The JSON API (`<base>-/api/v1/`) serialises
//! them as they are; the pages render the same values, so the two never disagree.
//!
//! The API is versioned by its path and by `api_version` in every document; a field is only
//! ever added within a version.
//!
//! Building a view scans the store, so a view is kept for [`FRESH_FOR`] and built by one task at
//! a time, however many clients ask: a busy page or a script in a loop costs one scan per
//! interval, not one per request.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use crate::address::{Platform, ProviderAddr, Version};
use crate::cache::Flights;
use crate::error::{Error, Result};
use crate::hash;
use crate::mirror::Core;
use crate::records::VersionRecord;

/// The version of the JSON API these views are served as.
pub const API_VERSION: u32 = 1;

/// How long a built view is served before the store is scanned again.
pub const FRESH_FOR: Duration = Duration::from_secs(5);

/// Every cached provider (`GET <base>-/api/v1/providers`).
#[derive(Debug, Clone, Serialize)]
pub struct Providers {
    pub api_version: u32,
    pub providers: Vec<ProviderEntry>,
}

/// One provider with the versions of it the cache holds archives of.
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
}

/// The catalogue over a core.
pub struct Catalogue {
    core: Arc<Core>,
    providers: Mutex<Option<(Instant, Arc<Providers>)>>,
    builds: Flights<(), Arc<Providers>, Error>,
}

impl Catalogue {
    pub fn new(core: Arc<Core>) -> Arc<Catalogue> {
        Arc::new(Catalogue {
            core,
            providers: Mutex::new(None),
            builds: Flights::default(),
        })
    }

    /// Every provider with archives in the cache (see [`Catalogue::build_providers`]), as built
    /// at most [`FRESH_FOR`] ago.
    pub async fn providers(self: &Arc<Self>) -> Result<Arc<Providers>> {
        if let Some((at, view)) = &*self.providers.lock().expect("catalogue lock") {
            if at.elapsed() < FRESH_FOR {
                return Ok(view.clone());
            }
        }
        let this = self.clone();
        let build = move || async move {
            let view = Arc::new(this.build_providers().await?);
            *this.providers.lock().expect("catalogue lock") = Some((Instant::now(), view.clone()));
            Ok(view)
        };
        self.builds.run((), build).await.0
    }

    /// Every provider with archives in the cache, by source, each version with every platform
    /// its verified record describes: one scan of the store.
    pub async fn build_providers(&self) -> Result<Providers> {
        let mut cached: BTreeMap<(ProviderAddr, Version), BTreeMap<Platform, (u64, SystemTime)>> =
            BTreeMap::new();
        for entry in self.core.archives().list().await? {
            if entry.record.is_none() {
                continue;
            }
            let used = entry.last_use();
            cached
                .entry((entry.key.addr, entry.key.version))
                .or_default()
                .insert(entry.key.platform, (entry.size, used));
        }
        let mut providers: BTreeMap<ProviderAddr, Vec<VersionEntry>> = BTreeMap::new();
        for ((addr, version), archives) in cached {
            let record = self.core.meta().read_version(&addr, &version).await;
            let entry = version_entry(&version, record.as_ref(), &archives);
            providers.entry(addr).or_default().push(entry);
        }
        Ok(Providers {
            api_version: API_VERSION,
            providers: providers
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
                .collect(),
        })
    }
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
            });
        entry.cached = true;
        entry.size = Some(*size);
        entry.last_used = Some(crate::clock::unix_secs(*used));
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
}
