//! Reading a tar stream from outside (a module package from an origin, a bundle carried across an
//! air gap) without trusting the sizes its extension headers declare.
//!
//! The `tar` crate, iterating normally, reads the body of every GNU long-name (`L`), GNU
//! long-link (`K`) and PAX (`x`) header into memory at whatever size the header declares, before
//! its caller sees the entry they describe. [`members`] iterates in the crate's raw mode instead,
//! which hands over every header as it is and reads no body, and handles those headers here:
//!
//! - an `L`, `K` or `x` body is read only when its declared size is at most [`MAX_EXTENSION`]
//!   bytes; a PAX global header (`g`) is held to the same cap and skipped, never buffered;
//! - an entry's path comes from its `L` header, else from its PAX `path`, else from its own
//!   header, and its link target likewise (`K`, PAX `linkpath`, the header); either longer than
//!   [`MAX_PATH`] bytes is refused;
//! - a PAX `size` must equal the size in the entry's own header (the raw iteration goes by the
//!   header's, and two readers disagreeing on where an entry ends is how archives are made to
//!   look different to each); other PAX keys are ignored;
//! - two headers of one kind for one entry, or extension headers at the end with no entry
//!   after them, are refused, as the crate refuses them.
//!
//! Whatever is wrong is a [`TarError`] naming the header by its number in the stream. Entry
//! bodies are left to the caller to read, within its own limits; a body not read is skipped
//! through a small fixed buffer.
//!
//! Counting only the bodies a caller reads leaves out what the reader inflates and skips:
//! headers, padding, PAX global headers, bodies of entries the caller passes over (a `./`
//! directory declaring gigabytes). [`Inflated`] counts every byte the tar reader takes from the
//! (decompressed) stream against one cap; its callers put it between the decompressor and
//! the reader, and a stream past the cap is [`TarProblem::TooLarge`].

use std::fmt;
use std::io::{self, Read};

/// Most bytes an `L`, `K`, `x` or `g` header's body may declare.
pub const MAX_EXTENSION: u64 = 64 << 10;

/// Most bytes an entry's path, or its link target, may have (Linux's `PATH_MAX`).
pub const MAX_PATH: usize = 4096;

/// A reader that lets at most `limit` bytes through: the tar stream as inflated, every byte
/// the tar reader takes counted, whatever it does with them. One byte more is an error
/// ([`StreamTooLarge`], found again by [`too_large`]).
pub struct Inflated<R> {
    inner: R,
    left: u64,
    limit: u64,
}

impl<R: Read> Inflated<R> {
    pub fn new(inner: R, limit: u64) -> Inflated<R> {
        Inflated {
            inner,
            left: limit,
            limit,
        }
    }
}

impl<R: Read> Read for Inflated<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        // One byte past the cap is asked for, to tell a stream that ends at it from one that
        // goes on.
        let want =
            usize::try_from(self.left.saturating_add(1)).map_or(buf.len(), |w| w.min(buf.len()));
        let n = self.inner.read(&mut buf[..want])?;
        if n as u64 > self.left {
            self.left = 0;
            return Err(io::Error::other(StreamTooLarge { limit: self.limit }));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// A tar stream that inflates past its cap.
#[derive(Debug, thiserror::Error)]
#[error("the tar stream inflates to more than {limit} bytes")]
pub struct StreamTooLarge {
    pub limit: u64,
}

/// The cap an I/O error says a stream went past, if that is what it is.
pub fn too_large(e: &io::Error) -> Option<u64> {
    e.get_ref()?
        .downcast_ref::<StreamTooLarge>()
        .map(|t| t.limit)
}

/// The extension headers read here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extension {
    /// `L`: the next entry's path.
    LongName,
    /// `K`: the next entry's link target.
    LongLink,
    /// `x`: PAX records for the next entry.
    Pax,
    /// `g`: PAX records for every entry after it (ignored).
    PaxGlobal,
}

impl fmt::Display for Extension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Extension::LongName => "a GNU long-name header",
            Extension::LongLink => "a GNU long-link header",
            Extension::Pax => "a PAX header",
            Extension::PaxGlobal => "a PAX global header",
        })
    }
}

