//! Which chains retention may delete (BK-10..BK-13), with the daily/weekly/monthly tiers that
//! restic and Borg users expect on top of the window (restic's `forget --keep-daily` and its
//! kin: for each tier, walk the chains newest first and keep the newest chain of each of the N
//! most recent days, weeks or months that have one). The tiers only ever keep more: nothing the
//! window or the safety rules keep is deleted because of them.
//!
//! A chain (a full and its incrementals, grouped by the full's seq) is kept or deleted whole
//! (BK-13), dated by when its full started (BK-11's "stamp in its name").

use chrono::{DateTime, Datelike, Duration, Utc};

/// A node that has not reported its own window is read at the site default (BK-10).
pub const UNREPORTED_KEEP_DAYS: u32 = 28;
/// The fleet policy's floor by default (BK-10).
pub const DEFAULT_KEEP_DAYS_FLOOR: u32 = 7;
/// A surplus chain goes only once a day has passed since a pass first found it surplus (BK-12).
pub const DELETE_GRACE: Duration = Duration::days(1);

/// BK-10: the days kept are the node's reported window, never fewer than the policy's floor;
/// a node that has not reported is read at 28.
pub fn keep_days(reported: Option<u32>, floor: u32) -> u32 {
    reported.unwrap_or(UNREPORTED_KEEP_DAYS).max(floor)
}

/// The tiers on top of the window: how many days, weeks and months keep their newest chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tiers {
    pub daily: u32,
    pub weekly: u32,
    pub monthly: u32,
}

/// One chain as retention sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// The full's seq: the chain's name.
    pub full_seq: i64,
    /// When its full started.
    pub started_at: DateTime<Utc>,
    /// Whether a verify of one of its runs passed.
    pub verified: bool,
    /// Whether it is in a draining space (the node was moved away).
    pub draining: bool,
    /// When a pass first found it surplus, if one has.
    pub surplus_since: Option<DateTime<Utc>>,
}

/// Why a chain stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// BK-11: started inside the window.
    Window,
    /// BK-11: the newest started before the window.
    NewestBeforeWindow,
    /// BK-12: the newest always stays.
    Newest,
    /// BK-12: the newest verified chain and everything newer stay.
    VerifiedOrNewer,
    /// BK-13: a draining space is kept whole until a verify in the active space has passed.
    DrainingUnproven,
    Daily,
    Weekly,
    Monthly,
}

/// What a pass decides for one chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Keep(Reason),
    /// Surplus, but not a day yet since first found so (`since`, to record).
    Surplus {
        since: DateTime<Utc>,
    },
    Delete,
}

/// The tiers: per chain (newest first), the tier that keeps it, if any — the newest chain of
/// each of the last `daily` days, `weekly` ISO weeks and `monthly` months that have one.
fn tiered(order: &[&Chain], tiers: Tiers) -> Vec<Option<Reason>> {
    let mut tiered: Vec<Option<Reason>> = vec![None; order.len()];
    let tier_walk = |count: u32,
                     bucket: &dyn Fn(DateTime<Utc>) -> (i32, u32),
                     reason: Reason,
                     kept: &mut Vec<Option<Reason>>| {
        let mut left = count;
        let mut last: Option<(i32, u32)> = None;
        for (index, chain) in order.iter().enumerate() {
            if left == 0 {
                break;
            }
            let value = bucket(chain.started_at);
            if last != Some(value) {
                last = Some(value);
                left -= 1;
                kept[index].get_or_insert(reason);
            }
        }
    };
    tier_walk(
        tiers.daily,
        &|at| (at.year(), at.ordinal()),
        Reason::Daily,
        &mut tiered,
    );
    tier_walk(
        tiers.weekly,
        &|at| {
            let week = at.iso_week();
            (week.year(), week.week())
        },
        Reason::Weekly,
        &mut tiered,
    );
    tier_walk(
        tiers.monthly,
        &|at| (at.year(), at.month()),
        Reason::Monthly,
        &mut tiered,
    );
    tiered
}

