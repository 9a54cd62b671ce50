//! The module view: every cached module version, where its package came from (for git sources
//! the commit the reference resolved to), its size and last use; and the git cache's
//! repositories, for direct `git::https://` sources.

use std::sync::Arc;

use serde::Serialize;

use super::module_docs::Indexed;

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

/// What the modules page and `GET -/api/v1/modules` are asked for; every part optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModuleQuery {
    /// Words, any case, each found in the address, the source, or the newest version's
    /// documentation (README, inputs' and outputs' names and descriptions).
    pub q: String,
    pub hostname: String,
    pub namespace: String,
    /// The newest version's trust (`origin`, `signed_bundle`, `unverified`).
    pub trust: String,
    /// The newest version's source kind (`archive`, `git`, `published`).
    pub source: String,
}

impl ModuleQuery {
    /// Reads `q`, `hostname`, `namespace`, `trust` and `source` from a query string.
    pub fn parse(query: Option<&str>) -> ModuleQuery {
        let mut out = ModuleQuery::default();
        for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            let value = value.trim().to_string();
            match &*key {
                "q" => out.q = value,
                "hostname" => out.hostname = value,
                "namespace" => out.namespace = value,
                "trust" => out.trust = value,
                "source" => out.source = value,
                _ => {}
            }
        }
        out
    }

    /// Whether nothing is asked for.
    pub fn is_empty(&self) -> bool {
        *self == ModuleQuery::default()
    }

    /// The words of `q`, lowercased.
    pub fn words(&self) -> Vec<String> {
        self.q.split_whitespace().map(str::to_lowercase).collect()
    }

    /// Whether a module passes the filters (all but `q`).
    fn filters(&self, m: &ModuleSummary) -> bool {
        (self.hostname.is_empty() || m.hostname == self.hostname)
            && (self.namespace.is_empty() || m.namespace == self.namespace)
            && (self.trust.is_empty() || m.trust == self.trust)
            && (self.source.is_empty() || m.source_kind == self.source)
    }
}

/// One module (all its cached versions), as the modules page lists it.
#[derive(Debug, Clone, Serialize)]
pub struct ModuleSummary {
    /// `registry.terraform.io/acme/vpc/aws`.
    pub address: String,
    pub hostname: String,
    pub namespace: String,
    /// The newest cached version.
    pub latest: String,
    /// How many versions are cached.
    pub versions: usize,
    /// The newest version's source, as in [`ModuleEntry`].
    pub source_kind: &'static str,
    pub source: String,
    pub reference: Option<String>,
    pub commit: Option<String>,
    pub subdir: Option<String>,
    pub size: u64,
    pub trust: &'static str,
    /// The latest use of any version.
    pub last_used: u64,
    /// The first paragraph of the newest version's README, when its documentation has been
    /// read.
    pub summary: Option<String>,
}

/// The values the modules page's filters can take.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ModuleChoices {
    pub hostnames: Vec<String>,
    pub namespaces: Vec<String>,
    pub trust: Vec<&'static str>,
    pub sources: Vec<&'static str>,
}

/// `GET -/api/v1/modules`.
#[derive(Debug, Clone, Serialize)]
pub struct ModuleList {
    pub api_version: u32,
    /// How many module versions the cache holds.
    pub total: usize,
    /// Every version of the modules the query selects (in the API; the pages show
    /// `summaries`).
    pub modules: Vec<ModuleEntry>,
    /// The modules the query selects, one entry each.
    pub summaries: Vec<ModuleSummary>,
    /// How many modules the cache holds.
    pub total_modules: usize,
    pub choices: ModuleChoices,
    /// The git cache's repositories the query selects.
    pub git: Vec<GitRepoEntry>,
}

/// One module's versions in `all` (by address, newest first): the range of each module.
pub(super) fn groups(all: &[ModuleEntry]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=all.len() {
        if i == all.len() || all[i].address != all[start].address {
            out.push(start..i);
            start = i;
        }
    }
    out
}

