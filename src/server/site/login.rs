//! `terraform login` at the pages (see `auth::login`, `auth::tokens`): the authorization
//! endpoint (`-/login/authorize`) that sends the person through single sign-on and asks them to
//! confirm, the token endpoint (`-/login/token`) that trades the CLI's code for a person token,
//! and "Your tokens" (`-/tokens`, `-/api/v1/tokens`) where a person sees and revokes theirs.
//!
//! The consent form comes from this site (`Sec-Fetch-Site`, as every form here), so another
//! site cannot make a signed-in browser hand a code to a listener; the code only ever goes to a
//! loopback listener on the person's computer, and only the CLI that made the challenge can
//! trade it.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::{Caller, Kind, MAX_FORM, Site, html, only_get, same_site};
use crate::auth::Denied;
use crate::auth::login::{self, AuthzRequest, Exchange, LoginError};
use crate::auth::tokens::{NewToken, PersonTokens};
use crate::error::Error;
use crate::server::identity::Principal;
use crate::server::pages::{LoginDonePage, LoginPage, TokensPage};
use crate::server::respond::{Body, json_response, see_other};

impl Site {
    /// The person tokens, when `terraform login` is on.
    fn login_tokens(&self) -> Result<&Arc<PersonTokens>, Error> {
        self.person_tokens.as_ref().ok_or_else(|| {
            Error::NotFound("terraform login is not configured here ([auth.cli_login])".into())
        })
    }

    /// `-/login/authorize`: `GET` from the CLI's browser, `POST` from the consent page.
    pub(super) async fn login_authorize(
        &self,
        req: &Request<()>,
        body: Incoming,
        peer: IpAddr,
    ) -> Result<Response<Body>, Error> {
        self.login_tokens()?;
        let (request, decision) = match *req.method() {
            Method::GET | Method::HEAD => {
                let query = req.uri().query().unwrap_or_default();
                let request = AuthzRequest::parse(url::form_urlencoded::parse(query.as_bytes()))
                    .map_err(|e| Error::Invalid(login_refused(&e)))?;
                (request, None)
            }
            Method::POST => {
                same_site(req, &self.base_url)?;
                let form = read_form(body, "the consent form").await?;
                let decision = url::form_urlencoded::parse(&form)
                    .find(|(k, _)| k == "decision")
                    .map(|(_, v)| v.into_owned());
                let fields = url::form_urlencoded::parse(&form).filter(|(k, _)| k != "decision");
                let request =
                    AuthzRequest::parse(fields).map_err(|e| Error::Invalid(login_refused(&e)))?;
                (request, Some(decision.unwrap_or_default()))
            }
            _ => return Err(Error::MethodNotAllowed),
        };
        // Only a person single sign-on vouches for gets a token: anyone else signs in first.
        let person = self
            .session(req)
            .map(|s| s.subject)
            .filter(|s| self.settings.auth.is_login_person(s));
        let Some(person) = person else {
            let here = format!(
                "{}-/login/authorize?{}",
                self.base(),
                url::form_urlencoded::Serializer::new(String::new())
                    .extend_pairs(request.fields())
                    .finish()
            );
            let query = url::form_urlencoded::Serializer::new(String::new())
                .append_pair("next", &here)
                .finish();
            return Ok(see_other(&format!("{}-/sign-in/sso?{query}", self.base())));
        };
        match decision.as_deref() {
            None => {
                let lifetime = humantime::format_duration(self.login_ttl()).to_string();
                let mut resp = html(LoginPage {
                    chrome: self.chrome("Sign the CLI in", "", true),
                    person: self.settings.auth.subject_client(&person),
                    port: request.port(),
                    lifetime,
                    fields: request.fields(),
                })?;
                // The form's answer sends the browser on to the CLI's listener, which the
                // page's policy must let a form's redirect reach.
                let listener = url::Url::parse(&request.redirect_uri)
                    .map(|u| u.origin().ascii_serialization())
                    .unwrap_or_default();
                let csp = super::CSP.replace(
                    "form-action 'self'",
                    &format!("form-action 'self' {listener}"),
                );
                resp.headers_mut().insert(
                    header::CONTENT_SECURITY_POLICY,
                    HeaderValue::from_str(&csp).map_err(|e| Error::unexpected(e.to_string()))?,
                );
                Ok(resp)
            }
            Some("allow") => {
                let now = self.core.clock().now_secs();
                let code = login::seal_code(&self.settings.auth, &person, &request, now);
                tracing::info!(person = %person, port = request.port(), %peer, "CLI login confirmed");
                Ok(see_other(&request.redirect_with_code(&code)))
            }
            Some(_) => html(LoginDonePage {
                chrome: self.chrome("Sign-in cancelled", "", true),
                cancelled: true,
            }),
        }
    }

