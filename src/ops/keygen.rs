//! `provender keygen`: a site key for signing bundles (see [`crate::trust::site`]), or with
//! `--provider-signing` the registry's OpenPGP provider signing key for publishing (see
//! [`crate::trust::signer`]).
//!
//! Writes the private key to a new file readable only by its owner, and the public key beside
//! it (`<file>.pub`); prints the public key and where each goes in the configuration.

use std::io::Write as _;
use std::path::PathBuf;

use super::{OpsError, Outcome, usage};
use crate::trust::site::SiteKey;

/// `provender keygen`
#[derive(clap::Args, Debug)]
#[command(
    after_help = "On the exporting site:  [bundles] signing_key_file = \"FILE\"\n\
On importing sites:     [bundles] trusted_keys = [\"<the printed public key>\"]\n\
With --provider-signing: [publishing] signing_key = \"FILE\""
)]
pub struct KeygenArgs {
    /// Where to write the private key (must not exist); the public key goes to FILE.pub.
    #[arg(long, short, value_name = "FILE")]
    pub output: PathBuf,
    /// Make the registry's OpenPGP provider signing key (for `[publishing]`) instead of a
    /// site key.
    #[arg(long)]
    pub provider_signing: bool,
    /// The key's user ID, with --provider-signing.
    #[arg(
        long,
        value_name = "TEXT",
        default_value = "provender provider signing key"
    )]
    pub user_id: String,
}

/// Runs `provender keygen`.
pub fn run(args: KeygenArgs) -> Result<Outcome, OpsError> {
    let (secret, public, id) = if args.provider_signing {
        let (secret, public) = crate::trust::signer::generate(&args.user_id)
            .map_err(|e| OpsError::Failed(e.into()))?;
        let id = crate::trust::signer::RegistryKey::from_armor(&secret)
            .map_err(|e| OpsError::Failed(e.into()))?
            .signing_key()
            .key_id
            .clone();
        (secret, public.trim_end().to_string(), id)
    } else {
        let (pem, key) = SiteKey::generate().map_err(|e| OpsError::Failed(e.into()))?;
        (pem, key.public().to_string(), key.public().id().to_string())
    };
    let mut pub_path = args.output.clone().into_os_string();
    pub_path.push(".pub");
    let pub_path = PathBuf::from(pub_path);
    for path in [&args.output, &pub_path] {
        if path.exists() {
            return Err(usage(format!(
                "{} exists; keygen never overwrites a key",
                path.display()
            )));
        }
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let write = |path: &PathBuf, options: &std::fs::OpenOptions, text: &str| {
        options
            .open(path)
            .and_then(|mut f| {
                f.write_all(text.as_bytes())?;
                f.sync_all()
            })
            .map_err(|e| usage(format!("{}: {e}", path.display())))
    };
    write(&args.output, &options, &secret)?;
    let mut public_options = std::fs::OpenOptions::new();
    public_options.write(true).create_new(true);
    write(&pub_path, &public_options, &format!("{public}\n"))?;
    if args.provider_signing {
        println!(
            "provider signing key {id}: secret key in {} (publishing.signing_key), public key \
             in {}; the registry lists it in the signing_keys of every provider it publishes",
            args.output.display(),
            pub_path.display()
        );
        return Ok(Outcome::Success);
    }
    println!(
        "site key {id}: private key in {} (keep it on this site: bundles.signing_key_file), \
         public key in {}",
        args.output.display(),
        pub_path.display()
    );
    println!("add this to bundles.trusted_keys on the sites that import this site's bundles:");
    println!("{public}");
    Ok(Outcome::Success)
}
