//! Operators' approvals: a waiver admits one version early (past its cooldown or a rule), a
//! hold keeps one back, a revocation ends either.
//!
//! Each approval is an immutable record in the cache's store, `policy/approvals/<id>.json`,
//! written once and never changed: the records are the audit trail (who, when, why, until when),
//! and the approval in force for a version is the latest of its records (a revocation ends it;
//! one past its `until` is no longer in force). Every replica reads the records at start and
//! again every few seconds, so an approval made on one holds on all.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::Kind;
use crate::address::Version;
use crate::storage::{Key, Storage, StorageError};

/// The store prefix of approval records.
const ROOT: [&str; 2] = ["policy", "approvals"];

/// What an approval does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalAction {
    /// Admits the version, whatever the rules and the cooldown say.
    Waive,
    /// Refuses the version, whatever the rules say.
    Hold,
    /// Ends the version's waiver or hold.
    Revoke,
}

impl ApprovalAction {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalAction::Waive => "waive",
            ApprovalAction::Hold => "hold",
            ApprovalAction::Revoke => "revoke",
        }
    }
}

/// One approval record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// The record's name in the store (a time-ordered, unique text).
    pub id: String,
    pub kind: Kind,
    /// `hostname/namespace/type`, `hostname/namespace/name/system`, or the CLI's name.
    pub address: String,
    pub version: Version,
    pub action: ApprovalAction,
    /// Who made it (the operator's name, or the signed-in person).
    pub by: String,
    /// Unix seconds.
    pub at: u64,
    pub reason: String,
    /// Unix seconds after which it is no longer in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
}

type Subject = (Kind, String, Version);

#[derive(Default)]
struct State {
    /// Every record read, by id.
    seen: HashSet<String>,
    /// The latest record per version.
    latest: HashMap<Subject, Arc<Approval>>,
}

/// The approvals in force, kept in memory and (for a server) in the store.
pub struct Approvals {
    storage: Option<Arc<dyn Storage>>,
    state: RwLock<State>,
    /// How many versions have a waiver or hold on record (a revocation counts none), so that an
    /// empty set costs a request nothing.
    active: AtomicUsize,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals")
            .field("active", &self.active.load(Ordering::Relaxed))
            .finish()
    }
}

/// An approval that could not be recorded or read.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error("{0}")]
    Storage(#[from] StorageError),
    #[error("approval record {key}: {message}")]
    Unreadable { key: String, message: String },
    #[error("{0}")]
    Invalid(String),
}

impl Approvals {
    /// Approvals kept only in memory (tests, and commands without a store).
    pub fn in_memory() -> Approvals {
        Approvals {
            storage: None,
            state: RwLock::new(State::default()),
            active: AtomicUsize::new(0),
        }
    }

    /// Approvals kept in `storage`; [`Approvals::refresh`] reads them.
    pub fn in_store(storage: Arc<dyn Storage>) -> Approvals {
        Approvals {
            storage: Some(storage),
            ..Approvals::in_memory()
        }
    }

    /// Whether no version has a waiver or a hold on record.
    pub fn is_empty(&self) -> bool {
        self.active.load(Ordering::Relaxed) == 0
    }

    /// The approval in force for a version at `now`, if any.
    pub fn current(
        &self,
        kind: Kind,
        address: &str,
        version: &Version,
        now: u64,
    ) -> Option<Arc<Approval>> {
        if self.is_empty() {
            return None;
        }
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let a = state
            .latest
            .get(&(kind, address.to_ascii_lowercase(), version.clone()))?;
        (a.action != ApprovalAction::Revoke && a.until.is_none_or(|t| t > now)).then(|| a.clone())
    }

    /// Takes one record into memory (if it is newer than what is held for its version).
    pub fn apply(&self, approval: Approval) {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        if !state.seen.insert(approval.id.clone()) {
            return;
        }
        let subject = (
            approval.kind,
            approval.address.to_ascii_lowercase(),
            approval.version.clone(),
        );
        let newer = state
            .latest
            .get(&subject)
            .is_none_or(|have| (approval.at, &approval.id) > (have.at, &have.id));
        if newer {
            state.latest.insert(subject, Arc::new(approval));
        }
        let active = state
            .latest
            .values()
            .filter(|a| a.action != ApprovalAction::Revoke)
            .count();
        self.active.store(active, Ordering::Relaxed);
    }

    /// Every record ever made, oldest first (the audit trail).
    pub async fn history(&self) -> Result<Vec<Approval>, ApprovalError> {
        let Some(storage) = &self.storage else {
            let state = self.state.read().unwrap_or_else(|e| e.into_inner());
            let mut all: Vec<Approval> = state.latest.values().map(|a| (**a).clone()).collect();
            all.sort_by(|a, b| (a.at, &a.id).cmp(&(b.at, &b.id)));
            return Ok(all);
        };
        let mut all = Vec::new();
        for meta in storage.list(&Key::new(ROOT)).await? {
            if let Some(a) = read_record(storage.as_ref(), &meta.key).await? {
                all.push(a);
            }
        }
        all.sort_by(|a, b| (a.at, &a.id).cmp(&(b.at, &b.id)));
        Ok(all)
    }

