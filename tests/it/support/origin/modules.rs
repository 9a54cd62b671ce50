//! The module registry side of the fake origin (`modules.v1`): module specs, their
//! deterministic `.tar.gz` packages, the download answers, and the hostile packages.
//!
//! Every module version is one *package*: the module's files plus a `VERSION` file (holding
//! the version and a newline), laid out as its [`ModuleSource`] says (at the root, under a
//! subdirectory, or under one GitHub-style top-level directory). The same package is served
//! as a tar.gz under `/modarchives/` and committed to the module's git repository, so every
//! form of download answer leads to the same files.
//!
//! Archives are built with fixed metadata (mtime, owner, modes, sorted entries, a gzip header
//! without name or time), so their bytes and hashes never change between runs.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::{Compress, Compression, Crc, FlushCompress};
use sha2::{Digest, Sha256};

/// The modification time of every tar entry (2024-01-02T03:04:06Z).
pub(super) const MTIME: u64 = 1_704_164_646;

/// How many bytes of zeros the gzip bomb's `zeros.bin` expands to (1 GiB); the `.tar.gz`
/// itself stays around 1 MiB.
pub const GZIP_BOMB_UNPACKED: u64 = 1 << 30;

/// How many bytes of zeros the zip bomb's `zeros.bin` expands to (256 MiB, deflated to
/// about 250 KiB).
pub const ZIP_BOMB_UNPACKED: u64 = 256 << 20;

/// How many bytes the long-name bomb's GNU long-name header declares, and holds in zeros
/// (256 MiB; the `.tar.gz` itself stays around 260 KiB).
pub const LONG_NAME_BOMB_DECLARED: u64 = 256 << 20;

/// The tag of the only version of the endless git repository.
pub const ENDLESS_GIT_REF: &str = "v1.0.0";

/// Where the module's package is fetched from, i.e. which `X-Terraform-Get` location the
/// download endpoint answers (`AUTH` is the authority the client used, from its `Host`
/// header, unless [`FakeOrigin::set_location_authority`](super::FakeOrigin::set_location_authority)
/// overrides it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModuleSource {
    /// `https://AUTH/modarchives/<ns>/<name>/<system>/<version>.tar.gz`, files at the root.
    Archive,
    /// `/modarchives/<ns>/<name>/<system>/<version>.tar.gz`: a relative URL, resolved by the
    /// client against the download endpoint's URL.
    RelativeArchive,
    /// `git::https://AUTH/git/<ns>/terraform-<system>-<name>.git?ref=v<version>`, served by
    /// `git http-backend`.
    Git,
    /// `https://AUTH/modarchives/<ns>/<name>/<system>/tarball/v<version>//*?archive=tar.gz`:
    /// like GitHub's tarball API, no file extension, every file under one top-level directory
    /// `<ns>-terraform-<system>-<name>-<7 hex digits>/` (Terraform itself cannot install this
    /// one from a registry: it takes `//*` literally).
    GithubTarball,
    /// `https://AUTH/modarchives/<ns>/<name>/<system>/<version>.tar.gz//<subdir>`: the module
    /// sits in `<subdir>/`, beside a package-level `README.md`.
    Subdir(String),
    /// `git::https://AUTH/git/<ns>/terraform-<system>-<name>.git//<subdir>?ref=v<version>`:
    /// the repository holds the same layout as [`ModuleSource::Subdir`].
    GitSubdir(String),
}

/// How the download endpoint (`.../:version/download`) answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DownloadAnswer {
    /// `204 No Content` with `X-Terraform-Get` (registry.terraform.io).
    NoContent,
    /// `200 OK` with `X-Terraform-Get` and the JSON body `{"location": ...}` holding the same
    /// value (registry.opentofu.org).
    HeaderAndJson,
    /// `200 OK` with only the JSON body `{"location": ...}`.
    JsonOnly,
}

/// One module the fake registry serves at `<ns>/<name>/<system>`.
#[derive(Clone, Debug)]
pub struct ModuleSpec {
    /// Registry namespace, e.g. `acme`.
    pub namespace: String,
    /// Module name, e.g. `net`.
    pub name: String,
    /// Target system ("provider" in the registry's words), e.g. `test`.
    pub system: String,
    /// Version strings, listed in this order.
    pub versions: Vec<String>,
    /// The module's files as `(path relative to the module, content)`, the same for every
    /// version (each version adds its own `VERSION` file).
    pub files: Vec<(String, Vec<u8>)>,
    /// Where the download answer points.
    pub source: ModuleSource,
    /// How the download endpoint answers.
    pub answer: DownloadAnswer,
}