/// Why a tar stream cannot be read further: the header at fault and the problem.
#[derive(Debug, thiserror::Error)]
#[error("tar entry {entry}: {problem}")]
pub struct TarError {
    /// The header's number in the stream, counting every header (extension headers included)
    /// from 1.
    pub entry: u64,
    pub problem: TarProblem,
}

/// What is wrong with one header of a tar stream.
#[derive(Debug, thiserror::Error)]
pub enum TarProblem {
    #[error("{kind} of {size} bytes, more than {MAX_EXTENSION}")]
    ExtensionTooLarge { kind: Extension, size: u64 },
    #[error("a {what} of {len} bytes, more than {MAX_PATH}")]
    PathTooLong { what: &'static str, len: usize },
    #[error("{0} follows another one for the same entry")]
    Repeated(Extension),
    #[error("{0} describes no entry: the archive ends after it")]
    Dangling(Extension),
    #[error("its PAX size {pax:?} is not the {header} bytes its header says")]
    PaxSize { pax: String, header: u64 },
    #[error("the stream inflates to more than {0} bytes, headers and padding included")]
    TooLarge(u64),
    #[error("{0}")]
    Read(io::Error),
}

impl TarProblem {
    /// A read error as the problem it is: the cap of [`Inflated`], or the reader's own.
    fn read(e: io::Error) -> TarProblem {
        match too_large(&e) {
            Some(limit) => TarProblem::TooLarge(limit),
            None => TarProblem::Read(e),
        }
    }
}

/// One entry of a tar stream, its extension headers applied.
pub struct Member<'a, R: Read> {
    /// Its own header's number in the stream (see [`TarError::entry`]).
    pub number: u64,
    /// Its path, as bytes.
    pub path: Vec<u8>,
    /// Its link target, if it has one.
    pub link: Option<Vec<u8>>,
    /// Its header (`body.header()`) and its body, to read.
    pub body: tar::Entry<'a, R>,
}

impl<R: Read> Member<'_, R> {
    /// Its path as text (invalid UTF-8 replaced), for names and messages.
    pub fn name(&self) -> String {
        String::from_utf8_lossy(&self.path).into_owned()
    }

    /// What kind of entry it is.
    pub fn kind(&self) -> tar::EntryType {
        self.body.header().entry_type()
    }
}

/// The entries of `archive`, which must not have been read yet.
pub fn members<R: Read>(archive: &mut tar::Archive<R>) -> Result<Members<'_, R>, TarError> {
    let entries = archive.entries().map_err(|e| TarError {
        entry: 1,
        problem: TarProblem::read(e),
    })?;
    Ok(Members {
        entries: entries.raw(true),
        number: 0,
        done: false,
    })
}

/// Iterator over the [`Member`]s of a tar stream; it ends after the first error.
pub struct Members<'a, R: Read> {
    entries: tar::Entries<'a, R>,
    /// Headers taken from the stream so far.
    number: u64,
    done: bool,
}

/// The extension bodies read for the entry to come.
#[derive(Default)]
struct Pending {
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
    pax: Option<Vec<u8>>,
}

