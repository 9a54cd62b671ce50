//! A bounded local disk tier in front of an object store (`cache.local_max_size`).
//!
//! With an object-store backend every byte of a warm download would come from the store. The
//! tier keeps, in `<cache.dir>/local/`, the archives and module packages this replica read from
//! the store or filled itself, up to a number of bytes, evicting the least recently used first.
//!
//! - **What enters is verified**: a copy read from the store is hashed as it is written to a
//!   temporary file and renamed into place only if its size and SHA-256 are its record's; a
//!   fill's staged file was verified before it was committed, and is linked in.
//! - **What leaves is verified**: a copy is served without hashing only while its file is the
//!   one that was verified (same size, modification time and inode as when its hash last
//!   matched). Otherwise it is hashed as it streams, with its last chunk held back until the
//!   hash matches the record; a corrupt copy ends the response with an error instead of its
//!   last bytes, is deleted, and the next request reads the store again. Corruption that leaves
//!   a file's metadata alone is found by [`LocalTier::recheck`], which re-hashes every copy
//!   every `cache.reverify_interval`.
//! - **Eviction never breaks a reader**: an evicted file is unlinked; a response already
//!   streaming it keeps its open file to the end.
//!
//! The tier is an accelerator only: its contents are not records, nothing else reads them,
//! and an empty or deleted tier loses nothing.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use tokio::io::AsyncWriteExt;

use crate::hash::Sha256;
pub use crate::metrics::TierMetrics;
use crate::storage::{DiskStorage, Key, Object, Storage};

/// What identifies a file's state: size, modification time, inode.
type Stamp = (u64, std::time::SystemTime, u64);

fn stamp_of(path: &std::path::Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.len(), m.modified().ok()?, m.ino()))
}

/// One copy in the tier.
struct Entry {
    /// Its size in KiB (its weight).
    kib: u32,
    /// Its record's SHA-256, once known (copies taken in at start learn it when first served).
    sha256: Mutex<Option<Sha256>>,
    /// The file's state when its hash last matched.
    verified: Mutex<Option<Stamp>>,
}

/// Sizes are weighed in KiB (the index's weights are `u32`).
const UNIT: u64 = 1024;

/// The local tier.
pub struct LocalTier {
    disk: Arc<DiskStorage>,
    /// Copies in progress, beside the tier on the same file system.
    tmp: PathBuf,
    /// Key → copy, weighed by size, least recently used evicted first; eviction deletes the
    /// file.
    index: moka::sync::Cache<String, Arc<Entry>>,
    copying: Mutex<HashSet<String>>,
    metrics: TierMetrics,
}

impl LocalTier {
    /// The tier in `dir`, holding at most `max_bytes`; files already there are taken in.
    pub fn open(
        dir: PathBuf,
        max_bytes: u64,
        metrics: TierMetrics,
    ) -> std::io::Result<Arc<LocalTier>> {
        let tmp = dir.join("tmp");
        std::fs::create_dir_all(&tmp)?;
        for leftover in std::fs::read_dir(&tmp)?.flatten() {
            let _ = std::fs::remove_file(leftover.path());
        }
        let disk = Arc::new(DiskStorage::new(dir.clone())?);
        let listener_disk = disk.clone();
        let listener_metrics = metrics.clone();
        let index = moka::sync::Cache::builder()
            .max_capacity(max_bytes / UNIT)
            .weigher(|_: &String, entry: &Arc<Entry>| entry.kib)
            .eviction_policy(moka::policy::EvictionPolicy::lru())
            .eviction_listener(move |key: Arc<String>, entry: Arc<Entry>, cause| {
                use moka::notification::RemovalCause;
                listener_metrics
                    .bytes
                    .sub(i64::from(entry.kib) * UNIT as i64);
                if cause == RemovalCause::Replaced {
                    // The file is the new entry's now.
                    return;
                }
                if cause == RemovalCause::Size {
                    listener_metrics.evictions.inc();
                }
                if let Some(path) = Key::parse(&key).and_then(|k| listener_disk.path_of(&k).ok()) {
                    let _ = std::fs::remove_file(path);
                }
            })
            .build();
        let tier = Arc::new(LocalTier {
            disk,
            tmp,
            index,
            copying: Mutex::new(HashSet::new()),
            metrics,
        });
        tier.take_in(&dir);
        Ok(tier)
    }