/// A module's summary from its versions (newest first), with its README's first paragraph if
/// known.
pub(super) fn summarise(versions: &[ModuleEntry], summary: Option<String>) -> ModuleSummary {
    let newest = &versions[0];
    let mut parts = newest.address.splitn(3, '/');
    let hostname = parts.next().unwrap_or_default().to_string();
    let namespace = parts.next().unwrap_or_default().to_string();
    ModuleSummary {
        address: newest.address.clone(),
        hostname,
        namespace,
        latest: newest.version.clone(),
        versions: versions.len(),
        source_kind: newest.source_kind,
        source: newest.source.clone(),
        reference: newest.reference.clone(),
        commit: newest.commit.clone(),
        subdir: newest.subdir.clone(),
        size: newest.size,
        trust: newest.trust,
        last_used: versions.iter().map(|v| v.last_used).max().unwrap_or(0),
        summary,
    }
}

impl ModuleList {
    /// The modules a query selects among `all` (by address, newest version first); `indexed`
    /// holds, per module (its index in [`groups`]), what search reads of its newest version,
    /// where known. `with_versions`: list every version of the modules selected too (the API),
    /// not only their summaries (the pages).
    pub(super) fn of(
        all: &[ModuleEntry],
        git: &[GitRepoEntry],
        query: &ModuleQuery,
        indexed: &[Option<Arc<Indexed>>],
        with_versions: bool,
    ) -> ModuleList {
        let words = query.words();
        let q = query.q.to_lowercase();
        let mut hostnames = std::collections::BTreeSet::new();
        let mut namespaces = std::collections::BTreeSet::new();
        let mut trust = std::collections::BTreeSet::new();
        let mut sources = std::collections::BTreeSet::new();
        let mut summaries = Vec::new();
        let mut modules = Vec::new();
        let ranges = groups(all);
        let total_modules = ranges.len();
        for (i, range) in ranges.into_iter().enumerate() {
            let versions = &all[range];
            let found = indexed.get(i).and_then(Option::as_deref);
            let summary = summarise(versions, found.and_then(|f| f.summary.clone()));
            hostnames.insert(summary.hostname.clone());
            namespaces.insert(summary.namespace.clone());
            trust.insert(summary.trust);
            sources.insert(summary.source_kind);
            if !query.filters(&summary) {
                continue;
            }
            if !words.is_empty() {
                let address = summary.address.to_lowercase();
                let source = summary.source.to_lowercase();
                let text = found.map_or("", |f| f.text.as_str());
                let all_found = words.iter().all(|w| {
                    address.contains(w.as_str())
                        || source.contains(w.as_str())
                        || text.contains(w.as_str())
                });
                if !all_found {
                    continue;
                }
            }
            if with_versions {
                modules.extend(versions.iter().cloned());
            }
            summaries.push(summary);
        }
        ModuleList {
            git: git
                .iter()
                .filter(|r| q.is_empty() || r.repository.to_lowercase().contains(&q))
                .cloned()
                .collect(),
            api_version: API_VERSION,
            total: all.len(),
            modules,
            summaries,
            total_modules,
            choices: ModuleChoices {
                hostnames: hostnames.into_iter().collect(),
                namespaces: namespaces.into_iter().collect(),
                trust: trust.into_iter().collect(),
                sources: sources.into_iter().collect(),
            },
        }
    }
}

/// `GET -/api/v1/modules/<hostname>/<namespace>/<name>/<system>`: a module and its cached
/// versions, newest first.
#[derive(Debug, Clone, Serialize)]
pub struct ModuleView {
    pub api_version: u32,
    pub module: ModuleSummary,
    pub versions: Vec<ModuleEntry>,
}

/// A provider a module requires, and whether this cache holds it.
#[derive(Debug, Clone, Serialize)]
pub struct ProviderNeed {
    /// The local name (`aws`).
    pub name: String,
    /// The full source address (`registry.terraform.io/hashicorp/aws`).
    pub source: String,
    pub version: Option<String>,
    /// Whether this cache holds any version of it (the pages link to it).
    pub cached: bool,
}

/// `GET -/api/v1/modules/<hostname>/<namespace>/<name>/<system>/<version>`: one version with
/// its documentation.
#[derive(Debug, Clone, Serialize)]
pub struct ModuleVersionView {
    pub api_version: u32,
    pub module: ModuleSummary,
    pub version: ModuleEntry,
    /// Every cached version of the module, newest first.
    pub versions: Vec<String>,
    /// The `module` block that calls this version through this mirror.
    pub module_block: String,
    /// The root module's required providers, with the cache's word on each.
    pub providers: Vec<ProviderNeed>,
    /// What the package says about itself; `None` when it could not be read at all.
    pub docs: Option<crate::module_docs::ModuleDocs>,
    /// Why there is no documentation, when there is none.
    pub docs_error: Option<String>,
}

