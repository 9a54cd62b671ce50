//! Throughput of `h1:` hashing (`provender::hash::h1_zip`), in bytes of uncompressed content.
//!
//! Two archives shaped like provider packages (one executable entry plus a large one): an
//! incompressible payload (deflate stores it, so the work is CRC + SHA-256) and a compressible
//! one (real inflate work, like a Go binary). Both are built in memory before measuring.
//!
//! `cargo bench --bench h1`; `H1_BENCH_MIB` sets the payload size (default 64).

use std::hint::black_box;
use std::io::{Cursor, Write};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use provender::hash::{HashLimits, h1_zip};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

fn payload_mib() -> usize {
    std::env::var("H1_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// Incompressible bytes.
fn random_bytes(len: usize) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    let mut data = vec![0u8; len];
    rng.fill(&mut data);
    data
}

/// Bytes that deflate to roughly a third of their size, like a stripped executable.
fn compressible_bytes(len: usize) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(0xc0de);
    let words: Vec<Vec<u8>> = (0..512)
        .map(|_| (0..rng.usize(3..12)).map(|_| rng.u8(b'a'..=b'z')).collect())
        .collect();
    let mut data = Vec::with_capacity(len + 16);
    while data.len() < len {
        if rng.u8(..) < 40 {
            data.extend_from_slice(&rng.u64(..).to_le_bytes());
        } else {
            data.extend_from_slice(&words[rng.usize(..words.len())]);
            data.push(b' ');
        }
    }
    data.truncate(len);
    data
}

/// A provider-like zip: the plugin executable entry and `payload.bin`. Returns the archive and
/// the total uncompressed size of its entries.
fn provider_zip(payload: &[u8]) -> (Vec<u8>, u64) {
    let plugin = b"#!/bin/sh\nexit 1\n";
    let options = SimpleFileOptions::default().compression_method(CompressionMethod::Deflated);
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    zip.start_file(
        "terraform-provider-bench_v1.0.0",
        options.unix_permissions(0o755),
    )
    .expect("start plugin entry");
    zip.write_all(plugin).expect("write plugin entry");
    zip.start_file("payload.bin", options)
        .expect("start payload entry");
    zip.write_all(payload).expect("write payload entry");
    let bytes = zip.finish().expect("finish zip").into_inner();
    (bytes, (plugin.len() + payload.len()) as u64)
}

fn bench_h1(c: &mut Criterion) {
    let len = payload_mib() << 20;
    let mut group = c.benchmark_group("h1");
    group.sample_size(10);
    for (name, payload) in [
        ("incompressible", random_bytes(len)),
        ("compressible", compressible_bytes(len)),
    ] {
        let (archive, uncompressed) = provider_zip(&payload);
        drop(payload);
        eprintln!(
            "h1/{name}: {} MiB uncompressed, {} MiB zip",
            uncompressed >> 20,
            archive.len() >> 20
        );
        group.throughput(Throughput::Bytes(uncompressed));
        group.bench_function(name, |b| {
            b.iter(|| {
                h1_zip(Cursor::new(black_box(&archive[..])), HashLimits::default())
                    .expect("hashable zip")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_h1);
criterion_main!(benches);
