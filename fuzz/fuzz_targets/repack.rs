//! What the module package targets share: the input is repacked as `serve` repacks an origin's
//! package, within small limits, unpacked in memory (`repack_in_memory`: the same rules as the
//! scratch directory `serve` uses, and no file system in the loop, so a target runs millions of
//! inputs). Never a panic; no path but one of normal components reaches the tree (the
//! in-memory tree asserts it); a package that comes out holds a file, stays within the limits
//! and is canonical (repacked again, as `import` does, it gives the same bytes).

use provender::package::{Format, PackError, PackLimits, Packed, repack_in_memory};

const LIMITS: PackLimits = PackLimits {
    max_entries: 64,
    max_unpacked: 1 << 20,
};

fn pack(input: &[u8], format: Format, strip_top: bool) -> Result<(Vec<u8>, Packed), PackError> {
    let mut out = Vec::new();
    let packed = repack_in_memory(input, format, strip_top, None, LIMITS, &mut out)?;
    Ok((out, packed))
}

/// Repacks `data` as a package in `format`, checking what comes out.
pub fn check(data: &[u8], format: Format, strip_top: bool) {
    let Ok((out, packed)) = pack(data, format, strip_top) else {
        return;
    };
    assert!(packed.files >= 1);
    assert!(packed.unpacked_bytes <= LIMITS.max_unpacked);
    let (again, repacked) = pack(&out, Format::TarGz, false)
        .unwrap_or_else(|e| panic!("the package does not repack: {e}"));
    assert_eq!(repacked.files, packed.files);
    assert!(again == out, "the package is not canonical");
}
