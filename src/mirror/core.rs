//! The core every door shares: the stores, the staging area, the origins (behind the offline
//! switch), version lists and version records, archive fills, the trust policy and the budget.
//!
//! The protocol front-ends ([`ProviderMirror`](super::ProviderMirror),
//! [`ModuleRegistry`](super::ModuleRegistry), [`OciRegistry`](super::OciRegistry)), the operator
//! commands and re-verification all work through a [`Core`]; none of them reaches an origin, a
//! store or the trust policy another way.
//!
//! Verification order for an archive, before anything is stored or served:
//! 1. the origin's SHA256SUMS line for the package's file name equals the download metadata's
//!    `shasum` (checked when the version record is built, for every platform);
//! 2. the downloaded bytes' SHA-256 equals that `shasum`;
//! 3. the archive is a readable zip whose `h1:` hash can be computed.

use std::collections::BTreeMap;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use super::admission;
use crate::address::{ModuleAddr, Platform, ProviderAddr, Version};
use crate::cache::{
    self, ArchiveKind, Archives, Budget, Budgeted, Flights, FreshnessRules, Listings, MetaStore,
    ModuleZips, Modules, NotCached, Opened, Staging,
};
use crate::config::Settings;
use crate::error::{Error, Failure, RefusalKind, Result};
use crate::metrics::{Lookup, LookupKind, Metrics};
use crate::records::publish::PublishedKind;
use crate::records::releases::ReleaseKey;
use crate::records::{
    ArchiveInfo, ArchiveKey, IndexRecord, IndexVersion, ModuleKey, ModuleVersions, Package,
    SumsRef, VersionRecord,
};
use crate::trust::{Refusal, SignatureKind};
use crate::upstream::{Operation, Upstream};

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

/// Why the cache cannot serve now (`/readyz` answers 503 with this as its reason).
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    #[error("the cache's store cannot be read and written: {0}")]
    Store(crate::storage::StorageError),
    #[error("downloads cannot be staged: {0}")]
    Staging(std::io::Error),
    #[error("the cache did not answer within {} (server.ready_timeout)", humantime::format_duration(*.0))]
    Timeout(Duration),
}

mod fill;
mod hash_job;
mod policy;
mod reach;

pub use fill::{Fill, OriginBody, Ready};
pub(in crate::mirror) use fill::{FillTable, HoldBack, Turn};
pub use policy::seen_in;
pub use reach::Reach;

/// Version lists of providers, as the core keeps them.
pub type ProviderLists = Listings<ProviderAddr, IndexRecord, Error>;
/// Version lists of modules, as the core keeps them.
pub type ModuleLists = Listings<ModuleAddr, ModuleVersions, Error>;

/// What every door shares.
pub struct Core {
    pub(super) settings: Arc<Settings>,
    /// The origins' client; reached only through [`Core::origin`], which knows about offline.
    pub(super) upstream: Upstream,
    pub(super) metrics: Arc<Metrics>,
    pub(super) meta: MetaStore,
    pub(super) provider_lists: ProviderLists,
    pub(super) module_lists: ModuleLists,
    pub(super) archives: Arc<Archives>,
    pub(super) modules: Modules,
    /// Module packages as zips (OCI artifacts' layers), made from `modules`.
    pub(super) module_zips: ModuleZips,
    pub(super) staging: Staging,
    pub(self) fills: FillTable<ArchiveKey>,
    /// CLI release builds being downloaded (used by `mirror::releases`).
    pub(super) release_fills: FillTable<crate::records::releases::ReleaseKey>,
    /// The LRU accounting behind `cache.max_size`; `None` for an unbounded cache.
    pub(super) budget: Option<Arc<Budget>>,
    /// The local disk tier in front of an object store, if configured.
    tier: Option<Arc<crate::cache::LocalTier>>,
    /// CLI release zips (`[releases]`).
    releases: crate::cache::Objects<crate::cache::ReleaseKind>,
    /// Leases that let replicas on one object store fetch an archive once between them.
    leases: Option<crate::cache::Leases>,
    pub(super) version_flights: Flights<(ProviderAddr, Version), Arc<VersionRecord>, Error>,
    /// The complete-hashes job's queue, once the server started it.
    pub(self) hash_queue: std::sync::OnceLock<hash_job::HashQueue>,
    /// Set when the server shuts down: held fills are let go.
    pub(self) draining: tokio::sync::watch::Sender<bool>,
    /// What was published to the private namespaces, and their version lists.
    pub(super) publications: crate::cache::Publications,
    /// Which versions are admitted: every door asks it (see `core/policy.rs`).
    pub(super) policy: Arc<crate::policy::Policy>,
    /// What ages are judged by (version lists' freshness and first-seen times, the cooldown).
    pub(super) clock: Arc<dyn crate::clock::Clock>,
}

