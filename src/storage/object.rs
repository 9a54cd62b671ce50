//! [`ObjectStorage`]: objects in an S3, GCS or Azure Blob bucket, or in a directory every
//! replica mounts, through the `object_store` crate.
//!
//! Keys are prefixed with `cache.object_store.prefix`. An object becomes visible only when its
//! upload completes: small objects in one PUT, archives in a multipart upload whose completion
//! is the commit point (a failed upload is aborted; an interrupted one leaves only invisible
//! parts, which a bucket lifecycle rule for incomplete multipart uploads removes). Conditional
//! writes are not relied on (some S3-compatible stores ignore them): every writer of a key
//! writes the same verified bytes.
//!
//! An object's last use is an empty marker object beside it, `<key>.used` (see
//! [`Storage::touch`]), written only while the object is there and at most once an hour per
//! object and process; listings fold the markers into the objects they mark, and deleting or
//! moving an object deletes its marker.
//!
//! Every call has a deadline (`StoreDeadlines`, from `[cache.object_store]`): connecting, the
//! whole call with its retries (`request_timeout`; for a read, until its body starts), and the
//! wait between a body's chunks (`idle_timeout`). A call that runs out of time fails as
//! [`StorageError::Unavailable`] (503 to a client), and the store's circuit breaker counts it:
//! after `breaker_failures` such failures in a row calls fail at once for `breaker_cooldown`, so
//! a frozen store costs each client a check of memory, not a wait. A multipart upload gets one
//! `request_timeout` per part besides its first.
//!
//! Credentials come from the usual places of each cloud: for S3 the `AWS_*` environment
//! variables, web identity (IRSA), the ECS container endpoint, then instance metadata; for GCS
//! `GOOGLE_SERVICE_ACCOUNT` / application default credentials; for Azure the `AZURE_*`
//! variables or managed identity.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path as StorePath;
use object_store::signer::Signer;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig,
    WriteMultipart,
};
use tokio::io::AsyncReadExt;

use crate::breaker::Breaker;

use super::{
    Key, Object, ObjectMeta, OpenError, Result, Storage, StorageError, USE_MARKER, fold_use_markers,
};

/// Objects up to this size go up in one PUT; larger ones in a multipart upload of such parts.
const PART_SIZE: usize = 8 << 20;

/// How long after writing an object's use marker this process writes it again at the earliest:
/// the granularity of last use on an object store.
const TOUCH_EVERY: Duration = Duration::from_secs(3600);

/// Which cloud's API the bucket speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    S3,
    Gcs,
    Azure,
    /// A directory on a file system every replica mounts (NFS, a shared volume), through
    /// `object_store`'s local file system store; `bucket` is its absolute path.
    Directory,
}

impl Provider {
    fn scheme(self) -> &'static str {
        match self {
            Provider::S3 => "s3",
            Provider::Gcs => "gs",
            Provider::Azure => "az",
            Provider::Directory => "file",
        }
    }
}

/// The deadlines of calls to the store and its circuit breaker (`cache.object_store.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreDeadlines {
    /// Opening a connection (`connect_timeout`).
    pub connect: Duration,
    /// One call with all its retries; for a read, until its body starts (`request_timeout`).
    pub request: Duration,
    /// The longest wait for the next bytes of a body (`idle_timeout`).
    pub idle: Duration,
    /// Extra attempts within `request` after a connection error, timeout or 5xx (`retries`).
    pub retries: usize,
    /// Failed or timed-out calls in a row that open the store's circuit (0: never).
    pub breaker_failures: u32,
    pub breaker_cooldown: Duration,
}

impl Default for StoreDeadlines {
    fn default() -> StoreDeadlines {
        StoreDeadlines {
            connect: Duration::from_secs(5),
            request: Duration::from_secs(10),
            idle: Duration::from_secs(10),
            retries: 2,
            breaker_failures: 3,
            breaker_cooldown: Duration::from_secs(10),
        }
    }
}

/// The store's one circuit in its [`Breaker`].
const CIRCUIT: &str = "store";

