//! A bundle is carried in from outside: its tar stream, its manifest and its signature entry
//! are read as `import` reads them (archives and module packages hashed into nothing instead of
//! staged). Never a panic; a payload is handed over only when it is an entry the manifest names,
//! and only its declared size is read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use provender::hash::Hashing;
use provender::ops::bundle::{Manifest, Payload, walk};

fuzz_target!(|data: &[u8]| {
    let _ = Manifest::parse(data);
    let mut failed = Vec::new();
    let walked = walk(
        data,
        &mut failed,
        |head| {
            assert!(Manifest::parse(&head.manifest_bytes).is_ok());
            Ok::<(), std::io::Error>(())
        },
        |payload, body| {
            let (size, sha256) = match payload {
                Payload::Archive(entry, _, _) => (entry.size, &entry.sha256),
                Payload::Module(entry, _) => (entry.size, &entry.sha256),
                Payload::Git(entry, _) => (entry.size, &entry.sha256),
                Payload::ReleaseBuild(entry, _, _) => (entry.size, &entry.sha256),
            };
            // Capped as import stages it: more than the declared size is an error.
            let mut hashing = Hashing::new(std::io::sink()).capped(size);
            std::io::copy(body, &mut hashing)?;
            let digest = hashing.digest();
            assert!(digest.size <= size);
            if digest.size != size || &digest.sha256 != sha256 {
                return Err(std::io::Error::other("does not match"));
            }
            Ok(())
        },
    );
    if let Some(walked) = walked {
        let (head, sums) = (walked.head, walked.sums);
        for (v, s, _) in sums.keys() {
            assert!(head.manifest.versions[*v].sums.len() > *s);
        }
    }
});
