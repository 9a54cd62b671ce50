//! The storage compliance suite: one set of checks every backend passes, run against the disk
//! backend, a real Garage (S3-compatible) server and a shared directory (`object_store`'s local
//! file system store).
//! - put / read / head / list (recursive, by prefix) / delete / rename, overwrites;
//! - a missing object: every operation says so, none fails;
//! - concurrent writers of one key, small objects and multipart-sized files: one whole result;
//! - a crash between upload and commit: the archive's bytes without its record are not served,
//!   and the next commit works;
//! - a partial read (a reader that stops early) leaves the object whole for the next reader;
//! - the probe, and a key layout that round-trips through listings;
//! - last use: `touch` records it, listings report it (an object store's `.used` markers are
//!   never listed as objects), it leaves with a deleted or moved object, and on disk reading
//!   an object is not a use;
//! - `create`: exclusive on disk and in a shared directory; Garage lets a second create through
//!   and overwrites, which fleet leases detect;
//! - claims of one published version by several publishers (replicas) at once: one claims it,
//!   every other finds the claimant's record, on every backend (Garage's by settling).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::StreamExt;
use provender::address::{Platform, ProviderAddr, Version};
use provender::cache::{ArchiveKind, Archives, Kind, Staging};
use provender::records::{ArchiveInfo, ArchiveKey};
use provender::storage::{DiskStorage, Key, ObjectMeta, ObjectStorage, Storage};
use tokio::io::AsyncWriteExt;

use crate::support::garage::Garage;
use crate::support::within;

fn key(path: &str) -> Key {
    Key::parse(path).unwrap()
}

