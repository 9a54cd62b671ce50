//! Provider version constraints as Terraform reads and writes them.
//!
//! Syntax (Terraform's "Ruby-style" constraints): comma-separated terms, each an optional
//! operator (`=`, `!=`, `>`, `>=`, `<`, `<=`, `~>`) and a version of one to three numbers with
//! optional prerelease and build parts. A bare version means `=`. `~>` allows only the rightmost
//! given number to grow: `~> 1.2` is `>= 1.2.0, < 2.0.0`, `~> 1.2.3` is `>= 1.2.3, < 1.3.0`, and
//! `~> 1` is read as `~> 1.0`.
//!
//! Selection follows Terraform: the newest version that meets every term, where a prerelease is
//! eligible only if an exact (`=` or bare) term names that very version. Build metadata never
//! takes part in comparisons.
//!
//! [`Constraints`]'s `Display` is Terraform's normalised form (what `.terraform.lock.hcl` records
//! as `constraints`): each term with its operator and a space (none for `=`), full three-number
//! versions except for two-number `~>` terms, sorted as strings and without duplicates.

use std::cmp::Ordering;
use std::fmt;

use crate::address::Version;

/// A constraint string that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid version constraint {input:?}: {reason}")]
pub struct ConstraintError {
    input: String,
    reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    /// `~>` given with one or two numbers: the minor number may grow.
    MinorOnly,
    /// `~>` given with three numbers: only the patch number may grow.
    PatchOnly,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    op: Op,
    version: Version,
}

/// A set of constraints that must all hold; empty means "any version".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Constraints {
    terms: Vec<Term>,
}

impl Constraints {
    /// No constraint: every non-prerelease version is allowed.
    pub fn any() -> Constraints {
        Constraints::default()
    }

    /// Exactly this version.
    pub fn exact(version: &Version) -> Constraints {
        Constraints {
            terms: vec![Term {
                op: Op::Eq,
                version: version.clone(),
            }],
        }
    }

    /// Parses a constraint string such as `~> 1.2, != 1.2.5`. An empty string allows any version.
    pub fn parse(input: &str) -> Result<Constraints, ConstraintError> {
        let err = |reason: &str| ConstraintError {
            input: input.chars().take(120).collect(),
            reason: reason.to_string(),
        };
        if input.trim().is_empty() {
            return Ok(Constraints::any());
        }
        let mut terms = Vec::new();
        for raw in input.split(',') {
            let raw = raw.trim();
            if raw.is_empty() {
                return Err(err("empty term between commas"));
            }
            let (op, rest) = [
                ("~>", Op::MinorOnly),
                (">=", Op::Ge),
                ("<=", Op::Le),
                ("!=", Op::Ne),
                (">", Op::Gt),
                ("<", Op::Lt),
                ("=", Op::Eq),
            ]
            .iter()
            .find_map(|(text, op)| raw.strip_prefix(text).map(|rest| (*op, rest.trim_start())))
            .unwrap_or((Op::Eq, raw));
            if rest.is_empty() {
                return Err(err("an operator needs a version after it"));
            }
            let core = rest.split(['-', '+']).next().unwrap_or(rest);
            let parts = core.split('.').count();
            let version = Version::parse_lenient(rest).map_err(|e| err(&e.to_string()))?;
            let op = match op {
                Op::MinorOnly if parts == 3 => Op::PatchOnly,
                other => other,
            };
            terms.push(Term { op, version });
        }
        Ok(Constraints { terms })
    }

    /// Whether no term constrains anything.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Adds every term of `other` (both must then hold), as Terraform does when several modules
    /// constrain the same provider.
    pub fn merge(&mut self, other: &Constraints) {
        for term in &other.terms {
            if !self.terms.contains(term) {
                self.terms.push(term.clone());
            }
        }
    }

    /// Whether a filter of these constraints keeps `version`: [`Constraints::allows`], except
    /// that no constraint at all keeps every version, prereleases too (a command-line filter
    /// given as a bare name).
    pub fn selects(&self, version: &Version) -> bool {
        self.is_empty() || self.allows(version)
    }

    /// Whether `version` meets every term (prereleases only when named exactly).
    pub fn allows(&self, version: &Version) -> bool {
        if version.prerelease().is_some()
            && !self
                .terms
                .iter()
                .any(|t| t.op == Op::Eq && precedence(&t.version, version) == Ordering::Equal)
        {
            return false;
        }
        self.terms.iter().all(|t| t.allows(version))
    }

