//! The wall clock, in the Unix seconds records carry, and a clock tests can set.
//!
//! Code that decides by age (freshness of version lists) takes a [`Clock`], so its tests move
//! time instead of sleeping through it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Seconds since the Unix epoch.
pub fn now_secs() -> u64 {
    unix_secs(std::time::SystemTime::now())
}

/// `t` in seconds since the Unix epoch (0 for a time before it).
pub fn unix_secs(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The UTC day (`YYYY-MM-DD`) of a time.
pub fn day_of(t: std::time::SystemTime) -> String {
    let secs = unix_secs(t) / 86_400 * 86_400;
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .to_string()[..10]
        .to_string()
}

/// Where the current time comes from.
pub trait Clock: Send + Sync + 'static {
    /// Seconds since the Unix epoch.
    fn now_secs(&self) -> u64;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_secs(&self) -> u64 {
        now_secs()
    }
}

/// The system clock, shared.
pub fn system() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

/// A clock that moves only when told to (for tests).
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock reading `secs`.
    pub fn at(secs: u64) -> Arc<ManualClock> {
        Arc::new(ManualClock(AtomicU64::new(secs)))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: std::time::Duration) {
        self.0.fetch_add(by.as_secs(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_secs(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}