    /// The approvals in force at `now`, newest first.
    pub fn in_force(&self, now: u64) -> Vec<Arc<Approval>> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<Arc<Approval>> = state
            .latest
            .values()
            .filter(|a| a.action != ApprovalAction::Revoke && a.until.is_none_or(|t| t > now))
            .cloned()
            .collect();
        all.sort_by(|a, b| (b.at, &b.id).cmp(&(a.at, &a.id)));
        all
    }

    /// Reads the records this process has not seen yet from the store.
    pub async fn refresh(&self) -> Result<usize, ApprovalError> {
        let Some(storage) = &self.storage else {
            return Ok(0);
        };
        let listed = storage.list(&Key::new(ROOT)).await?;
        let mut added = 0;
        for meta in listed {
            let id = id_of(&meta.key);
            if self
                .state
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .seen
                .contains(&id)
            {
                continue;
            }
            if let Some(a) = read_record(storage.as_ref(), &meta.key).await? {
                self.apply(a);
                added += 1;
            }
        }
        Ok(added)
    }

    /// Records an approval: written to the store first (the audit record), then in force here.
    pub async fn record(&self, mut approval: Approval) -> Result<Approval, ApprovalError> {
        if approval.by.trim().is_empty() {
            return Err(ApprovalError::Invalid(
                "an approval needs who made it".into(),
            ));
        }
        if approval.reason.trim().is_empty() {
            return Err(ApprovalError::Invalid("an approval needs a reason".into()));
        }
        if approval.reason.len() > 2000 || approval.by.len() > 200 {
            return Err(ApprovalError::Invalid(
                "an approval's reason is at most 2000 bytes, its author 200".into(),
            ));
        }
        if approval.until.is_some_and(|t| t <= approval.at) {
            return Err(ApprovalError::Invalid(
                "an approval's until must be in the future".into(),
            ));
        }
        approval.address = approval.address.to_ascii_lowercase();
        approval.id = format!(
            "{:013}-{:016x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0),
            rand::random::<u64>()
        );
        if let Some(storage) = &self.storage {
            let bytes = serde_json::to_vec_pretty(&approval).expect("approvals serialise");
            storage
                .write(&record_key(&approval.id), Bytes::from(bytes))
                .await?;
        }
        self.apply(approval.clone());
        Ok(approval)
    }
}

fn record_key(id: &str) -> Key {
    Key::new([ROOT[0], ROOT[1], &format!("{id}.json")])
}

fn id_of(key: &Key) -> String {
    let name = key.as_str().rsplit('/').next().unwrap_or_default();
    name.strip_suffix(".json").unwrap_or(name).to_string()
}

async fn read_record(storage: &dyn Storage, key: &Key) -> Result<Option<Approval>, ApprovalError> {
    if !key.as_str().ends_with(".json") {
        return Ok(None);
    }
    let Some(bytes) = storage.read(key).await? else {
        return Ok(None);
    };
    let a: Approval = serde_json::from_slice(&bytes).map_err(|e| ApprovalError::Unreadable {
        key: key.to_string(),
        message: e.to_string(),
    })?;
    if a.id != id_of(key) {
        return Err(ApprovalError::Unreadable {
            key: key.to_string(),
            message: format!("its id {:?} is not its name", a.id),
        });
    }
    Ok(Some(a))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval(version: &str, action: ApprovalAction, at: u64) -> Approval {
        Approval {
            id: String::new(),
            kind: Kind::Provider,
            address: "registry.terraform.io/hashicorp/aws".into(),
            version: Version::parse(version).unwrap(),
            action,
            by: "alice".into(),
            at,
            reason: "because".into(),
            until: None,
        }
    }

    #[tokio::test]
    async fn records_are_the_audit_trail_and_the_latest_is_in_force() {
        let dir = tempfile::tempdir().unwrap();
        let storage: Arc<dyn Storage> =
            Arc::new(crate::storage::DiskStorage::new(dir.path().to_path_buf()).unwrap());
        let one = Approvals::in_store(storage.clone());
        assert!(one.is_empty());
        one.record(approval("3.6.1", ApprovalAction::Waive, 100))
            .await
            .unwrap();
        let v = Version::parse("3.6.1").unwrap();
        let addr = "registry.terraform.io/hashicorp/aws";
        assert!(one.current(Kind::Provider, addr, &v, 150).is_some());

        // Another replica reads it from the store, then a revocation on it.
        let two = Approvals::in_store(storage.clone());
        assert_eq!(two.refresh().await.unwrap(), 1);
        assert!(two.current(Kind::Provider, addr, &v, 150).is_some());
        two.record(approval("3.6.1", ApprovalAction::Revoke, 200))
            .await
            .unwrap();
        assert!(two.current(Kind::Provider, addr, &v, 250).is_none());
        one.refresh().await.unwrap();
        assert!(one.current(Kind::Provider, addr, &v, 250).is_none());
        assert!(one.is_empty());
        let history = one.history().await.unwrap();
        assert_eq!(history.len(), 2);
        assert_eq!(history[0].action, ApprovalAction::Waive);
        assert_eq!(history[1].action, ApprovalAction::Revoke);

        let mut no_reason = approval("1.0.0", ApprovalAction::Hold, 300);
        no_reason.reason = " ".into();
        assert!(one.record(no_reason).await.is_err());
    }
}
