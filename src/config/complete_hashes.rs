//! `[complete_hashes]`: the background job that learns every platform's `h1:`.

use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, invalid};

/// `[complete_hashes]`: the background job that learns every platform's `h1:` of a version
/// once any of it is requested.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CompleteHashesConfig {
    /// Run the job: once any part of a version is requested, fetch, verify and hash the other
    /// platforms' archives (only those `upstream.platforms` allows), so `<version>.json` lists an
    /// `h1:` for each. Never runs with `upstream.offline`, nor in the operator commands.
    pub enabled: bool,
    /// Archives fetched at once (1 to 64).
    pub concurrency: usize,
    /// Bytes per second the job may download, all its archives together (0: no limit; else at
    /// least 64 KiB). A client asking for an archive the job is fetching lifts the limit for that
    /// archive.
    #[schemars(with = "String", extend("format" = "size"))]
    pub max_bandwidth: bytesize::ByteSize,
    /// Versions waiting at most (1 to 1000000); more are dropped (and counted in
    /// `provender_hash_job_dropped_total`) until there is room.
    pub queue: usize,
    /// Keep the archives the job fetches (else it learns their `h1:` and drops them).
    pub keep_archives: bool,
    /// How long an archive the job fetched (and is not keeping) waits in the staging area for a
    /// client to ask for it before it is dropped (`"0s"`: dropped at once; at most 1h).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub hold: Duration,
}

impl Default for CompleteHashesConfig {
    fn default() -> Self {
        CompleteHashesConfig {
            enabled: true,
            concurrency: 2,
            max_bandwidth: bytesize::ByteSize::mib(20),
            queue: 1000,
            keep_archives: false,
            hold: Duration::from_secs(10),
        }
    }
}

/// `[complete_hashes]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompleteHashesSettings {
    pub enabled: bool,
    pub concurrency: usize,
    /// Bytes per second; `None`: no limit.
    pub max_bandwidth: Option<std::num::NonZeroU32>,
    pub queue: usize,
    /// Keep the archives only the job asked for.
    pub keep_archives: bool,
    /// How long an archive only the job asked for waits for a client (`Duration::ZERO`: not
    /// at all).
    pub hold: Duration,
}

impl CompleteHashesConfig {
    pub(super) fn validate(&self) -> Result<CompleteHashesSettings, ConfigError> {
        if !(1..=64).contains(&self.concurrency) {
            return Err(invalid(
                "complete_hashes.concurrency",
                format!("{} is not between 1 and 64", self.concurrency),
            ));
        }
        if !(1..=1_000_000).contains(&self.queue) {
            return Err(invalid(
                "complete_hashes.queue",
                format!("{} is not between 1 and 1000000", self.queue),
            ));
        }
        let bandwidth = self.max_bandwidth.as_u64();
        if bandwidth != 0 && bandwidth < 64 * 1024 {
            return Err(invalid(
                "complete_hashes.max_bandwidth",
                format!(
                    "{} a second is too little to fetch archives (at least 64 KiB, or 0 for no limit)",
                    self.max_bandwidth
                ),
            ));
        }
        let max_bandwidth = match u32::try_from(bandwidth) {
            Ok(b) => std::num::NonZeroU32::new(b),
            Err(_) => None,
        };
        if self.hold > MAX_HOLD {
            return Err(invalid(
                "complete_hashes.hold",
                format!(
                    "{} is longer than {}: an archive no client asked for would sit in the staging area that long",
                    humantime::format_duration(self.hold),
                    humantime::format_duration(MAX_HOLD)
                ),
            ));
        }
        Ok(CompleteHashesSettings {
            enabled: self.enabled,
            concurrency: self.concurrency,
            max_bandwidth,
            queue: self.queue,
            keep_archives: self.keep_archives,
            hold: self.hold,
        })
    }
}

/// The longest `complete_hashes.hold`: clients ask for an archive seconds after its version.
const MAX_HOLD: Duration = Duration::from_secs(3600);
