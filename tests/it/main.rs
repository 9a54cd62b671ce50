//! The integration test binary: one module per feature.

mod support;

mod access;
mod catalogue;
mod config_reference;
mod connections;
mod custody;
mod deploy;
mod faults;
mod git;
mod hashes;
mod identity;
mod integrity;
mod layering;
mod login;
mod mirror;
mod module_fixture_smoke;
mod modules;
mod oci;
mod operations;
mod ops;
mod origin_smoke;
mod pages;
mod policy;
mod policy_pages;
mod prune;
mod publishing;
mod release_pages;
mod releases;
mod replicas;
mod resilience;
mod security;
mod sign_on;
mod sites;
mod storage;
mod terraform;
