//! The version policy's view, for the policy page, `GET -/api/v1/policy` and `provender policy
//! list`: the rules in force (and where each was written), what of the cache the policy refuses
//! or waives now (with the rule or the approval, and for a cooldown when the version becomes
//! installable), who fetched each refused version and when (the impact, from the usage counts),
//! the approvals in force and every approval record (the audit trail).
//!
//! Nothing is decided here: each cached version is judged by [`crate::policy::Policy::decide`]
//! with its first sight read from the cached version list as the doors read it
//! ([`crate::mirror::seen_in`]). Looking does not count as a decision in the metrics.
//!
//! Approvals (a waiver, a hold, a revocation) are made by operators through the CLI and by
//! approvers through the API and the page; each is checked here ([`ApprovalRequest`]) and
//! recorded by [`crate::policy::Approvals::record`], the only way one is made.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::{API_VERSION, Snapshot};
use crate::address::{ModuleAddr, ProviderAddr, Version};
use crate::error::Error;
use crate::mirror::{Core, ReleaseMirror, seen_in};
use crate::policy::approvals::ApprovalError;
use crate::policy::{Admitted, Approval, ApprovalAction, Decision, Kind, Verdict};
use crate::records::releases::Product;
use crate::usage::Row;

/// The registry host of a short address (`namespace/type`), as everywhere else.
const DEFAULT_HOST: &str = "registry.terraform.io";

/// `GET -/api/v1/policy`.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyView {
    pub api_version: u32,
    /// `policy.default`: `allow`, or `deny` (an allow-list).
    pub default: &'static str,
    /// `policy.min_age`, the cooldown of versions no rule gives one (`0s`: none).
    pub min_age: String,
    pub rules_file: Option<String>,
    /// The rules in force, in order: the configuration's, then the rules file's.
    pub rules: Vec<RuleEntry>,
    /// The cached versions the policy refuses or waives now, by kind, address and version.
    pub versions: Vec<JudgedVersion>,
    /// The approvals in force, newest first.
    pub approvals: Vec<Approval>,
    /// Every approval record, oldest first.
    pub history: Vec<Approval>,
}

/// One rule as it stands.
#[derive(Debug, Clone, Serialize)]
pub struct RuleEntry {
    pub name: String,
    /// `deny`, `hold`, `allow` or `warn`.
    pub action: &'static str,
    pub providers: Vec<String>,
    pub modules: Vec<String>,
    pub releases: Vec<String>,
    pub git: Vec<String>,
    /// The version constraint as written; every version when absent.
    pub versions: Option<String>,
    /// Its own cooldown, e.g. `3days`.
    pub min_age: Option<String>,
    pub reason: Option<String>,
    pub link: Option<String>,
    /// Unix seconds after which it no longer matches.
    pub expires: Option<u64>,
    pub expired: bool,
    /// Where it was written: `policy.rules[2]`, or `<file>:<line>`.
    pub place: String,
}

