//! `[publishing]`: the private namespaces of this registry's own hostname, their publishers'
//! keys and the registry's signing key, checked against the origins the other sections name.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::{ConfigError, invalid};
use super::{ModuleSettings, ServerSettings};
use crate::address::Hostname;
use crate::upstream::UpstreamSettings;

/// `[publishing]`: the organisation's own providers and modules, published to this registry
/// under its own hostname (private namespaces) instead of fetched from an origin.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PublishingConfig {
    /// The hostname sources name published providers and modules with
    /// (`mirror.example.com/acme/foo`); unset: the host (and port) of `server.public_url`.
    pub hostname: Option<String>,
    /// The registry's provider signing key: an armored OpenPGP secret key without a
    /// passphrase (`provender keygen --provider-signing`).
    #[schemars(extend("format" = "path"))]
    pub signing_key: Option<PathBuf>,
    /// Largest upload: a provider release's files together, or one module archive.
    #[schemars(with = "String", extend("format" = "size"))]
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
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
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
    pub(super) fn validate(
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