/// `[cache.object_store]`, validated.
#[derive(Debug, Clone)]
pub struct ObjectStoreSettings {
    pub provider: Provider,
    /// The bucket (Azure: the container).
    pub bucket: String,
    /// Prepended to every key, without leading or trailing `/` (may be empty).
    pub prefix: String,
    pub region: Option<String>,
    /// The endpoint of an S3-compatible store (or an emulator), e.g. `https://s3.example.com`.
    pub endpoint: Option<String>,
    /// Path-style requests (`https://endpoint/bucket/key`), as most S3-compatible stores want.
    pub path_style: bool,
    /// Allow a plain-http endpoint (testing only).
    pub allow_http: bool,
    /// Extra trusted roots (PEM) for the endpoint's TLS.
    pub ca_file: Option<PathBuf>,
    /// An S3 key given in the configuration; `None`: the environment's credentials.
    pub credentials: Option<StaticCredentials>,
    pub deadlines: StoreDeadlines,
}

impl ObjectStoreSettings {
    /// A directory every replica mounts (`cache.backend = "directory"`), keys under `prefix`.
    pub fn directory(path: &Path, prefix: &str) -> ObjectStoreSettings {
        ObjectStoreSettings {
            provider: Provider::Directory,
            bucket: path.display().to_string(),
            prefix: prefix.to_string(),
            region: None,
            endpoint: None,
            path_style: true,
            allow_http: false,
            ca_file: None,
            credentials: None,
            deadlines: StoreDeadlines::default(),
        }
    }
}

/// An S3 access key pair from the configuration (the secret read from a file).
#[derive(Clone)]
pub struct StaticCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl std::fmt::Debug for StaticCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"[redacted]")
            .finish()
    }
}

/// A bucket through `object_store`.
pub struct ObjectStorage {
    store: Arc<dyn ObjectStore>,
    signer: Option<Arc<dyn Signer>>,
    prefix: String,
    name: String,
    /// Objects whose use marker this process wrote less than [`TOUCH_EVERY`] ago.
    touched: moka::sync::Cache<Key, ()>,
    deadlines: StoreDeadlines,
    breaker: Breaker,
}

impl std::fmt::Debug for ObjectStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ObjectStorage({})", self.name)
    }
}

