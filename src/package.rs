//! Module packages: the archive provender serves for a module version.
//!
//! Whatever an origin hands out (a `.tar.gz`, `.tgz`, `.tar` or `.zip`, or a `git archive` of a
//! commit), provender unpacks it into a scratch directory and writes one **deterministic
//! `.tar.gz`**: regular files and directories only, sorted, with fixed owners, times and modes
//! (0755 for executables and directories, 0644 otherwise). The same input always gives the same
//! bytes, so every replica serves the same SHA-256.
//!
//! The input is hostile until proven otherwise. Entries whose names are absolute, contain `..`,
//! NUL or backslashes are refused; so are links that point out of the tree, links to
//! directories, devices and FIFOs. A link to a file inside the tree is replaced by a copy of
//! the file (Terraform's archive extractor would write it as an empty file). Entries are
//! counted and unpacked bytes are counted as they are read, whatever the archive's headers
//! claim, against [`PackLimits`]. A tar stream is read through [`crate::tarball`], which bounds
//! its extension headers (long names, PAX records) before any entry is seen; GNU sparse files are
//! refused. An archive with no regular file is refused, as Terraform refuses it.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};

/// The archive formats an origin may hand out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    TarGz,
    Tar,
    Zip,
}

impl Format {
    /// The format named by a go-getter archive type (`?archive=tar.gz`) or a file name's
    /// extension; `None` for anything else. Terraform's bz2/xz forms are named so that the
    /// error can say so.
    pub fn from_name(name: &str) -> Option<Result<Format, PackError>> {
        let lower = name.to_ascii_lowercase();
        let ends = |ext: &str| lower == ext || lower.ends_with(&format!(".{ext}"));
        if ends("tar.gz") || ends("tgz") || ends("gz") {
            Some(Ok(Format::TarGz))
        } else if ends("zip") {
            Some(Ok(Format::Zip))
        } else if ends("tar") {
            Some(Ok(Format::Tar))
        } else if ["tar.bz2", "tbz2", "bz2", "tar.xz", "txz", "xz"]
            .iter()
            .any(|e| ends(e))
        {
            Some(Err(PackError::Unsupported(format!(
                "{name}: bzip2 and xz archives are not supported; offer .tar.gz, .tgz or .zip"
            ))))
        } else {
            None
        }
    }
}

/// What a tar stream may hold besides its files' bytes for each entry: a 512-byte header, a
/// GNU long-name or PAX header for a long path (up to 4 KiB and its own header), and padding
/// (as a `git archive` may: its cap is [`PackLimits::max_tar_stream`] too).
pub const TAR_OVERHEAD_PER_ENTRY: u64 = 6 * 1024;

/// Bounds on unpacking one archive.
#[derive(Debug, Clone, Copy)]
pub struct PackLimits {
    /// Most entries (files, directories, links).
    pub max_entries: usize,
    /// Most bytes all files may expand to, in total.
    pub max_unpacked: u64,
}

impl PackLimits {
    /// Most bytes a tar stream may inflate to, every byte the reader takes counted (headers,
    /// padding, and what it skips: PAX global headers, bodies of entries passed over): the
    /// files' bytes and [`TAR_OVERHEAD_PER_ENTRY`] for each entry allowed, and one more for the
    /// end of the archive. A package stored under these limits always unpacks again under
    /// them (`import`, re-verification).
    pub fn max_tar_stream(&self) -> u64 {
        (self.max_entries as u64)
            .saturating_add(1)
            .saturating_mul(TAR_OVERHEAD_PER_ENTRY)
            .saturating_add(self.max_unpacked)
    }
}

/// Why an archive cannot become a module package.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("reading the archive: {0}")]
    Io(io::Error),
    #[error("the archive is not a readable {format}: {message}")]
    Malformed {
        format: &'static str,
        message: String,
    },
    #[error("is not an acceptable tar archive: {0}")]
    Tar(crate::tarball::TarError),
    #[error("entry {name:?}: {why}")]
    Unsafe { name: String, why: &'static str },
    #[error("more than {0} entries (modules.max_entries)")]
    TooManyEntries(usize),
    #[error("unpacks to more than {} (modules.max_unpacked_size)", bytesize::ByteSize(*.0))]
    TooLarge(u64),
    #[error(
        "its tar stream inflates to more than {} (modules.max_unpacked_size, and {} per entry \
         modules.max_entries allows for headers, long names and padding)",
        bytesize::ByteSize(*.0),
        bytesize::ByteSize(TAR_OVERHEAD_PER_ENTRY)
    )]
    StreamTooLarge(u64),
    #[error("holds no file")]
    Empty,
    #[error("the package has no subdirectory {0:?}")]
    NoSubdir(String),
    #[error("{0}")]
    Unsupported(String),
}

impl From<io::Error> for PackError {
    /// A read past the inflated stream's cap ([`crate::tarball::Inflated`]) is the package
    /// being too large; any other error, I/O.
    fn from(e: io::Error) -> Self {
        match crate::tarball::too_large(&e) {
            Some(limit) => PackError::StreamTooLarge(limit),
            None => PackError::Io(e),
        }
    }
}

impl From<crate::tarball::TarError> for PackError {
    fn from(e: crate::tarball::TarError) -> Self {
        match e.problem {
            crate::tarball::TarProblem::TooLarge(limit) => PackError::StreamTooLarge(limit),
            _ => PackError::Tar(e),
        }
    }
}

/// What [`repack`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed {
    pub files: usize,
    pub unpacked_bytes: u64,
}

