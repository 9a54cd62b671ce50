//! Where provender keeps what it has verified: one object store interface with two backends.
//!
//! Everything the cache persists goes through [`Storage`]: provider archives and their records,
//! version lists, version records, the origins' SHA256SUMS copies, and module archives. A
//! [`Key`] is a `/`-separated path built only from validated address types, never from raw
//! request input. Two backends implement it:
//!
//! - [`DiskStorage`]: files under a directory; every write goes to a temporary file in the same
//!   directory, is fsynced and renamed into place, so a reader sees the old object or the new one.
//! - [`ObjectStorage`]: an S3, GCS or Azure bucket through the `object_store` crate; an object
//!   appears only when its upload completes (one PUT, or a multipart upload's completion).
//!
//! Neither offers a lock. Writers of one key always write the same verified bytes (an archive is
//! named by what its origin signed; a record is derived from it), so concurrent writers, on one
//! machine or on several replicas, are harmless: the last one wins with the same content. The
//! one conditional write, [`Storage::create`], only lets replicas avoid duplicate work (fleet
//! leases); correctness never depends on it.
//!
//! Each backend also records when an object was last *used* ([`Storage::touch`], called when
//! the object is served), the way it can: the disk backend in the file's access time (its own
//! reads do not change it), an object store in an empty marker object `<key>.used` whose
//! modification time is the last use (written at most once an hour per object and process).
//! Listings report it as [`ObjectMeta::last_used`] and never list the markers themselves.

mod disk;
mod object;

use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::stream::BoxStream;

pub use disk::DiskStorage;
pub use object::{ObjectStorage, ObjectStoreSettings, Provider, StaticCredentials, StoreDeadlines};

/// Where the cache keeps what it stores (`cache.backend`).
#[derive(Debug, Clone)]
// Built once at start-up and held once: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum StorageSettings {
    /// Files under this directory (`cache.dir`).
    Disk(std::path::PathBuf),
    /// A bucket (`cache.backend` = s3, gcs or azure, `[cache.object_store]`).
    Object(ObjectStoreSettings),
}

/// Opens the store `settings` describe. Makes no request to an object store.
pub fn open(
    settings: &StorageSettings,
) -> std::result::Result<std::sync::Arc<dyn Storage>, OpenError> {
    Ok(match settings {
        StorageSettings::Disk(dir) => {
            std::sync::Arc::new(DiskStorage::new(dir.clone()).map_err(|source| {
                OpenError::Local {
                    path: dir.clone(),
                    source,
                }
            })?)
        }
        StorageSettings::Object(os) => std::sync::Arc::new(ObjectStorage::new(os)?),
    })
}

/// Why a store could not be opened (before any request is made to it).
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A local file or directory: the disk store's root, an object store's `ca_file`.
    #[error("{}: {source}", path.display())]
    Local {
        path: std::path::PathBuf,
        source: io::Error,
    },
    #[error("{}: not a PEM bundle: {source}", path.display())]
    NotPem {
        path: std::path::PathBuf,
        source: object_store::Error,
    },
    /// The object store client refused the settings.
    #[error("{0}")]
    Client(object_store::Error),
}

/// A path in the store, e.g. `archives/registry.terraform.io/hashicorp/aws/5.0.0/x.zip`.
///
/// Built only by [`Key::new`], [`Key::parse`] and [`Key::with_suffix`], which check every
/// segment: none empty, `.` or `..`, none holding `/`, `\` or NUL. Building a key never fails, so
/// the many places that name objects stay simple; a key that failed the check is carried as
/// such and every store refuses it ([`StorageError::UnsafeKey`]) before any I/O.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    path: String,
    safe: bool,
}

/// Whether `store` refuses a second [`Storage::create`] of one key (Garage, for one, answers
/// 200 and overwrites), asked with a throw-away object at `probe`.
pub async fn creates_enforced(store: &dyn Storage, probe: &Key) -> bool {
    let body = Bytes::from_static(b"{}");
    let first = store.create(probe, body.clone()).await;
    let second = store.create(probe, body).await;
    let _ = store.delete(probe).await;
    matches!((first, second), (Ok(true), Ok(false)))
}