/// Deterministic, incompressible bytes.
fn bytes_of(len: usize, seed: u8) -> Vec<u8> {
    let mut x = u64::from(seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

async fn read_all(storage: &dyn Storage, k: &Key) -> Option<Vec<u8>> {
    let object = within("open", storage.open(k)).await.unwrap()?;
    let mut out = Vec::new();
    let mut body = object.body;
    while let Some(chunk) = within("read", body.next()).await {
        out.extend_from_slice(&chunk.unwrap());
    }
    Some(out)
}

fn staged(dir: &std::path::Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Every check, against one store.
async fn complies(storage: Arc<dyn Storage>) {
    let scratch = tempfile::tempdir().unwrap();
    within("probe", storage.probe()).await.unwrap();

    // A missing object.
    let missing = key("metadata/nowhere/x.json");
    assert_eq!(storage.read(&missing).await.unwrap(), None);
    assert!(storage.open(&missing).await.unwrap().is_none());
    assert_eq!(storage.head(&missing).await.unwrap(), None);
    assert!(!storage.delete(&missing).await.unwrap());
    assert!(!storage.rename(&missing, &key("elsewhere/x")).await.unwrap());
    assert!(storage.list(&key("nothing-here")).await.unwrap().is_empty());

    // Put, read, head, overwrite.
    let small = key("metadata/a/b/index.json");
    storage
        .write(&small, Bytes::from_static(b"{\"v\":1}"))
        .await
        .unwrap();
    assert_eq!(storage.read(&small).await.unwrap().unwrap(), "{\"v\":1}");
    assert_eq!(storage.head(&small).await.unwrap().unwrap().size, 7);
    storage
        .write(&small, Bytes::from_static(b"{\"v\":22}"))
        .await
        .unwrap();
    assert_eq!(storage.read(&small).await.unwrap().unwrap(), "{\"v\":22}");

    // A large object from a file (multipart on object stores), streamed back whole.
    let big = bytes_of(11 << 20, 1);
    let big_key = key("archives/h/n/t/1.0.0/big.zip");
    let file = staged(scratch.path(), "big", &big);
    storage.put_file(&big_key, &file).await.unwrap();
    assert!(read_all(storage.as_ref(), &big_key).await.unwrap() == big);
    assert_eq!(
        storage.head(&big_key).await.unwrap().unwrap().size,
        big.len() as u64
    );

    // A partial read: a reader that stops early changes nothing for the next one.
    {
        let object = storage.open(&big_key).await.unwrap().unwrap();
        let mut body = object.body;
        let first = body.next().await.unwrap().unwrap();
        assert!(!first.is_empty() && first.len() < big.len());
    }
    assert!(read_all(storage.as_ref(), &big_key).await.unwrap() == big);

    // Listing: recursive under a prefix, keys round-trip, nothing outside the prefix.
    storage
        .write(&key("metadata/a/c/1.0.0.json"), Bytes::from_static(b"{}"))
        .await
        .unwrap();
    storage
        .write(&key("metadataX/other"), Bytes::from_static(b"x"))
        .await
        .unwrap();
    let listed: Vec<String> = storage
        .list(&key("metadata"))
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.key.to_string())
        .collect();
    assert_eq!(
        listed,
        ["metadata/a/b/index.json", "metadata/a/c/1.0.0.json"]
    );

    // Rename and delete.
    assert!(
        storage
            .rename(&small, &key("quarantine/a/b/index.json.1"))
            .await
            .unwrap()
    );
    assert_eq!(storage.read(&small).await.unwrap(), None);
    assert_eq!(
        storage
            .read(&key("quarantine/a/b/index.json.1"))
            .await
            .unwrap()
            .unwrap(),
        "{\"v\":22}"
    );
    assert!(
        storage
            .delete(&key("quarantine/a/b/index.json.1"))
            .await
            .unwrap()
    );
    assert!(
        !storage
            .delete(&key("quarantine/a/b/index.json.1"))
            .await
            .unwrap()
    );

    // Concurrent writers of one key: each writes the same bytes (as replicas filling the same
    // archive do); the result is whole.
    let shared = key("archives/h/n/t/2.0.0/shared.zip");
    let content = bytes_of(9 << 20, 2);
    let mut writers = Vec::new();
    for i in 0..4 {
        let (big_writer, shared) = (storage.clone(), shared.clone());
        let file = staged(scratch.path(), &format!("w{i}"), &content);
        writers.push(tokio::spawn(async move {
            big_writer.put_file(&shared, &file).await
        }));
        let (small_writer, small) = (storage.clone(), key("metadata/race.json"));
        writers.push(tokio::spawn(async move {
            small_writer
                .write(&small, Bytes::from_static(b"same record"))
                .await
        }));
    }
    for w in writers {
        within("a concurrent writer", w).await.unwrap().unwrap();
    }
    assert!(read_all(storage.as_ref(), &shared).await.unwrap() == content);
    assert_eq!(
        storage
            .read(&key("metadata/race.json"))
            .await
            .unwrap()
            .unwrap(),
        "same record"
    );

    refuses_unsafe_keys(storage.as_ref(), scratch.path()).await;
}

/// A key built from a segment that could escape its place is refused by every operation,
/// before anything is read or written, and never reaches the store.
async fn refuses_unsafe_keys(storage: &dyn Storage, scratch: &std::path::Path) {
    let safe = key("metadata/safe.json");
    storage
        .write(&safe, Bytes::from_static(b"{}"))
        .await
        .unwrap();
    let file = staged(scratch, "unsafe-upload", b"bytes");
    for segments in [
        vec!["metadata", "..", "escaped.json"],
        vec!["metadata", "a/b.json"],
        vec!["metadata", "a\\b.json"],
        vec!["metadata", ""],
        vec!["metadata", "nul\0.json"],
        vec!["."],
    ] {
        let bad = Key::new(&segments);
        let refused = |what: &str, e: provender::storage::StorageError| {
            assert!(
                matches!(e, provender::storage::StorageError::UnsafeKey { .. }),
                "{what} of {segments:?}: {e}"
            );
            assert_eq!(e.status(), http::StatusCode::INTERNAL_SERVER_ERROR);
        };
        refused(
            "write",
            storage
                .write(&bad, Bytes::from_static(b"x"))
                .await
                .unwrap_err(),
        );
        refused(
            "create",
            storage
                .create(&bad, Bytes::from_static(b"x"))
                .await
                .unwrap_err(),
        );
        refused("put_file", storage.put_file(&bad, &file).await.unwrap_err());
        refused("read", storage.read(&bad).await.unwrap_err());
        refused("open", storage.open(&bad).await.err().unwrap());
        refused("head", storage.head(&bad).await.unwrap_err());
        refused("delete", storage.delete(&bad).await.unwrap_err());
        refused("list", storage.list(&bad).await.unwrap_err());
        refused(
            "rename from",
            storage.rename(&bad, &key("metadata/x")).await.unwrap_err(),
        );
        refused("rename to", storage.rename(&safe, &bad).await.unwrap_err());
        storage.touch(&bad).await;
        // A suffix cannot smuggle a separator in either.
        refused(
            "write with a suffix",
            storage
                .write(&safe.with_suffix("/../../x"), Bytes::from_static(b"x"))
                .await
                .unwrap_err(),
        );
    }
    assert!(
        storage.read(&safe).await.unwrap().is_some(),
        "the renamed-to refusal kept it"
    );
    assert!(storage.read(&key("escaped.json")).await.unwrap().is_none());
    assert!(storage.read(&key("x")).await.unwrap().is_none());
    storage.delete(&safe).await.unwrap();
}

/// The keys of a listing under `prefix`.
async fn listed(storage: &dyn Storage, prefix: &str) -> Vec<ObjectMeta> {
    within("list", storage.list(&key(prefix))).await.unwrap()
}

fn keys_of(listed: &[ObjectMeta]) -> Vec<&str> {
    listed.iter().map(|m| m.key.as_str()).collect()
}

/// Last use, as every backend records it. `markers`: the backend keeps it in marker objects
/// (object stores), so an object never touched has none.
async fn records_last_use(storage: Arc<dyn Storage>, markers: bool) {
    let scratch = tempfile::tempdir().unwrap();
    // Object stores keep whole seconds.
    let before = SystemTime::now() - Duration::from_secs(2);
    let (used, other) = (
        key("archives/h/n/t/3.0.0/used.zip"),
        key("archives/h/n/t/3.0.0/other.zip"),
    );
    for (k, name) in [(&used, "used"), (&other, "other")] {
        let file = staged(scratch.path(), name, name.as_bytes());
        storage.put_file(k, &file).await.unwrap();
    }
    let prefix = "archives/h/n/t/3.0.0";
    let first = listed(storage.as_ref(), prefix).await;
    assert_eq!(keys_of(&first), [other.as_str(), used.as_str()]);
    for m in &first {
        assert!(m.last_use() >= before, "stored counts as used: {m:?}");
        if markers {
            assert_eq!(m.last_used, None, "never touched: {m:?}");
        }
    }

    within("touch", storage.touch(&used)).await;
    // A second touch soon after is allowed to be skipped, and must not fail.
    within("touch again", storage.touch(&used)).await;
    let touched = listed(storage.as_ref(), prefix).await;
    assert_eq!(
        keys_of(&touched),
        [other.as_str(), used.as_str()],
        "no marker is listed as an object"
    );
    assert!(
        touched[1].last_used.is_some_and(|t| t >= before),
        "{touched:?}"
    );
    if markers {
        assert_eq!(
            touched[0].last_used, None,
            "only the touched object: {touched:?}"
        );
    }
    assert!(storage.head(&used).await.unwrap().is_some());

    // Moved (quarantine) or deleted, an object's last use goes with it.
    let moved = key("quarantine/h/n/t/3.0.0/used.zip.1");
    assert!(storage.rename(&used, &moved).await.unwrap());
    assert_eq!(
        keys_of(&listed(storage.as_ref(), prefix).await),
        [other.as_str()]
    );
    let quarantined = listed(storage.as_ref(), "quarantine/h/n/t").await;
    assert_eq!(keys_of(&quarantined), [moved.as_str()]);
    if markers {
        assert_eq!(quarantined[0].last_used, None, "{quarantined:?}");
    }
    assert!(storage.delete(&moved).await.unwrap());
    storage.touch(&other).await;
    assert!(storage.delete(&other).await.unwrap());
    assert!(listed(storage.as_ref(), prefix).await.is_empty());
    // Stored again, it starts afresh: no use left over from the deleted one.
    let file = staged(scratch.path(), "again", b"again");
    storage.put_file(&other, &file).await.unwrap();
    let again = listed(storage.as_ref(), prefix).await;
    assert_eq!(keys_of(&again), [other.as_str()]);
    if markers {
        assert_eq!(again[0].last_used, None, "{again:?}");
    }
    // Touching what is not there is no error, and creates nothing.
    storage.touch(&used).await;
    assert_eq!(
        keys_of(&listed(storage.as_ref(), prefix).await),
        [other.as_str()]
    );
    assert!(storage.delete(&other).await.unwrap());
}

/// On disk the last use is the file's access time: provender's own reads leave it alone (Linux
/// `O_NOATIME`, for the file's owner, which the test is), `touch` sets it.
async fn disk_reads_are_not_uses(dir: &std::path::Path) {
    let storage = DiskStorage::new(dir.to_path_buf()).unwrap();
    let k = key("archives/h/n/t/4.0.0/old.zip");
    storage
        .write(&k, Bytes::from_static(b"an old archive"))
        .await
        .unwrap();
    let long_ago = SystemTime::now() - Duration::from_secs(100 * 86_400);
    std::fs::File::open(storage.path_of(&k).unwrap())
        .unwrap()
        .set_times(
            std::fs::FileTimes::new()
                .set_accessed(long_ago)
                .set_modified(long_ago),
        )
        .unwrap();
    let aged = storage.head(&k).await.unwrap().unwrap();
    assert!(
        aged.last_use() < long_ago + Duration::from_secs(1),
        "{aged:?}"
    );
    // Streamed whole, and read whole: both leave the last use where it was.
    assert!(read_all(&storage, &k).await.unwrap() == b"an old archive");
    assert_eq!(storage.read(&k).await.unwrap().unwrap(), "an old archive");
    assert_eq!(
        storage.list(&key("archives")).await.unwrap(),
        std::slice::from_ref(&aged)
    );
    let before = SystemTime::now() - Duration::from_secs(1);
    storage.touch(&k).await;
    let used = storage.head(&k).await.unwrap().unwrap();
    assert!(used.last_use() >= before, "{used:?}");
    assert_eq!(
        used.modified, aged.modified,
        "touch changes only the access time"
    );
}

fn archive_key() -> ArchiveKey {
    ArchiveKey {
        addr: ProviderAddr::new("registry.terraform.io", "acme", "foo").unwrap(),
        version: Version::parse("1.0.0").unwrap(),
        platform: Platform::parse("linux_amd64").unwrap(),
    }
}

/// A crash between uploading an archive and writing its record (the commit point): the
/// archive is not served, listed without a record, and the next commit succeeds.
async fn crash_between_upload_and_commit(storage: Arc<dyn Storage>) {
    let scratch = tempfile::tempdir().unwrap();
    let (staging, _) = Staging::open(scratch.path().join("tmp")).unwrap();
    let k = archive_key();
    let zip = ArchiveKind::object_key(&k);
    let file = staged(scratch.path(), "orphan", b"uploaded, never committed");
    storage.put_file(&zip, &file).await.unwrap();
    let archives = Archives::new(storage.clone(), 10);
    assert!(archives.open(&k).await.unwrap().is_none(), "not served");
    assert!(archives.record(&k).await.unwrap().is_none());
    let listed = archives.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].record.is_none(), "listed without a record");

    let (staged_file, mut out) = staging.create().await.unwrap();
    out.write_all(b"the verified archive").await.unwrap();
    out.sync_all().await.unwrap();
    let info = ArchiveInfo {
        sha256: provender::hash::Sha256::of(b"the verified archive"),
        h1: format!("h1:{}", "A".repeat(43) + "=").parse().unwrap(),
        size: 20,
        trust: None,
    };
    archives.commit(&k, staged_file, &info).await.unwrap();
    // A fresh view of the store (another replica) sees it whole.
    let fresh = Archives::new(storage.clone(), 10);
    let got = fresh.open(&k).await.unwrap().unwrap();
    assert_eq!(got.record, info);
    let mut body = got.body;
    let mut bytes = Vec::new();
    while let Some(chunk) = body.next().await {
        bytes.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(bytes, b"the verified archive");
    assert!(fresh.remove(&k).await.unwrap());
    assert!(fresh.open(&k).await.unwrap().is_none());
}

/// `create` writes only where nothing is, if the store enforces the condition (`enforced`);
/// otherwise it overwrites, as the store does.
async fn creates_exclusively(storage: Arc<dyn Storage>, enforced: bool) {
    let k = key("leases/archives/x.zip");
    assert!(
        storage
            .create(&k, Bytes::from_static(b"first"))
            .await
            .unwrap()
    );
    let second = storage
        .create(&k, Bytes::from_static(b"second"))
        .await
        .unwrap();
    assert_eq!(!second, enforced, "a second create of one key");
    let kept = storage.read(&k).await.unwrap().unwrap();
    assert_eq!(
        &kept[..],
        if enforced {
            b"first".as_slice()
        } else {
            b"second"
        }
    );
    assert!(storage.delete(&k).await.unwrap());
    assert!(
        storage
            .create(&k, Bytes::from_static(b"again"))
            .await
            .unwrap()
    );
    assert!(storage.delete(&k).await.unwrap());
}

/// Several publishers (each its own `Publications`, as replicas are) claiming one version with
/// other files at the same moment: exactly one claims it, and every other finds its record.
async fn claims_once(storage: Arc<dyn Storage>) {
    use provender::cache::{Claimed, Publications};
    use provender::records::publish::{Publication, PublishedFile, PublishedKind, State};
    let claim = |n: u8| {
        let files = vec![PublishedFile {
            name: "module.tar.gz".into(),
            sha256: provender::hash::Sha256::of(&[n]),
            size: 1,
        }];
        let publication = Publication {
            kind: PublishedKind::Module,
            address: "mirror.example.com/acme/vpc/aws".into(),
            version: Version::parse("1.0.0").unwrap(),
            state: State::Pending,
            digest: provender::records::publish::digest_of(&files),
            files,
            platforms: Vec::new(),
            protocols: Vec::new(),
            published_by: format!("publisher-{n}"),
            published_at: 0,
            publisher_key: None,
            publisher_signature: None,
            yanked: None,
            claim: String::new(),
        };
        let publications = Publications::new(storage.clone(), Duration::from_secs(1));
        async move {
            (
                publication.digest.clone(),
                publications.claim(&publication).await,
            )
        }
    };
    let results = within(
        "four claims",
        futures_util::future::join_all((1..=4).map(claim)),
    )
    .await;
    let winners: Vec<_> = results
        .iter()
        .filter(|(_, r)| matches!(r, Ok(Claimed::Claimed)))
        .map(|(digest, _)| digest.clone())
        .collect();
    assert_eq!(winners.len(), 1, "one claimant: {results:?}");
    // Every other found a claim (on a store without conditional creates, possibly one that
    // was overwritten since: what matters is that it does not go on).
    let digests: Vec<_> = results.iter().map(|(d, _)| d.clone()).collect();
    for (_, result) in &results {
        match result {
            Ok(Claimed::Claimed) => {}
            Ok(Claimed::Exists(found)) => assert!(digests.contains(&found.digest)),
            Err(e) => panic!("a claim failed: {e}"),
        }
    }
    let stored = Publications::new(storage.clone(), Duration::from_secs(1))
        .get(
            PublishedKind::Module,
            "mirror.example.com/acme/vpc/aws",
            &Version::parse("1.0.0").unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        stored.digest, winners[0],
        "the stored claim is the claimant's"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_disk_backend_complies() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(DiskStorage::new(dir.path().join("store")).unwrap());
    complies(storage.clone()).await;
    crash_between_upload_and_commit(storage.clone()).await;
    creates_exclusively(storage.clone(), true).await;
    claims_once(storage.clone()).await;
    records_last_use(storage, false).await;
    disk_reads_are_not_uses(&dir.path().join("reads")).await;
    assert!(
        crate::support::provender::files_under(&dir.path().join("store"))
            .iter()
            .all(|p| !p
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(".tmp-")),
        "no temporary file is left behind"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_garage_bucket_complies() {
    let garage = Garage::start("provender-compliance");
    let settings = garage.settings("replica-set/one");
    let storage: Arc<dyn Storage> = Arc::new(ObjectStorage::new(&settings).unwrap());
    assert_eq!(
        storage.describe(),
        "s3://provender-compliance/replica-set/one/"
    );
    complies(storage.clone()).await;
    crash_between_upload_and_commit(storage.clone()).await;
    // Garage answers 200 to `If-None-Match: *` and overwrites: fleet leases must find that out.
    creates_exclusively(storage.clone(), false).await;
    claims_once(storage.clone()).await;
    records_last_use(storage, true).await;
    // Nothing escaped the prefix.
    let other = Arc::new(ObjectStorage::new(&garage.settings("")).unwrap());
    let all = other.list(&key("replica-set")).await.unwrap();
    assert!(
        all.iter()
            .all(|m| m.key.as_str().starts_with("replica-set/one/")),
        "{all:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shared_directory_complies() {
    let dir = tempfile::tempdir().unwrap();
    let settings = provender::storage::ObjectStoreSettings::directory(dir.path(), "mirror");
    let storage: Arc<dyn Storage> = Arc::new(ObjectStorage::new(&settings).unwrap());
    assert_eq!(
        storage.describe(),
        format!("file://{}/mirror/", dir.path().display())
    );
    complies(storage.clone()).await;
    crash_between_upload_and_commit(storage.clone()).await;
    creates_exclusively(storage.clone(), true).await;
    claims_once(storage.clone()).await;
    records_last_use(storage, true).await;
}
