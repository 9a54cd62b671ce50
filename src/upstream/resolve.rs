//! Name resolution for upstream connections, with the address policy applied.
//!
//! Every outbound connection to a host name resolves it here. A registry host with `connect_to`
//! in its `[upstream.hosts]` table is sent to that address instead (TLS still verifies the real
//! name): the operator chose it, so it is not checked. Every other name goes to the system
//! resolver, and if any address it returns is not public (loopback, private, link-local, ...),
//! the connection is refused before it is attempted (see [`NetPolicy`]). Checking here, on the
//! very addresses the connector will use, means a DNS answer cannot slip a private address past
//! the check, and a name that resolves differently a second time (DNS rebinding) is checked
//! again. IP-literal URLs never reach a resolver; [`NetPolicy::check_url`] covers those. The
//! operator's `upstream.proxy` host is resolved without the check; through that proxy, origin
//! names are resolved by the proxy itself, so only IP-literal URLs are checked on this side.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::policy::NetPolicy;

/// Resolver with per-host address overrides and the address policy.
#[derive(Clone, Default)]
pub struct Resolver {
    overrides: Arc<HashMap<String, SocketAddr>>,
    policy: Arc<NetPolicy>,
    /// Names the operator chose (the proxy), resolved without the address check.
    trusted: Arc<HashSet<String>>,
}

impl Resolver {
    /// `overrides` maps a bare host name (no port) to the address to connect to.
    pub fn new(overrides: HashMap<String, SocketAddr>, policy: Arc<NetPolicy>) -> Resolver {
        Resolver {
            overrides: Arc::new(overrides),
            policy,
            trusted: Arc::default(),
        }
    }

    /// Resolves these lower-case names without the address check.
    pub fn trusting(mut self, names: HashSet<String>) -> Resolver {
        self.trusted = Arc::new(names);
        self
    }

    /// Resolves `host` to the addresses a connection may use, or says why it may not.
    pub async fn lookup(&self, host: &str) -> std::io::Result<Vec<SocketAddr>> {
        let host = host.to_ascii_lowercase();
        if let Some(addr) = self.overrides.get(&host) {
            return Ok(vec![*addr]);
        }
        let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
        if found.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{host} resolves to no address"),
            ));
        }
        if self.trusted.contains(&host) {
            return Ok(found);
        }
        for addr in &found {
            if let Err(refused) = self.policy.check_ip(&host, addr.ip()) {
                tracing::warn!(%host, address = %addr.ip(), "{refused}");
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    refused,
                ));
            }
        }
        Ok(found)
    }
}

impl Resolve for Resolver {
    fn resolve(&self, name: Name) -> Resolving {
        let this = self.clone();
        Box::pin(async move {
            let found = this.lookup(name.as_str()).await?;
            let addrs: Addrs = Box::new(found.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn names_resolving_to_loopback_are_refused() {
        let r = Resolver::new(HashMap::new(), Arc::new(NetPolicy::default()));
        let err = r.lookup("localhost").await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(err.to_string().contains("loopback"), "{err}");
    }

    #[tokio::test]
    async fn overrides_and_allow_private_networks_are_honoured() {
        let target: SocketAddr = "127.0.0.1:9443".parse().unwrap();
        let r = Resolver::new(
            [("registry.example".to_string(), target)].into(),
            Arc::new(NetPolicy::default()),
        );
        assert_eq!(r.lookup("Registry.Example").await.unwrap(), vec![target]);
        let open = Resolver::new(
            HashMap::new(),
            Arc::new(NetPolicy {
                allow_private_networks: true,
                ..NetPolicy::default()
            }),
        );
        let found = open.lookup("localhost").await.unwrap();
        assert!(found.iter().all(|a| a.ip().is_loopback()), "{found:?}");
        let proxy = Resolver::new(HashMap::new(), Arc::new(NetPolicy::default()))
            .trusting(["localhost".to_string()].into());
        assert!(proxy.lookup("LocalHost").await.is_ok(), "the proxy's name");
    }
}
