//! A module package an origin hands out as a `.tar.gz` (with `//*`, re-rooted into its one
//! top-level directory, as GitHub's tarballs are). Input that is not gzip is gzipped first, so
//! that mutations reach the tar stream inside as well as the gzip layer. See `repack.rs` for
//! what must hold.
#![no_main]

mod repack;

use std::io::Write;

use libfuzzer_sys::fuzz_target;
use provender::package::Format;

fuzz_target!(|data: &[u8]| {
    if data.starts_with(&[0x1f, 0x8b]) {
        repack::check(data, Format::TarGz, true);
    } else {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(data).unwrap();
        repack::check(&gz.finish().unwrap(), Format::TarGz, true);
    }
});