    /// Indexes the files a previous run left (their order of use is not known).
    fn take_in(&self, dir: &std::path::Path) {
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path == self.tmp {
                    continue;
                }
                match entry.metadata() {
                    Ok(m) if m.is_dir() => stack.push(path),
                    Ok(m) => {
                        let key = path
                            .strip_prefix(dir)
                            .ok()
                            .and_then(|p| p.to_str())
                            .and_then(Key::parse);
                        if let Some(key) = key {
                            self.note(&key, m.len(), None);
                        }
                    }
                    Err(_) => {}
                }
            }
        }
        self.index.run_pending_tasks();
    }

    /// Indexes the copy of `key`; `sha256` when its file was just verified against it.
    fn note(&self, key: &Key, size: u64, sha256: Option<&Sha256>) {
        let kib = u32::try_from(size.div_ceil(UNIT)).unwrap_or(u32::MAX);
        let verified = sha256.and_then(|_| stamp_of(&self.disk.path_of(key).ok()?));
        let entry = Entry {
            kib,
            sha256: Mutex::new(sha256.cloned()),
            verified: Mutex::new(verified),
        };
        self.index.insert(key.as_str().to_string(), Arc::new(entry));
        // Counted once indexed: a reader that sees the bytes finds the copy.
        self.metrics.bytes.add(i64::from(kib) * UNIT as i64);
    }

    /// The local copy of `key`, if the tier holds one of `size` bytes, with a body that is
    /// checked against `sha256` before its last chunk leaves.
    pub async fn get(self: &Arc<Self>, key: &Key, size: u64, sha256: &Sha256) -> Option<Object> {
        let Some(entry) = self.index.get(key.as_str()) else {
            self.metrics.requests.with_label_values(&["miss"]).inc();
            return None;
        };
        let stamp = self.disk.path_of(key).ok().and_then(|p| stamp_of(&p));
        let object = match self.disk.open(key).await {
            Ok(Some(o)) if o.meta.size == size => o,
            _ => {
                self.forget(key);
                self.metrics.requests.with_label_values(&["miss"]).inc();
                return None;
            }
        };
        self.metrics.requests.with_label_values(&["hit"]).inc();
        let known = entry.sha256.lock().expect("tier entry").as_ref() == Some(sha256);
        if known && stamp.is_some() && *entry.verified.lock().expect("tier entry") == stamp {
            return Some(object);
        }
        *entry.sha256.lock().expect("tier entry") = Some(sha256.clone());
        let this = self.clone();
        let owned = key.clone();
        let body = verified(
            object.body,
            sha256.clone(),
            move || *entry.verified.lock().expect("tier entry") = stamp,
            move || {
                tracing::error!(key = %owned, "the local tier's copy does not match its record; deleting it");
                this.metrics.requests.with_label_values(&["corrupt"]).inc();
                this.forget(&owned);
            },
        );
        Some(Object { body, ..object })
    }

    /// Re-hashes every copy whose record's hash is known, deleting those that no longer match
    /// (corruption a file's size and times do not show). Returns how many went.
    pub async fn recheck(&self) -> usize {
        let entries: Vec<(Arc<String>, Arc<Entry>)> = self.index.iter().collect();
        let mut dropped = 0;
        for (key, entry) in entries {
            let Some(expected) = entry.sha256.lock().expect("tier entry").clone() else {
                continue;
            };
            let Some(key) = Key::parse(&key) else {
                continue;
            };
            let Ok(path) = self.disk.path_of(&key) else {
                continue;
            };
            let got = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
                let mut file = std::fs::File::open(path)?;
                let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
                let mut buf = vec![0u8; 1 << 20];
                loop {
                    let n = std::io::Read::read(&mut file, &mut buf)?;
                    if n == 0 {
                        break;
                    }
                    ctx.update(&buf[..n]);
                }
                Ok(hex::encode(ctx.finish().as_ref()))
            })
            .await;
            if !matches!(got, Ok(Ok(ref h)) if h.as_str() == expected.as_str()) {
                tracing::error!(%key, "the local tier's copy no longer matches its record; deleting it");
                self.metrics.requests.with_label_values(&["corrupt"]).inc();
                self.forget(&key);
                dropped += 1;
            }
        }
        dropped
    }

    /// Runs [`recheck`](Self::recheck) every `interval` (zero: never).
    pub fn spawn_recheck(self: &Arc<Self>, interval: std::time::Duration) {
        if interval.is_zero() {
            return;
        }
        let this = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let Some(tier) = this.upgrade() else { return };
                tier.recheck().await;
            }
        });
    }

    /// Drops the local copy of `key`, if any.
    pub fn forget(&self, key: &Key) {
        self.index.invalidate(key.as_str());
        self.index.run_pending_tasks();
        if let Ok(path) = self.disk.path_of(key) {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Takes in a verified file of `size` bytes as the copy of `key` (a hard link: the caller
    /// keeps its file).
    pub fn link(&self, key: &Key, file: &std::path::Path, size: u64, sha256: &Sha256) {
        let linked = self
            .disk
            .path_of(key)
            .map_err(std::io::Error::other)
            .and_then(|to| {
                to.parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|()| {
                        let _ = std::fs::remove_file(&to);
                        std::fs::hard_link(file, &to)
                    })
            });
        match linked {
            Ok(()) => self.note(key, size, Some(sha256)),
            Err(e) => tracing::debug!(%key, "not kept in the local tier: {e}"),
        }
    }

    /// Copies `key` from `store` into the tier in the background, if it is not there or on its
    /// way; kept only if its size and SHA-256 are `size` and `sha256`.
    pub fn copy_from(
        self: &Arc<Self>,
        store: Arc<dyn Storage>,
        key: Key,
        size: u64,
        sha256: Sha256,
    ) {
        if self.index.contains_key(key.as_str())
            || !self
                .copying
                .lock()
                .expect("tier copies")
                .insert(key.as_str().to_string())
        {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this.copy(&*store, &key, size, &sha256).await {
                tracing::warn!(%key, "not kept in the local tier: {e}");
            }
            this.copying
                .lock()
                .expect("tier copies")
                .remove(key.as_str());
        });
    }

    async fn copy(
        &self,
        store: &dyn Storage,
        key: &Key,
        size: u64,
        sha256: &Sha256,
    ) -> anyhow::Result<()> {
        let Some(object) = store.open(key).await? else {
            return Ok(());
        };
        let (tmp, file) = crate::fsio::temp_file_in(&self.tmp)?;
        let guard = TempGuard(tmp.clone());
        let mut file = tokio::fs::File::from_std(file);
        let mut body = object.body;
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        let mut written = 0u64;
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            ctx.update(&chunk);
            written += chunk.len() as u64;
            file.write_all(&chunk).await?;
        }
        file.sync_all().await?;
        drop(file);
        let got = hex::encode(ctx.finish().as_ref());
        if written != size || got != sha256.as_str() {
            anyhow::bail!(
                "the store's copy has {written} bytes and SHA-256 {got}, not its record's"
            );
        }
        self.disk.put_file(key, &tmp).await?;
        std::mem::forget(guard);
        self.note(key, size, Some(sha256));
        Ok(())
    }
}

