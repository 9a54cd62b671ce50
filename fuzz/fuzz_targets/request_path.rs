//! Request-path parsing: any bytes a client can put in a path either fail to parse or give
//! parts that are safe to join onto cache paths, and whose canonical form parses to the same
//! value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use provender::address::{MirrorPath, RegistryPath};

fn safe(part: &str) {
    assert!(!part.is_empty());
    assert!(!part.contains(['/', '\\', '%', '\0']), "{part:?}");
    assert!(!part.contains(".."), "{part:?}");
}

fuzz_target!(|data: &[u8]| {
    let Ok(path) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(p) = MirrorPath::parse(path) {
        let (addr, extra) = match &p {
            MirrorPath::Index(a) => (a, vec![]),
            MirrorPath::Version(a, v) => (a, vec![v.to_string()]),
            MirrorPath::Archive(a, v, pl) => (a, vec![v.to_string(), pl.to_string()]),
        };
        for part in [addr.hostname.as_str(), &addr.namespace, &addr.type_] {
            safe(part);
        }
        for part in &extra {
            safe(part);
        }
        assert_eq!(MirrorPath::parse(&p.to_string()).unwrap(), p);
    }
    if let Ok(
        RegistryPath::Versions(a)
        | RegistryPath::Download(a, ..)
        | RegistryPath::Sums { addr: a, .. },
    ) = RegistryPath::parse(path)
    {
        for part in [a.hostname.as_str(), &a.namespace, &a.type_] {
            safe(part);
        }
    }
});
