//! Module documentation for the pages and the JSON API: read from each version's verified
//! package once ([`crate::module_docs::extract`]), kept beside it in the store as `docs.json`
//! (so every replica, and this one after a restart, reads it instead of the package), and made
//! again when the extractor changes or the package is another. Mirrored, published and imported
//! modules alike: whatever door put a package in the store, its documentation comes from here.
//!
//! In memory: the documentation last shown (bounded by bytes) and, per module version, the
//! words search looks in and a one-line summary (small, kept for every module searched).
//! Documentation is made lazily, the first time a page, the API or a search needs it; a search
//! reads the newest version of each module, [`WARM_CONCURRENCY`] at a time.

use std::sync::Arc;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use crate::cache::ModuleKind;
use crate::error::{Error, Result};
use crate::hash::Sha256;
use crate::mirror::Core;
use crate::module_docs::{DocLimits, EXTRACTOR, ModuleDocs};
use crate::records::ModuleKey;

/// Packages read at once when a search needs many modules' documentation.
pub const WARM_CONCURRENCY: usize = 8;
/// Bytes of documentation kept in memory.
const MEMORY: u64 = 32 << 20;
/// Bytes of a module's words kept for search.
const SEARCH_TEXT: usize = 64 << 10;
/// Characters of a README's first paragraph shown in lists.
const SUMMARY: usize = 160;

/// `docs.json`: a module version's documentation and what it was made from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredDocs {
    /// The package it was read from.
    pub package_sha256: Sha256,
    /// [`EXTRACTOR`] when it was made.
    pub extractor: u32,
    /// Unix seconds.
    pub made_at: u64,
    /// `None` when the package could not be read at all (`error` says why).
    pub docs: Option<ModuleDocs>,
    pub error: Option<String>,
}

impl StoredDocs {
    fn weight(&self) -> u32 {
        let docs = self.docs.as_ref().map_or(0, |d| {
            d.all()
                .map(|m| {
                    m.readme.as_ref().map_or(0, |r| r.html.len() + r.text.len())
                        + 256 * (m.inputs.len() + m.outputs.len() + m.resources.len())
                })
                .sum::<usize>()
        });
        u32::try_from(docs + 512).unwrap_or(u32::MAX)
    }
}

/// What a search and a list read of one module version.
#[derive(Debug)]
pub struct Indexed {
    pub sha256: Sha256,
    /// Lowercased words (see [`ModuleDocs::search_text`]).
    pub text: String,
    /// The README's first paragraph, cut short.
    pub summary: Option<String>,
}

/// The documentation of cached module versions, made and kept.
pub struct DocsCache {
    docs: moka::future::Cache<ModuleKey, Arc<StoredDocs>>,
    index: moka::sync::Cache<ModuleKey, Arc<Indexed>>,
    limits: DocLimits,
}

impl Default for DocsCache {
    fn default() -> Self {
        DocsCache {
            docs: moka::future::Cache::builder()
                .max_capacity(MEMORY)
                .weigher(|_, v: &Arc<StoredDocs>| v.weight())
                .build(),
            index: moka::sync::Cache::builder().max_capacity(200_000).build(),
            limits: DocLimits::default(),
        }
    }
}

impl DocsCache {
    /// A module version's documentation; `None` when the cache does not hold the version.
    pub async fn get(&self, core: &Arc<Core>, key: &ModuleKey) -> Result<Option<Arc<StoredDocs>>> {
        let Some(record) = core.modules().record(key).await? else {
            return Ok(None);
        };
        if let Some(kept) = self.docs.get(key).await {
            if kept.package_sha256 == record.sha256 && kept.extractor == EXTRACTOR {
                return Ok(Some(kept));
            }
            self.docs.invalidate(key).await;
        }
        let made = self
            .docs
            .try_get_with(key.clone(), async {
                load(
                    core,
                    key,
                    &record.sha256,
                    record.subdir.as_deref(),
                    self.limits,
                )
                .await
                .map(Arc::new)
            })
            .await
            .map_err(|e: Arc<Error>| (*e).clone())?;
        self.index.insert(key.clone(), Arc::new(indexed(&made)));
        Ok(Some(made))
    }

