//! Prometheus metrics, held in an explicit registry.
//!
//! One [`Metrics`] value is created per server and passed down; there are no global statics, so
//! tests can run several servers in one process and read each one's figures.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry,
};

/// An enum of the values one label takes, each with its text (`as_str`) and the whole set
/// (`ALL`, for the series that start at 0).
macro_rules! label_values {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $value:literal,)+ }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every value, in order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The label value, as dashboards and alerts name it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $value,)+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

label_values! {
    /// The `reason` of `provender_verification_failures_total`.
    pub enum VerificationReason {
        /// An archive's SHA-256 is not the one its origin published.
        ArchiveChecksum = "archive_checksum",
        ShasumsMismatch = "shasums_mismatch",
        ShasumsMissing = "shasums_missing",
        /// An archive is not a zip Terraform could hash or unpack.
        UnusableZip = "unusable_zip",
        SignatureInvalid = "signature_invalid",
        SignatureUnknownKey = "signature_unknown_key",
        SignatureMalformed = "signature_malformed",
        SignatureMissingKeys = "signature_missing_keys",
        SigningKeyInvalid = "signing_key_invalid",
        TrustSignatureInvalid = "trust_signature_invalid",
        SignatureNotHashicorp = "signature_not_hashicorp",
        SignatureNotOpentofu = "signature_not_opentofu",
        PackageFilenameMismatch = "package_filename_mismatch",
        /// A cached archive failed re-verification.
        CachedArchiveMismatch = "cached_archive_mismatch",
        ModuleChecksum = "module_checksum",
        UnusableModulePackage = "unusable_module_package",
        CachedModuleMismatch = "cached_module_mismatch",
        /// A cached CLI release zip failed re-verification.
        CachedReleaseMismatch = "cached_release_mismatch",
        /// The origin states another `h1:` than the one computed (the archive is served).
        ReportedH1Mismatch = "reported_h1_mismatch",
    }
}

label_values! {
    /// The `rule` of `provender_policy_refusals_total`.
    pub enum PolicyRule {
        /// `upstream.min_trust`.
        MinTrust = "min_trust",
        /// `publishing.namespaces`: a private namespace admits only what was published here.
        PrivateNamespace = "private_namespace",
    }
}

label_values! {
    /// The `kind` of `provender_cache_lookups_total`: what was looked up.
    pub enum LookupKind {
        Index = "index",
        Version = "version",
        Archive = "archive",
        ModuleVersions = "module_versions",
        ModuleArchive = "module_archive",
        OciManifest = "oci_manifest",
        /// A CLI's list of releases (`[releases]`).
        ReleaseIndex = "release_index",
        /// A CLI's release zip.
        ReleaseZip = "release_zip",
    }
}

label_values! {
    /// The `result` of `provender_cache_lookups_total`.
    pub enum Lookup {
        /// Answered from the cache.
        Hit = "hit",
        /// Fetched from the origin by this request.
        Miss = "miss",
        /// Joined a fetch another request started.
        Joined = "joined",
        /// Answered from the cache past its freshness, while a refresh runs.
        Stale = "stale",
        /// A remembered "no such provider" or module.
        NegativeHit = "negative_hit",
    }
}

impl LookupKind {
    /// The results a lookup of this kind can have (their series start at 0).
    pub fn results(self) -> &'static [Lookup] {
        use Lookup::*;
        match self {
            LookupKind::Index | LookupKind::ModuleVersions | LookupKind::ReleaseIndex => {
                &[Hit, Miss, Stale, NegativeHit]
            }
            LookupKind::Version | LookupKind::OciManifest => &[Hit, Miss],
            LookupKind::Archive | LookupKind::ModuleArchive | LookupKind::ReleaseZip => {
                &[Hit, Miss, Joined]
            }
        }
    }
}

label_values! {
    /// The `result` of `provender_tls_reloads_total`.
    pub enum TlsReload {
        Ok = "ok",
        Error = "error",
    }
}

label_values! {
    /// The `result` of `provender_hash_job_archives_total`.
    pub enum HashJobResult {
        /// The job fetched and hashed the archive.
        Hashed = "hashed",
        /// The cache had it, or a client's download got it.
        Present = "present",
        Failed = "failed",
    }
}

label_values! {
    /// The `role` of `provender_fleet_fills_total`: how a replica on a shared store came to an
    /// archive it missed (see `cache::Leases`).
    pub enum FleetRole {
        /// It held the lease and fetched the archive.
        Leader = "leader",
        /// Another replica fetched it; this one served it from the store.
        Follower = "follower",
        /// The replica holding the lease stopped renewing it; this one took over and fetched.
        TookOver = "took_over",
        /// No lease: the store does not enforce conditional creates, or could not be asked.
        Alone = "alone",
    }
}

