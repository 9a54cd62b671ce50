//! The read-through flow: one readable function per mirror endpoint.
//!
//! Each request goes cache first; on a miss the mirror asks the origin (through [`Upstream`]),
//! verifies what it gets, stores it, and answers from the store. Concurrent misses for the same
//! archive share one download ([`Flights`]); metadata misses are coalesced by the moka caches.
//!
//! Verification order for an archive, before anything is stored or served:
//! 1. the origin's SHA256SUMS line for the package's file name equals the download metadata's
//!    `shasum` (checked when the version record is built, for every platform);
//! 2. the downloaded bytes' SHA-256 equals that `shasum`;
//! 3. the archive is a readable zip whose `h1:` hash can be computed.

use std::collections::BTreeMap;
use std::collections::HashMap;

use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::SystemTime;

use futures_util::StreamExt;

use crate::address::{ModuleAddr, Platform, ProviderAddr, Version};
use crate::cache::{
    self, ArchiveKind, Archives, Budget, Flights, MetaStore, Modules, Opened, Staging,
};
use crate::config::Settings;
use crate::error::{Error, Failure, RefusalKind, Result};
use crate::hash;
use crate::metrics::{Lookup, LookupKind, Metrics};
use crate::records::oci::ProviderImage;
use crate::records::{
    ArchiveInfo, ArchiveKey, IndexRecord, ModuleRecord, ModuleVersions, Package, SumsRef,
    VersionRecord, docs,
};
use crate::trust::{Refusal, SignatureKind};
use crate::upstream::{Operation, Upstream};

pub mod admission;
mod facade;
mod fill;
mod hash_job;
mod modules;
mod oci;

pub use fill::Fill;
pub use modules::{ModuleAnswer, ModulePackage};
pub use oci::{OciBlob, OciBlobHead, empty_config};

/// A failure to stage bytes, as a client is answered: a local file operation is our own fault.
/// Digest and size checks are made by the callers themselves, which name what they checked
/// ([`Error::verification`]); one that reaches this conversion unchecked is a bug.
impl From<admission::AdmitError> for Error {
    fn from(e: admission::AdmitError) -> Error {
        use admission::AdmitError as A;
        match e {
            A::Local { doing, source } => Error::io(doing, source),
            A::Source(source) => Error::io("reading", source),
            e @ (A::TooLarge(_) | A::Size { .. } | A::Checksum { .. } | A::UnusableZip(_)) => {
                Error::unexpected(format!("an unattributed admission check failed: {e}"))
            }
        }
    }
}

/// An archive on its way to a client: from the store, or from a download in progress.
pub struct ArchiveBody {
    /// Lowercase hex SHA-256 (known before a download starts; the bytes are checked against it).
    pub sha256: String,
    /// Known for stored archives, and for downloads whose origin sent a `Content-Length`.
    pub size: Option<u64>,
    pub modified: SystemTime,
    /// The bytes; ends with an error (not a clean end) if a download fails verification.
    pub stream: futures_util::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>,
}

/// What a cached version list allows, by its age.
enum Freshness {
    /// Serve it; the lookup result to count (`Hit`, `NegativeHit`).
    Hit(Lookup),
    /// Serve it, and refresh it in the background.
    Stale,
    /// Fetch it again.
    Expired,
}

/// How an archive request is answered.
pub enum Served {
    /// The bytes, from the store or from a download in progress.
    Body(ArchiveBody),
    /// A redirect to a pre-signed URL of the object store (`cache.redirect_downloads`), for a
    /// stored archive.
    Redirect(url::Url),
}

/// How long a pre-signed archive URL handed out by `cache.redirect_downloads` works.
const REDIRECT_TTL: Duration = Duration::from_secs(15 * 60);

/// How long the readiness check waits for the cache.
const NOT_READY_AFTER: Duration = Duration::from_secs(5);

/// Why the cache cannot serve now (`/readyz` answers 503 with this as its reason).
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    #[error("the cache's store cannot be read and written: {0}")]
    Store(crate::storage::StorageError),
    #[error("downloads cannot be staged: {0}")]
    Staging(std::io::Error),
    #[error("the cache did not answer within {}s", NOT_READY_AFTER.as_secs())]
    Timeout,
}

