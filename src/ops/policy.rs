//! `provender policy`: operators' approvals of the version policy, made on the store like
//! `provender unpublish` (no server needed; every server reads them within seconds), and what
//! the policy decides.
//!
//! - `waive|hold|revoke <kind> <address> <version> --reason TEXT [--until TIME] [--by NAME]`
//!   records an approval (its audit record names who, when, why and until when);
//! - `list` shows the rules in force and where each was written, the approvals in force, and
//!   what of the cache the policy refuses or waives now, with the rule and who used it;
//! - `history` shows every approval record, oldest first;
//! - `check <kind> <address> <version>` prints the decision and the rule (exit 0 admitted, 1
//!   refused).
//!
//! `list --json` and `history --json` print the same documents as `GET -/api/v1/policy` and
//! `GET -/api/v1/policy/history`.

use std::sync::Arc;

use super::{CommonArgs, OpsError, Outcome, usage};
use crate::address::Version;
use crate::catalogue::{
    ApprovalRequest, ApproveError, BadApproval, Catalogue, Judge, canonical_address, parse_kind,
};
use crate::mirror::Core;
use crate::policy::{Admitted, ApprovalAction, Kind, Verdict, format_time};

/// `provender policy`
#[derive(clap::Args, Debug)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub command: PolicyCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum PolicyCommand {
    /// Admit one version whatever the rules and the cooldown say (an audit record is kept).
    Waive(ApproveArgs),
    /// Refuse one version whatever the rules say, until revoked or --until (an audit record is
    /// kept).
    Hold(ApproveArgs),
    /// End a version's waiver or hold (an audit record is kept).
    Revoke(ApproveArgs),
    /// The rules in force and where each is written, the approvals in force, and what of the
    /// cache the policy refuses or waives now, with who used it.
    List(ShowArgs),
    /// Every approval record, oldest first: who, when, why, until when.
    History(ShowArgs),
    /// The policy's decision for one version, and the rule (exit 0 admitted, 1 refused).
    Check(CheckArgs),
}

/// What an approval is about, and why.
#[derive(clap::Args, Debug)]
#[command(after_help = "Example: provender policy waive provider \
registry.terraform.io/hashicorp/aws 5.31.0 --reason 'fix for INC-42' --until 2027-01-31")]
pub struct ApproveArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// `provider`, `module` or `release`.
    pub kind: String,
    /// `hostname/namespace/type`, `hostname/namespace/name/system`, or `terraform`/`tofu`.
    pub address: String,
    pub version: String,
    /// Why, kept in the audit record.
    #[arg(long)]
    pub reason: Option<String>,
    /// When the approval ends by itself: an RFC 3339 time or a date (midnight UTC).
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// Who approves, kept in the audit record (default: `$USER`).
    #[arg(long, env = "USER", default_value = "operator")]
    pub by: String,
}

#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Print the API's JSON document instead of tables.
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// `provider`, `module`, `release` or `git`.
    pub kind: String,
    pub address: String,
    /// The version (a git repository is judged whole: give `-`).
    pub version: String,
}

/// Runs `provender policy ...`.
pub async fn run(args: PolicyArgs) -> Result<Outcome, OpsError> {
    match args.command {
        PolicyCommand::Waive(a) => record(a, ApprovalAction::Waive).await,
        PolicyCommand::Hold(a) => record(a, ApprovalAction::Hold).await,
        PolicyCommand::Revoke(a) => record(a, ApprovalAction::Revoke).await,
        PolicyCommand::List(a) => list(a).await,
        PolicyCommand::History(a) => history(a).await,
        PolicyCommand::Check(a) => check(a).await,
    }
}

/// A bad argument, named as the command line names it.
fn bad_argument(bad: BadApproval) -> OpsError {
    let argument = match bad.field {
        "kind" => "KIND",
        "address" => "ADDRESS",
        "version" => "VERSION",
        "reason" => "--reason",
        "until" => "--until",
        "by" => "--by",
        other => other,
    };
    usage(format!("{argument}: {}", bad.message))
}

/// The cache and its policy, with the approvals recorded so far.
async fn open(common: &CommonArgs) -> Result<Arc<Core>, OpsError> {
    let settings = super::load_settings(common)?;
    let (core, _) = super::open_core(settings)?;
    super::load_approvals(&core).await?;
    Ok(core)
}

async fn record(args: ApproveArgs, action: ApprovalAction) -> Result<Outcome, OpsError> {
    let request = ApprovalRequest {
        kind: args.kind,
        address: args.address,
        version: args.version,
        action: action.as_str().to_string(),
        reason: args.reason.unwrap_or_default(),
        until: args.until,
    };
    // Arguments are checked before the store is opened.
    request
        .check(&args.by, crate::clock::now_secs())
        .map_err(bad_argument)?;
    let core = open(&args.common).await?;
    let approval = crate::catalogue::approve(&core, &request, &args.by)
        .await
        .map_err(|e| match e {
            ApproveError::Bad(bad) => bad_argument(bad),
            ApproveError::NothingToRevoke(_) => usage(e.to_string()),
            ApproveError::Record(crate::policy::approvals::ApprovalError::Invalid(m)) => usage(m),
            ApproveError::Record(other) => {
                OpsError::Failed(anyhow::anyhow!("recording the approval: {other}"))
            }
        })?;
    let done = match approval.action {
        ApprovalAction::Waive => "waived",
        ApprovalAction::Hold => "held",
        ApprovalAction::Revoke => "revoked the approval of",
    };
    println!(
        "{done} {} {} {} by {} at {}{}: {} (audit record {})",
        approval.kind,
        approval.address,
        approval.version,
        approval.by,
        format_time(approval.at),
        approval
            .until
            .map(|t| format!(" until {}", format_time(t)))
            .unwrap_or_default(),
        approval.reason,
        approval.id
    );
    Ok(Outcome::Success)
}

