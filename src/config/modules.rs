//! `[modules]`: the module registry facade, its origins and the bounds on module packages.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, invalid};
use crate::address::Hostname;
use crate::upstream::UpstreamSettings;

/// `[modules]`: the module registry facade.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ModulesConfig {
    /// The origin registry of module sources written with the mirror's own hostname, unless
    /// their namespace is in `aliases`. Unset: registry.terraform.io when it is allowed, else
    /// the first of `upstream.allowed_hosts`.
    pub default_registry: Option<String>,
    /// Namespace -> origin registry, for sources written with the mirror's own hostname.
    pub aliases: BTreeMap<String, String>,
    /// Largest module archive accepted from an origin (at least 1 KiB).
    #[schemars(with = "String", extend("format" = "size"))]
    pub max_archive_size: bytesize::ByteSize,
    /// Most bytes a module package may unpack to, counted as they are read, whatever the
    /// archive's headers claim (at least 1 KiB).
    #[schemars(with = "String", extend("format" = "size"))]
    pub max_unpacked_size: bytesize::ByteSize,
    /// Most entries of a module package (also the directories an archive only implies by its
    /// file names).
    pub max_entries: usize,
    /// Most bytes on disk of one fetch of a git module source, watched while it downloads.
    #[schemars(with = "String", extend("format" = "size"))]
    pub max_git_size: bytesize::ByteSize,
    /// Most objects of one fetch of a git module source.
    pub max_git_objects: u64,
    /// How long one fetch of a git module source may take.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub git_timeout: Duration,
    /// The git executable (2.31 or later, checked at start-up; without it git sources are
    /// refused).
    #[schemars(extend("format" = "path"))]
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

impl ModulesConfig {
    /// `[modules]`; the registries it names must be in `upstream.allowed_hosts`.
    pub(super) fn validate(
        &self,
        upstream: &UpstreamSettings,
    ) -> Result<ModuleSettings, ConfigError> {
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
