//! The records of what was published to this registry ([`Publication`]), one object per
//! version under `published/<kind>/<address>/<version>.json`, and the version lists of private
//! namespaces made from them.
//!
//! A private namespace has no origin: its version list is the publications that are published
//! and not yanked, read from the store (one listing and one read per version) and kept in
//! memory for `cache.index_ttl`, so a replica sees another's publication within that time and
//! its own at once ([`Publications::forget`]).
//!
//! A version is claimed by creating its record conditionally. On a store that does not
//! enforce conditional creates (Garage overwrites), a claim reads first, writes a record that
//! carries a token of its own, waits [`SETTLE`], and reads it back: of two publishers whose
//! writes met, the one whose record is there goes on and the other finds it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::address::Version;
use crate::records::publish::{Publication, PublishedKind};
use crate::storage::{Key, Result, Storage, StorageError};

/// An operator's removal of a published version: what it was, who removed it, when, why.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Audit {
    /// `unpublish`.
    pub action: String,
    pub by: String,
    /// Unix seconds.
    pub at: u64,
    pub reason: String,
    /// The publication as it was.
    pub publication: Publication,
}

/// What claiming a version found.
#[derive(Debug)]
pub enum Claimed {
    /// The claim is this caller's.
    Claimed,
    /// A publication of the version exists already.
    Exists(Box<Publication>),
}

/// How long a claim on a store that does not enforce conditional creates waits before it
/// reads its record back: far longer than the read-then-write of another claim.
pub const SETTLE: Duration = Duration::from_secs(1);

/// How long the list of every publication is kept in memory: changes by this process drop it
/// at once, another's show within this time (as the catalogue's snapshots do).
const EVERY_FRESH_FOR: Duration = Duration::from_secs(5);

/// The publication records in the store.
pub struct Publications {
    storage: Arc<dyn Storage>,
    /// Whether the store refuses a second create of one key, once probed.
    enforced: tokio::sync::OnceCell<bool>,
    /// Every publication of one address, by `<kind>/<address>`.
    lists: moka::future::Cache<String, Arc<Vec<Publication>>>,
    /// Every publication, and when it was read.
    every: tokio::sync::Mutex<Option<(std::time::Instant, Arc<Vec<Publication>>)>>,
}

fn kind_dir(kind: PublishedKind) -> &'static str {
    match kind {
        PublishedKind::Provider => "providers",
        PublishedKind::Module => "modules",
    }
}

/// The prefix of an address's publications.
fn prefix(kind: PublishedKind, address: &str) -> Key {
    Key::new(
        ["published", kind_dir(kind)]
            .into_iter()
            .chain(address.split('/')),
    )
}

/// The key of one version's publication.
pub fn publication_key(kind: PublishedKind, address: &str, version: &Version) -> Key {
    let file = format!("{version}.json");
    Key::new(
        ["published", kind_dir(kind)]
            .into_iter()
            .chain(address.split('/'))
            .chain([file.as_str()]),
    )
}

/// 16 random bytes.
fn rand_token() -> [u8; 16] {
    rand::random()
}

fn parse(key: &Key, bytes: &[u8]) -> Result<Publication> {
    serde_json::from_slice(bytes).map_err(|e| StorageError::Failed {
        store: "publications".into(),
        key: key.to_string(),
        message: format!("not a publication record: {e}"),
    })
}

impl Publications {
    /// Lists are kept in memory for `ttl`.
    pub fn new(storage: Arc<dyn Storage>, ttl: Duration) -> Publications {
        Publications {
            storage,
            enforced: tokio::sync::OnceCell::new(),
            every: tokio::sync::Mutex::new(None),
            lists: moka::future::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(ttl.max(Duration::from_secs(1)))
                .build(),
        }
    }