impl Core {
    /// The clock ages and expiries are judged by.
    pub fn clock(&self) -> &Arc<dyn crate::clock::Clock> {
        &self.clock
    }

    /// Opens the cache directories (cleaning up leftovers of an interrupted run) and builds the
    /// upstream client. Touches no network.
    pub fn open(settings: Arc<Settings>, metrics: Arc<Metrics>) -> anyhow::Result<Arc<Core>> {
        Core::open_at(settings, metrics, crate::clock::system())
    }

    /// [`Core::open`] with the clock that version lists and the policy judge ages by.
    pub fn open_at(
        settings: Arc<Settings>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn crate::clock::Clock>,
    ) -> anyhow::Result<Arc<Core>> {
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
        let tier = match settings.cache.local_max_size {
            Some(max) => Some(
                crate::cache::LocalTier::open(dir.join("local"), max, metrics.local_tier.clone())
                    .map_err(|e| anyhow::anyhow!("{}: {e}", ctx("local/")))?,
            ),
            None => None,
        };
        let leases = (settings.cache.fleet_single_fetch
            && matches!(
                settings.cache.storage,
                crate::storage::StorageSettings::Object(_)
            ))
        .then(|| crate::cache::Leases::new(storage.clone()));
        let archives = Archives::new(storage.clone(), entries).with_tier(tier.clone());
        let modules = Modules::new(storage.clone(), entries).with_tier(tier.clone());
        let module_zips = ModuleZips::new(storage.clone(), entries);
        let releases = crate::cache::Objects::new(storage.clone(), entries).with_tier(tier.clone());
        let upstream = Upstream::new(Arc::new(settings.upstream.clone()), metrics.clone())?
            .with_git(&settings.modules.git.program);
        let budget = settings.cache.max_size.map(Budget::new);
        metrics
            .cache_max_size
            .set(settings.cache.max_size.unwrap_or(0) as i64);
        let c = &settings.cache;
        let rules = FreshnessRules {
            ttl: c.index_ttl,
            stale_if_error: c.stale_if_error,
            not_found_ttl: c.not_found_ttl,
            offline: settings.upstream.offline,
        };
        let policy = crate::policy::Policy::new(
            &settings.policy,
            crate::policy::Approvals::in_store(storage.clone()),
            clock.clone(),
        )
        .map_err(|e| anyhow::anyhow!("policy: {e}"))?;
        let provider_lists = Listings::new(
            storage.clone(),
            cache::provider_list_key,
            entries,
            rules,
            clock.clone(),
            metrics.clone(),
        );
        let module_lists = Listings::new(
            storage.clone(),
            cache::module_list_key,
            entries,
            rules,
            clock.clone(),
            metrics.clone(),
        );
        let in_flight = metrics.fills_in_flight.clone();
        let publications = crate::cache::Publications::new(storage.clone(), c.index_ttl);
        Ok(Arc::new(Core {
            clock: clock.clone(),
            policy: Arc::new(policy),
            publications,
            settings,
            upstream,
            metrics,
            meta,
            provider_lists,
            module_lists,
            archives: Arc::new(archives),
            modules,
            module_zips,
            staging,
            fills: FillTable::new(in_flight.clone()),
            release_fills: FillTable::new(in_flight),
            budget,
            tier,
            releases,
            leases,
            version_flights: Flights::default(),
            hash_queue: std::sync::OnceLock::new(),
            draining: tokio::sync::watch::Sender::new(false),
        }))
    }

