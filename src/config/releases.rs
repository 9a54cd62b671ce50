//! `[releases]`: the CLIs' own releases, their vendors' sites and keys.

use std::path::PathBuf;

use serde::Deserialize;

use super::{ConfigError, invalid};

/// `[releases]`: a read-through mirror of the CLIs' own releases.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ReleasesConfig {
    /// Serve terraform and tofu release builds, their SHA256SUMS and signatures under
    /// `<base>releases/`; each release's SHA256SUMS must be signed by its vendor's key and every
    /// build is checked against it before its first byte is served.
    pub enabled: bool,
    /// HashiCorp's release site: `<url>/terraform/<version>/<file>`.
    pub hashicorp_url: String,
    /// Where OpenTofu's release files are: `<url>/v<version>/<file>`.
    pub opentofu_url: String,
    /// OpenTofu's list of releases (`api.json`).
    pub opentofu_index_url: String,
    /// Replaces the built-in HashiCorp key that Terraform's SHA256SUMS must be signed with
    /// (armored public key file), should HashiCorp move to another key.
    #[schemars(extend("format" = "path"))]
    pub hashicorp_key_file: Option<PathBuf>,
    /// Replaces the built-in OpenTofu key, likewise.
    #[schemars(extend("format" = "path"))]
    pub opentofu_key_file: Option<PathBuf>,
    /// The largest release build served: a build is held back whole until its SHA-256 is
    /// checked, so this bounds what one download holds.
    #[schemars(with = "String", extend("format" = "size"))]
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
    pub(super) fn validate(&self) -> Result<ReleaseSettings, ConfigError> {
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
    pub(super) fn hosts(&self) -> Vec<String> {
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