impl From<Opened<ArchiveKind>> for ArchiveBody {
    fn from(a: Opened<ArchiveKind>) -> ArchiveBody {
        ArchiveBody {
            sha256: a.record.sha256,
            size: Some(a.record.size),
            modified: a.modified,
            stream: a.body,
        }
    }
}

/// The head of an archive response, without its bytes.
pub struct ArchiveHead {
    pub sha256: String,
    pub size: Option<u64>,
    pub modified: SystemTime,
}

/// The mirror: caches in front of origin registries.
pub struct Mirror {
    settings: Arc<Settings>,
    upstream: Upstream,
    meta: MetaStore,
    store: Arc<Archives>,
    staging: Staging,
    metrics: Arc<Metrics>,
    fills: Mutex<HashMap<ArchiveKey, Arc<Fill>>>,
    /// The LRU accounting behind `cache.max_size`; `None` for an unbounded cache.
    budget: Option<Arc<Budget>>,
    index_flights: Flights<ProviderAddr, Arc<IndexRecord>, Error>,
    version_flights: Flights<(ProviderAddr, Version), Arc<VersionRecord>, Error>,
    modules: Modules,
    module_list_flights: Flights<ModuleAddr, Arc<ModuleVersions>, Error>,
    module_flights: Flights<(ModuleAddr, Version), ModuleRecord, Error>,
    /// When each cached git package's reference was last checked against its origin.
    ref_checks: Mutex<HashMap<(ModuleAddr, Version), std::time::Instant>>,
    /// Provider versions rendered as OCI documents.
    oci_images: moka::future::Cache<(ProviderAddr, Version), Arc<ProviderImage>>,
    oci_image_flights: Flights<(ProviderAddr, Version), Arc<ProviderImage>, Error>,
    /// The complete-hashes job's queue, once the server started it.
    hash_queue: std::sync::OnceLock<hash_job::HashQueue>,
}

impl Mirror {
    /// Opens the cache directories (cleaning up leftovers of an interrupted run) and builds the
    /// upstream client. Touches no network.
    pub fn open(settings: Arc<Settings>, metrics: Arc<Metrics>) -> anyhow::Result<Arc<Mirror>> {
        let dir = &settings.cache.dir;
        let ctx = |what: &str| format!("cache.dir {}: cannot create {what}", dir.display());
        let storage = crate::storage::open(&settings.cache.storage)
            .map_err(|e| anyhow::anyhow!("cache: cannot open the store: {e}"))?;
        let (staging, leftovers) =
            Staging::open(dir.join("tmp")).map_err(|e| anyhow::anyhow!("{}: {e}", ctx("tmp/")))?;
        if leftovers > 0 {
            tracing::info!("removed {leftovers} unfinished download(s) left by an earlier run");
        }
        let stray = crate::fsio::remove_temp_files(dir);
        if stray > 0 {
            tracing::info!("removed {stray} unfinished metadata write(s) left by an earlier run");
        }
        let entries = settings.cache.metadata_entries;
        let meta = MetaStore::new(storage.clone(), entries);
        let archives = Archives::new(storage.clone(), entries);
        let modules = Modules::new(storage, entries);
        let upstream = Upstream::new(Arc::new(settings.upstream.clone()), metrics.clone())?
            .with_git(&settings.modules.git.program);
        let budget = settings.cache.max_size.map(Budget::new);
        metrics
            .cache_max_size
            .set(settings.cache.max_size.unwrap_or(0) as i64);
        Ok(Arc::new(Mirror {
            settings,
            upstream,
            meta,
            store: Arc::new(archives),
            staging,
            metrics,
            fills: Mutex::new(HashMap::new()),
            budget,
            index_flights: Flights::default(),
            version_flights: Flights::default(),
            modules,
            module_list_flights: Flights::default(),
            module_flights: Flights::default(),
            ref_checks: Mutex::new(HashMap::new()),
            oci_images: moka::future::Cache::builder().max_capacity(entries).build(),
            oci_image_flights: Flights::default(),
            hash_queue: std::sync::OnceLock::new(),
        }))
    }