/// Whether `s` may be one segment of a key.
fn safe_segment(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\\', '\0'])
}

impl Key {
    /// Joins segments with `/`. Every segment should come from a validated type; one that is
    /// empty, `.` or `..`, or holds `/`, `\` or NUL makes the key one no store accepts.
    pub fn new<S: AsRef<str>>(segments: impl IntoIterator<Item = S>) -> Key {
        let mut path = String::new();
        let mut safe = true;
        for s in segments {
            let s = s.as_ref();
            safe &= safe_segment(s);
            if !path.is_empty() {
                path.push('/');
            }
            path.push_str(s);
        }
        Key {
            safe: safe && !path.is_empty(),
            path,
        }
    }

    /// A key from its `/`-joined form, as a listing returns it; `None` if any segment is unsafe.
    pub fn parse(path: &str) -> Option<Key> {
        path.split('/').all(safe_segment).then(|| Key {
            path: path.to_string(),
            safe: true,
        })
    }

    /// This key with `suffix` appended to its last segment (`x.zip` -> `x.zip.json`).
    pub fn with_suffix(&self, suffix: &str) -> Key {
        let path = format!("{}{suffix}", self.path);
        let last = path.rsplit('/').next().unwrap_or_default();
        Key {
            safe: self.safe && !suffix.contains(['/', '\\', '\0']) && safe_segment(last),
            path,
        }
    }

    /// The key's path, or [`StorageError::UnsafeKey`] if a segment failed the check: what a
    /// store calls before it touches anything.
    pub fn checked(&self) -> Result<&str> {
        match self.safe {
            true => Ok(&self.path),
            false => Err(StorageError::UnsafeKey {
                key: self.path.escape_debug().to_string(),
            }),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.path
    }

    /// Its segments.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.path.split('/')
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.path)
    }
}

/// What a listing or a `head` says about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    pub key: Key,
    pub size: u64,
    /// When it was written (fetched or imported).
    pub modified: SystemTime,
    /// When it was last used ([`Storage::touch`]), where the backend knows: disk always (the
    /// access time), object stores in listings (the time of its `.used` marker).
    pub last_used: Option<SystemTime>,
}

impl ObjectMeta {
    /// When the object was last used or, if later, written: the time `provender prune` and the
    /// `cache.max_size` budget go by.
    pub fn last_use(&self) -> SystemTime {
        last_use(self.modified, self.last_used)
    }
}

/// The later of when an object was written and when it was last used.
pub fn last_use(modified: SystemTime, last_used: Option<SystemTime>) -> SystemTime {
    last_used.map_or(modified, |used| used.max(modified))
}

/// The suffix of an object store's marker of an object's last use.
const USE_MARKER: &str = ".used";

/// Folds the last-use markers of a listing into the objects they mark (markers of objects that
/// are gone are dropped).
fn fold_use_markers(listed: Vec<ObjectMeta>) -> Vec<ObjectMeta> {
    let (markers, mut objects): (Vec<ObjectMeta>, Vec<ObjectMeta>) = listed
        .into_iter()
        .partition(|o| o.key.as_str().ends_with(USE_MARKER));
    let at: std::collections::HashMap<String, usize> = objects
        .iter()
        .enumerate()
        .map(|(i, o)| (o.key.as_str().to_string(), i))
        .collect();
    for marker in markers {
        let marked = marker.key.as_str().trim_end_matches(USE_MARKER);
        if let Some(&i) = at.get(marked) {
            let o = &mut objects[i];
            o.last_used = Some(
                o.last_used
                    .map_or(marker.modified, |t| t.max(marker.modified)),
            );
        }
    }
    objects
}

/// An object opened for reading.
pub struct Object {
    pub meta: ObjectMeta,
    /// Its bytes; ends with an error if they cannot all be read.
    pub body: BoxStream<'static, io::Result<Bytes>>,
}

impl Object {
    /// The body as an `AsyncRead`, for code that copies or hashes it.
    pub fn into_reader(self) -> impl tokio::io::AsyncRead + Send + Unpin {
        tokio_util::io::StreamReader::new(self.body)
    }
}

