//! Configuration: the TOML file, its built-in defaults, and validation.
//!
//! [`Config`] mirrors the file key by key (see `config.toml.example`). [`Config::validate`] turns
//! it into [`Settings`], the typed form the rest of the program uses, and refuses bad values with
//! a message that names the offending key. Validation touches no network and binds nothing, so a
//! bad file fails before the server starts.
//!
//! Each section is declared next to the code it configures wherever that module sits below this
//! one in the layers (`[auth]` in `auth`, `[usage]` in `usage`, `[policy]` in `policy`, `[cache]`
//! in `cache`, `[upstream]` in `upstream`, each with its own error type, taken in by
//! [`ConfigError`]). The doors above this module cannot hold a type it reads: their sections
//! (`[server]`, `[modules]`, `[git]`, `[releases]`, `[publishing]`, `[bundles]`,
//! `[complete_hashes]`, `[configurations]`) each have a file under `config/`, the type as
//! written, its validation and its validated form side by side. Every key's `///` comment is its
//! documentation: [`reference`] renders the configuration reference from them, with each key's
//! type and default taken from the code.

mod bundles;
mod complete_hashes;
mod configurations;
mod git;
mod modules;
mod publishing;
pub mod reference;
mod releases;
mod server;

use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use self::bundles::{BundleSettings, BundlesConfig};
pub use self::complete_hashes::{CompleteHashesConfig, CompleteHashesSettings};
pub use self::configurations::{ConfigurationsConfig, Tool};
pub use self::git::{GitConfig, GitSettings};
pub use self::modules::{ModuleSettings, ModulesConfig};
pub use self::publishing::{NamespaceConfig, NamespaceSettings, PublishSettings, PublishingConfig};
pub use self::releases::{ReleaseSettings, ReleasesConfig};
pub use self::server::{ConnectionLimits, ServerConfig, ServerSettings, TlsSource};
pub use crate::cache::{CacheConfig, CacheSettings, ObjectStoreConfig};
pub use crate::upstream::{
    HostConfig, HostSettings, ProxyText, ProxyUrl, UpstreamConfig, UpstreamSettings, parse_via,
};

/// The configuration file as written.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The listener: address, base path, TLS, the public URL, shutdown and the limits on
    /// client connections.
    pub server: ServerConfig,
    /// Where the cache is kept (local disk or an object store) and how long what it holds is
    /// served.
    pub cache: CacheConfig,
    /// The origins: which registries may be asked, how they are reached, and how what they
    /// send is trusted.
    pub upstream: UpstreamConfig,
    /// Client authentication and authorisation: tokens, named clients, OpenID Connect issuers,
    /// access rules, single sign-on and `terraform login`.
    pub auth: crate::auth::AuthConfig,
    /// The keys that sign bundles carried across an air gap, and those whose bundles are
    /// admitted.
    pub bundles: BundlesConfig,
    /// How `seed` and `lock` read Terraform or OpenTofu configuration directories.
    pub configurations: ConfigurationsConfig,
    /// The module registry facade: the origins of module sources and the bounds on module
    /// packages.
    pub modules: ModulesConfig,
    /// The background job that learns every platform's `h1:` of a version once any of it is
    /// requested.
    pub complete_hashes: CompleteHashesConfig,
    /// Who uses what: counts of the archives and module packages served, per client, version
    /// and day.
    pub usage: crate::usage::UsageConfig,
    /// A read-through mirror of the CLIs themselves (terraform and tofu releases).
    pub releases: ReleasesConfig,
    /// The git door: a read-through cache of the git repositories configurations name as
    /// module sources.
    pub git: GitConfig,
    /// The organisation's own providers and modules, published to this registry under its own
    /// hostname.
    pub publishing: PublishingConfig,
    /// Which versions are admitted: the platform team's rules, a cooldown for new versions, and
    /// operators' approvals. Every door obeys it: version lists leave out what it refuses, and a
    /// request for a refused version is answered 410 (denied) or 425 (held) naming the rule.
    pub policy: crate::policy::PolicyConfig,
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

impl From<crate::upstream::UpstreamConfigError> for ConfigError {
    fn from(e: crate::upstream::UpstreamConfigError) -> ConfigError {
        ConfigError::Invalid {
            key: e.key,
            message: e.message,
        }
    }
}

impl From<crate::cache::CacheConfigError> for ConfigError {
    fn from(e: crate::cache::CacheConfigError) -> ConfigError {
        ConfigError::Invalid {
            key: e.key,
            message: e.message,
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::address::Hostname;
    use crate::storage::StorageSettings;

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