impl ModuleSpec {
    /// A module `ns/name/system` with the given versions, one `main.tf` (an input and two
    /// outputs, one reading `VERSION`), served as an absolute-URL archive with `204`.
    pub fn new(ns: &str, name: &str, system: &str, versions: &[&str]) -> Self {
        let main_tf = format!(
            "# Test module {ns}/{name}/{system}, served by provender's fake origin.\n\
             variable \"greeting\" {{\n  type    = string\n  default = \"hello\"\n}}\n\n\
             output \"message\" {{\n  value = \"${{var.greeting}} from {ns}/{name}/{system}\"\n}}\n\n\
             output \"version\" {{\n  value = trimspace(file(\"${{path.module}}/VERSION\"))\n}}\n"
        );
        ModuleSpec {
            namespace: ns.to_owned(),
            name: name.to_owned(),
            system: system.to_owned(),
            versions: versions.iter().map(|v| (*v).to_owned()).collect(),
            files: vec![("main.tf".to_owned(), main_tf.into_bytes())],
            source: ModuleSource::Archive,
            answer: DownloadAnswer::NoContent,
        }
    }

    /// Adds the file `path` (relative to the module), replacing one of the same path (e.g. the
    /// default `main.tf`).
    pub fn with_file(mut self, path: &str, content: impl Into<Vec<u8>>) -> Self {
        let content = content.into();
        match self.files.iter_mut().find(|(p, _)| p == path) {
            Some(existing) => existing.1 = content,
            None => self.files.push((path.to_owned(), content)),
        }
        self
    }

    /// Adds `child.tf` calling the registry module `source` (e.g. `acme/leaf/test`) at
    /// `version` as `module "child"`, so installing this module installs that one too.
    pub fn with_child(self, source: &str, version: &str) -> Self {
        let child = format!(
            "module \"child\" {{\n  source  = \"{source}\"\n  version = \"{version}\"\n}}\n\n\
             output \"child_message\" {{\n  value = module.child.message\n}}\n"
        );
        self.with_file("child.tf", child)
    }

    /// Sets where the download answer points.
    pub fn source(mut self, source: ModuleSource) -> Self {
        self.source = source;
        self
    }

    /// Sets how the download endpoint answers.
    pub fn answer(mut self, answer: DownloadAnswer) -> Self {
        self.answer = answer;
        self
    }

