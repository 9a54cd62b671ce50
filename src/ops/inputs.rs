//! Where the providers to work on come from: lock files, Terraform configurations, TOML/JSON
//! provider lists and `--provider` arguments, all read into [`Wanted`] entries.
//!
//! - A `.terraform.lock.hcl` (any file ending in `.lock.hcl`) pins exact versions.
//! - A directory is a Terraform configuration: the providers its modules declare or use, read
//!   as Terraform reads them (see [`super::configuration`]).
//! - A `.toml` or `.json` file lists `providers`, each with `source` and optional `versions`
//!   (one constraint string, or several to pick one version per string).
//! - `--provider SOURCE[@CONSTRAINT]`, e.g. `hashicorp/aws@~> 5.0`.
//!
//! A short source (`hashicorp/aws`) means the default registry of the [`Tool`] the inputs are
//! for: `registry.terraform.io` for Terraform, `registry.opentofu.org` for OpenTofu.
//!
//! Whatever is wrong with an input is an [`InputError`] naming the input and the place in it,
//! for the configuration reader and the lock file parser as well.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::configuration::{Configuration, WantedModule};
use super::wanted::read_text;
pub use super::wanted::{InputError, Wanted};
use crate::address::{ModuleAddr, ProviderAddr};
use crate::config::Tool;
use crate::constraints::Constraints;

/// Reads one positional input (file or directory): the providers it names, and for a
/// configuration the registry modules it calls.
pub fn read_input(path: &Path, tool: Tool) -> Result<Configuration, InputError> {
    let meta = std::fs::metadata(path).map_err(|e| InputError::new(e).in_file(path))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    if meta.is_dir() {
        super::configuration::read_configuration(path, tool)
    } else if name.ends_with(".lock.hcl") {
        let text = read_text(path)?;
        let lock = super::lockfile::LockFile::parse(&text).map_err(|e| e.in_file(path))?;
        let providers = lock
            .providers
            .into_values()
            .map(|p| Wanted {
                addr: p.addr,
                constraints: p.constraints,
                locked: Some(p.version),
                from: path.display().to_string(),
            })
            .collect();
        Ok(Configuration {
            providers,
            ..Configuration::default()
        })
    } else if name.ends_with(".toml") || name.ends_with(".json") {
        Ok(Configuration {
            providers: read_list(path, tool)?,
            ..Configuration::default()
        })
    } else {
        Err(InputError::new(
            "cannot tell what this is; expected a configuration directory, a *.lock.hcl file, \
             or a *.toml / *.json provider list",
        )
        .in_file(path))
    }
}

/// Parses a `--provider SOURCE[@CONSTRAINT]` value.
pub fn parse_provider_arg(arg: &str, tool: Tool) -> Result<Wanted, InputError> {
    let (source, constraint) = match arg.split_once('@') {
        Some((s, c)) => (s.trim(), c),
        None => (arg.trim(), ""),
    };
    let bad = |e: &dyn std::fmt::Display| InputError::new(e).input(format!("--provider {arg:?}"));
    let addr = ProviderAddr::parse_in(source, tool.default_registry()).map_err(|e| bad(&e))?;
    let constraints = Constraints::parse(constraint).map_err(|e| bad(&e))?;
    Ok(Wanted {
        addr,
        constraints,
        locked: None,
        from: "--provider".into(),
    })
}

/// Parses a `--module SOURCE[@CONSTRAINT]` value (`[hostname/]namespace/name/system`).
pub fn parse_module_arg(arg: &str, tool: Tool) -> Result<WantedModule, InputError> {
    let (source, constraint) = match arg.split_once('@') {
        Some((s, c)) => (s.trim(), c),
        None => (arg.trim(), ""),
    };
    let bad = |e: &dyn std::fmt::Display| InputError::new(e).input(format!("--module {arg:?}"));
    let addr = ModuleAddr::parse_in(source, tool.default_registry()).map_err(|e| bad(&e))?;
    let constraints = Constraints::parse(constraint).map_err(|e| bad(&e))?;
    Ok(WantedModule {
        addr,
        constraints,
        installed: None,
        from: "--module".into(),
    })
}

