//! Verified objects in the store, each with its record: provider archives ([`Archives`]) and
//! module packages ([`Modules`]), one store generic over what it holds ([`Kind`]).
//!
//! ```text
//! archives/<host>/<namespace>/<type>/<version>/<file>.zip               a provider archive
//! archives/<host>/<namespace>/<type>/<version>/<file>.zip.json          its record (ArchiveInfo)
//! modules/<host>/<namespace>/<name>/<system>/<version>/module.tar.gz    a module package
//! modules/<host>/<namespace>/<name>/<system>/<version>/module.json      its record (ModuleRecord)
//! modules/<host>/<namespace>/<name>/<system>/<version>/module.zip       the package as a zip,
//! modules/<host>/<namespace>/<name>/<system>/<version>/module.zip.json  for OCI (ModuleZip)
//! modules/<host>/<namespace>/<name>/<system>/<version>/docs.json        its documentation
//! quarantine/<object key>.<unix time>                                   taken out of service,
//! quarantine/<record key>.<unix time>                                   with its record
//! ```
//!
//! The bytes are stored first and the record written last: **the record is the commit point**.
//! Bytes without a record (a crash in between) are not served and are overwritten by the next
//! fill; a record whose object has another size is treated as absent. Removal goes the other
//! way, record first, and takes the files made from an object ([`Kind::derived`]) with it. Records
//! are immutable once written (a fresh fill of the same object writes
//! the same record), so they are also kept in memory, and a hit reads only the object. Records
//! are written as pretty JSON; any JSON form of one is read.

use std::fmt::{Debug, Display};
use std::hash::Hash;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;

use super::{Changes, LocalTier, StagedFile};
use crate::address::{MODULE_ARCHIVE, MirrorPath, ModuleAddr, Version};
use crate::hash::Sha256;
use crate::records::oci::ModuleZip;
use crate::records::releases::{Packing, Product, ReleaseKey, ReleaseZip};
use crate::records::{ArchiveInfo, ArchiveKey, ModuleKey, ModuleRecord};
use crate::storage::{Key, Result, Storage, StorageError};

/// What a store of objects holds: how its objects are named, where they live, what their
/// records say.
pub trait Kind: Send + Sync + 'static {
    /// Names one object.
    type Key: Clone + Eq + Hash + Display + Debug + Send + Sync + 'static;
    /// What was recorded about an object when it was committed.
    type Record: Clone
        + PartialEq
        + Debug
        + serde::Serialize
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static;
    /// What one object is called in logs and errors.
    const NOUN: &'static str;
    /// The first segment of every object's store key.
    const ROOT: &'static str;

    /// The store key of an object's bytes.
    fn object_key(key: &Self::Key) -> Key;
    /// The store key of an object's record: beside its bytes, with `.json` added, unless a kind
    /// says otherwise.
    fn record_key(key: &Self::Key) -> Key {
        Self::object_key(key).with_suffix(".json")
    }
    /// Whether a listed store key (under [`Kind::ROOT`]) is the bytes of an object, by its name.
    fn is_object(listed: &Key) -> bool;
    /// The object a listed store key names, if it is a well-formed one.
    fn parse(listed: &Key) -> Option<Self::Key>;
    /// The size the record gives.
    fn size(record: &Self::Record) -> u64;
    /// The lowercase hex SHA-256 the record gives.
    fn sha256(record: &Self::Record) -> &Sha256;
    /// Files made from an object and kept beside it (a module's documentation), removed and
    /// quarantined with it.
    fn derived(_key: &Self::Key) -> Vec<Key> {
        Vec::new()
    }
}

/// Provider archives: `archives/<host>/<namespace>/<type>/<version>/<file>.zip`.
#[derive(Debug, Clone, Copy)]
pub struct ArchiveKind;

impl Kind for ArchiveKind {
    type Key = ArchiveKey;
    type Record = ArchiveInfo;
    const NOUN: &'static str = "archive";
    const ROOT: &'static str = "archives";

