//! Provider addresses, versions and platforms, validated and canonical.
//!
//! Everything that comes from a request path or an upstream document passes through these types
//! before it is used as a cache key, a URL part or a file name. Their `parse` functions accept only
//! a strict character set, so a value of one of these types is always safe to join onto a path:
//! no `/`, `\`, `..`, NUL or percent sign can survive parsing.

use std::cmp::Ordering;
use std::fmt;

/// Why a part of an address was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}: {reason}")]
pub struct AddressError {
    what: &'static str,
    value: String,
    reason: &'static str,
}

impl AddressError {
    pub(crate) fn new(what: &'static str, value: &str, reason: &'static str) -> Self {
        // Keep hostile input from bloating logs and error bodies.
        let value: String = value.chars().take(80).collect();
        AddressError {
            what,
            value,
            reason,
        }
    }
}

const MAX_HOST_LEN: usize = 253;
const MAX_PART_LEN: usize = 64;
const MAX_VERSION_LEN: usize = 128;

/// A registry hostname as Terraform compares it: IDNA-normalised, lowercase punycode, with an
/// optional port (`:443` is dropped because it is the default).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct Hostname(String);

impl Hostname {
    /// Parses and normalises a hostname such as `registry.terraform.io` or `Example.COM:8443`.
    pub fn parse(input: &str) -> Result<Hostname, AddressError> {
        let err = |reason| AddressError::new("hostname", input, reason);
        if input.is_empty() || input.len() > MAX_HOST_LEN + 6 {
            return Err(err("must be 1 to 253 characters"));
        }
        let (host, port) = match input.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (input, None),
        };
        let port = match port {
            None => None,
            Some(p) => {
                if p.is_empty()
                    || p.len() > 5
                    || !p.bytes().all(|b| b.is_ascii_digit())
                    || p.starts_with('0')
                {
                    return Err(err("port must be a number from 1 to 65535"));
                }
                match p.parse::<u16>() {
                    Ok(443) => None,
                    Ok(n) => Some(n),
                    Err(_) => return Err(err("port must be a number from 1 to 65535")),
                }
            }
        };
        let ascii = if is_plain_ldh(host) {
            // What IDNA processing would return unchanged: no need to run it on every request.
            host.to_owned()
        } else {
            idna::domain_to_ascii_strict(host)
                .map_err(|_| err("not a valid internationalised domain name"))?
        };
        if ascii.is_empty() || ascii.len() > MAX_HOST_LEN {
            return Err(err("must be 1 to 253 characters"));
        }
        for label in ascii.split('.') {
            if label.is_empty() || label.len() > 63 {
                return Err(err("each dot-separated label must be 1 to 63 characters"));
            }
            if !label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            {
                return Err(err("may contain only letters, digits, dots and dashes"));
            }
            if label.starts_with('-') || label.ends_with('-') {
                return Err(err("labels may not start or end with a dash"));
            }
        }
        Ok(Hostname(match port {
            Some(port) => format!("{ascii}:{port}"),
            None => ascii,
        }))
    }

    /// The normalised form, e.g. `registry.terraform.io` or `example.com:8443`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Most `/`-separated parts of a git repository's path (`group/subgroup/project.git`).
const MAX_REPO_SEGMENTS: usize = 8;
/// Longest git repository path.
const MAX_REPO_PATH_LEN: usize = 256;

/// A git repository on an origin host, as the git door names it: `<host>/<path>`, the path as
/// the client wrote it (`acme/modules.git` and `acme/modules` are two repositories, as they are
/// two URLs). Each part is letters, digits, `.`, `_`, `-` and `~`, none starting with `.`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GitRepo {
    pub host: Hostname,
    path: String,
}

impl GitRepo {
    /// `host` and `path` (without a leading `/`), checked.
    pub fn new(host: &str, path: &str) -> Result<GitRepo, AddressError> {
        let host = Hostname::parse(host)?;
        let err = |reason| AddressError::new("git repository path", path, reason);
        if path.is_empty() || path.len() > MAX_REPO_PATH_LEN {
            return Err(err("must be 1 to 256 characters"));
        }
        let segments: Vec<&str> = path.split('/').collect();
        if segments.len() > MAX_REPO_SEGMENTS {
            return Err(err("may have at most 8 parts"));
        }
        for segment in &segments {
            if segment.is_empty() || segment.starts_with('.') {
                return Err(err("parts may not be empty or start with a dot"));
            }
            if !segment
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-~".contains(&b))
            {
                return Err(err(
                    "may contain only letters, digits, '.', '_', '-', '~' and '/'",
                ));
            }
        }
        Ok(GitRepo {
            host,
            path: path.to_owned(),
        })
    }

    /// `<host>/<path>`, as a `git::https://` source names it (without the scheme).
    pub fn parse(source: &str) -> Result<GitRepo, AddressError> {
        let (host, path) = source
            .split_once('/')
            .ok_or_else(|| AddressError::new("git repository", source, "expected <host>/<path>"))?;
        GitRepo::new(host, path)
    }

    /// The repository's path on its host.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Where the origin serves it: `https://<host>/<path>`.
    pub fn origin_url(&self) -> url::Url {
        url::Url::parse(&format!("https://{}/{}", self.host, self.path))
            .expect("a hostname and a checked path make a URL")
    }
}

impl fmt::Display for GitRepo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.host, self.path)
    }
}

/// `host` or `host:port` of a URL, lowercase, the port only when it is not the scheme's default:
/// how hosts are named in service discovery, `credentials` blocks and `upstream.hosts`.
pub fn authority(url: &url::Url) -> Option<String> {
    let host = url.host_str()?.to_ascii_lowercase();
    Some(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host,
    })
}

impl fmt::Display for Hostname {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Hostname {
    type Error = AddressError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Hostname::parse(&s)
    }
}

impl From<Hostname> for String {
    fn from(h: Hostname) -> String {
        h.0
    }
}

