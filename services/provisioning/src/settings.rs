//! The provisioning service's section of the configuration (`[provisioning]`,
//! `CAPSTAN__PROVISIONING__*`): the key its accounts' tokens are sealed with, each provider's
//! base URL (tests point them at the stand-ins), the provider calls' bounds, auto-approval
//! (AC-08) and the SSH login user of the bootstrap.

use std::path::{Path, PathBuf};
use std::time::Duration;

use capstan_seal::{parse_seal_key, OwnSealKey};
use capstan_settings::{all_within, read_secret, Problem, Section};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use crate::drivers::api::Limits;
use crate::drivers::{hetzner, linode};

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProvisioningSettings {
    /// 32 random bytes as 64 hex digits (`openssl rand -hex 32`), sealing the accounts' API
    /// tokens at rest. A secret; `SEAL_KEY_FILE` reads it from a file. Without it no account
    /// can be added or used (the service says so).
    pub seal_key: Option<SecretString>,
    pub seal_key_file: Option<PathBuf>,
    /// Where `capstan all` makes and keeps its seal key (`provisioning-seal.key`) when neither
    /// `seal_key` nor `seal_key_file` is set ([`OwnSealKey::generated_seal_key_file`]). Unset:
    /// beside the NATS password file when one is set, else [`capstan_seal::DEFAULT_STATE_DIR`].
    pub seal_key_dir: Option<PathBuf>,
    /// Linode API v4's base URL.
    pub linode_base_url: String,
    /// Hetzner Cloud's base URL.
    pub hetzner_base_url: String,
    /// Seconds one provider call (request and answer) may take (1..=300).
    pub call_timeout_secs: u32,
    /// Tries of one provider call, the first included (1..=10).
    pub call_attempts: u32,
    /// Whether provisioned machines' joins are approved when all of AC-08's five hold
    /// (`server_manager_auto_approve_joins`); off leaves every join to an operator.
    pub auto_approve: bool,
    /// The user the bootstrap logs in as over SSH.
    pub ssh_user: String,
    /// The hourly test-cloud cleanup (PV-55), off by default: deletes old servers and
    /// unattached volumes only in test-flagged accounts whose company name is exactly the
    /// disposable marker. Turning it off clears `plane:test_cloud_cleanup`.
    pub test_cloud_cleanup: bool,
    /// Servers and volumes older than this are deleted by the cleanup
    /// (`server_manager_test_cloud_max_age_hours`, 1..=8760).
    pub test_cloud_max_age_hours: u32,
    /// The port the bootstrap reaches a new machine's sshd at.
    pub ssh_port: u16,
    /// The URL a new machine's agent asks to join at (the gateway's, as the machine reaches
    /// it; `--management-node`, PV-09). Without it nothing is provisioned (the service says so).
    pub plane_url: Option<String>,
    /// The agent binary the bootstrap installs; absent, `capstan-agent` beside this program.
    pub agent_binary: Option<PathBuf>,
    /// Seconds an instance may take to report running before the provision fails (1..=3600).
    pub boot_timeout_secs: u32,
    /// Milliseconds between looks at a booting instance (50..=60000).
    pub boot_poll_millis: u32,
    /// Seconds one SSH connection may take to open and log in (1..=300).
    pub ssh_connect_timeout_secs: u32,
    /// Seconds the whole install session may take (10..=7200).
    pub install_timeout_secs: u32,
    /// Provisions run at once by one replica (1..=500).
    pub concurrency: u32,
    /// The name of the plane's own node (the machine the plane runs on, enrolled like any
    /// other): the alarms of this service about the plane itself (AC-11's second join, PV-55's
    /// cleanup refusals) are raised on it; the transfer watch raises on the instance's own node.
    /// Unset, or naming no node this service has heard of: they are recorded and logged only
    /// (incidents keeps incidents only on nodes it knows).
    pub plane_node: Option<String>,
}

