//! Person tokens: what `terraform login` obtains (see [`super::login`]), one per login, bound to
//! the person single sign-on named (`sso:alice@example.com`). Rules, usage, logs and approvals
//! see that name, whichever door the token is shown at.
//!
//! A token is `pvt_<id>.<secret>`: 16 random bytes of ID and 32 of secret, in hex. The store
//! keeps a record per token, `auth/tokens/<id>.json` (the person, when it was made and from
//! where, when it expires, whether and by whom it was revoked) with the secret's SHA-256 only,
//! so the store's contents sign nobody in. Its last use, `auth/token-uses/<id>.json`, is written
//! at most every [`USE_WRITE_INTERVAL`] per replica. Every replica reads records from the store
//! and remembers them for [`RECORD_TTL`], so a revocation made on one replica holds on all
//! within that time (on the replica that made it, at once).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{ct_eq, digest};
use crate::storage::{Key, Storage, StorageError};

/// What every person token starts with (for secret scanners, and to tell it from other tokens).
pub const PREFIX: &str = "pvt_";

/// How long a replica trusts a record it read.
pub const RECORD_TTL: Duration = Duration::from_secs(10);

/// How often a replica writes a token's last use at most.
pub const USE_WRITE_INTERVAL: Duration = Duration::from_secs(300);

const RECORDS: [&str; 2] = ["auth", "tokens"];
const USES: [&str; 2] = ["auth", "token-uses"];

/// A token revoked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revoked {
    /// Unix seconds.
    pub at: u64,
    /// The person themself, or the operator who revoked it.
    pub by: String,
}

/// What a token is, as its record and its listing both say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenInfo {
    pub id: String,
    /// Who it signs in (`<single sign-on name>:<name claim>`).
    pub person: String,
    /// Unix seconds.
    pub created: u64,
    pub expires: u64,
    /// The address the login was completed from.
    pub created_from: String,
    /// The browser that completed it.
    pub user_agent: String,
    /// What asked for it (`terraform-cli`).
    pub client: String,
}

/// One token's record, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    #[serde(flatten)]
    pub info: TokenInfo,
    /// SHA-256 of the secret, hex.
    secret_sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked: Option<Revoked>,
}

impl std::ops::Deref for TokenRecord {
    type Target = TokenInfo;
    fn deref(&self) -> &TokenInfo {
        &self.info
    }
}

/// Where and when a token was last used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastUse {
    pub at: u64,
    pub from: String,
}

/// A token's state at some time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenState {
    Active,
    Expired,
    Revoked,
}

impl TokenRecord {
    pub fn state(&self, now: u64) -> TokenState {
        if self.revoked.is_some() {
            TokenState::Revoked
        } else if now >= self.expires {
            TokenState::Expired
        } else {
            TokenState::Active
        }
    }
}

/// A token as listed: what it is, its state and last use.
#[derive(Debug, Clone, Serialize)]
pub struct TokenView {
    #[serde(flatten)]
    pub info: TokenInfo,
    pub state: TokenState,
    pub last_used: Option<u64>,
    pub last_from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked_by: Option<String>,
}

impl std::ops::Deref for TokenView {
    type Target = TokenInfo;
    fn deref(&self) -> &TokenInfo {
        &self.info
    }
}

/// Why a person token is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefused {
    #[error("the token is malformed")]
    Malformed,
    #[error("the token is not one of this mirror's (or it was removed)")]
    Unknown,
    #[error("the token expired")]
    Expired,
    #[error("the token was revoked by {by}")]
    Revoked { by: String },
    #[error("the token cannot be checked now: {0}")]
    Unavailable(String),
}

/// A token's record could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum TokenStoreError {
    #[error("{0}")]
    Storage(#[from] StorageError),
    #[error("token record {key}: {message}")]
    Unreadable { key: String, message: String },
}

/// What a new token is made for.
pub struct NewToken<'a> {
    pub person: &'a str,
    pub ttl: Duration,
    pub from: IpAddr,
    pub user_agent: &'a str,
    pub client: &'a str,
}

/// The person tokens in the cache's store.
pub struct PersonTokens {
    storage: Arc<dyn Storage>,
    /// Records read lately (`None`: not in the store), by ID.
    records: moka::future::Cache<String, Option<Arc<TokenRecord>>>,
    /// When this replica last wrote each token's use.
    uses_written: moka::sync::Cache<String, u64>,
}

impl std::fmt::Debug for PersonTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersonTokens").finish_non_exhaustive()
    }
}

fn record_key(id: &str) -> Key {
    Key::new([RECORDS[0], RECORDS[1], &format!("{id}.json")])
}

fn use_key(id: &str) -> Key {
    Key::new([USES[0], USES[1], &format!("{id}.json")])
}

