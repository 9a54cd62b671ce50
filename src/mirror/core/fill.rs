//! Archive fills: one download per archive (or CLI release build), streamed to every client
//! while it runs; a [`FillTable`] per kind holds those in progress.
//!
//! The first request for a missing archive starts a [`Fill`]: a task, detached from every
//! client, that downloads the archive into a staging file while hashing it. Every request for the
//! same archive while it runs (the first included) reads from that fill: the last chunks written
//! ([`RECENT`] bytes) are also kept in memory, where a reader that keeps up with the download
//! takes them; a reader further behind reads them back from the staging file; then the reader
//! waits for more. Memory per reader is one read buffer, per fill [`RECENT`] bytes.
//!
//! The expected SHA-256 is known before the download starts, but the bytes can only be judged
//! once the last one is in. So **no reader gets what the fill holds back ([`HoldBack`]) before
//! the verdict**: for a provider archive, its last [`TAIL`] bytes:
//! while the download runs, readers trail its end by that much; when the whole-file SHA-256
//! matches, they get the rest; when it does not, every reader's body ends with an error instead.
//! A client therefore never holds a complete copy of a bad archive, whatever the protocol: an
//! HTTP/1.1 response stops short of its `Content-Length` and the connection is closed, an HTTP/2
//! stream is reset. A response starts once the first [`HEAD_START`] bytes are in, or the whole
//! archive is in and checked if it is smaller, so a mismatch in a small archive is a plain 502.
//! On a match the fill goes on to fsync, compute `h1:` and commit the archive to the store.
//!
//! Holding back a tail protects objects that are used whole, read from their end (a zip's
//! central directory): the part a client got before an error is of no use. An object a client
//! can use in part as it arrives (a tar stream, whose members are complete long before its end,
//! or a zip read by its local headers) is held back whole ([`HoldBack::Whole`]): no reader gets
//! a byte of it before the verdict, its response starts only then (a mismatch is a plain error
//! response), and it may be at most the size the caller names, so what is held stays bounded.
//!
//! A fill the background job starts ([`super::hash_job`]) downloads within the job's bandwidth
//! until a client asks for the same archive; from then on it runs at full speed. When no client
//! has asked by the time it is verified and hashed (and `complete_hashes.keep_archives` is off),
//! the fill records the `h1:`, then **holds** the checked staging file, still in the table, for
//! `complete_hashes.hold`: a client asking meanwhile (on this replica, or on another one through
//! the fleet lease's `.wanted` marker) joins it as any fill, gets its bytes from the staging file
//! and makes it commit, so the job's download is the only one. Unasked, it is dropped when the
//! hold is over or at shutdown. The job goes on meanwhile, so what is held at once is at most
//! what the job downloads in `hold` (with `complete_hashes.max_bandwidth`, that times `hold`).
//! Clients ask for the archive of their own platform right after its `<version>.json`, which is
//! what sets the job going, so a short hold settles the race between the two without guessing
//! a client's platform.
//!
//! If writing the staging file fails (a full disk), the fill keeps going with the rest of the
//! bytes held in memory, so clients are still served; the archive is then not cached. At most
//! `cache.max_fill_memory` bytes are held that way: beyond it the fill fails with a 507 (or a
//! cut-off body), and nothing is cached.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::watch;

use crate::cache::{Claim, Followed, Kind, LeaseGuard, Objects, StagedFile};
use crate::error::{Error, Failure, Result};
use crate::hash::{H1, Hashing, Sha256};
use crate::metrics::{FleetRole, VerificationReason};
use crate::records::{ArchiveKey, Package};
use crate::trust::SignatureKind;

use super::Core;
use super::hash_job::Bandwidth;
use crate::mirror::admission::{self, Expected, VerifiedArchive};

/// How many bytes are gathered before they are written out and offered to readers.
const WRITE_CHUNK: usize = 64 * 1024;
/// Largest piece a reader sends at once.
const READ_CHUNK: usize = 256 * 1024;
/// How many of the bytes last written to the staging file a fill also keeps in memory: readers
/// that keep up with the download (the usual case) take them from there instead of reading them
/// back from the file.
const RECENT: usize = 4 * WRITE_CHUNK;
/// How many bytes must be in before a response head goes out (see [`Fill::ready`]).
const HEAD_START: u64 = WRITE_CHUNK as u64;
/// How far readers trail the download until its SHA-256 is known to match: the end of a bad
/// archive never leaves the mirror.
const TAIL: u64 = WRITE_CHUNK as u64;
/// How often a held fill looks whether a follower on another replica asked for it (the lease
/// notes that at its renewals).
const HOLD_POLL: Duration = Duration::from_millis(250);

/// How much of a fill its readers do not get until the whole object matched its SHA-256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldBack {
    /// Its last [`TAIL`] bytes, for objects of no use without their end (provider archives).
    Tail,
    /// All of it, for objects a client could use in part (CLI release builds); at most `max`
    /// bytes, the setting `key`, or the fill fails before anything is served.
    Whole { max: u64, key: &'static str },
}

/// An archive's bytes as its origin sends them: all a fill takes from the network.
pub struct OriginBody {
    /// From the origin's `Content-Length`, when it sent one.
    pub size: Option<u64>,
    /// The bytes; ends with an error if the download breaks off or exceeds its bounds.
    pub body: BoxStream<'static, Result<Bytes>>,
}

impl From<crate::upstream::ArchiveDownload> for OriginBody {
    fn from(download: crate::upstream::ArchiveDownload) -> OriginBody {
        OriginBody {
            size: download.size,
            body: download
                .body
                .map(|chunk| chunk.map_err(Error::from))
                .boxed(),
        }
    }
}

/// Where a fill gets its archive: the origin's answer, once it comes.
pub(in crate::mirror) type Origin = BoxFuture<'static, Result<OriginBody>>;

/// Whether this replica fetches an archive (see [`Core::fleet_turn`]).
pub(in crate::mirror) enum Turn {
    /// From the origin, holding the fleet's lease while it does (if the store enforces them).
    Fetch(Option<LeaseGuard>),
    /// Another replica committed it to the shared store.
    Stored,
}

/// The fills in progress of one kind of object, by key: at most one per object, each counted
/// in `provender_fills_in_flight` while it is in the table. The core holds one for provider
/// archives and one for CLI release builds, and waits for both at shutdown.
pub(in crate::mirror) struct FillTable<K> {
    fills: Mutex<std::collections::HashMap<K, Arc<Fill<K>>>>,
    in_flight: prometheus::IntGauge,
}

