//! The module view: every cached module version, where its package came from (for git sources
//! the commit the reference resolved to), its size and last use; and the git cache's
//! repositories, for direct `git::https://` sources.

use serde::Serialize;

use super::{API_VERSION, secs};
use crate::error::Result;
use crate::mirror::Core;
use crate::records::ModuleSource;

/// One cached module version.
#[derive(Debug, Clone, Serialize)]
pub struct ModuleEntry {
    /// `registry.terraform.io/acme/vpc/aws`.
    pub address: String,
    pub version: String,
    /// `archive` or `git`.
    pub source_kind: &'static str,
    /// The URL the origin's download answer named.
    pub source: String,
    /// For git sources: the reference asked for, and the commit it resolved to.
    pub reference: Option<String>,
    pub commit: Option<String>,
    /// The package's subdirectory the module lives in, if any.
    pub subdir: Option<String>,
    /// SHA-256 of the package served.
    pub sha256: String,
    pub size: u64,
    /// How it entered the cache: `origin`, `signed_bundle` or `unverified`.
    pub trust: &'static str,
    pub fetched_at: u64,
    pub last_used: u64,
}

/// One repository of the git cache.
#[derive(Debug, Clone, Serialize)]
pub struct GitRepoEntry {
    /// `github.com/acme/modules.git`.
    pub repository: String,
    pub size: u64,
    /// When it last matched its origin.
    pub refreshed: u64,
    pub last_used: u64,
}

/// Every repository of the git cache.
pub(super) fn scan_git(core: &std::sync::Arc<Core>) -> Vec<GitRepoEntry> {
    crate::mirror::GitMirror::new(core.clone())
        .cached()
        .into_iter()
        .map(|r| GitRepoEntry {
            repository: r.repo.to_string(),
            size: r.size,
            refreshed: r.refreshed,
            last_used: r.last_used,
        })
        .collect()
}

/// What the modules page and `GET -/api/v1/modules` are asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModuleQuery {
    /// A part of the address or source, any case.
    pub q: String,
}

impl ModuleQuery {
    pub fn parse(query: Option<&str>) -> ModuleQuery {
        let mut out = ModuleQuery::default();
        for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            if key == "q" {
                out.q = value.trim().to_string();
            }
        }
        out
    }
}

/// `GET -/api/v1/modules`.
#[derive(Debug, Clone, Serialize)]
pub struct ModuleList {
    pub api_version: u32,
    /// How many module versions the cache holds.
    pub total: usize,
    pub modules: Vec<ModuleEntry>,
    /// The git cache's repositories the query selects.
    pub git: Vec<GitRepoEntry>,
}

impl ModuleList {
    pub(super) fn of(all: &[ModuleEntry], git: &[GitRepoEntry], query: &ModuleQuery) -> ModuleList {
        let q = query.q.to_lowercase();
        ModuleList {
            git: git
                .iter()
                .filter(|r| q.is_empty() || r.repository.to_lowercase().contains(&q))
                .cloned()
                .collect(),
            api_version: API_VERSION,
            total: all.len(),
            modules: all
                .iter()
                .filter(|m| {
                    q.is_empty()
                        || m.address.to_lowercase().contains(&q)
                        || m.source.to_lowercase().contains(&q)
                })
                .cloned()
                .collect(),
        }
    }
}

/// Every module package with its record, by address, newest version first.
pub(super) async fn scan(core: &Core) -> Result<Vec<ModuleEntry>> {
    let mut listed = core.modules().list().await?;
    listed.sort_by(|a, b| (&a.key.addr, &b.key.version).cmp(&(&b.key.addr, &a.key.version)));
    Ok(listed
        .into_iter()
        .filter_map(|entry| {
            let record = entry.record.as_ref()?;
            let (source_kind, source, reference, commit) = match &record.source {
                ModuleSource::Archive { url } => ("archive", url.clone(), None, None),
                ModuleSource::Git {
                    url,
                    reference,
                    commit,
                } => ("git", url.clone(), reference.clone(), Some(commit.clone())),
                ModuleSource::Published => ("published", String::new(), None, None),
            };
            Some(ModuleEntry {
                address: entry.key.addr.to_string(),
                version: entry.key.version.to_string(),
                source_kind,
                source,
                reference,
                commit,
                subdir: record.subdir.clone(),
                sha256: record.sha256.to_string(),
                size: entry.size,
                trust: record.trust.as_str(),
                fetched_at: record.fetched_at,
                last_used: secs(entry.last_use()),
            })
        })
        .collect())
}
