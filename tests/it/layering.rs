//! The crate's layers, as ARCHITECTURE.md lists them, checked on the source: every
//! `crate::<module>` path in a module's code (comments and `#[cfg(test)]` parts aside) must name
//! a module in a lower layer. A top-level module and its submodules (`x.rs` and `x/*.rs`) are
//! one unit. A module missing from [`LAYERS`], an edge upwards or sideways, or an exception that
//! no longer occurs fails the test, naming the file.
//!
//! Within a module, files must not import each other in a cycle either: every `crate::`,
//! `super::` and `self::` path names a file (the longest prefix of it that is one), and the
//! files that name each other, directly or through others, are reported. A file and its own
//! submodules (`x.rs` and `x/...`) are one unit here too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first. A module may use modules of earlier layers only.
const LAYERS: &[&[&str]] = &[
    // Foundations: names, time, files, TLS, hashing, packages, constraints.
    &["address", "breaker", "clock", "fsio", "tarball", "tls"],
    &["hash", "package", "constraints", "module_docs"],
    // The typed records every layer shares.
    &["records"],
    // Policy over records, persistence, observation.
    &["trust", "storage", "metrics"],
    // What is kept, and the clients of the outside world.
    &["cache", "policy", "upstream", "usage"],
    // Who may use the mirror (issuers' key sets are fetched in one flight, as the cache's).
    &["auth"],
    // The settings of every part, validated.
    &["config"],
    // What a client is answered.
    &["error"],
    // The read-through flow.
    &["mirror"],
    &["reverify", "catalogue"],
    // Front ends.
    &["server", "ops"],
    &["cli"],
];

/// Edges against the layers that are still to be removed, each with its reason (see
/// ARCHITECTURE.md, "Layers"). None today: keep it that way.
const EXCEPTIONS: &[(&str, &str, &str)] = &[];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules a file's code names through `crate::`, comments and tests left out.
fn used_modules(text: &str) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut used = BTreeSet::new();
    for line in code.lines() {
        let line = line.split("//").next().unwrap_or_default();
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let names: Vec<&str> = match rest.strip_prefix('{') {
                // `use crate::{a::X, b};`
                Some(group) => group
                    .split('}')
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .collect(),
                None => vec![rest],
            };
            for name in names {
                let name: String = name
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    used.insert(name);
                }
            }
        }
    }
    used
}