/// Parses a namespace or type: ASCII letters, digits, `-` (and `_` in namespaces), starting and
/// ending with a letter or digit, lowercased as Terraform compares them.
fn parse_part(
    what: &'static str,
    input: &str,
    allow_underscore: bool,
) -> Result<String, AddressError> {
    let err = |reason| AddressError::new(what, input, reason);
    if input.is_empty() || input.len() > MAX_PART_LEN {
        return Err(err("must be 1 to 64 characters"));
    }
    let ok_char = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || (allow_underscore && b == b'_');
    if !input.bytes().all(ok_char) {
        return Err(if allow_underscore {
            err("may contain only letters, digits, dashes and underscores")
        } else {
            err("may contain only letters, digits and dashes")
        });
    }
    let first_last_ok = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    if !first_last_ok(input.bytes().next()) || !first_last_ok(input.bytes().last()) {
        return Err(err("must start and end with a letter or digit"));
    }
    Ok(input.to_ascii_lowercase())
}

/// A provider address: `hostname/namespace/type`.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct ProviderAddr {
    pub hostname: Hostname,
    pub namespace: String,
    #[serde(rename = "type")]
    pub type_: String,
}

impl ProviderAddr {
    /// Validates the three parts of an address.
    pub fn new(hostname: &str, namespace: &str, type_: &str) -> Result<ProviderAddr, AddressError> {
        Ok(ProviderAddr {
            hostname: Hostname::parse(hostname)?,
            namespace: parse_part("namespace", namespace, true)?,
            type_: parse_part("provider type", type_, false)?,
        })
    }

    /// Parses `hostname/namespace/type` or the short `namespace/type` (registry.terraform.io).
    pub fn parse(source: &str) -> Result<ProviderAddr, AddressError> {
        ProviderAddr::parse_in(source, "registry.terraform.io")
    }

    /// Parses `hostname/namespace/type`, or the short `namespace/type` on `default_host`
    /// (registry.opentofu.org for OpenTofu's configurations).
    pub fn parse_in(source: &str, default_host: &str) -> Result<ProviderAddr, AddressError> {
        let parts: Vec<&str> = source.split('/').collect();
        match parts.as_slice() {
            [ns, ty] => ProviderAddr::new(default_host, ns, ty),
            [host, ns, ty] => ProviderAddr::new(host, ns, ty),
            _ => Err(AddressError::new(
                "provider source",
                source,
                "expected [hostname/]namespace/type",
            )),
        }
    }

    /// The file name Terraform expects for a package of this provider.
    pub fn archive_filename(&self, version: &Version, platform: &Platform) -> String {
        format!(
            "terraform-provider-{}_{}_{}.zip",
            self.type_, version, platform
        )
    }

    /// `host/namespace/type/<archive file name>`: where an archive sits below a mirror's base,
    /// and the path its signed URLs are signed over.
    pub fn archive_path(&self, version: &Version, platform: &Platform) -> String {
        format!("{self}/{}", self.archive_filename(version, platform))
    }
}

impl fmt::Display for ProviderAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.hostname, self.namespace, self.type_)
    }
}

/// A provider version: `MAJOR.MINOR.PATCH[-prerelease][+build]`, kept in canonical text form.
///
/// Origins may publish short forms such as `1.2`; [`Version::parse_lenient`] accepts those and
/// canonicalises them to `1.2.0`, which is the form the CLI then asks the mirror for.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Version {
    text: String,
    major: u64,
    minor: u64,
    patch: u64,
    /// Byte offset of the prerelease part (after `-`) within `text`, if any.
    pre: Option<(usize, usize)>,
}

impl Version {
    /// The OCI tag of this version: tags cannot hold `+`, so build metadata follows `_`.
    pub fn oci_tag(&self) -> String {
        self.to_string().replace('+', "_")
    }

    /// The version an OCI tag names, or `None` when it names none (as OpenTofu reads tags:
    /// `latest` or `linux_amd64` are no versions).
    pub fn from_oci_tag(tag: &str) -> Option<Version> {
        Version::parse(&tag.replace('_', "+")).ok()
    }

    /// Parses a version exactly as it appears in mirror request paths: three numeric parts.
    pub fn parse(input: &str) -> Result<Version, AddressError> {
        Self::parse_inner(input, false)
    }

    /// Parses a version as an origin may publish it, also accepting `1` and `1.2`.
    pub fn parse_lenient(input: &str) -> Result<Version, AddressError> {
        Self::parse_inner(input, true)
    }

    fn parse_inner(input: &str, lenient: bool) -> Result<Version, AddressError> {
        let err = |reason| AddressError::new("version", input, reason);
        if input.is_empty() || input.len() > MAX_VERSION_LEN {
            return Err(err("must be 1 to 128 characters"));
        }
        let (rest, build) = match input.split_once('+') {
            Some((r, b)) => (r, Some(b)),
            None => (input, None),
        };
        let (core, pre) = match rest.split_once('-') {
            Some((c, p)) => (c, Some(p)),
            None => (rest, None),
        };
        let nums: Vec<&str> = core.split('.').collect();
        if nums.len() > 3 || (!lenient && nums.len() != 3) {
            return Err(err("expected MAJOR.MINOR.PATCH"));
        }
        let mut parsed = [0u64; 3];
        for (slot, n) in parsed.iter_mut().zip(&nums) {
            if n.is_empty()
                || !n.bytes().all(|b| b.is_ascii_digit())
                || (n.len() > 1 && n.starts_with('0'))
            {
                return Err(err("version numbers must be decimal without leading zeros"));
            }
            *slot = n.parse().map_err(|_| err("version number too large"))?;
        }
        let ident_ok = |s: &str| {
            !s.is_empty()
                && s.split('.').all(|id| {
                    !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                })
        };
        if pre.is_some_and(|p| !ident_ok(p)) {
            return Err(err(
                "prerelease must be dot-separated letters, digits and dashes",
            ));
        }
        if build.is_some_and(|b| !ident_ok(b)) {
            return Err(err(
                "build metadata must be dot-separated letters, digits and dashes",
            ));
        }
        let [major, minor, patch] = parsed;
        let mut text = format!("{major}.{minor}.{patch}");
        let pre_span = pre.map(|p| {
            text.push('-');
            let start = text.len();
            text.push_str(p);
            (start, text.len())
        });
        if let Some(b) = build {
            text.push('+');
            text.push_str(b);
        }
        Ok(Version {
            text,
            major,
            minor,
            patch,
            pre: pre_span,
        })
    }

    /// The canonical text, e.g. `1.2.0` or `2.0.0-beta.1+build.5`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The prerelease part (without `-`), if any.
    pub fn prerelease(&self) -> Option<&str> {
        self.pre.map(|(a, b)| &self.text[a..b])
    }

