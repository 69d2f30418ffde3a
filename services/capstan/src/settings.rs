//! What `capstan all` reads: the shared sections (`capstan_settings`) and every service's own,
//! each defined in its service's crate. One start names every problem of every section.

use capstan_agent_channel::settings::AgentChannelSettings;
use capstan_backups::settings::BackupsSettings;
use capstan_gateway::settings::GatewaySettings;
use capstan_incidents::settings::IncidentsSettings;
use capstan_monitor::settings::MonitorSettings;
use capstan_provisioning::settings::ProvisioningSettings;
use capstan_settings::{Loader, Sections};

/// Every service's section, the one list of them: a service alone accepts any section named
/// after a domain and leaves it to its owner, and `capstan all`, which reads them all, refuses a
/// section that is not here. The services without one (rollouts, dns, billing)
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
        loader.refuse_unread_sections();
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
    use capstan_settings::{service_sections, Settings, SettingsError, SHARED_SECTIONS};

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

    /// A service alone accepts the sections named after a domain and leaves them to their
    /// owners; each section `capstan all` reads must be one of those (or shared), or a service
    /// alone would refuse a good section.
    #[test]
    fn every_section_capstan_all_reads_is_shared_or_named_after_its_domain() {
        let mut loader = Loader::new(None, Vec::new()).unwrap();
        let _ = <(Settings, AllSections)>::read(&mut loader);
        let read: Vec<&str> = loader.sections_read().collect();
        let known: Vec<&str> = SHARED_SECTIONS
            .iter()
            .copied()
            .chain(service_sections())
            .collect();
        for section in &read {
            assert!(known.contains(section), "{section} is read by capstan all");
        }
        for section in SHARED_SECTIONS {
            assert!(read.contains(section), "{section}");
        }
        assert_eq!(read.len(), SHARED_SECTIONS.len() + 6);
    }

    /// `capstan all` reads every section there is, so a domain's name without a section
    /// (rollouts has none) is refused there; a service alone leaves it to its owner.
    #[test]
    fn capstan_all_refuses_a_section_no_service_reads() {
        let error = load(&[("CAPSTAN__ROLLOUTS__TICK_MS", "5")]).unwrap_err();
        let SettingsError::Problems(problems) = &error else {
            panic!("{error}");
        };
        assert_eq!(problems.len(), 1, "{error}");
        assert_eq!(problems[0].key, "rollouts");
        assert!(problems[0].reason.contains("not a section"), "{error}");
        let alone = capstan_settings::load_from::<capstan_monitor::settings::MonitorSettings>(
            None,
            [("CAPSTAN__ROLLOUTS__TICK_MS".to_string(), "5".to_string())],
        );
        assert!(alone.is_ok());
        let error = load(&[("CAPSTAN__MONITR__TICK_MS", "5")]).unwrap_err();
        assert!(error.to_string().contains("monitr"), "{error}");
    }
}
