//! The backups service's section of the configuration (`[backups]`, `CAPSTAN__BACKUPS__*`): the
//! key its targets' credentials are sealed with at rest, and its schedule.

use capstan_seal::{parse_seal_key, OwnSealKey};
use capstan_settings::{all_within, read_secret, Problem, Section};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use std::{
    path::{Path, PathBuf},
    time::Duration,
};

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackupsSettings {
    /// 32 random bytes as 64 hex digits (`openssl rand -hex 32`), sealing the targets' storage
    /// credentials at rest. A secret; `SEAL_KEY_FILE` reads it from a file. Without it no
    /// target can be added or used (the service says so), and everything else still runs.
    pub seal_key: Option<SecretString>,
    pub seal_key_file: Option<PathBuf>,
    /// Where `capstan all` makes and keeps its seal key when neither `seal_key` nor
    /// `seal_key_file` is set (issue 27; [`OwnSealKey::generated_seal_key_file`]). Unset:
    /// beside the NATS password file when one is set, else [`capstan_seal::DEFAULT_STATE_DIR`].
    pub seal_key_dir: Option<PathBuf>,
    /// How long a presigned URL the broker hands a node stays valid (60..=3600 s).
    pub url_ttl_secs: u32,
    /// How often the schedule looks for due backups and verifies (1..=3600 s; BK-05).
    pub schedule_secs: u32,
}

impl Default for BackupsSettings {
    fn default() -> BackupsSettings {
        BackupsSettings {
            seal_key: None,
            seal_key_file: None,
            seal_key_dir: None,
            url_ttl_secs: 600,
            schedule_secs: 60,
        }
    }
}

impl BackupsSettings {
    /// The seal key's 32 bytes, when one is set (validated at load).
    pub fn seal_key(&self) -> Option<[u8; 32]> {
        self.seal_key
            .as_ref()
            .and_then(|key| parse_seal_key(key.expose_secret()))
    }
    pub fn url_ttl(&self) -> Duration {
        Duration::from_secs(u64::from(self.url_ttl_secs))
    }
    pub fn schedule_every(&self) -> Duration {
        Duration::from_secs(u64::from(self.schedule_secs))
    }
}

/// `capstan all` makes `backups-seal.key` when no key is set (issue 27).
impl OwnSealKey for BackupsSettings {
    fn seal_key_is_set(&self) -> bool {
        self.seal_key.is_some() || self.seal_key_file.is_some()
    }
    fn seal_key_dir(&self) -> Option<&Path> {
        self.seal_key_dir.as_deref()
    }
    fn take_seal_key(&mut self, key: SecretString, file: PathBuf) {
        self.seal_key = Some(key);
        self.seal_key_file = Some(file);
    }
}

impl Section for BackupsSettings {
    const KEY: &'static str = "backups";

    fn resolve_files(&mut self) -> Vec<Problem> {
        let Some(path) = &self.seal_key_file else {
            return Vec::new();
        };
        match read_secret("backups.seal_key_file", path) {
            Ok(key) => {
                self.seal_key = Some(key);
                Vec::new()
            }
            Err(problem) => vec![problem],
        }
    }

    fn validate(&self) -> Vec<Problem> {
        let mut problems = all_within(&[
            ("backups.url_ttl_secs", self.url_ttl_secs.into(), 60, 3600),
            ("backups.schedule_secs", self.schedule_secs.into(), 1, 3600),
        ]);
        if let Some(key) = &self.seal_key {
            if parse_seal_key(key.expose_secret()).is_none() {
                problems.push(Problem::new(
                    "backups.seal_key",
                    "must be 64 hex digits (32 random bytes: openssl rand -hex 32)",
                ));
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_settings::Settings;

    fn load(pairs: &[(&str, &str)]) -> Result<(Settings, BackupsSettings), String> {
        let environment = pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()));
        capstan_settings::load_from::<BackupsSettings>(None, environment)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn capstan_alls_own_seal_key_sits_in_its_dir_else_beside_the_nats_password_else_in_var_lib() {
        let (settings, none) = load(&[]).unwrap();
        assert_eq!(
            none.generated_seal_key_file(&settings.nats),
            Some(PathBuf::from("/var/lib/capstan/backups-seal.key"))
        );
        let dir = std::env::temp_dir().join(format!("capstan-backups-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let password = dir.join("nats-all.password");
        std::fs::write(&password, "secret\n").unwrap();
        let (beside_settings, beside) = load(&[
            ("CAPSTAN__NATS__USER", "all"),
            ("CAPSTAN__NATS__PASSWORD_FILE", password.to_str().unwrap()),
        ])
        .unwrap();
        assert_eq!(
            beside.generated_seal_key_file(&beside_settings.nats),
            Some(dir.join("backups-seal.key"))
        );
        std::fs::remove_dir_all(&dir).unwrap();
        let (_, named) = load(&[("CAPSTAN__BACKUPS__SEAL_KEY_DIR", "/srv/keys")]).unwrap();
        assert_eq!(
            named.generated_seal_key_file(&settings.nats),
            Some(PathBuf::from("/srv/keys/backups-seal.key"))
        );
        let (_, set) = load(&[("CAPSTAN__BACKUPS__SEAL_KEY", &"a".repeat(64))]).unwrap();
        assert_eq!(
            set.generated_seal_key_file(&settings.nats),
            None,
            "a key set is used as it is"
        );
        let mut taken = none.clone();
        let error = taken
            .use_generated_key(PathBuf::from("/k"), "not a key")
            .unwrap_err()
            .to_string();
        assert!(error.contains("/k") && error.contains("64 hex"), "{error}");
        assert!(taken.seal_key().is_none());
        taken
            .use_generated_key(PathBuf::from("/k"), &format!("{}\n", "0f".repeat(32)))
            .unwrap();
        assert_eq!(taken.seal_key(), Some([0x0f; 32]));
        assert_eq!(taken.seal_key_file, Some(PathBuf::from("/k")));
    }

    #[test]
    fn every_bad_backups_key_is_named_at_once_and_the_key_never_shown() {
        let error = load(&[
            ("CAPSTAN__BACKUPS__SEAL_KEY", "hunter2"),
            ("CAPSTAN__BACKUPS__URL_TTL_SECS", "10"),
            ("CAPSTAN__BACKUPS__SCHEDULE_SECS", "0"),
        ])
        .unwrap_err();
        for named in [
            "backups.seal_key",
            "backups.url_ttl_secs",
            "backups.schedule_secs",
        ] {
            assert!(error.contains(named), "{error}");
        }
        assert!(!error.contains("hunter2"), "{error}");
    }
}