    /// One version's publication, read from the store.
    pub async fn get(
        &self,
        kind: PublishedKind,
        address: &str,
        version: &Version,
    ) -> Result<Option<Publication>> {
        let key = publication_key(kind, address, version);
        match self.storage.read(&key).await? {
            Some(bytes) => parse(&key, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// Claims a version for `publication` (state `pending`): a conditional create, so that of
    /// two publishers of one version (on any replica, where the store honours conditional
    /// creates) one claims it and the other finds its record.
    pub async fn claim(&self, publication: &Publication) -> Result<Claimed> {
        let key = publication_key(publication.kind, &publication.address, &publication.version);
        let enforced = *self
            .enforced
            .get_or_init(|| async {
                let probe = Key::new([
                    "published".to_string(),
                    format!(".probe-{}", hex::encode(rand_token())),
                ]);
                crate::storage::creates_enforced(self.storage.as_ref(), &probe).await
            })
            .await;
        let mut publication = publication.clone();
        if !enforced {
            if let Some(found) = self.storage.read(&key).await? {
                return Ok(Claimed::Exists(Box::new(parse(&key, &found)?)));
            }
            publication.claim = hex::encode(rand_token());
        }
        let bytes =
            Bytes::from(serde_json::to_vec_pretty(&publication).expect("records serialise"));
        if self.storage.create(&key, bytes).await? {
            self.forget(publication.kind, &publication.address).await;
            if enforced {
                return Ok(Claimed::Claimed);
            }
            tokio::time::sleep(SETTLE).await;
            return match self.storage.read(&key).await? {
                Some(found) => {
                    let found = parse(&key, &found)?;
                    if found.claim == publication.claim {
                        Ok(Claimed::Claimed)
                    } else {
                        Ok(Claimed::Exists(Box::new(found)))
                    }
                }
                None => Err(StorageError::Failed {
                    store: "publications".into(),
                    key: key.to_string(),
                    message: "the publication vanished while it was being claimed".into(),
                }),
            };
        }
        match self.storage.read(&key).await? {
            Some(found) => Ok(Claimed::Exists(Box::new(parse(&key, &found)?))),
            // Removed in between: the caller may try again.
            None => Err(StorageError::Failed {
                store: "publications".into(),
                key: key.to_string(),
                message: "the publication vanished while it was being claimed".into(),
            }),
        }
    }

    /// Writes a publication over its claim (published, yanked).
    pub async fn put(&self, publication: &Publication) -> Result<()> {
        let key = publication_key(publication.kind, &publication.address, &publication.version);
        let bytes = Bytes::from(serde_json::to_vec_pretty(publication).expect("records serialise"));
        self.storage.write(&key, bytes).await?;
        self.forget(publication.kind, &publication.address).await;
        Ok(())
    }

    /// Deletes a version's publication record.
    pub async fn remove(
        &self,
        kind: PublishedKind,
        address: &str,
        version: &Version,
    ) -> Result<bool> {
        let removed = self
            .storage
            .delete(&publication_key(kind, address, version))
            .await?;
        self.forget(kind, address).await;
        Ok(removed)
    }

    /// Drops the list of an address kept in memory, and the list of every publication.
    pub async fn forget(&self, kind: PublishedKind, address: &str) {
        self.lists
            .invalidate(&format!("{}/{address}", kind_dir(kind)))
            .await;
        *self.every.lock().await = None;
    }

    /// Every publication of an address (any state), oldest version first; kept in memory for
    /// the lists' time to live.
    pub async fn of(&self, kind: PublishedKind, address: &str) -> Result<Arc<Vec<Publication>>> {
        let cache_key = format!("{}/{address}", kind_dir(kind));
        if let Some(found) = self.lists.get(&cache_key).await {
            return Ok(found);
        }
        let mut found = self.read_all(&prefix(kind, address)).await?;
        found.retain(|p| p.kind == kind && p.address == address);
        found.sort_by(|a, b| a.version.cmp(&b.version));
        let found = Arc::new(found);
        self.lists.insert(cache_key, found.clone()).await;
        Ok(found)
    }

    /// Every publication in the store (the published page, prune), by kind, address and
    /// version; read once per [`EVERY_FRESH_FOR`] at most (one reader at a time).
    pub async fn all(&self) -> Result<Vec<Publication>> {
        let mut every = self.every.lock().await;
        if let Some((read, found)) = &*every {
            if read.elapsed() < EVERY_FRESH_FOR {
                return Ok((**found).clone());
            }
        }
        let mut found = self.read_all(&Key::new(["published"])).await?;
        found.sort_by(|a, b| {
            (a.kind.as_str(), &a.address, &a.version).cmp(&(
                b.kind.as_str(),
                &b.address,
                &b.version,
            ))
        });
        *every = Some((std::time::Instant::now(), Arc::new(found.clone())));
        Ok(found)
    }

    /// Keeps an audit record (an operator's removal of a publication) under
    /// `audit/<YYYY-MM-DD>/<unix time>-<digest>.json`, never overwriting one.
    pub async fn audit(&self, record: &Audit) -> Result<()> {
        let day = crate::clock::day_of(std::time::UNIX_EPOCH + Duration::from_secs(record.at));
        let id = crate::hash::Sha256::of(
            format!(
                "{}/{}/{}",
                record.publication.address, record.publication.version, record.at
            )
            .as_bytes(),
        );
        let key = Key::new([
            "audit".to_string(),
            day,
            format!("{}-{}.json", record.at, &id.to_string()[..16]),
        ]);
        let bytes = Bytes::from(serde_json::to_vec_pretty(record).expect("records serialise"));
        self.storage.create(&key, bytes).await?;
        Ok(())
    }

    /// Every audit record, oldest first.
    pub async fn audits(&self) -> Result<Vec<Audit>> {
        let mut out = Vec::new();
        for meta in self.storage.list(&Key::new(["audit"])).await? {
            if let Some(bytes) = self.storage.read(&meta.key).await? {
                match serde_json::from_slice::<Audit>(&bytes) {
                    Ok(a) => out.push(a),
                    Err(e) => {
                        tracing::warn!(key = %meta.key, "ignoring an unreadable audit record: {e}")
                    }
                }
            }
        }
        out.sort_by_key(|a| a.at);
        Ok(out)
    }

    async fn read_all(&self, prefix: &Key) -> Result<Vec<Publication>> {
        let mut out = Vec::new();
        for meta in self.storage.list(prefix).await? {
            if !meta.key.as_str().ends_with(".json") {
                continue;
            }
            if let Some(bytes) = self.storage.read(&meta.key).await? {
                match parse(&meta.key, &bytes) {
                    Ok(p) => out.push(p),
                    Err(e) => tracing::warn!("ignoring an unreadable publication: {e}"),
                }
            }
        }
        Ok(out)
    }
}
