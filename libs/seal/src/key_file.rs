//! The seal keys' settings both services share: a key is 64 hex digits (`openssl rand -hex
//! 32`), set as `seal_key` or read from `seal_key_file`; with neither set, `capstan all` makes
//! one on its first run and keeps it in a file of its own, `<section>-seal.key`, in
//! `seal_key_dir` (issue 27 for backups, issue 29 for provisioning). [`OwnSealKey`] is what a
//! service's settings tell `capstan all` for that; the file itself is made by `capstan all`.

use capstan_settings::{NatsSettings, Problem, Section};
use secrecy::SecretString;
use std::path::{Path, PathBuf};

use crate::KEY_LEN;

/// Where the single-machine plane keeps what it generates (the directory `deploy/local/up`
/// keeps the NATS password in, `CAPSTAN_LOCAL_STATE`).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/capstan";

/// 64 hex digits (surrounding white space ignored) as a key's 32 bytes.
pub fn parse_seal_key(text: &str) -> Option<[u8; KEY_LEN]> {
    let text = text.trim();
    if text.len() != KEY_LEN * 2 || !text.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return None;
    }
    let mut key = [0u8; KEY_LEN];
    for (index, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[index * 2..index * 2 + 2], 16).ok()?;
    }
    Some(key)
}

/// A service's settings whose seal key `capstan all` makes when none is set: where the key
/// would be kept, and taking the key made or found there. The section's `KEY` names the file
/// (`backups-seal.key`) and the settings in messages (`backups.seal_key_dir`).
pub trait OwnSealKey: Section {
    /// Whether the operator set a key (`seal_key` or `seal_key_file`): then none is made.
    fn seal_key_is_set(&self) -> bool;
    /// `seal_key_dir`: where `capstan all` keeps the key it makes, when set.
    fn seal_key_dir(&self) -> Option<&Path>;
    /// Uses `key` as if `seal_key_file` had named `file`.
    fn take_seal_key(&mut self, key: SecretString, file: PathBuf);

    /// The file name of the key `capstan all` makes for this service.
    fn generated_seal_key_name() -> String {
        format!("{}-seal.key", Self::KEY)
    }

    /// The seal key file `capstan all` makes when none is set: in `seal_key_dir`, else beside
    /// the NATS password (`nats.password_file`), else in [`DEFAULT_STATE_DIR`]; `None` when a
    /// seal key is set.
    fn generated_seal_key_file(&self, nats: &NatsSettings) -> Option<PathBuf> {
        if self.seal_key_is_set() {
            return None;
        }
        let dir = match (self.seal_key_dir(), &nats.password_file) {
            (Some(dir), _) => dir.to_path_buf(),
            (None, Some(password)) => password
                .parent()
                .filter(|dir| !dir.as_os_str().is_empty())
                .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
            (None, None) => PathBuf::from(DEFAULT_STATE_DIR),
        };
        Some(dir.join(Self::generated_seal_key_name()))
    }

    /// Takes the seal key `capstan all` made or found in `file` (64 hex digits), as if
    /// `seal_key_file` had named it; refused, naming the file, when it is not a seal key.
    fn use_generated_key(&mut self, file: PathBuf, text: &str) -> Result<(), Problem> {
        if parse_seal_key(text).is_none() {
            return Err(Problem::new(
                format!("{}.seal_key_dir", Self::KEY),
                format!(
                    "{} does not hold a seal key (64 hex digits)",
                    file.display()
                ),
            ));
        }
        self.take_seal_key(SecretString::from(text.trim().to_string()), file);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_64_hex_digits_and_nothing_else() {
        assert_eq!(parse_seal_key(&"0f".repeat(32)), Some([0x0f; 32]));
        assert_eq!(
            parse_seal_key(&format!(" {}\n", "AB".repeat(32))),
            Some([0xab; 32])
        );
        for bad in [
            String::new(),
            "0f".repeat(31),
            "0f".repeat(33),
            format!("{}zz", "0f".repeat(31)),
            format!("+f{}", "0f".repeat(31)),
            "é".repeat(32),
        ] {
            assert_eq!(parse_seal_key(&bad), None, "{bad:?}");
        }
    }
}