impl<'a, R: Read> Members<'a, R> {
    fn next_member(&mut self) -> Result<Option<Member<'a, R>>, TarError> {
        let mut pending = Pending::default();
        loop {
            self.number += 1;
            let number = self.number;
            let fail = |problem| TarError {
                entry: number,
                problem,
            };
            let Some(entry) = self.entries.next() else {
                return match pending.first() {
                    Some(kind) => Err(fail(TarProblem::Dangling(kind))),
                    None => Ok(None),
                };
            };
            let mut entry = entry.map_err(|e| fail(TarProblem::read(e)))?;
            let kind = match entry.header().entry_type() {
                tar::EntryType::GNULongName => Extension::LongName,
                tar::EntryType::GNULongLink => Extension::LongLink,
                tar::EntryType::XHeader => Extension::Pax,
                tar::EntryType::XGlobalHeader => Extension::PaxGlobal,
                _ => return pending.apply(number, entry).map(Some).map_err(fail),
            };
            // In raw mode this is the size in the header itself, and nothing of the body has
            // been read yet.
            let size = entry.size();
            if size > MAX_EXTENSION {
                return Err(fail(TarProblem::ExtensionTooLarge { kind, size }));
            }
            let slot = match kind {
                Extension::LongName => &mut pending.long_name,
                Extension::LongLink => &mut pending.long_link,
                Extension::Pax => &mut pending.pax,
                // Skipped by the next call to the crate's iterator.
                Extension::PaxGlobal => continue,
            };
            if slot.is_some() {
                return Err(fail(TarProblem::Repeated(kind)));
            }
            let mut body = Vec::with_capacity(size as usize);
            entry
                .read_to_end(&mut body)
                .map_err(|e| fail(TarProblem::read(e)))?;
            *slot = Some(body);
        }
    }
}

impl<'a, R: Read> Iterator for Members<'a, R> {
    type Item = Result<Member<'a, R>, TarError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let next = self.next_member().transpose();
        self.done = !matches!(next, Some(Ok(_)));
        next
    }
}

impl Pending {
    /// The first extension header waiting for an entry, if any.
    fn first(&self) -> Option<Extension> {
        [
            (self.long_name.is_some(), Extension::LongName),
            (self.long_link.is_some(), Extension::LongLink),
            (self.pax.is_some(), Extension::Pax),
        ]
        .into_iter()
        .find_map(|(there, kind)| there.then_some(kind))
    }

    /// The entry `body` (header number `number`) with these extensions applied.
    fn apply<'a, R: Read>(
        self,
        number: u64,
        body: tar::Entry<'a, R>,
    ) -> Result<Member<'a, R>, TarProblem> {
        let pax = |key: &[u8]| -> Option<Vec<u8>> {
            let records = tar::PaxExtensions::new(self.pax.as_deref()?);
            records
                .filter_map(Result::ok)
                .find(|r| r.key_bytes() == key)
                .map(|r| r.value_bytes().to_vec())
        };
        if let Some(pax_size) = pax(b"size") {
            let header = body.size();
            if std::str::from_utf8(&pax_size)
                .ok()
                .and_then(|s| s.parse().ok())
                != Some(header)
            {
                return Err(TarProblem::PaxSize {
                    pax: String::from_utf8_lossy(&pax_size).into_owned(),
                    header,
                });
            }
        }
        let path = match self.long_name {
            Some(long) => without_nul(long),
            None => pax(b"path").unwrap_or_else(|| body.header().path_bytes().into_owned()),
        };
        let link = match self.long_link {
            Some(long) => Some(without_nul(long)),
            None => {
                pax(b"linkpath").or_else(|| body.header().link_name_bytes().map(|l| l.into_owned()))
            }
        };
        for (what, len) in [
            ("path", path.len()),
            ("link target", link.as_ref().map_or(0, Vec::len)),
        ] {
            if len > MAX_PATH {
                return Err(TarProblem::PathTooLong { what, len });
            }
        }
        Ok(Member {
            number,
            path,
            link,
            body,
        })
    }
}

