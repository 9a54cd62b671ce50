//! What the real `terraform` CLI reads in these tests: CLI configuration blocks that send it
//! to a network mirror, a filesystem mirror or a registry, and root modules requiring the fake
//! origin's providers.

use std::path::Path;

use tempfile::TempDir;

use super::provender::REGISTRY;

/// A root module requiring `acme/foo` (`~> 1.0`), `acme/bar` (any version) and `acme/dirs`
/// (0.1.0, whose zip has directory entries).
pub const FOO_BAR_DIRS: &str = r#"terraform {
  required_providers {
    foo  = { source = "acme/foo", version = "~> 1.0" }
    bar  = { source = "acme/bar" }
    dirs = { source = "acme/dirs", version = "0.1.0" }
  }
}
"#;

/// A root module requiring `acme/foo`, any version.
pub const FOO: &str =
    "terraform {\n  required_providers {\n    foo = { source = \"acme/foo\" }\n  }\n}\n";

/// A fresh directory holding `main_tf` as its `main.tf`.
pub fn root_module(main_tf: &str) -> TempDir {
    let dir = tempfile::Builder::new()
        .prefix("provender-tf-")
        .tempdir()
        .unwrap();
    std::fs::write(dir.path().join("main.tf"), main_tf).unwrap();
    dir
}

/// CLI configuration installing every provider from the network mirror at `url`.
pub fn network_mirror(url: &str) -> String {
    format!("provider_installation {{\n  network_mirror {{\n    url = \"{url}\"\n  }}\n}}\n")
}

/// [`network_mirror`], with a `credentials` block sending `token` to the mirror at `url`.
pub fn network_mirror_with_token(url: &url::Url, token: &str) -> String {
    format!(
        "{}credentials \"{}:{}\" {{\n  token = \"{token}\"\n}}\n",
        network_mirror(url.as_str()),
        url.host_str().unwrap(),
        url.port().unwrap()
    )
}

/// CLI configuration installing every provider from the filesystem mirror at `path`.
pub fn filesystem_mirror(path: &Path) -> String {
    format!(
        "provider_installation {{\n  filesystem_mirror {{\n    path = \"{}\"\n  }}\n}}\n",
        path.display()
    )
}

/// CLI configuration sending the registry protocol for [`REGISTRY`] to `providers_v1` (a
/// `host` block: service discovery is skipped).
pub fn registry_host(providers_v1: &str) -> String {
    format!(
        "host \"{REGISTRY}\" {{\n  services = {{\n    \"providers.v1\" = \"{providers_v1}\"\n  }}\n}}\n"
    )
}

/// CLI configuration sending both registry protocols for [`REGISTRY`] to the fake origin: a
/// `host` block listing `providers.v1` and `modules.v1` (a `host` block replaces the host's
/// whole service map, so modules alone would break provider installs).
pub fn registry_host_with_modules(providers_v1: &str, modules_v1: &str) -> String {
    format!(
        "host \"{REGISTRY}\" {{\n  services = {{\n    \"providers.v1\" = \"{providers_v1}\"\n    \"modules.v1\"   = \"{modules_v1}\"\n  }}\n}}\n"
    )
}

/// Terraform's name for the platform these tests run on, as `(os, arch)`.
pub fn local_platform() -> (&'static str, &'static str) {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => panic!("no Terraform build for {other}"),
    };
    (std::env::consts::OS, arch)
}

/// [`local_platform`], then each of `others` that is not the same.
pub fn local_platform_and(
    others: &[(&'static str, &'static str)],
) -> Vec<(&'static str, &'static str)> {
    let mut all = vec![local_platform()];
    for p in others {
        if !all.contains(p) {
            all.push(*p);
        }
    }
    all
}

/// `os_arch` names of `(os, arch)` pairs.
pub fn platform_names(platforms: &[(&str, &str)]) -> Vec<String> {
    platforms.iter().map(|(o, a)| format!("{o}_{a}")).collect()
}