async fn list(args: ShowArgs) -> Result<Outcome, OpsError> {
    let core = open(&args.common).await?;
    let view = Catalogue::new(core)
        .policy()
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("reading the policy's view: {e}")))?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&view).expect("the policy view serialises")
        );
        return Ok(Outcome::Success);
    }
    println!(
        "default: {}; cooldown: {}; rules file: {}",
        view.default,
        view.min_age,
        view.rules_file.as_deref().unwrap_or("none")
    );
    println!("\nrules ({}):", view.rules.len());
    if !view.rules.is_empty() {
        let rows: Vec<[String; 6]> = view
            .rules
            .iter()
            .map(|r| {
                [
                    r.name.clone(),
                    r.action.to_string(),
                    r.versions.clone().unwrap_or_else(|| "all".into()),
                    r.matches(),
                    match (r.expires, r.expired) {
                        (Some(t), true) => format!("expired {}", format_time(t)),
                        (Some(t), false) => format_time(t),
                        (None, _) => "never".into(),
                    },
                    r.place.clone(),
                ]
            })
            .collect();
        let header = [
            "NAME",
            "ACTION",
            "VERSIONS",
            "MATCHES",
            "EXPIRES",
            "WRITTEN AT",
        ];
        super::ls::print_table(&header.map(String::from), &rows);
    }
    println!("\napprovals in force ({}):", view.approvals.len());
    if !view.approvals.is_empty() {
        let rows: Vec<[String; 7]> = view
            .approvals
            .iter()
            .map(|a| {
                [
                    a.action.as_str().to_string(),
                    format!("{} {}", a.kind, a.address),
                    a.version.to_string(),
                    a.by.clone(),
                    format_time(a.at),
                    a.until.map(format_time).unwrap_or_else(|| "-".into()),
                    a.reason.clone(),
                ]
            })
            .collect();
        let header = ["ACTION", "WHAT", "VERSION", "BY", "AT", "UNTIL", "REASON"];
        super::ls::print_table(&header.map(String::from), &rows);
    }
    println!(
        "\nrefused or waived in the cache now ({}):",
        view.versions.len()
    );
    if !view.versions.is_empty() {
        let rows: Vec<[String; 7]> = view
            .versions
            .iter()
            .map(|v| {
                [
                    format!("{} {}", v.kind, v.address),
                    v.version.clone().unwrap_or_else(|| "-".into()),
                    v.verdict.to_string(),
                    format!("{} ({})", v.rule, v.action),
                    v.admissible_at
                        .map(format_time)
                        .unwrap_or_else(|| "-".into()),
                    v.uses.to_string(),
                    v.users
                        .iter()
                        .map(|u| u.client.as_str())
                        .collect::<Vec<_>>()
                        .join(","),
                ]
            })
            .collect();
        let header = [
            "WHAT",
            "VERSION",
            "VERDICT",
            "RULE",
            "INSTALLABLE AT",
            "USES",
            "USED BY",
        ];
        super::ls::print_table(&header.map(String::from), &rows);
    }
    Ok(Outcome::Success)
}

async fn history(args: ShowArgs) -> Result<Outcome, OpsError> {
    let core = open(&args.common).await?;
    let history = Catalogue::new(core)
        .policy_history()
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("reading the approval records: {e}")))?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&history).expect("approval records serialise")
        );
        return Ok(Outcome::Success);
    }
    if history.history.is_empty() {
        println!("history: no approval has been recorded");
        return Ok(Outcome::Success);
    }
    let rows: Vec<[String; 7]> = history
        .history
        .iter()
        .map(|a| {
            [
                format_time(a.at),
                a.action.as_str().to_string(),
                format!("{} {}", a.kind, a.address),
                a.version.to_string(),
                a.by.clone(),
                a.until.map(format_time).unwrap_or_else(|| "-".into()),
                a.reason.clone(),
            ]
        })
        .collect();
    let header = ["AT", "ACTION", "WHAT", "VERSION", "BY", "UNTIL", "REASON"];
    super::ls::print_table(&header.map(String::from), &rows);
    Ok(Outcome::Success)
}

async fn check(args: CheckArgs) -> Result<Outcome, OpsError> {
    let kind = parse_kind(&args.kind).map_err(bad_argument)?;
    let address = canonical_address(kind, &args.address).map_err(bad_argument)?;
    let version = match (kind, args.version.trim()) {
        (Kind::Git, "-" | "") => None,
        (_, text) => Some(Version::parse(text).map_err(|e| usage(format!("VERSION: {e}")))?),
    };
    let core = open(&args.common).await?;
    let decision = Judge::new(core)
        .decide(kind, &address, version.as_ref())
        .await;
    let what = match &version {
        Some(v) => format!("{kind} {address} {v}"),
        None => format!("{kind} {address}"),
    };
    for rule in &decision.warnings {
        println!("warn: rule {:?} ({}) matches {what}", rule.name, rule.place);
    }
    match decision.verdict {
        Verdict::Admit(why) => {
            let because = match why {
                Admitted::Default => "no rule refuses it (policy.default)".to_string(),
                Admitted::Rule(r) => format!("rule {:?} allows it ({})", r.name, r.place),
                Admitted::Waiver(a) => {
                    format!("waived by {} at {}: {}", a.by, format_time(a.at), a.reason)
                }
            };
            println!("admitted: {what}: {because}");
            Ok(Outcome::Success)
        }
        Verdict::Refuse(refused) => {
            println!("{}: {refused}", refused.verb());
            println!("rule: {} ({})", refused.rule_name(), refused.action());
            Ok(Outcome::Failed)
        }
    }
}
