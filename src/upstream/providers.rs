//! The provider registry protocol, as a client: version lists, download metadata, SHA256SUMS
//! files and archives.

use std::time::Instant;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use url::Url;

use super::{
    Operation, Outcome, Result, Upstream, UpstreamError, VersionList, join, parse_download,
    parse_versions,
};
use crate::address::{Hostname, Platform, ProviderAddr, Version};
use crate::records::Package;

/// An archive download under way: the origin answered 200.
pub struct ArchiveDownload {
    /// The size the origin announced (`Content-Length`), if it did.
    pub size: Option<u64>,
    /// The bytes. The stream ends with an error if the origin sends more than
    /// `upstream.max_archive_size`, or other than it announced, or breaks off.
    pub body: BoxStream<'static, Result<Bytes>>,
}

impl Upstream {
    /// Lists a provider's versions. `Ok(None)`: the origin has no such provider.
    pub async fn versions(&self, addr: &ProviderAddr) -> Result<Option<VersionList>> {
        self.at_service(&addr.hostname, "providers.v1", |base| {
            self.versions_at(addr, base)
        })
        .await
    }

    async fn versions_at(&self, addr: &ProviderAddr, base: Url) -> Result<Option<VersionList>> {
        let url = join(
            &base,
            &format!("{}/{}/versions", addr.namespace, addr.type_),
        );
        let max = self.settings.max_document_size;
        let found = self
            .document(&addr.hostname, Operation::Versions, &url, max, false)
            .await?;
        let Some((_, body)) = found else {
            return Ok(None);
        };
        let list = parse_versions(&body).map_err(|e| {
            self.origin_fault(
                &addr.hostname,
                UpstreamError::BadDocument(format!("{addr}: {e}")),
            )
        })?;
        for note in &list.skipped {
            tracing::warn!(provider = %addr, "origin version list: skipped {note}");
        }
        Ok(Some(list))
    }

    /// Fetches download metadata for one package, with every URL in it made absolute and
    /// checked. `Ok(None)`: the origin has no package for this platform.
    pub async fn download_info(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
    ) -> Result<Option<Package>> {
        self.at_service(&addr.hostname, "providers.v1", |base| {
            self.download_info_at(addr, version, platform, base)
        })
        .await
    }

    async fn download_info_at(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
        base: Url,
    ) -> Result<Option<Package>> {
        let path = format!(
            "{}/{}/{}/download/{}/{}",
            addr.namespace, addr.type_, version, platform.os, platform.arch
        );
        let url = join(&base, &path);
        let max = self.settings.max_document_size;
        let found = self
            .document(&addr.hostname, Operation::Download, &url, max, false)
            .await?;
        let Some((final_url, body)) = found else {
            return Ok(None);
        };
        let what = format!("{addr} {version} {platform}");
        let mut pkg = parse_download(&body, platform).map_err(|e| {
            self.origin_fault(
                &addr.hostname,
                UpstreamError::BadDocument(format!("{addr} {version}: {e}")),
            )
        })?;
        for u in [
            &mut pkg.download_url,
            &mut pkg.shasums_url,
            &mut pkg.shasums_signature_url,
        ]
        .into_iter()
        .flatten()
        {
            let mut resolved = self
                .resolve(&addr.hostname, &final_url, u, &what)
                .map_err(|e| self.origin_fault(&addr.hostname, e))?;
            // A centre signs the URLs it hands out for the client it hands them to; the edge
            // shows its credential with every request instead, so the signature (a capability
            // until it expires) is neither kept in records nor logged.
            if self.peer(&addr.hostname, &resolved) != &addr.hostname {
                resolved.set_query(None);
            }
            *u = resolved.to_string();
        }
        Ok(Some(pkg))
    }

    /// Fetches a small file such as SHA256SUMS, failing on 404 as on any other error status.
    pub async fn small_file(&self, host: &Hostname, op: Operation, url: &str) -> Result<Bytes> {
        let url = Url::parse(url)
            .map_err(|e| UpstreamError::BadDocument(format!("invalid URL {url:?}: {e}")))?;
        self.check_url(host, &url)?;
        let max = self.settings.max_document_size;
        match self.document(host, op, &url, max, false).await? {
            Some((_, body)) => Ok(body),
            None => Err(UpstreamError::Status {
                what: format!("{} {url}", op.as_str()),
                status: 404,
            }),
        }
    }

    /// The size of the archive at `url` as its origin states it (`Content-Length` of a `HEAD`),
    /// without downloading it. `Ok(None)`: the origin does not say.
    pub async fn archive_size(&self, host: &Hostname, url: &str) -> Result<Option<u64>> {
        let op = Operation::ArchiveSize;
        let url = Url::parse(url)
            .map_err(|e| UpstreamError::BadDocument(format!("invalid archive URL {url:?}: {e}")))?;
        self.check_url(host, &url)?;
        let started = Instant::now();
        let result = self
            .send(host, op, &url, self.settings.request_timeout)
            .await
            .and_then(|resp| match resp.status() {
                reqwest::StatusCode::OK => Ok(resp
                    .headers()
                    .get(reqwest::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok())),
                status => Err(UpstreamError::status_of(op, &url, status)),
            });
        let peer = self.peer(host, &url);
        self.observe(peer, op, started);
        self.count(
            peer,
            op,
            match &result {
                Ok(_) => Outcome::Ok,
                Err(e) => e.outcome(),
            },
        );
        self.record_health(peer, started, &result);
        result
    }

