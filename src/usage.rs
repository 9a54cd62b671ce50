//! Who uses what: which client fetched which provider and module versions, counted per day.
//!
//! A server counts, in memory, the provider archives and module packages it serves by client,
//! version and UTC day, and writes its counts for the day to the cache's store every
//! `usage.flush_interval` and when it stops: one object per day and server process,
//! `usage/<YYYY-MM-DD>/<process>.json`. Replicas sharing a store never write the same object, so
//! their counts add up when read ([`read`]). At most `usage.max_entries` distinct
//! (client, version) pairs per day and process are counted; uses beyond that are dropped and
//! counted in `provender_usage_dropped_total`. Each server deletes days older than
//! `usage.retention`.
//!
//! What is stored: the client's name (as the access log has it), the provider or module address
//! and version, the day, and the count. No network addresses, tokens or times of day.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::storage::{Key, Storage, StorageError};

/// The store prefix of usage records.
const ROOT: &str = "usage";

/// `[usage]` as written in the configuration file.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct UsageConfig {
    /// Count the provider archives and module packages each server serves, by client, version
    /// and day, written to the cache's store (`usage/<day>/`, one object per server process).
    /// Shown by `provender usage`, the usage page and `provender prune --dry-run`.
    pub enabled: bool,
    /// How long daily counts are kept (whole days, 1d to 3660d); servers delete older ones.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub retention: Duration,
    /// How often a server writes its counts to the store (1s to 1h); also when it stops.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub flush_interval: Duration,
    /// The most (client, version) pairs a server counts per day; more uses are dropped and
    /// counted in `provender_usage_dropped_total`.
    pub max_entries: usize,
}

impl Default for UsageConfig {
    fn default() -> Self {
        UsageConfig {
            enabled: true,
            retention: Duration::from_secs(90 * 86_400),
            flush_interval: Duration::from_secs(60),
            max_entries: 100_000,
        }
    }
}

/// `[usage]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageSettings {
    pub enabled: bool,
    /// Whole days.
    pub retention_days: u64,
    pub flush_interval: Duration,
    pub max_entries: usize,
}

/// A bad `[usage]` setting.
#[derive(Debug, thiserror::Error)]
#[error("config key usage.{key}: {message}")]
pub struct UsageConfigError {
    pub key: &'static str,
    pub message: &'static str,
}

impl UsageConfig {
    pub fn validate(&self) -> Result<UsageSettings, UsageConfigError> {
        let retention_days = self.retention.as_secs() / 86_400;
        if !(1..=3660).contains(&retention_days) {
            return Err(UsageConfigError {
                key: "retention",
                message: "must be at least 1d and at most 3660d",
            });
        }
        if self.flush_interval < Duration::from_secs(1)
            || self.flush_interval > Duration::from_secs(3600)
        {
            return Err(UsageConfigError {
                key: "flush_interval",
                message: "must be at least 1s and at most 1h",
            });
        }
        if !(1..=10_000_000).contains(&self.max_entries) {
            return Err(UsageConfigError {
                key: "max_entries",
                message: "must be between 1 and 10000000",
            });
        }
        Ok(UsageSettings {
            enabled: self.enabled,
            retention_days,
            flush_interval: self.flush_interval,
            max_entries: self.max_entries,
        })
    }
}

/// What was used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Provider,
    Module,
    /// A fetch from a repository of the git cache (its version is `-`: a fetch names no one
    /// reference).
    Git,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Provider => "provider",
            Kind::Module => "module",
            Kind::Git => "git",
        }
    }
}

/// One client's use of one version.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Use {
    pub client: String,
    pub kind: Kind,
    /// `hostname/namespace/type`, `hostname/namespace/name/system` for a module, `host/path`
    /// for a git repository.
    pub address: String,
    pub version: String,
}

/// One day's counts of one process, as stored.
#[derive(Debug, Serialize, Deserialize)]
struct DayFile {
    day: String,
    uses: Vec<Counted>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Counted {
    #[serde(flatten)]
    what: Use,
    count: u64,
}

pub use crate::clock::day_of;

/// Counts uses and writes them to the store.
pub struct Recorder {
    storage: Arc<dyn Storage>,
    settings: UsageSettings,
    /// This process's name in the store: random, so that replicas never share an object.
    process: String,
    today: Mutex<Today>,
    /// The current UTC day's number and text, formatted once a day rather than per use.
    day: Mutex<(u64, String)>,
    dropped: prometheus::IntCounter,
}

#[derive(Default)]
struct Today {
    day: String,
    counts: HashMap<Use, u64>,
    /// Counts changed since the last write.
    dirty: bool,
    /// Days that ended since the last write, with their final counts.
    finished: Vec<(String, Vec<Counted>)>,
}

impl Recorder {
    pub fn new(
        storage: Arc<dyn Storage>,
        settings: UsageSettings,
        dropped: prometheus::IntCounter,
    ) -> Recorder {
        let mut id = [0u8; 8];
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut id);
        Recorder {
            storage,
            settings,
            process: hex::encode(id),
            today: Mutex::new(Today::default()),
            day: Mutex::new((u64::MAX, String::new())),
            dropped,
        }
    }

