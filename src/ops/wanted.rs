//! What the operator commands work on and what is wrong with it: [`Wanted`], one provider and
//! which version(s) of it, and [`InputError`], naming the input and the place in it. Shared by
//! every reader of inputs (lists, lock files, configurations), which is why it is a file of its
//! own that uses none of them.

use std::path::Path;

use crate::address::{ProviderAddr, Version};
use crate::constraints::Constraints;

/// One provider to work on, and which version(s) of it.
#[derive(Debug, Clone)]
pub struct Wanted {
    pub addr: ProviderAddr,
    /// The constraint to resolve (for a lock file: the one it records, informational).
    pub constraints: Constraints,
    /// The exact version a lock file pins.
    pub locked: Option<Version>,
    /// Where this came from, for messages (`path/main.tf`, `--provider`).
    pub from: String,
}

/// Why an input cannot be used: a configuration, a lock file, a provider list, or a
/// `--provider` / `--module` value. Always the operator's to fix (commands exit with 78). The
/// message names the input and the place in it, e.g. `providers.toml: providers[0].source:
/// ...`, or for a file of a module a configuration calls, `module.vpc (called in main.tf):
/// .terraform/modules/vpc/main.tf: not valid HCL: ...`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InputError {
    /// The module call through which a configuration reached the input.
    pub via: Option<String>,
    /// The file, directory or argument (`--provider "acme@1"`); `None` while the error is with
    /// a reader of text that does not know where the text came from.
    pub input: Option<String>,
    /// Where in the input: a key path (`providers[0].source`), a block (`provider "..."`).
    pub at: Option<String>,
    /// What is wrong.
    pub problem: String,
}

impl std::fmt::Display for InputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for part in [&self.via, &self.input, &self.at].into_iter().flatten() {
            write!(f, "{part}: ")?;
        }
        f.write_str(&self.problem)
    }
}

impl InputError {
    /// `problem`, not yet placed.
    pub fn new(problem: impl std::fmt::Display) -> InputError {
        InputError {
            via: None,
            input: None,
            at: None,
            problem: problem.to_string(),
        }
    }

    /// Placed in the input at `place` (unless already placed).
    pub fn at(mut self, place: impl Into<String>) -> InputError {
        self.at.get_or_insert_with(|| place.into());
        self
    }

    /// In the input `input`, a path or an argument (unless already known).
    pub fn input(mut self, input: impl std::fmt::Display) -> InputError {
        self.input.get_or_insert_with(|| input.to_string());
        self
    }

    /// In the file or directory at `path` (unless already known).
    pub fn in_file(self, path: &Path) -> InputError {
        self.input(path.display())
    }

    /// Reached through the module call `call` (unless already known).
    pub fn via(mut self, call: &str) -> InputError {
        self.via.get_or_insert_with(|| call.to_string());
        self
    }
}

/// The text of an input file, or an [`InputError`] naming it.
pub(super) fn read_text(path: &Path) -> Result<String, InputError> {
    std::fs::read_to_string(path).map_err(|e| InputError::new(e).in_file(path))
}
