//! The complete-hashes job: every platform's `h1:` of a version, without a client download.
//!
//! A network mirror's `<version>.json` can only list the `h1:` of archives it has hashed, and
//! a lock file made through it (OpenTofu's `trust_all_hashes`, `providers lock -net-mirror`)
//! holds only those. So once any part of a version is requested (its `<version>.json`, an
//! archive, its OCI index, its registry download metadata), the version is queued, and a
//! background task fetches the archives of the other platforms the mirror serves through the
//! same fill as a client download (verified against the signed SHA256SUMS, hashed), which puts
//! their `h1:` into the version record. The archives themselves are dropped unless
//! `complete_hashes.keep_archives` is on or a client asked for them: a version's other
//! platforms cost one download each and no space in the store. The client's own platform is
//! among those the job fetches (nothing says which one it is), and the client asks for it right
//! after the `<version>.json` that queued the version: so a checked archive no client asked for
//! yet is held for `complete_hashes.hold` before it goes (see [`super::fill`]), and a client
//! asking meanwhile takes the job's download instead of starting a second one. An `h1:` the
//! origin registry states in its `packages` extension is never listed on its word: it is
//! compared with the one computed here.
//!
//! Bounds (`[complete_hashes]`): a queue of versions (more are dropped and counted), a number
//! of archives at once, and a bandwidth shared by all of the job's downloads (which also bounds
//! what is held at once: at most what passes in `hold`). A client asking for an archive the job
//! is fetching joins that download and lifts its limit. The job never runs with
//! `upstream.offline`, nor in the operator commands.

use std::collections::HashSet;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::sync::mpsc;

use super::{Core, Reach};
use crate::address::{ProviderAddr, Version};
use crate::metrics::HashJobResult;
use crate::records::{ArchiveKey, VersionRecord};

/// A bandwidth budget, in bytes per second, shared by every download that takes from it.
pub struct Bandwidth {
    limiter: DefaultDirectRateLimiter,
    /// The most one call may take at once (one second's worth).
    burst: u32,
}

impl Bandwidth {
    pub fn new(bytes_per_second: NonZeroU32) -> Bandwidth {
        Bandwidth {
            limiter: RateLimiter::direct(Quota::per_second(bytes_per_second)),
            burst: bytes_per_second.get(),
        }
    }

    /// Waits until `bytes` may pass.
    pub async fn take(&self, mut bytes: usize) {
        while bytes > 0 {
            let part = bytes.min(self.burst as usize);
            let n = NonZeroU32::new(part as u32).expect("part is positive");
            // `part` never exceeds the burst, so capacity always suffices.
            let _ = self.limiter.until_n_ready(n).await;
            bytes -= part;
        }
    }
}

type VersionKey = (ProviderAddr, Version);

/// The job's queue: versions waiting or being worked on (each once).
pub(super) struct HashQueue {
    tx: mpsc::Sender<VersionKey>,
    pending: Mutex<HashSet<VersionKey>>,
}