/// A token's ID and secret, if it has a person token's shape.
fn split(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.strip_prefix(PREFIX)?.split_once('.')?;
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(id, 32) && hex(secret, 64)).then_some((id, secret))
}

fn secret_digest(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

impl PersonTokens {
    pub fn new(storage: Arc<dyn Storage>) -> PersonTokens {
        PersonTokens {
            storage,
            records: moka::future::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(RECORD_TTL)
                .build(),
            uses_written: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(USE_WRITE_INTERVAL)
                .build(),
        }
    }

    /// Whether `token` is meant as a person token (it may still be malformed).
    pub fn looks_like(token: &str) -> bool {
        token.starts_with(PREFIX)
    }

    /// Makes a token for `new.person`, lasting `new.ttl` from `now`: the token (shown once)
    /// and its record.
    pub async fn issue(
        &self,
        new: NewToken<'_>,
        now: u64,
    ) -> Result<(String, TokenRecord), TokenStoreError> {
        let id = super::login::random_hex(16);
        let secret = super::login::random_hex(32);
        let record = TokenRecord {
            info: TokenInfo {
                id: id.clone(),
                person: new.person.to_string(),
                created: now,
                expires: now.saturating_add(new.ttl.as_secs()),
                created_from: new.from.to_string(),
                user_agent: new.user_agent.chars().take(200).collect(),
                client: new.client.to_string(),
            },
            secret_sha256: secret_digest(&secret),
            revoked: None,
        };
        self.storage
            .create(&record_key(&id), to_bytes(&record))
            .await?;
        self.records
            .insert(id.clone(), Some(Arc::new(record.clone())))
            .await;
        Ok((format!("{PREFIX}{id}.{secret}"), record))
    }

    /// The record of a valid, unexpired, unrevoked `token` at `now`.
    pub async fn check(&self, token: &str, now: u64) -> Result<Arc<TokenRecord>, TokenRefused> {
        let (id, secret) = split(token).ok_or(TokenRefused::Malformed)?;
        let record = self.known(id).await?;
        let presented = digest(secret_digest(secret).as_bytes());
        if !ct_eq(&presented, &digest(record.secret_sha256.as_bytes())) {
            return Err(TokenRefused::Unknown);
        }
        valid(record, now)
    }

    /// The record of the token with ID `id`, if it is still valid at `now` (for a registry token
    /// traded for it: the secret was checked then).
    pub async fn check_id(&self, id: &str, now: u64) -> Result<Arc<TokenRecord>, TokenRefused> {
        valid(self.known(id).await?, now)
    }

    /// The record of token `id`, whatever its state.
    async fn known(&self, id: &str) -> Result<Arc<TokenRecord>, TokenRefused> {
        self.record(id)
            .await
            .map_err(|e| TokenRefused::Unavailable(e.to_string()))?
            .ok_or(TokenRefused::Unknown)
    }

    /// Notes that a token was used from `from` at `now`: written to the store at most every
    /// [`USE_WRITE_INTERVAL`] by this replica, in the background.
    pub fn note_use(&self, record: &TokenRecord, now: u64, from: IpAddr) {
        let entry = self.uses_written.entry(record.id.clone()).or_insert(now);
        if !entry.is_fresh() {
            return;
        }
        let storage = self.storage.clone();
        let key = use_key(&record.id);
        let bytes = to_bytes(&LastUse {
            at: now,
            from: from.to_string(),
        });
        tokio::spawn(async move {
            if let Err(e) = storage.write(&key, bytes).await {
                tracing::warn!("cannot record a token's use: {e}");
            }
        });
    }

    async fn record(&self, id: &str) -> Result<Option<Arc<TokenRecord>>, Arc<TokenStoreError>> {
        let storage = self.storage.clone();
        let key = record_key(id);
        self.records
            .try_get_with(id.to_string(), async move {
                read_json::<TokenRecord>(storage.as_ref(), &key)
                    .await
                    .map(|r| r.map(Arc::new))
            })
            .await
    }

    /// Every token (of `person`, if given), newest first.
    pub async fn list(
        &self,
        person: Option<&str>,
        now: u64,
    ) -> Result<Vec<TokenView>, TokenStoreError> {
        let mut views = Vec::new();
        for meta in self.storage.list(&Key::new(RECORDS)).await? {
            let Some(record) = read_json::<TokenRecord>(self.storage.as_ref(), &meta.key).await?
            else {
                continue;
            };
            if person.is_some_and(|p| p != record.person) {
                continue;
            }
            let used = read_json::<LastUse>(self.storage.as_ref(), &use_key(&record.id)).await?;
            views.push(TokenView {
                state: record.state(now),
                last_used: used.as_ref().map(|u| u.at),
                last_from: used.map(|u| u.from),
                revoked_at: record.revoked.as_ref().map(|r| r.at),
                revoked_by: record.revoked.as_ref().map(|r| r.by.clone()),
                info: record.info,
            });
        }
        views.sort_by(|a, b| (b.created, &b.id).cmp(&(a.created, &a.id)));
        Ok(views)
    }

    /// Revokes token `id` (only if it is `person`'s, when given), recording `by`. `None`: no such
    /// token (or not theirs). A token revoked already keeps its first revocation.
    pub async fn revoke(
        &self,
        id: &str,
        person: Option<&str>,
        by: &str,
        now: u64,
    ) -> Result<Option<TokenRecord>, TokenStoreError> {
        let ok = id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit());
        if !ok {
            return Ok(None);
        }
        let key = record_key(id);
        let Some(mut record) = read_json::<TokenRecord>(self.storage.as_ref(), &key).await? else {
            return Ok(None);
        };
        if person.is_some_and(|p| p != record.person) {
            return Ok(None);
        }
        if record.revoked.is_none() {
            record.revoked = Some(Revoked {
                at: now,
                by: by.to_string(),
            });
            self.storage.write(&key, to_bytes(&record)).await?;
        }
        self.records.invalidate(id).await;
        Ok(Some(record))
    }
}

