//! Configuration: the TOML file, its built-in defaults, and validation.
//!
//! [`Config`] mirrors the file key by key (see `config.toml.example`). [`Config::validate`] turns
//! it into [`Settings`], the typed form the rest of the program uses, and refuses bad values with
//! a message that names the offending key. Validation touches no network and binds nothing, so a
//! bad file fails before the server starts.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use url::Url;

use crate::address::{Hostname, Platform};
use crate::storage::StorageSettings;
pub use crate::upstream::{HostSettings, ProxyUrl, UpstreamSettings};

/// The configuration file as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub cache: CacheConfig,
    pub upstream: UpstreamConfig,
    pub auth: crate::auth::AuthConfig,
    pub bundles: BundlesConfig,
    pub configurations: ConfigurationsConfig,
    pub modules: ModulesConfig,
    pub complete_hashes: CompleteHashesConfig,
    pub usage: crate::usage::UsageConfig,
    pub releases: ReleasesConfig,
    pub git: GitConfig,
    pub publishing: PublishingConfig,
    /// Which versions are admitted (`[policy]`).
    pub policy: crate::policy::PolicyConfig,
}

/// `[publishing]`: the organisation's own providers and modules, published to this registry
/// under its own hostname (private namespaces) instead of fetched from an origin.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PublishingConfig {
    /// The hostname sources name published providers and modules with
    /// (`mirror.example.com/acme/foo`); unset: the host (and port) of `server.public_url`.
    pub hostname: Option<String>,
    /// The registry's provider signing key: an armored OpenPGP secret key without a
    /// passphrase (`provender keygen --provider-signing`).
    pub signing_key: Option<PathBuf>,
    /// Largest upload: a provider release's files together, or one module archive.
    pub max_upload_size: bytesize::ByteSize,
    /// The private namespaces, by name.
    pub namespaces: BTreeMap<String, NamespaceConfig>,
}

impl Default for PublishingConfig {
    fn default() -> Self {
        PublishingConfig {
            hostname: None,
            signing_key: None,
            max_upload_size: bytesize::ByteSize::gib(2),
            namespaces: BTreeMap::new(),
        }
    }
}

/// `[publishing.namespaces.<name>]`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NamespaceConfig {
    /// Files of armored OpenPGP public keys of the namespace's publishers: a signature a
    /// publisher gives over SHA256SUMS (`SHA256SUMS.sig`) must verify under one of them, and
    /// is kept beside the registry's.
    pub keys: Vec<PathBuf>,
    /// Refuse provider releases that come without a publisher's signature.
    pub require_signature: bool,
}

/// `[publishing]`, validated.
#[derive(Debug, Clone, Default)]
pub struct PublishSettings {
    /// The registry's provider signing key; none when no namespace is private.
    pub signing_key: Option<std::sync::Arc<crate::trust::signer::RegistryKey>>,
    /// `publishing.max_upload_size`, in bytes.
    pub max_upload_size: u64,
    /// Per private namespace (lowercase): its publishers' keys.
    pub namespaces: BTreeMap<String, NamespaceSettings>,
}

/// One private namespace, validated.
#[derive(Debug, Clone, Default)]
pub struct NamespaceSettings {
    /// The publishers' armored public keys, concatenated; none configured: `None`.
    pub keys: Option<String>,
    pub require_signature: bool,
}