impl<K: Clone + Eq + std::hash::Hash + Send + Sync + 'static> FillTable<K> {
    pub(in crate::mirror) fn new(in_flight: prometheus::IntGauge) -> FillTable<K> {
        FillTable {
            fills: Mutex::new(std::collections::HashMap::new()),
            in_flight,
        }
    }

    /// The fill in progress for `key`; or, when there is none, the one `start` makes, put in
    /// the table (then `true`). `start` runs under the table's lock, so it must only make the
    /// fill and spawn its task.
    pub(in crate::mirror) fn join_or_start(
        &self,
        key: &K,
        start: impl FnOnce() -> Arc<Fill<K>>,
    ) -> (Arc<Fill<K>>, bool) {
        let mut fills = self.fills.lock().expect("fill table lock");
        if let Some(fill) = fills.get(key) {
            return (fill.clone(), false);
        }
        let fill = start();
        fills.insert(key.clone(), fill.clone());
        self.in_flight.inc();
        (fill, true)
    }

    /// The fill in progress for `key`, if any.
    pub(in crate::mirror) fn get(&self, key: &K) -> Option<Arc<Fill<K>>> {
        self.fills
            .lock()
            .expect("fill table lock")
            .get(key)
            .cloned()
    }

    /// Ends `fill`: it leaves the table (its object is in the store, or not, by now), then its
    /// readers learn `result`. A client that saw a failure and asks again starts a fresh
    /// download instead of joining the failed one.
    pub(in crate::mirror) fn finish(&self, fill: &Fill<K>, result: Result<()>) {
        if self
            .fills
            .lock()
            .expect("fill table lock")
            .remove(&fill.key)
            .is_some()
        {
            self.in_flight.dec();
        }
        fill.finish(result);
    }

    /// Waits until no fill of the table is in progress.
    async fn drain(&self) {
        loop {
            let fills: Vec<Arc<Fill<K>>> = self
                .fills
                .lock()
                .expect("fill table lock")
                .values()
                .cloned()
                .collect();
            if fills.is_empty() {
                return;
            }
            tracing::info!("waiting for {} download(s) in progress", fills.len());
            for fill in fills {
                let _ = fill.finished().await;
            }
        }
    }
}

/// How a response to a fill's readers starts (see [`Fill::ready`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ready {
    /// Its bytes stream from this fill; the archive's size if the origin announced it.
    Streaming(Option<u64>),
    /// Another replica stored the archive in the shared store: read it from there.
    Stored,
}

/// The origin answered: what readers need to start.
#[derive(Clone)]
struct Started {
    /// From the origin's `Content-Length`, when it sent one.
    size: Option<u64>,
    /// The staging file, opened for reading before anything can rename it.
    file: Arc<std::fs::File>,
}

/// Where a fill is; readers watch it.
#[derive(Clone, Default)]
struct Progress {
    /// Set when the origin has answered and the staging file is open.
    started: Option<Started>,
    /// Bytes written to the staging file.
    on_disk: u64,
    /// Bytes held in memory after the staging file failed.
    in_memory: u64,
    /// Set when all bytes are in and checked (`Ok`: they match the expected SHA-256), or when
    /// the fill failed before that; always set by the time `finished` is.
    streamed: Option<Result<()>>,
    /// Set when the fill is over: `Ok` means the archive is in the store.
    finished: Option<Result<()>>,
    /// Set when a fill only the complete-hashes job asked for starts waiting for a client: its
    /// bytes matched and its `h1:` is recorded.
    held: bool,
}

/// One download in progress: of a provider archive (`K` = [`ArchiveKey`]), or of any other
/// object that is streamed to its readers while it is checked against a SHA-256 known before.
pub struct Fill<K = ArchiveKey> {
    pub key: K,
    /// The SHA-256 the origin published, which the bytes must match.
    pub sha256: Sha256,
    /// How the origin's signature over that SHA-256 was classified.
    pub trust: SignatureKind,
    pub started_at: SystemTime,
    progress: watch::Sender<Progress>,
    /// Chunks that could not be written to disk, in order, starting at `on_disk`.
    memory: Mutex<Vec<Bytes>>,
    /// The last chunks written to disk (at most [`RECENT`] bytes), each with its offset.
    recent: Mutex<std::collections::VecDeque<(u64, Bytes)>>,
    /// For a background fill: the bandwidth it shares, until a client wants the archive.
    limit: Option<Arc<Bandwidth>>,
    /// Set when a client reads this fill (or, on a shared store, waits for it on another
    /// replica): it then runs at full speed, and is kept.
    wanted: Arc<AtomicBool>,
    /// Wakes a held fill when a client asks for it.
    wake: tokio::sync::Notify,
    /// What readers do not get before the verdict.
    hold_back: HoldBack,
}

