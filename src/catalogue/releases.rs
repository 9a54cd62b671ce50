//! The CLI releases view: for each CLI (`terraform`, `tofu`), the releases whose zips are in the
//! cache, newest first, each platform's zip with its size, SHA-256 and last use; and, when the
//! vendor's list of releases is cached, how many it lists, the newest, and when it was fetched.

use serde::Serialize;

use super::{API_VERSION, secs};
use crate::error::Result;
use crate::mirror::Core;
use crate::records::releases::{Packing, Product, ReleaseList};

/// `GET -/api/v1/releases`.
#[derive(Debug, Clone, Serialize)]
pub struct ReleaseCatalogue {
    pub api_version: u32,
    /// Whether `[releases]` is on; when it is off, `products` is empty.
    pub enabled: bool,
    pub products: Vec<ProductReleases>,
}

/// One CLI's releases in the cache.
#[derive(Debug, Clone, Serialize)]
pub struct ProductReleases {
    /// `terraform` or `tofu`.
    pub product: &'static str,
    /// The vendor's list of releases, if it is cached.
    pub list: Option<ListSummary>,
    /// Releases with at least one cached zip, newest first.
    pub releases: Vec<CachedRelease>,
}

/// The vendor's list of releases as the cache holds it.
#[derive(Debug, Clone, Serialize)]
pub struct ListSummary {
    /// When the origin answered (Unix seconds).
    pub fetched_at: u64,
    /// How many releases it lists.
    pub releases: usize,
    /// The newest release it lists.
    pub newest: Option<String>,
}

/// One release with cached zips.
#[derive(Debug, Clone, Serialize)]
pub struct CachedRelease {
    pub version: String,
    /// Its cached zips, by platform.
    pub zips: Vec<CachedZip>,
}

/// One cached release build: a zip, or OpenTofu's `.tar.gz`.
#[derive(Debug, Clone, Serialize)]
pub struct CachedZip {
    /// `os_arch`.
    pub platform: String,
    /// `zip` or `tar.gz`.
    pub packing: Packing,
    /// The zip's file name, as the vendor names it.
    pub filename: String,
    pub size: u64,
    pub sha256: String,
    pub last_used: u64,
}

impl ReleaseCatalogue {
    /// The view of `products`, as scanned (see [`scan`]: nothing when `[releases]` is off).
    pub(super) fn of(enabled: bool, products: &[ProductReleases]) -> ReleaseCatalogue {
        ReleaseCatalogue {
            api_version: API_VERSION,
            enabled,
            products: products.to_vec(),
        }
    }

    /// One CLI's releases.
    pub fn product(&self, product: Product) -> Option<&ProductReleases> {
        self.products.iter().find(|p| p.product == product.as_str())
    }
}

/// Every cached release zip with its record, by CLI, newest release first; and each CLI's list
/// of releases as stored. Nothing when `[releases]` is off.
pub(super) async fn scan(core: &Core) -> Result<Vec<ProductReleases>> {
    if !core.settings().releases.enabled {
        return Ok(Vec::new());
    }
    let mut listed = core.releases().list().await?;
    // By CLI, newest release first, then by platform and packing.
    listed.sort_by(|a, b| {
        (
            a.key.product,
            &b.key.version,
            &a.key.platform,
            a.key.packing,
        )
            .cmp(&(
                b.key.product,
                &a.key.version,
                &b.key.platform,
                b.key.packing,
            ))
    });
    let mut out = Vec::new();
    for product in Product::ALL {
        let mut releases: Vec<CachedRelease> = Vec::new();
        for entry in listed.iter().filter(|e| e.key.product == product) {
            let Some(record) = &entry.record else {
                continue;
            };
            let zip = CachedZip {
                platform: entry.key.platform.to_string(),
                packing: entry.key.packing,
                filename: entry.key.filename(),
                size: entry.size,
                sha256: record.sha256.to_string(),
                last_used: secs(entry.last_use()),
            };
            let version = entry.key.version.to_string();
            match releases.last_mut() {
                Some(last) if last.version == version => last.zips.push(zip),
                _ => releases.push(CachedRelease {
                    version,
                    zips: vec![zip],
                }),
            }
        }
        let key = crate::cache::release_list_key(&product);
        let list = match core.releases().storage().read(&key).await? {
            Some(bytes) => match crate::records::from_json::<ReleaseList>(&bytes) {
                Ok(list) => Some(ListSummary {
                    fetched_at: list.fetched_at,
                    releases: list.releases.len(),
                    newest: list.releases.last().map(|r| r.version.to_string()),
                }),
                Err(e) => {
                    tracing::warn!("the stored list of {product} releases is unreadable: {e}");
                    None
                }
            },
            None => None,
        };
        out.push(ProductReleases {
            product: product.as_str(),
            list,
            releases,
        });
    }
    Ok(out)
}