/// A link found while unpacking: where it is and what it points to (relative to the tree).
struct Link {
    at: PathBuf,
    target: PathBuf,
}

/// Where a package is unpacked before it is repacked: a scratch directory ([`repack`], what
/// serving and `import` use) or memory ([`repack_in_memory`], so that fuzzing runs millions of
/// inputs). The [`Unpacker`] holds every rule and hands a tree only relative paths it checked
/// (normal components, nothing else), so both kinds behave alike.
trait Tree {
    /// Creates the directory `rel` and its parents.
    fn make_dir(&mut self, rel: &Path) -> io::Result<()>;
    fn is_dir(&self, rel: &Path) -> bool;
    fn is_file(&self, rel: &Path) -> bool;
    /// Creates (or replaces) the file `rel`, and its parents, from at most `limit` bytes of
    /// `body`; returns how many it copied.
    fn write_file(
        &mut self,
        rel: &Path,
        body: &mut dyn Read,
        limit: u64,
        executable: bool,
    ) -> io::Result<u64>;
    fn file_len(&self, rel: &Path) -> io::Result<u64>;
    /// Copies the file `from` to `to` (creating `to`'s parents).
    fn copy_file(&mut self, from: &Path, to: &Path) -> io::Result<()>;
    /// Every file (`false`) and directory (`true`) under `dir`, as paths relative to `dir`,
    /// sorted by path (directories before what they hold).
    fn walk(&self, dir: &Path) -> io::Result<Vec<(PathBuf, bool)>>;
    /// What `dir` holds directly: each entry and whether it is a directory.
    fn children(&self, dir: &Path) -> io::Result<Vec<(PathBuf, bool)>>;
    fn is_executable(&self, rel: &Path) -> io::Result<bool>;
    fn open(&self, rel: &Path) -> io::Result<Box<dyn Read + '_>>;
}

/// A tree in a scratch directory.
struct DiskTree<'a>(&'a Path);

impl Tree for DiskTree<'_> {
    fn make_dir(&mut self, rel: &Path) -> io::Result<()> {
        fs::create_dir_all(self.0.join(rel))
    }

    fn is_dir(&self, rel: &Path) -> bool {
        self.0.join(rel).is_dir()
    }

    fn is_file(&self, rel: &Path) -> bool {
        self.0.join(rel).is_file()
    }

    fn write_file(
        &mut self,
        rel: &Path,
        body: &mut dyn Read,
        limit: u64,
        executable: bool,
    ) -> io::Result<u64> {
        let path = self.0.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        let mut out = fs::File::create(&path)?;
        let copied = io::copy(&mut body.take(limit), &mut out)?;
        #[cfg(unix)]
        if executable {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
        }
        #[cfg(not(unix))]
        let _ = executable;
        Ok(copied)
    }

    fn file_len(&self, rel: &Path) -> io::Result<u64> {
        Ok(fs::metadata(self.0.join(rel))?.len())
    }

    fn copy_file(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        let dest = self.0.join(to);
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::copy(self.0.join(from), dest).map(|_| ())
    }

    fn walk(&self, dir: &Path) -> io::Result<Vec<(PathBuf, bool)>> {
        let root = self.0.join(dir);
        let mut out = Vec::new();
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            for entry in fs::read_dir(root.join(&rel))? {
                let entry = entry?;
                let path = rel.join(entry.file_name());
                let kind = entry.file_type()?;
                if kind.is_dir() {
                    stack.push(path.clone());
                    out.push((path, true));
                } else if kind.is_file() {
                    out.push((path, false));
                }
            }
        }
        out.sort_by(|a, b| a.0.as_os_str().cmp(b.0.as_os_str()));
        Ok(out)
    }

    fn children(&self, dir: &Path) -> io::Result<Vec<(PathBuf, bool)>> {
        fs::read_dir(self.0.join(dir))?
            .map(|e| {
                let e = e?;
                Ok((dir.join(e.file_name()), e.file_type()?.is_dir()))
            })
            .collect()
    }

    fn is_executable(&self, rel: &Path) -> io::Result<bool> {
        let meta = fs::metadata(self.0.join(rel))?;
        #[cfg(unix)]
        return Ok(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 != 0);
        #[cfg(not(unix))]
        return Ok(false);
    }

    fn open(&self, rel: &Path) -> io::Result<Box<dyn Read + '_>> {
        Ok(Box::new(fs::File::open(self.0.join(rel))?))
    }
}

/// A node of a [`MemTree`].
enum Node {
    Dir,
    File { bytes: Vec<u8>, executable: bool },
}

/// A tree in memory. It is the oracle of the fuzz targets as much as a store: a path that is
/// not made of normal components alone (the [`Unpacker`] lets none through) panics.
#[derive(Default)]
struct MemTree(BTreeMap<PathBuf, Node>);

impl MemTree {
    fn checked(rel: &Path) -> &Path {
        assert!(
            rel.components().all(|c| matches!(c, Component::Normal(_))),
            "an unchecked path reached the tree: {rel:?}"
        );
        rel
    }

    fn not_a_dir(rel: &Path) -> io::Error {
        io::Error::other(format!("{}: not a directory", rel.display()))
    }
}

impl Tree for MemTree {
    fn make_dir(&mut self, rel: &Path) -> io::Result<()> {
        let mut at = PathBuf::new();
        for part in Self::checked(rel).components() {
            at.push(part);
            match self.0.get(&at) {
                Some(Node::Dir) => {}
                Some(Node::File { .. }) => return Err(Self::not_a_dir(&at)),
                None => {
                    self.0.insert(at.clone(), Node::Dir);
                }
            }
        }
        Ok(())
    }