label_values! {
    /// The `reason` of `provender_connections_closed_total`: why the server closed a connection
    /// on its own (see `server::conn`).
    pub enum ConnectionClose {
        HandshakeTimeout = "handshake_timeout",
        HeaderTimeout = "header_timeout",
        Idle = "idle",
        KeepAliveTimeout = "keep_alive_timeout",
        /// `server.max_connections` connections were open.
        Limit = "limit",
    }
}

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
    pub policy_decisions: IntCounterVec,
    pub policy_reloads: IntCounterVec,
    pub person_tokens: IntCounterVec,
    pub archive_responses: IntCounterVec,
    pub cache_write_errors: IntCounter,
    pub cache_evictions: IntCounter,
    pub cache_max_size: IntGauge,
    pub fills_in_flight: IntGauge,
    pub hash_job_queue: IntGauge,
    pub hash_job_archives: IntCounterVec,
    pub fleet_fills: IntCounterVec,
    pub hash_job_bytes: IntCounter,
    pub hash_job_dropped: IntCounter,
    pub usage_dropped: IntCounter,
    /// Git cache refreshes by outcome: `ok`, `stale` (the origin failed; the cached copy was
    /// served), `failed` (nothing cached to serve instead).
    pub git_refreshes: IntCounterVec,
    /// Versions published to the private namespaces, by kind.
    pub publications: IntCounterVec,
    pub hash_duration: Histogram,
    pub tls_not_after: IntGauge,
    pub tls_reloads: IntCounterVec,
    pub connections_open: IntGauge,
    pub connections_max: IntGauge,
    pub connections_closed: IntCounterVec,
    client_downloads: IntCounterVec,
    /// The local disk tier in front of an object store (`cache.local_max_size`).
    pub local_tier: TierMetrics,
    /// The clients with a series of their own in `client_downloads` (at most
    /// [`MAX_CLIENT_SERIES`]).
    named_clients: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// The local disk tier's counters and gauge (see `cache::LocalTier`).
#[derive(Clone)]
pub struct TierMetrics {
    /// `hit`, `miss`, `corrupt`.
    pub requests: IntCounterVec,
    pub evictions: IntCounter,
    pub bytes: IntGauge,
}

/// The most clients counted under their own name; the others share the `other` series.
pub const MAX_CLIENT_SERIES: usize = 500;