    fn object_key(key: &ArchiveKey) -> Key {
        Key::new([
            Self::ROOT,
            key.addr.hostname.as_str(),
            &key.addr.namespace,
            &key.addr.type_,
            key.version.as_str(),
            &key.filename(),
        ])
    }

    fn is_object(listed: &Key) -> bool {
        listed.as_str().ends_with(".zip")
    }

    fn parse(listed: &Key) -> Option<ArchiveKey> {
        let parts: Vec<&str> = listed.segments().collect();
        let [Self::ROOT, host, ns, ty, version, file] = parts.as_slice() else {
            return None;
        };
        match MirrorPath::parse(&format!("{host}/{ns}/{ty}/{file}")).ok()? {
            MirrorPath::Archive(addr, v, platform) if v.as_str() == *version => Some(ArchiveKey {
                addr,
                version: v,
                platform,
            }),
            _ => None,
        }
    }

    fn size(record: &ArchiveInfo) -> u64 {
        record.size
    }

    fn sha256(record: &ArchiveInfo) -> &Sha256 {
        &record.sha256
    }
}

/// CLI release zips: `releases/<product>/<version>/<product>_<version>_<os>_<arch>.zip`.
#[derive(Debug, Clone, Copy)]
pub struct ReleaseKind;

impl Kind for ReleaseKind {
    type Key = ReleaseKey;
    type Record = ReleaseZip;
    const NOUN: &'static str = "release zip";
    const ROOT: &'static str = "releases";

    fn object_key(key: &ReleaseKey) -> Key {
        Key::new([
            Self::ROOT,
            key.product.as_str(),
            key.version.as_str(),
            &key.filename(),
        ])
    }

    fn is_object(listed: &Key) -> bool {
        Packing::ALL
            .iter()
            .any(|p| listed.as_str().ends_with(p.suffix()))
    }

    fn parse(listed: &Key) -> Option<ReleaseKey> {
        let parts: Vec<&str> = listed.segments().collect();
        let [Self::ROOT, product, version, file] = parts.as_slice() else {
            return None;
        };
        let version = Version::parse(version).ok()?;
        ReleaseKey::from_filename(Product::parse(product)?, &version, file)
    }

    fn size(record: &ReleaseZip) -> u64 {
        record.size
    }

    fn sha256(record: &ReleaseZip) -> &Sha256 {
        &record.sha256
    }
}

/// Module packages: `modules/<host>/<namespace>/<name>/<system>/<version>/module.tar.gz`.
#[derive(Debug, Clone, Copy)]
pub struct ModuleKind;

impl ModuleKind {
    /// The file of a module version's documentation (`crate::module_docs`), made from its
    /// package.
    pub const DOCS: &'static str = "docs.json";

    /// Where a module version's documentation is kept.
    pub fn docs_key(key: &ModuleKey) -> Key {
        Self::file_key(key, Self::DOCS)
    }

    fn file_key(key: &ModuleKey, file: &str) -> Key {
        let addr = &key.addr;
        Key::new([
            Self::ROOT,
            addr.hostname.as_str(),
            &addr.namespace,
            &addr.name,
            &addr.system,
            key.version.as_str(),
            file,
        ])
    }
}

impl Kind for ModuleKind {
    type Key = ModuleKey;
    type Record = ModuleRecord;
    const NOUN: &'static str = "module package";
    const ROOT: &'static str = "modules";

    fn object_key(key: &ModuleKey) -> Key {
        Self::file_key(key, MODULE_ARCHIVE)
    }

    fn record_key(key: &ModuleKey) -> Key {
        Self::file_key(key, "module.json")
    }

    fn is_object(listed: &Key) -> bool {
        listed.segments().last() == Some(MODULE_ARCHIVE)
    }

