//! `ReleaseMirror`: the CLIs' own releases (`terraform`, `tofu`), read through like providers.
//!
//! A release is first made known by its SHA256SUMS: fetched with its signature from the
//! vendor's layout (HashiCorp: `<hashicorp_url>/terraform/<v>/terraform_<v>_SHA256SUMS` and
//! `.sig`; OpenTofu: `<opentofu_url>/v<v>/tofu_<v>_SHA256SUMS` and `.gpgsig`), the signature
//! checked under the vendor's pinned key alone (`trust::Verifier::verify_release`), the list read
//! by `records::releases::release_builds`; the copies and then the record
//! (`releases/<product>/<v>/release.json`, the commit point) go to the store, once per release
//! (single flight); `verify_release_sums` and `store_release` are that step, shared with
//! `import`. A build (a zip, or OpenTofu's `.tar.gz`) is then served from the store, or through
//! a fill: the same streaming path as provider archives (`Core::stream_checked`), held back
//! whole (`HoldBack::Whole`, at most `releases.max_build_size`) until its SHA-256 matches the
//! signed list, since a client can unpack the members of a tar stream, or the entries of a zip
//! read by its local headers, long before the end; one origin download however many clients
//! (and, on a store that enforces conditional creates, replicas) wait, committed with its record
//! (`cache::ReleaseKind`) and counted against `cache.max_size` like a provider archive.
//!
//! A release is fetched only if the vendor's list has it: a version the kept list does not
//! have is refused without asking anyone, the list being refreshed for it at most once per
//! `cache.not_found_ttl` (one flight for every such request); and a listed release whose
//! SHA256SUMS the release host does not have is remembered as missing for that long too.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::{FutureExt, StreamExt};

use super::core::{Core, Fill, HoldBack, OriginBody, Reach, Ready, Turn, seen_in};
use super::providers::{ArchiveBody, ArchiveHead};
use crate::address::{Hostname, Version};
use crate::cache::{Flights, Listings, release_list_key};
use crate::error::{Error, Failure, Result};
use crate::hash::Sha256;
use crate::metrics::{Lookup, LookupKind};
use crate::policy::Kind;
use crate::records::releases::{
    HashicorpIndex, ListedRelease, Product, ReleaseKey, ReleaseList, ReleaseRecord, ReleaseZip,
    TofuIndex, release_builds, signature_filename, sums_filename,
};
use crate::storage::Key;
use crate::trust::{Owner, SignatureKind, Verifier};
use crate::upstream::Operation;

/// `base` with `segments` added to its path.
fn joined<'a>(base: &url::Url, segments: impl IntoIterator<Item = &'a str>) -> Result<url::Url> {
    let mut url = base.clone();
    url.path_segments_mut()
        .map_err(|()| Error::unexpected("a release URL cannot be a base"))?
        .pop_if_empty()
        .extend(segments);
    Ok(url)
}

/// What the vendor key of a product is.
fn owner(product: Product) -> Owner {
    match product {
        Product::Terraform => Owner::Hashicorp,
        Product::Tofu => Owner::Opentofu,
    }
}

/// The one check of a release's SHA256SUMS, shared by every way a release enters the cache
/// (fetched on a miss or by `seed`, admitted by `import`): its signature by the vendor's
/// pinned key alone, then the list itself (`release_builds`: only this product and version,
/// one zip per platform, and `.tar.gz` files where published). Returns the record that `store_release` keeps.
pub fn verify_release_sums(
    verifier: &Verifier,
    product: Product,
    version: &Version,
    sums: &[u8],
    signature: &[u8],
) -> Result<ReleaseRecord> {
    let subject = crate::error::Subject::Release {
        product,
        version: version.clone(),
    };
    let file = sums_filename(product, version);
    let signed_by = verifier
        .verify_release(owner(product), sums, signature)
        .map_err(|e| Error::refused(subject.clone(), crate::trust::Refusal::Signature(e), &file))?;
    let builds = release_builds(product, version, sums).map_err(|error| {
        Error::verification(subject.clone(), Failure::ReleaseSums { file, error })
    })?;
    Ok(ReleaseRecord {
        product,
        version: version.clone(),
        builds,
        signed_by,
        fetched_at: crate::clock::now_secs(),
    })
}

