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
use std::sync::Arc;

use futures_util::StreamExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::address::{Platform, ProviderAddr, Version};
use crate::cache::{
    self, ArchiveInfo, ArchiveKey, ArchiveStore, DiskStore, Flights, IndexRecord, MetaStore,
    Package, Staging, StoredArchive, SumsRef, VersionRecord,
};
use crate::config::Settings;
use crate::error::{Error, Result};
use crate::hash::{self, HashLimits};
use crate::metrics::Metrics;
use crate::upstream::{Operation, Upstream};

mod facade;

/// The mirror: caches in front of origin registries.
pub struct Mirror {
    settings: Arc<Settings>,
    upstream: Upstream,
    meta: MetaStore,
    store: Arc<dyn ArchiveStore>,
    staging: Staging,
    metrics: Arc<Metrics>,
    fills: Flights<ArchiveKey, ()>,
    hash_limits: HashLimits,
}

impl Mirror {
    /// Opens the cache directories (cleaning up leftovers of an interrupted run) and builds the
    /// upstream client. Touches no network.
    pub fn open(settings: Arc<Settings>, metrics: Arc<Metrics>) -> anyhow::Result<Arc<Mirror>> {
        let dir = &settings.cache_dir;
        let ctx = |what: &str| format!("cache.dir {}: cannot create {what}", dir.display());
        let store = DiskStore::new(dir.join("archives"), dir.join("quarantine"))
            .map_err(|e| anyhow::anyhow!("{}: {e}", ctx("archives/")))?;
        let (staging, leftovers) =
            Staging::open(dir.join("tmp")).map_err(|e| anyhow::anyhow!("{}: {e}", ctx("tmp/")))?;
        if leftovers > 0 {
            tracing::info!("removed {leftovers} unfinished download(s) left by an earlier run");
        }
        let stray = cache::remove_temp_files(dir);
        if stray > 0 {
            tracing::info!("removed {stray} unfinished metadata write(s) left by an earlier run");
        }
        let meta = MetaStore::new(
            dir.join("metadata"),
            settings.metadata_entries,
            settings.index_ttl,
            settings.not_found_ttl,
        )
        .map_err(|e| anyhow::anyhow!("{}: {e}", ctx("metadata/")))?;
        let upstream = Upstream::new(settings.clone(), metrics.clone())?;
        Ok(Arc::new(Mirror {
            settings,
            upstream,
            meta,
            store: Arc::new(store),
            staging,
            metrics,
            fills: Flights::default(),
            hash_limits: HashLimits::default(),
        }))
    }

    /// Sets the cache size gauges from a scan of the store.
    pub async fn refresh_usage(&self) -> Result<()> {
        let usage = self
            .store
            .usage()
            .await
            .map_err(|e| Error::io("scanning the archive store", e))?;
        self.metrics.cache_archives.set(usage.archives as i64);
        self.metrics.cache_disk_bytes.set(usage.bytes as i64);
        Ok(())
    }

    /// `:hostname/:namespace/:type/index.json`
    pub async fn index(self: &Arc<Self>, addr: &ProviderAddr) -> Result<Vec<u8>> {
        self.check_host(addr)?;
        let rec = self.index_record(addr).await?;
        if !rec.found {
            return Err(Error::NotFound(format!(
                "the origin registry has no provider {addr}"
            )));
        }
        Ok(rec.to_mirror_json())
    }

    /// `:hostname/:namespace/:type/:version.json`
    pub async fn version(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
    ) -> Result<Vec<u8>> {
        self.check_host(addr)?;
        let rec = self.version_record(addr, version).await?;
        let mut archives = serde_json::Map::new();
        for (platform, pkg) in rec
            .packages
            .iter()
            .filter(|(p, _)| self.settings.platform_allowed(p))
        {
            let mut hashes: Vec<String> = pkg.h1.iter().cloned().collect();
            hashes.push(hash::zh(&pkg.shasum));
            archives.insert(
                platform.to_string(),
                serde_json::json!({ "url": addr.archive_filename(version, platform), "hashes": hashes }),
            );
        }
        Ok(
            serde_json::to_vec(&serde_json::json!({ "archives": archives }))
                .expect("JSON of strings"),
        )
    }