impl<K: Send + Sync + 'static> Fill<K> {
    pub(in crate::mirror) fn new(
        key: K,
        sha256: Sha256,
        trust: SignatureKind,
        wanted: bool,
        limit: Option<Arc<Bandwidth>>,
    ) -> Fill<K> {
        Fill {
            key,
            sha256,
            trust,
            started_at: SystemTime::now(),
            progress: watch::channel(Progress::default()).0,
            memory: Mutex::new(Vec::new()),
            recent: Mutex::new(std::collections::VecDeque::new()),
            wanted: Arc::new(AtomicBool::new(wanted)),
            limit,
            wake: tokio::sync::Notify::new(),
            hold_back: HoldBack::Tail,
        }
    }

    /// The fill, holding back `hold_back` instead of the last [`TAIL`] bytes.
    pub(in crate::mirror) fn holding_back(mut self, hold_back: HoldBack) -> Fill<K> {
        self.hold_back = hold_back;
        self
    }

    /// A client asks for this fill: it runs at full speed from now on and is kept, and a held
    /// fill commits.
    fn want(&self) {
        self.wanted.store(true, Ordering::Relaxed);
        self.wake.notify_waiters();
    }

    /// Waits until `bytes` more may be downloaded: at once for a fill a client reads, else
    /// within the background job's bandwidth.
    async fn pace(&self, bytes: usize) {
        if let Some(limit) = &self.limit {
            if !self.wanted.load(Ordering::Relaxed) {
                limit.take(bytes).await;
            }
        }
    }

    /// Waits until a response can start: the origin has answered and either the first
    /// [`HEAD_START`] bytes are in or all bytes are in and checked (then the archive size, if
    /// known), or another replica stored the archive.
    ///
    /// An archive smaller than [`HEAD_START`], or one held back whole, is therefore checked
    /// completely before the response head goes out, so a mismatch is a plain error response;
    /// only a larger archive held back by its tail can fail after its head was sent.
    pub async fn ready(&self) -> Result<Ready> {
        let mut rx = self.progress.subscribe();
        let early = self.hold_back == HoldBack::Tail;
        let progress = rx
            .wait_for(|p| p.streamed.is_some() || (early && p.on_disk + p.in_memory >= HEAD_START))
            .await;
        let progress = progress.map_err(|_| Error::unexpected("archive download vanished"))?;
        match (&progress.started, &progress.streamed) {
            (_, Some(Err(e))) => Err(e.clone()),
            (Some(s), _) => Ok(Ready::Streaming(s.size)),
            // Over without a download: another replica's copy is in the store.
            (None, Some(Ok(()))) => Ok(Ready::Stored),
            _ => Err(Error::unexpected(
                "archive download ended before it started",
            )),
        }
    }

    /// The size the origin announced, once it has answered.
    pub fn announced_size(&self) -> Option<u64> {
        self.progress.borrow().started.as_ref().and_then(|s| s.size)
    }

    /// The bytes received from the origin so far.
    pub fn received(&self) -> u64 {
        let p = self.progress.borrow();
        p.on_disk + p.in_memory
    }

    /// Waits until the fill is over: `Ok` when the archive is in the store (or, for one only
    /// the complete-hashes job asked for, hashed and dropped).
    pub async fn finished(&self) -> Result<()> {
        self.wait_until(|p| p.finished.is_some()).await
    }

    /// Waits until the fill is over or, for one only the complete-hashes job asked for, held
    /// for a client (its `h1:` is recorded by then): `Ok` when its bytes matched.
    pub async fn settled(&self) -> Result<()> {
        self.wait_until(|p| p.finished.is_some() || p.held).await
    }

    async fn wait_until(&self, done: impl Fn(&Progress) -> bool) -> Result<()> {
        let mut rx = self.progress.subscribe();
        let progress = rx.wait_for(done).await;
        let progress = progress.map_err(|_| Error::unexpected("archive download vanished"))?;
        match &progress.finished {
            Some(result) => result.clone(),
            None if progress.held => Ok(()),
            None => Err(Error::unexpected("archive download ended oddly")),
        }
    }

    /// The archive's bytes, as they arrive. Ends with an error if the download fails or the
    /// bytes don't match the expected SHA-256.
    pub fn stream(self: &Arc<Self>) -> BoxStream<'static, io::Result<Bytes>> {
        let state = ReadState {
            fill: self.clone(),
            rx: self.progress.subscribe(),
            offset: 0,
            over: false,
        };
        futures_util::stream::unfold(state, |mut st| async move {
            if st.over {
                return None;
            }
            let item = st.next_piece().await;
            match item {
                Some(Ok(bytes)) => Some((Ok(bytes), st)),
                Some(Err(e)) => {
                    st.over = true;
                    Some((Err(e), st))
                }
                None => None,
            }
        })
        .boxed()
    }

    fn update(&self, f: impl FnOnce(&mut Progress)) {
        self.progress.send_modify(f);
    }

    /// Ends the fill with `result` (`Ok`: the object is in the store), for its readers. Call it
    /// once the fill has left its table, so that a client that saw a failure and asks again
    /// starts a fresh download instead of joining this one.
    pub(in crate::mirror) fn finish(&self, result: Result<()>) {
        self.update(|p| {
            if p.streamed.is_none() {
                p.streamed = Some(result.clone());
            }
            p.finished = Some(result);
        });
    }
}

struct ReadState<K> {
    fill: Arc<Fill<K>>,
    rx: watch::Receiver<Progress>,
    offset: u64,
    over: bool,
}

impl<K: Send + Sync + 'static> ReadState<K> {
    async fn next_piece(&mut self) -> Option<io::Result<Bytes>> {
        loop {
            let p = self.rx.borrow_and_update().clone();
            let verified = matches!(p.streamed, Some(Ok(())));
            // Until the whole archive matched its SHA-256, its last `TAIL` bytes (or all of it)
            // are held back.
            let total = p.on_disk + p.in_memory;
            let readable = match (verified, self.fill.hold_back) {
                (true, _) => total,
                (false, HoldBack::Tail) => total.saturating_sub(TAIL),
                (false, HoldBack::Whole { .. }) => 0,
            };
            if let Some(file) = p.started.as_ref().map(|s| s.file.clone()) {
                if self.offset < p.on_disk.min(readable) {
                    let len = (p.on_disk.min(readable) - self.offset).min(READ_CHUNK as u64);
                    let offset = self.offset;
                    if let Some(bytes) = self.fill.recent_piece(offset, len as usize) {
                        self.offset += bytes.len() as u64;
                        return Some(Ok(bytes));
                    }
                    let read =
                        tokio::task::spawn_blocking(move || read_at(&file, offset, len as usize))
                            .await;
                    let bytes = match read {
                        Ok(Ok(b)) => b,
                        Ok(Err(e)) => return Some(Err(e)),
                        Err(e) => return Some(Err(io::Error::other(e))),
                    };
                    self.offset += bytes.len() as u64;
                    return Some(Ok(bytes));
                }
                if self.offset < readable {
                    let mut bytes = self.fill.memory_piece(self.offset - p.on_disk);
                    bytes.truncate((readable - self.offset) as usize);
                    self.offset += bytes.len() as u64;
                    return Some(Ok(bytes));
                }
            }
            match &p.streamed {
                Some(Ok(())) => return None,
                Some(Err(e)) => return Some(Err(io::Error::other(e.clone()))),
                None => {}
            }
            if self.rx.changed().await.is_err() {
                return Some(Err(io::Error::other("archive download vanished")));
            }
        }
    }
}

impl<K> Fill<K> {
    /// Up to `len` bytes at `offset` from the chunks last written to disk, if they still hold
    /// it (at most one chunk's worth: readers come back for the rest).
    fn recent_piece(&self, offset: u64, len: usize) -> Option<Bytes> {
        let recent = self.recent.lock().expect("fill recent lock");
        let (start, chunk) = recent
            .iter()
            .find(|(start, chunk)| *start <= offset && offset < start + chunk.len() as u64)?;
        let from = (offset - start) as usize;
        Some(chunk.slice(from..chunk.len().min(from + len)))
    }

    /// Keeps `chunk`, just written at `offset`, among the recent ones.
    fn keep_recent(&self, offset: u64, chunk: Bytes) {
        let mut recent = self.recent.lock().expect("fill recent lock");
        recent.push_back((offset, chunk));
        let mut kept: usize = recent.iter().map(|(_, c)| c.len()).sum();
        while kept > RECENT {
            let Some((_, dropped)) = recent.pop_front() else {
                break;
            };
            kept -= dropped.len();
        }
    }

    /// The in-memory bytes starting `offset` bytes after the end of the on-disk part.
    fn memory_piece(&self, mut offset: u64) -> Bytes {
        let memory = self.memory.lock().expect("fill memory lock");
        for chunk in memory.iter() {
            if offset < chunk.len() as u64 {
                return chunk.slice(offset as usize..);
            }
            offset -= chunk.len() as u64;
        }
        Bytes::new()
    }
}

