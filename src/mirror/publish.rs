//! Publishing to the private namespaces (`[publishing]`): the organisation's own provider
//! releases and module versions, taken in through the same admission, store and records as
//! everything fetched, and served by every door from there.
//!
//! A **provider release** is the files GoReleaser's Terraform template makes for one version:
//! `terraform-provider-<type>_<version>_<os>_<arch>.zip` for each platform,
//! `terraform-provider-<type>_<version>_SHA256SUMS`, optionally its detached signature
//! `..._SHA256SUMS.sig` and `..._manifest.json` (the plugin protocols). Every file must be one
//! of these, for this provider and version; SHA256SUMS must list every zip (and the manifest)
//! and nothing else; each zip must match its line and be a zip Terraform can install. A
//! publisher's signature is checked against the namespace's keys and kept. The registry then
//! signs SHA256SUMS with its own provider signing key, and the version record lists that key,
//! so the CLI verifies the signature itself; the record goes through
//! [`TrustPolicy::verify_sums`](crate::trust::TrustPolicy::verify_sums) like any origin's, which
//! classifies it `private`.
//!
//! A **module version** is an archive (`.tar.gz`, `.tar` or `.zip`), unpacked under the module
//! limits and repacked into the deterministic package every module is stored as.
//!
//! **Immutability.** Each version is claimed first (a conditional create of its
//! [`Publication`], `pending`), so two publishers of one version race safely; then the bytes
//! are committed, then the version's records, then the publication is marked `published`,
//! which lists it. A version published again with the same files is a no-op (a `pending` one
//! is completed); with other files, a conflict (409) that changes nothing. A version can be
//! yanked (no longer listed, still served to whoever names it), and removed only by an
//! operator's `provender unpublish`, which leaves an audit record.

use std::io::Read;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::BoxStream;

use super::admission::{self, AdmitError, Expected, StageWriter, Staged, VerifiedArchive};
use super::core::Core;
use crate::address::{ModuleAddr, Platform, ProviderAddr, Version};
use crate::cache::Claimed;
use crate::error::{Error, Result};
use crate::records::publish::{
    Publication, PublishError, PublishedFile, PublishedKind, State, Yank, digest_of,
};
use crate::records::{ArchiveKey, ModuleRecord, ModuleSource, ModuleTrust, Package, SumsRef};
use crate::trust::{SignatureKind, Verifier};

/// Most files one provider release may have.
const MAX_RELEASE_FILES: usize = 128;
/// Largest SHA256SUMS, signature or manifest taken.
const MAX_SMALL_FILE: u64 = 1 << 20;

/// One file of an upload, staged.
pub struct Upload {
    pub name: String,
    pub staged: Staged,
}

/// What a publication did.
#[derive(Debug)]
pub enum Outcome {
    /// Published now.
    Published(Publication),
    /// The same files were published before: nothing changed.
    Unchanged(Publication),
}

/// Publishing, over the core's stores.
pub struct Publisher {
    core: Arc<Core>,
}

impl Publisher {
    pub fn new(core: Arc<Core>) -> Publisher {
        Publisher { core }
    }

    fn limit(&self) -> u64 {
        self.core.settings().publishing.max_upload_size
    }

    /// 404 unless `namespace` under `host` is private (`publishing.namespaces`).
    pub fn check_namespace(&self, host: &crate::address::Hostname, namespace: &str) -> Result<()> {
        if self.core.settings().trust.private.contains(host, namespace) {
            Ok(())
        } else {
            Err(PublishError::NotPrivate {
                namespace: namespace.to_string(),
            }
            .into())
        }
    }

    /// The hostname published providers and modules are named under.
    pub fn hostname(&self) -> Option<&crate::address::Hostname> {
        self.core.settings().trust.private.hostname.as_ref()
    }

    /// Stages a request body within `publishing.max_upload_size`.
    pub async fn stage_body(
        &self,
        body: BoxStream<'static, std::result::Result<Bytes, std::io::Error>>,
    ) -> Result<Staged> {
        let limit = self.limit();
        let body = futures_util::StreamExt::boxed(futures_util::StreamExt::map(body, |chunk| {
            chunk.map_err(BodyError::Body)
        }));
        admission::stage_stream(self.core.staging(), body, Some(limit))
            .await
            .map_err(|e| match e {
                BodyError::Admit(AdmitError::TooLarge(_)) => {
                    PublishError::TooLarge { limit }.into()
                }
                BodyError::Admit(e) => Error::from(e),
                BodyError::Body(e) => {
                    PublishError::Tar(format!("the upload broke off: {e}")).into()
                }
            })
    }

