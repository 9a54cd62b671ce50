//! Sign-in sessions for the pages: after a person signs in with one of the mirror's tokens, a
//! cookie stands for the token until it expires or they sign out.
//!
//! The cookie is stateless, so every replica that shares `auth.url_signing_key` accepts it:
//! `<claims>.<mac>`, the claims base64url JSON (session ID, subject, expiry, audience) and the
//! MAC an HMAC-SHA256 over them with the URL signing key, domain-separated from archive URLs.
//! The audience is the server's public base URL: a cookie issued by another deployment that
//! happens to share the key (a staging server, say) is refused, as is one without it. The
//! subject says who signed in and how: `token:<fingerprint>` names the token by the first
//! bytes of its SHA-256, so a session ends when its token is removed from the configuration;
//! `<name>:<name claim>` is a person signed in with single sign-on (see [`super::sso`]), whose
//! session ends when it expires, when they sign out, or when single sign-on is unconfigured.
//! Signing out ends a session at once on the replica that served it (kept in memory until the
//! session would have expired) and clears the cookie in the browser.

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::{AuthSettings, ct_eq, digest};

/// The cookie's name.
pub const COOKIE: &str = "provender_session";

/// The longest cookie value looked at; anything longer is not a session.
const MAX_COOKIE_LEN: usize = 1024;

/// The most signed-out sessions remembered (each until its own expiry).
const MAX_ENDED: u64 = 100_000;

/// A valid session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// Random, 128 bits, base64url.
    pub id: String,
    /// Who signed in, e.g. `token:0123456789abcdef`.
    pub subject: String,
    /// Unix seconds after which the session is over.
    pub expires: u64,
    /// The server it was issued by and for: its public base URL.
    #[serde(rename = "aud")]
    pub audience: String,
}

/// Issues and checks sessions.
pub struct Sessions {
    auth: AuthSettings,
    ttl: Duration,
    audience: String,
    ended: moka::sync::Cache<String, ()>,
}

impl Sessions {
    /// Sessions over `auth`'s tokens and key, each lasting `auth.session_ttl`, for the server
    /// whose public base URL is `audience`.
    pub fn new(auth: &AuthSettings, audience: &str) -> Sessions {
        let ttl = auth.session_ttl;
        Sessions {
            auth: auth.clone(),
            ttl,
            audience: audience.to_string(),
            ended: moka::sync::Cache::builder()
                .max_capacity(MAX_ENDED)
                .time_to_live(ttl)
                .build(),
        }
    }

    /// How long a session lasts.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A session for whoever presents `token`, with the cookie value that carries it; `None`
    /// if the token is not one of the mirror's.
    pub fn sign_in(&self, token: &str, now: SystemTime) -> Option<(Session, String)> {
        let subject = self.auth.token_subject(token.trim())?;
        self.start(subject, now)
    }

    /// A session for `subject`, who proved who they are some other way (single sign-on), with
    /// the cookie value that carries it; `None` if no session ID could be made.
    pub fn start(&self, subject: String, now: SystemTime) -> Option<(Session, String)> {
        let mut id = [0u8; 16];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut id).ok()?;
        let session = Session {
            id: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id),
            subject,
            expires: crate::clock::unix_secs(now).saturating_add(self.ttl.as_secs()),
            audience: self.audience.clone(),
        };
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(&session).expect("sessions serialise"));
        let cookie = format!("{claims}.{}", self.auth.mac_of("session", &claims));
        Some((session, cookie))
    }

    /// The session a cookie value carries, if it is genuine, for this server, unexpired, not
    /// signed out, and its subject may still sign in.
    pub fn check(&self, cookie: &str, now: SystemTime) -> Option<Session> {
        if cookie.len() > MAX_COOKIE_LEN {
            return None;
        }
        let (claims, mac) = cookie.split_once('.')?;
        let expected = self.auth.mac_of("session", claims);
        if !ct_eq(&digest(expected.as_bytes()), &digest(mac.as_bytes())) {
            return None;
        }
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(claims)
            .ok()?;
        let session: Session = serde_json::from_slice(&json).ok()?;
        let live = session.audience == self.audience
            && crate::clock::unix_secs(now) < session.expires
            && !self.ended.contains_key(&session.id)
            && self.auth.knows_subject(&session.subject);
        live.then_some(session)
    }

    /// Ends a session (on this replica; the browser drops the cookie).
    pub fn sign_out(&self, session: &Session) {
        self.ended.insert(session.id.clone(), ());
    }
}

