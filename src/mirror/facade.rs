//! The provider registry protocol, served from the mirror's cache.
//!
//! Some clients only speak the registry protocol: `terraform providers mirror` always goes to
//! origin registries, and a CLI `host` block redirects a registry hostname's `providers.v1`
//! service. Pointing such a block at `<base>v1/providers/<hostname>/` sends them through
//! provender: version lists and download metadata come from the same verified records as the
//! mirror protocol, SHA256SUMS and its signature are the origin's bytes, and `download_url`
//! names provender's own archive URL. Because the client then verifies the origin's signature
//! itself, lock files written this way carry the signed `zh:` hashes of every platform.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::address::{Platform, ProviderAddr, Version};
use crate::error::{Error, Result};
use crate::records::docs;

use super::ProviderMirror;
use super::core::Reach;
use crate::records::Package;

/// What a registry download answer is made of: the platform's verified package, the number
/// of the SHA256SUMS it is listed in (the server renders the URLs), and OpenTofu's `packages`
/// extension: what provender verified of every served platform, present only once the
/// requested platform's archive was hashed here (OpenTofu checks that entry's `package_size`
/// against the download, so it must not be missing or merely stated by the origin).
pub struct RegistryPackage {
    pub package: Package,
    pub sums: usize,
    pub packages: Option<BTreeMap<String, docs::RegistryPackageHashes>>,
}

impl ProviderMirror {
    /// `v1/providers/:hostname/:namespace/:type/versions`
    pub async fn registry_versions(&self, addr: &ProviderAddr, reach: &Reach) -> Result<Bytes> {
        let (rec, refused) = self.core.versions_judged(addr, reach).await?;
        let versions = rec
            .versions
            .iter()
            .map(|v| docs::RegistryVersion {
                version: v.version.to_string(),
                protocols: v.protocols.clone(),
                platforms: v
                    .platforms
                    .iter()
                    .filter(|p| self.core.settings().upstream.platform_allowed(p))
                    .map(|p| docs::RegistryPlatform {
                        os: p.os.clone(),
                        arch: p.arch.clone(),
                    })
                    .collect(),
            })
            .collect();
        // The one channel of a provider door that reaches a person: what the policy left out,
        // and why, is shown by `terraform init` even when no version meets the constraints.
        let warnings = refused.iter().map(|r| format!("provender: {r}")).collect();
        Ok(docs::to_bytes(&docs::RegistryVersions {
            versions,
            warnings,
        }))
    }

    /// `v1/providers/:hostname/:namespace/:type/:version/download/:os/:arch`
    pub async fn registry_download(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
        reach: &Reach,
    ) -> Result<RegistryPackage> {
        self.core.check_host(addr)?;
        let not_found =
            || Error::NotFound(format!("{addr} {version} has no package for {platform}"));
        if !self.core.settings().upstream.platform_allowed(platform) {
            return Err(not_found());
        }
        let record = self.core.version_record(addr, version, reach).await?;
        let package = record.packages.get(platform).ok_or_else(not_found)?.clone();
        let sums = package
            .shasums_url
            .as_deref()
            .and_then(|url| record.sums_index(url));
        let sums = sums.ok_or_else(|| {
            Error::unexpected(format!("{addr} {version}: SHA256SUMS not recorded"))
        })?;
        let settings = self.core.settings();
        let packages = (package.h1.is_some() && package.size.is_some()).then(|| {
            record
                .packages
                .iter()
                .filter(|(p, _)| settings.upstream.platform_allowed(p))
                .map(|(p, pkg)| (p.to_string(), docs::RegistryPackageHashes::of(pkg)))
                .collect()
        });
        Ok(RegistryPackage {
            package,
            sums,
            packages,
        })
    }

    /// `v1/providers/:hostname/:namespace/:type/:version/SHA256SUMS/:n[.sig]`: the origin's bytes.
    pub async fn registry_sums(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        index: usize,
        signature: bool,
        reach: &Reach,
    ) -> Result<bytes::Bytes> {
        self.core.check_host(addr)?;
        let rec = self.core.version_record(addr, version, reach).await?;
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
        self.core
            .meta()
            .read_sums(addr, version, index, signature)
            .await?
            .ok_or_else(|| {
                Error::unexpected(format!("the stored {what} of {addr} {version} is missing"))
            })
    }
}
