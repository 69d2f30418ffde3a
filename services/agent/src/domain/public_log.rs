//! The public log (issue 15; AG-27, AG-28, AG-31), without I/O: which statement and log keys
//! the agent holds, whether a release must be logged before it is installed, the offline check
//! of its `RELEASE_STATEMENT` (`capstan_signing::statement`), and when an `unlogged` verdict
//! is reported. `update.rs` fetches the statement and keeps the key files.

use std::time::Duration;

use capstan_signing::{
    statement::{self, agent_artifact, LogError},
    PublicKey,
};

use super::update::{parse_held_keys, UpdateState, Verdict};

/// Statement keys compiled in (`CAPSTAN_STATEMENT_KEYS`, base64 public keys separated by
/// commas), as the spec's `releaseStatementKeysB64`.
pub const COMPILED_STATEMENT_KEYS: Option<&str> = option_env!("CAPSTAN_STATEMENT_KEYS");
/// Log checkpoint keys compiled in (`CAPSTAN_LOG_KEYS`), as the spec's `releaseLogKeysB64`.
pub const COMPILED_LOG_KEYS: Option<&str> = option_env!("CAPSTAN_LOG_KEYS");
/// The held statement keys, in the state directory (root-owned, writable by nobody else).
pub const STATEMENT_KEYS_FILE: &str = "release_statement_keys";
/// The held log checkpoint keys, likewise.
pub const LOG_KEYS_FILE: &str = "transparency_log_keys";
/// AG-31: an `unlogged` verdict is reported only once it has stood this long, because a
/// publish writes the binaries before the statement that records them (RO-07).
pub const UNLOGGED_GRACE: Duration = Duration::from_secs(15 * 60);

/// The keys the public log is checked with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogKeys {
    pub statement: Vec<PublicKey>,
    pub log: Vec<PublicKey>,
}

/// The keys of a comma-separated list of base64 public keys; what is not a key is skipped.
pub fn parse_compiled(text: Option<&str>) -> Vec<PublicKey> {
    parse_held_keys(&text.unwrap_or_default().replace(',', "\n")).0
}

impl LogKeys {
    /// The compiled keys and the held ones (`held_*`: the files' text, already judged
    /// trustworthy by the caller), without repeats.
    pub fn of(held_statement: Option<&str>, held_log: Option<&str>) -> LogKeys {
        let mut keys = LogKeys {
            statement: parse_compiled(COMPILED_STATEMENT_KEYS),
            log: parse_compiled(COMPILED_LOG_KEYS),
        };
        for (held, into) in [
            (held_statement, &mut keys.statement),
            (held_log, &mut keys.log),
        ] {
            for key in parse_held_keys(held.unwrap_or_default()).0 {
                if !into.contains(&key) {
                    into.push(key);
                }
            }
        }
        keys
    }

    /// AG-28: once any statement or log key is held, every later binary must be logged; a
    /// machine with none updates on the signature alone.
    pub fn required(&self) -> bool {
        !self.statement.is_empty() || !self.log.is_empty()
    }
}

/// AG-27: the statement fetched for `version` (or why it could not be), checked offline
/// against `keys`, must record the binary's `sha256` under `agent/<arch>`. A failure is
/// `unlogged`.
pub fn check_logged(
    fetched: Result<&[u8], impl std::fmt::Display>,
    keys: &LogKeys,
    arch: &str,
    sha256: &str,
    version: &str,
) -> Result<(), Verdict> {
    let unlogged = |reason: String| {
        Err(Verdict::new(
            UpdateState::Unlogged,
            Some(version),
            Some(format!("unlogged: {reason}")),
        ))
    };
    let document = match fetched {
        Ok(document) => document,
        Err(error) => return unlogged(format!("no release statement for {version}: {error}")),
    };
    match statement::verify(
        document,
        &keys.statement,
        &keys.log,
        &agent_artifact(arch),
        sha256,
    ) {
        Ok(read) if read.version == version => Ok(()),
        Ok(read) => unlogged(format!(
            "the release statement is for {}, not {version}",
            read.version
        )),
        Err(error @ LogError::NotRecorded { .. }) => unlogged(error.to_string()),
        Err(error) => unlogged(error.to_string()),
    }
}

/// AG-31: whether an `unlogged` verdict that has stood `standing` is reported yet; before,
/// the agent says it is waiting for the log.
pub fn report_unlogged(standing: Duration, grace: Duration) -> bool {
    standing >= grace
}

