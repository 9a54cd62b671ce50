//! The providers a Terraform configuration needs, read the way Terraform reads them.
//!
//! A configuration is a root module directory and every module it calls. In each module:
//! - **Explicit requirements**: the module's one `required_providers` block gives local names,
//!   sources (default `hashicorp/<name>`) and version constraints; an entry in an override file
//!   (`override.tf`, `*_override.tf`, and their `.tf.json` forms) replaces the entry of the same
//!   name. A `version` argument in a `provider` block (deprecated, still honoured) adds to the
//!   constraint.
//! - **Implied requirements**: a `resource`, `data` or `ephemeral` block (also inside `check`),
//!   an `import` block, or a `provider` block uses a local name (the `provider` meta-argument's,
//!   else the resource type's prefix up to the first `_`). A name the module does not declare
//!   means `hashicorp/<name>` with no constraint, as in Terraform; `terraform` is built in.
//! - **Modules**: a call with a local source (`./`, `../`) is read from that directory, relative
//!   to the calling module. A registry module (`namespace/name/system`, with or without a
//!   hostname) is reported in [`Configuration::modules`] with its version constraint (and the
//!   installed version, when `terraform init` installed it); an installed one is read in place,
//!   one not installed is left to the caller (`seed` fetches it through the mirror and reads
//!   it). Any other source must have been installed by `terraform init` or `terraform get`: it is
//!   found through `modules/modules.json` in the data directory (`.terraform`, or
//!   `TF_DATA_DIR`). A call missing from it, or (for registry modules) whose source or version
//!   constraint no longer matches what was installed, is an error naming the call, as in
//!   Terraform.
//!
//! A module from a **package** (installed from a registry or another remote source, or a
//! package the mirror fetched) may not reach outside that package, as in Terraform: a local
//! source leaving it (`../../..`), or an installation directory in the package's own
//! `modules.json` that lies outside it (an absolute `Dir`), is an error naming the call. Only
//! the root configuration's own local modules may lie anywhere.
//!
//! Constraints on one provider combine across modules. Files named `*.tf` (HCL) and `*.tf.json`
//! are read, except hidden ones (`.name`). Only literal strings are understood where a choice of
//! package depends on them (`source`, `version`).
//!
//! For OpenTofu ([`Tool::OpenTofu`]) the same rules hold with OpenTofu's two differences: short
//! sources (`hashicorp/aws`, and registry module addresses) mean `registry.opentofu.org`, and
//! `*.tofu` / `*.tofu.json` files are read too, a `.tofu` file taking the place of the `.tf`
//! file of the same name (`main.tofu` hides `main.tf`, `main.tofu.json` hides `main.tf.json`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::wanted::{InputError, Wanted, read_text};
use crate::address::{ModuleAddr, ProviderAddr, Version};
use crate::config::Tool;
use crate::constraints::Constraints;

/// Deepest module nesting followed (a module that calls itself would never end).
const MAX_DEPTH: usize = 64;

/// What a configuration needs: providers (one entry per provider) and registry modules (one
/// entry per call).
#[derive(Debug, Default)]
pub struct Configuration {
    pub providers: Vec<Wanted>,
    pub modules: Vec<WantedModule>,
    /// Direct git sources (`git::https://...`, `github.com/...`), one entry per call.
    pub git: Vec<WantedGit>,
}

/// A git repository a configuration calls a module from directly.
#[derive(Debug, Clone)]
pub struct WantedGit {
    pub repo: crate::address::GitRepo,
    /// The `ref` the source names, if any.
    pub reference: Option<String>,
    /// Where the call is, for messages.
    pub from: String,
}

/// The repository and `ref` of a direct git source as go-getter reads it: `git::https://...`
/// (a `//subdir` and a query after the path), or GitHub's shorthand `github.com/org/repo`.
pub fn git_source(source: &str) -> Option<(crate::address::GitRepo, Option<String>)> {
    let (url, shorthand) = match source.strip_prefix("git::") {
        Some(rest) => (rest.strip_prefix("https://")?.to_string(), false),
        None if source.starts_with("github.com/") => (source.to_string(), true),
        None => return None,
    };
    let (path, query) = match url.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (url.as_str(), None),
    };
    // `//` after the host separates the repository from a subdirectory in it.
    let (host, rest) = path.split_once('/')?;
    let repo_path = rest.split("//").next()?;
    let repo_path = if shorthand {
        // go-getter's GitHub detector takes the first two parts and adds `.git`.
        let mut parts = repo_path.splitn(3, '/');
        let (org, name) = (parts.next()?, parts.next()?);
        format!("{org}/{}.git", name.trim_end_matches(".git"))
    } else {
        repo_path.to_string()
    };
    let repo = crate::address::GitRepo::new(host, &repo_path).ok()?;
    let reference = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("ref="))
        .map(str::to_string);
    Some((repo, reference))
}

/// A registry module a configuration calls.
#[derive(Debug, Clone)]
pub struct WantedModule {
    pub addr: ModuleAddr,
    pub constraints: Constraints,
    /// The version `terraform init` installed, when it did; such a module's providers are
    /// already in [`Configuration::providers`].
    pub installed: Option<Version>,
    /// Where the call is, for messages.
    pub from: String,
}