/// Stores a verified release: its SHA256SUMS and signature as the vendor published them, then
/// its record, the commit point (a release without its record is not known).
pub async fn store_release(
    storage: &dyn crate::storage::Storage,
    record: &ReleaseRecord,
    sums: Bytes,
    signature: Bytes,
) -> Result<()> {
    let (product, version) = (record.product, &record.version);
    storage
        .write(&ReleaseMirror::copy_key(product, version, false), sums)
        .await?;
    storage
        .write(&ReleaseMirror::copy_key(product, version, true), signature)
        .await?;
    let bytes = serde_json::to_vec_pretty(record).expect("records serialise");
    storage
        .write(
            &ReleaseMirror::record_key(product, version),
            Bytes::from(bytes),
        )
        .await?;
    Ok(())
}

/// A stored release's record, if the release is stored. A record kept before `.tar.gz` builds
/// were recorded gets them from the stored SHA256SUMS, which was verified before it was kept.
pub async fn stored_record(
    storage: &dyn crate::storage::Storage,
    product: Product,
    version: &Version,
) -> Result<Option<ReleaseRecord>> {
    let Some(bytes) = storage
        .read(&ReleaseMirror::record_key(product, version))
        .await?
    else {
        return Ok(None);
    };
    let unreadable = |e: &dyn std::fmt::Display| {
        Error::unexpected(format!("the stored record of {product} {version}: {e}"))
    };
    let mut record: ReleaseRecord =
        crate::records::from_json(&bytes).map_err(|e| unreadable(&e))?;
    if record.builds.tarballs.is_empty() && product == Product::Tofu {
        let sums = storage
            .read(&ReleaseMirror::copy_key(product, version, false))
            .await?;
        if let Some(sums) = sums {
            record.builds = release_builds(product, version, &sums).map_err(|e| unreadable(&e))?;
        }
        if !record.builds.tarballs.is_empty() {
            // Once: the record is kept with them from now on.
            let bytes = serde_json::to_vec_pretty(&record).expect("records serialise");
            storage
                .write(
                    &ReleaseMirror::record_key(product, version),
                    Bytes::from(bytes),
                )
                .await?;
        }
    }
    Ok(Some(record))
}

/// A stored release's SHA256SUMS and its signature, as the vendor published them (both, or
/// none when the release is not stored).
pub async fn stored_checksums(
    storage: &dyn crate::storage::Storage,
    product: Product,
    version: &Version,
) -> Result<Option<(Bytes, Bytes)>> {
    let sums = storage
        .read(&ReleaseMirror::copy_key(product, version, false))
        .await?;
    let signature = storage
        .read(&ReleaseMirror::copy_key(product, version, true))
        .await?;
    Ok(match (sums, signature) {
        (Some(sums), Some(signature)) => Some((sums, signature)),
        _ => None,
    })
}

/// The CLIs' releases, over the core.
pub struct ReleaseMirror {
    core: Arc<Core>,
    verifier: std::result::Result<Arc<Verifier>, String>,
    records: Flights<(Product, Version), Arc<ReleaseRecord>, Error>,
    lists: Listings<Product, ReleaseList, Error>,
    /// Listed releases whose SHA256SUMS the release host does not have, each with the answer
    /// given, for `cache.not_found_ttl` (memory only, like every "no such thing").
    missing: moka::future::Cache<(Product, Version), Error>,
}