impl Core {
    /// Starts the complete-hashes job, if `complete_hashes.enabled` and not offline. The server
    /// calls this; the operator commands do not.
    pub fn start_hash_job(self: &Arc<Self>) {
        let settings = &self.settings.complete_hashes;
        if !settings.enabled || !self.online() {
            return;
        }
        let (tx, mut rx) = mpsc::channel::<VersionKey>(settings.queue);
        let queue = HashQueue {
            tx,
            pending: Mutex::new(HashSet::new()),
        };
        if self.hash_queue.set(queue).is_err() {
            return;
        }
        let limit = settings.max_bandwidth.map(|b| Arc::new(Bandwidth::new(b)));
        let this = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(key) = rx.recv().await {
                let Some(mirror) = this.upgrade() else { return };
                mirror.metrics.hash_job_queue.dec();
                mirror.complete_version(&key.0, &key.1, limit.clone()).await;
                if let Some(queue) = mirror.hash_queue.get() {
                    queue.pending.lock().expect("hash queue lock").remove(&key);
                }
            }
        });
        tracing::info!(
            concurrency = settings.concurrency,
            max_bandwidth = settings.max_bandwidth.map_or(0, NonZeroU32::get),
            "the complete-hashes job is on"
        );
    }

    /// Queues a version whose record lacks an `h1:` of a platform this mirror serves (once:
    /// a version already waiting or being worked on is not queued again).
    pub(in crate::mirror) fn want_hashes(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        rec: &VersionRecord,
    ) {
        let Some(queue) = self.hash_queue.get() else {
            return;
        };
        let incomplete = rec.packages.iter().any(|(platform, pkg)| {
            pkg.h1.is_none()
                && pkg.download_url.is_some()
                && self.settings.upstream.platform_allowed(platform)
        });
        if !incomplete {
            return;
        }
        let key = (addr.clone(), version.clone());
        let mut pending = queue.pending.lock().expect("hash queue lock");
        if pending.contains(&key) {
            return;
        }
        match queue.tx.try_send(key.clone()) {
            Ok(()) => {
                pending.insert(key);
                self.metrics.hash_job_queue.inc();
            }
            Err(_) => self.metrics.hash_job_dropped.inc(),
        }
    }

    /// Fetches (through fills, at most `complete_hashes.concurrency` at once) every archive of
    /// the version that has no `h1:` yet.
    async fn complete_version(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
        limit: Option<Arc<Bandwidth>>,
    ) {
        let rec = match self.version_record(addr, version, &Reach::Origin).await {
            Ok(rec) => rec,
            Err(e) => {
                tracing::debug!(provider = %addr, %version, "complete-hashes job: skipped: {e}");
                return;
            }
        };
        let missing: Vec<ArchiveKey> = rec
            .packages
            .iter()
            .filter(|(p, pkg)| {
                pkg.h1.is_none()
                    && pkg.download_url.is_some()
                    && self.settings.upstream.platform_allowed(p)
            })
            .map(|(platform, _)| ArchiveKey {
                addr: addr.clone(),
                version: version.clone(),
                platform: platform.clone(),
            })
            .collect();
        let concurrency = self.settings.complete_hashes.concurrency;
        futures_util::stream::iter(missing)
            .for_each_concurrent(concurrency, |key| {
                let limit = limit.clone();
                async move {
                    let result = self.hash_archive(&key, limit).await;
                    let outcome = match &result {
                        Ok(true) => HashJobResult::Hashed,
                        Ok(false) => HashJobResult::Present,
                        Err(e) => {
                            tracing::warn!(archive = %key, "complete-hashes job: {e}");
                            HashJobResult::Failed
                        }
                    };
                    self.metrics.hash_job_archive(outcome);
                }
            })
            .await;
    }

    /// Makes sure one archive is hashed (and stored, if `keep_archives` or a client asked for it
    /// while it was fetched or held).
    /// `Ok(true)`: this job downloaded it.
    async fn hash_archive(
        self: &Arc<Self>,
        key: &ArchiveKey,
        limit: Option<Arc<Bandwidth>>,
    ) -> crate::error::Result<bool> {
        if let Some(info) = self.archive_info(key).await? {
            // Stored by another replica, or before its record learnt the h1. One with other
            // bytes than the record's package is not that package: fetched again below.
            let (sha256, h1) = (&info.sha256, &info.h1);
            let (addr, version, platform) = (&key.addr, &key.version, &key.platform);
            let facts = self
                .meta
                .set_archive_facts(addr, version, platform, sha256, h1, info.size);
            if facts.await? {
                return Ok(false);
            }
        }
        let (pkg, trust) = self.package_to_fetch(key).await?;
        self.admit(key, trust)?;
        let (fill, started) = self.background_fill(key, &pkg, trust, limit);
        // A fill held for a client needs the job no more: its h1 is recorded.
        fill.settled().await?;
        if started {
            self.metrics.hash_job_bytes.inc_by(fill.received());
        }
        Ok(started)
    }
}