/// `record`, if its token is neither revoked nor expired at `now`.
fn valid(record: Arc<TokenRecord>, now: u64) -> Result<Arc<TokenRecord>, TokenRefused> {
    match (&record.revoked, record.state(now)) {
        (Some(revoked), _) => Err(TokenRefused::Revoked {
            by: revoked.by.clone(),
        }),
        (None, TokenState::Expired) => Err(TokenRefused::Expired),
        _ => Ok(record),
    }
}

fn to_bytes(value: &impl Serialize) -> Bytes {
    Bytes::from(serde_json::to_vec_pretty(value).expect("a record serialises"))
}

async fn read_json<T: serde::de::DeserializeOwned>(
    storage: &dyn Storage,
    key: &Key,
) -> Result<Option<T>, TokenStoreError> {
    let Some(bytes) = storage.read(key).await? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| TokenStoreError::Unreadable {
            key: key.to_string(),
            message: e.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn tokens() -> (tempfile::TempDir, PersonTokens) {
        let dir = tempfile::tempdir().unwrap();
        let storage = crate::storage::open(&crate::storage::StorageSettings::Disk(
            dir.path().to_path_buf(),
        ))
        .unwrap();
        (dir, PersonTokens::new(storage))
    }

    fn new_token(person: &str) -> NewToken<'_> {
        NewToken {
            person,
            ttl: Duration::from_secs(3600),
            from: "192.0.2.1".parse().unwrap(),
            user_agent: "test",
            client: "terraform-cli",
        }
    }

    #[tokio::test]
    async fn a_token_is_good_until_it_expires_or_is_revoked() {
        let (_dir, tokens) = tokens().await;
        let (token, record) = tokens
            .issue(new_token("sso:alice@example.com"), 1000)
            .await
            .unwrap();
        assert!(token.starts_with(PREFIX));
        assert_eq!(
            tokens.check(&token, 1000).await.unwrap().person,
            "sso:alice@example.com"
        );
        assert_eq!(
            tokens.check(&token, 1000 + 3600).await,
            Err(TokenRefused::Expired)
        );
        let mut wrong = token.clone();
        wrong.pop();
        wrong.push(if token.ends_with('0') { '1' } else { '0' });
        assert_eq!(tokens.check(&wrong, 1000).await, Err(TokenRefused::Unknown));
        assert_eq!(
            tokens.check("pvt_short", 1000).await,
            Err(TokenRefused::Malformed)
        );
        // Someone else cannot revoke it; the person can.
        assert!(
            tokens
                .revoke(&record.id, Some("sso:bob@example.com"), "bob", 1001)
                .await
                .unwrap()
                .is_none()
        );
        tokens
            .revoke(&record.id, Some("sso:alice@example.com"), "alice", 1001)
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(
            tokens.check(&token, 1002).await,
            Err(TokenRefused::Revoked { .. })
        ));
        let listed = tokens
            .list(Some("sso:alice@example.com"), 1002)
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].state, TokenState::Revoked);
        assert!(
            tokens
                .list(Some("sso:bob@example.com"), 1002)
                .await
                .unwrap()
                .is_empty()
        );
        // The store holds no secret.
        let stored =
            std::fs::read_to_string(_dir.path().join(format!("auth/tokens/{}.json", record.id)))
                .unwrap();
        assert!(!stored.contains(token.split('.').nth(1).unwrap()));
    }
}
