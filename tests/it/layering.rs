//! The crate's layers, as ARCHITECTURE.md lists them, checked on the source: every
//! `crate::<module>` path in a module's code (comments and `#[cfg(test)]` parts aside) must name
//! a module in a lower layer. A top-level module and its submodules (`x.rs` and `x/*.rs`) are
//! one unit. A module missing from [`LAYERS`], an edge upwards or sideways, or an exception that
//! no longer occurs fails the test, naming the file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first. A module may use modules of earlier layers only.
const LAYERS: &[&[&str]] = &[
    // Foundations: names, time, files, TLS, hashing, packages, constraints.
    &["address", "clock", "fsio", "tarball", "tls"],
    &["hash", "package", "constraints"],
    // The typed records every layer shares.
    &["records"],
    // Policy over records, persistence, observation.
    &["trust", "storage", "metrics"],
    // What is kept, and the clients of the outside world.
    &["cache", "auth", "upstream"],
    // The settings of every part, validated.
    &["config"],
    // What a client is answered.
    &["error"],
    // The read-through flow.
    &["mirror"],
    &["reverify"],
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

#[test]
fn the_reader_sees_every_form_of_path() {
    let text = "use crate::address::Version;\nuse crate::{cache::X, records};\n\
                let x = crate::clock::now_secs(); // crate::ops in a comment\n\
                /// [`crate::mirror::Mirror`]\n#[cfg(test)]\nuse crate::cli;\n";
    let used: Vec<String> = used_modules(text).into_iter().collect();
    assert_eq!(used, ["address", "cache", "clock", "records"]);
}
