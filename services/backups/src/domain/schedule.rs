//! BK-05..BK-07, BK-09, BK-18, BK-20: which nodes are due a backup or a verify, which run the
//! plane asks for, whose turn a machine is, and the verify state in the spec's words. Time is
//! passed in.

use capstan_events::backups::rpc::{BackupMode, PolicyFields, RunKind, VerifyStateKind};
use chrono::{DateTime, Duration, Timelike, Utc};

use super::policy::Effective;

/// The word that takes a backup.
pub const BACKUP_RUN: &str = "backup_run";

/// What the schedule knows of a node (from the agent channel's events).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    /// Paired now: a node that left or was disconnected (moved away, AC-39) is not.
    pub paired: bool,
    /// PV-01: `None` is operational; any install state is not.
    pub install_state: Option<String>,
    /// The words its agent reported.
    pub vocabulary: Vec<String>,
}

/// Why a node is left out of the schedule (BK-06), or `None` when it takes part.
pub fn excluded(node: &NodeFacts, policy: &Effective) -> Option<&'static str> {
    if !node.paired {
        Some("its agent moved away")
    } else if node.install_state.is_some() {
        Some("it is not operational")
    } else if !policy.scheduled {
        Some("its backups are off")
    } else if !node.vocabulary.iter().any(|word| word == BACKUP_RUN) {
        Some("its agent offers no backup_run")
    } else {
        None
    }
}

/// Whether `now` is inside the policy's window (UTC hours; wraps past midnight).
pub fn in_window(fields: &PolicyFields, now: DateTime<Utc>) -> bool {
    if fields.window_hours >= 24 {
        return true;
    }
    let hour = now.hour();
    let start = u32::from(fields.window_start_hour);
    let since_start = (hour + 24 - start) % 24;
    since_start < u32::from(fields.window_hours)
}

/// BK-07: due is keyed on when the last run *started* (whatever became of it), so a failing
/// node is not retried every tick; and only inside the window.
pub fn backup_due(
    fields: &PolicyFields,
    last_start: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> bool {
    if !in_window(fields, now) {
        return false;
    }
    match last_start {
        None => true,
        Some(started) => now >= started + Duration::minutes(i64::from(fields.every_minutes)),
    }
}

/// A run that landed, as the plane recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landed {
    pub seq: i64,
    pub kind: RunKind,
    pub full_seq: i64,
    pub started_at: DateTime<Utc>,
    /// Whether it is in the node's active space (a chain is never extended across spaces).
    pub in_active_space: bool,
}

/// The run the plane asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextRun {
    pub seq: i64,
    pub kind: RunKind,
    pub previous_seq: Option<i64>,
}

/// The next run: its seq is after every seq the node has used (landed or not: no key is
/// written twice, BK-14); a full when the mode says so, when nothing in the active space can
/// be extended (a new space starts a new chain, BK-02), or when the chain's full is older than
/// the full interval; else an incremental on the newest run that landed.
pub fn next_run(
    fields: &PolicyFields,
    newest_used_seq: Option<i64>,
    newest_landed: Option<&Landed>,
    full_started_at: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> NextRun {
    let seq = newest_used_seq.unwrap_or(0) + 1;
    let full = NextRun {
        seq,
        kind: RunKind::Full,
        previous_seq: None,
    };
    if fields.mode == BackupMode::FullOnly {
        return full;
    }
    let Some(previous) = newest_landed.filter(|landed| landed.in_active_space) else {
        return full;
    };
    let full_age_ok = full_started_at
        .is_some_and(|started| now < started + Duration::days(i64::from(fields.full_every_days)));
    if !full_age_ok {
        return full;
    }
    NextRun {
        seq,
        kind: RunKind::Incremental,
        previous_seq: Some(previous.seq),
    }
}

/// BK-18: a level-2 verify is due when verify_every_days > 0, a backup from here landed, and
/// either none was ever attempted, or the last attempt is older than the interval and a newer
/// backup exists than the one it was of. The last attempt counts whatever became of it: a
/// failed verify is never retried automatically.
pub fn verify_due(
    fields: &PolicyFields,
    newest_landed_seq: Option<i64>,
    last_attempt: Option<(DateTime<Utc>, i64)>,
    now: DateTime<Utc>,
) -> bool {
    if fields.verify_every_days == 0 {
        return false;
    }
    let Some(newest) = newest_landed_seq else {
        return false;
    };
    match last_attempt {
        None => true,
        Some((attempted_at, attempted_seq)) => {
            now >= attempted_at + Duration::days(i64::from(fields.verify_every_days))
                && newest > attempted_seq
        }
    }
}

/// The newest verify's facts, for BK-20.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastVerify {
    pub ok: bool,
    pub finished_at: DateTime<Utc>,
    /// The node's reasons when it failed.
    pub problems: Vec<String>,
}

