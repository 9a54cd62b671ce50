//! `[bundles]`: the keys that sign and admit bundles carried across an air gap.

use std::path::PathBuf;

use serde::Deserialize;

use super::{ConfigError, invalid};

/// `[bundles]`: the chain of custody of bundles carried across an air gap.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct BundlesConfig {
    /// This site's private key (`provender keygen`); `export --bundle` signs with it.
    #[schemars(extend("format" = "path"))]
    pub signing_key_file: Option<PathBuf>,
    /// Public keys of the sites whose bundles `import` trusts.
    pub trusted_keys: Vec<String>,
}

impl BundlesConfig {
    /// `[bundles]`
    pub(super) fn validate(&self) -> Result<BundleSettings, ConfigError> {
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

/// `[bundles]`, validated.
#[derive(Debug, Clone, Default)]
pub struct BundleSettings {
    /// The key `export --bundle` signs with.
    pub signing_key_file: Option<PathBuf>,
    /// The sites whose bundles `import` trusts.
    pub trusted_site_keys: Vec<crate::trust::site::SitePublicKey>,
}