    fn is_dir(&self, rel: &Path) -> bool {
        rel.as_os_str().is_empty() || matches!(self.0.get(rel), Some(Node::Dir))
    }

    fn is_file(&self, rel: &Path) -> bool {
        matches!(self.0.get(rel), Some(Node::File { .. }))
    }

    fn write_file(
        &mut self,
        rel: &Path,
        body: &mut dyn Read,
        limit: u64,
        executable: bool,
    ) -> io::Result<u64> {
        if let Some(parent) = Self::checked(rel).parent() {
            self.make_dir(parent)?;
        }
        if self.is_dir(rel) {
            return Err(io::Error::other(format!(
                "{}: is a directory",
                rel.display()
            )));
        }
        let mut bytes = Vec::new();
        body.take(limit).read_to_end(&mut bytes)?;
        let copied = bytes.len() as u64;
        self.0
            .insert(rel.to_path_buf(), Node::File { bytes, executable });
        Ok(copied)
    }

    fn file_len(&self, rel: &Path) -> io::Result<u64> {
        match self.0.get(rel) {
            Some(Node::File { bytes, .. }) => Ok(bytes.len() as u64),
            _ => Err(io::ErrorKind::NotFound.into()),
        }
    }

    fn copy_file(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        let (bytes, executable) = match self.0.get(from) {
            Some(Node::File { bytes, executable }) => (bytes.clone(), *executable),
            _ => return Err(io::ErrorKind::NotFound.into()),
        };
        self.write_file(to, &mut bytes.as_slice(), u64::MAX, executable)
            .map(|_| ())
    }

    fn walk(&self, dir: &Path) -> io::Result<Vec<(PathBuf, bool)>> {
        let mut out: Vec<(PathBuf, bool)> = self
            .0
            .iter()
            .filter_map(|(path, node)| {
                let rel = path.strip_prefix(dir).ok()?;
                (!rel.as_os_str().is_empty())
                    .then(|| (rel.to_path_buf(), matches!(node, Node::Dir)))
            })
            .collect();
        out.sort_by(|a, b| a.0.as_os_str().cmp(b.0.as_os_str()));
        Ok(out)
    }

    fn children(&self, dir: &Path) -> io::Result<Vec<(PathBuf, bool)>> {
        Ok(self
            .0
            .iter()
            .filter(|(path, _)| path.parent() == Some(dir))
            .map(|(path, node)| (path.clone(), matches!(node, Node::Dir)))
            .collect())
    }

    fn is_executable(&self, rel: &Path) -> io::Result<bool> {
        Ok(matches!(
            self.0.get(rel),
            Some(Node::File {
                executable: true,
                ..
            })
        ))
    }

    fn open(&self, rel: &Path) -> io::Result<Box<dyn Read + '_>> {
        match self.0.get(rel) {
            Some(Node::File { bytes, .. }) => Ok(Box::new(bytes.as_slice())),
            _ => Err(io::ErrorKind::NotFound.into()),
        }
    }
}

/// Unpacking state: the tree and the running totals.
struct Unpacker<T> {
    tree: T,
    limits: PackLimits,
    entries: usize,
    bytes: u64,
    links: Vec<Link>,
}

/// A name from an archive as a safe relative path, or why not.
fn safe_path(name: &str) -> Result<Option<PathBuf>, PackError> {
    let unsafe_entry = |why| PackError::Unsafe {
        name: name.to_string(),
        why,
    };
    if name.contains('\0') || name.contains('\\') {
        return Err(unsafe_entry("contains a NUL or backslash"));
    }
    let trimmed = name.trim_start_matches("./");
    if trimmed.starts_with('/') {
        return Err(unsafe_entry("is an absolute path"));
    }
    let mut out = PathBuf::new();
    for part in Path::new(trimmed).components() {
        match part {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => return Err(unsafe_entry("contains '..'")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(unsafe_entry("is an absolute path"));
            }
        }
    }
    Ok((!out.as_os_str().is_empty()).then_some(out))
}

impl<T: Tree> Unpacker<T> {
    fn new(tree: T, limits: PackLimits) -> Self {
        Unpacker {
            tree,
            limits,
            entries: 0,
            bytes: 0,
            links: Vec::new(),
        }
    }

