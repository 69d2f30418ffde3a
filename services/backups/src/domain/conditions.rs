//! The backups service's conditions (BK-21; issue 28: conditions are judged where the facts
//! live): `plane:backup_failed` (critical), `plane:backups_stopped` (critical) and
//! `plane:backup_unverified` (a warning), one for each of `health.rs`'s three judgements. Each
//! is published when its judgement changes, in the transaction that stores the judgement and
//! sends `backups.health_changed`; each clears when its judgement does. Incidents turns them
//! into incidents.

use capstan_events::backups::{
    BackupHealth, Judgement, BACKUPS_STOPPED, BACKUP_FAILED, BACKUP_UNVERIFIED,
};
use capstan_events::conditions::{ConditionChanged, ConditionKind};
use capstan_events::NodeId;
use chrono::{DateTime, Utc};

/// One judgement as its condition: happening with the backups service's words while it holds.
fn condition(
    kind: &ConditionKind,
    node: NodeId,
    judgement: Option<&Judgement>,
    at: DateTime<Utc>,
) -> ConditionChanged {
    match judgement {
        Some(judgement) => kind.happening(node, judgement.reason.clone(), judgement.since, at),
        None => kind.not_happening(node, at),
    }
}

/// BK-21: the conditions of the judgements that differ between `before` and `after`, judged at
/// `at`: each its own incident at its own severity, each cleared by its own judgement.
pub fn changed(
    node: NodeId,
    before: &BackupHealth,
    after: &BackupHealth,
    at: DateTime<Utc>,
) -> Vec<ConditionChanged> {
    [
        (&BACKUP_FAILED, &before.failed, &after.failed),
        (&BACKUPS_STOPPED, &before.stopped, &after.stopped),
        (&BACKUP_UNVERIFIED, &before.unverified, &after.unverified),
    ]
    .into_iter()
    .filter(|(_, before, after)| before != after)
    .map(|(kind, _, after)| condition(kind, node, after.as_ref(), at))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::incidents::Severity;
    use chrono::{Duration, TimeZone};

    fn at(seconds: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000, 0).unwrap() + Duration::seconds(seconds)
    }

    fn said(reason: &str, since: i64) -> Option<Judgement> {
        Some(Judgement {
            reason: reason.into(),
            since: at(since),
        })
    }

    #[test]
    fn bk_21_each_judgement_is_its_own_condition_at_its_severity_with_the_backups_words() {
        let health = BackupHealth {
            failed: said("Run 4 failed: pg_dump: connection refused", -60),
            stopped: said("Backups are not landing: ...", -30),
            unverified: said("Backups never verified restorable", -10),
        };
        let conditions = changed(NodeId(1), &BackupHealth::default(), &health, at(0));
        let seen: Vec<(String, Severity, &str, bool)> = conditions
            .iter()
            .map(|c| (c.source(), c.severity, c.evidence.as_str(), c.happening))
            .collect();
        assert_eq!(
            seen,
            vec![
                (
                    "plane:backup_failed".into(),
                    Severity::Critical,
                    "Run 4 failed: pg_dump: connection refused",
                    true
                ),
                (
                    "plane:backups_stopped".into(),
                    Severity::Critical,
                    "Backups are not landing: ...",
                    true
                ),
                (
                    "plane:backup_unverified".into(),
                    Severity::Warning,
                    "Backups never verified restorable",
                    true
                ),
            ]
        );
        assert_eq!(conditions[0].since, Some(at(-60)));
        assert!(conditions.iter().all(|c| c.check().is_ok()));
    }

    #[test]
    fn bk_21_each_clears_when_its_judgement_clears_and_an_unchanged_one_says_nothing() {
        let before = BackupHealth {
            failed: said("Run 4 failed: disk full", -60),
            unverified: said("Verification is stale", -60),
            ..BackupHealth::default()
        };
        let after = BackupHealth {
            failed: None,
            ..before.clone()
        };
        let conditions = changed(NodeId(1), &before, &after, at(0));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].source(), "plane:backup_failed");
        assert!(!conditions[0].happening);
        assert!(changed(NodeId(1), &after, &after, at(0)).is_empty());
        let cleared = changed(NodeId(1), &after, &BackupHealth::default(), at(0));
        assert_eq!(cleared.len(), 1);
        assert_eq!(cleared[0].source(), "plane:backup_unverified");
    }

    #[test]
    fn bk_21_a_new_reason_for_the_same_judgement_is_the_same_condition_with_new_evidence() {
        let before = BackupHealth {
            failed: said("Run 4 failed: disk full", -60),
            ..BackupHealth::default()
        };
        let after = BackupHealth {
            failed: said("Run 5 failed: timeout", -60),
            ..BackupHealth::default()
        };
        let conditions = changed(NodeId(1), &before, &after, at(0));
        assert_eq!(conditions.len(), 1);
        assert!(conditions[0].happening);
        assert_eq!(conditions[0].evidence, "Run 5 failed: timeout");
    }
}