    /// Starts a provider archive download from `url` (for a package of registry `host`) and
    /// returns it once the origin answered 200.
    pub async fn archive(&self, host: &Hostname, url: &str) -> Result<ArchiveDownload> {
        let url = Url::parse(url)
            .map_err(|e| UpstreamError::BadDocument(format!("invalid archive URL {url:?}: {e}")))?;
        let max = self.settings.max_archive_size;
        self.download(
            host,
            Operation::Archive,
            &url,
            max,
            "upstream.max_archive_size",
        )
        .await
    }

    /// [`archive`](Self::archive) of a provider package. When `url` is on its host's centre
    /// (`via`), the centre does not answer and `fallback = "origin"`, the package's download
    /// metadata is asked of the origin itself, and its own URL fetched instead; the caller
    /// checks whatever arrives against the package's signed `shasum`, as always.
    pub async fn package_archive(
        &self,
        addr: &ProviderAddr,
        version: &Version,
        platform: &Platform,
        url: &str,
    ) -> Result<ArchiveDownload> {
        let host = &addr.hostname;
        let on_centre = |via: &super::Via| {
            Url::parse(url)
                .ok()
                .and_then(|u| crate::address::authority(&u))
                == Some(via.host.to_string())
        };
        match self.archive(host, url).await {
            Err(e)
                if super::centre_unavailable(&e)
                    && self
                        .settings
                        .via(host)
                        .is_some_and(|via| via.fallback_to_origin && on_centre(via)) =>
            {
                tracing::warn!(%host, "the centre does not answer ({e}); fetching {addr} {version} {platform} from the origin (fallback = \"origin\")");
                let base = self.origin_service_base(host, "providers.v1").await?;
                let found = self
                    .download_info_at(addr, version, platform, base)
                    .await?
                    .and_then(|pkg| pkg.download_url);
                let Some(origin_url) = found else {
                    return Err(UpstreamError::Status {
                        what: format!("download {addr} {version} {platform} at the origin"),
                        status: 404,
                    });
                };
                self.archive(host, &origin_url).await
            }
            answered => answered,
        }
    }

    /// Starts a download of `url` (for registry `host`: its token goes only to that host) and
    /// returns it once the origin answered 200; at most `max` bytes (the setting `max_key`).
    pub(crate) async fn download(
        &self,
        host: &Hostname,
        op: Operation,
        url: &Url,
        max: u64,
        max_key: &'static str,
    ) -> Result<ArchiveDownload> {
        let url = url.clone();
        self.check_url(host, &url)?;
        let started = Instant::now();
        let result = self
            .send(host, op, &url, self.settings.archive_timeout)
            .await;
        let peer = self.peer(host, &url);
        self.observe(peer, op, started);
        let checked = result.and_then(|resp| {
            if resp.status() != reqwest::StatusCode::OK {
                return Err(UpstreamError::status_of(op, &url, resp.status()));
            }
            match resp.content_length() {
                Some(len) if len > max => Err(UpstreamError::TooLarge(format!(
                    "archive {url} is {len} bytes, more than {max_key} ({max})"
                ))),
                _ => Ok(resp),
            }
        });
        let resp = match checked {
            Ok(resp) => resp,
            Err(e) => {
                self.count(peer, op, e.outcome());
                self.record_health::<()>(peer, started, &Err(e.clone()));
                return Err(e);
            }
        };
        self.count(peer, op, Outcome::Ok);
        self.record_health(peer, started, &Ok(()));
        let size = resp.content_length();
        Ok(ArchiveDownload {
            size,
            body: self.capped_body(resp, op, url, size, max, max_key),
        })
    }

    /// An archive body, counted into `provender_upstream_bytes_total`, ending in an error past
    /// `max` bytes or when its length is not the announced one.
    fn capped_body(
        &self,
        resp: reqwest::Response,
        op: Operation,
        url: Url,
        announced: Option<u64>,
        max: u64,
        max_key: &'static str,
    ) -> BoxStream<'static, Result<Bytes>> {
        let counter = self.metrics.upstream_bytes.clone();
        let state = (resp.bytes_stream(), 0u64, false);
        futures_util::stream::unfold(state, move |(mut body, mut seen, done)| {
            let (url, counter) = (url.clone(), counter.clone());
            async move {
                if done {
                    return None;
                }
                let item = match body.next().await {
                    Some(Ok(chunk)) => {
                        seen += chunk.len() as u64;
                        counter.inc_by(chunk.len() as u64);
                        if seen > max {
                            Err(UpstreamError::TooLarge(format!(
                                "archive {url} is larger than {max_key} ({max} bytes)"
                            )))
                        } else {
                            Ok(chunk)
                        }
                    }
                    Some(Err(e)) => Err(UpstreamError::from_body(op, &url, &e)),
                    None => match announced {
                        Some(n) if n != seen => Err(UpstreamError::Connect(format!(
                            "archive {url}: the origin announced {n} bytes but sent {seen}"
                        ))),
                        _ => return None,
                    },
                };
                let failed = item.is_err();
                Some((item, (body, seen, failed)))
            }
        })
        .boxed()
    }
}