impl RuleEntry {
    /// What it matches, as one line: `providers a, b; modules c`.
    pub fn matches(&self) -> String {
        [
            ("providers", &self.providers),
            ("modules", &self.modules),
            ("releases", &self.releases),
            ("git", &self.git),
        ]
        .into_iter()
        .filter(|(_, list)| !list.is_empty())
        .map(|(key, list)| format!("{key} {}", list.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
    }
}

/// One cached version the policy refuses or waives now.
#[derive(Debug, Clone, Serialize)]
pub struct JudgedVersion {
    pub kind: Kind,
    /// `hostname/namespace/type`, `hostname/namespace/name/system`, `terraform`/`tofu`, or a
    /// git repository's `host/path`.
    pub address: String,
    /// None for a git repository (the policy judges it whole).
    pub version: Option<String>,
    /// `denied`, `held` or `waived`.
    pub verdict: &'static str,
    /// The rule that decided (`default`, `min_age` and `approval` name no rule of their own).
    pub rule: String,
    /// `deny`, `hold`, `cooldown` or `waive`.
    pub action: &'static str,
    pub reason: Option<String>,
    pub link: Option<String>,
    /// For a cooldown: when the version becomes installable (Unix seconds).
    pub admissible_at: Option<u64>,
    /// For an approval's hold or waiver: who made it, and when (Unix seconds).
    pub by: Option<String>,
    pub approved_at: Option<u64>,
    /// The sentence a person reads.
    pub message: String,
    /// Uses of this version in the usage counts kept, every client's.
    pub uses: u64,
    /// Who fetched it, and on which days (the impact of refusing it).
    pub users: Vec<VersionUser>,
}

impl JudgedVersion {
    pub fn refused(&self) -> bool {
        self.verdict != "waived"
    }

    /// `provider registry.terraform.io/acme/aws 3.6.1`.
    pub fn what(&self) -> String {
        match &self.version {
            Some(v) => format!("{} {} {v}", self.kind, self.address),
            None => format!("{} {}", self.kind, self.address),
        }
    }
}

/// One client's use of a version.
#[derive(Debug, Clone, Serialize)]
pub struct VersionUser {
    pub client: String,
    pub count: u64,
    /// The first and last day it was used (`YYYY-MM-DD`).
    pub first: String,
    pub last: String,
}

/// `GET -/api/v1/policy/history`: every approval record, oldest first.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyHistory {
    pub api_version: u32,
    pub history: Vec<Approval>,
}

/// `POST -/api/v1/policy/approvals`'s answer: the record made.
#[derive(Debug, Clone, Serialize)]
pub struct Approved {
    pub api_version: u32,
    pub approval: Approval,
}

impl PolicyView {
    /// The view of the policy `core` judges by, over what `snapshot` holds, with the impact
    /// from the usage `rows` and the approval records `history`.
    pub async fn of(
        core: &Arc<Core>,
        snapshot: &Snapshot,
        rows: Vec<Row>,
        history: Vec<Approval>,
    ) -> PolicyView {
        let policy = core.policy();
        let now = policy.now();
        let rules = policy
            .rule_set()
            .rules()
            .iter()
            .map(|r| RuleEntry {
                name: r.name.clone(),
                action: r.action.as_str(),
                providers: r.patterns[0].clone(),
                modules: r.patterns[1].clone(),
                releases: r.patterns[2].clone(),
                git: r.patterns[3].clone(),
                versions: r.versions_text.clone(),
                min_age: r.min_age.map(|d| humantime::format_duration(d).to_string()),
                reason: r.reason.clone(),
                link: r.link.clone(),
                expires: r.expires,
                expired: r.expires.is_some_and(|t| t <= now),
                place: r.place.clone(),
            })
            .collect();
        let mut versions = judge_cached(core, snapshot).await;
        attach_usage(&mut versions, rows);
        PolicyView {
            api_version: API_VERSION,
            default: match policy.default_action() {
                crate::policy::DefaultAction::Allow => "allow",
                crate::policy::DefaultAction::Deny => "deny",
            },
            min_age: humantime::format_duration(policy.min_age()).to_string(),
            rules_file: policy.rules_file().map(|p| p.display().to_string()),
            rules,
            versions,
            approvals: policy
                .approvals()
                .in_force(now)
                .into_iter()
                .map(|a| (*a).clone())
                .collect(),
            history,
        }
    }

    /// The cached versions refused now.
    pub fn refused(&self) -> impl Iterator<Item = &JudgedVersion> {
        self.versions.iter().filter(|v| v.refused())
    }

    /// The cached versions admitted by a waiver.
    pub fn waived(&self) -> impl Iterator<Item = &JudgedVersion> {
        self.versions.iter().filter(|v| !v.refused())
    }

