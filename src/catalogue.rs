//! What the cache holds, for people and scripts: typed views of the cached providers, modules
//! and CLI releases and of the server's state, built from the verified records alone (no origin is
//! asked). The JSON API (`<base>-/api/v1/`) serialises these views as they are and the pages
//! render the same values, so the two never disagree.
//!
//! The API is versioned by its path and by `api_version` in every document; a field is only
//! ever added within a version.
//!
//! Building a snapshot lists the store (and reads the version records that are new or were
//! written again since the last build), so one is kept until this process changes the store (a
//! commit, removal or record write) or [`FRESH_FOR`] passes (for what other replicas do and for
//! last-use times). Then the next request gets the kept snapshot while one task builds the
//! next, however many clients ask: no request waits for a scan but the very first, and a busy
//! page or a script in a loop costs at most one scan per change or interval.

mod lockfile;
mod module_docs;
mod modules;
mod policy;
mod providers;
mod published;
mod releases;
mod status;
mod usage;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::address::{ModuleAddr, Platform, ProviderAddr, Version};
use crate::cache::Flights;
use crate::error::{Error, Result};
use crate::mirror::Core;

pub use lockfile::LockBlock;
pub use module_docs::StoredDocs;
pub use modules::{
    ModuleChoices, ModuleEntry, ModuleList, ModuleQuery, ModuleSummary, ModuleVersionView,
    ModuleView, ProviderNeed, module_block, provider_source,
};
pub use policy::{
    ApprovalRequest, ApproveError, Approved, BadApproval, Judge, JudgedVersion, PolicyHistory,
    PolicyView, RuleEntry, VersionUser, approve, canonical_address, parse_kind,
};
pub use providers::{
    Choices, PlatformEntry, Provider, ProviderEntry, ProviderList, ProviderQuery, ProviderSummary,
    VersionEntry, VersionView,
};
pub use published::{Namespace, PublishedEntry, PublishedList};
pub use releases::{CachedRelease, CachedZip, ListSummary, ProductReleases, ReleaseCatalogue};
pub use status::{CacheUse, ConfigSummary, HashQueue, OriginStatus, Status};
pub use usage::{PERIODS, UsageList, UsageQuery};

/// The version of the JSON API these views are served as.
pub const API_VERSION: u32 = 1;

/// How long a snapshot is served, if this process changes nothing, before the store is
/// scanned again.
pub const FRESH_FOR: Duration = Duration::from_secs(5);

/// Everything the cache holds, as of one scan.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Every provider with archives in the cache, by source.
    pub providers: Vec<ProviderEntry>,
    /// Their summaries, in the same order, and the values the filters can take.
    pub summaries: Vec<ProviderSummary>,
    pub choices: Choices,
    /// Every cached module version, by address then newest version first.
    pub modules: Vec<ModuleEntry>,
    /// Every repository of the git cache, by host and path.
    pub git: Vec<modules::GitRepoEntry>,
    /// Objects under `quarantine/`.
    pub quarantined: Vec<String>,
    /// Cached CLI releases, by CLI (none when `[releases]` is off).
    pub releases: Vec<ProductReleases>,
}

/// The catalogue over a core.
pub struct Catalogue {
    core: Arc<Core>,
    started: SystemTime,
    snapshot: Mutex<Option<Built>>,
    builds: Flights<(), Arc<Snapshot>, Error>,
    /// The version records the last build read (a build takes them, and gives them back).
    known: Mutex<providers::Known>,
    /// Module documentation, made from the packages and kept.
    docs: module_docs::DocsCache,
    /// Whether a task is reading modules' documentation for the lists.
    warming: std::sync::atomic::AtomicBool,
}

/// A snapshot and what it was built from.
struct Built {
    at: Instant,
    changes: u64,
    snapshot: Arc<Snapshot>,
}

