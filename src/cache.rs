//! What provender keeps, on top of a [`Storage`](crate::storage::Storage): verified objects
//! with their records ([`Objects`]: provider archives as [`Archives`], module packages as
//! [`Modules`]), metadata ([`MetaStore`]: bounded in-memory LRUs in front of the store), the
//! local staging area for downloads in progress ([`Staging`]), the single-flight table that
//! makes concurrent misses share one upstream fetch, and the LRU budget behind
//! `cache.max_size`.
//!
//! Nothing here speaks HTTP or knows about origin registries.
//!
//! Layout in the store (a directory for the disk backend, a bucket prefix for object stores):
//!
//! ```text
//! archives/<host>/<namespace>/<type>/<version>/<archive>.zip        committed, verified archive
//! archives/<host>/<namespace>/<type>/<version>/<archive>.zip.json   its record (the commit point)
//! metadata/<host>/<namespace>/<type>/index.json                     version list + fetch time
//! metadata/<host>/<namespace>/<type>/<version>.json                 download metadata per platform
//! metadata/<host>/<namespace>/<type>/<version>.SHA256SUMS.<n>[.sig]  the origin's checksum files
//! modules/<host>/<namespace>/<name>/<system>/versions.json          module version list + fetch time
//! modules/<host>/<namespace>/<name>/<system>/<version>/module.tar.gz  committed module package
//! modules/<host>/<namespace>/<name>/<system>/<version>/module.json    its record (the commit point)
//! oci/<host>/<namespace>/<type>/{manifest,blob}-<sha256>.json       OCI documents and blob links
//! quarantine/<object key>.<unix time>                               objects that failed
//! quarantine/<record key>.<unix time>                               re-verification, with records
//! releases/<product>/index.json                                     a CLI's list of releases
//! releases/<product>/<version>/release.json                         a CLI release's verified record
//! releases/<product>/<version>/<product>_<version>_SHA256SUMS[.sig]  its checksum list, signature
//! releases/<product>/<version>/<product>_<version>_<os>_<arch>.zip[.json]  a release zip, record
//! leases/<object key>                                               a replica fetching that object
//! published/providers/<host>/<namespace>/<type>/<version>.json      a published provider version
//! published/modules/<host>/<namespace>/<name>/<system>/<version>.json  a published module version
//! audit/<YYYY-MM-DD>/<unix time>-<kind>-<version>.json              an operator's removal of one
//! usage/<YYYY-MM-DD>/<process>.json                                 one process's usage counts
//! ```
//!
//! and always on local disk, under `cache.dir`: `tmp/` (downloads in progress) and `tls/`
//! (the generated CA and certificate).

mod budget;
mod config;
mod flight;
mod lease;
mod listing;
mod local_tier;
mod meta;
mod objects;
mod published;
mod staging;

pub use budget::{Budget, Budgeted, Lease};
pub use config::{CacheConfig, CacheConfigError, CacheSettings, ObjectStoreConfig};
pub use flight::{Aborted, Flights};
pub use lease::{Claim, Followed, LeaseGuard, Leases};
pub use listing::{
    FreshnessRules, Listing, Listings, NotCached, Verdict, module_list_key, provider_list_key,
    release_list_key,
};
pub use local_tier::{LocalTier, TierMetrics};
pub use meta::MetaStore;
pub use objects::{
    ArchiveKind, Archives, Kind, Listed, ModuleKind, ModuleZipKind, ModuleZips, Modules, Objects,
    Opened, ReleaseKind,
};
pub use published::{Audit, Claimed, Publications, publication_key};
pub use staging::{ScratchDir, StagedFile, Staging};

/// How many changes a store has seen from this process: a view built at one count is stale at
/// another (see `catalogue`).
#[derive(Debug, Default)]
pub struct Changes(std::sync::atomic::AtomicU64);

impl Changes {
    /// Notes one more change.
    pub fn note(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// How many so far.
    pub fn count(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}
