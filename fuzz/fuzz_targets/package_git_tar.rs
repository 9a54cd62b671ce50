//! A module package fetched from git: `git archive` of the commit, a plain tar, repacked as it
//! stands. See `repack.rs` for what must hold.
#![no_main]

mod repack;

use libfuzzer_sys::fuzz_target;
use provender::package::Format;

fuzz_target!(|data: &[u8]| {
    repack::check(data, Format::Tar, false);
});
