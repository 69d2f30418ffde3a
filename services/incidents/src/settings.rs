//! The incidents service's section of the configuration (`[incidents]`,
//! `CAPSTAN__INCIDENTS__*`): its pass, its plane detector, and where signals go. The plane's
//! name its mail and webhooks carry is the gateway's key (`gateway.plane_name`), read beside it
//! as [`capstan_settings::PlaneName`].

use capstan_settings::{all_within, read_secret, Problem, Section};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use std::{path::PathBuf, time::Duration};

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IncidentsSettings {
    /// Seconds between two reconciler passes (one replica per pass).
    pub pass_secs: u64,
    /// A paired node whose agent has not checked in for this long opens `plane:agent_silent`;
    /// at least 60 (twice the agent channel's heartbeat resolution).
    pub agent_silent_secs: u64,
    /// `smtp://host:port` or `smtps://user:pass@host:465` (STARTTLS when offered on smtp://);
    /// mail is not sent when unset. A secret: it may carry a password. `SMTP_URL_FILE` reads it
    /// from a file.
    pub smtp_url: Option<SecretString>,
    pub smtp_url_file: Option<PathBuf>,
    /// The sender of the plane's mail.
    pub mail_from: String,
    /// The older, webhooks-only form of `outbound.allow_private`, still read: either set to
    /// true lets webhooks reach non-public addresses and plain `http://`.
    pub webhook_allow_private: bool,
    /// Seconds before a failed delivery's first retry; each further failure doubles it.
    pub retry_first_secs: u64,
    /// Milliseconds between two looks for deliveries that are due.
    pub deliver_interval_ms: u64,
}

impl Default for IncidentsSettings {
    fn default() -> IncidentsSettings {
        IncidentsSettings {
            pass_secs: 60,
            agent_silent_secs: 600,
            smtp_url: None,
            smtp_url_file: None,
            mail_from: "capstan@localhost".into(),
            webhook_allow_private: false,
            retry_first_secs: 10,
            deliver_interval_ms: 1000,
        }
    }
}

impl IncidentsSettings {
    pub fn pass_interval(&self) -> Duration {
        Duration::from_secs(self.pass_secs)
    }
    pub fn deliver_interval(&self) -> Duration {
        Duration::from_millis(self.deliver_interval_ms)
    }
    /// The SMTP URL, for the one place that connects.
    pub fn smtp_url(&self) -> Option<&str> {
        self.smtp_url.as_ref().map(|url| url.expose_secret())
    }
}

impl Section for IncidentsSettings {
    const KEY: &'static str = "incidents";

    fn resolve_files(&mut self) -> Vec<Problem> {
        let Some(path) = &self.smtp_url_file else {
            return Vec::new();
        };
        match read_secret("incidents.smtp_url_file", path) {
            Ok(url) => {
                self.smtp_url = Some(url);
                Vec::new()
            }
            Err(problem) => vec![problem],
        }
    }

    fn validate(&self) -> Vec<Problem> {
        let mut problems = all_within(&[
            ("incidents.pass_secs", self.pass_secs, 1, 3600),
            ("incidents.retry_first_secs", self.retry_first_secs, 1, 3600),
            (
                "incidents.deliver_interval_ms",
                self.deliver_interval_ms,
                10,
                60_000,
            ),
        ]);
        if !(60..=604_800).contains(&self.agent_silent_secs) {
            problems.push(Problem::new(
                "incidents.agent_silent_secs",
                "must be from 60 (twice the agent channel's heartbeat resolution) to 604800 seconds",
            ));
        }
        if let Some(url) = self.smtp_url() {
            if !(url.starts_with("smtp://") || url.starts_with("smtps://")) {
                problems.push(Problem::new(
                    "incidents.smtp_url",
                    "must start with smtp:// or smtps://",
                ));
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_settings::PlaneName;

    fn load(pairs: &[(&str, &str)]) -> Result<(IncidentsSettings, PlaneName), String> {
        let environment = pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()));
        capstan_settings::load_from::<(IncidentsSettings, PlaneName)>(None, environment)
            .map(|(_, own)| own)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn with_nothing_set_mail_is_off_and_webhooks_keep_to_public_addresses() {
        let (incidents, plane_name) = load(&[]).unwrap();
        assert!(!incidents.webhook_allow_private);
        assert_eq!(incidents.smtp_url(), None);
        assert_eq!(incidents.mail_from, "capstan@localhost");
        assert_eq!(incidents.pass_interval(), Duration::from_secs(60));
        assert_eq!(incidents.agent_silent_secs, 600);
        assert_eq!(plane_name.text(), "Capstan");
    }

    #[test]
    fn the_smtp_url_can_come_from_a_file_and_never_shows_in_debug_output() {
        let dir = std::env::temp_dir().join(format!("capstan-incidents-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("smtp");
        std::fs::write(&path, "smtps://mail:hunter2@mail.example:465\n").unwrap();
        let (incidents, _) =
            load(&[("CAPSTAN__INCIDENTS__SMTP_URL_FILE", path.to_str().unwrap())]).unwrap();
        assert_eq!(
            incidents.smtp_url(),
            Some("smtps://mail:hunter2@mail.example:465")
        );
        assert!(!format!("{incidents:?}").contains("hunter2"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn every_bad_incidents_key_is_named_at_once() {
        let error = load(&[
            ("CAPSTAN__INCIDENTS__AGENT_SILENT_SECS", "30"),
            ("CAPSTAN__INCIDENTS__SMTP_URL", "http://mail"),
            ("CAPSTAN__INCIDENTS__PASS_SECS", "0"),
            ("CAPSTAN__GATEWAY__PLANE_NAME", " "),
        ])
        .unwrap_err();
        for named in [
            "incidents.agent_silent_secs",
            "incidents.smtp_url",
            "incidents.pass_secs",
            "gateway.plane_name",
        ] {
            assert!(error.contains(named), "{error}");
        }
    }
}
