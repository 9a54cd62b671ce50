//! The configuration reference and the example file, checked against the code that reads the
//! configuration: `docs/src/reference/configuration.md` must be exactly what the code generates
//! (so an undocumented key, a key documented but gone and a changed default all fail), every key
//! must have a description, and `config.toml.example` must show every key (set, or commented out
//! as `# key = value`), name no key the program does not read, and load as it is.
//!
//! `PROVENDER_BLESS=1 cargo test --test it config_reference` writes the reference anew.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use provender::config::reference::{self, Reference};

/// Keys `config.toml.example` leaves out, each with its reason. Keep it short: a key belongs
/// in the example unless showing it would mislead.
const NOT_IN_EXAMPLE: &[(&str, &str)] = &[];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The first line where two texts differ, for a failure a person can act on.
fn first_difference(committed: &str, generated: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (committed.lines().collect(), generated.lines().collect());
    for i in 0..a.len().max(b.len()) {
        let (x, y) = (a.get(i), b.get(i));
        if x != y {
            return format!(
                "line {}:\n  committed: {}\n  generated: {}",
                i + 1,
                x.unwrap_or(&"<end of file>"),
                y.unwrap_or(&"<end of file>")
            );
        }
    }
    "only in line endings".to_string()
}

#[test]
fn the_committed_reference_is_what_the_code_generates() {
    let path = root().join(reference::PATH);
    let generated = reference::render();
    if std::env::var_os("PROVENDER_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", reference::PATH));
    assert!(
        committed == generated,
        "{} differs from what the code generates at {}\n\
         Edit the `///` comments on the configuration's fields, not the page; then regenerate \
         it with `PROVENDER_BLESS=1 cargo test --test it config_reference`.",
        reference::PATH,
        first_difference(&committed, &generated)
    );
}

#[test]
fn every_key_and_table_says_what_it_does() {
    let missing = Reference::for_config().undocumented();
    assert!(
        missing.is_empty(),
        "keys and tables without a `///` description: {missing:?}"
    );
}

#[test]
fn every_key_shows_its_default() {
    let missing = Reference::for_config().without_default();
    assert!(
        missing.is_empty(),
        "keys that are neither optional nor required and show no default (make their type \
         `Serialize`): {missing:?}"
    );
}

#[test]
fn the_reference_covers_every_section_of_the_file() {
    let r = Reference::for_config();
    let headers: BTreeSet<String> = r.tables.iter().map(|t| t.header()).collect();
    for expected in [
        "[server]",
        "[cache]",
        "[cache.object_store]",
        "[upstream]",
        "[upstream.hosts.<name>]",
        "[auth]",
        "[[auth.clients]]",
        "[[auth.issuers]]",
        "[[auth.rules]]",
        "[auth.single_sign_on]",
        "[auth.cli_login]",
        "[bundles]",
        "[configurations]",
        "[modules]",
        "[complete_hashes]",
        "[usage]",
        "[releases]",
        "[git]",
        "[publishing]",
        "[publishing.namespaces.<name>]",
        "[policy]",
        "[[policy.rules]]",
    ] {
        assert!(
            headers.contains(expected),
            "{expected} missing: {headers:?}"
        );
    }
    // Types and defaults are the code's: a duration, a size, a list, an enum and a key that
    // has no default.
    let key = |table: &str, name: &str| {
        let t = r.tables.iter().find(|t| t.header() == table).unwrap();
        let k = t.keys.iter().find(|k| k.name == name).unwrap();
        (k.kind.clone(), k.default.clone())
    };
    assert_eq!(
        key("[cache]", "index_ttl"),
        ("duration".into(), "`\"10m\"`".into())
    );
    assert_eq!(
        key("[git]", "max_size"),
        ("size".into(), "`\"20 GiB\"`".into())
    );
    assert_eq!(
        key("[upstream]", "allowed_hosts"),
        (
            "array of strings".into(),
            "`[\"registry.terraform.io\", \"registry.opentofu.org\"]`".into()
        )
    );
    assert_eq!(
        key("[policy]", "default"),
        (
            "one of `\"allow\"`, `\"deny\"`".into(),
            "`\"allow\"`".into()
        )
    );
    assert_eq!(key("[[auth.issuers]]", "issuer").1, "required");
    // Durations and sizes in their largest whole unit, as a person writes them.
    assert_eq!(key("[usage]", "retention").1, "`\"90d\"`");
    assert_eq!(key("[upstream]", "retry_base_delay").1, "`\"200ms\"`");
    assert_eq!(key("[cache]", "local_max_size").1, "`\"0 B\"`");
}

fn example() -> (PathBuf, String) {
    let path = root().join("config.toml.example");
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text)
}

#[test]
fn the_example_names_only_keys_the_program_reads() {
    let (_, text) = example();
    let (_, unknown) = Reference::for_config().example_keys(&text);
    assert!(
        unknown.is_empty(),
        "config.toml.example names keys or tables the configuration does not have (a comment \
         line that reads like `key = value` counts too: reword it):\n{}",
        unknown.join("\n")
    );
}

#[test]
fn the_example_shows_every_key() {
    let (_, text) = example();
    let r = Reference::for_config();
    let (seen, _) = r.example_keys(&text);
    let keys: BTreeSet<String> = r.keys().into_iter().collect();
    for (key, why) in NOT_IN_EXAMPLE {
        assert!(
            keys.contains(*key),
            "{key} is excepted ({why}) but is no key"
        );
        assert!(
            !seen.contains(*key),
            "{key} is excepted ({why}) but is in the example"
        );
    }
    let excepted: BTreeSet<String> = NOT_IN_EXAMPLE.iter().map(|(k, _)| k.to_string()).collect();
    let missing: Vec<&String> = keys
        .iter()
        .filter(|k| !seen.contains(*k) && !excepted.contains(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "config.toml.example leaves out these keys (show each, set or as `# key = value`): \
         {missing:?}"
    );
}

#[test]
fn the_example_loads_as_it_is() {
    let (path, _) = example();
    provender::config::load(Some(Path::new(&path)))
        .unwrap_or_else(|e| panic!("config.toml.example does not load: {e}"));
}
