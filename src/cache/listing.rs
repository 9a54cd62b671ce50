//! Version lists of every kind (a provider's versions, a module's versions), kept in memory and
//! in the store and judged by one set of freshness rules.
//!
//! A list younger than `cache.index_ttl` is served as it is (always, when offline). One younger
//! than `cache.stale_if_error` is served at once while one background refresh runs
//! (stale-while-revalidate; while the origin is down the copy simply stays, which is
//! stale-if-error). Anything older, or nothing at all, is fetched while the caller waits, one
//! flight per list. "No such thing" answers live only in memory, for `cache.not_found_ttl`; found
//! lists are persisted so that a restarted server, or another replica, starts from them.
//!
//! What a list is fetched with is the caller's: this module knows nothing about origins.

use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Aborted, Flights};
use crate::address::{ModuleAddr, ProviderAddr, Version};
use crate::clock::Clock;
use crate::metrics::{Lookup, LookupKind, Metrics};
use crate::records::{FirstSeen, IndexRecord, ModuleVersions};
use crate::storage::{Key, Storage, StorageError};

/// A version list as the store keeps it.
pub trait Listing: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// What the list belongs to, as a word for messages (`"provider"`, `"module"`).
    const NOUN: &'static str;
    /// The lookup kind it is counted under in `provender_cache_lookups_total`.
    const LOOKUP: LookupKind;
    /// Unix seconds when the origin answered.
    fn fetched_at(&self) -> u64;
    /// Whether the origin knew the thing at all.
    fn found(&self) -> bool;
    /// Drops a version; returns whether it was listed.
    fn drop_version(&mut self, version: &Version) -> bool;
    /// Whether no version is listed.
    fn is_empty(&self) -> bool;
    /// A found list without versions, as of `now` (where an import starts from).
    fn empty(now: u64) -> Self;
    /// The versions listed.
    fn listed(&self) -> Vec<&Version>;
    /// When each version was first seen.
    fn seen(&self) -> &FirstSeen;
    fn seen_mut(&mut self) -> &mut FirstSeen;
}

/// Gives a freshly fetched list the first-seen times of the list it replaces (see
/// [`FirstSeen::carried`]).
fn carry_seen<R: Listing>(fresh: &mut R, previous: Option<&R>, now: u64) {
    let listed = previous.map(|p| p.listed());
    let before = previous.zip(listed.as_deref()).map(|(p, l)| (p.seen(), l));
    let seen = FirstSeen::carried(before, fresh.listed(), now);
    *fresh.seen_mut() = seen;
}

impl Listing for IndexRecord {
    const NOUN: &'static str = "provider";
    const LOOKUP: LookupKind = LookupKind::Index;
    fn fetched_at(&self) -> u64 {
        self.fetched_at
    }
    fn found(&self) -> bool {
        self.found
    }
    fn drop_version(&mut self, version: &Version) -> bool {
        let before = self.versions.len();
        self.versions.retain(|v| &v.version != version);
        self.versions.len() != before
    }
    fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }
    fn empty(now: u64) -> Self {
        IndexRecord {
            fetched_at: now,
            found: true,
            versions: Vec::new(),
            seen: Default::default(),
            rendered: Default::default(),
        }
    }
    fn listed(&self) -> Vec<&Version> {
        self.versions.iter().map(|v| &v.version).collect()
    }
    fn seen(&self) -> &FirstSeen {
        &self.seen
    }
    fn seen_mut(&mut self) -> &mut FirstSeen {
        &mut self.seen
    }
}

impl Listing for ModuleVersions {
    const NOUN: &'static str = "module";
    const LOOKUP: LookupKind = LookupKind::ModuleVersions;
    fn fetched_at(&self) -> u64 {
        self.fetched_at
    }
    fn found(&self) -> bool {
        self.found
    }
    fn drop_version(&mut self, version: &Version) -> bool {
        let before = self.versions.len();
        self.versions.retain(|v| v != version);
        self.versions.len() != before
    }
    fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }
    fn empty(now: u64) -> Self {
        ModuleVersions {
            fetched_at: now,
            found: true,
            versions: Vec::new(),
            seen: Default::default(),
        }
    }
    fn listed(&self) -> Vec<&Version> {
        self.versions.iter().collect()
    }
    fn seen(&self) -> &FirstSeen {
        &self.seen
    }
    fn seen_mut(&mut self) -> &mut FirstSeen {
        &mut self.seen
    }
}