/// The `module` block for a version: the address as sources write it (in full, which both
/// CLIs read; with this mirror's `host` block the CLI asks the mirror) and the exact version.
pub fn module_block(address: &str, version: &str) -> String {
    let name = address
        .split('/')
        .nth(2)
        .unwrap_or("this")
        .replace(|c: char| !c.is_ascii_alphanumeric() && c != '_', "_");
    format!("module \"{name}\" {{\n  source  = \"{address}\"\n  version = \"{version}\"\n}}\n")
}

/// The full address of a required provider's source (`hashicorp/aws` ->
/// `registry.terraform.io/hashicorp/aws`; no source: `hashicorp/<name>`), lowercased.
pub fn provider_source(name: &str, source: Option<&str>) -> String {
    let source = source.map_or_else(|| format!("hashicorp/{name}"), str::to_string);
    let source = source.to_lowercase();
    match source.matches('/').count() {
        1 => format!("registry.terraform.io/{source}"),
        _ => source,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(address: &str, version: &str, kind: &'static str) -> ModuleEntry {
        ModuleEntry {
            address: address.into(),
            version: version.into(),
            source_kind: kind,
            source: format!("https://example.com/{address}"),
            reference: None,
            commit: None,
            subdir: None,
            sha256: "0".repeat(64),
            size: 1,
            trust: "origin",
            fetched_at: 0,
            last_used: version.len() as u64,
        }
    }

    #[test]
    fn lists_modules_once_and_searches_their_documentation() {
        let all = [
            entry("registry.terraform.io/acme/vpc/aws", "2.0.0", "archive"),
            entry("registry.terraform.io/acme/vpc/aws", "1.0.0", "archive"),
            entry("registry.terraform.io/other/dns/aws", "0.1.0", "git"),
        ];
        assert_eq!(groups(&all), [0..2, 2..3]);
        let text = [
            Some(Arc::new(Indexed {
                sha256: crate::hash::Sha256::of(b""),
                text: "builds a network\ncidr_block".into(),
                summary: Some("Builds a network.".into()),
            })),
            None,
        ];
        let search = |q: &str| {
            let list = ModuleList::of(&all, &[], &ModuleQuery::parse(Some(q)), &text, true);
            (
                list.summaries
                    .iter()
                    .map(|m| m.address.as_str().to_owned())
                    .collect::<Vec<_>>(),
                list.modules.len(),
            )
        };
        let vpc = "registry.terraform.io/acme/vpc/aws".to_string();
        let dns = "registry.terraform.io/other/dns/aws".to_string();
        assert_eq!(search(""), (vec![vpc.clone(), dns.clone()], 3));
        assert_eq!(
            search("q=NETWORK+cidr"),
            (vec![vpc.clone()], 2),
            "every word, any case"
        );
        assert_eq!(search("q=network+dns"), (vec![], 0));
        assert_eq!(search("q=other%2F"), (vec![dns.clone()], 1), "the address");
        assert_eq!(search("source=git"), (vec![dns.clone()], 1));
        assert_eq!(
            search("namespace=acme&trust=origin"),
            (vec![vpc.clone()], 2)
        );
        let list = ModuleList::of(&all, &[], &ModuleQuery::default(), &text, false);
        assert!(
            list.modules.is_empty(),
            "the pages' list holds summaries only"
        );
        assert_eq!(list.summaries[0].latest, "2.0.0");
        assert_eq!(list.summaries[0].versions, 2);
        assert_eq!(
            list.summaries[0].summary.as_deref(),
            Some("Builds a network.")
        );
        assert_eq!(list.choices.sources, ["archive", "git"]);
    }

    #[test]
    fn module_blocks_and_provider_sources() {
        assert_eq!(
            module_block("registry.terraform.io/acme/vpc-x/aws", "1.0.0"),
            "module \"vpc_x\" {\n  source  = \"registry.terraform.io/acme/vpc-x/aws\"\n  version = \"1.0.0\"\n}\n"
        );
        assert_eq!(
            provider_source("aws", None),
            "registry.terraform.io/hashicorp/aws"
        );
        assert_eq!(
            provider_source("x", Some("Acme/X")),
            "registry.terraform.io/acme/x"
        );
        assert_eq!(
            provider_source("x", Some("example.com/acme/x")),
            "example.com/acme/x"
        );
    }
}
