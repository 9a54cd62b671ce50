//! Who is asking: a client bearer token that is one of the mirror's tokens, a person's token
//! from `terraform login` (see `auth::tokens`), or an OpenID Connect ID token from a configured
//! issuer (`[[auth.issuers]]`, see `auth::oidc`), whose key sets are fetched through the
//! origins' client, so the address policy, proxy and trust roots of origins apply to issuers
//! too.

use std::net::IpAddr;
use std::sync::Arc;

use crate::address::{GitRepo, ModuleAddr, ProviderAddr};
use crate::auth::jwt;
use crate::auth::oidc::{Issuers, TokenRefused};
use crate::auth::registry_token;
use crate::auth::rules::Rule;
use crate::auth::tokens::{self, PersonTokens};
use crate::auth::{Denied, credentials_of};
use crate::config::Settings;
use crate::error::Error;
use crate::mirror::{Core, Reach};

/// The client identities this server accepts.
pub struct Identities {
    settings: Arc<Settings>,
    issuers: Issuers,
    core: Arc<Core>,
    /// People's tokens, when `terraform login` is on.
    person_tokens: Option<Arc<PersonTokens>>,
    /// What a person whose token is refused is told to run.
    login_again: String,
    /// Who asks when authentication is off, or a route lets anyone in: made once, so a request
    /// that needs no identity costs none.
    anonymous: Principal,
}

/// A client whose credentials were accepted.
#[derive(Debug, Clone)]
pub struct Principal {
    /// A named token's client (`[[auth.clients]]`), `token:<fingerprint>` for another of the
    /// mirror's tokens, `<issuer name>:<name claim>` for an ID token, `anonymous` when
    /// authentication is off.
    pub name: Arc<str>,
    /// The first `[[auth.rules]]` entry for it; none: it may do everything.
    pub rule: Option<Arc<Rule>>,
    /// The ID of the person token it came with (`terraform login`).
    pub person_token: Option<Arc<str>>,
    /// The OCI repositories a registry token limits it to (see `auth::registry_token`).
    pub repositories: Option<Arc<[String]>>,
}

impl Principal {
    /// A client known by name, with the rule that applies to it.
    pub fn named(name: impl Into<Arc<str>>, settings: &Settings) -> Principal {
        let name = name.into();
        let rule = settings.auth.rules.for_client(&name);
        Principal {
            name,
            rule,
            person_token: None,
            repositories: None,
        }
    }

    /// Whether it may read the OCI repository `name`: a registry token names the ones it may.
    pub fn may_read_repository(&self, name: &str) -> bool {
        self.repositories
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == name))
    }

    /// How far its requests may reach: to the origins, or (a rule with `fill = false`) the
    /// cache alone.
    pub fn reach(&self) -> Reach {
        match &self.rule {
            Some(rule) if !rule.fill => Reach::CacheOnly(
                format!(
                    "rule {} (auth.rules) lets {} read only what is cached",
                    rule.name, self.name
                )
                .into(),
            ),
            _ => Reach::Origin,
        }
    }

    /// Whether it may get a provider: 403 naming the rule if not.
    pub fn may_get_provider(&self, addr: &ProviderAddr) -> Result<(), Error> {
        match &self.rule {
            Some(rule) if !rule.allows_provider(&addr.to_string()) => {
                Err(Error::Forbidden(format!(
                    "rule {} (auth.rules) does not let {} get provider {addr}",
                    rule.name, self.name
                )))
            }
            _ => Ok(()),
        }
    }

    /// Whether it may get a module: 403 naming the rule if not.
    pub fn may_get_module(&self, addr: &ModuleAddr) -> Result<(), Error> {
        match &self.rule {
            Some(rule) if !rule.allows_module(&addr.to_string()) => Err(Error::Forbidden(format!(
                "rule {} (auth.rules) does not let {} get module {addr}",
                rule.name, self.name
            ))),
            _ => Ok(()),
        }
    }

    /// Whether it may fetch a git repository: 403 naming the rule if not.
    pub fn may_get_git(&self, repo: &GitRepo) -> Result<(), Error> {
        match &self.rule {
            Some(rule) if !rule.allows_git(&repo.to_string()) => Err(Error::Forbidden(format!(
                "rule {} (auth.rules) does not let {} fetch git repository {repo}",
                rule.name, self.name
            ))),
            _ => Ok(()),
        }
    }

    /// Whether it may publish the provider `namespace/type` or the module
    /// `namespace/name/system`: only a client whose rule's `publish` patterns match it may.
    /// 403 naming the rule if not.
    pub fn may_publish(
        &self,
        kind: crate::auth::rules::PublishKind,
        what: &str,
    ) -> Result<(), Error> {
        let kind_name = match kind {
            crate::auth::rules::PublishKind::Provider => "provider",
            crate::auth::rules::PublishKind::Module => "module",
        };
        match &self.rule {
            Some(rule) if rule.allows_publish(kind, what) => Ok(()),
            Some(rule) => Err(Error::Forbidden(format!(
                "rule {} (auth.rules) does not let {} publish the {kind_name} {what} (its \
                 publish patterns)",
                rule.name, self.name
            ))),
            None => Err(Error::Forbidden(format!(
                "no rule (auth.rules) lets {} publish the {kind_name} {what}",
                self.name
            ))),
        }
    }
}

