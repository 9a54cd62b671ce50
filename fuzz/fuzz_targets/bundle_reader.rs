//! A bundle is carried in from outside: its tar stream, its manifest and its signature entry
//! are read as `import` reads them (archives hashed into nothing instead of staged). Never a
//! panic; an archive is handed over only when it is an entry the manifest names, and only its
//! declared size is read.
#![no_main]

use libfuzzer_sys::fuzz_target;
use provender::ops::bundle::{Manifest, copy_hashing, walk};

fuzz_target!(|data: &[u8]| {
    let _ = Manifest::parse(data);
    let mut failed = Vec::new();
    let walked = walk(
        data,
        &mut failed,
        |head| {
            assert!(Manifest::parse(&head.manifest_bytes).is_ok());
            Ok(())
        },
        |entry, _, _, body| {
            let (sha, size) = copy_hashing(body, &mut std::io::sink(), entry.size)
                .map_err(|e| e.to_string())?;
            assert!(size <= entry.size + 1);
            if size != entry.size || sha != entry.sha256 {
                return Err("does not match".into());
            }
            Ok(())
        },
    );
    if let Some((head, sums)) = walked {
        for (v, s, _) in sums.keys() {
            assert!(head.manifest.versions[*v].sums.len() > *s);
        }
    }
});