/// Reads what the configuration rooted at `root` needs. Installed modules are looked up in
/// Terraform's data directory: `TF_DATA_DIR`, else `.terraform`, relative to `root`.
pub fn read_configuration(root: &Path, tool: Tool) -> Result<Configuration, InputError> {
    let data_dir = std::env::var_os("TF_DATA_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from(".terraform"), PathBuf::from);
    read_configuration_with(root, &data_dir, None, tool)
}

/// [`read_configuration`] with the data directory given. With `package`, the configuration is
/// (inside) a module package, and nothing it names may lie outside that directory.
pub fn read_configuration_with(
    root: &Path,
    data_dir: &Path,
    package: Option<&Path>,
    tool: Tool,
) -> Result<Configuration, InputError> {
    let data_dir = root.join(data_dir);
    let installed = installed_modules(&data_dir)?;
    let mut found: BTreeMap<ProviderAddr, Wanted> = BTreeMap::new();
    let mut modules = Vec::new();
    let mut git = Vec::new();
    // (module key as in modules.json, directory, the package it is in, the call that reached it)
    let mut pending: Vec<(String, PathBuf, Option<PathBuf>, Option<String>)> = vec![(
        String::new(),
        root.to_path_buf(),
        package.map(Path::to_path_buf),
        None,
    )];
    while let Some((key, dir, within, via)) = pending.pop() {
        if key.split('.').count() > MAX_DEPTH {
            return Err(InputError::new(format!(
                "modules nested more than {MAX_DEPTH} deep (does a module call itself?)"
            ))
            .in_file(root));
        }
        let reached = |e: InputError| match &via {
            Some(call) => e.via(call),
            None => e,
        };
        let module = read_module(&dir, key.is_empty(), tool).map_err(reached)?;
        module.add_to(&mut found, tool).map_err(reached)?;
        let calls = module
            .files
            .iter()
            .flat_map(|f| f.facts.calls.iter().map(move |call| (call, &f.path)));
        for (call, file) in calls {
            let child_key = if key.is_empty() {
                call.name.clone()
            } else {
                format!("{key}.{}", call.name)
            };
            let via = format!("module.{child_key} (called in {})", file.display());
            let version = || {
                Constraints::parse(call.version.as_deref().unwrap_or(""))
                    .map_err(|e| InputError::new(e).at("version").via(&via))
            };
            let registry = registry_module(&call.source, tool)
                .and_then(|a| ModuleAddr::parse_in(&a, tool.default_registry()).ok());
            let leaves = |what: &str, path: &Path, package: &Path| {
                InputError::new(format!(
                    "{what} {} leaves the module package {}",
                    path.display(),
                    package.display()
                ))
                .via(&via)
            };
            if let Some((repo, reference)) = git_source(&call.source) {
                git.push(WantedGit {
                    repo,
                    reference,
                    from: file.display().to_string(),
                });
            }
            let (child_dir, child_package) = match local_path(&call.source) {
                Some(relative) => {
                    let child = dir.join(&relative);
                    if let Some(p) = &within
                        && !inside(p, &child)
                    {
                        return Err(leaves("local source", &relative, p));
                    }
                    (child, within.clone())
                }
                None if registry.is_some() && !installed.contains_key(&child_key) => {
                    let constraints = version()?;
                    modules.push(WantedModule {
                        addr: registry.expect("checked above"),
                        constraints,
                        installed: None,
                        from: file.display().to_string(),
                    });
                    continue;
                }
                None => {
                    let record = installed.get(&child_key).ok_or_else(|| {
                        InputError::new(format!(
                            "source {:?} is not installed; run `terraform init` (or \
                             `terraform get`) in {} first, or name its providers with --provider",
                            call.source,
                            root.display()
                        ))
                        .via(&via)
                    })?;
                    record.check(call, tool).map_err(|mut e| {
                        e.problem.push_str("; run `terraform init` again");
                        e.via(&via)
                    })?;
                    if let Some(addr) = registry {
                        modules.push(WantedModule {
                            addr,
                            constraints: version()?,
                            installed: record
                                .version
                                .as_deref()
                                .and_then(|v| Version::parse_lenient(v).ok()),
                            from: file.display().to_string(),
                        });
                    }
                    // Installed modules are where the configuration's own manifest says; in a
                    // package, that manifest came with the package and may not point out of it.
                    let child = root.join(&record.dir);
                    if let Some(p) = package
                        && (record.dir.is_absolute() || !inside(p, &child))
                    {
                        return Err(leaves("installed directory", &record.dir, p));
                    }
                    let child_package = package_of(&data_dir, &child);
                    (child, Some(child_package))
                }
            };
            pending.push((child_key, child_dir, child_package, Some(via)));
        }
    }
    Ok(Configuration {
        providers: found.into_values().collect(),
        modules,
        git,
    })
}

/// Whether `path` lies within `base`, once `..` and symbolic links are resolved (paths that do
/// not exist are resolved as far as they do).
fn inside(base: &Path, path: &Path) -> bool {
    resolved(path).starts_with(resolved(base))
}

/// `path` made absolute, its existing part canonical and the rest lexically normalised.
fn resolved(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    let base = loop {
        if let Ok(canonical) = existing.canonicalize() {
            break canonical;
        }
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            // Only `..` or nothing left: what remains cannot be resolved further.
            _ => break std::env::current_dir().unwrap_or_default().join(&existing),
        }
    };
    let mut out = base;
    for part in rest.iter().rev() {
        match part.to_str() {
            Some("..") => {
                out.pop();
            }
            Some(".") => {}
            _ => out.push(part),
        }
    }
    out
}