    /// `<ns>/<name>/<system>`: the registry address without its hostname.
    pub fn address(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.name, self.system)
    }

    /// The module's files for `version`: [`files`](Self::files) plus `VERSION`.
    pub fn module_files(&self, version: &str) -> BTreeMap<String, Vec<u8>> {
        let mut files: BTreeMap<String, Vec<u8>> = self.files.iter().cloned().collect();
        files.insert("VERSION".to_owned(), format!("{version}\n").into_bytes());
        files
    }

    /// The package's subdirectory holding the module, if the source names one.
    pub fn subdir(&self) -> Option<&str> {
        match &self.source {
            ModuleSource::Subdir(subdir) | ModuleSource::GitSubdir(subdir) => Some(subdir),
            _ => None,
        }
    }

    /// Every file of the package for `version` (relative to the package root, without a
    /// GitHub-style top-level directory): the module's files, under the subdirectory beside
    /// a `README.md` when the source names one.
    pub fn package_files(&self, version: &str) -> BTreeMap<String, Vec<u8>> {
        let files = self.module_files(version);
        let Some(subdir) = self.subdir() else {
            return files;
        };
        let mut package: BTreeMap<String, Vec<u8>> = files
            .into_iter()
            .map(|(path, content)| (format!("{subdir}/{path}"), content))
            .collect();
        package.insert(
            "README.md".to_owned(),
            format!("# {}\n\nThe module lives in `{subdir}/`.\n", self.address()).into_bytes(),
        );
        package
    }

    /// The repository's path under `/git/`: `<ns>/terraform-<system>-<name>.git`.
    pub fn git_repo(&self) -> String {
        format!(
            "{}/terraform-{}-{}.git",
            self.namespace, self.system, self.name
        )
    }

    /// The path (with query, if any) the package's archive is served at.
    pub fn archive_path(&self, version: &str) -> String {
        let (ns, name, system) = (&self.namespace, &self.name, &self.system);
        match self.source {
            ModuleSource::GithubTarball => {
                format!("/modarchives/{ns}/{name}/{system}/tarball/v{version}")
            }
            _ => format!("/modarchives/{ns}/{name}/{system}/{version}.tar.gz"),
        }
    }

    /// The GitHub-style top-level directory of [`ModuleSource::GithubTarball`] archives.
    fn tarball_prefix(&self, version: &str) -> String {
        let digest = hex::encode(Sha256::digest(format!("{}@{version}", self.address())));
        format!(
            "{}-terraform-{}-{}-{}",
            self.namespace,
            self.system,
            self.name,
            &digest[..7]
        )
    }

    /// The `X-Terraform-Get` value for `version` when the client reached the origin as
    /// `authority` (`host[:port]`).
    pub fn location(&self, version: &str, authority: &str) -> String {
        let archive = self.archive_path(version);
        match &self.source {
            ModuleSource::Archive => format!("https://{authority}{archive}"),
            ModuleSource::RelativeArchive => archive,
            ModuleSource::Git => format!(
                "git::https://{authority}/git/{}?ref=v{version}",
                self.git_repo()
            ),
            ModuleSource::GithubTarball => {
                format!("https://{authority}{archive}//*?archive=tar.gz")
            }
            ModuleSource::Subdir(subdir) => format!("https://{authority}{archive}//{subdir}"),
            ModuleSource::GitSubdir(subdir) => format!(
                "git::https://{authority}/git/{}//{subdir}?ref=v{version}",
                self.git_repo()
            ),
        }
    }

    /// The package's archive for `version`, as served.
    pub(super) fn build_archive(&self, version: &str) -> Bytes {
        let files = self.package_files(version);
        let prefix = match self.source {
            ModuleSource::GithubTarball => Some(self.tarball_prefix(version)),
            _ => None,
        };
        let mut entries = Vec::new();
        let mut dirs: Vec<String> = Vec::new();
        if let Some(prefix) = &prefix {
            dirs.push(format!("{prefix}/"));
        }
        for path in files.keys() {
            let full = match &prefix {
                Some(prefix) => format!("{prefix}/{path}"),
                None => path.clone(),
            };
            // Every parent directory gets its own entry, as `git archive` writes them.
            let mut end = 0;
            while let Some(slash) = full[end..].find('/') {
                end += slash + 1;
                let dir = full[..end].to_owned();
                if !dirs.contains(&dir) {
                    dirs.push(dir);
                }
            }
        }
        dirs.sort();
        for dir in dirs {
            entries.push(TarEntry::dir(&dir));
        }
        for (path, content) in files {
            let full = match &prefix {
                Some(prefix) => format!("{prefix}/{path}"),
                None => path,
            };
            entries.push(TarEntry::file(&full, content));
        }
        Bytes::from(tar_gz(&entries))
    }
}

/// The packages a hostile origin offers: [`Fault::HostileModule`](super::Fault::HostileModule)
/// makes every module download answer one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostileModule {
    /// A tar.gz with `main.tf` and an entry `../evil`.
    DotDot,
    /// A tar.gz with `main.tf` and an entry with an absolute path (`/tmp/provender-absolute-evil.tf`).
    AbsolutePath,
    /// A tar.gz with `main.tf` and a symlink `secrets.tf` pointing out of the tree
    /// (`../../../../../../etc/passwd`).
    Symlink,
    /// A ~1 MiB tar.gz with `main.tf` and `zeros.bin`, [`GZIP_BOMB_UNPACKED`] bytes of zeros.
    GzipBomb,
    /// A ~260 KiB tar.gz whose first entry is a GNU long-name (`L`) header declaring (and
    /// holding) [`LONG_NAME_BOMB_DECLARED`] bytes of zeros, then `main.tf`.
    LongNameBomb,
    /// A `.zip` with `main.tf` and `zeros.bin`, [`ZIP_BOMB_UNPACKED`] bytes of zeros, whose
    /// central directory states that size honestly.
    ZipBomb,
    /// An archive URL that answers `302 Found` pointing at itself, forever.
    RedirectLoop,
    /// A git repository (`/git/treebomb.git`, tag [`ENDLESS_GIT_REF`]) of a few KiB whose
    /// tree names one 1 MiB blob 262 144 times: its `git archive` is 256 GiB.
    TreeBombGit,
    /// A git source whose `?ref=` is an option to git (`--upload-pack=...`).
    OptionRef,
    /// A git repository (`/git/endless.git`, tag [`ENDLESS_GIT_REF`]) whose upload-pack
    /// answer to the final fetch request streams pack data forever.
    EndlessGit,
}

