//! `.terraform.lock.hcl`: reading (with a real HCL parser) and writing byte for byte the way
//! Terraform writes it.
//!
//! Terraform's layout: a two-line header comment, then one `provider "<address>"` block per
//! provider sorted by address, blocks separated by a blank line. Inside, `version`, then
//! `constraints` when the configuration has any (the two `=` signs aligned, as `hclwrite`
//! aligns consecutive one-line attributes), then `hashes` as a sorted list, one per line, each
//! followed by a comma.

use std::collections::{BTreeMap, BTreeSet};

use super::wanted::InputError;
use crate::address::{ProviderAddr, Version};
use crate::constraints::Constraints;

const HEADER: &str = "# This file is maintained automatically by \"terraform init\".\n\
                      # Manual edits may be lost in future updates.\n";

/// One `provider` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedProvider {
    pub addr: ProviderAddr,
    pub version: Version,
    pub constraints: Constraints,
    /// `h1:...` and `zh:...` strings.
    pub hashes: BTreeSet<String>,
}

/// A whole lock file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockFile {
    pub providers: BTreeMap<ProviderAddr, LockedProvider>,
}

impl LockFile {
    /// Parses lock file text. Errors say which block or attribute is wrong; the caller adds
    /// the file ([`InputError::in_file`]).
    pub fn parse(text: &str) -> Result<LockFile, InputError> {
        let body = hcl::parse(text).map_err(|e| InputError::new(format!("not valid HCL: {e}")))?;
        let mut out = LockFile::default();
        for block in body.blocks() {
            if block.identifier() != "provider" {
                // Terraform ignores nothing here either, but unknown blocks do not choose
                // packages; keep going rather than refuse a newer file format.
                continue;
            }
            let [label] = block.labels() else {
                return Err(InputError::new(
                    "a provider block needs exactly one label (its address)",
                ));
            };
            let source = label.as_str();
            let bad = |problem: &dyn std::fmt::Display| {
                InputError::new(problem).at(format!("provider {source:?}"))
            };
            let addr = ProviderAddr::parse(source).map_err(|e| bad(&e))?;
            if source.split('/').count() != 3 {
                return Err(bad(
                    &"a lock file names providers in full (host/namespace/type)",
                ));
            }
            let mut version = None;
            let mut constraints = Constraints::any();
            let mut hashes = BTreeSet::new();
            for attr in block.body().attributes() {
                let string = |e: &hcl::Expression, what: &str| match e {
                    hcl::Expression::String(s) => Ok(s.clone()),
                    _ => Err(bad(&format!("{what} must be a string"))),
                };
                match attr.key() {
                    "version" => {
                        let text = string(attr.expr(), "version")?;
                        version = Some(Version::parse_lenient(&text).map_err(|e| bad(&e))?);
                    }
                    "constraints" => {
                        constraints = Constraints::parse(&string(attr.expr(), "constraints")?)
                            .map_err(|e| bad(&e))?;
                    }
                    "hashes" => {
                        let hcl::Expression::Array(items) = attr.expr() else {
                            return Err(bad(&"hashes must be a list of strings"));
                        };
                        for item in items {
                            let h = string(item, "each hash")?;
                            if !h.contains(':') {
                                return Err(bad(&format!(
                                    "{h:?} is not a hash like h1:... or zh:..."
                                )));
                            }
                            hashes.insert(h);
                        }
                    }
                    _ => {}
                }
            }
            let version = version.ok_or_else(|| bad(&"no version"))?;
            out.providers.insert(
                addr.clone(),
                LockedProvider {
                    addr,
                    version,
                    constraints,
                    hashes,
                },
            );
        }
        Ok(out)
    }

    /// The file's text, as `terraform init` would write it.
    pub fn render(&self) -> String {
        let mut out = String::from(HEADER);
        for p in self.providers.values() {
            out.push('\n');
            out.push_str(&format!("provider \"{}\" {{\n", p.addr));
            let constraints = p.constraints.to_string();
            if constraints.is_empty() {
                out.push_str(&format!("  version = \"{}\"\n", p.version));
            } else {
                out.push_str(&format!("  version     = \"{}\"\n", p.version));
                out.push_str(&format!("  constraints = \"{constraints}\"\n"));
            }
            out.push_str("  hashes = [\n");
            for h in &p.hashes {
                out.push_str(&format!("    \"{h}\",\n"));
            }
            out.push_str("  ]\n}\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"# This file is maintained automatically by "terraform init".
# Manual edits may be lost in future updates.

provider "registry.terraform.io/acme/bar" {
  version = "2.3.0"
  hashes = [
    "h1:abc=",
    "zh:01",
  ]
}

provider "registry.terraform.io/acme/foo" {
  version     = "1.1.0"
  constraints = "~> 1.0"
  hashes = [
    "h1:def=",
    "zh:02",
    "zh:03",
  ]
}
"#;

    #[test]
    fn round_trips_terraforms_layout() {
        let lock = LockFile::parse(SAMPLE).unwrap();
        assert_eq!(lock.providers.len(), 2);
        let foo = &lock.providers[&ProviderAddr::parse("acme/foo").unwrap()];
        assert_eq!(foo.version.as_str(), "1.1.0");
        assert_eq!(foo.constraints.to_string(), "~> 1.0");
        assert_eq!(foo.hashes.len(), 3);
        assert_eq!(lock.render(), SAMPLE);
    }

    #[test]
    fn refuses_what_it_cannot_use() {
        let e = LockFile::parse("provider \"acme/foo\" {\n version = \"1.0.0\"\n}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("in full"), "{e}");
        let e = LockFile::parse("provider \"a.io/acme/foo\" {\n hashes = []\n}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no version"), "{e}");
        let e = LockFile::parse(
            "provider \"a.io/acme/foo\" {\n version = \"1.0.0\"\n hashes = [\"x\"]\n}\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not a hash"), "{e}");
        assert!(
            LockFile::parse("provider {")
                .unwrap_err()
                .to_string()
                .contains("HCL")
        );
    }
}
