//! Everything an origin sends as a document: the discovery document, version lists, download
//! metadata and SHA256SUMS. Never a panic; what parses is valid.
#![no_main]

use libfuzzer_sys::fuzz_target;
use provender::address::Platform;
use provender::trust::sums_lookup;
use provender::upstream::{parse_discovery, parse_download, parse_versions};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    match selector % 4 {
        0 => {
            if let Ok(services) = parse_discovery(body) {
                for service in ["providers.v1", "modules.v1"] {
                    assert!(services.get(service).is_none_or(|base| !base.is_empty()));
                }
            }
        }
        1 => {
            if let Ok(list) = parse_versions(body) {
                for (i, v) in list.versions.iter().enumerate() {
                    assert!(
                        list.versions[..i].iter().all(|w| w.version != v.version),
                        "duplicate version {}",
                        v.version
                    );
                }
            }
        }
        2 => {
            let platform = Platform::parse("linux_amd64").unwrap();
            if let Ok(d) = parse_download(body, &platform) {
                assert_eq!(d.shasum.as_str().len(), 64);
                assert!(
                    d.shasum
                        .as_str()
                        .bytes()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
                );
                assert!(!d.filename.contains(['/', '\\', '\n', '\0']));
            }
        }
        _ => {
            if let Some(sum) = sums_lookup(body, "terraform-provider-x_1.0.0_linux_amd64.zip") {
                assert_eq!(sum.len(), 64);
            }
        }
    }
});