/// The package an installed module's directory belongs to: the directory under
/// `<data dir>/modules/` that holds it (a module in a package's subdirectory shares its
/// package), else the directory itself.
fn package_of(data_dir: &Path, module_dir: &Path) -> PathBuf {
    let modules = resolved(&data_dir.join("modules"));
    let dir = resolved(module_dir);
    match dir
        .strip_prefix(&modules)
        .ok()
        .and_then(|rel| rel.components().next())
    {
        Some(first) => modules.join(first),
        None => dir,
    }
}

/// The directory a local module source names, relative to the calling module.
fn local_path(source: &str) -> Option<PathBuf> {
    ["./", "../", ".\\", "..\\"]
        .iter()
        .any(|prefix| source.starts_with(prefix))
        .then(|| PathBuf::from(source.replace('\\', "/")))
}

/// One module installed by `terraform init`, as its manifest records it.
#[derive(Deserialize)]
struct Installed {
    #[serde(rename = "Key")]
    key: String,
    #[serde(rename = "Source", default)]
    source: String,
    #[serde(rename = "Version", default)]
    version: Option<String>,
    #[serde(rename = "Dir")]
    dir: PathBuf,
}

impl Installed {
    /// Whether this installation still answers `call`. Checked for registry modules, whose
    /// recorded source is the call's in its long form and whose version must meet the call's
    /// constraint; other sources are recorded in a normalised form this does not reproduce.
    fn check(&self, call: &CallFacts, tool: Tool) -> Result<(), InputError> {
        let Some(address) = registry_module(&call.source, tool) else {
            return Ok(());
        };
        if self.source != address {
            return Err(InputError::new(format!(
                "source {:?} was {:?} when the module was installed",
                call.source, self.source
            )));
        }
        if let (Some(wanted), Some(installed)) = (&call.version, &self.version) {
            let constraints = Constraints::parse(wanted)
                .map_err(|e| InputError::new(e).at(format!("version {wanted:?}")))?;
            let version = Version::parse(installed)
                .map_err(|e| InputError::new(e).at(format!("installed version {installed:?}")))?;
            if !constraints.allows(&version) {
                return Err(InputError::new(format!(
                    "version {wanted:?} does not allow the installed version {installed}"
                )));
            }
        }
        Ok(())
    }
}

/// `ns/name/system` or `host/ns/name/system` in the long form Terraform records; `None` for
/// sources that are not registry addresses.
fn registry_module(source: &str, tool: Tool) -> Option<String> {
    if source.contains("::") || source.contains("://") {
        return None;
    }
    let parts: Vec<&str> = source.split('/').collect();
    let plain = |p: &&str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    match parts.as_slice() {
        [_, _, _] if parts.iter().all(plain) => {
            Some(format!("{}/{source}", tool.default_registry()))
        }
        [host, rest @ ..] if rest.len() == 3 && host.contains('.') && rest.iter().all(plain) => {
            Some(source.to_ascii_lowercase())
        }
        _ => None,
    }
}

/// `modules/modules.json` in the data directory: module key -> installation.
fn installed_modules(data_dir: &Path) -> Result<HashMap<String, Installed>, InputError> {
    #[derive(Deserialize)]
    struct Manifest {
        #[serde(rename = "Modules", default)]
        modules: Vec<Installed>,
    }
    let path = data_dir.join("modules/modules.json");
    if !path.is_file() {
        return Ok(HashMap::new());
    }
    let text = read_text(&path)?;
    let manifest: Manifest =
        serde_json::from_str(&text).map_err(|e| InputError::new(e).in_file(&path))?;
    Ok(manifest
        .modules
        .into_iter()
        .map(|m| (m.key.clone(), m))
        .collect())
}

/// `(local name, source, version)` of a `required_providers` entry.
type Requirement = (String, Option<String>, Option<String>);

/// What one file of a module says about providers.
#[derive(Default)]
struct FileFacts {
    /// `required_providers` blocks: each a list of entries.
    required: Vec<Vec<Requirement>>,
    /// Local names used by resources, data sources, imports and provider blocks.
    used: Vec<String>,
    /// `(local name, constraint)` from `version` arguments of `provider` blocks.
    provider_versions: Vec<(String, String)>,
    /// `module` blocks.
    calls: Vec<CallFacts>,
}

/// A `module` block as written (a module call).
struct CallFacts {
    name: String,
    source: String,
    version: Option<String>,
}

/// One file of a module.
struct ModuleFile {
    path: PathBuf,
    facts: FileFacts,
    /// An override file (`override.tf`, `*_override.tf`, ...).
    overrides: bool,
}

