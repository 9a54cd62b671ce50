//! The module registry protocol, served from the mirror's cache.
//!
//! Under `<base>v1/modules/<hostname>/`, a CLI `host` block's `modules.v1` gets the protocol's
//! two calls. `versions` is the origin's list, cached with the same freshness rules as provider
//! version lists. `download` makes sure the version's package is in the store (fetched once,
//! whatever the origin's answer named: an HTTPS archive, a relative URL, a git repository at a
//! reference; repacked into a deterministic `.tar.gz`, see [`crate::package`]) and answers with
//! the package's URL on this mirror, in both forms clients read: `X-Terraform-Get`, and a JSON
//! `{"location": ...}` body. The package is then served from the store, by every replica, for
//! as long as the cache keeps it: a tag that moves upstream, a repository that is deleted, an
//! origin that is down change nothing.
//!
//! For OCI clients (OpenTofu's `oci://` module sources, see [`super::oci`]) a cached package is
//! also kept as a deterministic zip ([`crate::package::zip_package`]), made from the stored
//! package when first asked for (one flight per version) and committed beside it
//! ([`crate::cache::ModuleZips`]) with a record naming the package it was made from: a package
//! fetched again makes a new zip. The zip holds the record's `//subdir` at its root (the module
//! directory the CLI loads), and counts against `cache.max_size` like an archive.
//!
//! A version with no package yet is checked against the cached version list before its origin
//! is asked for it (see [`ModuleRegistry::module_record`]), so requests for a version that does
//! not exist cost the origin nothing each. Stored rather than made per request, because making one means
//! reading, unpacking and compressing the whole package, and a layer is fetched by every client.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use super::admission::{self, Expected, StageWriter};
use super::core::{Core, Reach, seen_in};
use crate::address::{ModuleAddr, Version};
use crate::cache::Flights;
use crate::error::{Error, Failure, RefusalKind, Result};
use crate::metrics::{Lookup, LookupKind, VerificationReason};
use crate::policy::Kind;
use crate::records::oci::ModuleZip;
use crate::records::publish::PublishedKind;
use crate::records::{FirstSeen, ModuleKey, ModuleRecord, ModuleSource, ModuleVersions, docs};
use crate::upstream::{Location, Operation};

/// A cached module package on its way to a client.
pub struct ModulePackage {
    pub sha256: crate::hash::Sha256,
    pub size: u64,
    pub modified: std::time::SystemTime,
    pub body: futures_util::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>,
}

/// How often a cached git package's reference is checked against its origin, to log a move.
const REF_CHECK_EVERY: Duration = Duration::from_secs(3600);

/// The module registry protocol's front-end.
pub struct ModuleRegistry {
    core: Arc<Core>,
    /// One package fetch per module version.
    flights: Flights<(ModuleAddr, Version), ModuleRecord, Error>,
    /// When each cached git package's reference was last checked against its origin.
    ref_checks: Mutex<HashMap<(ModuleAddr, Version), Instant>>,
    /// One zip made per module version.
    zip_flights: Flights<(ModuleAddr, Version), ModuleZip, Error>,
    /// Listed versions whose origin had no package, for `cache.not_found_ttl`.
    missing: moka::future::Cache<(ModuleAddr, Version), ()>,
}

impl ModuleRegistry {
    pub fn new(core: Arc<Core>) -> Arc<ModuleRegistry> {
        Arc::new(ModuleRegistry {
            flights: Flights::default(),
            ref_checks: Mutex::new(HashMap::new()),
            zip_flights: Flights::default(),
            missing: moka::future::Cache::builder()
                .max_capacity(core.settings().cache.metadata_entries)
                .time_to_live(core.settings().cache.not_found_ttl)
                .build(),
            core,
        })
    }

    pub(super) fn check_module_host(&self, addr: &ModuleAddr) -> Result<()> {
        if self.core.settings().upstream.host_allowed(&addr.hostname) || self.is_private(addr) {
            Ok(())
        } else {
            Err(Error::NotFound(format!(
                "module registry {} is not served by this mirror (upstream.allowed_hosts)",
                addr.hostname
            )))
        }
    }

