//! What `capstan all` reads: the shared sections (`capstan_settings`) and every service's own,
//! each defined in its service's crate. One start names every problem of every section.

use capstan_agent_channel::settings::AgentChannelSettings;
use capstan_backups::settings::BackupsSettings;
use capstan_gateway::settings::GatewaySettings;
use capstan_incidents::settings::IncidentsSettings;
use capstan_monitor::settings::MonitorSettings;
use capstan_provisioning::settings::ProvisioningSettings;
use capstan_settings::{Loader, Sections};

/// Every service's section; the services without one (rollouts, dns, billing)
/// read only the shared sections.
#[derive(Debug, Clone)]
pub struct AllSections {
    /// Its `plane_name` is also the name incidents' signals carry.
    pub gateway: GatewaySettings,
    pub agent_channel: AgentChannelSettings,
    pub incidents: IncidentsSettings,
    pub monitor: MonitorSettings,
    pub backups: BackupsSettings,
    pub provisioning: ProvisioningSettings,
}

impl Sections for AllSections {
    fn read(loader: &mut Loader) -> AllSections {
        AllSections {
            gateway: loader.section(),
            agent_channel: loader.section(),
            incidents: loader.section(),
            monitor: loader.section(),
            backups: loader.section(),
            provisioning: loader.section(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_settings::{Settings, SettingsError, SERVICE_SECTIONS, SHARED_SECTIONS};

    fn load(pairs: &[(&str, &str)]) -> Result<(Settings, AllSections), SettingsError> {
        let environment = pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()));
        capstan_settings::load_from::<AllSections>(None, environment)
    }

    #[test]
    fn with_nothing_set_every_section_takes_its_defaults() {
        let (settings, all) = load(&[]).unwrap();
        assert_eq!(settings.nats.url, "nats://127.0.0.1:4222");
        assert_eq!(all.gateway.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(all.agent_channel.node_requests_per_minute, 600);
        assert_eq!(all.incidents.pass_secs, 60);
        assert_eq!(all.monitor.tick_ms, 1000);
        assert_eq!(all.backups.schedule_secs, 60);
        assert_eq!(all.provisioning.ssh_user, "root");
    }

    // Issue 28: validate reports every problem at once, each naming its key, not the first.
    #[test]
    fn three_bad_keys_in_three_sections_are_all_named_at_once() {
        let error = load(&[
            ("CAPSTAN__MONITOR__TICK_MS", "1"),
            ("CAPSTAN__GATEWAY__SESSION_IDLE_MINUTES", "0"),
            ("CAPSTAN__BUS__MAX_DELIVER", "0"),
        ])
        .unwrap_err();
        let SettingsError::Problems(problems) = &error else {
            panic!("{error}");
        };
        let mut keys: Vec<&str> = problems
            .iter()
            .map(|problem| problem.key.as_str())
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "bus.max_deliver",
                "gateway.session_idle_minutes",
                "monitor.tick_ms"
            ]
        );
        let text = error.to_string();
        for variable in [
            "CAPSTAN__MONITOR__TICK_MS",
            "CAPSTAN__GATEWAY__SESSION_IDLE_MINUTES",
            "CAPSTAN__BUS__MAX_DELIVER",
        ] {
            assert!(text.contains(variable), "{text}");
        }
    }

    /// The loader accepts the service sections it is told of without reading them; that list
    /// must be exactly what `capstan all` reads, or a process would refuse a good section (or
    /// let a mistyped one through).
    #[test]
    fn the_loaders_list_of_service_sections_is_what_capstan_all_reads() {
        let mut loader = Loader::new(None, Vec::new()).unwrap();
        let _ = <(Settings, AllSections)>::read(&mut loader);
        let mut read: Vec<&str> = loader.sections_read().collect();
        let mut known: Vec<&str> = SHARED_SECTIONS
            .iter()
            .chain(SERVICE_SECTIONS)
            .copied()
            .collect();
        read.sort();
        known.sort();
        assert_eq!(read, known);
    }
}