fn read_at(file: &std::fs::File, offset: u64, len: usize) -> io::Result<Bytes> {
    let mut buf = vec![0u8; len];
    let mut filled = 0;
    while filled < len {
        #[cfg(unix)]
        let n =
            std::os::unix::fs::FileExt::read_at(file, &mut buf[filled..], offset + filled as u64)?;
        #[cfg(windows)]
        let n = std::os::windows::fs::FileExt::seek_read(
            file,
            &mut buf[filled..],
            offset + filled as u64,
        )?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "staging file shorter than reported",
            ));
        }
        filled += n;
    }
    Ok(Bytes::from(buf))
}

impl Core {
    /// Joins the fill in progress for `key`, or starts one. Returns it and whether this call
    /// started it.
    pub(in crate::mirror) fn fill_for(
        self: &Arc<Self>,
        key: &ArchiveKey,
        pkg: &Package,
        trust: SignatureKind,
    ) -> (Arc<Fill>, bool) {
        self.fill_from(key, pkg, trust, true, None, || self.origin_of(key, pkg))
    }

    /// Like [`fill_for`](Self::fill_for), for the background job: a fill it starts downloads
    /// within `limit` until a client joins it; joining a client's fill changes nothing.
    pub(in crate::mirror) fn background_fill(
        self: &Arc<Self>,
        key: &ArchiveKey,
        pkg: &Package,
        trust: SignatureKind,
        limit: Option<Arc<Bandwidth>>,
    ) -> (Arc<Fill>, bool) {
        self.fill_from(key, pkg, trust, false, limit, || self.origin_of(key, pkg))
    }

    /// Joins the fill in progress for `key`, or starts one whose bytes come from `origin`.
    fn fill_from(
        self: &Arc<Self>,
        key: &ArchiveKey,
        pkg: &Package,
        trust: SignatureKind,
        client: bool,
        limit: Option<Arc<Bandwidth>>,
        origin: impl FnOnce() -> Origin,
    ) -> (Arc<Fill>, bool) {
        let (fill, started) = self.fills.join_or_start(key, || {
            let fill = Arc::new(Fill::new(
                key.clone(),
                pkg.shasum.clone(),
                trust,
                client,
                limit,
            ));
            tokio::spawn(self.clone().run_fill(fill.clone(), pkg.clone(), origin()));
            fill
        });
        if client && !started {
            fill.want();
        }
        (fill, started)
    }

    /// The archive's download from its origin, started when the fill first polls it.
    fn origin_of(self: &Arc<Self>, key: &ArchiveKey, pkg: &Package) -> Origin {
        let this = self.clone();
        let key = key.clone();
        let url = pkg.download_url.clone();
        let what = format!("archive {key}");
        async move {
            let Some(url) = url else {
                return Err(Error::NotFound(format!(
                    "{what} was imported without an origin URL and is no longer in the cache"
                )));
            };
            let download = this
                .origin(what)?
                .package_archive(&key.addr, &key.version, &key.platform, &url)
                .await?;
            Ok(OriginBody::from(download))
        }
        .boxed()
    }

    /// Waits until no download is in progress, of archives or of CLI release builds (for a
    /// clean shutdown).
    pub async fn drain(&self) {
        // Held archives no client asked for are let go rather than waited for.
        self.draining.send_replace(true);
        self.fills.drain().await;
        self.release_fills.drain().await;
    }

    /// The fill in progress for `key`, joined by a client: from now on it downloads at full
    /// speed even if the complete-hashes job started it.
    pub(in crate::mirror) fn join_fill(&self, key: &ArchiveKey) -> Option<Arc<Fill>> {
        let fill = self.fill_in_progress(key)?;
        fill.want();
        Some(fill)
    }

    /// The fill in progress for `key`, if any.
    pub(in crate::mirror) fn fill_in_progress(&self, key: &ArchiveKey) -> Option<Arc<Fill>> {
        self.fills.get(key)
    }

    async fn run_fill(self: Arc<Self>, fill: Arc<Fill>, pkg: Package, origin: Origin) {
        let result = self.fill_archive(&fill, &pkg, origin).await;
        if let Err(e) = &result {
            tracing::warn!(archive = %fill.key, "archive not cached: {e}");
        }
        // The archive is in the store (or not) before the fill leaves the table, so a request
        // that finds no fill finds the archive.
        self.fills.finish(&fill, result);
    }