impl ObjectStorage {
    /// Connects to the bucket described by `settings` (credentials from the environment). Makes
    /// no request; [`Storage::probe`] does.
    pub fn new(settings: &ObjectStoreSettings) -> std::result::Result<ObjectStorage, OpenError> {
        crate::tls::install_crypto_provider();
        let deadlines = settings.deadlines;
        // No overall timeout in the client: it would cut long archive streams. Each call is
        // bounded here instead (`call`), and a body by the wait between its chunks
        // (`idle_bounded`), which also covers a read the client retries on its own.
        let mut options = ClientOptions::new()
            .with_allow_http(settings.allow_http)
            .with_timeout_disabled()
            .with_read_timeout_disabled()
            .with_connect_timeout(deadlines.connect);
        // Retries stop before the call's own deadline would cut them off.
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(1),
                base: 2.,
            },
            max_retries: deadlines.retries,
            retry_timeout: deadlines.request,
        };
        if let Some(path) = &settings.ca_file {
            let pem = std::fs::read(path).map_err(|source| OpenError::Local {
                path: path.clone(),
                source,
            })?;
            let certs = object_store::Certificate::from_pem_bundle(&pem).map_err(|source| {
                OpenError::NotPem {
                    path: path.clone(),
                    source,
                }
            })?;
            for cert in certs {
                options = options.with_root_certificate(cert);
            }
        }
        let (store, signer): (Arc<dyn ObjectStore>, Option<Arc<dyn Signer>>) =
            match settings.provider {
                Provider::S3 => {
                    let mut b = object_store::aws::AmazonS3Builder::from_env()
                        .with_bucket_name(&settings.bucket)
                        .with_virtual_hosted_style_request(!settings.path_style)
                        .with_client_options(options)
                        .with_retry(retry)
                        .with_allow_http(settings.allow_http);
                    if let Some(region) = &settings.region {
                        b = b.with_region(region);
                    }
                    if let Some(endpoint) = &settings.endpoint {
                        b = b.with_endpoint(endpoint);
                    }
                    if let Some(key) = &settings.credentials {
                        b = b
                            .with_access_key_id(&key.access_key_id)
                            .with_secret_access_key(&key.secret_access_key);
                    }
                    let s3 = Arc::new(b.build().map_err(OpenError::Client)?);
                    (s3.clone(), Some(s3))
                }
                Provider::Gcs => {
                    let mut b = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                        .with_bucket_name(&settings.bucket)
                        .with_client_options(options)
                        .with_retry(retry);
                    if let Some(endpoint) = &settings.endpoint {
                        b = b.with_url(endpoint);
                    }
                    let gcs = Arc::new(b.build().map_err(OpenError::Client)?);
                    (gcs.clone(), Some(gcs))
                }
                Provider::Azure => {
                    let mut b = object_store::azure::MicrosoftAzureBuilder::from_env()
                        .with_container_name(&settings.bucket)
                        .with_client_options(options)
                        .with_retry(retry);
                    if let Some(endpoint) = &settings.endpoint {
                        b = b.with_url(endpoint);
                    }
                    let azure = Arc::new(b.build().map_err(OpenError::Client)?);
                    (azure.clone(), Some(azure))
                }
                Provider::Directory => {
                    let root = Path::new(&settings.bucket);
                    let local = object_store::local::LocalFileSystem::new_with_prefix(root)
                        .map_err(OpenError::Client)?
                        .with_automatic_cleanup(true);
                    (Arc::new(local), None)
                }
            };
        let name = match settings.prefix.as_str() {
            "" => format!("{}://{}/", settings.provider.scheme(), settings.bucket),
            p => format!("{}://{}/{p}/", settings.provider.scheme(), settings.bucket),
        };
        Ok(ObjectStorage {
            store,
            signer,
            prefix: settings.prefix.clone(),
            name,
            touched: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(TOUCH_EVERY)
                .build(),
            deadlines,
            breaker: Breaker::new(deadlines.breaker_failures, deadlines.breaker_cooldown),
        })
    }

    /// Runs one call to the store within `limit`, through the store's circuit breaker: an
    /// open circuit fails the call at once, and a call that fails to reach the store or runs
    /// out of time counts towards opening it.
    async fn call<T>(
        &self,
        key: impl std::fmt::Display,
        limit: Duration,
        work: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        if let Err(rejected) = self.breaker.allow(CIRCUIT) {
            return Err(StorageError::Unavailable {
                store: self.name.clone(),
                key: key.to_string(),
                message: format!(
                    "the store keeps failing or not answering; next attempt in {}s (circuit breaker)",
                    rejected.retry_in.as_secs().max(1)
                ),
            });
        }
        let result = match tokio::time::timeout(limit, work).await {
            Ok(result) => result,
            Err(_) => Err(StorageError::Unavailable {
                store: self.name.clone(),
                key: key.to_string(),
                message: format!(
                    "no answer within {} (cache.object_store.request_timeout)",
                    humantime::format_duration(limit)
                ),
            }),
        };
        self.record(&result);
        result
    }

    /// Counts a call's outcome in the store's circuit breaker.
    fn record<T>(&self, result: &Result<T>) {
        if let Err(StorageError::Unavailable { .. }) = result {
            if self.breaker.failure(CIRCUIT) {
                tracing::warn!(store = %self.name, "the object store keeps failing; circuit opened for {:?}", self.deadlines.breaker_cooldown);
            }
        } else if self.breaker.success(CIRCUIT) {
            tracing::info!(store = %self.name, "the object store answers again; circuit closed");
        }
    }

    /// The object of `key`; refused if the key is unsafe ([`Key::checked`]).
    fn path(&self, key: &Key) -> Result<StorePath> {
        let key = key.checked()?;
        Ok(if self.prefix.is_empty() {
            StorePath::from(key)
        } else {
            StorePath::from(format!("{}/{key}", self.prefix))
        })
    }

    fn key_of(&self, path: &StorePath) -> Option<Key> {
        let s = path.as_ref();
        let rel = if self.prefix.is_empty() {
            s
        } else {
            s.strip_prefix(&self.prefix)?.strip_prefix('/')?
        };
        Key::parse(rel)
    }

    fn err(&self, key: impl std::fmt::Display, e: &object_store::Error) -> StorageError {
        let message = e.to_string();
        let (store, key) = (self.name.clone(), key.to_string());
        match e {
            e if unanswered(e) => StorageError::Unavailable {
                store,
                key,
                message,
            },
            _ => StorageError::Failed {
                store,
                key,
                message,
            },
        }
    }

    /// The marker of `key`'s last use.
    fn marker(&self, key: &Key) -> Result<StorePath> {
        self.path(&key.with_suffix(USE_MARKER))
    }

    /// Deletes the marker of `key`'s last use, if any (best effort: an orphaned marker is
    /// never listed).
    async fn forget_use(&self, key: &Key) {
        self.touched.invalidate(key);
        if let Ok(marker) = self.marker(key) {
            let limit = self.deadlines.request;
            let _ = self
                .call(key, limit, async {
                    self.store.delete(&marker).await.or_else(|e| match e {
                        object_store::Error::NotFound { .. } => Ok(()),
                        e => Err(self.err(key, &e)),
                    })
                })
                .await;
        }
    }

    fn meta_of(&self, key: Key, meta: &object_store::ObjectMeta) -> ObjectMeta {
        ObjectMeta {
            key,
            size: meta.size,
            modified: SystemTime::from(meta.last_modified),
            last_used: None,
        }
    }

    async fn upload(&self, key: &Key, file: tokio::fs::File) -> Result<()> {
        let io_err = |e: io::Error| StorageError::io(&self.name, key, &e);
        let size = file.metadata().await.map_err(io_err)?.len();
        // One call's deadline for the first part and each further one.
        let parts = u32::try_from(size / PART_SIZE as u64).unwrap_or(u32::MAX);
        let limit = self
            .deadlines
            .request
            .saturating_mul(parts.saturating_add(1));
        self.call(key, limit, self.upload_within(key, file, size))
            .await
    }

    async fn upload_within(&self, key: &Key, mut file: tokio::fs::File, size: u64) -> Result<()> {
        let path = self.path(key)?;
        let io_err = |e: io::Error| StorageError::io(&self.name, key, &e);
        if size <= PART_SIZE as u64 {
            let mut buf = Vec::with_capacity(size as usize);
            file.read_to_end(&mut buf).await.map_err(io_err)?;
            self.store
                .put(&path, PutPayload::from(buf))
                .await
                .map_err(|e| self.err(key, &e))?;
            return Ok(());
        }
        let upload = self
            .store
            .put_multipart(&path)
            .await
            .map_err(|e| self.err(key, &e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
        let mut buf = vec![0u8; 1 << 20];
        let sent: std::result::Result<(), StorageError> = async {
            loop {
                let n = file.read(&mut buf).await.map_err(io_err)?;
                if n == 0 {
                    return Ok(());
                }
                writer
                    .wait_for_capacity(4)
                    .await
                    .map_err(|e| self.err(key, &e))?;
                writer.write(&buf[..n]);
            }
        }
        .await;
        let result = match sent {
            // The commit point: the object appears whole, or not at all.
            Ok(()) => writer
                .finish()
                .await
                .map(|_| ())
                .map_err(|e| self.err(key, &e)),
            Err(e) => {
                // Dropping the writer would leave the parts behind.
                let _ = writer.abort().await;
                Err(e)
            }
        };
        match result {
            // Writers of one key write the same bytes (replicas filling the same archive). A
            // store may cancel an upload in progress when another for the same key completes
            // (Garage does): the other writer's object is this one.
            Err(e)
                if self
                    .head(key)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|m| m.size == size) =>
            {
                tracing::debug!(%key, "a concurrent writer stored the object first: {e}");
                Ok(())
            }
            other => other,
        }
    }
}

