//! Which versions the mirror admits: the platform team's rules, a cooldown for new versions,
//! and operators' approvals, as one decision every door asks for.
//!
//! A **rule** (`[[policy.rules]]`, or `[[rules]]` in `policy.rules_file`) names what it is about
//! by address patterns per kind (`providers`: `hostname/namespace/type`, `modules`:
//! `hostname/namespace/name/system`, `releases`: `terraform` or `tofu`, `git`: `host/path`),
//! optionally narrows it to `versions` (a constraint in the CLIs' own syntax, matched by order so
//! that `>= 3.6.1` covers `3.7.0-beta1` too), and says what to do: `deny`, `hold` (refused until
//! an operator waives it), `allow`, or `warn` (a dry run: counted and logged, never decisive).
//! It carries a `reason`, an optional `link` (an advisory) and an optional `expires`, after which
//! it no longer matches.
//!
//! **Precedence**, for one version of one thing:
//! 1. an operator's approval of exactly that version (the latest unexpired one): a waiver admits
//!    it, whatever the rules and the cooldown say; a hold refuses it;
//! 2. else the matching rules that decide: `deny` beats `hold`, which beats `allow`;
//! 3. else `policy.default` (`allow`, or `deny` for an allow-list);
//! 4. a version admitted by step 2 or 3 is then held while younger than its cooldown: the
//!    largest `min_age` among the matching rules that set one, else `policy.min_age`.
//!
//! A version's age is counted from when this mirror first saw it in its origin's list
//! ([`crate::records::FirstSeen`]); a version that was already listed when the mirror first
//! listed the thing has no known age and is taken as old.
//!
//! Evaluation costs a request nothing when no rule names the kind, no approval exists and no
//! cooldown is set; otherwise the rules that match an address are found once (one `GlobSet`
//! pass per kind, remembered per address) and only those are looked at per version.

pub mod approvals;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::address::Version;
use crate::clock::Clock;
use crate::constraints::Constraints;

pub use approvals::{Approval, ApprovalAction, Approvals};

/// What a rule or an approval is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Provider,
    Module,
    Release,
    Git,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Provider, Kind::Module, Kind::Release, Kind::Git];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Provider => "provider",
            Kind::Module => "module",
            Kind::Release => "release",
            Kind::Git => "git",
        }
    }

    /// The key a rule names this kind's patterns under.
    pub fn key(self) -> &'static str {
        match self {
            Kind::Provider => "providers",
            Kind::Module => "modules",
            Kind::Release => "releases",
            Kind::Git => "git",
        }
    }

    /// Reads a kind as the CLI and the API write it (`provider`, `module`, `release`, `git`).
    pub fn parse(text: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == text)
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a rule does with the versions it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Refused, for as long as the rule stands.
    Deny,
    /// Refused until an operator waives the version.
    Hold,
    /// Admitted (after its cooldown).
    Allow,
    /// Nothing changes: the match is counted and logged (a dry run of a deny or a cooldown).
    Warn,
}

impl Action {
    pub const ALL: [Action; 4] = [Action::Deny, Action::Hold, Action::Allow, Action::Warn];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Deny => "deny",
            Action::Hold => "hold",
            Action::Allow => "allow",
            Action::Warn => "warn",
        }
    }

    /// Which of two deciding actions wins: deny, then hold, then allow.
    fn strength(self) -> u8 {
        match self {
            Action::Deny => 3,
            Action::Hold => 2,
            Action::Allow => 1,
            Action::Warn => 0,
        }
    }
}

/// `policy.default`: what happens to a version no deciding rule matches.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum DefaultAction {
    #[default]
    Allow,
    Deny,
}

/// One rule as written.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Named in refusals, logs, metrics and the pages; unique.
    pub name: String,
    /// Provider addresses the rule matches (`hostname/namespace/type`, globs with `*` and `?`).
    #[serde(default)]
    pub providers: Vec<String>,
    /// Module addresses the rule matches (`hostname/namespace/name/system`, globs).
    #[serde(default)]
    pub modules: Vec<String>,
    /// CLI releases the rule matches (`terraform`, `tofu`, globs).
    #[serde(default)]
    pub releases: Vec<String>,
    /// Git repositories the rule matches (`host/path`, globs).
    #[serde(default)]
    pub git: Vec<String>,
    /// A version constraint (`"3.6.1"`, `">= 3.6.1, < 3.7.0"`); every version when absent.
    #[serde(default)]
    pub versions: Option<String>,
    /// What the rule does with the versions it matches: `deny` (refused), `hold` (refused until
    /// an operator waives the version), `allow`, or `warn` (counted and logged only).
    pub action: Action,
    /// This rule's cooldown for the versions it matches.
    #[serde(default, with = "humantime_serde")]
    #[schemars(with = "Option<String>", extend("format" = "duration"))]
    pub min_age: Option<Duration>,
    /// Why, shown to whoever is refused.
    #[serde(default)]
    pub reason: Option<String>,
    /// An advisory or ticket (`https://` URL).
    #[serde(default)]
    pub link: Option<String>,
    /// An RFC 3339 time or a date (`2027-01-31`, midnight UTC) after which the rule no longer
    /// matches.
    #[serde(default)]
    pub expires: Option<String>,
}

