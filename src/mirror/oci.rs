//! The cache as an OCI registry for OpenTofu's `oci_mirror`: the same verified records and
//! archives as the network mirror, in the distribution API's shape.
//!
//! - **tags** are the provider's versions (the same version list as `index.json`);
//! - a **tag** names the version's image index, rendered from its verified version record (see
//!   [`crate::records::oci`]). Every layer needs its archive's size before anything is
//!   downloaded: the stored archive's, else what the origin stated (its registry's `packages`
//!   extension, else a `HEAD` of the download URL, recorded), else, for an origin that will not
//!   say, the archive is fetched first. An index never leaves out a platform the mirror serves;
//!   a platform whose size cannot be learnt fails the request.
//! - the manifests are kept in the store under their digests, and each layer digest is linked to
//!   its archive, before the tag is answered, so requests by digest work on every replica;
//! - a **layer blob** is the archive itself, served by [`ProviderMirror::archive`]: the same fill,
//!   verification, hold-back, trust policy and offline rules as the network mirror.
//!
//! A module repository (`<hostname>/modules/<namespace>/<name>/<system>`) is served from the
//! module registry's packages ([`ModuleRegistry`]): its tags are the module's versions, a tag
//! names one image manifest (`artifactType` `application/vnd.opentofu.modulepkg`, rendered by
//! [`oci::render_module`] from the version's stored zip) and its one layer is that zip, served
//! from the store. The same fetch, trust policy and cache-only rules as the module registry
//! door apply. A manifest is a pure function of the zip's record, so it is not stored apart:
//! resolving a tag keeps its manifest's and zip's digests in a digest index (a link per digest
//! naming the version, under `oci/<host>/modules/...`), and a request by digest reads that one
//! link, then answers only if the version's current zip still makes that digest. A made-up
//! digest costs one read of the store, never a listing of the module's versions.
//!
//! A provider tag resolved by a cache-only client (`fill = false`) asks no origin either: its
//! layers' sizes come from stored archives or recorded sizes, else the request is refused.
//!
//! If an archive turns out to have another size than the origin stated, its record is corrected
//! when it is stored and the documents are rendered again (new digests); a client holding the
//! old manifest fails on the size and asks again.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;

use super::core::{Core, Reach};
use super::{ArchiveBody, ArchiveHead, ModuleRegistry, ProviderMirror, Served};
use crate::address::{ModuleAddr, OciReference, Platform, ProviderAddr, Version};
use crate::cache::Flights;
use crate::error::{Error, Result};
use crate::metrics::{Lookup, LookupKind};
use crate::records::oci::{
    self, BlobLink, Document, Layer, ModuleDigest, ModuleZip, ProviderImage,
};
use crate::records::{ArchiveKey, VersionRecord};

/// A blob as served: the empty config, or a provider archive.
pub enum OciBlob {
    Config,
    Archive(Served),
}

/// What a `HEAD` of a blob answers.
pub enum OciBlobHead {
    Config,
    Archive(ArchiveHead),
}

/// The OCI distribution API's front-end (pull only).
pub struct OciRegistry {
    core: Arc<Core>,
    /// Layer blobs are the provider archives, served as the network mirror serves them.
    providers: ProviderMirror,
    /// Module repositories are the module registry's packages, as zips.
    modules: Arc<ModuleRegistry>,
    /// Provider versions rendered as OCI documents.
    images: moka::future::Cache<(ProviderAddr, Version), Arc<ProviderImage>>,
    /// One rendering per version, apart for cache-only requests (which never ask an origin).
    image_flights: Flights<(ProviderAddr, Version, bool), Arc<ProviderImage>, Error>,
    /// The digest index of module repositories, in memory (see [`Self::module_digest`]).
    module_digests: moka::future::Cache<(ModuleAddr, String), Version>,
}