    /// Scans the store: sets the cache gauges and loads the disk budget, then evicts if the
    /// cache is over `cache.max_size` (e.g. after the limit was lowered).
    pub async fn refresh_usage(self: &Arc<Self>) -> Result<()> {
        let entries = self.store.scan().await?;
        let bytes: u64 = entries.iter().map(|e| e.size).sum();
        self.metrics.cache_archives.set(entries.len() as i64);
        self.metrics.cache_disk_bytes.set(bytes as i64);
        if let Some(budget) = &self.budget {
            budget.load(
                entries
                    .into_iter()
                    .map(|e| {
                        let used = e.last_use();
                        (e.key, e.size, used)
                    })
                    .collect(),
            );
            self.evict().await;
        }
        Ok(())
    }

    /// Removes least recently used archives until the cache fits `cache.max_size`.
    async fn evict(&self) {
        let Some(budget) = &self.budget else { return };
        for (key, size) in budget.victims() {
            match self.store.remove(&key).await {
                Ok(removed) => {
                    if removed {
                        self.archive_removed(&key, size);
                        self.metrics.cache_evictions.inc();
                        tracing::info!(archive = %key, size, "evicted (cache.max_size)");
                    }
                }
                Err(e) => tracing::warn!(archive = %key, "cannot evict: {e}"),
            }
        }
    }

    /// `:hostname/:namespace/:type/index.json`
    pub async fn index(self: &Arc<Self>, addr: &ProviderAddr) -> Result<Bytes> {
        Ok(self.versions(addr).await?.to_mirror_json())
    }

    /// `:hostname/:namespace/:type/:version.json`
    pub async fn version(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
    ) -> Result<Bytes> {
        self.check_host(addr)?;
        let rec = self.version_record(addr, version).await?;
        if self.settings.auth.enabled() {
            // Signed URLs differ from one request to the next.
            return Ok(self.render_version(addr, version, &rec));
        }
        // Records are immutable (a new `h1:` makes a new record), so the rendering is kept.
        Ok(rec
            .rendered
            .get_or_init(|| self.render_version(addr, version, &rec)))
    }

    fn render_version(&self, addr: &ProviderAddr, version: &Version, rec: &VersionRecord) -> Bytes {
        let mut doc = docs::MirrorVersion::default();
        for (platform, pkg) in rec
            .packages
            .iter()
            .filter(|(p, _)| self.settings.upstream.platform_allowed(p))
        {
            let mut hashes: Vec<String> = pkg.h1.iter().cloned().collect();
            hashes.push(hash::zh(&pkg.shasum));
            // The CLI downloads archives without credentials: with authentication on, hand
            // out an expiring, signed URL instead.
            let url = self.settings.auth.signed_url(
                addr.archive_filename(version, platform),
                &addr.archive_path(version, platform),
                std::time::SystemTime::now(),
            );
            doc.archives
                .insert(platform.to_string(), docs::MirrorArchive { hashes, url });
        }
        docs::to_bytes(&doc)
    }

    /// `:hostname/:namespace/:type/terraform-provider-:type_:version_:os_:arch.zip`
    ///
    /// A stored archive is served from the store; otherwise the caller joins (or starts) the
    /// archive's download and receives its bytes as they arrive.
    pub async fn archive(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
    ) -> Result<Served> {
        let key = self.archive_key(addr, version, platform)?;
        if let Some(fill) = self.join_fill(&key) {
            self.admit(&key, fill.trust)?;
            self.metrics.lookup(LookupKind::Archive, Lookup::Joined);
            return self.body_from_fill(fill).await.map(Served::Body);
        }
        if self.settings.cache.redirect_downloads {
            if let Some(info) = self.archive_info(&key).await? {
                let trust = self.archive_trust(&key, &info).await;
                self.admit(&key, trust)?;
                if let Some(url) = self.store.signed_url(&key, REDIRECT_TTL).await? {
                    self.metrics.lookup(LookupKind::Archive, Lookup::Hit);
                    self.served(trust);
                    self.record_use(&key);
                    return Ok(Served::Redirect(url));
                }
            }
        }
        if let Some(found) = self.open_archive(&key).await? {
            let trust = self.archive_trust(&key, &found.record).await;
            self.admit(&key, trust)?;
            self.metrics.lookup(LookupKind::Archive, Lookup::Hit);
            if let Some(rec) = self
                .meta
                .versions
                .get(&(addr.clone(), version.clone()))
                .await
            {
                self.want_hashes(addr, version, &rec);
            }
            self.served(trust);
            let size = found.record.size;
            let mut body = ArchiveBody::from(found);
            self.record_use(&key);
            if let Some(budget) = &self.budget {
                // Held by the response body: an archive being read is never evicted.
                let lease = budget.lease(&key, size);
                body.stream = body
                    .stream
                    .map(move |chunk| {
                        let _held = &lease;
                        chunk
                    })
                    .boxed();
            }
            return Ok(Served::Body(body));
        }
        let (pkg, trust) = self.package_to_fetch(&key).await?;
        let (fill, leader) = self.fill_for(&key, &pkg, trust);
        self.metrics.lookup(
            LookupKind::Archive,
            if leader { Lookup::Miss } else { Lookup::Joined },
        );
        self.body_from_fill(fill).await.map(Served::Body)
    }

