//! What each client may do (`[[auth.rules]]`): whether it may cause a fill from an origin or
//! only read what is already cached, and which providers and modules it may get.
//!
//! Rules are tried in the order written; the first whose `clients` patterns match the client's
//! name (a `[[auth.clients]]` name, `token:<fingerprint>`, or `<issuer>:<name claim>` for an ID
//! token) decides. A client no rule matches may do everything, as without rules, so a site that
//! wants a default writes a last rule with `clients = ["*"]`. Patterns are exact or globs (see
//! [`Globs`]): `providers` match `hostname/namespace/type`, `modules`
//! `hostname/namespace/name/system`, `git` the repositories of the git door, `host/path` as a
//! `git::https://` source names them (`github.com/acme/*`); a rule without `providers` (or
//! `modules`, or `git`) allows all of them.
//!
//! `publish` is the other way round: what its clients may publish to the private namespaces
//! (`[publishing]`), as `namespace/type` for providers and `namespace/name/system` for modules
//! (`acme/*` is all of acme's); a rule without `publish`, and a client no rule matches, may
//! publish nothing.

use std::sync::Arc;

use serde::Deserialize;

use super::{AuthConfigError, Globs, Patterns};

/// One `[[auth.rules]]` entry as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Named in refusals and in the logs.
    pub name: String,
    /// The clients it is for: patterns over client names.
    pub clients: Patterns,
    /// Whether these clients may cause fetches from origins (else they read the cache only).
    #[serde(default = "yes")]
    pub fill: bool,
    /// The providers they may get (`hostname/namespace/type` patterns); all when absent.
    #[serde(default)]
    pub providers: Option<Patterns>,
    /// The modules they may get (`hostname/namespace/name/system` patterns); all when absent.
    #[serde(default)]
    pub modules: Option<Patterns>,
    /// The git repositories they may fetch (`host/path` patterns); all when absent.
    #[serde(default)]
    pub git: Option<Patterns>,
    /// What they may publish (`namespace/type`, `namespace/name/system` patterns); nothing
    /// when absent.
    #[serde(default)]
    pub publish: Option<Patterns>,
}

fn yes() -> bool {
    true
}

/// A checked rule.
#[derive(Debug)]
pub struct Rule {
    pub name: String,
    clients: Globs,
    /// Whether its clients may cause fetches from origins.
    pub fill: bool,
    providers: Option<Globs>,
    modules: Option<Globs>,
    git: Option<Globs>,
    publish: Option<Globs>,
}

/// The checked rules, in order.
#[derive(Debug, Clone, Default)]
pub struct Rules(Vec<Arc<Rule>>);

impl RuleConfig {
    /// Checks one entry (`auth.rules[i]`).
    pub fn validate(&self, i: usize) -> Result<Rule, AuthConfigError> {
        let invalid = |field: &str, message: String| AuthConfigError {
            key: format!("auth.rules[{i}].{field}"),
            message,
        };
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !name_ok {
            return Err(invalid(
                "name",
                "must be 1 to 64 letters, digits, -, _ or .".into(),
            ));
        }
        let globs = |field: &str, patterns: &Patterns| {
            let list = patterns.to_vec();
            if list.is_empty() {
                return Err(invalid(field, "needs at least one pattern".into()));
            }
            Globs::new(&list).map_err(|e| invalid(field, e))
        };
        Ok(Rule {
            name: self.name.clone(),
            clients: globs("clients", &self.clients)?,
            fill: self.fill,
            providers: self
                .providers
                .as_ref()
                .map(|p| globs("providers", p))
                .transpose()?,
            modules: self
                .modules
                .as_ref()
                .map(|p| globs("modules", p))
                .transpose()?,
            git: self.git.as_ref().map(|p| globs("git", p)).transpose()?,
            publish: self
                .publish
                .as_ref()
                .map(|p| globs("publish", p))
                .transpose()?,
        })
    }
}

impl Rules {
    /// Checks `[[auth.rules]]`; two rules may not share a name.
    pub fn new(configs: &[RuleConfig]) -> Result<Rules, AuthConfigError> {
        let mut rules: Vec<Arc<Rule>> = Vec::new();
        for (i, config) in configs.iter().enumerate() {
            let rule = config.validate(i)?;
            if rules.iter().any(|r| r.name == rule.name) {
                return Err(AuthConfigError {
                    key: format!("auth.rules[{i}].name"),
                    message: format!("{} is the name of an earlier rule", rule.name),
                });
            }
            rules.push(Arc::new(rule));
        }
        Ok(Rules(rules))
    }

