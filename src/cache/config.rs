//! `[cache]` and `[cache.object_store]` as written: where the cache is kept, its lifetimes and
//! bounds; their validation into [`CacheSettings`] (with the store's
//! [`StorageSettings`]). `config` runs it and turns [`CacheConfigError`] into its own error.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::storage::StorageSettings;

/// A bad `[cache]` setting: the key at fault and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("config key {key}: {message}")]
pub struct CacheConfigError {
    pub key: String,
    pub message: String,
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> CacheConfigError {
    CacheConfigError {
        key: key.into(),
        message: message.into(),
    }
}

/// `[cache]`
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Local directory: downloads in progress (`tmp/`), the generated TLS files (`tls/`), and
    /// with the disk backend the whole cache.
    #[schemars(extend("format" = "path"))]
    pub dir: PathBuf,
    /// Where archives and metadata are kept: `"disk"` (under `dir`), or an object store shared
    /// by several replicas: `"s3"` (AWS or any S3-compatible store), `"gcs"`, `"azure"`, or
    /// `"directory"` (a directory every replica mounts), configured in `[cache.object_store]`.
    pub backend: String,
    /// With an object store that signs URLs (`s3`, `gcs`, `azure`): answer requests for cached
    /// archives with a redirect (302) to a pre-signed URL valid 15 minutes, so the bytes do not
    /// pass through provender. Clients must be able to reach the store.
    pub redirect_downloads: bool,
    /// The bucket of an object-store backend; required with `backend = "s3"`, `"gcs"`,
    /// `"azure"` or `"directory"`, refused with `"disk"`.
    pub object_store: Option<ObjectStoreConfig>,
    /// How long a version list is served without asking its origin again.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub index_ttl: Duration,
    /// How long "the origin has no such provider or module" is remembered.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub not_found_ttl: Duration,
    /// When an origin fails, how old a version list may be and still be served.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub stale_if_error: Duration,
    /// Most version lists, and separately most version records, held in memory.
    pub metadata_entries: u64,
    /// Most bytes of provider archives and CLI release builds to keep: past it, the least
    /// recently used are deleted, whatever their kind (never one a client is reading). Unset: no
    /// limit; at least 1 MiB.
    #[schemars(with = "Option<String>", extend("format" = "size"))]
    pub max_size: Option<bytesize::ByteSize>,
    /// How often the server re-hashes every cached archive and quarantines those whose SHA-256
    /// no longer matches its record (`"0s"`: never; `provender verify` does it on demand).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub reverify_interval: Duration,
    /// When the cache cannot be written during a download (a full disk), the rest of the
    /// archive is held in memory for the clients waiting for it, at most this much per download
    /// (at least 256 KiB); past it the download fails and nothing is cached.
    #[schemars(with = "String", extend("format" = "size"))]
    pub max_fill_memory: bytesize::ByteSize,
    /// With an object store: bytes of archives and module packages also kept on local disk
    /// (0: none).
    #[schemars(with = "String", extend("format" = "size"))]
    pub local_max_size: bytesize::ByteSize,
    /// With an object store: replicas that miss the same archive at once let one of them fetch
    /// it (where the store enforces conditional creates).
    pub fleet_single_fetch: bool,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            dir: PathBuf::from("./provender-data"),
            backend: "disk".into(),
            redirect_downloads: false,
            object_store: None,
            index_ttl: Duration::from_secs(10 * 60),
            not_found_ttl: Duration::from_secs(60),
            stale_if_error: Duration::from_secs(7 * 24 * 3600),
            metadata_entries: 10_000,
            max_size: None,
            reverify_interval: Duration::from_secs(24 * 3600),
            max_fill_memory: bytesize::ByteSize::mib(64),
            local_max_size: bytesize::ByteSize::b(0),
            fleet_single_fetch: true,
        }
    }
}

