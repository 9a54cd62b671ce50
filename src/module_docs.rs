//! What a module package says about itself, for people: its README, inputs, outputs,
//! resources, required providers and module calls, and the same for each of its submodules
//! (`modules/*`) and examples (`examples/*`), read from the stored, verified package.
//!
//! [`extract`] reads a package (the deterministic `.tar.gz` provender stores) once: only the
//! `.tf` files and READMEs of the module's own directory, of `modules/<name>/` and of
//! `examples/<name>/` are kept, each within [`DocLimits`], every byte taken from the inflated
//! stream counted ([`crate::tarball::Inflated`]). HCL is parsed by `hcl-rs`; a file that cannot
//! be read or parsed is named in its module's `problems` and the rest is still shown. The README
//! is rendered by [`readme::render`] into HTML that loads nothing and runs nothing.
//!
//! The result is plain data ([`ModuleDocs`]), serialised beside the package and shown by the
//! pages and the JSON API; [`EXTRACTOR`] changes whenever what is extracted changes, so stored
//! documentation made by an older extractor is made again.

pub mod readme;

use std::collections::BTreeMap;
use std::io::Read;

use serde::{Deserialize, Serialize};

/// The version of what [`extract`] produces: stored documentation of another version is made
/// again from the package.
pub const EXTRACTOR: u32 = 1;

/// Bounds on reading a package for its documentation.
#[derive(Debug, Clone, Copy)]
pub struct DocLimits {
    /// Inflated bytes read from the package in all (headers, padding and skipped files too).
    pub max_stream: u64,
    /// Entries read.
    pub max_entries: u64,
    /// One `.tf` file or README; a larger one is named in `problems` and skipped.
    pub max_file: u64,
    /// The files kept in all; files past it are named in `problems` and skipped.
    pub max_kept: u64,
    /// Submodules and examples shown (each kind).
    pub max_modules: usize,
}

impl Default for DocLimits {
    fn default() -> Self {
        DocLimits {
            max_stream: 1 << 30,
            max_entries: 100_000,
            max_file: 1 << 20,
            max_kept: 16 << 20,
            max_modules: 200,
        }
    }
}

/// A package that could not be read at all (a file in it that cannot be is a problem of its
/// module instead).
#[derive(Debug, thiserror::Error)]
pub enum DocsError {
    #[error("the package is not a readable .tar.gz: {0}")]
    Unreadable(String),
    #[error("the package holds more than {0} entries")]
    TooManyEntries(u64),
    #[error("the package inflates to more than {0} bytes")]
    TooLarge(u64),
}

/// The documentation of one module version.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModuleDocs {
    /// [`EXTRACTOR`] when these were made.
    pub extractor: u32,
    /// The module itself (the package's root, or its `//subdir`).
    pub root: ModuleDoc,
    /// `modules/<name>`, by name.
    pub submodules: Vec<ModuleDoc>,
    /// `examples/<name>`, by name.
    pub examples: Vec<ModuleDoc>,
}

/// One module's documentation: the root module, a submodule or an example.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModuleDoc {
    /// Its directory in the module (`""` for the root, `modules/vpc`, `examples/simple`).
    pub path: String,
    pub readme: Option<readme::Readme>,
    pub inputs: Vec<Input>,
    pub outputs: Vec<Output>,
    /// Managed resources (`resource` blocks).
    pub resources: Vec<Resource>,
    /// Data sources (`data` blocks).
    pub data_sources: Vec<Resource>,
    pub required_providers: Vec<RequiredProvider>,
    /// `terraform { required_version = ... }`.
    pub required_version: Option<String>,
    pub module_calls: Vec<ModuleCall>,
    /// What could not be read, by file.
    pub problems: Vec<Problem>,
}

/// A `variable` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Input {
    pub name: String,
    /// The type constraint as written (`list(string)`), if any.
    #[serde(rename = "type")]
    pub type_: Option<String>,
    /// The default as written, if any.
    pub default: Option<String>,
    pub description: Option<String>,
    /// No default: a caller must set it.
    pub required: bool,
    pub sensitive: bool,
    /// The file it is declared in.
    pub file: String,
}

