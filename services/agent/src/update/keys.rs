//! The keys an update is checked with (AG-27, AG-28): the release keys (compiled in and held
//! in `release_keys`) and the public log's statement and log keys, each held file honoured
//! only when root-owned and writable by nobody else. Script trust and site releases check
//! with the same release keys.

use std::{fs, os::unix::fs::PermissionsExt as _};

use capstan_signing::PublicKey;
use tracing::warn;

use crate::{
    domain::{
        public_log::{self, LogKeys},
        trust::FileFacts,
        update::{held_keys_file, parse_held_keys, COMPILED_RELEASE_KEY},
    },
    state::{StateDir, StateError},
};

/// Held release keys, one base64 public key a line, in the state directory.
pub const HELD_KEYS: &str = "release_keys";

/// A held keys file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    #[error("{name}: {source}")]
    LogKeys {
        name: &'static str,
        #[source]
        source: StateError,
    },
    #[error(transparent)]
    ReleaseKeys(StateError),
}

/// The text of a held keys file of the state directory, when it may be trusted: a regular
/// file owned by root and writable by nobody else (AG-28); `None` when absent or distrusted.
fn trusted_file(state: &StateDir, name: &str) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let path = state.file(name);
    let metadata = fs::symlink_metadata(&path).ok()?;
    let facts = FileFacts {
        is_symlink: metadata.file_type().is_symlink(),
        is_dir: metadata.is_dir(),
        is_file: metadata.is_file(),
        uid: metadata.uid(),
        mode: metadata.permissions().mode() & 0o7777,
    };
    match held_keys_file(&facts, &path.display().to_string()) {
        Ok(()) => fs::read_to_string(&path).ok(),
        Err(distrust) => {
            warn!(%distrust, "=== Self-update === held keys are not honoured");
            None
        }
    }
}

/// The statement and log keys the public log is checked with (AG-27, AG-28): the compiled
/// ones and the held files (`release_statement_keys`, `transparency_log_keys`), only when
/// root-owned and writable by nobody else. The site's own key files are never read.
pub fn log_keys(state: &StateDir) -> LogKeys {
    LogKeys::of(
        trusted_file(state, public_log::STATEMENT_KEYS_FILE).as_deref(),
        trusted_file(state, public_log::LOG_KEYS_FILE).as_deref(),
    )
}

/// AG-28: before a swap, every key held now is written to the held files (each replaced whole
/// by rename), so the next binary holds them whatever it was built with.
pub(super) fn hold_log_keys(state: &StateDir, keys: &LogKeys) -> Result<(), HoldError> {
    for (name, held) in [
        (public_log::STATEMENT_KEYS_FILE, &keys.statement),
        (public_log::LOG_KEYS_FILE, &keys.log),
    ] {
        let current = fs::read_to_string(state.file(name)).unwrap_or_default();
        if let Some(text) = public_log::keys_to_hold(&current, held) {
            state
                .write(name, text.as_bytes(), 0o644)
                .map_err(|source| HoldError::LogKeys { name, source })?;
        }
    }
    Ok(())
}

/// The keys release metadata is checked against: the one compiled in and the held ones (the
/// held file only when root-owned and writable by nobody else, AG-28).
pub fn trusted_keys(state: &StateDir) -> Vec<PublicKey> {
    let mut keys = Vec::new();
    if let Some(compiled) = COMPILED_RELEASE_KEY {
        match PublicKey::from_base64(compiled) {
            Ok(key) => keys.push(key),
            Err(error) => {
                warn!(%error, "=== Self-update === the compiled release key is not a key")
            }
        }
    }
    let path = state.file(HELD_KEYS);
    if let Ok(metadata) = fs::symlink_metadata(&path) {
        use std::os::unix::fs::MetadataExt as _;
        let facts = FileFacts {
            is_symlink: metadata.file_type().is_symlink(),
            is_dir: metadata.is_dir(),
            is_file: metadata.is_file(),
            uid: metadata.uid(),
            mode: metadata.permissions().mode() & 0o7777,
        };
        match held_keys_file(&facts, &path.display().to_string()) {
            Ok(()) => {
                let text = fs::read_to_string(&path).unwrap_or_default();
                let (held, bad) = parse_held_keys(&text);
                for line in bad {
                    warn!(
                        line,
                        "=== Self-update === a held release key line is not a key; skipped"
                    );
                }
                for key in held {
                    if !keys.contains(&key) {
                        keys.push(key);
                    }
                }
            }
            Err(distrust) => {
                warn!(%distrust, "=== Self-update === the held release keys are not honoured")
            }
        }
    }
    keys
}

/// Adds `key` to the held keys (a rotation the current key vouched for).
pub(super) fn hold_key(state: &StateDir, key: &PublicKey) -> Result<(), HoldError> {
    let path = state.file(HELD_KEYS);
    let mut text = fs::read_to_string(&path).unwrap_or_default();
    let (held, _) = parse_held_keys(&text);
    if held.contains(key) {
        return Ok(());
    }
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&key.to_base64());
    text.push('\n');
    state
        .write(HELD_KEYS, text.as_bytes(), 0o644)
        .map_err(HoldError::ReleaseKeys)
}
