//! Prometheus metrics, held in an explicit registry.
//!
//! One [`Metrics`] value is created per server and passed down; there are no global statics, so
//! tests can run several servers in one process and read each one's figures.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

/// Every `reason` of `provender_verification_failures_total`.
pub const VERIFICATION_REASONS: [&str; 18] = [
    "archive_checksum",
    "shasums_mismatch",
    "shasums_missing",
    "unusable_zip",
    "signature_invalid",
    "signature_unknown_key",
    "signature_malformed",
    "signature_missing_keys",
    "signing_key_invalid",
    "trust_signature_invalid",
    "signature_not_hashicorp",
    "signature_not_opentofu",
    "package_filename_mismatch",
    "cached_archive_mismatch",
    "module_checksum",
    "unusable_module_package",
    "cached_module_mismatch",
    "reported_h1_mismatch",
];

/// Every `reason` of `provender_connections_closed_total`: why the server closed a connection
/// on its own (see `server::conn`).
pub const CONNECTION_CLOSE_REASONS: [&str; 5] = [
    "handshake_timeout",
    "header_timeout",
    "idle",
    "keep_alive_timeout",
    "limit",
];

/// Every metric the mirror exports.
pub struct Metrics {
    registry: Registry,
    pub http_requests: IntCounterVec,
    pub http_duration: HistogramVec,
    pub cache_lookups: IntCounterVec,
    pub upstream_requests: IntCounterVec,
    pub upstream_duration: HistogramVec,
    pub upstream_circuit_open: IntGaugeVec,
    pub archive_bytes_served: IntCounter,
    pub upstream_bytes: IntCounter,
    pub cache_archives: IntGauge,
    pub cache_disk_bytes: IntGauge,
    pub verification_failures: IntCounterVec,
    pub policy_refusals: IntCounterVec,
    pub archive_responses: IntCounterVec,
    pub cache_write_errors: IntCounter,
    pub cache_evictions: IntCounter,
    pub cache_max_size: IntGauge,
    pub fills_in_flight: IntGauge,
    pub hash_job_queue: IntGauge,
    pub hash_job_archives: IntCounterVec,
    pub hash_job_bytes: IntCounter,
    pub hash_job_dropped: IntCounter,
    pub hash_duration: Histogram,
    pub tls_not_after: IntGauge,
    pub tls_reloads: IntCounterVec,
    pub connections_open: IntGauge,
    pub connections_max: IntGauge,
    pub connections_closed: IntCounterVec,
}

