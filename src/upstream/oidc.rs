//! OpenID Connect issuers as a client: an issuer's discovery document and its key set (JWKS),
//! fetched like every origin document: through the address policy, the proxy, the redirect
//! rules, the circuit breaker, with retries and a size cap. The issuer's host is named by the
//! operator's configuration, never by a token.

use bytes::Bytes;
use url::Url;

use super::{Operation, Result, Upstream, UpstreamError};
use crate::address::Hostname;

/// The largest discovery document or key set read.
const MAX_DOCUMENT: u64 = 256 * 1024;

impl Upstream {
    /// The key set of the issuer at `issuer` (its URL, as tokens name it in `iss`): the
    /// discovery document `<issuer>/.well-known/openid-configuration`, then its `jwks_uri`.
    pub async fn issuer_keys(&self, issuer: &Url) -> Result<Bytes> {
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
        let jwks = doc["jwks_uri"].as_str().ok_or_else(|| {
            self.origin_fault(
                &host,
                UpstreamError::BadDocument(format!("{discovery}: no jwks_uri")),
            )
        })?;
        let jwks = self
            .resolve(&host, &final_url, jwks, "jwks_uri")
            .map_err(|e| self.origin_fault(&host, e))?;
        self.document(&host, Operation::Oidc, &jwks, MAX_DOCUMENT, false)
            .await?
            .map(|(_, body)| body)
            .ok_or_else(|| UpstreamError::BadDocument(format!("{jwks}: not found")))
    }
}

fn issuer_host(issuer: &Url) -> Result<Hostname> {
    let host = crate::address::authority(issuer).unwrap_or_default();
    Hostname::parse(&host).map_err(|e| UpstreamError::Refused(format!("issuer {issuer}: {e}")))
}