impl PublishingConfig {
    /// `[publishing]`: the private namespaces (for the trust policy) and the rest.
    fn validate(
        &self,
        server: &ServerSettings,
        upstream: &UpstreamSettings,
        modules: &ModuleSettings,
    ) -> Result<(crate::trust::PrivateNamespaces, PublishSettings), ConfigError> {
        if self.namespaces.is_empty() {
            return Ok((Default::default(), PublishSettings::default()));
        }
        let hostname = match &self.hostname {
            Some(h) => {
                Hostname::parse(h).map_err(|e| invalid("publishing.hostname", e.to_string()))?
            }
            None => {
                let url = server.public_url();
                let host = match url.port() {
                    Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
                    None => url.host_str().unwrap_or_default().to_string(),
                };
                Hostname::parse(&host).map_err(|e| {
                    invalid(
                        "publishing.hostname",
                        format!("unset, and server.public_url's host is unusable: {e}"),
                    )
                })?
            }
        };
        // Sources naming a public registry, or any origin this mirror fetches from, would
        // mean one thing here and another everywhere else (and a lock file's hashes would
        // follow whichever answered): never a private namespace's hostname.
        const PUBLIC_REGISTRIES: [&str; 2] = ["registry.terraform.io", "registry.opentofu.org"];
        if PUBLIC_REGISTRIES.contains(&hostname.as_str()) {
            return Err(invalid(
                "publishing.hostname",
                format!(
                    "{hostname} is a public registry's hostname: publish under a hostname of \
                     your own (this mirror's, by default)"
                ),
            ));
        }
        let origin = if upstream.hosts.contains_key(&hostname) {
            Some("has an [upstream.hosts] entry")
        } else if modules.default_registry == hostname {
            Some("is modules.default_registry")
        } else if modules.aliases.values().any(|h| *h == hostname) {
            Some("is in modules.aliases")
        } else {
            None
        };
        if let Some(origin) = origin {
            return Err(invalid(
                "publishing.hostname",
                format!(
                    "{hostname} {origin}: an origin's hostname is fetched from, never published \
                     to"
                ),
            ));
        }
        if upstream.host_allowed(&hostname) {
            return Err(invalid(
                "publishing.hostname",
                format!(
                    "{hostname} is also in upstream.allowed_hosts: a namespace is published here \
                     or fetched from an origin, never both"
                ),
            ));
        }
        let mut namespaces = std::collections::BTreeSet::new();
        let mut settings = BTreeMap::new();
        for (name, ns) in &self.namespaces {
            let key = format!("publishing.namespaces.{name:?}");
            crate::address::ProviderAddr::new("x.example", name, "x")
                .map_err(|e| invalid(&key, e.to_string()))?;
            let lower = name.to_ascii_lowercase();
            if modules.aliases.contains_key(&lower) {
                return Err(invalid(
                    &key,
                    "is also in modules.aliases: a namespace is published here or an alias to an \
                     origin, never both",
                ));
            }
            let mut armor = String::new();
            for (i, path) in ns.keys.iter().enumerate() {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    invalid(
                        format!("{key}.keys[{i}]"),
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?;
                crate::trust::check_keys(&text).map_err(|e| {
                    invalid(
                        format!("{key}.keys[{i}]"),
                        format!("{}: {e}", path.display()),
                    )
                })?;
                armor.push_str(&text);
                armor.push('\n');
            }
            if ns.require_signature && armor.is_empty() {
                return Err(invalid(
                    format!("{key}.require_signature"),
                    "needs the publishers' keys (keys = [...]) to check signatures against",
                ));
            }
            namespaces.insert(lower.clone());
            settings.insert(
                lower,
                NamespaceSettings {
                    keys: (!armor.is_empty()).then_some(armor),
                    require_signature: ns.require_signature,
                },
            );
        }
        let Some(path) = &self.signing_key else {
            return Err(invalid(
                "publishing.signing_key",
                "must be set when publishing.namespaces is not empty (make one with `provender \
                 keygen --provider-signing`)",
            ));
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
            invalid(
                "publishing.signing_key",
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        let signing_key = crate::trust::signer::RegistryKey::from_armor(&text)
            .map_err(|e| invalid("publishing.signing_key", format!("{}: {e}", path.display())))?;
        if self.max_upload_size.as_u64() < 1024 {
            return Err(invalid(
                "publishing.max_upload_size",
                "must be at least 1 KiB",
            ));
        }
        Ok((
            crate::trust::PrivateNamespaces {
                hostname: Some(hostname),
                namespaces,
            },
            PublishSettings {
                signing_key: Some(std::sync::Arc::new(signing_key)),
                max_upload_size: self.max_upload_size.as_u64(),
                namespaces: settings,
            },
        ))
    }
}

/// `[git]`: the read-through cache of git repositories that configurations call modules from
/// directly (`git::https://...` sources).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GitConfig {
    /// The hosts whose repositories may be fetched and served; empty: the git door is closed.
    pub allowed_hosts: Vec<String>,
    /// How long a repository is served from the cache before a client's `info/refs` makes
    /// the mirror ask its origin for new commits again.
    #[serde(with = "humantime_serde")]
    pub refresh_after: Duration,
    /// Most bytes one cached repository may take on disk.
    pub max_repository_size: bytesize::ByteSize,
    /// Most objects one cached repository may hold.
    pub max_objects: u64,
    /// Longest refresh from an origin.
    #[serde(with = "humantime_serde")]
    pub fetch_timeout: Duration,
    /// Largest request body a client may send (its wants and haves).
    pub max_request_size: bytesize::ByteSize,
    /// Longest a client's fetch may take to be answered.
    #[serde(with = "humantime_serde")]
    pub serve_timeout: Duration,
    /// Most packs made at once (`git upload-pack` for a fetch); more requests wait for a
    /// turn. Advertisements have as many turns of their own.
    pub max_concurrent_serves: usize,
    /// Most of those turns one client holds at once (its name, or its address when
    /// authentication is off); its further requests wait.
    pub max_serves_per_client: usize,
    /// Longest a client may leave the next piece of an answer unread before its
    /// `git upload-pack` is stopped and its turn freed.
    #[serde(with = "humantime_serde")]
    pub stall_timeout: Duration,
    /// Most refreshes from origins at once, in total and per host.
    pub max_concurrent_refreshes: usize,
    pub max_refreshes_per_host: usize,
    /// Most bytes the whole git cache may take; past it, the repositories used least recently
    /// are removed (never the one just refreshed).
    pub max_size: bytesize::ByteSize,
    /// Hosts that name a repository case-insensitively and with or without `.git`
    /// (`Acme/X`, `acme/x.git` and `acme/x` are one repository there).
    pub forge_hosts: Vec<String>,
}

impl Default for GitConfig {
    fn default() -> Self {
        GitConfig {
            allowed_hosts: Vec::new(),
            refresh_after: Duration::from_secs(60),
            max_repository_size: bytesize::ByteSize::gib(2),
            max_objects: 2_000_000,
            fetch_timeout: Duration::from_secs(600),
            max_request_size: bytesize::ByteSize::mib(16),
            serve_timeout: Duration::from_secs(600),
            max_concurrent_serves: 16,
            max_serves_per_client: 4,
            stall_timeout: Duration::from_secs(60),
            max_concurrent_refreshes: 8,
            max_refreshes_per_host: 4,
            max_size: bytesize::ByteSize::gib(20),
            forge_hosts: vec![
                "github.com".into(),
                "gitlab.com".into(),
                "bitbucket.org".into(),
            ],
        }
    }
}

/// `[git]`, validated.
#[derive(Debug, Clone)]
pub struct GitSettings {
    pub allowed_hosts: Vec<Hostname>,
    pub refresh_after: Duration,
    /// Bounds on one refresh from an origin (`modules.git` is the program).
    pub limits: crate::upstream::GitLimits,
    /// `git.max_request_size`, in bytes.
    pub max_request_size: u64,
    pub serve_timeout: Duration,
    pub max_concurrent_serves: usize,
    pub max_serves_per_client: usize,
    pub stall_timeout: Duration,
    pub max_concurrent_refreshes: usize,
    pub max_refreshes_per_host: usize,
    /// `git.max_size`, in bytes.
    pub max_size: u64,
    pub forge_hosts: Vec<Hostname>,
}

impl GitSettings {
    /// Whether repositories on `host` may be fetched and served.
    pub fn host_allowed(&self, host: &Hostname) -> bool {
        self.allowed_hosts.contains(host)
    }

    /// Whether `host` names repositories case-insensitively and with or without `.git`.
    pub fn is_forge(&self, host: &Hostname) -> bool {
        self.forge_hosts.contains(host)
    }
}

impl GitConfig {
    /// `[git]`; `program` is `modules.git`.
    fn validate(&self, program: &std::path::Path) -> Result<GitSettings, ConfigError> {
        let mut allowed_hosts = Vec::new();
        for (i, h) in self.allowed_hosts.iter().enumerate() {
            let host = Hostname::parse(h)
                .map_err(|e| invalid(format!("git.allowed_hosts[{i}]"), e.to_string()))?;
            allowed_hosts.push(host);
        }
        for (key, size) in [
            ("git.max_repository_size", self.max_repository_size),
            ("git.max_request_size", self.max_request_size),
        ] {
            if size.as_u64() < 1024 {
                return Err(invalid(key, "must be at least 1 KiB"));
            }
        }
        if self.max_objects == 0 {
            return Err(invalid("git.max_objects", "must be at least 1"));
        }
        for (key, value) in [
            ("git.max_concurrent_serves", self.max_concurrent_serves),
            ("git.max_serves_per_client", self.max_serves_per_client),
            (
                "git.max_concurrent_refreshes",
                self.max_concurrent_refreshes,
            ),
            ("git.max_refreshes_per_host", self.max_refreshes_per_host),
        ] {
            if value == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        if self.max_size.as_u64() < 1024 {
            return Err(invalid("git.max_size", "must be at least 1 KiB"));
        }
        let mut forge_hosts = Vec::new();
        for (i, h) in self.forge_hosts.iter().enumerate() {
            let host = Hostname::parse(h)
                .map_err(|e| invalid(format!("git.forge_hosts[{i}]"), e.to_string()))?;
            forge_hosts.push(host);
        }
        for (key, value) in [
            ("git.fetch_timeout", self.fetch_timeout),
            ("git.serve_timeout", self.serve_timeout),
            ("git.stall_timeout", self.stall_timeout),
        ] {
            if value.is_zero() {
                return Err(invalid(key, "must be longer than zero"));
            }
        }
        Ok(GitSettings {
            allowed_hosts,
            refresh_after: self.refresh_after,
            limits: crate::upstream::GitLimits {
                program: program.to_path_buf(),
                max_bytes: self.max_repository_size.as_u64(),
                max_objects: self.max_objects,
                // A cached repository is served as it is, never archived.
                max_archive: 0,
                timeout: self.fetch_timeout,
                size_key: "git.max_repository_size",
                timeout_key: "git.fetch_timeout",
            },
            max_request_size: self.max_request_size.as_u64(),
            serve_timeout: self.serve_timeout,
            max_concurrent_serves: self.max_concurrent_serves,
            max_serves_per_client: self.max_serves_per_client,
            stall_timeout: self.stall_timeout,
            max_concurrent_refreshes: self.max_concurrent_refreshes,
            max_refreshes_per_host: self.max_refreshes_per_host,
            max_size: self.max_size.as_u64(),
            forge_hosts,
        })
    }

    /// The hosts named, as written (they may have `upstream.hosts` entries).
    fn hosts(&self) -> impl Iterator<Item = String> + '_ {
        self.allowed_hosts.iter().map(|h| h.to_ascii_lowercase())
    }
}

/// `[releases]`: a read-through mirror of the CLIs' own releases.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReleasesConfig {
    pub enabled: bool,
    /// HashiCorp's release site: `<url>/terraform/<version>/<file>`.
    pub hashicorp_url: String,
    /// Where OpenTofu's release files are: `<url>/v<version>/<file>`.
    pub opentofu_url: String,
    /// OpenTofu's list of releases (`api.json`).
    pub opentofu_index_url: String,
    /// Replaces the built-in HashiCorp key that Terraform's SHA256SUMS must be signed with
    /// (armored public key file), should HashiCorp move to another key.
    pub hashicorp_key_file: Option<PathBuf>,
    /// Replaces the built-in OpenTofu key, likewise.
    pub opentofu_key_file: Option<PathBuf>,
    /// The largest release build served: a build is held back whole until its SHA-256 is
    /// checked, so this bounds what one download holds.
    pub max_build_size: bytesize::ByteSize,
}

impl Default for ReleasesConfig {
    fn default() -> Self {
        ReleasesConfig {
            enabled: false,
            hashicorp_url: "https://releases.hashicorp.com".into(),
            opentofu_url: "https://github.com/opentofu/opentofu/releases/download".into(),
            opentofu_index_url: "https://get.opentofu.org/tofu/api.json".into(),
            hashicorp_key_file: None,
            opentofu_key_file: None,
            max_build_size: bytesize::ByteSize::mib(512),
        }
    }
}

/// `[releases]`, validated.
#[derive(Debug, Clone)]
pub struct ReleaseSettings {
    pub enabled: bool,
    pub hashicorp_url: url::Url,
    pub opentofu_url: url::Url,
    pub opentofu_index_url: url::Url,
    /// Armored replacements of the built-in vendor keys.
    pub hashicorp_key: Option<String>,
    pub opentofu_key: Option<String>,
    /// `releases.max_build_size`, in bytes.
    pub max_build_size: u64,
}

impl ReleaseSettings {
    /// The verifier of release signatures: the vendors' built-in keys, or those configured in
    /// their place. The configuration checked that they parse; should one not, this says so.
    pub fn verifier(&self) -> Result<std::sync::Arc<crate::trust::Verifier>, String> {
        crate::trust::Verifier::for_releases(
            self.hashicorp_key.as_deref(),
            self.opentofu_key.as_deref(),
        )
        .map(std::sync::Arc::new)
        .map_err(|e| format!("a vendor key for releases is unusable: {e}"))
    }
}

impl ReleasesConfig {
    /// `[releases]`
    fn validate(&self) -> Result<ReleaseSettings, ConfigError> {
        let url = |key: &str, text: &str| {
            let url = url::Url::parse(text.trim_end_matches('/'))
                .map_err(|e| invalid(format!("releases.{key}"), format!("{text:?}: {e}")))?;
            if url.scheme() != "https" || url.host_str().is_none() {
                return Err(invalid(
                    format!("releases.{key}"),
                    format!("{text:?} must be an https URL"),
                ));
            }
            Ok(url)
        };
        let key = |name: &str, path: &Option<PathBuf>| -> Result<Option<String>, ConfigError> {
            let Some(path) = path else { return Ok(None) };
            let armor = std::fs::read_to_string(path).map_err(|e| {
                invalid(
                    format!("releases.{name}"),
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            Ok(Some(armor))
        };
        let settings = ReleaseSettings {
            enabled: self.enabled,
            hashicorp_url: url("hashicorp_url", &self.hashicorp_url)?,
            opentofu_url: url("opentofu_url", &self.opentofu_url)?,
            opentofu_index_url: url("opentofu_index_url", &self.opentofu_index_url)?,
            hashicorp_key: key("hashicorp_key_file", &self.hashicorp_key_file)?,
            opentofu_key: key("opentofu_key_file", &self.opentofu_key_file)?,
            max_build_size: self.max_build_size.as_u64(),
        };
        if settings.max_build_size < 1024 * 1024 {
            return Err(invalid("releases.max_build_size", "must be at least 1 MiB"));
        }
        if let Some(armor) = &settings.hashicorp_key {
            crate::trust::Verifier::for_releases(Some(armor), None)
                .map_err(|e| invalid("releases.hashicorp_key_file", e.to_string()))?;
        }
        if let Some(armor) = &settings.opentofu_key {
            crate::trust::Verifier::for_releases(None, Some(armor))
                .map_err(|e| invalid("releases.opentofu_key_file", e.to_string()))?;
        }
        Ok(settings)
    }

    /// The hosts of the release origins, which may have `upstream.hosts` entries.
    fn hosts(&self) -> Vec<String> {
        [
            &self.hashicorp_url,
            &self.opentofu_url,
            &self.opentofu_index_url,
        ]
        .iter()
        .filter_map(|u| url::Url::parse(u).ok()?.host_str().map(str::to_string))
        .collect()
    }
}

/// `[complete_hashes]`: the background job that learns every platform's `h1:` of a version
/// once any of it is requested.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompleteHashesConfig {
    pub enabled: bool,
    /// Archives fetched at once.
    pub concurrency: usize,
    /// Bytes per second the job may download, all its archives together (0: no limit). A client
    /// asking for an archive the job is fetching lifts the limit for that archive.
    pub max_bandwidth: bytesize::ByteSize,
    /// Versions waiting at most; more are dropped (and counted) until there is room.
    pub queue: usize,
    /// Keep the archives the job fetches (else it learns their `h1:` and drops them).
    pub keep_archives: bool,
    /// How long an archive the job fetched (and is not keeping) waits in the staging area for a
    /// client to ask for it before it is dropped ("0s": dropped at once).
    #[serde(with = "humantime_serde")]
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
    fn validate(&self) -> Result<CompleteHashesSettings, ConfigError> {
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

/// `[modules]`: the module registry facade.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModulesConfig {
    /// The origin registry of module sources written with the mirror's own hostname, unless
    /// their namespace is in `aliases`. Unset: registry.terraform.io when it is allowed, else
    /// the first of `upstream.allowed_hosts`.
    pub default_registry: Option<String>,
    /// Namespace -> origin registry, for sources written with the mirror's own hostname.
    pub aliases: BTreeMap<String, String>,
    pub max_archive_size: bytesize::ByteSize,
    pub max_unpacked_size: bytesize::ByteSize,
    pub max_entries: usize,
    pub max_git_size: bytesize::ByteSize,
    pub max_git_objects: u64,
    #[serde(with = "humantime_serde")]
    pub git_timeout: Duration,
    pub git: PathBuf,
}

impl Default for ModulesConfig {
    fn default() -> Self {
        ModulesConfig {
            default_registry: None,
            aliases: BTreeMap::new(),
            max_archive_size: bytesize::ByteSize::mib(256),
            max_unpacked_size: bytesize::ByteSize::gib(1),
            max_entries: 20_000,
            max_git_size: bytesize::ByteSize::mib(512),
            max_git_objects: 200_000,
            git_timeout: Duration::from_secs(300),
            git: PathBuf::from("git"),
        }
    }
}

/// `[bundles]`: the chain of custody of bundles carried across an air gap.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BundlesConfig {
    /// This site's private key (`provender keygen`); `export --bundle` signs with it.
    pub signing_key_file: Option<PathBuf>,
    /// Public keys of the sites whose bundles `import` trusts.
    pub trusted_keys: Vec<String>,
}

/// `[configurations]`: how `seed` and `lock` read configuration directories.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConfigurationsConfig {
    /// `terraform` or `opentofu`.
    pub tool: Option<String>,
}

/// Which CLI a configuration directory is written for: it decides the registry of short
/// provider sources (`hashicorp/aws`) and whether `*.tofu` files are read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Tool {
    #[default]
    Terraform,
    #[value(name = "opentofu")]
    OpenTofu,
}

impl Tool {
    /// The registry host of a provider source written without one.
    pub fn default_registry(self) -> &'static str {
        match self {
            Tool::Terraform => "registry.terraform.io",
            Tool::OpenTofu => "registry.opentofu.org",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Tool::Terraform => "terraform",
            Tool::OpenTofu => "opentofu",
        }
    }
}

