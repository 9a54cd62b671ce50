//! The URLs this server hands out, and the documents that carry them.
//!
//! The mirror answers with verified records; only the server knows its base path and whether
//! client authentication is on. With it on, every URL a CLI fetches without credentials (archives,
//! SHA256SUMS and their signatures, module packages) carries an expiring signature over its
//! canonical path (see [`crate::auth`]), so it differs from one request to the next; with it off,
//! a `<version>.json` rendering is kept with its record.

use std::time::SystemTime;

use bytes::Bytes;

use crate::address::{ModuleAddr, ModulePath, Platform, ProviderAddr, Version};
use crate::config::Settings;
use crate::hash;
use crate::mirror::RegistryPackage;
use crate::records::{ModuleRecord, VersionRecord, docs};

/// How URLs are written for one response.
pub struct Links<'a> {
    settings: &'a Settings,
    /// The client the URLs are handed to: signed into them, so that the download is that
    /// client's (its rules, its usage).
    client: &'a str,
    now: SystemTime,
}

impl<'a> Links<'a> {
    pub fn new(settings: &'a Settings, client: &'a str) -> Links<'a> {
        Links {
            settings,
            client,
            now: SystemTime::now(),
        }
    }

    /// `url`, signed over `path` and the client when authentication is on.
    fn signed(&self, url: String, path: &str) -> String {
        self.settings
            .auth
            .signed_url(url, path, self.client, self.now)
    }

    /// An absolute-path URL on this server for `path` (below the base path), signed over it.
    fn absolute(&self, path: &str) -> String {
        self.signed(format!("{}{path}", self.settings.server.base_path), path)
    }

    /// `<version>.json` of the network mirror protocol: each served platform's archive, by a
    /// URL relative to the document, with its `h1:` (when known) and `zh:` hashes.
    pub fn mirror_version(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        rec: &VersionRecord,
    ) -> Bytes {
        let render = || {
            let mut doc = docs::MirrorVersion::default();
            for (platform, pkg) in rec
                .packages
                .iter()
                .filter(|(p, _)| self.settings.upstream.platform_allowed(p))
            {
                let mut hashes: Vec<String> = pkg.h1.iter().map(|h| h.to_string()).collect();
                hashes.push(hash::zh(&pkg.shasum));
                let url = self.signed(
                    addr.archive_filename(version, platform),
                    &addr.archive_path(version, platform),
                );
                doc.archives
                    .insert(platform.to_string(), docs::MirrorArchive { hashes, url });
            }
            docs::to_bytes(&doc)
        };
        if self.settings.auth.enabled() {
            return render();
        }
        // Records are immutable (a new `h1:` makes a new record), so the rendering is kept.
        rec.rendered.get_or_init(render)
    }

    /// The registry protocol's download answer, naming this server's archive and SHA256SUMS
    /// URLs.
    pub fn registry_download(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
        answer: &RegistryPackage,
    ) -> Bytes {
        let pkg = &answer.package;
        let n = answer.sums;
        docs::to_bytes(&docs::RegistryDownload {
            protocols: pkg.protocols.clone(),
            os: platform.os.clone(),
            arch: platform.arch.clone(),
            filename: pkg.filename.clone(),
            download_url: self.absolute(&addr.archive_path(version, platform)),
            shasums_url: self.absolute(&crate::auth::sums_path(addr, version, n, false)),
            shasums_signature_url: self.absolute(&crate::auth::sums_path(addr, version, n, true)),
            shasum: pkg.shasum.to_string(),
            signing_keys: docs::RegistrySigningKeys {
                gpg_public_keys: pkg.signing_keys.clone(),
            },
            packages: answer.packages.clone(),
        })
    }

    /// A module version's package on this server, as its download answer gives it: an
    /// absolute-path reference (`/v1/modules/.../module.tar.gz[//subdir]?checksum=...`) that
    /// clients resolve against the download URL. go-getter checks the checksum before it
    /// unpacks anything.
    pub fn module_package(
        &self,
        addr: &ModuleAddr,
        version: &Version,
        rec: &ModuleRecord,
    ) -> String {
        let path = format!("v1/modules/{}", ModulePath::archive_path(addr, version));
        let mut location = format!("{}{path}", self.settings.server.base_path);
        if let Some(subdir) = &rec.subdir {
            location.push_str("//");
            location.push_str(subdir);
        }
        let mut query = vec![format!("checksum=sha256:{}", rec.sha256)];
        if self.settings.auth.enabled() {
            query.push(self.settings.auth.sign(&path, self.client, self.now));
        }
        location.push('?');
        location.push_str(&query.join("&"));
        location
    }
}