    /// `(major, minor, patch)`.
    pub fn numbers(&self) -> (u64, u64, u64) {
        (self.major, self.minor, self.patch)
    }
}

impl Version {
    /// Semantic-versioning precedence alone: build metadata takes no part (`1.0.0+a` and
    /// `1.0.0+b` are equal), as in version constraints.
    pub fn precedence(&self, other: &Version) -> Ordering {
        self.numbers().cmp(&other.numbers()).then_with(|| {
            match (self.prerelease(), other.prerelease()) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some(a), Some(b)) => cmp_prerelease(a, b),
            }
        })
    }
}

impl Ord for Version {
    /// Semantic-versioning precedence; build metadata only breaks ties so the order is total.
    fn cmp(&self, other: &Self) -> Ordering {
        self.precedence(other)
            .then_with(|| self.text.cmp(&other.text))
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

fn cmp_prerelease(a: &str, b: &str) -> Ordering {
    let mut ai = a.split('.');
    let mut bi = b.split('.');
    loop {
        match (ai.next(), bi.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let ord = match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(x), Ok(y)) => x.cmp(&y),
                    (Ok(_), Err(_)) => Ordering::Less,
                    (Err(_), Ok(_)) => Ordering::Greater,
                    (Err(_), Err(_)) => x.cmp(y),
                };
                if ord != Ordering::Equal {
                    return ord;
                }
            }
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl TryFrom<String> for Version {
    type Error = AddressError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Version::parse(&s)
    }
}

impl From<Version> for String {
    fn from(v: Version) -> String {
        v.text
    }
}

/// A target platform such as `linux_amd64`.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct Platform {
    pub os: String,
    pub arch: String,
}

impl Platform {
    /// Validates an operating system and architecture pair (lowercase letters and digits).
    pub fn new(os: &str, arch: &str) -> Result<Platform, AddressError> {
        let check = |what, s: &str| {
            if s.is_empty()
                || s.len() > 32
                || !s
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            {
                Err(AddressError::new(
                    what,
                    s,
                    "must be 1 to 32 lowercase letters or digits",
                ))
            } else {
                Ok(s.to_string())
            }
        };
        Ok(Platform {
            os: check("operating system", os)?,
            arch: check("architecture", arch)?,
        })
    }

    /// Parses `os_arch`.
    pub fn parse(s: &str) -> Result<Platform, AddressError> {
        match s.split_once('_') {
            Some((os, arch)) => Platform::new(os, arch),
            None => Err(AddressError::new(
                "platform",
                s,
                "expected os_arch, e.g. linux_amd64",
            )),
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.os, self.arch)
    }
}

impl TryFrom<String> for Platform {
    type Error = AddressError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Platform::parse(&s)
    }
}

impl From<Platform> for String {
    fn from(p: Platform) -> String {
        p.to_string()
    }
}

/// One of the three documents a network mirror serves, parsed from the path below the base path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MirrorPath {
    /// `:hostname/:namespace/:type/index.json`
    Index(ProviderAddr),
    /// `:hostname/:namespace/:type/:version.json`
    Version(ProviderAddr, Version),
    /// `:hostname/:namespace/:type/terraform-provider-:type_:version_:os_:arch.zip`
    Archive(ProviderAddr, Version, Platform),
}

impl MirrorPath {
    /// The provider it is about.
    pub fn addr(&self) -> &ProviderAddr {
        match self {
            MirrorPath::Index(a) | MirrorPath::Version(a, _) | MirrorPath::Archive(a, _, _) => a,
        }
    }
}

/// The canonical path below the base path: what [`MirrorPath::parse`] reads back to the same
/// value (hostname lowercased, version re-serialised).
impl fmt::Display for MirrorPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MirrorPath::Index(a) => write!(f, "{a}/index.json"),
            MirrorPath::Version(a, v) => write!(f, "{a}/{v}.json"),
            MirrorPath::Archive(a, v, p) => f.write_str(&a.archive_path(v, p)),
        }
    }
}

impl MirrorPath {
    /// Parses the part of a request path below the mirror's base path, e.g.
    /// `registry.terraform.io/hashicorp/random/index.json`. Segments are percent-decoded first and
    /// must then pass the strict validation of each part.
    pub fn parse(path: &str) -> Result<MirrorPath, AddressError> {
        let segments: Vec<&str> = path.split('/').collect();
        let [host, ns, ty, file] = segments.as_slice() else {
            return Err(AddressError::new(
                "path",
                path,
                "expected :hostname/:namespace/:type/:file",
            ));
        };
        let addr = provider_from_segments(host, ns, ty)?;
        let file = decode_segment("file name", file)?;
        if file == "index.json" {
            return Ok(MirrorPath::Index(addr));
        }
        if let Some(version) = file.strip_suffix(".json") {
            return Ok(MirrorPath::Version(addr, Version::parse(version)?));
        }
        let bad_file = || {
            AddressError::new(
                "file name",
                &file,
                "expected index.json, <version>.json or terraform-provider-<type>_<version>_<os>_<arch>.zip",
            )
        };
        let prefix = format!("terraform-provider-{}_", addr.type_);
        let rest = file
            .strip_suffix(".zip")
            .and_then(|f| strip_prefix_ignore_case(f, &prefix))
            .ok_or_else(bad_file)?;
        let mut parts = rest.rsplitn(3, '_');
        let (Some(arch), Some(os), Some(version)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad_file());
        };
        let version = Version::parse(version)?;
        let platform = Platform::new(os, arch)?;
        Ok(MirrorPath::Archive(addr, version, platform))
    }
}

/// Percent-decodes one path segment; the result must be UTF-8 without control characters or
/// slashes (the part-specific parsers then apply their stricter rules).
/// Whether `host` is lower-case letters, digits, dots and dashes only, with no label that has
/// dashes in its third and fourth places (`xn--` and the like): a name IDNA's strict processing
/// leaves as it is or refuses for reasons the checks after it repeat (lengths, empty labels,
/// dashes at either end). Anything else goes through IDNA.
fn is_plain_ldh(host: &str) -> bool {
    host.bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && host.split('.').all(|label| label.get(2..4) != Some("--"))
}