/// `[server]`
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    pub listen: String,
    pub base_path: String,
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub public_url: Option<String>,
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    #[serde(with = "humantime_serde")]
    pub drain_delay: Duration,
    #[serde(with = "humantime_serde")]
    pub tls_reload_interval: Duration,
    pub access_log: bool,
    /// The most a client request waits for its answer to start, whatever it waits on.
    #[serde(with = "humantime_serde")]
    pub request_budget: Duration,
    /// The most `/readyz` waits for the cache's store to answer.
    #[serde(with = "humantime_serde")]
    pub ready_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub tls_handshake_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub http2_keep_alive_interval: Duration,
    #[serde(with = "humantime_serde")]
    pub http2_keep_alive_timeout: Duration,
    pub max_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8443".into(),
            base_path: "/".into(),
            tls_cert: None,
            tls_key: None,
            public_url: None,
            shutdown_grace: Duration::from_secs(30),
            drain_delay: Duration::ZERO,
            request_budget: Duration::from_secs(30),
            ready_timeout: Duration::from_secs(5),
            tls_reload_interval: Duration::from_secs(60),
            access_log: false,
            tls_handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            http2_keep_alive_interval: Duration::from_secs(20),
            http2_keep_alive_timeout: Duration::from_secs(20),
            max_connections: 4096,
        }
    }
}

/// `[cache]`
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    pub dir: PathBuf,
    pub backend: String,
    pub redirect_downloads: bool,
    pub object_store: Option<ObjectStoreConfig>,
    #[serde(with = "humantime_serde")]
    pub index_ttl: Duration,
    #[serde(with = "humantime_serde")]
    pub not_found_ttl: Duration,
    #[serde(with = "humantime_serde")]
    pub stale_if_error: Duration,
    pub metadata_entries: u64,
    pub max_size: Option<bytesize::ByteSize>,
    #[serde(with = "humantime_serde")]
    pub reverify_interval: Duration,
    pub max_fill_memory: bytesize::ByteSize,
    /// With an object store: bytes of archives and module packages also kept on local disk
    /// (0: none).
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
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectStoreConfig {
    pub bucket: String,
    #[serde(default)]
    pub prefix: String,
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub endpoint: Option<String>,
    #[serde(default = "yes")]
    pub path_style: bool,
    #[serde(default)]
    pub allow_http: bool,
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    #[serde(default)]
    pub access_key_id: Option<String>,
    #[serde(default)]
    pub secret_access_key_file: Option<PathBuf>,
    /// Deadlines and the circuit breaker of every call to the store (see
    /// `storage::StoreDeadlines`).
    #[serde(default = "default_store_connect_timeout", with = "humantime_serde")]
    pub connect_timeout: Duration,
    #[serde(default = "default_store_request_timeout", with = "humantime_serde")]
    pub request_timeout: Duration,
    #[serde(default = "default_store_idle_timeout", with = "humantime_serde")]
    pub idle_timeout: Duration,
    #[serde(default = "default_store_retries")]
    pub retries: usize,
    #[serde(default = "default_store_breaker_failures")]
    pub breaker_failures: u32,
    #[serde(default = "default_store_breaker_cooldown", with = "humantime_serde")]
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

/// `[upstream]`
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamConfig {
    pub allowed_hosts: Vec<String>,
    pub platforms: Vec<String>,
    pub ca_file: Option<PathBuf>,
    pub hosts: BTreeMap<String, HostConfig>,
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub request_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub archive_timeout: Duration,
    pub max_document_size: bytesize::ByteSize,
    pub max_archive_size: bytesize::ByteSize,
    pub max_redirects: usize,
    pub concurrency: usize,
    pub offline: bool,
    pub require_signature: bool,
    pub min_trust: Option<String>,
    pub allow_private_networks: bool,
    pub proxy: Option<ProxyText>,
    pub max_discovery_size: bytesize::ByteSize,
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    pub max_response_headers: usize,
    pub max_header_list_size: bytesize::ByteSize,
    pub max_zip_entries: usize,
    pub max_unpacked_size: bytesize::ByteSize,
    pub retries: u32,
    #[serde(with = "humantime_serde")]
    pub retry_base_delay: Duration,
    pub breaker_failures: u32,
    #[serde(with = "humantime_serde")]
    pub breaker_cooldown: Duration,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            allowed_hosts: vec![
                "registry.terraform.io".into(),
                "registry.opentofu.org".into(),
            ],
            platforms: Vec::new(),
            ca_file: None,
            hosts: BTreeMap::new(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            archive_timeout: Duration::from_secs(30 * 60),
            max_document_size: bytesize::ByteSize::mib(4),
            max_archive_size: bytesize::ByteSize::gib(2),
            max_redirects: 3,
            concurrency: 8,
            offline: false,
            require_signature: true,
            min_trust: None,
            allow_private_networks: false,
            proxy: None,
            max_discovery_size: bytesize::ByteSize::mib(1),
            idle_timeout: Duration::from_secs(30),
            max_response_headers: 100,
            max_header_list_size: bytesize::ByteSize::kib(64),
            max_zip_entries: 10_000,
            max_unpacked_size: bytesize::ByteSize::gib(4),
            retries: 2,
            retry_base_delay: Duration::from_millis(200),
            breaker_failures: 5,
            breaker_cooldown: Duration::from_secs(30),
        }
    }
}

