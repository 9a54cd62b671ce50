//! Where provender may connect: the scheme and address policy for every outbound request.
//!
//! URLs reach provender from strangers: an origin's discovery document names the `providers.v1`
//! base, its download metadata names `download_url`, `shasums_url` and `shasums_signature_url`,
//! and any answer may redirect. Without a policy, an origin could make provender fetch from its
//! own network (a cloud metadata service, an admin port on loopback) and, because the mirror
//! shows origin errors to clients, even read some of it back.
//!
//! [`NetPolicy`] decides, for a URL, whether its scheme is acceptable (https, or http for hosts
//! the operator marked `allow_http`) and, when its host is an IP literal, whether that address
//! is public. Host names are checked where they are resolved ([`super::resolve::Resolver`]), so a
//! DNS name cannot smuggle a private address past the check, and every redirect hop passes the
//! same checks again. The operator's own choices are the only exceptions: `connect_to` targets
//! (reached under the registry's name) and `upstream.allow_private_networks`.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::Url;

/// Why an address is not public. `None` means it is an ordinary public unicast address.
pub fn non_public_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_reason(v4),
        IpAddr::V6(v6) => v6_reason(v6),
    }
}

fn v4_reason(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        _ if ip.is_unspecified() => "unspecified",
        (0, _, _) => "a \"this network\" (0.0.0.0/8)",
        (127, _, _) => "loopback",
        (10, _, _) => "private",
        (172, 16..=31, _) => "private",
        (192, 168, _) => "private",
        (169, 254, _) => "link-local",
        (100, 64..=127, _) => "carrier-grade NAT (100.64.0.0/10)",
        (192, 0, 0) => "IETF protocol assignment (192.0.0.0/24)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18..=19, _) => "benchmarking (198.18.0.0/15)",
        (224..=239, _, _) => "multicast",
        (240..=255, _, _) => "reserved or broadcast",
        _ => return None,
    })
}

fn v6_reason(ip: Ipv6Addr) -> Option<&'static str> {
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    // ::ffff:a.b.c.d and the deprecated ::a.b.c.d reach IPv4 hosts: judge the IPv4 address.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_reason(v4).map(|_| "an IPv4-mapped non-public");
    }
    let seg = ip.segments();
    if seg[..6] == [0, 0, 0, 0, 0, 0] {
        return Some("an IPv4-compatible (deprecated)");
    }
    // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) embed an IPv4 address that gateways reach.
    if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let v4 = Ipv4Addr::new(
            (seg[6] >> 8) as u8,
            seg[6] as u8,
            (seg[7] >> 8) as u8,
            seg[7] as u8,
        );
        return v4_reason(v4).map(|_| "a NAT64 non-public");
    }
    if seg[0] == 0x2002 {
        let v4 = Ipv4Addr::new(
            (seg[1] >> 8) as u8,
            seg[1] as u8,
            (seg[2] >> 8) as u8,
            seg[2] as u8,
        );
        return v4_reason(v4).map(|_| "a 6to4 non-public");
    }
    Some(match seg[0] {
        0xfc00..=0xfdff => "unique-local",
        0xfe80..=0xfebf => "link-local",
        0xfec0..=0xfeff => "site-local (deprecated)",
        0xff00..=0xffff => "multicast",
        0x0100 if seg[1..4] == [0, 0, 0] => "discard-only (100::/64)",
        0x2001 if seg[1] == 0x0db8 => "documentation",
        _ => return None,
    })
}

/// A refused URL or address, with a message for operators and clients.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

/// The scheme and address rules for outbound requests.
#[derive(Debug, Clone, Default)]
pub struct NetPolicy {
    /// `upstream.allow_private_networks`: any address may be reached.
    pub allow_private_networks: bool,
    /// Lowercase host names (without port) that may be fetched over plain http.
    pub http_hosts: HashSet<String>,
    /// Host names (without port) reached through `connect_to`, with the ports their registry
    /// hostnames name (443 when none). The connector keeps an explicit URL port even for an
    /// overridden name, so any other port would reach another service at the `connect_to`
    /// address.
    pub pinned_ports: HashMap<String, Vec<u16>>,
}

impl NetPolicy {
    /// Checks a URL before it is requested (and each redirect target before it is followed):
    /// scheme, embedded credentials, and the address if the host is an IP literal.
    pub fn check_url(&self, url: &Url) -> Result<(), PolicyError> {
        let host = match url.host() {
            Some(h) => h,
            None => return Err(PolicyError(format!("refusing {url}: it names no host"))),
        };
        match url.scheme() {
            "https" => {}
            "http"
                if self
                    .http_hosts
                    .contains(&host.to_string().to_ascii_lowercase()) => {}
            other => {
                return Err(PolicyError(format!(
                    "refusing {}: scheme {other:?} is not https",
                    redact(url)
                )));
            }
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(PolicyError(format!(
                "refusing {}: URLs with embedded credentials are not followed",
                redact(url)
            )));
        }
        let ip = match host {
            url::Host::Ipv4(v4) => IpAddr::V4(v4),
            url::Host::Ipv6(v6) => IpAddr::V6(v6),
            url::Host::Domain(name) => {
                let name = name.to_ascii_lowercase();
                if let Some(ports) = self.pinned_ports.get(&name) {
                    let port = url.port_or_known_default().unwrap_or(0);
                    if !ports.contains(&port) {
                        return Err(PolicyError(format!(
                            "refusing {}: {name} is reached through connect_to, which serves only port {}",
                            redact(url),
                            ports
                                .iter()
                                .map(u16::to_string)
                                .collect::<Vec<_>>()
                                .join(", ")
                        )));
                    }
                }
                return Ok(());
            }
        };
        self.check_ip(&host.to_string(), ip)
    }

