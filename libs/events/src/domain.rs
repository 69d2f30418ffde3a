//! The domains of the plane: one per service, each owning a schema, an event stream, a command
//! stream and an rpc namespace.

use serde::{Deserialize, Serialize};
use std::{fmt, str::FromStr};

use crate::words::Word;

/// The root every Capstan subject hangs from.
pub const SUBJECT_ROOT: &str = "capstan";

/// A service's domain. Its `as_str` is the schema name, the subject segment and the rpc queue
/// group; the stream names are its upper-case form.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
    strum::IntoStaticStr,
    strum::AsRefStr,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Domain {
    Gateway,
    AgentChannel,
    Incidents,
    Monitor,
    Backups,
    Rollouts,
    Provisioning,
    Dns,
    Billing,
}

impl Domain {
    /// Every domain, in the order the all-in-one binary starts them (the gateway last, so it
    /// answers `/healthz` only when the others can be asked).
    pub const ALL: [Domain; 9] = [
        Domain::AgentChannel,
        Domain::Incidents,
        Domain::Monitor,
        Domain::Backups,
        Domain::Rollouts,
        Domain::Provisioning,
        Domain::Dns,
        Domain::Billing,
        Domain::Gateway,
    ];

    /// The name a person types: `agent-channel` (the crate, binary and CLI word).
    pub fn service_name(self) -> String {
        self.as_str().replace('_', "-")
    }

    /// `CAPSTAN_EVENTS_AGENT_CHANNEL`: file storage, limits retention.
    pub fn events_stream(self) -> String {
        format!("CAPSTAN_EVENTS_{}", self.as_str().to_ascii_uppercase())
    }

    /// `CAPSTAN_CMD_AGENT_CHANNEL`: work-queue retention.
    pub fn commands_stream(self) -> String {
        format!("CAPSTAN_CMD_{}", self.as_str().to_ascii_uppercase())
    }

    /// `capstan.events.agent_channel.>`
    pub fn events_subjects(self) -> String {
        format!("{}.events.{}.>", SUBJECT_ROOT, self.as_str())
    }

    /// `capstan.cmd.agent_channel.>`
    pub fn commands_subjects(self) -> String {
        format!("{}.cmd.{}.>", SUBJECT_ROOT, self.as_str())
    }

    /// `capstan.cmd.agent_channel.*.monitor`: the commands of this domain `sender` may publish,
    /// each on a subject naming it (`crate::command_subject_from`), never another's.
    pub fn commands_subjects_from(self, sender: Domain) -> String {
        format!(
            "{}.cmd.{}.*.{}",
            SUBJECT_ROOT,
            self.as_str(),
            sender.as_str()
        )
    }

    /// `capstan/agent-channel`: the CloudEvents `source` of what this service emits.
    pub fn source(self) -> String {
        format!("capstan/{}", self.service_name())
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of the plane's domains.
#[derive(Debug, thiserror::Error)]
#[error("unknown service {0:?}: expected one of gateway, agent-channel, incidents, monitor, backups, rollouts, provisioning, dns, billing")]
pub struct UnknownDomain(pub String);

impl FromStr for Domain {
    type Err = UnknownDomain;

    /// Accepts both `agent-channel` and `agent_channel`.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        let wanted = name.replace('-', "_");
        Domain::ALL
            .into_iter()
            .find(|domain| domain.as_str() == wanted)
            .ok_or_else(|| UnknownDomain(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_domain_is_named_the_same_in_every_place_it_appears() {
        let domain = Domain::AgentChannel;
        assert_eq!(domain.service_name(), "agent-channel");
        assert_eq!(domain.events_stream(), "CAPSTAN_EVENTS_AGENT_CHANNEL");
        assert_eq!(domain.commands_stream(), "CAPSTAN_CMD_AGENT_CHANNEL");
        assert_eq!(domain.events_subjects(), "capstan.events.agent_channel.>");
        assert_eq!(domain.commands_subjects(), "capstan.cmd.agent_channel.>");
        assert_eq!(
            domain.commands_subjects_from(Domain::Backups),
            "capstan.cmd.agent_channel.*.backups"
        );
        assert_eq!(domain.source(), "capstan/agent-channel");
    }

    #[test]
    fn every_domain_parses_from_its_service_name_and_its_schema_name() {
        for domain in Domain::ALL {
            assert_eq!(domain.service_name().parse::<Domain>().unwrap(), domain);
            assert_eq!(domain.as_str().parse::<Domain>().unwrap(), domain);
        }
        assert!("agents".parse::<Domain>().is_err());
    }
}
