//! The providers a Terraform configuration needs, read the way Terraform reads them.
//!
//! A configuration is a root module directory and every module it calls:
//! - **Explicit requirements**: each `required_providers` entry gives a local name, a source
//!   (default `hashicorp/<name>`) and a version constraint. Constraints on one provider from
//!   several files or modules combine.
//! - **Implied requirements**: a `resource`, `data` or `ephemeral` block (also inside `check`),
//!   or a `provider` block, uses a local name (the `provider` meta-argument's, else the type's
//!   prefix up to the first `_`). A name its module does not declare means `hashicorp/<name>`
//!   with no constraint, as in Terraform; `terraform` is built in and needs nothing.
//! - **Modules**: a call with a local source (`./` or `../`) is read from that directory,
//!   relative to the calling module. Any other source must have been installed by
//!   `terraform init` / `terraform get`: it is found through `.terraform/modules/modules.json`
//!   under the root directory, and a module missing from it is an error naming the call.
//!
//! Both `*.tf` (HCL) and `*.tf.json` files are read. Only literal strings are understood where a
//! choice of package depends on them (`source`, `version`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::inputs::{Wanted, read_text};
use crate::address::ProviderAddr;
use crate::constraints::Constraints;

/// Deepest module nesting followed (a module that calls itself would never end).
const MAX_DEPTH: usize = 64;

/// Reads the providers the configuration rooted at `root` needs, one entry per provider.
pub fn read_configuration(root: &Path) -> Result<Vec<Wanted>, String> {
    let installed = installed_modules(root)?;
    let mut found: BTreeMap<ProviderAddr, Wanted> = BTreeMap::new();
    // (module key as in modules.json, directory, how it was reached)
    let mut pending = vec![(String::new(), root.to_path_buf(), String::new())];
    while let Some((key, dir, via)) = pending.pop() {
        if key.split('.').count() > MAX_DEPTH {
            return Err(format!(
                "{}: modules nested more than {MAX_DEPTH} deep (does a module call itself?)",
                root.display()
            ));
        }
        let module = read_module(&dir).map_err(|e| format!("{via}{e}"))?;
        module.add_to(&mut found)?;
        for call in module.calls {
            let child_key = if key.is_empty() {
                call.name.clone()
            } else {
                format!("{key}.{}", call.name)
            };
            let via = format!("module.{child_key} (called in {}): ", call.file.display());
            let child_dir = if is_local(&call.source) {
                dir.join(&call.source)
            } else {
                match installed.get(&child_key) {
                    Some(d) => root.join(d),
                    None => {
                        return Err(format!(
                            "{via}source {:?} is not installed; run `terraform init` (or \
                             `terraform get`) in {} first, or name its providers with --provider",
                            call.source,
                            root.display()
                        ));
                    }
                }
            };
            pending.push((child_key, child_dir, via));
        }
    }
    Ok(found.into_values().collect())
}

fn is_local(source: &str) -> bool {
    source.starts_with("./") || source.starts_with("../")
}

/// `.terraform/modules/modules.json`: module key -> directory (relative to the root).
fn installed_modules(root: &Path) -> Result<HashMap<String, PathBuf>, String> {
    #[derive(Deserialize)]
    struct Manifest {
        #[serde(rename = "Modules", default)]
        modules: Vec<Record>,
    }
    #[derive(Deserialize)]
    struct Record {
        #[serde(rename = "Key")]
        key: String,
        #[serde(rename = "Dir")]
        dir: PathBuf,
    }
    let path = root.join(".terraform/modules/modules.json");
    if !path.is_file() {
        return Ok(HashMap::new());
    }
    let text = read_text(&path)?;
    let manifest: Manifest =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(manifest
        .modules
        .into_iter()
        .map(|m| (m.key, m.dir))
        .collect())
}

/// What one file of a module says about providers.
#[derive(Default)]
struct FileFacts {
    /// `(local name, source, version)` of each `required_providers` entry.
    declared: Vec<(String, Option<String>, Option<String>)>,
    /// Local names used by resources, data sources and provider blocks.
    used: Vec<String>,
    /// `(call name, source)` of each `module` block.
    calls: Vec<(String, String)>,
}

/// A module call, and the file it is in.
struct Call {
    name: String,
    source: String,
    file: PathBuf,
}

/// What one module directory needs.
struct Module {
    files: Vec<(PathBuf, FileFacts)>,
    calls: Vec<Call>,
}

