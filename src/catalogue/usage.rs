//! Who uses what, for the usage page and `-/api/v1/usage`: the servers' usage counts (see
//! [`crate::usage`]) over a period, filtered by address or client.

use serde::Serialize;

use crate::usage::Row;

/// The periods a person can choose, in days; `0` is every day kept.
pub const PERIODS: [u64; 4] = [7, 30, 90, 0];

/// The query of the usage page and `-/api/v1/usage`: `q` (a part of the address or client,
/// any case) and `days` (7, 30, 90, or 0 for all; default 30).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageQuery {
    pub q: String,
    pub days: u64,
}

impl Default for UsageQuery {
    fn default() -> Self {
        UsageQuery {
            q: String::new(),
            days: 30,
        }
    }
}

impl UsageQuery {
    pub fn parse(query: Option<&str>) -> UsageQuery {
        let mut out = UsageQuery::default();
        for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            match &*key {
                "q" => out.q = value.trim().to_string(),
                "days" => {
                    if let Some(days) = value.parse().ok().filter(|d| PERIODS.contains(d)) {
                        out.days = days;
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// The first day of the period (`YYYY-MM-DD`), or `None` for every day kept.
    pub fn first_day(&self, now: std::time::SystemTime) -> Option<String> {
        (self.days > 0).then(|| {
            crate::usage::day_of(now - std::time::Duration::from_secs((self.days - 1) * 86_400))
        })
    }
}

/// `GET -/api/v1/usage`.
#[derive(Debug, Clone, Serialize)]
pub struct UsageList {
    pub api_version: u32,
    /// The first day counted (`YYYY-MM-DD`), or null for every day kept.
    pub since: Option<String>,
    /// Uses in the period, all clients and versions.
    pub total: u64,
    pub uses: Vec<Row>,
}

impl UsageList {
    pub fn of(rows: Vec<Row>, query: &UsageQuery, since: Option<String>) -> UsageList {
        let needle = query.q.to_lowercase();
        let uses: Vec<Row> = rows
            .into_iter()
            .filter(|r| {
                needle.is_empty()
                    || r.address.to_lowercase().contains(&needle)
                    || r.client.to_lowercase().contains(&needle)
            })
            .collect();
        UsageList {
            api_version: super::API_VERSION,
            since,
            total: uses.iter().map(|r| r.count).sum(),
            uses,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::Kind;

    fn row(client: &str, address: &str, count: u64) -> Row {
        Row {
            client: client.into(),
            kind: Kind::Provider,
            address: address.into(),
            version: "1.0.0".into(),
            count,
            first: "2026-11-01".into(),
            last: "2026-11-02".into(),
        }
    }

    #[test]
    fn queries_filter_by_address_or_client() {
        let q = UsageQuery::parse(Some("q=AWS&days=7"));
        assert_eq!(q.days, 7);
        assert_eq!(UsageQuery::parse(Some("days=5")).days, 30);
        let rows = vec![
            row("ci", "registry.terraform.io/hashicorp/aws", 3),
            row("platform", "registry.terraform.io/hashicorp/google", 1),
            row("aws-team", "registry.terraform.io/acme/x", 2),
        ];
        let list = UsageList::of(rows, &q, None);
        assert_eq!(list.uses.len(), 2);
        assert_eq!(list.total, 5);
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_764_201_599);
        assert_eq!(q.first_day(t).as_deref(), Some("2025-11-20"));
        assert_eq!(UsageQuery::parse(Some("days=0")).first_day(t), None);
    }
}
