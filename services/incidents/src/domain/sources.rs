//! Sources (IN-11, IN-12, IN-13): who may say a condition holds on a node. `agent:<recipe>` is a
//! node's own agent (its cases, see `cases.rs`); `plane:<name>` is either this service's own
//! detector (`plane:agent_silent`, registered in a [`Registry`] and judging only from the facts
//! this service holds about the node, never probing) or a condition another service judged and
//! published (`capstan_events::conditions`: the monitor's `site_down`, backups'
//! `backup_failed`...), held in the `conditions` projection and passed in as reported. A new
//! producer's conditions need no change here. A node whose install state is not operational
//! opens nothing (IN-13).

use std::fmt;

use chrono::{DateTime, Duration, Utc};

use capstan_events::incidents::Severity;
use capstan_events::{catalog, conditions};

use super::{InvalidInput, NodeId};

/// The agent channel stamps a node's last check-in at most this often (its
/// `LAST_SEEN_RESOLUTION`): a check-in within this long after the last stamp may go unrecorded.
pub const HEARTBEAT_RESOLUTION: Duration = Duration::seconds(30);
/// `CAPSTAN__INCIDENTS__AGENT_SILENT_SECS` when not set.
pub const DEFAULT_AGENT_SILENT_SECS: u64 = 600;
/// The shortest silence that may be configured: twice the heartbeat's resolution, so an agent
/// that keeps claiming is never called silent.
pub const MIN_AGENT_SILENT_SECS: u64 = 2 * HEARTBEAT_RESOLUTION.num_seconds() as u64;

/// A recipe's name as the agent reports it (`^[a-z][a-z0-9_]{0,63}$`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecipeName(String);

