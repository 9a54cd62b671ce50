//! The configuration reference, rendered from the code.
//!
//! Every section of the configuration file is a serde type deriving `schemars::JsonSchema`; its
//! schema carries each key's `///` comment (the description), its type (with `format` marking
//! durations and sizes) and its default (the type's `Default`, or the key's own
//! `#[serde(default = ...)]`, serialised as the file would write it). [`Reference::for_config`]
//! reads that schema into tables, one per TOML table of the file (`[server]`,
//! `[upstream.hosts.<name>]`, `[[auth.issuers]]`...), and [`Reference::markdown`] writes them as
//! the book's reference page. [`Reference::undocumented`] names every key and table without a
//! description, and [`Reference::example_keys`] reads a commented example file (such as
//! `config.toml.example`) key by key, set or commented out, against the same tables.
//!
//! How the serde types read: `#[serde(default)]` on a struct gives every key the default of the
//! struct's `Default`, and a key's own `#[serde(default = ...)]` wins; a default is shown only
//! when its type is `Serialize` ([`Reference::without_default`] names a key that is neither
//! optional nor required and still has none). Durations (`humantime_serde`) and sizes
//! (`bytesize::ByteSize`) are declared to schemars as strings with `format` `duration` or `size`
//! (`#[schemars(with = "String", extend("format" = ...))]`), and their defaults are written in
//! their largest whole unit; `PathBuf` keys carry `format` `path`. A struct field is a table, a
//! `Vec` of structs an array of tables (`[[...]]`), a map of structs one table per name
//! (`<name>`), and a map of plain values a key whose own keys are free. Untagged enums
//! (`auth::Patterns`) read as their alternatives, unit enums as their values.
//! `deny_unknown_fields` changes nothing here: an unknown key is an error whatever the
//! reference says.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde_json::{Map, Value};

/// Where the reference is kept in the repository.
pub const PATH: &str = "docs/src/reference/configuration.md";

/// The reference page's opening: what it is, how it is made, and how to read it.
pub const HEADER: &str = r#"# Configuration reference

