//! Terraform's package hashes: `zh:` (SHA-256 of the zip file) and `h1:` (Go's `dirhash.Hash1`
//! over the zip's entries, as Terraform's `HashZip` computes it). [`h1_installed`] gives the
//! other `h1:` Terraform records, of the package as extracted.
//!
//! `h1:` rules, matched byte for byte:
//! - every entry of the zip's central directory counts, with its name exactly as stored (raw
//!   bytes, no path cleaning), directory entries included and hashed as empty files;
//! - a name that appears twice would be listed twice by Go, both times with the content of its
//!   last entry; provender refuses such archives instead (its zip reader keeps one entry per
//!   name, and no real provider package has duplicates);
//! - names are sorted bytewise, each contributes the line `"{sha256 hex}  {name}\n"`, and the
//!   result is `h1:` + base64(sha256(all lines));
//! - a name containing a newline is an error, as in Go;
//! - a directory entry (name ending in `/`) that carries data is an error, as Go's reader
//!   refuses to open it.
//!
//! Some archives Terraform could hash it could never install: go-getter refuses to unpack an
//! entry with a `..` path element. provender refuses those too, and absolute names and names
//! with NUL bytes, so a mirror never vouches for an archive that escapes its directory.
//!
//! Entries are streamed through the hasher one at a time and never extracted, so memory stays
//! bounded whatever the archive holds; [`HashLimits`] bounds the work (entry count, total
//! uncompressed bytes actually read, whatever the headers claim).

use std::collections::BTreeMap;
use std::io::{Read, Seek};

use base64::Engine as _;
use sha2::Digest as _;

/// The SHA-256 state machine; [`Sha256`] is a finished digest.
type Sha256Hasher = sha2::Sha256;

/// Bounds on the work of hashing one archive.
#[derive(Debug, Clone, Copy)]
pub struct HashLimits {
    /// Most entries an archive may have.
    pub max_entries: usize,
    /// Most bytes all entries may expand to, in total.
    pub max_uncompressed_bytes: u64,
}

impl Default for HashLimits {
    fn default() -> Self {
        HashLimits {
            max_entries: 10_000,
            max_uncompressed_bytes: 4 << 30,
        }
    }
}

/// Why an archive could not be hashed.
#[derive(Debug, thiserror::Error)]
pub enum HashError {
    #[error("cannot read the archive: {0}")]
    Io(#[from] std::io::Error),
    #[error("not a readable zip archive: {0}")]
    Zip(#[from] zip::result::ZipError),
    #[error("reading zip entry {name:?}: {source}")]
    Entry {
        name: String,
        source: std::io::Error,
    },
    #[error("zip entry name {0:?} contains a newline, which Terraform cannot hash")]
    NewlineInName(String),
    #[error(
        "zip entry name {0:?} is absolute, contains NUL or a \"..\" element; Terraform refuses to unpack it"
    )]
    UnsafeName(String),
    #[error("zip entry {0:?} escapes the package directory")]
    EscapesPackage(String),
    #[error("zip directory entry {0:?} carries data, which Terraform cannot read")]
    DirectoryWithData(String),
    #[error("zip lists the same entry name more than once")]
    DuplicateNames,
    #[error("zip has {0} entries, more than the limit of {1}")]
    TooManyEntries(usize, usize),
    #[error("zip expands to more than the limit of {0} bytes")]
    TooLarge(u64),
}

/// Computes the `h1:` hash of a zip archive read from `reader`.
pub fn h1_zip<R: Read + Seek>(reader: R, limits: HashLimits) -> Result<H1, HashError> {
    let mut zip = zip::ZipArchive::new(reader)?;
    if zip.len() > limits.max_entries {
        return Err(HashError::TooManyEntries(zip.len(), limits.max_entries));
    }
    if zip.has_duplicate_names() {
        return Err(HashError::DuplicateNames);
    }
    let mut names: Vec<(Vec<u8>, usize)> = Vec::with_capacity(zip.len());
    for index in 0..zip.len() {
        let name = zip.by_index_raw(index)?.name_raw().to_vec();
        if name.contains(&b'\n') {
            return Err(HashError::NewlineInName(
                String::from_utf8_lossy(&name).into_owned(),
            ));
        }
        if !is_safe_name(&name) {
            return Err(HashError::UnsafeName(
                String::from_utf8_lossy(&name).into_owned(),
            ));
        }
        names.push((name, index));
    }
    names.sort();

    let mut budget = limits.max_uncompressed_bytes;
    let mut summary = Sha256Hasher::new();
    for (name, index) in &names {
        let digest = hash_entry(
            &mut zip,
            *index,
            name,
            &mut budget,
            limits.max_uncompressed_bytes,
        )?;
        summary.update(digest.as_str().as_bytes());
        summary.update(b"  ");
        summary.update(name);
        summary.update(b"\n");
    }
    Ok(H1::of_summary(summary))
}