    /// Records in the store, in the background, that a stored archive was served (for the
    /// budget after a restart, and for `provender prune`).
    fn record_use(&self, key: &ArchiveKey) {
        let (store, key) = (self.store.clone(), key.clone());
        tokio::spawn(async move { store.touch(&key).await });
    }

    /// The trust level of a stored archive: from its record, or for records written before
    /// levels were kept, from its version record.
    pub async fn archive_trust(&self, key: &ArchiveKey, info: &ArchiveInfo) -> SignatureKind {
        if let Some(trust) = info.trust {
            return trust;
        }
        match self.meta.read_version(&key.addr, &key.version).await {
            Some(rec) => rec.trust_of(&key.platform),
            None => SignatureKind::Unverified,
        }
    }

    /// Applies the trust policy to an archive about to be served or stored.
    fn admit(&self, key: &ArchiveKey, trust: SignatureKind) -> Result<()> {
        self.settings
            .trust
            .admit(&key.addr, trust)
            .map_err(|r| self.refused(&key.addr, &key.version, r, "archive"))
    }

    /// Counts an archive response by the trust level of what it serves.
    fn served(&self, trust: SignatureKind) {
        self.metrics
            .archive_responses
            .with_label_values(&[trust.as_str()])
            .inc();
    }

    async fn body_from_fill(&self, fill: Arc<Fill>) -> Result<ArchiveBody> {
        let size = fill.ready().await?;
        self.served(fill.trust);
        Ok(ArchiveBody {
            sha256: fill.sha256.clone(),
            size,
            modified: fill.started_at,
            stream: fill.stream(),
        })
    }

    /// What a `HEAD` of an archive answers, without downloading it: a stored archive's size, a
    /// download in progress's announced size, or else just the SHA-256 the origin published
    /// (no download starts; the size is not known yet).
    pub async fn archive_head(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
    ) -> Result<ArchiveHead> {
        let key = self.archive_key(addr, version, platform)?;
        if let Some(fill) = self.fill_in_progress(&key) {
            self.admit(&key, fill.trust)?;
            return Ok(ArchiveHead {
                sha256: fill.sha256.clone(),
                size: fill.announced_size(),
                modified: fill.started_at,
            });
        }
        if let Some(found) = self.open_archive(&key).await? {
            self.admit(&key, self.archive_trust(&key, &found.record).await)?;
            return Ok(ArchiveHead {
                sha256: found.record.sha256,
                size: Some(found.record.size),
                modified: found.modified,
            });
        }
        let (pkg, trust) = self.package_to_fetch(&key).await?;
        self.admit(&key, trust)?;
        let rec = self.version_record(addr, version).await?;
        Ok(ArchiveHead {
            sha256: pkg.shasum,
            size: None,
            modified: std::time::UNIX_EPOCH + Duration::from_secs(rec.fetched_at),
        })
    }

    /// Makes sure an archive is in the store (fetching and verifying it if needed) without
    /// opening it. Returns its description and whether it was fetched just now.
    pub async fn ensure_archive(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
    ) -> Result<(ArchiveInfo, bool)> {
        let key = self.archive_key(addr, version, platform)?;
        if let Some(found) = self.archive_info(&key).await? {
            self.admit(&key, self.archive_trust(&key, &found).await)?;
            return Ok((found, false));
        }
        self.fetch_archive(&key).await?;
        let found = self.archive_info(&key).await?;
        found.map(|i| (i, true)).ok_or_else(|| {
            Error::unexpected(format!("archive {key} vanished right after it was stored"))
        })
    }

