//! A module package an origin hands out as a `.zip`. See `repack.rs` for what must hold.
#![no_main]

mod repack;

use libfuzzer_sys::fuzz_target;
use provender::package::Format;

fuzz_target!(|data: &[u8]| {
    repack::check(data, Format::Zip, false);
});