impl Metrics {
    /// Creates and registers all metrics.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let latency = vec![
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            30.0, 60.0,
        ];
        let m = Metrics {
            http_requests: IntCounterVec::new(
                Opts::new("provender_http_requests_total", "HTTP requests answered, by route and status code."),
                &["route", "status"],
            )
            .unwrap(),
            http_duration: HistogramVec::new(
                HistogramOpts::new("provender_http_request_duration_seconds", "Time to produce a response's head, by route.")
                    .buckets(latency.clone()),
                &["route"],
            )
            .unwrap(),
            cache_lookups: IntCounterVec::new(
                Opts::new(
                    "provender_cache_lookups_total",
                    "Cache lookups by kind (index, version, archive, module_versions, module_archive, oci_manifest) and result (hit, miss, joined, stale, negative_hit).",
                ),
                &["kind", "result"],
            )
            .unwrap(),
            upstream_requests: IntCounterVec::new(
                Opts::new(
                    "provender_upstream_requests_total",
                    "Requests to origin registries by registry host, operation and outcome.",
                ),
                &["host", "operation", "outcome"],
            )
            .unwrap(),
            upstream_duration: HistogramVec::new(
                HistogramOpts::new("provender_upstream_request_duration_seconds", "Duration of requests to origin registries.")
                    .buckets(latency),
                &["host", "operation"],
            )
            .unwrap(),
            upstream_circuit_open: IntGaugeVec::new(
                Opts::new("provender_upstream_circuit_open", "1 while an origin host's circuit breaker refuses calls."),
                &["host"],
            )
            .unwrap(),
            archive_bytes_served: IntCounter::new("provender_archive_bytes_served_total", "Archive bytes sent to clients.").unwrap(),
            upstream_bytes: IntCounter::new("provender_upstream_bytes_total", "Bytes received from origin registries.").unwrap(),
            cache_archives: IntGauge::new("provender_cache_archives", "Archives in the cache.").unwrap(),
            cache_disk_bytes: IntGauge::new("provender_cache_disk_bytes", "Bytes of archives in the cache.").unwrap(),
            verification_failures: IntCounterVec::new(
                Opts::new("provender_verification_failures_total", "Downloads refused because they failed verification, by reason."),
                &["reason"],
            )
            .unwrap(),
            policy_refusals: IntCounterVec::new(
                Opts::new(
                    "provender_policy_refusals_total",
                    "Requests and imports refused by the operator's policy, by rule (min_trust).",
                ),
                &["rule"],
            )
            .unwrap(),
            archive_responses: IntCounterVec::new(
                Opts::new(
                    "provender_archive_responses_total",
                    "Archive responses started, by the trust level of the archive's origin signature \
                     (official, partner, community, unsigned, unverified).",
                ),
                &["trust"],
            )
            .unwrap(),
            cache_write_errors: IntCounter::new(
                "provender_cache_write_errors_total",
                "Archives served but not cached because writing to the cache failed (e.g. a full disk).",
            )
            .unwrap(),
            cache_evictions: IntCounter::new(
                "provender_cache_evictions_total",
                "Archives removed to keep the cache within cache.max_size.",
            )
            .unwrap(),
            cache_max_size: IntGauge::new(
                "provender_cache_max_size_bytes",
                "cache.max_size in bytes (0: no limit).",
            )
            .unwrap(),
            fills_in_flight: IntGauge::new(
                "provender_fills_in_flight",
                "Archive downloads from origins in progress.",
            )
            .unwrap(),
            hash_job_queue: IntGauge::new(
                "provender_hash_job_queue",
                "Versions waiting for the background job to learn every platform's h1 (complete_hashes).",
            )
            .unwrap(),
            hash_job_archives: IntCounterVec::new(
                Opts::new(
                    "provender_hash_job_archives_total",
                    "Archives the background hash job dealt with, by result (hashed: it fetched and hashed \
                     the archive; present: the cache had it, or a client's download got it; failed).",
                ),
                &["result"],
            )
            .unwrap(),
            hash_job_bytes: IntCounter::new(
                "provender_hash_job_bytes_total",
                "Archive bytes the background hash job downloaded.",
            )
            .unwrap(),
            hash_job_dropped: IntCounter::new(
                "provender_hash_job_dropped_total",
                "Versions the background hash job did not take because its queue was full (complete_hashes.queue).",
            )
            .unwrap(),
            hash_duration: Histogram::with_opts(
                HistogramOpts::new("provender_h1_hash_duration_seconds", "Time to compute an archive's h1 hash.")
                    .buckets(vec![0.001, 0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
            )
            .unwrap(),
            tls_not_after: IntGauge::new(
                "provender_tls_certificate_expiry_timestamp_seconds",
                "When the TLS certificate in use expires (its notAfter), as a Unix timestamp.",
            )
            .unwrap(),
            tls_reloads: IntCounterVec::new(
                Opts::new(
                    "provender_tls_reloads_total",
                    "Reloads of the TLS certificate files, by result (ok, error).",
                ),
                &["result"],
            )
            .unwrap(),
            connections_open: IntGauge::new(
                "provender_connections_open",
                "Client connections open, from accept (TLS handshake included) to close.",
            )
            .unwrap(),
            connections_max: IntGauge::new(
                "provender_connections_max",
                "server.max_connections: open connections at most; more are closed on accept.",
            )
            .unwrap(),
            connections_closed: IntCounterVec::new(
                Opts::new(
                    "provender_connections_closed_total",
                    "Client connections the server closed on its own, by reason (handshake_timeout, \
                     header_timeout, idle, keep_alive_timeout, limit).",
                ),
                &["reason"],
            )
            .unwrap(),
            registry,
        };
        let r = &m.registry;
        r.register(Box::new(m.http_requests.clone())).unwrap();
        r.register(Box::new(m.http_duration.clone())).unwrap();
        r.register(Box::new(m.cache_lookups.clone())).unwrap();
        r.register(Box::new(m.upstream_requests.clone())).unwrap();
        r.register(Box::new(m.upstream_duration.clone())).unwrap();
        r.register(Box::new(m.upstream_circuit_open.clone()))
            .unwrap();
        r.register(Box::new(m.archive_bytes_served.clone()))
            .unwrap();
        r.register(Box::new(m.upstream_bytes.clone())).unwrap();
        r.register(Box::new(m.cache_archives.clone())).unwrap();
        r.register(Box::new(m.cache_disk_bytes.clone())).unwrap();
        r.register(Box::new(m.verification_failures.clone()))
            .unwrap();
        r.register(Box::new(m.policy_refusals.clone())).unwrap();
        r.register(Box::new(m.archive_responses.clone())).unwrap();
        r.register(Box::new(m.hash_duration.clone())).unwrap();
        r.register(Box::new(m.cache_write_errors.clone())).unwrap();
        r.register(Box::new(m.cache_evictions.clone())).unwrap();
        r.register(Box::new(m.tls_not_after.clone())).unwrap();
        r.register(Box::new(m.tls_reloads.clone())).unwrap();
        r.register(Box::new(m.cache_max_size.clone())).unwrap();
        r.register(Box::new(m.fills_in_flight.clone())).unwrap();
        r.register(Box::new(m.hash_job_queue.clone())).unwrap();
        r.register(Box::new(m.hash_job_archives.clone())).unwrap();
        r.register(Box::new(m.hash_job_bytes.clone())).unwrap();
        r.register(Box::new(m.hash_job_dropped.clone())).unwrap();
        r.register(Box::new(m.connections_open.clone())).unwrap();
        r.register(Box::new(m.connections_max.clone())).unwrap();
        r.register(Box::new(m.connections_closed.clone())).unwrap();
        m.start_at_zero();
        m
    }

    /// Creates the series whose label values are known in advance, at 0, so that dashboards
    /// and alerts see a 0 rather than no series until something happens.
    fn start_at_zero(&self) {
        for (kind, results) in [
            ("index", &["hit", "miss", "stale", "negative_hit"][..]),
            ("version", &["hit", "miss"][..]),
            ("archive", &["hit", "miss", "joined"][..]),
            (
                "module_versions",
                &["hit", "miss", "stale", "negative_hit"][..],
            ),
            ("module_archive", &["hit", "miss", "joined"][..]),
            ("oci_manifest", &["hit", "miss"][..]),
        ] {
            for result in results {
                self.cache_lookups.with_label_values(&[kind, result]);
            }
        }
        for reason in VERIFICATION_REASONS {
            self.verification_failures.with_label_values(&[reason]);
        }
        for trust in crate::records::SignatureKind::ALL {
            self.archive_responses.with_label_values(&[trust.as_str()]);
        }
        self.policy_refusals.with_label_values(&["min_trust"]);
        for result in ["ok", "error"] {
            self.tls_reloads.with_label_values(&[result]);
        }
        for result in ["hashed", "present", "failed"] {
            self.hash_job_archives.with_label_values(&[result]);
        }
        for reason in CONNECTION_CLOSE_REASONS {
            self.connections_closed.with_label_values(&[reason]);
        }
    }

    /// Records one cache lookup.
    pub fn lookup(&self, kind: &str, result: &str) {
        self.cache_lookups.with_label_values(&[kind, result]).inc();
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        prometheus::TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding never fails");
        String::from_utf8(out).expect("prometheus text is UTF-8")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}