    /// The one way a fill takes bytes in: downloads `origin` into a staging file while the
    /// fill's readers stream it (trailing by what it holds back, [`HoldBack`]), hashes it as it
    /// comes, checks the whole against the fill's SHA-256 (a mismatch is `mismatch(found)`, the
    /// caller's error naming what was checked), and fsyncs it. Returns the staged file and its
    /// digest. An object held back whole may be at most its `max` bytes, announced or received.
    pub(in crate::mirror) async fn stream_checked<K: std::fmt::Display + Send + Sync + 'static>(
        &self,
        fill: &Fill<K>,
        origin: Origin,
        mismatch: impl FnOnce(Sha256) -> Error,
    ) -> Result<(StagedFile, crate::hash::Digest)> {
        let key = &fill.key;
        let download = origin.await?;
        let cap = match fill.hold_back {
            HoldBack::Whole { max, key: setting } => Some((max, setting)),
            HoldBack::Tail => None,
        };
        let too_large = |(max, setting): (u64, &str), size: Option<u64>| {
            let size = size.map_or(String::new(), |n| format!("{n} bytes, "));
            Error::from(crate::upstream::UpstreamError::TooLarge(format!(
                "{key} is {size}more than {setting} ({max} bytes), the most that is held back \
                 until it is checked"
            )))
        };
        if let (Some(cap), Some(size)) = (cap, download.size) {
            if size > cap.0 {
                return Err(too_large(cap, Some(size)));
            }
        }
        let (staged, file) = self
            .staging
            .create()
            .await
            .map_err(|e| Error::io("creating a staging file", e))?;
        let file = Arc::new(file.into_std().await);
        let reader = std::fs::File::open(staged.path())
            .map_err(|e| Error::io("opening a staging file", e))?;
        let size_hint = download.size;
        fill.update(|p| {
            p.started = Some(Started {
                size: size_hint,
                file: Arc::new(reader),
            })
        });

        let mut pending = BytesMut::with_capacity(WRITE_CHUNK);
        let mut disk_ok = true;
        let mut body = download.body;
        let expected = Expected {
            sha256: &fill.sha256,
            size: None,
        };
        let streamed: Result<crate::hash::Digest> = async {
            let mut hashing = match cap {
                Some((max, _)) => Hashing::bare().capped(max),
                None => Hashing::bare(),
            };
            while let Some(chunk) = body.next().await {
                let chunk = chunk?;
                fill.pace(chunk.len()).await;
                if let Err(e) = hashing.update(&chunk) {
                    return Err(match cap {
                        Some(cap) => too_large(cap, None),
                        None => admission::AdmitError::from(e).into(),
                    });
                }
                pending.extend_from_slice(&chunk);
                if pending.len() >= WRITE_CHUNK {
                    self.publish(fill, &file, pending.split().freeze(), &mut disk_ok)
                        .await?;
                }
            }
            if !pending.is_empty() {
                self.publish(fill, &file, pending.split().freeze(), &mut disk_ok)
                    .await?;
            }
            let digest = hashing.digest();
            if expected.check(&digest).is_err() {
                return Err(mismatch(digest.sha256.clone()));
            }
            Ok(digest)
        }
        .await;
        // A failure reaches readers from the fill's task, once the fill has left its table.
        let digest = streamed?;
        fill.update(|p| p.streamed = Some(Ok(())));
        if !disk_ok {
            return Err(Error::unexpected(format!(
                "{key} was served but not cached: writing to the cache failed"
            )));
        }
        tokio::task::spawn_blocking(move || file.sync_all())
            .await
            .unwrap_or_else(|e| Err(io::Error::other(e)))
            .map_err(|e| self.write_failed(key, "syncing a staging file", e))?;
        Ok((staged, digest))
    }

    /// Decides, with the other replicas on a shared store, whether this one fetches the archive
    /// (holding the lease while it does, if any) or another one already stored it.
    pub(in crate::mirror) async fn fleet_turn<K: Kind>(
        &self,
        fill: &Fill<K::Key>,
        objects: &Objects<K>,
    ) -> Turn {
        let Some(leases) = &self.leases else {
            return Turn::Fetch(None);
        };
        let object = K::object_key(&fill.key);
        // A background fill may lead too: a follower whose client waits asks it to hurry.
        let claim = leases.claim(&object, &fill.wanted).await;
        let (role, turn) = match claim {
            Claim::Leader(lease) => (FleetRole::Leader, Turn::Fetch(Some(lease))),
            Claim::Alone => (FleetRole::Alone, Turn::Fetch(None)),
            Claim::Held => {
                let committed = || async { matches!(objects.record(&fill.key).await, Ok(Some(_))) };
                match leases.follow(&object, committed, &fill.wanted).await {
                    Followed::Committed => (FleetRole::Follower, Turn::Stored),
                    Followed::Leader(lease) => (FleetRole::Leader, Turn::Fetch(Some(lease))),
                    Followed::TookOver(lease) => (FleetRole::TookOver, Turn::Fetch(Some(lease))),
                    Followed::Alone => (FleetRole::Alone, Turn::Fetch(None)),
                }
            }
        };
        self.metrics
            .fleet_fills
            .with_label_values(&[role.as_str()])
            .inc();
        turn
    }

    async fn fill_archive(&self, fill: &Fill, pkg: &Package, origin: Origin) -> Result<()> {
        let key = &fill.key;
        let lease = match self.fleet_turn(fill, self.archives.as_ref()).await {
            Turn::Fetch(lease) => lease,
            Turn::Stored => {
                tracing::info!(archive = %key, "another replica stored the archive; serving it from the store");
                return Ok(());
            }
        };
        let mismatch = |found: Sha256| {
            self.verification_failed(
                &key.addr,
                &key.version,
                Failure::ArchiveChecksum {
                    file: pkg.filename.clone(),
                    expected: fill.sha256.clone(),
                    found,
                },
            )
        };
        let (staged, digest) = self.stream_checked(fill, origin, mismatch).await?;
        let limits = self.settings.upstream.hash_limits();
        let timer = self.metrics.hash_duration.start_timer();
        let h1 = admission::h1_of_file(staged.path(), limits).await;
        timer.observe_duration();
        let h1 = h1.map_err(|e| {
            self.verification_failed(
                &key.addr,
                &key.version,
                Failure::UnusableZip {
                    file: pkg.filename.clone(),
                    source: Arc::new(e),
                },
            )
        })?;

        let size = digest.size;
        let mut recorded = false;
        if !fill.wanted.load(Ordering::Relaxed) && !self.settings.complete_hashes.keep_archives {
            // Only the complete-hashes job asked for it so far: its `h1:` and size are what it
            // is for. The checked file then waits a while for a client; if none asks, it goes,
            // and a client that asks later fetches it like any miss.
            self.record_facts(key, pkg, &h1, size).await;
            recorded = true;
            if !self.hold_for_client(fill, lease.as_ref()).await {
                drop(staged);
                tracing::info!(archive = %key, size, %h1, "hashed an archive no client asked for, without keeping it");
                return Ok(());
            }
            tracing::info!(archive = %key, "a client asked for an archive the complete-hashes job fetched; keeping it");
        }
        let verified = VerifiedArchive {
            file: staged,
            info: crate::records::ArchiveInfo {
                sha256: digest.sha256,
                h1: h1.clone(),
                size,
                trust: Some(fill.trust),
            },
        };
        verified
            .commit(self.archives(), key)
            .await
            .map_err(|e| {
                self.metrics.cache_write_errors.inc();
                tracing::error!(archive = %key, "storing the archive failed: {e}; it was served but is not cached");
                Error::from(e)
            })?;
        self.archive_committed(key, size).await;
        if !recorded {
            self.record_facts(key, pkg, &h1, size).await;
        }
        tracing::info!(archive = %key, size, %h1, "cached archive");
        Ok(())
    }

    /// Holds a checked fill only the complete-hashes job asked for, still in the fill table,
    /// until a client asks for it (then `true`) or for at most `complete_hashes.hold`; shutdown
    /// ends every hold. With `lease`, a client of another replica asks through the lease's
    /// `.wanted` marker.
    async fn hold_for_client(&self, fill: &Fill, lease: Option<&LeaseGuard>) -> bool {
        let hold = self.settings.complete_hashes.hold;
        let mut draining = self.draining.subscribe();
        if !hold.is_zero() {
            let until = tokio::time::Instant::now() + hold;
            fill.update(|p| p.held = true);
            loop {
                let woken = fill.wake.notified();
                tokio::pin!(woken);
                woken.as_mut().enable();
                if fill.wanted.load(Ordering::Relaxed) || *draining.borrow_and_update() {
                    break;
                }
                // The lease sets `wanted` at its renewals, without waking anyone.
                let follower = async {
                    match lease {
                        Some(_) => tokio::time::sleep(HOLD_POLL).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = &mut woken => {}
                    () = follower => {}
                    () = tokio::time::sleep_until(until) => break,
                    changed = draining.changed() => {
                        if changed.is_err() {
                            break;
                        }
                    }
                }
            }
        }
        if fill.wanted.load(Ordering::Relaxed) {
            return true;
        }
        // A follower may have asked since the lease's last renewal.
        match lease {
            Some(lease) if lease.asked().await => {
                fill.wanted.store(true, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }

    /// Puts a verified archive's `h1:` and size into its version record, and counts an origin
    /// that states another `h1:` for it.
    async fn record_facts(&self, key: &ArchiveKey, pkg: &Package, h1: &H1, size: u64) {
        if let Some(reported) = pkg.reported_h1.as_ref().filter(|r| *r != h1) {
            // The archive is the signed one; the registry's statement about it is wrong.
            self.metrics
                .verification_failed(VerificationReason::ReportedH1Mismatch);
            tracing::error!(archive = %key, computed = %h1, %reported, "the origin registry reports another h1: for this archive; serving the computed one");
        }
        if let Err(e) = self
            .meta
            .set_archive_facts(
                &key.addr,
                &key.version,
                &key.platform,
                &pkg.shasum,
                h1,
                size,
            )
            .await
        {
            tracing::warn!(archive = %key, "cannot record h1 in version metadata: {e}");
        }
    }

    /// Writes a chunk to the staging file and tells readers; after a write error, keeps chunks
    /// in memory instead so readers are still served, up to `cache.max_fill_memory`.
    async fn publish<K: std::fmt::Display + Send + Sync + 'static>(
        &self,
        fill: &Fill<K>,
        file: &Arc<std::fs::File>,
        bytes: Bytes,
        disk_ok: &mut bool,
    ) -> Result<()> {
        if *disk_ok {
            // Written from the chunk itself on the blocking pool (tokio's `File` would copy it
            // into a buffer of its own first).
            let (writer, chunk) = (file.clone(), bytes.clone());
            let written =
                tokio::task::spawn_blocking(move || io::Write::write_all(&mut &*writer, &chunk))
                    .await
                    .unwrap_or_else(|e| Err(io::Error::other(e)));
            match written {
                Ok(()) => {
                    let offset = fill.progress.borrow().on_disk;
                    fill.keep_recent(offset, bytes.clone());
                    fill.update(|p| p.on_disk += bytes.len() as u64);
                    return Ok(());
                }
                Err(e) => {
                    *disk_ok = false;
                    let _ = self.write_failed(&fill.key, "writing a staging file", e);
                }
            }
        }
        let len = bytes.len() as u64;
        let held = fill.progress.borrow().in_memory;
        let max = self.settings.cache.max_fill_memory;
        if held + len > max {
            return Err(Error::InsufficientStorage(format!(
                "{}: the cache cannot be written (disk full?) and the rest of the download is \
                 more than cache.max_fill_memory ({max} bytes) can hold in memory",
                fill.key
            )));
        }
        fill.memory.lock().expect("fill memory lock").push(bytes);
        fill.update(|p| p.in_memory += len);
        Ok(())
    }

    fn write_failed(&self, key: &impl std::fmt::Display, what: &str, e: io::Error) -> Error {
        self.metrics.cache_write_errors.inc();
        tracing::error!(object = %key, "{what} failed: {e}; it is served but not cached");
        Error::io(format!("{what} for {key}"), e)
    }
}

/// Fills driven without a network: the origin is a channel the test feeds, chunk by chunk.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::{Platform, ProviderAddr, Version};

    struct Setup {
        dir: tempfile::TempDir,
        mirror: Arc<Core>,
        key: ArchiveKey,
    }

    fn setup() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let toml = format!("[cache]\ndir = {:?}\n", dir.path().display().to_string());
        let settings = crate::config::Config::from_toml(&toml)
            .unwrap()
            .validate()
            .unwrap();
        let metrics = Arc::new(crate::metrics::Metrics::new());
        let mirror = Core::open(Arc::new(settings), metrics).unwrap();
        let key = ArchiveKey {
            addr: ProviderAddr::new("registry.example.com", "acme", "foo").unwrap(),
            version: Version::parse("1.0.0").unwrap(),
            platform: Platform::new("linux", "amd64").unwrap(),
        };
        Setup { dir, mirror, key }
    }

    fn package(key: &ArchiveKey, shasum: Sha256) -> Package {
        Package::imported(key.filename(), shasum, vec!["5.0".into()])
    }

    /// An origin's answer announcing `size` whose body is what the returned sender sends,
    /// ending cleanly when the sender is dropped.
    fn channel_origin(size: Option<u64>) -> (tokio::sync::mpsc::Sender<Bytes>, OriginBody) {
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1);
        let body = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|b| (Ok(b), rx))
        })
        .boxed();
        (tx, OriginBody { size, body })
    }

    /// Starts a fill whose origin answers at once with what the returned sender sends; the
    /// body ends cleanly when the sender is dropped.
    fn start(
        s: &Setup,
        pkg: &Package,
        size: usize,
    ) -> (tokio::sync::mpsc::Sender<Bytes>, Arc<Fill>) {
        start_for(s, pkg, size, true)
    }

    /// [`start`], for a client (`client`) or, like the complete-hashes job, for nobody yet.
    fn start_for(
        s: &Setup,
        pkg: &Package,
        size: usize,
        client: bool,
    ) -> (tokio::sync::mpsc::Sender<Bytes>, Arc<Fill>) {
        let (tx, origin) = channel_origin(Some(size as u64));
        let (fill, started) = s.mirror.fill_from(
            &s.key,
            pkg,
            SignatureKind::Community,
            client,
            None,
            move || async move { Ok(origin) }.boxed(),
        );
        assert!(started);
        (tx, fill)
    }

    /// A client reading the fill: what it received, how it ended, and a count of the bytes
    /// received so far to wait on.
    struct Reader {
        received: watch::Receiver<usize>,
        done: tokio::task::JoinHandle<(Vec<u8>, Option<io::Error>)>,
    }

    fn read(fill: &Arc<Fill>) -> Reader {
        let mut stream = fill.stream();
        let (count, received) = watch::channel(0);
        let done = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(item) = stream.next().await {
                match item {
                    Ok(bytes) => {
                        got.extend_from_slice(&bytes);
                        count.send_replace(got.len());
                    }
                    Err(e) => return (got, Some(e)),
                }
            }
            (got, None)
        });
        Reader { received, done }
    }

    fn noise(len: usize) -> Vec<u8> {
        let mut rng = fastrand::Rng::with_seed(7);
        (0..len).map(|_| rng.u8(..)).collect()
    }

    fn zip_of(content: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let opts = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        w.start_file("terraform-provider-foo", opts).unwrap();
        w.write_all(content).unwrap();
        w.finish().unwrap().into_inner()
    }

    /// Nothing of the archive is in the store, and nothing is left in the staging area.
    async fn nothing_committed(s: &Setup) {
        assert!(s.mirror.archives().record(&s.key).await.unwrap().is_none());
        let zip = <crate::cache::ArchiveKind as crate::cache::Kind>::object_key(&s.key);
        assert!(
            s.mirror
                .archives()
                .storage()
                .head(&zip)
                .await
                .unwrap()
                .is_none()
        );
        let left = std::fs::read_dir(s.dir.path().join("tmp")).unwrap().count();
        assert_eq!(left, 0, "the staging file is removed");
    }

    /// A fill held back whole (at most `max` bytes), its origin announcing `announced` and
    /// sending what the returned sender sends, run through `stream_checked` as a release build
    /// is; the task ends the fill with its result.
    fn start_whole(
        s: &Setup,
        sha256: Sha256,
        announced: Option<u64>,
        max: u64,
    ) -> (tokio::sync::mpsc::Sender<Bytes>, Arc<Fill>) {
        let (tx, origin) = channel_origin(announced);
        let hold_back = HoldBack::Whole {
            max,
            key: "releases.max_build_size",
        };
        let fill = Arc::new(
            Fill::new(s.key.clone(), sha256, SignatureKind::Official, true, None)
                .holding_back(hold_back),
        );
        let (core, task_fill) = (s.mirror.clone(), fill.clone());
        tokio::spawn(async move {
            let origin = async move { Ok(origin) }.boxed();
            let checked = core.stream_checked(&task_fill, origin, |found| {
                Error::unexpected(format!("found {found}"))
            });
            task_fill.finish(checked.await.map(|_| ()));
        });
        (tx, fill)
    }

    #[tokio::test]
    async fn a_fill_held_back_whole_gives_nothing_before_the_verdict() {
        let s = setup();
        let object = noise(5 * WRITE_CHUNK);
        let (tx, fill) = start_whole(&s, Sha256::of(&object), None, 1 << 20);
        let reader = read(&fill);
        let ready = {
            let fill = fill.clone();
            tokio::spawn(async move { fill.ready().await })
        };
        for chunk in object.chunks(WRITE_CHUNK) {
            tx.send(Bytes::copy_from_slice(chunk)).await.unwrap();
        }
        let all_in = object.len() as u64;
        let mut progress = fill.progress.subscribe();
        progress.wait_for(|p| p.on_disk == all_in).await.unwrap();
        // Time for a reader that could read to do so.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert_eq!(
            *reader.received.borrow(),
            0,
            "not a byte before the verdict"
        );
        assert!(!ready.is_finished(), "no response head before the verdict");
        drop(tx);
        assert_eq!(ready.await.unwrap().unwrap(), Ready::Streaming(None));
        let (got, err) = reader.done.await.unwrap();
        assert!(err.is_none(), "{err:?}");
        assert!(got == object, "every byte once it matched");

        // A mismatch is a plain error before any byte.
        let (tx, fill) = start_whole(&s, Sha256::of(b"another object"), None, 1 << 20);
        let reader = read(&fill);
        for chunk in object.chunks(WRITE_CHUNK) {
            tx.send(Bytes::copy_from_slice(chunk)).await.unwrap();
        }
        drop(tx);
        assert!(fill.ready().await.is_err());
        let (got, err) = reader.done.await.unwrap();
        assert!(got.is_empty() && err.is_some());
    }

    #[tokio::test]
    async fn a_fill_held_back_whole_is_bounded_by_its_cap() {
        let s = setup();
        let object = noise(3 * WRITE_CHUNK);
        let max = 2 * WRITE_CHUNK as u64;
        // Announced larger than the cap: refused before a byte is read.
        let (_tx, fill) = start_whole(&s, Sha256::of(&object), Some(object.len() as u64), max);
        let refused = tokio::time::timeout(std::time::Duration::from_secs(10), fill.ready());
        let err = refused.await.expect("refused at once").unwrap_err();
        assert!(err.to_string().contains("releases.max_build_size"), "{err}");
        assert_eq!(err.status(), http::StatusCode::BAD_GATEWAY);
        // Not announced: refused once more than the cap came.
        let (tx, fill) = start_whole(&s, Sha256::of(&object), None, max);
        let sent = async {
            for chunk in object.chunks(WRITE_CHUNK) {
                if tx.send(Bytes::copy_from_slice(chunk)).await.is_err() {
                    break;
                }
            }
        };
        let refused = tokio::time::timeout(std::time::Duration::from_secs(10), fill.ready());
        let (_, ready) = tokio::join!(sent, refused);
        let err = ready.expect("refused once over the cap").unwrap_err();
        assert!(err.to_string().contains("releases.max_build_size"), "{err}");
        assert!(fill.received() <= max, "no more than the cap is kept");
    }

    #[tokio::test]
    async fn readers_get_every_byte_of_a_matching_archive_and_it_is_committed() {
        let s = setup();
        let archive = zip_of(&noise(300 * 1024));
        let pkg = package(&s.key, Sha256::of(&archive));
        let (tx, fill) = start(&s, &pkg, archive.len());
        let first = read(&fill);
        let (head, tail) = archive.split_at(archive.len() / 2);
        for chunk in head.chunks(10_000) {
            tx.send(Bytes::copy_from_slice(chunk)).await.unwrap();
        }
        let second = read(&fill);
        for chunk in tail.chunks(10_000) {
            tx.send(Bytes::copy_from_slice(chunk)).await.unwrap();
        }
        drop(tx);
        for reader in [first, second] {
            let (got, err) = reader.done.await.unwrap();
            assert!(err.is_none(), "{err:?}");
            assert!(got == archive, "every byte, in order");
        }
        fill.finished().await.unwrap();
        let info = s.mirror.archives().record(&s.key).await.unwrap().unwrap();
        assert_eq!(info.sha256, pkg.shasum);
        assert_eq!(info.size, archive.len() as u64);
        assert!(crate::hash::is_h1(info.h1.as_str()));
    }

    #[tokio::test]
    async fn readers_behind_the_recent_chunks_read_the_staging_file() {
        let s = setup();
        let archive = zip_of(&noise(3 * RECENT));
        let pkg = package(&s.key, Sha256::of(&archive));
        let (tx, fill) = start(&s, &pkg, archive.len());
        let early = read(&fill);
        let (head, tail) = archive.split_at(2 * RECENT);
        for chunk in head.chunks(10_000) {
            tx.send(Bytes::copy_from_slice(chunk)).await.unwrap();
        }
        let mut progress = fill.progress.subscribe();
        // Chunks are written once a chunk's worth is in: all but the last of the head.
        let written = (head.len() - WRITE_CHUNK) as u64;
        progress.wait_for(|p| p.on_disk >= written).await.unwrap();
        // Its first bytes are no longer among the recent ones: it starts from the file.
        assert!(fill.recent_piece(0, READ_CHUNK).is_none());
        let late = read(&fill);
        for chunk in tail.chunks(10_000) {
            tx.send(Bytes::copy_from_slice(chunk)).await.unwrap();
        }
        drop(tx);
        for reader in [early, late] {
            let (got, err) = reader.done.await.unwrap();
            assert!(err.is_none(), "{err:?}");
            assert!(got == archive, "every byte, in order");
        }
        fill.finished().await.unwrap();
    }

    #[test]
    fn the_recent_chunks_are_bounded_and_sliced_at_any_offset() {
        let fill: Fill<u8> = Fill::new(0, Sha256::of(b""), SignatureKind::Official, true, None);
        let chunk = |n: u8| Bytes::from(vec![n; WRITE_CHUNK]);
        for i in 0..(RECENT / WRITE_CHUNK + 2) {
            fill.keep_recent((i * WRITE_CHUNK) as u64, chunk(i as u8));
        }
        let kept: usize = fill
            .recent
            .lock()
            .unwrap()
            .iter()
            .map(|(_, c)| c.len())
            .sum();
        assert_eq!(kept, RECENT, "the oldest chunks go");
        assert!(fill.recent_piece(0, 10).is_none());
        assert!(fill.recent_piece(2 * WRITE_CHUNK as u64 - 1, 10).is_none());
        let at = 2 * WRITE_CHUNK as u64 + 5;
        assert_eq!(fill.recent_piece(at, 10).unwrap(), vec![2u8; 10]);
        // A piece ends with its chunk.
        assert_eq!(
            fill.recent_piece(at, READ_CHUNK).unwrap().len(),
            WRITE_CHUNK - 5
        );
        let end = (RECENT / WRITE_CHUNK + 2) * WRITE_CHUNK;
        assert!(fill.recent_piece(end as u64, 10).is_none());
    }

    #[tokio::test]
    async fn a_tampered_archive_ends_every_body_in_an_error_without_its_tail() {
        let s = setup();
        let archive = noise(5 * WRITE_CHUNK);
        let mut signed = archive.clone();
        signed[archive.len() - 1] ^= 1;
        let pkg = package(&s.key, Sha256::of(&signed));
        let (tx, fill) = start(&s, &pkg, archive.len());
        let readers = [read(&fill), read(&fill)];
        // Whole write chunks, so every byte sent is on disk while the origin stays open.
        for chunk in archive.chunks(WRITE_CHUNK) {
            tx.send(Bytes::copy_from_slice(chunk)).await.unwrap();
        }
        let all_in = archive.len() as u64;
        let mut progress = fill.progress.subscribe();
        progress.wait_for(|p| p.on_disk == all_in).await.unwrap();
        let held_back = archive.len() - TAIL as usize;
        for reader in &readers {
            let mut received = reader.received.clone();
            received.wait_for(|n| *n == held_back).await.unwrap();
        }
        assert!(
            fill.progress.borrow().streamed.is_none(),
            "no verdict while the origin is open"
        );
        drop(tx);
        for reader in readers {
            let (got, err) = reader.done.await.unwrap();
            assert!(err.is_some(), "the body ends in an error");
            assert_eq!(got.len(), held_back, "the last {TAIL} bytes never left");
            assert!(got == archive[..held_back]);
        }
        assert!(matches!(fill.finished().await, Err(Error::Verification(_))));
        nothing_committed(&s).await;
    }

    #[tokio::test]
    async fn a_small_tampered_archive_is_a_plain_error_before_any_byte() {
        let s = setup();
        let archive = zip_of(b"small");
        assert!((archive.len() as u64) < HEAD_START);
        let pkg = package(&s.key, Sha256::of(b"something else"));
        let (tx, fill) = start(&s, &pkg, archive.len());
        let reader = read(&fill);
        let ready = {
            let fill = fill.clone();
            tokio::spawn(async move { fill.ready().await })
        };
        tx.send(Bytes::from(archive)).await.unwrap();
        drop(tx);
        let err = ready.await.unwrap().unwrap_err();
        assert!(matches!(err, Error::Verification(_)), "{err}");
        assert_eq!(err.status(), http::StatusCode::BAD_GATEWAY);
        let (got, err) = reader.done.await.unwrap();
        assert!(got.is_empty(), "no byte before the verdict");
        assert!(err.is_some());
        assert!(fill.finished().await.is_err());
        nothing_committed(&s).await;
    }

    /// Sends `archive` through a fill only the complete-hashes job asked for, and waits until
    /// it is hashed and held.
    async fn held(s: &Setup, archive: &[u8]) -> Arc<Fill> {
        let pkg = package(&s.key, Sha256::of(archive));
        let (tx, fill) = start_for(s, &pkg, archive.len(), false);
        tx.send(Bytes::copy_from_slice(archive)).await.unwrap();
        drop(tx);
        fill.settled().await.unwrap();
        assert!(fill.progress.borrow().held, "held for a client");
        fill
    }

    #[tokio::test]
    async fn a_client_asking_while_the_jobs_download_is_held_gets_it_and_it_is_kept() {
        let s = setup();
        let archive = zip_of(&noise(100 * 1024));
        let fill = held(&s, &archive).await;
        assert!(s.mirror.archives().record(&s.key).await.unwrap().is_none());
        let joined = s
            .mirror
            .join_fill(&s.key)
            .expect("the held fill is in the table");
        assert!(Arc::ptr_eq(&joined, &fill));
        let (got, err) = read(&joined).done.await.unwrap();
        assert!(
            err.is_none() && got == archive,
            "every byte, from the staging file"
        );
        fill.finished().await.unwrap();
        let info = s.mirror.archives().record(&s.key).await.unwrap();
        assert_eq!(info.map(|i| i.size), Some(archive.len() as u64), "kept");
        assert!(s.mirror.fill_in_progress(&s.key).is_none());
    }

    #[tokio::test]
    async fn shutdown_ends_a_hold_and_nothing_is_kept() {
        let s = setup();
        let fill = held(&s, &zip_of(b"only the job asked")).await;
        // The hold (10 s by default) ends at once when the server drains.
        tokio::time::timeout(std::time::Duration::from_secs(5), s.mirror.drain())
            .await
            .expect("draining does not wait for holds");
        fill.finished().await.unwrap();
        nothing_committed(&s).await;
    }
}