/// Reads every input, in order, then the `--provider` and `--module` arguments.
pub fn read_all(
    paths: &[PathBuf],
    providers: &[String],
    modules: &[String],
    tool: Tool,
) -> Result<Configuration, InputError> {
    let mut out = Configuration::default();
    for p in paths {
        let read = read_input(p, tool)?;
        out.providers.extend(read.providers);
        out.modules.extend(read.modules);
        out.git.extend(read.git);
    }
    for p in providers {
        out.providers.push(parse_provider_arg(p, tool)?);
    }
    for m in modules {
        out.modules.push(parse_module_arg(m, tool)?);
    }
    Ok(out)
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ListFile {
    Table { providers: Vec<ListEntry> },
    Bare(Vec<ListEntry>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListEntry {
    source: String,
    #[serde(default)]
    versions: Option<OneOrMany>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

fn read_list(path: &Path, tool: Tool) -> Result<Vec<Wanted>, InputError> {
    let text = read_text(path)?;
    let unreadable = |e: &dyn std::fmt::Display, expected: &str| {
        let e = e.to_string();
        InputError::new(format!("{}; expected {expected}", e.trim_end())).in_file(path)
    };
    let list: ListFile = if path.extension().is_some_and(|e| e == "toml") {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct TomlList {
            providers: Vec<ListEntry>,
        }
        let parsed: TomlList = toml::from_str(&text)
            .map_err(|e| unreadable(&e, "[[providers]] tables with source and versions"))?;
        ListFile::Table {
            providers: parsed.providers,
        }
    } else {
        serde_json::from_str(&text)
            .map_err(|e| unreadable(&e, r#"{"providers": [{"source": ..., "versions": ...}]}"#))?
    };
    let entries = match list {
        ListFile::Table { providers } | ListFile::Bare(providers) => providers,
    };
    let mut out = Vec::new();
    for (i, entry) in entries.into_iter().enumerate() {
        let bad = |field: &str, e: &dyn std::fmt::Display| {
            InputError::new(e)
                .at(format!("providers[{i}].{field}"))
                .in_file(path)
        };
        let addr = ProviderAddr::parse_in(&entry.source, tool.default_registry())
            .map_err(|e| bad("source", &e))?;
        let constraints = match entry.versions {
            None => vec![String::new()],
            Some(OneOrMany::One(s)) => vec![s],
            Some(OneOrMany::Many(v)) if v.is_empty() => {
                return Err(bad("versions", &"empty list"));
            }
            Some(OneOrMany::Many(v)) => v,
        };
        for c in constraints {
            out.push(Wanted {
                addr: addr.clone(),
                constraints: Constraints::parse(&c).map_err(|e| bad("versions", &e))?,
                locked: None,
                from: path.display().to_string(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::address::Version;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn lists_in_toml_and_json() {
        let dir = tempfile::tempdir().unwrap();
        let toml_path = dir.path().join("providers.toml");
        std::fs::write(
            &toml_path,
            "[[providers]]\nsource = \"acme/foo\"\nversions = [\"~> 1.0\", \"0.9.0\"]\n\n[[providers]]\nsource = \"example.com/x/y\"\n",
        )
        .unwrap();
        let got = read_input(&toml_path, Tool::Terraform).unwrap().providers;
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].constraints.to_string(), "0.9.0");
        assert_eq!(got[2].addr.to_string(), "example.com/x/y");
        assert!(got[2].constraints.is_empty());

        let json_path = dir.path().join("providers.json");
        std::fs::write(
            &json_path,
            r#"[{"source": "acme/foo", "versions": ">= 1"}]"#,
        )
        .unwrap();
        assert_eq!(
            read_input(&json_path, Tool::Terraform)
                .unwrap()
                .providers
                .len(),
            1
        );

        std::fs::write(
            &json_path,
            r#"{"providers": [{"source": "acme/foo", "version": "1"}]}"#,
        )
        .unwrap();
        let e = read_input(&json_path, Tool::Terraform)
            .unwrap_err()
            .to_string();
        assert!(e.contains("providers.json"), "{e}");

        std::fs::write(&toml_path, "[[providers]]\nsource = \"acme//foo\"\n").unwrap();
        let e = read_input(&toml_path, Tool::Terraform)
            .unwrap_err()
            .to_string();
        assert!(e.contains("providers[0].source"), "{e}");
    }

    #[test]
    fn lock_files_pin_versions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".terraform.lock.hcl");
        std::fs::write(
            &path,
            "provider \"registry.terraform.io/acme/foo\" {\n  version     = \"1.1.0\"\n  constraints = \"~> 1.0\"\n  hashes = [\n    \"zh:00\",\n  ]\n}\n",
        )
        .unwrap();
        let got = read_input(&path, Tool::Terraform).unwrap().providers;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].locked, Some(v("1.1.0")));
        assert_eq!(got[0].constraints.to_string(), "~> 1.0");
    }

    #[test]
    fn provider_arguments() {
        let w = parse_provider_arg("acme/foo@~> 1.2", Tool::Terraform).unwrap();
        assert_eq!(w.addr.to_string(), "registry.terraform.io/acme/foo");
        assert!(w.constraints.allows(&v("1.9.0")));
        assert!(
            parse_provider_arg("acme/foo", Tool::Terraform)
                .unwrap()
                .constraints
                .is_empty()
        );
        assert!(parse_provider_arg("acme@1", Tool::Terraform).is_err());
        assert!(parse_provider_arg("acme/foo@>>1", Tool::Terraform).is_err());
        assert!(read_input(Path::new("/nonexistent/x.lock.hcl"), Tool::Terraform).is_err());
    }
}