/// `[upstream.hosts."<hostname>"]`
#[derive(Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostConfig {
    pub connect_to: Option<String>,
    pub token: Option<String>,
    /// A file holding the token, read for every request (a projected workload identity token).
    pub token_file: Option<PathBuf>,
    /// The user name sent with `token` to a git host (HTTP Basic); `x-access-token` if unset.
    pub git_username: Option<String>,
    pub require_signature: Option<bool>,
    pub allow_http: bool,
    /// Another mirror (a site's centre) asked in this origin's place.
    pub via: Option<String>,
    /// `"origin"`: ask the origin itself when the centre does not answer; `"none"` (default).
    pub fallback: Option<String>,
}

// Tokens never appear in `Debug` output (and so in no log line that prints settings).
impl std::fmt::Debug for HostConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostConfig")
            .field("connect_to", &self.connect_to)
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("token_file", &self.token_file)
            .field("git_username", &self.git_username)
            .field("require_signature", &self.require_signature)
            .field("allow_http", &self.allow_http)
            .field("via", &self.via)
            .field("fallback", &self.fallback)
            .finish()
    }
}

/// `upstream.hosts.*.via` and `fallback` of the table `key`, for origin `host` (`None`: for
/// every origin, as `provender seed --from` gives it).
pub fn parse_via(
    key: &str,
    host: Option<&Hostname>,
    via: &str,
    fallback: Option<&str>,
) -> Result<crate::upstream::Via, ConfigError> {
    let via_key = format!("{key}.via");
    let mut url = url::Url::parse(via).map_err(|e| invalid(&via_key, format!("not a URL: {e}")))?;
    if url.scheme() != "https" {
        return Err(invalid(&via_key, "must be an https:// URL"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            &via_key,
            "must not carry credentials: give the centre's token in its own [upstream.hosts] table",
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid(&via_key, "must have no query or fragment"));
    }
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    let centre = crate::address::authority(&url)
        .and_then(|a| Hostname::parse(&a).ok())
        .ok_or_else(|| invalid(&via_key, "has no usable host name"))?;
    if Some(&centre) == host {
        return Err(invalid(&via_key, "names the origin itself"));
    }
    let fallback_to_origin = match fallback {
        None | Some("none") => false,
        Some("origin") => true,
        Some(other) => {
            return Err(invalid(
                format!("{key}.fallback"),
                format!("must be \"origin\" or \"none\", not {other:?}"),
            ));
        }
    };
    Ok(crate::upstream::Via {
        url,
        host: centre,
        fallback_to_origin,
    })
}

/// `upstream.proxy` as written, parsed in `validate()` so that no error quotes it: it may hold
/// a password.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct ProxyText(String);

impl ProxyText {
    fn parse(&self) -> Result<ProxyUrl, ConfigError> {
        let url = Url::parse(&self.0).map_err(|e| invalid(PROXY_KEY, format!("not a URL: {e}")))?;
        let proxy = ProxyUrl(url);
        check_proxy(&proxy)?;
        Ok(proxy)
    }
}

const PROXY_KEY: &str = "upstream.proxy";

impl std::fmt::Debug for ProxyText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match Url::parse(&self.0) {
            Ok(url) => write!(f, "ProxyText({})", ProxyUrl(url)),
            Err(_) => f.write_str("ProxyText(<not a URL>)"),
        }
    }
}

/// Whether `upstream.proxy` names a proxy: scheme, optional credentials, host and port only.
fn check_proxy(proxy: &ProxyUrl) -> Result<(), ConfigError> {
    {
        let url = &proxy.0;
        let problem = if !matches!(url.scheme(), "http" | "https") {
            "the proxy must be an http:// or https:// URL"
        } else if url.host_str().is_none_or(str::is_empty) {
            "names no host"
        } else if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            "give only scheme, optional credentials, host and port"
        } else {
            return Ok(());
        };
        Err(invalid(PROXY_KEY, format!("{proxy}: {problem}")))
    }
}

/// A configuration error, naming the key or file at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config key {key}: {message}")]
    Invalid { key: String, message: String },
}

impl From<crate::policy::PolicyError> for ConfigError {
    fn from(e: crate::policy::PolicyError) -> ConfigError {
        ConfigError::Invalid {
            key: e.place,
            message: e.message,
        }
    }
}

impl From<crate::usage::UsageConfigError> for ConfigError {
    fn from(e: crate::usage::UsageConfigError) -> ConfigError {
        ConfigError::Invalid {
            key: format!("usage.{}", e.key),
            message: e.message.to_string(),
        }
    }
}

impl From<crate::auth::AuthConfigError> for ConfigError {
    fn from(e: crate::auth::AuthConfigError) -> ConfigError {
        ConfigError::Invalid {
            key: e.key,
            message: e.message,
        }
    }
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        message: message.into(),
    }
}

/// Reads and validates the configuration file, or takes the built-in defaults without one:
/// the same for `serve` and every operator command.
pub fn load(path: Option<&std::path::Path>) -> Result<Settings, ConfigError> {
    match path {
        Some(path) => Config::from_file(path),
        None => Ok(Config::default()),
    }
    .and_then(|c| c.validate())
}

impl Config {
    /// Reads and parses a TOML file (unknown keys are errors).
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        Config::from_toml(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.into(),
                message,
            },
            other => other,
        })
    }

    /// Parses TOML text.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: PathBuf::from("<inline>"),
            message: e.to_string().trim_end().to_string(),
        })
    }

    /// Checks every key, section by section, and produces the typed settings.
    pub fn validate(&self) -> Result<Settings, ConfigError> {
        let mut other_hosts = self.auth.issuer_hosts();
        if self.releases.enabled {
            other_hosts.extend(self.releases.hosts());
        }
        other_hosts.extend(self.git.hosts());
        let (upstream, mut trust) = self.upstream.validate(&other_hosts)?;
        let modules = self.modules.validate(&upstream)?;
        let server = self.server.validate()?;
        let (private, publishing) = self.publishing.validate(&server, &upstream, &modules)?;
        trust.private = private;
        Ok(Settings {
            git: self.git.validate(&modules.git.program)?,
            modules,
            publishing,
            server,
            cache: self.cache.validate()?,
            upstream,
            trust,
            auth: self.auth.validate()?,
            bundles: self.bundles.validate()?,
            tool: self.configurations.validate()?,
            complete_hashes: self.complete_hashes.validate()?,
            usage: self.usage.validate()?,
            releases: self.releases.validate()?,
            policy: self.policy.validate()?,
        })
    }
}