    /// What search reads of a module version, made if it is not kept yet; `None` when the cache
    /// does not hold it or it cannot be read (logged).
    pub async fn indexed(
        &self,
        core: &Arc<Core>,
        key: &ModuleKey,
        sha256: &str,
    ) -> Option<Arc<Indexed>> {
        if let Some(kept) = self.index.get(key).filter(|i| i.sha256.as_str() == sha256) {
            return Some(kept);
        }
        match self.get(core, key).await {
            Ok(_) => self.index.get(key),
            Err(e) => {
                tracing::warn!(module = %key, "cannot read the module's documentation: {e}");
                None
            }
        }
    }

    /// What search reads of each of `keys` (module version and its package's SHA-256), in
    /// order (`None` for a `None`), reading [`WARM_CONCURRENCY`] packages at a time.
    pub async fn index_all(
        &self,
        core: &Arc<Core>,
        keys: Vec<Option<(ModuleKey, String)>>,
    ) -> Vec<Option<Arc<Indexed>>> {
        futures_util::stream::iter(keys)
            .map(|key| async move {
                let (key, sha) = key?;
                self.indexed(core, &key, &sha).await
            })
            .buffered(WARM_CONCURRENCY)
            .collect()
            .await
    }

    /// What is kept of a module version for search, without making anything.
    pub fn indexed_now(&self, key: &ModuleKey, sha256: &str) -> Option<Arc<Indexed>> {
        self.index.get(key).filter(|i| i.sha256.as_str() == sha256)
    }
}

fn indexed(stored: &StoredDocs) -> Indexed {
    Indexed {
        sha256: stored.package_sha256.clone(),
        text: stored
            .docs
            .as_ref()
            .map(|d| d.search_text(SEARCH_TEXT))
            .unwrap_or_default(),
        summary: stored
            .docs
            .as_ref()
            .and_then(|d| d.root.readme.as_ref())
            .map(|r| r.summary(SUMMARY))
            .filter(|s| !s.is_empty()),
    }
}

/// The stored documentation when it is current, else made from the package and stored.
async fn load(
    core: &Arc<Core>,
    key: &ModuleKey,
    sha256: &Sha256,
    subdir: Option<&str>,
    limits: DocLimits,
) -> Result<StoredDocs> {
    let storage = core.modules().storage().clone();
    let docs_key = ModuleKind::docs_key(key);
    if let Some(bytes) = storage.read(&docs_key).await? {
        match crate::records::from_json::<StoredDocs>(&bytes) {
            Ok(stored) if stored.package_sha256 == *sha256 && stored.extractor == EXTRACTOR => {
                return Ok(stored);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(key = %docs_key, "unreadable module documentation, made again: {e}")
            }
        }
    }
    let Some(opened) = core.modules().open(key).await? else {
        return Err(Error::NotFound(format!("{key} is not in this cache")));
    };
    // The package streams from the store into the reader on a blocking thread: nothing of it
    // is held but what the documentation keeps. A store that fails mid-way is an error for
    // this request, not a property of the package to be written down.
    let store_failure = Arc::new(std::sync::OnceLock::new());
    let package = Watched {
        inner: tokio_util::io::SyncIoBridge::new(opened.into_reader()),
        failure: store_failure.clone(),
    };
    let subdir = subdir.map(str::to_string);
    let extracted = tokio::task::spawn_blocking(move || {
        crate::module_docs::extract(package, subdir.as_deref(), limits)
    })
    .await
    .map_err(|e| Error::unexpected(format!("reading the documentation of {key}: {e}")))?;
    if let Some(e) = store_failure.get() {
        return Err(Error::unexpected(format!(
            "reading the package of {key} for its documentation: {e}"
        )));
    }
    let (docs, error) = match extracted {
        Ok(docs) => (Some(docs), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let stored = StoredDocs {
        package_sha256: sha256.clone(),
        extractor: EXTRACTOR,
        made_at: crate::clock::now_secs(),
        docs,
        error,
    };
    let bytes = serde_json::to_vec(&stored).expect("documentation serialises");
    if let Err(e) = storage.write(&docs_key, bytes.into()).await {
        tracing::warn!(key = %docs_key, "cannot keep the module's documentation in the store: {e}");
    }
    Ok(stored)
}

/// A reader that remembers the first error of what it reads from (the store).
struct Watched<R> {
    inner: R,
    failure: Arc<std::sync::OnceLock<String>>,
}

impl<R: std::io::Read> std::io::Read for Watched<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf).inspect_err(|e| {
            let _ = self.failure.set(e.to_string());
        })
    }
}
