//! `provender keygen`: a site key for signing bundles (see [`crate::trust::site`]).
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
On importing sites:     [bundles] trusted_keys = [\"<the printed public key>\"]"
)]
pub struct KeygenArgs {
    /// Where to write the private key (must not exist); the public key goes to FILE.pub.
    #[arg(long, short, value_name = "FILE")]
    pub output: PathBuf,
}

/// Runs `provender keygen`.
pub fn run(args: KeygenArgs) -> Result<Outcome, OpsError> {
    let (pem, key) = SiteKey::generate().map_err(|e| OpsError::Failed(e.into()))?;
    let public = key.public().to_string();
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
    write(&args.output, &options, &pem)?;
    let mut public_options = std::fs::OpenOptions::new();
    public_options.write(true).create_new(true);
    write(&pub_path, &public_options, &format!("{public}\n"))?;
    println!(
        "site key {}: private key in {} (keep it on this site: bundles.signing_key_file), \
         public key in {}",
        key.public().id(),
        args.output.display(),
        pub_path.display()
    );
    println!("add this to bundles.trusted_keys on the sites that import this site's bundles:");
    println!("{public}");
    Ok(Outcome::Success)
}