/// An `output` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Output {
    pub name: String,
    pub description: Option<String>,
    pub sensitive: bool,
    pub file: String,
}

/// A `resource` or `data` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    #[serde(rename = "type")]
    pub type_: String,
    pub name: String,
    pub file: String,
}

/// An entry of `required_providers`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequiredProvider {
    /// The local name (`aws`).
    pub name: String,
    /// The source address as written (`hashicorp/aws`); `None` for the legacy form.
    pub source: Option<String>,
    /// The version constraint.
    pub version: Option<String>,
}

/// A `module` block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModuleCall {
    pub name: String,
    pub source: Option<String>,
    pub version: Option<String>,
    pub file: String,
}

/// Something that could not be read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    /// The file, relative to the module's root.
    pub file: String,
    pub message: String,
}

impl ModuleDocs {
    /// Every module of the package: the root, then submodules, then examples.
    pub fn all(&self) -> impl Iterator<Item = &ModuleDoc> {
        std::iter::once(&self.root)
            .chain(&self.submodules)
            .chain(&self.examples)
    }

    /// The words a search looks in: README text, inputs' and outputs' names and descriptions,
    /// of the root module and its submodules, lowercased, at most `cap` bytes.
    pub fn search_text(&self, cap: usize) -> String {
        let mut text = String::new();
        let mut push = |s: &str| {
            if text.len() < cap {
                text.push_str(&s.to_lowercase());
                text.push('\n');
            }
        };
        for module in std::iter::once(&self.root).chain(&self.submodules) {
            for input in &module.inputs {
                push(&input.name);
                push(input.description.as_deref().unwrap_or_default());
            }
            for output in &module.outputs {
                push(&output.name);
                push(output.description.as_deref().unwrap_or_default());
            }
            if let Some(readme) = &module.readme {
                push(&readme.text);
            }
        }
        let mut end = text.len().min(cap);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text
    }
}

/// Which module of the package a file belongs to, and its name there; `None` for files no
/// documentation shows.
fn place(path: &str) -> Option<(String, &str)> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    match parts.as_slice() {
        [file] => Some((String::new(), file)),
        [kind @ ("modules" | "examples"), name, file] => Some((format!("{kind}/{name}"), file)),
        _ => None,
    }
}

fn is_readme(file: &str) -> bool {
    let lower = file.to_ascii_lowercase();
    matches!(lower.as_str(), "readme.md" | "readme" | "readme.markdown")
}

/// What a file is, for the documentation.
enum Wanted {
    Terraform,
    /// Terraform's JSON syntax: named, not read.
    TerraformJson,
    Readme,
}

fn wanted(file: &str) -> Option<Wanted> {
    if file.ends_with(".tf.json") {
        Some(Wanted::TerraformJson)
    } else if file.ends_with(".tf") {
        Some(Wanted::Terraform)
    } else if is_readme(file) {
        Some(Wanted::Readme)
    } else {
        None
    }
}

/// The files of one module kept for reading.
#[derive(Default)]
struct Gathered {
    tf: BTreeMap<String, Vec<u8>>,
    readme: Option<(String, Vec<u8>)>,
    problems: Vec<Problem>,
}

