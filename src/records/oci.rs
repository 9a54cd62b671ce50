//! A provider version as OCI documents, the way OpenTofu's `oci_mirror` reads them.
//!
//! A tag (the version, `+` written `_`: [`Version::oci_tag`]) names an **image index** whose `artifactType` is
//! `application/vnd.opentofu.provider`, with one **image manifest** per platform
//! (`artifactType` `application/vnd.opentofu.provider-target`, `platform.os` and
//! `platform.architecture`). Each manifest has the empty config descriptor and exactly one layer of
//! media type `archive/zip`: the origin's zip, whose digest is therefore its `zh:` hash.
//!
//! A module version (repository `<hostname>/modules/<namespace>/<name>/<system>`, see
//! [`crate::address::OciRepo`]) is one **image manifest** whose `artifactType` is
//! `application/vnd.opentofu.modulepkg`, with the empty config and exactly one `archive/zip`
//! layer: the module package as a zip ([`ModuleZip`], [`render_module`]), which is what
//! OpenTofu's `oci://` module sources install (`internal/getmodules/oci_getter.go`).
//!
//! Rendering is a pure function of the version's packages (platform, SHA-256, size), with
//! platforms in a fixed order and at most one annotation per descriptor, so every replica and
//! every restart produces the same bytes and digests.

use bytes::Bytes;
use oci_spec::image::{
    Arch, Descriptor, DescriptorBuilder, Digest, ImageIndexBuilder, ImageManifestBuilder,
    MediaType, Os, PlatformBuilder,
};

use crate::address::{Platform, ProviderAddr, Version};
use crate::hash::Sha256;

/// `Content-Type` of an image index.
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
/// `Content-Type` of an image manifest.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// `artifactType` of a provider version's index.
pub const PROVIDER_ARTIFACT_TYPE: &str = "application/vnd.opentofu.provider";
/// `artifactType` of one platform's manifest.
pub const TARGET_ARTIFACT_TYPE: &str = "application/vnd.opentofu.provider-target";
/// `artifactType` of the layer holding the provider zip. OpenTofu's `oci_mirror` picks the layer
/// by its media type alone, but OpenTofu's own packaging sets this too (as its test registry
/// shows), and a client that also checks it finds it.
pub const PACKAGE_ARTIFACT_TYPE: &str = "application/vnd.opentofu.providerpkg";
/// `artifactType` of a module package's manifest. OpenTofu's code requires exactly this (its RFC
/// says `application/vnd.opentofu.module`; the code counts).
pub const MODULE_ARTIFACT_TYPE: &str = "application/vnd.opentofu.modulepkg";
/// Media type of the layer holding the provider zip.
pub const ZIP_MEDIA_TYPE: &str = "archive/zip";
/// The empty config blob (`{}`), its media type and digest.
pub const EMPTY_CONFIG: &[u8] = b"{}";
pub const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
pub const EMPTY_DIGEST_HEX: &str =
    "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";
/// Annotation naming the layer's file (oras and other tools name downloads after it).
const TITLE: &str = "org.opencontainers.image.title";

/// A rendered OCI document: its bytes, their SHA-256 and its media type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    pub bytes: Bytes,
    pub sha256: Sha256,
    pub media_type: &'static str,
}

impl Document {
    fn new(bytes: Vec<u8>, media_type: &'static str) -> Document {
        Document {
            sha256: Sha256::of(&bytes),
            bytes: Bytes::from(bytes),
            media_type,
        }
    }

    /// `sha256:<hex>`, as OCI names it.
    pub fn digest(&self) -> String {
        format!("sha256:{}", self.sha256)
    }

    /// The version of `addr` a provider manifest was rendered for, read from its layer's title
    /// (`terraform-provider-<type>_<version>_<os>_<arch>.zip`); `None` for an index or a
    /// document this module did not render.
    pub fn provider_version(&self, addr: &ProviderAddr) -> Option<Version> {
        let manifest: oci_spec::image::ImageManifest = serde_json::from_slice(&self.bytes).ok()?;
        let title = manifest
            .layers()
            .first()?
            .annotations()
            .as_ref()?
            .get(TITLE)?;
        let rest = title.strip_prefix(&format!("terraform-provider-{}_", addr.type_))?;
        let (version, _platform) = rest.split_once('_')?;
        Version::parse(version).ok()
    }

    /// The digest (hex) of an index's first manifest; `None` for a manifest.
    pub fn first_manifest(&self) -> Option<String> {
        let index: oci_spec::image::ImageIndex = serde_json::from_slice(&self.bytes).ok()?;
        let digest = index.manifests().first()?.digest().to_string();
        digest.strip_prefix("sha256:").map(str::to_string)
    }