/// `[cache.object_store]`: the bucket of an object-store backend.
#[derive(Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ObjectStoreConfig {
    /// The bucket (for Azure, the container); with `cache.backend = "directory"`, the shared
    /// directory's absolute path.
    pub bucket: String,
    /// Keys go under this prefix (`/`-separated names); empty: none.
    #[serde(default)]
    pub prefix: String,
    /// The bucket's region (`s3`); unset: from the environment.
    #[serde(default)]
    pub region: Option<String>,
    /// The store's URL, for an S3-compatible store or an emulator (https, unless `allow_http`).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Address objects as `https://endpoint/bucket/key` (most S3-compatible stores) rather than
    /// as `https://bucket.endpoint/key`.
    #[serde(default = "yes")]
    pub path_style: bool,
    /// Allow a plain-http `endpoint` (testing only: nothing in transit is protected).
    #[serde(default)]
    pub allow_http: bool,
    /// Extra trusted root certificates (PEM) for the store's endpoint.
    #[serde(default)]
    #[schemars(extend("format" = "path"))]
    pub ca_file: Option<PathBuf>,
    /// A static S3 access key ID, with `secret_access_key_file`; unset: credentials come from
    /// the environment (the `AWS_*` variables, web identity, the container or instance
    /// metadata; for GCS and Azure always from theirs).
    #[serde(default)]
    pub access_key_id: Option<String>,
    /// A file holding the secret of `access_key_id`.
    #[serde(default)]
    #[schemars(extend("format" = "path"))]
    pub secret_access_key_file: Option<PathBuf>,
    /// Deadlines and the circuit breaker of every call to the store, so that a store that hangs
    /// costs a client seconds, not minutes: here, how long opening a connection may take.
    #[serde(default = "default_store_connect_timeout", with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub connect_timeout: Duration,
    /// How long one call with all its retries may take (for a read, until its body starts; a
    /// multipart upload gets one per part); at least `connect_timeout`. A call past it is a 503
    /// with `Retry-After`.
    #[serde(default = "default_store_request_timeout", with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub request_timeout: Duration,
    /// The longest wait for a body's next bytes (a slow but steady read is never cut).
    #[serde(default = "default_store_idle_timeout", with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub idle_timeout: Duration,
    /// Extra attempts of a failed call within `request_timeout` (at most 10).
    #[serde(default = "default_store_retries")]
    pub retries: usize,
    /// After this many failed or timed-out calls in a row, calls fail at once for
    /// `breaker_cooldown`, then one probe decides (0: no breaker).
    #[serde(default = "default_store_breaker_failures")]
    pub breaker_failures: u32,
    /// How long the store's circuit stays open before a probe.
    #[serde(default = "default_store_breaker_cooldown", with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub breaker_cooldown: Duration,
}

fn default_store_connect_timeout() -> Duration {
    crate::storage::StoreDeadlines::default().connect
}

fn default_store_request_timeout() -> Duration {
    crate::storage::StoreDeadlines::default().request
}

fn default_store_idle_timeout() -> Duration {
    crate::storage::StoreDeadlines::default().idle
}

fn default_store_retries() -> usize {
    crate::storage::StoreDeadlines::default().retries
}

fn default_store_breaker_failures() -> u32 {
    crate::storage::StoreDeadlines::default().breaker_failures
}

fn default_store_breaker_cooldown() -> Duration {
    crate::storage::StoreDeadlines::default().breaker_cooldown
}

// The key id is not secret, but keep the table's Debug output in one style with the others.
impl std::fmt::Debug for ObjectStoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectStoreConfig")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("path_style", &self.path_style)
            .field("allow_http", &self.allow_http)
            .field("ca_file", &self.ca_file)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key_file", &self.secret_access_key_file)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("retries", &self.retries)
            .field("breaker_failures", &self.breaker_failures)
            .field("breaker_cooldown", &self.breaker_cooldown)
            .finish()
    }
}

fn yes() -> bool {
    true
}