    /// The refused version a usage row is about, if the policy refuses it now.
    pub fn refusal_of(&self, row: &Row) -> Option<&JudgedVersion> {
        self.refused().find(|v| same_use(v, row))
    }
}

fn same_use(v: &JudgedVersion, row: &Row) -> bool {
    v.kind.as_str() == row.kind.as_str()
        && v.address.eq_ignore_ascii_case(&row.address)
        && v.version.as_deref().unwrap_or("-") == row.version
}

/// Adds to each version who used it.
fn attach_usage(versions: &mut [JudgedVersion], rows: Vec<Row>) {
    let mut by_version: HashMap<(String, String, String), Vec<Row>> = HashMap::new();
    for row in rows {
        let key = (
            row.kind.as_str().to_string(),
            row.address.to_ascii_lowercase(),
            row.version.clone(),
        );
        by_version.entry(key).or_default().push(row);
    }
    for v in versions {
        let key = (
            v.kind.as_str().to_string(),
            v.address.to_ascii_lowercase(),
            v.version.clone().unwrap_or_else(|| "-".into()),
        );
        let rows = by_version.remove(&key).unwrap_or_default();
        v.uses = rows.iter().map(|r| r.count).sum();
        v.users = rows
            .into_iter()
            .map(|r| VersionUser {
                client: r.client,
                count: r.count,
                first: r.first,
                last: r.last,
            })
            .collect();
    }
}

/// Judges versions as the doors do: the policy's decision, with the version's first sight read
/// from the cached version list of its provider, module or CLI (as `judge_provider`,
/// `judge_module` and the release door read it).
pub struct Judge {
    core: Arc<Core>,
    releases: tokio::sync::OnceCell<Arc<ReleaseMirror>>,
}

impl Judge {
    pub fn new(core: Arc<Core>) -> Judge {
        Judge {
            core,
            releases: tokio::sync::OnceCell::new(),
        }
    }

    /// When this mirror first saw `version` of `address` (of `kind`) in its origin's list:
    /// `None` for a version listed when the mirror first listed the thing (of no known age),
    /// or when no list is kept.
    pub async fn seen(&self, kind: Kind, address: &str, version: &Version) -> Option<u64> {
        let now = self.core.policy().now();
        match kind {
            Kind::Provider => {
                let addr = ProviderAddr::parse(address).ok()?;
                let list = self.core.provider_lists().cached(&addr).await?;
                list.found.then(|| {
                    seen_in(
                        &list.seen,
                        list.platforms_of(version).is_some(),
                        version,
                        now,
                    )
                })?
            }
            Kind::Module => {
                let addr = ModuleAddr::parse_in(address, DEFAULT_HOST).ok()?;
                let list = self.core.module_lists().cached(&addr).await?;
                list.found
                    .then(|| seen_in(&list.seen, list.versions.contains(version), version, now))?
            }
            Kind::Release => {
                let product = Product::parse(address)?;
                let releases = self
                    .releases
                    .get_or_init(|| async { ReleaseMirror::new(self.core.clone()) })
                    .await;
                let list = releases.kept_list(product).await?;
                list.found
                    .then(|| seen_in(&list.seen, list.release(version).is_some(), version, now))?
            }
            Kind::Git => None,
        }
    }