/// `[policy]` as written in the configuration file.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// The cooldown of every version no rule gives one of its own (`0s`: none).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "String", extend("format" = "duration"))]
    pub min_age: Duration,
    /// What a version no deciding rule matches gets.
    pub default: DefaultAction,
    /// A file of `[[rules]]`, read at start and again whenever it changes (and on SIGHUP).
    #[schemars(extend("format" = "path"))]
    pub rules_file: Option<PathBuf>,
    /// The rules, tried together: an operator's approval of a version first, then deny beats
    /// hold beats allow among matching rules, then `default`; `warn` rules never decide.
    pub rules: Vec<RuleConfig>,
}

/// `[policy]`, validated.
#[derive(Debug, Clone)]
pub struct PolicySettings {
    pub min_age: Duration,
    pub default: DefaultAction,
    pub rules_file: Option<PathBuf>,
    /// The configuration file's own rules (the rules file's come after them).
    pub rules: Vec<Arc<Rule>>,
    /// The rules file's rules, as read when the configuration was checked.
    pub file_rules: Vec<Arc<Rule>>,
}

impl Default for PolicySettings {
    fn default() -> Self {
        PolicySettings {
            min_age: Duration::ZERO,
            default: DefaultAction::Allow,
            rules_file: None,
            rules: Vec::new(),
            file_rules: Vec::new(),
        }
    }
}

/// A bad rule or `[policy]` setting: where (the key, or the rules file and line) and why.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{place}: {message}")]
pub struct PolicyError {
    pub place: String,
    pub message: String,
}

impl PolicyConfig {
    pub fn validate(&self) -> Result<PolicySettings, PolicyError> {
        let rules = self
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| Rule::new(r, format!("policy.rules[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let file_rules = match &self.rules_file {
            Some(path) if path.as_os_str().is_empty() => {
                return Err(PolicyError {
                    place: "policy.rules_file".into(),
                    message: "is empty".into(),
                });
            }
            Some(path) => read_rules_file(path)?,
            None => Vec::new(),
        };
        unique_names(&[rules.clone(), file_rules.clone()].concat())?;
        Ok(PolicySettings {
            min_age: self.min_age,
            default: self.default,
            rules_file: self.rules_file.clone(),
            rules,
            file_rules,
        })
    }
}

fn unique_names(rules: &[Arc<Rule>]) -> Result<(), PolicyError> {
    let mut seen: HashMap<&str, &str> = HashMap::new();
    for r in rules {
        if let Some(first) = seen.insert(&r.name, &r.place) {
            return Err(PolicyError {
                place: r.place.clone(),
                message: format!("rule name {:?} is already used at {first}", r.name),
            });
        }
    }
    Ok(())
}

/// A checked rule.
#[derive(Debug)]
pub struct Rule {
    pub name: String,
    pub action: Action,
    /// Patterns per kind, as written.
    pub patterns: [Vec<String>; 4],
    pub versions: Option<Constraints>,
    /// The constraint as written.
    pub versions_text: Option<String>,
    pub min_age: Option<Duration>,
    pub reason: Option<String>,
    pub link: Option<String>,
    /// Unix seconds after which the rule no longer matches.
    pub expires: Option<u64>,
    /// Where it was written: `policy.rules[2]`, or `<file>:<line>`.
    pub place: String,
}

impl Rule {
    /// Checks one rule as written at `place`.
    pub fn new(c: &RuleConfig, place: String) -> Result<Arc<Rule>, PolicyError> {
        let bad = |message: String| PolicyError {
            place: place.clone(),
            message,
        };
        if c.name.is_empty() || c.name.len() > 100 || c.name.chars().any(|ch| ch.is_control()) {
            return Err(bad(
                "name must be 1 to 100 characters without control characters".into(),
            ));
        }
        let patterns = [
            c.providers.clone(),
            c.modules.clone(),
            c.releases.clone(),
            c.git.clone(),
        ];
        if patterns.iter().all(Vec::is_empty) {
            return Err(bad(format!(
                "rule {:?} names nothing: give providers, modules, releases or git patterns (\"*\" for all)",
                c.name
            )));
        }
        for (kind, list) in Kind::ALL.into_iter().zip(&patterns) {
            for p in list {
                glob(p).map_err(|e| bad(format!("{}: {e}", kind.key())))?;
            }
        }
        let versions = c
            .versions
            .as_deref()
            .map(Constraints::parse)
            .transpose()
            .map_err(|e| bad(format!("versions: {e}")))?;
        if let Some(link) = &c.link {
            match url::Url::parse(link) {
                Ok(u) if u.scheme() == "https" || u.scheme() == "http" => {}
                _ => return Err(bad(format!("link {link:?} is not an http(s) URL"))),
            }
        }
        let expires = c
            .expires
            .as_deref()
            .map(parse_time)
            .transpose()
            .map_err(|e| bad(format!("expires: {e}")))?;
        Ok(Arc::new(Rule {
            name: c.name.clone(),
            action: c.action,
            patterns,
            versions,
            versions_text: c.versions.clone(),
            min_age: c.min_age,
            reason: c.reason.clone(),
            link: c.link.clone(),
            expires,
            place,
        }))
    }

