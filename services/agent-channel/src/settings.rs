//! The agent channel's section of the configuration (`[agent_channel]`,
//! `CAPSTAN__AGENT_CHANNEL__*`): its request meters (PROTOCOL.md "Limits").

use capstan_settings::{all_within, Problem, Section};
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentChannelSettings {
    /// Agent requests a minute that prove no node (unsigned, or failing their signature),
    /// counted per source network: an IPv4 address, an IPv6 /64.
    pub network_requests_per_minute: u32,
    /// Requests a minute whose signature proves a node, counted per node: every one, successful
    /// claims and replays included.
    pub node_requests_per_minute: u32,
}

impl Default for AgentChannelSettings {
    fn default() -> AgentChannelSettings {
        AgentChannelSettings {
            network_requests_per_minute: 120,
            node_requests_per_minute: 600,
        }
    }
}

impl Section for AgentChannelSettings {
    const KEY: &'static str = "agent_channel";

    fn validate(&self) -> Vec<Problem> {
        all_within(&[
            (
                "agent_channel.network_requests_per_minute",
                u64::from(self.network_requests_per_minute),
                1,
                1_000_000,
            ),
            (
                "agent_channel.node_requests_per_minute",
                u64::from(self.node_requests_per_minute),
                1,
                1_000_000,
            ),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(pairs: &[(&str, &str)]) -> Result<AgentChannelSettings, String> {
        let environment = pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()));
        capstan_settings::load_from::<AgentChannelSettings>(None, environment)
            .map(|(_, own)| own)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn with_nothing_set_the_meters_are_protocol_mds() {
        let settings = load(&[]).unwrap();
        assert_eq!(
            (
                settings.network_requests_per_minute,
                settings.node_requests_per_minute
            ),
            (120, 600),
            "PROTOCOL.md's defaults"
        );
    }

    #[test]
    fn a_meter_out_of_bounds_is_refused_by_name() {
        let error = load(&[("CAPSTAN__AGENT_CHANNEL__NODE_REQUESTS_PER_MINUTE", "0")]).unwrap_err();
        assert!(
            error.contains("agent_channel.node_requests_per_minute"),
            "{error}"
        );
        let error = load(&[
            ("CAPSTAN__AGENT_CHANNEL__NODE_REQUESTS_PER_MINUTE", "0"),
            (
                "CAPSTAN__AGENT_CHANNEL__NETWORK_REQUESTS_PER_MINUTE",
                "2000000",
            ),
        ])
        .unwrap_err();
        assert!(
            error.contains("agent_channel.node_requests_per_minute"),
            "{error}"
        );
        assert!(
            error.contains("agent_channel.network_requests_per_minute"),
            "{error}"
        );
    }
}