impl HostileModule {
    /// Every hostile package.
    pub const ALL: [HostileModule; 10] = [
        HostileModule::DotDot,
        HostileModule::AbsolutePath,
        HostileModule::Symlink,
        HostileModule::GzipBomb,
        HostileModule::LongNameBomb,
        HostileModule::ZipBomb,
        HostileModule::RedirectLoop,
        HostileModule::EndlessGit,
        HostileModule::TreeBombGit,
        HostileModule::OptionRef,
    ];

    /// The path it is served at (for [`HostileModule::EndlessGit`], the repository's).
    pub fn path(self) -> &'static str {
        match self {
            HostileModule::DotDot => "/modarchives/hostile/dotdot.tar.gz",
            HostileModule::AbsolutePath => "/modarchives/hostile/absolute.tar.gz",
            HostileModule::Symlink => "/modarchives/hostile/symlink.tar.gz",
            HostileModule::GzipBomb => "/modarchives/hostile/bomb.tar.gz",
            HostileModule::LongNameBomb => "/modarchives/hostile/longname.tar.gz",
            HostileModule::ZipBomb => "/modarchives/hostile/bomb.zip",
            HostileModule::RedirectLoop => "/modarchives/hostile/loop.tar.gz",
            HostileModule::EndlessGit | HostileModule::OptionRef => "/git/endless.git",
            HostileModule::TreeBombGit => "/git/treebomb.git",
        }
    }

    /// The `X-Terraform-Get` value answered for it when the client used `authority`.
    pub fn location(self, authority: &str) -> String {
        match self {
            HostileModule::EndlessGit | HostileModule::TreeBombGit => {
                format!(
                    "git::https://{authority}{}?ref={ENDLESS_GIT_REF}",
                    self.path()
                )
            }
            HostileModule::OptionRef => format!(
                "git::https://{authority}{}?ref=--upload-pack=touch%20/tmp/provender-pwned",
                self.path()
            ),
            _ => format!("https://{authority}{}", self.path()),
        }
    }

    /// The archive bytes served at [`path`](Self::path); `None` for the redirect loop and
    /// the git repository.
    pub(super) fn build(self) -> Option<Bytes> {
        let main_tf = TarEntry::file(
            "main.tf",
            b"# A hostile test package served by provender's fake origin.\n".to_vec(),
        );
        let entries = match self {
            HostileModule::DotDot => vec![main_tf, TarEntry::file("../evil", b"evil\n".to_vec())],
            HostileModule::AbsolutePath => vec![
                main_tf,
                TarEntry::file("/tmp/provender-absolute-evil.tf", b"evil\n".to_vec()),
            ],
            HostileModule::Symlink => vec![
                main_tf,
                TarEntry::symlink("secrets.tf", "../../../../../../etc/passwd"),
            ],
            HostileModule::GzipBomb => return Some(gzip_bomb().clone()),
            HostileModule::LongNameBomb => {
                static BOMB: OnceLock<Bytes> = OnceLock::new();
                return Some(BOMB.get_or_init(build_long_name_bomb).clone());
            }
            HostileModule::ZipBomb => {
                static BOMB: OnceLock<Bytes> = OnceLock::new();
                return Some(BOMB.get_or_init(zip_bomb).clone());
            }
            HostileModule::RedirectLoop
            | HostileModule::EndlessGit
            | HostileModule::TreeBombGit
            | HostileModule::OptionRef => return None,
        };
        Some(Bytes::from(tar_gz(&entries)))
    }
}

/// One tar entry: a directory, a regular file or a symlink; names are written verbatim
/// (so `../x` and `/x` are possible).
pub(super) struct TarEntry {
    name: String,
    kind: tar::EntryType,
    mode: u32,
    content: Vec<u8>,
    link: Option<String>,
}

impl TarEntry {
    pub(super) fn file(name: &str, content: Vec<u8>) -> TarEntry {
        TarEntry {
            name: name.to_owned(),
            kind: tar::EntryType::Regular,
            mode: 0o644,
            content,
            link: None,
        }
    }

    fn dir(name: &str) -> TarEntry {
        TarEntry {
            name: name.to_owned(),
            kind: tar::EntryType::Directory,
            mode: 0o755,
            content: Vec::new(),
            link: None,
        }
    }