fn read_module(dir: &Path) -> Result<Module, String> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().map(|n| n.to_string_lossy().to_string());
            n.is_some_and(|n| n.ends_with(".tf") || n.ends_with(".tf.json")) && p.is_file()
        })
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(format!(
            "{}: no *.tf or *.tf.json files; is this a Terraform configuration?",
            dir.display()
        ));
    }
    let mut files = Vec::new();
    let mut calls = Vec::new();
    for path in paths {
        let text = read_text(&path)?;
        let facts = if path.to_string_lossy().ends_with(".json") {
            facts_json(&text)
        } else {
            facts_hcl(&text)
        }
        .map_err(|e| format!("{}: {e}", path.display()))?;
        for (name, source) in &facts.calls {
            calls.push(Call {
                name: name.clone(),
                source: source.clone(),
                file: path.clone(),
            });
        }
        files.push((path, facts));
    }
    Ok(Module { files, calls })
}

impl Module {
    /// Adds this module's requirements to `found`, combining constraints per provider.
    fn add_to(&self, found: &mut BTreeMap<ProviderAddr, Wanted>) -> Result<(), String> {
        let mut local_names: HashMap<&str, ProviderAddr> = HashMap::new();
        for (file, facts) in &self.files {
            for (name, source, version) in &facts.declared {
                let at = format!("{}: required_providers.{name}", file.display());
                let source = source
                    .clone()
                    .unwrap_or_else(|| format!("hashicorp/{name}"));
                let addr = ProviderAddr::parse(&source).map_err(|e| format!("{at}.source: {e}"))?;
                let constraints = Constraints::parse(version.as_deref().unwrap_or(""))
                    .map_err(|e| format!("{at}.version: {e}"))?;
                local_names.insert(name, addr.clone());
                require(found, addr, &constraints, file);
            }
        }
        for (file, facts) in &self.files {
            for name in &facts.used {
                if name == "terraform" || local_names.contains_key(name.as_str()) {
                    continue;
                }
                let at = format!("{}: provider {name:?}", file.display());
                let addr = ProviderAddr::parse(&format!("hashicorp/{name}"))
                    .map_err(|e| format!("{at}: {e}"))?;
                require(found, addr, &Constraints::default(), file);
            }
        }
        Ok(())
    }
}

fn require(
    found: &mut BTreeMap<ProviderAddr, Wanted>,
    addr: ProviderAddr,
    constraints: &Constraints,
    file: &Path,
) {
    match found.get_mut(&addr) {
        Some(w) => w.constraints.merge(constraints),
        None => {
            found.insert(
                addr.clone(),
                Wanted {
                    addr,
                    constraints: constraints.clone(),
                    locked: None,
                    from: file.display().to_string(),
                },
            );
        }
    }
}

/// The local name a resource-like block uses: its `provider` meta-argument's, else the type's
/// prefix.
fn local_name_of_type(type_name: &str, provider: Option<&str>) -> String {
    let name = provider.unwrap_or(type_name);
    let name = name.split('.').next().unwrap_or(name);
    match provider {
        Some(_) => name.to_string(),
        None => name.split('_').next().unwrap_or(name).to_string(),
    }
}

const RESOURCE_BLOCKS: [&str; 3] = ["resource", "data", "ephemeral"];

fn facts_hcl(text: &str) -> Result<FileFacts, String> {
    let body = hcl::parse(text).map_err(|e| format!("not valid HCL: {e}"))?;
    let mut facts = FileFacts::default();
    hcl_blocks(&body, &mut facts)?;
    Ok(facts)
}