/// Reads a module package (`.tar.gz`) into its documentation. `subdir` is the package's
/// directory the module lives in (`//subdir`), if any.
pub fn extract(
    package: impl Read,
    subdir: Option<&str>,
    limits: DocLimits,
) -> Result<ModuleDocs, DocsError> {
    let inflated =
        crate::tarball::Inflated::new(flate2::read::GzDecoder::new(package), limits.max_stream);
    let mut archive = tar::Archive::new(inflated);
    let prefix = subdir
        .map(|s| format!("{}/", s.trim_matches('/')))
        .filter(|s| s != "/");
    let mut modules: BTreeMap<String, Gathered> = BTreeMap::new();
    let mut kept = 0u64;
    let members = crate::tarball::members(&mut archive).map_err(unreadable)?;
    for (count, member) in members.enumerate() {
        if count as u64 >= limits.max_entries {
            return Err(DocsError::TooManyEntries(limits.max_entries));
        }
        let mut member = member.map_err(|e| match e.problem {
            crate::tarball::TarProblem::TooLarge(limit) => DocsError::TooLarge(limit),
            _ => unreadable(e),
        })?;
        if member.kind() != tar::EntryType::Regular {
            continue;
        }
        let name = member.name();
        let name = name.trim_start_matches("./");
        let inside = match &prefix {
            Some(prefix) => match name.strip_prefix(prefix.as_str()) {
                Some(rest) => rest,
                None => continue,
            },
            None => name,
        };
        let Some((module, file)) = place(inside) else {
            continue;
        };
        let Some(kind) = wanted(file) else { continue };
        let rel = inside.to_string();
        let gathered = modules.entry(module).or_default();
        let problem = |message: String| Problem {
            file: rel.clone(),
            message,
        };
        if let Wanted::TerraformJson = kind {
            gathered.problems.push(problem(
                "files in Terraform's JSON syntax are not shown".into(),
            ));
            continue;
        }
        let size = member.body.header().size().unwrap_or(u64::MAX);
        if size > limits.max_file {
            gathered.problems.push(problem(format!(
                "not shown: {size} bytes, more than the {} a file may have here",
                limits.max_file
            )));
            continue;
        }
        if kept + size > limits.max_kept {
            gathered.problems.push(problem(format!(
                "not shown: the package's files shown here already reach {} bytes",
                limits.max_kept
            )));
            continue;
        }
        let mut body = Vec::with_capacity(size as usize);
        if let Err(e) = (&mut member.body)
            .take(limits.max_file)
            .read_to_end(&mut body)
        {
            return Err(match crate::tarball::too_large(&e) {
                Some(limit) => DocsError::TooLarge(limit),
                None => DocsError::Unreadable(format!("{rel}: {e}")),
            });
        }
        kept += body.len() as u64;
        match kind {
            Wanted::Readme => {
                // `README.md` wins over a plain `README`.
                let better = gathered
                    .readme
                    .as_ref()
                    .is_none_or(|(have, _)| !have.to_ascii_lowercase().ends_with(".md"));
                if better {
                    gathered.readme = Some((rel, body));
                }
            }
            Wanted::Terraform => {
                gathered.tf.insert(rel, body);
            }
            Wanted::TerraformJson => unreachable!("skipped above"),
        }
    }
    let mut docs = ModuleDocs {
        extractor: EXTRACTOR,
        ..ModuleDocs::default()
    };
    for (path, gathered) in modules {
        if !path.is_empty() && gathered.tf.is_empty() && gathered.readme.is_none() {
            continue;
        }
        let doc = read_module(&path, gathered);
        match path.split('/').next() {
            Some("modules") if docs.submodules.len() < limits.max_modules => {
                docs.submodules.push(doc)
            }
            Some("examples") if docs.examples.len() < limits.max_modules => docs.examples.push(doc),
            Some("modules" | "examples") => {}
            _ => docs.root = doc,
        }
    }
    Ok(docs)
}

fn unreadable(e: impl std::fmt::Display) -> DocsError {
    DocsError::Unreadable(e.to_string())
}

/// One module's documentation from its files.
fn read_module(path: &str, gathered: Gathered) -> ModuleDoc {
    let mut doc = ModuleDoc {
        path: path.to_string(),
        problems: gathered.problems,
        ..ModuleDoc::default()
    };
    if let Some((file, bytes)) = gathered.readme {
        match String::from_utf8(bytes) {
            Ok(text) => doc.readme = Some(readme::render(&text, path)),
            Err(_) => doc.problems.push(Problem {
                file,
                message: "not UTF-8 text".into(),
            }),
        }
    }
    for (file, bytes) in gathered.tf {
        let shown = file.rsplit('/').next().unwrap_or(&file).to_string();
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(_) => {
                doc.problems.push(Problem {
                    file,
                    message: "not UTF-8 text".into(),
                });
                continue;
            }
        };
        match hcl::parse(&text) {
            Ok(body) => read_body(&body, &shown, &mut doc),
            Err(e) => doc.problems.push(Problem {
                file,
                message: format!("not valid HCL: {}", first_line(&e.to_string())),
            }),
        }
    }
    doc.inputs
        .sort_by(|a, b| (!a.required, &a.name).cmp(&(!b.required, &b.name)));
    doc.outputs.sort_by(|a, b| a.name.cmp(&b.name));
    doc.resources
        .sort_by(|a, b| (&a.type_, &a.name).cmp(&(&b.type_, &b.name)));
    doc.data_sources
        .sort_by(|a, b| (&a.type_, &a.name).cmp(&(&b.type_, &b.name)));
    doc.module_calls.sort_by(|a, b| a.name.cmp(&b.name));
    doc.required_providers.sort_by(|a, b| a.name.cmp(&b.name));
    doc.required_providers.dedup_by(|a, b| a.name == b.name);
    doc
}