    /// Whether the rule covers `version` (every version without a constraint).
    fn covers(&self, version: Option<&Version>) -> bool {
        match (&self.versions, version) {
            (None, _) => true,
            (Some(c), Some(v)) => c.covers(v),
            // A rule about some versions says nothing about a thing without versions.
            (Some(_), None) => false,
        }
    }

    fn expired(&self, now: u64) -> bool {
        self.expires.is_some_and(|t| t <= now)
    }
}

fn glob(pattern: &str) -> Result<globset::Glob, String> {
    globset::GlobBuilder::new(pattern)
        .literal_separator(false)
        .backslash_escape(true)
        .case_insensitive(true)
        .build()
        .map_err(|e| format!("pattern {pattern:?}: {e}"))
}

/// Reads an RFC 3339 time, or a date (midnight UTC), as Unix seconds.
pub fn parse_time(text: &str) -> Result<u64, String> {
    let full = if text.len() == 10 {
        format!("{text}T00:00:00Z")
    } else {
        text.to_string()
    };
    humantime::parse_rfc3339_weak(&full)
        .map(crate::clock::unix_secs)
        .map_err(|e| format!("{text:?} is not an RFC 3339 time or a date: {e}"))
}

/// Unix seconds as RFC 3339 (UTC, seconds).
pub fn format_time(secs: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(secs)).to_string()
}

/// The rules file as written: `[[rules]]` entries.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default)]
    rules: Vec<toml::Spanned<RuleConfig>>,
}

/// Reads and checks a rules file; an error names the file and the line of the rule at fault.
pub fn read_rules_file(path: &Path) -> Result<Vec<Arc<Rule>>, PolicyError> {
    let text = std::fs::read_to_string(path).map_err(|e| PolicyError {
        place: path.display().to_string(),
        message: format!("cannot read the rules file: {e}"),
    })?;
    parse_rules_file(path, &text)
}

/// Checks the text of a rules file read from `path`.
pub fn parse_rules_file(path: &Path, text: &str) -> Result<Vec<Arc<Rule>>, PolicyError> {
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let file: RulesFile = toml::from_str(text).map_err(|e| PolicyError {
        place: match e.span() {
            Some(span) => format!("{}:{}", path.display(), line_of(span.start)),
            None => path.display().to_string(),
        },
        message: e.message().to_string(),
    })?;
    file.rules
        .iter()
        .map(|spanned| {
            let line = line_of(spanned.span().start);
            Rule::new(spanned.get_ref(), format!("{}:{line}", path.display()))
        })
        .collect()
}

/// A set of rules ready to be matched: one `GlobSet` per kind, and the rules matching each
/// address asked about, remembered (with the set, so a reload never mixes two sets).
pub struct RuleSet {
    rules: Vec<Arc<Rule>>,
    sets: [globset::GlobSet; 4],
    /// For each kind, the rule each pattern of its set belongs to.
    owners: [Vec<usize>; 4],
    matches: moka::sync::Cache<(Kind, String), Arc<[usize]>>,
}

impl std::fmt::Debug for RuleSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleSet")
            .field("rules", &self.rules.len())
            .finish()
    }
}

impl RuleSet {
    /// The rules, in order: the configuration's, then the rules file's.
    pub fn new(rules: Vec<Arc<Rule>>) -> Result<RuleSet, PolicyError> {
        unique_names(&rules)?;
        let mut sets: [globset::GlobSetBuilder; 4] =
            std::array::from_fn(|_| globset::GlobSetBuilder::new());
        let mut owners: [Vec<usize>; 4] = Default::default();
        for (i, rule) in rules.iter().enumerate() {
            for kind in Kind::ALL {
                for p in &rule.patterns[kind.index()] {
                    let g = glob(p).map_err(|message| PolicyError {
                        place: rule.place.clone(),
                        message,
                    })?;
                    sets[kind.index()].add(g);
                    owners[kind.index()].push(i);
                }
            }
        }
        let build = |b: &globset::GlobSetBuilder| {
            b.build().map_err(|e| PolicyError {
                place: "policy".into(),
                message: e.to_string(),
            })
        };
        Ok(RuleSet {
            sets: [
                build(&sets[0])?,
                build(&sets[1])?,
                build(&sets[2])?,
                build(&sets[3])?,
            ],
            rules,
            owners,
            matches: moka::sync::Cache::new(100_000),
        })
    }