impl CacheConfig {
    /// `[cache]` and `[cache.object_store]`
    pub fn validate(&self) -> Result<CacheSettings, CacheConfigError> {
        let c = self;
        if c.dir.as_os_str().is_empty() {
            return Err(invalid("cache.dir", "must not be empty"));
        }
        if c.metadata_entries == 0 {
            return Err(invalid("cache.metadata_entries", "must be at least 1"));
        }
        if c.max_size.is_some_and(|s| s.as_u64() < 1 << 20) {
            return Err(invalid("cache.max_size", "must be at least 1 MiB"));
        }
        if c.max_fill_memory.as_u64() < 256 << 10 {
            return Err(invalid("cache.max_fill_memory", "must be at least 256 KiB"));
        }
        if c.index_ttl.is_zero() {
            return Err(invalid("cache.index_ttl", "must be longer than zero"));
        }

        let storage = match self.backend.as_str() {
            "disk" => {
                if self.object_store.is_some() {
                    return Err(invalid(
                        "cache.object_store",
                        "is only used with cache.backend = \"s3\", \"gcs\", \"azure\" or \"directory\"",
                    ));
                }
                StorageSettings::Disk(c.dir.clone())
            }
            name @ ("s3" | "gcs" | "azure" | "directory") => {
                let provider = match name {
                    "s3" => crate::storage::Provider::S3,
                    "gcs" => crate::storage::Provider::Gcs,
                    "azure" => crate::storage::Provider::Azure,
                    _ => crate::storage::Provider::Directory,
                };
                let os = self.object_store.as_ref().ok_or_else(|| {
                    invalid(
                        "cache.object_store",
                        format!("cache.backend = {name:?} needs a [cache.object_store] table with a bucket"),
                    )
                })?;
                StorageSettings::Object(os.validate(provider)?)
            }
            other => {
                return Err(invalid(
                    "cache.backend",
                    format!("{other:?} is not one of disk, s3, gcs, azure, directory"),
                ));
            }
        };
        if c.redirect_downloads
            && !matches!(&storage, StorageSettings::Object(os) if os.provider != crate::storage::Provider::Directory)
        {
            return Err(invalid(
                "cache.redirect_downloads",
                "needs a bucket that signs URLs (cache.backend = \"s3\", \"gcs\" or \"azure\")",
            ));
        }
        let local_max_size = c.local_max_size.as_u64();
        if local_max_size > 0 {
            if matches!(storage, StorageSettings::Disk(_)) {
                return Err(invalid(
                    "cache.local_max_size",
                    "is a local tier in front of an object store: it needs cache.backend = \"s3\", \"gcs\", \"azure\" or \"directory\"",
                ));
            }
            if local_max_size < 16 << 20 {
                return Err(invalid(
                    "cache.local_max_size",
                    "must be 0 or at least 16 MiB",
                ));
            }
        }
        Ok(CacheSettings {
            local_max_size: (local_max_size > 0).then_some(local_max_size),
            fleet_single_fetch: c.fleet_single_fetch,
            dir: c.dir.clone(),
            storage,
            index_ttl: c.index_ttl,
            not_found_ttl: c.not_found_ttl,
            stale_if_error: c.stale_if_error,
            metadata_entries: c.metadata_entries,
            max_size: c.max_size.map(|s| s.as_u64()),
            reverify_interval: c.reverify_interval,
            max_fill_memory: c.max_fill_memory.as_u64(),
            redirect_downloads: c.redirect_downloads,
        })
    }
}