    /// Scans the store: sets the cache gauges and loads the disk budget (archives and CLI
    /// release builds), then evicts if the cache is over `cache.max_size` (e.g. after the limit
    /// was lowered).
    pub async fn refresh_usage(self: &Arc<Self>) -> Result<()> {
        let entries = self.archives.scan().await?;
        let bytes: u64 = entries.iter().map(|e| e.size).sum();
        self.metrics.cache_archives.set(entries.len() as i64);
        self.metrics.cache_disk_bytes.set(bytes as i64);
        if let Some(budget) = &self.budget {
            let builds = self.releases.scan().await?;
            let zips = self.module_zips.scan().await?;
            let archives = entries
                .into_iter()
                .map(|e| (Budgeted::from(&e.key), e.size, e.last_use()));
            let builds = builds
                .into_iter()
                .map(|e| (Budgeted::from(&e.key), e.size, e.last_use()));
            let zips = zips
                .into_iter()
                .map(|e| (Budgeted::from(&e.key), e.size, e.last_use()));
            budget.load(archives.chain(builds).chain(zips).collect());
            self.evict().await;
        }
        Ok(())
    }

    /// Removes least recently used archives and release builds until the cache fits
    /// `cache.max_size`.
    pub(super) async fn evict(&self) {
        let Some(budget) = &self.budget else { return };
        for (object, size) in budget.victims() {
            let removed = match &object {
                Budgeted::Archive(key) => self.archives.remove(key).await,
                Budgeted::Release(key) => self.releases.remove(key).await,
                Budgeted::ModuleZip(key) => self.module_zips.remove(key).await,
            };
            match removed {
                Ok(removed) => {
                    if removed {
                        if let Budgeted::Archive(key) = &object {
                            self.archive_removed(key, size);
                        }
                        self.metrics.cache_evictions.inc();
                        tracing::info!(%object, size, "evicted (cache.max_size)");
                    }
                }
                Err(e) => tracing::warn!(%object, "cannot evict: {e}"),
            }
        }
    }

    /// Bookkeeping after a CLI release build entered the store: it counts against
    /// `cache.max_size` like an archive.
    pub(super) async fn release_committed(&self, key: &ReleaseKey, size: u64) {
        if let Some(budget) = &self.budget {
            budget.added(key, size);
            self.evict().await;
        }
    }

    /// Bookkeeping after a module package's zip entered the store: it counts against
    /// `cache.max_size` like an archive (whoever asked for it, cache-only clients included).
    pub(super) async fn module_zip_committed(&self, key: &ModuleKey, size: u64) {
        if let Some(budget) = &self.budget {
            budget.added(key, size);
            self.evict().await;
        }
    }

    /// Bookkeeping after a module package's zip left the store (quarantined).
    pub fn module_zip_removed(&self, key: &ModuleKey) {
        if let Some(budget) = &self.budget {
            budget.removed(key);
        }
    }

