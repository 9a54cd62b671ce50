//! The module registry protocol, as a client, and what a module download answer may name.
//!
//! A module version's `download` answer names where its package is, in go-getter's syntax:
//! an archive over HTTPS (by extension or `?archive=`), a `git::https://...?ref=...` source,
//! a plain HTTPS URL that redirects by `X-Terraform-Get` (go-getter's "directory" form), or a
//! GitHub shorthand. [`Location::parse`] reads it the way Terraform does; sources provender
//! cannot fetch (`git::ssh`, `s3::`, `gcs::`, `hg::`, local paths) are refused with an error
//! naming the source, never passed on.

use url::Url;

use super::{Operation, Result, Upstream, UpstreamError, join};
use crate::address::{Hostname, ModuleAddr, Version};
use crate::package::Format;

/// Most `X-Terraform-Get` hops followed from a plain URL (go-getter's own limit).
const MAX_GET_HOPS: usize = 10;

/// Where a module package is, as a download answer names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// An archive over HTTP(S).
    Archive {
        url: Url,
        format: Format,
        /// The origin's `//subdir`; `*` is kept as `strip_top`.
        subdir: Option<String>,
        /// The archive holds one top-level directory that is the package (`//*`).
        strip_top: bool,
        /// `?checksum=sha256:<hex>`, which the archive must match.
        sha256: Option<crate::hash::Sha256>,
    },
    /// A git repository at a reference.
    Git {
        url: Url,
        reference: Option<String>,
        subdir: Option<String>,
    },
    /// A plain URL whose answer names the package by `X-Terraform-Get`.
    Indirect { url: Url, subdir: Option<String> },
}

impl Location {
    /// Reads a download answer's location. A relative one (`/`, `./`, `../`) is resolved
    /// against `base` (the download URL after redirects).
    pub fn parse(raw: &str, base: &Url) -> Result<Location> {
        let unsupported = |why: &str| {
            UpstreamError::BadDocument(format!(
                "module source {raw:?} cannot be fetched by this mirror: {why}"
            ))
        };
        let raw = raw.trim();
        if raw.is_empty() {
            return Err(UpstreamError::BadDocument(
                "the download answer names no module source".into(),
            ));
        }
        let absolute;
        let source = if ["/", "./", "../"].iter().any(|p| raw.starts_with(p)) {
            absolute = base
                .join(raw)
                .map_err(|e| UpstreamError::BadDocument(format!("module source {raw:?}: {e}")))?
                .to_string();
            absolute.as_str()
        } else {
            raw
        };
        // go-getter's forced getter (`git::`, `s3::`, ...).
        let (forced, rest) = match source.split_once("::") {
            Some((getter, rest))
                if !getter.is_empty() && getter.bytes().all(|b| b.is_ascii_alphanumeric()) =>
            {
                (Some(getter.to_ascii_lowercase()), rest)
            }
            _ => (None, source),
        };
        let rest = match forced.as_deref() {
            None | Some("git") | Some("http") | Some("https") => rest,
            Some(other) => {
                return Err(unsupported(&format!(
                    "the {other}:: getter is not supported (only https archives and git over https)"
                )));
            }
        };
        if rest.starts_with("git@") || rest.starts_with("ssh://") {
            return Err(unsupported("git over ssh is not supported; use https"));
        }
        // GitHub shorthand, as Terraform's detector reads it.
        let shorthand;
        let (rest, forced) = match rest.strip_prefix("github.com/") {
            Some(path) if forced.is_none() => {
                shorthand = format!("https://github.com/{path}");
                (shorthand.as_str(), Some("git".to_string()))
            }
            _ => (rest, forced),
        };
        let (package, subdir) = split_subdir(rest);
        let mut url = Url::parse(&package).map_err(|_| {
            unsupported("it is not a URL (local paths and registry addresses are not packages)")
        })?;
        if !matches!(url.scheme(), "https" | "http") {
            return Err(unsupported(&format!(
                "scheme {:?} is not https",
                url.scheme()
            )));
        }
        let (strip_top, subdir) = match subdir.as_deref() {
            Some("*") => (true, None),
            _ => (false, subdir),
        };
        let mut query: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        let mut take = |name: &str| {
            let found = query.iter().position(|(k, _)| k == name);
            found.map(|i| query.remove(i).1)
        };
        if forced.as_deref() == Some("git") {
            let reference = take("ref");
            let _ = take("depth");
            if take("sshkey").is_some() {
                return Err(unsupported("ssh keys are not supported"));
            }
            set_query(&mut url, &query);
            return Ok(Location::Git {
                url,
                reference,
                subdir,
            });
        }
        let checksum = take("checksum");
        let archive = take("archive");
        let format = match archive.as_deref() {
            Some("false") => None,
            Some(kind) => match Format::from_name(kind) {
                Some(found) => Some(found.map_err(|e| unsupported(&e.to_string()))?),
                None => return Err(unsupported(&format!("archive type {kind:?}"))),
            },
            None => match Format::from_name(url.path()) {
                Some(found) => Some(found.map_err(|e| unsupported(&e.to_string()))?),
                None => None,
            },
        };
        let sha256 = match checksum {
            None => None,
            Some(c) => {
                let sha256 = match c.split_once(':') {
                    Some(("sha256", hex)) => {
                        crate::hash::Sha256::parse(&hex.to_ascii_lowercase()).ok()
                    }
                    _ => None,
                };
                match sha256 {
                    Some(sha256) => Some(sha256),
                    None => {
                        return Err(unsupported(&format!("checksum {c:?} is not sha256:<hex>")));
                    }
                }
            }
        };
        set_query(&mut url, &query);
        Ok(match format {
            Some(format) => Location::Archive {
                url,
                format,
                subdir,
                strip_top,
                sha256,
            },
            None => Location::Indirect { url, subdir },
        })
    }
}

