//! A node's backup health (BK-20, BK-21, BK-22): the three judgements the incidents service
//! turns into `plane:backup_failed` (critical), `plane:backups_stopped` (critical) and
//! `plane:backup_unverified` (warning), judged from the facts this service holds, time passed
//! in. Each clears when its judgement does; a node the scheduler would not back up, or whose
//! backups somebody switched off, has none.
//!
//! Decisions where the spec is silent (docs/backups.md "Health"):
//! * "older than the schedule allows": the last success started more than two intervals ago
//!   (one missed slot is weather, two are a problem);
//! * "never backed up": nothing succeeded and the node has been scheduled for longer than that;
//! * "suspiciously small": a full whose stored bytes are under a tenth of the full before it.

use capstan_events::backups::{BackupHealth, Judgement};
use chrono::{DateTime, Duration, Utc};

/// A node in its first seven days with no recovery key opens no `backups_stopped` (BK-21).
pub const NO_KEY_GRACE: Duration = Duration::days(7);
/// A full under this fraction (1/N) of the full before it is suspiciously small.
pub const SMALL_FULL_DIVISOR: u64 = 10;

/// The owner's recovery key as the node's latest `check_status` reported it (BK-22). The plane
/// never writes it; `Unreported` is a node that has not said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecoveryKey {
    Unreported,
    None,
    Invalid,
    Already { fingerprint: String },
}

impl RecoveryKey {
    /// BK-22's one predicate: the node holds a proven key of its own (whose, is not asked).
    pub fn has_own_key(&self) -> bool {
        matches!(self, RecoveryKey::Already { .. })
    }

    /// Reads check_status's `recovery_key.state` (`already | none | invalid`).
    pub fn from_report(state: Option<&str>, fingerprint: Option<&str>) -> RecoveryKey {
        match (state, fingerprint) {
            (Some("already"), Some(fingerprint)) => RecoveryKey::Already {
                fingerprint: fingerprint.to_string(),
            },
            (Some("already"), None) | (Some("invalid"), _) => RecoveryKey::Invalid,
            (Some("none"), _) => RecoveryKey::None,
            _ => RecoveryKey::Unreported,
        }
    }
}

/// One finished backup run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFacts {
    pub seq: i64,
    pub full: bool,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// `None` when it succeeded; the node's reason when it failed.
    pub error: Option<String>,
    /// Bytes stored (the manifest's artifacts), for a success.
    pub bytes: u64,
}

/// The last verify the node attempted, as recorded (BK-19).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyFacts {
    /// The newest verify that passed.
    pub passed_at: Option<DateTime<Utc>>,
    /// The newest attempt, if it failed and nothing passed since: when and the node's words.
    pub failed: Option<(DateTime<Utc>, String)>,
}

/// Everything BK-21 judges from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthFacts {
    /// The scheduler would back the node up: its policy is on and it is operational.
    pub scheduled: bool,
    /// When it became scheduled (paired, or its backups switched on).
    pub scheduled_since: DateTime<Utc>,
    /// When the node was paired (the seven days' grace for a recovery key run from here).
    pub paired_at: DateTime<Utc>,
    /// The schedule's interval.
    pub every: Duration,
    /// Days between verifications (0 = never, a decision).
    pub verify_every_days: u32,
    pub recovery_key: RecoveryKey,
    /// The newest finished run, whatever its outcome.
    pub last_run: Option<RunFacts>,
    /// The newest successful run.
    pub last_success: Option<RunFacts>,
    /// The first successful run from here.
    pub first_success_at: Option<DateTime<Utc>>,
    /// The newest successful full and the full before it (their stored bytes).
    pub last_full: Option<RunFacts>,
    pub previous_full_bytes: Option<u64>,
    /// BK-17: when storage was last listed with the plane's credential, and the newest object
    /// write it saw.
    pub shelf_checked_at: Option<DateTime<Utc>>,
    pub shelf_newest_at: Option<DateTime<Utc>>,
    /// BK-15: the storage check's one line, `None` when every backup is whole.
    pub shelf_problem: Option<String>,
    pub verify: VerifyFacts,
}

/// BK-20: a pass older than the interval plus a day is stale.
pub fn verify_alarm(verify_every_days: u32) -> Duration {
    Duration::days(i64::from(verify_every_days) + 1)
}

