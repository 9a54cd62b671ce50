//! The version policy at the core: every door's version list is sifted here and every request
//! for one version judged here, so no door keeps a policy of its own.
//!
//! A list leaves out what the policy refuses, so the CLIs pick the newest admitted version by
//! themselves; a request for a refused version is a [`Error::NotAdmitted`] naming the rule. Each
//! refusal, waiver and `warn` match is counted in `provender_policy_decisions_total`.

use std::sync::Arc;

use crate::address::{ProviderAddr, Version};
use crate::error::{Error, Result};
use crate::policy::{Admitted, Decision, Kind, Policy, Refused, Verdict};
use crate::records::{FirstSeen, IndexRecord};

use super::{Core, Reach};

/// When a list's holder first saw `version`: its recorded time, `None` for a baseline version
/// (of no known age), and `now` for a version the list does not have (newer than the list).
pub fn seen_in(seen: &FirstSeen, listed: bool, version: &Version, now: u64) -> Option<u64> {
    if listed { seen.of(version) } else { Some(now) }
}

impl Core {
    /// The version policy every door obeys.
    pub fn policy(&self) -> &Arc<Policy> {
        &self.policy
    }

    /// Judges one version of `address`, first seen at `seen`: `Ok` when admitted, else the
    /// refusal as the client's error.
    pub fn judge(
        &self,
        kind: Kind,
        address: &str,
        version: &Version,
        seen: Option<u64>,
    ) -> Result<()> {
        if self.policy.is_open(kind) {
            return Ok(());
        }
        let decision = self.policy.decide(kind, address, version, seen);
        self.count(&decision);
        match decision.verdict {
            Verdict::Admit(_) => Ok(()),
            Verdict::Refuse(refused) => {
                tracing::info!(
                    rule = refused.rule_name(),
                    action = refused.action(),
                    "refused by the version policy: {refused}"
                );
                Err(Error::NotAdmitted(refused))
            }
        }
    }

    /// Judges a thing without versions (a git repository): only rules without `versions` and
    /// `policy.default` apply.
    /// A git repository is judged by its name without `.git`, so a rule covers both spellings.
    pub fn judge_unversioned(&self, kind: Kind, address: &str) -> Result<()> {
        if self.policy.is_open(kind) {
            return Ok(());
        }
        let address = match kind {
            Kind::Git => address.strip_suffix(".git").unwrap_or(address),
            _ => address,
        };
        let decision = self.policy.decide_unversioned(kind, address);
        self.count(&decision);
        decision.into_result().map(|_| ()).map_err(|refused| {
            tracing::info!(
                rule = refused.rule_name(),
                "refused by the version policy: {refused}"
            );
            Error::NotAdmitted(refused)
        })
    }

    /// Sifts a version list of `address`: `None` when the policy admits every item, else the
    /// items it admits and the refusals of those it leaves out.
    pub fn sift<T: Clone>(
        &self,
        kind: Kind,
        address: &str,
        items: &[T],
        version_of: impl Fn(&T) -> &Version,
        seen: &FirstSeen,
    ) -> Option<(Vec<T>, Vec<Box<Refused>>)> {
        if self.policy.is_open(kind) {
            return None;
        }
        let rules = self.policy.at(kind, address);
        let mut kept = Vec::with_capacity(items.len());
        let mut refused = Vec::new();
        for item in items {
            let version = version_of(item);
            let decision = rules.decide(version, seen.of(version));
            self.count(&decision);
            match decision.verdict {
                Verdict::Admit(_) => kept.push(item.clone()),
                Verdict::Refuse(r) => refused.push(r),
            }
        }
        (!refused.is_empty()).then_some((kept, refused))
    }

    /// Counts a decision that refused, waived or warned (plain admissions are not counted).
    fn count(&self, decision: &Decision) {
        let counter = &self.metrics.policy_decisions;
        for rule in &decision.warnings {
            counter.with_label_values(&[&rule.name, "warn"]).inc();
        }
        match &decision.verdict {
            Verdict::Refuse(r) => counter
                .with_label_values(&[r.rule_name(), r.action()])
                .inc(),
            Verdict::Admit(Admitted::Waiver(_)) => {
                counter.with_label_values(&["approval", "waive"]).inc()
            }
            Verdict::Admit(_) => {}
        }
    }

    /// A provider's version list with what the policy refuses left out, and those refusals (the
    /// registry facade tells them as warnings).
    pub async fn versions_judged(
        self: &Arc<Self>,
        addr: &ProviderAddr,
        reach: &Reach,
    ) -> Result<(Arc<IndexRecord>, Vec<Box<Refused>>)> {
        let rec = self.listed_versions(addr, reach).await?;
        let Some((versions, refused)) = self.sift(
            Kind::Provider,
            &addr.to_string(),
            &rec.versions,
            |v| &v.version,
            &rec.seen,
        ) else {
            return Ok((rec, Vec::new()));
        };
        let sifted = IndexRecord {
            fetched_at: rec.fetched_at,
            found: rec.found,
            versions,
            seen: rec.seen.clone(),
            rendered: Default::default(),
        };
        Ok((Arc::new(sifted), refused))
    }

    /// Judges one provider version, by when its cached version list first had it.
    pub async fn judge_provider(&self, addr: &ProviderAddr, version: &Version) -> Result<()> {
        if self.policy.is_open(Kind::Provider) {
            return Ok(());
        }
        let seen = match self.provider_lists.cached(addr).await {
            Some(list) if list.found => seen_in(
                &list.seen,
                list.platforms_of(version).is_some(),
                version,
                self.policy.now(),
            ),
            _ => None,
        };
        self.judge(Kind::Provider, &addr.to_string(), version, seen)
    }
}