    /// `:hostname/:namespace/:type/terraform-provider-:type_:version_:os_:arch.zip`
    pub async fn archive(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
    ) -> Result<StoredArchive> {
        let key = self.archive_key(addr, version, platform)?;
        if let Some(found) = self.open_archive(&key).await? {
            self.metrics.lookup("archive", "hit");
            return Ok(found);
        }
        self.fetch_archive(&key).await?;
        self.open_archive(&key).await?.ok_or_else(|| {
            Error::Internal(format!("archive {key} vanished right after it was stored"))
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
            return Ok((found, false));
        }
        self.fetch_archive(&key).await?;
        let found = self.archive_info(&key).await?;
        found.map(|i| (i, true)).ok_or_else(|| {
            Error::Internal(format!("archive {key} vanished right after it was stored"))
        })
    }

    async fn archive_info(&self, key: &ArchiveKey) -> Result<Option<ArchiveInfo>> {
        self.store
            .info(key)
            .await
            .map_err(|e| Error::io(format!("reading cached archive {key}"), e))
    }

    /// The validated key of an archive this mirror may serve.
    fn archive_key(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
    ) -> Result<ArchiveKey> {
        self.check_host(addr)?;
        if !self.settings.platform_allowed(platform) {
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

    /// Fetches a missing archive from its origin (one flight per archive, shared by all callers).
    async fn fetch_archive(self: &Arc<Self>, key: &ArchiveKey) -> Result<()> {
        if self.settings.offline {
            return Err(Error::NotFound(format!(
                "offline mode: archive {key} is not in the cache"
            )));
        }
        let rec = self.version_record(&key.addr, &key.version).await?;
        let Some(pkg) = rec.packages.get(&key.platform).cloned() else {
            return Err(Error::NotFound(format!(
                "{} {} has no package for {}",
                key.addr, key.version, key.platform
            )));
        };
        let this = self.clone();
        let fill_key = key.clone();
        let (result, leader) = self
            .fills
            .run(key.clone(), move || this.fill(fill_key, pkg))
            .await;
        self.metrics
            .lookup("archive", if leader { "miss" } else { "joined" });
        result
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

    /// The validated settings this mirror runs with.
    pub fn settings(&self) -> &Arc<Settings> {
        &self.settings
    }

    /// The archive store.
    pub fn store(&self) -> &Arc<dyn ArchiveStore> {
        &self.store
    }

    /// The metadata store.
    pub fn meta(&self) -> &MetaStore {
        &self.meta
    }

    async fn open_archive(&self, key: &ArchiveKey) -> Result<Option<StoredArchive>> {
        self.store
            .open(key)
            .await
            .map_err(|e| Error::io(format!("opening cached archive {key}"), e))
    }

    fn check_host(&self, addr: &ProviderAddr) -> Result<()> {
        if self.settings.host_allowed(&addr.hostname) {
            Ok(())
        } else {
            Err(Error::NotFound(format!(
                "provider hostname {} is not served by this mirror (upstream.allowed_hosts)",
                addr.hostname
            )))
        }
    }

    /// The version list: memory, else disk if fresh, else the origin (falling back to a stale
    /// copy for up to `cache.stale_if_error` when the origin fails).
    async fn index_record(self: &Arc<Self>, addr: &ProviderAddr) -> Result<Arc<IndexRecord>> {
        if let Some(rec) = self.meta.indexes.get(addr).await {
            self.metrics
                .lookup("index", if rec.found { "hit" } else { "negative_hit" });
            return Ok(rec);
        }
        let this = self.clone();
        let owned = addr.clone();
        let load = async move { detached(this.load_index(owned)).await };
        self.meta
            .indexes
            .try_get_with(addr.clone(), load)
            .await
            .map_err(|e| (*e).clone())
    }

    async fn load_index(self: Arc<Self>, addr: ProviderAddr) -> Result<Arc<IndexRecord>> {
        let on_disk = self.meta.read_index(&addr).await;
        if let Some(rec) = on_disk.as_ref().filter(|r| self.meta.is_fresh(r)) {
            self.metrics.lookup("index", "hit");
            return Ok(Arc::new(rec.clone()));
        }
        if self.settings.offline {
            let Some(mut rec) = on_disk else {
                return Err(Error::NotFound(format!(
                    "offline mode: {addr} is not in the cache"
                )));
            };
            self.metrics.lookup("index", "hit");
            // Not fresh, but all there is: keep it in memory only briefly (see IndexExpiry).
            rec.stale = true;
            return Ok(Arc::new(rec));
        }
        match self.upstream.versions(&addr).await {
            Ok(Some(list)) => {
                self.metrics.lookup("index", "miss");
                let rec = IndexRecord {
                    fetched_at: cache::now_secs(),
                    found: true,
                    versions: list.versions.into_iter().map(Into::into).collect(),
                    stale: false,
                };
                if let Err(e) = self.meta.write_index(&addr, &rec).await {
                    tracing::warn!(provider = %addr, "cannot persist version list: {e}");
                }
                Ok(Arc::new(rec))
            }
            Ok(None) => {
                self.metrics.lookup("index", "miss");
                Ok(Arc::new(IndexRecord {
                    fetched_at: cache::now_secs(),
                    found: false,
                    versions: Vec::new(),
                    stale: false,
                }))
            }
            Err(e) => match on_disk {
                Some(mut rec)
                    if cache::now_secs().saturating_sub(rec.fetched_at)
                        < self.settings.stale_if_error.as_secs() =>
                {
                    tracing::warn!(provider = %addr, "origin failed, serving the version list fetched earlier: {e}");
                    self.metrics.lookup("index", "stale");
                    rec.stale = true;
                    Ok(Arc::new(rec))
                }
                _ => Err(e),
            },
        }
    }

    /// The version record: memory, else disk (if it covers the platform filter), else built
    /// from the origin's download metadata and verified against SHA256SUMS.
    async fn version_record(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
    ) -> Result<Arc<VersionRecord>> {
        let key = (addr.clone(), version.clone());
        if let Some(rec) = self.meta.versions.get(&key).await {
            if rec.covers(|p| self.settings.platform_allowed(p)) {
                self.metrics.lookup("version", "hit");
                return Ok(rec);
            }
            self.meta.versions.invalidate(&key).await;
        }
        let this = self.clone();
        let (a, v) = key.clone();
        let load = async move { detached(this.load_version(a, v)).await };
        self.meta
            .versions
            .try_get_with(key, load)
            .await
            .map_err(|e| (*e).clone())
    }

    async fn load_version(
        self: Arc<Self>,
        addr: ProviderAddr,
        version: Version,
    ) -> Result<Arc<VersionRecord>> {
        if let Some(mut rec) = self.meta.read_version(&addr, &version).await {
            if rec.covers(|p| self.settings.platform_allowed(p)) {
                self.metrics.lookup("version", "hit");
                self.fill_in_h1(&addr, &version, &mut rec).await;
                return Ok(Arc::new(rec));
            }
        }
        if self.settings.offline {
            return match self.meta.read_version(&addr, &version).await {
                Some(mut rec) => {
                    self.metrics.lookup("version", "hit");
                    self.fill_in_h1(&addr, &version, &mut rec).await;
                    Ok(Arc::new(rec))
                }
                None => Err(Error::NotFound(format!(
                    "offline mode: {addr} {version} is not in the cache"
                ))),
            };
        }
        self.metrics.lookup("version", "miss");
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
            .filter(|p| self.settings.platform_allowed(p))
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
            .buffer_unordered(self.settings.concurrency)
            .collect::<Vec<_>>()
            .await;
        let mut packages = BTreeMap::new();
        let mut unavailable = Vec::new();
        for (platform, info) in lookups {
            match info? {
                Some(info) => {
                    packages.insert(
                        platform,
                        Package {
                            protocols: info.protocols,
                            filename: info.filename,
                            download_url: info.download_url,
                            shasum: info.shasum,
                            shasums_url: info.shasums_url,
                            shasums_signature_url: info.shasums_signature_url,
                            signing_keys: info.signing_keys,
                            h1: None,
                        },
                    );
                }
                None => unavailable.push(platform),
            }
        }
        unavailable.sort();
        let sums = self.fetch_sums(&addr, &version, &packages).await?;
        let mut rec = VersionRecord {
            fetched_at: cache::now_secs(),
            offered,
            unavailable,
            packages,
            sums,
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
                });
            }
        }
        for (n, sums_ref) in refs.iter().enumerate() {
            let host = &addr.hostname;
            let sums = self
                .upstream
                .small_file(host, Operation::Shasums, &sums_ref.url)
                .await?;
            let signature = self
                .upstream
                .small_file(host, Operation::Signature, &sums_ref.signature_url)
                .await?;
            for pkg in packages.values().filter(|p| p.shasums_url == sums_ref.url) {
                match crate::upstream::sums_lookup(&sums, &pkg.filename) {
                    Some(listed) if listed == pkg.shasum => {}
                    Some(listed) => {
                        return Err(self.verification_failed(
                            "shasums_mismatch",
                            addr,
                            version,
                            format!("SHA256SUMS lists {listed} for {} but the download metadata says {}", pkg.filename, pkg.shasum),
                        ));
                    }
                    None => {
                        return Err(self.verification_failed(
                            "shasums_missing",
                            addr,
                            version,
                            format!(
                                "SHA256SUMS at {} has no line for {}",
                                sums_ref.url, pkg.filename
                            ),
                        ));
                    }
                }
            }
            let keep = |signature_file: bool, bytes: &bytes::Bytes| {
                self.meta
                    .write_sums(addr, version, n, signature_file, bytes.to_vec())
            };
            keep(false, &sums)
                .await
                .map_err(|e| Error::io(format!("storing SHA256SUMS of {addr} {version}"), e))?;
            keep(true, &signature).await.map_err(|e| {
                Error::io(
                    format!("storing the SHA256SUMS signature of {addr} {version}"),
                    e,
                )
            })?;
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
            if let Ok(Some(info)) = self.store.info(&key).await {
                if info.sha256 == pkg.shasum {
                    pkg.h1 = Some(info.h1);
                }
            }
        }
    }

    fn verification_failed(
        &self,
        reason: &str,
        addr: &ProviderAddr,
        version: &Version,
        detail: String,
    ) -> Error {
        self.metrics
            .verification_failures
            .with_label_values(&[reason])
            .inc();
        tracing::error!(provider = %addr, %version, reason, "verification failed: {detail}");
        Error::Verification(format!("{addr} {version}: verification failed: {detail}"))
    }

    /// Downloads, verifies, hashes and commits one archive. Runs detached from any client.
    async fn fill(self: Arc<Self>, key: ArchiveKey, pkg: Package) -> Result<()> {
        let host = &key.addr.hostname;
        let resp = self.upstream.archive(host, &pkg.download_url).await?;
        let (staged, mut file) = self
            .staging
            .create()
            .await
            .map_err(|e| Error::io("creating a staging file", e))?;
        let mut hasher = Sha256::new();
        let mut size: u64 = 0;
        let mut body = resp.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| {
                let msg = format!("downloading {key} from {}: {e}", pkg.download_url);
                if e.is_timeout() {
                    Error::UpstreamTimeout(msg)
                } else {
                    Error::Upstream(msg)
                }
            })?;
            size += chunk.len() as u64;
            if size > self.settings.max_archive_size {
                return Err(Error::Upstream(format!(
                    "archive {key} is larger than upstream.max_archive_size ({} bytes)",
                    self.settings.max_archive_size
                )));
            }
            self.upstream.add_bytes(chunk.len() as u64);
            hasher.update(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(|e| Error::io("writing a staging file", e))?;
        }
        let sha256 = hex::encode(hasher.finalize());
        if sha256 != pkg.shasum {
            return Err(self.verification_failed(
                "archive_checksum",
                &key.addr,
                &key.version,
                format!(
                    "{} has SHA-256 {sha256} but the origin published {}",
                    pkg.filename, pkg.shasum
                ),
            ));
        }
        file.flush()
            .await
            .map_err(|e| Error::io("writing a staging file", e))?;
        file.sync_all()
            .await
            .map_err(|e| Error::io("syncing a staging file", e))?;
        drop(file);

        let path = staged.path().to_path_buf();
        let limits = self.hash_limits;
        let timer = self.metrics.hash_duration.start_timer();
        let h1 = tokio::task::spawn_blocking(move || {
            let file =
                std::fs::File::open(&path).map_err(|e| Error::io("reading a staging file", e))?;
            hash::h1_zip(std::io::BufReader::with_capacity(256 * 1024, file), limits)
                .map_err(|e| Error::Verification(e.to_string()))
        })
        .await
        .map_err(|e| Error::Internal(format!("hashing task failed: {e}")))?;
        timer.observe_duration();
        let h1 = h1.map_err(|e| {
            self.verification_failed(
                "unusable_zip",
                &key.addr,
                &key.version,
                format!("{}: {e}", pkg.filename),
            )
        })?;

        let info = ArchiveInfo {
            sha256,
            h1: h1.clone(),
            size,
        };
        self.store
            .commit(&key, staged, &info)
            .await
            .map_err(|e| Error::io(format!("storing archive {key}"), e))?;
        self.metrics.cache_archives.inc();
        self.metrics.cache_disk_bytes.add(size as i64);
        if let Err(e) = self
            .meta
            .set_h1(&key.addr, &key.version, &key.platform, &h1)
            .await
        {
            tracing::warn!(archive = %key, "cannot record h1 in version metadata: {e}");
        }
        tracing::info!(archive = %key, size, %h1, "cached archive");
        Ok(())
    }
}

/// Runs `work` in its own task, so the caller going away does not cancel it.
async fn detached<T: Send + 'static>(
    work: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    tokio::spawn(work)
        .await
        .unwrap_or_else(|e| Err(Error::Internal(format!("background task failed: {e}"))))
}