impl Catalogue {
    pub fn new(core: Arc<Core>) -> Arc<Catalogue> {
        Arc::new(Catalogue {
            core,
            started: SystemTime::now(),
            snapshot: Mutex::new(None),
            builds: Flights::default(),
            known: Mutex::default(),
            docs: module_docs::DocsCache::default(),
            warming: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The store's changes made by this process so far (see [`crate::cache::Objects::changes`]).
    fn changes(&self) -> u64 {
        self.core.archives().changes()
            + self.core.modules().changes()
            + self.core.meta().changes()
            + self.core.releases().changes()
    }

    /// The current snapshot: the kept one while this process changed nothing and it is less
    /// than [`FRESH_FOR`] old; else still the kept one while a new one is built in the
    /// background (one build at a time); the first is waited for.
    pub async fn snapshot(self: &Arc<Self>) -> Result<Arc<Snapshot>> {
        let changes = self.changes();
        let kept = match &*self.snapshot.lock().expect("catalogue lock") {
            Some(built) if built.changes == changes && built.at.elapsed() < FRESH_FOR => {
                return Ok(built.snapshot.clone());
            }
            Some(built) => Some(built.snapshot.clone()),
            None => None,
        };
        let this = self.clone();
        let build = move || async move {
            let changes = this.changes();
            let snapshot = Arc::new(this.build().await?);
            *this.snapshot.lock().expect("catalogue lock") = Some(Built {
                at: Instant::now(),
                changes,
                snapshot: snapshot.clone(),
            });
            Ok(snapshot)
        };
        let Some(kept) = kept else {
            return self.builds.run((), build).await.0;
        };
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this.builds.run((), build).await.0 {
                tracing::warn!("cannot list the cache for the pages: {e}");
            }
        });
        Ok(kept)
    }

    /// Scans the store: archives with their records, module packages, quarantine.
    pub async fn build(&self) -> Result<Snapshot> {
        let mut known = std::mem::take(&mut *self.known.lock().expect("catalogue lock"));
        let scanned = providers::scan(&self.core, &mut known).await;
        *self.known.lock().expect("catalogue lock") = known;
        let providers = scanned?;
        let (summaries, choices) = providers::summaries(&providers);
        Ok(Snapshot {
            providers,
            summaries,
            choices,
            modules: modules::scan(&self.core).await?,
            git: modules::scan_git(&self.core),
            quarantined: status::quarantined(&self.core).await?,
            releases: releases::scan(&self.core).await?,
        })
    }

    /// The providers a query selects, summarised.
    pub async fn providers(self: &Arc<Self>, query: &ProviderQuery) -> Result<ProviderList> {
        let snapshot = self.snapshot().await?;
        Ok(ProviderList::of(
            &snapshot.summaries,
            &snapshot.choices,
            query,
        ))
    }

    /// One provider with every cached version.
    pub async fn provider(self: &Arc<Self>, addr: &ProviderAddr) -> Result<Provider> {
        let snapshot = self.snapshot().await?;
        let entry = find_provider(&snapshot, addr)?;
        Ok(Provider {
            api_version: API_VERSION,
            provider: entry.clone(),
        })
    }

    /// One cached version of a provider.
    pub async fn version(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
    ) -> Result<VersionView> {
        let snapshot = self.snapshot().await?;
        let entry = find_provider(&snapshot, addr)?;
        let found = entry
            .versions
            .iter()
            .find(|v| v.version == version.as_str())
            .ok_or_else(|| {
                Error::NotFound(format!("{addr} {version} has no archives in this cache"))
            })?;
        let published = match self.core.is_private(addr) {
            true => self
                .core
                .publications()
                .get(
                    crate::records::publish::PublishedKind::Provider,
                    &addr.to_string(),
                    version,
                )
                .await?
                .filter(|p| p.state == crate::records::publish::State::Published)
                .map(|p| PublishedEntry::of(&p)),
            false => None,
        };
        Ok(VersionView::of(entry, found, published))
    }

    /// A `.terraform.lock.hcl` block for a cached version and the platforms asked for.
    pub async fn lock_block(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
        platforms: &[Platform],
    ) -> Result<LockBlock> {
        let view = self.version(addr, version).await?;
        LockBlock::of(addr, &view.version, platforms)
    }

    /// The cached modules a query selects, with every version of each when `with_versions` (the
    /// API) or their summaries alone (the pages). A query with words reads the documentation of
    /// each module's newest version first (made once per version, then kept); without, the
    /// lists use what is known and the rest is read in the background.
    pub async fn modules(
        self: &Arc<Self>,
        query: &ModuleQuery,
        with_versions: bool,
    ) -> Result<ModuleList> {
        let snapshot = self.snapshot().await?;
        let newest: Vec<Option<(crate::records::ModuleKey, String)>> =
            modules::groups(&snapshot.modules)
                .into_iter()
                .map(|range| module_key(&snapshot.modules[range.start]))
                .collect();
        let indexed = match query.q.trim().is_empty() {
            true => {
                let known: Vec<_> = newest
                    .iter()
                    .map(|k| {
                        k.as_ref()
                            .and_then(|(key, sha)| self.docs.indexed_now(key, sha))
                    })
                    .collect();
                if known.iter().any(Option::is_none) {
                    self.warm(newest.into_iter().flatten().collect());
                }
                known
            }
            false => self.docs.index_all(&self.core, newest).await,
        };
        Ok(ModuleList::of(
            &snapshot.modules,
            &snapshot.git,
            query,
            &indexed,
            with_versions,
        ))
    }

    /// Reads the documentation of `keys` in the background, one such task at a time.
    fn warm(self: &Arc<Self>, keys: Vec<(crate::records::ModuleKey, String)>) {
        use std::sync::atomic::Ordering;
        if self.warming.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            this.docs
                .index_all(&this.core, keys.into_iter().map(Some).collect())
                .await;
            this.warming.store(false, Ordering::Release);
        });
    }

    /// One module with every cached version.
    pub async fn module(self: &Arc<Self>, addr: &ModuleAddr) -> Result<ModuleView> {
        let snapshot = self.snapshot().await?;
        let versions = find_module(&snapshot, addr)?;
        let summary = match module_key(&versions[0]) {
            Some((key, sha)) => self.docs.indexed(&self.core, &key, &sha).await,
            None => None,
        }
        .and_then(|i| i.summary.clone());
        Ok(ModuleView {
            api_version: API_VERSION,
            module: modules::summarise(versions, summary),
            versions: versions.to_vec(),
        })
    }

    /// One cached version of a module, with its documentation.
    pub async fn module_version(
        self: &Arc<Self>,
        addr: &ModuleAddr,
        version: &Version,
    ) -> Result<ModuleVersionView> {
        let snapshot = self.snapshot().await?;
        let versions = find_module(&snapshot, addr)?;
        let entry = versions
            .iter()
            .find(|v| v.version == version.as_str())
            .ok_or_else(|| Error::NotFound(format!("{addr} {version} is not in this cache")))?;
        let key = crate::records::ModuleKey::new(addr, version);
        let stored = self
            .docs
            .get(&self.core, &key)
            .await?
            .ok_or_else(|| Error::NotFound(format!("{addr} {version} is not in this cache")))?;
        let summary = stored
            .docs
            .as_ref()
            .and_then(|d| d.root.readme.as_ref())
            .map(|r| r.summary(160));
        let providers = stored
            .docs
            .iter()
            .flat_map(|d| &d.root.required_providers)
            .map(|p| {
                let source = provider_source(&p.name, p.source.as_deref());
                ProviderNeed {
                    name: p.name.clone(),
                    cached: snapshot.providers.iter().any(|c| c.source == source),
                    source,
                    version: p.version.clone(),
                }
            })
            .collect();
        Ok(ModuleVersionView {
            api_version: API_VERSION,
            module: modules::summarise(versions, summary),
            version: entry.clone(),
            versions: versions.iter().map(|v| v.version.clone()).collect(),
            module_block: module_block(&entry.address, &entry.version),
            providers,
            docs: stored.docs.clone(),
            docs_error: stored.error.clone(),
        })
    }

    /// Who fetched which versions in a period (the store's usage counts, read now).
    pub async fn usage(self: &Arc<Self>, query: &UsageQuery) -> Result<UsageList> {
        let since = query.first_day(SystemTime::now());
        let rows = crate::usage::read(&**self.core.archives().storage(), since.as_deref()).await?;
        Ok(UsageList::of(rows, query, since))
    }

    /// The version policy: its rules, what of the cache it refuses or waives now and who used
    /// those versions, the approvals in force and every approval record.
    pub async fn policy(self: &Arc<Self>) -> Result<PolicyView> {
        let snapshot = self.snapshot().await?;
        let rows = crate::usage::read(&**self.core.archives().storage(), None).await?;
        let history = self.policy_history().await?.history;
        Ok(PolicyView::of(&self.core, &snapshot, rows, history).await)
    }

    /// Every approval record, oldest first (the audit trail).
    pub async fn policy_history(self: &Arc<Self>) -> Result<PolicyHistory> {
        let history = self
            .core
            .policy()
            .approvals()
            .history()
            .await
            .map_err(|e| match e {
                crate::policy::approvals::ApprovalError::Storage(e) => Error::Storage(e),
                other => Error::unexpected(other.to_string()),
            })?;
        Ok(PolicyHistory {
            api_version: API_VERSION,
            history,
        })
    }

    /// Records an approval `by` a client allowed to approve (see [`policy::approve`]).
    pub async fn approve(
        self: &Arc<Self>,
        request: &ApprovalRequest,
        by: &str,
    ) -> Result<Approved> {
        let approval = policy::approve(&self.core, request, by).await?;
        Ok(Approved {
            api_version: API_VERSION,
            approval,
        })
    }

    /// What was published to the private namespaces (the store's records, read now).
    pub async fn published(self: &Arc<Self>) -> Result<PublishedList> {
        let publications = self.core.publications();
        let private = &self.core.settings().trust.private;
        Ok(PublishedList::of(
            private.hostname.as_ref().map(ToString::to_string),
            private.namespaces.iter().cloned(),
            publications.all().await?,
            publications.audits().await?,
        ))
    }

    /// The CLI releases in the cache.
    pub async fn releases(self: &Arc<Self>) -> Result<ReleaseCatalogue> {
        let snapshot = self.snapshot().await?;
        let enabled = self.core.settings().releases.enabled;
        Ok(ReleaseCatalogue::of(enabled, &snapshot.releases))
    }

    /// The server's state: origins, cache use, the complete-hashes queue, quarantine,
    /// configuration.
    pub async fn status(self: &Arc<Self>) -> Result<Status> {
        let snapshot = self.snapshot().await?;
        Ok(Status::of(&self.core, &snapshot, self.started))
    }
}