    /// `POST -/login/token`: the CLI trades its code and verifier for a person token. Errors
    /// are OAuth's (`{"error", "error_description"}`, 400), which the CLIs print.
    pub(super) async fn login_token(
        &self,
        req: &Request<()>,
        body: Incoming,
        peer: IpAddr,
    ) -> Result<Response<Body>, Error> {
        let tokens = self.login_tokens()?.clone();
        if *req.method() != Method::POST {
            return Err(Error::MethodNotAllowed);
        }
        let form = read_form(body, "the token request").await?;
        let now = self.core.clock().now_secs();
        let exchanged = Exchange::parse(&form).and_then(|exchange| {
            let code = login::open_code(&self.settings.auth, &exchange.code, now)?;
            exchange.matches(&code)?;
            if !self.settings.auth.is_login_person(&code.person) {
                return Err(LoginError::InvalidGrant(
                    "the code's person is no longer one single sign-on vouches for here".into(),
                ));
            }
            self.used_codes.redeem(&code)?;
            Ok(code)
        });
        let code = match exchanged {
            Ok(code) => code,
            Err(e) => {
                tracing::info!(%peer, "CLI login token request refused: {e}");
                let mut resp = json_response(StatusCode::BAD_REQUEST, e.to_json().into_bytes());
                resp.headers_mut()
                    .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                return Ok(resp);
            }
        };
        let ttl = self.login_ttl();
        let user_agent = req
            .headers()
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let (token, record) = tokens
            .issue(
                NewToken {
                    person: &code.person,
                    ttl,
                    from: peer,
                    user_agent,
                    client: login::CLIENT_ID,
                },
                now,
            )
            .await
            .map_err(|e| Error::unexpected(format!("storing a new token: {e}")))?;
        tracing::info!(person = %record.person, token = %record.id, %peer, "token issued by terraform login");
        self.count_token("issued");
        let body = serde_json::json!({
            "access_token": token,
            "token_type": "bearer",
            "expires_in": ttl.as_secs(),
        });
        let mut resp = json_response(StatusCode::OK, body.to_string().into_bytes());
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        Ok(resp)
    }

    fn login_ttl(&self) -> std::time::Duration {
        self.settings
            .auth
            .cli_login
            .as_ref()
            .map(|c| c.token_ttl)
            .unwrap_or_default()
    }

    /// The person "Your tokens" is about: a person signed in with single sign-on, or one whose
    /// own token came with the request.
    fn token_owner(
        &self,
        caller: &Caller,
        who: &Result<Principal, Denied>,
    ) -> Result<String, Error> {
        let name = match (caller, who) {
            (Caller::Session(session), _) => session.subject.clone(),
            (Caller::Let, Ok(principal)) => principal.name.to_string(),
            _ => String::new(),
        };
        if self.settings.auth.is_login_person(&name) {
            Ok(name)
        } else {
            Err(Error::Forbidden(
                "tokens belong to people signed in with single sign-on; operators see everyone's \
                 with provender tokens list"
                    .into(),
            ))
        }
    }

