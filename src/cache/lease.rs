//! Fleet-wide single fetch: replicas sharing one store agree, through a lease object, on which
//! of them downloads an object that several of them miss at once.
//!
//! The replica whose conditional create of `leases/<object key>` succeeds leads: it fetches from
//! the origin as usual, rewrites the lease every [`RENEW`] while it works (a counter that moves)
//! and deletes it when it is done. The others follow ([`Leases::follow`]): they wait until the
//! object is committed and serve it from the store, or until the lease is gone (the leader failed
//! or kept nothing) and claim it themselves. A lease that has not moved for [`STALE`] by the
//! follower's own clock (replicas' clocks need not agree), or that is older than [`ABANDONED`]
//! when first seen, was left by a replica that died: the follower takes it over.
//!
//! A leader may be a background download paced below full speed (the complete-hashes job). A
//! follower with a client waiting writes `leases/<object key>.wanted`; the leader looks for it
//! at each renewal and from then on downloads at full speed, as for a client of its own.
//!
//! Correctness never depends on a lease: every writer of an object writes the same verified
//! bytes. A store that does not enforce conditional creates (Garage answers 200 and overwrites)
//! only loses the saving: [`Leases`] checks once, with a probe object, and where the store lets
//! a second create through every replica fetches alone, as without leases.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;

use crate::storage::{Key, Storage};

/// How often a leader rewrites its lease.
pub const RENEW: Duration = Duration::from_secs(2);
/// How long a lease may stand still before a follower takes it over.
pub const STALE: Duration = Duration::from_secs(10);
/// A lease last written this long ago (by the store's clock against ours) is taken over at once.
pub const ABANDONED: Duration = Duration::from_secs(120);
/// How often a follower looks at the store.
const POLL: Duration = Duration::from_millis(250);
/// The first segment of every lease's key.
const ROOT: &str = "leases";

/// This replica's leases on one store.
pub struct Leases {
    store: Arc<dyn Storage>,
    /// This process's name in lease objects: random, so that replicas never share one.
    holder: String,
    /// Whether the store refuses a second create of one key, once probed.
    enforced: tokio::sync::OnceCell<bool>,
}

/// What [`Leases::claim`] found.
pub enum Claim {
    /// This replica holds the lease: it fetches.
    Leader(LeaseGuard),
    /// Another replica holds it: [`Leases::follow`] it.
    Held,
    /// The store does not enforce conditional creates (or could not be asked): fetch without a
    /// lease.
    Alone,
}

/// How following a lease ended.
pub enum Followed {
    /// The object is in the store.
    Committed,
    /// The lease was released without the object, and this replica claimed it.
    Leader(LeaseGuard),
    /// The leader stopped renewing its lease; this replica took it over.
    TookOver(LeaseGuard),
    /// The store failed while following: fetch without a lease.
    Alone,
}

/// A lease this replica holds: renewed until dropped, then deleted.
pub struct LeaseGuard {
    renewal: tokio::task::JoinHandle<()>,
    release: Option<(Arc<dyn Storage>, Key, String)>,
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.renewal.abort();
        if let Some((store, key, holder)) = self.release.take() {
            tokio::spawn(async move {
                // A follower may have taken over a lease that stood still: leave its lease alone.
                let ours = match store.read(&key).await {
                    Ok(Some(body)) => Lease::parse(&body).is_some_and(|l| l.holder == holder),
                    _ => false,
                };
                if ours {
                    let _ = store.delete(&want_key(&key)).await;
                    let _ = store.delete(&key).await;
                }
            });
        }
    }
}

impl LeaseGuard {
    /// Whether a follower with a waiting client has asked for the object (its `.wanted` marker
    /// is there), looked at now rather than at the next renewal: a leader that would otherwise
    /// keep nothing asks this last.
    pub async fn asked(&self) -> bool {
        match &self.release {
            Some((store, key, _)) => matches!(store.head(&want_key(key)).await, Ok(Some(_))),
            None => false,
        }
    }
}

/// The marker a follower with a waiting client leaves beside a lease.
fn want_key(lease: &Key) -> Key {
    lease.with_suffix(".wanted")
}

/// A lease object's content.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Lease {
    holder: String,
    /// Goes up with every renewal, so followers see it move.
    renewed: u64,
}

impl Lease {
    fn parse(bytes: &[u8]) -> Option<Lease> {
        serde_json::from_slice(bytes).ok()
    }

    fn to_bytes(&self) -> Bytes {
        Bytes::from(serde_json::to_vec(self).expect("a lease serialises"))
    }
}