/// A storage operation that failed. It names the store and the key; no credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// A key with a segment that could escape its place (see [`Key`]): refused before any I/O.
    /// Keys are built from validated values only, so this is a defect, never a client's doing.
    #[error("refused to use the unsafe store key {key:?}")]
    UnsafeKey { key: String },
    /// The store could not be reached or refused the operation for now (a network error, a
    /// timeout, a throttling answer): retrying later may help.
    #[error("{store}: {key}: {message}")]
    Unavailable {
        store: String,
        key: String,
        message: String,
    },
    /// Anything else: a full disk, permissions, a malformed answer.
    #[error("{store}: {key}: {message}")]
    Failed {
        store: String,
        key: String,
        message: String,
    },
}

impl StorageError {
    /// The HTTP status a client sees when this stops a request.
    pub fn status(&self) -> http::StatusCode {
        match self {
            StorageError::Unavailable { .. } => http::StatusCode::SERVICE_UNAVAILABLE,
            StorageError::Failed { .. } | StorageError::UnsafeKey { .. } => {
                http::StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    /// A local I/O error on `key` of `store`.
    pub fn io(store: &str, key: impl std::fmt::Display, e: &io::Error) -> StorageError {
        let (store, key, message) = (store.to_string(), key.to_string(), e.to_string());
        match e.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock => {
                StorageError::Unavailable {
                    store,
                    key,
                    message,
                }
            }
            _ => StorageError::Failed {
                store,
                key,
                message,
            },
        }
    }
}

/// Shorthand for storage results.
pub type Result<T, E = StorageError> = std::result::Result<T, E>;

/// An object store: small objects read and written whole, large ones streamed.
#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// Where this store is, for logs and messages (`/var/lib/provender`, `s3://bucket/prefix/`).
    fn describe(&self) -> String;

    /// Reads a whole (small) object; `None` if there is none.
    async fn read(&self, key: &Key) -> Result<Option<Bytes>>;

    /// Opens an object for streaming; `None` if there is none.
    async fn open(&self, key: &Key) -> Result<Option<Object>>;

    /// Describes an object without reading it; `None` if there is none.
    async fn head(&self, key: &Key) -> Result<Option<ObjectMeta>>;

    /// Writes a whole object. Readers see the old content or the new, never a part.
    async fn write(&self, key: &Key, bytes: Bytes) -> Result<()>;

    /// Writes a whole object only if there is none under `key`: `Ok(true)` if this call created
    /// it, `Ok(false)` if an object was there. Only as strong as the store: some S3-compatible
    /// stores ignore the condition and overwrite (Garage does), so a caller that relies on it
    /// checks first that the store enforces it (see `cache::Leases`).
    async fn create(&self, key: &Key, bytes: Bytes) -> Result<bool>;

    /// Makes the local file at `file` the object `key`, atomically as [`Storage::write`]. The
    /// file may be moved away: the caller must not use it afterwards. Concurrent writers of
    /// one key must write the same bytes; each then succeeds once the object is there.
    async fn put_file(&self, key: &Key, file: &Path) -> Result<()>;

    /// Deletes an object; `Ok(false)` if there was none.
    async fn delete(&self, key: &Key) -> Result<bool>;

    /// Moves an object to another key; `Ok(false)` if there was none.
    async fn rename(&self, from: &Key, to: &Key) -> Result<bool>;

    /// Every object whose key starts with `prefix/`, recursively.
    async fn list(&self, prefix: &Key) -> Result<Vec<ObjectMeta>>;

    /// Checks that the store can be read and written now (for readiness).
    async fn probe(&self) -> Result<()>;

    /// Records that an object was just used (served to a client). Best effort: a failure is
    /// not reported, and a backend may skip a call that follows another closely.
    async fn touch(&self, _key: &Key) {}

    /// A URL a client may fetch the object from directly for `ttl`, where the backend can sign
    /// one (object stores); `None` otherwise.
    async fn signed_url(&self, _key: &Key, _ttl: Duration) -> Result<Option<url::Url>> {
        Ok(None)
    }
}