impl Default for ProvisioningSettings {
    fn default() -> ProvisioningSettings {
        ProvisioningSettings {
            seal_key: None,
            seal_key_file: None,
            seal_key_dir: None,
            linode_base_url: linode::BASE_URL.to_string(),
            hetzner_base_url: hetzner::BASE_URL.to_string(),
            call_timeout_secs: 30,
            call_attempts: 5,
            auto_approve: true,
            ssh_user: "root".to_string(),
            test_cloud_cleanup: false,
            test_cloud_max_age_hours: crate::domain::cleanup::DEFAULT_MAX_AGE_HOURS,
            ssh_port: 22,
            plane_url: None,
            agent_binary: None,
            boot_timeout_secs: 600,
            boot_poll_millis: 5_000,
            ssh_connect_timeout_secs: 30,
            install_timeout_secs: 1_800,
            concurrency: 64,
            plane_node: None,
        }
    }
}

impl ProvisioningSettings {
    /// The seal key's 32 bytes, when one is set (validated at load).
    pub fn seal_key(&self) -> Option<[u8; 32]> {
        self.seal_key
            .as_ref()
            .and_then(|key| parse_seal_key(key.expose_secret()))
    }

    /// The agent binary the bootstrap uploads.
    pub fn agent_binary(&self) -> PathBuf {
        self.agent_binary.clone().unwrap_or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().map(|dir| dir.join("capstan-agent")))
                .unwrap_or_else(|| PathBuf::from("capstan-agent"))
        })
    }

    /// The provider calls' bounds.
    pub fn limits(&self) -> Limits {
        Limits {
            call_timeout: Duration::from_secs(u64::from(self.call_timeout_secs)),
            attempts: self.call_attempts,
            ..Limits::default()
        }
    }
}

fn base_url_problem(key: &str, value: &str) -> Option<Problem> {
    match url::Url::parse(value) {
        Ok(url) if matches!(url.scheme(), "https" | "http") && url.host().is_some() => None,
        _ => Some(Problem::new(key, "must be an http(s) URL")),
    }
}

/// `capstan all` makes `provisioning-seal.key` when no key is set (issue 29), as it does
/// backups'.
impl OwnSealKey for ProvisioningSettings {
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

impl Section for ProvisioningSettings {
    const KEY: &'static str = "provisioning";

    fn resolve_files(&mut self) -> Vec<Problem> {
        let Some(path) = &self.seal_key_file else {
            return Vec::new();
        };
        match read_secret("provisioning.seal_key_file", path) {
            Ok(key) => {
                self.seal_key = Some(key);
                Vec::new()
            }
            Err(problem) => vec![problem],
        }
    }

