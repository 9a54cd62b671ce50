//! Where the providers to work on come from: lock files, Terraform configurations, TOML/JSON
//! provider lists and `--provider` arguments, all read into [`Wanted`] entries.
//!
//! - A `.terraform.lock.hcl` (any file ending in `.lock.hcl`) pins exact versions.
//! - A directory is a Terraform configuration: every `required_providers` block in its `*.tf`
//!   (HCL) and `*.tf.json` files gives a source (default `hashicorp/<name>`) and a version
//!   constraint; declarations of the same provider combine. Only that directory is read, not
//!   the modules it calls.
//! - A `.toml` or `.json` file lists `providers`, each with `source` and optional `versions`
//!   (one constraint string, or several to pick one version per string).
//! - `--provider SOURCE[@CONSTRAINT]`, e.g. `hashicorp/aws@~> 5.0`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::address::{ProviderAddr, Version};
use crate::constraints::Constraints;

/// One provider to work on, and which version(s) of it.
#[derive(Debug, Clone)]
pub struct Wanted {
    pub addr: ProviderAddr,
    /// The constraint to resolve (for a lock file: the one it records, informational).
    pub constraints: Constraints,
    /// The exact version a lock file pins.
    pub locked: Option<Version>,
    /// Where this came from, for messages (`path/main.tf`, `--provider`).
    pub from: String,
}

/// Reads one positional input (file or directory).
pub fn read_input(path: &Path) -> Result<Vec<Wanted>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    if meta.is_dir() {
        read_configuration(path)
    } else if name.ends_with(".lock.hcl") {
        let text = read_text(path)?;
        let lock = super::lockfile::LockFile::parse(&text)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(lock
            .providers
            .into_values()
            .map(|p| Wanted {
                addr: p.addr,
                constraints: p.constraints,
                locked: Some(p.version),
                from: path.display().to_string(),
            })
            .collect())
    } else if name.ends_with(".toml") || name.ends_with(".json") {
        read_list(path)
    } else {
        Err(format!(
            "{}: cannot tell what this is; expected a configuration directory, a *.lock.hcl file, \
             or a *.toml / *.json provider list",
            path.display()
        ))
    }
}

/// Parses a `--provider SOURCE[@CONSTRAINT]` value.
pub fn parse_provider_arg(arg: &str) -> Result<Wanted, String> {
    let (source, constraint) = match arg.split_once('@') {
        Some((s, c)) => (s.trim(), c),
        None => (arg.trim(), ""),
    };
    let addr = ProviderAddr::parse(source).map_err(|e| format!("--provider {arg:?}: {e}"))?;
    let constraints =
        Constraints::parse(constraint).map_err(|e| format!("--provider {arg:?}: {e}"))?;
    Ok(Wanted {
        addr,
        constraints,
        locked: None,
        from: "--provider".into(),
    })
}

/// Reads every input, in order.
pub fn read_all(paths: &[PathBuf], providers: &[String]) -> Result<Vec<Wanted>, String> {
    let mut out = Vec::new();
    for p in paths {
        out.extend(read_input(p)?);
    }
    for p in providers {
        out.push(parse_provider_arg(p)?);
    }
    Ok(out)
}