    fn parse(listed: &Key) -> Option<ModuleKey> {
        let parts: Vec<&str> = listed.segments().collect();
        let [Self::ROOT, host, ns, name, system, version, MODULE_ARCHIVE] = parts.as_slice() else {
            return None;
        };
        Some(ModuleKey {
            addr: ModuleAddr::new(host, ns, name, system).ok()?,
            version: Version::parse_lenient(version).ok()?,
        })
    }

    fn size(record: &ModuleRecord) -> u64 {
        record.size
    }

    fn sha256(record: &ModuleRecord) -> &Sha256 {
        &record.sha256
    }

    fn derived(key: &ModuleKey) -> Vec<Key> {
        vec![Self::docs_key(key)]
    }
}

/// Module packages as zips (the layer of a module's OCI artifact), made from the stored
/// package: `modules/<host>/<namespace>/<name>/<system>/<version>/module.zip`.
#[derive(Debug, Clone, Copy)]
pub struct ModuleZipKind;

impl ModuleZipKind {
    /// The file name of a module version's zip.
    pub const FILE: &'static str = "module.zip";
}

impl Kind for ModuleZipKind {
    type Key = ModuleKey;
    type Record = ModuleZip;
    const NOUN: &'static str = "module zip";
    const ROOT: &'static str = ModuleKind::ROOT;

    fn object_key(key: &ModuleKey) -> Key {
        ModuleKind::file_key(key, Self::FILE)
    }

    fn is_object(listed: &Key) -> bool {
        listed.segments().last() == Some(Self::FILE)
    }

    fn parse(listed: &Key) -> Option<ModuleKey> {
        let parts: Vec<&str> = listed.segments().collect();
        let [Self::ROOT, host, ns, name, system, version, Self::FILE] = parts.as_slice() else {
            return None;
        };
        Some(ModuleKey {
            addr: ModuleAddr::new(host, ns, name, system).ok()?,
            version: Version::parse_lenient(version).ok()?,
        })
    }

    fn size(record: &ModuleZip) -> u64 {
        record.size
    }

    fn sha256(record: &ModuleZip) -> &Sha256 {
        &record.sha256
    }
}

/// The provider archives in a store.
pub type Archives = Objects<ArchiveKind>;
/// The module packages in a store.
pub type Modules = Objects<ModuleKind>;
/// The module packages' zips in a store.
pub type ModuleZips = Objects<ModuleZipKind>;

/// An open, committed object.
pub struct Opened<K: Kind> {
    pub record: K::Record,
    pub modified: SystemTime,
    pub body: BoxStream<'static, std::io::Result<Bytes>>,
}

impl<K: Kind> Opened<K> {
    /// The body as an `AsyncRead`, for code that copies or hashes it.
    pub fn into_reader(self) -> impl tokio::io::AsyncRead + Send + Unpin {
        tokio_util::io::StreamReader::new(self.body)
    }
}

/// One object found by [`Objects::list`] or [`Objects::scan`].
#[derive(Debug, Clone)]
pub struct Listed<K: Kind> {
    pub key: K::Key,
    /// `None` when the object has no readable record (it is then not served), and always from
    /// [`Objects::scan`].
    pub record: Option<K::Record>,
    pub size: u64,
    pub modified: SystemTime,
    /// Last time the object was served, where the backend knows it.
    pub last_used: Option<SystemTime>,
}

impl<K: Kind> Listed<K> {
    /// When the object was last served or, if later, stored.
    pub fn last_use(&self) -> SystemTime {
        crate::storage::last_use(self.modified, self.last_used)
    }
}

/// The objects of one kind in a store, with their records kept in memory.
pub struct Objects<K: Kind> {
    storage: Arc<dyn Storage>,
    records: moka::sync::Cache<K::Key, Arc<K::Record>>,
    /// Counts commits, removals and quarantines (see [`Changes`]).
    changes: Changes,
    /// Copies on local disk in front of an object store (see [`LocalTier`]).
    tier: Option<Arc<LocalTier>>,
}

