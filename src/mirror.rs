//! The read-through flow: protocol front-ends over one core.
//!
//! [`Core`] holds what every door shares: the stores, the staging area, the origins behind the
//! offline switch ([`Core::origin`]), version lists ([`crate::cache::Listings`]), verified version
//! records, archive fills and the trust policy. Each protocol has a front-end over it:
//! [`ProviderMirror`] (the network mirror and the registry facade), [`ModuleRegistry`] and
//! [`OciRegistry`], and [`GitMirror`] for git sources (whose repositories are git's own
//! content-addressed stores, kept apart from the object store). Bytes enter the cache only
//! through [`admission`]. The operator commands and
//! re-verification work on a [`Core`] directly; the server holds a [`Mirror`], all of them
//! together.
//!
//! Each request goes cache first; on a miss the core asks the origin, verifies what it gets,
//! stores it, and answers from the store. Concurrent misses share one fetch.

use std::sync::Arc;

use crate::config::Settings;
use crate::metrics::Metrics;

pub mod admission;
mod core;
mod facade;
mod git;
mod modules;
mod oci;
mod providers;
mod publish;
mod releases;

pub use self::core::{Core, Fill, ModuleLists, NotReady, ProviderLists, Reach, seen_in};
pub use facade::RegistryPackage;
pub use git::{CachedRepo, GitBundled, GitMirror, GitProtocol, GitReady, GitTurn, TurnKind};
pub use modules::{ModulePackage, ModuleRegistry};
pub use oci::{OciBlob, OciBlobHead, OciRegistry, empty_config};
pub use providers::{ArchiveBody, ArchiveHead, ProviderMirror, Served};
pub use publish::{Outcome, Publisher, Upload};
pub use releases::{
    ReleaseMirror, store_release, stored_checksums, stored_record, verify_release_sums,
};

/// Every front-end, over one core: what the server serves.
pub struct Mirror {
    core: Arc<Core>,
    /// The provider network mirror and registry protocols.
    pub providers: ProviderMirror,
    /// The module registry protocol.
    pub modules: Arc<ModuleRegistry>,
    /// The OCI distribution API.
    pub oci: Arc<OciRegistry>,
    /// The CLIs' own releases.
    pub releases: Arc<ReleaseMirror>,
    /// The git cache, for `git::https://` module sources.
    pub git: Arc<GitMirror>,
    /// Publishing to the private namespaces.
    pub publisher: Publisher,
}

impl Mirror {
    /// Opens the core (see [`Core::open`]; touches no network) and puts the front-ends over it.
    pub fn open(settings: Arc<Settings>, metrics: Arc<Metrics>) -> anyhow::Result<Arc<Mirror>> {
        Mirror::open_at(settings, metrics, crate::clock::system())
    }

    /// [`Mirror::open`] judging ages (version lists, the policy's cooldown) by `clock`.
    pub fn open_at(
        settings: Arc<Settings>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn crate::clock::Clock>,
    ) -> anyhow::Result<Arc<Mirror>> {
        Ok(Arc::new(Mirror::over(Core::open_at(
            settings, metrics, clock,
        )?)))
    }

    /// The front-ends over an open core.
    pub fn over(core: Arc<Core>) -> Mirror {
        let providers = ProviderMirror::new(core.clone());
        let modules = ModuleRegistry::new(core.clone());
        Mirror {
            releases: ReleaseMirror::new(core.clone()),
            git: GitMirror::new(core.clone()),
            publisher: Publisher::new(core.clone()),
            oci: OciRegistry::new(core.clone(), providers.clone(), modules.clone()),
            modules,
            providers,
            core,
        }
    }

    /// The core the front-ends share.
    pub fn core(&self) -> &Arc<Core> {
        &self.core
    }
}
