//! The registry's provider signing key: an OpenPGP key with which this registry signs the
//! SHA256SUMS of every provider version published to it (a private namespace), so that
//! `terraform init` verifies the signature itself against the key the registry lists in
//! `signing_keys`. Publishers hold no key of their own for it, and the key that signed each
//! version is kept in that version's record, so a later change of key never breaks a version
//! published before.
//!
//! `provender keygen --provider-signing` makes one (Ed25519, as GnuPG's `EdDSA`; a primary key
//! that signs, with one user ID); an operator may give their own armored secret key instead.
//! The key must not be protected by a passphrase: the server signs unattended.

use pgp::composed::{
    ArmorOptions, Deserializable, DetachedSignature, KeyType, SecretKeyParamsBuilder,
    SignedPublicKey, SignedSecretKey,
};
use pgp::crypto::hash::HashAlgorithm;
use pgp::types::{KeyDetails, Password};

use crate::records::SigningKey;

/// Why a provider signing key cannot be made or used.
#[derive(Debug, thiserror::Error)]
pub enum SignerError {
    #[error("not an armored OpenPGP secret key: {0}")]
    NotASecretKey(String),
    #[error("the key is protected by a passphrase, which the server cannot enter")]
    Locked,
    #[error("the key cannot sign: {0}")]
    CannotSign(String),
    #[error("making the key failed: {0}")]
    Generate(String),
}

/// The registry's provider signing key, loaded.
pub struct RegistryKey {
    secret: SignedSecretKey,
    public: SigningKey,
}

impl std::fmt::Debug for RegistryKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryKey")
            .field("key_id", &self.public.key_id)
            .finish_non_exhaustive()
    }
}

/// A new key: its armored secret key and armored public key.
pub fn generate(user_id: &str) -> Result<(String, String), SignerError> {
    let fail = |e: &dyn std::fmt::Display| SignerError::Generate(e.to_string());
    let params = SecretKeyParamsBuilder::default()
        .key_type(KeyType::Ed25519Legacy)
        .can_certify(true)
        .can_sign(true)
        .can_encrypt(false)
        .primary_user_id(user_id.into())
        .build()
        .map_err(|e| fail(&e))?;
    let mut rng = rand::thread_rng();
    let key = params.generate(&mut rng).map_err(|e| fail(&e))?;
    let signed = key
        .sign(&mut rng, &Password::empty())
        .map_err(|e| fail(&e))?;
    let secret = signed
        .to_armored_string(ArmorOptions::default())
        .map_err(|e| fail(&e))?;
    let public = SignedPublicKey::from(signed)
        .to_armored_string(ArmorOptions::default())
        .map_err(|e| fail(&e))?;
    Ok((secret, public))
}

impl RegistryKey {
    /// Loads an armored secret key, and checks that it signs (a signature over a test text
    /// that its own public key verifies).
    pub fn from_armor(text: &str) -> Result<RegistryKey, SignerError> {
        let (secret, _) = SignedSecretKey::from_string(text)
            .map_err(|e| SignerError::NotASecretKey(e.to_string()))?;
        if secret.primary_key.secret_params().is_encrypted() {
            return Err(SignerError::Locked);
        }
        let public_key = SignedPublicKey::from(secret.clone());
        let ascii_armor = public_key
            .to_armored_string(ArmorOptions::default())
            .map_err(|e| SignerError::NotASecretKey(e.to_string()))?;
        let key = RegistryKey {
            public: SigningKey {
                key_id: hex::encode_upper(secret.primary_key.key_id().as_ref()),
                ascii_armor,
                trust_signature: String::new(),
            },
            secret,
        };
        let probe = b"provender provider signing key check";
        let sig = key.sign(probe)?;
        super::check_detached(&key.public.ascii_armor, probe, &sig)
            .map_err(|e| SignerError::CannotSign(e.to_string()))?;
        Ok(key)
    }

    /// A binary detached signature over `data` (what `SHA256SUMS.sig` holds).
    pub fn sign(&self, data: &[u8]) -> Result<Vec<u8>, SignerError> {
        let sig = DetachedSignature::sign_binary_data(
            rand::thread_rng(),
            &self.secret.primary_key,
            &Password::empty(),
            HashAlgorithm::Sha256,
            data,
        )
        .map_err(|e| SignerError::CannotSign(e.to_string()))?;
        let mut out = Vec::new();
        pgp::ser::Serialize::to_writer(&sig, &mut out)
            .map_err(|e| SignerError::CannotSign(e.to_string()))?;
        Ok(out)
    }

    /// The public key as registries list it in `signing_keys`.
    pub fn signing_key(&self) -> &SigningKey {
        &self.public
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_signs_what_its_public_key_verifies() {
        let (secret, public) = generate("provender test <test@example.com>").unwrap();
        let key = RegistryKey::from_armor(&secret).unwrap();
        let sig = key.sign(b"abc  file.zip\n").unwrap();
        let id = crate::trust::check_detached(&public, b"abc  file.zip\n", &sig).unwrap();
        assert_eq!(id, key.signing_key().key_id);
        assert!(crate::trust::check_detached(&public, b"other", &sig).is_err());
        assert!(matches!(
            RegistryKey::from_armor(&public),
            Err(SignerError::NotASecretKey(_))
        ));
    }
}
