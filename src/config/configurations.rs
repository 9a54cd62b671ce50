//! `[configurations]`: which CLI the configuration directories `seed` and `lock` read are
//! written for.

use serde::Deserialize;

use super::{ConfigError, invalid};

/// `[configurations]`: how `seed` and `lock` read configuration directories.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ConfigurationsConfig {
    /// Which CLI the configuration directories given to `seed` and `lock` are written for:
    /// `"terraform"` or `"opentofu"` (unset: terraform). For OpenTofu, short sources
    /// (`hashicorp/aws`) mean registry.opentofu.org and `*.tofu` files are read. `--tool`
    /// overrides it.
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

impl ConfigurationsConfig {
    /// `[configurations]`
    pub(super) fn validate(&self) -> Result<Tool, ConfigError> {
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