/// The keys to write to the held files before a swap (AG-28): every key held now, compiled or
/// from the files, so a next binary built without them still holds them. Keys are never
/// removed. `None` when the file already holds them all.
pub fn keys_to_hold(current_text: &str, keys: &[PublicKey]) -> Option<String> {
    let (held, _) = parse_held_keys(current_text);
    let missing: Vec<&PublicKey> = keys.iter().filter(|key| !held.contains(key)).collect();
    if missing.is_empty() {
        return None;
    }
    let mut text = current_text.to_string();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    for key in missing {
        text.push_str(&key.to_base64());
        text.push('\n');
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_signing::{
        statement::{MemoryLog, Statement},
        NodeKey,
    };
    use std::collections::BTreeMap;

    fn key(seed: u8) -> NodeKey {
        NodeKey::from_secret_bytes(&[seed; 32]).unwrap()
    }

    const SHA: &str = "ab00000000000000000000000000000000000000000000000000000000000000";

    fn logged(version: &str, sha: &str) -> Vec<u8> {
        let mut artifacts = BTreeMap::new();
        artifacts.insert("agent/linux-amd64".to_string(), sha.to_string());
        let mut log = MemoryLog::new("log.example");
        log.append(b"an earlier release".to_vec());
        log.publish(
            &Statement {
                version: version.into(),
                artifacts,
            },
            &key(1),
            &key(2),
        )
    }

    fn keys() -> LogKeys {
        LogKeys {
            statement: vec![key(1).public_key()],
            log: vec![key(2).public_key()],
        }
    }

    #[test]
    fn ag_27_a_binary_recorded_in_a_logged_statement_passes() {
        let document = logged("1.3.0", SHA);
        assert_eq!(
            check_logged(
                Ok::<_, String>(&document),
                &keys(),
                "linux-amd64",
                SHA,
                "1.3.0"
            ),
            Ok(())
        );
    }

    #[test]
    fn ag_27_anything_short_of_a_logged_record_of_this_binary_is_unlogged() {
        let document = logged("1.3.0", SHA);
        let other_sha = "cd".repeat(32);
        for (fetched, arch, sha, version, said) in [
            (
                Err("404".to_string()),
                "linux-amd64",
                SHA,
                "1.3.0",
                "no release statement",
            ),
            (
                Ok(&document[..]),
                "linux-amd64",
                other_sha.as_str(),
                "1.3.0",
                "does not record",
            ),
            (
                Ok(&document[..]),
                "linux-arm64",
                SHA,
                "1.3.0",
                "does not record",
            ),
            (
                Ok(&document[..]),
                "linux-amd64",
                SHA,
                "1.3.1",
                "is for 1.3.0",
            ),
        ] {
            let verdict = check_logged(fetched, &keys(), arch, sha, version).unwrap_err();
            assert_eq!(verdict.state, UpdateState::Unlogged);
            let reason = verdict.reason.unwrap();
            assert!(
                reason.starts_with("unlogged") && reason.contains(said),
                "{reason}"
            );
        }
        // signed by a statement key this agent does not hold
        let strangers = LogKeys {
            statement: vec![key(3).public_key()],
            log: vec![key(2).public_key()],
        };
        let verdict = check_logged(
            Ok::<_, String>(&document),
            &strangers,
            "linux-amd64",
            SHA,
            "1.3.0",
        )
        .unwrap_err();
        assert!(verdict.reason.unwrap().contains("statement key"));
    }

    #[test]
    fn ag_28_any_held_key_requires_the_log_and_none_updates_on_the_signature_alone() {
        assert!(!LogKeys::default().required());
        let only_log = LogKeys {
            statement: Vec::new(),
            log: vec![key(2).public_key()],
        };
        assert!(only_log.required());
        // held keys come from the files' text, without repeats; what is not a key is skipped
        let text = format!(
            "{}\nnot a key\n{}\n",
            key(1).public_key().to_base64(),
            key(1).public_key().to_base64()
        );
        let held = LogKeys::of(Some(&text), None);
        assert!(held.statement.contains(&key(1).public_key()));
        assert_eq!(
            held.statement
                .iter()
                .filter(|k| **k == key(1).public_key())
                .count(),
            1
        );
    }

    #[test]
    fn ag_28_keys_are_appended_never_removed() {
        let first = key(1).public_key();
        let second = key(2).public_key();
        let text = format!("# held\n{}\n", first.to_base64());
        assert_eq!(keys_to_hold(&text, &[first]), None);
        let written = keys_to_hold(&text, &[first, second]).unwrap();
        assert!(written.starts_with(&text), "nothing held is removed");
        assert!(written.ends_with(&format!("{}\n", second.to_base64())));
    }

    #[test]
    fn ag_31_unlogged_is_reported_only_after_fifteen_minutes() {
        assert_eq!(UNLOGGED_GRACE, Duration::from_secs(900));
        assert!(!report_unlogged(Duration::from_secs(899), UNLOGGED_GRACE));
        assert!(report_unlogged(Duration::from_secs(900), UNLOGGED_GRACE));
    }
}
