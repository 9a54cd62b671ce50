//! The provider network mirror protocol (`index.json`, `<version>.json`, archives) and, in
//! `facade.rs`, the provider registry protocol, both answered from the core's verified records
//! and archives. Documents that carry URLs are rendered by the server, which knows its base URL
//! and how it signs them.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::StreamExt;

use super::Fill;
use super::core::{Core, Reach, Ready};
use crate::address::{Platform, ProviderAddr, Version};
use crate::cache::{ArchiveKind, Opened};
use crate::error::{Error, Result};
use crate::hash::Sha256;
use crate::metrics::{Lookup, LookupKind};
use crate::records::{ArchiveKey, VersionRecord};
use crate::trust::SignatureKind;

/// How long a pre-signed archive URL handed out by `cache.redirect_downloads` works.
const REDIRECT_TTL: Duration = Duration::from_secs(15 * 60);

/// An archive on its way to a client: from the store, or from a download in progress.
pub struct ArchiveBody {
    /// SHA-256 (known before a download starts; the bytes are checked against it).
    pub sha256: Sha256,
    /// Known for stored archives, and for downloads whose origin sent a `Content-Length`.
    pub size: Option<u64>,
    pub modified: SystemTime,
    /// The bytes; ends with an error (not a clean end) if a download fails verification.
    pub stream: futures_util::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>,
}

/// How an archive request is answered.
pub enum Served {
    /// The bytes, from the store or from a download in progress.
    Body(ArchiveBody),
    /// A redirect to a pre-signed URL of the object store (`cache.redirect_downloads`), for a
    /// stored archive.
    Redirect(url::Url),
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
    pub sha256: Sha256,
    pub size: Option<u64>,
    pub modified: SystemTime,
}

/// The provider protocols' front-end.
#[derive(Clone)]
pub struct ProviderMirror {
    pub(super) core: Arc<Core>,
}

impl ProviderMirror {
    pub fn new(core: Arc<Core>) -> ProviderMirror {
        ProviderMirror { core }
    }

    /// `:hostname/:namespace/:type/index.json`
    pub async fn index(&self, addr: &ProviderAddr, reach: &Reach) -> Result<Bytes> {
        Ok(self.core.versions(addr, reach).await?.to_mirror_json())
    }

    /// `:hostname/:namespace/:type/:version.json`: the verified version record, which the
    /// server renders with its own archive URLs.
    pub async fn version(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        reach: &Reach,
    ) -> Result<Arc<VersionRecord>> {
        self.core.check_host(addr)?;
        self.core.version_record(addr, version, reach).await
    }

    /// `:hostname/:namespace/:type/terraform-provider-:type_:version_:os_:arch.zip`
    ///
    /// A stored archive is served from the store; otherwise the caller joins (or starts) the
    /// archive's download and receives its bytes as they arrive.
    pub async fn archive(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
        reach: &Reach,
    ) -> Result<Served> {
        let key = self.core.archive_key(addr, version, platform)?;
        self.core.judge_provider(addr, version).await?;
        if let Some(fill) = self.core.join_fill(&key) {
            self.core.admit(&key, fill.trust)?;
            self.core
                .metrics()
                .lookup(LookupKind::Archive, Lookup::Joined);
            if let Some(body) = self.body_from_fill(fill).await? {
                return Ok(Served::Body(body));
            }
        }
        if let Some(served) = self.stored(&key).await? {
            return Ok(served);
        }
        reach.check(format!("archive {key}"))?;
        let (pkg, trust) = self.core.package_to_fetch(&key).await?;
        let (fill, leader) = self.core.fill_for(&key, &pkg, trust);
        self.core.metrics().lookup(
            LookupKind::Archive,
            if leader { Lookup::Miss } else { Lookup::Joined },
        );
        if let Some(body) = self.body_from_fill(fill).await? {
            return Ok(Served::Body(body));
        }
        self.stored(&key).await?.ok_or_else(|| {
            Error::unexpected(format!(
                "archive {key} was stored by another replica but cannot be read from the store"
            ))
        })
    }