/// What one module directory needs.
struct Module {
    files: Vec<ModuleFile>,
}

/// Whether the tool reads `name` as a configuration file: its stem and extension, and whether
/// it is an override file.
fn configuration_file(name: &str, tool: Tool) -> Option<(&str, &'static str, bool)> {
    if name.starts_with('.') {
        return None;
    }
    let extensions: &[&'static str] = match tool {
        Tool::Terraform => &[".tf.json", ".tf"],
        Tool::OpenTofu => &[".tofu.json", ".tofu", ".tf.json", ".tf"],
    };
    let (stem, ext) = extensions
        .iter()
        .find_map(|ext| name.strip_suffix(ext).map(|stem| (stem, *ext)))?;
    Some((stem, ext, stem == "override" || stem.ends_with("_override")))
}

/// Reads a module directory; the root module must hold configuration files, a child module may
/// hold none.
fn read_module(dir: &Path, root: bool, tool: Tool) -> Result<Module, InputError> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| InputError::new(e).in_file(dir))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let mut paths: Vec<(PathBuf, bool)> = names
        .iter()
        .filter_map(|name| {
            let (stem, ext, overrides) = configuration_file(name, tool)?;
            // OpenTofu: `x.tofu` takes the place of `x.tf`, `x.tofu.json` of `x.tf.json`.
            let replaced = ext
                .strip_prefix(".tf")
                .is_some_and(|rest| names.contains(&format!("{stem}.tofu{rest}")))
                && tool == Tool::OpenTofu;
            (!replaced).then(|| (dir.join(name), overrides))
        })
        .collect();
    paths.sort();
    if root && paths.is_empty() {
        let expected = match tool {
            Tool::Terraform => "*.tf or *.tf.json files; is this a Terraform configuration?",
            Tool::OpenTofu => {
                "*.tf, *.tofu, *.tf.json or *.tofu.json files; is this an OpenTofu \
                               configuration?"
            }
        };
        return Err(InputError::new(format!("no {expected}")).in_file(dir));
    }
    let mut files = Vec::new();
    for (path, overrides) in paths {
        let text = read_text(&path)?;
        let facts = if path.to_string_lossy().ends_with(".json") {
            facts_json(&text)
        } else {
            facts_hcl(&text)
        }
        .map_err(|e| e.in_file(&path))?;
        files.push(ModuleFile {
            path,
            facts,
            overrides,
        });
    }
    Ok(Module { files })
}