impl Leases {
    pub fn new(store: Arc<dyn Storage>) -> Leases {
        let mut id = [0u8; 8];
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut id);
        Leases {
            store,
            holder: hex::encode(id),
            enforced: tokio::sync::OnceCell::new(),
        }
    }

    fn key(object: &Key) -> Key {
        Key::new(std::iter::once(ROOT).chain(object.segments()))
    }

    /// Whether the store refuses a second create of one key: asked once, with a probe object of
    /// this process.
    pub async fn enforced(&self) -> bool {
        *self
            .enforced
            .get_or_init(|| async {
                let probe = Key::new([ROOT, &format!(".probe-{}", self.holder)]);
                let enforced =
                    crate::storage::creates_enforced(self.store.as_ref(), &probe).await;
                if enforced {
                    tracing::info!(store = %self.store.describe(), "the store enforces conditional creates: replicas that miss the same archive fetch it once between them");
                } else {
                    tracing::warn!(store = %self.store.describe(), "the store does not enforce conditional creates: replicas that miss the same archive at once each fetch it");
                }
                enforced
            })
            .await
    }

    /// Tries to become the one replica that fetches `object`. `wanted` is whether a client
    /// waits for it; a leader sets it when a follower's client does.
    pub async fn claim(&self, object: &Key, wanted: &Arc<AtomicBool>) -> Claim {
        if !self.enforced().await {
            return Claim::Alone;
        }
        let key = Self::key(object);
        let lease = Lease {
            holder: self.holder.clone(),
            renewed: 0,
        };
        match self.store.create(&key, lease.to_bytes()).await {
            Ok(true) => Claim::Leader(self.hold(key, wanted.clone())),
            Ok(false) => Claim::Held,
            Err(e) => {
                tracing::warn!(lease = %key, "cannot claim a lease, fetching without one: {e}");
                Claim::Alone
            }
        }
    }

    /// Waits on another replica's lease on `object` until `committed` says the object is in the
    /// store, or this replica must fetch it (see the module documentation). While `wanted` (a
    /// client of this replica waits), the leader is asked to hurry.
    pub async fn follow<F, Fut>(
        &self,
        object: &Key,
        committed: F,
        wanted: &Arc<AtomicBool>,
    ) -> Followed
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let key = Self::key(object);
        let mut last: Option<(Lease, Instant)> = None;
        let mut asked = false;
        loop {
            if committed().await {
                return Followed::Committed;
            }
            if !asked && wanted.load(Ordering::Relaxed) {
                asked = true;
                let _ = self
                    .store
                    .write(&want_key(&key), Bytes::from_static(b"{}"))
                    .await;
            }
            let seen = match self.store.head(&key).await {
                Ok(None) => None,
                Ok(Some(meta)) => match self.store.read(&key).await {
                    Ok(Some(body)) => Some((Lease::parse(&body), meta.modified)),
                    Ok(None) => None,
                    Err(_) => return Followed::Alone,
                },
                Err(_) => return Followed::Alone,
            };
            match seen {
                None => {
                    // Released: the object is committed, or the leader kept nothing.
                    if committed().await {
                        return Followed::Committed;
                    }
                    match self.claim(object, wanted).await {
                        Claim::Leader(guard) => return Followed::Leader(guard),
                        Claim::Held => last = None,
                        Claim::Alone => return Followed::Alone,
                    }
                }
                Some((lease, modified)) => {
                    let age = SystemTime::now()
                        .duration_since(modified)
                        .unwrap_or_default();
                    let lease = lease.unwrap_or(Lease {
                        holder: String::new(),
                        renewed: 0,
                    });
                    let unchanged = last
                        .as_ref()
                        .filter(|(before, _)| *before == lease)
                        .map(|(_, since)| since.elapsed());
                    let still = match unchanged {
                        Some(still) => still,
                        None if last.is_none() && age > ABANDONED => ABANDONED,
                        None => {
                            last = Some((lease, Instant::now()));
                            Duration::ZERO
                        }
                    };
                    if still >= STALE {
                        tracing::warn!(lease = %key, "the replica holding the lease stopped renewing it; taking it over");
                        return Followed::TookOver(self.take_over(key, wanted).await);
                    }
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Writes this replica's lease over a stale one.
    async fn take_over(&self, key: Key, wanted: &Arc<AtomicBool>) -> LeaseGuard {
        let lease = Lease {
            holder: self.holder.clone(),
            renewed: 0,
        };
        if let Err(e) = self.store.write(&key, lease.to_bytes()).await {
            tracing::warn!(lease = %key, "cannot take over a lease: {e}");
        }
        self.hold(key, wanted.clone())
    }

    /// Renews the lease at `key` until the guard is dropped, and sets `wanted` once a follower
    /// asks for it.
    fn hold(&self, key: Key, wanted: Arc<AtomicBool>) -> LeaseGuard {
        let (store, holder) = (self.store.clone(), self.holder.clone());
        let renewed = Arc::new(AtomicU64::new(0));
        let renewal = {
            let (store, key, holder) = (store.clone(), key.clone(), holder.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(RENEW).await;
                    let lease = Lease {
                        holder: holder.clone(),
                        renewed: renewed.fetch_add(1, Ordering::Relaxed) + 1,
                    };
                    if let Err(e) = store.write(&key, lease.to_bytes()).await {
                        tracing::warn!(lease = %key, "cannot renew a lease: {e}");
                    }
                    if !wanted.load(Ordering::Relaxed)
                        && matches!(store.head(&want_key(&key)).await, Ok(Some(_)))
                    {
                        wanted.store(true, Ordering::Relaxed);
                    }
                }
            })
        };
        LeaseGuard {
            renewal,
            release: Some((store, key, holder)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::DiskStorage;

    fn store(dir: &std::path::Path) -> Arc<dyn Storage> {
        Arc::new(DiskStorage::new(dir.to_path_buf()).unwrap())
    }

    #[tokio::test]
    async fn one_replica_leads_the_other_follows_until_the_commit() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            Leases::new(store(dir.path())),
            Leases::new(store(dir.path())),
        );
        let object = Key::new(["archives", "x.zip"]);
        let (quiet, waiting) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(true)),
        );
        let Claim::Leader(guard) = a.claim(&object, &quiet).await else {
            panic!("the first claim leads");
        };
        assert!(matches!(b.claim(&object, &waiting).await, Claim::Held));
        let committed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let follower = {
            let committed = committed.clone();
            let object = object.clone();
            tokio::spawn(async move {
                let followed = b
                    .follow(
                        &object,
                        || {
                            let c = committed.load(Ordering::Relaxed);
                            async move { c }
                        },
                        &waiting,
                    )
                    .await;
                matches!(followed, Followed::Committed)
            })
        };
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(
            !follower.is_finished(),
            "the follower waits while the lease is held"
        );
        committed.store(true, Ordering::Relaxed);
        drop(guard);
        assert!(follower.await.unwrap(), "the follower saw the commit");
    }

    #[tokio::test]
    async fn a_released_lease_without_the_object_passes_to_a_follower() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            Leases::new(store(dir.path())),
            Leases::new(store(dir.path())),
        );
        let object = Key::new(["archives", "y.zip"]);
        let wanted = Arc::new(AtomicBool::new(true));
        let Claim::Leader(guard) = a.claim(&object, &wanted).await else {
            panic!("the first claim leads");
        };
        let follower = tokio::spawn(async move {
            matches!(
                b.follow(&object, || async { false }, &wanted).await,
                Followed::Leader(_)
            )
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(guard);
        assert!(
            follower.await.unwrap(),
            "the follower claimed the released lease"
        );
    }

    #[tokio::test]
    async fn an_abandoned_lease_is_taken_over_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let object = Key::new(["archives", "z.zip"]);
        let path = dir.path().join("leases/archives/z.zip");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, br#"{"holder":"gone","renewed":7}"#).unwrap();
        let old = SystemTime::now() - 2 * ABANDONED;
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let b = Leases::new(store(dir.path()));
        let wanted = Arc::new(AtomicBool::new(true));
        assert!(matches!(b.claim(&object, &wanted).await, Claim::Held));
        let started = Instant::now();
        let followed = b.follow(&object, || async { false }, &wanted).await;
        assert!(matches!(followed, Followed::TookOver(_)));
        assert!(started.elapsed() < STALE, "no wait for an abandoned lease");
    }

    #[tokio::test]
    async fn a_leader_reads_a_followers_ask_when_it_wants_to() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            Leases::new(store(dir.path())),
            Leases::new(store(dir.path())),
        );
        let object = Key::new(["archives", "w.zip"]);
        let quiet = Arc::new(AtomicBool::new(false));
        let Claim::Leader(guard) = a.claim(&object, &quiet).await else {
            panic!("the first claim leads");
        };
        assert!(!guard.asked().await, "no follower yet");
        let waiting = Arc::new(AtomicBool::new(true));
        let follower = tokio::spawn(async move {
            b.follow(&object, || async { false }, &waiting).await;
        });
        let asked = tokio::time::timeout(Duration::from_secs(5), async {
            while !guard.asked().await {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(
            asked.is_ok(),
            "the follower's client is seen without a renewal"
        );
        follower.abort();
    }
}