    /// `v1/modules/:hostname/:namespace/:name/:system/versions`
    pub async fn module_versions(
        self: &Arc<Self>,
        addr: &ModuleAddr,
        reach: &Reach,
    ) -> Result<bytes::Bytes> {
        let versions = self
            .version_numbers(addr, reach)
            .await?
            .iter()
            .map(|v| docs::ModuleVersionDoc {
                version: v.to_string(),
            })
            .collect();
        Ok(docs::to_bytes(&docs::ModuleVersionsDoc {
            modules: vec![docs::ModuleVersionsEntry { versions }],
        }))
    }

    /// A module's versions: the origin's list, or for a cache-only request those in the store.
    /// What the policy refuses is left out.
    pub async fn version_numbers(&self, addr: &ModuleAddr, reach: &Reach) -> Result<Vec<Version>> {
        self.check_module_host(addr)?;
        let (versions, seen) = if self.is_private(addr) {
            (self.published_versions(addr).await?, FirstSeen::default())
        } else {
            match reach {
                Reach::Origin => {
                    let rec = self.module_version_list(addr).await?;
                    if !rec.found {
                        return Err(Error::NotFound(format!(
                            "the origin registry has no module {addr}"
                        )));
                    }
                    (rec.versions.clone(), rec.seen.clone())
                }
                Reach::CacheOnly(_) => {
                    let seen = self
                        .core
                        .module_lists()
                        .cached(addr)
                        .await
                        .map(|l| l.seen.clone())
                        .unwrap_or_default();
                    (self.cached_module_versions(addr, reach).await?, seen)
                }
            }
        };
        match self
            .core
            .sift(Kind::Module, &addr.to_string(), &versions, |v| v, &seen)
        {
            Some((kept, _)) => Ok(kept),
            None => Ok(versions),
        }
    }

    /// Judges one module version, by when its cached version list first had it.
    pub async fn judge_module(&self, addr: &ModuleAddr, version: &Version) -> Result<()> {
        if self.core.policy().is_open(Kind::Module) {
            return Ok(());
        }
        let seen = match self.core.module_lists().cached(addr).await {
            Some(list) if list.found => seen_in(
                &list.seen,
                list.versions.contains(version),
                version,
                self.core.policy().now(),
            ),
            _ => None,
        };
        self.core
            .judge(Kind::Module, &addr.to_string(), version, seen)
    }

    /// Whether a module is in a private namespace: published here, never fetched.
    pub fn is_private(&self, addr: &ModuleAddr) -> bool {
        self.core.settings().trust.private.has_module(addr)
    }

    /// A private module's versions: its publications that are published and not yanked.
    async fn published_versions(&self, addr: &ModuleAddr) -> Result<Vec<Version>> {
        let all = self
            .core
            .publications()
            .of(PublishedKind::Module, &addr.to_string())
            .await?;
        let versions: Vec<Version> = all
            .iter()
            .filter(|p| p.listed())
            .map(|p| p.version.clone())
            .collect();
        if versions.is_empty() {
            return Err(Error::NotFound(format!(
                "no version of module {addr} is published here"
            )));
        }
        Ok(versions)
    }

    /// The versions of a module whose packages are in the store (one listing, no origin).
    async fn cached_module_versions(
        &self,
        addr: &ModuleAddr,
        reach: &Reach,
    ) -> Result<Vec<Version>> {
        let mut versions: Vec<Version> = self
            .core
            .modules()
            .committed_under(&[
                addr.hostname.as_str(),
                &addr.namespace,
                &addr.name,
                &addr.system,
            ])
            .await?
            .into_iter()
            .map(|listed| listed.key.version)
            .collect();
        if versions.is_empty() {
            reach.check(format!("module {addr}"))?;
        }
        versions.sort();
        Ok(versions)
    }

    /// Whether a module version's package is in the cache (without fetching it).
    pub async fn module_cached(&self, addr: &ModuleAddr, version: &Version) -> Result<bool> {
        Ok(self
            .core
            .modules()
            .record(&ModuleKey::new(addr, version))
            .await?
            .is_some())
    }