    /// Serves an archive from the store (a redirect to it, or its bytes), if it is there.
    async fn stored(&self, key: &ArchiveKey) -> Result<Option<Served>> {
        if self.core.settings().cache.redirect_downloads {
            if let Some(info) = self.core.archive_info(key).await? {
                let trust = self.core.archive_trust(key, &info).await;
                self.core.admit(key, trust)?;
                if let Some(url) = self.core.archives().signed_url(key, REDIRECT_TTL).await? {
                    self.core.metrics().lookup(LookupKind::Archive, Lookup::Hit);
                    self.served(trust);
                    self.record_use(key);
                    return Ok(Some(Served::Redirect(url)));
                }
            }
        }
        let Some(found) = self.core.open_archive(key).await? else {
            return Ok(None);
        };
        let trust = self.core.archive_trust(key, &found.record).await;
        self.core.admit(key, trust)?;
        self.core.metrics().lookup(LookupKind::Archive, Lookup::Hit);
        if let Some(rec) = self
            .core
            .meta()
            .versions
            .get(&(key.addr.clone(), key.version.clone()))
            .await
        {
            self.core.want_hashes(&key.addr, &key.version, &rec);
        }
        self.served(trust);
        let size = found.record.size;
        let mut body = ArchiveBody::from(found);
        self.record_use(key);
        if let Some(budget) = self.core.budget() {
            // Held by the response body: an archive being read is never evicted.
            let lease = budget.lease(key, size);
            body.stream = body
                .stream
                .map(move |chunk| {
                    let _held = &lease;
                    chunk
                })
                .boxed();
        }
        Ok(Some(Served::Body(body)))
    }

    /// Records in the store, in the background, that a stored archive was served (for the
    /// budget after a restart, and for `provender prune`).
    fn record_use(&self, key: &ArchiveKey) {
        let (store, key) = (self.core.archives().clone(), key.clone());
        tokio::spawn(async move { store.touch(&key).await });
    }

    /// Counts an archive response by the trust level of what it serves.
    fn served(&self, trust: SignatureKind) {
        self.core
            .metrics()
            .archive_responses
            .with_label_values(&[trust.as_str()])
            .inc();
    }

    /// The body of a response that streams from `fill`, or `None` when another replica stored
    /// the archive instead (then it is read from the store).
    async fn body_from_fill(&self, fill: Arc<Fill>) -> Result<Option<ArchiveBody>> {
        let Ready::Streaming(size) = fill.ready().await? else {
            return Ok(None);
        };
        self.served(fill.trust);
        Ok(Some(ArchiveBody {
            sha256: fill.sha256.clone(),
            size,
            modified: fill.started_at,
            stream: fill.stream(),
        }))
    }

    /// What a `HEAD` of an archive answers, without downloading it: a stored archive's size, a
    /// download in progress's announced size, or else just the SHA-256 the origin published
    /// (no download starts; the size is not known yet).
    pub async fn archive_head(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
        reach: &Reach,
    ) -> Result<ArchiveHead> {
        let key = self.core.archive_key(addr, version, platform)?;
        self.core.judge_provider(addr, version).await?;
        if let Some(fill) = self.core.fill_in_progress(&key) {
            self.core.admit(&key, fill.trust)?;
            return Ok(ArchiveHead {
                sha256: fill.sha256.clone(),
                size: fill.announced_size(),
                modified: fill.started_at,
            });
        }
        if let Some(found) = self.core.open_archive(&key).await? {
            self.core
                .admit(&key, self.core.archive_trust(&key, &found.record).await)?;
            return Ok(ArchiveHead {
                sha256: found.record.sha256,
                size: Some(found.record.size),
                modified: found.modified,
            });
        }
        reach.check(format!("archive {key}"))?;
        let (pkg, trust) = self.core.package_to_fetch(&key).await?;
        self.core.admit(&key, trust)?;
        let rec = self.core.version_record(addr, version, reach).await?;
        Ok(ArchiveHead {
            sha256: pkg.shasum,
            size: None,
            modified: std::time::UNIX_EPOCH + Duration::from_secs(rec.fetched_at),
        })
    }
}