    /// Counts one use now (nothing when `usage.enabled` is off).
    pub fn record(&self, what: Use) {
        let now = SystemTime::now();
        let number = crate::clock::unix_secs(now) / 86_400;
        let day = {
            let mut day = self.day.lock().expect("usage day");
            if day.0 != number {
                *day = (number, day_of(now));
            }
            day.1.clone()
        };
        self.record_on(&day, what);
    }

    fn record_on(&self, day: &str, what: Use) {
        if !self.settings.enabled {
            return;
        }
        let mut today = self.today.lock().expect("usage counts");
        if today.day != day {
            // A new day: the old one is written once more, complete, by the next flush.
            let old_day = std::mem::replace(&mut today.day, day.to_string());
            let old = std::mem::take(&mut today.counts);
            if old_day.is_empty() || !today.dirty {
                today.dirty = false;
            } else {
                today.finished.push((old_day, counted(&old)));
            }
        }
        let full = today.counts.len() >= self.settings.max_entries;
        match today.counts.get_mut(&what) {
            Some(n) => *n += 1,
            None if full => self.dropped.inc(),
            None => {
                today.counts.insert(what, 1);
            }
        }
        today.dirty = true;
    }

    /// Writes the days that ended, and today's counts if they changed since the last write.
    pub async fn flush(&self) -> Result<(), StorageError> {
        let writes = {
            let mut today = self.today.lock().expect("usage counts");
            let mut writes = std::mem::take(&mut today.finished);
            if today.dirty {
                today.dirty = false;
                writes.push((today.day.clone(), counted(&today.counts)));
            }
            writes
        };
        for (day, uses) in writes {
            self.write(day, uses).await?;
        }
        Ok(())
    }

    async fn write(&self, day: String, uses: Vec<Counted>) -> Result<(), StorageError> {
        let key = Key::new([ROOT, &day, &format!("{}.json", self.process)]);
        let body = serde_json::to_vec(&DayFile { day, uses }).expect("usage serialises");
        self.storage.write(&key, Bytes::from(body)).await
    }