    /// The version list: memory, then the store, then the origin, under the same freshness
    /// rules as provider version lists (see [`Listings::get`](crate::cache::Listings::get)).
    pub async fn module_version_list(&self, addr: &ModuleAddr) -> Result<Arc<ModuleVersions>> {
        self.core
            .module_lists()
            .get(addr, self.list_fetch(addr))
            .await
    }

    /// How a module's version list is fetched from its origin.
    fn list_fetch(
        &self,
        addr: &ModuleAddr,
    ) -> impl FnOnce() -> futures_util::future::BoxFuture<'static, Result<ModuleVersions>> + Send + 'static
    {
        let core = self.core.clone();
        let owned = addr.clone();
        move || {
            Box::pin(async move {
                let found = core
                    .origin(format!("module {owned}"))?
                    .module_versions(&owned)
                    .await?;
                Ok(ModuleVersions {
                    fetched_at: core.module_lists().now(),
                    found: found.is_some(),
                    versions: found.unwrap_or_default(),
                    seen: Default::default(),
                })
            }) as futures_util::future::BoxFuture<'static, Result<ModuleVersions>>
        }
    }

    /// Whether the origin lists `version` of a module, before its package is asked for: by the
    /// cached version list. A version the list does not name is asked for again only when the
    /// list is at least `cache.not_found_ttl` old (one refresh per interval, one flight), so
    /// requests for a version that does not exist never each reach the origin; a version the
    /// origin lists but has no package for is remembered as missing for `cache.not_found_ttl`.
    async fn check_listed(&self, addr: &ModuleAddr, version: &Version) -> Result<()> {
        let key = (addr.clone(), version.clone());
        if self.missing.get(&key).await.is_some() {
            return Err(Error::NotFound(format!(
                "the origin registry has no module {addr} {version} (remembered for \
                 cache.not_found_ttl)"
            )));
        }
        let lists = self.core.module_lists();
        let mut list = self.module_version_list(addr).await?;
        if list.found && !list.versions.contains(version) {
            let age = lists.now().saturating_sub(list.fetched_at);
            if age >= lists.rules().not_found_ttl.as_secs() && !lists.rules().offline {
                list = lists.refresh(addr, self.list_fetch(addr)).await?;
            }
        }
        if !list.found {
            return Err(Error::NotFound(format!(
                "the origin registry has no module {addr}"
            )));
        }
        if !list.versions.contains(version) {
            return Err(Error::NotFound(format!(
                "the origin registry does not list version {version} of module {addr}"
            )));
        }
        Ok(())
    }

    /// `v1/modules/:hostname/:namespace/:name/:system/:version/download`: the record of the
    /// cached package (fetched first if needed), from which the server renders its location.
    pub async fn module_download(
        self: &Arc<Self>,
        addr: &ModuleAddr,
        version: &Version,
        reach: &Reach,
    ) -> Result<ModuleRecord> {
        self.check_module_host(addr)?;
        self.module_record(addr, version, reach).await
    }

    /// `v1/modules/:hostname/:namespace/:name/:system/:version/module.tar.gz`: the cached
    /// package (fetched first if the cache does not have it), recorded as used.
    pub async fn serve_module_package(
        self: &Arc<Self>,
        addr: &ModuleAddr,
        version: &Version,
        reach: &Reach,
    ) -> Result<ModulePackage> {
        let package = self.module_package(addr, version, reach).await?;
        let (this, addr, version) = (self.clone(), addr.clone(), version.clone());
        tokio::spawn(async move {
            this.core
                .modules()
                .touch(&ModuleKey::new(&addr, &version))
                .await
        });
        Ok(package)
    }