impl Listing for crate::records::releases::ReleaseList {
    const NOUN: &'static str = "release list";
    const LOOKUP: LookupKind = LookupKind::ReleaseIndex;
    fn fetched_at(&self) -> u64 {
        self.fetched_at
    }
    fn found(&self) -> bool {
        self.found
    }
    fn drop_version(&mut self, version: &Version) -> bool {
        let before = self.releases.len();
        self.releases.retain(|r| &r.version != version);
        self.releases.len() != before
    }
    fn is_empty(&self) -> bool {
        self.releases.is_empty()
    }
    fn empty(now: u64) -> Self {
        crate::records::releases::ReleaseList {
            // Lists start from their origin's answer; an empty one names no product of its own.
            product: crate::records::releases::Product::Terraform,
            fetched_at: now,
            found: true,
            releases: Vec::new(),
            seen: Default::default(),
        }
    }
    fn listed(&self) -> Vec<&Version> {
        self.releases.iter().map(|r| &r.version).collect()
    }
    fn seen(&self) -> &FirstSeen {
        &self.seen
    }
    fn seen_mut(&mut self) -> &mut FirstSeen {
        &mut self.seen
    }
}

/// The store key of a CLI's list of releases.
pub fn release_list_key(product: &crate::records::releases::Product) -> Key {
    Key::new(["releases", product.as_str(), "index.json"])
}

/// The store key of a provider's version list.
pub fn provider_list_key(addr: &ProviderAddr) -> Key {
    Key::new([
        "metadata",
        addr.hostname.as_str(),
        &addr.namespace,
        &addr.type_,
        "index.json",
    ])
}

/// The store key of a module's version list.
pub fn module_list_key(addr: &ModuleAddr) -> Key {
    Key::new([
        "modules",
        addr.hostname.as_str(),
        &addr.namespace,
        &addr.name,
        &addr.system,
        "versions.json",
    ])
}

/// How long version lists are trusted (the `cache` settings), and whether origins may be asked
/// at all.
#[derive(Debug, Clone, Copy)]
pub struct FreshnessRules {
    /// `cache.index_ttl`: served as it is while younger.
    pub ttl: Duration,
    /// `cache.stale_if_error`: served while refreshed in the background while younger.
    pub stale_if_error: Duration,
    /// `cache.not_found_ttl`: how long "no such thing" is believed.
    pub not_found_ttl: Duration,
    /// `upstream.offline`: every kept list is served as it is, and nothing is fetched.
    pub offline: bool,
}

/// What a cached list allows, by its age.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Serve it as it is.
    Fresh,
    /// Serve "no such thing" as it is.
    KnownAbsent,
    /// Serve it, and refresh it in the background.
    Stale,
    /// Fetch it again.
    Expired,
}

impl FreshnessRules {
    /// What a list fetched at `fetched_at` allows at `now`.
    pub fn judge(&self, fetched_at: u64, found: bool, now: u64) -> Verdict {
        let age = Duration::from_secs(now.saturating_sub(fetched_at));
        if !found {
            return match age < self.not_found_ttl {
                true => Verdict::KnownAbsent,
                false => Verdict::Expired,
            };
        }
        if age < self.ttl || self.offline {
            Verdict::Fresh
        } else if age < self.stale_if_error {
            Verdict::Stale
        } else {
            Verdict::Expired
        }
    }
}

/// Nothing usable is cached and origins may not be asked (`upstream.offline`).
#[derive(Debug, Clone, thiserror::Error)]
#[error("offline mode: {what} is not in the cache")]
pub struct NotCached {
    /// What was asked for (`module hashicorp/consul/aws`, `registry.terraform.io/acme/foo`).
    pub what: String,
}

/// Version lists of one kind: `K` names a list, `R` is the list, `E` the caller's error.
pub struct Listings<K, R, E> {
    inner: Arc<Inner<K, R, E>>,
}