impl ReleaseMirror {
    pub fn new(core: Arc<Core>) -> Arc<ReleaseMirror> {
        let r = &core.settings().releases;
        // Built only where releases are served.
        let verifier = if r.enabled {
            r.verifier()
        } else {
            Err("releases.enabled is off".into())
        };
        let storage = core.archives().storage().clone();
        // The same freshness rules as every other list.
        let lists = Listings::new(
            storage.clone(),
            release_list_key,
            16,
            core.provider_lists.rules(),
            core.clock.clone(),
            core.metrics().clone(),
        );
        let missing = moka::future::Cache::builder()
            .max_capacity(1024)
            .time_to_live(core.provider_lists.rules().not_found_ttl)
            .build();
        Arc::new(ReleaseMirror {
            lists,
            verifier,
            records: Flights::default(),
            missing,
            core,
        })
    }

    fn enabled(&self) -> Result<()> {
        if self.core.settings().releases.enabled {
            Ok(())
        } else {
            Err(Error::NotFound(
                "CLI releases are not mirrored here (releases.enabled is off)".into(),
            ))
        }
    }

    /// Where the vendor publishes `file` of a release (or, when the vendor's host goes `via`
    /// a centre, where the centre's release mirror serves it).
    fn origin_url(&self, product: Product, version: &Version, file: &str) -> Result<url::Url> {
        let r = &self.core.settings().releases;
        let (base, dir) = match product {
            Product::Terraform => (&r.hashicorp_url, format!("terraform/{version}")),
            Product::Tofu => (&r.opentofu_url, format!("v{version}")),
        };
        let vendor = joined(base, dir.split('/').chain([file]))?;
        self.through_centre(vendor, || format!("{product}/{version}/{file}"))
    }

    /// `vendor`, or its counterpart at the centre its host goes through
    /// (`<via>releases/<centre_path>`, the centre's own layout). What comes from a centre is
    /// checked exactly as the vendor's own files: under the vendor's pinned key.
    fn through_centre(
        &self,
        vendor: url::Url,
        centre_path: impl FnOnce() -> String,
    ) -> Result<url::Url> {
        // The release hosts' tables are keyed by name (`host:port` works too).
        let upstream = &self.core.settings().upstream;
        let via = [
            crate::address::authority(&vendor),
            vendor.host_str().map(str::to_ascii_lowercase),
        ]
        .into_iter()
        .flatten()
        .filter_map(|h| Hostname::parse(&h).ok())
        .find_map(|host| upstream.via(&host));
        let Some(via) = via else {
            return Ok(vendor);
        };
        via.releases(&centre_path())
            .ok_or_else(|| Error::unexpected(format!("release URL at centre {}", via.host)))
    }

    /// The host a release URL is asked of: a centre by its `host:port` (as its token is
    /// keyed), a vendor's host by its name.
    fn host_of(core: &Core, url: &url::Url) -> Result<Hostname> {
        let upstream = &core.settings().upstream;
        if let Some(centre) = crate::address::authority(url).and_then(|a| {
            upstream
                .hosts
                .values()
                .filter_map(|hs| hs.via.as_ref())
                .find(|v| v.host.as_str() == a)
        }) {
            return Ok(centre.host.clone());
        }
        Hostname::parse(url.host_str().unwrap_or_default())
            .map_err(|e| Error::unexpected(format!("release origin {url}: {e}")))
    }

    fn dir(product: Product, version: &Version) -> [String; 3] {
        ["releases".into(), product.to_string(), version.to_string()]
    }

    fn record_key(product: Product, version: &Version) -> Key {
        let [a, b, c] = Self::dir(product, version);
        Key::new([a, b, c, "release.json".into()])
    }

    fn copy_key(product: Product, version: &Version, signature: bool) -> Key {
        let [a, b, c] = Self::dir(product, version);
        let mut name = sums_filename(product, version);
        if signature {
            name.push_str(".sig");
        }
        Key::new([a, b, c, name])
    }