impl Principal {
    /// Whether it may waive, hold or revoke versions under the version policy: only a client
    /// whose rule says `approve = true` may. 403 naming the rule if not.
    pub fn may_approve(&self) -> Result<(), Error> {
        match &self.rule {
            Some(rule) if rule.approve => Ok(()),
            Some(rule) => Err(Error::Forbidden(format!(
                "rule {} (auth.rules) does not let {} approve versions (approve = true)",
                rule.name, self.name
            ))),
            None => Err(Error::Forbidden(format!(
                "no rule (auth.rules) lets {} approve versions (approve = true)",
                self.name
            ))),
        }
    }
}

impl Identities {
    /// The identities of `settings`; people's tokens in `person_tokens` when `terraform login`
    /// is on at the mirror whose public base URL is `base_url`.
    pub fn new(
        settings: Arc<Settings>,
        core: Arc<Core>,
        person_tokens: Option<Arc<PersonTokens>>,
        base_url: &url::Url,
    ) -> Identities {
        let host = crate::address::authority(base_url).unwrap_or_default();
        Identities {
            issuers: Issuers::new(&settings.auth.issuers),
            anonymous: Principal::named("anonymous", &settings),
            settings,
            core,
            person_tokens,
            login_again: format!("run `terraform login {host}` (or `tofu login {host}`) again"),
        }
    }

    /// A registry token from `/v2/token`, checked: good only at the OCI door, for the
    /// repositories it names, while the credentials it was traded for hold.
    async fn registry(&self, token: &str, oci: bool) -> Result<Principal, Denied> {
        if !oci {
            return Err(Denied::Unauthorized(
                "a registry token from /v2/token is good only at the OCI door (/v2/)".into(),
            ));
        }
        let now = self.core.clock().now_secs();
        let grant = self.settings.auth.open_registry_token(token, now)?;
        if let Some(id) = &grant.person_token {
            let tokens = self.person_tokens.as_ref().ok_or_else(|| {
                Denied::Unauthorized("terraform login is not configured here".into())
            })?;
            self.person_principal(tokens, tokens.check_id(id, now).await, None)?;
        }
        Ok(Principal {
            person_token: grant.person_token.map(Into::into),
            repositories: Some(grant.repositories.into()),
            ..Principal::named(grant.client, &self.settings)
        })
    }

    /// A person's token from `terraform login`, checked: valid, unexpired, unrevoked, and its
    /// person still one single sign-on vouches for. Its use is noted (when, from where).
    async fn person(
        &self,
        tokens: &PersonTokens,
        token: &str,
        peer: IpAddr,
    ) -> Result<Principal, Denied> {
        let now = self.core.clock().now_secs();
        self.person_principal(tokens, tokens.check(token, now).await, Some((now, peer)))
    }