/// Removes a temporary file when dropped (unless forgotten).
struct TempGuard(PathBuf);

impl Drop for TempGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `body`, hashed as it streams, with its last chunk held back until the hash is `expected`
/// (then `on_match` runs); otherwise the stream ends with an error instead, and `on_mismatch`
/// runs.
pub fn verified(
    body: BoxStream<'static, std::io::Result<Bytes>>,
    expected: Sha256,
    on_match: impl FnOnce() + Send + 'static,
    on_mismatch: impl FnOnce() + Send + 'static,
) -> BoxStream<'static, std::io::Result<Bytes>> {
    struct State<G, F> {
        body: BoxStream<'static, std::io::Result<Bytes>>,
        ctx: Option<ring::digest::Context>,
        held: Option<Bytes>,
        expected: Sha256,
        on_match: Option<G>,
        on_mismatch: Option<F>,
    }
    let state = State {
        body,
        ctx: Some(ring::digest::Context::new(&ring::digest::SHA256)),
        held: None,
        expected,
        on_match: Some(on_match),
        on_mismatch: Some(on_mismatch),
    };
    futures_util::stream::unfold(state, |mut s| async move {
        let ctx = s.ctx.as_mut()?;
        loop {
            match s.body.next().await {
                Some(Ok(chunk)) => {
                    ctx.update(&chunk);
                    if let Some(previous) = s.held.replace(chunk) {
                        return Some((Ok(previous), s));
                    }
                }
                Some(Err(e)) => {
                    s.ctx = None;
                    return Some((Err(e), s));
                }
                None => {
                    let ctx = s.ctx.take()?;
                    let got = hex::encode(ctx.finish().as_ref());
                    if got == s.expected.as_str() {
                        if let Some(f) = s.on_match.take() {
                            f();
                        }
                        return s.held.take().map(|last| (Ok(last), s));
                    }
                    if let Some(f) = s.on_mismatch.take() {
                        f();
                    }
                    let err = std::io::Error::other(format!(
                        "the local copy has SHA-256 {got}, not {}",
                        s.expected
                    ));
                    return Some((Err(err), s));
                }
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> TierMetrics {
        TierMetrics {
            requests: prometheus::IntCounterVec::new(prometheus::Opts::new("r", "r"), &["result"])
                .unwrap(),
            evictions: prometheus::IntCounter::new("e", "e").unwrap(),
            bytes: prometheus::IntGauge::new("b", "b").unwrap(),
        }
    }

    async fn collect(body: BoxStream<'static, std::io::Result<Bytes>>) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut body = body;
        while let Some(chunk) = body.next().await {
            out.extend_from_slice(&chunk?);
        }
        Ok(out)
    }

    fn chunks(parts: &[&'static [u8]]) -> BoxStream<'static, std::io::Result<Bytes>> {
        futures_util::stream::iter(
            parts
                .iter()
                .map(|p| Ok(Bytes::from_static(p)))
                .collect::<Vec<_>>(),
        )
        .boxed()
    }

    #[tokio::test]
    async fn the_last_chunk_waits_for_the_hash() {
        let good = Sha256::of(b"abcdef");
        let bad_seen = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let body = verified(chunks(&[b"ab", b"cd", b"ef"]), good.clone(), || {}, || {});
        assert_eq!(collect(body).await.unwrap(), b"abcdef");
        let seen = bad_seen.clone();
        let mut body = verified(
            chunks(&[b"ab", b"cd", b"eX"]),
            good,
            || {},
            move || seen.store(true, std::sync::atomic::Ordering::SeqCst),
        );
        // Everything but the last chunk, then an error instead of it.
        assert_eq!(&body.next().await.unwrap().unwrap()[..], b"ab");
        assert_eq!(&body.next().await.unwrap().unwrap()[..], b"cd");
        assert!(body.next().await.unwrap().is_err());
        assert!(bad_seen.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test]
    async fn copies_are_verified_kept_within_the_size_and_evicted_oldest_first() {
        let store_dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Storage> =
            Arc::new(DiskStorage::new(store_dir.path().to_path_buf()).unwrap());
        let tier_dir = tempfile::tempdir().unwrap();
        let tier = LocalTier::open(tier_dir.path().join("local"), 3 << 20, metrics()).unwrap();
        let mib = |n: u8| vec![n; 1 << 20];
        for n in 0..3u8 {
            let key = Key::new(["archives", &format!("a{n}.zip")]);
            store.write(&key, Bytes::from(mib(n))).await.unwrap();
            tier.copy(&*store, &key, 1 << 20, &Sha256::of(&mib(n)))
                .await
                .unwrap();
            tier.index.run_pending_tasks();
        }
        let first = Key::new(["archives", "a0.zip"]);
        let object = tier
            .get(&first, 1 << 20, &Sha256::of(&mib(0)))
            .await
            .unwrap();
        assert_eq!(collect(object.body).await.unwrap(), mib(0));
        // A wrong SHA-256 in the store's copy: not kept.
        let odd = Key::new(["archives", "odd.zip"]);
        store.write(&odd, Bytes::from(mib(9))).await.unwrap();
        assert!(
            tier.copy(&*store, &odd, 1 << 20, &Sha256::of(b"other"))
                .await
                .is_err()
        );
        assert!(
            tier.get(&odd, 1 << 20, &Sha256::of(&mib(9)))
                .await
                .is_none()
        );
        // A fourth MiB evicts the least recently used (a1: a0 was just read).
        let fourth = Key::new(["archives", "a3.zip"]);
        store.write(&fourth, Bytes::from(mib(3))).await.unwrap();
        tier.copy(&*store, &fourth, 1 << 20, &Sha256::of(&mib(3)))
            .await
            .unwrap();
        tier.index.run_pending_tasks();
        let second = Key::new(["archives", "a1.zip"]);
        assert!(
            tier.get(&second, 1 << 20, &Sha256::of(&mib(1)))
                .await
                .is_none()
        );
        assert!(
            !tier.disk.path_of(&second).unwrap().exists(),
            "an evicted copy is deleted"
        );
        assert!(
            tier.get(&first, 1 << 20, &Sha256::of(&mib(0)))
                .await
                .is_some()
        );
        assert_eq!(tier.metrics.evictions.get(), 1);
        // Corruption that leaves the file's metadata alone is found by the periodic re-check.
        let third = Key::new(["archives", "a2.zip"]);
        let path = tier.disk.path_of(&third).unwrap();
        let times = std::fs::metadata(&path).unwrap().modified().unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[0] ^= 1;
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::os::unix::fs::FileExt::write_at(&file, &bytes[..1], 0).unwrap();
        file.set_modified(times).unwrap();
        drop(file);
        assert_eq!(tier.recheck().await, 1);
        assert!(
            tier.get(&third, 1 << 20, &Sha256::of(&mib(2)))
                .await
                .is_none()
        );
        // A copy changed on disk is hashed as it is served: refused, and dropped.
        std::fs::write(tier.disk.path_of(&first).unwrap(), mib(7)).unwrap();
        let object = tier
            .get(&first, 1 << 20, &Sha256::of(&mib(0)))
            .await
            .unwrap();
        assert!(collect(object.body).await.is_err());
        assert!(
            tier.get(&first, 1 << 20, &Sha256::of(&mib(0)))
                .await
                .is_none()
        );
        // A restart takes in what is there.
        let again = LocalTier::open(tier_dir.path().join("local"), 3 << 20, metrics()).unwrap();
        assert!(
            again
                .get(&fourth, 1 << 20, &Sha256::of(&mib(3)))
                .await
                .is_some()
        );
    }
}
