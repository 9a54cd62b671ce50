//! How far one request may reach for what the cache lacks.
//!
//! The server decides per client (`[[auth.rules]]`, see `crate::auth::rules`): most clients may
//! cause fetches from the origins, some may only read the cache. A cache-only request is
//! answered from what the store holds and refused (403, naming the rule) where that would
//! need an origin; its lists show only what is cached, so the CLI picks a version it can have.
//! The door checks the reach once per request and passes it down: the core never asks who is
//! asking.

use std::sync::Arc;

use crate::address::{ProviderAddr, Version};
use crate::error::{Error, Result};
use crate::records::{IndexRecord, VersionRecord};

use super::Core;

/// How far one request may reach.
#[derive(Debug, Clone)]
pub enum Reach {
    /// To the origins, when the mirror is online.
    Origin,
    /// The cache alone; the text says why (which rule, for which client), for refusals.
    CacheOnly(Arc<str>),
}

impl Reach {
    /// `Ok` when an origin may be asked for `what`; otherwise the refusal (403).
    pub fn check(&self, what: impl std::fmt::Display) -> Result<()> {
        match self {
            Reach::Origin => Ok(()),
            Reach::CacheOnly(why) => Err(Error::Forbidden(format!(
                "{what} is not in the cache, and {why}"
            ))),
        }
    }
}

impl Core {
    /// The versions of `addr` with at least one archive in the store, from the version list
    /// last fetched (one listing of the provider's archives, no origin).
    pub(super) async fn cached_versions(
        &self,
        addr: &ProviderAddr,
        reach: &Reach,
    ) -> Result<Arc<IndexRecord>> {
        let stored: std::collections::HashSet<Version> = self
            .archives
            .committed_under(&[addr.hostname.as_str(), &addr.namespace, &addr.type_])
            .await?
            .into_iter()
            .map(|listed| listed.key.version)
            .collect();
        let list = self.provider_lists.cached(addr).await;
        let Some(list) = list.filter(|l| l.found && !stored.is_empty()) else {
            reach.check(format!("provider {addr}"))?;
            return Err(Error::NotFound(format!(
                "provider {addr} is not in the cache"
            )));
        };
        let mut cached = IndexRecord {
            fetched_at: list.fetched_at,
            found: true,
            versions: list.versions.clone(),
            seen: list.seen.clone(),
            rendered: Default::default(),
        };
        cached.versions.retain(|v| stored.contains(&v.version));
        Ok(Arc::new(cached))
    }

    /// A version record from the store (no origin), kept in memory like any other.
    pub(super) async fn stored_version(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        reach: &Reach,
    ) -> Result<Arc<VersionRecord>> {
        let Some(mut rec) = self.meta.read_version(addr, version).await else {
            reach.check(format!("{addr} {version}"))?;
            return Err(Error::NotFound(format!(
                "{addr} {version} is not in the cache"
            )));
        };
        self.fill_in_h1(addr, version, &mut rec).await;
        let rec = Arc::new(rec);
        self.meta
            .versions
            .insert((addr.clone(), version.clone()), rec.clone())
            .await;
        Ok(rec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_only_reach_refuses_with_its_reason() {
        assert!(Reach::Origin.check("x").is_ok());
        let reach = Reach::CacheOnly("rule readers lets ci read only what is cached".into());
        let err = reach
            .check("registry.example.com/acme/foo 1.0.0")
            .unwrap_err();
        assert_eq!(err.status(), http::StatusCode::FORBIDDEN);
        assert_eq!(
            err.to_string(),
            "registry.example.com/acme/foo 1.0.0 is not in the cache, and rule readers lets ci read only what is cached"
        );
    }
}
