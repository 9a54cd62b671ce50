//! What was published here, for the published page and `-/api/v1/publications`: the private
//! namespaces, each with its publications (who published what and when, its digest, whether
//! it was yanked), and the operators' removals on record.

use serde::Serialize;

use crate::cache::Audit;
use crate::records::publish::{Publication, State};

/// `GET -/api/v1/publications`.
#[derive(Debug, Clone, Serialize)]
pub struct PublishedList {
    pub api_version: u32,
    /// The hostname sources name published providers and modules with.
    pub hostname: Option<String>,
    /// Every private namespace, by name, with what it holds.
    pub namespaces: Vec<Namespace>,
    /// Every publication (published or pending), by kind, address and version.
    pub publications: Vec<Publication>,
    /// Publications an operator removed (`provender unpublish`), oldest first.
    pub removed: Vec<Audit>,
}

/// One private namespace.
#[derive(Debug, Clone, Serialize)]
pub struct Namespace {
    pub name: String,
    /// Its published versions, newest publication first.
    pub entries: Vec<PublishedEntry>,
}

/// One published version, as shown.
#[derive(Debug, Clone, Serialize)]
pub struct PublishedEntry {
    pub kind: &'static str,
    pub address: String,
    pub version: String,
    pub published_by: String,
    /// RFC 3339, UTC.
    pub published_at: String,
    pub digest: String,
    /// Who yanked it, when and why, if it was.
    pub yanked: Option<String>,
}

impl PublishedEntry {
    /// How a publication is shown.
    pub fn of(p: &Publication) -> PublishedEntry {
        PublishedEntry {
            kind: p.kind.as_str(),
            address: p.address.clone(),
            version: p.version.to_string(),
            published_by: p.published_by.clone(),
            published_at: time(p.published_at),
            digest: p.digest.to_string(),
            yanked: p.yanked.as_ref().map(|y| {
                let why = match y.reason.is_empty() {
                    true => String::new(),
                    false => format!(": {}", y.reason),
                };
                format!("by {} at {}{why}", y.by, time(y.at))
            }),
        }
    }
}

fn time(secs: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .to_string()
}

impl PublishedList {
    /// The view of `publications` and `removed` under the private `namespaces`.
    pub fn of(
        hostname: Option<String>,
        namespaces: impl IntoIterator<Item = String>,
        publications: Vec<Publication>,
        removed: Vec<Audit>,
    ) -> PublishedList {
        let namespaces = namespaces
            .into_iter()
            .map(|name| {
                let mut entries: Vec<(u64, PublishedEntry)> = publications
                    .iter()
                    .filter(|p| p.state == State::Published)
                    .filter(|p| {
                        p.address
                            .split('/')
                            .nth(1)
                            .is_some_and(|ns| ns.eq_ignore_ascii_case(&name))
                    })
                    .map(|p| (p.published_at, PublishedEntry::of(p)))
                    .collect();
                entries.sort_by_key(|e| std::cmp::Reverse(e.0));
                Namespace {
                    name,
                    entries: entries.into_iter().map(|(_, e)| e).collect(),
                }
            })
            .collect();
        PublishedList {
            api_version: super::API_VERSION,
            hostname,
            namespaces,
            publications,
            removed,
        }
    }
}
