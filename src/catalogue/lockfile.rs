//! A ready `.terraform.lock.hcl` block for a cached version, built from its verified record
//! alone: the `h1:` of each platform asked for, and the `zh:` (the archive's SHA-256, as the
//! signed SHA256SUMS lists it) of every platform the record knows, as `terraform init` itself
//! records them. Hashes are sorted, as Terraform writes them, so the block is what Terraform
//! would keep.

use serde::Serialize;

use super::{API_VERSION, VersionEntry};
use crate::address::{Platform, ProviderAddr};
use crate::error::{Error, Result};

/// `GET -/api/v1/providers/<hostname>/<namespace>/<type>/<version>/lock?platform=..`.
#[derive(Debug, Clone, Serialize)]
pub struct LockBlock {
    pub api_version: u32,
    pub source: String,
    pub version: String,
    /// The platforms asked for.
    pub platforms: Vec<String>,
    /// Platforms asked for whose `h1:` is not known yet: their archives are checked against
    /// the `zh:` hashes alone until the complete-hashes job (or a download) adds it.
    pub without_h1: Vec<String>,
    /// The block, ready to paste into `.terraform.lock.hcl`.
    pub lock_file: String,
}

impl LockBlock {
    pub(super) fn of(
        addr: &ProviderAddr,
        version: &VersionEntry,
        platforms: &[Platform],
    ) -> Result<LockBlock> {
        let mut hashes: Vec<&str> = Vec::new();
        let mut without_h1 = Vec::new();
        for platform in platforms {
            let name = platform.to_string();
            let entry = version
                .platforms
                .iter()
                .find(|p| p.platform == name)
                .ok_or_else(|| {
                    Error::NotFound(format!(
                        "{addr} {} has no package for {name}",
                        version.version
                    ))
                })?;
            match &entry.h1 {
                Some(h1) => hashes.push(h1),
                None => without_h1.push(name),
            }
        }
        hashes.extend(version.platforms.iter().filter_map(|p| p.zh.as_deref()));
        hashes.sort_unstable();
        hashes.dedup();
        if hashes.is_empty() {
            return Err(Error::NotFound(format!(
                "{addr} {} has no verified hashes in this cache",
                version.version
            )));
        }
        let mut lock_file = format!(
            "provider \"{addr}\" {{\n  version = \"{}\"\n  hashes = [\n",
            version.version
        );
        for hash in hashes {
            lock_file.push_str(&format!("    \"{hash}\",\n"));
        }
        lock_file.push_str("  ]\n}\n");
        Ok(LockBlock {
            api_version: API_VERSION,
            source: addr.to_string(),
            version: version.version.clone(),
            platforms: platforms.iter().map(Platform::to_string).collect(),
            without_h1,
            lock_file,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::PlatformEntry;

    fn platform(name: &str, h1: Option<&str>, zh: &str) -> PlatformEntry {
        PlatformEntry {
            platform: name.into(),
            sha256: None,
            h1: h1.map(str::to_string),
            zh: Some(zh.into()),
            cached: true,
            size: None,
            last_used: None,
            origin_url: None,
        }
    }

    #[test]
    fn a_block_has_the_h1_of_the_platforms_asked_for_and_every_zh_sorted() {
        let version = VersionEntry {
            version: "1.2.3".into(),
            trust: "community",
            signing_key: None,
            fetched_at: None,
            complete_hashes: false,
            platforms: vec![
                platform("darwin_arm64", None, "zh:bb"),
                platform("linux_amd64", Some("h1:LL="), "zh:aa"),
                platform("windows_amd64", Some("h1:WW="), "zh:cc"),
            ],
        };
        let addr = ProviderAddr::parse("registry.terraform.io/acme/foo").unwrap();
        let asked = [
            Platform::parse("linux_amd64").unwrap(),
            Platform::parse("darwin_arm64").unwrap(),
        ];
        let block = LockBlock::of(&addr, &version, &asked).unwrap();
        assert_eq!(
            block.lock_file,
            "provider \"registry.terraform.io/acme/foo\" {\n  version = \"1.2.3\"\n  hashes = [\n    \"h1:LL=\",\n    \"zh:aa\",\n    \"zh:bb\",\n    \"zh:cc\",\n  ]\n}\n"
        );
        assert_eq!(block.without_h1, ["darwin_arm64"]);
        let unknown = [Platform::parse("linux_arm64").unwrap()];
        let e = LockBlock::of(&addr, &version, &unknown).unwrap_err();
        assert!(e.to_string().contains("no package for linux_arm64"), "{e}");
    }
}