    fn count(&mut self) -> Result<(), PackError> {
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            return Err(PackError::TooManyEntries(self.limits.max_entries));
        }
        Ok(())
    }

    fn dir(&mut self, rel: &Path) -> Result<(), PackError> {
        self.count()?;
        self.tree.make_dir(rel)?;
        Ok(())
    }

    fn file(&mut self, rel: &Path, body: &mut dyn Read, executable: bool) -> Result<(), PackError> {
        self.count()?;
        if self.tree.is_dir(rel) {
            return Err(PackError::Unsafe {
                name: rel.display().to_string(),
                why: "is both a directory and a file",
            });
        }
        let left = self.limits.max_unpacked - self.bytes;
        let copied = self.tree.write_file(rel, body, left + 1, executable)?;
        if copied > left {
            return Err(PackError::TooLarge(self.limits.max_unpacked));
        }
        self.bytes += copied;
        Ok(())
    }

    /// Remembers a link, to be replaced by a copy of its target once everything is unpacked.
    fn link(&mut self, rel: &Path, target: &Path, hard: bool) -> Result<(), PackError> {
        self.count()?;
        let name = rel.display().to_string();
        let out_of_tree = || PackError::Unsafe {
            name: name.clone(),
            why: "is a link pointing out of the tree",
        };
        // A symbolic link is relative to its own directory; a hard link names a path from the
        // archive's root.
        let base = if hard {
            PathBuf::new()
        } else {
            rel.parent().map(Path::to_path_buf).unwrap_or_default()
        };
        if target.is_absolute() {
            return Err(out_of_tree());
        }
        let mut resolved = base;
        for part in target.components() {
            match part {
                Component::Normal(p) => resolved.push(p),
                Component::CurDir => {}
                Component::ParentDir => {
                    if !resolved.pop() {
                        return Err(out_of_tree());
                    }
                }
                _ => return Err(out_of_tree()),
            }
        }
        self.links.push(Link {
            at: rel.to_path_buf(),
            target: resolved,
        });
        Ok(())
    }

    /// Replaces every link by a copy of the file it points to (following links to links).
    fn resolve_links(&mut self) -> Result<(), PackError> {
        let by_path: BTreeMap<PathBuf, PathBuf> = self
            .links
            .iter()
            .map(|l| (l.at.clone(), l.target.clone()))
            .collect();
        for link in &self.links {
            let mut target = link.target.clone();
            for _ in 0..=by_path.len() {
                match by_path.get(&target) {
                    Some(next) => target = next.clone(),
                    None => break,
                }
            }
            let name = link.at.display().to_string();
            if self.tree.is_dir(&target) {
                return Err(PackError::Unsafe {
                    name,
                    why: "is a link to a directory",
                });
            }
            if !self.tree.is_file(&target) {
                return Err(PackError::Unsafe {
                    name,
                    why: "is a link to nothing in the tree",
                });
            }
            let size = self.tree.file_len(&target)?;
            if self.bytes + size > self.limits.max_unpacked {
                return Err(PackError::TooLarge(self.limits.max_unpacked));
            }
            self.bytes += size;
            self.tree.copy_file(&target, &link.at)?;
        }
        Ok(())
    }

    fn unpack_tar(&mut self, input: impl Read) -> Result<(), PackError> {
        // Every byte the tar reader inflates counts, not only the files' own: headers,
        // padding and whatever it skips.
        let input = crate::tarball::Inflated::new(input, self.limits.max_tar_stream());
        let mut archive = tar::Archive::new(input);
        for member in crate::tarball::members(&mut archive)? {
            let mut member = member?;
            let name = member.name();
            let Some(rel) = safe_path(&name)? else {
                continue;
            };
            match member.kind() {
                tar::EntryType::Directory => self.dir(&rel)?,
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    let executable = member.body.header().mode().is_ok_and(|m| m & 0o111 != 0);
                    self.file(&rel, &mut member.body, executable)?;
                }
                kind @ (tar::EntryType::Symlink | tar::EntryType::Link) => {
                    let target =
                        String::from_utf8_lossy(member.link.as_deref().unwrap_or_default());
                    self.link(&rel, Path::new(&*target), kind == tar::EntryType::Link)?;
                }
                tar::EntryType::GNUSparse => {
                    return Err(PackError::Unsafe {
                        name,
                        why: "is a GNU sparse file, which is not supported",
                    });
                }
                _ => {
                    return Err(PackError::Unsafe {
                        name,
                        why: "is neither a file, a directory nor a link",
                    });
                }
            }
        }
        Ok(())
    }

    fn unpack_zip(&mut self, input: impl Read + io::Seek) -> Result<(), PackError> {
        let malformed = |e: zip::result::ZipError| PackError::Malformed {
            format: "zip archive",
            message: e.to_string(),
        };
        let mut zip = zip::ZipArchive::new(input).map_err(malformed)?;
        if zip.len() > self.limits.max_entries {
            return Err(PackError::TooManyEntries(self.limits.max_entries));
        }
        for i in 0..zip.len() {
            let mut entry = zip.by_index(i).map_err(malformed)?;
            let name = String::from_utf8_lossy(entry.name_raw()).into_owned();
            let Some(rel) = safe_path(&name)? else {
                continue;
            };
            let mode = entry.unix_mode().unwrap_or(0o644);
            if entry.is_dir() {
                self.dir(&rel)?;
            } else if mode & 0o170000 == 0o120000 {
                let mut target = String::new();
                (&mut entry)
                    .take(4096)
                    .read_to_string(&mut target)
                    .map_err(|e| PackError::Malformed {
                        format: "zip archive",
                        message: format!("link {name:?}: {e}"),
                    })?;
                self.link(&rel, Path::new(&target), false)?;
            } else {
                self.file(&rel, &mut entry, mode & 0o111 != 0)?;
            }
        }
        Ok(())
    }

    /// Unpacks `input` (in `format`), checks the tree and writes the package with `write`
    /// (the tree, its root; returns how many files it wrote).
    fn repack(
        mut self,
        input: impl Read + io::Seek,
        format: Format,
        strip_top: bool,
        subdir: Option<&str>,
        write: impl FnOnce(&T, &Path, Vec<(PathBuf, bool)>) -> Result<usize, PackError>,
    ) -> Result<Packed, PackError> {
        match format {
            Format::TarGz => {
                self.unpack_tar(flate2::read::MultiGzDecoder::new(io::BufReader::new(input)))?
            }
            Format::Tar => self.unpack_tar(io::BufReader::new(input))?,
            Format::Zip => self.unpack_zip(input)?,
        }
        self.resolve_links()?;
        let mut root = PathBuf::new();
        if strip_top {
            if let [(only, true)] = self.tree.children(&root)?.as_slice() {
                root = only.clone();
            }
        }
        if let Some(sub) = subdir {
            let dir = safe_path(sub)?.map(|rel| root.join(rel));
            if !dir.is_some_and(|d| self.tree.is_dir(&d)) {
                return Err(PackError::NoSubdir(sub.to_string()));
            }
        }
        // The package as written holds a directory entry for every directory, also those an
        // archive only implies by its file names (a zip or tar may list `a/b/c` alone): held to
        // the same cap, so a package that is stored can be unpacked again under it (`import`,
        // re-verification).
        let entries = self.tree.walk(&root)?;
        if entries.len() > self.limits.max_entries {
            return Err(PackError::TooManyEntries(self.limits.max_entries));
        }
        let files = write(&self.tree, &root, entries)?;
        if files == 0 {
            return Err(PackError::Empty);
        }
        Ok(Packed {
            files,
            unpacked_bytes: self.bytes,
        })
    }
}