impl<K: Kind> Objects<K> {
    /// The objects in `storage`; up to `capacity` records are kept in memory.
    pub fn new(storage: Arc<dyn Storage>, capacity: u64) -> Objects<K> {
        Objects {
            storage,
            records: moka::sync::Cache::new(capacity),
            changes: Default::default(),
            tier: None,
        }
    }

    /// These objects, with copies kept in `tier` as they are read or committed.
    pub fn with_tier(mut self, tier: Option<Arc<LocalTier>>) -> Objects<K> {
        self.tier = tier;
        self
    }

    /// How many commits, removals and quarantines this process has made (see [`Changes`]).
    pub fn changes(&self) -> u64 {
        self.changes.count()
    }

    /// The store they live in.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The record of a committed object, without opening the object. An unreadable record is
    /// logged and treated as absent.
    pub async fn record(&self, key: &K::Key) -> Result<Option<K::Record>> {
        if let Some(record) = self.records.get(key) {
            return Ok(Some((*record).clone()));
        }
        let Some(bytes) = self.storage.read(&K::record_key(key)).await? else {
            return Ok(None);
        };
        let record: K::Record = match crate::records::from_json(&bytes) {
            Ok(record) => record,
            Err(e) => {
                let bad = StorageError::Failed {
                    store: self.storage.describe(),
                    key: K::record_key(key).to_string(),
                    message: format!("unreadable {} record: {e}", K::NOUN),
                };
                tracing::warn!(object = %key, "{bad}");
                return Ok(None);
            }
        };
        self.records.insert(key.clone(), Arc::new(record.clone()));
        Ok(Some(record))
    }

    /// Opens a committed object, or `None` when there is none (or its bytes do not have its
    /// record's size).
    pub async fn open(&self, key: &K::Key) -> Result<Option<Opened<K>>> {
        let Some(record) = self.record(key).await? else {
            return Ok(None);
        };
        let object_key = K::object_key(key);
        if let Some(tier) = &self.tier {
            let (size, sha256) = (K::size(&record), K::sha256(&record));
            if let Some(local) = tier.get(&object_key, size, sha256).await {
                return Ok(Some(Opened {
                    record,
                    modified: local.meta.modified,
                    body: local.body,
                }));
            }
            tier.copy_from(
                self.storage.clone(),
                object_key.clone(),
                size,
                sha256.clone(),
            );
        }
        let Some(object) = self.storage.open(&object_key).await? else {
            self.records.invalidate(key);
            return Ok(None);
        };
        if object.meta.size != K::size(&record) {
            tracing::warn!(object = %key, size = object.meta.size, recorded = K::size(&record), "{} size differs from its record; treating it as absent", K::NOUN);
            self.records.invalidate(key);
            return Ok(None);
        }
        Ok(Some(Opened {
            record,
            modified: object.meta.modified,
            body: object.body,
        }))
    }

    /// Makes a staged, verified file the object for `key`: the bytes first, then its record.
    pub async fn commit(&self, key: &K::Key, staged: StagedFile, record: &K::Record) -> Result<()> {
        let bytes = serde_json::to_vec_pretty(record).expect("records serialise");
        if let Some(tier) = &self.tier {
            // Verified before it came here: linked into the tier before the store takes it.
            tier.link(
                &K::object_key(key),
                staged.path(),
                K::size(record),
                K::sha256(record),
            );
        }
        self.storage
            .put_file(&K::object_key(key), staged.path())
            .await?;
        // Taken by the store (or copied from; then the guard removes the local copy).
        drop(staged);
        self.storage
            .write(&K::record_key(key), Bytes::from(bytes))
            .await?;
        self.records.insert(key.clone(), Arc::new(record.clone()));
        self.changes.note();
        Ok(())
    }

    /// Every object in the store, with its record (a full scan).
    pub async fn list(&self) -> Result<Vec<Listed<K>>> {
        let mut entries = self.scan().await?;
        let keys: Vec<K::Key> = entries.iter().map(|e| e.key.clone()).collect();
        let records = futures_util::stream::iter(keys)
            .map(|key| async move { self.record(&key).await })
            .buffered(16)
            .collect::<Vec<_>>()
            .await;
        for (entry, record) in entries.iter_mut().zip(records) {
            entry.record = record?;
        }
        Ok(entries)
    }