    pub fn rules(&self) -> &[Arc<Rule>] {
        &self.rules
    }

    fn names_kind(&self, kind: Kind) -> bool {
        !self.owners[kind.index()].is_empty()
    }

    /// The rules whose patterns match `address` (lowercase), in order: remembered.
    fn matching(&self, kind: Kind, address: String) -> Arc<[usize]> {
        if !self.names_kind(kind) {
            return Arc::from([]);
        }
        let key = (kind, address);
        if let Some(m) = self.matches.get(&key) {
            return m;
        }
        let m = self.match_now(kind, &key.1);
        self.matches.insert(key, m.clone());
        m
    }

    fn match_now(&self, kind: Kind, address: &str) -> Arc<[usize]> {
        let mut found: Vec<usize> = self.sets[kind.index()]
            .matches(address)
            .into_iter()
            .map(|p| self.owners[kind.index()][p])
            .collect();
        found.sort_unstable();
        found.dedup();
        found.into()
    }
}

/// Why a version is admitted.
#[derive(Debug, Clone)]
pub enum Admitted {
    /// No rule decided and `policy.default` is `allow`.
    Default,
    /// An `allow` rule.
    Rule(Arc<Rule>),
    /// An operator's waiver.
    Waiver(Arc<Approval>),
}

/// Why a version is refused.
#[derive(Debug, Clone)]
pub enum Cause {
    /// A `deny` or `hold` rule.
    Rule(Arc<Rule>),
    /// `policy.default = "deny"` and no rule allows it.
    Default,
    /// Younger than its cooldown: first seen `seen`, admissible at `until`; `rule` is the rule
    /// whose `min_age` applies (`None`: `policy.min_age`).
    Cooldown {
        min_age: Duration,
        seen: u64,
        until: u64,
        rule: Option<Arc<Rule>>,
    },
    /// An operator's hold.
    Held(Arc<Approval>),
}

/// A refused version: what, and why. Its `Display` is the sentence a person reads.
#[derive(Debug, Clone)]
pub struct Refused {
    pub kind: Kind,
    pub address: String,
    pub version: Option<Version>,
    pub cause: Cause,
}

impl Refused {
    /// Whether the refusal can end by itself or by an approval (a hold or a cooldown) rather
    /// than standing while the rule does.
    pub fn is_hold(&self) -> bool {
        match &self.cause {
            Cause::Default => false,
            Cause::Rule(r) => r.action != Action::Deny,
            Cause::Cooldown { .. } | Cause::Held(_) => true,
        }
    }

    /// The word for what happened: `denied` or `held`.
    pub fn verb(&self) -> &'static str {
        if self.is_hold() { "held" } else { "denied" }
    }

    /// The rule's name (or `default`, `cooldown`, `approval`), as the metric and the JSON body
    /// name it.
    pub fn rule_name(&self) -> &str {
        match &self.cause {
            Cause::Rule(r) => &r.name,
            Cause::Default => "default",
            Cause::Cooldown { rule: Some(r), .. } => &r.name,
            Cause::Cooldown { rule: None, .. } => "min_age",
            Cause::Held(_) => "approval",
        }
    }

    /// The action label: `deny`, `hold` or `cooldown`.
    pub fn action(&self) -> &'static str {
        match &self.cause {
            Cause::Rule(r) => r.action.as_str(),
            Cause::Default => "deny",
            Cause::Cooldown { .. } => "cooldown",
            Cause::Held(_) => "hold",
        }
    }

    /// The reason a person reads, if there is one.
    pub fn reason(&self) -> Option<&str> {
        match &self.cause {
            Cause::Rule(r) => r.reason.as_deref(),
            Cause::Cooldown { rule: Some(r), .. } => r.reason.as_deref(),
            Cause::Held(a) => Some(&a.reason),
            _ => None,
        }
    }

    pub fn link(&self) -> Option<&str> {
        match &self.cause {
            Cause::Rule(r) | Cause::Cooldown { rule: Some(r), .. } => r.link.as_deref(),
            _ => None,
        }
    }

    /// When the version becomes admissible by itself (a cooldown's end).
    pub fn until(&self) -> Option<u64> {
        match &self.cause {
            Cause::Cooldown { until, .. } => Some(*until),
            _ => None,
        }
    }

    /// The JSON object error bodies carry as `policy`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "kind": self.kind.as_str(),
            "address": self.address,
            "rule": self.rule_name(),
            "action": self.action(),
        });
        if let Some(version) = &self.version {
            v["version"] = version.to_string().into();
        }
        if let Some(reason) = self.reason() {
            v["reason"] = reason.into();
        }
        if let Some(link) = self.link() {
            v["link"] = link.into();
        }
        if let Some(until) = self.until() {
            v["admissible_at"] = format_time(until).into();
        }
        if let Cause::Held(a) = &self.cause {
            v["by"] = a.by.clone().into();
        }
        v
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match &self.version {
            Some(v) => format!("{} {} {v}", self.kind, self.address),
            None => format!("{} {}", self.kind, self.address),
        };
        match &self.cause {
            Cause::Rule(r) => write!(
                f,
                "{what} is {} by the mirror's policy rule {:?}",
                self.verb(),
                r.name
            )?,
            Cause::Default => write!(
                f,
                "{what} is denied by the mirror's policy: no rule allows it (policy.default = \"deny\")"
            )?,
            Cause::Cooldown {
                min_age,
                until,
                rule,
                ..
            } => {
                write!(
                    f,
                    "{what} is held by the mirror's cooldown: it is newer than {}",
                    humantime::format_duration(*min_age)
                )?;
                if let Some(r) = rule {
                    write!(f, " (rule {:?})", r.name)?;
                }
                write!(f, " and becomes installable at {}", format_time(*until))?;
            }
            Cause::Held(a) => write!(
                f,
                "{what} is held by an operator ({}, {})",
                a.by,
                format_time(a.at)
            )?,
        }
        if let Some(reason) = self.reason() {
            write!(f, ": {reason}")?;
        }
        if let Some(link) = self.link() {
            write!(f, " ({link})")?;
        }
        Ok(())
    }
}