fn set_query(url: &mut Url, pairs: &[(String, String)]) {
    if pairs.is_empty() {
        url.set_query(None);
    } else {
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
}

/// Splits go-getter's `//subdir` off a source: the first `//` after the scheme's `://` and
/// before the query.
fn split_subdir(source: &str) -> (String, Option<String>) {
    let after_scheme = source.find("://").map_or(0, |i| i + 3);
    let query_at = source[after_scheme..]
        .find('?')
        .map_or(source.len(), |i| i + after_scheme);
    match source[after_scheme..query_at].find("//") {
        Some(i) => {
            let at = after_scheme + i;
            let subdir = source[at + 2..query_at].trim_matches('/').to_string();
            let package = format!("{}{}", &source[..at], &source[query_at..]);
            (package, (!subdir.is_empty()).then_some(subdir))
        }
        None => (source.to_string(), None),
    }
}

/// Joins two subdirectories (the origin's, then one found on the way), either possibly absent.
fn join_subdirs(first: Option<String>, second: Option<String>) -> Option<String> {
    match (first, second) {
        (Some(a), Some(b)) => Some(format!("{a}/{b}")),
        (a, b) => a.or(b),
    }
}

impl Upstream {
    /// Lists a module's versions. `Ok(None)`: the origin has no such module.
    pub async fn module_versions(&self, addr: &ModuleAddr) -> Result<Option<Vec<Version>>> {
        self.at_service(&addr.hostname, "modules.v1", |base| {
            self.module_versions_at(addr, base)
        })
        .await
    }

    async fn module_versions_at(
        &self,
        addr: &ModuleAddr,
        base: Url,
    ) -> Result<Option<Vec<Version>>> {
        let url = join(
            &base,
            &format!("{}/{}/{}/versions", addr.namespace, addr.name, addr.system),
        );
        let max = self.settings.max_document_size;
        let found = self
            .document(&addr.hostname, Operation::ModuleVersions, &url, max, false)
            .await?;
        let Some((_, body)) = found else {
            return Ok(None);
        };
        let list = super::documents::parse_module_versions(&body)
            .map_err(|e| UpstreamError::BadDocument(format!("{addr}: {e}")))?;
        for note in &list.skipped {
            tracing::warn!(module = %addr, "origin version list: skipped {note}");
        }
        Ok(Some(list.versions))
    }

    /// Where a module version's package is: the download answer's location (its
    /// `X-Terraform-Get` header, or the `location` of its JSON body), read with
    /// [`Location::parse`], following `X-Terraform-Get` hops of plain URLs. `Ok(None)`: the
    /// origin has no such version.
    pub async fn module_location(
        &self,
        addr: &ModuleAddr,
        version: &Version,
    ) -> Result<Option<Location>> {
        let found = self
            .at_service(&addr.hostname, "modules.v1", |base| {
                self.module_location_at(addr, version, base)
            })
            .await?;
        // A centre's package URL carries a signature made for this mirror (its checksum is
        // read by now); the credential goes with the request instead, so the record keeps no
        // capability.
        Ok(found.map(|location| match location {
            Location::Archive {
                mut url,
                format,
                subdir,
                strip_top,
                sha256,
            } => {
                if self.peer(&addr.hostname, &url) != &addr.hostname {
                    url.set_query(None);
                }
                Location::Archive {
                    url,
                    format,
                    subdir,
                    strip_top,
                    sha256,
                }
            }
            other => other,
        }))
    }

    async fn module_location_at(
        &self,
        addr: &ModuleAddr,
        version: &Version,
        base: Url,
    ) -> Result<Option<Location>> {
        let url = join(
            &base,
            &format!(
                "{}/{}/{}/{version}/download",
                addr.namespace, addr.name, addr.system
            ),
        );
        let Some((final_url, raw)) = self
            .get_location(&addr.hostname, Operation::ModuleDownload, &url)
            .await?
        else {
            return Ok(None);
        };
        let mut location = Location::parse(&raw, &final_url)?;
        for _ in 0..MAX_GET_HOPS {
            let Location::Indirect { url, subdir } = &location else {
                return Ok(Some(location));
            };
            self.check_url(&addr.hostname, url)?;
            let mut asked = url.clone();
            asked.query_pairs_mut().append_pair("terraform-get", "1");
            let Some((final_url, raw)) = self
                .get_location(&addr.hostname, Operation::ModuleDownload, &asked)
                .await?
            else {
                return Err(UpstreamError::BadDocument(format!(
                    "module source {url} answered 404 Not Found"
                )));
            };
            let subdir = subdir.clone();
            location = match Location::parse(&raw, &final_url)? {
                Location::Archive {
                    url,
                    format,
                    subdir: inner,
                    strip_top,
                    sha256,
                } => Location::Archive {
                    url,
                    format,
                    subdir: join_subdirs(subdir, inner),
                    strip_top,
                    sha256,
                },
                Location::Git {
                    url,
                    reference,
                    subdir: inner,
                } => Location::Git {
                    url,
                    reference,
                    subdir: join_subdirs(subdir, inner),
                },
                Location::Indirect { url, subdir: inner } => Location::Indirect {
                    url,
                    subdir: join_subdirs(subdir, inner),
                },
            };
        }
        Err(UpstreamError::BadDocument(format!(
            "module {addr} {version}: more than {MAX_GET_HOPS} X-Terraform-Get hops"
        )))
    }

    /// GETs `url` and reads a location from its answer: the `X-Terraform-Get` header, else a
    /// JSON body's `location`. Returns the answer's final URL too; `None` on 404.
    async fn get_location(
        &self,
        host: &Hostname,
        op: Operation,
        url: &Url,
    ) -> Result<Option<(Url, String)>> {
        self.check_url(host, url)?;
        self.get_answer(host, op, url, |resp| async move {
            let final_url = resp.url().clone();
            let header = resp
                .headers()
                .get("x-terraform-get")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
                .filter(|v| !v.trim().is_empty());
            let body = super::read_capped(op, resp, self.settings.max_document_size).await?;
            self.add_bytes(body.len() as u64);
            let location = header.or_else(|| {
                serde_json::from_slice::<crate::records::docs::ModuleLocation>(&body)
                    .ok()
                    .map(|doc| doc.location)
                    .filter(|l| !l.trim().is_empty())
            });
            match location {
                Some(l) => Ok((final_url, l)),
                None => Err(UpstreamError::BadDocument(format!(
                    "{} {url}: the answer names no module source (no X-Terraform-Get header, no \
                     JSON location)",
                    op.as_str()
                ))),
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Url {
        Url::parse("https://registry.example/v1/modules/acme/vpc/aws/1.0.0/download").unwrap()
    }

    fn parse(raw: &str) -> Result<Location> {
        Location::parse(raw, &base())
    }

    #[test]
    fn archives_relative_and_absolute() {
        let Location::Archive {
            url,
            format,
            subdir,
            strip_top,
            sha256,
        } = parse("./files/vpc.tar.gz//modules/a?archive=tgz&x=1").unwrap()
        else {
            panic!("an archive");
        };
        assert_eq!(
            url.as_str(),
            "https://registry.example/v1/modules/acme/vpc/aws/1.0.0/files/vpc.tar.gz?x=1"
        );
        assert_eq!(
            (format, subdir.as_deref(), strip_top, sha256),
            (Format::TarGz, Some("modules/a"), false, None)
        );
        let Location::Archive { strip_top, url, .. } =
            parse("https://codeload.example/o/r/tar.gz/v1//*?archive=tar.gz").unwrap()
        else {
            panic!("an archive");
        };
        assert!(strip_top);
        assert_eq!(url.as_str(), "https://codeload.example/o/r/tar.gz/v1");
        let sha = "a".repeat(64);
        let Location::Archive { sha256, .. } =
            parse(&format!("/m.zip?checksum=sha256:{sha}")).unwrap()
        else {
            panic!("an archive");
        };
        assert_eq!(sha256.map(|s| s.to_string()), Some(sha));
    }

    #[test]
    fn git_sources() {
        assert_eq!(
            parse("git::https://github.com/acme/terraform-aws-vpc?ref=v1.2.3").unwrap(),
            Location::Git {
                url: Url::parse("https://github.com/acme/terraform-aws-vpc").unwrap(),
                reference: Some("v1.2.3".into()),
                subdir: None,
            }
        );
        let Location::Git { url, subdir, .. } =
            parse("github.com/acme/repo//sub?ref=main").unwrap()
        else {
            panic!("git");
        };
        assert_eq!(
            (url.as_str(), subdir.as_deref()),
            ("https://github.com/acme/repo", Some("sub"))
        );
    }

    #[test]
    fn what_cannot_be_fetched_is_named() {
        for raw in [
            "git::ssh://git@github.com/acme/repo.git",
            "git@github.com:acme/repo.git",
            "s3::https://s3.amazonaws.com/bucket/m.zip",
            "gcs::https://www.googleapis.com/storage/v1/b/m.zip",
            "hg::https://hg.example/repo",
            "file:///tmp/module",
            "acme/vpc/aws",
            "https://x.example/m.tar.xz",
        ] {
            let e = parse(raw).unwrap_err().to_string();
            assert!(e.contains(raw), "{raw}: {e}");
        }
    }

    #[test]
    fn plain_urls_are_indirect() {
        assert_eq!(
            parse("https://example.com/modules/vpc//sub").unwrap(),
            Location::Indirect {
                url: Url::parse("https://example.com/modules/vpc").unwrap(),
                subdir: Some("sub".into()),
            }
        );
    }
}