    /// Every object in the store with its size and times, without reading records.
    pub async fn scan(&self) -> Result<Vec<Listed<K>>> {
        let objects = self.storage.list(&Key::new([K::ROOT])).await?;
        Ok(Self::objects_in(objects))
    }

    /// Every committed object (its record is in the store too) with its size and times, from
    /// one listing and without reading a record.
    pub async fn committed(&self) -> Result<Vec<Listed<K>>> {
        self.committed_under(&[]).await
    }

    /// [`committed`](Self::committed), for the objects under `segments` below the root (one
    /// provider's or module's, say).
    pub async fn committed_under(&self, segments: &[&str]) -> Result<Vec<Listed<K>>> {
        let prefix = Key::new(std::iter::once(K::ROOT).chain(segments.iter().copied()));
        let objects = self.storage.list(&prefix).await?;
        let names: std::collections::HashSet<String> =
            objects.iter().map(|o| o.key.as_str().to_string()).collect();
        let mut out = Self::objects_in(objects);
        out.retain(|o| names.contains(K::record_key(&o.key).as_str()));
        Ok(out)
    }

    /// The objects among the entries of a listing.
    fn objects_in(objects: Vec<crate::storage::ObjectMeta>) -> Vec<Listed<K>> {
        let mut out = Vec::new();
        for o in objects {
            if !K::is_object(&o.key) {
                continue;
            }
            let Some(key) = K::parse(&o.key) else {
                tracing::warn!(key = %o.key, "ignoring an object that is not a {}", K::NOUN);
                continue;
            };
            out.push(Listed {
                key,
                record: None,
                size: o.size,
                modified: o.modified,
                last_used: o.last_used,
            });
        }
        out
    }

    /// Deletes an object (eviction, `provender prune`), record first: without it the bytes are
    /// not served. Returns whether the bytes were there.
    pub async fn remove(&self, key: &K::Key) -> Result<bool> {
        self.records.invalidate(key);
        self.changes.note();
        if let Some(tier) = &self.tier {
            tier.forget(&K::object_key(key));
        }
        self.storage.delete(&K::record_key(key)).await?;
        let found = self.storage.delete(&K::object_key(key)).await?;
        for derived in K::derived(key) {
            self.storage.delete(&derived).await?;
        }
        Ok(found)
    }

    /// Takes an object out of service (it failed re-verification), keeping it and its record
    /// for inspection as `quarantine/<its key>.<unix time>`. Returns where the object went, or
    /// `None` if it was not there.
    pub async fn quarantine(&self, key: &K::Key) -> Result<Option<String>> {
        self.records.invalidate(key);
        self.changes.note();
        if let Some(tier) = &self.tier {
            tier.forget(&K::object_key(key));
        }
        let stamp = format!(".{}", crate::clock::now_secs());
        let moved = |k: &Key| {
            Key::new(std::iter::once("quarantine").chain(k.segments())).with_suffix(&stamp)
        };
        let record = K::record_key(key);
        self.storage.rename(&record, &moved(&record)).await?;
        for derived in K::derived(key) {
            self.storage.delete(&derived).await?;
        }
        let object = K::object_key(key);
        let target = moved(&object);
        if !self.storage.rename(&object, &target).await? {
            return Ok(None);
        }
        Ok(Some(format!(
            "{}/{target}",
            self.storage.describe().trim_end_matches('/')
        )))
    }

    /// Records that an object was just served (orders evictions after a restart; what
    /// `provender prune` goes by).
    pub async fn touch(&self, key: &K::Key) {
        self.storage.touch(&K::object_key(key)).await
    }