/// BK-20's verify state: a shelf problem first; a failed verify, in the node's words, with
/// "nothing is retried automatically"; a pass older than the interval + 1 day is stale; never
/// verified is informational for the interval after the first backup, then a problem.
pub fn verify_state(
    fields: &PolicyFields,
    shelf_problem: Option<&str>,
    last: Option<&LastVerify>,
    first_backup: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> (VerifyStateKind, bool, String) {
    let alarm = Duration::days(i64::from(fields.verify_every_days) + 1);
    if let Some(problem) = shelf_problem.filter(|problem| !problem.is_empty()) {
        return (
            VerifyStateKind::ShelfProblem,
            true,
            format!("A backup in backup storage is incomplete: {problem}"),
        );
    }
    match (last, first_backup) {
        (Some(last), _) if !last.ok => {
            let reason = if last.problems.is_empty() {
                "the verify failed".to_string()
            } else {
                last.problems.join("; ")
            };
            (
                VerifyStateKind::Failed,
                true,
                format!("Verification failed: {reason}; nothing is retried automatically"),
            )
        }
        (Some(last), _) if fields.verify_every_days > 0 && now > last.finished_at + alarm => (
            VerifyStateKind::Stale,
            true,
            format!(
                "Last verified restorable {}, more than {} days ago",
                last.finished_at.format("%Y-%m-%d %H:%M UTC"),
                fields.verify_every_days + 1
            ),
        ),
        (Some(last), _) => (
            VerifyStateKind::Verified,
            false,
            format!(
                "Verified restorable {}",
                last.finished_at.format("%Y-%m-%d %H:%M UTC")
            ),
        ),
        (None, None) => (
            VerifyStateKind::NoBackups,
            false,
            "No backup yet".to_string(),
        ),
        (None, Some(first)) if now <= first + alarm || fields.verify_every_days == 0 => (
            VerifyStateKind::NotYetVerified,
            false,
            "Not yet verified restorable".to_string(),
        ),
        (None, Some(_)) => (
            VerifyStateKind::NeverVerified,
            true,
            "Backups never verified restorable".to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::policy::default_fleet;
    use chrono::TimeZone;

    fn at(hour: u32, minute: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 10, hour, minute, 0).unwrap()
    }

    fn fields() -> PolicyFields {
        default_fleet().fields
    }

    fn node() -> NodeFacts {
        NodeFacts {
            paired: true,
            install_state: None,
            vocabulary: vec![BACKUP_RUN.into(), "verify_backup".into()],
        }
    }

    fn on() -> Effective {
        Effective {
            scheduled: true,
            fields: fields(),
        }
    }

    #[test]
    fn bk_06_non_operational_moved_away_and_off_nodes_are_excluded() {
        assert_eq!(excluded(&node(), &on()), None);
        let mut installing = node();
        installing.install_state = Some("installing".into());
        assert_eq!(excluded(&installing, &on()), Some("it is not operational"));
        let mut gone = node();
        gone.paired = false;
        assert_eq!(excluded(&gone, &on()), Some("its agent moved away"));
        let off = Effective {
            scheduled: false,
            fields: fields(),
        };
        assert_eq!(excluded(&node(), &off), Some("its backups are off"));
        let mut old = node();
        old.vocabulary = vec!["check_status".into()];
        assert!(excluded(&old, &on()).is_some());
    }

    #[test]
    fn bk_07_due_by_last_start_not_by_success() {
        let mut fields = fields();
        fields.every_minutes = 60;
        // Never run: due at once.
        assert!(backup_due(&fields, None, at(10, 0)));
        // Started at 10:00 (and failed): not due again until 11:00.
        assert!(!backup_due(&fields, Some(at(10, 0)), at(10, 15)));
        assert!(!backup_due(&fields, Some(at(10, 0)), at(10, 59)));
        assert!(backup_due(&fields, Some(at(10, 0)), at(11, 0)));
    }

    #[test]
    fn bk_08_a_run_starts_only_inside_the_window_which_may_wrap_midnight() {
        let mut fields = fields();
        fields.window_start_hour = 22;
        fields.window_hours = 4;
        assert!(in_window(&fields, at(23, 30)));
        assert!(in_window(&fields, at(1, 59)));
        assert!(!in_window(&fields, at(2, 0)));
        assert!(!in_window(&fields, at(12, 0)));
        assert!(!backup_due(&fields, None, at(12, 0)));
        fields.window_hours = 24;
        assert!(in_window(&fields, at(12, 0)));
    }

    fn landed(seq: i64, kind: RunKind, full_seq: i64, started_at: DateTime<Utc>) -> Landed {
        Landed {
            seq,
            kind,
            full_seq,
            started_at,
            in_active_space: true,
        }
    }

    #[test]
    fn bk_14_the_next_seq_is_after_every_seq_used_landed_or_not() {
        let first = next_run(&fields(), None, None, None, at(10, 0));
        assert_eq!(
            first,
            NextRun {
                seq: 1,
                kind: RunKind::Full,
                previous_seq: None
            }
        );
        // Run 3 failed after opening; 2 landed: the next is 4, extending 2.
        let two = landed(2, RunKind::Full, 2, at(9, 0));
        let next = next_run(&fields(), Some(3), Some(&two), Some(at(9, 0)), at(10, 0));
        assert_eq!(
            next,
            NextRun {
                seq: 4,
                kind: RunKind::Incremental,
                previous_seq: Some(2)
            }
        );
    }

    #[test]
    fn bk_25_a_chain_is_a_full_then_incrementals_until_the_full_interval() {
        let fields = fields();
        let full = landed(5, RunKind::Full, 5, at(0, 0));
        let day = Duration::days(1);
        let incremental = next_run(
            &fields,
            Some(5),
            Some(&full),
            Some(at(0, 0)),
            at(0, 0) + day,
        );
        assert_eq!(incremental.kind, RunKind::Incremental);
        let again = next_run(
            &fields,
            Some(5),
            Some(&full),
            Some(at(0, 0)),
            at(0, 0) + Duration::days(7),
        );
        assert_eq!(again.kind, RunKind::Full);
        let mut only = fields.clone();
        only.mode = BackupMode::FullOnly;
        assert_eq!(
            next_run(&only, Some(5), Some(&full), Some(at(0, 0)), at(1, 0)).kind,
            RunKind::Full
        );
    }

    #[test]
    fn bk_02_a_move_starts_a_new_chain_with_a_full() {
        let mut drained = landed(5, RunKind::Full, 5, at(0, 0));
        drained.in_active_space = false;
        let next = next_run(&fields(), Some(5), Some(&drained), Some(at(0, 0)), at(1, 0));
        assert_eq!(next.kind, RunKind::Full);
        assert_eq!(next.seq, 6);
    }

    #[test]
    fn bk_18_verify_due_needs_a_backup_and_never_retries_a_failed_attempt() {
        let fields = fields();
        let now = at(12, 0);
        // No backup yet: nothing to verify.
        assert!(!verify_due(&fields, None, None, now));
        // A backup, never attempted: due.
        assert!(verify_due(&fields, Some(3), None, now));
        // Attempted yesterday (failed or not): not due within the interval.
        assert!(!verify_due(
            &fields,
            Some(4),
            Some((now - Duration::days(1), 3)),
            now
        ));
        // Older than the interval but no newer backup: not due (no retry of the same run).
        assert!(!verify_due(
            &fields,
            Some(3),
            Some((now - Duration::days(8), 3)),
            now
        ));
        // Older than the interval and a newer backup: due.
        assert!(verify_due(
            &fields,
            Some(4),
            Some((now - Duration::days(8), 3)),
            now
        ));
        let mut never = fields.clone();
        never.verify_every_days = 0;
        assert!(!verify_due(&never, Some(3), None, now));
    }

    #[test]
    fn bk_20_verify_state_in_the_specs_words() {
        let fields = fields();
        let now = at(12, 0);
        let (state, problem, words) =
            verify_state(&fields, Some("run 4: files-4 is missing"), None, None, now);
        assert_eq!(state, VerifyStateKind::ShelfProblem);
        assert!(problem && words.contains("incomplete"));
        let failed = LastVerify {
            ok: false,
            finished_at: now,
            problems: vec!["sha256 of files-4 differs".into()],
        };
        let (state, problem, words) = verify_state(&fields, None, Some(&failed), Some(now), now);
        assert_eq!(state, VerifyStateKind::Failed);
        assert!(problem);
        assert!(words.contains("sha256 of files-4 differs"));
        assert!(words.contains("nothing is retried automatically"));
        let passed = LastVerify {
            ok: true,
            finished_at: now - Duration::days(8) - Duration::hours(1),
            problems: vec![],
        };
        let (state, problem, _) = verify_state(&fields, None, Some(&passed), Some(now), now);
        assert_eq!((state, problem), (VerifyStateKind::Stale, true));
        let fresh = LastVerify {
            ok: true,
            finished_at: now - Duration::days(2),
            problems: vec![],
        };
        let (state, problem, _) = verify_state(&fields, None, Some(&fresh), Some(now), now);
        assert_eq!((state, problem), (VerifyStateKind::Verified, false));
        let (state, problem, words) =
            verify_state(&fields, None, None, Some(now - Duration::days(3)), now);
        assert_eq!((state, problem), (VerifyStateKind::NotYetVerified, false));
        assert_eq!(words, "Not yet verified restorable");
        let (state, problem, words) =
            verify_state(&fields, None, None, Some(now - Duration::days(9)), now);
        assert_eq!((state, problem), (VerifyStateKind::NeverVerified, true));
        assert_eq!(words, "Backups never verified restorable");
    }
}