    /// Whether `version` meets every term by order alone, prereleases included: what a policy
    /// rule covers (`>= 3.6.1` covers `3.7.0-beta1`, which a CLI would not select by it).
    pub fn covers(&self, version: &Version) -> bool {
        self.terms.iter().all(|t| t.allows(version))
    }

    /// The newest of `versions` that the constraints allow.
    pub fn newest<'a>(
        &self,
        versions: impl IntoIterator<Item = &'a Version>,
    ) -> Option<&'a Version> {
        versions.into_iter().filter(|v| self.allows(v)).max()
    }
}

impl Term {
    fn allows(&self, v: &Version) -> bool {
        let ord = precedence(v, &self.version);
        match self.op {
            Op::Eq => ord == Ordering::Equal,
            Op::Ne => ord != Ordering::Equal,
            Op::Gt => ord == Ordering::Greater,
            Op::Ge => ord != Ordering::Less,
            Op::Lt => ord == Ordering::Less,
            Op::Le => ord != Ordering::Greater,
            Op::MinorOnly | Op::PatchOnly => {
                if ord == Ordering::Less {
                    return false;
                }
                let (major, minor, _) = self.version.numbers();
                let (v_major, v_minor, _) = v.numbers();
                if self.op == Op::MinorOnly {
                    v_major == major
                } else {
                    v_major == major && v_minor == minor
                }
            }
        }
    }
}

/// Semantic-versioning precedence, ignoring build metadata.
fn precedence(a: &Version, b: &Version) -> Ordering {
    a.precedence(b)
}

