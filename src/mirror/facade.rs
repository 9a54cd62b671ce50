//! The provider registry protocol, served from the mirror's cache.
//!
//! Some clients only speak the registry protocol: `terraform providers mirror` always goes to
//! origin registries, and a CLI `host` block redirects a registry hostname's `providers.v1`
//! service. Pointing such a block at `<base>v1/providers/<hostname>/` sends them through
//! provender: version lists and download metadata come from the same verified records as the
//! mirror protocol, SHA256SUMS and its signature are the origin's bytes, and `download_url`
//! names provender's own archive URL. Because the client then verifies the origin's signature
//! itself, lock files written this way carry the signed `zh:` hashes of every platform.

use std::sync::Arc;

use bytes::Bytes;

use crate::address::{Platform, ProviderAddr, Version};
use crate::error::{Error, Result};
use crate::records::docs;

use super::Mirror;

impl Mirror {
    /// `v1/providers/:hostname/:namespace/:type/versions`
    pub async fn registry_versions(self: &Arc<Self>, addr: &ProviderAddr) -> Result<Bytes> {
        let rec = self.versions(addr).await?;
        let versions = rec
            .versions
            .iter()
            .map(|v| docs::RegistryVersion {
                version: v.version.to_string(),
                protocols: v.protocols.clone(),
                platforms: v
                    .platforms
                    .iter()
                    .filter(|p| self.settings.upstream.platform_allowed(p))
                    .map(|p| docs::RegistryPlatform {
                        os: p.os.clone(),
                        arch: p.arch.clone(),
                    })
                    .collect(),
            })
            .collect();
        Ok(docs::to_bytes(&docs::RegistryVersions { versions }))
    }

    /// `v1/providers/:hostname/:namespace/:type/:version/download/:os/:arch`
    pub async fn registry_download(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
    ) -> Result<Bytes> {
        self.check_host(addr)?;
        let not_found =
            || Error::NotFound(format!("{addr} {version} has no package for {platform}"));
        if !self.settings.upstream.platform_allowed(platform) {
            return Err(not_found());
        }
        let rec = self.version_record(addr, version).await?;
        let pkg = rec.packages.get(platform).ok_or_else(not_found)?;
        let n = rec.sums_index(&pkg.shasums_url).ok_or_else(|| {
            Error::unexpected(format!("{addr} {version}: SHA256SUMS not recorded"))
        })?;
        // Absolute-path references: the client resolves them against this document's URL, so
        // they never depend on a Host header.
        let base = &self.settings.server.base_path;
        // The CLI fetches these three without credentials: with authentication on, they carry an
        // expiring signature (see `auth`). Each URL is the base path plus the path it is signed
        // over.
        let now = std::time::SystemTime::now();
        let url = |path: String| {
            self.settings
                .auth
                .signed_url(format!("{base}{path}"), &path, now)
        };
        Ok(docs::to_bytes(&docs::RegistryDownload {
            protocols: pkg.protocols.clone(),
            os: platform.os.clone(),
            arch: platform.arch.clone(),
            filename: pkg.filename.clone(),
            download_url: url(addr.archive_path(version, platform)),
            shasums_url: url(crate::auth::sums_path(addr, version, n, false)),
            shasums_signature_url: url(crate::auth::sums_path(addr, version, n, true)),
            shasum: pkg.shasum.clone(),
            signing_keys: docs::RegistrySigningKeys {
                gpg_public_keys: pkg.signing_keys.clone(),
            },
        }))
    }

    /// `v1/providers/:hostname/:namespace/:type/:version/SHA256SUMS/:n[.sig]`: the origin's bytes.
    pub async fn registry_sums(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        version: &Version,
        index: usize,
        signature: bool,
    ) -> Result<bytes::Bytes> {
        self.check_host(addr)?;
        let rec = self.version_record(addr, version).await?;
        let what = if signature {
            "SHA256SUMS signature"
        } else {
            "SHA256SUMS"
        };
        if index >= rec.sums.len() {
            return Err(Error::NotFound(format!(
                "{addr} {version} has no {what} number {index}"
            )));
        }
        self.meta
            .read_sums(addr, version, index, signature)
            .await?
            .ok_or_else(|| {
                Error::unexpected(format!("the stored {what} of {addr} {version} is missing"))
            })
    }
}