impl ServerConfig {
    /// `[server]`
    fn validate(&self) -> Result<ServerSettings, ConfigError> {
        let s = self;
        let listen: SocketAddr = s.listen.parse().map_err(|_| {
            invalid(
                "server.listen",
                format!("{:?} is not an address like 127.0.0.1:8443", s.listen),
            )
        })?;
        let base_path = normalise_base_path(&s.base_path)?;
        if !s.tls_reload_interval.is_zero() && s.tls_reload_interval < Duration::from_secs(1) {
            return Err(invalid(
                "server.tls_reload_interval",
                "must be at least 1s (or 0s: reload only on SIGHUP)",
            ));
        }
        for (key, value) in [
            ("server.request_budget", s.request_budget),
            ("server.ready_timeout", s.ready_timeout),
            ("server.tls_handshake_timeout", s.tls_handshake_timeout),
            ("server.header_read_timeout", s.header_read_timeout),
            ("server.idle_timeout", s.idle_timeout),
            (
                "server.http2_keep_alive_timeout",
                s.http2_keep_alive_timeout,
            ),
        ] {
            if value.is_zero() {
                return Err(invalid(key, "must be more than 0s"));
            }
        }
        if s.max_connections == 0 {
            return Err(invalid("server.max_connections", "must be at least 1"));
        }
        // tokio's semaphore, which holds the connection slots, cannot count higher.
        if s.max_connections > tokio::sync::Semaphore::MAX_PERMITS {
            return Err(invalid(
                "server.max_connections",
                format!("must be at most {}", tokio::sync::Semaphore::MAX_PERMITS),
            ));
        }
        let tls = match (&s.tls_cert, &s.tls_key) {
            (Some(cert), Some(key)) => TlsSource::Files {
                cert: cert.clone(),
                key: key.clone(),
            },
            (None, None) => TlsSource::SelfSigned,
            (Some(_), None) => {
                return Err(invalid(
                    "server.tls_key",
                    "must be set when server.tls_cert is set",
                ));
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "server.tls_cert",
                    "must be set when server.tls_key is set",
                ));
            }
        };
        for (key, path) in [
            ("server.tls_cert", &s.tls_cert),
            ("server.tls_key", &s.tls_key),
        ] {
            if let Some(path) = path {
                if let Err(e) = std::fs::metadata(path) {
                    return Err(invalid(key, format!("cannot read {}: {e}", path.display())));
                }
            }
        }
        let public_url = match &s.public_url {
            Some(u) => {
                let url = url::Url::parse(u)
                    .map_err(|e| invalid("server.public_url", format!("{u:?}: {e}")))?;
                if !matches!(url.scheme(), "https" | "http") || url.host().is_none() {
                    return Err(invalid(
                        "server.public_url",
                        format!("{u:?} must be an absolute https URL"),
                    ));
                }
                Some(with_trailing_slash(url))
            }
            None => None,
        };

        Ok(ServerSettings {
            listen,
            base_path,
            tls,
            public_url,
            shutdown_grace: s.shutdown_grace,
            drain_delay: s.drain_delay,
            tls_reload_interval: s.tls_reload_interval,
            access_log: s.access_log,
            request_budget: s.request_budget,
            ready_timeout: s.ready_timeout,
            connections: ConnectionLimits {
                tls_handshake_timeout: s.tls_handshake_timeout,
                header_read_timeout: s.header_read_timeout,
                idle_timeout: s.idle_timeout,
                http2_keep_alive_interval: (!s.http2_keep_alive_interval.is_zero())
                    .then_some(s.http2_keep_alive_interval),
                http2_keep_alive_timeout: s.http2_keep_alive_timeout,
                max_connections: s.max_connections,
            },
        })
    }
}