/// `body`, ending in a `TimedOut` error when its next chunk takes longer than `idle`.
fn idle_bounded(
    body: impl futures_util::Stream<Item = io::Result<Bytes>> + Send + 'static,
    idle: Duration,
) -> impl futures_util::Stream<Item = io::Result<Bytes>> + Send + 'static {
    futures_util::stream::unfold(Some(body.boxed()), move |body| async move {
        let mut body = body?;
        match tokio::time::timeout(idle, body.next()).await {
            Ok(Some(chunk)) => Some((chunk, Some(body))),
            Ok(None) => None,
            Err(_) => Some((
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the object store sent nothing for {} (cache.object_store.idle_timeout)",
                        humantime::format_duration(idle)
                    ),
                )),
                None,
            )),
        }
    })
}

/// Whether `e` says the store did not answer (usefully) for now: no connection, a broken or
/// timed-out exchange, a 5xx other than 501, a 429. Only these make a call
/// [`StorageError::Unavailable`] and count towards opening the store's circuit; any other answer
/// (a refusal, a call the store does not implement) is the store answering.
fn unanswered(e: &object_store::Error) -> bool {
    if !matches!(e, object_store::Error::Generic { .. }) {
        return false;
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<object_store::client::HttpError>()
            .is_some()
        {
            return true;
        }
        cause = c.source();
    }
    // A status the store answered with (object_store's retry error names it in its text).
    let text = e.to_string();
    text.split("status code: ")
        .skip(1)
        .any(|rest| rest.starts_with('5') && !rest.starts_with("501") || rest.starts_with("429"))
}

