//! The backups service's sources (BK-21): `plane:backup_failed` (critical), `plane:backups_stopped`
//! (critical) and `plane:backup_unverified` (a warning). The backups service judges a node's
//! backup health (its `domain/health.rs`) and sends the whole judgement when it changes
//! (`backups.health_changed`); these sources only say what the newest judgement held here says,
//! so each clears when the backups service's judgement does. Neither probes.

use capstan_events::backups::{BackupHealth, Judgement};
use chrono::{DateTime, Utc};

use super::record::Severity;
use super::sources::{Condition, NodeFacts, PlaneSource, PlaneSourceName, SourceName};

/// The newest backup health the backups service sent for a node (none before it sent one).
pub type BackupFacts = BackupHealth;

fn condition(
    name: PlaneSourceName,
    severity: Severity,
    judgement: &Judgement,
    now: DateTime<Utc>,
) -> Condition {
    Condition {
        source: SourceName::Plane(name),
        severity,
        detail: judgement.reason.clone(),
        since: judgement.since.min(now),
    }
}

/// `plane:backup_failed`: the node's last backup run failed (the node's reason and the run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BackupFailed;

impl PlaneSource for BackupFailed {
    fn name(&self) -> PlaneSourceName {
        PlaneSourceName::BackupFailed
    }

    fn judge(&self, node: &NodeFacts, now: DateTime<Utc>) -> Option<Condition> {
        let judgement = node.backups.failed.as_ref()?;
        Some(condition(self.name(), Severity::Critical, judgement, now))
    }
}

/// `plane:backups_stopped`: backups are not happening (no verified recovery key, never backed
/// up, not landing, or the last success older than the schedule allows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BackupsStopped;

impl PlaneSource for BackupsStopped {
    fn name(&self) -> PlaneSourceName {
        PlaneSourceName::BackupsStopped
    }

    fn judge(&self, node: &NodeFacts, now: DateTime<Utc>) -> Option<Condition> {
        let judgement = node.backups.stopped.as_ref()?;
        Some(condition(self.name(), Severity::Critical, judgement, now))
    }
}

/// `plane:backup_unverified`: a backup was taken but is not proven whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BackupUnverified;

impl PlaneSource for BackupUnverified {
    fn name(&self) -> PlaneSourceName {
        PlaneSourceName::BackupUnverified
    }

    fn judge(&self, node: &NodeFacts, now: DateTime<Utc>) -> Option<Condition> {
        let judgement = node.backups.unverified.as_ref()?;
        Some(condition(self.name(), Severity::Warning, judgement, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::record::tests::at;
    use crate::domain::sources::tests::node;
    use crate::domain::sources::{InstallState, Registry};

    fn registry() -> Registry {
        let mut registry = Registry::default();
        registry.register(Box::new(BackupFailed)).unwrap();
        registry.register(Box::new(BackupsStopped)).unwrap();
        registry.register(Box::new(BackupUnverified)).unwrap();
        registry
    }

    fn said(reason: &str, since: i64) -> Option<Judgement> {
        Some(Judgement {
            reason: reason.into(),
            since: at(since),
        })
    }

    #[test]
    fn bk_21_each_judgement_is_its_own_incident_at_its_severity_with_the_backups_words() {
        let mut facts = node(1);
        facts.backups = BackupHealth {
            failed: said("Run 4 failed: pg_dump: connection refused", -60),
            stopped: said("Backups are not landing: ...", -30),
            unverified: said("Backups never verified restorable", -10),
        };
        let conditions = registry().conditions(&facts, at(0));
        let seen: Vec<(String, Severity, &str)> = conditions
            .iter()
            .map(|c| (c.source.to_string(), c.severity, c.detail.as_str()))
            .collect();
        assert!(seen.contains(&(
            "plane:backup_failed".into(),
            Severity::Critical,
            "Run 4 failed: pg_dump: connection refused"
        )));
        assert!(seen.contains(&(
            "plane:backups_stopped".into(),
            Severity::Critical,
            "Backups are not landing: ..."
        )));
        assert!(seen.contains(&(
            "plane:backup_unverified".into(),
            Severity::Warning,
            "Backups never verified restorable"
        )));
        let failed = conditions
            .iter()
            .find(|c| c.source.to_string() == "plane:backup_failed")
            .unwrap();
        assert_eq!(failed.since, at(-60));
    }

    #[test]
    fn bk_21_each_clears_when_its_judgement_clears() {
        let mut facts = node(1);
        facts.backups.failed = said("Run 4 failed: disk full", -60);
        facts.backups.unverified = said("Verification is stale", -60);
        assert_eq!(registry().conditions(&facts, at(0)).len(), 2);
        facts.backups.failed = None;
        let left = registry().conditions(&facts, at(0));
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].source.to_string(), "plane:backup_unverified");
        facts.backups = BackupHealth::default();
        assert!(registry().conditions(&facts, at(0)).is_empty());
    }

    #[test]
    fn bk_21_a_node_not_operational_opens_none() {
        let mut facts = node(1);
        facts.backups.stopped = said("Never backed up", -60);
        facts.install_state = InstallState::Installing;
        assert!(registry().conditions(&facts, at(0)).is_empty());
    }

    #[test]
    fn bk_21_the_sources_are_named_as_the_spec_names_them() {
        for name in [
            "plane:backup_failed",
            "plane:backups_stopped",
            "plane:backup_unverified",
        ] {
            assert_eq!(SourceName::parse(name).unwrap().to_string(), name);
        }
    }
}