/// BK-10..BK-13 and the tiers: a verdict for every chain, in the order given.
/// `active_verified`: a verify of a chain in the node's active space has passed.
pub fn judge(
    chains: &[Chain],
    keep_days: u32,
    tiers: Tiers,
    active_verified: bool,
    now: DateTime<Utc>,
) -> Vec<(i64, Verdict)> {
    let window_start = now - Duration::days(i64::from(keep_days));
    // Newest first; seq breaks ties (it only grows).
    let mut order: Vec<&Chain> = chains.iter().collect();
    order.sort_by(|a, b| {
        b.started_at
            .cmp(&a.started_at)
            .then(b.full_seq.cmp(&a.full_seq))
    });
    let newest_verified = order.iter().position(|chain| chain.verified);
    let newest_before_window = order
        .iter()
        .position(|chain| chain.started_at < window_start);
    let tiered = tiered(&order, tiers);
    let mut verdicts: Vec<(i64, Verdict)> = order
        .iter()
        .enumerate()
        .map(|(index, chain)| {
            let keep = if index == 0 {
                Some(Reason::Newest)
            } else if newest_verified.is_some_and(|verified| index <= verified) {
                Some(Reason::VerifiedOrNewer)
            } else if chain.draining && !active_verified {
                Some(Reason::DrainingUnproven)
            } else if chain.started_at >= window_start {
                Some(Reason::Window)
            } else if Some(index) == newest_before_window {
                Some(Reason::NewestBeforeWindow)
            } else {
                tiered[index]
            };
            let verdict = match (keep, chain.surplus_since) {
                (Some(reason), _) => Verdict::Keep(reason),
                (None, Some(since)) if now - since >= DELETE_GRACE => Verdict::Delete,
                (None, since) => Verdict::Surplus {
                    since: since.unwrap_or(now),
                },
            };
            (chain.full_seq, verdict)
        })
        .collect();
    // In the order given.
    verdicts.sort_by_key(|(seq, _)| {
        chains
            .iter()
            .position(|chain| chain.full_seq == *seq)
            .unwrap_or(usize::MAX)
    });
    verdicts
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(day: u32, hour: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, day, hour, 0, 0).unwrap()
    }

    fn chain(full_seq: i64, started_at: DateTime<Utc>) -> Chain {
        Chain {
            full_seq,
            started_at,
            verified: false,
            draining: false,
            surplus_since: None,
        }
    }

    fn verdict(verdicts: &[(i64, Verdict)], seq: i64) -> Verdict {
        verdicts.iter().find(|(s, _)| *s == seq).unwrap().1
    }

    #[test]
    fn bk_10_the_window_is_the_nodes_but_never_below_the_floor() {
        assert_eq!(keep_days(None, 7), 28);
        assert_eq!(keep_days(Some(3), 7), 7);
        assert_eq!(keep_days(Some(45), 7), 45);
    }

    #[test]
    fn bk_11_inside_the_window_and_the_newest_before_it_stay() {
        let now = at(30, 12);
        // Window of 7 days: from the 23rd at 12:00.
        let chains = vec![
            chain(1, at(1, 0)),
            chain(5, at(10, 0)),
            chain(9, at(20, 0)),
            chain(13, at(25, 0)),
            chain(17, at(29, 0)),
        ];
        let verdicts = judge(&chains, 7, Tiers::default(), true, now);
        assert_eq!(verdict(&verdicts, 17), Verdict::Keep(Reason::Newest));
        assert_eq!(verdict(&verdicts, 13), Verdict::Keep(Reason::Window));
        assert_eq!(
            verdict(&verdicts, 9),
            Verdict::Keep(Reason::NewestBeforeWindow)
        );
        assert_eq!(verdict(&verdicts, 5), Verdict::Surplus { since: now });
        assert_eq!(verdict(&verdicts, 1), Verdict::Surplus { since: now });
        // The verdicts come back in the order given.
        assert_eq!(
            verdicts.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
            vec![1, 5, 9, 13, 17]
        );
    }

    #[test]
    fn bk_12_a_surplus_chain_goes_a_day_after_it_was_first_found() {
        let now = at(30, 12);
        let mut old = chain(1, at(1, 0));
        old.surplus_since = Some(now - Duration::hours(23));
        let mut older = chain(2, at(2, 0));
        older.surplus_since = Some(now - Duration::hours(24));
        let chains = vec![old, older, chain(9, at(20, 0)), chain(17, at(29, 0))];
        let verdicts = judge(&chains, 7, Tiers::default(), true, now);
        assert_eq!(
            verdict(&verdicts, 1),
            Verdict::Surplus {
                since: now - Duration::hours(23)
            }
        );
        assert_eq!(verdict(&verdicts, 2), Verdict::Delete);
    }

    #[test]
    fn bk_12_the_newest_verified_chain_and_everything_newer_stay() {
        let now = at(30, 12);
        let mut verified = chain(1, at(1, 0));
        verified.verified = true;
        verified.surplus_since = Some(now - Duration::days(3));
        let mut between = chain(2, at(5, 0));
        between.surplus_since = Some(now - Duration::days(3));
        let mut unverified_old = chain(0, at(1, 0) - Duration::days(1));
        unverified_old.surplus_since = Some(now - Duration::days(3));
        let chains = vec![unverified_old, verified, between, chain(17, at(29, 0))];
        let verdicts = judge(&chains, 7, Tiers::default(), true, now);
        assert_eq!(
            verdict(&verdicts, 1),
            Verdict::Keep(Reason::VerifiedOrNewer)
        );
        assert_eq!(
            verdict(&verdicts, 2),
            Verdict::Keep(Reason::VerifiedOrNewer)
        );
        assert_eq!(verdict(&verdicts, 0), Verdict::Delete);
        // The newest stays even when it alone is left and old.
        let lone = vec![Chain {
            surplus_since: Some(now - Duration::days(30)),
            ..chain(3, at(1, 0))
        }];
        assert_eq!(
            judge(&lone, 7, Tiers::default(), true, now),
            vec![(3, Verdict::Keep(Reason::Newest))]
        );
    }

    #[test]
    fn bk_13_a_draining_space_stays_whole_until_the_active_space_verified() {
        let now = at(30, 12);
        let mut drained = chain(1, at(1, 0));
        drained.draining = true;
        drained.surplus_since = Some(now - Duration::days(5));
        let chains = vec![drained.clone(), chain(9, at(20, 0)), chain(17, at(29, 0))];
        assert_eq!(
            verdict(&judge(&chains, 7, Tiers::default(), false, now), 1),
            Verdict::Keep(Reason::DrainingUnproven)
        );
        assert_eq!(
            verdict(&judge(&chains, 7, Tiers::default(), true, now), 1),
            Verdict::Delete
        );
    }

    #[test]
    fn tiers_keep_the_newest_chain_of_each_recent_day_week_and_month() {
        let now = at(30, 12);
        let old = |seq, started| Chain {
            surplus_since: Some(now - Duration::days(2)),
            ..chain(seq, started)
        };
        // Two chains on the 10th (keep the later), one on the 3rd, one on February 20th.
        let february = Utc.with_ymd_and_hms(2026, 2, 20, 0, 0, 0).unwrap();
        let chains = vec![
            old(1, february),
            old(2, at(3, 0)),
            old(3, at(10, 1)),
            old(4, at(10, 9)),
            old(5, at(22, 0)),
            chain(17, at(29, 0)),
        ];
        // No tiers: only the newest, the window (none) and the newest before it (5) stay.
        let plain = judge(&chains, 7, Tiers::default(), true, now);
        assert_eq!(
            verdict(&plain, 5),
            Verdict::Keep(Reason::NewestBeforeWindow)
        );
        for seq in [1, 2, 3, 4] {
            assert_eq!(verdict(&plain, seq), Verdict::Delete, "{seq}");
        }
        // daily 3: the 29th, the 22nd, the 10th (its later chain, 4).
        let daily = judge(
            &chains,
            7,
            Tiers {
                daily: 3,
                ..Tiers::default()
            },
            true,
            now,
        );
        assert_eq!(verdict(&daily, 4), Verdict::Keep(Reason::Daily));
        assert_eq!(verdict(&daily, 3), Verdict::Delete);
        assert_eq!(verdict(&daily, 2), Verdict::Delete);
        // monthly 2: March's newest (17) and February's (1).
        let monthly = judge(
            &chains,
            7,
            Tiers {
                monthly: 2,
                ..Tiers::default()
            },
            true,
            now,
        );
        assert_eq!(verdict(&monthly, 1), Verdict::Keep(Reason::Monthly));
        assert_eq!(verdict(&monthly, 4), Verdict::Delete);
        // weekly 4: ISO weeks of the 29th (13), 22nd (12), 10th (11), 3rd (10).
        let weekly = judge(
            &chains,
            7,
            Tiers {
                weekly: 4,
                ..Tiers::default()
            },
            true,
            now,
        );
        assert_eq!(verdict(&weekly, 4), Verdict::Keep(Reason::Weekly));
        assert_eq!(verdict(&weekly, 2), Verdict::Keep(Reason::Weekly));
        assert_eq!(verdict(&weekly, 3), Verdict::Delete);
        assert_eq!(verdict(&weekly, 1), Verdict::Delete);
    }

    #[test]
    fn tiers_never_delete_what_the_safety_rules_keep() {
        let now = at(30, 12);
        let found_long_ago = Some(now - Duration::days(5));
        // Every chain is old and was found surplus days ago; a weekly tier of 1 alone would
        // keep only the newest.
        let mut verified = chain(2, at(2, 0));
        verified.verified = true;
        verified.surplus_since = found_long_ago;
        let mut after_verified = chain(3, at(4, 0));
        after_verified.surplus_since = found_long_ago;
        let mut draining = chain(1, at(1, 0));
        draining.draining = true;
        draining.surplus_since = found_long_ago;
        let chains = vec![draining, verified, after_verified, chain(17, at(29, 0))];
        let weekly = Tiers {
            weekly: 1,
            ..Tiers::default()
        };
        let verdicts = judge(&chains, 7, weekly, false, now);
        assert_eq!(verdict(&verdicts, 17), Verdict::Keep(Reason::Newest));
        assert_eq!(
            verdict(&verdicts, 2),
            Verdict::Keep(Reason::VerifiedOrNewer)
        );
        assert_eq!(
            verdict(&verdicts, 3),
            Verdict::Keep(Reason::VerifiedOrNewer)
        );
        assert_eq!(
            verdict(&verdicts, 1),
            Verdict::Keep(Reason::DrainingUnproven)
        );
    }

    #[test]
    fn a_chain_a_tier_lets_go_of_still_waits_a_day_before_it_goes() {
        let now = at(30, 12);
        // Kept by the daily tier until now: never found surplus.
        let chains = vec![
            chain(1, at(10, 0)),
            chain(5, at(20, 0)),
            chain(17, at(29, 0)),
        ];
        let daily = |days| Tiers {
            daily: days,
            ..Tiers::default()
        };
        assert_eq!(
            verdict(&judge(&chains, 7, daily(3), true, now), 1),
            Verdict::Keep(Reason::Daily)
        );
        // The tier shrinks to 2 days: chain 1 is surplus from now, and goes only a day later.
        assert_eq!(
            verdict(&judge(&chains, 7, daily(2), true, now), 1),
            Verdict::Surplus { since: now }
        );
        let found = vec![
            Chain {
                surplus_since: Some(now),
                ..chain(1, at(10, 0))
            },
            chain(5, at(20, 0)),
            chain(17, at(29, 0)),
        ];
        assert_eq!(
            verdict(
                &judge(&found, 7, daily(2), true, now + Duration::hours(23)),
                1
            ),
            Verdict::Surplus { since: now }
        );
        assert_eq!(
            verdict(&judge(&found, 7, daily(2), true, now + DELETE_GRACE), 1),
            Verdict::Delete
        );
    }
}