fn first_line(s: &str) -> String {
    let line = s.lines().find(|l| !l.trim().is_empty()).unwrap_or(s);
    line.chars().take(300).collect()
}

fn label(block: &hcl::Block, n: usize) -> Option<String> {
    block.labels().get(n).map(|l| l.as_str().to_string())
}

fn attribute<'a>(body: &'a hcl::Body, key: &str) -> Option<&'a hcl::Expression> {
    body.attributes().find(|a| a.key() == key).map(|a| a.expr())
}

/// An expression as written (formatted by `hcl-rs`).
fn written(expr: &hcl::Expression) -> String {
    match expr {
        hcl::Expression::String(s) => format!("{s:?}"),
        _ => hcl::format::to_string(expr).unwrap_or_else(|_| "(not shown)".into()),
    }
}

/// A string as a person reads it: a literal's or a heredoc's text.
fn text(expr: &hcl::Expression) -> String {
    match expr {
        hcl::Expression::String(s) => s.clone(),
        hcl::Expression::TemplateExpr(t) => match t.as_ref() {
            hcl::TemplateExpr::QuotedString(s) => s.clone(),
            hcl::TemplateExpr::Heredoc(h) => dedent(&h.template),
        },
        other => written(other),
    }
}

/// A heredoc's lines without their common indentation (what `<<-` means).
fn dedent(s: &str) -> String {
    let indent = s
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    s.lines()
        .map(|l| l.get(indent..).unwrap_or(l.trim_start()))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

fn is_true(expr: Option<&hcl::Expression>) -> bool {
    matches!(expr, Some(hcl::Expression::Bool(true)))
}

fn literal(expr: Option<&hcl::Expression>) -> Option<String> {
    expr.map(text)
}

fn read_body(body: &hcl::Body, file: &str, doc: &mut ModuleDoc) {
    for block in body.blocks() {
        let inner = block.body();
        match block.identifier() {
            "variable" => {
                let Some(name) = label(block, 0) else {
                    continue;
                };
                let default = attribute(inner, "default");
                doc.inputs.push(Input {
                    name,
                    type_: attribute(inner, "type").map(written),
                    default: default.map(written),
                    description: literal(attribute(inner, "description")),
                    required: default.is_none(),
                    sensitive: is_true(attribute(inner, "sensitive")),
                    file: file.to_string(),
                });
            }
            "output" => {
                let Some(name) = label(block, 0) else {
                    continue;
                };
                doc.outputs.push(Output {
                    name,
                    description: literal(attribute(inner, "description")),
                    sensitive: is_true(attribute(inner, "sensitive")),
                    file: file.to_string(),
                });
            }
            kind @ ("resource" | "data") => {
                let (Some(type_), Some(name)) = (label(block, 0), label(block, 1)) else {
                    continue;
                };
                let resource = Resource {
                    type_,
                    name,
                    file: file.to_string(),
                };
                match kind {
                    "resource" => doc.resources.push(resource),
                    _ => doc.data_sources.push(resource),
                }
            }
            "module" => {
                let Some(name) = label(block, 0) else {
                    continue;
                };
                doc.module_calls.push(ModuleCall {
                    name,
                    source: literal(attribute(inner, "source")),
                    version: literal(attribute(inner, "version")),
                    file: file.to_string(),
                });
            }
            "terraform" => {
                if let Some(v) = attribute(inner, "required_version") {
                    doc.required_version = Some(text(v));
                }
                for req in inner
                    .blocks()
                    .filter(|b| b.identifier() == "required_providers")
                {
                    for entry in req.body().attributes() {
                        doc.required_providers
                            .push(requirement(entry.key(), entry.expr()));
                    }
                }
            }
            _ => {}
        }
    }
}

fn requirement(name: &str, expr: &hcl::Expression) -> RequiredProvider {
    let mut out = RequiredProvider {
        name: name.to_string(),
        source: None,
        version: None,
    };
    match expr {
        hcl::Expression::Object(object) => {
            for (key, value) in object {
                let key = match key {
                    hcl::ObjectKey::Identifier(id) => id.as_str().to_string(),
                    hcl::ObjectKey::Expression(hcl::Expression::String(s)) => s.clone(),
                    other => other.to_string(),
                };
                match key.as_str() {
                    "source" => out.source = Some(text(value)),
                    "version" => out.version = Some(text(value)),
                    _ => {}
                }
            }
        }
        // Terraform 0.12's `aws = "~> 3.0"`.
        other => out.version = Some(text(other)),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.tar.gz` of `files` (name, body), as the package writer lays them out.
    pub(crate) fn tar_gz(files: &[(&str, &[u8])]) -> Vec<u8> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut tar = tar::Builder::new(gz);
        for (name, body) in files {
            let mut header = tar::Header::new_ustar();
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(0o644);
            header.set_size(body.len() as u64);
            tar.append_data(&mut header, name, *body).unwrap();
        }
        tar.into_inner().unwrap().finish().unwrap()
    }

    const VARIABLES: &str = r#"
variable "name" {
  type        = string
  description = "The VPC's name."
}

variable "cidr" {
  type    = string
  default = "10.0.0.0/16"
  description = <<-EOT
    The address range,
    in CIDR notation.
  EOT
}

variable "tags" {
  type      = map(string)
  default   = {}
  sensitive = true
}
"#;

    const MAIN: &str = r#"
terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0, < 6.0"
    }
    random = "~> 3.0"
  }
}

resource "aws_vpc" "this" {
  cidr_block = var.cidr
}

data "aws_region" "current" {}

module "subnets" {
  source  = "./modules/subnets"
}

output "vpc_id" {
  value       = aws_vpc.this.id
  description = "The VPC's ID."
}

output "secret" {
  value     = "x"
  sensitive = true
}
"#;

    #[test]
    fn reads_inputs_outputs_resources_providers_and_calls() {
        let package = tar_gz(&[
            ("README.md", b"# VPC\n\nMakes a **VPC**.\n"),
            ("main.tf", MAIN.as_bytes()),
            ("variables.tf", VARIABLES.as_bytes()),
            (
                "modules/subnets/main.tf",
                b"variable \"count_per_az\" {\n  default = 1\n}\n",
            ),
            (
                "examples/simple/main.tf",
                b"module \"vpc\" {\n  source = \"../..\"\n  name = \"x\"\n}\n",
            ),
            ("examples/simple/README.md", b"Simple use."),
            ("modules/empty/notes.txt", b"nothing"),
            ("deep/nested/x.tf", b"variable \"hidden\" {}"),
        ]);
        let docs = extract(package.as_slice(), None, DocLimits::default()).unwrap();
        let root = &docs.root;
        assert_eq!(root.path, "");
        assert!(root.problems.is_empty(), "{:?}", root.problems);
        let names: Vec<_> = root.inputs.iter().map(|i| i.name.as_str()).collect();
        // Required inputs first.
        assert_eq!(names, ["name", "cidr", "tags"]);
        let cidr = &root.inputs[1];
        assert_eq!(cidr.type_.as_deref(), Some("string"));
        assert_eq!(cidr.default.as_deref(), Some("\"10.0.0.0/16\""));
        assert_eq!(
            cidr.description.as_deref(),
            Some("The address range,\nin CIDR notation.")
        );
        assert!(!cidr.required && root.inputs[0].required);
        assert!(root.inputs[2].sensitive);
        assert_eq!(root.inputs[2].type_.as_deref(), Some("map(string)"));
        assert_eq!(root.outputs.len(), 2);
        assert_eq!(
            root.outputs[1].description.as_deref(),
            Some("The VPC's ID.")
        );
        assert!(root.outputs[0].sensitive);
        assert_eq!(root.resources[0].type_, "aws_vpc");
        assert_eq!(root.data_sources[0].type_, "aws_region");
        assert_eq!(root.required_version.as_deref(), Some(">= 1.5"));
        assert_eq!(
            root.required_providers,
            [
                RequiredProvider {
                    name: "aws".into(),
                    source: Some("hashicorp/aws".into()),
                    version: Some(">= 5.0, < 6.0".into()),
                },
                RequiredProvider {
                    name: "random".into(),
                    source: None,
                    version: Some("~> 3.0".into()),
                },
            ]
        );
        assert_eq!(
            root.module_calls[0].source.as_deref(),
            Some("./modules/subnets")
        );
        assert!(
            root.readme
                .as_ref()
                .unwrap()
                .html
                .contains("<strong>VPC</strong>")
        );
        let subs: Vec<_> = docs.submodules.iter().map(|m| m.path.as_str()).collect();
        assert_eq!(subs, ["modules/subnets"]);
        assert_eq!(docs.submodules[0].inputs[0].name, "count_per_az");
        assert_eq!(docs.examples[0].path, "examples/simple");
        assert_eq!(docs.examples[0].module_calls[0].name, "vpc");
        assert!(docs.examples[0].readme.is_some());
        let text = docs.search_text(1 << 20);
        assert!(text.contains("in cidr notation") && text.contains("count_per_az"));
    }

    #[test]
    fn a_broken_file_is_named_and_the_rest_still_shown() {
        let package = tar_gz(&[
            ("ok.tf", b"variable \"fine\" {}\n"),
            ("broken.tf", b"variable \"bad\" {\n  type = \n"),
            ("latin1.tf", b"variable \"x\" { description = \"caf\xe9\" }"),
            ("main.tf.json", b"{}"),
        ]);
        let docs = extract(package.as_slice(), None, DocLimits::default()).unwrap();
        assert_eq!(docs.root.inputs.len(), 1);
        let files: Vec<_> = docs.root.problems.iter().map(|p| p.file.as_str()).collect();
        assert_eq!(files, ["main.tf.json", "broken.tf", "latin1.tf"]);
        assert!(docs.root.problems[1].message.starts_with("not valid HCL"));
    }

    #[test]
    fn a_subdirectory_package_reads_only_its_module() {
        let package = tar_gz(&[
            ("README.md", b"the repository"),
            ("other/main.tf", b"variable \"other\" {}"),
            ("net/main.tf", b"variable \"net\" {}"),
            ("net/modules/a/main.tf", b"variable \"a\" {}"),
        ]);
        let docs = extract(package.as_slice(), Some("net"), DocLimits::default()).unwrap();
        assert_eq!(docs.root.inputs[0].name, "net");
        assert!(docs.root.readme.is_none());
        assert_eq!(docs.submodules[0].path, "modules/a");
    }

    #[test]
    fn limits_hold() {
        let big = vec![b' '; 2048];
        let package = tar_gz(&[("a.tf", &big), ("b.tf", b"variable \"b\" {}")]);
        let limits = DocLimits {
            max_file: 1024,
            ..DocLimits::default()
        };
        let docs = extract(package.as_slice(), None, limits).unwrap();
        assert_eq!(docs.root.inputs.len(), 1);
        assert!(docs.root.problems[0].message.contains("2048 bytes"));

        let many: Vec<(String, Vec<u8>)> = (0..20).map(|i| (format!("f{i}.txt"), vec![])).collect();
        let refs: Vec<(&str, &[u8])> = many
            .iter()
            .map(|(n, b)| (n.as_str(), b.as_slice()))
            .collect();
        let limits = DocLimits {
            max_entries: 10,
            ..DocLimits::default()
        };
        assert!(matches!(
            extract(tar_gz(&refs).as_slice(), None, limits),
            Err(DocsError::TooManyEntries(10))
        ));
        let limits = DocLimits {
            max_stream: 4096,
            ..DocLimits::default()
        };
        assert!(matches!(
            extract(tar_gz(&refs).as_slice(), None, limits),
            Err(DocsError::TooLarge(_))
        ));
        assert!(matches!(
            extract(&b"not gzip"[..], None, DocLimits::default()),
            Err(DocsError::Unreadable(_))
        ));
    }
}