    /// `-/tokens` (the page, and its revoke forms) and `-/api/v1/tokens[/<id>/revoke]`.
    pub(super) async fn tokens_route(
        &self,
        req: &Request<()>,
        body: Incoming,
        rest: &str,
        kind: Kind,
        caller: Caller,
        who: &Result<Principal, Denied>,
    ) -> Result<Response<Body>, Error> {
        let tokens = self.login_tokens()?.clone();
        if let Caller::Nobody = caller {
            return Ok(self.without_credentials(req, kind));
        }
        let signed_in = caller.signed_in();
        let person = self.token_owner(&caller, who)?;
        let now = self.core.clock().now_secs();
        let listed = async || {
            tokens
                .list(Some(&person), now)
                .await
                .map_err(|e| Error::unexpected(format!("listing tokens: {e}")))
        };
        let revoke = async |id: &str| {
            let record = tokens
                .revoke(id, Some(&person), &person, now)
                .await
                .map_err(|e| Error::unexpected(format!("revoking a token: {e}")))?
                .ok_or_else(|| Error::NotFound(format!("you have no token {id}")))?;
            self.count_token("revoked");
            Ok::<_, Error>(record)
        };
        match (kind, rest) {
            (Kind::Api, "api/v1/tokens") => {
                only_get(req)?;
                let body = serde_json::json!({ "tokens": listed().await? });
                Ok(json_response(StatusCode::OK, body.to_string().into_bytes()))
            }
            (Kind::Api, _) => {
                let id = rest
                    .strip_prefix("api/v1/tokens/")
                    .and_then(|r| r.strip_suffix("/revoke"))
                    .ok_or_else(|| Error::NotFound(format!("nothing at -/{rest}")))?;
                if *req.method() != Method::POST {
                    return Err(Error::MethodNotAllowed);
                }
                if signed_in {
                    same_site(req, &self.base_url)?;
                }
                let record = revoke(id).await?;
                tracing::info!(person = %person, token = %record.id, "token revoked by its person");
                let body = serde_json::json!({ "id": record.id, "revoked": true });
                Ok(json_response(StatusCode::OK, body.to_string().into_bytes()))
            }
            (Kind::Page, _) if *req.method() == Method::POST => {
                same_site(req, &self.base_url)?;
                let form = read_form(body, "the revoke form").await?;
                let id = url::form_urlencoded::parse(&form)
                    .find(|(k, _)| k == "id")
                    .map(|(_, v)| v.into_owned())
                    .unwrap_or_default();
                let record = revoke(&id).await?;
                tracing::info!(person = %person, token = %record.id, "token revoked by its person");
                Ok(see_other(&format!(
                    "{}-/tokens?revoked={}",
                    self.base(),
                    record.id
                )))
            }
            (Kind::Page, _) => {
                only_get(req)?;
                let revoked =
                    url::form_urlencoded::parse(req.uri().query().unwrap_or_default().as_bytes())
                        .find(|(k, _)| k == "revoked")
                        .map(|(_, v)| v.chars().filter(char::is_ascii_hexdigit).take(32).collect());
                html(TokensPage {
                    chrome: self.chrome("Your tokens", "tokens", signed_in),
                    person: self.settings.auth.subject_client(&person),
                    tokens: listed().await?,
                    revoked,
                    login_command: self.login_command(),
                })
            }
        }
    }

    /// Counts an event of people's tokens (`provender_person_tokens_total`).
    fn count_token(&self, event: &str) {
        self.core
            .metrics()
            .person_tokens
            .with_label_values(&[event])
            .inc();
    }

    /// `terraform login <this mirror's host>`.
    pub(super) fn login_command(&self) -> String {
        format!(
            "terraform login {}",
            crate::address::authority(&self.base_url).unwrap_or_default()
        )
    }
}

/// A small form body (at most `MAX_FORM` bytes).
async fn read_form(body: Incoming, what: &str) -> Result<Bytes, Error> {
    Ok(http_body_util::Limited::new(body, MAX_FORM)
        .collect()
        .await
        .map_err(|e| Error::PayloadTooLarge(format!("{what}: {e}")))?
        .to_bytes())
}

/// An authorization request that cannot be answered, for the person's browser: never a
/// redirect (the redirect URI may be what is wrong).
fn login_refused(e: &LoginError) -> String {
    format!("This login request cannot be answered: {e}. Run terraform login again.")
}