/// The `h1:` hash Terraform records for a package once it is installed: the hash of the
/// directory the zip extracts to, where [`h1_zip`] hashes the zip's entries.
///
/// Extracting differs from listing the zip in three ways, all followed here: a directory entry
/// leaves no file of its own; names (read as UTF-8, invalid bytes replaced) are cleaned of empty
/// and `.` elements; and of entries whose cleaned names are equal, the last one wins. A `..`
/// element is an error (the package would escape its directory), as is a newline in the name of
/// a file that is hashed.
///
/// `zip_h1` is the zip's own `h1:`, returned as is, without reading any content, when
/// extracting changes nothing: no directory entries, every name already clean and unique.
/// What is read is not bounded: give it only archives already hashed within [`HashLimits`].
pub fn h1_installed<R: Read + Seek>(reader: R, zip_h1: &H1) -> Result<H1, HashError> {
    let mut zip = zip::ZipArchive::new(reader)?;
    // Clean name -> index of its last entry (extraction overwrites earlier ones).
    let mut files: BTreeMap<String, usize> = BTreeMap::new();
    let mut plain = true;
    for i in 0..zip.len() {
        let entry = zip.by_index_raw(i)?;
        let raw = String::from_utf8_lossy(entry.name_raw()).to_string();
        if raw.ends_with('/') {
            plain = false;
            continue;
        }
        let mut parts = Vec::new();
        for part in raw.split('/') {
            match part {
                "" | "." => {}
                ".." => return Err(HashError::EscapesPackage(raw.clone())),
                p => parts.push(p),
            }
        }
        let clean = parts.join("/");
        if clean != raw || files.insert(clean, i).is_some() {
            plain = false;
        }
    }
    if plain {
        return Ok(zip_h1.clone());
    }
    let mut summary = Sha256Hasher::new();
    for (name, index) in &files {
        if name.contains('\n') {
            return Err(HashError::NewlineInName(name.clone()));
        }
        let mut entry = zip.by_index(*index)?;
        let mut hasher = Hashing::new(std::io::sink());
        std::io::copy(&mut entry, &mut hasher).map_err(|source| HashError::Entry {
            name: name.clone(),
            source,
        })?;
        summary.update(format!("{}  {name}\n", hasher.finish()).as_bytes());
    }
    Ok(H1::of_summary(summary))
}

fn hash_entry<R: Read + Seek>(
    zip: &mut zip::ZipArchive<R>,
    index: usize,
    name: &[u8],
    budget: &mut u64,
    limit: u64,
) -> Result<Sha256, HashError> {
    let entry_err = |source| HashError::Entry {
        name: String::from_utf8_lossy(name).into_owned(),
        source,
    };
    let mut hasher = Hashing::new(std::io::sink());
    let entry = zip.by_index(index)?;
    // Go's archive/zip reads directory entries as empty files, and refuses those with data.
    if name.ends_with(b"/") {
        if entry.compressed_size() != 0 {
            return Err(HashError::DirectoryWithData(
                String::from_utf8_lossy(name).into_owned(),
            ));
        }
        return Ok(hasher.finish());
    }
    // Read at most one byte past the remaining budget, so a lying header cannot make us read more.
    let mut limited = entry.take(budget.saturating_add(1));
    let copied = std::io::copy(&mut limited, &mut hasher).map_err(entry_err)?;
    if copied > *budget {
        return Err(HashError::TooLarge(limit));
    }
    *budget -= copied;
    Ok(hasher.finish())
}

/// What go-getter would unpack: no `..` element (split on `/` and `\\`), not absolute, no NUL.
fn is_safe_name(name: &[u8]) -> bool {
    !name.contains(&0)
        && !name.starts_with(b"/")
        && !name.starts_with(b"\\")
        && !name
            .split(|b| *b == b'/' || *b == b'\\')
            .any(|part| part == b"..")
}

/// Whether `s` is a well-formed `h1:` hash: the prefix and a base64 SHA-256.
pub fn is_h1(s: &str) -> bool {
    H1::parse(s).is_ok()
}