    /// The verified record of a release: from the store, or fetched, verified and stored once.
    pub async fn release(
        &self,
        product: Product,
        version: &Version,
        reach: &Reach,
    ) -> Result<Arc<ReleaseRecord>> {
        self.enabled()?;
        self.judge(product, version).await?;
        let storage = self.core.releases().storage().clone();
        if let Some(record) = stored_record(storage.as_ref(), product, version).await? {
            return Ok(Arc::new(record));
        }
        reach.check(format!("{product} {version}"))?;
        let key = (product, version.clone());
        if let Some(missing) = self.missing.get(&key).await {
            return Err(missing);
        }
        self.core.origin(format!("{product} {version}"))?;
        self.listed(product, version, reach).await?;
        let work = {
            let core = self.core.clone();
            let (sums_url, sig_url) = (
                self.origin_url(product, version, &sums_filename(product, version))?,
                self.origin_url(product, version, &signature_filename(product, version))?,
            );
            let verifier = self.verifier.clone().map_err(Error::unexpected)?;
            let version = version.clone();
            move || async move {
                let what = format!("{product} {version}");
                let upstream = core.origin(&what)?;
                let host = Self::host_of(&core, &sums_url)?;
                let sums = upstream
                    .small_file(&host, Operation::Shasums, sums_url.as_str())
                    .await
                    .map_err(|e| match e {
                        crate::upstream::UpstreamError::Status { status: 404, .. } => {
                            Error::NotFound(format!(
                                "{what} is listed by its vendor, but the release host has no \
                                 {} ({e})",
                                sums_url
                                    .path_segments()
                                    .and_then(|mut s| s.next_back())
                                    .unwrap_or_default()
                            ))
                        }
                        e => e.into(),
                    })?;
                let signature = upstream
                    .small_file(&host, Operation::Signature, sig_url.as_str())
                    .await?;
                let record = verify_release_sums(&verifier, product, &version, &sums, &signature)
                    .map_err(|e| {
                    if let Some(v) = e.as_verification() {
                        core.metrics().verification_failed(v.reason());
                    }
                    tracing::error!(release = %what, "refused: {e}");
                    e
                })?;
                store_release(core.releases().storage().as_ref(), &record, sums, signature).await?;
                tracing::info!(release = %what, key = %record.signed_by, "verified a release's SHA256SUMS");
                Ok(Arc::new(record))
            }
        };
        let result = self.records.run(key.clone(), work).await.0;
        if let Err(e @ Error::NotFound(_)) = &result {
            // A definitive answer of the release host: remembered, like "no such provider".
            self.missing.insert(key, e.clone()).await;
        }
        result
    }

    /// Whether the vendor lists `version`: in the kept list of releases, or in that list
    /// fetched again when it does not have it and is older than `cache.not_found_ttl` (once
    /// for every request waiting, so unknown versions cost at most one list fetch per
    /// interval). 404 when it is not listed.
    async fn listed(&self, product: Product, version: &Version, reach: &Reach) -> Result<()> {
        let list = self.vendor_list(product, reach).await?;
        if list.release(version).is_some() {
            return Ok(());
        }
        let age = self.lists.now().saturating_sub(list.fetched_at);
        let rules = self.lists.rules();
        if !rules.offline && std::time::Duration::from_secs(age) >= rules.not_found_ttl {
            let list = self
                .lists
                .refresh(&product, self.list_fetch(product)?)
                .await?;
            if list.release(version).is_some() {
                return Ok(());
            }
        }
        Err(Error::NotFound(format!(
            "{product} {version} is not a release: its vendor's list of releases does not have it"
        )))
    }

    /// A product's list of releases, as its vendor publishes it (HashiCorp's `index.json`,
    /// OpenTofu's `api.json`): from the cache while fresh, refreshed in the background while
    /// stale, served stale while the origin fails (`cache.index_ttl`, `cache.stale_if_error`).
    /// Releases the version policy refuses are left out.
    pub async fn list(&self, product: Product, reach: &Reach) -> Result<Arc<ReleaseList>> {
        let list = self.vendor_list(product, reach).await?;
        let Some((releases, _)) = self.core.sift(
            Kind::Release,
            product.as_str(),
            &list.releases,
            |r| &r.version,
            &list.seen,
        ) else {
            return Ok(list);
        };
        Ok(Arc::new(ReleaseList {
            releases,
            ..(*list).clone()
        }))
    }