    /// A stored document read back: its media type is the one it declares. `None` if the
    /// bytes are not a manifest or index this module renders.
    pub fn parse(bytes: Bytes) -> Option<Document> {
        #[derive(serde::Deserialize)]
        struct Declared {
            #[serde(rename = "mediaType")]
            media_type: String,
        }
        let declared: Declared = serde_json::from_slice(&bytes).ok()?;
        let media_type = [INDEX_MEDIA_TYPE, MANIFEST_MEDIA_TYPE]
            .into_iter()
            .find(|t| *t == declared.media_type)?;
        Some(Document {
            sha256: Sha256::of(&bytes),
            bytes,
            media_type,
        })
    }
}

/// Which archive a layer digest is, kept so that a blob request on any replica finds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlobLink {
    pub version: Version,
    pub platform: Platform,
}

/// The zip of a module version's package, as stored beside the package (the record of
/// `module.zip`): what it was made from, its SHA-256 (the layer's digest) and size.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ModuleZip {
    /// SHA-256 of the stored `.tar.gz` package the zip was made from.
    pub package_sha256: Sha256,
    pub sha256: Sha256,
    pub size: u64,
    /// The package's subdirectory the zip holds at its root (the record's `//subdir`), if any.
    /// A zip of a package with a subdirectory that does not name it (made before zips were
    /// rooted there) is made again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdir: Option<String>,
}

/// The module version an OCI digest of a module repository (its manifest's or its zip's) was
/// made for: the digest index, so a request by digest reads one link, never every version.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ModuleDigest {
    pub version: Version,
}

/// What the documents are made from: one platform's package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    pub platform: Platform,
    /// SHA-256 of the zip (the layer's digest).
    pub sha256: Sha256,
    pub size: u64,
}

/// A provider version as OCI documents: the index (what its tag names) and one manifest per
/// platform, in the index's order.
#[derive(Debug, Clone)]
pub struct ProviderImage {
    pub index: Document,
    pub manifests: Vec<(Platform, Document)>,
    /// What the documents were made from (to tell whether they still describe the version).
    pub layers: Vec<Layer>,
}

fn media(t: &str) -> MediaType {
    MediaType::from(t)
}

fn digest(sha256: &str) -> Digest {
    format!("sha256:{sha256}")
        .parse()
        .expect("a lowercase hex SHA-256 is a digest")
}

fn platform_of(p: &Platform) -> oci_spec::image::Platform {
    PlatformBuilder::default()
        .os(Os::from(p.os.as_str()))
        .architecture(Arch::from(p.arch.as_str()))
        .build()
        .expect("os and architecture are set")
}

fn descriptor(
    media_type: &str,
    sha256: &str,
    size: u64,
    platform: Option<&Platform>,
    artifact_type: Option<&str>,
) -> DescriptorBuilder {
    let mut d = DescriptorBuilder::default()
        .media_type(media(media_type))
        .digest(digest(sha256))
        .size(size);
    if let Some(p) = platform {
        d = d.platform(platform_of(p));
    }
    if let Some(t) = artifact_type {
        d = d.artifact_type(media(t));
    }
    d
}

fn empty_config() -> Descriptor {
    descriptor(
        EMPTY_MEDIA_TYPE,
        EMPTY_DIGEST_HEX,
        EMPTY_CONFIG.len() as u64,
        None,
        None,
    )
    .data("e30=".to_string())
    .build()
    .expect("descriptor fields are set")
}

fn to_json(value: &impl serde::Serialize) -> Vec<u8> {
    serde_json::to_vec(value).expect("OCI documents serialise")
}

/// Renders a provider version. `layers` may come in any order; the documents list platforms
/// sorted.
pub fn render(addr: &ProviderAddr, version: &Version, layers: &[Layer]) -> ProviderImage {
    let mut layers = layers.to_vec();
    layers.sort_by(|a, b| a.platform.cmp(&b.platform));
    let manifests: Vec<(Platform, Document)> = layers
        .iter()
        .map(|layer| {
            let title: std::collections::HashMap<String, String> = [(
                TITLE.to_string(),
                addr.archive_filename(version, &layer.platform),
            )]
            .into();
            let zip = descriptor(
                ZIP_MEDIA_TYPE,
                layer.sha256.as_str(),
                layer.size,
                Some(&layer.platform),
                Some(PACKAGE_ARTIFACT_TYPE),
            )
            .annotations(title);
            let manifest = ImageManifestBuilder::default()
                .schema_version(2u32)
                .media_type(media(MANIFEST_MEDIA_TYPE))
                .artifact_type(media(TARGET_ARTIFACT_TYPE))
                .config(empty_config())
                .layers(vec![zip.build().expect("descriptor fields are set")])
                .build()
                .expect("manifest fields are set");
            (
                layer.platform.clone(),
                Document::new(to_json(&manifest), MANIFEST_MEDIA_TYPE),
            )
        })
        .collect();
    let entries: Vec<Descriptor> = manifests
        .iter()
        .map(|(platform, doc)| {
            descriptor(
                MANIFEST_MEDIA_TYPE,
                doc.sha256.as_str(),
                doc.bytes.len() as u64,
                Some(platform),
                Some(TARGET_ARTIFACT_TYPE),
            )
            .build()
            .expect("descriptor fields are set")
        })
        .collect();
    let index = ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(media(INDEX_MEDIA_TYPE))
        .artifact_type(media(PROVIDER_ARTIFACT_TYPE))
        .manifests(entries)
        .build()
        .expect("index fields are set");
    ProviderImage {
        index: Document::new(to_json(&index), INDEX_MEDIA_TYPE),
        manifests,
        layers,
    }
}

