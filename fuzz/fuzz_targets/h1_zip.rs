//! The `h1:` zip hasher on arbitrary bytes: never a panic, bounded work, a well-formed hash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use provender::hash::{HashLimits, h1_zip};

fuzz_target!(|data: &[u8]| {
    let limits = HashLimits {
        max_entries: 64,
        max_uncompressed_bytes: 1 << 20,
    };
    if let Ok(h1) = h1_zip(std::io::Cursor::new(data), limits) {
        let text = h1.as_str();
        assert!(text.starts_with("h1:") && text.len() == 47, "{text}");
        assert_eq!(provender::hash::H1::parse(text).ok().as_ref(), Some(&h1));
    }
});