    /// The rule for a client: the first whose `clients` match its name.
    pub fn for_client(&self, name: &str) -> Option<Arc<Rule>> {
        self.0.iter().find(|r| r.clients.is_match(name)).cloned()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether any rule lets its clients publish something.
    pub fn any_publish(&self) -> bool {
        self.0.iter().any(|r| r.publish.is_some())
    }
}

impl Rule {
    /// Whether its clients may get the provider `hostname/namespace/type`.
    pub fn allows_provider(&self, addr: &str) -> bool {
        self.providers.as_ref().is_none_or(|g| g.is_match(addr))
    }

    /// Whether its clients may get the module `hostname/namespace/name/system`.
    pub fn allows_module(&self, addr: &str) -> bool {
        self.modules.as_ref().is_none_or(|g| g.is_match(addr))
    }

    /// Whether its clients may fetch the git repository `host/path`.
    pub fn allows_git(&self, repo: &str) -> bool {
        self.git.as_ref().is_none_or(|g| g.is_match(repo))
    }

    /// Whether its clients may publish `namespace/type` or `namespace/name/system`.
    pub fn allows_publish(&self, what: &str) -> bool {
        self.publish.as_ref().is_some_and(|g| g.is_match(what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &str) -> Result<Rules, String> {
        #[derive(Deserialize)]
        struct File {
            rules: Vec<RuleConfig>,
        }
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        Rules::new(&file.rules).map_err(|e| e.to_string())
    }

    #[test]
    fn only_publish_patterns_let_a_client_publish() {
        let set = rules(
            r#"
            [[rules]]
            name = "releases"
            clients = "github:repo:acme/*"
            publish = ["acme/foo", "acme/vpc/*"]
            [[rules]]
            name = "everyone"
            clients = "*"
            "#,
        )
        .unwrap();
        assert!(set.any_publish());
        let ci = set
            .for_client("github:repo:acme/x:ref:refs/tags/v1")
            .unwrap();
        assert!(ci.allows_publish("acme/foo"));
        assert!(ci.allows_publish("acme/vpc/aws"));
        assert!(!ci.allows_publish("acme/bar"));
        let anyone = set.for_client("token:0011").unwrap();
        assert!(!anyone.allows_publish("acme/foo"), "no patterns: nothing");
        assert!(!Rules::default().any_publish());
    }

    #[test]
    fn the_first_matching_rule_decides() {
        let err = rules(
            r#"
            [[rules]]
            name = "readers"
            clients = "*"
            modules = []
            "#,
        )
        .unwrap_err();
        assert!(err.contains("auth.rules[0].modules"), "{err}");
        let set = rules(
            r#"
            [[rules]]
            name = "platform"
            clients = ["platform", "github:repo:acme/platform:*"]
            [[rules]]
            name = "readers"
            clients = "*"
            fill = false
            providers = ["registry.terraform.io/hashicorp/*"]
            "#,
        )
        .unwrap();
        let platform = set
            .for_client("github:repo:acme/platform:ref:refs/heads/main")
            .unwrap();
        assert_eq!(platform.name, "platform");
        assert!(platform.fill);
        assert!(platform.allows_provider("registry.terraform.io/acme/x"));
        let reader = set.for_client("token:0011223344556677").unwrap();
        assert_eq!(reader.name, "readers");
        assert!(!reader.fill);
        assert!(reader.allows_provider("registry.terraform.io/hashicorp/aws"));
        assert!(!reader.allows_provider("registry.terraform.io/acme/aws"));
        assert!(reader.allows_module("registry.terraform.io/acme/vpc/aws"));
        assert!(Rules::default().for_client("anyone").is_none());
    }

    #[test]
    fn bad_rules_name_their_key() {
        let err = rules("[[rules]]\nname = \"a b\"\nclients = \"*\"").unwrap_err();
        assert!(err.contains("auth.rules[0].name"), "{err}");
        let err = rules("[[rules]]\nname = \"a\"\nclients = \"[\"").unwrap_err();
        assert!(err.contains("auth.rules[0].clients"), "{err}");
        let err = rules(
            "[[rules]]\nname = \"a\"\nclients = \"x\"\n[[rules]]\nname = \"a\"\nclients = \"y\"",
        )
        .unwrap_err();
        assert!(err.contains("auth.rules[1].name"), "{err}");
        let err = rules("[[rules]]\nname = \"a\"\nclients = \"x\"\nfil = true").unwrap_err();
        assert!(err.contains("fil"), "{err}");
    }
}