    /// Splits a staged tar stream (plain or gzip-compressed) of release files into one staged
    /// file each, within `publishing.max_upload_size` in all: the stream as inflated, headers
    /// and everything skipped included. Only regular files at the top
    /// (`./` allowed) are taken; anything else is refused by name.
    pub async fn unpack_release(&self, tar: Staged) -> Result<Vec<Upload>> {
        let limit = self.limit();
        let staging = self.core.staging().clone();
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || -> Result<Vec<Upload>> {
            let file = std::fs::File::open(tar.file.path())
                .map_err(|e| Error::io("reading a staged upload", e))?;
            let file = std::io::BufReader::new(file);
            let input: Box<dyn Read> = match sniff(tar.file.path()) {
                Ok(crate::package::Format::TarGz) => Box::new(flate2::read::GzDecoder::new(file)),
                Ok(crate::package::Format::Tar) => Box::new(file),
                _ => {
                    return Err(PublishError::Tar(
                        "send the release files as a tar stream, plain or gzip-compressed".into(),
                    )
                    .into());
                }
            };
            // Every byte the tar reader inflates counts against the limit, not only the files
            // taken: headers, padding, PAX global headers, bodies of entries passed over.
            let mut archive = tar::Archive::new(crate::tarball::Inflated::new(input, limit));
            let mut out: Vec<Upload> = Vec::new();
            let mut left = limit;
            let tar_error = |e: crate::tarball::TarError| match e.problem {
                crate::tarball::TarProblem::TooLarge(_) => PublishError::TooLarge { limit },
                _ => PublishError::Tar(e.to_string()),
            };
            for member in crate::tarball::members(&mut archive).map_err(tar_error)? {
                let mut member = member.map_err(tar_error)?;
                let name = member.name();
                let name = name.strip_prefix("./").unwrap_or(&name).to_string();
                match member.kind() {
                    tar::EntryType::Directory if name.is_empty() || name == "." => continue,
                    tar::EntryType::Regular | tar::EntryType::Continuous => {}
                    _ => {
                        return Err(PublishError::Tar(format!(
                            "{name}: only regular files are taken"
                        ))
                        .into());
                    }
                }
                if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
                    return Err(PublishError::Tar(format!(
                        "{name}: only files at the top of the stream are taken"
                    ))
                    .into());
                }
                if out.len() == MAX_RELEASE_FILES {
                    return Err(
                        PublishError::Tar(format!("more than {MAX_RELEASE_FILES} files")).into(),
                    );
                }
                if out.iter().any(|u| u.name == name) {
                    return Err(PublishError::Duplicate { name }.into());
                }
                let staged =
                    admission::stage_read(&runtime, &staging, &mut member.body, Some(left))
                        .map_err(|e| match e {
                            AdmitError::TooLarge(_) => PublishError::TooLarge { limit }.into(),
                            AdmitError::Source(e) if crate::tarball::too_large(&e).is_some() => {
                                PublishError::TooLarge { limit }.into()
                            }
                            AdmitError::Source(e) => {
                                PublishError::Tar(format!("{name}: {e}")).into()
                            }
                            other => Error::from(other),
                        })?;
                left -= staged.digest.size;
                out.push(Upload { name, staged });
            }
            Ok(out)
        })
        .await
        .map_err(|e| Error::task("unpacking an upload", e))?
    }

    /// Publishes one provider release (see the module's documentation for the rules).
    pub async fn publish_provider(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        files: Vec<Upload>,
        who: &str,
    ) -> Result<Outcome> {
        self.check_namespace(&addr.hostname, &addr.namespace)?;
        let settings = self.core.settings().clone();
        let prefix = format!("terraform-provider-{}_{version}_", addr.type_);
        let sums_name = format!("{prefix}SHA256SUMS");
        let sig_name = format!("{sums_name}.sig");
        let manifest_name = format!("{prefix}manifest.json");
        let expected =
            format!("{prefix}<os>_<arch>.zip, {sums_name}, {sig_name} or {manifest_name}");
        let (mut sums, mut signature, mut manifest) = (None, None, None);
        let mut zips: Vec<(Platform, Upload)> = Vec::new();
        for upload in files {
            let name = upload.name.clone();
            if name == sums_name {
                sums = Some(small(&upload)?);
            } else if name == sig_name {
                signature = Some(small(&upload)?);
            } else if name == manifest_name {
                manifest = Some((small(&upload)?, file_of(&upload)));
            } else if let Some(platform) = name
                .strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(".zip"))
                .and_then(|p| Platform::parse(p).ok())
            {
                zips.push((platform, upload));
            } else if name.starts_with("terraform-provider-") && name.ends_with(".zip") {
                return Err(PublishError::WrongName {
                    name,
                    expected: format!("{addr} {version}"),
                }
                .into());
            } else {
                return Err(PublishError::UnexpectedFile { name, expected }.into());
            }
        }
        let sums = sums.ok_or_else(|| PublishError::Missing(sums_name.clone()))?;
        if zips.is_empty() {
            return Err(PublishError::Missing(format!("{prefix}<os>_<arch>.zip")).into());
        }
        zips.sort_by(|a, b| a.0.cmp(&b.0));
        let protocols = match &manifest {
            Some((bytes, _)) => protocols_of(&manifest_name, bytes)?,
            None => vec!["5.0".to_string()],
        };
        // SHA256SUMS lists exactly the uploaded zips (and manifest), each with its SHA-256.
        let mut published: Vec<PublishedFile> = zips.iter().map(|(_, u)| file_of(u)).collect();
        if let Some((_, file)) = &manifest {
            published.push(file.clone());
        }
        check_sums(&sums, &published)?;
        let publisher_key = self.publisher_signature(addr, &sums, signature.as_deref())?;
        let digest = digest_of(&published);
        let what = format!("{addr} {version}");
        let address = addr.to_string();
        if let Some(done) = self
            .already(PublishedKind::Provider, &address, version, &digest, &what)
            .await?
        {
            return Ok(done);
        }

        // Each zip: its line's SHA-256 and size, a zip Terraform can hash and unpack, and one
        // holding the executable Terraform looks for.
        let limits = settings.upstream.hash_limits();
        let mut verified: Vec<(Platform, VerifiedArchive)> = Vec::new();
        for (platform, upload) in zips {
            let file = file_of(&upload);
            let archive = admission::verify_archive(
                upload.staged,
                Expected {
                    sha256: &file.sha256,
                    size: Some(file.size),
                },
                limits,
            )
            .await
            .map_err(|e| PublishError::Unusable {
                name: upload.name.clone(),
                reason: e.to_string(),
            })?;
            let path = archive.file.path().to_path_buf();
            let (type_, os) = (addr.type_.clone(), platform.os.clone());
            tokio::task::spawn_blocking(move || executable_in(&path, &type_, &os))
                .await
                .map_err(|e| Error::task("reading a zip's entries", e))?
                .map_err(|reason| PublishError::Unusable {
                    name: upload.name.clone(),
                    reason,
                })?;
            verified.push((platform, archive));
        }

        // The registry signs SHA256SUMS; the record lists its key; the one trust gate checks it.
        let key =
            settings.publishing.signing_key.as_ref().ok_or_else(|| {
                Error::unexpected("publishing.signing_key is not loaded".to_string())
            })?;
        let registry_sig = key
            .sign(&sums)
            .map_err(|e| Error::unexpected(format!("signing {sums_name}: {e}")))?;
        let sums_ref = SumsRef {
            url: sums_name.clone(),
            signature_url: format!("{sums_name}.sig"),
            trust: None,
        };
        let mut packages = std::collections::BTreeMap::new();
        for (platform, archive) in &verified {
            packages.insert(
                platform.clone(),
                Package {
                    protocols: protocols.clone(),
                    filename: addr.archive_filename(version, platform),
                    download_url: None,
                    shasum: archive.info.sha256.clone(),
                    shasums_url: Some(sums_ref.url.clone()),
                    shasums_signature_url: Some(sums_ref.signature_url.clone()),
                    signing_keys: vec![key.signing_key().clone()],
                    h1: Some(archive.info.h1.clone()),
                    size: Some(archive.info.size),
                    reported_h1: None,
                },
            );
        }
        let trust = settings
            .trust
            .verify_sums(
                Verifier::hashicorp(),
                addr,
                version,
                &sums,
                &registry_sig,
                packages.iter(),
            )
            .map_err(publisher_refused)?;
        let sums_ref = SumsRef {
            trust: Some(trust),
            ..sums_ref
        };

        let publication = Publication {
            kind: PublishedKind::Provider,
            address: address.clone(),
            version: version.clone(),
            state: State::Pending,
            digest,
            files: published,
            platforms: verified.iter().map(|(p, _)| p.clone()).collect(),
            protocols: protocols.clone(),
            published_by: who.to_string(),
            published_at: crate::clock::now_secs(),
            publisher_signature: publisher_key
                .as_ref()
                .and(signature.as_deref())
                .map(|sig| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, sig)),
            publisher_key,
            yanked: None,
            claim: String::new(),
        };
        if let Some(done) = self.claim(&publication, &what).await? {
            return Ok(done);
        }
        for (platform, mut archive) in verified {
            archive.info.trust = Some(SignatureKind::Private);
            let key = ArchiveKey {
                addr: addr.clone(),
                version: version.clone(),
                platform,
            };
            match self.core.archives().record(&key).await? {
                Some(have) if have.sha256 == archive.info.sha256 => {}
                _ => {
                    let size = archive.info.size;
                    archive.commit(self.core.archives(), &key).await?;
                    self.core.archive_committed(&key, size).await;
                }
            }
        }
        self.core
            .meta()
            .merge_imported_version(
                addr,
                version,
                packages,
                vec![(sums_ref, Bytes::from(sums), Bytes::from(registry_sig))],
            )
            .await?;
        self.finish(publication).await
    }

    /// Publishes one module version from an archive (`.tar.gz`, `.tar` or `.zip`, told apart by
    /// their first bytes), repacked as every module package is.
    pub async fn publish_module(
        &self,
        addr: &ModuleAddr,
        version: &Version,
        archive: Staged,
        who: &str,
    ) -> Result<Outcome> {
        self.check_namespace(&addr.hostname, &addr.namespace)?;
        let format = sniff(archive.file.path())?;
        let limits = self.core.settings().modules.limits;
        let scratch = self
            .core
            .staging()
            .scratch_dir()
            .map_err(|e| Error::io("creating a scratch directory", e))?;
        let packed = StageWriter::create(self.core.staging(), None).await?;
        let unpacked = scratch.path().join("unpacked");
        let input = archive.file.path().to_path_buf();
        let staged = tokio::task::spawn_blocking(move || -> Result<Staged> {
            std::fs::create_dir(&unpacked)
                .map_err(|e| Error::io("creating a scratch directory", e))?;
            let mut packed = packed;
            crate::package::repack(&input, format, &unpacked, false, None, limits, &mut packed)
                .map_err(|e| PublishError::Package(e.to_string()))?;
            Ok(packed.finish()?)
        })
        .await
        .map_err(|e| Error::task("packing task", e))??;
        drop(archive);
        let file = PublishedFile {
            name: "module.tar.gz".into(),
            sha256: staged.digest.sha256.clone(),
            size: staged.digest.size,
        };
        let digest = digest_of(std::slice::from_ref(&file));
        let what = format!("module {addr} {version}");
        let address = addr.to_string();
        if let Some(done) = self
            .already(PublishedKind::Module, &address, version, &digest, &what)
            .await?
        {
            return Ok(done);
        }
        let publication = Publication {
            kind: PublishedKind::Module,
            address,
            version: version.clone(),
            state: State::Pending,
            digest,
            files: vec![file],
            platforms: Vec::new(),
            protocols: Vec::new(),
            published_by: who.to_string(),
            published_at: crate::clock::now_secs(),
            publisher_key: None,
            publisher_signature: None,
            yanked: None,
            claim: String::new(),
        };
        if let Some(done) = self.claim(&publication, &what).await? {
            return Ok(done);
        }
        let key = crate::records::ModuleKey::new(addr, version);
        let present = self
            .core
            .modules()
            .record(&key)
            .await?
            .is_some_and(|r| r.sha256 == staged.digest.sha256);
        if !present {
            let rec = ModuleRecord {
                source: ModuleSource::Published,
                subdir: None,
                sha256: staged.digest.sha256.clone(),
                size: staged.digest.size,
                fetched_at: crate::clock::now_secs(),
                trust: ModuleTrust::Private,
            };
            admission::commit_module(self.core.modules(), addr, version, staged.file, &rec).await?;
        }
        self.finish(publication).await
    }

    /// Marks a claimed publication whose bytes and records are stored as published, which
    /// lists it.
    async fn finish(&self, mut publication: Publication) -> Result<Outcome> {
        publication.state = State::Published;
        self.core.publications().put(&publication).await?;
        self.core.metrics().publication(publication.kind);
        tracing::info!(
            kind = publication.kind.as_str(),
            address = %publication.address,
            version = %publication.version,
            by = %publication.published_by,
            digest = %publication.digest,
            "published"
        );
        Ok(Outcome::Published(publication))
    }

    /// Withdraws a published version from its version list; it stays served to whoever names
    /// it (a lock file, a pinned source). Yanking a yanked version changes nothing.
    pub async fn yank(
        &self,
        kind: PublishedKind,
        address: &str,
        version: &Version,
        who: &str,
        reason: &str,
    ) -> Result<Publication> {
        let what = format!("{} {address} {version}", kind.as_str());
        let mut publication = self
            .core
            .publications()
            .get(kind, address, version)
            .await?
            .filter(|p| p.state == State::Published)
            .ok_or(PublishError::NotPublished(what))?;
        if publication.yanked.is_none() {
            publication.yanked = Some(Yank {
                by: who.to_string(),
                at: crate::clock::now_secs(),
                reason: reason.to_string(),
            });
            self.core.publications().put(&publication).await?;
            tracing::info!(kind = kind.as_str(), address, %version, by = who, "yanked");
        }
        Ok(publication)
    }

    /// Removes a published version (an operator's decision, never a publisher's): first an
    /// audit record saying what it was, who removes it and why, then its publication (which
    /// unlists it), its version record, and its bytes.
    pub async fn unpublish(
        &self,
        kind: PublishedKind,
        address: &str,
        version: &Version,
        by: &str,
        reason: &str,
    ) -> Result<crate::cache::Audit> {
        let what = format!("{} {address} {version}", kind.as_str());
        let publications = self.core.publications();
        let publication = publications
            .get(kind, address, version)
            .await?
            .ok_or(PublishError::NotPublished(what.clone()))?;
        let audit = crate::cache::Audit {
            action: "unpublish".into(),
            by: by.to_string(),
            at: crate::clock::now_secs(),
            reason: reason.to_string(),
            publication: publication.clone(),
        };
        publications.audit(&audit).await?;
        publications.remove(kind, address, version).await?;
        match kind {
            PublishedKind::Provider => {
                let addr = publication
                    .provider()
                    .ok_or_else(|| Error::unexpected(format!("{what}: not a provider address")))?;
                self.core.meta().remove_version(&addr, version).await?;
                for platform in &publication.platforms {
                    let key = ArchiveKey {
                        addr: addr.clone(),
                        version: version.clone(),
                        platform: platform.clone(),
                    };
                    if let Some(info) = self.core.archives().record(&key).await? {
                        self.core.archives().remove(&key).await?;
                        self.core.archive_removed(&key, info.size);
                    }
                }
            }
            PublishedKind::Module => {
                let addr = publication
                    .module()
                    .ok_or_else(|| Error::unexpected(format!("{what}: not a module address")))?;
                let key = crate::records::ModuleKey::new(&addr, version);
                self.core.modules().remove(&key).await?;
                self.core.module_zips().remove(&key).await?;
            }
        }
        tracing::warn!(kind = kind.as_str(), address, %version, by, reason, "unpublished");
        Ok(audit)
    }

    /// A publisher's own signature over SHA256SUMS: checked against the namespace's keys when
    /// given (and required when the namespace says so). Returns the key that signed.
    fn publisher_signature(
        &self,
        addr: &ProviderAddr,
        sums: &[u8],
        signature: Option<&[u8]>,
    ) -> Result<Option<String>> {
        let ns = self
            .core
            .settings()
            .publishing
            .namespaces
            .get(&addr.namespace.to_ascii_lowercase())
            .cloned()
            .unwrap_or_default();
        match (signature, &ns.keys) {
            (None, _) if ns.require_signature => Err(PublishError::Signature(format!(
                "namespace {} requires one (publishing.namespaces.{}.require_signature)",
                addr.namespace, addr.namespace
            ))
            .into()),
            (None, _) => Ok(None),
            (Some(_), None) => Err(PublishError::Signature(format!(
                "one was given, but namespace {} has no publishers' keys to check it against \
                 (publishing.namespaces.{}.keys)",
                addr.namespace, addr.namespace
            ))
            .into()),
            (Some(sig), Some(keys)) => crate::trust::check_detached(keys, sums, sig)
                .map(Some)
                .map_err(|e| PublishError::Signature(e.to_string()).into()),
        }
    }

    /// A publication of the version that already exists: the same digest and published is a
    /// no-op; another digest, a conflict. `None`: go on.
    async fn already(
        &self,
        kind: PublishedKind,
        address: &str,
        version: &Version,
        digest: &crate::hash::Sha256,
        what: &str,
    ) -> Result<Option<Outcome>> {
        match self.core.publications().get(kind, address, version).await? {
            None => Ok(None),
            Some(have) => judge(have, digest, what),
        }
    }

    /// Claims the version; `Some` when it was published meanwhile (see [`Publisher::already`]).
    /// A version that differs from another of the address only in build metadata is that
    /// version ([`Publisher::one_version`]): a conflict unless it was claimed first.
    async fn claim(&self, publication: &Publication, what: &str) -> Result<Option<Outcome>> {
        let outcome = match self.core.publications().claim(publication).await? {
            Claimed::Claimed => None,
            Claimed::Exists(have) => judge(*have, &publication.digest, what)?,
        };
        if outcome.is_none() {
            self.one_version(publication, what).await?;
        }
        Ok(outcome)
    }

    /// Of the versions of one address that differ only in build metadata (`1.0.0`,
    /// `1.0.0+build.5`), only one is ever published. Run after this publisher's own claim: a
    /// claim that finds another such version's record (published or claimed) gives itself
    /// back and is a conflict (409). Of two racing publishers the later claimant sees the
    /// earlier's claim; when both see each other both give way, and neither version is
    /// published by the race.
    async fn one_version(&self, publication: &Publication, what: &str) -> Result<()> {
        let publications = self.core.publications();
        let (kind, address, version) =
            (publication.kind, &publication.address, &publication.version);
        publications.forget(kind, address).await;
        let all = publications.of(kind, address).await?;
        let mut others: Vec<&Publication> = all
            .iter()
            .filter(|p| p.version != *version && precedence(&p.version) == precedence(version))
            .collect();
        // The published one first, to name it.
        others.sort_by_key(|p| p.state != State::Published);
        let Some(first) = others.first() else {
            return Ok(());
        };
        let have = first.version.to_string();
        if let Some(own) = publications.get(kind, address, version).await? {
            if own.state == State::Pending && own.digest == publication.digest {
                publications.remove(kind, address, version).await?;
            }
        }
        Err(PublishError::SameVersion {
            what: what.to_string(),
            have,
        }
        .into())
    }
}