impl RecipeName {
    pub fn parse(text: &str) -> Result<RecipeName, InvalidInput> {
        let mut chars = text.chars();
        let shaped = matches!(chars.next(), Some(first) if first.is_ascii_lowercase())
            && text.len() <= 64
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !shaped {
            return Err(InvalidInput::new(
                "source",
                "a recipe name is 1 to 64 lowercase letters, digits and underscores",
            ));
        }
        Ok(RecipeName(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The name of a `plane:<name>` source: this service's own detector `agent_silent`, or a
/// condition another service judges and publishes (`capstan_events::conditions`), such as
/// `site_down`. Incidents holds no list of them: a new producer's conditions need no change
/// here.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlaneName(String);

impl PlaneName {
    /// This service's own detector (`plane:agent_silent`).
    pub const AGENT_SILENT: &'static str = "agent_silent";

    pub fn agent_silent() -> PlaneName {
        PlaneName(PlaneName::AGENT_SILENT.to_string())
    }

    /// Any name shaped as a condition's (what a producer publishes, what a row holds).
    pub fn read(text: &str) -> Result<PlaneName, InvalidInput> {
        if !conditions::is_condition_name(text) {
            return Err(InvalidInput::new(
                "source",
                "a plane source's name is 1 to 64 lowercase letters, digits and underscores",
            ));
        }
        Ok(PlaneName(text.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Who says a condition holds: `agent:<recipe>` or `plane:<name>`. It is also an incident's
/// kind, which grouping compares.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SourceName {
    Agent(RecipeName),
    Plane(PlaneName),
}

impl SourceName {
    /// `plane:agent_silent`.
    pub fn agent_silent() -> SourceName {
        SourceName::Plane(PlaneName::agent_silent())
    }

    /// Reads `agent:<recipe>` or `plane:<name>` as a person asks for it: the plane's name must
    /// be this service's detector or a condition the contract declares; anything else is
    /// refused.
    pub fn parse(text: &str) -> Result<SourceName, InvalidInput> {
        let source = SourceName::read(text)?;
        if let SourceName::Plane(name) = &source {
            if name.as_str() != PlaneName::AGENT_SILENT
                && catalog::condition_kind(name.as_str()).is_none()
            {
                return Err(InvalidInput::new(
                    "source",
                    format!("no plane source is named {:?}", name.as_str()),
                ));
            }
        }
        Ok(source)
    }

    /// Reads `agent:<recipe>` or any well-shaped `plane:<name>` (a stored row, a condition
    /// heard from a producer newer than this list of declared ones).
    pub fn read(text: &str) -> Result<SourceName, InvalidInput> {
        if let Some(recipe) = text.strip_prefix("agent:") {
            return Ok(SourceName::Agent(RecipeName::parse(recipe)?));
        }
        if let Some(name) = text.strip_prefix("plane:") {
            return Ok(SourceName::Plane(PlaneName::read(name)?));
        }
        Err(InvalidInput::new(
            "source",
            "must be agent:<recipe> or plane:<name>",
        ))
    }

    /// The plane's own words for the condition (IN-10/IN-11's `IncidentTitles`); the source's
    /// detail is shown beneath it. Another service's condition brings its own title with it;
    /// this is the declared one, for a name the contract knows.
    pub fn title(&self) -> String {
        match self {
            SourceName::Agent(recipe) => match recipe.as_str() {
                "disk_headroom" => "The site's disk is running out of space".to_string(),
                "fail2ban" => "Fail2ban is not protecting the server".to_string(),
                "agent_supervision" => "Nothing would restart the agent if it stopped".to_string(),
                other => format!("The agent's {other} check failed and could not be repaired"),
            },
            SourceName::Plane(name) if name.as_str() == PlaneName::AGENT_SILENT => {
                "The agent has stopped checking in".to_string()
            }
            SourceName::Plane(name) => catalog::condition_kind(name.as_str()).map_or_else(
                || format!("The plane's {} condition holds", name.as_str()),
                |kind| kind.title.to_string(),
            ),
        }
    }
}

impl fmt::Display for SourceName {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceName::Agent(recipe) => write!(formatter, "agent:{}", recipe.as_str()),
            SourceName::Plane(name) => write!(formatter, "plane:{}", name.as_str()),
        }
    }
}

/// A node's install state (PV-01). Only a node with none is operational; any other state, or
/// one this service does not know, opens nothing (IN-13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallState {
    Operational,
    Installing,
    InstallFailed,
    Copy,
    Switching,
    Retired,
    Unknown,
}

impl InstallState {
    /// The state as the provisioning events spell it (`None`: installed and running).
    pub fn from_reported(state: Option<&str>) -> InstallState {
        match state {
            None => InstallState::Operational,
            Some("installing") => InstallState::Installing,
            Some("install_failed") => InstallState::InstallFailed,
            Some("copy") => InstallState::Copy,
            Some("switching") => InstallState::Switching,
            Some("retired") => InstallState::Retired,
            Some(_) => InstallState::Unknown,
        }
    }

    pub fn is_operational(self) -> bool {
        self == InstallState::Operational
    }
}

/// A node's Alerts setting (IN-15, `mgn_alerts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Alerts {
    /// Off for a box in the test cloud account, on for every other node.
    #[default]
    Automatic,
    On,
    Off,
}

impl Alerts {
    /// Whether this node's incidents tell anyone (`ManagedNode::sends_alerts()`).
    pub fn sends(self, in_test_account: bool) -> bool {
        match self {
            Alerts::Automatic => !in_test_account,
            Alerts::On => true,
            Alerts::Off => false,
        }
    }
}

/// What this service holds about a node, built from the agent channel's and the gateway's
/// events. Other services' conditions are not facts of the node: they arrive judged
/// ([`Condition`]s read from the `conditions` projection).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFacts {
    pub node_id: NodeId,
    /// When its agent was paired; `None` for a node without a paired agent.
    pub paired_at: Option<DateTime<Utc>>,
    /// The agent channel's last stamp of a check-in (at [`HEARTBEAT_RESOLUTION`]).
    pub last_checkin_at: Option<DateTime<Utc>>,
    /// How far the agent channel's reports of check-ins run (its clock at the latest one);
    /// `None` before any report. No agent is judged silent past it: a plane whose reports
    /// stopped coming calls no agent silent.
    pub checkins_as_of: Option<DateTime<Utc>>,
    pub install_state: InstallState,
    /// The recipes the node last reported, by name.
    pub recipes: Vec<String>,
    pub alerts: Alerts,
    pub in_test_account: bool,
    /// The Docker host's node, for a node that is one of its containers.
    pub docker_host: Option<NodeId>,
}

/// A condition a source says holds on a node now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub source: SourceName,
    pub severity: Severity,
    /// The plane's own words for it (the incident's title).
    pub title: String,
    /// What the source saw, in its words (shown beneath the plane's title).
    pub detail: String,
    /// When the source says it started.
    pub since: DateTime<Utc>,
}

/// One of this plane's detectors: judges a node from the facts held, never probing.
pub trait PlaneSource: Send + Sync {
    fn name(&self) -> PlaneName;
    /// The condition this source sees on `node` at `now`, if any.
    fn judge(&self, node: &NodeFacts, now: DateTime<Utc>) -> Option<Condition>;
}

/// `plane:agent_silent`: a paired node whose agent has not checked in for the configured
/// silence. Critical: nothing on the node can be seen or done while it is silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentSilent {
    silence: Duration,
}