/// The cookie value of a `Cookie` request header, if it carries one.
pub fn from_header(header: &str) -> Option<&str> {
    cookie(header, COOKIE)
}

/// The value of the cookie `name` in a `Cookie` request header, if it carries one.
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::AuthConfig;

    const HERE: &str = "https://mirror.example.com/";

    fn auth(tokens: &[&str]) -> AuthSettings {
        AuthConfig {
            tokens: tokens.iter().map(|t| t.to_string()).collect(),
            url_signing_key: Some("k".repeat(40)),
            session_ttl: Duration::from_secs(60),
            ..AuthConfig::default()
        }
        .validate()
        .unwrap()
    }

    #[test]
    fn a_session_lasts_until_it_expires_or_is_signed_out() {
        let sessions = Sessions::new(&auth(&["first-token-0123456789"]), HERE);
        let now = SystemTime::now();
        assert!(sessions.sign_in("wrong-token-0123456789", now).is_none());
        let (session, cookie) = sessions.sign_in("first-token-0123456789", now).unwrap();
        assert!(session.subject.starts_with("token:"));
        assert_eq!(sessions.check(&cookie, now), Some(session.clone()));
        assert_eq!(
            sessions.check(&cookie, now + Duration::from_secs(61)),
            None,
            "expired"
        );
        // Any change to the claims breaks the MAC.
        let (claims, mac) = cookie.split_once('.').unwrap();
        let mut forged = serde_json::from_slice::<Session>(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(claims)
                .unwrap(),
        )
        .unwrap();
        forged.expires += 3600;
        let forged = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(&forged).unwrap());
        assert_eq!(sessions.check(&format!("{forged}.{mac}"), now), None);
        assert_eq!(sessions.check(&"a".repeat(5000), now), None);
        sessions.sign_out(&session);
        assert_eq!(sessions.check(&cookie, now), None, "signed out");
    }

    #[test]
    fn removing_a_token_ends_its_sessions_and_other_replicas_accept_them() {
        let now = SystemTime::now();
        let before = Sessions::new(
            &auth(&["first-token-0123456789", "other-token-0123456789"]),
            HERE,
        );
        let (_, cookie) = before.sign_in("first-token-0123456789", now).unwrap();
        let replica = Sessions::new(
            &auth(&["first-token-0123456789", "other-token-0123456789"]),
            HERE,
        );
        assert!(
            replica.check(&cookie, now).is_some(),
            "same key, same tokens"
        );
        let after = Sessions::new(&auth(&["other-token-0123456789"]), HERE);
        assert_eq!(after.check(&cookie, now), None, "its token was removed");
    }

    #[test]
    fn another_deployment_sharing_the_key_does_not_accept_the_session() {
        let now = SystemTime::now();
        let auth = auth(&["first-token-0123456789"]);
        let here = Sessions::new(&auth, HERE);
        let (_, cookie) = here.sign_in("first-token-0123456789", now).unwrap();
        let staging = Sessions::new(&auth, "https://staging.example.com/");
        assert_eq!(staging.check(&cookie, now), None, "another audience");
        let (_, theirs) = staging.sign_in("first-token-0123456789", now).unwrap();
        assert_eq!(here.check(&theirs, now), None);
        // A cookie without an audience (as they were before) is refused too.
        let (claims, _) = cookie.split_once('.').unwrap();
        let mut session: serde_json::Value = serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(claims)
                .unwrap(),
        )
        .unwrap();
        session.as_object_mut().unwrap().remove("aud");
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(serde_json::to_vec(&session).unwrap());
        let unbound = format!("{claims}.{}", auth.mac_of("session", &claims));
        assert_eq!(here.check(&unbound, now), None, "no audience");
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        assert_eq!(from_header("a=1; provender_session=x.y; b=2"), Some("x.y"));
        assert_eq!(from_header("provender_sessions=x"), None);
    }
}