    /// The policy's decision for `version` of `address` (a git repository has none: it is
    /// judged whole).
    pub async fn decide(&self, kind: Kind, address: &str, version: Option<&Version>) -> Decision {
        let policy = self.core.policy();
        match version {
            Some(version) if kind != Kind::Git => {
                let seen = self.seen(kind, address, version).await;
                policy.decide(kind, address, version, seen)
            }
            _ => policy.decide_unversioned(kind, address),
        }
    }
}

/// Every cached provider, module and CLI release version (and git repository) the policy
/// refuses or waives now.
pub async fn judge_cached(core: &Arc<Core>, snapshot: &Snapshot) -> Vec<JudgedVersion> {
    let policy = core.policy();
    let judge = Judge::new(core.clone());
    let mut cached: Vec<(Kind, &str, Option<Version>)> = Vec::new();
    if !policy.is_open(Kind::Provider) {
        for p in &snapshot.providers {
            for v in &p.versions {
                if let Ok(version) = Version::parse(&v.version) {
                    cached.push((Kind::Provider, &p.source, Some(version)));
                }
            }
        }
    }
    if !policy.is_open(Kind::Module) {
        for m in &snapshot.modules {
            if let Ok(version) = Version::parse(&m.version) {
                cached.push((Kind::Module, &m.address, Some(version)));
            }
        }
    }
    if !policy.is_open(Kind::Release) {
        for p in &snapshot.releases {
            for r in &p.releases {
                if let Ok(version) = Version::parse(&r.version) {
                    cached.push((Kind::Release, p.product, Some(version)));
                }
            }
        }
    }
    if !policy.is_open(Kind::Git) {
        for repo in &snapshot.git {
            cached.push((Kind::Git, &repo.repository, None));
        }
    }
    let mut out = Vec::new();
    for (kind, address, version) in cached {
        let decision = judge.decide(kind, address, version.as_ref()).await;
        out.extend(judged(kind, address, version.as_ref(), decision));
    }
    out
}

/// `text` as the address of a `kind` the policy judges: a provider's or module's with its
/// registry host (`registry.terraform.io` added to a short one), `terraform` or `tofu`, a git
/// repository's `host/path`.
pub fn canonical_address(kind: Kind, text: &str) -> Result<String, BadApproval> {
    let bad = |message: String| BadApproval {
        field: "address",
        message,
    };
    let text = text.trim();
    if text.is_empty() || text.len() > MAX_ADDRESS {
        return Err(bad(format!("must be 1 to {MAX_ADDRESS} characters")));
    }
    match kind {
        Kind::Provider => ProviderAddr::parse(text)
            .map(|a| a.to_string())
            .map_err(|e| bad(e.to_string())),
        Kind::Module => ModuleAddr::parse_in(text, DEFAULT_HOST)
            .map(|a| a.to_string())
            .map_err(|e| bad(e.to_string())),
        Kind::Release => Product::parse(text)
            .map(|p| p.as_str().to_string())
            .ok_or_else(|| {
                bad(format!(
                    "{:?}: a release's address is terraform or tofu",
                    clip(text)
                ))
            }),
        Kind::Git => crate::address::GitRepo::parse(text)
            .map(|r| r.to_string())
            .map_err(|e| bad(e.to_string())),
    }
}

/// A kind as the CLI and the API write it.
pub fn parse_kind(text: &str) -> Result<Kind, BadApproval> {
    Kind::parse(text.trim()).ok_or_else(|| BadApproval {
        field: "kind",
        message: format!("{:?} is not provider, module, release or git", clip(text)),
    })
}

/// A version's entry when the policy refuses or waives it.
fn judged(
    kind: Kind,
    address: &str,
    version: Option<&Version>,
    decision: Decision,
) -> Option<JudgedVersion> {
    let entry = |verdict, rule: String, action| JudgedVersion {
        kind,
        address: address.to_string(),
        version: version.map(ToString::to_string),
        verdict,
        rule,
        action,
        reason: None,
        link: None,
        admissible_at: None,
        by: None,
        approved_at: None,
        message: String::new(),
        uses: 0,
        users: Vec::new(),
    };
    match decision.verdict {
        Verdict::Admit(Admitted::Waiver(a)) => {
            let mut v = entry("waived", "approval".into(), "waive");
            v.reason = Some(a.reason.clone());
            v.by = Some(a.by.clone());
            v.approved_at = Some(a.at);
            v.message = format!(
                "{} is waived by {} ({})",
                v.what(),
                a.by,
                crate::policy::format_time(a.at)
            );
            Some(v)
        }
        Verdict::Admit(_) => None,
        Verdict::Refuse(r) => {
            let mut v = entry(r.verb(), r.rule_name().to_string(), r.action());
            v.reason = r.reason().map(str::to_string);
            v.link = r.link().map(str::to_string);
            v.admissible_at = r.until();
            if let crate::policy::Cause::Held(a) = &r.cause {
                v.by = Some(a.by.clone());
                v.approved_at = Some(a.at);
            }
            v.message = r.to_string();
            Some(v)
        }
    }
}

/// An approval as asked for: by the API's JSON body, the page's form, or the CLI's arguments.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRequest {
    /// `provider`, `module` or `release`.
    pub kind: String,
    pub address: String,
    pub version: String,
    /// `waive`, `hold` or `revoke`.
    pub action: String,
    pub reason: String,
    /// An RFC 3339 time or a date (midnight UTC) after which it is no longer in force.
    #[serde(default)]
    pub until: Option<String>,
}