    /// Deletes the days older than `usage.retention`; returns how many objects went.
    pub async fn expire(&self, now: SystemTime) -> Result<usize, StorageError> {
        let oldest = day_of(now - Duration::from_secs(self.settings.retention_days * 86_400));
        let mut removed = 0;
        for object in self.storage.list(&Key::new([ROOT])).await? {
            let day = object.key.segments().nth(1).unwrap_or_default().to_string();
            if day < oldest && self.storage.delete(&object.key).await? {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Writes the counts every `usage.flush_interval` and expires old days every hour, until
    /// the runtime stops.
    pub fn spawn(self: &Arc<Self>) {
        if !self.settings.enabled {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(this.settings.flush_interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut last_expiry: Option<std::time::Instant> = None;
            loop {
                tick.tick().await;
                if let Err(e) = this.flush().await {
                    tracing::warn!("cannot write the usage counts: {e}");
                }
                if last_expiry.is_none_or(|t| t.elapsed() >= Duration::from_secs(3600)) {
                    last_expiry = Some(std::time::Instant::now());
                    match this.expire(SystemTime::now()).await {
                        Ok(0) => {}
                        Ok(n) => {
                            tracing::info!(objects = n, "deleted usage counts past usage.retention")
                        }
                        Err(e) => tracing::warn!("cannot delete old usage counts: {e}"),
                    }
                }
            }
        });
    }
}

fn counted(counts: &HashMap<Use, u64>) -> Vec<Counted> {
    let mut uses: Vec<Counted> = counts
        .iter()
        .map(|(what, count)| Counted {
            what: what.clone(),
            count: *count,
        })
        .collect();
    uses.sort_by(|a, b| a.what.cmp(&b.what));
    uses
}

/// A client's use of a version over the days read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    pub client: String,
    pub kind: Kind,
    pub address: String,
    pub version: String,
    /// Uses, every replica's added up.
    pub count: u64,
    /// The first and last day it was used (`YYYY-MM-DD`).
    pub first: String,
    pub last: String,
}

/// The uses recorded since `since` (a day, `YYYY-MM-DD`; all kept days when `None`), every
/// process's counts added up, ordered by kind, address, version and client. Objects that
/// cannot be read are skipped with a warning.
pub async fn read(storage: &dyn Storage, since: Option<&str>) -> Result<Vec<Row>, StorageError> {
    let mut rows: BTreeMap<(Kind, String, String, String), Row> = BTreeMap::new();
    for object in storage.list(&Key::new([ROOT])).await? {
        let day = object.key.segments().nth(1).unwrap_or_default();
        if since.is_some_and(|s| day < s) {
            continue;
        }
        let Some(bytes) = storage.read(&object.key).await? else {
            continue;
        };
        let file: DayFile = match serde_json::from_slice(&bytes) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(key = %object.key, "ignoring unreadable usage counts: {e}");
                continue;
            }
        };
        for Counted { what, count } in file.uses {
            let key = (
                what.kind,
                what.address.clone(),
                what.version.clone(),
                what.client.clone(),
            );
            let row = rows.entry(key).or_insert_with(|| Row {
                client: what.client,
                kind: what.kind,
                address: what.address,
                version: what.version,
                count: 0,
                first: file.day.clone(),
                last: file.day.clone(),
            });
            row.count += count;
            row.first = row.first.clone().min(file.day.clone());
            row.last = row.last.clone().max(file.day.clone());
        }
    }
    Ok(rows.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder(storage: Arc<dyn Storage>, max_entries: usize) -> Recorder {
        let settings = UsageConfig {
            max_entries,
            ..UsageConfig::default()
        }
        .validate()
        .unwrap();
        Recorder::new(
            storage,
            settings,
            prometheus::IntCounter::new("dropped", "dropped").unwrap(),
        )
    }

    fn a_use(client: &str, version: &str) -> Use {
        Use {
            client: client.into(),
            kind: Kind::Provider,
            address: "registry.terraform.io/hashicorp/aws".into(),
            version: version.into(),
        }
    }

    fn disk() -> (tempfile::TempDir, Arc<dyn Storage>) {
        let dir = tempfile::tempdir().unwrap();
        let storage = crate::storage::DiskStorage::new(dir.path().to_path_buf()).unwrap();
        (dir, Arc::new(storage))
    }

    #[test]
    fn days_are_utc_dates() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_201_599);
        assert_eq!(day_of(t), "2025-11-26");
        assert_eq!(day_of(t + Duration::from_secs(1)), "2025-11-27");
    }

    #[tokio::test]
    async fn processes_add_up_and_days_are_kept_apart() {
        let (_dir, storage) = disk();
        let one = recorder(storage.clone(), 100);
        let two = recorder(storage.clone(), 100);
        for _ in 0..3 {
            one.record_on("2026-11-01", a_use("ci", "5.0.0"));
        }
        two.record_on("2026-11-01", a_use("ci", "5.0.0"));
        two.record_on("2026-11-01", a_use("platform", "4.67.0"));
        one.flush().await.unwrap();
        two.flush().await.unwrap();
        // The first day gains a use after its last write; a new day starts.
        one.record_on("2026-11-01", a_use("ci", "5.0.0"));
        one.record_on("2026-11-02", a_use("ci", "5.0.0"));
        one.flush().await.unwrap();

        let rows = read(&*storage, None).await.unwrap();
        let summary: Vec<(&str, &str, u64, &str, &str)> = rows
            .iter()
            .map(|r| {
                (
                    r.client.as_str(),
                    r.version.as_str(),
                    r.count,
                    r.first.as_str(),
                    r.last.as_str(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("platform", "4.67.0", 1, "2026-11-01", "2026-11-01"),
                ("ci", "5.0.0", 6, "2026-11-01", "2026-11-02"),
            ]
        );
        let recent = read(&*storage, Some("2026-11-02")).await.unwrap();
        assert_eq!(recent.len(), 1);
        assert_eq!(recent[0].count, 1);
    }

    #[tokio::test]
    async fn counts_are_bounded_and_old_days_expire() {
        let (_dir, storage) = disk();
        let rec = recorder(storage.clone(), 2);
        rec.record_on("2026-01-01", a_use("a", "1.0.0"));
        rec.record_on("2026-01-01", a_use("b", "1.0.0"));
        rec.record_on("2026-01-01", a_use("c", "1.0.0"));
        rec.record_on("2026-01-01", a_use("a", "1.0.0"));
        assert_eq!(rec.dropped.get(), 1);
        rec.flush().await.unwrap();
        let rows = read(&*storage, None).await.unwrap();
        assert_eq!(rows.iter().map(|r| r.count).sum::<u64>(), 3);

        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600); // 2026-01-01
        assert_eq!(rec.expire(now).await.unwrap(), 0);
        let later = now + Duration::from_secs(91 * 86_400);
        assert_eq!(rec.expire(later).await.unwrap(), 1);
        assert!(read(&*storage, None).await.unwrap().is_empty());
    }
}