/// The policy's answer for one version.
#[derive(Debug, Clone)]
pub enum Verdict {
    Admit(Admitted),
    Refuse(Box<Refused>),
}

/// A decision: the verdict and the `warn` rules that matched (a dry run's counts).
#[derive(Debug, Clone)]
pub struct Decision {
    pub verdict: Verdict,
    pub warnings: Vec<Arc<Rule>>,
}

impl Decision {
    fn admit(why: Admitted) -> Decision {
        Decision {
            verdict: Verdict::Admit(why),
            warnings: Vec::new(),
        }
    }

    pub fn refused(&self) -> Option<&Refused> {
        match &self.verdict {
            Verdict::Refuse(r) => Some(r),
            Verdict::Admit(_) => None,
        }
    }

    pub fn into_result(self) -> Result<Admitted, Box<Refused>> {
        match self.verdict {
            Verdict::Admit(a) => Ok(a),
            Verdict::Refuse(r) => Err(r),
        }
    }
}

/// The rules in force, the approvals, and the clock they are judged by; shared by every door.
pub struct Policy {
    min_age: Duration,
    default: DefaultAction,
    configured: Vec<Arc<Rule>>,
    rules_file: Option<PathBuf>,
    rules: RwLock<Arc<RuleSet>>,
    /// Per kind, whether nothing of it can be refused (no rule names it, no cooldown, default
    /// allow; approvals are asked separately): read without a lock on every request.
    open: [AtomicBool; 4],
    approvals: Approvals,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policy")
            .field("min_age", &self.min_age)
            .field("rules", &self.rule_set().rules.len())
            .finish()
    }
}

impl Policy {
    /// The policy of `settings` (its rules file as read when they were checked), approvals
    /// from `approvals`, judged by `clock`.
    pub fn new(
        settings: &PolicySettings,
        approvals: Approvals,
        clock: Arc<dyn Clock>,
    ) -> Result<Policy, PolicyError> {
        let rules = [settings.rules.clone(), settings.file_rules.clone()].concat();
        let policy = Policy {
            min_age: settings.min_age,
            default: settings.default,
            configured: settings.rules.clone(),
            rules_file: settings.rules_file.clone(),
            rules: RwLock::new(Arc::new(RuleSet::new(rules)?)),
            open: Default::default(),
            approvals,
            clock,
        };
        policy.set_open(&policy.rule_set());
        Ok(policy)
    }

    /// A policy that admits everything (no rules, no cooldown), for tools and tests.
    pub fn open(approvals: Approvals) -> Policy {
        Policy::new(
            &PolicySettings::default(),
            approvals,
            crate::clock::system(),
        )
        .expect("an empty policy is valid")
    }

    /// The rules file, if one is configured.
    pub fn rules_file(&self) -> Option<&Path> {
        self.rules_file.as_deref()
    }