/// A GNU long name or link without the NUL that usually ends it.
fn without_nul(mut bytes: Vec<u8>) -> Vec<u8> {
    if bytes.last() == Some(&0) {
        bytes.pop();
    }
    bytes
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;
    use tar::EntryType::{self, *};

    /// Appends an entry of `kind` named `name` holding `body`, padded to a block.
    pub(crate) fn push(tar: &mut impl Write, kind: EntryType, name: &str, body: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_entry_type(kind);
        h.set_mode(0o644);
        h.set_size(body.len() as u64);
        h.set_cksum();
        tar.write_all(h.as_bytes()).unwrap();
        tar.write_all(body).unwrap();
        tar.write_all(&[0; 512][..(512 - body.len() % 512) % 512])
            .unwrap();
    }

    /// A PAX body holding these records.
    pub(crate) fn pax(records: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in records {
            let rest = format!(" {k}={v}\n");
            let mut len = rest.len() + 1;
            while format!("{len}{rest}").len() != len {
                len += 1;
            }
            out.extend_from_slice(format!("{len}{rest}").as_bytes());
        }
        out
    }

    /// Size an oversized extension header declares in the tests (and holds, in zeros).
    pub(crate) const OVERSIZED: u64 = 16 << 20;

    /// Every extension kind, with its entry type.
    pub(crate) const EXTENSIONS: [(EntryType, Extension); 4] = [
        (GNULongName, Extension::LongName),
        (GNULongLink, Extension::LongLink),
        (XHeader, Extension::Pax),
        (XGlobalHeader, Extension::PaxGlobal),
    ];

    /// Writes `head` (whole tar entries), then a `kind` header declaring [`OVERSIZED`] bytes and
    /// holding as many zeros, then a file and a link to it, then the end of the archive, all
    /// gzipped (the zeros are written a block at a time, never held).
    pub(crate) fn oversized_tar_gz(head: &[u8], kind: EntryType) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(head).unwrap();
        let mut h = tar::Header::new_gnu();
        h.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
        h.set_entry_type(kind);
        h.set_size(OVERSIZED);
        h.set_cksum();
        gz.write_all(h.as_bytes()).unwrap();
        let block = vec![0u8; 1 << 16];
        for _ in 0..OVERSIZED / block.len() as u64 {
            gz.write_all(&block).unwrap();
        }
        push(&mut gz, Regular, "main.tf", b"# a module\n");
        let mut link = tar::Header::new_gnu();
        link.set_entry_type(Symlink);
        link.set_path("link.tf").unwrap();
        link.set_link_name("main.tf").unwrap();
        link.set_size(0);
        link.set_cksum();
        gz.write_all(link.as_bytes()).unwrap();
        gz.write_all(&[0; 1024]).unwrap();
        gz.finish().unwrap()
    }

    /// A member as read: its number, path, link and body.
    type Seen = (u64, String, Option<String>, Vec<u8>);

    /// Every member, or the first error.
    fn read(tar: impl Read) -> Result<Vec<Seen>, TarError> {
        let mut archive = tar::Archive::new(tar);
        let mut out = Vec::new();
        for member in members(&mut archive)? {
            let mut m = member?;
            let mut body = Vec::new();
            m.body.read_to_end(&mut body).unwrap();
            let link = m
                .link
                .as_deref()
                .map(|l| String::from_utf8_lossy(l).into_owned());
            out.push((m.number, m.name(), link, body));
        }
        Ok(out)
    }

    fn refused(tar: &[u8]) -> String {
        read(tar).expect_err("refused").to_string()
    }

    #[test]
    fn extensions_apply_to_the_entry_after_them() {
        let long = "d/".repeat(100) + "main.tf";
        let mut tar = Vec::new();
        push(&mut tar, XGlobalHeader, "g", &pax(&[("comment", "abc")]));
        push(
            &mut tar,
            GNULongName,
            "././@LongLink",
            format!("{long}\0").as_bytes(),
        );
        push(&mut tar, Regular, "short", b"hi");
        let records = pax(&[("mtime", "1.5"), ("path", "p.tf"), ("linkpath", "main.tf")]);
        push(&mut tar, XHeader, "x", &records);
        push(&mut tar, Symlink, "ignored", b"");
        push(&mut tar, GNULongLink, "././@LongLink", b"target\0");
        push(&mut tar, Link, "plain", b"");
        push(&mut tar, XHeader, "x", &pax(&[("size", "3")]));
        push(&mut tar, Regular, "sized", b"abc");
        tar.extend_from_slice(&[0; 1024]);
        assert_eq!(
            read(&tar[..]).unwrap(),
            [
                (3, long, None, b"hi".to_vec()),
                (5, "p.tf".into(), Some("main.tf".into()), Vec::new()),
                (7, "plain".into(), Some("target".into()), Vec::new()),
                (9, "sized".into(), None, b"abc".to_vec()),
            ]
        );
    }

    #[test]
    fn the_inflated_stream_is_capped_whatever_the_reader_does_with_it() {
        // A stream of exactly the cap is read whole; one byte more is the cap's error.
        let mut whole = Vec::new();
        Inflated::new(&[1u8; 1000][..], 1000)
            .read_to_end(&mut whole)
            .unwrap();
        assert_eq!(whole.len(), 1000);
        let e = Inflated::new(&[1u8; 1001][..], 1000)
            .read_to_end(&mut Vec::new())
            .unwrap_err();
        assert_eq!(too_large(&e), Some(1000));
        // Through the tar reader: a PAX global header it skips counts like any byte.
        let mut tar = Vec::new();
        push(
            &mut tar,
            XGlobalHeader,
            "g",
            &pax(&[("comment", &"x".repeat(4000))]),
        );
        push(&mut tar, Regular, "f", b"1");
        tar.extend_from_slice(&[0; 1024]);
        let mut archive = tar::Archive::new(Inflated::new(&tar[..], 2048));
        let e = members(&mut archive)
            .unwrap()
            .find_map(Result::err)
            .expect("refused");
        assert_eq!(
            (e.entry, e.problem.to_string()),
            (
                2,
                "the stream inflates to more than 2048 bytes, headers and padding included"
                    .to_string()
            )
        );
        let mut archive = tar::Archive::new(Inflated::new(&tar[..], tar.len() as u64));
        assert_eq!(
            members(&mut archive).unwrap().filter(Result::is_ok).count(),
            1
        );
    }

    #[test]
    fn oversized_extension_bodies_are_refused_before_they_are_read() {
        for (kind, extension) in EXTENSIONS {
            let mut tar = Vec::new();
            push(&mut tar, Regular, "first", b"1");
            let gz = oversized_tar_gz(&tar, kind);
            let e = read(flate2::read::GzDecoder::new(&gz[..])).unwrap_err();
            assert_eq!(e.entry, 2, "{e}");
            let TarProblem::ExtensionTooLarge { kind, size } = e.problem else {
                panic!("{e}");
            };
            assert_eq!((kind, size), (extension, OVERSIZED));
            assert_eq!(
                e.to_string(),
                format!("tar entry 2: {extension} of 16777216 bytes, more than 65536")
            );
        }
    }

    #[test]
    fn malformed_extensions_are_refused() {
        let mut long_path = Vec::new();
        push(
            &mut long_path,
            GNULongName,
            "././@LongLink",
            "a/".repeat(2049).as_bytes(),
        );
        push(&mut long_path, Regular, "f", b"");
        let mut long_link = Vec::new();
        let records = pax(&[("linkpath", &"a/".repeat(2049))]);
        push(&mut long_link, XHeader, "x", &records);
        push(&mut long_link, Symlink, "l", b"");
        let mut twice = Vec::new();
        push(&mut twice, XHeader, "x", &pax(&[("path", "a")]));
        push(&mut twice, XHeader, "x", &pax(&[("path", "b")]));
        let mut dangling = Vec::new();
        push(&mut dangling, GNULongLink, "././@LongLink", b"t");
        dangling.extend_from_slice(&[0; 1024]);
        let mut sized = Vec::new();
        push(&mut sized, XHeader, "x", &pax(&[("size", "1024")]));
        push(&mut sized, Regular, "f", b"abc");
        for (tar, expected) in [
            (
                long_path,
                "tar entry 2: a path of 4098 bytes, more than 4096",
            ),
            (
                long_link,
                "tar entry 2: a link target of 4098 bytes, more than 4096",
            ),
            (
                twice,
                "tar entry 2: a PAX header follows another one for the same entry",
            ),
            (
                dangling,
                "tar entry 2: a GNU long-link header describes no entry",
            ),
            (
                sized,
                "tar entry 2: its PAX size \"1024\" is not the 3 bytes its header says",
            ),
        ] {
            let e = refused(&tar);
            assert!(e.starts_with(expected), "{e}");
        }
        let e = refused(b"not a tar archive, just some bytes");
        assert!(e.starts_with("tar entry 1: "), "{e}");
    }
}