    /// A module version's cached package (fetched first if the cache does not have it).
    pub async fn module_package(
        self: &Arc<Self>,
        addr: &ModuleAddr,
        version: &Version,
        reach: &Reach,
    ) -> Result<ModulePackage> {
        self.check_module_host(addr)?;
        self.judge_module(addr, version).await?;
        let key = ModuleKey::new(addr, version);
        let opened = match self.core.modules().open(&key).await? {
            Some(found) => {
                self.core
                    .metrics()
                    .lookup(LookupKind::ModuleArchive, Lookup::Hit);
                found
            }
            None => {
                // A record whose package is gone (removed by hand) is dropped and fetched again.
                if self.core.modules().record(&key).await?.is_some() {
                    self.core.modules().remove(&key).await?;
                }
                self.module_record(addr, version, reach).await?;
                self.core.modules().open(&key).await?.ok_or_else(|| {
                    Error::unexpected(format!(
                        "module {addr} {version} vanished from the store right after it was stored"
                    ))
                })?
            }
        };
        let rec = opened.record;
        self.admit_module(addr, version, &rec)?;
        Ok(ModulePackage {
            sha256: rec.sha256,
            size: rec.size,
            modified: opened.modified,
            body: opened.body,
        })
    }

    /// What a `HEAD` of a module package answers, without fetching anything: the cached
    /// package's size and SHA-256.
    pub async fn module_head(
        &self,
        addr: &ModuleAddr,
        version: &Version,
    ) -> Result<super::ArchiveHead> {
        self.check_module_host(addr)?;
        self.judge_module(addr, version).await?;
        match self
            .core
            .modules()
            .record(&ModuleKey::new(addr, version))
            .await?
        {
            Some(rec) => self
                .admit_module(addr, version, &rec)
                .map(|()| super::ArchiveHead {
                    sha256: rec.sha256,
                    size: Some(rec.size),
                    modified: std::time::UNIX_EPOCH + Duration::from_secs(rec.fetched_at),
                }),
            None => Err(Error::NotFound(format!(
                "module {addr} {version} is not cached yet; its download answer (or a GET) fetches it"
            ))),
        }
    }

    /// The zip of a module version's package (the package fetched first if needed and `reach`
    /// allows; the zip made from it if it has none yet): what its OCI manifest describes.
    pub async fn module_zip(
        self: &Arc<Self>,
        addr: &ModuleAddr,
        version: &Version,
        reach: &Reach,
    ) -> Result<ModuleZip> {
        self.check_module_host(addr)?;
        let rec = self.module_record(addr, version, reach).await?;
        let key = ModuleKey::new(addr, version);
        if let Some(zip) = self.core.module_zips().record(&key).await? {
            if zip.package_sha256 == rec.sha256 && zip.subdir == rec.subdir {
                return Ok(zip);
            }
        }
        let this = self.clone();
        let (a, v) = (addr.clone(), version.clone());
        let work = move || async move { this.make_module_zip(&a, &v, &rec).await };
        self.zip_flights
            .run((addr.clone(), version.clone()), work)
            .await
            .0
    }

    /// A module version's zip on its way to a client, recorded as a use of the package.
    pub async fn serve_module_zip(
        self: &Arc<Self>,
        addr: &ModuleAddr,
        version: &Version,
        reach: &Reach,
    ) -> Result<ModulePackage> {
        let key = ModuleKey::new(addr, version);
        let zip = self.module_zip(addr, version, reach).await?;
        let opened = match self.core.module_zips().open(&key).await? {
            Some(opened) if opened.record == zip => opened,
            // Removed (or quarantined) since its record was read: made again.
            _ => {
                let rec = self.module_record(addr, version, reach).await?;
                let zip = self.make_module_zip(addr, version, &rec).await?;
                match self.core.module_zips().open(&key).await? {
                    Some(opened) if opened.record == zip => opened,
                    _ => {
                        return Err(Error::unexpected(format!(
                            "the zip of module {addr} {version} vanished from the store right \
                             after it was stored"
                        )));
                    }
                }
            }
        };
        let mut body = opened.body;
        if let Some(budget) = self.core.budget() {
            // Held by the response body: a zip being read is never evicted.
            let lease = budget.lease(&key, opened.record.size);
            body = body
                .map(move |chunk| {
                    let _held = &lease;
                    chunk
                })
                .boxed();
        }
        let (this, touched) = (self.clone(), key.clone());
        tokio::spawn(async move {
            this.core.modules().touch(&touched).await;
            this.core.module_zips().touch(&touched).await;
        });
        Ok(ModulePackage {
            sha256: opened.record.sha256,
            size: opened.record.size,
            modified: opened.modified,
            body,
        })
    }