    /// Judges one release, by when the kept list of releases first had it.
    pub async fn judge(&self, product: Product, version: &Version) -> Result<()> {
        if self.core.policy().is_open(Kind::Release) {
            return Ok(());
        }
        let seen = match self.lists.cached(&product).await {
            Some(list) if list.found => seen_in(
                &list.seen,
                list.release(version).is_some(),
                version,
                self.core.policy().now(),
            ),
            _ => None,
        };
        self.core
            .judge(Kind::Release, product.as_str(), version, seen)
    }

    /// The vendor's list of `product`'s releases as kept (memory, else the store), whatever its
    /// age; the policy's views read when each release was first seen from it.
    pub async fn kept_list(&self, product: Product) -> Option<Arc<ReleaseList>> {
        self.lists.cached(&product).await
    }

    /// The vendor's list, whatever the policy says of its releases.
    async fn vendor_list(&self, product: Product, reach: &Reach) -> Result<Arc<ReleaseList>> {
        self.enabled()?;
        if let Reach::CacheOnly(_) = reach {
            // A client that reads only the cache gets the list as it is, however old.
            if let Some(list) = self.lists.cached(&product).await {
                return Ok(list);
            }
            reach.check(format!("the list of {product} releases"))?;
        }
        self.lists.get(&product, self.list_fetch(product)?).await
    }

    /// How a product's list of releases is fetched from its vendor.
    fn list_fetch(
        &self,
        product: Product,
    ) -> Result<
        impl FnOnce() -> futures_util::future::BoxFuture<'static, Result<ReleaseList>> + Send + 'static,
    > {
        let r = &self.core.settings().releases;
        let url = match product {
            Product::Terraform => joined(&r.hashicorp_url, ["terraform", "index.json"])?,
            Product::Tofu => r.opentofu_index_url.clone(),
        };
        let url = self.through_centre(url, || match product {
            Product::Terraform => "terraform/index.json".into(),
            Product::Tofu => "tofu/api.json".into(),
        })?;
        let core = self.core.clone();
        Ok(move || {
            async move {
                let what = format!("the list of {product} releases");
                let host = Self::host_of(&core, &url)?;
                let body = core
                    .origin(&what)?
                    .small_file(&host, Operation::Versions, url.as_str())
                    .await?;
                let bad = |e: serde_json::Error| {
                    Error::from(crate::upstream::UpstreamError::BadDocument(format!(
                        "{what} ({url}): {e}"
                    )))
                };
                let now = crate::clock::now_secs();
                Ok(match product {
                    Product::Terraform => ReleaseList::from_hashicorp(
                        product,
                        serde_json::from_slice::<HashicorpIndex>(&body).map_err(bad)?,
                        now,
                    ),
                    Product::Tofu => ReleaseList::from_tofu(
                        serde_json::from_slice::<TofuIndex>(&body).map_err(bad)?,
                        now,
                    ),
                })
            }
            .boxed()
        })
    }

    /// Adds a release that entered the cache without its vendor's list (an import) to the
    /// kept list, so that a mirror cut off from the origin lists it too.
    pub async fn list_release(&self, record: &ReleaseRecord) -> Result<()> {
        let (product, version) = (record.product, &record.version);
        let mut files: Vec<String> = record.all_builds().map(|(key, _)| key.filename()).collect();
        files.push(sums_filename(product, version));
        files.push(signature_filename(product, version));
        self.lists
            .update(&product, |list| {
                list.product = product;
                if list.releases.iter().any(|r| &r.version == version) {
                    return false;
                }
                list.releases.push(ListedRelease {
                    version: version.clone(),
                    files,
                });
                list.releases.sort_by(|a, b| a.version.cmp(&b.version));
                true
            })
            .await?;
        Ok(())
    }

