//! `provender tokens`: people's tokens from `terraform login`, seen and revoked by an operator
//! on the store (no server needed; every server sees a revocation within seconds).
//!
//! - `list [--person NAME] [--json]` shows every token (or one person's): its state, when and
//!   from where it was made, when it expires, when and from where it was last used;
//! - `revoke ID... [--by NAME]` and `revoke --person NAME` end tokens at once, recording who
//!   revoked them.

use super::{CommonArgs, OpsError, Outcome, usage};
use crate::auth::tokens::{PersonTokens, TokenState, TokenView};
use crate::policy::format_time;

/// `provender tokens`
#[derive(clap::Args, Debug)]
pub struct TokensArgs {
    #[command(subcommand)]
    pub command: TokensCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum TokensCommand {
    /// Every person's tokens (or one person's), newest first.
    List(ListArgs),
    /// End tokens at once: by ID, or every token of a person.
    Revoke(RevokeArgs),
}

#[derive(clap::Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Only this person's (`sso:alice@example.com`).
    #[arg(long)]
    pub person: Option<String>,
    /// Print JSON (the shape of `GET -/api/v1/tokens`).
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples: provender tokens revoke 3f2a...  |  provender tokens revoke \
--person sso:alice@example.com"
)]
pub struct RevokeArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// The tokens' IDs (as `list` shows them).
    pub ids: Vec<String>,
    /// Every active token of this person.
    #[arg(long, conflicts_with = "ids")]
    pub person: Option<String>,
    /// Who revokes, kept in the record (default: `$USER`).
    #[arg(long, env = "USER", default_value = "operator")]
    pub by: String,
}

/// Runs `provender tokens ...`.
pub async fn run(args: TokensArgs) -> Result<Outcome, OpsError> {
    match args.command {
        TokensCommand::List(a) => list(a).await,
        TokensCommand::Revoke(a) => revoke(a).await,
    }
}

fn open(common: &CommonArgs) -> Result<(PersonTokens, u64), OpsError> {
    let settings = super::load_settings(common)?;
    let storage = crate::storage::open(&settings.cache.storage)
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("cache: cannot open the store: {e}")))?;
    Ok((PersonTokens::new(storage), crate::clock::now_secs()))
}

fn failed(e: impl std::fmt::Display) -> OpsError {
    OpsError::Failed(anyhow::anyhow!("{e}"))
}

async fn list(args: ListArgs) -> Result<Outcome, OpsError> {
    let (tokens, now) = open(&args.common)?;
    let listed = tokens
        .list(args.person.as_deref(), now)
        .await
        .map_err(failed)?;
    if args.json {
        println!("{}", serde_json::json!({ "tokens": listed }));
        return Ok(Outcome::Success);
    }
    if listed.is_empty() {
        println!("no tokens");
    }
    for t in &listed {
        println!("{}", line(t));
    }
    Ok(Outcome::Success)
}

/// One token as `list` prints it.
fn line(t: &TokenView) -> String {
    let state = match (t.state, &t.revoked_by) {
        (TokenState::Revoked, Some(by)) => format!("revoked by {by}"),
        (TokenState::Revoked, None) => "revoked".into(),
        (TokenState::Expired, _) => "expired".into(),
        (TokenState::Active, _) => "active".into(),
    };
    let used = match (t.last_used, &t.last_from) {
        (Some(at), Some(from)) => format!("last used {} from {from}", format_time(at)),
        (Some(at), None) => format!("last used {}", format_time(at)),
        _ => "never used".into(),
    };
    format!(
        "{id}  {person}  {state}  created {created} from {from}  expires {expires}  {used}",
        id = t.id,
        person = t.person,
        created = format_time(t.created),
        from = t.created_from,
        expires = format_time(t.expires),
    )
}

async fn revoke(args: RevokeArgs) -> Result<Outcome, OpsError> {
    if args.ids.is_empty() && args.person.is_none() {
        return Err(usage("name the tokens to revoke (IDs), or --person"));
    }
    let (tokens, now) = open(&args.common)?;
    let ids: Vec<String> = match &args.person {
        Some(person) => tokens
            .list(Some(person), now)
            .await
            .map_err(failed)?
            .into_iter()
            .filter(|t| t.state == TokenState::Active)
            .map(|t| t.info.id)
            .collect(),
        None => args.ids.clone(),
    };
    let mut missing = 0;
    for id in &ids {
        match tokens
            .revoke(id, None, &args.by, now)
            .await
            .map_err(failed)?
        {
            Some(record) => println!("revoked {} ({})", record.id, record.person),
            None => {
                eprintln!("provender: no token {id}");
                missing += 1;
            }
        }
    }
    if ids.is_empty() {
        println!("no active tokens of {}", args.person.unwrap_or_default());
    }
    Ok(Outcome::from_failures(missing))
}