impl CacheConfig {
    /// `[cache]` and `[cache.object_store]`
    fn validate(&self) -> Result<CacheSettings, ConfigError> {
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
    ) -> Result<crate::storage::ObjectStoreSettings, ConfigError> {
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
    fn deadlines(&self) -> Result<crate::storage::StoreDeadlines, ConfigError> {
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
    fn validate_directory(&self) -> Result<crate::storage::ObjectStoreSettings, ConfigError> {
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

impl UpstreamConfig {
    /// `[upstream]`: the origin client's settings and the trust policy. `issuer_hosts` (those of
    /// `auth.issuers`) may have `upstream.hosts` entries too, without being origins.
    fn validate(
        &self,
        issuer_hosts: &[String],
    ) -> Result<(UpstreamSettings, crate::trust::TrustPolicy), ConfigError> {
        let u = self;
        if let Some(path) = &u.ca_file {
            if let Err(e) = std::fs::metadata(path) {
                return Err(invalid(
                    "upstream.ca_file",
                    format!("cannot read {}: {e}", path.display()),
                ));
            }
        }
        if u.concurrency == 0 {
            return Err(invalid("upstream.concurrency", "must be at least 1"));
        }
        let proxy = u.proxy.as_ref().map(ProxyText::parse).transpose()?;
        let mut allowed_hosts = Vec::new();
        for (i, h) in u.allowed_hosts.iter().enumerate() {
            let host = Hostname::parse(h)
                .map_err(|e| invalid(format!("upstream.allowed_hosts[{i}]"), e.to_string()))?;
            allowed_hosts.push(host);
        }
        let mut platforms = Vec::new();
        for (i, p) in u.platforms.iter().enumerate() {
            platforms.push(
                Platform::parse(p)
                    .map_err(|e| invalid(format!("upstream.platforms[{i}]"), e.to_string()))?,
            );
        }
        let mut hosts = BTreeMap::new();
        // The centres some hosts go through (`via`): their own tables hold their credentials.
        let mut vias = BTreeMap::new();
        for (name, hc) in &u.hosts {
            let key = format!("upstream.hosts.{name:?}");
            let host = Hostname::parse(name).map_err(|e| invalid(&key, e.to_string()))?;
            match (&hc.via, &hc.fallback) {
                (Some(via), fallback) => {
                    vias.insert(
                        host.clone(),
                        parse_via(&key, Some(&host), via, fallback.as_deref())?,
                    );
                }
                (None, Some(_)) => {
                    return Err(invalid(
                        format!("{key}.fallback"),
                        "applies only to a host with a via",
                    ));
                }
                (None, None) => {}
            }
        }
        for (name, hc) in &u.hosts {
            let key = format!("upstream.hosts.{name:?}");
            let host = Hostname::parse(name).map_err(|e| invalid(&key, e.to_string()))?;
            let centre = vias.values().any(|v| v.host == host);
            if !allowed_hosts.contains(&host)
                && !issuer_hosts.iter().any(|h| h == host.as_str())
                && !centre
            {
                return Err(invalid(
                    &key,
                    format!(
                        "{host} is not listed in upstream.allowed_hosts (nor git.allowed_hosts, nor the host of an auth.issuers entry, nor the via of another host)"
                    ),
                ));
            }
            if hc.token.is_some() && hc.token_file.is_some() {
                return Err(invalid(
                    format!("{key}.token_file"),
                    "give either token or token_file, not both",
                ));
            }
            if let Some(path) = &hc.token_file {
                if let Err(e) = std::fs::metadata(path) {
                    return Err(invalid(
                        format!("{key}.token_file"),
                        format!("cannot read {}: {e}", path.display()),
                    ));
                }
            }
            let connect_to = match &hc.connect_to {
                Some(addr) => Some(parse_connect_to(&format!("{key}.connect_to"), addr)?),
                None => None,
            };
            if hc
                .token
                .as_deref()
                .is_some_and(|t| t.is_empty() || t.chars().any(|c| c.is_control() || c == ' '))
            {
                return Err(invalid(
                    format!("{key}.token"),
                    "must be a non-empty token without spaces or control characters",
                ));
            }
            if hc
                .git_username
                .as_deref()
                .is_some_and(|u| u.is_empty() || u.chars().any(|c| c.is_control() || c == ':'))
            {
                return Err(invalid(
                    format!("{key}.git_username"),
                    "must be a non-empty name without ':' or control characters",
                ));
            }
            let via = vias.get(&host).cloned();
            hosts.insert(
                host,
                HostSettings {
                    connect_to,
                    token: hc.token.clone(),
                    token_file: hc.token_file.clone(),
                    via,
                    git_username: hc.git_username.clone(),
                    require_signature: hc.require_signature,
                    allow_http: hc.allow_http,
                },
            );
        }
        for (key, d) in [
            ("upstream.connect_timeout", u.connect_timeout),
            ("upstream.request_timeout", u.request_timeout),
            ("upstream.archive_timeout", u.archive_timeout),
        ] {
            if d.is_zero() {
                return Err(invalid(key, "must be longer than zero"));
            }
        }
        if u.max_document_size.as_u64() < 1024 {
            return Err(invalid(
                "upstream.max_document_size",
                "must be at least 1 KiB",
            ));
        }
        if u.max_archive_size.as_u64() < 1024 {
            return Err(invalid(
                "upstream.max_archive_size",
                "must be at least 1 KiB",
            ));
        }
        if u.max_redirects > 10 {
            return Err(invalid("upstream.max_redirects", "must be at most 10"));
        }
        if u.retries > 10 {
            return Err(invalid("upstream.retries", "must be at most 10"));
        }
        if u.max_discovery_size.as_u64() < 1024 {
            return Err(invalid(
                "upstream.max_discovery_size",
                "must be at least 1 KiB",
            ));
        }
        if u.idle_timeout.is_zero() {
            return Err(invalid("upstream.idle_timeout", "must be longer than zero"));
        }
        if !(8..=1000).contains(&u.max_response_headers) {
            return Err(invalid(
                "upstream.max_response_headers",
                "must be from 8 to 1000",
            ));
        }
        if !(1024..=(16 << 20)).contains(&u.max_header_list_size.as_u64()) {
            return Err(invalid(
                "upstream.max_header_list_size",
                "must be from 1 KiB to 16 MiB",
            ));
        }
        if u.max_zip_entries == 0 {
            return Err(invalid("upstream.max_zip_entries", "must be at least 1"));
        }
        if u.max_unpacked_size.as_u64() < 1024 {
            return Err(invalid(
                "upstream.max_unpacked_size",
                "must be at least 1 KiB",
            ));
        }
        let min_trust = u
            .min_trust
            .as_deref()
            .map(str::parse::<crate::trust::SignatureKind>)
            .transpose()
            .map_err(|e| invalid("upstream.min_trust", e.to_string()))?;
        let trust = crate::trust::TrustPolicy {
            require_signature: u.require_signature,
            require_signature_for: hosts
                .iter()
                .filter_map(|(h, hs)| hs.require_signature.map(|r| (h.clone(), r)))
                .collect(),
            min_trust,
            private: Default::default(),
        };
        let settings = UpstreamSettings {
            allowed_hosts,
            platforms,
            ca_file: u.ca_file.clone(),
            hosts,
            connect_timeout: u.connect_timeout,
            request_timeout: u.request_timeout,
            archive_timeout: u.archive_timeout,
            max_document_size: u.max_document_size.as_u64(),
            max_archive_size: u.max_archive_size.as_u64(),
            max_redirects: u.max_redirects,
            concurrency: u.concurrency,
            offline: u.offline,
            allow_private_networks: u.allow_private_networks,
            proxy,
            max_discovery_size: u.max_discovery_size.as_u64(),
            idle_timeout: u.idle_timeout,
            max_response_headers: u.max_response_headers,
            max_header_list_size: u.max_header_list_size.as_u64(),
            max_zip_entries: u.max_zip_entries,
            max_unpacked_size: u.max_unpacked_size.as_u64(),
            retries: u.retries,
            retry_base_delay: u.retry_base_delay,
            breaker_failures: u.breaker_failures,
            breaker_cooldown: u.breaker_cooldown,
        };
        Ok((settings, trust))
    }
}

impl ModulesConfig {
    /// `[modules]`; the registries it names must be in `upstream.allowed_hosts`.
    fn validate(&self, upstream: &UpstreamSettings) -> Result<ModuleSettings, ConfigError> {
        let registry = |key: String, name: &str| {
            let host = Hostname::parse(name).map_err(|e| invalid(&key, e.to_string()))?;
            if !upstream.host_allowed(&host) {
                return Err(invalid(
                    &key,
                    format!("{host} is not listed in upstream.allowed_hosts"),
                ));
            }
            Ok(host)
        };
        let default_registry = match &self.default_registry {
            Some(name) => registry("modules.default_registry".into(), name)?,
            None => {
                let terraform = Hostname::parse("registry.terraform.io").expect("a valid name");
                match upstream.allowed_hosts.first() {
                    Some(first) if !upstream.host_allowed(&terraform) => first.clone(),
                    _ => terraform,
                }
            }
        };
        let mut aliases = BTreeMap::new();
        for (ns, host) in &self.aliases {
            let key = format!("modules.aliases.{ns:?}");
            crate::address::ModuleAddr::new("x.example", ns, "x", "x")
                .map_err(|e| invalid(&key, e.to_string()))?;
            aliases.insert(ns.to_ascii_lowercase(), registry(key, host)?);
        }
        for (key, size) in [
            ("modules.max_archive_size", self.max_archive_size),
            ("modules.max_unpacked_size", self.max_unpacked_size),
            ("modules.max_git_size", self.max_git_size),
        ] {
            if size.as_u64() < 1024 {
                return Err(invalid(key, "must be at least 1 KiB"));
            }
        }
        if self.max_entries == 0 || self.max_git_objects == 0 {
            let key = if self.max_entries == 0 {
                "modules.max_entries"
            } else {
                "modules.max_git_objects"
            };
            return Err(invalid(key, "must be at least 1"));
        }
        if self.git_timeout.is_zero() {
            return Err(invalid("modules.git_timeout", "must be longer than zero"));
        }
        let limits = crate::package::PackLimits {
            max_entries: self.max_entries,
            max_unpacked: self.max_unpacked_size.as_u64(),
        };
        Ok(ModuleSettings {
            default_registry,
            aliases,
            max_archive_size: self.max_archive_size.as_u64(),
            limits,
            git: crate::upstream::GitLimits {
                program: self.git.clone(),
                max_bytes: self.max_git_size.as_u64(),
                max_objects: self.max_git_objects,
                // What a package within the limits may take as a tar stream: the same cap
                // the package reader holds it to.
                max_archive: limits.max_tar_stream(),
                timeout: self.git_timeout,
                size_key: "modules.max_git_size",
                timeout_key: "modules.git_timeout",
            },
        })
    }
}

impl BundlesConfig {
    /// `[bundles]`
    fn validate(&self) -> Result<BundleSettings, ConfigError> {
        let mut trusted_site_keys = Vec::new();
        for (i, k) in self.trusted_keys.iter().enumerate() {
            trusted_site_keys.push(
                crate::trust::site::SitePublicKey::parse(k)
                    .map_err(|e| invalid(format!("bundles.trusted_keys[{i}]"), e.to_string()))?,
            );
        }
        if let Some(path) = &self.signing_key_file {
            if let Err(e) = std::fs::metadata(path) {
                return Err(invalid(
                    "bundles.signing_key_file",
                    format!("cannot read {}: {e}", path.display()),
                ));
            }
        }
        Ok(BundleSettings {
            signing_key_file: self.signing_key_file.clone(),
            trusted_site_keys,
        })
    }
}

impl ConfigurationsConfig {
    /// `[configurations]`
    fn validate(&self) -> Result<Tool, ConfigError> {
        let tool = match self.tool.as_deref() {
            None | Some("terraform") => Tool::Terraform,
            Some("opentofu") => Tool::OpenTofu,
            Some(other) => {
                return Err(invalid(
                    "configurations.tool",
                    format!("{other:?} is not terraform or opentofu"),
                ));
            }
        };
        Ok(tool)
    }
}

fn normalise_base_path(p: &str) -> Result<String, ConfigError> {
    if !p.starts_with('/') {
        return Err(invalid(
            "server.base_path",
            format!("{p:?} must start with '/'"),
        ));
    }
    let ok = p.split('/').filter(|s| !s.is_empty()).all(|seg| {
        seg != "."
            && seg != ".."
            && seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
    });
    if !ok || p.contains("//") {
        return Err(invalid(
            "server.base_path",
            format!(
                "{p:?} may contain only letters, digits, '-', '.', '_', '~' between single slashes"
            ),
        ));
    }
    Ok(if p.ends_with('/') {
        p.to_string()
    } else {
        format!("{p}/")
    })
}

fn with_trailing_slash(mut url: url::Url) -> url::Url {
    if !url.path().ends_with('/') {
        let path = format!("{}/", url.path());
        url.set_path(&path);
    }
    url
}

fn parse_connect_to(key: &str, s: &str) -> Result<SocketAddr, ConfigError> {
    s.parse::<SocketAddr>().map_err(|_| {
        invalid(
            key,
            format!("{s:?} is not an IP address and port like 127.0.0.1:9443"),
        )
    })
}

/// Where the server's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsSource {
    /// `server.tls_cert` and `server.tls_key`.
    Files { cert: PathBuf, key: PathBuf },
    /// A CA and certificate generated into `<cache.dir>/tls` on first start.
    SelfSigned,
}

/// The validated configuration, one section per part of the program that uses it.
#[derive(Debug, Clone)]
pub struct Settings {
    pub server: ServerSettings,
    pub cache: CacheSettings,
    pub upstream: UpstreamSettings,
    /// `upstream.require_signature` (with per-host overrides) and `upstream.min_trust`.
    pub trust: crate::trust::TrustPolicy,
    /// Client authentication (`[auth]`).
    pub auth: crate::auth::AuthSettings,
    pub bundles: BundleSettings,
    /// `configurations.tool`: the CLI configuration directories are written for.
    pub tool: Tool,
    pub modules: ModuleSettings,
    pub complete_hashes: CompleteHashesSettings,
    /// Who uses what (`[usage]`).
    pub usage: crate::usage::UsageSettings,
    /// The CLIs' own releases (`[releases]`).
    pub releases: ReleaseSettings,
    /// The git cache (`[git]`).
    pub git: GitSettings,
    /// Publishing to private namespaces (`[publishing]`; the namespaces themselves are in
    /// `trust.private`).
    pub publishing: PublishSettings,
    /// Which versions are admitted (`[policy]`): rules, cooldown, the rules file.
    pub policy: crate::policy::PolicySettings,
}

impl Settings {
    /// Refuses a server whose git door would be an open proxy for a host's credential: a git
    /// host with a `token` or `token_file` (its own, or that of the centre it goes `via`) on a
    /// mirror without client authentication, where anyone could fetch every repository that
    /// credential reads. Checked when a server starts (one-off commands serve nobody).
    pub fn check_git_credentials(&self) -> Result<(), ConfigError> {
        if self.auth.enabled() {
            return Ok(());
        }
        for host in &self.git.allowed_hosts {
            let own = self.upstream.host(host);
            let (holder, hs) = match &own.via {
                Some(via) => (via.host.clone(), self.upstream.host(&via.host)),
                None => (host.clone(), own),
            };
            let key = if hs.token.is_some() {
                "token"
            } else if hs.token_file.is_some() {
                "token_file"
            } else {
                continue;
            };
            return Err(invalid(
                format!("upstream.hosts.{:?}.{key}", holder.as_str()),
                format!(
                    "git.allowed_hosts names {host}, whose repositories are fetched with this \
                     credential, but client authentication is off ([[auth.clients]] or \
                     [[auth.issuers]]): anyone could read every repository it reaches; turn \
                     authentication on (and give rules `git` patterns) or remove the credential"
                ),
            ));
        }
        Ok(())
    }
}

/// `[modules]`, validated.
#[derive(Debug, Clone)]
pub struct ModuleSettings {
    /// Origin of module sources written with the mirror's own hostname (namespace not aliased).
    pub default_registry: Hostname,
    /// Namespace -> origin registry, for sources written with the mirror's own hostname.
    pub aliases: BTreeMap<String, Hostname>,
    /// Most bytes of a module archive fetched from an origin.
    pub max_archive_size: u64,
    pub limits: crate::package::PackLimits,
    pub git: crate::upstream::GitLimits,
}

impl ModuleSettings {
    /// The origin registry of a module source written with the mirror's own hostname.
    pub fn origin_of(&self, namespace: &str) -> &Hostname {
        self.aliases
            .get(&namespace.to_ascii_lowercase())
            .unwrap_or(&self.default_registry)
    }
}

/// `[server]`, validated: what the listener needs.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    pub listen: SocketAddr,
    /// Always starts and ends with `/`.
    pub base_path: String,
    pub tls: TlsSource,
    pub public_url: Option<url::Url>,
    pub shutdown_grace: Duration,
    /// After SIGTERM, how long to keep accepting connections while `/readyz` says draining.
    pub drain_delay: Duration,
    /// How often the certificate files are checked for changes (zero: only on SIGHUP).
    pub tls_reload_interval: Duration,
    /// Log one line per request (target `provender::access`).
    pub access_log: bool,
    /// How long a client request may wait for its answer to start (its head): every call made
    /// for it is cut off then, and it is answered 504 with `Retry-After`. The git door and
    /// uploads are outside it (`server.request_budget`).
    pub request_budget: Duration,
    /// How long `/readyz` waits for the store (`server.ready_timeout`).
    pub ready_timeout: Duration,
    pub connections: ConnectionLimits,
}

/// How long clients may take and how many connections they may hold (`[server]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// From accepting a connection to the end of its TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// HTTP/1.1: for a whole request head, counted from the end of the previous response (or
    /// from the first byte of a new connection).
    pub header_read_timeout: Duration,
    /// How long a connection may have no request in flight.
    pub idle_timeout: Duration,
    /// HTTP/2: how often to ping the client (`None`: never).
    pub http2_keep_alive_interval: Option<Duration>,
    /// HTTP/2: how long to wait for a ping's answer before closing the connection.
    pub http2_keep_alive_timeout: Duration,
    /// Open connections at most; more are closed as soon as they are accepted.
    pub max_connections: usize,
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

/// `[bundles]`, validated.
#[derive(Debug, Clone, Default)]
pub struct BundleSettings {
    /// The key `export --bundle` signs with.
    pub signing_key_file: Option<PathBuf>,
    /// The sites whose bundles `import` trusts.
    pub trusted_site_keys: Vec<crate::trust::site::SitePublicKey>,
}

impl ServerSettings {
    /// The URL clients use to reach the mirror, for logs and the help page.
    pub fn public_url(&self) -> url::Url {
        if let Some(u) = &self.public_url {
            return u.clone();
        }
        let scheme = "https";
        let host = match self.listen.ip() {
            ip if ip.is_unspecified() || ip.is_loopback() => "localhost".to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        let port = match self.listen.port() {
            443 => String::new(),
            p => format!(":{p}"),
        };
        url::Url::parse(&format!("{scheme}://{host}{port}{}", self.base_path))
            .expect("listen address and base path form a valid URL")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(toml: &str) -> String {
        match Config::from_toml(toml).and_then(|c| c.validate()) {
            Ok(_) => panic!("expected an error for {toml}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn defaults_validate() {
        let s = Config::default().validate().unwrap();
        assert_eq!(s.server.listen.to_string(), "127.0.0.1:8443");
        assert_eq!(s.server.base_path, "/");
        assert_eq!(s.server.tls, TlsSource::SelfSigned);
        assert_eq!(s.upstream.allowed_hosts.len(), 2);
        assert_eq!(s.server.public_url().as_str(), "https://localhost:8443/");
    }

    #[test]
    fn the_documented_example_parses() {
        let text = include_str!("../config.toml.example");
        let cfg = Config::from_toml(text).unwrap();
        assert_eq!(cfg.server.listen, "127.0.0.1:8443");
        // The values it shows are the defaults.
        let documented = cfg.validate().unwrap();
        let defaults = Config::from_toml("").unwrap().validate().unwrap();
        assert_eq!(documented.complete_hashes, defaults.complete_hashes);
        assert_eq!(documented.usage, defaults.usage);
        assert_eq!(documented.server.connections, defaults.server.connections);
        assert_eq!(
            documented.complete_hashes.max_bandwidth.map(|b| b.get()),
            Some(20 * 1024 * 1024)
        );
    }

    #[test]
    fn errors_name_the_key() {
        assert!(err("[server]\nlisten = 'nope'").contains("server.listen"));
        assert!(err("[server]\nbase_path = 'x'").contains("server.base_path"));
        assert!(err("[server]\nbase_path = '/a/../b'").contains("server.base_path"));
        assert!(err("[server]\ntls_cert = 'a.pem'").contains("server.tls_key"));
        assert!(
            err("[upstream]\nallowed_hosts = ['ok.example', 'bad host']")
                .contains("upstream.allowed_hosts[1]")
        );
        assert!(err("[upstream]\nplatforms = ['linux']").contains("upstream.platforms[0]"));
        assert!(
            err("[upstream.hosts.'other.example']\ntoken = 'x'")
                .contains("not listed in upstream.allowed_hosts")
        );
        assert!(
            err("[upstream.hosts.'registry.terraform.io']\nconnect_to = 'x'")
                .contains("connect_to")
        );
        assert!(err("[server]\nlisten = 5").contains("listen"));
        assert!(err("[server]\nlisen = '1.2.3.4:1'").contains("lisen"));
        assert!(err("[cache]\nindex_ttl = 'soon'").contains("index_ttl"));
        assert!(
            err("[server]\ntls_reload_interval = '10ms'").contains("server.tls_reload_interval")
        );
        assert!(err("[upstream]\nca_file = '/nonexistent/ca.pem'").contains("upstream.ca_file"));
        assert!(err("[complete_hashes]\nhold = '2h'").contains("complete_hashes.hold"));
        assert!(err("[complete_hashes]\nhold = 'soon'").contains("hold"));
    }

    #[test]
    fn a_host_via_a_centre_is_checked() {
        let ok = |toml: &str| {
            Config::from_toml(toml)
                .and_then(|c| c.validate())
                .unwrap_or_else(|e| panic!("{toml}: {e}"))
                .upstream
        };
        let host = |s: &str| Hostname::parse(s).unwrap();
        let tf = "[upstream.hosts.'registry.terraform.io']\n";
        // The base URL gets its `/`; the centre's own table (its credential) is accepted
        // without the centre being an allowed origin.
        let upstream = ok(&format!(
            "{tf}via = 'https://central.example.com/mirror'\nfallback = 'origin'\n\n\
             [upstream.hosts.'central.example.com']\ntoken = 'edge-token'\n"
        ));
        let via = upstream.via(&host("registry.terraform.io")).unwrap();
        assert_eq!(via.url.as_str(), "https://central.example.com/mirror/");
        assert_eq!(via.host, host("central.example.com"));
        assert!(via.fallback_to_origin);
        assert_eq!(
            via.service_base(&host("registry.terraform.io"), "providers.v1")
                .unwrap()
                .as_str(),
            "https://central.example.com/mirror/v1/providers/registry.terraform.io/"
        );
        assert!(upstream.via(&host("registry.opentofu.org")).is_none());
        // A port is part of the centre's name, as tokens are keyed.
        let upstream = ok(&format!("{tf}via = 'https://central.example.com:8443/'"));
        let via = upstream.via(&host("registry.terraform.io")).unwrap();
        assert_eq!(via.host, host("central.example.com:8443"));
        assert!(!via.fallback_to_origin);

        for (toml, key) in [
            ("via = 'http://central.example.com/'", "via"),
            ("via = 'https://user:pw@central.example.com/'", "via"),
            ("via = 'https://central.example.com/?a=b'", "via"),
            ("via = 'https://registry.terraform.io/'", "via"),
            ("via = 'nope'", "via"),
            ("fallback = 'origin'", "fallback"),
            (
                "via = 'https://c.example/'\nfallback = 'sometimes'",
                "fallback",
            ),
            ("token = 'a'\ntoken_file = '/etc/hostname'", "token_file"),
            ("token_file = '/nonexistent/token'", "token_file"),
        ] {
            let message = err(&format!("{tf}{toml}"));
            assert!(
                message.contains(&format!("upstream.hosts.\"registry.terraform.io\".{key}")),
                "{toml}: {message}"
            );
        }
        // Secrets stay out of `Debug`.
        let upstream = ok(&format!(
            "{tf}via = 'https://c.example/'\n\n[upstream.hosts.'c.example']\ntoken = 'hush-0123'\n"
        ));
        assert!(!format!("{upstream:?}").contains("hush-0123"));
    }

    #[test]
    fn release_settings_are_checked() {
        let defaults = Config::default().validate().unwrap().releases;
        assert!(!defaults.enabled);
        assert_eq!(
            defaults.hashicorp_url.as_str(),
            "https://releases.hashicorp.com/"
        );
        assert!(
            err("[releases]\nhashicorp_url = 'http://x.example'")
                .contains("releases.hashicorp_url")
        );
        assert!(err("[releases]\nopentofu_url = 'nope'").contains("releases.opentofu_url"));
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("key.asc");
        std::fs::write(&bad, "not a key").unwrap();
        assert!(
            err(&format!(
                "[releases]\nopentofu_key_file = '{}'",
                bad.display()
            ))
            .contains("releases.opentofu_key_file")
        );
        assert!(
            err("[releases]\nhashicorp_key_file = '/nonexistent.asc'")
                .contains("releases.hashicorp_key_file")
        );
        assert_eq!(defaults.max_build_size, 512 << 20);
        assert!(err("[releases]\nmax_build_size = '1 KiB'").contains("releases.max_build_size"));
    }

    #[test]
    fn a_shared_directory_store_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().display();
        let ok = format!("[cache]\nbackend = 'directory'\n[cache.object_store]\nbucket = '{path}'");
        let settings = Config::from_toml(&ok).unwrap().validate().unwrap();
        assert!(settings.cache.fleet_single_fetch);
        let StorageSettings::Object(os) = settings.cache.storage else {
            panic!("a directory is an object store");
        };
        assert_eq!(os.provider, crate::storage::Provider::Directory);
        assert!(
            err("[cache]\nbackend = 'directory'\n[cache.object_store]\nbucket = 'relative'")
                .contains("cache.object_store.bucket")
        );
        assert!(
            err(&ok.replace(&format!("{path}'"), &format!("{path}/missing'")))
                .contains("cannot read the directory")
        );
        assert!(
            err(&format!("{ok}\nendpoint = 'https://s3.example'"))
                .contains("cache.object_store.endpoint")
        );
        let redirect = ok.replace(
            "backend = 'directory'",
            "backend = 'directory'\nredirect_downloads = true",
        );
        assert!(err(&redirect).contains("cache.redirect_downloads"));
    }

    #[test]
    fn deadlines_are_checked_naming_the_key() {
        let defaults = Config::from_toml("").unwrap().validate().unwrap();
        assert_eq!(defaults.server.request_budget, Duration::from_secs(30));
        assert_eq!(defaults.server.ready_timeout, Duration::from_secs(5));
        for key in ["request_budget", "ready_timeout"] {
            let e = err(&format!("[server]\n{key} = '0s'"));
            assert!(e.contains(&format!("server.{key}")), "{e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let store = format!(
            "[cache]\nbackend = 'directory'\n[cache.object_store]\nbucket = '{}'",
            dir.path().display()
        );
        let settings = Config::from_toml(&format!("{store}\nrequest_timeout = '6s'\nretries = 0"))
            .unwrap()
            .validate()
            .unwrap();
        let StorageSettings::Object(os) = settings.cache.storage else {
            panic!("a directory is an object store");
        };
        assert_eq!(os.deadlines.request, Duration::from_secs(6));
        assert_eq!(os.deadlines.retries, 0);
        assert_eq!(os.deadlines.idle, Duration::from_secs(10));
        for key in [
            "connect_timeout",
            "request_timeout",
            "idle_timeout",
            "breaker_cooldown",
        ] {
            let e = err(&format!("{store}\n{key} = '0s'"));
            assert!(e.contains(&format!("cache.object_store.{key}")), "{e}");
        }
        let e = err(&format!("{store}\nconnect_timeout = '20s'"));
        assert!(e.contains("cache.object_store.request_timeout"), "{e}");
        let e = err(&format!("{store}\nretries = 11"));
        assert!(e.contains("cache.object_store.retries"), "{e}");
    }

    #[test]
    fn connection_limits_are_checked() {
        for key in [
            "tls_handshake_timeout",
            "header_read_timeout",
            "idle_timeout",
            "http2_keep_alive_timeout",
        ] {
            let e = err(&format!("[server]\n{key} = '0s'"));
            assert!(e.contains(&format!("server.{key}")), "{e}");
        }
        assert!(err("[server]\nmax_connections = 0").contains("server.max_connections"));
        assert!(err("[server]\nmax_connections = -1").contains("max_connections"));
        assert!(
            err("[server]\nmax_connections = 3000000000000000000")
                .contains("server.max_connections")
        );
        assert!(err("[server]\nidle_timeout = 'soon'").contains("idle_timeout"));

        let limits = |toml: &str| {
            Config::from_toml(toml)
                .and_then(|c| c.validate())
                .unwrap()
                .server
                .connections
        };
        let defaults = limits("");
        assert_eq!(defaults.header_read_timeout, Duration::from_secs(10));
        assert_eq!(defaults.idle_timeout, Duration::from_secs(60));
        assert_eq!(defaults.max_connections, 4096);
        assert_eq!(
            defaults.http2_keep_alive_interval,
            Some(Duration::from_secs(20))
        );
        // Zero turns HTTP/2 pings off.
        let off = limits("[server]\nhttp2_keep_alive_interval = '0s'");
        assert_eq!(off.http2_keep_alive_interval, None);
    }

    #[test]
    fn signature_policy_is_global_with_per_host_overrides() {
        let s = Config::from_toml(
            "[upstream]\nallowed_hosts = ['a.example', 'b.example']\nrequire_signature = false\n\
             [upstream.hosts.'b.example']\nrequire_signature = true\ntoken = 'registry-secret'\n",
        )
        .unwrap()
        .validate()
        .unwrap();
        let host = |h: &str| Hostname::parse(h).unwrap();
        assert!(!s.trust.signature_required(&host("a.example")));
        assert!(s.trust.signature_required(&host("b.example")));
        assert!(
            Config::default()
                .validate()
                .unwrap()
                .trust
                .signature_required(&host("registry.terraform.io"))
        );
        let printed = format!("{s:?}");
        assert!(!printed.contains("registry-secret"), "{printed}");
    }

    #[test]
    fn security_limits_are_checked() {
        assert!(err("[upstream]\nmax_zip_entries = 0").contains("upstream.max_zip_entries"));
        assert!(err("[upstream]\nidle_timeout = '0s'").contains("upstream.idle_timeout"));
        assert!(
            err("[upstream]\nmax_response_headers = 1").contains("upstream.max_response_headers")
        );
        assert!(err("[auth]\ntokens = ['short']").contains("auth.tokens[0]"));
        assert!(err("[auth]\nsurprise = 1").contains("surprise"));
        assert!(err("[upstream]\nmin_trust = 'trusty'").contains("upstream.min_trust"));
        assert!(
            err("[bundles]\ntrusted_keys = ['ed25519:xx']").contains("bundles.trusted_keys[0]")
        );
        assert!(err("[configurations]\ntool = 'pulumi'").contains("configurations.tool"));
    }

    #[test]
    fn proxies_are_checked_and_their_passwords_stay_hidden() {
        for bad in [
            "socks5://proxy.example:1080",
            "http://:3128",
            "http://proxy.example:3128/path",
            "not a url",
            "http://egress:hunter2/x@proxy.example:3128",
        ] {
            let e = err(&format!("[upstream]\nproxy = '{bad}'"));
            assert!(e.contains("upstream.proxy"), "{bad}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        let raw =
            Config::from_toml("[upstream]\nproxy = 'http://egress:hunter2@proxy.example'").unwrap();
        assert!(!format!("{raw:?}").contains("hunter2"));
        let s = Config::from_toml("[upstream]\nproxy = 'http://egress:hunter2@proxy.example:3128'")
            .unwrap()
            .validate()
            .unwrap();
        let proxy = s.upstream.proxy.as_ref().unwrap();
        assert_eq!(proxy.0.password(), Some("hunter2"), "kept for use");
        for shown in [format!("{s:?}"), proxy.to_string()] {
            assert!(!shown.contains("hunter2"), "{shown}");
        }
        assert!(
            proxy.to_string().contains("egress:***@proxy.example:3128"),
            "{proxy}"
        );
    }

    #[test]
    fn base_path_gets_a_trailing_slash() {
        let s = Config::from_toml("[server]\nbase_path = '/providers'")
            .unwrap()
            .validate()
            .unwrap();
        assert_eq!(s.server.base_path, "/providers/");
    }

    #[test]
    fn a_public_registry_or_an_origin_is_never_the_publishing_hostname() {
        let private = "[publishing.namespaces.acme]\n";
        for (hostname, extra, says) in [
            // Not an allowed host, and still refused.
            (
                "registry.terraform.io",
                "[upstream]\nallowed_hosts = ['registry.opentofu.org']\n",
                "public registry",
            ),
            ("registry.opentofu.org", "", "public registry"),
            (
                "r.example.com",
                "[upstream]\nallowed_hosts = ['registry.terraform.io', 'r.example.com']\n\
                 [upstream.hosts.'r.example.com']\ntoken = 't'\n",
                "[upstream.hosts]",
            ),
            (
                "modules.example.com",
                "[upstream]\nallowed_hosts = ['registry.terraform.io', 'modules.example.com']\n\
                 [modules.aliases]\nnet = 'modules.example.com'\n",
                "modules.aliases",
            ),
        ] {
            let text = format!("{extra}[publishing]\nhostname = '{hostname}'\n{private}");
            let e = err(&text);
            assert!(e.contains("publishing.hostname"), "{e}");
            assert!(e.contains(says), "{hostname}: {e}");
        }
    }
}