fn not_found(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::NotFound { .. })
}

#[async_trait]
impl Storage for ObjectStorage {
    fn describe(&self) -> String {
        self.name.clone()
    }

    async fn read(&self, key: &Key) -> Result<Option<Bytes>> {
        let path = self.path(key)?;
        self.call(key, self.deadlines.request, async {
            match self.store.get(&path).await {
                Ok(got) => got.bytes().await.map(Some).map_err(|e| self.err(key, &e)),
                Err(e) if not_found(&e) => Ok(None),
                Err(e) => Err(self.err(key, &e)),
            }
        })
        .await
    }

    async fn open(&self, key: &Key) -> Result<Option<Object>> {
        let path = self.path(key)?;
        let got = self
            .call(key, self.deadlines.request, async {
                match self.store.get(&path).await {
                    Ok(got) => Ok(Some(got)),
                    Err(e) if not_found(&e) => Ok(None),
                    Err(e) => Err(self.err(key, &e)),
                }
            })
            .await?;
        let Some(got) = got else {
            return Ok(None);
        };
        let meta = self.meta_of(key.clone(), &got.meta);
        let body = idle_bounded(
            got.into_stream().map_err(io::Error::other),
            self.deadlines.idle,
        )
        .boxed();
        Ok(Some(Object { meta, body }))
    }

    async fn head(&self, key: &Key) -> Result<Option<ObjectMeta>> {
        let path = self.path(key)?;
        self.call(key, self.deadlines.request, async {
            match self.store.head(&path).await {
                Ok(meta) => Ok(Some(self.meta_of(key.clone(), &meta))),
                Err(e) if not_found(&e) => Ok(None),
                Err(e) => Err(self.err(key, &e)),
            }
        })
        .await
    }

    async fn write(&self, key: &Key, bytes: Bytes) -> Result<()> {
        let path = self.path(key)?;
        self.call(key, self.deadlines.request, async {
            self.store
                .put(&path, PutPayload::from(bytes))
                .await
                .map(|_| ())
                .map_err(|e| self.err(key, &e))
        })
        .await
    }