/// Unpacks `input` (a file in `format`) into `scratch` (an empty directory), checks it, and
/// writes the deterministic `.tar.gz` of the package to `out`. With `strip_top`, a package
/// holding exactly one directory at its root is re-rooted into it (what a `//*` subdirectory
/// asks for). `subdir`, when given, must exist in the package.
pub fn repack(
    input: &Path,
    format: Format,
    scratch: &Path,
    strip_top: bool,
    subdir: Option<&str>,
    limits: PackLimits,
    out: impl Write,
) -> Result<Packed, PackError> {
    Unpacker::new(DiskTree(scratch), limits).repack(
        fs::File::open(input)?,
        format,
        strip_top,
        subdir,
        |tree, root, entries| write_tar_gz(tree, root, entries, out),
    )
}

/// A stored package (the `.tar.gz` [`repack`] wrote) as a deterministic **zip**, the form an
/// OCI module artifact carries (OpenTofu's `oci://` module sources): unpacked into `scratch`
/// (an empty directory) under the same rules and `limits`, then written with the same entries
/// in the same order, directories included, every time 1980-01-01 00:00 (the zip format's
/// first), Unix modes 0755 for directories and executables and 0644 otherwise, deflated at
/// one fixed level. The same package always gives the same bytes. With `subdir` (the
/// record's `//subdir`), the zip holds that directory of the package at its root: the module
/// directory the CLI loads.
pub fn zip_package(
    input: &Path,
    subdir: Option<&str>,
    scratch: &Path,
    limits: PackLimits,
    out: impl Write + io::Seek,
) -> Result<Packed, PackError> {
    Unpacker::new(DiskTree(scratch), limits).repack(
        fs::File::open(input)?,
        Format::TarGz,
        false,
        subdir,
        |tree, root, entries| match subdir.map(safe_path).transpose()?.flatten() {
            Some(rel) => {
                let dir = root.join(rel);
                write_zip(tree, &dir, tree.walk(&dir)?, out)
            }
            None => write_zip(tree, root, entries, out),
        },
    )
}

/// [`repack`] with the package unpacked in memory instead of a scratch directory: the same
/// rules and the same bytes out, for inputs small enough to hold (the fuzz targets, tests).
pub fn repack_in_memory(
    input: &[u8],
    format: Format,
    strip_top: bool,
    subdir: Option<&str>,
    limits: PackLimits,
    out: impl Write,
) -> Result<Packed, PackError> {
    Unpacker::new(MemTree::default(), limits).repack(
        io::Cursor::new(input),
        format,
        strip_top,
        subdir,
        |tree, root, entries| write_tar_gz(tree, root, entries, out),
    )
}

