//! A circuit breaker per dependency: per origin host (`upstream`) and for the object store
//! (`storage`).
//!
//! After `threshold` consecutive failures (transport errors, timeouts, or 5xx; a 429 is an
//! answer, not a failure, see `Upstream::send`) a host's circuit opens: calls fail at once, without touching
//! the network, for `cooldown`. Then one probe is let through (half-open); its success closes
//! the circuit, its failure opens it again. While a circuit is open, the mirror keeps serving
//! what it has (stale version lists, cached documents, archives).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
enum State {
    Closed {
        failures: u32,
    },
    Open {
        until: Instant,
    },
    /// One probe is in flight, since then. A probe that never reports (its caller was
    /// cancelled: a client's request budget ran out) is given up after `cooldown`, and another
    /// is let through.
    HalfOpen {
        since: Instant,
    },
}

/// A host's circuit as the status page shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Circuit {
    /// Calls go through; `failures` in a row so far.
    Closed { failures: u32 },
    /// Calls fail at once for `retry_in` more.
    Open { retry_in: Duration },
    /// One probe is in flight.
    HalfOpen,
}

impl Circuit {
    pub fn as_str(self) -> &'static str {
        match self {
            Circuit::Closed { .. } => "closed",
            Circuit::Open { .. } => "open",
            Circuit::HalfOpen => "half-open",
        }
    }
}

/// Per-host failure tracking.
pub struct Breaker {
    threshold: u32,
    cooldown: Duration,
    hosts: Mutex<HashMap<String, State>>,
}

/// Why a call was not let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejected {
    /// When the next probe will be allowed (zero while a probe is in flight).
    pub retry_in: Duration,
}

impl Breaker {
    /// `threshold == 0` disables the breaker.
    pub fn new(threshold: u32, cooldown: Duration) -> Breaker {
        Breaker {
            threshold,
            cooldown,
            hosts: Mutex::new(HashMap::new()),
        }
    }

    /// Whether a call to `host` may go ahead now.
    pub fn allow(&self, host: &str) -> Result<(), Rejected> {
        if self.threshold == 0 {
            return Ok(());
        }
        let mut hosts = self.hosts.lock().expect("breaker lock");
        let state = hosts
            .entry(host.to_string())
            .or_insert(State::Closed { failures: 0 });
        match *state {
            State::Closed { .. } => Ok(()),
            State::Open { until } => {
                let now = Instant::now();
                if now >= until {
                    *state = State::HalfOpen { since: now };
                    Ok(())
                } else {
                    Err(Rejected {
                        retry_in: until - now,
                    })
                }
            }
            State::HalfOpen { since } => {
                let now = Instant::now();
                if now.saturating_duration_since(since) >= self.cooldown {
                    *state = State::HalfOpen { since: now };
                    Ok(())
                } else {
                    Err(Rejected {
                        retry_in: Duration::ZERO,
                    })
                }
            }
        }
    }

    /// The state of `host`'s circuit.
    pub fn state_of(&self, host: &str) -> Circuit {
        match self.hosts.lock().expect("breaker lock").get(host) {
            None => Circuit::Closed { failures: 0 },
            Some(State::Closed { failures }) => Circuit::Closed {
                failures: *failures,
            },
            Some(State::Open { until }) => Circuit::Open {
                retry_in: until.saturating_duration_since(Instant::now()),
            },
            Some(State::HalfOpen { .. }) => Circuit::HalfOpen,
        }
    }

    /// Records a healthy answer (any status below 500). Returns true if this closed the circuit.
    pub fn success(&self, host: &str) -> bool {
        let mut hosts = self.hosts.lock().expect("breaker lock");
        // In place when the host is known: a success is every call's path, so no allocation.
        let Some(state) = hosts.get_mut(host) else {
            hosts.insert(host.to_string(), State::Closed { failures: 0 });
            return false;
        };
        let was_open = matches!(state, State::Open { .. } | State::HalfOpen { .. });
        *state = State::Closed { failures: 0 };
        was_open
    }

    /// Records a failure. Returns true if this opened the circuit.
    pub fn failure(&self, host: &str) -> bool {
        if self.threshold == 0 {
            return false;
        }
        let mut hosts = self.hosts.lock().expect("breaker lock");
        let state = hosts
            .entry(host.to_string())
            .or_insert(State::Closed { failures: 0 });
        let open = State::Open {
            until: Instant::now() + self.cooldown,
        };
        match *state {
            State::Closed { failures } if failures + 1 >= self.threshold => {
                *state = open;
                true
            }
            State::Closed { failures } => {
                *state = State::Closed {
                    failures: failures + 1,
                };
                false
            }
            State::HalfOpen { .. } => {
                *state = open;
                true
            }
            State::Open { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_threshold_then_probes_once() {
        let b = Breaker::new(3, Duration::from_millis(50));
        for _ in 0..2 {
            assert!(b.allow("h").is_ok());
            assert!(!b.failure("h"));
        }
        assert!(b.failure("h"), "third failure opens");
        assert!(b.allow("h").is_err());
        assert!(b.allow("other").is_ok(), "hosts are independent");
        std::thread::sleep(Duration::from_millis(60));
        assert!(b.allow("h").is_ok(), "the probe");
        assert_eq!(
            b.allow("h"),
            Err(Rejected {
                retry_in: Duration::ZERO
            }),
            "only one probe at a time"
        );
        assert!(b.failure("h"), "failed probe reopens");
        assert!(b.allow("h").is_err());
        std::thread::sleep(Duration::from_millis(60));
        assert!(b.allow("h").is_ok());
        assert!(b.success("h"), "successful probe closes");
        assert!(b.allow("h").is_ok());
    }

    #[test]
    fn a_probe_that_never_reports_is_given_up_after_the_cooldown() {
        let b = Breaker::new(1, Duration::from_millis(50));
        assert!(b.failure("h"));
        std::thread::sleep(Duration::from_millis(60));
        assert!(
            b.allow("h").is_ok(),
            "the probe, whose caller is then cancelled"
        );
        assert!(b.allow("h").is_err(), "while it may still report");
        std::thread::sleep(Duration::from_millis(60));
        assert!(
            b.allow("h").is_ok(),
            "another probe: the circuit is not stuck"
        );
    }

    #[test]
    fn success_resets_the_count() {
        let b = Breaker::new(2, Duration::from_secs(60));
        b.failure("h");
        b.success("h");
        assert!(!b.failure("h"));
        assert!(b.allow("h").is_ok());
    }

    #[test]
    fn zero_threshold_disables() {
        let b = Breaker::new(0, Duration::from_secs(60));
        for _ in 0..10 {
            b.failure("h");
        }
        assert!(b.allow("h").is_ok());
    }
}
