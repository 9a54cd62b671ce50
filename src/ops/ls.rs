//! `provender ls`: what the cache holds, one line per archive, grouped by provider and version,
//! with sizes, the trust level of each archive's origin signature (official, partner,
//! community, unsigned, unverified), and its last use (when it was last served or, if later,
//! stored: what `provender prune` goes by); then one line per cached module version, with its
//! last use, how it was obtained (`origin`, `signed_bundle`, `unverified`) and where it came
//! from (for git sources, the commit the reference resolved to); then one line per repository
//! of the git cache, with its size, when it last matched its origin, and its last use.

use std::time::SystemTime;

use super::{CommonArgs, OpsError, Outcome, human_bytes};

/// `provender ls`
#[derive(clap::Args, Debug)]
pub struct LsArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Print JSON (one object per archive) instead of a table.
    #[arg(long)]
    pub json: bool,
}

fn when(t: Option<SystemTime>) -> String {
    match t {
        Some(t) if t > SystemTime::UNIX_EPOCH => humantime::format_rfc3339_seconds(t).to_string(),
        _ => "-".into(),
    }
}

/// Runs `provender ls`.
pub async fn run(args: LsArgs) -> Result<Outcome, OpsError> {
    let settings = super::load_settings(&args.common)?;
    let (mirror, _) = super::open_core(settings)?;
    let mut entries = mirror
        .archives()
        .list()
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("listing the archive store: {e}")))?;
    entries.sort_by(|a, b| {
        (&a.key.addr, &a.key.version, &a.key.platform).cmp(&(
            &b.key.addr,
            &b.key.version,
            &b.key.platform,
        ))
    });
    let mut trust = Vec::with_capacity(entries.len());
    for e in &entries {
        trust.push(match &e.record {
            Some(info) => mirror.archive_trust(&e.key, info).await.as_str(),
            None => "-",
        });
    }
    let modules = mirror
        .modules()
        .list()
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("listing the module store: {e}")))?;
    let module_rows: Vec<[String; 6]> = modules
        .iter()
        .map(|m| {
            let source = match &m.record {
                Some(rec) => match &rec.source {
                    crate::records::ModuleSource::Archive { url } => url.clone(),
                    crate::records::ModuleSource::Git { url, commit, .. } => {
                        format!("git {url} @ {commit}")
                    }
                    crate::records::ModuleSource::Published => "published here".to_string(),
                },
                None => "(no record: not served)".to_string(),
            };
            [
                m.key.addr.to_string(),
                m.key.version.to_string(),
                human_bytes(m.size),
                m.record
                    .as_ref()
                    .map_or("-", |r| r.trust.as_str())
                    .to_string(),
                when(Some(m.last_use())),
                source,
            ]
        })
        .collect();
    let mut releases = mirror
        .releases()
        .list()
        .await
        .map_err(|e| OpsError::Failed(anyhow::anyhow!("listing the release store: {e}")))?;
    releases.sort_by(|a, b| a.key.cmp(&b.key));
    let repos = crate::mirror::GitMirror::new(mirror.clone()).cached();
    let secs = |s: u64| Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s));
    if args.json {
        let git_objects = repos.iter().map(|r| {
            serde_json::json!({
                "kind": "git",
                "repository": r.repo.to_string(),
                "size": r.size,
                "refreshed": when(secs(r.refreshed)),
                "last_used": when(secs(r.last_used)),
            })
        });
        let release_objects = releases.iter().map(|r| {
            serde_json::json!({
                "kind": "release",
                "cli": r.key.product.as_str(),
                "version": r.key.version.to_string(),
                "platform": r.key.platform.to_string(),
                "file": r.key.filename(),
                "size": r.size,
                "sha256": r.record.as_ref().map(|z| z.sha256.clone()),
                "modified": when(Some(r.modified)),
                "last_used": when(Some(r.last_use())),
            })
        });
        let module_objects = modules.iter().map(|m| {
            serde_json::json!({
                "kind": "module",
                "module": m.key.addr.to_string(),
                "version": m.key.version.to_string(),
                "size": m.size,
                "sha256": m.record.as_ref().map(|r| r.sha256.clone()),
                "source": m.record.as_ref().map(|r| &r.source),
                "subdir": m.record.as_ref().and_then(|r| r.subdir.clone()),
                "trust": m.record.as_ref().map(|r| r.trust.as_str()),
                "modified": when(Some(m.modified)),
                "last_used": when(Some(m.last_use())),
            })
        });
        let rows: Vec<serde_json::Value> = entries
            .iter()
            .zip(&trust)
            .map(|(e, trust)| {
                serde_json::json!({
                    "kind": "provider",
                    "provider": e.key.addr.to_string(),
                    "version": e.key.version.to_string(),
                    "platform": e.key.platform.to_string(),
                    "size": e.size,
                    "sha256": e.record.as_ref().map(|i| i.sha256.clone()),
                    "h1": e.record.as_ref().map(|i| i.h1.clone()),
                    "trust": (*trust != "-").then_some(trust),
                    "modified": when(Some(e.modified)),
                    "last_used": when(Some(e.last_use())),
                })
            })
            .chain(module_objects)
            .chain(release_objects)
            .chain(git_objects)
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).expect("JSON of strings")
        );
        return Ok(Outcome::Success);
    }
    let rows: Vec<[String; 6]> = entries
        .iter()
        .zip(&trust)
        .map(|(e, trust)| {
            let mut size = human_bytes(e.size);
            if e.record.is_none() {
                size.push_str(" (no record: not served)");
            }
            [
                e.key.addr.to_string(),
                e.key.version.to_string(),
                e.key.platform.to_string(),
                size,
                trust.to_string(),
                when(Some(e.last_use())),
            ]
        })
        .collect();
    let header = [
        "PROVIDER",
        "VERSION",
        "PLATFORM",
        "SIZE",
        "TRUST",
        "LAST USED",
    ]
    .map(String::from);
    print_table(&header, &rows);
    if !module_rows.is_empty() {
        println!();
        let header =
            ["MODULE", "VERSION", "SIZE", "TRUST", "LAST USED", "SOURCE"].map(String::from);
        print_table(&header, &module_rows);
    }
    if !releases.is_empty() {
        println!();
        let header = ["CLI", "VERSION", "FILE", "SIZE", "LAST USED"].map(String::from);
        let rows: Vec<[String; 5]> = releases
            .iter()
            .map(|r| {
                [
                    r.key.product.to_string(),
                    r.key.version.to_string(),
                    r.key.filename(),
                    human_bytes(r.size),
                    when(Some(r.last_use())),
                ]
            })
            .collect();
        print_table(&header, &rows);
    }
    if !repos.is_empty() {
        println!();
        let header = ["GIT REPOSITORY", "SIZE", "REFRESHED", "LAST USED"].map(String::from);
        let rows: Vec<[String; 4]> = repos
            .iter()
            .map(|r| {
                [
                    r.repo.to_string(),
                    human_bytes(r.size),
                    when(secs(r.refreshed)),
                    when(secs(r.last_used)),
                ]
            })
            .collect();
        print_table(&header, &rows);
    }
    let versions: std::collections::BTreeSet<_> = entries
        .iter()
        .map(|e| (&e.key.addr, &e.key.version))
        .collect();
    let providers: std::collections::BTreeSet<_> = entries.iter().map(|e| &e.key.addr).collect();
    println!(
        "{} archives, {} provider versions, {} providers, {} in {}",
        entries.len(),
        versions.len(),
        providers.len(),
        human_bytes(entries.iter().map(|e| e.size).sum()),
        mirror.archives().storage().describe()
    );
    if !modules.is_empty() {
        println!(
            "{} module versions, {}",
            modules.len(),
            human_bytes(modules.iter().map(|m| m.size).sum())
        );
    }
    if !releases.is_empty() {
        println!(
            "{} CLI release files, {}",
            releases.len(),
            human_bytes(releases.iter().map(|r| r.size).sum())
        );
    }
    if !repos.is_empty() {
        println!(
            "{} git repositories, {}",
            repos.len(),
            human_bytes(repos.iter().map(|r| r.size).sum())
        );
    }
    Ok(Outcome::Success)
}

/// Prints rows under a header, in columns as wide as their widest cell.
pub(super) fn print_table<const N: usize>(header: &[String; N], rows: &[[String; N]]) {
    let mut widths = header.clone().map(|h| h.len());
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.len());
        }
    }
    for r in std::iter::once(header).chain(rows) {
        let line: Vec<String> = r
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
}