impl AgentSilent {
    /// `CAPSTAN__INCIDENTS__AGENT_SILENT_SECS`, refused below [`MIN_AGENT_SILENT_SECS`].
    pub fn new(silence_secs: u64) -> Result<AgentSilent, InvalidInput> {
        if !(MIN_AGENT_SILENT_SECS..=7 * 24 * 3600).contains(&silence_secs) {
            return Err(InvalidInput::new(
                "agent_silent_secs",
                format!(
                    "must be from {MIN_AGENT_SILENT_SECS} (twice the agent channel's heartbeat resolution) to 604800 seconds"
                ),
            ));
        }
        Ok(AgentSilent {
            silence: Duration::seconds(silence_secs as i64),
        })
    }
}

impl PlaneSource for AgentSilent {
    fn name(&self) -> PlaneName {
        PlaneName::agent_silent()
    }

    /// The stamp is taken at most every [`HEARTBEAT_RESOLUTION`], so a check-in up to that long
    /// after it may be unrecorded: the agent is proven silent only once the stamp is older than
    /// the silence plus that resolution. An agent that keeps claiming (every 30 s at most) has
    /// a stamp at most 60 s old and is never called silent, even at the shortest silence.
    fn judge(&self, node: &NodeFacts, now: DateTime<Utc>) -> Option<Condition> {
        let paired_at = node.paired_at?;
        let now = node.checkins_as_of?.min(now);
        let heard_at = node
            .last_checkin_at
            .map_or(paired_at, |at| at.max(paired_at));
        let latest_possible_checkin = heard_at + HEARTBEAT_RESOLUTION;
        if now - latest_possible_checkin <= self.silence {
            return None;
        }
        let source = SourceName::agent_silent();
        Some(Condition {
            title: source.title(),
            source,
            severity: Severity::Critical,
            detail: format!(
                "Last check-in recorded at {}",
                heard_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
            since: latest_possible_checkin,
        })
    }
}

/// The plane's sources, each registered once.
#[derive(Default)]
pub struct Registry {
    sources: Vec<Box<dyn PlaneSource>>,
}

impl Registry {
    /// Adds `source`; a second source of the same name is refused.
    pub fn register(&mut self, source: Box<dyn PlaneSource>) -> Result<(), InvalidInput> {
        if self.sources.iter().any(|held| held.name() == source.name()) {
            return Err(InvalidInput::new(
                "source",
                format!("plane:{} is registered twice", source.name().as_str()),
            ));
        }
        self.sources.push(source);
        Ok(())
    }

    pub fn names(&self) -> Vec<SourceName> {
        self.sources
            .iter()
            .map(|source| SourceName::Plane(source.name()))
            .collect()
    }

