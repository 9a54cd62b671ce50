//! Who is asking: a client bearer token that is one of the mirror's tokens, or an OpenID
//! Connect ID token from a configured issuer (`[[auth.issuers]]`, see `auth::oidc`), whose key
//! sets are fetched through the origins' client, so the address policy, proxy and trust roots
//! of origins apply to issuers too.

use std::sync::Arc;

use crate::auth::Denied;
use crate::auth::jwt;
use crate::auth::oidc::Issuers;
use crate::config::Settings;
use crate::mirror::Core;

/// The client identities this server accepts.
pub struct Identities {
    settings: Arc<Settings>,
    issuers: Issuers,
    core: Arc<Core>,
}

/// A client whose credentials were accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// A named token's client (`[[auth.clients]]`), `token:<fingerprint>` for another of the
    /// mirror's tokens, `<issuer name>:<name claim>` for an ID token, `anonymous` when
    /// authentication is off.
    pub name: String,
}

impl Identities {
    pub fn new(settings: Arc<Settings>, core: Arc<Core>) -> Identities {
        Identities {
            issuers: Issuers::new(&settings.auth.issuers),
            settings,
            core,
        }
    }

    /// Checks an `Authorization` header: one of the mirror's tokens, else an ID token.
    pub async fn check(&self, authorization: Option<&[u8]>) -> Result<Principal, Denied> {
        let denied = match self.settings.auth.bearer_client(authorization) {
            Ok(name) => return Ok(Principal { name }),
            Err(denied) => denied,
        };
        let token = authorization
            .and_then(|v| {
                v.strip_prefix(b"Bearer ")
                    .or_else(|| v.strip_prefix(b"bearer "))
            })
            .and_then(|t| std::str::from_utf8(t.trim_ascii()).ok());
        let Some(token) = token.filter(|t| !self.issuers.is_empty() && jwt::looks_like_jwt(t))
        else {
            return Err(denied);
        };
        let client = self.core.identity_client();
        let fetch = |issuer: url::Url| async move {
            client.issuer_keys(&issuer).await.map_err(|e| e.to_string())
        };
        match self
            .issuers
            .verify(token, crate::clock::now_secs(), fetch)
            .await
        {
            Ok(identity) => {
                tracing::debug!(identity = %identity.name, "ID token accepted");
                Ok(Principal {
                    name: identity.name,
                })
            }
            Err(refused) => {
                tracing::info!("ID token refused: {refused}");
                Err(Denied::Unauthorized(format!(
                    "the ID token is not accepted: {refused}"
                )))
            }
        }
    }
}
