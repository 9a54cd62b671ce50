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
//! (`[publishing]`); a rule without `publish`, and a client no rule matches, may publish
//! nothing. A pattern names its kind: `providers:namespace/type` matches providers alone,
//! `modules:namespace/name/system` modules alone. A pattern without a kind (as rules were
//! written before kinds) keeps its meaning: it is matched against a provider's
//! `namespace/type` and a module's `namespace/name/system` alike, and since `*` matches `/`
//! too, `acme/net*` grants the provider `acme/network` and the module `acme/net-x/aws`
//! (`acme/*` is all of acme's).
//!
//! `approve = true` lets its clients waive, hold and revoke versions under the version policy
//! (see [`crate::policy`]) through the API and the policy page; a rule without it, and a client
//! no rule matches, may not: an approval names who made it, so it needs a rule that says so.

use std::sync::Arc;

use serde::Deserialize;

use super::{AuthConfigError, Globs, Patterns};

/// One `[[auth.rules]]` entry as written.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
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
    /// Whether they may waive, hold and revoke versions under the version policy (`POST
    /// -/api/v1/policy/approvals` and the policy page's forms); no when absent.
    #[serde(default)]
    pub approve: bool,
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
    publish: Option<Publish>,
    /// Whether its clients may approve versions under the version policy.
    pub approve: bool,
}

/// A rule's `publish` patterns, by the kind they grant (a pattern without a kind is in both).
#[derive(Debug)]
struct Publish {
    providers: Globs,
    modules: Globs,
}

/// What is published: a provider or a module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishKind {
    Provider,
    Module,
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
                .map(|p| {
                    let list = p.to_vec();
                    if list.is_empty() {
                        return Err(invalid("publish", "needs at least one pattern".into()));
                    }
                    publish_patterns(&list).map_err(|e| invalid("publish", e))
                })
                .transpose()?,
            approve: self.approve,
        })
    }
}

/// Splits `publish` patterns by kind: `providers:` ones (`namespace/type`), `modules:` ones
/// (`namespace/name/system`), and those without a kind, which go to both.
fn publish_patterns(list: &[String]) -> Result<Publish, String> {
    let (mut providers, mut modules) = (Vec::new(), Vec::new());
    for pattern in list {
        match pattern.split_once(':') {
            Some(("providers", p)) if p.matches('/').count() == 1 => providers.push(p.to_string()),
            Some(("modules", p)) if p.matches('/').count() == 2 => modules.push(p.to_string()),
            Some(("providers", _)) => {
                return Err(format!(
                    "pattern {pattern:?}: a provider pattern is providers:<namespace>/<type>"
                ));
            }
            Some(("modules", _)) => {
                return Err(format!(
                    "pattern {pattern:?}: a module pattern is \
                     modules:<namespace>/<name>/<system>"
                ));
            }
            Some(_) => {
                return Err(format!(
                    "pattern {pattern:?}: the kind before : is providers or modules"
                ));
            }
            None => {
                providers.push(pattern.clone());
                modules.push(pattern.clone());
            }
        }
    }
    Ok(Publish {
        providers: Globs::new(&providers)?,
        modules: Globs::new(&modules)?,
    })
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

    /// Whether its clients may publish the provider `namespace/type` or the module
    /// `namespace/name/system`.
    pub fn allows_publish(&self, kind: PublishKind, what: &str) -> bool {
        self.publish.as_ref().is_some_and(|p| match kind {
            PublishKind::Provider => p.providers.is_match(what),
            PublishKind::Module => p.modules.is_match(what),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::PublishKind::{Module, Provider};
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
        assert!(ci.allows_publish(Provider, "acme/foo"));
        assert!(ci.allows_publish(Module, "acme/vpc/aws"));
        assert!(!ci.allows_publish(Provider, "acme/bar"));
        let anyone = set.for_client("token:0011").unwrap();
        assert!(
            !anyone.allows_publish(Provider, "acme/foo"),
            "no patterns: nothing"
        );
        assert!(!Rules::default().any_publish());
    }

    #[test]
    fn only_a_rule_that_says_so_lets_a_client_approve() {
        let set = rules(
            r#"
            [[rules]]
            name = "platform"
            clients = "platform"
            approve = true
            [[rules]]
            name = "everyone"
            clients = "*"
            "#,
        )
        .unwrap();
        assert!(set.for_client("platform").unwrap().approve);
        assert!(!set.for_client("ci").unwrap().approve, "no by default");
        assert!(rules("[[rules]]\nname = \"a\"\nclients = \"x\"\napprove = \"yes\"").is_err());
    }

    #[test]
    fn publish_patterns_name_their_kind_and_old_ones_keep_their_meaning() {
        let set = rules(
            r#"
            [[rules]]
            name = "net-providers"
            clients = "net-providers"
            publish = ["providers:acme/net*"]
            [[rules]]
            name = "net-modules"
            clients = "net-modules"
            publish = ["modules:acme/net*/aws"]
            [[rules]]
            name = "old"
            clients = "old"
            publish = ["acme/net*"]
            "#,
        )
        .unwrap();
        let may = |client: &str, kind, what: &str| {
            set.for_client(client).unwrap().allows_publish(kind, what)
        };
        assert!(may("net-providers", Provider, "acme/network"));
        assert!(!may("net-providers", Module, "acme/net-x/aws"));
        assert!(!may("net-providers", Module, "acme/network/aws"));
        assert!(may("net-modules", Module, "acme/net-x/aws"));
        assert!(!may("net-modules", Module, "acme/net-x/gcp"));
        assert!(!may("net-modules", Provider, "acme/network"));
        // Without a kind: both, `*` matching `/` too.
        assert!(may("old", Provider, "acme/network"));
        assert!(may("old", Module, "acme/net-x/aws"));
        assert!(!may("old", Provider, "acme/vpc"));
        for (pattern, says) in [
            ("provider:acme/x", "providers or modules"),
            ("providers:acme/x/aws", "providers:<namespace>/<type>"),
            ("modules:acme/x", "modules:<namespace>/<name>/<system>"),
        ] {
            let err = rules(&format!(
                "[[rules]]\nname = \"a\"\nclients = \"x\"\npublish = [\"{pattern}\"]"
            ))
            .unwrap_err();
            assert!(err.contains("auth.rules[0].publish"), "{err}");
            assert!(err.contains(says), "{pattern}: {err}");
        }
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