impl fmt::Display for Constraints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut terms: Vec<String> = self
            .terms
            .iter()
            .map(|t| {
                let (major, minor, _) = t.version.numbers();
                let prefix = match t.op {
                    Op::Eq => "",
                    Op::Ne => "!= ",
                    Op::Gt => "> ",
                    Op::Ge => ">= ",
                    Op::Lt => "< ",
                    Op::Le => "<= ",
                    Op::MinorOnly | Op::PatchOnly => "~> ",
                };
                if t.op == Op::MinorOnly {
                    let mut text = format!("{prefix}{major}.{minor}");
                    // Keep prerelease and build parts, which follow the three numbers.
                    if let Some(idx) = t.version.as_str().find(['-', '+']) {
                        text.push_str(&t.version.as_str()[idx..]);
                    }
                    text
                } else {
                    format!("{prefix}{}", t.version)
                }
            })
            .collect();
        terms.sort();
        terms.dedup();
        f.write_str(&terms.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    fn allows(c: &str, version: &str) -> bool {
        Constraints::parse(c).unwrap().allows(&v(version))
    }

    #[test]
    fn operators() {
        assert!(allows("1.2.3", "1.2.3"));
        assert!(!allows("1.2.3", "1.2.4"));
        assert!(allows("= 1.2.3", "1.2.3"));
        assert!(allows("=1.2", "1.2.0"));
        assert!(allows("!= 1.2.3", "1.2.4"));
        assert!(!allows("!= 1.2.3", "1.2.3"));
        assert!(allows("> 1.2.3", "1.2.4"));
        assert!(!allows("> 1.2.3", "1.2.3"));
        assert!(allows(">= 1.2.3", "1.2.3"));
        assert!(!allows(">= 1.2.3", "1.2.2"));
        assert!(allows("< 2", "1.99.99"));
        assert!(!allows("< 2", "2.0.0"));
        assert!(allows("<= 2.0.0", "2.0.0"));
        assert!(!allows("<= 2.0.0", "2.0.1"));
        assert!(allows(">= 1.0, < 2.0", "1.5.0"));
        assert!(!allows(">= 1.0, < 2.0", "2.0.0"));
        assert!(!allows(">= 1.0, != 1.5.0", "1.5.0"));
    }

    #[test]
    fn pessimistic() {
        // ~> 1.2 means >= 1.2.0, < 2.0.0
        assert!(allows("~> 1.2", "1.2.0"));
        assert!(allows("~> 1.2", "1.9.7"));
        assert!(!allows("~> 1.2", "1.1.9"));
        assert!(!allows("~> 1.2", "2.0.0"));
        // ~> 1.2.3 means >= 1.2.3, < 1.3.0
        assert!(allows("~> 1.2.3", "1.2.3"));
        assert!(allows("~> 1.2.3", "1.2.10"));
        assert!(!allows("~> 1.2.3", "1.2.2"));
        assert!(!allows("~> 1.2.3", "1.3.0"));
        // ~> 1 reads as ~> 1.0
        assert!(allows("~> 1", "1.4.0"));
        assert!(!allows("~> 1", "2.0.0"));
        assert!(allows("~>0.1", "0.9.0"));
        assert!(!allows("~>0.1", "1.0.0"));
    }

    #[test]
    fn prereleases_only_when_named_exactly() {
        assert!(!allows("", "2.0.0-beta.1"));
        assert!(!allows(">= 1.0.0", "2.0.0-beta.1"));
        assert!(!allows("~> 2.0", "2.0.0-beta.1"));
        assert!(allows("2.0.0-beta.1", "2.0.0-beta.1"));
        assert!(allows("= 2.0.0-beta.1", "2.0.0-beta.1"));
        assert!(!allows("2.0.0-beta.1", "2.0.0-beta.2"));
        assert!(!allows("2.0.0-beta.1", "2.0.0"));
        // Named exactly, but another term excludes it.
        assert!(!allows("2.0.0-beta.1, < 2.0.0-alpha", "2.0.0-beta.1"));
        // Prerelease boundaries order by precedence for release versions.
        assert!(allows(">= 2.0.0-beta.1", "2.0.0"));
        assert!(!allows("< 2.0.0-beta.1", "2.0.0"));
    }

    #[test]
    fn build_metadata_is_ignored() {
        assert!(allows("1.2.3", "1.2.3+linux"));
        assert!(allows("1.2.3+other", "1.2.3"));
        assert!(!allows("> 1.2.3", "1.2.3+b.2"));
    }

    #[test]
    fn newest_match_wins() {
        let all: Vec<Version> = ["1.0.0", "1.1.0", "1.10.0", "2.0.0", "2.1.0-rc.1", "0.9.0"]
            .iter()
            .map(|s| v(s))
            .collect();
        let pick = |c: &str| {
            Constraints::parse(c)
                .unwrap()
                .newest(&all)
                .map(|v| v.to_string())
        };
        assert_eq!(pick("").as_deref(), Some("2.0.0"));
        assert_eq!(pick("~> 1.0").as_deref(), Some("1.10.0"));
        assert_eq!(pick("~> 1.0.0").as_deref(), Some("1.0.0"));
        assert_eq!(pick("< 1.0.0").as_deref(), Some("0.9.0"));
        assert_eq!(pick(">= 2.1.0").as_deref(), None);
        assert_eq!(pick("2.1.0-rc.1").as_deref(), Some("2.1.0-rc.1"));
        assert_eq!(pick("> 3").as_deref(), None);
    }

    #[test]
    fn merged_constraints_all_hold() {
        let mut c = Constraints::parse("~> 1.0").unwrap();
        c.merge(&Constraints::parse(">= 1.5, != 1.6.0").unwrap());
        c.merge(&Constraints::parse("~> 1.0").unwrap());
        assert!(c.allows(&v("1.5.0")));
        assert!(!c.allows(&v("1.4.0")));
        assert!(!c.allows(&v("1.6.0")));
        assert!(!c.allows(&v("2.0.0")));
        assert_eq!(c.to_string(), "!= 1.6.0, >= 1.5.0, ~> 1.0");
    }

    #[test]
    fn normalised_form_matches_terraform() {
        let norm = |c: &str| Constraints::parse(c).unwrap().to_string();
        assert_eq!(norm("~> 1.0"), "~> 1.0");
        assert_eq!(norm("~>1"), "~> 1.0");
        assert_eq!(norm("~> 1.2.3"), "~> 1.2.3");
        assert_eq!(norm("0.1.0"), "0.1.0");
        assert_eq!(norm("= 1.2"), "1.2.0");
        assert_eq!(norm(">=1.0,<2.0"), "< 2.0.0, >= 1.0.0");
        assert_eq!(norm(">= 1.0.0, >= 1.0"), ">= 1.0.0");
        assert_eq!(norm("!= 2.0.0-beta"), "!= 2.0.0-beta");
        assert_eq!(norm(""), "");
    }

    #[test]
    fn bad_constraints_are_refused_with_the_input() {
        for bad in ["~>", "1.2.3.4", ">= x", "1.0,,2.0", ">> 1.0", "01.0"] {
            let e = Constraints::parse(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }
}