    /// Reads the rules file again. An invalid file is refused whole (the error names its line)
    /// and the rules in force stay.
    pub fn reload(&self) -> Result<usize, PolicyError> {
        let Some(path) = &self.rules_file else {
            return Ok(self.rule_set().rules.len());
        };
        let mut rules = self.configured.clone();
        rules.extend(read_rules_file(path)?);
        let set = Arc::new(RuleSet::new(rules)?);
        let count = set.rules.len();
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = set.clone();
        self.set_open(&set);
        Ok(count)
    }

    fn set_open(&self, set: &RuleSet) {
        for kind in Kind::ALL {
            let open = self.default == DefaultAction::Allow
                && self.min_age.is_zero()
                && !set.names_kind(kind);
            self.open[kind.index()].store(open, Ordering::Relaxed);
        }
    }

    /// The rules in force.
    pub fn rule_set(&self) -> Arc<RuleSet> {
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn approvals(&self) -> &Approvals {
        &self.approvals
    }

    pub fn min_age(&self) -> Duration {
        self.min_age
    }

    pub fn default_action(&self) -> DefaultAction {
        self.default
    }

    /// The current time, as the policy judges it.
    pub fn now(&self) -> u64 {
        self.clock.now_secs()
    }

    /// Whether the policy can refuse anything of `kind` at all; when it cannot, doors skip it.
    pub fn is_open(&self, kind: Kind) -> bool {
        self.open[kind.index()].load(Ordering::Relaxed) && self.approvals.is_empty()
    }

    /// The rules of `address` (of `kind`) as they stand now, resolved once for every version a
    /// request judges (a whole version list costs one look-up, not one per version).
    pub fn at<'p>(&'p self, kind: Kind, address: &str) -> AddressRules<'p> {
        if self.is_open(kind) {
            return AddressRules {
                policy: self,
                kind,
                address: address.to_string(),
                state: None,
            };
        }
        let set = self.rule_set();
        let matching = set.matching(kind, address.to_ascii_lowercase());
        AddressRules {
            policy: self,
            kind,
            address: address.to_string(),
            state: Some((set, matching, self.clock.now_secs())),
        }
    }

    /// The decision for `version` of `address` (of `kind`), first seen at `seen` (`None`:
    /// baseline, of no known age).
    pub fn decide(
        &self,
        kind: Kind,
        address: &str,
        version: &Version,
        seen: Option<u64>,
    ) -> Decision {
        self.at(kind, address).decide(version, seen)
    }

    /// The decision for a thing without versions (a git repository): only rules without
    /// `versions` and `policy.default` apply; no cooldown.
    pub fn decide_unversioned(&self, kind: Kind, address: &str) -> Decision {
        self.at(kind, address).judge(None, None)
    }
}

/// The rules matching one address at one moment (see [`Policy::at`]).
pub struct AddressRules<'p> {
    policy: &'p Policy,
    kind: Kind,
    address: String,
    /// The rule set, the rules of it that match, and the time; `None` when nothing of the
    /// kind can be refused.
    state: Option<(Arc<RuleSet>, Arc<[usize]>, u64)>,
}