impl OciRegistry {
    pub fn new(
        core: Arc<Core>,
        providers: ProviderMirror,
        modules: Arc<ModuleRegistry>,
    ) -> Arc<OciRegistry> {
        let entries = core.settings().cache.metadata_entries;
        Arc::new(OciRegistry {
            core,
            providers,
            modules,
            images: moka::future::Cache::builder().max_capacity(entries).build(),
            image_flights: Flights::default(),
            module_digests: moka::future::Cache::builder().max_capacity(entries).build(),
        })
    }

    /// The tags of a provider's repository: its versions, in lexical order.
    pub async fn oci_tags(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        reach: &Reach,
    ) -> Result<Vec<String>> {
        let index = self.core.versions(addr, reach).await?;
        let mut tags: Vec<String> = index.versions.iter().map(|v| v.version.oci_tag()).collect();
        tags.sort();
        Ok(tags)
    }

    /// The tags of a module's repository: its versions, in lexical order.
    pub async fn module_tags(
        self: &Arc<Self>,
        addr: &ModuleAddr,
        reach: &Reach,
    ) -> Result<Vec<String>> {
        let versions = self.modules.version_numbers(addr, reach).await?;
        let mut tags: Vec<String> = versions.iter().map(Version::oci_tag).collect();
        if versions.iter().any(|v| v.prerelease().is_none()) {
            tags.push(crate::address::LATEST.to_string());
        }
        tags.sort();
        Ok(tags)
    }

