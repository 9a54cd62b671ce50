//! The integration test binary: one module per feature.

mod support;

mod certificates;
mod mirror;
mod ops;
mod origin_smoke;
mod resilience;
mod security;
mod terraform;