impl ObjectStoreConfig {
    /// `[cache.object_store]`
    fn validate(
        &self,
        provider: crate::storage::Provider,
    ) -> Result<crate::storage::ObjectStoreSettings, CacheConfigError> {
        let key = |k: &str| format!("cache.object_store.{k}");
        if provider == crate::storage::Provider::Directory {
            return self.validate_directory();
        }
        if self.bucket.is_empty()
            || !self
                .bucket
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
        {
            return Err(invalid(
                key("bucket"),
                format!("{:?} is not a bucket name", self.bucket),
            ));
        }
        let prefix = self.prefix.trim_matches('/').to_string();
        if prefix
            .split('/')
            .any(|s| (s.is_empty() && !prefix.is_empty()) || s == "." || s == "..")
        {
            return Err(invalid(
                key("prefix"),
                format!("{:?} must be /-separated names", self.prefix),
            ));
        }
        if let Some(endpoint) = &self.endpoint {
            let url = url::Url::parse(endpoint)
                .map_err(|e| invalid(key("endpoint"), format!("{endpoint:?}: {e}")))?;
            match url.scheme() {
                "https" => {}
                "http" if self.allow_http => {}
                "http" => {
                    return Err(invalid(
                        key("endpoint"),
                        format!(
                            "{endpoint:?} is plain http: set cache.object_store.allow_http = true to allow it (testing only)"
                        ),
                    ));
                }
                _ => {
                    return Err(invalid(
                        key("endpoint"),
                        format!("{endpoint:?} must be an https URL"),
                    ));
                }
            }
        }
        if let Some(path) = &self.ca_file {
            if let Err(e) = std::fs::metadata(path) {
                return Err(invalid(
                    key("ca_file"),
                    format!("cannot read {}: {e}", path.display()),
                ));
            }
        }
        let credentials = match (&self.access_key_id, &self.secret_access_key_file) {
            (None, None) => None,
            (Some(id), Some(path)) => {
                if provider != crate::storage::Provider::S3 {
                    return Err(invalid(
                        key("access_key_id"),
                        "static keys are for s3; gcs and azure take credentials from their environment",
                    ));
                }
                let secret = std::fs::read_to_string(path).map_err(|e| {
                    invalid(
                        key("secret_access_key_file"),
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?;
                let secret = secret.trim().to_string();
                if secret.is_empty() {
                    return Err(invalid(
                        key("secret_access_key_file"),
                        format!("{} is empty", path.display()),
                    ));
                }
                Some(crate::storage::StaticCredentials {
                    access_key_id: id.clone(),
                    secret_access_key: secret,
                })
            }
            (Some(_), None) => {
                return Err(invalid(
                    key("secret_access_key_file"),
                    "must be set when cache.object_store.access_key_id is set",
                ));
            }
            (None, Some(_)) => {
                return Err(invalid(
                    key("access_key_id"),
                    "must be set when cache.object_store.secret_access_key_file is set",
                ));
            }
        };
        Ok(crate::storage::ObjectStoreSettings {
            deadlines: self.deadlines()?,
            credentials,
            provider,
            bucket: self.bucket.clone(),
            prefix,
            region: self.region.clone(),
            endpoint: self.endpoint.clone(),
            path_style: self.path_style,
            allow_http: self.allow_http,
            ca_file: self.ca_file.clone(),
        })
    }
}

impl ObjectStoreConfig {
    /// The deadlines and breaker of calls to the store: every timeout longer than zero, and
    /// each call's whole deadline (`request_timeout`) at least as long as a connection may
    /// take to open.
    fn deadlines(&self) -> Result<crate::storage::StoreDeadlines, CacheConfigError> {
        let key = |k: &str| format!("cache.object_store.{k}");
        for (name, value) in [
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", self.request_timeout),
            ("idle_timeout", self.idle_timeout),
            ("breaker_cooldown", self.breaker_cooldown),
        ] {
            if value.is_zero() {
                return Err(invalid(key(name), "must be longer than zero"));
            }
        }
        if self.request_timeout < self.connect_timeout {
            return Err(invalid(
                key("request_timeout"),
                "must be at least cache.object_store.connect_timeout: it bounds the whole call",
            ));
        }
        if self.retries > 10 {
            return Err(invalid(key("retries"), "must be at most 10"));
        }
        Ok(crate::storage::StoreDeadlines {
            connect: self.connect_timeout,
            request: self.request_timeout,
            idle: self.idle_timeout,
            retries: self.retries,
            breaker_failures: self.breaker_failures,
            breaker_cooldown: self.breaker_cooldown,
        })
    }

    /// `[cache.object_store]` with `cache.backend = "directory"`: `bucket` is the shared
    /// directory, and the keys of network stores are refused rather than ignored.
    fn validate_directory(&self) -> Result<crate::storage::ObjectStoreSettings, CacheConfigError> {
        let key = |k: &str| format!("cache.object_store.{k}");
        let path = std::path::Path::new(&self.bucket);
        if !path.is_absolute() {
            return Err(invalid(
                key("bucket"),
                format!(
                    "{:?}: with cache.backend = \"directory\" this is the shared directory's absolute path",
                    self.bucket
                ),
            ));
        }
        if let Err(e) = std::fs::read_dir(path) {
            return Err(invalid(
                key("bucket"),
                format!("cannot read the directory {}: {e}", path.display()),
            ));
        }
        let network_keys = [
            ("region", self.region.is_some()),
            ("endpoint", self.endpoint.is_some()),
            ("ca_file", self.ca_file.is_some()),
            ("access_key_id", self.access_key_id.is_some()),
            (
                "secret_access_key_file",
                self.secret_access_key_file.is_some(),
            ),
            ("allow_http", self.allow_http),
        ];
        if let Some((name, _)) = network_keys.iter().find(|(_, set)| *set) {
            return Err(invalid(
                key(name),
                "is for network stores; cache.backend = \"directory\" takes only bucket and prefix",
            ));
        }
        let prefix = self.prefix.trim_matches('/').to_string();
        if prefix.split('/').any(|s| s == "." || s == "..") {
            return Err(invalid(
                key("prefix"),
                format!("{:?} must be /-separated names", self.prefix),
            ));
        }
        let mut settings = crate::storage::ObjectStoreSettings::directory(
            std::path::Path::new(self.bucket.trim_end_matches('/')),
            &prefix,
        );
        settings.deadlines = self.deadlines()?;
        Ok(settings)
    }
}

/// `[cache]`, validated.
#[derive(Debug, Clone)]
pub struct CacheSettings {
    /// Local directory: staging (`tmp/`), generated TLS files, and with the disk backend the
    /// store itself.
    pub dir: PathBuf,
    pub storage: StorageSettings,
    pub index_ttl: Duration,
    pub not_found_ttl: Duration,
    pub stale_if_error: Duration,
    pub metadata_entries: u64,
    /// Bytes of archives to keep at most (least recently used evicted first); `None`: no limit.
    pub max_size: Option<u64>,
    /// How often the server re-hashes every cached archive (zero: never).
    pub reverify_interval: Duration,
    /// Most bytes one download may hold in memory when the cache cannot be written.
    pub max_fill_memory: u64,
    /// Answer cached archives with a redirect to a pre-signed URL of the object store.
    pub redirect_downloads: bool,
    /// Bytes of the local disk tier in front of an object store (`<dir>/local`); `None`: none.
    pub local_max_size: Option<u64>,
    /// Fleet-wide single fetch through leases in the object store (`cache.fleet_single_fetch`).
    pub fleet_single_fetch: bool,
}
