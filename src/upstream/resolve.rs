//! Name resolution for upstream connections.
//!
//! Every outbound connection resolves its host name here. A registry host with `connect_to` in
//! its `[upstream.hosts]` table is sent to that address instead (TLS still verifies the real
//! name); every other name goes to the system resolver.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Resolver with per-host address overrides.
#[derive(Clone, Default)]
pub struct Resolver {
    overrides: Arc<HashMap<String, SocketAddr>>,
}

impl Resolver {
    /// `overrides` maps a bare host name (no port) to the address to connect to.
    pub fn new(overrides: HashMap<String, SocketAddr>) -> Resolver {
        Resolver {
            overrides: Arc::new(overrides),
        }
    }
}

impl Resolve for Resolver {
    fn resolve(&self, name: Name) -> Resolving {
        let overrides = self.overrides.clone();
        Box::pin(async move {
            let host = name.as_str().to_ascii_lowercase();
            if let Some(addr) = overrides.get(&host) {
                let addrs: Addrs = Box::new(std::iter::once(*addr));
                return Ok(addrs);
            }
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let addrs: Addrs = Box::new(found.into_iter());
            Ok(addrs)
        })
    }
}
