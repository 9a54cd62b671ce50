//! What the module package targets share: the input is written to a file and repacked as
//! `serve` repacks an origin's package, within small limits. Never a panic; nothing is written
//! outside the scratch directory; a package that comes out holds a file, stays within the limits
//! and is canonical (repacked again, as `import` does, it gives the same bytes).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use provender::package::{Format, PackError, PackLimits, Packed, repack};

const LIMITS: PackLimits = PackLimits {
    max_entries: 64,
    max_unpacked: 1 << 20,
};

/// A directory of this process's own (under `TMPDIR`), emptied for each input.
fn workdir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| std::env::temp_dir().join(format!("provender-fuzz-{}", std::process::id())))
}

/// Repacks the file `input` into the fresh directory `scratch`.
fn pack(
    input: &Path,
    format: Format,
    scratch: &Path,
    strip_top: bool,
) -> Result<(Vec<u8>, Packed), PackError> {
    std::fs::create_dir(scratch).unwrap();
    let mut out = Vec::new();
    let packed = repack(input, format, scratch, strip_top, None, LIMITS, &mut out)?;
    Ok((out, packed))
}

/// Repacks `data` as a package in `format`, checking what comes out.
pub fn check(data: &[u8], format: Format, strip_top: bool) {
    let dir = workdir();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let input = dir.join("input");
    std::fs::write(&input, data).unwrap();
    let packed = pack(&input, format, &dir.join("scratch"), strip_top);

    let mut left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["input", "scratch"],
        "written outside the scratch directory"
    );

    let Ok((out, packed)) = packed else {
        return;
    };
    assert!(packed.files >= 1);
    assert!(packed.unpacked_bytes <= LIMITS.max_unpacked);
    let output = dir.join("output.tar.gz");
    std::fs::write(&output, &out).unwrap();
    let (again, repacked) = pack(&output, Format::TarGz, &dir.join("again"), false)
        .unwrap_or_else(|e| panic!("the package does not repack: {e}"));
    assert_eq!(repacked.files, packed.files);
    assert!(again == out, "the package is not canonical");
}