    /// Makes a module version's zip from its stored package (checked against its record on the
    /// way) and commits it with its record.
    async fn make_module_zip(
        &self,
        addr: &ModuleAddr,
        version: &Version,
        rec: &ModuleRecord,
    ) -> Result<ModuleZip> {
        let key = ModuleKey::new(addr, version);
        let opened = self.core.modules().open(&key).await?.ok_or_else(|| {
            Error::NotFound(format!("module {addr} {version} is not in the cache"))
        })?;
        let body = opened
            .body
            .map(|chunk| chunk.map_err(|e| Error::io("reading a stored module package", e)))
            .boxed();
        let package = admission::stage_stream(self.core.staging(), body, None).await?;
        Expected {
            sha256: &rec.sha256,
            size: Some(rec.size),
        }
        .check(&package.digest)?;
        let scratch = self
            .core
            .staging()
            .scratch_dir()
            .map_err(|e| Error::io("creating a scratch directory", e))?;
        let limits = self.core.settings().modules.limits;
        let staging = self.core.staging().clone();
        let runtime = tokio::runtime::Handle::current();
        let subject = Error::module(addr, Some(version));
        let subdir = rec.subdir.clone();
        let staged = tokio::task::spawn_blocking(move || -> Result<admission::Staged> {
            let unpacked = scratch.path().join("unpacked");
            let zipped = scratch.path().join("module.zip");
            let io = |doing: &'static str| move |e| Error::io(doing, e);
            std::fs::create_dir(&unpacked).map_err(io("creating a scratch directory"))?;
            let out = std::fs::File::create(&zipped).map_err(io("creating a scratch file"))?;
            let subdir = subdir.as_deref();
            crate::package::zip_package(package.file.path(), subdir, &unpacked, limits, out)
                .map_err(|e| Error::verification(subject, Failure::UnusablePackage(Arc::new(e))))?;
            let mut zipped = std::fs::File::open(&zipped).map_err(io("reading a scratch file"))?;
            Ok(admission::stage_read(
                &runtime,
                &staging,
                &mut zipped,
                None,
            )?)
        })
        .await
        .map_err(|e| Error::task("zipping task", e))??;
        let zip = ModuleZip {
            package_sha256: rec.sha256.clone(),
            sha256: staged.digest.sha256,
            size: staged.digest.size,
            subdir: rec.subdir.clone(),
        };
        admission::commit_module_zip(self.core.module_zips(), addr, version, staged.file, &zip)
            .await?;
        self.core.module_zip_committed(&key, zip.size).await;
        tracing::info!(module = %addr, %version, size = zip.size, sha256 = %zip.sha256, "zipped module package");
        Ok(zip)
    }

    /// `upstream.min_trust` against how a cached package was obtained: a refusal is a 403
    /// naming the rule, counted under `provender_policy_refusals_total`.
    fn admit_module(&self, addr: &ModuleAddr, version: &Version, rec: &ModuleRecord) -> Result<()> {
        self.core
            .settings()
            .trust
            .admit_module(addr, rec.trust)
            .map_err(|refusal| {
                match RefusalKind::of(&refusal) {
                    RefusalKind::Policy(rule) => self.core.metrics().policy_refused(rule),
                    RefusalKind::Failed(reason) => self.core.metrics().verification_failed(reason),
                }
                tracing::info!(module = %addr, %version, "refused by policy: {refusal}");
                Error::refused(
                    Error::module(addr, Some(version)),
                    refusal,
                    "module package",
                )
            })
    }