    /// Checks one address a host name resolved to (or an IP literal).
    pub fn check_ip(&self, host: &str, ip: IpAddr) -> Result<(), PolicyError> {
        if self.allow_private_networks {
            return Ok(());
        }
        match non_public_reason(ip) {
            None => Ok(()),
            Some(reason) => Err(PolicyError(format!(
                "refusing to connect to {host}: {ip} is {} address \
                 (set upstream.allow_private_networks to allow private origins)",
                with_article(reason)
            ))),
        }
    }
}

/// Whether a transport error is a refusal by this policy (in the resolver or at a redirect):
/// permanent, so not worth a retry, and no sign that the origin is unhealthy.
pub fn is_refusal(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(err);
    while let Some(e) = source {
        if e.is::<PolicyError>() {
            return true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.get_ref().is_some_and(|inner| inner.is::<PolicyError>()) {
                return true;
            }
        }
        source = e.source();
    }
    false
}

fn with_article(reason: &str) -> String {
    if reason.starts_with("a ") || reason.starts_with("an ") {
        reason.to_string()
    } else if reason.starts_with(['a', 'e', 'i', 'o', 'u']) {
        format!("an {reason}")
    } else {
        format!("a {reason}")
    }
}

/// The URL without user information, query or fragment, for messages.
pub fn redact(url: &Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn non_public_addresses_are_named() {
        for (addr, reason) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("10.0.0.1", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("100.64.0.1", "carrier-grade NAT (100.64.0.0/10)"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "a \"this network\" (0.0.0.0/8)"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "reserved or broadcast"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fd00::1", "unique-local"),
            ("fc12::1", "unique-local"),
            ("fe80::1", "link-local"),
            ("ff02::1", "multicast"),
            ("::ffff:10.0.0.1", "an IPv4-mapped non-public"),
            ("::ffff:127.0.0.1", "an IPv4-mapped non-public"),
            ("::ffff:169.254.169.254", "an IPv4-mapped non-public"),
            ("::127.0.0.1", "an IPv4-compatible (deprecated)"),
            ("64:ff9b::a00:1", "a NAT64 non-public"),
            ("2002:a00:1::", "a 6to4 non-public"),
            ("2001:db8::1", "documentation"),
        ] {
            assert_eq!(non_public_reason(ip(addr)), Some(reason), "{addr}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for addr in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "172.15.255.255",
            "100.128.0.1",
            "192.169.0.1",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
            "64:ff9b::808:808",
            "2002:808:808::",
        ] {
            assert_eq!(non_public_reason(ip(addr)), None, "{addr}");
        }
    }

    #[test]
    fn urls_are_checked() {
        let p = NetPolicy::default();
        let ok = |u: &str| p.check_url(&Url::parse(u).unwrap());
        assert!(ok("https://registry.terraform.io/x").is_ok());
        assert!(ok("https://1.1.1.1/x").is_ok());
        for bad in [
            "http://registry.terraform.io/x",
            "ftp://registry.terraform.io/x",
            "file:///etc/passwd",
            "https://user:pw@registry.terraform.io/x",
            "https://127.0.0.1:8443/x",
            "https://[::1]/x",
            "https://169.254.169.254/latest/meta-data/",
            "https://[::ffff:10.0.0.1]/x",
            "https://0x7f.1/x",
            "https://2130706433/x",
            "https://0177.0.0.1/x",
        ] {
            let err = ok(bad).expect_err(bad);
            assert!(err.0.starts_with("refusing"), "{bad}: {err}");
            assert!(!err.0.contains("pw@"), "credentials never echoed: {err}");
        }
        let open = NetPolicy {
            allow_private_networks: true,
            http_hosts: ["mirror.internal".to_string()].into_iter().collect(),
            ..NetPolicy::default()
        };
        assert!(
            open.check_url(&Url::parse("https://10.0.0.1/x").unwrap())
                .is_ok()
        );
        assert!(
            open.check_url(&Url::parse("http://mirror.internal/x").unwrap())
                .is_ok()
        );
        assert!(
            open.check_url(&Url::parse("http://other.internal/x").unwrap())
                .is_err()
        );
    }

    #[test]
    fn connect_to_names_keep_their_port() {
        let p = NetPolicy {
            pinned_ports: [("registry.example".to_string(), vec![443])].into(),
            ..NetPolicy::default()
        };
        let check = |u: &str| p.check_url(&Url::parse(u).unwrap());
        assert!(check("https://registry.example/x").is_ok());
        assert!(check("https://registry.example:443/x").is_ok());
        assert!(check("https://Registry.Example:6379/x").is_err());
        assert!(check("https://other.example:6379/x").is_ok());
    }

    #[test]
    fn messages_name_the_key_to_change() {
        let err = NetPolicy::default()
            .check_ip("metadata.example", ip("169.254.169.254"))
            .unwrap_err();
        assert_eq!(
            err.0,
            "refusing to connect to metadata.example: 169.254.169.254 is a link-local address \
             (set upstream.allow_private_networks to allow private origins)"
        );
    }
}