    fn symlink(name: &str, target: &str) -> TarEntry {
        TarEntry {
            name: name.to_owned(),
            kind: tar::EntryType::Symlink,
            mode: 0o777,
            content: Vec::new(),
            link: Some(target.to_owned()),
        }
    }

    /// The entry's GNU header, with fixed owner and time, and its checksum set.
    fn header(&self, size: u64) -> tar::Header {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(self.kind);
        header.set_mode(self.mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(MTIME);
        header.set_size(size);
        let name = self.name.as_bytes();
        assert!(name.len() < 100, "tar entry name too long: {}", self.name);
        header.as_old_mut().name[..name.len()].copy_from_slice(name);
        if let Some(link) = &self.link {
            header
                .set_link_name_literal(link)
                .expect("short symlink target");
        }
        header.set_cksum();
        header
    }
}

/// A gzipped tar of `entries`, in the given order, with fixed metadata.
pub(super) fn tar_gz(entries: &[TarEntry]) -> Vec<u8> {
    let gz = GzEncoder::new(Vec::new(), Compression::best());
    let mut tar = tar::Builder::new(gz);
    for entry in entries {
        let header = entry.header(entry.content.len() as u64);
        tar.append(&header, entry.content.as_slice())
            .unwrap_or_else(|err| panic!("write tar entry {}: {err}", entry.name));
    }
    tar.into_inner()
        .expect("finish tar")
        .finish()
        .expect("finish gzip")
}

/// A zip of `main.tf` and [`ZIP_BOMB_UNPACKED`] zeros in `zeros.bin`, deflated.
fn zip_bomb() -> Bytes {
    use std::io::Write;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .compression_level(Some(9))
        .large_file(false);
    zip.start_file("main.tf", options).unwrap();
    zip.write_all(b"# A hostile test package: zeros.bin expands to 256 MiB.\n")
        .unwrap();
    zip.start_file("zeros.bin", options).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..(ZIP_BOMB_UNPACKED >> 20) {
        zip.write_all(&zeros).unwrap();
    }
    Bytes::from(zip.finish().unwrap().into_inner())
}

/// The gzip bomb's bytes, built once per test process (in milliseconds: see
/// [`gzip_with_zeros`]).
fn gzip_bomb() -> &'static Bytes {
    static BOMB: OnceLock<Bytes> = OnceLock::new();
    BOMB.get_or_init(build_gzip_bomb)
}

/// A valid tar.gz holding `main.tf` and [`GZIP_BOMB_UNPACKED`] zero bytes in `zeros.bin`.
fn build_gzip_bomb() -> Bytes {
    // The tar stream: main.tf, zeros.bin's header, then only zeros (its content, no padding
    // since the size is a multiple of 512, and the two end-of-archive blocks).
    let main_tf = b"# A hostile test package: zeros.bin expands to 1 GiB.\n".to_vec();
    let mut head = tar_entry_bytes(&TarEntry::file("main.tf", main_tf));
    let zeros_entry = TarEntry::file("zeros.bin", Vec::new());
    head.extend_from_slice(zeros_entry.header(GZIP_BOMB_UNPACKED).as_bytes());
    gzip_with_zeros(&head, GZIP_BOMB_UNPACKED + 1024, &[])
}

/// A valid tar.gz: a GNU long-name header declaring [`LONG_NAME_BOMB_DECLARED`] bytes, as many
/// zeros (no padding: the size is a multiple of 512), then `main.tf` and the end of archive.
fn build_long_name_bomb() -> Bytes {
    let long_name = TarEntry {
        name: "././@LongLink".to_owned(),
        kind: tar::EntryType::GNULongName,
        mode: 0o644,
        content: Vec::new(),
        link: None,
    };
    let head = long_name.header(LONG_NAME_BOMB_DECLARED);
    let main_tf = b"# A hostile test package: its name header declares 256 MiB.\n".to_vec();
    let mut tail = tar_entry_bytes(&TarEntry::file("main.tf", main_tf));
    tail.extend_from_slice(&[0; 1024]);
    gzip_with_zeros(head.as_bytes(), LONG_NAME_BOMB_DECLARED, &tail)
}

