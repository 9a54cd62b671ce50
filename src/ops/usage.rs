//! `provender usage`: which client fetched which provider and module versions, every server's
//! counts added up (see [`crate::usage`]): one line per client and version, with the number of
//! uses and the first and last day of use in the period asked for. With `--refused`, only the
//! uses of versions the version policy refuses now, each with its rule: who a refusal affects.

use super::{CommonArgs, OpsError, Outcome};

/// `provender usage`
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Counts are written by the servers every usage.flush_interval and kept \
for usage.retention.\n\nExample: provender usage --config provender.toml --since 30d \
--address 'registry.terraform.io/hashicorp/aws'"
)]
pub struct UsageArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Only uses in this period before today, e.g. 30d, 12w (default: every day kept).
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
    /// Only these providers or modules (`hostname/namespace/type` or
    /// `hostname/namespace/name/system`; `*` globs).
    #[arg(long, value_name = "PATTERN")]
    pub address: Option<String>,
    /// Only these clients (`*` globs).
    #[arg(long, value_name = "PATTERN")]
    pub client: Option<String>,
    /// Print JSON (one object per client and version) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Only uses of versions the version policy refuses now, each with the rule that refuses
    /// it: who would be affected by the refusal.
    #[arg(long)]
    pub refused: bool,
}

/// A usage row with the refusal of its version (`--refused`).
#[derive(serde::Serialize)]
struct RefusedUse<'a> {
    #[serde(flatten)]
    row: &'a crate::usage::Row,
    /// `denied` or `held`.
    verdict: &'static str,
    rule: &'a str,
    /// `deny`, `hold` or `cooldown`.
    action: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
}

/// The first day of a period of `since` ending today, as [`crate::usage::read`] takes it.
pub(super) fn first_day(since: Option<&str>) -> Result<Option<String>, OpsError> {
    let Some(text) = since else {
        return Ok(None);
    };
    let period = humantime::parse_duration(text)
        .map_err(|e| OpsError::Usage(format!("--since {text:?}: {e}")))?;
    let start = std::time::SystemTime::now()
        .checked_sub(period)
        .unwrap_or(std::time::SystemTime::UNIX_EPOCH);
    Ok(Some(crate::usage::day_of(start)))
}

/// Reads the usage counts of the cache `core` opens.
pub(super) async fn read(
    core: &crate::mirror::Core,
    since: Option<&str>,
) -> Result<Vec<crate::usage::Row>, OpsError> {
    crate::usage::read(&**core.archives().storage(), since)
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("reading the usage counts: {e}")))
}

/// Runs `provender usage`.
pub async fn run(args: UsageArgs) -> Result<Outcome, OpsError> {
    let pattern = |p: &Option<String>, flag: &str| {
        p.as_ref()
            .map(|p| {
                crate::auth::Globs::new(std::slice::from_ref(p))
                    .map_err(|e| OpsError::Usage(format!("--{flag}: {e}")))
            })
            .transpose()
    };
    let (address, client) = (
        pattern(&args.address, "address")?,
        pattern(&args.client, "client")?,
    );
    let since = first_day(args.since.as_deref())?;
    let settings = super::load_settings(&args.common)?;
    let (core, _) = super::open_core(settings)?;
    let mut rows = read(&core, since.as_deref()).await?;
    rows.retain(|r| {
        address.as_ref().is_none_or(|g| g.is_match(&r.address))
            && client.as_ref().is_none_or(|g| g.is_match(&r.client))
    });
    if args.refused {
        return refused(core, &rows, args.json, since.as_deref()).await;
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("JSON of strings and numbers")
        );
        return Ok(Outcome::Success);
    }
    let table: Vec<[String; 7]> = rows
        .iter()
        .map(|r| {
            [
                r.kind.as_str().to_string(),
                r.address.clone(),
                r.version.clone(),
                r.client.clone(),
                r.count.to_string(),
                r.first.clone(),
                r.last.clone(),
            ]
        })
        .collect();
    if table.is_empty() {
        println!(
            "usage: no uses recorded{}",
            match &since {
                Some(day) => format!(" since {day}"),
                None => String::new(),
            }
        );
        return Ok(Outcome::Success);
    }
    let header = [
        "KIND", "ADDRESS", "VERSION", "CLIENT", "USES", "FIRST", "LAST",
    ]
    .map(String::from);
    super::ls::print_table(&header, &table);
    Ok(Outcome::Success)
}

/// `provender usage --refused`: the uses of versions the policy refuses now, each with its rule.
async fn refused(
    core: std::sync::Arc<crate::mirror::Core>,
    rows: &[crate::usage::Row],
    json: bool,
    since: Option<&str>,
) -> Result<Outcome, OpsError> {
    super::load_approvals(&core).await?;
    let view = crate::catalogue::Catalogue::new(core)
        .policy()
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("judging the cache: {e}")))?;
    let uses: Vec<RefusedUse> = rows
        .iter()
        .filter_map(|row| {
            let v = view.refusal_of(row)?;
            Some(RefusedUse {
                row,
                verdict: v.verdict,
                rule: &v.rule,
                action: v.action,
                reason: v.reason.as_deref(),
            })
        })
        .collect();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&uses).expect("JSON of strings and numbers")
        );
        return Ok(Outcome::Success);
    }
    if uses.is_empty() {
        println!(
            "usage: no use of a version the policy refuses now{}",
            match since {
                Some(day) => format!(" since {day}"),
                None => String::new(),
            }
        );
        return Ok(Outcome::Success);
    }
    let table: Vec<[String; 8]> = uses
        .iter()
        .map(|u| {
            [
                u.row.kind.as_str().to_string(),
                u.row.address.clone(),
                u.row.version.clone(),
                u.row.client.clone(),
                u.row.count.to_string(),
                u.row.last.clone(),
                u.verdict.to_string(),
                format!("{} ({})", u.rule, u.action),
            ]
        })
        .collect();
    let header = [
        "KIND", "ADDRESS", "VERSION", "CLIENT", "USES", "LAST", "REFUSED", "RULE",
    ]
    .map(String::from);
    super::ls::print_table(&header, &table);
    Ok(Outcome::Success)
}