    /// Bookkeeping after a CLI release build left the store (quarantined).
    pub fn release_removed(&self, key: &ReleaseKey) {
        if let Some(budget) = &self.budget {
            budget.removed(key);
        }
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
    pub(super) fn admit(&self, key: &ArchiveKey, trust: SignatureKind) -> Result<()> {
        self.settings
            .trust
            .admit(&key.addr, trust)
            .map_err(|r| self.refused(&key.addr, &key.version, r, "archive"))
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
        self.judge_provider(addr, version).await?;
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

    pub(super) async fn archive_info(&self, key: &ArchiveKey) -> Result<Option<ArchiveInfo>> {
        self.archives.record(key).await.map_err(Error::from)
    }

    /// The validated key of an archive this mirror may serve.
    pub(super) fn archive_key(
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
    pub(super) async fn package_to_fetch(
        self: &Arc<Self>,
        key: &ArchiveKey,
    ) -> Result<(Package, SignatureKind)> {
        if self.is_private(&key.addr) {
            return Err(Error::NotFound(format!(
                "archive {key} is not in the store (a published version keeps every archive it \
                 was published with)"
            )));
        }
        self.origin(format!("archive {key}"))?;
        let rec = self
            .version_record(&key.addr, &key.version, &Reach::Origin)
            .await?;
        if rec
            .packages
            .get(&key.platform)
            .is_some_and(|p| p.download_url.is_none())
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
    pub(super) async fn archive_committed(&self, key: &ArchiveKey, size: u64) {
        self.metrics.cache_archives.inc();
        self.metrics.cache_disk_bytes.add(size as i64);
        if let Some(budget) = &self.budget {
            budget.added(key, size);
            self.evict().await;
        }
    }

    /// A provider's version list (cache first; offline: cache only). A client that may read
    /// only the cache sees the versions with at least one archive in it.
    /// A provider's version list as the policy admits it (what every door lists).
    pub async fn versions(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        reach: &Reach,
    ) -> Result<Arc<IndexRecord>> {
        Ok(self.versions_judged(addr, reach).await?.0)
    }

    /// A provider's version list, whatever the policy says of its versions.
    pub(super) async fn listed_versions(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        reach: &Reach,
    ) -> Result<Arc<IndexRecord>> {
        self.check_host(addr)?;
        if self.is_private(addr) {
            return self.published_versions(addr).await;
        }
        if let Reach::CacheOnly(_) = reach {
            return self.cached_versions(addr, reach).await;
        }
        let rec = self.provider_list(addr).await?;
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
        self.version_record(addr, version, &Reach::Origin).await
    }

    /// Whether the cache can serve now: archives and metadata can be read, and downloads can be
    /// staged. The error names what failed.
    pub async fn check_storage(&self) -> std::result::Result<(), NotReady> {
        let checks = async {
            self.archives
                .storage()
                .probe()
                .await
                .map_err(NotReady::Store)?;
            self.staging.probe().await.map_err(NotReady::Staging)
        };
        let limit = self.settings.server.ready_timeout;
        match tokio::time::timeout(limit, checks).await {
            Ok(result) => result,
            Err(_) => Err(NotReady::Timeout(limit)),
        }
    }

    /// Re-hashes the local tier's copies every `cache.reverify_interval` (the server calls this;
    /// the operator commands do not).
    pub fn start_tier_recheck(&self) {
        if let Some(tier) = &self.tier {
            tier.spawn_recheck(self.settings.cache.reverify_interval);
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
    pub fn releases(&self) -> &crate::cache::Objects<crate::cache::ReleaseKind> {
        &self.releases
    }

    pub fn archives(&self) -> &Arc<Archives> {
        &self.archives
    }

    /// The module package store.
    pub fn modules(&self) -> &Modules {
        &self.modules
    }

    /// The store of module packages as zips (made from `modules`, for OCI clients).
    pub fn module_zips(&self) -> &ModuleZips {
        &self.module_zips
    }

    /// The LRU accounting behind `cache.max_size`, if the cache is bounded.
    pub fn budget(&self) -> Option<&Arc<Budget>> {
        self.budget.as_ref()
    }

    /// The metadata store.
    pub fn meta(&self) -> &MetaStore {
        &self.meta
    }

    /// Provider version lists.
    pub fn provider_lists(&self) -> &ProviderLists {
        &self.provider_lists
    }

    /// Module version lists.
    pub fn module_lists(&self) -> &ModuleLists {
        &self.module_lists
    }

    /// The metrics every door counts in.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The origins' client, when this server may contact origins. Offline
    /// (`upstream.offline`), [`NotCached`] naming `what` the cache would need: this is the one
    /// place that decides whether an origin may be asked.
    pub fn origin(
        &self,
        what: impl std::fmt::Display,
    ) -> std::result::Result<&Upstream, NotCached> {
        if self.settings.upstream.offline {
            return Err(NotCached {
                what: what.to_string(),
            });
        }
        Ok(&self.upstream)
    }

    /// Each origin host's recent calls and circuit (empty offline: none are called).
    pub fn origin_health(&self) -> Vec<crate::upstream::OriginHealth> {
        self.upstream.health()
    }

    /// The client that fetches identity issuers' keys: the origins' client, with its address
    /// policy and proxy. Issuers are not origins, so `upstream.offline` does not stop it.
    pub fn identity_client(&self) -> &Upstream {
        &self.upstream
    }

    /// Whether origins may be contacted at all (not `upstream.offline`).
    pub fn online(&self) -> bool {
        !self.settings.upstream.offline
    }

    /// A provider's version list, fresh enough to serve (see [`Listings::get`]).
    pub(super) async fn provider_list(
        self: &Arc<Self>,
        addr: &ProviderAddr,
    ) -> Result<Arc<IndexRecord>> {
        let this = self.clone();
        let owned = addr.clone();
        let fetch = move || async move {
            let found = this
                .origin(format!("provider {owned}"))?
                .versions(&owned)
                .await?;
            Ok(IndexRecord {
                fetched_at: this.provider_lists.now(),
                found: found.is_some(),
                versions: found.map(|l| l.versions).unwrap_or_default(),
                seen: Default::default(),
                rendered: Default::default(),
            })
        };
        self.provider_lists.get(addr, fetch).await
    }

    pub(super) async fn open_archive(
        &self,
        key: &ArchiveKey,
    ) -> Result<Option<Opened<ArchiveKind>>> {
        self.archives.open(key).await.map_err(Error::from)
    }

    /// Whether a provider is in a private namespace: published here, never fetched.
    pub fn is_private(&self, addr: &ProviderAddr) -> bool {
        self.settings.trust.private.has_provider(addr)
    }

    /// What was published to the private namespaces.
    pub fn publications(&self) -> &crate::cache::Publications {
        &self.publications
    }

    /// A private provider's version list: its publications that are published and not yanked.
    async fn published_versions(&self, addr: &ProviderAddr) -> Result<Arc<IndexRecord>> {
        let all = self
            .publications
            .of(PublishedKind::Provider, &addr.to_string())
            .await?;
        let versions: Vec<IndexVersion> = all
            .iter()
            .filter(|p| p.listed())
            .map(|p| IndexVersion {
                version: p.version.clone(),
                protocols: p.protocols.clone(),
                platforms: p.platforms.clone(),
            })
            .collect();
        if versions.is_empty() {
            return Err(Error::NotFound(format!(
                "no version of {addr} is published here"
            )));
        }
        Ok(Arc::new(IndexRecord {
            fetched_at: crate::clock::now_secs(),
            found: true,
            versions,
            seen: Default::default(),
            rendered: Default::default(),
        }))
    }

    pub(super) fn check_host(&self, addr: &ProviderAddr) -> Result<()> {
        if self.settings.upstream.host_allowed(&addr.hostname) || self.is_private(addr) {
            Ok(())
        } else {
            Err(Error::NotFound(format!(
                "provider hostname {} is not served by this mirror (upstream.allowed_hosts)",
                addr.hostname
            )))
        }
    }

    /// The version record: memory, else disk (if it covers the platform filter), else built
    /// from the origin's download metadata and verified against SHA256SUMS (one flight per
    /// version, detached from the callers).
    pub(super) async fn version_record(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
        reach: &Reach,
    ) -> Result<Arc<VersionRecord>> {
        self.judge_provider(addr, version).await?;
        let key = (addr.clone(), version.clone());
        if self.is_private(addr) {
            return self.published_version(addr, version).await;
        }
        let cache_only = matches!(reach, Reach::CacheOnly(_));
        let rec = match self.meta.versions.get(&key).await {
            Some(rec)
                if cache_only
                    || !self.online()
                    || rec.covers(|p| self.settings.upstream.platform_allowed(p)) =>
            {
                self.metrics.lookup(LookupKind::Version, Lookup::Hit);
                rec
            }
            _ if cache_only => self.stored_version(addr, version, reach).await?,
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
        if !cache_only {
            self.want_hashes(addr, version, &rec);
        }
        Ok(rec)
    }

    /// A published version's record: from memory or the store, never from an origin (yanked
    /// versions too: whoever names one still gets it).
    async fn published_version(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
    ) -> Result<Arc<VersionRecord>> {
        let rec = match self
            .meta
            .versions
            .get(&(addr.clone(), version.clone()))
            .await
        {
            Some(rec) => rec,
            None => {
                let Some(rec) = self.meta.read_version(addr, version).await else {
                    return Err(Error::NotFound(format!(
                        "{addr} {version} is not published here"
                    )));
                };
                let rec = Arc::new(rec);
                self.meta
                    .versions
                    .insert((addr.clone(), version.clone()), rec.clone())
                    .await;
                rec
            }
        };
        self.settings
            .trust
            .admit(addr, rec.weakest_trust())
            .map_err(|r| self.refused(addr, version, r, "version"))?;
        Ok(rec)
    }

    async fn load_version(
        self: Arc<Self>,
        addr: ProviderAddr,
        version: Version,
    ) -> Result<Arc<VersionRecord>> {
        if let Some(mut rec) = self.meta.read_version(&addr, &version).await {
            // Offline, whatever is kept is all there is.
            if !self.online() || rec.covers(|p| self.settings.upstream.platform_allowed(p)) {
                self.metrics.lookup(LookupKind::Version, Lookup::Hit);
                self.fill_in_h1(&addr, &version, &mut rec).await;
                return Ok(Arc::new(rec));
            }
        }
        let upstream = self.origin(format!("{addr} {version}"))?;
        self.metrics.lookup(LookupKind::Version, Lookup::Miss);
        let index = self.provider_list(&addr).await?;
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
                let (addr, version) = (&addr, &version);
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
            let (Some(url), Some(signature_url)) = (&pkg.shasums_url, &pkg.shasums_signature_url)
            else {
                return Err(Error::unexpected(format!(
                    "{addr} {version}: {} comes without SHA256SUMS URLs",
                    pkg.filename
                )));
            };
            if !refs.iter().any(|r| &r.url == url) {
                refs.push(SumsRef {
                    url: url.clone(),
                    signature_url: signature_url.clone(),
                    trust: None,
                });
            }
        }
        for (n, sums_ref) in refs.iter_mut().enumerate() {
            let host = &addr.hostname;
            let upstream = self.origin(format!("{addr} {version}"))?;
            let sums = upstream
                .small_file(host, Operation::Shasums, &sums_ref.url)
                .await?;
            let signature = upstream
                .small_file(host, Operation::Signature, &sums_ref.signature_url)
                .await?;
            // The signature first: no line of an unverified SHA256SUMS is trusted.
            let described = packages
                .iter()
                .filter(|(_, p)| p.shasums_url.as_deref() == Some(sums_ref.url.as_str()));
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
    pub(super) async fn fill_in_h1(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        rec: &mut VersionRecord,
    ) {
        for (platform, pkg) in rec.packages.iter_mut().filter(|(_, p)| p.h1.is_none()) {
            let key = ArchiveKey {
                addr: addr.clone(),
                version: version.clone(),
                platform: platform.clone(),
            };
            if let Ok(Some(info)) = self.archives.record(&key).await {
                if info.sha256 == pkg.shasum {
                    pkg.h1 = Some(info.h1);
                    pkg.size = Some(info.size);
                }
            }
        }
    }

    /// A failed verification of a provider version as the error a client gets, counted under
    /// `provender_verification_failures_total` and logged.
    pub(super) fn verification_failed(
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
    pub(super) fn refused(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::IndexVersion;

    fn core(dir: &std::path::Path, offline: bool) -> Arc<Core> {
        let toml = format!(
            "[cache]\ndir = {:?}\n[upstream]\noffline = {offline}\nallowed_hosts = [\"registry.example.com\"]\n",
            dir.display().to_string()
        );
        let settings = crate::config::Config::from_toml(&toml)
            .unwrap()
            .validate()
            .unwrap();
        Core::open(Arc::new(settings), Arc::new(Metrics::new())).unwrap()
    }

    fn addr() -> ProviderAddr {
        ProviderAddr::new("registry.example.com", "acme", "foo").unwrap()
    }

    #[test]
    fn offline_the_origins_cannot_be_reached() {
        let dir = tempfile::tempdir().unwrap();
        let offline = core(dir.path(), true);
        let refused = offline.origin("archive x").map(|_| ()).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "offline mode: archive x is not in the cache"
        );
        assert!(!offline.online());
        let online = core(dir.path(), false);
        assert!(online.origin("archive x").is_ok());
        assert!(online.online());
    }

    #[tokio::test]
    async fn offline_a_version_list_comes_from_the_cache_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let offline = core(dir.path(), true);
        let err = offline.versions(&addr(), &Reach::Origin).await.unwrap_err();
        assert_eq!(err.status(), http::StatusCode::NOT_FOUND);
        assert_eq!(
            err.to_string(),
            "offline mode: provider registry.example.com/acme/foo is not in the cache"
        );
        // What an import (or an earlier online run) kept is served, however old.
        let version = Version::parse("1.0.0").unwrap();
        offline
            .provider_lists()
            .update(&addr(), |list| {
                list.fetched_at = 0;
                list.add_versions(vec![IndexVersion {
                    version: version.clone(),
                    protocols: vec!["5.0".into()],
                    platforms: Vec::new(),
                }])
            })
            .await
            .unwrap();
        let list = offline.versions(&addr(), &Reach::Origin).await.unwrap();
        assert_eq!(list.versions.len(), 1);
        // A version record it does not hold is not fetched either.
        let err = offline.version_info(&addr(), &version).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "offline mode: registry.example.com/acme/foo 1.0.0 is not in the cache"
        );
    }
}
