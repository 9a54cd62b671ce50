//! Registry tokens for the OCI door: what `/v2/token` hands an OCI client (OpenTofu's
//! `oci_mirror`, skopeo, oras) that asks for named repositories, in place of the credentials it
//! presented. A registry token names the client, the repositories asked for, an expiry
//! ([`REGISTRY_TOKEN_TTL`]) and, for a person's token from `terraform login`, that token's ID; it
//! is MACed with the URL signing key, so every replica that shares the key accepts it, and it is
//! good only at `/v2/`, only for those repositories, and only while the credentials it was
//! traded for are (a revoked person token, a removed client, an unconfigured issuer end it).

use serde::{Deserialize, Serialize};

use super::{AuthSettings, Denied};

/// What every registry token starts with.
pub const PREFIX: &str = "pvo_";

/// How long a registry token lasts.
pub const REGISTRY_TOKEN_TTL: u64 = 300;

/// The most repositories one token names.
pub const MAX_REPOSITORIES: usize = 16;

/// What a registry token grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryGrant {
    /// The client it was traded by, as rules know it.
    pub client: String,
    /// The person token it was traded for, if it was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person_token: Option<String>,
    /// The repositories it may read.
    pub repositories: Vec<String>,
    /// Unix seconds.
    pub expires: u64,
}

/// The repositories a token request's `scope` parameters ask to pull
/// (`repository:<name>:pull[,...]`, any number of them, space- or parameter-separated);
/// `None` when it names none.
pub fn requested_repositories(query: Option<&str>) -> Result<Option<Vec<String>>, String> {
    let mut names = Vec::new();
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if key != "scope" {
            continue;
        }
        for scope in value.split(' ').filter(|s| !s.is_empty()) {
            let mut parts = scope.splitn(3, ':');
            let (kind, name, actions) = (parts.next(), parts.next(), parts.next());
            let pull = actions.is_some_and(|a| a.split(',').any(|a| a == "pull" || a == "*"));
            let wanted = kind == Some("repository") && pull;
            if let Some(name) = name.filter(|n| wanted && !n.is_empty() && n.len() <= 256)
                && !names.iter().any(|n| n == name)
            {
                names.push(name.to_string());
            }
        }
    }
    if names.len() > MAX_REPOSITORIES {
        return Err(format!(
            "a token may name at most {MAX_REPOSITORIES} repositories"
        ));
    }
    Ok((!names.is_empty()).then_some(names))
}

impl AuthSettings {
    /// A registry token for `grant`.
    pub fn seal_registry_token(&self, grant: &RegistryGrant) -> String {
        format!("{PREFIX}{}", self.seal("registry-token", grant))
    }

    /// What a registry token grants, if this mirror made it and it has not expired. The
    /// caller checks that its credentials still hold ([`RegistryGrant::person_token`]); a
    /// client's name is checked here.
    pub fn open_registry_token(&self, token: &str, now: u64) -> Result<RegistryGrant, Denied> {
        let refused = |m: &str| Denied::Unauthorized(format!("the registry token {m}"));
        let sealed = token
            .strip_prefix(PREFIX)
            .ok_or_else(|| refused("is malformed"))?;
        let grant: RegistryGrant = self.unseal("registry-token", sealed).map_err(|e| match e {
            super::Unsealed::Forged => refused("was not made by this mirror"),
            super::Unsealed::Malformed => refused("is malformed"),
        })?;
        if now >= grant.expires {
            return Err(refused("has expired: ask /v2/token for a new one"));
        }
        if grant.person_token.is_none() && !self.knows_client(&grant.client) {
            return Err(refused(&format!(
                "was made for {}, whom this mirror no longer accepts",
                grant.client
            )));
        }
        Ok(grant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_name_the_repositories_to_pull() {
        let q = "service=provender&scope=repository:a/b/c:pull&scope=repository:d/e/f:push,pull \
                 repository:g:push";
        assert_eq!(
            requested_repositories(Some(q)).unwrap(),
            Some(vec!["a/b/c".to_string(), "d/e/f".to_string()])
        );
        assert_eq!(requested_repositories(Some("service=x")).unwrap(), None);
        let many: String = (0..=MAX_REPOSITORIES)
            .map(|i| format!("scope=repository:r{i}:pull&"))
            .collect();
        assert!(requested_repositories(Some(&many)).is_err());
    }

    #[test]
    fn a_registry_token_is_this_mirror_s_and_expires() {
        let auth = AuthSettings {
            signing_key: b"k".repeat(40),
            ..Default::default()
        };
        let grant = RegistryGrant {
            client: "sso:alice@example.com".into(),
            person_token: Some("00".repeat(16)),
            repositories: vec!["registry.terraform.io/hashicorp/aws".into()],
            expires: 1300,
        };
        let token = auth.seal_registry_token(&grant);
        assert_eq!(auth.open_registry_token(&token, 1000).unwrap(), grant);
        assert!(auth.open_registry_token(&token, 1300).is_err());
        let other = AuthSettings {
            signing_key: b"o".repeat(40),
            ..Default::default()
        };
        assert!(other.open_registry_token(&token, 1000).is_err());
        // A client's grant ends with the client.
        let gone = RegistryGrant {
            client: "token:0011223344556677".into(),
            person_token: None,
            ..grant
        };
        assert!(
            auth.open_registry_token(&auth.seal_registry_token(&gone), 1000)
                .is_err()
        );
    }
}