/// The trust policy's refusal of what a publisher sent (a pinned namespace, say): the
/// publisher's to fix, so a 4xx, never the 502 of an origin's bad answer.
fn publisher_refused(refusal: crate::trust::Refusal) -> Error {
    tracing::info!("publication refused by the trust policy: {refusal}");
    PublishError::Refused(refusal.to_string()).into()
}

/// A version without its build metadata: what Terraform's and OpenTofu's constraints compare.
fn precedence(version: &Version) -> &str {
    version.as_str().split('+').next().unwrap_or_default()
}

/// An existing publication against a new one's digest.
fn judge(have: Publication, digest: &crate::hash::Sha256, what: &str) -> Result<Option<Outcome>> {
    if have.digest != *digest {
        return Err(PublishError::Conflict {
            what: what.to_string(),
            have: have.digest.to_string(),
            new: digest.to_string(),
        }
        .into());
    }
    match have.state {
        State::Published => Ok(Some(Outcome::Unchanged(have))),
        // Claimed by an earlier attempt that did not finish (or one running now): the same
        // files, so finishing it again writes the same bytes.
        State::Pending => Ok(None),
    }
}

/// A staging error or the body's own.
enum BodyError {
    Admit(AdmitError),
    Body(std::io::Error),
}

impl From<AdmitError> for BodyError {
    fn from(e: AdmitError) -> Self {
        BodyError::Admit(e)
    }
}

