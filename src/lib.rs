//! provender: a read-through caching mirror for Terraform and OpenTofu providers.
//!
//! It serves the provider network mirror protocol (`index.json`, `<version>.json`, archives)
//! and fills its cache from each provider's origin registry on a miss, verifying every archive
//! against the origin's checksums before storing or serving it. See ARCHITECTURE.md for the map.

pub mod address;
pub mod auth;
pub mod breaker;
pub mod cache;
pub mod catalogue;
pub mod cli;
pub mod clock;
pub mod config;
pub mod constraints;
pub mod error;
pub mod fsio;
pub mod hash;
pub mod metrics;
pub mod mirror;
pub mod module_docs;
pub mod ops;
pub mod package;
pub mod policy;
pub mod records;
pub mod reverify;
pub mod server;
pub mod storage;
pub mod tarball;
pub mod tls;
pub mod trust;
pub mod upstream;
pub mod usage;