    async fn create(&self, key: &Key, bytes: Bytes) -> Result<bool> {
        let path = self.path(key)?;
        let mode = object_store::PutMode::Create;
        self.call(key, self.deadlines.request, async {
            match self
                .store
                .put_opts(&path, PutPayload::from(bytes), mode.into())
                .await
            {
                Ok(_) => Ok(true),
                Err(
                    object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. },
                ) => Ok(false),
                Err(e) => Err(self.err(key, &e)),
            }
        })
        .await
    }

    async fn put_file(&self, key: &Key, file: &Path) -> Result<()> {
        let opened = tokio::fs::File::open(file)
            .await
            .map_err(|e| StorageError::io(&self.name, key, &e))?;
        self.upload(key, opened).await
    }

    async fn delete(&self, key: &Key) -> Result<bool> {
        // S3 answers a delete of a missing key like any other: ask first.
        if self.head(key).await?.is_none() {
            return Ok(false);
        }
        let path = self.path(key)?;
        let deleted = self
            .call(key, self.deadlines.request, async {
                match self.store.delete(&path).await {
                    Ok(()) => Ok(true),
                    Err(e) if not_found(&e) => Ok(false),
                    Err(e) => Err(self.err(key, &e)),
                }
            })
            .await;
        if deleted.is_ok() {
            self.forget_use(key).await;
        }
        deleted
    }

    async fn rename(&self, from: &Key, to: &Key) -> Result<bool> {
        let (source, target) = (self.path(from)?, self.path(to)?);
        let renamed = self
            .call(from, self.deadlines.request, async {
                match self.store.rename(&source, &target).await {
                    Ok(()) => Ok(true),
                    Err(e) if not_found(&e) => Ok(false),
                    Err(e) => Err(self.err(from, &e)),
                }
            })
            .await;
        if let Ok(true) = renamed {
            self.forget_use(from).await;
        }
        renamed
    }

    async fn list(&self, prefix: &Key) -> Result<Vec<ObjectMeta>> {
        let path = self.path(prefix)?;
        // A listing is many pages: each must come within one call's deadline, not the whole.
        let limit = self.deadlines.request;
        let listed = self
            .call(prefix, Duration::MAX, async {
                let mut pages = self.store.list(Some(&path));
                let mut listed: Vec<object_store::ObjectMeta> = Vec::new();
                loop {
                    match tokio::time::timeout(limit, pages.next()).await {
                        Ok(Some(item)) => listed.push(item.map_err(|e| self.err(prefix, &e))?),
                        Ok(None) => return Ok(listed),
                        Err(_) => {
                            return Err(StorageError::Unavailable {
                                store: self.name.clone(),
                                key: prefix.to_string(),
                                message: format!(
                                    "the listing stalled for {} (cache.object_store.request_timeout)",
                                    humantime::format_duration(limit)
                                ),
                            });
                        }
                    }
                }
            })
            .await?;
        let mut out = fold_use_markers(
            listed
                .iter()
                .filter_map(|m| Some(self.meta_of(self.key_of(&m.location)?, m)))
                .collect(),
        );
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn probe(&self) -> Result<()> {
        let key = Key::new([
            ".probe".to_string(),
            format!("{}-{}", crate::clock::now_secs(), std::process::id()),
        ]);
        self.write(&key, Bytes::from_static(b"probe")).await?;
        let back = self.read(&key).await;
        let probe = self.path(&key)?;
        let _ = self
            .call(&key, self.deadlines.request, async {
                self.store
                    .delete(&probe)
                    .await
                    .map_err(|e| self.err(&key, &e))
            })
            .await;
        match back? {
            Some(b) if &b[..] == b"probe" => Ok(()),
            _ => Err(StorageError::Failed {
                store: self.name.clone(),
                key: key.to_string(),
                message: "an object just written cannot be read back".into(),
            }),
        }
    }

    async fn touch(&self, key: &Key) {
        if self.touched.contains_key(key) {
            return;
        }
        self.touched.insert(key.clone(), ());
        // No marker for an object that is gone (removed while it was being served): it would
        // be left behind, unlisted, for good.
        let written = match self.head(key).await {
            Ok(Some(_)) => match self.marker(key) {
                Ok(marker) => self
                    .call(key, self.deadlines.request, async {
                        self.store
                            .put(&marker, PutPayload::new())
                            .await
                            .map(|_| ())
                            .map_err(|e| self.err(key, &e))
                    })
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            },
            Ok(None) => Err("the object is gone".to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = written {
            tracing::debug!(%key, "cannot record the object's use: {e}");
            self.touched.invalidate(key);
        }
    }

    async fn signed_url(&self, key: &Key, ttl: Duration) -> Result<Option<url::Url>> {
        let Some(signer) = &self.signer else {
            return Ok(None);
        };
        let path = self.path(key)?;
        self.call(key, self.deadlines.request, async {
            signer
                .signed_url(http::Method::GET, &path, ttl)
                .await
                .map(Some)
                .map_err(|e| self.err(key, &e))
        })
        .await
    }
}