/// A field of an approval that cannot be taken: which, and why.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{field}: {message}")]
pub struct BadApproval {
    pub field: &'static str,
    pub message: String,
}

/// Why an approval was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum ApproveError {
    #[error("{0}")]
    Bad(#[from] BadApproval),
    /// A revocation of a version that has no waiver or hold in force.
    #[error("{0} has no waiver or hold in force to revoke")]
    NothingToRevoke(String),
    #[error("{0}")]
    Record(#[from] ApprovalError),
}

impl From<ApproveError> for Error {
    fn from(e: ApproveError) -> Error {
        match e {
            ApproveError::Bad(bad) => Error::Invalid(bad.to_string()),
            ApproveError::NothingToRevoke(_) => Error::NotFound(e.to_string()),
            ApproveError::Record(ApprovalError::Invalid(message)) => Error::Invalid(message),
            ApproveError::Record(ApprovalError::Storage(e)) => Error::Storage(e),
            ApproveError::Record(other) => Error::unexpected(other.to_string()),
        }
    }
}

/// The longest address taken.
const MAX_ADDRESS: usize = 300;

impl ApprovalRequest {
    /// The approval this asks for, made by `by` at `now`, with its address in the form the
    /// policy judges (`registry.terraform.io` added to a short one).
    pub fn check(&self, by: &str, now: u64) -> Result<Approval, BadApproval> {
        let bad = |field, message: String| BadApproval { field, message };
        let kind = parse_kind(&self.kind)?;
        if kind == Kind::Git {
            return Err(bad(
                "kind",
                "a git repository has no versions to approve: change the rule that names it".into(),
            ));
        }
        let address = canonical_address(kind, &self.address)?;
        let version =
            Version::parse(self.version.trim()).map_err(|e| bad("version", e.to_string()))?;
        let action = match self.action.trim() {
            "waive" => ApprovalAction::Waive,
            "hold" => ApprovalAction::Hold,
            "revoke" => ApprovalAction::Revoke,
            other => {
                return Err(bad(
                    "action",
                    format!("{:?} is not waive, hold or revoke", clip(other)),
                ));
            }
        };
        let reason = self.reason.trim();
        if reason.is_empty() {
            return Err(bad(
                "reason",
                "is needed: say why, for the audit trail".into(),
            ));
        }
        if reason.len() > 2000 || reason.chars().any(|c| c.is_control() && c != '\n') {
            return Err(bad(
                "reason",
                "must be at most 2000 bytes, without control characters".into(),
            ));
        }
        let until = match self.until.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(text) => {
                let t = crate::policy::parse_time(text).map_err(|e| bad("until", e))?;
                if t <= now {
                    return Err(bad("until", format!("{text:?} is not in the future")));
                }
                Some(t)
            }
        };
        if by.trim().is_empty() {
            return Err(bad("by", "an approval needs who made it".into()));
        }
        Ok(Approval {
            id: String::new(),
            kind,
            address,
            version,
            action,
            by: by.to_string(),
            at: now,
            reason: reason.to_string(),
            until,
        })
    }
}

/// Hostile input, shortened for a message.
fn clip(text: &str) -> String {
    text.chars().take(80).collect()
}