    /// The record of a cached module version, fetching the package first if needed (one
    /// fetch per version, shared with every concurrent request).
    pub async fn module_record(
        self: &Arc<Self>,
        addr: &ModuleAddr,
        version: &Version,
        reach: &Reach,
    ) -> Result<ModuleRecord> {
        self.judge_module(addr, version).await?;
        if let Some(rec) = self
            .core
            .modules()
            .record(&ModuleKey::new(addr, version))
            .await?
        {
            self.admit_module(addr, version, &rec)?;
            self.check_ref_later(addr, version, &rec, reach);
            return Ok(rec);
        }
        if self.is_private(addr) {
            return Err(Error::NotFound(format!(
                "module {addr} {version} is not published here"
            )));
        }
        reach.check(format!("module {addr} {version}"))?;
        self.core.origin(format!("module {addr} {version}"))?;
        self.check_listed(addr, version).await?;
        let this = self.clone();
        let (a, v) = (addr.clone(), version.clone());
        let work = move || async move {
            let fetched = this.fetch_module(&a, &v).await;
            if let Err(Error::NotFound(_)) = &fetched {
                this.missing.insert((a, v), ()).await;
            }
            fetched
        };
        let (result, leader) = self
            .flights
            .run((addr.clone(), version.clone()), work)
            .await;
        self.core.metrics().lookup(
            LookupKind::ModuleArchive,
            if leader { Lookup::Miss } else { Lookup::Joined },
        );
        result
    }