fn decode_segment(what: &'static str, s: &str) -> Result<String, AddressError> {
    let text = if s.contains('%') {
        let bytes: Vec<u8> = percent_encoding::percent_decode_str(s).collect();
        String::from_utf8(bytes).map_err(|_| AddressError::new(what, s, "not valid UTF-8"))?
    } else {
        s.to_owned()
    };
    if text
        .chars()
        .any(|c| c.is_control() || c == '/' || c == '\\')
    {
        return Err(AddressError::new(
            what,
            s,
            "contains a control character or slash",
        ));
    }
    Ok(text)
}

fn provider_from_segments(host: &str, ns: &str, ty: &str) -> Result<ProviderAddr, AddressError> {
    ProviderAddr::new(
        &decode_segment("hostname", host)?,
        &decode_segment("namespace", ns)?,
        &decode_segment("provider type", ty)?,
    )
}

/// A module registry address: `hostname/namespace/name/system`, e.g.
/// `registry.terraform.io/terraform-aws-modules/vpc/aws`.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct ModuleAddr {
    pub hostname: Hostname,
    pub namespace: String,
    pub name: String,
    /// The target system (the main provider), lowercase letters and digits.
    pub system: String,
}

impl ModuleAddr {
    /// Validates the four parts of an address (namespace and name as Terraform's registry
    /// addresses allow them, the system lowercase letters and digits), lowercased.
    pub fn new(
        hostname: &str,
        namespace: &str,
        name: &str,
        system: &str,
    ) -> Result<ModuleAddr, AddressError> {
        let system_ok = !system.is_empty()
            && system.len() <= MAX_PART_LEN
            && system.bytes().all(|b| b.is_ascii_alphanumeric());
        if !system_ok {
            return Err(AddressError::new(
                "module target system",
                system,
                "must be 1 to 64 letters and digits",
            ));
        }
        Ok(ModuleAddr {
            hostname: Hostname::parse(hostname)?,
            namespace: parse_part("module namespace", namespace, true)?,
            name: parse_part("module name", name, true)?,
            system: system.to_ascii_lowercase(),
        })
    }

    /// Parses `[hostname/]namespace/name/system`; without a hostname, `default_host`
    /// (registry.terraform.io for Terraform, registry.opentofu.org for OpenTofu).
    pub fn parse_in(source: &str, default_host: &str) -> Result<ModuleAddr, AddressError> {
        let parts: Vec<&str> = source.split('/').collect();
        match parts.as_slice() {
            [ns, name, system] => ModuleAddr::new(default_host, ns, name, system),
            [host, ns, name, system] => ModuleAddr::new(host, ns, name, system),
            _ => Err(AddressError::new(
                "module source",
                source,
                "expected [hostname/]namespace/name/system",
            )),
        }
    }
}

impl fmt::Display for ModuleAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}/{}",
            self.hostname, self.namespace, self.name, self.system
        )
    }
}

/// The repository an OCI request names.
///
/// - a provider: `<hostname>/<namespace>/<type>` (what the `oci_mirror` template
///   `"mirror.example.com/${hostname}/${namespace}/${type}"` makes);
/// - a module: `<hostname>/modules/<namespace>/<name>/<system>` (what an `oci://` module source
///   names). Five segments never parse as a provider's three, so neither shadows the other.
///   Module namespaces and names are lowercased, as everywhere in the mirror: the registry
///   protocol matches them case-insensitively, and OCI repository names are lowercase only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OciRepo {
    Provider(ProviderAddr),
    Module(ModuleAddr),
}

impl fmt::Display for OciRepo {
    /// The repository name, as clients write it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OciRepo::Provider(a) => write!(f, "{}/{}/{}", a.hostname, a.namespace, a.type_),
            OciRepo::Module(a) => write!(
                f,
                "{}/modules/{}/{}/{}",
                a.hostname, a.namespace, a.name, a.system
            ),
        }
    }
}

/// The tag that names a module's newest version.
pub const LATEST: &str = "latest";

/// What an OCI distribution request names, parsed from the path below `/v2/`: a repository
/// ([`OciRepo`]) and what of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OciPath {
    /// `<repo>/tags/list`
    Tags(OciRepo),
    /// `<repo>/manifests/<reference>`
    Manifest(OciRepo, OciReference),
    /// `<repo>/blobs/sha256:<hex>`
    Blob(OciRepo, String),
}

/// A manifest reference: a tag (a version, `+` written `_`) or a `sha256:` digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OciReference {
    Tag(Version),
    /// `latest`, in a module repository: the newest version that is not a prerelease (the tag
    /// an `oci://` module source without `?tag=` or `?digest=` asks for).
    Latest,
    /// Lowercase hex SHA-256.
    Digest(String),
}

/// Why an OCI path names nothing this mirror serves, in the distribution API's terms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OciPathError {
    /// The repository name is not a provider address (`NAME_INVALID`).
    #[error("{0}")]
    Name(String),
    /// The tag is not a version (`MANIFEST_UNKNOWN`: OpenTofu skips such tags).
    #[error("{0}")]
    Tag(String),
    /// The digest is not `sha256:` and 64 hex digits (`DIGEST_INVALID`).
    #[error("{0}")]
    Digest(String),
    /// No such endpoint (`NOT_FOUND`, plain 404).
    #[error("{0}")]
    Endpoint(String),
}