fn find_provider<'a>(snapshot: &'a Snapshot, addr: &ProviderAddr) -> Result<&'a ProviderEntry> {
    let source = addr.to_string();
    snapshot
        .providers
        .iter()
        .find(|p| p.source == source)
        .ok_or_else(|| Error::NotFound(format!("{addr} has no archives in this cache")))
}

/// A module's cached versions (newest first) in a snapshot.
fn find_module<'a>(snapshot: &'a Snapshot, addr: &ModuleAddr) -> Result<&'a [ModuleEntry]> {
    let address = addr.to_string();
    let start = snapshot
        .modules
        .iter()
        .position(|m| m.address == address)
        .ok_or_else(|| Error::NotFound(format!("{addr} is not in this cache")))?;
    let end = snapshot.modules[start..]
        .iter()
        .position(|m| m.address != address)
        .map_or(snapshot.modules.len(), |n| start + n);
    Ok(&snapshot.modules[start..end])
}

/// The store key of a listed module version, and its package's SHA-256.
fn module_key(entry: &ModuleEntry) -> Option<(crate::records::ModuleKey, String)> {
    let addr = ModuleAddr::parse_in(&entry.address, "registry.terraform.io").ok()?;
    let version = Version::parse_lenient(&entry.version).ok()?;
    Some((
        crate::records::ModuleKey::new(&addr, &version),
        entry.sha256.clone(),
    ))
}

/// Unix seconds of a time.
fn secs(t: SystemTime) -> u64 {
    crate::clock::unix_secs(t)
}