    fn validate(&self) -> Vec<Problem> {
        let mut problems = all_within(&[
            (
                "provisioning.call_timeout_secs",
                self.call_timeout_secs.into(),
                1,
                300,
            ),
            (
                "provisioning.call_attempts",
                self.call_attempts.into(),
                1,
                10,
            ),
            (
                "provisioning.test_cloud_max_age_hours",
                self.test_cloud_max_age_hours.into(),
                1,
                8760,
            ),
            (
                "provisioning.boot_timeout_secs",
                self.boot_timeout_secs.into(),
                1,
                3_600,
            ),
            (
                "provisioning.boot_poll_millis",
                self.boot_poll_millis.into(),
                50,
                60_000,
            ),
            (
                "provisioning.ssh_connect_timeout_secs",
                self.ssh_connect_timeout_secs.into(),
                1,
                300,
            ),
            (
                "provisioning.install_timeout_secs",
                self.install_timeout_secs.into(),
                10,
                7_200,
            ),
            ("provisioning.concurrency", self.concurrency.into(), 1, 500),
        ]);
        if let Some(url) = &self.plane_url {
            problems.extend(base_url_problem("provisioning.plane_url", url));
        }
        if self
            .plane_node
            .as_deref()
            .is_some_and(|name| name.trim().is_empty())
        {
            problems.push(Problem::new(
                "provisioning.plane_node",
                "must name a node (or be left unset)",
            ));
        }
        if self.ssh_port == 0 {
            problems.push(Problem::new(
                "provisioning.ssh_port",
                "must be a port (1..=65535)",
            ));
        }
        problems.extend(base_url_problem(
            "provisioning.linode_base_url",
            &self.linode_base_url,
        ));
        problems.extend(base_url_problem(
            "provisioning.hetzner_base_url",
            &self.hetzner_base_url,
        ));
        let user = self.ssh_user.trim();
        if user.is_empty()
            || !user
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        {
            problems.push(Problem::new(
                "provisioning.ssh_user",
                "must be a login name (letters, digits, '_', '-', '.')",
            ));
        }
        if let Some(key) = &self.seal_key {
            if parse_seal_key(key.expose_secret()).is_none() {
                problems.push(Problem::new(
                    "provisioning.seal_key",
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

    fn load(pairs: &[(&str, &str)]) -> Result<ProvisioningSettings, String> {
        let environment = pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()));
        capstan_settings::load_from::<ProvisioningSettings>(None, environment)
            .map(|(_, own)| own)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn with_nothing_set_the_published_apis_root_and_auto_approval_are_used() {
        let own = load(&[]).unwrap();
        assert_eq!(own.linode_base_url, "https://api.linode.com/v4");
        assert_eq!(own.hetzner_base_url, "https://api.hetzner.cloud/v1");
        assert_eq!(own.ssh_user, "root");
        assert!(own.auto_approve);
        assert!(
            !own.test_cloud_cleanup,
            "PV-55: the cleanup is off by default"
        );
        assert_eq!(own.test_cloud_max_age_hours, 24);
        assert_eq!(own.plane_node, None);
        assert!(own.seal_key().is_none());
        assert_eq!(own.limits().call_timeout, Duration::from_secs(30));
    }

    #[test]
    fn the_seal_key_is_read_from_its_file_and_never_shown() {
        let dir = std::env::temp_dir().join(format!("capstan-prov-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("seal.key");
        std::fs::write(&file, format!("{}\n", "ab".repeat(32))).unwrap();
        let own = load(&[(
            "CAPSTAN__PROVISIONING__SEAL_KEY_FILE",
            file.to_str().unwrap(),
        )])
        .unwrap();
        assert_eq!(own.seal_key(), Some([0xab; 32]));
        assert!(!format!("{own:?}").contains(&"ab".repeat(32)));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn capstan_alls_own_seal_key_is_provisioning_seal_key_in_its_dir_unless_a_key_is_set() {
        let loaded = |pairs: &[(&str, &str)]| {
            let environment = pairs
                .iter()
                .map(|(key, value)| (key.to_string(), value.to_string()));
            capstan_settings::load_from::<ProvisioningSettings>(None, environment).unwrap()
        };
        let (settings, none) = loaded(&[]);
        assert_eq!(
            none.generated_seal_key_file(&settings.nats),
            Some(PathBuf::from("/var/lib/capstan/provisioning-seal.key"))
        );
        let (settings, named) = loaded(&[("CAPSTAN__PROVISIONING__SEAL_KEY_DIR", "/srv/keys")]);
        assert_eq!(
            named.generated_seal_key_file(&settings.nats),
            Some(PathBuf::from("/srv/keys/provisioning-seal.key"))
        );
        let (settings, set) = loaded(&[
            ("CAPSTAN__PROVISIONING__SEAL_KEY_DIR", "/srv/keys"),
            ("CAPSTAN__PROVISIONING__SEAL_KEY", &"a".repeat(64)),
        ]);
        assert_eq!(set.generated_seal_key_file(&settings.nats), None);
        let mut taken = none.clone();
        let error = taken
            .use_generated_key(PathBuf::from("/k"), "not a key")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("provisioning.seal_key_dir") && error.contains("/k"),
            "{error}"
        );
        assert!(taken.seal_key().is_none());
        taken
            .use_generated_key(PathBuf::from("/k"), &format!("{}\n", "0f".repeat(32)))
            .unwrap();
        assert_eq!(taken.seal_key(), Some([0x0f; 32]));
        assert_eq!(taken.seal_key_file, Some(PathBuf::from("/k")));
    }

    #[test]
    fn every_bad_provisioning_key_is_named_at_once() {
        let error = load(&[
            ("CAPSTAN__PROVISIONING__SEAL_KEY", "short"),
            ("CAPSTAN__PROVISIONING__LINODE_BASE_URL", "not a url"),
            ("CAPSTAN__PROVISIONING__CALL_ATTEMPTS", "0"),
            ("CAPSTAN__PROVISIONING__SSH_USER", "root; rm"),
        ])
        .unwrap_err();
        for named in [
            "provisioning.seal_key",
            "provisioning.linode_base_url",
            "provisioning.call_attempts",
            "provisioning.ssh_user",
        ] {
            assert!(error.contains(named), "{error}");
        }
        assert!(
            !error.contains("short"),
            "the key's value is never echoed: {error}"
        );
    }
}