    /// Forgets a release whose zips are all gone (`prune`): its record first, so no reader
    /// finds half of it, then the SHA256SUMS copies; and, with `unlist` (a mirror that serves
    /// only what it holds), its entry in the kept list. Fetched again if asked for.
    pub async fn remove_release(
        &self,
        product: Product,
        version: &Version,
        unlist: bool,
    ) -> Result<()> {
        let storage = self.core.releases().storage();
        storage.delete(&Self::record_key(product, version)).await?;
        for signature in [false, true] {
            storage
                .delete(&Self::copy_key(product, version, signature))
                .await?;
        }
        if unlist {
            self.lists.unlist(&product, version).await?;
        }
        Ok(())
    }

    /// The stored SHA256SUMS or its signature, verified before they were stored.
    pub async fn checksums(
        &self,
        product: Product,
        version: &Version,
        signature: bool,
        reach: &Reach,
    ) -> Result<Bytes> {
        self.release(product, version, reach).await?;
        self.core
            .releases()
            .storage()
            .read(&Self::copy_key(product, version, signature))
            .await?
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "{product} {version}: SHA256SUMS is not in the cache"
                ))
            })
    }

    /// The signed SHA-256 of a build, from its release's record; 404 when the release has no
    /// such build.
    async fn signed_sha256(&self, key: &ReleaseKey, reach: &Reach) -> Result<(Sha256, u64)> {
        let record = self.release(key.product, &key.version, reach).await?;
        match record.sha256_of(key) {
            Some(sha256) => Ok((sha256.clone(), record.fetched_at)),
            None => Err(Error::NotFound(format!(
                "{} {} has no {} for {}",
                key.product,
                key.version,
                key.packing.suffix(),
                key.platform
            ))),
        }
    }

    /// What a `HEAD` of a release build answers, without downloading it: the download in
    /// progress, the stored file, or what its signed SHA256SUMS says (size unknown).
    pub async fn build_head(&self, key: &ReleaseKey, reach: &Reach) -> Result<ArchiveHead> {
        self.enabled()?;
        self.judge(key.product, &key.version).await?;
        if let Some(fill) = self.core.release_fills.get(key) {
            return Ok(ArchiveHead {
                sha256: fill.sha256.clone(),
                size: fill.announced_size(),
                modified: fill.started_at,
            });
        }
        if let Some(found) = self.core.releases().open(key).await? {
            return Ok(ArchiveHead {
                sha256: found.record.sha256,
                size: Some(found.record.size),
                modified: found.modified,
            });
        }
        reach.check(format!("release build {key}"))?;
        let (sha256, fetched_at) = self.signed_sha256(key, reach).await?;
        Ok(ArchiveHead {
            sha256,
            size: None,
            modified: std::time::UNIX_EPOCH + std::time::Duration::from_secs(fetched_at),
        })
    }

    /// A release build: from the store, or streamed from its one download as it is checked.
    pub async fn build(self: &Arc<Self>, key: &ReleaseKey, reach: &Reach) -> Result<ArchiveBody> {
        self.enabled()?;
        self.judge(key.product, &key.version).await?;
        loop {
            if let Some(found) = self.core.releases().open(key).await? {
                self.core
                    .metrics()
                    .lookup(LookupKind::ReleaseZip, Lookup::Hit);
                // What `provender prune` goes by.
                let (core, owned) = (self.core.clone(), key.clone());
                tokio::spawn(async move { core.releases().touch(&owned).await });
                let mut stream = found.body;
                if let Some(budget) = self.core.budget() {
                    // Held by the response body: a build being read is never evicted.
                    let lease = budget.lease(key, found.record.size);
                    stream = stream
                        .map(move |chunk| {
                            let _held = &lease;
                            chunk
                        })
                        .boxed();
                }
                return Ok(ArchiveBody {
                    sha256: found.record.sha256,
                    size: Some(found.record.size),
                    modified: found.modified,
                    stream,
                });
            }
            let (sha256, _) = self.signed_sha256(key, reach).await?;
            reach.check(format!("release build {key}"))?;
            let (fill, leader) = self.fill_for(key, &sha256)?;
            self.core.metrics().lookup(
                LookupKind::ReleaseZip,
                if leader { Lookup::Miss } else { Lookup::Joined },
            );
            match fill.ready().await? {
                Ready::Streaming(size) => {
                    return Ok(ArchiveBody {
                        sha256: fill.sha256.clone(),
                        size,
                        modified: fill.started_at,
                        stream: fill.stream(),
                    });
                }
                Ready::Stored => continue,
            }
        }
    }

    /// Makes sure a release build is in the store (fetching and checking it if needed)
    /// without opening it, for `seed`. Returns its size and whether it was fetched just now.
    pub async fn ensure_build(self: &Arc<Self>, key: &ReleaseKey) -> Result<(u64, bool)> {
        self.enabled()?;
        self.judge(key.product, &key.version).await?;
        if let Some(found) = self.core.releases().record(key).await? {
            return Ok((found.size, false));
        }
        let (sha256, _) = self.signed_sha256(key, &Reach::Origin).await?;
        self.fill_for(key, &sha256)?.0.finished().await?;
        let stored = self.core.releases().record(key).await?.ok_or_else(|| {
            Error::unexpected(format!(
                "release build {key} vanished right after it was stored"
            ))
        })?;
        Ok((stored.size, true))
    }

    /// Joins the download of `key` in progress, or starts it (then `true`).
    fn fill_for(
        self: &Arc<Self>,
        key: &ReleaseKey,
        sha256: &Sha256,
    ) -> Result<(Arc<Fill<ReleaseKey>>, bool)> {
        let url = self.origin_url(key.product, &key.version, &key.filename())?;
        // Held back whole: see the module's header.
        let hold_back = HoldBack::Whole {
            max: self.core.settings().releases.max_build_size,
            key: "releases.max_build_size",
        };
        Ok(self.core.release_fills.join_or_start(key, || {
            let fill = Arc::new(
                Fill::new(
                    key.clone(),
                    sha256.clone(),
                    SignatureKind::Official,
                    true,
                    None,
                )
                .holding_back(hold_back),
            );
            let (this, task_fill) = (self.clone(), fill.clone());
            tokio::spawn(async move {
                let result = this.fill_zip(&task_fill, url).await;
                if let Err(e) = &result {
                    tracing::warn!(release = %task_fill.key, "release build not cached: {e}");
                }
                this.core.release_fills.finish(&task_fill, result);
            });
            fill
        }))
    }

    async fn fill_zip(&self, fill: &Fill<ReleaseKey>, url: url::Url) -> Result<()> {
        let key = &fill.key;
        let core = self.core.clone();
        // One download for the fleet, as for provider archives.
        let _lease = match core.fleet_turn(fill, core.releases()).await {
            Turn::Fetch(lease) => lease,
            Turn::Stored => {
                tracing::info!(release = %key, "another replica stored the zip; serving it from the store");
                return Ok(());
            }
        };
        let what = format!("release zip {key}");
        let origin = {
            let core = core.clone();
            async move {
                let host = Self::host_of(&core, &url)?;
                let download = core.origin(what)?.archive(&host, url.as_str()).await?;
                Ok(OriginBody::from(download))
            }
            .boxed()
        };
        let mismatch = |found: Sha256| {
            core.metrics()
                .verification_failed(crate::metrics::VerificationReason::ArchiveChecksum);
            tracing::error!(release = %key, "the zip does not match its signed SHA-256");
            Error::verification(
                crate::error::Subject::Release {
                    product: key.product,
                    version: key.version.clone(),
                },
                Failure::ArchiveChecksum {
                    file: key.filename(),
                    expected: fill.sha256.clone(),
                    found,
                },
            )
        };
        let (staged, digest) = core.stream_checked(fill, origin, mismatch).await?;
        let record = ReleaseZip {
            sha256: digest.sha256,
            size: digest.size,
        };
        self.core.releases().commit(key, staged, &record).await?;
        self.core.release_committed(key, record.size).await;
        tracing::info!(release = %key, size = record.size, "cached a release build");
        Ok(())
    }
}