impl OciPath {
    /// Parses the part of a request path below `/v2/`.
    pub fn parse(path: &str) -> Result<OciPath, OciPathError> {
        let (repo, op, arg) = if let Some(repo) = path.strip_suffix("/tags/list") {
            (repo, "tags", "")
        } else if let Some((repo, reference)) = path.rsplit_once("/manifests/") {
            (repo, "manifests", reference)
        } else if let Some((repo, digest)) = path.rsplit_once("/blobs/") {
            (repo, "blobs", digest)
        } else {
            return Err(OciPathError::Endpoint(format!(
                "/v2/{path}: not an endpoint of this registry (tags/list, manifests, blobs)"
            )));
        };
        let named = |e: AddressError| OciPathError::Name(format!("repository {repo:?}: {e}"));
        let addr = match repo.split('/').collect::<Vec<_>>().as_slice() {
            [host, ns, ty] => {
                OciRepo::Provider(provider_from_segments(host, ns, ty).map_err(named)?)
            }
            [host, "modules", ns, name, system] => OciRepo::Module(
                (|| {
                    ModuleAddr::new(
                        &decode_segment("hostname", host)?,
                        &decode_segment("module namespace", ns)?,
                        &decode_segment("module name", name)?,
                        &decode_segment("module target system", system)?,
                    )
                })()
                .map_err(named)?,
            ),
            _ => {
                return Err(OciPathError::Name(format!(
                    "repository {repo:?}: expected a provider, <hostname>/<namespace>/<type> (as the \
                     oci_mirror template \"<mirror>/${{hostname}}/${{namespace}}/${{type}}\" makes), \
                     or a module, <hostname>/modules/<namespace>/<name>/<system>"
                )));
            }
        };
        let sha256 = |digest: &str| match digest.strip_prefix("sha256:") {
            Some(hex)
                if hex.len() == 64
                    && hex
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
            {
                Ok(hex.to_string())
            }
            _ => Err(OciPathError::Digest(format!(
                "{digest:?} is not a sha256 digest (sha256: and 64 lowercase hex digits)"
            ))),
        };
        match op {
            "tags" => Ok(OciPath::Tags(addr)),
            "blobs" => Ok(OciPath::Blob(addr, sha256(arg)?)),
            _ if arg.contains(':') => {
                Ok(OciPath::Manifest(addr, OciReference::Digest(sha256(arg)?)))
            }
            _ if arg == LATEST && matches!(addr, OciRepo::Module(_)) => {
                Ok(OciPath::Manifest(addr, OciReference::Latest))
            }
            _ => match Version::from_oci_tag(arg) {
                Some(v) => Ok(OciPath::Manifest(addr, OciReference::Tag(v))),
                None => Err(OciPathError::Tag(format!(
                    "tag {arg:?} names no version of {addr}"
                ))),
            },
        }
    }
}

/// A request to the module registry facade, below `<base>v1/modules/`: `:hostname/` followed
/// by the module registry protocol's own paths, plus the archives the mirror serves itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModulePath {
    /// `:hostname/:namespace/:name/:system/versions`
    Versions(ModuleAddr),
    /// `:hostname/:namespace/:name/:system/:version/download`
    Download(ModuleAddr, Version),
    /// `:hostname/:namespace/:name/:system/:version/module.tar.gz`
    Archive(ModuleAddr, Version),
}

impl ModulePath {
    /// The module it is about.
    pub fn addr(&self) -> &ModuleAddr {
        match self {
            ModulePath::Versions(a) | ModulePath::Download(a, _) | ModulePath::Archive(a, _) => a,
        }
    }
}

/// The file name of the archive the mirror serves for a module version.
pub const MODULE_ARCHIVE: &str = "module.tar.gz";

impl ModulePath {
    /// Parses the part of a path below `v1/modules/`.
    pub fn parse(path: &str) -> Result<ModulePath, AddressError> {
        let segments: Vec<&str> = path.split('/').collect();
        let addr = |host: &str, ns: &str, name: &str, system: &str| {
            ModuleAddr::new(
                &decode_segment("hostname", host)?,
                &decode_segment("module namespace", ns)?,
                &decode_segment("module name", name)?,
                &decode_segment("module target system", system)?,
            )
        };
        let version = |v: &str| Version::parse_lenient(&decode_segment("version", v)?);
        match segments.as_slice() {
            [host, ns, name, system, "versions"] => {
                Ok(ModulePath::Versions(addr(host, ns, name, system)?))
            }
            [host, ns, name, system, v, "download"] => Ok(ModulePath::Download(
                addr(host, ns, name, system)?,
                version(v)?,
            )),
            [host, ns, name, system, v, file] if *file == MODULE_ARCHIVE => Ok(
                ModulePath::Archive(addr(host, ns, name, system)?, version(v)?),
            ),
            _ => Err(AddressError::new(
                "module registry path",
                path,
                "expected :hostname/:namespace/:name/:system/versions, .../:version/download or .../:version/module.tar.gz",
            )),
        }
    }

    /// The path below `v1/modules/` of a module version's archive.
    pub fn archive_path(addr: &ModuleAddr, version: &Version) -> String {
        format!("{addr}/{version}/{MODULE_ARCHIVE}")
    }
}

/// A request to the registry-protocol facade, below `<base>v1/providers/`. It lets clients that
/// only speak the provider registry protocol (`terraform providers mirror`, a CLI `host` block)
/// go through the mirror: `:hostname/` followed by the origin protocol's own paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryPath {
    /// `:hostname/:namespace/:type/versions`
    Versions(ProviderAddr),
    /// `:hostname/:namespace/:type/:version/download/:os/:arch`
    Download(ProviderAddr, Version, Platform),
    /// `:hostname/:namespace/:type/:version/SHA256SUMS/:n` (and `:n.sig` for the signature)
    Sums {
        addr: ProviderAddr,
        version: Version,
        index: usize,
        signature: bool,
    },
}

impl RegistryPath {
    /// The provider it is about.
    pub fn addr(&self) -> &ProviderAddr {
        match self {
            RegistryPath::Versions(a)
            | RegistryPath::Download(a, _, _)
            | RegistryPath::Sums { addr: a, .. } => a,
        }
    }
}

