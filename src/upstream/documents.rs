//! Parsing what origin registries send: the discovery document, the version list, download
//! metadata and SHA256SUMS.
//!
//! Everything here is a pure function from bytes to a validated value, so it can be tested (and
//! fuzzed) without a network. Hostile shapes never panic: entries Terraform would skip are
//! skipped (with the reason returned for logging), anything else is a [`DocumentError`].

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::address::{Platform, Version};
use crate::hash::{H1, Sha256};
use crate::records::{IndexVersion, Package, SigningKey};

/// An origin document that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DocumentError(pub String);

fn doc_err(msg: impl Into<String>) -> DocumentError {
    DocumentError(msg.into())
}

/// The services a registry host's discovery document lists that provender uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Services {
    providers: Option<String>,
    modules: Option<String>,
}

impl Services {
    /// The base URL (as written, possibly relative) of `providers.v1` or `modules.v1`.
    pub fn get(&self, service: &str) -> Option<&str> {
        match service {
            "providers.v1" => self.providers.as_deref(),
            "modules.v1" => self.modules.as_deref(),
            _ => None,
        }
    }
}

/// Reads a discovery document (`/.well-known/terraform.json`): its `providers.v1` and
/// `modules.v1` entries. Other services are ignored; a listed service that is not a non-empty
/// string is an error.
pub fn parse_discovery(body: &[u8]) -> Result<Services, DocumentError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| doc_err(format!("discovery document is not valid JSON: {e}")))?;
    let Value::Object(map) = value else {
        return Err(doc_err("discovery document is not a JSON object"));
    };
    let service = |name: &str| match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(_) => Err(doc_err(format!(
            "discovery document: {name:?} is not a non-empty string"
        ))),
    };
    Ok(Services {
        providers: service("providers.v1")?,
        modules: service("modules.v1")?,
    })
}

/// The parsed version list plus human-readable notes about entries that were skipped.
#[derive(Debug, Clone, Default)]
pub struct VersionList {
    pub versions: Vec<IndexVersion>,
    pub skipped: Vec<String>,
}

/// Parses `:namespace/:type/versions`. Entries with an invalid version are skipped (as Terraform
/// does); so are malformed platform entries. A duplicate version keeps its first entry.
pub fn parse_versions(body: &[u8]) -> Result<VersionList, DocumentError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| doc_err(format!("version list is not valid JSON: {e}")))?;
    let Some(entries) = value.get("versions") else {
        return Err(doc_err("version list has no \"versions\" property"));
    };
    let Value::Array(entries) = entries else {
        return Err(doc_err("version list: \"versions\" is not an array"));
    };
    let mut out = VersionList::default();
    for (i, entry) in entries.iter().enumerate() {
        let Some(text) = entry.get("version").and_then(Value::as_str) else {
            out.skipped
                .push(format!("versions[{i}]: no \"version\" string"));
            continue;
        };
        let version = match Version::parse_lenient(text) {
            Ok(v) => v,
            Err(e) => {
                out.skipped.push(format!("versions[{i}]: {e}"));
                continue;
            }
        };
        if out.versions.iter().any(|v| v.version == version) {
            out.skipped
                .push(format!("versions[{i}]: duplicate version {version}"));
            continue;
        }
        let mut platforms = Vec::new();
        if let Some(Value::Array(list)) = entry.get("platforms") {
            for (j, p) in list.iter().enumerate() {
                let os = p.get("os").and_then(Value::as_str);
                let arch = p.get("arch").and_then(Value::as_str);
                match (os, arch) {
                    (Some(os), Some(arch)) => match Platform::new(os, arch) {
                        Ok(p) if !platforms.contains(&p) => platforms.push(p),
                        Ok(_) => {}
                        Err(e) => out
                            .skipped
                            .push(format!("versions[{i}].platforms[{j}]: {e}")),
                    },
                    _ => out.skipped.push(format!(
                        "versions[{i}].platforms[{j}]: needs \"os\" and \"arch\" strings"
                    )),
                }
            }
        }
        platforms.sort();
        let protocols = protocols_of(entry.get("protocols"));
        out.versions.push(IndexVersion {
            version,
            protocols,
            platforms,
        });
    }
    Ok(out)
}

/// A module's parsed version list plus notes about entries that were skipped.
#[derive(Debug, Clone, Default)]
pub struct ModuleVersionList {
    pub versions: Vec<Version>,
    pub skipped: Vec<String>,
}