    async fn archive_info(&self, key: &ArchiveKey) -> Result<Option<ArchiveInfo>> {
        self.store.record(key).await.map_err(Error::from)
    }

    /// The validated key of an archive this mirror may serve.
    fn archive_key(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
    ) -> Result<ArchiveKey> {
        self.check_host(addr)?;
        if !self.settings.upstream.platform_allowed(platform) {
            return Err(Error::NotFound(format!(
                "platform {platform} is not served by this mirror (upstream.platforms)"
            )));
        }
        Ok(ArchiveKey {
            addr: addr.clone(),
            version: version.clone(),
            platform: platform.clone(),
        })
    }

    /// Fetches a missing archive from its origin and waits until it is stored (one download
    /// per archive, shared with every concurrent request).
    async fn fetch_archive(self: &Arc<Self>, key: &ArchiveKey) -> Result<()> {
        let (pkg, trust) = self.package_to_fetch(key).await?;
        let (fill, leader) = self.fill_for(key, &pkg, trust);
        self.metrics.lookup(
            LookupKind::Archive,
            if leader { Lookup::Miss } else { Lookup::Joined },
        );
        fill.finished().await
    }

    /// The verified download metadata for an archive that is not in the store, and its trust
    /// level.
    async fn package_to_fetch(
        self: &Arc<Self>,
        key: &ArchiveKey,
    ) -> Result<(Package, SignatureKind)> {
        if self.settings.upstream.offline {
            return Err(Error::NotFound(format!(
                "offline mode: archive {key} is not in the cache"
            )));
        }
        let rec = self.version_record(&key.addr, &key.version).await?;
        if rec
            .packages
            .get(&key.platform)
            .is_some_and(|p| p.download_url.is_empty())
        {
            return Err(Error::NotFound(format!(
                "archive {key} was imported without an origin URL and is no longer in the cache"
            )));
        }
        let pkg = rec.packages.get(&key.platform).cloned().ok_or_else(|| {
            Error::NotFound(format!(
                "{} {} has no package for {}",
                key.addr, key.version, key.platform
            ))
        })?;
        Ok((pkg, rec.trust_of(&key.platform)))
    }

    /// Bookkeeping after an archive left the store (evicted or quarantined).
    pub fn archive_removed(&self, key: &ArchiveKey, size: u64) {
        self.metrics.cache_archives.dec();
        self.metrics.cache_disk_bytes.sub(size as i64);
        if let Some(budget) = &self.budget {
            budget.removed(key);
        }
    }

    /// Bookkeeping after an archive entered the store.
    async fn archive_committed(&self, key: &ArchiveKey, size: u64) {
        self.metrics.cache_archives.inc();
        self.metrics.cache_disk_bytes.add(size as i64);
        if let Some(budget) = &self.budget {
            budget.added(key, size);
            self.evict().await;
        }
    }

    /// A provider's version list (cache first; offline: cache only).
    pub async fn versions(self: &Arc<Self>, addr: &ProviderAddr) -> Result<Arc<IndexRecord>> {
        self.check_host(addr)?;
        let rec = self.index_record(addr).await?;
        if !rec.found {
            return Err(Error::NotFound(format!(
                "the origin registry has no provider {addr}"
            )));
        }
        Ok(rec)
    }

    /// Everything known about one version: verified download metadata per platform, `h1:`
    /// hashes of processed archives, the SHA256SUMS files.
    pub async fn version_info(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
    ) -> Result<Arc<VersionRecord>> {
        self.check_host(addr)?;
        self.version_record(addr, version).await
    }

    /// Whether the cache can serve now: archives and metadata can be read, and downloads can be
    /// staged. The error names what failed.
    pub async fn check_storage(&self) -> std::result::Result<(), NotReady> {
        let checks = async {
            self.store
                .storage()
                .probe()
                .await
                .map_err(NotReady::Store)?;
            self.staging.probe().await.map_err(NotReady::Staging)
        };
        match tokio::time::timeout(NOT_READY_AFTER, checks).await {
            Ok(result) => result,
            Err(_) => Err(NotReady::Timeout),
        }
    }

    /// The local staging area.
    pub fn staging(&self) -> &Staging {
        &self.staging
    }

    /// A new scratch directory in the staging area, removed when dropped.
    pub fn scratch_dir(&self) -> std::io::Result<cache::ScratchDir> {
        self.staging.scratch_dir()
    }