impl Metrics {
    /// Creates and registers all metrics.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let latency = vec![
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            30.0, 60.0,
        ];
        let m = Metrics {
            client_downloads: IntCounterVec::new(
                Opts::new("provender_client_downloads_total", "Provider archives and module packages served, by client (the first 500 clients by name, the rest as other)."),
                &["client"],
            )
            .unwrap(),
            named_clients: Default::default(),
            local_tier: TierMetrics {
                requests: IntCounterVec::new(
                    Opts::new("provender_local_tier_requests_total", "Reads of archives and module packages through the local disk tier, by result: hit, miss, corrupt (a copy that failed its check as it was served, then deleted)."),
                    &["result"],
                )
                .unwrap(),
                evictions: IntCounter::new("provender_local_tier_evictions_total", "Copies deleted from the local disk tier to stay within cache.local_max_size.").unwrap(),
                bytes: IntGauge::new("provender_local_tier_bytes", "Bytes of the copies in the local disk tier.").unwrap(),
            },
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
                    "Cache lookups by kind (index, version, archive, module_versions, module_archive, oci_manifest, release_index, release_zip) and result (hit, miss, joined, stale, negative_hit).",
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
            policy_decisions: IntCounterVec::new(
                Opts::new(
                    "provender_policy_decisions_total",
                    "Versions the version policy refused, waived or warned about, by rule and action \
                     (deny, hold, cooldown, waive, warn); a version list counts each version it leaves out.",
                ),
                &["rule", "action"],
            )
            .unwrap(),
            policy_reloads: IntCounterVec::new(
                Opts::new(
                    "provender_policy_reloads_total",
                    "Reads of policy.rules_file after it changed or on SIGHUP, by result (ok, error: \
                     the rules in force stay).",
                ),
                &["result"],
            )
            .unwrap(),
            person_tokens: IntCounterVec::new(
                Opts::new(
                    "provender_person_tokens_total",
                    "People's tokens from terraform login, by event: issued, refused (expired, \
                     revoked, unknown or its person no longer signed in), revoked (by its person \
                     on this server).",
                ),
                &["event"],
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
            fleet_fills: IntCounterVec::new(
                Opts::new(
                    "provender_fleet_fills_total",
                    "Archive fills on a shared object store by role (leader: this replica fetched it; follower: \
                     another replica did and this one served it from the store; took_over: the leader's lease went \
                     stale; alone: the store does not enforce conditional creates).",
                ),
                &["role"],
            )
            .unwrap(),
            hash_job_bytes: IntCounter::new(
                "provender_hash_job_bytes_total",
                "Archive bytes the background hash job downloaded.",
            )
            .unwrap(),
            git_refreshes: IntCounterVec::new(
                Opts::new(
                    "provender_git_refreshes_total",
                    "Refreshes of the git cache's repositories from their origins, by outcome: ok, stale (the origin failed and the cached copy was served), failed.",
                ),
                &["outcome"],
            )
            .unwrap(),
            publications: IntCounterVec::new(
                Opts::new(
                    "provender_publications_total",
                    "Versions published to the private namespaces, by kind (provider, module); publishing the same files again is not counted.",
                ),
                &["kind"],
            )
            .unwrap(),
            usage_dropped: IntCounter::new(
                "provender_usage_dropped_total",
                "Uses not counted because this process already counts usage.max_entries (client, version) pairs today.",
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
        r.register(Box::new(m.policy_decisions.clone())).unwrap();
        r.register(Box::new(m.policy_reloads.clone())).unwrap();
        r.register(Box::new(m.person_tokens.clone())).unwrap();
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
        r.register(Box::new(m.fleet_fills.clone())).unwrap();
        r.register(Box::new(m.hash_job_bytes.clone())).unwrap();
        r.register(Box::new(m.hash_job_dropped.clone())).unwrap();
        r.register(Box::new(m.usage_dropped.clone())).unwrap();
        r.register(Box::new(m.git_refreshes.clone())).unwrap();
        r.register(Box::new(m.publications.clone())).unwrap();
        for kind in ["provider", "module"] {
            m.publications.with_label_values(&[kind]);
        }
        r.register(Box::new(m.client_downloads.clone())).unwrap();
        r.register(Box::new(m.local_tier.requests.clone())).unwrap();
        r.register(Box::new(m.local_tier.evictions.clone()))
            .unwrap();
        r.register(Box::new(m.local_tier.bytes.clone())).unwrap();
        for result in ["hit", "miss", "corrupt"] {
            m.local_tier.requests.with_label_values(&[result]);
        }
        r.register(Box::new(m.connections_open.clone())).unwrap();
        r.register(Box::new(m.connections_max.clone())).unwrap();
        r.register(Box::new(m.connections_closed.clone())).unwrap();
        m.start_at_zero();
        m
    }

    /// Creates the series whose label values are known in advance, at 0, so that dashboards
    /// and alerts see a 0 rather than no series until something happens.
    fn start_at_zero(&self) {
        for &kind in LookupKind::ALL {
            for &result in kind.results() {
                self.cache_lookups
                    .with_label_values(&[kind.as_str(), result.as_str()]);
            }
        }
        for reason in VerificationReason::ALL {
            self.verification_failures
                .with_label_values(&[reason.as_str()]);
        }
        for trust in crate::records::SignatureKind::ALL {
            self.archive_responses.with_label_values(&[trust.as_str()]);
        }
        for result in TlsReload::ALL {
            self.policy_reloads.with_label_values(&[result.as_str()]);
        }
        for event in ["issued", "refused", "revoked"] {
            self.person_tokens.with_label_values(&[event]);
        }
        for rule in PolicyRule::ALL {
            self.policy_refusals.with_label_values(&[rule.as_str()]);
        }
        for result in TlsReload::ALL {
            self.tls_reloads.with_label_values(&[result.as_str()]);
        }
        for result in HashJobResult::ALL {
            self.hash_job_archives.with_label_values(&[result.as_str()]);
        }
        for role in FleetRole::ALL {
            self.fleet_fills.with_label_values(&[role.as_str()]);
        }
        for reason in ConnectionClose::ALL {
            self.connections_closed
                .with_label_values(&[reason.as_str()]);
        }
    }

    /// Records one cache lookup.
    pub fn lookup(&self, kind: LookupKind, result: Lookup) {
        self.cache_lookups
            .with_label_values(&[kind.as_str(), result.as_str()])
            .inc();
    }

    /// Counts one version published.
    pub fn publication(&self, kind: crate::records::publish::PublishedKind) {
        self.publications.with_label_values(&[kind.as_str()]).inc();
    }

    /// Counts one verification failure.
    pub fn verification_failed(&self, reason: VerificationReason) {
        self.verification_failures
            .with_label_values(&[reason.as_str()])
            .inc();
    }

    /// Counts one archive or module package served to `client`.
    pub fn client_download(&self, client: &str) {
        let label = {
            let mut named = self.named_clients.lock().expect("client names");
            if named.contains(client) || named.len() < MAX_CLIENT_SERIES {
                named.insert(client.to_string());
                client
            } else {
                "other"
            }
        };
        self.client_downloads.with_label_values(&[label]).inc();
    }

    /// Counts one refusal by the operator's policy.
    pub fn policy_refused(&self, rule: PolicyRule) {
        self.policy_refusals
            .with_label_values(&[rule.as_str()])
            .inc();
    }

    /// Counts one connection the server closed on its own.
    pub fn connection_closed(&self, reason: ConnectionClose) {
        self.connections_closed
            .with_label_values(&[reason.as_str()])
            .inc();
    }

    /// Counts one reload of the TLS certificate files.
    pub fn tls_reloaded(&self, result: TlsReload) {
        self.tls_reloads.with_label_values(&[result.as_str()]).inc();
    }

    /// Counts one archive the background hash job dealt with.
    pub fn hash_job_archive(&self, result: HashJobResult) {
        self.hash_job_archives
            .with_label_values(&[result.as_str()])
            .inc();
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