/// Writes the deterministic `.tar.gz` of the tree under `root` (its `entries`, as `Tree::walk`
/// lists them); returns how many files it holds.
fn write_tar_gz(
    tree: &impl Tree,
    root: &Path,
    entries: Vec<(PathBuf, bool)>,
    out: impl Write,
) -> Result<usize, PackError> {
    let gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(out, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    tar.mode(tar::HeaderMode::Deterministic);
    let mut files = 0;
    for (rel, is_dir) in entries {
        let mut header = tar::Header::new_ustar();
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        let name = rel.to_string_lossy().replace('\\', "/");
        if is_dir {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            header.set_size(0);
            tar.append_data(&mut header, format!("{name}/"), io::empty())?;
        } else {
            let path = root.join(&rel);
            let executable = tree.is_executable(&path)?;
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(if executable { 0o755 } else { 0o644 });
            header.set_size(tree.file_len(&path)?);
            tar.append_data(&mut header, &name, tree.open(&path)?)?;
            files += 1;
        }
    }
    let gz = tar.into_inner()?;
    gz.finish()?.flush()?;
    Ok(files)
}

/// Writes the deterministic zip of the tree under `root` (its `entries`); returns how many files
/// it holds.
fn write_zip(
    tree: &impl Tree,
    root: &Path,
    entries: Vec<(PathBuf, bool)>,
    out: impl Write + io::Seek,
) -> Result<usize, PackError> {
    let zip_error = |e: zip::result::ZipError| match e {
        zip::result::ZipError::Io(e) => PackError::Io(e),
        other => PackError::Io(io::Error::other(other)),
    };
    let options = |mode: u32| {
        zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .compression_level(Some(6))
            .last_modified_time(zip::DateTime::default())
            .unix_permissions(mode)
            .large_file(false)
    };
    let mut zip = zip::ZipWriter::new(out);
    let mut files = 0;
    for (rel, is_dir) in entries {
        let name = rel.to_string_lossy().replace('\\', "/");
        if is_dir {
            zip.add_directory(format!("{name}/"), options(0o755))
                .map_err(zip_error)?;
        } else {
            let path = root.join(&rel);
            let mode = if tree.is_executable(&path)? {
                0o755
            } else {
                0o644
            };
            let len = tree.file_len(&path)?;
            zip.start_file(name, options(mode).large_file(len >= u32::MAX as u64))
                .map_err(zip_error)?;
            io::copy(&mut tree.open(&path)?, &mut zip)?;
            files += 1;
        }
    }
    zip.finish().map_err(zip_error)?.flush()?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: PackLimits = PackLimits {
        max_entries: 100,
        max_unpacked: 1 << 20,
    };

    /// A tar.gz from `(name, kind, content)`: kind 'f' file, 'd' dir, 's' symlink to content.
    /// Names are written raw, as a hostile archive would carry them.
    fn tar_gz(entries: &[(&str, char, &str)]) -> Vec<u8> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut tar = tar::Builder::new(gz);
        for (name, kind, content) in entries {
            let mut h = tar::Header::new_old();
            h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
            h.set_mode(0o644);
            let body: &[u8] = match kind {
                'd' => {
                    h.set_entry_type(tar::EntryType::Directory);
                    b""
                }
                's' => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.as_old_mut().linkname[..content.len()].copy_from_slice(content.as_bytes());
                    b""
                }
                _ => {
                    h.set_entry_type(tar::EntryType::Regular);
                    content.as_bytes()
                }
            };
            h.set_size(body.len() as u64);
            h.set_cksum();
            tar.append(&h, body).unwrap();
        }
        tar.into_inner().unwrap().finish().unwrap()
    }

    fn pack(bytes: &[u8], strip: bool) -> Result<(Vec<u8>, Packed), PackError> {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.tar.gz");
        fs::write(&input, bytes).unwrap();
        let scratch = dir.path().join("scratch");
        fs::create_dir(&scratch).unwrap();
        let mut out = Vec::new();
        let packed = repack(
            &input,
            Format::TarGz,
            &scratch,
            strip,
            None,
            LIMITS,
            &mut out,
        );
        // Unpacked in memory, the same input gives the same package or the same refusal.
        let mut in_memory = Vec::new();
        let again = repack_in_memory(bytes, Format::TarGz, strip, None, LIMITS, &mut in_memory);
        match (&packed, &again) {
            (Ok(a), Ok(b)) => assert!(a == b && out == in_memory, "{a:?} vs {b:?}"),
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
            (a, b) => panic!("on disk {a:?}, in memory {b:?}"),
        }
        Ok((out, packed?))
    }

    fn names(tar_gz: &[u8]) -> Vec<String> {
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(tar_gz));
        archive
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn deterministic_sorted_and_links_copied() {
        let a = tar_gz(&[
            ("repo-1.0/main.tf", 'f', "module"),
            ("repo-1.0/", 'd', ""),
            ("repo-1.0/shared/real.tf", 'f', "shared"),
            ("repo-1.0/link.tf", 's', "shared/real.tf"),
        ]);
        let b = tar_gz(&[
            ("repo-1.0/shared/real.tf", 'f', "shared"),
            ("repo-1.0/link.tf", 's', "shared/real.tf"),
            ("repo-1.0/main.tf", 'f', "module"),
        ]);
        let (out_a, packed) = pack(&a, true).unwrap();
        let (out_b, _) = pack(&b, true).unwrap();
        assert_eq!(out_a, out_b, "the same tree gives the same bytes");
        assert_eq!(
            names(&out_a),
            ["link.tf", "main.tf", "shared/", "shared/real.tf"]
        );
        assert_eq!(packed.files, 3);
        let (unstripped, _) = pack(&a, false).unwrap();
        assert_eq!(names(&unstripped)[0], "repo-1.0/");
    }

    /// The zip of a stored package: made twice, the same bytes; the same files, modes and
    /// contents as the package, with fixed times.
    #[test]
    fn a_package_zips_deterministically() {
        let (package, _) = pack(
            &tar_gz(&[
                ("repo/main.tf", 'f', "module"),
                ("repo/shared/real.tf", 'f', "shared"),
                ("repo/empty/", 'd', ""),
            ]),
            true,
        )
        .unwrap();
        let zip_of = || {
            let dir = tempfile::tempdir().unwrap();
            let input = dir.path().join("module.tar.gz");
            fs::write(&input, &package).unwrap();
            let scratch = dir.path().join("scratch");
            fs::create_dir(&scratch).unwrap();
            let mut out = io::Cursor::new(Vec::new());
            let packed = zip_package(&input, None, &scratch, LIMITS, &mut out).unwrap();
            assert_eq!(packed.files, 2);
            out.into_inner()
        };
        let zipped = zip_of();
        assert_eq!(zipped, zip_of(), "the same package gives the same zip");
        let mut zip = zip::ZipArchive::new(io::Cursor::new(zipped)).unwrap();
        let mut seen = Vec::new();
        for i in 0..zip.len() {
            let mut entry = zip.by_index(i).unwrap();
            assert_eq!(entry.last_modified(), Some(zip::DateTime::default()));
            let mut body = String::new();
            entry.read_to_string(&mut body).unwrap();
            seen.push((
                entry.name().unwrap().to_string(),
                entry.unix_mode().unwrap() & 0o777,
                body,
            ));
        }
        let expected = [
            ("empty/", 0o755, ""),
            ("main.tf", 0o644, "module"),
            ("shared/", 0o755, ""),
            ("shared/real.tf", 0o644, "shared"),
        ];
        assert_eq!(
            seen,
            expected.map(|(n, m, b)| (n.to_string(), m, b.to_string()))
        );
    }

    #[test]
    fn hostile_entries_are_refused() {
        for (entries, expected) in [
            (vec![("../evil.tf", 'f', "x")], "contains '..'"),
            (vec![("/etc/passwd", 'f', "x")], "absolute path"),
            (vec![("a.tf", 's', "../../etc/passwd")], "out of the tree"),
            (vec![("a.tf", 's', "/etc/passwd")], "out of the tree"),
            (
                vec![("d/", 'd', ""), ("l", 's', "d")],
                "link to a directory",
            ),
            (vec![("l", 's', "missing.tf")], "link to nothing"),
        ] {
            let e = pack(&tar_gz(&entries), false).unwrap_err().to_string();
            assert!(e.contains(expected), "{entries:?}: {e}");
        }
        assert!(matches!(
            pack(&tar_gz(&[("d/", 'd', "")]), false),
            Err(PackError::Empty)
        ));
    }

    #[test]
    fn bombs_and_floods_stop_at_the_limits() {
        let big = "0".repeat(2 << 20);
        assert!(matches!(
            pack(&tar_gz(&[("big", 'f', &big)]), false),
            Err(PackError::TooLarge(_))
        ));
        let many: Vec<(String, char, &str)> =
            (0..200).map(|i| (format!("f{i}"), 'f', "x")).collect();
        let many: Vec<(&str, char, &str)> =
            many.iter().map(|(n, k, c)| (n.as_str(), *k, *c)).collect();
        assert!(matches!(
            pack(&tar_gz(&many), false),
            Err(PackError::TooManyEntries(100))
        ));
    }

    #[test]
    fn directories_an_archive_only_implies_count_as_the_package_writes_them() {
        // Files in directories the archive never lists: 60 entries read, 120 written.
        let nested = |n: usize| -> Vec<(String, char, &str)> {
            (0..n).map(|i| (format!("d{i}/f"), 'f', "x")).collect()
        };
        let as_entries = |v: &[(String, char, &'static str)]| -> Vec<u8> {
            let refs: Vec<(&str, char, &str)> =
                v.iter().map(|(n, k, c)| (n.as_str(), *k, *c)).collect();
            tar_gz(&refs)
        };
        assert!(matches!(
            pack(&as_entries(&nested(60)), false),
            Err(PackError::TooManyEntries(100))
        ));
        // Within the cap as written (40 files, 80 entries): the package repacks to itself
        // under the same limits, as `import` repacks it.
        let (out, packed) = pack(&as_entries(&nested(40)), false).unwrap();
        assert_eq!(packed.files, 40);
        let (again, _) = pack(&out, false).unwrap();
        assert!(again == out);
    }

    /// What `package_zip` found: a zip of a few files in directories it does not list, which
    /// repacked into more entries than its cap, so the stored package failed to unpack again.
    #[test]
    fn the_fuzzed_zip_whose_package_did_not_repack() {
        const INPUT: &[u8] = &[
            0, 53, 0, 0, 255, 80, 75, 0, 0, 53, 0, 0, 225, 0, 0, 1, 42, 255, 255, 39, 255, 80, 75,
            1, 2, 80, 75, 3, 4, 74, 252, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 48, 255,
            173, 0, 0, 0, 0, 0, 43, 80, 140, 39, 255, 32, 0, 226, 4, 0, 0, 0, 217, 1, 47, 229, 47,
            255, 100, 80, 1, 47, 242, 47, 75, 47, 47, 48, 47, 18, 47, 255, 47, 140, 47, 242, 47,
            75, 47, 47, 48, 47, 12, 47, 80, 1, 47, 229, 47, 255, 100, 80, 1, 47, 242, 47, 75, 47,
            47, 48, 47, 18, 47, 255, 47, 1, 47, 39, 47, 255, 100, 81, 1, 47, 242, 47, 75, 47, 39,
            48, 47, 18, 47, 255, 47, 255, 48, 47, 18, 47, 255, 47, 140, 47, 242, 47, 75, 41, 47,
            47, 48, 47, 12, 47, 80, 1, 47, 229, 47, 255, 100, 80, 1, 47, 242, 47, 75, 47, 47, 48,
            47, 18, 47, 255, 47, 1, 47, 39, 47, 255, 100, 81, 1, 47, 242, 47, 75, 47, 39, 48, 47,
            18, 47, 255, 47, 255, 18, 18, 255, 47, 255, 100, 80, 1, 47, 242, 47, 75, 47, 47, 48,
            47, 18, 47, 255, 47, 1, 47, 39, 47, 255, 100, 80, 1, 47, 242, 48, 75, 47, 47, 47, 47,
            18, 47, 255, 47, 255, 47, 75, 47, 47, 48, 213, 18, 47, 255, 47, 255, 18, 18, 255, 255,
            100, 80, 1, 47, 242, 47, 255, 255, 255, 104, 80, 1, 47, 242, 47, 255, 104, 80, 1, 47,
            242, 255, 255, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166,
            166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166,
            166, 166, 166, 166, 166, 166, 166, 255, 255, 203, 47, 173, 173, 173, 173, 173, 173,
            173, 242, 47, 75, 47, 209, 203, 100, 80, 1, 47, 242, 209, 202, 0, 0, 0, 70, 1, 0, 0, 0,
            0, 0, 0, 255, 63, 0, 4, 48, 40, 249, 3, 0, 80, 75, 5, 6, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0,
            7, 201, 0, 0, 0, 0, 2, 0, 0, 65, 0, 0, 0, 248, 100, 18, 18, 255, 47, 255, 100, 80, 1,
            47, 242, 47, 75, 47, 47, 48, 47, 18, 47, 255, 47, 1, 47, 39, 47, 255, 100, 80, 1, 47,
            242, 48, 75, 47, 47, 47, 47, 18, 47, 255, 47, 255, 47, 75, 47, 47, 48, 213, 18, 47,
            255, 47, 255, 18, 18, 255, 255, 100, 80, 1, 47, 242, 47, 255, 255, 255, 104, 80, 1, 47,
            242, 47, 255, 104, 80, 1, 47, 242, 255, 255, 166, 166, 166, 166, 166, 166, 166, 166,
            166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166,
            166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 166, 255, 255, 203, 47,
            173, 173, 173, 173, 173, 173, 173, 242, 47, 75, 47, 209, 203, 100, 80, 1, 47, 242, 209,
            202, 0, 0, 0, 70, 1, 0, 0, 0, 0, 0, 0, 255, 63, 0, 4, 48, 40, 249, 3, 0, 80, 75, 5, 6,
            0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 7, 201, 0, 0, 0, 0, 2, 0, 0, 65, 0, 0, 0, 248, 100, 250,
            255, 0, 255, 255, 0, 255, 0, 255, 255, 0, 75,
        ];
        const FUZZ_LIMITS: PackLimits = PackLimits {
            max_entries: 64,
            max_unpacked: 1 << 20,
        };
        let mut out = Vec::new();
        if repack_in_memory(INPUT, Format::Zip, false, None, FUZZ_LIMITS, &mut out).is_ok() {
            let mut again = Vec::new();
            repack_in_memory(&out, Format::TarGz, false, None, FUZZ_LIMITS, &mut again)
                .expect("a stored package repacks under the limits it was made with");
            assert!(again == out);
        }
    }

    #[test]
    fn oversized_extension_headers_are_refused_unread() {
        use crate::tarball::tests::{EXTENSIONS, OVERSIZED, oversized_tar_gz, push};
        let mut head = Vec::new();
        push(&mut head, tar::EntryType::Regular, "first.tf", b"x");
        for (kind, extension) in EXTENSIONS {
            let e = pack(&oversized_tar_gz(&head, kind), false).unwrap_err();
            let why = format!("tar entry 2: {extension} of {OVERSIZED} bytes, more than 65536");
            assert!(matches!(e, PackError::Tar(_)), "{e}");
            assert_eq!(
                e.to_string(),
                format!("is not an acceptable tar archive: {why}")
            );
        }
    }

    #[test]
    fn every_inflated_byte_counts_skipped_headers_and_bodies_included() {
        use crate::tarball::tests::{pax, push};
        use tar::EntryType::{Directory, Regular, XGlobalHeader};
        let gz = |tar: &[u8]| {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            gz.write_all(tar).unwrap();
            gz.finish().unwrap()
        };
        // PAX global headers just under their own cap, skipped unbuffered: 2.3 MiB inflated
        // from a few KiB, past what 1 MiB and 100 entries (`LIMITS`) allow a tar stream
        // (1.6 MiB), with one small file after them.
        let mut globals = Vec::new();
        let records = pax(&[("comment", &"x".repeat(60_000))]);
        for _ in 0..40 {
            push(&mut globals, XGlobalHeader, "g", &records);
        }
        push(&mut globals, Regular, "main.tf", b"# a module\n");
        globals.extend_from_slice(&[0; 1024]);
        // A `./` entry (skipped by name) whose body, never read, is 2 MiB of zeros.
        let mut dot = Vec::new();
        push(&mut dot, Directory, "./", &vec![0u8; 2 << 20]);
        push(&mut dot, Regular, "main.tf", b"# a module\n");
        dot.extend_from_slice(&[0; 1024]);
        for (what, tar) in [("global headers", globals), ("a ./ body", dot)] {
            let bytes = gz(&tar);
            assert!(bytes.len() < 64 << 10, "{what}: {}", bytes.len());
            let e = pack(&bytes, false).unwrap_err();
            assert!(
                matches!(e, PackError::StreamTooLarge(l) if l == LIMITS.max_tar_stream()),
                "{what}: {e}"
            );
            assert!(e.to_string().contains("modules.max_unpacked_size"), "{e}");
        }
        // The same small file alone is a package.
        let mut alone = Vec::new();
        push(&mut alone, Regular, "main.tf", b"# a module\n");
        alone.extend_from_slice(&[0; 1024]);
        assert!(pack(&gz(&alone), false).is_ok());
    }

    #[test]
    fn gnu_sparse_files_are_refused() {
        let mut tar = Vec::new();
        crate::tarball::tests::push(&mut tar, tar::EntryType::GNUSparse, "sparse", b"");
        tar.extend_from_slice(&[0; 1024]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar).unwrap();
        let e = pack(&gz.finish().unwrap(), false).unwrap_err().to_string();
        assert!(e.contains("sparse"), "{e}");
    }

    #[test]
    fn formats_by_name() {
        assert!(matches!(
            Format::from_name("x.tar.gz"),
            Some(Ok(Format::TarGz))
        ));
        assert!(matches!(Format::from_name("tgz"), Some(Ok(Format::TarGz))));
        assert!(matches!(Format::from_name("m.ZIP"), Some(Ok(Format::Zip))));
        assert!(matches!(Format::from_name("x.tar.xz"), Some(Err(_))));
        assert!(Format::from_name("repo").is_none());
    }
}