impl<K, R, E> Clone for Listings<K, R, E> {
    fn clone(&self) -> Self {
        Listings {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<K, R, E> {
    storage: Arc<dyn Storage>,
    key_of: fn(&K) -> Key,
    memory: moka::future::Cache<K, Arc<R>>,
    flights: Flights<K, Arc<R>, E>,
    rules: FreshnessRules,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    /// Serialises read-modify-write changes ([`Listings::update`], [`Listings::unlist`]).
    updates: tokio::sync::Mutex<()>,
}

impl<K, R, E> Listings<K, R, E>
where
    K: Eq + Hash + Clone + std::fmt::Display + Send + Sync + 'static,
    R: Listing,
    E: From<Aborted> + From<NotCached> + Clone + std::fmt::Display + Send + Sync + 'static,
{
    /// Lists kept in `storage` under `key_of`, up to `capacity` of them in memory.
    pub fn new(
        storage: Arc<dyn Storage>,
        key_of: fn(&K) -> Key,
        capacity: u64,
        rules: FreshnessRules,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Listings {
            inner: Arc::new(Inner {
                storage,
                key_of,
                memory: moka::future::Cache::builder()
                    .max_capacity(capacity)
                    .build(),
                flights: Flights::default(),
                rules,
                clock,
                metrics,
                updates: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The rules lists are judged by.
    pub fn rules(&self) -> FreshnessRules {
        self.inner.rules
    }

    /// The current time, as lists record it in `fetched_at`.
    pub fn now(&self) -> u64 {
        self.inner.clock.now_secs()
    }

    /// The list for `key`, fresh enough to serve: from memory, else the store, else fetched
    /// with `fetch` while the caller waits (one flight per key, detached from the callers). A
    /// stale list is served while `fetch` runs in the background.
    pub async fn get<F, Fut>(&self, key: &K, fetch: F) -> Result<Arc<R>, E>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<R, E>> + Send + 'static,
    {
        if let Some(rec) = self.cached(key).await {
            match self
                .inner
                .rules
                .judge(rec.fetched_at(), rec.found(), self.now())
            {
                Verdict::Fresh => {
                    self.count(Lookup::Hit);
                    return Ok(rec);
                }
                Verdict::KnownAbsent => {
                    self.count(Lookup::NegativeHit);
                    return Ok(rec);
                }
                Verdict::Stale => {
                    self.count(Lookup::Stale);
                    if !self.inner.flights.contains(key) {
                        let (this, key) = (self.clone(), key.clone());
                        tokio::spawn(async move {
                            if let Err(e) = this.refresh(&key, fetch).await {
                                tracing::warn!(list = %key, kind = R::NOUN, "cannot refresh the version list; serving the earlier one: {e}");
                            }
                        });
                    }
                    return Ok(rec);
                }
                Verdict::Expired => {}
            }
        }
        if self.inner.rules.offline {
            return Err(NotCached {
                what: format!("{} {key}", R::NOUN),
            }
            .into());
        }
        self.count(Lookup::Miss);
        self.refresh(key, fetch).await
    }

    /// Fetches the list with `fetch` (one flight per key), persists it when the thing exists,
    /// and keeps it in memory.
    pub async fn refresh<F, Fut>(&self, key: &K, fetch: F) -> Result<Arc<R>, E>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<R, E>> + Send + 'static,
    {
        let (this, owned) = (self.clone(), key.clone());
        let work = move || async move {
            let mut rec = fetch().await?;
            if rec.found() {
                let previous = this.cached(&owned).await.filter(|p| p.found());
                carry_seen(&mut rec, previous.as_deref(), this.now());
                if let Err(e) = this.persist(&owned, &rec).await {
                    tracing::warn!(list = %owned, kind = R::NOUN, "cannot persist the version list: {e}");
                }
            }
            let rec = Arc::new(rec);
            this.inner.memory.insert(owned, rec.clone()).await;
            Ok(rec)
        };
        self.inner.flights.run(key.clone(), work).await.0
    }

    /// Whether a fetch of `key` is in progress.
    pub fn refreshing(&self, key: &K) -> bool {
        self.inner.flights.contains(key)
    }

    /// The list kept for `key`, whatever its age: memory, else the store.
    pub async fn cached(&self, key: &K) -> Option<Arc<R>> {
        if let Some(rec) = self.inner.memory.get(key).await {
            return Some(rec);
        }
        let rec = Arc::new(self.stored(key).await?);
        self.inner.memory.insert(key.clone(), rec.clone()).await;
        Some(rec)
    }

    /// The persisted list, if any (unreadable ones are logged and ignored).
    pub async fn stored(&self, key: &K) -> Option<R> {
        let store_key = (self.inner.key_of)(key);
        let bytes = match self.inner.storage.read(&store_key).await {
            Ok(found) => found?,
            Err(e) => {
                tracing::warn!(list = %key, kind = R::NOUN, "cannot read the cached version list: {e}");
                return None;
            }
        };
        serde_json::from_slice(&bytes)
            .map_err(|e| tracing::warn!(list = %key, kind = R::NOUN, key = %store_key, "ignoring an unreadable version list: {e}"))
            .ok()
    }

    /// Changes the persisted list for `key` with `change` (starting from an empty, found list
    /// when there is none), which says whether it changed anything. A changed list is persisted
    /// and kept in memory. Returns whether it changed.
    pub async fn update(
        &self,
        key: &K,
        change: impl FnOnce(&mut R) -> bool,
    ) -> Result<bool, StorageError> {
        let _serialised = self.inner.updates.lock().await;
        let mut rec = match self.stored(key).await {
            Some(rec) => rec,
            None => R::empty(self.now()),
        };
        if !change(&mut rec) {
            return Ok(false);
        }
        self.persist(key, &rec).await?;
        self.inner.memory.insert(key.clone(), Arc::new(rec)).await;
        Ok(true)
    }

    /// Drops a version from the persisted list (deleting the list when none is left), for a
    /// mirror that serves only what it holds. Returns whether it was listed.
    pub async fn unlist(&self, key: &K, version: &Version) -> Result<bool, StorageError> {
        let _serialised = self.inner.updates.lock().await;
        self.inner.memory.invalidate(key).await;
        let Some(mut rec) = self.stored(key).await else {
            return Ok(false);
        };
        if !rec.drop_version(version) {
            return Ok(false);
        }
        if rec.is_empty() {
            self.inner.storage.delete(&(self.inner.key_of)(key)).await?;
        } else {
            self.persist(key, &rec).await?;
        }
        Ok(true)
    }

    async fn persist(&self, key: &K, rec: &R) -> Result<(), StorageError> {
        let bytes = serde_json::to_vec_pretty(rec).expect("records serialise");
        self.inner
            .storage
            .write(&(self.inner.key_of)(key), Bytes::from(bytes))
            .await
    }

    fn count(&self, result: Lookup) {
        self.inner.metrics.lookup(R::LOOKUP, result);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::clock::ManualClock;
    use crate::storage::DiskStorage;

    #[derive(Debug, Clone, thiserror::Error)]
    enum TestError {
        #[error("{0}")]
        Aborted(#[from] Aborted),
        #[error("{0}")]
        NotCached(#[from] NotCached),
        #[error("origin down")]
        Down,
    }

    const HOUR: Duration = Duration::from_secs(3600);

    fn rules(offline: bool) -> FreshnessRules {
        FreshnessRules {
            ttl: HOUR,
            stale_if_error: 24 * HOUR,
            not_found_ttl: Duration::from_secs(60),
            offline,
        }
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        clock: Arc<ManualClock>,
        metrics: Arc<Metrics>,
        lists: Listings<ModuleAddr, ModuleVersions, TestError>,
        fetches: Arc<AtomicUsize>,
    }

    fn fixture(offline: bool) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let storage = Arc::new(DiskStorage::new(dir.path().to_path_buf()).unwrap());
        let clock = ManualClock::at(1_000_000);
        let metrics = Arc::new(Metrics::new());
        let lists = Listings::new(
            storage,
            module_list_key,
            100,
            rules(offline),
            clock.clone(),
            metrics.clone(),
        );
        Fixture {
            _dir: dir,
            clock,
            metrics,
            lists,
            fetches: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn addr() -> ModuleAddr {
        ModuleAddr::new("registry.terraform.io", "acme", "net", "aws").unwrap()
    }

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    impl Fixture {
        /// A fetch that answers `versions` (or "not found" for `None`) stamped with the fixture's
        /// clock, counting calls.
        fn origin(
            &self,
            versions: Option<&[&str]>,
        ) -> impl FnOnce() -> futures_util::future::Ready<Result<ModuleVersions, TestError>>
        + Send
        + 'static {
            let fetches = self.fetches.clone();
            let now = self.lists.now();
            let versions: Option<Vec<Version>> =
                versions.map(|vs| vs.iter().map(|s| v(s)).collect());
            move || {
                fetches.fetch_add(1, Ordering::SeqCst);
                futures_util::future::ready(Ok(ModuleVersions {
                    fetched_at: now,
                    found: versions.is_some(),
                    versions: versions.unwrap_or_default(),
                    seen: Default::default(),
                }))
            }
        }

        fn down(
            &self,
        ) -> impl FnOnce() -> futures_util::future::Ready<Result<ModuleVersions, TestError>>
        + Send
        + 'static {
            let fetches = self.fetches.clone();
            move || {
                fetches.fetch_add(1, Ordering::SeqCst);
                futures_util::future::ready(Err(TestError::Down))
            }
        }

        fn fetched(&self) -> usize {
            self.fetches.load(Ordering::SeqCst)
        }

        fn lookups(&self, result: &str) -> u64 {
            self.metrics
                .cache_lookups
                .with_label_values(&["module_versions", result])
                .get()
        }

        /// Waits until `fetches` fetches were made and no refresh is in progress.
        async fn settled(&self, fetches: usize) {
            while self.fetched() < fetches || self.lists.refreshing(&addr()) {
                tokio::task::yield_now().await;
            }
        }
    }

    #[tokio::test]
    async fn a_refreshed_list_records_when_each_new_version_was_first_seen() {
        let f = fixture(false);
        let first = f.lists.now();
        let rec = f
            .lists
            .refresh(&addr(), f.origin(Some(&["1.0.0", "1.1.0"])))
            .await
            .unwrap();
        assert_eq!(rec.seen.since, first);
        assert_eq!(
            rec.seen.of(&v("1.0.0")),
            None,
            "baseline: listed at first sight"
        );

        f.clock.advance(Duration::from_secs(3600));
        let later = f.lists.now();
        let rec = f
            .lists
            .refresh(&addr(), f.origin(Some(&["1.0.0", "1.1.0", "1.2.0"])))
            .await
            .unwrap();
        assert_eq!(rec.seen.since, first);
        assert_eq!(rec.seen.of(&v("1.1.0")), None);
        assert_eq!(rec.seen.of(&v("1.2.0")), Some(later));

        // Kept through later refreshes and a restart (the stored list), forgotten when dropped.
        f.clock.advance(Duration::from_secs(3600));
        let rec = f
            .lists
            .refresh(&addr(), f.origin(Some(&["1.0.0", "1.2.0"])))
            .await
            .unwrap();
        assert_eq!(rec.seen.of(&v("1.2.0")), Some(later));
        let stored = f.lists.stored(&addr()).await.unwrap();
        assert_eq!(stored.seen, rec.seen);
        f.clock.advance(Duration::from_secs(3600));
        let rec = f
            .lists
            .refresh(&addr(), f.origin(Some(&["1.0.0", "1.1.0", "1.2.0"])))
            .await
            .unwrap();
        assert_eq!(
            rec.seen.of(&v("1.1.0")),
            Some(f.lists.now()),
            "a version that came back is new again"
        );
    }

    #[tokio::test]
    async fn a_fresh_list_is_served_without_asking_the_origin() {
        let f = fixture(false);
        let got = f
            .lists
            .get(&addr(), f.origin(Some(&["1.0.0"])))
            .await
            .unwrap();
        assert_eq!(got.versions, vec![v("1.0.0")]);
        f.clock.advance(HOUR - Duration::from_secs(1));
        let again = f.lists.get(&addr(), f.down()).await.unwrap();
        assert_eq!(again.versions, vec![v("1.0.0")]);
        assert_eq!(f.fetched(), 1);
        assert_eq!((f.lookups("miss"), f.lookups("hit")), (1, 1));
    }

    #[tokio::test]
    async fn a_stale_list_is_served_at_once_and_refreshed_once_in_the_background() {
        let f = fixture(false);
        f.lists
            .get(&addr(), f.origin(Some(&["1.0.0"])))
            .await
            .unwrap();
        f.clock.advance(2 * HOUR);
        let served = f
            .lists
            .get(&addr(), f.origin(Some(&["1.0.0", "1.1.0"])))
            .await
            .unwrap();
        assert_eq!(served.versions, vec![v("1.0.0")], "the stale copy, at once");
        f.settled(2).await;
        assert_eq!(f.fetched(), 2);
        let refreshed = f.lists.get(&addr(), f.down()).await.unwrap();
        assert_eq!(refreshed.versions, vec![v("1.0.0"), v("1.1.0")]);
        assert_eq!(f.fetched(), 2, "the refreshed copy is fresh");
        assert_eq!(f.lookups("stale"), 1);
    }

    #[tokio::test]
    async fn while_the_origin_is_down_the_stale_list_stays_until_stale_if_error() {
        let f = fixture(false);
        f.lists
            .get(&addr(), f.origin(Some(&["1.0.0"])))
            .await
            .unwrap();
        f.clock.advance(23 * HOUR);
        let served = f.lists.get(&addr(), f.down()).await.unwrap();
        assert_eq!(served.versions, vec![v("1.0.0")]);
        f.settled(2).await;
        f.clock.advance(2 * HOUR);
        let err = f.lists.get(&addr(), f.down()).await.unwrap_err();
        assert!(matches!(err, TestError::Down), "{err}");
        assert_eq!(
            f.fetched(),
            3,
            "one background refresh, then one in the foreground"
        );
    }

    #[tokio::test]
    async fn not_found_is_kept_in_memory_only_and_briefly() {
        let f = fixture(false);
        let got = f.lists.get(&addr(), f.origin(None)).await.unwrap();
        assert!(!got.found);
        assert!(f.lists.stored(&addr()).await.is_none(), "never persisted");
        f.lists.get(&addr(), f.down()).await.unwrap();
        assert_eq!(f.lookups("negative_hit"), 1);
        f.clock.advance(Duration::from_secs(61));
        let found = f
            .lists
            .get(&addr(), f.origin(Some(&["2.0.0"])))
            .await
            .unwrap();
        assert!(found.found);
        assert_eq!(f.fetched(), 2);
    }

    #[tokio::test]
    async fn offline_serves_any_kept_list_and_fetches_nothing() {
        let online = fixture(false);
        online
            .lists
            .get(&addr(), online.origin(Some(&["1.0.0"])))
            .await
            .unwrap();
        // A second cache over the same store, offline and a year later.
        let storage = Arc::new(DiskStorage::new(online._dir.path().to_path_buf()).unwrap());
        let clock = ManualClock::at(online.lists.now() + 365 * 24 * 3600);
        let offline: Listings<ModuleAddr, ModuleVersions, TestError> = Listings::new(
            storage,
            module_list_key,
            100,
            rules(true),
            clock,
            Arc::new(Metrics::new()),
        );
        let got = offline.get(&addr(), online.down()).await.unwrap();
        assert_eq!(got.versions, vec![v("1.0.0")]);
        let other = ModuleAddr::new("registry.terraform.io", "acme", "other", "aws").unwrap();
        let err = offline.get(&other, online.down()).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "offline mode: module registry.terraform.io/acme/other/aws is not in the cache"
        );
        assert_eq!(online.fetched(), 1, "offline never fetches");
    }

    #[tokio::test]
    async fn an_update_starts_from_an_empty_list_and_persists_only_a_change() {
        let f = fixture(false);
        let add = |version: &'static str| {
            move |rec: &mut ModuleVersions| {
                let v = v(version);
                if rec.versions.contains(&v) {
                    return false;
                }
                rec.versions.push(v);
                true
            }
        };
        assert!(f.lists.update(&addr(), add("1.0.0")).await.unwrap());
        assert!(!f.lists.update(&addr(), add("1.0.0")).await.unwrap());
        let stored = f.lists.stored(&addr()).await.unwrap();
        assert!(stored.found);
        assert_eq!(stored.versions, vec![v("1.0.0")]);
        let served = f.lists.get(&addr(), f.down()).await.unwrap();
        assert_eq!(
            served.versions,
            vec![v("1.0.0")],
            "served from what the update kept"
        );
        assert_eq!(f.fetched(), 0);
    }

    #[tokio::test]
    async fn unlisting_the_last_version_deletes_the_list() {
        let f = fixture(false);
        f.lists
            .get(&addr(), f.origin(Some(&["1.0.0", "1.1.0"])))
            .await
            .unwrap();
        assert!(f.lists.unlist(&addr(), &v("1.0.0")).await.unwrap());
        assert!(!f.lists.unlist(&addr(), &v("1.0.0")).await.unwrap());
        assert_eq!(
            f.lists.stored(&addr()).await.unwrap().versions,
            vec![v("1.1.0")]
        );
        assert!(f.lists.unlist(&addr(), &v("1.1.0")).await.unwrap());
        assert!(f.lists.stored(&addr()).await.is_none());
    }

    #[test]
    fn the_rules_by_age() {
        let r = rules(false);
        let t = 10_000_000;
        assert_eq!(r.judge(t, true, t + 3599), Verdict::Fresh);
        assert_eq!(r.judge(t, true, t + 3600), Verdict::Stale);
        assert_eq!(r.judge(t, true, t + 24 * 3600), Verdict::Expired);
        assert_eq!(r.judge(t, false, t + 59), Verdict::KnownAbsent);
        assert_eq!(r.judge(t, false, t + 60), Verdict::Expired);
        let off = rules(true);
        assert_eq!(off.judge(t, true, t + 100 * 24 * 3600), Verdict::Fresh);
        assert_eq!(off.judge(t, false, t + 60), Verdict::Expired);
        // A clock behind the record's time (another replica's clock) is age zero.
        assert_eq!(r.judge(t, true, t - 10), Verdict::Fresh);
    }
}