fn read_text(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
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

fn read_list(path: &Path) -> Result<Vec<Wanted>, String> {
    let text = read_text(path)?;
    let shown = path.display();
    let list: ListFile = if path.extension().is_some_and(|e| e == "toml") {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct TomlList {
            providers: Vec<ListEntry>,
        }
        let parsed: TomlList = toml::from_str(&text).map_err(|e| {
            format!(
                "{shown}: {}; expected [[providers]] tables with source and versions",
                e.to_string().trim_end()
            )
        })?;
        ListFile::Table {
            providers: parsed.providers,
        }
    } else {
        serde_json::from_str(&text).map_err(|e| {
            format!(
                "{shown}: {e}; expected {{\"providers\": [{{\"source\": ..., \"versions\": ...}}]}}"
            )
        })?
    };
    let entries = match list {
        ListFile::Table { providers } | ListFile::Bare(providers) => providers,
    };
    let mut out = Vec::new();
    for (i, entry) in entries.into_iter().enumerate() {
        let at = format!("{shown}: providers[{i}]");
        let addr = ProviderAddr::parse(&entry.source).map_err(|e| format!("{at}.source: {e}"))?;
        let constraints = match entry.versions {
            None => vec![String::new()],
            Some(OneOrMany::One(s)) => vec![s],
            Some(OneOrMany::Many(v)) if v.is_empty() => {
                return Err(format!("{at}.versions: empty list"));
            }
            Some(OneOrMany::Many(v)) => v,
        };
        for c in constraints {
            out.push(Wanted {
                addr: addr.clone(),
                constraints: Constraints::parse(&c).map_err(|e| format!("{at}.versions: {e}"))?,
                locked: None,
                from: shown.to_string(),
            });
        }
    }
    Ok(out)
}

/// Reads the `required_providers` of every `*.tf` and `*.tf.json` file in `dir`.
pub fn read_configuration(dir: &Path) -> Result<Vec<Wanted>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().map(|n| n.to_string_lossy().to_string());
            n.is_some_and(|n| n.ends_with(".tf") || n.ends_with(".tf.json")) && p.is_file()
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!(
            "{}: no *.tf or *.tf.json files; is this a Terraform configuration?",
            dir.display()
        ));
    }
    // Keyed by address so several declarations of one provider combine.
    let mut found: BTreeMap<ProviderAddr, Wanted> = BTreeMap::new();
    for file in files {
        let text = read_text(&file)?;
        let declared = if file.to_string_lossy().ends_with(".json") {
            required_providers_json(&text)
        } else {
            required_providers_hcl(&text)
        }
        .map_err(|e| format!("{}: {e}", file.display()))?;
        for (name, source, version) in declared {
            let at = format!("{}: required_providers.{name}", file.display());
            let source = source.unwrap_or_else(|| format!("hashicorp/{name}"));
            let addr = ProviderAddr::parse(&source).map_err(|e| format!("{at}.source: {e}"))?;
            let constraints = Constraints::parse(version.as_deref().unwrap_or(""))
                .map_err(|e| format!("{at}.version: {e}"))?;
            match found.get_mut(&addr) {
                Some(w) => w.constraints.merge(&constraints),
                None => {
                    found.insert(
                        addr.clone(),
                        Wanted {
                            addr,
                            constraints,
                            locked: None,
                            from: file.display().to_string(),
                        },
                    );
                }
            }
        }
    }
    Ok(found.into_values().collect())
}

/// `(local name, source, version)` of each `required_providers` entry.
type Declared = Vec<(String, Option<String>, Option<String>)>;

fn required_providers_hcl(text: &str) -> Result<Declared, String> {
    let body = hcl::parse(text).map_err(|e| format!("not valid HCL: {e}"))?;
    let mut out = Vec::new();
    for terraform in body.blocks().filter(|b| b.identifier() == "terraform") {
        for req in terraform
            .body()
            .blocks()
            .filter(|b| b.identifier() == "required_providers")
        {
            for attr in req.body().attributes() {
                let name = attr.key().to_string();
                match attr.expr() {
                    // Terraform 0.12 style: `aws = "~> 3.0"`.
                    hcl::Expression::String(v) => out.push((name, None, Some(v.clone()))),
                    hcl::Expression::Object(obj) => {
                        let mut source = None;
                        let mut version = None;
                        for (key, value) in obj {
                            let key = match key {
                                hcl::ObjectKey::Identifier(id) => id.as_str().to_string(),
                                hcl::ObjectKey::Expression(hcl::Expression::String(s)) => s.clone(),
                                other => other.to_string(),
                            };
                            let string = |what: &str| match value {
                                hcl::Expression::String(s) => Ok(s.clone()),
                                _ => Err(format!(
                                    "required_providers.{name}.{what} must be a literal string"
                                )),
                            };
                            match key.as_str() {
                                "source" => source = Some(string("source")?),
                                "version" => version = Some(string("version")?),
                                // configuration_aliases and the like do not choose packages.
                                _ => {}
                            }
                        }
                        out.push((name, source, version));
                    }
                    _ => {
                        return Err(format!(
                            "required_providers.{name} must be an object with source and version"
                        ));
                    }
                }
            }
        }
    }
    Ok(out)
}