/// `zh:` form of a SHA-256 digest.
pub fn zh(sha256: &Sha256) -> String {
    format!("zh:{sha256}")
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::of(bytes).0
}

/// A string that is not the hash it should be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadHash {
    #[error("{0:?} is not a SHA-256 (64 lowercase hexadecimal digits)")]
    Sha256(String),
    #[error("{0:?} is not an h1: hash (\"h1:\" and the base64 of 32 bytes)")]
    H1(String),
}

/// A SHA-256 digest, as 64 lowercase hexadecimal digits (the form records, SHA256SUMS and
/// `zh:` carry). Serialised as that plain string; deserialising refuses anything else.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sha256(String);

impl Sha256 {
    /// `s` if it is 64 lowercase hexadecimal digits.
    pub fn parse(s: &str) -> Result<Sha256, BadHash> {
        if s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            Ok(Sha256(s.to_string()))
        } else {
            Err(BadHash::Sha256(s.to_string()))
        }
    }

    /// The SHA-256 of `bytes`.
    pub fn of(bytes: &[u8]) -> Sha256 {
        Sha256(hex::encode(Sha256Hasher::digest(bytes)))
    }

    fn of_hasher(hasher: Sha256Hasher) -> Sha256 {
        Sha256(hex::encode(hasher.finalize()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Terraform's `h1:` hash: `h1:` and the standard base64 of a SHA-256. Serialised as that
/// plain string; deserialising refuses anything else.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct H1(String);

impl H1 {
    /// `s` if it is `h1:` and the base64 of 32 bytes.
    pub fn parse(s: &str) -> Result<H1, BadHash> {
        let well_formed = s
            .strip_prefix("h1:")
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .is_some_and(|d| d.len() == 32);
        if well_formed {
            Ok(H1(s.to_string()))
        } else {
            Err(BadHash::H1(s.to_string()))
        }
    }

    fn of_summary(summary: Sha256Hasher) -> H1 {
        H1(format!(
            "h1:{}",
            base64::engine::general_purpose::STANDARD.encode(summary.finalize())
        ))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

macro_rules! hash_string {
    ($t:ident) => {
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $t {
            type Err = BadHash;

            fn from_str(s: &str) -> Result<$t, BadHash> {
                $t::parse(s)
            }
        }

        impl AsRef<str> for $t {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $t {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $t {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$t> for str {
            fn eq(&self, other: &$t) -> bool {
                self == other.0
            }
        }

        impl PartialEq<$t> for &str {
            fn eq(&self, other: &$t) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$t> for String {
            fn eq(&self, other: &$t) -> bool {
                *self == other.0
            }
        }

        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                $t::parse(&s).map_err(serde::de::Error::custom)
            }
        }
    };
}

hash_string!(Sha256);
hash_string!(H1);

/// A well-formed `h1:` for tests, different for each `seed`.
#[cfg(test)]
pub(crate) fn test_h1(seed: u8) -> H1 {
    H1(format!(
        "h1:{}",
        base64::engine::general_purpose::STANDARD.encode([seed; 32])
    ))
}

/// The SHA-256 and length of a byte sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digest {
    pub sha256: Sha256,
    pub size: u64,
}

/// More bytes than a [`Hashing`] was allowed to pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("more than the limit of {limit} bytes")]
pub struct TooLarge {
    pub limit: u64,
}

impl TooLarge {
    /// The `TooLarge` an I/O error of a [`Hashing`] stands for, if it is one.
    pub fn in_io(e: &std::io::Error) -> Option<TooLarge> {
        e.get_ref()?.downcast_ref::<TooLarge>().copied()
    }
}

impl From<TooLarge> for std::io::Error {
    fn from(e: TooLarge) -> std::io::Error {
        std::io::Error::other(e)
    }
}

/// The one streaming hasher: computes the SHA-256 and counts the bytes of what passes through
/// it, optionally refusing more than a cap ([`TooLarge`]). It wraps a writer
/// (`std::io::Write`), a reader (`std::io::Read`, `tokio::io::AsyncRead`), or nothing (`()`,
/// fed chunk by chunk with [`Hashing::update`], as a stream's chunks arrive). Bytes are counted
/// and hashed only once the inner writer or reader has taken or given them.
pub struct Hashing<T> {
    inner: T,
    hasher: Sha256Hasher,
    size: u64,
    cap: Option<u64>,
}

impl Hashing<()> {
    /// A hasher fed with [`update`](Hashing::update).
    pub fn bare() -> Self {
        Hashing::new(())
    }
}

impl<T> Hashing<T> {
    pub fn new(inner: T) -> Self {
        Hashing {
            inner,
            hasher: Sha256Hasher::new(),
            size: 0,
            cap: None,
        }
    }

    /// Refuses more than `max` bytes in total: the write, read or update that would pass the
    /// cap fails with [`TooLarge`] and hashes nothing of it.
    pub fn capped(mut self, max: u64) -> Self {
        self.cap = Some(max);
        self
    }

    /// Counts and hashes `bytes`, unless that would pass the cap.
    pub fn update(&mut self, bytes: &[u8]) -> Result<(), TooLarge> {
        self.admit(bytes.len())?;
        self.hasher.update(bytes);
        self.size += bytes.len() as u64;
        Ok(())
    }

    fn admit(&self, len: usize) -> Result<(), TooLarge> {
        match self.cap {
            Some(limit) if self.size.saturating_add(len as u64) > limit => Err(TooLarge { limit }),
            _ => Ok(()),
        }
    }

    /// Bytes passed so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn get_ref(&self) -> &T {
        &self.inner
    }

    pub fn get_mut(&mut self) -> &mut T {
        &mut self.inner
    }

    /// The digest of everything passed, and the inner writer or reader.
    pub fn into_parts(self) -> (Digest, T) {
        let digest = Digest {
            sha256: Sha256::of_hasher(self.hasher),
            size: self.size,
        };
        (digest, self.inner)
    }

    /// The digest of everything passed.
    pub fn digest(self) -> Digest {
        self.into_parts().0
    }

    /// The SHA-256 of everything passed.
    pub fn finish(self) -> Sha256 {
        self.digest().sha256
    }
}

impl<W: std::io::Write> std::io::Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.admit(buf.len())?;
        let n = self.inner.write(buf)?;
        self.update(&buf[..n])?;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.update(&buf[..n])?;
        Ok(n)
    }
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Hashing<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let poll = std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = &poll {
            if let Err(e) = this.update(&buf.filled()[before..]) {
                return std::task::Poll::Ready(Err(e.into()));
            }
        }
        poll
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Cursor, Write};
    use zip::write::SimpleFileOptions;

    fn build_zip(entries: &[(&str, Option<&[u8]>)]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let opts = SimpleFileOptions::default();
        for (name, content) in entries {
            match content {
                Some(c) => {
                    w.start_file(*name, opts).unwrap();
                    w.write_all(c).unwrap();
                }
                None => w.add_directory(*name, opts).unwrap(),
            }
        }
        w.finish().unwrap().into_inner()
    }

    /// The same computation spelled out the slow, obvious way, for the content we put in.
    fn expected_h1(files: &[(&str, &[u8])]) -> String {
        let mut sorted = files.to_vec();
        sorted.sort_by_key(|(name, _)| *name);
        let lines: Vec<String> = sorted
            .iter()
            .map(|(n, c)| format!("{}  {}\n", sha256_hex(c), n))
            .collect();
        let digest = Sha256Hasher::digest(lines.concat().as_bytes());
        format!(
            "h1:{}",
            base64::engine::general_purpose::STANDARD.encode(digest)
        )
    }

    #[test]
    fn h1_of_several_files_matches_dirhash() {
        let zip = build_zip(&[
            ("b.txt", Some(b"bee")),
            ("a.txt", Some(b"ay")),
            ("terraform-provider-x_v1", Some(b"#!")),
        ]);
        let got = h1_zip(Cursor::new(zip), HashLimits::default()).unwrap();
        assert_eq!(
            got,
            expected_h1(&[
                ("a.txt", b"ay"),
                ("b.txt", b"bee"),
                ("terraform-provider-x_v1", b"#!")
            ])
        );
    }

    #[test]
    fn h1_known_vector() {
        // Single file "hello" containing "hello\n": the line is
        // "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03  hello\n".
        let zip = build_zip(&[("hello", Some(b"hello\n"))]);
        let got = h1_zip(Cursor::new(zip), HashLimits::default()).unwrap();
        let line = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03  hello\n";
        let want = format!(
            "h1:{}",
            base64::engine::general_purpose::STANDARD.encode(Sha256Hasher::digest(line))
        );
        assert_eq!(got, want);
    }

    #[test]
    fn directory_entries_hash_as_empty_files() {
        let with_dir = build_zip(&[("docs/", None), ("docs/README.md", Some(b"read me"))]);
        let without_dir = build_zip(&[("docs/README.md", Some(b"read me"))]);
        let a = h1_zip(Cursor::new(with_dir), HashLimits::default()).unwrap();
        let b = h1_zip(Cursor::new(without_dir), HashLimits::default()).unwrap();
        assert_eq!(
            a,
            expected_h1(&[("docs/", b""), ("docs/README.md", b"read me")])
        );
        assert_eq!(b, expected_h1(&[("docs/README.md", b"read me")]));
        assert_ne!(a, b);
    }

    #[test]
    fn entry_order_in_the_zip_does_not_matter() {
        let a = build_zip(&[("x", Some(b"1")), ("y", Some(b"2"))]);
        let b = build_zip(&[("y", Some(b"2")), ("x", Some(b"1"))]);
        assert_eq!(
            h1_zip(Cursor::new(a), HashLimits::default()).unwrap(),
            h1_zip(Cursor::new(b), HashLimits::default()).unwrap()
        );
    }

    #[test]
    fn limits_are_enforced() {
        let zip = build_zip(&[
            ("a", Some(b"1")),
            ("b", Some(b"2")),
            ("c", Some(&[0u8; 1000])),
        ]);
        let few = HashLimits {
            max_entries: 2,
            ..HashLimits::default()
        };
        assert!(matches!(
            h1_zip(Cursor::new(zip.clone()), few),
            Err(HashError::TooManyEntries(3, 2))
        ));
        let small = HashLimits {
            max_uncompressed_bytes: 500,
            ..HashLimits::default()
        };
        assert!(matches!(
            h1_zip(Cursor::new(zip), small),
            Err(HashError::TooLarge(500))
        ));
    }

    /// Renames entries by patching their names in place (local headers and central directory),
    /// which `ZipWriter` would not let us write: duplicates, `..`, newlines.
    fn patch_names(mut zip: Vec<u8>, from: &str, to: &str) -> Vec<u8> {
        assert_eq!(from.len(), to.len());
        let mut i = 0;
        while i + from.len() <= zip.len() {
            if &zip[i..i + from.len()] == from.as_bytes() {
                zip[i..i + from.len()].copy_from_slice(to.as_bytes());
            }
            i += 1;
        }
        zip
    }

    #[test]
    fn duplicate_names_are_refused() {
        let zip = patch_names(
            build_zip(&[("aa", Some(b"first")), ("bb", Some(b"second"))]),
            "bb",
            "aa",
        );
        let err = h1_zip(Cursor::new(zip), HashLimits::default()).unwrap_err();
        assert!(matches!(err, HashError::DuplicateNames), "{err}");
    }

    #[test]
    fn hostile_names_are_refused_with_a_reason() {
        for (from, to) in [
            ("xx/../yy", "xx/../yy"),
            ("abcdefgh", "../../yy"),
            ("abcdefgh", "a\\..\\bcd"),
            ("abcdefgh", "/etc/pwd"),
            ("abcdefgh", "ab\0cdefg"),
            ("abcdefgh", "ab\ncdefg"),
        ] {
            let zip = patch_names(build_zip(&[(from, Some(b"x"))]), from, to);
            let err = h1_zip(Cursor::new(zip), HashLimits::default()).unwrap_err();
            assert!(
                matches!(err, HashError::UnsafeName(_) | HashError::NewlineInName(_)),
                "{to:?}: {err}"
            );
        }
        // "..." and "a..b" are ordinary names.
        let zip = build_zip(&[("...", Some(b"1")), ("a..b", Some(b"2"))]);
        assert!(h1_zip(Cursor::new(zip), HashLimits::default()).is_ok());
    }

    #[test]
    fn directory_entries_with_data_are_refused() {
        let zip = patch_names(build_zip(&[("dirx", Some(b"data"))]), "dirx", "dir/");
        let err = h1_zip(Cursor::new(zip), HashLimits::default()).unwrap_err();
        assert!(matches!(err, HashError::DirectoryWithData(_)), "{err}");
    }

    #[test]
    fn a_zip_bomb_stops_at_the_budget() {
        // 64 MiB of zeros deflates to a few dozen KiB.
        let zeros = vec![0u8; 64 << 20];
        let zip = build_zip(&[("bomb", Some(&zeros))]);
        assert!(zip.len() < 1 << 20, "{}", zip.len());
        let small = HashLimits {
            max_uncompressed_bytes: 1 << 20,
            ..HashLimits::default()
        };
        assert!(matches!(
            h1_zip(Cursor::new(zip.clone()), small),
            Err(HashError::TooLarge(_))
        ));
        // A header that lies about the size changes nothing: reading is what is counted.
        let pos = zip.windows(4).rposition(|w| w == b"PK\x01\x02").unwrap();
        let mut lying = zip;
        lying[pos + 24..pos + 28].copy_from_slice(&1u32.to_le_bytes());
        assert!(h1_zip(Cursor::new(lying), small).is_err());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(h1_zip(Cursor::new(b"not a zip".to_vec()), HashLimits::default()).is_err());
        assert!(h1_zip(Cursor::new(Vec::new()), HashLimits::default()).is_err());
    }

    #[test]
    fn installed_hash_ignores_directory_entries() {
        let flat = build_zip(&[("docs/README.md", Some(b"read me")), ("tool", Some(b"#!"))]);
        let with_dirs = build_zip(&[
            ("docs/", None),
            ("docs/README.md", Some(b"read me")),
            ("tool", Some(b"#!")),
        ]);
        let h1 = |zip: &[u8]| h1_zip(Cursor::new(zip), HashLimits::default()).unwrap();
        let expected = h1(&flat);
        // A flat zip: the recorded h1 is returned untouched (no content is read).
        let recorded = H1::parse(&format!("h1:{}", "A".repeat(43) + "=")).unwrap();
        assert_eq!(
            h1_installed(Cursor::new(&flat), &recorded).unwrap(),
            recorded
        );
        // With a directory entry, the zip's own hash differs, the installed one does not.
        assert_ne!(h1(&with_dirs), expected);
        assert_eq!(
            h1_installed(Cursor::new(&with_dirs), &h1(&with_dirs)).unwrap(),
            expected
        );
    }

    #[test]
    fn installed_hash_cleans_names_and_keeps_the_last_duplicate() {
        let odd = build_zip(&[("./tool", Some(b"old")), ("tool", Some(b"new"))]);
        let plain = build_zip(&[("tool", Some(b"new"))]);
        assert_eq!(
            h1_installed(Cursor::new(odd), &any_h1()).unwrap(),
            h1_zip(Cursor::new(plain), HashLimits::default()).unwrap()
        );
        let bad = build_zip(&[("../evil", Some(b"x"))]);
        assert!(
            h1_installed(Cursor::new(bad), &any_h1())
                .unwrap_err()
                .to_string()
                .contains("escapes")
        );
    }

    fn any_h1() -> H1 {
        H1::parse(&format!("h1:{}", "A".repeat(43) + "=")).unwrap()
    }

    #[test]
    fn hashes_parse_only_their_form() {
        let hex = sha256_hex(b"");
        assert_eq!(Sha256::parse(&hex).unwrap().as_str(), hex);
        assert_eq!(hex.parse::<Sha256>().unwrap(), Sha256::of(b""));
        for bad in [
            "",
            "abc",
            &hex.to_uppercase(),
            &format!("{hex}0"),
            &hex.replace('e', "g"),
        ] {
            assert_eq!(Sha256::parse(bad), Err(BadHash::Sha256(bad.to_string())));
        }
        let h1 = any_h1();
        assert_eq!(H1::parse(h1.as_str()).unwrap(), h1);
        assert!(is_h1(h1.as_str()));
        for bad in ["", "h1:", "h1:abc", "zh:AAAA", &h1.as_str()[3..], "h1:!!"] {
            assert_eq!(H1::parse(bad), Err(BadHash::H1(bad.to_string())));
            assert!(!is_h1(bad));
        }
    }

    #[test]
    fn hashes_are_plain_strings_in_json() {
        let sha = Sha256::of(b"x");
        let json = serde_json::to_string(&sha).unwrap();
        assert_eq!(json, format!("\"{sha}\""));
        assert_eq!(serde_json::from_str::<Sha256>(&json).unwrap(), sha);
        let err = serde_json::from_str::<Sha256>("\"ABC\"").unwrap_err();
        assert!(err.to_string().contains("is not a SHA-256"), "{err}");
        let h1 = any_h1();
        let json = serde_json::to_string(&h1).unwrap();
        assert_eq!(serde_json::from_str::<H1>(&json).unwrap(), h1);
        assert!(serde_json::from_str::<H1>("\"h1:x\"").is_err());
    }

    #[test]
    fn zh_is_prefixed_hex() {
        assert_eq!(
            zh(&Sha256::of(b"")),
            "zh:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