/// BK-17: storage was listed after the claimed success and holds nothing written since it
/// started: the backups are not landing.
pub fn not_landing(facts: &HealthFacts) -> Option<DateTime<Utc>> {
    let success = facts.last_success.as_ref()?;
    let checked = facts.shelf_checked_at?;
    if checked < success.finished_at {
        return None;
    }
    let landed = facts
        .shelf_newest_at
        .is_some_and(|newest| newest >= success.started_at);
    (!landed).then_some(checked)
}

/// BK-21: the node's three judgements at `now`.
pub fn judge(facts: &HealthFacts, now: DateTime<Utc>) -> BackupHealth {
    if !facts.scheduled {
        return BackupHealth::default();
    }
    BackupHealth {
        failed: failed(facts),
        stopped: stopped(facts, now),
        unverified: unverified(facts, now),
    }
}

fn judgement(reason: impl Into<String>, since: DateTime<Utc>) -> Option<Judgement> {
    Some(Judgement {
        reason: reason.into(),
        since,
    })
}

fn failed(facts: &HealthFacts) -> Option<Judgement> {
    let run = facts.last_run.as_ref()?;
    let error = run.error.as_ref()?;
    judgement(format!("Run {} failed: {error}", run.seq), run.finished_at)
}

fn stopped(facts: &HealthFacts, now: DateTime<Utc>) -> Option<Judgement> {
    let allowed = facts.every * 2;
    if !facts.recovery_key.has_own_key() {
        let grace_ends = facts.paired_at + NO_KEY_GRACE;
        if now >= grace_ends {
            let said = match facts.recovery_key {
                RecoveryKey::Invalid => "the node's recovery key is not usable",
                RecoveryKey::Unreported => "the node has not reported a recovery key",
                _ => "the node has no verified recovery key",
            };
            return judgement(
                format!(
                    "No verified recovery key: {said}, so no backup can be opened by its owner"
                ),
                grace_ends,
            );
        }
    }
    let Some(success) = facts.last_success.as_ref() else {
        let due = facts.scheduled_since + allowed;
        return (now >= due).then(|| Judgement {
            reason: "Never backed up".into(),
            since: due,
        });
    };
    if let Some(seen) = not_landing(facts) {
        return judgement(
            format!(
                "Backups are not landing: storage listed at {} holds nothing written since run {} started",
                seen.format("%Y-%m-%d %H:%M UTC"),
                success.seq
            ),
            seen,
        );
    }
    let due = success.started_at + allowed;
    (now >= due).then(|| Judgement {
        reason: format!(
            "The last successful backup (run {}) started {}, longer ago than the schedule allows",
            success.seq,
            success.started_at.format("%Y-%m-%d %H:%M UTC")
        ),
        since: due,
    })
}