fn required_providers_json(text: &str) -> Result<Declared, String> {
    let doc: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let mut out = Vec::new();
    // `terraform` may be an object or an array of objects; so may `required_providers`.
    let as_list = |v: &serde_json::Value| -> Vec<serde_json::Value> {
        match v {
            serde_json::Value::Array(a) => a.clone(),
            serde_json::Value::Null => vec![],
            other => vec![other.clone()],
        }
    };
    for terraform in as_list(&doc["terraform"]) {
        for req in as_list(&terraform["required_providers"]) {
            let Some(map) = req.as_object() else {
                return Err("terraform.required_providers must be an object".into());
            };
            for (name, value) in map {
                let field = |k: &str| value.get(k).and_then(|v| v.as_str()).map(str::to_string);
                match value {
                    serde_json::Value::String(v) => out.push((name.clone(), None, Some(v.clone()))),
                    serde_json::Value::Object(_) => {
                        out.push((name.clone(), field("source"), field("version")))
                    }
                    _ => {
                        return Err(format!(
                            "required_providers.{name} must be an object with source and version"
                        ));
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn configuration_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("main.tf"),
            r#"
terraform {
  required_version = ">= 1.0"
  required_providers {
    foo  = { source = "acme/foo", version = "~> 1.0" }
    bar  = { source = "registry.terraform.io/acme/bar" }
    aws = {
      source                = "hashicorp/aws"
      version               = ">= 4.0"
      configuration_aliases = [aws.east]
    }
  }
}
resource "foo_thing" "x" { name = "${var.a}" }
"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("versions.tf.json"),
            r#"{"terraform": {"required_providers": {"aws": {"source": "hashicorp/aws", "version": "< 6.0"}, "null": "3.2.1"}}}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not terraform").unwrap();
        let got = read_input(dir.path()).unwrap();
        let show: Vec<String> = got
            .iter()
            .map(|w| format!("{} [{}]", w.addr, w.constraints))
            .collect();
        assert_eq!(
            show,
            [
                "registry.terraform.io/acme/bar []",
                "registry.terraform.io/acme/foo [~> 1.0]",
                "registry.terraform.io/hashicorp/aws [< 6.0.0, >= 4.0.0]",
                "registry.terraform.io/hashicorp/null [3.2.1]",
            ]
        );
    }

    #[test]
    fn configuration_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("bad.tf"),
            "terraform { required_providers {",
        )
        .unwrap();
        let e = read_input(dir.path()).unwrap_err();
        assert!(e.contains("bad.tf") && e.contains("HCL"), "{e}");

        std::fs::write(
            dir.path().join("bad.tf"),
            "terraform {\n required_providers {\n x = { source = \"a/b\", version = \"~>\" }\n }\n}\n",
        )
        .unwrap();
        let e = read_input(dir.path()).unwrap_err();
        assert!(
            e.contains("bad.tf") && e.contains("required_providers.x.version"),
            "{e}"
        );

        let empty = tempfile::tempdir().unwrap();
        assert!(read_input(empty.path()).unwrap_err().contains("no *.tf"));
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
        let got = read_input(&toml_path).unwrap();
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
        assert_eq!(read_input(&json_path).unwrap().len(), 1);

        std::fs::write(
            &json_path,
            r#"{"providers": [{"source": "acme/foo", "version": "1"}]}"#,
        )
        .unwrap();
        let e = read_input(&json_path).unwrap_err();
        assert!(e.contains("providers.json"), "{e}");

        std::fs::write(&toml_path, "[[providers]]\nsource = \"acme//foo\"\n").unwrap();
        let e = read_input(&toml_path).unwrap_err();
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
        let got = read_input(&path).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].locked, Some(v("1.1.0")));
        assert_eq!(got[0].constraints.to_string(), "~> 1.0");
    }

    #[test]
    fn provider_arguments() {
        let w = parse_provider_arg("acme/foo@~> 1.2").unwrap();
        assert_eq!(w.addr.to_string(), "registry.terraform.io/acme/foo");
        assert!(w.constraints.allows(&v("1.9.0")));
        assert!(
            parse_provider_arg("acme/foo")
                .unwrap()
                .constraints
                .is_empty()
        );
        assert!(parse_provider_arg("acme@1").is_err());
        assert!(parse_provider_arg("acme/foo@>>1").is_err());
        assert!(read_input(Path::new("/nonexistent/x.lock.hcl")).is_err());
    }
}