    /// The validated settings this mirror runs with.
    pub fn settings(&self) -> &Arc<Settings> {
        &self.settings
    }

    /// The archive store.
    pub fn store(&self) -> &Arc<Archives> {
        &self.store
    }

    /// The cached modules.
    pub fn module_store(&self) -> &Modules {
        &self.modules
    }

    /// The metadata store.
    pub fn meta(&self) -> &MetaStore {
        &self.meta
    }

    async fn open_archive(&self, key: &ArchiveKey) -> Result<Option<Opened<ArchiveKind>>> {
        self.store.open(key).await.map_err(Error::from)
    }

    fn check_host(&self, addr: &ProviderAddr) -> Result<()> {
        if self.settings.upstream.host_allowed(&addr.hostname) {
            Ok(())
        } else {
            Err(Error::NotFound(format!(
                "provider hostname {} is not served by this mirror (upstream.allowed_hosts)",
                addr.hostname
            )))
        }
    }

    /// The version list. A fresh copy (memory, then disk) is served as it is. A copy past
    /// `cache.index_ttl` but within `cache.stale_if_error` is served at once while one background
    /// refresh runs (stale-while-revalidate; while the origin is down the copy simply stays,
    /// which is stale-if-error). With nothing usable the origin is asked and the caller waits.
    async fn index_record(self: &Arc<Self>, addr: &ProviderAddr) -> Result<Arc<IndexRecord>> {
        let cached = match self.meta.indexes.get(addr).await {
            Some(rec) => Some(rec),
            None => match self.meta.read_index(addr).await {
                Some(rec) => {
                    let rec = Arc::new(rec);
                    self.meta.indexes.insert(addr.clone(), rec.clone()).await;
                    Some(rec)
                }
                None => None,
            },
        };
        if let Some(rec) = cached {
            match self.list_freshness(rec.fetched_at, rec.found) {
                Freshness::Hit(result) => {
                    self.metrics.lookup(LookupKind::Index, result);
                    return Ok(rec);
                }
                Freshness::Stale => {
                    self.metrics.lookup(LookupKind::Index, Lookup::Stale);
                    if !self.index_flights.contains(addr) {
                        let this = self.clone();
                        let addr = addr.clone();
                        tokio::spawn(async move {
                            if let Err(e) = this.refresh_index(&addr).await {
                                tracing::warn!(provider = %addr, "cannot refresh the version list; serving the earlier one: {e}");
                            }
                        });
                    }
                    return Ok(rec);
                }
                Freshness::Expired => {}
            }
        }
        if self.settings.upstream.offline {
            return Err(Error::NotFound(format!(
                "offline mode: {addr} is not in the cache"
            )));
        }
        self.metrics.lookup(LookupKind::Index, Lookup::Miss);
        self.refresh_index(addr).await
    }

    /// What a cached version list (of a provider or a module) fetched at `fetched_at` allows:
    /// served as it is while younger than `cache.index_ttl` (always when offline; "no such
    /// thing" for `cache.not_found_ttl`), served while one background refresh runs while
    /// younger than `cache.stale_if_error`, else fetched again.
    fn list_freshness(&self, fetched_at: u64, found: bool) -> Freshness {
        let cache = &self.settings.cache;
        let age = Duration::from_secs(crate::clock::now_secs().saturating_sub(fetched_at));
        if !found {
            return match age < cache.not_found_ttl {
                true => Freshness::Hit(Lookup::NegativeHit),
                false => Freshness::Expired,
            };
        }
        if age < cache.index_ttl || self.settings.upstream.offline {
            Freshness::Hit(Lookup::Hit)
        } else if age < cache.stale_if_error {
            Freshness::Stale
        } else {
            Freshness::Expired
        }
    }

    /// Fetches the version list from the origin (one flight per provider), persists it when the
    /// provider exists, and puts it in memory.
    async fn refresh_index(self: &Arc<Self>, addr: &ProviderAddr) -> Result<Arc<IndexRecord>> {
        let this = self.clone();
        let owned = addr.clone();
        let work = move || async move {
            let found = this.upstream.versions(&owned).await?;
            let rec = IndexRecord {
                fetched_at: crate::clock::now_secs(),
                found: found.is_some(),
                versions: found.map(|l| l.versions).unwrap_or_default(),
                rendered: Default::default(),
            };
            if rec.found {
                if let Err(e) = this.meta.write_index(&owned, &rec).await {
                    tracing::warn!(provider = %owned, "cannot persist version list: {e}");
                }
            }
            let rec = Arc::new(rec);
            this.meta.indexes.insert(owned, rec.clone()).await;
            Ok(rec)
        };
        self.index_flights.run(addr.clone(), work).await.0
    }