fn unverified(facts: &HealthFacts, now: DateTime<Utc>) -> Option<Judgement> {
    let first = facts.first_success_at?;
    if let (Some(full), Some(before)) = (facts.last_full.as_ref(), facts.previous_full_bytes) {
        if full.bytes.saturating_mul(SMALL_FULL_DIVISOR) < before {
            return judgement(
                format!(
                    "Run {} is suspiciously small: {} bytes stored, the full before it {} bytes",
                    full.seq, full.bytes, before
                ),
                full.finished_at,
            );
        }
    }
    if let Some(problem) = &facts.shelf_problem {
        return judgement(
            format!("A backup in backup storage is incomplete: {problem}"),
            facts.shelf_checked_at.unwrap_or(now),
        );
    }
    if let Some((at, words)) = &facts.verify.failed {
        return judgement(
            format!("Verification failed: {words} (nothing is retried automatically)"),
            *at,
        );
    }
    if facts.verify_every_days == 0 {
        return None;
    }
    let alarm = verify_alarm(facts.verify_every_days);
    match facts.verify.passed_at {
        Some(passed) => {
            let stale = passed + alarm;
            (now >= stale).then(|| Judgement {
                reason: format!(
                    "Verification is stale: the last pass was {}",
                    passed.format("%Y-%m-%d %H:%M UTC")
                ),
                since: stale,
            })
        }
        None => {
            let never = first + alarm;
            (now >= never).then(|| Judgement {
                reason: "Backups never verified restorable".into(),
                since: never,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(hours: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap() + Duration::hours(hours)
    }

    fn run(seq: i64, full: bool, started: i64, error: Option<&str>, bytes: u64) -> RunFacts {
        RunFacts {
            seq,
            full,
            started_at: at(started),
            finished_at: at(started) + Duration::minutes(10),
            error: error.map(str::to_string),
            bytes,
        }
    }

    /// A healthy node paired a month ago, backed up daily, keyed, verified, witnessed.
    fn healthy() -> HealthFacts {
        let last = run(30, false, 30 * 24, None, 1_000);
        HealthFacts {
            scheduled: true,
            scheduled_since: at(0),
            paired_at: at(0),
            every: Duration::days(1),
            verify_every_days: 7,
            recovery_key: RecoveryKey::Already {
                fingerprint: "age1fp".into(),
            },
            last_run: Some(last.clone()),
            last_success: Some(last.clone()),
            first_success_at: Some(at(24)),
            last_full: Some(run(28, true, 28 * 24, None, 100_000)),
            previous_full_bytes: Some(90_000),
            shelf_checked_at: Some(last.finished_at + Duration::minutes(5)),
            shelf_newest_at: Some(last.finished_at),
            shelf_problem: None,
            verify: VerifyFacts {
                passed_at: Some(at(29 * 24)),
                failed: None,
            },
        }
    }

    fn now() -> DateTime<Utc> {
        at(30 * 24 + 12)
    }

    #[test]
    fn bk_21_a_healthy_node_has_no_judgement() {
        assert_eq!(judge(&healthy(), now()), BackupHealth::default());
    }

    #[test]
    fn bk_21_the_last_run_failed_is_backup_failed_with_the_nodes_reason_and_run() {
        let mut facts = healthy();
        facts.last_run = Some(run(
            31,
            false,
            31 * 24,
            Some("pg_dump: connection refused"),
            0,
        ));
        let health = judge(&facts, at(31 * 24 + 1));
        let failed = health.failed.expect("failed");
        assert!(failed.reason.contains("Run 31"), "{}", failed.reason);
        assert!(failed.reason.contains("pg_dump: connection refused"));
        assert_eq!(failed.since, at(31 * 24) + Duration::minutes(10));
        // A later success clears it.
        let later = run(32, false, 32 * 24, None, 1_000);
        facts.last_run = Some(later.clone());
        facts.last_success = Some(later);
        assert_eq!(judge(&facts, at(32 * 24 + 1)).failed, None);
    }

    #[test]
    fn bk_21_no_verified_recovery_key_stops_backups_after_the_first_seven_days() {
        for key in [
            RecoveryKey::None,
            RecoveryKey::Invalid,
            RecoveryKey::Unreported,
        ] {
            let mut facts = healthy();
            facts.recovery_key = key.clone();
            let stopped = judge(&facts, now()).stopped.expect("stopped");
            assert!(
                stopped.reason.starts_with("No verified recovery key"),
                "{key:?}"
            );
            assert_eq!(stopped.since, at(0) + NO_KEY_GRACE);
        }
    }

    #[test]
    fn bk_21_a_node_in_its_first_seven_days_with_no_recovery_key_opens_none() {
        let mut facts = healthy();
        facts.paired_at = now() - Duration::days(6);
        facts.recovery_key = RecoveryKey::None;
        assert_eq!(judge(&facts, now()).stopped, None);
        // The day the grace ends, it opens.
        assert!(judge(&facts, now() + Duration::days(1)).stopped.is_some());
    }

    #[test]
    fn bk_21_never_backed_up_is_stopped_once_the_schedule_allowed_a_run() {
        let mut facts = healthy();
        facts.scheduled_since = now() - Duration::hours(47);
        facts.last_run = None;
        facts.last_success = None;
        facts.first_success_at = None;
        facts.last_full = None;
        facts.previous_full_bytes = None;
        assert_eq!(judge(&facts, now()).stopped, None);
        let stopped = judge(&facts, now() + Duration::hours(1))
            .stopped
            .expect("stopped");
        assert_eq!(stopped.reason, "Never backed up");
        // Never backed up is not also "never verified".
        assert_eq!(judge(&facts, now() + Duration::days(30)).unverified, None);
    }

    #[test]
    fn bk_21_bk_17_listed_after_the_claimed_success_with_nothing_written_since_is_not_landing() {
        let mut facts = healthy();
        let success = facts.last_success.clone().unwrap();
        facts.shelf_newest_at = Some(success.started_at - Duration::hours(20));
        let stopped = judge(&facts, now()).stopped.expect("stopped");
        assert!(
            stopped.reason.starts_with("Backups are not landing"),
            "{}",
            stopped.reason
        );
        assert_eq!(stopped.since, facts.shelf_checked_at.unwrap());
        // A listing from before the claimed success says nothing yet.
        facts.shelf_checked_at = Some(success.finished_at - Duration::minutes(1));
        assert_eq!(judge(&facts, now()).stopped, None);
        // A listing that sees a write since the run started clears it.
        facts.shelf_checked_at = Some(success.finished_at + Duration::minutes(5));
        facts.shelf_newest_at = Some(success.started_at + Duration::minutes(3));
        assert_eq!(judge(&facts, now()).stopped, None);
    }

    #[test]
    fn bk_21_a_last_success_older_than_the_schedule_allows_is_stopped() {
        let facts = healthy();
        let started = facts.last_success.as_ref().unwrap().started_at;
        assert_eq!(judge(&facts, started + Duration::hours(47)).stopped, None);
        let stopped = judge(&facts, started + Duration::hours(48))
            .stopped
            .expect("stopped");
        assert!(stopped
            .reason
            .contains("longer ago than the schedule allows"));
        assert_eq!(stopped.since, started + Duration::hours(48));
    }

    #[test]
    fn bk_21_nodes_not_scheduled_or_switched_off_have_none() {
        let mut facts = healthy();
        facts.recovery_key = RecoveryKey::None;
        facts.last_run = Some(run(31, true, 31 * 24, Some("disk full"), 0));
        facts.shelf_problem = Some("run 30: files.000001 missing".into());
        facts.scheduled = false;
        assert_eq!(judge(&facts, now()), BackupHealth::default());
    }

    #[test]
    fn bk_21_a_suspiciously_small_full_is_unverified() {
        let mut facts = healthy();
        facts.previous_full_bytes = Some(1_000_001);
        let unverified = judge(&facts, now()).unverified.expect("unverified");
        assert!(unverified.reason.contains("suspiciously small"));
        facts.previous_full_bytes = Some(1_000_000);
        assert_eq!(judge(&facts, now()).unverified, None);
    }

    #[test]
    fn bk_21_bk_15_an_incomplete_stored_backup_is_unverified_in_the_checks_words() {
        let mut facts = healthy();
        facts.shelf_problem = Some("run 29: files.000001 is 10 bytes, recorded 16777216".into());
        let unverified = judge(&facts, now()).unverified.expect("unverified");
        assert_eq!(
            unverified.reason,
            "A backup in backup storage is incomplete: run 29: files.000001 is 10 bytes, recorded 16777216"
        );
    }

    #[test]
    fn bk_21_bk_20_a_failed_verify_is_unverified_in_the_nodes_words_and_not_retried() {
        let mut facts = healthy();
        facts.verify.failed = Some((at(29 * 24 + 3), "sha256 of files.000001 differs".into()));
        let unverified = judge(&facts, now()).unverified.expect("unverified");
        assert!(unverified.reason.contains("sha256 of files.000001 differs"));
        assert!(unverified
            .reason
            .contains("nothing is retried automatically"));
    }

    #[test]
    fn bk_21_bk_20_a_pass_older_than_the_interval_and_a_day_is_stale() {
        let mut facts = healthy();
        let passed = now() - Duration::days(8);
        facts.verify.passed_at = Some(passed + Duration::minutes(1));
        assert_eq!(judge(&facts, now()).unverified, None);
        facts.verify.passed_at = Some(passed);
        let unverified = judge(&facts, now()).unverified.expect("stale");
        assert!(unverified.reason.starts_with("Verification is stale"));
        // Verification switched off (0 days, a decision) is never stale.
        facts.verify_every_days = 0;
        assert_eq!(judge(&facts, now()).unverified, None);
    }

    #[test]
    fn bk_21_bk_20_never_verified_is_information_for_the_alarm_days_then_unverified() {
        let mut facts = healthy();
        facts.verify.passed_at = None;
        facts.first_success_at = Some(now() - Duration::days(8) + Duration::minutes(1));
        assert_eq!(judge(&facts, now()).unverified, None);
        facts.first_success_at = Some(now() - Duration::days(8));
        let unverified = judge(&facts, now()).unverified.expect("never");
        assert_eq!(unverified.reason, "Backups never verified restorable");
    }

    #[test]
    fn bk_22_has_own_key_is_the_one_predicate_read_from_the_report() {
        assert!(RecoveryKey::from_report(Some("already"), Some("fp")).has_own_key());
        assert!(!RecoveryKey::from_report(Some("already"), None).has_own_key());
        assert!(!RecoveryKey::from_report(Some("none"), None).has_own_key());
        assert!(!RecoveryKey::from_report(Some("invalid"), Some("fp")).has_own_key());
        assert_eq!(
            RecoveryKey::from_report(None, None),
            RecoveryKey::Unreported
        );
        assert_eq!(
            RecoveryKey::from_report(Some("what"), None),
            RecoveryKey::Unreported
        );
    }
}