/// Parses a module registry's `:namespace/:name/:system/versions`: the versions of its first
/// module (the only part Terraform reads). A leading `v` is accepted (`v1.2.3` means 1.2.3);
/// invalid and duplicate versions are skipped.
pub fn parse_module_versions(body: &[u8]) -> Result<ModuleVersionList, DocumentError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| doc_err(format!("module version list is not valid JSON: {e}")))?;
    let Some(Value::Array(modules)) = value.get("modules") else {
        return Err(doc_err("module version list has no \"modules\" array"));
    };
    let Some(first) = modules.first() else {
        return Ok(ModuleVersionList::default());
    };
    let Some(Value::Array(entries)) = first.get("versions") else {
        return Err(doc_err(
            "module version list: modules[0] has no \"versions\" array",
        ));
    };
    let mut out = ModuleVersionList::default();
    for (i, entry) in entries.iter().enumerate() {
        let Some(text) = entry.get("version").and_then(Value::as_str) else {
            out.skipped
                .push(format!("versions[{i}]: no \"version\" string"));
            continue;
        };
        let text = text.strip_prefix(['v', 'V']).unwrap_or(text);
        match Version::parse_lenient(text) {
            Ok(v) if out.versions.contains(&v) => out
                .skipped
                .push(format!("versions[{i}]: duplicate version {v}")),
            Ok(v) => out.versions.push(v),
            Err(e) => out.skipped.push(format!("versions[{i}]: {e}")),
        }
    }
    Ok(out)
}