#[test]
fn modules_use_only_lower_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layer_of: BTreeMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .flat_map(|(i, layer)| layer.iter().map(move |m| (*m, i)))
        .collect();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut problems = Vec::new();
    let mut excepted_seen = BTreeSet::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if matches!(module.as_str(), "lib" | "main") {
            continue;
        }
        let Some(&own) = layer_of.get(module.as_str()) else {
            problems.push(format!(
                "src/{}: module {module} is in no layer: add it to LAYERS and ARCHITECTURE.md",
                rel.display()
            ));
            continue;
        };
        for used in used_modules(&std::fs::read_to_string(&file).unwrap()) {
            if used == module {
                continue;
            }
            let Some(&theirs) = layer_of.get(used.as_str()) else {
                problems.push(format!(
                    "src/{}: uses crate::{used}, which is in no layer",
                    rel.display()
                ));
                continue;
            };
            if theirs < own {
                continue;
            }
            if EXCEPTIONS
                .iter()
                .any(|(from, to, _)| *from == module && *to == used)
            {
                excepted_seen.insert((module.clone(), used.clone()));
                continue;
            }
            let how = if theirs == own { "its own" } else { "a higher" };
            problems.push(format!(
                "src/{}: {module} uses crate::{used}, in {how} layer",
                rel.display()
            ));
        }
    }
    for (from, to, why) in EXCEPTIONS {
        if !excepted_seen.contains(&(from.to_string(), to.to_string())) {
            problems.push(format!(
                "the exception {from} -> {to} ({why}) no longer occurs: remove it"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The module path of a file below `src/` (`mirror/core` for `src/mirror/core.rs`), or `None`
/// for the crate root.
fn module_path(rel: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop()?;
    let stem = last.trim_end_matches(".rs");
    if parts.is_empty() && matches!(stem, "lib" | "main") {
        return None;
    }
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    Some(parts)
}

/// The paths `rest` names below `base`: `a::b::X`, or a group `{a::X, b::{Y, Z}}` giving one
/// path each.
fn expand(base: Vec<String>, rest: &str) -> Vec<Vec<String>> {
    if let Some(group) = rest.strip_prefix('{') {
        let (mut items, mut depth, mut from) = (Vec::new(), 0, 0);
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    items.push(&group[from..i]);
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(&group[from..i]);
                    from = i + 1;
                }
                _ => {}
            }
        }
        return items
            .into_iter()
            .filter(|item| !item.trim().is_empty())
            .flat_map(|item| expand(base.clone(), item.trim()))
            .collect();
    }
    let name: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    if name.is_empty() || name == "self" {
        return vec![base];
    }
    let after = &rest[name.len()..];
    let mut path = base;
    path.push(name);
    match after.strip_prefix("::") {
        Some(more) => expand(path, more),
        None => vec![path],
    }
}

/// Every path a file's code names through `crate::`, `super::` or `self::`, as absolute
/// module paths (segments), comments and tests left out. `{a::X, b}` groups give one path each.
fn named_paths(text: &str, own: &[String]) -> Vec<Vec<String>> {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut out = Vec::new();
    for line in code.lines() {
        let line = line.split("//").next().unwrap_or_default();
        let bytes = line.as_bytes();
        for (at, _) in line.match_indices("::") {
            // The root word just before `::`, at a word boundary.
            let before = &line[..at];
            let root = before
                .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()
                .unwrap_or_default();
            let start = at - root.len();
            if start > 0 && (bytes[start - 1] == b':' || bytes[start - 1].is_ascii_alphanumeric()) {
                continue;
            }
            let mut base: Vec<String> = match root {
                "crate" => Vec::new(),
                "self" => own.to_vec(),
                "super" => own[..own.len().saturating_sub(1)].to_vec(),
                _ => continue,
            };
            let mut rest = &line[at + 2..];
            while let Some(more) = rest.strip_prefix("super::") {
                base.pop();
                rest = more;
            }
            out.extend(expand(base, rest));
        }
    }
    out
}

#[test]
fn no_import_cycles_between_files() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut modules: BTreeMap<Vec<String>, String> = BTreeMap::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        if let Some(path) = module_path(rel) {
            modules.insert(path, std::fs::read_to_string(file).unwrap());
        }
    }
    let within = |a: &[String], b: &[String]| a.starts_with(b) || b.starts_with(a);
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (own, text) in &modules {
        let targets = edges.entry(own.clone()).or_default();
        for path in named_paths(text, own) {
            let Some(file) = (1..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| modules.contains_key(p))
            else {
                continue;
            };
            if !within(own, &file) {
                targets.insert(file);
            }
        }
    }
    // Files that reach each other: for every edge a -> b, is a reachable from b?
    let reaches = |from: &Vec<String>, to: &Vec<String>| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(at) = stack.pop() {
            if &at == to {
                return true;
            }
            if seen.insert(at.clone()) {
                stack.extend(edges.get(&at).into_iter().flatten().cloned());
            }
        }
        false
    };
    let mut problems = Vec::new();
    for (from, targets) in &edges {
        for to in targets {
            if reaches(to, from) {
                problems.push(format!(
                    "src/{}.rs names src/{}.rs, which leads back to it",
                    from.join("/"),
                    to.join("/")
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_file_reader_resolves_relative_paths() {
    let own: Vec<String> = vec!["mirror".into(), "core".into()];
    let text = "use super::admission;\nuse crate::cache::{Archives, listing::X};\n\
                let x = self::fill::Fill::new(); // super::ops in a comment\n\
                use super::super::ops::inputs;\n#[cfg(test)]\nuse crate::cli;\n";
    let paths: Vec<String> = named_paths(text, &own)
        .iter()
        .map(|p| p.join("/"))
        .collect();
    assert_eq!(
        paths,
        [
            "mirror/admission",
            "cache/Archives",
            "cache/listing/X",
            "mirror/core/fill/Fill/new",
            "ops/inputs",
        ]
    );
}

#[test]
fn the_reader_sees_every_form_of_path() {
    let text = "use crate::address::Version;\nuse crate::{cache::X, records};\n\
                let x = crate::clock::now_secs(); // crate::ops in a comment\n\
                /// [`crate::mirror::Mirror`]\n#[cfg(test)]\nuse crate::cli;\n";
    let used: Vec<String> = used_modules(text).into_iter().collect();
    assert_eq!(used, ["address", "cache", "clock", "records"]);
}