/// Checks and records the approval `request` asks for, made by `by`: through
/// [`crate::policy::Approvals::record`] (the store's audit record first, then in force here).
/// A revocation needs a waiver or hold in force to end.
pub async fn approve(
    core: &Core,
    request: &ApprovalRequest,
    by: &str,
) -> Result<Approval, ApproveError> {
    let policy = core.policy();
    let now = policy.now();
    let approval = request.check(by, now)?;
    if approval.action == ApprovalAction::Revoke
        && policy
            .approvals()
            .current(approval.kind, &approval.address, &approval.version, now)
            .is_none()
    {
        return Err(ApproveError::NothingToRevoke(format!(
            "{} {} {}",
            approval.kind, approval.address, approval.version
        )));
    }
    let recorded = policy.approvals().record(approval).await?;
    tracing::info!(
        kind = %recorded.kind,
        address = %recorded.address,
        version = %recorded.version,
        action = recorded.action.as_str(),
        by = %recorded.by,
        "version policy approval recorded: {}",
        recorded.reason
    );
    Ok(recorded)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(kind: &str, address: &str, version: &str, action: &str) -> ApprovalRequest {
        ApprovalRequest {
            kind: kind.into(),
            address: address.into(),
            version: version.into(),
            action: action.into(),
            reason: "because".into(),
            until: None,
        }
    }

    #[test]
    fn a_cooldown_says_when_the_version_becomes_installable_and_a_hold_who_made_it() {
        let now = 1_800_000_000;
        let settings = crate::policy::PolicySettings {
            min_age: std::time::Duration::from_secs(7 * 86_400),
            ..Default::default()
        };
        let policy = crate::policy::Policy::new(
            &settings,
            crate::policy::Approvals::in_memory(),
            crate::clock::ManualClock::at(now),
        )
        .unwrap();
        let aws = "registry.terraform.io/acme/aws";
        let v = Version::parse("3.6.1").unwrap();
        let young = policy.decide(Kind::Provider, aws, &v, Some(now - 86_400));
        let entry = judged(Kind::Provider, aws, Some(&v), young).unwrap();
        assert_eq!((entry.verdict, entry.action), ("held", "cooldown"));
        assert_eq!(entry.rule, "min_age");
        assert_eq!(entry.admissible_at, Some(now + 6 * 86_400));
        assert!(
            entry.message.contains("becomes installable"),
            "{}",
            entry.message
        );
        let old = policy.decide(Kind::Provider, aws, &v, None);
        assert!(
            judged(Kind::Provider, aws, Some(&v), old).is_none(),
            "admitted"
        );
        let mut hold = request("provider", aws, "3.6.0", "hold")
            .check("bob", now - 5)
            .unwrap();
        hold.id = "1".into();
        policy.approvals().apply(hold);
        let v360 = Version::parse("3.6.0").unwrap();
        let held = policy.decide(Kind::Provider, aws, &v360, None);
        let entry = judged(Kind::Provider, aws, Some(&v360), held).unwrap();
        assert_eq!(
            (entry.rule.as_str(), entry.by.as_deref()),
            ("approval", Some("bob"))
        );
    }

    #[test]
    fn a_request_names_the_field_at_fault() {
        let now = 1_800_000_000;
        let ok = request("provider", "acme/aws", "3.6.1", "waive")
            .check("alice", now)
            .unwrap();
        assert_eq!(ok.address, "registry.terraform.io/acme/aws");
        assert_eq!(ok.at, now);
        let field = |r: ApprovalRequest| r.check("alice", now).unwrap_err().field;
        assert_eq!(
            field(request("thing", "acme/aws", "1.0.0", "waive")),
            "kind"
        );
        assert_eq!(
            field(request("git", "github.com/a/b", "1.0.0", "waive")),
            "kind"
        );
        assert_eq!(
            field(request("provider", "a/b/c/d/e", "1.0.0", "waive")),
            "address"
        );
        assert_eq!(
            field(request("release", "vim", "1.0.0", "waive")),
            "address"
        );
        assert_eq!(
            field(request("module", "acme/vpc/aws", "x y", "hold")),
            "version"
        );
        assert_eq!(
            field(request("provider", "acme/aws", "1.0.0", "bless")),
            "action"
        );
        let mut no_reason = request("provider", "acme/aws", "1.0.0", "hold");
        no_reason.reason = "  ".into();
        assert_eq!(field(no_reason), "reason");
        let mut past = request("provider", "acme/aws", "1.0.0", "hold");
        past.until = Some("2020-01-01".into());
        assert_eq!(field(past), "until");
        let mut garbled = request("provider", "acme/aws", "1.0.0", "hold");
        garbled.until = Some("next week".into());
        assert_eq!(field(garbled), "until");
        let mut later = request("release", "tofu", "1.8.0", "hold");
        later.until = Some("2027-01-31".into());
        assert!(later.check("alice", now).unwrap().until.is_some());
    }
}