impl AddressRules<'_> {
    /// The decision for `version`, first seen at `seen` (`None`: baseline, of no known age).
    pub fn decide(&self, version: &Version, seen: Option<u64>) -> Decision {
        self.judge(Some(version), seen)
    }

    fn judge(&self, version: Option<&Version>, seen: Option<u64>) -> Decision {
        let Some((set, matching, now)) = &self.state else {
            return Decision::admit(Admitted::Default);
        };
        let (kind, address, now) = (self.kind, self.address.as_str(), *now);
        let refuse = |cause| Decision {
            verdict: Verdict::Refuse(Box::new(Refused {
                kind,
                address: address.to_string(),
                version: version.cloned(),
                cause,
            })),
            warnings: Vec::new(),
        };
        if let Some(version) = version {
            if let Some(a) = self.policy.approvals.current(kind, address, version, now) {
                match a.action {
                    ApprovalAction::Waive => return Decision::admit(Admitted::Waiver(a)),
                    ApprovalAction::Hold => return refuse(Cause::Held(a)),
                    // `current` never answers a revocation: the rules decide.
                    ApprovalAction::Revoke => {}
                }
            }
        }
        let mut decisive: Option<&Arc<Rule>> = None;
        let mut warnings = Vec::new();
        let mut min_age: Option<(Duration, &Arc<Rule>)> = None;
        let mut warn_age: Option<(Duration, &Arc<Rule>)> = None;
        for &i in matching.iter() {
            let rule = &set.rules[i];
            if rule.expired(now) || !rule.covers(version) {
                continue;
            }
            if rule.action == Action::Warn {
                match rule.min_age {
                    Some(age) if warn_age.is_none_or(|(a, _)| age > a) => {
                        warn_age = Some((age, rule))
                    }
                    Some(_) => {}
                    None => warnings.push(rule.clone()),
                }
                continue;
            }
            if let Some(age) = rule.min_age {
                if min_age.is_none_or(|(a, _)| age > a) {
                    min_age = Some((age, rule));
                }
            }
            if decisive.is_none_or(|d| rule.action.strength() > d.action.strength()) {
                decisive = Some(rule);
            }
        }
        let admitted = match decisive {
            Some(r) if r.action == Action::Allow => Admitted::Rule(r.clone()),
            Some(r) => {
                let mut d = refuse(Cause::Rule(r.clone()));
                d.warnings = warnings;
                return d;
            }
            None if self.policy.default == DefaultAction::Deny => {
                let mut d = refuse(Cause::Default);
                d.warnings = warnings;
                return d;
            }
            None => Admitted::Default,
        };
        let young = |age: Duration| {
            let seen = seen?;
            let until = seen.saturating_add(age.as_secs());
            (now < until).then_some((seen, until))
        };
        if let Some((age, rule)) = warn_age {
            if young(age).is_some() {
                warnings.push(rule.clone());
            }
        }
        let (age, rule) = match min_age {
            Some((age, rule)) => (age, Some(rule.clone())),
            None => (self.policy.min_age, None),
        };
        if let Some((seen, until)) = young(age) {
            let mut d = refuse(Cause::Cooldown {
                min_age: age,
                seen,
                until,
                rule,
            });
            d.warnings = warnings;
            return d;
        }
        Decision {
            verdict: Verdict::Admit(admitted),
            warnings,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    const NOW: u64 = 1_800_000_000;
    const DAY: u64 = 86_400;

    fn rule(toml_text: &str) -> Arc<Rule> {
        let c: RuleConfig = toml::from_str(toml_text).unwrap();
        Rule::new(&c, "test".into()).unwrap()
    }

    fn policy(min_age: u64, default: DefaultAction, rules: Vec<Arc<Rule>>) -> Policy {
        let settings = PolicySettings {
            min_age: Duration::from_secs(min_age),
            default,
            rules_file: None,
            rules,
            file_rules: Vec::new(),
        };
        Policy::new(&settings, Approvals::in_memory(), ManualClock::at(NOW)).unwrap()
    }

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    const AWS: &str = "registry.terraform.io/hashicorp/aws";

    fn verdict(p: &Policy, version: &str, seen: Option<u64>) -> String {
        match p.decide(Kind::Provider, AWS, &v(version), seen).verdict {
            Verdict::Admit(_) => "admit".into(),
            Verdict::Refuse(r) => format!("{}:{}", r.action(), r.rule_name()),
        }
    }

    #[test]
    fn deny_beats_hold_beats_allow_whatever_the_order() {
        let p = policy(
            0,
            DefaultAction::Allow,
            vec![
                rule(
                    r#"name = "ok"
                    providers = ["*"]
                    action = "allow""#,
                ),
                rule(
                    r#"name = "hold-aws"
                    providers = ["registry.terraform.io/hashicorp/*"]
                    versions = ">= 3.6.0"
                    action = "hold""#,
                ),
                rule(
                    r#"name = "bad"
                    providers = ["registry.terraform.io/hashicorp/aws"]
                    versions = "3.6.1"
                    action = "deny"
                    reason = "breaks things""#,
                ),
            ],
        );
        assert_eq!(verdict(&p, "3.6.1", None), "deny:bad");
        assert_eq!(verdict(&p, "3.6.2", None), "hold:hold-aws");
        assert_eq!(verdict(&p, "3.7.0-beta1", None), "hold:hold-aws");
        assert_eq!(verdict(&p, "3.5.0", None), "admit");
    }

    #[test]
    fn default_deny_is_an_allow_list() {
        let p = policy(
            0,
            DefaultAction::Deny,
            vec![rule(
                r#"name = "hc"
                providers = ["registry.terraform.io/hashicorp/*"]
                action = "allow""#,
            )],
        );
        assert_eq!(verdict(&p, "1.0.0", None), "admit");
        let other = p.decide(
            Kind::Provider,
            "registry.terraform.io/evil/x",
            &v("1.0.0"),
            None,
        );
        assert_eq!(other.refused().unwrap().rule_name(), "default");
    }

    #[test]
    fn cooldown_counts_from_first_seen_and_baseline_versions_are_old() {
        let p = policy(7 * DAY, DefaultAction::Allow, vec![]);
        assert_eq!(verdict(&p, "3.6.0", None), "admit", "baseline");
        assert_eq!(verdict(&p, "3.6.1", Some(NOW - DAY)), "cooldown:min_age");
        assert_eq!(verdict(&p, "3.6.1", Some(NOW - 7 * DAY)), "admit");
        let d = p.decide(Kind::Provider, AWS, &v("3.6.1"), Some(NOW - DAY));
        assert_eq!(d.refused().unwrap().until(), Some(NOW + 6 * DAY));
    }

    #[test]
    fn the_largest_min_age_of_matching_rules_replaces_the_global_one() {
        let p = policy(
            7 * DAY,
            DefaultAction::Allow,
            vec![
                rule(
                    r#"name = "hc-fast"
                    providers = ["registry.terraform.io/hashicorp/*"]
                    action = "allow"
                    min_age = "1d""#,
                ),
                rule(
                    r#"name = "aws-slow"
                    providers = ["*/aws"]
                    action = "allow"
                    min_age = "3d""#,
                ),
            ],
        );
        assert_eq!(
            verdict(&p, "1.0.0", Some(NOW - 2 * DAY)),
            "cooldown:aws-slow"
        );
        assert_eq!(verdict(&p, "1.0.0", Some(NOW - 4 * DAY)), "admit");
        let dns = p.decide(
            Kind::Provider,
            "registry.terraform.io/hashicorp/dns",
            &v("1.0.0"),
            Some(NOW - 2 * DAY),
        );
        assert!(dns.refused().is_none(), "hc-fast's 1d applies");
    }

    #[test]
    fn warn_rules_only_count_and_expired_rules_do_nothing() {
        let p = policy(
            0,
            DefaultAction::Allow,
            vec![
                rule(
                    r#"name = "dry"
                    providers = ["*"]
                    versions = "3.6.1"
                    action = "warn""#,
                ),
                rule(
                    r#"name = "old"
                    providers = ["*"]
                    action = "deny"
                    expires = "2020-01-01""#,
                ),
            ],
        );
        let d = p.decide(Kind::Provider, AWS, &v("3.6.1"), None);
        assert!(d.refused().is_none());
        assert_eq!(d.warnings.len(), 1);
        assert_eq!(d.warnings[0].name, "dry");
    }

    fn approval(id: &str, version: &str, action: ApprovalAction, until: Option<u64>) -> Approval {
        Approval {
            id: id.into(),
            kind: Kind::Provider,
            address: AWS.into(),
            version: v(version),
            action,
            by: "alice".into(),
            at: NOW - 10,
            reason: "because".into(),
            until,
        }
    }

    #[test]
    fn waivers_and_holds_beat_rules_and_the_cooldown() {
        let p = policy(
            7 * DAY,
            DefaultAction::Allow,
            vec![rule(
                r#"name = "bad"
                providers = ["*"]
                versions = "3.6.1"
                action = "deny""#,
            )],
        );
        p.approvals()
            .apply(approval("1", "3.6.1", ApprovalAction::Waive, None));
        assert_eq!(verdict(&p, "3.6.1", Some(NOW)), "admit");
        p.approvals()
            .apply(approval("2", "3.5.0", ApprovalAction::Hold, Some(NOW - 1)));
        assert_eq!(verdict(&p, "3.5.0", None), "admit", "an expired hold");
    }

    #[test]
    fn unversioned_things_meet_only_rules_without_versions() {
        let p = policy(
            7 * DAY,
            DefaultAction::Allow,
            vec![
                rule(
                    r#"name = "some"
                    git = ["github.com/acme/*"]
                    versions = "1.0.0"
                    action = "deny""#,
                ),
                rule(
                    r#"name = "all"
                    git = ["github.com/evil/*"]
                    action = "deny""#,
                ),
            ],
        );
        assert!(
            p.decide_unversioned(Kind::Git, "github.com/acme/x")
                .refused()
                .is_none()
        );
        assert!(
            p.decide_unversioned(Kind::Git, "github.com/evil/x")
                .refused()
                .is_some()
        );
    }

    #[test]
    fn a_rules_file_error_names_the_line() {
        let text = "[[rules]]\nname = \"a\"\nproviders = [\"*\"]\naction = \"deny\"\n\n[[rules]]\nname = \"b\"\nproviders = [\"*\"]\nversions = \"not a version\"\naction = \"deny\"\n";
        let e = parse_rules_file(Path::new("policy.toml"), text).unwrap_err();
        assert_eq!(e.place, "policy.toml:6", "{e}");
        assert!(e.message.contains("versions"), "{e}");
        let e = parse_rules_file(Path::new("policy.toml"), "[[rules]]\nname = 3\n").unwrap_err();
        assert_eq!(e.place, "policy.toml:2", "{e}");
        let dup = "[[rules]]\nname = \"a\"\nproviders = [\"*\"]\naction = \"deny\"\n[[rules]]\nname = \"a\"\nproviders = [\"*\"]\naction = \"deny\"\n";
        let rules = parse_rules_file(Path::new("p.toml"), dup).unwrap();
        let e = RuleSet::new(rules).unwrap_err();
        assert!(e.to_string().contains("p.toml:5"), "{e}");
    }
}