    /// The version record: memory, else disk (if it covers the platform filter), else built
    /// from the origin's download metadata and verified against SHA256SUMS (one flight per
    /// version, detached from the callers).
    async fn version_record(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
    ) -> Result<Arc<VersionRecord>> {
        let key = (addr.clone(), version.clone());
        let rec = match self.meta.versions.get(&key).await {
            Some(rec)
                if self.settings.upstream.offline
                    || rec.covers(|p| self.settings.upstream.platform_allowed(p)) =>
            {
                self.metrics.lookup(LookupKind::Version, Lookup::Hit);
                rec
            }
            _ => {
                let this = self.clone();
                let (a, v) = key.clone();
                let work = move || async move {
                    let rec = this.clone().load_version(a.clone(), v.clone()).await?;
                    this.meta.versions.insert((a, v), rec.clone()).await;
                    Ok(rec)
                };
                self.version_flights.run(key, work).await.0?
            }
        };
        // The policy may have changed since the record was made.
        self.settings
            .trust
            .admit(addr, rec.weakest_trust())
            .map_err(|r| self.refused(addr, version, r, "version"))?;
        self.want_hashes(addr, version, &rec);
        Ok(rec)
    }

    async fn load_version(
        self: Arc<Self>,
        addr: ProviderAddr,
        version: Version,
    ) -> Result<Arc<VersionRecord>> {
        if let Some(mut rec) = self.meta.read_version(&addr, &version).await {
            if rec.covers(|p| self.settings.upstream.platform_allowed(p)) {
                self.metrics.lookup(LookupKind::Version, Lookup::Hit);
                self.fill_in_h1(&addr, &version, &mut rec).await;
                return Ok(Arc::new(rec));
            }
        }
        if self.settings.upstream.offline {
            return match self.meta.read_version(&addr, &version).await {
                Some(mut rec) => {
                    self.metrics.lookup(LookupKind::Version, Lookup::Hit);
                    self.fill_in_h1(&addr, &version, &mut rec).await;
                    Ok(Arc::new(rec))
                }
                None => Err(Error::NotFound(format!(
                    "offline mode: {addr} {version} is not in the cache"
                ))),
            };
        }
        self.metrics.lookup(LookupKind::Version, Lookup::Miss);
        let index = self.index_record(&addr).await?;
        if !index.found {
            return Err(Error::NotFound(format!(
                "the origin registry has no provider {addr}"
            )));
        }
        let Some(offered) = index.platforms_of(&version) else {
            return Err(Error::NotFound(format!(
                "the origin registry does not list version {version} of {addr}"
            )));
        };
        let offered = offered.to_vec();
        let wanted: Vec<Platform> = offered
            .iter()
            .filter(|p| self.settings.upstream.platform_allowed(p))
            .cloned()
            .collect();
        let lookups = futures_util::stream::iter(wanted)
            .map(|p| {
                let (upstream, addr, version) = (&self.upstream, &addr, &version);
                async move {
                    let info = upstream.download_info(addr, version, &p).await;
                    (p, info)
                }
            })
            .buffer_unordered(self.settings.upstream.concurrency)
            .collect::<Vec<_>>()
            .await;
        let mut packages = BTreeMap::new();
        let mut unavailable = Vec::new();
        for (platform, info) in lookups {
            match info? {
                Some(info) => {
                    packages.insert(platform, info);
                }
                None => unavailable.push(platform),
            }
        }
        unavailable.sort();
        let sums = self.fetch_sums(&addr, &version, &packages).await?;
        let mut rec = VersionRecord {
            fetched_at: crate::clock::now_secs(),
            offered,
            unavailable,
            packages,
            sums,
            rendered: Default::default(),
        };
        self.fill_in_h1(&addr, &version, &mut rec).await;
        if let Err(e) = self.meta.write_version(&addr, &version, &rec).await {
            tracing::warn!(provider = %addr, %version, "cannot persist version metadata: {e}");
        }
        Ok(Arc::new(rec))
    }