/// One entry as tar bytes: its header and its content, padded to a block.
fn tar_entry_bytes(entry: &TarEntry) -> Vec<u8> {
    let mut out = entry.header(entry.content.len() as u64).as_bytes().to_vec();
    out.extend_from_slice(&entry.content);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

/// A gzip of `head`, `zeros` zero bytes and `tail`, written without compressing all the zeros:
/// after a full flush a deflate encoder refers to nothing before it, so the encoded form of one
/// zero-filled MiB, ending on a full flush, can be repeated as often as needed. The gzip
/// trailer's CRC is combined the same way.
fn gzip_with_zeros(head: &[u8], zeros: u64, tail: &[u8]) -> Bytes {
    const CHUNK: usize = 1 << 20;
    let chunks = zeros / CHUNK as u64;
    let rest = (zeros % CHUNK as u64) as usize;

    let zero_chunk = vec![0u8; CHUNK];
    let mut encoder = Compress::new(Compression::best(), false);
    let mut deflate = |input: &[u8], flush: FlushCompress| -> Vec<u8> {
        let mut out = Vec::with_capacity(input.len() + 64 * 1024);
        let before = encoder.total_in();
        encoder
            .compress_vec(input, &mut out, flush)
            .expect("deflate");
        assert_eq!(
            encoder.total_in() - before,
            input.len() as u64,
            "deflate took all input"
        );
        out
    };
    let head_deflated = deflate(head, FlushCompress::Full);
    let chunk_deflated = deflate(&zero_chunk, FlushCompress::Full);
    let rest_deflated = deflate(&zero_chunk[..rest], FlushCompress::Full);
    let tail_deflated = deflate(tail, FlushCompress::Finish);

    let mut crc = Crc::new();
    crc.update(head);
    let mut chunk_crc = Crc::new();
    chunk_crc.update(&zero_chunk);
    for _ in 0..chunks {
        crc.combine(&chunk_crc);
    }
    crc.update(&zero_chunk[..rest]);
    crc.update(tail);
    let total = head.len() as u64 + zeros + tail.len() as u64;

    // gzip header: magic, deflate, no flags, no mtime, no extra flags, unknown OS.
    let mut gz = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    gz.extend_from_slice(&head_deflated);
    for _ in 0..chunks {
        gz.extend_from_slice(&chunk_deflated);
    }
    gz.extend_from_slice(&rest_deflated);
    gz.extend_from_slice(&tail_deflated);
    gz.extend_from_slice(&crc.sum().to_le_bytes());
    gz.extend_from_slice(&(total as u32).to_le_bytes());
    Bytes::from(gz)
}

/// Everything the module registry serves, built once per origin.
pub(super) struct ModuleFixtures {
    /// The specs, keyed by `(ns, name, system)`.
    pub(super) specs: BTreeMap<(String, String, String), ModuleSpec>,
    /// Each version's archive, keyed by `(ns, name, system, version)`.
    pub(super) archives: BTreeMap<(String, String, String, String), Bytes>,
    /// Archive path → `(ns, name, system, version)`.
    pub(super) paths: BTreeMap<String, (String, String, String, String)>,
    /// The hostile archives, by path.
    pub(super) hostile: BTreeMap<&'static str, Bytes>,
}

impl ModuleFixtures {
    pub(super) fn build(specs: &[ModuleSpec]) -> ModuleFixtures {
        let mut fixtures = ModuleFixtures {
            specs: BTreeMap::new(),
            archives: BTreeMap::new(),
            paths: BTreeMap::new(),
            hostile: BTreeMap::new(),
        };
        for spec in specs {
            let key = (
                spec.namespace.clone(),
                spec.name.clone(),
                spec.system.clone(),
            );
            assert!(
                !fixtures.specs.contains_key(&key),
                "module {} given twice",
                spec.address()
            );
            for version in &spec.versions {
                let full = (key.0.clone(), key.1.clone(), key.2.clone(), version.clone());
                fixtures
                    .archives
                    .insert(full.clone(), spec.build_archive(version));
                fixtures.paths.insert(spec.archive_path(version), full);
            }
            fixtures.specs.insert(key, spec.clone());
        }
        for hostile in HostileModule::ALL {
            if let Some(bytes) = hostile.build() {
                fixtures.hostile.insert(hostile.path(), bytes);
            }
        }
        fixtures
    }

    pub(super) fn spec(&self, ns: &str, name: &str, system: &str) -> Option<&ModuleSpec> {
        self.specs
            .get(&(ns.to_owned(), name.to_owned(), system.to_owned()))
    }

    pub(super) fn archive(
        &self,
        ns: &str,
        name: &str,
        system: &str,
        version: &str,
    ) -> Option<&Bytes> {
        self.archives.get(&(
            ns.to_owned(),
            name.to_owned(),
            system.to_owned(),
            version.to_owned(),
        ))
    }
}