impl RegistryPath {
    /// Parses the part of a path below `v1/providers/`.
    pub fn parse(path: &str) -> Result<RegistryPath, AddressError> {
        let segments: Vec<&str> = path.split('/').collect();
        let bad = || {
            AddressError::new(
                "registry path",
                path,
                "expected :hostname/:namespace/:type/versions or .../:version/download/:os/:arch",
            )
        };
        match segments.as_slice() {
            [host, ns, ty, "versions"] => Ok(RegistryPath::Versions(provider_from_segments(
                host, ns, ty,
            )?)),
            [host, ns, ty, version, "download", os, arch] => Ok(RegistryPath::Download(
                provider_from_segments(host, ns, ty)?,
                Version::parse(&decode_segment("version", version)?)?,
                Platform::new(os, arch)?,
            )),
            [host, ns, ty, version, "SHA256SUMS", n] => {
                let (digits, signature) = match n.strip_suffix(".sig") {
                    Some(d) => (d, true),
                    None => (*n, false),
                };
                if digits.is_empty()
                    || digits.len() > 3
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(bad());
                }
                Ok(RegistryPath::Sums {
                    addr: provider_from_segments(host, ns, ty)?,
                    version: Version::parse(&decode_segment("version", version)?)?,
                    index: digits.parse().map_err(|_| bad())?,
                    signature,
                })
            }
            _ => Err(bad()),
        }
    }
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oci_paths_name_a_module_in_five_segments() {
        let vpc = ModuleAddr::new("registry.terraform.io", "acme", "vpc", "aws").unwrap();
        let repo = OciRepo::Module(vpc.clone());
        assert_eq!(
            repo.to_string(),
            "registry.terraform.io/modules/acme/vpc/aws"
        );
        assert_eq!(
            OciPath::parse("registry.terraform.io/modules/acme/vpc/aws/tags/list"),
            Ok(OciPath::Tags(repo.clone()))
        );
        assert_eq!(
            OciPath::parse("registry.terraform.io/modules/acme/vpc/aws/manifests/1.4.0_x"),
            Ok(OciPath::Manifest(
                repo.clone(),
                OciReference::Tag(Version::parse("1.4.0+x").unwrap())
            ))
        );
        // Matched case-insensitively, as the module registry protocol matches them.
        assert_eq!(
            OciPath::parse("registry.terraform.io/modules/Acme/VPC/aws/tags/list"),
            Ok(OciPath::Tags(repo.clone()))
        );
        assert_eq!(
            OciPath::parse("registry.terraform.io/modules/acme/vpc/aws/manifests/latest"),
            Ok(OciPath::Manifest(repo.clone(), OciReference::Latest))
        );
        // A provider whose namespace is "modules" is still a provider: three segments.
        assert!(matches!(
            OciPath::parse("registry.terraform.io/modules/vpc/tags/list"),
            Ok(OciPath::Tags(OciRepo::Provider(_)))
        ));
    }

    #[test]
    fn oci_paths_name_a_provider_and_what_of_it() {
        let foo = OciRepo::Provider(
            ProviderAddr::new("registry.opentofu.org", "hashicorp", "aws").unwrap(),
        );
        let hex = "ab".repeat(32);
        assert_eq!(
            OciPath::parse("registry.opentofu.org/hashicorp/aws/tags/list"),
            Ok(OciPath::Tags(foo.clone()))
        );
        assert_eq!(
            OciPath::parse("registry.opentofu.org/hashicorp/aws/manifests/5.0.0_b.1"),
            Ok(OciPath::Manifest(
                foo.clone(),
                OciReference::Tag(Version::parse("5.0.0+b.1").unwrap())
            ))
        );
        assert_eq!(
            OciPath::parse(&format!(
                "registry.opentofu.org/hashicorp/aws/manifests/sha256:{hex}"
            )),
            Ok(OciPath::Manifest(
                foo.clone(),
                OciReference::Digest(hex.clone())
            ))
        );
        assert_eq!(
            OciPath::parse(&format!(
                "registry.opentofu.org/hashicorp/aws/blobs/sha256:{hex}"
            )),
            Ok(OciPath::Blob(foo, hex.clone()))
        );
        for (path, kind) in [
            ("hashicorp/aws/tags/list", "name"),
            ("a/b/c/d/tags/list", "name"),
            ("a.example/b/c/d/e/tags/list", "name"),
            ("a.example/modules/b/c/tags/list", "name"),
            ("a.example/modules/b/c/d/e/tags/list", "name"),
            ("a.example/modules/b/c/d_e/tags/list", "name"),
            ("registry.opentofu.org/hashi..corp/aws/tags/list", "name"),
            (
                "registry.opentofu.org/hashicorp/aws/manifests/latest",
                "tag",
            ),
            (
                "registry.opentofu.org/hashicorp/aws/manifests/sha256:AB",
                "digest",
            ),
            (
                "registry.opentofu.org/hashicorp/aws/blobs/sha512:ab",
                "digest",
            ),
            (
                "registry.opentofu.org/hashicorp/aws/referrers/x",
                "endpoint",
            ),
            ("_catalog", "endpoint"),
        ] {
            let got = match OciPath::parse(path) {
                Err(OciPathError::Name(_)) => "name",
                Err(OciPathError::Tag(_)) => "tag",
                Err(OciPathError::Digest(_)) => "digest",
                Err(OciPathError::Endpoint(_)) => "endpoint",
                Ok(p) => panic!("{path} parsed as {p:?}"),
            };
            assert_eq!(got, kind, "{path}");
        }
    }

    #[test]
    fn hostnames_are_normalised() {
        assert_eq!(
            Hostname::parse("Registry.Terraform.IO").unwrap().as_str(),
            "registry.terraform.io"
        );
        assert_eq!(
            Hostname::parse("example.com:443").unwrap().as_str(),
            "example.com"
        );
        assert_eq!(
            Hostname::parse("example.com:8443").unwrap().as_str(),
            "example.com:8443"
        );
        assert_eq!(
            Hostname::parse("bücher.example").unwrap().as_str(),
            "xn--bcher-kva.example"
        );
        assert_eq!(
            Hostname::parse("xn--bcher-kva.example").unwrap().as_str(),
            "xn--bcher-kva.example"
        );
    }

    #[test]
    fn plain_hostnames_skip_idna_only_where_it_changes_nothing() {
        let long = format!("{}.com", "a".repeat(64));
        for host in [
            "registry.terraform.io",
            "a",
            "1.2.3.4",
            "a-b.example",
            "ab--cd.example",
            "xn--bcher-kva.example",
            "xn--a.example",
            "-a.com",
            "a-.com",
            "a..b",
            ".a",
            "a.",
            ".",
            long.as_str(),
        ] {
            let fast = is_plain_ldh(host);
            let idna = idna::domain_to_ascii_strict(host);
            if fast {
                // Where IDNA would be skipped, it would have kept the name or refused it...
                assert!(
                    idna.as_deref().map_or(true, |a| a == host),
                    "{host}: {idna:?}"
                );
                // ...and a name it refuses is refused all the same.
                if idna.is_err() {
                    assert!(Hostname::parse(host).is_err(), "{host}");
                }
            }
            assert_eq!(
                Hostname::parse(host).is_ok(),
                idna.is_ok_and(|a| Hostname::parse(&a).is_ok()),
                "{host}"
            );
        }
        assert!(!is_plain_ldh("ab--cd.example") && !is_plain_ldh("xn--bcher-kva.example"));
        assert!(!is_plain_ldh("Registry.Terraform.IO") && !is_plain_ldh("bücher.example"));
    }

    #[test]
    fn bad_hostnames_are_refused() {
        for bad in [
            "",
            ".",
            "..",
            "a..b",
            "-a.com",
            "a-.com",
            "a_b.com",
            "a/b",
            "a\\b",
            "a\0b",
            "a b",
            "[::1]",
            "::1",
            "example.com:",
            "example.com:0",
            "example.com:65536",
            "example.com:08443",
            "example.com:x",
            "%2e%2e",
        ] {
            assert!(Hostname::parse(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(Hostname::parse(&"a".repeat(64)).is_err());
        assert!(Hostname::parse(&format!("{}.com", "a.".repeat(130))).is_err());
    }

    #[test]
    fn versions_parse_canonically_and_order_by_semver() {
        assert_eq!(Version::parse("1.2.3").unwrap().as_str(), "1.2.3");
        assert_eq!(
            Version::parse("5.0.0+build.1").unwrap().as_str(),
            "5.0.0+build.1"
        );
        assert_eq!(Version::parse_lenient("1.2").unwrap().as_str(), "1.2.0");
        assert_eq!(Version::parse_lenient("1").unwrap().as_str(), "1.0.0");
        assert_eq!(
            Version::parse("2.0.0-beta.1").unwrap().prerelease(),
            Some("beta.1")
        );
        for bad in [
            "1.2",
            "01.2.3",
            "1.2.3-",
            "1.2.3+",
            "1.2.3-a..b",
            "v1.2.3",
            "1.2.3.4",
            "1.2.x",
            "..",
            "1.2.3/..",
            "",
        ] {
            assert!(Version::parse(bad).is_err(), "{bad:?} should be refused");
        }
        let mut vs: Vec<Version> = [
            "1.0.0",
            "1.0.0-rc.1",
            "1.0.0-alpha",
            "0.9.10",
            "0.9.9",
            "1.0.0-rc.10",
            "1.0.0-rc.2",
        ]
        .iter()
        .map(|s| Version::parse(s).unwrap())
        .collect();
        vs.sort();
        let order: Vec<&str> = vs.iter().map(|v| v.as_str()).collect();
        assert_eq!(
            order,
            [
                "0.9.9",
                "0.9.10",
                "1.0.0-alpha",
                "1.0.0-rc.1",
                "1.0.0-rc.2",
                "1.0.0-rc.10",
                "1.0.0"
            ]
        );
    }

    #[test]
    fn mirror_paths_parse() {
        let addr = ProviderAddr::new("registry.terraform.io", "hashicorp", "random").unwrap();
        assert_eq!(
            MirrorPath::parse("registry.terraform.io/hashicorp/random/index.json").unwrap(),
            MirrorPath::Index(addr.clone())
        );
        assert_eq!(
            MirrorPath::parse("registry.terraform.io/HashiCorp/Random/2.0.0.json").unwrap(),
            MirrorPath::Version(addr.clone(), Version::parse("2.0.0").unwrap())
        );
        assert_eq!(
            MirrorPath::parse("registry.terraform.io/hashicorp/random/5.0.0+build.1.json").unwrap(),
            MirrorPath::Version(addr.clone(), Version::parse("5.0.0+build.1").unwrap())
        );
        assert_eq!(
            MirrorPath::parse("registry.terraform.io/hashicorp/random/terraform-provider-random_2.0.0-rc.1_linux_amd64.zip")
                .unwrap(),
            MirrorPath::Archive(addr, Version::parse("2.0.0-rc.1").unwrap(), Platform::parse("linux_amd64").unwrap())
        );
        let ported = MirrorPath::parse("example.com:8443/a/b/index.json").unwrap();
        assert!(
            matches!(ported, MirrorPath::Index(a) if a.hostname.as_str() == "example.com:8443")
        );
    }

    #[test]
    fn registry_paths_parse() {
        let addr = ProviderAddr::new("registry.terraform.io", "acme", "foo").unwrap();
        let v = Version::parse("1.0.0").unwrap();
        assert_eq!(
            RegistryPath::parse("registry.terraform.io/acme/foo/versions").unwrap(),
            RegistryPath::Versions(addr.clone())
        );
        assert_eq!(
            RegistryPath::parse("registry.terraform.io/acme/foo/1.0.0/download/linux/amd64")
                .unwrap(),
            RegistryPath::Download(
                addr.clone(),
                v.clone(),
                Platform::parse("linux_amd64").unwrap()
            )
        );
        assert_eq!(
            RegistryPath::parse("registry.terraform.io/acme/foo/1.0.0/SHA256SUMS/0.sig").unwrap(),
            RegistryPath::Sums {
                addr,
                version: v,
                index: 0,
                signature: true
            }
        );
        for bad in [
            "registry.terraform.io/acme/foo",
            "registry.terraform.io/acme/foo/1.0.0/download/linux",
            "registry.terraform.io/acme/foo/1.0.0/download/../amd64",
            "registry.terraform.io/acme/foo/1.0.0/SHA256SUMS/x",
            "registry.terraform.io/acme/foo/1.0.0/SHA256SUMS/-1",
            "registry.terraform.io/acme/foo/../SHA256SUMS/0",
            "registry.terraform.io/%2e%2e/foo/versions",
        ] {
            assert!(
                RegistryPath::parse(bad).is_err(),
                "{bad:?} should be refused"
            );
        }
    }

    #[test]
    fn hostile_mirror_paths_are_refused() {
        for bad in [
            "../hashicorp/random/index.json",
            "registry.terraform.io/../random/index.json",
            "registry.terraform.io/hashicorp/../index.json",
            "registry.terraform.io/%2e%2e/random/index.json",
            "registry.terraform.io/hashicorp/random/..%2f..%2fetc.json",
            "registry.terraform.io/hashicorp%2frandom/x/index.json",
            "registry.terraform.io/hashi\\corp/random/index.json",
            "registry.terraform.io/hashicorp/ran%00dom/index.json",
            "registry.terraform.io/hashicorp/random/../../x.json",
            "registry.terraform.io/hashicorp/random/1.0.0/../x.json",
            "registry.terraform.io/hashicorp/random/terraform-provider-other_1.0.0_linux_amd64.zip",
            "registry.terraform.io/hashicorp/random/terraform-provider-random_1.0.0_linux.zip",
            "registry.terraform.io/hashicorp/random/terraform-provider-random_1.0.0_linux_amd64.tar",
            "registry.terraform.io/hashicorp/random/terraform-provider-random_1.0.0_../x_amd64.zip",
            "registry.terraform.io/hashicorp/random/index.json/extra",
            "registry.terraform.io/hashicorp/random",
            "registry.terraform.io/hashicorp/random/",
            "%ff/hashicorp/random/index.json",
            "127.0.0.1:99999/a/b/index.json",
        ] {
            assert!(MirrorPath::parse(bad).is_err(), "{bad:?} should be refused");
        }
        let long = format!("registry.terraform.io/{}/random/index.json", "a".repeat(65));
        assert!(MirrorPath::parse(&long).is_err());
    }
}

/// Property tests for request-path canonicalisation: whatever a client sends, a parsed path is
/// made only of safe parts, parsing its canonical form gives the same value back, and the
/// spellings a client may legitimately use (case, percent-encoding) all land on one value.
#[cfg(test)]
mod proptests {
    use super::*;
    use proptest::prelude::*;

    fn parts(p: &MirrorPath) -> Vec<String> {
        let mut out = Vec::new();
        let addr = match p {
            MirrorPath::Index(a) => a,
            MirrorPath::Version(a, v) => {
                out.push(v.to_string());
                a
            }
            MirrorPath::Archive(a, v, pl) => {
                out.push(v.to_string());
                out.push(pl.to_string());
                a
            }
        };
        out.push(addr.hostname.to_string());
        out.push(addr.namespace.clone());
        out.push(addr.type_.clone());
        out
    }

    /// Nothing that could climb out of a directory or smuggle a separator survives parsing.
    fn assert_safe(p: &MirrorPath) {
        for part in parts(p) {
            assert!(
                !part.contains(['/', '\\', '%', '\0']) && part != ".." && part != ".",
                "unsafe part {part:?} in {p:?}"
            );
            assert!(!part.contains(".."), "{part:?} in {p:?}");
        }
    }

    /// Characters that matter for paths, mixed with ordinary ones.
    fn hostile_segment() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                Just("..".to_string()),
                Just(".".to_string()),
                Just("%2e".to_string()),
                Just("%2E".to_string()),
                Just("%2f".to_string()),
                Just("%5c".to_string()),
                Just("%00".to_string()),
                Just("%".to_string()),
                Just("\\".to_string()),
                Just("/".to_string()),
                Just("_".to_string()),
                Just("-".to_string()),
                Just("+".to_string()),
                Just(":".to_string()),
                "[a-zA-Z0-9]{1,8}",
                any::<char>().prop_map(|c| c.to_string()),
            ],
            0..8,
        )
        .prop_map(|v| v.concat())
    }

    fn name() -> impl Strategy<Value = String> {
        "[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?"
    }

    fn version() -> impl Strategy<Value = String> {
        (
            0u32..50,
            0u32..50,
            0u32..50,
            proptest::option::of("[a-z]{1,5}(\\.[0-9]{1,2})?"),
        )
            .prop_map(|(a, b, c, pre)| match pre {
                Some(p) => format!("{a}.{b}.{c}-{p}"),
                None => format!("{a}.{b}.{c}"),
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn arbitrary_paths_parse_to_safe_canonical_values(
            segs in proptest::collection::vec(hostile_segment(), 1..6)
        ) {
            let path = segs.join("/");
            if let Ok(p) = MirrorPath::parse(&path) {
                assert_safe(&p);
                prop_assert_eq!(MirrorPath::parse(&p.to_string()).unwrap(), p);
            }
            let _ = RegistryPath::parse(&path);
        }

        #[test]
        fn hostile_input_in_any_segment_never_yields_a_path(
            host in "[a-z]{1,10}\\.example",
            ns in name(),
            ty in name(),
            bad in prop_oneof![
                Just(".."), Just("%2e%2e"), Just("%2E%2e"), Just(".%2e"),
                Just("a%2fb"), Just("a%2Fb"), Just("a\\b"), Just("a%5cb"),
                Just("a%00b"), Just("%ff"), Just(""), Just("a/../b"),
            ],
            position in 0usize..4,
        ) {
            let mut segs = vec![host, ns, ty.clone(), format!("terraform-provider-{ty}_1.0.0_linux_amd64.zip")];
            segs[position] = bad.to_string();
            prop_assert!(MirrorPath::parse(&segs.join("/")).is_err(), "{:?}", segs);
        }

        #[test]
        fn case_and_percent_encoding_land_on_one_value(
            host in "[a-z]{1,10}\\.(example|test)",
            ns in name(),
            ty in name(),
            v in version(),
            upper in any::<bool>(),
            encode in any::<bool>(),
        ) {
            let plain = format!("{host}/{ns}/{ty}/{v}.json");
            let spelled_ns = if upper { ns.to_ascii_uppercase() } else { ns.clone() };
            let spelled_ty = if encode {
                ty.bytes().map(|b| format!("%{b:02X}")).collect::<String>()
            } else {
                ty.clone()
            };
            let variant = format!("{}/{spelled_ns}/{spelled_ty}/{v}.json", host.to_ascii_uppercase());
            let a = MirrorPath::parse(&plain).unwrap();
            let b = MirrorPath::parse(&variant).unwrap();
            prop_assert_eq!(&a, &b);
            prop_assert_eq!(a.to_string(), plain);
        }

        #[test]
        fn archive_names_round_trip(
            host in "[a-z]{1,10}\\.example(:[1-9][0-9]{3})?",
            ns in name(),
            ty in name(),
            v in version(),
            os in "[a-z0-9]{1,8}",
            arch in "[a-z0-9]{1,8}",
        ) {
            let path = format!("{host}/{ns}/{ty}/terraform-provider-{ty}_{v}_{os}_{arch}.zip");
            let p = MirrorPath::parse(&path).unwrap();
            assert_safe(&p);
            prop_assert_eq!(p.to_string(), path);
        }
    }
}