impl Module {
    /// Adds this module's requirements to `found`, combining constraints per provider.
    fn add_to(
        &self,
        found: &mut BTreeMap<ProviderAddr, Wanted>,
        tool: Tool,
    ) -> Result<(), InputError> {
        let registry = tool.default_registry();
        // Local name -> (source, version, file), primary files first, then overrides.
        let mut declared: BTreeMap<&str, (&Option<String>, &Option<String>, &Path)> =
            BTreeMap::new();
        let mut block_in: Option<&Path> = None;
        for file in self.files.iter().filter(|f| !f.overrides) {
            for block in &file.facts.required {
                if let Some(first) = block_in {
                    return Err(InputError::new(format!(
                        "a second required_providers block (the first is in {}); \
                         Terraform allows one per module",
                        first.display()
                    ))
                    .in_file(&file.path));
                }
                block_in = Some(&file.path);
                for (name, source, version) in block {
                    declared.insert(name, (source, version, &file.path));
                }
            }
        }
        for file in self.files.iter().filter(|f| f.overrides) {
            for (name, source, version) in file.facts.required.iter().flatten() {
                declared.insert(name, (source, version, &file.path));
            }
        }
        let mut local_names: HashMap<&str, ProviderAddr> = HashMap::new();
        for (name, (source, version, file)) in declared {
            let bad = |field: &str, e: &dyn std::fmt::Display| {
                InputError::new(e)
                    .at(format!("required_providers.{name}.{field}"))
                    .in_file(file)
            };
            let source = source
                .clone()
                .unwrap_or_else(|| format!("hashicorp/{name}"));
            let addr = ProviderAddr::parse_in(&source, registry).map_err(|e| bad("source", &e))?;
            let constraints = Constraints::parse(version.as_deref().unwrap_or(""))
                .map_err(|e| bad("version", &e))?;
            local_names.insert(name, addr.clone());
            require(found, addr, &constraints, file);
        }
        let implied = |name: &str, file: &Path| match local_names.get(name) {
            Some(addr) => Ok(addr.clone()),
            None => ProviderAddr::parse_in(&format!("hashicorp/{name}"), registry).map_err(|e| {
                InputError::new(e)
                    .at(format!("provider {name:?}"))
                    .in_file(file)
            }),
        };
        for file in &self.files {
            for (name, version) in &file.facts.provider_versions {
                let addr = implied(name, &file.path)?;
                let constraints = Constraints::parse(version).map_err(|e| {
                    InputError::new(e)
                        .at(format!("provider {name:?}.version"))
                        .in_file(&file.path)
                })?;
                require(found, addr, &constraints, &file.path);
            }
            for name in &file.facts.used {
                if name == "terraform" || local_names.contains_key(name.as_str()) {
                    continue;
                }
                require(
                    found,
                    implied(name, &file.path)?,
                    &Constraints::default(),
                    &file.path,
                );
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

fn facts_hcl(text: &str) -> Result<FileFacts, InputError> {
    let body = hcl::parse(text).map_err(|e| InputError::new(format!("not valid HCL: {e}")))?;
    let mut facts = FileFacts::default();
    hcl_blocks(&body, &mut facts)?;
    Ok(facts)
}

fn hcl_blocks(body: &hcl::Body, facts: &mut FileFacts) -> Result<(), InputError> {
    let label = |b: &hcl::Block| b.labels().first().map(|l| l.as_str().to_string());
    let attr = |b: &hcl::Block, key: &str| {
        b.body()
            .attributes()
            .find(|a| a.key() == key)
            .map(|a| a.expr().clone())
    };
    let literal = |b: &hcl::Block, key: &str| match attr(b, key) {
        Some(hcl::Expression::String(s)) => Some(s),
        _ => None,
    };
    for block in body.blocks() {
        match block.identifier() {
            "terraform" => {
                for req in block
                    .body()
                    .blocks()
                    .filter(|b| b.identifier() == "required_providers")
                {
                    let entries = req
                        .body()
                        .attributes()
                        .map(|a| hcl_requirement(a.key(), a.expr()))
                        .collect::<Result<_, _>>()?;
                    facts.required.push(entries);
                }
            }
            kind if RESOURCE_BLOCKS.contains(&kind) => {
                let Some(type_name) = label(block) else {
                    continue;
                };
                let provider = attr(block, "provider").and_then(|e| hcl_root_name(&e));
                facts
                    .used
                    .push(local_name_of_type(&type_name, provider.as_deref()));
            }
            // `check` blocks may hold data sources.
            "check" => hcl_blocks(block.body(), facts)?,
            // `import { to = aws_instance.web ... }`: the resource's provider, even when the
            // resource is yet to be generated.
            "import" => {
                let to = attr(block, "to").and_then(|e| hcl_root_name(&e));
                let provider = attr(block, "provider").and_then(|e| hcl_root_name(&e));
                if let Some(type_name) = to.filter(|t| t != "module") {
                    facts
                        .used
                        .push(local_name_of_type(&type_name, provider.as_deref()));
                }
            }
            "provider" => {
                let Some(name) = label(block) else { continue };
                if let Some(version) = literal(block, "version") {
                    facts.provider_versions.push((name.clone(), version));
                }
                facts.used.push(name);
            }
            "module" => {
                let Some(name) = label(block) else { continue };
                let Some(source) = literal(block, "source") else {
                    return Err(not_literal(&format!("module.{name}.source")));
                };
                let version = literal(block, "version");
                facts.calls.push(CallFacts {
                    name,
                    source,
                    version,
                });
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

fn hcl_requirement(name: &str, expr: &hcl::Expression) -> Result<Requirement, InputError> {
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
                    _ => Err(not_literal(&format!("required_providers.{name}.{what}"))),
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
        _ => Err(not_a_requirement(&name)),
    }
}

fn not_literal(place: &str) -> InputError {
    InputError::new(format!("{place} must be a literal string"))
}

fn not_a_requirement(name: &str) -> InputError {
    InputError::new(format!(
        "required_providers.{name} must be an object with source and version"
    ))
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

fn facts_json(text: &str) -> Result<FileFacts, InputError> {
    let doc: Value =
        serde_json::from_str(text).map_err(|e| InputError::new(format!("not valid JSON: {e}")))?;
    let mut facts = FileFacts::default();
    json_blocks(&doc, &mut facts)?;
    Ok(facts)
}

fn json_blocks(doc: &Value, facts: &mut FileFacts) -> Result<(), InputError> {
    for terraform in as_list(&doc["terraform"]) {
        for req in as_list(&terraform["required_providers"]) {
            let Some(map) = req.as_object() else {
                return Err(InputError::new(
                    "terraform.required_providers must be an object",
                ));
            };
            let mut entries = Vec::new();
            for (name, value) in map {
                let field = |k: &str| value.get(k).and_then(Value::as_str).map(str::to_string);
                match value {
                    Value::String(v) => entries.push((name.clone(), None, Some(v.clone()))),
                    Value::Object(_) => {
                        entries.push((name.clone(), field("source"), field("version")))
                    }
                    _ => return Err(not_a_requirement(name)),
                }
            }
            facts.required.push(entries);
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
    // {"import": [{"to": "aws_instance.web", "provider": "aws.east"}]}
    for import in as_list(&doc["import"]) {
        let to = import.get("to").and_then(Value::as_str).unwrap_or_default();
        let type_name = to.split(['.', '[']).next().unwrap_or_default();
        if !type_name.is_empty() && type_name != "module" {
            let provider = import.get("provider").and_then(Value::as_str);
            facts.used.push(local_name_of_type(type_name, provider));
        }
    }
    for (name, body) in labelled(&doc["provider"]) {
        if let Some(version) = body.get("version").and_then(Value::as_str) {
            facts
                .provider_versions
                .push((name.to_string(), version.to_string()));
        }
        facts.used.push(name.to_string());
    }
    for (name, body) in labelled(&doc["module"]) {
        let Some(source) = body.get("source").and_then(Value::as_str) else {
            return Err(not_literal(&format!("module.{name}.source")));
        };
        facts.calls.push(CallFacts {
            name: name.to_string(),
            source: source.to_string(),
            version: body
                .get("version")
                .and_then(Value::as_str)
                .map(str::to_string),
        });
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
        shown_for(root, Tool::Terraform)
    }

    fn shown_for(root: &Path, tool: Tool) -> Vec<String> {
        read_configuration(root, tool)
            .unwrap()
            .providers
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
        // An override file replaces entries and may add some; hidden files are not read.
        write(
            dir.path(),
            "versions_override.tf.json",
            r#"{"terraform": {"required_providers": {"aws": {"source": "hashicorp/aws", "version": "< 6.0"}, "null": "3.2.1"}}}"#,
        );
        write(dir.path(), ".scratch.tf", "resource \"hidden_x\" \"y\" {}");
        write(dir.path(), "notes.txt", "not terraform");
        assert_eq!(
            shown(dir.path()),
            [
                "registry.terraform.io/acme/bar []",
                "registry.terraform.io/acme/foo [~> 1.0]",
                "registry.terraform.io/hashicorp/aws [< 6.0.0]",
                "registry.terraform.io/hashicorp/null [3.2.1]",
            ]
        );
    }

    #[test]
    fn opentofu_reads_tofu_files_in_place_of_their_tf_twins() {
        let dir = tempfile::tempdir().unwrap();
        let required = |name: &str, source: &str, version: &str| {
            format!(
                "terraform {{\n  required_providers {{\n    {name} = {{ source = \"{source}\", version = \"{version}\" }}\n  }}\n}}\n"
            )
        };
        // main.tofu hides main.tf; versions.tofu.json hides versions.tf.json; extra.tf has no
        // twin and is read by both; only.tofu is read by OpenTofu alone.
        write(
            dir.path(),
            "main.tf",
            &required("aws", "hashicorp/aws", "~> 4.0"),
        );
        write(
            dir.path(),
            "main.tofu",
            &required("aws", "hashicorp/aws", "~> 5.0"),
        );
        write(
            dir.path(),
            "versions.tf.json",
            r#"{"resource": {"random_id": {"a": {}}}}"#,
        );
        write(
            dir.path(),
            "versions.tofu.json",
            r#"{"resource": {"null_resource": {"a": {}}}}"#,
        );
        write(dir.path(), "extra.tf", "resource \"tls_key\" \"k\" {}\n");
        write(dir.path(), "only.tofu", "data \"http\" \"h\" {}\n");
        assert_eq!(
            shown_for(dir.path(), Tool::Terraform),
            [
                "registry.terraform.io/hashicorp/aws [~> 4.0]",
                "registry.terraform.io/hashicorp/random []",
                "registry.terraform.io/hashicorp/tls []",
            ]
        );
        assert_eq!(
            shown_for(dir.path(), Tool::OpenTofu),
            [
                "registry.opentofu.org/hashicorp/aws [~> 5.0]",
                "registry.opentofu.org/hashicorp/http []",
                "registry.opentofu.org/hashicorp/null []",
                "registry.opentofu.org/hashicorp/tls []",
            ]
        );
        // An override file has its own twin rule, and a directory of .tofu files alone is an
        // OpenTofu configuration, not a Terraform one.
        write(
            dir.path(),
            "x_override.tf",
            &required("aws", "hashicorp/aws", "4.1.0"),
        );
        write(
            dir.path(),
            "x_override.tofu",
            &required("aws", "hashicorp/aws", "5.1.0"),
        );
        assert_eq!(
            shown_for(dir.path(), Tool::OpenTofu)[0],
            "registry.opentofu.org/hashicorp/aws [5.1.0]"
        );
        let tofu_only = tempfile::tempdir().unwrap();
        write(
            tofu_only.path(),
            "main.tofu",
            &required("aws", "hashicorp/aws", "~> 5.0"),
        );
        let e = read_configuration(tofu_only.path(), Tool::Terraform)
            .unwrap_err()
            .to_string();
        assert!(e.contains("Terraform configuration"), "{e}");
        assert_eq!(shown_for(tofu_only.path(), Tool::OpenTofu).len(), 1);
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
provider "widget" { version = ">= 2.0" }
import {
  to = dns_a_record_set.www
  id = "www"
}
import {
  to       = module.elsewhere.aws_instance.x
  id       = "i-1"
}
check "health" {
  data "http_get" "f" {}
}
"#,
        );
        write(
            dir.path(),
            "more.tf.json",
            r#"{"resource": {"local_file": {"g": {"provider": "archive.x"}}}, "provider": [{"kubernetes": {"version": "~> 2.0"}}],
                "import": [{"to": "vault_mount.m[\"a\"]", "id": "a"}]}"#,
        );
        assert_eq!(
            shown(dir.path()),
            [
                "registry.terraform.io/acme/widget [>= 2.0.0]",
                "registry.terraform.io/hashicorp/archive []",
                "registry.terraform.io/hashicorp/dns []",
                "registry.terraform.io/hashicorp/google []",
                "registry.terraform.io/hashicorp/http []",
                "registry.terraform.io/hashicorp/kubernetes [~> 2.0]",
                "registry.terraform.io/hashicorp/random []",
                "registry.terraform.io/hashicorp/special []",
                "registry.terraform.io/hashicorp/tls []",
                "registry.terraform.io/hashicorp/vault []",
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

        // Not installed: the registry module is reported, to be fetched and read by the caller;
        // the rest is read as usual.
        let fresh = read_configuration(root, Tool::Terraform).unwrap();
        assert_eq!(fresh.providers.len(), 3, "{fresh:?}");
        let [vpc] = fresh.modules.as_slice() else {
            panic!("one registry module: {fresh:?}");
        };
        assert_eq!(
            vpc.addr.to_string(),
            "registry.terraform.io/example/vpc/aws"
        );
        assert_eq!(vpc.constraints.to_string(), "1.2.3");
        assert!(vpc.installed.is_none());
        // A source that is not a registry address must be installed, as Terraform requires.
        let main = std::fs::read_to_string(root.join("main.tf")).unwrap();
        write(
            root,
            "main.tf",
            &main.replace("example/vpc/aws", "git::https://example.com/vpc.git"),
        );
        let missing = read_configuration(root, Tool::Terraform)
            .unwrap_err()
            .to_string();
        assert!(
            missing.contains("module.vpc") && missing.contains("terraform init"),
            "{missing}"
        );
        write(root, "main.tf", &main);

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

        // Edited since `terraform init`: Terraform refuses, and so does this.
        let main = std::fs::read_to_string(root.join("main.tf")).unwrap();
        write(root, "main.tf", &main.replace("\"1.2.3\"", "\"~> 2.0\""));
        let e = read_configuration(root, Tool::Terraform)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("module.vpc") && e.contains("does not allow the installed version 1.2.3"),
            "{e}"
        );
        write(
            root,
            "main.tf",
            &main.replace("example/vpc/aws", "other/vpc/aws"),
        );
        let e = read_configuration(root, Tool::Terraform)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("was \"registry.terraform.io/example/vpc/aws\""),
            "{e}"
        );
        write(root, "main.tf", &main);

        // Another data directory (TF_DATA_DIR) holds another installation.
        std::fs::rename(root.join(".terraform"), root.join("tfdata")).unwrap();
        let manifest = root.join("tfdata/modules/modules.json");
        let text = std::fs::read_to_string(&manifest).unwrap();
        std::fs::write(&manifest, text.replace(".terraform/", "tfdata/")).unwrap();
        let not_there =
            read_configuration_with(root, Path::new(".terraform"), None, Tool::Terraform).unwrap();
        assert!(not_there.modules[0].installed.is_none());
        let elsewhere =
            read_configuration_with(root, Path::new("tfdata"), None, Tool::Terraform).unwrap();
        assert_eq!(elsewhere.providers.len(), 4);
        assert_eq!(
            elsewhere.modules[0]
                .installed
                .as_ref()
                .map(|v| v.to_string()),
            Some("1.2.3".to_string())
        );
    }

    #[test]
    fn nothing_outside_a_module_package_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        write(&outside, "main.tf", "resource \"secret_thing\" \"x\" {}\n");
        let package = dir.path().join("pkg");
        let read = |sub: &str| {
            read_configuration_with(
                &package.join(sub),
                Path::new(".terraform"),
                Some(&package),
                Tool::Terraform,
            )
        };
        // A local source within the package (even up from a subdirectory) is read.
        write(
            &package,
            "shared/main.tf",
            "resource \"aws_vpc\" \"x\" {}\n",
        );
        write(
            &package,
            "modules/inner/main.tf",
            "module \"shared\" { source = \"../../shared\" }\n",
        );
        let ok = read("modules/inner").unwrap();
        assert_eq!(ok.providers.len(), 1);
        // One that leaves it is refused, naming the call, whatever the spelling.
        for source in [
            "../../../outside",
            "./../../../outside",
            "../../modules/../../outside",
        ] {
            write(
                &package,
                "modules/inner/main.tf",
                &format!("module \"up\" {{ source = \"{source}\" }}\n"),
            );
            let e = read("modules/inner").unwrap_err().to_string();
            assert!(
                e.contains("leaves the module package") && e.contains("module.up"),
                "{source}: {e}"
            );
        }
        // The package's own manifest may not place an installed module outside it.
        write(&package, "modules/inner/main.tf", "\n");
        write(
            &package,
            "main.tf",
            "module \"net\" { source = \"example/net/aws\" }\n",
        );
        for dir in [outside.display().to_string(), "../outside".to_string()] {
            write(
                &package,
                ".terraform/modules/modules.json",
                &format!(
                    r#"{{"Modules":[{{"Key":"net","Source":"registry.terraform.io/example/net/aws","Version":"1.0.0","Dir":{}}}]}}"#,
                    serde_json::Value::String(dir.clone())
                ),
            );
            let e = read("").unwrap_err().to_string();
            assert!(e.contains("leaves the module package"), "{dir}: {e}");
        }
        // The same manifest in the user's own configuration is the user's to make.
        let user = read_configuration(&package, Tool::Terraform).unwrap();
        assert_eq!(user.providers.len(), 1, "{:?}", user.providers);
    }

    #[test]
    fn modules_installed_from_packages_stay_in_their_package() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        write(
            &root,
            "main.tf",
            "module \"net\" { source = \"example/net/aws\" }\n",
        );
        write(
            &dir.path().join("elsewhere"),
            "main.tf",
            "resource \"x_y\" \"z\" {}\n",
        );
        write(
            &root,
            ".terraform/modules/modules.json",
            r#"{"Modules":[{"Key":"net","Source":"registry.terraform.io/example/net/aws","Version":"1.0.0","Dir":".terraform/modules/net/sub"}]}"#,
        );
        write(&root, ".terraform/modules/net/shared/main.tf", "\n");
        write(
            &root,
            ".terraform/modules/net/sub/main.tf",
            "module \"shared\" { source = \"../shared\" }\n",
        );
        read_configuration(&root, Tool::Terraform).unwrap();
        write(
            &root,
            ".terraform/modules/net/sub/main.tf",
            "module \"away\" { source = \"../../../../../elsewhere\" }\n",
        );
        let e = read_configuration(&root, Tool::Terraform)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("leaves the module package") && e.contains("module.net.away"),
            "{e}"
        );
    }

    #[test]
    fn registry_module_sources_in_their_long_form() {
        let long = |s: &str| registry_module(s, Tool::Terraform);
        assert_eq!(
            long("example/vpc/aws").as_deref(),
            Some("registry.terraform.io/example/vpc/aws")
        );
        assert_eq!(
            long("App.Terraform.io/org/vpc/aws").as_deref(),
            Some("app.terraform.io/org/vpc/aws")
        );
        for other in [
            "github.com/hashicorp/example",
            "git::https://example.com/vpc.git",
            "https://example.com/vpc.zip",
            "./local",
            "s3::https://s3.amazonaws.com/bucket/vpc.zip",
        ] {
            assert_eq!(long(other), None, "{other}");
        }
    }

    #[test]
    fn direct_git_sources_name_their_repository_and_ref() {
        let read = |s: &str| git_source(s).map(|(repo, r)| (repo.to_string(), r));
        assert_eq!(
            read("git::https://github.com/acme/modules.git//vpc?ref=v1.4.0"),
            Some(("github.com/acme/modules.git".into(), Some("v1.4.0".into())))
        );
        assert_eq!(
            read("git::https://gitlab.example.com/group/sub/infra?depth=1&ref=main"),
            Some((
                "gitlab.example.com/group/sub/infra".into(),
                Some("main".into())
            ))
        );
        assert_eq!(
            read("github.com/acme/modules//vpc"),
            Some(("github.com/acme/modules.git".into(), None))
        );
        for other in [
            "git::ssh://git@github.com/acme/modules.git",
            "git@github.com:acme/modules.git",
            "git::https://github.com/../etc?ref=x",
            "https://example.com/vpc.zip",
            "acme/vpc/aws",
            "./local",
        ] {
            assert_eq!(read(other), None, "{other}");
        }
    }

    #[test]
    fn errors_name_the_file_or_the_module() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "bad.tf", "terraform { required_providers {");
        let e = read_configuration(dir.path(), Tool::Terraform)
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.tf") && e.contains("HCL"), "{e}");

        write(
            dir.path(),
            "bad.tf",
            "terraform {\n required_providers {\n x = { source = \"a/b\", version = \"~>\" }\n }\n}\n",
        );
        let e = read_configuration(dir.path(), Tool::Terraform)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("bad.tf") && e.contains("required_providers.x.version"),
            "{e}"
        );

        write(
            dir.path(),
            "bad.tf",
            "module \"gone\" { source = \"./nowhere\" }\n",
        );
        let e = read_configuration(dir.path(), Tool::Terraform)
            .unwrap_err()
            .to_string();
        assert!(e.contains("module.gone") && e.contains("nowhere"), "{e}");

        write(dir.path(), "bad.tf", "module \"me\" { source = \"./\" }\n");
        let e = read_configuration(dir.path(), Tool::Terraform)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nested more than"), "{e}");

        // One required_providers block per module, as in Terraform.
        write(
            dir.path(),
            "bad.tf",
            "terraform {\n required_providers {\n x = { source = \"a/b\" }\n }\n}\n",
        );
        write(
            dir.path(),
            "versions.tf",
            "terraform {\n required_providers {\n y = { source = \"a/c\" }\n }\n}\n",
        );
        let e = read_configuration(dir.path(), Tool::Terraform)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("versions.tf") && e.contains("second required_providers block"),
            "{e}"
        );
        std::fs::remove_file(dir.path().join("versions.tf")).unwrap();

        let empty = tempfile::tempdir().unwrap();
        let e = read_configuration(empty.path(), Tool::Terraform)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no *.tf"), "{e}");
    }
}
