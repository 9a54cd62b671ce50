//! What each origin host has been doing, for the status page: when it last answered, its last
//! error, how long its last call took, and how many calls failed. Kept in memory, per process.
//! Error texts can quote an origin's own words, so they are cut short here and escaped where
//! they are shown.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// The longest error text kept per host.
const MAX_ERROR_CHARS: usize = 500;

/// One host's recent history.
#[derive(Debug, Clone, Default)]
pub struct HostHealth {
    pub calls: u64,
    pub failures: u64,
    pub last_success: Option<SystemTime>,
    pub last_failure: Option<SystemTime>,
    /// The error of the last failed call.
    pub last_error: Option<String>,
    /// How long the last call took, to the end of reading its answer.
    pub last_latency: Option<Duration>,
}

/// Every origin host called since the process started.
#[derive(Default)]
pub struct Health {
    hosts: Mutex<BTreeMap<String, HostHealth>>,
}

impl Health {
    /// Records one call's outcome (`Err` with its error text) and duration.
    pub fn record(&self, host: &str, outcome: Result<(), String>, took: Duration) {
        let mut hosts = self.hosts.lock().expect("health lock");
        let h = hosts.entry(host.to_string()).or_default();
        h.calls += 1;
        h.last_latency = Some(took);
        let now = SystemTime::now();
        match outcome {
            Ok(()) => h.last_success = Some(now),
            Err(error) => {
                h.failures += 1;
                h.last_failure = Some(now);
                h.last_error = Some(shorten(error));
            }
        }
    }

    /// Records that an answer the host gave (and [`Health::record`] counted) turned out to be
    /// unusable: a malformed document, an invalid URL in it.
    pub fn fault(&self, host: &str, error: String) {
        let mut hosts = self.hosts.lock().expect("health lock");
        let h = hosts.entry(host.to_string()).or_default();
        h.failures += 1;
        h.last_failure = Some(SystemTime::now());
        h.last_error = Some(shorten(error));
    }

    /// Every host's history, by host name.
    pub fn snapshot(&self) -> BTreeMap<String, HostHealth> {
        self.hosts.lock().expect("health lock").clone()
    }
}

fn shorten(mut text: String) -> String {
    if let Some((cut, _)) = text.char_indices().nth(MAX_ERROR_CHARS) {
        text.truncate(cut);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_counted_and_long_errors_cut_short() {
        let health = Health::default();
        health.record("a.example", Ok(()), Duration::from_millis(5));
        health.record("a.example", Err("é".repeat(2000)), Duration::from_millis(7));
        let a = &health.snapshot()["a.example"];
        assert_eq!((a.calls, a.failures), (2, 1));
        assert_eq!(a.last_latency, Some(Duration::from_millis(7)));
        assert!(a.last_success.is_some() && a.last_failure.is_some());
        let error = a.last_error.as_deref().unwrap();
        assert_eq!(error.chars().count(), MAX_ERROR_CHARS + 1);
        assert!(error.ends_with('…'));
    }
}