    /// The person a token's record (`found`, as `tokens` checked it) signs in, if single sign-on
    /// still vouches for them; a use at `used` (when, from where) is noted. A refusal is counted
    /// and tells the person to log in again; a store that cannot answer is a 503.
    fn person_principal(
        &self,
        tokens: &PersonTokens,
        found: Result<Arc<tokens::TokenRecord>, tokens::TokenRefused>,
        used: Option<(u64, IpAddr)>,
    ) -> Result<Principal, Denied> {
        let refused = match found {
            Ok(record) if self.settings.auth.is_login_person(&record.person) => {
                if let Some((now, peer)) = used {
                    tokens.note_use(&record, now, peer);
                }
                return Ok(Principal {
                    person_token: Some(record.id.as_str().into()),
                    ..Principal::named(record.person.as_str(), &self.settings)
                });
            }
            Ok(_) => "the token's person is no longer one single sign-on vouches for here".into(),
            Err(tokens::TokenRefused::Unavailable(why)) => {
                tracing::warn!("person token not checked: {why}");
                return Err(Denied::Unavailable(format!(
                    "the token cannot be checked now (the store): {why}"
                )));
            }
            Err(refused) => refused.to_string(),
        };
        tracing::info!("person token refused: {refused}");
        self.core
            .metrics()
            .person_tokens
            .with_label_values(&["refused"])
            .inc();
        Err(Denied::Unauthorized(format!(
            "{refused}: {}",
            self.login_again
        )))
    }

    /// The client of a request without credentials, where one may come without.
    pub fn anonymous(&self) -> Principal {
        self.anonymous.clone()
    }

    /// Checks an `Authorization` header from `peer`: one of the mirror's tokens, a person's
    /// token, a registry token (only at the OCI door: `oci`), else an ID token. `Basic`
    /// credentials count as their password presented as a bearer token.
    pub async fn check(
        &self,
        authorization: Option<&[u8]>,
        peer: IpAddr,
        oci: bool,
    ) -> Result<Principal, Denied> {
        if !self.settings.auth.enabled() {
            return Ok(self.anonymous());
        }
        let basic = authorization.and_then(|v| credentials_of(v, "basic"));
        let from_basic;
        let authorization = match basic {
            Some(_) => {
                from_basic = format!(
                    "Bearer {}",
                    crate::auth::AuthSettings::token_request_secret(authorization)?
                );
                Some(from_basic.as_bytes())
            }
            None => authorization,
        };
        let denied = match self.settings.auth.bearer_client(authorization) {
            Ok(name) => return Ok(Principal::named(name, &self.settings)),
            Err(denied) => denied,
        };
        let token = authorization
            .and_then(|v| credentials_of(v, "bearer"))
            .and_then(|t| std::str::from_utf8(t.trim_ascii()).ok());
        if let (Some(tokens), Some(token)) = (
            &self.person_tokens,
            token.filter(|t| PersonTokens::looks_like(t)),
        ) {
            return self.person(tokens, token, peer).await;
        }
        if let Some(token) = token.filter(|t| t.starts_with(registry_token::PREFIX)) {
            return self.registry(token, oci).await;
        }
        let Some(token) = token.filter(|t| !self.issuers.is_empty() && jwt::looks_like_jwt(t))
        else {
            return Err(denied);
        };
        let core = self.core.clone();
        let fetch = move |issuer: url::Url| async move {
            let client = core.identity_client();
            client.issuer_keys(&issuer).await.map_err(keys_unavailable)
        };
        match self
            .issuers
            .verify(token, crate::clock::now_secs(), fetch)
            .await
        {
            Ok(identity) => {
                tracing::debug!(identity = %identity.name, "ID token accepted");
                Ok(Principal::named(identity.name, &self.settings))
            }
            Err(
                unavailable @ TokenRefused::NoKeys {
                    transient: true, ..
                },
            ) => {
                tracing::warn!("ID token not checked: {unavailable}");
                Err(Denied::Unavailable(format!(
                    "the ID token cannot be checked now: {unavailable}"
                )))
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

/// Why an issuer's key set could not be fetched, as the issuers' cache keeps it: transient
/// when the issuer did not answer (so a token is a 503, not a 401).
pub(super) fn keys_unavailable(
    e: crate::upstream::UpstreamError,
) -> crate::auth::oidc::KeysUnavailable {
    if e.unanswered() {
        crate::auth::oidc::KeysUnavailable::transient(e.to_string())
    } else {
        crate::auth::oidc::KeysUnavailable::lasting(e.to_string())
    }
}