<!-- Generated from the code: do not edit by hand. To change a key's text, edit the `///`
comment on the field that declares it (src/config/*.rs, src/cache/config.rs,
src/upstream/config.rs, or the `auth`, `usage` and `policy` modules), then regenerate with
`PROVENDER_BLESS=1 cargo test --test it config_reference`. -->

Every key of provender's configuration file, table by table. This page is generated from the
code that reads the file: each key's description is the documentation comment on the field
that declares it, and its type and default are those of the code, so it cannot say what the
program does not do. A test (`config_reference` in the integration tests) fails when this page
differs from what the code generates, when a key has no description, and when
`config.toml.example` shows a key the program does not read or leaves one out.

How to read it:

- Every key is optional unless its default says **required**; a table whose keys are all
  defaults may be left out. Unknown keys are errors, named with their table.
- **duration**: a string with units, such as `"90s"`, `"10m"`, `"24h"`, `"7d"`.
- **size**: a string with units, such as `"64 KiB"`, `"4 MiB"`, `"2 GiB"` (or a number of bytes).
- **path**: a file or directory on the server; relative paths are taken from the directory
  provender is started in.
- **optional** after a type: the key may be left unset, and its default says what unset means
  (see its description).
- `<name>` in a table's path is a name the file chooses, such as a hostname in
  `[upstream.hosts."registry.terraform.io"]` or a namespace in `[publishing.namespaces.acme]`.
- `[[table]]`: an array of tables; write the header once per entry.

Values are checked when the file is read (`provender serve`, and every operator command that
takes `--config`): a bad value stops the program with an error naming its key.

There is no command that prints this page: it is kept in the repository beside the code, and
the test above regenerates it. `config.toml.example` in the repository's root shows every key
with its default, commented where it has no default worth setting."#;

/// The reference page as the code has it today.
pub fn render() -> String {
    Reference::for_config().markdown(HEADER)
}

/// One segment of a table's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A fixed name (`server`).
    Name(String),
    /// A name the file chooses: a map's key (`upstream.hosts.<name>`).
    Any,
}

/// One TOML table of the file.
#[derive(Debug, Clone)]
pub struct Table {
    pub path: Vec<Segment>,
    /// An array of tables (`[[auth.issuers]]`).
    pub array: bool,
    /// The table may be left out (an optional section, or a map's entry).
    pub optional: bool,
    pub description: String,
    pub keys: Vec<Key>,
}

/// One key of a table.
#[derive(Debug, Clone)]
pub struct Key {
    pub name: String,
    /// What it takes, in words (`duration`, `array of strings`, `one of "allow", "deny"`).
    pub kind: String,
    /// Its default as the file would write it, `unset` for an optional key without one, or
    /// `required`.
    pub default: String,
    pub description: String,
    /// A table of free names (`modules.aliases`): any key under it belongs to it.
    pub map: bool,
}

/// What a path of the file names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A table, by its reference path (`upstream.hosts.<name>`).
    Table(String),
    /// A key, by its reference path (`upstream.hosts.<name>.token`).
    Key(String),
}

/// The configuration's tables in the order the reference lists them.
#[derive(Debug, Clone)]
pub struct Reference {
    pub tables: Vec<Table>,
}

impl Table {
    /// The path as the reference writes it (`upstream.hosts.<name>`).
    pub fn path_text(&self) -> String {
        self.path
            .iter()
            .map(|s| match s {
                Segment::Name(n) => n.as_str(),
                Segment::Any => "<name>",
            })
            .collect::<Vec<_>>()
            .join(".")
    }

    /// The table's header as the file writes it (`[server]`, `[[auth.rules]]`).
    pub fn header(&self) -> String {
        if self.array {
            format!("[[{}]]", self.path_text())
        } else {
            format!("[{}]", self.path_text())
        }
    }

    fn key_path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path_text())
        }
    }
}

impl Reference {
    /// The reference of the whole configuration file ([`super::Config`]).
    pub fn for_config() -> Reference {
        Reference::of::<super::Config>()
    }

    /// The reference of any configuration type.
    pub fn of<T: JsonSchema>() -> Reference {
        let root = schemars::generate::SchemaSettings::draft2020_12()
            .into_generator()
            .into_root_schema_for::<T>();
        let root = root.as_value();
        let empty = Map::new();
        let defs = root
            .get("$defs")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let mut tables = Vec::new();
        let walker = Walker { defs };
        walker.table(Vec::new(), false, false, String::new(), root, &mut tables);
        // The root table only when it has keys of its own.
        tables.retain(|t| !t.path.is_empty() || !t.keys.is_empty());
        Reference { tables }
    }

    /// Every key by its full path (`server.listen`, `auth.issuers.name`).
    pub fn keys(&self) -> Vec<String> {
        self.tables
            .iter()
            .flat_map(|t| t.keys.iter().map(|k| t.key_path(&k.name)))
            .collect()
    }

    /// The tables and keys that have no description: each must say what it does.
    pub fn undocumented(&self) -> Vec<String> {
        let mut missing = Vec::new();
        for table in &self.tables {
            if !table.path.is_empty() && table.description.trim().is_empty() {
                missing.push(table.header());
            }
            for key in &table.keys {
                if key.description.trim().is_empty() {
                    missing.push(table.key_path(&key.name));
                }
            }
        }
        missing
    }

    /// The keys that are neither optional nor required and have no default to show (a type
    /// whose default cannot be serialised): each must say what it starts as.
    pub fn without_default(&self) -> Vec<String> {
        self.tables
            .iter()
            .flat_map(|t| {
                t.keys
                    .iter()
                    .filter(|k| k.default == "unset" && !k.kind.ends_with(", optional"))
                    .map(|k| t.key_path(&k.name))
            })
            .collect()
    }

    /// What `path` (a file's table header and key, split at their dots) names: a table, a key
    /// (a key under a free-named table counts as that table's key), or nothing.
    pub fn find(&self, path: &[String]) -> Option<Found> {
        let mut best: Option<(usize, Found)> = None;
        for table in &self.tables {
            if table.path.len() > path.len() {
                continue;
            }
            let matches = table.path.iter().zip(path).all(|(s, p)| match s {
                Segment::Name(n) => n == p,
                Segment::Any => true,
            });
            if !matches {
                continue;
            }
            let fixed = table
                .path
                .iter()
                .filter(|s| matches!(s, Segment::Name(_)))
                .count();
            let rest = &path[table.path.len()..];
            let found = match rest {
                [] => Some(Found::Table(table.path_text())),
                [first, more @ ..] => table
                    .keys
                    .iter()
                    .find(|k| k.name == *first && (more.is_empty() || k.map))
                    .map(|k| Found::Key(table.key_path(&k.name))),
            };
            // The most specific table wins: the longest, then the one with most fixed names.
            if let Some(found) = found {
                let rank = table.path.len() * 1000 + fixed;
                if best.as_ref().is_none_or(|(r, _)| rank > *r) {
                    best = Some((rank, found));
                }
            }
        }
        best.map(|(_, f)| f)
    }

    /// Reads an example file line by line, set keys and commented ones (`# key = value`,
    /// `# [table]`) alike: the keys it shows (by reference path) and the lines that name no
    /// table or key of the reference (`line N: ...`).
    pub fn example_keys(&self, text: &str) -> (BTreeSet<String>, Vec<String>) {
        let mut seen = BTreeSet::new();
        let mut unknown = Vec::new();
        let mut table: Vec<String> = Vec::new();
        // Lines inside a multi-line array or inline table belong to the key above.
        let mut depth = 0i32;
        for (n, raw) in text.lines().enumerate() {
            let line = raw.trim();
            let (commented, line) = match line.strip_prefix('#') {
                Some(rest) => (true, rest.trim()),
                None => (false, line),
            };
            if !commented && depth > 0 {
                depth += bracket_balance(line);
                continue;
            }
            if let Some(path) = header(line) {
                match self.find(&path) {
                    Some(Found::Table(_)) => {}
                    Some(Found::Key(k)) => {
                        seen.insert(k);
                    }
                    None => unknown.push(format!("line {}: {raw}", n + 1)),
                }
                table = path;
                continue;
            }
            let Some((key, value)) = key_line(line) else {
                continue;
            };
            let mut full = table.clone();
            full.extend(key);
            match self.find(&full) {
                Some(Found::Key(k)) => {
                    seen.insert(k);
                }
                Some(Found::Table(_)) | None => {
                    unknown.push(format!("line {}: {raw}", n + 1));
                }
            }
            if !commented {
                depth = bracket_balance(value).max(0);
            }
        }
        (seen, unknown)
    }

    /// The reference as Markdown: `header` first, then one section per table.
    pub fn markdown(&self, header: &str) -> String {
        let mut out = String::from(header.trim_end());
        out.push('\n');
        for table in &self.tables {
            out.push_str(&format!("\n## `{}`\n\n", table.header()));
            let mut about = one_paragraph(&table.description);
            if table.array {
                about.push_str(" (An array of tables: the file may hold any number of them.)");
            } else if table.optional && table.path.contains(&Segment::Any) {
                about.push_str(" (One table per name, each optional.)");
            } else if table.optional {
                about.push_str(" (An optional table.)");
            }
            out.push_str(about.trim());
            out.push_str("\n\n");
            if table.keys.is_empty() {
                continue;
            }
            out.push_str("| key | type | default | description |\n|---|---|---|---|\n");
            for key in &table.keys {
                out.push_str(&format!(
                    "| `{}` | {} | {} | {} |\n",
                    key.name,
                    cell(&key.kind),
                    cell(&key.default),
                    cell(&one_paragraph(&key.description)),
                ));
            }
        }
        out
    }
}

/// A description for one Markdown line: its lines joined, its paragraphs kept apart.
fn one_paragraph(text: &str) -> String {
    text.trim()
        .split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("<br><br>")
}

/// Text for a table cell: pipes escaped.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// `[a.b]` or `[[a.b]]` (a trailing comment allowed), split at the dots outside quotes.
fn header(line: &str) -> Option<Vec<String>> {
    let line = match line.find(" #") {
        Some(at) => line[..at].trim(),
        None => line,
    };
    let inner = line
        .strip_prefix("[[")
        .and_then(|l| l.strip_suffix("]]"))
        .or_else(|| line.strip_prefix('[').and_then(|l| l.strip_suffix(']')))?;
    dotted(inner.trim())
}

/// `key = value` or `a.b = value`: the key's parts and the value's text.
fn key_line(line: &str) -> Option<(Vec<String>, &str)> {
    let mut in_quote = None;
    for (i, c) in line.char_indices() {
        match (in_quote, c) {
            (None, '"' | '\'') => in_quote = Some(c),
            (Some(q), c) if c == q => in_quote = None,
            (None, '=') => {
                let key = dotted(line[..i].trim())?;
                return Some((key, line[i + 1..].trim()));
            }
            _ => {}
        }
    }
    None
}

/// A dotted TOML key split into its parts; `None` when it is not one (prose, a value).
fn dotted(text: &str) -> Option<Vec<String>> {
    let mut parts = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        let (part, after) = if let Some(q @ ('"' | '\'')) = rest.chars().next() {
            let end = rest[1..].find(q)? + 1;
            (rest[1..end].to_string(), &rest[end + 1..])
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                .unwrap_or(rest.len());
            if end == 0 {
                return None;
            }
            (rest[..end].to_string(), &rest[end..])
        };
        parts.push(part);
        let after = after.trim_start();
        if after.is_empty() {
            return Some(parts);
        }
        rest = after.strip_prefix('.')?;
    }
}

/// How many more brackets and braces a value opens than it closes (strings aside).
fn bracket_balance(text: &str) -> i32 {
    let mut depth = 0;
    let mut in_quote = None;
    for c in text.chars() {
        match (in_quote, c) {
            (None, '"' | '\'') => in_quote = Some(c),
            (Some(q), c) if c == q => in_quote = None,
            (None, '[' | '{') => depth += 1,
            (None, ']' | '}') => depth -= 1,
            (None, '#') => break,
            _ => {}
        }
    }
    depth
}

struct Walker<'a> {
    defs: &'a Map<String, Value>,
}

impl<'a> Walker<'a> {
    /// A schema with its `$ref` followed.
    fn resolve(&self, schema: &'a Value) -> &'a Value {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(r) => r
                .strip_prefix("#/$defs/")
                .and_then(|name| self.defs.get(name))
                .map(|s| self.resolve(s))
                .unwrap_or(schema),
            None => schema,
        }
    }

    /// The schema of an `Option`'s value, and whether it was one.
    fn unwrap_option(&self, schema: &'a Value) -> (&'a Value, bool) {
        if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
            let rest: Vec<&Value> = any
                .iter()
                .filter(|s| s.get("type").and_then(Value::as_str) != Some("null"))
                .collect();
            if rest.len() == 1 && any.len() == 2 {
                return (rest[0], true);
            }
        }
        (schema, false)
    }

    /// A struct's schema: one with properties.
    fn is_table(&self, schema: &Value) -> bool {
        let s = self.resolve(schema);
        s.get("properties").is_some()
    }

    fn table(
        &self,
        path: Vec<Segment>,
        array: bool,
        optional: bool,
        description: String,
        schema: &'a Value,
        out: &mut Vec<Table>,
    ) {
        let schema = self.resolve(schema);
        let description = if description.trim().is_empty() {
            text(schema, "description")
        } else {
            description
        };
        let required: BTreeSet<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let at = out.len();
        out.push(Table {
            path: path.clone(),
            array,
            optional,
            description,
            keys: Vec::new(),
        });
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return;
        };
        let mut names: Vec<&String> = properties.keys().collect();
        names.sort();
        let mut subtables = Vec::new();
        for name in names {
            let prop = &properties[name];
            let description = text(prop, "description");
            let (inner, is_option) = self.unwrap_option(prop);
            let resolved = self.resolve(inner);
            let mut sub = path.clone();
            sub.push(Segment::Name(name.clone()));
            if self.is_table(inner) {
                subtables.push((sub, false, is_option, description, inner));
                continue;
            }
            let ty = resolved.get("type").and_then(Value::as_str);
            if ty == Some("array") {
                if let Some(items) = resolved.get("items").filter(|i| self.is_table(i)) {
                    subtables.push((sub, true, true, description, items));
                    continue;
                }
            }
            if ty == Some("object") {
                if let Some(values) = resolved
                    .get("additionalProperties")
                    .filter(|v| self.is_table(v))
                {
                    sub.push(Segment::Any);
                    subtables.push((sub, false, true, description, values));
                    continue;
                }
            }
            let default = match prop.get("default") {
                Some(v) => toml_text(&plain_default(prop, v)),
                None if required.contains(name.as_str()) => "required".to_string(),
                None => "unset".to_string(),
            };
            out[at].keys.push(Key {
                name: name.clone(),
                kind: self.kind(prop),
                default,
                description,
                map: ty == Some("object"),
            });
        }
        for (sub, array, optional, description, schema) in subtables {
            self.table(sub, array, optional, description, schema, out);
        }
    }

    /// What a key takes, in words.
    fn kind(&self, schema: &Value) -> String {
        let (inner, is_option) = self.unwrap_option(schema);
        let s = self.resolve(inner);
        let mut types: Vec<&str> = match s.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let nullable = types.contains(&"null");
        types.retain(|t| *t != "null");
        let words = if let Some(values) = s.get("enum").and_then(Value::as_array) {
            one_of(values.iter())
        } else if let Some(variants) = s.get("oneOf").and_then(Value::as_array) {
            let consts: Vec<&Value> = variants.iter().filter_map(|v| v.get("const")).collect();
            if consts.len() == variants.len() {
                one_of(consts.into_iter())
            } else {
                variants
                    .iter()
                    .map(|v| self.kind(v))
                    .collect::<Vec<_>>()
                    .join(" or ")
            }
        } else if let Some(any) = s.get("anyOf").and_then(Value::as_array) {
            any.iter()
                .map(|v| self.kind(v))
                .collect::<Vec<_>>()
                .join(" or ")
        } else {
            match (s.get("format").and_then(Value::as_str), types.as_slice()) {
                (Some("duration"), _) => "duration".to_string(),
                (Some("size"), _) => "size".to_string(),
                (Some("path"), _) => "path".to_string(),
                (_, ["array"]) => match s.get("items") {
                    Some(items) => format!("array of {}", plural(&self.kind(items))),
                    None => "array".to_string(),
                },
                (_, ["object"]) => match s.get("additionalProperties") {
                    Some(v) if v.is_object() => {
                        format!("table of {}", plural(&self.kind(v)))
                    }
                    _ => "table".to_string(),
                },
                (_, [t]) => t.to_string(),
                _ => "value".to_string(),
            }
        };
        if is_option || nullable {
            format!("{words}, optional")
        } else {
            words
        }
    }
}

fn one_of<'v>(values: impl Iterator<Item = &'v Value>) -> String {
    let values: Vec<String> = values.map(toml_text).collect();
    format!("one of {}", values.join(", "))
}

fn plural(kind: &str) -> String {
    match kind {
        "string" | "integer" | "boolean" | "number" | "duration" | "size" | "path" => {
            format!("{kind}s")
        }
        other => format!("({other})"),
    }
}

/// A JSON value as the TOML file writes it.
fn toml_text(value: &Value) -> String {
    fn inner(value: &Value) -> String {
        match value {
            Value::Null => "unset".to_string(),
            Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
            Value::Array(items) => {
                let items: Vec<String> = items.iter().map(inner).collect();
                format!("[{}]", items.join(", "))
            }
            Value::Object(map) if map.is_empty() => "{}".to_string(),
            Value::Object(map) => {
                let items: Vec<String> = map
                    .iter()
                    .map(|(k, v)| format!("{k} = {}", inner(v)))
                    .collect();
                format!("{{ {} }}", items.join(", "))
            }
            other => other.to_string(),
        }
    }
    match value {
        Value::Null => "unset".to_string(),
        other => format!("`{}`", inner(other)),
    }
}

/// A default as a person writes it: durations in their largest whole unit (`"90d"`, not
/// humantime's months), sizes in theirs (`"2 GiB"`, not `"2.0 GiB"`).
fn plain_default(prop: &Value, default: &Value) -> Value {
    let Some(text) = default.as_str() else {
        return default.clone();
    };
    let plain = match prop.get("format").and_then(Value::as_str) {
        Some("duration") => humantime::parse_duration(text).ok().map(duration_text),
        Some("size") => text
            .parse::<bytesize::ByteSize>()
            .ok()
            .map(|s| size_text(s.as_u64())),
        _ => None,
    };
    plain.map(Value::String).unwrap_or_else(|| default.clone())
}

fn duration_text(d: std::time::Duration) -> String {
    let secs = d.as_secs();
    if d.subsec_nanos() != 0 {
        return if d.as_nanos() % 1_000_000 == 0 {
            format!("{}ms", d.as_millis())
        } else {
            humantime::format_duration(d).to_string()
        };
    }
    match secs {
        0 => "0s".to_string(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

fn size_text(bytes: u64) -> String {
    for (unit, name) in [
        (1u64 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ] {
        if bytes >= unit && bytes % unit == 0 {
            return format!("{} {name}", bytes / unit);
        }
    }
    format!("{bytes} B")
}

/// A metadata keyword's text, or "".
fn text(schema: &Value, keyword: &str) -> String {
    schema
        .get(keyword)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A section with a documented key, an undocumented one, a nested table and an array of
    /// tables: what the checker must see.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[serde(default, deny_unknown_fields)]
    struct Sample {
        /// How long to wait.
        #[serde(with = "humantime_serde")]
        #[schemars(with = "String", extend("format" = "duration"))]
        wait: Duration,
        bare: u32,
        /// A nested table.
        inner: Inner,
        /// Entries.
        entries: Vec<Entry>,
    }

    impl Default for Sample {
        fn default() -> Self {
            Sample {
                wait: Duration::from_secs(90),
                bare: 3,
                inner: Inner::default(),
                entries: Vec::new(),
            }
        }
    }

    /// Inner settings.
    #[derive(Default, serde::Deserialize, schemars::JsonSchema)]
    #[serde(default)]
    struct Inner {
        /// Names.
        names: Vec<String>,
    }

    /// One entry.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)] // Read through its schema only.
    struct Entry {
        /// Its name.
        name: String,
    }

    fn sample() -> Reference {
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Root {
            /// The sample section.
            sample: Sample,
        }
        Reference::of::<Root>()
    }

    #[test]
    fn a_key_whose_default_cannot_be_shown_is_named() {
        /// Not `Serialize`: its default cannot be shown.
        #[derive(Default, serde::Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)] // Read through its schema only.
        struct Opaque(u8);
        /// A section.
        #[derive(Default, serde::Deserialize, schemars::JsonSchema)]
        #[serde(default)]
        #[allow(dead_code)] // Read through its schema only.
        struct Section {
            /// Shown.
            shown: u8,
            /// Not shown.
            opaque: Opaque,
        }
        #[derive(schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Root {
            /// The section.
            section: Section,
        }
        let r = Reference::of::<Root>();
        assert_eq!(r.without_default(), vec!["section.opaque".to_string()]);
        assert!(sample().without_default().is_empty());
    }

    #[test]
    fn an_undocumented_key_is_named() {
        assert_eq!(sample().undocumented(), vec!["sample.bare".to_string()]);
    }

    #[test]
    fn tables_keys_types_and_defaults_come_from_the_code() {
        let r = sample();
        let headers: Vec<String> = r.tables.iter().map(Table::header).collect();
        assert_eq!(
            headers,
            ["[sample]", "[[sample.entries]]", "[sample.inner]"]
        );
        let wait = &r.tables[0].keys.iter().find(|k| k.name == "wait").unwrap();
        assert_eq!(wait.kind, "duration");
        assert_eq!(wait.default, "`\"90s\"`");
        let bare = &r.tables[0].keys.iter().find(|k| k.name == "bare").unwrap();
        assert_eq!(
            (bare.kind.as_str(), bare.default.as_str()),
            ("integer", "`3`")
        );
        assert_eq!(r.tables[1].keys[0].default, "required");
        assert_eq!(r.tables[2].keys[0].kind, "array of strings");
        assert_eq!(
            r.keys(),
            [
                "sample.bare",
                "sample.wait",
                "sample.entries.name",
                "sample.inner.names"
            ]
        );
        let md = r.markdown("# Sample");
        assert!(md.contains("## `[[sample.entries]]`"), "{md}");
        assert!(
            md.contains("| `wait` | duration | `\"90s\"` | How long to wait. |"),
            "{md}"
        );
    }

    #[test]
    fn an_example_is_read_key_by_key() {
        let r = sample();
        let (seen, unknown) = r.example_keys(
            "[sample]\nwait = \"2m\"\n# bare = 4\n# Prose = with an equals sign.\n\
             # [[sample.entries]]\n# name = \"x\"\n[sample.inner]\nnames = [\n  \"a = b\",\n]\n\
             nope = 1\n",
        );
        assert_eq!(
            seen.into_iter().collect::<Vec<_>>(),
            [
                "sample.bare",
                "sample.entries.name",
                "sample.inner.names",
                "sample.wait"
            ]
        );
        // Prose that reads like a key is reported too: the example's comments keep clear of it.
        assert_eq!(
            unknown,
            [
                "line 4: # Prose = with an equals sign.",
                "line 11: nope = 1"
            ]
        );
    }
}
