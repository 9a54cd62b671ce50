//! OpenID Connect issuers as a client: an issuer's discovery document and its key set (JWKS),
//! fetched like every origin document: through the address policy, the proxy, the redirect
//! rules, the circuit breaker, with retries and a size cap. The issuer's host is named by the
//! operator's configuration, never by a token.

use bytes::Bytes;
use url::Url;

use super::{Ask, Operation, Result, Upstream, UpstreamError};
use crate::address::Hostname;

/// The largest discovery document or key set read.
const MAX_DOCUMENT: u64 = 256 * 1024;

/// Where an issuer signs people in, from its discovery document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuerEndpoints {
    /// Where browsers are sent to sign in (the browser goes there, this server does not).
    pub authorization: Url,
    /// Where this server trades an authorization code for tokens (checked like any origin
    /// URL).
    pub token: Url,
}

impl Upstream {
    /// The key set of the issuer at `issuer` (its URL, as tokens name it in `iss`): the
    /// discovery document `<issuer>/.well-known/openid-configuration`, then its `jwks_uri`.
    pub async fn issuer_keys(&self, issuer: &Url) -> Result<Bytes> {
        let (host, final_url, doc) = self.discovery(issuer).await?;
        let jwks = self.named_url(&host, &final_url, &doc, "jwks_uri")?;
        self.document(&host, Operation::Oidc, &jwks, MAX_DOCUMENT, false)
            .await?
            .map(|(_, body)| body)
            .ok_or_else(|| UpstreamError::BadDocument(format!("{jwks}: not found")))
    }

    /// The authorization and token endpoints of the issuer at `issuer`.
    pub async fn issuer_endpoints(&self, issuer: &Url) -> Result<IssuerEndpoints> {
        let (host, final_url, doc) = self.discovery(issuer).await?;
        let token = self.named_url(&host, &final_url, &doc, "token_endpoint")?;
        let authorization = doc["authorization_endpoint"]
            .as_str()
            .and_then(|u| final_url.join(u).ok())
            .filter(|u| u.scheme() == "https")
            .ok_or_else(|| {
                self.origin_fault(
                    &host,
                    UpstreamError::BadDocument(format!(
                        "{final_url}: no https authorization_endpoint"
                    )),
                )
            })?;
        Ok(IssuerEndpoints {
            authorization,
            token,
        })
    }

    /// Trades an authorization code for tokens: a form POST to the issuer's token endpoint,
    /// sent once (a code works once), answered with JSON. It passes the host's circuit breaker
    /// like every call to an issuer.
    pub async fn token_exchange(
        &self,
        issuer: &Url,
        endpoint: &Url,
        form: &[(&str, &str)],
    ) -> Result<serde_json::Value> {
        let host = issuer_host(issuer)?;
        self.check_url(&host, endpoint)?;
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form)
            .finish();
        let started = std::time::Instant::now();
        let result = async {
            let resp = self
                .send_as(
                    &host,
                    Operation::Oidc,
                    endpoint,
                    self.settings.request_timeout,
                    Ask::FormOnce(&body),
                )
                .await?;
            let status = resp.status();
            let body = super::read_capped(Operation::Oidc, resp, MAX_DOCUMENT).await?;
            if !status.is_success() {
                // The issuer's own words (`error`, `error_description`) say why.
                let why: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                return Err(UpstreamError::BadDocument(format!(
                    "{endpoint}: answered {status}: {} {}",
                    why["error"].as_str().unwrap_or("-"),
                    why["error_description"].as_str().unwrap_or_default()
                )));
            }
            serde_json::from_slice(&body)
                .map_err(|e| UpstreamError::BadDocument(format!("{endpoint}: not JSON: {e}")))
        }
        .await;
        self.observe(&host, Operation::Oidc, started);
        result
    }

    /// The issuer's discovery document (its `issuer` checked), with its host and final URL.
    async fn discovery(&self, issuer: &Url) -> Result<(Hostname, Url, serde_json::Value)> {
        let host = issuer_host(issuer)?;
        let mut discovery = issuer.clone();
        let path = format!(
            "{}/.well-known/openid-configuration",
            issuer.path().trim_end_matches('/')
        );
        discovery.set_path(&path);
        self.check_url(&host, &discovery)?;
        let (final_url, body) = self
            .document(&host, Operation::Oidc, &discovery, MAX_DOCUMENT, true)
            .await?
            .ok_or_else(|| UpstreamError::BadDocument(format!("{discovery}: not found")))?;
        let doc: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
            self.origin_fault(
                &host,
                UpstreamError::BadDocument(format!("{discovery}: not JSON: {e}")),
            )
        })?;
        let named = doc["issuer"].as_str().unwrap_or_default();
        if named.trim_end_matches('/') != issuer.as_str().trim_end_matches('/') {
            return Err(self.origin_fault(
                &host,
                UpstreamError::BadDocument(format!(
                    "{discovery}: names issuer {named:?}, not {issuer}"
                )),
            ));
        }
        Ok((host, final_url, doc))
    }

    /// A URL the discovery document names under `field`, resolved and checked.
    fn named_url(
        &self,
        host: &Hostname,
        base: &Url,
        doc: &serde_json::Value,
        field: &str,
    ) -> Result<Url> {
        let named = doc[field].as_str().ok_or_else(|| {
            self.origin_fault(
                host,
                UpstreamError::BadDocument(format!("{base}: no {field}")),
            )
        })?;
        self.resolve(host, base, named, field)
            .map_err(|e| self.origin_fault(host, e))
    }
}

fn issuer_host(issuer: &Url) -> Result<Hostname> {
    let host = crate::address::authority(issuer).unwrap_or_default();
    Hostname::parse(&host).map_err(|e| UpstreamError::Refused(format!("issuer {issuer}: {e}")))
}