/// Renders a module version's manifest: a pure function of its zip's SHA-256 and size (and the
/// file name in the layer's title, which oras and other tools name downloads after).
pub fn render_module(title: &str, zip: &ModuleZip) -> Document {
    let annotations: std::collections::HashMap<String, String> =
        [(TITLE.to_string(), title.to_string())].into();
    let layer = descriptor(ZIP_MEDIA_TYPE, zip.sha256.as_str(), zip.size, None, None)
        .annotations(annotations)
        .build()
        .expect("descriptor fields are set");
    let manifest = ImageManifestBuilder::default()
        .schema_version(2u32)
        .media_type(media(MANIFEST_MEDIA_TYPE))
        .artifact_type(media(MODULE_ARTIFACT_TYPE))
        .config(empty_config())
        .layers(vec![layer])
        .build()
        .expect("manifest fields are set");
    Document::new(to_json(&manifest), MANIFEST_MEDIA_TYPE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(p: &str, fill: char, size: u64) -> Layer {
        Layer {
            platform: Platform::parse(p).unwrap(),
            sha256: Sha256::parse(&fill.to_string().repeat(64)).unwrap(),
            size,
        }
    }

    #[test]
    fn tags_write_build_metadata_after_an_underscore() {
        let v = Version::parse("1.2.3-beta.1+build.7").unwrap();
        assert_eq!(v.oci_tag(), "1.2.3-beta.1_build.7");
        assert_eq!(Version::from_oci_tag("1.2.3-beta.1_build.7"), Some(v));
        assert_eq!(Version::from_oci_tag("latest"), None);
        assert_eq!(Version::from_oci_tag("linux_amd64"), None);
    }

    #[test]
    fn documents_have_the_shape_opentofu_checks_and_do_not_depend_on_input_order() {
        let addr = ProviderAddr::new("registry.opentofu.org", "hashicorp", "aws").unwrap();
        let v = Version::parse("5.1.0").unwrap();
        let a = render(
            &addr,
            &v,
            &[
                layer("linux_amd64", 'a', 10),
                layer("darwin_arm64", 'b', 20),
            ],
        );
        let b = render(
            &addr,
            &v,
            &[
                layer("darwin_arm64", 'b', 20),
                layer("linux_amd64", 'a', 10),
            ],
        );
        assert_eq!(a.index, b.index);
        assert_eq!(a.manifests, b.manifests);

        let index: serde_json::Value = serde_json::from_slice(&a.index.bytes).unwrap();
        assert_eq!(index["schemaVersion"], 2);
        assert_eq!(index["mediaType"], INDEX_MEDIA_TYPE);
        assert_eq!(index["artifactType"], PROVIDER_ARTIFACT_TYPE);
        let entries = index["manifests"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0]["platform"]["os"], "darwin");
        assert_eq!(entries[0]["platform"]["architecture"], "arm64");
        assert!(entries[0]["platform"].get("os.version").is_none());
        assert_eq!(entries[1]["artifactType"], TARGET_ARTIFACT_TYPE);
        assert_eq!(entries[1]["mediaType"], MANIFEST_MEDIA_TYPE);
        assert_eq!(entries[1]["digest"], a.manifests[1].1.digest());
        assert_eq!(entries[1]["size"], a.manifests[1].1.bytes.len());

        let linux: serde_json::Value = serde_json::from_slice(&a.manifests[1].1.bytes).unwrap();
        assert_eq!(linux["mediaType"], MANIFEST_MEDIA_TYPE);
        assert_eq!(linux["artifactType"], TARGET_ARTIFACT_TYPE);
        assert_eq!(linux["config"]["mediaType"], EMPTY_MEDIA_TYPE);
        assert_eq!(
            linux["config"]["digest"],
            format!("sha256:{EMPTY_DIGEST_HEX}")
        );
        assert_eq!(linux["config"]["size"], 2);
        let layers = linux["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1);
        assert_eq!(layers[0]["mediaType"], ZIP_MEDIA_TYPE);
        assert_eq!(layers[0]["artifactType"], PACKAGE_ARTIFACT_TYPE);
        assert_eq!(layers[0]["digest"], format!("sha256:{}", "a".repeat(64)));
        assert_eq!(layers[0]["size"], 10);
        assert_eq!(
            layers[0]["annotations"][TITLE],
            "terraform-provider-aws_5.1.0_linux_amd64.zip"
        );
        assert_eq!(crate::hash::sha256_hex(EMPTY_CONFIG), EMPTY_DIGEST_HEX);
    }

    /// The platform manifest OpenTofu's own end-to-end test registry serves for a provider zip
    /// (`e2etest/testdata/oci-provider-mirror`, `foo` 1.0.0 linux/amd64), field by field. Ours
    /// adds only an annotation naming the layer's file (for oras and other generic clients).
    #[test]
    fn a_platform_manifest_matches_opentofus_test_registry() {
        let addr = ProviderAddr::new("example.com", "test", "foo").unwrap();
        let v = Version::parse("1.0.0").unwrap();
        let zip = "11aa47eb05d2bac7eb9c27fdbf1447152c4f07c814a24db86c24339253db1534";
        let image = render(
            &addr,
            &v,
            &[Layer {
                platform: Platform::parse("linux_amd64").unwrap(),
                sha256: Sha256::parse(zip).unwrap(),
                size: 268,
            }],
        );
        let mut ours: serde_json::Value =
            serde_json::from_slice(&image.manifests[0].1.bytes).unwrap();
        let title = ours["layers"][0]
            .as_object_mut()
            .unwrap()
            .remove("annotations")
            .unwrap();
        assert_eq!(title[TITLE], "terraform-provider-foo_1.0.0_linux_amd64.zip");
        let theirs = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": "application/vnd.opentofu.provider-target",
            "config": {
                "mediaType": "application/vnd.oci.empty.v1+json",
                "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
                "size": 2,
                "data": "e30="
            },
            "layers": [{
                "mediaType": "archive/zip",
                "digest": format!("sha256:{zip}"),
                "size": 268,
                "platform": {"architecture": "amd64", "os": "linux"},
                "artifactType": "application/vnd.opentofu.providerpkg"
            }]
        });
        assert_eq!(ours, theirs);

        // The index in the form of that registry's `foo` 1.0.0 index (its manifests are ours).
        let index: serde_json::Value = serde_json::from_slice(&image.index.bytes).unwrap();
        let manifest = &image.manifests[0].1;
        let theirs = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "artifactType": "application/vnd.opentofu.provider",
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest.digest(),
                "size": manifest.bytes.len(),
                "platform": {"architecture": "amd64", "os": "linux"},
                "artifactType": "application/vnd.opentofu.provider-target"
            }]
        });
        assert_eq!(index, theirs);
    }

    /// The fields OpenTofu's `oci://` module installer checks: the manifest's media type and
    /// `artifactType`, and exactly one `archive/zip` layer.
    #[test]
    fn a_module_manifest_has_the_shape_opentofu_requires() {
        let zip = ModuleZip {
            package_sha256: Sha256::parse(&"b".repeat(64)).unwrap(),
            sha256: Sha256::parse(&"a".repeat(64)).unwrap(),
            size: 123,
            subdir: None,
        };
        let doc = render_module("vpc-aws-1.4.0.zip", &zip);
        assert_eq!(doc, render_module("vpc-aws-1.4.0.zip", &zip));
        assert_eq!(doc.media_type, MANIFEST_MEDIA_TYPE);
        let theirs = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": "application/vnd.opentofu.modulepkg",
            "config": {
                "mediaType": "application/vnd.oci.empty.v1+json",
                "digest": format!("sha256:{EMPTY_DIGEST_HEX}"),
                "size": 2,
                "data": "e30="
            },
            "layers": [{
                "mediaType": "archive/zip",
                "digest": format!("sha256:{}", "a".repeat(64)),
                "size": 123,
                "annotations": {TITLE: "vpc-aws-1.4.0.zip"}
            }]
        });
        let ours: serde_json::Value = serde_json::from_slice(&doc.bytes).unwrap();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn stored_documents_read_back_with_their_declared_type() {
        let addr = ProviderAddr::new("registry.opentofu.org", "hashicorp", "aws").unwrap();
        let v = Version::parse("5.1.0").unwrap();
        let image = render(&addr, &v, &[layer("linux_amd64", 'a', 10)]);
        assert_eq!(
            Document::parse(image.index.bytes.clone()),
            Some(image.index)
        );
        let (_, manifest) = &image.manifests[0];
        assert_eq!(
            Document::parse(manifest.bytes.clone()).as_ref(),
            Some(manifest)
        );
        assert_eq!(Document::parse(Bytes::from_static(b"{}")), None);
    }
}
