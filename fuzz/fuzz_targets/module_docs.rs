//! A module package read for its documentation, and any text rendered as a README. Input that
//! is not gzip is gzipped first, so that mutations reach the tar stream inside. What must
//! hold: no panic, the limits kept, and the README's HTML free of anything that runs or loads.
#![no_main]

use std::io::Write;

use libfuzzer_sys::fuzz_target;
use provender::module_docs::{DocLimits, extract, readme};

fuzz_target!(|data: &[u8]| {
    let limits = DocLimits {
        max_stream: 8 << 20,
        max_entries: 1_000,
        max_file: 64 << 10,
        max_kept: 1 << 20,
        max_modules: 20,
    };
    let gz = if data.starts_with(&[0x1f, 0x8b]) {
        data.to_vec()
    } else {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(data).unwrap();
        gz.finish().unwrap()
    };
    if let Ok(docs) = extract(gz.as_slice(), None, limits) {
        assert!(docs.submodules.len() <= 20 && docs.examples.len() <= 20);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let html = readme::render(text, "").html.to_ascii_lowercase();
        // Text is escaped, so every `<` left opens a tag the cleaner allowed.
        for tag in html.split('<').skip(1) {
            let tag = tag.split('>').next().unwrap_or_default();
            let name = tag.split([' ', '/']).find(|n| !n.is_empty()).unwrap_or_default();
            assert!(
                !matches!(name, "script" | "img" | "iframe" | "style" | "form" | "input" | "object" | "embed"),
                "<{tag}>"
            );
            for attr in tag.split_whitespace().skip(1) {
                assert!(!attr.starts_with("on") && !attr.starts_with("style=") && !attr.starts_with("src="), "<{tag}>");
                assert!(!attr.starts_with("href=\"javascript"), "<{tag}>");
            }
        }
    }
});