/// Keeps the well-formed `MAJOR[.MINOR]` strings of a `protocols` array.
fn protocols_of(value: Option<&Value>) -> Vec<String> {
    let Some(Value::Array(list)) = value else {
        return Vec::new();
    };
    list.iter()
        .filter_map(Value::as_str)
        .filter(|p| {
            p.len() <= 16
                && !p.is_empty()
                && p.split('.').count() <= 2
                && p.split('.')
                    .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
        .collect()
}

#[derive(Deserialize)]
struct RawDownload {
    protocols: Option<Value>,
    os: Option<String>,
    arch: Option<String>,
    filename: Option<String>,
    download_url: Option<String>,
    shasum: Option<String>,
    shasums_url: Option<String>,
    shasums_signature_url: Option<String>,
    signing_keys: Option<RawSigningKeys>,
    /// OpenTofu's registry extension: every platform's hashes and size.
    packages: Option<BTreeMap<String, RawPackageEntry>>,
}

#[derive(Deserialize)]
struct RawPackageEntry {
    #[serde(default)]
    hashes: Vec<String>,
    package_size: Option<u64>,
}

#[derive(Deserialize)]
struct RawSigningKeys {
    gpg_public_keys: Option<Vec<RawKey>>,
}

#[derive(Deserialize)]
struct RawKey {
    key_id: Option<String>,
    ascii_armor: Option<String>,
    trust_signature: Option<String>,
}

/// Parses and validates download metadata (`:ns/:type/:version/download/:os/:arch`) for
/// `platform`: a package not yet processed (no `h1:`). URLs are kept as given; the caller
/// resolves them against the URL the document came from.
pub fn parse_download(body: &[u8], platform: &Platform) -> Result<Package, DocumentError> {
    let raw: RawDownload = serde_json::from_slice(body).map_err(|e| {
        doc_err(format!(
            "download metadata for {platform} is malformed: {e}"
        ))
    })?;
    let field = |name: &str, v: Option<String>| -> Result<String, DocumentError> {
        match v {
            Some(s) if !s.is_empty() => Ok(s),
            _ => Err(doc_err(format!(
                "download metadata for {platform}: missing \"{name}\""
            ))),
        }
    };
    if raw.os.as_deref().is_some_and(|os| os != platform.os)
        || raw.arch.as_deref().is_some_and(|a| a != platform.arch)
    {
        return Err(doc_err(format!(
            "download metadata for {platform} describes another platform"
        )));
    }
    let filename = field("filename", raw.filename)?;
    if filename.len() > 255
        || filename.contains(['/', '\\', '\n', '\r', '\0'])
        || filename.starts_with('.')
    {
        return Err(doc_err(format!(
            "download metadata for {platform}: unusable filename {filename:?}"
        )));
    }
    let shasum =
        Sha256::parse(&field("shasum", raw.shasum)?.to_ascii_lowercase()).map_err(|_| {
            doc_err(format!(
                "download metadata for {platform}: \"shasum\" is not 64 hexadecimal digits"
            ))
        })?;
    let signing_keys = raw
        .signing_keys
        .and_then(|k| k.gpg_public_keys)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|k| {
            Some(SigningKey {
                key_id: k.key_id.unwrap_or_default(),
                ascii_armor: k.ascii_armor.filter(|a| !a.is_empty())?,
                trust_signature: k.trust_signature.unwrap_or_default(),
            })
        })
        .collect();
    let (size, reported_h1) = match raw
        .packages
        .as_ref()
        .and_then(|p| p.get(&platform.to_string()))
    {
        Some(entry) => package_claims(entry, platform, &shasum)?,
        None => (None, None),
    };
    Ok(Package {
        h1: None,
        size,
        reported_h1,
        protocols: protocols_of(raw.protocols.as_ref()),
        filename,
        download_url: Some(field("download_url", raw.download_url)?),
        shasum,
        shasums_url: Some(field("shasums_url", raw.shasums_url)?),
        shasums_signature_url: Some(field("shasums_signature_url", raw.shasums_signature_url)?),
        signing_keys,
    })
}

/// What a registry's `packages` extension states about `platform`'s archive: its size and
/// `h1:`. Its `zh:`, when given, must be the `shasum`, and its size positive, as OpenTofu
/// requires; a registry contradicting itself is not believed on anything.
fn package_claims(
    entry: &RawPackageEntry,
    platform: &Platform,
    shasum: &Sha256,
) -> Result<(Option<u64>, Option<H1>), DocumentError> {
    let claim = |what: &str| {
        doc_err(format!(
            "download metadata for {platform}: \"packages\" {what}"
        ))
    };
    if let Some(zh) = entry.hashes.iter().find_map(|h| h.strip_prefix("zh:")) {
        if !zh.eq_ignore_ascii_case(shasum.as_str()) {
            return Err(claim(&format!("lists zh:{zh}, but \"shasum\" is {shasum}")));
        }
    }
    if entry.package_size == Some(0) {
        return Err(claim("gives a package_size of 0"));
    }
    let h1 = match entry.hashes.iter().find(|h| h.starts_with("h1:")) {
        Some(h1) => {
            Some(H1::parse(h1).map_err(|_| claim(&format!("lists a malformed hash {h1:?}")))?)
        }
        None => None,
    };
    Ok((entry.package_size, h1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn linux() -> Platform {
        Platform::parse("linux_amd64").unwrap()
    }

    #[test]
    fn discovery_variants() {
        let providers = |b: &[u8]| {
            parse_discovery(b)
                .unwrap()
                .get("providers.v1")
                .map(str::to_string)
        };
        assert_eq!(
            providers(br#"{"providers.v1":"/v1/providers/"}"#).as_deref(),
            Some("/v1/providers/")
        );
        assert_eq!(providers(br#"{"modules.v1":"/m/"}"#), None);
        assert_eq!(
            parse_discovery(br#"{"modules.v1":"/m/"}"#)
                .unwrap()
                .get("modules.v1"),
            Some("/m/")
        );
        assert_eq!(providers(br#"{"providers.v1":null}"#), None);
        assert!(parse_discovery(br#"{"providers.v1":5}"#).is_err());
        assert!(parse_discovery(br#"{"providers.v1":""}"#).is_err());
        assert!(parse_discovery(br#"[]"#).is_err());
        assert!(parse_discovery(b"not json").is_err());
        assert!(parse_discovery(b"").is_err());
    }

    #[test]
    fn versions_parse_and_skip_what_terraform_skips() {
        let body = br#"{"versions":[
            {"version":"2.0.0","protocols":["5.0"],"platforms":[{"os":"linux","arch":"amd64"},{"os":"darwin","arch":"arm64"}]},
            {"version":"1.2","platforms":null},
            {"version":"not-a-version"},
            {"version":null},
            {"version":7},
            {"platforms":[]},
            null,
            "1.0.0",
            {"version":"2.0.0"},
            {"version":"3.0.0","platforms":[{"os":"linux"},{"os":"Linux","arch":"amd64"},null,{"os":"linux","arch":"arm64"}]}
        ]}"#;
        let list = parse_versions(body).unwrap();
        let got: Vec<String> = list
            .versions
            .iter()
            .map(|v| v.version.to_string())
            .collect();
        assert_eq!(got, ["2.0.0", "1.2.0", "3.0.0"]);
        assert_eq!(
            list.versions[0].platforms,
            vec![Platform::parse("darwin_arm64").unwrap(), linux()]
        );
        assert_eq!(list.versions[0].protocols, ["5.0"]);
        assert!(list.versions[1].protocols.is_empty());
        assert!(list.versions[1].platforms.is_empty());
        assert_eq!(
            list.versions[2].platforms,
            vec![Platform::parse("linux_arm64").unwrap()]
        );
        assert!(list.skipped.len() >= 8, "{:?}", list.skipped);
    }

    #[test]
    fn version_list_shape_errors() {
        for bad in [
            &b"{}"[..],
            br#"{"versions":null}"#,
            br#"{"versions":{}}"#,
            br#"{"versions":"x"}"#,
            b"[]",
            b"null",
            b"{",
            b"",
        ] {
            assert!(
                parse_versions(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(
            parse_versions(br#"{"versions":[]}"#)
                .unwrap()
                .versions
                .is_empty()
        );
    }

    fn download(extra: &str) -> String {
        format!(
            r#"{{"os":"linux","arch":"amd64","filename":"terraform-provider-x_1.0.0_linux_amd64.zip",
            "download_url":"https://example.com/x.zip","shasums_url":"https://example.com/SHA256SUMS",
            "shasums_signature_url":"https://example.com/SHA256SUMS.sig",
            "shasum":"{}"{extra}}}"#,
            "AB".repeat(32)
        )
    }

    #[test]
    fn download_metadata_parses() {
        let body = download(
            r#","protocols":["5.0","6","x.1",7],"signing_keys":{"gpg_public_keys":[{"ascii_armor":"KEY","trust_signature":""},{"ascii_armor":null}]}"#,
        );
        let d = parse_download(body.as_bytes(), &linux()).unwrap();
        assert_eq!(d.protocols, ["5.0", "6"]);
        assert_eq!(d.shasum, "ab".repeat(32));
        assert_eq!(d.signing_keys.len(), 1);
        let d = parse_download(download(r#","signing_keys":null"#).as_bytes(), &linux()).unwrap();
        assert!(d.signing_keys.is_empty());
    }

    #[test]
    fn hostile_download_metadata_is_refused() {
        let base = download("");
        let cases = [
            base.replace(&"AB".repeat(32), "abc"),
            base.replace(&"AB".repeat(32), &"zz".repeat(32)),
            base.replace(
                r#""filename":"terraform-provider-x_1.0.0_linux_amd64.zip""#,
                r#""filename":"../../etc/passwd""#,
            ),
            base.replace(
                r#""filename":"terraform-provider-x_1.0.0_linux_amd64.zip""#,
                r#""filename":null"#,
            ),
            base.replace(
                r#""filename":"terraform-provider-x_1.0.0_linux_amd64.zip""#,
                r#""filename":42"#,
            ),
            base.replace(r#""download_url":"https://example.com/x.zip","#, ""),
            base.replace(r#""os":"linux""#, r#""os":"windows""#),
            download(r#","signing_keys":"nope""#),
            "[]".into(),
            "null".into(),
            "{".into(),
        ];
        for case in cases {
            assert!(parse_download(case.as_bytes(), &linux()).is_err(), "{case}");
        }
    }

    #[test]
    fn odd_but_harmless_shapes_are_tolerated() {
        let list = parse_versions(
            br#"{"versions":[
                {"version":"1.0.0","platforms":[]},
                {"version":"1.1.0","platforms":null,"protocols":null},
                {"version":"1.2.0","platforms":{},"protocols":[null,5,"5.0"]},
                {"version":"99999999999999999999999.0.0"},
                {"version":"1.3.0","platforms":[{"os":"linux","arch":"amd64","extra":[1,2]}]}
            ],"unknown":{"x":null}}"#,
        )
        .unwrap();
        let got: Vec<String> = list
            .versions
            .iter()
            .map(|v| v.version.to_string())
            .collect();
        assert_eq!(
            got,
            ["1.0.0", "1.1.0", "1.2.0", "1.3.0"],
            "{:?}",
            list.skipped
        );
        assert!(list.versions[0].platforms.is_empty());
        assert_eq!(list.versions[2].protocols, ["5.0"]);
        assert_eq!(list.versions[3].platforms, vec![linux()]);
        assert_eq!(list.skipped.len(), 1, "the unparseable version is reported");

        let d = parse_download(
            download(r#","signing_keys":{"gpg_public_keys":null},"protocols":"5.0""#).as_bytes(),
            &linux(),
        )
        .unwrap();
        assert!(d.signing_keys.is_empty() && d.protocols.is_empty());
    }

    #[test]
    fn wrong_types_fail_with_a_message_naming_the_document() {
        for (body, needle) in [
            (
                download(r#","signing_keys":{"gpg_public_keys":[null]}"#),
                "download metadata",
            ),
            (
                download(r#","signing_keys":{"gpg_public_keys":{}}"#),
                "download metadata",
            ),
            (
                download(r#","shasums_url":7"#).replacen(
                    r#""shasums_url":"https://example.com/SHA256SUMS","#,
                    "",
                    1,
                ),
                "download metadata",
            ),
            (r#"{"os":null}"#.to_string(), "missing \"filename\""),
        ] {
            let err = parse_download(body.as_bytes(), &linux()).unwrap_err();
            assert!(err.to_string().contains(needle), "{body}: {err}");
        }
        let err = parse_versions(br#"{"versions":7}"#).unwrap_err();
        assert!(err.to_string().contains("version list"), "{err}");
    }
}