    /// Fetches a module version's package from wherever its origin's download answer says,
    /// repacks it, and commits it to the store with its record.
    async fn fetch_module(
        self: &Arc<Self>,
        addr: &ModuleAddr,
        version: &Version,
    ) -> Result<ModuleRecord> {
        let location = self
            .core
            .origin(format!("module {addr} {version}"))?
            .module_location(addr, version)
            .await?
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "the origin registry has no module {addr} {version}"
                ))
            })?;
        let modules = &self.core.settings().modules;
        let scratch = self
            .core
            .staging()
            .scratch_dir()
            .map_err(|e| Error::io("creating a scratch directory", e))?;
        // The fetched input: a staged archive, or a tar inside the scratch directory.
        let (_input, input_path, format, strip_top, subdir, source) = match location {
            Location::Archive {
                url,
                format,
                subdir,
                strip_top,
                sha256,
            } => {
                let fetched = self
                    .download_module_archive(addr, &url, sha256.as_ref())
                    .await?;
                let path = fetched.path().to_path_buf();
                let source = ModuleSource::Archive {
                    url: url.to_string(),
                };
                (Some(fetched), path, format, strip_top, subdir, source)
            }
            Location::Git {
                url,
                reference,
                subdir,
            } => {
                let fetched = self
                    .core
                    .origin(format!("module {addr} {version}"))?
                    .git_fetch(
                        &addr.hostname,
                        &url,
                        reference.as_deref(),
                        scratch.path(),
                        &modules.git,
                    )
                    .await?;
                tracing::info!(module = %addr, %version, %url, reference = reference.as_deref().unwrap_or("HEAD"), commit = %fetched.commit, "fetched module source from git");
                let source = ModuleSource::Git {
                    url: url.to_string(),
                    reference,
                    commit: fetched.commit,
                };
                let format = crate::package::Format::Tar;
                (None, fetched.tar, format, false, subdir, source)
            }
            Location::Indirect { url, .. } => {
                return Err(Error::unexpected(format!(
                    "module {addr} {version}: unresolved source {url}"
                )));
            }
        };
        let packed = StageWriter::create(self.core.staging(), None).await?;
        let unpacked = scratch.path().join("unpacked");
        let limits = modules.limits;
        let sub = subdir.clone();
        let subject = Error::module(addr, Some(version));
        let staged = tokio::task::spawn_blocking(move || -> Result<admission::Staged> {
            std::fs::create_dir(&unpacked)
                .map_err(|e| Error::io("creating a scratch directory", e))?;
            let mut packed = packed;
            crate::package::repack(
                &input_path,
                format,
                &unpacked,
                strip_top,
                sub.as_deref(),
                limits,
                &mut packed,
            )
            .map_err(|e| Error::verification(subject, Failure::UnusablePackage(Arc::new(e))))?;
            Ok(packed.finish()?)
        })
        .await
        .map_err(|e| Error::task("packing task", e))?;
        let staged = match staged {
            Ok(d) => d,
            Err(e) => {
                self.core
                    .metrics()
                    .verification_failed(VerificationReason::UnusableModulePackage);
                tracing::error!(module = %addr, %version, "{e}");
                return Err(e);
            }
        };
        let rec = ModuleRecord {
            source,
            subdir,
            sha256: staged.digest.sha256,
            size: staged.digest.size,
            fetched_at: crate::clock::now_secs(),
            trust: crate::records::ModuleTrust::Origin,
        };
        admission::commit_module(self.core.modules(), addr, version, staged.file, &rec).await?;
        tracing::info!(module = %addr, %version, size = rec.size, sha256 = %rec.sha256, "cached module package");
        Ok(rec)
    }

    /// Downloads a module archive into a staging file, checking it against the origin's
    /// `?checksum=` when it gave one.
    async fn download_module_archive(
        &self,
        addr: &ModuleAddr,
        url: &url::Url,
        sha256: Option<&crate::hash::Sha256>,
    ) -> Result<crate::cache::StagedFile> {
        let max = self.core.settings().modules.max_archive_size;
        let download = self
            .core
            .origin(format!("module {addr}"))?
            .download(
                &addr.hostname,
                Operation::ModuleArchive,
                url,
                max,
                "modules.max_archive_size",
            )
            .await?;
        let body = download
            .body
            .map(|chunk| chunk.map_err(Error::from))
            .boxed();
        let staged = admission::stage_stream(self.core.staging(), body, None).await?;
        if let Some(want) = sha256 {
            let expected = Expected {
                sha256: want,
                size: None,
            };
            if expected.check(&staged.digest).is_err() {
                let failure = Failure::PackageChecksum {
                    url: url.clone(),
                    expected: want.clone(),
                    found: staged.digest.sha256.clone(),
                };
                self.core.metrics().verification_failed(failure.reason());
                return Err(Error::verification(Error::module(addr, None), failure));
            }
        }
        Ok(staged.file)
    }

    /// For a package fetched from git: at most once per [`REF_CHECK_EVERY`] (counted from the
    /// fetch, so a fresh package costs the origin nothing), asks the origin where the reference
    /// points and logs when it moved (the cache keeps the commit it recorded). Only for a
    /// client that may reach the origins: a cache-only reader causes no origin request.
    fn check_ref_later(
        self: &Arc<Self>,
        addr: &ModuleAddr,
        version: &Version,
        rec: &ModuleRecord,
        reach: &Reach,
    ) {
        if matches!(reach, Reach::CacheOnly(_)) {
            return;
        }
        let ModuleSource::Git {
            url,
            reference: Some(reference),
            commit,
        } = &rec.source
        else {
            return;
        };
        let since_fetch = crate::clock::now_secs().saturating_sub(rec.fetched_at);
        if !self.core.online() || since_fetch < REF_CHECK_EVERY.as_secs() {
            return;
        }
        let key = (addr.clone(), version.clone());
        {
            let mut checked = self.ref_checks.lock().expect("ref check table lock");
            if checked
                .get(&key)
                .is_some_and(|at: &Instant| at.elapsed() < REF_CHECK_EVERY)
            {
                return;
            }
            checked.insert(key, Instant::now());
        }
        let this = self.clone();
        let (addr, version) = (addr.clone(), version.clone());
        let (url, reference, commit) = (url.clone(), reference.clone(), commit.clone());
        tokio::spawn(async move {
            let Ok(url) = url::Url::parse(&url) else {
                return;
            };
            let Ok(scratch) = this.core.staging().scratch_dir() else {
                return;
            };
            let limits = &this.core.settings().modules.git;
            let Ok(upstream) = this.core.origin(format!("module {addr}")) else {
                return;
            };
            match upstream
                .git_resolve(&addr.hostname, &url, &reference, scratch.path(), limits)
                .await
            {
                Ok(Some(now)) if now != commit => tracing::warn!(
                    module = %addr, %version, %url, %reference, cached = %commit, upstream = %now,
                    "the module's git reference moved upstream; the cache keeps the commit it was fetched at"
                ),
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(module = %addr, "cannot check the module's git reference: {e}")
                }
            }
        });
    }
}