    /// A URL the client may fetch the object from directly, where the store can sign one.
    pub async fn signed_url(
        &self,
        key: &K::Key,
        ttl: std::time::Duration,
    ) -> Result<Option<url::Url>> {
        self.storage.signed_url(&K::object_key(key), ttl).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::{Platform, ProviderAddr};
    use crate::cache::Staging;
    use crate::records::{ModuleSource, ModuleTrust};
    use crate::storage::DiskStorage;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn archive() -> ArchiveKey {
        ArchiveKey {
            addr: ProviderAddr::new("registry.terraform.io", "acme", "foo").unwrap(),
            version: Version::parse("1.0.0").unwrap(),
            platform: Platform::parse("linux_amd64").unwrap(),
        }
    }

    fn archive_info(size: u64) -> ArchiveInfo {
        ArchiveInfo {
            sha256: Sha256::of(b"archive"),
            h1: crate::hash::test_h1(0),
            size,
            trust: None,
        }
    }

    fn module() -> ModuleKey {
        ModuleKey {
            addr: ModuleAddr::new("registry.terraform.io", "acme", "net", "aws").unwrap(),
            version: Version::parse("1.2.0").unwrap(),
        }
    }

    fn module_record(size: u64) -> ModuleRecord {
        ModuleRecord {
            source: ModuleSource::Archive {
                url: "https://example.com/net.tar.gz".into(),
            },
            subdir: None,
            sha256: Sha256::of(b"module"),
            size,
            fetched_at: 1,
            trust: ModuleTrust::Origin,
        }
    }

    fn store<K: Kind>(dir: &std::path::Path) -> Objects<K> {
        let storage = Arc::new(DiskStorage::new(dir.to_path_buf()).unwrap());
        Objects::new(storage, 100)
    }

    async fn stage(dir: &std::path::Path, bytes: &[u8]) -> StagedFile {
        let (staging, _) = Staging::open(dir.join("tmp")).unwrap();
        let (staged, mut file) = staging.create().await.unwrap();
        file.write_all(bytes).await.unwrap();
        file.sync_all().await.unwrap();
        staged
    }

    /// Every file under `dir`, relative to it, sorted.
    fn files(dir: &std::path::Path) -> Vec<String> {
        fn walk(base: &std::path::Path, dir: &std::path::Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(base, &path, out);
                } else {
                    let rel = path.strip_prefix(base).unwrap();
                    out.push(rel.to_string_lossy().replace('\\', "/"));
                }
            }
        }
        let mut out = Vec::new();
        walk(dir, dir, &mut out);
        out.sort();
        out
    }

    /// Commit, open, list, quarantine: then absent, and kept under `quarantine/<its key>`.
    async fn round_trip<K: Kind>(key: K::Key, record: K::Record, bytes: &[u8]) {
        let dir = tempfile::tempdir().unwrap();
        let store: Objects<K> = store(dir.path());
        assert!(store.open(&key).await.unwrap().is_none());

        let staged = stage(dir.path(), bytes).await;
        store.commit(&key, staged, &record).await.unwrap();
        let written = std::fs::read(dir.path().join(K::record_key(&key).as_str())).unwrap();
        assert!(written.contains(&b'\n'), "records are pretty JSON");

        let got = store.open(&key).await.unwrap().unwrap();
        assert_eq!(got.record, record);
        let mut body = Vec::new();
        got.into_reader().read_to_end(&mut body).await.unwrap();
        assert_eq!(body, bytes);
        // A fresh store (another replica, a restart) reads the record from the store.
        let fresh: Objects<K> = self::store(dir.path());
        assert_eq!(fresh.record(&key).await.unwrap(), Some(record.clone()));

        let listed = store.list().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].key, key);
        assert_eq!(listed[0].size, bytes.len() as u64);
        assert_eq!(listed[0].record.as_ref(), Some(&record));
        let scanned = store.scan().await.unwrap();
        assert_eq!((scanned.len(), scanned[0].record.is_none()), (1, true));
        assert!(
            files(&dir.path().join("tmp")).is_empty(),
            "the staged file was taken"
        );

        // Quarantined: gone from service, kept with its record for inspection.
        let to = store.quarantine(&key).await.unwrap().unwrap();
        let object = K::object_key(&key);
        assert!(to.contains(&format!("quarantine/{object}.")), "{to}");
        let kept = files(&dir.path().join("quarantine"));
        assert_eq!(kept.len(), 2, "{kept:?}");
        for moved in [K::object_key(&key), K::record_key(&key)] {
            let prefix = format!("{moved}.");
            assert!(kept.iter().any(|k| k.starts_with(&prefix)), "{kept:?}");
        }
        assert!(store.open(&key).await.unwrap().is_none());
        assert!(store.record(&key).await.unwrap().is_none());
        assert!(store.list().await.unwrap().is_empty());
        assert!(
            store.quarantine(&key).await.unwrap().is_none(),
            "nothing left"
        );
    }

    #[tokio::test]
    async fn archives_commit_open_list_quarantine() {
        round_trip::<ArchiveKind>(archive(), archive_info(9), b"zip bytes").await;
    }

    #[tokio::test]
    async fn module_packages_commit_open_list_quarantine() {
        round_trip::<ModuleKind>(module(), module_record(7), b"tarball").await;
    }

    #[tokio::test]
    async fn module_zips_commit_open_list_quarantine() {
        let zip = ModuleZip {
            package_sha256: Sha256::of(b"tarball"),
            sha256: Sha256::of(b"zipped"),
            size: 6,
            subdir: None,
        };
        round_trip::<ModuleZipKind>(module(), zip, b"zipped").await;
    }

    /// A module's documentation, made from its package, goes when the package goes: removed with
    /// it, and not left behind when it is quarantined.
    #[tokio::test]
    async fn derived_files_go_with_their_object() {
        for quarantine in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let modules: Objects<ModuleKind> = store(dir.path());
            let staged = stage(dir.path(), b"module").await;
            modules
                .commit(&module(), staged, &module_record(6))
                .await
                .unwrap();
            let docs = dir.path().join(ModuleKind::docs_key(&module()).as_str());
            std::fs::write(&docs, b"{}").unwrap();
            match quarantine {
                true => assert!(modules.quarantine(&module()).await.unwrap().is_some()),
                false => assert!(modules.remove(&module()).await.unwrap()),
            }
            assert!(!docs.exists(), "quarantine: {quarantine}");
            assert!(modules.list().await.unwrap().is_empty());
        }
    }

    /// A package and its zip live side by side; each store sees only its own kind.
    #[tokio::test]
    async fn a_module_zip_is_not_a_module_package() {
        let dir = tempfile::tempdir().unwrap();
        let zips: Objects<ModuleZipKind> = store(dir.path());
        let packages: Objects<ModuleKind> = store(dir.path());
        let zip = ModuleZip {
            package_sha256: Sha256::of(b"tarball"),
            sha256: Sha256::of(b"zipped"),
            size: 6,
            subdir: None,
        };
        let staged = stage(dir.path(), b"zipped").await;
        zips.commit(&module(), staged, &zip).await.unwrap();
        assert!(packages.list().await.unwrap().is_empty());
        let staged = stage(dir.path(), b"tarball").await;
        packages
            .commit(&module(), staged, &module_record(7))
            .await
            .unwrap();
        assert_eq!(zips.list().await.unwrap().len(), 1);
        assert_eq!(packages.list().await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn an_object_without_its_record_is_absent() {
        let dir = tempfile::tempdir().unwrap();
        let archives: Archives = store(dir.path());
        let modules: Modules = store(dir.path());
        for object in [
            ArchiveKind::object_key(&archive()),
            ModuleKind::object_key(&module()),
        ] {
            let path = dir.path().join(object.as_str());
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, b"orphan").unwrap();
        }
        assert!(archives.open(&archive()).await.unwrap().is_none());
        assert!(archives.record(&archive()).await.unwrap().is_none());
        assert!(modules.open(&module()).await.unwrap().is_none());
        assert!(modules.record(&module()).await.unwrap().is_none());
        let listed = archives.list().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].record.is_none(), "listed, but without a record");
        let listed = modules.list().await.unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].record.is_none(), "listed, but without a record");
    }

    #[tokio::test]
    async fn an_object_of_another_size_than_its_record_is_absent() {
        let dir = tempfile::tempdir().unwrap();
        let archives: Archives = store(dir.path());
        let staged = stage(dir.path(), b"zip bytes").await;
        archives
            .commit(&archive(), staged, &archive_info(10))
            .await
            .unwrap();
        assert!(archives.open(&archive()).await.unwrap().is_none());

        let modules: Modules = store(dir.path());
        let staged = stage(dir.path(), b"tarball").await;
        modules
            .commit(&module(), staged, &module_record(7))
            .await
            .unwrap();
        assert!(modules.open(&module()).await.unwrap().is_some());
        let path = dir.path().join(ModuleKind::object_key(&module()).as_str());
        std::fs::write(&path, b"tarball, grown").unwrap();
        assert!(modules.open(&module()).await.unwrap().is_none());
    }

    /// A disk store that notes the order of deletes.
    struct Noting {
        disk: DiskStorage,
        deleted: std::sync::Mutex<Vec<String>>,
    }

    #[async_trait::async_trait]
    impl Storage for Noting {
        fn describe(&self) -> String {
            self.disk.describe()
        }
        async fn read(&self, key: &Key) -> Result<Option<Bytes>> {
            self.disk.read(key).await
        }
        async fn open(&self, key: &Key) -> Result<Option<crate::storage::Object>> {
            self.disk.open(key).await
        }
        async fn head(&self, key: &Key) -> Result<Option<crate::storage::ObjectMeta>> {
            self.disk.head(key).await
        }
        async fn write(&self, key: &Key, bytes: Bytes) -> Result<()> {
            self.disk.write(key, bytes).await
        }
        async fn create(&self, key: &Key, bytes: Bytes) -> Result<bool> {
            self.disk.create(key, bytes).await
        }
        async fn put_file(&self, key: &Key, file: &std::path::Path) -> Result<()> {
            self.disk.put_file(key, file).await
        }
        async fn delete(&self, key: &Key) -> Result<bool> {
            self.deleted.lock().unwrap().push(key.to_string());
            self.disk.delete(key).await
        }
        async fn rename(&self, from: &Key, to: &Key) -> Result<bool> {
            self.disk.rename(from, to).await
        }
        async fn list(&self, prefix: &Key) -> Result<Vec<crate::storage::ObjectMeta>> {
            self.disk.list(prefix).await
        }
        async fn probe(&self) -> Result<()> {
            self.disk.probe().await
        }
    }

    #[tokio::test]
    async fn remove_deletes_the_record_first() {
        let dir = tempfile::tempdir().unwrap();
        let noting = Arc::new(Noting {
            disk: DiskStorage::new(dir.path().to_path_buf()).unwrap(),
            deleted: Default::default(),
        });
        let archives: Archives = Objects::new(noting.clone(), 100);
        let staged = stage(dir.path(), b"zip bytes").await;
        archives
            .commit(&archive(), staged, &archive_info(9))
            .await
            .unwrap();
        assert!(archives.open(&archive()).await.unwrap().is_some());
        assert!(archives.remove(&archive()).await.unwrap());
        assert_eq!(
            *noting.deleted.lock().unwrap(),
            [
                ArchiveKind::record_key(&archive()).to_string(),
                ArchiveKind::object_key(&archive()).to_string(),
            ]
        );
        assert!(archives.open(&archive()).await.unwrap().is_none());
        assert!(archives.list().await.unwrap().is_empty());
        assert!(!archives.remove(&archive()).await.unwrap(), "already gone");
    }
}
