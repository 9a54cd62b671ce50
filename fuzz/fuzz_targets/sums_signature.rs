//! SHA256SUMS signature checking with hostile signatures and signing keys: never a panic, and
//! never a success (the input is not signed by the listed key).
#![no_main]

use libfuzzer_sys::fuzz_target;
use provender::address::ProviderAddr;
use provender::records::SigningKey;
use provender::trust::Verifier;

const KEY: &str = include_str!("../../src/trust/testdata/author.asc");

fuzz_target!(|data: &[u8]| {
    let addr = ProviderAddr::parse("registry.example/acme/x").unwrap();
    let (sig, armor) = data.split_at(data.len() / 2);
    let keys = [
        SigningKey {
            key_id: String::new(),
            ascii_armor: String::from_utf8_lossy(armor).into_owned(),
            trust_signature: String::from_utf8_lossy(sig).into_owned(),
        },
        SigningKey {
            key_id: String::new(),
            ascii_armor: KEY.to_string(),
            trust_signature: String::new(),
        },
    ];
    let verified = Verifier::hashicorp().verify(&addr, b"not the signed document\n", sig, &keys);
    assert!(verified.is_err(), "{verified:?}");
});
