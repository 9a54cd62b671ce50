//! The integration test binary: one module per feature.

mod support;

mod mirror;
mod origin_smoke;
mod terraform;