fn hcl_blocks(body: &hcl::Body, facts: &mut FileFacts) -> Result<(), String> {
    let label = |b: &hcl::Block| b.labels().first().map(|l| l.as_str().to_string());
    for block in body.blocks() {
        match block.identifier() {
            "terraform" => {
                for req in block
                    .body()
                    .blocks()
                    .filter(|b| b.identifier() == "required_providers")
                {
                    for attr in req.body().attributes() {
                        facts
                            .declared
                            .push(hcl_requirement(attr.key(), attr.expr())?);
                    }
                }
            }
            kind if RESOURCE_BLOCKS.contains(&kind) => {
                let Some(type_name) = label(block) else {
                    continue;
                };
                let provider = block
                    .body()
                    .attributes()
                    .find(|a| a.key() == "provider")
                    .and_then(|a| hcl_root_name(a.expr()));
                facts
                    .used
                    .push(local_name_of_type(&type_name, provider.as_deref()));
            }
            // `check` blocks may hold data sources.
            "check" => hcl_blocks(block.body(), facts)?,
            "provider" => facts.used.extend(label(block)),
            "module" => {
                let Some(name) = label(block) else { continue };
                let source = block.body().attributes().find(|a| a.key() == "source");
                match source.map(|a| a.expr()) {
                    Some(hcl::Expression::String(s)) => facts.calls.push((name, s.clone())),
                    _ => return Err(format!("module.{name}.source must be a literal string")),
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// `aws.east` -> `aws`.
fn hcl_root_name(expr: &hcl::Expression) -> Option<String> {
    match expr {
        hcl::Expression::Variable(v) => Some(v.as_str().to_string()),
        hcl::Expression::Traversal(t) => hcl_root_name(&t.expr),
        _ => None,
    }
}

fn hcl_requirement(
    name: &str,
    expr: &hcl::Expression,
) -> Result<(String, Option<String>, Option<String>), String> {
    let name = name.to_string();
    match expr {
        // Terraform 0.12 style: `aws = "~> 3.0"`.
        hcl::Expression::String(v) => Ok((name, None, Some(v.clone()))),
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
            Ok((name, source, version))
        }
        _ => Err(format!(
            "required_providers.{name} must be an object with source and version"
        )),
    }
}

/// In Terraform's JSON syntax a block may be an object or an array of objects.
fn as_list(v: &Value) -> Vec<&Value> {
    match v {
        Value::Array(a) => a.iter().collect(),
        Value::Null => vec![],
        other => vec![other],
    }
}

/// The `(label, body)` pairs of a labelled JSON block: `{"label": body-or-array}`.
fn labelled(v: &Value) -> Vec<(&str, &Value)> {
    let mut out = Vec::new();
    for obj in as_list(v) {
        if let Some(map) = obj.as_object() {
            for (label, body) in map {
                out.extend(as_list(body).into_iter().map(|b| (label.as_str(), b)));
            }
        }
    }
    out
}

fn facts_json(text: &str) -> Result<FileFacts, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let mut facts = FileFacts::default();
    json_blocks(&doc, &mut facts)?;
    Ok(facts)
}

fn json_blocks(doc: &Value, facts: &mut FileFacts) -> Result<(), String> {
    for terraform in as_list(&doc["terraform"]) {
        for req in as_list(&terraform["required_providers"]) {
            let Some(map) = req.as_object() else {
                return Err("terraform.required_providers must be an object".into());
            };
            for (name, value) in map {
                let field = |k: &str| value.get(k).and_then(Value::as_str).map(str::to_string);
                match value {
                    Value::String(v) => facts.declared.push((name.clone(), None, Some(v.clone()))),
                    Value::Object(_) => {
                        facts
                            .declared
                            .push((name.clone(), field("source"), field("version")))
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
    for kind in RESOURCE_BLOCKS {
        // {"resource": {"<type>": {"<name>": {...}}}}
        for (type_name, named) in labelled(&doc[kind]) {
            for (_, body) in labelled(named) {
                let provider = body.get("provider").and_then(Value::as_str);
                facts.used.push(local_name_of_type(type_name, provider));
            }
        }
    }
    for (_, check) in labelled(&doc["check"]) {
        json_blocks(check, facts)?;
    }
    for (name, _) in labelled(&doc["provider"]) {
        facts.used.push(name.to_string());
    }
    for (name, body) in labelled(&doc["module"]) {
        match body.get("source").and_then(Value::as_str) {
            Some(s) => facts.calls.push((name.to_string(), s.to_string())),
            None => return Err(format!("module.{name}.source must be a literal string")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn shown(root: &Path) -> Vec<String> {
        read_configuration(root)
            .unwrap()
            .iter()
            .map(|w| format!("{} [{}]", w.addr, w.constraints))
            .collect()
    }

    #[test]
    fn one_directory() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "main.tf",
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
        );
        write(
            dir.path(),
            "versions.tf.json",
            r#"{"terraform": {"required_providers": {"aws": {"source": "hashicorp/aws", "version": "< 6.0"}, "null": "3.2.1"}}}"#,
        );
        write(dir.path(), "notes.txt", "not terraform");
        assert_eq!(
            shown(dir.path()),
            [
                "registry.terraform.io/acme/bar []",
                "registry.terraform.io/acme/foo [~> 1.0]",
                "registry.terraform.io/hashicorp/aws [< 6.0.0, >= 4.0.0]",
                "registry.terraform.io/hashicorp/null [3.2.1]",
            ]
        );
    }

    #[test]
    fn providers_implied_by_use() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "main.tf",
            r#"
terraform {
  required_providers {
    widget = { source = "acme/widget" }
  }
}
resource "widget_box" "a" {}
resource "random_pet" "b" {}
resource "thing_one" "c" { provider = special.east }
data "terraform_remote_state" "d" {}
ephemeral "tls_private_key" "e" {}
provider "google" { region = "x" }
check "health" {
  data "http_get" "f" {}
}
"#,
        );
        write(
            dir.path(),
            "more.tf.json",
            r#"{"resource": {"local_file": {"g": {"provider": "archive.x"}}}, "provider": [{"kubernetes": {}}]}"#,
        );
        assert_eq!(
            shown(dir.path()),
            [
                "registry.terraform.io/acme/widget []",
                "registry.terraform.io/hashicorp/archive []",
                "registry.terraform.io/hashicorp/google []",
                "registry.terraform.io/hashicorp/http []",
                "registry.terraform.io/hashicorp/kubernetes []",
                "registry.terraform.io/hashicorp/random []",
                "registry.terraform.io/hashicorp/special []",
                "registry.terraform.io/hashicorp/tls []",
            ]
        );
    }

    #[test]
    fn local_and_installed_modules() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(
            root,
            "main.tf",
            r#"
terraform {
  required_providers {
    foo = { source = "acme/foo", version = ">= 1.0" }
  }
}
module "net" { source = "./modules/net" }
module "vpc" {
  source  = "example/vpc/aws"
  version = "1.2.3"
}
"#,
        );
        write(
            root,
            "modules/net/main.tf",
            r#"
terraform {
  required_providers {
    foo = { source = "acme/foo", version = "< 2.0" }
    b   = { source = "acme/bar", version = "2.2.0" }
  }
}
resource "b_thing" "x" {}
module "inner" { source = "../inner" }
"#,
        );
        write(
            root,
            "modules/inner/main.tf",
            r#"resource "null_resource" "x" {}"#,
        );

        let missing = read_configuration(root).unwrap_err();
        assert!(
            missing.contains("module.vpc") && missing.contains("terraform init"),
            "{missing}"
        );

        write(
            root,
            ".terraform/modules/modules.json",
            r#"{"Modules":[{"Key":"","Source":"","Dir":"."},
                {"Key":"net","Source":"./modules/net","Dir":"modules/net"},
                {"Key":"vpc","Source":"registry.terraform.io/example/vpc/aws","Version":"1.2.3","Dir":".terraform/modules/vpc"}]}"#,
        );
        write(
            root,
            ".terraform/modules/vpc/main.tf.json",
            r#"{"terraform": [{"required_providers": [{"aws": {"source": "hashicorp/aws", "version": "~> 5.0"}}]}],
                "module": {"sub": {"source": "./sub"}}}"#,
        );
        write(
            root,
            ".terraform/modules/vpc/sub/main.tf",
            r#"data "aws_region" "x" {}"#,
        );
        assert_eq!(
            shown(root),
            [
                "registry.terraform.io/acme/bar [2.2.0]",
                "registry.terraform.io/acme/foo [< 2.0.0, >= 1.0.0]",
                "registry.terraform.io/hashicorp/aws [~> 5.0]",
                "registry.terraform.io/hashicorp/null []",
            ]
        );
    }

    #[test]
    fn errors_name_the_file_or_the_module() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "bad.tf", "terraform { required_providers {");
        let e = read_configuration(dir.path()).unwrap_err();
        assert!(e.contains("bad.tf") && e.contains("HCL"), "{e}");

        write(
            dir.path(),
            "bad.tf",
            "terraform {\n required_providers {\n x = { source = \"a/b\", version = \"~>\" }\n }\n}\n",
        );
        let e = read_configuration(dir.path()).unwrap_err();
        assert!(
            e.contains("bad.tf") && e.contains("required_providers.x.version"),
            "{e}"
        );

        write(
            dir.path(),
            "bad.tf",
            "module \"gone\" { source = \"./nowhere\" }\n",
        );
        let e = read_configuration(dir.path()).unwrap_err();
        assert!(e.contains("module.gone") && e.contains("nowhere"), "{e}");

        write(dir.path(), "bad.tf", "module \"me\" { source = \"./\" }\n");
        let e = read_configuration(dir.path()).unwrap_err();
        assert!(e.contains("nested more than"), "{e}");

        let empty = tempfile::tempdir().unwrap();
        let e = read_configuration(empty.path()).unwrap_err();
        assert!(e.contains("no *.tf"), "{e}");
    }
}