fn file_of(upload: &Upload) -> PublishedFile {
    PublishedFile {
        name: upload.name.clone(),
        sha256: upload.staged.digest.sha256.clone(),
        size: upload.staged.digest.size,
    }
}

/// A small file of the upload (SHA256SUMS, signature, manifest), read into memory.
fn small(upload: &Upload) -> Result<Vec<u8>> {
    if upload.staged.digest.size > MAX_SMALL_FILE {
        return Err(PublishError::Unusable {
            name: upload.name.clone(),
            reason: format!("larger than {MAX_SMALL_FILE} bytes"),
        }
        .into());
    }
    std::fs::read(upload.staged.file.path()).map_err(|e| Error::io("reading a staged upload", e))
}

/// The plugin protocols a release's manifest names (`metadata.protocol_versions`).
fn protocols_of(name: &str, bytes: &[u8]) -> Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Manifest {
        version: u32,
        metadata: Metadata,
    }
    #[derive(serde::Deserialize)]
    struct Metadata {
        protocol_versions: Vec<String>,
    }
    let bad = |reason: String| PublishError::Manifest {
        name: name.to_string(),
        reason,
    };
    let m: Manifest = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
    if m.version != 1 {
        return Err(bad(format!("version {} is not 1", m.version)).into());
    }
    let ok = |p: &String| {
        matches!(p.split_once('.'), Some((a, b)) if !a.is_empty() && !b.is_empty()
            && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit()))
    };
    if m.metadata.protocol_versions.is_empty() || !m.metadata.protocol_versions.iter().all(ok) {
        return Err(bad("protocol_versions must list versions like \"6.0\"".into()).into());
    }
    Ok(m.metadata.protocol_versions)
}