    /// The conditions that hold on `node` at `now`: what every registered source sees, and
    /// what other services `reported` happening on it; none for a node that is not
    /// operational (IN-13).
    pub fn conditions(
        &self,
        node: &NodeFacts,
        reported: &[Condition],
        now: DateTime<Utc>,
    ) -> Vec<Condition> {
        if !node.install_state.is_operational() {
            return Vec::new();
        }
        self.sources
            .iter()
            .filter_map(|source| source.judge(node, now))
            .chain(reported.iter().cloned())
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::domain::record::tests::at;

    pub(crate) fn node(node_id: impl Into<NodeId>) -> NodeFacts {
        NodeFacts {
            node_id: node_id.into(),
            paired_at: Some(at(-600)),
            last_checkin_at: Some(at(0)),
            checkins_as_of: Some(at(0) + Duration::days(365)),
            install_state: InstallState::Operational,
            recipes: vec!["disk_headroom".into(), "fail2ban".into()],
            alerts: Alerts::Automatic,
            in_test_account: false,
            docker_host: None,
        }
    }

    fn seconds(count: i64) -> DateTime<Utc> {
        at(0) + Duration::seconds(count)
    }

    #[test]
    fn in_12_source_names_read_and_spell_back_and_anything_else_is_refused() {
        for text in [
            "agent:disk_headroom",
            "plane:agent_silent",
            "plane:agent_update_refused",
            "plane:unmanageable",
        ] {
            assert_eq!(SourceName::parse(text).unwrap().to_string(), text);
        }
        for bad in ["plane:nope", "agent:Disk", "agent:", "recipe:fail2ban", ""] {
            assert_eq!(SourceName::parse(bad).unwrap_err().field, "source", "{bad}");
        }
    }

    #[test]
    fn in_11_titles_are_the_planes_own_words_and_an_unknown_recipe_still_gets_one() {
        let disk = SourceName::parse("agent:disk_headroom").unwrap();
        assert_eq!(disk.title(), "The site's disk is running out of space");
        let other = SourceName::parse("agent:certificate_expiry").unwrap();
        assert!(other.title().contains("certificate_expiry"));
    }

    #[test]
    fn agent_silent_fires_for_a_paired_node_unheard_for_longer_than_the_silence_and_is_critical() {
        let source = AgentSilent::new(60).unwrap();
        let node = node(NodeId(1));
        // stamp at 0 s; a check-in may be unrecorded until 30 s; silent once 60 s past that
        assert_eq!(source.judge(&node, seconds(90)), None);
        let condition = source.judge(&node, seconds(91)).unwrap();
        assert_eq!(condition.severity, Severity::Critical);
        assert_eq!(condition.source.to_string(), "plane:agent_silent");
        assert_eq!(condition.since, seconds(30));
    }

    #[test]
    fn agent_silent_at_60_seconds_never_fires_for_an_agent_that_keeps_claiming_every_30_seconds() {
        let source = AgentSilent::new(60).unwrap();
        let mut node = node(NodeId(1));
        // the agent claims just under every 30 s (its longest long poll); the channel stamps a
        // claim only when the last stamp is at least 30 s old, so every other claim goes
        // unstamped; and a stamp reaches this service's projection through the bus, seconds late
        let bus_lag = Duration::seconds(10);
        let mut stamps = vec![at(0)];
        let mut claim = at(0);
        for _ in 0..200 {
            claim += Duration::milliseconds(29_900);
            if claim - *stamps.last().unwrap() >= HEARTBEAT_RESOLUTION {
                stamps.push(claim);
            }
            // judge at every second a pass could run before the next claim
            for step in 0..30 {
                let now = claim + Duration::seconds(step);
                node.last_checkin_at = stamps.iter().rev().copied().find(|s| *s + bus_lag <= now);
                assert_eq!(source.judge(&node, now), None, "now {now}");
            }
        }
    }

    #[test]
    fn agent_silent_counts_from_the_pairing_for_an_agent_never_heard_and_ignores_unpaired_nodes() {
        let source = AgentSilent::new(60).unwrap();
        let mut node = node(NodeId(1));
        node.last_checkin_at = None;
        node.paired_at = Some(at(0));
        assert_eq!(source.judge(&node, seconds(90)), None);
        assert!(source.judge(&node, seconds(91)).is_some());
        node.paired_at = None;
        assert_eq!(source.judge(&node, seconds(10_000)), None);
    }

    #[test]
    fn agent_silent_judges_no_agent_past_the_agent_channels_last_report_of_check_ins() {
        let source = AgentSilent::new(60).unwrap();
        let mut node = node(NodeId(1));
        // the reports stopped at 50 s (the agent channel is down): nobody is silent as of then
        node.checkins_as_of = Some(seconds(50));
        assert_eq!(source.judge(&node, seconds(10_000)), None);
        node.checkins_as_of = Some(seconds(91));
        assert!(source.judge(&node, seconds(10_000)).is_some());
        node.checkins_as_of = None;
        assert_eq!(source.judge(&node, seconds(10_000)), None, "no report yet");
    }

    #[test]
    fn agent_silent_refuses_a_silence_shorter_than_twice_the_heartbeat_resolution() {
        assert_eq!(MIN_AGENT_SILENT_SECS, 60);
        assert_eq!(AgentSilent::new(59).unwrap_err().field, "agent_silent_secs");
        assert!(AgentSilent::new(60).is_ok());
        assert!(AgentSilent::new(DEFAULT_AGENT_SILENT_SECS).is_ok());
    }

    #[test]
    fn in_13_a_node_in_a_non_operational_install_state_opens_nothing() {
        let mut registry = Registry::default();
        registry
            .register(Box::new(AgentSilent::new(60).unwrap()))
            .unwrap();
        let mut node = node(NodeId(1));
        let silent = at(60);
        assert_eq!(registry.conditions(&node, &[], silent).len(), 1);
        for state in [
            Some("installing"),
            Some("install_failed"),
            Some("copy"),
            Some("switching"),
            Some("retired"),
            Some("something_new"),
        ] {
            node.install_state = InstallState::from_reported(state);
            assert!(
                registry.conditions(&node, &[], silent).is_empty(),
                "{state:?}"
            );
        }
    }

    fn reported(name: &str) -> Condition {
        let source = SourceName::read(&format!("plane:{name}")).unwrap();
        Condition {
            title: source.title(),
            source,
            severity: Severity::Critical,
            detail: "HTTP 500".into(),
            since: at(-60),
        }
    }

    #[test]
    fn in_13_another_services_conditions_hold_on_an_operational_node_only() {
        let registry = Registry::default();
        let mut node = node(NodeId(1));
        let down = [reported("site_down")];
        let held = registry.conditions(&node, &down, at(0));
        assert_eq!(held, down.to_vec());
        assert_eq!(held[0].title, "The site is down");
        node.install_state = InstallState::Installing;
        assert!(registry.conditions(&node, &down, at(0)).is_empty());
    }

    #[test]
    fn in_12_a_new_producers_condition_is_read_without_a_change_here_but_not_asked_for_by_name() {
        let source = SourceName::read("plane:zone_expiring").unwrap();
        assert_eq!(source.to_string(), "plane:zone_expiring");
        assert!(source.title().contains("zone_expiring"));
        assert_eq!(
            SourceName::parse("plane:zone_expiring").unwrap_err().field,
            "source"
        );
        for bad in ["plane:Zone", "plane:", "plane:a-b"] {
            assert_eq!(SourceName::read(bad).unwrap_err().field, "source", "{bad}");
        }
    }

    #[test]
    fn in_12_a_source_is_registered_once() {
        let mut registry = Registry::default();
        registry
            .register(Box::new(AgentSilent::new(60).unwrap()))
            .unwrap();
        assert!(registry
            .register(Box::new(AgentSilent::new(600).unwrap()))
            .is_err());
        assert_eq!(registry.names().len(), 1);
    }

    #[test]
    fn in_15_automatic_alerts_are_off_for_a_test_cloud_box_and_on_otherwise() {
        assert!(Alerts::Automatic.sends(false));
        assert!(!Alerts::Automatic.sends(true));
        assert!(Alerts::On.sends(true));
        assert!(!Alerts::Off.sends(false));
    }
}
