//! The status view: each origin's health, cache use against `cache.max_size`, the
//! complete-hashes queue, quarantined objects, and what the server runs as (version and a
//! configuration summary with no secrets in it).

use std::time::SystemTime;

use serde::Serialize;

use super::{API_VERSION, Snapshot, secs};
use crate::error::Result;
use crate::mirror::Core;
use crate::storage::Key;
use crate::upstream::Circuit;

/// The most quarantined objects listed by name.
const QUARANTINE_LISTED: usize = 100;

/// `GET -/api/v1/status`.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    pub api_version: u32,
    /// provender's version.
    pub version: &'static str,
    /// When this process started (Unix seconds).
    pub started_at: u64,
    pub origins: Vec<OriginStatus>,
    pub cache: CacheUse,
    pub hash_queue: HashQueue,
    /// How many objects are in quarantine, and the first of their names.
    pub quarantined: usize,
    pub quarantined_objects: Vec<String>,
    pub config: ConfigSummary,
}

/// One origin host as this process has seen it.
#[derive(Debug, Clone, Serialize)]
pub struct OriginStatus {
    pub host: String,
    /// `closed`, `open` or `half-open`.
    pub circuit: &'static str,
    /// Failures in a row while closed.
    pub consecutive_failures: u32,
    /// While open: seconds until the next probe.
    pub retry_in: Option<u64>,
    pub calls: u64,
    pub failures: u64,
    pub last_success: Option<u64>,
    pub last_failure: Option<u64>,
    /// The origin's last error as this mirror saw it (it may quote the origin).
    pub last_error: Option<String>,
    pub last_latency_ms: Option<u64>,
}

/// What the cache holds against its limit.
#[derive(Debug, Clone, Serialize)]
pub struct CacheUse {
    pub provider_archives: usize,
    pub provider_bytes: u64,
    pub module_packages: usize,
    pub module_bytes: u64,
    /// `cache.max_size` (provider archives are evicted past it), if set.
    pub max_size: Option<u64>,
}

/// The complete-hashes job.
#[derive(Debug, Clone, Serialize)]
pub struct HashQueue {
    pub enabled: bool,
    /// Versions waiting for their missing `h1:` hashes.
    pub pending: i64,
    /// Versions not queued because the queue was full.
    pub dropped: u64,
}

/// The configuration in brief; nothing secret (no tokens, keys or store credentials).
#[derive(Debug, Clone, Serialize)]
pub struct ConfigSummary {
    /// Where the cache lives (a directory or a bucket's name).
    pub storage: String,
    pub offline: bool,
    pub authentication: bool,
    pub allowed_hosts: Vec<String>,
    /// `upstream.min_trust`.
    pub min_trust: Option<&'static str>,
    pub require_signature: bool,
    pub redirect_downloads: bool,
    /// `cache.index_ttl` in seconds.
    pub index_ttl_secs: u64,
    pub max_archive_size: u64,
    pub modules_default_registry: String,
}

impl Status {
    pub(super) fn of(core: &Core, snapshot: &Snapshot, started: SystemTime) -> Status {
        let settings = core.settings();
        let archives = snapshot
            .providers
            .iter()
            .flat_map(|p| &p.versions)
            .flat_map(|v| v.cached());
        let (provider_archives, provider_bytes) = archives.fold((0, 0), |(n, bytes), p| {
            (n + 1, bytes + p.size.unwrap_or_default())
        });
        let metrics = core.metrics();
        Status {
            api_version: API_VERSION,
            version: env!("CARGO_PKG_VERSION"),
            started_at: secs(started),
            origins: core
                .origin_health()
                .into_iter()
                .map(|o| {
                    let (consecutive_failures, retry_in) = match o.circuit {
                        Circuit::Closed { failures } => (failures, None),
                        Circuit::Open { retry_in } => (0, Some(retry_in.as_secs())),
                        Circuit::HalfOpen => (0, None),
                    };
                    OriginStatus {
                        circuit: o.circuit.as_str(),
                        consecutive_failures,
                        retry_in,
                        calls: o.recent.calls,
                        failures: o.recent.failures,
                        last_success: o.recent.last_success.map(secs),
                        last_failure: o.recent.last_failure.map(secs),
                        last_error: o.recent.last_error,
                        last_latency_ms: o.recent.last_latency.map(|d| d.as_millis() as u64),
                        host: o.host,
                    }
                })
                .collect(),
            cache: CacheUse {
                provider_archives,
                provider_bytes,
                module_packages: snapshot.modules.len(),
                module_bytes: snapshot.modules.iter().map(|m| m.size).sum(),
                max_size: settings.cache.max_size,
            },
            hash_queue: HashQueue {
                enabled: settings.complete_hashes.enabled && core.online(),
                pending: metrics.hash_job_queue.get(),
                dropped: metrics.hash_job_dropped.get(),
            },
            quarantined: snapshot.quarantined.len(),
            quarantined_objects: snapshot
                .quarantined
                .iter()
                .take(QUARANTINE_LISTED)
                .cloned()
                .collect(),
            config: ConfigSummary {
                storage: core.archives().storage().describe(),
                offline: !core.online(),
                authentication: settings.auth.enabled(),
                allowed_hosts: settings
                    .upstream
                    .allowed_hosts
                    .iter()
                    .map(|h| h.to_string())
                    .collect(),
                min_trust: settings.trust.min_trust.map(|k| k.as_str()),
                require_signature: settings.trust.require_signature,
                redirect_downloads: settings.cache.redirect_downloads,
                index_ttl_secs: settings.cache.index_ttl.as_secs(),
                max_archive_size: settings.upstream.max_archive_size,
                modules_default_registry: settings.modules.default_registry.to_string(),
            },
        }
    }
}

/// The objects under `quarantine/`, by name.
pub(super) async fn quarantined(core: &Core) -> Result<Vec<String>> {
    let listed = core
        .archives()
        .storage()
        .list(&Key::new(["quarantine"]))
        .await?;
    let mut names: Vec<String> = listed
        .into_iter()
        .map(|o| o.key.to_string())
        .filter(|k| !k.contains(".json."))
        .collect();
    names.sort();
    Ok(names)
}