/// Checks that SHA256SUMS lists exactly `files`, each with its SHA-256.
fn check_sums(sums: &[u8], files: &[PublishedFile]) -> Result<()> {
    let text = std::str::from_utf8(sums).map_err(|_| PublishError::SumsLine {
        line: 0,
        problem: "not UTF-8 text".into(),
    })?;
    let mut listed = std::collections::BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |problem: &str| PublishError::SumsLine {
            line: i + 1,
            problem: problem.to_string(),
        };
        let (hash, name) =
            crate::trust::sums_line(line).ok_or_else(|| bad("not `<sha256>  <file name>`"))?;
        let hash = crate::hash::Sha256::parse(&hash.to_ascii_lowercase())
            .map_err(|_| bad("the hash is not 64 hex digits"))?;
        if !files.iter().any(|f| f.name == name) {
            return Err(PublishError::SumsListsOther {
                name: name.to_string(),
            }
            .into());
        }
        if listed.insert(name.to_string(), hash).is_some() {
            return Err(bad("lists a file twice").into());
        }
    }
    for f in files {
        match listed.get(&f.name) {
            None => {
                return Err(PublishError::NotListed {
                    name: f.name.clone(),
                }
                .into());
            }
            Some(h) if *h != f.sha256 => {
                return Err(PublishError::SumsMismatch {
                    name: f.name.clone(),
                    listed: h.to_string(),
                    found: f.sha256.to_string(),
                }
                .into());
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Checks that a provider zip holds the executable Terraform runs for provider `type_` on
/// `os` (`internal/providercache`'s rule): of the files at the top of the zip, in name order,
/// the first named `terraform-provider-<type>` alone or followed by `_` or `.` and anything
/// (`terraform-provider-foo_v1.2.0`, `terraform-provider-foo.exe`); on windows, that file's
/// name must end in `.exe`, or Windows cannot start it. The reason it cannot be installed
/// otherwise.
fn executable_in(path: &std::path::Path, type_: &str, os: &str) -> std::result::Result<(), String> {
    let file = std::fs::File::open(path).map_err(|e| format!("reading it: {e}"))?;
    let zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| format!("reading it: {e}"))?;
    let mut top: Vec<String> = Vec::new();
    for name in zip.file_names() {
        let name = name.map_err(|e| format!("reading its entries: {e}"))?;
        if !name.is_empty() && !name.contains(['/', '\\']) {
            top.push(name.into_owned());
        }
    }
    top.sort_unstable();
    let prefix = format!("terraform-provider-{type_}");
    let wanted = format!(
        "{prefix}, or {prefix} followed by _ or . and more (as {prefix}_v<version>{}), at the \
         top of the zip",
        if os == "windows" { ".exe" } else { "" }
    );
    let found = top.iter().find(|n| {
        n.strip_prefix(prefix.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['_', '.']))
    });
    match found {
        Some(name) if os == "windows" && !name.to_ascii_lowercase().ends_with(".exe") => {
            Err(format!(
                "the executable Terraform would run, {name}, does not end in .exe, so Windows cannot start it"
            ))
        }
        Some(_) => Ok(()),
        None => {
            let other = top
                .iter()
                .find(|n| n.starts_with("terraform-provider-"))
                .map(|n| format!(" ({n} is another provider's)"))
                .unwrap_or_default();
            Err(format!(
                "holds no executable Terraform can install: expected {wanted}{other}"
            ))
        }
    }
}

/// An archive's format, by its first bytes (a module archive, a release's tar stream).
fn sniff(path: &std::path::Path) -> Result<crate::package::Format> {
    use crate::package::Format;
    let mut head = [0u8; 262];
    let mut file =
        std::fs::File::open(path).map_err(|e| Error::io("reading a staged upload", e))?;
    let mut n = 0;
    while n < head.len() {
        match file.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => return Err(Error::io("reading a staged upload", e)),
        }
    }
    let head = &head[..n];
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Format::TarGz)
    } else if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
        Ok(Format::Zip)
    } else if head.len() >= 262 && &head[257..262] == b"ustar" {
        Ok(Format::Tar)
    } else {
        Err(PublishError::Package("is not a .tar.gz, .tar or .zip".into()).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, byte: u8) -> PublishedFile {
        PublishedFile {
            name: name.into(),
            sha256: crate::hash::Sha256::parse(&hex::encode([byte; 32])).unwrap(),
            size: 1,
        }
    }

    #[test]
    fn sha256sums_must_list_exactly_the_uploaded_files() {
        let files = [file("a.zip", 1), file("b.zip", 2)];
        let line = |f: &PublishedFile| format!("{}  {}\n", f.sha256, f.name);
        let both = format!("{}{}", line(&files[0]), line(&files[1]));
        assert!(check_sums(both.as_bytes(), &files).is_ok());
        let err = check_sums(line(&files[0]).as_bytes(), &files).unwrap_err();
        assert!(err.to_string().contains("does not list b.zip"), "{err}");
        let other = format!("{both}{}", line(&file("c.zip", 3)));
        let err = check_sums(other.as_bytes(), &files).unwrap_err();
        assert!(err.to_string().contains("lists c.zip"), "{err}");
        let wrong = format!("{}{}", line(&files[0]), line(&file("b.zip", 9)));
        let err = check_sums(wrong.as_bytes(), &files).unwrap_err();
        assert!(err.to_string().contains("b.zip: SHA-256"), "{err}");
        assert!(check_sums(b"zz  a.zip\n", &files).is_err());
    }

    /// `executable_in` over a zip holding these files.
    fn executable(names: &[&str], os: &str) -> std::result::Result<(), String> {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.zip");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        for name in names {
            if let Some(d) = name.strip_suffix('/') {
                zip.add_directory(d, zip::write::SimpleFileOptions::default())
                    .unwrap();
            } else {
                zip.start_file(*name, zip::write::SimpleFileOptions::default())
                    .unwrap();
                zip.write_all(b"bytes").unwrap();
            }
        }
        zip.finish().unwrap();
        executable_in(&path, "foo", os)
    }

    #[test]
    fn a_provider_zip_holds_the_executable_terraform_looks_for() {
        for (names, os) in [
            (&["terraform-provider-foo_v1.0.0"][..], "linux"),
            (&["terraform-provider-foo"], "linux"),
            (&["README.md", "terraform-provider-foo_v1.0.0_x5"], "darwin"),
            (&["terraform-provider-foo_v1.0.0.exe"], "windows"),
            (&["terraform-provider-foo.exe", "LICENSE"], "windows"),
        ] {
            assert_eq!(executable(names, os), Ok(()), "{names:?} {os}");
        }
        for (names, os, says) in [
            (&[][..], "linux", "holds no executable"),
            (&["README.md"], "linux", "holds no executable"),
            (
                &["terraform-provider-bar_v1.0.0"],
                "linux",
                "terraform-provider-bar_v1.0.0 is another provider's",
            ),
            (
                &["terraform-provider-foobar_v1.0.0"],
                "linux",
                "another provider's",
            ),
            (
                &["bin/terraform-provider-foo_v1.0.0"],
                "linux",
                "holds no executable",
            ),
            (
                &["terraform-provider-foo_v1/"],
                "linux",
                "holds no executable",
            ),
            (
                &["terraform-provider-foo_v1.0.0"],
                "windows",
                "does not end in .exe",
            ),
            // Terraform takes the first in name order: here the notes, not the program.
            (
                &[
                    "terraform-provider-foo_v1.0.0.exe",
                    "terraform-provider-foo.txt",
                ],
                "windows",
                "terraform-provider-foo.txt",
            ),
        ] {
            let e = executable(names, os).unwrap_err();
            assert!(e.contains(says), "{names:?} {os}: {e}");
            assert!(e.contains("terraform-provider-foo"), "{e}");
        }
    }

    #[test]
    fn a_trust_refusal_of_a_publication_is_the_publishers_to_fix() {
        // As the pin of registry.terraform.io/hashicorp/* refuses a release signed by any key
        // but HashiCorp's: a client error, never a gateway's 502.
        let addr = ProviderAddr::new("registry.terraform.io", "hashicorp", "foo").unwrap();
        for refusal in [
            crate::trust::Refusal::NotPinnedSigned {
                addr: addr.to_string(),
                owner: crate::trust::Owner::Hashicorp,
                kind: SignatureKind::Private,
            },
            crate::trust::Refusal::NoKeys,
        ] {
            let e = publisher_refused(refusal);
            assert_eq!(e.status(), http::StatusCode::UNPROCESSABLE_ENTITY, "{e}");
            assert_eq!(e.code(), "refused");
        }
    }

    #[test]
    fn build_metadata_is_not_part_of_the_precedence() {
        let v = |s: &str| Version::parse(s).unwrap();
        assert_eq!(precedence(&v("1.0.0+evil")), "1.0.0");
        assert_eq!(precedence(&v("1.0.0-rc.1+b.2")), "1.0.0-rc.1");
        assert_ne!(precedence(&v("1.0.0-rc.1")), precedence(&v("1.0.0")));
    }

    #[test]
    fn a_manifest_names_protocol_versions() {
        let ok = br#"{"version":1,"metadata":{"protocol_versions":["6.0"]}}"#;
        assert_eq!(protocols_of("m", ok).unwrap(), vec!["6.0"]);
        assert!(
            protocols_of(
                "m",
                br#"{"version":2,"metadata":{"protocol_versions":["6.0"]}}"#
            )
            .is_err()
        );
        assert!(
            protocols_of(
                "m",
                br#"{"version":1,"metadata":{"protocol_versions":["x"]}}"#
            )
            .is_err()
        );
    }
}