    /// Fetches each distinct SHA256SUMS file (and its signature) the packages refer to, checks
    /// every package's `shasum` against its line, and keeps both files byte for byte.
    async fn fetch_sums(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        packages: &BTreeMap<Platform, Package>,
    ) -> Result<Vec<SumsRef>> {
        let mut refs: Vec<SumsRef> = Vec::new();
        for pkg in packages.values() {
            if !refs.iter().any(|r| r.url == pkg.shasums_url) {
                refs.push(SumsRef {
                    url: pkg.shasums_url.clone(),
                    signature_url: pkg.shasums_signature_url.clone(),
                    trust: None,
                });
            }
        }
        for (n, sums_ref) in refs.iter_mut().enumerate() {
            let host = &addr.hostname;
            let sums = self
                .upstream
                .small_file(host, Operation::Shasums, &sums_ref.url)
                .await?;
            let signature = self
                .upstream
                .small_file(host, Operation::Signature, &sums_ref.signature_url)
                .await?;
            // The signature first: no line of an unverified SHA256SUMS is trusted.
            let described = packages
                .iter()
                .filter(|(_, p)| p.shasums_url == sums_ref.url);
            let trust = self
                .settings
                .trust
                .verify_sums(
                    crate::trust::Verifier::hashicorp(),
                    addr,
                    version,
                    &sums,
                    &signature,
                    described,
                )
                .map_err(|refusal| {
                    self.refused(
                        addr,
                        version,
                        refusal,
                        &format!("SHA256SUMS at {}", sums_ref.url),
                    )
                })?;
            if trust.kind == crate::trust::SignatureKind::Unsigned {
                tracing::warn!(provider = %addr, %version, "the origin lists no signing keys; accepted unsigned because upstream.require_signature is off for {host}");
            }
            tracing::debug!(provider = %addr, %version, signature = trust.kind.as_str(), key_id = trust.key_id.as_deref().unwrap_or("-"), "SHA256SUMS signature verified");
            sums_ref.trust = Some(trust);
            self.meta.write_sums(addr, version, n, false, sums).await?;
            self.meta
                .write_sums(addr, version, n, true, signature)
                .await?;
        }
        Ok(refs)
    }

    /// Adds `h1:` hashes of archives the store already holds but the record does not mention
    /// (after a crash between committing an archive and updating its record).
    async fn fill_in_h1(&self, addr: &ProviderAddr, version: &Version, rec: &mut VersionRecord) {
        for (platform, pkg) in rec.packages.iter_mut().filter(|(_, p)| p.h1.is_none()) {
            let key = ArchiveKey {
                addr: addr.clone(),
                version: version.clone(),
                platform: platform.clone(),
            };
            if let Ok(Some(info)) = self.store.record(&key).await {
                if info.sha256 == pkg.shasum {
                    pkg.h1 = Some(info.h1);
                }
            }
        }
    }

    /// A failed verification of a provider version as the error a client gets, counted under
    /// `provender_verification_failures_total` and logged.
    fn verification_failed(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        failure: Failure,
    ) -> Error {
        let reason = failure.reason();
        self.metrics.verification_failed(reason);
        tracing::error!(provider = %addr, %version, reason = reason.as_str(), "verification failed: {failure}");
        Error::verification(Error::provider(addr, version), failure)
    }

    /// A [`Refusal`] as the error a client gets: a policy refusal (403) is counted under
    /// `provender_policy_refusals_total`, a failed check (502) under
    /// `provender_verification_failures_total`. `what` names the document concerned.
    fn refused(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        refusal: Refusal,
        what: &str,
    ) -> Error {
        match RefusalKind::of(&refusal) {
            RefusalKind::Policy(rule) => {
                self.metrics.policy_refused(rule);
                tracing::info!(provider = %addr, %version, "refused by policy: {refusal}");
            }
            RefusalKind::Failed(reason) => {
                self.metrics.verification_failed(reason);
                tracing::error!(provider = %addr, %version, reason = reason.as_str(), "verification failed: {refusal} ({what})");
            }
        }
        Error::refused(Error::provider(addr, version), refusal, what)
    }
}