    /// The version a module's `latest` tag names: its newest version that is not a prerelease
    /// (among the cached ones, for a cache-only request).
    pub async fn module_latest(
        self: &Arc<Self>,
        addr: &ModuleAddr,
        reach: &Reach,
    ) -> Result<Version> {
        let versions = self.modules.version_numbers(addr, reach).await?;
        versions
            .into_iter()
            .filter(|v| v.prerelease().is_none())
            .max()
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "module {addr} has no version that is not a prerelease for the tag latest"
                ))
            })
    }

    /// A module version's manifest, by tag (its zip made first if needed) or by digest (among
    /// the module's zipped versions). `latest` is resolved by [`Self::module_latest`] first.
    pub async fn module_manifest(
        self: &Arc<Self>,
        addr: &ModuleAddr,
        reference: &OciReference,
        reach: &Reach,
    ) -> Result<Document> {
        match reference {
            OciReference::Tag(version) => {
                let zip = self.modules.module_zip(addr, version, reach).await?;
                let doc = oci::render_module(&module_title(addr, version), &zip);
                self.index_module(addr, version, &doc, &zip).await?;
                Ok(doc)
            }
            OciReference::Latest => {
                let version = self.module_latest(addr, reach).await?;
                Box::pin(self.module_manifest(addr, &OciReference::Tag(version), reach)).await
            }
            OciReference::Digest(sha256) => {
                self.modules.check_module_host(addr)?;
                let unknown = || {
                    Error::NotFound(format!(
                        "module {addr} has no manifest sha256:{sha256} (resolve a tag first)"
                    ))
                };
                let version = self.module_digest(addr, sha256.as_str()).await;
                let version = version.ok_or_else(unknown)?;
                // Still what the version's package makes (and still admitted).
                let zip = self.modules.module_zip(addr, &version, reach).await?;
                let doc = oci::render_module(&module_title(addr, &version), &zip);
                if doc.sha256 != sha256.as_str() {
                    return Err(unknown());
                }
                Ok(doc)
            }
        }
    }

    /// A blob of a module's repository: the empty config, or a version's zip.
    pub async fn module_blob(
        self: &Arc<Self>,
        addr: &ModuleAddr,
        sha256: &str,
        reach: &Reach,
    ) -> Result<OciBlob> {
        self.modules.check_module_host(addr)?;
        if sha256 == oci::EMPTY_DIGEST_HEX {
            return Ok(OciBlob::Config);
        }
        let version = self.module_layer(addr, sha256, reach).await?;
        let zip = self.modules.serve_module_zip(addr, &version, reach).await?;
        if zip.sha256 != sha256 {
            return Err(self.unknown_module_blob(addr, sha256));
        }
        Ok(OciBlob::Archive(Served::Body(ArchiveBody {
            sha256: zip.sha256,
            size: Some(zip.size),
            modified: zip.modified,
            stream: zip.body,
        })))
    }

    /// What a `HEAD` of a module's blob answers.
    pub async fn module_blob_head(
        self: &Arc<Self>,
        addr: &ModuleAddr,
        sha256: &str,
        reach: &Reach,
    ) -> Result<OciBlobHead> {
        self.modules.check_module_host(addr)?;
        if sha256 == oci::EMPTY_DIGEST_HEX {
            return Ok(OciBlobHead::Config);
        }
        let version = self.module_layer(addr, sha256, reach).await?;
        let zip = self.modules.module_zip(addr, &version, reach).await?;
        let package = self.modules.module_head(addr, &version).await?;
        Ok(OciBlobHead::Archive(ArchiveHead {
            sha256: zip.sha256,
            size: Some(zip.size),
            modified: package.modified,
        }))
    }

    /// The version whose current zip a layer digest names (by the digest index).
    async fn module_layer(
        self: &Arc<Self>,
        addr: &ModuleAddr,
        sha256: &str,
        reach: &Reach,
    ) -> Result<Version> {
        let version = self
            .module_digest(addr, sha256)
            .await
            .ok_or_else(|| self.unknown_module_blob(addr, sha256))?;
        let zip = self.modules.module_zip(addr, &version, reach).await?;
        if zip.sha256 != sha256 {
            return Err(self.unknown_module_blob(addr, sha256));
        }
        Ok(version)
    }

    /// The module version a manifest or layer digest was made for, by the digest index (in
    /// memory, else one read of the store): never a listing of the module's versions, whatever
    /// digest a client makes up.
    async fn module_digest(&self, addr: &ModuleAddr, sha256: &str) -> Option<Version> {
        let key = (addr.clone(), sha256.to_string());
        if let Some(version) = self.module_digests.get(&key).await {
            return Some(version);
        }
        let link = self.core.meta().read_module_digest(addr, sha256).await?;
        self.module_digests.insert(key, link.version.clone()).await;
        Some(link.version)
    }

    /// Keeps the digests of a module version's manifest and zip in the digest index before the
    /// tag's answer names them, so a request by digest finds them on every replica and after a
    /// restart (written once per digest and process).
    async fn index_module(
        &self,
        addr: &ModuleAddr,
        version: &Version,
        doc: &Document,
        zip: &ModuleZip,
    ) -> Result<()> {
        for sha256 in [doc.sha256.as_str(), zip.sha256.as_str()] {
            let key = (addr.clone(), sha256.to_string());
            if self.module_digests.get(&key).await.as_ref() == Some(version) {
                continue;
            }
            let meta = self.core.meta();
            let link = ModuleDigest {
                version: version.clone(),
            };
            if meta.read_module_digest(addr, sha256).await.as_ref() != Some(&link) {
                meta.write_module_digest(addr, sha256, &link).await?;
            }
            self.module_digests.insert(key, version.clone()).await;
        }
        Ok(())
    }

    fn unknown_module_blob(&self, addr: &ModuleAddr, sha256: &str) -> Error {
        Error::NotFound(format!(
            "module {addr} has no blob sha256:{sha256} (resolve a tag first)"
        ))
    }

    /// A manifest or index, by tag or digest.
    pub async fn oci_manifest(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        reference: &OciReference,
        reach: &Reach,
    ) -> Result<Document> {
        match reference {
            OciReference::Tag(version) => {
                Ok(self.oci_image(addr, version, reach).await?.index.clone())
            }
            OciReference::Latest => Err(Error::NotFound(format!(
                "{addr}: a provider's tags are its versions (there is no tag latest)"
            ))),
            OciReference::Digest(sha256) => {
                self.core.check_host(addr)?;
                let found = self.core.meta().read_oci_manifest(addr, sha256).await;
                self.core.metrics().lookup(
                    LookupKind::OciManifest,
                    if found.is_some() {
                        Lookup::Hit
                    } else {
                        Lookup::Miss
                    },
                );
                let doc = found.ok_or_else(|| {
                    Error::NotFound(format!(
                        "{addr} has no manifest sha256:{sha256} (resolve a tag first)"
                    ))
                })?;
                // A digest pins a version as a lock file does: the policy still decides.
                let manifest = match doc.first_manifest() {
                    Some(child) => self.core.meta().read_oci_manifest(addr, &child).await,
                    None => Some(doc.clone()),
                };
                if let Some(version) = manifest.and_then(|m| m.provider_version(addr)) {
                    self.core.judge_provider(addr, &version).await?;
                }
                Ok(doc)
            }
        }
    }

    /// A blob: the empty config, or a layer (an archive, fetched if needed).
    pub async fn oci_blob(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        sha256: &str,
        reach: &Reach,
    ) -> Result<OciBlob> {
        if sha256 == oci::EMPTY_DIGEST_HEX {
            self.core.check_host(addr)?;
            return Ok(OciBlob::Config);
        }
        let key = self.oci_layer(addr, sha256, reach).await?;
        let served = self
            .providers
            .archive(&key.addr, &key.version, &key.platform, reach)
            .await?;
        Ok(OciBlob::Archive(served))
    }

    /// What a `HEAD` of a blob answers, without downloading anything.
    pub async fn oci_blob_head(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        sha256: &str,
        reach: &Reach,
    ) -> Result<OciBlobHead> {
        if sha256 == oci::EMPTY_DIGEST_HEX {
            self.core.check_host(addr)?;
            return Ok(OciBlobHead::Config);
        }
        let key = self.oci_layer(addr, sha256, reach).await?;
        let mut head = self
            .providers
            .archive_head(&key.addr, &key.version, &key.platform, reach)
            .await?;
        if head.size.is_none() {
            let rec = self
                .core
                .version_record(&key.addr, &key.version, reach)
                .await?;
            head.size = rec.packages.get(&key.platform).and_then(|p| p.size);
        }
        Ok(OciBlobHead::Archive(head))
    }

    /// The archive a layer digest names: from its link, checked against the version record.
    async fn oci_layer(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        sha256: &str,
        reach: &Reach,
    ) -> Result<ArchiveKey> {
        self.core.check_host(addr)?;
        let unknown = || {
            Error::NotFound(format!(
                "{addr} has no blob sha256:{sha256} (resolve a tag first)"
            ))
        };
        let link = self
            .core
            .meta()
            .read_oci_blob(addr, sha256)
            .await
            .ok_or_else(unknown)?;
        let rec = self.core.version_record(addr, &link.version, reach).await?;
        match rec.packages.get(&link.platform) {
            Some(pkg) if pkg.shasum == sha256 => Ok(ArchiveKey {
                addr: addr.clone(),
                version: link.version,
                platform: link.platform,
            }),
            _ => Err(unknown()),
        }
    }

    /// The OCI documents of a version, rendered from its verified record (one flight per
    /// version) and kept in the store before they are handed out.
    pub async fn oci_image(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
        reach: &Reach,
    ) -> Result<Arc<ProviderImage>> {
        self.core.check_host(addr)?;
        let rec = self.core.version_record(addr, version, reach).await?;
        let key = (addr.clone(), version.clone());
        if let Some(image) = self.images.get(&key).await {
            if self.still_describes(&image, &rec) {
                self.core
                    .metrics()
                    .lookup(LookupKind::OciManifest, Lookup::Hit);
                return Ok(image);
            }
        }
        self.core
            .metrics()
            .lookup(LookupKind::OciManifest, Lookup::Miss);
        let this = self.clone();
        let (a, v) = key.clone();
        let cache_only = matches!(reach, Reach::CacheOnly(_));
        let owned = reach.clone();
        let work = move || async move {
            let image = Arc::new(this.render_image(&a, &v, &owned).await?);
            this.images.insert((a, v), image.clone()).await;
            Ok(image)
        };
        self.image_flights
            .run((key.0, key.1, cache_only), work)
            .await
            .0
    }

    /// Whether `image` was rendered from what `rec` says now (sizes get corrected).
    fn still_describes(&self, image: &ProviderImage, rec: &VersionRecord) -> bool {
        let served = self.served_platforms(rec);
        image.layers.len() == served.len()
            && image.layers.iter().all(|l| {
                rec.packages
                    .get(&l.platform)
                    .is_some_and(|p| p.shasum == l.sha256 && p.size.is_none_or(|s| s == l.size))
            })
    }

    /// The platforms of a version this mirror serves.
    fn served_platforms(&self, rec: &VersionRecord) -> Vec<Platform> {
        rec.packages
            .keys()
            .filter(|p| self.core.settings().upstream.platform_allowed(p))
            .cloned()
            .collect()
    }

    async fn render_image(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
        reach: &Reach,
    ) -> Result<ProviderImage> {
        let rec = self.core.version_record(addr, version, reach).await?;
        let platforms = self.served_platforms(&rec);
        if platforms.is_empty() {
            return Err(Error::NotFound(format!(
                "{addr} {version} has no package for a platform this mirror serves"
            )));
        }
        let sized = futures_util::stream::iter(platforms)
            .map(|platform| {
                let rec = &rec;
                async move {
                    let size = self
                        .layer_size(addr, version, rec, &platform, reach)
                        .await?;
                    Ok::<_, Error>((platform, size))
                }
            })
            .buffer_unordered(self.core.settings().upstream.concurrency)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        let stated: Vec<(Platform, u64)> = sized
            .iter()
            .filter(|(p, _)| rec.packages.get(p).is_some_and(|pkg| pkg.size.is_none()))
            .cloned()
            .collect();
        if !stated.is_empty() {
            self.core
                .meta()
                .set_stated_sizes(addr, version, &stated)
                .await?;
        }
        let layers: Vec<Layer> = sized
            .into_iter()
            .map(|(platform, size)| Layer {
                sha256: rec.packages[&platform].shasum.clone(),
                platform,
                size,
            })
            .collect();
        let image = oci::render(addr, version, &layers);
        // What a tag's answer names must be findable by digest first, on every replica.
        for (layer, (_, manifest)) in image.layers.iter().zip(&image.manifests) {
            let link = BlobLink {
                version: version.clone(),
                platform: layer.platform.clone(),
            };
            self.core
                .meta()
                .write_oci_blob(addr, layer.sha256.as_str(), &link)
                .await?;
            self.core.meta().write_oci_manifest(addr, manifest).await?;
        }
        self.core
            .meta()
            .write_oci_manifest(addr, &image.index)
            .await?;
        Ok(image)
    }

    /// An archive's size: the stored archive's, else recorded, else what its origin states,
    /// else (an origin that does not say) the archive is fetched to learn it. A cache-only
    /// request asks no origin: without a stored archive or recorded size it is refused.
    async fn layer_size(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
        rec: &VersionRecord,
        platform: &Platform,
        reach: &Reach,
    ) -> Result<u64> {
        let key = self.core.archive_key(addr, version, platform)?;
        if let Some(info) = self.core.archive_info(&key).await? {
            return Ok(info.size);
        }
        let pkg = &rec.packages[platform];
        if let Some(size) = pkg.size {
            return Ok(size);
        }
        reach.check(format!("the size of archive {key}"))?;
        let origin = self.core.origin(format!("archive {key}"));
        if let (Ok(upstream), Some(url)) = (origin, &pkg.download_url) {
            match upstream.archive_size(&addr.hostname, url).await {
                Ok(Some(size)) => return Ok(size),
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(archive = %key, "the origin does not tell the size ({e}); fetching the archive")
                }
            }
        }
        let (info, _) = self.core.ensure_archive(addr, version, platform).await?;
        Ok(info.size)
    }
}

/// The file name a module version's zip goes by (the layer's title).
fn module_title(addr: &ModuleAddr, version: &Version) -> String {
    format!("{}-{}-{}.zip", addr.name, addr.system, version)
}

/// The bytes of the empty config blob.
pub fn empty_config() -> Bytes {
    Bytes::from_static(oci::EMPTY_CONFIG)
}
